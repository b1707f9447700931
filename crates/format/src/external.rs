//! External expert files: the shards a `--external-experts` .gpack refers to.
//!
//! Their names are plain file names resolved only in the .gpack's directory.
//! The quick check compares each file's size with the one recorded; the full
//! check hashes every referenced slice and compares it with its SHA-256.

use crate::payload::{ExpertLayout, EXPERT_ABSENT, EXPERT_EMBEDDED};
use crate::{Error, ExternalProblem, Gpack, SectionKind};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

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
        let bad = |file: &str, problem| Error::ExternalExperts {
            file: file.to_string(),
            problem,
        };
        fn unreadable(
            op: &'static str,
            p: &Path,
        ) -> impl FnOnce(std::io::Error) -> ExternalProblem {
            let path = p.to_path_buf();
            move |source| ExternalProblem::Unreadable { op, path, source }
        }
        let mut maps = Vec::with_capacity(paths.len());
        for (f, p) in layout.files.iter().zip(&paths) {
            let file = std::fs::File::open(p)
                .map_err(unreadable("open", p))
                .map_err(|e| bad(&f.name, e))?;
            let size = file
                .metadata()
                .map_err(unreadable("stat", p))
                .map_err(|e| bad(&f.name, e))?
                .len();
            if size != f.size {
                return Err(bad(
                    &f.name,
                    ExternalProblem::Resized {
                        found: size,
                        recorded: f.size,
                    },
                ));
            }
            if full {
                maps.push(
                    crate::mmap::map_file(&file)
                        .map_err(unreadable("map", p))
                        .map_err(|e| bad(&f.name, e))?,
                );
            }
        }
        if !full {
            return Ok(());
        }
        // Slices outside their file fail like a digest mismatch (never
        // skipped: an offset + size that overflows is a failure too).
        let failed: Vec<usize> = layout
            .slices
            .par_iter()
            .enumerate()
            .filter(|(_, s)| s.file != EXPERT_EMBEDDED && s.file != EXPERT_ABSENT)
            .filter(|(_, s)| {
                let m = &maps[s.file as usize];
                let range = s
                    .offset
                    .checked_add(s.size)
                    .and_then(|end| {
                        Some(usize::try_from(s.offset).ok()?..usize::try_from(end).ok()?)
                    })
                    .filter(|r| r.end <= m.len());
                range.is_none_or(|r| <[u8; 32]>::from(Sha256::digest(&m[r])) != s.sha256)
            })
            .map(|(i, _)| i)
            .collect();
        if let Some(&first) = failed.first() {
            let s = &layout.slices[first];
            let per_layer = (layout.n_expert as usize).max(1);
            return Err(bad(
                &layout.files[s.file as usize].name,
                ExternalProblem::SliceDigest {
                    count: failed.len() as u64,
                    layer: (first / 3 / per_layer) as u64,
                    expert: (first / 3 % per_layer) as u64,
                    part: ["gate", "up", "down"][first % 3],
                    offset: s.offset,
                    size: s.size,
                },
            ));
        }
        Ok(())
    }
}
