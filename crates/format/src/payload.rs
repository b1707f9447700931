//! Payload formats of the structural sections: MetadataKv, TensorIndex,
//! DenseIndex, NativeDenseIndex, ExpertLayout and TokenizerAssets
//! (normative description: docs/FORMAT.md, "Section payloads").
//!
//! Each table starts with a 4-byte magic and a version, then fixed-size
//! little-endian records, then a blob of names. Encoders build the bytes;
//! parsers validate every count, offset and length against the payload with
//! checked arithmetic and never panic, then hand out borrowed views.

use crate::{Error, SectionKind};

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

/// A little-endian cursor over untrusted bytes.
struct Cur<'a> {
    b: &'a [u8],
    pos: usize,
    kind: SectionKind,
}

impl<'a> Cur<'a> {
    fn new(b: &'a [u8], kind: SectionKind) -> Self {
        Cur { b, pos: 0, kind }
    }
    fn err(&self, problem: String) -> Error {
        Error::BadPayload {
            section: self.kind,
            problem,
        }
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Error> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                self.err(format!(
                    "{what} at offset {} needs {n} bytes, {} remain",
                    self.pos,
                    self.b.len().saturating_sub(self.pos)
                ))
            })?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32, Error> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64, Error> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn usize(&mut self, what: &str) -> Result<usize, Error> {
        let v = self.u64(what)?;
        usize::try_from(v).map_err(|_| self.err(format!("{what} {v} does not fit in memory")))
    }
    fn header(&mut self, magic: u32) -> Result<(), Error> {
        let m = self.u32("magic")?;
        if m != magic {
            return Err(self.err(format!("magic is {m:#010x}, expected {magic:#010x}")));
        }
        let v = self.u32("version")?;
        if v != TABLE_VERSION {
            return Err(self.err(format!(
                "table version {v}; this reader knows version {TABLE_VERSION}"
            )));
        }
        Ok(())
    }
    /// A count of records of `rec` bytes that must fit in what remains.
    fn count(&mut self, rec: usize, what: &str) -> Result<usize, Error> {
        let n = self.usize(what)?;
        let remain = self.b.len() - self.pos;
        if n.checked_mul(rec).is_none_or(|need| need > remain) {
            return Err(self.err(format!(
                "{what} {n} × {rec} bytes exceeds the {remain} bytes that remain"
            )));
        }
        Ok(n)
    }
    fn str_at(
        &self,
        off: u64,
        len: u32,
        base: usize,
        size: usize,
        what: &str,
    ) -> Result<&'a str, Error> {
        let o = usize::try_from(off).map_err(|_| self.err(format!("{what} offset overflow")))?;
        let l = len as usize;
        let end = o.checked_add(l).filter(|&e| e <= size).ok_or_else(|| {
            self.err(format!(
                "{what} [{o}, +{l}) outside the {size}-byte names blob"
            ))
        })?;
        std::str::from_utf8(&self.b[base + o..base + end])
            .map_err(|_| self.err(format!("{what} at names offset {o} is not UTF-8")))
    }
}

fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
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
        put32(&mut body, r.key.len() as u32);
        body.extend_from_slice(r.key.as_bytes());
        put32(&mut body, r.value_type);
        put64(&mut body, r.value.len() as u64);
        body.extend_from_slice(r.value);
        n += 1;
    }
    let mut out = Vec::with_capacity(16 + body.len());
    put32(&mut out, KV_MAGIC);
    put32(&mut out, TABLE_VERSION);
    put64(&mut out, n);
    out.extend_from_slice(&body);
    out
}

/// Parses a MetadataKv payload into its records (keys must be UTF-8 and
/// unique; records must tile the payload exactly).
pub fn parse_kv(b: &[u8]) -> Result<Vec<KvRecord<'_>>, Error> {
    let mut c = Cur::new(b, SectionKind::MetadataKv);
    c.header(KV_MAGIC)?;
    // Each record is at least 16 bytes.
    let n = c.count(16, "record count")?;
    let mut out = Vec::with_capacity(n);
    let mut seen = std::collections::HashSet::with_capacity(n);
    for i in 0..n {
        let kl = c.u32("key length")? as usize;
        let key = std::str::from_utf8(c.take(kl, "key")?)
            .map_err(|_| c.err(format!("key of record {i} is not UTF-8")))?;
        let value_type = c.u32("value type")?;
        let vl = c.usize("value length")?;
        let value = c.take(vl, "value")?;
        if !seen.insert(key) {
            return Err(c.err(format!("duplicate key {key:?}")));
        }
        out.push(KvRecord {
            key,
            value_type,
            value,
        });
    }
    if c.pos != b.len() {
        return Err(c.err(format!(
            "{} trailing bytes after the records",
            b.len() - c.pos
        )));
    }
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

const TENSOR_REC: usize = 96;

/// Encodes the TensorIndex, sorting entries by name.
pub fn encode_tensor_index(entries: &[TensorEntry]) -> Vec<u8> {
    let mut sorted: Vec<&TensorEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let header = 32usize;
    let names_off = header + TENSOR_REC * sorted.len();
    let mut names = Vec::new();
    let mut out = Vec::new();
    put32(&mut out, TENSOR_INDEX_MAGIC);
    put32(&mut out, TABLE_VERSION);
    put64(&mut out, sorted.len() as u64);
    put64(&mut out, names_off as u64);
    let names_size: usize = sorted.iter().map(|e| e.name.len()).sum();
    put64(&mut out, names_size as u64);
    for e in sorted {
        put64(&mut out, names.len() as u64);
        put32(&mut out, e.name.len() as u32);
        put32(&mut out, e.dims.len() as u32);
        for i in 0..4 {
            put64(&mut out, e.dims.get(i).copied().unwrap_or(1));
        }
        put32(&mut out, e.src_type);
        put32(&mut out, e.section);
        put32(&mut out, e.layout);
        put32(&mut out, e.group);
        put64(&mut out, e.offset);
        put64(&mut out, e.size);
        put64(&mut out, e.row_start);
        put32(&mut out, e.flags);
        put32(&mut out, 0);
        names.extend_from_slice(e.name.as_bytes());
    }
    out.extend_from_slice(&names);
    out
}

/// Parses the TensorIndex; names must be sorted and unique, sections known,
/// and 1 to 4 dimensions given.
pub fn parse_tensor_index(b: &[u8]) -> Result<Vec<TensorEntry>, Error> {
    let mut c = Cur::new(b, SectionKind::TensorIndex);
    c.header(TENSOR_INDEX_MAGIC)?;
    let n = c.usize("tensor count")?;
    let names_off = c.usize("names offset")?;
    let names_size = c.usize("names size")?;
    let expect_off = n
        .checked_mul(TENSOR_REC)
        .and_then(|x| x.checked_add(32))
        .ok_or_else(|| c.err("tensor count overflows".into()))?;
    if names_off != expect_off || names_off.checked_add(names_size) != Some(b.len()) {
        return Err(c.err(format!(
            "names blob at {names_off} (+{names_size}) must start at {expect_off} and end the {}-byte payload",
            b.len()
        )));
    }
    let mut out: Vec<TensorEntry> = Vec::with_capacity(n);
    for i in 0..n {
        let name_offset = c.u64("name offset")?;
        let name_len = c.u32("name length")?;
        let n_dims = c.u32("n_dims")?;
        let mut dims = [0u64; 4];
        for d in &mut dims {
            *d = c.u64("dim")?;
        }
        let e = TensorEntry {
            name: c
                .str_at(name_offset, name_len, names_off, names_size, "tensor name")?
                .to_string(),
            dims: Vec::new(),
            src_type: c.u32("src_type")?,
            section: c.u32("section")?,
            layout: c.u32("layout")?,
            group: c.u32("group")?,
            offset: c.u64("offset")?,
            size: c.u64("size")?,
            row_start: c.u64("row_start")?,
            flags: c.u32("flags")?,
        };
        let _reserved = c.u32("reserved")?;
        if !(1..=4).contains(&n_dims) {
            return Err(c.err(format!("tensor {i} ({}) has {n_dims} dimensions", e.name)));
        }
        if SectionKind::from_u32(e.section).is_none() {
            return Err(c.err(format!(
                "tensor {} lives in unknown section {}",
                e.name, e.section
            )));
        }
        if let Some(p) = out.last() {
            if p.name.as_bytes() >= e.name.as_bytes() {
                return Err(c.err(format!("names not sorted and unique at {:?}", e.name)));
            }
        }
        let dims = dims[..n_dims as usize].to_vec();
        out.push(TensorEntry { dims, ..e });
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

const BLOB_REC: usize = 40;

/// Encodes a DenseIndex (`magic` = [`DENSE_INDEX_MAGIC`]) or a
/// NativeDenseIndex ([`NATIVE_INDEX_MAGIC`]); `blob_size` is the blob
/// section's size.
pub fn encode_blob_index(magic: u32, blob_size: u64, entries: &[BlobEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + entries.len() * BLOB_REC);
    put32(&mut out, magic);
    put32(&mut out, TABLE_VERSION);
    put64(&mut out, entries.len() as u64);
    put64(&mut out, blob_size);
    for e in entries {
        put32(&mut out, e.tensor);
        put32(&mut out, e.layout);
        put64(&mut out, e.offset);
        put64(&mut out, e.size);
        put64(&mut out, e.rows);
        put64(&mut out, e.cols);
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
    c.header(magic)?;
    let n = c.count(BLOB_REC, "entry count")?;
    let declared = c.u64("blob size")?;
    if declared != blob_size {
        return Err(c.err(format!(
            "index says the blob is {declared} bytes, the blob section is {blob_size}"
        )));
    }
    let mut out = Vec::with_capacity(n);
    let mut prev_end = 0u64;
    for _ in 0..n {
        let e = BlobEntry {
            tensor: c.u32("tensor")?,
            layout: c.u32("layout")?,
            offset: c.u64("offset")?,
            size: c.u64("size")?,
            rows: c.u64("rows")?,
            cols: c.u64("cols")?,
        };
        let end = e.offset.checked_add(e.size);
        if e.offset < prev_end
            || end.is_none_or(|x| x > blob_size)
            || !e.offset.is_multiple_of(align)
        {
            return Err(c.err(format!(
                "entry [{}, +{}) is misaligned, overlapping or outside the {blob_size}-byte blob",
                e.offset, e.size
            )));
        }
        prev_end = end.unwrap_or(0);
        out.push(e);
    }
    if c.pos != b.len() {
        return Err(c.err("trailing bytes after the entries".into()));
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

const FILE_REC: usize = 24;
const SLICE_REC: usize = 80;

impl ExpertLayout {
    /// The slice of `part` (0 gate, 1 up, 2 down) of `expert` in `layer`.
    pub fn slice(&self, layer: usize, expert: usize, part: usize) -> Option<&ExpertSlice> {
        self.slices
            .get((layer * self.n_expert as usize + expert) * 3 + part)
    }

    /// Encodes the table.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put32(&mut out, EXPERT_LAYOUT_MAGIC);
        put32(&mut out, TABLE_VERSION);
        put32(&mut out, self.n_layers);
        put32(&mut out, self.n_expert);
        put64(&mut out, self.files.len() as u64);
        let mut names = Vec::new();
        for f in &self.files {
            put64(&mut out, names.len() as u64);
            put64(&mut out, f.name.len() as u64);
            put64(&mut out, f.size);
            names.extend_from_slice(f.name.as_bytes());
        }
        put64(&mut out, self.slices.len() as u64);
        for s in &self.slices {
            put32(&mut out, s.file);
            put32(&mut out, s.layout);
            put32(&mut out, s.src_type);
            put32(&mut out, 0);
            put64(&mut out, s.offset);
            put64(&mut out, s.size);
            put64(&mut out, s.rows);
            put64(&mut out, s.cols);
            out.extend_from_slice(&s.sha256);
        }
        put64(&mut out, names.len() as u64);
        out.extend_from_slice(&names);
        out
    }

    /// Parses and validates the table: slice count = layers × experts × 3,
    /// file indices in range, file names plain (no `/`, `\`, `..`, NUL).
    pub fn parse(b: &[u8]) -> Result<ExpertLayout, Error> {
        let mut c = Cur::new(b, SectionKind::ExpertLayout);
        c.header(EXPERT_LAYOUT_MAGIC)?;
        let n_layers = c.u32("n_layers")?;
        let n_expert = c.u32("n_expert")?;
        let nf = c.count(FILE_REC, "file count")?;
        let mut raw_files = Vec::with_capacity(nf);
        for _ in 0..nf {
            raw_files.push((
                c.u64("name offset")?,
                c.u64("name length")?,
                c.u64("file size")?,
            ));
        }
        let ns = c.count(SLICE_REC, "slice count")?;
        let expect = u64::from(n_layers)
            .checked_mul(u64::from(n_expert))
            .and_then(|v| v.checked_mul(3));
        if expect != Some(ns as u64) {
            let shown = expect.map_or("more than 2^64".to_string(), |e| e.to_string());
            return Err(c.err(format!(
                "{ns} slices for {n_layers} layers × {n_expert} experts × 3 (expected {shown})"
            )));
        }
        let mut slices = Vec::with_capacity(ns);
        for _ in 0..ns {
            let file = c.u32("file")?;
            let layout = c.u32("layout")?;
            let src_type = c.u32("src_type")?;
            let _ = c.u32("reserved")?;
            let s = ExpertSlice {
                file,
                layout,
                src_type,
                offset: c.u64("offset")?,
                size: c.u64("size")?,
                rows: c.u64("rows")?,
                cols: c.u64("cols")?,
                sha256: c.take(32, "sha256")?.try_into().unwrap_or([0; 32]),
            };
            if s.file != EXPERT_EMBEDDED && s.file != EXPERT_ABSENT && s.file as usize >= nf {
                return Err(c.err(format!("slice names file {} of {nf}", s.file)));
            }
            slices.push(s);
        }
        let names_size = c.usize("names size")?;
        let base = c.pos;
        c.take(names_size, "names")?;
        if c.pos != b.len() {
            return Err(c.err("trailing bytes after the names".into()));
        }
        let mut files = Vec::with_capacity(nf);
        for (off, len, size) in raw_files {
            let len = u32::try_from(len).map_err(|_| c.err("file name too long".into()))?;
            let name = c.str_at(off, len, base, names_size, "file name")?;
            if !is_plain_file_name(name) {
                return Err(c.err(format!(
                    "external file name {name:?} is not a plain file name (no directories, no ..)"
                )));
            }
            files.push(ExpertFile {
                name: name.to_string(),
                size,
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

/// Alignment of tensors in the Mtp data area (relative to the section start).
pub const MTP_ALIGN: u64 = 256;

/// The head of an Mtp payload: its TensorIndex bytes and where the data area
/// starts. Tensor offsets in that index are relative to the data area.
pub fn encode_mtp_head(index: &[u8]) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(16 + index.len());
    put32(&mut out, MTP_MAGIC);
    put32(&mut out, TABLE_VERSION);
    put64(&mut out, index.len() as u64);
    out.extend_from_slice(index);
    let data_start = (out.len() as u64).div_ceil(MTP_ALIGN) * MTP_ALIGN;
    out.resize(data_start as usize, 0);
    (out, data_start)
}

/// Parses an Mtp payload: its tensor index and data area, every tensor inside it.
pub fn parse_mtp(b: &[u8]) -> Result<(Vec<TensorEntry>, &[u8]), Error> {
    let mut c = Cur::new(b, SectionKind::Mtp);
    c.header(MTP_MAGIC)?;
    let n = c.usize("index size")?;
    let index = c.take(n, "tensor index")?;
    let entries =
        parse_tensor_index(index).map_err(|e| c.err(format!("draft tensor index: {e}")))?;
    let start = (c.pos as u64).div_ceil(MTP_ALIGN) * MTP_ALIGN;
    let data = usize::try_from(start)
        .ok()
        .and_then(|s| b.get(s..))
        .ok_or_else(|| c.err("no data area".into()))?;
    for e in &entries {
        if e.offset
            .checked_add(e.size)
            .is_none_or(|end| end > data.len() as u64)
        {
            return Err(c.err(format!("draft tensor {} outside the data area", e.name)));
        }
    }
    Ok((entries, data))
}

// ----------------------------------------------------------- TokenizerAssets

/// Encodes raw files (name, bytes) as the TokenizerAssets payload.
pub fn encode_assets<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let files: Vec<(&str, &[u8])> = files.into_iter().collect();
    let mut out = Vec::new();
    put32(&mut out, ASSETS_MAGIC);
    put32(&mut out, TABLE_VERSION);
    put64(&mut out, files.len() as u64);
    let mut blob = Vec::new();
    let mut recs = Vec::new();
    for (name, data) in &files {
        recs.push((blob.len() as u64, name.len() as u64));
        blob.extend_from_slice(name.as_bytes());
        recs.push((blob.len() as u64, data.len() as u64));
        blob.extend_from_slice(data);
    }
    for (o, l) in recs {
        put64(&mut out, o);
        put64(&mut out, l);
    }
    put64(&mut out, blob.len() as u64);
    out.extend_from_slice(&blob);
    out
}

/// Parses the TokenizerAssets payload into (name, bytes) pairs.
pub fn parse_assets(b: &[u8]) -> Result<Vec<(&str, &[u8])>, Error> {
    let mut c = Cur::new(b, SectionKind::TokenizerAssets);
    c.header(ASSETS_MAGIC)?;
    let n = c.count(32, "file count")?;
    let mut recs = Vec::with_capacity(n);
    for _ in 0..n {
        recs.push((
            c.u64("name offset")?,
            c.u64("name length")?,
            c.u64("data offset")?,
            c.u64("data length")?,
        ));
    }
    let size = c.usize("blob size")?;
    let base = c.pos;
    c.take(size, "blob")?;
    if c.pos != b.len() {
        return Err(c.err("trailing bytes after the blob".into()));
    }
    let mut out = Vec::with_capacity(n);
    for (no, nl, d_off, dl) in recs {
        let nl = u32::try_from(nl).map_err(|_| c.err("asset name too long".into()))?;
        let name = c.str_at(no, nl, base, size, "asset name")?;
        let d0 = usize::try_from(d_off).ok();
        let d1 = d0.and_then(|d| usize::try_from(dl).ok().and_then(|l| d.checked_add(l)));
        let (Some(d0), Some(d1)) = (d0, d1) else {
            return Err(c.err("asset range overflows".into()));
        };
        if d1 > size {
            return Err(c.err(format!("asset {name:?} data outside the blob")));
        }
        out.push((name, &b[base + d0..base + d1]));
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
