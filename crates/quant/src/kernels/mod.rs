//! Matrix-vector and small matrix-matrix kernels over [`NativeView`]s.
//!
//! # Integer layouts
//!
//! Activations are quantized to int8 per block of 32 ([`QuantizedActivations`]:
//! `d = amax / 127`, `q = roundf(x / d)` computed as `x * (1/d)` like ggml's
//! `quantize_row_q8_0`, and `d` then rounded to f16 as ggml stores it, so the
//! products carry the same scale as llama.cpp's; measured: SmolLM2 Q4_1 greedy
//! text then agrees with llama.cpp for 32/32/25 tokens on the golden prompts,
//! against 14/10/25 with an f32 `d`), and each weight row is dotted
//! with integer SIMD. Every ISA computes the same *canonical* sum, so integer
//! paths are exactly (bit for bit) equal to the scalar reference
//! [`matvec_ref`]:
//!
//! ```text
//! for each activation block b (32 elements), lanes j = 0..8 (elements 4j..4j+4):
//!     P[j]  = Σ_k w[4j+k] * xq[4j+k]                 (exact i32; w = signed value code,
//!                                                      or the unsigned code for asym)
//!     ds[j] = scale(group of lane j) * d_b           (f32 multiply)
//!     acc[b % 2][j] = fma(ds[j], P[j] as f32, acc[b % 2][j])
//!     asym: acc[b % 2][j] = fma(min(group of lane j) * d_b, S_b[j] as f32, acc[b % 2][j])
//!                                                     (S_b[j] = Σ_k xq[4j+k])
//! v[j] = acc[0][j] + acc[1][j];  w[j] = v[j] + v[j+4];  y = (w[0] + w[2]) + (w[1] + w[3])
//! ```
//!
//! The two accumulator streams are the two 256-bit halves of one AVX-512
//! register (which handles blocks b, b+1 in one step), or two AVX2 registers.
//! The unsigned×signed instructions get unsigned codes: `vpdpbusd` (VNNI)
//! takes `code ^ 0x80` for I8Sym (= q + 128) and subtracts `128 * S_b[j]`
//! (I4Sym: nibble, subtract `8 * S_b[j]`); AVX2's `vpmaddubsw` saturates at
//! i16, so it uses ggml's sign trick (`|w|`, `sign(x, w)`; |w| ≤ 128,
//! |xq| ≤ 127 cannot saturate) and, for I8Asym, `u ^ 0x80` plus `128 * S_b[j]`.
//! Every intermediate is below 2^24, so the i32 → f32 conversion is exact.
//!
//! G16 layouts need `cols % 32 == 0` (K-quants always have it); other shapes
//! take the dequantizing fallback.
//!
//! # Float layouts
//!
//! F32/F16/BF16 use f32 FMAs on the unquantized activations (F16 via F16C
//! `vcvtph2ps`, BF16 by a 16-bit shift). Their summation order differs
//! between ISAs; tests hold them to `|Δ| ≤ 1e-5 · Σ|w·x|` (a few ulps of the
//! magnitude sum over ≤ 4096 terms, far below the quantization error of any
//! integer layout).
//!
//! # Raw ggml layouts
//!
//! [`Layout::Ggml`] rows are dequantized into a scratch row and dotted in f32
//! (correctness path only).
//!
//! # Threads
//!
//! Rows are split into chunks run on the [`Pool`] the caller passes
//! ([`matvec`], [`matmul`], [`matmul_concat`] and the `*_on` functions); the
//! `*_with` functions, for tests and benchmarks, use [`Pool::global`]. See
//! `pool.rs` for the perf log (persistent pool vs rayon).

use crate::layout::Layout;
use crate::pool::Pool;
use crate::view::NativeView;
use std::cell::RefCell;
use std::sync::OnceLock;

pub mod attn;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod peak;
pub mod rows16;
mod scalar;

/// An instruction-set path for the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable scalar reference.
    Scalar,
    /// AVX2 + FMA + F16C, `vpmaddubsw` integer dots.
    Avx2,
    /// AVX2 + AVX-VNNI (`vpdpbusd` on 256 bits).
    AvxVnni,
    /// AVX-512 F/BW/VL + VNNI (`vpdpbusd` on 512 bits).
    Avx512Vnni,
}

impl Isa {
    /// Whether this CPU can run the path.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => Isa::Avx2.is_available() && is_x86_feature_detected!("avxvnni"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                Isa::Avx2.is_available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every path this CPU can run, slowest first.
    pub fn available() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni]
            .into_iter()
            .filter(|i| i.is_available())
            .collect()
    }

    /// The fastest available path, detected once and cached. Setting the
    /// environment variable `GPACK_ISA` to `scalar`, `avx2`, `avxvnni` or
    /// `avx512vnni` caps the choice (for testing "SIMD off" in CI).
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            let avail = Isa::available();
            let mut best = *avail.last().unwrap_or(&Isa::Scalar);
            if let Ok(v) = std::env::var("GPACK_ISA") {
                if let Some(want) = avail
                    .iter()
                    .copied()
                    .find(|i| i.name().eq_ignore_ascii_case(&v))
                {
                    best = want;
                }
            }
            log::debug!(
                "gpack-quant: kernels use the {} path (available: {:?})",
                best.name(),
                avail
            );
            best
        })
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }
}

/// Elements per activation block.
pub const QA: usize = 32;

/// Activations quantized to int8 per block of 32, `n` vectors of `cols`.
///
/// Per block: `d` (f32 scale) and the eight lane sums `S[j] = Σ_k q[4j+k]`
/// used by the asymmetric and offset corrections (see the module docs).
/// With a span of `s` blocks ([`QuantizedActivations::quantize_span`]),
/// each run of `s` blocks shares one scale, taken from the largest `|x|` of
/// the whole run (every block of the run stores it): the 256-element
/// activation blocks of the K-quant kernels (`kernels::rows16`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuantizedActivations {
    n: usize,
    cols: usize,
    /// `[n][cols]` codes in -127..=127.
    q: Vec<i8>,
    /// `[n][cols / 32]` scales.
    d: Vec<f32>,
    /// `[n][cols / 32][8]` lane sums.
    ls: Vec<i32>,
}

/// One quantized activation vector, borrowed.
#[derive(Clone, Copy)]
pub(crate) struct ActRef<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub ls: &'a [i32],
}

/// C `roundf` (half away from zero) for |v| < 2^23, written so it vectorizes.
#[inline(always)]
fn round_half_away(v: f32) -> i32 {
    let t = v as i32; // truncation toward zero, exact for |v| < 2^31
    let f = v - t as f32; // exact
                          // Wrapping: a block of subnormals overflows `1/d` to infinity, `v as i32`
                          // saturates and the +1 wraps (then clamps to -127) in release builds;
                          // debug builds now compute the same instead of panicking.
    t.wrapping_add((f >= 0.5) as i32)
        .wrapping_sub((f <= -0.5) as i32)
}

/// Quantizes whole blocks: `x` (a multiple of `32 · span` values) into `q`,
/// `d` and `ls` (one scale and 8 lane sums per block; each run of `span`
/// blocks shares the scale of its largest `|x|`), on the kernels' ISA
/// (bit-identical to [`quantize_blocks_scalar`]; tested).
fn quantize_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], ls: &mut [i32], span: usize) {
    quantize_blocks_on(Isa::best(), x, q, d, ls, span)
}

/// [`quantize_blocks`] on `isa`'s quantizer (`isa` must be available).
fn quantize_blocks_on(
    isa: Isa,
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    ls: &mut [i32],
    span: usize,
) {
    assert!(isa.is_available(), "{isa:?} is not available on this CPU");
    assert!(
        span > 0 && x.len().is_multiple_of(QA * span),
        "whole spans of blocks"
    );
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: available (asserted).
        Isa::Avx512Vnni => unsafe { avx512::quantize_blocks(x, q, d, ls, span) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: available (asserted): AVX2, FMA and F16C.
        Isa::Avx2 | Isa::AvxVnni => unsafe { avx2::quantize_blocks(x, q, d, ls, span) },
        _ => quantize_blocks_scalar(x, q, d, ls, span),
    }
}

/// [`quantize_blocks`] block by block with [`quantize_block_amax`].
fn quantize_blocks_scalar(x: &[f32], q: &mut [i8], d: &mut [f32], ls: &mut [i32], span: usize) {
    let mut amax = 0f32;
    for (k, ((xb, qb), (d, ls))) in x
        .chunks_exact(QA)
        .zip(q.chunks_exact_mut(QA))
        .zip(d.iter_mut().zip(ls.chunks_exact_mut(8)))
        .enumerate()
    {
        if k % span == 0 {
            amax = abs_max(&x[k * QA..(k + span) * QA]);
        }
        quantize_block_amax(xb, qb, d, ls, amax);
    }
}

/// The largest `|v|` of `x`, NaNs ignored (0 for none).
#[inline(always)]
pub(crate) fn abs_max(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |a, v| a.max(v.abs()))
}

/// Quantizes one block of 32 with the scale of `amax` (the scheme of the
/// module docs; `amax` is [`abs_max`] of the block or of its span).
#[inline(always)]
pub(crate) fn quantize_block_amax(
    xb: &[f32],
    qb: &mut [i8],
    d: &mut f32,
    ls: &mut [i32],
    amax: f32,
) {
    let db = amax / 127.0;
    let id = if db != 0.0 { 1.0 / db } else { 0.0 };
    for (q, &v) in qb.iter_mut().zip(xb) {
        // Clamped before rounding (the same codes for every finite product):
        // a block of only subnormals has an infinite `id`, and ±inf must
        // give ±127, not a wrapped integer.
        *q = round_half_away((v * id).clamp(-127.0, 127.0)) as i8;
    }
    // ggml stores the activation scale as f16 (block_q8_0/q8_1 `d`).
    *d = half::f16::from_f32(db).to_f32();
    for (j, s) in ls.iter_mut().enumerate() {
        *s = qb[4 * j..4 * j + 4].iter().map(|&v| i32::from(v)).sum();
    }
}

/// A raw pointer that may cross threads: each pool task writes a disjoint range.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: only used to write disjoint, in-bounds ranges from the tasks of
// one `Pool::run`, which returns only after every task finished.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer to element `i` (taking `self` whole, so closures capture
    /// the `Send + Sync` wrapper rather than its raw-pointer field).
    ///
    /// # Safety
    /// `i` must be within the allocation `self` points into.
    #[inline]
    unsafe fn at(self, i: usize) -> *mut T {
        // SAFETY: the caller keeps `i` in bounds.
        unsafe { self.0.add(i) }
    }
}

impl QuantizedActivations {
    /// An empty buffer (reused across calls by [`QuantizedActivations::quantize`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Quantizes `n` vectors of `cols` f32 (`x.len() == n * cols`,
    /// `cols % 32 == 0`), reusing this buffer's allocations.
    ///
    /// # Panics
    /// If the shapes do not match.
    pub fn quantize(&mut self, x: &[f32], n: usize, cols: usize) {
        self.quantize_span(x, n, cols, 1);
    }

    /// [`QuantizedActivations::quantize`] with each run of `span` blocks
    /// sharing one scale (`cols % (32 · span) == 0`).
    ///
    /// # Panics
    /// If the shapes do not match.
    pub fn quantize_span(&mut self, x: &[f32], n: usize, cols: usize, span: usize) {
        self.resize(x, n, cols, span);
        quantize_blocks(x, &mut self.q, &mut self.d, &mut self.ls, span);
    }

    /// [`QuantizedActivations::quantize_span`] on `isa`'s quantizer, whatever
    /// the dispatcher would pick (each SIMD path is tested against the scalar).
    ///
    /// # Panics
    /// As `quantize_span`, and if `isa` is not available on this CPU.
    #[doc(hidden)]
    pub fn quantize_isa(&mut self, isa: Isa, x: &[f32], n: usize, cols: usize, span: usize) {
        self.resize(x, n, cols, span);
        quantize_blocks_on(isa, x, &mut self.q, &mut self.d, &mut self.ls, span);
    }

    /// [`QuantizedActivations::quantize_span`] on the scalar path whatever the
    /// ISA: the reference the SIMD quantizer is tested against.
    #[doc(hidden)]
    pub fn quantize_ref(&mut self, x: &[f32], n: usize, cols: usize, span: usize) {
        self.resize(x, n, cols, span);
        quantize_blocks_scalar(x, &mut self.q, &mut self.d, &mut self.ls, span);
    }

    fn resize(&mut self, x: &[f32], n: usize, cols: usize, span: usize) {
        assert_eq!(x.len(), n * cols, "activation length must be n * cols");
        assert!(
            span > 0 && cols.is_multiple_of(QA * span),
            "activation cols must be a multiple of 32 × span ({span})"
        );
        let nb = cols / QA;
        self.n = n;
        self.cols = cols;
        self.q.resize(n * cols, 0);
        self.d.resize(n * nb, 0.0);
        self.ls.resize(n * nb * 8, 0);
    }

    /// [`QuantizedActivations::quantize`] with the vectors split over `pool`
    /// (the same values: each vector is quantized independently), then
    /// `after(i, vector i)` on the thread that quantized vector `i`.
    fn quantize_on(
        &mut self,
        pool: &Pool,
        x: &[f32],
        n: usize,
        cols: usize,
        after: &(dyn Fn(usize, ActRef) + Sync),
    ) {
        self.resize(x, n, cols, 1);
        let nb = cols / QA;
        // Below ~16K elements the pool's wake-up costs more than it saves.
        let per_task = if pool.threads() > 1 && n * cols >= 16 * 1024 {
            n.div_ceil(pool.threads() * 4).max(1)
        } else {
            n
        };
        let tasks = n.div_ceil(per_task);
        let (qp, dp, lp) = (
            SendPtr(self.q.as_mut_ptr()),
            SendPtr(self.d.as_mut_ptr()),
            SendPtr(self.ls.as_mut_ptr()),
        );
        let task = |t: usize| {
            let (v0, v1) = (t * per_task, ((t + 1) * per_task).min(n));
            // SAFETY: vectors v0..v1 of distinct tasks are disjoint ranges of
            // q ([n][cols]), d ([n][nb]) and ls ([n][nb][8]), all resized above
            // and alive until `pool.run` returns (it waits for every task).
            let (q, d, ls) = unsafe {
                (
                    std::slice::from_raw_parts_mut(qp.at(v0 * cols), (v1 - v0) * cols),
                    std::slice::from_raw_parts_mut(dp.at(v0 * nb), (v1 - v0) * nb),
                    std::slice::from_raw_parts_mut(lp.at(v0 * nb * 8), (v1 - v0) * nb * 8),
                )
            };
            quantize_blocks(&x[v0 * cols..v1 * cols], q, d, ls, 1);
            for v in v0..v1 {
                let off = v - v0;
                after(
                    v,
                    ActRef {
                        q: &q[off * cols..(off + 1) * cols],
                        d: &d[off * nb..(off + 1) * nb],
                        ls: &ls[off * nb * 8..(off + 1) * nb * 8],
                    },
                );
            }
        };
        if tasks == 1 {
            task(0);
        } else {
            pool.run(tasks, &task);
        }
    }

    /// Number of vectors.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Elements per vector.
    pub fn cols(&self) -> usize {
        self.cols
    }

    pub(crate) fn get(&self, i: usize) -> ActRef<'_> {
        let nb = self.cols / QA;
        ActRef {
            q: &self.q[i * self.cols..(i + 1) * self.cols],
            d: &self.d[i * nb..(i + 1) * nb],
            ls: &self.ls[i * nb * 8..(i + 1) * nb * 8],
        }
    }
}

/// What a row kernel needs besides the weights.
#[derive(Clone, Copy)]
pub(crate) enum Act<'a> {
    /// Unquantized activations, for float and raw ggml layouts.
    Float(&'a [f32]),
    /// Quantized activations, for integer layouts.
    Int(ActRef<'a>),
}

/// Whether `w` runs on the integer kernels (else float or fallback).
fn uses_int(w: &NativeView) -> bool {
    match w.layout() {
        Layout::I8Sym { .. }
        | Layout::I8Asym { .. }
        | Layout::I4Sym { .. }
        | Layout::I4Asym { .. } => w.cols().is_multiple_of(QA),
        _ => false,
    }
}

/// Computes `out[i] = dot(row r0 + i, act)` for `i in 0..out.len()` on `isa`.
fn rows_dot(isa: Isa, w: &NativeView, r0: usize, act: Act, out: &mut [f32]) {
    match (isa, act) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512Vnni, a) => {
            // SAFETY: callers only pass an ISA for which `is_available()` holds
            // (checked in `matvec_with`/`matmul_with`, or `Isa::best()`).
            unsafe { avx512::rows_dot(w, r0, a, out) }
        }
        #[cfg(target_arch = "x86_64")]
        (Isa::AvxVnni, a) => {
            // SAFETY: as above.
            unsafe { avx2::rows_dot_vnni(w, r0, a, out) }
        }
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, a) => {
            // SAFETY: as above.
            unsafe { avx2::rows_dot_avx2(w, r0, a, out) }
        }
        (_, a) => scalar::rows_dot(w, r0, a, out),
    }
}

thread_local! {
    static ACT: RefCell<QuantizedActivations> = RefCell::new(QuantizedActivations::new());
}

/// Rows per task: at least this many weight bytes per task, so a task's cost
/// dwarfs the ~0.1 µs of claiming it.
const MIN_TASK_BYTES: usize = 32 * 1024;
/// Below this many weight bytes a call runs on the caller thread alone.
const MIN_PARALLEL_BYTES: usize = 96 * 1024;

fn split_rows(w: &NativeView, threads: usize) -> (usize, usize) {
    let rows = w.rows();
    let row_bytes = (w.byte_len() / rows).max(1);
    let total = w.byte_len();
    if threads <= 1 || total < MIN_PARALLEL_BYTES {
        return (rows, 1);
    }
    let min_rows = MIN_TASK_BYTES.div_ceil(row_bytes).max(4);
    let want_tasks = threads * 4;
    let chunk = rows.div_ceil(want_tasks).max(min_rows).min(rows);
    let chunk = chunk.next_multiple_of(4).min(rows);
    (chunk, rows.div_ceil(chunk))
}

/// A `*mut f32` that may cross threads: each task writes a disjoint range.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: `OutPtr` is only used to write disjoint, in-bounds ranges from the
// tasks of one `Pool::run`, which returns only after every task finished.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer to element `i` (taking `self` whole, so closures capture the
    /// `Send + Sync` wrapper rather than its raw-pointer field).
    ///
    /// # Safety
    /// `i` must be within the allocation `self` points into.
    #[inline]
    unsafe fn at(self, i: usize) -> *mut f32 {
        // SAFETY: the caller keeps `i` in bounds.
        unsafe { self.0.add(i) }
    }
}

fn run_matvec(isa: Isa, pool: &Pool, w: &NativeView, act: Act, y: &mut [f32]) {
    let (chunk, tasks) = split_rows(w, pool.threads());
    if tasks == 1 {
        rows_dot(isa, w, 0, act, y);
        return;
    }
    let rows = w.rows();
    let out = OutPtr(y.as_mut_ptr());
    pool.run(tasks, &|t| {
        let r0 = t * chunk;
        let r1 = (r0 + chunk).min(rows);
        // SAFETY: rows r0..r1 of distinct tasks are disjoint and in 0..rows =
        // 0..y.len(); `y` outlives `pool.run`, which waits for every task.
        let ys = unsafe { std::slice::from_raw_parts_mut(out.at(r0), r1 - r0) };
        rows_dot(isa, w, r0, act, ys);
    });
}

/// `y = W · x` for one activation vector (`x.len() == cols`, `y.len() == rows`),
/// on the best ISA, multi-threaded over rows on `pool`.
///
/// # Panics
/// On shape mismatches, or for a raw ggml layout [`crate::dequantize_ggml`]
/// cannot decode.
pub fn matvec(pool: &Pool, w: &NativeView, x: &[f32], y: &mut [f32]) {
    matvec_on(Isa::best(), pool, w, x, y)
}

/// [`matvec`] on a given ISA, on [`Pool::global`] (tests and benchmarks).
///
/// # Panics
/// As [`matvec`], and if `isa` is not available on this CPU.
pub fn matvec_with(isa: Isa, w: &NativeView, x: &[f32], y: &mut [f32]) {
    matvec_on(isa, Pool::global(), w, x, y)
}

/// [`matvec`] on a given ISA and pool.
///
/// # Panics
/// As [`matvec_with`].
pub fn matvec_on(isa: Isa, pool: &Pool, w: &NativeView, x: &[f32], y: &mut [f32]) {
    assert!(
        isa.is_available(),
        "ISA {} is not available on this CPU",
        isa.name()
    );
    assert_eq!(x.len(), w.cols(), "x length must equal cols");
    assert_eq!(y.len(), w.rows(), "y length must equal rows");
    if rows16::handles(w) {
        return rows16::matmul(isa, pool, w, x, 1, y);
    }
    if uses_int(w) {
        ACT.with(|a| {
            let mut a = a.borrow_mut();
            a.quantize(x, 1, w.cols());
            run_matvec(isa, pool, w, Act::Int(a.get(0)), y);
        });
    } else {
        run_matvec(isa, pool, w, Act::Float(x), y);
    }
}

/// [`matvec`] with activations already quantized (reuse one quantization for
/// several weights of the same input, e.g. q, k and v).
///
/// # Panics
/// As [`matvec`], and if `w` is not an integer layout or `xq` has another
/// `cols` or `xq.n() != 1`.
pub fn matvec_quantized(pool: &Pool, w: &NativeView, xq: &QuantizedActivations, y: &mut [f32]) {
    assert!(
        uses_int(w),
        "matvec_quantized needs an integer layout with cols % 32 == 0"
    );
    assert_eq!(
        xq.cols(),
        w.cols(),
        "activation cols must equal weight cols"
    );
    assert_eq!(xq.n(), 1, "matvec_quantized takes one vector");
    assert_eq!(y.len(), w.rows(), "y length must equal rows");
    run_matvec(Isa::best(), pool, w, Act::Int(xq.get(0)), y);
}

/// Runs `matvec` with rayon instead of [`Pool`]: kept for the benchmark that
/// justifies the pool (see `pool.rs`).
#[doc(hidden)]
pub fn matvec_rayon(isa: Isa, w: &NativeView, x: &[f32], y: &mut [f32]) {
    use rayon::prelude::*;
    assert!(isa.is_available());
    assert_eq!(x.len(), w.cols());
    assert_eq!(y.len(), w.rows());
    let (chunk, _) = split_rows(w, rayon::current_num_threads());
    let run = |act: Act, y: &mut [f32]| {
        y.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(t, ys)| rows_dot(isa, w, t * chunk, act, ys));
    };
    if uses_int(w) {
        let mut a = QuantizedActivations::new();
        a.quantize(x, 1, w.cols());
        run(Act::Int(a.get(0)), y);
    } else {
        run(Act::Float(x), y);
    }
}

/// The scalar reference: `matvec` on [`Isa::Scalar`], single-threaded. Every
/// integer SIMD path equals it bit for bit.
pub fn matvec_ref(w: &NativeView, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), w.cols(), "x length must equal cols");
    assert_eq!(y.len(), w.rows(), "y length must equal rows");
    if rows16::handles(w) {
        return rows16::matmul_ref(w, x, 1, y);
    }
    if uses_int(w) {
        let mut a = QuantizedActivations::new();
        a.quantize(x, 1, w.cols());
        scalar::rows_dot(w, 0, Act::Int(a.get(0)), y);
    } else {
        scalar::rows_dot(w, 0, Act::Float(x), y);
    }
}

/// The scalar reference of [`matmul`]: every vector through [`matvec_ref`],
/// or for [`Layout::Rows16`] views the interleaved kernels' canonical
/// formula written out (see [`rows16`]). Every SIMD path and thread split
/// equals it bit for bit on integer layouts.
pub fn matmul_ref(w: &NativeView, x: &[f32], n: usize, y: &mut [f32]) {
    assert_eq!(x.len(), n * w.cols(), "x length must equal n * cols");
    assert_eq!(y.len(), n * w.rows(), "y length must equal n * rows");
    if rows16::handles(w) {
        return rows16::matmul_ref(w, x, n, y);
    }
    for (xi, yi) in x.chunks_exact(w.cols()).zip(y.chunks_exact_mut(w.rows())) {
        matvec_ref(w, xi, yi);
    }
}

/// Rows per matmul sub-chunk (a multiple of the kernels' 4-row step) on the
/// paths without a tile kernel.
const MM_ROWS: usize = 8;

/// Vectors per block of the AVX-512 matmul: a task runs its rows for one
/// block of vectors at a time, so the block's codes and prepared values
/// (~64 × 1.7 KB at 576 columns) stay in L2 while the task's weight rows
/// stream past them.
const MM_VECS: usize = 64;

/// Buffers reused across matmul calls on one thread (taken out while in use,
/// so a nested call finds an empty pair and allocates its own).
#[derive(Default)]
struct MatmulBufs {
    qa: QuantizedActivations,
    prep: Vec<f32>,
}

thread_local! {
    static MM: RefCell<MatmulBufs> = RefCell::new(MatmulBufs::default());
}

/// `y[i] = W · x[i]` for `n` vectors: `x` is `n × cols`, `y` is `n × rows`
/// (row-major), on the best ISA, multi-threaded over rows on `pool`. Each
/// weight row chunk is read once from memory for all `n` vectors.
///
/// # Panics
/// On shape mismatches.
pub fn matmul(pool: &Pool, w: &NativeView, x: &[f32], n: usize, y: &mut [f32]) {
    matmul_on(Isa::best(), pool, w, x, n, y)
}

/// [`matmul`] on a given ISA, on [`Pool::global`] (tests and benchmarks).
///
/// # Panics
/// As [`matmul`], and if `isa` is not available.
pub fn matmul_with(isa: Isa, w: &NativeView, x: &[f32], n: usize, y: &mut [f32]) {
    matmul_on(isa, Pool::global(), w, x, n, y)
}

/// [`matmul`] on a given ISA and pool.
///
/// # Panics
/// As [`matmul_with`].
pub fn matmul_on(isa: Isa, pool: &Pool, w: &NativeView, x: &[f32], n: usize, y: &mut [f32]) {
    assert!(
        isa.is_available(),
        "ISA {} is not available on this CPU",
        isa.name()
    );
    assert_eq!(x.len(), n * w.cols(), "x length must equal n * cols");
    assert_eq!(y.len(), n * w.rows(), "y length must equal n * rows");
    if n == 0 {
        return;
    }
    if rows16::handles(w) {
        return rows16::matmul(isa, pool, w, x, n, y);
    }
    let int = uses_int(w);
    // The AVX-512 path has rows × vectors tile kernels (weights loaded and
    // unpacked once per tile of vectors, per-vector values prepared once per
    // call); the others run the row kernel once per vector.
    #[cfg(target_arch = "x86_64")]
    if int && isa == Isa::Avx512Vnni {
        let mut bufs = MM.with(|m| std::mem::take(&mut *m.borrow_mut()));
        matmul_tiled(pool, w, x, n, y, &mut bufs);
        MM.with(|m| *m.borrow_mut() = bufs);
        return;
    }
    let rows = w.rows();
    let cols = w.cols();
    let (chunk, tasks) = split_rows(w, pool.threads());
    let out = OutPtr(y.as_mut_ptr());
    let mut qa = QuantizedActivations::new();
    if int {
        qa.quantize(x, n, cols);
    }
    let acts: Vec<ActRef> = if int {
        (0..n).map(|i| qa.get(i)).collect()
    } else {
        Vec::new()
    };
    let task = |t: usize| {
        let r0 = t * chunk;
        let r1 = (r0 + chunk).min(rows);
        // Sub-chunks of MM_ROWS rows stay in L1 while all n vectors pass over them.
        let mut tmp = vec![0f32; MM_ROWS * n];
        let mut r = r0;
        while r < r1 {
            let m = MM_ROWS.min(r1 - r);
            for i in 0..n {
                let act = if int {
                    Act::Int(acts[i])
                } else {
                    Act::Float(&x[i * cols..(i + 1) * cols])
                };
                rows_dot(isa, w, r, act, &mut tmp[i * m..(i + 1) * m]);
            }
            for i in 0..n {
                // SAFETY: (i, r..r+m) ranges of distinct tasks are disjoint and
                // within y (i < n, r + m <= rows); y outlives the pool run.
                let ys = unsafe { std::slice::from_raw_parts_mut(out.at(i * rows + r), m) };
                ys.copy_from_slice(&tmp[i * m..(i + 1) * m]);
            }
            r += m;
        }
    };
    if tasks == 1 {
        task(0);
    } else {
        pool.run(tasks, &task);
    }
}

/// `y[i] = [W0 · x[i], W1 · x[i], …]` for matrices of one width (`y` is
/// `n × Σ rows`): q‖k‖v or gate‖up kept as separate tensors because their
/// types differ (Q4_K_M mixes Q4_K and Q6_K). When every member is
/// row-interleaved, the activations are quantized once and all members run
/// in one pool call; otherwise each member runs alone. Either way each
/// member's rows are bit-identical to [`matmul`] on it alone. On the best
/// ISA, multi-threaded on `pool`.
///
/// # Panics
/// On shape mismatches.
pub fn matmul_concat(pool: &Pool, ws: &[NativeView], x: &[f32], n: usize, y: &mut [f32]) {
    matmul_concat_on(Isa::best(), pool, ws, x, n, y)
}

/// [`matmul_concat`] on a given ISA and pool.
///
/// # Panics
/// As [`matmul_concat`], and if `isa` is not available.
pub fn matmul_concat_on(
    isa: Isa,
    pool: &Pool,
    ws: &[NativeView],
    x: &[f32],
    n: usize,
    y: &mut [f32],
) {
    assert!(
        isa.is_available(),
        "ISA {} is not available on this CPU",
        isa.name()
    );
    let total: usize = ws.iter().map(NativeView::rows).sum();
    assert_eq!(y.len(), n * total, "y length must equal n * total rows");
    if n == 0 || ws.is_empty() {
        return;
    }
    if ws.iter().all(rows16::handles) {
        return rows16::matmul_concat(isa, pool, ws, x, n, y);
    }
    let mut off = 0;
    let mut tmp = Vec::new();
    for w in ws {
        let r = w.rows();
        if n == 1 {
            matvec_on(isa, pool, w, x, &mut y[off..off + r]);
        } else {
            tmp.resize(n * r, 0.0);
            matmul_on(isa, pool, w, x, n, &mut tmp);
            for (o, t) in y.chunks_exact_mut(total).zip(tmp.chunks_exact(r)) {
                o[off..off + r].copy_from_slice(t);
            }
        }
        off += r;
    }
}

/// The AVX-512 integer matmul: activations quantized and prepared
/// ([`avx512::prepare`]) in parallel over vectors, then row chunks in
/// parallel, each running its rows for blocks of [`MM_VECS`] vectors.
#[cfg(target_arch = "x86_64")]
fn matmul_tiled(
    pool: &Pool,
    w: &NativeView,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    bufs: &mut MatmulBufs,
) {
    let (rows, cols) = (w.rows(), w.cols());
    let np = cols / QA / 2;
    let pstride = np * avx512::PREP_WORDS;
    bufs.prep.resize(n * pstride, 0.0);
    let prep = SendPtr(bufs.prep.as_mut_ptr());
    let layout = w.layout();
    bufs.qa.quantize_on(pool, x, n, cols, &|v, a| {
        // SAFETY: vector v's prepared range [v * pstride, (v + 1) * pstride)
        // is in bounds (resized above) and written by this call only (one
        // call per vector); AVX-512 VNNI is available (the caller checked).
        unsafe {
            let dst = std::slice::from_raw_parts_mut(prep.at(v * pstride), pstride);
            avx512::prepare(layout, &a, dst);
        }
    });
    let qa = &bufs.qa;
    let acts: Vec<ActRef> = (0..n).map(|i| qa.get(i)).collect();
    let preps: Vec<*const f32> = (0..n).map(|i| bufs.prep[i * pstride..].as_ptr()).collect();
    let preps = SendPtr(preps.as_ptr() as *mut *const f32);
    let (chunk, tasks) = split_rows(w, pool.threads());
    let out = OutPtr(y.as_mut_ptr());
    let task = |t: usize| {
        let r0 = t * chunk;
        let r1 = (r0 + chunk).min(rows);
        let mut v = 0;
        while v < n {
            let nv = MM_VECS.min(n - v);
            // SAFETY: `preps` holds n pointers (alive for this call); AVX-512
            // VNNI available and `w` an integer layout (caller); rows r0..r1
            // of distinct tasks are disjoint, so the writes
            // y[(v + j) * rows + r0 + i] (j < nv, i < r1 - r0) are disjoint
            // and in bounds; y outlives the pool run.
            unsafe {
                let pp = std::slice::from_raw_parts(preps.at(v) as *const *const f32, nv);
                avx512::rows_dot_multi(
                    w,
                    r0,
                    r1 - r0,
                    &acts[v..v + nv],
                    pp,
                    out.at(v * rows + r0),
                    rows,
                );
            }
            v += nv;
        }
    };
    if tasks == 1 {
        task(0);
    } else {
        pool.run(tasks, &task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_half_away_is_roundf() {
        let mut v = -130.0f32;
        while v <= 130.0 {
            for x in [
                v,
                v + 0.5,
                v - 0.5,
                f32::from_bits(v.to_bits() + 1),
                f32::from_bits(v.to_bits().max(1) - 1),
            ] {
                if x.abs() < 200.0 {
                    assert_eq!(round_half_away(x), x.round() as i32, "{x}");
                }
            }
            v += 0.0625;
        }
        assert_eq!(round_half_away(0.49999997), 0);
        assert_eq!(round_half_away(-0.5), -1);
        assert_eq!(round_half_away(2.5), 3);
    }

    #[test]
    fn activation_lane_sums() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) * 0.1).collect();
        let mut a = QuantizedActivations::new();
        a.quantize(&x, 1, 64);
        let r = a.get(0);
        for b in 0..2 {
            for j in 0..8 {
                let s: i32 = r.q[b * 32 + 4 * j..b * 32 + 4 * j + 4]
                    .iter()
                    .map(|&v| i32::from(v))
                    .sum();
                assert_eq!(r.ls[b * 8 + j], s);
            }
            assert!(r.q[b * 32..b * 32 + 32].iter().any(|&v| v.abs() == 127));
        }
    }
}

#[cfg(test)]
mod subnormal_tests {
    use super::*;

    /// A block of only subnormal activations (1/d overflows to infinity)
    /// keeps each value's sign: +127, -127 or 0, on the dispatched path too.
    #[test]
    fn subnormal_blocks_keep_their_signs() {
        // 2^-127: its /127 is a non-zero subnormal whose inverse overflows.
        let tiny = f32::from_bits(0x0040_0000);
        let x: Vec<f32> = (0..64)
            .map(|i| match i % 3 {
                _ if i >= 32 => i as f32 - 48.0,
                0 => tiny,
                1 => -tiny,
                _ => 0.0,
            })
            .collect();
        let want: Vec<i8> = (0..32)
            .map(|i| match i % 3 {
                0 => 127,
                1 => -127,
                _ => 0,
            })
            .collect();
        let (mut q, mut d, mut ls) = (vec![0i8; 64], vec![0f32; 2], vec![0i32; 16]);
        quantize_blocks_scalar(&x, &mut q, &mut d, &mut ls, 1);
        assert_eq!(&q[..32], &want[..]);
        for isa in Isa::available() {
            let (mut q2, mut d2, mut ls2) = (vec![0i8; 64], vec![0f32; 2], vec![0i32; 16]);
            quantize_blocks_on(isa, &x, &mut q2, &mut d2, &mut ls2, 1);
            assert_eq!((&q2, &d2, &ls2), (&q, &d, &ls), "{isa:?}");
        }
    }
}

/// A view's rows decoded to f32, by the kernels of an ISA: this module
/// owns the choice of decoder (the Rows16 group decoders where they apply,
/// else [`NativeView::dequantize_row`]), so the view itself uses no kernel.
impl NativeView<'_> {
    /// Dequantizes rows `r0 .. r0 + out.len() / cols` into `out` (row-major),
    /// the bits of [`NativeView::dequantize_row`] for each row; Rows16 views
    /// decode each 16-row group-block once with the best SIMD decoder
    /// instead of gathering every row's blocks.
    ///
    /// # Panics
    /// As [`NativeView::dequantize_row`] for each row, and if `out.len()` is
    /// not a multiple of `cols`.
    pub fn dequantize_rows(&self, r0: usize, out: &mut [f32]) {
        self.dequantize_rows_on(crate::Isa::best(), r0, out)
    }

    /// [`NativeView::dequantize_rows`] with the Rows16 decoders of `isa`
    /// (the same bits on every ISA).
    ///
    /// # Panics
    /// As [`NativeView::dequantize_rows`], and if `isa` is not available.
    pub fn dequantize_rows_on(&self, isa: crate::Isa, r0: usize, out: &mut [f32]) {
        assert!(
            isa.is_available(),
            "ISA {} is not available on this CPU",
            isa.name()
        );
        assert!(
            self.cols() > 0 && out.len().is_multiple_of(self.cols()),
            "output length must be a multiple of cols"
        );
        if rows16::handles(self) {
            return rows16::dequantize_rows(isa, self, r0, out);
        }
        for (i, o) in out.chunks_exact_mut(self.cols()).enumerate() {
            self.dequantize_row(r0 + i, o);
        }
    }
}
