//! `moe_bench MODEL.gpack (resident BYTES | mmap) [-p 32] [-n 64]`: one run of
//! a MoE model in one expert mode: prompt and generation tokens/s, the
//! process's memory (/proc/self/status) and the expert store's counters, as
//! one line of JSON (`bench/moe.sh` runs it per mode and takes medians).

use gpack_runtime::{argmax, ExpertMode, GpackWeights, LoadOptions, Logits, Model};
use std::time::Instant;

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: moe_bench MODEL.gpack (resident BYTES | mmap) [-p N] [-n N]";
    let path = args.first().expect(usage);
    let (mode, mut i) = match args.get(1).map(String::as_str) {
        Some("mmap") => (ExpertMode::Mmap, 2),
        Some("resident") => (
            ExpertMode::Resident {
                cache_bytes: gpack_runtime::experts::parse_size(args.get(2).expect(usage))
                    .expect("BYTES"),
            },
            3,
        ),
        _ => panic!("{usage}"),
    };
    let (mut p, mut n) = (32usize, 64usize);
    while i + 1 < args.len() {
        let v: usize = args[i + 1].parse().expect("a number");
        match args[i].as_str() {
            "-p" => p = v,
            "-n" => n = v,
            a => panic!("unknown {a}; {usage}"),
        }
        i += 2;
    }
    let t = Instant::now();
    let w = GpackWeights::open(path.as_ref()).expect("open");
    let m = Model::load_with(
        &w,
        &LoadOptions {
            experts: mode,
            ..LoadOptions::from_env().unwrap_or_else(|e| panic!("{e}"))
        },
    )
    .expect("load");
    let load_s = t.elapsed().as_secs_f64();
    let prompt: Vec<u32> = (0..p as u32)
        .map(|i| (i * 7919 + 13) % m.config.n_vocab as u32)
        .collect();
    let mut s = m.new_state(p + n + 1);
    let t = Instant::now();
    let mut last = m
        .forward(&mut s, &prompt, Logits::Last)
        .expect("prefill")
        .to_vec();
    let pp_s = t.elapsed().as_secs_f64();
    let st0 = m.expert_stats().expect("a MoE model");
    let t = Instant::now();
    for _ in 0..n {
        last = m
            .forward(&mut s, &[argmax(&last)], Logits::Last)
            .expect("decode")
            .to_vec();
    }
    let tg_s = t.elapsed().as_secs_f64();
    let st = m.expert_stats().expect("a MoE model");
    let cache = match mode {
        ExpertMode::Mmap | ExpertMode::Auto => 0,
        ExpertMode::Resident { cache_bytes } => cache_bytes,
    };
    println!(
        "{{\"mode\":\"{}\",\"cache_bytes\":{cache},\"expert_bytes\":{},\"load_s\":{load_s:.4},\"pp_tps\":{:.2},\"tg_tps\":{:.2},\
\"decode_hit_rate\":{:.4},\"decode_bytes_read_per_token\":{},\"decode_bytes_loaded_per_token\":{},\
\"rss_kib\":{},\"hwm_kib\":{},\"anon_kib\":{},\"file_kib\":{},\"evictions\":{}}}",
        mode.name(),
        m.expert_bytes(),
        p as f64 / pp_s,
        n as f64 / tg_s,
        (st.hits - st0.hits) as f64 / ((st.hits + st.misses) - (st0.hits + st0.misses)).max(1) as f64,
        (st.bytes_read - st0.bytes_read) / n as u64,
        (st.bytes_loaded - st0.bytes_loaded) / n as u64,
        status_kib("VmRSS:"),
        status_kib("VmHWM:"),
        status_kib("RssAnon:"),
        status_kib("RssFile:"),
        st.evictions,
    );
}
