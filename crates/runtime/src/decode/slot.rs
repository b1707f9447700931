//! The decoding slot: everything that turns a row of logits into the next
//! token of one sequence and decides when the sequence ends. `gpack run`,
//! Python's `gpack.Model` ([`crate::generate`]) and the server's engine
//! (which only schedules and batches slots) all drive this one type, so the
//! same prompt, seed and settings give the same tokens everywhere.
//!
//! Per sampled row, in this order:
//! 1. the row as the model computed it, or a copy with the presence and
//!    frequency penalties applied and what the grammar forbids at −∞
//!    ([`Slot::pick`]);
//! 2. the sampler's draw ([`crate::Sampler`]: temperature, top-k, top-p,
//!    min-p, repetition penalty, seeded);
//! 3. the stop tokens (not emitted), then the token is emitted: its
//!    log-probability (from the model's own row), the grammar advanced, its
//!    text decoded ([`gpack_tokenizer::StreamDecoder`]), a stop string cut
//!    at its first occurrence, text that could still begin a stop string
//!    held back (llama.cpp server's `find_partial_stop_string` behaviour),
//!    then the grammar's completion, `max_tokens` and the context.
//!
//! Speculative decoding ([`crate::spec`]): [`Slot::draft`] asks a drafter for
//! tokens, the caller runs the pending token and the drafts in one forward,
//! and [`Slot::sample_rows`] samples the rows in order, accepting a draft
//! while the sampler's own draw equals it; the caller truncates its cache to
//! the rows kept. The tokens are those of plain decoding. A constrained slot
//! drafts nothing: a grammar's mask depends on every token before it.
//!
//! A slot given a [`ReplyScan`] ([`Slot::with_reply`]: tool calls or
//! harmony channels) also reads its final text as a reply: each emission
//! carries what the reply gained ([`Emitted::reply`]: content, reasoning,
//! tool-call deltas), and [`Slot::finish_reply`] gives the last piece once
//! the sequence ended. Streaming front ends send those pieces as they are.

use super::grammar::{allowed, apply_mask, Guide};
use super::logprob::{token_logprob, TokenLogprob};
use super::penalty::Penalties;
use super::reply::{ReplyDelta, ReplyScan};
use super::stop::{partial_stop, StopReason};
use crate::generate::GenerateConfig;
use crate::sampler::{argmax, Sampler};
use crate::spec::Drafter;
use gpack_tokenizer::{StreamDecoder, Tokenizer};
use llguidance::toktrie::SimpleVob;
use std::time::{Duration, Instant};

/// One emitted token and the text that became final with it.
#[derive(Debug)]
pub struct Emitted<'a> {
    /// The token sampled.
    pub token: u32,
    /// Whether `token` is a stop token: it ends the sequence and is not part
    /// of the output; `text` is what was held back before it (a partial
    /// stop string that did not complete), final now.
    pub stop: bool,
    /// Text now final (possibly empty; never part of a stop string).
    pub text: &'a str,
    /// The token's log-probability and alternatives, when asked for
    /// ([`GenerateConfig::logprobs`]).
    pub logprob: Option<&'a TokenLogprob>,
    /// What the reply gained with `text`, for a slot reading a reply
    /// ([`Slot::with_reply`]); `None` otherwise.
    pub reply: Option<&'a ReplyDelta>,
}

/// What [`Slot::sample_rows`] kept of a step's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// Rows whose token is kept in the cache: the first row plus the drafts
    /// accepted (the caller truncates its cache to them).
    pub used: usize,
    /// Drafts the sampler agreed with.
    pub accepted: usize,
}

/// One sequence's token decisions (see the module docs).
pub struct Slot<'t> {
    cfg: GenerateConfig,
    sampler: Sampler,
    penalties: Penalties,
    /// The prompt, then every emitted token.
    history: Vec<u32>,
    prompt_len: usize,
    decoder: Option<StreamDecoder<'t>>,
    /// Text of the emitted tokens (a stop string cut off).
    text: String,
    /// Bytes of `text` given to the sink.
    emitted: usize,
    logprobs: Vec<TokenLogprob>,
    /// The grammar, while it is not lent out for a mask
    /// ([`Slot::lend_guide`]).
    guide: Option<Box<Guide>>,
    end_token: u32,
    constrained: bool,
    /// The mask for the next row, computed beside the forward pass.
    mask: Option<Result<SimpleVob, String>>,
    /// The masked copy of a row.
    masked: Vec<f32>,
    /// Time spent computing masks inline since the last
    /// [`Slot::take_mask_time`].
    mask_time: Duration,
    stop: Option<StopReason>,
    /// The last emitted token, not yet in the cache.
    pending: Option<u32>,
    /// The reply being read from the final text, when asked for.
    reply: Option<ReplyScan>,
}

impl std::fmt::Debug for Slot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("generated", &self.generated())
            .field("constrained", &self.constrained)
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl<'t> Slot<'t> {
    /// A slot that continues `prompt` under `cfg`; text is decoded when a
    /// tokenizer is given (stop strings need one).
    pub fn new(prompt: &[u32], cfg: GenerateConfig, tokenizer: Option<Tokenizer<'t>>) -> Self {
        Slot {
            sampler: Sampler::new(cfg.sampler.clone()),
            penalties: Penalties::new(cfg.presence_penalty, cfg.frequency_penalty),
            history: prompt.to_vec(),
            prompt_len: prompt.len(),
            decoder: tokenizer.map(|t| t.stream_decoder()),
            text: String::new(),
            emitted: 0,
            logprobs: Vec::new(),
            guide: None,
            end_token: 0,
            constrained: false,
            mask: None,
            masked: Vec::new(),
            mask_time: Duration::ZERO,
            stop: None,
            pending: None,
            reply: None,
            cfg,
        }
    }

    /// The same slot, its final text also read as a reply (see the module
    /// docs).
    pub fn with_reply(mut self, reply: ReplyScan) -> Self {
        self.reply = Some(reply);
        self
    }

    /// The reply's last piece, once the sequence ended (`None` for a slot
    /// without a reply, or before the end).
    pub fn finish_reply(&mut self) -> Option<ReplyDelta> {
        self.stop.as_ref()?;
        self.reply.as_mut().map(ReplyScan::finish)
    }

    /// The same slot, its output constrained by `guide` (from
    /// [`super::Grammars::compile`]).
    pub fn with_guide(mut self, guide: Box<Guide>) -> Self {
        self.end_token = guide.end;
        self.guide = Some(guide);
        self.constrained = true;
        self
    }

    /// Its settings.
    pub fn config(&self) -> &GenerateConfig {
        &self.cfg
    }

    /// The prompt.
    pub fn prompt(&self) -> &[u32] {
        &self.history[..self.prompt_len]
    }

    /// The prompt and the tokens emitted so far.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// Tokens emitted so far (a stop token is not emitted).
    pub fn generated(&self) -> &[u32] {
        &self.history[self.prompt_len..]
    }

    /// The text of the emitted tokens (a stop string cut off).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The emitted tokens' log-probabilities (when asked for).
    pub fn logprobs(&self) -> &[TokenLogprob] {
        &self.logprobs
    }

    /// Why the sequence ended, once it has.
    pub fn stop(&self) -> Option<&StopReason> {
        self.stop.as_ref()
    }

    /// The last emitted token, which the next step feeds (`None` before the
    /// first token and after the end).
    pub fn pending(&self) -> Option<u32> {
        self.pending
    }

    /// Whether a grammar constrains the output.
    pub fn is_constrained(&self) -> bool {
        self.constrained
    }

    /// Whether sampling is greedy.
    pub fn is_greedy(&self) -> bool {
        self.sampler.config().is_greedy()
    }

    /// Lends the grammar out, for its next mask to be computed elsewhere
    /// (the server's engine does it beside the forward pass); give it back
    /// with [`Slot::restore_guide`] before the next row is sampled.
    pub fn lend_guide(&mut self) -> Option<Box<Guide>> {
        self.guide.take()
    }

    /// Takes back a lent grammar with the mask computed for the next row.
    pub fn restore_guide(&mut self, guide: Box<Guide>, mask: Result<SimpleVob, String>) {
        self.guide = Some(guide);
        self.mask = Some(mask);
    }

    /// Time spent computing masks while sampling since the last call.
    pub fn take_mask_time(&mut self) -> Duration {
        std::mem::take(&mut self.mask_time)
    }

    /// Most draft tokens the next step may run after the pending token
    /// when the cache holds `cache_len` of `n_ctx` positions: k drafts give
    /// k + 1 rows, each of which may emit a token and needs a position.
    pub fn draft_room(&self, cache_len: usize, n_ctx: usize) -> usize {
        let left = self.cfg.max_tokens.saturating_sub(self.generated().len());
        left.min(n_ctx.saturating_sub(cache_len)).saturating_sub(1)
    }

    /// Fills `out` with up to `room` draft tokens from `d` (none for a
    /// constrained slot; ids the model's `n_vocab` lacks cut the draft
    /// there: a draft model's padded vocabulary may name them). A failed
    /// draft only costs the speculation: the text is plain decoding's
    /// either way.
    pub fn draft(&self, d: &mut dyn Drafter, room: usize, n_vocab: usize, out: &mut Vec<u32>) {
        out.clear();
        if room == 0 || self.constrained {
            return;
        }
        if let Err(e) = d.draft(&self.history, room, out) {
            log::warn!("drafting failed: {}", gpack_format::error_chain(&e));
            out.clear();
        }
        let valid = out.iter().take_while(|&&t| (t as usize) < n_vocab).count();
        out.truncate(valid.min(room));
    }

    /// Samples a step's rows of `logits` (`n_vocab` each) in order. Row 0
    /// follows the token the step fed first; `drafts[j]` is the token fed
    /// after it in row `j + 1`, accepted when row `j` samples it. `pos` is
    /// the cache length after row 0's token (row `j` at `pos + j`): the
    /// token sampled there needs position `pos + j`, so the sequence ends
    /// when that reaches `n_ctx`. `sink` gets each emitted token (returning
    /// `false` ends the sequence, [`StopReason::Callback`]).
    pub fn sample_rows(
        &mut self,
        logits: &[f32],
        n_vocab: usize,
        drafts: &[u32],
        pos: usize,
        n_ctx: usize,
        sink: &mut dyn FnMut(&Emitted<'_>) -> bool,
    ) -> Result<Rows, String> {
        let rows = (logits.len() / n_vocab.max(1)).min(drafts.len() + 1);
        let mut out = Rows {
            used: rows,
            accepted: 0,
        };
        self.pending = None;
        for j in 0..rows {
            if self.stop.is_some() {
                out.used = j;
                break;
            }
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            let tok = self.pick(row)?;
            let go = self.emit(tok, row, pos + j, n_ctx, sink);
            if go && j + 1 < rows && drafts[j] == tok {
                out.accepted += 1;
                continue;
            }
            out.used = j + 1;
            if go {
                self.pending = Some(tok);
            }
            break;
        }
        Ok(out)
    }

    /// Ends the sequence now (a client gone, a shutdown), unless it ended.
    pub fn cancel(&mut self) {
        self.pending = None;
        self.stop.get_or_insert(StopReason::Callback);
    }

    /// The token to emit from `raw`: penalties and the grammar applied on a
    /// copy when the slot has them.
    ///
    /// A greedy constrained slot without a mask computed beforehand first
    /// asks its grammar about the token greedy sampling picks from the
    /// unmasked row: when the grammar accepts it, that token is also the
    /// argmax of the masked row (masking only lowers other entries to −∞,
    /// and ties go to the lowest id either way), so no mask is computed.
    /// The end token and the stop tokens always take the mask (they are
    /// allowed exactly when the output is complete), and so does every step
    /// where the grammar forces bytes (llguidance's mask is then the forced
    /// bytes' canonical token alone; without forced bytes it is exactly the
    /// tokens whose bytes the grammar accepts, what `validate_tokens`
    /// checks).
    fn pick(&mut self, raw: &[f32]) -> Result<u32, String> {
        if !self.constrained && !self.penalties.active() {
            return Ok(self.sampler.sample(raw, &self.history));
        }
        let mut buf = std::mem::take(&mut self.masked);
        buf.clear();
        buf.extend_from_slice(raw);
        self.penalties.apply(&mut buf);
        let picked = self.pick_masked(&mut buf);
        self.masked = buf;
        picked
    }

    fn pick_masked(&mut self, buf: &mut [f32]) -> Result<u32, String> {
        if !self.constrained {
            return Ok(self.sampler.sample(buf, &self.history));
        }
        let (end, stop) = (self.end_token, &self.cfg.stop_tokens);
        let mask = match self.mask.take() {
            Some(Ok(m)) => m,
            Some(Err(e)) => return Err(format!("the grammar engine failed: {e}")),
            None => {
                let Some(g) = self.guide.as_mut() else {
                    return Err("internal error: no grammar for this step".into());
                };
                if self.sampler.config().is_greedy() {
                    let tok = self.sampler.sample(buf, &self.history);
                    // Where the grammar forces bytes (a key, a bracket), its
                    // mask is not "every token it accepts" but the forced
                    // bytes' canonical token: the mask decides there.
                    if tok != end
                        && !stop.contains(&tok)
                        && g.compute_ff_bytes().is_empty()
                        && g.validate_tokens(&[tok]).ok() == Some(1)
                    {
                        return Ok(tok);
                    }
                }
                let t = Instant::now();
                let m = g
                    .compute_mask()
                    .map_err(|e| format!("the grammar engine failed: {e}"))?;
                self.mask_time += t.elapsed();
                m
            }
        };
        apply_mask(buf, &mask, end, stop);
        let tok = self.sampler.sample(buf, &self.history);
        // A sampler may fall back to its last candidate when rounding leaves
        // its draw past the total mass: never a forbidden token.
        Ok(if allowed(&mask, tok, end, stop) {
            tok
        } else {
            argmax(buf)
        })
    }

    /// Emits `tok` (sampled from the model's row `raw`) at cache length
    /// `pos`; `false` when the sequence ends with it (`self.stop` says why).
    fn emit(
        &mut self,
        tok: u32,
        raw: &[f32],
        pos: usize,
        n_ctx: usize,
        sink: &mut dyn FnMut(&Emitted<'_>) -> bool,
    ) -> bool {
        if self.cfg.stop_tokens.contains(&tok) {
            // Text held back as a possible stop-string prefix is final now.
            if self.emitted < self.text.len() {
                let text = &self.text[self.emitted..];
                let reply = self.reply.as_mut().map(|r| r.push(text));
                let e = Emitted {
                    token: tok,
                    stop: true,
                    text,
                    logprob: None,
                    reply: reply.as_ref(),
                };
                sink(&e);
                self.emitted = self.text.len();
            }
            self.stop = Some(StopReason::StopToken(tok));
            return false;
        }
        self.history.push(tok);
        self.penalties.record(tok);
        if let Some(k) = self.cfg.logprobs {
            self.logprobs.push(token_logprob(raw, tok, k));
        }
        let mut complete = false;
        if let Some(g) = self.guide.as_mut() {
            if let Err(e) = g.consume_token(tok) {
                log::error!("the grammar engine refused its own token: {e}");
                complete = true;
            }
            complete |= g.is_stopped();
        }
        if let Some(d) = self.decoder.as_mut() {
            self.text.push_str(&d.push(tok));
        }
        let logprob = self.cfg.logprobs.and_then(|_| self.logprobs.last());
        let from = self.emitted;
        let stops = &self.cfg.stop_strings;
        // Stop strings: cut at the first occurrence.
        if let Some((at, s)) = stops
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|p| (from + p, s)))
            .min_by_key(|(p, _)| *p)
        {
            let s = s.clone();
            let text = &self.text[from..at];
            let reply = self.reply.as_mut().map(|r| r.push(text));
            sink(&Emitted {
                token: tok,
                stop: false,
                text,
                logprob,
                reply: reply.as_ref(),
            });
            self.text.truncate(at);
            self.emitted = at;
            self.stop = Some(StopReason::StopString(s));
            return false;
        }
        let n_gen = self.history.len() - self.prompt_len;
        let end = if complete {
            Some(StopReason::Grammar)
        } else if n_gen >= self.cfg.max_tokens {
            Some(StopReason::MaxTokens)
        } else if pos >= n_ctx {
            Some(StopReason::ContextFull)
        } else {
            None
        };
        // At the end, nothing is held back.
        let hold = match end {
            Some(_) => 0,
            None => partial_stop(&self.text[from..], stops),
        };
        let upto = self.text.len() - hold;
        self.emitted = upto;
        let text = &self.text[from..upto];
        let reply = self.reply.as_mut().map(|r| r.push(text));
        let go = sink(&Emitted {
            token: tok,
            stop: false,
            text,
            logprob,
            reply: reply.as_ref(),
        });
        if let Some(r) = end {
            self.stop = Some(r);
            return false;
        }
        if !go {
            self.stop = Some(StopReason::Callback);
        }
        go
    }
}
