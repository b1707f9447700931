//! A streaming GGUF v3 writer.
//!
//! The layout follows gguf-py's `GGUFWriter` so that re-writing a parsed file
//! reproduces it byte for byte: metadata in the given order, tensor descriptors in
//! the given order with offsets packed back to back (each tensor's data padded with
//! zeros to the alignment, the last one included), and the header padded to the
//! alignment when there are tensors. Descriptors go first, so all tensor shapes are needed up front, but
//! tensor data is then streamed one tensor at a time ([`Writer::write_tensor_data`]):
//! `gpack export` never holds more than one tensor.

use crate::error::WriteProblem;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use gpack_format::ggml::GgmlType;

use super::read::{align_up, tensor_size};
use super::{DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS, MAX_TENSOR_NAME_LEN};
use crate::error::Error;
use crate::value::{Array, GgufString, Metadata, Value};

/// Name, type and shape of a tensor to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorHeader {
    /// Tensor name (at most [`super::MAX_TENSOR_NAME_LEN`] bytes).
    pub name: String,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Dimensions, innermost first.
    pub dims: Vec<u64>,
}

/// Writes one GGUF: header and descriptors in [`Writer::new`], then each tensor's data
/// in order with [`Writer::write_tensor_data`], then [`Writer::finish`].
pub struct Writer<W: Write> {
    out: W,
    alignment: u64,
    tensors: Vec<(String, u64)>,
    next: usize,
}

fn io(e: std::io::Error) -> Error {
    Error::Io {
        file: PathBuf::from("<gguf writer>"),
        what: "write",
        source: e,
    }
}

fn bad(tensor: &str, reason: WriteProblem) -> Error {
    Error::Write {
        tensor: tensor.to_string(),
        reason,
    }
}

impl<W: Write> Writer<W> {
    /// Writes the header, `metadata` and the descriptors of `tensors`.
    ///
    /// `general.alignment`, if present, must be a `U32` non-zero power of two; tensor
    /// names must be unique and at most 63 bytes, shapes valid for their types
    /// (the same rules the reader applies).
    pub fn new(mut out: W, metadata: &Metadata, tensors: &[TensorHeader]) -> Result<Self, Error> {
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => u64::from(*a),
            Some(_) => return Err(bad("", WriteProblem::Alignment)),
        };
        let mut head = Vec::new();
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (k, v) in metadata.iter() {
            put_str(&mut head, k.as_bytes());
            head.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut head, v);
        }
        let mut names = HashSet::new();
        let mut sizes = Vec::with_capacity(tensors.len());
        let mut offset = 0u64;
        let nowhere = Path::new("<gguf writer>");
        for t in tensors {
            if t.name.len() as u64 > MAX_TENSOR_NAME_LEN {
                return Err(bad(&t.name, WriteProblem::NameTooLong));
            }
            if !names.insert(t.name.as_str()) {
                return Err(bad(&t.name, WriteProblem::DuplicateName));
            }
            if t.dims.len() as u64 > MAX_DIMS {
                return Err(bad(&t.name, WriteProblem::TooManyDims));
            }
            let size = tensor_size(nowhere, &t.name, t.ggml_type, &t.dims)
                .map_err(|_| bad(&t.name, WriteProblem::InvalidShape))?;
            put_str(&mut head, t.name.as_bytes());
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            let padded = align_up(nowhere, size, alignment)
                .map_err(|_| bad(&t.name, WriteProblem::SizeOverflow))?;
            offset = offset
                .checked_add(padded)
                .ok_or_else(|| bad(&t.name, WriteProblem::TotalOverflow))?;
            sizes.push((t.name.clone(), size));
        }
        // The padding aligns the tensor data: a file without tensors has
        // none to align. (A parsed file with no tensors may declare any
        // power-of-two alignment, up to 2^31, without holding its padding:
        // writing it back padded asked for gigabytes from a 99-byte input.)
        if !tensors.is_empty() {
            let padded = align_up(nowhere, head.len() as u64, alignment)?;
            head.resize(padded as usize, 0);
        }
        out.write_all(&head).map_err(io)?;
        Ok(Self {
            out,
            alignment,
            tensors: sizes,
            next: 0,
        })
    }

    /// Writes the data of the next tensor (in the order given to [`Writer::new`]),
    /// followed by padding.
    pub fn write_tensor_data(&mut self, data: &[u8]) -> Result<(), Error> {
        let Some((name, size)) = self.tensors.get(self.next) else {
            return Err(bad("", WriteProblem::MoreData));
        };
        if data.len() as u64 != *size {
            return Err(bad(name, WriteProblem::DataLength));
        }
        self.out.write_all(data).map_err(io)?;
        let pad = (self.alignment - *size % self.alignment) % self.alignment;
        self.out.write_all(&vec![0u8; pad as usize]).map_err(io)?;
        self.next += 1;
        Ok(())
    }

    /// Checks every tensor was written, flushes and returns the output.
    pub fn finish(mut self) -> Result<W, Error> {
        if let Some((name, _)) = self.tensors.get(self.next) {
            return Err(bad(name, WriteProblem::NotWritten));
        }
        self.out.flush().map_err(io)?;
        Ok(self.out)
    }
}

/// Writes a whole GGUF to a `Vec`.
pub fn to_vec<'a>(
    metadata: &Metadata,
    tensors: impl IntoIterator<Item = (&'a str, GgmlType, &'a [u64], &'a [u8])>,
) -> Result<Vec<u8>, Error> {
    let tensors: Vec<_> = tensors.into_iter().collect();
    let headers: Vec<TensorHeader> = tensors
        .iter()
        .map(|(name, t, dims, _)| TensorHeader {
            name: name.to_string(),
            ggml_type: *t,
            dims: dims.to_vec(),
        })
        .collect();
    let mut w = Writer::new(Vec::new(), metadata, &headers)?;
    for (_, _, _, data) in &tensors {
        w.write_tensor_data(data)?;
    }
    w.finish()
}

/// Writes a whole GGUF to `path` (created or truncated).
pub fn write<'a>(
    path: &Path,
    metadata: &Metadata,
    tensors: impl IntoIterator<Item = (&'a str, GgmlType, &'a [u64], &'a [u8])>,
) -> Result<(), Error> {
    let tensors: Vec<_> = tensors.into_iter().collect();
    let headers: Vec<TensorHeader> = tensors
        .iter()
        .map(|(name, t, dims, _)| TensorHeader {
            name: name.to_string(),
            ggml_type: *t,
            dims: dims.to_vec(),
        })
        .collect();
    let f = std::fs::File::create(path).map_err(|e| Error::Io {
        file: path.to_path_buf(),
        what: "create",
        source: e,
    })?;
    let mut w = Writer::new(std::io::BufWriter::new(f), metadata, &headers)?;
    for (_, _, _, data) in &tensors {
        w.write_tensor_data(data)?;
    }
    let buf = w.finish()?;
    buf.into_inner()
        .map_err(|e| Error::Io {
            file: path.to_path_buf(),
            what: "write",
            source: e.into_error(),
        })?
        .sync_all()
        .map_err(|e| Error::Io {
            file: path.to_path_buf(),
            what: "sync",
            source: e,
        })
}

/// The GGUF encoding of `v`'s payload (without its type id): what follows the
/// `value_type u32` of a metadata entry, and what a GPACK MetadataKv record stores.
/// [`super::decode_value`] reads it back.
pub fn encode_value(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    put_value(&mut out, v);
    out
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s.as_bytes()),
        Value::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.element_type().id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v
            .iter()
            .for_each(|s: &GgufString| put_str(out, s.as_bytes())),
        Array::Array(v) => v.iter().for_each(|inner| put_array(out, inner)),
    }
}
