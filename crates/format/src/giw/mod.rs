//! GIW bundles: prequantized weights next to the source's metadata, mapped
//! and aliased at load (normative layout: `docs/GIW.md`).
//!
//! Why a second container next to GPACK: a `.giw` is a *cache* of one
//! quantization of one model for one backend (`<model>.<quant>.<target>.giw`
//! sidecars), built by a streaming transcoder one tensor at a time and
//! validated by one CRC-32 instead of per-section SHA-256s. It carries the
//! source GGUF's metadata verbatim (truncated at the tensor-data boundary) so
//! the tokenizer travels with it.
//!
//! This module knows records only as byte ranges plus small descriptors
//! (name, kind, shape, member row ranges). It does not depend on `quant`: a
//! native tensor's payload is handed out as bytes and parsed by the runtime
//! provider with `NativeView::parse`. The only field of a native tensor read
//! here is its `flags` word (offset 8, `docs/GIW.md`), to refuse f16 scales
//! in a file whose weights format predates them.
//!
//! Versions: the bundle header is version 3 (64 bytes). The weights format is
//! 12 (every array 16-aligned), 13 (adds fused group records; written for
//! `--target metal` only) or 14 (adds f16 scale copies inside native tensors;
//! `--target metal` only). A reader refuses a weights format newer than its
//! maximum ([`ReadOptions::max_weights_version`]) and reads every older one.

mod read;
mod write;

pub use read::{Fused, Giw, GroupMember, ReadOptions, Record, RecordKind};
pub use write::{write_atomic, GiwWriter, MemberSpec, PayloadWriter, WriteSummary};

use std::path::PathBuf;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `b"GIWB"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"GIWB");
/// Written as a u32 so a reader on another byte order sees `0x04030201`.
pub const ENDIAN_MARKER: u32 = 0x0102_0304;
/// Bundle header version (64-byte header).
pub const BUNDLE_VERSION: u16 = 3;
/// Oldest weights format this reader reads.
pub const MIN_WEIGHTS_VERSION: u16 = 12;
/// Newest weights format this crate reads and writes.
pub const WEIGHTS_VERSION: u16 = 14;
/// First weights format with fused group records.
pub const FUSED_SINCE: u16 = 13;
/// First weights format with f16 scale copies in native tensors.
pub const F16_SCALES_SINCE: u16 = 14;
/// Size of the bundle header.
pub const HEADER_LEN: u64 = 64;
/// Size of a record header.
pub const RECORD_HEADER_LEN: u64 = 64;
/// Alignment of every record, payload and array in the file.
pub const ALIGN: u64 = 16;
/// Longest quant label (bytes, ASCII).
pub const MAX_QUANT_LEN: usize = 12;
/// Longest tensor or group name (bytes). GGUF caps names at 63 bytes; group
/// names are derived from them.
pub const MAX_NAME_LEN: u32 = 256;
/// Most members in a fused group (q‖k‖v is 3).
pub const MAX_MEMBERS: u32 = 8;
/// Most dimensions of a dense record (GGUF's limit).
pub const MAX_DIMS: u32 = 4;
/// Native tensor flag bit 0: f16 copies of the scales (crates/quant layout.rs).
pub const NATIVE_FLAG_F16_SCALES: u32 = 1;

/// Which backend a bundle was laid out for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// CPU: weights format 12, ordinary records only.
    Cpu,
    /// Metal: fused groups (v13) and f16 scales (v14).
    Metal,
}

impl Target {
    /// The stored code.
    pub fn code(self) -> u16 {
        match self {
            Target::Cpu => 0,
            Target::Metal => 1,
        }
    }
    /// The target for a stored code.
    pub fn from_code(c: u16) -> Option<Target> {
        match c {
            0 => Some(Target::Cpu),
            1 => Some(Target::Metal),
            _ => None,
        }
    }
    /// `"cpu"` or `"metal"` (command line and sidecar names).
    pub fn name(self) -> &'static str {
        match self {
            Target::Cpu => "cpu",
            Target::Metal => "metal",
        }
    }
    /// The weights format a writer emits for this target by default: 12 for
    /// CPU (so a pre-v13 reader still reads it), 14 for Metal.
    pub fn default_weights_version(self) -> u16 {
        match self {
            Target::Cpu => 12,
            Target::Metal => WEIGHTS_VERSION,
        }
    }
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cpu" => Ok(Target::Cpu),
            "metal" => Ok(Target::Metal),
            _ => Err(format!("unknown target {s:?} (expected cpu or metal)")),
        }
    }
}

/// Everything that can go wrong reading or writing a GIW bundle. Offsets are
/// from the start of the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed.
    #[error("{op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is shorter than a header plus its CRC, or than its header says.
    #[error("file is {size} bytes, need {needed}")]
    Truncated {
        /// Actual size.
        size: u64,
        /// Size the header implies.
        needed: u64,
    },
    /// The magic number or the endianness marker is wrong.
    #[error("bad {what}: expected {expected:#010x}, found {found:#010x}")]
    BadMagic {
        /// "magic" or "endianness marker".
        what: &'static str,
        /// Expected value.
        expected: u32,
        /// Found value.
        found: u32,
    },
    /// The bundle header version is not 3.
    #[error("unsupported GIW bundle version {found} (this reader reads version {expected})")]
    BundleVersion {
        /// What this reader reads.
        expected: u16,
        /// What the file has.
        found: u16,
    },
    /// The weights format is newer than this reader.
    #[error(
        "GIW weights format v{found} is newer than this reader (reads v{min}..=v{max}); rebuild the bundle or upgrade gpack"
    )]
    NewerWeightsFormat {
        /// The file's weights format version.
        found: u16,
        /// Oldest this reader reads.
        min: u16,
        /// Newest this reader reads.
        max: u16,
    },
    /// The weights format is older than any this reader knows.
    #[error("GIW weights format v{found} is older than this reader supports (v{min}..=v{max})")]
    OlderWeightsFormat {
        /// The file's weights format version.
        found: u16,
        /// Oldest this reader reads.
        min: u16,
        /// Newest this reader reads.
        max: u16,
    },
    /// The trailing CRC-32 does not match the bytes before it.
    #[error("GIW CRC-32 mismatch: stored {stored:#010x}, computed {computed:#010x} (the file is corrupt)")]
    Crc {
        /// CRC stored at the end of the file.
        stored: u32,
        /// CRC of the bytes before it.
        computed: u32,
    },
    /// A field holds a value no writer produces.
    #[error("invalid {what} at offset {offset}: {found}")]
    Invalid {
        /// Which field.
        what: &'static str,
        /// Where it is.
        offset: u64,
        /// The value found.
        found: u64,
    },
    /// A record does not fit where it has to.
    #[error("record {index} ({name}): {problem}")]
    BadRecord {
        /// Record index.
        index: usize,
        /// Record name (may be empty if it could not be read).
        name: String,
        /// What is wrong.
        problem: RecordProblem,
    },
    /// Size math overflowed.
    #[error("size overflow computing {what}")]
    Overflow {
        /// What was being computed.
        what: &'static str,
    },
    /// The writer was used wrongly (a bug in the caller).
    #[error("GIW writer: {problem}")]
    Usage {
        /// What was wrong.
        problem: UsageProblem,
    },
    /// The destination exists and replacing it was not asked for.
    #[error("{path} exists (use --force to replace it)")]
    DestinationExists {
        /// The destination.
        path: PathBuf,
    },
}

/// What is wrong with one record of a bundle (the problem of
/// [`Error::BadRecord`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordProblem {
    /// Padding after the record is not zero.
    #[error("non-zero padding")]
    NonZeroPadding,
    /// The name length is 0 or past the cap.
    #[error("name length out of range")]
    NameLength,
    /// The name runs past the weights region.
    #[error("name runs past the weights region")]
    NamePastRegion,
    /// The name is not UTF-8.
    #[error("name is not UTF-8")]
    NameNotUtf8,
    /// More records than the header's count.
    #[error("more records than the header's count")]
    MoreThanCount,
    /// The record header runs past the weights region.
    #[error("record header runs past the weights region")]
    HeaderPastRegion,
    /// A fused group record in a pre-v13 file.
    #[error("fused group record in a pre-v13 file")]
    GroupBeforeV13,
    /// A record kind this reader does not know.
    #[error("unknown record kind")]
    UnknownKind,
    /// A reserved record field is not zero.
    #[error("reserved record field is not zero")]
    ReservedRecordField,
    /// A dense record's dimension count is out of range.
    #[error("dense record dimension count out of range")]
    DenseDimCount,
    /// An unused dimension is not zero.
    #[error("unused dimension is not zero")]
    UnusedDim,
    /// A dimension is zero.
    #[error("zero dimension")]
    ZeroDim,
    /// A native record has dense fields set.
    #[error("native record with dense fields set")]
    NativeWithDenseFields,
    /// A native record has a member count.
    #[error("native record with a member count")]
    NativeWithMembers,
    /// A group's member count is out of range.
    #[error("group member count out of range")]
    GroupMemberCount,
    /// The record runs past the weights region.
    #[error("record runs past the weights region")]
    PastRegion,
    /// The member table runs past the weights region.
    #[error("member table runs past the weights region")]
    MembersPastRegion,
    /// A reserved member field is not zero.
    #[error("reserved member field is not zero")]
    ReservedMemberField,
    /// The payload is empty or runs past the weights region.
    #[error("payload is empty or runs past the weights region")]
    PayloadRange,
    /// A native payload is shorter than its 64-byte header.
    #[error("native payload shorter than its 64-byte header")]
    NativeShort,
    /// f16 scales in a pre-v14 file.
    #[error("f16 scales in a pre-v14 file")]
    F16ScalesBeforeV14,
    /// A member's rows lie outside the group tensor.
    #[error("member rows outside the group tensor")]
    MemberRowsOutside,
    /// Two members' rows overlap.
    #[error("member rows overlap")]
    MemberRowsOverlap,
    /// Two records (or group members) have the same tensor name.
    #[error("duplicate tensor name")]
    DuplicateName,
}

/// How the GIW writer was used wrongly: matchable, each variant carrying
/// the name or value it refuses and the limit it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsageProblem {
    /// A weights format this writer does not write.
    #[error("weights format v{version} cannot be written (this writer writes v{min}..=v{max})")]
    WeightsVersion {
        /// The format asked for.
        version: u16,
        /// [`MIN_WEIGHTS_VERSION`].
        min: u16,
        /// [`WEIGHTS_VERSION`].
        max: u16,
    },
    /// A quant label that is empty, too long or not printable ASCII.
    #[error("quant label {label:?} is not 1..={max} printable ASCII bytes")]
    QuantLabel {
        /// The label.
        label: String,
        /// [`MAX_QUANT_LEN`].
        max: usize,
    },
    /// A record or member name that is empty or too long.
    #[error("record name {name:?} is empty or longer than {max} bytes")]
    RecordName {
        /// The name.
        name: String,
        /// [`MAX_NAME_LEN`].
        max: u32,
    },
    /// A dense record with no dimensions or too many.
    #[error("dense record {name} has {dims} dims (1..={max})")]
    DenseDims {
        /// The record.
        name: String,
        /// Dimensions given.
        dims: usize,
        /// [`MAX_DIMS`].
        max: u32,
    },
    /// A fused group in a weights format older than groups.
    #[error("fused group {name} in a weights format v{version} file (needs v{since})")]
    GroupFormat {
        /// The group.
        name: String,
        /// The file's weights format.
        version: u16,
        /// [`FUSED_SINCE`].
        since: u16,
    },
    /// A fused group with too few or too many members.
    #[error("group {name} has {members} members (2..={max})")]
    GroupMembers {
        /// The group.
        name: String,
        /// Members given.
        members: usize,
        /// [`MAX_MEMBERS`].
        max: u32,
    },
    /// A streamed payload ended before its announced length.
    #[error("payload of record {name} ended {missing} bytes short")]
    PayloadShort {
        /// The record.
        name: String,
        /// Bytes announced but not written.
        missing: u64,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn add(a: u64, b: u64, what: &'static str) -> Result<u64> {
    a.checked_add(b).ok_or(Error::Overflow { what })
}

pub(crate) fn mul(a: u64, b: u64, what: &'static str) -> Result<u64> {
    a.checked_mul(b).ok_or(Error::Overflow { what })
}

pub(crate) fn align(a: u64, what: &'static str) -> Result<u64> {
    Ok(add(a, ALIGN - 1, what)? & !(ALIGN - 1))
}

pub(crate) fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

/// The 64-byte bundle header (little-endian; layout in `docs/GIW.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleHeader {
    /// Weights format version (12, 13 or 14).
    pub weights_version: u16,
    /// Target backend.
    pub target: Target,
    /// Quant label (`int8int8`, `int8`, `int4`, `keep`), ASCII, at most 12 bytes.
    pub quant: String,
    /// Number of weight records.
    pub record_count: u32,
    /// Offset of the metadata GGUF (always 64).
    pub meta_off: u64,
    /// Length of the metadata GGUF.
    pub meta_len: u64,
    /// Offset of the first weight record (`align16(meta_off + meta_len)`).
    pub weights_off: u64,
    /// Length of the weight records, padding included; the CRC follows.
    pub weights_len: u64,
}

impl BundleHeader {
    /// The 64 header bytes.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut quant = [0u8; MAX_QUANT_LEN];
        let q = self.quant.as_bytes();
        let n = q.len().min(MAX_QUANT_LEN);
        quant[..n].copy_from_slice(&q[..n]);
        let raw = RawHeader {
            magic: MAGIC.into(),
            bundle_version: BUNDLE_VERSION.into(),
            weights_version: self.weights_version.into(),
            endian: ENDIAN_MARKER.into(),
            target: self.target.code().into(),
            reserved: 0.into(),
            quant,
            record_count: self.record_count.into(),
            meta_off: self.meta_off.into(),
            meta_len: self.meta_len.into(),
            weights_off: self.weights_off.into(),
            weights_len: self.weights_len.into(),
        };
        let mut b = [0u8; 64];
        b.copy_from_slice(raw.as_bytes());
        b
    }
}

// The fixed records of a bundle, exactly as they lie in the file
// (little-endian, alignment 1, no padding; docs/GIW.md). Names, payloads and
// padding between them are variable and read by offset.

/// The 64-byte bundle header.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct RawHeader {
    pub magic: U32,
    pub bundle_version: U16,
    pub weights_version: U16,
    pub endian: U32,
    pub target: U16,
    pub reserved: U16,
    pub quant: [u8; MAX_QUANT_LEN],
    pub record_count: U32,
    pub meta_off: U64,
    pub meta_len: U64,
    pub weights_off: U64,
    pub weights_len: U64,
}

/// The 64-byte header of a record; its name follows.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct RawRecordHeader {
    /// 1 native, 2 dense, 3 fused group.
    pub kind: U32,
    pub name_len: U32,
    /// Dense: number of dimensions; group: number of members.
    pub count: U32,
    pub ggml_type: U32,
    pub payload_len: U64,
    pub dims: [U64; 4],
    pub reserved: U64,
}

/// One member of a fused group record; its name follows.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct RawMember {
    pub row_start: U64,
    pub rows: U64,
    pub name_len: U32,
    pub reserved0: U32,
    pub reserved1: U64,
}

/// The part of a native tensor's own 64-byte header a bundle reader checks
/// (crates/quant `layout.rs` owns the rest).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct RawNativeHead {
    pub _layout: [u8; 8],
    pub flags: U32,
    pub _pad: [u8; 4],
    pub rows: U64,
    pub _rest: [u8; 40],
}

/// Size of [`RawMember`].
pub(crate) const MEMBER_LEN: u64 = 32;

const _: () = assert!(std::mem::size_of::<RawHeader>() as u64 == HEADER_LEN);
const _: () = assert!(std::mem::size_of::<RawRecordHeader>() as u64 == RECORD_HEADER_LEN);
const _: () = assert!(std::mem::size_of::<RawMember>() as u64 == MEMBER_LEN);
const _: () = assert!(std::mem::size_of::<RawNativeHead>() == 64);

/// The record `T` at `off` in `b`, if it fits.
pub(crate) fn record_at<T: FromBytes + KnownLayout + Immutable + Unaligned>(
    b: &[u8],
    off: u64,
) -> Option<&T> {
    let start = usize::try_from(off).ok()?;
    let end = start.checked_add(std::mem::size_of::<T>())?;
    T::ref_from_bytes(b.get(start..end)?).ok()
}

/// The container's atomic-write helpers report [`crate::Error`]; the two
/// kinds they produce map onto this module's variants.
impl From<crate::Error> for Error {
    fn from(e: crate::Error) -> Error {
        match e {
            crate::Error::Io { op, path, source } => Error::Io { op, path, source },
            crate::Error::DestinationExists { path } => Error::DestinationExists { path },
            other => Error::Io {
                op: "write",
                path: std::path::PathBuf::new(),
                source: std::io::Error::other(other.to_string()),
            },
        }
    }
}
