//! gpack-runtime: runs a model on the CPU from any weight store.
//!
//! * [`weights`]: the provider abstraction ([`WeightSource`], [`TensorRef`],
//!   [`MetadataSource`]) every store implements;
//! * [`gguf`]: the slow-path provider ([`GgufWeights`]): GGUF or Hugging Face
//!   sources transcoded into native layouts in memory at load;
//! * [`config`]: hyperparameters from GGUF-style metadata;
//! * [`model`]: the graph ([`Model`]), KV caches ([`Sequence`], [`State`]),
//!   batched prefill and decode ([`Model::forward`]) and multi-sequence
//!   steps for servers ([`Model::forward_batch`]); how a model is bound
//!   ([`LoadOptions`], with the `GPACK_*` environment read in one place:
//!   [`LoadOptions::from_env`]). A model owns the thread pool its kernels
//!   run on ([`Threads`], [`Model::pool`]; a draft model shares its
//!   target's);
//! * [`experts`]: routed experts of MoE models, resident cache or in place
//!   ([`ExpertMode`]);
//! * [`sampler`], [`generate`]: sampling and the streaming generation loop;
//! * [`spec`]: speculative decoding's draft sources ([`NgramDrafter`],
//!   [`ModelDrafter`]) and its acceptance rule;
//! * [`bench`]: prompt-processing and generation throughput;
//! * [`quality`]: perplexity and KL-divergence on a text, llama-perplexity's
//!   way (its `--kl-divergence-base` file read and written);
//! * [`open`]: opening any model file ([`Loaded`]: .gpack, .giw, .gguf, HF
//!   directory) with its tokenizer, as `gpack run`, `gpack serve` and the
//!   Python package do.
//!
//! ```no_run
//! use gpack_runtime::{generate, GenerateConfig, GgufWeights, Model, SamplerConfig};
//!
//! let weights = GgufWeights::open("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
//! let model = Model::load(&weights)?; // borrows `weights`
//! let mut state = model.new_state(2048); // KV cache for 2048 positions
//! let cfg = GenerateConfig { max_tokens: 32, sampler: SamplerConfig::greedy(), ..Default::default() };
//! let out = generate(&model, &mut state, &[504, 3575, 282, 4649, 314], &cfg, None, |id, _text| {
//!     println!("{id}");
//!     true // keep going
//! })?;
//! println!("{:.1} tok/s", out.decode_tps());
//! # Ok::<(), gpack_runtime::Error>(())
//! ```
//!
//! Weights are borrowed: `Model<'w>` binds views into its store and owns only
//! the small norm/bias vectors (converted to f32 at load), its KV cache and
//! scratch live in [`State`].
//!
//! # Adding a model family (checklist; keep it true)
//!
//! The graph lives in `model/`: `model.rs` (the types and the public entry
//! points), `load.rs` (binding tensors by their GGUF names), `kv.rs` (the KV
//! cache), `step.rs` (one step: embedding, blocks, head), `attention.rs`,
//! `moe.rs`, and one file per family with weights or steps of its own
//! (`gemma3n.rs`; `mla.rs`, DeepSeek's latent attention, called for the
//! layers that have its weights). A family touches:
//!
//! 1. `config.rs`: an [`config::Arch`] variant and its row in
//!    [`config::FAMILIES`] (GGUF name, rope style as llama.cpp's
//!    `llama_model_rope_type` says, activation, and the switches a llama
//!    body varies by: `embed_sqrt`, `no_rope_every` (SmolLM3), `multipliers`
//!    (Granite), `swa_period` (Gemma 2 and 3), `post_norm` and
//!    `qk_norm_all_heads` (OLMo 2), `longrope` (Phi-3), `gating`, `ffn_norm`
//!    and `yarn_exact_range` (gpt-oss)); the `{arch}.…`
//!    metadata keys it reads, bounded like the others (routing details
//!    that vary within a family, as DeepSeek's, are read into
//!    [`config::Routing`]). A family built from
//!    these pieces is only that row: `smollm3`, `granite`, `gemma2`, `olmo2`
//!    and `phi3` are examples (fused `attn_qkv` / gate‖up `ffn_up` tensors
//!    are bound by name in `load.rs`);
//! 2. the graph: a family whose pieces are already optional (q/k/v biases,
//!    q/k norms (per head or over all heads), pre- or post-norm blocks,
//!    post-attention/post-FFN norms, sliding-window and NoPE layers, soft-capping, embedding/residual/logit multipliers,
//!    output-projection biases, attention sinks, YaRN, routed experts with
//!    router and expert biases, shared experts, leading dense layers,
//!    grouped/sigmoid routing) needs nothing more, since `load.rs` switches them on by which
//!    tensors exist and `step.rs` / `attention.rs` by [`config::Config`];
//!    anything else gets its own file in `model/` holding its own weights
//!    and scratch, called from `step.rs` (per layer, as `mla.rs`), or, for a
//!    graph of its own, a variant of `model.rs`'s `Graph` (as Gemma 3n);
//! 3. Hugging Face ingest (`gpack-ingest`, `src/hf/config.rs`: the
//!    `architectures`/`model_type` → GGUF arch name and the `config.json` keys
//!    → GGUF metadata; `src/hf/names.rs`: HF tensor names → GGUF names, and
//!    `llama_like` for the families llama.cpp converts as `LlamaModel`, whose
//!    q/k rows are permuted; tensors the converter splits or transposes
//!    become [`gpack_ingest`] `Transform`s, as gpt-oss's interleaved
//!    experts and DeepSeek's per-head `kv_b_proj` split); `tests/common.rs`'s
//!    `ARCHES` checks both against the converter's GGUF;
//! 4. the tokenizer (`gpack-tokenizer`): its pre-tokenizer
//!    (`PreTokenizer::from_gguf_name` for GGUF's `tokenizer.ggml.pre`, the
//!    `tokenizer.json` pattern in `src/hf.rs`), and its end-of-turn markers
//!    if new (`Tokenizer::stop_ids`, the one stop rule of `run`, `serve` and
//!    the Python package); a chat format whose answers have parts (harmony:
//!    `gpack_tokenizer::harmony`, read by `run --chat` and the server);
//! 5. `gpack-convert`'s plan (`src/plan.rs`) only for new kinds of tensors
//!    (stacked experts, per-layer embeddings);
//! 6. a fixture: a tiny random model made with transformers
//!    (`testdata/scripts/21_make_tiny_models.py`, or its own script as
//!    `28_make_tiny_gemma3n.py`, `31_make_tiny_families.py`,
//!    `33_make_tiny_gpt_oss.py` and `35_make_tiny_deepseek2.py`), converted
//!    by llama.cpp's converter (`22_convert_all.sh`, `31_convert_families.sh`),
//!    with its references (`reference.json`, logits; llama.cpp's from
//!    `24_check_gguf_llamacpp.py`, `23_q8_0_reference.py` and
//!    `27_llamacpp_q8_0_multi_prompt.sh`), and the family added to
//!    `tests/fixtures.rs`'s `ARCHES` / `Q8_ARCHES`, gpack-convert's and
//!    `gpack inspect`'s fixture lists;
//! 7. README's list of families (`gpack run`'s row).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bench;
pub mod chunks;
pub mod config;
mod decodable;
pub mod decode;
pub mod device;
mod env;
mod error;
pub mod experts;
pub mod export;
pub mod generate;
pub mod gguf;
pub mod giw;
pub mod gpack;
pub mod imatrix;
pub mod integrity;
pub mod kvcache;
mod matrix;
pub mod model;
pub mod observe;
pub mod open;
pub mod ops;
pub mod ple;
pub mod quality;
pub mod sampler;
pub mod spec;
pub mod weights;

pub use config::{Activation, Arch, Config, RopeStyle};
pub use decode::{partial_stop, Slot, StopReason};
pub use device::{adapters, auto_adapter};
pub use device::{Adapter, Device, GpuInfo, GpuMemory};
pub use error::{Error, ExpertSliceProblem, ExportProblem, Result, SectionProblem};
pub use experts::{ExpertMode, ExpertStats};
pub use generate::{
    generate, generate_slot, generate_slot_from, generate_with, GenerateConfig, Generation, Sink,
};
pub use gguf::GgufWeights;
pub use gpack::{DraftWeights, GpackWeights};
pub use gpack_quant::Pool;
pub use integrity::{Integrity, VerifyMode};
pub use model::{
    default_threads, KvType, KvTypes, LoadOptions, Logits, Model, Mtp, MtpWeights, PleMode,
    PleStats, Scratch, Sequence, State, Threads, DEFAULT_PLE_CACHE, KB,
};
pub use open::{Loaded, OpenError};
pub use sampler::{argmax, Sampler, SamplerConfig};
pub use spec::{Drafter, ModelDrafter, MtpDrafter, NgramDrafter, SpecMode, SpecStats};
pub use weights::{AlignedBuf, HasMetadata, MetadataSource, TensorRef, WeightSource};
