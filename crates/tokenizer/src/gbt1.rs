//! GBT1: the binary tokenizer, and its zero-copy reader.
//!
//! The byte layout is normative in `FORMAT-GBT1.md`; this module mirrors it. Design note:
//! a tokenizer is used by hashing token bytes to ids and token-id pairs to merges, so the
//! hash tables themselves are in the file. Opening checks the header and that every region
//! lies inside the slice (O(1) in the vocabulary size); the entries are checked when they are
//! read, and a bad entry reads as absent, never as a panic or an out-of-range id.

use crate::error::{add, mul, Error, Result};
use crate::raw::{Cursor, Header, MergeRecord, PairSlot};
use crate::spec::{ModelKind, PreTokenizer, TokenType};
use zerocopy::little_endian::{F32, U32};
use zerocopy::{FromBytes, Immutable, KnownLayout, Unaligned};

pub use crate::raw::{
    FLAG_ADD_BOS, FLAG_ADD_EOS, FLAG_ADD_SPACE_PREFIX, FLAG_BYTE_FALLBACK, FLAG_CHAR_PSEUDO_IDS,
    FLAG_END_IDS, FLAG_HF_QUEUE, FLAG_IGNORE_MERGES, FLAG_NFC, FLAG_PAIR_UNIQUE, HEADER_SIZE,
    KNOWN_FLAGS, MAGIC, MAX_BLOB, MAX_MERGES, MAX_PROBES, MAX_SLOTS, MAX_VOCAB, NONE, PSEUDO_CHAR,
    TYPE_LSTRIP, TYPE_RSTRIP, TYPE_SPECIAL, TYPE_SPLIT, VERSION,
};

/// FNV-style mixing constants of the GBT1 hash (normative, see FORMAT-GBT1.md).
const H_SEED: u64 = 0x243F_6A88_85A3_08D3;
const H_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The GBT1 hash of a token's bytes.
pub fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = H_SEED ^ b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(H_MUL);
        h ^= h >> 29;
    }
    let r = chunks.remainder();
    if !r.is_empty() {
        let mut w = [0u8; 8];
        w[..r.len()].copy_from_slice(r);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(H_MUL);
        h ^= h >> 29;
    }
    fmix64(h)
}

/// The GBT1 hash of a token-id pair.
#[inline]
pub fn hash_pair(left: u32, right: u32) -> u64 {
    fmix64(((left as u64) << 32) | right as u64)
}

/// Region byte ranges, in file order.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Layout {
    pub offsets: usize,
    pub types: usize,
    pub scores: usize,
    pub blob: usize,
    pub merges: usize,
    pub ranks: usize,
    pub token_hash: usize,
    pub pair_hash: usize,
    pub byte_table: usize,
    pub split_prefix2: usize,
    pub split_index: usize,
    pub split_lengths: usize,
    pub crossers: usize,
    pub template: usize,
    pub total: usize,
}

/// The counts a layout is computed from.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub vocab: u32,
    pub merges: u32,
    pub blob: u32,
    pub template: u32,
    pub token_slots: u32,
    pub pair_slots: u32,
    pub split_lengths: u32,
    pub crossers: u32,
}

fn align8(x: u64) -> Result<u64> {
    Ok(add(x, 7, "alignment")? & !7)
}

impl Layout {
    /// Every region starts at the next multiple of 8 after the previous one.
    pub(crate) fn compute(c: &Counts) -> Result<Layout> {
        let v = c.vocab as u64;
        let mut at = HEADER_SIZE as u64;
        let mut next = |size: u64| -> Result<usize> {
            let start = align8(at)?;
            at = add(start, size, "region end")?;
            usize::try_from(start).map_err(|_| Error::Overflow {
                what: "region offset",
            })
        };
        let offsets = next(mul(add(v, 1, "offsets")?, 4, "offsets")?)?;
        let types = next(v)?;
        let scores = next(mul(v, 4, "scores")?)?;
        let blob = next(c.blob as u64)?;
        let merges = next(mul(c.merges as u64, 12, "merges")?)?;
        let ranks = next(mul(c.merges as u64, 4, "merge ranks")?)?;
        let token_hash = next(mul(c.token_slots as u64, 4, "token hash")?)?;
        let pair_hash = next(mul(c.pair_slots as u64, 16, "pair hash")?)?;
        let byte_table = next(256 * 4)?;
        let split_prefix2 = next(8192)?;
        let split_index = next(257 * 4)?;
        let split_lengths = next(mul(c.split_lengths as u64, 4, "split lengths")?)?;
        let crossers = next(mul(c.crossers as u64, 4, "mark crossers")?)?;
        let template = next(c.template as u64)?;
        let total =
            usize::try_from(align8(at)?).map_err(|_| Error::Overflow { what: "total size" })?;
        Ok(Layout {
            offsets,
            types,
            scores,
            blob,
            merges,
            ranks,
            token_hash,
            pair_hash,
            byte_table,
            split_prefix2,
            split_index,
            split_lengths,
            crossers,
            template,
            total,
        })
    }
}

/// The regions of a parsed file as typed slices, each exactly its size (so every access
/// is a bounds-checked slice read: a corrupt entry reads as absent, never out of bounds).
#[derive(Clone, Copy, Debug)]
struct Regions<'a> {
    offsets: &'a [U32],
    types: &'a [u8],
    scores: &'a [F32],
    blob: &'a [u8],
    merges: &'a [MergeRecord],
    ranks: &'a [U32],
    token_hash: &'a [U32],
    pair_hash: &'a [PairSlot],
    byte_table: &'a [U32; 256],
    split_prefix2: &'a [u8; 8192],
    split_index: &'a [U32; 257],
    split_lengths: &'a [U32],
    crossers: &'a [U32],
    template: &'a [u8],
}

/// `n` records of region `what`, which starts at `at` (after the padding before it).
fn region<'a, T: FromBytes + KnownLayout + Immutable + Unaligned>(
    cur: &mut Cursor<'a>,
    at: usize,
    n: u32,
    what: &'static str,
) -> Result<&'a [T]> {
    cur.skip_to(at, what)?;
    Ok(cur.records(n as usize, what)?)
}

/// The fixed-size region `what` at `at`.
fn fixed<'a, T: FromBytes + KnownLayout + Immutable + Unaligned>(
    cur: &mut Cursor<'a>,
    at: usize,
    what: &'static str,
) -> Result<&'a T> {
    cur.skip_to(at, what)?;
    Ok(cur.record(what)?)
}

impl<'a> Regions<'a> {
    /// Walk the regions in file order from just after the header to the end.
    fn read(cur: &mut Cursor<'a>, l: &Layout, c: &Counts) -> Result<Self> {
        let vocab_plus_1 = c.vocab.checked_add(1).ok_or(Error::Overflow {
            what: "vocab offsets",
        })?;
        let r = Regions {
            offsets: region(cur, l.offsets, vocab_plus_1, "vocab offsets")?,
            types: region(cur, l.types, c.vocab, "token types")?,
            scores: region(cur, l.scores, c.vocab, "scores")?,
            blob: region(cur, l.blob, c.blob, "vocab blob")?,
            merges: region(cur, l.merges, c.merges, "merges")?,
            ranks: region(cur, l.ranks, c.merges, "merge priorities")?,
            token_hash: region(cur, l.token_hash, c.token_slots, "token hash")?,
            pair_hash: region(cur, l.pair_hash, c.pair_slots, "pair hash")?,
            byte_table: fixed(cur, l.byte_table, "byte table")?,
            split_prefix2: fixed(cur, l.split_prefix2, "split prefix bitmap")?,
            split_index: fixed(cur, l.split_index, "split index")?,
            split_lengths: region(cur, l.split_lengths, c.split_lengths, "split lengths")?,
            crossers: region(cur, l.crossers, c.crossers, "mark crossers")?,
            template: region(cur, l.template, c.template, "chat template")?,
        };
        cur.skip_to(l.total, "final padding")?;
        cur.end("trailing bytes")?;
        Ok(r)
    }
}

/// A parsed, borrowed GBT1 tokenizer.
#[derive(Clone, Copy, Debug)]
pub struct Gbt1<'a> {
    bytes: &'a [u8],
    flags: u32,
    model: ModelKind,
    pre: PreTokenizer,
    counts: Counts,
    ids: [u32; 4],
    /// End-of-turn and end-of-message ids (`NONE` without [`FLAG_END_IDS`]).
    end_ids: [u32; 2],
    max_token_bytes: u32,
    content_hash: u64,
    r: Regions<'a>,
}

impl<'a> Gbt1<'a> {
    /// Parse GBT1 bytes.
    ///
    /// Checks the header, every count against its cap, that the hash-table sizes are powers
    /// of two and that every region fits the slice exactly. Cost is O(1) in the vocabulary
    /// size. Never panics, whatever the input.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let mut cur = Cursor::new(bytes);
        let h: &Header = cur.record("GBT1 header")?;
        let magic = h.magic.get();
        if magic != MAGIC {
            return Err(Error::BadMagic {
                expected: MAGIC,
                found: magic,
            });
        }
        let version = h.version.get();
        if version == 0 || version > VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                max: VERSION,
            });
        }
        let header_size = h.header_size.get();
        if header_size as usize != HEADER_SIZE {
            return Err(Error::Invalid {
                what: "header size",
                value: header_size as u64,
                limit: HEADER_SIZE as u64,
            });
        }
        let flags = h.flags.get();
        if flags & !KNOWN_FLAGS != 0 {
            return Err(Error::UnknownFlags {
                flags: flags & !KNOWN_FLAGS,
            });
        }
        let model = match h.model {
            1 => ModelKind::ByteLevelBpe,
            2 => ModelKind::SentencePieceBpe,
            v => {
                return Err(Error::Invalid {
                    what: "model kind",
                    value: v as u64,
                    limit: 2,
                })
            }
        };
        let pre = PreTokenizer::from_u8(h.pre_tokenizer).ok_or(Error::Invalid {
            what: "pre-tokenizer",
            value: h.pre_tokenizer as u64,
            limit: 4,
        })?;
        if h.reserved0.get() != 0 {
            return Err(Error::Invalid {
                what: "reserved header field",
                value: h.reserved0.get() as u64,
                limit: 0,
            });
        }
        let counts = Counts {
            vocab: h.vocab_size.get(),
            merges: h.n_merges.get(),
            blob: h.vocab_blob_bytes.get(),
            template: h.chat_template_bytes.get(),
            token_slots: h.token_hash_slots.get(),
            pair_slots: h.pair_hash_slots.get(),
            split_lengths: h.n_split_lengths.get(),
            crossers: h.n_mark_crossers.get(),
        };
        let cap = |what: &'static str, v: u32, lo: u32, hi: u32| -> Result<()> {
            if v < lo || v > hi {
                Err(Error::Invalid {
                    what,
                    value: v as u64,
                    limit: hi as u64,
                })
            } else {
                Ok(())
            }
        };
        cap("vocab size", counts.vocab, 1, MAX_VOCAB)?;
        cap("merge count", counts.merges, 0, MAX_MERGES)?;
        cap("vocab blob size", counts.blob, 0, MAX_BLOB)?;
        cap("chat template size", counts.template, 0, MAX_BLOB)?;
        cap("token hash slots", counts.token_slots, 1, MAX_SLOTS)?;
        cap("pair hash slots", counts.pair_slots, 1, MAX_SLOTS)?;
        cap("split length count", counts.split_lengths, 0, 1 << 20)?;
        cap("mark crosser count", counts.crossers, 0, 1 << 21)?;
        if !counts.token_slots.is_power_of_two() || counts.token_slots < counts.vocab {
            return Err(Error::Invalid {
                what: "token hash slots",
                value: counts.token_slots as u64,
                limit: counts.vocab as u64,
            });
        }
        if !counts.pair_slots.is_power_of_two() || counts.pair_slots < counts.merges {
            return Err(Error::Invalid {
                what: "pair hash slots",
                value: counts.pair_slots as u64,
                limit: counts.merges as u64,
            });
        }
        let end_ids = [h.eot_id, h.eom_id].map(U32::get);
        if flags & FLAG_END_IDS == 0 && end_ids != [0, 0] {
            return Err(Error::Invalid {
                what: "end-of-turn ids without their flag (reserved bytes)",
                value: end_ids[0].max(end_ids[1]) as u64,
                limit: 0,
            });
        }
        let ids = [h.bos_id, h.eos_id, h.pad_id, h.unk_id].map(U32::get);
        let ends = if flags & FLAG_END_IDS != 0 {
            &end_ids[..]
        } else {
            &[]
        };
        for &v in ids.iter().chain(ends) {
            if v != NONE && v >= counts.vocab {
                return Err(Error::TokenOutOfRange {
                    id: v as u64,
                    vocab_size: counts.vocab as u64,
                });
            }
        }
        let max_token_bytes = h.max_token_bytes.get();
        if max_token_bytes > counts.blob {
            return Err(Error::Invalid {
                what: "max token bytes",
                value: max_token_bytes as u64,
                limit: counts.blob as u64,
            });
        }
        let total = h.total_size.get();
        if h.reserved.iter().any(|&b| b != 0) {
            return Err(Error::Invalid {
                what: "reserved header bytes",
                value: 1,
                limit: 0,
            });
        }
        let layout = Layout::compute(&counts)?;
        if total != layout.total as u64 {
            return Err(Error::Invalid {
                what: "total size",
                value: total,
                limit: layout.total as u64,
            });
        }
        if bytes.len() as u64 != total {
            return Err(Error::SizeMismatch {
                expected: total,
                found: bytes.len() as u64,
            });
        }
        let r = Regions::read(&mut cur, &layout, &counts)?;
        let g = Gbt1 {
            bytes,
            flags,
            model,
            pre,
            counts,
            ids,
            end_ids: match flags & FLAG_END_IDS {
                0 => [NONE; 2],
                _ => end_ids,
            },
            max_token_bytes,
            content_hash: h.content_hash.get(),
            r,
        };
        // Two O(1) spot checks that catch most truncation/corruption early.
        if g.offset(0) != 0 || g.offset(counts.vocab) != counts.blob {
            return Err(Error::Invalid {
                what: "vocab offsets ends",
                value: g.offset(counts.vocab) as u64,
                limit: counts.blob as u64,
            });
        }
        if counts.template > 0 {
            std::str::from_utf8(g.r.template).map_err(|_| Error::Invalid {
                what: "chat template UTF-8",
                value: 0,
                limit: 0,
            })?;
        }
        Ok(g)
    }

    /// The bytes this view borrows.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Vocabulary size.
    pub fn vocab_size(&self) -> u32 {
        self.counts.vocab
    }
    /// Number of merges.
    pub fn n_merges(&self) -> u32 {
        self.counts.merges
    }
    /// Header flags.
    pub fn flags(&self) -> u32 {
        self.flags
    }
    /// Model kind.
    pub fn model(&self) -> ModelKind {
        self.model
    }
    /// Pre-tokenizer.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }
    fn opt(v: u32) -> Option<u32> {
        (v != NONE).then_some(v)
    }
    /// BOS id.
    pub fn bos(&self) -> Option<u32> {
        Self::opt(self.ids[0])
    }
    /// EOS id.
    pub fn eos(&self) -> Option<u32> {
        Self::opt(self.ids[1])
    }
    /// Padding id.
    pub fn pad(&self) -> Option<u32> {
        Self::opt(self.ids[2])
    }
    /// Unknown id.
    pub fn unk(&self) -> Option<u32> {
        Self::opt(self.ids[3])
    }
    /// End-of-turn id, when the model's metadata names one.
    pub fn eot(&self) -> Option<u32> {
        Self::opt(self.end_ids[0])
    }
    /// End-of-message id, when the model's metadata names one.
    pub fn eom(&self) -> Option<u32> {
        Self::opt(self.end_ids[1])
    }
    /// The writer's hash of everything after the header ([`hash_bytes`]); identifies the
    /// content (checked by `validate_deep`, not by `parse`).
    pub fn content_hash(&self) -> u64 {
        self.content_hash
    }

    /// Longest token in bytes.
    pub fn max_token_bytes(&self) -> u32 {
        self.max_token_bytes
    }

    #[inline]
    fn offset(&self, i: u32) -> u32 {
        self.r.offsets.get(i as usize).map_or(NONE, |o| o.get())
    }

    /// The stored bytes of token `id`; `None` when out of range or when its offsets are corrupt.
    #[inline]
    pub fn token_bytes(&self, id: u32) -> Option<&'a [u8]> {
        if id >= self.counts.vocab {
            return None;
        }
        let a = self.offset(id) as usize;
        let b = self.offset(id + 1) as usize;
        if a > b || b > self.counts.blob as usize {
            return None;
        }
        self.r.blob.get(a..b)
    }

    /// The raw type byte of token `id` (type in the low 3 bits, [`TYPE_SPLIT`], [`TYPE_SPECIAL`]).
    #[inline]
    pub fn type_byte(&self, id: u32) -> u8 {
        if id >= self.counts.vocab {
            return 0;
        }
        self.r.types.get(id as usize).copied().unwrap_or(0)
    }

    /// Token type of `id`.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        TokenType::from_u8(self.type_byte(id) & 7)
    }

    /// SentencePiece score of `id` (0 when absent).
    pub fn score(&self, id: u32) -> f32 {
        if id >= self.counts.vocab {
            return 0.0;
        }
        self.r.scores.get(id as usize).map_or(0.0, |s| s.get())
    }

    /// Merge `rank` as `[left, right, merged]`.
    pub fn merge(&self, rank: u32) -> Option<[u32; 3]> {
        if rank >= self.counts.merges {
            return None;
        }
        let m = self.r.merges.get(rank as usize)?;
        let m = [m.left.get(), m.right.get(), m.merged.get()];
        (m[2] < self.counts.vocab).then_some(m)
    }

    /// The priority of merge `rank` (equal for SentencePiece merges of equal score).
    pub fn merge_priority(&self, rank: u32) -> Option<u32> {
        if rank >= self.counts.merges {
            return None;
        }
        self.r.ranks.get(rank as usize).map(|p| p.get())
    }

    /// The chat template, if any (checked to be UTF-8 at parse).
    pub fn chat_template(&self) -> Option<&'a str> {
        if self.counts.template == 0 {
            return None;
        }
        std::str::from_utf8(self.r.template).ok()
    }

    /// Id of the token whose stored bytes are `b`.
    #[inline]
    pub fn token_id(&self, b: &[u8]) -> Option<u32> {
        self.probe_token(b).0
    }

    /// [`Gbt1::token_id`] and the number of slots it read (at most
    /// [`MAX_PROBES`]).
    #[doc(hidden)]
    pub fn probe_token(&self, b: &[u8]) -> (Option<u32>, u32) {
        let slots = self.counts.token_slots;
        let mask = slots - 1;
        let mut i = (hash_bytes(b) as u32) & mask;
        for probe in 1..=slots.min(MAX_PROBES) {
            let v = self.r.token_hash.get(i as usize).map_or(NONE, |v| v.get());
            if v == 0 || v == NONE {
                return (None, probe);
            }
            let id = v - 1;
            if self.token_bytes(id) == Some(b) {
                return (Some(id), probe);
            }
            i = (i + 1) & mask;
        }
        (None, slots.min(MAX_PROBES))
    }

    /// The merge of pair `(left, right)`: `(priority, merged id)`.
    #[inline]
    pub fn pair(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        self.probe_pair(left, right).0
    }

    /// [`Gbt1::pair`] and the number of slots it read (at most
    /// [`MAX_PROBES`]).
    #[doc(hidden)]
    pub fn probe_pair(&self, left: u32, right: u32) -> (Option<(u32, u32)>, u32) {
        let slots = self.counts.pair_slots;
        let mask = slots - 1;
        let mut i = (hash_pair(left, right) as u32) & mask;
        for probe in 1..=slots.min(MAX_PROBES) {
            let Some(s) = self.r.pair_hash.get(i as usize) else {
                return (None, probe);
            };
            let l = s.left.get();
            if l == NONE {
                return (None, probe);
            }
            if l == left && s.right.get() == right {
                let m = s.merged.get();
                return (
                    (m < self.counts.vocab).then_some((s.priority.get(), m)),
                    probe,
                );
            }
            i = (i + 1) & mask;
        }
        (None, slots.min(MAX_PROBES))
    }

    /// The longest probe sequence of any token and any merge of this file
    /// (for tests of the writer's bound).
    #[doc(hidden)]
    pub fn longest_probes(&self) -> (u32, u32) {
        let tokens = (0..self.counts.vocab)
            .filter_map(|id| self.token_bytes(id))
            .map(|b| self.probe_token(b).1)
            .max()
            .unwrap_or(0);
        let pairs = (0..self.counts.merges)
            .filter_map(|r| self.merge(r))
            .map(|m| self.probe_pair(m[0], m[1]).1)
            .max()
            .unwrap_or(0);
        (tokens, pairs)
    }

    /// Byte table: for byte-level BPE the id of the one-byte token `b`, for SentencePiece
    /// the id of `<0xXX>`.
    #[inline]
    pub fn byte_token(&self, b: u8) -> Option<u32> {
        let v = self.r.byte_table[b as usize].get();
        (v < self.counts.vocab).then_some(v)
    }

    /// The byte lengths of split tokens starting with byte `b`, longest first (an index
    /// range into the `split_lengths` region; empty when none starts with `b`).
    #[inline]
    pub fn split_range(&self, b: u8) -> (usize, usize) {
        let lo = self.r.split_index[b as usize].get() as usize;
        let hi = self.r.split_index[b as usize + 1].get() as usize;
        let n = self.counts.split_lengths as usize;
        if lo > hi || hi > n {
            return (0, 0);
        }
        (lo, hi)
    }

    /// Entry `k` of the split-length list (0, which matches nothing, past its end).
    #[inline]
    pub fn split_length(&self, k: usize) -> usize {
        self.r.split_lengths.get(k).map_or(0, |v| v.get() as usize)
    }

    /// Whether some split token of two or more bytes starts with bytes `b0 b1`.
    #[inline]
    pub fn split_prefix2(&self, b0: u8, b1: u8) -> bool {
        let k = (b0 as usize) << 8 | b1 as usize;
        self.r.split_prefix2[k >> 3] & (1 << (k & 7)) != 0
    }

    /// All split-token lengths entries (for inspection).
    pub fn split_lengths(&self) -> impl Iterator<Item = usize> + 'a {
        let s: &'a [U32] = self.r.split_lengths;
        s.iter().map(|v| v.get() as usize)
    }

    /// SentencePiece: is there a token containing `c` followed by U+2581 (`c` ≠ U+2581)?
    /// If not, no token crosses the boundary between `c` and a following U+2581, and the
    /// encoder may merge the two sides independently (see `tokenizer.rs`).
    #[inline]
    pub fn is_mark_crosser(&self, c: char) -> bool {
        let (mut lo, mut hi) = (0usize, self.counts.crossers as usize);
        let c = c as u32;
        while lo < hi {
            let mid = (lo + hi) / 2;
            let v = self.r.crossers.get(mid).map_or(NONE, |v| v.get());
            if v == c {
                return true;
            }
            if v < c {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        false
    }

    /// Number of entries of the split-length list.
    pub fn n_split_lengths(&self) -> usize {
        self.counts.split_lengths as usize
    }

    /// A summary for `gpack inspect --json`: model, pre-tokenizer, counts, special ids,
    /// flag names, sizes.
    pub fn summary_json(&self) -> serde_json::Value {
        let names = [
            (FLAG_ADD_BOS, "add_bos"),
            (FLAG_ADD_EOS, "add_eos"),
            (FLAG_ADD_SPACE_PREFIX, "add_space_prefix"),
            (FLAG_BYTE_FALLBACK, "byte_fallback"),
            (FLAG_IGNORE_MERGES, "ignore_merges"),
            (FLAG_HF_QUEUE, "hf_queue"),
            (FLAG_PAIR_UNIQUE, "pair_unique"),
            (FLAG_CHAR_PSEUDO_IDS, "char_pseudo_ids"),
            (FLAG_NFC, "nfc"),
            (FLAG_END_IDS, "end_ids"),
        ];
        let flags: Vec<&str> = names
            .iter()
            .filter(|(b, _)| self.flags & b != 0)
            .map(|(_, n)| *n)
            .collect();
        let name = |id: Option<u32>| {
            id.and_then(|i| self.token_bytes(i))
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        serde_json::json!({
            "format": "GBT1",
            "version": VERSION,
            "model": match self.model { ModelKind::ByteLevelBpe => "byte-level-bpe", ModelKind::SentencePieceBpe => "sentencepiece-bpe" },
            "pre_tokenizer": self.pre.gguf_name(),
            "vocab_size": self.counts.vocab,
            "n_merges": self.counts.merges,
            "bos": self.bos(), "bos_text": name(self.bos()),
            "eos": self.eos(), "eos_text": name(self.eos()),
            "pad": self.pad(),
            "unk": self.unk(),
            "eot": self.eot(), "eom": self.eom(),
            "flags": flags,
            "chat_template_bytes": self.counts.template,
            "bytes": self.bytes.len(),
            "content_hash": format!("{:016x}", self.content_hash()),
        })
    }

    /// Rebuild the [`TokenizerSpec`](crate::TokenizerSpec) this file was written from
    /// (for export and inspection). Fails on a corrupt entry. `to_spec().to_gbt1()` gives
    /// back the same bytes.
    pub fn to_spec(&self) -> Result<crate::spec::TokenizerSpec> {
        use crate::spec::{MergeMode, SpecToken, TokenizerSpec};
        let v = self.counts.vocab;
        let mut tokens = Vec::with_capacity(v as usize);
        for id in 0..v {
            let bytes = self.token_bytes(id).ok_or(Error::BadEntry {
                what: "token",
                index: id as u64,
            })?;
            let tb = self.type_byte(id);
            let ty = self.token_type(id).ok_or(Error::BadEntry {
                what: "token type",
                index: id as u64,
            })?;
            tokens.push(SpecToken {
                bytes: bytes.to_vec(),
                ty,
                split: tb & TYPE_SPLIT != 0,
                special: tb & TYPE_SPECIAL != 0,
                score: self.score(id),
                lstrip: tb & TYPE_LSTRIP != 0,
                rstrip: tb & TYPE_RSTRIP != 0,
            });
        }
        let mut merges = Vec::with_capacity(self.counts.merges as usize);
        let mut ranks = Vec::with_capacity(self.counts.merges as usize);
        let mut all_index = true;
        for r in 0..self.counts.merges {
            merges.push(self.merge(r).ok_or(Error::BadEntry {
                what: "merge",
                index: r as u64,
            })?);
            let p = self.merge_priority(r).ok_or(Error::BadEntry {
                what: "merge priority",
                index: r as u64,
            })?;
            all_index &= p == r;
            ranks.push(p);
        }
        let f = self.flags;
        Ok(TokenizerSpec {
            model: self.model,
            pre: self.pre,
            tokens,
            merges,
            merge_ranks: if all_index && f & FLAG_CHAR_PSEUDO_IDS == 0 {
                None
            } else {
                Some(ranks)
            },
            merge_mode: if f & FLAG_HF_QUEUE != 0 {
                MergeMode::HfQueue
            } else {
                MergeMode::BestFirst
            },
            bos: self.bos(),
            eos: self.eos(),
            pad: self.pad(),
            unk: self.unk(),
            eot: self.eot(),
            eom: self.eom(),
            add_bos: f & FLAG_ADD_BOS != 0,
            add_eos: f & FLAG_ADD_EOS != 0,
            add_space_prefix: f & FLAG_ADD_SPACE_PREFIX != 0,
            byte_fallback: f & FLAG_BYTE_FALLBACK != 0,
            ignore_merges: f & FLAG_IGNORE_MERGES != 0,
            chat_template: self.chat_template().map(str::to_string),
            normalize_nfc: f & FLAG_NFC != 0,
        })
    }

    /// Check every entry (O(size)): offsets monotonic, types known, merges in range and equal
    /// to the concatenation, hash tables find every token and merge. For `verify` and fuzzing.
    pub fn validate_deep(&self) -> Result<()> {
        let v = self.counts.vocab;
        if hash_bytes(self.bytes.get(HEADER_SIZE..).unwrap_or_default()) != self.content_hash() {
            return Err(Error::Invalid {
                what: "content hash",
                value: self.content_hash(),
                limit: 0,
            });
        }
        let mut prev = 0u32;
        for i in 0..=v {
            let o = self.offset(i);
            if o < prev || o > self.counts.blob {
                return Err(Error::BadEntry {
                    what: "vocab offset",
                    index: i as u64,
                });
            }
            prev = o;
        }
        for id in 0..v {
            if self.token_type(id).is_none() || self.type_byte(id) & 0x20 != 0 {
                return Err(Error::BadEntry {
                    what: "token type",
                    index: id as u64,
                });
            }
        }
        for r in 0..self.counts.merges {
            let m = self.merge(r).ok_or(Error::BadEntry {
                what: "merge",
                index: r as u64,
            })?;
            let (p, got) = self.pair(m[0], m[1]).ok_or(Error::BadEntry {
                what: "pair hash entry",
                index: r as u64,
            })?;
            let _ = p;
            if m[0] < PSEUDO_CHAR && m[0] >= v || m[1] < PSEUDO_CHAR && m[1] >= v {
                return Err(Error::BadEntry {
                    what: "merge operand",
                    index: r as u64,
                });
            }
            if got != m[2] && self.flags & FLAG_HF_QUEUE == 0 {
                return Err(Error::BadEntry {
                    what: "pair hash entry",
                    index: r as u64,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{MergeMode, ModelKind, PreTokenizer, SpecToken, TokenType, TokenizerSpec};

    /// A byte-level BPE of the 256 bytes and all 4,096 pairs of 64 letters
    /// (4,352 tokens: 16,384 token slots; 4,096 merges: 8,192 pair slots).
    fn big() -> Vec<u8> {
        let letters: Vec<u8> = (0u8..64).map(|i| b'0' + i).collect();
        let mut tokens: Vec<SpecToken> = (0..=255u8)
            .map(|b| SpecToken::normal([b], TokenType::Normal, 0.0))
            .collect();
        let mut merges = Vec::new();
        for &a in &letters {
            for &b in &letters {
                merges.push([u32::from(a), u32::from(b), tokens.len() as u32]);
                tokens.push(SpecToken::normal([a, b], TokenType::Normal, 0.0));
            }
        }
        TokenizerSpec {
            model: ModelKind::ByteLevelBpe,
            pre: PreTokenizer::Gpt2,
            tokens,
            merges,
            merge_ranks: None,
            merge_mode: MergeMode::HfQueue,
            bos: None,
            eos: None,
            pad: None,
            unk: None,
            eot: None,
            eom: None,
            add_bos: false,
            add_eos: false,
            add_space_prefix: false,
            byte_fallback: false,
            ignore_merges: false,
            chat_template: None,
            normalize_nfc: false,
        }
        .to_gbt1()
        .unwrap()
    }

    /// A crafted table with no empty slot: a lookup of something absent reads
    /// at most MAX_PROBES slots. Before, it read every slot (16,384 here, up
    /// to 2^27 in a file: a hang per token of the text being encoded).
    #[test]
    fn lookups_in_a_full_crafted_table_stop_at_max_probes() {
        let mut b = big();
        let g = Gbt1::parse(&b).unwrap();
        let (c, l) = (g.counts, Layout::compute(&g.counts).unwrap());
        assert!(c.token_slots > MAX_PROBES && c.pair_slots > MAX_PROBES);
        // Written honestly, lookups are short (and miss at an empty slot).
        assert!(g.probe_token(b"absent").1 < 64 && g.token_id(b"AB").is_some());
        let (tok_max, pair_max) = g.longest_probes();
        assert!(tok_max < 64 && pair_max < 64, "{tok_max} {pair_max}");
        for s in 0..c.token_slots as usize {
            let at = l.token_hash + 4 * s;
            if b[at..at + 4] == [0; 4] {
                b[at..at + 4].copy_from_slice(&1u32.to_le_bytes()); // token 0
            }
        }
        for s in 0..c.pair_slots as usize {
            let at = l.pair_hash + 16 * s;
            if b[at..at + 4] == NONE.to_le_bytes() {
                b[at..at + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
            }
        }
        let g = Gbt1::parse(&b).unwrap();
        assert_eq!(g.probe_token(b"absent"), (None, MAX_PROBES));
        assert_eq!(g.probe_pair(7, 9), (None, MAX_PROBES));
        // What the writer placed is still found.
        assert!(g.token_id(b"AB").is_some());
        assert!(g.pair(u32::from(b'A'), u32::from(b'B')).is_some());
    }
}
