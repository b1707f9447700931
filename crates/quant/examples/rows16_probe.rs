//! Ad-hoc timing of one Rows16 matrix times n vectors on the best ISA.
//! Usage: rows16_probe TYPE ROWS COLS N
use gpack_quant::{transcode_canonical, GgmlType, NativeView, Pool};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let t = GgmlType::from_name(&a[1]).expect("a ggml type name");
    let (rows, cols, n): (usize, usize, usize) = (
        a[2].parse().unwrap(),
        a[3].parse().unwrap(),
        a[4].parse().unwrap(),
    );
    let (bs, ts) = t.block();
    let nbl = rows * cols / bs as usize;
    let mut src = vec![0u8; nbl * ts as usize];
    let mut s = 12345u64;
    for b in src.iter_mut() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *b = s as u8;
    }
    for blk in src.chunks_exact_mut(ts as usize) {
        let d = half::f16::from_f32(0.01).to_le_bytes();
        match t {
            GgmlType::Q6_K => blk[208..210].copy_from_slice(&d),
            _ => {
                blk[0..2].copy_from_slice(&d);
                if matches!(t, GgmlType::Q4_K | GgmlType::Q5_K) {
                    blk[2..4].copy_from_slice(&d)
                }
            }
        }
    }
    let mut r16 = Vec::new();
    transcode_canonical(t, &src, rows as u64, cols as u64, &mut r16).unwrap();
    let mut b = gpack_quant::AlignedBuf::zeroed(r16.len());
    std::io::Write::write_all(&mut b, &r16).unwrap();
    let r16 = b;
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
