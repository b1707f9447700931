//! The quantizers compiled for the wider ISAs, chosen at run time.
//!
//! The row functions are plain Rust whose lane loops ([`super::lanes`])
//! vectorize; compiled for baseline x86-64 they get 4-wide SSE2. Here the
//! same code is instantiated inside `#[target_feature]` functions, so LLVM
//! may use 8-wide AVX2 or 16-wide AVX-512 registers for it. Only the
//! register width changes: no FMA is enabled (and Rust would not contract
//! `a * b + c` anyway), every float operation is the IEEE operation of the
//! scalar code in the same order, so the blocks are the same bits on every
//! path (`crates/quant/tests/quantizers.rs` compares the paths row by row).
//! [`Isa::best`] picks the path (`GPACK_ISA=scalar` forces baseline code).

/// A `fn(Isa, x, qw, out)` running `$f(x, qw, out)` (an
/// `#[inline(always)]` row function) compiled for the ISA asked for: one
/// `#[target_feature]` entry point per wide ISA, each with its own inlined
/// copy of `$f`; baseline code when the CPU lacks the ISA.
macro_rules! on_isa {
    ($f:path) => {{
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn avx2(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
            $f(x, qw, out)
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
        fn avx512(x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
            $f(x, qw, out)
        }
        fn row(isa: $crate::kernels::Isa, x: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
            use $crate::kernels::Isa;
            #[cfg(target_arch = "x86_64")]
            match isa {
                Isa::Avx512Vnni if isa.is_available() => {
                    // SAFETY: the CPU has AVX-512 F/BW/VL and AVX2
                    // (`is_available` checked it).
                    return unsafe { avx512(x, qw, out) };
                }
                Isa::Avx2 | Isa::AvxVnni if isa.is_available() => {
                    // SAFETY: the CPU has AVX2 (checked above).
                    return unsafe { avx2(x, qw, out) };
                }
                _ => {}
            }
            let _ = isa;
            $f(x, qw, out)
        }
        row
    }};
}
pub(crate) use on_isa;
