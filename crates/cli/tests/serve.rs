//! `gpack serve`'s start-up errors.

use crate::gpack;

/// A model that is missing or not a model: `serve` exits 1 and its message
/// names the path exactly once (each layer of the chain used to add it
/// again: "opening X: loading model X: ... open X").
// See: issue 15 (error messages: each path once).
#[test]
fn serve_names_a_bad_model_path_once() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Option<&[u8]>); 5] = [
        ("missing.gpack", None),
        ("missing.gguf", None),
        ("missing-dir", None),
        ("junk.gpack", Some(b"not a gpack file")),
        ("junk.gguf", Some(b"not a gguf file")),
    ];
    for (name, bytes) in cases {
        let p = dir.path().join(name);
        if let Some(b) = bytes {
            std::fs::write(&p, b).unwrap();
        }
        let o = gpack()
            .arg("serve")
            .arg(&p)
            .args(["--port", "0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        let path = p.to_str().unwrap();
        assert_eq!(
            err.matches(path).count(),
            1,
            "{name}: the path is not named exactly once: {err}"
        );
    }
}
