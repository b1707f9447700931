//! A tokenized text cut as llama.cpp's llama-imatrix and llama-perplexity
//! cut it (`tools/imatrix/imatrix.cpp` `compute_imatrix`): chunks of `n_ctx`
//! tokens from the start, the last partial one dropped, each evaluated from
//! an empty cache, its first token replaced by BOS when the tokenizer adds
//! one. At least two chunks' worth of tokens are required, as there.

/// Why a text cannot be cut into chunks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// Fewer than `2 · n_ctx` tokens.
    #[error("the text is {tokens} tokens; a context of {n_ctx} needs at least {} (two chunks)", 2 * n_ctx)]
    TooShort {
        /// Tokens in the text.
        tokens: usize,
        /// The chunk length.
        n_ctx: usize,
    },
    /// A chunk length of zero.
    #[error("the chunk length (context) must be at least 1")]
    Empty,
}

/// The chunks of `tokens` (the whole text, as encoded with special tokens)
/// of `n_ctx` tokens each, at most `max` of them; `bos`: the BOS id when
/// the model's tokenizer adds one (it replaces each chunk's first token).
pub fn text_chunks(
    tokens: &[u32],
    n_ctx: usize,
    bos: Option<u32>,
    max: Option<usize>,
) -> Result<Vec<Vec<u32>>, ChunkError> {
    if n_ctx == 0 {
        return Err(ChunkError::Empty);
    }
    if tokens.len() < 2 * n_ctx {
        return Err(ChunkError::TooShort {
            tokens: tokens.len(),
            n_ctx,
        });
    }
    let n = (tokens.len() / n_ctx).min(max.unwrap_or(usize::MAX));
    Ok(tokens
        .chunks_exact(n_ctx)
        .take(n)
        .map(|c| {
            let mut c = c.to_vec();
            if let Some(b) = bos {
                c[0] = b;
            }
            c
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_whole_with_bos_first() {
        let t: Vec<u32> = (10..31).collect();
        let c = text_chunks(&t, 5, Some(1), None).unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!(c[1], [1, 16, 17, 18, 19]);
        assert_eq!(
            text_chunks(&t, 5, None, Some(2)).unwrap()[1],
            [15, 16, 17, 18, 19]
        );
        assert_eq!(
            text_chunks(&t, 11, None, None),
            Err(ChunkError::TooShort {
                tokens: 21,
                n_ctx: 11
            })
        );
    }
}
