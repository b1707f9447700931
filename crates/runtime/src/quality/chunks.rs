//! llama-perplexity's chunking: the text's tokens (tokenized once, with
//! BOS when the model adds one) cut into `n_chunk = min(--chunks, n_tokens
//! / n_ctx)` whole chunks of `n_ctx`; each chunk runs in a fresh KV cache
//! with its first token replaced by BOS when the model adds one, and only
//! the predictions of its second half are scored: positions `n_ctx/2 ..
//! n_ctx − 2`, each against the token after it.

use super::error::QualityError;
use crate::{Logits, Model, State};

/// How a text's tokens are cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunking {
    /// Tokens per chunk.
    pub n_ctx: usize,
    /// Chunks evaluated.
    pub n_chunk: usize,
}

impl Chunking {
    /// The chunks of `n_tokens` tokens at context `n_ctx`, at most
    /// `max_chunks` of them. Fails when the text is shorter than two
    /// contexts (llama-perplexity's rule) or the context scores nothing.
    pub fn new(
        n_tokens: usize,
        n_ctx: usize,
        max_chunks: Option<usize>,
    ) -> Result<Chunking, QualityError> {
        if n_ctx < 4 {
            return Err(QualityError::TinyContext(n_ctx));
        }
        if n_tokens < 2 * n_ctx {
            return Err(QualityError::TooShort { n_tokens, n_ctx });
        }
        let all = n_tokens / n_ctx;
        Ok(Chunking {
            n_ctx,
            n_chunk: max_chunks.map_or(all, |m| m.min(all)),
        })
    }

    /// The first scored position (`n_ctx / 2`).
    pub fn first(&self) -> usize {
        self.n_ctx / 2
    }

    /// Scored positions per chunk.
    pub fn scored(&self) -> usize {
        super::base::rows_per_chunk(self.n_ctx)
    }
}

/// Runs one chunk (`tokens`, `n_ctx` of them) from an empty cache in
/// `state` (its first token replaced by `bos` when given), `n_batch`
/// tokens per forward, and returns the logits of the scored positions
/// (`[scored][n_vocab]`, rows `n_ctx/2 .. n_ctx − 1`). The first half runs
/// without the output head.
pub fn chunk_logits(
    model: &Model<'_>,
    state: &mut State,
    tokens: &[u32],
    bos: Option<u32>,
    n_batch: usize,
) -> Result<Vec<f32>, QualityError> {
    let n_ctx = tokens.len();
    let first = n_ctx / 2;
    let scored = super::base::rows_per_chunk(n_ctx);
    let nv = model.config.n_vocab;
    let mut input = tokens.to_vec();
    if let Some(b) = bos {
        input[0] = b;
    }
    let n_batch = n_batch.max(1);
    state.truncate(0);
    for part in input[..first].chunks(n_batch) {
        model.forward(state, part, Logits::None)?;
    }
    let mut out = Vec::with_capacity(scored * nv);
    // The last position's prediction has no token to score.
    for part in input[first..n_ctx - 1].chunks(n_batch) {
        let l = model.forward(state, part, Logits::All)?;
        out.extend_from_slice(l);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunking_follows_llama_perplexity() {
        let c = Chunking::new(2100, 512, None).unwrap();
        assert_eq!((c.n_chunk, c.first(), c.scored()), (4, 256, 255));
        assert_eq!(Chunking::new(2100, 512, Some(2)).unwrap().n_chunk, 2);
        assert_eq!(Chunking::new(2100, 512, Some(9)).unwrap().n_chunk, 4);
        assert!(matches!(
            Chunking::new(1023, 512, None),
            Err(QualityError::TooShort { .. })
        ));
        assert!(matches!(
            Chunking::new(100, 3, None),
            Err(QualityError::TinyContext(3))
        ));
        assert_eq!(Chunking::new(64, 5, None).unwrap().scored(), 2);
    }
}
