//! The matrix part of one SmolLM2-135M forward step, on synthetic weights of
//! the real shapes and layouts (f16 scale copies, as the runtime loads them):
//! 30 × (q‖k‖v 960 × 576, o 576 × 576, gate‖up 3072 × 576, down 576 × 1536)
//! plus the tied head 49152 × 576 (Q8_0), for n = 1, 2, 4, 8, 16 vectors per
//! step (the server's batched decode) and n = 512 without the head (a prefill).
//! Prints the median ms per step over rounds, and the aggregate vs n = 1.
//!
//! `cargo run --release -p gpack-quant --example step_shapes -- [q4_1|q8_0] [n ...]`

use gpack_quant::{matmul, matvec, transcode_with_f16_scales, GgmlType, NativeView, Pool};
use std::time::Instant;

fn tensor(t: GgmlType, rows: usize, cols: usize, seed: usize) -> Vec<u128> {
    let (bs, ts) = t.block();
    let n = rows * cols / bs as usize;
    let mut src: Vec<u8> = (0..n * ts as usize)
        .map(|i| (((i + seed) * 2654435761usize) >> 9) as u8)
        .collect();
    for (k, blk) in src.chunks_exact_mut(ts as usize).enumerate() {
        let d = 0.01 + (k % 7) as f32 * 0.001;
        blk[0..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        if t == GgmlType::Q4_1 {
            blk[2..4].copy_from_slice(&half::f16::from_f32(-0.05).to_le_bytes());
        }
    }
    let mut out = Vec::new();
    transcode_with_f16_scales(t, &src, rows as u64, cols as u64, &mut out).unwrap();
    let mut buf = vec![0u128; out.len().div_ceil(16) + 1];
    bytemuck::cast_slice_mut::<u128, u8>(&mut buf)[..out.len()].copy_from_slice(&out);
    buf
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t = match args.first().map(String::as_str) {
        Some("q8_0") => GgmlType::Q8_0,
        _ => GgmlType::Q4_1,
    };
    let ns: Vec<usize> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    let ns = if ns.is_empty() {
        vec![1, 2, 4, 8, 16]
    } else {
        ns
    };
    let layers = 30;
    let shapes = [(960usize, 576usize), (576, 576), (3072, 576), (576, 1536)];
    let bufs: Vec<Vec<Vec<u128>>> = (0..layers)
        .map(|l| {
            shapes
                .iter()
                .enumerate()
                .map(|(k, &(r, c))| tensor(t, r, c, l * 7 + k))
                .collect()
        })
        .collect();
    let head = tensor(GgmlType::Q8_0, 49152, 576, 99);
    let views: Vec<Vec<NativeView>> = bufs
        .iter()
        .map(|l| {
            l.iter()
                .map(|b| NativeView::parse(bytemuck::cast_slice(b)).unwrap())
                .collect()
        })
        .collect();
    let hv = NativeView::parse(bytemuck::cast_slice(&head)).unwrap();
    let bytes: usize = views.iter().flatten().map(|v| v.byte_len()).sum::<usize>() + hv.byte_len();
    println!(
        "{:?} layers, head Q8_0, {:.1} MB, isa {}, threads {}",
        t,
        bytes as f64 / 1e6,
        gpack_quant::Isa::best().name(),
        Pool::global().threads()
    );
    let mut base = None;
    for &n in &ns {
        let with_head = n <= 64;
        let x: Vec<f32> = (0..n * 1536)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut y = vec![0f32; n * 49152];
        let mut step = || {
            for l in &views {
                for v in l {
                    let (r, c) = (v.rows(), v.cols());
                    if n == 1 {
                        matvec(Pool::global(), v, &x[..c], &mut y[..r]);
                    } else {
                        matmul(Pool::global(), v, &x[..n * c], n, &mut y[..n * r]);
                    }
                }
            }
            if with_head {
                if n == 1 {
                    matvec(Pool::global(), &hv, &x[..576], &mut y[..49152]);
                } else {
                    matmul(Pool::global(), &hv, &x[..n * 576], n, &mut y[..n * 49152]);
                }
            }
        };
        step();
        let rounds = if n >= 256 { 5 } else { 40 };
        let mut ts: Vec<f64> = (0..rounds)
            .map(|_| {
                let s = Instant::now();
                step();
                s.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ts.sort_by(f64::total_cmp);
        let med = ts[ts.len() / 2];
        if n == 1 {
            base = Some(med);
        }
        let agg = base.map_or(String::new(), |b| {
            format!(" · aggregate {:.2}x n=1", n as f64 * b / med)
        });
        let macs = n as f64
            * (views
                .iter()
                .flatten()
                .map(|v| (v.rows() * v.cols()) as f64)
                .sum::<f64>()
                + if with_head { (49152 * 576) as f64 } else { 0.0 });
        println!(
            "n={n:4}{}: {med:.3} ms/step (min {:.3}){agg} · {:.1} GMAC/s",
            if with_head { "" } else { " (no head)" },
            ts[0],
            macs / med / 1e6
        );
    }
}
