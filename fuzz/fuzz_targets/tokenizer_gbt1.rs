//! Fuzz the GBT1 reader and the encoder over it: `Gbt1::parse` must never panic; whatever
//! it accepts, every accessor, `validate_deep`, encode and decode must not panic either,
//! and encode must only return ids below the vocabulary size.
//! Half of the inputs are edits of a valid GBT1 (so the header checks are passed often).
#![no_main]

use gpack_tokenizer::{
    Gbt1, MergeMode, ModelKind, PreTokenizer, SpecToken, TokenType, Tokenizer, TokenizerSpec,
};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn valid() -> &'static [u8] {
    static V: OnceLock<Vec<u8>> = OnceLock::new();
    V.get_or_init(|| {
        let tok = |b: &[u8], ty: TokenType, split: bool| SpecToken {
            split,
            special: split,
            ..SpecToken::normal(b, ty, 0.0)
        };
        let mut tokens: Vec<SpecToken> = (0..=255u8)
            .map(|b| tok(&[b], TokenType::Normal, false))
            .collect();
        tokens.push(tok(b"he", TokenType::Normal, false)); // 256
        tokens.push(tok(b"hel", TokenType::Normal, false)); // 257
        tokens.push(tok(b"<|x|>", TokenType::Control, true)); // 258
        let spec = TokenizerSpec {
            model: ModelKind::ByteLevelBpe,
            pre: PreTokenizer::Gpt2,
            tokens,
            merges: vec![[b'h' as u32, b'e' as u32, 256], [256, b'l' as u32, 257]],
            merge_ranks: None,
            merge_mode: MergeMode::HfQueue,
            bos: Some(258),
            eos: Some(258),
            pad: None,
            unk: None,
            // The end-ids flag and fields are in the seed, for mutation.
            eot: Some(258),
            eom: None,
            add_bos: true,
            add_eos: false,
            add_space_prefix: false,
            byte_fallback: false,
            ignore_merges: false,
            chat_template: Some("{{ messages[0].content }}".into()),
            normalize_nfc: true,
        };
        spec.to_gbt1().expect("valid spec")
    })
}

fn check(bytes: &[u8]) {
    let Ok(g) = Gbt1::parse(bytes) else { return };
    let _ = g.validate_deep();
    for id in 0..g.vocab_size().min(4096) {
        let _ = (g.token_bytes(id), g.token_type(id), g.score(id));
    }
    for r in 0..g.n_merges().min(4096) {
        let _ = (g.merge(r), g.merge_priority(r));
    }
    let _ = (g.eot(), g.eom());
    let _ = (
        g.chat_template(),
        g.bos(),
        g.eos(),
        g.pad(),
        g.unk(),
        g.split_lengths().count(),
    );
    let t = Tokenizer::new(g);
    for text in ["hello <|x|> world", "  12 ', é 😀", ""] {
        let ids = t.encode(text, true);
        assert!(ids.iter().all(|&i| i < t.vocab_size()));
        let _ = t.decode(&ids);
        let mut d = t.stream_decoder();
        for &i in &ids {
            let _ = d.push(i);
        }
        let _ = d.finish();
    }
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((flag, rest)) if flag & 1 == 1 => {
            // rest = (u16 offset, u8 value) edits of a valid file.
            let mut v = valid().to_vec();
            for e in rest.chunks_exact(3) {
                let at = u16::from_le_bytes([e[0], e[1]]) as usize % v.len();
                v[at] = e[2];
            }
            check(&v);
        }
        _ => check(data),
    }
});
