//! The routed-experts FFN (qwen3moe, mixtral, gpt-oss, deepseek2) and its
//! router.

use super::step::{add_bias, dense_ffn, glu};
use super::{Model, MoeFfn, Scratch};
use crate::config::{Gating, Routing};
use crate::error::Result;
use crate::observe::BlockInputs;
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
    /// `GptOssExperts`). DeepSeek routes as [`route`] says and adds its
    /// shared experts' FFN.
    pub(super) fn moe(
        &self,
        s: &mut Scratch,
        l: usize,
        f: &MoeFfn<'_>,
        inputs: &BlockInputs,
        n: usize,
    ) -> Result<()> {
        let c = &self.config;
        let store = self
            .experts
            .as_ref()
            .expect("MoE layers have an expert store");
        let (d, ne, ff) = (c.n_embd, c.n_expert, c.n_ff_exp);
        // Counted once per step, at the first MoE layer (DeepSeek's first
        // layers are dense).
        if l == c.n_dense_lead {
            store.count_tokens(n);
        }
        // The router and the shared experts' gate and up read the rows as they are.
        s.observer.show(&inputs.ffn, None, &s.xb[..n * d], d);
        route_rows(
            c,
            f,
            &s.xb[..n * d],
            n,
            &mut s.routes,
            &mut s.probs,
            &mut s.select,
        );
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
            s.observer
                .show(&inputs.experts, Some((e, ne)), &s.moe_x[..m * d], d);
            gate.matmul(&self.pool, &s.moe_x[..m * d], m, &mut s.moe_g[..m * ff]);
            up.matmul(&self.pool, &s.moe_x[..m * d], m, &mut s.moe_u[..m * ff]);
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
            s.observer
                .show(&inputs.experts_down, Some((e, ne)), &s.moe_h[..m * ff], ff);
            down.matmul(&self.pool, &s.moe_h[..m * ff], m, &mut s.moe_y[..m * d]);
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
        // The shared experts, added after the routed ones (transformers'
        // DeepseekV2Moe: `experts(...) + shared_experts(residuals)`).
        if let Some((gate_up, down)) = &f.shared {
            s.moe_y.resize(n * d, 0.0);
            let bufs = (&mut s.gu, &mut s.hb, &mut s.tmp);
            let x = &s.xb[..n * d];
            dense_ffn(
                &self.pool,
                c.activation,
                gate_up,
                down,
                x,
                n,
                bufs,
                &mut s.moe_y[..n * d],
            );
            let sff = down.cols();
            s.observer
                .show(&inputs.ffn_down, None, &s.hb[..n * sff], sff);
            s.out[..n * d]
                .iter_mut()
                .zip(&s.moe_y[..n * d])
                .for_each(|(o, y)| *o += y);
        }
        Ok(())
    }
}

/// Routes the `n` rows of `x` (`[n][n_embd]`, the FFN's normed input) of a
/// layer whose router is `f`'s: `routes[e]` gets `(row, weight)` for each
/// row that picked expert `e`, rows in increasing order ([`route`] per
/// row). The one routing rule of the CPU's and the GPU's MoE FFN.
pub(super) fn route_rows(
    c: &crate::config::Config,
    f: &MoeFfn<'_>,
    x: &[f32],
    n: usize,
    routes: &mut Vec<Vec<(usize, f32)>>,
    probs: &mut Vec<f32>,
    select: &mut Vec<f32>,
) {
    let (d, ne, k) = (c.n_embd, c.n_expert, c.n_expert_used);
    let router = &f.router;
    routes.resize_with(ne, Vec::new);
    routes.iter_mut().for_each(Vec::clear);
    probs.resize(ne, 0.0);
    let mut chosen = [(0usize, 0f32); crate::config::MAX_EXPERT_USED];
    for t in 0..n {
        let x = &x[t * d..(t + 1) * d];
        for (e, p) in probs.iter_mut().enumerate() {
            *p = ops::dot(&router[e * d..(e + 1) * d], x);
        }
        if let Some(b) = &f.router_bias {
            probs.iter_mut().zip(b).for_each(|(p, b)| *p += b);
        }
        let got = route(
            &c.routing,
            probs,
            f.select_bias.as_deref(),
            select,
            &mut chosen[..k],
        );
        for &(e, w) in &chosen[..got] {
            routes[e].push((t, w));
        }
    }
}

/// Chooses one row's experts from its router `logits` (`[n_expert]`,
/// overwritten with the scores) as `r` says, into `chosen` (`k` slots of
/// `(expert, weight)`, in the order picked); returns how many were filled
/// (`k` unless a logit is NaN).
///
/// Scores: softmax over all experts ([`Gating::SoftmaxTopK`]), sigmoid of
/// each ([`Gating::Sigmoid`]) or the logits ([`Gating::TopKSoftmax`]). The
/// experts are picked by score plus `select_bias` (DeepSeek-V3's
/// `e_score_correction_bias`, used for the choice only), among the best
/// groups when `r.groups` limits them, the `k` largest with ties to the
/// lower id (as `torch.topk` and `ggml_argsort_top_k` order distinct
/// values). Weights: the softmax of the chosen logits (TopKSoftmax), else
/// the chosen scores, divided by their sum when `r.norm`, times `r.scale`.
pub(super) fn route(
    r: &Routing,
    logits: &mut [f32],
    select_bias: Option<&[f32]>,
    select: &mut Vec<f32>,
    chosen: &mut [(usize, f32)],
) -> usize {
    match r.gating {
        Gating::SoftmaxTopK => ops::softmax(logits),
        Gating::Sigmoid => logits
            .iter_mut()
            .for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
        Gating::TopKSoftmax => {}
    }
    let scores = &*logits;
    select.clear();
    match select_bias {
        Some(b) => select.extend(scores.iter().zip(b).map(|(s, b)| s + b)),
        None => select.extend_from_slice(scores),
    }
    if let Some((g, used)) = r.groups {
        let per = select.len() / g;
        let group_score = |grp: &[f32]| match r.gating {
            Gating::Sigmoid => {
                let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
                for &v in grp {
                    if v > a {
                        (a, b) = (v, a);
                    } else if v > b {
                        b = v;
                    }
                }
                a + b
            }
            _ => grp.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        };
        // At most MAX_EXPERT_GROUPS (checked with the config): no allocation
        // per row.
        let mut gs = [f32::NEG_INFINITY; crate::config::MAX_EXPERT_GROUPS];
        for (s, grp) in gs.iter_mut().zip(select.chunks_exact(per)) {
            *s = group_score(grp);
        }
        let mut keep = [false; crate::config::MAX_EXPERT_GROUPS];
        for _ in 0..used {
            let best = (0..g)
                .filter(|&i| !keep[i])
                .fold(None, |a: Option<usize>, i| match a {
                    Some(j) if gs[j] >= gs[i] => Some(j),
                    _ => Some(i),
                });
            if let Some(i) = best {
                keep[i] = true;
            }
        }
        for (grp, &kept) in select.chunks_exact_mut(per).zip(&keep) {
            if !kept {
                grp.iter_mut().for_each(|v| *v = f32::NEG_INFINITY);
            }
        }
    }
    let mut got = 0;
    for i in 0..chosen.len() {
        let best = select
            .iter()
            .enumerate()
            .filter(|(e, _)| !chosen[..i].iter().any(|c| c.0 == *e))
            .fold(None, |a: Option<(usize, f32)>, (e, &v)| match a {
                Some((_, bv)) if bv >= v => a,
                _ if v.is_nan() || v == f32::NEG_INFINITY => a,
                _ => Some((e, v)),
            });
        let Some((e, _)) = best else { break };
        chosen[i] = (e, scores[e]);
        got += 1;
    }
    let chosen = &mut chosen[..got];
    match r.gating {
        Gating::TopKSoftmax => {
            let max = chosen.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for c in chosen.iter_mut() {
                c.1 = (c.1 - max).exp();
                sum += c.1;
            }
            chosen.iter_mut().for_each(|c| c.1 /= sum);
        }
        _ => {
            if r.norm {
                let sum: f32 = chosen.iter().map(|c| c.1).sum();
                chosen.iter_mut().for_each(|c| c.1 /= sum);
            }
        }
    }
    if r.scale != 1.0 {
        chosen.iter_mut().for_each(|c| c.1 *= r.scale);
    }
    got
}
