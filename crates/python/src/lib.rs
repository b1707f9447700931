//! `gpack._gpack`: the native half of the `gpack` Python package.
//!
//! The Python half (`python/gpack/__init__.py`) wraps these classes: it turns
//! the array owners ([`array::Array`]) into NumPy arrays through NumPy's
//! `__array_interface__` protocol, parses JSON reports and gives the
//! iterators their Python shape. Everything that computes lives in the other
//! crates of the workspace: reading and verifying (gpack-format), tensor
//! views and dequantization (gpack-runtime's `GpackWeights`, gpack-quant),
//! tokenizers and chat templates (gpack-tokenizer), generation (gpack-runtime),
//! opening any model file (gpack-runtime's `Loaded`, as `gpack run` and `gpack serve` do),
//! conversion (gpack-convert) and export to GGUF (gpack-runtime's `export`).
//!
//! No `unsafe` here: views of the mapping are handed to NumPy as an address
//! plus the object that keeps the mapping alive (NumPy keeps that object as
//! the array's `base`), so the mapping is unmapped only when the last array
//! over it is gone.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

mod array;
mod convert;
mod export;
mod file;
mod model;
mod tok;

create_exception!(
    _gpack,
    GpackError,
    PyException,
    "An error reported by gpack's Rust code (a bad or corrupt file, an unsupported model, a failed conversion). The message is the Rust error with its causes."
);

pub(crate) use gpack_format::error_chain as chain;

/// A [`GpackError`] carrying `e`'s message and causes.
pub(crate) fn err(e: &dyn std::error::Error) -> PyErr {
    GpackError::new_err(chain(e))
}

/// A [`GpackError`] with a message.
pub(crate) fn err_msg(m: impl Into<String>) -> PyErr {
    GpackError::new_err(m.into())
}

/// The native module.
#[pymodule]
fn _gpack(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("GpackError", m.py().get_type::<GpackError>())?;
    m.add_class::<array::Array>()?;
    m.add_class::<file::File>()?;
    m.add_class::<tok::Tokenizer>()?;
    m.add_class::<model::Model>()?;
    m.add_class::<model::Stream>()?;
    m.add_function(wrap_pyfunction!(convert::convert, m)?)?;
    m.add_function(wrap_pyfunction!(export::export, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Runs a file operation of the library without the GIL and returns its
/// report as a dict: an error becomes a `GpackError` reading `VERB SRC to
/// OUT: cause: cause`, SRC left out when the cause names it (the CLI's
/// message, [`gpack_format::job_context`]; what `gpack.convert` and
/// `gpack.export` share).
pub(crate) fn report_to_py<R, E>(
    py: Python<'_>,
    verb: &str,
    src: &std::path::Path,
    out: &std::path::Path,
    run: impl Send + FnOnce() -> Result<R, E>,
) -> PyResult<Py<PyAny>>
where
    R: serde::Serialize + Send,
    E: std::error::Error + gpack_format::NamesFile + Send,
{
    let report = py.detach(run).map_err(|e| {
        let ctx = gpack_format::job_context(verb, src, out, &e);
        err_msg(format!("{ctx}: {}", chain(&e)))
    })?;
    let v = serde_json::to_value(&report).map_err(|e| err_msg(e.to_string()))?;
    json_to_py(py, &v)
}

/// A JSON value as Python objects (dicts, lists, str, int, float, bool, None).
pub(crate) fn json_to_py(py: Python<'_>, v: &serde_json::Value) -> PyResult<Py<PyAny>> {
    use pyo3::types::{PyDict, PyList};
    use serde_json::Value;
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.into_pyobject(py)?.into_any().unbind(),
            (_, Some(i), _) => i.into_pyobject(py)?.into_any().unbind(),
            (_, _, f) => f.unwrap_or(f64::NAN).into_pyobject(py)?.into_any().unbind(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        Value::Array(a) => {
            let items = a
                .iter()
                .map(|x| json_to_py(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, json_to_py(py, x)?)?;
            }
            d.into_any().unbind()
        }
    })
}
