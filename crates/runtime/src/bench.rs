//! Throughput measurement: prompt processing (one batched prefill of `n_prompt`
//! tokens) and generation (`n_gen` single-token forwards), like
//! `llama-bench -p N -n M` (which also uses synthetic tokens and an empty
//! cache per repetition).

use crate::error::Result;
use crate::model::{Logits, Model};
use std::time::Instant;

/// One repetition's figures.
#[derive(Clone, Copy, Debug)]
pub struct BenchRun {
    /// Prompt tokens per second.
    pub pp_tps: f64,
    /// Generated tokens per second.
    pub tg_tps: f64,
}

/// Runs `reps` repetitions of: prefill `n_prompt` tokens into an empty cache,
/// then (in a fresh cache, as llama-bench's `tg` test) decode `n_gen` tokens.
pub fn bench(
    model: &Model<'_>,
    n_prompt: usize,
    n_gen: usize,
    reps: usize,
) -> Result<Vec<BenchRun>> {
    let n_vocab = model.config.n_vocab as u32;
    // Deterministic pseudo-random token ids (llama-bench uses random ids too).
    let prompt: Vec<u32> = (0..n_prompt as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % n_vocab)
        .collect();
    let mut state = model.new_state((n_prompt + n_gen).max(1));
    // Warm-up: touch every weight once.
    model.forward(&mut state, &prompt[..n_prompt.min(8)], Logits::Last)?;
    let mut runs = Vec::with_capacity(reps);
    for _ in 0..reps {
        state.truncate(0);
        let t = Instant::now();
        if n_prompt > 0 {
            model.forward(&mut state, &prompt, Logits::Last)?;
        }
        let pp = n_prompt as f64 / t.elapsed().as_secs_f64().max(1e-9);
        state.truncate(0);
        let mut tok = 1u32 % n_vocab;
        let t = Instant::now();
        for _ in 0..n_gen {
            let logits = model.forward(&mut state, &[tok], Logits::Last)?;
            tok = crate::sampler::argmax(logits);
        }
        let tg = n_gen as f64 / t.elapsed().as_secs_f64().max(1e-9);
        runs.push(BenchRun {
            pp_tps: pp,
            tg_tps: tg,
        });
    }
    Ok(runs)
}

/// The median of `v` (NaN-free input).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}
