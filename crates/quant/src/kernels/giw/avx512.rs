//! AVX-512 VNNI kernels: two activation blocks (64 elements) per step in one
//! 512-bit register, whose low half is canonical stream 0 (even blocks) and
//! high half stream 1 (odd blocks); an odd last block goes to the low half
//! with 256-bit AVX-512VL VNNI ops.
//!
//! Why the kernels look as they do (the measurements behind each choice, with
//! their dates, are in docs/perf-history/kernels.md):
//! * Tiles of 4 rows × N vectors: independent FMA chains, the activation
//!   work shared by the rows, the weight loads and unpacking by the vectors;
//!   per-vector values are prepared once per matmul call ([`prepare`]) and
//!   the output is written straight into y. 4 × 4 (with narrower tiles for
//!   the last vectors) is as fast as any shape tried; wider or taller tiles
//!   spill registers.
//! * I4 unpack keeps ggml's nibble order (per group of 32), at the cost of
//!   one `vshufi64x2` per 64 codes over a "pair of groups" order: the
//!   kernel is memory-bound beyond L2, and the ggml order makes Q4_0/Q4_1
//!   transcoding a copy. Four blocks per step with the nibbles dotted in
//!   place against a regrouped activation copy takes fewer vector ops but
//!   gains nothing measurable and spills registers in matmul: not worth a
//!   second canonical order.
//! * Row pointers come from base + stride ([`Rows`]), not from
//!   `NativeView::row_codes` per tile (two integer divisions per row).
//! * Rows outer, vectors inner, the vectors' values loaded at use: only the
//!   accumulators and one row's values need registers. Hiding the loads
//!   from LLVM to stop it merging them across rows (an empty `asm!` or
//!   `black_box` per row, an opaque per-row offset) is slower.
//! * Software prefetch of the codes a whole number of rows ahead: the short
//!   rows of small models are streams the hardware prefetcher ramps up on
//!   too late.
//! * The I4Asym tile is bound by its floating-point multiply/FMA ops, which
//!   the canonical order requires. On Zen 4 `vpdpbusd`, `vmulps` and
//!   `vfmadd` share two pipes (2 zmm ops per cycle together), while
//!   `vcvtdq2ps`, `vaddps` and `vpermps` go elsewhere, and ymm ops cost what
//!   zmm ops do; forming the products `s·d` by `vpermps` from one
//!   16-product multiply costs what the multiplies do. Neither more tasks
//!   per call for n ≥ 4 nor fewer pointer registers (x copied into the
//!   prepared buffer, the mins addressed from the scales) helps.

use super::avx2::{dot_float_row_avx2, grp1, kind_of, reduce8, I4ASYM, I4SYM, I8ASYM, I8SYM};
use super::scalar::dot_float_row;
use super::{Act, ActRef, QA};
use crate::layout::Layout;
use crate::view::NativeView;
use std::arch::x86_64::*;

/// The offset correction that starts a `vpdpbusd` accumulation, so that the
/// unsigned codes' dot product comes out as the signed one: `-128 * S` for
/// I8Sym (codes fed as `q ^ 0x80 = q + 128`), `-8 * S` for I4Sym (nibbles
/// fed as `q = v + 8`), 0 for asymmetric layouts. Computed once per block and
/// shared by all rows.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn corr2<const KIND: u8>(ls: __m512i) -> __m512i {
    // SAFETY: register-only AVX-512F ops; the caller guarantees the feature.
    unsafe {
        let z = _mm512_setzero_si512();
        match KIND {
            I8SYM => _mm512_sub_epi32(z, _mm512_slli_epi32(ls, 7)),
            I4SYM => _mm512_sub_epi32(z, _mm512_slli_epi32(ls, 3)),
            _ => z,
        }
    }
}

/// Unsigned codes of two blocks (64 bytes: blocks b and b+1) for `vpdpbusd`:
/// I8Sym `q ^ 0x80`, I8Asym the codes, I4 the unpacked nibbles.
///
/// # Safety
/// AVX-512 F/BW; `codes` valid for two blocks.
#[inline(always)]
unsafe fn u2<const KIND: u8>(codes: *const u8) -> __m512i {
    // SAFETY: caller guarantees the features and two blocks of codes.
    unsafe {
        match KIND {
            I8SYM => _mm512_xor_si512(
                _mm512_loadu_si512(codes as *const _),
                _mm512_set1_epi8(-128),
            ),
            I8ASYM => _mm512_loadu_si512(codes as *const _),
            _ => {
                let t = _mm256_loadu_si256(codes as *const __m256i);
                let v = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
                // [A, B, A>>4, B>>4] -> [A, A>>4, B, B>>4]
                let v = _mm512_shuffle_i64x2(v, v, 0b11_01_10_00);
                _mm512_and_si512(v, _mm512_set1_epi8(0x0F))
            }
        }
    }
}

/// Exact lane sums of one block, 256-bit (AVX-512VL VNNI encoding).
///
/// # Safety
/// AVX-512 VL + VNNI; `codes` valid for one block.
#[inline(always)]
unsafe fn p1<const KIND: u8>(codes: *const u8, x: __m256i, ls: __m256i) -> __m256i {
    // SAFETY: caller guarantees the features and one block of codes.
    unsafe {
        let z = _mm256_setzero_si256();
        let nib = |p: *const u8| {
            let t = _mm_loadu_si128(p as *const __m128i);
            _mm256_and_si256(
                _mm256_set_m128i(_mm_srli_epi16(t, 4), t),
                _mm256_set1_epi8(0x0F),
            )
        };
        match KIND {
            I8SYM => {
                let u = _mm256_xor_si256(
                    _mm256_loadu_si256(codes as *const __m256i),
                    _mm256_set1_epi8(-128),
                );
                _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, x), _mm256_slli_epi32(ls, 7))
            }
            I8ASYM => _mm256_dpbusd_epi32(z, _mm256_loadu_si256(codes as *const __m256i), x),
            I4SYM => _mm256_sub_epi32(
                _mm256_dpbusd_epi32(z, nib(codes), x),
                _mm256_slli_epi32(ls, 3),
            ),
            _ => _mm256_dpbusd_epi32(z, nib(codes), x),
        }
    }
}

/// Words per (vector, block pair) of [`prepare`]'s output: the lane-broadcast
/// activation scales `d` (16 f32) and the layout's per-vector term (16
/// words: the `vpdpbusd` offset correction for symmetric layouts, the lane
/// sums as f32 for asymmetric ones).
pub(super) const PREP_WORDS: usize = 32;
const PF_BYTES: usize = 8192;

/// Precomputes, for each block pair of one activation vector, the values the
/// tile loop would otherwise form per tile (same instructions, same values):
/// `dst[p * 32..][..16]` = `d` broadcast over each block's 8 lanes,
/// `dst[p * 32 + 16..][..16]` = [`corr2`] (sym) or the lane sums as f32
/// (asym). `dst.len() >= (a.d.len() / 2) * 32`.
///
/// # Safety
/// `Isa::Avx512Vnni.is_available()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn prepare(layout: Layout, a: &ActRef, dst: &mut [f32]) {
    let np = a.d.len() / 2;
    assert!(dst.len() >= np * PREP_WORDS);
    let kind = kind_of(layout);
    // SAFETY: block pair p reads d[2p..2p+2], ls[16p..16p+16] (in bounds:
    // 2p + 2 <= nb) and writes dst[32p..32p+32] (length checked above).
    unsafe {
        let idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        let o = dst.as_mut_ptr();
        for p in 0..np {
            let d2 = _mm_castpd_ps(_mm_load_sd(a.d.as_ptr().add(2 * p) as *const f64));
            let dv = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(d2));
            let ls = _mm512_loadu_si512(a.ls.as_ptr().add(16 * p) as *const _);
            let aux = match kind {
                I8SYM => _mm512_castsi512_ps(corr2::<I8SYM>(ls)),
                I4SYM => _mm512_castsi512_ps(corr2::<I4SYM>(ls)),
                _ => _mm512_cvtepi32_ps(ls),
            };
            _mm512_storeu_ps(o.add(p * PREP_WORDS), dv);
            _mm512_storeu_ps(o.add(p * PREP_WORDS + 16), aux);
        }
    }
}

/// Base pointers and row strides of an integer view's codes, scales and
/// mins (the f16 copies when `H`), computed once per call: deriving them per
/// row through `NativeView::row_codes` costs two integer divisions per row,
/// which shows in the profile of a batched decode step.
#[derive(Clone, Copy)]
struct Rows {
    codes: *const u8,
    code_stride: usize,
    scales: *const u8,
    mins: *const u8,
    grp_stride: usize,
    /// Software prefetch distance in bytes of codes: a whole number of
    /// rows, at least 4 (a later tile's row at the same block).
    pf: usize,
    /// The same distance in bytes of scales (rows ahead × `grp_stride`).
    pf_grp: usize,
}

impl Rows {
    fn new<const H: bool>(w: &NativeView) -> Rows {
        let gpr = w.groups_per_row();
        let (scales, mins, esize) = if H {
            (
                w.f16_scales().as_ptr() as *const u8,
                w.f16_mins().as_ptr() as *const u8,
                2,
            )
        } else {
            (
                w.scales().as_ptr() as *const u8,
                w.mins().as_ptr() as *const u8,
                4,
            )
        };
        let code_stride = w.row_code_bytes();
        let pf_rows = (PF_BYTES.div_ceil(code_stride.max(1))).next_multiple_of(4);
        Rows {
            codes: w.codes().as_ptr(),
            code_stride,
            pf: pf_rows * code_stride,
            pf_grp: pf_rows * gpr * esize,
            scales,
            mins,
            grp_stride: gpr * esize,
        }
    }
    /// Row `r`'s codes, scales and mins (wrapping arithmetic: the mins
    /// pointer of a symmetric layout is never dereferenced).
    #[inline(always)]
    fn row(&self, r: usize) -> (*const u8, *const u8, *const u8) {
        (
            self.codes.wrapping_add(r * self.code_stride),
            self.scales.wrapping_add(r * self.grp_stride),
            self.mins.wrapping_add(r * self.grp_stride),
        )
    }
}

/// Canonical dots of an `R` rows × `N` activation vectors tile. Each
/// (row, vector) pair has its own accumulator and runs the canonical sequence
/// of the module docs, so its result does not depend on `R` or `N`; rows
/// share the activation work, vectors share the weight loads and unpacking.
/// The scale product `s_g · d_b` is formed as (lane-broadcast `s`) × (lane-
/// broadcast `d`), the same f32 multiply per lane as the scalar reference.
/// With `PREP`, the per-vector values come from [`prepare`]'s buffers
/// (`prep[v]`) instead of being formed here: the same values.
///
/// # Safety
/// AVX-512 F/BW/VL + VNNI + FMA; rows `r..r + R` exist in the view `rows`
/// was made from (with `H` as there); every activation vector has `nb`
/// blocks = the view's `cols / 32`; with `PREP`, `prep[v]` holds
/// [`prepare`]'s output for `acts[v]` and this layout.
#[inline(always)]
unsafe fn dot_int_tile<
    const KIND: u8,
    const G16: bool,
    const H: bool,
    const PREP: bool,
    const R: usize,
    const N: usize,
>(
    rows: &Rows,
    nb: usize,
    r: usize,
    acts: &[ActRef; N],
    prep: &[*const f32; N],
) -> [[f32; N]; R] {
    let is4 = KIND == I4SYM || KIND == I4ASYM;
    let asym = KIND == I8ASYM || KIND == I4ASYM;
    let bpb = if is4 { 16 } else { 32 };
    let c: [*const u8; R] = std::array::from_fn(|i| rows.row(r + i).0);
    let s: [*const u8; R] = std::array::from_fn(|i| rows.row(r + i).1);
    let m: [*const u8; R] = std::array::from_fn(|i| rows.row(r + i).2);
    // SAFETY: every block index b < nb = cols/32; codes, scales, mins, the
    // activations and their prepared values are sized for whole rows
    // (NativeView / QuantizedActivations / `prepare`); `m[i]` is only
    // dereferenced for asymmetric layouts, which have mins.
    unsafe {
        // Lane l of a per-group vector takes group index idx[l] (of 2 or 4).
        let idx = if G16 {
            _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0)
        } else {
            _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
        };
        let idx_d = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        // Per-group values of two blocks as a 128-bit vector: 2 (G32) or 4 (G16).
        // (`H`: from the exact f16 copy, converted with F16C: the same values.)
        let grp = |p: *const u8, b: usize| -> __m128 {
            match (G16, H) {
                (true, false) => _mm_loadu_ps((p as *const f32).add(2 * b)),
                (false, false) => {
                    _mm_castpd_ps(_mm_load_sd((p as *const f32).add(b) as *const f64))
                }
                (true, true) => _mm_cvtph_ps(_mm_loadl_epi64(
                    (p as *const u16).add(2 * b) as *const __m128i
                )),
                (false, true) => _mm_cvtph_ps(_mm_cvtsi32_si128(
                    (p as *const u16).add(b).cast::<i32>().read_unaligned(),
                )),
            }
        };
        // Prefetch the scales (and mins) of the rows one prefetch distance
        // ahead, once per tile (a row's scales span under two cache lines).
        for i in 0..R {
            _mm_prefetch::<_MM_HINT_T0>(s[i].wrapping_add(rows.pf_grp) as *const i8);
            if asym {
                _mm_prefetch::<_MM_HINT_T0>(m[i].wrapping_add(rows.pf_grp) as *const i8);
            }
        }
        let mut acc = [[_mm512_setzero_ps(); N]; R];
        let mut b = 0;
        if PREP {
            // Rows outer, vectors inner, the vectors' values loaded at each
            // use: only the accumulators and one row's values need registers
            // (the other order keeps 4 vectors' values in registers and
            // spills accumulators in the 4 × 4 I4Asym tile).
            let xq: [*const i8; N] = std::array::from_fn(|v| acts[v].q.as_ptr());
            while b + 2 <= nb {
                let pw = (b / 2) * PREP_WORDS;
                for i in 0..R {
                    let u = u2::<KIND>(c[i].add(b * bpb));
                    _mm_prefetch::<_MM_HINT_T0>(c[i].wrapping_add(b * bpb + rows.pf) as *const i8);
                    let sr = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(grp(s[i], b)));
                    let mr = if asym {
                        _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(grp(m[i], b)))
                    } else {
                        _mm512_setzero_ps()
                    };
                    for v in 0..N {
                        let x = _mm512_loadu_si512(xq[v].add(b * QA) as *const _);
                        let pv = prep[v].add(pw);
                        let dv = _mm512_loadu_ps(pv);
                        let corr = if asym {
                            _mm512_setzero_si512()
                        } else {
                            _mm512_loadu_si512(pv.add(16) as *const _)
                        };
                        let p = _mm512_dpbusd_epi32(corr, u, x);
                        let ds = _mm512_mul_ps(sr, dv);
                        acc[i][v] = _mm512_fmadd_ps(ds, _mm512_cvtepi32_ps(p), acc[i][v]);
                        if asym {
                            let lsf = _mm512_loadu_ps(pv.add(16));
                            acc[i][v] = _mm512_fmadd_ps(_mm512_mul_ps(mr, dv), lsf, acc[i][v]);
                        }
                    }
                }
                b += 2;
            }
        }
        while !PREP && b + 2 <= nb {
            let x: [__m512i; N] = std::array::from_fn(|v| {
                _mm512_loadu_si512(acts[v].q.as_ptr().add(b * QA) as *const _)
            });
            let ls: [__m512i; N] = std::array::from_fn(|v| {
                _mm512_loadu_si512(acts[v].ls.as_ptr().add(b * 8) as *const _)
            });
            let corr: [__m512i; N] = std::array::from_fn(|v| corr2::<KIND>(ls[v]));
            let dv: [__m512; N] = std::array::from_fn(|v| {
                let d2 = _mm_castpd_ps(_mm_load_sd(acts[v].d.as_ptr().add(b) as *const f64));
                _mm512_permutexvar_ps(idx_d, _mm512_castps128_ps512(d2))
            });
            let lsf: [__m512; N] = std::array::from_fn(|v| {
                if asym {
                    _mm512_cvtepi32_ps(ls[v])
                } else {
                    _mm512_setzero_ps()
                }
            });
            for i in 0..R {
                let u = u2::<KIND>(c[i].add(b * bpb));
                _mm_prefetch::<_MM_HINT_T0>(c[i].wrapping_add(b * bpb + rows.pf) as *const i8);
                let sr = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(grp(s[i], b)));
                let mr = if asym {
                    _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(grp(m[i], b)))
                } else {
                    _mm512_setzero_ps()
                };
                for v in 0..N {
                    let p = _mm512_dpbusd_epi32(corr[v], u, x[v]);
                    let ds = _mm512_mul_ps(sr, dv[v]);
                    acc[i][v] = _mm512_fmadd_ps(ds, _mm512_cvtepi32_ps(p), acc[i][v]);
                    if asym {
                        acc[i][v] = _mm512_fmadd_ps(_mm512_mul_ps(mr, dv[v]), lsf[v], acc[i][v]);
                    }
                }
            }
            b += 2;
        }
        let mut out = [[0f32; N]; R];
        for i in 0..R {
            for v in 0..N {
                let a = &acts[v];
                let mut lo = _mm512_castps512_ps256(acc[i][v]);
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i][v]), 1));
                if b < nb {
                    let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QA) as *const __m256i);
                    let ls = _mm256_loadu_si256(a.ls.as_ptr().add(b * 8) as *const __m256i);
                    let p = p1::<KIND>(c[i].add(b * bpb), x, ls);
                    let d = *a.d.as_ptr().add(b);
                    let (si, mi) = (s[i], m[i]);
                    let ds = if G16 {
                        _mm256_set_m128(
                            _mm_set1_ps(grp1::<H>(si, 2 * b + 1) * d),
                            _mm_set1_ps(grp1::<H>(si, 2 * b) * d),
                        )
                    } else {
                        _mm256_set1_ps(grp1::<H>(si, b) * d)
                    };
                    lo = _mm256_fmadd_ps(ds, _mm256_cvtepi32_ps(p), lo);
                    if asym {
                        let dm = if G16 {
                            _mm256_set_m128(
                                _mm_set1_ps(grp1::<H>(mi, 2 * b + 1) * d),
                                _mm_set1_ps(grp1::<H>(mi, 2 * b) * d),
                            )
                        } else {
                            _mm256_set1_ps(grp1::<H>(mi, b) * d)
                        };
                        lo = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(ls), lo);
                    }
                }
                out[i][v] = reduce8(_mm256_add_ps(lo, hi));
            }
        }
        out
    }
}

/// Runs `R × N` tiles over rows `r0..r0 + m` (R-row steps, then 1-row tiles
/// for the last rows) for the vectors `v0..v0 + N`; writes the dot of row
/// `r0 + i` with vector `v` to `out[v * ystride + i]`.
///
/// # Safety
/// As [`dot_int_tile`], for rows `r0..r0 + m` and vectors `v0..v0 + N`
/// (`prep` as there when `PREP`); `out` valid for writes at every such index.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_pass<
    const KIND: u8,
    const G16: bool,
    const H: bool,
    const PREP: bool,
    const R: usize,
    const N: usize,
>(
    rows: &Rows,
    nb: usize,
    r0: usize,
    m: usize,
    acts: &[ActRef],
    prep: &[*const f32],
    v0: usize,
    out: *mut f32,
    ystride: usize,
) {
    let tile: [ActRef; N] = std::array::from_fn(|k| acts[v0 + k]);
    let pp: [*const f32; N] =
        std::array::from_fn(|k| if PREP { prep[v0 + k] } else { std::ptr::null() });
    let mut i = 0;
    // SAFETY: features and bounds per this fn's contract.
    unsafe {
        while i + R <= m {
            let t = dot_int_tile::<KIND, G16, H, PREP, R, N>(rows, nb, r0 + i, &tile, &pp);
            for (k, tk) in t.iter().enumerate() {
                for (j, &val) in tk.iter().enumerate() {
                    *out.add((v0 + j) * ystride + i + k) = val;
                }
            }
            i += R;
        }
        while i < m {
            let t = dot_int_tile::<KIND, G16, H, PREP, 1, N>(rows, nb, r0 + i, &tile, &pp);
            for (j, &val) in t[0].iter().enumerate() {
                *out.add((v0 + j) * ystride + i) = val;
            }
            i += 1;
        }
    }
}

/// Integer `rows × vectors` products for rows `r0..r0 + m`: writes
/// dot(row r0 + i, acts[v]) to `out[v * ystride + i]`, in tiles of 4 rows ×
/// 4 vectors (the last 1–3 vectors in one narrower tile), with the
/// per-vector values from `prep` (matmul) or formed in the tile (`prep`
/// empty: matvec).
///
/// Of the tile shapes measured, from 1 × 8 to 8 × 2, 4 × 4 is as fast as the
/// best at every n (3 × 4 is on par); taller or wider tiles spill registers,
/// every (row, vector) accumulator being a zmm.
///
/// # Safety
/// `Isa::Avx512Vnni.is_available()`; `w` has an integer layout with
/// `cols % 32 == 0`; `r0 + m <= w.rows()`; `prep` empty or one [`prepare`]d
/// buffer per vector (for this layout); `out` valid for writes at
/// `v * ystride + i` for every `v < acts.len()`, `i < m`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows_dot_multi(
    w: &NativeView,
    r0: usize,
    m: usize,
    acts: &[ActRef],
    prep: &[*const f32],
    out: *mut f32,
    ystride: usize,
) {
    if m == 0 || acts.is_empty() {
        return;
    }
    let nb = w.cols() / QA;
    macro_rules! pass {
        ($k:expr, $g16:expr, $h:expr, $p:expr, $r:expr, $n:expr, $v:expr) => {
            // SAFETY: features and bounds per this fn's contract; $v + $n <= n.
            unsafe {
                tile_pass::<{ $k }, { $g16 }, { $h }, { $p }, { $r }, { $n }>(
                    &Rows::new::<{ $h }>(w),
                    nb,
                    r0,
                    m,
                    acts,
                    prep,
                    $v,
                    out,
                    ystride,
                )
            }
        };
    }
    macro_rules! go_h {
        ($k:expr, $g16:expr, $h:expr) => {{
            let n = acts.len();
            let mut v = 0;
            while v < n {
                let nv = (n - v).min(4);
                if prep.is_empty() {
                    match nv {
                        4 => pass!($k, $g16, $h, false, 4, 4, v),
                        3 => pass!($k, $g16, $h, false, 4, 3, v),
                        2 => pass!($k, $g16, $h, false, 4, 2, v),
                        _ => pass!($k, $g16, $h, false, 4, 1, v),
                    }
                } else {
                    match nv {
                        4 => pass!($k, $g16, $h, true, 4, 4, v),
                        3 => pass!($k, $g16, $h, true, 4, 3, v),
                        2 => pass!($k, $g16, $h, true, 4, 2, v),
                        _ => pass!($k, $g16, $h, true, 4, 1, v),
                    }
                }
                v += nv;
            }
        }};
    }
    macro_rules! go {
        ($k:expr, $g16:expr) => {{
            if w.has_f16_scales() {
                go_h!($k, $g16, true)
            } else {
                go_h!($k, $g16, false)
            }
        }};
    }
    match (kind_of(w.layout()), w.group() == 16) {
        (I8SYM, false) => go!(I8SYM, false),
        (I8SYM, true) => go!(I8SYM, true),
        (I8ASYM, false) => go!(I8ASYM, false),
        (I8ASYM, true) => go!(I8ASYM, true),
        (I4SYM, _) => go!(I4SYM, false),
        _ => go!(I4ASYM, false),
    }
}

/// Float-layout row dot: 2 × 16-lane FMA accumulators, 32 elements per step.
///
/// # Safety
/// AVX-512 F + AVX2/FMA/F16C; `r < w.rows()`, `x.len() == w.cols()`.
#[inline(always)]
unsafe fn dot_float_row512(w: &NativeView, r: usize, x: &[f32]) -> f32 {
    let n = x.len();
    if n < 32 || !n.is_multiple_of(32) {
        // SAFETY: forwarded caller guarantees (AVX2 ⊂ the caller's features).
        return unsafe { dot_float_row_avx2(w, r, x) };
    }
    let cp = w.row_codes(r).as_ptr();
    let xp = x.as_ptr();
    // SAFETY: i + 32 <= n for every load; the row holds n elements.
    unsafe {
        let mut a0 = _mm512_setzero_ps();
        let mut a1 = _mm512_setzero_ps();
        let mut i = 0;
        macro_rules! run {
            (|$k:ident| $load:block) => {
                while i + 32 <= n {
                    let $k = i;
                    let (w0, w1): (__m512, __m512) = $load;
                    a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xp.add(i)), a0);
                    a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(i + 16)), a1);
                    i += 32;
                }
            };
        }
        match w.layout() {
            Layout::F32 => run!(|k| {
                let p = cp.add(k * 4) as *const f32;
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            }),
            Layout::F16 => run!(|k| {
                let p = cp.add(k * 2) as *const __m256i;
                (
                    _mm512_cvtph_ps(_mm256_loadu_si256(p)),
                    _mm512_cvtph_ps(_mm256_loadu_si256(p.add(1))),
                )
            }),
            _ => run!(|k| {
                let p = cp.add(k * 2) as *const __m256i;
                (
                    _mm512_castsi512_ps(_mm512_slli_epi32(
                        _mm512_cvtepu16_epi32(_mm256_loadu_si256(p)),
                        16,
                    )),
                    _mm512_castsi512_ps(_mm512_slli_epi32(
                        _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.add(1))),
                        16,
                    )),
                )
            }),
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
    }
}

/// AVX-512 VNNI entry point.
///
/// # Safety
/// `Isa::Avx512Vnni.is_available()` must hold, and `r0 + out.len() <= w.rows()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows_dot(w: &NativeView, r0: usize, act: Act, out: &mut [f32]) {
    match act {
        Act::Int(a) => {
            // SAFETY: features per this fn's contract; r0 + out.len() <= rows;
            // one vector, so only out[..out.len()] is written.
            unsafe { rows_dot_multi(w, r0, out.len(), &[a], &[], out.as_mut_ptr(), 0) }
        }
        Act::Float(x) => {
            let mut scratch = Vec::new();
            for (i, o) in out.iter_mut().enumerate() {
                *o = match w.layout() {
                    // SAFETY: features per this fn's contract; r0 + i < rows.
                    Layout::F32 | Layout::F16 | Layout::BF16 => unsafe {
                        dot_float_row512(w, r0 + i, x)
                    },
                    _ => dot_float_row(w, r0 + i, x, &mut scratch),
                };
            }
        }
    }
}
