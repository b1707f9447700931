//! Which vector operations share the execution ports of `vpdpbusd zmm` on
//! this CPU: the measured ceiling of the prefill tile's formula.
//!
//! `cargo run --release -p gpack-quant --example vnni_ports`
//!
//! Each loop runs 16 independent `vpdpbusd zmm` chains per iteration plus
//! 2 operations of one other kind (on their own registers, so nothing waits
//! on anything), on one thread, and prints the `vpdpbusd` rate as a share
//! of the loop without extras. An operation that issues on other ports
//! costs nothing (100 %); one that competes for the `vpdpbusd` ports takes
//! a slot each: 16 / 18 = 89 %. (Loops with 4 extras per 16 give shares
//! that vary from run to run for the same operation: not reported.)
//! On Zen 4 `vfmadd231ps`, `vmulps`, `vpmulld` and `vpdpwssd` take a
//! `vpdpbusd` slot; `vaddps`, `vcvtdq2ps` and `vpshufb` do not; `vpaddd`
//! takes one in some runs and not in others (it can issue on either kind of
//! port). The runs: docs/perf-history/kernels.md.
//!
//! The prefill tile (`kernels/rows16/avx512.rs`) spends, per vector and
//! 32-element sub-block, 8 `vpdpbusd` and one `vfmadd` (the sub-block
//! scale), plus a second `vfmadd` for the types with mins (Q4_K, Q5_K) and
//! one more per 32 elements for the one-block types (Q4_0, Q8_0, IQ4_NL …):
//! if `vfmadd` takes a `vpdpbusd` slot, those kinds cannot pass 8/9 = 89 %
//! or 8/10 = 80 % of the `vpdpbusd` peak, whatever the code around them.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::time::Instant;

    /// The extra operation of a loop.
    #[derive(Clone, Copy, Debug)]
    pub enum Extra {
        None,
        Fmadd,
        Mul,
        Add,
        Cvt,
        Mullo,
        Dpwssd,
        AddI32,
        Shuffle,
    }

    pub const ALL: [(Extra, &str); 9] = [
        (Extra::None, "(none)"),
        (Extra::Fmadd, "vfmadd231ps"),
        (Extra::Mul, "vmulps"),
        (Extra::Add, "vaddps"),
        (Extra::Cvt, "vcvtdq2ps"),
        (Extra::Mullo, "vpmulld"),
        (Extra::Dpwssd, "vpdpwssd"),
        (Extra::AddI32, "vpaddd"),
        (Extra::Shuffle, "vpshufb"),
    ];

    /// Seconds for `iters` iterations of 16 `vpdpbusd` and `k` extras.
    ///
    /// # Safety
    /// AVX-512 F/BW/VNNI available.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
    pub unsafe fn run(e: Extra, k: usize, iters: u64) -> f64 {
        let a = _mm512_set1_epi32(std::hint::black_box(0x0102_0304));
        let mut b = _mm512_set1_epi32(std::hint::black_box(0x0101_0101));
        let one = _mm512_set1_epi32(1);
        let s = _mm512_set1_ps(std::hint::black_box(1.000_000_1));
        let mut acc = [_mm512_setzero_si512(); 16];
        let mut f = [_mm512_set1_ps(1.0); 4];
        let mut i = [_mm512_set1_epi32(3); 4];
        let t = Instant::now();
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_dpbusd_epi32(*x, a, b);
            }
            for j in 0..k {
                let (fj, ij) = (&mut f[j % 4], &mut i[j % 4]);
                match e {
                    Extra::None => {}
                    Extra::Fmadd => *fj = _mm512_fmadd_ps(*fj, s, s),
                    Extra::Mul => *fj = _mm512_mul_ps(*fj, s),
                    Extra::Add => *fj = _mm512_add_ps(*fj, s),
                    Extra::Cvt => *fj = _mm512_cvtepi32_ps(*ij),
                    Extra::Mullo => *ij = _mm512_mullo_epi32(*ij, a),
                    Extra::Dpwssd => *ij = _mm512_dpwssd_epi32(*ij, a, b),
                    Extra::AddI32 => *ij = _mm512_add_epi32(*ij, a),
                    Extra::Shuffle => *ij = _mm512_shuffle_epi8(*ij, a),
                }
            }
            b = _mm512_add_epi32(b, one);
        }
        let dt = t.elapsed().as_secs_f64();
        std::hint::black_box((acc, f, i));
        dt
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    {
        use x86::{run, ALL};
        if !gpack_quant::Isa::Avx512Vnni.is_available() {
            eprintln!("this CPU has no AVX-512 VNNI: nothing to measure");
            std::process::exit(1);
        }
        let iters = 20_000_000u64;
        // Best of 5 (a shared host's other tenants only ever slow a loop down).
        let best = |e, k| {
            (0..5)
                .map(|_| {
                    // SAFETY: AVX-512 VNNI checked above.
                    unsafe { run(e, k, iters) }
                })
                .fold(f64::MAX, f64::min)
        };
        let base = best(x86::Extra::None, 0);
        let gmacs = (iters * 16 * 64) as f64 / base / 1e9;
        println!("vpdpbusd zmm alone: {gmacs:.1} GMAC/s on one thread");
        println!(
            "vpdpbusd rate with one extra op per 8 of them \
             (89 % if the op takes a vpdpbusd slot, 100 % if it is free):"
        );
        println!("| extra op | vpdpbusd rate |");
        println!("|---|---|");
        for (e, name) in &ALL[1..] {
            println!("| {name} | {:.0} % |", 100.0 * base / best(*e, 2));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    eprintln!("x86_64 only");
}
