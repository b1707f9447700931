//! PleTable: rows read through mmap and through direct I/O equal the source
//! tensor's rows; the row cache's hit/miss counts equal a reference model of
//! a set-associative LRU cache on the recorded access trace.

use gpack_ingest::{gguf, GgmlType, GgufString, Metadata, Value};
use gpack_runtime::ple::{PleIo, PleTable};
use std::collections::VecDeque;

const NE0: u64 = 256;
const ROWS: u64 = 3000;

fn make_gpack(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>) {
    let src = dir.join("ple.gguf");
    let mut meta = Metadata::new();
    meta.insert(
        "general.architecture",
        Value::String(GgufString::from_bytes(b"test".to_vec())),
    );
    // F16 rows with a per-row pattern, so a wrong row is detected.
    let table: Vec<u8> = (0..ROWS * NE0)
        .flat_map(|i| {
            half::f16::from_f32(((i / NE0) as f32) + (i % NE0) as f32 / 1024.0).to_le_bytes()
        })
        .collect();
    gguf::write(
        &src,
        &meta,
        [(
            "per_layer_token_embd.weight",
            GgmlType::F16,
            &[NE0, ROWS][..],
            &table[..],
        )],
    )
    .unwrap();
    let out = dir.join("ple.gpack");
    gpack_convert::convert(
        &gpack_convert::ConvertOptions {
            source: src,
            output: out.clone(),
            ..Default::default()
        },
        &(),
    )
    .unwrap();
    (out, table)
}

/// The trace: a skewed random walk (hot rows repeat, so the cache hits).
fn trace(n: usize) -> Vec<u64> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) {
                x % 40
            } else {
                x % ROWS
            }
        })
        .collect()
}

/// Reference model: per set a list in recency order, most recent first.
fn reference_counts(trace: &[u64], sets: usize, ways: usize) -> (u64, u64) {
    let mut s: Vec<VecDeque<u64>> = vec![VecDeque::new(); sets];
    let (mut hits, mut misses) = (0, 0);
    for &r in trace {
        let set = &mut s[(r % sets as u64) as usize];
        if let Some(pos) = set.iter().position(|&x| x == r) {
            hits += 1;
            set.remove(pos);
        } else {
            misses += 1;
            if set.len() == ways {
                set.pop_back();
            }
        }
        set.push_front(r);
    }
    (hits, misses)
}

#[test]
fn rows_are_identical_in_both_modes_and_the_cache_matches_its_model() {
    let dir = tempfile::tempdir().unwrap();
    let (path, table) = make_gpack(dir.path());
    let row_bytes = (NE0 * 2) as usize;
    let mut mm = PleTable::open(&path, PleIo::Mmap).unwrap();
    let (sets, ways) = (16, 4);
    let mut dio = PleTable::open(&path, PleIo::Direct { sets, ways }).unwrap();
    assert_eq!(
        (mm.rows(), dio.rows(), dio.row_bytes()),
        (ROWS, ROWS, row_bytes)
    );
    let t = trace(5000);
    for &r in &t {
        let want = &table[r as usize * row_bytes..(r as usize + 1) * row_bytes];
        assert_eq!(mm.row(r).unwrap(), want, "mmap row {r}");
        assert_eq!(dio.row(r).unwrap(), want, "direct row {r}");
    }
    let (hits, misses) = reference_counts(&t, sets, ways);
    let st = dio.stats();
    assert_eq!((st.hits, st.misses), (hits, misses));
    assert!(
        hits > 500 && misses > 500,
        "the trace exercises both: {hits} hits, {misses} misses"
    );
    assert!(mm.row(ROWS).is_err());
}
