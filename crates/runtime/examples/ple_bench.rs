//! PLE table random-row throughput, mmap vs direct I/O, cold page cache:
//! `ple_bench FILE.gpack MODE N [SETS WAYS]` (MODE = mmap | direct). The
//! caller evicts the file from the page cache first (bench/ple.sh does, with
//! posix_fadvise DONTNEED). Prints rows/s and the cache hit rate.

use gpack_runtime::ple::{PleIo, PleTable};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: ple_bench FILE.gpack mmap|direct N [SETS WAYS]");
        std::process::exit(2);
    }
    let n: usize = a[3].parse().expect("N");
    let sets = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(256);
    let ways = a.get(5).and_then(|s| s.parse().ok()).unwrap_or(8);
    let io = if a[2] == "mmap" {
        PleIo::Mmap
    } else {
        PleIo::Direct { sets, ways }
    };
    let mut t = PleTable::open(std::path::Path::new(&a[1]), io).expect("open");
    let rows = t.rows();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut sum = 0u64;
    let start = Instant::now();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Zipf-like skew: half the accesses go to the first 1/64 of the rows.
        let r = if x & 1 == 0 {
            (x >> 1) % (rows / 64).max(1)
        } else {
            (x >> 1) % rows
        };
        sum = sum.wrapping_add(u64::from(t.row(r).expect("row")[0]));
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "{} rows/s ({} mode{}, {n} rows of {} bytes, hit rate {:.1} %, checksum {sum})",
        (n as f64 / s) as u64,
        a[2],
        if t.is_direct() || a[2] == "mmap" {
            ""
        } else {
            ", buffered fallback"
        },
        t.row_bytes(),
        t.stats().hit_rate() * 100.0
    );
}
