//! One module per subcommand.

pub mod bench;
pub mod convert;
pub mod inspect;
pub mod prequant;
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

/// `--quant` of `convert` and `prequant`: the one vocabulary of
/// [`gpack_convert::Quant`] (the policy in `gpack_convert::policy` says what
/// each name means for either container), each name with its help.
pub fn quant_parser() -> impl clap::builder::TypedValueParser<Value = gpack_convert::Quant> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    use gpack_convert::Quant;
    let help = |q: Quant| match q {
        Quant::Keep => "every matrix exact, in its ggml type's layout",
        Quant::Int8 => "matmul weights int8, symmetric, groups of 32",
        Quant::Int8Int8 => "int8, labelled int8 weights with int8 activations (the .giw default)",
        Quant::Int4 => "matmul weights int4, asymmetric, groups of 32",
    };
    PossibleValuesParser::new(Quant::ALL.map(|q| PossibleValue::new(q.name()).help(help(q))))
        .try_map(|s| s.parse::<Quant>())
}

/// Routed-expert flags of `run` and `serve` (MoE models; ignored otherwise).
#[derive(clap::Args, Debug, Clone)]
pub struct ExpertArgs {
    /// MoE models: the kernels read routed experts in place from the mapped
    /// file, nothing copied (also GPACK_EXPERT_MMAP=1). Default: each expert
    /// is copied into a resident cache the first time a token is routed to it.
    #[arg(long, conflicts_with = "expert_cache_bytes")]
    pub expert_mmap: bool,
    /// MoE models: byte budget of the resident expert cache (e.g. 512M, 8G);
    /// beyond it the least recently used experts are evicted. Default 4G, or
    /// GPACK_EXPERT_CACHE_BYTES.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub expert_cache_bytes: Option<usize>,
}

impl ExpertArgs {
    /// How routed experts are read: the flags, then the environment.
    pub fn mode(&self) -> gpack_runtime::ExpertMode {
        use gpack_runtime::ExpertMode;
        if self.expert_mmap {
            return ExpertMode::Mmap;
        }
        match self.expert_cache_bytes {
            Some(cache_bytes) => ExpertMode::Resident { cache_bytes },
            None => ExpertMode::from_env(),
        }
    }
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
    /// How PLE rows are read: the flags, then the environment.
    pub fn io(&self) -> gpack_runtime::ple::PleIo {
        use gpack_runtime::ple::PleIo;
        if self.ple_mmap {
            return PleIo::Mmap;
        }
        match self.ple_cache {
            Some((sets, ways)) => PleIo::Direct { sets, ways },
            None => gpack_runtime::LoadOptions::default().ple,
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

/// Opens the MODEL of `run` and `serve`: a .gpack (mapped; `fallback` when it
/// fails validation), a .giw, a .gguf or HF directory, or — with
/// `--stream-weights QUANT` and a .gguf — its prequantized sidecar, built
/// once (atomically) when missing or stale.
pub fn open_model(
    model: &std::path::Path,
    fallback: Option<&std::path::Path>,
    stream_weights: Option<&str>,
) -> anyhow::Result<gpack_server::Loaded> {
    use anyhow::Context;
    use gpack_convert::sidecar::{ensure_sidecar, SidecarStatus};
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
                eprintln!("warning: rebuilt sidecar {} ({reason})", side.display())
            }
        }
        return Ok(gpack_server::Loaded::open_giw(
            &side,
            Some(q.name()),
            model,
        )?);
    }
    Ok(gpack_server::Loaded::open(model, fallback)?)
}
