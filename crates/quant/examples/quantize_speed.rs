//! Throughput of the F32 → int8/int4 quantizers and of ggml transcoding
//! (conversion speed: `gpack convert --quant int4` runs these over every weight).
//!
//! Then ggml's types as llama-quantize's mixes use them: one thread,
//! `quantize::quantize_row` over rows of bf16-like random weights (random
//! sign and mantissa, |w| in [2^-8, 2^-4), as `bench/make_hf_llama.py`
//! writes), without and with an importance matrix, on `GPACK_ISA`'s path.
//!
//! `cargo run --release -p gpack-quant --example quantize_speed [TYPE…]`

use gpack_quant::{quantize, transcode, GgmlType, Layout};
use std::time::Instant;

fn main() {
    let only: Vec<String> = std::env::args().skip(1).collect();
    ggml_types(&only);
    if !only.is_empty() {
        return;
    }
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

/// This thread's CPU time (less disturbed than wall time by other
/// processes on a shared machine).
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// One thread through `quantize_row` per ggml type (`only`: those names).
fn ggml_types(only: &[String]) {
    let (rows, cols) = (256usize, 4096usize);
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        s.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let x: Vec<f32> = (0..rows * cols)
        .map(|_| {
            let r = next();
            let exp = 119 + (r >> 60) as u32 % 4; // 2^-8 .. 2^-5
            let bits = ((r >> 32) as u32 & 0x8000_0000) | (exp << 23) | ((r as u32) & 0x007f_0000);
            f32::from_bits(bits)
        })
        .collect();
    let im: Vec<f32> = (0..cols)
        .map(|_| (next() >> 40) as f32 / 1e5 + 0.01)
        .collect();
    for t in quantize::TYPES {
        if !only.is_empty() && !only.iter().any(|o| o.eq_ignore_ascii_case(t.name())) {
            continue;
        }
        let row = t.bytes_for(cols as u64).unwrap() as usize;
        let mut out = vec![0u8; row];
        for imatrix in [None, Some(&im[..])] {
            let t0 = thread_cpu_seconds();
            for r in 0..rows {
                quantize::quantize_row(t, &x[r * cols..(r + 1) * cols], imatrix, &mut out).unwrap();
            }
            let dt = thread_cpu_seconds() - t0;
            println!(
                "quantize_row {:>7} {}: {:7.1} M weights/s ({:.1} ns/weight, thread CPU time)",
                t.name(),
                if imatrix.is_some() {
                    "imatrix"
                } else {
                    "       "
                },
                (rows * cols) as f64 / dt / 1e6,
                dt * 1e9 / (rows * cols) as f64
            );
        }
    }
}
