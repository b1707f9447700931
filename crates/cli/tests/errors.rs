//! Error messages name each path once: the library's error names what it
//! knows, the command's context adds only what it does not (issue 15).

use crate::gpack;
use std::path::Path;

/// `gpack ARGS…`, which must fail with exit 1: its stderr.
fn fails(args: &[&std::ffi::OsStr]) -> String {
    let o = gpack().args(args).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{:?}", o);
    String::from_utf8(o.stderr).unwrap()
}

fn times(haystack: &str, p: &Path) -> usize {
    haystack.matches(&*p.display().to_string()).count()
}

// See: issue 15 ("exporting A to B: exporting A to GGUF: B already exists").
#[test]
fn export_onto_an_existing_file_names_each_path_once() {
    let dir = tempfile::tempdir().unwrap();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-q8_0.gguf");
    let g = dir.path().join("m.gpack");
    assert!(gpack()
        .arg("convert")
        .arg(&src)
        .arg("-o")
        .arg(&g)
        .status()
        .unwrap()
        .success());
    let out = dir.path().join("m.gguf");
    std::fs::write(&out, b"keep me").unwrap();
    let err = fails(&["export".as_ref(), g.as_ref(), "-o".as_ref(), out.as_ref()]);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(times(&err, &g), 1, "{err}");
    assert_eq!(times(&err, &out), 1, "{err}");
    assert_eq!(err.matches("exporting").count(), 1, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
}

// See: issue 15 ("exporting A to B: reading the .gpack file: open A: …").
#[test]
fn export_of_a_missing_file_names_each_path_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gpack");
    let out2 = dir.path().join("new.gguf");
    let err = fails(&[
        "export".as_ref(),
        missing.as_ref(),
        "-o".as_ref(),
        out2.as_ref(),
    ]);
    assert!(err.contains("No such file"), "{err}");
    assert_eq!(times(&err, &missing), 1, "{err}");
    assert_eq!(times(&err, &out2), 1, "{err}");
}

// See: issue 15 (convert said "converting A to B: B already exists" and
// "converting A to B: A: cannot open").
#[test]
fn convert_names_each_path_once() {
    let dir = tempfile::tempdir().unwrap();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-q8_0.gguf");
    let out = dir.path().join("m.gpack");
    std::fs::write(&out, b"keep me").unwrap();
    let err = fails(&[
        "convert".as_ref(),
        src.as_ref(),
        "-o".as_ref(),
        out.as_ref(),
    ]);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(times(&err, &src), 1, "{err}");
    assert_eq!(times(&err, &out), 1, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    let new = dir.path().join("new.gpack");
    for (name, bytes) in [
        ("missing.gguf", None),
        ("junk.gguf", Some(&b"GGUF but nothing after the magic"[..])),
    ] {
        let bad = dir.path().join(name);
        if let Some(b) = bytes {
            std::fs::write(&bad, b).unwrap();
        }
        let err = fails(&[
            "convert".as_ref(),
            bad.as_ref(),
            "-o".as_ref(),
            new.as_ref(),
        ]);
        assert_eq!(times(&err, &bad), 1, "{err}");
        assert_eq!(times(&err, &new), 1, "{err}");
    }
}

// See: issue 15 ("X: open X: …").
#[test]
fn inspect_of_a_missing_or_malformed_file_names_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gpack");
    let err = fails(&["inspect".as_ref(), missing.as_ref()]);
    assert!(err.contains("open"), "{err}");
    assert_eq!(times(&err, &missing), 1, "{err}");
    // An error that does not name the file gets it in front.
    let junk = dir.path().join("junk.gpack");
    std::fs::write(&junk, b"not a gpack").unwrap();
    let err = fails(&["inspect".as_ref(), junk.as_ref()]);
    assert!(err.contains("smaller than"), "{err}");
    assert_eq!(times(&err, &junk), 1, "{err}");
}

// See: issue 15 ("X: open X: …").
#[test]
fn tokenize_of_a_missing_file_names_it_once() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["missing.gpack", "missing.gguf"] {
        let missing = dir.path().join(name);
        let err = fails(&["tokenize".as_ref(), missing.as_ref(), "hello".as_ref()]);
        assert!(err.contains("No such file"), "{err}");
        assert_eq!(times(&err, &missing), 1, "{err}");
    }
}
