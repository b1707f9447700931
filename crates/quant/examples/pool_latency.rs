//! Per-call latency of `matvec` on the crate's pool, on rayon and on one
//! thread, in alternating rounds of back-to-back calls so that background load hits all three alike; prints
//! min and median over many calls (min is robust to a loaded machine).
//!
//! `cargo run --release -p gpack-quant --example pool_latency`

use gpack_quant::kernels::{matvec_on, matvec_rayon};
use gpack_quant::{matmul_with, transcode, GgmlType, Isa, NativeView, Pool};
use std::time::Instant;

fn tensor(t: GgmlType, rows: usize, cols: usize) -> Vec<u128> {
    let (bs, ts) = t.block();
    let n = rows * cols / bs as usize;
    let mut src: Vec<u8> = (0..n * ts as usize)
        .map(|i| ((i * 2654435761usize) >> 7) as u8)
        .collect();
    for blk in src.chunks_exact_mut(ts as usize) {
        blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        if t == GgmlType::Q4_1 {
            blk[2..4].copy_from_slice(&half::f16::from_f32(-0.05).to_le_bytes());
        }
    }
    let mut out = Vec::new();
    transcode(t, &src, rows as u64, cols as u64, &mut out).unwrap();
    let mut buf = vec![0u128; out.len().div_ceil(16) + 1];
    bytemuck::cast_slice_mut::<u128, u8>(&mut buf)[..out.len()].copy_from_slice(&out);
    buf
}

fn main() {
    let isa = Isa::best();
    let pool = Pool::global();
    let one = Pool::new(1);
    println!(
        "isa {}, pool threads {}, rayon threads {}",
        isa.name(),
        pool.threads(),
        rayon::current_num_threads()
    );
    for (t, rows, cols, reps) in [
        (GgmlType::Q4_1, 576, 576, 4000),
        (GgmlType::Q8_0, 576, 576, 4000),
        (GgmlType::Q4_1, 1536, 576, 2000),
        (GgmlType::Q8_0, 4096, 4096, 200),
    ] {
        let buf = tensor(t, rows, cols);
        let v = NativeView::parse(bytemuck::cast_slice(&buf)).unwrap();
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut y = vec![0f32; rows];
        let mut times: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        // Rounds of back-to-back calls per method (as in decoding, where the
        // workers stay hot), methods alternating between rounds.
        for _ in 0..20 {
            for (k, ts) in times.iter_mut().enumerate() {
                for _ in 0..reps / 20 {
                    let s = Instant::now();
                    match k {
                        0 => matvec_on(isa, pool, &v, &x, &mut y),
                        1 => matvec_rayon(isa, &v, &x, &mut y),
                        _ => matvec_on(isa, &one, &v, &x, &mut y),
                    }
                    ts.push(s.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
        print!("{t} {rows}x{cols}:");
        for (name, ts) in ["pool", "rayon", "1 thread"].iter().zip(times.iter_mut()) {
            ts.sort_by(|a, b| a.total_cmp(b));
            print!(
                "  {name} min {:.2} µs median {:.2} µs",
                ts[0],
                ts[ts.len() / 2]
            );
        }
        println!();
        // matmul with n = 4 vectors against 4 matvec calls (both on the pool).
        let n = 4;
        let xs: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 53) % 97) as f32 / 48.0 - 1.0)
            .collect();
        let mut ys = vec![0f32; n * rows];
        let (mut tm, mut tv) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            for _ in 0..reps / 40 {
                let s = Instant::now();
                matmul_with(isa, &v, &xs, n, &mut ys);
                tm.push(s.elapsed().as_secs_f64() * 1e6);
            }
            for _ in 0..reps / 40 {
                let s = Instant::now();
                for i in 0..n {
                    matvec_on(
                        isa,
                        pool,
                        &v,
                        &xs[i * cols..(i + 1) * cols],
                        &mut ys[i * rows..(i + 1) * rows],
                    );
                }
                tv.push(s.elapsed().as_secs_f64() * 1e6);
            }
        }
        tm.sort_by(|a, b| a.total_cmp(b));
        tv.sort_by(|a, b| a.total_cmp(b));
        println!(
            "    n=4: matmul min {:.2} µs median {:.2} µs; 4 x matvec min {:.2} µs median {:.2} µs",
            tm[0],
            tm[tm.len() / 2],
            tv[0],
            tv[tv.len() / 2]
        );
    }
}
