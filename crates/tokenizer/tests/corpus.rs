//! Token ids against the references: HF `tokenizers` (whole corpus, line by line, tricky
//! strings) and llama.cpp.

use crate::common::*;
use gpack_tokenizer::Tokenizer;

fn first_diff(a: &[u32], b: &[u32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

fn check_whole(tok: &Tokenizer<'_>, expect: &[u32], label: &str) {
    let got = tok.encode(corpus(), false);
    if let Some(i) = first_diff(&got, expect) {
        let lo = i.saturating_sub(3);
        let show = |v: &[u32]| {
            v[lo.min(v.len())..(i + 5).min(v.len())]
                .iter()
                .map(|&x| (x, tok.token_text(x).unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        panic!("{label}: whole corpus differs at token {i} (got {} tokens, want {}):\n got  {:?}\n want {:?}", got.len(), expect.len(), show(&got), show(expect));
    }
}

fn check_lines(tok: &Tokenizer<'_>, expect: &[Vec<u32>], label: &str) -> (usize, usize) {
    let lines: Vec<&str> = corpus().split('\n').collect();
    assert_eq!(lines.len(), expect.len());
    let mut bad = Vec::new();
    for (k, (l, e)) in lines.iter().zip(expect).enumerate() {
        if tok.encode(l, false) != *e {
            bad.push(k);
        }
    }
    let ok = lines.len() - bad.len();
    eprintln!(
        "{label}: lines {ok}/{} identical ({:.3} %)",
        lines.len(),
        100.0 * ok as f64 / lines.len() as f64
    );
    if let Some(&k) = bad.first() {
        let got = tok.encode(lines[k], false);
        let t = |v: &[u32]| {
            v.iter()
                .map(|&x| tok.token_text(x).unwrap_or_default())
                .collect::<Vec<_>>()
        };
        panic!(
            "{label}: {} lines differ; first is line {k} {:?}\n got  {:?}\n want {:?}",
            bad.len(),
            lines[k],
            t(&got),
            t(&expect[k])
        );
    }
    (ok, lines.len())
}

#[test]
fn hf_whole_corpus_all_tokenizers() {
    for name in NAMES {
        let tok = Tokenizer::from_bytes(hf_gbt1(name)).unwrap();
        check_whole(&tok, &corpus_ids(name, "corpus_ids.u32le.gz"), name);
    }
}

#[test]
fn hf_line_by_line_all_tokenizers() {
    for name in NAMES {
        let tok = Tokenizer::from_bytes(hf_gbt1(name)).unwrap();
        check_lines(&tok, &line_ids(name), name);
    }
}

#[test]
fn hf_tricky_strings_all_tokenizers() {
    let t = tricky();
    let map = [
        ("smollm2", "smollm2-135m-instruct"),
        ("gemma3", "gemma-3-270m"),
        ("bpe2048", "bpe2048"),
        ("spm2048", "spm2048"),
    ];
    for (name, key) in map {
        let tok = Tokenizer::from_bytes(hf_gbt1(name)).unwrap();
        let rows = t["results"][key]
            .as_array()
            .unwrap_or_else(|| panic!("no tricky results for {key}"));
        for r in rows {
            let text = r["text"].as_str().unwrap();
            let want: Vec<u32> = r["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            let want_sp: Vec<u32> = r["ids_with_special"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(tok.encode(text, false), want, "{name}: {text:?}");
            assert_eq!(
                tok.encode(text, true),
                want_sp,
                "{name} (add_special): {text:?}"
            );
            assert_eq!(
                tok.decode(&want),
                r["decoded"].as_str().unwrap(),
                "{name} decode: {text:?}"
            );
        }
    }
}

#[test]
fn gemma_sentencepiece_semantics_matches_llamacpp() {
    let tok = Tokenizer::from_bytes(gemma_spm_gbt1()).unwrap();
    check_whole(
        &tok,
        &corpus_ids("gemma3", "corpus_ids.llamacpp.u32le.gz"),
        "gemma3 (llama.cpp)",
    );
    // Tricky strings: llama.cpp's ids recorded by the fixtures.
    let lc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata().join("llamacpp_check.json")).unwrap())
            .unwrap();
    let t = tricky();
    let strings = t["strings"].as_array().unwrap();
    let ids = lc["gemma-3-270m"]["tricky_llama_cpp_ids"]
        .as_array()
        .unwrap();
    let mut ok = 0;
    for (s, want) in strings.iter().zip(ids) {
        let want: Vec<u32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(s.as_str().unwrap(), false);
        assert_eq!(got, want, "{s}");
        ok += 1;
    }
    assert_eq!(ok, 24);
}

#[test]
fn hf_and_llamacpp_agreement_report() {
    // Gemma 3: HF semantics agree with HF, SentencePiece semantics with llama.cpp; report
    // the cross agreement too (the references differ on space runs).
    let hf = corpus_ids("gemma3", "corpus_ids.u32le.gz");
    let lc = corpus_ids("gemma3", "corpus_ids.llamacpp.u32le.gz");
    let a = Tokenizer::from_bytes(hf_gbt1("gemma3"))
        .unwrap()
        .encode(corpus(), false);
    let b = Tokenizer::from_bytes(gemma_spm_gbt1())
        .unwrap()
        .encode(corpus(), false);
    eprintln!(
        "gemma3 hf-semantics == HF: {}, == llama.cpp: {}",
        a == hf,
        a == lc
    );
    eprintln!(
        "gemma3 spm-semantics == HF: {}, == llama.cpp: {}",
        b == hf,
        b == lc
    );
    assert_eq!(a, hf);
    assert_eq!(b, lc);
}

#[test]
fn smollm2_gguf_matches_llamacpp() {
    // The fixtures' llama.cpp run (llama_tok, parse_special) on the real SmolLM2 GGUF:
    // tricky-string ids, and whole-corpus ids equal to corpus_ids.u32le.gz.
    let lc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata().join("llamacpp_check.json")).unwrap())
            .unwrap();
    let r = &lc["smollm2-135m-instruct"];
    assert_eq!(r["corpus_ids_equal"], true);
    let g = crate::gguf::smollm2_gguf_gbt1();
    let tok = Tokenizer::from_bytes(&g).unwrap();
    check_whole(
        &tok,
        &corpus_ids("smollm2", "corpus_ids.u32le.gz"),
        "smollm2 from GGUF vs llama.cpp",
    );
    let strings = tricky()["strings"].as_array().unwrap().clone();
    for (s, want) in strings
        .iter()
        .zip(r["tricky_llama_cpp_ids"].as_array().unwrap())
    {
        let want: Vec<u32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(s.as_str().unwrap(), false), want, "{s}");
    }
}

#[test]
fn smollm2_gguf_matches_llama_tokenize() {
    // llama-tokenize on the real SmolLM2 Q4_1 GGUF, whole corpus
    // (testdata/tokenizer/scripts/make_llamacpp_ids.py).
    let want = corpus_ids("smollm2", "corpus_ids.llamacpp.u32le.gz");
    let g = crate::gguf::smollm2_gguf_gbt1();
    let tok = Tokenizer::from_bytes(&g).unwrap();
    check_whole(&tok, &want, "smollm2 from GGUF vs llama-tokenize");
    // and from tokenizer.json
    check_whole(
        &Tokenizer::from_bytes(hf_gbt1("smollm2")).unwrap(),
        &want,
        "smollm2 from tokenizer.json vs llama-tokenize",
    );
}

#[test]
fn roundtrip_every_line() {
    for name in NAMES {
        let tok = Tokenizer::from_bytes(hf_gbt1(name)).unwrap();
        for l in corpus().split('\n') {
            assert_eq!(tok.decode(&tok.encode(l, false)), l, "{name}");
        }
        assert_eq!(
            tok.decode(&tok.encode(corpus(), false)),
            corpus(),
            "{name} whole"
        );
    }
}
