//! A GGUF with a tensor in a ggml type gpack cannot decode is refused by
//! `convert`, `prequant` and `run` with exit code 1 and the tensor and its
//! type named, never a panic (101) or an abort (134).
// See: issue 13 item 2 and issue 15 (an undecodable type panicked in a
// kernel task, which aborted the process).

use crate::gpack;
use std::path::{Path, PathBuf};

/// testdata/unsupported/llama-iq2_xxs.gguf: the tiny llama with
/// blk.0.ffn_down.weight in IQ2_XXS (testdata/scripts/30_make_unsupported_type.py).
fn iq2_xxs_model() -> PathBuf {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/unsupported/llama-iq2_xxs.gguf");
    assert!(p.is_file(), "fixture {} is missing", p.display());
    p
}

fn assert_refused(o: &std::process::Output, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{what}: {err}");
    assert!(
        err.contains("blk.0.ffn_down.weight") && err.contains("IQ2_XXS"),
        "{what}: the error names neither the tensor nor its type: {err}"
    );
    assert!(!err.contains("panicked"), "{what}: {err}");
}

#[test]
fn undecodable_type_is_refused_by_name_at_convert_prequant_and_run() {
    let model = iq2_xxs_model();
    let dir = tempfile::tempdir().unwrap();

    let out = dir.path().join("m.gpack");
    let o = gpack()
        .arg("convert")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_refused(&o, "convert");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "convert left {left:?} behind");

    let o = gpack()
        .arg("prequant")
        .arg(&model)
        .arg("-o")
        .arg(dir.path().join("m.giw"))
        .output()
        .unwrap();
    assert_refused(&o, "prequant");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "prequant left {left:?} behind");

    let o = gpack()
        .arg("run")
        .arg(&model)
        .args(["-p", "Hi", "-n", "2"])
        .output()
        .unwrap();
    assert_refused(&o, "run");
    assert!(o.stdout.is_empty(), "run generated text");
}
