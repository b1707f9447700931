//! The local store under `${GPACK_CACHE:-~/.cache/gpack}`:
//!
//! - `blobs/sha256/<hex>`: verified blobs (sections, configs, GGUFs), each
//!   renamed into place only after its digest matched, so a blob shared by
//!   two models (a tokenizer, an embedding table) is downloaded once;
//! - `blobs/partial/<hex>`: a blob being downloaded, kept when a pull is
//!   interrupted and resumed from its length by the next pull (a ranged GET);
//!   locked (`flock`) while a pull writes it;
//! - `oci/refs/<host_port>/<repo>/<tag>.json`: what `gpack pull REF` (or
//!   `run`/`serve` of a REF) stored: manifest digest, file digest, layers and
//!   the assembled model `oci/models/<digest>.gpack` that `run` opens;
//! - `oci/known/<host_port>.json`: blob digest → repositories of that
//!   registry known to hold it (pushed or pulled), the candidates of a
//!   cross-repository mount.

use crate::error::{io, ArtifactProblem, Document, Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One stored reference.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefEntry {
    /// The reference as given.
    pub reference: String,
    /// Digest of the OCI manifest.
    pub manifest_digest: String,
    /// `gpack` or `gguf` (a Docker model artifact converted on arrival).
    pub kind: String,
    /// The .gpack's digest (footer).
    pub digest: String,
    /// Model name.
    pub name: String,
    /// The .gpack: the store's copy (`oci/models/`), or the file `gpack pull
    /// -o` wrote when the pull made no store copy.
    pub model: PathBuf,
    /// Its size.
    pub size: u64,
    /// Every blob it uses (config and layers).
    pub blobs: Vec<String>,
}

/// The store rooted at a directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

fn hex_of(digest: &str) -> Option<&str> {
    let h = digest.strip_prefix("sha256:")?;
    (h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
    .then_some(h)
}

impl Store {
    /// `GPACK_CACHE`, else `~/.cache/gpack`.
    pub fn default_root() -> PathBuf {
        if let Some(c) = std::env::var_os("GPACK_CACHE") {
            return PathBuf::from(c);
        }
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
        home.join(".cache/gpack")
    }

    /// The store at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store { root: root.into() }
    }

    /// The store at [`Store::default_root`].
    pub fn open_default() -> Store {
        Store::new(Store::default_root())
    }

    /// Its root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the verified blob `digest` lives; an error for a digest that is
    /// not `sha256:` + 64 lower-case hex digits (registry input: it becomes
    /// a file name).
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        let h = hex_of(digest).ok_or_else(|| Error::BadArtifact {
            what: Document::Digest {
                digest: digest.to_string(),
            },
            problem: ArtifactProblem::BadDigest,
        })?;
        Ok(self.root.join("blobs/sha256").join(h))
    }

    /// Where blob `digest` is being downloaded.
    pub fn partial_path(&self, digest: &str) -> Result<PathBuf> {
        let p = self.blob_path(digest)?;
        let h = p.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        Ok(self.root.join("blobs/partial").join(h))
    }

    /// Where the assembled model of file digest `digest` lives.
    pub fn model_path(&self, digest: &str) -> Result<PathBuf> {
        let p = self.blob_path(digest)?;
        let h = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(self.root.join("oci/models").join(format!("{h}.gpack")))
    }

    fn ref_path(&self, r: &oci_client::Reference) -> PathBuf {
        self.root
            .join("oci/refs")
            .join(format!("{}.json", crate::reference::store_key(r)))
    }

    /// Creates `dir` and its parents.
    pub(crate) fn mkdir(dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(io("create directory", dir))
    }

    /// The entry of `r`, if it was pulled.
    pub fn get(&self, r: &oci_client::Reference) -> Result<Option<RefEntry>> {
        let p = self.ref_path(r);
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| Error::BadArtifact {
                    what: Document::StoreEntry { path: p.clone() },
                    problem: ArtifactProblem::NotStoreEntry(e),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &p)(e)),
        }
    }

    /// Records `e` for `r` (atomically).
    pub fn put(&self, r: &oci_client::Reference, e: &RefEntry) -> Result<()> {
        let p = self.ref_path(r);
        let body = serde_json::to_vec_pretty(e).map_err(|err| Error::BadArtifact {
            what: Document::NewStoreEntry,
            problem: ArtifactProblem::Serialize(err),
        })?;
        write_atomic(&p, &body)
    }

    /// Every stored reference, sorted.
    pub fn list(&self) -> Result<Vec<RefEntry>> {
        let mut out = Vec::new();
        let base = self.root.join("oci/refs");
        let mut stack = vec![base];
        while let Some(d) = stack.pop() {
            let rd = match std::fs::read_dir(&d) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io("list", &d)(e)),
            };
            for ent in rd.flatten() {
                let p = ent.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "json") {
                    let b = std::fs::read(&p).map_err(io("read", &p))?;
                    if let Ok(e) = serde_json::from_slice::<RefEntry>(&b) {
                        out.push(e);
                    }
                }
            }
        }
        out.sort_by(|a, b| a.reference.cmp(&b.reference));
        Ok(out)
    }

    /// Forgets `r`, then deletes its model and every blob no other stored
    /// reference uses. Returns the bytes freed.
    pub fn remove(&self, r: &oci_client::Reference, shown: &str) -> Result<u64> {
        let Some(entry) = self.get(r)? else {
            return Err(Error::NotInStore(shown.to_string()));
        };
        let p = self.ref_path(r);
        std::fs::remove_file(&p).map_err(io("remove", &p))?;
        let rest = self.list()?;
        let used: BTreeSet<&str> = rest
            .iter()
            .flat_map(|e| e.blobs.iter().map(|s| s.as_str()))
            .collect();
        let models: BTreeSet<&Path> = rest.iter().map(|e| e.model.as_path()).collect();
        let mut freed = 0u64;
        let mut rm = |p: &Path| -> Result<()> {
            if let Ok(m) = std::fs::metadata(p) {
                std::fs::remove_file(p).map_err(io("remove", p))?;
                freed += m.len();
            }
            Ok(())
        };
        // Only the store's own copies: a file `gpack pull -o` wrote is the user's.
        let ours = entry.model.starts_with(self.root.join("oci/models"));
        if ours && !models.contains(entry.model.as_path()) {
            rm(&entry.model)?;
        }
        for b in &entry.blobs {
            if !used.contains(b.as_str()) {
                rm(&self.blob_path(b)?)?;
            }
        }
        Ok(freed)
    }

    /// Repositories of `host` known to hold each blob.
    pub fn known(&self, host: &str) -> BTreeMap<String, BTreeSet<String>> {
        let p = self.known_path(host);
        std::fs::read(&p)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Notes that `repo` on `host` holds `digests`.
    pub fn note_known<'a>(
        &self,
        host: &str,
        repo: &str,
        digests: impl IntoIterator<Item = &'a str>,
    ) -> Result<()> {
        let mut k = self.known(host);
        for d in digests {
            k.entry(d.to_string()).or_default().insert(repo.to_string());
        }
        let body = serde_json::to_vec(&k).map_err(|err| Error::BadArtifact {
            what: Document::KnownBlobs,
            problem: ArtifactProblem::Serialize(err),
        })?;
        write_atomic(&self.known_path(host), &body)
    }

    fn known_path(&self, host: &str) -> PathBuf {
        self.root
            .join("oci/known")
            .join(format!("{}.json", host.replace([':', '/'], "_")))
    }
}

/// Writes a small file through gpack's atomic temp file.
fn write_atomic(p: &Path, body: &[u8]) -> Result<()> {
    use std::io::Write;
    if let Some(d) = p.parent() {
        Store::mkdir(d)?;
    }
    let mut f = gpack_format::AtomicFile::create(p, true)?;
    f.file().write_all(body).map_err(io("write", p))?;
    f.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_become_file_names_only_when_well_formed() {
        let s = Store::new("/s");
        let d = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(
            s.blob_path(&d).unwrap(),
            PathBuf::from(format!("/s/blobs/sha256/{}", "ab".repeat(32)))
        );
        for bad in ["sha256:../../etc/passwd", "sha512:00", "sha256:AB", ""] {
            assert!(s.blob_path(bad).is_err(), "{bad}");
        }
    }
}
