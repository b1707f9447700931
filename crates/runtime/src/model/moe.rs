//! The routed-experts FFN (qwen3moe, mixtral).

use super::step::{add_bias, glu};
use super::{Model, MoeFfn, Scratch};
use crate::config::Gating;
use crate::error::Result;
use crate::ops;

impl Model<'_> {
    /// The routed-experts FFN of layer `l` for the `n` rows of `s.xb`, into
    /// `s.out`.
    ///
    /// Routing as transformers' Qwen3MoeSparseMoeBlock and
    /// MixtralSparseMoeBlock (and llama.cpp's `build_moe_ffn` with softmax
    /// gating and normalized weights) define it: softmax over all experts'
    /// router logits, the `k` largest, weights divided by their sum. Then
    /// each routed expert runs ONCE on all the rows routed to it (one matmul
    /// per matrix), and each row adds `weight · expert(row)` in increasing
    /// expert order, as transformers' loop over experts does.
    ///
    /// gpt-oss ([`Gating::TopKSoftmax`]) adds a router bias, takes the `k`
    /// largest logits and the softmax of those `k`, and adds each expert's
    /// gate, up and down biases (transformers' `GptOssTopKRouter` and
    /// `GptOssExperts`).
    pub(super) fn moe(&self, s: &mut Scratch, l: usize, f: &MoeFfn, n: usize) -> Result<()> {
        let router = &f.router;
        let gating = self.config.arch.family().gating;
        let c = &self.config;
        let store = self
            .experts
            .as_ref()
            .expect("MoE layers have an expert store");
        let (d, ne, k, ff) = (c.n_embd, c.n_expert, c.n_expert_used, c.n_ff_exp);
        if l == 0 {
            store.count_tokens(n);
        }
        s.routes.resize_with(ne, Vec::new);
        s.routes.iter_mut().for_each(Vec::clear);
        s.probs.resize(ne, 0.0);
        for t in 0..n {
            let x = &s.xb[t * d..(t + 1) * d];
            for (e, p) in s.probs.iter_mut().enumerate() {
                *p = ops::dot(&router[e * d..(e + 1) * d], x);
            }
            if let Some(b) = &f.router_bias {
                s.probs.iter_mut().zip(b).for_each(|(p, b)| *p += b);
            }
            if gating == Gating::SoftmaxTopK {
                ops::softmax(&mut s.probs);
            }
            // Top-k by probability (ties: the lower expert id first, as
            // torch.topk and ggml_argsort_top_k give for distinct values).
            let mut chosen = [(0usize, 0f32); crate::config::MAX_EXPERT_USED];
            let mut sum = 0f32;
            for slot in chosen.iter_mut().take(k) {
                let (best, &p) = s
                    .probs
                    .iter()
                    .enumerate()
                    .filter(|(e, _)| s.routes[*e].last().is_none_or(|r| r.0 != t))
                    .fold((usize::MAX, &f32::NEG_INFINITY), |a, b| {
                        if *b.1 > *a.1 {
                            b
                        } else {
                            a
                        }
                    });
                if best == usize::MAX {
                    break;
                }
                *slot = (best, p);
                sum += p;
                s.routes[best].push((t, p));
            }
            // Normalize this row's weights (they are the last entries):
            // divided by their sum, or (top-k logits) their softmax.
            let max = chosen[0].1;
            let mut esum = 0f32;
            if gating == Gating::TopKSoftmax {
                for c in chosen.iter_mut().take(k) {
                    c.1 = (c.1 - max).exp();
                    esum += c.1;
                }
            }
            for &(e, p) in chosen.iter().take(k) {
                if let Some(r) = s.routes[e].last_mut().filter(|r| r.0 == t) {
                    r.1 = match gating {
                        Gating::SoftmaxTopK => r.1 / sum,
                        Gating::TopKSoftmax => p / esum,
                    };
                }
            }
        }
        s.out[..n * d].iter_mut().for_each(|v| *v = 0.0);
        for e in 0..ne {
            let m = s.routes[e].len();
            if m == 0 {
                continue;
            }
            let expert = store.get(l, e)?;
            let [gate, up, down] = expert.mats();
            s.moe_x.resize(m * d, 0.0);
            for (i, &(t, _)) in s.routes[e].iter().enumerate() {
                s.moe_x[i * d..(i + 1) * d].copy_from_slice(&s.xb[t * d..(t + 1) * d]);
            }
            s.moe_g.resize(m * ff, 0.0);
            s.moe_u.resize(m * ff, 0.0);
            s.moe_h.resize(m * ff, 0.0);
            s.moe_y.resize(m * d, 0.0);
            gate.matmul(&s.moe_x[..m * d], m, &mut s.moe_g[..m * ff]);
            up.matmul(&s.moe_x[..m * d], m, &mut s.moe_u[..m * ff]);
            let bias =
                |i: usize, len: usize| f.bias[i].as_ref().map(|b| &b[e * len..(e + 1) * len]);
            if let Some(b) = bias(0, ff) {
                add_bias(&mut s.moe_g[..m * ff], b);
            }
            if let Some(b) = bias(1, ff) {
                add_bias(&mut s.moe_u[..m * ff], b);
            }
            for i in 0..m {
                let r = i * ff..(i + 1) * ff;
                glu(
                    c.activation,
                    &s.moe_g[r.clone()],
                    &s.moe_u[r.clone()],
                    &mut s.moe_h[r],
                );
            }
            down.matmul(&s.moe_h[..m * ff], m, &mut s.moe_y[..m * d]);
            if let Some(b) = bias(2, d) {
                add_bias(&mut s.moe_y[..m * d], b);
            }
            for (i, &(t, w)) in s.routes[e].iter().enumerate() {
                s.out[t * d..(t + 1) * d]
                    .iter_mut()
                    .zip(&s.moe_y[i * d..(i + 1) * d])
                    .for_each(|(o, &y)| *o += w * y);
            }
        }
        Ok(())
    }
}
