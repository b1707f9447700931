//! gpack-server: an OpenAI-compatible HTTP server for one model, as a library
//! (the `gpack serve` command is a thin wrapper over [`serve`]).
//!
//! * [`api`]: the wire format (requests, validation, OpenAI's error shape);
//! * [`engine`]: one decoding thread with N sequence slots decoded together,
//!   one batched forward per token (continuous batching), a bounded queue;
//! * `http` (private): axum routes, SSE streaming, limits, API key;
//! * [`metrics`]: Prometheus text at `GET /metrics`;
//! * `probes` (private): `/livez`, `/readyz` and the routes' 503 while the
//!   model loads (the listener binds first: [`Listening`]);
//! * `shutdown` (private): what SIGTERM / SIGINT do (grace, drain);
//! * [`load`]: opening .gpack / .gguf / Hugging Face models.
//!
//! Threads: the tokio runtime (2 workers) does HTTP, JSON, tokenization and
//! template rendering; the engine thread (and the quant crate's compute
//! pool it drives) does all model work. They talk through one job queue and
//! one event channel per request, so a slow client never stalls decoding,
//! and a client that disconnects closes its channel, which the engine sees
//! before the next step and frees the slot.
//!
//! Chat templates are rendered by the tokenizer crate's minijinja
//! environment, which has no loader: a template can include no file and
//! reach no network. Messages are data in the template context, never
//! template source.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use gpack_api::{api, logprobs, tool_scan, tools};
pub mod embed;
pub mod engine;
mod error;
mod http;
mod listen;
pub mod load;
pub mod metrics;
mod probes;
mod shutdown;

pub use error::{Error, Result};
pub use gpack_runtime::integrity::{self, Integrity, VerifyMode};
pub use load::Loaded;

use gpack_runtime::Model;
use sha2::Digest;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Server settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// Address to bind (`127.0.0.1` unless told otherwise).
    pub host: String,
    /// Port (0: any free port; the bound address goes to `on_ready`).
    pub port: u16,
    /// Sequence slots decoded together.
    pub parallel: usize,
    /// Context (KV positions) of each slot: the per-request limit of prompt
    /// plus reply.
    pub ctx: usize,
    /// Requests waiting beyond the slots before new ones get 503.
    pub queue: usize,
    /// Bearer key required on every endpoint but `/health`, `/livez`,
    /// `/readyz` and the chat page (and `/metrics` when
    /// [`Options::metrics_public`]).
    pub api_key: Option<String>,
    /// Serve `/metrics` without the API key on the main port: an explicit
    /// choice for a scraper inside the cluster network (never implied).
    pub metrics_public: bool,
    /// Also serve `/metrics` (and only it), without the API key, on this
    /// port of the same host: the scraper's port, kept apart from the API's.
    pub metrics_port: Option<u16>,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Prompt tokens prefilled per batched step.
    pub prefill_chunk: usize,
    /// Name reported by `/v1/models` and in responses (default: the file stem).
    pub model_name: Option<String>,
    /// How the model is bound ([`gpack_runtime::LoadOptions`]): experts and
    /// the PLE table as the environment says, and, unlike `gpack run`'s
    /// default, an f16 K/V cache (as llama-server keeps it). The matrices
    /// are in the batched kernels' order already (row-interleaved in the
    /// file or at the transcode of a GGUF/HF source): nothing is repacked.
    pub load: gpack_runtime::LoadOptions,
    /// When the .gpack's sections are hashed ([`VerifyMode`]): by default in
    /// the background once the first token is out; on a mismatch `/health`
    /// reports the failure (503) and generation requests are refused.
    pub verify: VerifyMode,
    /// A request's headers must arrive within this; a keep-alive connection
    /// idle this long is closed (slow or silent clients cost nothing after).
    pub header_timeout: std::time::Duration,
    /// A request's body must arrive within this once its headers have (408
    /// otherwise).
    pub body_timeout: std::time::Duration,
    /// Open connections at most; beyond, new ones wait to be accepted.
    pub max_connections: usize,
    /// After SIGTERM, new requests are still served this long (readiness
    /// already 503) before the listener closes, so that load balancers stop
    /// sending first; SIGINT or a second signal skips it (`shutdown`).
    pub drain_grace: std::time::Duration,
    /// After the grace window (SIGTERM) or at once (SIGINT), in-flight
    /// requests get this long to finish;
    /// generations still running then are ended (their responses end with
    /// an error, code `server_shutting_down`).
    pub drain_timeout: std::time::Duration,
    /// Speculative decoding of requests that do not choose (`speculative`
    /// in the body): drafts checked in the batched step, the text unchanged.
    pub spec: gpack_runtime::SpecMode,
    /// A draft model (same vocabulary) for `SpecMode::Draft`; without one, a
    /// .gpack's packed draft model (`gpack convert --draft`) is used.
    pub draft: Option<std::path::PathBuf>,
    /// Most tokens drafted per sequence and step.
    pub draft_max: usize,
    /// The draft model's confidence threshold.
    pub draft_p_min: f32,
    /// A chat template (Jinja source) used instead of the model's.
    pub chat_template: Option<String>,
    /// Bytes of KV blocks the prefix cache keeps in memory, shared by all
    /// slots (`--kv-cache-bytes`; 0: no prefix cache beyond each slot's own).
    pub kv_cache_bytes: usize,
    /// A directory of KV blocks kept across restarts and shared with other
    /// processes serving the same .gpack (`--kv-cache-dir`), and its disk
    /// budget (`--kv-cache-disk-bytes`).
    pub kv_cache_dir: Option<(std::path::PathBuf, u64)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            host: "127.0.0.1".into(),
            port: 8080,
            parallel: 4,
            ctx: 2048,
            queue: 64,
            api_key: None,
            metrics_public: false,
            metrics_port: None,
            max_body_bytes: 1 << 20,
            prefill_chunk: 256,
            model_name: None,
            load: gpack_runtime::LoadOptions {
                kv: gpack_runtime::KvTypes::F16,
                ..gpack_runtime::LoadOptions::default()
            },
            verify: VerifyMode::Background,
            header_timeout: std::time::Duration::from_secs(10),
            body_timeout: std::time::Duration::from_secs(30),
            max_connections: 1024,
            drain_grace: std::time::Duration::from_secs(5),
            drain_timeout: std::time::Duration::from_secs(30),
            spec: gpack_runtime::SpecMode::Ngram,
            draft: None,
            draft_max: gpack_runtime::spec::DEFAULT_MAX_DRAFT,
            draft_p_min: gpack_runtime::spec::DEFAULT_P_MIN,
            chat_template: None,
            kv_cache_bytes: gpack_runtime::kvcache::DEFAULT_MEMORY_BYTES,
            kv_cache_dir: None,
        }
    }
}

/// Opens and binds the draft model at `path` (leaked like the target),
/// refusing one whose vocabulary differs from the target's `tok`.
fn load_draft(
    path: &std::path::Path,
    tok: &gpack_tokenizer::Tokenizer<'_>,
    load: &gpack_runtime::LoadOptions,
) -> Result<&'static Model<'static>> {
    let d: &'static Loaded = Box::leak(Box::new(Loaded::open(path, None)?));
    if let Some(id) = tok.vocab_difference(&d.tokenizer()?) {
        return Err(Error::Option {
            what: "draft (a draft model must share the target's vocabulary; this token differs)",
            value: format!("{} (token {id})", path.display()),
        });
    }
    let m = Model::load_with(d.weights(), load).map_err(|source| Error::Model {
        path: path.display().to_string(),
        source: Box::new(source),
    })?;
    Ok(Box::leak(Box::new(m)))
}

/// The prefix cache `opts` ask for, if any: none on a model whose KV
/// cache is on a GPU (said on stderr), unless a cache directory was asked
/// for (an error then, as for a model file without a digest).
fn prefix_cache(
    loaded: &Loaded,
    model: &Model<'_>,
    opts: &Options,
) -> Result<Option<gpack_runtime::kvcache::PrefixCache>> {
    use gpack_runtime::kvcache::{CacheOptions, PrefixCache};
    if opts.kv_cache_bytes == 0 && opts.kv_cache_dir.is_none() {
        return Ok(None);
    }
    if let (Err(why), None) = (model.prefix_cache_support(), &opts.kv_cache_dir) {
        log::info!("no prefix cache: {why}");
        return Ok(None);
    }
    let c = CacheOptions {
        memory_bytes: opts.kv_cache_bytes,
        dir: opts.kv_cache_dir.clone(),
    };
    let name = loaded.path().display().to_string();
    PrefixCache::new(model, loaded.identity(), &name, &c)
        .map(Some)
        .map_err(|e| Error::KvCache(Box::new(e)))
}

/// Checks the options that need no model (before anything binds).
fn check_options(opts: &Options) -> Result<()> {
    if opts.parallel == 0 || opts.parallel > 256 {
        return Err(Error::Option {
            what: "parallel (1..=256)",
            value: opts.parallel.to_string(),
        });
    }
    if opts.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        return Err(Error::Option {
            what: "api-key (empty: it would accept an empty bearer token)",
            value: "\"\"".into(),
        });
    }
    if opts.ctx < 2 {
        return Err(Error::Option {
            what: "ctx (at least 2)",
            value: opts.ctx.to_string(),
        });
    }
    Ok(())
}

/// Serves `model` until SIGTERM or SIGINT ([`Listening::bind`], then
/// [`Listening::serve`]). `on_ready` gets the bound address once the model
/// is served.
pub fn serve(model: Loaded, opts: Options, on_ready: impl FnOnce(SocketAddr)) -> Result<()> {
    Listening::bind(&opts)?.serve(model, opts, on_ready)
}

/// A bound server whose listener already answers: `/livez` 200, `/readyz`
/// 503 and every other route 503 (`model_loading`) until
/// [`Listening::serve`] has loaded the model, so that a startup probe
/// covers opening, verifying and binding it. A SIGTERM or SIGINT before
/// then removes the temporary files of writes under way (a pull) and exits
/// the process with status 130: there is nothing to drain.
pub struct Listening {
    rt: tokio::runtime::Runtime,
    front: Arc<probes::Front>,
    server: tokio::task::JoinHandle<()>,
    addr: SocketAddr,
}

impl Listening {
    /// Checks `opts`, binds the API port (and `--metrics-port`) and starts
    /// answering probes; the signal handlers are installed from here on.
    pub fn bind(opts: &Options) -> Result<Listening> {
        check_options(opts)?;
        let front = Arc::new(probes::Front::new(Arc::new(metrics::Metrics::default())));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|source| Error::Io {
                what: "starting the async runtime",
                source,
            })?;
        let limits = listen::Limits {
            header_timeout: opts.header_timeout,
            max_connections: opts.max_connections,
            drain_timeout: opts.drain_timeout,
        };
        let (listener, metrics_listener) = rt.block_on(async {
            let bind = |addr: String| async move {
                tokio::net::TcpListener::bind(&addr)
                    .await
                    .map_err(|source| Error::Bind { addr, source })
            };
            let main = bind(format!("{}:{}", opts.host, opts.port)).await?;
            let metrics = match opts.metrics_port {
                Some(port) => Some(bind(format!("{}:{port}", opts.host)).await?),
                None => None,
            };
            Ok::<_, Error>((main, metrics))
        })?;
        let addr = listener.local_addr().map_err(|source| Error::Io {
            what: "reading the bound address",
            source,
        })?;
        // Installed now (inside the runtime), so that no signal between
        // here and the model being served kills the process unhandled.
        let signals = {
            let _in_runtime = rt.enter();
            shutdown::Signals::install().map_err(|source| Error::Io {
                what: "installing the SIGTERM handler",
                source,
            })?
        };
        if let Some(l) = metrics_listener {
            // Ends with the runtime, after the main server has drained.
            rt.spawn(listen::serve(
                l,
                http::metrics_router(front.clone()),
                limits,
                std::future::pending::<()>(),
                || {},
            ));
        }
        let at_deadline = {
            let f = front.clone();
            move || f.abort()
        };
        let server = rt.spawn(listen::serve(
            listener,
            http::router(front.clone()),
            limits,
            shutdown::drain_start(signals, front.clone(), opts.drain_grace),
            at_deadline,
        ));
        Ok(Listening {
            rt,
            front,
            server,
            addr,
        })
    }

    /// The bound address of the API port.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Loads `model` as `opts` say (verifying it first with
    /// `VerifyMode::Before`), serves it (`/readyz` turns 200, then
    /// `on_ready` gets the bound address) until SIGTERM or SIGINT, then
    /// drains ([`Options::drain_grace`], [`Options::drain_timeout`]): ends
    /// the generations still running past the timeout (each response ends
    /// with a 503 error, code `server_shutting_down`) and returns `Ok`.
    ///
    /// The model is leaked: it lives as long as the process, and handlers on
    /// the runtime's threads borrow its weights and tokenizer without
    /// reference counting.
    pub fn serve(
        self,
        model: Loaded,
        opts: Options,
        on_ready: impl FnOnce(SocketAddr),
    ) -> Result<()> {
        check_options(&opts)?;
        let name = opts.model_name.clone().unwrap_or_else(|| {
            model
                .path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into())
        });
        if opts.verify == VerifyMode::Before {
            integrity::verify_now(&model)?;
        }
        let loaded: &'static Loaded = Box::leak(Box::new(model));
        let tok = loaded.tokenizer()?;
        // The slots' context decides LongRoPE's factors (whatever `load` says).
        let load = gpack_runtime::LoadOptions {
            context: opts.ctx,
            ..opts.load.clone()
        };
        let bm = Model::load_with(loaded.weights(), &load).map_err(|source| Error::Model {
            path: loaded.path().display().to_string(),
            source: Box::new(source),
        })?;
        let bm: &'static Model<'static> = Box::leak(Box::new(bm));
        // A draft model and the MTP block run on the model's threads.
        let load = gpack_runtime::LoadOptions {
            threads: gpack_runtime::Threads::Shared(bm.pool().clone()),
            ..load
        };
        // Compile the chat template once at start: a broken one is a start-up
        // error, not a 400 on every request.
        if let Some(t) = &opts.chat_template {
            let hi = serde_json::json!([{"role": "user", "content": "hi"}]);
            tok.apply_chat_template_json(Some(t), &hi, None, true)
                .map_err(|e| Error::Template(Box::new(e)))?;
        } else if tok.chat_template().is_some() {
            tok.apply_chat_template(&[gpack_tokenizer::ChatMessage::new("user", "hi")], true)
                .map_err(|e| Error::Template(Box::new(e)))?;
        }
        let stop_tokens = tok.stop_ids();
        let draft = match (&opts.draft, loaded.packed_draft()) {
            (Some(p), _) => Some(load_draft(p, &tok, &load)?),
            (None, Some(d)) => {
                let model_err = |source| Error::Model {
                    path: format!(
                        "{} (the draft model in its Mtp section)",
                        loaded.path().display()
                    ),
                    source: Box::new(source),
                };
                let d: &'static gpack_runtime::DraftWeights<'static> =
                    Box::leak(Box::new(d.map_err(model_err)?));
                let m = Model::load_with(d, &load).map_err(model_err)?;
                Some(&*Box::leak(Box::new(m)))
            }
            (None, None) => None,
        };
        // The model's MTP block, when it has one (per-request "mtp" then
        // works whatever the default mode).
        let mtp = match bm.mtp_weights(loaded.weights()) {
            Some(w) => {
                let w: &'static gpack_runtime::MtpWeights<'static> = Box::leak(Box::new(w));
                let m = gpack_runtime::Mtp::load(w, &load).map_err(|source| Error::Model {
                    path: format!(
                        "{} (its multi-token-prediction block)",
                        loaded.path().display()
                    ),
                    source: Box::new(source),
                })?;
                Some(&*Box::leak(Box::new(m)))
            }
            None => None,
        };
        if opts.spec == gpack_runtime::SpecMode::Mtp && mtp.is_none() {
            return Err(Error::Option {
                what: "spec (mtp needs a model with a multi-token-prediction block)",
                value: "mtp".into(),
            });
        }
        if opts.spec == gpack_runtime::SpecMode::Draft && draft.is_none() {
            return Err(Error::Option {
                what: "spec (draft needs a draft model)",
                value: "draft".into(),
            });
        }
        // The token a complete constrained output ends with: the first stop
        // token (EOS, else the chat format's end of turn); the engine allows
        // the others with it.
        let grammars =
            gpack_runtime::decode::Grammars::of(tok, stop_tokens.first().copied().unwrap_or(0));
        let metrics = self.front.metrics.clone();
        metrics.set_device(bm.gpu_info().as_ref());
        // `--verify background`: hashing starts once the first token (or
        // embedding) is out, as in `gpack run`, so it never delays a first
        // token; before, /health reports ok (nothing found yet).
        let integrity = Arc::new(std::sync::OnceLock::new());
        let start_check: Option<engine::FirstOutput> = (opts.verify == VerifyMode::Background)
            .then(|| {
                let checks = integrity.clone();
                Box::new(move || {
                    if let Some(i) = Integrity::start(loaded) {
                        let _ = checks.set(i);
                    }
                }) as engine::FirstOutput
            });
        let prefix = prefix_cache(loaded, bm, &opts)?;
        if let Some(p) = &prefix {
            metrics.set_prefix(p.stats());
        }
        let (engine, thread) = engine::start(
            bm,
            (draft, mtp),
            tok,
            engine::EngineConfig {
                parallel: opts.parallel,
                n_ctx: opts.ctx,
                queue: opts.queue,
                prefill_chunk: opts.prefill_chunk,
                draft_max: opts.draft_max.max(1),
                draft_p_min: opts.draft_p_min,
            },
            prefix,
            metrics.clone(),
            start_check,
        );
        let state = Arc::new(http::AppState {
            tok,
            engine: engine.clone(),
            metrics,
            model_name: name,
            api_key: opts
                .api_key
                .as_deref()
                .map(|k| sha2::Sha256::digest(k.as_bytes()).into()),
            n_ctx: opts.ctx,
            max_body: opts.max_body_bytes,
            body_timeout: opts.body_timeout,
            stop_tokens,
            spec: opts.spec,
            has_draft: draft.is_some(),
            has_mtp: mtp.is_some(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            next_id: AtomicU64::new(0),
            metrics_public: opts.metrics_public,
            integrity,
            prep_slots: Arc::new(tokio::sync::Semaphore::new(4)),
            grammars,
            tool_format: tools::Format::detect(
                opts.chat_template
                    .as_deref()
                    .or(tok.chat_template())
                    .unwrap_or(""),
            ),
            chat_template: opts.chat_template.clone(),
            harmony: gpack_tokenizer::harmony::is_harmony(&tok),
            pooling: embed::Pooling::of(loaded.weights()),
        });
        // Hashing before serving is part of the start-up (readiness 503).
        self.front.install(state);
        if self.front.phase() == probes::Phase::Serving {
            on_ready(self.addr);
        }
        let Listening { rt, server, .. } = self;
        let res = rt.block_on(server);
        // Every connection is closed (or past the deadline): what the engine
        // still holds has no client waiting; end it rather than finish it.
        log::info!("draining: stopping the decoding thread");
        engine.abort();
        let joined = thread.join();
        rt.shutdown_timeout(std::time::Duration::from_secs(1));
        if let Err(e) = res {
            log::error!("the listener task failed: {e}");
        }
        joined.map_err(|_| Error::EnginePanic)
    }
}
