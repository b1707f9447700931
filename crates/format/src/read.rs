//! The GPACK reader: quick open over a mapping, borrowed section views, and
//! full verification.
//!
//! Quick open touches only the header, the section table, the manifest and
//! the footer (a few pages, whatever the file size) and checks everything a
//! reader must reject (docs/FORMAT.md, "Reader obligations"). Full
//! verification streams every payload through SHA-256. SHA-256 of one section
//! is a sequential chain, so sections are hashed in parallel with each other
//! but one large section is hashed by one core: the largest section bounds the
//! speed-up.

use crate::error::{add, align_up, io, mul, DigestFailure, Error, Result, SectionProblem};
use crate::kind::{HeaderFlags, SectionKind};
use crate::manifest::{Manifest, ManifestProblem, MAX_MANIFEST_SIZE};
use crate::payload::PayloadProblem;
use crate::raw::*;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use zerocopy::FromBytes;

/// One section as the table records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionInfo {
    /// Kind.
    pub kind: SectionKind,
    /// Name.
    pub name: String,
    /// Payload offset.
    pub offset: u64,
    /// Payload size.
    pub size: u64,
    /// Alignment.
    pub alignment: u64,
    /// Logical item count.
    pub item_count: u64,
    /// SHA-256 of the payload.
    pub sha256: [u8; 32],
}

/// The validated structure of a GPACK file (everything but the payloads).
#[derive(Debug, Clone)]
pub struct Layout {
    /// The header.
    pub header: HeaderV1,
    /// The footer.
    pub footer: FooterV1,
    /// Every section, the manifest included, in file order.
    pub sections: Vec<SectionInfo>,
    /// The parsed manifest.
    pub manifest: Manifest,
}

impl Layout {
    /// The header flags.
    pub fn flags(&self) -> HeaderFlags {
        HeaderFlags(self.header.flags.get())
    }

    /// The file's digest: SHA-256 of the manifest.
    pub fn digest(&self) -> [u8; 32] {
        self.footer.manifest_sha256
    }

    /// The section of this kind, if present.
    pub fn section(&self, kind: SectionKind) -> Option<&SectionInfo> {
        self.sections.iter().find(|s| s.kind == kind)
    }
}

/// Quick-validates a whole GPACK file held in `bytes`.
///
/// Never panics, whatever the bytes: every size and offset is checked with
/// overflow-checked arithmetic before it is used.
pub fn parse_layout(bytes: &[u8]) -> Result<Layout> {
    let header = check_header(bytes)?;
    let footer = check_footer(bytes)?;
    let (sections, payload_total) = read_section_table(bytes, &header)?;
    check_manifest_entry(&header, &footer, &sections, payload_total)?;
    let manifest = read_manifest(bytes, &header, &footer, &sections)?;
    check_manifest_lists_table(&manifest, &sections)?;
    Ok(Layout {
        header,
        footer,
        sections,
        manifest,
    })
}

/// The header: magic, versions, exact file size, reserved bytes, known flags.
fn check_header(bytes: &[u8]) -> Result<HeaderV1> {
    let len = bytes.len() as u64;
    let min = HEADER_SIZE + FOOTER_SIZE;
    if len < HEADER_SIZE {
        return Err(Error::TooSmall { size: len, min });
    }
    let (header, _) =
        HeaderV1::read_from_prefix(bytes).map_err(|_| Error::TooSmall { size: len, min })?;
    let magic = header.magic.get();
    if magic != GPACK_MAGIC {
        return Err(Error::BadMagic {
            what: "header",
            offset: 0,
            expected: GPACK_MAGIC,
            found: magic,
        });
    }
    let fv = header.format_version.get();
    if fv == 0 {
        return Err(Error::BadField {
            field: "format_version",
            offset: 4,
            found: 0,
            expected: "at least 1",
        });
    }
    let mrv = header.min_reader_version.get();
    if mrv > READER_VERSION {
        return Err(Error::NeedsNewerReader {
            needed: mrv,
            reader: READER_VERSION,
        });
    }
    if mrv == 0 || mrv > fv {
        return Err(Error::BadField {
            field: "min_reader_version",
            offset: 6,
            found: mrv.into(),
            expected: "between 1 and format_version",
        });
    }
    let total = header.total_file_size.get();
    if total > len {
        return Err(Error::Truncated {
            expected: total,
            actual: len,
        });
    }
    if total < len {
        return Err(Error::TrailingBytes {
            expected: total,
            actual: len,
        });
    }
    if len < min {
        return Err(Error::TooSmall { size: len, min });
    }
    if let Some(i) = header.reserved.iter().position(|&b| b != 0) {
        return Err(Error::ReservedNotZero {
            what: "header",
            offset: 48 + i as u64,
        });
    }
    let flags = header.flags.get();
    if flags & !HeaderFlags::KNOWN.0 != 0 {
        return Err(Error::UnknownFlags {
            bits: flags & !HeaderFlags::KNOWN.0,
        });
    }
    Ok(header)
}

/// The footer: its magic and reserved word (the file is at least a header
/// and a footer long: [`check_header`] saw to it).
fn check_footer(bytes: &[u8]) -> Result<FooterV1> {
    let len = bytes.len() as u64;
    let footer_off = len - FOOTER_SIZE;
    let (footer, _) =
        FooterV1::read_from_prefix(&bytes[footer_off as usize..]).map_err(|_| Error::TooSmall {
            size: len,
            min: HEADER_SIZE + FOOTER_SIZE,
        })?;
    let fmagic = footer.footer_magic.get();
    if fmagic != FOOTER_MAGIC {
        return Err(Error::BadMagic {
            what: "footer",
            offset: footer_off + 56,
            expected: FOOTER_MAGIC,
            found: fmagic,
        });
    }
    if footer.reserved.get() != 0 {
        return Err(Error::ReservedNotZero {
            what: "footer",
            offset: footer_off + 60,
        });
    }
    Ok(footer)
}

/// The section table: 64-aligned, after the header, ending (padded to 64)
/// exactly where the footer starts; every entry a known kind in increasing
/// order, at its kind's alignment, right after the previous payload, inside
/// the file. Returns the sections and the sum of their sizes.
fn read_section_table(bytes: &[u8], header: &HeaderV1) -> Result<(Vec<SectionInfo>, u64)> {
    let len = bytes.len() as u64;
    let footer_off = len - FOOTER_SIZE;
    let table_off = header.section_table_offset.get();
    let count = u64::from(header.section_count.get());
    if count == 0 || count > SectionKind::ALL.len() as u64 {
        return Err(Error::BadField {
            field: "section_count",
            offset: 12,
            found: count,
            expected: "between 1 and 15 (each kind at most once)",
        });
    }
    let table_len = mul(count, SECTION_ENTRY_SIZE, "section table size")?;
    let table_end = add(table_off, table_len, "section table end")?;
    if table_off < HEADER_SIZE
        || !table_off.is_multiple_of(64)
        || align_up(table_end, 64, "section table end")? != footer_off
    {
        return Err(Error::BadField {
            field: "section_table_offset",
            offset: 16,
            found: table_off,
            expected: "64-aligned, after the header, its table ending (padded to 64) at the footer",
        });
    }
    let mut sections = Vec::with_capacity(count as usize);
    let mut prev_end = HEADER_SIZE;
    let mut prev_kind: Option<SectionKind> = None;
    let mut payload_total = 0u64;
    for i in 0..count as usize {
        let eoff = table_off + i as u64 * SECTION_ENTRY_SIZE;
        let bad = |problem| Error::BadSection {
            index: i,
            offset: eoff,
            problem,
        };
        let (e, _) = SectionEntryV1::read_from_prefix(&bytes[eoff as usize..]).map_err(|_| {
            Error::TooSmall {
                size: len,
                min: HEADER_SIZE + FOOTER_SIZE,
            }
        })?;
        let kind = SectionKind::from_u32(e.kind.get())
            .ok_or_else(|| bad(SectionProblem::UnknownKind(e.kind.get())))?;
        if e.flags.get() != 0 {
            return Err(bad(SectionProblem::ReservedFlags(e.flags.get())));
        }
        if let Some(p) = prev_kind {
            if p >= kind {
                return Err(bad(SectionProblem::Order { kind, previous: p }));
            }
            if p == SectionKind::Manifest {
                return Err(bad(SectionProblem::ManifestNotLast));
            }
        }
        let alignment = e.alignment.get();
        if alignment != kind.alignment() {
            return Err(bad(SectionProblem::Alignment {
                kind,
                found: alignment,
                expected: kind.alignment(),
            }));
        }
        let name = e.name_str().ok_or_else(|| bad(SectionProblem::Name))?;
        let offset = e.offset.get();
        let expected = align_up(prev_end, alignment, "section offset")?;
        if offset != expected {
            return Err(bad(SectionProblem::Offset {
                found: offset,
                expected,
                alignment,
            }));
        }
        let size = e.size.get();
        let end = add(offset, size, "section end")?;
        if end > table_off {
            return Err(bad(SectionProblem::OutOfBounds {
                offset,
                size,
                limit: table_off,
            }));
        }
        payload_total = add(payload_total, size, "total payload")?;
        prev_end = end;
        prev_kind = Some(kind);
        sections.push(SectionInfo {
            kind,
            name: name.to_string(),
            offset,
            size,
            alignment,
            item_count: e.item_count.get(),
            sha256: e.sha256,
        });
    }
    // The manifest, padded to 64, must end where the table starts.
    if align_up(prev_end, 64, "manifest end")? != table_off {
        return Err(Error::BadField {
            field: "section_table_offset",
            offset: 16,
            found: table_off,
            expected: "right after the manifest, padded to 64",
        });
    }
    Ok((sections, payload_total))
}

/// The manifest's table entry: last, named `manifest`, where the header and
/// footer say; the footer agrees with the header and the table; the flags
/// are those the sections imply.
fn check_manifest_entry(
    header: &HeaderV1,
    footer: &FooterV1,
    sections: &[SectionInfo],
    payload_total: u64,
) -> Result<()> {
    let table_off = header.section_table_offset.get();
    // read_section_table returns at least one section.
    let last_index = sections.len() - 1;
    let last_offset = table_off + last_index as u64 * SECTION_ENTRY_SIZE;
    let m = &sections[last_index];
    if m.kind != SectionKind::Manifest {
        return Err(Error::BadSection {
            index: last_index,
            offset: last_offset,
            problem: SectionProblem::ManifestNotLast,
        });
    }
    if m.name != SectionKind::Manifest.default_name() {
        return Err(Error::BadSection {
            index: last_index,
            offset: last_offset,
            problem: SectionProblem::Name,
        });
    }
    if header.manifest_offset.get() != m.offset {
        return Err(Error::BadField {
            field: "manifest_offset",
            offset: 24,
            found: header.manifest_offset.get(),
            expected: "the manifest section's offset",
        });
    }
    if header.manifest_size.get() != m.size {
        return Err(Error::BadField {
            field: "manifest_size",
            offset: 32,
            found: header.manifest_size.get(),
            expected: "the manifest section's size",
        });
    }
    for (field, f, h) in [
        (
            "manifest_offset",
            footer.manifest_offset.get(),
            header.manifest_offset.get(),
        ),
        (
            "section_table_offset",
            footer.section_table_offset.get(),
            header.section_table_offset.get(),
        ),
        (
            "total_payload_bytes",
            footer.total_payload_bytes.get(),
            payload_total,
        ),
    ] {
        if f != h {
            return Err(Error::FooterMismatch {
                field,
                footer: f,
                header: h,
            });
        }
    }
    let flags = header.flags.get();
    let expected_flags = HeaderFlags::for_sections(sections.iter().map(|s| s.kind)).0;
    if flags != expected_flags {
        return Err(Error::FlagsMismatch {
            found: flags,
            expected: expected_flags,
        });
    }
    Ok(())
}

/// The manifest itself: at most [`MAX_MANIFEST_SIZE`] bytes, hashing to the
/// footer's and the table's digest, canonical JSON of the schema, with the
/// header's versions and flags.
fn read_manifest(
    bytes: &[u8],
    header: &HeaderV1,
    footer: &FooterV1,
    sections: &[SectionInfo],
) -> Result<Manifest> {
    let m = &sections[sections.len() - 1];
    let bad_manifest = |problem| Error::BadManifest {
        offset: m.offset,
        problem,
    };
    if m.size > MAX_MANIFEST_SIZE {
        return Err(bad_manifest(ManifestProblem::TooLarge { size: m.size }));
    }
    // In bounds: read_section_table checked every payload against the table.
    let mbytes = &bytes[m.offset as usize..(m.offset + m.size) as usize];
    let digest: [u8; 32] = Sha256::digest(mbytes).into();
    if digest != footer.manifest_sha256 {
        return Err(Error::ManifestDigest {
            expected: hex::encode(footer.manifest_sha256),
            found: hex::encode(digest),
        });
    }
    if digest != m.sha256 {
        return Err(Error::ManifestMismatch {
            kind: SectionKind::Manifest,
            name: m.name.clone(),
            field: "sha256",
            manifest: hex::encode(digest),
            table: hex::encode(m.sha256),
        });
    }
    let manifest = Manifest::parse(mbytes).map_err(bad_manifest)?;
    for (field, mv, hv) in [
        (
            "format_version",
            manifest.format_version,
            u64::from(header.format_version.get()),
        ),
        (
            "min_reader_version",
            manifest.min_reader_version,
            u64::from(header.min_reader_version.get()),
        ),
        ("flags", manifest.flags, u64::from(header.flags.get())),
    ] {
        if mv != hv {
            return Err(bad_manifest(ManifestProblem::Header {
                field,
                manifest: mv,
                header: hv,
            }));
        }
    }
    if m.item_count != sections.len() as u64 - 1 {
        return Err(Error::ManifestMismatch {
            kind: SectionKind::Manifest,
            name: m.name.clone(),
            field: "item_count",
            manifest: (sections.len() - 1).to_string(),
            table: m.item_count.to_string(),
        });
    }
    Ok(manifest)
}

/// The manifest lists exactly the table's other sections, field for field.
fn check_manifest_lists_table(manifest: &Manifest, sections: &[SectionInfo]) -> Result<()> {
    let m = &sections[sections.len() - 1];
    let listed = &sections[..sections.len() - 1];
    if manifest.sections.len() != listed.len() {
        return Err(Error::BadManifest {
            offset: m.offset,
            problem: ManifestProblem::SectionCount {
                manifest: manifest.sections.len() as u64,
                table: listed.len() as u64,
            },
        });
    }
    for (ms, ts) in manifest.sections.iter().zip(listed) {
        let mismatch = |field: &'static str, manifest: String, table: String| {
            Err(Error::ManifestMismatch {
                kind: ts.kind,
                name: ts.name.clone(),
                field,
                manifest,
                table,
            })
        };
        if ms.kind != ts.kind as u32 {
            return mismatch("kind", ms.kind.to_string(), (ts.kind as u32).to_string());
        }
        if ms.name != ts.name {
            return mismatch("name", ms.name.clone(), ts.name.clone());
        }
        for (field, a, b) in [
            ("offset", ms.offset, ts.offset),
            ("size", ms.size, ts.size),
            ("alignment", ms.alignment, ts.alignment),
            ("item_count", ms.item_count, ts.item_count),
        ] {
            if a != b {
                return mismatch(field, a.to_string(), b.to_string());
            }
        }
        if ms.sha256 != hex::encode(ts.sha256) {
            return mismatch("sha256", ms.sha256.clone(), hex::encode(ts.sha256));
        }
    }
    Ok(())
}

/// A borrowed view of one section's payload.
#[derive(Debug, Clone, Copy)]
pub struct Section<'a> {
    /// What the table says about it.
    pub info: &'a SectionInfo,
    /// The payload bytes, in the mapping.
    pub bytes: &'a [u8],
}

/// Offset of `part` inside `whole`, if it is a sub-slice of it.
pub(crate) fn offset_in(whole: &[u8], part: &[u8]) -> Option<usize> {
    let (w, p) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    let off = p.checked_sub(w)?;
    (off.checked_add(part.len())? <= whole.len()).then_some(off)
}

/// The backing bytes of an open file.
#[derive(Debug)]
enum Backing {
    Map(crate::mmap::Mmap),
    Owned(Vec<u8>),
}

/// An open, quick-validated GPACK file.
#[derive(Debug)]
pub struct Gpack {
    path: PathBuf,
    backing: Backing,
    layout: Layout,
}

impl Gpack {
    /// Maps `path` and runs the quick open.
    pub fn open(path: &Path) -> Result<Gpack> {
        let file = std::fs::File::open(path).map_err(io("open", path))?;
        let len = file.metadata().map_err(io("stat", path))?.len();
        // An empty file cannot be mapped; report it as too small.
        let backing = if len == 0 {
            Backing::Owned(Vec::new())
        } else {
            Backing::Map(crate::mmap::map_file(&file).map_err(io("mmap", path))?)
        };
        let layout = parse_layout(match &backing {
            Backing::Map(m) => m,
            Backing::Owned(v) => v,
        })?;
        Ok(Gpack {
            path: path.to_path_buf(),
            backing,
            layout,
        })
    }

    /// Quick-validates bytes already in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Gpack> {
        let layout = parse_layout(&bytes)?;
        Ok(Gpack {
            path: PathBuf::new(),
            backing: Backing::Owned(bytes),
            layout,
        })
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Map(m) => m,
            Backing::Owned(v) => v,
        }
    }

    /// Drops this process's pages of `part` (a sub-slice of [`Gpack::bytes`],
    /// e.g. an expert slice just copied into a cache) from its resident set;
    /// they are read again from the file if touched later. Advice only: a
    /// slice outside the mapping, or an in-memory file, is ignored.
    pub fn release(&self, part: &[u8]) {
        if let Backing::Map(m) = &self.backing {
            if let Some(off) = offset_in(m, part) {
                crate::mmap::release(m, off, part.len());
            }
        }
    }

    /// The validated structure.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.layout.manifest
    }

    /// The section of this kind, if present.
    pub fn section(&self, kind: SectionKind) -> Option<Section<'_>> {
        let info = self.layout.section(kind)?;
        // In bounds: checked by parse_layout.
        let bytes = &self.bytes()[info.offset as usize..(info.offset + info.size) as usize];
        Some(Section { info, bytes })
    }

    /// Streams every section through SHA-256 (sections in parallel) and checks
    /// that padding is zero. `progress` is called with byte counts as they are
    /// hashed, from several threads.
    pub fn verify_full(&self, progress: &(dyn Fn(u64) + Sync)) -> Result<()> {
        verify_payloads(self.bytes(), &self.layout, progress)
    }
}

const HASH_CHUNK: usize = 8 << 20;

/// Full verification of `bytes` against an already quick-validated layout.
pub fn verify_payloads(
    bytes: &[u8],
    layout: &Layout,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<()> {
    // Largest first, so the longest chain starts at once.
    let mut order: Vec<&SectionInfo> = layout.sections.iter().collect();
    order.sort_by_key(|s| std::cmp::Reverse(s.size));
    let mut failed: Vec<DigestFailure> = order
        .par_iter()
        .with_max_len(1)
        .filter_map(|s| {
            let data = &bytes[s.offset as usize..(s.offset + s.size) as usize];
            let mut h = Sha256::new();
            for c in data.chunks(HASH_CHUNK) {
                h.update(c);
                progress(c.len() as u64);
            }
            let got: [u8; 32] = h.finalize().into();
            (got != s.sha256).then(|| DigestFailure {
                kind: s.kind,
                name: s.name.clone(),
                offset: s.offset,
                expected: hex::encode(s.sha256),
                found: hex::encode(got),
            })
        })
        .collect();
    if !failed.is_empty() {
        failed.sort_by_key(|f| f.offset);
        return Err(Error::DigestMismatch { failed });
    }
    // Padding: between the header and the first section, between sections,
    // and between the manifest, the table and the footer.
    let mut prev = HEADER_SIZE;
    let table = layout.header.section_table_offset.get();
    let table_end = table + layout.sections.len() as u64 * SECTION_ENTRY_SIZE;
    let gaps = layout
        .sections
        .iter()
        .map(|s| (s.offset, s.offset + s.size))
        .chain([(table, table_end), (bytes.len() as u64 - FOOTER_SIZE, 0)]);
    for (start, end) in gaps {
        if let Some(i) = bytes[prev as usize..start as usize]
            .iter()
            .position(|&b| b != 0)
        {
            return Err(Error::PaddingNotZero {
                offset: prev + i as u64,
            });
        }
        prev = end;
    }
    Ok(())
}

/// Parses the 64-byte single-tensor header at the start of an Embed, Head or
/// Ple section and returns it with the payload that follows.
pub fn single_tensor(section: Section<'_>) -> Result<(SingleTensorHeaderV1, &[u8])> {
    let bad = |problem| Error::BadPayload {
        section: section.info.kind,
        problem,
    };
    let (h, rest) = SingleTensorHeaderV1::read_from_prefix(section.bytes).map_err(|_| {
        bad(PayloadProblem::ShortHeader {
            size: section.bytes.len() as u64,
        })
    })?;
    if h.data_offset.get() != SINGLE_TENSOR_HEADER_SIZE {
        return Err(bad(PayloadProblem::DataOffset(h.data_offset.get())));
    }
    if h.byte_size.get() != rest.len() as u64 {
        return Err(bad(PayloadProblem::ByteSize {
            declared: h.byte_size.get(),
            actual: rest.len() as u64,
        }));
    }
    if h.reserved.iter().any(|&b| b != 0) {
        return Err(bad(PayloadProblem::Reserved));
    }
    Ok((h, rest))
}
