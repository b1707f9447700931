//! The generation loop: batched prefill, then sample → forward one token at a
//! time, streaming each token (and its text, when a tokenizer is given) to a
//! callback; stops on EOS/stop tokens, stop strings, the token budget, a full
//! context, or the callback.
//!
//! Stop strings are matched on the decoded text; text that could still be
//! the beginning of a stop string is held back, so the callback never sees
//! any part of a stop string (llama.cpp server's `find_partial_stop_string`
//! behaviour).

use crate::error::Result;
use crate::model::{Logits, Model, State};
use crate::sampler::{Sampler, SamplerConfig};
use gpack_tokenizer::Tokenizer;
use std::time::{Duration, Instant};

/// What to generate and when to stop.
#[derive(Clone, Debug)]
pub struct GenerateConfig {
    /// Most new tokens.
    pub max_tokens: usize,
    /// Sampling.
    pub sampler: SamplerConfig,
    /// Tokens that end generation (EOS, end-of-turn); not emitted.
    pub stop_tokens: Vec<u32>,
    /// Strings that end generation; not emitted (needs a tokenizer).
    pub stop_strings: Vec<String>,
    /// Prompt tokens per prefill batch (bounds scratch memory).
    pub prefill_batch: usize,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            max_tokens: 128,
            sampler: SamplerConfig::default(),
            stop_tokens: Vec::new(),
            stop_strings: Vec::new(),
            prefill_batch: 512,
        }
    }
}

/// Why generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `max_tokens` reached.
    MaxTokens,
    /// A stop token was sampled.
    StopToken(u32),
    /// A stop string appeared in the text.
    StopString(String),
    /// The callback asked to stop.
    Callback,
    /// The KV cache is full.
    ContextFull,
}

/// The result of [`generate`].
#[derive(Clone, Debug)]
pub struct Generation {
    /// New tokens (a stop token is not included).
    pub tokens: Vec<u32>,
    /// Text of the new tokens as streamed (empty without a tokenizer).
    pub text: String,
    /// Why it ended.
    pub stop: StopReason,
    /// Prompt tokens processed.
    pub prompt_tokens: usize,
    /// Wall time of the prefill.
    pub prefill_time: Duration,
    /// Wall time of decoding (sampling and forwards after the prefill).
    pub decode_time: Duration,
}

impl Generation {
    /// Prompt tokens per second.
    pub fn prefill_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_time.as_secs_f64().max(1e-9)
    }
    /// Generated tokens per second (forwards after the first token).
    pub fn decode_tps(&self) -> f64 {
        self.tokens.len().saturating_sub(1) as f64 / self.decode_time.as_secs_f64().max(1e-9)
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of some
/// stop string: the bytes a streamer holds back until it knows whether a
/// stop string follows. The one stop-string matcher (`generate` and the
/// server's engine call it).
pub fn partial_stop(text: &str, stops: &[String]) -> usize {
    let mut best = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if i > best && text.ends_with(&s[..i]) {
                best = i;
            }
        }
    }
    best
}

/// Generates after `prompt` (appended to whatever `state` already holds).
/// `on_token(id, text)` is called for each emitted token with the text that
/// became final with it (possibly empty); returning `false` stops.
pub fn generate(
    model: &Model<'_>,
    state: &mut State,
    prompt: &[u32],
    cfg: &GenerateConfig,
    tokenizer: Option<Tokenizer<'_>>,
    mut on_token: impl FnMut(u32, &str) -> bool,
) -> Result<Generation> {
    let mut sampler = Sampler::new(cfg.sampler.clone());
    let mut history: Vec<u32> = prompt.to_vec();
    let t0 = Instant::now();
    let batch = cfg.prefill_batch.max(1);
    let mut chunks = prompt.chunks(batch).peekable();
    while let Some(c) = chunks.next() {
        let want = if chunks.peek().is_none() {
            Logits::Last
        } else {
            Logits::None
        };
        model.forward(state, c, want)?;
    }
    let prefill_time = t0.elapsed();
    let t1 = Instant::now();
    let mut decoder = tokenizer.map(|t| t.stream_decoder());
    let mut out = Generation {
        tokens: Vec::new(),
        text: String::new(),
        stop: StopReason::MaxTokens,
        prompt_tokens: prompt.len(),
        prefill_time,
        decode_time: Duration::ZERO,
    };
    let mut emitted = 0usize; // bytes of `out.text` already given to the callback
    while out.tokens.len() < cfg.max_tokens {
        if state.logits().is_empty() {
            break;
        }
        let tok = sampler.sample(state.logits(), &history);
        if cfg.stop_tokens.contains(&tok) {
            out.stop = StopReason::StopToken(tok);
            break;
        }
        out.tokens.push(tok);
        history.push(tok);
        let piece = decoder.as_mut().map(|d| d.push(tok)).unwrap_or_default();
        out.text.push_str(&piece);
        // Stop strings: cut at the first occurrence; hold back a partial match.
        if let Some((pos, s)) = cfg
            .stop_strings
            .iter()
            .filter_map(|s| {
                out.text[emitted..]
                    .find(s.as_str())
                    .map(|p| (emitted + p, s))
            })
            .min_by_key(|(p, _)| *p)
        {
            let release = &out.text[emitted..pos];
            if !release.is_empty() {
                on_token(tok, release);
            }
            out.text.truncate(pos);
            out.stop = StopReason::StopString(s.clone());
            break;
        }
        let hold = partial_stop(&out.text[emitted..], &cfg.stop_strings);
        let upto = out.text.len() - hold;
        let release = out.text[emitted..upto].to_string();
        emitted = upto;
        if !on_token(tok, &release) {
            out.stop = StopReason::Callback;
            break;
        }
        if out.tokens.len() >= cfg.max_tokens {
            break;
        }
        if state.pos() >= state.n_ctx() {
            out.stop = StopReason::ContextFull;
            break;
        }
        model.forward(state, &[tok], Logits::Last)?;
    }
    out.decode_time = t1.elapsed();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::partial_stop;

    #[test]
    fn partial_stop_finds_prefix_suffix() {
        let stops = vec!["<|im_end|>".to_string()];
        assert_eq!(partial_stop("hello <|im", &stops), 4);
        assert_eq!(partial_stop("hello", &stops), 0);
        assert_eq!(partial_stop("a<", &stops), 1);
    }
}
