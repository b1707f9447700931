//! The one error type of this crate.

/// Errors of model loading and generation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Choosing a token failed (the grammar engine's error).
    #[error("{0}")]
    Decode(String),
    /// A required metadata key is missing or has the wrong type.
    #[error("metadata key {key} is missing or not a {what}")]
    Metadata {
        /// The key, e.g. `llama.block_count`.
        key: String,
        /// The expected kind of value.
        what: &'static str,
    },
    /// The architecture is not one this runtime has a graph for.
    #[error("unsupported architecture {arch:?}")]
    Architecture {
        /// `general.architecture`.
        arch: String,
    },
    /// A required tensor is absent.
    #[error("tensor {name} is missing")]
    MissingTensor {
        /// GGUF tensor name.
        name: String,
    },
    /// A tensor has a shape the graph does not accept.
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        /// GGUF tensor name.
        name: String,
        /// Expected dims, ne0 first.
        expected: Vec<u64>,
        /// Found dims, ne0 first.
        found: Vec<u64>,
    },
    /// A tensor is stored in a type the runtime cannot use there.
    #[error("tensor {name}: {what} does not support type {ty}")]
    TensorType {
        /// GGUF tensor name.
        name: String,
        /// What would have used it (e.g. "norm weight").
        what: &'static str,
        /// The ggml type name.
        ty: &'static str,
    },
    /// A tensor is stored in a ggml type gpack cannot decode (IQ1_S, IQ2_*,
    /// IQ3_*, TQ1_0, TQ2_0, …): refused when the model is bound, before any
    /// kernel would meet it.
    #[error(
        "tensor {name} has ggml type {ty}, which gpack cannot decode (it decodes {})",
        gpack_quant::ggml::decodable_type_names()
    )]
    UnsupportedType {
        /// Tensor name (or, for an expert slice, where it lives).
        name: String,
        /// The ggml type name.
        ty: &'static str,
    },
    /// A section of a .gpack holds something this runtime cannot use there
    /// (a tensor outside its section, a type it does not know, a row out of
    /// range); the container itself validated.
    #[error("{section} section")]
    Section {
        /// The section's kind.
        section: gpack_format::SectionKind,
        /// What is wrong.
        #[source]
        problem: SectionProblem,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    Token {
        /// The id.
        id: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// The KV cache is full.
    #[error("context full: {needed} positions needed, the cache holds {capacity}")]
    ContextFull {
        /// Positions the call needs.
        needed: usize,
        /// Positions the cache holds.
        capacity: usize,
    },
    /// A hyperparameter value the graph cannot run with.
    #[error("invalid hyperparameter {what}: {value}")]
    Hparam {
        /// Which hyperparameter.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// An expert slice cannot be used (a corrupted external shard, a wrong
    /// shape, a missing slice).
    #[error("layer {layer} expert {expert} {part} slice ({origin})")]
    ExpertSlice {
        /// Layer.
        layer: usize,
        /// Expert.
        expert: usize,
        /// gate, up or down.
        part: &'static str,
        /// Where it lives.
        origin: String,
        /// What is wrong.
        #[source]
        problem: ExpertSliceProblem,
    },
    /// Reading the source model failed.
    #[error("reading the model")]
    Ingest(#[from] gpack_ingest::Error),
    /// A .gpack file is invalid.
    #[error("reading the .gpack file")]
    Gpack(#[from] gpack_format::Error),
    /// A native tensor could not be made or read.
    #[error("native tensor {name}")]
    Quant {
        /// GGUF tensor name.
        name: String,
        /// The cause.
        #[source]
        source: gpack_quant::Error,
    },
    /// `gpack export` cannot write a tensor or the file as asked. It does
    /// not name the .gpack and the GGUF: the caller gave both and says them
    /// once, in front (`exporting A to B: …`).
    #[error(transparent)]
    Export(#[from] ExportProblem),
    /// The tokenizer failed to load.
    #[error("tokenizer")]
    Tokenizer(#[from] gpack_tokenizer::Error),
    /// The GPU failed: no adapter, a device lost or out of memory, a
    /// weight layout no GPU kernel reads (`what` names the tensor or the
    /// stage).
    #[error("GPU: {what}")]
    Gpu {
        /// What was being done: "opening the device", "tensor blk.0.attn_q.weight", "step".
        what: String,
        /// The device's error.
        #[source]
        source: gpack_gpu::Error,
    },
    /// The model (or the blocks asked for) does not fit the GPU's memory
    /// budget (`--gpu-memory`, [`crate::LoadOptions::gpu_memory`]).
    #[error("{what}: needs {needed} bytes of GPU memory ({detail}), the budget is {budget} ({from}); {hint}")]
    GpuMemory {
        /// What does not fit: "--gpu-layers 20", "block 0".
        what: String,
        /// Bytes it needs.
        needed: u64,
        /// What the bytes are (weights, KV cache, step buffers).
        detail: String,
        /// The budget's bytes.
        budget: u64,
        /// Where the budget came from.
        from: String,
        /// What to do instead.
        hint: &'static str,
    },
    /// The model cannot run on the device asked for (`--device gpu`).
    #[error("{what} runs on the CPU only for now: {why} (use --device cpu or auto)")]
    DeviceUnsupported {
        /// What is refused: "family qwen3moe", "an f32 KV cache".
        what: String,
        /// Why.
        why: &'static str,
    },
    /// The model cannot keep its KV cache in the type asked for (`--kv`).
    #[error("a {kv} KV cache is not supported for this model: {why} (use --kv f16 or f32)")]
    KvType {
        /// The types asked for: "q8_0", "K q4_0 / V f16".
        kv: String,
        /// Why.
        why: &'static str,
    },
}

/// What a section of a .gpack holds that this runtime cannot use (the
/// [`Error::Section`] source): matchable, each variant naming the tensor,
/// row or offset and what was expected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SectionProblem {
    /// A TensorIndex entry's bytes run past its section.
    #[error("tensor {tensor}: [{offset}, +{size}) outside the section ({len} bytes)")]
    TensorOutside {
        /// Tensor name.
        tensor: String,
        /// Offset in the section.
        offset: u64,
        /// Size.
        size: u64,
        /// The section's size.
        len: u64,
    },
    /// A TensorIndex entry points at a section the file does not have.
    #[error("tensor {tensor}: the file has no such section")]
    SectionMissing {
        /// Tensor name.
        tensor: String,
    },
    /// A ggml type id this runtime does not know.
    #[error("tensor {tensor}: unknown ggml type {ty}")]
    UnknownType {
        /// Tensor name.
        tensor: String,
        /// The type id.
        ty: u32,
    },
    /// A NativeDense entry that is not a native tensor.
    #[error("tensor {tensor}: not a native tensor")]
    NotNative {
        /// Tensor name.
        tensor: String,
    },
    /// A NativeDense entry whose dims multiply past 2^64.
    #[error(
        "tensor {tensor}: dims {dims:?}: their product passes 2^64 (TensorIndex entry of a \
         NativeDense tensor)"
    )]
    DimsOverflow {
        /// Tensor name.
        tensor: String,
        /// The dims, ne0 first.
        dims: Vec<u64>,
    },
    /// A NativeDense member's rows run past its native tensor.
    #[error(
        "tensor {tensor}: rows {row_start}..+{rows} outside its {native_rows}-row native tensor"
    )]
    RowsOutside {
        /// Tensor name.
        tensor: String,
        /// First row.
        row_start: u64,
        /// Rows.
        rows: u64,
        /// Rows of the native tensor.
        native_rows: usize,
    },
    /// A TensorIndex entry in a section that holds no tensor the model binds
    /// by name (routed experts are served per expert by the MoE runtime).
    #[error("tensor {tensor}: the section holds no tensor bound by name")]
    NoTensors {
        /// Tensor name.
        tensor: String,
    },
    /// A draft tensor the Mtp index does not list.
    #[error("draft tensor {tensor}: absent")]
    DraftTensorAbsent {
        /// Tensor name.
        tensor: String,
    },
    /// A draft tensor's bytes run past the Mtp data area.
    #[error("draft tensor {tensor}: [{offset}, +{size}) outside the data area ({len} bytes)")]
    DraftTensorOutside {
        /// Tensor name.
        tensor: String,
        /// Offset in the data area.
        offset: u64,
        /// Size.
        size: u64,
        /// The data area's size.
        len: u64,
    },
    /// The file has no Ple section.
    #[error("{} has no Ple section", path.display())]
    NoPle {
        /// The .gpack.
        path: std::path::PathBuf,
    },
    /// The PLE table is not raw ggml rows.
    #[error("the PLE table must be raw ggml rows (layout tag 0, found {layout})")]
    PleNotRaw {
        /// The layout tag found.
        layout: u32,
    },
    /// The PLE table's rows do not fill its payload.
    #[error("{rows} rows of {ne0} {ty} do not fill {bytes} bytes")]
    PleRows {
        /// Rows (ne1).
        rows: u64,
        /// Elements per row.
        ne0: u64,
        /// The ggml type.
        ty: gpack_ingest::GgmlType,
        /// Payload bytes.
        bytes: u64,
    },
    /// A PLE row larger than this machine's address space.
    #[error("a row of {bytes} bytes is too large")]
    PleRowTooLarge {
        /// Bytes per row.
        bytes: u64,
    },
    /// The file cannot be opened for the row reads.
    #[error("cannot open {}", path.display())]
    PleOpen {
        /// The .gpack.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A row number past the table.
    #[error("row {row} out of {rows} rows")]
    RowOutOfRange {
        /// The row asked for.
        row: u64,
        /// Rows in the table.
        rows: u64,
    },
    /// Reading a row failed.
    #[error("reading row {row} at offset {offset}")]
    PleRead {
        /// The row.
        row: u64,
        /// Its file offset.
        offset: u64,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A row read came back short (the file shrank?).
    #[error("short read of row {row} at offset {offset}: {got} bytes of the {need} asked")]
    PleShortRead {
        /// The row.
        row: u64,
        /// Its file offset.
        offset: u64,
        /// Bytes read (from the aligned start).
        got: usize,
        /// Bytes needed (from the aligned start).
        need: usize,
    },
}

/// Why an expert slice cannot be used (the [`Error::ExpertSlice`] source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExpertSliceProblem {
    /// The slice's (rows, cols) are not the model's.
    #[error("shape {found:?} (rows, cols), expected {expected:?}")]
    Shape {
        /// (rows, cols) of the slice.
        found: (usize, usize),
        /// (rows, cols) the model needs.
        expected: (usize, usize),
    },
    /// A raw slice's byte count is not its rows of its type.
    #[error("{bytes} bytes do not hold {rows} rows of {cols} {ty}")]
    Size {
        /// Bytes of the slice.
        bytes: u64,
        /// Rows.
        rows: u64,
        /// Columns.
        cols: u64,
        /// The ggml type.
        ty: gpack_ingest::GgmlType,
    },
    /// The bytes do not hash to the recorded SHA-256.
    #[error(
        "its bytes do not match the SHA-256 recorded in the .gpack (the shard was modified or \
         corrupted; `gpack verify` lists every bad slice)"
    )]
    Digest,
    /// The ExpertLayout is not the model's shape.
    #[error(
        "the ExpertLayout has {n_layers} layers of {n_expert} experts; the model needs layer \
         {layer} of {needed}"
    )]
    LayoutShape {
        /// Layers of the layout.
        n_layers: u32,
        /// Experts per layer of the layout.
        n_expert: u32,
        /// The layer asked for.
        layer: usize,
        /// Experts the model has.
        needed: usize,
    },
    /// The ExpertLayout marks the slice absent.
    #[error("marked absent")]
    Absent,
    /// An embedded slice, but the file has no ExpertBlobs section.
    #[error("the file has no ExpertBlobs")]
    NoExpertBlobs,
    /// The slice runs past the ExpertBlobs section.
    #[error("outside the section ({len} bytes)")]
    OutsideSection {
        /// The section's size.
        len: u64,
    },
    /// The slice runs past its external file.
    #[error("outside the file ({len} bytes)")]
    OutsideFile {
        /// The file's size.
        len: u64,
    },
    /// An embedded slice that is not a native tensor.
    #[error("not a native tensor")]
    NotNative {
        /// Why.
        #[source]
        source: gpack_quant::Error,
    },
    /// A file index past the ExpertLayout's file list.
    #[error("file index {index} (the ExpertLayout lists {files} files)")]
    FileIndex {
        /// The index.
        index: u32,
        /// Files listed.
        files: usize,
    },
    /// A ggml type id this runtime does not know.
    #[error("unknown ggml type {ty}")]
    UnknownType {
        /// The type id.
        ty: u32,
    },
}

/// Why `gpack export` cannot write the GGUF (the [`Error::Export`] source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportProblem {
    /// The output exists and `force` was not given. The message does not
    /// repeat the path (the caller's context names the output).
    #[error("the output already exists (pass --force to replace it)")]
    OutputExists {
        /// The output path.
        path: std::path::PathBuf,
    },
    /// The .gpack has no metadata to write.
    #[error("no MetadataKv section (not converted from a GGUF-like source)")]
    NoMetadata,
    /// A metadata value that does not decode.
    #[error("metadata key {key}")]
    MetadataValue {
        /// The key.
        key: String,
        /// Why (boxed: it would double the size of every `Result` here).
        #[source]
        source: Box<gpack_ingest::Error>,
    },
    /// A stacked routed expert tensor (MoE export is not implemented).
    #[error(
        "tensor {tensor} is a stacked routed expert (MoE); exporting MoE models is not \
         supported yet"
    )]
    StackedExperts {
        /// Tensor name.
        tensor: String,
    },
    /// A tensor's rows run past its native tensor's codes.
    #[error("tensor {tensor}: rows {start}..+{rows} outside its codes")]
    RowsOutsideCodes {
        /// Tensor name.
        tensor: String,
        /// First row.
        start: usize,
        /// Rows.
        rows: usize,
    },
    /// Writing a tensor's data failed.
    #[error("writing tensor {tensor}")]
    TensorData {
        /// Tensor name.
        tensor: String,
        /// Why (boxed: it would double the size of every `Result` here).
        #[source]
        source: Box<gpack_ingest::Error>,
    },
    /// Writing or examining the output failed.
    #[error("{op} {}", path.display())]
    Io {
        /// "writing" or "stat".
        op: &'static str,
        /// The temporary output file.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl gpack_format::NamesFile for Error {
    fn names_file(&self, path: &std::path::Path) -> bool {
        matches!(self, Error::Gpack(e) if e.names_file(path))
    }
}
