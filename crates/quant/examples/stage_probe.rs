//! Ad-hoc timing of Rows16 staging (group-block → stage, the decode step
//! every prefill matmul and every non-AVX-512 call runs): one 2048 × 2048
//! matrix per type, each decoded on the scalar decoder and on every SIMD
//! decoder this CPU has, one thread; prints the median of a few rounds and
//! the speedup over scalar. Not a benchmark: a quick look, a few seconds.
//!
//! `cargo run --release -p gpack-quant --example stage_probe`

use gpack_quant::kernels::rows16::stage_all;
use gpack_quant::{transcode_canonical, AlignedBuf, GgmlType, Isa, NativeView};
use std::time::Instant;

const TYPES: [GgmlType; 13] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
];

/// f16 scale fields per block (ggml-common.h), set to ordinary values so
/// no path meets subnormals or infinities.
fn f16_fields(t: GgmlType) -> &'static [usize] {
    use GgmlType as T;
    match t {
        T::Q4_1 | T::Q5_1 | T::Q4_K | T::Q5_K => &[0, 2],
        T::Q2_K => &[80, 82],
        T::Q3_K => &[108],
        T::Q6_K => &[208],
        T::MXFP4 => &[],
        _ => &[0],
    }
}

/// A Rows16 matrix of `t` from pseudo-random blocks.
fn matrix(t: GgmlType, rows: usize, cols: usize) -> AlignedBuf {
    let (bs, ts) = t.block();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut src: Vec<u8> = (0..rows * cols / bs as usize * ts as usize)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    for blk in src.chunks_exact_mut(ts as usize) {
        for &o in f16_fields(t) {
            blk[o..o + 2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        }
        if t == GgmlType::MXFP4 {
            blk[0] = 120 + blk[0] % 8;
        }
    }
    let mut bytes = Vec::new();
    transcode_canonical(t, &src, rows as u64, cols as u64, &mut bytes).unwrap();
    let mut b = AlignedBuf::zeroed(bytes.len());
    std::io::Write::write_all(&mut b, &bytes).unwrap();
    b
}

/// Median seconds of one staging pass over `v` on `isa`.
fn median(isa: Isa, v: &NativeView, rounds: usize) -> f64 {
    let mut sink = stage_all(isa, v);
    let mut t: Vec<f64> = (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            sink ^= stage_all(isa, v);
            t0.elapsed().as_secs_f64()
        })
        .collect();
    std::hint::black_box(sink);
    t.sort_by(f64::total_cmp);
    t[rounds / 2]
}

fn main() {
    let (rows, cols) = (2048, 2048);
    let simd: Vec<Isa> = Isa::available()
        .into_iter()
        .filter(|&i| i != Isa::Scalar && i != Isa::AvxVnni)
        .collect();
    print!("{rows}x{cols}, ms per matrix (median)  {:>8}", "scalar");
    for isa in &simd {
        print!("  {:>10}  speedup", isa.name());
    }
    println!();
    for t in TYPES {
        let buf = matrix(t, rows, cols);
        let v = NativeView::parse(buf.as_slice()).unwrap();
        let scalar = median(Isa::Scalar, &v, 5);
        print!("{:<36}  {:>8.2}", t.name(), scalar * 1e3);
        for &isa in &simd {
            let s = median(isa, &v, 9);
            print!("  {:>10.3}  {:>6.1}x", s * 1e3, scalar / s);
        }
        println!();
    }
}
