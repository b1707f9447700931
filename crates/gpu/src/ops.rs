//! The non-matmul kernels of a transformer step: RMS norms, the residual
//! add, scales and soft-caps, rotary embeddings from the host's table, the
//! gated activations, and attention over an f16 KV cache on the device.
//!
//! Each kernel is the GPU twin of a CPU function of gpack-runtime (its
//! `ops` module and the model's attention), with the same semantics; the
//! runtime's `tests/gpu_ops.rs` compares them on random inputs.
//!
//! Why one WGSL body per file plus a prelude chosen per device: WGSL has no
//! preprocessor, and the two optional features change declarations, not
//! algorithms. With `shader-f16` the cache is read and written as
//! `vec2<f16>`; without it as `u32` through `unpack2x16float` /
//! `pack2x16float` (the bytes are the same: IEEE half pairs, little
//! endian). With subgroups a workgroup reduction starts with `subgroupAdd`
//! / `subgroupMax` and sums one partial per subgroup; without them it is a
//! shared-memory tree. [`sources`] lists every assembled variant, so the
//! naga translation test covers all of them.
//!
//! Rotary tables come from the host (`Rope::cos_sin` per position,
//! uploaded per step): YaRN, linear and LongRoPE scaling cost nothing here,
//! and the GPU rotates with exactly the CPU's angles.
//!
//! Arguments that do not fit the documented shapes are caller bugs and
//! panic (as the CPU ops assert); device failures are [`Error`]s.

use crate::{Error, Gpu};
use std::sync::Arc;

/// The device buffers the kernels read and write.
pub use wgpu::Buffer;

/// The kernels' shared helpers, after the variant's own lines.
const PRELUDE: &str = include_str!("../shaders/ops_prelude.wgsl");

/// One WGSL file of kernels (its body; [`source`] adds the prelude).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shader {
    /// `ops_norm.wgsl`: rmsnorm, rmsnorm_inplace, add_rmsnorm.
    Norm,
    /// `ops_elem.wgsl`: add, map (scale, soft-cap, divide), glu, add_rows.
    Elem,
    /// `ops_rope.wgsl`: rope.
    Rope,
    /// `ops_attn.wgsl`: kv_append, attention.
    Attn,
}

impl Shader {
    /// Every kernel file.
    pub const ALL: [Shader; 4] = [Shader::Norm, Shader::Elem, Shader::Rope, Shader::Attn];

    /// The file's name under `shaders/`.
    pub fn file(self) -> &'static str {
        match self {
            Shader::Norm => "ops_norm.wgsl",
            Shader::Elem => "ops_elem.wgsl",
            Shader::Rope => "ops_rope.wgsl",
            Shader::Attn => "ops_attn.wgsl",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Shader::Norm => include_str!("../shaders/ops_norm.wgsl"),
            Shader::Elem => include_str!("../shaders/ops_elem.wgsl"),
            Shader::Rope => include_str!("../shaders/ops_rope.wgsl"),
            Shader::Attn => include_str!("../shaders/ops_attn.wgsl"),
        }
    }
}

/// Which optional features a kernel's source uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// `shader-f16`: the KV cache as `vec2<f16>`.
    pub f16: bool,
    /// Subgroup reductions.
    pub subgroups: bool,
}

impl Variant {
    /// What `g` has enabled.
    pub fn of(g: &Gpu) -> Variant {
        Variant {
            f16: g.caps().f16,
            subgroups: g.caps().subgroups,
        }
    }

    /// All four combinations.
    pub fn all() -> [Variant; 4] {
        [(false, false), (true, false), (false, true), (true, true)]
            .map(|(f16, subgroups)| Variant { f16, subgroups })
    }

    fn tag(self) -> &'static str {
        match (self.f16, self.subgroups) {
            (false, false) => "base",
            (true, false) => "f16",
            (false, true) => "sg",
            (true, true) => "f16+sg",
        }
    }
}

/// The f16 cache's storage type and its two conversions.
const KV_F16: &str = "enable f16;
alias KV = vec2<f16>;
fn kv_get(w: KV) -> vec2<f32> { return vec2<f32>(w); }
fn kv_put(v: vec2<f32>) -> KV { return vec2<f16>(v); }
";

const KV_U32: &str = "alias KV = u32;
fn kv_get(w: KV) -> vec2<f32> { return unpack2x16float(w); }
fn kv_put(v: vec2<f32>) -> KV { return pack2x16float(v); }
";

const IDS: &str = "struct Ids {
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
";

/// Reductions over a 64-invocation workgroup with subgroup operations:
/// each subgroup's first invocation posts its subgroup's result, and every
/// invocation folds the 64 slots (no assumption about how invocations map
/// to subgroups).
const REDUCE_SG: &str = "    @builtin(subgroup_invocation_id) sid: u32,
}
var<workgroup> red: array<f32, 64>;
fn wg_sum(x: f32, ids: Ids) -> f32 {
    let s = subgroupAdd(x);
    workgroupBarrier();
    red[ids.lid] = select(0.0, s, ids.sid == 0u);
    workgroupBarrier();
    var t = 0.0;
    for (var i = 0u; i < 64u; i++) { t += red[i]; }
    return t;
}
fn wg_max(x: f32, ids: Ids) -> f32 {
    let s = subgroupMax(x);
    workgroupBarrier();
    red[ids.lid] = select(-3.40282347e38, s, ids.sid == 0u);
    workgroupBarrier();
    var t = -3.40282347e38;
    for (var i = 0u; i < 64u; i++) { t = max(t, red[i]); }
    return t;
}
";

/// The same reductions as a shared-memory tree.
const REDUCE_TREE: &str = "}
var<workgroup> red: array<f32, 64>;
fn wg_sum(x: f32, ids: Ids) -> f32 {
    workgroupBarrier();
    red[ids.lid] = x;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if ids.lid < s { red[ids.lid] += red[ids.lid + s]; }
        workgroupBarrier();
    }
    return red[0];
}
fn wg_max(x: f32, ids: Ids) -> f32 {
    workgroupBarrier();
    red[ids.lid] = x;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if ids.lid < s { red[ids.lid] = max(red[ids.lid], red[ids.lid + s]); }
        workgroupBarrier();
    }
    return red[0];
}
";

/// The WGSL source of `shader` for variant `v`: the variant's lines, the
/// prelude, the file's body.
pub fn source(shader: Shader, v: Variant) -> String {
    let mut s = String::new();
    s.push_str(if v.f16 { KV_F16 } else { KV_U32 });
    s.push_str(IDS);
    s.push_str(if v.subgroups { REDUCE_SG } else { REDUCE_TREE });
    s.push_str(PRELUDE);
    s.push_str(shader.body());
    s
}

/// Every kernel source this module can build: (label, WGSL), for each file
/// and variant (the translation test's list).
pub fn sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for sh in Shader::ALL {
        for v in Variant::all() {
            out.push((format!("{}[{}]", sh.file(), v.tag()), source(sh, v)));
        }
    }
    out
}

/// Invocations per workgroup of every kernel here.
const WG: u32 = 64;

fn pipeline(g: &Gpu, shader: Shader, entry: &str) -> Result<Arc<wgpu::ComputePipeline>, Error> {
    let v = Variant::of(g);
    g.pipeline(
        &format!("{}[{}]", shader.file(), v.tag()),
        &source(shader, v),
        entry,
    )
}

/// Workgroups for `n` groups: one row of at most the adapter's per-axis
/// limit, wrapping into y (kernels take `wg.x + wg.y · nwg.x`).
fn grid(g: &Gpu, n: u32) -> [u32; 3] {
    let max = g.caps().max_workgroups.max(1);
    if n <= max {
        [n.max(1), 1, 1]
    } else {
        let y = n.div_ceil(max);
        [n.div_ceil(y), y, 1]
    }
}

/// A kernel's uniform parameters: u32 words (f32 by their bits).
struct Params(Vec<u32>);

impl Params {
    fn new() -> Params {
        Params(Vec::new())
    }
    fn u(mut self, v: usize) -> Params {
        self.0
            .push(u32::try_from(v).expect("kernel argument exceeds u32"));
        self
    }
    fn f(mut self, v: f32) -> Params {
        self.0.push(v.to_bits());
        self
    }
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// Runs `entry` of `shader` with `bindings` (binding number, buffer) and
/// `params` at `param_binding`.
fn run(
    g: &Gpu,
    shader: Shader,
    entry: &str,
    bindings: &[(u32, &wgpu::Buffer)],
    param_binding: u32,
    params: &Params,
    groups: [u32; 3],
) -> Result<(), Error> {
    let p = pipeline(g, shader, entry)?;
    let ub = g.uniform(entry, params.bytes());
    let mut entries: Vec<wgpu::BindGroupEntry<'_>> = bindings
        .iter()
        .map(|&(binding, b)| wgpu::BindGroupEntry {
            binding,
            resource: b.as_entire_binding(),
        })
        .collect();
    entries.push(wgpu::BindGroupEntry {
        binding: param_binding,
        resource: ub.as_entire_binding(),
    });
    g.dispatch_entries(&p, &entries, groups)
}

fn elems(b: &wgpu::Buffer) -> usize {
    (b.size() / 4) as usize
}

/// A set of rows inside an f32 buffer: row `r` starts at
/// `off + (r / per_tok) · stride + (r % per_tok) · d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// How many rows.
    pub n: usize,
    /// Row width (elements).
    pub d: usize,
    /// Rows per token (heads; 1 for plain rows).
    pub per_tok: usize,
    /// First element of row 0.
    pub off: usize,
    /// Elements from one token to the next.
    pub stride: usize,
}

impl Rows {
    /// `n` contiguous rows of `d`.
    pub fn dense(n: usize, d: usize) -> Rows {
        Rows {
            n,
            d,
            per_tok: 1,
            off: 0,
            stride: d,
        }
    }

    /// The `heads` heads (`d` each, back to back from `off`) of each of
    /// `n_tok` token rows `stride` apart: the q or k heads of q‖k‖v.
    pub fn heads(n_tok: usize, heads: usize, d: usize, off: usize, stride: usize) -> Rows {
        Rows {
            n: n_tok * heads,
            d,
            per_tok: heads,
            off,
            stride,
        }
    }

    /// One past the last element read.
    fn end(&self) -> usize {
        if self.n == 0 {
            return 0;
        }
        let last = self.n - 1;
        self.off + last / self.per_tok * self.stride + (last % self.per_tok) * self.d + self.d
    }

    fn params(&self, has_w: bool, eps: f32) -> Params {
        Params::new()
            .u(self.n)
            .u(self.d)
            .u(self.per_tok)
            .u(self.off)
            .u(self.stride)
            .u(has_w as usize)
            .f(eps)
            .u(0)
    }
}

fn check_norm(rows: &Rows, src: &wgpu::Buffer, w: Option<&wgpu::Buffer>) {
    assert!(
        rows.per_tok > 0 && rows.d > 0,
        "rmsnorm: empty rows {rows:?}"
    );
    assert!(
        rows.end() <= elems(src),
        "rmsnorm: rows {rows:?} past the buffer"
    );
    if let Some(w) = w {
        assert!(elems(w) >= rows.d, "rmsnorm: weight shorter than a row");
    }
}

/// A 4-byte buffer for an optional binding the kernel does not read.
fn dummy(g: &Gpu) -> Result<&wgpu::Buffer, Error> {
    g.unused()
}

/// `dst[r] = src[row r] / sqrt(mean(row²) + eps) (· w)` for each row of
/// `rows` (read in `src`), written as dense rows of `rows.d` in `dst`
/// (gpack-runtime `ops::rmsnorm`; without `w`, `ops::rms_inv`'s scaling).
///
/// # Panics
/// If the rows do not fit `src`/`dst`.
pub fn rmsnorm(
    g: &Gpu,
    src: &wgpu::Buffer,
    rows: Rows,
    w: Option<&wgpu::Buffer>,
    eps: f32,
    dst: &wgpu::Buffer,
) -> Result<(), Error> {
    check_norm(&rows, src, w);
    assert!(elems(dst) >= rows.n * rows.d, "rmsnorm: dst too short");
    if rows.n == 0 {
        return Ok(());
    }
    let d = dummy(g)?;
    let params = rows.params(w.is_some(), eps);
    let groups = grid(g, rows.n as u32);
    let bind = [(0, src), (1, dst), (2, w.unwrap_or(d))];
    run(g, Shader::Norm, "rmsnorm", &bind, 3, &params, groups)
}

/// [`rmsnorm`] in place on the rows of `x` (the per-head q and k norms).
///
/// # Panics
/// If the rows do not fit `x`.
pub fn rmsnorm_inplace(
    g: &Gpu,
    x: &wgpu::Buffer,
    rows: Rows,
    w: Option<&wgpu::Buffer>,
    eps: f32,
) -> Result<(), Error> {
    check_norm(&rows, x, w);
    if rows.n == 0 {
        return Ok(());
    }
    let d = dummy(g)?;
    let params = rows.params(w.is_some(), eps);
    let groups = grid(g, rows.n as u32);
    let bind = [(1, x), (2, w.unwrap_or(d))];
    run(
        g,
        Shader::Norm,
        "rmsnorm_inplace",
        &bind,
        3,
        &params,
        groups,
    )
}

/// `x[r] += rmsnorm(o[r]) · w` for `n` rows of `d` (gpack-runtime
/// `ops::add_rmsnorm`: the residual through a post-norm).
///
/// # Panics
/// If `x`, `o` or `w` are too short.
#[allow(clippy::too_many_arguments)]
pub fn add_rmsnorm(
    g: &Gpu,
    x: &wgpu::Buffer,
    o: &wgpu::Buffer,
    w: &wgpu::Buffer,
    n: usize,
    d: usize,
    eps: f32,
) -> Result<(), Error> {
    let rows = Rows::dense(n, d);
    check_norm(&rows, o, Some(w));
    assert!(elems(x) >= n * d, "add_rmsnorm: x too short");
    if n == 0 {
        return Ok(());
    }
    let params = rows.params(true, eps);
    let groups = grid(g, n as u32);
    let bind = [(0, o), (1, x), (2, w)];
    run(g, Shader::Norm, "add_rmsnorm", &bind, 3, &params, groups)
}

fn elem_groups(g: &Gpu, n: usize) -> [u32; 3] {
    grid(g, (n as u32).div_ceil(WG))
}

/// `x[i] += a · o[i]` for the first `n` elements (the residual add; `a` is
/// 1, or granite's `residual_scale`).
///
/// # Panics
/// If `x` or `o` hold fewer than `n` values.
pub fn add(g: &Gpu, x: &wgpu::Buffer, o: &wgpu::Buffer, n: usize, a: f32) -> Result<(), Error> {
    assert!(elems(x) >= n && elems(o) >= n, "add: buffers too short");
    if n == 0 {
        return Ok(());
    }
    let params = Params::new().u(n).u(0).f(a).u(0);
    run(
        g,
        Shader::Elem,
        "add",
        &[(0, o), (1, x)],
        3,
        &params,
        elem_groups(g, n),
    )
}

/// `x[t][j] += b[j]` for `n` rows of `width` values each (a bias broadcast over token rows: qwen2's q/k/v biases).
///
/// # Panics
/// If `x` holds fewer than `n · width` values or `b` fewer than `width`.
pub fn add_bias(
    g: &Gpu,
    x: &wgpu::Buffer,
    b: &wgpu::Buffer,
    n: usize,
    width: usize,
) -> Result<(), Error> {
    assert!(
        elems(x) >= n * width && elems(b) >= width,
        "add_bias: buffers too short"
    );
    if n * width == 0 {
        return Ok(());
    }
    let params = Params::new().u(n * width).u(width).f(1.0).u(0);
    run(
        g,
        Shader::Elem,
        "add",
        &[(0, b), (1, x)],
        3,
        &params,
        elem_groups(g, n * width),
    )
}

/// `dst[t] += w · src[i]` for each `(i, t, w)` of `rows`, rows of `d`
/// values (the routed experts' outputs, weighted, into their tokens'
/// rows: gpack-runtime `Model::moe`). The destination rows must be
/// distinct (one dispatch, no ordering between pairs).
///
/// # Panics
/// If a row lies past its buffer or two pairs share a destination row.
pub fn add_rows(
    g: &Gpu,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    d: usize,
    rows: &[(usize, usize, f32)],
) -> Result<(), Error> {
    if rows.is_empty() || d == 0 {
        return Ok(());
    }
    let mut seen = std::collections::HashSet::with_capacity(rows.len());
    let mut words = Vec::with_capacity(rows.len() * 3);
    for &(i, t, w) in rows {
        assert!(
            (i + 1) * d <= elems(src) && (t + 1) * d <= elems(dst),
            "add_rows: row past the buffers"
        );
        assert!(seen.insert(t), "add_rows: destination row {t} twice");
        words.extend([
            u32::try_from(i).expect("row index exceeds u32"),
            u32::try_from(t).expect("row index exceeds u32"),
            w.to_bits(),
        ]);
    }
    let list = g.upload("add_rows pairs", bytemuck::cast_slice(&words))?;
    let n = rows.len() * d;
    let params = Params::new().u(n).u(0).f(0.0).u(d);
    run(
        g,
        Shader::Elem,
        "add_rows",
        &[(0, src), (1, dst), (2, &list)],
        3,
        &params,
        elem_groups(g, n),
    )
}

/// An element-wise map of [`map`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Map {
    /// `x · s` (the embedding rows' scale, granite's residual scale).
    Scale(f32),
    /// `cap · tanh(x / cap)` (gemma's final-logit soft-cap).
    Softcap(f32),
    /// `x / d` (granite's `logit_scale`).
    Divide(f32),
}

/// `x[i] = f(x[i])` for the first `n` elements.
///
/// # Panics
/// If `x` holds fewer than `n` values.
pub fn map(g: &Gpu, x: &wgpu::Buffer, n: usize, f: Map) -> Result<(), Error> {
    assert!(elems(x) >= n, "map: buffer too short");
    if n == 0 {
        return Ok(());
    }
    let (mode, a) = match f {
        Map::Scale(s) => (0, s),
        Map::Softcap(c) => (1, c),
        Map::Divide(d) => (2, d),
    };
    let params = Params::new().u(n).u(mode).f(a).u(0);
    run(
        g,
        Shader::Elem,
        "map",
        &[(1, x)],
        3,
        &params,
        elem_groups(g, n),
    )
}

/// The activation of a gated FFN ([`glu`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// SwiGLU: `silu(g) · u`, `silu(g) = g / (1 + exp(-g))`.
    Silu,
    /// GeGLU with tanh GELU (`gelu_pytorch_tanh`).
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `(clamp(u, ±7) + 1) · g' · sigmoid(1.702 g')`,
    /// `g' = min(g, 7)`.
    SwigluOai,
}

/// `h[t][j] = act(gu[t][j]) · gu[t][ff + j]` for `n` rows of gate‖up
/// (`[n][2 · ff]`) into `h` (`[n][ff]`) (gpack-runtime `model::step::glu`).
///
/// # Panics
/// If `gu` or `h` are too short.
pub fn glu(
    g: &Gpu,
    act: Glu,
    gu: &wgpu::Buffer,
    n: usize,
    ff: usize,
    h: &wgpu::Buffer,
) -> Result<(), Error> {
    assert!(
        elems(gu) >= n * 2 * ff && elems(h) >= n * ff,
        "glu: buffers too short"
    );
    if n * ff == 0 {
        return Ok(());
    }
    let mode = match act {
        Glu::Silu => 0,
        Glu::GeluTanh => 1,
        Glu::SwigluOai => 2,
    };
    let params = Params::new().u(n * ff).u(mode).f(0.0).u(ff);
    run(
        g,
        Shader::Elem,
        "glu",
        &[(0, gu), (1, h)],
        3,
        &params,
        elem_groups(g, n * ff),
    )
}

/// Where the heads [`rope`] rotates are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeArgs {
    /// Token rows.
    pub n_tok: usize,
    /// Heads per token, back to back from `off` (q's and then k's heads of
    /// q‖k‖v are one run of `n_head + n_head_kv`).
    pub n_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// Rotated dims per head (≤ head_dim, even); the rest stay.
    pub n_rot: usize,
    /// NeoX pairing `(i, i + n_rot/2)` instead of `(2i, 2i + 1)`.
    pub neox: bool,
    /// First element of token 0's first head.
    pub off: usize,
    /// Elements from one token row to the next.
    pub stride: usize,
}

/// Rotates the heads `a` names in `x` with `cs` (`[n_tok][n_rot]`: per
/// token the `(cos, sin)` pairs of gpack-runtime's `Rope::cos_sin` for its
/// position) (`Rope::apply`).
///
/// # Panics
/// If the heads or the table do not fit, or `n_rot` is odd or wider than a head.
pub fn rope(g: &Gpu, x: &wgpu::Buffer, cs: &wgpu::Buffer, a: RopeArgs) -> Result<(), Error> {
    assert!(
        a.n_rot.is_multiple_of(2) && a.n_rot <= a.head_dim,
        "rope: n_rot {} vs head_dim {}",
        a.n_rot,
        a.head_dim
    );
    let pairs = a.n_tok * a.n_heads * (a.n_rot / 2);
    if pairs == 0 {
        return Ok(());
    }
    let rows = Rows::heads(a.n_tok, a.n_heads, a.head_dim, a.off, a.stride);
    assert!(rows.end() <= elems(x), "rope: heads past the buffer");
    assert!(elems(cs) >= a.n_tok * a.n_rot, "rope: table too short");
    let params = Params::new()
        .u(a.n_tok)
        .u(a.n_heads)
        .u(a.head_dim)
        .u(a.n_rot)
        .u(a.neox as usize)
        .u(a.off)
        .u(a.stride)
        .u(0);
    run(
        g,
        Shader::Rope,
        "rope",
        &[(1, x), (2, cs)],
        3,
        &params,
        elem_groups(g, pairs),
    )
}

/// One layer's KV cache on the device: keys and values as IEEE half
/// floats, `[n_head_kv][n_ctx][dim]` each (a position's head row
/// contiguous), as llama.cpp keeps an f16 cache.
#[derive(Debug)]
pub struct KvLayer {
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    n_ctx: usize,
    n_head_kv: usize,
    hd: usize,
    hdv: usize,
}

impl KvLayer {
    /// A zeroed cache of `n_ctx` positions for `n_head_kv` heads of `hd`
    /// key and `hdv` value dims (both even, at most 512).
    ///
    /// # Panics
    /// If a head dim is odd, zero or above 512, or there are no heads.
    pub fn new(
        g: &Gpu,
        n_ctx: usize,
        n_head_kv: usize,
        hd: usize,
        hdv: usize,
    ) -> Result<KvLayer, Error> {
        for d in [hd, hdv] {
            assert!(
                d > 0 && d.is_multiple_of(2) && d <= 512,
                "KvLayer: head dim {d} must be even, 2..=512"
            );
        }
        assert!(n_head_kv > 0, "KvLayer: no KV heads");
        let bytes = |d: usize| (n_head_kv * n_ctx.max(1) * d * 2) as u64;
        Ok(KvLayer {
            k: g.storage("kv.k", bytes(hd))?,
            v: g.storage("kv.v", bytes(hdv))?,
            n_ctx,
            n_head_kv,
            hd,
            hdv,
        })
    }

    /// The keys: `[n_head_kv][n_ctx][hd]` f16.
    pub fn keys(&self) -> &wgpu::Buffer {
        &self.k
    }

    /// The values: `[n_head_kv][n_ctx][hdv]` f16.
    pub fn values(&self) -> &wgpu::Buffer {
        &self.v
    }

    /// Positions held.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Stores the k and v heads of `n_tok` rows of `src` (f32, rows
    /// `stride` apart; each row's `n_head_kv · hd` keys at `k_off` and
    /// values at `v_off`) at positions `pos[t]` (u32), rounded to f16 (the
    /// CPU's `Sequence::put_keys`/`put_values` on an f16 cache). Positions
    /// at or past `n_ctx` are skipped.
    ///
    /// # Panics
    /// If the rows do not fit `src` or `pos` is too short.
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &self,
        g: &Gpu,
        src: &wgpu::Buffer,
        pos: &wgpu::Buffer,
        n_tok: usize,
        k_off: usize,
        v_off: usize,
        stride: usize,
    ) -> Result<(), Error> {
        if n_tok == 0 {
            return Ok(());
        }
        let last = (n_tok - 1) * stride;
        assert!(
            last + k_off + self.n_head_kv * self.hd <= elems(src)
                && last + v_off + self.n_head_kv * self.hdv <= elems(src),
            "append: rows past the buffer"
        );
        assert!(elems(pos) >= n_tok, "append: too few positions");
        let params = Params::new()
            .u(n_tok)
            .u(self.n_head_kv)
            .u(self.hd)
            .u(self.hdv)
            .u(self.n_ctx)
            .u(k_off)
            .u(v_off)
            .u(stride);
        let n = n_tok * self.n_head_kv * (self.hd.max(self.hdv) / 2);
        run(
            g,
            Shader::Attn,
            "kv_append",
            &[(0, src), (2, pos), (4, &self.k), (5, &self.v)],
            3,
            &params,
            elem_groups(g, n),
        )
    }
}

/// What [`attention`] computes, besides the cache.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnArgs {
    /// Query rows (tokens of one sequence).
    pub n_tok: usize,
    /// Query heads (a multiple of the cache's KV heads).
    pub n_head: usize,
    /// First element of token 0's first query head in the query buffer.
    pub q_off: usize,
    /// Elements from one token's queries to the next.
    pub q_stride: usize,
    /// Multiplier of `q · k` (the config's `attn_scale`).
    pub scale: f32,
    /// Logit soft-cap `cap · tanh(s / cap)`.
    pub softcap: Option<f32>,
    /// Sliding window: a row at position p sees `p + 1 - window ..= p`.
    pub window: Option<usize>,
}

/// Causal attention of `n_tok` query rows over `kv`: for row `t` at
/// position `pos[t]` and head `h`, the softmax of the (soft-capped) scaled
/// scores against positions `start ..= pos[t]` (`start` from the window),
/// with `sinks[h]` as one more logit in the denominator when given, times
/// the values; into `out` (`[n_tok][n_head · hdv]`). Query head `h` reads
/// KV head `h / (n_head / n_head_kv)`. The positions up to `pos[t]` must
/// have been appended (gpack-runtime `Model::attention`).
///
/// # Panics
/// If the shapes do not fit, or `n_head` is not a multiple of the KV heads.
pub fn attention(
    g: &Gpu,
    kv: &KvLayer,
    q: &wgpu::Buffer,
    pos: &wgpu::Buffer,
    a: AttnArgs,
    sinks: Option<&wgpu::Buffer>,
    out: &wgpu::Buffer,
) -> Result<(), Error> {
    assert!(
        a.n_head > 0 && a.n_head.is_multiple_of(kv.n_head_kv),
        "attention: {} heads over {} KV heads",
        a.n_head,
        kv.n_head_kv
    );
    if a.n_tok == 0 {
        return Ok(());
    }
    let rows = Rows::heads(a.n_tok, a.n_head, kv.hd, a.q_off, a.q_stride);
    assert!(rows.end() <= elems(q), "attention: queries past the buffer");
    assert!(elems(pos) >= a.n_tok, "attention: too few positions");
    assert!(
        elems(out) >= a.n_tok * a.n_head * kv.hdv,
        "attention: out too short"
    );
    if let Some(s) = sinks {
        assert!(elems(s) >= a.n_head, "attention: a sink per head");
    }
    if let Some(c) = a.softcap {
        assert!(c > 0.0, "attention: soft-cap {c} must be positive");
    }
    let d = dummy(g)?;
    let params = Params::new()
        .u(a.n_tok)
        .u(a.n_head)
        .u(kv.n_head_kv)
        .u(kv.hd)
        .u(kv.hdv)
        .u(kv.n_ctx)
        .u(a.q_off)
        .u(a.q_stride)
        .u(a.window.unwrap_or(0))
        .u(sinks.is_some() as usize)
        .f(a.scale)
        .f(a.softcap.unwrap_or(0.0));
    let groups = [a.n_head as u32, a.n_tok as u32, 1];
    run(
        g,
        Shader::Attn,
        "attention",
        &[
            (0, q),
            (1, out),
            (2, pos),
            (7, &kv.k),
            (8, &kv.v),
            (9, sinks.unwrap_or(d)),
        ],
        6,
        &params,
        groups,
    )
}
