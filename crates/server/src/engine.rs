//! The decoding engine: one thread owning N sequence slots, running one
//! batched forward step per token for all of them (continuous batching).
//!
//! Each step, the engine (1) admits queued jobs into free slots, (2) drops
//! jobs whose client went away (their event receiver is closed), (3) builds
//! one batch: one token per decoding slot, plus a chunk of each prefilling
//! slot's prompt (at most `prefill_chunk` prompt tokens per step, so a long
//! prompt delays the others' next token by one bounded step, not by its
//! whole prefill), (4) runs [`Model::forward_batch`] and (5) samples,
//! streams and retires. A job that finishes leaves its slot at once, and a
//! queued job takes it at the next step.
//!
//! Stop strings follow `gpack_runtime::generate`: text that could still be
//! the start of a stop string is held back, and the stop string itself is
//! never sent.
//!
//! A panic or error inside a step fails only the jobs of that step (each
//! gets an error event); the engine resets their slots and keeps serving.

use crate::api::ApiError;
use crate::metrics::Metrics;
use gpack_runtime::{partial_stop, Logits, Model, Scratch, Sequence};
use gpack_runtime::{Drafter, ModelDrafter, NgramDrafter, SpecMode};
use gpack_runtime::{Sampler, SamplerConfig};
use gpack_tokenizer::{StreamDecoder, Tokenizer};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Why a generation ended, as OpenAI names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// A stop token or stop string.
    Stop,
    /// `max_tokens` or the context.
    Length,
}

impl Finish {
    /// `stop` / `length`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// What the engine sends back for a job.
#[derive(Debug)]
pub enum Event {
    /// New text (final: never retracted).
    Text(String),
    /// The end.
    Done {
        /// Why.
        finish: Finish,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens (a stop token is not counted).
        completion_tokens: usize,
    },
    /// The job failed.
    Error(String),
}

/// One generation request, tokenized and validated.
#[derive(Debug)]
pub struct Job {
    /// Prompt token ids (non-empty, shorter than the context).
    pub prompt: Vec<u32>,
    /// Most new tokens.
    pub max_tokens: usize,
    /// Sampling.
    pub sampler: SamplerConfig,
    /// Tokens that end generation (not emitted).
    pub stop_tokens: Vec<u32>,
    /// Strings that end generation (not emitted).
    pub stop_strings: Vec<String>,
    /// Speculative decoding's draft source (`Draft` only when the engine has
    /// a draft model).
    pub spec: SpecMode,
    /// Where events go; closed when the client is gone.
    pub events: UnboundedSender<Event>,
    /// When the request was accepted.
    pub enqueued: Instant,
}

/// The HTTP side's handle: admission control and the job queue.
#[derive(Debug)]
pub struct EngineHandle {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    /// Jobs queued or decoding.
    in_system: Arc<AtomicUsize>,
    /// Slots + queue length.
    capacity: usize,
    /// Set when the server drains: the engine exits once idle.
    shutdown: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    /// Cleared when the engine thread ends, however it ends.
    alive: AtomicBool,
}

/// Clears [`EngineHandle::alive`] when dropped (the thread's end or unwind).
struct AliveGuard(Arc<EngineHandle>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::SeqCst);
    }
}

/// Test hook: `GPACK_TEST_PANIC_AT_STEP=N` makes the N-th batched step
/// (counted from 1) panic inside the model call, to exercise the per-step
/// isolation from outside the process (`tests/serve.rs`).
fn injected_panic_step() -> Option<u64> {
    std::env::var("GPACK_TEST_PANIC_AT_STEP").ok()?.parse().ok()
}

impl EngineHandle {
    /// Whether the decoding thread is still running.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Queues `job`, or refuses it with 503 when slots and queue are full.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        let prev = self.in_system.fetch_add(1, Ordering::SeqCst);
        if prev >= self.capacity {
            self.in_system.fetch_sub(1, Ordering::SeqCst);
            self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
            let mut e = ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "server_overloaded",
                format!(
                    "the server is busy: all {} sequence slots and queue places are taken; retry later",
                    self.capacity
                ),
            );
            e.retry_after = Some(1);
            return Err(e);
        }
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|tx| tx.send(job).is_ok())
            .unwrap_or(false);
        if !sent {
            self.in_system.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the server is shutting down",
            ));
        }
        Ok(())
    }

    /// Stops accepting jobs; the engine thread exits when the last one ends.
    pub fn close(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Sequence slots decoded together.
    pub parallel: usize,
    /// Positions per slot.
    pub n_ctx: usize,
    /// Queued jobs beyond the slots.
    pub queue: usize,
    /// Prompt tokens per step.
    pub prefill_chunk: usize,
    /// Most tokens drafted per sequence and step.
    pub draft_max: usize,
    /// A draft model's confidence threshold ([`ModelDrafter`]).
    pub draft_p_min: f32,
}

/// Rows of a step's decoding sequences with their drafts, at most: each
/// decoding sequence may draft `(STEP_DRAFT_ROWS - decoding) / decoding`
/// tokens (a lone stream up to its draft length, 2 streams 7 each, 8 streams
/// 1 each), so a full batch, which already reads each weight once for many
/// rows, spends little compute on drafts that may be rejected.
pub const STEP_DRAFT_ROWS: usize = 16;

struct Active {
    job: Job,
    fed: usize,
    sampler: Sampler,
    history: Vec<u32>,
    decoder: StreamDecoder<'static>,
    text: String,
    emitted: usize,
    n_gen: usize,
    next: u32,
    first_at: Option<Instant>,
    ngram: NgramDrafter,
}

/// Starts the engine thread. Returns the handle and the thread.
pub fn start(
    model: &'static Model<'static>,
    draft: Option<&'static Model<'static>>,
    tok: Tokenizer<'static>,
    cfg: EngineConfig,
    metrics: Arc<Metrics>,
) -> (Arc<EngineHandle>, std::thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let handle = Arc::new(EngineHandle {
        tx: Mutex::new(Some(tx)),
        in_system: Arc::new(AtomicUsize::new(0)),
        capacity: cfg.parallel + cfg.queue,
        shutdown: Arc::new(AtomicBool::new(false)),
        metrics: metrics.clone(),
        alive: AtomicBool::new(true),
    });
    let h = handle.clone();
    let thread = std::thread::Builder::new()
        .name("gpack-engine".into())
        .spawn(move || {
            let _alive = AliveGuard(h.clone());
            Engine::new(model, draft, tok, cfg, metrics, h).run(rx)
        })
        .expect("spawning the engine thread");
    (handle, thread)
}

struct Engine {
    model: &'static Model<'static>,
    tok: Tokenizer<'static>,
    cfg: EngineConfig,
    metrics: Arc<Metrics>,
    handle: Arc<EngineHandle>,
    slots: Vec<Option<Active>>,
    seqs: Vec<Sequence>,
    /// Per slot: the tokens whose keys and values its sequence holds
    /// (`cached[i].len() == seqs[i].pos()`), kept after a job leaves so the
    /// next job with the same prefix (a chat's next turn, a repeated system
    /// prompt) skips that part of its prefill.
    cached: Vec<Vec<u32>>,
    scratch: Scratch,
    /// Per slot: the draft model's drafter (its own cache follows the slot's
    /// text, and like `cached` outlives a job), when there is a draft model.
    drafters: Vec<Option<ModelDrafter<'static, 'static>>>,
    /// Batched steps run so far, and the one that panics on purpose
    /// ([`injected_panic_step`]).
    steps: u64,
    panic_at: Option<u64>,
}

impl Engine {
    fn new(
        model: &'static Model<'static>,
        draft: Option<&'static Model<'static>>,
        tok: Tokenizer<'static>,
        cfg: EngineConfig,
        metrics: Arc<Metrics>,
        handle: Arc<EngineHandle>,
    ) -> Self {
        let seqs = (0..cfg.parallel)
            .map(|_| model.new_sequence(cfg.n_ctx))
            .collect();
        Engine {
            model,
            tok,
            slots: (0..cfg.parallel).map(|_| None).collect(),
            seqs,
            cached: vec![Vec::new(); cfg.parallel],
            drafters: (0..cfg.parallel)
                .map(|_| {
                    draft.map(|d| ModelDrafter::new(d, cfg.n_ctx, cfg.draft_max, cfg.draft_p_min))
                })
                .collect(),
            cfg,
            metrics,
            handle,
            scratch: Scratch::default(),
            steps: 0,
            panic_at: injected_panic_step(),
        }
    }

    /// Puts `job` in the free slot whose cache shares the longest prefix
    /// with its prompt; that prefix is kept (its prefill skipped: the keys
    /// and values of the same tokens at the same positions are the same
    /// bits), all but the prompt's last token at most, whose logits are
    /// needed.
    fn place(&mut self, job: Job) {
        let lcp = |c: &[u32]| {
            c.iter()
                .zip(&job.prompt)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let Some((i, shared)) = (0..self.slots.len())
            .filter(|&i| self.slots[i].is_none())
            .map(|i| (i, lcp(&self.cached[i])))
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
        else {
            return;
        };
        let keep = shared.min(job.prompt.len().saturating_sub(1));
        self.seqs[i].truncate(keep);
        self.cached[i].truncate(keep);
        self.metrics
            .prompt_tokens
            .fetch_add(job.prompt.len() as u64, Ordering::Relaxed);
        self.metrics
            .prompt_tokens_cached
            .fetch_add(keep as u64, Ordering::Relaxed);
        self.slots[i] = Some(Active {
            ngram: NgramDrafter::new(2, 4, self.cfg.draft_max),
            sampler: Sampler::new(job.sampler.clone()),
            history: job.prompt.clone(),
            decoder: self.tok.stream_decoder(),
            job,
            fed: keep,
            text: String::new(),
            emitted: 0,
            n_gen: 0,
            next: 0,
            first_at: None,
        });
    }

    fn n_active(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn update_gauges(&self) {
        let active = self.n_active();
        let total = self.handle.in_system.load(Ordering::SeqCst);
        self.metrics.active.store(active as u64, Ordering::Relaxed);
        self.metrics
            .queue_depth
            .store(total.saturating_sub(active) as u64, Ordering::Relaxed);
    }

    /// Frees slot `i`, sending `ev` (if the client still listens).
    fn retire(&mut self, i: usize, ev: Option<Event>) {
        if let Some(a) = self.slots[i].take() {
            if let Some(ev) = ev {
                let _ = a.job.events.send(ev);
            }
            if let Some(first) = a.first_at {
                if a.n_gen > 1 {
                    let dt = first.elapsed().as_secs_f64().max(1e-9);
                    self.metrics.tps.observe((a.n_gen - 1) as f64 / dt);
                }
            }
            self.handle.in_system.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn finish(&mut self, i: usize, finish: Finish) {
        let Some(a) = self.slots[i].as_mut() else {
            return;
        };
        // Text held back as a possible stop-string prefix is final now.
        if a.emitted < a.text.len() {
            let rest = a.text[a.emitted..].to_string();
            a.emitted = a.text.len();
            let _ = a.job.events.send(Event::Text(rest));
        }
        let ev = Event::Done {
            finish,
            prompt_tokens: a.job.prompt.len(),
            completion_tokens: a.n_gen,
        };
        self.retire(i, Some(ev));
    }

    fn run(mut self, rx: mpsc::Receiver<Job>) {
        loop {
            if self.n_active() == 0 {
                self.update_gauges();
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(job) => self.place(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if self.handle.shutdown.load(Ordering::SeqCst) {
                            return;
                        }
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
            while self.slots.iter().any(Option::is_none) {
                match rx.try_recv() {
                    Ok(job) => self.place(job),
                    Err(_) => break,
                }
            }
            for i in 0..self.slots.len() {
                if self.slots[i]
                    .as_ref()
                    .is_some_and(|a| a.job.events.is_closed())
                {
                    self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                    self.retire(i, None);
                }
            }
            self.update_gauges();
            self.step();
        }
    }

    /// One batched forward over every active slot, then sampling. A
    /// decoding slot with speculation runs its next token and a draft, all
    /// of whose rows are sampled in order while the draft agrees (the rule in
    /// `gpack_runtime::spec`: the tokens are those of plain decoding).
    fn step(&mut self) {
        let mut idx = Vec::new();
        let mut toks: Vec<u32> = Vec::new();
        let mut lens = Vec::new();
        let mut wants = Vec::new();
        let mut budget = self.cfg.prefill_chunk.max(1);
        let decoding = self
            .slots
            .iter()
            .flatten()
            .filter(|a| a.fed >= a.job.prompt.len())
            .count();
        // Each decoding slot may draft an equal share of the step's rows.
        let draft_share = STEP_DRAFT_ROWS.saturating_sub(decoding) / decoding.max(1);
        let mut draft = Vec::new();
        for i in 0..self.slots.len() {
            let Some(a) = self.slots[i].as_mut() else {
                continue;
            };
            let p = &a.job.prompt;
            if a.fed < p.len() {
                if budget == 0 {
                    continue;
                }
                let k = (p.len() - a.fed).min(budget);
                budget -= k;
                toks.extend_from_slice(&p[a.fed..a.fed + k]);
                lens.push(k);
                wants.push(if a.fed + k == p.len() {
                    Logits::Last
                } else {
                    Logits::None
                });
            } else {
                // k drafts give k + 1 rows: each may emit a token and needs
                // a cache position.
                let room = (a.job.max_tokens - a.n_gen)
                    .min(self.cfg.n_ctx - self.seqs[i].pos())
                    .saturating_sub(1)
                    .min(draft_share);
                draft.clear();
                if room > 0 {
                    let d: Option<&mut dyn Drafter> = match a.job.spec {
                        SpecMode::None => None,
                        SpecMode::Ngram => Some(&mut a.ngram),
                        SpecMode::Draft => self.drafters[i].as_mut().map(|d| d as &mut dyn Drafter),
                    };
                    if let Some(d) = d {
                        // A failed draft only costs the speculation.
                        if let Err(e) = d.draft(&a.history, room, &mut draft) {
                            log::warn!("drafting failed: {}", crate::load::chain(&e));
                            draft.clear();
                        }
                        let n_vocab = self.model.config.n_vocab;
                        let valid = draft.iter().take_while(|&&t| (t as usize) < n_vocab);
                        let keep = valid.count().min(room);
                        draft.truncate(keep);
                    }
                }
                toks.push(a.next);
                toks.extend_from_slice(&draft);
                lens.push(1 + draft.len());
                wants.push(if draft.is_empty() {
                    Logits::Last
                } else {
                    Logits::All
                });
            }
            idx.push(i);
        }
        if idx.is_empty() {
            return;
        }
        let mut slices = Vec::with_capacity(lens.len());
        let mut off = 0;
        for &l in &lens {
            slices.push(&toks[off..off + l]);
            off += l;
        }
        let model = self.model;
        let scratch = &mut self.scratch;
        let mut refs: Vec<&mut Sequence> = self
            .seqs
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| idx.contains(i))
            .map(|(_, s)| s)
            .collect();
        self.steps += 1;
        let inject = self.panic_at == Some(self.steps);
        let res = catch_unwind(AssertUnwindSafe(|| {
            if inject {
                panic!("injected fault (GPACK_TEST_PANIC_AT_STEP)");
            }
            model
                .forward_batch_rows(scratch, &mut refs, &slices, &wants)
                .map(|_| ())
        }));
        drop(refs);
        self.metrics.steps.fetch_add(1, Ordering::Relaxed);
        let err = match res {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(crate::load::chain(&e)),
            Err(_) => Some("internal error: the decoding step panicked".to_string()),
        };
        if let Some(msg) = err {
            log::error!("batched step failed: {msg}");
            self.scratch = Scratch::default();
            for &i in &idx {
                self.seqs[i].reset();
                self.cached[i].clear();
                self.retire(i, Some(Event::Error(msg.clone())));
            }
            return;
        }
        let mut off = 0;
        for (j, &i) in idx.iter().enumerate() {
            self.cached[i].extend_from_slice(&toks[off..off + lens[j]]);
            off += lens[j];
            debug_assert_eq!(self.cached[i].len(), self.seqs[i].pos());
        }
        let n_vocab = self.model.config.n_vocab;
        let mut k = 0;
        let mut off = 0;
        for (j, &i) in idx.iter().enumerate() {
            let a = self.slots[i].as_mut().expect("active slot");
            let start = off;
            off += lens[j];
            let decoding = a.fed >= a.job.prompt.len();
            a.fed = (a.fed + lens[j]).min(a.job.prompt.len());
            let rows = match wants[j] {
                Logits::None => continue,
                Logits::Last => 1,
                Logits::All => lens[j],
            };
            // Position before this step's tokens (decoding slots), so that
            // row r is sampled as plain decoding would at `base + r + 1`.
            let end = self.seqs[i].pos();
            let base = end - lens[j];
            let mut used = rows;
            let mut accepted = 0;
            for r in 0..rows {
                let row = &self.scratch.logits()[(k + r) * n_vocab..(k + r + 1) * n_vocab];
                let pos = if decoding { base + r + 1 } else { end };
                let Some(a) = self.slots[i].as_mut() else {
                    break;
                };
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    Self::on_logits(a, row, &self.metrics, pos, self.cfg.n_ctx)
                }));
                match outcome {
                    Ok(None) => {
                        if r + 1 < rows && a.next == toks[start + r + 1] {
                            accepted += 1;
                            continue;
                        }
                    }
                    Ok(Some(f)) => self.finish(i, f),
                    Err(_) => self.retire(
                        i,
                        Some(Event::Error("internal error: sampling panicked".into())),
                    ),
                }
                used = r + 1;
                break;
            }
            k += rows;
            if rows > 1 {
                self.metrics
                    .spec_drafted
                    .fetch_add((rows - 1) as u64, Ordering::Relaxed);
                self.metrics
                    .spec_accepted
                    .fetch_add(accepted as u64, Ordering::Relaxed);
                if let Some(a) = self.slots[i].as_mut() {
                    match a.job.spec {
                        SpecMode::Ngram => a.ngram.observe(rows - 1, accepted),
                        SpecMode::Draft => {
                            if let Some(d) = self.drafters[i].as_mut() {
                                d.observe(rows - 1, accepted);
                            }
                        }
                        SpecMode::None => {}
                    }
                }
                // Keep the token and its accepted drafts: the cache of plain
                // decoding at this point.
                self.seqs[i].truncate(base + used);
                self.cached[i].truncate(base + used);
            }
        }
    }

    /// Samples one token for `a`; returns how it ended, if it did.
    fn on_logits(
        a: &mut Active,
        logits: &[f32],
        metrics: &Metrics,
        pos: usize,
        n_ctx: usize,
    ) -> Option<Finish> {
        let tok = a.sampler.sample(logits, &a.history);
        let now = Instant::now();
        if a.first_at.is_none() {
            a.first_at = Some(now);
            metrics.ttft.observe((now - a.job.enqueued).as_secs_f64());
        }
        if a.job.stop_tokens.contains(&tok) {
            return Some(Finish::Stop);
        }
        a.n_gen += 1;
        metrics.generated_tokens.fetch_add(1, Ordering::Relaxed);
        a.history.push(tok);
        let piece = a.decoder.push(tok);
        a.text.push_str(&piece);
        let stops = &a.job.stop_strings;
        if let Some(pos) = stops
            .iter()
            .filter_map(|s| a.text[a.emitted..].find(s.as_str()).map(|p| a.emitted + p))
            .min()
        {
            if pos > a.emitted {
                let _ = a
                    .job
                    .events
                    .send(Event::Text(a.text[a.emitted..pos].to_string()));
            }
            a.text.truncate(pos);
            a.emitted = pos;
            return Some(Finish::Stop);
        }
        let hold = partial_stop(&a.text[a.emitted..], stops);
        let upto = a.text.len() - hold;
        if upto > a.emitted {
            let _ = a
                .job
                .events
                .send(Event::Text(a.text[a.emitted..upto].to_string()));
            a.emitted = upto;
        }
        if a.n_gen >= a.job.max_tokens || pos >= n_ctx {
            return Some(Finish::Length);
        }
        a.next = tok;
        None
    }
}

#[cfg(test)]
mod tests {
    use gpack_runtime::partial_stop;

    #[test]
    fn partial_stop_holds_a_stop_prefix() {
        let stops = vec!["<|im_end|>".to_string(), "\n\n".to_string()];
        assert_eq!(partial_stop("hello <|im", &stops), 4);
        assert_eq!(partial_stop("hello\n", &stops), 1);
        assert_eq!(partial_stop("hello", &stops), 0);
    }
}
