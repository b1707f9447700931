//! `gpack export`: a .gpack converted with `--quant keep` gives back the
//! source GGUF's metadata (every key, in order, same values) and every
//! tensor bit for bit; the GGUF runs and generates what the source does,
//! in gpack and in llama.cpp itself.

use crate::{gpack, smollm2};
use gpack_ingest::gguf;
use std::path::{Path, PathBuf};
use std::process::Command;

fn convert(src: &Path, out: &Path, quant: &str) {
    let o = gpack()
        .arg("convert")
        .arg(src)
        .arg("-o")
        .arg(out)
        .args(["--quant", quant])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn export(g: &Path, out: &Path) -> serde_json::Value {
    let o = gpack()
        .arg("export")
        .arg(g)
        .arg("-o")
        .arg(out)
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A tensor: name, type name, dims, bytes.
type Tensor = (String, String, Vec<u64>, Vec<u8>);

/// Metadata and tensors of a GGUF, tensors sorted by name.
fn contents(p: &Path) -> (gpack_ingest::Metadata, Vec<Tensor>) {
    let bytes = std::fs::read(p).unwrap();
    let f = gguf::parse(&bytes).unwrap();
    let mut t: Vec<_> = f
        .tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.ggml_type.name().to_string(),
                t.dims.clone(),
                bytes[t.offset as usize..(t.offset + t.size) as usize].to_vec(),
            )
        })
        .collect();
    t.sort_by(|a, b| a.0.cmp(&b.0));
    (f.metadata, t)
}

fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tiny/llama")
        .join(name)
}

#[test]
fn export_of_a_keep_conversion_gives_the_source_tensors_and_metadata_back() {
    let dir = tempfile::tempdir().unwrap();
    for src in [tiny("llama-q8_0.gguf"), tiny("llama-f16.gguf"), smollm2()] {
        let g = dir.path().join("m.gpack");
        let out = dir.path().join("m.gguf");
        convert(&src, &g, "keep");
        let _ = std::fs::remove_file(&out);
        let rep = export(&g, &out);
        assert_eq!(rep["dequantized_to_f32"].as_array().unwrap().len(), 0);
        let (m0, t0) = contents(&src);
        let (m1, t1) = contents(&out);
        let keys0: Vec<_> = m0.keys().collect();
        let keys1: Vec<_> = m1.keys().collect();
        assert_eq!(keys0, keys1, "{}", src.display());
        assert!(m0 == m1, "{}: metadata values differ", src.display());
        assert_eq!(t0.len(), t1.len());
        for (a, b) in t0.iter().zip(&t1) {
            assert_eq!((&a.0, &a.1, &a.2), (&b.0, &b.1, &b.2));
            assert!(a.3 == b.3, "{}: tensor {} differs", src.display(), a.0);
        }
        std::fs::remove_file(&g).unwrap();
    }
}

#[test]
fn an_exported_gguf_runs_like_its_source_and_existing_outputs_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let src = tiny("llama-q8_0.gguf");
    let run = |m: &Path| {
        let o = gpack()
            .arg("run")
            .arg(m)
            .args(["-p", "Once upon a time", "-n", "16"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let g = dir.path().join("m.gpack");
    convert(&src, &g, "keep");
    let out = dir.path().join("m.gguf");
    export(&g, &out);
    assert_eq!(run(&out), run(&src));
    // int8 of an F16 source: the re-quantized matrices come back as F32
    // values; it loads and generates.
    let g8 = dir.path().join("m8.gpack");
    convert(&tiny("llama-f16.gguf"), &g8, "int8");
    let out8 = dir.path().join("m8.gguf");
    let rep = export(&g8, &out8);
    assert!(!rep["dequantized_to_f32"].as_array().unwrap().is_empty());
    assert!(!run(&out8).trim().is_empty());
    // An existing output is not replaced without --force, nor on failure.
    std::fs::write(&out, b"keep me").unwrap();
    let o = gpack()
        .arg("export")
        .arg(&g)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    let bad = dir.path().join("bad.gpack");
    std::fs::write(&bad, b"not a gpack at all, just some bytes here ..................................................................................").unwrap();
    let o = gpack()
        .arg("export")
        .arg(&bad)
        .arg("-o")
        .arg(&out)
        .arg("--force")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    assert!(gpack_format::temp_files_of(&out).is_empty());
}

/// llama.cpp (its `llama-simple`, greedy) generates the same text from the
/// real SmolLM2 Q4_1 GGUF and from its round trip through a `--quant keep`
/// .gpack, on three prompts.
#[test]
fn llamacpp_generates_from_the_export_what_it_generates_from_the_source() {
    let llama = gpack_testkit::llama_simple();
    let dir = tempfile::tempdir().unwrap();
    let src = smollm2();
    let g = dir.path().join("m.gpack");
    convert(&src, &g, "keep");
    let out = dir.path().join("m.gguf");
    export(&g, &out);
    let generate = |m: &Path, prompt: &str| {
        let o = Command::new(&llama)
            .arg("-m")
            .arg(m)
            .args(["-n", "32", prompt])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "llama-simple on {}: {}",
            m.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    for prompt in [
        "The capital of France is",
        "Once upon a time, in a small village by the sea,",
        "def fibonacci(n):",
    ] {
        let a = generate(&src, prompt);
        // The prompt and 32 generated tokens, not just an echo.
        assert!(
            a.starts_with(prompt) && a.len() > prompt.len() + 32,
            "llama-simple printed {a:?}"
        );
        assert_eq!(generate(&out, prompt), a, "prompt {prompt:?}");
    }
}
