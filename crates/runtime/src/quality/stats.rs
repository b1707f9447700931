//! The statistics llama-perplexity prints, from the same sums: perplexity
//! with its error, and for KL-divergence runs the PPL ratio and difference
//! with their correlated errors, KL mean and percentiles, Δp (the change
//! in the probability of the token that followed) and top-1 agreement.

use serde::Serialize;

/// Sums of a perplexity run.
#[derive(Debug, Default, Clone)]
pub struct PplAccum {
    /// Σ −log p.
    pub nll: f64,
    /// Σ (−log p)².
    pub nll2: f64,
    /// Tokens scored.
    pub count: usize,
}

impl PplAccum {
    /// Adds one token's −log p.
    pub fn add(&mut self, nll: f64) {
        self.nll += nll;
        self.nll2 += nll * nll;
        self.count += 1;
    }

    /// exp(mean −log p) so far (llama-perplexity's running estimate).
    pub fn ppl(&self) -> f64 {
        (self.nll / self.count as f64).exp()
    }

    /// The final estimate and its error: PPL × the standard error of the
    /// mean −log p (`None` for the error when fewer than two tokens or a
    /// non-positive variance, where llama-perplexity prints none).
    pub fn estimate(&self) -> (f64, Option<f64>) {
        let n = self.count as f64;
        let mean = self.nll / n;
        let var = self.nll2 / n - mean * mean;
        let ppl = mean.exp();
        let err = (var > 0.0 && self.count > 1).then(|| (var / (n - 1.0)).sqrt() * ppl);
        (ppl, err)
    }
}

/// Sums and per-token values of a KL-divergence run.
#[derive(Debug, Default, Clone)]
pub struct KlAccum {
    /// Σ and Σ² of the model's −log p.
    pub sum_nll: f64,
    /// Σ (−log p)².
    pub sum_nll2: f64,
    /// Σ of the base's −log p.
    pub sum_nll_base: f64,
    /// Σ (−log p_base)².
    pub sum_nll_base2: f64,
    /// Σ (−log p)(−log p_base).
    pub sum_nll_nll_base: f64,
    /// Σ KL.
    pub sum_kld: f64,
    /// Σ KL².
    pub sum_kld2: f64,
    /// Σ Δp.
    pub sum_p_diff: f64,
    /// Σ Δp².
    pub sum_p_diff2: f64,
    /// Σ Δp⁴.
    pub sum_p_diff4: f64,
    /// max |Δp|.
    pub max_p_diff: f32,
    /// Rows whose most likely token is the base's.
    pub n_same_top: usize,
    /// Rows.
    pub count: usize,
    /// Each row's KL.
    pub kld_values: Vec<f32>,
    /// Each row's Δp.
    pub p_diff_values: Vec<f32>,
}

impl KlAccum {
    /// Adds one row's figures.
    pub fn add(&mut self, nll: f64, nll_base: f64, kld: f64, p_diff: f32, same_top: bool) {
        self.sum_nll += nll;
        self.sum_nll2 += nll * nll;
        self.sum_nll_base += nll_base;
        self.sum_nll_base2 += nll_base * nll_base;
        self.sum_nll_nll_base += nll * nll_base;
        self.sum_kld += kld;
        self.sum_kld2 += kld * kld;
        let d = f64::from(p_diff);
        self.sum_p_diff += d;
        self.sum_p_diff2 += d * d;
        self.sum_p_diff4 += d * d * d * d;
        self.max_p_diff = self.max_p_diff.max(p_diff.abs());
        self.n_same_top += usize::from(same_top);
        self.count += 1;
        self.kld_values.push(kld as f32);
        self.p_diff_values.push(p_diff);
    }

    /// The figures so far.
    pub fn summary(&self) -> KlSummary {
        let n = self.count;
        let lp = mean_and_uncertainty(self.sum_nll, self.sum_nll2, n);
        let lb = mean_and_uncertainty(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = covariance(self.sum_nll, self.sum_nll_base, self.sum_nll_nll_base, n);
        let ppl = lp.0.exp();
        let ppl_err = ppl * lp.1;
        let ppl_base = lb.0.exp();
        let ppl_base_err = ppl_base * lb.1;
        let ln_ratio = lp.0 - lb.0;
        let ln_ratio_err = (lp.1 * lp.1 + lb.1 * lb.1 - 2.0 * cov).max(0.0).sqrt();
        let ratio = ln_ratio.exp();
        let ppl_cov = ppl * ppl_base * cov;
        let kl = mean_and_uncertainty(self.sum_kld, self.sum_kld2, n);
        let mse = mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, n);
        let rms = mse.0.sqrt();
        let pd = mean_and_uncertainty(self.sum_p_diff, self.sum_p_diff2, n);
        let top = if n > 0 {
            self.n_same_top as f64 / n as f64
        } else {
            0.0
        };
        let top_err = if n > 1 {
            (top * (1.0 - top) / (n as f64 - 1.0)).sqrt()
        } else {
            0.0
        };
        KlSummary {
            count: n,
            ppl,
            ppl_err,
            ppl_base,
            ppl_base_err,
            ln_ppl_cor: cov / (lp.1 * lb.1),
            ln_ppl_ratio: ln_ratio,
            ln_ppl_ratio_err: ln_ratio_err,
            ppl_ratio: ratio,
            ppl_ratio_err: ratio * ln_ratio_err,
            ppl_diff: ppl - ppl_base,
            ppl_diff_err: (ppl_err * ppl_err + ppl_base_err * ppl_base_err - 2.0 * ppl_cov)
                .max(0.0)
                .sqrt(),
            kld: kl.0,
            kld_err: kl.1,
            kld_pct: Percentiles::of(&self.kld_values),
            p_diff: pd.0,
            p_diff_err: pd.1,
            p_diff_pct: Percentiles::of(&self.p_diff_values),
            p_diff_rms: rms,
            p_diff_rms_err: if rms > 0.0 { 0.5 / rms * mse.1 } else { 0.0 },
            p_diff_max_abs: f64::from(self.max_p_diff),
            same_top: top,
            same_top_err: top_err,
        }
    }
}

/// The mean of `count` values from their Σ and Σ², and its standard
/// error (0 for 10 values or fewer, as llama-perplexity).
fn mean_and_uncertainty(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let n = count as f64;
    let f = sum / n;
    let df = sum2 / n - f * f;
    let df = if df > 0.0 && count > 10 {
        (df / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (f, df)
}

/// The covariance of two means (0 below 10 values, as llama-perplexity).
fn covariance(a: f64, b: f64, ab: f64, count: usize) -> f64 {
    if count < 10 {
        return 0.0;
    }
    let n = count as f64;
    (ab / n - (a / n) * (b / n)) / (n - 1.0)
}

/// The figures of a KL-divergence run (field names are the JSON schema's).
#[derive(Debug, Clone, Serialize)]
pub struct KlSummary {
    /// Rows compared.
    pub count: usize,
    /// Mean PPL(Q) (the model's) and its error.
    pub ppl: f64,
    /// Its error.
    pub ppl_err: f64,
    /// Mean PPL(base) (from the stored log-probs) and its error.
    pub ppl_base: f64,
    /// Its error.
    pub ppl_base_err: f64,
    /// Correlation of ln PPL(Q) and ln PPL(base).
    pub ln_ppl_cor: f64,
    /// ln(PPL(Q)/PPL(base)).
    pub ln_ppl_ratio: f64,
    /// Its error.
    pub ln_ppl_ratio_err: f64,
    /// PPL(Q)/PPL(base).
    pub ppl_ratio: f64,
    /// Its error.
    pub ppl_ratio_err: f64,
    /// PPL(Q) − PPL(base).
    pub ppl_diff: f64,
    /// Its error.
    pub ppl_diff_err: f64,
    /// Mean KL(base ‖ Q) per token.
    pub kld: f64,
    /// Its error.
    pub kld_err: f64,
    /// KL percentiles.
    pub kld_pct: Percentiles,
    /// Mean Δp = p_Q(token) − p_base(token).
    pub p_diff: f64,
    /// Its error.
    pub p_diff_err: f64,
    /// Δp percentiles.
    pub p_diff_pct: Percentiles,
    /// RMS of Δp.
    pub p_diff_rms: f64,
    /// Its error.
    pub p_diff_rms_err: f64,
    /// max |Δp|.
    pub p_diff_max_abs: f64,
    /// Share of rows whose most likely token is the base's ("Same top p").
    pub same_top: f64,
    /// Its error.
    pub same_top_err: f64,
}

/// Percentiles of per-token values, llama-perplexity's (linear
/// interpolation between sorted values; the median the middle value or
/// the mean of the two middle ones).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    /// Largest.
    pub max: f64,
    /// 99.9 %.
    pub p99_9: f64,
    /// 99 %.
    pub p99: f64,
    /// 95 %.
    pub p95: f64,
    /// 90 %.
    pub p90: f64,
    /// 75 %.
    pub p75: f64,
    /// Median.
    pub median: f64,
    /// 25 %.
    pub p25: f64,
    /// 10 %.
    pub p10: f64,
    /// 5 %.
    pub p5: f64,
    /// 1 %.
    pub p1: f64,
    /// 0.1 %.
    pub p0_1: f64,
    /// Smallest.
    pub min: f64,
}

impl Percentiles {
    /// Of `values` (all zero when empty).
    pub fn of(values: &[f32]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f32::total_cmp);
        let n = v.len();
        let at = |fraction: f32| -> f64 {
            let p = fraction * (n - 1) as f32;
            let ip = p as usize;
            let p = p - ip as f32;
            f64::from((1.0 - p) * v[ip] + p * v[(ip + 1).min(n - 1)])
        };
        let median = if n.is_multiple_of(2) {
            f64::from(0.5 * (v[n / 2] + v[n / 2 - 1]))
        } else {
            f64::from(v[n / 2])
        };
        Percentiles {
            max: f64::from(v[n - 1]),
            p99_9: at(0.999),
            p99: at(0.99),
            p95: at(0.95),
            p90: at(0.90),
            p75: at(0.75),
            median,
            p25: at(0.25),
            p10: at(0.10),
            p5: at(0.05),
            p1: at(0.01),
            p0_1: at(0.001),
            min: f64::from(v[0]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_as_llama_perplexity() {
        let v: Vec<f32> = (0..11).map(|i| i as f32).collect();
        let p = Percentiles::of(&v);
        assert_eq!((p.min, p.median, p.max), (0.0, 5.0, 10.0));
        assert!((p.p90 - 9.0).abs() < 1e-6);
        assert!((p.p95 - 9.5).abs() < 1e-6);
        let even = Percentiles::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(even.median, 2.5);
    }

    #[test]
    fn ppl_estimate_is_exp_of_the_mean_nll() {
        let mut a = PplAccum::default();
        for x in [1.0, 2.0, 3.0] {
            a.add(x);
        }
        let (ppl, err) = a.estimate();
        assert!((ppl - 2f64.exp()).abs() < 1e-12);
        // var = 14/3 - 4 = 2/3; err = sqrt(2/3 / 2) * e^2
        assert!((err.unwrap() - (1.0f64 / 3.0).sqrt() * 2f64.exp()).abs() < 1e-12);
    }
}
