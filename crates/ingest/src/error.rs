//! The crate's one error type.
//!
//! Every variant that comes from reading bytes names the file it was reading
//! (`<memory>` for the parse-from-bytes entry points), and, where the problem sits
//! at a place in the file, the byte offset and what was expected there. Sizes and
//! counts are kept as numbers, not pre-formatted text, so callers (and tests) can
//! match on them.

use std::path::PathBuf;

/// Anything that can go wrong while opening or reading a foreign model source.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O error (open, stat, read, mmap, write).
    #[error("{}: cannot {what}", file.display())]
    Io {
        /// The file or directory involved.
        file: PathBuf,
        /// What was being done (`"open"`, `"map"`, `"read directory"`, …).
        what: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The path is neither a GGUF file, a safetensors file, an index.json nor a directory
    /// holding one of those.
    #[error("{}: not a GGUF file, safetensors file, *.index.json or Hugging Face model directory", file.display())]
    UnknownFormat {
        /// The path given.
        file: PathBuf,
    },

    /// The file ends before a field that must be there.
    #[error("{}: truncated at byte {offset}: expected {what} ({needed} bytes), {available} bytes remain", file.display())]
    Truncated {
        /// The file.
        file: PathBuf,
        /// Where the field starts.
        offset: u64,
        /// The field.
        what: &'static str,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },

    /// The file does not start with the GGUF magic.
    #[error("{}: bad magic {found:02x?} at byte 0, expected \"GGUF\"", file.display())]
    BadMagic {
        /// The file.
        file: PathBuf,
        /// The first four bytes.
        found: [u8; 4],
    },

    /// A GGUF version other than 2 or 3 (v1 used 32-bit counts and is not read).
    #[error("{}: unsupported GGUF version {version} at byte 4, expected 2 or 3{}", file.display(),
        if *version == 1 { " (GGUF v1 is obsolete: re-convert the model)" }
        else if version.swap_bytes() <= 3 { " (this looks like a big-endian GGUF, which is not supported)" } else { "" })]
    UnsupportedVersion {
        /// The file.
        file: PathBuf,
        /// The version field, read little-endian.
        version: u32,
    },

    /// A count or length exceeds what the rest of the file could hold, or a documented cap.
    #[error("{}: {what} {value} at byte {offset} is too large (at most {max})", file.display())]
    TooLarge {
        /// The file.
        file: PathBuf,
        /// Where the count or length was read.
        offset: u64,
        /// Which count or length (`"tensor count"`, `"string length"`, …).
        what: &'static str,
        /// The value found.
        value: u64,
        /// The largest value that could be valid here.
        max: u64,
    },

    /// A metadata key or tensor name is not valid UTF-8.
    #[error("{}: {what} at byte {offset} is not valid UTF-8", file.display())]
    NotUtf8 {
        /// The file.
        file: PathBuf,
        /// Where the string starts.
        offset: u64,
        /// Which string (`"metadata key"`, `"tensor name"`).
        what: &'static str,
    },

    /// A metadata value type id outside 0..=12.
    #[error("{}: metadata key {key:?}: unknown value type {type_id} at byte {offset}, expected 0..=12", file.display())]
    UnknownValueType {
        /// The file.
        file: PathBuf,
        /// Where the type id was read.
        offset: u64,
        /// The key whose value it is.
        key: String,
        /// The type id found.
        type_id: u32,
    },

    /// A boolean metadata byte other than 0 or 1.
    #[error("{}: metadata key {key:?}: bool byte {value} at byte {offset}, expected 0 or 1", file.display())]
    InvalidBool {
        /// The file.
        file: PathBuf,
        /// Where the byte was read.
        offset: u64,
        /// The key.
        key: String,
        /// The byte found.
        value: u8,
    },

    /// Arrays nested deeper than [`crate::gguf::MAX_ARRAY_DEPTH`].
    #[error("{}: metadata key {key:?}: arrays nested deeper than {max} at byte {offset}", file.display())]
    NestingTooDeep {
        /// The file.
        file: PathBuf,
        /// Where the too-deep array starts.
        offset: u64,
        /// The key.
        key: String,
        /// The depth cap.
        max: u32,
    },

    /// The same metadata key appears twice.
    #[error("{}: duplicate metadata key {key:?} at byte {offset}", file.display())]
    DuplicateKey {
        /// The file.
        file: PathBuf,
        /// Where the second occurrence starts.
        offset: u64,
        /// The key.
        key: String,
    },

    /// A metadata value has the wrong type for its well-known key.
    #[error("{}: metadata key {key:?} has type {found}, expected {expected}", file.display())]
    WrongValueType {
        /// The file.
        file: PathBuf,
        /// The key.
        key: String,
        /// The expected type.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },

    /// `general.alignment` is zero or not a power of two.
    #[error("{}: general.alignment is {value}, expected a non-zero power of two", file.display())]
    BadAlignment {
        /// The file.
        file: PathBuf,
        /// The value found.
        value: u64,
    },

    /// A tensor's ggml type id is not one [`gpack_format::ggml::GgmlType`] knows.
    #[error("{}: tensor {tensor:?}: unknown ggml type id {type_id} at byte {offset}", file.display())]
    UnknownGgmlType {
        /// The file.
        file: PathBuf,
        /// Where the type id was read.
        offset: u64,
        /// The tensor.
        tensor: String,
        /// The id found.
        type_id: u32,
    },

    /// A tensor with more dimensions than ggml's `GGML_MAX_DIMS` (4).
    #[error("{}: tensor {tensor:?}: {n_dims} dimensions at byte {offset}, expected at most {max}", file.display())]
    TooManyDims {
        /// The file.
        file: PathBuf,
        /// Where the dimension count was read.
        offset: u64,
        /// The tensor.
        tensor: String,
        /// The count found.
        n_dims: u64,
        /// The cap.
        max: u64,
    },

    /// A tensor shape that cannot be valid for its type.
    #[error("{}: tensor {tensor:?} of type {ggml_type} has shape {dims:?}: {reason}", file.display())]
    BadShape {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its type.
        ggml_type: gpack_format::ggml::GgmlType,
        /// Its dimensions, innermost first.
        dims: Vec<u64>,
        /// What is wrong.
        reason: ShapeProblem,
    },

    /// Two tensors (in one file, or across the files of one source) share a name.
    #[error("{}: duplicate tensor name {tensor:?}", file.display())]
    DuplicateTensor {
        /// The file of the second occurrence.
        file: PathBuf,
        /// The name.
        tensor: String,
    },

    /// A GGUF tensor's data offset is not a multiple of the file's alignment.
    #[error("{}: tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}", file.display())]
    MisalignedTensor {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// The offset, relative to the start of the tensor data section.
        offset: u64,
        /// The alignment.
        alignment: u64,
    },

    /// A tensor's bytes do not lie inside its file.
    #[error("{}: tensor {tensor:?}: bytes {offset}..{offset}+{size} are outside the file ({file_len} bytes)", file.display())]
    TensorOutOfBounds {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Absolute start offset.
        offset: u64,
        /// Byte size.
        size: u64,
        /// Length of the file.
        file_len: u64,
    },

    /// A GGUF tensor that does not start where the previous one's padded data ends.
    /// gguf.cpp requires tensor data packed in descriptor order, so this also rules
    /// out overlaps and holes.
    #[error("{}: tensor {tensor:?}: data offset {offset}, expected {expected} (tensor data must be packed in order, each padded to the alignment)", file.display())]
    UnexpectedOffset {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its offset, relative to the start of the tensor data section.
        offset: u64,
        /// Where the previous tensor's padded data ends.
        expected: u64,
    },

    /// A split GGUF whose shard file is missing.
    #[error("{}: missing shard {no} of {count} of a split GGUF", file.display())]
    MissingShard {
        /// The path the shard should have.
        file: PathBuf,
        /// Its 1-based number.
        no: u64,
        /// The number of shards.
        count: u64,
    },

    /// The `split.*` keys of a split GGUF disagree with its file names or with each other.
    #[error("{}: {key} is {}, expected {expected}", file.display(), .found.map_or_else(|| "missing".to_string(), |v| v.to_string()))]
    SplitInconsistent {
        /// The shard.
        file: PathBuf,
        /// The key (`"split.no"`, `"split.count"`, `"split.tensors.count"`).
        key: &'static str,
        /// What the file name or the other shards say.
        expected: u64,
        /// What the shard says.
        found: Option<u64>,
    },

    /// The safetensors header is larger than the file or than the cap.
    #[error("{}: safetensors header size {size} is too large (at most {max})", file.display())]
    HeaderTooLarge {
        /// The file.
        file: PathBuf,
        /// The header size field.
        size: u64,
        /// The largest size that could be valid.
        max: u64,
    },

    /// JSON that does not parse or does not have the expected structure.
    #[error("{}: invalid {what}", file.display())]
    BadJson {
        /// The file.
        file: PathBuf,
        /// Which JSON (`"safetensors header"`, `"index.json"`, `"config.json"`).
        what: &'static str,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },

    /// A safetensors dtype with no ggml equivalent.
    #[error("{}: tensor {tensor:?} has dtype {dtype:?}, expected one of F32, F16, BF16, F64, I8, I16, I32, I64", file.display())]
    UnsupportedDtype {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// The dtype string.
        dtype: String,
    },

    /// A safetensors tensor whose shape and dtype do not match its byte range.
    #[error("{}: tensor {tensor:?}: shape and dtype give {expected} bytes, data_offsets span {found}", file.display())]
    TensorSizeMismatch {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// `elements × dtype size` (`u64::MAX` when that overflows).
        expected: u64,
        /// `end - begin` (0 when `end < begin`).
        found: u64,
    },

    /// safetensors data offsets that leave a gap or overlap.
    #[error("{}: tensor {tensor:?} starts at data offset {found}, expected {expected} (offsets must tile the data: no gaps, no overlaps)", file.display())]
    OffsetsNotTiled {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Where the previous tensor ended.
        expected: u64,
        /// Where this one starts.
        found: u64,
    },

    /// Bytes after the last safetensors tensor.
    #[error("{}: tensor data ends at byte {data_end} but the file has {file_len} bytes", file.display())]
    TrailingBytes {
        /// The file.
        file: PathBuf,
        /// Where the last tensor ends (absolute).
        data_end: u64,
        /// Length of the file.
        file_len: u64,
    },

    /// An index.json shard name that is not a plain relative path inside the directory.
    #[error("{}: shard path {shard:?} must be a relative path inside the directory (no absolute paths, no ..)", file.display())]
    UnsafeShardPath {
        /// The index.json.
        file: PathBuf,
        /// The shard name found.
        shard: String,
    },

    /// index.json and the shards it names disagree about a tensor.
    #[error("{}: tensor {tensor:?} {problem} shard {shard:?}", file.display())]
    IndexMismatch {
        /// The index.json.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// The shard involved.
        shard: String,
        /// Listed but missing, or found but not listed.
        problem: IndexProblem,
    },

    /// A directory with no safetensors weights.
    #[error("{}: no model.safetensors, *.safetensors.index.json or single *.safetensors file in this directory", file.display())]
    NoWeights {
        /// The directory.
        file: PathBuf,
    },

    /// config.json lacks a value, or has it with the wrong JSON type, needed for the mapping.
    #[error("{}: {key} {problem}", file.display())]
    BadConfig {
        /// config.json.
        file: PathBuf,
        /// The config key.
        key: &'static str,
        /// What is wrong.
        problem: ConfigProblem,
    },

    /// HF tensors that cannot be presented in GGUF form (rope permutation, expert stacking).
    #[error("{}: tensor {tensor:?}: {reason}", file.display())]
    BadTransform {
        /// The file holding (the first part of) the tensor.
        file: PathBuf,
        /// The GGUF-side tensor name.
        tensor: String,
        /// What is wrong.
        reason: TransformProblem,
    },

    /// A [`crate::TensorInfo`] whose file index or byte range does not fit the [`crate::Source`].
    #[error("tensor {tensor:?}: {reason}")]
    BadTensorInfo {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: TensorInfoProblem,
    },

    /// Size arithmetic overflowed `u64` (or `usize`).
    #[error("{}: {what} overflows", file.display())]
    Overflow {
        /// The file.
        file: PathBuf,
        /// The quantity.
        what: &'static str,
    },

    /// The GGUF writer was given inconsistent input.
    #[error("gguf writer: {reason} (tensor {tensor:?})")]
    Write {
        /// The tensor involved, or empty.
        tensor: String,
        /// What is wrong.
        reason: WriteProblem,
    },
}

impl gpack_format::NamesFile for Error {
    fn names_file(&self, path: &std::path::Path) -> bool {
        self.file() == Some(path)
    }
}

impl Error {
    /// The file (or directory) this error names in its message, if any:
    /// what a caller's context need not repeat.
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            Error::Io { file, .. }
            | Error::UnknownFormat { file, .. }
            | Error::Truncated { file, .. }
            | Error::BadMagic { file, .. }
            | Error::UnsupportedVersion { file, .. }
            | Error::TooLarge { file, .. }
            | Error::NotUtf8 { file, .. }
            | Error::UnknownValueType { file, .. }
            | Error::InvalidBool { file, .. }
            | Error::NestingTooDeep { file, .. }
            | Error::DuplicateKey { file, .. }
            | Error::WrongValueType { file, .. }
            | Error::BadAlignment { file, .. }
            | Error::UnknownGgmlType { file, .. }
            | Error::TooManyDims { file, .. }
            | Error::BadShape { file, .. }
            | Error::DuplicateTensor { file, .. }
            | Error::MisalignedTensor { file, .. }
            | Error::TensorOutOfBounds { file, .. }
            | Error::UnexpectedOffset { file, .. }
            | Error::MissingShard { file, .. }
            | Error::SplitInconsistent { file, .. }
            | Error::HeaderTooLarge { file, .. }
            | Error::BadJson { file, .. }
            | Error::UnsupportedDtype { file, .. }
            | Error::TensorSizeMismatch { file, .. }
            | Error::OffsetsNotTiled { file, .. }
            | Error::TrailingBytes { file, .. }
            | Error::UnsafeShardPath { file, .. }
            | Error::IndexMismatch { file, .. }
            | Error::NoWeights { file, .. }
            | Error::BadConfig { file, .. }
            | Error::BadTransform { file, .. }
            | Error::Overflow { file, .. } => Some(file),
            Error::BadTensorInfo { .. } | Error::Write { .. } => None,
        }
    }
}

/// A tensor shape that cannot be valid for its type (the reason of [`Error::BadShape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeProblem {
    /// A dimension exceeds `i64::MAX` (gguf.cpp's limit).
    #[error("a dimension exceeds i64::MAX")]
    DimTooLarge,
    /// The element count overflows `i64`.
    #[error("the element count overflows i64")]
    ElementsOverflow,
    /// The row length is not a whole number of blocks.
    #[error("the row length (dims[0]) is not a multiple of the type's block size")]
    RowNotWholeBlocks,
    /// The byte size overflows `u64`.
    #[error("the byte size overflows u64")]
    BytesOverflow,
}

/// How index.json and a shard disagree about a tensor (the problem of [`Error::IndexMismatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexProblem {
    /// Listed for the shard, but the shard does not have it.
    #[error("is listed for but missing from")]
    MissingFromShard,
    /// In the shard, but index.json does not list it there.
    #[error("is not listed but found in")]
    NotListed,
}

/// What is wrong with a config.json value (the problem of [`Error::BadConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigProblem {
    /// Absent, but the rope permutation needs it.
    #[error("is missing (needed for the rope permutation)")]
    MissingForRope,
    /// Not an unsigned integer below 2^32.
    #[error("must be an unsigned integer below 2^32")]
    NotU32,
    /// Not a number.
    #[error("must be a number")]
    NotNumber,
    /// Neither an unsigned integer nor a list of them below 2^31.
    #[error("must be an unsigned integer, or a list of them below 2^31")]
    NotU31OrList,
    /// Not a list of probabilities in [0, 1].
    #[error("must be a list of probabilities in [0, 1]")]
    NotProbabilities,
    /// Not a list of strings.
    #[error("must be a list of strings")]
    NotStrings,
    /// YaRN rope scaling needs it as an unsigned integer below 2^32.
    #[error("is needed for YaRN rope scaling and must be an unsigned integer below 2^32")]
    YarnOriginal,
    /// Multi-head latent attention's head sizes need it.
    #[error("is missing (needed for multi-head latent attention's head sizes)")]
    MissingForMla,
}

/// Why HF tensors cannot be presented in GGUF form (the reason of [`Error::BadTransform`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransformProblem {
    /// The rows are not a multiple of 2 × heads.
    #[error("rows are not a multiple of 2 × heads, cannot undo the rotary permutation")]
    RopeRows,
    /// A Gemma norm weight of another type.
    #[error("Gemma norm weights must be F32, F16 or BF16")]
    GemmaNormType,
    /// The size overflows.
    #[error("size overflows")]
    SizeOverflow,
    /// Embedding rows of this type cannot be padded.
    #[error("cannot pad the embedding rows of this type")]
    CannotPad,
    /// Nothing to stack.
    #[error("no parts to stack")]
    NoParts,
    /// The part numbers have gaps or repeats.
    #[error("stacked part (expert) numbers are not 0..n without gaps or repeats")]
    PartNumbers,
    /// The part count differs from config.json's.
    #[error(
        "the number of stacked parts differs from config.json's (expert count, AltUp inputs − 1)"
    )]
    PartCount,
    /// The parts differ in shape or dtype, or are not 2-D.
    #[error("stacked parts must all be 2-D with the same shape and dtype")]
    PartShapes,
    /// A de-interleaved tensor is not 2-D or 3-D, its columns do not divide
    /// by the stride, or its type is blocked.
    #[error("must be 2-D or 3-D with an even split of columns, of an unblocked type")]
    StridedShape,
    /// MXFP4 blocks without their scales, or of shapes that do not match.
    #[error("MXFP4 blocks need their `_scales` tensor of the same leading shape, 16 bytes per block, rows split evenly")]
    Mxfp4Parts,
}

/// Why a [`crate::TensorInfo`] does not fit its [`crate::Source`] (the reason of [`Error::BadTensorInfo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorInfoProblem {
    /// Rope permutation: the rows are not a multiple of 2 × n_head.
    #[error("rope permutation: rows are not a multiple of 2 × n_head")]
    RopeRows,
    /// The source size overflows.
    #[error("source size overflows")]
    SourceSizeOverflow,
    /// A PlusOne transform whose tensor is not F32.
    #[error("PlusOne produces F32")]
    PlusOneNotF32,
    /// A PlusOne source of another type.
    #[error("PlusOne source type must be F32, F16 or BF16")]
    PlusOneSourceType,
    /// Padding: the source is larger than the tensor.
    #[error("padding: the source is larger than the tensor")]
    PaddingLarger,
    /// The generated bytes differ from the size.
    #[error("generated bytes differ from the size")]
    GeneratedSize,
    /// The stacked parts do not add up to the size.
    #[error("stacked parts do not add up to the size")]
    StackSize,
    /// A strided (de-interleaved) tensor's shape does not fit its bytes or type.
    #[error("the strided source shape does not fit its bytes, size or element type")]
    StridedShape,
    /// MXFP4 blocks and scales that do not fit each other or the size.
    #[error("the MXFP4 blocks and scales do not fit each other or the tensor's size")]
    Mxfp4Shape,
    /// The file index is out of range.
    #[error("file index out of range")]
    FileIndex,
    /// The byte range overflows.
    #[error("byte range overflows")]
    RangeOverflow,
    /// The byte range lies outside its file.
    #[error("byte range outside its file")]
    RangeOutside,
}

/// How the GGUF writer's input is inconsistent (the reason of [`Error::Write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteProblem {
    /// `general.alignment` is not a U32 non-zero power of two.
    #[error("general.alignment must be a U32 non-zero power of two")]
    Alignment,
    /// A tensor name longer than 63 bytes (ggml's limit).
    #[error("tensor name longer than 63 bytes")]
    NameTooLong,
    /// Two tensors with one name.
    #[error("duplicate tensor name")]
    DuplicateName,
    /// More than 4 dimensions.
    #[error("more than 4 dimensions")]
    TooManyDims,
    /// A shape that is invalid for its type.
    #[error("invalid shape for its type")]
    InvalidShape,
    /// A size overflows.
    #[error("size overflows")]
    SizeOverflow,
    /// The total size overflows.
    #[error("total size overflows")]
    TotalOverflow,
    /// More tensor data than tensors.
    #[error("more tensor data than tensors")]
    MoreData,
    /// Data of another length than its type and shape give.
    #[error("data length differs from the size its type and shape give")]
    DataLength,
    /// A tensor's data was not written before `finish`.
    #[error("tensor data was not written")]
    NotWritten,
}

/// `a + b` or [`Error::Overflow`].
pub(crate) fn add(
    file: &std::path::Path,
    a: u64,
    b: u64,
    what: &'static str,
) -> Result<u64, Error> {
    a.checked_add(b).ok_or_else(|| Error::Overflow {
        file: file.to_path_buf(),
        what,
    })
}
