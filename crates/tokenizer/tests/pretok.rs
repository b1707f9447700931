//! The hand-written pre-tokenizers against fancy-regex running the original regexes.

use crate::common::*;
use gpack_tokenizer::pretok::{regex_of, split};
use gpack_tokenizer::PreTokenizer;
use proptest::prelude::*;

fn oracle(p: PreTokenizer, s: &str) -> Vec<String> {
    let mut pieces = vec![s.to_string()];
    for re in regex_of(p) {
        let r = fancy_regex::Regex::new(re).unwrap();
        let mut next = Vec::new();
        for piece in &pieces {
            // HF Split/ByteLevel "Isolated": matches and the gaps between them are pieces.
            let mut last = 0;
            for m in r.find_iter(piece) {
                let m = m.unwrap();
                if m.start() > last {
                    next.push(piece[last..m.start()].to_string());
                }
                next.push(m.as_str().to_string());
                last = m.end();
            }
            if last < piece.len() {
                next.push(piece[last..].to_string());
            }
        }
        pieces = next;
    }
    pieces.retain(|x| !x.is_empty());
    pieces
}

fn mine(p: PreTokenizer, s: &str) -> Vec<String> {
    let mut v = Vec::new();
    split(p, s, |x| v.push(x.to_string()));
    v
}

const ALL: [PreTokenizer; 8] = [
    PreTokenizer::Gpt2,
    PreTokenizer::Llama3,
    PreTokenizer::Qwen2,
    PreTokenizer::Smollm,
    PreTokenizer::O200k,
    PreTokenizer::DeepseekLlm,
    PreTokenizer::DeepseekCoder,
    PreTokenizer::DeepseekV3,
];

#[test]
fn state_machines_equal_regex_on_corpus() {
    // Line by line (the regexes never cross the pieces' boundaries in a way that depends on
    // more than one character of context, but check whole paragraphs too).
    for p in ALL {
        for para in corpus().split("\n\n").take(400) {
            assert_eq!(mine(p, para), oracle(p, para), "{p:?}: {para:?}");
        }
    }
}

#[test]
fn state_machines_equal_regex_on_tricky() {
    let t = tricky();
    for p in ALL {
        for s in t["strings"].as_array().unwrap() {
            let s = s.as_str().unwrap();
            assert_eq!(mine(p, s), oracle(p, s), "{p:?}: {s:?}");
        }
    }
}

fn tricky_char() -> impl Strategy<Value = char> {
    prop_oneof![
        Just(' '),
        Just('\n'),
        Just('\r'),
        Just('\t'),
        Just('\''),
        Just('s'),
        Just('S'),
        Just('t'),
        Just('r'),
        Just('e'),
        Just('l'),
        Just('d'),
        Just('m'),
        Just('v'),
        Just('1'),
        Just('٣'),
        Just('.'),
        Just('é'),
        Just('日'),
        Just('\u{3000}'),
        Just('\u{a0}'),
        Just('😀'),
        Just('ſ'),
        Just('\u{2581}'),
        Just('\u{0301}'),
        Just('Ⅻ'),
        Just('A'),
        Just('ǅ'),
        Just('ʰ'),
        Just('/'),
        Just('\u{0903}'),
        Just('_'),
        Just('\u{b}'),
        // The DeepSeek regexes' classes: ASCII punctuation and symbols, the letter class's
        // edges (µ, Kelvin sign, an astral Deseret letter vs a mathematical one), fullwidth
        // forms, quotes, CJK / kana / Hangul, U+0800, a non-Han letter, NEL.
        Just('('),
        Just('$'),
        Just('"'),
        Just('\u{b5}'),
        Just('\u{212a}'),
        Just('\u{10400}'),
        Just('\u{1d539}'),
        Just('\u{ff21}'),
        Just('\u{ff01}'),
        Just('\u{2018}'),
        Just('\u{3002}'),
        Just('\u{304b}'),
        Just('\u{30ab}'),
        Just('\u{d55c}'),
        Just('\u{800}'),
        Just('\u{5d0}'),
        Just('\u{85}'),
        any::<char>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn state_machines_equal_regex_random(v in proptest::collection::vec(tricky_char(), 0..24)) {
        let s: String = v.into_iter().collect();
        for p in ALL {
            prop_assert_eq!(mine(p, &s), oracle(p, &s), "{:?}: {:?}", p, s);
        }
    }
}
