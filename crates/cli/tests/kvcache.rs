//! The prefix cache through `gpack run` on SmolLM2: `--kv-cache-dir` and
//! `--prompt-cache` restore a prompt's blocks in a later process and give
//! the text of a run without them; damaged or foreign files are refused and
//! recomputed; `gpack cache ls|clear` and `gpack inspect` read the files;
//! a directory others may write, or a model without a digest, is refused.

use crate::{gpack, smollm2};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A .gpack of SmolLM2 in `dir`.
fn converted(dir: &Path) -> PathBuf {
    let out = dir.join("smollm2.gpack");
    let o = gpack()
        .arg("convert")
        .arg(smollm2())
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// A prompt of a few hundred tokens (several 64-position blocks).
fn prompt() -> String {
    (0..24)
        .map(|i| {
            format!(
                "Fact {i}: the river number {i} flows into lake {}.",
                i * 7 % 11
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
        + " Question: which lake does river 5 flow into? Answer:"
}

/// `gpack run` greedy (16 tokens) with `extra`: (stdout, stderr).
fn run(model: &Path, extra: &[&str]) -> (String, String) {
    let o = gpack()
        .arg("run")
        .arg(model)
        .args([
            "-p",
            &prompt(),
            "-n",
            "16",
            "--ctx",
            "1024",
            "--verify",
            "off",
        ])
        .args(extra)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{extra:?}: {err}");
    (String::from_utf8(o.stdout).unwrap(), err)
}

fn restored(stderr: &str) -> usize {
    stderr
        .split(" restored from the KV cache")
        .next()
        .filter(|_| stderr.contains(" restored from the KV cache"))
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn run_reuses_a_cache_directory_and_a_prompt_cache_file_across_processes() {
    let t = tempfile::tempdir().unwrap();
    let m = converted(t.path());
    let (want, _) = run(&m, &[]);
    let kv = t.path().join("kv");
    let d = kv.to_str().unwrap();
    // First run: computes and writes its blocks (the directory is created 0700).
    let (first, err) = run(&m, &["--kv-cache-dir", d]);
    assert_eq!(first, want);
    assert_eq!(restored(&err), 0, "{err}");
    let mode = std::fs::metadata(&kv).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    // A second process restores the prompt's full blocks.
    let (second, err) = run(&m, &["--kv-cache-dir", d]);
    assert_eq!(second, want);
    let n = restored(&err);
    assert!(n >= 128 && n.is_multiple_of(64), "{err}");
    let ls = gpack().args(["cache", "ls", d, "--json"]).output().unwrap();
    assert!(ls.status.success());
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(v["schema"], "gpack.cache.ls.v1");
    assert!(v["files"].as_u64().unwrap() as usize >= n / 64, "{v}");
    assert_eq!(v["blocks"][0]["kv"], serde_json::json!(["f16", "f16"]));
    // Another KV type is another context: nothing restored, same text.
    let (q8, err) = run(&m, &["--kv-cache-dir", d, "--kv", "q8_0"]);
    assert_eq!(restored(&err), 0, "{err}");
    let (q8_again, err) = run(&m, &["--kv-cache-dir", d, "--kv", "q8_0"]);
    assert_eq!(q8_again, q8);
    assert!(restored(&err) >= 128, "{err}");
    let clear = gpack().args(["cache", "clear", d]).output().unwrap();
    assert!(clear.status.success());
    assert!(String::from_utf8_lossy(&clear.stdout).contains("removed"));
    assert_eq!(gpack_runtime::kvcache::dir::list(&kv).len(), 0);

    // --prompt-cache: one file, rewritten atomically.
    let pc = t.path().join("prompt.gkv");
    let f = pc.to_str().unwrap();
    let (a, err) = run(&m, &["--prompt-cache", f]);
    assert_eq!((a.as_str(), restored(&err)), (want.as_str(), 0));
    let (b, err) = run(&m, &["--prompt-cache", f]);
    assert_eq!(b, want);
    assert!(restored(&err) >= 128, "{err}");
    let mode = std::fs::metadata(&pc).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let i = gpack().args(["inspect", f, "--json"]).output().unwrap();
    assert!(i.status.success(), "{}", String::from_utf8_lossy(&i.stderr));
    let v: serde_json::Value = serde_json::from_slice(&i.stdout).unwrap();
    assert_eq!(v["schema"], "gpack.inspect.kvcache.v1");
    assert_eq!(v["kv"]["k"], "f16");
    // A flipped byte in a payload: refused with a warning, recomputed, same text.
    let mut bytes = std::fs::read(&pc).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 1;
    std::fs::write(&pc, &bytes).unwrap();
    let (c, err) = run(&m, &["--prompt-cache", f]);
    assert_eq!(c, want);
    assert_eq!(restored(&err), 0);
    assert!(err.contains("does not match its SHA-256"), "{err}");
    // ... and rewritten good.
    let (_, err) = run(&m, &["--prompt-cache", f]);
    assert!(restored(&err) >= 128, "{err}");
}

#[test]
fn untrusted_directories_and_digestless_models_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let m = converted(t.path());
    let open = t.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = gpack()
        .arg("run")
        .arg(&m)
        .args([
            "-p",
            "hi",
            "-n",
            "1",
            "--kv-cache-dir",
            open.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("not trusted") && err.contains("777"), "{err}");
    // A GGUF has no footer digest to name the blocks' model.
    let o = gpack()
        .arg("run")
        .arg(smollm2())
        .args(["-p", "hi", "-n", "1", "--prompt-cache"])
        .arg(t.path().join("p.gkv"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("needs a .gpack model"), "{err}");
}
