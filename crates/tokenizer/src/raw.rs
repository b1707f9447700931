//! GBT1's normative constants (magic, version, header size, caps, flags, token-type
//! bits), its fixed records as `zerocopy` structs, and the one cursor that reads them.
//! The reader ([`crate::gbt1`], which re-exports the constants), the writer and the spec's
//! checks all take them from here.
//!
//! Each struct mirrors a table of `FORMAT-GBT1.md` field for field: little-endian field
//! types (unaligned, so a GBT1 payload may start at any address), `#[repr(C)]` with no
//! padding, and compile-time checks of the size and of the offsets the spec gives, so the
//! code cannot drift from the document. The reader casts bytes to them through
//! [`Cursor`], the writer builds them and writes `as_bytes()`; no byte offset is counted
//! by hand anywhere else.

use crate::error::Error;
use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `"GBT1"` read as a little-endian u32.
pub const MAGIC: u32 = 0x3154_4247;
/// The layout version this crate writes and the highest it reads.
pub const VERSION: u16 = 1;
/// Header size in bytes.
pub const HEADER_SIZE: usize = 128;
/// Largest vocabulary accepted (2^24; the largest real vocabularies are about 2^18).
pub const MAX_VOCAB: u32 = 1 << 24;
/// Largest merge count accepted (2^25).
pub const MAX_MERGES: u32 = 1 << 25;
/// Largest vocabulary blob (1 GiB).
pub const MAX_BLOB: u32 = 1 << 30;
/// Largest hash table (2^27 slots).
pub const MAX_SLOTS: u32 = 1 << 27;
/// Longest probe sequence of either hash table: a writer places every entry
/// within this many slots of its home slot (`write` refuses a table where it
/// cannot), and a lookup gives up after it, so a crafted table with no empty
/// slot costs at most this many probes per lookup, not `slots`. The writer's
/// loads (at most 1/2 and 2/3) keep real tables far below it (the longest
/// probe of the real tokenizers in testdata is tested).
pub const MAX_PROBES: u32 = 4096;
/// Marks an empty pair-table slot and an absent byte-table entry.
pub const NONE: u32 = u32::MAX;
/// Pseudo-id base for a character that is not in a SentencePiece vocabulary (see `bpe.rs`).
pub const PSEUDO_CHAR: u32 = 0x8000_0000;

/// Header flag: prepend BOS when encoding with `add_special`.
pub const FLAG_ADD_BOS: u32 = 1 << 0;
/// Header flag: append EOS when encoding with `add_special`.
pub const FLAG_ADD_EOS: u32 = 1 << 1;
/// Header flag: SentencePiece dummy prefix (a space before every text fragment).
pub const FLAG_ADD_SPACE_PREFIX: u32 = 1 << 2;
/// Header flag: byte fallback to `<0xXX>` tokens.
pub const FLAG_BYTE_FALLBACK: u32 = 1 << 3;
/// Header flag: a word that is a token is emitted without merging (HF `ignore_merges`).
pub const FLAG_IGNORE_MERGES: u32 = 1 << 4;
/// Header flag: Hugging Face merge-queue semantics (`MergeMode::HfQueue`).
pub const FLAG_HF_QUEUE: u32 = 1 << 5;
/// Header flag: every merged token has exactly one merge producing it.
pub const FLAG_PAIR_UNIQUE: u32 = 1 << 6;
/// Header flag: characters missing from a SentencePiece vocabulary are merge symbols
/// (pseudo-ids `PSEUDO_CHAR | codepoint`, llama.cpp) rather than byte-fallback tokens at once (HF).
pub const FLAG_CHAR_PSEUDO_IDS: u32 = 1 << 7;
/// Header flag: NFC-normalize every text fragment (not split tokens) before the model.
pub const FLAG_NFC: u32 = 1 << 8;
/// The header's `eot_id` and `eom_id` are set (else they are 0).
pub const FLAG_END_IDS: u32 = 1 << 9;
/// All flags version 1 defines.
pub const KNOWN_FLAGS: u32 = (1 << 10) - 1;

/// Token-type byte: low 3 bits are the [`crate::spec::TokenType`], this bit marks "matched before the model".
pub const TYPE_SPLIT: u8 = 0x80;
/// Token-type byte: special (dropped by `decode_skip_special`).
pub const TYPE_SPECIAL: u8 = 0x40;
/// Token-type byte: a split token that absorbs the whitespace before it.
pub const TYPE_LSTRIP: u8 = 0x08;
/// Token-type byte: a split token that absorbs the whitespace after it.
pub const TYPE_RSTRIP: u8 = 0x10;

/// The 128-byte header (FORMAT-GBT1.md, "Header").
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct Header {
    /// `"GBT1"` ([`MAGIC`]).
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
    /// BOS id or [`NONE`].
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
    /// End-of-turn id or `NONE` (with [`FLAG_END_IDS`]; 0 without).
    pub eot_id: U32,
    /// End-of-message id or `NONE` (same).
    pub eom_id: U32,
    /// Must be 0.
    pub reserved: [u8; 36],
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
    /// Left operand, or [`NONE`] when empty.
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
const _: () = assert!(offset_of!(Header, eot_id) == 84);
const _: () = assert!(offset_of!(Header, eom_id) == 88);
const _: () = assert!(offset_of!(Header, reserved) == 92);

/// The one cursor over untrusted bytes ([`gpack_format::cursor`]), which
/// GBT1 reads through: its steps' errors as this crate's (a shortfall is
/// [`Error::Truncated`] naming what was being read).
pub(crate) use gpack_format::cursor::Cursor;

impl From<gpack_format::cursor::CursorError> for Error {
    fn from(e: gpack_format::cursor::CursorError) -> Self {
        use gpack_format::cursor::CursorError as C;
        match e {
            C::Short {
                what, need, remain, ..
            } => Error::Truncated {
                what,
                need,
                have: remain,
            },
            C::Count { what, .. } => Error::Overflow { what },
            C::Behind { what, at, pos } => Error::Invalid {
                what,
                value: at,
                limit: pos,
            },
            C::Trailing { after, count } => Error::Invalid {
                what: after,
                value: count,
                limit: 0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_errors_read_as_gbt1_errors() {
        let b = [0u8; 20];
        let mut c = Cursor::new(&b);
        assert!(matches!(
            c.record::<Header>("GBT1 header").map_err(Error::from),
            Err(Error::Truncated {
                what: "GBT1 header",
                need: 128,
                have: 20
            })
        ));
        c.skip_to(4, "merges").unwrap();
        assert!(matches!(
            c.records::<MergeRecord>(2, "merges").map_err(Error::from),
            Err(Error::Truncated {
                what: "merges",
                need: 24,
                have: 16
            })
        ));
        assert_eq!(c.records::<U32>(4, "ranks").unwrap().len(), 4);
        assert!(matches!(
            c.skip_to(8, "token hash").map_err(Error::from),
            Err(Error::Invalid {
                what: "token hash",
                value: 8,
                limit: 20
            })
        ));
        assert!(matches!(
            c.records::<U32>(usize::MAX, "pair hash")
                .map_err(Error::from),
            Err(Error::Overflow { what: "pair hash" })
        ));
        c.end("trailing bytes").unwrap();
    }
}
