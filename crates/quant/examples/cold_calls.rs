//! Per-call time of one Rows16 matvec whose weights are not in any cache, as
//! in a decoding step: the matrix is copied until the copies fill TOTAL_MB
//! (default 400, over 10× the L3), and the calls go round the copies, so
//! each reads its weights from memory. Prints the median over 7 passes of
//! the time per call and the weight GB/s.
//!
//! `cargo run --release -p gpack-quant --example cold_calls -- TYPE ROWS COLS [TOTAL_MB] [GAP_US]`
//!
//! GAP_US (default 0): the caller spins this long between calls, as a step's
//! serial work does between its matrices; the time printed is the calls'
//! own.
//!
//! Compare sizes in one run (the memory rate of a shared host moves from
//! minute to minute): a decoding step's small matrices (a 1B's 2048×2048
//! attention output, 2.3 MB in Q4_K) against a large one (65536×2048).
use gpack_quant::{AlignedBuf, GgmlType, Isa, NativeView, Pool};
use std::time::Instant;

#[path = "common/probe.rs"]
mod probe;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: cold_calls TYPE ROWS COLS [TOTAL_MB] [GAP_US]");
        std::process::exit(2);
    }
    let t = GgmlType::from_name(&a[1]).expect("a ggml type name");
    let rows: usize = a[2].parse().expect("ROWS");
    let cols: usize = a[3].parse().expect("COLS");
    let total: usize = a.get(4).map_or(400, |s| s.parse().expect("TOTAL_MB")) << 20;
    let gap = std::time::Duration::from_micros(a.get(5).map_or(0, |s| s.parse().expect("GAP_US")));
    let one = probe::matrix(t, rows, cols);
    let bytes = one.as_slice().len();
    let copies: Vec<AlignedBuf> = (0..(total / bytes).max(2))
        .map(|_| {
            let mut b = AlignedBuf::zeroed(bytes);
            std::io::Write::write_all(&mut b, one.as_slice()).expect("copy");
            b
        })
        .collect();
    let views: Vec<NativeView> = copies
        .iter()
        .map(|b| NativeView::parse(b.as_slice()).expect("a Rows16 view"))
        .collect();
    let x: Vec<f32> = (0..cols)
        .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
        .collect();
    let mut y = vec![0f32; rows];
    let (isa, pool) = (Isa::best(), Pool::global());
    let mut per_call: Vec<f64> = (0..7)
        .map(|_| {
            let mut busy = 0f64;
            for v in &views {
                let t0 = Instant::now();
                gpack_quant::matmul_on(isa, pool, v, &x, 1, &mut y);
                busy += t0.elapsed().as_secs_f64();
                let g0 = Instant::now();
                while g0.elapsed() < gap {
                    std::hint::spin_loop();
                }
            }
            busy / views.len() as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    let m = per_call[per_call.len() / 2];
    println!(
        "cold {} {rows}x{cols} ({} KiB, {} copies, {} threads): {:.1} us/call, {:.1} GB/s",
        a[1],
        bytes / 1024,
        views.len(),
        pool.threads(),
        m * 1e6,
        bytes as f64 / m / 1e9
    );
}
