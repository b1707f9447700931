//! Shared loaders.

use gpack_tokenizer::{MergeMode, TokenizerSpec};
use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tokenizer")
}

pub fn gunzip(path: &std::path::Path) -> Vec<u8> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut v = Vec::new();
    flate2::read::GzDecoder::new(f).read_to_end(&mut v).unwrap();
    v
}

pub fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn corpus() -> &'static str {
    static C: OnceLock<String> = OnceLock::new();
    C.get_or_init(|| std::fs::read_to_string(testdata().join("corpus.txt")).unwrap())
}

/// The four distinct tokenizers of the fixtures (the tiny/<arch>/hf tokenizer files are
/// byte-identical copies of bpe2048 and spm2048: same md5, see testdata/tokenizer/README.md).
pub const NAMES: [&str; 4] = ["smollm2", "gemma3", "bpe2048", "spm2048"];

pub fn hf_spec(name: &str) -> TokenizerSpec {
    let d = testdata().join(name);
    let j = gunzip(&d.join("tokenizer.json.gz"));
    let c = gunzip(&d.join("tokenizer_config.json.gz"));
    TokenizerSpec::from_hf_json(&j, Some(&c)).unwrap()
}

/// GBT1 bytes built from tokenizer.json (HF semantics), cached per name.
pub fn hf_gbt1(name: &str) -> &'static [u8] {
    static M: OnceLock<std::sync::Mutex<std::collections::HashMap<String, &'static [u8]>>> =
        OnceLock::new();
    let m = M.get_or_init(Default::default);
    if let Some(b) = m.lock().unwrap().get(name) {
        return b;
    }
    let b: &'static [u8] = Box::leak(hf_spec(name).to_gbt1().unwrap().into_boxed_slice());
    m.lock().unwrap().insert(name.to_string(), b);
    b
}

/// Gemma 3 from tokenizer.json with SentencePiece / llama.cpp semantics: merges from
/// scores (HF ranks), ties leftmost, and the whitespace-run pieces 138..=167 typed
/// USER_DEFINED as in the model's GGUF / tokenizer.model (the GGUF→tokenizer.json export
/// dropped that typing, see `gemma_user_defined_runs`).
pub fn gemma_spm_gbt1() -> &'static [u8] {
    static G: OnceLock<Vec<u8>> = OnceLock::new();
    G.get_or_init(|| {
        let mut s = hf_spec("gemma3");
        s.mark_user_defined(138..=167);
        let s = s.into_sentencepiece_semantics(true);
        assert_eq!(s.merge_mode, MergeMode::BestFirst);
        s.to_gbt1().unwrap()
    })
}

pub fn corpus_ids(name: &str, file: &str) -> Vec<u32> {
    u32s(&gunzip(&testdata().join(name).join(file)))
}

pub fn line_ids(name: &str) -> Vec<Vec<u32>> {
    records(&gunzip(&testdata().join(name).join("lines_ids.u32le.gz")))
}

/// `[u32 n][n x u32]` records.
pub fn records(b: &[u8]) -> Vec<Vec<u32>> {
    let v = u32s(b);
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let n = v[i] as usize;
        out.push(v[i + 1..i + 1 + n].to_vec());
        i += 1 + n;
    }
    out
}

/// GBT1 bytes and the `tokenizers` crate's tokenizer, both from the
/// tokenizer.json value `j`.
pub fn gbt1_and_peer(j: &serde_json::Value) -> (Vec<u8>, tokenizers::Tokenizer) {
    let s = serde_json::to_vec(j).unwrap();
    let g = TokenizerSpec::from_hf_json(&s, None)
        .unwrap()
        .to_gbt1()
        .unwrap();
    (g, tokenizers::Tokenizer::from_bytes(&s).unwrap())
}

pub fn tricky() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(testdata().join("tricky.json")).unwrap()).unwrap()
}
