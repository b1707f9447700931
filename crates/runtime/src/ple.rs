//! The per-layer-embedding (PLE) table, read a row at a time from the Ple
//! section at its exact file offset, in one of two I/O modes:
//!
//! - [`PleIo::Mmap`]: rows are slices of a read-only mapping (the page cache
//!   decides what stays resident);
//! - [`PleIo::Direct`]: `O_DIRECT` reads of the 4 KiB-aligned span around a
//!   row into an aligned buffer, bypassing the page cache, with a
//!   set-associative row cache in front (`sets × ways`, LRU within a set,
//!   hit/miss counters). Where the filesystem refuses `O_DIRECT` (tmpfs, some
//!   overlay filesystems), it says so once and falls back to buffered reads.
//!
//! Rows read either way are identical: the tests check it on random rows.

use crate::error::{Error, Result, SectionProblem};
use gpack_format::{single_tensor, Gpack, SectionKind};
use gpack_quant::GgmlType;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Direct-I/O alignment (offset, length and buffer address).
const BLOCK: u64 = 4096;

/// How rows are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PleIo {
    /// Slices of a read-only mapping.
    Mmap,
    /// Unbuffered aligned reads with a `sets × ways` row cache.
    Direct {
        /// Number of sets (a row goes to set `row % sets`).
        sets: usize,
        /// Rows per set.
        ways: usize,
    },
}

/// Row-cache counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Rows served from the cache.
    pub hits: u64,
    /// Rows read from the file.
    pub misses: u64,
}

impl CacheStats {
    /// `hits / (hits + misses)`, 0 when nothing was read.
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            0.0
        } else {
            self.hits as f64 / n as f64
        }
    }
}

/// A set-associative cache of fixed-size rows, LRU within each set.
#[derive(Debug)]
pub struct RowCache {
    sets: usize,
    ways: usize,
    row_bytes: usize,
    /// `tags[set * ways + way]`: the row held, or `u64::MAX` when empty.
    tags: Vec<u64>,
    /// Last-use tick of each way (LRU: smallest is evicted).
    used: Vec<u64>,
    data: Vec<u8>,
    tick: u64,
    stats: CacheStats,
}

impl RowCache {
    /// An empty cache of `sets × ways` rows of `row_bytes` bytes.
    pub fn new(sets: usize, ways: usize, row_bytes: usize) -> RowCache {
        let (sets, ways) = (sets.max(1), ways.max(1));
        RowCache {
            sets,
            ways,
            row_bytes,
            tags: vec![u64::MAX; sets * ways],
            used: vec![0; sets * ways],
            data: vec![0; sets * ways * row_bytes],
            tick: 0,
            stats: CacheStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// The cached bytes of `row`, or `None` (a miss; call [`RowCache::insert`]).
    pub fn get(&mut self, row: u64) -> Option<&[u8]> {
        self.tick += 1;
        let set = (row % self.sets as u64) as usize;
        let base = set * self.ways;
        for w in 0..self.ways {
            if self.tags[base + w] == row {
                self.used[base + w] = self.tick;
                self.stats.hits += 1;
                let i = base + w;
                return Some(&self.data[i * self.row_bytes..(i + 1) * self.row_bytes]);
            }
        }
        self.stats.misses += 1;
        None
    }

    /// Stores `row` (evicting its set's least recently used row) and returns
    /// the slot to fill.
    pub fn insert(&mut self, row: u64) -> &mut [u8] {
        let set = (row % self.sets as u64) as usize;
        let base = set * self.ways;
        let way = (0..self.ways)
            .min_by_key(|&w| (self.tags[base + w] != u64::MAX, self.used[base + w]))
            .unwrap_or(0);
        let i = base + way;
        self.tags[i] = row;
        self.used[i] = self.tick;
        &mut self.data[i * self.row_bytes..(i + 1) * self.row_bytes]
    }
}

static FALLBACK_SAID: AtomicBool = AtomicBool::new(false);

enum Backend {
    Mmap,
    Direct {
        file: File,
        direct: bool,
        cache: RowCache,
        /// Aligned scratch for one span (over-allocated, aligned by offset).
        scratch: Vec<u8>,
    },
}

/// The PLE table of a .gpack file.
pub struct PleTable {
    g: Gpack,
    /// Absolute file offset of row 0.
    base: u64,
    /// Offset of row 0 within the Ple section.
    payload_offset: usize,
    row_bytes: usize,
    rows: u64,
    ggml_type: GgmlType,
    ne0: u64,
    io: PleIo,
    backend: Backend,
}

impl PleTable {
    /// Opens the Ple section of `path` (quick-validated) in `io` mode.
    pub fn open(path: &Path, io: PleIo) -> Result<PleTable> {
        let g = Gpack::open(path)?;
        let bad = |problem: SectionProblem| Error::Section {
            section: SectionKind::Ple,
            problem,
        };
        let s = g.section(SectionKind::Ple).ok_or_else(|| {
            bad(SectionProblem::NoPle {
                path: path.to_path_buf(),
            })
        })?;
        let (h, payload) = single_tensor(s)?;
        if h.reserved0.get() != 0 {
            return Err(bad(SectionProblem::PleNotRaw {
                layout: h.reserved0.get(),
            }));
        }
        let ggml_type = GgmlType::from_id(h.ggml_type.get()).ok_or_else(|| {
            bad(SectionProblem::UnknownType {
                tensor: "per_layer_token_embd.weight".into(),
                ty: h.ggml_type.get(),
            })
        })?;
        crate::decodable::check_decodable("per_layer_token_embd.weight", ggml_type)?;
        let (ne0, rows) = (h.ne0.get(), h.ne1.get());
        let row_bytes = ggml_type
            .bytes_for(ne0)
            .filter(|&b| b > 0 && b.checked_mul(rows) == Some(payload.len() as u64))
            .ok_or_else(|| {
                bad(SectionProblem::PleRows {
                    rows,
                    ne0,
                    ty: ggml_type,
                    bytes: payload.len() as u64,
                })
            })?;
        let row_bytes = usize::try_from(row_bytes)
            .map_err(|_| bad(SectionProblem::PleRowTooLarge { bytes: row_bytes }))?;
        let payload_offset = 64usize;
        let base = s.info.offset + 64;
        let backend = match io {
            PleIo::Mmap => Backend::Mmap,
            PleIo::Direct { sets, ways } => {
                let (file, direct) = match std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(path)
                {
                    Ok(f) => (f, true),
                    Err(e) => {
                        if !FALLBACK_SAID.swap(true, Ordering::Relaxed) {
                            log::warn!(
                                "O_DIRECT is not supported for {} ({e}); PLE rows use buffered reads",
                                path.display()
                            );
                            eprintln!(
                                "note: O_DIRECT is not supported for {} ({e}); PLE rows use buffered reads",
                                path.display()
                            );
                        }
                        let f = File::open(path).map_err(|source| {
                            bad(SectionProblem::PleOpen {
                                path: path.to_path_buf(),
                                source,
                            })
                        })?;
                        (f, false)
                    }
                };
                let span = (row_bytes as u64 + 2 * BLOCK) as usize;
                Backend::Direct {
                    file,
                    direct,
                    cache: RowCache::new(sets, ways, row_bytes),
                    scratch: vec![0u8; span + BLOCK as usize],
                }
            }
        };
        Ok(PleTable {
            g,
            base,
            payload_offset,
            row_bytes,
            rows,
            ggml_type,
            ne0,
            io,
            backend,
        })
    }

    /// Rows in the table.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes per row (ggml blocks of [`PleTable::ggml_type`]).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Element type of the rows.
    pub fn ggml_type(&self) -> GgmlType {
        self.ggml_type
    }

    /// Elements per row.
    pub fn ne0(&self) -> u64 {
        self.ne0
    }

    /// The I/O mode it was opened with.
    pub fn io(&self) -> PleIo {
        self.io
    }

    /// Whether reads really bypass the page cache (false: mmap, or the
    /// buffered fallback).
    pub fn is_direct(&self) -> bool {
        matches!(self.backend, Backend::Direct { direct: true, .. })
    }

    /// Row-cache counters (zero in mmap mode).
    pub fn stats(&self) -> CacheStats {
        match &self.backend {
            Backend::Direct { cache, .. } => cache.stats(),
            Backend::Mmap => CacheStats::default(),
        }
    }

    /// The bytes of `row`.
    pub fn row(&mut self, row: u64) -> Result<&[u8]> {
        if row >= self.rows {
            return Err(Error::Section {
                section: SectionKind::Ple,
                problem: SectionProblem::RowOutOfRange {
                    row,
                    rows: self.rows,
                },
            });
        }
        let rb = self.row_bytes;
        match &mut self.backend {
            Backend::Mmap => {
                let s = self
                    .g
                    .section(SectionKind::Ple)
                    .map(|s| s.bytes)
                    .unwrap_or(&[]);
                let start = self.payload_offset + row as usize * rb;
                Ok(&s[start..start + rb])
            }
            Backend::Direct {
                file,
                cache,
                scratch,
                ..
            } => {
                if cache.get(row).is_some() {
                    return Ok(cache.get_last(row));
                }
                let off = self.base + row * rb as u64;
                let start = off / BLOCK * BLOCK;
                let end = (off + rb as u64).div_ceil(BLOCK) * BLOCK;
                let len = (end - start) as usize;
                // Align the buffer address to 4 KiB inside the scratch.
                let shift =
                    (BLOCK as usize - scratch.as_ptr() as usize % BLOCK as usize) % BLOCK as usize;
                let buf = &mut scratch[shift..shift + len];
                let n = read_full(file, buf, start).map_err(|source| Error::Section {
                    section: SectionKind::Ple,
                    problem: SectionProblem::PleRead {
                        row,
                        offset: off,
                        source,
                    },
                })?;
                let from = (off - start) as usize;
                if n < from + rb {
                    return Err(Error::Section {
                        section: SectionKind::Ple,
                        problem: SectionProblem::PleShortRead {
                            row,
                            offset: off,
                            got: n,
                            need: from + rb,
                        },
                    });
                }
                let slot = cache.insert(row);
                slot.copy_from_slice(&buf[from..from + rb]);
                Ok(cache.get_last(row))
            }
        }
    }
}

impl RowCache {
    /// The bytes of a row known to be cached (after `get` or `insert`),
    /// without touching the counters.
    fn get_last(&self, row: u64) -> &[u8] {
        let set = (row % self.sets as u64) as usize;
        let base = set * self.ways;
        let w = (0..self.ways)
            .find(|&w| self.tags[base + w] == row)
            .unwrap_or(0);
        let i = base + w;
        &self.data[i * self.row_bytes..(i + 1) * self.row_bytes]
    }
}

/// Reads until `buf` is full or the file ends; returns bytes read.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
