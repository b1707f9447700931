//! [`Array`]: what a NumPy array made by `gpack` is a view of.
//!
//! NumPy builds an array from any object with an `__array_interface__`
//! (version 3: shape, typestr, data address, read-only flag) and keeps that
//! object as the array's `base`. An [`Array`] is such an object: it owns
//! what the address points into, either the mapped file (an `Arc` of it, so
//! closing the `gpack.File` or dropping it leaves the mapping alive until the
//! last array over it is collected) or a buffer of dequantized values.

use crate::file::Inner;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

/// What keeps the memory of an [`Array`] alive.
pub(crate) enum Keep {
    /// Bytes inside the mapping of an open file (read-only).
    Map(#[allow(dead_code)] Arc<Inner>),
    /// f32 values computed for this array. Atomics only so that NumPy may
    /// write into them (the array is writable) without Rust holding shared
    /// references to memory mutated behind its back; Rust never reads them
    /// again.
    Owned(#[allow(dead_code)] Box<[AtomicU32]>),
}

/// Owner of a NumPy array's memory (its `.base`); see `gpack.File.tensor`.
#[pyclass(module = "gpack._gpack", frozen)]
pub struct Array {
    keep: Keep,
    addr: usize,
    nbytes: usize,
    shape: Vec<usize>,
    typestr: &'static str,
}

impl Array {
    /// `bytes` of an open file, read-only, as `shape` of `typestr` values.
    pub(crate) fn mapped(
        file: Arc<Inner>,
        bytes: &[u8],
        shape: Vec<usize>,
        typestr: &'static str,
    ) -> Array {
        Array {
            addr: bytes.as_ptr() as usize,
            nbytes: bytes.len(),
            keep: Keep::Map(file),
            shape,
            typestr,
        }
    }

    /// Owned f32 values, writable.
    pub(crate) fn owned_f32(values: Vec<f32>, shape: Vec<usize>) -> Array {
        let cells: Box<[AtomicU32]> = values
            .into_iter()
            .map(|v| AtomicU32::new(v.to_bits()))
            .collect();
        Array {
            addr: cells.as_ptr() as usize,
            nbytes: cells.len() * 4,
            keep: Keep::Owned(cells),
            shape,
            typestr: "<f4",
        }
    }
}

#[pymethods]
impl Array {
    /// NumPy's array interface (version 3). The address stays valid while
    /// this object lives: it owns the mapping or the buffer.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", self.typestr)?;
        let readonly = matches!(self.keep, Keep::Map(_));
        d.set_item("data", (self.addr, readonly))?;
        Ok(d)
    }

    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Whether this is a view of the mapped file (rather than a computed buffer).
    #[getter]
    fn mapped_view(&self) -> bool {
        matches!(self.keep, Keep::Map(_))
    }

    fn __repr__(&self) -> String {
        format!(
            "<gpack array owner {} {:?} at {:#x}>",
            self.typestr, self.shape, self.addr
        )
    }
}
