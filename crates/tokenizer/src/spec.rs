//! `TokenizerSpec`: the plain-data description of a tokenizer that every source is turned
//! into before it is written as GBT1.
//!
//! Sources disagree on spelling (GGUF stores byte-level tokens in GPT-2's byte-to-unicode
//! form and SentencePiece spaces as U+2581; tokenizer.json does the same with different
//! metadata), so the spec fixes one spelling: byte-level tokens are stored as the raw bytes
//! they stand for, SentencePiece tokens keep U+2581 (the encoder escapes spaces, so a
//! literal U+2581 in the input still behaves as in the reference).

use crate::error::{Error, Result};

/// Which BPE family the model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ModelKind {
    /// GPT-2 style byte-level BPE: a pre-tokenizer splits the text into words, each word is
    /// merged starting from its bytes (GGUF `tokenizer.ggml.model = "gpt2"`).
    ByteLevelBpe = 1,
    /// SentencePiece-style BPE (GGUF `"llama"`): spaces become U+2581, the whole fragment
    /// is merged starting from its characters, characters missing from the vocabulary
    /// fall back to `<0xXX>` byte tokens.
    SentencePieceBpe = 2,
}

/// The pre-tokenizer of a byte-level BPE model (named as llama.cpp's `tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PreTokenizer {
    /// No split (SentencePiece models).
    None = 0,
    /// GPT-2's regex `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    Gpt2 = 1,
    /// Llama 3 (`llama-bpe`): case-insensitive contractions, `\p{N}{1,3}`, newline runs.
    Llama3 = 2,
    /// Qwen 2: the Llama 3 regex with single digits (`\p{N}`).
    Qwen2 = 3,
    /// SmolLM / StarCoder: every `\p{N}` is its own word, then the GPT-2 regex.
    Smollm = 4,
    /// OpenAI's o200k (GPT-4o, gpt-oss; llama.cpp's `gpt-4o`): words split at
    /// case changes (`[Lu Lt Lm Lo M]*[Ll Lm Lo M]+` with a trailing
    /// contraction), `\p{N}{1,3}`, symbols with trailing `[\r\n/]*`.
    O200k = 5,
    /// DeepSeek LLM, DeepSeek-V2 / V2-Lite (`deepseek-llm`): newlines, cased-script letter
    /// runs, ASCII / fullwidth punctuation runs (each after an optional whitespace), trailing
    /// whitespace, CJK runs and single digits, split in that order.
    DeepseekLlm = 6,
    /// DeepSeek Coder (`deepseek-coder`): newlines, `\s?\p{L}+`, `\s?\p{P}+`, CJK runs and
    /// single digits, split in that order.
    DeepseekCoder = 7,
    /// DeepSeek-V3 / R1 (`deepseek-v3`): `\p{N}{1,3}`, then CJK / kana runs, then words
    /// (letters and marks with an optional prefix, ASCII punctuation glued to the ASCII
    /// letters after it, punctuation and symbol runs, whitespace as Llama 3).
    DeepseekV3 = 8,
}

/// What llama.cpp makes of a `tokenizer.ggml.pre` name (llama-vocab.cpp, `llama_vocab::impl::load`):
/// the split, and the defaults it attaches to the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgufPre {
    /// The split.
    pub pre: PreTokenizer,
    /// llama.cpp's `ignore_merges` for the name (only the Llama 3 names set it).
    pub ignore_merges: bool,
    /// Whether BOS is added when the GGUF has no `tokenizer.ggml.add_bos_token` (llama.cpp
    /// sets it for the Llama 3 names; byte-level BPE defaults to no BOS).
    pub add_bos: bool,
}

impl PreTokenizer {
    /// From the byte stored in GBT1.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::Gpt2,
            2 => Self::Llama3,
            3 => Self::Qwen2,
            4 => Self::Smollm,
            5 => Self::O200k,
            6 => Self::DeepseekLlm,
            7 => Self::DeepseekCoder,
            8 => Self::DeepseekV3,
            _ => return None,
        })
    }

    /// From llama.cpp's `tokenizer.ggml.pre` name (see [`PreTokenizer::from_gguf`]).
    pub fn from_gguf_name(name: &str) -> Result<Self> {
        Self::from_gguf(name).map(|g| g.pre)
    }

    /// The split and llama.cpp's defaults for a `tokenizer.ggml.pre` name. Names are grouped
    /// as llama-vocab.cpp groups them (the regex list of each `LLAMA_VOCAB_PRE_TYPE_*`);
    /// the families' released GGUFs use: `deepseek-llm` (DeepSeek-V2, V2-Lite), `deepseek-v3`
    /// (V3, R1), `dbrx` (Granite 4.0, Phi-4; OLMo 2's cl100k-based tokenizer hashes the
    /// same in llama.cpp's converter), `refact` (Granite 3.x), `smaug-bpe` (SmolLM3),
    /// `gpt-4o` (Phi-4-mini, gpt-oss); Phi-3 / 3.5 and Gemma 2 are SentencePiece (no name).
    /// Moonlight's `kimi-k2` (a tiktoken regex with class intersections that llama.cpp
    /// approximates) is refused.
    pub fn from_gguf(name: &str) -> Result<GgufPre> {
        let (pre, llama3) = match name {
            // llama.cpp's "default" (no `pre` key) is a different, legacy regex set: refused
            // rather than approximated.
            "gpt2" | "gpt-2" | "olmo" => (Self::Gpt2, false),
            "llama-bpe" | "llama3" | "llama-v3" => (Self::Llama3, true),
            // llama.cpp: "same as llama3" regex, without Llama 3's ignore_merges and BOS.
            "smaug-bpe" | "dbrx" => (Self::Llama3, false),
            "qwen2" | "deepseek-r1-qwen" => (Self::Qwen2, false),
            "smollm" | "starcoder" | "refact" | "codeshell" => (Self::Smollm, false),
            "gpt-4o" | "llama4" => (Self::O200k, false),
            "deepseek-llm" => (Self::DeepseekLlm, false),
            "deepseek-coder" => (Self::DeepseekCoder, false),
            "deepseek-v3" => (Self::DeepseekV3, false),
            _ => {
                return Err(Error::Unsupported {
                    what: "pre-tokenizer",
                    value: name.to_string(),
                })
            }
        };
        Ok(GgufPre {
            pre,
            ignore_merges: llama3,
            add_bos: llama3,
        })
    }

    /// The llama.cpp name written back to GGUF.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gpt2 => "gpt-2",
            Self::Llama3 => "llama-bpe",
            Self::Qwen2 => "qwen2",
            Self::Smollm => "smollm",
            Self::O200k => "gpt-4o",
            Self::DeepseekLlm => "deepseek-llm",
            Self::DeepseekCoder => "deepseek-coder",
            Self::DeepseekV3 => "deepseek-v3",
        }
    }
}

/// Token type, numbered as SentencePiece and GGUF `tokenizer.ggml.token_type` do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TokenType {
    /// An ordinary piece.
    Normal = 1,
    /// The unknown token.
    Unknown = 2,
    /// A control token (`<bos>`, `<|im_start|>`...).
    Control = 3,
    /// A user-defined piece (matched verbatim in the text).
    UserDefined = 4,
    /// Unused slot.
    Unused = 5,
    /// `<0xXX>` byte-fallback token.
    Byte = 6,
}

impl TokenType {
    /// From the low bits stored in GBT1 / the GGUF value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => return None,
        })
    }
}

/// How the merge loop breaks the tie between stale queue entries (see `bpe.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeMode {
    /// Always apply the best (lowest rank, then leftmost) pair that exists now: llama.cpp
    /// and SentencePiece. Exact for any vocabulary.
    BestFirst,
    /// Hugging Face `tokenizers`' `Word::merge_all`: a queued merge is applied when the pair
    /// now at its position produces the same token, even if that pair's own rank differs.
    /// Identical to `BestFirst` when every token has one merge producing it.
    HfQueue,
}

/// One token as the spec stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecToken {
    /// Raw bytes (see the module note for the spelling).
    pub bytes: Vec<u8>,
    /// Its type.
    pub ty: TokenType,
    /// Matched in the raw text before the model runs (added / control / user-defined).
    pub split: bool,
    /// Special: left out of `decode_skip_special`.
    pub special: bool,
    /// SentencePiece score (0 where the source has none).
    pub score: f32,
    /// Split token that absorbs the whitespace before it (HF `lstrip`).
    pub lstrip: bool,
    /// Split token that absorbs the whitespace after it (HF `rstrip`).
    pub rstrip: bool,
}

impl SpecToken {
    /// An ordinary token.
    pub fn normal(bytes: impl Into<Vec<u8>>, ty: TokenType, score: f32) -> Self {
        SpecToken {
            bytes: bytes.into(),
            ty,
            split: false,
            special: false,
            score,
            lstrip: false,
            rstrip: false,
        }
    }
}

/// Plain-data tokenizer description, the input of the GBT1 writer.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenizerSpec {
    /// BPE family.
    pub model: ModelKind,
    /// Pre-tokenizer (byte-level only).
    pub pre: PreTokenizer,
    /// The vocabulary, indexed by id.
    pub tokens: Vec<SpecToken>,
    /// Merges in rank order: `(left, right, merged)`.
    pub merges: Vec<[u32; 3]>,
    /// Priority of each merge (lower first). `None`: the index. SentencePiece merges derived
    /// from scores share a rank when their scores are equal, so ties go to the leftmost pair.
    pub merge_ranks: Option<Vec<u32>>,
    /// How stale merge-queue entries are treated.
    pub merge_mode: MergeMode,
    /// Beginning-of-sequence id.
    pub bos: Option<u32>,
    /// End-of-sequence id.
    pub eos: Option<u32>,
    /// Padding id.
    pub pad: Option<u32>,
    /// Unknown id.
    pub unk: Option<u32>,
    /// End-of-turn id, when the model's metadata names one (GGUF
    /// `tokenizer.ggml.eot_token_id`).
    pub eot: Option<u32>,
    /// End-of-message id (GGUF `tokenizer.ggml.eom_token_id`).
    pub eom: Option<u32>,
    /// Prepend BOS when encoding with `add_special`.
    pub add_bos: bool,
    /// Append EOS when encoding with `add_special`.
    pub add_eos: bool,
    /// SentencePiece `add_dummy_prefix`: a space before every text fragment.
    pub add_space_prefix: bool,
    /// SentencePiece byte fallback.
    pub byte_fallback: bool,
    /// Hugging Face `ignore_merges` (Llama 3): a word that is a token is emitted whole.
    pub ignore_merges: bool,
    /// Unicode NFC-normalize text fragments before the model (HF `NFC` normalizer, Qwen 2).
    pub normalize_nfc: bool,
    /// The Jinja chat template, if any.
    pub chat_template: Option<String>,
}

/// GPT-2's byte-to-unicode table: byte `b` is spelled as `BYTE_TO_CHAR[b]` in byte-level vocabularies.
pub fn byte_to_char_table() -> [char; 256] {
    let mut t = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        t[b as usize] = char::from_u32(c).unwrap_or('\0');
    }
    t
}

/// Inverse of [`byte_to_char_table`]: the raw bytes of a byte-level token, or `None` if a
/// character is outside the 256-character alphabet.
pub fn unmap_byte_level(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        let u = c as u32;
        let b = match u {
            0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff => u as u8,
            0x100..=0x143 => {
                // The 68 non-printable bytes, in increasing byte order.
                let k = u - 0x100;
                nth_nonprintable(k)?
            }
            _ => return None,
        };
        out.push(b);
    }
    Some(out)
}

fn nth_nonprintable(k: u32) -> Option<u8> {
    let mut n = 0u32;
    for b in 0..=255u8 {
        let bu = b as u32;
        let printable = (0x21..=0x7e).contains(&bu)
            || (0xa1..=0xac).contains(&bu)
            || (0xae..=0xff).contains(&bu);
        if !printable {
            if n == k {
                return Some(b);
            }
            n += 1;
        }
    }
    None
}

/// Spell raw bytes in GPT-2's byte-level alphabet (for writing GGUF / tokenizer.json back).
pub fn map_byte_level(bytes: &[u8]) -> String {
    let t = byte_to_char_table();
    bytes.iter().map(|&b| t[b as usize]).collect()
}

/// `<0xXX>` byte-token spelling, as SentencePiece writes it.
pub fn byte_token_text(b: u8) -> String {
    format!("<0x{b:02X}>")
}

/// Parse `<0xXX>`.
pub fn parse_byte_token(s: &[u8]) -> Option<u8> {
    if s.len() != 6 || &s[..3] != b"<0x" || s[5] != b'>' {
        return None;
    }
    let h = |c: u8| -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'A'..=b'F' => Some(c - b'A' + 10),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    };
    Some(h(s[3])? << 4 | h(s[4])?)
}

impl TokenizerSpec {
    /// Id of a token by its stored bytes (linear; for builders and tests).
    pub fn find(&self, bytes: &[u8]) -> Option<u32> {
        self.tokens
            .iter()
            .position(|t| t.bytes == bytes)
            .map(|i| i as u32)
    }

    /// Check internal consistency: ids in range, merges produce their concatenation.
    pub fn validate(&self) -> Result<()> {
        let n = self.tokens.len() as u64;
        if n == 0 || n > crate::raw::MAX_VOCAB as u64 {
            return Err(Error::Invalid {
                what: "vocab size",
                value: n,
                limit: crate::raw::MAX_VOCAB as u64,
            });
        }
        for id in [self.bos, self.eos, self.pad, self.unk, self.eot, self.eom]
            .into_iter()
            .flatten()
        {
            if id as u64 >= n {
                return Err(Error::TokenOutOfRange {
                    id: id as u64,
                    vocab_size: n,
                });
            }
        }
        if let Some(r) = &self.merge_ranks {
            if r.len() != self.merges.len() {
                return Err(Error::Invalid {
                    what: "merge rank count",
                    value: r.len() as u64,
                    limit: self.merges.len() as u64,
                });
            }
        }
        for (i, m) in self.merges.iter().enumerate() {
            let operand_ok = |x: u32| (x as u64) < n || x & crate::raw::PSEUDO_CHAR != 0;
            if m[2] as u64 >= n || !operand_ok(m[0]) || !operand_ok(m[1]) {
                return Err(Error::BadEntry {
                    what: "merge",
                    index: i as u64,
                });
            }
        }
        Ok(())
    }

    /// Mark tokens as user-defined pieces matched before the model runs (llama.cpp treats
    /// GGUF `USER_DEFINED` tokens so). Used to reproduce a GGUF's typing from a
    /// tokenizer.json that lost it (see `hf.rs`, Gemma 3's whitespace runs).
    ///
    /// For SentencePiece models the piece is respelled with spaces for U+2581, as llama.cpp's
    /// converter stores user-defined pieces, since it is matched in the raw text. Call it
    /// before [`TokenizerSpec::into_sentencepiece_semantics`], which derives the merges.
    pub fn mark_user_defined(&mut self, ids: impl IntoIterator<Item = u32>) {
        let spm = self.model == ModelKind::SentencePieceBpe;
        for id in ids {
            if let Some(t) = self.tokens.get_mut(id as usize) {
                t.ty = TokenType::UserDefined;
                t.split = true;
                if spm {
                    if let Ok(s) = std::str::from_utf8(&t.bytes) {
                        t.bytes = s.replace('\u{2581}', " ").into_bytes();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_roundtrip() {
        let t = byte_to_char_table();
        for b in 0..=255u8 {
            let s: String = [t[b as usize]].iter().collect();
            assert_eq!(unmap_byte_level(&s), Some(vec![b]));
        }
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(unmap_byte_level("a b"), None);
    }

    #[test]
    fn byte_tokens() {
        assert_eq!(parse_byte_token(b"<0x0A>"), Some(10));
        assert_eq!(parse_byte_token(b"<0xfF>"), Some(255));
        assert_eq!(parse_byte_token(b"<0xG0>"), None);
        assert_eq!(byte_token_text(0xab), "<0xAB>");
    }
}
