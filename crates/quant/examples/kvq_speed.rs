//! The attention sums of one decode step over a long cache, by KV type:
//! scores (q · K over transposed blocks of 64 positions) and weighted
//! values, for `rows` query heads sharing a KV head of `d` dims, `len`
//! positions, f16 vs q8_0 vs q4_0 on the best ISA path. One thread; each
//! figure the median of 31 runs, in µs, with the bytes read per run.
//!
//! Usage: cargo run --release -p gpack-quant --example kvq_speed [ROWS=6] [D=128] [LEN=4096]
//! (Qwen2.5-1.5B: 6 query heads a KV head of 128; SmolLM2-135M: 3 of 64.)

use gpack_quant::kernels::attn::{self, kvq, kvq::KvQuant};
use std::hint::black_box;
use std::time::Instant;

const KB: usize = 64;

fn median_us(mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..31)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .map_or(d, |s| s.parse().expect("a number"))
    };
    let (rows, d, len) = (arg(1, 6), arg(2, 128), arg(3, 4096));
    assert!(len.is_multiple_of(KB) && d.is_multiple_of(32));
    let nb = len / KB;
    let val = |i: usize| ((i * 7919 % 1000) as f32 - 500.0) / 250.0;
    let q: Vec<f32> = (0..rows * d).map(val).collect();
    let a: Vec<f32> = (0..rows * len).map(|i| val(i + 3) * 1e-3).collect();
    let mut sc = vec![0f32; rows * len];
    let mut out = vec![0f32; rows * d];
    println!(
        "isa {:?}, {rows} query rows, head {d}, {len} positions",
        gpack_quant::Isa::best()
    );
    // f16: keys transposed in blocks of KB, values as rows.
    let kt: Vec<u16> = (0..len * d)
        .map(|i| half::f16::from_f32(val(i)).to_bits())
        .collect();
    let vv = kt.clone();
    let s16 = median_us(|| {
        for b in 0..nb {
            attn::scores_transposed_group(
                &q,
                d,
                0.1,
                &kt[b * d * KB..(b + 1) * d * KB],
                KB,
                0,
                KB,
                &mut sc[b * KB..],
                len,
            );
        }
        black_box(&sc);
    });
    let w16 = median_us(|| {
        attn::weighted_rows_group(&a, len, len, &vv, d, &mut out, d);
        black_box(&out);
    });
    println!(
        "f16 : scores {s16:8.1} µs  weighted {w16:8.1} µs  ({} KiB K + V)",
        2 * len * d * 2 / 1024
    );
    for t in [KvQuant::Q8_0, KvQuant::Q4_0] {
        let bb = kvq::key_block_bytes(t, d, KB);
        let mut kq = vec![0u8; nb * bb];
        let row: Vec<f32> = (0..d).map(val).collect();
        for b in 0..nb {
            for j in 0..KB {
                kvq::put_key(t, &row, &mut kq[b * bb..(b + 1) * bb], KB, j);
            }
        }
        let rb = kvq::row_bytes(t, d);
        let mut vq = vec![0u8; len * rb];
        for r in vq.chunks_exact_mut(rb) {
            kvq::quantize_row(t, &row, r);
        }
        let s = median_us(|| {
            for b in 0..nb {
                kvq::scores_group(
                    t,
                    &q,
                    d,
                    0.1,
                    &kq[b * bb..(b + 1) * bb],
                    KB,
                    0,
                    KB,
                    &mut sc[b * KB..],
                    len,
                );
            }
            black_box(&sc);
        });
        let w = median_us(|| {
            kvq::weighted_group(t, &a, len, len, &vq, &mut out, d);
            black_box(&out);
        });
        println!(
            "{:4}: scores {s:8.1} µs  weighted {w:8.1} µs  ({} KiB K + V)  vs f16 {:.2}x / {:.2}x",
            format!("{t:?}").to_lowercase(),
            (kq.len() + vq.len()) / 1024,
            s16 / s,
            w16 / w
        );
    }
}
