//! Builder from GGUF `tokenizer.ggml.*` metadata, and SentencePiece merge derivation.
//!
//! The metadata comes through the small [`GgufMeta`] trait, implemented here for
//! `gpack-ingest`'s `Metadata` (the GGUF parser of the workspace) and implementable by any
//! other key-value store.

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

/// Longest piece (bytes) that [`derive_spm_merges`] derives merges into. The
/// derivation hashes both halves of every split, so a piece of `n` bytes costs
/// O(n^2); the cap bounds a crafted vocabulary's cost to O(cap) per byte of
/// it. Real SentencePiece vocabularies stay far below it (trainers cap pieces
/// at 16 characters by default; Gemma 3's 262,144 pieces are at most 93 bytes).
pub const MAX_MERGED_PIECE: usize = 1024;

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
    // Byte lengths some token has: a split whose half has none of them (and
    // is not one character) cannot resolve, so it is not hashed.
    let mut lens = vec![false; MAX_MERGED_PIECE + 1];
    for t in tokens {
        if let Some(l) = lens.get_mut(t.bytes.len()) {
            *l = true;
        }
    }
    let mut out: Vec<(f32, [u32; 3])> = Vec::new();
    for (id, t) in tokens.iter().enumerate() {
        // A piece longer than the cap gets no merge into it (see
        // MAX_MERGED_PIECE); a duplicate text gets none either (its later
        // twin owns the text).
        if t.bytes.len() > MAX_MERGED_PIECE || ids.get(t.bytes.as_slice()) != Some(&(id as u32)) {
            continue;
        }
        let Ok(s) = std::str::from_utf8(&t.bytes) else {
            continue;
        };
        let (first, last) = match (s.chars().next(), s.chars().next_back()) {
            (Some(f), Some(l)) => (f.len_utf8(), t.bytes.len() - l.len_utf8()),
            _ => continue,
        };
        for (k, _) in s.char_indices().skip(1) {
            if !(lens[k] || k == first) || !(lens[t.bytes.len() - k] || k == last) {
                continue;
            }
            let (a, b) = (&t.bytes[..k], &t.bytes[k..]);
            if let (Some(l), Some(r)) = (resolve(a), resolve(b)) {
                out.push((t.score, [l, r, id as u32]));
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
        let gpre = match kind {
            ModelKind::ByteLevelBpe => {
                PreTokenizer::from_gguf(meta.get_str("tokenizer.ggml.pre").unwrap_or("default"))?
            }
            ModelKind::SentencePieceBpe => GgufPre {
                pre: PreTokenizer::None,
                ignore_merges: false,
                add_bos: true,
            },
        };
        let pre = gpre.pre;
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
                lstrip: false,
                rstrip: false,
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
            eot: id("tokenizer.ggml.eot_token_id"),
            eom: id("tokenizer.ggml.eom_token_id"),
            // llama.cpp's defaults: BOS for SentencePiece and the Llama 3 names, not for
            // other BPE.
            add_bos: meta
                .get_bool("tokenizer.ggml.add_bos_token")
                .unwrap_or(gpre.add_bos),
            add_eos: meta
                .get_bool("tokenizer.ggml.add_eos_token")
                .unwrap_or(false),
            add_space_prefix: is_spm
                && meta
                    .get_bool("tokenizer.ggml.add_space_prefix")
                    .unwrap_or(true),
            byte_fallback: is_spm,
            ignore_merges: gpre.ignore_merges,
            chat_template: meta.get_str("tokenizer.chat_template").map(str::to_string),
            normalize_nfc: false,
        };
        spec.validate()?;
        Ok(spec)
    }
}

impl GgufMeta for gpack_ingest::Metadata {
    fn get_str(&self, key: &str) -> Option<&str> {
        gpack_ingest::Metadata::get_str(self, key)
    }
    fn get_u32(&self, key: &str) -> Option<u32> {
        gpack_ingest::Metadata::get_u32(self, key)
    }
    fn get_bool(&self, key: &str) -> Option<bool> {
        gpack_ingest::Metadata::get_bool(self, key)
    }
    fn get_string_array(&self, key: &str) -> Option<Vec<&[u8]>> {
        Some(
            gpack_ingest::Metadata::get_string_array(self, key)?
                .iter()
                .map(|s| s.as_bytes())
                .collect(),
        )
    }
    fn get_i32_array(&self, key: &str) -> Option<Vec<i32>> {
        if let Some(a) = gpack_ingest::Metadata::get_i32_array(self, key) {
            return Some(a.to_vec());
        }
        // Some writers store token types as u32.
        let a = self.get_u32_array(key)?;
        a.iter().map(|&v| i32::try_from(v).ok()).collect()
    }
    fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        gpack_ingest::Metadata::get_f32_array(self, key).map(<[f32]>::to_vec)
    }
}
