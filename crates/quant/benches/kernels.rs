//! Kernel throughput: weight bytes streamed per second, per layout and ISA.
//!
//! * `matvec_1t/<rows>x<cols>/<layout>/<isa>`: one thread, every ISA.
//! * `matvec_mt/<rows>x<cols>/<layout>/{pool,rayon}`: best ISA, all cores,
//!   the crate's persistent pool against rayon.
//! * `matmul_1t/...`: 4 activation vectors (weights read once).
//! * `membw/{1t,mt}`: a plain read loop over 256 MiB, the bandwidth limit.
//!
//! `GPACK_BENCH_QUICK=1` shortens the measurement (for CI smoke runs).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpack_quant::kernels::{matvec_on, matvec_rayon};
use gpack_quant::{matmul_with, GgmlType, Isa, NativeView, Pool};
use std::hint::black_box;

mod common;
use common::{Rng, Tensor};

/// Bytes a matvec streams: codes + scales + mins.
fn weight_bytes(v: &NativeView) -> u64 {
    (v.codes().len() + 4 * (v.scales().len() + v.mins().len())) as u64
}

const LAYOUTS: [(GgmlType, &str); 9] = [
    (GgmlType::Q8_0, "i8sym_g32"),
    (GgmlType::Q5_K, "i8asym_g32"),
    (GgmlType::Q6_K, "i8sym_g16"),
    (GgmlType::Q2_K, "i8asym_g16"),
    (GgmlType::Q4_0, "i4sym_g32"),
    (GgmlType::Q4_1, "i4asym_g32"),
    (GgmlType::F16, "f16"),
    (GgmlType::BF16, "bf16"),
    (GgmlType::F32, "f32"),
];

fn config(c: &mut Criterion) -> &mut Criterion {
    c
}

fn bench_1t(c: &mut Criterion) {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let pool1 = Pool::new(1);
    for (rows, cols) in [(576usize, 1536usize), (4096, 4096)] {
        let mut g = config(c).benchmark_group(format!("matvec_1t/{rows}x{cols}"));
        for (t, name) in LAYOUTS {
            let tensor = Tensor::new(t, rows, cols, &mut rng);
            let v = tensor.view();
            let x: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
            let mut y = vec![0f32; rows];
            g.throughput(Throughput::Bytes(weight_bytes(&v)));
            for isa in Isa::available() {
                if isa == Isa::Scalar && rows * cols > 1 << 20 {
                    continue; // the reference is far too slow to matter here
                }
                g.bench_function(BenchmarkId::new(name, isa.name()), |b| {
                    b.iter(|| matvec_on(isa, &pool1, &v, black_box(&x), &mut y))
                });
            }
        }
        g.finish();
    }
}

fn bench_mt(c: &mut Criterion) {
    let mut rng = Rng(0x2234_5678_9abc_def1);
    let isa = Isa::best();
    let pool = Pool::global();
    for (rows, cols) in [
        (576usize, 576usize),
        (1536, 576),
        (576, 1536),
        (49152, 576),
        (4096, 4096),
    ] {
        let mut g = config(c).benchmark_group(format!("matvec_mt/{rows}x{cols}"));
        for (t, name) in [LAYOUTS[0], LAYOUTS[4], LAYOUTS[5], LAYOUTS[6]] {
            let tensor = Tensor::new(t, rows, cols, &mut rng);
            let v = tensor.view();
            let x: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
            let mut y = vec![0f32; rows];
            g.throughput(Throughput::Bytes(weight_bytes(&v)));
            g.bench_function(BenchmarkId::new(name, "pool"), |b| {
                b.iter(|| matvec_on(isa, pool, &v, black_box(&x), &mut y))
            });
            g.bench_function(BenchmarkId::new(name, "rayon"), |b| {
                b.iter(|| matvec_rayon(isa, &v, black_box(&x), &mut y))
            });
        }
        g.finish();
    }
}

fn bench_matmul(c: &mut Criterion) {
    let mut rng = Rng(0x3234_5678_9abc_def1);
    let (rows, cols, n) = (1536usize, 576usize, 4usize);
    let mut g = config(c).benchmark_group(format!("matmul_n{n}/{rows}x{cols}"));
    for (t, name) in [LAYOUTS[0], LAYOUTS[5]] {
        let tensor = Tensor::new(t, rows, cols, &mut rng);
        let v = tensor.view();
        let x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
        let mut y = vec![0f32; n * rows];
        g.throughput(Throughput::Bytes(weight_bytes(&v)));
        g.bench_function(BenchmarkId::new(name, Isa::best().name()), |b| {
            b.iter(|| matmul_with(Isa::best(), &v, black_box(&x), n, &mut y))
        });
    }
    g.finish();
}

fn read_sum(s: &[u64]) -> u64 {
    // Eight independent lanes so the loop is load-bound, not add-latency-bound.
    let mut acc = [0u64; 8];
    for ch in s.chunks_exact(8) {
        for k in 0..8 {
            acc[k] = acc[k].wrapping_add(ch[k]);
        }
    }
    acc.iter().fold(0, |a, b| a.wrapping_add(*b))
}

fn bench_membw(c: &mut Criterion) {
    let n = 256 << 20;
    let buf: Vec<u64> = (0..n / 8).map(|i| i as u64).collect();
    let mut g = config(c).benchmark_group("membw");
    g.throughput(Throughput::Bytes(n as u64));
    g.bench_function("read_1t", |b| {
        b.iter(|| black_box(read_sum(black_box(&buf))))
    });
    let pool = Pool::global();
    let tasks = pool.threads() * 4;
    let chunk = buf.len() / tasks;
    g.bench_function(format!("read_{}t", pool.threads()), |b| {
        b.iter(|| {
            let total = std::sync::atomic::AtomicU64::new(0);
            pool.run(tasks, &|i| {
                let s = read_sum(&buf[i * chunk..(i + 1) * chunk]);
                total.fetch_add(s, std::sync::atomic::Ordering::Relaxed);
            });
            black_box(total.into_inner())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::criterion(1200);
    targets = bench_membw, bench_1t, bench_mt, bench_matmul
}
criterion_main!(benches);
