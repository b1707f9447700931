//! GGUF builder: tokenizer-only GGUFs extracted from the real SmolLM2 GGUF and the tiny
//! models' GGUFs give the same ids as the tokenizer.json path.

use crate::common::*;
use gpack_tokenizer::{ModelKind, Tokenizer, TokenizerSpec};

pub fn gguf_spec(name: &str) -> TokenizerSpec {
    let b = gunzip(&testdata().join(name).join("tokenizer.gguf.gz"));
    let f = gpack_ingest::gguf::parse(&b).unwrap();
    TokenizerSpec::from_gguf(&f.metadata).unwrap()
}

pub fn smollm2_gguf_gbt1() -> Vec<u8> {
    gguf_spec("smollm2").to_gbt1().unwrap()
}

#[test]
fn gguf_and_json_give_identical_ids() {
    for name in ["smollm2", "bpe2048", "spm2048"] {
        let g = gguf_spec(name).to_gbt1().unwrap();
        let a = Tokenizer::from_bytes(&g).unwrap();
        let b = Tokenizer::from_bytes(hf_gbt1(name)).unwrap();
        assert_eq!(a.vocab_size(), b.vocab_size(), "{name}");
        let ids = a.encode(corpus(), false);
        assert_eq!(ids, b.encode(corpus(), false), "{name}: whole corpus");
        assert_eq!(
            ids,
            corpus_ids(name, "corpus_ids.u32le.gz"),
            "{name}: reference"
        );
        for l in corpus().split('\n').step_by(7) {
            assert_eq!(a.encode(l, false), b.encode(l, false), "{name}: {l:?}");
        }
        assert_eq!(a.bos(), b.bos(), "{name} bos");
        assert_eq!(a.eos(), b.eos(), "{name} eos");
        assert_eq!(a.chat_template(), b.chat_template(), "{name} template");
    }
}

#[test]
fn gguf_model_kinds() {
    assert_eq!(gguf_spec("smollm2").model, ModelKind::ByteLevelBpe);
    assert_eq!(gguf_spec("spm2048").model, ModelKind::SentencePieceBpe);
}

#[test]
fn gguf_missing_keys_are_errors() {
    let m: gpack_ingest::Metadata = std::iter::empty().collect();
    assert!(matches!(
        TokenizerSpec::from_gguf(&m),
        Err(gpack_tokenizer::Error::Missing { .. })
    ));
}

#[test]
fn load_any_detects_formats() {
    let dir = std::env::temp_dir().join(format!("gpack-tok-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let g = dir.join("t.gguf");
    std::fs::write(&g, gunzip(&testdata().join("bpe2048/tokenizer.gguf.gz"))).unwrap();
    let j = dir.join("tokenizer.json");
    std::fs::write(&j, gunzip(&testdata().join("bpe2048/tokenizer.json.gz"))).unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        gunzip(&testdata().join("bpe2048/tokenizer_config.json.gz")),
    )
    .unwrap();
    let b = dir.join("t.gbt1");
    std::fs::write(&b, hf_gbt1("bpe2048")).unwrap();
    let want = Tokenizer::from_bytes(hf_gbt1("bpe2048"))
        .unwrap()
        .encode("Hello <|im_start|> world 123", false);
    for (p, src) in [
        (&g, "gguf"),
        (&j, "tokenizer.json"),
        (&dir, "tokenizer.json"),
        (&b, "gbt1"),
    ] {
        let l = gpack_tokenizer::load_any(p).unwrap();
        assert_eq!(l.source, src);
        assert_eq!(
            l.tokenizer()
                .unwrap()
                .encode("Hello <|im_start|> world 123", false),
            want,
            "{}",
            p.display()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A crafted SentencePiece vocabulary with one 512 KiB piece: merge
/// derivation skips it (longer than MAX_MERGED_PIECE) and still derives the
/// merges of the other pieces, at the cap included. Before, each of its
/// 524,287 split points hashed both halves (5·10^11 bytes; quadratic in the
/// piece's length: 4.9 s for a 128 KiB piece, ~80 s for this one).
#[test]
fn spm_merge_derivation_is_not_quadratic_in_a_long_piece() {
    use gpack_tokenizer::gguf::{derive_spm_merges, MAX_MERGED_PIECE};
    use gpack_tokenizer::{SpecToken, TokenType};
    let piece = |n: usize, score: f32| SpecToken::normal(vec![b'a'; n], TokenType::Normal, score);
    let tokens = vec![
        piece(1, 0.0),                     // 0
        piece(2, -1.0),                    // 1
        piece(MAX_MERGED_PIECE / 2, -2.0), // 2
        piece(MAX_MERGED_PIECE, -3.0),     // 3
        piece(1 << 19, -4.0),              // 4
    ];
    let t = std::time::Instant::now();
    let (merges, ranks) = derive_spm_merges(&tokens);
    let took = t.elapsed();
    assert!(took.as_secs_f64() < 5.0, "{took:?}");
    assert_eq!(merges, vec![[0, 0, 1], [2, 2, 3]]);
    assert_eq!(ranks, vec![0, 1]);
}
