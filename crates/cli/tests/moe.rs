//! `gpack run` on a mixture-of-experts model: both expert modes give the same
//! text, `--verbose` reports the caches, and a corrupted external shard makes
//! the run fail with the exact error (nothing generated).

use crate::gpack;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tiny/qwen3moe")
        .join(name)
}

fn convert(src: &Path, out: &Path, external: bool) {
    let mut c = gpack();
    c.arg("convert").arg(src).arg("-o").arg(out);
    if external {
        c.arg("--external-experts");
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn run(model: &Path, extra: &[&str]) -> std::process::Output {
    gpack()
        .arg("run")
        .arg(model)
        .args(["-p", "Hello world, this is", "-n", "12", "--ctx", "64"])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn moe_runs_in_both_expert_modes_and_refuses_a_corrupted_shard() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("qwen3moe-q8_0.gguf");
    std::fs::copy(fixture("qwen3moe-q8_0.gguf"), &gguf).unwrap();
    let (emb, ext) = (dir.path().join("emb.gpack"), dir.path().join("ext.gpack"));
    convert(&gguf, &emb, false);
    convert(&gguf, &ext, true);

    let base = run(&gguf, &[]);
    assert!(
        base.status.success(),
        "{}",
        String::from_utf8_lossy(&base.stderr)
    );
    for model in [&emb, &ext] {
        for extra in [
            &["--verbose"][..],
            &["--expert-mmap", "--verbose"][..],
            &["--expert-cache-bytes", "60K", "--verbose"][..],
        ] {
            let o = run(model, extra);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "{extra:?}: {err}");
            assert_eq!(o.stdout, base.stdout, "{} {extra:?}", model.display());
            assert!(err.contains("of expert weights read per token"), "{err}");
            // By default, experts embedded in the .gpack are read in place;
            // ggml rows (external experts) go through the resident cache.
            if extra[0] == "--expert-mmap" || (extra.len() == 1 && model == &emb) {
                assert!(err.contains("experts: mmap"), "{err}");
            } else {
                assert!(err.contains("resident cache hit rate"), "{err}");
            }
            if extra[0] == "--expert-cache-bytes" {
                assert!(
                    err.contains("of a 60.0 KiB budget") && !err.contains(" 0 evictions"),
                    "{err}"
                );
            }
            assert!(err.contains("PLE: none in this model"), "{err}");
            // The family and its features, before generation (the fixture's
            // config.json: 4 experts, 2 per token, width 128).
            assert!(
                err.contains("family: qwen3moe")
                    && err.contains("SwiGLU experts: 4 routed, 2 per token, width 128"),
                "{err}"
            );
        }
    }
    let bad = run(&emb, &["--expert-mmap", "--expert-cache-bytes", "1G"]);
    assert!(!bad.status.success());
    let bad = run(&emb, &["--expert-cache-bytes", "lots"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not a size"));

    // Corrupt every layer-0 slice in the shard (same size): the quick checks
    // pass, the first use of a slice fails the run with the exact error.
    let layout = gpack_format::Gpack::open(&ext)
        .unwrap()
        .expert_layout()
        .unwrap()
        .unwrap();
    let mut bytes = std::fs::read(&gguf).unwrap();
    for e in 0..layout.n_expert as usize {
        for p in 0..3 {
            let s = layout.slice(0, e, p).unwrap();
            bytes[(s.offset + 7) as usize] ^= 1;
        }
    }
    std::fs::write(&gguf, &bytes).unwrap();
    for extra in [&[][..], &["--expert-mmap"][..]] {
        let o = run(&ext, extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra:?}");
        assert!(o.stdout.is_empty(), "nothing generated");
        assert!(
            err.contains("layer 0 expert")
                && err.contains("qwen3moe-q8_0.gguf @ ")
                && err.contains("SHA-256"),
            "{extra:?}: {err}"
        );
    }
    let v = gpack().arg("verify").arg(&ext).output().unwrap();
    assert_eq!(
        v.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    // verify names the shard, how many slices failed and the first one.
    let err = String::from_utf8_lossy(&v.stderr);
    let failed = 3 * layout.n_expert;
    assert!(
        err.contains("external expert file qwen3moe-q8_0.gguf")
            && err.contains(&format!("{failed} slice(s) failed their SHA-256 check"))
            && err.contains("layer 0 expert 0 gate"),
        "{err}"
    );
}
