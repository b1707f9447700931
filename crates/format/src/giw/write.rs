//! The streaming, atomic GIW writer.
//!
//! Records are appended one at a time (the caller transcodes a tensor, hands
//! its bytes over and frees them), so memory stays one record. The CRC-32 is
//! computed on the fly over everything after the header; the header, only
//! known at the end, is hashed separately and combined
//! (`crc32fast::Hasher::combine`), so the file is never read back to hash it.
//! As with GPACK (`write.rs`), the bytes go to a locked temporary file
//! (`.<out>.gpack-tmp.<pid>.<seq>`, see [`crate::temp`]), which is
//! fsynced, re-read and checked, then moved over the destination atomically;
//! any error or drop before that unlinks it.

use super::{
    add, align, io, BundleHeader, Error, RawMember, RawRecordHeader, Result, Target, UsageProblem,
    ALIGN, FUSED_SINCE, HEADER_LEN, MAX_DIMS, MAX_MEMBERS, MAX_NAME_LEN, MAX_QUANT_LEN,
    MIN_WEIGHTS_VERSION, WEIGHTS_VERSION,
};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use zerocopy::little_endian::U64;
use zerocopy::IntoBytes;

const ZEROS: [u8; 64] = [0; 64];

/// One member of a fused group record: rows `row_start .. row_start + rows`
/// of the group's native tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSpec {
    /// Tensor name (`blk.0.attn_q.weight`).
    pub name: String,
    /// First row in the group tensor.
    pub row_start: u64,
    /// Rows of this member.
    pub rows: u64,
}

/// What [`GiwWriter::finish`] wrote.
#[derive(Clone, Debug)]
pub struct WriteSummary {
    /// The destination.
    pub path: PathBuf,
    /// File size in bytes.
    pub bytes: u64,
    /// The trailing CRC-32.
    pub crc: u32,
    /// Records written.
    pub records: u32,
    /// Weights format written.
    pub weights_version: u16,
}

/// Streams a GIW bundle to a locked temporary file, then renames it into place.
pub struct GiwWriter {
    out: PathBuf,
    replace: bool,
    tmp: crate::temp::TempFile,
    file: BufWriter<File>,
    crc: crc32fast::Hasher,
    pos: u64,
    header: BundleHeader,
}

impl GiwWriter {
    /// Starts a bundle at `out` (replacing an existing file only if
    /// `replace`): writes a placeholder header and the metadata GGUF.
    ///
    /// `weights_version` must be 12..=14; `quant` is an ASCII label of at
    /// most 12 bytes.
    pub fn create(
        out: &Path,
        replace: bool,
        quant: &str,
        target: Target,
        weights_version: u16,
        metadata: &[u8],
    ) -> Result<GiwWriter> {
        if !(MIN_WEIGHTS_VERSION..=WEIGHTS_VERSION).contains(&weights_version) {
            return Err(Error::Usage {
                problem: UsageProblem::WeightsVersion {
                    version: weights_version,
                    min: MIN_WEIGHTS_VERSION,
                    max: WEIGHTS_VERSION,
                },
            });
        }
        // Empty included: the reader refuses an empty label.
        if quant.is_empty()
            || quant.len() > MAX_QUANT_LEN
            || !quant.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Error::Usage {
                problem: UsageProblem::QuantLabel {
                    label: quant.to_string(),
                    max: MAX_QUANT_LEN,
                },
            });
        }
        if !replace && out.exists() {
            return Err(Error::DestinationExists {
                path: out.to_path_buf(),
            });
        }
        let (tmp, f) = crate::temp::TempFile::create(out)?;
        let mut w = GiwWriter {
            out: out.to_path_buf(),
            replace,
            tmp,
            file: BufWriter::with_capacity(1 << 20, f),
            crc: crc32fast::Hasher::new(),
            pos: 0,
            header: BundleHeader {
                weights_version,
                target,
                quant: quant.to_string(),
                record_count: 0,
                meta_off: HEADER_LEN,
                meta_len: metadata.len() as u64,
                weights_off: 0,
                weights_len: 0,
            },
        };
        // Placeholder header: not hashed (the real one is hashed in `finish`).
        w.file.write_all(&ZEROS).map_err(io("write", &w.tmp.path))?;
        w.pos = HEADER_LEN;
        w.put(metadata)?;
        w.pad()?;
        w.header.weights_off = w.pos;
        Ok(w)
    }

    /// The weights format being written.
    pub fn weights_version(&self) -> u16 {
        self.header.weights_version
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.file
            .write_all(b)
            .map_err(io("write", &self.tmp.path))?;
        self.crc.update(b);
        self.pos = add(self.pos, b.len() as u64, "file size")?;
        Ok(())
    }

    fn pad(&mut self) -> Result<()> {
        let n = (align(self.pos, "padding")? - self.pos) as usize;
        self.put(&ZEROS[..n])
    }

    fn check_name(name: &str) -> Result<()> {
        if name.is_empty() || name.len() > MAX_NAME_LEN as usize {
            return Err(Error::Usage {
                problem: UsageProblem::RecordName {
                    name: name.to_string(),
                    max: MAX_NAME_LEN,
                },
            });
        }
        Ok(())
    }

    fn record_header(
        &mut self,
        kind: u32,
        name: &str,
        count: u32,
        ggml_type: u32,
        payload_len: u64,
        dims: &[u64],
    ) -> Result<()> {
        Self::check_name(name)?;
        debug_assert_eq!(self.pos % ALIGN, 0);
        let mut d = [U64::new(0); 4];
        for (slot, &v) in d.iter_mut().zip(dims) {
            *slot = v.into();
        }
        let h = RawRecordHeader {
            kind: kind.into(),
            name_len: (name.len() as u32).into(),
            count: count.into(),
            ggml_type: ggml_type.into(),
            payload_len: payload_len.into(),
            dims: d,
            reserved: 0.into(),
        };
        self.put(h.as_bytes())?;
        self.put(name.as_bytes())?;
        self.pad()
    }

    fn payload(&mut self, payload: &[u8]) -> Result<()> {
        self.put(payload)?;
        self.pad()?;
        self.header.record_count =
            self.header
                .record_count
                .checked_add(1)
                .ok_or(Error::Overflow {
                    what: "record count",
                })?;
        Ok(())
    }

    /// Appends a native tensor record: `payload` is one serialized native
    /// tensor (crates/quant `layout.rs`), starting 16-aligned in the file.
    pub fn add_native(&mut self, name: &str, payload: &[u8]) -> Result<()> {
        self.record_header(1, name, 0, 0, payload.len() as u64, &[])?;
        self.payload(payload)
    }

    /// Starts a native tensor record of `payload_len` bytes whose payload is
    /// then streamed through the returned writer (so an encoder never holds
    /// the whole tensor); [`PayloadWriter::finish`] checks the length.
    pub fn begin_native(&mut self, name: &str, payload_len: u64) -> Result<PayloadWriter<'_>> {
        self.record_header(1, name, 0, 0, payload_len, &[])?;
        Ok(PayloadWriter {
            w: self,
            name: name.to_string(),
            left: payload_len,
        })
    }

    /// Starts a fused group record (see [`GiwWriter::add_group`]) whose
    /// payload is streamed through the returned writer.
    pub fn begin_group(
        &mut self,
        name: &str,
        members: &[MemberSpec],
        payload_len: u64,
    ) -> Result<PayloadWriter<'_>> {
        self.group_header(name, members, payload_len)?;
        Ok(PayloadWriter {
            w: self,
            name: name.to_string(),
            left: payload_len,
        })
    }

    /// Appends a dense record: raw ggml bytes of type `ggml_type` with `dims`
    /// (ne0 first, at most 4): norms, biases, rope factors.
    pub fn add_dense(
        &mut self,
        name: &str,
        ggml_type: u32,
        dims: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        if dims.is_empty() || dims.len() > MAX_DIMS as usize {
            return Err(Error::Usage {
                problem: UsageProblem::DenseDims {
                    name: name.to_string(),
                    dims: dims.len(),
                    max: MAX_DIMS,
                },
            });
        }
        self.record_header(
            2,
            name,
            dims.len() as u32,
            ggml_type,
            payload.len() as u64,
            dims,
        )?;
        self.payload(payload)
    }

    /// Appends a fused group record (weights format 13 and later): one
    /// native tensor whose rows are the members' rows back to back, in
    /// member order.
    pub fn add_group(&mut self, name: &str, members: &[MemberSpec], payload: &[u8]) -> Result<()> {
        self.group_header(name, members, payload.len() as u64)?;
        self.payload(payload)
    }

    fn group_header(&mut self, name: &str, members: &[MemberSpec], payload_len: u64) -> Result<()> {
        if self.header.weights_version < FUSED_SINCE {
            return Err(Error::Usage {
                problem: UsageProblem::GroupFormat {
                    name: name.to_string(),
                    version: self.header.weights_version,
                    since: FUSED_SINCE,
                },
            });
        }
        if members.len() < 2 || members.len() > MAX_MEMBERS as usize {
            return Err(Error::Usage {
                problem: UsageProblem::GroupMembers {
                    name: name.to_string(),
                    members: members.len(),
                    max: MAX_MEMBERS,
                },
            });
        }
        self.record_header(3, name, members.len() as u32, 0, payload_len, &[])?;
        for m in members {
            Self::check_name(&m.name)?;
            let e = RawMember {
                row_start: m.row_start.into(),
                rows: m.rows.into(),
                name_len: (m.name.len() as u32).into(),
                reserved0: 0.into(),
                reserved1: 0.into(),
            };
            self.put(e.as_bytes())?;
            self.put(m.name.as_bytes())?;
            self.pad()?;
        }
        Ok(())
    }

    /// Writes the CRC and the header, fsyncs, re-reads the file to check its
    /// CRC, and moves it into place atomically (then fsyncs the directory).
    pub fn finish(mut self) -> Result<WriteSummary> {
        self.header.weights_len = self.pos - self.header.weights_off;
        let head = self.header.to_bytes();
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        crc.combine(&self.crc);
        let crc = crc.finalize();
        let tp = self.tmp.path.clone();
        self.file
            .write_all(&crc.to_le_bytes())
            .map_err(io("write", &tp))?;
        let bytes = self.pos + 4;
        let mut f = self.file.into_inner().map_err(|e| Error::Io {
            op: "write",
            path: tp.clone(),
            source: e.into_error(),
        })?;
        f.seek(SeekFrom::Start(0)).map_err(io("seek", &tp))?;
        f.write_all(&head).map_err(io("write", &tp))?;
        f.sync_all().map_err(io("fsync", &tp))?;
        drop(f);
        // Re-read with plain reads (not a mapping: a multi-GB bundle must not
        // count toward this process's resident set) and check the CRC.
        let mut f = File::open(&tp).map_err(io("open", &tp))?;
        let mut h = crc32fast::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut left = bytes - 4;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            f.read_exact(&mut buf[..n]).map_err(io("read back", &tp))?;
            h.update(&buf[..n]);
            left -= n as u64;
        }
        let mut tail = [0u8; 4];
        f.read_exact(&mut tail).map_err(io("read back", &tp))?;
        let computed = h.finalize();
        if computed != crc || u32::from_le_bytes(tail) != crc {
            return Err(Error::Crc {
                stored: u32::from_le_bytes(tail),
                computed,
            });
        }
        crate::write::persist(&tp, &self.out, self.replace)?;
        self.tmp.disarm();
        crate::write::sync_parent(&self.out)?;
        Ok(WriteSummary {
            path: self.out.clone(),
            bytes,
            crc,
            records: self.header.record_count,
            weights_version: self.header.weights_version,
        })
    }
}

/// Streams one record's payload into a [`GiwWriter`] (from
/// [`GiwWriter::begin_native`] / [`GiwWriter::begin_group`]).
pub struct PayloadWriter<'a> {
    w: &'a mut GiwWriter,
    /// The record's name (for errors).
    name: String,
    left: u64,
}

impl PayloadWriter<'_> {
    /// Ends the record: checks every announced byte was written, pads.
    pub fn finish(self) -> Result<()> {
        if self.left != 0 {
            return Err(Error::Usage {
                problem: UsageProblem::PayloadShort {
                    name: self.name,
                    missing: self.left,
                },
            });
        }
        self.w.payload(&[])
    }
}

impl Write for PayloadWriter<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if data.len() as u64 > self.left {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "payload longer than announced",
            ));
        }
        self.w.put(data).map_err(std::io::Error::other)?;
        self.left -= data.len() as u64;
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `bytes` to `out` atomically (temporary file, fsync, rename, fsync
/// of the directory), replacing an existing file. For small files (fixtures).
pub fn write_atomic(out: &Path, bytes: &[u8]) -> Result<()> {
    let (mut guard, mut f) = crate::temp::TempFile::create(out)?;
    let tmp = guard.path.clone();
    f.write_all(bytes).map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("fsync", &tmp))?;
    crate::write::persist(&tmp, out, true)?;
    guard.disarm();
    Ok(crate::write::sync_parent(out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage<T>(r: Result<T>) -> UsageProblem {
        match r {
            Err(Error::Usage { problem }) => problem,
            Err(e) => panic!("expected a usage error, got {e:?}"),
            Ok(_) => panic!("expected a usage error, got Ok"),
        }
    }

    /// Every misuse the writer refuses, each matched by its variant; none
    /// leaves a file behind.
    #[test]
    fn misuse_is_a_usage_problem() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("b.giw");
        let create =
            |quant: &str, v: u16| GiwWriter::create(&out, false, quant, Target::Cpu, v, b"");
        assert_eq!(
            usage(create("int8", 99)),
            UsageProblem::WeightsVersion {
                version: 99,
                min: MIN_WEIGHTS_VERSION,
                max: WEIGHTS_VERSION
            }
        );
        for label in ["", "int8 int8", "int8int8int8int8"] {
            assert!(matches!(
                usage(create(label, 12)),
                UsageProblem::QuantLabel { label: l, max: MAX_QUANT_LEN } if l == label
            ));
        }
        let mut w = create("int8", 12).unwrap();
        assert_eq!(
            usage(w.add_native("", b"")),
            UsageProblem::RecordName {
                name: String::new(),
                max: MAX_NAME_LEN
            }
        );
        assert!(matches!(
            usage(w.add_dense("norm", 0, &[1; 5], &[0; 4])),
            UsageProblem::DenseDims { dims: 5, .. }
        ));
        let members = [("a", 0), ("b", 1)].map(|(n, r)| MemberSpec {
            name: n.into(),
            row_start: r,
            rows: 1,
        });
        assert!(matches!(
            usage(w.add_group("ab", &members, b"")),
            UsageProblem::GroupFormat {
                version: 12,
                since: FUSED_SINCE,
                ..
            }
        ));
        drop(w);
        let mut w = create("int8", FUSED_SINCE).unwrap();
        assert!(matches!(
            usage(w.add_group("a", &members[..1], b"")),
            UsageProblem::GroupMembers { members: 1, .. }
        ));
        let mut p = w.begin_native("blk.0.attn_q.weight", 10).unwrap();
        p.write_all(&[0; 4]).unwrap();
        assert_eq!(
            usage(p.finish()),
            UsageProblem::PayloadShort {
                name: "blk.0.attn_q.weight".into(),
                missing: 6
            }
        );
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
