//! [`Source`]: one model, whatever it came from, as metadata + tensor byte ranges.
//!
//! Nothing is copied at open: files are memory-mapped and tensors are described by
//! (file, offset, size). Only tensors that need a [`Transform`] to look like their
//! GGUF counterpart (HF llama q/k rows, Gemma norms, per-expert HF weights, Gemma
//! 3n's padded embeddings) are materialised, one at a time, by [`Source::tensor_bytes`].

use crate::error::TensorInfoProblem;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

use gpack_format::ggml::GgmlType;

use crate::error::Error;
use crate::value::Metadata;

/// Members of the groups stored fused into one native tensor per layer
/// (GGUF name stems, in row order): q‖k‖v and gate‖up.
pub const FUSED_GROUPS: [&[&str]; 2] = [&["attn_q", "attn_k", "attn_v"], &["ffn_gate", "ffn_up"]];

/// A file of a source: its path and its bytes (memory-mapped).
pub struct SourceFile {
    /// Where the file is.
    pub path: PathBuf,
    data: Data,
}

enum Data {
    Mapped(gpack_format::mmap::Mmap),
    Owned(Vec<u8>),
}

impl SourceFile {
    /// Opens and memory-maps `path` (an empty file is held as an empty buffer).
    pub fn open(path: &Path) -> Result<SourceFile, Error> {
        let io = |what, e| Error::Io {
            file: path.to_path_buf(),
            what,
            source: e,
        };
        let file = std::fs::File::open(path).map_err(|e| io("open", e))?;
        let len = file.metadata().map_err(|e| io("stat", e))?.len();
        let data = if len == 0 {
            Data::Owned(Vec::new())
        } else {
            Data::Mapped(gpack_format::mmap::map_file(&file).map_err(|e| io("map", e))?)
        };
        Ok(SourceFile {
            path: path.to_path_buf(),
            data,
        })
    }

    /// A file held in memory (tests, fuzzing, generated shards).
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> SourceFile {
        SourceFile {
            path: path.into(),
            data: Data::Owned(bytes),
        }
    }

    /// All bytes of the file.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Mapped(m) => m,
            Data::Owned(v) => v,
        }
    }

    /// Drops the mapped pages of `[offset, offset + len)` from this process's
    /// resident set (they are re-read from the file if touched again). A
    /// streaming converter calls this after each tensor so its memory does not
    /// grow with the model.
    pub fn release(&self, offset: u64, len: u64) {
        if let Data::Mapped(m) = &self.data {
            let (Ok(o), Ok(l)) = (usize::try_from(offset), usize::try_from(len)) else {
                return;
            };
            gpack_format::mmap::release(m, o, l);
        }
    }

    /// Advises sequential read-ahead over the whole file.
    pub fn advise_sequential(&self) {
        if let Data::Mapped(m) = &self.data {
            gpack_format::mmap::advise_sequential(m);
        }
    }

    /// File length in bytes.
    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }
}

impl std::fmt::Debug for SourceFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceFile")
            .field("path", &self.path)
            .field("len", &self.len())
            .field("mapped", &matches!(self.data, Data::Mapped(_)))
            .finish()
    }
}

/// A byte range in one of a [`Source`]'s files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ByteRange {
    /// Index into [`Source::files`].
    pub file: usize,
    /// Absolute byte offset in that file.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

/// How a tensor's bytes are made from source bytes when they are not simply
/// `files[file][offset..offset + size]`. Produced only for Hugging Face sources,
/// so that each tensor equals what llama.cpp's `convert_hf_to_gguf.py` writes.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transform {
    /// The rows (outermost HF axis) are reordered from HF's "two halves" rotary layout
    /// to GGUF's interleaved pairs, per head: HF row `h·2k + j·k + i` becomes row
    /// `h·2k + 2i + j` (`k` = rows / n_head / 2). This is `LlamaModel.permute` in
    /// `convert_hf_to_gguf.py`, applied to llama-family `q_proj` (n_head =
    /// `num_attention_heads`) and `k_proj` (n_head = `num_key_value_heads`).
    /// Source bytes: `(file, offset, size)` of the tensor itself; same type and size.
    RopePermute {
        /// Number of heads the rows are grouped into.
        n_head: u32,
    },
    /// Each element converted to f32 and 1.0 added: Gemma keeps RMS-norm weights as
    /// `w` and computes `x·(1 + w)`; llama.cpp's converter stores `1 + w` (in f32).
    /// Source bytes: elements of type `from` starting at `(file, offset)`; the tensor
    /// itself is `F32`, `size` = 4 × elements.
    PlusOne {
        /// Type of the source elements (F32, F16 or BF16).
        from: GgmlType,
    },
    /// The concatenation of `parts`, in order: the per-expert HF matrices
    /// `experts.{0..n}.{gate,up,down}_proj` stacked into one `[cols, rows, n]` tensor,
    /// as GGUF stores `ffn_{gate,up,down}_exps`, and Gemma 3n's
    /// `altup_projections.{0,1,2}` / `altup_unembed_projections.{0,1,2}` stacked into
    /// `altup_proj` / `altup_unembd_proj` (`[n_embd, n_embd, 3]`). Only used when the
    /// parts are not already back to back in one file (then the tensor is a plain
    /// range). `(file, offset)` is `parts[0]`'s.
    Stack {
        /// The source ranges, expert 0 first; all of the tensor's type.
        parts: Vec<ByteRange>,
    },
    /// The source range `(file, offset, src_size)` followed by zero bytes up to the
    /// tensor's `size`: extra all-zero rows at the end. llama.cpp's converter pads
    /// Gemma 3n's `token_embd` and `per_layer_token_embd` to `vocab_size` rows (zero
    /// embeddings for the vision/audio tokens the text checkpoint has no rows for).
    PadZeros {
        /// Length of the source bytes (at most `size`).
        src_size: u64,
    },
    /// Every `stride`-th column from `offset` of the rows `rows.0 ..
    /// rows.0 + rows.1` of an HF `[outer][rows][cols]` tensor, transposed or
    /// not: element `(o, j, r)` of the result (`[outer][cols/stride][rows.1]`,
    /// `transpose`) or `(o, r, j)` (`[outer][rows.1][cols/stride]`) is source
    /// element `(o, rows.0 + r, j·stride + offset)`. gpt-oss keeps its experts as
    /// `gate_up_proj [n_expert][n_embd][2·n_ff]` with gate and up interleaved
    /// by column and `down_proj [n_expert][n_ff][n_embd]`; llama.cpp's
    /// converter de-interleaves and transposes them into `ffn_{gate,up,down}_exps`
    /// (and their biases). DeepSeek's `kv_b_proj` (`[n_head][nope + v][latent]`)
    /// becomes `attn_k_b` (each head's first `nope` rows, transposed) and
    /// `attn_v_b` (the other `v`). Source bytes: the whole HF tensor, `src_size`
    /// bytes from `(file, offset)`, of the tensor's own (one-byte-or-wider,
    /// unblocked) element type.
    Strided {
        /// The HF dimensions `[outer, rows, cols]`.
        shape: [u64; 3],
        /// Take every `stride`-th column …
        stride: u64,
        /// … starting at this one.
        first: u64,
        /// Transpose the two inner axes.
        transpose: bool,
        /// The rows taken: first, count.
        rows: (u64, u64),
        /// Bytes of the source tensor.
        src_size: u64,
    },
    /// ggml MXFP4 blocks (1 byte E8M0 scale, then 16 bytes: element `k` in
    /// the low nibble of byte `k`, element `k + 16` in the high one) from
    /// OpenAI's split form: `blocks` `[outer][rows][nblk][16]` (element
    /// `2j` in the low nibble of byte `j`, `2j + 1` in the high one) and
    /// `scales` `[outer][rows][nblk]`, every `stride`-th row from `first`
    /// (llama.cpp's `GptOssModel.repack_mxfp4`). `(file, offset)` is the
    /// blocks'.
    Mxfp4 {
        /// The codes.
        blocks: ByteRange,
        /// The exponents.
        scales: ByteRange,
        /// `[outer, rows, nblk]`.
        shape: [u64; 3],
        /// Every `stride`-th row …
        stride: u64,
        /// … starting at this one.
        first: u64,
    },
    /// Bytes computed at open, read from no file (`file`/`offset` are 0): the
    /// `rope_freqs.weight` the converter generates for Llama 3 RoPE scaling.
    Generated {
        /// The tensor's bytes.
        bytes: Vec<u8>,
    },
}

/// One tensor of a [`Source`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// GGUF name (`blk.0.attn_q.weight`), or the HF name for unmapped tensors.
    pub name: String,
    /// Element type of the bytes [`Source::tensor_bytes`] returns.
    pub ggml_type: GgmlType,
    /// Dimensions in GGUF order: `ne0` (innermost, contiguous) first.
    pub dims: Vec<u64>,
    /// Index into [`Source::files`] of the (first) source bytes.
    pub file: usize,
    /// Absolute byte offset of the (first) source bytes in that file.
    pub offset: u64,
    /// Byte size of the tensor as [`Source::tensor_bytes`] returns it
    /// (= `ggml_type` bytes for `dims`). Without a transform this is also the source
    /// range's length.
    pub size: u64,
    /// How the bytes are made, when they are not the plain range `offset..offset+size`.
    pub transform: Option<Transform>,
}

/// Most layers (blocks) a model may declare, in its metadata or its tensor
/// names; the largest real models have ~130. The one bound that convert's
/// planner and the runtime's config both check before a layer count sizes
/// anything.
pub const MAX_LAYERS: u32 = 4096;

/// The product of `dims` (a tensor's element count), or `None` when it
/// passes 2^64: for every size that comes from a file.
pub fn checked_product(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
}

impl TensorInfo {
    /// Number of elements (product of `dims`; saturating, validated at open).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |n, &d| n.saturating_mul(d))
    }

    /// The source byte ranges this tensor is made from.
    pub fn source_ranges(&self) -> Vec<ByteRange> {
        match &self.transform {
            None | Some(Transform::RopePermute { .. }) => {
                vec![ByteRange {
                    file: self.file,
                    offset: self.offset,
                    size: self.size,
                }]
            }
            Some(Transform::PlusOne { from }) => vec![ByteRange {
                file: self.file,
                offset: self.offset,
                size: self.n_elements().saturating_mul(from.type_size()),
            }],
            Some(Transform::Stack { parts }) => parts.clone(),
            Some(Transform::PadZeros { src_size } | Transform::Strided { src_size, .. }) => {
                vec![ByteRange {
                    file: self.file,
                    offset: self.offset,
                    size: *src_size,
                }]
            }
            Some(Transform::Mxfp4 { blocks, scales, .. }) => vec![*blocks, *scales],
            Some(Transform::Generated { .. }) => Vec::new(),
        }
    }
}

/// A raw auxiliary file of a Hugging Face model (tokenizer, configs, chat template).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asset {
    /// File name, e.g. `"tokenizer.json"`.
    pub name: String,
    /// The file's bytes, unmodified.
    pub bytes: Vec<u8>,
}

/// What a [`Source`] was read from.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A GGUF file, or all shards of a split GGUF.
    Gguf,
    /// A safetensors file, a sharded index.json, or a Hugging Face model directory.
    Safetensors,
}

/// The files names of a Hugging Face directory that become [`Source::assets`].
pub const ASSET_NAMES: [&str; 8] = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "special_tokens_map.json",
    "tokenizer.model",
];

/// One model: metadata (GGUF keys), tensor descriptors over mapped files, raw assets.
#[derive(Debug)]
pub struct Source {
    /// What the source was read from.
    pub kind: SourceKind,
    /// The files tensors point into (GGUF shards, or safetensors shards).
    pub files: Vec<SourceFile>,
    /// GGUF-style metadata. For a split GGUF: the first shard's, without the
    /// `split.*` keys (the source is presented as one unsplit model). For safetensors:
    /// derived from config.json by [`crate::hf::config_to_metadata`].
    pub metadata: Metadata,
    /// Tensors, in file order (split GGUF: shard by shard).
    pub tensors: Vec<TensorInfo>,
    /// Raw auxiliary files ([`ASSET_NAMES`] found next to safetensors weights).
    pub assets: Vec<Asset>,
}

impl Source {
    /// Opens a model, detecting what `path` is:
    /// - a directory: a Hugging Face model directory (`model.safetensors.index.json`,
    ///   else `model.safetensors`, else the single `*.safetensors.index.json`, else all
    ///   `*.safetensors` files in name order);
    /// - a file ending in `.index.json`: a sharded safetensors index;
    /// - a file starting with `GGUF`: a GGUF; if its name is `<prefix>-NNNNN-of-MMMMM.gguf`,
    ///   every shard of the split is found next to it and checked;
    /// - any other file: a safetensors file.
    ///
    /// For safetensors weights, `config.json` and the other [`ASSET_NAMES`] are read from
    /// the weights' directory when present. Never panics on malformed input.
    pub fn open(path: &Path) -> Result<Source, Error> {
        let meta = std::fs::metadata(path).map_err(|e| Error::Io {
            file: path.to_path_buf(),
            what: "open",
            source: e,
        })?;
        if meta.is_dir() {
            return crate::hf::open_dir(path);
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".index.json") {
            return crate::hf::open_index(path);
        }
        let file = SourceFile::open(path)?;
        if file.bytes().starts_with(&crate::gguf::MAGIC) {
            return crate::gguf::split::open(file);
        }
        if name.ends_with(".gguf") {
            // Let the GGUF parser say what is wrong with the magic.
            crate::gguf::parse_named(file.bytes(), path)?;
        }
        if file.len() < 8 {
            return Err(Error::UnknownFormat {
                file: path.to_path_buf(),
            });
        }
        crate::hf::open_safetensors_file(file)
    }

    /// The groups of each layer that may be stored fused as one native
    /// tensor, q‖k‖v and gate‖up ([`FUSED_GROUPS`]), as indices into
    /// [`Source::tensors`] in row order; a group is listed only when every
    /// member exists. Callers check that the members agree (type, columns).
    pub fn fusable_groups(&self) -> Vec<Vec<usize>> {
        let by_name: std::collections::HashMap<&str, usize> = self
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        // The layer numbers the names carry (not 0..max: a crafted name such
        // as `blk.4294967295.x` must not make this loop over 2^32 layers).
        let layers: std::collections::BTreeSet<usize> = self
            .tensors
            .iter()
            .filter_map(|t| {
                t.name
                    .strip_prefix("blk.")?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .collect();
        let mut out = Vec::new();
        for l in layers {
            for group in FUSED_GROUPS {
                let members: Option<Vec<usize>> = group
                    .iter()
                    .map(|m| by_name.get(format!("blk.{l}.{m}.weight").as_str()).copied())
                    .collect();
                out.extend(members);
            }
        }
        out
    }

    /// The tensor named `name` (linear search).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.metadata.get_str("general.architecture")
    }

    /// The bytes of tensor `t`: borrowed from the mapping, or owned when a
    /// [`Transform`] applies. Never panics: a `TensorInfo` that does not fit this
    /// source is an error.
    pub fn tensor_bytes(&self, t: &TensorInfo) -> Result<Cow<'_, [u8]>, Error> {
        match &t.transform {
            None => Ok(Cow::Borrowed(self.leading(t, t.size)?)),
            Some(Transform::RopePermute { n_head }) => {
                let src = self.leading(t, t.size)?;
                // The outermost HF axis is the last GGUF dimension.
                let rows = t.dims.last().copied().unwrap_or(0);
                permute_rows(src, rows, *n_head)
                    .map(Cow::Owned)
                    .ok_or_else(|| Error::BadTensorInfo {
                        tensor: t.name.clone(),
                        reason: TensorInfoProblem::RopeRows,
                    })
            }
            Some(Transform::PlusOne { from }) => {
                let n = t.n_elements();
                let src_size =
                    n.checked_mul(from.type_size())
                        .ok_or_else(|| Error::BadTensorInfo {
                            tensor: t.name.clone(),
                            reason: TensorInfoProblem::SourceSizeOverflow,
                        })?;
                if t.ggml_type != GgmlType::F32 || t.size != n.saturating_mul(4) {
                    return Err(Error::BadTensorInfo {
                        tensor: t.name.clone(),
                        reason: TensorInfoProblem::PlusOneNotF32,
                    });
                }
                let src = self.leading(t, src_size)?;
                let vals = crate::hf::to_f32(src, *from).ok_or_else(|| Error::BadTensorInfo {
                    tensor: t.name.clone(),
                    reason: TensorInfoProblem::PlusOneSourceType,
                })?;
                Ok(Cow::Owned(
                    vals.into_iter()
                        .flat_map(|v| (v + 1.0).to_le_bytes())
                        .collect(),
                ))
            }
            Some(Transform::PadZeros { src_size }) => {
                let size = usize::try_from(t.size).ok().filter(|_| *src_size <= t.size);
                let Some(size) = size else {
                    return Err(Error::BadTensorInfo {
                        tensor: t.name.clone(),
                        reason: TensorInfoProblem::PaddingLarger,
                    });
                };
                let src = self.leading(t, *src_size)?;
                let mut out = Vec::with_capacity(size);
                out.extend_from_slice(src);
                out.resize(size, 0);
                Ok(Cow::Owned(out))
            }
            Some(Transform::Strided {
                shape,
                stride,
                first,
                transpose,
                rows,
                src_size,
            }) => {
                let bad = |reason| Error::BadTensorInfo {
                    tensor: t.name.clone(),
                    reason,
                };
                let src = self.leading(t, *src_size)?;
                strided(
                    src,
                    *shape,
                    (*stride, *first),
                    *rows,
                    *transpose,
                    t.ggml_type,
                    t.size,
                )
                .map(Cow::Owned)
                .ok_or_else(|| bad(TensorInfoProblem::StridedShape))
            }
            Some(Transform::Mxfp4 {
                blocks,
                scales,
                shape,
                stride,
                first,
            }) => {
                let b = self.range(t, *blocks)?;
                let s = self.range(t, *scales)?;
                mxfp4_blocks(b, s, *shape, *stride, *first, t.size)
                    .map(Cow::Owned)
                    .ok_or_else(|| Error::BadTensorInfo {
                        tensor: t.name.clone(),
                        reason: TensorInfoProblem::Mxfp4Shape,
                    })
            }
            Some(Transform::Generated { bytes }) => {
                if bytes.len() as u64 != t.size {
                    return Err(Error::BadTensorInfo {
                        tensor: t.name.clone(),
                        reason: TensorInfoProblem::GeneratedSize,
                    });
                }
                Ok(Cow::Owned(bytes.clone()))
            }
            Some(Transform::Stack { parts }) => {
                let total = parts.iter().try_fold(0u64, |a, p| a.checked_add(p.size));
                if total != Some(t.size) {
                    return Err(Error::BadTensorInfo {
                        tensor: t.name.clone(),
                        reason: TensorInfoProblem::StackSize,
                    });
                }
                let mut out = Vec::with_capacity(usize::try_from(t.size).unwrap_or(0));
                for p in parts {
                    out.extend_from_slice(self.range(t, *p)?);
                }
                Ok(Cow::Owned(out))
            }
        }
    }

    /// `size` bytes of `t`'s source from its `(file, offset)`.
    fn leading(&self, t: &TensorInfo, size: u64) -> Result<&[u8], Error> {
        self.range(
            t,
            ByteRange {
                file: t.file,
                offset: t.offset,
                size,
            },
        )
    }

    fn range(&self, t: &TensorInfo, r: ByteRange) -> Result<&[u8], Error> {
        let bad = |reason| Error::BadTensorInfo {
            tensor: t.name.clone(),
            reason,
        };
        let f = self
            .files
            .get(r.file)
            .ok_or_else(|| bad(TensorInfoProblem::FileIndex))?;
        let end = r
            .offset
            .checked_add(r.size)
            .ok_or_else(|| bad(TensorInfoProblem::RangeOverflow))?;
        let b = f.bytes();
        if end > b.len() as u64 {
            return Err(bad(TensorInfoProblem::RangeOutside));
        }
        Ok(&b[r.offset as usize..end as usize])
    }
}

/// The bytes [`Transform::Mxfp4`] describes, or `None` when the shape does
/// not fit the sources or `size`.
fn mxfp4_blocks(
    blocks: &[u8],
    scales: &[u8],
    [outer, rows, nblk]: [u64; 3],
    stride: u64,
    first: u64,
    size: u64,
) -> Option<Vec<u8>> {
    let n = crate::source::checked_product(&[outer, rows, nblk])?;
    if stride == 0
        || first >= stride
        || !rows.is_multiple_of(stride)
        || n.checked_mul(16)? != blocks.len() as u64
        || n != scales.len() as u64
        || (n / stride).checked_mul(17)? != size
    {
        return None;
    }
    let (rows, nblk, stride, first) = (
        rows as usize,
        nblk as usize,
        stride as usize,
        first as usize,
    );
    let mut out = Vec::with_capacity(size as usize);
    for o in 0..outer as usize {
        for r in (first..rows).step_by(stride) {
            for k in 0..nblk {
                let i = (o * rows + r) * nblk + k;
                out.push(scales[i]);
                let q = &blocks[i * 16..i * 16 + 16];
                let nib = |v: usize| (q[v / 2] >> (4 * (v % 2))) & 0x0F;
                out.extend((0..16).map(|j| nib(j) | (nib(j + 16) << 4)));
            }
        }
    }
    Some(out)
}

/// The bytes [`Transform::Strided`] describes, or `None` when the shape does
/// not fit `src`, `size` or the element type (blocked types cannot be split
/// by element).
fn strided(
    src: &[u8],
    [outer, rows, cols]: [u64; 3],
    (stride, first): (u64, u64),
    (row0, nrows): (u64, u64),
    transpose: bool,
    ty: GgmlType,
    size: u64,
) -> Option<Vec<u8>> {
    let es = ty.type_size();
    if ty.block_size() != 1 || stride == 0 || first >= stride || !cols.is_multiple_of(stride) {
        return None;
    }
    if row0.checked_add(nrows)? > rows {
        return None;
    }
    let n = crate::source::checked_product(&[outer, rows, cols])?;
    let taken = crate::source::checked_product(&[outer, nrows, cols / stride])?;
    if n.checked_mul(es)? != src.len() as u64 || taken.checked_mul(es)? != size {
        return None;
    }
    let (es, rows, cols, stride, first, row0, nrows) = (
        es as usize,
        rows as usize,
        cols as usize,
        stride as usize,
        first as usize,
        row0 as usize,
        nrows as usize,
    );
    let out_cols = cols / stride;
    let mut out = Vec::with_capacity(size as usize);
    for o in 0..outer as usize {
        let m = &src[o * rows * cols * es..(o + 1) * rows * cols * es];
        let at = |r: usize, j: usize| {
            let i = ((row0 + r) * cols + j * stride + first) * es;
            &m[i..i + es]
        };
        if transpose {
            for j in 0..out_cols {
                (0..nrows).for_each(|r| out.extend_from_slice(at(r, j)));
            }
        } else {
            for r in 0..nrows {
                (0..out_cols).for_each(|j| out.extend_from_slice(at(r, j)));
            }
        }
    }
    Some(out)
}

/// Reorders `rows` equal rows of `src` as [`Transform::RopePermute`] describes.
/// `None` when `rows` is not a multiple of `2 × n_head` or does not divide `src`.
pub(crate) fn permute_rows(src: &[u8], rows: u64, n_head: u32) -> Option<Vec<u8>> {
    let n_head = u64::from(n_head);
    let group = n_head.checked_mul(2)?;
    if rows == 0
        || group == 0
        || !rows.is_multiple_of(group)
        || !(src.len() as u64).is_multiple_of(rows)
        || (src.len() as u64) < rows
    {
        return None;
    }
    let row_bytes = (src.len() as u64 / rows) as usize;
    let half = (rows / group) as usize;
    let mut out = Vec::with_capacity(src.len());
    for h in 0..n_head as usize {
        for i in 0..half {
            for j in 0..2 {
                let r = h * 2 * half + j * half + i;
                out.extend_from_slice(&src[r * row_bytes..(r + 1) * row_bytes]);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Source>();
        check::<SourceFile>();
    }

    #[test]
    fn permute_matches_numpy_reshape_swapaxes() {
        // 8 rows of 1 byte, 2 heads: per head rows [a0 a1 b0 b1] -> [a0 b0 a1 b1].
        let src: Vec<u8> = (0..8).collect();
        assert_eq!(
            permute_rows(&src, 8, 2).unwrap(),
            vec![0, 2, 1, 3, 4, 6, 5, 7]
        );
        assert_eq!(permute_rows(&src, 8, 3), None);
        assert_eq!(permute_rows(&src, 8, 0), None);
        assert_eq!(permute_rows(&[], 0, 1), None);
    }
}
