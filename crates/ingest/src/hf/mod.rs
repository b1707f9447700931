//! Hugging Face models: safetensors weights (one file or an index.json of shards),
//! `config.json` → GGUF metadata, HF tensor names → GGUF names.
//!
//! The goal is that opening an HF directory gives the same tensors (names, shapes,
//! values) and the same architecture keys as opening the GGUF llama.cpp's
//! `convert_hf_to_gguf.py` makes from it, so everything downstream only knows GGUF.
//! Element types are *not* converted (a BF16 checkpoint stays BF16); where values
//! must change to match, a [`Transform`] says how, and is applied lazily by
//! [`crate::Source::tensor_bytes`]:
//! - llama-family `q_proj`/`k_proj` rows: [`Transform::RopePermute`];
//! - Gemma 3 RMS-norm weights (`*norm.weight`): [`Transform::PlusOne`] (stored as F32,
//!   like the converter; Gemma 3n's norms are used as they are and stay untouched);
//! - per-expert matrices (qwen3moe `mlp.experts.E.*`, mixtral
//!   `block_sparse_moe.experts.E.w1/w2/w3`): one stacked `[cols, rows, n_expert]`
//!   tensor `blk.N.ffn_{gate,up,down}_exps.weight` ([`Transform::Stack`], or a plain
//!   range when the experts happen to be back to back in one file); likewise Gemma
//!   3n's `altup_projections.{0,1,2}` / `altup_unembed_projections.{0,1,2}` become one
//!   `[n_embd, n_embd, 3]` `altup_proj.weight` / `altup_unembd_proj.weight`
//!   ([`HfName::Part`]);
//! - Gemma 3n `token_embd`/`per_layer_token_embd` with fewer rows than `vocab_size`:
//!   zero rows appended up to it, as the converter does ([`Transform::PadZeros`]);
//! - gpt-oss's experts, `gate_up_proj` (gate and up interleaved by column) and
//!   `down_proj`, stored `[n_expert][in][out]`: de-interleaved and transposed into
//!   `ffn_{gate,up,down}_exps` and their biases ([`Transform::Strided`]); as
//!   OpenAI ships them, MXFP4 `*_blocks` + `*_scales` repacked into ggml's
//!   MXFP4 blocks ([`Transform::Mxfp4`]);
//! - Llama 3 RoPE (`rope_type: "llama3"`): the converter's generated
//!   `rope_freqs.weight` ([`Transform::Generated`]).
//!
//! Shard paths in an index.json are checked lexically (relative, no `..`, no root);
//! symlinks are followed, since the Hugging Face cache is made of them.

mod config;
mod names;

pub use config::{config_to_metadata, gguf_architecture, llama3_rope_factors, normal_icdf_f32};
pub use names::{map_tensor_name, HfName};

use crate::error::{ConfigProblem, IndexProblem, TransformProblem};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use gpack_format::ggml::GgmlType;
use serde::Deserialize;

use crate::error::Error;
use crate::safetensors::{self, SafetensorsTensor};
use crate::source::{
    Asset, ByteRange, Source, SourceFile, SourceKind, TensorInfo, Transform, ASSET_NAMES,
};
use crate::value::Metadata;

/// Opens an HF model directory: `model.safetensors.index.json`, else
/// `model.safetensors`, else the one `*.safetensors.index.json`, else every
/// `*.safetensors` file (in name order; a tensor name may appear only once).
pub(crate) fn open_dir(dir: &Path) -> Result<Source, Error> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        return open_index(&index);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return open_safetensors_file(SourceFile::open(&single)?);
    }
    let mut indexes = Vec::new();
    let mut files = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Io {
        file: dir.to_path_buf(),
        what: "read directory",
        source: e,
    })?;
    for e in entries {
        let e = e.map_err(|e| Error::Io {
            file: dir.to_path_buf(),
            what: "read directory",
            source: e,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".safetensors.index.json") {
            indexes.push(e.path());
        } else if name.ends_with(".safetensors") {
            files.push(e.path());
        }
    }
    match (indexes.as_slice(), files.as_slice()) {
        ([index], _) => open_index(index),
        ([], [file]) => open_safetensors_file(SourceFile::open(file)?),
        _ => Err(Error::NoWeights {
            file: dir.to_path_buf(),
        }),
    }
}

#[derive(Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

/// Whether `shard` is a plain relative path that stays inside its directory.
fn safe_shard_path(shard: &str) -> bool {
    let p = Path::new(shard);
    !shard.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Opens a sharded `*.index.json`.
pub(crate) fn open_index(index: &Path) -> Result<Source, Error> {
    let bytes = read_capped(index)?;
    let parsed: Index = serde_json::from_slice(&bytes).map_err(|e| Error::BadJson {
        file: index.to_path_buf(),
        what: "index.json",
        source: e,
    })?;
    let dir = index.parent().unwrap_or(Path::new("."));
    // Shards in name order; tensors expected in each.
    let mut expected: BTreeMap<&str, HashSet<&str>> = BTreeMap::new();
    for (tensor, shard) in &parsed.weight_map {
        if !safe_shard_path(shard) {
            return Err(Error::UnsafeShardPath {
                file: index.to_path_buf(),
                shard: shard.clone(),
            });
        }
        expected
            .entry(shard.as_str())
            .or_default()
            .insert(tensor.as_str());
    }
    let mut files = Vec::new();
    let mut tensors = Vec::new();
    for (shard, names) in &expected {
        let path = dir.join(shard);
        let file = SourceFile::open(&path)?;
        let st = safetensors::parse_named(file.bytes(), &path)?;
        let found: HashSet<&str> = st.tensors.iter().map(|t| t.name.as_str()).collect();
        let mismatch = |tensor: &str, problem| Error::IndexMismatch {
            file: index.to_path_buf(),
            tensor: tensor.to_string(),
            shard: shard.to_string(),
            problem,
        };
        if let Some(t) = names.iter().find(|t| !found.contains(*t)) {
            return Err(mismatch(t, IndexProblem::MissingFromShard));
        }
        if let Some(t) = st.tensors.iter().find(|t| !names.contains(t.name.as_str())) {
            return Err(mismatch(&t.name, IndexProblem::NotListed));
        }
        let i = files.len();
        tensors.extend(st.tensors.into_iter().map(|t| (i, t)));
        files.push(file);
    }
    build(dir, files, tensors)
}

/// Opens one safetensors file (config and assets from its directory, when present).
pub(crate) fn open_safetensors_file(file: SourceFile) -> Result<Source, Error> {
    let st = safetensors::parse_named(file.bytes(), &file.path)?;
    let dir = file
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let tensors = st.tensors.into_iter().map(|t| (0, t)).collect();
    build(&dir, vec![file], tensors)
}

/// Largest JSON/asset file read into memory. The largest real ones are tokenizers
/// (Gemma 3's tokenizer.json is 33 MB) and the index.json of very large MoE models
/// (~10 MB); the cap only stops a hostile file from exhausting memory.
pub const MAX_ASSET_SIZE: u64 = 1 << 30;

/// Reads a whole file of at most [`MAX_ASSET_SIZE`] bytes.
fn read_capped(p: &Path) -> Result<Vec<u8>, Error> {
    let io = |what, e| Error::Io {
        file: p.to_path_buf(),
        what,
        source: e,
    };
    let len = std::fs::metadata(p).map_err(|e| io("stat", e))?.len();
    if len > MAX_ASSET_SIZE {
        return Err(Error::TooLarge {
            file: p.to_path_buf(),
            offset: 0,
            what: "file size",
            value: len,
            max: MAX_ASSET_SIZE,
        });
    }
    std::fs::read(p).map_err(|e| io("read", e))
}

fn read_assets(dir: &Path) -> Result<Vec<Asset>, Error> {
    let mut assets = Vec::new();
    for name in ASSET_NAMES {
        let p = dir.join(name);
        if p.is_file() {
            let bytes = read_capped(&p)?;
            assets.push(Asset {
                name: name.to_string(),
                bytes,
            });
        }
    }
    Ok(assets)
}

/// Converts F32/F16/BF16 little-endian bytes to f32 (`None` for other types or a
/// length that is not a whole number of elements).
pub fn to_f32(bytes: &[u8], t: GgmlType) -> Option<Vec<f32>> {
    let two = |f: fn(u16) -> f32| {
        bytes.len().is_multiple_of(2).then(|| {
            bytes
                .chunks_exact(2)
                .map(|c| f(u16::from_le_bytes([c[0], c[1]])))
                .collect()
        })
    };
    match t {
        GgmlType::F32 => bytes.len().is_multiple_of(4).then(|| {
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        }),
        GgmlType::F16 => two(|b| half::f16::from_bits(b).to_f32()),
        GgmlType::BF16 => two(|b| half::bf16::from_bits(b).to_f32()),
        _ => None,
    }
}

/// A tensor being assembled: a finished descriptor, or a stacked group (experts or
/// AltUp projections) with the number of parts the config says it must have.
enum Slot {
    Done(TensorInfo),
    Group(String, Option<u64>),
}

/// Claims the GGUF name `name` for a tensor of `file`: a second tensor under
/// one name is an error.
fn claim(names: &mut HashSet<String>, name: &str, file: &Path) -> Result<(), Error> {
    match names.insert(name.to_string()) {
        true => Ok(()),
        false => Err(Error::DuplicateTensor {
            file: file.to_path_buf(),
            tensor: name.to_string(),
        }),
    }
}

fn build(
    dir: &Path,
    files: Vec<SourceFile>,
    tensors: Vec<(usize, SafetensorsTensor)>,
) -> Result<Source, Error> {
    let assets = read_assets(dir)?;
    let config_path = dir.join("config.json");
    let config: Option<serde_json::Value> = match assets.iter().find(|a| a.name == "config.json") {
        Some(a) => Some(
            serde_json::from_slice(&a.bytes).map_err(|e| Error::BadJson {
                file: config_path.clone(),
                what: "config.json",
                source: e,
            })?,
        ),
        None => None,
    };
    let metadata = match &config {
        Some(c) => config_to_metadata(c, &config_path)?,
        None => Metadata::new(),
    };
    let arch = metadata
        .get_str("general.architecture")
        .unwrap_or("")
        .to_string();
    let n_head = |key: &str| metadata.get_u32(&format!("{arch}.{key}"));
    let need = |key: &'static str, v: Option<u32>| {
        v.ok_or(Error::BadConfig {
            file: config_path.clone(),
            key,
            problem: ConfigProblem::MissingForRope,
        })
    };

    let mut slots = Vec::with_capacity(tensors.len() + 1);
    let mut names = HashSet::new();
    // Tensors the converter generates from the config, first as it writes them:
    // Llama 3's `rope_freqs.weight`, Phi-3 LongRoPE's long and short factors.
    let mut generated: Vec<(&str, Vec<f32>)> = Vec::new();
    if let Some(f) = config
        .as_ref()
        .filter(|_| names::llama_like(&arch))
        .and_then(llama3_rope_factors)
    {
        generated.push(("rope_freqs.weight", f));
    }
    if let Some((long, short)) = config
        .as_ref()
        .filter(|_| arch == "phi3")
        .and_then(config::phi3_rope_factors)
    {
        generated.push(("rope_factors_long.weight", long));
        generated.push(("rope_factors_short.weight", short));
    }
    for (name, factors) in generated {
        let bytes: Vec<u8> = factors.iter().flat_map(|f| f.to_le_bytes()).collect();
        names.insert(name.to_string());
        slots.push(Slot::Done(TensorInfo {
            name: name.into(),
            ggml_type: GgmlType::F32,
            dims: vec![factors.len() as u64],
            file: 0,
            offset: 0,
            size: bytes.len() as u64,
            transform: Some(Transform::Generated { bytes }),
        }));
    }
    let expert_count = metadata
        .get_u32(&format!("{arch}.expert_count"))
        .map(u64::from);
    // Gemma 3n: one projection per AltUp input but the active one.
    let altup_parts = metadata
        .get_u32(&format!("{arch}.altup.num_inputs"))
        .map(|n| u64::from(n).saturating_sub(1));
    let mut groups: HashMap<String, Vec<(u64, usize, SafetensorsTensor)>> = HashMap::new();
    // gpt-oss's MXFP4 scales, read with their blocks.
    let scales: HashMap<String, (usize, SafetensorsTensor)> = tensors
        .iter()
        .filter(|(_, t)| t.name.ends_with("_scales"))
        .map(|(fi, t)| (t.name.clone(), (*fi, t.clone())))
        .collect();
    for (fi, t) in tensors {
        let path = &files[fi].path;
        let dims: Vec<u64> = t.shape.iter().rev().copied().collect();
        let (name, mapped) = match map_tensor_name(&arch, &t.name) {
            m @ (HfName::Expert { .. } | HfName::Part { .. }) => {
                let (index, stacked, count) = match m {
                    HfName::Expert {
                        expert, stacked, ..
                    } => (expert, stacked, expert_count),
                    HfName::Part { index, stacked } => (index, stacked, altup_parts),
                    _ => unreachable!("matched above"),
                };
                let g = groups.entry(stacked.clone()).or_default();
                if g.is_empty() {
                    claim(&mut names, &stacked, path)?;
                    slots.push(Slot::Group(stacked, count));
                }
                g.push((index, fi, t));
                continue;
            }
            HfName::Strided {
                parts,
                stride,
                transpose,
            } => {
                // HF [outer, rows, cols] (a 2-D bias is [outer, 1, cols]).
                let shape = match *t.shape.as_slice() {
                    [o, r, c] => [o, r, c],
                    [o, c] => [o, 1, c],
                    _ => [0, 0, 0],
                };
                let bad = |name: &str, reason| Error::BadTransform {
                    file: path.clone(),
                    tensor: name.to_string(),
                    reason,
                };
                for (name, first) in parts {
                    if shape[2] == 0
                        || !shape[2].is_multiple_of(stride)
                        || t.ggml_type.block_size() != 1
                    {
                        return Err(bad(&name, TransformProblem::StridedShape));
                    }
                    let cols = shape[2] / stride;
                    let dims = match (transpose, t.shape.len()) {
                        (true, _) => vec![shape[1], cols, shape[0]],
                        (false, 2) => vec![cols, shape[0]],
                        (false, _) => vec![cols, shape[1], shape[0]],
                    };
                    claim(&mut names, &name, path)?;
                    slots.push(Slot::Done(TensorInfo {
                        size: t.size / stride,
                        name,
                        ggml_type: t.ggml_type,
                        dims,
                        file: fi,
                        offset: t.offset,
                        transform: Some(Transform::Strided {
                            shape,
                            stride,
                            first,
                            transpose,
                            rows: (0, shape[1]),
                            src_size: t.size,
                        }),
                    }));
                }
                continue;
            }
            HfName::MlaKvB { k_b, v_b } => {
                // `[n_head · (nope + v)][latent]`, per head nope rows of
                // k_b then v rows of v_b (DeepseekV2Model.modify_tensors).
                let dims_of = |key: &str| metadata.get_u32(&format!("{arch}.{key}"));
                let bad = |name: &str| Error::BadTransform {
                    file: path.clone(),
                    tensor: name.to_string(),
                    reason: TransformProblem::StridedShape,
                };
                let (Some(heads), Some(k_len), Some(rope), Some(v_len)) = (
                    dims_of("attention.head_count"),
                    dims_of("attention.key_length_mla"),
                    dims_of("rope.dimension_count"),
                    dims_of("attention.value_length_mla"),
                ) else {
                    return Err(bad(&t.name));
                };
                let (heads, nope, v) = (
                    u64::from(heads),
                    u64::from(k_len.saturating_sub(rope)),
                    u64::from(v_len),
                );
                let ok = matches!(*t.shape.as_slice(), [r, _] if r == heads * (nope + v))
                    && nope > 0
                    && t.ggml_type.block_size() == 1;
                if !ok {
                    return Err(bad(&t.name));
                }
                let lat = t.shape[1];
                let shape = [heads, nope + v, lat];
                for (name, rows, transpose) in [(k_b, (0, nope), true), (v_b, (nope, v), false)] {
                    let dims = match transpose {
                        true => vec![nope, lat, heads],
                        false => vec![lat, v, heads],
                    };
                    claim(&mut names, &name, path)?;
                    slots.push(Slot::Done(TensorInfo {
                        size: heads * rows.1 * lat * t.ggml_type.type_size(),
                        name,
                        ggml_type: t.ggml_type,
                        dims,
                        file: fi,
                        offset: t.offset,
                        transform: Some(Transform::Strided {
                            shape,
                            stride: 1,
                            first: 0,
                            transpose,
                            rows,
                            src_size: t.size,
                        }),
                    }));
                }
                continue;
            }
            HfName::Mxfp4 {
                parts,
                stride,
                scales: scales_name,
            } => {
                let bad = |name: &str| Error::BadTransform {
                    file: path.clone(),
                    tensor: name.to_string(),
                    reason: TransformProblem::Mxfp4Parts,
                };
                let Some((sfi, st)) = scales.get(&scales_name) else {
                    return Err(bad(&t.name));
                };
                let shape = match (t.shape.as_slice(), st.shape.as_slice()) {
                    ([o, r, k, 16], [o2, r2, k2])
                        if (o, r, k) == (o2, r2, k2) && r % stride == 0 && *k > 0 =>
                    {
                        [*o, *r, *k]
                    }
                    _ => return Err(bad(&t.name)),
                };
                let range = |fi: usize, x: &SafetensorsTensor| ByteRange {
                    file: fi,
                    offset: x.offset,
                    size: x.size,
                };
                for (name, first) in parts {
                    claim(&mut names, &name, path)?;
                    let n = shape[0] * (shape[1] / stride) * shape[2];
                    slots.push(Slot::Done(TensorInfo {
                        name,
                        ggml_type: GgmlType::MXFP4,
                        dims: vec![shape[2] * 32, shape[1] / stride, shape[0]],
                        file: fi,
                        offset: t.offset,
                        size: n.checked_mul(17).ok_or_else(|| bad(&t.name))?,
                        transform: Some(Transform::Mxfp4 {
                            blocks: range(fi, &t),
                            scales: range(*sfi, st),
                            shape,
                            stride,
                            first,
                        }),
                    }));
                }
                continue;
            }
            HfName::Consumed => continue,
            HfName::Gguf(n) => (n, true),
            HfName::Unmapped => (t.name.clone(), false),
        };
        claim(&mut names, &name, path)?;
        let mut info = TensorInfo {
            name,
            ggml_type: t.ggml_type,
            dims,
            file: fi,
            offset: t.offset,
            size: t.size,
            transform: None,
        };
        let bad = |info: &TensorInfo, reason| Error::BadTransform {
            file: path.clone(),
            tensor: info.name.clone(),
            reason,
        };
        // Transforms apply only to tensors we understand (not e.g. a vision tower's norms).
        if mapped && names::llama_like(&arch) {
            let heads = if info.name.ends_with("attn_q.weight")
                || info.name.ends_with("attn_q.bias")
            {
                Some(need("num_attention_heads", n_head("attention.head_count"))?)
            } else if info.name.ends_with("attn_k.weight") || info.name.ends_with("attn_k.bias") {
                Some(match n_head("attention.head_count_kv") {
                    Some(n) => n,
                    None => need("num_attention_heads", n_head("attention.head_count"))?,
                })
            } else {
                None
            };
            if let Some(n_head) = heads {
                let rows = info.dims.last().copied().unwrap_or(0);
                let group = 2 * u64::from(n_head);
                if group == 0 || rows == 0 || rows % group != 0 || info.ggml_type.block_size() != 1
                {
                    return Err(bad(&info, TransformProblem::RopeRows));
                }
                info.transform = Some(Transform::RopePermute { n_head });
            }
        }
        if mapped
            && matches!(arch.as_str(), "gemma2" | "gemma3")
            && info.name.ends_with("norm.weight")
        {
            if !matches!(
                info.ggml_type,
                GgmlType::F32 | GgmlType::F16 | GgmlType::BF16
            ) {
                return Err(bad(&info, TransformProblem::GemmaNormType));
            }
            let n = info.n_elements();
            info.size = n
                .checked_mul(4)
                .ok_or_else(|| bad(&info, TransformProblem::SizeOverflow))?;
            info.transform = Some(Transform::PlusOne {
                from: info.ggml_type,
            });
            info.ggml_type = GgmlType::F32;
        }
        if mapped
            && arch == "gemma3n"
            && matches!(
                info.name.as_str(),
                "token_embd.weight" | "per_layer_token_embd.weight"
            )
        {
            let rows = match &config {
                Some(c) => config::gemma3n_vocab_rows(c, &config_path)?,
                None => 0,
            };
            let have = info.dims.last().copied().unwrap_or(0);
            if info.dims.len() == 2 && have > 0 && have < rows {
                if info.ggml_type.block_size() != 1 || !info.size.is_multiple_of(have) {
                    return Err(bad(&info, TransformProblem::CannotPad));
                }
                let src_size = info.size;
                info.size = (info.size / have)
                    .checked_mul(rows)
                    .ok_or_else(|| bad(&info, TransformProblem::SizeOverflow))?;
                info.dims[1] = rows;
                info.transform = Some(Transform::PadZeros { src_size });
            }
        }
        slots.push(Slot::Done(info));
    }

    let mut out = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot {
            Slot::Done(t) => out.push(t),
            Slot::Group(name, count) => {
                let parts = groups.remove(&name).unwrap_or_default();
                out.push(stack(&files, name, parts, count)?);
            }
        }
    }
    Ok(Source {
        kind: SourceKind::Safetensors,
        files,
        metadata,
        tensors: out,
        assets,
    })
}

/// Stacks numbered 2-D tensors (experts, AltUp projections) into one `[cols, rows, n]`
/// tensor; `count` is how many parts config.json says there are, when it says.
fn stack(
    files: &[SourceFile],
    name: String,
    mut parts: Vec<(u64, usize, SafetensorsTensor)>,
    count: Option<u64>,
) -> Result<TensorInfo, Error> {
    parts.sort_by_key(|p| p.0);
    let Some((_, f0, first)) = parts.first() else {
        return Err(Error::BadTransform {
            file: PathBuf::new(),
            tensor: name,
            reason: TransformProblem::NoParts,
        });
    };
    let bad = |reason| Error::BadTransform {
        file: files[*f0].path.clone(),
        tensor: name.clone(),
        reason,
    };
    if parts.iter().enumerate().any(|(i, p)| p.0 != i as u64) {
        return Err(bad(TransformProblem::PartNumbers));
    }
    if let Some(n) = count {
        if n != parts.len() as u64 {
            return Err(bad(TransformProblem::PartCount));
        }
    }
    if first.shape.len() != 2
        || parts
            .iter()
            .any(|p| p.2.shape != first.shape || p.2.ggml_type != first.ggml_type)
    {
        return Err(bad(TransformProblem::PartShapes));
    }
    let n = parts.len() as u64;
    let size = first
        .size
        .checked_mul(n)
        .ok_or_else(|| bad(TransformProblem::SizeOverflow))?;
    let ranges: Vec<ByteRange> = parts
        .iter()
        .map(|(_, f, t)| ByteRange {
            file: *f,
            offset: t.offset,
            size: t.size,
        })
        .collect();
    let contiguous = ranges
        .windows(2)
        .all(|w| w[1].file == w[0].file && w[1].offset == w[0].offset + w[0].size);
    Ok(TensorInfo {
        name,
        ggml_type: first.ggml_type,
        dims: vec![first.shape[1], first.shape[0], n],
        file: ranges[0].file,
        offset: ranges[0].offset,
        size,
        transform: (!contiguous).then_some(Transform::Stack { parts: ranges }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_paths() {
        assert!(safe_shard_path("model-00001-of-00002.safetensors"));
        assert!(safe_shard_path("sub/model.safetensors"));
        assert!(!safe_shard_path("../model.safetensors"));
        assert!(!safe_shard_path("sub/../../x"));
        assert!(!safe_shard_path("/etc/passwd"));
        assert!(!safe_shard_path("./x"));
        assert!(!safe_shard_path(""));
    }

    #[test]
    fn f32_conversion() {
        assert_eq!(to_f32(&[0, 0x3c], GgmlType::F16), Some(vec![1.0]));
        assert_eq!(to_f32(&[0x80, 0x3f], GgmlType::BF16), Some(vec![1.0]));
        assert_eq!(to_f32(&[0, 0x3c, 0], GgmlType::F16), None);
        assert_eq!(to_f32(&[0; 4], GgmlType::I32), None);
    }
}
