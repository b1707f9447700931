//! The streaming, atomic GPACK writer.
//!
//! Sections are streamed: a section's bytes pass through a buffer and a
//! SHA-256 state on their way to the file, and are never required to be in
//! memory at once. The file is built as a locked
//! `.<out>.gpack-tmp.<pid>.<seq>` next to the destination (see
//! [`crate::temp`]); `finish` writes the manifest, section table, footer and header,
//! fsyncs, re-opens the file and quick-verifies it, then moves it into place
//! atomically and fsyncs the directory. Until that moment the destination is
//! untouched. Any error, panic or drop before then unlinks the temporary file;
//! [`crate::remove_live_temp_files`] lets a signal handler do the same on
//! Ctrl-C, and the next writer in the directory removes a killed one's.

use crate::error::{add, align_up, io, Error, Result};
use crate::kind::{HeaderFlags, SectionKind};
use crate::manifest::{Manifest, ManifestInput, ManifestSection};
use crate::raw::*;
use crate::temp::TempFile;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use zerocopy::{FromZeros, IntoBytes};

const WRITE_BUFFER: usize = 1 << 20;

/// Options for [`GpackWriter::create`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Replace an existing destination (atomically, at the very end).
    pub replace: bool,
}

/// What the writer knows about a finished section.
#[derive(Debug, Clone)]
struct Entry {
    kind: SectionKind,
    name: String,
    offset: u64,
    size: u64,
    item_count: u64,
    sha256: [u8; 32],
}

/// The result of a successful build.
#[derive(Debug, Clone)]
pub struct Written {
    /// Where the file now is.
    pub path: PathBuf,
    /// Its size.
    pub size: u64,
    /// SHA-256 of its manifest: the digest of the whole file.
    pub digest: [u8; 32],
}

/// Builds a GPACK file section by section.
pub struct GpackWriter {
    out: PathBuf,
    temp: TempFile,
    file: BufWriter<File>,
    pos: u64,
    entries: Vec<Entry>,
    options: WriteOptions,
    poisoned: bool,
}

impl GpackWriter {
    /// Starts a new file that will end up at `out`.
    ///
    /// Fails at once if `out` exists and `options.replace` is false. Stale
    /// temporary files of `out` left by killed processes are removed.
    pub fn create(out: &Path, options: WriteOptions) -> Result<GpackWriter> {
        if !options.replace && out.exists() {
            return Err(Error::DestinationExists {
                path: out.to_path_buf(),
            });
        }
        let (temp, file) = TempFile::create(out)?;
        let mut w = GpackWriter {
            out: out.to_path_buf(),
            temp,
            file: BufWriter::with_capacity(WRITE_BUFFER, file),
            pos: 0,
            entries: Vec::new(),
            options,
            poisoned: false,
        };
        // Placeholder header; the real one is written by `finish`.
        w.put(&[0u8; HEADER_SIZE as usize])?;
        Ok(w)
    }

    /// The temporary path being written.
    pub fn temp_path(&self) -> &Path {
        &self.temp.path
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        if let Err(e) = self.file.write_all(bytes) {
            self.poisoned = true;
            return Err(Error::Io {
                op: "write",
                path: self.temp.path.clone(),
                source: e,
            });
        }
        self.pos = add(self.pos, bytes.len() as u64, "file size")?;
        Ok(())
    }

    fn pad_to(&mut self, align: u64) -> Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        let target = align_up(self.pos, align, "padding")?;
        let n = (target - self.pos) as usize;
        self.put(&ZEROS[..n])
    }

    /// Starts the next section. Sections must come in kind order, each kind
    /// at most once; the manifest is written by [`GpackWriter::finish`].
    pub fn begin_section(&mut self, kind: SectionKind, name: &str) -> Result<SectionWriter<'_>> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if kind == SectionKind::Manifest {
            return Err(Error::ManifestByHand);
        }
        if let Some(prev) = self.entries.last() {
            if prev.kind >= kind {
                return Err(Error::KindOrder {
                    kind,
                    previous: prev.kind,
                });
            }
        }
        if encode_name(name).is_none() {
            return Err(Error::BadName { name: name.into() });
        }
        self.pad_to(kind.alignment())?;
        // Poisoned until the section writer finishes.
        self.poisoned = true;
        Ok(SectionWriter {
            offset: self.pos,
            w: self,
            kind,
            name: name.to_string(),
            hasher: Sha256::new(),
            size: 0,
        })
    }

    /// Adds a whole section from bytes in memory.
    pub fn add_section(
        &mut self,
        kind: SectionKind,
        name: &str,
        bytes: &[u8],
        item_count: u64,
    ) -> Result<()> {
        let mut s = self.begin_section(kind, name)?;
        s.write_bytes(bytes)?;
        s.finish(item_count)
    }

    /// Writes the manifest, section table, footer and header; fsyncs;
    /// re-opens and quick-verifies the file; moves it to the destination.
    pub fn finish(mut self, input: &ManifestInput) -> Result<Written> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        let mut kinds: Vec<SectionKind> = self.entries.iter().map(|e| e.kind).collect();
        kinds.push(SectionKind::Manifest);
        let flags = HeaderFlags::for_sections(kinds).0;
        let sections = self
            .entries
            .iter()
            .map(|e| ManifestSection {
                kind: e.kind as u32,
                name: e.name.clone(),
                offset: e.offset,
                size: e.size,
                alignment: e.kind.alignment(),
                item_count: e.item_count,
                sha256: hex::encode(e.sha256),
            })
            .collect();
        let manifest = Manifest::from_input(input, flags, sections).to_canonical();
        let n_items = self.entries.len() as u64;
        {
            let mut s = self.begin_manifest()?;
            s.write_bytes(&manifest)?;
            s.finish(n_items)?;
        }
        let m = self.entries.last().cloned().ok_or(Error::Poisoned)?;

        self.pad_to(64)?;
        let table_offset = self.pos;
        let mut total_payload = 0u64;
        let entries = std::mem::take(&mut self.entries);
        for e in &entries {
            total_payload = add(total_payload, e.size, "total payload")?;
            let mut r = SectionEntryV1::new_zeroed();
            r.kind = (e.kind as u32).into();
            r.offset = e.offset.into();
            r.size = e.size.into();
            r.alignment = e.kind.alignment().into();
            r.item_count = e.item_count.into();
            r.sha256 = e.sha256;
            r.name = encode_name(&e.name).ok_or_else(|| Error::BadName {
                name: e.name.clone(),
            })?;
            self.put(r.as_bytes())?;
        }
        self.pad_to(64)?;
        let mut f = FooterV1::new_zeroed();
        f.manifest_offset = m.offset.into();
        f.section_table_offset = table_offset.into();
        f.total_payload_bytes = total_payload.into();
        f.manifest_sha256 = m.sha256;
        f.footer_magic = FOOTER_MAGIC.into();
        self.put(f.as_bytes())?;
        let total = self.pos;

        let mut h = HeaderV1::new_zeroed();
        h.magic = GPACK_MAGIC.into();
        h.format_version = FORMAT_VERSION.into();
        h.min_reader_version = READER_VERSION.into();
        h.flags = flags.into();
        h.section_count = u32::try_from(entries.len())
            .map_err(|_| Error::Overflow {
                what: "section count",
            })?
            .into();
        h.section_table_offset = table_offset.into();
        h.manifest_offset = m.offset.into();
        h.manifest_size = m.size.into();
        h.total_file_size = total.into();

        let tp = self.temp.path.clone();
        let mut file = self.file.into_inner().map_err(|e| Error::Io {
            op: "write",
            path: tp.clone(),
            source: e.into_error(),
        })?;
        file.seek(SeekFrom::Start(0)).map_err(io("seek", &tp))?;
        file.write_all(h.as_bytes()).map_err(io("write", &tp))?;
        file.sync_all().map_err(io("fsync", &tp))?;
        drop(file);

        crate::read::Gpack::open(&tp).map_err(|e| Error::WrittenFileInvalid {
            path: tp.clone(),
            source: Box::new(e),
        })?;

        persist(&tp, &self.out, self.options.replace)?;
        self.temp.disarm();
        sync_parent(&self.out)?;
        Ok(Written {
            path: self.out.clone(),
            size: total,
            digest: m.sha256,
        })
    }

    fn begin_manifest(&mut self) -> Result<SectionWriter<'_>> {
        self.pad_to(SectionKind::Manifest.alignment())?;
        self.poisoned = true;
        Ok(SectionWriter {
            offset: self.pos,
            w: self,
            kind: SectionKind::Manifest,
            name: SectionKind::Manifest.default_name().into(),
            hasher: Sha256::new(),
            size: 0,
        })
    }
}

/// Streams one section's payload; implements [`std::io::Write`].
pub struct SectionWriter<'w> {
    w: &'w mut GpackWriter,
    kind: SectionKind,
    name: String,
    offset: u64,
    hasher: Sha256,
    size: u64,
}

impl SectionWriter<'_> {
    /// Appends payload bytes.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.hasher.update(bytes);
        self.size = add(self.size, bytes.len() as u64, "section size")?;
        self.w.put(bytes)
    }

    /// Bytes of payload written so far.
    pub fn len(&self) -> u64 {
        self.size
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Offset of this section's payload in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Pads the payload with zeros to a multiple of `align` bytes from the
    /// section start (for arrays that must be aligned in the mapped file).
    pub fn pad_to(&mut self, align: u64) -> Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        let target = align_up(self.size, align, "section padding")?;
        let mut n = target - self.size;
        while n > 0 {
            let k = n.min(4096) as usize;
            self.write_bytes(&ZEROS[..k])?;
            n -= k as u64;
        }
        Ok(())
    }

    /// Ends the section, recording its item count and digest.
    pub fn finish(self, item_count: u64) -> Result<()> {
        let sha256: [u8; 32] = self.hasher.finalize().into();
        self.w.entries.push(Entry {
            kind: self.kind,
            name: self.name,
            offset: self.offset,
            size: self.size,
            item_count,
            sha256,
        });
        self.w.poisoned = false;
        Ok(())
    }
}

impl Write for SectionWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_bytes(buf).map_err(std::io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Moves `tmp` to `out`. Without `replace`, a hard link makes the move fail
/// atomically if `out` appeared meanwhile; with it, `rename` replaces `out`
/// in one step.
pub(crate) fn persist(tmp: &Path, out: &Path, replace: bool) -> Result<()> {
    if replace {
        return std::fs::rename(tmp, out).map_err(io("rename", out));
    }
    match std::fs::hard_link(tmp, out) {
        Ok(()) => std::fs::remove_file(tmp).map_err(io("unlink", tmp)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Error::DestinationExists {
            path: out.to_path_buf(),
        }),
        // Filesystems without hard links: re-check, then rename.
        Err(_) => {
            if out.exists() {
                return Err(Error::DestinationExists {
                    path: out.to_path_buf(),
                });
            }
            std::fs::rename(tmp, out).map_err(io("rename", out))
        }
    }
}

pub(crate) fn sync_parent(out: &Path) -> Result<()> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync directory", dir))
}

/// Moves the finished, fsynced file `tmp` to `out` the way the writer
/// publishes its own output (without `replace`, failing atomically if `out`
/// exists), then fsyncs the directory: for files built elsewhere, such as a
/// pull's resumable partial file.
pub fn publish(tmp: &Path, out: &Path, replace: bool) -> Result<()> {
    persist(tmp, out, replace)?;
    sync_parent(out)
}
