#![no_main]
//! Fuzz the server's request-body handling: the bytes of a
//! `/v1/chat/completions` or `/v1/completions` body through
//! `api::chat_request` / `api::completion_request` (JSON parse, shape,
//! parameter ranges, prompt checks) must never panic; what they accept is
//! then rendered through the real tiny-llama chat template and encoded, as
//! the server does before admission. The first input byte picks the
//! endpoint.
//!
//! Seeds: request bodies of the server's tests (fuzz/corpus/server_request).

use gpack_server::api::{chat_request, completion_request, ValidPrompt};
use gpack_tokenizer::{LoadedTokenizer, Tokenizer};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn loaded() -> &'static LoadedTokenizer {
    static T: OnceLock<LoadedTokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/tiny/llama/hf");
        gpack_tokenizer::load_any(&dir).expect("the tiny llama tokenizer (testdata/tiny/llama/hf)")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let tok: Tokenizer<'_> = loaded().tokenizer().expect("a valid GBT1");
    if which & 1 == 0 {
        let Ok(r) = chat_request(body) else { return };
        assert!(!r.messages.is_empty());
        assert!(r.params.stop.len() <= 4);
        if let Ok(text) = tok.apply_chat_template(&r.messages, true) {
            let ids = tok.encode(&text, false);
            assert!(ids.iter().all(|&i| i < tok.vocab_size()));
        }
    } else {
        let Ok(r) = completion_request(body, tok.vocab_size()) else {
            return;
        };
        match r.prompt {
            ValidPrompt::Text(t) => {
                let ids = tok.encode(&t, true);
                assert!(ids.iter().all(|&i| i < tok.vocab_size()));
            }
            ValidPrompt::Tokens(ids) => assert!(ids.iter().all(|&i| i < tok.vocab_size())),
        }
    }
});
