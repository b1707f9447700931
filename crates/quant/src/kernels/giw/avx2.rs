//! 256-bit kernels: AVX2 (`vpmaddubsw`) and AVX-VNNI (`vpdpbusd`), one
//! activation block (32 elements) per step, blocks alternating between two
//! accumulators (the canonical streams of the module docs).
//!
//! The two ISAs share the loop ([`dot_int_row`], generic over [`Dot`], whose
//! methods are `#[inline(always)]` without `#[target_feature]`, memchr-style:
//! they are only ever inlined into the `#[target_feature]` entry points below).

use super::scalar::dot_float_row;
use super::{Act, ActRef, QA};
use crate::layout::Layout;
use crate::view::NativeView;
use std::arch::x86_64::*;

/// Layout kinds, as const generic parameters.
pub(super) const I8SYM: u8 = 0;
pub(super) const I8ASYM: u8 = 1;
pub(super) const I4SYM: u8 = 2;
pub(super) const I4ASYM: u8 = 3;

pub(super) fn kind_of(l: Layout) -> u8 {
    match l {
        Layout::I8Sym { .. } => I8SYM,
        Layout::I8Asym { .. } => I8ASYM,
        Layout::I4Sym { .. } => I4SYM,
        _ => I4ASYM,
    }
}

/// The exact i32 lane sums `P[j]` of one 32-element block.
trait Dot {
    /// # Safety
    /// The CPU must support the implementor's ISA; inlined into matching
    /// `#[target_feature]` functions only.
    unsafe fn p<const KIND: u8>(codes: *const u8, x: __m256i, ls: __m256i) -> __m256i;
}

/// Unpacks 16 bytes of native nibbles into 32 codes (elements 0..16 from the
/// low nibbles, 16..32 from the high ones).
///
/// # Safety
/// `p` must be valid for 16 bytes of reads; AVX2 must be available.
#[inline(always)]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes and AVX2.
    unsafe {
        let t = _mm_loadu_si128(p as *const __m128i);
        let v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
        _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
    }
}

struct Avx2Dot;
impl Dot for Avx2Dot {
    #[inline(always)]
    unsafe fn p<const KIND: u8>(codes: *const u8, x: __m256i, ls: __m256i) -> __m256i {
        // SAFETY: inlined into `#[target_feature(enable = "avx2,fma,f16c")]`
        // functions; `codes` is valid for one block (caller).
        unsafe {
            let ones = _mm256_set1_epi16(1);
            match KIND {
                I8SYM | I8ASYM => {
                    let mut w = _mm256_loadu_si256(codes as *const __m256i);
                    if KIND == I8ASYM {
                        // u - 128 as i8; add back 128 * S below.
                        w = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
                    }
                    let prod = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
                    let p = _mm256_madd_epi16(prod, ones);
                    if KIND == I8ASYM {
                        _mm256_add_epi32(p, _mm256_slli_epi32(ls, 7))
                    } else {
                        p
                    }
                }
                _ => {
                    let u = nibbles32(codes);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones);
                    if KIND == I4SYM {
                        _mm256_sub_epi32(p, _mm256_slli_epi32(ls, 3))
                    } else {
                        p
                    }
                }
            }
        }
    }
}

struct VnniDot;
impl Dot for VnniDot {
    #[inline(always)]
    unsafe fn p<const KIND: u8>(codes: *const u8, x: __m256i, ls: __m256i) -> __m256i {
        // SAFETY: inlined into `#[target_feature(enable = "avx2,fma,f16c,avxvnni")]`
        // functions; `codes` is valid for one block (caller). The offset
        // correction (-128·S or -8·S) starts the accumulation; the compiler
        // hoists it out of the row loop (it depends on the block only).
        unsafe {
            let z = _mm256_setzero_si256();
            match KIND {
                I8SYM => {
                    let u = _mm256_xor_si256(
                        _mm256_loadu_si256(codes as *const __m256i),
                        _mm256_set1_epi8(-128),
                    );
                    _mm256_dpbusd_avx_epi32(_mm256_sub_epi32(z, _mm256_slli_epi32(ls, 7)), u, x)
                }
                I8ASYM => {
                    _mm256_dpbusd_avx_epi32(z, _mm256_loadu_si256(codes as *const __m256i), x)
                }
                I4SYM => _mm256_dpbusd_avx_epi32(
                    _mm256_sub_epi32(z, _mm256_slli_epi32(ls, 3)),
                    nibbles32(codes),
                    x,
                ),
                _ => _mm256_dpbusd_avx_epi32(z, nibbles32(codes), x),
            }
        }
    }
}

/// Per-group value `i` of a row's scales or mins: f32, or (`H`) the exact
/// f16 copy converted with F16C (the same f32 value).
///
/// # Safety
/// `p` points to the row's f32 (`!H`) or u16 (`H`) array with more than `i`
/// elements; F16C available when `H`.
#[inline(always)]
pub(super) unsafe fn grp1<const H: bool>(p: *const u8, i: usize) -> f32 {
    // SAFETY: the caller guarantees the bounds and F16C.
    unsafe {
        if H {
            let h = (p as *const u16).add(i).read_unaligned();
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
        } else {
            (p as *const f32).add(i).read_unaligned()
        }
    }
}

/// The scale (and min) arrays of row `r` as byte pointers: the f16 copy when
/// `H`, else the f32 arrays.
#[inline(always)]
pub(super) fn group_ptrs<const H: bool>(w: &NativeView, r: usize) -> (*const u8, *const u8) {
    if H {
        (
            w.row_f16_scales(r).as_ptr() as *const u8,
            w.row_f16_mins(r).as_ptr() as *const u8,
        )
    } else {
        (
            w.row_scales(r).as_ptr() as *const u8,
            w.row_mins(r).as_ptr() as *const u8,
        )
    }
}

/// Canonical horizontal reduction of `acc0 + acc1`.
///
/// # Safety
/// AVX must be available.
#[inline(always)]
pub(super) unsafe fn reduce8(v: __m256) -> f32 {
    // SAFETY: register-only AVX ops; the caller guarantees AVX.
    unsafe {
        let w = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let z = _mm_add_ps(w, _mm_movehl_ps(w, w));
        _mm_cvtss_f32(_mm_add_ss(z, _mm_shuffle_ps(z, z, 1)))
    }
}

/// One canonical block step of `R` rows into `acc` (one accumulator per row).
///
/// # Safety
/// Rows' codes/scales/mins valid for block `b`; the `D` ISA available.
#[inline(always)]
unsafe fn block_step<D: Dot, const KIND: u8, const G16: bool, const H: bool, const R: usize>(
    acc: &mut [__m256; R],
    c: &[*const u8; R],
    s: &[*const u8; R],
    m: &[*const u8; R],
    a: &ActRef,
    b: usize,
) {
    // SAFETY: the caller guarantees that block b is in bounds for the codes
    // (b*32 or b*16 bytes on), scales/mins (1 or 2 per block) and activations;
    // mins are only read for asymmetric layouts.
    unsafe {
        let asym = KIND == I8ASYM || KIND == I4ASYM;
        let bytes_per_block = if KIND == I4SYM || KIND == I4ASYM {
            16
        } else {
            32
        };
        let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QA) as *const __m256i);
        let ls = _mm256_loadu_si256(a.ls.as_ptr().add(b * 8) as *const __m256i);
        let lsf = if asym {
            _mm256_cvtepi32_ps(ls)
        } else {
            _mm256_setzero_ps()
        };
        let dx = *a.d.get_unchecked(b);
        for i in 0..R {
            let p = D::p::<KIND>(c[i].add(b * bytes_per_block), x, ls);
            let ds = if G16 {
                let s0 = grp1::<H>(s[i], 2 * b) * dx;
                let s1 = grp1::<H>(s[i], 2 * b + 1) * dx;
                _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0))
            } else {
                _mm256_set1_ps(grp1::<H>(s[i], b) * dx)
            };
            acc[i] = _mm256_fmadd_ps(ds, _mm256_cvtepi32_ps(p), acc[i]);
            if asym {
                let dm = if G16 {
                    let m0 = grp1::<H>(m[i], 2 * b) * dx;
                    let m1 = grp1::<H>(m[i], 2 * b + 1) * dx;
                    _mm256_set_m128(_mm_set1_ps(m1), _mm_set1_ps(m0))
                } else {
                    _mm256_set1_ps(grp1::<H>(m[i], b) * dx)
                };
                acc[i] = _mm256_fmadd_ps(dm, lsf, acc[i]);
            }
        }
    }
}

/// Canonical dots of `R` integer rows starting at row `r`.
///
/// # Safety
/// Rows `r..r + R` exist in `w`; the `D` ISA available.
#[inline(always)]
unsafe fn dot_int_rows<D: Dot, const KIND: u8, const G16: bool, const H: bool, const R: usize>(
    w: &NativeView,
    r: usize,
    a: &ActRef,
) -> [f32; R] {
    let nb = a.d.len();
    let c: [*const u8; R] = std::array::from_fn(|i| w.row_codes(r + i).as_ptr());
    let s: [*const u8; R] = std::array::from_fn(|i| group_ptrs::<H>(w, r + i).0);
    let m: [*const u8; R] = std::array::from_fn(|i| group_ptrs::<H>(w, r + i).1);
    // Software prefetch of a later tile's rows at the same block (whole
    // rows, >= 8 KiB ahead), as in the AVX-512 kernels: the rows of small
    // models are too short for the hardware prefetcher to ramp up.
    let stride = w.row_code_bytes().max(1);
    let pf = (8192usize.div_ceil(stride)).next_multiple_of(4) * stride;
    let bpb = if KIND == I4SYM || KIND == I4ASYM {
        16
    } else {
        32
    };
    // SAFETY: b < nb = cols/32 and the rows are whole (NativeView); the
    // prefetch addresses are never dereferenced.
    unsafe {
        let mut acc0 = [_mm256_setzero_ps(); R];
        let mut acc1 = [_mm256_setzero_ps(); R];
        let mut b = 0;
        while b + 2 <= nb {
            for ci in &c {
                _mm_prefetch::<_MM_HINT_T0>(ci.wrapping_add(b * bpb + pf) as *const i8);
            }
            block_step::<D, KIND, G16, H, R>(&mut acc0, &c, &s, &m, a, b);
            block_step::<D, KIND, G16, H, R>(&mut acc1, &c, &s, &m, a, b + 1);
            b += 2;
        }
        if b < nb {
            block_step::<D, KIND, G16, H, R>(&mut acc0, &c, &s, &m, a, b);
        }
        std::array::from_fn(|i| reduce8(_mm256_add_ps(acc0[i], acc1[i])))
    }
}

/// Rows per step (independent FMA chains, shared activation loads).
const ROWS: usize = 4;

/// # Safety
/// As [`dot_int_rows`], for rows `r0..r0 + out.len()`.
#[inline(always)]
unsafe fn rows_int<D: Dot>(w: &NativeView, r0: usize, a: &ActRef, out: &mut [f32]) {
    macro_rules! go_h {
        ($k:expr, $g16:expr, $h:expr) => {{
            let n = out.len();
            let mut i = 0;
            while i + ROWS <= n {
                // SAFETY: r0 + i + ROWS <= rows (caller); ISA per the caller.
                let v = unsafe { dot_int_rows::<D, { $k }, { $g16 }, { $h }, ROWS>(w, r0 + i, a) };
                out[i..i + ROWS].copy_from_slice(&v);
                i += ROWS;
            }
            while i < n {
                // SAFETY: as above, one row.
                out[i] = unsafe { dot_int_rows::<D, { $k }, { $g16 }, { $h }, 1>(w, r0 + i, a) }[0];
                i += 1;
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
    let g16 = w.group() == 16;
    match (kind_of(w.layout()), g16) {
        (I8SYM, false) => go!(I8SYM, false),
        (I8SYM, true) => go!(I8SYM, true),
        (I8ASYM, false) => go!(I8ASYM, false),
        (I8ASYM, true) => go!(I8ASYM, true),
        (I4SYM, _) => go!(I4SYM, false),
        _ => go!(I4ASYM, false),
    }
}

/// Float-layout row dot: 2 × 8-lane FMA accumulators, scalar tail.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[inline(always)]
pub(super) unsafe fn dot_float_row_avx2(w: &NativeView, r: usize, x: &[f32]) -> f32 {
    let c = w.row_codes(r);
    let n = x.len();
    let xp = x.as_ptr();
    // SAFETY: every load reads elements i..i+16 with i + 16 <= n, within the
    // row's codes (n elements) and x (n elements); features per the caller.
    unsafe {
        let mut a0 = _mm256_setzero_ps();
        let mut a1 = _mm256_setzero_ps();
        let mut i = 0;
        macro_rules! run {
            (|$i:ident| $load:block) => {
                while i + 16 <= n {
                    let $i = i;
                    let (w0, w1): (__m256, __m256) = $load;
                    a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp.add(i)), a0);
                    a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp.add(i + 8)), a1);
                    i += 16;
                }
            };
        }
        let cp = c.as_ptr();
        match w.layout() {
            Layout::F32 => run!(|k| {
                let p = cp.add(k * 4) as *const f32;
                (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
            }),
            Layout::F16 => run!(|k| {
                let p = cp.add(k * 2) as *const __m128i;
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(p)),
                    _mm256_cvtph_ps(_mm_loadu_si128(p.add(1))),
                )
            }),
            _ => run!(|k| {
                let p = cp.add(k * 2) as *const __m128i;
                (
                    _mm256_castsi256_ps(_mm256_slli_epi32(
                        _mm256_cvtepu16_epi32(_mm_loadu_si128(p)),
                        16,
                    )),
                    _mm256_castsi256_ps(_mm256_slli_epi32(
                        _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(1))),
                        16,
                    )),
                )
            }),
        }
        let mut s = reduce8(_mm256_add_ps(a0, a1));
        if i < n {
            let mut tmp = vec![0f32; n];
            w.dequantize_row(r, &mut tmp);
            for k in i..n {
                s += tmp[k] * x[k];
            }
        }
        s
    }
}

/// # Safety
/// AVX2 + FMA + F16C available; `r0 + out.len() <= w.rows()`.
#[inline(always)]
unsafe fn rows_dot_impl<D: Dot>(w: &NativeView, r0: usize, act: Act, out: &mut [f32]) {
    match act {
        // SAFETY: forwarded caller guarantees.
        Act::Int(a) => unsafe { rows_int::<D>(w, r0, &a, out) },
        Act::Float(x) => {
            let mut scratch = Vec::new();
            for (i, o) in out.iter_mut().enumerate() {
                *o = match w.layout() {
                    // SAFETY: forwarded caller guarantees.
                    Layout::F32 | Layout::F16 | Layout::BF16 => unsafe {
                        dot_float_row_avx2(w, r0 + i, x)
                    },
                    _ => dot_float_row(w, r0 + i, x, &mut scratch),
                };
            }
        }
    }
}

/// AVX2 entry point.
///
/// # Safety
/// AVX2, FMA and F16C must be available (`Isa::Avx2.is_available()`), and
/// `r0 + out.len() <= w.rows()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_dot_avx2(w: &NativeView, r0: usize, act: Act, out: &mut [f32]) {
    // SAFETY: forwarded caller guarantees.
    unsafe { rows_dot_impl::<Avx2Dot>(w, r0, act, out) }
}

/// AVX-VNNI entry point.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-VNNI must be available (`Isa::AvxVnni.is_available()`),
/// and `r0 + out.len() <= w.rows()`.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn rows_dot_vnni(w: &NativeView, r0: usize, act: Act, out: &mut [f32]) {
    // SAFETY: forwarded caller guarantees.
    unsafe { rows_dot_impl::<VnniDot>(w, r0, act, out) }
}
