//! Matrix-vector and small matrix-matrix kernels over [`NativeView`]s.
//!
//! # Where things are
//!
//! * [`rows16`]: the canonical path, the row-interleaved ggml layouts every
//!   quantized `.gpack` tensor uses ([`Layout::Rows16`](crate::layout::Layout::Rows16)); the per-type
//!   facts its decoders read are in `rows16/facts.rs`.
//! * `giw`: the row-major layouts: the split int8/int4 family (codes and a
//!   separate scale array: GIW sidecars, `convert --quant int8|int4`), and
//!   the F32/F16/BF16 and raw-ggml rows that share its row loop.
//! * `act`: activation quantization ([`QuantizedActivations`]), shared by
//!   both families.
//! * [`attn`]: the attention helpers (scores, weighted rows, softmax).
//! * [`peak`]: the int8 peak loops `membw` measures.
//!
//! Each family has one file per ISA (`scalar.rs` is the reference where a
//! family has one; every SIMD path equals it bit for bit on integer
//! layouts). The ISA is chosen at run time ([`Isa::best`]), never at build
//! time.
//!
//! # Threads
//!
//! Rows are split into chunks run on the [`Pool`] the caller passes
//! ([`matvec`], [`matmul`], [`matmul_concat`] and the `*_on` functions); the
//! `*_with` functions, for tests and benchmarks, use [`Pool::global`]. See
//! `pool.rs` for the perf log (persistent pool vs rayon).

use crate::pool::Pool;
use crate::view::NativeView;
use std::sync::OnceLock;

mod act;
pub mod attn;
mod giw;
pub mod peak;
pub mod rows16;

pub(crate) use act::ActRef;
pub use act::QuantizedActivations;

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
    giw::matvec(isa, pool, w, x, y)
}

/// [`matvec`] with activations already quantized (reuse one quantization for
/// several weights of the same input, e.g. q, k and v).
///
/// # Panics
/// As [`matvec`], and if `w` is not an integer layout or `xq` has another
/// `cols` or `xq.n() != 1`.
pub fn matvec_quantized(pool: &Pool, w: &NativeView, xq: &QuantizedActivations, y: &mut [f32]) {
    giw::matvec_quantized(pool, w, xq, y)
}

/// Runs `matvec` with rayon instead of [`Pool`]: kept for the benchmark that
/// justifies the pool (see `pool.rs`).
#[doc(hidden)]
pub fn matvec_rayon(isa: Isa, w: &NativeView, x: &[f32], y: &mut [f32]) {
    giw::matvec_rayon(isa, w, x, y)
}

/// The scalar reference: `matvec` on [`Isa::Scalar`], single-threaded. Every
/// integer SIMD path equals it bit for bit.
pub fn matvec_ref(w: &NativeView, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), w.cols(), "x length must equal cols");
    assert_eq!(y.len(), w.rows(), "y length must equal rows");
    if rows16::handles(w) {
        return rows16::matmul_ref(w, x, 1, y);
    }
    giw::matvec_ref(w, x, y)
}

/// The scalar reference of [`matmul`]: every vector through [`matvec_ref`],
/// or for [`Layout::Rows16`](crate::layout::Layout::Rows16) views the interleaved kernels' canonical
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
    giw::matmul(isa, pool, w, x, n, y)
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
