//! The DeepSeek pre-tokenizers (`deepseek-llm`, `deepseek-coder`, `deepseek-v3`) against HF
//! `tokenizers` (Python), from testdata/tokenizer/scripts/make_pretok_refs.py:
//! - the pieces of every corpus line, of the whole corpus, of the tricky strings and of the
//!   script's edge-case and random strings;
//! - the ids of llama.cpp's DeepSeek LLM / Coder vocabulary GGUFs (models/ggml-vocab-*.gguf,
//!   made from deepseek-llm-7b-base = DeepSeek-V2's tokenizer and deepseek-coder-6.7b-base):
//!   llama.cpp's own test strings (.inp, with the real HF tokenizers' ids in .out), every
//!   corpus line and the tricky strings;
//! - the tokenizer.json pipelines the script used are recognized by `from_hf_json`.

use crate::common::*;
use gpack_tokenizer::pretok::split;
use gpack_tokenizer::{PreTokenizer, Tokenizer, TokenizerSpec};

const NAMES: [&str; 3] = ["deepseek-llm", "deepseek-coder", "deepseek-v3"];

fn refs() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(testdata().join("pretok/refs.json")).unwrap()).unwrap()
}

fn pieces(p: PreTokenizer, s: &str) -> Vec<String> {
    let mut v = Vec::new();
    split(p, s, |x| v.push(x.to_string()));
    v
}

fn gguf_tokenizer(name: &str) -> Tokenizer<'static> {
    let b = gunzip(&testdata().join(name).join("tokenizer.gguf.gz"));
    let f = gpack_ingest::gguf::parse(&b).unwrap();
    let spec = TokenizerSpec::from_gguf(&f.metadata).unwrap();
    assert_eq!(spec.pre, PreTokenizer::from_gguf_name(name).unwrap());
    let g: &'static [u8] = Box::leak(spec.to_gbt1().unwrap().into_boxed_slice());
    Tokenizer::from_bytes(g).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn pieces_match_tokenizers_on_corpus_lines_and_whole() {
    let lines: Vec<&str> = corpus().split('\n').collect();
    for name in NAMES {
        let p = PreTokenizer::from_gguf_name(name).unwrap();
        let recs = records(&gunzip(
            &testdata().join(format!("pretok/{name}.splits.u32le.gz")),
        ));
        assert_eq!(recs.len(), lines.len() + 1, "{name}");
        let texts = lines.iter().copied().chain([corpus()]);
        for (k, (text, want)) in texts.zip(&recs).enumerate() {
            let mut got = Vec::new();
            split(p, text, |x| got.push(x.len() as u32));
            if &got != want {
                let mut at = 0;
                let want_pieces: Vec<&str> = want
                    .iter()
                    .map(|&n| {
                        let s = &text[at..at + n as usize];
                        at += n as usize;
                        s
                    })
                    .collect();
                let got_pieces = pieces(p, text);
                let d = got_pieces
                    .iter()
                    .zip(&want_pieces)
                    .position(|(a, b)| a != b)
                    .unwrap_or(got_pieces.len().min(want_pieces.len()));
                panic!(
                    "{name}: record {k} differs at piece {d}:\n got  {:?}\n want {:?}",
                    &got_pieces[d..(d + 5).min(got_pieces.len())],
                    &want_pieces[d..(d + 5).min(want_pieces.len())]
                );
            }
        }
    }
}

/// The tricky strings, and the script's `extra` ones: each step's edge cases, then 500
/// random strings over characters of every class the regexes name.
#[test]
fn pieces_match_tokenizers_on_tricky_and_extra_strings() {
    let r = refs();
    let tricky = tricky()["strings"].as_array().unwrap().clone();
    let extra = r["extra"].as_array().unwrap();
    assert!(extra.len() > 500);
    for (strings, key) in [(&tricky, "splits"), (extra, "extra_splits")] {
        for name in NAMES {
            let p = PreTokenizer::from_gguf_name(name).unwrap();
            let want = r[key][name].as_array().unwrap();
            assert_eq!(want.len(), strings.len(), "{name}");
            for (s, w) in strings.iter().zip(want) {
                let s = s.as_str().unwrap();
                let w: Vec<&str> = w
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap())
                    .collect();
                assert_eq!(pieces(p, s), w, "{name}: {s:?}");
            }
        }
    }
}

/// llama.cpp's tokenizer test of these vocabularies (tests/test-tokenizer-0 with
/// models/ggml-vocab-NAME.gguf.inp / .out): the .out ids are the HF tokenizer's.
#[test]
fn llamacpp_vocab_tests_pass() {
    for name in ["deepseek-llm", "deepseek-coder"] {
        let tok = gguf_tokenizer(name);
        let d = testdata().join(name);
        let inp = std::fs::read_to_string(d.join(format!("ggml-vocab-{name}.gguf.inp"))).unwrap();
        let out = std::fs::read_to_string(d.join(format!("ggml-vocab-{name}.gguf.out"))).unwrap();
        // As test-tokenizer-0.cpp reads them: inputs end with the separator, one line of
        // ids per input.
        let inputs: Vec<&str> = inp
            .strip_suffix("\n__ggml_vocab_test__\n")
            .unwrap()
            .split("\n__ggml_vocab_test__\n")
            .collect();
        let outputs: Vec<Vec<u32>> = out
            .lines()
            .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
            .collect();
        assert_eq!(inputs.len(), 46, "{name}");
        assert_eq!(inputs.len(), outputs.len(), "{name}");
        for (s, want) in inputs.iter().zip(&outputs) {
            assert_eq!(&tok.encode(s, false), want, "{name}: {s:?}");
            assert_eq!(tok.decode(want), *s, "{name} decode: {s:?}");
        }
    }
}

#[test]
fn vocab_ids_match_tokenizers_on_corpus_lines_and_tricky() {
    let r = refs();
    let lines: Vec<&str> = corpus().split('\n').collect();
    let strings = tricky()["strings"].as_array().unwrap().clone();
    for name in ["deepseek-llm", "deepseek-coder"] {
        let tok = gguf_tokenizer(name);
        let want = records(&gunzip(&testdata().join(name).join("lines_ids.u32le.gz")));
        assert_eq!(want.len(), lines.len(), "{name}");
        let bad: Vec<usize> = (0..lines.len())
            .filter(|&k| tok.encode(lines[k], false) != want[k])
            .collect();
        if let Some(&k) = bad.first() {
            panic!(
                "{name}: {} lines differ; first is line {k} {:?}\n got  {:?}\n want {:?}",
                bad.len(),
                lines[k],
                tok.encode(lines[k], false),
                want[k]
            );
        }
        let want = r["ids"][name].as_array().unwrap();
        assert_eq!(want.len(), strings.len(), "{name}");
        for (s, w) in strings.iter().zip(want) {
            let s = s.as_str().unwrap();
            assert_eq!(tok.encode(s, false), ids(w), "{name}: {s:?}");
        }
    }
}

/// The pipelines as tokenizer.json spells them (the script's, with `Digits`) give the same
/// pre-tokenizer from `from_hf_json`; a Sequence with one step changed is refused.
#[test]
fn tokenizer_json_pipelines_are_recognized() {
    let r = refs();
    let base: serde_json::Value =
        serde_json::from_slice(&gunzip(&testdata().join("bpe2048/tokenizer.json.gz"))).unwrap();
    for name in NAMES {
        let steps = r["pipelines"][name].clone();
        let mut j = base.clone();
        j["pre_tokenizer"] = serde_json::json!({"type": "Sequence", "pretokenizers": steps});
        let spec = TokenizerSpec::from_hf_json(&serde_json::to_vec(&j).unwrap(), None).unwrap();
        assert_eq!(
            spec.pre,
            PreTokenizer::from_gguf_name(name).unwrap(),
            "{name}"
        );
        // A step dropped, or a regex changed: refused, not approximated.
        let mut k = j.clone();
        k["pre_tokenizer"]["pretokenizers"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        let e = TokenizerSpec::from_hf_json(&serde_json::to_vec(&k).unwrap(), None);
        assert!(
            matches!(e, Err(gpack_tokenizer::Error::Unsupported { .. })),
            "{name}"
        );
        let mut k = j.clone();
        k["pre_tokenizer"]["pretokenizers"][1]["pattern"]["Regex"] = "\\s?\\p{L}+ ".into();
        let e = TokenizerSpec::from_hf_json(&serde_json::to_vec(&k).unwrap(), None);
        assert!(
            matches!(e, Err(gpack_tokenizer::Error::Unsupported { .. })),
            "{name}"
        );
    }
}

/// The GGUF names of the new families and llama.cpp's defaults attached to them.
#[test]
fn gguf_pre_names_and_defaults() {
    use gpack_tokenizer::GgufPre;
    let g = |n: &str| PreTokenizer::from_gguf(n).unwrap();
    let plain = |pre| GgufPre {
        pre,
        ignore_merges: false,
        add_bos: false,
    };
    assert_eq!(g("deepseek-llm"), plain(PreTokenizer::DeepseekLlm));
    assert_eq!(g("deepseek-coder"), plain(PreTokenizer::DeepseekCoder));
    assert_eq!(g("deepseek-v3"), plain(PreTokenizer::DeepseekV3));
    assert_eq!(g("dbrx"), plain(PreTokenizer::Llama3));
    assert_eq!(g("smaug-bpe"), plain(PreTokenizer::Llama3));
    assert_eq!(g("olmo"), plain(PreTokenizer::Gpt2));
    assert_eq!(
        g("llama-bpe"),
        GgufPre {
            pre: PreTokenizer::Llama3,
            ignore_merges: true,
            add_bos: true
        }
    );
    for p in [
        PreTokenizer::DeepseekLlm,
        PreTokenizer::DeepseekCoder,
        PreTokenizer::DeepseekV3,
    ] {
        assert_eq!(PreTokenizer::from_u8(p as u8), Some(p));
        assert_eq!(PreTokenizer::from_gguf_name(p.gguf_name()).unwrap(), p);
    }
    for bad in ["default", "deepseek", "kimi-k2", ""] {
        assert!(matches!(
            PreTokenizer::from_gguf_name(bad),
            Err(gpack_tokenizer::Error::Unsupported { .. })
        ));
    }
}

/// The whole pipeline (pieces, then byte-level BPE) against the `tokenizers` crate: the
/// bpe2048 vocabulary with each DeepSeek pre-tokenizer, the whole corpus and the tricky
/// strings (peer.rs does the same for the single-regex pre-tokenizers).
#[test]
fn pipelines_match_tokenizers_crate() {
    let r = refs();
    let base: serde_json::Value =
        serde_json::from_slice(&gunzip(&testdata().join("bpe2048/tokenizer.json.gz"))).unwrap();
    for name in NAMES {
        let mut j = base.clone();
        j["pre_tokenizer"] =
            serde_json::json!({"type": "Sequence", "pretokenizers": r["pipelines"][name]});
        let (g, peer) = gbt1_and_peer(&j);
        let ours = Tokenizer::from_bytes(&g).unwrap();
        let want = peer.encode(corpus(), false).unwrap().get_ids().to_vec();
        assert_eq!(ours.encode(corpus(), false), want, "{name}: whole corpus");
        for t in tricky()["strings"].as_array().unwrap() {
            let t = t.as_str().unwrap();
            let want = peer.encode(t, false).unwrap().get_ids().to_vec();
            assert_eq!(ours.encode(t, false), want, "{name}: {t:?}");
        }
    }
}
