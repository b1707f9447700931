//! The int8 dot-product peak of this CPU: the yardstick a prefill's
//! multiply-accumulates per second are compared with (`gpack bench`,
//! `bench/quants.sh`).
//!
//! Each thread runs a loop of the ISA's own int8 dot instruction on
//! independent accumulators (enough chains to cover its latency), whose
//! operand changes every iteration so nothing is hoisted:
//!
//! | ISA | instruction | u8×i8 multiply-adds per instruction |
//! |---|---|---|
//! | AVX-512 VNNI | `vpdpbusd zmm` | 64 |
//! | AVX-VNNI | `vpdpbusd ymm` | 32 |
//! | AVX2 | `vpmaddubsw ymm` + `vpaddw` (what the AVX2 kernels run) | 32 |
//!
//! The scalar path has no such instruction: no peak.

use super::Isa;
use std::time::Instant;

/// A measured int8 peak.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Int8Peak {
    /// The path measured.
    pub isa: Isa,
    /// Its instruction, as in the table above.
    pub instruction: &'static str,
    /// Multiply-adds per second over all threads, in units of 10^9 (best
    /// of the passes).
    pub gmacs: f64,
}

/// Independent accumulator chains per thread of the `vpdpbusd` loops.
const CHAINS: usize = 16;
/// Chains of the `vpmaddubsw` loop: its products do not depend on the sums,
/// so each chain needs its own operand (equal ones would be computed once),
/// and six operands and six sums fill 12 of AVX2's 16 registers.
const MADDUBS_CHAINS: usize = 6;

/// Measures the int8 peak of `isa` on `threads` threads: `passes` passes of
/// about 40 ms each, the best kept. `None` for the scalar path or an ISA
/// this CPU lacks.
pub fn int8_peak(isa: Isa, threads: usize, passes: usize) -> Option<Int8Peak> {
    if !isa.is_available() || threads == 0 || passes == 0 {
        return None;
    }
    // (instruction, multiply-adds per instruction, instructions per iteration)
    let (instruction, macs_per_op, ops): (&'static str, u64, usize) = match isa {
        Isa::Scalar => return None,
        Isa::Avx2 => ("vpmaddubsw ymm + vpaddw", 32, MADDUBS_CHAINS),
        Isa::AvxVnni => ("vpdpbusd ymm", 32, CHAINS),
        Isa::Avx512Vnni => ("vpdpbusd zmm", 64, CHAINS),
    };
    // About 40 ms per pass at 7 instructions per ns.
    let iters = (256_000_000 / ops) as u64;
    let mut best = 0f64;
    for p in 0..passes {
        let t = Instant::now();
        std::thread::scope(|s| {
            for k in 0..threads {
                s.spawn(move || std::hint::black_box(run(isa, iters, (p * 31 + k) as i32 | 1)));
            }
        });
        let dt = t.elapsed().as_secs_f64();
        let macs = threads as u64 * iters * ops as u64 * macs_per_op;
        best = best.max(macs as f64 / dt / 1e9);
    }
    Some(Int8Peak {
        isa,
        instruction,
        gmacs: best,
    })
}

/// `iters` iterations of `isa`'s loop.
fn run(isa: Isa, iters: u64, seed: i32) -> i32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `int8_peak` checked `isa.is_available()`.
        Isa::Avx512Vnni => unsafe { x86::vnni512(iters, seed) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::AvxVnni => unsafe { x86::vnni256(iters, seed) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { x86::maddubs(iters, seed) },
        _ => {
            let _ = (iters, seed);
            0
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CHAINS, MADDUBS_CHAINS};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512F and AVX-512 VNNI available.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn vnni512(iters: u64, seed: i32) -> i32 {
        let a = _mm512_set1_epi32(std::hint::black_box(seed));
        let mut b = _mm512_set1_epi32(std::hint::black_box(seed.rotate_left(7)));
        let one = _mm512_set1_epi32(1);
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_dpbusd_epi32(*x, a, b);
            }
            b = _mm512_add_epi32(b, one);
        }
        let mut s = _mm512_setzero_si512();
        for x in acc {
            s = _mm512_add_epi32(s, x);
        }
        _mm512_reduce_add_epi32(s)
    }

    /// # Safety
    /// AVX2 and AVX-VNNI available.
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn vnni256(iters: u64, seed: i32) -> i32 {
        let a = _mm256_set1_epi32(std::hint::black_box(seed));
        let mut b = _mm256_set1_epi32(std::hint::black_box(seed.rotate_left(7)));
        let one = _mm256_set1_epi32(1);
        let mut acc = [_mm256_setzero_si256(); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_dpbusd_avx_epi32(*x, a, b);
            }
            b = _mm256_add_epi32(b, one);
        }
        sum256(&acc)
    }

    /// # Safety
    /// AVX2 available.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn maddubs(iters: u64, seed: i32) -> i32 {
        let mut a = [_mm256_setzero_si256(); MADDUBS_CHAINS];
        for (j, x) in a.iter_mut().enumerate() {
            *x = _mm256_set1_epi32(std::hint::black_box(seed.wrapping_add(j as i32)) & 0x3f3f_3f3f);
        }
        let mut b = _mm256_set1_epi32(std::hint::black_box(seed.rotate_left(7)));
        let one = _mm256_set1_epi8(1);
        let mut acc = [_mm256_setzero_si256(); MADDUBS_CHAINS];
        for _ in 0..iters {
            for (x, a) in acc.iter_mut().zip(&a) {
                *x = _mm256_add_epi16(*x, _mm256_maddubs_epi16(*a, b));
            }
            b = _mm256_add_epi8(b, one);
        }
        sum256(&acc)
    }

    #[target_feature(enable = "avx2")]
    fn sum256(acc: &[__m256i]) -> i32 {
        let mut s = _mm256_setzero_si256();
        for &x in acc {
            s = _mm256_add_epi32(s, x);
        }
        _mm256_extract_epi32::<0>(s) ^ _mm256_extract_epi32::<7>(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_simd_path_of_this_cpu_has_a_positive_peak_and_scalar_none() {
        assert_eq!(int8_peak(Isa::Scalar, 1, 1), None);
        for isa in [Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni] {
            let p = int8_peak(isa, 1, 1);
            assert_eq!(p.is_some(), isa.is_available(), "{isa:?}");
            if let Some(p) = p {
                assert!(p.gmacs.is_finite() && p.gmacs > 0.0, "{p:?}");
                assert_eq!(p.isa, isa);
            }
        }
    }
}
