//! safetensors: header validation and zero-copy tensor ranges.
//!
//! Layout: `header_size u64 LE · header JSON (header_size bytes) · data`. The header
//! maps tensor names to `{dtype, shape, data_offsets: [begin, end]}` (offsets
//! relative to the data) plus an optional `__metadata__` string map. We validate as
//! the `safetensors` crate does (`tensor.rs`, `validate`): the header fits the file
//! and the cap, the JSON is an object (duplicate keys rejected), each tensor's
//! `end - begin` equals `elements × dtype size`, and the offsets tile the data
//! exactly (sorted by begin, each tensor starts where the previous ended, the last
//! ends at the end of the file). We do not use the crate itself because we need
//! the byte ranges, not views, and our own error variants.

use std::fmt;
use std::path::Path;

use gpack_format::ggml::GgmlType;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::error::Error;

/// Largest header accepted: the `safetensors` crate's `MAX_HEADER_SIZE` (100 MB).
pub const MAX_HEADER_SIZE: u64 = 100_000_000;

/// Most dimensions a tensor may have here: it must become a ggml tensor (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// A parsed safetensors file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsFile {
    /// Absolute offset of the data section (`8 + header_size`).
    pub data_offset: u64,
    /// `__metadata__` entries, in file order.
    pub metadata: Vec<(String, String)>,
    /// Tensors, in data order (sorted by offset).
    pub tensors: Vec<SafetensorsTensor>,
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsTensor {
    /// The HF name.
    pub name: String,
    /// The dtype string (`"BF16"`, …).
    pub dtype: String,
    /// The equivalent ggml type.
    pub ggml_type: GgmlType,
    /// Shape in safetensors (row-major, outermost first) order.
    pub shape: Vec<u64>,
    /// Absolute byte offset in the file.
    pub offset: u64,
    /// Byte size.
    pub size: u64,
}

/// The ggml type of a safetensors dtype, if there is one.
pub fn dtype_to_ggml(dtype: &str) -> Option<GgmlType> {
    Some(match dtype {
        "F32" => GgmlType::F32,
        "F16" => GgmlType::F16,
        "BF16" => GgmlType::BF16,
        "F64" => GgmlType::F64,
        "I8" => GgmlType::I8,
        // Bytes as they are (ggml has no unsigned byte type): gpt-oss's
        // MXFP4 `*_blocks` / `*_scales`, which ingest repacks into ggml's
        // MXFP4 blocks.
        "U8" => GgmlType::I8,
        "I16" => GgmlType::I16,
        "I32" => GgmlType::I32,
        "I64" => GgmlType::I64,
        _ => return None,
    })
}

/// Parses a safetensors file held in memory. Errors name the file as `<memory>`.
/// Never panics, whatever the bytes.
pub fn parse(bytes: &[u8]) -> Result<SafetensorsFile, Error> {
    parse_named(bytes, Path::new("<memory>"))
}

/// Parses the bytes of the safetensors file `file` (used only in error messages).
/// Never panics, whatever the bytes.
pub fn parse_named(bytes: &[u8], file: &Path) -> Result<SafetensorsFile, Error> {
    let f = || file.to_path_buf();
    let len = bytes.len() as u64;
    let Some(head) = bytes.get(..8) else {
        return Err(Error::Truncated {
            file: f(),
            offset: 0,
            what: "header size",
            needed: 8,
            available: len,
        });
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(head);
    let size = u64::from_le_bytes(n);
    let max = MAX_HEADER_SIZE.min(len - 8);
    if size > max {
        return Err(Error::HeaderTooLarge {
            file: f(),
            size,
            max,
        });
    }
    let data_offset = 8 + size;
    let json = &bytes[8..data_offset as usize];
    let header: Header = serde_json::from_slice(json).map_err(|e| Error::BadJson {
        file: f(),
        what: "safetensors header",
        source: e,
    })?;

    let mut tensors = Vec::with_capacity(header.tensors.len());
    for (name, e) in header.tensors {
        let Some(ggml_type) = dtype_to_ggml(&e.dtype) else {
            return Err(Error::UnsupportedDtype {
                file: f(),
                tensor: name,
                dtype: e.dtype,
            });
        };
        if e.shape.len() > MAX_DIMS {
            return Err(Error::TooManyDims {
                file: f(),
                offset: 8,
                tensor: name,
                n_dims: e.shape.len() as u64,
                max: MAX_DIMS as u64,
            });
        }
        let (begin, end) = e.data_offsets;
        let expected = crate::checked_product(&e.shape)
            .and_then(|n| n.checked_mul(ggml_type.type_size()))
            .unwrap_or(u64::MAX);
        let found = end.saturating_sub(begin);
        if end < begin || expected != found {
            return Err(Error::TensorSizeMismatch {
                file: f(),
                tensor: name,
                expected,
                found,
            });
        }
        tensors.push((name, e.dtype, ggml_type, e.shape, begin, end));
    }
    tensors.sort_by_key(|t| (t.4, t.5));
    let data_len = len - data_offset;
    let mut at = 0u64;
    let mut out = Vec::with_capacity(tensors.len());
    for (name, dtype, ggml_type, shape, begin, end) in tensors {
        if begin != at {
            return Err(Error::OffsetsNotTiled {
                file: f(),
                tensor: name,
                expected: at,
                found: begin,
            });
        }
        if end > data_len {
            return Err(Error::TensorOutOfBounds {
                file: f(),
                tensor: name,
                offset: data_offset + begin,
                size: end - begin,
                file_len: len,
            });
        }
        at = end;
        out.push(SafetensorsTensor {
            name,
            dtype,
            ggml_type,
            shape,
            offset: data_offset + begin,
            size: end - begin,
        });
    }
    if at != data_len {
        return Err(Error::TrailingBytes {
            file: f(),
            data_end: data_offset + at,
            file_len: len,
        });
    }
    Ok(SafetensorsFile {
        data_offset,
        metadata: header.metadata,
        tensors: out,
    })
}

/// One header entry, as the `safetensors` crate reads it (unknown fields ignored).
#[derive(Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// The header object, in order, with duplicate names rejected.
struct Header {
    metadata: Vec<(String, String)>,
    tensors: Vec<(String, Entry)>,
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Header;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object of tensor entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let mut h = Header {
                    metadata: Vec::new(),
                    tensors: Vec::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
                    }
                    if key == "__metadata__" {
                        h.metadata = map.next_value::<OrderedStrings>()?.0;
                    } else {
                        let e: Entry = map.next_value()?;
                        h.tensors.push((key, e));
                    }
                }
                Ok(h)
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON object of string values, in order.
struct OrderedStrings(Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedStrings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OrderedStrings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedStrings, A::Error> {
                let mut v = Vec::new();
                while let Some((k, s)) = map.next_entry::<String, String>()? {
                    v.push((k, s));
                }
                Ok(OrderedStrings(v))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.resize(b.len() + data, 0);
        b
    }

    #[test]
    fn parses_and_sorts_by_offset() {
        let h = r#"{"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]},"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        let s = parse(&file(h, 8)).unwrap();
        assert_eq!(s.metadata, vec![("format".to_string(), "pt".to_string())]);
        assert_eq!(s.tensors[0].name, "a");
        assert_eq!(s.tensors[1].offset, s.data_offset + 4);
        assert_eq!(s.tensors[1].ggml_type, GgmlType::F16);
    }

    #[test]
    fn duplicate_names_are_rejected() {
        let h = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        assert!(matches!(parse(&file(h, 8)), Err(Error::BadJson { .. })));
    }

    #[test]
    fn empty_header_object_with_no_data_is_valid() {
        let s = parse(&file("{}", 0)).unwrap();
        assert!(s.tensors.is_empty());
    }
}
