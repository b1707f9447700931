//! matvec with f32 scales vs the exact f16 copy, on a DRAM-bound shape
//! (SmolLM2's vocabulary head, 49152 × 576, and a 4096 × 8192 matrix),
//! alternating rounds; prints min and median per call.
//!
//! `cargo run --release -p gpack-quant --example f16_scales`

use gpack_quant::{matvec_on, transcode, write_with_f16_scales, GgmlType, Isa, NativeView, Pool};
use std::time::Instant;

fn aligned(b: &[u8]) -> Vec<u128> {
    let mut v = vec![0u128; b.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut v)[..b.len()].copy_from_slice(b);
    v
}

fn main() {
    let isa = Isa::best();
    for (t, rows, cols) in [
        (GgmlType::Q4_1, 49152usize, 576usize),
        (GgmlType::Q8_0, 49152, 576),
        (GgmlType::Q4_1, 8192, 4096),
    ] {
        let (bs, ts) = t.block();
        let mut src: Vec<u8> = (0..rows * cols / bs as usize * ts as usize)
            .map(|i| ((i * 2654435761usize) >> 9) as u8)
            .collect();
        for blk in src.chunks_exact_mut(ts as usize) {
            blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            if t == GgmlType::Q4_1 {
                blk[2..4].copy_from_slice(&half::f16::from_f32(-0.05).to_le_bytes());
            }
        }
        let mut a = Vec::new();
        transcode(t, &src, rows as u64, cols as u64, &mut a).unwrap();
        let a = aligned(&a);
        let v32 = NativeView::parse(bytemuck::cast_slice::<u128, u8>(&a)).unwrap();
        let mut b = Vec::new();
        write_with_f16_scales(&v32, &mut b).unwrap();
        let b = aligned(&b);
        let v16 = NativeView::parse(bytemuck::cast_slice::<u128, u8>(&b)).unwrap();
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut y = vec![0f32; rows];
        for (label, pool) in [
            ("1 thread", Pool::new(1)),
            ("pool", Pool::new(Pool::global().threads())),
        ] {
            let mut ts: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            for _ in 0..10 {
                for (k, v) in [&v32, &v16].into_iter().enumerate() {
                    for _ in 0..10 {
                        let s = Instant::now();
                        matvec_on(isa, &pool, v, &x, &mut y);
                        ts[k].push(s.elapsed().as_secs_f64() * 1e6);
                    }
                }
            }
            for t in ts.iter_mut() {
                t.sort_by(|a, b| a.total_cmp(b));
            }
            println!(
                "{t} {rows}x{cols} {label}: f32 scales min {:.0} µs median {:.0} µs; f16 scales min {:.0} µs median {:.0} µs",
                ts[0][0],
                ts[0][ts[0].len() / 2],
                ts[1][0],
                ts[1][ts[1].len() / 2]
            );
        }
    }
}
