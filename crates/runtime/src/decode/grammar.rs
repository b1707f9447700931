//! Constrained decoding: a JSON schema, any JSON object, or a grammar in
//! llguidance's Lark-like syntax, turned into a token mask over the model's
//! vocabulary before each sampled token. The server's `response_format` and
//! `grammar`, `gpack run --json-schema/--grammar` and Python's
//! `json_schema=`/`grammar=` all compile here and are applied by the one
//! decoding slot ([`super::Slot`]).
//!
//! The grammar engine is [llguidance]: this file only (1) gives it the
//! model's vocabulary (each token's bytes; special tokens as `0xFF` + name,
//! so that no grammar text can produce them), (2) compiles a constraint
//! into a [`Guide`] (the server does it before the job reaches its engine:
//! a schema the grammar engine refuses is a 400 at once), and (3) applies a
//! computed mask to a row of logits.

use gpack_tokenizer::Tokenizer;
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{self, SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

/// Largest schema or grammar accepted, in bytes of its JSON / text (the
/// compiled grammar is further bounded by [`ParserLimits`]).
pub const MAX_CONSTRAINT_BYTES: usize = 64 * 1024;

/// Why a constraint was not compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConstraintError {
    /// The schema or grammar is refused: the caller's input is wrong
    /// (`param` names the request parameter it came from).
    Invalid {
        /// `response_format`, `grammar` or `tools`.
        param: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The grammar engine cannot work with this model's vocabulary.
    Vocabulary(String),
}

impl std::fmt::Display for ConstraintError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConstraintError::Invalid { message, .. } => f.write_str(message),
            ConstraintError::Vocabulary(e) => {
                write!(f, "the grammar engine could not load this vocabulary: {e}")
            }
        }
    }
}

impl std::error::Error for ConstraintError {}

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
    /// (the server's `tools::grammar`), with the tools' parameter schemas.
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

/// The model's tokenizer as a function (text to ids, no special tokens
/// added), for the (rare) re-tokenization the grammar engine asks for: the
/// engine keeps it for as long as it lives, longer than a borrowed
/// [`Tokenizer`].
pub type Encode = Arc<dyn Fn(&str) -> Vec<u32> + Send + Sync>;

/// The vocabulary as llguidance sees it, with the real tokenizer for the
/// re-tokenization it asks for.
struct Vocab {
    trie: TokTrie,
    encode: Encode,
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        (self.encode)(&String::from_utf8_lossy(s))
    }
}

/// A request's compiled constraint, advanced token by token (llguidance's
/// matcher, which has no `Debug`), and the token that ends a complete
/// output.
pub struct Guide {
    /// The matcher.
    pub matcher: Matcher,
    /// The token the grammar allows once the output is complete (the stop
    /// tokens are allowed exactly then).
    pub end: u32,
}

impl Guide {
    /// An independent copy at the same point (one per choice of a request).
    pub fn deep_clone(&self) -> Guide {
        Guide {
            matcher: self.matcher.deep_clone(),
            end: self.end,
        }
    }
}

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guide")
    }
}

impl std::ops::Deref for Guide {
    type Target = Matcher;
    fn deref(&self) -> &Matcher {
        &self.matcher
    }
}

impl std::ops::DerefMut for Guide {
    fn deref_mut(&mut self) -> &mut Matcher {
        &mut self.matcher
    }
}

/// Compiles constraints for one model (its vocabulary, built on first use).
pub struct Grammars {
    encode: Encode,
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
    /// For a model whose tokenizer `encode` runs; `eos` is the token the
    /// grammar allows once complete (the slot also accepts the model's
    /// other stop tokens there).
    pub fn new(eos: u32, encode: Encode) -> Self {
        Grammars {
            encode,
            eos,
            factory: OnceLock::new(),
        }
    }

    /// For a tokenizer that lives as long as the program (the server's).
    pub fn of(tok: Tokenizer<'static>, eos: u32) -> Self {
        Grammars::new(eos, Arc::new(move |s: &str| tok.encode(s, false)))
    }

    /// The token a complete output ends with.
    pub fn end_token(&self) -> u32 {
        self.eos
    }

    /// The parser factory, built from `tok` (the model's) on first use.
    fn factory(&self, tok: Tokenizer<'_>) -> Result<&ParserFactory, ConstraintError> {
        self.factory
            .get_or_init(|| {
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
                let encode = self.encode.clone();
                let env: TokEnv = Arc::new(Vocab { trie, encode });
                let mut f = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
                f.quiet();
                *f.limits_mut() = ParserLimits {
                    max_grammar_size: 200_000,
                    ..ParserLimits::default()
                };
                Ok(f)
            })
            .as_ref()
            .map_err(|e| ConstraintError::Vocabulary(e.clone()))
    }

    /// Compiles `c` into a matcher at the start of the output, or the
    /// error that says why the grammar engine refuses it. `tok` is the
    /// model's tokenizer (the vocabulary is read from it once).
    pub fn compile(&self, tok: Tokenizer<'_>, c: &Constraint) -> Result<Guide, ConstraintError> {
        let param = c.param();
        let invalid = |message: String| ConstraintError::Invalid { param, message };
        let grammar = match c {
            Constraint::JsonObject => TopLevelGrammar::from_json_schema(
                json!({"type": "object", "x-guidance": json_defaults()}),
            ),
            Constraint::JsonSchema(schema) => {
                let mut schema = schema.clone();
                let Some(obj) = schema.as_object_mut() else {
                    return Err(invalid(
                        "response_format.json_schema.schema must be a JSON object".into(),
                    ));
                };
                obj.entry("x-guidance").or_insert_with(json_defaults);
                TopLevelGrammar::from_json_schema(schema)
            }
            Constraint::Lark(g) | Constraint::ToolCall(g) => {
                if g.trim().is_empty() {
                    return Err(invalid("grammar must not be empty".into()));
                }
                TopLevelGrammar::from_lark(g.clone())
            }
        };
        let factory = self.factory(tok)?;
        let refused = |e: &dyn std::fmt::Display| {
            invalid(format!("the grammar engine refused this {}: {e}", what(c)))
        };
        let parser = factory.create_parser(grammar).map_err(|e| refused(&e))?;
        let m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            return Err(refused(&e));
        }
        Ok(Guide {
            matcher: m,
            end: self.eos,
        })
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
    /// special tokens), leaked for the `'static` a [`Grammars`] keeps.
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
        let g = Grammars::of(tok, stop[0]);
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                            "required": ["n"], "additionalProperties": false});
        let mut m = g.compile(tok, &Constraint::JsonSchema(schema)).unwrap();
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
            .compile(tok, &Constraint::JsonSchema(json!({"type": "integer"})))
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
        let g = Grammars::of(tok, tok.stop_ids()[0]);
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
                .compile(tok, &c)
                .err()
                .unwrap_or_else(|| panic!("{c:?} accepted"));
            match e {
                ConstraintError::Invalid { param: p, .. } => assert_eq!(p, param, "{c:?}"),
                e => panic!("{c:?}: {e}"),
            }
        }
        assert!(g.compile(tok, &Constraint::JsonObject).is_ok());
        assert!(g
            .compile(tok, &Constraint::Lark("start: \"a\" | \"b\"".into()))
            .is_ok());
    }
}
