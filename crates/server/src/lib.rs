//! gpack-server: an OpenAI-compatible HTTP server for one model, as a library
//! (the `gpack serve` command is a thin wrapper over [`serve`]).
//!
//! * [`api`]: the wire format (requests, validation, OpenAI's error shape);
//! * [`engine`]: one decoding thread with N sequence slots decoded together,
//!   one batched forward per token (continuous batching), a bounded queue;
//! * `http` (private): axum routes, SSE streaming, limits, API key;
//! * [`metrics`]: Prometheus text at `GET /metrics`;
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
    /// Bearer key required on every endpoint but `/health` (and `/metrics`
    /// when [`Options::metrics_public`]).
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
    /// On SIGTERM / Ctrl-C, in-flight requests get this long to finish;
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
                kv_f16: true,
                ..gpack_runtime::LoadOptions::default()
            },
            verify: VerifyMode::Background,
            header_timeout: std::time::Duration::from_secs(10),
            body_timeout: std::time::Duration::from_secs(30),
            max_connections: 1024,
            drain_timeout: std::time::Duration::from_secs(30),
            spec: gpack_runtime::SpecMode::Ngram,
            draft: None,
            draft_max: gpack_runtime::spec::DEFAULT_MAX_DRAFT,
            draft_p_min: gpack_runtime::spec::DEFAULT_P_MIN,
            chat_template: None,
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

/// Serves `model` until SIGTERM or SIGINT, then stops accepting
/// connections, lets in-flight requests finish (streams included) for at
/// most `opts.drain_timeout`, ends the generations still running (each
/// response ends with a 503 error, code `server_shutting_down`) and returns
/// `Ok`. `on_ready` gets the bound address once the socket listens.
///
/// The model is leaked: it lives as long as the process, and handlers on
/// the runtime's threads borrow its weights and tokenizer without reference
/// counting.
pub fn serve(model: Loaded, opts: Options, on_ready: impl FnOnce(SocketAddr)) -> Result<()> {
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
    let metrics = Arc::new(metrics::Metrics::default());
    metrics.set_device(bm.gpu_info().as_ref());
    // `--verify background`: hashing starts once the first token (or
    // embedding) is out, as in `gpack run`, so it never delays a first
    // token; before, /health reports ok (nothing found yet).
    let integrity = Arc::new(std::sync::OnceLock::new());
    let start_check: Option<engine::FirstOutput> =
        (opts.verify == VerifyMode::Background).then(|| {
            let checks = integrity.clone();
            Box::new(move || {
                if let Some(i) = Integrity::start(loaded) {
                    let _ = checks.set(i);
                }
            }) as engine::FirstOutput
        });
    let (engine, thread) = engine::start(
        bm,
        draft,
        mtp,
        tok,
        engine::EngineConfig {
            parallel: opts.parallel,
            n_ctx: opts.ctx,
            queue: opts.queue,
            prefill_chunk: opts.prefill_chunk,
            draft_max: opts.draft_max.max(1),
            draft_p_min: opts.draft_p_min,
        },
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
    let deadline_engine = engine.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            what: "starting the async runtime",
            source,
        })?;
    let res = rt.block_on(async move {
        let addr = format!("{}:{}", opts.host, opts.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let local = listener.local_addr().map_err(|source| Error::Io {
            what: "reading the bound address",
            source,
        })?;
        let limits = listen::Limits {
            header_timeout: opts.header_timeout,
            max_connections: opts.max_connections,
            drain_timeout: opts.drain_timeout,
        };
        if let Some(port) = opts.metrics_port {
            let addr = format!("{}:{port}", opts.host);
            let l = tokio::net::TcpListener::bind(&addr)
                .await
                .map_err(|source| Error::Bind { addr, source })?;
            // Ends with the runtime, after the main server has drained.
            tokio::spawn(listen::serve(
                l,
                http::metrics_router(state.clone()),
                limits,
                std::future::pending::<()>(),
                || {},
            ));
        }
        on_ready(local);
        let at_deadline = move || deadline_engine.abort();
        listen::serve(
            listener,
            http::router(state),
            limits,
            shutdown_signal(),
            at_deadline,
        )
        .await;
        Ok::<(), Error>(())
    });
    // Every connection is closed (or past the deadline): what the engine
    // still holds has no client waiting; end it rather than finish it.
    log::info!("draining: stopping the decoding thread");
    engine.abort();
    let joined = thread.join();
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    res?;
    joined.map_err(|_| Error::EnginePanic)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    log::info!("shutdown signal: no new connections, finishing in-flight requests");
}
