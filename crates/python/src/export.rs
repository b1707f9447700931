//! `gpack.export`: `gpack export` as a function.

use gpack_runtime::export::export as rexport;
use pyo3::prelude::*;
use std::path::PathBuf;

/// Writes the .gpack `src`'s tensors and metadata back to the GGUF `out`, as
/// `gpack export` does: every metadata key of the source in its order;
/// tensors stored exactly in their ggml type, byte for byte (a .gpack
/// converted with `quant="keep"` gives back every source tensor bit for bit,
/// in name order); tensors whose layout has no ggml type (the int8/int4
/// transcodes) as F32 values, listed in the report's `dequantized_to_f32`.
/// MoE models are not exported yet. `out` is written through a temporary
/// file (nothing is left at `out` on failure); an existing `out` is replaced
/// only with `force`. Returns the export report (`gpack export --json`'s
/// dict, schema `gpack.export.v1`). Runs without holding the GIL.
#[pyfunction]
#[pyo3(signature = (src, out, *, force = false))]
pub fn export(py: Python<'_>, src: PathBuf, out: PathBuf, force: bool) -> PyResult<Py<PyAny>> {
    crate::report_to_py(py, "exporting", &src, &out, || {
        rexport(&src, &out, force, &|_| {})
    })
}
