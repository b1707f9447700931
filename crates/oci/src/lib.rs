//! gpack-oci: a .gpack as an OCI artifact in any standard container
//! registry (`gpack push`, `gpack pull`), and the local blob store.
//!
//! One layer per section, whose digest is the section's own SHA-256 (so the
//! registry checks every upload, the puller checks every download while it
//! streams, and two models that share a section share its blob); a config
//! blob with the header, section table and footer that rebuild the file
//! byte for byte; annotations naming the model. The normative layout is
//! docs/OCI.md. The API is blocking; each [`Registry`] drives a small tokio
//! runtime of its own.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod artifact;
pub mod auth;
pub mod docker;
mod error;
pub mod image;
mod media;
pub mod modelpack;
pub mod progress;
pub mod pull;
pub mod push;
mod ranged;
pub mod reference;
mod registry;
pub mod store;

pub use error::{
    ArtifactProblem, Credentials, DockerConfigProblem, Document, Error, HelperProblem, Operation,
    ReferenceProblem, Result,
};
pub use oci_client::{Reference, RegistryOperation};
pub use progress::{Progress, Quiet};
pub use pull::{pull, ConvertError, ConvertGguf, PullOptions, PullReport};
pub use push::{push, PushOptions, PushReport, PushedImage, PushedPlatform};
pub use registry::{Options, Registry};
pub use store::{RefEntry, Store};

/// Pulls `reference` into the default store unless it is there already, and
/// returns the stored .gpack to open: what `gpack run REF` and `gpack serve
/// REF` do. Credentials and `--insecure` come from `opts`; a Docker GGUF
/// artifact is converted by `convert`.
pub fn resolve(
    reference: &str,
    opts: &Options,
    convert: Option<ConvertGguf>,
    progress: std::sync::Arc<dyn Progress>,
) -> Result<std::path::PathBuf> {
    let r = reference::parse(reference)?;
    let store = Store::open_default();
    if let Some(e) = store.get(&r)? {
        // Only the store's own copy (a `pull -o` file may have changed since).
        if e.model.starts_with(store.root().join("oci/models")) && e.model.is_file() {
            return Ok(e.model);
        }
    }
    let reg = Registry::connect(&r, opts, RegistryOperation::Pull)?;
    let pull_opts = PullOptions {
        convert,
        ..PullOptions::default()
    };
    let rep = pull(&reg, &store, &r, &pull_opts, progress)?;
    Ok(rep.output)
}
