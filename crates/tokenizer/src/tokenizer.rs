//! `Tokenizer`: encode and decode directly on a parsed [`Gbt1`] view.
//!
//! Encoding: split tokens (added, control, user-defined) are found first, leftmost-longest,
//! in the raw text (HF's added-vocabulary split; llama.cpp's `tokenizer_st_partition` with
//! `parse_special`). Each text fragment between them goes to the model: byte-level BPE
//! pre-tokenizes it and merges every word from its bytes; SentencePiece-style BPE escapes
//! spaces to U+2581 and merges the whole fragment from its characters.

use crate::bpe::{self, Scratch};
use crate::error::Result;
use crate::gbt1::*;
use crate::pretok;
use crate::spec::{ModelKind, TokenType};
use std::borrow::Cow;
use std::cell::RefCell;

/// A tokenizer over a borrowed GBT1 view. Holds no copy of the vocabulary.
#[derive(Clone, Copy, Debug)]
pub struct Tokenizer<'a> {
    g: Gbt1<'a>,
}

/// FxHash-style hasher for the word cache (keys are short byte strings).
#[derive(Default)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    #[inline]
    fn write(&mut self, b: &[u8]) {
        let mut h = self.0;
        let mut c = b.chunks_exact(8);
        for w in &mut c {
            let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            h = (h.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        for &x in c.remainder() {
            h = (h.rotate_left(5) ^ x as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        self.0 = h;
    }
    #[inline]
    fn write_u8(&mut self, x: u8) {
        self.0 = (self.0.rotate_left(5) ^ x as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.0 = (self.0.rotate_left(5) ^ x as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// Per-thread encoder state: merge buffers and a word → ids cache.
///
/// Perf log: the cache is what makes encoding fast (a 1 MB corpus has ~25k distinct words
/// for ~250k words). It belongs to one GBT1 view at a time (`owner`), is cleared when
/// another is used on the thread, and is capped.
#[derive(Default)]
struct State {
    sc: Scratch,
    owner: (usize, usize, u64, u32),
    cache: FxMap<Box<[u8]>, (u32, u32)>,
    cache_ids: Vec<u32>,
    ids: Vec<u32>,
    esc: String,
    /// SentencePiece: character → id (or NONE), saves a token-hash probe per character.
    chars: FxMap<char, u32>,
}

const CACHE_MAX_WORDS: usize = 1 << 18;
const CACHE_MAX_WORD_BYTES: usize = 256;

impl State {
    fn bind(&mut self, g: &Gbt1<'_>) {
        let b = g.as_bytes();
        // Address, length, content hash and vocabulary size: a cache entry can only be
        // replayed for the same tokenizer, and never yields an id out of range.
        let key = (
            b.as_ptr() as usize,
            b.len(),
            g.content_hash(),
            g.vocab_size(),
        );
        if self.owner != key || self.cache.len() > CACHE_MAX_WORDS {
            self.owner = key;
            self.cache.clear();
            self.cache_ids.clear();
            self.chars.clear();
        }
    }
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

const SPACE_MARK: &str = "\u{2581}";

impl<'a> Tokenizer<'a> {
    /// A tokenizer over a parsed view.
    pub fn new(g: Gbt1<'a>) -> Self {
        Tokenizer { g }
    }

    /// Parse GBT1 bytes and wrap them.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self> {
        Ok(Tokenizer {
            g: Gbt1::parse(bytes)?,
        })
    }

    /// The underlying view.
    pub fn gbt1(&self) -> &Gbt1<'a> {
        &self.g
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> u32 {
        self.g.vocab_size()
    }

    /// BOS id.
    pub fn bos(&self) -> Option<u32> {
        self.g.bos()
    }

    /// EOS id.
    pub fn eos(&self) -> Option<u32> {
        self.g.eos()
    }

    /// The BOS id when [`Tokenizer::encode`] with special tokens adds it
    /// (llama.cpp's `llama_vocab_get_add_bos`), else `None`.
    pub fn added_bos(&self) -> Option<u32> {
        self.g.bos().filter(|_| self.g.flags() & FLAG_ADD_BOS != 0)
    }

    /// The chat template stored with the tokenizer.
    pub fn chat_template(&self) -> Option<&'a str> {
        self.g.chat_template()
    }

    /// Id of a token by its text (as the model spells it; split tokens by their raw text).
    pub fn token_to_id(&self, text: &str) -> Option<u32> {
        self.g.token_id(text.as_bytes())
    }

    /// Drop this thread's word cache (encoding results do not depend on it; for cold-cache
    /// measurements and to release memory).
    pub fn clear_thread_cache() {
        STATE.with(|s| {
            if let Ok(mut st) = s.try_borrow_mut() {
                *st = State::default();
            }
        });
    }

    /// Encode `text`. With `add_special`, BOS/EOS are added as the tokenizer's flags say.
    /// Special-token text in `text` always maps to its id (HF `encode`, llama.cpp
    /// `parse_special = true`). Never panics; every id is below `vocab_size`.
    pub fn encode(&self, text: &str, add_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        self.encode_into(text, add_special, &mut out);
        out
    }

    /// [`Tokenizer::encode`] appending to `out`.
    pub fn encode_into(&self, text: &str, add_special: bool, out: &mut Vec<u32>) {
        let f = self.g.flags();
        if add_special && f & FLAG_ADD_BOS != 0 {
            if let Some(b) = self.g.bos() {
                out.push(b);
            }
        }
        STATE.with(|s| {
            let mut guard = s.try_borrow_mut();
            let mut local;
            let st: &mut State = match guard.as_deref_mut() {
                Ok(x) => x,
                Err(_) => {
                    // Re-entrant use on one thread (not expected): a fresh state.
                    local = State::default();
                    &mut local
                }
            };
            st.bind(&self.g);
            let mut prev_special = true;
            let mut start = 0;
            let b = text.as_bytes();
            let has_split = self.g.n_split_lengths() > 0;
            let mut i = 0;
            while has_split && i < b.len() {
                let (lo, hi) = self.g.split_range(b[i]);
                if lo < hi && text.is_char_boundary(i) {
                    if let Some((id, len)) = self.match_split(text, i, lo, hi) {
                        let ty = self.g.type_byte(id);
                        let mut before = i;
                        let mut end = i + len;
                        if ty & TYPE_LSTRIP != 0 {
                            // HF lstrip: the whitespace before the token belongs to it.
                            while before > start {
                                let c = text[..before].chars().next_back().unwrap_or('x');
                                if !c.is_whitespace() {
                                    break;
                                }
                                before -= c.len_utf8();
                            }
                        }
                        if ty & TYPE_RSTRIP != 0 {
                            while let Some(c) = text[end..].chars().next() {
                                if !c.is_whitespace() {
                                    break;
                                }
                                end += c.len_utf8();
                            }
                        }
                        if start < before {
                            self.encode_fragment(&text[start..before], prev_special, st, out);
                        }
                        out.push(id);
                        prev_special = true;
                        i = end;
                        start = i;
                        continue;
                    }
                }
                i += 1;
            }
            if start < text.len() {
                self.encode_fragment(&text[start..], prev_special, st, out);
            }
        });
        if add_special && f & FLAG_ADD_EOS != 0 {
            if let Some(e) = self.g.eos() {
                out.push(e);
            }
        }
    }

    /// Longest split token starting at byte `i`, trying the lengths `lo..hi` of the list.
    fn match_split(&self, text: &str, i: usize, lo: usize, hi: usize) -> Option<(u32, usize)> {
        let rest = &text.as_bytes()[i..];
        let two = rest.len() >= 2 && self.g.split_prefix2(rest[0], rest[1]);
        for k in lo..hi {
            let len = self.g.split_length(k);
            // The boundary check matters only for a corrupt file whose split token is not
            // whole UTF-8: slicing the text there would panic.
            if len == 0 || len > rest.len() || (len >= 2 && !two) || !text.is_char_boundary(i + len)
            {
                continue;
            }
            if let Some(id) = self.g.token_id(&rest[..len]) {
                if self.g.type_byte(id) & TYPE_SPLIT != 0 {
                    return Some((id, len));
                }
            }
        }
        None
    }

    fn encode_fragment(&self, frag: &str, prev_special: bool, st: &mut State, out: &mut Vec<u32>) {
        if self.g.flags() & FLAG_NFC != 0 {
            use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};
            if is_nfc_quick(frag.chars()) != IsNormalized::Yes {
                let n: String = frag.nfc().collect();
                return self.encode_model(&n, prev_special, st, out);
            }
        }
        self.encode_model(frag, prev_special, st, out)
    }

    fn encode_model(&self, frag: &str, prev_special: bool, st: &mut State, out: &mut Vec<u32>) {
        match self.g.model() {
            ModelKind::ByteLevelBpe => self.encode_byte_level(frag, st, out),
            ModelKind::SentencePieceBpe => self.encode_spm(frag, prev_special, st, out),
        }
    }

    /// Look `word` up in the cache, or run `f` to encode it and remember the result.
    #[inline]
    fn cached(
        st: &mut State,
        word: &[u8],
        out: &mut Vec<u32>,
        f: impl FnOnce(&mut State, &mut Vec<u32>),
    ) {
        if let Some(&(a, n)) = st.cache.get(word) {
            out.extend_from_slice(&st.cache_ids[a as usize..(a + n) as usize]);
            return;
        }
        let start = out.len();
        f(st, out);
        if word.len() <= CACHE_MAX_WORD_BYTES {
            let a = st.cache_ids.len() as u32;
            st.cache_ids.extend_from_slice(&out[start..]);
            st.cache
                .insert(word.into(), (a, (out.len() - start) as u32));
        }
    }

    fn encode_byte_level(&self, frag: &str, st: &mut State, out: &mut Vec<u32>) {
        let f = self.g.flags();
        let hf = f & FLAG_HF_QUEUE != 0;
        let exact_small = !hf || f & FLAG_PAIR_UNIQUE != 0;
        let ignore = f & FLAG_IGNORE_MERGES != 0;
        let g = &self.g;
        pretok::split(g.pre_tokenizer(), frag, |w| {
            let wb = w.as_bytes();
            if wb.len() == 1 {
                if let Some(id) = g.byte_token(wb[0]) {
                    out.push(id);
                }
                return;
            }
            Self::cached(st, wb, out, |st, out| {
                if ignore {
                    if let Some(id) = g.token_id(wb) {
                        out.push(id);
                        return;
                    }
                }
                let mut ids = std::mem::take(&mut st.ids);
                ids.clear();
                ids.extend(wb.iter().filter_map(|&b| g.byte_token(b)));
                bpe::merge(g, &ids, hf, exact_small, &mut st.sc, out);
                st.ids = ids;
            });
        });
    }

    /// SentencePiece: escape spaces, cut the text before every U+2581 run that no token
    /// crosses (so that each piece merges on its own, with the same result as merging the
    /// whole: a merge result is a token, and no token spans the cut), and merge each piece.
    fn encode_spm(&self, frag: &str, prev_special: bool, st: &mut State, out: &mut Vec<u32>) {
        let f = self.g.flags();
        let mut esc = std::mem::take(&mut st.esc);
        esc.clear();
        if f & FLAG_ADD_SPACE_PREFIX != 0 && prev_special {
            esc.push_str(SPACE_MARK);
        }
        for c in frag.chars() {
            if c == ' ' {
                esc.push_str(SPACE_MARK);
            } else {
                esc.push(c);
            }
        }
        let mut start = 0;
        let mut prev: Option<char> = None;
        for (i, c) in esc.char_indices() {
            if c == '\u{2581}' && i > start {
                if let Some(p) = prev {
                    if p != '\u{2581}' && !self.g.is_mark_crosser(p) {
                        let piece = &esc[start..i];
                        Self::cached(st, piece.as_bytes(), out, |st, out| {
                            self.spm_piece(piece, st, out)
                        });
                        start = i;
                    }
                }
            }
            prev = Some(c);
        }
        if start < esc.len() {
            let piece = &esc[start..];
            Self::cached(st, piece.as_bytes(), out, |st, out| {
                self.spm_piece(piece, st, out)
            });
        }
        st.esc = esc;
    }

    /// Merge one escaped SentencePiece piece.
    fn spm_piece(&self, piece: &str, st: &mut State, out: &mut Vec<u32>) {
        let f = self.g.flags();
        let hf = f & FLAG_HF_QUEUE != 0;
        let exact_small = !hf || f & FLAG_PAIR_UNIQUE != 0;
        let pseudo = f & FLAG_CHAR_PSEUDO_IDS != 0;
        let unk = self.g.unk();
        let mut ids = std::mem::take(&mut st.ids);
        ids.clear();
        let mut last_unk = false;
        let mut buf = [0u8; 4];
        for c in piece.chars() {
            let s = c.encode_utf8(&mut buf);
            let g = &self.g;
            let id = *st
                .chars
                .entry(c)
                .or_insert_with(|| g.token_id(s.as_bytes()).unwrap_or(NONE));
            if id != NONE {
                ids.push(id);
                last_unk = false;
                continue;
            }
            if pseudo {
                ids.push(PSEUDO_CHAR | c as u32);
                continue;
            }
            if f & FLAG_BYTE_FALLBACK != 0 {
                let bytes: Option<Vec<u32>> = s.bytes().map(|b| self.g.byte_token(b)).collect();
                if let Some(v) = bytes {
                    ids.extend(v);
                    last_unk = false;
                    continue;
                }
            }
            if let Some(u) = unk {
                // fuse_unk: HF fuses consecutive unknowns into one.
                if !last_unk {
                    ids.push(u);
                }
                last_unk = true;
            }
        }
        let start = out.len();
        bpe::merge(&self.g, &ids, hf, exact_small, &mut st.sc, out);
        st.ids = ids;
        if pseudo && out[start..].iter().any(|&x| bpe::is_pseudo(x)) {
            // Characters outside the vocabulary fall back to their UTF-8 bytes (llama.cpp's
            // resegment), or to unk when a byte token is missing.
            let tail: Vec<u32> = out.drain(start..).collect();
            for id in tail {
                if bpe::is_pseudo(id) {
                    let c = char::from_u32(id & !PSEUDO_CHAR).unwrap_or('\u{FFFD}');
                    for b in c.encode_utf8(&mut buf).bytes() {
                        if let Some(t) = self.g.byte_token(b).or(unk) {
                            out.push(t);
                        }
                    }
                } else {
                    out.push(id);
                }
            }
        }
    }

    /// The bytes token `id` contributes to decoded text (`<0xXX>` → one byte, U+2581 → space
    /// for SentencePiece). Empty for an unknown id.
    pub fn token_piece(&self, id: u32) -> Cow<'a, [u8]> {
        let Some(b) = self.g.token_bytes(id) else {
            return Cow::Borrowed(&[]);
        };
        match self.g.model() {
            ModelKind::ByteLevelBpe => Cow::Borrowed(b),
            ModelKind::SentencePieceBpe => {
                if self.g.token_type(id) == Some(TokenType::Byte) {
                    if let Some(x) = crate::spec::parse_byte_token(b) {
                        return Cow::Owned(vec![x]);
                    }
                }
                if memfind(b, SPACE_MARK.as_bytes()) {
                    Cow::Owned(replace_mark(b))
                } else {
                    Cow::Borrowed(b)
                }
            }
        }
    }

    /// The first id whose token differs between `self` and `other` (bytes,
    /// type or presence), or `None` when the two vocabularies are the same:
    /// what a draft model must share with its target.
    pub fn vocab_difference(&self, other: &Tokenizer<'_>) -> Option<u32> {
        let n = self.vocab_size().max(other.vocab_size());
        (0..n).find(|&id| {
            self.g.token_bytes(id) != other.g.token_bytes(id)
                || self.g.type_byte(id) != other.g.type_byte(id)
        })
    }

    /// The token as the model spells it (U+2581 kept, `<0xXX>` kept), lossy UTF-8.
    pub fn token_text(&self, id: u32) -> Option<String> {
        let b = self.g.token_bytes(id)?;
        Some(match self.g.model() {
            ModelKind::ByteLevelBpe if self.g.type_byte(id) & TYPE_SPLIT == 0 => {
                crate::spec::map_byte_level(b)
            }
            _ => String::from_utf8_lossy(b).into_owned(),
        })
    }

    /// Decoded bytes of `ids` (special tokens included).
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut v = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            v.extend_from_slice(&self.token_piece(id));
        }
        if self.g.flags() & FLAG_ADD_SPACE_PREFIX != 0 && v.first() == Some(&b' ') {
            v.remove(0);
        }
        v
    }

    /// Decode `ids` to text (special tokens included; invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids)).into_owned()
    }

    /// Decode `ids`, leaving out special tokens (HF `skip_special_tokens=True`).
    pub fn decode_skip_special(&self, ids: &[u32]) -> String {
        let kept: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&id| self.g.type_byte(id) & TYPE_SPECIAL == 0)
            .collect();
        self.decode(&kept)
    }

    /// A streaming decoder for this tokenizer.
    pub fn stream_decoder(&self) -> crate::stream::StreamDecoder<'a> {
        crate::stream::StreamDecoder::new(*self)
    }

    /// Ids that end a generation: the one end-of-turn rule of gpack (`run`,
    /// `serve`, the Python package and the runtime's `generate` all call it).
    ///
    /// EOS first, then the end-of-turn and end-of-message ids the metadata
    /// names (GGUF `tokenizer.ggml.eot_token_id` / `eom_token_id`), then the
    /// end-of-turn tokens of the chat formats gpack runs
    /// (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>`, `<|eom_id|>`, `<|end|>`,
    /// `<|endoftext|>`, `<|return|>`, `<|call|>`, `<eos>`, `</s>`) where the vocabulary has
    /// them as split (control) tokens, as llama.cpp's end-of-generation set.
    /// (Scanning the template for "end" tokens would also catch markers such
    /// as Qwen2-VL's `<|vision_end|>`, which end no turn.)
    ///
    /// Harmony vocabularies (gpt-oss, [`crate::harmony`]) end a turn with
    /// `<|return|>` or `<|call|>`; their `<|end|>` ends a message within
    /// the turn (reasoning, then the answer), so it is not a stop there.
    pub fn stop_ids(&self) -> Vec<u32> {
        let harmony = crate::harmony::is_harmony(self);
        let mut v: Vec<u32> = self.eos().into_iter().collect();
        // The end-of-turn/message ids the model's metadata names.
        for id in [self.g.eot(), self.g.eom()].into_iter().flatten() {
            if !v.contains(&id) {
                v.push(id);
            }
        }
        for t in [
            "<|im_end|>",
            "<end_of_turn>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|end|>",
            "<|endoftext|>",
            "<|return|>",
            "<|call|>",
            "<eos>",
            "</s>",
        ] {
            let skip = match t {
                "<|end|>" => harmony,
                "<|call|>" => !harmony,
                _ => false,
            };
            if skip {
                continue;
            }
            if let Some(id) = self.special_id(t) {
                if !v.contains(&id) {
                    v.push(id);
                }
            }
        }
        v
    }

    /// The id of `text` when the vocabulary has it as a split (control)
    /// token, as `<|im_end|>`.
    pub fn special_id(&self, text: &str) -> Option<u32> {
        let id = self.g.token_id(text.as_bytes())?;
        (self.g.type_byte(id) & TYPE_SPLIT != 0).then_some(id)
    }

    /// Is `id` special (control-like)?
    pub fn is_special(&self, id: u32) -> bool {
        self.g.type_byte(id) & TYPE_SPECIAL != 0
    }
}

fn memfind(h: &[u8], n: &[u8]) -> bool {
    h.windows(n.len()).any(|w| w == n)
}

fn replace_mark(b: &[u8]) -> Vec<u8> {
    let m = SPACE_MARK.as_bytes();
    let mut v = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(m) {
            v.push(b' ');
            i += m.len();
        } else {
            v.push(b[i]);
            i += 1;
        }
    }
    v
}
