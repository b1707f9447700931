//! `gpack.convert`: `gpack convert` as a function.

use gpack_convert::{convert as rconvert, ConvertOptions, Progress, Quant};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

/// No progress bars from Python.
struct Quiet;

impl Progress for Quiet {
    fn section(&self, _name: &str, _bytes: u64) {}
    fn advance(&self, _bytes: u64) {}
}

/// Converts `src` (a GGUF, the first shard of a split GGUF, a safetensors
/// file, a `model.safetensors.index.json` or a Hugging Face directory) into
/// the .gpack `out`, atomically (nothing is left at `out` on failure), as
/// `gpack convert` does. `quant`: `"keep"` (default), llama-quantize's
/// types and mixes (`"Q4_K_M"`, `"Q8_0"`, `"IQ4_XS"`, …: `gpack convert
/// --help` lists them) or gpack's `"int8"`, `"int8int8"`, `"int4"`;
/// `allow_requantize` lets an already-quantized source be quantized again;
/// `imatrix` an importance matrix file (llama.cpp's GGUF or legacy `.dat`,
/// from `gpack imatrix` or llama-imatrix) guiding the quantizers as
/// `gpack convert --imatrix` / `llama-quantize --imatrix` do (the same
/// bytes as the CLI); `name` the manifest name; `external_experts`
/// leaves routed experts in the source shards; `force` replaces an existing
/// `out`; `draft` packs a draft model with the same tokenizer for
/// speculative decoding (`gpack convert --draft`). Returns the conversion report (`gpack convert --json`'s dict).
/// Runs without holding the GIL.
#[pyfunction]
#[pyo3(signature = (src, out, *, quant = "keep", name = None, external_experts = false,
                    force = false, mtp_dir = None, draft = None, allow_requantize = false,
                    imatrix = None))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments
pub fn convert(
    py: Python<'_>,
    src: PathBuf,
    out: PathBuf,
    quant: &str,
    name: Option<String>,
    external_experts: bool,
    force: bool,
    mtp_dir: Option<PathBuf>,
    draft: Option<PathBuf>,
    allow_requantize: bool,
    imatrix: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let quant: Quant = quant
        .parse()
        .map_err(|e: String| PyValueError::new_err(e))?;
    let opts = ConvertOptions {
        source: src.clone(),
        output: out.clone(),
        name,
        quant,
        external_experts,
        force,
        mtp_dir,
        draft,
        allow_requantize,
        imatrix,
    };
    crate::report_to_py(py, "converting", &src, &out, || rconvert(&opts, &Quiet))
}
