//! `gpack convert`: GGUF / safetensors / HF directory → one .gpack.

use crate::progress::bytes_bar;
use anyhow::Result;
use gpack_convert::{convert, ConvertOptions, Progress, Quant};
use indicatif::ProgressBar;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;

/// Convert a model into one self-contained, page-aligned, hash-verified .gpack.
///
/// SRC is a GGUF file (for a split GGUF, any shard: all shards are found and
/// checked), a safetensors file, a `model.safetensors.index.json`, or a Hugging
/// Face model directory. Tensors are streamed one at a time into their
/// sections (peak memory: about one tensor), the file is written to
/// `.<OUT>.gpack-tmp.<pid>.<n>`, verified, and renamed into place: an interrupted
/// conversion never leaves a partial file, and an existing OUT is kept unless
/// --force is given.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpack convert SmolLM2-135M-Instruct.Q4_1.gguf --name smollm2 -o smollm2.gpack
  gpack convert model-00001-of-00003.gguf --external-experts -o ext.gpack --json
  gpack convert ./hf_model_dir -o model.gpack
  gpack convert ./hf_model_dir -o model.Q4_K_M.gpack --quant Q4_K_M
  gpack convert model.f16.gguf -o model.IQ4_XS.gpack --quant IQ4_XS --imatrix model.imatrix
  gpack convert ./hf_model_dir/model.safetensors.index.json -o model.gpack --quant int8")]
pub struct Args {
    /// The source model.
    src: PathBuf,
    /// The .gpack to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Model name recorded in the manifest (default: general.name, or OUT's stem).
    #[arg(long)]
    name: Option<String>,
    /// Weight quantization. keep: every tensor exact (ggml's own blocks, 16
    /// rows interleaved). llama-quantize's types, case-insensitive: Q4_0,
    /// Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M,
    /// Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE: from F32/F16/BF16
    /// tensors, each tensor gets the type llama-quantize's mix gives it, with
    /// the same blocks bit for bit (ggml's quantizers, ported). Legacy
    /// (gpack's own layouts, as `gpack prequant`): int8 (int8int8 is the
    /// same), int4; a matrix already at that precision, an embedding table,
    /// or one whose columns are not a multiple of 32 stays exact.
    #[arg(long, default_value = "keep", value_parser = super::quant_parser())]
    quant: Quant,
    /// With llama-quantize's types: also quantize tensors that are already
    /// quantized in the source (as llama-quantize --allow-requantize).
    #[arg(long)]
    allow_requantize: bool,
    /// With llama-quantize's types: an importance matrix (from `gpack
    /// imatrix` or llama-imatrix: GGUF, or the legacy .dat) whose
    /// per-column weights guide the quantizers, as llama-quantize --imatrix:
    /// the same blocks bit for bit. A matrix made for another model (names
    /// or lengths that disagree) or holding NaN is refused before anything
    /// is written.
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
    /// Leave routed experts in the source GGUF shards (which must sit next to OUT)
    /// and record references to them instead of copying.
    #[arg(long)]
    external_experts: bool,
    /// Pack a draft (multi-token-prediction) module into the Mtp section: a
    /// directory of safetensors files, or a GGUF file or a directory holding one.
    #[arg(long, value_name = "DIR", conflicts_with = "draft")]
    mtp_dir: Option<PathBuf>,
    /// Pack a whole draft model for speculative decoding (a smaller .gguf or
    /// Hugging Face directory with the same tokenizer; refused otherwise)
    /// into the Mtp section, in native layouts and hashed like every
    /// section: `gpack run`/`serve` then draft with it by default.
    #[arg(long, value_name = "MODEL")]
    draft: Option<PathBuf>,
    /// Replace OUT if it exists.
    #[arg(long)]
    force: bool,
    /// Print a JSON report (schema "gpack.convert.v1") of what went where.
    #[arg(long)]
    json: bool,
}

struct Bars {
    visible: bool,
    current: Mutex<Option<ProgressBar>>,
}

impl Progress for Bars {
    fn section(&self, name: &str, bytes: u64) {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pb) = cur.take() {
            pb.finish();
        }
        *cur = Some(bytes_bar(bytes, name, self.visible && bytes > 1 << 20));
    }
    fn advance(&self, bytes: u64) {
        if let Some(pb) = &*self.current.lock().unwrap_or_else(|e| e.into_inner()) {
            pb.inc(bytes);
        }
    }
}

pub fn run(a: Args) -> Result<ExitCode> {
    let opts = ConvertOptions {
        source: a.src.clone(),
        output: a.output.clone(),
        name: a.name,
        quant: a.quant,
        allow_requantize: a.allow_requantize,
        imatrix: a.imatrix,
        external_experts: a.external_experts,
        force: a.force,
        mtp_dir: a.mtp_dir,
        draft: a.draft,
    };
    let bars = Bars {
        visible: !a.json,
        current: Mutex::new(None),
    };
    let report = convert(&opts, &bars).map_err(|e| {
        let ctx = gpack_format::job_context("converting", &a.src, &a.output, &e);
        anyhow::Error::new(e).context(ctx)
    })?;
    if let Some(pb) = bars
        .current
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        pb.finish_and_clear();
    }
    if a.json {
        super::print_json(&serde_json::to_value(&report)?)?;
    } else {
        let raw = report.stored_as_ggml_blocks.len();
        println!(
            "wrote {} ({} bytes, {} tensors, {} sections{}) in {:.2} s\ndigest: {}",
            report.output,
            report.size,
            report.tensors.len(),
            report.sections.len() + 1,
            if raw > 0 {
                format!(", {raw} kept as ggml blocks")
            } else {
                String::new()
            },
            report.seconds,
            report.digest
        );
        println!(
            "{}: {:.2} bits per weight (file), {:.2} (weight matrices){}",
            report.quant,
            report.bits_per_weight,
            report.weights_bits_per_weight,
            report
                .imatrix
                .as_deref()
                .map(|f| format!(", importance matrix {f}"))
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}
