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
//! boundary. It is read by the one GGUF reader (`gpack-ingest`) without its
//! string arrays (vocabulary, merges: megabytes), so the heap stays a small
//! fraction of the weights.
//!
//! The quant is baked in at build time: [`GiwWeights::open`] with an
//! `expected_quant` refuses a bundle of another quant.

use crate::weights::{HasMetadata, TensorRef, WeightSource};
use gpack_format::giw::{Giw, ReadOptions, RecordKind};
use gpack_ingest::Metadata;
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
    /// The bundle's metadata GGUF does not parse.
    #[error("the bundle's metadata")]
    Metadata {
        /// Why.
        #[source]
        source: gpack_ingest::Error,
    },
    /// A record is inconsistent with what the runtime serves.
    #[error("{tensor}: {problem}")]
    Invalid {
        /// The record's tensor (or group) name.
        tensor: String,
        /// What is wrong.
        problem: RecordProblem,
    },
}

/// What is wrong with a record the format reader accepted but the runtime
/// cannot serve (the problem of [`GiwError::Invalid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordProblem {
    /// A dense record's ggml type id is unknown.
    #[error("unknown ggml type {id}")]
    UnknownType {
        /// The type id.
        id: u32,
    },
    /// A dense payload's length is not its type's size for its shape.
    #[error("dense payload length does not match its type and shape")]
    DenseLength,
    /// A native payload is longer than the native tensor it holds.
    #[error("payload longer than its native tensor")]
    NativeLength,
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
        let (_, metadata) = gpack_ingest::gguf::parse_metadata_without_string_arrays(
            giw.metadata(),
            Path::new("the .giw's metadata GGUF"),
        )
        .map_err(|source| GiwError::Metadata { source })?;
        let mut index = HashMap::new();
        for (i, r) in giw.records().iter().enumerate() {
            match r.kind {
                RecordKind::Dense => {
                    let ggml_type = GgmlType::from_id(r.ggml_type).ok_or(GiwError::Invalid {
                        tensor: r.name.clone(),
                        problem: RecordProblem::UnknownType { id: r.ggml_type },
                    })?;
                    let n: u64 = r.dims.iter().product();
                    if ggml_type.bytes_for(n) != Some(r.payload_len) {
                        return Err(GiwError::Invalid {
                            tensor: r.name.clone(),
                            problem: RecordProblem::DenseLength,
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
                            tensor: r.name.clone(),
                            problem: RecordProblem::NativeLength,
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

    // See: issue 15 (GiwError::Invalid's problem was a &'static str).
    #[test]
    fn giw_refuses_records_it_cannot_serve_by_problem() {
        use gpack_format::giw::{GiwWriter, Target};
        let fixture = Giw::open(&repo().join("testdata/giw/llama-int4.cpu.v12.giw")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.giw");
        let load = |ggml_type: u32, payload: &[u8]| {
            let mut w =
                GiwWriter::create(&p, true, "int4", Target::Cpu, 12, fixture.metadata()).unwrap();
            w.add_dense("norm.weight", ggml_type, &[5], payload)
                .unwrap();
            w.finish().unwrap();
            GiwWeights::open(&p, None).unwrap_err()
        };
        let e = load(99, &[0u8; 20]);
        assert!(
            matches!(&e, GiwError::Invalid { tensor, problem: RecordProblem::UnknownType { id: 99 } } if tensor == "norm.weight"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "norm.weight: unknown ggml type 99");
        // F32 × 5 is 20 bytes, not 24.
        let e = load(0, &[0u8; 24]);
        assert!(
            matches!(
                e,
                GiwError::Invalid {
                    problem: RecordProblem::DenseLength,
                    ..
                }
            ),
            "{e:?}"
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
