//! GBT1 reader: one hand-made-bytes test per error, round trips, O(1) load.

use crate::common::*;
use gpack_tokenizer::gbt1::{self, Gbt1};
use gpack_tokenizer::{Error, Tokenizer};

fn small() -> Vec<u8> {
    hf_gbt1("bpe2048").to_vec()
}

#[test]
fn parse_ok_and_deep_valid() {
    for name in NAMES {
        let g = Gbt1::parse(hf_gbt1(name)).unwrap();
        g.validate_deep().unwrap();
    }
    Gbt1::parse(gemma_spm_gbt1())
        .unwrap()
        .validate_deep()
        .unwrap();
}

#[test]
fn errors_each_variant() {
    let b = small();
    assert!(matches!(
        Gbt1::parse(&b[..10]),
        Err(Error::Truncated { .. })
    ));
    let mut m = b.clone();
    m[0] = b'X';
    assert!(matches!(Gbt1::parse(&m), Err(Error::BadMagic { .. })));
    let mut m = b.clone();
    m[4] = 9;
    assert!(matches!(
        Gbt1::parse(&m),
        Err(Error::UnsupportedVersion { found: 9, .. })
    ));
    let mut m = b.clone();
    m[11] = 0x80;
    assert!(matches!(Gbt1::parse(&m), Err(Error::UnknownFlags { .. })));
    let mut m = b.clone();
    m[12] = 7;
    assert!(matches!(
        Gbt1::parse(&m),
        Err(Error::Invalid {
            what: "model kind",
            ..
        })
    ));
    let mut m = b.clone();
    m.push(0);
    assert!(matches!(Gbt1::parse(&m), Err(Error::SizeMismatch { .. })));
    let mut m = b.clone();
    m[48..52].copy_from_slice(&3u32.to_le_bytes());
    assert!(matches!(
        Gbt1::parse(&m),
        Err(Error::Invalid {
            what: "token hash slots",
            ..
        })
    ));
    let mut m = b.clone();
    m[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Gbt1::parse(&m),
        Err(Error::Invalid {
            what: "vocab size",
            ..
        })
    ));
    let mut m = b.clone();
    m[24..28].copy_from_slice(&999_999u32.to_le_bytes());
    assert!(matches!(
        Gbt1::parse(&m),
        Err(Error::TokenOutOfRange { .. })
    ));
    let mut m = b.clone();
    m[100] = 1;
    assert!(matches!(
        Gbt1::parse(&m),
        Err(Error::Invalid {
            what: "reserved header bytes",
            ..
        })
    ));
    let mut m = b.clone();
    m[64..72].copy_from_slice(&1u64.to_le_bytes());
    assert!(matches!(
        Gbt1::parse(&m),
        Err(Error::Invalid {
            what: "total size",
            ..
        })
    ));
}

#[test]
fn corrupt_entries_read_as_absent() {
    // Scribble over the whole body: parse may fail or succeed, encode must not panic and
    // must return ids in range.
    let b = small();
    for seed in 0..64u64 {
        let mut m = b.clone();
        let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = gbt1::HEADER_SIZE + (x as usize % (m.len() - gbt1::HEADER_SIZE));
            m[at] = (x >> 32) as u8;
        }
        if let Ok(t) = Tokenizer::from_bytes(&m) {
            let ids = t.encode("Hello world <|im_start|> 123 héllo", true);
            assert!(ids.iter().all(|&i| i < t.vocab_size()));
            let _ = t.decode(&ids);
            let _ = t.gbt1().validate_deep();
        }
    }
}

#[test]
fn spec_roundtrip_through_gbt1() {
    let s = hf_spec("spm2048");
    let g = s.to_gbt1().unwrap();
    let p = Gbt1::parse(&g).unwrap();
    assert_eq!(p.vocab_size() as usize, s.tokens.len());
    assert_eq!(p.n_merges() as usize, s.merges.len());
    for (i, t) in s.tokens.iter().enumerate() {
        assert_eq!(p.token_bytes(i as u32), Some(t.bytes.as_slice()));
        assert_eq!(p.token_type(i as u32), Some(t.ty));
    }
    for (r, m) in s.merges.iter().enumerate() {
        assert_eq!(p.merge(r as u32), Some(*m));
    }
    assert_eq!(p.chat_template(), s.chat_template.as_deref());
}

#[test]
fn load_is_fast_for_gemma() {
    // 262,144 tokens: parse must not touch the entries.
    let b = gemma_spm_gbt1();
    let t0 = std::time::Instant::now();
    let mut n = 0;
    for _ in 0..1000 {
        n += Gbt1::parse(std::hint::black_box(b)).unwrap().vocab_size();
    }
    let per = t0.elapsed() / 1000;
    assert_eq!(n, 262_144_000);
    assert!(
        per < std::time::Duration::from_millis(1),
        "parse took {per:?}"
    );
}

#[test]
fn write_read_write_is_identity() {
    for name in NAMES {
        let b = hf_gbt1(name);
        let again = Gbt1::parse(b)
            .unwrap()
            .to_spec()
            .unwrap()
            .to_gbt1()
            .unwrap();
        assert!(again == b, "{name}");
    }
    let b = gemma_spm_gbt1();
    assert!(
        Gbt1::parse(b)
            .unwrap()
            .to_spec()
            .unwrap()
            .to_gbt1()
            .unwrap()
            == b
    );
}

#[test]
fn stop_ids() {
    let t = Tokenizer::from_bytes(hf_gbt1("smollm2")).unwrap();
    let im_end = t.token_to_id("<|im_end|>").unwrap();
    assert!(t.stop_ids().contains(&im_end));
    // The turn's start marker never stops; the end-of-text token does.
    let im_start = t.token_to_id("<|im_start|>").unwrap();
    assert!(!t.stop_ids().contains(&im_start));
    assert!(t
        .stop_ids()
        .contains(&t.token_to_id("<|endoftext|>").unwrap()));
    let t = Tokenizer::from_bytes(hf_gbt1("spm2048")).unwrap();
    let eot = t.token_to_id("<end_of_turn>").unwrap();
    assert!(t.stop_ids().contains(&eot));
    assert_eq!(t.stop_ids()[0], t.eos().unwrap());
}

/// End-of-turn/message ids from the metadata: stored under their flag, read
/// back, stops; without the flag the bytes must stay 0, with it the ids must
/// be in the vocabulary.
#[test]
fn end_of_turn_ids_from_metadata() {
    let mut spec = hf_spec("bpe2048");
    // A plain token no chat rule knows: only the metadata makes it a stop.
    let word = 300u32;
    let plain = Tokenizer::from_bytes(&spec.to_gbt1().unwrap())
        .unwrap()
        .stop_ids();
    assert!(!plain.contains(&word));
    spec.eot = Some(word);
    spec.eom = Some(word + 1);
    let g = spec.to_gbt1().unwrap();
    let p = Gbt1::parse(&g).unwrap();
    assert_eq!((p.eot(), p.eom()), (Some(word), Some(word + 1)));
    assert_ne!(p.flags() & gbt1::FLAG_END_IDS, 0);
    assert_eq!(p.to_spec().unwrap().to_gbt1().unwrap(), g);
    let stops = Tokenizer::from_bytes(&g).unwrap().stop_ids();
    assert_eq!(&stops[..3], &[plain[0], word, word + 1]);
    // Without the flag, the ids' bytes are reserved.
    let flags_at = 8;
    let mut b = g.clone();
    let f = u32::from_le_bytes(b[flags_at..flags_at + 4].try_into().unwrap());
    b[flags_at..flags_at + 4].copy_from_slice(&(f & !gbt1::FLAG_END_IDS).to_le_bytes());
    assert!(matches!(Gbt1::parse(&b), Err(Error::Invalid { .. })));
    // With it, an id past the vocabulary is refused.
    let mut b = g.clone();
    b[84..88].copy_from_slice(&1_000_000u32.to_le_bytes());
    assert!(matches!(
        Gbt1::parse(&b),
        Err(Error::TokenOutOfRange { id: 1_000_000, .. })
    ));
    // Files without end ids keep the pre-flag bytes (readable by older readers).
    let plain_g = hf_spec("bpe2048").to_gbt1().unwrap();
    assert_eq!(
        Gbt1::parse(&plain_g).unwrap().flags() & gbt1::FLAG_END_IDS,
        0
    );
    assert!(plain_g[84..128].iter().all(|&x| x == 0));
}

#[test]
fn summary() {
    let s = Gbt1::parse(hf_gbt1("smollm2")).unwrap().summary_json();
    assert_eq!(s["vocab_size"], 49152);
    assert_eq!(s["model"], "byte-level-bpe");
    assert_eq!(s["pre_tokenizer"], "smollm");
    let s = Gbt1::parse(gemma_spm_gbt1()).unwrap().summary_json();
    assert_eq!(s["model"], "sentencepiece-bpe");
    assert!(s["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "char_pseudo_ids"));
}

#[test]
fn split_token_with_partial_utf8_does_not_panic() {
    // A (hand-made) vocabulary whose split token is the first byte of "é".
    use gpack_tokenizer::{
        MergeMode, ModelKind, PreTokenizer, SpecToken, TokenType, TokenizerSpec,
    };
    let mut tokens: Vec<SpecToken> = (0..=255u8)
        .map(|b| SpecToken::normal(vec![b], TokenType::Normal, 0.0))
        .collect();
    tokens.push(SpecToken {
        split: true,
        special: true,
        rstrip: true,
        lstrip: true,
        ..SpecToken::normal(vec![0xC3], TokenType::Control, 0.0)
    });
    let spec = TokenizerSpec {
        model: ModelKind::ByteLevelBpe,
        pre: PreTokenizer::Gpt2,
        tokens,
        merges: vec![],
        merge_ranks: None,
        merge_mode: MergeMode::HfQueue,
        bos: None,
        eos: None,
        pad: None,
        unk: None,
        eot: None,
        eom: None,
        add_bos: false,
        add_eos: false,
        add_space_prefix: false,
        byte_fallback: false,
        ignore_merges: false,
        chat_template: None,
        normalize_nfc: false,
    };
    let g = spec.to_gbt1().unwrap();
    let t = Tokenizer::from_bytes(&g).unwrap();
    assert_eq!(t.decode(&t.encode(" é é", false)), " é é");
}

/// The writer's tables for the real tokenizers (49,152 and 262,144 tokens
/// among them) place every token and merge far inside MAX_PROBES, so the
/// lookup bound never hides an entry of a real file.
#[test]
fn real_tables_probe_far_inside_the_bound() {
    for (name, b) in NAMES
        .iter()
        .map(|n| (*n, hf_gbt1(n)))
        .chain([("gemma3 spm", gemma_spm_gbt1())])
    {
        let g = Gbt1::parse(b).unwrap();
        let (tokens, pairs) = g.longest_probes();
        eprintln!("{name}: longest probe {tokens} (tokens), {pairs} (merges)");
        assert!(
            tokens > 0 && tokens <= gbt1::MAX_PROBES / 16 && pairs <= gbt1::MAX_PROBES / 16,
            "{name}: {tokens} {pairs}"
        );
    }
}
