//! GGUF v2/v3: reader, split-file discovery and a small writer.
//!
//! The reader validates everything once, up front, and then only hands out byte
//! ranges: every count and length is checked against the bytes that remain
//! *before* anything is allocated for it, every size goes through checked
//! arithmetic, and tensor ranges are checked to be aligned, packed in order and
//! inside the file. The checks mirror those of llama.cpp's `gguf.cpp` (which is
//! what decides whether a GGUF is loadable in practice: key and tensor-name rules,
//! `GGML_MAX_DIMS`, the row/block rule, `general.alignment` as a `UINT32` power of
//! two, offsets packed in order), and each check has its own [`Error`] variant.
//! Stricter than gguf.cpp: bools must be 0 or 1, keys and names UTF-8, unknown
//! value types and too-deep nesting are errors.
//!
//! Byte layout (little-endian; v2 and v3 are identical, v3 only added the
//! big-endian variant, which we reject; v1 used 32-bit counts and is rejected):
//!
//! ```text
//! magic "GGUF" · version u32 · tensor_count u64 · kv_count u64
//! kv[kv_count]:      key string · value_type u32 · value
//! tensor[tensor_count]: name string · n_dims u32 · dims u64[n_dims] · ggml_type u32 · offset u64
//! padding to general.alignment (default 32) · tensor data (offsets relative to here)
//! string = len u64 · bytes[len];  array = elem_type u32 · len u64 · elems[len]
//! ```
//!
//! [`Error`]: crate::Error

mod read;
pub(crate) mod split;
mod write;

pub use read::{
    decode_value, parse, parse_metadata, parse_metadata_without_string_arrays, parse_named,
};
pub use split::{KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
pub use write::{encode_value, to_vec, write, TensorHeader, Writer};

use gpack_format::ggml::GgmlType;

use crate::Metadata;

/// The GGUF magic, the bytes `"GGUF"`.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Alignment of the tensor data when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Most dimensions a tensor may have: ggml's `GGML_MAX_DIMS` (ggml.h).
pub const MAX_DIMS: u64 = 4;

/// Longest tensor name in bytes: gguf.cpp rejects names of `GGML_MAX_NAME` (64) bytes
/// or more, since ggml stores them in a `char[64]` with a terminating NUL.
pub const MAX_TENSOR_NAME_LEN: u64 = 63;

/// Longest metadata key in bytes: the GGUF spec (gguf.md, "key ... must be at most
/// 2^16-1 bytes long").
pub const MAX_KEY_LEN: u64 = 65_535;

/// Deepest nesting of arrays in a metadata value. gguf.cpp does not read nested
/// arrays at all and gguf-py reads any depth; no real file nests more than one
/// level, and the cap bounds the reader's recursion.
pub const MAX_ARRAY_DEPTH: u32 = 16;

/// The parsed header of one GGUF file. Tensor bytes are not copied: they are the
/// ranges `offset..offset + size` of the bytes that were parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufFile {
    /// Format version (2 or 3).
    pub version: u32,
    /// `general.alignment`, or [`DEFAULT_ALIGNMENT`].
    pub alignment: u64,
    /// Metadata, in file order.
    pub metadata: Metadata,
    /// Tensor descriptors, in file order.
    pub tensors: Vec<GgufTensor>,
    /// Absolute offset of the tensor data section.
    pub data_offset: u64,
}

/// One tensor descriptor of a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensor {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub ggml_type: GgmlType,
    /// Its dimensions, `ne0` (innermost, contiguous) first.
    pub dims: Vec<u64>,
    /// Absolute byte offset of its data in the file.
    pub offset: u64,
    /// Byte size of its data.
    pub size: u64,
}
