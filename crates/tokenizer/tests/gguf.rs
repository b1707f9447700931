//! GGUF builder: tokenizer-only GGUFs extracted from the real SmolLM2 GGUF and the tiny
//! models' GGUFs give the same ids as the tokenizer.json path.

use crate::common::*;
use gpack_tokenizer::{GgufMetadata, ModelKind, Tokenizer, TokenizerSpec};

pub fn gguf_spec(name: &str) -> TokenizerSpec {
    let b = gunzip(&testdata().join(name).join("tokenizer.gguf.gz"));
    let meta = GgufMetadata::read(&mut b.as_slice()).unwrap();
    TokenizerSpec::from_gguf(&meta).unwrap()
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
fn gguf_reader_rejects_garbage() {
    assert!(GgufMetadata::read(&mut &b"GGUF\x03\0\0\0"[..]).is_err());
    assert!(GgufMetadata::read(&mut &b"NOPE"[..]).is_err());
    let mut v = b"GGUF".to_vec();
    v.extend(3u32.to_le_bytes());
    v.extend(0u64.to_le_bytes());
    v.extend(u64::MAX.to_le_bytes());
    assert!(GgufMetadata::read(&mut v.as_slice()).is_err());
}
