//! The generation loop of one sequence: batched prefill, then a forward of
//! the pending token (and its drafts, with speculative decoding) per step,
//! each step's rows handed to the decoding [`Slot`], which decides the
//! tokens and when to stop (see [`crate::decode`]). The server's engine
//! drives the same slot over many sequences at once.

use crate::decode::{Emitted, Slot, StopReason, TokenLogprob};
use crate::error::Result;
use crate::model::{Logits, Model, State};
use crate::sampler::SamplerConfig;
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
    /// OpenAI's `presence_penalty`: lowers a generated token's logit once
    /// (−2..2; 0 is off).
    pub presence_penalty: f32,
    /// OpenAI's `frequency_penalty`: lowers it per time it was generated
    /// (−2..2; 0 is off).
    pub frequency_penalty: f32,
    /// Report each emitted token's log-probability and this many best
    /// alternatives (`None`: not computed).
    pub logprobs: Option<usize>,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            max_tokens: 128,
            sampler: SamplerConfig::default(),
            stop_tokens: Vec::new(),
            stop_strings: Vec::new(),
            prefill_batch: 512,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logprobs: None,
        }
    }
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
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values were restored, not computed
    /// ([`generate_slot_from`]).
    pub cached_tokens: usize,
    /// Wall time of the prefill.
    pub prefill_time: Duration,
    /// Wall time of decoding (sampling and forwards after the prefill).
    pub decode_time: Duration,
    /// Speculative decoding's counters (zero without a drafter).
    pub spec: SpecStats,
    /// Each token's log-probability (with [`GenerateConfig::logprobs`]).
    pub logprobs: Vec<TokenLogprob>,
}

impl Generation {
    /// Prompt tokens computed per second (restored ones not counted).
    pub fn prefill_tps(&self) -> f64 {
        (self.prompt_tokens - self.cached_tokens) as f64 / self.prefill_time.as_secs_f64().max(1e-9)
    }
    /// Generated tokens per second (forwards after the first token).
    pub fn decode_tps(&self) -> f64 {
        self.tokens.len().saturating_sub(1) as f64 / self.decode_time.as_secs_f64().max(1e-9)
    }
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
/// same positions too. `on_token` also gets, with the stop token's id, the
/// text held back as a possible stop string when a stop token ends the
/// answer ([`Emitted::stop`]).
pub fn generate_with(
    model: &Model<'_>,
    state: &mut State,
    prompt: &[u32],
    cfg: &GenerateConfig,
    tokenizer: Option<Tokenizer<'_>>,
    drafter: Option<&mut dyn Drafter>,
    mut on_token: impl FnMut(u32, &str) -> bool,
) -> Result<Generation> {
    let slot = Slot::new(prompt, cfg.clone(), tokenizer);
    generate_slot(model, state, slot, drafter, |e: &Emitted<'_>| {
        on_token(e.token, e.text)
    })
}

/// Where [`generate_slot`] sends its tokens, and whom it asks whether to
/// go on before each forward pass (a prefill chunk, a decoding step with
/// its drafts): Python checks for Ctrl-C there, so a generation stops
/// within a step whatever it is doing. A closure taking [`Emitted`] is a
/// sink that always goes on.
pub trait Sink {
    /// An emitted token; `false` stops ([`StopReason::Callback`]).
    fn emit(&mut self, e: &Emitted<'_>) -> bool;
    /// Asked before each forward pass; `false` stops
    /// ([`StopReason::Callback`]).
    fn proceed(&mut self) -> bool {
        true
    }
}

impl<F: FnMut(&Emitted<'_>) -> bool> Sink for F {
    fn emit(&mut self, e: &Emitted<'_>) -> bool {
        self(e)
    }
}

/// Runs `slot` (its prompt appended to whatever `state` holds) to its end:
/// the loop behind [`generate`], `gpack run` and Python. `sink` gets each
/// emitted token ([`Emitted`]) and is asked before each forward pass
/// ([`Sink`]).
pub fn generate_slot(
    model: &Model<'_>,
    state: &mut State,
    slot: Slot<'_>,
    drafter: Option<&mut dyn Drafter>,
    sink: impl Sink,
) -> Result<Generation> {
    generate_slot_from(model, state, slot, 0, drafter, sink)
}

/// [`generate_slot`] when `state` already holds the keys and values of the
/// prompt's first `cached` tokens (restored by the prefix cache,
/// [`crate::kvcache`]): only the rest is computed. `cached` must leave the
/// prompt's last token to run (its logits are needed), or be 0.
pub fn generate_slot_from(
    model: &Model<'_>,
    state: &mut State,
    mut slot: Slot<'_>,
    cached: usize,
    mut drafter: Option<&mut dyn Drafter>,
    mut sink: impl Sink,
) -> Result<Generation> {
    let t0 = Instant::now();
    let prompt = slot.prompt().to_vec();
    assert!(
        cached == 0 || cached < prompt.len(),
        "the prompt's last token must run"
    );
    let batch = slot.config().prefill_batch.max(1);
    let mut chunks = prompt[cached..].chunks(batch).peekable();
    let mut rows = usize::from(slot.config().max_tokens > 0);
    while let Some(c) = chunks.next() {
        if !sink.proceed() {
            slot.cancel();
            rows = 0;
            break;
        }
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
    let n_vocab = model.config.n_vocab;
    let n_ctx = state.n_ctx();
    let mut spec = SpecStats::default();
    let mut fed: Vec<u32> = Vec::new();
    let mut drafts = Vec::new();
    // The first rows are the prefill's last: nothing fed yet (none to
    // sample with no token to generate, or after a stop in the prefill).
    while rows > 0 {
        if state.logits().len() < rows * n_vocab {
            break;
        }
        let logits = &state.logits()[..rows * n_vocab];
        // Row 0's token is at the cache length less the rows after it.
        let pos = state.pos() + 1 - rows;
        let kept = slot
            .sample_rows(logits, n_vocab, &drafts, pos, n_ctx, &mut |e| sink.emit(e))
            .map_err(crate::Error::Decode)?;
        if rows > 1 {
            spec.verify_steps += 1;
            spec.drafted += (rows - 1) as u64;
            spec.accepted += kept.accepted as u64;
            if let Some(d) = drafter.as_deref_mut() {
                d.observe(rows - 1, kept.accepted);
            }
            // Keep the positions of the token and its accepted drafts: the
            // cache of the one-token path at this point.
            state.truncate(pos - 1 + kept.used);
        }
        // The rows this step ran and kept (none on the first, which
        // samples the prefill's logits).
        if let Some(d) = drafter
            .as_deref_mut()
            .filter(|d| !fed.is_empty() && d.wants_hidden())
        {
            d.hidden(pos - 1, &model.step_hidden(state, kept.used));
        }
        let Some(tok) = slot.pending() else {
            break;
        };
        let room = slot.draft_room(state.pos(), n_ctx);
        match drafter.as_deref_mut() {
            Some(d) => slot.draft(d, room, n_vocab, &mut drafts),
            None => drafts.clear(),
        }
        if !sink.proceed() {
            slot.cancel();
            break;
        }
        fed.clear();
        fed.push(tok);
        fed.extend_from_slice(&drafts);
        let want = if fed.len() == 1 {
            Logits::Last
        } else {
            Logits::All
        };
        model.forward(state, &fed, want)?;
        rows = fed.len();
    }
    Ok(Generation {
        tokens: slot.generated().to_vec(),
        text: slot.text().to_string(),
        stop: slot.stop().cloned().unwrap_or(StopReason::MaxTokens),
        prompt_tokens: prompt.len(),
        cached_tokens: cached,
        prefill_time,
        decode_time: t1.elapsed(),
        spec,
        logprobs: slot.logprobs().to_vec(),
    })
}
