//! `gpack.File` (what `gpack.open` returns): a mapped, quick-validated
//! .gpack with its metadata, sections, tensor index, tensors as NumPy arrays
//! and full verification.

use crate::array::Array;
use crate::{err, err_msg};
use gpack_format::payload::{self, TensorEntry};
use gpack_format::SectionKind;
use gpack_ingest::{Array as GArray, Value};
use gpack_quant::layout::Layout;
use gpack_quant::{GgmlType, NativeView};
use gpack_runtime::{GpackWeights, TensorRef};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// An open file: the mapping (inside `w`) and its tensor index. Shared by
/// the `File` and every array over its mapping.
pub(crate) struct Inner {
    w: GpackWeights,
}

impl Inner {
    fn open(path: &std::path::Path) -> Result<Inner, String> {
        // Each tensor's view is validated when it is first used, not all at
        // open (which would fault in a page of every tensor).
        let w = gpack_format::Gpack::open(path)
            .map_err(gpack_runtime::Error::from)
            .and_then(GpackWeights::from_gpack_lazy)
            .map_err(|e| format!("{}: {}", path.display(), crate::chain(&e)))?;
        Ok(Inner { w })
    }

    fn entry(&self, name: &str) -> PyResult<&TensorEntry> {
        self.w
            .tensor_entry(name)
            .ok_or_else(|| PyKeyError::new_err(format!("no tensor named {name:?} in this file")))
    }

    fn verify(&self) -> Result<(), String> {
        let g = self.w.gpack();
        g.verify_full(&|_| {})
            .and_then(|()| g.verify_external(true))
            .map_err(|e| format!("{}: {}", g.path().display(), crate::chain(&e)))
    }
}

/// The storage layout's name (`"Q4_1x16"`, `"F32"`, `"raw"` for ggml bytes).
fn layout_name(e: &TensorEntry) -> String {
    if e.layout == payload::LAYOUT_GGML {
        return "raw".into();
    }
    Layout::from_code(e.layout, e.group)
        .map_or_else(|_| format!("#{}", e.layout), |l| l.name().into())
}

fn type_name(e: &TensorEntry) -> String {
    GgmlType::from_id(e.src_type).map_or_else(|| format!("#{}", e.src_type), |t| t.name().into())
}

/// Whether `tensor()` returns a view for `e` (F32/F16 data, stored as such).
fn is_view(e: &TensorEntry) -> bool {
    let f = [GgmlType::F32.id(), GgmlType::F16.id()];
    let expert = matches!(
        SectionKind::from_u32(e.section),
        Some(SectionKind::ExpertBlobs | SectionKind::ExpertLayout) | None
    );
    !expert
        && match e.layout {
            payload::LAYOUT_GGML => f.contains(&e.src_type),
            code => matches!(
                Layout::from_code(code, e.group),
                Ok(Layout::F32 | Layout::F16)
            ),
        }
}

/// NumPy shape: GGUF dims reversed (ne0, the contiguous one, last).
fn shape_of(e: &TensorEntry, n: usize) -> Vec<usize> {
    let s: Vec<usize> = e.dims.iter().rev().map(|&d| d as usize).collect();
    if s.iter().product::<usize>() == n {
        s
    } else {
        vec![n]
    }
}

/// A dequantizer writing a tensor's f32 values into its argument.
type Fill<'a> = Box<dyn Fn(&mut [f32]) -> Result<(), String> + Send + Sync + 'a>;

/// A tensor's bytes as the runtime serves them: `(bytes, typestr)` when
/// NumPy can view them as they are, or how many f32 values it has and how
/// to compute them.
enum Data<'a> {
    View(&'a [u8], &'static str),
    Compute(usize, Fill<'a>),
}

/// The runtime's view of tensor `name`, its validation error raised.
fn lookup<'a>(inner: &'a Inner, name: &str) -> PyResult<Option<TensorRef<'a>>> {
    match inner.w.try_tensor(name) {
        None => Ok(None),
        Some(Ok(t)) => Ok(Some(t)),
        Some(Err(e)) => Err(err_msg(format!("tensor {name}: {}", crate::chain(&e)))),
    }
}

fn cannot(name: &str, t: GgmlType) -> PyErr {
    err_msg(format!(
        "tensor {name}: gpack cannot dequantize {} (only its raw() bytes are available)",
        t.name()
    ))
}

fn fetch<'a>(inner: &'a Inner, name: &str) -> PyResult<Data<'a>> {
    let Some(t) = lookup(inner, name)? else {
        return Err(err_msg(format!(
            "tensor {name} is a routed expert (stored per expert for the MoE runtime); \
             read its stored bytes with raw()"
        )));
    };
    match t {
        TensorRef::Native {
            view,
            row_start,
            rows,
        } => match view.layout() {
            Layout::F32 | Layout::F16 => {
                let sub = member(&view, row_start, rows, name)?;
                let ts = if view.layout() == Layout::F32 {
                    "<f4"
                } else {
                    "<f2"
                };
                Ok(Data::View(sub.codes(), ts))
            }
            l => {
                if let Layout::Ggml(ty) | Layout::Rows16(ty) = l {
                    if !gpack_quant::ggml::can_dequantize(ty) {
                        return Err(cannot(name, ty));
                    }
                }
                let cols = view.cols();
                Ok(Data::Compute(
                    rows * cols,
                    Box::new(move |out: &mut [f32]| {
                        // Chunks of whole 16-row groups (the first may be
                        // shorter when the tensor starts inside one), each
                        // group decoded once.
                        const CHUNK: usize = 64;
                        let head = (CHUNK - row_start % CHUNK) % CHUNK;
                        let (first, rest) = out.split_at_mut((head.min(rows)) * cols);
                        view.dequantize_rows(row_start, first);
                        rest.par_chunks_mut(CHUNK * cols)
                            .enumerate()
                            .for_each(|(i, o)| {
                                view.dequantize_rows(row_start + head + i * CHUNK, o)
                            });
                        Ok(())
                    }),
                ))
            }
        },
        TensorRef::Dense {
            ggml_type, bytes, ..
        } => match ggml_type {
            GgmlType::F32 => Ok(Data::View(bytes, "<f4")),
            GgmlType::F16 => Ok(Data::View(bytes, "<f2")),
            t if gpack_quant::ggml::can_dequantize(t) => {
                let (bs, ts) = t.block();
                let n = bytes.len() / ts as usize * bs as usize;
                let name = name.to_string();
                Ok(Data::Compute(
                    n,
                    Box::new(move |out: &mut [f32]| {
                        gpack_quant::dequantize_ggml(t, bytes, out)
                            .map_err(|e| format!("tensor {name}: {}", crate::chain(&e)))
                    }),
                ))
            }
            t => Err(cannot(name, t)),
        },
    }
}

/// A new float32 NumPy array of `shape` filled by `fill` without the GIL.
///
/// The array comes from `numpy.zeros` (`PyArray_Zeros`: `calloc`, whose
/// large blocks are fresh zero pages mapped lazily), so no pass writes the
/// buffer before `fill` does: its pages are first touched by `fill`'s own
/// threads, in parallel. (A `bytearray` is zeroed by one thread holding the
/// GIL first, which cost about as much as the dequantization.)
fn computed<'py>(
    py: Python<'py>,
    n: usize,
    shape: Vec<usize>,
    fill: &Fill<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    use numpy::PyArrayMethods;
    let arr = numpy::PyArray1::<f32>::zeros(py, n, false);
    {
        let mut rw = arr.try_readwrite().map_err(|e| err_msg(e.to_string()))?;
        let out = rw.as_slice_mut().map_err(|e| err_msg(e.to_string()))?;
        py.detach(|| fill(out)).map_err(err_msg)?;
    }
    arr.into_any()
        .call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// Rows `row_start..+rows` of a native tensor (a fused q‖k‖v member).
fn member<'a>(
    view: &NativeView<'a>,
    row_start: usize,
    rows: usize,
    name: &str,
) -> PyResult<NativeView<'a>> {
    view.row_range(row_start, rows).ok_or_else(|| {
        err_msg(format!(
            "tensor {name}: rows {row_start}..+{rows} do not split its {}-row native tensor",
            view.rows()
        ))
    })
}

/// A mapped .gpack file. Made by `gpack.open(path, verify="quick"|"full")`.
///
/// Opening maps the file and runs the quick check (header, section table,
/// manifest digest, sizes: about a millisecond whatever the size);
/// `verify="full"` also hashes every section. Arrays returned by `tensor()`
/// and `raw()` keep the mapping alive on their own: `close()` (or leaving a
/// `with` block) only ends this object's use of it.
#[pyclass(module = "gpack._gpack", frozen)]
pub struct File {
    inner: Mutex<Option<Arc<Inner>>>,
    path: PathBuf,
    metadata: OnceLock<Py<PyDict>>,
}

impl File {
    fn inner(&self) -> PyResult<Arc<Inner>> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| PyValueError::new_err("I/O operation on a closed gpack file"))
    }
}

fn value_to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::U8(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::I8(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::U16(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::I16(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::U32(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::I32(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::U64(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::I64(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::F32(x) => f64::from(*x).into_pyobject(py)?.into_any().unbind(),
        Value::F64(x) => x.into_pyobject(py)?.into_any().unbind(),
        Value::Bool(x) => x.into_pyobject(py)?.to_owned().into_any().unbind(),
        Value::String(s) => string_to_py(py, s),
        Value::Array(a) => array_to_py(py, a)?,
    })
}

fn string_to_py(py: Python<'_>, s: &gpack_ingest::GgufString) -> Py<PyAny> {
    match s.as_str() {
        Some(t) => pyo3::types::PyString::new(py, t).into_any().unbind(),
        None => PyBytes::new(py, s.as_bytes()).into_any().unbind(),
    }
}

fn array_to_py(py: Python<'_>, a: &GArray) -> PyResult<Py<PyAny>> {
    fn list<'py, T: Copy + IntoPyObject<'py>>(py: Python<'py>, v: &[T]) -> PyResult<Py<PyAny>> {
        Ok(PyList::new(py, v.iter().copied())?.into_any().unbind())
    }
    match a {
        GArray::U8(v) => list(py, v),
        GArray::I8(v) => list(py, v),
        GArray::U16(v) => list(py, v),
        GArray::I16(v) => list(py, v),
        GArray::U32(v) => list(py, v),
        GArray::I32(v) => list(py, v),
        GArray::U64(v) => list(py, v),
        GArray::I64(v) => list(py, v),
        GArray::F32(v) => list(py, &v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()),
        GArray::F64(v) => list(py, v),
        GArray::Bool(v) => list(py, v),
        GArray::String(v) => Ok(PyList::new(py, v.iter().map(|s| string_to_py(py, s)))?
            .into_any()
            .unbind()),
        GArray::Array(v) => {
            let items = v
                .iter()
                .map(|a| array_to_py(py, a))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(PyList::new(py, items)?.into_any().unbind())
        }
    }
}

/// `numpy.asarray(owner)`: the array whose `.base` is `owner`.
fn to_numpy<'py>(py: Python<'py>, owner: Array) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    np.call_method1("asarray", (Bound::new(py, owner)?,))
}

#[pymethods]
impl File {
    /// Maps `path` and checks it (`verify`: `"quick"`, the default, or
    /// `"full"` to also hash every section). Raises `gpack.GpackError` with
    /// the reason (a truncated file, a bad magic, a failing section named).
    #[new]
    #[pyo3(signature = (path, verify = "quick"))]
    fn new(py: Python<'_>, path: PathBuf, verify: &str) -> PyResult<File> {
        let full = match verify {
            "quick" => false,
            "full" => true,
            v => {
                return Err(PyValueError::new_err(format!(
                    "verify must be \"quick\" or \"full\", not {v:?}"
                )))
            }
        };
        let inner = py.detach(|| {
            let inner = Inner::open(&path)?;
            if full {
                inner.verify()?;
            }
            Ok::<_, String>(inner)
        });
        let inner = inner.map_err(err_msg)?;
        Ok(File {
            inner: Mutex::new(Some(Arc::new(inner))),
            path,
            metadata: OnceLock::new(),
        })
    }

    /// The file's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The file's digest (SHA-256 of its manifest, hex): what `gpack verify` prints.
    #[getter]
    fn digest(&self) -> PyResult<String> {
        let i = self.inner()?;
        Ok(i.w
            .gpack()
            .layout()
            .digest()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    }

    /// The manifest (name, source, quant, created…) as a dict.
    #[getter]
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let i = self.inner()?;
        let s = serde_json::to_string(&i.w.gpack().manifest().to_value())
            .map_err(|e| err_msg(e.to_string()))?;
        py.import("json")?.call_method1("loads", (s,))
    }

    /// Every metadata key of the source model (GGUF names and value types:
    /// ints, floats, bools, strings, lists; bytes for non-UTF-8 strings).
    /// Decoded on first use; each call returns a new shallow copy.
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(d) = self.metadata.get() {
            return d.bind(py).copy();
        }
        let i = self.inner()?;
        let d = PyDict::new(py);
        if let Some(s) = i.w.gpack().section(SectionKind::MetadataKv) {
            for r in payload::parse_kv(s.bytes).map_err(|e| err(&e))? {
                let v = gpack_ingest::gguf::decode_value(r.value_type, r.value).map_err(|e| {
                    err_msg(format!("metadata key {}: {}", r.key, crate::chain(&e)))
                })?;
                d.set_item(r.key, value_to_py(py, &v)?)?;
            }
        }
        let _ = self.metadata.set(d.clone().unbind());
        d.copy()
    }

    /// The sections in file order: dicts with `name`, `kind`, `offset`,
    /// `size`, `alignment`, `item_count` and `sha256` (hex).
    #[getter]
    fn sections<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let i = self.inner()?;
        let l = PyList::empty(py);
        for s in &i.w.gpack().layout().sections {
            let d = PyDict::new(py);
            d.set_item("name", &s.name)?;
            d.set_item("kind", s.kind.default_name())?;
            d.set_item("offset", s.offset)?;
            d.set_item("size", s.size)?;
            d.set_item("alignment", s.alignment)?;
            d.set_item("item_count", s.item_count)?;
            let hex: String = s.sha256.iter().map(|b| format!("{b:02x}")).collect();
            d.set_item("sha256", hex)?;
            l.append(d)?;
        }
        Ok(l)
    }

    /// The tensor index: name → dict with `type` (the source's ggml type),
    /// `layout` (how it is stored: `"Q4_1x16"` is Q4_1 blocks interleaved by
    /// 16 rows, `"F32"`, `"raw"` for plain ggml bytes), `shape` (NumPy
    /// order: the GGUF dims reversed), `section`, `offset`, `size` (bytes of
    /// the stored tensor inside that section) and `view` (whether
    /// `tensor()` returns a view of the mapping rather than computed values).
    #[getter]
    fn tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = self.inner()?;
        let out = PyDict::new(py);
        let mut entries: Vec<&TensorEntry> = i.w.tensor_entries().collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in entries {
            let d = PyDict::new(py);
            d.set_item("type", type_name(e))?;
            d.set_item("layout", layout_name(e))?;
            let shape: Vec<u64> = e.dims.iter().rev().copied().collect();
            d.set_item("shape", PyTuple::new(py, shape)?)?;
            let section = SectionKind::from_u32(e.section).map_or("?", |k| k.default_name());
            d.set_item("section", section)?;
            d.set_item("offset", e.offset)?;
            d.set_item("size", e.size)?;
            d.set_item("view", is_view(e))?;
            out.set_item(&e.name, d)?;
        }
        Ok(out)
    }

    /// Tensor `name` as a NumPy array in the GGUF shape reversed (rows,
    /// cols). F32 and F16 data come back as a read-only view of the mapping
    /// (no copy); everything else (BF16, which NumPy has no type for, and
    /// every quantized type) is dequantized into a new float32 array, bit for
    /// bit what ggml's dequantization gives. Raises KeyError for an unknown
    /// name.
    fn tensor<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let i = self.inner()?;
        let e = i.entry(name)?;
        let out = match fetch(&i, name)? {
            Data::View(bytes, ts) => {
                let n = bytes.len() / if ts == "<f4" { 4 } else { 2 };
                let shape = shape_of(e, n);
                to_numpy(py, Array::mapped(i.clone(), bytes, shape, ts))
            }
            Data::Compute(n, fill) => computed(py, n, shape_of(e, n), &fill),
        };
        out
    }

    /// The stored bytes of tensor `name`, zero-copy, as a read-only 1-D
    /// uint8 NumPy array over the mapping: for a quantized tensor its ggml
    /// blocks in the file's 16-row interleaved order (docs/FORMAT.md
    /// "Rows16"), for F32/F16/BF16 its values, for an int8/int4 layout its
    /// codes (the scales are separate arrays); for a member of a fused
    /// q‖k‖v or gate‖up tensor, its own rows only.
    fn raw<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let i = self.inner()?;
        let e = i.entry(name)?;
        let bytes: &[u8] = match lookup(&i, name)? {
            Some(TensorRef::Native {
                view,
                row_start,
                rows,
            }) => member(&view, row_start, rows, name)?.codes(),
            Some(TensorRef::Dense { bytes, .. }) => bytes,
            None => {
                let kind = SectionKind::from_u32(e.section)
                    .ok_or_else(|| err_msg(format!("tensor {name}: unknown section kind")))?;
                let s =
                    i.w.gpack()
                        .section(kind)
                        .ok_or_else(|| err_msg(format!("tensor {name}: its section is missing")))?;
                usize::try_from(e.offset)
                    .ok()
                    .zip(usize::try_from(e.size).ok())
                    .and_then(|(o, n)| s.bytes.get(o..o.checked_add(n)?))
                    .ok_or_else(|| err_msg(format!("tensor {name}: outside its section")))?
            }
        };
        let n = bytes.len();
        to_numpy(py, Array::mapped(i.clone(), bytes, vec![n], "|u1"))
    }

    /// Hashes every section (on all cores, without holding the GIL) and
    /// raises `gpack.GpackError` naming each section that fails.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        let i = self.inner()?;
        py.detach(|| i.verify()).map_err(err_msg)
    }

    /// `(address, length)` of the file's mapping in this process.
    #[getter]
    fn mapping(&self) -> PyResult<(usize, usize)> {
        let i = self.inner()?;
        let b = i.w.gpack().bytes();
        Ok((b.as_ptr() as usize, b.len()))
    }

    /// Ends this object's use of the mapping. Arrays already returned stay
    /// valid: each keeps the mapping alive until it is collected.
    fn close(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }

    fn __contains__(&self, name: &str) -> PyResult<bool> {
        Ok(self.inner()?.w.tensor_entry(name).is_some())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.inner()?.w.tensor_entries().count())
    }

    fn __repr__(&self) -> String {
        let state = match self.inner() {
            Ok(i) => format!("{} tensors", i.w.tensor_entries().count()),
            Err(_) => "closed".into(),
        };
        format!(
            "<gpack.File {:?} ({state})>",
            self.path.display().to_string()
        )
    }
}
