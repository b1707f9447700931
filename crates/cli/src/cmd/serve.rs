//! `gpack serve`: an OpenAI-compatible HTTP server (see the gpack-server crate).

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;

/// Serve a model over HTTP with the OpenAI API.
///
/// Endpoints: GET / (a chat page: streaming answers, model and sampling
/// settings, tokens/s per answer; built into the binary), GET /health,
/// GET /livez (200 while the process answers), GET /readyz (200 while it
/// serves; 503 while the model loads, from SIGTERM on, or when /health
/// fails),
/// GET /v1/models, GET /metrics (Prometheus), POST /v1/embeddings (final
/// hidden states pooled by mean, or last token when the model's metadata
/// says so, L2-normalized; float or base64),
/// POST /v1/chat/completions, POST /v1/completions (both with "stream": true
/// as server-sent events). --parallel sequences are decoded together, one
/// batched forward step per token; up to --queue more requests wait, and
/// beyond that requests get 503 with Retry-After. The port answers from
/// the start: /livez 200, /readyz and every other route 503 until the model
/// is loaded (and verified, with --verify before). SIGTERM turns /readyz
/// 503, keeps serving for --drain-grace, then stops accepting connections,
/// lets the requests in flight finish for up to --drain-timeout, ends those
/// still generating (their responses end with an error, code
/// server_shutting_down) and exits 0; Ctrl-C skips the grace.
///
/// Structured outputs: "response_format": {"type": "json_object"} or
/// {"type": "json_schema", "json_schema": {"schema": {...}}}, or the
/// extension "grammar": "<Lark grammar>" (llguidance's syntax), on both
/// generation endpoints; the output is decoded under the grammar's token
/// mask (greedy requests compute it only when the grammar refuses the
/// model's own token; each mask's cost is /metrics'
/// gpack_grammar_mask_seconds). A schema or grammar the engine
/// refuses is a 400 naming the parameter.
///
/// Also: "logprobs" (chat: true, with "top_logprobs" up to 20; completions:
/// the number of alternatives), "n" up to 8 choices (each its own seed and
/// slot), "presence_penalty" / "frequency_penalty" (-2..2, OpenAI's
/// formula over the generated tokens), and "stream_options":
/// {"include_usage": true}.
///
/// Tool calling: "tools" and "tool_choice" (auto, none, required, or
/// {"type": "function", "function": {"name": ...}}) are rendered by the
/// model's chat template (or --chat-template); the model's tool-call text
/// comes back as "tool_calls" (streamed as deltas), finish_reason
/// "tool_calls"; required and named choices are decoded under a grammar of
/// the call. Send results back as {"role": "tool", "tool_call_id", "content"}.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpack serve smollm2.gpack --port 8080
  gpack serve smollm2.gpack --parallel 8 --ctx 4096 --api-key secret
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":32}'
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Alice is 30\"}],
         \"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",
         \"schema\":{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\"}}}}}}'
  curl http://127.0.0.1:8080/v1/completions -H 'Content-Type: application/json' \\
    -d '{\"prompt\":\"Is the sky blue?\",\"grammar\":\"start: \\\"yes\\\" | \\\"no\\\"\"}'")]
pub struct Args {
    /// The model: .gpack, .gguf, a Hugging Face directory, or a registry
    /// reference host[:port]/repo[:tag] (pulled into the local store once,
    /// as `gpack pull` does; see `gpack ls`).
    model: PathBuf,
    #[command(flatten)]
    registry: super::RegistryArgs,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Address to bind (only this machine unless told otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Sequences decoded together (batched).
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Context per sequence (prompt + reply), in tokens.
    #[arg(long, default_value_t = 2048)]
    ctx: usize,
    /// Requests that may wait for a free sequence before 503.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Require "Authorization: Bearer KEY" (all endpoints but /health,
    /// /livez, /readyz and the chat page).
    /// Default: the GPACK_API_KEY environment variable, if set (keeps the key
    /// out of the process list).
    #[arg(long)]
    api_key: Option<String>,
    /// Serve /metrics without the API key on the API port (for a scraper
    /// on a trusted network; with --api-key, /metrics otherwise needs the
    /// key, and is never opened silently).
    #[arg(long)]
    metrics_public: bool,
    /// Also serve /metrics (only it), without the API key, on this port of
    /// --host: the scraper's port, apart from the API's.
    #[arg(long, value_name = "PORT")]
    metrics_port: Option<u16>,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_body: usize,
    /// Model name reported by the API (default: the file name's stem).
    #[arg(long)]
    name: Option<String>,
    /// Threads the model runs on, the calling one included (also
    /// GPACK_THREADS; a draft model or MTP block shares them). Default: one
    /// per logical CPU the process may use.
    #[arg(long)]
    threads: Option<usize>,
    /// A GGUF to serve if MODEL (a .gpack) fails validation.
    #[arg(long)]
    fallback_gguf: Option<PathBuf>,
    /// With a .gguf MODEL: serve from its prequantized sidecar
    /// `<model>.<QUANT>.cpu.giw` next to it (int8int8 by default), built once
    /// when missing or stale, reused otherwise (as `gpack run`).
    #[arg(long, value_name = "QUANT", num_args = 0..=1, default_missing_value = "int8int8")]
    stream_weights: Option<String>,
    #[command(flatten)]
    experts: super::ExpertArgs,
    #[command(flatten)]
    ple: super::PleArgs,
    #[command(flatten)]
    spec: super::SpecArgs,
    #[command(flatten)]
    kv: super::KvArgs,
    #[command(flatten)]
    kv_cache: super::KvCacheArgs,
    #[command(flatten)]
    device: super::DeviceArgs,
    /// When a .gpack's sections are checked against their SHA-256 digests:
    /// `background` (default) hashes them on one thread once the first
    /// token (or embedding) is out; `before` hashes them on every core before loading (a
    /// mismatch is a start-up error); `off` trusts the file. After a failed
    /// background check `/health` answers 503 naming the damaged section and
    /// generation requests are refused with 503.
    #[arg(long, value_name = "WHEN", default_value = "background")]
    verify: gpack_runtime::integrity::VerifyMode,
    /// Seconds a client has to send a request's headers; also how long a
    /// keep-alive connection may stay idle. Slow or silent connections are
    /// closed after it.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    header_timeout: f64,
    /// Seconds a client has to send a request's body once its headers are in
    /// (408 after).
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    body_timeout: f64,
    /// Open connections at most; beyond, new ones wait to be accepted.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_connections: usize,
    /// Seconds in-flight requests get to finish once the listener has
    /// closed (after --drain-grace on SIGTERM, at once on Ctrl-C);
    /// generations still running then are ended with an error.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    drain_timeout: f64,
    /// Seconds after SIGTERM during which new requests are still served
    /// (GET /readyz already answers 503), so that the load balancer drops
    /// this replica before it refuses anything; 0: none. A second signal
    /// ends the window. Set terminationGracePeriodSeconds above
    /// --drain-grace + --drain-timeout + 1 (docs/DEPLOY.md).
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    drain_grace: f64,
    /// A Jinja chat template file used instead of the model's own (e.g. a
    /// model family's tool-calling template); the tool-call format
    /// (Hermes/Qwen <tool_call>, Llama 3 JSON, Mistral [TOOL_CALLS]) is read
    /// from the template in use.
    #[arg(long, value_name = "FILE")]
    chat_template: Option<PathBuf>,
}

/// A positive, finite number of seconds.
fn secs(what: &str, v: f64) -> Result<std::time::Duration> {
    if !(v.is_finite() && v > 0.0 && v < 1e9) {
        bail!("--{what} must be a positive number of seconds, got {v}");
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

pub fn run(a: Args) -> Result<ExitCode> {
    let load = super::load_options(&a.experts, &a.ple, a.threads)?;
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .try_init();
    let t0 = std::time::Instant::now();
    let mut opts = gpack_server::Options {
        host: a.host,
        port: a.port,
        parallel: a.parallel,
        ctx: a.ctx,
        queue: a.queue,
        api_key: a.api_key.or_else(|| {
            std::env::var("GPACK_API_KEY")
                .ok()
                .filter(|k| !k.is_empty())
        }),
        metrics_public: a.metrics_public,
        metrics_port: a.metrics_port,
        max_body_bytes: a.max_body,
        model_name: a.name,
        load: a.device.apply(gpack_runtime::LoadOptions {
            kv: a.kv.types(),
            context: a.ctx,
            sequences: a.parallel,
            ..load
        }),
        verify: a.verify,
        header_timeout: secs("header-timeout", a.header_timeout)?,
        body_timeout: secs("body-timeout", a.body_timeout)?,
        max_connections: if a.max_connections == 0 {
            bail!("--max-connections must be at least 1")
        } else {
            a.max_connections
        },
        drain_timeout: secs("drain-timeout", a.drain_timeout)?,
        drain_grace: if a.drain_grace.is_finite() && (0.0..1e9).contains(&a.drain_grace) {
            std::time::Duration::from_secs_f64(a.drain_grace)
        } else {
            bail!(
                "--drain-grace must be 0 or a positive number of seconds, got {}",
                a.drain_grace
            )
        },
        draft: a.spec.draft.clone(),
        draft_max: a.spec.draft_max,
        draft_p_min: a.spec.draft_p_min,
        chat_template: a
            .chat_template
            .as_deref()
            .map(|p| {
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading the chat template {}", p.display()))
            })
            .transpose()?,
        kv_cache_bytes: a.kv_cache.kv_cache_bytes,
        kv_cache_dir: a
            .kv_cache
            .kv_cache_dir
            .clone()
            .map(|d| (d, a.kv_cache.kv_cache_disk_bytes)),
        ..gpack_server::Options::default()
    };
    // The listener answers /livez and /readyz (503) while the model is
    // opened (pulled, transcoded), verified and bound: a startup probe
    // covers all of it.
    let listening = gpack_server::Listening::bind(&opts).context("serving")?;
    eprintln!(
        "gpack serve: bound http://{} (loading the model; /readyz answers 200 once it is served)",
        listening.local_addr()
    );
    // No context naming the model: the errors of opening it name it (once).
    let loaded = super::open_model(
        &a.model,
        a.fallback_gguf.as_deref(),
        a.stream_weights.as_deref(),
        &a.registry,
    )?;
    opts.spec = a.spec.mode(loaded.packed_draft().is_some())?;
    let parallel = opts.parallel;
    listening
        .serve(loaded, opts, |addr| {
            eprintln!(
                "gpack serve: listening on http://{addr} ({parallel} slots, loaded in {:.0} ms)",
                t0.elapsed().as_secs_f64() * 1e3
            );
        })
        .context("serving")?;
    eprintln!("gpack serve: drained, bye");
    Ok(ExitCode::SUCCESS)
}
