//! `--device` and `--gpu-layers` (issue 43): `gpu` runs the blocks on a GPU
//! (lavapipe here: a software adapter, with a warning), `auto` never takes a
//! software adapter, and without any adapter (`VK_ICD_FILENAMES` pointing
//! nowhere) `--device gpu` exits 1 with a clear message while `--device
//! auto` runs on the CPU.

use crate::gpack;
use std::path::{Path, PathBuf};

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-q8_0.gguf")
}

/// `gpack run TINY -p Hi -n 4 --verbose ARGS…` with `env`: (exit code, stdout, stderr).
fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let m = tiny();
    let mut c = gpack();
    c.args([
        "run",
        m.to_str().unwrap(),
        "-p",
        "Hi",
        "-n",
        "4",
        "--temp",
        "0",
        "--verbose",
    ]);
    c.args(args).envs(env.iter().copied());
    let o = c.output().unwrap();
    (
        o.status.code(),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

#[test]
fn device_gpu_runs_and_equals_the_cpu() {
    let (code, cpu, e) = run(&["--device", "cpu"], &[]);
    assert_eq!(code, Some(0), "{e}");
    assert!(e.contains("device: cpu"), "{e}");
    let (code, gpu, e) = run(&["--device", "gpu"], &[]);
    assert_eq!(code, Some(0), "{e}");
    assert!(
        e.contains("device: GPU") && e.contains("blocks and the head on the GPU"),
        "{e}"
    );
    assert_eq!(gpu, cpu, "the same greedy text on both devices");
    let (code, split, e) = run(&["--device", "gpu", "--gpu-layers", "1"], &[]);
    assert_eq!(code, Some(0), "{e}");
    assert!(e.contains("1 blocks on the GPU"), "{e}");
    assert_eq!(split, cpu, "--gpu-layers 1: the same greedy text");
}

#[test]
fn no_adapter_gpu_fails_clearly_and_auto_runs_on_the_cpu() {
    let nowhere = [("VK_ICD_FILENAMES", "/nonexistent.json")];
    let (code, _, e) = run(&["--device", "gpu"], &nowhere);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("no GPU adapter"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    let (code, out, e) = run(&["--device", "auto"], &nowhere);
    assert_eq!(code, Some(0), "{e}");
    assert!(e.contains("device: cpu") && !out.is_empty(), "{e}");
}

#[test]
fn device_gpu_refuses_an_mla_family_by_name() {
    let m = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tiny/deepseek2/deepseek2-q8_0.gguf");
    let o = gpack()
        .args([
            "run",
            m.to_str().unwrap(),
            "-p",
            "Hi",
            "-n",
            "2",
            "--device",
            "gpu",
        ])
        .output()
        .unwrap();
    let e = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("family deepseek2 runs on the CPU only for now"),
        "{e}"
    );
}

/// `gpack inspect` names the adapters (lavapipe: software) and what
/// `--device auto` takes (the CPU: no hardware GPU here); without a driver
/// the list is empty.
#[test]
fn inspect_names_the_adapters_and_the_auto_choice() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny.gpack");
    let o = gpack()
        .args([
            "convert",
            tiny().to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let inspect = |env: &[(&str, &str)]| -> serde_json::Value {
        let o = gpack()
            .args(["inspect", out.to_str().unwrap(), "--json", "--devices"])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["devices"].clone()
    };
    let d = inspect(&[]);
    let list = d["adapters"].as_array().unwrap();
    let hardware = list.iter().any(|a| a["kind"] == "hardware");
    assert!(
        list.iter().any(|a| a["kind"] == "software"
            && a["backend"] == "vulkan"
            && a["name"].as_str().unwrap().contains("llvmpipe")),
        "lavapipe listed: {d}"
    );
    assert_eq!(
        d["auto"].as_str().unwrap().starts_with("cpu"),
        !hardware,
        "auto: a hardware GPU or the CPU: {d}"
    );
    let none = inspect(&[("VK_ICD_FILENAMES", "/nonexistent.json")]);
    assert_eq!(none["adapters"].as_array().unwrap().len(), 0, "{none}");
    assert!(none["auto"].as_str().unwrap().starts_with("cpu"), "{none}");
}

/// The bytes `--verbose` says the placement was planned to take (to the
/// 0.1 KiB or MiB it prints).
fn planned_bytes(stderr: &str) -> f64 {
    let at = stderr.find("; planned ").expect("a planned line") + "; planned ".len();
    let rest = &stderr[at..];
    let num = &rest[..rest.find(' ').unwrap()];
    let unit = match &rest[num.len() + 1..num.len() + 4] {
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        u => panic!("unit {u}: {rest}"),
    };
    num.parse::<f64>().unwrap() * unit
}

/// `--gpu-memory`: a budget that holds every block runs them all; one
/// between what one block and all blocks need splits the model (said on
/// stderr; the same greedy text as the CPU); one below a block's share
/// exits 1 naming needed vs budget, without a panic; a bad size is a flag
/// error listing what is expected.
#[test]
fn gpu_memory_budget_splits_or_refuses() {
    let (code, cpu, e) = run(&["--device", "cpu"], &[]);
    assert_eq!(code, Some(0), "{e}");
    let (code, all, e) = run(&["--device", "gpu", "--gpu-memory", "1GiB"], &[]);
    assert_eq!(code, Some(0), "{e}");
    assert!(
        e.contains("against a budget of 1.00 GiB (--gpu-memory)"),
        "{e}"
    );
    assert_eq!(all, cpu, "all blocks within the budget: the CPU's text");
    let need_all = planned_bytes(&e);
    let (code, _, e) = run(&["--device", "gpu", "--gpu-layers", "1"], &[]);
    assert_eq!(code, Some(0), "{e}");
    let need_one = planned_bytes(&e);
    assert!(
        need_one < need_all,
        "one block {need_one} B, all {need_all} B"
    );
    let mid = format!("{}", ((need_one + need_all) / 2.0) as u64);
    let (code, split, e) = run(&["--device", "gpu", "--gpu-memory", &mid], &[]);
    assert_eq!(code, Some(0), "{e}");
    assert!(
        e.contains("1 of 2 blocks fit in") && e.contains("the rest and the head run on the CPU"),
        "{e}"
    );
    assert_eq!(split, cpu, "split by the budget: the CPU's text");
    let (code, _, e) = run(&["--device", "gpu", "--gpu-memory", "1KiB"], &[]);
    assert_eq!(code, Some(1), "{e}");
    assert!(
        e.contains("not even one block fits") && e.contains("the budget is 1024 (--gpu-memory)"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
    let (code, _, e) = run(&["--device", "gpu", "--gpu-memory", "lots"], &[]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("expected auto or a size"), "{e}");
}
