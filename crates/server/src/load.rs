//! Opening a model argument: a file, through [`gpack_runtime::Loaded`]
//! (re-exported here). Registry references are the CLI's to resolve.

pub use gpack_runtime::open::Loaded;

pub(crate) use gpack_format::error_chain as chain;
