//! Token decisions: the decoding [`Slot`] (sampler, penalties, grammar
//! masks, log-probabilities, stop tokens and strings with hold-back,
//! speculative acceptance, the stream decoder) that `gpack run`, Python
//! and the server's engine all drive, and the pieces it is made of.

mod grammar;
mod logprob;
mod penalty;
pub mod reply;
mod slot;
mod stop;
pub mod tool_scan;
pub mod tools;

pub use grammar::MAX_CONSTRAINT_BYTES;
pub use grammar::{allowed, apply_mask, Constraint, ConstraintError, Grammars, Guide};
pub use llguidance::toktrie::SimpleVob;
pub use logprob::{token_logprob, TokenLogprob, MAX_TOP_LOGPROBS};
pub use penalty::{check_penalty, Penalties};
pub use reply::{CallDelta, ReplyDelta, ReplyKind, ReplyScan};
pub use slot::{Emitted, Rows, Slot};
pub use stop::{partial_stop, StopReason};
