//! Routes and handlers. Every response to a generation request is either
//! OpenAI's JSON (or SSE chunk stream) or OpenAI's error shape; a handler
//! panic becomes a 500 in that shape (the panic-catching layer), never a
//! dropped connection.

use crate::api::{self, ApiError, Params, ValidPrompt};
use crate::engine::{EngineHandle, Event, Finish, Job};
use crate::logprobs::{self, TokenLogprob};
use crate::metrics::Metrics;
use crate::probes::{Front, Ready};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gpack_tokenizer::Tokenizer;
use serde_json::{json, Value};
use sha2::Digest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Shared by all handlers.
pub(crate) struct AppState {
    pub tok: Tokenizer<'static>,
    pub engine: Arc<EngineHandle>,
    pub metrics: Arc<Metrics>,
    pub model_name: String,
    /// SHA-256 of the bearer key required (compared digest to digest, so
    /// neither the key's bytes nor its length show in the timing).
    pub api_key: Option<[u8; 32]>,
    pub n_ctx: usize,
    pub max_body: usize,
    pub body_timeout: std::time::Duration,
    pub stop_tokens: Vec<u32>,
    /// Speculative decoding of requests that do not choose.
    pub spec: gpack_runtime::SpecMode,
    /// Whether a draft model was loaded (`"speculative": "draft"` allowed).
    pub has_draft: bool,
    /// Whether the model has an MTP block (per-request "mtp").
    pub has_mtp: bool,
    pub created: u64,
    pub next_id: AtomicU64,
    /// `/metrics` needs no API key (`--metrics-public`).
    pub metrics_public: bool,
    /// Requests tokenized or rendered at once (on the blocking pool). Its
    /// waiters are bounded: a request waits here only once admitted
    /// ([`crate::engine::EngineHandle::admit`]), so at most the engine's
    /// slots plus queue places wait.
    pub prep_slots: Arc<tokio::sync::Semaphore>,
    /// The background check of the weights, once started.
    pub integrity: Arc<std::sync::OnceLock<crate::Integrity>>,
    /// Compiles `response_format` / `grammar` constraints.
    pub grammars: gpack_runtime::decode::Grammars,
    /// A chat template that replaces the model's (`--chat-template`).
    pub chat_template: Option<String>,
    /// How the template's model writes tool calls.
    pub tool_format: crate::tools::Format,
    /// The model speaks harmony (gpt-oss): chat answers are split into
    /// reasoning, content and tool calls by [`gpack_tokenizer::harmony`].
    pub harmony: bool,
    /// How `/v1/embeddings` pools hidden states.
    pub pooling: crate::embed::Pooling,
}

impl AppState {
    /// The integrity failure, if the weights failed their check.
    pub(crate) fn integrity_failure(&self) -> Option<String> {
        let p = self.integrity.get().and_then(crate::Integrity::failure)?;
        Some(crate::load::chain(&p))
    }
}

/// The API port's routes. `/livez` and `/readyz` answer from the moment
/// the socket binds; the others once the model is loaded
/// ([`crate::probes`]).
pub(crate) fn router(front: Arc<Front>) -> Router {
    Router::new()
        .route("/", get(chat_page))
        .route("/livez", get(crate::probes::livez))
        .route("/readyz", get(crate::probes::readyz))
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .fallback(not_found)
        .with_state(front)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::internal("internal error while handling the request").into_response()
            },
        ))
}

/// The metrics port's router (`--metrics-port`): `/metrics` only, without
/// the API key.
pub(crate) fn metrics_router(front: Arc<Front>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_open))
        .fallback(not_found)
        .with_state(front)
}

async fn metrics_open(State(f): State<Arc<Front>>) -> Response {
    metrics_text(&f.metrics)
}

fn metrics_text(m: &Metrics) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        m.render(),
    )
        .into_response()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The chat page: one static file built into the binary (no CDN, no build
/// step), which calls this server's own API from the browser.
const CHAT_PAGE: &str = include_str!("chat.html");

async fn chat_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            ),
        ],
        CHAT_PAGE,
    )
        .into_response()
}

async fn health(Ready(s): Ready) -> Response {
    let down = (!s.engine.is_alive()).then(|| match s.engine.failure() {
        Some(f) => format!("the decoding thread has stopped: {f}"),
        None => "the decoding thread has stopped".to_string(),
    });
    match down.or_else(|| s.integrity_failure()) {
        None => Json(json!({"status": "ok"})).into_response(),
        Some(m) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "error", "error": m})),
        )
            .into_response(),
    }
}

/// Runs `f` (tokenization, template rendering: CPU work proportional to the
/// prompt, up to the body limit) on the blocking pool, at most
/// `prep_slots` at a time, so the async workers keep accepting and
/// answering while a large prompt is encoded.
async fn prepare<T: Send + 'static>(
    s: &Arc<AppState>,
    f: impl FnOnce(&AppState) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let busy = || {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the server is shutting down",
        )
    };
    let _permit = s
        .prep_slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| busy())?;
    let st = s.clone();
    tokio::task::spawn_blocking(move || f(&st))
        .await
        .map_err(|_| ApiError::internal("internal error while preparing the prompt"))?
}

/// A job the drain deadline ended ([`Event::Shutdown`]): 503, retry
/// elsewhere.
fn shut_down() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "the server shut down before the generation finished (its drain timeout passed)",
    )
    .with_code("server_shutting_down")
}

/// Refuses generation once the decoding thread has stopped or the weights
/// failed their integrity check (what `/health` reports).
fn check_ready(s: &AppState) -> Result<(), ApiError> {
    if !s.engine.is_alive() {
        return Err(s.engine.unavailable());
    }
    match s.integrity_failure() {
        None => Ok(()),
        Some(m) => Err(
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", m)
                .with_code("integrity_check_failed"),
        ),
    }
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "unknown endpoint",
    )
}

fn check_auth(s: &AppState, h: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &s.api_key else {
        return Ok(());
    };
    let given = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| key_matches(key, g)) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid or missing API key (send Authorization: Bearer KEY)",
        )
        .with_code("invalid_api_key"))
    }
}

/// Whether `given` is the key whose SHA-256 is `key`: fixed-length digests
/// compared in time independent of where the first difference is (and of
/// either key's length).
fn key_matches(key: &[u8; 32], given: &str) -> bool {
    let d: [u8; 32] = sha2::Sha256::digest(given.as_bytes()).into();
    d.iter().zip(key).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

async fn models(Ready(s): Ready, h: HeaderMap) -> Result<Json<Value>, ApiError> {
    check_auth(&s, &h)?;
    Ok(Json(json!({
        "object": "list",
        "data": [{
            "id": s.model_name,
            "object": "model",
            "created": s.created,
            "owned_by": "gpack",
            "meta": {"n_ctx": s.n_ctx, "n_vocab": s.tok.vocab_size(), "pooling": s.pooling.name()},
        }]
    })))
}

async fn metrics(Ready(s): Ready, h: HeaderMap) -> Result<Response, ApiError> {
    if !s.metrics_public {
        check_auth(&s, &h)?;
    }
    Ok(metrics_text(&s.metrics))
}

/// Reads the body, refusing one over the limit (413) as soon as it is.
async fn read_body(s: &AppState, req: Request) -> Result<(HeaderMap, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    let too_big = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than {} bytes", s.max_body),
        )
    };
    if let Some(len) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > s.max_body as u64 {
            return Err(too_big());
        }
    }
    let bytes = tokio::time::timeout(s.body_timeout, axum::body::to_bytes(body, s.max_body))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                format!(
                    "the request body did not arrive within {} s",
                    s.body_timeout.as_secs_f64()
                ),
            )
        })?
        .map_err(|_| too_big())?;
    Ok((parts.headers, bytes))
}

fn count_error(s: &AppState, e: &ApiError) {
    if e.status.is_server_error() {
        if e.status != StatusCode::SERVICE_UNAVAILABLE {
            s.metrics.errors_5xx.fetch_add(1, Ordering::Relaxed);
        }
    } else {
        s.metrics.errors_4xx.fetch_add(1, Ordering::Relaxed);
    }
}

async fn chat(Ready(s): Ready, req: Request) -> Response {
    s.metrics.chat_requests.fetch_add(1, Ordering::Relaxed);
    match chat_inner(&s, req).await {
        Ok(r) => r,
        Err(e) => {
            count_error(&s, &e);
            e.into_response()
        }
    }
}

async fn completions(Ready(s): Ready, req: Request) -> Response {
    s.metrics
        .completion_requests
        .fetch_add(1, Ordering::Relaxed);
    match completions_inner(&s, req).await {
        Ok(r) => r,
        Err(e) => {
            count_error(&s, &e);
            e.into_response()
        }
    }
}

async fn embeddings(Ready(s): Ready, req: Request) -> Response {
    match embeddings_inner(&s, req).await {
        Ok(r) => r,
        Err(e) => {
            count_error(&s, &e);
            e.into_response()
        }
    }
}

async fn embeddings_inner(s: &Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    use crate::embed::{EmbedInput, EmbedJob};
    check_auth(s, req.headers())?;
    check_ready(s)?;
    let (_, body) = read_body(s, req).await?;
    let crate::embed::EmbedRequest { inputs, base64 } =
        crate::embed::parse(&body, s.tok.vocab_size())?;
    let mut adm = s.engine.admit(1)?;
    let inputs: Vec<Vec<u32>> = prepare(s, move |s| {
        Ok(inputs
            .into_iter()
            .map(|i| match i {
                EmbedInput::Text(t) => s.tok.encode(&t, true),
                EmbedInput::Tokens(ids) => ids,
            })
            .collect())
    })
    .await?;
    if let Some(long) = inputs.iter().find(|t| t.len() > s.n_ctx || t.is_empty()) {
        return Err(ApiError::invalid(
            format!(
                "an input has {} tokens; this server embeds 1 to {} tokens per input",
                long.len(),
                s.n_ctx
            ),
            Some("input"),
        )
        .with_code("context_length_exceeded"));
    }
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    let (tx, mut rx) = unbounded_channel();
    s.engine.submit(
        &mut adm,
        EmbedJob {
            inputs,
            pooling: s.pooling,
            reply: tx,
        },
    )?;
    let vectors = match rx.recv().await {
        Some(Ok(v)) => v,
        Some(Err(e)) => return Err(ApiError::internal(e)),
        None => return Err(ApiError::internal("the embedding ended without a result")),
    };
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let e = if base64 {
                json!(crate::embed::base64_f32(&v))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": e})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": s.model_name,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }))
    .into_response())
}

async fn chat_inner(s: &Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    check_auth(s, req.headers())?;
    check_ready(s)?;
    let (_, body) = read_body(s, req).await?;
    let api::ValidChat {
        messages: msgs,
        tool_messages,
        tools,
        reasoning_effort,
        mut params,
    } = api::chat_request(&body)?;
    let adm = s.engine.admit(params.n)?;
    // Harmony models write calls in their own channel, read with the rest
    // of the answer (see `Meta::harmony`).
    let parse_calls = tools
        .as_ref()
        .is_some_and(|t| t.choice != crate::tools::Choice::None && !s.harmony)
        .then_some(s.tool_format);
    let mut constraint = params.constraint.take();
    let (prompt, matcher) = prepare(s, move |s| {
        // tool_choice required / named: the grammar of a call in the
        // model's format (built from the tools' schemas: CPU work in the
        // size of the request, so here and not on an async worker).
        if let Some(g) = tools
            .as_ref()
            .filter(|_| !s.harmony)
            .and_then(|t| crate::tools::grammar(t, s.tool_format, &s.tok))
        {
            constraint = Some(gpack_runtime::decode::Constraint::ToolCall(g));
        }
        let matcher = compile(s, constraint.as_ref())?;
        let mut kwargs = serde_json::Map::new();
        if let Some(e) = reasoning_effort {
            kwargs.insert("reasoning_effort".into(), Value::String(e));
        }
        let rendered = match (&tool_messages, &s.chat_template) {
            (None, None) if kwargs.is_empty() => s.tok.apply_chat_template(&msgs, true),
            (m, t) => {
                let plain;
                let m = match m {
                    Some(m) => m,
                    None => {
                        plain = serde_json::to_value(&msgs).unwrap_or_default();
                        &plain
                    }
                };
                let list = tools.as_ref().map(|t| &t.list);
                s.tok
                    .apply_chat_template_kwargs(t.as_deref(), m, list, true, &kwargs)
            }
        };
        let text = rendered.map_err(|e| {
            ApiError::invalid(
                format!(
                    "the chat template refused these messages: {}",
                    crate::load::chain(&e)
                ),
                Some("messages"),
            )
        })?;
        Ok((s.tok.encode(&text, false), matcher))
    })
    .await?;
    run(
        s,
        adm,
        prompt,
        matcher,
        params,
        Kind::Chat,
        parse_calls,
        "messages",
    )
    .await
}

async fn completions_inner(s: &Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    check_auth(s, req.headers())?;
    check_ready(s)?;
    let (_, body) = read_body(s, req).await?;
    let api::ValidCompletion { prompt, params } =
        api::completion_request(&body, s.tok.vocab_size())?;
    let adm = s.engine.admit(params.n)?;
    let constraint = params.constraint.clone();
    let (prompt, matcher) = prepare(s, move |s| {
        let matcher = compile(s, constraint.as_ref())?;
        Ok(match prompt {
            ValidPrompt::Text(t) => (s.tok.encode(&t, true), matcher),
            ValidPrompt::Tokens(ids) => (ids, matcher),
        })
    })
    .await?;
    let kind = Kind::Completion;
    run(s, adm, prompt, matcher, params, kind, None, "prompt").await
}

/// The request's constraint compiled (on the blocking pool: a large schema
/// takes milliseconds).
fn compile(
    s: &AppState,
    c: Option<&gpack_runtime::decode::Constraint>,
) -> Result<Option<Box<gpack_runtime::decode::Guide>>, ApiError> {
    c.map(|c| {
        s.grammars
            .compile(s.tok, c)
            .map(Box::new)
            .map_err(ApiError::from)
    })
    .transpose()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

/// Checks the prepared `prompt` against the context and submits one job
/// per choice in the places of `adm`; the response, streamed or whole.
#[allow(clippy::too_many_arguments)]
async fn run(
    s: &Arc<AppState>,
    mut adm: crate::engine::Admission,
    prompt: Vec<u32>,
    mut constraint: Option<Box<gpack_runtime::decode::Guide>>,
    p: Params,
    kind: Kind,
    tools: Option<crate::tools::Format>,
    what: &'static str,
) -> Result<Response, ApiError> {
    if prompt.is_empty() {
        return Err(ApiError::invalid("the prompt is empty", Some(what)));
    }
    if prompt.len() >= s.n_ctx {
        return Err(ApiError::invalid(
            format!(
                "this server's context limit is {} tokens per request, but the prompt has {} tokens \
                 (at least one position must be left for the reply)",
                s.n_ctx,
                prompt.len()
            ),
            Some(what),
        )
        .with_code("context_length_exceeded"));
    }
    let room = s.n_ctx - prompt.len();
    let max_tokens = p.max_tokens.unwrap_or(room).min(room);
    // Speculation checks drafts against the sampler's own draws; a
    // grammar's mask depends on every token before it, so constrained jobs
    // decode one token per step.
    let spec = match p.spec.unwrap_or(s.spec) {
        _ if constraint.is_some() => gpack_runtime::SpecMode::None,
        m => m,
    };
    if p.spec == Some(gpack_runtime::SpecMode::Mtp) && !s.has_mtp {
        return Err(ApiError::invalid(
            "speculative \"mtp\" needs a model with a multi-token-prediction block; this one has none",
            Some("speculative"),
        ));
    }
    if p.spec == Some(gpack_runtime::SpecMode::Draft) && !s.has_draft {
        return Err(ApiError::invalid(
            "speculative \"draft\" needs a draft model: start the server with --draft MODEL",
            Some("speculative"),
        ));
    }
    // One job per choice, each with its own seed (and its own copy of the
    // grammar's state); if one is refused, the receivers of those already
    // queued are dropped and the engine cancels them.
    let mut rxs = Vec::with_capacity(p.n);
    let harmony = s.harmony && kind == Kind::Chat;
    // A streamed reply with tool calls or harmony channels is read by the
    // slot itself (its pieces arrive as `Event::Reply`); a whole one is
    // parsed at the end from its text.
    let reply = match (p.stream, harmony, tools) {
        (false, _, _) => None,
        (true, true, _) => Some(gpack_runtime::decode::ReplyKind::Harmony),
        (true, false, f) => f.map(gpack_runtime::decode::ReplyKind::Tools),
    };
    for c in 0..p.n {
        let (tx, rx) = unbounded_channel();
        let guide = if c + 1 == p.n {
            constraint.take()
        } else {
            constraint.as_ref().map(|g| Box::new(g.deep_clone()))
        };
        let job = Job {
            prompt: prompt.clone(),
            cfg: p.generate_config(max_tokens, s.stop_tokens.clone(), c),
            spec,
            events: tx,
            enqueued: Instant::now(),
            constraint: guide,
            reply,
        };
        s.engine.submit(&mut adm, job)?;
        rxs.push(rx);
    }
    let id = s.next_id.fetch_add(1, Ordering::Relaxed);
    let meta = Meta {
        id: match kind {
            Kind::Chat => format!("chatcmpl-{:x}{id:08x}", s.created),
            Kind::Completion => format!("cmpl-{:x}{id:08x}", s.created),
        },
        created: now_secs(),
        model: s.model_name.clone(),
        kind,
        include_usage: p.include_usage,
        tok: s.tok,
        tools,
        harmony,
        call_seed: p.seed ^ id,
    };
    if p.stream {
        Ok(sse(meta, rxs))
    } else {
        collect(s, meta, rxs).await
    }
}

struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    include_usage: bool,
    tok: Tokenizer<'static>,
    /// Parse tool calls out of the answers, written in this format.
    tools: Option<crate::tools::Format>,
    /// Chat answers in harmony: reasoning (`reasoning_content`), content
    /// and tool calls by channel.
    harmony: bool,
    /// Seeds the tool-call ids.
    call_seed: u64,
}

/// OpenAI's usage object; `cached` prompt tokens had their keys and values
/// reused (a slot's own cache or the prefix cache), as OpenAI's and vLLM's
/// `prompt_tokens_details.cached_tokens`.
fn usage(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// One choice's answer, gathered.
#[derive(Default)]
struct Gathered {
    text: String,
    logprobs: Vec<TokenLogprob>,
}

async fn collect(
    s: &AppState,
    m: Meta,
    rxs: Vec<UnboundedReceiver<Event>>,
) -> Result<Response, ApiError> {
    let mut choices = Vec::with_capacity(rxs.len());
    let (mut n_prompt, mut n_completion, mut n_cached) = (0, 0, 0);
    for (index, mut rx) in rxs.into_iter().enumerate() {
        let mut g = Gathered::default();
        loop {
            match rx.recv().await {
                Some(Event::Text(t)) => g.text.push_str(&t),
                // Whole answers are parsed from their text at the end: a
                // job gathered here asks for no reply reading.
                Some(Event::Reply(_)) => {
                    return Err(ApiError::internal("a reply delta for a whole answer"));
                }
                Some(Event::Logprob(l)) => g.logprobs.push(l),
                Some(Event::Done {
                    finish,
                    prompt_tokens,
                    completion_tokens,
                    cached_tokens,
                }) => {
                    n_prompt = prompt_tokens;
                    n_cached = n_cached.max(cached_tokens);
                    n_completion += completion_tokens;
                    choices.push(m.choice(index, g, finish));
                    break;
                }
                Some(Event::Error(e)) => {
                    s.metrics.errors_5xx.fetch_add(1, Ordering::Relaxed);
                    return Err(ApiError::internal(e));
                }
                Some(Event::Shutdown) => return Err(shut_down()),
                None => {
                    return Err(ApiError::internal("the generation ended without a result"));
                }
            }
        }
    }
    let object = match m.kind {
        Kind::Chat => "chat.completion",
        Kind::Completion => "text_completion",
    };
    Ok(Json(json!({
        "id": m.id,
        "object": object,
        "created": m.created,
        "model": m.model,
        "system_fingerprint": "gpack",
        "choices": choices,
        "usage": usage(n_prompt, n_completion, n_cached),
    }))
    .into_response())
}

impl Meta {
    fn piece(&self) -> impl Fn(u32) -> Vec<u8> + '_ {
        move |id| self.tok.token_piece(id).into_owned()
    }

    /// The `logprobs` of a choice (or a chunk) for tokens whose text starts
    /// at byte `offset` of the choice's text.
    fn logprobs(&self, ts: &[TokenLogprob], offset: usize) -> Value {
        let piece = self.piece();
        match self.kind {
            Kind::Chat => json!({"content": ts.iter()
                .map(|t| logprobs::chat_entry(t, &piece)).collect::<Vec<_>>()}),
            Kind::Completion => logprobs::completion_logprobs(ts, offset, &piece),
        }
    }

    /// A non-streamed choice.
    fn choice(&self, index: usize, g: Gathered, finish: Finish) -> Value {
        let lp = if g.logprobs.is_empty() {
            Value::Null
        } else {
            self.logprobs(&g.logprobs, 0)
        };
        if self.harmony {
            let r = gpack_tokenizer::harmony::reply(&g.text);
            let calls = harmony_calls(&r);
            let mut message = json!({
                "role": "assistant",
                "content": (!r.content.is_empty() || calls.is_empty()).then_some(r.content),
            });
            if !r.reasoning.is_empty() {
                message["reasoning_content"] = json!(r.reasoning);
            }
            let finish = if calls.is_empty() {
                finish.as_str()
            } else {
                message["tool_calls"] =
                    crate::tools::tool_calls_json(&calls, self.call_seed ^ index as u64);
                "tool_calls"
            };
            return json!({
                "index": index,
                "message": message,
                "logprobs": lp,
                "finish_reason": finish,
            });
        }
        let calls = self
            .tools
            .map(|f| crate::tools::parse_output(f, &g.text))
            .filter(|(_, calls)| !calls.is_empty());
        match self.kind {
            Kind::Chat if calls.is_some() => {
                let (content, calls) = calls.unwrap_or_default();
                json!({
                    "index": index,
                    "message": {
                        "role": "assistant",
                        "content": (!content.is_empty()).then_some(content),
                        "tool_calls": crate::tools::tool_calls_json(&calls, self.call_seed ^ index as u64),
                    },
                    "logprobs": lp,
                    "finish_reason": "tool_calls",
                })
            }
            Kind::Chat => json!({
                "index": index,
                "message": {"role": "assistant", "content": g.text},
                "logprobs": lp,
                "finish_reason": finish.as_str(),
            }),
            Kind::Completion => json!({
                "index": index,
                "text": g.text,
                "logprobs": lp,
                "finish_reason": finish.as_str(),
            }),
        }
    }

    /// One chunk of choice `index`: the role (`first`), text, or the end.
    fn chunk(
        &self,
        index: usize,
        delta: Option<&str>,
        first: bool,
        finish: Option<Finish>,
        logprobs: Value,
    ) -> Value {
        let fr = finish.map(Finish::as_str);
        let mut v = match self.kind {
            Kind::Chat => {
                let delta = match (first, delta) {
                    (true, _) => json!({"role": "assistant", "content": ""}),
                    (false, Some(t)) => json!({"content": t}),
                    (false, None) => json!({}),
                };
                crate::api::chat_chunk(&self.id, self.created, &self.model, delta, fr)
            }
            Kind::Completion => json!({
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": "gpack",
                "choices": [{"index": 0, "text": delta.unwrap_or(""), "logprobs": null, "finish_reason": fr}],
            }),
        };
        v["choices"][0]["index"] = json!(index);
        v["choices"][0]["logprobs"] = logprobs;
        // OpenAI: with include_usage, every chunk but the last has "usage": null.
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }
    fn usage_chunk(&self, (prompt, completion, cached): (usize, usize, usize)) -> Value {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        };
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "gpack",
            "choices": [],
            "usage": usage(prompt, completion, cached),
        })
    }
}

/// A harmony reply's calls as [`crate::tools::Call`]s.
fn harmony_calls(r: &gpack_tokenizer::harmony::Reply) -> Vec<crate::tools::Call> {
    r.calls
        .iter()
        .map(|(name, arguments)| crate::tools::Call {
            name: name.clone(),
            arguments: arguments.clone(),
        })
        .collect()
}

fn data(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The events of all choices, merged, each tagged with its choice.
type Merged = futures_util::stream::SelectAll<
    std::pin::Pin<Box<dyn futures_util::Stream<Item = (usize, Event)> + Send>>,
>;

struct Sse {
    meta: Meta,
    events: Merged,
    n: usize,
    /// Per choice: log-probabilities not sent yet, and bytes of content
    /// sent.
    pending_lp: Vec<Vec<TokenLogprob>>,
    sent: Vec<usize>,
    /// Per choice: its slot said the reply is tool calls.
    tool_calls: Vec<bool>,
    finished: usize,
    usage: (usize, usize, usize),
    started: bool,
    pending: std::collections::VecDeque<Bytes>,
    done: bool,
}

impl Sse {
    /// The chunks of what choice `i`'s reply gained (read by its slot):
    /// reasoning (`reasoning_content`), content (with the pending
    /// log-probabilities), and tool-call deltas (a call's id and name with
    /// its first arguments, then each later growth of its arguments).
    fn reply_chunks(&mut self, i: usize, d: gpack_runtime::decode::ReplyDelta) -> Vec<Value> {
        let mut out = Vec::new();
        self.tool_calls[i] |= d.tool_calls;
        if !d.reasoning.is_empty() {
            let mut c = self.meta.chunk(i, None, false, None, Value::Null);
            c["choices"][0]["delta"] = json!({ "reasoning_content": d.reasoning });
            out.push(c);
        }
        if !d.content.is_empty() {
            let lp = self.take_logprobs(i);
            self.sent[i] += d.content.len();
            out.push(self.meta.chunk(i, Some(&d.content), false, None, lp));
        }
        if !d.calls.is_empty() {
            let seed = self.meta.call_seed ^ i as u64;
            let deltas: Vec<Value> = d
                .calls
                .into_iter()
                .map(|c| match c.name {
                    Some(name) => json!({"index": c.index,
                                         "id": crate::tools::call_id(seed, c.index),
                                         "type": "function",
                                         "function": {"name": name, "arguments": c.arguments}}),
                    None => json!({"index": c.index, "function": {"arguments": c.arguments}}),
                })
                .collect();
            let mut c = self.meta.chunk(i, None, false, None, Value::Null);
            c["choices"][0]["delta"] = json!({ "tool_calls": deltas });
            out.push(c);
        }
        out
    }

    /// The pending log-probabilities of choice `i` as a chunk's field.
    fn take_logprobs(&mut self, i: usize) -> Value {
        let ts = std::mem::take(&mut self.pending_lp[i]);
        if ts.is_empty() {
            Value::Null
        } else {
            self.meta.logprobs(&ts, self.sent[i])
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        use futures_util::StreamExt;
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if self.done {
                return None;
            }
            if !self.started {
                self.started = true;
                if self.meta.kind == Kind::Chat {
                    for i in 0..self.n {
                        let c = self.meta.chunk(i, None, true, None, Value::Null);
                        self.pending.push_back(data(&c));
                    }
                }
                continue;
            }
            match self.events.next().await {
                Some((i, Event::Logprob(l))) => self.pending_lp[i].push(l),
                Some((i, Event::Reply(d))) => {
                    for c in self.reply_chunks(i, d) {
                        self.pending.push_back(data(&c));
                    }
                }
                Some((i, Event::Text(t))) => {
                    if !t.is_empty() {
                        let lp = self.take_logprobs(i);
                        self.sent[i] += t.len();
                        self.pending.push_front(data(&self.meta.chunk(
                            i,
                            Some(&t),
                            false,
                            None,
                            lp,
                        )));
                    }
                }
                Some((
                    i,
                    Event::Done {
                        finish,
                        prompt_tokens,
                        completion_tokens,
                        cached_tokens,
                    },
                )) => {
                    self.finished += 1;
                    self.usage.0 = prompt_tokens;
                    self.usage.1 += completion_tokens;
                    self.usage.2 = self.usage.2.max(cached_tokens);
                    let lp = self.take_logprobs(i);
                    let mut end = self.meta.chunk(i, None, false, Some(finish), lp);
                    if self.tool_calls[i] {
                        end["choices"][0]["finish_reason"] = json!("tool_calls");
                    }
                    self.pending.push_back(data(&end));
                    if self.finished == self.n {
                        self.done = true;
                        if self.meta.include_usage {
                            let u = self.meta.usage_chunk(self.usage);
                            self.pending.push_back(data(&u));
                        }
                        self.pending
                            .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                    }
                }
                Some((_, Event::Error(e))) => {
                    self.done = true;
                    let err = ApiError::internal(e);
                    self.pending.push_back(data(&err.body()));
                    self.pending
                        .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                }
                Some((_, Event::Shutdown)) => {
                    // Like an engine error: the error event, then the end.
                    self.done = true;
                    self.pending.push_back(data(&shut_down().body()));
                    self.pending
                        .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                }
                None => {
                    self.done = true;
                    let err = ApiError::internal("the generation ended without a result");
                    self.pending.push_back(data(&err.body()));
                }
            }
        }
    }
}

fn sse(meta: Meta, rxs: Vec<UnboundedReceiver<Event>>) -> Response {
    let n = rxs.len();
    let events = futures_util::stream::select_all(rxs.into_iter().enumerate().map(|(i, rx)| {
        let s = futures_util::stream::unfold(rx, move |mut rx| async move {
            rx.recv().await.map(|e| ((i, e), rx))
        });
        Box::pin(s) as std::pin::Pin<Box<dyn futures_util::Stream<Item = (usize, Event)> + Send>>
    }));
    let st = Sse {
        meta,
        events,
        n,
        pending_lp: vec![Vec::new(); n],
        sent: vec![0; n],
        tool_calls: vec![false; n],
        finished: 0,
        usage: (0, 0, 0),
        started: false,
        pending: Default::default(),
        done: false,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        st.next()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), st))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::key_matches;
    use super::*;
    use sha2::Digest;

    /// A chat `Meta` in harmony mode over the tiny Qwen2 fixture's tokenizer
    /// (the mapping is text-level: the vocabulary does not matter).
    fn harmony_meta() -> Meta {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let t = gpack_tokenizer::load_any(&root.join("testdata/tiny/qwen2/hf")).unwrap();
        let t: &'static gpack_tokenizer::LoadedTokenizer = Box::leak(Box::new(t));
        Meta {
            id: "chatcmpl-test".into(),
            created: 0,
            model: "m".into(),
            kind: Kind::Chat,
            include_usage: false,
            tok: t.tokenizer().unwrap(),
            tools: None,
            harmony: true,
            call_seed: 7,
        }
    }

    /// A harmony answer streamed token by token: reasoning goes out as
    /// `reasoning_content` deltas, the final channel as `content`, a call
    /// to `functions.NAME` as `tool_calls` (id and name first, then
    /// arguments); concatenated, the deltas are the non-streamed choice's
    /// fields, and that choice's finish reason is `tool_calls`.
    #[test]
    fn harmony_answers_stream_as_reasoning_content_and_calls() {
        let pieces = [
            "<|channel|>",
            "analysis",
            "<|message|>",
            "Need",
            " weather.",
            "<|end|>",
            "<|start|>",
            "assistant",
            "<|channel|>",
            "commentary",
            "<|message|>",
            "Checking",
            ".",
            "<|end|>",
            "<|start|>",
            "assistant",
            " to",
            "=functions.get_weather",
            "<|channel|>",
            "commentary",
            " json",
            "<|message|>",
            "{\"city\"",
            ":\"Paris\"}",
        ];
        let mut st = Sse {
            meta: harmony_meta(),
            events: futures_util::stream::select_all(Vec::new()),
            n: 1,
            pending_lp: vec![Vec::new()],
            sent: vec![0],
            tool_calls: vec![false],
            finished: 0,
            usage: (0, 0, 0),
            started: true,
            pending: Default::default(),
            done: false,
        };
        let (mut reasoning, mut content, mut name, mut args) =
            (String::new(), String::new(), String::new(), String::new());
        // The slot reads the reply; the stream turns its pieces into chunks.
        let mut r =
            gpack_runtime::decode::ReplyScan::new(gpack_runtime::decode::ReplyKind::Harmony);
        let mut deltas: Vec<_> = pieces.iter().map(|p| r.push(p)).collect();
        deltas.push(r.finish());
        for d in deltas {
            for c in st.reply_chunks(0, d) {
                let d = &c["choices"][0]["delta"];
                assert_eq!(c["object"], "chat.completion.chunk");
                reasoning += d["reasoning_content"].as_str().unwrap_or_default();
                content += d["content"].as_str().unwrap_or_default();
                if let Some(calls) = d["tool_calls"].as_array() {
                    assert_eq!(calls.len(), 1);
                    let f = &calls[0]["function"];
                    if let Some(n) = f["name"].as_str() {
                        assert!(name.is_empty(), "the name is sent once");
                        assert_eq!(calls[0]["type"], "function");
                        name = n.to_string();
                    }
                    args += f["arguments"].as_str().unwrap_or_default();
                }
            }
        }
        assert_eq!(reasoning, "Need weather.");
        assert_eq!(content, "Checking.");
        assert_eq!(
            (name.as_str(), args.as_str()),
            ("get_weather", "{\"city\":\"Paris\"}")
        );
        let text: String = pieces.concat();
        let c = st.meta.choice(
            0,
            Gathered {
                text,
                logprobs: Vec::new(),
            },
            Finish::Stop,
        );
        let m = &c["message"];
        assert_eq!(m["reasoning_content"], "Need weather.");
        assert_eq!(m["content"], "Checking.");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], args.as_str());
        assert_eq!(c["finish_reason"], "tool_calls");
    }

    /// The right key passes; its prefixes, extensions, a same-length key
    /// differing in one byte (first or last), other cases and the empty
    /// key are all refused.
    #[test]
    fn api_key_comparison_accepts_only_the_exact_key() {
        let key: [u8; 32] = sha2::Sha256::digest(b"s3cret-key").into();
        assert!(key_matches(&key, "s3cret-key"));
        for wrong in [
            "",
            "s",
            "s3cret",
            "s3cret-ke",
            "s3cret-key ",
            "s3cret-keyy",
            "s3cret-key\0",
            "s3cret-kez",
            "t3cret-key",
            "S3CRET-KEY",
            " s3cret-key",
        ] {
            assert!(!key_matches(&key, wrong), "{wrong:?} accepted");
        }
        // The digest compared, not a prefix of it: a key whose digest
        // shares the first bytes is still refused.
        let mut near = key;
        near[31] ^= 1;
        assert!(!key_matches(&near, "s3cret-key"));
        let mut near = key;
        near[0] ^= 0x80;
        assert!(!key_matches(&near, "s3cret-key"));
    }
}
