//! `gpack bench`: prompt-processing and generation throughput, the
//! llama-bench way, with what the kernels read per token and the share of
//! the measured memory read bandwidth that decode reaches.

use anyhow::{bail, Context, Result};
use gpack_runtime::bench::{bench, median, read_bandwidth_gbs, TokenCost};
use gpack_runtime::Model;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Measure prompt processing (pp) and generation (tg) speed of a model.
///
/// Like llama-bench: `-p N` prompt tokens are prefilled in one batch into an
/// empty cache, then, in a fresh cache, `-n N` tokens are decoded one at a
/// time (synthetic token ids, greedy), `-r N` times; the table gives the
/// mean ± standard deviation of tokens/s (the median in the JSON too).
/// With `-d N` each test runs after N tokens of context (prefilled before
/// the clock starts): the speed of a conversation that long, where
/// attention over the cache adds to every token.
///
/// Beside each figure: for tg, the bytes of weights the kernels read per
/// token times tokens/s, and its share of this machine's memory read
/// bandwidth measured just before (a read loop over 512 MB on the pool's
/// threads); for pp, the multiply-accumulates per second and their share of
/// this machine's int8 dot-product peak, also measured just before (a loop
/// of the kernel path's own instruction, `vpdpbusd` or `vpmaddubsw`, on the
/// pool's threads; none on the scalar path).
///
/// The model's pool has GPACK_THREADS threads, else one per logical CPU
/// the process may use (the other GPACK_* load variables apply as in `run`).
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpack bench smollm2.gpack
  gpack bench smollm2.gpack -p 128 -n 32 -r 3
  gpack bench smollm2.gpack -p 0 -n 64 -d 4096   (decode after 4096 tokens)
  gpack bench model.gguf --json > bench.json")]
pub struct Args {
    /// The model: .gpack, .giw, .gguf, a Hugging Face directory, or a
    /// registry reference (pulled into the store first).
    model: PathBuf,
    #[command(flatten)]
    registry: super::RegistryArgs,
    /// Prompt tokens per prefill (0: no pp test).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Tokens generated per tg test (0: no tg test).
    #[arg(short = 'n', long = "n-gen", default_value_t = 64)]
    n_gen: usize,
    /// Tokens of context already in the cache when each test starts.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    n_depth: usize,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    #[command(flatten)]
    kv: super::KvArgs,
    #[command(flatten)]
    device: super::DeviceArgs,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// Mean and sample standard deviation.
fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

pub fn run(a: Args) -> Result<ExitCode> {
    if a.reps == 0 || a.reps > 1000 {
        bail!("-r must be between 1 and 1000, got {}", a.reps);
    }
    if a.n_prompt == 0 && a.n_gen == 0 {
        bail!("nothing to measure: -p and -n are both 0");
    }
    if a.n_depth + a.n_prompt.max(a.n_gen) > 1 << 20 {
        bail!("-d plus the larger of -p and -n must be at most 1048576 tokens");
    }
    let t = Instant::now();
    let loaded = super::open_model(&a.model, None, None, &a.registry)
        .with_context(|| format!("opening {}", a.model.display()))?;
    let kv_types = a.kv.types();
    let opts = a.device.apply(gpack_runtime::LoadOptions {
        kv: kv_types,
        ..gpack_runtime::LoadOptions::from_env().map_err(anyhow::Error::msg)?
    });
    let model = Model::load_with(loaded.weights(), &opts)
        .with_context(|| format!("loading {}", a.model.display()))?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let threads = model.pool().threads();
    let cost = TokenCost::of(loaded.weights(), model.config.n_layer);
    let bw = read_bandwidth_gbs(threads);
    let best = gpack_quant::Isa::best();
    let peak = gpack_quant::int8_peak(best, threads, 3);
    // The KV cache's bytes per position (both K and V, every layer): a
    // 1024-position sequence's, as the types' blocks lay it out.
    let kv_bpt = model.new_sequence(1024).kv_bytes() as f64 / 1024.0;
    let runs = bench(&model, a.n_prompt, a.n_gen, a.n_depth, a.reps).context("benchmarking")?;
    let pp: Vec<f64> = runs.iter().map(|r| r.pp_tps).collect();
    let tg: Vec<f64> = runs.iter().map(|r| r.tg_tps).collect();
    let name = a
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let size = std::fs::metadata(&a.model).map(|m| m.len()).unwrap_or(0);
    let isa = best.name();
    let tile = gpack_quant::kernels::rows16::prefill_tile(best);
    let pp_macs = cost.prefill_macs_per_token(a.n_prompt);
    let bpt = cost.bytes_per_token();
    let test = |what: &str, n: usize, v: &[f64]| {
        let (m, sd) = mean_sd(v);
        let med = median(v.to_vec());
        let mut o = json!({
            "test": if a.n_depth > 0 { format!("{what}{n} @ d{}", a.n_depth) } else { format!("{what}{n}") },
            "n_prompt": if what == "pp" { n } else { 0 }, "n_depth": a.n_depth,
            "n_gen": if what == "tg" { n } else { 0 }, "avg_ts": m, "stddev_ts": sd,
            "median_ts": med, "samples_ts": v,
        });
        if what == "tg" {
            let gbs = med * bpt / 1e9;
            o["weights_gbs"] = json!(gbs);
            o["read_bw_fraction"] = json!(gbs / bw);
        } else {
            let gmacs = med * pp_macs / 1e9;
            o["gmacs"] = json!(gmacs);
            o["int8_peak_fraction"] = json!(peak.map(|p| gmacs / p.gmacs));
        }
        o
    };
    let mut tests = Vec::new();
    if a.n_prompt > 0 {
        tests.push(test("pp", a.n_prompt, &pp));
    }
    if a.n_gen > 0 {
        tests.push(test("tg", a.n_gen, &tg));
    }
    if a.json {
        let out = json!({
            "model_filename": a.model.display().to_string(), "model_size": size,
            "n_layer": model.config.n_layer, "n_threads": threads, "isa": isa,
            "prefill_tile": tile,
            "type_k": kv_types.k.name(), "type_v": kv_types.v.name(), "kv_bytes_per_token": kv_bpt,
            "load_ms": load_ms, "bytes_per_token": bpt, "macs_per_token": cost.body_macs + cost.head_macs,
            "read_bw_gbs": bw, "int8_peak_gmacs": peak.map(|p| p.gmacs),
            "int8_peak_instruction": peak.map(|p| p.instruction), "tests": tests,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "| model | size | threads | isa | test | t/s | roofline |\n|---|---:|---:|---|---|---:|---|"
    );
    for t in &tests {
        let extra = match t.get("read_bw_fraction") {
            Some(f) => format!(
                "{:.1} GB/s of weights = {:.0} % of {bw:.1} GB/s read",
                t["weights_gbs"].as_f64().unwrap_or(0.0),
                f.as_f64().unwrap_or(0.0) * 100.0
            ),
            None => {
                let g = t["gmacs"].as_f64().unwrap_or(0.0);
                match peak {
                    Some(p) => format!(
                        "{g:.1} GMAC/s = {:.0} % of {:.1} GMAC/s int8 peak ({})",
                        100.0 * g / p.gmacs,
                        p.gmacs,
                        p.instruction
                    ),
                    None => format!("{g:.1} GMAC/s (no int8 peak on the {isa} path)"),
                }
            }
        };
        println!(
            "| {name} | {:.1} MiB | {threads} | {isa} | {} | {:.2} ± {:.2} | {extra} |",
            size as f64 / (1 << 20) as f64,
            t["test"].as_str().unwrap_or(""),
            t["avg_ts"].as_f64().unwrap_or(0.0),
            t["stddev_ts"].as_f64().unwrap_or(0.0),
        );
    }
    if tile != isa {
        eprintln!("prefill tile: {tile} (32-element sub-block kinds; others {isa})");
    }
    eprintln!(
        "load {load_ms:.0} ms; per token {:.1} MB read, {:.3} G multiply-adds ({} matrices); \
         KV cache ({kv_types}) {:.1} KiB per position",
        bpt / 1e6,
        (cost.body_macs + cost.head_macs) / 1e9,
        cost.matrices,
        kv_bpt / 1024.0
    );
    Ok(ExitCode::SUCCESS)
}
