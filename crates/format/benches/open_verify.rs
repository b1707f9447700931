//! Quick open time for a 100 MB and a 4.5 GB synthetic file (goal: ≤ 1 ms
//! median, flat in size), and full verification throughput.
//!
//! The synthetic files are made once in `${GPACK_CACHE:-~/.cache/gpack}/bench/`
//! by the `gpack-synth` writer. Run: `cargo bench -p gpack-format`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpack_format::Gpack;
use std::path::PathBuf;
use std::process::Command;

fn synth(size: u64) -> PathBuf {
    let cache = std::env::var_os("GPACK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/gpack"));
    let dir = cache.join("bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("synth-{size}.gpack"));
    if Gpack::open(&path).is_err() {
        let bin = env!("CARGO_BIN_EXE_gpack-synth");
        let st = Command::new(bin)
            .arg(&path)
            .arg(size.to_string())
            .arg("--replace")
            .status()
            .unwrap();
        assert!(st.success());
    }
    path
}

fn quick_open(c: &mut Criterion) {
    let mut g = c.benchmark_group("quick_open");
    for (label, size) in [("100MB", 100_000_000u64), ("4.5GB", 4_500_000_000)] {
        let path = synth(size);
        g.bench_function(label, |b| b.iter(|| Gpack::open(&path).unwrap()));
    }
    g.finish();
}

fn full_verify(c: &mut Criterion) {
    let mut g = c.benchmark_group("full_verify");
    g.sample_size(10);
    let path = synth(100_000_000);
    let gp = Gpack::open(&path).unwrap();
    g.throughput(Throughput::Bytes(gp.bytes().len() as u64));
    g.bench_function("100MB", |b| b.iter(|| gp.verify_full(&|_| {}).unwrap()));
    g.finish();
}

criterion_group!(benches, quick_open, full_verify);
criterion_main!(benches);
