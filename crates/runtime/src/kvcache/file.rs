//! The KV cache file: one or more consecutive blocks of a sequence's keys
//! and values with everything needed to prove where they came from. A
//! block of a cache directory is a file of one block; `gpack run
//! --prompt-cache` keeps a prompt's blocks in one file. Layout
//! (docs/FORMAT.md, "KV cache files"), little-endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic `GPACKKV\0` |
//! | 8 | 4 | version (1) |
//! | 12 | 4 | positions per block (64) |
//! | 16 | 8 | bytes of one block's payload |
//! | 24 | 4 | blocks in the file, `n` (1 ..= 2^20) |
//! | 28 | 4 | index of the first block (its first position / 64) |
//! | 32 | 32 | context digest ([`CacheContext::digest`]) |
//! | 64 | 32 | the model's footer digest |
//! | 96 | 32 | the tokenizer section's SHA-256 |
//! | 128 | 32 | the key before the first block (the context digest at position 0) |
//! | 160 | 8 | K type name (`f16`, `q8_0`, …), zero-padded |
//! | 168 | 8 | V type name |
//! | 176 | 32 | kernel path (`avx512vnni`, …), zero-padded |
//! | 208 | 48 | zero |
//! | 256 | 320 · n | per block: key (32), payload SHA-256 (32), 64 token ids (u32) |
//! | next 4096 multiple | payload · n | the blocks' payloads, back to back |
//!
//! The file is exactly that long: a truncated or extended one is refused.

use super::key::{next_hash, BlockHash, CacheContext};
use crate::model::KB;
use sha2::{Digest, Sha256};
use std::io::Write;

/// The file's magic bytes.
pub const MAGIC: &[u8; 8] = b"GPACKKV\0";
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
const FIXED: usize = 256;
const ENTRY: usize = 64 + KB * 4;
const ALIGN: usize = 4096;
/// Most blocks one file may hold (2^20 blocks: 64 Mi positions).
pub const MAX_BLOCKS: usize = 1 << 20;

/// What is wrong with a cache file, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {offset}: {problem}")]
pub struct BadCacheFile {
    /// Offset of the field at fault.
    pub offset: u64,
    /// What was found, and what was expected.
    pub problem: String,
}

fn bad<T>(offset: usize, problem: impl Into<String>) -> Result<T, BadCacheFile> {
    Err(BadCacheFile {
        offset: offset as u64,
        problem: problem.into(),
    })
}

/// The fixed header, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Bytes of one block's payload.
    pub block_bytes: u64,
    /// Blocks in the file.
    pub n_blocks: usize,
    /// Index of the first block.
    pub first_block: usize,
    /// Context digest.
    pub context: [u8; 32],
    /// Model footer digest.
    pub model: [u8; 32],
    /// Tokenizer digest.
    pub tokenizer: [u8; 32],
    /// The key before the first block.
    pub parent: BlockHash,
    /// K and V type names.
    pub kv: (String, String),
    /// Kernel path name.
    pub isa: String,
}

/// One block's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its key.
    pub key: BlockHash,
    /// SHA-256 of its payload.
    pub sha256: [u8; 32],
    /// Its token ids.
    pub tokens: Vec<u32>,
}

/// A parsed file: header, entries, and where the payloads start.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The header.
    pub header: Header,
    /// One entry per block.
    pub entries: Vec<Entry>,
    /// Offset of the first payload.
    pub data_start: usize,
}

impl Parsed {
    /// Block `i`'s payload in `bytes` (the file's).
    pub fn payload<'b>(&self, bytes: &'b [u8], i: usize) -> &'b [u8] {
        let n = self.header.block_bytes as usize;
        &bytes[self.data_start + i * n..self.data_start + (i + 1) * n]
    }
    /// The tokens of every block, in order.
    pub fn tokens(&self) -> Vec<u32> {
        self.entries.iter().flat_map(|e| e.tokens.clone()).collect()
    }
}

fn name(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn put_name(out: &mut [u8], s: &str) {
    let n = s.len().min(out.len());
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn arr32(b: &[u8], at: usize) -> [u8; 32] {
    b[at..at + 32].try_into().expect("32 bytes")
}

/// Where the payloads of a file of `n` blocks start.
fn data_start(n: usize) -> Option<usize> {
    let end = n.checked_mul(ENTRY)?.checked_add(FIXED)?;
    end.checked_next_multiple_of(ALIGN)
}

/// Parses the structure of a cache file held in `bytes` (no payload hash
/// is checked: see [`check`]). Never panics: every size is checked with
/// overflow-checked arithmetic against the file's length.
pub fn parse(bytes: &[u8]) -> Result<Parsed, BadCacheFile> {
    if bytes.len() < FIXED {
        return bad(
            bytes.len(),
            format!(
                "the file ends after {} bytes, inside the {FIXED}-byte header",
                bytes.len()
            ),
        );
    }
    if &bytes[..8] != MAGIC {
        return bad(0, "not a gpack KV cache file (the magic is not GPACKKV)");
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return bad(
            8,
            format!("version {version}; this build reads version {VERSION}"),
        );
    }
    let kb = u32_at(bytes, 12) as usize;
    if kb != KB {
        return bad(12, format!("{kb} positions per block; expected {KB}"));
    }
    let block_bytes = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let n = u32_at(bytes, 24) as usize;
    if n == 0 || n > MAX_BLOCKS {
        return bad(24, format!("{n} blocks; expected 1 to {MAX_BLOCKS}"));
    }
    let first_block = u32_at(bytes, 28) as usize;
    if bytes[208..FIXED].iter().any(|&b| b != 0) {
        return bad(208, "reserved header bytes are not zero");
    }
    let Some(start) = data_start(n) else {
        return bad(24, "the block count overflows the file's size");
    };
    let total = usize::try_from(block_bytes)
        .ok()
        .and_then(|b| b.checked_mul(n))
        .and_then(|p| p.checked_add(start));
    match total {
        Some(t) if t == bytes.len() => {}
        Some(t) => {
            return bad(
                bytes.len().min(t),
                format!(
                    "the file is {} bytes; its header describes {t} ({n} blocks of {block_bytes} bytes after {start})",
                    bytes.len()
                ),
            )
        }
        None => return bad(16, "the block size overflows the file's size"),
    }
    let header = Header {
        block_bytes,
        n_blocks: n,
        first_block,
        context: arr32(bytes, 32),
        model: arr32(bytes, 64),
        tokenizer: arr32(bytes, 96),
        parent: arr32(bytes, 128),
        kv: (name(&bytes[160..168]), name(&bytes[168..176])),
        isa: name(&bytes[176..208]),
    };
    let entries = (0..n)
        .map(|i| {
            let at = FIXED + i * ENTRY;
            Entry {
                key: arr32(bytes, at),
                sha256: arr32(bytes, at + 32),
                tokens: (0..KB).map(|t| u32_at(bytes, at + 64 + t * 4)).collect(),
            }
        })
        .collect();
    Ok(Parsed {
        header,
        entries,
        data_start: start,
    })
}

/// [`parse`], then everything that makes the blocks usable under `ctx`:
/// the context digest and block size are `ctx`'s, each key follows from
/// its parent and its tokens, and each payload's SHA-256 is its entry's.
/// The bytes checked are the bytes the caller then uses (held in memory,
/// not a mapping another process could truncate).
pub fn check(bytes: &[u8], ctx: &CacheContext) -> Result<Parsed, BadCacheFile> {
    let p = parse(bytes)?;
    let want = ctx.digest();
    if p.header.context != want {
        return bad(
            32,
            format!(
                "made for another model or settings (context {}…, expected {}…: model, tokenizer, KV type {}, kernel path {} or hyperparameters differ)",
                &super::key::hex(&p.header.context)[..12],
                &super::key::hex(&want)[..12],
                ctx.kv,
                ctx.isa
            ),
        );
    }
    if p.header.block_bytes != ctx.block_bytes as u64 {
        return bad(
            16,
            format!(
                "blocks of {} bytes; this model's are {}",
                p.header.block_bytes, ctx.block_bytes
            ),
        );
    }
    let mut parent = p.header.parent;
    if p.header.first_block == 0 && parent != want {
        return bad(128, "a first block whose parent is not the context");
    }
    for (i, e) in p.entries.iter().enumerate() {
        let at = FIXED + i * ENTRY;
        if next_hash(&parent, &e.tokens) != e.key {
            return bad(
                at,
                format!("block {i}'s key does not follow from its parent and tokens"),
            );
        }
        let sum: [u8; 32] = Sha256::digest(p.payload(bytes, i)).into();
        if sum != e.sha256 {
            return bad(
                p.data_start + i * ctx.block_bytes,
                format!("block {i}'s payload does not match its SHA-256"),
            );
        }
        parent = e.key;
    }
    Ok(p)
}

/// One block to write: its key, tokens and payload.
pub struct BlockOut<'a> {
    /// Key.
    pub key: BlockHash,
    /// The `KB` token ids.
    pub tokens: &'a [u32],
    /// Payload (`ctx.block_bytes`).
    pub payload: &'a [u8],
}

/// Writes a file of `blocks` (consecutive, the first at index
/// `first_block`, after key `parent`) to `w`.
pub fn write(
    w: &mut dyn Write,
    ctx: &CacheContext,
    first_block: usize,
    parent: &BlockHash,
    blocks: &[BlockOut<'_>],
) -> std::io::Result<()> {
    let n = blocks.len();
    assert!((1..=MAX_BLOCKS).contains(&n), "1 to MAX_BLOCKS blocks");
    let start = data_start(n).expect("MAX_BLOCKS fits");
    let mut head = vec![0u8; start];
    head[..8].copy_from_slice(MAGIC);
    head[8..12].copy_from_slice(&VERSION.to_le_bytes());
    head[12..16].copy_from_slice(&(KB as u32).to_le_bytes());
    head[16..24].copy_from_slice(&(ctx.block_bytes as u64).to_le_bytes());
    head[24..28].copy_from_slice(&(n as u32).to_le_bytes());
    head[28..32].copy_from_slice(&(first_block as u32).to_le_bytes());
    head[32..64].copy_from_slice(&ctx.digest());
    head[64..96].copy_from_slice(&ctx.identity.model);
    head[96..128].copy_from_slice(&ctx.identity.tokenizer);
    head[128..160].copy_from_slice(parent);
    put_name(&mut head[160..168], ctx.kv.k.name());
    put_name(&mut head[168..176], ctx.kv.v.name());
    put_name(&mut head[176..208], &ctx.isa);
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(b.tokens.len(), KB);
        assert_eq!(b.payload.len(), ctx.block_bytes);
        let at = FIXED + i * ENTRY;
        head[at..at + 32].copy_from_slice(&b.key);
        let sum: [u8; 32] = Sha256::digest(b.payload).into();
        head[at + 32..at + 64].copy_from_slice(&sum);
        for (j, t) in b.tokens.iter().enumerate() {
            head[at + 64 + j * 4..at + 68 + j * 4].copy_from_slice(&t.to_le_bytes());
        }
    }
    w.write_all(&head)?;
    for b in blocks {
        w.write_all(b.payload)?;
    }
    Ok(())
}

/// The length of a file of `n` blocks of `block_bytes` each.
pub fn file_bytes(n: usize, block_bytes: usize) -> Option<usize> {
    data_start(n)?.checked_add(block_bytes.checked_mul(n)?)
}
