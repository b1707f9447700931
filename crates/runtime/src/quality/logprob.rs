//! One row of logits against the token that followed: its negative
//! log-likelihood, its log-probs quantized to 16 bits (a row of the base
//! file) and its KL-divergence from a base row. The arithmetic is
//! llama-perplexity's, step for step in the same precisions (f32 maxima and
//! `expf`, an f64 sum of exponentials), so the two tools' figures differ
//! only by their logits.

use super::stats::KlAccum;

/// Log-probs more than this below the row's maximum are stored as the
/// row's minimum (and count as probability 0 in KL-divergence).
pub const RANGE: f32 = 16.0;

/// u16 values of one stored row for `n_vocab` tokens: the scale and the
/// minimum log-prob (two f32, four u16), the log-probs, padded to an even
/// count.
pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// ggml's `nearest_int`: round half to even through the f32 mantissa
/// (exact for |x| < 2^22).
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The largest logit, its first index, and the log of the sum of
/// `exp(l - max)` (an f64 sum of f32 exponentials).
fn max_and_lse(logits: &[f32]) -> (f32, usize, f64) {
    let mut max = logits[0];
    let mut imax = 0;
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > max {
            max = l;
            imax = i;
        }
    }
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    (max, imax, sum.ln())
}

/// −log p(`tok`) of one row (perplexity without a base file), llama-
/// perplexity's `log_softmax` in f64.
pub fn nll(logits: &[f32], tok: usize) -> f64 {
    let (max, _, lse) = max_and_lse(logits);
    -(f64::from(logits[tok] - max) - lse)
}

/// −log p(`tok`) of one row (f32, as llama-perplexity computes it when it
/// saves a base file), writing the row's quantized log-probs to `out`
/// (`row_len(logits.len())` values): scale = (max − min) / 65535 with min
/// clamped to max − 16, each logit above min stored as round((l − min) /
/// scale), the rest as 0; the padding 0.
pub fn nll_quantized(logits: &[f32], tok: usize, out: &mut [u16]) -> f64 {
    let n = logits.len();
    debug_assert_eq!(out.len(), row_len(n));
    let (max, _, lse) = max_and_lse(logits);
    let min = logits.iter().copied().fold(logits[0], f32::min);
    let min = min.max(max - RANGE);
    let lse = lse as f32;
    let min_log_prob = min - max - lse;
    let scale = (max - min) / 65535.0;
    let (head, rest) = out.split_at_mut(4);
    head[..2].copy_from_slice(&half_words(scale));
    head[2..].copy_from_slice(&half_words(min_log_prob));
    let (vals, pad) = rest.split_at_mut(n);
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (q, &l) in vals.iter_mut().zip(logits) {
            // As ggml: an i32 narrowed to u16 (modular; the values fit).
            *q = if l > min {
                nearest_int(inv * (l - min)) as u16
            } else {
                0
            };
        }
    } else {
        vals.fill(0);
    }
    pad.fill(0);
    f64::from(max + lse - logits[tok])
}

/// An f32 as the two u16 words it occupies in a row (little-endian file).
fn half_words(x: f32) -> [u16; 2] {
    let b = x.to_le_bytes();
    [
        u16::from_le_bytes([b[0], b[1]]),
        u16::from_le_bytes([b[2], b[3]]),
    ]
}

/// The f32 stored in two u16 words.
fn from_words(w: &[u16]) -> f32 {
    let (a, b) = (w[0].to_le_bytes(), w[1].to_le_bytes());
    f32::from_le_bytes([a[0], a[1], b[0], b[1]])
}

/// A stored row's scale and minimum log-prob.
pub fn row_scale_min(row: &[u16]) -> (f32, f32) {
    (from_words(&row[..2]), from_words(&row[2..4]))
}

/// The log-prob of token `i` in a stored row.
pub fn row_log_prob(row: &[u16], i: usize) -> f32 {
    let (scale, min) = row_scale_min(row);
    scale * f32::from(row[4 + i]) + min
}

/// KL(base ‖ model) of one row (`base`: a stored row of the same
/// vocabulary), accumulating the row's figures (its NLL and the base's,
/// top-1 agreement, Δp of `tok`) into `acc`. Returns the row's KL and Δp.
pub fn kl_row(logits: &[f32], base: &[u16], tok: usize, acc: &mut KlAccum) -> (f64, f32) {
    let (max, imax, lse) = max_and_lse(logits);
    let lse = lse as f32;
    let (scale, min_log_prob) = row_scale_min(base);
    let q = &base[4..4 + logits.len()];
    let nll = max + lse - logits[tok];
    let nll_base = -(scale * f32::from(q[tok]) + min_log_prob);
    let log_z = max + lse;
    let mut sum = 0.0f64;
    let mut imax_base = 0;
    let mut base_max = 0.0f32;
    for (i, (&qi, &l)) in q.iter().zip(logits).enumerate() {
        let lp = scale * f32::from(qi) + min_log_prob;
        if i == 0 || lp > base_max {
            base_max = lp;
            imax_base = i;
        }
        if lp > -RANGE {
            sum += f64::from(lp.exp() * (lp - l + log_z));
        }
    }
    let p_diff = (-nll).exp() - (-nll_base).exp();
    acc.add(
        f64::from(nll),
        f64::from(nll_base),
        sum,
        p_diff,
        imax == imax_base,
    );
    (sum, p_diff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.4999), 2);
        assert_eq!(nearest_int(65534.6), 65535);
        assert_eq!(nearest_int(-3.5), -4);
    }

    #[test]
    fn a_quantized_row_gives_back_its_log_probs_within_half_a_step() {
        let logits: Vec<f32> = (0..1001)
            .map(|i| ((i * 37) % 101) as f32 * 0.3 - 12.0)
            .collect();
        let mut row = vec![0u16; row_len(logits.len())];
        assert_eq!(row.len(), 1006);
        let n = nll_quantized(&logits, 7, &mut row);
        assert!((n - nll(&logits, 7)).abs() < 1e-4, "{n}");
        let (scale, _) = row_scale_min(&row);
        let (max, _, lse) = max_and_lse(&logits);
        for (i, &l) in logits.iter().enumerate() {
            let lp = l - max - lse as f32;
            if l - max > -RANGE {
                let got = row_log_prob(&row, i);
                assert!((got - lp).abs() <= scale * 0.5 + 1e-5, "{i}: {got} vs {lp}");
            }
        }
        assert_eq!(row[1005], 0, "padding");
    }

    #[test]
    fn kl_of_a_row_against_its_own_quantized_form_is_below_half_a_step() {
        let logits: Vec<f32> = (0..500).map(|i| ((i * 13) % 29) as f32 * 0.7).collect();
        let mut row = vec![0u16; row_len(logits.len())];
        nll_quantized(&logits, 3, &mut row);
        let mut acc = KlAccum::default();
        let (kl, dp) = kl_row(&logits, &row, 3, &mut acc);
        let (scale, _) = row_scale_min(&row);
        assert!(kl.abs() <= f64::from(scale) * 0.6, "{kl}");
        assert!(dp.abs() < 1e-4, "{dp}");
        assert_eq!(acc.count, 1);
        assert_eq!(acc.n_same_top, 1);
    }

    #[test]
    fn a_flat_row_is_stored_with_a_zero_scale() {
        let logits = vec![1.5f32; 9];
        let mut row = vec![7u16; row_len(9)];
        let n = nll_quantized(&logits, 0, &mut row);
        assert!((n - 9f64.ln()).abs() < 1e-6);
        assert_eq!(row_scale_min(&row).0, 0.0);
        assert!(row[4..].iter().all(|&v| v == 0));
    }
}
