//! `cargo run --release -p gpack-runtime --example bench -- MODEL [-p 512] [-n 64] [-r 5]`
//!
//! Loads MODEL with the GGUF provider (transcoding at load) and prints load
//! time, then prompt-processing and generation tokens/s (median, min–max over
//! the repetitions), like `llama-bench -p 512 -n 64`.

use gpack_runtime::bench::{bench, median};
use gpack_runtime::{GgufWeights, Model};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut path = None;
    let (mut p, mut n, mut r) = (512usize, 64usize, 5usize);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-p" => {
                p = args[i + 1].parse().expect("-p N");
                i += 1;
            }
            "-n" => {
                n = args[i + 1].parse().expect("-n N");
                i += 1;
            }
            "-r" => {
                r = args[i + 1].parse().expect("-r N");
                i += 1;
            }
            a => path = Some(a.to_string()),
        }
        i += 1;
    }
    let path = path.expect("usage: bench MODEL [-p N] [-n N] [-r N]");
    let t = Instant::now();
    let w = GgufWeights::open(path.as_ref()).expect("open");
    let m = Model::load(&w).expect("load");
    let load = t.elapsed();
    println!(
        "model {path}: {} layers, n_embd {}, native {:.1} MB, fused {}, load {:.3} s, threads {}, isa {}",
        m.config.n_layer,
        m.config.n_embd,
        w.native_bytes() as f64 / 1e6,
        m.is_fused(),
        load.as_secs_f64(),
        gpack_quant::Pool::global().threads(),
        gpack_quant::Isa::best().name(),
    );
    // The memory-bandwidth yardstick: a plain read loop over 512 MB on 2
    // threads (sum of u64 words), best of 3.
    let bw = {
        let words = 64usize << 20;
        let buf: Vec<u64> = (0..words as u64).collect();
        let mut best = 0f64;
        for _ in 0..3 {
            let t = Instant::now();
            let s: u64 = std::thread::scope(|sc| {
                let h: Vec<_> = buf
                    .chunks(words / 2)
                    .map(|c| sc.spawn(move || c.iter().fold(0u64, |a, &v| a.wrapping_add(v))))
                    .collect();
                h.into_iter()
                    .map(|h| h.join().unwrap())
                    .fold(0u64, u64::wrapping_add)
            });
            std::hint::black_box(s);
            best = best.max((words * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        best
    };
    println!(
        "read loop: {bw:.1} GB/s (2 threads); weights {:.1} MB/token",
        w.native_bytes() as f64 / 1e6
    );
    let runs = bench(&m, p, n, r).expect("bench");
    let pp: Vec<f64> = runs.iter().map(|x| x.pp_tps).collect();
    let tg: Vec<f64> = runs.iter().map(|x| x.tg_tps).collect();
    let mm = |v: &[f64]| {
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    let (pmin, pmax) = mm(&pp);
    let (gmin, gmax) = mm(&tg);
    println!(
        "pp{p}: {:.1} tok/s (min {pmin:.1}, max {pmax:.1})",
        median(pp.clone())
    );
    println!(
        "tg{n}: {:.1} tok/s (min {gmin:.1}, max {gmax:.1})",
        median(tg.clone())
    );
}
