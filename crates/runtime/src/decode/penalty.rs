//! OpenAI's `presence_penalty` and `frequency_penalty`: each token's logit
//! is lowered by `presence` once it has been generated and by `frequency`
//! per time it has been (`logit[j] -= c[j] * frequency + (c[j] > 0) *
//! presence`, with `c[j]` the count of `j` among the tokens generated so
//! far; the prompt does not count), as OpenAI documents them.

use std::collections::HashMap;

/// `v` as a penalty: OpenAI's range, −2..2, or the error naming `name`
/// (the one check of the server's requests and Python's arguments).
pub fn check_penalty(name: &str, v: f64) -> Result<f32, String> {
    if (-2.0..=2.0).contains(&v) {
        Ok(v as f32)
    } else {
        Err(format!("{name} must be between -2 and 2, got {v}"))
    }
}

/// Generated-token counts and the two penalties of one request.
#[derive(Debug, Clone, Default)]
pub struct Penalties {
    /// Lowered once a token has appeared (−2..2).
    pub presence: f32,
    /// Lowered per appearance (−2..2).
    pub frequency: f32,
    counts: HashMap<u32, u32>,
}

impl Penalties {
    /// The penalties, no token counted yet.
    pub fn new(presence: f32, frequency: f32) -> Self {
        Penalties {
            presence,
            frequency,
            counts: HashMap::new(),
        }
    }

    /// Whether they change anything.
    pub fn active(&self) -> bool {
        self.presence != 0.0 || self.frequency != 0.0
    }

    /// Counts a generated token.
    pub fn record(&mut self, tok: u32) {
        if self.active() {
            *self.counts.entry(tok).or_default() += 1;
        }
    }

    /// Applies them to `logits`.
    pub fn apply(&self, logits: &mut [f32]) {
        for (&t, &c) in &self.counts {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= c as f32 * self.frequency + self.presence;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_formula() {
        let mut p = Penalties::new(0.5, 0.25);
        for t in [2, 2, 2, 0] {
            p.record(t);
        }
        let mut l = vec![1.0f32; 4];
        p.apply(&mut l);
        assert_eq!(l, vec![1.0 - 0.25 - 0.5, 1.0, 1.0 - 3.0 * 0.25 - 0.5, 1.0]);
        let mut off = Penalties::new(0.0, 0.0);
        off.record(1);
        assert!(!off.active() && off.counts.is_empty());
    }
}
