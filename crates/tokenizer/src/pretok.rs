//! Hand-written pre-tokenizers: the GPT-2, Llama 3 / Qwen 2, SmolLM and o200k split
//! regexes as one-pass state machines.
//!
//! Why by hand: the regex engines (onig in HF, fancy-regex, std::regex in llama.cpp) are the
//! bottleneck of byte-level tokenizers, and these regexes only need a class lookup per
//! character and at most one character of lookahead. Each function returns the end of the
//! match a backtracking engine would find at `i`, derived alternative by alternative in the
//! comments. The test suite checks them against fancy-regex running the original regexes on
//! the corpus and on random strings.
//!
//! Character classes: `L` = `\p{L}`, `N` = `\p{N}`, `W` = `\s` (Unicode White_Space),
//! `O` = everything else. The tables come from regex-syntax, the tables of the regex crates.

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

/// Case groups of o200k: `UP` is in `[\p{Lu}\p{Lt}]`, `LOW` in `\p{Ll}`, `BOTH`
/// in `[\p{Lm}\p{Lo}\p{M}]` (both of o200k's letter sets).
pub(crate) const UP: u8 = 1;
pub(crate) const LOW: u8 = 2;
pub(crate) const BOTH: u8 = 3;

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
    }
}

/// The regex each pre-tokenizer implements (for tests and docs).
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
    fn classes() {
        assert_eq!(class_of('é'), L);
        assert_eq!(class_of('日'), L);
        assert_eq!(class_of('٣'), N);
        assert_eq!(class_of('\u{3000}'), W);
        assert_eq!(class_of('😀'), O);
        assert_eq!(class_of('𝔹'), L);
    }
}
