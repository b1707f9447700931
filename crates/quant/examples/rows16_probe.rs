//! Ad-hoc timing of one Rows16 matrix times n vectors on the best ISA.
//! Usage: rows16_probe TYPE ROWS COLS N
use gpack_quant::{GgmlType, NativeView, Pool};

#[path = "common/probe.rs"]
mod probe;
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let t = GgmlType::from_name(&a[1]).expect("a ggml type name");
    let (rows, cols, n): (usize, usize, usize) = (
        a[2].parse().unwrap(),
        a[3].parse().unwrap(),
        a[4].parse().unwrap(),
    );
    let r16 = probe::matrix(t, rows, cols);
    let v = NativeView::parse(r16.as_slice()).unwrap();
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
        .collect();
    let mut y = vec![0f32; n * rows];
    let pool = Pool::global();
    let reps = (2_000_000_000 / (rows * cols * n.max(8))).max(3);
    let time = |f: &mut dyn FnMut()| {
        f();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t0 = Instant::now();
            for _ in 0..reps {
                f();
            }
            best = best.min(t0.elapsed().as_secs_f64() / reps as f64);
        }
        best
    };
    let tr =
        time(&mut || gpack_quant::matmul_on(gpack_quant::Isa::best(), pool, &v, &x, n, &mut y));
    let gmac = (rows * cols * n) as f64 / tr / 1e9;
    let gbs = v.byte_len() as f64 / tr / 1e9;
    println!(
        "rows16 {t} {rows}x{cols} n={n}: {:.1} us, {gmac:.1} GMAC/s, {gbs:.1} GB/s",
        tr * 1e6
    );
}
