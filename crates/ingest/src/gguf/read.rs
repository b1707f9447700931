//! The GGUF parser. Never panics; see the module docs of [`crate::gguf`].

use crate::error::ShapeProblem;
use std::collections::HashSet;
use std::path::Path;

use gpack_format::cursor::{Cursor, CursorError};

use gpack_format::ggml::GgmlType;

use super::{
    GgufFile, GgufTensor, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_KEY_LEN,
    MAX_TENSOR_NAME_LEN,
};
use crate::error::{add, Error};
use crate::value::{Array, GgufString, Metadata, Value, ValueType};

/// Smallest possible metadata entry: empty key (u64 length) + type u32 + a 1-byte value.
const MIN_KV_SIZE: u64 = 8 + 4 + 1;
/// Smallest possible tensor descriptor: empty name + n_dims u32 (0) + type u32 + offset u64.
const MIN_TENSOR_INFO_SIZE: u64 = 8 + 4 + 4 + 8;
/// Most entries (tensor descriptors, array elements) allocated before they
/// are read: counts from the file only bound the entries by the file size.
const PREALLOC_ENTRIES: usize = 4096;

/// Parses a GGUF held in memory. Errors name the file as `<memory>`.
///
/// Never panics, whatever the bytes; see [`parse_named`].
pub fn parse(bytes: &[u8]) -> Result<GgufFile, Error> {
    parse_named(bytes, Path::new("<memory>"))
}

/// Reads the header and the metadata key/values; leaves `r` at the tensor
/// infos. Returns (version, tensor count, its offset, metadata).
fn header_and_metadata(r: &mut Reader<'_>) -> Result<(u32, u64, u64, Metadata), Error> {
    let file = r.file;
    let magic = r.take(4, "magic \"GGUF\"")?;
    if magic != MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(Error::BadMagic {
            file: file.to_path_buf(),
            found,
        });
    }
    let version = r.u32("version")?;
    if version != 2 && version != 3 {
        return Err(Error::UnsupportedVersion {
            file: file.to_path_buf(),
            version,
        });
    }
    let tensor_at = r.pos();
    let tensor_count = r.u64("tensor count")?;
    let kv_at = r.pos();
    let kv_count = r.u64("metadata key/value count")?;
    // Both tables follow; each entry takes at least its minimum size.
    let after = r.remaining();
    r.check_count(
        kv_at,
        "metadata key/value count",
        kv_count,
        after / MIN_KV_SIZE,
    )?;
    r.check_count(
        tensor_at,
        "tensor count",
        tensor_count,
        after / MIN_TENSOR_INFO_SIZE,
    )?;

    let mut metadata = Metadata::new();
    for _ in 0..kv_count {
        let key_at = r.pos();
        let key = r.utf8_string("metadata key", MAX_KEY_LEN)?;
        if metadata.contains_key(&key) {
            return Err(Error::DuplicateKey {
                file: file.to_path_buf(),
                offset: key_at,
                key,
            });
        }
        let value = r.value(&key)?;
        if r.skip_string_arrays && matches!(value, Value::Array(Array::String(_))) {
            continue;
        }
        metadata.insert(key, value);
    }
    Ok((version, tensor_count, tensor_at, metadata))
}

/// Parses only the header and the metadata of a GGUF (for example the
/// metadata-only GGUF inside a .giw bundle, truncated at its tensor data):
/// returns the version and the metadata. Never panics.
pub fn parse_metadata(bytes: &[u8], file: &Path) -> Result<(u32, Metadata), Error> {
    let mut r = Reader::new(bytes, file);
    let (version, _, _, metadata) = header_and_metadata(&mut r)?;
    Ok((version, metadata))
}

/// [`parse_metadata`] without the string arrays (vocabulary, merges:
/// megabytes on the heap): they are checked like every value, then left
/// out of the map. For readers that take the tokenizer from elsewhere.
pub fn parse_metadata_without_string_arrays(
    bytes: &[u8],
    file: &Path,
) -> Result<(u32, Metadata), Error> {
    let mut r = Reader::new(bytes, file);
    r.skip_string_arrays = true;
    let (version, _, _, metadata) = header_and_metadata(&mut r)?;
    Ok((version, metadata))
}

/// Parses the bytes of the GGUF file `file` (used only in error messages).
///
/// Validates the header, every metadata value, `general.alignment` (a `UINT32`
/// non-zero power of two), every tensor descriptor (known ggml type, at most
/// [`super::MAX_DIMS`] dimensions, a row length that is a whole number of blocks,
/// no overflow) and every tensor's byte range (aligned, packed in descriptor order
/// as gguf.cpp requires, inside `bytes`). Never panics, whatever the bytes.
pub fn parse_named(bytes: &[u8], file: &Path) -> Result<GgufFile, Error> {
    let mut r = Reader::new(bytes, file);
    let (version, tensor_count, _, metadata) = header_and_metadata(&mut r)?;
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) => {
            let a = u64::from(*a);
            if a == 0 || !a.is_power_of_two() {
                return Err(Error::BadAlignment {
                    file: file.to_path_buf(),
                    value: a,
                });
            }
            a
        }
        Some(other) => {
            return Err(Error::WrongValueType {
                file: file.to_path_buf(),
                key: "general.alignment".into(),
                expected: ValueType::U32.name(),
                found: other.value_type().name(),
            })
        }
    };

    // Each descriptor still to come takes at least MIN_TENSOR_INFO_SIZE of
    // what the metadata left. Even so the count only bounds the table by the
    // file size (a descriptor in memory is ~3x its minimum on disk, so a large
    // crafted file asked for more memory than it holds): preallocate for
    // what real files have and let longer tables grow as they parse.
    r.check_count(
        r.pos(),
        "tensor count (descriptors left after the metadata)",
        tensor_count,
        r.remaining() / MIN_TENSOR_INFO_SIZE,
    )?;
    let prealloc = usize::try_from(tensor_count)
        .unwrap_or(usize::MAX)
        .min(PREALLOC_ENTRIES);
    let mut tensors = Vec::with_capacity(prealloc);
    let mut rel_offsets = Vec::with_capacity(prealloc);
    let mut names = HashSet::new();
    for _ in 0..tensor_count {
        let name = r.utf8_string("tensor name", MAX_TENSOR_NAME_LEN)?;
        if !names.insert(name.clone()) {
            return Err(Error::DuplicateTensor {
                file: file.to_path_buf(),
                tensor: name,
            });
        }
        let n_dims_at = r.pos();
        let n_dims = u64::from(r.u32("tensor dimension count")?);
        if n_dims > MAX_DIMS {
            return Err(Error::TooManyDims {
                file: file.to_path_buf(),
                offset: n_dims_at,
                tensor: name,
                n_dims,
                max: MAX_DIMS,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(r.u64("tensor dimension")?);
        }
        let type_at = r.pos();
        let type_id = r.u32("tensor ggml type")?;
        let Some(ggml_type) = GgmlType::from_id(type_id) else {
            return Err(Error::UnknownGgmlType {
                file: file.to_path_buf(),
                offset: type_at,
                tensor: name,
                type_id,
            });
        };
        let offset = r.u64("tensor data offset")?;
        let size = tensor_size(file, &name, ggml_type, &dims)?;
        rel_offsets.push(offset);
        tensors.push(GgufTensor {
            name,
            ggml_type,
            dims,
            offset: 0,
            size,
        });
    }

    let data_offset = align_up(file, r.pos(), alignment)?;
    let file_len = bytes.len() as u64;
    let mut expected = 0u64;
    for (t, rel) in tensors.iter_mut().zip(rel_offsets) {
        if !rel.is_multiple_of(alignment) {
            return Err(Error::MisalignedTensor {
                file: file.to_path_buf(),
                tensor: t.name.clone(),
                offset: rel,
                alignment,
            });
        }
        if rel != expected {
            return Err(Error::UnexpectedOffset {
                file: file.to_path_buf(),
                tensor: t.name.clone(),
                offset: rel,
                expected,
            });
        }
        expected = add(
            file,
            expected,
            align_up(file, t.size, alignment)?,
            "tensor data size",
        )?;
        t.offset = add(file, data_offset, rel, "tensor data offset")?;
        let end = add(file, t.offset, t.size, "tensor data end")?;
        if end > file_len {
            return Err(Error::TensorOutOfBounds {
                file: file.to_path_buf(),
                tensor: t.name.clone(),
                offset: t.offset,
                size: t.size,
                file_len,
            });
        }
    }

    Ok(GgufFile {
        version,
        alignment,
        metadata,
        tensors,
        data_offset,
    })
}

/// Decodes one metadata value payload of GGUF type `type_id` (as written by
/// [`super::encode_value`]); `bytes` must hold exactly that value. Same checks and
/// caps as [`parse`]; never panics.
pub fn decode_value(type_id: u32, bytes: &[u8]) -> Result<Value, Error> {
    let file = Path::new("<memory>");
    let mut r = Reader::new(bytes, file);
    let t = ValueType::from_id(type_id).ok_or_else(|| Error::UnknownValueType {
        file: file.to_path_buf(),
        offset: 0,
        key: String::new(),
        type_id,
    })?;
    let v = r.value_of(t, "", 0)?;
    if r.remaining() != 0 {
        return Err(Error::TrailingBytes {
            file: file.to_path_buf(),
            data_end: r.pos(),
            file_len: bytes.len() as u64,
        });
    }
    Ok(v)
}

/// Bytes of a tensor of `ggml_type` with `dims`, checking what gguf.cpp checks:
/// dimensions fit in `i64`, the element count does not overflow `i64`, and a row
/// (`dims[0]`) is a whole number of blocks.
pub(crate) fn tensor_size(
    file: &Path,
    name: &str,
    ggml_type: GgmlType,
    dims: &[u64],
) -> Result<u64, Error> {
    let bad = |reason| Error::BadShape {
        file: file.to_path_buf(),
        tensor: name.to_string(),
        ggml_type,
        dims: dims.to_vec(),
        reason,
    };
    let mut n: u64 = 1;
    for &d in dims {
        if d > i64::MAX as u64 {
            return Err(bad(ShapeProblem::DimTooLarge));
        }
        n = n
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(ShapeProblem::ElementsOverflow))?;
    }
    let row = dims.first().copied().unwrap_or(1);
    if row % ggml_type.block_size() != 0 {
        return Err(bad(ShapeProblem::RowNotWholeBlocks));
    }
    ggml_type
        .bytes_for(n)
        .ok_or_else(|| bad(ShapeProblem::BytesOverflow))
}

/// Rounds `pos` up to a multiple of the power of two `alignment`.
pub(crate) fn align_up(file: &Path, pos: u64, alignment: u64) -> Result<u64, Error> {
    Ok(add(file, pos, alignment - 1, "aligned offset")? & !(alignment - 1))
}

/// The GGUF reader's view of the one bounds-checked cursor
/// ([`gpack_format::cursor`]): its shortfalls as [`Error::Truncated`]
/// naming the file and offset.
struct Reader<'a> {
    c: Cursor<'a>,
    file: &'a Path,
    /// Check string arrays but do not keep their strings.
    skip_string_arrays: bool,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8], file: &'a Path) -> Self {
        Reader {
            c: Cursor::new(b),
            file,
            skip_string_arrays: false,
        }
    }

    fn pos(&self) -> u64 {
        self.c.pos() as u64
    }

    fn remaining(&self) -> u64 {
        self.c.remain() as u64
    }

    /// A cursor step's error as this file's.
    fn err(&self, e: CursorError) -> Error {
        match e {
            CursorError::Short {
                what,
                offset,
                need,
                remain,
            } => Error::Truncated {
                file: self.file.to_path_buf(),
                offset,
                what,
                needed: need,
                available: remain,
            },
            // The reader only `take`s: the other steps' errors cannot arise
            // here, and would read as shortfalls.
            CursorError::Count {
                what,
                count,
                record,
                remain,
            } => Error::Truncated {
                file: self.file.to_path_buf(),
                offset: self.pos(),
                what,
                needed: count.saturating_mul(record),
                available: remain,
            },
            CursorError::Behind { what, at, pos } => Error::Truncated {
                file: self.file.to_path_buf(),
                offset: pos,
                what,
                needed: at,
                available: 0,
            },
            CursorError::Trailing { after, count } => Error::Truncated {
                file: self.file.to_path_buf(),
                offset: self.pos(),
                what: after,
                needed: count,
                available: 0,
            },
        }
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], Error> {
        // More than the address space is more than remains.
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        self.c.take(n, what).map_err(|e| self.err(e))
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Error> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn check_count(
        &self,
        offset: u64,
        what: &'static str,
        value: u64,
        max: u64,
    ) -> Result<(), Error> {
        if value > max {
            return Err(Error::TooLarge {
                file: self.file.to_path_buf(),
                offset,
                what,
                value,
                max,
            });
        }
        Ok(())
    }

    /// A length-prefixed byte string of at most `cap` bytes (and at most what remains).
    fn string_bytes(&mut self, what: &'static str, cap: u64) -> Result<&'a [u8], Error> {
        let at = self.pos();
        let len = self.u64(what)?;
        self.check_count(at, what, len, cap.min(self.remaining()))?;
        self.take(len, what)
    }

    fn utf8_string(&mut self, what: &'static str, cap: u64) -> Result<String, Error> {
        let at = self.pos();
        let bytes = self.string_bytes(what, cap)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(Error::NotUtf8 {
                file: self.file.to_path_buf(),
                offset: at,
                what,
            }),
        }
    }

    fn value_type(&mut self, key: &str) -> Result<ValueType, Error> {
        let at = self.pos();
        let id = self.u32("metadata value type")?;
        ValueType::from_id(id).ok_or_else(|| Error::UnknownValueType {
            file: self.file.to_path_buf(),
            offset: at,
            key: key.to_string(),
            type_id: id,
        })
    }

    fn value(&mut self, key: &str) -> Result<Value, Error> {
        let t = self.value_type(key)?;
        self.value_of(t, key, 0)
    }

    fn bool(&mut self, key: &str) -> Result<bool, Error> {
        let at = self.pos();
        match self.array::<1>("bool value")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(Error::InvalidBool {
                file: self.file.to_path_buf(),
                offset: at,
                key: key.to_string(),
                value,
            }),
        }
    }

    fn value_of(&mut self, t: ValueType, key: &str, depth: u32) -> Result<Value, Error> {
        Ok(match t {
            ValueType::U8 => Value::U8(self.array::<1>("UINT8 value")?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array("INT8 value")?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("UINT16 value")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("INT16 value")?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array("UINT32 value")?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("INT32 value")?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array("UINT64 value")?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("INT64 value")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("FLOAT32 value")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("FLOAT64 value")?)),
            ValueType::Bool => Value::Bool(self.bool(key)?),
            ValueType::String => Value::String(GgufString::from_bytes(
                self.string_bytes("string length", u64::MAX)?.to_vec(),
            )),
            ValueType::Array => Value::Array(self.array_value(key, depth)?),
        })
    }

    fn array_value(&mut self, key: &str, depth: u32) -> Result<Array, Error> {
        let at = self.pos();
        if depth >= MAX_ARRAY_DEPTH {
            return Err(Error::NestingTooDeep {
                file: self.file.to_path_buf(),
                offset: at,
                key: key.to_string(),
                max: MAX_ARRAY_DEPTH,
            });
        }
        let t = self.value_type(key)?;
        let len_at = self.pos();
        let len = self.u64("array length")?;
        self.check_count(len_at, "array length", len, self.remaining() / t.min_size())?;
        let n = len as usize; // bounded by the remaining bytes
        macro_rules! fixed {
            ($variant:ident, $ty:ty, $what:literal) => {{
                const W: usize = std::mem::size_of::<$ty>();
                let bytes = self.take(len * W as u64, $what)?;
                Array::$variant(
                    bytes
                        .chunks_exact(W)
                        .map(|c| {
                            let mut a = [0u8; W];
                            a.copy_from_slice(c);
                            <$ty>::from_le_bytes(a)
                        })
                        .collect(),
                )
            }};
        }
        Ok(match t {
            ValueType::U8 => Array::U8(self.take(len, "UINT8 array")?.to_vec()),
            ValueType::I8 => fixed!(I8, i8, "INT8 array"),
            ValueType::U16 => fixed!(U16, u16, "UINT16 array"),
            ValueType::I16 => fixed!(I16, i16, "INT16 array"),
            ValueType::U32 => fixed!(U32, u32, "UINT32 array"),
            ValueType::I32 => fixed!(I32, i32, "INT32 array"),
            ValueType::U64 => fixed!(U64, u64, "UINT64 array"),
            ValueType::I64 => fixed!(I64, i64, "INT64 array"),
            ValueType::F32 => fixed!(F32, f32, "FLOAT32 array"),
            ValueType::F64 => fixed!(F64, f64, "FLOAT64 array"),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n.min(PREALLOC_ENTRIES));
                for _ in 0..n {
                    v.push(self.bool(key)?);
                }
                Array::Bool(v)
            }
            ValueType::String if self.skip_string_arrays => {
                for _ in 0..n {
                    self.string_bytes("string length", u64::MAX)?;
                }
                Array::String(Vec::new())
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n.min(PREALLOC_ENTRIES));
                for _ in 0..n {
                    v.push(GgufString::from_bytes(
                        self.string_bytes("string length", u64::MAX)?.to_vec(),
                    ));
                }
                Array::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n.min(PREALLOC_ENTRIES));
                for _ in 0..n {
                    v.push(self.array_value(key, depth + 1)?);
                }
                Array::Array(v)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The .giw reader's mode: string arrays are checked and left out, every
    /// other value is kept as the full parse decodes it.
    #[test]
    fn metadata_without_string_arrays() {
        let mut md = Metadata::new();
        md.insert(
            "general.architecture",
            Value::String(GgufString::from_bytes(b"llama".to_vec())),
        );
        md.insert("llama.block_count", Value::U32(30));
        md.insert("llama.rope.freqs", Value::Array(Array::F32(vec![1.0, 0.5])));
        md.insert(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(vec![
                GgufString::from_bytes(b"<s>".to_vec());
                3
            ])),
        );
        let bytes = super::super::to_vec(&md, []).unwrap();
        let f = Path::new("m.gguf");
        let (_, full) = parse_metadata(&bytes, f).unwrap();
        let (_, slim) = parse_metadata_without_string_arrays(&bytes, f).unwrap();
        assert_eq!(full.len(), 4);
        assert_eq!(slim.len(), 3);
        assert!(slim.get("tokenizer.ggml.tokens").is_none());
        for (k, v) in slim.iter() {
            assert_eq!(full.get(k), Some(v), "{k}");
        }
        // The skipped strings are still checked: a cut inside them is an error.
        let last = bytes.windows(3).rposition(|w| w == b"<s>").unwrap();
        let cut = last + 2;
        assert!(parse_metadata_without_string_arrays(&bytes[..cut], f).is_err());
    }

    #[test]
    fn align_up_rounds() {
        let f = Path::new("x");
        assert_eq!(align_up(f, 0, 32).unwrap(), 0);
        assert_eq!(align_up(f, 1, 32).unwrap(), 32);
        assert_eq!(align_up(f, 64, 32).unwrap(), 64);
        assert!(align_up(f, u64::MAX, 32).is_err());
    }

    #[test]
    fn tensor_size_checks() {
        let f = Path::new("x");
        assert_eq!(
            tensor_size(f, "t", GgmlType::Q8_0, &[64, 2]).unwrap(),
            4 * 34
        );
        assert_eq!(tensor_size(f, "t", GgmlType::F32, &[]).unwrap(), 4);
        assert!(tensor_size(f, "t", GgmlType::Q8_0, &[48, 2]).is_err());
        assert!(tensor_size(f, "t", GgmlType::F32, &[1 << 62, 4]).is_err());
        assert!(tensor_size(f, "t", GgmlType::F32, &[u64::MAX]).is_err());
    }
}
