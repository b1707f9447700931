//! One module per subcommand.

pub mod bench;
pub mod cache;
pub mod convert;
pub mod devices;
pub mod export;
pub mod imatrix;
pub mod inspect;
pub mod ls;
pub mod perplexity;
pub mod prequant;
pub mod pull;
pub mod push;
pub mod rm;
pub mod run;
pub mod serve;
pub mod tokenize;
pub mod verify;

/// Prints a JSON value to stdout, pretty, with a trailing newline.
pub fn print_json(v: &serde_json::Value) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

/// Opens the .gpack a command reads, naming it once: an I/O error already
/// names the file (`open X: …`); any other (a malformed file) gets `X: ` in
/// front.
pub fn open_gpack(path: &std::path::Path) -> anyhow::Result<gpack_format::Gpack> {
    gpack_format::Gpack::open(path).map_err(|e| match e {
        e @ gpack_format::Error::Io { .. } => e.into(),
        e => anyhow::Error::new(e).context(path.display().to_string()),
    })
}

/// `--quant` of `convert` and `prequant`: the one vocabulary of
/// [`gpack_convert::Quant`] (the policy in `gpack_convert::policy` says what
/// each name means for either container): gpack's own names (keep, int8,
/// int8int8, int4) exactly, llama-quantize's types (Q4_K_M, …) in any case.
/// An unknown name is refused with the list of valid ones.
pub fn quant_parser() -> impl clap::builder::TypedValueParser<Value = gpack_convert::Quant> {
    |s: &str| s.parse::<gpack_convert::Quant>()
}

/// Routed-expert flags of `run` and `serve` (MoE models; ignored otherwise).
#[derive(clap::Args, Debug, Clone)]
pub struct ExpertArgs {
    /// MoE models: the kernels read routed experts in place from the mapped
    /// file, nothing copied (also GPACK_EXPERT_MMAP=1). Default: so, except
    /// for --external-experts files, whose ggml rows are transcoded once into a resident cache the
    /// first time a token is routed to them.
    #[arg(long, conflicts_with = "expert_cache_bytes")]
    pub expert_mmap: bool,
    /// MoE models: byte budget of the resident expert cache (e.g. 512M, 8G);
    /// beyond it the least recently used experts are evicted (also
    /// GPACK_EXPERT_CACHE_BYTES; the default cache, for experts in ggml's
    /// rows, is 4G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub expert_cache_bytes: Option<usize>,
}

impl ExpertArgs {
    /// How routed experts are read: the flags, else `env` (the
    /// environment's, [`load_options`]).
    pub fn mode(&self, env: gpack_runtime::ExpertMode) -> gpack_runtime::ExpertMode {
        use gpack_runtime::ExpertMode;
        if self.expert_mmap {
            return ExpertMode::Mmap;
        }
        match self.expert_cache_bytes {
            Some(cache_bytes) => ExpertMode::Resident { cache_bytes },
            None => env,
        }
    }
}

/// The `--kv` choices, listed by `--help` and by the error for any other.
fn kv_type_parser() -> impl clap::builder::TypedValueParser<Value = gpack_runtime::KvType> {
    use clap::builder::TypedValueParser;
    let names = gpack_runtime::KvType::ALL.map(|t| t.name());
    clap::builder::PossibleValuesParser::new(names).map(|s| {
        s.parse::<gpack_runtime::KvType>()
            .expect("a listed KV type")
    })
}

/// The KV cache's types (run, serve, bench): one flag, one default.
#[derive(clap::Args, Debug, Clone)]
pub struct KvArgs {
    /// The type the KV cache keeps keys and values in: f16 (the default,
    /// as llama.cpp's; half the memory of f32 and half the bytes attention
    /// streams per step; K/V are rounded once when written), f32, or
    /// ggml's q8_0 / q4_0 blocks of 32 values along each head (0.53x /
    /// 0.28x f16's bytes; attention reads the blocks directly; heads of 64
    /// or more are Walsh-Hadamard rotated first, as llama.cpp's, which
    /// spreads outlier dims over their block; q4_0 costs visibly more
    /// accuracy: measure it with `gpack perplexity --kv`). Not for MLA
    /// models (DeepSeek) nor the GPU, which keep f16.
    #[arg(long, value_name = "TYPE", default_value = "f16", value_parser = kv_type_parser())]
    pub kv: gpack_runtime::KvType,
    /// The keys' type alone (llama.cpp's -ctk), over --kv.
    #[arg(long, value_name = "TYPE", value_parser = kv_type_parser())]
    pub kv_k: Option<gpack_runtime::KvType>,
    /// The values' type alone (llama.cpp's -ctv), over --kv.
    #[arg(long, value_name = "TYPE", value_parser = kv_type_parser())]
    pub kv_v: Option<gpack_runtime::KvType>,
    /// Old spelling of `--kv f16` (the default now).
    #[arg(long, hide = true)]
    pub kv_f16: bool,
    /// Old spelling of `--kv f32`.
    #[arg(long, hide = true, conflicts_with = "kv_f16")]
    pub kv_f32: bool,
}

impl KvArgs {
    /// The types of keys and values (a warning for the old flags).
    pub fn types(&self) -> gpack_runtime::KvTypes {
        use gpack_runtime::KvType;
        let both = if self.kv_f16 {
            log::warn!("--kv-f16 is the default now and will go: use --kv f16");
            KvType::F16
        } else if self.kv_f32 {
            log::warn!("--kv-f32 will go: use --kv f32");
            KvType::F32
        } else {
            self.kv
        };
        gpack_runtime::KvTypes {
            k: self.kv_k.unwrap_or(both),
            v: self.kv_v.unwrap_or(both),
        }
    }
}

/// Parses a byte size for a u64 (`10G`, `512M`, `1048576`).
pub(crate) fn parse_size_u64(s: &str) -> Result<u64, String> {
    parse_size_arg(s).map(|n| n as u64)
}

/// The prefix cache's flags (serve; `run` takes the directory).
#[derive(clap::Args, Debug, Clone)]
pub struct KvCacheArgs {
    /// Bytes of KV blocks (64 positions each) kept in memory and shared by
    /// every request: a prompt reuses its longest prefix held here (system
    /// prompts, chat turns, RAG contexts), least recently used evicted
    /// first; 0 turns it off (each slot still reuses its own last text).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_size_arg)]
    pub kv_cache_bytes: usize,
    /// A directory where full KV blocks are also kept as verified files
    /// (SHA-256 per block, named by a hash of the model, settings and
    /// tokens): a restarted server, or another process serving the same
    /// .gpack, reuses them. It must be yours and not writable by others
    /// (created 0700 if missing). `gpack cache ls|clear DIR` manages it.
    #[arg(long, value_name = "DIR")]
    pub kv_cache_dir: Option<std::path::PathBuf>,
    /// Disk budget of --kv-cache-dir; beyond it the least recently used
    /// block files are removed.
    #[arg(long, value_name = "SIZE", default_value = "10G", value_parser = parse_size_u64, requires = "kv_cache_dir")]
    pub kv_cache_disk_bytes: u64,
}

/// Where the model's blocks run (run, serve, bench): one flag pair, one
/// default.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// auto (the default): a hardware GPU when one exists and the model runs
    /// and fits on it, else the CPU (never a software adapter; --verbose
    /// says which); cpu; gpu: a hardware GPU, else a software one such as
    /// Mesa's lavapipe with a warning (no adapter, or a family without a
    /// GPU executor, is an error); gpu:N: adapter N.
    #[arg(long, value_name = "DEVICE", default_value = "auto",
          value_parser = |s: &str| s.parse::<gpack_runtime::Device>())]
    pub device: gpack_runtime::Device,
    /// With a GPU: the first N blocks on it, the rest and the head on the
    /// CPU (llama.cpp's -ngl). Default: all of them, or as many as fit
    /// --gpu-memory.
    #[arg(long, value_name = "N")]
    pub gpu_layers: Option<usize>,
    /// With a GPU: the device memory gpack may use (8GiB, 512MiB, bytes),
    /// or auto (what the system says where it says it: AMD's sysfs, a
    /// software adapter's host memory). When known, what the blocks, the
    /// head, the f16 KV cache at --ctx (× --parallel) and a step's buffers
    /// need is checked before anything is uploaded: --device gpu places as
    /// many whole blocks as fit and runs the rest on the CPU, saying so;
    /// --gpu-layers N that does not fit is refused; --device auto takes the
    /// CPU unless every block fits. Default: not known (a buffer the
    /// driver refuses is then an error naming it and its bytes).
    #[arg(long, value_name = "BYTES|auto",
          value_parser = |s: &str| s.parse::<gpack_runtime::GpuMemory>())]
    pub gpu_memory: Option<gpack_runtime::GpuMemory>,
}

impl DeviceArgs {
    /// `o` with the device and GPU block count of the flags.
    pub fn apply(&self, o: gpack_runtime::LoadOptions) -> gpack_runtime::LoadOptions {
        gpack_runtime::LoadOptions {
            device: self.device,
            gpu_layers: self.gpu_layers,
            gpu_memory: self.gpu_memory.unwrap_or_default(),
            ..o
        }
    }
}

/// The load options `run` and `serve` start from: the `GPACK_*`
/// environment (`LoadOptions::from_env`, the one place the CLI reads it; a
/// bad value is an error), then the flags, which win: the expert and PLE
/// flags and `--threads` (at least 1).
pub fn load_options(
    experts: &ExpertArgs,
    ple: &PleArgs,
    threads: Option<usize>,
) -> anyhow::Result<gpack_runtime::LoadOptions> {
    use anyhow::Context;
    let env = gpack_runtime::LoadOptions::from_env().map_err(anyhow::Error::msg)?;
    let threads = match threads {
        Some(n) => gpack_runtime::Threads::Count(
            std::num::NonZeroUsize::new(n).context("--threads must be at least 1")?,
        ),
        None => env.threads.clone(),
    };
    Ok(gpack_runtime::LoadOptions {
        threads,
        experts: experts.mode(env.experts),
        ple: ple.io(env.ple),
        ..env
    })
}

/// Speculative decoding flags of `run` and `serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` drafts the tokens that followed the
    /// latest earlier occurrence of the last few tokens (prompt or answer; no
    /// extra weights; fast where the answer quotes its input: code edits,
    /// summaries, extraction), `draft` drafts with the model given by
    /// --draft, `mtp` with the model's own multi-token-prediction block
    /// (GLM-4.7-Flash and other models converted with their `nextn`
    /// layers), `none` runs one token per forward. The model checks each
    /// draft in one batched forward and keeps what it would have generated
    /// anyway: the output is the same in every mode (the same tokens for the
    /// same seed). Default: `draft` with --draft or when the .gpack carries
    /// a draft model (`gpack convert --draft`), else `ngram`.
    #[arg(long, value_name = "MODE", value_parser = spec_parser())]
    pub spec: Option<gpack_runtime::SpecMode>,
    /// A smaller model with the same vocabulary (.gpack, .gguf or HF
    /// directory) that drafts greedily for --spec draft (instead of the
    /// draft packed in MODEL, if any).
    #[arg(long, value_name = "MODEL")]
    pub draft: Option<std::path::PathBuf>,
    /// Most tokens drafted per check; the length adapts below it to how many
    /// were accepted.
    #[arg(long, value_name = "N", default_value_t = gpack_runtime::spec::DEFAULT_MAX_DRAFT,
          value_parser = parse_draft_max)]
    pub draft_max: usize,
    /// --spec draft and mtp: stop a draft where the draft model's (block's)
    /// top probability falls below P.
    #[arg(long, value_name = "P", default_value_t = gpack_runtime::spec::DEFAULT_P_MIN)]
    pub draft_p_min: f32,
}

impl SpecArgs {
    /// The mode the flags ask for, `packed` saying whether the model file
    /// carries a draft model (`gpack convert --draft`). Default: `draft`
    /// with --draft or a packed draft, else `ngram`; `draft` needs one of
    /// the two.
    pub fn mode(&self, packed: bool) -> anyhow::Result<gpack_runtime::SpecMode> {
        use gpack_runtime::SpecMode;
        let m = match self.spec {
            Some(m) => m,
            None if self.draft.is_some() || packed => SpecMode::Draft,
            None => SpecMode::Ngram,
        };
        if m == SpecMode::Draft && self.draft.is_none() && !packed {
            anyhow::bail!(
                "--spec draft needs a draft model: --draft MODEL, or a .gpack converted with --draft"
            );
        }
        if m != SpecMode::Draft && self.draft.is_some() {
            anyhow::bail!(
                "--draft is only used with --spec draft (got --spec {})",
                m.name()
            );
        }
        if !(0.0..=1.0).contains(&self.draft_p_min) {
            anyhow::bail!("--draft-p-min must be in [0, 1], got {}", self.draft_p_min);
        }
        Ok(m)
    }
}

/// The multi-token-prediction block `--spec mtp` drafts with: `model`'s
/// (loaded from `w`, the file `path`), or an error saying the file has none.
pub fn mtp_weights<'w>(
    model: &gpack_runtime::Model<'_>,
    w: &'w dyn gpack_runtime::WeightSource,
    path: &std::path::Path,
) -> anyhow::Result<gpack_runtime::MtpWeights<'w>> {
    model.mtp_weights(w).ok_or_else(|| {
        anyhow::anyhow!(
            "--spec mtp needs a model with a multi-token-prediction block \
             (`{}.nextn_predict_layers` and `blk.{}.nextn.eh_proj.weight`, as llama.cpp's \
             converter writes GLM-4.5/4.7 and DeepSeek-V3.2); {} has none: use --spec ngram",
            model.config.arch.name(),
            model.config.n_layer,
            path.display()
        )
    })
}

fn parse_draft_max(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a draft length from 1 to 64")),
    }
}

fn spec_parser() -> impl clap::builder::TypedValueParser<Value = gpack_runtime::SpecMode> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    use gpack_runtime::SpecMode;
    let help = |m: SpecMode| match m {
        SpecMode::Ngram => "prompt lookup: no extra weights",
        SpecMode::Draft => "a draft model (--draft MODEL)",
        SpecMode::Mtp => "the model's multi-token-prediction block",
        SpecMode::None => "one token per forward",
    };
    PossibleValuesParser::new(SpecMode::ALL.map(|m| PossibleValue::new(m.name()).help(help(m))))
        .try_map(|s| s.parse::<SpecMode>())
}

/// How `run` and `serve` read a per-layer embedding (PLE) table.
#[derive(clap::Args, Debug, Clone)]
pub struct PleArgs {
    /// Models with a per-layer embedding table (Gemma 3n) in a .gpack: read
    /// its rows through a mapping (the page cache decides what stays) instead
    /// of direct I/O with a row cache (also GPACK_PLE_MMAP=1).
    #[arg(long, conflicts_with = "ple_cache")]
    pub ple_mmap: bool,
    /// The direct-I/O PLE row cache as SETSxWAYS (default 1024x4: 4096 rows,
    /// LRU within a set).
    #[arg(long, value_name = "SETSxWAYS", value_parser = parse_ple_cache)]
    pub ple_cache: Option<(usize, usize)>,
}

impl PleArgs {
    /// How PLE rows are read: the flags, else `env` (the environment's,
    /// [`load_options`]).
    pub fn io(&self, env: gpack_runtime::ple::PleIo) -> gpack_runtime::ple::PleIo {
        use gpack_runtime::ple::PleIo;
        if self.ple_mmap {
            return PleIo::Mmap;
        }
        match self.ple_cache {
            Some((sets, ways)) => PleIo::Direct { sets, ways },
            None => env,
        }
    }
}

fn parse_ple_cache(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("{s:?} is not SETSxWAYS (two positive integers, e.g. 1024x4)");
    let (a, b) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (sets, ways) = (
        a.trim().parse::<usize>().map_err(|_| bad())?,
        b.trim().parse::<usize>().map_err(|_| bad())?,
    );
    if sets == 0 || ways == 0 || sets.checked_mul(ways).is_none_or(|n| n > 1 << 24) {
        return Err(bad());
    }
    Ok((sets, ways))
}

fn parse_size_arg(s: &str) -> Result<usize, String> {
    gpack_runtime::experts::parse_size(s).ok_or_else(|| {
        format!("{s:?} is not a size (a number with an optional K, M, G or T suffix)")
    })
}

/// gpack-convert as the registry's converter of pulled Docker GGUF model
/// artifacts (`--quant` as `gpack convert`'s).
pub fn convert_gguf(quant: gpack_convert::Quant) -> gpack_oci::ConvertGguf {
    gpack_oci::ConvertGguf(std::sync::Arc::new(move |gguf, out, force| {
        let report = gpack_convert::convert(
            &gpack_convert::ConvertOptions {
                source: gguf.to_path_buf(),
                output: out.to_path_buf(),
                quant,
                force,
                ..Default::default()
            },
            &(),
        )?;
        Ok((report.size, report.digest))
    }))
}

/// The file to open for a MODEL argument: `model` itself when it exists
/// (a file or directory wins over a same-named reference), else, when it
/// parses as a registry reference (`host[:port]/repo[:tag|@digest]`), the
/// .gpack pulled into the local store (once: a reference already pulled is
/// opened from the store without asking the registry).
fn resolve_model(
    model: &std::path::Path,
    registry: &gpack_oci::Options,
    progress: std::sync::Arc<dyn gpack_oci::Progress>,
) -> anyhow::Result<std::path::PathBuf> {
    let s = model.to_string_lossy();
    if model.exists() || !gpack_oci::reference::looks_like_reference(&s) {
        return Ok(model.to_path_buf());
    }
    let convert = Some(convert_gguf(gpack_convert::Quant::Keep));
    gpack_oci::resolve(&s, registry, convert, progress)
        .map_err(|e| anyhow::Error::new(e).context(format!("pulling {s}")))
}

/// Opens the MODEL of `run` and `serve`: a .gpack (mapped; `fallback` when it
/// fails validation), a .giw, a .gguf or HF directory, a registry reference
/// (pulled into the local store first), or — with
/// `--stream-weights QUANT` and a .gguf — its prequantized sidecar, built
/// once (atomically) when missing or stale.
pub fn open_model(
    model: &std::path::Path,
    fallback: Option<&std::path::Path>,
    stream_weights: Option<&str>,
    registry: &RegistryArgs,
) -> anyhow::Result<gpack_runtime::Loaded> {
    use anyhow::Context;
    use gpack_convert::giw::{ensure_sidecar, SidecarStatus};
    let bars = std::sync::Arc::new(crate::progress::TransferBars::new("pull", true));
    let resolved = resolve_model(model, &registry.options(), bars.clone());
    bars.finish();
    let resolved = resolved?;
    let model = resolved.as_path();
    let is_gpack = model.extension().is_some_and(|e| e == "gpack");
    let is_giw = model.extension().is_some_and(|e| e == "giw");
    if let (Some(q), false, false, true) = (stream_weights, is_gpack, is_giw, model.is_file()) {
        let q: gpack_convert::Quant = q.parse().map_err(anyhow::Error::msg)?;
        let (side, status) = ensure_sidecar(model, q, gpack_format::giw::Target::Cpu)
            .with_context(|| format!("building the sidecar of {}", model.display()))?;
        match status {
            SidecarStatus::Reused => {}
            SidecarStatus::Built => eprintln!("built sidecar {}", side.display()),
            SidecarStatus::Rebuilt { reason } => {
                let reason = gpack_format::error_chain(&reason);
                eprintln!("warning: rebuilt sidecar {} ({reason})", side.display())
            }
        }
        return Ok(gpack_runtime::Loaded::open_giw(
            &side,
            Some(q.name()),
            model,
        )?);
    }
    Ok(gpack_runtime::Loaded::open(model, fallback)?)
}

/// How `push`, `pull`, `run REF` and `serve REF` reach a registry.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// Registry user name (also GPACK_REGISTRY_USERNAME). Without it the
    /// docker config file's entry for the registry is used, else anonymous.
    #[arg(long, value_name = "USER")]
    pub username: Option<String>,
    /// Registry password (also GPACK_REGISTRY_PASSWORD, which other users
    /// cannot read in the process list; GPACK_REGISTRY_TOKEN gives a bearer
    /// token instead).
    #[arg(long, value_name = "PASSWORD")]
    pub password: Option<String>,
    /// The docker config file to read credentials from (default
    /// $DOCKER_CONFIG/config.json, else ~/.docker/config.json), as docker
    /// does: its credHelpers/credsStore helper (docker-credential-NAME on
    /// PATH), else its auths entry.
    #[arg(long, value_name = "FILE")]
    pub docker_config: Option<std::path::PathBuf>,
    /// Plain HTTP without TLS; refused unless the registry is on a loopback
    /// address (localhost, 127.0.0.0/8, [::1]), i.e. for tests.
    #[arg(long)]
    pub insecure: bool,
}

impl RegistryArgs {
    /// The crate's options.
    pub fn options(&self) -> gpack_oci::Options {
        gpack_oci::Options {
            insecure: self.insecure,
            auth: gpack_oci::auth::Flags {
                username: self.username.clone(),
                password: self.password.clone(),
                docker_config: self.docker_config.clone(),
            },
        }
    }
}
