//! Thread settings by value (issue 47): `GPACK_THREADS` is read once, with
//! the other `GPACK_*` load variables (`LoadOptions::from_env`), and sizes
//! the model's pool; a bad value, or `--threads 0`, is a clear error
//! before anything loads.

use crate::gpack;
use std::path::{Path, PathBuf};

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-q8_0.gguf")
}

/// `gpack ARGS…` with `env` (and no other load variable): the command.
fn with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
    let mut c = gpack();
    c.args(args);
    for k in [
        "GPACK_THREADS",
        "GPACK_PLE_MMAP",
        "GPACK_EXPERT_MMAP",
        "GPACK_EXPERT_CACHE_BYTES",
    ] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied());
    c
}

/// `gpack ARGS…` with `env`, which must fail with exit 1: its stderr.
fn fails(args: &[&str], env: &[(&str, &str)]) -> String {
    let o = with_env(args, env).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{args:?} {env:?}: {o:?}");
    String::from_utf8(o.stderr).unwrap()
}

#[test]
fn gpack_threads_sizes_the_models_pool() {
    let m = tiny();
    let args = [
        "bench",
        m.to_str().unwrap(),
        "-p",
        "4",
        "-n",
        "2",
        "-r",
        "1",
        "--json",
    ];
    let o = with_env(&args, &[("GPACK_THREADS", "3")]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["n_threads"], 3, "{v}");
}

#[test]
fn a_bad_thread_count_or_load_variable_is_an_error() {
    let m = tiny();
    let m = m.to_str().unwrap();
    for cmd in [vec!["run", m, "-p", "Hi"], vec!["serve", m, "--port", "0"]] {
        let mut zero = cmd.clone();
        zero.extend(["--threads", "0"]);
        let err = fails(&zero, &[]);
        assert!(err.contains("--threads must be at least 1"), "{err}");
        for (k, v, want) in [
            (
                "GPACK_THREADS",
                "abc",
                "GPACK_THREADS=abc: expected a whole number of threads ≥ 1",
            ),
            (
                "GPACK_THREADS",
                "0",
                "GPACK_THREADS=0: expected a whole number of threads ≥ 1",
            ),
            (
                "GPACK_PLE_MMAP",
                "yes",
                "GPACK_PLE_MMAP=yes: expected 1 (on) or 0 (off)",
            ),
            (
                "GPACK_EXPERT_CACHE_BYTES",
                "lots",
                "GPACK_EXPERT_CACHE_BYTES=lots: expected a size",
            ),
        ] {
            let err = fails(&cmd, &[(k, v)]);
            assert!(err.contains(want), "{cmd:?} with {k}={v}: {err}");
        }
    }
    let err = fails(
        &["bench", m, "-p", "4", "-n", "0", "-r", "1"],
        &[("GPACK_THREADS", "abc")],
    );
    assert!(err.contains("GPACK_THREADS=abc"), "{err}");
}
