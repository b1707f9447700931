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
use crate::spec::{Drafter, SpecStats};
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
    /// Speculative decoding's counters (zero without a drafter).
    pub spec: SpecStats,
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
    on_token: impl FnMut(u32, &str) -> bool,
) -> Result<Generation> {
    generate_with(model, state, prompt, cfg, tokenizer, None, on_token)
}

/// [`generate`] with speculative decoding when `drafter` is given: after
/// each emitted token the drafter proposes up to its draft length of
/// continuation tokens, the model runs the token and the drafts in one
/// batched forward, and every draft the sampler's own draw agrees with is
/// emitted without a forward of its own (the acceptance rule in
/// [`crate::spec`]). The tokens, text and stop reason are those of
/// [`generate`] with the same configuration; the cache afterwards holds the
/// same positions too.
pub fn generate_with(
    model: &Model<'_>,
    state: &mut State,
    prompt: &[u32],
    cfg: &GenerateConfig,
    tokenizer: Option<Tokenizer<'_>>,
    mut drafter: Option<&mut dyn Drafter>,
    on_token: impl FnMut(u32, &str) -> bool,
) -> Result<Generation> {
    let t0 = Instant::now();
    let batch = cfg.prefill_batch.max(1);
    let mut chunks = prompt.chunks(batch).peekable();
    while let Some(c) = chunks.next() {
        let want = if chunks.peek().is_none() {
            Logits::Last
        } else {
            Logits::None
        };
        let from = state.pos();
        model.forward(state, c, want)?;
        if let Some(d) = drafter.as_deref_mut().filter(|d| d.wants_hidden()) {
            d.hidden(from, &model.step_hidden(state, c.len()));
        }
    }
    let prefill_time = t0.elapsed();
    let t1 = Instant::now();
    let mut em = Emitter {
        cfg,
        sampler: Sampler::new(cfg.sampler.clone()),
        history: prompt.to_vec(),
        decoder: tokenizer.map(|t| t.stream_decoder()),
        emitted: 0,
        on_token,
        out: Generation {
            tokens: Vec::new(),
            text: String::new(),
            stop: StopReason::MaxTokens,
            prompt_tokens: prompt.len(),
            prefill_time,
            decode_time: Duration::ZERO,
            spec: SpecStats::default(),
        },
    };
    let n_vocab = model.config.n_vocab;
    let mut drafts = Vec::new();
    // The last emitted token, not yet in the cache (`None` before the first).
    let mut pending: Option<u32> = None;
    while em.out.tokens.len() < cfg.max_tokens {
        let rows_ran = pending.is_some();
        let rows = match pending {
            None => 1,
            Some(tok) => {
                if state.pos() >= state.n_ctx() {
                    em.out.stop = StopReason::ContextFull;
                    break;
                }
                drafts.clear();
                // Room: k drafts give k + 1 rows, each may emit a token and
                // needs a cache position.
                let room = (cfg.max_tokens - em.out.tokens.len())
                    .min(state.n_ctx() - state.pos())
                    .saturating_sub(1);
                if let Some(d) = drafter.as_deref_mut() {
                    if room > 0 {
                        // A failed draft only costs the speculation: the
                        // text is plain decoding's either way.
                        if let Err(e) = d.draft(&em.history, room, &mut drafts) {
                            log::warn!("drafting failed: {e}");
                            drafts.clear();
                        }
                        // A draft model's padded vocabulary may name ids
                        // the target lacks: draft up to the first.
                        let valid = drafts.iter().take_while(|&&t| (t as usize) < n_vocab);
                        let keep = valid.count().min(room);
                        drafts.truncate(keep);
                    }
                }
                drafts.insert(0, tok);
                let want = if drafts.len() == 1 {
                    Logits::Last
                } else {
                    Logits::All
                };
                model.forward(state, &drafts, want)?;
                drafts.len()
            }
        };
        if state.logits().len() < rows * n_vocab {
            break;
        }
        // Row j predicts the token after drafts[..=j]; drafts[j + 1] is
        // accepted iff the sampler draws it there.
        let base = state.pos() - if pending.is_some() { rows } else { 0 };
        let mut used = rows;
        let mut accepted = 0;
        for j in 0..rows {
            let logits = &state.logits()[j * n_vocab..(j + 1) * n_vocab];
            let next = em.sampler.sample(logits, &em.history);
            let go = em.push(next);
            let hit = go && j + 1 < rows && drafts[j + 1] == next;
            if hit {
                accepted += 1;
            }
            if !hit || !go {
                used = j + 1;
                pending = Some(next);
                if !go {
                    pending = None;
                }
                break;
            }
        }
        if rows > 1 {
            em.out.spec.verify_steps += 1;
            em.out.spec.drafted += (rows - 1) as u64;
            em.out.spec.accepted += accepted as u64;
            if let Some(d) = drafter.as_deref_mut() {
                d.observe(rows - 1, accepted);
            }
            // Keep the positions of the token and its accepted drafts: the
            // cache of the one-token path at this point.
            state.truncate(base + used);
        }
        // The rows this iteration ran and kept (none on the first, which
        // samples the prefill's logits).
        if let Some(d) = drafter
            .as_deref_mut()
            .filter(|d| rows_ran && d.wants_hidden())
        {
            debug_assert_eq!(state.pos(), base + used);
            d.hidden(base, &model.step_hidden(state, used));
        }
        if pending.is_none() {
            break;
        }
    }
    em.out.decode_time = t1.elapsed();
    Ok(em.out)
}

/// Emits sampled tokens: stop tokens and strings, the held-back text, the
/// callback and the token budget, in the one-token loop's order.
struct Emitter<'c, 't, F> {
    cfg: &'c GenerateConfig,
    sampler: Sampler,
    history: Vec<u32>,
    decoder: Option<gpack_tokenizer::StreamDecoder<'t>>,
    /// Bytes of `out.text` already given to the callback.
    emitted: usize,
    on_token: F,
    out: Generation,
}

impl<F: FnMut(u32, &str) -> bool> Emitter<'_, '_, F> {
    /// Emits `tok`; `false` when generation ends with it (`out.stop` says
    /// why).
    fn push(&mut self, tok: u32) -> bool {
        let cfg = self.cfg;
        let out = &mut self.out;
        if cfg.stop_tokens.contains(&tok) {
            out.stop = StopReason::StopToken(tok);
            return false;
        }
        out.tokens.push(tok);
        self.history.push(tok);
        let piece = self
            .decoder
            .as_mut()
            .map(|d| d.push(tok))
            .unwrap_or_default();
        out.text.push_str(&piece);
        let emitted = self.emitted;
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
                (self.on_token)(tok, release);
            }
            out.text.truncate(pos);
            out.stop = StopReason::StopString(s.clone());
            return false;
        }
        let hold = partial_stop(&out.text[emitted..], &cfg.stop_strings);
        let upto = out.text.len() - hold;
        let release = out.text[emitted..upto].to_string();
        self.emitted = upto;
        if !(self.on_token)(tok, &release) {
            out.stop = StopReason::Callback;
            return false;
        }
        out.tokens.len() < cfg.max_tokens
    }
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
