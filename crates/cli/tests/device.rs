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
fn device_gpu_refuses_a_moe_family_by_name() {
    let m = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tiny/qwen3moe/qwen3moe-q8_0.gguf");
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
        e.contains("family qwen3moe runs on the CPU only for now"),
        "{e}"
    );
}
