//! gpack-runtime: runs a model on the CPU from any weight store.
//!
//! * [`weights`]: the provider abstraction ([`WeightSource`], [`TensorRef`],
//!   [`MetadataSource`]) every store implements;
//! * [`gguf`]: the slow-path provider ([`GgufWeights`]): GGUF or Hugging Face
//!   sources transcoded into native layouts in memory at load;
//! * [`config`]: hyperparameters from GGUF-style metadata;
//! * [`model`]: the graph ([`Model`]), KV caches ([`Sequence`], [`State`]),
//!   batched prefill and decode ([`Model::forward`]) and multi-sequence
//!   steps for servers ([`Model::forward_batch`]);
//! * [`experts`]: routed experts of MoE models, resident cache or in place
//!   ([`ExpertMode`]);
//! * [`sampler`], [`generate`]: sampling and the streaming generation loop;
//! * [`spec`]: speculative decoding's draft sources ([`NgramDrafter`],
//!   [`ModelDrafter`]) and its acceptance rule;
//! * [`bench`]: prompt-processing and generation throughput.
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
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bench;
pub mod config;
mod error;
pub mod experts;
pub mod export;
pub mod generate;
pub mod gguf;
pub mod giw;
pub mod gpack;
mod matrix;
pub mod model;
pub mod ops;
pub mod ple;
pub mod sampler;
pub mod spec;
pub mod weights;

pub use config::{Activation, Arch, Config, RopeStyle};
pub use error::{Error, Result};
pub use experts::{ExpertMode, ExpertStats};
pub use generate::{generate, generate_with, partial_stop, GenerateConfig, Generation, StopReason};
pub use gguf::GgufWeights;
pub use gpack::{DraftWeights, GpackWeights};
pub use model::{
    LoadOptions, Logits, Model, PleMode, PleStats, Scratch, Sequence, State, DEFAULT_PLE_CACHE,
};
pub use sampler::{argmax, Sampler, SamplerConfig};
pub use spec::{Drafter, ModelDrafter, NgramDrafter, SpecMode, SpecStats};
pub use weights::{AlignedBuf, HasMetadata, MetadataSource, TensorRef, WeightSource};
