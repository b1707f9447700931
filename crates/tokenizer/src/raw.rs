//! GBT1's fixed records as `zerocopy` structs, and the one cursor that reads them.
//!
//! Each struct mirrors a table of `FORMAT-GBT1.md` field for field: little-endian field
//! types (unaligned, so a GBT1 payload may start at any address), `#[repr(C)]` with no
//! padding, and compile-time checks of the size and of the offsets the spec gives, so the
//! code cannot drift from the document. The reader casts bytes to them through
//! [`Cursor`], the writer builds them and writes `as_bytes()`; no byte offset is counted
//! by hand anywhere else.

use crate::error::{Error, Result};
use crate::gbt1::HEADER_SIZE;
use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The 128-byte header (FORMAT-GBT1.md, "Header").
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct Header {
    /// `"GBT1"` ([`crate::gbt1::MAGIC`]).
    pub magic: U32,
    /// Layout version.
    pub version: U16,
    /// [`HEADER_SIZE`].
    pub header_size: U16,
    /// `FLAG_*` bits.
    pub flags: U32,
    /// [`crate::spec::ModelKind`] as a byte.
    pub model: u8,
    /// [`crate::spec::PreTokenizer`] as a byte.
    pub pre_tokenizer: u8,
    /// Must be 0.
    pub reserved0: U16,
    /// Number of tokens.
    pub vocab_size: U32,
    /// Number of merges.
    pub n_merges: U32,
    /// BOS id or [`crate::gbt1::NONE`].
    pub bos_id: U32,
    /// EOS id or `NONE`.
    pub eos_id: U32,
    /// Padding id or `NONE`.
    pub pad_id: U32,
    /// Unknown id or `NONE`.
    pub unk_id: U32,
    /// Length of the `vocab_blob` region.
    pub vocab_blob_bytes: U32,
    /// Length of the `chat_template` region.
    pub chat_template_bytes: U32,
    /// Slots of the token hash table.
    pub token_hash_slots: U32,
    /// Slots of the pair hash table.
    pub pair_hash_slots: U32,
    /// Entries of the `split_lengths` region.
    pub n_split_lengths: U32,
    /// Longest token in bytes.
    pub max_token_bytes: U32,
    /// Length of the whole payload.
    pub total_size: U64,
    /// Entries of the `mark_crossers` region.
    pub n_mark_crossers: U32,
    /// [`crate::gbt1::hash_bytes`] of everything after the header.
    pub content_hash: U64,
    /// Must be 0.
    pub reserved: [u8; 44],
}

/// One entry of the `merges` region: `(left, right, merged)`.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct MergeRecord {
    /// Left operand: a token id or a pseudo-id.
    pub left: U32,
    /// Right operand.
    pub right: U32,
    /// The token the merge produces.
    pub merged: U32,
}

/// One slot of the `pair_hash` region; `left == NONE` marks an empty slot.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct PairSlot {
    /// Left operand, or [`crate::gbt1::NONE`] when empty.
    pub left: U32,
    /// Right operand.
    pub right: U32,
    /// The merge's priority.
    pub priority: U32,
    /// The token the merge produces.
    pub merged: U32,
}

impl PairSlot {
    /// An empty slot as the writer lays it out: `left = NONE`, the rest 0.
    pub const EMPTY: PairSlot = PairSlot {
        left: U32::MAX_VALUE,
        right: U32::ZERO,
        priority: U32::ZERO,
        merged: U32::ZERO,
    };
}

const _: () = assert!(size_of::<Header>() == HEADER_SIZE);
const _: () = assert!(size_of::<MergeRecord>() == 12);
const _: () = assert!(size_of::<PairSlot>() == 16);
// The offsets of FORMAT-GBT1.md's header table.
const _: () = assert!(offset_of!(Header, flags) == 8);
const _: () = assert!(offset_of!(Header, model) == 12);
const _: () = assert!(offset_of!(Header, vocab_size) == 16);
const _: () = assert!(offset_of!(Header, bos_id) == 24);
const _: () = assert!(offset_of!(Header, unk_id) == 36);
const _: () = assert!(offset_of!(Header, vocab_blob_bytes) == 40);
const _: () = assert!(offset_of!(Header, token_hash_slots) == 48);
const _: () = assert!(offset_of!(Header, max_token_bytes) == 60);
const _: () = assert!(offset_of!(Header, total_size) == 64);
const _: () = assert!(offset_of!(Header, n_mark_crossers) == 72);
const _: () = assert!(offset_of!(Header, content_hash) == 76);
const _: () = assert!(offset_of!(Header, reserved) == 84);

/// The one cursor over untrusted GBT1 bytes: fixed records by `zerocopy`, every step
/// bounds-checked, a shortfall reported as [`Error::Truncated`] naming what was being read.
pub(crate) struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Cursor { b, pos: 0 }
    }

    fn remain(&self) -> usize {
        self.b.len() - self.pos
    }

    fn truncated(&self, what: &'static str, need: usize) -> Error {
        Error::Truncated {
            what,
            need: need as u64,
            have: self.remain() as u64,
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if n > self.remain() {
            return Err(self.truncated(what, n));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// One fixed record.
    pub(crate) fn record<T: FromBytes + KnownLayout + Immutable + Unaligned>(
        &mut self,
        what: &'static str,
    ) -> Result<&'a T> {
        let bytes = self.take(size_of::<T>(), what)?;
        T::ref_from_bytes(bytes).map_err(|_| self.truncated(what, size_of::<T>()))
    }

    /// `n` fixed records in a row.
    pub(crate) fn records<T: FromBytes + KnownLayout + Immutable + Unaligned>(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a [T]> {
        let need = n
            .checked_mul(size_of::<T>())
            .ok_or(Error::Overflow { what })?;
        let bytes = self.take(need, what)?;
        <[T]>::ref_from_bytes_with_elems(bytes, n).map_err(|_| self.truncated(what, need))
    }

    /// Skip the padding up to `at`, where the region `what` starts (regions are in file
    /// order, so `at` is never behind the cursor).
    pub(crate) fn skip_to(&mut self, at: usize, what: &'static str) -> Result<()> {
        let n = at.checked_sub(self.pos).ok_or(Error::Invalid {
            what,
            value: at as u64,
            limit: self.pos as u64,
        })?;
        self.take(n, what).map(|_| ())
    }

    /// The bytes after the cursor, which must be none.
    pub(crate) fn end(&self, after: &'static str) -> Result<()> {
        match self.remain() {
            0 => Ok(()),
            n => Err(Error::Invalid {
                what: after,
                value: n as u64,
                limit: 0,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_names_what_runs_past_the_end() {
        let b = [0u8; 20];
        let mut c = Cursor::new(&b);
        assert!(matches!(
            c.record::<Header>("GBT1 header"),
            Err(Error::Truncated {
                what: "GBT1 header",
                need: 128,
                have: 20
            })
        ));
        c.skip_to(4, "merges").unwrap();
        assert!(matches!(
            c.records::<MergeRecord>(2, "merges"),
            Err(Error::Truncated {
                what: "merges",
                need: 24,
                have: 16
            })
        ));
        assert_eq!(c.records::<U32>(4, "ranks").unwrap().len(), 4);
        assert!(matches!(
            c.skip_to(8, "token hash"),
            Err(Error::Invalid {
                what: "token hash",
                value: 8,
                limit: 20
            })
        ));
        assert!(matches!(
            c.records::<U32>(usize::MAX, "pair hash"),
            Err(Error::Overflow { what: "pair hash" })
        ));
        c.end("trailing bytes").unwrap();
    }
}
