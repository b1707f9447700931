//! The TokenizerBin section: a GBT1 tokenizer built from GGUF
//! `tokenizer.ggml.*` metadata or from a Hugging Face `tokenizer.json`.

use crate::Error;
use gpack_ingest::{Metadata, Source};
use gpack_tokenizer::{GgufMeta, TokenizerSpec};

/// Adapts ingest's metadata to the tokenizer's reader trait.
struct Meta<'a>(&'a Metadata);

impl GgufMeta for Meta<'_> {
    fn get_str(&self, key: &str) -> Option<&str> {
        self.0.get_str(key)
    }
    fn get_u32(&self, key: &str) -> Option<u32> {
        self.0.get_u32(key)
    }
    fn get_bool(&self, key: &str) -> Option<bool> {
        self.0.get_bool(key)
    }
    fn get_string_array(&self, key: &str) -> Option<Vec<&[u8]>> {
        Some(
            self.0
                .get_string_array(key)?
                .iter()
                .map(|s| s.as_bytes())
                .collect(),
        )
    }
    fn get_i32_array(&self, key: &str) -> Option<Vec<i32>> {
        if let Some(a) = self.0.get_i32_array(key) {
            return Some(a.to_vec());
        }
        let a = self.0.get_u32_array(key)?;
        a.iter().map(|&v| i32::try_from(v).ok()).collect()
    }
    fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        self.0.get_f32_array(key).map(<[f32]>::to_vec)
    }
}

/// A built GBT1 tokenizer.
pub struct Built {
    /// GBT1 bytes.
    pub bytes: Vec<u8>,
    /// Tokens.
    pub vocab_size: u64,
}

/// The tokenizer spec of a source, if it has a tokenizer.
pub fn spec(source: &Source) -> Result<Option<TokenizerSpec>, Error> {
    let err = Error::Tokenizer;
    if source.metadata.get_str("tokenizer.ggml.model").is_some() {
        return TokenizerSpec::from_gguf(&Meta(&source.metadata))
            .map(Some)
            .map_err(err);
    }
    let asset = |n: &str| {
        source
            .assets
            .iter()
            .find(|a| a.name == n)
            .map(|a| a.bytes.as_slice())
    };
    let Some(tj) = asset("tokenizer.json") else {
        return Ok(None);
    };
    let mut spec = TokenizerSpec::from_hf_json(tj, asset("tokenizer_config.json")).map_err(err)?;
    if spec.chat_template.is_none() {
        if let Some(t) = asset("chat_template.jinja") {
            spec.chat_template = Some(String::from_utf8_lossy(t).into_owned());
        }
    }
    Ok(Some(spec))
}

/// Builds the GBT1 bytes of a source, if it has a tokenizer.
pub fn build(source: &Source) -> Result<Option<Built>, Error> {
    let Some(spec) = spec(source)? else {
        return Ok(None);
    };
    let bytes = spec.to_gbt1()?;
    Ok(Some(Built {
        bytes,
        vocab_size: spec.tokens.len() as u64,
    }))
}
