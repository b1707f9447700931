//! `gpack.Model`: a model opened as `gpack run` opens it (the runtime's
//! `Loaded`: a mapped .gpack, a .gguf or HF directory transcoded at load, a
//! .giw bundle), generating through the runtime's decoding slot (the one
//! `gpack run` and `gpack serve` drive: the same tokens for the same
//! settings) without holding the GIL.

// The methods take Python's keyword arguments one by one (so that the
// signatures, defaults and errors are Python's).
#![allow(clippy::too_many_arguments)]

use crate::tok::{check_ids, messages};
use crate::{err_msg, json_to_py};
use gpack_runtime::decode::TokenLogprob;
use gpack_runtime::decode::{Constraint, ConstraintError, Emitted, Grammars, Guide, Slot};
use gpack_runtime::decode::{MAX_CONSTRAINT_BYTES, MAX_TOP_LOGPROBS};
use gpack_runtime::integrity::{Integrity, VerifyMode};
use gpack_runtime::kvcache::{CacheOptions, PrefixCache};
use gpack_runtime::spec::{DEFAULT_MAX_DRAFT, DEFAULT_P_MIN};
use gpack_runtime::Loaded;
use gpack_runtime::{
    generate_slot_from, Drafter, ExpertMode, GenerateConfig, Generation, LoadOptions,
    Model as RModel, Mtp, MtpDrafter, NgramDrafter, SamplerConfig, Sink, SpecMode, Threads,
};
use gpack_tokenizer::Tokenizer as RTokenizer;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// The graph and tokenizer, both borrowing the loaded file.
pub(crate) struct Engine<'a> {
    model: RModel<'a>,
    tok: RTokenizer<'a>,
}

self_cell::self_cell!(
    /// A loaded file and the model bound to it.
    pub(crate) struct Cell {
        owner: Loaded,
        #[not_covariant]
        dependent: Engine,
    }
);

/// How often a blocking generation looks for Ctrl-C (before a forward
/// pass, when this long has passed since it last looked).
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Prompt tokens per forward pass of a blocking generation, so that Ctrl-C
/// is seen within [`SIGNAL_POLL`] plus one such step: SmolLM2-135M ran 64
/// tokens in 92 ms on 2 busy cores (`gpack bench -p 64`, load 4–6, Xeon
/// with AVX-512), so 32 keep a step under ~50 ms there.
const SIGNAL_PREFILL_BATCH: usize = 32;

/// A generation's [`Sink`]: tokens to `emit`, and `proceed` asked before
/// each forward pass.
struct PySink<E, P> {
    emit: E,
    proceed: P,
}

impl<E: FnMut(&Emitted<'_>) -> bool, P: FnMut() -> bool> Sink for PySink<E, P> {
    fn emit(&mut self, e: &Emitted<'_>) -> bool {
        (self.emit)(e)
    }
    fn proceed(&mut self) -> bool {
        (self.proceed)()
    }
}

/// What one generation needs besides the model.
struct Job {
    prompt: Vec<u32>,
    cfg: GenerateConfig,
    /// What the output must follow (`json_schema=`, `grammar=`,
    /// `response_format=`), compiled.
    guide: Option<Box<Guide>>,
    /// Speculative decoding: prompt lookup (`speculative="ngram"`), the
    /// model's MTP block (`"mtp"`) or none.
    spec: SpecMode,
}

/// Shared by a `Model` and its running streams.
struct Shared {
    cell: Cell,
    /// The options the model was loaded with, on its pool: an MTP block
    /// bound for a generation runs on the model's threads.
    load: LoadOptions,
    n_ctx: usize,
    verify: VerifyMode,
    /// The background hash of the file's sections (started on the first
    /// generated token, as `gpack run` does).
    integrity: Mutex<Option<Integrity>>,
    /// Constraints compiled for this model's vocabulary.
    grammars: Grammars,
    /// The prefix cache (`kv_cache_bytes=`, `kv_cache_dir=`), if any.
    prefix: Mutex<Option<PrefixCache>>,
}

impl Shared {
    /// Whether the model has an MTP block (`speculative="mtp"`).
    fn has_mtp(&self) -> bool {
        self.cell
            .with_dependent(|loaded, e| e.model.mtp_weights(loaded.weights()).is_some())
    }

    /// Runs `job`, calling `on_token(id, text)`; stops early (with the
    /// message) when the background check finds a damaged section.
    /// `proceed()` is asked before each forward pass; `false` stops. A
    /// `prefill_batch` bounds the prompt tokens of one forward pass (how
    /// long `proceed` may go unasked).
    fn run(
        &self,
        job: &Job,
        mut on_token: impl FnMut(u32, &str) -> bool,
        proceed: impl FnMut() -> bool,
        prefill_batch: Option<usize>,
    ) -> Result<Generation, String> {
        if let Some(m) = self.failure() {
            return Err(m);
        }
        let mut damaged = None;
        let g = self.cell.with_dependent(|loaded, e| {
            let mut cfg = job.cfg.clone();
            if let Some(b) = prefill_batch {
                cfg.prefill_batch = cfg.prefill_batch.min(b);
            }
            let mut slot = Slot::new(&job.prompt, cfg, Some(e.tok));
            if let Some(g) = &job.guide {
                slot = slot.with_guide(Box::new(g.deep_clone()));
            }
            if job.prompt.len() >= self.n_ctx {
                return Err(format!(
                    "the prompt has {} tokens; the context holds {} (pass a larger n_ctx)",
                    job.prompt.len(),
                    self.n_ctx
                ));
            }
            let mut state = e.model.new_state(self.n_ctx);
            // Blocks of the prompt the prefix cache holds (not for MTP,
            // whose drafter needs every position's hidden state).
            let mut prefix = self.prefix.lock().unwrap_or_else(|p| p.into_inner());
            let cached = match (prefix.as_mut(), job.spec) {
                (Some(p), s) if s != SpecMode::Mtp => {
                    p.restore(&e.model, state.sequence_mut(), &job.prompt, 0)
                }
                _ => 0,
            };
            drop(prefix);
            let mut ngram = NgramDrafter::default();
            // The MTP block, bound for this generation (a few vectors).
            let mtp_weights = match job.spec {
                SpecMode::Mtp => Some(e.model.mtp_weights(loaded.weights()).ok_or_else(|| {
                    "speculative=\"mtp\" needs a model with a multi-token-prediction block; \
                     this one has none"
                        .to_string()
                })?),
                _ => None,
            };
            let mtp = match &mtp_weights {
                Some(w) => Some(Mtp::load(w, &self.load).map_err(|e| crate::chain(&e))?),
                None => None,
            };
            let mut by_mtp = mtp
                .as_ref()
                .map(|m| MtpDrafter::new(m, self.n_ctx, DEFAULT_MAX_DRAFT, DEFAULT_P_MIN));
            let drafter: Option<&mut dyn Drafter> = match job.spec {
                SpecMode::Ngram => Some(&mut ngram),
                SpecMode::Mtp => by_mtp.as_mut().map(|d| d as &mut dyn Drafter),
                SpecMode::None | SpecMode::Draft => None,
            };
            let emit = |em: &Emitted<'_>| {
                let (id, text) = (em.token, em.text);
                {
                    if self.verify == VerifyMode::Background {
                        let mut c = self.integrity.lock().unwrap_or_else(|p| p.into_inner());
                        match &*c {
                            None => *c = Integrity::start(loaded),
                            Some(i) => {
                                if let Some(p) = i.failure() {
                                    damaged = Some(crate::chain(&p));
                                    return false;
                                }
                            }
                        }
                    }
                    on_token(id, text)
                }
            };
            let sink = PySink { emit, proceed };
            let g = generate_slot_from(&e.model, &mut state, slot, cached, drafter, sink)
                .map_err(|e| crate::chain(&e))?;
            let mut prefix = self.prefix.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(p) = prefix.as_mut() {
                let mut held = job.prompt.clone();
                held.extend_from_slice(&g.tokens);
                held.truncate(state.pos());
                p.publish(&e.model, state.sequence(), &held, 0);
            }
            Ok(g)
        })?;
        match damaged {
            Some(m) => Err(m),
            None => Ok(g),
        }
    }

    fn failure(&self) -> Option<String> {
        let c = self.integrity.lock().unwrap_or_else(|p| p.into_inner());
        let p = c.as_ref().and_then(Integrity::failure)?;
        Some(crate::chain(&p))
    }
}

/// The checks `generate` and `generate_ids` share: `top_p` in (0, 1] and no
/// empty stop string; returns the stop strings.
fn checked_sampling(top_p: f32, stop: Option<Vec<String>>) -> PyResult<Vec<String>> {
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(PyValueError::new_err(format!(
            "top_p must be in (0, 1], got {top_p}"
        )));
    }
    let stop = stop.unwrap_or_default();
    if stop.iter().any(String::is_empty) {
        return Err(PyValueError::new_err("stop strings must not be empty"));
    }
    Ok(stop)
}

/// `presence_penalty` and `frequency_penalty` in OpenAI's range.
fn checked_penalties(presence: f32, frequency: f32) -> PyResult<()> {
    for (v, name) in [
        (presence, "presence_penalty"),
        (frequency, "frequency_penalty"),
    ] {
        gpack_runtime::decode::check_penalty(name, f64::from(v)).map_err(PyValueError::new_err)?;
    }
    Ok(())
}

/// `generate_ids`'s `logprobs`.
fn logprobs_json(lps: &[TokenLogprob]) -> Value {
    let one = |t: &TokenLogprob| {
        let top: Vec<Value> = t.top.iter().map(|&(id, lp)| json!([id, lp])).collect();
        json!({"token": t.id, "logprob": t.logprob, "top": top})
    };
    Value::Array(lps.iter().map(one).collect())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A model loaded for generation: a .gpack (mapped and run in place), a
/// .gguf or Hugging Face directory (transcoded in memory at load) or a .giw
/// bundle, exactly as `gpack run` loads it.
///
/// Options: `n_ctx` (KV cache positions, default 2048), `kv` (`"f16"`, the
/// default of run, serve and bench too, `"f32"`, or ggml's `"q8_0"` /
/// `"q4_0"` blocks: `gpack run --kv`; `kv_k` / `kv_v` set keys' and
/// values' types apart, as `--kv-k` / `--kv-v`; `kv_f16=` is its old,
/// deprecated spelling), `expert_mmap` / `expert_cache_bytes` (how MoE experts are read),
/// `fallback_gguf` (run this GGUF when the .gpack fails validation), and
/// `verify`: `"background"` (default: the sections are hashed on one thread
/// from the first token on; a damaged one stops generation with
/// `gpack.GpackError` naming it), `"before"` (hash everything at load) or
/// `"off"`, and `threads`: the threads the model runs on, the calling one
/// included (default: `GPACK_THREADS`, else one per logical CPU the
/// process may use). `device`: `"auto"` (default, as `gpack run`: a
/// hardware GPU when one exists and the model runs there, else the CPU;
/// never a software adapter), `"cpu"`, `"gpu"` (a hardware GPU, else a
/// software one such as lavapipe with a warning; none is an error) or
/// `"gpu:N"`; `gpu_layers`: the first N blocks on the GPU, the rest on the
/// CPU (default: all, or as many as fit `gpu_memory`); `gpu_memory`: the
/// device memory gpack may use, bytes (an int) or a size (`"8GiB"`,
/// `"512MiB"`) or `"auto"`, as `gpack run --gpu-memory` (checked before
/// anything is uploaded; a `gpu_layers` that does not fit is an error).
/// `Model.device` says where it runs. `kv_cache_bytes`:
/// bytes of KV blocks (64 positions each) kept in memory and reused by
/// later generations that start with the same tokens (default 0: none);
/// `kv_cache_dir`: a cache directory shared with `gpack serve/run
/// --kv-cache-dir` (a .gpack model only; yours, not writable by others),
/// `kv_cache_disk_bytes` its budget (default 10 GiB). `generate_ids`
/// reports `cached_tokens`. The `GPACK_*` load variables apply as in `gpack run`;
/// a bad value is a `ValueError`.
/// A size argument: bytes, or text such as `"8GiB"` or `"auto"`.
#[derive(FromPyObject)]
pub enum SizeArg {
    /// A number of bytes.
    Bytes(u64),
    /// A size with a unit, or a keyword.
    Text(String),
}

#[pyclass(module = "gpack._gpack", frozen)]
pub struct Model {
    shared: Arc<Shared>,
    path: PathBuf,
    name: String,
}

impl Model {
    /// Runs `job` without the GIL, taking it back before a forward pass
    /// once [`SIGNAL_POLL`] has passed, to let Python handle signals:
    /// Ctrl-C stops the generation with KeyboardInterrupt, within a step of
    /// whatever it is doing (a prefill chunk, a token, a check of drafts).
    fn run_blocking(&self, py: Python<'_>, job: &Job) -> PyResult<Generation> {
        let mut interrupt: Option<PyErr> = None;
        let mut last = std::time::Instant::now();
        let r = py.detach(|| {
            let proceed = || {
                if last.elapsed() < SIGNAL_POLL {
                    return true;
                }
                last = std::time::Instant::now();
                match Python::attach(|py| py.check_signals()) {
                    Ok(()) => true,
                    Err(e) => {
                        interrupt = Some(e);
                        false
                    }
                }
            };
            self.shared
                .run(job, |_, _| true, proceed, Some(SIGNAL_PREFILL_BATCH))
        });
        if let Some(e) = interrupt {
            return Err(e);
        }
        r.map_err(err_msg)
    }

    /// `speculative=`: `"ngram"` (prompt lookup, as `gpack run`'s default),
    /// `"mtp"` (the model's multi-token-prediction block, when it has one)
    /// or `"none"`; the text is the same either way.
    fn checked_speculative(&self, mode: &str) -> PyResult<SpecMode> {
        match mode.parse::<SpecMode>() {
            Ok(SpecMode::Draft) => Err(PyValueError::new_err(
                "speculative=\"draft\" is not available in the Python package yet; use \"ngram\", \"mtp\" or \"none\" (gpack run/serve take a draft model)",
            )),
            Ok(SpecMode::Mtp) if !self.shared.has_mtp() => Err(PyValueError::new_err(
                "speculative=\"mtp\" needs a model with a multi-token-prediction block; this one has none",
            )),
            Ok(m) => Ok(m),
            Err(e) => Err(PyValueError::new_err(e)),
        }
    }

    /// `json_schema=` (a dict or a JSON string) or `grammar=` (llguidance's
    /// Lark syntax), compiled for this model; a `ValueError` saying why the
    /// grammar engine refuses it.
    fn guide(
        &self,
        py: Python<'_>,
        json_schema: Option<&Bound<'_, PyAny>>,
        grammar: Option<String>,
    ) -> PyResult<Option<Box<Guide>>> {
        let (c, param) = match (json_schema, grammar) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "json_schema and grammar cannot both be given",
                ))
            }
            (Some(s), None) => {
                let text = match s.extract::<String>() {
                    Ok(t) => t,
                    Err(_) => py
                        .import("json")?
                        .call_method1("dumps", (s,))?
                        .extract::<String>()?,
                };
                if text.len() > MAX_CONSTRAINT_BYTES {
                    return Err(PyValueError::new_err(format!(
                        "json_schema is {} bytes; at most {MAX_CONSTRAINT_BYTES} are accepted",
                        text.len()
                    )));
                }
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| PyValueError::new_err(format!("json_schema: {e}")))?;
                (Constraint::JsonSchema(v), "json_schema")
            }
            (None, Some(g)) => {
                if g.len() > MAX_CONSTRAINT_BYTES {
                    return Err(PyValueError::new_err(format!(
                        "grammar is {} bytes; at most {MAX_CONSTRAINT_BYTES} are accepted",
                        g.len()
                    )));
                }
                (Constraint::Lark(g), "grammar")
            }
            (None, None) => return Ok(None),
        };
        self.compile(py, &c, Some(param)).map(Some)
    }

    /// `c` compiled for this model's vocabulary; a refusal is a `ValueError`
    /// naming `param` (else the request parameter it came from).
    fn compile(&self, py: Python<'_>, c: &Constraint, param: Option<&str>) -> PyResult<Box<Guide>> {
        let r = py.detach(|| {
            self.shared
                .cell
                .with_dependent(|_, e| self.shared.grammars.compile(e.tok, c))
        });
        match r {
            Ok(g) => Ok(Box::new(g)),
            Err(ConstraintError::Invalid { param: p, message }) => Err(PyValueError::new_err(
                format!("{}: {message}", param.unwrap_or(p)),
            )),
            Err(e) => Err(err_msg(e.to_string())),
        }
    }

    fn tok<R>(&self, f: impl FnOnce(&RTokenizer<'_>) -> R) -> R {
        self.shared.cell.with_dependent(|_, e| f(&e.tok))
    }

    /// The prompt's ids: text encoded with BOS/EOS as the model says, or a
    /// list of ids checked against the vocabulary.
    fn prompt_ids(&self, py: Python<'_>, prompt: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        if let Ok(text) = prompt.extract::<String>() {
            return Ok(py.detach(|| self.tok(|t| t.encode(&text, true))));
        }
        let ids: Vec<u32> = prompt
            .extract()
            .map_err(|_| PyTypeError::new_err("prompt must be a string or a list of token ids"))?;
        self.tok(|t| check_ids(t, &ids))?;
        Ok(ids)
    }

    fn stream(&self, job: Job, chat: Option<ChatMeta>) -> Stream {
        // A small bound: the worker runs at most a couple of tokens ahead of
        // the reader, and stops when the reader is dropped.
        let (tx, rx): (SyncSender<Event>, Receiver<Event>) = sync_channel(2);
        let shared = self.shared.clone();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                shared.run(
                    &job,
                    |_, text| tx.send(Event::Text(text.to_string())).is_ok(),
                    || true,
                    None,
                )
            }));
            let done = match r {
                Ok(r) => r,
                Err(p) => Err(format!(
                    "generation panicked: {}",
                    p.downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default()
                )),
            };
            let _ = tx.send(Event::Done(done));
        });
        Stream {
            rx: Mutex::new(Some(rx)),
            chat,
            sent_role: Mutex::new(false),
        }
    }
}

/// What a generation thread sends.
enum Event {
    Text(String),
    Done(Result<Generation, String>),
}

/// The fixed fields of a chat completion's chunks.
struct ChatMeta {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
}

impl ChatMeta {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        gpack_api::api::chat_chunk(&self.id, self.created, &self.model, delta, finish)
    }
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// An iterator over a generation running on another thread: text pieces
/// (`Model.generate(..., stream=True)`) or OpenAI chunk dicts
/// (`Model.create_chat_completion(..., stream=True)`). Dropping it, or
/// calling `close()`, stops the generation.
#[pyclass(module = "gpack._gpack", frozen)]
pub struct Stream {
    rx: Mutex<Option<Receiver<Event>>>,
    chat: Option<ChatMeta>,
    sent_role: Mutex<bool>,
}

#[pymethods]
impl Stream {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut guard = self
            .rx
            .try_lock()
            .map_err(|_| PyRuntimeError::new_err("this stream is being read by another thread"))?;
        if let Some(meta) = &self.chat {
            let mut sent = self.sent_role.lock().unwrap_or_else(|p| p.into_inner());
            if !*sent && guard.is_some() {
                *sent = true;
                let c = meta.chunk(json!({"role": "assistant", "content": ""}), None);
                return json_to_py(py, &c);
            }
        }
        loop {
            let Some(rx) = guard.take() else {
                return Err(PyStopIteration::new_err(()));
            };
            let (rx, ev) = py.detach(move || {
                let ev = rx.recv();
                (rx, ev)
            });
            *guard = Some(rx);
            match ev {
                Ok(Event::Text(t)) if t.is_empty() => continue,
                Ok(Event::Text(t)) => {
                    return match &self.chat {
                        None => Ok(t.into_pyobject(py)?.into_any().unbind()),
                        Some(meta) => json_to_py(py, &meta.chunk(json!({"content": t}), None)),
                    };
                }
                Ok(Event::Done(Ok(g))) => {
                    *guard = None;
                    match &self.chat {
                        None => return Err(PyStopIteration::new_err(())),
                        Some(meta) => {
                            let mut c = meta.chunk(json!({}), Some(g.stop.finish_reason()));
                            if meta.include_usage {
                                c["usage"] = usage(g.prompt_tokens, g.tokens.len());
                            }
                            return json_to_py(py, &c);
                        }
                    }
                }
                Ok(Event::Done(Err(m))) => {
                    *guard = None;
                    return Err(err_msg(m));
                }
                Err(_) => {
                    *guard = None;
                    return Err(err_msg("the generation thread ended without a result"));
                }
            }
        }
    }

    /// Stops the generation (the thread ends at its next token).
    fn close(&self) {
        if let Ok(mut g) = self.rx.lock() {
            g.take();
        }
    }
}

#[pymethods]
impl Model {
    /// Loads `path` (see the class docstring for the options).
    #[new]
    #[pyo3(signature = (path, *, n_ctx = 2048, kv = "f16", kv_k = None, kv_v = None, kv_f16 = None, verify = "background",
                        fallback_gguf = None, expert_mmap = false, expert_cache_bytes = None,
                        threads = None, device = "auto", gpu_layers = None, gpu_memory = None,
                        kv_cache_bytes = 0, kv_cache_dir = None, kv_cache_disk_bytes = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        n_ctx: usize,
        kv: &str,
        kv_k: Option<&str>,
        kv_v: Option<&str>,
        kv_f16: Option<bool>,
        verify: &str,
        fallback_gguf: Option<PathBuf>,
        expert_mmap: bool,
        expert_cache_bytes: Option<usize>,
        threads: Option<usize>,
        device: &str,
        gpu_layers: Option<usize>,
        gpu_memory: Option<SizeArg>,
        kv_cache_bytes: usize,
        kv_cache_dir: Option<PathBuf>,
        kv_cache_disk_bytes: Option<u64>,
    ) -> PyResult<Model> {
        let device: gpack_runtime::Device = device.parse().map_err(PyValueError::new_err)?;
        let gpu_memory = match gpu_memory {
            None => gpack_runtime::GpuMemory::Unknown,
            Some(SizeArg::Bytes(0)) => {
                return Err(PyValueError::new_err("gpu_memory must be at least 1 byte"))
            }
            Some(SizeArg::Bytes(b)) => gpack_runtime::GpuMemory::Bytes(b),
            Some(SizeArg::Text(t)) => t.parse().map_err(PyValueError::new_err)?,
        };
        let verify = match verify {
            "background" => VerifyMode::Background,
            "before" => VerifyMode::Before,
            "off" => VerifyMode::Off,
            v => {
                return Err(PyValueError::new_err(format!(
                    "verify must be \"background\", \"before\" or \"off\", not {v:?}"
                )))
            }
        };
        let parse = |s: &str| {
            s.parse::<gpack_runtime::KvType>()
                .map_err(|e| PyValueError::new_err(format!("kv: {e}")))
        };
        let both = match kv_f16 {
            Some(old) => {
                let w = py.get_type::<pyo3::exceptions::PyDeprecationWarning>();
                PyErr::warn(
                    py,
                    &w,
                    c"kv_f16= is deprecated: use kv=\"f16\" (the default) or kv=\"f32\"",
                    1,
                )?;
                if old {
                    gpack_runtime::KvType::F16
                } else {
                    gpack_runtime::KvType::F32
                }
            }
            None => parse(kv)?,
        };
        let kv = gpack_runtime::KvTypes {
            k: kv_k.map(parse).transpose()?.unwrap_or(both),
            v: kv_v.map(parse).transpose()?.unwrap_or(both),
        };
        if n_ctx < 2 {
            return Err(PyValueError::new_err("n_ctx must be at least 2"));
        }
        let env = LoadOptions::from_env().map_err(PyValueError::new_err)?;
        let experts = if expert_mmap {
            ExpertMode::Mmap
        } else {
            match expert_cache_bytes {
                Some(cache_bytes) => ExpertMode::Resident { cache_bytes },
                None => env.experts,
            }
        };
        let threads = match threads {
            Some(n) => Threads::Count(
                std::num::NonZeroUsize::new(n)
                    .ok_or_else(|| PyValueError::new_err("threads must be at least 1"))?,
            ),
            None => env.threads.clone(),
        };
        let opts = LoadOptions {
            threads,
            experts,
            kv,
            device,
            gpu_layers,
            gpu_memory,
            // The memory plan counts a KV cache of n_ctx positions (and
            // LongRoPE models pick their factors by it, as `gpack run --ctx`).
            context: n_ctx,
            ..env
        };
        let cell = py.detach(|| {
            let loaded =
                Loaded::open(&path, fallback_gguf.as_deref()).map_err(|e| crate::chain(&e))?;
            if verify == VerifyMode::Before {
                gpack_runtime::integrity::verify_now(&loaded).map_err(|e| crate::chain(&e))?;
            }
            Cell::try_new(loaded, |l| {
                let model = RModel::load_with(l.weights(), &opts)
                    .map_err(|e| format!("{}: {}", l.path().display(), crate::chain(&e)))?;
                let tok = l.tokenizer().map_err(|e| crate::chain(&e))?;
                Ok::<_, String>(Engine { model, tok })
            })
        });
        let cell = cell.map_err(err_msg)?;
        let prefix = if kv_cache_bytes > 0 || kv_cache_dir.is_some() {
            let c = CacheOptions {
                memory_bytes: kv_cache_bytes,
                dir: kv_cache_dir.map(|d| {
                    (
                        d,
                        kv_cache_disk_bytes.unwrap_or(gpack_runtime::kvcache::DEFAULT_DISK_BYTES),
                    )
                }),
            };
            let name = path.display().to_string();
            let p = cell.with_dependent(|loaded, e| {
                PrefixCache::new(&e.model, loaded.identity(), &name, &c)
            });
            Some(p.map_err(|e| err_msg(e.to_string()))?)
        } else {
            None
        };
        let eos = cell.with_dependent(|_, e| e.tok.stop_ids().first().copied().unwrap_or(0));
        let load = LoadOptions {
            threads: Threads::Shared(cell.with_dependent(|_, e| e.model.pool().clone())),
            ..opts
        };
        let name = path
            .file_stem()
            .map_or_else(|| "gpack".into(), |s| s.to_string_lossy().into_owned());
        Ok(Model {
            shared: Arc::new_cyclic(|me: &std::sync::Weak<Shared>| {
                // The grammar engine's tokenizer callback: the model's own,
                // for as long as the model lives.
                let me = me.clone();
                let encode = move |s: &str| {
                    me.upgrade().map_or_else(Vec::new, |sh| {
                        sh.cell.with_dependent(|_, e| e.tok.encode(s, false))
                    })
                };
                Shared {
                    grammars: Grammars::new(eos, Arc::new(encode)),
                    cell,
                    load,
                    n_ctx,
                    verify,
                    integrity: Mutex::new(None),
                    prefix: Mutex::new(prefix),
                }
            }),
            path,
            name,
        })
    }

    /// The model file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Where the model runs: `"cpu"`, or the GPU adapter, its backend, the
    /// blocks on it and the uploads (what `gpack run --verbose` logs).
    #[getter]
    fn device(&self) -> String {
        self.shared.cell.with_dependent(|_, e| {
            e.model
                .gpu_summary()
                .map_or_else(|| "cpu".to_string(), |s| format!("gpu: {s}"))
        })
    }

    /// KV cache positions per generation.
    #[getter]
    fn n_ctx(&self) -> usize {
        self.shared.n_ctx
    }

    /// The architecture (`"llama"`, `"qwen3"`, …).
    #[getter]
    fn arch(&self) -> String {
        self.shared
            .cell
            .with_dependent(|_, e| e.model.config.arch.name().to_string())
    }

    /// Token ids of `text` with this model's tokenizer (BOS/EOS added as the
    /// model says when `add_special`).
    #[pyo3(signature = (text, add_special = true))]
    fn tokenize(&self, py: Python<'_>, text: &str, add_special: bool) -> Vec<u32> {
        py.detach(|| self.tok(|t| t.encode(text, add_special)))
    }

    /// The text of `ids`.
    fn detokenize(&self, ids: Vec<u32>) -> PyResult<String> {
        self.tok(|t| {
            check_ids(t, &ids)?;
            Ok(t.decode(&ids))
        })
    }

    /// Generates after `prompt` (a string, encoded with BOS as the model
    /// says, or a list of token ids) and returns the new text; with
    /// `stream=True`, returns an iterator of text pieces instead. Defaults
    /// are `gpack run`'s: greedy (`temperature=0`), `top_k=40`,
    /// `top_p=0.95`, `seed=42`, stopping at the end of the turn (EOS and
    /// the end-of-turn tokens, as `gpack run`; unless `ignore_eos`), at any
    /// of the `stop` strings (not included in the text), after `max_tokens`
    /// or when the context is full.
    #[pyo3(signature = (prompt, max_tokens = 128, *, temperature = 0.0, top_k = 40, top_p = 0.95,
                        min_p = 0.0, repeat_penalty = 1.0, repeat_last_n = 64, seed = 42,
                        stop = None, ignore_eos = false, stream = false,
                        speculative = "ngram", presence_penalty = 0.0, frequency_penalty = 0.0,
                        json_schema = None, grammar = None))]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: &Bound<'_, PyAny>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        repeat_last_n: usize,
        seed: u64,
        stop: Option<Vec<String>>,
        ignore_eos: bool,
        stream: bool,
        speculative: &str,
        presence_penalty: f32,
        frequency_penalty: f32,
        json_schema: Option<&Bound<'_, PyAny>>,
        grammar: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let stop_strings = checked_sampling(top_p, stop)?;
        checked_penalties(presence_penalty, frequency_penalty)?;
        let spec = self.checked_speculative(speculative)?;
        let prompt = self.prompt_ids(py, prompt)?;
        let job = Job {
            guide: self.guide(py, json_schema, grammar)?,
            prompt,
            cfg: GenerateConfig {
                max_tokens,
                sampler: SamplerConfig {
                    temperature,
                    top_k,
                    top_p,
                    min_p,
                    repetition_penalty: repeat_penalty,
                    repeat_last_n,
                    seed,
                },
                stop_tokens: if ignore_eos {
                    Vec::new()
                } else {
                    self.tok(|t| t.stop_ids())
                },
                stop_strings,
                presence_penalty,
                frequency_penalty,
                ..GenerateConfig::default()
            },
            spec,
        };
        if stream {
            return Ok(Bound::new(py, self.stream(job, None))?.into_any().unbind());
        }
        let g = self.run_blocking(py, &job)?;
        Ok(g.text.into_pyobject(py)?.into_any().unbind())
    }

    /// Like `generate`, but returns a dict: `text`, `tokens` (the new ids),
    /// `finish_reason` (`"stop"` or `"length"`), `prompt_tokens`, the
    /// prefill and decode speeds in tokens per second, and with `logprobs=N`
    /// `logprobs`: per new token `{"token": id, "logprob": lp, "top": [[id,
    /// lp], …]}` (the N most likely alternatives; natural log of the
    /// model's own distribution, before penalties and grammar masks).
    #[pyo3(signature = (prompt, max_tokens = 128, *, temperature = 0.0, top_k = 40, top_p = 0.95,
                        min_p = 0.0, seed = 42, stop = None, speculative = "ngram",
                        presence_penalty = 0.0, frequency_penalty = 0.0, logprobs = None,
                        json_schema = None, grammar = None))]
    fn generate_ids(
        &self,
        py: Python<'_>,
        prompt: &Bound<'_, PyAny>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        seed: u64,
        stop: Option<Vec<String>>,
        speculative: &str,
        presence_penalty: f32,
        frequency_penalty: f32,
        logprobs: Option<usize>,
        json_schema: Option<&Bound<'_, PyAny>>,
        grammar: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let stop_strings = checked_sampling(top_p, stop)?;
        checked_penalties(presence_penalty, frequency_penalty)?;
        if logprobs.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
            return Err(PyValueError::new_err(format!(
                "logprobs must be at most {MAX_TOP_LOGPROBS}"
            )));
        }
        let spec = self.checked_speculative(speculative)?;
        let prompt = self.prompt_ids(py, prompt)?;
        let job = Job {
            guide: self.guide(py, json_schema, grammar)?,
            prompt,
            cfg: GenerateConfig {
                max_tokens,
                sampler: SamplerConfig {
                    temperature,
                    top_k,
                    top_p,
                    min_p,
                    seed,
                    ..SamplerConfig::default()
                },
                stop_tokens: self.tok(|t| t.stop_ids()),
                stop_strings,
                presence_penalty,
                frequency_penalty,
                logprobs,
                ..GenerateConfig::default()
            },
            spec,
        };
        let g = self.run_blocking(py, &job)?;
        json_to_py(
            py,
            &json!({
                "text": g.text,
                "tokens": g.tokens,
                "finish_reason": g.stop.finish_reason(),
                "prompt_tokens": g.prompt_tokens,
                "cached_tokens": g.cached_tokens,
                "prefill_tps": g.prefill_tps(),
                "decode_tps": g.decode_tps(),
                "drafted": g.spec.drafted,
                "accepted": g.spec.accepted,
                "logprobs": logprobs.map(|_| logprobs_json(&g.logprobs)),
            }),
        )
    }

    /// An OpenAI chat completion: `messages` (dicts with `role` and
    /// `content`) rendered with the model's chat template, generated with
    /// `gpack serve`'s rules (its parameter checks and defaults:
    /// `temperature=1`, `top_p=1`, `top_k=40`, `min_p=0.05`, a random seed
    /// unless given, `max_tokens` up to the context; stops at EOS and the
    /// end-of-turn tokens). Returns the `chat.completion` dict (`choices[0]
    /// ["message"]["content"]`, `finish_reason`, `usage`), or with
    /// `stream=True` an iterator of `chat.completion.chunk` dicts.
    #[pyo3(signature = (messages, *, max_tokens = None, temperature = None, top_p = None,
                        top_k = None, min_p = None, seed = None, stop = None, stream = false,
                        stream_options = None, speculative = "ngram", presence_penalty = None,
                        frequency_penalty = None, response_format = None, logprobs = None,
                        top_logprobs = None))]
    fn create_chat_completion(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyList>,
        max_tokens: Option<i64>,
        temperature: Option<f64>,
        top_p: Option<f64>,
        top_k: Option<i64>,
        min_p: Option<f64>,
        seed: Option<i64>,
        stop: Option<&Bound<'_, PyAny>>,
        stream: bool,
        stream_options: Option<&Bound<'_, PyDict>>,
        speculative: &str,
        presence_penalty: Option<f64>,
        frequency_penalty: Option<f64>,
        response_format: Option<&Bound<'_, PyAny>>,
        logprobs: Option<bool>,
        top_logprobs: Option<i64>,
    ) -> PyResult<Py<PyAny>> {
        let spec = self.checked_speculative(speculative)?;
        let msgs = self::messages(messages)?;
        if msgs.is_empty() {
            return Err(PyValueError::new_err("messages must not be empty"));
        }
        let stop: Option<Value> = match stop {
            None => None,
            Some(s) if s.is_none() => None,
            Some(s) => match s.extract::<String>() {
                Ok(one) => Some(json!(one)),
                Err(_) => Some(json!(s.extract::<Vec<String>>().map_err(|_| {
                    PyTypeError::new_err("stop must be a string or a list of strings")
                })?)),
            },
        };
        let include_usage = match stream_options {
            Some(o) => o
                .get_item("include_usage")?
                .map(|v| v.is_truthy())
                .transpose()?
                .unwrap_or(false),
            None => false,
        };
        let response_format: Value = match response_format {
            Some(r) if !r.is_none() => {
                let text: String = py.import("json")?.call_method1("dumps", (r,))?.extract()?;
                serde_json::from_str(&text).map_err(|e| PyValueError::new_err(e.to_string()))?
            }
            _ => Value::Null,
        };
        // gpack serve's request validation and defaults.
        let common: gpack_api::api::Common = serde_json::from_value(json!({
            "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
            "top_k": top_k, "min_p": min_p, "seed": seed, "stop": stop, "stream": stream,
            "stream_options": {"include_usage": include_usage},
            "presence_penalty": presence_penalty, "frequency_penalty": frequency_penalty,
            "response_format": response_format, "logprobs": logprobs,
            "top_logprobs": top_logprobs,
        }))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let p = common
            .params()
            .map_err(|e| PyValueError::new_err(e.body()["error"]["message"].to_string()))?;
        let (prompt, stop_tokens) = self.tok(|t| {
            let text = t
                .apply_chat_template(&msgs, true)
                .map_err(|e| err_msg(format!("chat template: {}", crate::chain(&e))))?;
            Ok::<_, PyErr>((t.encode(&text, false), t.stop_ids()))
        })?;
        let room = self.shared.n_ctx.saturating_sub(prompt.len());
        let guide = match &p.constraint {
            Some(c) => Some(self.compile(py, c, None)?),
            None => None,
        };
        let job = Job {
            cfg: p.generate_config(p.max_tokens.unwrap_or(room).min(room), stop_tokens, 0),
            guide,
            prompt,
            spec,
        };
        let created = now_secs();
        let id = format!(
            "chatcmpl-{created:x}{:08x}",
            NEXT_ID.fetch_add(1, Ordering::Relaxed)
        );
        if stream {
            let meta = ChatMeta {
                id,
                created,
                model: self.name.clone(),
                include_usage,
            };
            return Ok(Bound::new(py, self.stream(job, Some(meta)))?
                .into_any()
                .unbind());
        }
        let g = self.run_blocking(py, &job)?;
        json_to_py(
            py,
            &json!({
                "id": id,
                "object": "chat.completion",
                "created": created,
                "model": self.name,
                "system_fingerprint": "gpack",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": g.text},
                    "logprobs": p.logprobs.map(|_| self.tok(|t| {
                        let piece = |id: u32| t.token_piece(id).into_owned();
                        json!({"content": g.logprobs.iter()
                            .map(|l| gpack_api::logprobs::chat_entry(l, &piece))
                            .collect::<Vec<_>>()})
                    })),
                    "finish_reason": g.stop.finish_reason(),
                }],
                "usage": usage(g.prompt_tokens, g.tokens.len()),
            }),
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "<gpack.Model {:?} ({})>",
            self.path.display().to_string(),
            self.arch()
        )
    }
}
