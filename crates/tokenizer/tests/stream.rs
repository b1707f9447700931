//! Streaming decode never emits a broken character and concatenates to `decode`.

use crate::common::*;
use gpack_tokenizer::Tokenizer;

#[test]
fn stream_equals_decode_and_never_breaks_utf8() {
    let text = "emoji 😀🎉 family 👨\u{200d}👩\u{200d}👧 日本語のテキスト ÅngströM <|im_start|>";
    for name in NAMES {
        let t = Tokenizer::from_bytes(hf_gbt1(name)).unwrap();
        let ids = t.encode(text, false);
        let mut d = t.stream_decoder();
        let mut out = String::new();
        for &id in &ids {
            let piece = d.push(id);
            assert!(
                !piece.contains('\u{FFFD}'),
                "{name}: broken char after {id}"
            );
            out.push_str(&piece);
        }
        out.push_str(&d.finish());
        assert_eq!(out, text, "{name}");
    }
}

#[test]
fn stream_holds_partial_bytes() {
    let t = Tokenizer::from_bytes(hf_gbt1("bpe2048")).unwrap();
    let g = t.gbt1();
    // Bytes of "é" = C3 A9 as two single-byte tokens.
    let a = g.byte_token(0xC3).unwrap();
    let b = g.byte_token(0xA9).unwrap();
    let mut d = t.stream_decoder();
    assert_eq!(d.push(a), "");
    assert_eq!(d.push(b), "é");
    assert_eq!(d.push(a), "");
    assert_eq!(d.finish(), "\u{FFFD}");
}
