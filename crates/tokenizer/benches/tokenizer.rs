//! Load time and encode throughput: GBT1 vs the `tokenizers` crate, same run, same inputs.
//!
//! `cargo bench -p gpack-tokenizer --bench tokenizer` (one thread: the peer's encode of a
//! single string does not use rayon; RAYON_NUM_THREADS=1 is set anyway).
//! Before timing, ids are checked identical to the peer (and to the committed references).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpack_tokenizer::{Gbt1, Tokenizer, TokenizerSpec};
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tokenizer")
}

fn gunzip(p: &std::path::Path) -> Vec<u8> {
    let mut v = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(p).unwrap())
        .read_to_end(&mut v)
        .unwrap();
    v
}

struct Case {
    name: &'static str,
    json_path: PathBuf,
    gbt1_path: PathBuf,
    gbt1: Vec<u8>,
    peer: tokenizers::Tokenizer,
}

fn setup() -> Vec<Case> {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    std::env::set_var("TOKENIZERS_PARALLELISM", "false");
    let dir = std::env::temp_dir().join("gpack-tok-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = Vec::new();
    for name in ["smollm2", "gemma3"] {
        let d = testdata().join(name);
        let j = gunzip(&d.join("tokenizer.json.gz"));
        let c = gunzip(&d.join("tokenizer_config.json.gz"));
        let json_path = dir.join(format!("{name}.tokenizer.json"));
        std::fs::write(&json_path, &j).unwrap();
        // HF semantics, so that ids are comparable with the peer.
        let gbt1 = TokenizerSpec::from_hf_json(&j, Some(&c))
            .unwrap()
            .to_gbt1()
            .unwrap();
        let gbt1_path = dir.join(format!("{name}.gbt1"));
        std::fs::write(&gbt1_path, &gbt1).unwrap();
        let peer = tokenizers::Tokenizer::from_file(&json_path).unwrap();
        out.push(Case {
            name,
            json_path,
            gbt1_path,
            gbt1,
            peer,
        });
    }
    out
}

fn bench(c: &mut Criterion) {
    let cases = setup();
    let corpus = std::fs::read_to_string(testdata().join("corpus.txt")).unwrap();

    // Identical ids, checked before timing.
    for k in &cases {
        let ours = Tokenizer::from_bytes(&k.gbt1)
            .unwrap()
            .encode(&corpus, false);
        let theirs = k
            .peer
            .encode(corpus.as_str(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        assert_eq!(
            ours, theirs,
            "{}: ids differ from the tokenizers crate",
            k.name
        );
        eprintln!(
            "{}: {} tokens, identical to the tokenizers crate",
            k.name,
            ours.len()
        );
    }

    let mut g = c.benchmark_group("load");
    g.measurement_time(Duration::from_secs(4));
    for k in &cases {
        g.bench_with_input(
            BenchmarkId::new("gbt1_parse_in_memory", k.name),
            &k.gbt1,
            |b, bytes| {
                b.iter(|| {
                    Gbt1::parse(std::hint::black_box(bytes))
                        .unwrap()
                        .vocab_size()
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("gbt1_read_file_and_parse", k.name),
            &k.gbt1_path,
            |b, p| {
                b.iter(|| {
                    let v = std::fs::read(p).unwrap();
                    Gbt1::parse(&v).unwrap().vocab_size()
                })
            },
        );
    }
    g.sample_size(10);
    for k in &cases {
        g.bench_with_input(
            BenchmarkId::new("tokenizers_from_file", k.name),
            &k.json_path,
            |b, p| {
                b.iter(|| {
                    tokenizers::Tokenizer::from_file(p)
                        .unwrap()
                        .get_vocab_size(true)
                })
            },
        );
    }
    g.finish();

    let mut g = c.benchmark_group("encode_corpus");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Bytes(corpus.len() as u64));
    for k in &cases {
        let t = Tokenizer::from_bytes(&k.gbt1).unwrap();
        g.bench_function(BenchmarkId::new("gbt1", k.name), |b| {
            b.iter(|| t.encode(std::hint::black_box(&corpus), false).len())
        });
        g.bench_function(BenchmarkId::new("gbt1_cold_cache", k.name), |b| {
            b.iter(|| {
                Tokenizer::clear_thread_cache();
                t.encode(std::hint::black_box(&corpus), false).len()
            })
        });
        g.bench_function(BenchmarkId::new("tokenizers_encode", k.name), |b| {
            b.iter(|| {
                k.peer
                    .encode(std::hint::black_box(corpus.as_str()), false)
                    .unwrap()
                    .len()
            })
        });
        g.bench_function(BenchmarkId::new("tokenizers_encode_fast", k.name), |b| {
            b.iter(|| {
                k.peer
                    .encode_fast(std::hint::black_box(corpus.as_str()), false)
                    .unwrap()
                    .len()
            })
        });
    }
    g.finish();

    let lines: Vec<&str> = corpus.split('\n').collect();
    let mut g = c.benchmark_group("encode_lines");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Bytes(corpus.len() as u64));
    for k in &cases {
        let t = Tokenizer::from_bytes(&k.gbt1).unwrap();
        g.bench_function(BenchmarkId::new("gbt1", k.name), |b| {
            b.iter(|| {
                lines
                    .iter()
                    .map(|l| t.encode(l, false).len())
                    .sum::<usize>()
            })
        });
        g.bench_function(BenchmarkId::new("gbt1_cold_cache", k.name), |b| {
            b.iter(|| {
                Tokenizer::clear_thread_cache();
                lines
                    .iter()
                    .map(|l| t.encode(l, false).len())
                    .sum::<usize>()
            })
        });
        g.bench_function(BenchmarkId::new("tokenizers_encode_fast", k.name), |b| {
            b.iter(|| {
                lines
                    .iter()
                    .map(|l| k.peer.encode_fast(*l, false).unwrap().len())
                    .sum::<usize>()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
