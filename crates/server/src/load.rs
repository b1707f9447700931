//! Opening a model argument: a file (through [`gpack_runtime::Loaded`],
//! re-exported here), or a registry reference pulled into the local store
//! first ([`resolve_model`]).

#[cfg(feature = "registry")]
use crate::error::{Error, Result};
#[cfg(feature = "registry")]
use std::path::{Path, PathBuf};

pub use gpack_runtime::open::Loaded;

/// The file to open for a MODEL argument: `model` itself when it exists
/// (a file or directory wins over a same-named reference), else, when it
/// parses as a registry reference (`host[:port]/repo[:tag|@digest]`), the
/// .gpack pulled into the local store (once: a reference already pulled is
/// opened from the store without asking the registry).
#[cfg(feature = "registry")]
pub fn resolve_model(
    model: &Path,
    registry: &gpack_oci::Options,
    progress: std::sync::Arc<dyn gpack_oci::Progress>,
) -> Result<PathBuf> {
    let s = model.to_string_lossy();
    if model.exists() || !gpack_oci::reference::looks_like_reference(&s) {
        return Ok(model.to_path_buf());
    }
    gpack_oci::resolve(&s, registry, progress).map_err(|e| Error::Pull {
        reference: s.to_string(),
        source: Box::new(e),
    })
}

pub(crate) use gpack_format::error_chain as chain;
