//! Multi-head latent attention (the tiny DeepSeek-V2 fixture): the cache
//! holds one latent and one rotated key per position and layer, smaller
//! than per-head K/V by the factor the model's sizes give; the values read
//! from the key cache give the same logits from f32 and f16 caches within
//! f16 rounding; a batched step equals each sequence alone; DeepSeek-V2-Lite's
//! variant (no query compression, plain top-k) matches transformers.

use super::fixtures::{check_exact, ids, json, rel_l2, testdata};
use gpack_runtime::{GgufWeights, LoadOptions, Logits, Model};

fn fixture() -> std::path::PathBuf {
    testdata().join("tiny/deepseek2")
}

/// `w` with its KV cache f16 or f32.
fn load(w: &GgufWeights, kv_f16: bool) -> Model<'_> {
    let opts = LoadOptions {
        kv: if kv_f16 {
            gpack_runtime::KvTypes::F16
        } else {
            gpack_runtime::KvTypes::F32
        },
        ..LoadOptions::default()
    };
    Model::load_with(w, &opts).unwrap()
}

/// A `config.json` size.
fn size(c: &serde_json::Value, key: &str) -> usize {
    c[key]
        .as_u64()
        .unwrap_or_else(|| panic!("config.json {key}")) as usize
}

#[test]
fn mla_cache_holds_the_latent_and_rope_key_only() {
    let c = json(&fixture().join("hf/config.json"));
    let (layers, heads) = (
        size(&c, "num_hidden_layers"),
        size(&c, "num_attention_heads"),
    );
    let (nope, rope, v) = (
        size(&c, "qk_nope_head_dim"),
        size(&c, "qk_rope_head_dim"),
        size(&c, "v_head_dim"),
    );
    let lat = size(&c, "kv_lora_rank");
    let w = GgufWeights::open(&fixture().join("deepseek2-f16.gguf")).unwrap();
    for (kv_f16, bytes) in [(false, 4), (true, 2)] {
        let m = load(&w, kv_f16);
        // A multiple of the key blocks' 64 positions, so the count is exact.
        let n_ctx = 256;
        let s = m.new_state(n_ctx);
        // transformers' DynamicCache keeps per-head keys (nope + rope) and
        // values (v) per position and layer; the MLA cache one latent and
        // one rotated key.
        let per_head = layers * n_ctx * heads * (nope + rope + v) * bytes;
        let latent = layers * n_ctx * (lat + rope) * bytes;
        assert_eq!(s.kv_bytes(), latent, "kv_f16 {kv_f16}");
        let factor = per_head as f64 / s.kv_bytes() as f64;
        let expected = (heads * (nope + rope + v)) as f64 / (lat + rope) as f64;
        eprintln!(
            "deepseek2 kv_f16={kv_f16}: {} bytes for {n_ctx} positions, per-head K/V {per_head}: {factor:.3}x smaller",
            s.kv_bytes()
        );
        assert!((factor - expected).abs() < 1e-12);
    }
}

#[test]
fn mla_f16_cache_stays_within_f16_rounding_of_f32() {
    let r = json(&fixture().join("reference.json"));
    let prompt = ids(&r["prompt_ids"]);
    let w = GgufWeights::open(&fixture().join("deepseek2-f16.gguf")).unwrap();
    let logits = |kv_f16| {
        let m = load(&w, kv_f16);
        let mut s = m.new_state(64);
        m.forward(&mut s, &prompt, Logits::All).unwrap().to_vec()
    };
    let (a, b) = (logits(false), logits(true));
    let d = rel_l2(&b, &a);
    eprintln!("deepseek2: f16 cache vs f32 cache, all positions: rel L2 {d:.2e}");
    assert!(d > 0.0, "the f16 cache was not used");
    assert!(d < 1e-3, "rel L2 {d}");
}

#[test]
fn mla_batched_step_equals_each_sequence_alone() {
    let r = json(&fixture().join("reference.json"));
    let prompt = ids(&r["prompt_ids"]);
    let w = GgufWeights::open(&fixture().join("deepseek2-q8_0.gguf")).unwrap();
    let m = Model::load(&w).unwrap();
    let prompts: Vec<Vec<u32>> = vec![
        prompt.clone(),
        prompt[3..11].to_vec(),
        prompt.iter().rev().copied().collect(),
    ];
    let alone: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| {
            let mut s = m.new_state(64);
            m.forward(&mut s, p, Logits::Last).unwrap().to_vec()
        })
        .collect();
    let mut seqs: Vec<_> = prompts.iter().map(|_| m.new_sequence(64)).collect();
    let mut refs: Vec<&mut _> = seqs.iter_mut().collect();
    let toks: Vec<&[u32]> = prompts.iter().map(|p| p.as_slice()).collect();
    let mut scratch = Default::default();
    let got = m
        .forward_batch(&mut scratch, &mut refs, &toks, &[true, true, true])
        .unwrap()
        .to_vec();
    let n = m.config.n_vocab;
    for (i, want) in alone.iter().enumerate() {
        let same = got[i * n..(i + 1) * n]
            .iter()
            .zip(want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "sequence {i}");
    }
}

/// DeepSeek-V2-Lite's variant of the fixture (queries straight from
/// `attn_q`, plain top-2 of all experts): from its f16 GGUF, its HF
/// directory and a .gpack converted from that directory.
#[test]
fn deepseek2_lite_variant_matches_transformers() {
    let arch = "deepseek2-lite";
    let d = testdata().join("tiny").join(arch);
    check_exact(arch, "f16", &d.join(format!("{arch}-f16.gguf")));
    check_exact(arch, "hf", &d.join("hf"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lite.gpack");
    gpack_convert::convert(
        &gpack_convert::ConvertOptions {
            source: d.join("hf"),
            output: out.clone(),
            ..Default::default()
        },
        &(),
    )
    .unwrap();
    check_exact(arch, "hf .gpack", &out);
    // The per-head MLA matrices are stored natively (not raw rows to
    // transcode at load).
    let w = gpack_runtime::GpackWeights::open(&out).unwrap();
    for name in ["blk.1.attn_k_b.weight", "blk.1.attn_v_b.weight"] {
        let t = gpack_runtime::WeightSource::tensor(&w, name).unwrap();
        assert!(
            matches!(t, gpack_runtime::weights::TensorRef::Native { .. }),
            "{name}"
        );
    }
}

/// The expert counters with leading dense layers: tokens counted once per
/// step (at the first MoE layer), and per token at most `k` experts of each
/// MoE layer read.
#[test]
fn deepseek2_expert_counters_skip_the_dense_layers() {
    let w = GgufWeights::open(&fixture().join("deepseek2-q8_0.gguf")).unwrap();
    let m = Model::load(&w).unwrap();
    let c = m.config.clone();
    let moe_layers = c.n_layer - c.n_dense_lead;
    let per_expert = m.expert_bytes() / (moe_layers * c.n_expert) as u64;
    let mut s = m.new_state(32);
    m.forward(&mut s, &[5, 17, 300, 2047, 9], Logits::Last)
        .unwrap();
    let st = m.expert_stats().unwrap();
    assert_eq!(st.tokens, 5);
    assert!(st.bytes_read > 0);
    assert!(st.bytes_read <= 5 * (moe_layers * c.n_expert_used) as u64 * per_expert);
}
