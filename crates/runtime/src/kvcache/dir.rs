//! A cache directory (`--kv-cache-dir`): one file per full block
//! (`<key>.gkv`, [`super::file`]'s layout with one block), written
//! atomically by any number of processes, read back only after every
//! check passes, and kept under a disk budget by evicting the least
//! recently used files.
//!
//! Trust: the directory must be owned by the user running gpack and not
//! writable by group or others (else it is refused: another user could
//! plant blocks); files are created 0600; anything that is not a regular
//! file of the exact expected size is ignored. Two processes may share a
//! directory: a file appears only by rename when complete (a writer killed
//! midway leaves a temporary file, never a `.gkv`), a reader checks the
//! bytes it holds in memory, and an eviction by another process only makes
//! a later lookup miss.

use super::file::{self, BadCacheFile, BlockOut};
use super::key::{hex, BlockHash, CacheContext};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The extension of block files.
pub const EXT: &str = "gkv";

/// Why a cache directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// It could not be created or read.
    #[error("KV cache directory {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// It is not safe to read blocks from.
    #[error("KV cache directory {path} is not trusted: {why} (blocks read from it feed attention; use a directory of your own, e.g. `mkdir -m 700 DIR`)")]
    Untrusted {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// What a lookup of one block in the directory found.
#[derive(Debug)]
pub enum Found {
    /// A checked block: its payload.
    Block(Vec<u8>),
    /// No file of that key.
    Missing,
    /// A file that failed a check: ignored (and the block recomputed).
    Rejected(String),
}

/// An open cache directory.
#[derive(Debug, Clone)]
pub struct CacheDir {
    path: PathBuf,
    budget: u64,
    /// Bytes of block files, as last counted plus this process's writes.
    used: u64,
}

/// The effective user id (the owner a trusted directory must have).
fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

impl CacheDir {
    /// Opens (creating it 0700 if missing) the directory `path`, keeping
    /// its block files under `budget` bytes.
    pub fn open(path: &Path, budget: u64) -> Result<CacheDir, DirError> {
        let io = |source| DirError::Io {
            path: path.to_path_buf(),
            source,
        };
        if !path.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(io)?;
        }
        let m = std::fs::metadata(path).map_err(io)?;
        let untrusted = |why: String| DirError::Untrusted {
            path: path.to_path_buf(),
            why,
        };
        if !m.is_dir() {
            return Err(untrusted("it is not a directory".into()));
        }
        if m.uid() != euid() {
            return Err(untrusted(format!(
                "it is owned by uid {}, not by this user (uid {})",
                m.uid(),
                euid()
            )));
        }
        if m.mode() & 0o022 != 0 {
            return Err(untrusted(format!(
                "its mode {:o} lets group or others write",
                m.mode() & 0o777
            )));
        }
        let mut d = CacheDir {
            path: path.to_path_buf(),
            budget,
            used: 0,
        };
        d.used = d.list().iter().map(|f| f.bytes).sum();
        Ok(d)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file of block `key`.
    pub fn file_of(&self, key: &BlockHash) -> PathBuf {
        self.path.join(format!("{}.{EXT}", hex(key)))
    }

    /// Block `index` of key `key` under `ctx`, if a file holds it and
    /// passes every check.
    pub fn read(&self, ctx: &CacheContext, index: usize, key: &BlockHash) -> Found {
        let path = self.file_of(key);
        let want = file::file_bytes(1, ctx.block_bytes);
        let m = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Found::Missing,
            Err(e) => return Found::Rejected(format!("{}: {e}", path.display())),
        };
        if !m.file_type().is_file() {
            return Found::Rejected(format!(
                "{}: not a regular file (symlinks are ignored)",
                path.display()
            ));
        }
        if Some(m.len()) != want.map(|w| w as u64) {
            return Found::Rejected(format!(
                "{}: {} bytes, expected {}",
                path.display(),
                m.len(),
                want.unwrap_or(0)
            ));
        }
        let want = want.unwrap_or(0);
        // O_NOFOLLOW: a symlink swapped in after the check is not followed.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        let mut bytes = Vec::with_capacity(want);
        let read = f.and_then(|f| {
            (&f).take(want as u64 + 1).read_to_end(&mut bytes)?;
            Ok(f)
        });
        let f = match read {
            Ok(f) => f,
            Err(e) => return Found::Rejected(format!("{}: {e}", path.display())),
        };
        let reject = |e: BadCacheFile| Found::Rejected(format!("{}: {e}", path.display()));
        let p = match file::check(&bytes, ctx) {
            Ok(p) => p,
            Err(e) => return reject(e),
        };
        if p.header.first_block != index || p.entries[0].key != *key {
            return reject(BadCacheFile {
                offset: 28,
                problem: format!(
                    "block {} of key {}…, expected block {index}",
                    p.header.first_block,
                    &hex(&p.entries[0].key)[..12]
                ),
            });
        }
        // Used now: the last to be evicted.
        let _ = f.set_modified(SystemTime::now());
        let payload = p.payload(&bytes, 0).to_vec();
        Found::Block(payload)
    }

    /// Writes block `index` (key `key`, after `parent`) unless a file of it
    /// exists; then evicts to the budget. Returns whether it wrote.
    pub fn write(
        &mut self,
        ctx: &CacheContext,
        index: usize,
        parent: &BlockHash,
        block: BlockOut<'_>,
    ) -> std::io::Result<bool> {
        let out = self.file_of(&block.key);
        if out.exists() {
            return Ok(false);
        }
        let size = file::file_bytes(1, ctx.block_bytes).unwrap_or(0) as u64;
        if size > self.budget {
            return Ok(false);
        }
        let mut a = match gpack_format::AtomicFile::create(&out, false) {
            Ok(a) => a,
            Err(gpack_format::Error::DestinationExists { .. }) => return Ok(false),
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        };
        a.file()
            .set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let mut w = std::io::BufWriter::new(a.file());
        file::write(&mut w, ctx, index, parent, &[block])?;
        w.flush()?;
        drop(w);
        match a.commit() {
            Ok(_) => {}
            Err(gpack_format::Error::DestinationExists { .. }) => return Ok(false),
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
        self.used += size;
        if self.used > self.budget {
            self.evict();
        }
        Ok(true)
    }

    /// The block files, oldest use first.
    pub fn list(&self) -> Vec<BlockFile> {
        list(&self.path)
    }

    /// Removes the least recently used block files until the directory's
    /// (recounted, other processes' included) bytes fit the budget.
    fn evict(&mut self) {
        let files = self.list();
        let mut used: u64 = files.iter().map(|f| f.bytes).sum();
        for f in files {
            if used <= self.budget {
                break;
            }
            if std::fs::remove_file(&f.path).is_ok() {
                used -= f.bytes;
            }
        }
        self.used = used;
    }

    /// Bytes of block files (this process's count).
    pub fn used(&self) -> u64 {
        self.used
    }
}

/// A block file of a directory.
#[derive(Debug, Clone)]
pub struct BlockFile {
    /// Its path.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its last use (modification time).
    pub used: SystemTime,
}

/// The `.gkv` regular files of `dir`, least recently used first.
pub fn list(dir: &Path) -> Vec<BlockFile> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<BlockFile> = rd
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == EXT))
        .filter_map(|e| {
            let m = std::fs::symlink_metadata(e.path()).ok()?;
            m.file_type().is_file().then(|| BlockFile {
                path: e.path(),
                bytes: m.len(),
                used: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            })
        })
        .collect();
    v.sort_by_key(|f| f.used);
    v
}

/// Removes every block file of `dir` and the temporary files of writers
/// that are gone; returns (files, bytes) removed.
pub fn clear(dir: &Path) -> std::io::Result<(usize, u64)> {
    let mut n = 0;
    let mut bytes = 0;
    for f in list(dir) {
        std::fs::remove_file(&f.path)?;
        n += 1;
        bytes += f.bytes;
    }
    let removed = gpack_format::remove_stale_temps(&dir.join("x"));
    Ok((n + removed.len(), bytes))
}
