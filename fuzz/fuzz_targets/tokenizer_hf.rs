#![no_main]
//! Fuzz the Hugging Face tokenizer import: `TokenizerSpec::from_hf_json`
//! on a `tokenizer.json` (and, after a NUL byte in the input, a
//! `tokenizer_config.json`) must never panic; whatever it accepts must
//! compile to a GBT1 that reads back and passes its deep check, and the
//! tokenizer over it must encode (ids inside the vocabulary), decode and
//! render its chat template without panicking.
//!
//! Seeds: cut-down real tokenizer.json files (fuzz/corpus/tokenizer_hf).

use gpack_tokenizer::{ChatMessage, Gbt1, Tokenizer, TokenizerSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (json, cfg) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    let Ok(spec) = TokenizerSpec::from_hf_json(json, cfg) else {
        return;
    };
    let Ok(bin) = spec.to_gbt1() else { return };
    let g = Gbt1::parse(&bin).expect("a GBT1 written from an accepted spec reads back");
    g.validate_deep()
        .expect("a GBT1 written from an accepted spec passes the deep check");
    let t = Tokenizer::new(g);
    for text in ["Hello world", "  12 ', é 😀\n\t", "<s></s><|im_start|>", ""] {
        let ids = t.encode(text, true);
        assert!(ids.iter().all(|&i| i < t.vocab_size()));
        let _ = t.decode(&ids);
    }
    let msgs = [
        ChatMessage::new("system", "be brief"),
        ChatMessage::new("user", "Hi"),
    ];
    let _ = t.apply_chat_template(&msgs, true);
});
