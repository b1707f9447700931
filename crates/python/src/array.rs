//! [`Array`]: what a NumPy array made by `gpack` is a view of.
//!
//! NumPy builds an array from any object with an `__array_interface__`
//! (version 3: shape, typestr, data address, read-only flag) and keeps that
//! object as the array's `base`. An [`Array`] is such an object: it holds an
//! `Arc` of the mapped file its address points into, so closing the
//! `gpack.File` or dropping it leaves the mapping alive until the last array
//! over it is collected. (Dequantized tensors are NumPy arrays over a
//! `bytearray` instead; see `file.rs`.)

use crate::file::Inner;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::Arc;

/// Owner of a NumPy array's memory (its `.base`); see `gpack.File.tensor`.
#[pyclass(module = "gpack._gpack", frozen)]
pub struct Array {
    /// Keeps the mapping alive (never read).
    _file: Arc<Inner>,
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
            _file: file,
            shape,
            typestr,
        }
    }
}

#[pymethods]
impl Array {
    /// NumPy's array interface (version 3). The address stays valid while
    /// this object lives: it holds the mapping.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", self.typestr)?;
        // Read-only: the file is mapped without write access.
        d.set_item("data", (self.addr, true))?;
        Ok(d)
    }

    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    fn __repr__(&self) -> String {
        format!(
            "<gpack array owner {} {:?} at {:#x}>",
            self.typestr, self.shape, self.addr
        )
    }
}
