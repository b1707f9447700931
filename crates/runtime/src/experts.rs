//! Routed experts at run time: where each expert's matrices are, and how the
//! kernels get to them.
//!
//! A provider hands out one [`ExpertSlice`] per (layer, expert, part): a
//! native tensor (a `.gpack`'s ExpertBlobs slice, or one expert's row range
//! of a stacked tensor transcoded at load) or raw ggml rows (a
//! `--external-experts` `.gpack`'s shard files, mapped). The
//! [`ExpertStore`] then serves them in one of two [`ExpertMode`]s:
//!
//! * **Resident**: an expert's three slices are read into an in-memory cache
//!   the first time a token is routed to it (raw ggml rows are transcoded to
//!   their native layout on the way), within a byte budget, least recently
//!   used expert evicted first. Later tokens read the cache.
//! * **Mmap** (`--expert-mmap`, `GPACK_EXPERT_MMAP=1`): the kernels read the
//!   mapped slices in place, nothing is copied; raw ggml rows stream through
//!   a small per-call scratch (`Matrix::Dense`).
//!
//! Both modes give bit-identical logits: native slices are the same bytes,
//! and raw rows run through the same transcoder and kernels either way
//! (`tests/moe.rs` checks every combination).
//!
//! Only the experts a token is routed to are touched; [`ExpertStats`] counts
//! the expert bytes the kernels read (per routed expert per forward step) and
//! the bytes copied into the cache, so a run can show it.
//!
//! External slices carry their SHA-256 from the ExpertLayout: each is hashed
//! once, the first time it is used (either mode), and a mismatch fails the
//! forward step with an error naming the file, the slice and its offset — a
//! corrupted shard is never computed with.

use crate::error::{Error, ExpertSliceProblem, Result};
use crate::matrix::Matrix;
use crate::weights::{AlignedBuf, WeightSource};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::weights::expert_slice::{
    stacked_name, stacked_slice, ExpertSlice, SliceData, PARTS,
};

/// How expert weights are read at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertMode {
    /// Copied into a cache of at most `cache_bytes` on first use, LRU.
    Resident {
        /// The cache's byte budget.
        cache_bytes: usize,
    },
    /// Read in place from the mapping.
    Mmap,
    /// Chosen at load: [`ExpertMode::Mmap`] when every slice is native (a
    /// `.gpack` with its experts embedded, a GGUF's stacked tensors: the
    /// kernels read them where they are), else resident with
    /// [`ExpertMode::DEFAULT_CACHE_BYTES`] (raw ggml rows are transcoded once
    /// into the cache instead of on every use). Where the experts exceed the
    /// default budget, mapping them decodes several times faster than a
    /// resident cache that keeps missing (a gpt-oss-20b shape; figures:
    /// docs/perf-history/model-families.md).
    Auto,
}

impl ExpertMode {
    /// The resident cache budget when none is given: 4 GiB.
    pub const DEFAULT_CACHE_BYTES: usize = 4 << 30;

    /// `"mmap"` or `"resident"`.
    pub fn name(&self) -> &'static str {
        match self {
            ExpertMode::Mmap => "mmap",
            ExpertMode::Resident { .. } => "resident",
            ExpertMode::Auto => "auto",
        }
    }
}

/// Parses a byte size: a number with an optional `K`, `M`, `G` or `T` suffix
/// (powers of 1024; `KiB`, `MB`, … accepted the same way).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mult = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1u64,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return None,
    };
    let bytes = v * mult as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < usize::MAX as f64).then_some(bytes as usize)
}

/// Counters of the expert store (cumulative since load).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpertStats {
    /// Expert uses served from the resident cache.
    pub hits: u64,
    /// Expert uses that had to read the expert (resident: copy it into the
    /// cache; mmap: every use reads the mapping, counted here).
    pub misses: u64,
    /// Experts evicted from the cache.
    pub evictions: u64,
    /// Bytes copied from the file into the cache.
    pub bytes_loaded: u64,
    /// Expert weight bytes the kernels read (each routed expert once per
    /// forward step, whatever the number of its tokens in that step).
    pub bytes_read: u64,
    /// Token rows that went through the MoE layers' routers (a 5-token
    /// prompt through 2 MoE layers counts 5).
    pub tokens: u64,
    /// Bytes currently held by the cache.
    pub resident_bytes: u64,
    /// Experts currently held by the cache.
    pub resident_experts: u64,
}

impl ExpertStats {
    /// Cache hit rate in `[0, 1]` (0 with no use).
    pub fn hit_rate(&self) -> f64 {
        crate::ple::CacheStats {
            hits: self.hits,
            misses: self.misses,
        }
        .hit_rate()
    }
    /// Expert bytes read per token.
    pub fn bytes_per_token(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.bytes_read as f64 / self.tokens as f64
        }
    }
}

/// One expert's three matrices ready for the kernels.
#[derive(Debug)]
pub(crate) struct ExpertMats<'a> {
    /// gate, up, down.
    pub mats: [Matrix<'a>; 3],
}

/// An expert borrowed for one forward step.
pub(crate) enum ExpertRef<'s, 'a> {
    /// In place in the mapping.
    Mapped(&'s ExpertMats<'a>),
    /// A cached copy (kept alive while in use even if evicted meanwhile).
    Cached(Arc<ExpertMats<'static>>),
}

impl<'a> ExpertRef<'_, 'a> {
    pub fn mats(&self) -> &[Matrix<'_>; 3] {
        match self {
            ExpertRef::Mapped(m) => &m.mats,
            ExpertRef::Cached(m) => &m.mats,
        }
    }
}

/// An expert's matrices for a device upload ([`ExpertStore::for_device`]).
pub(crate) enum DeviceExpert<'s, 'a> {
    /// Native tensors in place in the mapping.
    Mapped(&'s ExpertMats<'a>),
    /// Transcoded from raw ggml slices.
    Owned(Box<ExpertMats<'static>>),
}

struct Cached {
    mats: Arc<ExpertMats<'static>>,
    bytes: usize,
    tick: u64,
}

#[derive(Default)]
struct Cache {
    map: HashMap<usize, Cached>,
    /// tick → key, oldest first.
    lru: BTreeMap<u64, usize>,
    used: usize,
    tick: u64,
}

/// The experts of every MoE layer, served in one [`ExpertMode`].
pub(crate) struct ExpertStore<'a> {
    /// The provider (to release mapped pages after a resident copy).
    src: &'a dyn WeightSource,
    n_expert: usize,
    /// The first MoE layer (the ones before are dense).
    first_layer: usize,
    mode: ExpertMode,
    /// `[layer][expert][part]` slices of the MoE layers, flattened
    /// (`((l - first_layer) · n_expert + e) · 3 + p`).
    slices: Vec<ExpertSlice<'a>>,
    /// Per expert: its three slices as matrices (mmap mode).
    mapped: Vec<ExpertMats<'a>>,
    /// Per slice: its SHA-256 was checked.
    verified: Vec<AtomicBool>,
    /// Bytes of each expert's three slices.
    expert_bytes: Vec<usize>,
    cache: Mutex<Cache>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    bytes_loaded: AtomicU64,
    bytes_read: AtomicU64,
    tokens: AtomicU64,
}

impl std::fmt::Debug for ExpertStore<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpertStore")
            .field("n_expert", &self.n_expert)
            .field("mode", &self.mode)
            .field("stats", &self.stats())
            .finish()
    }
}

fn matrix_of<'a>(d: &SliceData<'a>) -> Result<Matrix<'a>> {
    Ok(match *d {
        SliceData::Native(view) => Matrix::Native {
            view,
            row_start: 0,
            rows: view.rows(),
        },
        SliceData::Raw {
            ty,
            rows,
            cols,
            bytes,
        } => Matrix::Dense {
            ty,
            rows,
            cols,
            row_bytes: bytes.len() / rows.max(1),
            bytes,
        },
    })
}

impl<'a> ExpertStore<'a> {
    /// `slices` in ExpertLayout order for the MoE layers (from
    /// `first_layer`, the layers before it dense) of `n_expert` experts;
    /// shapes are checked by the caller.
    pub fn new(
        src: &'a dyn WeightSource,
        n_expert: usize,
        first_layer: usize,
        slices: Vec<ExpertSlice<'a>>,
        mode: ExpertMode,
    ) -> Result<Self> {
        for (i, s) in slices.iter().enumerate() {
            let name = || format!("{} expert slice at {}", PARTS[i % 3], s.origin);
            match s.data {
                SliceData::Native(v) => crate::decodable::check_view_decodable(&name(), &v)?,
                SliceData::Raw { ty, .. } => crate::decodable::check_decodable(&name(), ty)?,
            }
        }
        let mapped = slices
            .chunks_exact(3)
            .map(|c| {
                Ok(ExpertMats {
                    mats: [
                        matrix_of(&c[0].data)?,
                        matrix_of(&c[1].data)?,
                        matrix_of(&c[2].data)?,
                    ],
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let expert_bytes = slices
            .chunks_exact(3)
            .map(|c| c.iter().map(|s| s.data.byte_len()).sum())
            .collect();
        let mode = match mode {
            ExpertMode::Auto
                if slices
                    .iter()
                    .all(|s| matches!(s.data, SliceData::Native(_))) =>
            {
                ExpertMode::Mmap
            }
            ExpertMode::Auto => ExpertMode::Resident {
                cache_bytes: ExpertMode::DEFAULT_CACHE_BYTES,
            },
            m => m,
        };
        Ok(ExpertStore {
            src,
            n_expert,
            first_layer,
            mode,
            verified: slices.iter().map(|_| AtomicBool::new(false)).collect(),
            slices,
            mapped,
            expert_bytes,
            cache: Mutex::new(Cache::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            bytes_loaded: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
        })
    }

    /// The mode (never [`ExpertMode::Auto`]: resolved at load).
    pub fn mode(&self) -> ExpertMode {
        self.mode
    }

    /// Total bytes of all experts.
    pub fn total_bytes(&self) -> u64 {
        self.expert_bytes.iter().map(|&b| b as u64).sum()
    }

    /// Counts `n` token rows routed through a MoE layer set.
    pub fn count_tokens(&self, n: usize) {
        self.tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Checks the SHA-256 of expert `key`'s slices not yet checked.
    fn verify(&self, key: usize) -> Result<()> {
        for (p, part) in PARTS.iter().enumerate() {
            let i = key * 3 + p;
            let s = &self.slices[i];
            let Some(want) = s.sha256 else { continue };
            if self.verified[i].load(Ordering::Acquire) {
                continue;
            }
            let SliceData::Raw { bytes, .. } = s.data else {
                continue;
            };
            let got: [u8; 32] = Sha256::digest(bytes).into();
            if got != want {
                let (l, e) = (self.first_layer + key / self.n_expert, key % self.n_expert);
                return Err(Error::ExpertSlice {
                    layer: l,
                    expert: e,
                    part,
                    origin: s.origin.clone(),
                    problem: ExpertSliceProblem::Digest,
                });
            }
            self.verified[i].store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Expert `e` of layer `l`, for one forward step (counts one read of
    /// its bytes).
    pub fn get(&self, l: usize, e: usize) -> Result<ExpertRef<'_, 'a>> {
        let key = (l - self.first_layer) * self.n_expert + e;
        self.bytes_read
            .fetch_add(self.expert_bytes[key] as u64, Ordering::Relaxed);
        let budget = match self.mode {
            ExpertMode::Mmap => {
                self.verify(key)?;
                self.misses.fetch_add(1, Ordering::Relaxed);
                return Ok(ExpertRef::Mapped(&self.mapped[key]));
            }
            ExpertMode::Resident { cache_bytes } => cache_bytes,
            // Resolved in `new`; the default budget if it ever were not.
            ExpertMode::Auto => ExpertMode::DEFAULT_CACHE_BYTES,
        };
        {
            let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            c.tick += 1;
            let tick = c.tick;
            if let Some(old) = c
                .map
                .get_mut(&key)
                .map(|h| std::mem::replace(&mut h.tick, tick))
            {
                c.lru.remove(&old);
                c.lru.insert(tick, key);
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(ExpertRef::Cached(c.map[&key].mats.clone()));
            }
        }
        // A miss: read (and check) the slices outside the lock.
        self.verify(key)?;
        self.misses.fetch_add(1, Ordering::Relaxed);
        let mats = Arc::new(self.load(key)?);
        let bytes = self.expert_bytes[key];
        self.bytes_loaded.fetch_add(bytes as u64, Ordering::Relaxed);
        if bytes <= budget {
            let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            while c.used + bytes > budget {
                let Some((_, victim)) = c.lru.pop_first() else {
                    break;
                };
                if let Some(v) = c.map.remove(&victim) {
                    c.used -= v.bytes;
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
            }
            c.tick += 1;
            let tick = c.tick;
            if let Some(prev) = c.map.insert(
                key,
                Cached {
                    mats: mats.clone(),
                    bytes,
                    tick,
                },
            ) {
                // Another thread loaded it meanwhile: keep one.
                c.lru.remove(&prev.tick);
                c.used -= prev.bytes;
            }
            c.lru.insert(tick, key);
            c.used += bytes;
        }
        Ok(ExpertRef::Cached(mats))
    }

    /// Expert `e` of layer `l`'s matrices for an upload to a device (the
    /// GPU keeps every expert resident): the native tensors where they lie
    /// in the mapping, or, for raw ggml slices (a .gguf's experts), owned
    /// native tensors transcoded now. Digests are checked as [`Self::get`]
    /// checks them; the counters are not touched (no token was routed).
    pub fn for_device(&self, l: usize, e: usize) -> Result<DeviceExpert<'_, 'a>> {
        let key = (l - self.first_layer) * self.n_expert + e;
        self.verify(key)?;
        let mapped = &self.mapped[key];
        if mapped
            .mats
            .iter()
            .all(|m| matches!(m, Matrix::Native { .. }))
        {
            return Ok(DeviceExpert::Mapped(mapped));
        }
        Ok(DeviceExpert::Owned(Box::new(self.load(key)?)))
    }

    /// Copies (native) or transcodes (raw) expert `key`'s slices into owned,
    /// aligned native tensors.
    fn load(&self, key: usize) -> Result<ExpertMats<'static>> {
        let one = |p: usize| -> Result<Matrix<'static>> {
            let s = &self.slices[key * 3 + p];
            let name = || format!("{} expert slice at {}", PARTS[p], s.origin);
            let (rows, cols) = s.data.shape();
            let buf = match s.data {
                SliceData::Native(v) => {
                    let q = |source| Error::Quant {
                        name: name(),
                        source,
                    };
                    let len = gpack_quant::NativeTensorHeader::new(
                        v.layout(),
                        rows as u64,
                        cols as u64,
                        v.has_f16_scales(),
                    )
                    .map_err(q)?
                    .1;
                    let mut buf = AlignedBuf::zeroed(len as usize);
                    gpack_quant::write_native(&v, &mut buf).map_err(q)?;
                    buf
                }
                SliceData::Raw { ty, bytes, .. } => {
                    crate::gguf::transcode_to_buf(&name(), ty, bytes, rows as u64, cols as u64)?
                }
            };
            Ok(Matrix::Owned {
                buf: Arc::new(buf),
                rows,
                cols,
            })
        };
        let mats = ExpertMats {
            mats: [one(0)?, one(1)?, one(2)?],
        };
        // The copy is the expert's home now: drop the mapped pages, so the
        // process holds the cache, not the cache plus the file.
        for p in 0..3 {
            self.src.release(self.slices[key * 3 + p].mapped);
        }
        Ok(mats)
    }

    /// The counters.
    pub fn stats(&self) -> ExpertStats {
        let c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        ExpertStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            bytes_loaded: self.bytes_loaded.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            tokens: self.tokens.load(Ordering::Relaxed),
            resident_bytes: c.used as u64,
            resident_experts: c.map.len() as u64,
        }
    }
}
