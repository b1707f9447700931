//! `/v1/embeddings`: each input's final hidden states (after the output
//! norm, as transformers' last `hidden_states`) pooled — mean over the
//! positions, or the last position when the model's metadata says so
//! (`{arch}.pooling_type` = 3, llama.cpp's "last") — and L2-normalized.
//!
//! The engine runs embedding inputs between its batched steps, at most one
//! prefill chunk per step, so a long input delays the decoding slots by one
//! bounded chunk at a time, as a prompt's prefill does.

use crate::api::{self, ApiError};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

/// Most inputs per request.
pub const MAX_INPUTS: usize = 64;

/// How a sequence's hidden states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Mean over positions.
    Mean,
    /// The last position.
    Last,
}

impl Pooling {
    /// From the model's metadata (`{arch}.pooling_type`: 3 = last; mean
    /// otherwise, also when absent).
    pub fn of(w: &dyn gpack_runtime::WeightSource) -> Pooling {
        let arch = w.meta_str("general.architecture").unwrap_or("");
        match w.meta_u64(&format!("{arch}.pooling_type")) {
            Some(3) => Pooling::Last,
            _ => Pooling::Mean,
        }
    }

    /// The name reported by `/v1/models`.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Last => "last",
        }
    }
}

/// One embedding request for the engine.
#[derive(Debug)]
pub struct EmbedJob {
    /// Token ids of each input (each non-empty, within the context).
    pub inputs: Vec<Vec<u32>>,
    /// Pooling.
    pub pooling: Pooling,
    /// The vectors, in input order, or the error.
    pub reply: UnboundedSender<Result<Vec<Vec<f32>>, String>>,
}

/// A pooled vector in progress.
#[derive(Debug, Default)]
pub struct Pool {
    sum: Vec<f64>,
    last: Vec<f32>,
    n: usize,
}

impl Pool {
    /// Adds `rows` (`[k][d]`) of hidden states.
    pub fn add(&mut self, rows: &[f32], d: usize) {
        if self.sum.is_empty() {
            self.sum = vec![0.0; d];
        }
        for r in rows.chunks_exact(d) {
            self.sum
                .iter_mut()
                .zip(r)
                .for_each(|(s, &x)| *s += f64::from(x));
            self.n += 1;
        }
        if let Some(r) = rows.chunks_exact(d).last() {
            self.last = r.to_vec();
        }
    }

    /// The pooled, L2-normalized vector.
    pub fn finish(&self, p: Pooling) -> Vec<f32> {
        let mut v: Vec<f64> = match p {
            Pooling::Mean => self.sum.iter().map(|s| s / self.n.max(1) as f64).collect(),
            Pooling::Last => self.last.iter().map(|&x| f64::from(x)).collect(),
        };
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v.into_iter().map(|x| x as f32).collect()
    }
}

/// An `input`: text, texts, token ids, or lists of token ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Debug, Deserialize)]
struct Request {
    input: Input,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    dimensions: Option<Value>,
}

/// One checked input.
#[derive(Debug, PartialEq, Eq)]
pub enum EmbedInput {
    /// Text to encode (with BOS).
    Text(String),
    /// Token ids, each below the vocabulary size.
    Tokens(Vec<u32>),
}

/// A checked `/v1/embeddings` body.
#[derive(Debug)]
pub struct EmbedRequest {
    /// The inputs.
    pub inputs: Vec<EmbedInput>,
    /// `encoding_format: "base64"`: each vector as the base64 of its
    /// little-endian f32 bytes (the `openai` client's default).
    pub base64: bool,
}

/// `v` as OpenAI's base64 embedding: little-endian f32 bytes, standard
/// alphabet with padding.
pub fn base64_f32(v: &[f32]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[(n >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The inputs of a `/v1/embeddings` body (or the 400 naming what is wrong).
pub fn parse(body: &[u8], vocab_size: u32) -> Result<EmbedRequest, ApiError> {
    let r: Request = api::parse(body)?;
    let base64 = match r.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(f) => {
            return Err(ApiError::invalid(
                format!("encoding_format {f:?} is not float or base64"),
                Some("encoding_format"),
            ))
        }
    };
    if r.dimensions.is_some_and(|d| !d.is_null()) {
        return Err(ApiError::invalid(
            "dimensions is not supported: the model's hidden size is returned",
            Some("dimensions"),
        ));
    }
    let inputs: Vec<EmbedInput> = match r.input {
        Input::Text(t) => vec![EmbedInput::Text(t)],
        Input::Texts(v) => v.into_iter().map(EmbedInput::Text).collect(),
        Input::Tokens(t) => vec![EmbedInput::Tokens(t)],
        Input::TokenLists(v) => v.into_iter().map(EmbedInput::Tokens).collect(),
    };
    if inputs.is_empty() || inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            format!("input must have 1 to {MAX_INPUTS} items"),
            Some("input"),
        ));
    }
    for i in &inputs {
        match i {
            EmbedInput::Text(t) if t.is_empty() => {
                return Err(ApiError::invalid("an input is empty", Some("input")))
            }
            EmbedInput::Tokens(t) if t.is_empty() => {
                return Err(ApiError::invalid("an input is empty", Some("input")))
            }
            EmbedInput::Tokens(t) => {
                if let Some(bad) = t.iter().find(|&&x| x >= vocab_size) {
                    return Err(ApiError::invalid(
                        format!("token id {bad} is outside the vocabulary of {vocab_size}"),
                        Some("input"),
                    ));
                }
            }
            EmbedInput::Text(_) => {}
        }
    }
    Ok(EmbedRequest { inputs, base64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_last_pooling_are_normalized() {
        let mut p = Pool::default();
        p.add(&[1.0, 0.0, 3.0, 4.0], 2);
        p.add(&[2.0, 2.0], 2);
        // Mean of (1,0), (3,4), (2,2) = (2,2) → (1/√2, 1/√2).
        let m = p.finish(Pooling::Mean);
        assert!((m[0] - 0.5f32.sqrt()).abs() < 1e-6 && (m[1] - 0.5f32.sqrt()).abs() < 1e-6);
        let l = Pool::finish(&p, Pooling::Last);
        assert!((l[0] - 0.5f32.sqrt()).abs() < 1e-6);
        let mut q = Pool::default();
        q.add(&[3.0, 4.0], 2);
        assert_eq!(q.finish(Pooling::Last), vec![0.6, 0.8]);
    }

    #[test]
    fn inputs_are_checked() {
        let p = |b: &str| parse(b.as_bytes(), 100).map(|r| r.inputs);
        assert!(
            parse(br#"{"input": "a", "encoding_format": "base64"}"#, 100)
                .unwrap()
                .base64
        );
        assert_eq!(
            p(r#"{"input": "hi"}"#).unwrap(),
            vec![EmbedInput::Text("hi".into())]
        );
        assert_eq!(p(r#"{"input": [[1, 2], [3]]}"#).unwrap().len(), 2);
        assert_eq!(p(r#"{"input": [100]}"#).unwrap_err().param, Some("input"));
        assert_eq!(p(r#"{"input": ""}"#).unwrap_err().param, Some("input"));
        assert_eq!(p(r#"{"input": []}"#).unwrap_err().param, Some("input"));
        let many = format!(r#"{{"input": [{}]}}"#, vec!["\"a\""; 65].join(","));
        assert_eq!(p(&many).unwrap_err().param, Some("input"));
        assert_eq!(
            p(r#"{"input": "a", "encoding_format": "hex"}"#)
                .unwrap_err()
                .param,
            Some("encoding_format")
        );
        // 1.0 is 00 00 80 3f, -2.0 is 00 00 00 c0 (Python's base64 of the
        // struct.pack("<ff") bytes).
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(
            p(r#"{"input": "a", "dimensions": 8}"#).unwrap_err().param,
            Some("dimensions")
        );
    }
}
