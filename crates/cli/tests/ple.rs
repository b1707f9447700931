//! `gpack run` on Gemma 3n (the model family with a per-layer embedding
//! table): the .gpack's PLE rows by direct I/O with a row cache (default,
//! and a tiny evicting cache) or by mmap give the GGUF's text, and
//! `--verbose` reports the PLE row cache's hit rate at the end of the run.

use crate::gpack;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tiny/gemma3n")
        .join(name)
}

fn run(model: &Path, extra: &[&str]) -> std::process::Output {
    gpack()
        .arg("run")
        .arg(model)
        // Repeated words: repeated tokens hit the row cache.
        .args([
            "-p",
            "the cat and the dog and the cat",
            "-n",
            "12",
            "--ctx",
            "64",
        ])
        .args(extra)
        .output()
        .unwrap()
}

/// `(hit rate %, hits, misses, rows read)` from the `--verbose` PLE line.
fn ple_line(err: &str) -> (f64, u64, u64, u64) {
    let line = err
        .lines()
        .find(|l| l.starts_with("PLE: row cache hit rate "))
        .unwrap_or_else(|| panic!("no PLE cache line in {err}"));
    let nums: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.trim_matches('.').parse().ok())
        .collect();
    // rate, hits, misses, sets, ways, rows read, row bytes
    (nums[0], nums[1] as u64, nums[2] as u64, nums[5] as u64)
}

#[test]
fn gemma3n_ple_modes_give_the_same_text_and_verbose_reports_the_row_cache() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = fixture("gemma3n-q8_0.gguf");
    let gp = dir.path().join("g.gpack");
    let o = gpack()
        .arg("convert")
        .arg(&gguf)
        .arg("-o")
        .arg(&gp)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let base = run(&gguf, &["--verbose"]);
    let err = String::from_utf8_lossy(&base.stderr);
    assert!(base.status.success(), "{err}");
    assert!(
        err.contains("PLE: read in place from the model file's tensor"),
        "{err}"
    );

    let mut reads = None;
    for extra in [&[][..], &["--ple-cache", "2x1"][..]] {
        let o = run(&gp, &[&["--verbose"][..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{extra:?}: {err}");
        assert_eq!(o.stdout, base.stdout, "{extra:?}");
        let (rate, hits, misses, rows) = ple_line(&err);
        assert_eq!(hits + misses, rows, "{err}");
        assert!(
            (rate - 100.0 * hits as f64 / rows as f64).abs() < 0.06,
            "{err}"
        );
        if extra.is_empty() {
            assert!(hits > 0, "the repeated prompt words hit the cache: {err}");
            reads = Some(rows);
        } else {
            assert_eq!(Some(rows), reads, "same tokens, same rows read");
        }
    }
    let o = run(&gp, &["--ple-mmap", "--verbose"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(o.stdout, base.stdout);
    assert!(err.contains("PLE: mmap, no row cache;"), "{err}");

    for bad in ["0x4", "lots", "4"] {
        let o = run(&gp, &["--ple-cache", bad]);
        assert!(!o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("is not SETSxWAYS"),
            "{bad}"
        );
    }
}
