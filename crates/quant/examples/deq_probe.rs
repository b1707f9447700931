//! Ad-hoc: dequantize_row per row vs dequantize_rows, one thread.
use gpack_quant::{GgmlType, NativeView};

#[path = "common/probe.rs"]
mod probe;
use std::time::Instant;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let t = GgmlType::from_name(&a[1]).unwrap();
    let (rows, cols): (usize, usize) = (a[2].parse().unwrap(), a[3].parse().unwrap());
    let b = probe::matrix(t, rows, cols);
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
