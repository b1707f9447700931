//! `cargo run --release -p gpack-quant --example membw -- [THREADS] [PASSES]`
//!
//! The two physical yardsticks of issue 13's "Measure" (default 2 threads, 9
//! passes, median with min–max):
//! - read bandwidth: each thread sums its half of a 1 GiB buffer of u64
//!   words (written first, so every page is real memory, not the shared
//!   zero page); GB/s = 2^30 bytes / wall time of the pass;
//! - int8 VNNI peak: each thread runs a loop of independent `vpdpbusd zmm`
//!   (16 accumulators, 64 u8×i8 multiply-adds each); GMAC/s over all
//!   threads. "n/a" when the CPU has no AVX-512 VNNI.
//!
//! The last line is `membw: read_gbps=… vnni_gmacs=…` (medians) for scripts.

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

/// Multiply-adds of one `vnni_loop` call: `iters` × 16 accumulators × 64.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni")]
fn vnni_loop(iters: u64, seed: i32) -> i32 {
    use std::arch::x86_64::*;
    let a = _mm512_set1_epi32(std::hint::black_box(seed));
    let b = _mm512_set1_epi32(std::hint::black_box(seed.rotate_left(7)));
    let mut acc = [_mm512_setzero_si512(); 16];
    for _ in 0..iters {
        // 16 independent chains: enough in flight to cover the latency.
        for x in acc.iter_mut() {
            *x = _mm512_dpbusd_epi32(*x, a, b);
        }
    }
    let mut s = _mm512_setzero_si512();
    for x in acc {
        s = _mm512_add_epi32(s, x);
    }
    _mm512_reduce_add_epi32(s)
}

fn vnni_peak(threads: usize, passes: usize) -> Option<(f64, f64, f64)> {
    #[cfg(target_arch = "x86_64")]
    {
        if !(std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vnni"))
        {
            return None;
        }
        let iters = 20_000_000u64;
        let mut g = Vec::with_capacity(passes);
        for p in 0..passes {
            let t = Instant::now();
            std::thread::scope(|s| {
                for k in 0..threads {
                    s.spawn(move || {
                        // SAFETY: AVX-512F and AVX-512 VNNI are present (checked above).
                        std::hint::black_box(unsafe { vnni_loop(iters, (p * 31 + k) as i32 | 1) })
                    });
                }
            });
            let dt = t.elapsed().as_secs_f64();
            g.push((threads as u64 * iters * 16 * 64) as f64 / dt / 1e9);
        }
        Some(stats(g))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (threads, passes);
        None
    }
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
    let vnni = vnni_peak(threads, passes);
    match vnni {
        Some((m, lo, hi)) => println!(
            "int8 VNNI peak (vpdpbusd zmm), {threads} threads: {m:.1} GMAC/s (min {lo:.1}, max {hi:.1})"
        ),
        None => println!("int8 VNNI peak: n/a (no AVX-512 VNNI)"),
    }
    println!(
        "membw: read_gbps={bw:.2} vnni_gmacs={}",
        vnni.map_or("n/a".to_string(), |v| format!("{:.1}", v.0))
    );
}
