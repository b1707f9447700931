//! `gpack perplexity`: llama-perplexity's chunked perplexity of a model on a
//! text, its base log-probs saved for later, and KL-divergence against
//! them. The arithmetic lives in `gpack_runtime::quality`; this file reads
//! the flags, runs the chunks and prints.

use anyhow::{bail, Context, Result};
use gpack_runtime::quality::{
    base::rows_per_chunk, chunk_logits, logprob, BaseHeader, BaseReader, BaseWriter, Chunking,
    KlAccum, KlSummary, Percentiles, PplAccum,
};
use gpack_runtime::Model;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Perplexity of a model on a text, and KL-divergence against a base model,
/// as llama.cpp's llama-perplexity computes them.
///
/// Perplexity: TEXT (one trailing newline dropped) is tokenized once, with
/// BOS when the model adds one (special-token text in it is matched as
/// special tokens), and cut into whole chunks of -c tokens (at least two
/// are needed; --chunks N keeps the first N). Each chunk runs from an empty
/// KV cache with its first token replaced by BOS when the model adds one;
/// only the second half of each chunk is scored (every position from c/2
/// on predicts the token after it, with at least c/2 tokens of context).
/// Printed: the running estimate after each chunk, `[i]ppl,`, then `Final
/// estimate: PPL = x +/- err` (err: PPL times the standard error of the
/// mean −log p).
///
/// --kl-divergence-base F alone also saves each scored position's
/// log-probs to F, in llama-perplexity's file format (the tokens, then per
/// position the log-probs quantized to 16 bits over the top 16 nats):
/// run it with the reference model (F16, or the unquantized original).
///
/// --kl-divergence --kl-divergence-base F then runs another model (a
/// quantization of the same one) on F's tokens, chunking and context (no
/// TEXT needed; -c is ignored, --chunks may keep fewer) and prints per
/// chunk and in total: PPL of both, ln(PPL(Q)/PPL(base)), the mean
/// KL(base ‖ Q) per token with its percentiles, Δp (the change of the
/// probability of the token that followed) and "Same top p", the share of
/// positions whose most likely token is the base's. llama-perplexity's base
/// files work here, and this command's in llama-perplexity.
///
/// The model runs on the CPU with GPACK_THREADS threads (or --threads); with
/// --device gpu its blocks run on a GPU as in `gpack run` (figures within
/// rounding of the CPU's). The KV cache is f16 (as llama.cpp's default)
/// unless --kv says otherwise: a base saved with --kv f32 (or f16) and a run
/// with --kv q8_0 on the same model measures what a quantized cache costs.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpack perplexity smollm2.gpack -f wiki.test.raw
  gpack perplexity model-f16.gguf -f wiki.test.raw --kl-divergence-base base.kld
  gpack perplexity model-Q4_K_M.gpack --kl-divergence-base base.kld --kl-divergence
  gpack perplexity smollm2.gpack -f text.txt -c 256 --chunks 20 --json > ppl.json")]
pub struct Args {
    /// The model: .gpack, .giw, .gguf, a Hugging Face directory, or a
    /// registry reference (pulled into the store first).
    model: PathBuf,
    #[command(flatten)]
    registry: super::RegistryArgs,
    /// The text (UTF-8). Required unless --kl-divergence.
    #[arg(short = 'f', long = "file", value_name = "TEXT")]
    file: Option<PathBuf>,
    /// Tokens per chunk (the context each scored token is predicted from
    /// is between c/2 and c − 1 tokens).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx: usize,
    /// Tokens per forward pass within a chunk (default: the whole chunk).
    #[arg(short = 'b', long = "batch", value_name = "N")]
    batch: Option<usize>,
    /// Evaluate at most N chunks (default: all the text has).
    #[arg(long, value_name = "N")]
    chunks: Option<usize>,
    /// Without --kl-divergence: save the base log-probs to F (replacing
    /// it when the run completes). With it: read them from F.
    #[arg(long, value_name = "F")]
    kl_divergence_base: Option<PathBuf>,
    /// Compare with the base log-probs in --kl-divergence-base F.
    #[arg(long, requires = "kl_divergence_base")]
    kl_divergence: bool,
    /// Kernel threads (default GPACK_THREADS, else one per logical CPU the
    /// process may use).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    #[command(flatten)]
    kv: super::KvArgs,
    #[command(flatten)]
    device: super::DeviceArgs,
    /// Print one JSON object (schema "gpack.perplexity.v1") instead of the
    /// text report; no progress bar.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    if a.chunks == Some(0) {
        bail!("--chunks must be at least 1");
    }
    if a.batch == Some(0) {
        bail!("--batch must be at least 1");
    }
    if a.kl_divergence && a.file.is_some() {
        log::warn!("--kl-divergence evaluates the base file's tokens: -f is not read");
    }
    if !a.kl_divergence && a.file.is_none() {
        bail!("give the text to evaluate: -f TEXT (or --kl-divergence with a base file)");
    }
    let t0 = Instant::now();
    let loaded = super::open_model(&a.model, None, None, &a.registry)
        .with_context(|| format!("opening {}", a.model.display()))?;
    let env = gpack_runtime::LoadOptions::from_env().map_err(anyhow::Error::msg)?;
    let threads = match a.threads {
        Some(n) => gpack_runtime::Threads::Count(
            std::num::NonZeroUsize::new(n).context("--threads must be at least 1")?,
        ),
        None => env.threads.clone(),
    };
    let opts = a.device.apply(gpack_runtime::LoadOptions {
        threads,
        kv: a.kv.types(),
        ..env
    });
    let model = Model::load_with(loaded.weights(), &opts)
        .with_context(|| format!("loading {}", a.model.display()))?;
    let tok = loaded.tokenizer()?;
    // The model's BOS rule, as its tokenizer applies it to an empty text.
    let probe = tok.encode("", true);
    let add_bos = tok.bos().is_some() && probe.first() == tok.bos().as_ref();
    if probe.len() > usize::from(add_bos) {
        bail!(
            "{}'s tokenizer appends EOS to every text; llama-perplexity refuses such models \
             (the scored tokens would end in an EOS the text does not have)",
            a.model.display()
        );
    }
    let bos = if add_bos { tok.bos() } else { None };
    let n_vocab = model.config.n_vocab;
    let out = Report::new(&a, n_vocab, add_bos);
    if a.kl_divergence {
        let base = a.kl_divergence_base.as_deref().expect("clap requires it");
        kl_divergence(&a, &model, bos, base, out, t0)
    } else {
        let path = a.file.as_deref().expect("checked above");
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut text = String::from_utf8(bytes).map_err(|e| {
            anyhow::anyhow!(
                "{}: not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            )
        })?;
        if text.ends_with('\n') {
            text.pop();
        }
        let tokens = tok.encode(&text, true);
        perplexity(&a, &model, bos, &tokens, out, t0)
    }
}

/// The rows of one chunk: its scored logits and the tokens they predict.
fn scored_rows<'t>(
    logits: &'t [f32],
    tokens: &'t [u32],
    c: &Chunking,
    n_vocab: usize,
) -> impl Iterator<Item = (&'t [f32], usize)> {
    let first = c.first();
    logits
        .chunks_exact(n_vocab)
        .zip(&tokens[first + 1..])
        .map(|(row, &t)| (row, t as usize))
}

fn perplexity(
    a: &Args,
    model: &Model<'_>,
    bos: Option<u32>,
    tokens: &[u32],
    mut out: Report,
    t0: Instant,
) -> Result<ExitCode> {
    let c = Chunking::new(tokens.len(), a.ctx, a.chunks)?;
    let nv = model.config.n_vocab;
    let batch = a.batch.unwrap_or(c.n_ctx);
    out.start(&c, batch, Some(tokens.len()));
    let mut writer = match &a.kl_divergence_base {
        Some(p) => {
            let header = BaseHeader {
                n_ctx: u32::try_from(c.n_ctx).context("-c above 2^32")?,
                n_vocab: u32::try_from(nv).context("vocabulary above 2^32")?,
                n_chunk: u32::try_from(c.n_chunk).context("too many chunks")?,
                tokens: tokens[..c.n_chunk * c.n_ctx].to_vec(),
            };
            Some(BaseWriter::create(p, &header)?)
        }
        None => None,
    };
    let row = logprob::row_len(nv);
    let mut rows = vec![0u16; c.scored() * row];
    let mut state = model.new_state(c.n_ctx);
    let mut acc = PplAccum::default();
    for i in 0..c.n_chunk {
        let chunk = &tokens[i * c.n_ctx..(i + 1) * c.n_ctx];
        let logits = chunk_logits(model, &mut state, chunk, bos, batch)?;
        for (r, (l, t)) in scored_rows(&logits, chunk, &c, nv).enumerate() {
            acc.add(match writer {
                Some(_) => logprob::nll_quantized(l, t, &mut rows[r * row..(r + 1) * row]),
                None => logprob::nll(l, t),
            });
        }
        if let Some(w) = writer.as_mut() {
            w.write_chunk(&rows)?;
        }
        out.ppl_chunk(i + 1, acc.ppl());
    }
    let base = match writer {
        Some(w) => Some(w.finish()?),
        None => None,
    };
    out.ppl_final(&acc, base, t0)
}

fn kl_divergence(
    a: &Args,
    model: &Model<'_>,
    bos: Option<u32>,
    base: &std::path::Path,
    mut out: Report,
    t0: Instant,
) -> Result<ExitCode> {
    let mut r = BaseReader::open(base)?;
    let h = r.header().clone();
    let nv = model.config.n_vocab;
    if h.n_vocab as usize != nv {
        return Err(gpack_runtime::quality::QualityError::VocabMismatch {
            path: base.to_path_buf(),
            file: h.n_vocab,
            model: nv as u32,
        }
        .into());
    }
    let c = Chunking {
        n_ctx: h.n_ctx as usize,
        n_chunk: a
            .chunks
            .map_or(h.n_chunk as usize, |m| m.min(h.n_chunk as usize)),
    };
    debug_assert_eq!(c.scored(), rows_per_chunk(c.n_ctx));
    let batch = a.batch.unwrap_or(c.n_ctx);
    out.start(&c, batch, None);
    let row = logprob::row_len(nv);
    let mut rows = Vec::new();
    let mut state = model.new_state(c.n_ctx);
    let mut acc = KlAccum::default();
    for i in 0..c.n_chunk {
        if !r.next_chunk(&mut rows)? {
            bail!("{}: fewer chunks than its header says", base.display());
        }
        let chunk = h.chunk_tokens(i);
        let logits = chunk_logits(model, &mut state, chunk, bos, batch)?;
        for (k, (l, t)) in scored_rows(&logits, chunk, &c, nv).enumerate() {
            logprob::kl_row(l, &rows[k * row..(k + 1) * row], t, &mut acc);
        }
        out.kl_chunk(i + 1, &acc.summary());
    }
    out.kl_final(&acc.summary(), base, t0)
}

/// What is printed: the text report (llama-perplexity's lines) or, with
/// --json, one object at the end; a progress bar on a terminal's stderr.
struct Report {
    json: bool,
    bar: indicatif::ProgressBar,
    doc: serde_json::Value,
    chunks: Vec<serde_json::Value>,
    line: String,
}

impl Report {
    fn new(a: &Args, n_vocab: usize, add_bos: bool) -> Report {
        Report {
            json: a.json,
            bar: crate::progress::count_bar("chunks", !a.json),
            doc: json!({
                "schema": "gpack.perplexity.v1",
                "model": a.model.display().to_string(),
                "mode": if a.kl_divergence { "kl-divergence" } else { "perplexity" },
                "text": if a.kl_divergence { None } else { a.file.as_ref().map(|p| p.display().to_string()) },
                "n_vocab": n_vocab,
                "add_bos": add_bos,
            }),
            chunks: Vec::new(),
            line: String::new(),
        }
    }

    fn start(&mut self, c: &Chunking, batch: usize, n_tokens: Option<usize>) {
        self.doc["n_ctx"] = json!(c.n_ctx);
        self.doc["n_batch"] = json!(batch);
        self.doc["n_chunk"] = json!(c.n_chunk);
        self.doc["n_tokens"] = json!(n_tokens);
        self.doc["scored_per_chunk"] = json!(c.scored());
        self.bar.set_length(c.n_chunk as u64);
        if !self.json {
            let msg = format!(
                "perplexity: {} chunks, n_ctx={}, batch_size={batch}{}",
                c.n_chunk,
                c.n_ctx,
                n_tokens.map_or(String::new(), |n| format!(", {n} tokens in the text"))
            );
            self.bar.suspend(|| eprintln!("{msg}"));
        }
    }

    /// Prints a whole line on stdout without tearing the bar.
    fn println(&self, s: &str) {
        self.bar.suspend(|| {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "{s}");
            let _ = o.flush();
        });
    }

    fn ppl_chunk(&mut self, i: usize, ppl: f64) {
        self.bar.set_message(format!("PPL {ppl:.4}"));
        self.bar.inc(1);
        self.chunks.push(json!({"chunk": i, "ppl": ppl}));
        if self.json {
            return;
        }
        // llama-perplexity's running estimates, on one line; printed as
        // they come when no bar shares the terminal.
        let piece = format!("[{i}]{ppl:.4},");
        if self.bar.is_hidden() {
            let mut o = std::io::stdout().lock();
            let _ = write!(o, "{piece}");
            let _ = o.flush();
        }
        self.line.push_str(&piece);
    }

    fn ppl_final(mut self, acc: &PplAccum, base: Option<PathBuf>, t0: Instant) -> Result<ExitCode> {
        self.bar.finish_and_clear();
        let (ppl, err) = acc.estimate();
        if self.json {
            self.doc["chunks"] = json!(self.chunks);
            self.doc["scored_tokens"] = json!(acc.count);
            self.doc["ppl"] = json!(ppl);
            self.doc["ppl_err"] = json!(err);
            self.doc["nll_mean"] = json!(acc.nll / acc.count as f64);
            self.doc["base_file"] = json!(base.map(|p| p.display().to_string()));
            self.doc["seconds"] = json!(t0.elapsed().as_secs_f64());
            super::print_json(&self.doc)?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut o = std::io::stdout().lock();
        if self.bar.is_hidden() {
            writeln!(o)?;
        } else {
            writeln!(o, "{}", self.line)?;
        }
        match err {
            Some(e) => writeln!(o, "Final estimate: PPL = {ppl:.4} +/- {e:.5}")?,
            None => writeln!(
                o,
                "Final estimate: PPL = {ppl:.4} (no error: fewer than two scored tokens or no variance)"
            )?,
        }
        if let Some(b) = base {
            writeln!(
                o,
                "saved the base log-probs of {} tokens to {}",
                acc.count,
                b.display()
            )?;
        }
        eprintln!(
            "{} tokens scored in {:.1} s",
            acc.count,
            t0.elapsed().as_secs_f64()
        );
        Ok(ExitCode::SUCCESS)
    }

    fn kl_chunk(&mut self, i: usize, s: &KlSummary) {
        self.bar.set_message(format!("KLD {:.5}", s.kld));
        self.bar.inc(1);
        self.chunks.push(json!({
            "chunk": i, "ppl": s.ppl, "ppl_err": s.ppl_err,
            "ln_ppl_ratio": s.ln_ppl_ratio, "ln_ppl_ratio_err": s.ln_ppl_ratio_err,
            "kld": s.kld, "kld_err": s.kld_err,
            "p_diff_rms": s.p_diff_rms, "p_diff_rms_err": s.p_diff_rms_err,
            "same_top": s.same_top, "same_top_err": s.same_top_err,
        }));
        if self.json {
            return;
        }
        if i == 1 {
            self.println(
                "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p",
            );
        }
        self.println(&format!(
            "{i:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
            s.ppl,
            s.ppl_err,
            s.ln_ppl_ratio,
            s.ln_ppl_ratio_err,
            s.kld,
            s.kld_err,
            100.0 * s.p_diff_rms,
            100.0 * s.p_diff_rms_err,
            100.0 * s.same_top,
            100.0 * s.same_top_err
        ));
    }

    fn kl_final(mut self, s: &KlSummary, base: &std::path::Path, t0: Instant) -> Result<ExitCode> {
        self.bar.finish_and_clear();
        if self.json {
            self.doc["chunks"] = json!(self.chunks);
            self.doc["scored_tokens"] = json!(s.count);
            self.doc["ppl"] = json!(s.ppl);
            self.doc["ppl_err"] = json!(s.ppl_err);
            self.doc["base_file"] = json!(base.display().to_string());
            self.doc["kl"] = serde_json::to_value(s)?;
            self.doc["seconds"] = json!(t0.elapsed().as_secs_f64());
            super::print_json(&self.doc)?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut o = std::io::stdout().lock();
        if s.count < 100 {
            writeln!(
                o,
                "\n({} tokens compared: llama-perplexity prints no statistics below 100; these are indicative)",
                s.count
            )?;
        }
        writeln!(o, "\n====== Perplexity statistics ======")?;
        writeln!(
            o,
            "Mean PPL(Q)                   : {:10.6} ± {:10.6}",
            s.ppl, s.ppl_err
        )?;
        writeln!(
            o,
            "Mean PPL(base)                : {:10.6} ± {:10.6}",
            s.ppl_base, s.ppl_base_err
        )?;
        writeln!(
            o,
            "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%",
            100.0 * s.ln_ppl_cor
        )?;
        writeln!(
            o,
            "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}",
            s.ln_ppl_ratio, s.ln_ppl_ratio_err
        )?;
        writeln!(
            o,
            "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
            s.ppl_ratio, s.ppl_ratio_err
        )?;
        writeln!(
            o,
            "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}",
            s.ppl_diff, s.ppl_diff_err
        )?;
        writeln!(o, "\n====== KL divergence statistics ======")?;
        writeln!(o, "Mean    KLD: {:10.6} ± {:10.6}", s.kld, s.kld_err)?;
        let k = &s.kld_pct;
        for (name, v) in pct_lines(k, false) {
            writeln!(o, "{name} KLD: {v:10.6}")?;
        }
        writeln!(o, "\n====== Token probability statistics ======")?;
        writeln!(
            o,
            "Mean    Δp: {:6.3} ± {:5.3} %",
            100.0 * s.p_diff,
            100.0 * s.p_diff_err
        )?;
        for (name, v) in pct_lines(&s.p_diff_pct, true) {
            writeln!(o, "{name} Δp: {:6.3}%", 100.0 * v)?;
        }
        writeln!(
            o,
            "RMS Δp    : {:6.3} ± {:5.3} %",
            100.0 * s.p_diff_rms,
            100.0 * s.p_diff_rms_err
        )?;
        writeln!(
            o,
            "Same top p: {:6.3} ± {:5.3} %",
            100.0 * s.same_top,
            100.0 * s.same_top_err
        )?;
        eprintln!(
            "{} tokens compared in {:.1} s",
            s.count,
            t0.elapsed().as_secs_f64()
        );
        Ok(ExitCode::SUCCESS)
    }
}

/// The percentile lines llama-perplexity prints, largest first (Δp also
/// has the quartiles).
fn pct_lines(p: &Percentiles, quartiles: bool) -> Vec<(&'static str, f64)> {
    let mut v = vec![
        ("Maximum", p.max),
        ("99.9%  ", p.p99_9),
        ("99.0%  ", p.p99),
        ("95.0%  ", p.p95),
        ("90.0%  ", p.p90),
    ];
    if quartiles {
        v.push(("75.0%  ", p.p75));
    }
    v.push(("Median ", p.median));
    if quartiles {
        v.push(("25.0%  ", p.p25));
    }
    v.extend([
        ("10.0%  ", p.p10),
        (" 5.0%  ", p.p5),
        (" 1.0%  ", p.p1),
        (" 0.1%  ", p.p0_1),
        ("Minimum", p.min),
    ]);
    v
}
