//! Builder from GGUF `tokenizer.ggml.*` metadata, and SentencePiece merge derivation.
//!
//! The metadata comes through the small [`GgufMeta`] trait so that this crate does not
//! depend on a particular GGUF reader: `gpack-ingest`'s `Metadata` implements it, and so
//! does the minimal stream reader [`GgufMetadata`] here (only the key-value section is read,
//! never the tensor data).

use crate::error::{Error, Result};
use crate::gbt1::PSEUDO_CHAR;
use crate::spec::*;
use std::collections::HashMap;

/// Read access to GGUF metadata key-values.
pub trait GgufMeta {
    /// A string value.
    fn get_str(&self, key: &str) -> Option<&str>;
    /// An unsigned integer value (any integer type that fits).
    fn get_u32(&self, key: &str) -> Option<u32>;
    /// A boolean value.
    fn get_bool(&self, key: &str) -> Option<bool>;
    /// An array of strings, as raw bytes.
    fn get_string_array(&self, key: &str) -> Option<Vec<&[u8]>>;
    /// An array of integers.
    fn get_i32_array(&self, key: &str) -> Option<Vec<i32>>;
    /// An array of f32.
    fn get_f32_array(&self, key: &str) -> Option<Vec<f32>>;
}

/// Derive SentencePiece merges from the vocabulary and scores, as llama.cpp's
/// `llm_tokenizer_spm` would find them: every split of a token into two tokens (or a
/// single character outside the vocabulary, as a pseudo-id) is a merge into it, with the
/// token's score as priority. Returns the merges in rank order (score descending, then
/// token id, then split point) and their priorities (dense rank of the score).
pub fn derive_spm_merges(tokens: &[SpecToken]) -> (Vec<[u32; 3]>, Vec<u32>) {
    // text → id; llama.cpp's token_to_id keeps the last of duplicate texts.
    let mut ids: HashMap<&[u8], u32> = HashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        if !t.bytes.is_empty() {
            ids.insert(&t.bytes, i as u32);
        }
    }
    let resolve = |b: &[u8]| -> Option<u32> {
        if let Some(&id) = ids.get(b) {
            return Some(id);
        }
        let s = std::str::from_utf8(b).ok()?;
        let mut it = s.chars();
        let c = it.next()?;
        it.next().is_none().then_some(PSEUDO_CHAR | c as u32)
    };
    let mut out: Vec<(f32, [u32; 3])> = Vec::new();
    for (id, t) in tokens.iter().enumerate() {
        let Ok(s) = std::str::from_utf8(&t.bytes) else {
            continue;
        };
        for (k, _) in s.char_indices().skip(1) {
            let (a, b) = (&t.bytes[..k], &t.bytes[k..]);
            if let (Some(l), Some(r)) = (resolve(a), resolve(b)) {
                if ids.get(t.bytes.as_slice()) == Some(&(id as u32)) {
                    out.push((t.score, [l, r, id as u32]));
                }
            }
        }
    }
    let key = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
    out.sort_by(|a, b| key(b.0).total_cmp(&key(a.0)));
    let mut ranks = Vec::with_capacity(out.len());
    let mut rank = 0u32;
    for k in 0..out.len() {
        if k > 0 && key(out[k].0) != key(out[k - 1].0) {
            rank += 1;
        }
        ranks.push(rank);
    }
    (out.into_iter().map(|x| x.1).collect(), ranks)
}

impl TokenizerSpec {
    /// Build from GGUF `tokenizer.ggml.*` metadata (`model` = `gpt2` or `llama`).
    pub fn from_gguf(meta: &impl GgufMeta) -> Result<Self> {
        let model = meta.get_str("tokenizer.ggml.model").ok_or(Error::Missing {
            what: "tokenizer.ggml.model",
        })?;
        let kind = match model {
            "gpt2" => ModelKind::ByteLevelBpe,
            "llama" => ModelKind::SentencePieceBpe,
            other => {
                return Err(Error::Unsupported {
                    what: "tokenizer.ggml.model",
                    value: other.to_string(),
                })
            }
        };
        let pre = match kind {
            ModelKind::ByteLevelBpe => PreTokenizer::from_gguf_name(
                meta.get_str("tokenizer.ggml.pre").unwrap_or("default"),
            )?,
            ModelKind::SentencePieceBpe => PreTokenizer::None,
        };
        let texts = meta
            .get_string_array("tokenizer.ggml.tokens")
            .ok_or(Error::Missing {
                what: "tokenizer.ggml.tokens",
            })?;
        let n = texts.len();
        if n == 0 || n > crate::gbt1::MAX_VOCAB as usize {
            return Err(Error::Invalid {
                what: "vocab size",
                value: n as u64,
                limit: crate::gbt1::MAX_VOCAB as u64,
            });
        }
        let types = meta.get_i32_array("tokenizer.ggml.token_type");
        let scores = meta.get_f32_array("tokenizer.ggml.scores");
        if types.as_ref().is_some_and(|t| t.len() != n) {
            return Err(Error::Invalid {
                what: "token_type count",
                value: types.map_or(0, |t| t.len()) as u64,
                limit: n as u64,
            });
        }
        if scores.as_ref().is_some_and(|t| t.len() != n) {
            return Err(Error::Invalid {
                what: "scores count",
                value: scores.map_or(0, |t| t.len()) as u64,
                limit: n as u64,
            });
        }
        let mut tokens = Vec::with_capacity(n);
        for (i, t) in texts.iter().enumerate() {
            let ty = types
                .as_ref()
                .map(|v| TokenType::from_u8(v[i].clamp(0, 255) as u8).unwrap_or(TokenType::Normal))
                .unwrap_or(TokenType::Normal);
            let split = matches!(
                ty,
                TokenType::Control | TokenType::UserDefined | TokenType::Unknown
            );
            let bytes = match kind {
                ModelKind::ByteLevelBpe if !split => std::str::from_utf8(t)
                    .ok()
                    .and_then(unmap_byte_level)
                    .unwrap_or_else(|| t.to_vec()),
                _ => t.to_vec(),
            };
            tokens.push(SpecToken {
                bytes,
                ty,
                split,
                special: matches!(ty, TokenType::Control | TokenType::Unknown),
                score: scores.as_ref().map_or(0.0, |s| s[i]),
            });
        }
        let (merges, merge_ranks) = match kind {
            ModelKind::ByteLevelBpe => {
                let strs =
                    meta.get_string_array("tokenizer.ggml.merges")
                        .ok_or(Error::Missing {
                            what: "tokenizer.ggml.merges",
                        })?;
                // Merges are spelled in the byte-level alphabet, as the GGUF tokens.
                let mut by_text: HashMap<&[u8], u32> = HashMap::with_capacity(n);
                for (i, t) in texts.iter().enumerate() {
                    by_text.insert(t, i as u32);
                }
                let mut m = Vec::with_capacity(strs.len());
                for (i, s) in strs.iter().enumerate() {
                    let pos = s
                        .iter()
                        .skip(1)
                        .position(|&c| c == b' ')
                        .map(|p| p + 1)
                        .ok_or(Error::BadEntry {
                            what: "merge",
                            index: i as u64,
                        })?;
                    let (a, b) = (&s[..pos], &s[pos + 1..]);
                    let l = *by_text.get(a).ok_or(Error::BadEntry {
                        what: "merge left token",
                        index: i as u64,
                    })?;
                    let r = *by_text.get(b).ok_or(Error::BadEntry {
                        what: "merge right token",
                        index: i as u64,
                    })?;
                    let joined = [a, b].concat();
                    let mid = *by_text.get(joined.as_slice()).ok_or(Error::BadEntry {
                        what: "merged token",
                        index: i as u64,
                    })?;
                    m.push([l, r, mid]);
                }
                (m, None)
            }
            ModelKind::SentencePieceBpe => {
                let (m, r) = derive_spm_merges(&tokens);
                (m, Some(r))
            }
        };
        let id = |k: &str| meta.get_u32(k).filter(|&x| (x as usize) < n);
        let is_spm = kind == ModelKind::SentencePieceBpe;
        let spec = TokenizerSpec {
            model: kind,
            pre,
            tokens,
            merges,
            merge_ranks,
            merge_mode: MergeMode::BestFirst,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            pad: id("tokenizer.ggml.padding_token_id"),
            unk: id("tokenizer.ggml.unknown_token_id"),
            add_bos: meta
                .get_bool("tokenizer.ggml.add_bos_token")
                .unwrap_or(is_spm),
            add_eos: meta
                .get_bool("tokenizer.ggml.add_eos_token")
                .unwrap_or(false),
            add_space_prefix: is_spm
                && meta
                    .get_bool("tokenizer.ggml.add_space_prefix")
                    .unwrap_or(true),
            byte_fallback: is_spm,
            ignore_merges: pre == PreTokenizer::Llama3,
            chat_template: meta.get_str("tokenizer.chat_template").map(str::to_string),
        };
        spec.validate()?;
        Ok(spec)
    }
}

/// A GGUF metadata value (only what tokenizers need is kept typed; other arrays are skipped).
#[derive(Clone, Debug)]
pub enum GgufValue {
    /// Any integer, widened.
    Int(i64),
    /// f32 or f64.
    Float(f64),
    /// Boolean.
    Bool(bool),
    /// String (raw bytes).
    Str(Vec<u8>),
    /// Array of strings.
    StrArray(Vec<Vec<u8>>),
    /// Array of integers.
    IntArray(Vec<i64>),
    /// Array of floats.
    FloatArray(Vec<f32>),
    /// Anything else.
    Other,
}

/// Minimal GGUF (v2, v3) metadata reader: reads only the key-value section from a stream.
#[derive(Clone, Debug, Default)]
pub struct GgufMetadata {
    /// Key → value.
    pub map: HashMap<String, GgufValue>,
}

/// Caps (gguf.cpp uses similar sanity limits): keys, string length, array length.
const MAX_KV: u64 = 1 << 20;
const MAX_STR: u64 = 1 << 28;
const MAX_ARR: u64 = 1 << 26;

impl GgufMetadata {
    /// Read the metadata of the GGUF file at `path`.
    pub fn open(path: &std::path::Path) -> Result<Self> {
        let f = std::fs::File::open(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::read(&mut std::io::BufReader::with_capacity(1 << 20, f)).map_err(|e| match e {
            Error::Io { source, .. } => Error::Io {
                path: path.display().to_string(),
                source,
            },
            e => e,
        })
    }

    /// Read from a stream positioned at the start of a GGUF file. Never panics.
    pub fn read(r: &mut impl std::io::Read) -> Result<Self> {
        let io = |source| Error::Io {
            path: String::new(),
            source,
        };
        let mut rd = |n: usize| -> Result<Vec<u8>> {
            let mut v = vec![0u8; n];
            r.read_exact(&mut v).map_err(io)?;
            Ok(v)
        };
        let head = rd(4)?;
        if head != b"GGUF" {
            return Err(Error::BadMagic {
                expected: 0x4655_4747,
                found: u32::from_le_bytes([head[0], head[1], head[2], head[3]]),
            });
        }
        let u32_ = |b: Vec<u8>| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let u64_ =
            |b: Vec<u8>| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let version = u32_(rd(4)?);
        if !(2..=3).contains(&version) {
            return Err(Error::Unsupported {
                what: "GGUF version",
                value: version.to_string(),
            });
        }
        let _n_tensors = u64_(rd(8)?);
        let n_kv = u64_(rd(8)?);
        if n_kv > MAX_KV {
            return Err(Error::Invalid {
                what: "GGUF kv count",
                value: n_kv,
                limit: MAX_KV,
            });
        }
        let mut map = HashMap::new();
        let read_str = |rd: &mut dyn FnMut(usize) -> Result<Vec<u8>>| -> Result<Vec<u8>> {
            let b = rd(8)?;
            let n = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            if n > MAX_STR {
                return Err(Error::Invalid {
                    what: "GGUF string length",
                    value: n,
                    limit: MAX_STR,
                });
            }
            rd(n as usize)
        };
        fn scalar(
            rd: &mut dyn FnMut(usize) -> Result<Vec<u8>>,
            ty: u32,
        ) -> Result<Option<GgufValue>> {
            let size = match ty {
                0 | 1 | 7 => 1,
                2 | 3 => 2,
                4..=6 => 4,
                10..=12 => 8,
                _ => return Ok(None),
            };
            let b = rd(size)?;
            let mut w = [0u8; 8];
            w[..size].copy_from_slice(&b);
            let u = u64::from_le_bytes(w);
            Ok(Some(match ty {
                0 => GgufValue::Int(u as u8 as i64),
                1 => GgufValue::Int(u as u8 as i8 as i64),
                2 => GgufValue::Int(u as u16 as i64),
                3 => GgufValue::Int(u as u16 as i16 as i64),
                4 => GgufValue::Int(u as u32 as i64),
                5 => GgufValue::Int(u as u32 as i32 as i64),
                6 => GgufValue::Float(f32::from_bits(u as u32) as f64),
                7 => GgufValue::Bool(u != 0),
                10 => GgufValue::Int(u as i64),
                11 => GgufValue::Int(u as i64),
                _ => GgufValue::Float(f64::from_bits(u)),
            }))
        }
        for _ in 0..n_kv {
            let key = String::from_utf8_lossy(&read_str(&mut rd)?).into_owned();
            let ty = u32_(rd(4)?);
            let v = match ty {
                8 => GgufValue::Str(read_str(&mut rd)?),
                9 => {
                    let ety = u32_(rd(4)?);
                    let n = u64_(rd(8)?);
                    if n > MAX_ARR {
                        return Err(Error::Invalid {
                            what: "GGUF array length",
                            value: n,
                            limit: MAX_ARR,
                        });
                    }
                    match ety {
                        8 => {
                            let mut v = Vec::with_capacity(n.min(1 << 20) as usize);
                            for _ in 0..n {
                                v.push(read_str(&mut rd)?);
                            }
                            GgufValue::StrArray(v)
                        }
                        6 => {
                            let mut v = Vec::with_capacity(n.min(1 << 20) as usize);
                            for _ in 0..n {
                                let b = rd(4)?;
                                v.push(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                            }
                            GgufValue::FloatArray(v)
                        }
                        _ => {
                            let mut v = Vec::with_capacity(n.min(1 << 20) as usize);
                            for _ in 0..n {
                                match scalar(&mut rd, ety)? {
                                    Some(GgufValue::Int(x)) => v.push(x),
                                    Some(_) => v.push(0),
                                    None => {
                                        return Err(Error::Unsupported {
                                            what: "GGUF array type",
                                            value: ety.to_string(),
                                        })
                                    }
                                }
                            }
                            GgufValue::IntArray(v)
                        }
                    }
                }
                t => scalar(&mut rd, t)?.ok_or(Error::Unsupported {
                    what: "GGUF value type",
                    value: t.to_string(),
                })?,
            };
            map.insert(key, v);
        }
        Ok(GgufMetadata { map })
    }
}

impl GgufMeta for GgufMetadata {
    fn get_str(&self, key: &str) -> Option<&str> {
        match self.map.get(key)? {
            GgufValue::Str(s) => std::str::from_utf8(s).ok(),
            _ => None,
        }
    }
    fn get_u32(&self, key: &str) -> Option<u32> {
        match self.map.get(key)? {
            GgufValue::Int(x) => u32::try_from(*x).ok(),
            _ => None,
        }
    }
    fn get_bool(&self, key: &str) -> Option<bool> {
        match self.map.get(key)? {
            GgufValue::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn get_string_array(&self, key: &str) -> Option<Vec<&[u8]>> {
        match self.map.get(key)? {
            GgufValue::StrArray(v) => Some(v.iter().map(|s| s.as_slice()).collect()),
            _ => None,
        }
    }
    fn get_i32_array(&self, key: &str) -> Option<Vec<i32>> {
        match self.map.get(key)? {
            GgufValue::IntArray(v) => Some(
                v.iter()
                    .map(|&x| x.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
                    .collect(),
            ),
            _ => None,
        }
    }
    fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        match self.map.get(key)? {
            GgufValue::FloatArray(v) => Some(v.clone()),
            _ => None,
        }
    }
}
