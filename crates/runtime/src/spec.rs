//! Speculative decoding: draft sources and the acceptance rule.
//!
//! A [`Drafter`] proposes tokens that may follow the text so far; the target
//! model checks all of them in one batched forward (the prefill kernels: on a
//! model larger than the cache, reading the weights once for k + 1 rows costs
//! little more than for one) and keeps the longest prefix it agrees with,
//! plus one token of its own.
//!
//! # Acceptance rule (normative)
//!
//! Drafts are point masses: every source here proposes one token per position
//! (the n-gram continuation, or the draft model's argmax). For a point mass
//! `q = δ_d`, the standard rejection-sampling rule (Leviathan et al. 2023,
//! Chen et al. 2023: accept `d` with probability `min(1, p(d) / q(d))`, else
//! sample from `norm(max(0, p − q))`) accepts with probability `p(d)` and on
//! rejection samples from `p` conditioned on `≠ d`. Drawing `x ~ p` with the
//! target's own sampler and accepting iff `x == d` does exactly that, so it
//! is the rule: each emitted token is the sampler's draw from the target's
//! logits at its position, with the same random numbers in the same order as
//! without speculation. Hence the same seed gives the same tokens with and
//! without speculation, greedy or not, provided the batched forward's logits
//! equal the one-token forwards' bit for bit (the kernels' contract, held by
//! the tests).

use crate::error::Result;
use crate::model::{Logits, Model, Mtp, State};
use crate::sampler::argmax;

/// Which draft source a generation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecMode {
    /// No speculation: one token per forward.
    None,
    /// [`NgramDrafter`]: prompt lookup, no extra weights.
    Ngram,
    /// [`ModelDrafter`]: a smaller model with the same vocabulary.
    Draft,
    /// [`MtpDrafter`]: the model's own multi-token-prediction block.
    Mtp,
}

impl SpecMode {
    /// Every mode, in `--help` order.
    pub const ALL: [SpecMode; 4] = [
        SpecMode::Ngram,
        SpecMode::Draft,
        SpecMode::Mtp,
        SpecMode::None,
    ];

    /// `ngram`, `draft`, `mtp`, `none`.
    pub fn name(self) -> &'static str {
        match self {
            SpecMode::None => "none",
            SpecMode::Ngram => "ngram",
            SpecMode::Draft => "draft",
            SpecMode::Mtp => "mtp",
        }
    }
}

impl std::str::FromStr for SpecMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        SpecMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!("unknown speculation mode {s:?} (expected ngram, draft, mtp or none)")
            })
    }
}

/// A source of draft tokens.
pub trait Drafter {
    /// Appends to `out` at most `max` tokens that may follow `history` (the
    /// prompt, then every emitted token; the last one is not yet in the
    /// target's cache).
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()>;

    /// Told, after each verification, how many of the `drafted` tokens the
    /// target accepted (adapts the draft length).
    fn observe(&mut self, drafted: usize, accepted: usize);

    /// Whether the source drafts from the target's hidden states (an MTP
    /// block): then the generation loop passes them to [`Drafter::hidden`]
    /// after every forward of the target.
    fn wants_hidden(&self) -> bool {
        false
    }

    /// The target's output-normed hidden states (`[n][n_embd]`,
    /// [`Model::step_hidden`]) of the positions `from .. from + n` it kept;
    /// they replace whatever was given for positions from `from` on.
    fn hidden(&mut self, _from: usize, _rows: &[f32]) {}
}

/// Counters of a speculative generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Target forwards that verified at least one draft token.
    pub verify_steps: u64,
    /// Draft tokens proposed.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
}

impl SpecStats {
    /// Accepted / drafted (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
    /// Adds `o`'s counters.
    pub fn add(&mut self, o: &SpecStats) {
        self.verify_steps += o.verify_steps;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
    }
}

/// The adaptive draft length every source shares: doubles after a fully
/// accepted draft (up to `max`), becomes `accepted + 1` after a partly
/// accepted one, halves (down to 1) after a rejected first token. Where
/// drafts keep failing even at length 1 (open chat under n-gram lookup), a
/// check of two rows still costs more than one, so the source pauses: after
/// the `m`-th such miss in a row it proposes nothing for `2^min(m, 6)`
/// steps (2, 4, …, then 64), and any accepted token ends the streak.
/// Pauses up to 64 steps are what keep open chat from running slower than
/// plain decoding, where no pauses or pauses up to 16 steps did not, with
/// the gains on edits and summaries kept (`bench/spec.sh`; figures:
/// docs/perf-history/kernels.md).
#[derive(Clone, Copy, Debug)]
pub struct DraftLength {
    k: usize,
    max: usize,
    /// Drafts of length 1 rejected in a row.
    misses: u32,
    /// Steps left in the current pause.
    pause: u32,
}

/// The longest pause is `2^MAX_PAUSE_LOG2` steps.
const MAX_PAUSE_LOG2: u32 = 6;

impl DraftLength {
    /// Starts at `start`, never above `max` (both at least 1).
    pub fn new(start: usize, max: usize) -> Self {
        let max = max.max(1);
        DraftLength {
            k: start.clamp(1, max),
            max,
            misses: 0,
            pause: 0,
        }
    }
    /// The current length (0 while paused), for the step about to run: a
    /// source calls this once per step it could draft in.
    pub fn for_step(&mut self) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.k
    }
    /// Adapts to one verification's outcome.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        if accepted == 0 && self.k == 1 {
            self.misses = self.misses.saturating_add(1);
            self.pause = 1 << self.misses.min(MAX_PAUSE_LOG2);
        } else if accepted > 0 {
            self.misses = 0;
        }
        self.k = if accepted == drafted {
            (self.k * 2).min(self.max)
        } else if accepted == 0 {
            (self.k / 2).max(1)
        } else {
            (accepted + 1).min(self.max)
        };
    }
}

/// Prompt lookup: the tokens that followed the most recent earlier
/// occurrence of the text's last `n` tokens (longest `n` first, from
/// `max_n` down to `min_n`), anywhere in the prompt or the generated text.
/// No extra weights; drafts well where the answer quotes its input (code
/// edits, summaries, extraction), proposes nothing in open chat.
#[derive(Clone, Debug)]
pub struct NgramDrafter {
    min_n: usize,
    max_n: usize,
    len: DraftLength,
}

/// Default longest draft of every source: a check then runs 1 + 7 = 8 rows,
/// the widest tile the decode kernels keep in registers (`rows16`'s `VT`).
/// On a model larger than the cache a forward of 8 rows costs little more
/// than one row, and a 9th row nearly doubles it; on a model that fits in
/// the cache rows cost compute, not bandwidth, and every row counts
/// (`examples/spec_probe`; figures: docs/perf-history/kernels.md).
pub const DEFAULT_MAX_DRAFT: usize = 7;

/// The n-gram lengths prompt lookup matches by default, longest first. Up
/// to 8 tokens, not 4: in source code short n-grams recur (`self.`, `) {`),
/// and the most recent 4-token match is often the wrong place to copy
/// from. Chosen by replaying the greedy answers of `bench/data/spec`
/// through drafter variants (`bench/spec_replay.py`), then measured with
/// `bench/spec.sh`: edits faster, summaries and chat unchanged. Matching
/// single tokens too replays better on summaries but costs the edits
/// (figures: docs/perf-history/kernels.md).
pub const NGRAM_MIN: usize = 2;
/// See [`NGRAM_MIN`].
pub const NGRAM_MAX: usize = 8;

impl Default for NgramDrafter {
    fn default() -> Self {
        NgramDrafter::with_max_draft(DEFAULT_MAX_DRAFT)
    }
}

impl NgramDrafter {
    /// Matches suffixes of `min_n ..= max_n` tokens (`min_n ≥ 1`); drafts at
    /// most `max_draft` tokens.
    pub fn new(min_n: usize, max_n: usize, max_draft: usize) -> Self {
        let min_n = min_n.max(1);
        NgramDrafter {
            min_n,
            max_n: max_n.max(min_n),
            len: DraftLength::new(4, max_draft),
        }
    }

    /// The default n-gram lengths ([`NGRAM_MIN`] to [`NGRAM_MAX`]), drafting
    /// at most `max_draft` tokens.
    pub fn with_max_draft(max_draft: usize) -> Self {
        NgramDrafter::new(NGRAM_MIN, NGRAM_MAX, max_draft)
    }
}

/// The start of the continuation after the most recent earlier occurrence
/// of the longest suffix of `history` of `min_n ..= max_n` tokens that
/// occurs earlier (the longest first; among equally long ones the most
/// recent), if any: one backward scan, each candidate end compared for at
/// most `max_n` tokens.
fn lookup(history: &[u32], min_n: usize, max_n: usize) -> Option<usize> {
    let len = history.len();
    let last = *history.last()?;
    let mut best: Option<(usize, usize)> = None;
    // An occurrence ending at `e` (inclusive, e + 1 < len) has a continuation.
    for e in (0..len - 1).rev() {
        if history[e] != last {
            continue;
        }
        let m = (0..max_n.min(e + 1))
            .take_while(|&j| history[e - j] == history[len - 1 - j])
            .count();
        if m >= min_n && best.is_none_or(|(bm, _)| m > bm) {
            best = Some((m, e + 1));
            if m == max_n {
                break;
            }
        }
    }
    best.map(|(_, at)| at)
}

impl Drafter for NgramDrafter {
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        let k = self.len.for_step().min(max);
        if k == 0 {
            return Ok(());
        }
        if let Some(at) = lookup(history, self.min_n, self.max_n) {
            out.extend(history[at..].iter().take(k));
        }
        Ok(())
    }

    fn observe(&mut self, drafted: usize, accepted: usize) {
        self.len.observe(drafted, accepted);
    }
}

/// A smaller model with the same vocabulary drafting greedily (its argmax),
/// stopping early where its top probability falls below `p_min`. Its KV
/// cache follows the target's text: each call keeps the common prefix of
/// what it has seen and the history, and runs only the rest.
pub struct ModelDrafter<'m, 'w> {
    model: &'m Model<'w>,
    state: State,
    /// Tokens in `state`'s cache, in order.
    seen: Vec<u32>,
    len: DraftLength,
    p_min: f32,
}

impl std::fmt::Debug for ModelDrafter<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelDrafter")
            .field("seen", &self.seen.len())
            .field("len", &self.len)
            .field("p_min", &self.p_min)
            .finish()
    }
}

/// Default [`ModelDrafter`] confidence threshold (llama.cpp's `--draft-p-min`
/// default is 0.75 for its greedy drafts; 0.5 drafts more).
pub const DEFAULT_P_MIN: f32 = 0.5;

impl<'m, 'w> ModelDrafter<'m, 'w> {
    /// A drafter over `model` with a cache of `n_ctx` positions (the
    /// target's). Fails if the vocabularies differ in size (the caller
    /// checks that the tokenizers are the same).
    pub fn new(model: &'m Model<'w>, n_ctx: usize, max_draft: usize, p_min: f32) -> Self {
        ModelDrafter {
            model,
            state: model.new_state(n_ctx),
            seen: Vec::new(),
            len: DraftLength::new(4, max_draft),
            p_min,
        }
    }
}

/// The argmax of `logits` when its softmax probability is at least
/// `p_min` (how both model-based sources decide to go on drafting).
fn confident(logits: &[f32], p_min: f32) -> Option<u32> {
    let best = argmax(logits);
    let m = logits[best as usize];
    let s: f32 = logits.iter().map(|&v| (v - m).exp()).sum();
    // Only a probability below `p_min` stops drafting (a NaN does not).
    if 1.0 / s < p_min {
        None
    } else {
        Some(best)
    }
}

impl Drafter for ModelDrafter<'_, '_> {
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        let k = self.len.for_step().min(max);
        if k == 0 || history.is_empty() {
            return Ok(());
        }
        // Room in the draft's cache for the history and k - 1 drafts.
        let n_ctx = self.state.n_ctx();
        if history.len() + k > n_ctx {
            return Ok(());
        }
        let common = self
            .seen
            .iter()
            .zip(history)
            .take_while(|(a, b)| a == b)
            .count()
            // At least the last token runs, so its logits are fresh.
            .min(history.len() - 1);
        self.state.truncate(common);
        self.seen.truncate(common);
        self.model
            .forward(&mut self.state, &history[common..], Logits::Last)?;
        self.seen.extend_from_slice(&history[common..]);
        for i in 0..k {
            let Some(t) = confident(self.state.logits(), self.p_min) else {
                break;
            };
            out.push(t);
            if i + 1 < k {
                self.model.forward(&mut self.state, &[t], Logits::Last)?;
                self.seen.push(t);
            }
        }
        Ok(())
    }

    fn observe(&mut self, drafted: usize, accepted: usize) {
        self.len.observe(drafted, accepted);
    }
}

/// Drafts with the target's own multi-token-prediction block ([`Mtp`]):
/// greedily, from the trunk's hidden states, chaining the block's own
/// output for drafts past the first; stops early where its top probability
/// falls below `p_min`. The block's cache entry `p` is the pair
/// `(h_p, x_{p+1})`; it follows the text (a changed token or hidden state
/// drops the entries from there on) and drafted entries are dropped after
/// each call.
pub struct MtpDrafter<'m, 'w> {
    mtp: &'m Mtp<'w>,
    state: State,
    /// The token `x_{p+1}` of each entry `p` in `state`'s cache.
    seen: Vec<u32>,
    /// `[known][n_embd]` the trunk's hidden states by position.
    hidden: Vec<f32>,
    /// Positions of `hidden` that are valid.
    known: usize,
    len: DraftLength,
    p_min: f32,
}

impl std::fmt::Debug for MtpDrafter<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MtpDrafter")
            .field("seen", &self.seen.len())
            .field("known", &self.known)
            .field("len", &self.len)
            .field("p_min", &self.p_min)
            .finish()
    }
}

impl<'m, 'w> MtpDrafter<'m, 'w> {
    /// A drafter over `mtp` with a cache of `n_ctx` pairs (the target's
    /// context).
    pub fn new(mtp: &'m Mtp<'w>, n_ctx: usize, max_draft: usize, p_min: f32) -> Self {
        MtpDrafter {
            mtp,
            state: mtp.new_state(n_ctx),
            seen: Vec::new(),
            hidden: Vec::new(),
            known: 0,
            len: DraftLength::new(4, max_draft),
            p_min,
        }
    }
}

impl Drafter for MtpDrafter<'_, '_> {
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        let k = self.len.for_step().min(max);
        // The target holds positions 0 .. h; history[h] is the token after.
        let Some(h) = history.len().checked_sub(1) else {
            return Ok(());
        };
        if k == 0 || h == 0 || self.known < h || h + k > self.state.n_ctx() {
            return Ok(());
        }
        let d = self.mtp.model().config.n_embd;
        // Entries whose token still matches the text (their hidden states
        // are current: `hidden` truncates them when it replaces a row).
        let common = self
            .seen
            .iter()
            .zip(&history[1..])
            .take_while(|(a, b)| a == b)
            .count()
            .min(h - 1);
        self.state.truncate(common);
        self.seen.truncate(common);
        let toks = &history[common + 1..=h];
        self.mtp.forward(
            &mut self.state,
            toks,
            &self.hidden[common * d..h * d],
            Logits::Last,
        )?;
        self.seen.extend_from_slice(toks);
        // Rows of the last forward.
        let mut rows = toks.len();
        for i in 0..k {
            let Some(t) = confident(self.state.logits(), self.p_min) else {
                break;
            };
            out.push(t);
            if i + 1 < k {
                let g = self.mtp.output_normed(&self.state, rows - 1);
                self.mtp.forward(&mut self.state, &[t], &g, Logits::Last)?;
                rows = 1;
            }
        }
        // Drafted entries stand on guessed hidden states: drop them.
        self.state.truncate(h);
        Ok(())
    }

    fn observe(&mut self, drafted: usize, accepted: usize) {
        self.len.observe(drafted, accepted);
    }

    fn wants_hidden(&self) -> bool {
        true
    }

    fn hidden(&mut self, from: usize, rows: &[f32]) {
        let d = self.mtp.model().config.n_embd;
        let n = rows.len() / d;
        // A gap (positions before `from` never given): start over. Else the
        // entries from `from` on were made from the replaced states.
        let gap = from > self.known;
        let keep = if gap { 0 } else { from };
        self.state.truncate(self.seen.len().min(keep));
        self.seen.truncate(keep);
        if gap {
            self.known = 0;
            return;
        }
        self.hidden.resize((from + n) * d, 0.0);
        self.hidden[from * d..].copy_from_slice(&rows[..n * d]);
        self.known = from + n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_proposes_the_most_recent_continuation_longest_match_first() {
        let mut d = NgramDrafter::new(1, 3, 8);
        let mut out = Vec::new();
        // "1 2 3 9 … 2 3 7 … 1 2 3": the 3-gram [1 2 3] matched at 0 → [9 …].
        let h = [1, 2, 3, 9, 8, 2, 3, 7, 6, 1, 2, 3];
        d.draft(&h, 3, &mut out).unwrap();
        assert_eq!(out, [9, 8, 2]);
        // Only the 2-gram [2 3] recurs: its latest occurrence (at 5) → [7 6 1].
        out.clear();
        let h = [1, 2, 3, 9, 8, 2, 3, 7, 6, 5, 2, 3];
        d.draft(&h, 3, &mut out).unwrap();
        assert_eq!(out, [7, 6, 5]);
        // Nothing recurs: no draft.
        out.clear();
        d.draft(&[1, 2, 3, 4], 3, &mut out).unwrap();
        assert!(out.is_empty());
        // The budget caps the draft.
        out.clear();
        d.draft(&[5, 6, 7, 8, 5], 1, &mut out).unwrap();
        assert_eq!(out, [6]);
    }

    #[test]
    fn ngram_prefers_an_older_longer_match_to_a_recent_shorter_one() {
        let mut d = NgramDrafter::default();
        let mut out = Vec::new();
        // The suffix [4 5 6 7 8 1 2] occurs whole at 0 (→ 40), and its last
        // two tokens [1 2] again at 9 (→ 90): copy from the longer match.
        let h = [
            4, 5, 6, 7, 8, 1, 2, 40, 41, 1, 2, 90, 91, 4, 5, 6, 7, 8, 1, 2,
        ];
        d.draft(&h, 2, &mut out).unwrap();
        assert_eq!(out, [40, 41]);
        // Matches longer than NGRAM_MAX count as NGRAM_MAX long: the most
        // recent of two full-length matches wins.
        out.clear();
        let run: Vec<u32> = (1..=NGRAM_MAX as u32 + 2).collect();
        let mut h = run.clone();
        h.push(50);
        h.extend(&run[2..]);
        h.push(60);
        h.extend(&run);
        d.draft(&h, 1, &mut out).unwrap();
        assert_eq!(out, [60]);
        // Below NGRAM_MIN tokens nothing is drafted.
        out.clear();
        d.draft(&[1, 2, 3, 7, 9, 3], 2, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn draft_length_adapts() {
        let mut l = DraftLength::new(4, 8);
        assert_eq!(l.for_step(), 4);
        l.observe(4, 4);
        assert_eq!(l.for_step(), 8);
        l.observe(8, 8);
        assert_eq!(l.for_step(), 8);
        l.observe(8, 2);
        assert_eq!(l.for_step(), 3);
        l.observe(3, 0);
        assert_eq!(l.for_step(), 1);
        l.observe(0, 0);
        assert_eq!(l.for_step(), 1);
    }

    #[test]
    fn drafts_that_keep_failing_at_length_one_pause_longer_each_time() {
        let mut l = DraftLength::new(1, 8);
        // Misses 1 to 7: pauses of 2, 4, …, 64, then 64 again.
        for pause in [2, 4, 8, 16, 32, 64, 64] {
            assert_eq!(l.for_step(), 1);
            l.observe(1, 0);
            for _ in 0..pause {
                assert_eq!(l.for_step(), 0);
            }
        }
        // An accepted token ends the streak: the next miss pauses 2 steps.
        assert_eq!(l.for_step(), 1);
        l.observe(1, 1);
        assert_eq!(l.for_step(), 2);
        l.observe(2, 0);
        assert_eq!(l.for_step(), 1);
        l.observe(1, 0);
        assert_eq!((l.for_step(), l.for_step(), l.for_step()), (0, 0, 1));
        // The second miss in a row pauses 4 steps; a partly accepted draft
        // ends the streak too.
        l.observe(1, 0);
        assert_eq!(
            (l.for_step(), l.for_step(), l.for_step(), l.for_step()),
            (0, 0, 0, 0)
        );
        assert_eq!(l.for_step(), 1);
        l.observe(3, 1);
        assert_eq!(l.for_step(), 2);
        l.observe(2, 0);
        assert_eq!(l.for_step(), 1);
        l.observe(1, 0);
        assert_eq!((l.for_step(), l.for_step(), l.for_step()), (0, 0, 1));
    }
}
