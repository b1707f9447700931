//! `cargo run --release -p gpack-quant --example membw -- [THREADS] [PASSES]`
//!
//! The two physical yardsticks of issue 13's "Measure" (default 2 threads, 9
//! passes, median with min–max):
//! - read bandwidth: each thread sums its half of a 1 GiB buffer of u64
//!   words (written first, so every page is real memory, not the shared
//!   zero page); GB/s = 2^30 bytes / wall time of the pass;
//! - int8 peak of the best kernel path (`gpack_quant::int8_peak`: a loop of
//!   independent `vpdpbusd zmm`, `vpdpbusd ymm` or `vpmaddubsw ymm`); GMAC/s
//!   over all threads, best of the passes. "n/a" on the scalar path.
//!
//! The last line is `membw: read_gbps=… int8_gmacs=… int8_isa=…` for
//! scripts (read bandwidth: the median).

use std::time::Instant;

const BUF_BYTES: usize = 1 << 30;

/// Sum of `v`: a plain reduction, which the compiler vectorizes (several
/// independent vector accumulators) at whatever width the caller's target
/// features allow. (Eight hand-written lanes over `chunks_exact(8)` got
/// vectorized across chunks, with gathers: 10× slower.)
#[inline(always)]
fn sum_words(v: &[u64]) -> u64 {
    v.iter().fold(0u64, |a, &x| a.wrapping_add(x))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_words_avx512(v: &[u64]) -> u64 {
    sum_words(v)
}

fn sum(v: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU supports AVX-512F (checked just above).
        return unsafe { sum_words_avx512(v) };
    }
    sum_words(v)
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    let med = if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    };
    (med, v[0], v[v.len() - 1])
}

fn read_bandwidth(threads: usize, passes: usize) -> (f64, f64, f64) {
    let words = BUF_BYTES / 8;
    // A zeroed allocation this large is fresh mapped pages, untouched: each
    // page is first touched below by the thread that will read it.
    let mut buf = vec![0u64; words];
    let per = words.div_ceil(threads);
    std::thread::scope(|s| {
        for (t, c) in buf.chunks_mut(per).enumerate() {
            s.spawn(move || {
                for (i, x) in c.iter_mut().enumerate() {
                    *x = (t * per + i) as u64;
                }
            });
        }
    });
    let mut gbps = Vec::with_capacity(passes);
    for _ in 0..passes {
        let t = Instant::now();
        let total = std::thread::scope(|s| {
            let h: Vec<_> = buf.chunks(per).map(|c| s.spawn(move || sum(c))).collect();
            h.into_iter()
                .map(|h| h.join().unwrap())
                .fold(0u64, u64::wrapping_add)
        });
        let dt = t.elapsed().as_secs_f64();
        std::hint::black_box(total);
        gbps.push(BUF_BYTES as f64 / dt / 1e9);
    }
    stats(gbps)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threads: usize = args.first().map_or(2, |s| s.parse().expect("THREADS"));
    let passes: usize = args.get(1).map_or(9, |s| s.parse().expect("PASSES"));
    assert!(
        threads >= 1 && passes >= 1,
        "THREADS and PASSES must be >= 1"
    );
    let (bw, bmin, bmax) = read_bandwidth(threads, passes);
    println!(
        "read bandwidth, 1 GiB, {threads} threads: {bw:.1} GB/s (min {bmin:.1}, max {bmax:.1}; {passes} passes)"
    );
    let isa = gpack_quant::Isa::best();
    let peak = gpack_quant::int8_peak(isa, threads, passes);
    match peak {
        Some(p) => println!(
            "int8 peak ({}, {}), {threads} threads: {:.1} GMAC/s (best of {passes} passes)",
            p.instruction,
            isa.name(),
            p.gmacs
        ),
        None => println!("int8 peak: n/a ({} path)", isa.name()),
    }
    println!(
        "membw: read_gbps={bw:.2} int8_gmacs={} int8_isa={}",
        peak.map_or("n/a".to_string(), |p| format!("{:.1}", p.gmacs)),
        isa.name()
    );
}
