//! Gemma 3n (the PLE family) against the transformers reference of the tiny
//! fixture (`testdata/scripts/28_make_tiny_gemma3n.py`), and its PLE table
//! read every way: in place from the GGUF tensor, and from a converted
//! .gpack's Ple section by direct I/O with a row cache (large and tiny:
//! evicting) and by mmap — all bit-identical, with the row and cache
//! counters checked against a model of the set-associative cache.

use super::fixtures::*;
use gpack_runtime::ple::PleIo;
use gpack_runtime::{
    argmax, GgufWeights, GpackWeights, LoadOptions, Logits, Model, PleMode, WeightSource,
};
use std::path::Path;

fn dir() -> std::path::PathBuf {
    testdata().join("tiny/gemma3n")
}

#[test]
fn tiny_gemma3n_f16_gguf_matches_transformers() {
    check_exact("gemma3n", "f16", &dir().join("gemma3n-f16.gguf"));
}

/// Prompt logits (every position) and 8 greedy steps' logits, and the
/// tokens run, in order.
fn logits<'w>(
    w: &'w dyn WeightSource,
    ple: PleIo,
    prompt: &[u32],
) -> (Vec<f32>, Vec<u32>, Model<'w>) {
    let m = Model::load_with(
        w,
        &LoadOptions {
            ple,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let mut s = m.new_state(64);
    let mut all = m.forward(&mut s, prompt, Logits::All).unwrap().to_vec();
    let mut last = all[all.len() - m.config.n_vocab..].to_vec();
    let mut trace = prompt.to_vec();
    for _ in 0..8 {
        let t = argmax(&last);
        trace.push(t);
        last = m.forward(&mut s, &[t], Logits::Last).unwrap().to_vec();
        all.extend_from_slice(&last);
    }
    (all, trace, m)
}

/// Hits of a `sets × ways` LRU-within-set cache of rows on `trace`.
fn model_hits(trace: &[u32], sets: usize, ways: usize) -> u64 {
    let mut lines: Vec<Vec<u32>> = vec![Vec::new(); sets];
    let mut hits = 0;
    for &r in trace {
        let set = &mut lines[r as usize % sets];
        if let Some(i) = set.iter().position(|&x| x == r) {
            hits += 1;
            set.remove(i);
        } else if set.len() == ways {
            set.remove(0);
        }
        set.push(r);
    }
    hits
}

fn convert(src: &Path, out: &Path) {
    gpack_convert::convert(
        &gpack_convert::ConvertOptions {
            source: src.to_path_buf(),
            output: out.to_path_buf(),
            ..Default::default()
        },
        &(),
    )
    .unwrap_or_else(|e| panic!("convert {}: {e:?}", src.display()));
}

#[test]
fn ple_rows_from_gguf_and_gpack_in_every_mode_are_identical() {
    let r = json(&dir().join("reference.json"));
    // The reference prompt twice: repeated tokens hit the row cache.
    let mut prompt = ids(&r["prompt_ids"]);
    prompt.extend(ids(&r["prompt_ids"]));
    let tmp = tempfile::tempdir().unwrap();
    for ty in ["f16", "q8_0"] {
        let gguf = dir().join(format!("gemma3n-{ty}.gguf"));
        let gp = tmp.path().join(format!("gemma3n-{ty}.gpack"));
        convert(&gguf, &gp);
        let g = GgufWeights::open(&gguf).unwrap();
        let (want, trace, m) = logits(&g, PleIo::Mmap, &prompt);
        let st = m.ple_stats().unwrap();
        assert_eq!(st.mode, PleMode::Tensor, "a GGUF's table is a tensor");
        assert_eq!(st.rows_read, trace.len() as u64, "one row per token");
        let w = GpackWeights::open(&gp).unwrap();
        for io in [
            PleIo::Direct {
                sets: 1024,
                ways: 4,
            },
            PleIo::Direct { sets: 4, ways: 2 },
            PleIo::Mmap,
        ] {
            let (got, _, m) = logits(&w, io, &prompt);
            assert!(
                got.len() == want.len()
                    && got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{ty} {io:?}: logits differ from the GGUF run"
            );
            let st = m.ple_stats().unwrap();
            assert_eq!(st.rows_read, trace.len() as u64, "{ty} {io:?}");
            match io {
                PleIo::Direct { sets, ways } => {
                    assert!(matches!(st.mode, PleMode::Direct { .. }));
                    let hits = model_hits(&trace, sets, ways);
                    assert_eq!(st.cache.hits, hits, "{ty} {io:?}: {st:?}");
                    assert_eq!(st.cache.misses, trace.len() as u64 - hits, "{ty} {io:?}");
                    assert!(hits > 0, "the repeated prompt hits the cache");
                }
                PleIo::Mmap => {
                    assert_eq!(st.mode, PleMode::Mmap);
                    assert_eq!((st.cache.hits, st.cache.misses), (0, 0));
                }
            }
        }
        if ty == "f16" {
            // The .gpack run is the GGUF run: check it against transformers too.
            check_exact("gemma3n", "gpack", &gp);
        }
    }
}

#[test]
fn tiny_gemma3n_q8_0_matches_the_weight_only_q8_0_reference() {
    // No llama.cpp peer for this fixture (its runtime hard-codes the released
    // sizes). The reference: transformers in f32 with the GGUF's Q8_0
    // weights (`testdata/scripts/29_gemma3n_q8_0_reference.py`); what is left
    // is the int8 activation quantization of the kernels.
    let q = json(&dir().join("reference_q8_0.json"));
    let f = json(&dir().join("reference.json"));
    let prompt = ids(&q["prompt_ids"]);
    let got = run(&dir().join("gemma3n-q8_0.gguf"), &prompt, 0);
    let want = floats(&q["last_logits"]);
    let rl2 = rel_l2(&got.last_logits, &want);
    let weights_only = rel_l2(&want, &floats(&f["last_logits"]));
    let want_argmax = ids(&q["argmax_per_position"]);
    let same = got
        .argmax
        .iter()
        .zip(&want_argmax)
        .filter(|(a, b)| a == b)
        .count();
    eprintln!(
        "gemma3n/q8_0: rel_l2 {rl2:.5} vs the q8_0-weights reference (whose own distance to f32: {weights_only:.5}), argmax {same}/{}",
        want_argmax.len()
    );
    assert!(rl2 < 0.05, "q8_0 rel L2 {rl2}");
    assert!(same * 4 >= want_argmax.len() * 3, "argmax {same}/16");
}

#[test]
fn batched_gemma3n_steps_equal_solo_runs() {
    let g = GgufWeights::open(&dir().join("gemma3n-q8_0.gguf")).unwrap();
    let prompts: [&[u32]; 3] = [&[2, 10, 99, 1500, 7], &[2, 44], &[2, 600, 601, 602]];
    for kv in gpack_runtime::KvType::ALL {
        let opts = LoadOptions {
            kv: gpack_runtime::KvTypes::both(kv),
            ..LoadOptions::default()
        };
        let m = Model::load_with(&g, &opts).unwrap();
        let what = format!("gemma3n kv {kv}");
        assert_batched_equals_solo(&m, &prompts, &what);
    }
}

#[test]
fn tiny_gemma3n_hf_dir_and_its_gpack_match_transformers() {
    check_exact("gemma3n", "hf", &dir().join("hf"));
    let tmp = tempfile::tempdir().unwrap();
    let gp = tmp.path().join("g.gpack");
    convert(&dir().join("hf"), &gp);
    check_exact("gemma3n", "hf-gpack", &gp);
}
