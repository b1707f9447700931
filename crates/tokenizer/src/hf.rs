//! Builder from a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`).
//!
//! Supported: `model.type = "BPE"` with either the byte-level pipeline (ByteLevel
//! pre-tokenizer, optionally after `Digits(individual_digits)`, or after the Split steps of
//! one of [`crate::pretok::regex_of`]'s pre-tokenizers: Llama 3, Qwen 2, o200k, DeepSeek...)
//! or the SentencePiece pipeline (`Replace(" ", "▁")` normalizer, optional
//! `Prepend("▁")`, byte fallback). Anything else is `Error::Unsupported`, not a silent
//! approximation. The result reproduces HF `tokenizers` (merge ranks, merge-queue rule).

use crate::error::{Error, Result};
use crate::spec::*;
use serde_json::Value;
use std::collections::HashMap;

fn json(what: &'static str, b: &[u8]) -> Result<Value> {
    serde_json::from_slice(b).map_err(|source| Error::Json { what, source })
}

fn unsupported(what: &'static str, v: &Value) -> Error {
    let mut s = v.to_string();
    s.truncate(200);
    Error::Unsupported { what, value: s }
}

/// Pre-tokenizer and model kind of a tokenizer.json pipeline.
fn classify(j: &Value) -> Result<(ModelKind, PreTokenizer, bool, bool)> {
    let model = &j["model"];
    let byte_fallback = model["byte_fallback"].as_bool().unwrap_or(false);
    let norm = &j["normalizer"];
    let pre = &j["pre_tokenizer"];
    let is_replace_space = |n: &Value| {
        n["type"] == "Replace" && n["pattern"]["String"] == " " && n["content"] == "\u{2581}"
    };
    let is_prepend = |n: &Value| n["type"] == "Prepend" && n["prepend"] == "\u{2581}";
    // SentencePiece pipelines.
    let mut spm = None;
    if is_replace_space(norm) {
        spm = Some(false);
    } else if norm["type"] == "Sequence" {
        let v = norm["normalizers"].as_array().cloned().unwrap_or_default();
        if v.len() == 2 && is_prepend(&v[0]) && is_replace_space(&v[1]) {
            spm = Some(true);
        } else if v.len() == 1 && is_replace_space(&v[0]) {
            spm = Some(false);
        }
    }
    if pre["type"] == "Metaspace" && norm.is_null() {
        if pre["split"].as_bool() == Some(true) {
            return Err(unsupported("Metaspace split", pre));
        }
        let scheme = pre["prepend_scheme"].as_str().unwrap_or("always");
        spm = Some(scheme != "never");
    }
    if let Some(prefix) = spm {
        let pre_ok = pre.is_null()
            || pre["type"] == "Metaspace"
            || (pre["type"] == "Split"
                && pre["pattern"]["String"] == " "
                && pre["behavior"] == "MergedWithPrevious");
        if !pre_ok {
            return Err(unsupported("SentencePiece pre-tokenizer", pre));
        }
        return Ok((
            ModelKind::SentencePieceBpe,
            PreTokenizer::None,
            prefix,
            false,
        ));
    }
    let nfc = norm["type"] == "NFC";
    if !norm.is_null() && !nfc {
        return Err(unsupported("normalizer", norm));
    }
    let _ = byte_fallback;
    let is_bl = |p: &Value| p["type"] == "ByteLevel";
    let p = if is_bl(pre) {
        if pre["use_regex"].as_bool() == Some(false) {
            PreTokenizer::None
        } else {
            PreTokenizer::Gpt2
        }
    } else if pre["type"] == "Sequence" {
        let v = pre["pretokenizers"].as_array().cloned().unwrap_or_default();
        match v.as_slice() {
            [d, b]
                if d["type"] == "Digits"
                    && d["individual_digits"] == true
                    && is_bl(b)
                    && b["use_regex"] != false =>
            {
                PreTokenizer::Smollm
            }
            // Split steps (DeepSeek: several, and `Digits`), then a ByteLevel that does not
            // split: the pre-tokenizer whose regex list is exactly these steps.
            [steps @ .., b] if !steps.is_empty() && is_bl(b) && b["use_regex"] == false => {
                let mut res = Vec::with_capacity(steps.len());
                for s in steps {
                    if s["type"] == "Digits" && s["individual_digits"] == true {
                        res.push(crate::pretok::DIGITS);
                        continue;
                    }
                    if s["type"] != "Split" {
                        return Err(unsupported("pre-tokenizer step", s));
                    }
                    if s["behavior"] != "Isolated" || s["invert"] == true {
                        return Err(unsupported("Split behavior", s));
                    }
                    match s["pattern"]["Regex"].as_str() {
                        Some(re) => res.push(re),
                        None => return Err(unsupported("Split pattern", s)),
                    }
                }
                (1..=u8::MAX)
                    .filter_map(PreTokenizer::from_u8)
                    .find(|&p| crate::pretok::regex_of(p) == res.as_slice())
                    .ok_or_else(|| unsupported("Split regex", pre))?
            }
            _ => return Err(unsupported("pre-tokenizer", pre)),
        }
    } else {
        return Err(unsupported("pre-tokenizer", pre));
    };
    Ok((ModelKind::ByteLevelBpe, p, false, nfc))
}

fn token_str(v: &Value) -> Option<&str> {
    v.as_str().or_else(|| v["content"].as_str())
}

impl TokenizerSpec {
    /// Build from the bytes of `tokenizer.json` and, optionally, `tokenizer_config.json`
    /// (for the chat template and the BOS/EOS/PAD/UNK names).
    pub fn from_hf_json(
        tokenizer_json: &[u8],
        tokenizer_config_json: Option<&[u8]>,
    ) -> Result<Self> {
        let j = json("tokenizer.json", tokenizer_json)?;
        let cfg = match tokenizer_config_json {
            Some(b) => json("tokenizer_config.json", b)?,
            None => Value::Null,
        };
        let model = &j["model"];
        if model["type"] != "BPE" {
            return Err(unsupported("model type", &model["type"]));
        }
        if !model["continuing_subword_prefix"]
            .as_str()
            .unwrap_or("")
            .is_empty()
            || !model["end_of_word_suffix"]
                .as_str()
                .unwrap_or("")
                .is_empty()
        {
            return Err(unsupported("subword affixes", model));
        }
        let (kind, pre, prefix, nfc) = classify(&j)?;
        let vocab = model["vocab"].as_object().ok_or(Error::Missing {
            what: "model.vocab",
        })?;
        let added = j["added_tokens"].as_array().cloned().unwrap_or_default();
        let mut n: u64 = 0;
        for v in vocab.values() {
            n = n.max(
                v.as_u64()
                    .ok_or(Error::BadEntry {
                        what: "vocab id",
                        index: 0,
                    })?
                    .saturating_add(1),
            );
        }
        for a in &added {
            n = n.max(
                a["id"]
                    .as_u64()
                    .ok_or(Error::BadEntry {
                        what: "added token id",
                        index: 0,
                    })?
                    .saturating_add(1),
            );
        }
        if n == 0 || n > crate::gbt1::MAX_VOCAB as u64 {
            return Err(Error::Invalid {
                what: "vocab size",
                value: n,
                limit: crate::gbt1::MAX_VOCAB as u64,
            });
        }
        let mut tokens = vec![SpecToken::normal(Vec::new(), TokenType::Unused, 0.0); n as usize];
        let unk_name = model["unk_token"].as_str();
        for (text, v) in vocab {
            let id = v.as_u64().unwrap_or(0) as usize;
            let t = &mut tokens[id];
            t.ty = TokenType::Normal;
            match kind {
                ModelKind::ByteLevelBpe => {
                    t.bytes = unmap_byte_level(text).unwrap_or_else(|| text.as_bytes().to_vec());
                }
                ModelKind::SentencePieceBpe => {
                    t.bytes = text.as_bytes().to_vec();
                    if parse_byte_token(text.as_bytes()).is_some() {
                        t.ty = TokenType::Byte;
                    }
                }
            }
            if Some(text.as_str()) == unk_name {
                t.ty = TokenType::Unknown;
            }
        }
        for a in &added {
            let id = a["id"].as_u64().unwrap_or(0) as usize;
            let content = a["content"].as_str().ok_or(Error::BadEntry {
                what: "added token content",
                index: id as u64,
            })?;
            let special = a["special"].as_bool().unwrap_or(false);
            if a["single_word"].as_bool() == Some(true) {
                return Err(unsupported("added token single_word", a));
            }
            let t = &mut tokens[id];
            t.lstrip = a["lstrip"].as_bool().unwrap_or(false);
            t.rstrip = a["rstrip"].as_bool().unwrap_or(false);
            t.bytes = content.as_bytes().to_vec();
            t.split = true;
            t.special = special;
            t.ty = if Some(content) == unk_name {
                TokenType::Unknown
            } else if special {
                TokenType::Control
            } else {
                TokenType::UserDefined
            };
        }
        // Merge list: ["a", "b"] pairs or "a b" strings, spelled as the vocab keys.
        let merges_v = model["merges"].as_array().cloned().unwrap_or_default();
        let mut merges = Vec::with_capacity(merges_v.len());
        let lookup: HashMap<&str, u32> = vocab
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_u64().unwrap_or(0) as u32))
            .collect();
        for (i, m) in merges_v.iter().enumerate() {
            let (a, b) = match m {
                Value::Array(p) if p.len() == 2 => {
                    (p[0].as_str().unwrap_or(""), p[1].as_str().unwrap_or(""))
                }
                Value::String(s) => s.split_once(' ').ok_or(Error::BadEntry {
                    what: "merge",
                    index: i as u64,
                })?,
                _ => {
                    return Err(Error::BadEntry {
                        what: "merge",
                        index: i as u64,
                    })
                }
            };
            let l = *lookup.get(a).ok_or(Error::BadEntry {
                what: "merge left token",
                index: i as u64,
            })?;
            let r = *lookup.get(b).ok_or(Error::BadEntry {
                what: "merge right token",
                index: i as u64,
            })?;
            let joined = format!("{a}{b}");
            let m = *lookup.get(joined.as_str()).ok_or(Error::BadEntry {
                what: "merged token",
                index: i as u64,
            })?;
            merges.push([l, r, m]);
        }
        let find_name = |v: &Value| -> Option<u32> {
            let s = token_str(v)?;
            added
                .iter()
                .find(|a| a["content"].as_str() == Some(s))
                .and_then(|a| a["id"].as_u64())
                .map(|x| x as u32)
                .or_else(|| lookup.get(s).copied())
        };
        let mut bos = find_name(&cfg["bos_token"]);
        let mut eos = find_name(&cfg["eos_token"]);
        let pad = find_name(&cfg["pad_token"]);
        let unk =
            find_name(&cfg["unk_token"]).or_else(|| unk_name.and_then(|s| lookup.get(s).copied()));
        // BOS/EOS addition comes from the post-processor, as in HF.
        let (mut add_bos, mut add_eos) = (false, false);
        let mut pps = vec![j["post_processor"].clone()];
        if j["post_processor"]["type"] == "Sequence" {
            pps = j["post_processor"]["processors"]
                .as_array()
                .cloned()
                .unwrap_or_default();
        }
        for pp in &pps {
            if pp["type"] == "TemplateProcessing" {
                let single = pp["single"].as_array().cloned().unwrap_or_default();
                let special_id = |item: &Value| -> Option<u32> {
                    let name = item["SpecialToken"]["id"].as_str()?;
                    pp["special_tokens"][name]["ids"][0]
                        .as_u64()
                        .map(|x| x as u32)
                };
                if let Some(id) = single.first().and_then(special_id) {
                    add_bos = true;
                    bos = Some(id);
                }
                if single.len() > 1 {
                    if let Some(id) = single.last().and_then(special_id) {
                        add_eos = true;
                        eos = Some(id);
                    }
                }
            }
        }
        let chat_template = match &cfg["chat_template"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(v) => v
                .iter()
                .find(|t| t["name"] == "default")
                .and_then(|t| t["template"].as_str())
                .map(str::to_string),
            _ => None,
        };
        let spec = TokenizerSpec {
            model: kind,
            pre,
            tokens,
            merges,
            merge_ranks: None,
            merge_mode: MergeMode::HfQueue,
            bos,
            eos,
            pad,
            unk,
            // tokenizer.json has no end-of-turn key (the chat markers are
            // found by name, `Tokenizer::stop_ids`).
            eot: None,
            eom: None,
            add_bos,
            add_eos,
            add_space_prefix: prefix,
            byte_fallback: model["byte_fallback"].as_bool().unwrap_or(false),
            ignore_merges: model["ignore_merges"].as_bool().unwrap_or(false),
            chat_template,
            normalize_nfc: nfc,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Switch a SentencePiece-style spec to SentencePiece / llama.cpp semantics: scores are
    /// taken as given (or, for a tokenizer.json, as minus the first rank that produces each
    /// token, which is the order HF's SentencePiece converters write), the merges are derived
    /// from them as for GGUF, and ties go to the leftmost pair. No-op for byte-level BPE.
    pub fn into_sentencepiece_semantics(mut self, scores_from_ranks: bool) -> Self {
        if self.model != ModelKind::SentencePieceBpe {
            return self;
        }
        if scores_from_ranks {
            let mut first = vec![u32::MAX; self.tokens.len()];
            for (r, m) in self.merges.iter().enumerate() {
                let f = &mut first[m[2] as usize];
                *f = (*f).min(r as u32);
            }
            for (t, f) in self.tokens.iter_mut().zip(first) {
                // Single characters and specials never come out of a merge: the highest
                // score, so that a merge into them (if any) goes first, as a score of 0 does.
                t.score = if f == u32::MAX {
                    0.0
                } else {
                    -(f as f32) - 1.0
                };
            }
        }
        let (merges, ranks) = crate::gguf::derive_spm_merges(&self.tokens);
        self.merges = merges;
        self.merge_ranks = Some(ranks);
        self.merge_mode = MergeMode::BestFirst;
        self
    }
}
