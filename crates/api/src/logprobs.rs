//! `logprobs` / `top_logprobs` ([`gpack_runtime::decode::token_logprob`]:
//! the log-probabilities the decoding slot computes) in the shapes of the chat
//! (`choices[].logprobs.content[]`) and completions
//! (`choices[].logprobs.{tokens, token_logprobs, top_logprobs, text_offset}`)
//! endpoints.

use serde_json::{json, Map, Value};

pub use gpack_runtime::decode::{token_logprob, TokenLogprob, MAX_TOP_LOGPROBS};

/// A log-probability as JSON (−∞ as OpenAI's −9999.0: JSON has no infinity).
fn num(v: f32) -> Value {
    if v.is_finite() {
        json!(v)
    } else {
        json!(-9999.0)
    }
}

/// The chat shape of one token: `{token, logprob, bytes, top_logprobs}`;
/// `piece` gives a token's text and bytes.
pub fn chat_entry(t: &TokenLogprob, piece: &dyn Fn(u32) -> Vec<u8>) -> Value {
    let one = |id: u32, lp: f32| {
        let b = piece(id);
        json!({"token": String::from_utf8_lossy(&b), "logprob": num(lp), "bytes": b})
    };
    let mut v = one(t.id, t.logprob);
    v["top_logprobs"] = Value::Array(t.top.iter().map(|&(i, lp)| one(i, lp)).collect());
    v
}

/// The completions shape of tokens whose text starts at byte `offset` of
/// the choice's text.
pub fn completion_logprobs(
    ts: &[TokenLogprob],
    mut offset: usize,
    piece: &dyn Fn(u32) -> Vec<u8>,
) -> Value {
    let text = |id: u32| String::from_utf8_lossy(&piece(id)).into_owned();
    let mut offsets = Vec::with_capacity(ts.len());
    for t in ts {
        offsets.push(offset);
        offset += piece(t.id).len();
    }
    json!({
        "tokens": ts.iter().map(|t| text(t.id)).collect::<Vec<_>>(),
        "token_logprobs": ts.iter().map(|t| num(t.logprob)).collect::<Vec<_>>(),
        "top_logprobs": ts.iter().map(|t| {
            let mut m = Map::new();
            for &(i, lp) in &t.top {
                m.entry(text(i)).or_insert(num(lp));
            }
            Value::Object(m)
        }).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minus_infinity_is_openais_minus_9999() {
        let logits = [1.0f32, f32::NEG_INFINITY];
        assert_eq!(num(token_logprob(&logits, 1, 0).logprob), json!(-9999.0));
        assert_eq!(num(-0.5), json!(-0.5));
    }
}
