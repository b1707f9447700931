//! The Llama 3, Qwen 2 and o200k (gpt-oss) pipelines have no fixture vocabulary, so they are checked against
//! the `tokenizers` crate itself: the bpe2048 vocabulary with its pre-tokenizer swapped for
//! each model's (Split regex + ByteLevel without regex, as their tokenizer.json files have),
//! with and without `ignore_merges`, on the whole corpus and line by line.

use crate::common::*;
use gpack_tokenizer::{PreTokenizer, Tokenizer, TokenizerSpec};

fn variant(pre: PreTokenizer, ignore_merges: bool) -> serde_json::Value {
    let mut j: serde_json::Value =
        serde_json::from_slice(&gunzip(&testdata().join("bpe2048/tokenizer.json.gz"))).unwrap();
    let re = gpack_tokenizer::pretok::regex_of(pre)[0];
    j["pre_tokenizer"] = serde_json::json!({
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
        ]
    });
    j["model"]["ignore_merges"] = serde_json::Value::Bool(ignore_merges);
    j
}

#[test]
fn llama3_and_qwen2_pipelines_match_tokenizers_crate() {
    let lines: Vec<&str> = corpus().split('\n').collect();
    for (pre, ignore) in [
        (PreTokenizer::Llama3, true),
        (PreTokenizer::Llama3, false),
        (PreTokenizer::Qwen2, false),
        (PreTokenizer::Gpt2, false),
        (PreTokenizer::O200k, false),
    ] {
        let j = variant(pre, ignore);
        let s = serde_json::to_vec(&j).unwrap();
        let spec = TokenizerSpec::from_hf_json(&s, None).unwrap();
        assert_eq!(spec.pre, pre);
        assert_eq!(spec.ignore_merges, ignore);
        let g = spec.to_gbt1().unwrap();
        let ours = Tokenizer::from_bytes(&g).unwrap();
        let peer = tokenizers::Tokenizer::from_bytes(&s).unwrap();
        let want = peer.encode(corpus(), false).unwrap().get_ids().to_vec();
        assert_eq!(
            ours.encode(corpus(), false),
            want,
            "{pre:?} ignore_merges={ignore}: whole corpus"
        );
        for l in lines.iter().step_by(3) {
            let want = peer.encode(*l, false).unwrap().get_ids().to_vec();
            assert_eq!(
                ours.encode(l, false),
                want,
                "{pre:?} ignore_merges={ignore}: {l:?}"
            );
        }
        for t in tricky()["strings"].as_array().unwrap() {
            let t = t.as_str().unwrap();
            let want = peer.encode(t, false).unwrap().get_ids().to_vec();
            assert_eq!(ours.encode(t, false), want, "{pre:?}: {t:?}");
        }
    }
}

#[test]
fn lstrip_rstrip_added_tokens_match_tokenizers_crate() {
    let mut j: serde_json::Value =
        serde_json::from_slice(&gunzip(&testdata().join("bpe2048/tokenizer.json.gz"))).unwrap();
    for a in j["added_tokens"].as_array_mut().unwrap() {
        match a["content"].as_str().unwrap() {
            "<|im_end|>" => a["lstrip"] = true.into(),
            "<|im_start|>" => a["rstrip"] = true.into(),
            _ => {}
        }
    }
    let (g, peer) = gbt1_and_peer(&j);
    let ours = Tokenizer::from_bytes(&g).unwrap();
    for t in [
        "a  <|im_end|>  b <|im_start|>\n x",
        "<|im_start|>  \t<|im_end|>",
        "  <|im_end|>",
        "x<|im_start|>",
        "\u{3000}<|im_end|>\u{3000}",
    ] {
        let want = peer.encode(t, false).unwrap().get_ids().to_vec();
        assert_eq!(ours.encode(t, false), want, "{t:?}");
    }
}

#[test]
fn nfc_normalizer_matches_tokenizers_crate() {
    // Qwen 2's tokenizer.json has an NFC normalizer.
    let mut j = variant(PreTokenizer::Qwen2, false);
    j["normalizer"] = serde_json::json!({"type": "NFC"});
    let s = serde_json::to_vec(&j).unwrap();
    let spec = TokenizerSpec::from_hf_json(&s, None).unwrap();
    assert!(spec.normalize_nfc);
    let g = spec.to_gbt1().unwrap();
    let ours = Tokenizer::from_bytes(&g).unwrap();
    let peer = tokenizers::Tokenizer::from_bytes(&s).unwrap();
    let mut texts: Vec<String> = tricky()["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    texts.push("A\u{30a} e\u{301}<|im_start|>o\u{308}\u{301} \u{1100}\u{1161}\u{11a8}".into());
    texts.push(corpus().to_string());
    for t in &texts {
        let want = peer.encode(t.as_str(), false).unwrap().get_ids().to_vec();
        assert_eq!(ours.encode(t, false), want, "{t:?}");
    }
}

#[test]
fn llama2_style_dummy_prefix_matches_tokenizers_crate() {
    // Llama 2's tokenizer.json: Prepend("▁") + Replace(" ", "▁"), Strip decoder.
    let mut j: serde_json::Value =
        serde_json::from_slice(&gunzip(&testdata().join("spm2048/tokenizer.json.gz"))).unwrap();
    j["normalizer"] = serde_json::json!({"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u{2581}"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}]});
    j["pre_tokenizer"] = serde_json::Value::Null;
    j["decoder"] = serde_json::json!({"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]});
    let s = serde_json::to_vec(&j).unwrap();
    let spec = TokenizerSpec::from_hf_json(&s, None).unwrap();
    assert!(spec.add_space_prefix);
    let g = spec.to_gbt1().unwrap();
    let ours = Tokenizer::from_bytes(&g).unwrap();
    let peer = tokenizers::Tokenizer::from_bytes(&s).unwrap();
    let mut texts: Vec<String> = tricky()["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    texts.extend(corpus().split('\n').step_by(11).map(str::to_string));
    for t in &texts {
        let want = peer.encode(t.as_str(), true).unwrap().get_ids().to_vec();
        let got = ours.encode(t, true);
        assert_eq!(got, want, "{t:?}");
        assert_eq!(
            ours.decode(&got),
            peer.decode(&want, false).unwrap(),
            "decode {t:?}"
        );
    }
}

/// Crafted ids in a real tokenizer.json (an id of 2^64-1, which overflowed
/// `id + 1` and then indexed out of bounds, and an id past the vocabulary
/// limit) are refused with an error, never a panic.
#[test]
fn absurd_token_ids_are_errors() {
    let base: serde_json::Value =
        serde_json::from_slice(&gunzip(&testdata().join("bpe2048/tokenizer.json.gz"))).unwrap();
    for id in [u64::MAX, u64::MAX - 1, 1 << 40] {
        let mut j = base.clone();
        j["model"]["vocab"]["crafted"] = id.into();
        let s = serde_json::to_vec(&j).unwrap();
        let r = std::panic::catch_unwind(|| TokenizerSpec::from_hf_json(&s, None).map(|_| ()));
        assert!(matches!(r, Ok(Err(_))), "vocab id {id}");
        let mut j = base.clone();
        j["added_tokens"][0]["id"] = id.into();
        let s = serde_json::to_vec(&j).unwrap();
        let r = std::panic::catch_unwind(|| TokenizerSpec::from_hf_json(&s, None).map(|_| ()));
        assert!(matches!(r, Ok(Err(_))), "added token id {id}");
    }
}

/// The stop rule of a harmony vocabulary (gpt-oss's control tokens added to
/// bpe2048): `<|return|>` and `<|call|>` end a turn, `<|end|>` (the end of
/// one message: reasoning, then the answer) does not; without harmony's
/// tokens `<|end|>` stops (Phi-3) and `<|call|>` is not looked up.
#[test]
fn harmony_vocabularies_stop_on_return_and_call_not_end() {
    let with = |extra: &[&str]| {
        let mut j: serde_json::Value =
            serde_json::from_slice(&gunzip(&testdata().join("bpe2048/tokenizer.json.gz"))).unwrap();
        for (k, t) in extra.iter().enumerate() {
            let id = 2048 + k;
            j["model"]["vocab"][*t] = id.into();
            j["added_tokens"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({
                "id": id, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true}));
        }
        let s = serde_json::to_vec(&j).unwrap();
        let g = TokenizerSpec::from_hf_json(&s, None)
            .unwrap()
            .to_gbt1()
            .unwrap();
        let g: &'static [u8] = Box::leak(g.into_boxed_slice());
        Tokenizer::from_bytes(g).unwrap()
    };
    let harmony = [
        "<|start|>",
        "<|channel|>",
        "<|message|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
    ];
    let t = with(&harmony);
    assert!(gpack_tokenizer::harmony::is_harmony(&t));
    let stops = t.stop_ids();
    let id = |s: &str| t.special_id(s).unwrap();
    assert!(stops.contains(&id("<|return|>")) && stops.contains(&id("<|call|>")));
    assert!(!stops.contains(&id("<|end|>")));
    let t = with(&["<|end|>", "<|call|>"]);
    assert!(!gpack_tokenizer::harmony::is_harmony(&t));
    let stops = t.stop_ids();
    assert!(stops.contains(&t.special_id("<|end|>").unwrap()));
    assert!(!stops.contains(&t.special_id("<|call|>").unwrap()));
}
