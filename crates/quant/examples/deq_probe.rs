//! Ad-hoc: dequantize_row per row vs dequantize_rows, one thread.
use gpack_quant::{transcode_canonical, GgmlType, NativeView};
use std::time::Instant;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let t = GgmlType::from_name(&a[1]).unwrap();
    let (rows, cols): (usize, usize) = (a[2].parse().unwrap(), a[3].parse().unwrap());
    let (bs, ts) = t.block();
    let mut src = vec![0u8; rows * cols / bs as usize * ts as usize];
    let mut s = 1u64;
    for b in src.iter_mut() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *b = s as u8;
    }
    for blk in src.chunks_exact_mut(ts as usize) {
        let d = half::f16::from_f32(0.01).to_le_bytes();
        if t == GgmlType::Q6_K {
            blk[208..210].copy_from_slice(&d)
        } else {
            blk[0..2].copy_from_slice(&d)
        }
    }
    let mut r16 = Vec::new();
    transcode_canonical(t, &src, rows as u64, cols as u64, &mut r16).unwrap();
    let mut b = gpack_quant::AlignedBuf::zeroed(r16.len());
    std::io::Write::write_all(&mut b, &r16).unwrap();
    let v = NativeView::parse(b.as_slice()).unwrap();
    let mut out = vec![0f32; rows * cols];
    for _ in 0..3 {
        let t0 = Instant::now();
        for (i, o) in out.chunks_exact_mut(cols).enumerate() {
            v.dequantize_row(i, o);
        }
        let a = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        v.dequantize_rows(0, &mut out);
        let b = t0.elapsed().as_secs_f64();
        println!("{t} {rows}x{cols}: per row {:.2} ms ({:.2} GB/s f32 out), rows {:.2} ms ({:.2} GB/s) {:.1}x", a * 1e3, (rows*cols*4) as f64 / a / 1e9, b * 1e3, (rows*cols*4) as f64 / b / 1e9, a / b);
    }
}
