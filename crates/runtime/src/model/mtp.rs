//! Multi-token prediction ("nextn") blocks: the extra block some models
//! carry after their trunk (GLM-4.5, GLM-4.7-Flash, DeepSeek-V3.2, stored by
//! llama.cpp's converter as `blk.N.*` with `N = n_layer` and the extras
//! `blk.N.nextn.{eh_proj,enorm,hnorm,shared_head_norm,…}`), run as a draft
//! source for speculative decoding.
//!
//! At position `p` the block takes the trunk's output-normed hidden state
//! `h_p` and the embedding of the next token `x_{p+1}`:
//!
//! ```text
//! u   = eh_proj · [rmsnorm(embd(x_{p+1})) · enorm ‖ rmsnorm(h_p) · hnorm]
//! u'  = the block (attention over the block's own cache, then its FFN) on u
//! g   = rmsnorm(u') · shared_head_norm
//! logits = head · g                                  predicts x_{p+2}
//! ```
//!
//! (llama.cpp's `graph_mtp` of deepseek2, vLLM's `DeepSeekMultiTokenPredictorLayer`). To draft
//! further, `g` stands in for the unknown `h_{p+1}` (llama.cpp's chain).
//! The block's cache entry `i` holds the pair `(h_i, x_{i+1})` at rotary
//! position `i`: positions enter attention only through their differences.
//!
//! The block runs as a one-layer [`Model`] over [`MtpWeights`], a view of
//! the target's weights that renames block `N` to block 0 and answers the
//! head's tensors with the block's own where it has them, so every kernel,
//! layout and cache of the trunk serves it unchanged.

use super::load::{matrix, required_vec};
use super::{LoadOptions, Logits, Model, State};
use crate::error::{Error, Result};
use crate::experts::ExpertSlice;
use crate::matrix::Matrix;
use crate::ops;
use crate::weights::{MetadataSource, TensorRef, WeightSource};

/// The target's weights seen as a one-layer model: its first MTP block.
pub struct MtpWeights<'w> {
    inner: &'w dyn WeightSource,
    /// The block's index in the source (the trunk's layer count).
    layer: usize,
    /// `"{arch}."`, the prefix of the keys answered here.
    prefix: String,
}

impl std::fmt::Debug for MtpWeights<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MtpWeights")
            .field("layer", &self.layer)
            .finish()
    }
}

impl<'w> MtpWeights<'w> {
    /// The first MTP block of `w`, whose trunk has `n_layer` layers and
    /// `n_nextn` MTP blocks; `None` when it has none (or its block lacks
    /// `eh_proj`: a GGUF converted with llama.cpp's `--no-mtp`).
    pub fn of(w: &'w dyn WeightSource, arch: &str, n_layer: usize, n_nextn: usize) -> Option<Self> {
        if n_nextn == 0 {
            return None;
        }
        w.tensor(&format!("blk.{n_layer}.nextn.eh_proj.weight"))?;
        Some(MtpWeights {
            inner: w,
            layer: n_layer,
            prefix: format!("{arch}."),
        })
    }

    fn nextn(&self, what: &str) -> String {
        format!("blk.{}.nextn.{what}.weight", self.layer)
    }
}

impl MetadataSource for MtpWeights<'_> {
    fn meta_u64(&self, key: &str) -> Option<u64> {
        match key.strip_prefix(self.prefix.as_str()) {
            Some("block_count") => Some(1),
            // The block follows the trunk's dense lead: its FFN is the
            // trunk's later kind.
            Some("leading_dense_block_count") => Some(0),
            Some("nextn_predict_layers") => None,
            _ => self.inner.meta_u64(key),
        }
    }
    fn meta_f32(&self, key: &str) -> Option<f32> {
        self.inner.meta_f32(key)
    }
    fn meta_str(&self, key: &str) -> Option<&str> {
        self.inner.meta_str(key)
    }
    fn meta_bool(&self, key: &str) -> Option<bool> {
        self.inner.meta_bool(key)
    }
    fn meta_num_array(&self, _key: &str) -> Option<Vec<f64>> {
        // Per-layer arrays describe the trunk's layers.
        None
    }
}

impl WeightSource for MtpWeights<'_> {
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        let own = |what: &str| self.inner.tensor(&self.nextn(what));
        match name {
            "token_embd.weight" => own("embed_tokens").or_else(|| self.inner.tensor(name)),
            "output.weight" => own("shared_head_head").or_else(|| self.inner.tensor(name)),
            "output_norm.weight" => own("shared_head_norm").or_else(|| self.inner.tensor(name)),
            _ => match name.strip_prefix("blk.0.") {
                Some(rest) => self.inner.tensor(&format!("blk.{}.{rest}", self.layer)),
                // Other blocks are the trunk's.
                None if name.starts_with("blk.") => None,
                None => self.inner.tensor(name),
            },
        }
    }

    fn expert_slice(
        &self,
        layer: usize,
        expert: usize,
        part: usize,
        n_expert: usize,
    ) -> Option<Result<ExpertSlice<'_>>> {
        if layer != 0 {
            return None;
        }
        self.inner.expert_slice(self.layer, expert, part, n_expert)
    }

    fn release(&self, bytes: &[u8]) {
        self.inner.release(bytes);
    }
}

/// A loaded MTP block: a one-layer model plus its input projection.
#[derive(Debug)]
pub struct Mtp<'a> {
    model: Model<'a>,
    /// `[n_embd]` norm of the next token's embedding.
    enorm: Vec<f32>,
    /// `[n_embd]` norm of the trunk's hidden state.
    hnorm: Vec<f32>,
    /// `n_embd × 2·n_embd`: [embedding ‖ hidden] → the block's input.
    eh_proj: Matrix<'a>,
}

impl<'a> Mtp<'a> {
    /// Binds the block of `w` (as [`Model::load_with`] binds a model).
    pub fn load(w: &'a MtpWeights<'a>, opts: &LoadOptions) -> Result<Mtp<'a>> {
        let model = Model::load_with(w, opts)?;
        let d = model.config.n_embd;
        let src = w.inner;
        let name = |what: &str| w.nextn(what);
        Ok(Mtp {
            enorm: required_vec(src, &name("enorm"), d, "norm")?,
            hnorm: required_vec(src, &name("hnorm"), d, "norm")?,
            eh_proj: matrix(src, &name("eh_proj"), 2 * d, d)?,
            model,
        })
    }

    /// The block as a model (its config, its cache).
    pub fn model(&self) -> &Model<'a> {
        &self.model
    }

    /// A fresh cache of `n_ctx` pairs.
    pub fn new_state(&self, n_ctx: usize) -> State {
        self.model.new_state(n_ctx)
    }

    /// Appends the pairs `(hidden[i], tokens[i])` to `s` at its next
    /// positions (`hidden`: `[n][n_embd]`, the trunk's output-normed states
    /// or the block's own from [`Mtp::output_normed`]) and returns the
    /// requested logits (each row predicts the token after `tokens[i]`).
    pub fn forward<'s>(
        &self,
        s: &'s mut State,
        tokens: &[u32],
        hidden: &[f32],
        want: Logits,
    ) -> Result<&'s [f32]> {
        let c = &self.model.config;
        let (n, d) = (tokens.len(), c.n_embd);
        if hidden.len() != n * d {
            return Err(Error::Shape {
                name: "MTP hidden states".into(),
                expected: vec![d as u64, n as u64],
                found: vec![hidden.len() as u64],
            });
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(Error::Token {
                id,
                n_vocab: c.n_vocab,
            });
        }
        // [enorm(embd(x)) ‖ hnorm(h)] per row, projected.
        let mut cat = vec![0f32; n * 2 * d];
        let mut e = vec![0f32; d];
        for (t, (&tok, h)) in tokens.iter().zip(hidden.chunks_exact(d)).enumerate() {
            let row = &mut cat[t * 2 * d..(t + 1) * 2 * d];
            self.model.embd.row(tok as usize, &mut e);
            let (re, rh) = row.split_at_mut(d);
            ops::rmsnorm(re, &e, &self.enorm, c.rms_eps);
            ops::rmsnorm(rh, h, &self.hnorm, c.rms_eps);
        }
        let mut u = vec![0f32; n * d];
        self.eh_proj.matmul(self.model.pool(), &cat, n, &mut u);
        let State { seq, scratch } = s;
        scratch.want_rows(n, want);
        self.model
            .step_with(scratch, &mut [seq], &[tokens], Some(&u))
    }

    /// The block's output row `row` of the last [`Mtp::forward`] after its
    /// head norm: what stands in for the trunk's next hidden state when
    /// drafting further.
    pub fn output_normed(&self, s: &State, row: usize) -> Vec<f32> {
        self.model.hidden_rows(&s.scratch, row, 1)
    }
}
