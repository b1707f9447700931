//! Why a sequence ends, and the one stop-string matcher.

/// Why generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `max_tokens` reached.
    MaxTokens,
    /// A stop token was sampled (not emitted).
    StopToken(u32),
    /// A stop string appeared in the text (cut off).
    StopString(String),
    /// The grammar's output is complete: nothing may follow.
    Grammar,
    /// The caller asked to stop (a callback returned `false`, a client
    /// left, Ctrl-C).
    Callback,
    /// The KV cache is full.
    ContextFull,
}

impl StopReason {
    /// Whether the answer was cut by the token budget or a full context
    /// (OpenAI's `length`), not ended (`stop`).
    pub fn is_length(&self) -> bool {
        matches!(self, StopReason::MaxTokens | StopReason::ContextFull)
    }

    /// OpenAI's `finish_reason`: `length` or `stop`.
    pub fn finish_reason(&self) -> &'static str {
        if self.is_length() {
            "length"
        } else {
            "stop"
        }
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of some
/// stop string: the bytes a streamer holds back until it knows whether a
/// stop string follows.
pub fn partial_stop(text: &str, stops: &[String]) -> usize {
    let mut best = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if i > best && text.ends_with(&s[..i]) {
                best = i;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::partial_stop;

    #[test]
    fn partial_stop_holds_a_stop_prefix() {
        let stops = vec!["<|im_end|>".to_string(), "\n\n".to_string()];
        assert_eq!(partial_stop("hello <|im", &stops), 4);
        assert_eq!(partial_stop("hello\n", &stops), 1);
        assert_eq!(partial_stop("hello", &stops), 0);
        assert_eq!(partial_stop("a<", &stops), 1);
    }
}
