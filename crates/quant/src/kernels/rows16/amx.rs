//! The prefill tile on AMX-INT8 (Intel Xeon 4th generation and later): the
//! integer sums `P_h` of a staged group-block for a tile of [`TW`] vectors
//! come from one product per 32-element block instead of 128 `vpdpbusd`s
//! (kinds with 32-element sub-blocks, and Q6_K: see [`runs`]): `tdpbssd` with the
//! stage's codes less OFF as i8 for the symmetric kinds ([`sign`], so no
//! start `-OFF · S` is added per vector and block), `tdpbsud` with the
//! unsigned codes for the asymmetric ones (OFF 0). The float steps of the
//! canonical formula (`fma(s_h, P_h, t)`, the mins, `fma(D_B, t, acc)`) then
//! run on AVX-512 exactly as in `avx512::tile`. Integer sums are exact, so
//! the bits are those of every other path (tested against the AVX-512 tile
//! and, through the ISA tests, the scalar reference).
//!
//! Q6_K's integer scales ([`Kind::iscale`]) take a tile of their own
//! ([`tile_iscale`]): the weights times their scales split into two i8
//! planes ([`split`]), two products per 32-element block summed in two sums
//! tiles over the whole ggml block, one store of each and one float step per
//! ggml block. Its products take 64 elements (two blocks per product, from
//! the pair operands `build_preps` lays out) on alternate code tiles (tmm2,
//! tmm5 / tmm6, tmm7); each of those steps measured faster, and the whole
//! more than twice the AVX-512 tile's rate with float scales (figures:
//! docs/perf-history/kernels.md).
//!
//! The tiles (palette 1): a thread loads [`CFG`] or [`CFG64`] when the kind
//! it runs needs the other one, and keeps it until then. [`CFG`]: two sets,
//! tmm0–2 and tmm3–5, used by alternate blocks (no block waits for the
//! previous one's store to free its tiles), each of the sums (`TW × 64`: 16
//! vectors × 16 rows, i32), the activation codes (`TW × 32`, s8; rows
//! `PREP` words apart) and the block's stage codes (`8 × 64`: 8 words × 16
//! rows × 4). [`CFG64`]: see there.
//!
//! Where the CPU has AMX-INT8 this tile is faster than the AVX-512 tile on
//! the kinds measured, IQ4_XS, Q4_K, Q5_K and Q6_K (`rows16_probe`,
//! alternating with `GPACK_NO_AMX=1`; figures:
//! docs/perf-history/kernels.md). The shapes that lose are not used: tiles
//! of 8 vectors (half the rows per product) are no faster than the AVX-512
//! tile; sharing one stage-code load among 2 or 4 vector tiles is slower,
//! and so is issuing the next blocks' products before the float steps of
//! earlier ones (a ring of sums); storing each block's sums after the next
//! product, or rotating four sums tiles, gains nothing beyond noise.
//! `examples/amx_tiles.rs` shows why: the tile unit runs its loads,
//! products and 1 KiB stores one after another, and the core's reads of the
//! sums add to that wherever they are placed; the float steps are a large
//! part of the tile's time.
//!
//! Linux hands out AMX state only on request (`arch_prctl`
//! `ARCH_REQ_XCOMP_PERM`, once per process): [`enabled`] asks, and is false
//! when the CPU lacks AMX-INT8, the kernel refuses, or `GPACK_NO_AMX` is set.

use super::avx512::bf;
use super::{Kind, Stage, PREP, R};
use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::Cell;
use std::sync::OnceLock;

/// Vectors per AMX tile (the rows of its sums).
pub(super) const TW: usize = 16;

/// The tile configuration (`ldtilecfg`'s 64-byte operand).
#[repr(C, align(64))]
struct TileCfg {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

/// A palette-1 configuration of tiles 0..8 with these `(rows, bytes)`.
const fn cfg(shapes: [(u8, u16); 8]) -> TileCfg {
    let mut c = TileCfg {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb: [0; 16],
        rows: [0; 16],
    };
    let mut i = 0;
    while i < 8 {
        c.rows[i] = shapes[i].0;
        c.colsb[i] = shapes[i].1;
        i += 1;
    }
    c
}

/// The integer-scale tile's configuration ([`tile_iscale`]): sums in tmm0
/// and tmm3, 64-element activation operands in tmm1 and tmm4, code planes
/// (16 × 64 B: two blocks) in tmm2, tmm5, tmm6 and tmm7.
static CFG64: TileCfg = cfg([
    (TW as u8, 64),
    (TW as u8, 64),
    (16, 64),
    (TW as u8, 64),
    (TW as u8, 64),
    (16, 64),
    (16, 64),
    (16, 64),
]);

/// See the module docs.
static CFG: TileCfg = cfg([
    (TW as u8, 64),
    (TW as u8, 32),
    (8, 64),
    (TW as u8, 64),
    (TW as u8, 32),
    (8, 64),
    (8, 64),
    (8, 64),
]);

/// Whether the prefill tile runs on AMX (see the module docs; decided once
/// per process).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(detect)
}

fn detect() -> bool {
    if std::env::var_os("GPACK_NO_AMX").is_some() || !super::super::Isa::Avx512Vnni.is_available() {
        return false;
    }
    // CPUID.(EAX=7, ECX=0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
    let edx = __cpuid_count(7, 0).edx;
    if edx & (1 << 24) == 0 || edx & (1 << 25) == 0 {
        return false;
    }
    request_permission()
}

#[cfg(target_os = "linux")]
fn request_permission() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it changes only
    // which xsave features this process may use.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn request_permission() -> bool {
    false
}

thread_local! {
    /// The configuration this thread's tiles have: none, [`CFG`] or [`CFG64`].
    static CONFIGURED: Cell<*const TileCfg> = const { Cell::new(std::ptr::null()) };
}

/// Loads `cfg` into this thread's tile configuration unless it is the one
/// loaded (a member of another kind in the same call switches it back).
///
/// # Safety
/// [`enabled`] returned true.
unsafe fn configure(cfg: &'static TileCfg) {
    if !std::ptr::eq(CONFIGURED.get(), cfg) {
        // SAFETY: AMX is usable (caller); both configurations are valid
        // palette-1 ones (rows ≤ 16, bytes per row ≤ 64).
        unsafe { asm!("ldtilecfg [{}]", in(reg) cfg, options(nostack, readonly)) };
        CONFIGURED.set(cfg);
    }
}

/// Whether `k` takes the AMX tile: kinds with 32-element sub-blocks, and
/// Q6_K through its integer scales ([`Kind::iscale`]: two products per
/// 32-element block, summed in the tile over the whole ggml block). The
/// other kinds with 16-element sub-blocks (Q3_K, Q2_K) stay on the AVX-512
/// tile: two half-size products and stores per block make AMX slower for
/// them, as it was for Q6_K before its integer scales.
pub(super) fn runs(k: &Kind) -> bool {
    k.sub == 32 || k.iscale
}

/// Writes what the AMX tile of kind `k` reads besides the stage's codes
/// and scales: [`sign`] for the symmetric kinds with 32-element
/// sub-blocks, [`split`] for the integer-scale kinds; nothing for the
/// asymmetric ones (their codes are multiplied as they are).
///
/// # Safety
/// AVX-512 F/BW available.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn prepare(k: &Kind, st: &mut Stage) {
    if k.iscale {
        // SAFETY: the features are enabled here.
        unsafe { split(k, st) }
    } else if !k.asym {
        sign(k, st)
    }
}

/// Writes the stage's `signed` codes for the AMX tile of a symmetric kind:
/// `u - OFF` as i8, so that `tdpbssd` gives `P_h` itself, with no start
/// to add per vector and block (exact: every symmetric kind's weights are
/// in `[-128, 127]`).
fn sign(k: &Kind, st: &mut Stage) {
    debug_assert!(!k.asym && (0..=255).contains(&k.off));
    // Byte arithmetic (vectorized): u - OFF wraps to the i8 it is.
    let off = k.off as u8;
    for kb in 0..k.blocks() {
        for (s, &u) in st.signed[kb].iter_mut().zip(&st.codes[kb]) {
            *s = u.wrapping_sub(off) as i8;
        }
    }
}

/// Writes the weights times their integer scales, `w · sc_h` (`w = u -
/// OFF`; at most 4096 in magnitude: Q6_K, IQ4_XS), as two i8 planes: the low 7
/// bits into `signed` (0..=127) and the rest over 128 into `high`
/// (-32..=32), so that `128 · (x · high) + x · signed` is `x · (w · sc)`
/// exactly.
///
/// # Safety
/// AVX-512 F/BW available.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn split(k: &Kind, st: &mut Stage) {
    debug_assert!(k.iscale && !k.asym && (0..=255).contains(&k.off));
    // SAFETY: every load and store is one of the stage's 64-byte words
    // (codes, signed, high of block kb < 8, word j < 8) or scale rows.
    unsafe {
        let off = _mm512_set1_epi8(k.off as i8);
        let lo7 = _mm512_set1_epi16(127);
        let low = _mm512_set1_epi16(0xFF);
        for kb in 0..k.blocks() {
            for j in 0..8 {
                // Word j is elements 4j .. 4j + 4 of every row: sub-block
                // (32 kb + 4 j) / SUB, one row per 32-bit lane.
                let h = (32 * kb + 4 * j) / k.sub;
                let sc = _mm512_loadu_si512(st.iscales[h].as_ptr().cast());
                // The scale in both 16-bit halves of its lane.
                let sc = _mm512_or_si512(
                    _mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF)),
                    _mm512_slli_epi32::<16>(sc),
                );
                let at = 64 * j;
                let u = _mm512_load_si512(st.codes[kb].as_ptr().add(at).cast());
                // u - OFF wraps to the i8 it is.
                let w = _mm512_sub_epi8(u, off);
                // Even and odd bytes as i16, times the scale (|·| ≤ 4096).
                let we = _mm512_mullo_epi16(_mm512_srai_epi16::<8>(_mm512_slli_epi16::<8>(w)), sc);
                let wo = _mm512_mullo_epi16(_mm512_srai_epi16::<8>(w), sc);
                let lo = _mm512_or_si512(
                    _mm512_and_si512(we, lo7),
                    _mm512_slli_epi16::<8>(_mm512_and_si512(wo, lo7)),
                );
                let hi = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srai_epi16::<7>(we), low),
                    _mm512_slli_epi16::<8>(_mm512_srai_epi16::<7>(wo)),
                );
                _mm512_store_si512(st.signed[kb].as_mut_ptr().add(at).cast(), lo);
                _mm512_store_si512(st.high[kb].as_mut_ptr().add(at).cast(), hi);
            }
        }
    }
}

/// As `avx512::dot` for a tile of [`TW`] vectors (`acc.len() == TW`; prep
/// words laid out for 16-vector tiles), the integer sums from AMX.
///
/// # Safety
/// [`enabled`] returned true (AVX-512 and AMX-INT8 usable); [`runs`] holds
/// for `k`. For a symmetric kind, [`sign`] wrote the stages' signed codes
/// (else the sums are wrong, though every access stays in bounds).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot(
    k: &Kind,
    sts: &[Stage],
    pp: &[u32],
    bs: usize,
    pairs: &[u8],
    acc: &mut [[f32; R]],
) {
    let nblk = sts.len() * k.blocks();
    assert!(runs(k) && acc.len() == TW);
    assert!(nblk == 0 || pp.len() >= (nblk - 1) * bs + TW * PREP);
    assert!(!k.iscale || pairs.len() >= nblk / 2 * TW * 64);
    // SAFETY: AMX usable (contract); every prep word read is below
    // (nblk - 1) * bs + TW * PREP (asserted), every pair operand inside
    // `pairs` (asserted), every stage read inside `sts`.
    unsafe {
        let (p, a) = (pp.as_ptr(), acc.as_mut_ptr());
        if k.iscale {
            configure(&CFG64);
            tile_iscale(k, sts, p, bs, pairs.as_ptr(), a)
        } else if k.asym {
            configure(&CFG);
            tile::<true>(k, sts, p, bs, a)
        } else {
            configure(&CFG);
            tile::<false>(k, sts, p, bs, a)
        }
    }
}

/// Loads the stage codes at `u` into tile `B`.
///
/// # Safety
/// Tiles configured; `u` readable for 512 bytes.
#[inline(always)]
unsafe fn load_codes<const B: usize>(u: *const u8) {
    // SAFETY: per this fn's contract.
    unsafe {
        asm!(
            "tileloadd tmm{b}, [{u} + {s}*1]",
            b = const B,
            u = in(reg) u,
            s = in(reg) 64usize,
            options(nostack),
        )
    }
}

/// `c = x · codes(B)` for the `TW` vectors at `x` (rows `PREP` words apart),
/// with tiles `C` and `A`: `tdpbsud` (unsigned codes: asymmetric kinds,
/// OFF 0) when `U`, else `tdpbssd` (signed codes: symmetric kinds).
///
/// # Safety
/// Tiles configured, tile `B` loaded; `x` readable for `TW` rows of 32
/// bytes, `c` writable.
#[inline(always)]
unsafe fn product<const U: bool, const C: usize, const A: usize, const B: usize>(
    x: *const u32,
    c: *mut [[i32; R]; TW],
) {
    // One block, the mnemonic aside.
    macro_rules! go {
        ($op:literal) => {
            asm!(
                "tilezero tmm{c}",
                "tileloadd tmm{a}, [{x} + {s}*1]",
                concat!($op, " tmm{c}, tmm{a}, tmm{b}"),
                "tilestored [{out} + {s}*1], tmm{c}",
                c = const C,
                a = const A,
                b = const B,
                x = in(reg) x,
                out = in(reg) c,
                s = in(reg) PREP * 4,
                options(nostack),
            )
        };
    }
    // SAFETY: per this fn's contract.
    unsafe {
        if U {
            go!("tdpbsud")
        } else {
            go!("tdpbssd")
        }
    }
}

/// The sums `P_h` of a staged group-block's `nb` blocks into `c[kb]` (the
/// tile's codes of block `kb` at `x + kb · bs` words), every product issued
/// before any sum is read back, alternate blocks on alternate tile sets:
/// symmetric kinds multiply the signed codes ([`sign`]), asymmetric ones
/// (`A`) the unsigned codes, whose OFF is 0.
///
/// # Safety
/// Tiles configured; as [`dot`] for the prep words of the group-block's
/// blocks.
#[inline(always)]
unsafe fn sums<const A: bool>(
    st: &Stage,
    nb: usize,
    x: *const u32,
    bs: usize,
    c: *mut [[i32; R]; TW],
) {
    // SAFETY: per this fn's contract.
    unsafe {
        for kb in 0..nb {
            let u = if A {
                st.codes[kb].as_ptr()
            } else {
                st.signed[kb].as_ptr().cast()
            };
            let (x, out) = (x.add(kb * bs), c.add(kb));
            if kb % 2 == 0 {
                load_codes::<2>(u);
                product::<A, 0, 1, 2>(x, out);
            } else {
                load_codes::<5>(u);
                product::<A, 3, 4, 5>(x, out);
            }
        }
    }
}

/// `avx512::tile` for the tile at `p0` over the staged group-blocks `sts`,
/// with `P_h` from [`sums`]: the same float operations in the same order.
///
/// # Safety
/// As [`dot`], tiles configured.
#[inline(always)]
unsafe fn tile<const A: bool>(
    k: &Kind,
    sts: &[Stage],
    p0: *const u32,
    bs: usize,
    a: *mut [f32; R],
) {
    #[repr(C, align(64))]
    struct Sums([[[i32; R]; TW]; 8]);
    // Written by `sums` before it is read (no zeroing: 8 KiB per call).
    let mut c = std::mem::MaybeUninit::<Sums>::uninit();
    let cp = c.as_mut_ptr().cast::<[[i32; R]; TW]>();
    // SAFETY: per `dot`; `c` is this frame's, read after `sums` wrote it.
    unsafe {
        for (g, st) in sts.iter().enumerate() {
            let p = p0.add(g * k.blocks() * bs);
            sums::<A>(st, k.blocks(), p, bs, cp);
            let mut t = [_mm512_setzero_ps(); TW];
            for kb in 0..k.blocks() {
                let q = |v: usize| p.add(v * PREP + kb * bs);
                let cs = &*cp.add(kb);
                let s = _mm512_loadu_ps(st.scales[kb].as_ptr());
                let m = _mm512_loadu_ps(st.mins[kb].as_ptr());
                for (v, x) in t.iter_mut().enumerate() {
                    // P_h itself (the AVX-512 tile's sum from its start).
                    let i0 = _mm512_load_si512(cs[v].as_ptr().cast());
                    *x = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(i0), *x);
                    if A {
                        *x = _mm512_fmadd_ps(m, bf(q(v), 11), *x);
                    }
                }
            }
            // (The AVX-512 tile keeps one-block kinds' accumulators in
            // registers: the same fma, the same bits.)
            for (v, t) in t.iter().enumerate() {
                let d = bf(p, v * PREP + 8);
                let acc = (*a.add(v)).as_mut_ptr();
                _mm512_storeu_ps(acc, _mm512_fmadd_ps(d, *t, _mm512_loadu_ps(acc)));
            }
        }
    }
}

/// The tile of an integer-scale kind ([`Kind::iscale`]) over the staged
/// group-blocks `sts`: per group-block, `Σ x · high` and `Σ x · signed`
/// ([`split`]) summed in two tiles over all its blocks, two blocks (64
/// elements) per product, stored once; then `T = 128 · high + low`, `t = d
/// · T`, `acc = fma(D_B, t, acc)`: the canonical formula's integer-scale
/// steps, as in `avx512::tile`. The activation operands are the tile's
/// pair operands (`pairs`: `[block pair][vector][64 bytes]`), the
/// activation scales its prep words'.
///
/// # Safety
/// As [`dot`], [`CFG64`] loaded, [`split`] run on the stages, `pairs`
/// readable for the stages' block pairs.
#[inline(always)]
unsafe fn tile_iscale(
    k: &Kind,
    sts: &[Stage],
    p0: *const u32,
    bs: usize,
    pairs: *const u8,
    a: *mut [f32; R],
) {
    #[repr(C, align(64))]
    struct Sums([[[i32; R]; TW]; 2]);
    let mut c = std::mem::MaybeUninit::<Sums>::uninit();
    let cp = c.as_mut_ptr().cast::<[[i32; R]; TW]>();
    let np = k.blocks() / 2;
    // SAFETY: per `dot`; `c` is this frame's, read after the tiles are
    // stored to it.
    unsafe {
        for (g, st) in sts.iter().enumerate() {
            let p = p0.add(g * k.blocks() * bs);
            asm!("tilezero tmm0", "tilezero tmm3", options(nostack));
            for pb in 0..np {
                let x = pairs.add((g * np + pb) * TW * 64);
                // Blocks 2 pb and 2 pb + 1 of each plane: 1 KiB in a row.
                let (lo, hi) = (st.signed[2 * pb].as_ptr(), st.high[2 * pb].as_ptr());
                // Alternate activation and code tiles (1, 2, 5 and 4, 6, 7)
                // for alternate pairs: a load need not wait for the
                // previous pair's products to free its tile.
                macro_rules! go {
                    ($a:literal, $bl:literal, $bh:literal) => {
                        asm!(
                            concat!("tileloadd tmm", $a, ", [{x} + {w}*1]"),
                            concat!("tileloadd tmm", $bl, ", [{lo} + {w}*1]"),
                            concat!("tdpbssd tmm0, tmm", $a, ", tmm", $bl),
                            concat!("tileloadd tmm", $bh, ", [{hi} + {w}*1]"),
                            concat!("tdpbssd tmm3, tmm", $a, ", tmm", $bh),
                            x = in(reg) x,
                            lo = in(reg) lo,
                            hi = in(reg) hi,
                            w = in(reg) 64usize,
                            options(nostack),
                        )
                    };
                }
                if pb % 2 == 0 {
                    go!("1", "2", "5")
                } else {
                    go!("4", "6", "7")
                }
            }
            asm!(
                "tilestored [{l} + {s}*1], tmm0",
                "tilestored [{h} + {s}*1], tmm3",
                l = in(reg) cp,
                h = in(reg) cp.add(1),
                s = in(reg) 64usize,
                options(nostack),
            );
            let (lo, hi) = (&*cp, &*cp.add(1));
            let dd = _mm512_loadu_ps(st.d.as_ptr());
            for v in 0..TW {
                let l = _mm512_load_si512(lo[v].as_ptr().cast());
                let h = _mm512_load_si512(hi[v].as_ptr().cast());
                let t = _mm512_add_epi32(_mm512_slli_epi32::<7>(h), l);
                let t = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(t));
                let acc = (*a.add(v)).as_mut_ptr();
                let d = bf(p, v * PREP + 8);
                _mm512_storeu_ps(acc, _mm512_fmadd_ps(d, t, _mm512_loadu_ps(acc)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::rows16::tests::{blocks, rows16};
    use crate::kernels::rows16::{decode_scalar, Kind, Stage};
    use crate::GgmlType;

    /// The AMX tile gives the AVX-512 tile's bits for every kind, over one
    /// and several staged group-blocks, with activations at the int8 edges.
    /// Where the CPU has no AMX-INT8, `enabled` must say so (CPUID) and
    /// the AVX-512 tile is the one that runs.
    #[test]
    fn amx_tile_equals_the_avx512_tile() {
        let edx = __cpuid_count(7, 0).edx;
        let has = edx & (3 << 24) == 3 << 24 && crate::Isa::Avx512Vnni.is_available();
        if !(has && enabled()) {
            assert!(!enabled(), "AMX enabled without AMX-INT8");
            return;
        }
        let mut seed = 5u64;
        for t in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::IQ4_NL,
            GgmlType::IQ4_XS,
            GgmlType::MXFP4,
        ] {
            let k = Kind::of(t).unwrap();
            assert!(runs(&k), "{t}");
            let cols = 8 * k.qk;
            let w = rows16(t, &blocks(t, 16, cols, 1, &mut seed), 16, cols);
            let v = crate::NativeView::parse(w.as_slice()).unwrap();
            let gbs = k.group_block();
            let mut sts: Vec<Stage> = (0..cols / k.qk).map(|_| *Stage::new()).collect();
            for (g, st) in sts.iter_mut().enumerate() {
                decode_scalar(&k, &v.codes()[g * gbs..(g + 1) * gbs], st);
                // SAFETY: AVX-512 checked above.
                unsafe { prepare(&k, st) };
            }
            let nblk = sts.len() * k.blocks();
            let bs = TW * PREP;
            let mut pp = vec![0u32; nblk * bs];
            for (i, w) in pp.iter_mut().enumerate() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (seed >> 33) as u32;
                *w = match i % PREP {
                    // Codes at the edges now and then.
                    0..=7 if r.is_multiple_of(5) => 0x8181_7f7f,
                    0..=7 => r,
                    8 => f32::to_bits((r % 1000) as f32 / 333.0 - 1.5),
                    _ => 0,
                };
            }
            // The sums' words as `prep_vector` writes them from the codes:
            // the starts -OFF · S and S as f32, per sub-block (halves of
            // the block for 16-element sub-blocks).
            for p in pp.chunks_exact_mut(PREP) {
                let x = bytemuck::cast_slice::<u32, i8>(&p[..8]);
                let sum = |x: &[i8]| x.iter().map(|&x| i32::from(x)).sum::<i32>();
                let (s0, s1) = if k.sub == 16 {
                    (sum(&x[..16]), sum(&x[16..]))
                } else {
                    (sum(x), 0)
                };
                p[9] = (-k.off * s0) as u32;
                p[10] = (-k.off * s1) as u32;
                p[11] = (s0 as f32).to_bits();
                p[12] = (s1 as f32).to_bits();
            }
            // The pair operands as `build_preps` lays them out: per block
            // pair, each vector's 64 codes.
            let mut pairs = vec![0u8; nblk / 2 * TW * 64];
            for (i, o) in pairs.chunks_exact_mut(32).enumerate() {
                let (pb, v, half) = (i / (2 * TW), (i / 2) % TW, i % 2);
                let w = &pp[(2 * pb + half) * bs + v * PREP..][..8];
                o.copy_from_slice(bytemuck::cast_slice(w));
            }
            for n_st in [1, sts.len()] {
                let init: Vec<[f32; R]> = (0..TW).map(|v| [v as f32 * 0.25 - 1.0; R]).collect();
                let (mut want, mut got) = (init.clone(), init);
                // SAFETY: AVX-512 and AMX checked above; sizes as asserted
                // by the callees. The AVX-512 tile takes 8 vectors at a time.
                unsafe {
                    for (i, w) in want.chunks_mut(8).enumerate() {
                        let pp = &pp[i * 8 * PREP..];
                        super::super::avx512::dot(&k, &mut sts[..n_st], pp, bs, w);
                    }
                    dot(&k, &sts[..n_st], &pp, bs, &pairs, &mut got);
                }
                let bits =
                    |a: &[[f32; R]]| a.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{t} over {n_st} group-blocks");
            }
        }
    }
}
