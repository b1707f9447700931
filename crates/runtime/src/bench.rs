//! Throughput measurement: prompt processing (one batched prefill of `n_prompt`
//! tokens) and generation (`n_gen` single-token forwards), like
//! `llama-bench -p N -n M` (which also uses synthetic tokens and an empty
//! cache per repetition).

use crate::error::Result;
use crate::model::{Logits, Model};
use crate::weights::{TensorRef, WeightSource};
use std::time::Instant;

/// One repetition's figures.
#[derive(Clone, Copy, Debug)]
pub struct BenchRun {
    /// Prompt tokens per second.
    pub pp_tps: f64,
    /// Generated tokens per second.
    pub tg_tps: f64,
}

/// Runs `reps` repetitions of: prefill `n_prompt` tokens, then (in a fresh
/// cache, as llama-bench's `tg` test) decode `n_gen` tokens; each test
/// after `n_depth` tokens already in the cache (llama-bench's `-d`: a
/// context prefilled before the clock starts, so the figures are those of a
/// conversation `n_depth` tokens long).
pub fn bench(
    model: &Model<'_>,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    reps: usize,
) -> Result<Vec<BenchRun>> {
    let n_vocab = model.config.n_vocab as u32;
    // Deterministic pseudo-random token ids (llama-bench uses random ids too).
    let ids = |from: u32, n: usize| -> Vec<u32> {
        (from..from + n as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % n_vocab)
            .collect()
    };
    let prompt = ids(0, n_prompt);
    let depth = ids(n_prompt as u32, n_depth);
    let mut state = model.new_state((n_depth + n_prompt.max(n_gen)).max(1));
    // The context of each test: `n_depth` tokens from an empty cache.
    let fill = |state: &mut crate::model::State| -> Result<()> {
        state.truncate(0);
        if n_depth > 0 {
            model.forward(state, &depth, Logits::Last)?;
        }
        Ok(())
    };
    // Warm-up, as llama-bench's (its default): the full prompt, then one
    // generated token, so every weight, the KV cache and the batch's scratch
    // are touched before the clock starts (first-touch page faults were ~7 %
    // of the profile of a 1B pp256 warmed up with 8 tokens).
    if n_prompt > 0 {
        fill(&mut state)?;
        model.forward(&mut state, &prompt, Logits::Last)?;
    }
    if n_gen > 0 {
        fill(&mut state)?;
        model.forward(&mut state, &[1 % n_vocab], Logits::Last)?;
    }
    let mut runs = Vec::with_capacity(reps);
    for _ in 0..reps {
        let mut pp = 0.0;
        if n_prompt > 0 {
            fill(&mut state)?;
            let t = Instant::now();
            model.forward(&mut state, &prompt, Logits::Last)?;
            pp = n_prompt as f64 / t.elapsed().as_secs_f64().max(1e-9);
        }
        let mut tg = 0.0;
        if n_gen > 0 {
            fill(&mut state)?;
            let mut tok = 1u32 % n_vocab;
            let t = Instant::now();
            for _ in 0..n_gen {
                let logits = model.forward(&mut state, &[tok], Logits::Last)?;
                tok = crate::sampler::argmax(logits);
            }
            tg = n_gen as f64 / t.elapsed().as_secs_f64().max(1e-9);
        }
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

/// The per-layer matrices of a dense block, GGUF names.
const BLOCK_MATRICES: [&str; 7] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// Bytes the kernels read for one pass over `t`, and its weight count.
fn matrix_cost(t: &TensorRef<'_>) -> (f64, f64) {
    match t {
        TensorRef::Native {
            view,
            row_start: _,
            rows,
        } => {
            let scales = if view.has_f16_scales() {
                2 * (view.f16_scales().len() + view.f16_mins().len())
            } else {
                4 * (view.scales().len() + view.mins().len())
            };
            let all = (view.codes().len() + scales) as f64;
            // A member of a fused group: its share of the rows.
            let bytes = all * *rows as f64 / view.rows() as f64;
            (bytes, (*rows * view.cols()) as f64)
        }
        TensorRef::Dense { dims, bytes, .. } => {
            (bytes.len() as f64, dims.iter().product::<u64>() as f64)
        }
    }
}

/// What one token costs in the matrices the kernels read (q, k, v, o, gate,
/// up, down of every layer, and the output head): bytes read (codes plus
/// the scale arrays the kernels use: the f16 copy when present, else the
/// f32 ones) and multiply-accumulates (weight elements). The embedding
/// lookup (one row) is not counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokenCost {
    /// Bytes of the layers' matrices.
    pub body_bytes: f64,
    /// Multiply-accumulates of the layers' matrices.
    pub body_macs: f64,
    /// Bytes of the output head.
    pub head_bytes: f64,
    /// Multiply-accumulates of the output head.
    pub head_macs: f64,
    /// Matrices found.
    pub matrices: usize,
}

impl TokenCost {
    /// Of `w`, a model of `n_layer` layers.
    pub fn of(w: &dyn WeightSource, n_layer: usize) -> TokenCost {
        let mut c = TokenCost::default();
        for l in 0..n_layer {
            for m in BLOCK_MATRICES {
                if let Some(t) = w.tensor(&format!("blk.{l}.{m}.weight")) {
                    let (b, n) = matrix_cost(&t);
                    c.body_bytes += b;
                    c.body_macs += n;
                    c.matrices += 1;
                }
            }
        }
        let head = w
            .tensor("output.weight")
            .or_else(|| w.tensor("token_embd.weight"));
        if let Some(h) = &head {
            (c.head_bytes, c.head_macs) = matrix_cost(h);
            c.matrices += 1;
        }
        c
    }

    /// Bytes read per decoded token.
    pub fn bytes_per_token(&self) -> f64 {
        self.body_bytes + self.head_bytes
    }

    /// Multiply-accumulates per prompt token of an `n_prompt`-token prefill
    /// (every body matrix, the head once, on the last token).
    pub fn prefill_macs_per_token(&self, n_prompt: usize) -> f64 {
        if n_prompt == 0 {
            0.0
        } else {
            self.body_macs + self.head_macs / n_prompt as f64
        }
    }
}

/// The memory-read yardstick: a plain read loop (sum of u64 words) over
/// 512 MB on `threads` threads, best of 3, in GB/s
/// (`crates/quant/examples/membw.rs` is the fuller probe: 1 GiB, median of
/// passes, and the VNNI peak).
pub fn read_bandwidth_gbs(threads: usize) -> f64 {
    let words = 64usize << 20;
    let buf: Vec<u64> = (0..words as u64).collect();
    let per = words.div_ceil(threads.max(1));
    let mut best = 0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let s: u64 = std::thread::scope(|sc| {
            let h: Vec<_> = buf
                .chunks(per)
                .map(|c| sc.spawn(move || c.iter().fold(0u64, |a, &v| a.wrapping_add(v))))
                .collect();
            h.into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        std::hint::black_box(s);
        best = best.max((words * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// Anonymous resident memory of this process (`RssAnon`), in KiB.
pub fn rss_anon_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("RssAnon:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
