//! A sequence's KV cache: keys transposed in blocks of [`KB`] positions,
//! values by position, each as f32, f16, or ggml's q8_0/q4_0 blocks
//! ([`KvType`]; the quantized layouts are `gpack_quant::kernels::attn::kvq`'s).

use crate::config::Config;
use crate::ops;
use gpack_quant::kernels::attn::kvq::{self, KvQuant};

/// The type a KV cache keeps keys or values in (`--kv`, `--kv-k`, `--kv-v`;
/// Python's `kv=`): the one list of choices and their names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    /// 4 bytes a value.
    F32,
    /// IEEE half floats, 2 bytes a value (the default, as llama.cpp's).
    #[default]
    F16,
    /// ggml's q8_0 blocks along each head: 34 bytes per 32 values.
    Q8_0,
    /// ggml's q4_0 blocks along each head: 18 bytes per 32 values.
    Q4_0,
}

impl KvType {
    /// Every type, in the order `--help` lists them.
    pub const ALL: [KvType; 4] = [KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0];
    /// Its name (`f32`, `f16`, `q8_0`, `q4_0`).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }
    /// The quantized block type, if it is one.
    pub fn quant(self) -> Option<KvQuant> {
        match self {
            KvType::Q8_0 => Some(KvQuant::Q8_0),
            KvType::Q4_0 => Some(KvQuant::Q4_0),
            _ => None,
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<KvType, String> {
        KvType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown KV cache type {s:?}: choose f32, f16, q8_0 or q4_0"))
    }
}

/// The types of a KV cache's keys and values (llama.cpp's `-ctk`/`-ctv`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KvTypes {
    /// Keys.
    pub k: KvType,
    /// Values.
    pub v: KvType,
}

impl KvTypes {
    /// f16 keys and values (the default).
    pub const F16: KvTypes = KvTypes::both(KvType::F16);
    /// f32 keys and values (the precision of the f32 references).
    pub const F32: KvTypes = KvTypes::both(KvType::F32);
    /// `t` for keys and values.
    pub const fn both(t: KvType) -> KvTypes {
        KvTypes { k: t, v: t }
    }
    /// Whether either is quantized.
    pub fn quantized(self) -> bool {
        self.k.quant().is_some() || self.v.quant().is_some()
    }
}

impl std::fmt::Display for KvTypes {
    /// `q8_0` when both are, else `K q8_0 / V f16`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.k == self.v {
            write!(f, "{}", self.k)
        } else {
            write!(f, "K {} / V {}", self.k, self.v)
        }
    }
}

/// Whether a model of config `c` can keep its KV cache as `t`: a
/// quantized cache needs a per-head cache (not MLA's compressed latent,
/// whose values are the keys' first dims, read by the f32/f16 transposed
/// sums only) and heads of at most `kvq::MAX_HEAD`.
pub(super) fn check_types(c: &Config, t: KvTypes) -> crate::Result<()> {
    if !t.quantized() {
        return Ok(());
    }
    let err = |why| {
        Err(crate::Error::KvType {
            kv: t.to_string(),
            why,
        })
    };
    if c.mla.is_some() {
        return err("DeepSeek's latent (MLA) cache is kept as f32 or f16 only");
    }
    if c.head_dim.max(c.head_dim_v) > kvq::MAX_HEAD {
        return err("heads over 1024 dims are not quantized");
    }
    Ok(())
}

/// Key or value storage of a sequence: f32, IEEE half floats (as
/// llama.cpp keeps its cache; half the bytes for attention to stream), or
/// ggml blocks (`kvq`'s layouts: keys as transposed blocks of [`KB`]
/// positions, values as one block row per position and head).
#[derive(Debug)]
pub(super) enum Kv {
    F32(Vec<f32>),
    F16(Vec<u16>),
    Q(KvQuant, Vec<u8>),
    /// f32 values quantized and dequantized when written: the values a
    /// `Q` cache's kernels read, summed by the f32 kernels (the test
    /// reference of [`LoadOptions::kv_dequantized`](crate::LoadOptions)).
    Deq(KvQuant, Vec<f32>),
}

impl Kv {
    /// A cache of `len` values in rows of `row` (the head size): f32/f16
    /// hold `len` elements; a quantized one the same rows as blocks
    /// (`keys`: `[head][KB]` transposed blocks, else rows).
    pub(super) fn new(t: KvType, len: usize, row: usize, keys: bool, deq: bool) -> Kv {
        match t.quant() {
            Some(q) if deq => Kv::Deq(q, vec![0.0; len]),
            None if t == KvType::F16 => Kv::F16(vec![0; len]),
            None => Kv::F32(vec![0.0; len]),
            Some(q) => {
                let bytes = if row == 0 {
                    0
                } else if keys {
                    len / (row * KB) * kvq::key_block_bytes(q, row, KB)
                } else {
                    len / row * kvq::row_bytes(q, row)
                };
                Kv::Q(q, vec![0; bytes])
            }
        }
    }
    pub(super) fn bytes(&self) -> usize {
        match self {
            Kv::F32(v) | Kv::Deq(_, v) => v.len() * 4,
            Kv::F16(v) => v.len() * 2,
            Kv::Q(_, v) => v.len(),
        }
    }
    /// [`ops::scores_transposed_group`] over one block of keys `kt` (a
    /// range of this cache's elements: `[head_dim][KB]`), `n` positions
    /// from `start` in the block, for the queries `q` (`d` each), query
    /// `i`'s scores at `sc[i · ld ..]`; a quantized cache's block is read
    /// by `kvq::scores_group`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scores_group(
        &self,
        q: &[f32],
        d: usize,
        scale: f32,
        kt: std::ops::Range<usize>,
        start: usize,
        n: usize,
        sc: &mut [f32],
        ld: usize,
    ) {
        match self {
            Kv::F32(k) | Kv::Deq(_, k) => {
                ops::scores_transposed_group(q, d, scale, &k[kt], KB, start, n, sc, ld)
            }
            Kv::F16(k) => ops::scores_transposed_group(q, d, scale, &k[kt], KB, start, n, sc, ld),
            Kv::Q(t, k) => {
                let bb = kvq::key_block_bytes(*t, d, KB);
                let b0 = kt.start / (d * KB) * bb;
                kvq::scores_group(*t, q, d, scale, &k[b0..b0 + bb], KB, start, n, sc, ld)
            }
        }
    }
    /// [`ops::weighted_rows_group`] over the value rows in `v` (a range of
    /// this cache's elements, rows `stride` apart): probability rows
    /// `a[i · lda ..][..len]`, outputs `w` wide; a quantized cache's rows
    /// (`stride == w`) are read by `kvq::weighted_group`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn weighted_group(
        &self,
        a: &[f32],
        lda: usize,
        len: usize,
        v: std::ops::Range<usize>,
        stride: usize,
        out: &mut [f32],
        w: usize,
    ) {
        match self {
            Kv::F32(x) | Kv::Deq(_, x) => {
                ops::weighted_rows_group(a, lda, len, &x[v], stride, out, w)
            }
            Kv::F16(x) => ops::weighted_rows_group(a, lda, len, &x[v], stride, out, w),
            Kv::Q(t, x) => {
                let rb = kvq::row_bytes(*t, stride);
                let r0 = v.start / stride * rb;
                kvq::weighted_group(*t, a, lda, len, &x[r0..r0 + len * rb], out, w)
            }
        }
    }
    /// [`ops::weighted_transposed_group`] over one block of keys `kt` (a
    /// range of this cache: `[head_dim][KB]`), `n` positions from `start`
    /// in the block: `out[i·w + j] += Σ a[i·lda + p] · kt[j][start + p]`
    /// (MLA, whose cache is f32 or f16: a quantized one is refused at load).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn weighted_transposed_group(
        &self,
        a: &[f32],
        lda: usize,
        kt: std::ops::Range<usize>,
        start: usize,
        n: usize,
        out: &mut [f32],
        w: usize,
    ) {
        match self {
            Kv::F32(k) | Kv::Deq(_, k) => {
                ops::weighted_transposed_group(a, lda, &k[kt], KB, start, n, out, w)
            }
            Kv::F16(k) => ops::weighted_transposed_group(a, lda, &k[kt], KB, start, n, out, w),
            Kv::Q(..) => unreachable!("MLA refuses a quantized KV cache at load"),
        }
    }
    /// Writes the head `src` at element `at` (a row of `src.len()`).
    pub(super) fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Kv::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            Kv::F16(v) => v[at..at + src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &x)| *d = half::f16::from_f32(x).to_bits()),
            Kv::Q(t, v) => {
                let rb = kvq::row_bytes(*t, src.len());
                let r0 = at / src.len() * rb;
                kvq::quantize_row(*t, src, &mut v[r0..r0 + rb]);
            }
            Kv::Deq(t, v) => round_trip(*t, src, &mut v[at..at + src.len()]),
        }
    }
    /// Writes the head `k` (`d` dims) of position `j` in the transposed
    /// key block that starts at element `base` (`[d][KB]`).
    pub(super) fn write_key(&mut self, base: usize, j: usize, k: &[f32]) {
        match self {
            Kv::F32(v) => k
                .iter()
                .enumerate()
                .for_each(|(d, &x)| v[base + d * KB + j] = x),
            Kv::F16(v) => k
                .iter()
                .enumerate()
                .for_each(|(d, &x)| v[base + d * KB + j] = half::f16::from_f32(x).to_bits()),
            Kv::Q(t, v) => {
                let d = k.len();
                let bb = kvq::key_block_bytes(*t, d, KB);
                let b0 = base / (d * KB) * bb;
                kvq::put_key(*t, k, &mut v[b0..b0 + bb], KB, j);
            }
            Kv::Deq(t, v) => {
                let mut x = vec![0f32; k.len()];
                round_trip(*t, k, &mut x);
                x.iter()
                    .enumerate()
                    .for_each(|(d, &x)| v[base + d * KB + j] = x);
            }
        }
    }
}

/// `x` quantized as a head of `t` and dequantized into `out`.
fn round_trip(t: KvQuant, x: &[f32], out: &mut [f32]) {
    let mut row = vec![0u8; kvq::row_bytes(t, x.len())];
    kvq::quantize_row(t, x, &mut row);
    kvq::dequantize_row(t, &row, out);
}

/// One sequence's KV cache.
#[derive(Debug)]
pub struct Sequence {
    /// Positions the cache holds.
    pub(super) n_ctx: usize,
    /// Next position.
    pub(super) pos: usize,
    /// `[n_layer][n_head_kv][n_ctx / KB][head_dim][KB]` keys (rotated),
    /// transposed within blocks of [`KB`] positions so that q·K over a block
    /// runs over contiguous positions (vectorizes without horizontal sums;
    /// see `ops::scores_transposed`), and blocked so that one position's
    /// write and a short context's read touch a few pages, not `head_dim`
    /// pages `n_ctx · 4` bytes apart (see [`KB`]).
    pub(super) k_cache: Kv,
    /// `[n_layer][n_head_kv][n_ctx][head_dim_v]` values: one head's rows
    /// contiguous, as attention reads them ([`Sequence::v_at`]).
    pub(super) v_cache: Kv,
    /// The GPU blocks' f16 caches, made at the sequence's first step on a
    /// model loaded for a GPU.
    pub(super) gpu: Option<super::gpu::GpuKv>,
}

/// Positions per block of the transposed key cache.
///
/// Blocks, not one `[head_dim][n_ctx]` plane per head: with a plane, the
/// keys of a position are written `n_ctx · 4` bytes apart (4 KiB at a
/// 1024-token context) and every (row, head) score pass reads its rows as
/// far apart, which makes the key writes and `scores_transposed` a large
/// share of a batched server step (figures: docs/perf-history/kernels.md).
pub const KB: usize = 64;

impl Sequence {
    /// Index of key dim `d` of kv head `kvh`, layer `l`, position `p`.
    #[inline]
    pub(super) fn k_at(&self, c: &Config, l: usize, kvh: usize, d: usize, p: usize) -> usize {
        let nb = self.n_ctx.div_ceil(KB);
        ((l * c.n_head_kv + kvh) * nb + p / KB) * c.head_dim * KB + d * KB + p % KB
    }

    /// Writes the values `v` (`[v_dim]`) of position `p` in layer `l`.
    #[inline]
    pub(super) fn put_values(&mut self, c: &Config, l: usize, p: usize, v: &[f32]) {
        for (kvh, vh) in v.chunks_exact(c.head_dim_v).enumerate() {
            self.v_cache.write(self.v_at(c, l, kvh, p), vh);
        }
    }

    /// Index of the first value of kv head `kvh`, layer `l`, position `p`:
    /// each head's values are one run of `n_ctx` rows of `head_dim_v`.
    ///
    /// One run per head, not `[n_layer][n_ctx][v_dim]` rows: with whole rows,
    /// a (row, KV head) unit of attention reads 128 bytes of every 1 KiB row
    /// (a 1B body's 8 KV heads of 64), and at long contexts the weighted sums
    /// of the values cost several times what the scores do for as many
    /// multiply-adds (figures: docs/perf-history/kernels.md).
    #[inline]
    pub(super) fn v_at(&self, c: &Config, l: usize, kvh: usize, p: usize) -> usize {
        ((l * c.n_head_kv + kvh) * self.n_ctx + p) * c.head_dim_v
    }

    /// Writes the rotated keys `k` (`[n_head_kv][head_dim]`) of position `p`
    /// in layer `l`.
    #[inline]
    pub(super) fn put_keys(&mut self, c: &Config, l: usize, p: usize, k: &[f32]) {
        for (kvh, kh) in k.chunks_exact(c.head_dim).enumerate() {
            let base = self.k_at(c, l, kvh, 0, p / KB * KB);
            self.k_cache.write_key(base, p % KB, kh);
        }
    }

    /// Tokens in the cache (= the next position).
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// Forgets the cache after `pos` tokens (keeps the prefix).
    pub fn truncate(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }
    /// Empties the cache (the buffers are kept for the next sequence).
    pub fn reset(&mut self) {
        self.pos = 0;
    }
    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.k_cache.bytes() + self.v_cache.bytes()
    }
}

/// Bytes of the run `r` of elements (or, for a quantized cache, of the
/// blocks that hold it) in `kv`: the unit a prefix-cache block copies.
fn run_bytes(kv: &Kv, r: std::ops::Range<usize>, row: usize, keys: bool) -> std::ops::Range<usize> {
    match kv {
        Kv::F32(_) | Kv::Deq(..) => r.start * 4..r.end * 4,
        Kv::F16(_) => r.start * 2..r.end * 2,
        Kv::Q(t, _) if keys => {
            let bb = kvq::key_block_bytes(*t, row, KB);
            r.start / (row * KB) * bb..r.end.div_ceil(row * KB) * bb
        }
        Kv::Q(t, _) => {
            let rb = kvq::row_bytes(*t, row);
            r.start / row * rb..r.end / row * rb
        }
    }
}

impl Kv {
    /// The cache as bytes (little-endian values, or the blocks as stored).
    fn as_bytes(&self) -> &[u8] {
        match self {
            Kv::F32(v) | Kv::Deq(_, v) => bytemuck::cast_slice(v),
            Kv::F16(v) => bytemuck::cast_slice(v),
            Kv::Q(_, v) => v,
        }
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Kv::F32(v) | Kv::Deq(_, v) => bytemuck::cast_slice_mut(v),
            Kv::F16(v) => bytemuck::cast_slice_mut(v),
            Kv::Q(_, v) => v,
        }
    }
}

impl Sequence {
    /// The byte runs of block `b` (positions `b·KB .. (b+1)·KB`): per layer
    /// and KV head, its transposed key block, then per layer and KV head its
    /// `KB` value rows. Each run is contiguous in the cache (keys are
    /// blocked by [`KB`] positions, values are one run per head), so a
    /// block is a list of copies, not a gather of positions.
    fn block_runs(
        &self,
        c: &Config,
        b: usize,
    ) -> (Vec<std::ops::Range<usize>>, Vec<std::ops::Range<usize>>) {
        let layers = if self.k_cache.bytes() == 0 {
            0
        } else {
            c.n_layer
        };
        let mut keys = Vec::with_capacity(layers * c.n_head_kv);
        let mut values = Vec::new();
        for l in 0..layers {
            for kvh in 0..c.n_head_kv {
                let k0 = self.k_at(c, l, kvh, 0, b * KB);
                keys.push(run_bytes(
                    &self.k_cache,
                    k0..k0 + c.head_dim * KB,
                    c.head_dim,
                    true,
                ));
                if self.v_cache.bytes() > 0 {
                    let v0 = self.v_at(c, l, kvh, b * KB);
                    values.push(run_bytes(
                        &self.v_cache,
                        v0..v0 + KB * c.head_dim_v,
                        c.head_dim_v,
                        false,
                    ));
                }
            }
        }
        (keys, values)
    }

    /// Bytes of one block of [`KB`] positions ([`Sequence::export_block`]).
    pub fn block_bytes(&self, c: &Config) -> usize {
        if self.n_ctx < KB {
            return 0;
        }
        let (k, v) = self.block_runs(c, 0);
        k.iter().chain(&v).map(|r| r.len()).sum()
    }

    /// The keys and values of block `b` (positions `b·KB .. (b+1)·KB`, all
    /// held: `(b + 1)·KB <= pos`), as [`Sequence::import_block`] takes them
    /// back, in a sequence of the same model and KV types.
    pub fn export_block(&self, c: &Config, b: usize) -> Vec<u8> {
        assert!((b + 1) * KB <= self.pos, "block {b} is not full");
        let (k, v) = self.block_runs(c, b);
        let mut out = Vec::with_capacity(self.block_bytes(c));
        for r in k {
            out.extend_from_slice(&self.k_cache.as_bytes()[r]);
        }
        for r in v {
            out.extend_from_slice(&self.v_cache.as_bytes()[r]);
        }
        out
    }

    /// Writes block `b` from `bytes` ([`Sequence::export_block`]'s) and
    /// makes the cache end after it: the sequence must hold the blocks
    /// before it (`pos >= b·KB`), and `bytes` must be one block of this
    /// model with these KV types (`block_bytes` long; the caller checked
    /// where they came from).
    pub fn import_block(&mut self, c: &Config, b: usize, bytes: &[u8]) {
        assert!(b * KB <= self.pos, "block {b} follows a gap");
        assert!((b + 1) * KB <= self.n_ctx, "block {b} is past the context");
        assert_eq!(bytes.len(), self.block_bytes(c), "a block of another shape");
        let (k, v) = self.block_runs(c, b);
        let mut at = 0;
        for r in k {
            let n = r.len();
            self.k_cache.as_bytes_mut()[r].copy_from_slice(&bytes[at..at + n]);
            at += n;
        }
        for r in v {
            let n = r.len();
            self.v_cache.as_bytes_mut()[r].copy_from_slice(&bytes[at..at + n]);
            at += n;
        }
        self.pos = (b + 1) * KB;
    }

    /// Whether the KV cache lives on the host (a model all on the GPU keeps
    /// it on the device, where the prefix cache does not reach).
    pub fn on_host(&self) -> bool {
        self.k_cache.bytes() > 0 && self.gpu.is_none()
    }
}
