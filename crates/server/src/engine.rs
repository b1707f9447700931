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
//! Every token decision (sampling, penalties, grammar masks,
//! log-probabilities, stop tokens and strings, speculative acceptance) is
//! the runtime's decoding slot's ([`gpack_runtime::Slot`]), the one
//! `gpack run` and Python drive: the engine only schedules and batches
//! slots.
//!
//! A panic or error inside a step fails only the jobs of that step (each
//! gets an error event); the engine resets their slots and keeps serving.
//!
//! A constrained job (`response_format`, `grammar`:
//! [`gpack_runtime::decode::Grammars`])
//! samples from logits masked by its grammar. The masks a step needs are
//! computed on a thread beside the batched forward pass (the mask for the
//! token sampled after this step depends only on the tokens committed
//! before it), so the other slots wait for a mask only by the time it takes
//! beyond the forward pass — when the runtime's pool leaves a core for that
//! thread (`serve --threads` below the cores). When the pool has every core
//! (its workers spin between jobs, and a thread among them stalls the
//! whole step), the masks are computed right after the forward pass, one
//! slot per task of that pool. A greedy slot's mask is not computed during
//! the step at all: sampling asks the grammar about the model's own token
//! and computes the mask only when the grammar refuses it or forces bytes
//! (the same tokens: the slot's `pick`). That wait and each mask's time
//! are in the metrics.

use crate::api::ApiError;
use crate::metrics::Metrics;
use gpack_runtime::decode::{Guide, SimpleVob, Slot, StopReason};
use gpack_runtime::{Drafter, ModelDrafter, Mtp, MtpDrafter, NgramDrafter, SpecMode};
use gpack_runtime::{GenerateConfig, Logits, Model, Scratch, Sequence, KB};
use gpack_tokenizer::Tokenizer;
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
    /// How a slot's [`StopReason`] ends a request.
    pub fn of(r: &StopReason) -> Finish {
        if r.is_length() {
            Finish::Length
        } else {
            Finish::Stop
        }
    }

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
    /// What a reply gained (jobs with [`Job::reply`]), in place of
    /// [`Event::Text`]; the last one, before [`Event::Done`], may say the
    /// reply is tool calls.
    Reply(gpack_runtime::decode::ReplyDelta),
    /// A generated token's log-probability (jobs that ask), sent before the
    /// text it adds.
    Logprob(crate::logprobs::TokenLogprob),
    /// The end.
    Done {
        /// Why.
        finish: Finish,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens (a stop token is not counted).
        completion_tokens: usize,
        /// Prompt tokens whose keys and values were reused, not computed.
        cached_tokens: usize,
    },
    /// The job failed.
    Error(String),
    /// The server stopped the job unfinished: the drain deadline passed
    /// (`--drain-timeout`) while it was still queued or generating.
    Shutdown,
}

/// One generation request, tokenized and validated.
#[derive(Debug)]
pub struct Job {
    /// Prompt token ids (non-empty, shorter than the context).
    pub prompt: Vec<u32>,
    /// The decoding settings: token budget, sampling, penalties, stop
    /// tokens and strings, log-probabilities.
    pub cfg: GenerateConfig,
    /// Speculative decoding's draft source (`Draft` only when the engine has
    /// a draft model).
    pub spec: SpecMode,
    /// Where events go; closed when the client is gone.
    pub events: UnboundedSender<Event>,
    /// When the request was accepted.
    pub enqueued: Instant,
    /// The grammar the output must follow, compiled.
    pub constraint: Option<Box<Guide>>,
    /// Read the output as a reply of this kind (tool calls, harmony
    /// channels): its pieces are sent as [`Event::Reply`], not
    /// [`Event::Text`].
    pub reply: Option<gpack_runtime::decode::ReplyKind>,
}

/// What the engine is asked to do.
#[derive(Debug)]
pub enum Work {
    /// Generate.
    Gen(Job),
    /// Embed.
    Embed(crate::embed::EmbedJob),
}

impl From<Job> for Work {
    fn from(j: Job) -> Work {
        Work::Gen(j)
    }
}

impl From<crate::embed::EmbedJob> for Work {
    fn from(j: crate::embed::EmbedJob) -> Work {
        Work::Embed(j)
    }
}

/// An embedding job: the next input not started yet, and the pooled
/// vectors of those done.
struct Embedding {
    id: u64,
    job: crate::embed::EmbedJob,
    next: usize,
    out: Vec<Option<Vec<f32>>>,
    left: usize,
}

/// One input of an embedding job being run, in a batched step with the
/// other lanes: how far, its pooled sum and its own KV cache.
struct Lane {
    job: u64,
    input: usize,
    fed: usize,
    pool: crate::embed::Pool,
    seq: Sequence,
}

/// Embedding inputs run together in one batched step (of one request or
/// several), sharing the step's `prefill_chunk` tokens.
const EMBED_LANES: usize = 8;

/// The HTTP side's handle: admission control and the job queue.
#[derive(Debug)]
pub struct EngineHandle {
    tx: Mutex<Option<mpsc::Sender<Work>>>,
    /// Jobs queued or decoding, and places admitted for jobs being prepared.
    in_system: Arc<AtomicUsize>,
    /// Slots + queue length.
    capacity: usize,
    /// Set when the server drains: the engine exits once idle.
    shutdown: Arc<AtomicBool>,
    /// Set at the drain deadline: the engine ends every job it holds
    /// ([`Event::Shutdown`]) before its next step and exits.
    abort: AtomicBool,
    metrics: Arc<Metrics>,
    /// Cleared when the engine thread ends, however it ends.
    alive: AtomicBool,
    /// Why the engine stopped for good, when it did because its device
    /// was lost (what `/health` and the refusals after it say).
    failure: Mutex<Option<String>>,
}

/// Places in the engine ([`EngineHandle::admit`]) held for a request
/// between its admission and the submission of its jobs; those not taken
/// by a job are released when it is dropped (a request refused while being
/// prepared, or whose client left).
#[derive(Debug)]
#[must_use = "an admission holds places until its jobs are submitted"]
pub struct Admission {
    in_system: Arc<AtomicUsize>,
    places: usize,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.places > 0 {
            self.in_system.fetch_sub(self.places, Ordering::SeqCst);
        }
    }
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

/// Test hook: `GPACK_TEST_EAGER_MASKS=1` computes every constrained
/// slot's mask during the step, greedy ones included, so that a test can
/// check the lazy path gives the same tokens.
fn eager_masks() -> bool {
    std::env::var_os("GPACK_TEST_EAGER_MASKS").is_some_and(|v| v == "1")
}

/// Test hook: `GPACK_TEST_ENGINE_EXIT_AT_STEP=N` makes the engine thread
/// return instead of running its N-th batched step (counted from 1), as if
/// it had died, to exercise `/health` and the refusals that follow from
/// outside the process (`tests/serve.rs`).
fn injected_exit_step() -> Option<u64> {
    std::env::var("GPACK_TEST_ENGINE_EXIT_AT_STEP")
        .ok()?
        .parse()
        .ok()
}

impl EngineHandle {
    /// Whether the decoding thread is still running.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The refusal of a job the engine cannot take: 503, the server is
    /// shutting down or its decoding thread has stopped.
    pub fn unavailable(&self) -> ApiError {
        let why = match self.failure() {
            Some(f) => format!("the decoding thread has stopped: {f}"),
            None if self.shutdown.load(Ordering::SeqCst) => "the server is shutting down".into(),
            None => "the decoding thread has stopped".into(),
        };
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            why,
        )
    }

    /// Why the engine stopped for good, if its device was lost.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Reserves `n` places (sequence slots or queue places) for a request's
    /// jobs, or refuses it with 503 (`Retry-After`) when they are taken.
    /// Handlers admit a request before tokenizing or rendering it, so a
    /// burst beyond the capacity costs no CPU, and at most `capacity`
    /// requests wait to be prepared. The places are released when the
    /// [`Admission`] is dropped, except those its jobs took
    /// ([`EngineHandle::submit`]).
    pub fn admit(&self, n: usize) -> Result<Admission, ApiError> {
        let prev = self.in_system.fetch_add(n, Ordering::SeqCst);
        if prev + n > self.capacity {
            self.in_system.fetch_sub(n, Ordering::SeqCst);
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
        Ok(Admission {
            in_system: self.in_system.clone(),
            places: n,
        })
    }

    /// Queues `job` (generation or embeddings) in one of the places of
    /// `adm`; a 503 when the engine no longer takes jobs (then the place
    /// is released with `adm`).
    pub fn submit(&self, adm: &mut Admission, job: impl Into<Work>) -> Result<(), ApiError> {
        if adm.places == 0 {
            return Err(ApiError::internal(
                "internal error: a job submitted without an admission",
            ));
        }
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|tx| tx.send(job.into()).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err(self.unavailable());
        }
        // The engine holds the place now, and frees it when the job ends.
        adm.places -= 1;
        Ok(())
    }

    /// Stops accepting jobs; the engine thread exits when the last one ends.
    pub fn close(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Stops accepting jobs and ends those queued or generating: each gets
    /// [`Event::Shutdown`] (an embedding, an error) before the engine's next
    /// step, and the thread exits. Joining it then waits one step at most.
    pub fn abort(&self) {
        // Closed first: a job sent before is in the channel when the engine
        // sees the flag, and none can be sent after.
        self.close();
        self.abort.store(true, Ordering::SeqCst);
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

/// The prefix cache the engine shares between its slots, if any.
pub type Prefix = Option<gpack_runtime::kvcache::PrefixCache>;

/// Rows of a step's decoding sequences with their drafts, at most: each
/// decoding sequence may draft `(STEP_DRAFT_ROWS - decoding) / decoding`
/// tokens (a lone stream up to its draft length, 2 streams 7 each, 8 streams
/// 1 each), so a full batch, which already reads each weight once for many
/// rows, spends little compute on drafts that may be rejected.
pub const STEP_DRAFT_ROWS: usize = 16;

struct Active {
    job: Job,
    /// Prompt tokens in the cache.
    fed: usize,
    /// Prompt tokens reused when the job was placed.
    reused: usize,
    slot: Slot<'static>,
    first_at: Option<Instant>,
    ngram: NgramDrafter,
}

/// Runs once, on the engine thread, after its first output: the first
/// token sampled or the first embedding done.
pub type FirstOutput = Box<dyn FnOnce() + Send>;

/// Starts the engine thread (which calls `first_output`, if given, after
/// its first output). Returns the handle and the thread.
pub fn start(
    model: &'static Model<'static>,
    (draft, mtp): (
        Option<&'static Model<'static>>,
        Option<&'static Mtp<'static>>,
    ),
    tok: Tokenizer<'static>,
    cfg: EngineConfig,
    prefix: Prefix,
    metrics: Arc<Metrics>,
    first_output: Option<FirstOutput>,
) -> (Arc<EngineHandle>, std::thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let handle = Arc::new(EngineHandle {
        tx: Mutex::new(Some(tx)),
        in_system: Arc::new(AtomicUsize::new(0)),
        capacity: cfg.parallel + cfg.queue,
        shutdown: Arc::new(AtomicBool::new(false)),
        abort: AtomicBool::new(false),
        metrics: metrics.clone(),
        alive: AtomicBool::new(true),
        failure: Mutex::new(None),
    });
    let h = handle.clone();
    let thread = std::thread::Builder::new()
        .name("gpack-engine".into())
        .spawn(move || {
            let _alive = AliveGuard(h.clone());
            let mut e = Engine::new(model, (draft, mtp), tok, cfg, metrics, h);
            e.prefix = prefix;
            e.first_output = first_output;
            e.run(rx)
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
    /// Per slot: the leading full blocks of `cached[i]` the prefix cache
    /// holds (published), kept `<= cached[i].len() / KB` by every truncation.
    published: Vec<usize>,
    /// Blocks shared by every slot, in memory and on disk
    /// (`--kv-cache-bytes`, `--kv-cache-dir`).
    prefix: Prefix,
    scratch: Scratch,
    /// Per slot: the draft model's drafter (its own cache follows the slot's
    /// text, and like `cached` outlives a job), when there is a draft model.
    drafters: Vec<Option<ModelDrafter<'static, 'static>>>,
    /// Per slot: the drafter of the model's MTP block, when it has one. It
    /// is handed the trunk's hidden states of every position the slot keeps
    /// (whatever the job's mode), so it follows the slot's text as `cached`
    /// does.
    mtps: Vec<Option<MtpDrafter<'static, 'static>>>,
    /// Embedding jobs, first in first out, and the sequence they run in.
    embeds: std::collections::VecDeque<Embedding>,
    lanes: Vec<Lane>,
    embed_scratch: Scratch,
    embed_ids: u64,
    /// Compute grammar masks on a thread beside the forward pass (when a
    /// core is left over by the runtime's pool), else after it on this one.
    masks_beside: bool,
    /// [`eager_masks`]: no lazy masks (a test hook).
    eager_masks: bool,
    /// Batched steps run so far, and the one that panics on purpose
    /// ([`injected_panic_step`]).
    steps: u64,
    panic_at: Option<u64>,
    /// The step the thread returns at instead ([`injected_exit_step`]).
    exit_at: Option<u64>,
    /// Called after the first output, then `None` ([`start`]).
    first_output: Option<FirstOutput>,
}

/// A constrained slot's matcher, lent out for a step.
type Lent = (usize, Box<Guide>);

/// One compute_mask per lent matcher, timed.
type Masks = Vec<(usize, Box<Guide>, Result<SimpleVob, String>, Duration)>;

fn compute_masks(lent: Vec<Lent>) -> Masks {
    lent.into_iter()
        .map(|(i, mut m)| {
            let t = Instant::now();
            let mask = match catch_unwind(AssertUnwindSafe(|| m.compute_mask())) {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the grammar engine panicked".to_string()),
            };
            (i, m, mask, t.elapsed())
        })
        .collect()
}

/// [`compute_masks`] of several slots at once, one per task of the model's
/// pool (its threads are idle between the forward pass and sampling): the
/// masks of a batched step, which would otherwise follow each other on the
/// engine thread.
fn compute_masks_on_pool(pool: &gpack_runtime::Pool, lent: Vec<Lent>) -> Masks {
    use std::sync::{Mutex, MutexGuard};
    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
    let cells: Vec<Mutex<Option<Lent>>> = lent.into_iter().map(|x| Mutex::new(Some(x))).collect();
    let out: Vec<Mutex<Masks>> = cells.iter().map(|_| Mutex::new(Vec::new())).collect();
    pool.run(cells.len(), &|i| {
        if let Some(x) = lock(&cells[i]).take() {
            *lock(&out[i]) = compute_masks(vec![x]);
        }
    });
    out.into_iter()
        .flat_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// Whether the model's pool (`--threads`, else one thread per logical
/// CPU) leaves a core free. Its workers spin between the forward pass's
/// jobs, so a mask thread on a core they use preempts one of them and
/// stalls every slot's step (measured on 2 cores: single-stream decode
/// 0.70x with the thread, against the mask's own cost when computed after
/// the step).
fn spare_core(model: &Model) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    model.pool().threads() < cores
}

impl Engine {
    fn new(
        model: &'static Model<'static>,
        (draft, mtp): (
            Option<&'static Model<'static>>,
            Option<&'static Mtp<'static>>,
        ),
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
            published: vec![0; cfg.parallel],
            prefix: None,
            drafters: (0..cfg.parallel)
                .map(|_| {
                    draft.map(|d| ModelDrafter::new(d, cfg.n_ctx, cfg.draft_max, cfg.draft_p_min))
                })
                .collect(),
            mtps: (0..cfg.parallel)
                .map(|_| mtp.map(|m| MtpDrafter::new(m, cfg.n_ctx, cfg.draft_max, cfg.draft_p_min)))
                .collect(),
            cfg,
            metrics,
            handle,
            scratch: Scratch::default(),
            embeds: Default::default(),
            lanes: Vec::new(),
            embed_scratch: Scratch::default(),
            embed_ids: 0,
            masks_beside: spare_core(model),
            eager_masks: eager_masks(),
            steps: 0,
            panic_at: injected_panic_step(),
            exit_at: injected_exit_step(),
            first_output: None,
        }
    }

    /// Puts `job` in the free slot whose cache shares the longest prefix
    /// with its prompt; that prefix is kept (its prefill skipped: the keys
    /// and values of the same tokens at the same positions are the same
    /// bits), all but the prompt's last token at most, whose logits are
    /// needed.
    fn place(&mut self, mut job: Job) {
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
        let mut keep = shared.min(job.prompt.len().saturating_sub(1));
        self.truncate_slot(i, keep);
        // Blocks the prefix cache holds beyond the slot's own prefix (not
        // with an MTP block, whose drafter needs the trunk's hidden states
        // of every position it follows).
        if let (Some(p), None) = (self.prefix.as_mut(), &self.mtps[i]) {
            let now = p.restore(self.model, &mut self.seqs[i], &job.prompt, keep);
            if now > keep {
                self.cached[i] = job.prompt[..now].to_vec();
                self.published[i] = now / KB;
                keep = now;
            }
        }
        self.metrics
            .prompt_tokens
            .fetch_add(job.prompt.len() as u64, Ordering::Relaxed);
        self.metrics
            .prompt_tokens_cached
            .fetch_add(keep as u64, Ordering::Relaxed);
        let mut slot = Slot::new(&job.prompt, job.cfg.clone(), Some(self.tok));
        if let Some(g) = job.constraint.take() {
            slot = slot.with_guide(g);
        }
        if let Some(k) = job.reply {
            slot = slot.with_reply(gpack_runtime::decode::ReplyScan::new(k));
        }
        self.slots[i] = Some(Active {
            ngram: NgramDrafter::with_max_draft(self.cfg.draft_max),
            slot,
            job,
            fed: keep,
            reused: keep,
            first_at: None,
        });
    }

    /// Keeps the first `n` positions of slot `i`'s cache.
    fn truncate_slot(&mut self, i: usize, n: usize) {
        self.seqs[i].truncate(n);
        self.cached[i].truncate(n);
        self.published[i] = self.published[i].min(n / KB);
    }

    /// Gives the prefix cache the full blocks of the slots in `idx`.
    fn publish(&mut self, idx: &[usize]) {
        let Some(p) = self.prefix.as_mut() else {
            return;
        };
        for &i in idx {
            if self.cached[i].len() / KB > self.published[i] {
                self.published[i] = p.publish(
                    self.model,
                    &self.seqs[i],
                    &self.cached[i],
                    self.published[i],
                );
            }
        }
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
        // KV positions held by running sequences (a free slot's cached
        // prefix is reusable, not in use: vLLM counts such blocks as free).
        let used: usize = (0..self.slots.len())
            .filter(|&i| self.slots[i].is_some())
            .map(|i| self.cached[i].len())
            .sum();
        self.metrics.kv_used.store(used as u64, Ordering::Relaxed);
        self.metrics.kv_total.store(
            (self.slots.len() * self.cfg.n_ctx) as u64,
            Ordering::Relaxed,
        );
    }

    /// Frees slot `i`, sending `ev` (if the client still listens).
    fn retire(&mut self, i: usize, ev: Option<Event>) {
        if let Some(a) = self.slots[i].take() {
            if let Some(ev) = ev {
                let _ = a.job.events.send(ev);
            }
            let n_gen = a.slot.generated().len();
            if let Some(first) = a.first_at {
                if n_gen > 1 {
                    let dt = first.elapsed().as_secs_f64().max(1e-9);
                    self.metrics.tps.observe((n_gen - 1) as f64 / dt);
                }
            }
            self.handle.in_system.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Ends slot `i`'s job as its slot decided (the slot has released
    /// every final piece of text).
    fn finish(&mut self, i: usize, finish: Finish) {
        let Some(a) = self.slots[i].as_mut() else {
            return;
        };
        if let Some(d) = a.slot.finish_reply() {
            if !d.is_empty() || d.tool_calls {
                let _ = a.job.events.send(Event::Reply(d));
            }
        }
        let ev = Event::Done {
            finish,
            prompt_tokens: a.job.prompt.len(),
            completion_tokens: a.slot.generated().len(),
            cached_tokens: a.reused,
        };
        self.retire(i, Some(ev));
    }

    fn take(&mut self, w: Work) {
        match w {
            Work::Gen(job) => self.place(job),
            Work::Embed(job) => {
                self.embed_ids += 1;
                let n = job.inputs.len();
                self.embeds.push_back(Embedding {
                    id: self.embed_ids,
                    job,
                    next: 0,
                    out: vec![None; n],
                    left: n,
                });
            }
        }
    }

    /// One batched step of embedding inputs: up to [`EMBED_LANES`] inputs
    /// (the queued jobs' in order) each advance by their share of
    /// `prefill_chunk` tokens; an input whose tokens are all in is pooled,
    /// and a job whose inputs are all pooled is answered.
    fn embed_chunk(&mut self) {
        // Jobs whose client left, with their lanes.
        while let Some(k) = self.embeds.iter().position(|e| e.job.reply.is_closed()) {
            let e = self.embeds.remove(k).expect("a job at k");
            self.lanes.retain(|l| l.job != e.id);
            self.handle.in_system.fetch_sub(1, Ordering::SeqCst);
        }
        let model = self.model;
        while self.lanes.len() < EMBED_LANES {
            let Some(e) = self.embeds.iter_mut().find(|e| e.next < e.job.inputs.len()) else {
                break;
            };
            let len = e.job.inputs[e.next].len();
            self.lanes.push(Lane {
                job: e.id,
                input: e.next,
                fed: 0,
                pool: Default::default(),
                seq: model.new_sequence(len.max(1)),
            });
            e.next += 1;
        }
        if self.lanes.is_empty() {
            return;
        }
        let per = (self.cfg.prefill_chunk.max(1) / self.lanes.len()).max(1);
        let embeds = &self.embeds;
        let input = |l: &Lane| -> &[u32] {
            let e = embeds.iter().find(|e| e.id == l.job).expect("a lane's job");
            &e.job.inputs[l.input]
        };
        let chunks: Vec<Vec<u32>> = self
            .lanes
            .iter()
            .map(|l| {
                let t = input(l);
                t[l.fed..(l.fed + per).min(t.len())].to_vec()
            })
            .collect();
        let slices: Vec<&[u32]> = chunks.iter().map(Vec::as_slice).collect();
        let scratch = &mut self.embed_scratch;
        let mut seqs: Vec<&mut Sequence> = self.lanes.iter_mut().map(|l| &mut l.seq).collect();
        let res = catch_unwind(AssertUnwindSafe(|| {
            model.hidden_states_batch(scratch, &mut seqs, &slices)
        }));
        drop(seqs);
        let h = match res {
            Ok(Ok(h)) => h,
            failed => {
                let msg = match failed {
                    Ok(Err(err)) => crate::load::chain(&err),
                    _ => "internal error: the embedding step panicked".to_string(),
                };
                self.embed_scratch = Scratch::default();
                let ids: Vec<u64> = self.lanes.drain(..).map(|l| l.job).collect();
                self.embeds.retain(|e| {
                    if !ids.contains(&e.id) {
                        return true;
                    }
                    let _ = e.job.reply.send(Err(msg.clone()));
                    self.handle.in_system.fetch_sub(1, Ordering::SeqCst);
                    false
                });
                return;
            }
        };
        let d = model.config.n_embd;
        let mut row = 0;
        let mut finished = false;
        let lanes = std::mem::take(&mut self.lanes);
        for (mut l, c) in lanes.into_iter().zip(&chunks) {
            l.pool.add(&h[row * d..(row + c.len()) * d], d);
            row += c.len();
            l.fed += c.len();
            let k = self
                .embeds
                .iter()
                .position(|e| e.id == l.job)
                .expect("a lane's job");
            let e = &mut self.embeds[k];
            if l.fed < e.job.inputs[l.input].len() {
                self.lanes.push(l);
                continue;
            }
            e.out[l.input] = Some(l.pool.finish(e.job.pooling));
            e.left -= 1;
            if e.left == 0 {
                let e = self.embeds.remove(k).expect("a job at k");
                let out = e.out.into_iter().map(Option::unwrap_or_default).collect();
                let _ = e.job.reply.send(Ok(out));
                self.handle.in_system.fetch_sub(1, Ordering::SeqCst);
                finished = true;
            }
        }
        if finished {
            self.output_done();
        }
    }

    /// After an output (a token sampled, an embedding done): the
    /// [`FirstOutput`] hook's turn, once.
    fn output_done(&mut self) {
        if let Some(f) = self.first_output.take() {
            f();
        }
    }

    /// Ends every job held (active, embedding, queued in `rx`) with
    /// [`Event::Shutdown`] ([`EngineHandle::abort`]).
    fn cancel_all(&mut self, rx: &mpsc::Receiver<Work>) {
        const WHY: &str = "the server shut down before the embedding finished";
        let n = self.end_all(rx, || Event::Shutdown, WHY);
        self.metrics
            .cancelled
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Ends every job held or queued: generations get `event()`, embeddings
    /// `embed_why`. Returns how many jobs it ended.
    fn end_all(
        &mut self,
        rx: &mpsc::Receiver<Work>,
        event: impl Fn() -> Event,
        embed_why: &str,
    ) -> usize {
        let active = self.n_active();
        for i in 0..self.slots.len() {
            self.retire(i, Some(event()));
        }
        self.lanes.clear();
        let embeds: Vec<_> = self.embeds.drain(..).map(|e| e.job).collect();
        let mut n = 0;
        for w in rx.try_iter().chain(embeds.into_iter().map(Work::Embed)) {
            match w {
                Work::Gen(j) => {
                    let _ = j.events.send(event());
                }
                Work::Embed(j) => {
                    let _ = j.reply.send(Err(embed_why.into()));
                }
            }
            n += 1;
        }
        self.handle.in_system.fetch_sub(n, Ordering::SeqCst);
        self.update_gauges();
        active + n
    }

    fn run(mut self, rx: mpsc::Receiver<Work>) {
        loop {
            if self.handle.abort.load(Ordering::SeqCst) {
                return self.cancel_all(&rx);
            }
            if self.n_active() == 0 && self.embeds.is_empty() {
                self.update_gauges();
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(job) => self.take(job),
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
                    Ok(job) => self.take(job),
                    Err(_) => break,
                }
            }
            self.embed_chunk();
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
            if self.exit_at == Some(self.steps + 1) {
                log::error!(
                    "injected exit of the decoding thread (GPACK_TEST_ENGINE_EXIT_AT_STEP)"
                );
                return;
            }
            self.step();
            if let Some(why) = self.model.device_lost() {
                // Nothing can run on a lost device: the step's jobs failed,
                // so do the held and queued ones, and the thread ends
                // (`/health` turns 503 naming the cause).
                log::error!("{why}: failing every job and stopping the decoding thread");
                if let Ok(mut f) = self.handle.failure.lock() {
                    f.get_or_insert(why.clone());
                }
                return self.fail_all(&rx, &why);
            }
        }
    }

    /// Ends every job held or queued with `why` (a lost device).
    fn fail_all(&mut self, rx: &mpsc::Receiver<Work>, why: &str) {
        let msg = format!("the request could not finish: {why}");
        self.end_all(rx, || Event::Error(msg.clone()), &msg);
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
                let room = a
                    .slot
                    .draft_room(self.seqs[i].pos(), self.cfg.n_ctx)
                    .min(draft_share);
                let d: Option<&mut dyn Drafter> = match a.job.spec {
                    SpecMode::None => None,
                    SpecMode::Ngram => Some(&mut a.ngram),
                    SpecMode::Mtp => self.mtps[i].as_mut().map(|d| d as &mut dyn Drafter),
                    SpecMode::Draft => self.drafters[i].as_mut().map(|d| d as &mut dyn Drafter),
                };
                match d {
                    Some(d) => a.slot.draft(d, room, self.model.config.n_vocab, &mut draft),
                    None => draft.clear(),
                }
                let Some(next) = a.slot.pending() else {
                    continue;
                };
                toks.push(next);
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
        // The matchers of the constrained slots that sample after this
        // step, lent to the mask thread for its duration.
        // A greedy slot sampling one row keeps its matcher: its mask is
        // computed only if the grammar refuses the model's own token.
        let mut lent: Vec<Lent> = Vec::new();
        for (j, &i) in idx.iter().enumerate() {
            if let Some(a) = self.slots[i].as_mut() {
                let lazy = wants[j] == Logits::Last && a.slot.is_greedy() && !self.eager_masks;
                if wants[j] != Logits::None && !lazy {
                    if let Some(m) = a.slot.lend_guide() {
                        lent.push((i, m));
                    }
                }
            }
        }
        let beside = self.masks_beside;
        let (res, masks) = std::thread::scope(|sc| {
            let mut lent = Some(lent).filter(|l| !l.is_empty());
            let worker = if beside {
                lent.take().map(|l| sc.spawn(move || compute_masks(l)))
            } else {
                None
            };
            let res = catch_unwind(AssertUnwindSafe(|| {
                if inject {
                    panic!("injected fault (GPACK_TEST_PANIC_AT_STEP)");
                }
                model
                    .forward_batch_rows(scratch, &mut refs, &slices, &wants)
                    .map(|_| ())
            }));
            let waited = Instant::now();
            let masks = match worker {
                Some(w) => Some(w.join().unwrap_or_default()),
                None => lent.map(|l| {
                    if l.len() > 1 {
                        compute_masks_on_pool(model.pool(), l)
                    } else {
                        compute_masks(l)
                    }
                }),
            };
            (res, masks.map(|m| (m, waited.elapsed())))
        });
        drop(refs);
        if let Some((masks, waited)) = masks {
            self.metrics.mask_wait.observe(waited.as_secs_f64());
            for (i, m, mask, took) in masks {
                self.metrics.mask_seconds.observe(took.as_secs_f64());
                if let Some(a) = self.slots[i].as_mut() {
                    a.slot.restore_guide(m, mask);
                }
            }
        }
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
                self.truncate_slot(i, 0);
                if let Some(d) = self.mtps[i].as_mut() {
                    d.hidden(0, &[]);
                }
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
        let mut sampled = false;
        // Per slot of the step: (slot, first position, first row, rows kept).
        let mut kept: Vec<(usize, usize, usize, usize)> = Vec::new();
        for (j, &i) in idx.iter().enumerate() {
            let a = self.slots[i].as_mut().expect("active slot");
            let start = off;
            off += lens[j];
            kept.push((i, self.seqs[i].pos() - lens[j], start, lens[j]));
            a.fed = (a.fed + lens[j]).min(a.job.prompt.len());
            let rows = match wants[j] {
                Logits::None => continue,
                Logits::Last => 1,
                Logits::All => lens[j],
            };
            // Row 0's token takes the position after the step's first
            // token (decoding) or after the prompt (the last prefill row).
            let end = self.seqs[i].pos();
            let pos = end + 1 - rows;
            let block = &self.scratch.logits()[k * n_vocab..(k + rows) * n_vocab];
            let drafts = &toks[start + 1..start + rows];
            let (n_ctx, metrics) = (self.cfg.n_ctx, &self.metrics);
            let before = a.slot.generated().len();
            let events = &a.job.events;
            let slot = &mut a.slot;
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                slot.sample_rows(block, n_vocab, drafts, pos, n_ctx, &mut |e| {
                    if let Some(lp) = e.logprob {
                        let _ = events.send(Event::Logprob(lp.clone()));
                    }
                    match e.reply {
                        Some(d) if !d.is_empty() => {
                            let _ = events.send(Event::Reply(d.clone()));
                        }
                        Some(_) => {}
                        None if !e.text.is_empty() => {
                            let _ = events.send(Event::Text(e.text.to_string()));
                        }
                        None => {}
                    }
                    true
                })
            }));
            sampled = true;
            let now = Instant::now();
            if a.first_at.is_none() {
                a.first_at = Some(now);
                metrics.ttft.observe((now - a.job.enqueued).as_secs_f64());
            }
            let new = a.slot.generated().len() - before;
            metrics
                .generated_tokens
                .fetch_add(new as u64, Ordering::Relaxed);
            let took = a.slot.take_mask_time();
            if !took.is_zero() {
                metrics.mask_seconds.observe(took.as_secs_f64());
            }
            let (used, accepted) = match outcome {
                Ok(Ok(r)) => {
                    if let Some(why) = a.slot.stop() {
                        let f = Finish::of(why);
                        self.finish(i, f);
                    }
                    (r.used, r.accepted)
                }
                Ok(Err(e)) => {
                    self.retire(i, Some(Event::Error(e)));
                    (1, 0)
                }
                Err(_) => {
                    self.retire(
                        i,
                        Some(Event::Error("internal error: sampling panicked".into())),
                    );
                    (1, 0)
                }
            };
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
                        SpecMode::Mtp => {
                            if let Some(d) = self.mtps[i].as_mut() {
                                d.observe(rows - 1, accepted);
                            }
                        }
                        SpecMode::None => {}
                    }
                }
                // Keep the token and its accepted drafts: the cache of plain
                // decoding at this point.
                self.truncate_slot(i, pos - 1 + used);
                kept[j].3 = used;
            }
        }
        for (i, from, row, n) in kept {
            if let Some(d) = self.mtps[i].as_mut() {
                d.hidden(from, &self.model.hidden_rows(&self.scratch, row, n));
            }
        }
        self.publish(&idx);
        if sampled {
            self.output_done();
        }
    }
}
