//! External expert files: the shards a `--external-experts` .gpack refers to.
//!
//! Their names are plain file names resolved only in the .gpack's directory.
//! The quick check compares each file's size with the one recorded; the full
//! check hashes every referenced slice and compares it with its SHA-256.

use crate::payload::{ExpertLayout, EXPERT_ABSENT, EXPERT_EMBEDDED};
use crate::{Error, Gpack, SectionKind};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

impl Gpack {
    /// The parsed ExpertLayout, if the file has one.
    pub fn expert_layout(&self) -> Option<Result<ExpertLayout, Error>> {
        self.section(SectionKind::ExpertLayout)
            .map(|s| ExpertLayout::parse(s.bytes))
    }

    /// Paths of the external expert files, resolved next to this file.
    pub fn external_paths(&self, layout: &ExpertLayout) -> Vec<PathBuf> {
        let dir = self
            .path()
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        layout.files.iter().map(|f| dir.join(&f.name)).collect()
    }

    /// Checks the external expert files: sizes always; every slice's SHA-256
    /// when `full`. A file without external experts passes.
    pub fn verify_external(&self, full: bool) -> Result<(), Error> {
        let Some(layout) = self.expert_layout() else {
            return Ok(());
        };
        let layout = layout?;
        let paths = self.external_paths(&layout);
        let bad = |file: &str, problem: String| Error::ExternalExperts {
            file: file.to_string(),
            problem,
        };
        let mut maps = Vec::with_capacity(paths.len());
        for (f, p) in layout.files.iter().zip(&paths) {
            let file = std::fs::File::open(p)
                .map_err(|e| bad(&f.name, format!("cannot open {}: {e}", p.display())))?;
            let size = file
                .metadata()
                .map_err(|e| bad(&f.name, format!("cannot stat: {e}")))?
                .len();
            if size != f.size {
                return Err(bad(
                    &f.name,
                    format!(
                        "size is {size} bytes, the .gpack recorded {} (resized or replaced?)",
                        f.size
                    ),
                ));
            }
            if full {
                maps.push(
                    crate::mmap::map_file(&file)
                        .map_err(|e| bad(&f.name, format!("cannot map: {e}")))?,
                );
            }
        }
        if !full {
            return Ok(());
        }
        let failures: Vec<String> = layout
            .slices
            .par_iter()
            .enumerate()
            .filter(|(_, s)| s.file != EXPERT_EMBEDDED && s.file != EXPERT_ABSENT)
            .filter_map(|(i, s)| {
                let m = &maps[s.file as usize];
                let end = s.offset.checked_add(s.size)?;
                let ok = usize::try_from(end).ok().filter(|&e| e <= m.len()).is_some_and(|e| {
                    let got: [u8; 32] = Sha256::digest(&m[s.offset as usize..e]).into();
                    got == s.sha256
                });
                let (layer, rest) = (i / 3 / layout.n_expert as usize, i / 3 % layout.n_expert as usize);
                (!ok).then(|| {
                    format!(
                        "{}: layer {layer} expert {rest} {} slice [{}, +{}) does not match its SHA-256",
                        layout.files[s.file as usize].name,
                        ["gate", "up", "down"][i % 3],
                        s.offset,
                        s.size
                    )
                })
            })
            .collect();
        if let Some(first) = failures.first() {
            return Err(Error::ExternalExperts {
                file: first.split(':').next().unwrap_or("").to_string(),
                problem: format!(
                    "{} slice(s) failed: {}",
                    failures.len(),
                    failures.join("; ")
                ),
            });
        }
        Ok(())
    }
}
