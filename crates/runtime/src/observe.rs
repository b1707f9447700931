//! Watching a forward pass: an [`Observer`] set on a [`crate::State`] is
//! shown the input rows of every weight matrix the shared block graph
//! applies, named by the weights' GGUF names, before they are applied —
//! what llama.cpp's eval callback shows llama-imatrix of each matmul's
//! `src1` (`gpack imatrix` collects its statistics this way,
//! [`crate::imatrix`]).
//!
//! Covered: every block of the shared graph (`model/step.rs`): the input of
//! q‖k‖v (or a fused `attn_qkv`), of `attn_output`, of the dense FFN's
//! gate‖up and down, and of a MoE layer's router (`ffn_gate_inp`), routed
//! experts (per expert: the rows routed to it, into its slice of the
//! stacked `ffn_{gate,up,down}_exps`) and shared experts. Not covered: the
//! head (`output.weight`, which llama-imatrix skips by default too),
//! DeepSeek's latent-attention projections (MLA layers report their FFN
//! only), Gemma 3n's own graph, and blocks run on a GPU.

use std::sync::Arc;

/// The rows a forward pass is about to multiply by one or more weights.
#[derive(Clone, Copy, Debug)]
pub struct MatmulInput<'a> {
    /// The weights these rows are the input of (GGUF names; q, k and v
    /// share theirs).
    pub weights: &'a [String],
    /// For stacked-expert weights: the expert whose slice the rows go
    /// through, and how many experts the tensor stacks.
    pub expert: Option<(usize, usize)>,
    /// `rows × cols` values, row-major.
    pub x: &'a [f32],
    /// Values per row (the weights' columns).
    pub cols: usize,
}

/// Something shown every weight matrix's input rows ([`MatmulInput`]).
/// Called from the forward pass's thread, one call at a time per state.
pub trait Observer: Send + Sync {
    /// The rows about to be multiplied.
    fn input(&self, input: MatmulInput<'_>);
}

/// A state's observer, if any (in [`crate::model::Scratch`]).
#[derive(Clone, Default)]
pub(crate) struct ObserverSlot(pub Option<Arc<dyn Observer>>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(observer)"
        } else {
            "None"
        })
    }
}

impl ObserverSlot {
    /// Shows `x` (`rows × cols`) as the input of `weights` (nothing when no
    /// observer is set or no weight is named).
    pub fn show(&self, weights: &[String], expert: Option<(usize, usize)>, x: &[f32], cols: usize) {
        if let (Some(o), false) = (&self.0, weights.is_empty()) {
            o.input(MatmulInput {
                weights,
                expert,
                x,
                cols,
            });
        }
    }
}

/// The weight names of one block's matrix inputs, as loaded (which of
/// `attn_q/k/v` or `attn_qkv`, `ffn_gate` or Phi-3's fused `ffn_up`, …).
#[derive(Clone, Debug, Default)]
pub(crate) struct BlockInputs {
    /// Fed by the normed block input: q, k, v (or qkv).
    pub attn: Vec<String>,
    /// Fed by the attention output.
    pub attn_out: Vec<String>,
    /// Fed by the normed FFN input: gate, up (dense), or the router and
    /// shared experts' gate, up (MoE).
    pub ffn: Vec<String>,
    /// Fed by the activated FFN hidden: down (dense or shared experts).
    pub ffn_down: Vec<String>,
    /// MoE: fed by the rows routed to an expert: its gate and up slices.
    pub experts: Vec<String>,
    /// MoE: fed by an expert's activated hidden: its down slice.
    pub experts_down: Vec<String>,
}
