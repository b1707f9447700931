//! Hand-written pre-tokenizers: the GPT-2, Llama 3 / Qwen 2, SmolLM, o200k and DeepSeek
//! split regexes as one-pass state machines.
//!
//! Why by hand: the regex engines (onig in HF, fancy-regex, std::regex in llama.cpp) are the
//! bottleneck of byte-level tokenizers, and these regexes only need a class lookup per
//! character and at most one character of lookahead. Each function returns the end of the
//! match a backtracking engine would find at `i`, derived alternative by alternative in the
//! comments. The test suite checks them against fancy-regex running the original regexes on
//! the corpus and on random strings.
//!
//! The DeepSeek tokenizers are a Sequence of several `Split(regex, Isolated)` steps in
//! tokenizer.json, each applied to every piece the previous steps left: `split_steps` runs
//! one matcher per step the same way, piece by piece, so a step's `$` and `(?!\S)` see the end
//! of the piece as HF's do.
//!
//! Character classes: `L` = `\p{L}`, `N` = `\p{N}`, `W` = `\s` (Unicode White_Space),
//! `O` = everything else. A second table holds overlapping class bits (`X_LM` ...) for the
//! DeepSeek regexes' general categories and literal character classes. The tables come from
//! regex-syntax, the tables of the regex crates.

use crate::spec::PreTokenizer;
use std::sync::OnceLock;

/// Class codes.
pub(crate) const O: u8 = 0;
pub(crate) const L: u8 = 1;
pub(crate) const N: u8 = 2;
pub(crate) const W: u8 = 3;

struct Tables {
    /// Class of every BMP code point.
    bmp: Vec<u8>,
    /// Astral ranges `(start, end, class)`, sorted.
    astral: Vec<(u32, u32, u8)>,
    /// Case group ([`UP`], [`LOW`], [`BOTH`] or 0) of every BMP code point.
    case_bmp: Vec<u8>,
    /// Astral ranges `(start, end, case group)`, sorted.
    case_astral: Vec<(u32, u32, u8)>,
}

/// The extra class bits ([`X_LM`] ...), built on first use by a DeepSeek pre-tokenizer.
struct XTables {
    /// Bits of every BMP code point.
    bmp: Vec<u8>,
    /// Astral ranges `(start, end, bits)`, sorted and disjoint.
    astral: Vec<(u32, u32, u8)>,
}

/// Case groups of o200k: `UP` is in `[\p{Lu}\p{Lt}]`, `LOW` in `\p{Ll}`, `BOTH`
/// in `[\p{Lm}\p{Lo}\p{M}]` (both of o200k's letter sets).
pub(crate) const UP: u8 = 1;
pub(crate) const LOW: u8 = 2;
pub(crate) const BOTH: u8 = 3;

/// Extra class bits (a character may have several): `[\p{L}\p{M}]`.
pub(crate) const X_LM: u8 = 1;
/// `[\p{P}\p{S}]`.
pub(crate) const X_PS: u8 = 1 << 1;
/// `\p{P}`.
pub(crate) const X_P: u8 = 1 << 2;
/// deepseek-llm's letter class ([`DS_LETTERS`]).
pub(crate) const X_DS_LET: u8 = 1 << 3;
/// deepseek-llm's punctuation class ([`DS_PUNCT`]).
pub(crate) const X_DS_PUNCT: u8 = 1 << 4;
/// deepseek-llm's and deepseek-coder's CJK class ([`DS_CJK`]).
pub(crate) const X_DS_CJK: u8 = 1 << 5;
/// deepseek-v3's CJK class ([`V3_CJK`]).
pub(crate) const X_V3_CJK: u8 = 1 << 6;

/// The character classes of the DeepSeek regexes, as tokenizer.json spells them (llama.cpp's
/// llama-vocab.cpp copies them). The letter class is the cased letters of the Latin, Greek,
/// Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic, Deseret, Osage, Old Hungarian,
/// Warang Citi and Adlam blocks; the punctuation class is ASCII `!` to `~` but the digits
/// (letters included: the letter step runs first), their fullwidth forms, U+2018..U+201F
/// quotes and U+3000..U+3002; the CJK class runs from U+0800 (Samaritan) to U+9FA5 plus
/// Hangul syllables.
macro_rules! ds_letters {
    () => {
        "[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\
         \u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\
         \u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\
         \u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\
         \u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\
         \u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\
         \u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\
         \u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\
         \u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\
         \u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\
         \u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\
         \u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\
         \u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\
         \u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\
         \u{118a0}-\u{118df}\u{1e900}-\u{1e943}]"
    };
}
macro_rules! ds_punct {
    () => {
        "[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]"
    };
}
macro_rules! ds_cjk {
    () => {
        "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]"
    };
}
macro_rules! v3_cjk {
    () => {
        "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]"
    };
}
/// deepseek-llm's letter class.
pub const DS_LETTERS: &str = ds_letters!();
/// deepseek-llm's punctuation class.
pub const DS_PUNCT: &str = ds_punct!();
/// The CJK class of deepseek-llm and deepseek-coder.
pub const DS_CJK: &str = ds_cjk!();
/// deepseek-v3's CJK class (CJK ideographs to U+9FA5, Hiragana, Katakana).
pub const V3_CJK: &str = v3_cjk!();
/// The regex of a `Digits(individual_digits)` step of tokenizer.json, which isolates every
/// `char::is_numeric` (`\p{N}`) character.
pub const DIGITS: &str = r"\p{N}";

fn class_ranges(pat: &str) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    let Ok(hir) = regex_syntax::ParserBuilder::new().build().parse(pat) else {
        return Vec::new();
    };
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => c
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        _ => Vec::new(),
    }
}

/// A table of `(pattern, code)` classes: the BMP's code points one by one
/// (`default` elsewhere) and the astral ranges, sorted.
fn class_table(pats: &[(&str, u8)], default: u8) -> (Vec<u8>, Vec<(u32, u32, u8)>) {
    let mut bmp = vec![default; 0x10000];
    let mut astral = Vec::new();
    for &(pat, code) in pats {
        for (a, b) in class_ranges(pat) {
            for cp in a..=b.min(0xFFFF) {
                bmp[cp as usize] = code;
            }
            if b > 0xFFFF {
                astral.push((a.max(0x10000), b, code));
            }
        }
    }
    astral.sort_unstable();
    (bmp, astral)
}

/// A table of overlapping class bits `(pattern, bit)`: the bits of every BMP code point, and
/// the astral ranges cut into sorted disjoint ranges with the union of their bits.
fn bits_table(pats: &[(&str, u8)]) -> (Vec<u8>, Vec<(u32, u32, u8)>) {
    let mut bmp = vec![0u8; 0x10000];
    let mut ranges = Vec::new();
    let mut cuts = Vec::new();
    for &(pat, bit) in pats {
        for (a, b) in class_ranges(pat) {
            for cp in a..=b.min(0xFFFF) {
                bmp[cp as usize] |= bit;
            }
            if b > 0xFFFF {
                let a = a.max(0x10000);
                ranges.push((a, b, bit));
                cuts.extend([a, b + 1]);
            }
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut astral: Vec<(u32, u32, u8)> = Vec::new();
    for w in cuts.windows(2) {
        let (p, q) = (w[0], w[1] - 1);
        let bits = ranges
            .iter()
            .filter(|&&(a, b, _)| a <= p && p <= b)
            .fold(0, |m, r| m | r.2);
        match astral.last_mut() {
            Some(last) if last.1 + 1 == p && last.2 == bits => last.1 = q,
            _ if bits != 0 => astral.push((p, q, bits)),
            _ => {}
        }
    }
    (bmp, astral)
}

/// The code of astral code point `u` in sorted `ranges`, if listed.
fn astral_code(ranges: &[(u32, u32, u8)], u: u32) -> Option<u8> {
    let k = ranges.binary_search_by(|&(a, b, _)| {
        if b < u {
            std::cmp::Ordering::Less
        } else if a > u {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    k.ok().map(|k| ranges[k].2)
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let (bmp, astral) = class_table(&[(r"\p{L}", L), (r"\p{N}", N), (r"\s", W)], O);
        let (case_bmp, case_astral) = class_table(
            &[
                (r"[\p{Lu}\p{Lt}]", UP),
                (r"\p{Ll}", LOW),
                (r"[\p{Lm}\p{Lo}\p{M}]", BOTH),
            ],
            0,
        );
        Tables {
            bmp,
            astral,
            case_bmp,
            case_astral,
        }
    })
}

fn xtables() -> &'static XTables {
    static T: OnceLock<XTables> = OnceLock::new();
    T.get_or_init(|| {
        let (bmp, astral) = bits_table(&[
            (r"[\p{L}\p{M}]", X_LM),
            (r"[\p{P}\p{S}]", X_PS),
            (r"\p{P}", X_P),
            (DS_LETTERS, X_DS_LET),
            (DS_PUNCT, X_DS_PUNCT),
            (DS_CJK, X_DS_CJK),
            (V3_CJK, X_V3_CJK),
        ]);
        XTables { bmp, astral }
    })
}

/// The extra class bits of ASCII, so that the common case needs no table lookup (checked
/// against the tables in the tests).
const X_ASCII: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut c = 0;
    while c < 128 {
        let b = c as u8;
        t[c] = if b.is_ascii_alphabetic() {
            X_LM | X_DS_LET | X_DS_PUNCT
        } else if b.is_ascii_punctuation() {
            // `$+<=>^`|~` are symbols (\p{S}), the other 23 punctuation (\p{P}).
            let p = if matches!(
                b,
                b'$' | b'+' | b'<' | b'=' | b'>' | b'^' | b'`' | b'|' | b'~'
            ) {
                0
            } else {
                X_P
            };
            X_PS | p | X_DS_PUNCT
        } else {
            0
        };
        c += 1;
    }
    t
};

/// The extra class bits of a character.
#[inline]
fn xbits(c: char) -> u8 {
    let u = c as u32;
    if u < 128 {
        return X_ASCII[u as usize];
    }
    let t = xtables();
    if u < 0x10000 {
        return t.bmp[u as usize];
    }
    astral_code(&t.astral, u).unwrap_or(0)
}

/// ASCII classes, so that the common case needs no table lookup through the OnceLock.
const ASCII: [u8; 128] = {
    let mut t = [O; 128];
    let mut c = 0;
    while c < 128 {
        let b = c as u8;
        t[c] = if b.is_ascii_alphabetic() {
            L
        } else if b.is_ascii_digit() {
            N
        } else if matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
            W
        } else {
            O
        };
        c += 1;
    }
    t
};

/// Class of a character.
#[inline]
pub(crate) fn class_of(c: char) -> u8 {
    let u = c as u32;
    if u < 128 {
        return ASCII[u as usize];
    }
    let t = tables();
    if u < 0x10000 {
        return t.bmp[u as usize];
    }
    astral_code(&t.astral, u).unwrap_or(O)
}

/// Case group of a character (o200k's letter sets; 0 outside both).
#[inline]
fn case_of(c: char) -> u8 {
    let u = c as u32;
    if u < 128 {
        let b = u as u8;
        return if b.is_ascii_uppercase() {
            UP
        } else if b.is_ascii_lowercase() {
            LOW
        } else {
            0
        };
    }
    let t = tables();
    if u < 0x10000 {
        return t.case_bmp[u as usize];
    }
    astral_code(&t.case_astral, u).unwrap_or(0)
}

/// The character at byte `i` (a char boundary) with its class and UTF-8 length.
#[inline]
fn at(s: &str, i: usize) -> (char, u8, usize) {
    let b = s.as_bytes()[i];
    if b < 0x80 {
        return (b as char, ASCII[b as usize], 1);
    }
    let c = s[i..].chars().next().unwrap_or('\u{FFFD}');
    (c, class_of(c), c.len_utf8())
}

/// End of the maximal run of class `cls` starting at `i`.
#[inline]
fn run(s: &str, mut i: usize, cls: u8) -> usize {
    let b = s.as_bytes();
    while i < b.len() {
        let x = b[i];
        if x < 0x80 {
            if ASCII[x as usize] != cls {
                break;
            }
            i += 1;
        } else {
            let (_, c, n) = at(s, i);
            if c != cls {
                break;
            }
            i += n;
        }
    }
    i
}

/// Start of the character that ends at `j`.
#[inline]
fn prev_start(s: &str, mut j: usize) -> usize {
    let b = s.as_bytes();
    j -= 1;
    while j > 0 && (b[j] & 0xC0) == 0x80 {
        j -= 1;
    }
    j
}

/// Length after the apostrophe of a contraction `s|t|re|ve|m|ll|d` at `i`, if any.
#[inline]
fn contraction(s: &str, i: usize, ci: bool) -> Option<usize> {
    let b = s.as_bytes();
    let c0 = *b.get(i)?;
    let lower = |x: u8| if ci { x.to_ascii_lowercase() } else { x };
    match lower(c0) {
        b's' | b't' | b'm' | b'd' => return Some(1),
        b'r' | b'v' if b.get(i + 1).map(|&x| lower(x)) == Some(b'e') => return Some(2),
        b'l' if b.get(i + 1).map(|&x| lower(x)) == Some(b'l') => return Some(2),
        _ => {}
    }
    // (?i) folds U+017F LATIN SMALL LETTER LONG S to 's'.
    if ci && c0 == 0xC5 && b.get(i + 1) == Some(&0xBF) {
        return Some(2);
    }
    None
}

/// `\s+(?!\S)|\s+` at a whitespace character `i`: the run, less its last character when a
/// non-space follows and the run is longer than one character.
#[inline]
fn ws_tail(s: &str, i: usize, j: usize) -> usize {
    if j == s.len() {
        return j;
    }
    let last = prev_start(s, j);
    if last > i {
        last
    } else {
        j
    }
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
#[inline]
fn gpt2_next(s: &str, i: usize) -> usize {
    let (c, cl, n) = at(s, i);
    if c == '\'' {
        if let Some(k) = contraction(s, i + 1, false) {
            return i + 1 + k;
        }
    }
    if c == ' ' && i + 1 < s.len() {
        // ` ?X+`: the optional space binds to a following L, N or O run.
        let (_, cl2, n2) = at(s, i + 1);
        if cl2 != W {
            return run(s, i + 1 + n2, cl2);
        }
    }
    if cl != W {
        return run(s, i + n, cl);
    }
    let j = run(s, i + n, W);
    ws_tail(s, i, j)
}

/// Llama 3 (`max_digits` 3) and Qwen 2 (1):
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
#[inline]
fn llama3_next(s: &str, i: usize, max_digits: usize) -> usize {
    let (c, cl, n) = at(s, i);
    if c == '\'' {
        if let Some(k) = contraction(s, i + 1, true) {
            return i + 1 + k;
        }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if cl == L {
        return run(s, i + n, L);
    }
    if c != '\r' && c != '\n' && cl != N && i + n < s.len() {
        let (_, cl2, n2) = at(s, i + n);
        if cl2 == L {
            return run(s, i + n + n2, L);
        }
    }
    rest_next(s, i, max_digits, false)
}

/// End of the maximal run from `i` of characters whose case group is one of `a` or `b`.
#[inline]
fn case_run(s: &str, mut i: usize, a: u8, b: u8) -> usize {
    while i < s.len() {
        let (c, _, n) = at(s, i);
        let g = case_of(c);
        if g == 0 || (g != a && g != b) {
            break;
        }
        i += n;
    }
    i
}

/// o200k's word alternatives from `p` (after the optional prefix), as a
/// backtracking engine resolves them: `[UP BOTH]*[LOW BOTH]+` (first) or
/// `[UP BOTH]+[LOW BOTH]*`, then an optional case-insensitive contraction.
/// `None` when neither matches at `p`.
#[inline]
fn o200k_word(s: &str, p: usize, second: bool) -> Option<usize> {
    if p >= s.len() {
        return None;
    }
    // The greedy `[UP BOTH]*` run.
    let a = case_run(s, p, UP, BOTH);
    let low_at_a = a < s.len() && case_of(at(s, a).0) == LOW;
    let end = if !second {
        if low_at_a {
            // `[LOW BOTH]+` from the end of the run.
            case_run(s, a, LOW, BOTH)
        } else {
            // Backtrack: the last BOTH character of the run is the `+`'s one
            // (what follows it in the run is UP, which stops it).
            let mut k = None;
            let mut j = p;
            while j < a {
                let (c, _, n) = at(s, j);
                if case_of(c) == BOTH {
                    k = Some(j + n);
                }
                j += n;
            }
            k?
        }
    } else {
        if a == p {
            return None;
        }
        case_run(s, a, LOW, BOTH)
    };
    if s.as_bytes().get(end) == Some(&b'\'') {
        if let Some(k) = contraction(s, end + 1, true) {
            return Some(end + 1 + k);
        }
    }
    Some(end)
}

/// o200k: `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|…)?`
/// `|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|…)?`
/// `|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
#[inline]
fn o200k_next(s: &str, i: usize) -> usize {
    let (c, cl, n) = at(s, i);
    // The prefix `[^\r\n\p{L}\p{N}]?` is tried with, then without, for the
    // first alternative, then likewise for the second.
    let prefix = c != '\r' && c != '\n' && cl != L && cl != N;
    for second in [false, true] {
        if prefix {
            if let Some(e) = o200k_word(s, i + n, second) {
                return e;
            }
        }
        if let Some(e) = o200k_word(s, i, second) {
            return e;
        }
    }
    rest_next(s, i, 3, true)
}

/// The alternatives Llama 3, Qwen 2 and o200k share after their letter
/// ones, at `i`: `\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*` (o200k:
/// `[\r\n/]*`, `slash`) `|\s*[\r\n]+|\s+(?!\S)|\s+`.
#[inline]
fn rest_next(s: &str, i: usize, max_digits: usize, slash: bool) -> usize {
    let b = s.as_bytes();
    let (c, cl, n) = at(s, i);
    if cl == N {
        let mut j = i + n;
        let mut k = 1;
        while k < max_digits && j < s.len() {
            let (_, c2, n2) = at(s, j);
            if c2 != N {
                break;
            }
            j += n2;
            k += 1;
        }
        return j;
    }
    let tail = |mut j: usize| {
        while j < b.len() && (b[j] == b'\r' || b[j] == b'\n' || (slash && b[j] == b'/')) {
            j += 1;
        }
        j
    };
    if c == ' ' && i + 1 < s.len() {
        let (_, cl2, n2) = at(s, i + 1);
        if cl2 == O {
            return tail(run(s, i + 1 + n2, O));
        }
    }
    if cl == O {
        return tail(run(s, i + n, O));
    }
    // W: `\s*[\r\n]+` ends after the last CR/LF of the run.
    let j = run(s, i + n, W);
    if let Some(k) = b[i..j].iter().rposition(|&x| x == b'\r' || x == b'\n') {
        return i + k + 1;
    }
    ws_tail(s, i, j)
}

/// One `Split(regex, Isolated)` step of a pipeline, on the piece `s` at the char boundary `i`:
/// `Ok(end)` when the regex matches at `i` (the match a backtracking engine finds there,
/// never empty), else `Err(next)`: no match starts before `next` (> `i`).
type Step = fn(&str, usize) -> Result<usize, usize>;

/// Run `steps` on `s` as a tokenizer.json Sequence of Isolated splits does: the first step
/// cuts `s` into its leftmost-first matches and the gaps between them, and the next steps
/// run on each of those pieces in turn. Calls `f` with the final pieces, in order.
fn split_steps<F: FnMut(&str)>(steps: &[Step], s: &str, f: &mut F) {
    let Some((&step, rest)) = steps.split_first() else {
        if !s.is_empty() {
            f(s);
        }
        return;
    };
    let (mut last, mut i) = (0, 0);
    while i < s.len() {
        match step(s, i) {
            Ok(end) => {
                if i > last {
                    split_steps(rest, &s[last..i], f);
                }
                split_steps(rest, &s[i..end], f);
                (last, i) = (end, end);
            }
            Err(next) => i = next,
        }
    }
    if last < s.len() {
        split_steps(rest, &s[last..], f);
    }
}

/// End of the maximal run from `i` of characters with one of the `bits`.
#[inline]
fn xrun(s: &str, mut i: usize, bits: u8) -> usize {
    while i < s.len() {
        let (c, _, n) = at(s, i);
        if xbits(c) & bits == 0 {
            break;
        }
        i += n;
    }
    i
}

/// `[\r\n]`.
fn step_crlf(s: &str, i: usize) -> Result<usize, usize> {
    let b = &s.as_bytes()[i..];
    match b.iter().position(|&x| x == b'\r' || x == b'\n') {
        Some(0) => Ok(i + 1),
        Some(k) => Err(i + k),
        None => Err(s.len()),
    }
}

/// `\s?X+` for the class bit `x`. A backtracking engine gives the same end whether a
/// whitespace character in `X` (deepseek-llm's punctuation has U+3000) is taken by `\s?` or
/// by `X+`: the `X` run that follows it.
#[inline]
fn opt_space_run(s: &str, i: usize, x: u8) -> Result<usize, usize> {
    let (c, cl, n) = at(s, i);
    if xbits(c) & x != 0 {
        return Ok(xrun(s, i + n, x));
    }
    if cl == W && i + n < s.len() {
        let (c2, _, n2) = at(s, i + n);
        if xbits(c2) & x != 0 {
            return Ok(xrun(s, i + n + n2, x));
        }
    }
    Err(i + n)
}

/// `\s?\p{L}+` (deepseek-coder).
fn step_space_letters(s: &str, i: usize) -> Result<usize, usize> {
    let (_, cl, n) = at(s, i);
    if cl == L {
        return Ok(run(s, i + n, L));
    }
    if cl == W && i + n < s.len() {
        let (_, cl2, n2) = at(s, i + n);
        if cl2 == L {
            return Ok(run(s, i + n + n2, L));
        }
    }
    Err(i + n)
}

/// `\s?[DS_LETTERS]+` (deepseek-llm).
fn step_ds_letters(s: &str, i: usize) -> Result<usize, usize> {
    opt_space_run(s, i, X_DS_LET)
}

/// `\s?[DS_PUNCT]+` (deepseek-llm).
fn step_ds_punct(s: &str, i: usize) -> Result<usize, usize> {
    opt_space_run(s, i, X_DS_PUNCT)
}

/// `\s?\p{P}+` (deepseek-coder).
fn step_space_punct(s: &str, i: usize) -> Result<usize, usize> {
    opt_space_run(s, i, X_P)
}

/// `\s+$`: the whitespace run that ends the piece. (Oniguruma's `$` also matches before a
/// `\n`, but the pieces this step sees hold a `\n` only as the piece `"\n"` itself.)
fn step_trailing_space(s: &str, i: usize) -> Result<usize, usize> {
    let (_, cl, n) = at(s, i);
    if cl != W {
        return Err(i + n);
    }
    let j = run(s, i + n, W);
    if j == s.len() {
        Ok(j)
    } else {
        Err(j)
    }
}

/// `X+` for the class bit `x`.
#[inline]
fn class_run(s: &str, i: usize, x: u8) -> Result<usize, usize> {
    let (c, _, n) = at(s, i);
    if xbits(c) & x != 0 {
        Ok(xrun(s, i + n, x))
    } else {
        Err(i + n)
    }
}

/// `[DS_CJK]+`.
fn step_ds_cjk(s: &str, i: usize) -> Result<usize, usize> {
    class_run(s, i, X_DS_CJK)
}

/// `[V3_CJK]+`.
fn step_v3_cjk(s: &str, i: usize) -> Result<usize, usize> {
    class_run(s, i, X_V3_CJK)
}

/// `\p{N}` (HF's `Digits(individual_digits)`).
fn step_digit(s: &str, i: usize) -> Result<usize, usize> {
    let (_, cl, n) = at(s, i);
    if cl == N {
        Ok(i + n)
    } else {
        Err(i + n)
    }
}

/// `\p{N}{1,3}`.
fn step_digits3(s: &str, i: usize) -> Result<usize, usize> {
    let (_, cl, n) = at(s, i);
    if cl != N {
        return Err(i + n);
    }
    let mut j = i + n;
    for _ in 0..2 {
        if j == s.len() {
            break;
        }
        let (_, c2, n2) = at(s, j);
        if c2 != N {
            break;
        }
        j += n2;
    }
    Ok(j)
}

/// deepseek-v3's word regex ([`V3_WORDS`]), alternative by alternative:
/// 1. `[ASCII punctuation][A-Za-z]+`;
/// 2. `[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+`: the `[L M]` run from `i`, or from the next
///    character after a prefix outside `\r \n L P S` (a mark as the prefix gives the same end);
/// 3. ` ?[\p{P}\p{S}]+[\r\n]*`;
/// 4. `\s*[\r\n]+|\s+(?!\S)|\s+` as in Llama 3 ([`rest_next`]).
///
/// Nothing matches at a digit (the first step isolated them) or at a character outside
/// `L M P S W` that no letter follows: those are left in the gaps.
fn step_v3_words(s: &str, i: usize) -> Result<usize, usize> {
    let b = s.as_bytes();
    let (c, cl, n) = at(s, i);
    if b[i].is_ascii_punctuation() && b.get(i + 1).is_some_and(u8::is_ascii_alphabetic) {
        let mut j = i + 2;
        while j < b.len() && b[j].is_ascii_alphabetic() {
            j += 1;
        }
        return Ok(j);
    }
    let x = xbits(c);
    if x & X_LM != 0 {
        return Ok(xrun(s, i + n, X_LM));
    }
    let prefix = c != '\r' && c != '\n' && cl != L && x & X_PS == 0;
    if prefix && i + n < s.len() {
        let (c2, _, n2) = at(s, i + n);
        if xbits(c2) & X_LM != 0 {
            return Ok(xrun(s, i + n + n2, X_LM));
        }
    }
    let tail = |mut j: usize| {
        while j < b.len() && (b[j] == b'\r' || b[j] == b'\n') {
            j += 1;
        }
        j
    };
    if c == ' ' && i + 1 < s.len() {
        let (c2, _, n2) = at(s, i + 1);
        if xbits(c2) & X_PS != 0 {
            return Ok(tail(xrun(s, i + 1 + n2, X_PS)));
        }
    }
    if x & X_PS != 0 {
        return Ok(tail(xrun(s, i + n, X_PS)));
    }
    if cl != W {
        return Err(i + n);
    }
    let j = run(s, i + n, W);
    if let Some(k) = b[i..j].iter().rposition(|&x| x == b'\r' || x == b'\n') {
        return Ok(i + k + 1);
    }
    Ok(ws_tail(s, i, j))
}

/// The steps of each multi-step pipeline (tokenizer.json's Sequence; see [`regex_of`]).
fn steps_of(p: PreTokenizer) -> &'static [Step] {
    match p {
        PreTokenizer::DeepseekLlm => &[
            step_crlf,
            step_ds_letters,
            step_ds_punct,
            step_trailing_space,
            step_ds_cjk,
            step_digit,
        ],
        PreTokenizer::DeepseekCoder => &[
            step_crlf,
            step_space_letters,
            step_space_punct,
            step_ds_cjk,
            step_digit,
        ],
        PreTokenizer::DeepseekV3 => &[step_digits3, step_v3_cjk, step_v3_words],
        _ => &[],
    }
}

/// Call `f` with every piece of `s` under pre-tokenizer `p`, in order. The pieces tile `s`.
pub fn split(p: PreTokenizer, s: &str, mut f: impl FnMut(&str)) {
    let mut i = 0;
    match p {
        PreTokenizer::None => {
            if !s.is_empty() {
                f(s)
            }
        }
        PreTokenizer::Gpt2 => {
            while i < s.len() {
                let j = gpt2_next(s, i);
                f(&s[i..j]);
                i = j;
            }
        }
        PreTokenizer::Llama3 | PreTokenizer::Qwen2 => {
            let m = if p == PreTokenizer::Llama3 { 3 } else { 1 };
            while i < s.len() {
                let j = llama3_next(s, i, m);
                f(&s[i..j]);
                i = j;
            }
        }
        PreTokenizer::O200k => {
            while i < s.len() {
                let j = o200k_next(s, i);
                f(&s[i..j]);
                i = j;
            }
        }
        PreTokenizer::Smollm => {
            // Every \p{N} is a piece of its own; the GPT-2 regex runs on the rest.
            while i < s.len() {
                let (_, cl, n) = at(s, i);
                if cl == N {
                    f(&s[i..i + n]);
                    i += n;
                    continue;
                }
                let mut e = i;
                while e < s.len() {
                    let (_, c2, n2) = at(s, e);
                    if c2 == N {
                        break;
                    }
                    e += n2;
                }
                let sub = &s[i..e];
                let mut k = 0;
                while k < sub.len() {
                    let j = gpt2_next(sub, k);
                    f(&sub[k..j]);
                    k = j;
                }
                i = e;
            }
        }
        PreTokenizer::DeepseekLlm | PreTokenizer::DeepseekCoder | PreTokenizer::DeepseekV3 => {
            split_steps(steps_of(p), s, &mut f)
        }
    }
}

/// deepseek-v3's last split: ASCII punctuation with the ASCII letters after it, letters and
/// marks with an optional prefix, punctuation and symbols with trailing newlines, whitespace
/// as Llama 3.
pub const V3_WORDS: &str = concat!(
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+",
    "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
);

/// The regexes each pre-tokenizer implements, as the Split steps of tokenizer.json (for
/// tests, docs and recognizing a tokenizer.json): the text is split by the first, each
/// piece by the next, and so on, matches and gaps alike kept (`Isolated`). A [`DIGITS`]
/// step is tokenizer.json's `Digits(individual_digits)`.
///
/// The DeepSeek regexes are llama.cpp's (llama-vocab.cpp, copied from the models'
/// tokenizer.json), but for deepseek-llm's last step, `Digits` in tokenizer.json where
/// llama.cpp splits `\p{N}+`: the same ids, as that vocabulary has no token of two digits.
pub fn regex_of(p: PreTokenizer) -> &'static [&'static str] {
    const GPT2: &str =
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
    match p {
        PreTokenizer::None => &[],
        PreTokenizer::Gpt2 => &[GPT2],
        PreTokenizer::Llama3 => &[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        PreTokenizer::Qwen2 => &[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        PreTokenizer::Smollm => &[r"\p{N}", GPT2],
        PreTokenizer::O200k => &[concat!(
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        )],
        PreTokenizer::DeepseekLlm => &[
            "[\r\n]",
            concat!("\\s?", ds_letters!(), "+"),
            concat!("\\s?", ds_punct!(), "+"),
            r"\s+$",
            concat!(ds_cjk!(), "+"),
            DIGITS,
        ],
        PreTokenizer::DeepseekCoder => &[
            "[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            concat!(ds_cjk!(), "+"),
            DIGITS,
        ],
        PreTokenizer::DeepseekV3 => &[r"\p{N}{1,3}", concat!(v3_cjk!(), "+"), V3_WORDS],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(p: PreTokenizer, s: &str) -> Vec<String> {
        let mut v = Vec::new();
        split(p, s, |x| v.push(x.to_string()));
        v
    }

    #[test]
    fn gpt2_basics() {
        assert_eq!(
            pieces(PreTokenizer::Gpt2, "Hello world"),
            ["Hello", " world"]
        );
        assert_eq!(pieces(PreTokenizer::Gpt2, "a   b"), ["a", "  ", " b"]);
        assert_eq!(pieces(PreTokenizer::Gpt2, "it's  "), ["it", "'s", "  "]);
        assert_eq!(pieces(PreTokenizer::Gpt2, " \ta"), [" ", "\t", "a"]);
    }

    #[test]
    fn llama3_basics() {
        assert_eq!(pieces(PreTokenizer::Llama3, "12345 x"), ["123", "45", " x"]);
        assert_eq!(
            pieces(PreTokenizer::Llama3, "I'M ok\n\n  y"),
            ["I", "'M", " ok", "\n\n", " ", " y"]
        );
        assert_eq!(pieces(PreTokenizer::Qwen2, "12"), ["1", "2"]);
        assert_eq!(pieces(PreTokenizer::Llama3, "(hi).\n"), ["(hi", ").\n"]);
    }

    #[test]
    fn deepseek_basics() {
        assert_eq!(
            pieces(PreTokenizer::DeepseekLlm, "Hi, you 12 \u{1F600} \n"),
            ["Hi", ",", " you", " ", "1", "2", " \u{1F600}", " ", "\n"]
        );
        assert_eq!(
            pieces(PreTokenizer::DeepseekV3, "It's 12345 (ok)\n\n日本"),
            ["It", "'s", " ", "123", "45", " (", "ok", ")\n\n", "日本"]
        );
        assert_eq!(
            pieces(PreTokenizer::DeepseekCoder, "fn x()\r\n"),
            ["fn", " x", "()", "\r", "\n"]
        );
    }

    #[test]
    fn deepseek_class_bits() {
        // A class string that failed to parse would leave its table empty.
        for pat in [DS_LETTERS, DS_PUNCT, DS_CJK, V3_CJK] {
            assert!(!class_ranges(pat).is_empty(), "{pat}");
        }
        let has = |c: char, x: u8| xbits(c) & x == x;
        assert!(has('\u{b5}', X_DS_LET | X_LM) && !has('\u{b5}', X_DS_PUNCT));
        assert!(has('\u{10400}', X_DS_LET | X_LM)); // astral, Deseret
        assert!(has('\u{1D539}', X_LM) && !has('\u{1D539}', X_DS_LET));
        assert!(has('\u{3000}', X_DS_PUNCT) && class_of('\u{3000}') == W);
        assert!(has('\u{0301}', X_LM) && !has('a', X_PS));
        assert!(has('$', X_PS) && !has('$', X_P) && has('!', X_P | X_PS));
        assert!(has('\u{800}', X_DS_CJK) && !has('\u{800}', X_V3_CJK));
        assert!(has('\u{30AB}', X_DS_CJK | X_V3_CJK) && !has('\u{9FA6}', X_V3_CJK));
        assert_eq!(xbits('\u{10FFFF}'), 0);
        assert_eq!(&xtables().bmp[..128], &X_ASCII[..]);
    }

    #[test]
    fn classes() {
        assert_eq!(class_of('é'), L);
        assert_eq!(class_of('日'), L);
        assert_eq!(class_of('٣'), N);
        assert_eq!(class_of('\u{3000}'), W);
        assert_eq!(class_of('😀'), O);
        assert_eq!(class_of('𝔹'), L);
    }
}
