//! `gpack convert` then `gpack inspect --json` on every tiny fixture: every
//! source tensor is listed with the same name, type and shape.

use crate::gpack;
use std::path::Path;

#[test]
fn inspect_lists_every_source_tensor_after_convert() {
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny");
    let dir = tempfile::tempdir().unwrap();
    for arch in ["llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "mixtral"] {
        for src in [
            testdata.join(arch).join(format!("{arch}-q8_0.gguf")),
            testdata.join(arch).join("hf"),
        ] {
            let out = dir.path().join(format!("{arch}.gpack"));
            let o = gpack()
                .arg("convert")
                .arg(&src)
                .args(["--name", arch, "--force", "--json", "-o"])
                .arg(&out)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(report["schema"], "gpack.convert.v1");
            let o = gpack()
                .arg("inspect")
                .arg(&out)
                .arg("--json")
                .output()
                .unwrap();
            assert!(o.status.success());
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["manifest"]["name"], arch);
            let listed = v["tensors"].as_array().unwrap();
            let source = gpack_ingest::Source::open(&src).unwrap();
            assert_eq!(listed.len(), source.tensors.len(), "{}", src.display());
            for t in &source.tensors {
                let e = listed
                    .iter()
                    .find(|e| e["name"] == t.name.as_str())
                    .unwrap_or_else(|| panic!("{} not listed", t.name));
                assert_eq!(e["type"], t.ggml_type.name(), "{}", t.name);
                assert_eq!(e["dims"], serde_json::json!(t.dims), "{}", t.name);
                // Every layout has a name (a row-interleaved Q8_0 matrix is
                // `Q8_0x16`), never a bare `#code`.
                let layout = e["layout"].as_str().unwrap();
                assert!(!layout.starts_with('#'), "{}: {layout}", t.name);
            }
            let is_gguf = src.extension().is_some_and(|x| x == "gguf");
            assert!(
                !is_gguf || listed.iter().any(|e| e["layout"] == "Q8_0x16"),
                "{}: no row-interleaved Q8_0 matrix listed",
                src.display()
            );
        }
    }
}
