//! Speculative decoding gives the tokens of plain decoding: greedy and
//! seeded sampling, every draft source, every tiny fixture family and
//! SmolLM2, with drafts cut by the context, the token budget and stop
//! strings; and the sampled distribution is the target's.

use super::fixtures::testdata;
use gpack_runtime::spec::{DEFAULT_MAX_DRAFT, DEFAULT_P_MIN};
use gpack_runtime::{
    generate, generate_with, Drafter, GenerateConfig, GgufWeights, Logits, Model, ModelDrafter,
    NgramDrafter, SamplerConfig, StopReason,
};

/// Every tiny fixture family, and the variants whose caches differ:
/// sliding windows (gemma2, gemma3, gpt-oss), Gemma 3n's shared KV layers,
/// multi-head latent attention (deepseek2 and its variants, glm4-mtp).
fn families() -> impl Iterator<Item = &'static str> {
    gpack_testkit::TINY_FAMILIES.into_iter().chain([
        "gemma3n",
        "deepseek2-lite",
        "deepseek2-v3",
        "glm4-mtp",
    ])
}

/// Whether the model keeps DeepSeek's latent (MLA) cache.
fn m_is_mla(w: &GgufWeights) -> bool {
    Model::load(w).unwrap().config.mla.is_some()
}

/// Prompts that make the n-gram source draft (repeated segments) and ones
/// that do not, over the vocabulary `n_vocab`.
fn prompts(n_vocab: u32) -> Vec<Vec<u32>> {
    let mut seed = 7u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as u32) % n_vocab
    };
    let mut out = Vec::new();
    for len in [3usize, 9, 17] {
        let seg: Vec<u32> = (0..len).map(|_| next()).collect();
        // seg seg seg[..len/2]: the lookup continues the segment.
        let mut p = seg.clone();
        p.extend(&seg);
        p.extend(&seg[..len / 2 + 1]);
        out.push(p);
        // No repetition at all.
        out.push((0..len + 2).map(|_| next()).collect());
    }
    out
}

struct Outcome {
    tokens: Vec<u32>,
    text: String,
    stop: StopReason,
    pos: usize,
    drafted: u64,
    accepted: u64,
}

#[allow(clippy::too_many_arguments)]
fn run(
    m: &Model,
    prompt: &[u32],
    cfg: &GenerateConfig,
    n_ctx: usize,
    tok: Option<gpack_tokenizer::Tokenizer<'_>>,
    drafter: Option<&mut dyn Drafter>,
) -> Outcome {
    let mut s = m.new_state(n_ctx);
    let mut streamed = String::new();
    let g = generate_with(m, &mut s, prompt, cfg, tok, drafter, |_, t| {
        streamed.push_str(t);
        true
    })
    .unwrap();
    assert_eq!(streamed, g.text, "the streamed text is the result's");
    Outcome {
        tokens: g.tokens,
        text: g.text,
        stop: g.stop,
        pos: s.pos(),
        drafted: g.spec.drafted,
        accepted: g.spec.accepted,
    }
}

fn assert_same(a: &Outcome, b: &Outcome, what: &str) {
    assert_eq!(a.tokens, b.tokens, "{what}: tokens");
    assert_eq!(a.text, b.text, "{what}: text");
    assert_eq!(a.stop, b.stop, "{what}: stop reason");
    assert_eq!(a.pos, b.pos, "{what}: cache position after");
}

/// A check (one forward of k rows) gives each row the logits it gets when
/// decoded alone, bit for bit, the property that keeps speculative text
/// that of plain decoding: on every family, with f32, f16, q8_0 and q4_0
/// caches (MLA families refuse the quantized ones), after
/// prefixes that put the rows inside one key block, across a block
/// boundary (64 positions) and past two.
#[test]
fn a_check_gives_each_row_the_bits_of_decoding_it_alone() {
    for fam in families() {
        let d = testdata().join("tiny").join(fam);
        let w = GgufWeights::open(&d.join(format!("{fam}-f16.gguf"))).unwrap();
        for kv in gpack_runtime::KvType::ALL {
            let opts = gpack_runtime::LoadOptions {
                kv: gpack_runtime::KvTypes::both(kv),
                ..Default::default()
            };
            let m = match Model::load_with(&w, &opts) {
                // MLA (deepseek2 and its variants, glm4-mtp) refuses them.
                Err(e) if kv.quant().is_some() && m_is_mla(&w) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("MLA") && msg.contains(kv.name()),
                        "{fam}: {msg}"
                    );
                    continue;
                }
                m => m.unwrap(),
            };
            let nv = m.config.n_vocab;
            let tokens: Vec<u32> = (0..150u32).map(|i| (i * 7919 + 13) % nv as u32).collect();
            for (prefix, k) in [(5, 2), (60, 8), (130, 8), (137, 5)] {
                let what = format!("{fam} kv {kv} prefix {prefix} rows {k}");
                let (pre, rows) = (&tokens[..prefix], &tokens[prefix..prefix + k]);
                let mut s = m.new_state(160);
                m.forward(&mut s, pre, Logits::Last).unwrap();
                let check = m.forward(&mut s, rows, Logits::All).unwrap().to_vec();
                assert_eq!(check.len(), k * nv, "{what}");
                let mut s = m.new_state(160);
                m.forward(&mut s, pre, Logits::Last).unwrap();
                for (i, &t) in rows.iter().enumerate() {
                    let alone = m.forward(&mut s, &[t], Logits::Last).unwrap();
                    let row = &check[i * nv..(i + 1) * nv];
                    let same = row
                        .iter()
                        .zip(alone)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{what}: row {i} differs from decoding it alone");
                }
            }
        }
    }
}

/// Every source, on every family, greedy and sampled, with budgets and
/// contexts that end generation mid-draft.
#[test]
fn speculation_gives_the_plain_tokens_on_every_family() {
    for fam in families() {
        let d = testdata().join("tiny").join(fam);
        let target_path = d.join(format!("{fam}-f16.gguf"));
        let draft_path = d.join(format!("{fam}-q8_0.gguf"));
        let wt = GgufWeights::open(&target_path).unwrap();
        let wd = GgufWeights::open(&draft_path).unwrap();
        let target = Model::load(&wt).unwrap();
        let draft = Model::load(&wd).unwrap();
        let n_vocab = target.config.n_vocab as u32;
        let samplers = [
            SamplerConfig::greedy(),
            SamplerConfig {
                temperature: 1.0,
                top_k: 50,
                top_p: 0.9,
                min_p: 0.01,
                repetition_penalty: 1.1,
                repeat_last_n: 16,
                seed: 99,
            },
        ];
        let (mut drafted, mut accepted) = (0, 0);
        for (pi, prompt) in prompts(n_vocab).iter().enumerate() {
            for sampler in &samplers {
                // (max_tokens, n_ctx): the budget ends it; the context does
                // (a few positions after the prompt, mid-draft).
                for (max_tokens, n_ctx) in [(24, 64), (40, prompt.len() + 11)] {
                    let cfg = GenerateConfig {
                        max_tokens,
                        sampler: sampler.clone(),
                        ..GenerateConfig::default()
                    };
                    let what = format!(
                        "{fam} prompt {pi} temp {} max {max_tokens} ctx {n_ctx}",
                        sampler.temperature
                    );
                    let plain = run(&target, prompt, &cfg, n_ctx, None, None);
                    let mut ng = NgramDrafter::default();
                    let o = run(&target, prompt, &cfg, n_ctx, None, Some(&mut ng));
                    assert_same(&plain, &o, &format!("{what}, ngram"));
                    drafted += o.drafted;
                    accepted += o.accepted;
                    let mut md = ModelDrafter::new(&draft, n_ctx, DEFAULT_MAX_DRAFT, 0.0);
                    let o = run(&target, prompt, &cfg, n_ctx, None, Some(&mut md));
                    assert_same(&plain, &o, &format!("{what}, draft model"));
                    assert!(o.drafted > 0, "{what}: the draft model drafted nothing");
                    accepted += o.accepted;
                }
            }
        }
        // Verification with accepted drafts (and so a rollback of the
        // rejected rest) must have run: the draft model (the same weights
        // in q8_0) agrees often; a random model may not continue the
        // repeated segments.
        assert!(
            accepted > 0,
            "{fam}: n-gram drafted {drafted}, accepted (both sources) {accepted}"
        );
        eprintln!("{fam}: n-gram drafted {drafted}; accepted (both sources) {accepted}");
    }
}

/// Stop strings and stop tokens that fall inside a verified draft.
#[test]
fn stops_inside_a_draft_end_where_plain_decoding_ends() {
    let d = testdata().join("tiny/llama");
    let path = d.join("llama-f16.gguf");
    let w = GgufWeights::open(&path).unwrap();
    let m = Model::load(&w).unwrap();
    let loaded = gpack_tokenizer::load_any(&path).unwrap();
    let tok = loaded.tokenizer().unwrap();
    let text = "one two three four one two three four one two";
    let prompt = tok.encode(text, false);
    let cfg = GenerateConfig {
        max_tokens: 32,
        sampler: SamplerConfig::greedy(),
        ..GenerateConfig::default()
    };
    let full = run(&m, &prompt, &cfg, 128, Some(tok), None);
    let chars: Vec<char> = full.text.chars().collect();
    assert!(chars.len() >= 12, "{:?}", full.text);
    let mut checked = 0;
    for at in [chars.len() / 3, chars.len() / 2, 2 * chars.len() / 3] {
        let stop: String = chars[at..at + 2].iter().collect();
        let cfg = GenerateConfig {
            stop_strings: vec![stop.clone()],
            ..cfg.clone()
        };
        let plain = run(&m, &prompt, &cfg, 128, Some(tok), None);
        assert_eq!(plain.stop, StopReason::StopString(stop.clone()));
        let mut md = ModelDrafter::new(&m, 128, DEFAULT_MAX_DRAFT, 0.0);
        let o = run(&m, &prompt, &cfg, 128, Some(tok), Some(&mut md));
        assert_same(&plain, &o, &format!("stop string {stop:?}"));
        checked += 1;
    }
    // A stop token: the 5th greedy token.
    let cfg = GenerateConfig {
        stop_tokens: vec![full.tokens[4]],
        ..cfg
    };
    let plain = run(&m, &prompt, &cfg, 128, Some(tok), None);
    let mut md = ModelDrafter::new(&m, 128, DEFAULT_MAX_DRAFT, 0.0);
    let o = run(&m, &prompt, &cfg, 128, Some(tok), Some(&mut md));
    assert_same(&plain, &o, "stop token");
    assert!(o.accepted > 0, "the self-draft was verified");
    assert_eq!(checked, 3);
}

/// Softmax of the top `k` logits at temperature 1 (the sampler's
/// distribution with top_p 1, min_p 0), as (id, p).
fn top_k_softmax(logits: &[f32], k: usize) -> Vec<(u32, f64)> {
    let mut c: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &v)| (i as u32, v))
        .collect();
    c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    c.truncate(k);
    let m = c[0].1 as f64;
    let z: f64 = c.iter().map(|&(_, v)| (v as f64 - m).exp()).sum();
    c.iter()
        .map(|&(i, v)| (i, (v as f64 - m).exp() / z))
        .collect()
}

/// The first two sampled tokens over many seeds, the second drawn from a
/// verified draft row: their joint frequencies match the target's
/// p(t0) · p(t1 | t0) (from plain forwards) within a total-variation bound.
#[test]
fn speculative_sampling_keeps_the_target_distribution() {
    let d = testdata().join("tiny/qwen2");
    let w = GgufWeights::open(&d.join("qwen2-f16.gguf")).unwrap();
    let m = Model::load(&w).unwrap();
    let prompt = [5u32, 17, 33, 5, 17];
    let k = 4;
    let n = 3000u64;
    let mut counts = std::collections::HashMap::<(u32, u32), u64>::new();
    let mut verified = 0;
    for seed in 0..n {
        let cfg = GenerateConfig {
            // The third token leaves room for a one-token draft after t0.
            max_tokens: 3,
            sampler: SamplerConfig {
                temperature: 1.0,
                top_k: k,
                top_p: 1.0,
                min_p: 0.0,
                repetition_penalty: 1.0,
                repeat_last_n: 0,
                seed,
            },
            ..GenerateConfig::default()
        };
        let mut md = ModelDrafter::new(&m, 16, DEFAULT_MAX_DRAFT, 0.0);
        let o = run(&m, &prompt, &cfg, 16, None, Some(&mut md));
        assert_eq!(o.tokens.len(), 3);
        verified += o.drafted.min(1);
        *counts.entry((o.tokens[0], o.tokens[1])).or_default() += 1;
    }
    assert!(
        verified > n / 2,
        "the second token came from a verified draft only {verified} times"
    );
    // The target's joint distribution.
    let mut s = m.new_state(16);
    let first = top_k_softmax(m.forward(&mut s, &prompt, Logits::Last).unwrap(), k);
    let mut tv = 0.0;
    let mut inside = 0;
    for &(t0, p0) in &first {
        s.truncate(prompt.len());
        let second = top_k_softmax(m.forward(&mut s, &[t0], Logits::Last).unwrap(), k);
        for &(t1, p1) in &second {
            let c = *counts.get(&(t0, t1)).unwrap_or(&0);
            inside += c;
            tv += (c as f64 / n as f64 - p0 * p1).abs();
        }
    }
    // No draw outside the target's support.
    assert_eq!(inside, n, "draws outside the top-{k} pairs");
    let tv = tv / 2.0;
    eprintln!("total variation {tv:.4} over {n} draws ({verified} verified drafts)");
    // 16 cells, 3000 draws: the expected total variation of an exact
    // sampler is ≈ 0.035; a rule that over-accepts drafts is far off.
    assert!(
        tv < 0.08,
        "total variation {tv:.4} from the target's distribution"
    );
}

/// SmolLM2: greedy text with each source equals plain decoding, on prompts
/// that quote their input (where drafts are accepted) and one that does not.
#[test]
fn smollm2_speculative_greedy_equals_plain() {
    let model = gpack_testkit::smollm2();
    let w = GgufWeights::open(&model).unwrap();
    let m = Model::load(&w).unwrap();
    let loaded = gpack_tokenizer::load_any(&model).unwrap();
    let tok = loaded.tokenizer().unwrap();
    let code = "fn area(w: f64, h: f64) -> f64 {\n    let a = w * h;\n    a\n}\n";
    let prompts = [
        format!("Rewrite this code, renaming `area` to `surface`:\n{code}\nRewritten:\n"),
        "Repeat exactly: the cat sat on the mat. The cat sat on the mat.".to_string(),
        "Tell me a story about a dragon.".to_string(),
    ];
    let cfg = GenerateConfig {
        max_tokens: 48,
        sampler: SamplerConfig::greedy(),
        stop_tokens: tok.stop_ids(),
        ..GenerateConfig::default()
    };
    let mut accepted = 0;
    for p in &prompts {
        let ids = tok.encode(p, true);
        let plain = run(&m, &ids, &cfg, 256, Some(tok), None);
        let mut ng = NgramDrafter::default();
        let o = run(&m, &ids, &cfg, 256, Some(tok), Some(&mut ng));
        assert_same(&plain, &o, &format!("{p:?}, ngram"));
        eprintln!(
            "{p:?}: n-gram drafted {}, accepted {}",
            o.drafted, o.accepted
        );
        accepted += o.accepted;
        let mut md = ModelDrafter::new(&m, 256, DEFAULT_MAX_DRAFT, DEFAULT_P_MIN);
        let o = run(&m, &ids, &cfg, 256, Some(tok), Some(&mut md));
        assert_same(&plain, &o, &format!("{p:?}, self-draft"));
    }
    assert!(accepted > 0, "the quoting prompts accepted no n-gram draft");
    // `generate` is `generate_with` without a drafter.
    let ids = tok.encode(&prompts[2], true);
    let mut s = m.new_state(256);
    let g = generate(&m, &mut s, &ids, &cfg, Some(tok), |_, _| true).unwrap();
    assert_eq!(g.spec.drafted, 0);
}

/// A draft source that fails costs only the speculation: generation goes on
/// and gives plain decoding's tokens.
#[test]
fn a_failing_drafter_leaves_plain_decoding() {
    struct Failing(usize);
    impl Drafter for Failing {
        fn draft(&mut self, _: &[u32], _: usize, _: &mut Vec<u32>) -> gpack_runtime::Result<()> {
            self.0 += 1;
            Err(gpack_runtime::Error::ContextFull {
                needed: 2,
                capacity: 1,
            })
        }
        fn observe(&mut self, _: usize, _: usize) {}
    }
    let w = GgufWeights::open(&testdata().join("tiny/llama/llama-f16.gguf")).unwrap();
    let m = Model::load(&w).unwrap();
    let cfg = GenerateConfig {
        max_tokens: 12,
        sampler: SamplerConfig::greedy(),
        ..GenerateConfig::default()
    };
    let prompt = [5u32, 6, 7, 5, 6];
    let plain = run(&m, &prompt, &cfg, 64, None, None);
    let mut f = Failing(0);
    let o = run(&m, &prompt, &cfg, 64, None, Some(&mut f));
    assert_same(&plain, &o, "failing drafter");
    assert!(f.0 > 0, "the drafter was never asked");
    assert_eq!(o.drafted, 0);
}
