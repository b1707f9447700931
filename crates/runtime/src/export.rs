//! `gpack export`: a .gpack back to a GGUF that llama.cpp loads.
//!
//! The metadata is the MetadataKv section, which holds every source key in
//! source order with its GGUF value bytes (docs/FORMAT.md), so it comes back
//! as the source had it. Each tensor is written in the ggml type it is stored
//! exactly in: raw ggml bytes and F32/F16/BF16 as they are, Rows16 tensors
//! gathered back into ggml's row-major blocks (the inverse of the
//! interleave, byte for byte), fused q‖k‖v / gate‖up members cut back out by
//! their rows. A file converted with `--quant keep` therefore gives every
//! source tensor back bit for bit. Layouts with no ggml equivalent (the
//! int8/int4 transcodes of `--quant int8|int4`) are written as F32 values,
//! exactly what the runtime computes from them (the report names them).
//! Tensors are written in name order (the TensorIndex's), not the source's;
//! llama.cpp finds tensors by name. Stacked routed experts (MoE) are not
//! exported yet. The output is built through gpack's atomic temporary file.

use crate::error::{Error, ExportProblem, Result};
use crate::gpack::GpackWeights;
use crate::weights::TensorRef;
use gpack_format::payload::{self, TensorEntry};
use gpack_format::SectionKind;
use gpack_ingest::gguf::{decode_value, TensorHeader, Writer};
use gpack_ingest::{GgmlType, Metadata};
use gpack_quant::layout::Layout;
use gpack_quant::NativeView;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// What an export wrote: `gpack export --json`'s report (schema
/// `gpack.export.v1`, serialized as it is) and `gpack.export`'s dict in
/// Python.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExportReport {
    /// `"gpack.export.v1"`.
    pub schema: &'static str,
    /// The GGUF.
    pub output: PathBuf,
    /// Its size.
    pub size: u64,
    /// Metadata keys.
    pub metadata_keys: usize,
    /// Tensors.
    pub tensors: usize,
    /// Tensors written as F32 because their layout has no ggml type.
    #[serde(rename = "dequantized_to_f32")]
    pub dequantized: Vec<String>,
    /// Wall time of the export.
    pub seconds: f64,
}

/// How one tensor is written.
enum Plan<'a> {
    /// Bytes as they are.
    Bytes(&'a [u8]),
    /// Rows `start..start + rows` of a Rows16 tensor of type `t`, gathered.
    Rows16 {
        view: NativeView<'a>,
        t: GgmlType,
        start: usize,
        rows: usize,
    },
    /// Row-major rows of a native view, as they are.
    RowMajor {
        view: NativeView<'a>,
        start: usize,
        rows: usize,
    },
    /// Rows dequantized to f32.
    Dequantize {
        view: NativeView<'a>,
        start: usize,
        rows: usize,
    },
}

/// Writes `gpack`'s tensors and metadata to the GGUF `out` (replacing an
/// existing file only with `force`: without it an existing `out` is refused
/// before `gpack` is read). `progress` gets byte counts.
pub fn export(
    gpack: &Path,
    out: &Path,
    force: bool,
    progress: &dyn Fn(u64),
) -> Result<ExportReport> {
    let start = std::time::Instant::now();
    let fail = Error::Export;
    if !force && out.exists() {
        return Err(fail(ExportProblem::OutputExists {
            path: out.to_path_buf(),
        }));
    }
    let g = gpack_format::Gpack::open(gpack)?;
    let w = GpackWeights::from_gpack_lazy(g)?;
    let g = w.gpack();
    let kv = g
        .section(SectionKind::MetadataKv)
        .ok_or_else(|| fail(ExportProblem::NoMetadata))?;
    let mut md = Metadata::new();
    for rec in payload::parse_kv(kv.bytes)? {
        let v = decode_value(rec.value_type, rec.value).map_err(|source| {
            fail(ExportProblem::MetadataValue {
                key: rec.key.to_string(),
                source: Box::new(source),
            })
        })?;
        md.insert(rec.key, v);
    }
    let mut entries: Vec<&TensorEntry> = w.tensor_entries().collect();
    entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut headers = Vec::with_capacity(entries.len());
    let mut plans = Vec::with_capacity(entries.len());
    let mut dequantized = Vec::new();
    for e in &entries {
        let t = match w.try_tensor(&e.name) {
            None => {
                return Err(fail(ExportProblem::StackedExperts {
                    tensor: e.name.clone(),
                }))
            }
            Some(t) => t?,
        };
        let (ty, plan) = match t {
            TensorRef::Dense {
                ggml_type, bytes, ..
            } => (ggml_type, Plan::Bytes(bytes)),
            TensorRef::Native {
                view,
                row_start,
                rows,
            } => match view.layout() {
                Layout::Rows16(t) => (
                    t,
                    Plan::Rows16 {
                        view,
                        t,
                        start: row_start,
                        rows,
                    },
                ),
                Layout::Ggml(t) => (
                    t,
                    Plan::RowMajor {
                        view,
                        start: row_start,
                        rows,
                    },
                ),
                Layout::F32 => (
                    GgmlType::F32,
                    Plan::RowMajor {
                        view,
                        start: row_start,
                        rows,
                    },
                ),
                Layout::F16 => (
                    GgmlType::F16,
                    Plan::RowMajor {
                        view,
                        start: row_start,
                        rows,
                    },
                ),
                Layout::BF16 => (
                    GgmlType::BF16,
                    Plan::RowMajor {
                        view,
                        start: row_start,
                        rows,
                    },
                ),
                _ => {
                    dequantized.push(e.name.clone());
                    (
                        GgmlType::F32,
                        Plan::Dequantize {
                            view,
                            start: row_start,
                            rows,
                        },
                    )
                }
            },
        };
        headers.push(TensorHeader {
            name: e.name.clone(),
            ggml_type: ty,
            dims: e.dims.clone(),
        });
        plans.push(plan);
    }
    let mut file = gpack_format::AtomicFile::create(out, force)?;
    let tp = file.temp_path().to_path_buf();
    {
        let buf = BufWriter::with_capacity(1 << 20, file.file());
        let mut gw = Writer::new(buf, &md, &headers)?;
        let mut scratch = Vec::new();
        for (h, p) in headers.iter().zip(&plans) {
            let data: &[u8] = match p {
                Plan::Bytes(b) => b,
                Plan::Rows16 {
                    view,
                    t,
                    start,
                    rows,
                } => {
                    gather_rows16(view, *t, *start, *rows, &mut scratch);
                    &scratch
                }
                Plan::RowMajor { view, start, rows } => {
                    let n = view.row_code_bytes();
                    let c = view.codes();
                    let (a, b) = (start * n, (start + rows) * n);
                    c.get(a..b).ok_or_else(|| {
                        fail(ExportProblem::RowsOutsideCodes {
                            tensor: h.name.clone(),
                            start: *start,
                            rows: *rows,
                        })
                    })?
                }
                Plan::Dequantize { view, start, rows } => {
                    // 64 rows at a time (whole row groups of a Rows16
                    // view decode once each).
                    let (cols, end) = (view.cols(), start + rows);
                    let mut buf = vec![0f32; cols * 64.min(*rows)];
                    scratch.clear();
                    for r0 in (*start..end).step_by(64) {
                        let part = &mut buf[..64.min(end - r0) * cols];
                        view.dequantize_rows(r0, part);
                        for v in part.iter() {
                            scratch.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                    &scratch
                }
            };
            gw.write_tensor_data(data).map_err(|source| {
                fail(ExportProblem::TensorData {
                    tensor: h.name.clone(),
                    source: Box::new(source),
                })
            })?;
            progress(data.len() as u64);
        }
        let buf = gw.finish()?;
        let io = |op: &'static str| {
            let path = tp.clone();
            move |source| fail(ExportProblem::Io { op, path, source })
        };
        buf.into_inner()
            .map_err(|e| io("writing")(e.into_error()))?
            .flush()
            .map_err(io("writing"))?;
    }
    let size = std::fs::metadata(&tp)
        .map_err(|source| {
            fail(ExportProblem::Io {
                op: "stat",
                path: tp.clone(),
                source,
            })
        })?
        .len();
    file.commit()?;
    Ok(ExportReport {
        schema: "gpack.export.v1",
        output: out.to_path_buf(),
        size,
        metadata_keys: md.len(),
        tensors: headers.len(),
        dequantized,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// ggml's row-major blocks of rows `start..start + rows` of a Rows16 view.
fn gather_rows16(view: &NativeView<'_>, t: GgmlType, start: usize, rows: usize, out: &mut Vec<u8>) {
    const R: usize = gpack_quant::interleave::R;
    let (bs, ts) = t.block();
    let (bs, ts) = (bs as usize, ts as usize);
    let blocks = view.cols() / bs;
    let gs = view.rows16_group_bytes();
    let codes = view.codes();
    out.clear();
    out.resize(rows * blocks * ts, 0);
    for (i, r) in (start..start + rows).enumerate() {
        let group = &codes[r / R * gs..(r / R + 1) * gs];
        for b in 0..blocks {
            let o = (i * blocks + b) * ts;
            gpack_quant::interleave::gather_block(
                t,
                &group[b * R * ts..(b + 1) * R * ts],
                r % R,
                &mut out[o..o + ts],
            );
        }
    }
}
