//! Throughput of the F32 → int8/int4 quantizers and of ggml transcoding
//! (conversion speed: `gpack convert --quant int4` runs these over every weight).
//!
//! `cargo run --release -p gpack-quant --example quantize_speed`

use gpack_quant::{quantize, transcode, GgmlType, Layout};
use std::time::Instant;

fn main() {
    let (rows, cols) = (1024usize, 4096usize);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let x: Vec<f32> = (0..rows * cols)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
        })
        .collect();
    let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    for target in [
        Layout::I8Sym { group: 32 },
        Layout::I4Sym { group: 32 },
        Layout::I4Asym { group: 32 },
    ] {
        let mut out = Vec::with_capacity(src.len());
        let t = Instant::now();
        quantize(
            GgmlType::F32,
            &src,
            rows as u64,
            cols as u64,
            target,
            &mut out,
        )
        .unwrap();
        let dt = t.elapsed().as_secs_f64();
        println!(
            "quantize F32 -> {target}: {:.1} M weights/s",
            (rows * cols) as f64 / dt / 1e6
        );
    }
    let q8: Vec<u8> = (0..rows * cols / 32)
        .flat_map(|i| {
            let mut b = vec![(i % 251) as u8; 34];
            b[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            b
        })
        .collect();
    let mut out = Vec::new();
    let t = Instant::now();
    transcode(GgmlType::Q8_0, &q8, rows as u64, cols as u64, &mut out).unwrap();
    println!(
        "transcode Q8_0: {:.1} M weights/s",
        (rows * cols) as f64 / t.elapsed().as_secs_f64() / 1e6
    );
}
