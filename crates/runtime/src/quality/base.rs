//! The base log-probs file of `llama-perplexity --kl-divergence-base F`
//! (llama.cpp's `tools/perplexity`), read and written byte for byte, so
//! either tool's file serves the other. Little-endian throughout:
//!
//! | bytes | what |
//! | --- | --- |
//! | 8 | `_logits_` |
//! | 4 | n_ctx (u32) |
//! | 4 | n_vocab (i32) |
//! | 4 | n_chunk (i32) |
//! | 4 · n_chunk · n_ctx | the evaluated tokens (i32), chunk after chunk, as tokenized (not with BOS put in) |
//! | 2 · rows · [`row_len`] per chunk | for each scored position (n_ctx − 1 − n_ctx/2 per chunk) a row: scale and minimum log-prob (f32 each), then one u16 per vocabulary token (log-prob = scale · q + min), padded to an even count |
//!
//! The reader checks the header against the file's length before it
//! allocates anything and names the offset of whatever is wrong; the writer
//! builds a temporary file next to the destination and moves it into place
//! when the last chunk is written (an interrupted run leaves the old file,
//! if any, as it was).

use super::error::QualityError;
use super::logprob::row_len;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"_logits_";
const HEADER: u64 = 20;

/// The header and tokens of a base file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseHeader {
    /// Tokens per chunk.
    pub n_ctx: u32,
    /// Vocabulary size of the model that wrote it.
    pub n_vocab: u32,
    /// Chunks.
    pub n_chunk: u32,
    /// `n_chunk × n_ctx` token ids.
    pub tokens: Vec<u32>,
}

impl BaseHeader {
    /// Scored rows per chunk: positions `n_ctx/2 .. n_ctx − 1`.
    pub fn rows_per_chunk(&self) -> usize {
        rows_per_chunk(self.n_ctx as usize)
    }

    /// u16 values of one chunk's rows.
    pub fn chunk_len(&self) -> usize {
        self.rows_per_chunk() * row_len(self.n_vocab as usize)
    }

    /// The tokens of chunk `i`.
    pub fn chunk_tokens(&self, i: usize) -> &[u32] {
        let n = self.n_ctx as usize;
        &self.tokens[i * n..(i + 1) * n]
    }
}

/// Scored rows per chunk of `n_ctx` tokens.
pub fn rows_per_chunk(n_ctx: usize) -> usize {
    n_ctx.saturating_sub(1 + n_ctx / 2)
}

/// Reads a base file chunk by chunk.
pub struct BaseReader {
    path: PathBuf,
    file: std::io::BufReader<std::fs::File>,
    header: BaseHeader,
    next: u32,
    offset: u64,
}

impl BaseReader {
    /// Opens `path` and reads its header and tokens, checking every length
    /// against the file's size and every token against the vocabulary.
    pub fn open(path: &Path) -> Result<BaseReader, QualityError> {
        let f = std::fs::File::open(path).map_err(QualityError::io("opening", path))?;
        let len = f
            .metadata()
            .map_err(QualityError::io("reading", path))?
            .len();
        let bad = |offset: u64, problem: String| QualityError::BadBase {
            path: path.to_path_buf(),
            offset,
            problem,
        };
        let mut file = std::io::BufReader::with_capacity(1 << 20, f);
        if len < HEADER {
            return Err(bad(
                0,
                format!("{len} bytes; a base file starts with a {HEADER}-byte header"),
            ));
        }
        let mut h = [0u8; HEADER as usize];
        file.read_exact(&mut h)
            .map_err(QualityError::io("reading", path))?;
        if &h[..8] != MAGIC {
            return Err(bad(
                0,
                format!(
                    "magic {:?}, expected \"_logits_\" (llama-perplexity --kl-divergence-base's file)",
                    String::from_utf8_lossy(&h[..8])
                ),
            ));
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let (n_ctx, n_vocab, n_chunk) = (word(8), word(12) as i32, word(16) as i32);
        if n_ctx < 4 {
            return Err(bad(
                8,
                format!("n_ctx {n_ctx}: a context under 4 scores no token"),
            ));
        }
        if n_vocab <= 0 {
            return Err(bad(
                12,
                format!("n_vocab {n_vocab}, expected a positive count"),
            ));
        }
        if n_chunk <= 0 {
            return Err(bad(
                16,
                format!("n_chunk {n_chunk}, expected a positive count"),
            ));
        }
        let (n_vocab, n_chunk) = (n_vocab as u32, n_chunk as u32);
        let rows = rows_per_chunk(n_ctx as usize) as u64;
        let expected = u64::from(n_chunk)
            .checked_mul(u64::from(n_ctx))
            .and_then(|t| t.checked_mul(4))
            .and_then(|t| {
                rows.checked_mul(row_len(n_vocab as usize) as u64)
                    .and_then(|r| r.checked_mul(2))
                    .and_then(|r| r.checked_mul(u64::from(n_chunk)))
                    .and_then(|r| r.checked_add(t))
            })
            .and_then(|b| b.checked_add(HEADER));
        match expected {
            Some(e) if e == len => {}
            Some(e) => {
                return Err(bad(
                    len.min(e),
                    format!(
                        "{len} bytes, but its header (n_ctx {n_ctx}, n_vocab {n_vocab}, \
                         n_chunk {n_chunk}) says {e}: a truncated or foreign file"
                    ),
                ))
            }
            None => {
                return Err(bad(
                    8,
                    format!(
                        "header (n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}) \
                         overflows any file size"
                    ),
                ))
            }
        }
        // The length check above bounds this allocation by the file's size.
        let n_tok = n_chunk as usize * n_ctx as usize;
        let mut raw = vec![0u8; n_tok * 4];
        file.read_exact(&mut raw)
            .map_err(QualityError::io("reading", path))?;
        let mut tokens = Vec::with_capacity(n_tok);
        for (i, b) in raw.chunks_exact(4).enumerate() {
            let t = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if t < 0 || t as u32 >= n_vocab {
                return Err(bad(
                    HEADER + 4 * i as u64,
                    format!("token {t}, outside the vocabulary of {n_vocab}"),
                ));
            }
            tokens.push(t as u32);
        }
        Ok(BaseReader {
            path: path.to_path_buf(),
            file,
            header: BaseHeader {
                n_ctx,
                n_vocab,
                n_chunk,
                tokens,
            },
            next: 0,
            offset: HEADER + 4 * n_tok as u64,
        })
    }

    /// The header and tokens.
    pub fn header(&self) -> &BaseHeader {
        &self.header
    }

    /// Reads the next chunk's rows into `out` (resized to
    /// [`BaseHeader::chunk_len`]); `false` after the last chunk. A row
    /// whose scale or minimum is not finite is an error naming its offset.
    pub fn next_chunk(&mut self, out: &mut Vec<u16>) -> Result<bool, QualityError> {
        if self.next >= self.header.n_chunk {
            return Ok(false);
        }
        let n = self.header.chunk_len();
        let mut raw = vec![0u8; n * 2];
        self.file
            .read_exact(&mut raw)
            .map_err(QualityError::io("reading", &self.path))?;
        out.clear();
        out.extend(
            raw.chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
        let nv = row_len(self.header.n_vocab as usize);
        for (r, row) in out.chunks_exact(nv).enumerate() {
            let (scale, min) = super::logprob::row_scale_min(row);
            if !scale.is_finite() || scale < 0.0 || !min.is_finite() {
                return Err(QualityError::BadBase {
                    path: self.path.clone(),
                    offset: self.offset + (r * nv * 2) as u64,
                    problem: format!(
                        "chunk {} row {r}: scale {scale}, minimum log-prob {min} \
                         (expected finite numbers, the scale not negative)",
                        self.next + 1
                    ),
                });
            }
        }
        self.offset += (n * 2) as u64;
        self.next += 1;
        Ok(true)
    }
}

/// Writes a base file: the header and tokens first, then chunk by chunk;
/// the destination appears (replacing any file there) only at
/// [`BaseWriter::finish`].
pub struct BaseWriter {
    file: gpack_format::AtomicFile,
    rows: usize,
    chunks_left: u32,
}

impl BaseWriter {
    /// Starts `out` for `header` (its tokens: `n_chunk × n_ctx`).
    pub fn create(out: &Path, header: &BaseHeader) -> Result<BaseWriter, QualityError> {
        assert_eq!(
            header.tokens.len(),
            header.n_chunk as usize * header.n_ctx as usize,
            "one token per position of every chunk"
        );
        let mut file =
            gpack_format::AtomicFile::create(out, true).map_err(|e| QualityError::Io {
                what: "creating",
                path: out.to_path_buf(),
                source: std::io::Error::other(e),
            })?;
        let mut b = Vec::with_capacity(HEADER as usize + 4 * header.tokens.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&header.n_ctx.to_le_bytes());
        b.extend_from_slice(&header.n_vocab.to_le_bytes());
        b.extend_from_slice(&header.n_chunk.to_le_bytes());
        for t in &header.tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        let tp = file.temp_path().to_path_buf();
        file.file()
            .write_all(&b)
            .map_err(QualityError::io("writing", &tp))?;
        Ok(BaseWriter {
            file,
            rows: header.chunk_len(),
            chunks_left: header.n_chunk,
        })
    }

    /// Appends one chunk's rows.
    pub fn write_chunk(&mut self, rows: &[u16]) -> Result<(), QualityError> {
        assert_eq!(rows.len(), self.rows, "one chunk of rows");
        assert!(self.chunks_left > 0, "more chunks than the header says");
        let mut b = Vec::with_capacity(rows.len() * 2);
        for r in rows {
            b.extend_from_slice(&r.to_le_bytes());
        }
        let tp = self.file.temp_path().to_path_buf();
        self.file
            .file()
            .write_all(&b)
            .map_err(QualityError::io("writing", &tp))?;
        self.chunks_left -= 1;
        Ok(())
    }

    /// Moves the file into place (every chunk must have been written).
    pub fn finish(self) -> Result<PathBuf, QualityError> {
        assert_eq!(self.chunks_left, 0, "every chunk written");
        let out = self.file.out().to_path_buf();
        self.file.commit().map_err(|e| QualityError::Io {
            what: "writing",
            path: out,
            source: std::io::Error::other(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> BaseHeader {
        BaseHeader {
            n_ctx: 6,
            n_vocab: 5,
            n_chunk: 2,
            tokens: vec![1, 2, 3, 4, 0, 1, 4, 3, 2, 1, 0, 0],
        }
    }

    #[test]
    fn a_written_file_reads_back() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("base.kld");
        let h = header();
        assert_eq!(h.rows_per_chunk(), 2);
        assert_eq!(h.chunk_len(), 2 * 10);
        let mut w = BaseWriter::create(&p, &h).unwrap();
        let c0: Vec<u16> = (0..20).collect();
        let c1: Vec<u16> = (100..120).collect();
        w.write_chunk(&c0).unwrap();
        assert!(!p.exists(), "the destination appears only when finished");
        w.write_chunk(&c1).unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 20 + 48 + 80);
        let mut r = BaseReader::open(&p).unwrap();
        assert_eq!(r.header(), &h);
        let mut buf = Vec::new();
        assert!(r.next_chunk(&mut buf).unwrap());
        assert_eq!(buf, c0);
        assert!(r.next_chunk(&mut buf).unwrap());
        assert_eq!(buf, c1);
        assert!(!r.next_chunk(&mut buf).unwrap());
    }

    #[test]
    fn bad_files_are_refused_with_their_offset() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("base.kld");
        let mut w = BaseWriter::create(&p, &header()).unwrap();
        w.write_chunk(&[0; 20]).unwrap();
        w.write_chunk(&[0; 20]).unwrap();
        w.finish().unwrap();
        let good = std::fs::read(&p).unwrap();
        let check = |bytes: &[u8], want: &str| {
            std::fs::write(&p, bytes).unwrap();
            let e = BaseReader::open(&p).err().expect("refused").to_string();
            assert!(e.contains(want), "{e}");
        };
        check(&good[..10], "offset 0: 10 bytes");
        check(&good[..good.len() - 1], "a truncated or foreign file");
        let mut m = good.clone();
        m[0] = b'X';
        check(&m, "expected \"_logits_\"");
        let mut m = good.clone();
        m[20..24].copy_from_slice(&9i32.to_le_bytes());
        check(&m, "offset 20: token 9, outside the vocabulary of 5");
        let mut m = good.clone();
        m[16..20].copy_from_slice(&(-1i32).to_le_bytes());
        check(&m, "n_chunk -1");
        let mut m = good.clone();
        m[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        check(&m, "says");
        // A NaN scale in chunk 2's first row.
        let mut m = good;
        let at = 20 + 48 + 40;
        m[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(&p, &m).unwrap();
        let mut r = BaseReader::open(&p).unwrap();
        let mut buf = Vec::new();
        r.next_chunk(&mut buf).unwrap();
        let e = r.next_chunk(&mut buf).unwrap_err().to_string();
        assert!(
            e.contains(&format!("offset {at}: chunk 2 row 0: scale NaN")),
            "{e}"
        );
    }
}
