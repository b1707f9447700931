//! The row-major layouts: the split int8/int4 family (codes with separate
//! per-group scale arrays: GIW sidecars, `convert --quant int8|int4`), and
//! the F32/F16/BF16 and raw-ggml rows, which share its row loop.
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

use super::{ActRef, Isa, QuantizedActivations, SendPtr, QA};
use crate::layout::Layout;
use crate::pool::Pool;
use crate::view::NativeView;
use std::cell::RefCell;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;

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

/// [`super::matvec_on`] on a row-major layout.
pub(super) fn matvec(isa: Isa, pool: &Pool, w: &NativeView, x: &[f32], y: &mut [f32]) {
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

/// [`super::matvec_quantized`].
pub(super) fn matvec_quantized(
    pool: &Pool,
    w: &NativeView,
    xq: &QuantizedActivations,
    y: &mut [f32],
) {
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

/// [`super::matvec_rayon`].
pub(super) fn matvec_rayon(isa: Isa, w: &NativeView, x: &[f32], y: &mut [f32]) {
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

/// [`super::matvec_ref`] on a row-major layout.
pub(super) fn matvec_ref(w: &NativeView, x: &[f32], y: &mut [f32]) {
    if uses_int(w) {
        let mut a = QuantizedActivations::new();
        a.quantize(x, 1, w.cols());
        scalar::rows_dot(w, 0, Act::Int(a.get(0)), y);
    } else {
        scalar::rows_dot(w, 0, Act::Float(x), y);
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

/// [`super::matmul_on`] on a row-major layout (`n > 0`, shapes checked).
pub(super) fn matmul(isa: Isa, pool: &Pool, w: &NativeView, x: &[f32], n: usize, y: &mut [f32]) {
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
