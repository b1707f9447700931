//! `logprobs` / `top_logprobs`: the log-probabilities of the sampled token
//! and of the most likely alternatives, from the log-softmax of the logits
//! the model computed (before penalties and grammar masks, as OpenAI
//! reports the model's distribution), in the shapes of the chat
//! (`choices[].logprobs.content[]`) and completions
//! (`choices[].logprobs.{tokens, token_logprobs, top_logprobs, text_offset}`)
//! endpoints.

use serde_json::{json, Map, Value};

/// Most alternatives per token a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// One generated token's log-probability and its best alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The sampled token.
    pub id: u32,
    /// Its log-probability.
    pub logprob: f32,
    /// The `k` most likely tokens, best first (ties by id).
    pub top: Vec<(u32, f32)>,
}

/// The log-probability of `id` and the `k` best tokens under
/// `log_softmax(logits)`.
pub fn token_logprob(logits: &[f32], id: u32, k: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&v| f64::from(v - max).exp()).sum();
    let lse = max + sum.ln() as f32;
    let mut top: Vec<(u32, f32)> = Vec::new();
    if k > 0 {
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as u32, v))
            .collect();
        let k = k.min(cand.len());
        let by = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, by);
            cand.truncate(k);
        }
        cand.sort_unstable_by(by);
        top = cand.into_iter().map(|(i, v)| (i, v - lse)).collect();
    }
    TokenLogprob {
        id,
        logprob: logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |v| v - lse),
        top,
    }
}

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
    fn log_softmax_and_top_k() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, f32::NEG_INFINITY];
        let t = token_logprob(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&v| f64::from(v).exp()).sum();
        assert!((f64::from(t.logprob) - (2.0 - z.ln())).abs() < 1e-6);
        // Best first, ties by id.
        assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        let p: f64 = logits.iter().map(|&v| (f64::from(v) - z.ln()).exp()).sum();
        assert!((p - 1.0).abs() < 1e-9);
        assert_eq!(token_logprob(&logits, 4, 0).top, vec![]);
        assert_eq!(num(token_logprob(&logits, 4, 0).logprob), json!(-9999.0));
    }
}
