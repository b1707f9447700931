//! gpack-api: OpenAI's wire format as gpack speaks it, with no HTTP stack
//! (the server adds one; the Python package uses these types directly):
//!
//! * [`api`]: request bodies, their validation into decoding settings, and
//!   OpenAI's error shape;
//! * [`tools`]: `tools`/`tool_choice`, the call grammar and the replies'
//!   tool calls; [`tool_scan`] finds calls in streamed text;
//! * [`logprobs`]: the decoding slot's log-probabilities in the chat and
//!   completions shapes.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod api;
pub mod logprobs;
pub use gpack_runtime::decode::tool_scan;
pub mod tools;
