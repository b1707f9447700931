//! The generation loop on a tiny model (token ids; text via the tokenizer).

use super::fixtures::testdata;
use gpack_runtime::{generate, GenerateConfig, GgufWeights, Model, SamplerConfig, StopReason};

#[test]
fn greedy_generate_matches_reference_and_streams() {
    let d = testdata().join("tiny/llama");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("reference.json")).unwrap()).unwrap();
    let prompt: Vec<u32> = r["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let want: Vec<u32> = r["greedy_new_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let w = GgufWeights::open(&d.join("llama-f16.gguf")).unwrap();
    let m = Model::load(&w).unwrap();
    let mut s = m.new_state(64);
    let cfg = GenerateConfig {
        max_tokens: 16,
        sampler: SamplerConfig::greedy(),
        ..GenerateConfig::default()
    };
    let mut streamed = Vec::new();
    let g = generate(&m, &mut s, &prompt, &cfg, None, |t, _| {
        streamed.push(t);
        true
    })
    .unwrap();
    assert_eq!(g.tokens, want);
    assert_eq!(streamed, want);
    assert_eq!(g.stop, StopReason::MaxTokens);

    // EOS (id 2) is the 10th greedy token: stop there, not emitted.
    let mut s = m.new_state(64);
    let cfg = GenerateConfig {
        stop_tokens: vec![2],
        ..cfg
    };
    let g = generate(&m, &mut s, &prompt, &cfg, None, |_, _| true).unwrap();
    assert_eq!(g.stop, StopReason::StopToken(2));
    assert_eq!(g.tokens, want[..9]);
}

#[test]
fn sampled_generation_is_seeded() {
    let d = testdata().join("tiny/qwen2");
    let w = GgufWeights::open(&d.join("qwen2-q8_0.gguf")).unwrap();
    let m = Model::load(&w).unwrap();
    let cfg = GenerateConfig {
        max_tokens: 24,
        sampler: SamplerConfig {
            temperature: 1.0,
            top_k: 50,
            top_p: 0.9,
            min_p: 0.01,
            repetition_penalty: 1.1,
            repeat_last_n: 16,
            seed: 1234,
        },
        ..GenerateConfig::default()
    };
    let run = || {
        let mut s = m.new_state(64);
        generate(&m, &mut s, &[1, 2, 3, 4], &cfg, None, |_, _| true)
            .unwrap()
            .tokens
    };
    let a = run();
    assert_eq!(a.len(), 24);
    assert_eq!(a, run());
}

#[test]
fn stop_strings_cut_the_text_and_are_never_streamed() {
    let d = testdata().join("tiny/llama");
    let path = d.join("llama-f16.gguf");
    let w = GgufWeights::open(&path).unwrap();
    let m = Model::load(&w).unwrap();
    let loaded = gpack_tokenizer::load_any(&path).unwrap();
    let tok = loaded.tokenizer().unwrap();
    let prompt = tok.encode("The quick brown fox", false);
    let cfg = GenerateConfig {
        max_tokens: 16,
        sampler: SamplerConfig::greedy(),
        ..GenerateConfig::default()
    };
    let mut s = m.new_state(64);
    let full = generate(&m, &mut s, &prompt, &cfg, Some(tok), |_, _| true).unwrap();
    assert_eq!(full.text, tok.decode(&full.tokens));
    // A stop string taken from the middle of the greedy text.
    let chars: Vec<char> = full.text.chars().collect();
    assert!(chars.len() >= 8, "{:?}", full.text);
    let mid = chars.len() / 2;
    let stop: String = chars[mid..mid + 3].iter().collect();
    let cut = full.text.find(&stop).unwrap();
    let cfg = GenerateConfig {
        stop_strings: vec![stop.clone()],
        ..cfg
    };
    let mut s = m.new_state(64);
    let mut streamed = String::new();
    let g = generate(&m, &mut s, &prompt, &cfg, Some(tok), |_, t| {
        streamed.push_str(t);
        true
    })
    .unwrap();
    assert_eq!(g.stop, StopReason::StopString(stop.clone()));
    assert_eq!(g.text, full.text[..cut]);
    assert_eq!(streamed, g.text, "streamed text must stop before {stop:?}");
}

#[test]
fn default_stop_tokens_include_eos_and_end_of_turn() {
    let path = testdata().join("tiny/qwen2/qwen2-f16.gguf");
    let loaded = gpack_tokenizer::load_any(&path).unwrap();
    let tok = loaded.tokenizer().unwrap();
    let stops = tok.stop_ids();
    assert_eq!(stops.first().copied(), tok.eos());
    if let Some(id) = tok.token_to_id("<|im_end|>") {
        assert!(stops.contains(&id));
    }
}
