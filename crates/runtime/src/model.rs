//! The transformer graph shared by llama, qwen2, qwen3, gemma3 and the
//! mixture-of-experts models qwen3moe and mixtral.
//!
//! One graph with optional pieces, switched on by which tensors exist
//! (q/k/v biases: qwen2; per-head q/k norms: qwen3, gemma3; post-attention
//! and post-FFN norms: gemma3; a router and routed experts instead of the
//! FFN: qwen3moe, mixtral) and by [`Config`] (rope style, embedding scale,
//! activation, sliding-window layers, soft-capping).
//!
//! One step runs a batch of rows through every weight once: the rows are the
//! next tokens of one or more sequences ([`Sequence`], each its own KV
//! cache). [`Model::forward`] is one sequence (a prompt goes through as one
//! matrix, decoding is the same code with one row); [`Model::forward_batch`]
//! is several at once (a server's continuous batching: decoding 8 streams
//! costs about one pass over the weights, not 8). Each row's arithmetic is
//! the same whichever batch it is in, because the quant kernels give every
//! row the same bits for one vector or many.
//!
//! Tensor names are GGUF's (`llama.cpp/src/llama-arch.cpp`, LLM_TENSOR_NAMES).

use crate::config::Config;
use crate::device::Device;
use crate::error::Result;
use crate::experts::{ExpertMode, ExpertStats, ExpertStore};
use crate::matrix::{Matrix, Proj};
use crate::ops::{self, Rope};
use crate::ple::PleIo;
use crate::weights::WeightSource;
use gpack_quant::Pool;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

mod attention;
mod gemma3n;
mod gpu;
mod kv;
mod kvrot;
mod load;
mod mla;
mod moe;
mod mtp;
mod step;
pub use gemma3n::{PleMode, PleStats};
use kv::Kv;
pub use kv::{KvType, KvTypes, Sequence, KB};
use load::{matrix, required_vec, tensor};
pub use mtp::{Mtp, MtpWeights};
use step::{glu, norm_rows};

/// The feed-forward part of a block.
#[derive(Debug)]
enum Ffn<'a> {
    /// gate‖up `[2 · n_ff] × n_embd` and down `n_embd × n_ff`.
    Dense {
        gate_up: Box<Proj<'a>>,
        down: Box<Matrix<'a>>,
    },
    /// Routed experts (in the model's [`ExpertStore`]).
    Moe(Box<MoeFfn<'a>>),
}

/// A layer's router and the biases of its experts (the matrices are in the
/// model's [`ExpertStore`]).
#[derive(Debug)]
struct MoeFfn<'a> {
    /// `[n_expert][n_embd]` router.
    router: Vec<f32>,
    /// `[n_expert]` router bias (gpt-oss).
    router_bias: Option<Vec<f32>>,
    /// `[n_expert][n_ff_exp]` gate, `[n_expert][n_ff_exp]` up and
    /// `[n_expert][n_embd]` down biases (gpt-oss), each if present.
    bias: [Option<Vec<f32>>; 3],
    /// `[n_expert]` bias added to the scores for the choice only
    /// (DeepSeek-V3's `exp_probs_b`).
    select_bias: Option<Vec<f32>>,
    /// The shared experts as one dense FFN of `n_ff_exp · n_expert_shared`
    /// (DeepSeek): gate‖up and down.
    shared: Option<(Proj<'a>, Matrix<'a>)>,
}

/// One transformer block's weights.
#[derive(Debug)]
struct Layer<'a> {
    /// `[n_embd]` pre-attention RMS norm (none in post-norm blocks: OLMo 2).
    attn_norm: Option<Vec<f32>>,
    /// q‖k‖v: `[q_dim + k_dim + v_dim] × n_embd`.
    qkv: Proj<'a>,
    /// `[q_dim + k_dim + v_dim]` biases (zeros where absent), if any bias exists.
    qkv_bias: Option<Vec<f32>>,
    /// q RMS norm: `[head_dim]` per head, or `[q_dim]` over all heads
    /// together (OLMo 2).
    q_norm: Option<Vec<f32>>,
    /// k RMS norm: `[head_dim]` per head, or `[k_dim]` over all heads.
    k_norm: Option<Vec<f32>>,
    /// `n_embd × (n_head · head_dim_v)` output projection.
    wo: Matrix<'a>,
    /// `[n_embd]` output projection bias (gpt-oss).
    wo_bias: Option<Vec<f32>>,
    /// `[n_head]` attention sinks: one more logit per head in each
    /// softmax, attending to nothing (gpt-oss).
    sinks: Option<Vec<f32>>,
    /// `[n_embd]` norm of the attention output (gemma2/3, OLMo 2).
    post_attn_norm: Option<Vec<f32>>,
    /// `[n_embd]` pre-FFN RMS norm (none in post-norm blocks).
    ffn_norm: Option<Vec<f32>>,
    ffn: Ffn<'a>,
    /// `[n_embd]` norm of the FFN output (gemma2/3, OLMo 2).
    post_ffn_norm: Option<Vec<f32>>,
    /// Sliding-window layer.
    swa: bool,
    /// Multi-head latent attention's weights (DeepSeek): then `qkv` is the
    /// first projection (queries or their compression, and the latent).
    mla: Option<Box<mla::MlaLayer<'a>>>,
    /// The names of the weights each matrix input feeds (for an
    /// [`crate::observe::Observer`]).
    inputs: Box<crate::observe::BlockInputs>,
}

/// The graph that runs a model's layers: the shared block graph (every
/// family of the table, with DeepSeek's latent attention in `mla.rs` for
/// the layers that have its weights), or a family's own graph with its own
/// weights, in its own file.
#[derive(Debug)]
enum Graph<'a> {
    /// `step.rs`'s blocks.
    Shared,
    /// Gemma 3n's AltUp streams, Laurel, per-layer embeddings and KV sharing
    /// (`gemma3n.rs`).
    Gemma3n(Box<gemma3n::Gemma3n<'a>>),
}

/// The threads a model's kernels run on: a [`Pool`] of the model's own, or
/// one shared with models loaded before it ([`LoadOptions::threads`]).
#[derive(Clone, Debug, Default)]
pub enum Threads {
    /// A pool of its own with [`default_threads`] threads.
    #[default]
    Default,
    /// A pool of its own with this many threads (the calling thread
    /// included: `n - 1` workers).
    Count(NonZeroUsize),
    /// This pool, shared with the other models that run with it: a target
    /// and its draft model or MTP block take turns, so one set of threads
    /// serves both ([`Model::pool`] of the one loaded first).
    Shared(Arc<Pool>),
}

impl PartialEq for Threads {
    /// Shared pools are equal when they are the same pool.
    fn eq(&self, other: &Threads) -> bool {
        match (self, other) {
            (Threads::Default, Threads::Default) => true,
            (Threads::Count(a), Threads::Count(b)) => a == b,
            (Threads::Shared(a), Threads::Shared(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Threads {}

impl Threads {
    /// The pool these threads are: a new one, or the shared one.
    pub fn pool(&self) -> Arc<Pool> {
        match self {
            Threads::Default => Arc::new(Pool::new(default_threads())),
            Threads::Count(n) => Arc::new(Pool::new(n.get())),
            Threads::Shared(p) => Arc::clone(p),
        }
    }
}

/// The default thread count of a model's pool: one per logical CPU the
/// process may use (`std::thread::available_parallelism`: the CPUs of its
/// affinity mask, bounded by a cgroup CPU quota), 1 if that is unknown. On
/// an SMT host every hardware thread counts, so a 4-core, 8-thread CPU gets
/// 8. Measured on 2-core hosts without SMT, where two threads run
/// SmolLM2's matrices ~1.3-1.7x faster than one (docs/PERFORMANCE.md); one
/// per physical core has not been measured against one per hardware thread
/// on an SMT host. `GPACK_THREADS` and `--threads` override it.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// How [`Model::load_with`] binds a model. The default reads no
/// environment variable; [`LoadOptions::from_env`] applies the `GPACK_*`
/// ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// The threads the model's kernels run on: its own pool (of
    /// [`default_threads`] or a given count) or a shared one.
    pub threads: Threads,
    /// How routed experts are read (ignored by dense models).
    pub experts: ExpertMode,
    /// How a `.gpack`'s per-layer embedding table is read (models with one:
    /// Gemma 3n).
    pub ple: PleIo,
    /// The types sequences keep keys and values in: f16 by default (as
    /// llama.cpp's, for run, serve, bench and Python alike): half the KV
    /// memory of f32 and half the bytes attention streams per step (with
    /// several long sequences in a step, attention is memory-bound);
    /// q8_0/q4_0 (ggml's blocks along each head) a little over a half or a
    /// quarter of f16's. K/V are rounded once when written.
    pub kv: KvTypes,
    /// A test reference: a q8_0/q4_0 cache kept as f32 values quantized
    /// and dequantized when written (the values its kernels read), summed
    /// by the f32 attention kernels.
    #[doc(hidden)]
    pub kv_dequantized: bool,
    /// The longest context the caller will run (0: not known). LongRoPE
    /// models (Phi-3) take their long frequency factors when it exceeds
    /// their original context, as llama.cpp does, and the short ones
    /// otherwise.
    pub context: usize,
    /// Which device runs the blocks ([`Device::Cpu`] by default).
    pub device: Device,
    /// With a GPU: how many blocks run on it, from the first (the rest,
    /// and then the head, on the CPU; llama.cpp's `-ngl`). `None`: all.
    pub gpu_layers: Option<usize>,
    /// With a GPU: the device memory gpack may use. When known, what the
    /// blocks, the head, the KV caches (`context` positions × `sequences`)
    /// and a step's buffers need is checked before anything is uploaded:
    /// without `gpu_layers`, as many whole blocks as fit go to the GPU
    /// ([`Device::Auto`]: the CPU unless all fit); a `gpu_layers` that does
    /// not fit is refused.
    pub gpu_memory: crate::device::GpuMemory,
    /// Sequences the caller keeps at once (serve's slots; 0: one): the
    /// GPU's memory plan counts a KV cache for each.
    pub sequences: usize,
    /// With a GPU: a cap on each storage binding below the adapter's
    /// limit (`None`: the adapter's). Tensors over it are bound as row
    /// pieces; tests use it to exercise that on small models.
    pub gpu_max_binding: Option<u64>,
    /// Fault injection for tests (`GPACK_TEST_GPU_LOST_AT_STEP`): the GPU
    /// is destroyed, as a driver reset would lose it, at the start of this
    /// step (counted from 1).
    pub gpu_lost_at_step: Option<u64>,
}

/// The default PLE row cache: 1024 sets × 4 ways.
pub const DEFAULT_PLE_CACHE: PleIo = PleIo::Direct {
    sets: 1024,
    ways: 4,
};

impl Default for LoadOptions {
    /// A pool of [`default_threads`], experts [`ExpertMode::Auto`], PLE rows
    /// by direct I/O with [`DEFAULT_PLE_CACHE`], an f32 K/V cache, the
    /// context not known. Reads no environment variable.
    fn default() -> Self {
        LoadOptions {
            threads: Threads::Default,
            experts: ExpertMode::Auto,
            ple: DEFAULT_PLE_CACHE,
            kv: KvTypes::F16,
            kv_dequantized: false,
            context: 0,
            device: Device::Cpu,
            gpu_layers: None,
            gpu_memory: crate::device::GpuMemory::Unknown,
            sequences: 0,
            gpu_max_binding: None,
            gpu_lost_at_step: None,
        }
    }
}

impl LoadOptions {
    /// [`LoadOptions::default`] with an f32 KV cache: the precision of
    /// the f32 references (transformers) the model-level tests compare
    /// against.
    pub fn reference() -> Self {
        LoadOptions {
            kv: KvTypes::F32,
            ..LoadOptions::default()
        }
    }
}

/// A loaded model: weights bound (borrowed) from a
/// [`WeightSource`](crate::weights::WeightSource).
#[derive(Debug)]
pub struct Model<'a> {
    /// Hyperparameters.
    pub config: Config,
    /// `n_vocab × n_embd` token embedding.
    embd: Matrix<'a>,
    layers: Vec<Layer<'a>>,
    /// `[n_embd]` final norm.
    output_norm: Vec<f32>,
    /// `n_vocab × n_embd` head (the embedding when tied).
    output: Matrix<'a>,
    rope_global: Rope,
    rope_swa: Rope,
    /// Routed experts of MoE models.
    experts: Option<ExpertStore<'a>>,
    /// Which graph runs the layers.
    graph: Graph<'a>,
    /// The types sequences keep K/V in ([`LoadOptions::kv`]).
    kv: KvTypes,
    /// [`LoadOptions::kv_dequantized`].
    kv_dequantized: bool,
    /// The threads every kernel of the graph runs on ([`LoadOptions::threads`]).
    pool: Arc<Pool>,
    /// The blocks (and head) on a GPU, when loaded for one
    /// ([`LoadOptions::device`]).
    gpu: Option<Box<gpu::GpuModel>>,
}

/// Which logits [`Model::forward`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (prefill of a prefix whose predictions are not needed).
    None,
    /// The last position's only (`[n_vocab]`).
    Last,
    /// Every position's (`[n][n_vocab]`).
    All,
}

/// Scratch of a forward step, grown to the largest step seen. Everything a
/// decode step touches is allocated once.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Rows the buffers hold.
    cap: usize,
    /// `[rows][n_embd]` residual stream.
    x: Vec<f32>,
    /// `[rows][n_embd]` normed input of a projection.
    xb: Vec<f32>,
    /// `[rows][q_dim + k_dim + v_dim]` q‖k‖v.
    qkv: Vec<f32>,
    /// `[rows][n_head · head_dim_v]` attention output.
    att: Vec<f32>,
    /// `[rows][n_embd]` block output before the residual add.
    out: Vec<f32>,
    /// `[rows][2 · n_ff]` gate‖up.
    gu: Vec<f32>,
    /// `[rows][n_ff]` activated FFN hidden.
    hb: Vec<f32>,
    /// `[rows][n_rot]` cos/sin pairs of global layers.
    cs_global: Vec<f32>,
    /// `[rows][n_rot]` cos/sin pairs of sliding-window layers.
    cs_swa: Vec<f32>,
    /// `[rows]` the sequence of each row.
    row_seq: Vec<usize>,
    /// `[rows]` the position of each row in its sequence.
    row_pos: Vec<usize>,
    /// Rows whose logits the step computes.
    head_rows: Vec<usize>,
    /// Attention score buffers, one per concurrent task: one row of
    /// `score_ld` scores per query head of a KV group.
    score_slots: Vec<Mutex<Vec<f32>>>,
    /// The row length of the score buffers (the largest context reserved).
    score_ld: usize,
    /// MoE: `[n_expert]` (row, weight) lists of one layer.
    routes: Vec<Vec<(usize, f32)>>,
    /// MoE: `[n_expert]` router probabilities of one row.
    probs: Vec<f32>,
    /// MoE: `[n_expert]` the values experts are chosen by.
    select: Vec<f32>,
    /// MoE: the gathered rows of one expert and its intermediate results.
    moe_x: Vec<f32>,
    moe_g: Vec<f32>,
    moe_u: Vec<f32>,
    moe_h: Vec<f32>,
    moe_y: Vec<f32>,
    /// Scratch of projections whose members are not one fused tensor.
    tmp: Vec<f32>,
    /// `[m][n_vocab]` logits of the last step.
    logits: Vec<f32>,
    /// Gemma 3n's buffers.
    g3n: gemma3n::G3nScratch,
    /// MLA's buffers.
    mla: mla::MlaScratch,
    /// The device's buffers (a model on a GPU).
    gpu: Option<gpu::GpuScratch>,
    /// Shown every weight matrix's input ([`State::set_observer`]).
    observer: crate::observe::ObserverSlot,
}

impl Scratch {
    /// `[m][n_vocab]` logits of the last step.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// The rows of a one-sequence step of `n` tokens whose logits `want`
    /// asks for.
    fn want_rows(&mut self, n: usize, want: Logits) {
        self.head_rows.clear();
        match want {
            Logits::None => {}
            Logits::Last if n > 0 => self.head_rows.push(n - 1),
            Logits::Last => {}
            Logits::All => self.head_rows.extend(0..n),
        }
    }
}

/// One sequence and its scratch: what [`Model::forward`] runs on.
#[derive(Debug)]
pub struct State {
    seq: Sequence,
    scratch: Scratch,
}

impl State {
    /// Next position (= tokens in the cache).
    pub fn pos(&self) -> usize {
        self.seq.pos
    }
    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.seq.n_ctx
    }
    /// Forgets the cache after `pos` tokens (keeps the prefix).
    pub fn truncate(&mut self, pos: usize) {
        self.seq.truncate(pos);
    }
    /// Logits of the last forward.
    pub fn logits(&self) -> &[f32] {
        &self.scratch.logits
    }
    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.seq.kv_bytes()
    }
    /// The sequence (its KV cache).
    pub fn sequence(&self) -> &Sequence {
        &self.seq
    }
    /// The sequence, to change (the prefix cache's imports).
    pub fn sequence_mut(&mut self) -> &mut Sequence {
        &mut self.seq
    }
    /// Shows every weight matrix's input rows of this state's forward
    /// passes to `observer` from now on (`None`: to nobody); see
    /// [`crate::observe`] for what is covered.
    pub fn set_observer(&mut self, observer: Option<Arc<dyn crate::observe::Observer>>) {
        self.scratch.observer = crate::observe::ObserverSlot(observer);
    }
}

impl<'a> Model<'a> {
    /// The thread pool the model's kernels run on: pass it on
    /// ([`Threads::Shared`]) to load a draft model or MTP block on the
    /// same threads.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The GPU the model's blocks run on and what was uploaded to it (`None`
    /// on the CPU): adapter, backend, blocks on the device, upload reports.
    pub fn gpu_summary(&self) -> Option<String> {
        self.gpu.as_ref().map(|g| g.summary())
    }

    /// The GPU the model runs on (`None`: the CPU alone).
    pub fn gpu_info(&self) -> Option<crate::device::GpuInfo> {
        self.gpu.as_ref().map(|g| g.info())
    }

    /// Why the model's GPU was lost, if it runs on one that was: nothing
    /// more can run (serve reports it in `/health`).
    pub fn device_lost(&self) -> Option<String> {
        self.gpu.as_ref().and_then(|g| g.lost())
    }

    /// The PLE table's counters (`None` for a model without one).
    pub fn ple_stats(&self) -> Option<PleStats> {
        match &self.graph {
            Graph::Gemma3n(g) => Some(g.stats()),
            Graph::Shared => None,
        }
    }

    /// Whether every layer's q‖k‖v and gate‖up run as single kernel calls.
    pub fn is_fused(&self) -> bool {
        self.layers.iter().all(|l| {
            l.qkv.is_fused()
                && match &l.ffn {
                    Ffn::Dense { gate_up, .. } => gate_up.is_fused(),
                    Ffn::Moe(_) => true,
                }
        })
    }

    /// The expert store's counters (`None` for a dense model).
    pub fn expert_stats(&self) -> Option<ExpertStats> {
        self.experts.as_ref().map(ExpertStore::stats)
    }

    /// How experts are read (`None` for a dense model).
    pub fn expert_mode(&self) -> Option<ExpertMode> {
        self.experts.as_ref().map(ExpertStore::mode)
    }

    /// Bytes of all routed experts (0 for a dense model).
    pub fn expert_bytes(&self) -> u64 {
        self.experts.as_ref().map_or(0, ExpertStore::total_bytes)
    }

    /// The types sequences keep K and V in.
    pub fn kv_types(&self) -> KvTypes {
        self.kv
    }
    /// Whether sequences keep quantized K/V dequantized (a test reference).
    pub fn kv_dequantized(&self) -> bool {
        self.kv_dequantized
    }
    /// Bytes of one block of [`KB`] positions of a sequence's KV cache
    /// (what the prefix cache copies).
    pub fn kv_block_bytes(&self) -> usize {
        self.new_sequence(KB).block_bytes(&self.config)
    }
    /// Whether sequences can take blocks from the prefix cache
    /// ([`crate::kvcache`]): their KV cache must be on the host, all of it.
    pub fn prefix_cache_support(&self) -> std::result::Result<(), String> {
        if self.gpu.is_some() {
            return Err("this model runs on a GPU, whose KV cache is on the device; run it with --device cpu to use the prefix cache".into());
        }
        Ok(())
    }

    /// An empty sequence with a KV cache of `n_ctx` positions.
    pub fn new_sequence(&self, n_ctx: usize) -> Sequence {
        let c = &self.config;
        // A model all on the GPU keeps no cache on the host (a split one
        // indexes the host's by layer, so it keeps one for every layer).
        let host_layers = match &self.gpu {
            Some(g) if g.blocks() == c.n_layer => 0,
            _ => c.n_layer,
        };
        Sequence {
            n_ctx,
            pos: 0,
            k_cache: Kv::new(
                self.kv.k,
                host_layers * n_ctx.div_ceil(KB) * KB * c.k_dim(),
                c.head_dim,
                true,
                self.kv_dequantized,
            ),
            // MLA reads its values from the key cache.
            v_cache: Kv::new(
                self.kv.v,
                match c.mla {
                    Some(_) => 0,
                    None => host_layers * n_ctx * c.v_dim(),
                },
                c.head_dim_v,
                false,
                self.kv_dequantized,
            ),
            gpu: None,
        }
    }

    /// A fresh state with a KV cache of `n_ctx` positions.
    pub fn new_state(&self, n_ctx: usize) -> State {
        State {
            seq: self.new_sequence(n_ctx),
            scratch: Scratch::default(),
        }
    }

    fn reserve(&self, s: &mut Scratch, n: usize, max_ctx: usize) {
        let c = &self.config;
        if s.cap < n {
            s.x.resize(n * c.n_embd, 0.0);
            s.xb.resize(n * c.n_embd, 0.0);
            s.qkv.resize(n * (c.q_dim() + c.k_dim() + c.v_dim()), 0.0);
            s.att.resize(n * c.n_head * c.head_dim_v, 0.0);
            s.out.resize(n * c.n_embd, 0.0);
            let ff = c.n_ff.max(c.n_ff_exp * c.n_expert_shared);
            s.gu.resize(n * 2 * ff, 0.0);
            s.hb.resize(n * ff, 0.0);
            s.cs_global.resize(n * c.n_rot, 0.0);
            s.cs_swa.resize(n * c.n_rot, 0.0);
            s.cap = n;
        }
        let slots = self.pool.threads() + 1;
        if s.score_slots.len() < slots {
            s.score_slots.resize_with(slots, || Mutex::new(Vec::new()));
        }
        // One row of max_ctx scores per query head of a KV group.
        let group = c.n_head / c.n_head_kv.max(1);
        s.score_ld = s.score_ld.max(max_ctx);
        for m in &mut s.score_slots {
            let v = m.get_mut().unwrap_or_else(|e| e.into_inner());
            if v.len() < group * s.score_ld {
                v.resize(group * s.score_ld, 0.0);
            }
        }
    }

    /// Runs `tokens` at positions `state.pos() ..`, appends them to the KV
    /// cache and returns the requested logits (`[n_vocab]` for
    /// [`Logits::Last`], `[n][n_vocab]` for [`Logits::All`]).
    ///
    /// On an error the cache position is unchanged (what was written past it
    /// is overwritten by the next call).
    pub fn forward<'s>(&self, s: &'s mut State, tokens: &[u32], want: Logits) -> Result<&'s [f32]> {
        let State { seq, scratch } = s;
        scratch.want_rows(tokens.len(), want);
        self.step(scratch, &mut [seq], &[tokens])
    }

    /// Runs `tokens` like [`Model::forward`] (at positions `state.pos() ..`)
    /// and returns each position's final hidden state after the output norm
    /// (`[n][n_embd]`: transformers' last `hidden_states`), for embeddings.
    pub fn hidden_states(&self, s: &mut State, tokens: &[u32]) -> Result<Vec<f32>> {
        self.forward(s, tokens, Logits::None)?;
        Ok(self.hidden_rows(&s.scratch, 0, tokens.len()))
    }

    /// [`Model::hidden_states`] of several sequences in one batched step:
    /// `tokens[i]` (at `seqs[i]`'s next positions) gives rows
    /// `Σ_{j<i} len_j ..` of the result, `[Σ len][n_embd]`, each the bits
    /// it gets alone.
    pub fn hidden_states_batch(
        &self,
        s: &mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
    ) -> Result<Vec<f32>> {
        assert_eq!(seqs.len(), tokens.len(), "one token slice per sequence");
        s.head_rows.clear();
        self.step(s, seqs, tokens)?;
        Ok(self.hidden_rows(s, 0, tokens.iter().map(|t| t.len()).sum()))
    }

    /// The output-normed hidden states of rows `0 .. n` of the last
    /// forward on `s` (`[n][n_embd]`, as [`Model::hidden_states`] gives
    /// them, without running anything): what an MTP block drafts from.
    pub fn step_hidden(&self, s: &State, n: usize) -> Vec<f32> {
        self.hidden_rows(&s.scratch, 0, n)
    }

    /// Rows `first .. first + n` of the last step run on `s`, after the
    /// output norm (`[n][n_embd]`; a server step's rows of one sequence).
    pub fn hidden_rows(&self, s: &Scratch, first: usize, n: usize) -> Vec<f32> {
        let d = self.config.n_embd;
        let mut out = vec![0.0; n * d];
        for (o, x) in out
            .chunks_exact_mut(d)
            .zip(s.x[first * d..].chunks_exact(d))
        {
            ops::rmsnorm(o, x, &self.output_norm, self.config.rms_eps);
        }
        out
    }

    /// The MTP block of `w` (which this model was loaded from), if it has
    /// one: the view to [`Mtp::load`] from.
    pub fn mtp_weights<'w>(&self, w: &'w dyn WeightSource) -> Option<MtpWeights<'w>> {
        let c = &self.config;
        MtpWeights::of(w, c.arch.name(), c.n_layer, c.n_nextn)
    }

    /// One step for several sequences: `tokens[i]` (non-empty) is appended
    /// to `seqs[i]` at its next positions. Returns `[m][n_vocab]`: the logits
    /// of the last token of each sequence `i` with `want_logits[i]`, in order.
    ///
    /// Fails (changing no cache position) if a sequence would overflow its
    /// context or a token is outside the vocabulary.
    pub fn forward_batch<'s>(
        &self,
        s: &'s mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        want_logits: &[bool],
    ) -> Result<&'s [f32]> {
        assert_eq!(seqs.len(), want_logits.len(), "one flag per sequence");
        let want: Vec<Logits> = want_logits
            .iter()
            .map(|&w| if w { Logits::Last } else { Logits::None })
            .collect();
        self.forward_batch_rows(s, seqs, tokens, &want)
    }

    /// [`Model::forward_batch`] with a choice of rows per sequence: the
    /// logits of sequence `i`'s last token ([`Logits::Last`]), of every one
    /// of its tokens ([`Logits::All`]: a speculative draft checked in the
    /// same step as other sequences' tokens) or none. Returns them in order,
    /// `[m][n_vocab]`.
    pub fn forward_batch_rows<'s>(
        &self,
        s: &'s mut Scratch,
        seqs: &mut [&mut Sequence],
        tokens: &[&[u32]],
        want: &[Logits],
    ) -> Result<&'s [f32]> {
        assert_eq!(seqs.len(), tokens.len(), "one token slice per sequence");
        assert_eq!(seqs.len(), want.len(), "one choice per sequence");
        s.head_rows.clear();
        let mut end = 0;
        for (t, &w) in tokens.iter().zip(want) {
            let start = end;
            end += t.len();
            match w {
                Logits::None => {}
                Logits::Last if !t.is_empty() => s.head_rows.push(end - 1),
                Logits::Last => {}
                Logits::All => s.head_rows.extend(start..end),
            }
        }
        self.step(s, seqs, tokens)
    }
}
