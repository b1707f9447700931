//! Attention: q/k/v made ready and stored in the cache, then causal
//! (optionally sliding-window) attention over each row's own sequence.

use super::kvrot::{self, KvRot};
use super::{Layer, Model, Scratch, Sequence, KB};
use crate::ops;
use std::sync::Mutex;

/// What [`Model::prepare_qkv`] does besides the layer's own pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct QkvPrep {
    /// A weightless RMS norm over each v head (Gemma 3n).
    pub v_norm: bool,
    /// Store k and v in the layer's cache (false: queries only, Gemma 3n's
    /// KV-sharing layers).
    pub store_kv: bool,
}

impl QkvPrep {
    /// Every family but Gemma 3n.
    pub const STANDARD: QkvPrep = QkvPrep {
        v_norm: false,
        store_kv: true,
    };
}

impl Model<'_> {
    /// The `n` rows' q‖k‖v in `s.qkv` made ready for attention: biases,
    /// q and k RMS norms (per head, or over all heads: as long as the norm's
    /// weight), the weightless v norm (`prep.v_norm`), rotary embeddings
    /// (where the layer has them), the rotation of a quantized cache's
    /// heads (`kvrot`: q and k for quantized keys, v for quantized values);
    /// then each row's k and v stored at its position in layer `l`'s cache,
    /// if `prep.store_kv`.
    pub(super) fn prepare_qkv(
        &self,
        layer: &Layer,
        s: &mut Scratch,
        seqs: &mut [&mut Sequence],
        l: usize,
        n: usize,
        prep: QkvPrep,
    ) {
        let QkvPrep {
            v_norm,
            store_kv: store,
        } = prep;
        let c = &self.config;
        let (qd, kd, hd, r, eps) = (c.q_dim(), c.k_dim(), c.head_dim, c.n_rot, c.rms_eps);
        let qkv_w = qd + kd + c.v_dim();
        let rot = KvRot::of(c, self.kv);
        let (rope, cs) = if layer.swa {
            (&self.rope_swa, &s.cs_swa)
        } else {
            (&self.rope_global, &s.cs_global)
        };
        for t in 0..n {
            let row = &mut s.qkv[t * qkv_w..(t + 1) * qkv_w];
            if let Some(b) = &layer.qkv_bias {
                row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            }
            let (q, rest) = row.split_at_mut(qd);
            let (k, v) = rest.split_at_mut(kd);
            if let Some(w) = &layer.q_norm {
                q.chunks_exact_mut(w.len())
                    .for_each(|h| ops::rmsnorm_inplace(h, w, eps));
            }
            let cs_t = &cs[t * r..(t + 1) * r];
            let rotate = c.rope_layers[l];
            if rotate {
                rope.apply(q, hd, cs_t);
            }
            // The queries meet the keys in the cache, rotated as they are
            // (also on layers that read another layer's cache).
            kvrot::rotate(q, rot.k);
            if !store {
                continue;
            }
            if let Some(w) = &layer.k_norm {
                k.chunks_exact_mut(w.len())
                    .for_each(|h| ops::rmsnorm_inplace(h, w, eps));
            }
            if v_norm {
                for h in v.chunks_exact_mut(c.head_dim_v) {
                    let inv = ops::rms_inv(h, eps);
                    h.iter_mut().for_each(|x| *x *= inv);
                }
            }
            if rotate {
                rope.apply(k, hd, cs_t);
            }
            kvrot::rotate(k, rot.k);
            kvrot::rotate(v, rot.v);
            let q_seq = &mut *seqs[s.row_seq[t]];
            let p = s.row_pos[t];
            q_seq.put_keys(c, l, p, k);
            q_seq.put_values(c, l, p, v);
        }
    }

    /// Causal (optionally sliding-window) attention of the `n` rows in
    /// `s.qkv`, each over its own sequence's cache of layer `l`, into
    /// `s.att`. Work is split into (row, KV head) units run on the model's
    /// pool: the query heads that share a KV head run together, so
    /// each key and value row is read once for all of them (each head's
    /// results are the bits it gets alone). Each task writes its own
    /// disjoint slice of `s.att` (one `Mutex` per task, never contended)
    /// and borrows a score buffer from `s.score_slots` (one row of
    /// `max_ctx` per head of a unit). With `sinks` (`[n_head]`), each
    /// head's softmax has its sink as one more logit (gpt-oss).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &self,
        s: &mut Scratch,
        seqs: &[&mut Sequence],
        l: usize,
        swa: bool,
        sinks: Option<&[f32]>,
        n: usize,
    ) {
        let c = &self.config;
        let (hd, hdv) = (c.head_dim, c.head_dim_v);
        let (qd, kd, vd) = (c.q_dim(), c.k_dim(), c.v_dim());
        let qkv_w = qd + kd + vd;
        let group = c.n_head / c.n_head_kv;
        let units = n * c.n_head_kv;
        let pool = &*self.pool;
        let per_task = units.div_ceil(pool.threads() * 4).max(1);
        let qkv = &s.qkv;
        let (row_seq, row_pos) = (&s.row_seq, &s.row_pos);
        let slots = &s.score_slots;
        let ld = s.score_ld;
        let window = if swa { c.sliding_window } else { None };
        let mla = c.mla.is_some();
        let v_rot = KvRot::of(c, self.kv).v;
        let chunks: Vec<Mutex<&mut [f32]>> = s.att[..n * c.n_head * hdv]
            .chunks_mut(per_task * group * hdv)
            .map(Mutex::new)
            .collect();
        let run = |task: usize| {
            let mut out = chunks[task].lock().unwrap_or_else(|e| e.into_inner());
            let mut slot = slots
                .iter()
                .find_map(|m| m.try_lock().ok())
                .expect("more concurrent attention tasks than score slots");
            let u0 = task * per_task;
            for (i, o) in out.chunks_exact_mut(group * hdv).enumerate() {
                let u = u0 + i;
                let (t, kvh) = (u / c.n_head_kv, u % c.n_head_kv);
                let q_seq = &*seqs[row_seq[t]];
                let nc = q_seq.n_ctx;
                let p = row_pos[t];
                let start = window.map_or(0, |w| (p + 1).saturating_sub(w));
                let len = p + 1 - start;
                let h0 = kvh * group;
                let q = &qkv[t * qkv_w + h0 * hd..t * qkv_w + (h0 + group) * hd];
                // scores = (q · K[start..=p]) * scale over the transposed
                // cache, block by block (each position's sum is the same
                // whatever the blocks), head i's into slot row i.
                // The key blocks holding positions start..=p: (first
                // position, end, the block's range of the cache).
                let blocks = || {
                    std::iter::successors(Some(start), |&b0| Some((b0 / KB + 1) * KB))
                        .take_while(move |&b0| b0 <= p)
                        .map(move |b0| {
                            let base = q_seq.k_at(c, l, kvh, 0, b0 / KB * KB);
                            let b1 = ((b0 / KB + 1) * KB).min(p + 1);
                            (b0, b1, base..base + hd * KB)
                        })
                };
                for (b0, b1, kt) in blocks() {
                    let sc = &mut slot[b0 - start..];
                    q_seq
                        .k_cache
                        .scores_group(q, hd, c.attn_scale, kt, b0 % KB, b1 - b0, sc, ld);
                }
                if let Some(cap) = c.attn_softcap {
                    for sc in slot.chunks_mut(ld).take(group) {
                        sc[..len]
                            .iter_mut()
                            .for_each(|v| *v = cap * (*v / cap).tanh());
                    }
                }
                match sinks {
                    Some(sk) => gpack_quant::kernels::attn::softmax_rows_sinks(
                        &mut slot,
                        ld,
                        len,
                        group,
                        &sk[h0..h0 + group],
                    ),
                    None => ops::softmax_rows(&mut slot, ld, len, group),
                }
                if mla {
                    // The values are the keys' first `hdv` dims (the
                    // latent): weighted sums over the same key blocks.
                    o.fill(0.0);
                    for (b0, b1, kt) in blocks() {
                        let a = &slot[b0 - start..];
                        q_seq.k_cache.weighted_transposed_group(
                            a,
                            ld,
                            kt,
                            b0 % KB,
                            b1 - b0,
                            o,
                            hdv,
                        );
                    }
                } else {
                    let v0 = q_seq.v_at(c, l, kvh, start);
                    let v1 = q_seq.v_at(c, l, kvh, nc);
                    q_seq
                        .v_cache
                        .weighted_group(&slot, ld, len, v0..v1, hdv, o, hdv);
                    // Σ a·(H v) = H (Σ a·v): rotated back (H·H = I).
                    kvrot::rotate(o, v_rot);
                }
            }
        };
        // Small jobs (decode at short context) run on the caller: waking the
        // pool costs more than it saves below ~64K multiply-adds.
        let work: usize = (0..n).map(|t| row_pos[t] + 1).sum::<usize>() * c.n_head * (hd + hdv);
        if work < 1 << 16 || chunks.len() == 1 {
            (0..chunks.len()).for_each(run);
        } else {
            pool.run(chunks.len(), &run);
        }
    }
}
