//! `gpack run` end to end on the real SmolLM2.

use crate::{gpack, run_greedy, smollm2};
use std::path::Path;

/// The same greedy text from the GGUF and from its .gpack; after loading the
/// .gpack, anonymous memory is below 5 % of the mapped weights (the weights
/// are not copied to the heap).
#[test]
fn gpack_runs_like_its_gguf_without_copying_weights() {
    let model = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("smollm2.gpack");
    let o = gpack()
        .arg("convert")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = |m: &Path| run_greedy(m, 24, 256);
    let (from_gguf, _) = run(&model);
    let (from_gpack, summary) = run(&out);
    assert_eq!(from_gguf, from_gpack);
    assert!(from_gpack.contains("Paris"), "{from_gpack}");
    let line = summary
        .lines()
        .find(|l| l.starts_with("memory after load"))
        .unwrap_or_else(|| panic!("no memory line in {summary}"));
    let nums: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.parse().ok())
        .collect();
    let (anon, mapped) = (nums[0], nums[1]);
    assert!(
        anon < 0.05 * mapped,
        "{anon} MiB anonymous vs {mapped} MiB of weights: {line}"
    );
}

/// A .gpack that fails validation falls back to the GGUF with a warning
/// naming the error; without a fallback the exact error is reported.
#[test]
fn corrupt_gpack_falls_back_or_fails_closed() {
    let model = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    assert!(gpack()
        .arg("convert")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap()
        .success());
    let bytes = std::fs::read(&out).unwrap();
    std::fs::write(&out, &bytes[..bytes.len() - 1000]).unwrap();
    let o = gpack()
        .arg("run")
        .arg(&out)
        .args(["-p", "Hi", "-n", "2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("truncated") && err.contains("1000 missing"),
        "{err}"
    );
    let o = gpack()
        .arg("run")
        .arg(&out)
        .arg("--fallback-gguf")
        .arg(&model)
        .args(["-p", "Hi", "-n", "2"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning") && err.contains("truncated") && err.contains("falling back"),
        "{err}"
    );
}

/// A .giw bundle runs directly: its metadata GGUF carries the tokenizer, and
/// `--quant keep` starts with the GGUF's greedy text. (Not all of it: a GIW
/// bundle keeps the row-major split layouts of GIW v12–v14, the GGUF is
/// transcoded to the row-interleaved ggml blocks a .gpack stores; the same
/// values, summed in another order, and SmolLM2's greedy text forks where
/// two logits are within rounding of each other — after " Paris.\n\nThe".)
#[test]
fn giw_runs_directly_like_its_gguf() {
    let model = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let giw = dir.path().join("smollm2.giw");
    let o = gpack()
        .arg("prequant")
        .arg(&model)
        .args(["--quant", "keep", "-o"])
        .arg(&giw)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = |m: &Path| run_greedy(m, 16, 128).0;
    let (a, b) = (run(&model), run(&giw));
    let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    assert!(common >= 12, "{a:?} vs {b:?}");
}

/// A flipped byte inside the weights (the structure intact, so the quick
/// open succeeds) is found by the integrity check: `run` stops with exit 1
/// naming the section, in the background (default) and before loading;
/// `--verify off` trusts the file. The intact file passes both checks.
#[test]
fn a_flipped_weight_byte_is_reported_by_run() {
    let model = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.gpack");
    assert!(gpack()
        .arg("convert")
        .arg(&model)
        .arg("-o")
        .arg(&good)
        .status()
        .unwrap()
        .success());
    let bad = dir.path().join("bad.gpack");
    let mut bytes = std::fs::read(&good).unwrap();
    let (off, size) = {
        let g = gpack_format::Gpack::open(&good).unwrap();
        let s = g.section(gpack_format::SectionKind::NativeDense).unwrap();
        (s.info.offset as usize, s.info.size as usize)
    };
    bytes[off + size / 2] ^= 0x10;
    std::fs::write(&bad, &bytes).unwrap();
    let run = |m: &Path, verify: &str| {
        gpack()
            .arg("run")
            .arg(m)
            .args([
                "-p",
                "The capital of France is",
                "-n",
                "8",
                "--verify",
                verify,
            ])
            .output()
            .unwrap()
    };
    for verify in ["background", "before"] {
        let o = run(&good, verify);
        assert!(
            o.status.success(),
            "{verify}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let o = run(&bad, verify);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{verify}: {err}");
        assert!(
            err.contains("native_dense") && err.contains(&format!("offset {off}")),
            "{verify}: {err}"
        );
        if verify == "before" {
            assert!(o.stdout.is_empty(), "generated before the check");
        }
    }
    let o = run(&bad, "off");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A panic inside a pool task (the test hook `GPACK_TEST_PANIC_IN_POOL_JOB`
/// panics in task 0 of the pool's third job) reaches `gpack run` as an
/// error: exit 1 with the message, neither an abort (134) nor Rust's 101.
/// See: issue 15 (panics in pool tasks returned to the caller as errors).
#[test]
fn a_panicking_pool_task_is_an_error_not_an_abort() {
    let o = gpack()
        .env("GPACK_TEST_PANIC_IN_POOL_JOB", "3")
        .arg("run")
        .arg(smollm2())
        .args(["-p", "The capital of France is", "-n", "4"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "error: internal error (a bug: please report it): injected fault in a pool task"
        ),
        "{err}"
    );
}
