//! `gpack tokenize`: the same ids from a .gguf, its .gpack and the HF directory.

use crate::gpack;
use std::path::Path;

#[test]
fn tokenize_agrees_across_model_files() {
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("llama.gpack");
    assert!(gpack()
        .arg("convert")
        .arg(tiny.join("llama-q8_0.gguf"))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap()
        .success());
    let text = "Hello world, <|im_start|>user 12345 naïve café\n\tend";
    let ids = |m: &Path| {
        let o = gpack().arg("tokenize").arg(m).arg(text).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let a = ids(&tiny.join("llama-q8_0.gguf"));
    assert_eq!(a, ids(&out));
    assert_eq!(a, ids(&tiny.join("hf")));
    assert!(a.split_whitespace().count() > 5);
    let o = gpack()
        .arg("tokenize")
        .arg(&out)
        .arg(text)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "gpack.tokenize.v1");
    let pieces: String = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["piece"].as_str().unwrap().to_string())
        .collect();
    assert!(
        pieces.contains("Hello") || pieces.contains("Hel"),
        "{pieces}"
    );
}
