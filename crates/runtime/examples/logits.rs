//! `cargo run --release -p gpack-runtime --example logits -- MODEL IDS N_NEW`
//!
//! gpack's side of `testdata/scripts/llama_ref.cpp`: runs MODEL (.gpack, or
//! .gguf / HF directory through the GGUF provider) on the comma-separated
//! token ids and prints the same JSON, `{"argmax": [per prompt position],
//! "last_logits": [...], "greedy": [N_NEW ids]}` (greedy with the KV cache,
//! one token per step, never stopping), and on stderr the KV cache's bytes per
//! position. (bench/crosscheck.sh compared the two on models too large for a
//! transformers reference; it now compares KL-divergence through `gpack
//! perplexity` and llama-perplexity.)

use gpack_runtime::{argmax, GgufWeights, GpackWeights, Logits, Model, WeightSource};
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, ids, n_new] = <[String; 3]>::try_from(args).unwrap_or_else(|_| {
        eprintln!("usage: logits MODEL 1,2,3 N_NEW");
        std::process::exit(2)
    });
    let ids: Vec<u32> = ids
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("token ids: comma-separated integers")
        })
        .collect();
    let n_new: usize = n_new.parse().expect("N_NEW: an integer");
    let p = Path::new(&path);
    let w: Box<dyn WeightSource> = if p.extension().is_some_and(|e| e == "gpack") {
        Box::new(GpackWeights::open(p).unwrap_or_else(|e| panic!("{path}: {e}")))
    } else {
        Box::new(GgufWeights::open(p).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    let m = Model::load_with(
        w.as_ref(),
        &gpack_runtime::LoadOptions::from_env().unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{path}: {e}"));
    let nv = m.config.n_vocab;
    // Whole 64-position key blocks, so the cache's bytes per position are exact.
    let mut s = m.new_state((ids.len() + n_new + 1).div_ceil(64) * 64);
    eprintln!(
        "KV cache: {} bytes per position ({} bytes for {} positions)",
        s.kv_bytes() / s.n_ctx(),
        s.kv_bytes(),
        s.n_ctx()
    );
    let all = m
        .forward(&mut s, &ids, Logits::All)
        .expect("forward")
        .to_vec();
    let am: Vec<u32> = all.chunks_exact(nv).map(argmax).collect();
    let last = all[all.len() - nv..].to_vec();
    let mut greedy = Vec::with_capacity(n_new);
    let mut next = argmax(&last);
    for _ in 0..n_new {
        greedy.push(next);
        let l = m.forward(&mut s, &[next], Logits::Last).expect("forward");
        next = argmax(l);
    }
    let out =
        serde_json::json!({"argmax": am, "last_logits": last, "greedy": greedy, "n_vocab": nv});
    println!("{out}");
}
