//! The GIW reader: validates once at open, then hands out borrowed payloads.
//!
//! `open` maps the file, checks the header, the CRC-32 over every byte before
//! it, and that the records tile the weights region exactly (no gaps, no
//! overlaps, zero padding). A payload is aliased from the mapping when its
//! address is 16-aligned (always, for a mapped file this crate wrote: the
//! mapping is page-aligned and every payload sits at a 16-aligned offset) and
//! copied into an aligned heap buffer only when it is not; the copies are
//! counted ([`Giw::copied_payloads`]) so a loader can report them.
//! Never panics on malformed input.

use super::{
    add, align, io, mul, record_at, BundleHeader, Error, RawHeader, RawMember, RawNativeHead,
    RawRecordHeader, RecordProblem, Result, Target, ALIGN, BUNDLE_VERSION, ENDIAN_MARKER,
    F16_SCALES_SINCE, FUSED_SINCE, HEADER_LEN, MAGIC, MAX_DIMS, MAX_MEMBERS, MAX_NAME_LEN,
    MAX_QUANT_LEN, MEMBER_LEN, MIN_WEIGHTS_VERSION, NATIVE_FLAG_F16_SCALES, RECORD_HEADER_LEN,
    WEIGHTS_VERSION,
};
use crate::mmap::Mmap;
use std::collections::HashMap;
use std::path::Path;
use zerocopy::little_endian::U32;
use zerocopy::IntoBytes;

/// Reader options.
#[derive(Clone, Copy, Debug)]
pub struct ReadOptions {
    /// Newest weights format accepted (default: [`WEIGHTS_VERSION`]). Tests
    /// lower it to play an older reader.
    pub max_weights_version: u16,
    /// Check the trailing CRC-32 (default true; reads every byte once).
    pub verify_crc: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_weights_version: WEIGHTS_VERSION,
            verify_crc: true,
        }
    }
}

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// One serialized native tensor.
    Native,
    /// Raw ggml bytes (norms, biases).
    Dense,
    /// A fused group: one native tensor, members as row ranges (v13+).
    Group,
}

/// A member of a fused group record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    /// Tensor name.
    pub name: String,
    /// First row in the group's native tensor.
    pub row_start: u64,
    /// Rows.
    pub rows: u64,
}

/// One validated record descriptor.
#[derive(Clone, Debug)]
pub struct Record {
    /// Kind.
    pub kind: RecordKind,
    /// Tensor name (group name for a group).
    pub name: String,
    /// Payload offset in the file (16-aligned).
    pub payload_off: u64,
    /// Payload length.
    pub payload_len: u64,
    /// ggml type id (dense records), else 0.
    pub ggml_type: u32,
    /// Dimensions, ne0 first (dense records), else empty.
    pub dims: Vec<u64>,
    /// Group members in row order (group records), else empty.
    pub members: Vec<GroupMember>,
    /// The native tensor's flags word (native and group records).
    pub native_flags: u32,
    /// The native tensor's rows (native and group records).
    pub native_rows: u64,
}

/// Whether the members asked for are stored as one fused tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fused {
    /// All members are row ranges of group record `record`, adjacent and in
    /// the order asked: `(row_start, rows)` per member.
    Contiguous {
        /// The group record.
        record: usize,
        /// Row range of each member, in the order asked.
        rows: Vec<(u64, u64)>,
    },
    /// All members exist, but not as one adjacent run (separate records, or
    /// a group whose member order differs).
    Separate,
    /// A member does not exist (e.g. a K=V layer without `attn_v`).
    Absent {
        /// The first missing name.
        missing: String,
    },
}

/// 16-aligned owned bytes (a `Vec<u128>` viewed as bytes).
struct AlignedBytes {
    words: Vec<u128>,
    start: usize,
    len: usize,
}

impl AlignedBytes {
    fn copy_of(b: &[u8], start: usize) -> AlignedBytes {
        let n = (start + b.len()).div_ceil(16);
        let mut words = vec![0u128; n];
        words.as_mut_bytes()[start..start + b.len()].copy_from_slice(b);
        AlignedBytes {
            words,
            start,
            len: b.len(),
        }
    }
    fn bytes(&self) -> &[u8] {
        &self.words.as_bytes()[self.start..self.start + self.len]
    }
}

enum Backing {
    Map(Mmap),
    Heap(AlignedBytes),
}

/// An opened, validated GIW bundle.
pub struct Giw {
    backing: Backing,
    header: BundleHeader,
    records: Vec<Record>,
    /// name → (record, member index within a group).
    index: HashMap<String, (usize, Option<usize>)>,
    copies: Vec<Option<AlignedBytes>>,
    copied: usize,
}

impl std::fmt::Debug for Giw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Giw")
            .field("header", &self.header)
            .field("records", &self.records.len())
            .field("copied", &self.copied)
            .finish()
    }
}

fn invalid(what: &'static str, offset: u64, found: u64) -> Error {
    Error::Invalid {
        what,
        offset,
        found,
    }
}

/// Parses and checks the 64-byte header against the file size and `opts`.
fn parse_header(b: &[u8], opts: &ReadOptions) -> Result<BundleHeader> {
    let size = b.len() as u64;
    if size < HEADER_LEN + 4 {
        return Err(Error::Truncated {
            size,
            needed: HEADER_LEN + 4,
        });
    }
    let r: &RawHeader = record_at(b, 0).ok_or(Error::Truncated {
        size,
        needed: HEADER_LEN + 4,
    })?;
    let magic = r.magic.get();
    if magic != MAGIC {
        return Err(Error::BadMagic {
            what: "magic",
            expected: MAGIC,
            found: magic,
        });
    }
    let endian = r.endian.get();
    if endian != ENDIAN_MARKER {
        return Err(Error::BadMagic {
            what: "endianness marker",
            expected: ENDIAN_MARKER,
            found: endian,
        });
    }
    let bv = r.bundle_version.get();
    if bv != BUNDLE_VERSION {
        return Err(Error::BundleVersion {
            expected: BUNDLE_VERSION,
            found: bv,
        });
    }
    let wv = r.weights_version.get();
    let max = opts.max_weights_version;
    if wv > max {
        return Err(Error::NewerWeightsFormat {
            found: wv,
            min: MIN_WEIGHTS_VERSION,
            max,
        });
    }
    if wv < MIN_WEIGHTS_VERSION {
        return Err(Error::OlderWeightsFormat {
            found: wv,
            min: MIN_WEIGHTS_VERSION,
            max,
        });
    }
    let tc = r.target.get();
    let target = Target::from_code(tc).ok_or(invalid("target", 12, tc.into()))?;
    let reserved = r.reserved.get();
    if reserved != 0 {
        return Err(invalid("reserved header field", 14, reserved.into()));
    }
    let q = &r.quant;
    let qn = q.iter().position(|&c| c == 0).unwrap_or(MAX_QUANT_LEN);
    if qn == 0 || !q[..qn].iter().all(u8::is_ascii_graphic) || q[qn..].iter().any(|&c| c != 0) {
        return Err(invalid("quant label", 16, qn as u64));
    }
    let quant = String::from_utf8_lossy(&q[..qn]).into_owned();
    let h = BundleHeader {
        weights_version: wv,
        target,
        quant,
        record_count: r.record_count.get(),
        meta_off: r.meta_off.get(),
        meta_len: r.meta_len.get(),
        weights_off: r.weights_off.get(),
        weights_len: r.weights_len.get(),
    };
    if h.meta_off != HEADER_LEN {
        return Err(invalid("metadata offset", 32, h.meta_off));
    }
    let meta_end = add(h.meta_off, h.meta_len, "metadata end")?;
    if h.weights_off != align(meta_end, "weights offset")? {
        return Err(invalid("weights offset", 48, h.weights_off));
    }
    let needed = add(
        add(h.weights_off, h.weights_len, "weights end")?,
        4,
        "file size",
    )?;
    if needed != size {
        return Err(Error::Truncated { size, needed });
    }
    if !h.weights_len.is_multiple_of(ALIGN) {
        return Err(invalid("weights length", 56, h.weights_len));
    }
    Ok(h)
}

fn zero_pad(b: &[u8], from: u64, to: u64, index: usize, name: &str) -> Result<()> {
    if b[from as usize..to as usize].iter().any(|&c| c != 0) {
        return Err(Error::BadRecord {
            index,
            name: name.to_string(),
            problem: RecordProblem::NonZeroPadding,
        });
    }
    Ok(())
}

fn read_name(b: &[u8], off: u64, len: u32, index: usize) -> Result<String> {
    let bad = |problem| Error::BadRecord {
        index,
        name: String::new(),
        problem,
    };
    if len == 0 || len > MAX_NAME_LEN {
        return Err(bad(RecordProblem::NameLength));
    }
    let end = add(off, u64::from(len), "name end")?;
    let s = b
        .get(off as usize..end as usize)
        .ok_or(bad(RecordProblem::NamePastRegion))?;
    String::from_utf8(s.to_vec()).map_err(|_| bad(RecordProblem::NameNotUtf8))
}

/// Parses the records of `b[weights_off .. weights_off + weights_len]`.
fn parse_records(b: &[u8], h: &BundleHeader) -> Result<Vec<Record>> {
    let end = h.weights_off + h.weights_len;
    // The region is bounded by the file; a record is at least 80 bytes.
    let cap = (h.weights_len / (RECORD_HEADER_LEN + ALIGN)) as usize;
    if h.record_count as usize > cap {
        return Err(invalid("record count", 28, h.record_count.into()));
    }
    let b = &b[..end as usize];
    let mut out = Vec::with_capacity(h.record_count as usize);
    let mut pos = h.weights_off;
    while pos < end {
        let index = out.len();
        if index >= h.record_count as usize {
            return Err(Error::BadRecord {
                index,
                name: String::new(),
                problem: RecordProblem::MoreThanCount,
            });
        }
        let bad = |name: &str, problem| Error::BadRecord {
            index,
            name: name.to_string(),
            problem,
        };
        let hend = add(pos, RECORD_HEADER_LEN, "record header end")?;
        let rh: &RawRecordHeader =
            record_at(b, pos).ok_or(bad("", RecordProblem::HeaderPastRegion))?;
        let kind = match rh.kind.get() {
            1 => RecordKind::Native,
            2 => RecordKind::Dense,
            3 if h.weights_version >= FUSED_SINCE => RecordKind::Group,
            3 => return Err(bad("", RecordProblem::GroupBeforeV13)),
            _ => return Err(bad("", RecordProblem::UnknownKind)),
        };
        let name_len = rh.name_len.get();
        let count = rh.count.get();
        let ggml_type = rh.ggml_type.get();
        let payload_len = rh.payload_len.get();
        let name = read_name(b, hend, name_len, index)?;
        let dims_raw: Vec<u64> = rh.dims.iter().map(|d| d.get()).collect();
        if rh.reserved.get() != 0 {
            return Err(bad(&name, RecordProblem::ReservedRecordField));
        }
        let mut dims = Vec::new();
        match kind {
            RecordKind::Dense => {
                if count == 0 || count > MAX_DIMS {
                    return Err(bad(&name, RecordProblem::DenseDimCount));
                }
                dims = dims_raw[..count as usize].to_vec();
                if dims_raw[count as usize..].iter().any(|&d| d != 0) {
                    return Err(bad(&name, RecordProblem::UnusedDim));
                }
                let mut n = 1u64;
                for &d in &dims {
                    n = mul(n, d, "element count")?;
                }
                if n == 0 {
                    return Err(bad(&name, RecordProblem::ZeroDim));
                }
            }
            _ => {
                if ggml_type != 0 || dims_raw.iter().any(|&d| d != 0) {
                    return Err(bad(&name, RecordProblem::NativeWithDenseFields));
                }
                if kind == RecordKind::Native && count != 0 {
                    return Err(bad(&name, RecordProblem::NativeWithMembers));
                }
                if kind == RecordKind::Group && !(2..=MAX_MEMBERS).contains(&count) {
                    return Err(bad(&name, RecordProblem::GroupMemberCount));
                }
            }
        }
        let name_end = add(hend, name_len.into(), "name end")?;
        let mut p = align(name_end, "name padding")?;
        if p > end {
            return Err(bad(&name, RecordProblem::PastRegion));
        }
        zero_pad(b, name_end, p, index, &name)?;
        let mut members = Vec::new();
        if kind == RecordKind::Group {
            for _ in 0..count {
                let e_end = add(p, MEMBER_LEN, "member entry")?;
                let e: &RawMember =
                    record_at(b, p).ok_or(bad(&name, RecordProblem::MembersPastRegion))?;
                if e.reserved0.get() != 0 || e.reserved1.get() != 0 {
                    return Err(bad(&name, RecordProblem::ReservedMemberField));
                }
                let mname = read_name(b, e_end, e.name_len.get(), index)?;
                let mend = add(e_end, e.name_len.get().into(), "member name end")?;
                let next = align(mend, "member padding")?;
                if next > end {
                    return Err(bad(&name, RecordProblem::MembersPastRegion));
                }
                zero_pad(b, mend, next, index, &name)?;
                members.push(GroupMember {
                    name: mname,
                    row_start: e.row_start.get(),
                    rows: e.rows.get(),
                });
                p = next;
            }
        }
        let payload_off = p;
        let payload_end = add(payload_off, payload_len, "payload end")?;
        let next = align(payload_end, "payload padding")?;
        if payload_len == 0 || next > end {
            return Err(bad(&name, RecordProblem::PayloadRange));
        }
        zero_pad(b, payload_end, next, index, &name)?;
        let (mut native_flags, mut native_rows) = (0, 0);
        if kind != RecordKind::Dense {
            // The serialized native tensor's own header: flags @8, rows @16.
            if payload_len < 64 {
                return Err(bad(&name, RecordProblem::NativeShort));
            }
            let ph: &RawNativeHead =
                record_at(b, payload_off).ok_or(bad(&name, RecordProblem::NativeShort))?;
            native_flags = ph.flags.get();
            native_rows = ph.rows.get();
            if native_flags & NATIVE_FLAG_F16_SCALES != 0 && h.weights_version < F16_SCALES_SINCE {
                return Err(bad(&name, RecordProblem::F16ScalesBeforeV14));
            }
        }
        // Members tile whatever they cover without overlapping and stay
        // inside the tensor; contiguity is checked per request (`fused`).
        let mut covered = 0u64;
        for m in &members {
            let e = add(m.row_start, m.rows, "member rows")?;
            if m.rows == 0 || e > native_rows {
                return Err(bad(&name, RecordProblem::MemberRowsOutside));
            }
            covered = add(covered, m.rows, "member rows")?;
        }
        if covered > native_rows {
            return Err(bad(&name, RecordProblem::MemberRowsOverlap));
        }
        out.push(Record {
            kind,
            name,
            payload_off,
            payload_len,
            ggml_type,
            dims,
            members,
            native_flags,
            native_rows,
        });
        pos = next;
    }
    if out.len() != h.record_count as usize {
        return Err(invalid("record count", 28, h.record_count.into()));
    }
    Ok(out)
}

impl Giw {
    /// Maps `path` and validates it with the default [`ReadOptions`].
    pub fn open(path: &Path) -> Result<Giw> {
        Self::open_with(path, &ReadOptions::default())
    }

    /// Maps `path` and validates it.
    pub fn open_with(path: &Path, opts: &ReadOptions) -> Result<Giw> {
        let f = std::fs::File::open(path).map_err(io("open", path))?;
        let map = crate::mmap::map_file(&f).map_err(io("map", path))?;
        Self::build(Backing::Map(map), opts)
    }

    /// Validates an in-memory bundle, copied into a heap buffer starting
    /// `misalign` bytes after a 16-aligned address (0 for a normal load; a
    /// non-zero value makes every payload unaligned, so each is copied).
    pub fn from_bytes(bytes: &[u8], misalign: usize, opts: &ReadOptions) -> Result<Giw> {
        Self::build(
            Backing::Heap(AlignedBytes::copy_of(bytes, misalign % 16)),
            opts,
        )
    }

    fn build(backing: Backing, opts: &ReadOptions) -> Result<Giw> {
        let b: &[u8] = match &backing {
            Backing::Map(m) => m,
            Backing::Heap(h) => h.bytes(),
        };
        let header = parse_header(b, opts)?;
        if opts.verify_crc {
            let n = b.len() - 4;
            let stored = record_at::<U32>(b, n as u64).map_or(0, |v| v.get());
            let computed = crc32fast::hash(&b[..n]);
            if stored != computed {
                return Err(Error::Crc { stored, computed });
            }
        }
        let records = parse_records(b, &header)?;
        let mut index = HashMap::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let dup = |name: &str| Error::BadRecord {
                index: i,
                name: name.to_string(),
                problem: RecordProblem::DuplicateName,
            };
            if r.kind == RecordKind::Group {
                for (j, m) in r.members.iter().enumerate() {
                    if index.insert(m.name.clone(), (i, Some(j))).is_some() {
                        return Err(dup(&m.name));
                    }
                }
            } else if index.insert(r.name.clone(), (i, None)).is_some() {
                return Err(dup(&r.name));
            }
        }
        let mut copies = Vec::with_capacity(records.len());
        let mut copied = 0;
        for r in &records {
            let p = &b[r.payload_off as usize..(r.payload_off + r.payload_len) as usize];
            if (p.as_ptr() as usize).is_multiple_of(ALIGN as usize) {
                copies.push(None);
            } else {
                copies.push(Some(AlignedBytes::copy_of(p, 0)));
                copied += 1;
            }
        }
        Ok(Giw {
            backing,
            header,
            records,
            index,
            copies,
            copied,
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Map(m) => m,
            Backing::Heap(h) => h.bytes(),
        }
    }

    /// The bundle header.
    pub fn header(&self) -> &BundleHeader {
        &self.header
    }

    /// The metadata GGUF (truncated at its tensor-data boundary).
    pub fn metadata(&self) -> &[u8] {
        let o = self.header.meta_off as usize;
        &self.bytes()[o..o + self.header.meta_len as usize]
    }

    /// The records, in file order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Record `i`'s payload: aliased from the file, or its aligned copy.
    /// Always 16-byte aligned. Panics if `i` is out of range.
    pub fn payload(&self, i: usize) -> &[u8] {
        if let Some(c) = &self.copies[i] {
            return c.bytes();
        }
        let r = &self.records[i];
        &self.bytes()[r.payload_off as usize..(r.payload_off + r.payload_len) as usize]
    }

    /// Whether record `i`'s payload is a view of the file (not a copy).
    pub fn is_aliased(&self, i: usize) -> bool {
        self.copies.get(i).is_some_and(Option::is_none)
    }

    /// How many payloads had to be copied because they were not aligned.
    pub fn copied_payloads(&self) -> usize {
        self.copied
    }

    /// Where tensor `name` is: its record and, for a group member, its index
    /// among the members.
    pub fn find(&self, name: &str) -> Option<(usize, Option<usize>)> {
        self.index.get(name).copied()
    }

    /// Bytes of weight payloads (what a loader maps rather than allocates).
    pub fn weight_bytes(&self) -> u64 {
        self.records.iter().map(|r| r.payload_len).sum()
    }

    /// Detects (never assumes) whether `names` are stored as one fused tensor
    /// with their rows adjacent in the order given.
    pub fn fused(&self, names: &[&str]) -> Fused {
        let mut rec = None;
        let mut rows = Vec::with_capacity(names.len());
        let mut all_grouped = true;
        for n in names {
            let Some((r, m)) = self.find(n) else {
                return Fused::Absent {
                    missing: (*n).to_string(),
                };
            };
            match m {
                Some(m) if rec.is_none_or(|x| x == r) => {
                    rec = Some(r);
                    let mm = &self.records[r].members[m];
                    rows.push((mm.row_start, mm.rows));
                }
                _ => all_grouped = false,
            }
        }
        let Some(record) = rec.filter(|_| all_grouped) else {
            return Fused::Separate;
        };
        if names.len() < 2 || rows.windows(2).any(|w| w[0].0 + w[0].1 != w[1].0) {
            return Fused::Separate;
        }
        Fused::Contiguous { record, rows }
    }
}
