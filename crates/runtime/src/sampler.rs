//! Token sampling: greedy, temperature, top-k, top-p, min-p, repetition
//! penalty, seeded.
//!
//! The chain and its order follow llama.cpp's default sampler chain
//! (`common/sampling.cpp`: penalties → top-k → top-p → min-p → temperature →
//! dist), and the penalty is CTRL's (divide positive logits, multiply
//! negative ones), as llama.cpp's `llama_sampler_penalties` and HF's
//! `RepetitionPenaltyLogitsProcessor` apply it. Temperature ≤ 0 (or top-k = 1)
//! means greedy: the first maximal logit, like `argmax`.
//!
//! The candidate buffer is allocated once per sampler and reused.

/// Sampling parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature; ≤ 0 means greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1.0 = all).
    pub top_p: f32,
    /// Drop tokens below `min_p × p(best)` (0 = off).
    pub min_p: f32,
    /// Repetition penalty (1.0 = off).
    pub repetition_penalty: f32,
    /// How many of the last tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 42,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 1,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 0,
            seed: 0,
        }
    }
    /// Whether this configuration always picks the argmax.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, seedable, good enough for sampling.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A stateful sampler (owns its RNG and candidate buffer).
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Rng,
    cand: Vec<(u32, f32)>,
    seen: Vec<u32>,
}

/// Index of the first maximal value (ties → lowest id, like `torch.argmax`).
pub fn argmax(logits: &[f32]) -> u32 {
    // The maximum over 16 independent lanes (max is exact and order-free;
    // NaN never wins, as in a `v > best` scan), then its first index: the
    // answer of the first-strictly-greater scan (`argmax_ref`) without its
    // 49152-step dependent chain (~2 % of an 8-stream server step).
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = logits.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            if v > *m {
                *m = v;
            }
        }
    }
    let mut best = f32::NEG_INFINITY;
    for &v in lanes.iter().chain(rest) {
        if v > best {
            best = v;
        }
    }
    if best == f32::NEG_INFINITY {
        return 0;
    }
    logits.iter().position(|&v| v == best).unwrap_or(0) as u32
}

/// The scan [`argmax`] must equal: the first index whose value is strictly
/// greater than every earlier one (0 when nothing beats −∞).
#[doc(hidden)]
pub fn argmax_ref(logits: &[f32]) -> u32 {
    let mut best = 0;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    /// A sampler seeded with `cfg.seed`.
    pub fn new(cfg: SamplerConfig) -> Self {
        let rng = Rng(cfg.seed);
        Sampler {
            cfg,
            rng,
            cand: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Picks the next token from `logits`, given the tokens so far (`history`,
    /// prompt included) for the repetition penalty.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let cfg = &self.cfg;
        let penalize = cfg.repetition_penalty != 1.0 && cfg.repeat_last_n > 0;
        if cfg.is_greedy() && !penalize {
            return argmax(logits);
        }
        self.cand.clear();
        self.cand
            .extend(logits.iter().enumerate().map(|(i, &v)| (i as u32, v)));
        if penalize {
            let from = history.len().saturating_sub(cfg.repeat_last_n);
            self.seen.clear();
            self.seen.extend_from_slice(&history[from..]);
            self.seen.sort_unstable();
            self.seen.dedup();
            for &t in &self.seen {
                if let Some(c) = self.cand.get_mut(t as usize) {
                    c.1 = if c.1 > 0.0 {
                        c.1 / cfg.repetition_penalty
                    } else {
                        c.1 * cfg.repetition_penalty
                    };
                }
            }
        }
        if cfg.is_greedy() {
            let best =
                self.cand.iter().fold(
                    (0u32, f32::NEG_INFINITY),
                    |b, &c| if c.1 > b.1 { c } else { b },
                );
            return best.0;
        }
        // Sort descending by logit (ties by id for determinism).
        let k = if cfg.top_k == 0 {
            self.cand.len()
        } else {
            cfg.top_k.min(self.cand.len())
        };
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if k < self.cand.len() {
            self.cand.select_nth_unstable_by(k - 1, by_logit);
            self.cand.truncate(k);
        }
        self.cand.sort_unstable_by(by_logit);
        // Probabilities at temperature 1 for top-p / min-p (llama.cpp applies
        // them before temperature in its default chain).
        let softmax = |c: &[(u32, f32)], temp: f32| -> Vec<f32> {
            let max = c[0].1;
            let mut p: Vec<f32> = c.iter().map(|&(_, v)| ((v - max) / temp).exp()).collect();
            let s: f32 = p.iter().sum();
            p.iter_mut().for_each(|v| *v /= s);
            p
        };
        let p = softmax(&self.cand, 1.0);
        if cfg.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = p.len();
            for (i, &pi) in p.iter().enumerate() {
                acc += pi;
                if acc >= cfg.top_p {
                    keep = i + 1;
                    break;
                }
            }
            self.cand.truncate(keep.max(1));
        }
        if cfg.min_p > 0.0 {
            let thr = cfg.min_p * p[0];
            let keep = p
                .iter()
                .take(self.cand.len())
                .take_while(|&&pi| pi >= thr)
                .count();
            self.cand.truncate(keep.max(1));
        }
        let p = softmax(&self.cand, cfg.temperature);
        let r = self.rng.next_f32();
        let mut acc = 0.0;
        for (i, &pi) in p.iter().enumerate() {
            acc += pi;
            if r < acc {
                return self.cand[i].0;
            }
        }
        self.cand[self.cand.len() - 1].0
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn argmax_equals_the_scan_with_ties_nan_and_infinities() {
        let mut seed = 11u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 3.5];
        for n in [0usize, 1, 2, 15, 16, 17, 31, 33, 100, 49152] {
            for round in 0..20 {
                let mut v: Vec<f32> = (0..n).map(|_| (next() % 64) as f32 / 8.0 - 4.0).collect();
                for _ in 0..(round % 5) {
                    if n > 0 {
                        let i = next() as usize % n;
                        v[i] = specials[next() as usize % specials.len()];
                    }
                }
                if round == 7 {
                    v.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                }
                if round == 8 && n > 1 {
                    v.iter_mut().for_each(|x| *x = f32::NAN);
                    v[n - 1] = f32::NEG_INFINITY;
                }
                assert_eq!(argmax(&v), argmax_ref(&v), "n={n} round={round} {v:?}");
            }
        }
    }

    use super::*;

    #[test]
    fn greedy_is_first_argmax() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&[0.0, 3.0, 3.0, 1.0], &[]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_even_with_temperature() {
        let cfg = SamplerConfig {
            temperature: 5.0,
            top_k: 1,
            ..SamplerConfig::default()
        };
        let mut s = Sampler::new(cfg);
        for _ in 0..20 {
            assert_eq!(s.sample(&[0.0, 1.0, 0.5], &[]), 1);
        }
    }

    #[test]
    fn seed_is_reproducible_and_top_k_restricts() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32 * 0.3).collect();
        let cfg = SamplerConfig {
            temperature: 1.5,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..SamplerConfig::default()
        };
        let a: Vec<u32> = {
            let mut s = Sampler::new(cfg.clone());
            (0..50).map(|_| s.sample(&logits, &[])).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(cfg);
            (0..50).map(|_| s.sample(&logits, &[])).collect()
        };
        assert_eq!(a, b);
        // The 5 best logits are the value 1.8 (i % 7 == 6): ids 6, 13, 20, 27, 34.
        assert!(a.iter().all(|&t| t % 7 == 6 && t <= 34), "{a:?}");
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() {
        let logits = [10.0, 0.0, 0.0, 0.0];
        for cfg in [
            SamplerConfig {
                min_p: 0.1,
                top_p: 1.0,
                top_k: 0,
                temperature: 1.0,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                min_p: 0.0,
                top_p: 0.5,
                top_k: 0,
                temperature: 1.0,
                ..SamplerConfig::default()
            },
        ] {
            let mut s = Sampler::new(cfg);
            assert!((0..100).all(|_| s.sample(&logits, &[]) == 0));
        }
    }

    #[test]
    fn repetition_penalty_moves_greedy_choice() {
        let cfg = SamplerConfig {
            repetition_penalty: 2.0,
            repeat_last_n: 8,
            ..SamplerConfig::greedy()
        };
        let mut s = Sampler::new(cfg);
        assert_eq!(s.sample(&[1.0, 3.0, 2.0], &[1]), 2);
        assert_eq!(s.sample(&[1.0, 3.0, 2.0], &[0]), 1);
    }
}
