//! q8_0/q4_0 KV caches on whole models: on every tiny fixture family (GQA,
//! sliding windows, soft-capping, sinks, Gemma 3n's shared KV layers)
//! teacher-forced logits stay near the f16 cache's (the difference is the
//! quantization's: bounds below, measured), and match tightly a reference
//! that keeps the same quantized-and-dequantized K/V as f32 and runs the
//! f32 attention (the difference is f32 rounding order only); MLA refuses
//! a quantized cache with a message naming why.

use super::fixtures::testdata;
use gpack_runtime::{GgufWeights, KvType, KvTypes, LoadOptions, Logits, Model};

/// The tiny families with per-head caches (not MLA's deepseek2).
fn families() -> impl Iterator<Item = &'static str> {
    gpack_testkit::TINY_FAMILIES
        .into_iter()
        .filter(|f| *f != "deepseek2")
        .chain(["gemma3n"])
}

/// Teacher-forced logits of `tokens`: a 70-token prefill (several key
/// blocks' rows at once), then one token a step (decode).
fn logits(m: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    let nv = m.config.n_vocab;
    let mut s = m.new_state(256);
    let pre = m.forward(&mut s, &tokens[..70], Logits::All).unwrap();
    let mut out: Vec<Vec<f32>> = pre.chunks_exact(nv).map(<[f32]>::to_vec).collect();
    for &t in &tokens[70..] {
        out.push(m.forward(&mut s, &[t], Logits::Last).unwrap().to_vec());
    }
    out
}

/// The relative L2 distances of rows `a` from rows `b`, sorted: (median, max).
fn rel_l2(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f64, f64) {
    let mut d: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| {
            let (mut d, mut n) = (0f64, 0f64);
            for (x, y) in a.iter().zip(b) {
                d += (*x as f64 - *y as f64).powi(2);
                n += (*y as f64).powi(2);
            }
            (d / n.max(1e-30)).sqrt()
        })
        .collect();
    d.sort_by(f64::total_cmp);
    (d[d.len() / 2], d[d.len() - 1])
}

fn load<'a>(w: &'a GgufWeights, kv: KvTypes, deq: bool) -> gpack_runtime::Result<Model<'a>> {
    let opts = LoadOptions {
        kv,
        kv_dequantized: deq,
        ..LoadOptions::default()
    };
    Model::load_with(w, &opts)
}

#[test]
fn quantized_kv_stays_near_f16_and_matches_its_dequantized_reference() {
    let (mut worst, mut worst_ref) = ([0f64; 4], 0f64);
    for fam in families() {
        let d = testdata().join("tiny").join(fam);
        let w = GgufWeights::open(&d.join(format!("{fam}-f16.gguf"))).unwrap();
        let f16 = load(&w, KvTypes::F16, false).unwrap();
        let nv = f16.config.n_vocab as u32;
        let tokens: Vec<u32> = (0..140u32).map(|i| (i * 7919 + 13) % nv).collect();
        let base = logits(&f16, &tokens);
        let q8v16 = KvTypes {
            k: KvType::Q8_0,
            v: KvType::F16,
        };
        let f16q4 = KvTypes {
            k: KvType::F16,
            v: KvType::Q4_0,
        };
        let kinds = [
            KvTypes::both(KvType::Q8_0),
            KvTypes::both(KvType::Q4_0),
            q8v16,
            f16q4,
        ];
        for (i, kv) in kinds.into_iter().enumerate() {
            let q = logits(&load(&w, kv, false).unwrap(), &tokens);
            let r = logits(&load(&w, kv, true).unwrap(), &tokens);
            let (f16_med, f16_max) = rel_l2(&q, &base);
            let (ref_med, ref_max) = rel_l2(&q, &r);
            eprintln!(
                "{fam} kv {kv}: rel L2 vs f16 median {f16_med:.2e} max {f16_max:.2e}; \
                 vs dequantized f32 reference median {ref_med:.2e} max {ref_max:.2e}"
            );
            worst[i] = worst[i].max(f16_med);
            worst_ref = worst_ref.max(ref_med);
            // The kernels against the same values summed in f32: rounding
            // order only (the scales applied per block, not per value). Most
            // rows differ by ~1e-7 (every prefill row of most families); in
            // some families decode rows step up, where a last-bit difference
            // crosses a rounding or routing decision further down the model.
            // Measured (max over families and types): median 2.1e-4
            // (gemma3, q8_0 K), max 9.2e-4 on the AVX-512 path; max 3.4e-3
            // on the scalar one (gemma3n, K q8_0 / V f16), whose other f32
            // sums meet other steps.
            assert!(
                ref_med < 1e-3,
                "{fam} kv {kv}: median {ref_med:e} from the reference"
            );
            assert!(
                ref_max < 1e-2,
                "{fam} kv {kv}: max {ref_max:e} from the reference"
            );
            // The quantization's own error. Measured medians (max over
            // families): q8_0 2.2e-2, K q8_0 / V f16 1.9e-2 (gemma3n); q4_0
            // 2.9e-1 (gemma3n), K f16 / V q4_0 1.9e-1 (gpt-oss).
            let bound = match (kv.k, kv.v) {
                (_, KvType::Q4_0) | (KvType::Q4_0, _) => 5e-1,
                _ => 5e-2,
            };
            assert!(
                f16_med < bound,
                "{fam} kv {kv}: median {f16_med:e} from f16 KV"
            );
        }
    }
    eprintln!(
        "worst median rel L2 vs f16 (q8_0, q4_0, K q8_0/V f16, K f16/V q4_0): {worst:?}; \
         vs the dequantized reference {worst_ref:.2e}"
    );
}

#[test]
fn mla_refuses_a_quantized_kv_cache_naming_why() {
    let d = testdata().join("tiny").join("deepseek2");
    let w = GgufWeights::open(&d.join("deepseek2-f16.gguf")).unwrap();
    let e = load(&w, KvTypes::both(KvType::Q8_0), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("q8_0") && e.contains("MLA") && e.contains("--kv f16"),
        "{e}"
    );
    assert!(load(&w, KvTypes::F16, false).is_ok());
}

/// KV bytes per position on SmolLM2 (heads of 64): q8_0 is 34/64 of f16's
/// bytes, q4_0 18/64 (ggml's block sizes), f32 twice; types mix by K and V.
/// (Heads under 32 values, as the tiny fixtures' 16, pad their one block:
/// there q8_0 takes more bytes than f16.)
#[test]
fn kv_bytes_per_type_on_smollm2() {
    let w = GgufWeights::open(&gpack_testkit::smollm2()).unwrap();
    let bytes = |kv| load(&w, kv, false).unwrap().new_sequence(1024).kv_bytes();
    let f16 = bytes(KvTypes::F16);
    assert_eq!(bytes(KvTypes::F32), 2 * f16);
    assert_eq!(bytes(KvTypes::both(KvType::Q8_0)) * 64, f16 * 34);
    assert_eq!(bytes(KvTypes::both(KvType::Q4_0)) * 64, f16 * 18);
    let mixed = KvTypes {
        k: KvType::Q8_0,
        v: KvType::Q4_0,
    };
    assert_eq!(bytes(mixed) * 128, f16 * (34 + 18));
}
