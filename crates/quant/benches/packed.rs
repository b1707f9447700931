//! `PackedMatrix::matmul` against the unpacked kernels (`matvec` for one
//! vector, `matmul` for several) on SmolLM2-135M shapes, best ISA, the
//! global pool (all cores). Weights are random blocks transcoded with their
//! f16 scale copies, as the runtime loads Q4_1 / Q8_0 GGUFs.
//!
//! * `packed/<layout>/<shape>/n<n>/{current,packed}`: one matrix, called
//!   back to back (small shapes stay in L2: the in-cache speed).
//! * `packed_step/<layout>/n<n>/{current,packed}`: the matrices of one
//!   decoding step, 30 layers of distinct tensors (q 576×576, k and v
//!   192×576, o 576×576, gate‖up 3072×576, down 576×1536) plus the tied head
//!   49152×576 (Q8_0 for the Q4_1 model, as SmolLM2's GGUF has it): weights
//!   stream from memory as in the server.
//!
//! `GPACK_BENCH_QUICK=1` shortens the measurement.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpack_quant::{matmul, matvec, GgmlType, NativeView, PackedMatrix};
use std::hint::black_box;

mod common;
use common::{Rng, Tensor};

/// The unpacked path the runtime uses: `matvec` for one vector, else `matmul`.
fn current(v: &NativeView, x: &[f32], n: usize, y: &mut [f32]) {
    if n == 1 {
        matvec(v, x, y)
    } else {
        matmul(v, x, n, y)
    }
}

const SHAPES: [(&str, usize, usize); 5] = [
    ("q_o_576x576", 576, 576),
    ("k_v_192x576", 192, 576),
    ("gate_up_3072x576", 3072, 576),
    ("down_576x1536", 576, 1536),
    ("head_49152x576", 49152, 576),
];

const LAYOUTS: [(GgmlType, &str); 2] = [(GgmlType::Q4_1, "i4asym"), (GgmlType::Q8_0, "i8sym")];

fn bench_shapes(c: &mut Criterion) {
    let mut rng = Rng(0x4234_5678_9abc_def1);
    for (t, lname) in LAYOUTS {
        for (sname, rows, cols) in SHAPES {
            let tensor = Tensor::with_scales(t, rows, cols, &mut rng, true);
            let v = tensor.view();
            let pm = PackedMatrix::pack(&v).unwrap();
            for n in [1usize, 8] {
                let x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
                let mut y = vec![0f32; n * rows];
                let mut g = c.benchmark_group(format!("packed/{lname}/{sname}/n{n}"));
                g.throughput(Throughput::Elements((rows * cols * n) as u64));
                g.bench_function(BenchmarkId::from_parameter("current"), |b| {
                    b.iter(|| current(&v, black_box(&x), n, &mut y))
                });
                g.bench_function(BenchmarkId::from_parameter("packed"), |b| {
                    b.iter(|| pm.matmul(black_box(&x), n, &mut y))
                });
                g.finish();
            }
        }
    }
}

fn bench_step(c: &mut Criterion) {
    let mut rng = Rng(0x5234_5678_9abc_def1);
    let layer_shapes = [
        (576usize, 576usize),
        (192, 576),
        (192, 576),
        (576, 576),
        (3072, 576),
        (576, 1536),
    ];
    for (t, lname) in LAYOUTS {
        let mut tensors: Vec<Tensor> = (0..30)
            .flat_map(|_| layer_shapes.map(|(r, c)| (r, c)))
            .map(|(r, c)| Tensor::with_scales(t, r, c, &mut rng, true))
            .collect();
        tensors.push(Tensor::with_scales(
            GgmlType::Q8_0,
            49152,
            576,
            &mut rng,
            true,
        ));
        let views: Vec<NativeView> = tensors.iter().map(Tensor::view).collect();
        let packed: Vec<PackedMatrix> = views
            .iter()
            .map(|v| PackedMatrix::pack(v).unwrap())
            .collect();
        for n in [1usize, 8] {
            let x: Vec<f32> = (0..n * 1536).map(|_| rng.normal()).collect();
            let mut y = vec![0f32; n * 49152];
            let mut g = c.benchmark_group(format!("packed_step/{lname}/n{n}"));
            g.bench_function(BenchmarkId::from_parameter("current"), |b| {
                b.iter(|| {
                    for v in &views {
                        let (r, k) = (v.rows(), v.cols());
                        current(v, black_box(&x[..n * k]), n, &mut y[..n * r]);
                    }
                })
            });
            g.bench_function(BenchmarkId::from_parameter("packed"), |b| {
                b.iter(|| {
                    for p in &packed {
                        let (r, k) = (p.rows(), p.cols());
                        p.matmul(black_box(&x[..n * k]), n, &mut y[..n * r]);
                    }
                })
            });
            g.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = common::criterion(1500);
    targets = bench_shapes, bench_step
}
criterion_main!(benches);
