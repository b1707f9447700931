//! `gpack run`: generate text from a .gpack, .gguf or Hugging Face directory.

use anyhow::{bail, Context, Result};
use gpack_format::SectionKind;
use gpack_runtime::decode::{Constraint, ConstraintError, Grammars, TokenLogprob};
use gpack_runtime::decode::{Emitted, Slot, MAX_CONSTRAINT_BYTES};
use gpack_runtime::kvcache::{CacheOptions, PrefixCache};
use gpack_runtime::Loaded;
use gpack_runtime::{
    generate_slot_from, Drafter, ExpertMode, GenerateConfig, LoadOptions, Model, ModelDrafter, Mtp,
    MtpDrafter, NgramDrafter, PleMode, SamplerConfig, SpecMode, Threads,
};
use gpack_tokenizer::ChatMessage;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Generate text from a model, streaming tokens to stdout.
///
/// MODEL is a .gpack (mapped and run in place: no weight is copied, no
/// tokenizer text is parsed), a .gguf or a Hugging Face directory (the slow
/// path: weights are transcoded in memory at load). A summary with load time,
/// prompt and generation speed goes to stderr.
///
/// If a .gpack fails its quick validation and --fallback-gguf is given, a
/// warning names the validation error and the GGUF is run instead; without a
/// fallback the exact error is reported and nothing runs.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpack run smollm2.gpack -p \"The capital of France is\" -n 32
  gpack run smollm2.gpack --chat -p \"What is 2+2?\"
  gpack run smollm2.gpack --fallback-gguf SmolLM2-135M-Instruct.Q4_1.gguf -p Hi
  gpack run qwen3moe.gpack --expert-cache-bytes 8G --verbose -p Hello
  gpack run qwen3moe.gpack --expert-mmap -p Hello
  gpack run gemma3n.gpack --ple-cache 4096x8 --verbose -p Hello

Mixture-of-experts models (qwen3moe, mixtral) read their routed experts from
the .gpack (embedded) or from the GGUF shards next to it (--external-experts
conversions; each slice's SHA-256 is checked the first time it is used), either
through a resident cache (default) or in place (--expert-mmap). Both give the
same tokens.

Gemma 3n reads one row of its per-layer embedding (PLE) table per token: from a
.gpack by direct I/O (O_DIRECT, bypassing the page cache) behind a
set-associative row cache (default), or through a mapping (--ple-mmap). Both
give the same tokens.")]
pub struct Args {
    /// The model: .gpack, .gguf, a Hugging Face directory, or a registry
    /// reference host[:port]/repo[:tag] (pulled into the local store once,
    /// as `gpack pull` does; see `gpack ls`).
    model: PathBuf,
    #[command(flatten)]
    registry: super::RegistryArgs,
    /// The prompt (or the user message, with --chat).
    #[arg(short, long)]
    prompt: String,
    /// Tokens to generate at most.
    #[arg(short = 'n', long, default_value_t = 128)]
    n_predict: usize,
    /// Apply the model's chat template to the prompt.
    #[arg(long)]
    chat: bool,
    /// A system message (with --chat).
    #[arg(long)]
    system: Option<String>,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    /// Keep the K most likely tokens (0 = all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Nucleus sampling threshold.
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Drop tokens less likely than MIN_P times the most likely one (0 = off).
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Lower a token's logit once it has been generated (OpenAI's
    /// presence_penalty, −2..2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    presence_penalty: f32,
    /// Lower a token's logit per time it has been generated (OpenAI's
    /// frequency_penalty, −2..2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    frequency_penalty: f32,
    /// Stop at this string (not printed); repeat for several.
    #[arg(long, value_name = "TEXT")]
    stop: Vec<String>,
    /// Constrain the output to this JSON schema: inline JSON, or @FILE.
    #[arg(long, value_name = "SCHEMA", conflicts_with = "grammar")]
    json_schema: Option<String>,
    /// Constrain the output to a grammar in llguidance's Lark syntax: the
    /// text, or @FILE.
    #[arg(long, value_name = "GRAMMAR")]
    grammar: Option<String>,
    /// Also print each generated token's log-probability and the N most
    /// likely alternatives, one JSON object per line on stderr after the
    /// text: {"token": ID, "text": "…", "logprob": LP, "top": [[ID, "…",
    /// LP], …]} (natural log of the model's own distribution, before
    /// penalties and grammar masks, as OpenAI reports it).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "0")]
    logprobs: Option<usize>,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Threads the model runs on, the calling one included (also
    /// GPACK_THREADS; a draft model or MTP block shares them). Default: one
    /// per logical CPU the process may use.
    #[arg(long)]
    threads: Option<usize>,
    /// Context size (KV cache positions).
    #[arg(long, default_value_t = 2048)]
    ctx: usize,
    /// A GGUF to run if MODEL (a .gpack) fails validation.
    #[arg(long)]
    fallback_gguf: Option<PathBuf>,
    /// With a .gguf MODEL: run from its prequantized sidecar
    /// `<model>.<QUANT>.cpu.giw` next to it (int8int8 by default), built once
    /// (atomically) when missing, rebuilt with a warning when invalid or older
    /// than the .gguf, reused otherwise.
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
    /// A KV cache directory (as `gpack serve --kv-cache-dir`): the
    /// prompt's longest prefix held there is restored instead of computed,
    /// and its full blocks of 64 positions are written there afterwards
    /// (verified files, shared with servers and other runs of the same
    /// .gpack; `gpack cache ls|clear DIR`).
    #[arg(long, value_name = "DIR", conflicts_with = "prompt_cache")]
    kv_cache_dir: Option<PathBuf>,
    /// Disk budget of --kv-cache-dir (least recently used blocks removed beyond it).
    #[arg(long, value_name = "SIZE", default_value = "10G", value_parser = super::parse_size_u64, requires = "kv_cache_dir")]
    kv_cache_disk_bytes: u64,
    /// A file keeping the prompt's KV cache (as llama-cli's
    /// --prompt-cache): restored from when it holds a prefix of this
    /// prompt for this model and settings (checked: digests, SHA-256 per
    /// block), rewritten atomically with this prompt's full blocks after.
    /// One file per prompt family; `gpack inspect FILE` shows it.
    #[arg(long, value_name = "FILE")]
    prompt_cache: Option<PathBuf>,
    #[command(flatten)]
    device: super::DeviceArgs,
    /// When a .gpack's sections are checked against their SHA-256 digests:
    /// `background` (default) hashes them on one thread from the first
    /// generated token on (never delaying it) and waits for the verdict at
    /// the end; `before` hashes them on every core before loading; `off`
    /// trusts the file. On a mismatch, generation stops and gpack exits 1
    /// naming the damaged section. (GGUF/HF/GIW inputs carry no digests.)
    #[arg(long, value_name = "WHEN", default_value = "background")]
    verify: gpack_runtime::VerifyMode,
    /// Print the model's family and the features of it in use after
    /// loading; at the end, also the expert cache's hit rate and expert
    /// bytes read per token (MoE models), and the PLE row cache's hit rate.
    #[arg(short, long)]
    verbose: bool,
}

/// `12.3 MiB` style.
fn human(bytes: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", units[i])
}

/// The `--verbose` cache report.
fn report_caches(model: &Model, loaded: &Loaded) {
    match (model.expert_stats(), model.expert_mode()) {
        (Some(st), Some(mode)) => {
            let read = format!(
                "{} of expert weights read per token (all experts: {})",
                human(st.bytes_per_token()),
                human(model.expert_bytes() as f64)
            );
            match mode {
                ExpertMode::Mmap | ExpertMode::Auto => {
                    eprintln!("experts: mmap, read in place; {read}")
                }
                ExpertMode::Resident { cache_bytes } => eprintln!(
                    "experts: resident cache hit rate {:.1} % ({} hits, {} misses, {} evictions), \
                     {} in {} experts cached of a {} budget; {read}",
                    st.hit_rate() * 100.0,
                    st.hits,
                    st.misses,
                    st.evictions,
                    human(st.resident_bytes as f64),
                    st.resident_experts,
                    human(cache_bytes as f64),
                ),
            }
        }
        _ => eprintln!("experts: none (a dense model)"),
    }
    match model.ple_stats() {
        Some(st) => {
            let per_token = format!(
                "{} rows read ({} per row)",
                st.rows_read,
                human(st.row_bytes as f64)
            );
            match st.mode {
                PleMode::Direct {
                    sets,
                    ways,
                    o_direct,
                } => eprintln!(
                    "PLE: row cache hit rate {:.1} % ({} hits, {} misses; {sets}x{ways} rows, {}), {per_token}",
                    st.cache.hit_rate() * 100.0,
                    st.cache.hits,
                    st.cache.misses,
                    if o_direct {
                        "direct I/O"
                    } else {
                        "buffered reads: no O_DIRECT here"
                    },
                ),
                PleMode::Mmap => eprintln!("PLE: mmap, no row cache; {per_token}"),
                PleMode::Tensor => eprintln!(
                    "PLE: read in place from the model file's tensor (no row cache; a .gpack keeps the table apart); {per_token}"
                ),
            }
        }
        None => {
            let has_ple = matches!(loaded, Loaded::Gpack { weights, .. }
                if weights.gpack().section(SectionKind::Ple).is_some());
            if has_ple {
                eprintln!(
                    "PLE: the file has a per-layer embedding table, but the {} graph does not read it (no row cache used)",
                    model.config.arch.name()
                );
            } else {
                eprintln!("PLE: none in this model");
            }
        }
    }
}

/// The prefix cache `--kv-cache-dir` or `--prompt-cache` ask for.
fn prefix_cache(
    a: &Args,
    model: &Model<'_>,
    loaded: &Loaded,
    spec: SpecMode,
) -> Result<Option<PrefixCache>> {
    if a.kv_cache_dir.is_none() && a.prompt_cache.is_none() {
        return Ok(None);
    }
    if spec == SpecMode::Mtp {
        bail!("--kv-cache-dir/--prompt-cache do not work with --spec mtp yet (its drafter needs the hidden states of every cached position)");
    }
    let opts = CacheOptions {
        memory_bytes: 0,
        dir: a.kv_cache_dir.clone().map(|d| (d, a.kv_cache_disk_bytes)),
    };
    let name = a.model.display().to_string();
    let c = PrefixCache::new(model, loaded.identity(), &name, &opts)?;
    // A prompt cache file, like a directory, needs the model's digest.
    if loaded.identity().is_none() {
        return Err(gpack_runtime::kvcache::KvCacheError::NoDigest(name).into());
    }
    Ok(Some(c))
}

pub fn run(a: Args) -> Result<ExitCode> {
    let opts = super::load_options(&a.experts, &a.ple, a.threads)?;
    // Warnings (a .gpack falling back to its GGUF) go to stderr.
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format(|buf, rec| {
            use std::io::Write;
            let level = match rec.level() {
                log::Level::Error => "error",
                log::Level::Warn => "warning",
                _ => "note",
            };
            writeln!(buf, "{level}: {}", rec.args())
        })
        .try_init();
    let t0 = Instant::now();
    // The process ends with the generation: the model is kept for its
    // lifetime (a grammar's tokenizer callback must be able to outlive any
    // borrow).
    let loaded: &'static Loaded = Box::leak(Box::new(super::open_model(
        &a.model,
        a.fallback_gguf.as_deref(),
        a.stream_weights.as_deref(),
        &a.registry,
    )?));
    if a.verify == gpack_runtime::VerifyMode::Before {
        gpack_runtime::integrity::verify_now(loaded)?;
    }
    let opts = a.device.apply(LoadOptions {
        kv: a.kv.types(),
        context: a.ctx,
        ..opts
    });
    let model = Model::load_with(loaded.weights(), &opts)?;
    // A draft model and the MTP block run on the model's threads.
    let opts = LoadOptions {
        threads: Threads::Shared(model.pool().clone()),
        ..opts
    };
    if a.verbose {
        match model.gpu_summary() {
            Some(g) => eprintln!("device: GPU {g}"),
            None => eprintln!("device: cpu"),
        }
        eprintln!("family: {}", model.config.arch.name());
        for f in model.config.features() {
            eprintln!("  {f}");
        }
    }
    let tok = loaded.tokenizer()?;
    let packed = match loaded.packed_draft() {
        Some(d) => Some(d.context("reading the draft model packed in the Mtp section")?),
        None => None,
    };
    let spec_mode = a.spec.mode(packed.is_some())?;
    // The draft model of --spec draft: --draft's (same vocabulary, checked
    // here), else the packed one (checked at convert).
    let draft_loaded = match (&a.spec.draft, spec_mode) {
        (Some(p), SpecMode::Draft) => Some(
            super::open_model(p, None, None, &a.registry)
                .with_context(|| format!("opening the draft model {}", p.display()))?,
        ),
        _ => None,
    };
    if let (Some(d), Some(p)) = (&draft_loaded, &a.spec.draft) {
        if let Some(id) = tok.vocab_difference(&d.tokenizer()?) {
            bail!(
                "the draft model {} has another vocabulary than {} (token {id} differs): \
                 a draft model must share its target's tokenizer",
                p.display(),
                a.model.display()
            );
        }
    }
    let draft_model = match (&draft_loaded, &packed, spec_mode) {
        (Some(d), _, _) => Some(Model::load_with(d.weights(), &opts)?),
        (None, Some(d), SpecMode::Draft) => Some(
            Model::load_with(d, &opts)
                .context("loading the draft model packed in the Mtp section")?,
        ),
        _ => None,
    };
    // --spec mtp: the model's own multi-token-prediction block.
    let mtp_weights = match spec_mode {
        SpecMode::Mtp => Some(super::mtp_weights(&model, loaded.weights(), &a.model)?),
        _ => None,
    };
    let mtp = match &mtp_weights {
        Some(w) => Some(Mtp::load(w, &opts).context("loading the multi-token-prediction block")?),
        None => None,
    };
    let load_time = t0.elapsed();
    let anon_after_load = rss_anon_kib();

    let prompt_ids = if a.chat {
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(ChatMessage::new("system", s.as_str()));
        }
        msgs.push(ChatMessage::new("user", a.prompt.as_str()));
        let text = tok
            .apply_chat_template(&msgs, true)
            .context("rendering the chat template")?;
        tok.encode(&text, false)
    } else {
        tok.encode(&a.prompt, true)
    };
    let mut state = model.new_state(a.ctx);
    if a.stop.iter().any(String::is_empty) {
        bail!("--stop must not be empty");
    }
    let cfg = GenerateConfig {
        max_tokens: a.n_predict,
        sampler: SamplerConfig {
            temperature: a.temp,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            seed: a.seed,
            ..SamplerConfig::default()
        },
        // The one end-of-turn rule (EOS, the chat formats' end tokens, the
        // template's end markers), as `serve` uses.
        stop_tokens: tok.stop_ids(),
        stop_strings: a.stop.clone(),
        presence_penalty: a.presence_penalty,
        frequency_penalty: a.frequency_penalty,
        logprobs: a.logprobs,
        ..GenerateConfig::default()
    };
    let mut slot = Slot::new(&prompt_ids, cfg, Some(tok));
    if let Some(c) = constraint(a.json_schema.as_deref(), a.grammar.as_deref())? {
        let grammars = Grammars::of(tok, tok.stop_ids().first().copied().unwrap_or(0));
        let guide = grammars.compile(tok, &c).map_err(|e| match e {
            ConstraintError::Invalid { message, .. } => anyhow::anyhow!(
                "{}: {message}",
                if a.grammar.is_some() {
                    "--grammar"
                } else {
                    "--json-schema"
                }
            ),
            e => e.into(),
        })?;
        slot = slot.with_guide(Box::new(guide));
    }
    let mut out = std::io::stdout().lock();
    let mut harmony =
        (a.chat && gpack_tokenizer::harmony::is_harmony(&tok)).then(HarmonyText::default);
    let mut write_err = None;
    let mut check: Option<gpack_runtime::Integrity> = None;
    let mut damaged = None;
    let mut ngram = NgramDrafter::with_max_draft(a.spec.draft_max);
    let mut by_model = draft_model
        .as_ref()
        .map(|m| ModelDrafter::new(m, a.ctx, a.spec.draft_max, a.spec.draft_p_min));
    let mut by_mtp = mtp
        .as_ref()
        .map(|m| MtpDrafter::new(m, a.ctx, a.spec.draft_max, a.spec.draft_p_min));
    let drafter: Option<&mut dyn Drafter> = match spec_mode {
        SpecMode::None => None,
        SpecMode::Ngram => Some(&mut ngram),
        SpecMode::Draft => by_model.as_mut().map(|d| d as &mut dyn Drafter),
        SpecMode::Mtp => by_mtp.as_mut().map(|d| d as &mut dyn Drafter),
    };
    // The prefix cache (--kv-cache-dir, --prompt-cache): positions restored.
    let mut prefix = prefix_cache(&a, &model, loaded, spec_mode)?;
    let cached = match (&mut prefix, &a.prompt_cache) {
        (Some(p), Some(f)) => p
            .restore_file(&model, state.sequence_mut(), &prompt_ids, f)
            .unwrap_or_else(|why| {
                log::warn!("the prompt cache is not used (it is rewritten): {why}");
                0
            }),
        (Some(p), None) => p.restore(&model, state.sequence_mut(), &prompt_ids, 0),
        (None, _) => 0,
    };
    let g = generate_slot_from(
        &model,
        &mut state,
        slot,
        cached,
        drafter,
        |e: &Emitted<'_>| {
            let text = e.text;
            {
                // The first token is out: start hashing; later, stop as soon
                // as a section failed.
                if a.verify == gpack_runtime::VerifyMode::Background {
                    match &check {
                        None => check = gpack_runtime::Integrity::start(loaded),
                        Some(c) => {
                            if let Some(m) = c.failure() {
                                damaged = Some(m);
                                return false;
                            }
                        }
                    }
                }
                let written = match harmony.as_mut() {
                    // Harmony (gpt-oss) with --chat: the analysis channel goes
                    // to stderr (dimmed on a terminal), the answer to stdout.
                    Some(h) => {
                        let (reasoning, content) = h.push(text);
                        let mut err = std::io::stderr().lock();
                        let dim = err.is_terminal();
                        let r = if reasoning.is_empty() {
                            Ok(())
                        } else if dim {
                            write!(err, "\x1b[2m{reasoning}\x1b[0m")
                        } else {
                            write!(err, "{reasoning}")
                        };
                        r.and_then(|()| out.write_all(content.as_bytes()))
                            .and_then(|()| out.flush())
                    }
                    None => out.write_all(text.as_bytes()).and_then(|()| out.flush()),
                };
                match written {
                    Ok(()) => true,
                    Err(e) => {
                        write_err = Some(e);
                        false
                    }
                }
            }
        },
    )?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    writeln!(out)?;
    if let Some(p) = &mut prefix {
        let mut held = prompt_ids.clone();
        held.extend_from_slice(&g.tokens);
        held.truncate(state.pos());
        match &a.prompt_cache {
            // The prompt's blocks only (as llama-cli's --prompt-cache).
            Some(f) => {
                if let Err(e) = p.save_file(&model, state.sequence(), &prompt_ids, f) {
                    log::warn!("the prompt cache {} was not written: {e}", f.display());
                }
            }
            None => {
                p.publish(&model, state.sequence(), &held, 0);
                p.flush();
            }
        }
    }
    if a.logprobs.is_some() {
        print_logprobs(&g.logprobs, tok)?;
    }
    // No token produced (an empty reply): check now, so the verdict stands
    // for every run.
    if check.is_none() && a.verify == gpack_runtime::VerifyMode::Background {
        check = gpack_runtime::Integrity::start(loaded);
    }
    if let Some(c) = &check {
        if let gpack_runtime::integrity::Status::Failed(m) = c.wait() {
            damaged = Some(m);
        }
    }
    if let Some(m) = damaged {
        return Err(m.into());
    }
    let reused = if g.cached_tokens > 0 {
        format!(" ({} restored from the KV cache)", g.cached_tokens)
    } else {
        String::new()
    };
    eprintln!(
        "load {:.1} ms · prompt {} tokens{reused} at {:.1} tok/s · generated {} tokens at {:.1} tok/s",
        load_time.as_secs_f64() * 1e3,
        g.prompt_tokens,
        g.prefill_tps(),
        g.tokens.len(),
        g.decode_tps()
    );
    if let (Some(anon), Loaded::Gpack { weights: w, .. }) = (anon_after_load, loaded) {
        eprintln!(
            "memory after load: {:.1} MiB anonymous; {:.1} MiB of weights mapped from the file",
            anon as f64 / 1024.0,
            w.gpack().bytes().len() as f64 / 1048576.0
        );
    }
    if a.verbose {
        report_caches(&model, loaded);
        if let Some(gi) = model.gpu_info() {
            eprintln!(
                "device: {} GPU steps, {} queue submission(s) in the last one",
                gi.steps, gi.last_step_submissions
            );
        }
        if spec_mode == SpecMode::None {
            eprintln!("speculation: none");
        } else {
            eprintln!(
                "speculation: {}, {} drafted, {} accepted ({:.1} %), {} checks ({:.2} tokens per forward)",
                spec_mode.name(),
                g.spec.drafted,
                g.spec.accepted,
                g.spec.acceptance() * 100.0,
                g.spec.verify_steps,
                g.tokens.len() as f64
                    / (g.tokens.len() as u64 - g.spec.accepted).max(1) as f64
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The constraint of `--json-schema` / `--grammar` (`@FILE` reads a file).
fn constraint(schema: Option<&str>, grammar: Option<&str>) -> Result<Option<Constraint>> {
    let text = |v: &str, flag: &str| -> Result<String> {
        let s = match v.strip_prefix('@') {
            Some(path) => {
                std::fs::read_to_string(path).with_context(|| format!("{flag}: reading {path}"))?
            }
            None => v.to_string(),
        };
        if s.len() > MAX_CONSTRAINT_BYTES {
            bail!(
                "{flag}: {} bytes; at most {MAX_CONSTRAINT_BYTES} are accepted",
                s.len()
            );
        }
        Ok(s)
    };
    if let Some(v) = schema {
        let s = text(v, "--json-schema")?;
        let schema: serde_json::Value = serde_json::from_str(&s)
            .with_context(|| "--json-schema is not valid JSON".to_string())?;
        return Ok(Some(Constraint::JsonSchema(schema)));
    }
    match grammar {
        Some(v) => Ok(Some(Constraint::Lark(text(v, "--grammar")?))),
        None => Ok(None),
    }
}

/// `--logprobs`: one JSON object per generated token on stderr.
fn print_logprobs(lps: &[TokenLogprob], tok: gpack_tokenizer::Tokenizer<'_>) -> Result<()> {
    let piece = |id: u32| String::from_utf8_lossy(&tok.token_piece(id)).into_owned();
    let mut err = std::io::stderr().lock();
    for t in lps {
        let top: Vec<serde_json::Value> = t
            .top
            .iter()
            .map(|&(id, lp)| serde_json::json!([id, piece(id), lp]))
            .collect();
        let line = serde_json::json!({
            "token": t.id, "text": piece(t.id), "logprob": t.logprob, "top": top,
        });
        writeln!(err, "{line}")?;
    }
    Ok(())
}

/// Anonymous resident memory of this process (`RssAnon`), in KiB.
fn rss_anon_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("RssAnon:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A harmony answer as it streams: each call returns what its reasoning and
/// content gained ([`gpack_tokenizer::harmony::reply`] of the text so far).
#[derive(Default)]
struct HarmonyText {
    text: String,
    reasoning: usize,
    content: usize,
}

impl HarmonyText {
    fn push(&mut self, t: &str) -> (String, String) {
        self.text.push_str(t);
        let r = gpack_tokenizer::harmony::reply(&self.text);
        let new = |s: &str, at: &mut usize| {
            let n = s.get(*at..).unwrap_or_default().to_string();
            *at = s.len();
            n
        };
        (
            new(&r.reasoning, &mut self.reasoning),
            new(&r.content, &mut self.content),
        )
    }
}
