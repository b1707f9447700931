//! `cargo run --release -p gpack-runtime --example bench -- MODEL [-p 512] [-n 64] [-r 5] [-d 0]`
//!
//! Opens MODEL the way `gpack run` does with no flags — a `.gpack` mapped
//! zero-copy, a `.giw` bundle, or a `.gguf` / Hugging Face directory (GGUF
//! provider: tensors transcoded at load) — then `Model::load_with` with the
//! default options and the `GPACK_*` environment (`LoadOptions::from_env`:
//! `GPACK_THREADS=2` for the pool's size), and prints load time, anonymous RSS after load (`RssAnon` of
//! /proc/self/status), then prompt-processing and generation tokens/s
//! (median, min–max over the repetitions), like `llama-bench -p 512 -n 64`;
//! `-d N` runs each test after N tokens of context, like llama-bench's `-d`.
//!
//! It also prints what one token costs in the matrices the kernels read
//! (q, k, v, o, gate, up, down of every layer, plus the output head): bytes
//! read per decoded token (codes plus the scale arrays the kernels use: the
//! f16 copy when present, else the f32 ones) and multiply-accumulates per
//! token (weight elements). The embedding lookup (one row) is not counted.
//! From these: decode GB/s = bytes/token × tg tok/s, and prefill GMAC/s =
//! (n_prompt × body MACs + head MACs, the head being applied to the last
//! prompt token only) / prefill time.
//!
//! The last line is `bench: key=value …` for scripts (bench/quants.sh).

use gpack_runtime::bench::{bench, median, read_bandwidth_gbs, rss_anon_kib, TokenCost};
use gpack_runtime::giw::GiwWeights;
use gpack_runtime::{GgufWeights, GpackWeights, Model, WeightSource};
use std::path::Path;
use std::time::Instant;

/// Opens `path` as `gpack run` does: by extension, else as GGUF / HF dir.
fn open(path: &Path) -> Box<dyn WeightSource> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("gpack") => Box::new(GpackWeights::open(path).expect("open .gpack")),
        Some("giw") => Box::new(GiwWeights::open(path, None).expect("open .giw")),
        _ => Box::new(GgufWeights::open(path).expect("open GGUF / HF directory")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut path = None;
    let (mut p, mut n, mut r, mut d) = (512usize, 64usize, 5usize, 0usize);
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
            "-d" => {
                d = args[i + 1].parse().expect("-d N");
                i += 1;
            }
            a => path = Some(a.to_string()),
        }
        i += 1;
    }
    let path = path.expect("usage: bench MODEL [-p N] [-n N] [-r N] [-d N]");
    let t = Instant::now();
    let w = open(path.as_ref());
    let opts = gpack_runtime::LoadOptions::from_env().unwrap_or_else(|e| panic!("{e}"));
    let m = Model::load_with(w.as_ref(), &opts).expect("load");
    let load = t.elapsed();
    let anon_kib = rss_anon_kib();
    let c = TokenCost::of(w.as_ref(), m.config.n_layer);
    let (bb, bm, hb, hm, found) = (
        c.body_bytes,
        c.body_macs,
        c.head_bytes,
        c.head_macs,
        c.matrices,
    );
    println!(
        "model {path}: {} layers, n_embd {}, fused {}, load {:.1} ms, RssAnon after load {}, threads {}, isa {}",
        m.config.n_layer,
        m.config.n_embd,
        m.is_fused(),
        load.as_secs_f64() * 1e3,
        anon_kib.map_or("n/a".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
        m.pool().threads(),
        gpack_quant::Isa::best().name(),
    );
    println!(
        "per token ({found} matrices): {:.1} MB read (head {:.1} MB), {:.3} G multiply-adds (head {:.3} G)",
        (bb + hb) / 1e6,
        hb / 1e6,
        (bm + hm) / 1e9,
        hm / 1e9
    );
    let bw = read_bandwidth_gbs(2);
    println!("read loop: {bw:.1} GB/s (2 threads, best of 3)");
    let runs = bench(&m, p, n, d, r).expect("bench");
    let pp: Vec<f64> = runs.iter().map(|x| x.pp_tps).collect();
    let tg: Vec<f64> = runs.iter().map(|x| x.tg_tps).collect();
    let mm = |v: &[f64]| {
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    let at = if d > 0 {
        format!(" @ d{d}")
    } else {
        String::new()
    };
    let (pmin, pmax) = mm(&pp);
    let (gmin, gmax) = mm(&tg);
    let (pmed, gmed) = (median(pp.clone()), median(tg.clone()));
    // Prefill MACs per prompt token: every body matrix, plus the head once.
    let pp_macs = if p > 0 { bm + hm / p as f64 } else { 0.0 };
    println!(
        "pp{p}{at}: {pmed:.1} tok/s (min {pmin:.1}, max {pmax:.1}) = {:.1} GMAC/s",
        pmed * pp_macs / 1e9
    );
    println!(
        "tg{n}{at}: {gmed:.1} tok/s (min {gmin:.1}, max {gmax:.1}) = {:.1} GB/s of weights",
        gmed * (bb + hb) / 1e9
    );
    println!(
        "bench: load_ms={:.2} rss_anon_kib={} bytes_per_token={:.0} macs_per_token={:.0} \
         pp_macs_per_token={:.0} pp_med={pmed:.2} pp_min={pmin:.2} pp_max={pmax:.2} \
         tg_med={gmed:.2} tg_min={gmin:.2} tg_max={gmax:.2} n_depth={d} matrices={found}",
        load.as_secs_f64() * 1e3,
        anon_kib.map_or("n/a".into(), |k| k.to_string()),
        bb + hb,
        bm + hm,
        pp_macs,
    );
}
