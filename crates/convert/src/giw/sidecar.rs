//! The `<model>.<quant>.<target>.giw` sidecar of a GGUF (`--stream-weights`):
//! where it is, whether it can be used, and building it when it cannot.

use super::build::{prequant, PrequantOptions};
use super::Error;
use crate::policy::Quant;
use gpack_format::giw::{Giw, ReadOptions, Target};
use std::path::{Path, PathBuf};

/// `<model>.<quant>.<target>.giw` next to `gguf` (`model.gguf` →
/// `model.int8int8.cpu.giw`).
pub fn sidecar_for(gguf: &Path, quant: Quant, target: Target) -> PathBuf {
    let stem = gguf
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    gguf.with_file_name(format!("{stem}.{}.{}.giw", quant.name(), target.name()))
}

/// What [`ensure_sidecar`] did.
#[derive(Debug)]
pub enum SidecarStatus {
    /// It was valid and newer than the source: reused as is.
    Reused,
    /// It did not exist: built.
    Built,
    /// It existed but was invalid or stale: rebuilt. The reason is for the
    /// caller to report (a rebuild is never silent).
    Rebuilt {
        /// Why the old one was not used.
        reason: StaleSidecar,
    },
}

/// Why an existing sidecar is not used (the reason of
/// [`SidecarStatus::Rebuilt`], the error of [`check_sidecar`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StaleSidecar {
    /// It does not open as a valid bundle (corrupted, truncated, another
    /// format version).
    #[error("it is not a valid bundle")]
    Invalid(#[source] gpack_format::giw::Error),
    /// It is a bundle of another quant or target.
    #[error(
        "it holds quant {quant} for {}, not {} for {}",
        target.name(),
        want_quant.name(),
        want_target.name()
    )]
    OtherQuant {
        /// The quant it holds (its header's name, which may be one this
        /// build does not know).
        quant: String,
        /// The target it holds.
        target: Target,
        /// The quant asked for.
        want_quant: Quant,
        /// The target asked for.
        want_target: Target,
    },
    /// The source was modified after the sidecar was written.
    #[error("the source is newer than the sidecar")]
    SourceNewer,
    /// The modification time of the sidecar or the source cannot be read.
    #[error("cannot read the modification time of {}", path.display())]
    Mtime {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Checks that `giw` is a valid bundle of `quant` for `target` that is not
/// older than `source`; why it is not otherwise.
pub fn check_sidecar(
    giw: &Path,
    source: &Path,
    quant: Quant,
    target: Target,
) -> Result<(), StaleSidecar> {
    let g = Giw::open_with(giw, &ReadOptions::default()).map_err(StaleSidecar::Invalid)?;
    let h = g.header();
    if h.quant != quant.name() || h.target != target {
        return Err(StaleSidecar::OtherQuant {
            quant: h.quant.to_string(),
            target: h.target,
            want_quant: quant,
            want_target: target,
        });
    }
    let mtime = |p: &Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .map_err(|source| StaleSidecar::Mtime {
                path: p.to_path_buf(),
                source,
            })
    };
    if mtime(giw)? >= mtime(source)? {
        Ok(())
    } else {
        Err(StaleSidecar::SourceNewer)
    }
}

/// Returns the sidecar of `gguf` for `quant`/`target`, building it
/// atomically when missing and rebuilding it (with a reason the caller must
/// report) when it is invalid or older than the source. A valid, current
/// sidecar is never rebuilt.
pub fn ensure_sidecar(
    gguf: &Path,
    quant: Quant,
    target: Target,
) -> Result<(PathBuf, SidecarStatus), Error> {
    let path = sidecar_for(gguf, quant, target);
    let status = if path.exists() {
        match check_sidecar(&path, gguf, quant, target) {
            Ok(()) => return Ok((path, SidecarStatus::Reused)),
            Err(reason) => SidecarStatus::Rebuilt { reason },
        }
    } else {
        SidecarStatus::Built
    };
    let opts = PrequantOptions {
        quant,
        target,
        force: true,
        ..Default::default()
    };
    prequant(gguf, &path, &opts)?;
    Ok((path, status))
}

#[cfg(test)]
mod check_tests {
    use super::*;

    // See: issue 15 (the reason of a rebuild was a String).
    #[test]
    fn check_sidecar_says_why_a_sidecar_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("m.gguf");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-q8_0.gguf"),
            &src,
        )
        .unwrap();
        let (giw, s) = ensure_sidecar(&src, Quant::Int4, Target::Cpu).unwrap();
        assert!(matches!(s, SidecarStatus::Built), "{s:?}");
        check_sidecar(&giw, &src, Quant::Int4, Target::Cpu).unwrap();
        let e = check_sidecar(&giw, &src, Quant::Int8, Target::Cpu).unwrap_err();
        assert!(
            matches!(&e, StaleSidecar::OtherQuant { quant, target: Target::Cpu, want_quant: Quant::Int8, want_target: Target::Cpu } if quant == "int4"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "it holds quant int4 for cpu, not int8 for cpu"
        );
        let missing = dir.path().join("gone.gguf");
        let e = check_sidecar(&giw, &missing, Quant::Int4, Target::Cpu).unwrap_err();
        assert!(
            matches!(&e, StaleSidecar::Mtime { path, .. } if *path == missing),
            "{e:?}"
        );
        let later = std::fs::metadata(&giw).unwrap().modified().unwrap()
            + std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&src)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let e = check_sidecar(&giw, &src, Quant::Int4, Target::Cpu).unwrap_err();
        assert!(matches!(e, StaleSidecar::SourceNewer), "{e:?}");
        let (_, s) = ensure_sidecar(&src, Quant::Int4, Target::Cpu).unwrap();
        assert!(
            matches!(
                s,
                SidecarStatus::Rebuilt {
                    reason: StaleSidecar::SourceNewer
                }
            ),
            "{s:?}"
        );
        std::fs::write(&giw, b"GIW? no").unwrap();
        let e = check_sidecar(&giw, &src, Quant::Int4, Target::Cpu).unwrap_err();
        assert!(matches!(e, StaleSidecar::Invalid(_)), "{e:?}");
    }
}
