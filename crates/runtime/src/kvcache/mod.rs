//! The prefix cache: KV blocks of [`KB`] positions keyed by a hash chain
//! over the tokens from the first position ([`key`]), shared by every
//! sequence of a process in memory under a budget ([`pool`]), and, with a
//! cache directory, kept on disk as verified files that survive restarts
//! and serve other processes ([`dir`], [`file`]).
//!
//! A hit is copied into the sequence's own contiguous cache
//! ([`Sequence::import_block`]): attention keeps reading one run per head,
//! and a block's copy costs a memcpy of its bytes, a few hundred times
//! less than computing its 64 positions (bench/kvcache.sh measures both).

pub mod dir;
pub mod file;
pub mod key;
pub mod pool;

pub use key::{BlockHash, CacheContext, ModelIdentity};

use crate::model::{Model, Sequence, KB};
use pool::{Block, Pool};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

/// Counters of a prefix cache (read by `/metrics`).
#[derive(Debug, Default)]
pub struct Stats {
    /// Prompt tokens looked up.
    pub queries: AtomicU64,
    /// Prompt tokens whose keys and values were reused (in a slot or from
    /// the cache).
    pub hits: AtomicU64,
    /// Blocks copied in from memory.
    pub memory_blocks: AtomicU64,
    /// Blocks read from the cache directory.
    pub disk_blocks: AtomicU64,
    /// Block files refused (foreign, truncated, corrupt, not regular).
    pub disk_rejected: AtomicU64,
    /// Block files written.
    pub disk_writes: AtomicU64,
    /// Block writes that failed (a full disk) or were dropped (the writer
    /// was behind): serving goes on without them.
    pub disk_write_failures: AtomicU64,
    /// Bytes of blocks in memory.
    pub memory_bytes: AtomicU64,
    /// The memory budget.
    pub memory_budget: AtomicU64,
    /// Nanoseconds spent finding, checking and copying blocks into
    /// sequences (disk reads and their SHA-256 included).
    pub restore_nanos: AtomicU64,
}

/// Why a prefix cache cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum KvCacheError {
    /// The model's KV cache is not on the host.
    #[error("the prefix cache needs the KV cache on the host: {0}")]
    Unsupported(String),
    /// A cache directory needs a model file with a digest.
    #[error("--kv-cache-dir needs a .gpack model (its footer digest names the weights the cached blocks belong to); {0} has none: convert it with `gpack convert`")]
    NoDigest(String),
    /// The directory is not usable.
    #[error(transparent)]
    Dir(#[from] dir::DirError),
}

/// Where a prefix cache keeps blocks.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// Bytes of blocks kept in memory (0: none).
    pub memory_bytes: usize,
    /// A cache directory and its disk budget.
    pub dir: Option<(PathBuf, u64)>,
}

/// The default memory budget (`--kv-cache-bytes`).
pub const DEFAULT_MEMORY_BYTES: usize = 1 << 30;
/// The default disk budget of a cache directory (`--kv-cache-disk-bytes`).
pub const DEFAULT_DISK_BYTES: u64 = 10 << 30;

struct Write {
    index: usize,
    parent: BlockHash,
    key: BlockHash,
    tokens: Vec<u32>,
    payload: Block,
}

/// A process's prefix cache for one model.
pub struct PrefixCache {
    ctx: CacheContext,
    root: BlockHash,
    pool: Pool,
    /// Reads of the directory (writes go to the writer thread).
    dir: Option<dir::CacheDir>,
    writer: Option<(mpsc::SyncSender<Write>, std::thread::JoinHandle<()>)>,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("blocks", &self.pool.len())
            .field("dir", &self.dir.as_ref().map(|d| d.path()))
            .finish()
    }
}

/// Blocks queued for the writer thread before new ones are dropped.
const WRITE_QUEUE: usize = 256;

impl PrefixCache {
    /// A prefix cache for `model` (named `name` in errors), whose file
    /// identity is `identity` (`None`: a source without a digest, which
    /// can keep blocks in memory only).
    pub fn new(
        model: &Model<'_>,
        identity: Option<ModelIdentity>,
        name: &str,
        opts: &CacheOptions,
    ) -> Result<PrefixCache, KvCacheError> {
        model
            .prefix_cache_support()
            .map_err(KvCacheError::Unsupported)?;
        if opts.dir.is_some() && identity.is_none() {
            return Err(KvCacheError::NoDigest(name.to_string()));
        }
        let ctx = CacheContext::of(model, identity.unwrap_or(ModelIdentity::UNNAMED));
        let stats = Arc::new(Stats::default());
        stats
            .memory_budget
            .store(opts.memory_bytes as u64, Ordering::Relaxed);
        let (dir, writer) = match &opts.dir {
            None => (None, None),
            Some((path, budget)) => {
                let reader = dir::CacheDir::open(path, *budget)?;
                let mut w = reader.clone();
                let (tx, rx) = mpsc::sync_channel::<Write>(WRITE_QUEUE);
                let (wctx, wstats) = (ctx.clone(), stats.clone());
                let thread = std::thread::Builder::new()
                    .name("gpack-kv-writer".into())
                    .spawn(move || {
                        for job in rx {
                            let block = file::BlockOut {
                                key: job.key,
                                tokens: &job.tokens,
                                payload: &job.payload,
                            };
                            match w.write(&wctx, job.index, &job.parent, block) {
                                Ok(true) => {
                                    wstats.disk_writes.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(false) => {}
                                Err(e) => {
                                    if wstats.disk_write_failures.fetch_add(1, Ordering::Relaxed)
                                        == 0
                                    {
                                        log::warn!(
                                            "KV cache directory {}: a block was not written ({e}); serving goes on without it",
                                            w.path().display()
                                        );
                                    }
                                }
                            }
                        }
                    })
                    .map_err(|source| dir::DirError::Io {
                        path: path.clone(),
                        source,
                    })?;
                (Some(reader), Some((tx, thread)))
            }
        };
        Ok(PrefixCache {
            root: ctx.digest(),
            ctx,
            pool: Pool::new(opts.memory_bytes),
            dir,
            writer,
            stats,
        })
    }

    /// The counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// The context blocks are keyed under.
    pub fn context(&self) -> &CacheContext {
        &self.ctx
    }

    /// Brings `seq`, which holds `prompt[..have]`, as far into `prompt` as
    /// cached blocks go, all but the prompt's last token at most (its
    /// logits are needed); returns the positions it now holds. Counts the
    /// prompt's tokens and those reused in [`Stats`].
    pub fn restore(
        &mut self,
        model: &Model<'_>,
        seq: &mut Sequence,
        prompt: &[u32],
        have: usize,
    ) -> usize {
        let t0 = std::time::Instant::now();
        let limit = prompt.len().saturating_sub(1).min(seq.n_ctx());
        let keys = key::chain(&self.root, &prompt[..limit / KB * KB]);
        let b0 = have.min(seq.pos()) / KB;
        let mut got: Vec<Block> = Vec::new();
        for (b, k) in keys.iter().enumerate().skip(b0) {
            if let Some(block) = self.pool.get(k) {
                self.stats.memory_blocks.fetch_add(1, Ordering::Relaxed);
                got.push(block);
                continue;
            }
            let Some(d) = &self.dir else { break };
            match d.read(&self.ctx, b, k) {
                dir::Found::Block(p) => {
                    self.stats.disk_blocks.fetch_add(1, Ordering::Relaxed);
                    let block: Block = p.into();
                    self.pool.insert(*k, block.clone());
                    got.push(block);
                }
                dir::Found::Missing => break,
                dir::Found::Rejected(why) => {
                    self.stats.disk_rejected.fetch_add(1, Ordering::Relaxed);
                    log::warn!("KV cache block ignored (it is recomputed): {why}");
                    break;
                }
            }
        }
        let mut now = have;
        if (b0 + got.len()) * KB > have {
            seq.truncate(b0 * KB);
            for (i, block) in got.iter().enumerate() {
                seq.import_block(&model.config, b0 + i, block);
            }
            now = seq.pos();
        }
        self.stats
            .queries
            .fetch_add(prompt.len() as u64, Ordering::Relaxed);
        self.stats.hits.fetch_add(now as u64, Ordering::Relaxed);
        self.stats
            .restore_nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.sync_memory();
        now
    }

    /// Keeps the full blocks of `tokens` (what `seq` holds: `tokens.len()
    /// == seq.pos()`) from block `from` on, in memory and, with a
    /// directory, on disk (by the writer thread). Returns the blocks now
    /// published (the next call's `from`).
    pub fn publish(
        &mut self,
        model: &Model<'_>,
        seq: &Sequence,
        tokens: &[u32],
        from: usize,
    ) -> usize {
        let n = tokens.len().min(seq.pos()) / KB;
        if n <= from {
            return n;
        }
        let keys = key::chain(&self.root, &tokens[..n * KB]);
        // A pool too small for one block keeps none (`run`'s is 0 bytes).
        let pooled = self.ctx.block_bytes <= self.pool.budget();
        for b in from..n {
            let k = keys[b];
            let to_memory = pooled && !self.pool.contains(&k);
            let to_disk =
                self.writer.is_some() && self.dir.as_ref().is_some_and(|d| !d.file_of(&k).exists());
            if !to_memory && !to_disk {
                continue;
            }
            let block: Block = match self.pool.get(&k) {
                Some(b) => b,
                None => {
                    let b: Block = seq.export_block(&model.config, b).into();
                    self.pool.insert(k, b.clone());
                    b
                }
            };
            if let (true, Some((tx, _))) = (to_disk, &self.writer) {
                let job = Write {
                    index: b,
                    parent: if b == 0 { self.root } else { keys[b - 1] },
                    key: k,
                    tokens: tokens[b * KB..(b + 1) * KB].to_vec(),
                    payload: block,
                };
                if tx.try_send(job).is_err() {
                    self.stats
                        .disk_write_failures
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.sync_memory();
        n
    }

    /// `gpack run --prompt-cache FILE`: brings `seq` (empty) as far into
    /// `prompt` as the blocks of the cache file at `path` go (all but the
    /// prompt's last token at most); returns the positions restored. A
    /// missing file restores nothing; a file of another model or settings,
    /// or a damaged one, is an error naming it (the caller recomputes).
    pub fn restore_file(
        &mut self,
        model: &Model<'_>,
        seq: &mut Sequence,
        prompt: &[u32],
        path: &Path,
    ) -> Result<usize, String> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let p = file::check(&bytes, &self.ctx).map_err(|e| format!("{}: {e}", path.display()))?;
        if p.header.first_block != 0 {
            return Err(format!(
                "{}: starts at block {}, not at the first position",
                path.display(),
                p.header.first_block
            ));
        }
        let limit = prompt.len().saturating_sub(1).min(seq.n_ctx());
        seq.truncate(0);
        for (i, e) in p.entries.iter().enumerate() {
            let end = (i + 1) * KB;
            if end > limit || prompt[i * KB..end] != e.tokens[..] {
                break;
            }
            seq.import_block(&model.config, i, p.payload(&bytes, i));
        }
        let n = seq.pos();
        self.stats
            .queries
            .fetch_add(prompt.len() as u64, Ordering::Relaxed);
        self.stats.hits.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Writes the full blocks of `tokens` (what `seq` holds) to the cache
    /// file at `path`, atomically (replacing it). Nothing is written when
    /// there is no full block.
    pub fn save_file(
        &self,
        model: &Model<'_>,
        seq: &Sequence,
        tokens: &[u32],
        path: &Path,
    ) -> std::io::Result<usize> {
        let n = tokens.len().min(seq.pos()) / KB;
        if n == 0 {
            return Ok(0);
        }
        let keys = key::chain(&self.root, &tokens[..n * KB]);
        let payloads: Vec<Vec<u8>> = (0..n).map(|b| seq.export_block(&model.config, b)).collect();
        let blocks: Vec<file::BlockOut<'_>> = (0..n)
            .map(|b| file::BlockOut {
                key: keys[b],
                tokens: &tokens[b * KB..(b + 1) * KB],
                payload: &payloads[b],
            })
            .collect();
        let other = |e: gpack_format::Error| std::io::Error::other(e.to_string());
        let mut a = gpack_format::AtomicFile::create(path, true).map_err(other)?;
        {
            use std::os::unix::fs::PermissionsExt;
            a.file()
                .set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        let mut w = std::io::BufWriter::new(a.file());
        file::write(&mut w, &self.ctx, 0, &self.root, &blocks)?;
        std::io::Write::flush(&mut w)?;
        drop(w);
        a.commit().map_err(other)?;
        Ok(n)
    }

    /// Waits for the queued block files to be written.
    pub fn flush(&mut self) {
        if let Some((tx, thread)) = self.writer.take() {
            drop(tx);
            let _ = thread.join();
        }
    }

    fn sync_memory(&self) {
        self.stats
            .memory_bytes
            .store(self.pool.used() as u64, Ordering::Relaxed);
    }

    /// The cache directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }
}

impl Drop for PrefixCache {
    fn drop(&mut self) {
        self.flush();
    }
}
