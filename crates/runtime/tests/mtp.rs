//! Multi-token prediction (the tiny GLM-4.7-Flash fixture `glm4-mtp`: a
//! deepseek2 trunk of 4 layers plus one MTP block, as llama.cpp's converter
//! writes it; testdata/scripts/36_make_tiny_glm4_mtp.py): the trunk runs
//! without the block and matches transformers; the block's logits match
//! transformers' own layer code on every teacher-forced pair, from the
//! GGUF and the HF directory; pairs fed one at a time give the batch's bits;
//! the generation loop hands a drafter exactly the trunk's hidden states of
//! the positions it keeps; speculation with the block gives plain decoding's
//! tokens, greedy and seeded.

use super::fixtures::{check_exact, ids, json, rel_l2, testdata, top2_margin};
use gpack_runtime::spec::DEFAULT_MAX_DRAFT;
use gpack_runtime::{
    generate_with, Drafter, GenerateConfig, GgufWeights, GpackWeights, LoadOptions, Logits, Model,
    Mtp, MtpDrafter, NgramDrafter, SamplerConfig, WeightSource,
};
use std::path::PathBuf;

const ARCH: &str = "glm4-mtp";

fn fixture() -> PathBuf {
    testdata().join("tiny").join(ARCH)
}

fn gguf() -> PathBuf {
    fixture().join(format!("{ARCH}-f16.gguf"))
}

#[test]
fn trunk_runs_without_the_mtp_block_and_matches_transformers() {
    let w = GgufWeights::open(&gguf()).unwrap();
    let m = Model::load(&w).unwrap();
    let c = json(&fixture().join("hf/config.json"));
    assert_eq!(
        m.config.n_layer as u64,
        c["num_hidden_layers"].as_u64().unwrap()
    );
    assert_eq!(
        m.config.n_nextn as u64,
        c["num_nextn_predict_layers"].as_u64().unwrap()
    );
    check_exact(ARCH, "f16", &gguf());
    check_exact(ARCH, "hf", &fixture().join("hf"));
}

/// The block's logits for pairs `(h_p, T[p+1])`, p = 0 .. L-2, over the
/// reference's tokens T, from the weights `w`.
fn mtp_logits(w: &dyn WeightSource, tokens: &[u32]) -> Vec<f32> {
    let m = Model::load_with(w, &LoadOptions::reference()).unwrap();
    let mw = m.mtp_weights(w).expect("the fixture has an MTP block");
    let mtp = Mtp::load(&mw, &LoadOptions::reference()).unwrap();
    let mut s = m.new_state(64);
    m.forward(&mut s, tokens, Logits::None).unwrap();
    let h = m.step_hidden(&s, tokens.len());
    let d = m.config.n_embd;
    let n = tokens.len() - 1;
    let mut ms = mtp.new_state(64);
    mtp.forward(&mut ms, &tokens[1..], &h[..n * d], Logits::All)
        .unwrap()
        .to_vec()
}

#[test]
fn mtp_block_matches_transformers() {
    let r = json(&fixture().join("mtp_reference.json"));
    let tokens = ids(&r["tokens"]);
    let n_vocab = r["n_vocab"].as_u64().unwrap() as usize;
    let rows = r["rows"].as_u64().unwrap() as usize;
    assert_eq!(rows, tokens.len() - 1);
    let bytes = std::fs::read(fixture().join("mtp_logits.f32le")).unwrap();
    let want: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(want.len(), rows * n_vocab);
    let want_argmax = ids(&r["argmax"]);
    let hf = GgufWeights::open(&fixture().join("hf")).unwrap();
    let gg = GgufWeights::open(&gguf()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let packed = tmp.path().join("glm4-mtp.gpack");
    gpack_convert::convert(
        &gpack_convert::ConvertOptions {
            source: gguf(),
            output: packed.clone(),
            ..Default::default()
        },
        &(),
    )
    .unwrap();
    let gp = GpackWeights::open(&packed).unwrap();
    // The block lives in the Mtp section, not in the trunk's index.
    for name in ["blk.4.attn_norm.weight", "blk.4.nextn.eh_proj.weight"] {
        assert!(gp.tensor_entry(name).is_none(), "{name} in the TensorIndex");
        assert!(gp.tensor(name).is_some(), "{name} not served");
    }
    assert!(gp.tensor_entry("blk.3.attn_norm.weight").is_some());
    for (src, w) in [
        ("f16", &gg as &dyn WeightSource),
        ("hf", &hf as &dyn WeightSource),
        ("gpack", &gp as &dyn WeightSource),
    ] {
        let got = mtp_logits(w, &tokens);
        assert_eq!(got.len(), want.len(), "{src}");
        let d = rel_l2(&got, &want);
        let mut same = 0;
        let mut ties = 0;
        for p in 0..rows {
            let g = &got[p * n_vocab..(p + 1) * n_vocab];
            let wrow = &want[p * n_vocab..(p + 1) * n_vocab];
            let am = gpack_runtime::argmax(g);
            if am == want_argmax[p] {
                same += 1;
            } else {
                // Only a near-tie of the reference may flip.
                assert!(
                    top2_margin(wrow) < 0.02,
                    "{src}: row {p} argmax {am} vs {} (margin {})",
                    want_argmax[p],
                    top2_margin(wrow)
                );
                ties += 1;
            }
        }
        eprintln!("{ARCH} MTP/{src}: {rows} rows, rel L2 {d:.2e}, argmax {same}/{rows} ({ties} near-ties flipped)");
        assert!(d < 1e-4, "{src}: MTP logits rel L2 {d}");
        assert!(same + 2 >= rows, "{src}: argmax {same}/{rows}");
    }
}

#[test]
fn mtp_pairs_one_at_a_time_equal_the_batch() {
    let r = json(&fixture().join("mtp_reference.json"));
    let tokens = ids(&r["tokens"]);
    let w = GgufWeights::open(&gguf()).unwrap();
    let m = Model::load(&w).unwrap();
    let mw = m.mtp_weights(&w).unwrap();
    let mtp = Mtp::load(&mw, &LoadOptions::default()).unwrap();
    let mut s = m.new_state(64);
    m.forward(&mut s, &tokens, Logits::None).unwrap();
    let h = m.step_hidden(&s, tokens.len());
    let (d, v) = (m.config.n_embd, m.config.n_vocab);
    let n = tokens.len() - 1;
    let mut batch = mtp.new_state(64);
    let all = mtp
        .forward(&mut batch, &tokens[1..], &h[..n * d], Logits::All)
        .unwrap()
        .to_vec();
    let mut one = mtp.new_state(64);
    for p in 0..n {
        let l = mtp
            .forward(
                &mut one,
                &tokens[p + 1..p + 2],
                &h[p * d..(p + 1) * d],
                Logits::Last,
            )
            .unwrap();
        let want = &all[p * v..(p + 1) * v];
        assert!(
            l.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
            "pair {p}: one at a time differs from the batch"
        );
    }
    // A wrong hidden-state size is an error, not a panic.
    assert!(mtp
        .forward(&mut one, &tokens[..2], &h[..d], Logits::Last)
        .is_err());
}

/// Drafts with an inner source and records every hidden state the loop
/// hands it, by position (the last write wins).
struct Recorder<'a> {
    inner: &'a mut dyn Drafter,
    d: usize,
    rows: Vec<Option<Vec<f32>>>,
    calls: usize,
}

impl Drafter for Recorder<'_> {
    fn draft(&mut self, h: &[u32], max: usize, out: &mut Vec<u32>) -> gpack_runtime::Result<()> {
        self.inner.draft(h, max, out)
    }
    fn observe(&mut self, drafted: usize, accepted: usize) {
        self.inner.observe(drafted, accepted)
    }
    fn wants_hidden(&self) -> bool {
        true
    }
    fn hidden(&mut self, from: usize, rows: &[f32]) {
        self.calls += 1;
        self.rows.truncate(from);
        self.rows.resize(from, None);
        self.rows
            .extend(rows.chunks_exact(self.d).map(|r| Some(r.to_vec())));
    }
}

/// With n-gram drafts that are partly accepted (a repeated prompt), the
/// loop gives the drafter the trunk's hidden state of every kept position:
/// bit for bit those of one forward over the final text.
#[test]
fn the_generation_loop_hands_drafters_the_kept_hidden_states() {
    let w = GgufWeights::open(&gguf()).unwrap();
    let m = Model::load(&w).unwrap();
    let seg: Vec<u32> = (0..9).map(|i| 100 + 37 * i).collect();
    let mut prompt = seg.clone();
    prompt.extend(&seg);
    prompt.extend(&seg[..5]);
    let cfg = GenerateConfig {
        max_tokens: 40,
        sampler: SamplerConfig::greedy(),
        prefill_batch: 7,
        ..GenerateConfig::default()
    };
    let mut ng = NgramDrafter::default();
    let mut rec = Recorder {
        inner: &mut ng,
        d: m.config.n_embd,
        rows: Vec::new(),
        calls: 0,
    };
    let mut s = m.new_state(128);
    let g = generate_with(&m, &mut s, &prompt, &cfg, None, Some(&mut rec), |_, _| true).unwrap();
    assert!(
        g.spec.accepted > 0 && g.spec.accepted < g.spec.drafted,
        "{:?}",
        g.spec
    );
    // The cache holds the prompt and every token but the last.
    let mut text = prompt.clone();
    text.extend(&g.tokens[..g.tokens.len() - 1]);
    assert_eq!(s.pos(), text.len());
    assert_eq!(rec.rows.len(), text.len(), "positions handed over");
    let mut fresh = m.new_state(128);
    m.forward(&mut fresh, &text, Logits::None).unwrap();
    let want = m.step_hidden(&fresh, text.len());
    for (p, r) in rec.rows.iter().enumerate() {
        let r = r
            .as_ref()
            .unwrap_or_else(|| panic!("position {p} never handed over"));
        let wp = &want[p * rec.d..(p + 1) * rec.d];
        assert!(
            r.iter().zip(wp).all(|(a, b)| a.to_bits() == b.to_bits()),
            "position {p}: the hidden state handed over is not the trunk's"
        );
    }
    eprintln!(
        "{ARCH}: {} hidden-state hand-overs for {} positions, {:?}",
        rec.calls,
        text.len(),
        g.spec
    );
}

/// Speculation with the MTP block gives plain decoding's tokens, greedy and
/// seeded, with budgets and contexts that cut drafts.
#[test]
fn mtp_speculation_gives_the_plain_tokens() {
    let w = GgufWeights::open(&gguf()).unwrap();
    let m = Model::load(&w).unwrap();
    let mw = m.mtp_weights(&w).unwrap();
    let mtp = Mtp::load(&mw, &LoadOptions::default()).unwrap();
    let r = json(&fixture().join("reference.json"));
    let base = ids(&r["prompt_ids"]);
    let mut long = base.clone();
    long.extend(ids(&r["greedy_new_ids"]));
    let samplers = [
        SamplerConfig::greedy(),
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            seed: 5,
            ..SamplerConfig::default()
        },
    ];
    let mut drafted = 0;
    for prompt in [&base, &long] {
        for sampler in &samplers {
            for (max_tokens, n_ctx) in [(32, 96), (40, prompt.len() + 9)] {
                let cfg = GenerateConfig {
                    max_tokens,
                    sampler: sampler.clone(),
                    prefill_batch: 5,
                    ..GenerateConfig::default()
                };
                let run = |d: Option<&mut dyn Drafter>| {
                    let mut s = m.new_state(n_ctx);
                    let g = generate_with(&m, &mut s, prompt, &cfg, None, d, |_, _| true).unwrap();
                    (g.tokens, g.stop, s.pos(), g.spec)
                };
                let plain = run(None);
                let mut md = MtpDrafter::new(&mtp, n_ctx, DEFAULT_MAX_DRAFT, 0.0);
                let spec = run(Some(&mut md));
                let what = format!(
                    "prompt {} temp {} max {max_tokens} ctx {n_ctx}",
                    prompt.len(),
                    sampler.temperature
                );
                assert_eq!(plain.0, spec.0, "{what}: tokens");
                assert_eq!(plain.1, spec.1, "{what}: stop");
                assert_eq!(plain.2, spec.2, "{what}: cache position");
                drafted += spec.3.drafted;
            }
        }
    }
    assert!(drafted > 0, "the MTP block drafted nothing");
}
