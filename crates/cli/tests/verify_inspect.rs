use crate::gpack;
use gpack_format::{GpackWriter, ManifestInput, SectionKind, WriteOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn sample(dir: &Path) -> PathBuf {
    let out = dir.join("s.gpack");
    let mut w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
    w.add_section(SectionKind::MetadataKv, "metadata_kv", b"kv", 1)
        .unwrap();
    w.add_section(SectionKind::NativeDense, "native_dense", &[9u8; 10000], 2)
        .unwrap();
    w.add_section(SectionKind::TokenizerBin, "tokenizer_bin", b"GBT1", 1)
        .unwrap();
    w.finish(&ManifestInput {
        name: "sample".into(),
        architecture: "llama".into(),
        ..Default::default()
    })
    .unwrap();
    out
}

fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&o.stdout));
    })
}

#[test]
fn verify_ok_quick_and_full_with_json() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample(dir.path());
    for quick in [false, true] {
        let mut c = gpack();
        c.arg("verify").arg(&f).arg("--json");
        if quick {
            c.arg("--quick");
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let v = json_of(&o);
        assert_eq!(v["schema"], "gpack.verify.v1");
        assert_eq!(v["ok"], true);
        assert_eq!(v["mode"], if quick { "quick" } else { "full" });
        assert_eq!(v["sections"].as_array().unwrap().len(), 4);
    }
    let o = gpack().arg("verify").arg(&f).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok: "));
}

#[test]
fn verify_names_the_corrupt_section_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample(dir.path());
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[4096 + 123] ^= 1; // inside native_dense
    std::fs::write(&f, &bytes).unwrap();
    // The quick check does not read payloads.
    let o = gpack()
        .args(["verify", "--quick"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let o = gpack()
        .arg("verify")
        .arg(&f)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let v = json_of(&o);
    assert_eq!(v["ok"], false);
    assert_eq!(v["sections"][0]["name"], "native_dense");
    let o = gpack().arg("verify").arg(&f).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("native_dense") && err.contains("SHA-256"),
        "{err}"
    );
}

#[test]
fn truncated_file_is_named_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample(dir.path());
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() - 100]).unwrap();
    let o = gpack()
        .args(["verify", "--quick"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("truncated") && err.contains("100 missing"),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let o = gpack().arg("verify").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = gpack().arg("no-such-command").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = gpack().args(["verify", "x", "--bogus"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn inspect_json_lists_header_flags_sections_and_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample(dir.path());
    let o = gpack()
        .arg("inspect")
        .arg(&f)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v = json_of(&o);
    assert_eq!(v["schema"], "gpack.inspect.v1");
    assert_eq!(
        v["header"]["flag_names"],
        serde_json::json!(["LITTLE_ENDIAN", "HAS_NATIVE_DENSE", "HAS_TOKENIZER_BIN"])
    );
    let names: Vec<&str> = v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["metadata_kv", "native_dense", "tokenizer_bin", "manifest"]
    );
    assert_eq!(v["sections"][1]["offset"], 4096);
    assert_eq!(v["sections"][1]["alignment"], 4096);
    assert_eq!(v["manifest"]["name"], "sample");
    assert_eq!(v["manifest"]["schema"], "gpack.v1");
    let o = gpack().arg("inspect").arg(&f).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("HAS_NATIVE_DENSE") && text.contains("NativeDenseBlob"),
        "{text}"
    );
}

#[test]
fn inspect_of_a_non_gpack_file_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.bin");
    std::fs::write(&f, vec![0u8; 300]).unwrap();
    let o = gpack().arg("inspect").arg(&f).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("magic"));
}

/// `gpack inspect [--json] | head` exits 0 and prints nothing on stderr,
/// whichever write meets the closed pipe (a tensor listing of a real model is
/// long, so the error usually comes from inside the JSON serializer).
#[test]
fn broken_pipe_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let small = sample(dir.path());
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tiny/llama/llama-q8_0.gguf");
    let big = dir.path().join("llama.gpack");
    assert!(gpack()
        .arg("convert")
        .arg(&src)
        .arg("-o")
        .arg(&big)
        .output()
        .unwrap()
        .status
        .success());
    for (f, json) in [(&small, "--json"), (&big, "--json"), (&big, "")] {
        for _ in 0..10 {
            let o = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!(
                    "'{}' inspect '{}' {json} | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}",
                    env!("CARGO_BIN_EXE_gpack"),
                    f.display()
                ))
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&o.stdout).trim(),
                "0",
                "{}",
                f.display()
            );
            assert!(
                o.stderr.is_empty(),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}
