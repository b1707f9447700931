//! `gpack imatrix`: llama-imatrix's importance matrix of a model over a
//! text, computed by gpack's own forward pass.

use anyhow::{bail, Context, Result};
use gpack_runtime::chunks::text_chunks;
use gpack_runtime::imatrix::Collector;
use gpack_runtime::{Logits, Model};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// Compute an importance matrix of MODEL over a text, as llama-imatrix does.
///
/// The text is tokenized whole (with BOS when the model adds one), cut into
/// chunks of -c tokens (each evaluated from an empty cache, its first token
/// replaced by BOS: llama-imatrix's chunking; the text must hold at least
/// two chunks) and run through the model; for every weight matrix the
/// inputs it multiplies are summed per column, squared (`in_sum2`) and
/// plain (`in_sum`), with the rows counted (`counts`; per expert for
/// stacked-expert tensors). OUT is llama.cpp's GGUF importance matrix, or
/// its legacy .dat with --output-format dat: `gpack convert --imatrix` and
/// `llama-quantize --imatrix` both read either.
///
/// Covered: the input of every block's attention (q, k, v), attention
/// output, feed-forward (gate, up, down), MoE router and experts (per
/// expert). Not: the head (llama-imatrix skips it too unless
/// --process-output), DeepSeek's latent-attention projections and Gemma
/// 3n's own graph.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpack imatrix model.f16.gguf -f calibration.txt -o model.imatrix
  gpack imatrix model.gpack -f wiki.train.txt -o model.imatrix -c 512 --chunks 100
  gpack convert model.f16.gguf -o model.IQ4_XS.gpack --quant IQ4_XS --imatrix model.imatrix")]
pub struct Args {
    /// The model: a .gpack, .gguf or Hugging Face directory (best
    /// unquantized or Q8_0: the matrix describes its activations).
    model: PathBuf,
    /// The text to collect statistics over.
    #[arg(short = 'f', long = "file", value_name = "TEXT")]
    file: PathBuf,
    /// The importance matrix to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Tokens per chunk (llama-imatrix's -c).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx: usize,
    /// Process at most this many chunks (default: all the text holds).
    #[arg(long)]
    chunks: Option<usize>,
    /// gguf (llama-imatrix's default) or dat (its legacy format).
    #[arg(long, default_value = "gguf",
          value_parser = clap::builder::PossibleValuesParser::new(["gguf", "dat"]))]
    output_format: String,
    /// Replace OUT if it exists.
    #[arg(long)]
    force: bool,
    /// Print a JSON report (schema "gpack.imatrix.v1") instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    if a.ctx < 16 {
        // llama-imatrix ignores batches under 16 tokens: nothing would be collected.
        bail!("-c must be at least 16 tokens, got {}", a.ctx);
    }
    if !a.force && a.output.exists() {
        bail!("{} exists (pass --force to replace it)", a.output.display());
    }
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("reading the text {}", a.file.display()))?;
    let t0 = Instant::now();
    let loaded = super::open_model(&a.model, None, None, &super::RegistryArgs::default())
        .with_context(|| format!("opening {}", a.model.display()))?;
    let tok = loaded.tokenizer()?;
    // An f16 KV cache, as llama-imatrix's default.
    let opts = gpack_runtime::LoadOptions {
        kv: gpack_runtime::KvTypes::F16,
        ..gpack_runtime::LoadOptions::from_env().map_err(anyhow::Error::msg)?
    };
    let model = Model::load_with(loaded.weights(), &opts)
        .with_context(|| format!("loading {}", a.model.display()))?;
    if model.config.gemma3n.is_some() {
        bail!("gpack imatrix does not observe Gemma 3n's graph yet");
    }
    let tokens = tok.encode(&text, true);
    let chunks = text_chunks(&tokens, a.ctx, tok.added_bos(), a.chunks)
        .with_context(|| format!("cutting {} into chunks", a.file.display()))?;
    let collector = Arc::new(Collector::new());
    let mut state = model.new_state(a.ctx);
    state.set_observer(Some(collector.clone()));
    let bar = crate::progress::items_bar(chunks.len() as u64, "chunks", !a.json);
    for (i, c) in chunks.iter().enumerate() {
        state.truncate(0);
        model
            .forward(&mut state, c, Logits::None)
            .with_context(|| format!("evaluating chunk {i}"))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    drop(state);
    let collector =
        Arc::try_unwrap(collector).map_err(|_| anyhow::anyhow!("observer still shared"))?;
    let im = collector
        .finish(
            vec![a.file.display().to_string()],
            chunks.len() as u32,
            a.ctx as u32,
        )
        .context("collecting the statistics")?;
    if im.entries.is_empty() {
        bail!("no weight matrix was observed (is this family's graph covered? see --help)");
    }
    let dat = a.output_format == "dat";
    im.write(&a.output, dat, a.force)?;
    let seconds = t0.elapsed().as_secs_f64();
    let n_tokens = chunks.len() * a.ctx;
    if a.json {
        super::print_json(&json!({
            "schema": "gpack.imatrix.v1",
            "output": a.output.display().to_string(),
            "format": a.output_format,
            "text": a.file.display().to_string(),
            "text_tokens": tokens.len(),
            "chunks": chunks.len(),
            "chunk_size": a.ctx,
            "tokens": n_tokens,
            "entries": im.entries.len(),
            "seconds": seconds,
        }))?;
    } else {
        println!(
            "wrote {} ({} entries; {} chunks of {} tokens = {n_tokens} of the text's {}) in {seconds:.2} s",
            a.output.display(),
            im.entries.len(),
            chunks.len(),
            a.ctx,
            tokens.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
