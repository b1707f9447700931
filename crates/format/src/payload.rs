//! Payload formats of the structural sections: MetadataKv, TensorIndex,
//! DenseIndex, NativeDenseIndex, ExpertLayout and TokenizerAssets
//! (normative description: docs/FORMAT.md, "Section payloads").
//!
//! Each table starts with a 4-byte magic and a version, then fixed-size
//! little-endian records, then a blob of names. Encoders build the bytes;
//! parsers validate every count, offset and length against the payload with
//! checked arithmetic and never panic, then hand out borrowed views.

use crate::cursor::{Cursor, CursorError};
use crate::{Error, SectionKind};
use std::mem::size_of;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `"GKV1"`.
pub const KV_MAGIC: u32 = 0x3156_4B47;
/// `"GTI1"`.
pub const TENSOR_INDEX_MAGIC: u32 = 0x3149_5447;
/// `"GDI1"`.
pub const DENSE_INDEX_MAGIC: u32 = 0x3149_4447;
/// `"GNI1"`.
pub const NATIVE_INDEX_MAGIC: u32 = 0x3149_4E47;
/// `"GEL1"`.
pub const EXPERT_LAYOUT_MAGIC: u32 = 0x314C_4547;
/// `"GTA1"`.
pub const ASSETS_MAGIC: u32 = 0x3141_5447;
/// `"GMT1"`.
pub const MTP_MAGIC: u32 = 0x3154_4D47;
/// Version of every table in this module.
pub const TABLE_VERSION: u32 = 1;
/// `layout` value meaning "raw ggml blocks of `src_type`, not a native layout".
pub const LAYOUT_GGML: u32 = u32::MAX;
/// `file` value of an expert slice stored in the ExpertBlobs section.
pub const EXPERT_EMBEDDED: u32 = u32::MAX;
/// `file` value of an expert slice that does not exist (a layer without experts).
pub const EXPERT_ABSENT: u32 = u32::MAX - 1;

/// What is wrong with a section payload: matchable, and each variant names
/// the field, the offset (from the start of the payload) and what was
/// expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadProblem {
    /// A field or record runs past the end of the payload.
    #[error("{what} at offset {offset} needs {need} bytes, {remain} remain")]
    Short {
        /// The field or record.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Bytes it needs.
        need: u64,
        /// Bytes left.
        remain: u64,
    },
    /// The table's magic is wrong.
    #[error("magic is {found:#010x}, expected {expected:#010x}")]
    Magic {
        /// What the payload holds.
        found: u32,
        /// The table's magic.
        expected: u32,
    },
    /// A table version this reader does not know.
    #[error("table version {found}; this reader knows version {TABLE_VERSION}")]
    Version {
        /// The payload's version.
        found: u32,
    },
    /// A record count whose records cannot fit in what remains.
    #[error("{what} {count} × {record} bytes exceeds the {remain} bytes that remain")]
    Count {
        /// Which count.
        what: &'static str,
        /// Its value.
        count: u64,
        /// Bytes per record (at least).
        record: u64,
        /// Bytes left.
        remain: u64,
    },
    /// A value that does not fit in this machine's address space.
    #[error("{what} {value} does not fit in memory")]
    TooLarge {
        /// Which value.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// A string's range lies outside its blob.
    #[error("{what} [{offset}, +{len}) outside the {size}-byte blob")]
    StringRange {
        /// Which string.
        what: &'static str,
        /// Its offset in the blob.
        offset: u64,
        /// Its length.
        len: u64,
        /// The blob's size.
        size: u64,
    },
    /// A string that is not UTF-8.
    #[error("{what} at offset {offset} is not UTF-8")]
    NotUtf8 {
        /// Which string.
        what: &'static str,
        /// Its offset (in the payload for keys, in the blob otherwise).
        offset: u64,
    },
    /// Bytes after the last part of the table.
    #[error("{count} trailing bytes after the {after}")]
    Trailing {
        /// What should have ended the payload.
        after: &'static str,
        /// How many bytes follow it.
        count: u64,
    },
    /// A region that would start behind what was already read.
    #[error("{what} would start at offset {at}, behind {pos}")]
    Behind {
        /// The region.
        what: &'static str,
        /// Where it would start.
        at: u64,
        /// How far the table was read.
        pos: u64,
    },
    /// Two MetadataKv records with one key.
    #[error("duplicate key {0:?}")]
    DuplicateKey(String),
    /// The TensorIndex names blob is not where the records end, or does not
    /// end the payload.
    #[error("names blob at {found} (+{size}) must start at {expected} and end the {payload}-byte payload")]
    NamesBlob {
        /// Its recorded offset.
        found: u64,
        /// Its recorded size.
        size: u64,
        /// Where the records end.
        expected: u64,
        /// Payload size.
        payload: u64,
    },
    /// A tensor with no or more than four dimensions.
    #[error("tensor {index} ({name}) has {n_dims} dimensions (1 to 4)")]
    Dims {
        /// Position in the index.
        index: u64,
        /// Name.
        name: String,
        /// Its n_dims.
        n_dims: u32,
    },
    /// A tensor placed in a section kind that does not exist.
    #[error("tensor {name} lives in unknown section {section}")]
    UnknownSection {
        /// Name.
        name: String,
        /// The kind number.
        section: u32,
    },
    /// TensorIndex names out of order or repeated.
    #[error("names not sorted and unique at {0:?}")]
    Unsorted(String),
    /// A blob index whose blob size is not the blob section's.
    #[error("index says the blob is {declared} bytes, the blob section is {actual}")]
    BlobSize {
        /// Size in the index.
        declared: u64,
        /// Size of the section.
        actual: u64,
    },
    /// A blob index entry misaligned, overlapping the previous one or
    /// outside the blob.
    #[error("entry {index} [{offset}, +{size}) is misaligned (to {align}), overlapping or outside the {blob}-byte blob")]
    Entry {
        /// Position in the index.
        index: u64,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// The alignment required.
        align: u64,
        /// Blob size.
        blob: u64,
    },
    /// An ExpertLayout whose slice count is not layers × experts × 3.
    #[error("{slices} slices for {layers} layers × {experts} experts × 3 (expected {})", slices_expected(*.layers, *.experts))]
    SliceCount {
        /// Slices present.
        slices: u64,
        /// n_layers.
        layers: u32,
        /// n_expert.
        experts: u32,
    },
    /// A slice naming an external file the table does not list.
    #[error("slice {slice} names file {file} of {files}")]
    FileIndex {
        /// Slice index.
        slice: u64,
        /// The file index.
        file: u32,
        /// Files listed.
        files: u64,
    },
    /// An external file name that could leave the .gpack's directory.
    #[error("external file name {0:?} is not a plain file name (no directories, no ..)")]
    FileName(String),
    /// The Mtp section's draft tensor index is invalid.
    #[error("draft tensor index: {0}")]
    DraftIndex(Box<PayloadProblem>),
    /// A draft tensor outside the Mtp data area.
    #[error("draft tensor {name} [{offset}, +{size}) outside the {area}-byte data area")]
    DraftTensor {
        /// Name.
        name: String,
        /// Offset in the data area.
        offset: u64,
        /// Size.
        size: u64,
        /// Data area size.
        area: u64,
    },
    /// A TokenizerAssets file outside the blob.
    #[error("asset {name:?} data [{offset}, +{len}) outside the {size}-byte blob")]
    Asset {
        /// Asset name.
        name: String,
        /// Offset in the blob.
        offset: u64,
        /// Length.
        len: u64,
        /// Blob size.
        size: u64,
    },
    /// A single-tensor section shorter than its header.
    #[error("{size} bytes, shorter than its 64-byte header")]
    ShortHeader {
        /// Section size.
        size: u64,
    },
    /// A single-tensor header whose `data_offset` is not 64.
    #[error("data_offset is {0}, must be 64")]
    DataOffset(u64),
    /// A single-tensor header whose `byte_size` is not what follows it.
    #[error("byte_size is {declared}, the section holds {actual} bytes after the header")]
    ByteSize {
        /// Recorded size.
        declared: u64,
        /// Bytes after the header.
        actual: u64,
    },
    /// Reserved header bytes are set.
    #[error("reserved header bytes are not zero")]
    Reserved,
}

/// `layers × experts × 3` in words, also when it passes 2^64.
fn slices_expected(layers: u32, experts: u32) -> String {
    u64::from(layers)
        .checked_mul(u64::from(experts))
        .and_then(|v| v.checked_mul(3))
        .map_or("more than 2^64".to_string(), |v| v.to_string())
}

// The fixed-size records of the tables, exactly as they lie in the payload
// (little-endian, alignment 1, no padding). Variable parts (keys, values,
// names) are read by the one cursor below.

/// Magic and version: the first 8 bytes of every table.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct TableHead {
    magic: U32,
    version: U32,
}

/// TensorIndex: head, count, where the names blob starts and its size.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct TensorIndexHead {
    head: TableHead,
    count: U64,
    names_offset: U64,
    names_size: U64,
}

/// One TensorIndex record.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct TensorRecord {
    name_offset: U64,
    name_len: U32,
    n_dims: U32,
    dims: [U64; 4],
    src_type: U32,
    section: U32,
    layout: U32,
    group: U32,
    offset: U64,
    size: U64,
    row_start: U64,
    flags: U32,
    reserved: U32,
}

/// DenseIndex / NativeDenseIndex head.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct BlobIndexHead {
    head: TableHead,
    count: U64,
    blob_size: U64,
}

/// One DenseIndex / NativeDenseIndex record.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct BlobRecord {
    tensor: U32,
    layout: U32,
    offset: U64,
    size: U64,
    rows: U64,
    cols: U64,
}

/// ExpertLayout head.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct ExpertHead {
    head: TableHead,
    n_layers: U32,
    n_expert: U32,
    file_count: U64,
}

/// One external expert file.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct FileRecord {
    name_offset: U64,
    name_len: U64,
    size: U64,
}

/// One expert slice.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct SliceRecord {
    file: U32,
    layout: U32,
    src_type: U32,
    reserved: U32,
    offset: U64,
    size: U64,
    rows: U64,
    cols: U64,
    sha256: [u8; 32],
}

/// Head of the tables that are a magic, a version and one count
/// (MetadataKv, TokenizerAssets) or one size (Mtp).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct CountHead {
    head: TableHead,
    count: U64,
}

/// One TokenizerAssets file: its name and its bytes in the blob.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct AssetRecord {
    name_offset: U64,
    name_len: U64,
    data_offset: U64,
    data_len: U64,
}

/// The fixed part of a MetadataKv record before its key.
const KV_MIN_RECORD: usize = 16;
const TENSOR_REC: usize = 96;
const BLOB_REC: usize = 40;
const FILE_REC: usize = 24;
const SLICE_REC: usize = 80;
const ASSET_REC: usize = 32;

const _: () = assert!(size_of::<TableHead>() == 8);
const _: () = assert!(size_of::<TensorIndexHead>() == 32);
const _: () = assert!(size_of::<TensorRecord>() == TENSOR_REC);
const _: () = assert!(size_of::<BlobIndexHead>() == 24);
const _: () = assert!(size_of::<BlobRecord>() == BLOB_REC);
const _: () = assert!(size_of::<ExpertHead>() == 24);
const _: () = assert!(size_of::<FileRecord>() == FILE_REC);
const _: () = assert!(size_of::<SliceRecord>() == SLICE_REC);
const _: () = assert!(size_of::<CountHead>() == 16);
const _: () = assert!(size_of::<AssetRecord>() == ASSET_REC);

impl TableHead {
    fn new(magic: u32) -> Self {
        TableHead {
            magic: magic.into(),
            version: TABLE_VERSION.into(),
        }
    }
}

/// The payload tables' view of the one cursor ([`Cursor`]): its steps'
/// errors as [`PayloadProblem`]s, the table's section kind for the error.
struct Cur<'a> {
    c: Cursor<'a>,
    kind: SectionKind,
}

type Res<T> = std::result::Result<T, PayloadProblem>;

impl From<CursorError> for PayloadProblem {
    fn from(e: CursorError) -> Self {
        match e {
            CursorError::Short {
                what,
                offset,
                need,
                remain,
            } => PayloadProblem::Short {
                what,
                offset,
                need,
                remain,
            },
            CursorError::Count {
                what,
                count,
                record,
                remain,
            } => PayloadProblem::Count {
                what,
                count,
                record,
                remain,
            },
            CursorError::Behind { what, at, pos } => PayloadProblem::Behind { what, at, pos },
            CursorError::Trailing { after, count } => PayloadProblem::Trailing { after, count },
        }
    }
}

impl<'a> Cur<'a> {
    fn new(b: &'a [u8], kind: SectionKind) -> Self {
        Cur {
            c: Cursor::new(b),
            kind,
        }
    }
    fn remain(&self) -> usize {
        self.c.remain()
    }
    fn short(&self, what: &'static str, need: usize) -> PayloadProblem {
        PayloadProblem::Short {
            what,
            offset: self.c.pos() as u64,
            need: need as u64,
            remain: self.remain() as u64,
        }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Res<&'a [u8]> {
        Ok(self.c.take(n, what)?)
    }
    /// One fixed record.
    fn record<T: FromBytes + KnownLayout + Immutable + Unaligned>(
        &mut self,
        what: &'static str,
    ) -> Res<&'a T> {
        Ok(self.c.record(what)?)
    }
    /// `n` fixed records in a row.
    fn records<T: FromBytes + KnownLayout + Immutable + Unaligned>(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Res<&'a [T]> {
        Ok(self.c.records(n, what)?)
    }
    fn u32(&mut self, what: &'static str) -> Res<u32> {
        Ok(self.record::<U32>(what)?.get())
    }
    fn u64(&mut self, what: &'static str) -> Res<u64> {
        Ok(self.record::<U64>(what)?.get())
    }
    /// The table head: magic and version.
    fn head(head: &TableHead, magic: u32) -> Res<()> {
        let m = head.magic.get();
        if m != magic {
            return Err(PayloadProblem::Magic {
                found: m,
                expected: magic,
            });
        }
        let v = head.version.get();
        if v != TABLE_VERSION {
            return Err(PayloadProblem::Version { found: v });
        }
        Ok(())
    }
    /// A count of records of at least `rec` bytes each that must fit in what
    /// remains (so a count can never size an allocation past the payload).
    fn count(&self, n: u64, rec: usize, what: &'static str) -> Res<usize> {
        let remain = self.remain() as u64;
        if n.checked_mul(rec as u64).is_none_or(|need| need > remain) {
            return Err(PayloadProblem::Count {
                what,
                count: n,
                record: rec as u64,
                remain,
            });
        }
        Ok(n as usize)
    }
    fn end(&self, after: &'static str) -> Res<()> {
        Ok(self.c.end(after)?)
    }
    fn err(&self, problem: PayloadProblem) -> Error {
        Error::BadPayload {
            section: self.kind,
            problem,
        }
    }
}

fn to_usize(v: u64, what: &'static str) -> Res<usize> {
    usize::try_from(v).map_err(|_| PayloadProblem::TooLarge { what, value: v })
}

/// The string `[off, +len)` of `blob`.
fn str_in<'a>(blob: &'a [u8], off: u64, len: u64, what: &'static str) -> Res<&'a str> {
    let range = PayloadProblem::StringRange {
        what,
        offset: off,
        len,
        size: blob.len() as u64,
    };
    let end = off.checked_add(len).ok_or(range.clone())?;
    if end > blob.len() as u64 {
        return Err(range);
    }
    std::str::from_utf8(&blob[off as usize..end as usize])
        .map_err(|_| PayloadProblem::NotUtf8 { what, offset: off })
}

fn put(v: &mut Vec<u8>, record: &(impl IntoBytes + Immutable)) {
    v.extend_from_slice(record.as_bytes());
}

// ---------------------------------------------------------------- MetadataKv

/// One metadata record: a key, a GGUF value type id and the GGUF v3 encoding
/// of the value (decoded by `gpack-ingest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvRecord<'a> {
    /// Key.
    pub key: &'a str,
    /// GGUF value type id.
    pub value_type: u32,
    /// GGUF v3 encoding of the value.
    pub value: &'a [u8],
}

/// Encodes MetadataKv records in order.
pub fn encode_kv<'a>(records: impl IntoIterator<Item = KvRecord<'a>>) -> Vec<u8> {
    let mut body = Vec::new();
    let mut n = 0u64;
    for r in records {
        put(&mut body, &U32::new(r.key.len() as u32));
        body.extend_from_slice(r.key.as_bytes());
        put(&mut body, &U32::new(r.value_type));
        put(&mut body, &U64::new(r.value.len() as u64));
        body.extend_from_slice(r.value);
        n += 1;
    }
    let mut out = Vec::with_capacity(16 + body.len());
    put(
        &mut out,
        &CountHead {
            head: TableHead::new(KV_MAGIC),
            count: n.into(),
        },
    );
    out.extend_from_slice(&body);
    out
}

/// Parses a MetadataKv payload into its records (keys must be UTF-8 and
/// unique; records must tile the payload exactly).
pub fn parse_kv(b: &[u8]) -> Result<Vec<KvRecord<'_>>, Error> {
    let mut c = Cur::new(b, SectionKind::MetadataKv);
    parse_kv_in(&mut c).map_err(|p| c.err(p))
}

fn parse_kv_in<'a>(c: &mut Cur<'a>) -> Res<Vec<KvRecord<'a>>> {
    let h = c.record::<CountHead>("table head")?;
    Cur::head(&h.head, KV_MAGIC)?;
    let n = c.count(h.count.get(), KV_MIN_RECORD, "record count")?;
    let mut out = Vec::with_capacity(n);
    let mut seen = std::collections::HashSet::with_capacity(n);
    for _ in 0..n {
        let kl = c.u32("key length")? as usize;
        let at = c.c.pos() as u64;
        let key = std::str::from_utf8(c.take(kl, "key")?).map_err(|_| PayloadProblem::NotUtf8 {
            what: "key",
            offset: at,
        })?;
        let value_type = c.u32("value type")?;
        let vl = c.u64("value length")?;
        let value = c.take(to_usize(vl, "value length")?, "value")?;
        if !seen.insert(key) {
            return Err(PayloadProblem::DuplicateKey(key.to_string()));
        }
        out.push(KvRecord {
            key,
            value_type,
            value,
        });
    }
    c.end("records")?;
    Ok(out)
}

// --------------------------------------------------------------- TensorIndex

/// One tensor of the TensorIndex (96 bytes on disk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// Tensor name (GGUF naming).
    pub name: String,
    /// Dimensions, `ne0` first, 1 to 4 of them.
    pub dims: Vec<u64>,
    /// ggml type id of the source tensor.
    pub src_type: u32,
    /// Kind of the section that holds the bytes.
    pub section: u32,
    /// Native layout code, or [`LAYOUT_GGML`].
    pub layout: u32,
    /// Native layout group size (0 when not applicable).
    pub group: u32,
    /// Offset of the bytes within the section.
    pub offset: u64,
    /// Byte length.
    pub size: u64,
    /// First row of this tensor inside a fused native tensor (0 otherwise).
    pub row_start: u64,
    /// Reserved flags (0).
    pub flags: u32,
}

/// Encodes the TensorIndex, sorting entries by name.
pub fn encode_tensor_index(entries: &[TensorEntry]) -> Vec<u8> {
    let mut sorted: Vec<&TensorEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let names_off = size_of::<TensorIndexHead>() + TENSOR_REC * sorted.len();
    let names_size: usize = sorted.iter().map(|e| e.name.len()).sum();
    let mut out = Vec::with_capacity(names_off + names_size);
    put(
        &mut out,
        &TensorIndexHead {
            head: TableHead::new(TENSOR_INDEX_MAGIC),
            count: (sorted.len() as u64).into(),
            names_offset: (names_off as u64).into(),
            names_size: (names_size as u64).into(),
        },
    );
    let mut names = Vec::with_capacity(names_size);
    for e in sorted {
        let dim = |i: usize| U64::new(e.dims.get(i).copied().unwrap_or(1));
        put(
            &mut out,
            &TensorRecord {
                name_offset: (names.len() as u64).into(),
                name_len: (e.name.len() as u32).into(),
                n_dims: (e.dims.len() as u32).into(),
                dims: [dim(0), dim(1), dim(2), dim(3)],
                src_type: e.src_type.into(),
                section: e.section.into(),
                layout: e.layout.into(),
                group: e.group.into(),
                offset: e.offset.into(),
                size: e.size.into(),
                row_start: e.row_start.into(),
                flags: e.flags.into(),
                reserved: 0.into(),
            },
        );
        names.extend_from_slice(e.name.as_bytes());
    }
    out.extend_from_slice(&names);
    out
}

/// Parses the TensorIndex; names must be sorted and unique, sections known,
/// and 1 to 4 dimensions given.
pub fn parse_tensor_index(b: &[u8]) -> Result<Vec<TensorEntry>, Error> {
    let mut c = Cur::new(b, SectionKind::TensorIndex);
    parse_tensor_index_in(&mut c).map_err(|p| c.err(p))
}

fn parse_tensor_index_in(c: &mut Cur<'_>) -> Res<Vec<TensorEntry>> {
    let total = c.c.bytes().len() as u64;
    let h = c.record::<TensorIndexHead>("table head")?;
    Cur::head(&h.head, TENSOR_INDEX_MAGIC)?;
    let n = c.count(h.count.get(), TENSOR_REC, "tensor count")?;
    let (names_off, names_size) = (h.names_offset.get(), h.names_size.get());
    let expect_off = (size_of::<TensorIndexHead>() + n * TENSOR_REC) as u64;
    if names_off != expect_off || names_off.checked_add(names_size) != Some(total) {
        return Err(PayloadProblem::NamesBlob {
            found: names_off,
            size: names_size,
            expected: expect_off,
            payload: total,
        });
    }
    let records = c.records::<TensorRecord>(n, "tensor records")?;
    let names = c.take(c.remain(), "names")?;
    let mut out: Vec<TensorEntry> = Vec::with_capacity(n);
    for (i, r) in records.iter().enumerate() {
        let name = str_in(
            names,
            r.name_offset.get(),
            u64::from(r.name_len.get()),
            "tensor name",
        )?
        .to_string();
        let n_dims = r.n_dims.get();
        if !(1..=4).contains(&n_dims) {
            return Err(PayloadProblem::Dims {
                index: i as u64,
                name,
                n_dims,
            });
        }
        let section = r.section.get();
        if SectionKind::from_u32(section).is_none() {
            return Err(PayloadProblem::UnknownSection { name, section });
        }
        if out
            .last()
            .is_some_and(|p| p.name.as_bytes() >= name.as_bytes())
        {
            return Err(PayloadProblem::Unsorted(name));
        }
        out.push(TensorEntry {
            name,
            dims: r.dims[..n_dims as usize].iter().map(|d| d.get()).collect(),
            src_type: r.src_type.get(),
            section,
            layout: r.layout.get(),
            group: r.group.get(),
            offset: r.offset.get(),
            size: r.size.get(),
            row_start: r.row_start.get(),
            flags: r.flags.get(),
        });
    }
    Ok(out)
}

// -------------------------------------------------- DenseIndex, NativeDenseIndex

/// A row of the DenseIndex or the NativeDenseIndex: where one tensor's bytes
/// are in the DensePack or NativeDense blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobEntry {
    /// Position of the tensor in the TensorIndex.
    pub tensor: u32,
    /// ggml type (DenseIndex) or native layout code (NativeDenseIndex).
    pub layout: u32,
    /// Offset in the blob section.
    pub offset: u64,
    /// Byte length.
    pub size: u64,
    /// Rows (ne1; 1 for vectors).
    pub rows: u64,
    /// Columns (ne0).
    pub cols: u64,
}

/// Encodes a DenseIndex (`magic` = [`DENSE_INDEX_MAGIC`]) or a
/// NativeDenseIndex ([`NATIVE_INDEX_MAGIC`]); `blob_size` is the blob
/// section's size.
pub fn encode_blob_index(magic: u32, blob_size: u64, entries: &[BlobEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(size_of::<BlobIndexHead>() + entries.len() * BLOB_REC);
    put(
        &mut out,
        &BlobIndexHead {
            head: TableHead::new(magic),
            count: (entries.len() as u64).into(),
            blob_size: blob_size.into(),
        },
    );
    for e in entries {
        put(
            &mut out,
            &BlobRecord {
                tensor: e.tensor.into(),
                layout: e.layout.into(),
                offset: e.offset.into(),
                size: e.size.into(),
                rows: e.rows.into(),
                cols: e.cols.into(),
            },
        );
    }
    out
}

/// Parses a DenseIndex or NativeDenseIndex; every entry must lie inside a
/// blob of `blob_size` bytes, in increasing, non-overlapping order, aligned to
/// `align` (64 for DensePack, 256 for the NativeDense arena).
pub fn parse_blob_index(
    b: &[u8],
    kind: SectionKind,
    blob_size: u64,
    align: u64,
) -> Result<Vec<BlobEntry>, Error> {
    let magic = if kind == SectionKind::DenseIndex {
        DENSE_INDEX_MAGIC
    } else {
        NATIVE_INDEX_MAGIC
    };
    let mut c = Cur::new(b, kind);
    parse_blob_index_in(&mut c, magic, blob_size, align).map_err(|p| c.err(p))
}

fn parse_blob_index_in(
    c: &mut Cur<'_>,
    magic: u32,
    blob_size: u64,
    align: u64,
) -> Res<Vec<BlobEntry>> {
    let h = c.record::<BlobIndexHead>("table head")?;
    Cur::head(&h.head, magic)?;
    let n = c.count(h.count.get(), BLOB_REC, "entry count")?;
    if h.blob_size.get() != blob_size {
        return Err(PayloadProblem::BlobSize {
            declared: h.blob_size.get(),
            actual: blob_size,
        });
    }
    let records = c.records::<BlobRecord>(n, "entries")?;
    c.end("entries")?;
    let mut out = Vec::with_capacity(n);
    let mut prev_end = 0u64;
    for (i, r) in records.iter().enumerate() {
        let e = BlobEntry {
            tensor: r.tensor.get(),
            layout: r.layout.get(),
            offset: r.offset.get(),
            size: r.size.get(),
            rows: r.rows.get(),
            cols: r.cols.get(),
        };
        let end = e.offset.checked_add(e.size);
        if e.offset < prev_end
            || end.is_none_or(|x| x > blob_size)
            || align == 0
            || !e.offset.is_multiple_of(align)
        {
            return Err(PayloadProblem::Entry {
                index: i as u64,
                offset: e.offset,
                size: e.size,
                align,
                blob: blob_size,
            });
        }
        prev_end = end.unwrap_or(0);
        out.push(e);
    }
    Ok(out)
}

// -------------------------------------------------------------- ExpertLayout

/// A file holding external expert slices, next to the .gpack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertFile {
    /// Plain file name (no directory part, no `..`).
    pub name: String,
    /// Its exact size in bytes.
    pub size: u64,
}

/// One expert slice (gate, up or down of one expert of one layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertSlice {
    /// Index into the files, [`EXPERT_EMBEDDED`] or [`EXPERT_ABSENT`].
    pub file: u32,
    /// Native layout code, or [`LAYOUT_GGML`] for raw ggml blocks.
    pub layout: u32,
    /// ggml type of the source.
    pub src_type: u32,
    /// Offset in ExpertBlobs or in the external file.
    pub offset: u64,
    /// Byte length.
    pub size: u64,
    /// Rows of this expert's matrix.
    pub rows: u64,
    /// Columns.
    pub cols: u64,
    /// SHA-256 of the slice's bytes (external slices; zero when embedded).
    pub sha256: [u8; 32],
}

/// The ExpertLayout table: `n_layers × n_expert × 3` slices (gate, up, down).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertLayout {
    /// Layers (block_count).
    pub n_layers: u32,
    /// Experts per layer.
    pub n_expert: u32,
    /// External files (empty when embedded).
    pub files: Vec<ExpertFile>,
    /// Slices, index `((layer × n_expert) + expert) × 3 + part`.
    pub slices: Vec<ExpertSlice>,
}

impl ExpertLayout {
    /// The slice of `part` (0 gate, 1 up, 2 down) of `expert` in `layer`.
    pub fn slice(&self, layer: usize, expert: usize, part: usize) -> Option<&ExpertSlice> {
        self.slices
            .get((layer * self.n_expert as usize + expert) * 3 + part)
    }

    /// Encodes the table.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put(
            &mut out,
            &ExpertHead {
                head: TableHead::new(EXPERT_LAYOUT_MAGIC),
                n_layers: self.n_layers.into(),
                n_expert: self.n_expert.into(),
                file_count: (self.files.len() as u64).into(),
            },
        );
        let mut names = Vec::new();
        for f in &self.files {
            put(
                &mut out,
                &FileRecord {
                    name_offset: (names.len() as u64).into(),
                    name_len: (f.name.len() as u64).into(),
                    size: f.size.into(),
                },
            );
            names.extend_from_slice(f.name.as_bytes());
        }
        put(&mut out, &U64::new(self.slices.len() as u64));
        for s in &self.slices {
            put(
                &mut out,
                &SliceRecord {
                    file: s.file.into(),
                    layout: s.layout.into(),
                    src_type: s.src_type.into(),
                    reserved: 0.into(),
                    offset: s.offset.into(),
                    size: s.size.into(),
                    rows: s.rows.into(),
                    cols: s.cols.into(),
                    sha256: s.sha256,
                },
            );
        }
        put(&mut out, &U64::new(names.len() as u64));
        out.extend_from_slice(&names);
        out
    }

    /// Parses and validates the table: slice count = layers × experts × 3,
    /// file indices in range, file names plain (no `/`, `\`, `..`, NUL).
    pub fn parse(b: &[u8]) -> Result<ExpertLayout, Error> {
        let mut c = Cur::new(b, SectionKind::ExpertLayout);
        Self::parse_in(&mut c).map_err(|p| c.err(p))
    }

    fn parse_in(c: &mut Cur<'_>) -> Res<ExpertLayout> {
        let h = c.record::<ExpertHead>("table head")?;
        Cur::head(&h.head, EXPERT_LAYOUT_MAGIC)?;
        let (n_layers, n_expert) = (h.n_layers.get(), h.n_expert.get());
        let nf = c.count(h.file_count.get(), FILE_REC, "file count")?;
        let raw_files = c.records::<FileRecord>(nf, "file records")?;
        let ns_raw = c.u64("slice count")?;
        let ns = c.count(ns_raw, SLICE_REC, "slice count")?;
        let expect = u64::from(n_layers)
            .checked_mul(u64::from(n_expert))
            .and_then(|v| v.checked_mul(3));
        if expect != Some(ns as u64) {
            return Err(PayloadProblem::SliceCount {
                slices: ns as u64,
                layers: n_layers,
                experts: n_expert,
            });
        }
        let raw_slices = c.records::<SliceRecord>(ns, "slice records")?;
        let names_size = to_usize(c.u64("names size")?, "names size")?;
        let names = c.take(names_size, "names")?;
        c.end("names")?;
        let mut slices = Vec::with_capacity(ns);
        for (i, r) in raw_slices.iter().enumerate() {
            let file = r.file.get();
            if file != EXPERT_EMBEDDED && file != EXPERT_ABSENT && file as usize >= nf {
                return Err(PayloadProblem::FileIndex {
                    slice: i as u64,
                    file,
                    files: nf as u64,
                });
            }
            slices.push(ExpertSlice {
                file,
                layout: r.layout.get(),
                src_type: r.src_type.get(),
                offset: r.offset.get(),
                size: r.size.get(),
                rows: r.rows.get(),
                cols: r.cols.get(),
                sha256: r.sha256,
            });
        }
        let mut files = Vec::with_capacity(nf);
        for f in raw_files {
            let name = str_in(names, f.name_offset.get(), f.name_len.get(), "file name")?;
            if !is_plain_file_name(name) {
                return Err(PayloadProblem::FileName(name.to_string()));
            }
            files.push(ExpertFile {
                name: name.to_string(),
                size: f.size.get(),
            });
        }
        Ok(ExpertLayout {
            n_layers,
            n_expert,
            files,
            slices,
        })
    }
}

/// A name that can only resolve to a file in the same directory.
pub fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.contains("..")
}

// ------------------------------------------------------------------------ Mtp

/// MetadataKv key prefix of a draft model packed in the Mtp section
/// (`gpack convert --draft`): its own keys (`gpack.draft.general.architecture`,
/// `gpack.draft.llama.block_count`, …), not its tokenizer's, which is the
/// model's. An Mtp section without `gpack.draft.general.architecture` holds a
/// draft module that is not a whole model (`--mtp-dir`).
pub const DRAFT_KEY_PREFIX: &str = "gpack.draft.";

/// Alignment of tensors in the Mtp data area (relative to the section start).
pub const MTP_ALIGN: u64 = 256;

/// The head of an Mtp payload: its TensorIndex bytes and where the data area
/// starts. Tensor offsets in that index are relative to the data area.
pub fn encode_mtp_head(index: &[u8]) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(16 + index.len());
    put(
        &mut out,
        &CountHead {
            head: TableHead::new(MTP_MAGIC),
            count: (index.len() as u64).into(),
        },
    );
    out.extend_from_slice(index);
    let data_start = (out.len() as u64).div_ceil(MTP_ALIGN) * MTP_ALIGN;
    out.resize(data_start as usize, 0);
    (out, data_start)
}

/// Parses an Mtp payload: its tensor index and data area, every tensor inside it.
pub fn parse_mtp(b: &[u8]) -> Result<(Vec<TensorEntry>, &[u8]), Error> {
    let mut c = Cur::new(b, SectionKind::Mtp);
    parse_mtp_in(&mut c).map_err(|p| c.err(p))
}

fn parse_mtp_in<'a>(c: &mut Cur<'a>) -> Res<(Vec<TensorEntry>, &'a [u8])> {
    let h = c.record::<CountHead>("table head")?;
    Cur::head(&h.head, MTP_MAGIC)?;
    let n = to_usize(h.count.get(), "index size")?;
    let index = c.take(n, "tensor index")?;
    let entries = parse_tensor_index_in(&mut Cur::new(index, SectionKind::Mtp))
        .map_err(|p| PayloadProblem::DraftIndex(Box::new(p)))?;
    let start = (c.c.pos() as u64).div_ceil(MTP_ALIGN) * MTP_ALIGN;
    let data = usize::try_from(start)
        .ok()
        .and_then(|s| c.c.bytes().get(s..))
        .ok_or(c.short("data area", (start as usize).saturating_sub(c.c.pos())))?;
    for e in &entries {
        if e.offset
            .checked_add(e.size)
            .is_none_or(|end| end > data.len() as u64)
        {
            return Err(PayloadProblem::DraftTensor {
                name: e.name.clone(),
                offset: e.offset,
                size: e.size,
                area: data.len() as u64,
            });
        }
    }
    Ok((entries, data))
}

// ----------------------------------------------------------- TokenizerAssets

/// Encodes raw files (name, bytes) as the TokenizerAssets payload.
pub fn encode_assets<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let files: Vec<(&str, &[u8])> = files.into_iter().collect();
    let mut out = Vec::new();
    put(
        &mut out,
        &CountHead {
            head: TableHead::new(ASSETS_MAGIC),
            count: (files.len() as u64).into(),
        },
    );
    let mut blob = Vec::new();
    for (name, data) in &files {
        let name_offset = blob.len() as u64;
        blob.extend_from_slice(name.as_bytes());
        let data_offset = blob.len() as u64;
        blob.extend_from_slice(data);
        put(
            &mut out,
            &AssetRecord {
                name_offset: name_offset.into(),
                name_len: (name.len() as u64).into(),
                data_offset: data_offset.into(),
                data_len: (data.len() as u64).into(),
            },
        );
    }
    put(&mut out, &U64::new(blob.len() as u64));
    out.extend_from_slice(&blob);
    out
}

/// Parses the TokenizerAssets payload into (name, bytes) pairs.
pub fn parse_assets(b: &[u8]) -> Result<Vec<(&str, &[u8])>, Error> {
    let mut c = Cur::new(b, SectionKind::TokenizerAssets);
    parse_assets_in(&mut c).map_err(|p| c.err(p))
}

fn parse_assets_in<'a>(c: &mut Cur<'a>) -> Res<Vec<(&'a str, &'a [u8])>> {
    let h = c.record::<CountHead>("table head")?;
    Cur::head(&h.head, ASSETS_MAGIC)?;
    let n = c.count(h.count.get(), ASSET_REC, "file count")?;
    let recs = c.records::<AssetRecord>(n, "file records")?;
    let size = to_usize(c.u64("blob size")?, "blob size")?;
    let blob = c.take(size, "blob")?;
    c.end("blob")?;
    let mut out = Vec::with_capacity(n);
    for r in recs {
        let name = str_in(blob, r.name_offset.get(), r.name_len.get(), "asset name")?;
        let (off, len) = (r.data_offset.get(), r.data_len.get());
        let end = off.checked_add(len).filter(|&e| e <= blob.len() as u64);
        let Some(end) = end else {
            return Err(PayloadProblem::Asset {
                name: name.to_string(),
                offset: off,
                len,
                size: blob.len() as u64,
            });
        };
        out.push((name, &blob[off as usize..end as usize]));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_round_trip() {
        let kv = encode_kv([
            KvRecord {
                key: "a",
                value_type: 4,
                value: &[1, 0, 0, 0],
            },
            KvRecord {
                key: "general.name",
                value_type: 8,
                value: b"\x02\0\0\0\0\0\0\0hi",
            },
        ]);
        let r = parse_kv(&kv).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].key, "general.name");
        for cut in 0..kv.len() {
            assert!(parse_kv(&kv[..cut]).is_err());
        }

        let t = vec![
            TensorEntry {
                name: "b".into(),
                dims: vec![4, 2],
                src_type: 0,
                section: 5,
                layout: 0,
                group: 0,
                offset: 256,
                size: 9,
                row_start: 0,
                flags: 0,
            },
            TensorEntry {
                name: "a".into(),
                dims: vec![4],
                src_type: 0,
                section: 3,
                layout: LAYOUT_GGML,
                group: 0,
                offset: 0,
                size: 16,
                row_start: 0,
                flags: 0,
            },
        ];
        let enc = encode_tensor_index(&t);
        let dec = parse_tensor_index(&enc).unwrap();
        assert_eq!(dec[0], t[1]);
        assert_eq!(dec[1], t[0]);
        for cut in 0..enc.len() {
            assert!(parse_tensor_index(&enc[..cut]).is_err());
        }

        let e = vec![
            BlobEntry {
                tensor: 1,
                layout: 0,
                offset: 0,
                size: 10,
                rows: 1,
                cols: 10,
            },
            BlobEntry {
                tensor: 0,
                layout: 0,
                offset: 64,
                size: 10,
                rows: 1,
                cols: 10,
            },
        ];
        let enc = encode_blob_index(DENSE_INDEX_MAGIC, 74, &e);
        assert_eq!(
            parse_blob_index(&enc, SectionKind::DenseIndex, 74, 64).unwrap(),
            e
        );
        assert!(parse_blob_index(&enc, SectionKind::DenseIndex, 73, 64).is_err());

        let el = ExpertLayout {
            n_layers: 1,
            n_expert: 1,
            files: vec![ExpertFile {
                name: "m-00001-of-00002.gguf".into(),
                size: 99,
            }],
            slices: vec![
                ExpertSlice {
                    file: 0,
                    layout: LAYOUT_GGML,
                    src_type: 8,
                    offset: 1,
                    size: 2,
                    rows: 3,
                    cols: 4,
                    sha256: [7; 32]
                };
                3
            ],
        };
        assert_eq!(ExpertLayout::parse(&el.encode()).unwrap(), el);
        let mut bad = el.clone();
        bad.files[0].name = "../etc/passwd".into();
        assert!(ExpertLayout::parse(&bad.encode()).is_err());
        // layers × experts × 3 past 2^64 is an error, not a wrapped count.
        let mut huge = el.clone();
        huge.n_layers = u32::MAX;
        huge.n_expert = u32::MAX;
        let e = ExpertLayout::parse(&huge.encode()).unwrap_err().to_string();
        assert!(e.contains("more than 2^64"), "{e}");

        let a = encode_assets([("tokenizer.json", &b"{}"[..]), ("x", &b""[..])]);
        assert_eq!(
            parse_assets(&a).unwrap(),
            vec![("tokenizer.json", &b"{}"[..]), ("x", &b""[..])]
        );
    }
}
