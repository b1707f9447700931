//! Constrained decoding: `response_format` (`json_object`, `json_schema`)
//! and the `grammar` extension (llguidance's Lark-like syntax), turned into
//! a token mask over the model's vocabulary before each sampled token.
//!
//! The grammar engine is [llguidance]: this file only (1) gives it the
//! model's vocabulary (each token's bytes; special tokens as `0xFF` + name,
//! so that no grammar text can produce them), (2) compiles a request's
//! constraint into a [`Matcher`] (on the blocking pool, before the job
//! reaches the engine: a schema the engine refuses is a 400 at once), and
//! (3) applies a computed mask to a row of logits.
//!
//! The engine computes the masks of a step on a thread of its own while the
//! batched forward pass runs ([`crate::engine`]), so a slow mask delays
//! only its own slot's next token by the time it exceeds the forward pass.

use crate::api::ApiError;
use gpack_tokenizer::Tokenizer;
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{self, SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

/// Largest schema or grammar accepted, in bytes of its JSON / text (the
/// compiled grammar is further bounded by [`ParserLimits`]).
pub const MAX_CONSTRAINT_BYTES: usize = 64 * 1024;

/// What a request constrains its output to.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// `response_format: {"type": "json_object"}`: any JSON object.
    JsonObject,
    /// `response_format: {"type": "json_schema", "json_schema": {"schema": ...}}`.
    JsonSchema(Value),
    /// The `grammar` extension: a grammar in llguidance's Lark syntax.
    Lark(String),
    /// `tool_choice` required / named: the grammar of a call
    /// ([`crate::tools::grammar`]), with the tools' parameter schemas.
    ToolCall(String),
}

impl Constraint {
    /// The request parameter this constraint came from (for errors).
    pub fn param(&self) -> &'static str {
        match self {
            Constraint::Lark(_) => "grammar",
            Constraint::ToolCall(_) => "tools",
            _ => "response_format",
        }
    }
}

/// The vocabulary as llguidance sees it, with the real tokenizer for the
/// (rare) re-tokenization it asks for.
struct Vocab {
    trie: TokTrie,
    tok: Tokenizer<'static>,
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        self.tok.encode(&String::from_utf8_lossy(s), false)
    }
}

/// A request's compiled constraint, advanced token by token (llguidance's
/// matcher, which has no `Debug`).
pub struct Guide(pub Matcher);

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guide")
    }
}

impl std::ops::Deref for Guide {
    type Target = Matcher;
    fn deref(&self) -> &Matcher {
        &self.0
    }
}

impl std::ops::DerefMut for Guide {
    fn deref_mut(&mut self) -> &mut Matcher {
        &mut self.0
    }
}

/// Compiles constraints for one model (its vocabulary, built on first use).
pub struct Grammars {
    tok: Tokenizer<'static>,
    eos: u32,
    factory: OnceLock<Result<ParserFactory, String>>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Grammars")
    }
}

/// JSON output options when the schema gives none (`x-guidance`): no free
/// whitespace (a small model can otherwise emit newlines until
/// `max_tokens`), and the separators models write by habit.
fn json_defaults() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

impl Grammars {
    /// For `tok`; `eos` is the token the grammar allows once complete (the
    /// engine also accepts the model's other stop tokens there).
    pub fn new(tok: Tokenizer<'static>, eos: u32) -> Self {
        Grammars {
            tok,
            eos,
            factory: OnceLock::new(),
        }
    }

    /// The token a complete output ends with.
    pub fn end_token(&self) -> u32 {
        self.eos
    }

    fn factory(&self) -> Result<&ParserFactory, ApiError> {
        self.factory
            .get_or_init(|| {
                let tok = self.tok;
                let words: Vec<Vec<u8>> = (0..tok.vocab_size())
                    .map(|id| {
                        if tok.is_special(id) {
                            let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                            w.extend_from_slice(tok.token_text(id).unwrap_or_default().as_bytes());
                            w
                        } else {
                            tok.token_piece(id).into_owned()
                        }
                    })
                    .collect();
                let mut info = TokRxInfo::new(tok.vocab_size(), self.eos);
                info.tok_bos = tok.bos();
                let trie = TokTrie::from(&info, &words);
                let env: TokEnv = Arc::new(Vocab { trie, tok });
                let mut f = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
                f.quiet();
                *f.limits_mut() = ParserLimits {
                    max_grammar_size: 200_000,
                    ..ParserLimits::default()
                };
                Ok(f)
            })
            .as_ref()
            .map_err(|e| {
                ApiError::internal(format!(
                    "the grammar engine could not load this vocabulary: {e}"
                ))
            })
    }

    /// Compiles `c` into a matcher at the start of the output, or the 400
    /// that says why the engine refuses it.
    pub fn compile(&self, c: &Constraint) -> Result<Guide, ApiError> {
        let param = Some(c.param());
        let grammar = match c {
            Constraint::JsonObject => TopLevelGrammar::from_json_schema(
                json!({"type": "object", "x-guidance": json_defaults()}),
            ),
            Constraint::JsonSchema(schema) => {
                let mut schema = schema.clone();
                let Some(obj) = schema.as_object_mut() else {
                    return Err(ApiError::invalid(
                        "response_format.json_schema.schema must be a JSON object",
                        param,
                    ));
                };
                obj.entry("x-guidance").or_insert_with(json_defaults);
                TopLevelGrammar::from_json_schema(schema)
            }
            Constraint::Lark(g) | Constraint::ToolCall(g) => {
                if g.trim().is_empty() {
                    return Err(ApiError::invalid("grammar must not be empty", param));
                }
                TopLevelGrammar::from_lark(g.clone())
            }
        };
        let factory = self.factory()?;
        let parser = factory.create_parser(grammar).map_err(|e| {
            ApiError::invalid(
                format!("the grammar engine refused this {}: {e}", what(c)),
                param,
            )
        })?;
        let m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            return Err(ApiError::invalid(
                format!("the grammar engine refused this {}: {e}", what(c)),
                param,
            ));
        }
        Ok(Guide(m))
    }
}

fn what(c: &Constraint) -> &'static str {
    match c {
        Constraint::Lark(_) => "grammar",
        Constraint::ToolCall(_) => "tool call grammar (from the tools' parameter schemas)",
        _ => "JSON schema",
    }
}

/// Sets every logit the mask forbids to −∞. `stop` tokens (the model's
/// end-of-turn set) are allowed exactly when the grammar's end token is,
/// i.e. when the output is complete. The model's rows may be longer than
/// the tokenizer's vocabulary (padding): those entries are forbidden.
pub fn apply_mask(logits: &mut [f32], mask: &SimpleVob, eos: u32, stop: &[u32]) {
    let end_ok = allowed(mask, eos, eos, &[]);
    let kept: Vec<(usize, f32)> = stop
        .iter()
        .filter_map(|&t| logits.get(t as usize).map(|&v| (t as usize, v)))
        .collect();
    let n = mask.len().min(logits.len());
    for (&w, chunk) in mask.as_slice().iter().zip(logits[..n].chunks_mut(32)) {
        match w {
            u32::MAX => {}
            // Most words of a grammar's mask forbid all 32 tokens.
            0 => chunk.fill(f32::NEG_INFINITY),
            w => {
                for (b, l) in chunk.iter_mut().enumerate() {
                    if w & (1 << b) == 0 {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
    logits[n..].fill(f32::NEG_INFINITY);
    for (t, v) in kept {
        logits[t] = if end_ok { v } else { f32::NEG_INFINITY };
    }
}

/// Whether `tok` is allowed by `mask` (a stop token as the end token).
pub fn allowed(mask: &SimpleVob, tok: u32, eos: u32, stop: &[u32]) -> bool {
    let ok = |t: u32| (t as usize) < mask.len() && mask.is_allowed(t);
    if stop.contains(&tok) {
        return ok(eos);
    }
    ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny Qwen2 fixture's tokenizer (a real byte-level BPE with
    /// special tokens), leaked for the `'static` the server uses.
    fn tok() -> Tokenizer<'static> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let t = gpack_tokenizer::load_any(&root.join("testdata/tiny/qwen2/hf")).unwrap();
        let t: &'static gpack_tokenizer::LoadedTokenizer = Box::leak(Box::new(t));
        t.tokenizer().unwrap()
    }

    #[test]
    fn a_valid_answer_passes_every_mask_and_others_are_cut() {
        let tok = tok();
        let stop = tok.stop_ids();
        let g = Grammars::new(tok, stop[0]);
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                            "required": ["n"], "additionalProperties": false});
        let mut m = g.compile(&Constraint::JsonSchema(schema)).unwrap();
        let n_vocab = tok.vocab_size() as usize + 5; // rows padded past the vocabulary
        for t in tok.encode("{\"n\": 42}", false) {
            let mask = m.compute_mask().unwrap();
            let mut row = vec![0.5f32; n_vocab];
            apply_mask(&mut row, &mask, g.end_token(), &stop);
            assert!(
                row[t as usize].is_finite(),
                "token {t} of a valid answer was masked"
            );
            assert!(row[tok.vocab_size() as usize..]
                .iter()
                .all(|v| *v == f32::NEG_INFINITY));
            // Before the end, no stop token and nothing that is not JSON.
            assert!(stop.iter().all(|&s| row[s as usize] == f32::NEG_INFINITY));
            let x = tok.encode("x", false)[0];
            assert_eq!(row[x as usize], f32::NEG_INFINITY);
            m.consume_token(t).unwrap();
        }
        // Complete: nothing can follow a closed object, the matcher stops
        // (the engine ends the answer there).
        assert!(m.is_stopped());
        // An output that may end or go on: after "4" an integer may take
        // more digits or end, so the stop tokens are allowed beside digits.
        let mut m = g
            .compile(&Constraint::JsonSchema(json!({"type": "integer"})))
            .unwrap();
        m.consume_token(tok.encode("4", false)[0]).unwrap();
        let mask = m.compute_mask().unwrap();
        let mut row = vec![0.5f32; n_vocab];
        apply_mask(&mut row, &mask, g.end_token(), &stop);
        assert!(stop.iter().all(|&s| row[s as usize] == 0.5));
        assert!(stop
            .iter()
            .all(|&s| allowed(&mask, s, g.end_token(), &stop)));
        assert!(row[tok.encode("7", false)[0] as usize].is_finite());
        assert_eq!(row[tok.encode("x", false)[0] as usize], f32::NEG_INFINITY);
    }

    #[test]
    fn refused_schemas_and_grammars_are_400_naming_the_parameter() {
        let tok = tok();
        let g = Grammars::new(tok, tok.stop_ids()[0]);
        for (c, param) in [
            (
                Constraint::JsonSchema(json!({"type": "no-such-type"})),
                "response_format",
            ),
            (
                Constraint::JsonSchema(json!({"type": "integer", "minimum": 5, "maximum": 1})),
                "response_format",
            ),
            (Constraint::JsonSchema(json!([1])), "response_format"),
            (Constraint::Lark("start: undefined_rule".into()), "grammar"),
            (Constraint::Lark("start: (".into()), "grammar"),
            (Constraint::Lark("  ".into()), "grammar"),
        ] {
            let e = g
                .compile(&c)
                .err()
                .unwrap_or_else(|| panic!("{c:?} accepted"));
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{c:?}");
            assert_eq!(e.param, Some(param), "{c:?}");
        }
        assert!(g.compile(&Constraint::JsonObject).is_ok());
        assert!(g
            .compile(&Constraint::Lark("start: \"a\" | \"b\"".into()))
            .is_ok());
    }
}
