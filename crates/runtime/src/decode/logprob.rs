//! Log-probabilities of a sampled token and of the most likely
//! alternatives, from the log-softmax of the logits the model computed
//! (before penalties and grammar masks: the model's own distribution, as
//! OpenAI reports it). The server shapes them as OpenAI's JSON; `gpack run
//! --logprobs` prints them; Python returns them.

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
        assert_eq!(token_logprob(&logits, 4, 0).logprob, f32::NEG_INFINITY);
    }
}
