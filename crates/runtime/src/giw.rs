//! The `.giw` provider: prequantized weights served in place from the mapped
//! bundle (`gpack prequant`, `--stream-weights` sidecars; docs/GIW.md).
//!
//! Every native tensor is a [`NativeView`] over the mapping (the format
//! reader copies a payload only if it is not 16-aligned, which never happens
//! for a file it maps; [`GiwWeights::copied_payloads`] says how many were).
//! A fused group record (weights format 13+) is one native tensor; its
//! members are served as row ranges of it, so the graph's fused-call
//! detection (`model.rs`) runs one matrix-vector call over q‖k‖v or gate‖up.
//!
//! Metadata: the bundle carries the source GGUF truncated at its tensor-data
//! boundary. Only scalars, strings and numeric arrays are decoded at open;
//! string arrays (vocabulary, merges: megabytes) are skipped unparsed, so the
//! heap stays a small fraction of the weights.
//!
//! The quant is baked in at build time: [`GiwWeights::open`] with an
//! `expected_quant` refuses a bundle of another quant.

use crate::weights::{HasMetadata, TensorRef, WeightSource};
use gpack_format::giw::{Giw, ReadOptions, RecordKind};
use gpack_ingest::{Array, GgufString, Metadata, Value};
use gpack_quant::{GgmlType, NativeView};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why a bundle could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GiwError {
    /// The bundle is unreadable, corrupt or of an unsupported version.
    #[error("{path}")]
    Bundle {
        /// The bundle.
        path: PathBuf,
        /// Why.
        #[source]
        source: gpack_format::giw::Error,
    },
    /// The bundle was built with another quant than the one asked for.
    #[error(
        "{path} was built with --quant {found}, but --quant {expected} was requested; the quant of a .giw is fixed when it is built (rebuild it with gpack prequant --quant {expected})"
    )]
    QuantMismatch {
        /// The bundle.
        path: PathBuf,
        /// The quant requested.
        expected: String,
        /// The quant the bundle holds.
        found: String,
    },
    /// A native tensor does not parse.
    #[error("native tensor {name}")]
    Tensor {
        /// Tensor (or group) name.
        name: String,
        /// Why.
        #[source]
        source: gpack_quant::Error,
    },
    /// A record or the metadata is inconsistent.
    #[error("{what}: {problem}")]
    Invalid {
        /// Which record or key.
        what: String,
        /// What is wrong.
        problem: &'static str,
    },
}

enum Entry {
    Native {
        record: usize,
        row_start: usize,
        rows: usize,
    },
    Dense {
        record: usize,
        ggml_type: GgmlType,
    },
}

/// A mapped, validated `.giw` bundle serving its tensors in place.
pub struct GiwWeights {
    giw: Giw,
    metadata: Metadata,
    index: HashMap<String, Entry>,
}

impl std::fmt::Debug for GiwWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GiwWeights")
            .field("giw", &self.giw)
            .field("tensors", &self.index.len())
            .finish()
    }
}

/// Caps of the metadata scan (GGUF's own limits are looser; a bundle we
/// wrote never comes near these).
const MAX_KV: u64 = 1 << 20;
const MAX_DEPTH: u32 = 4;

struct Cur<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok()?;
        let e = self.p.checked_add(n)?;
        let s = self.b.get(self.p..e)?;
        self.p = e;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn str(&mut self) -> Option<&'a [u8]> {
        let n = self.u64()?;
        self.take(n)
    }
}

fn fixed_size(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        _ => return None,
    })
}

fn scalar(ty: u32, b: &[u8]) -> Option<Value> {
    let a8 = |n: usize| -> Option<[u8; 8]> {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(b.get(..n)?);
        Some(a)
    };
    Some(match ty {
        0 => Value::U8(*b.first()?),
        1 => Value::I8(*b.first()? as i8),
        2 => Value::U16(u16::from_le_bytes(a8(2)?[..2].try_into().ok()?)),
        3 => Value::I16(i16::from_le_bytes(a8(2)?[..2].try_into().ok()?)),
        4 => Value::U32(u32::from_le_bytes(a8(4)?[..4].try_into().ok()?)),
        5 => Value::I32(i32::from_le_bytes(a8(4)?[..4].try_into().ok()?)),
        6 => Value::F32(f32::from_le_bytes(a8(4)?[..4].try_into().ok()?)),
        7 => Value::Bool(*b.first()? != 0),
        10 => Value::U64(u64::from_le_bytes(a8(8)?)),
        11 => Value::I64(i64::from_le_bytes(a8(8)?)),
        12 => Value::F64(f64::from_le_bytes(a8(8)?)),
        _ => return None,
    })
}

/// Skips one value of type `ty`; returns `None` on malformed bytes.
fn skip(c: &mut Cur<'_>, ty: u32, depth: u32) -> Option<()> {
    if let Some(n) = fixed_size(ty) {
        c.take(n)?;
        return Some(());
    }
    match ty {
        8 => {
            c.str()?;
        }
        9 if depth < MAX_DEPTH => {
            let et = c.u32()?;
            let n = c.u64()?;
            if let Some(sz) = fixed_size(et) {
                c.take(n.checked_mul(sz)?)?;
            } else {
                for _ in 0..n {
                    skip(c, et, depth + 1)?;
                }
            }
        }
        _ => return None,
    }
    Some(())
}

/// Decodes the scalar, string and numeric-array keys of a GGUF's metadata
/// section; string arrays and nested arrays are skipped. Never panics.
fn scan_metadata(b: &[u8]) -> Option<Metadata> {
    let mut c = Cur { b, p: 0 };
    if c.take(4)? != b"GGUF" {
        return None;
    }
    let _version = c.u32()?;
    let _n_tensors = c.u64()?;
    let n_kv = c.u64()?;
    if n_kv > MAX_KV {
        return None;
    }
    let mut md = Metadata::new();
    for _ in 0..n_kv {
        let key = String::from_utf8(c.str()?.to_vec()).ok()?;
        let ty = c.u32()?;
        if let Some(n) = fixed_size(ty) {
            md.insert(key, scalar(ty, c.take(n)?)?);
        } else if ty == 8 {
            md.insert(
                key,
                Value::String(GgufString::from_bytes(c.str()?.to_vec())),
            );
        } else if ty == 9 {
            let save = c.p;
            let et = c.u32()?;
            let n = c.u64()?;
            let words = |c: &mut Cur<'_>| -> Option<Vec<[u8; 4]>> {
                let body = c.take(n.checked_mul(4)?)?;
                Some(
                    body.chunks_exact(4)
                        .map(|w| [w[0], w[1], w[2], w[3]])
                        .collect(),
                )
            };
            let v = match et {
                6 => Some(Array::F32(
                    words(&mut c)?.into_iter().map(f32::from_le_bytes).collect(),
                )),
                5 => Some(Array::I32(
                    words(&mut c)?.into_iter().map(i32::from_le_bytes).collect(),
                )),
                4 => Some(Array::U32(
                    words(&mut c)?.into_iter().map(u32::from_le_bytes).collect(),
                )),
                _ => None,
            };
            match v {
                Some(a) => {
                    md.insert(key, Value::Array(a));
                }
                None => {
                    c.p = save;
                    skip(&mut c, 9, 0)?;
                }
            }
        } else {
            return None;
        }
    }
    Some(md)
}

impl GiwWeights {
    /// Maps and validates `path` (CRC included). With `expected_quant`, a
    /// bundle built with another quant is an error that says so.
    pub fn open(path: &Path, expected_quant: Option<&str>) -> Result<Self, GiwError> {
        Self::open_with(path, expected_quant, &ReadOptions::default())
    }

    /// [`GiwWeights::open`] with explicit reader options.
    pub fn open_with(
        path: &Path,
        expected_quant: Option<&str>,
        opts: &ReadOptions,
    ) -> Result<Self, GiwError> {
        let giw = Giw::open_with(path, opts).map_err(|source| GiwError::Bundle {
            path: path.to_path_buf(),
            source,
        })?;
        if let Some(q) = expected_quant {
            if giw.header().quant != q {
                return Err(GiwError::QuantMismatch {
                    path: path.to_path_buf(),
                    expected: q.to_string(),
                    found: giw.header().quant.clone(),
                });
            }
        }
        Self::from_giw(giw)
    }

    /// Indexes an opened bundle, validating every native tensor once.
    pub fn from_giw(giw: Giw) -> Result<Self, GiwError> {
        let metadata = scan_metadata(giw.metadata()).ok_or(GiwError::Invalid {
            what: "metadata GGUF".into(),
            problem: "malformed",
        })?;
        let mut index = HashMap::new();
        for (i, r) in giw.records().iter().enumerate() {
            match r.kind {
                RecordKind::Dense => {
                    let ggml_type = GgmlType::from_id(r.ggml_type).ok_or(GiwError::Invalid {
                        what: r.name.clone(),
                        problem: "unknown ggml type",
                    })?;
                    let n: u64 = r.dims.iter().product();
                    if ggml_type.bytes_for(n) != Some(r.payload_len) {
                        return Err(GiwError::Invalid {
                            what: r.name.clone(),
                            problem: "dense payload length does not match its type and shape",
                        });
                    }
                    index.insert(
                        r.name.clone(),
                        Entry::Dense {
                            record: i,
                            ggml_type,
                        },
                    );
                }
                RecordKind::Native | RecordKind::Group => {
                    let v =
                        NativeView::parse(giw.payload(i)).map_err(|source| GiwError::Tensor {
                            name: r.name.clone(),
                            source,
                        })?;
                    if v.byte_len() as u64 != r.payload_len {
                        return Err(GiwError::Invalid {
                            what: r.name.clone(),
                            problem: "payload longer than its native tensor",
                        });
                    }
                    if r.kind == RecordKind::Native {
                        index.insert(
                            r.name.clone(),
                            Entry::Native {
                                record: i,
                                row_start: 0,
                                rows: v.rows(),
                            },
                        );
                    }
                    for m in &r.members {
                        index.insert(
                            m.name.clone(),
                            Entry::Native {
                                record: i,
                                row_start: m.row_start as usize,
                                rows: m.rows as usize,
                            },
                        );
                    }
                }
            }
        }
        Ok(GiwWeights {
            giw,
            metadata,
            index,
        })
    }

    /// The underlying bundle (header, records, fused-group detection).
    pub fn giw(&self) -> &Giw {
        &self.giw
    }

    /// The quant the bundle was built with.
    pub fn quant(&self) -> &str {
        &self.giw.header().quant
    }

    /// The metadata decoded at open.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Payloads copied to the heap because they were not aligned (0 for a
    /// mapped bundle written by gpack).
    pub fn copied_payloads(&self) -> usize {
        self.giw.copied_payloads()
    }
}

impl HasMetadata for GiwWeights {
    fn metadata_table(&self) -> &Metadata {
        &self.metadata
    }
}

impl WeightSource for GiwWeights {
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        match self.index.get(name)? {
            Entry::Native {
                record,
                row_start,
                rows,
            } => {
                // Validated in `from_giw`; the mapping is immutable since.
                let view = NativeView::parse(self.giw.payload(*record)).ok()?;
                Some(TensorRef::Native {
                    view,
                    row_start: *row_start,
                    rows: *rows,
                })
            }
            Entry::Dense { record, ggml_type } => Some(TensorRef::Dense {
                ggml_type: *ggml_type,
                dims: self.giw.records()[*record].dims.clone(),
                bytes: self.giw.payload(*record),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GgufWeights, Logits, Model};

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    fn logits(w: &dyn WeightSource) -> Vec<f32> {
        let m = Model::load(w).expect("load");
        let mut s = m.new_state(64);
        m.forward(&mut s, &[1, 5, 9, 13, 2], Logits::All)
            .expect("forward")
            .to_vec()
    }

    /// The committed fixtures (testdata/giw/, made by `testdata/giw/make.sh`
    /// from tiny llama Q8_0 with --quant int4): the v12 file (separate
    /// records) and the v13 file (fused groups, members served as row ranges
    /// of one view) give the same logits, within quantization of the same
    /// GGUF; both alias every payload.
    #[test]
    fn giw_fixtures_v12_v13_same_logits() {
        let mut all = Vec::new();
        for f in ["llama-int4.cpu.v12.giw", "llama-int4.metal.v13.giw"] {
            let p = repo().join("testdata/giw").join(f);
            let w = GiwWeights::open(&p, Some("int4")).unwrap();
            assert_eq!(w.copied_payloads(), 0);
            all.push(logits(&w));
        }
        assert!(all[0] == all[1], "v12 and v13 logits differ");
        // And close to the unquantized source (int4 error budget).
        let src = repo().join("testdata/tiny/llama/llama-q8_0.gguf");
        let want = logits(&GgufWeights::open(&src).unwrap());
        let rms = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
        let diff: Vec<f32> = all[0].iter().zip(&want).map(|(a, b)| a - b).collect();
        assert!(
            rms(&diff) < 0.5 * rms(&want),
            "{} vs {}",
            rms(&diff),
            rms(&want)
        );
    }

    #[test]
    fn giw_refuses_another_quant() {
        let p = repo().join("testdata/giw/llama-int4.cpu.v12.giw");
        let e = GiwWeights::open(&p, Some("int8int8")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("int4") && msg.contains("int8int8"), "{msg}");
    }
}
