//! The slow-path weight provider: a GGUF file or a Hugging Face directory
//! (anything `gpack_ingest::Source::open` reads), every matrix transcoded
//! into its native layout in memory at load.
//!
//! Why transcode instead of running on ggml blocks: the kernels only have fast
//! paths for the native structure-of-arrays layouts (DESIGN.md), and the
//! transcode is exact, so a model loaded here gives the same logits as the
//! same model loaded zero-copy from a `.gpack` with `--quant keep`.
//!
//! q‖k‖v and gate‖up of a layer are fused at load when they share a ggml
//! type and column count: their ggml rows are concatenated (ggml blocks never
//! straddle rows, so the concatenation is itself a valid ggml tensor) and
//! transcoded as one native tensor; each member is served as a row range.
//! 1-D tensors (norms, biases, rope factors) are copied as they are.

use crate::error::{Error, Result};
use crate::weights::{AlignedBuf, HasMetadata, TensorRef, WeightSource};
use gpack_ingest::{Metadata, Source, TensorInfo};
use gpack_quant::{GgmlType, NativeView};
use std::collections::HashMap;
use std::path::Path;

enum Entry {
    Native {
        buf: usize,
        row_start: usize,
        rows: usize,
    },
    Dense {
        ggml_type: GgmlType,
        dims: Vec<u64>,
        bytes: Vec<u8>,
    },
}

/// A model read with `gpack_ingest` and transcoded into native layouts in
/// memory (owned; the source mapping is released after load).
pub struct GgufWeights {
    metadata: Metadata,
    natives: Vec<AlignedBuf>,
    index: HashMap<String, Entry>,
    native_bytes: usize,
}

impl std::fmt::Debug for GgufWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWeights")
            .field("tensors", &self.index.len())
            .field("native_tensors", &self.natives.len())
            .field("native_bytes", &self.native_bytes)
            .finish()
    }
}

fn is_matrix(t: &TensorInfo) -> bool {
    t.dims.len() >= 2 && t.dims[1..].iter().product::<u64>() > 1
}

fn rows_cols(t: &TensorInfo) -> (u64, u64) {
    (t.dims[1..].iter().product(), t.dims[0])
}

fn quant_err(name: &str) -> impl FnOnce(gpack_quant::Error) -> Error + '_ {
    move |e| Error::Quant {
        name: name.to_string(),
        source: e,
    }
}

/// Transcodes `src` (`rows × cols` of `ty`) into a fresh aligned native buffer.
pub(crate) fn transcode_to_buf(
    name: &str,
    ty: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
) -> Result<AlignedBuf> {
    let layout = gpack_quant::canonical_layout_for(ty, cols);
    if layout.is_rows16() {
        let len = gpack_quant::NativeTensorHeader::new(layout, rows, cols, false)
            .map_err(quant_err(name))?
            .1;
        let mut buf = AlignedBuf::zeroed(len as usize);
        gpack_quant::transcode_canonical(ty, src, rows, cols, &mut buf).map_err(quant_err(name))?;
        NativeView::parse(buf.as_slice()).map_err(quant_err(name))?;
        return Ok(buf);
    }
    // Types whose scales are f16 in the blocks also get the exact f16 copy,
    // which the kernels then read (as many bytes per weight as the GGUF).
    let f16 = gpack_quant::transcode::f16_scales_exact_for(ty);
    let len = gpack_quant::NativeTensorHeader::new(layout, rows, cols, f16)
        .map_err(quant_err(name))?
        .1;
    let mut buf = AlignedBuf::zeroed(len as usize);
    if f16 {
        gpack_quant::transcode::transcode_with_f16_scales(ty, src, rows, cols, &mut buf)
            .map_err(quant_err(name))?;
    } else {
        gpack_quant::transcode(ty, src, rows, cols, &mut buf).map_err(quant_err(name))?;
    }
    // Validate once here; `tensor()` re-parses cheaply and cannot fail after this.
    NativeView::parse(buf.as_slice()).map_err(quant_err(name))?;
    Ok(buf)
}

impl GgufWeights {
    /// Opens `path` (GGUF file, split GGUF, safetensors file/index or HF
    /// directory) and transcodes its matrices.
    pub fn open(path: &Path) -> Result<Self> {
        let source = Source::open(path)?;
        Self::from_source(&source)
    }

    /// Transcodes the tensors of an opened source, on all cores (one tensor
    /// or fused group per task; a fused group's ggml rows are concatenated
    /// inside its task, so peak extra memory is a few groups, not the model).
    pub fn from_source(source: &Source) -> Result<Self> {
        struct Job<'s> {
            members: Vec<&'s TensorInfo>,
            ty: GgmlType,
            rows: u64,
            cols: u64,
        }
        let mut index: HashMap<String, Entry> = HashMap::new();
        let mut jobs: Vec<Job<'_>> = Vec::new();
        let mut fused: std::collections::HashSet<&str> = std::collections::HashSet::new();

        for group in source.fusable_groups() {
            let members: Vec<&TensorInfo> = group.iter().map(|&i| &source.tensors[i]).collect();
            let ty = members[0].ggml_type;
            let cols = members[0].dims[0];
            let member_rows: Vec<u64> = members.iter().map(|t| rows_cols(t).0).collect();
            if !members.iter().all(|t| {
                is_matrix(t) && t.ggml_type == ty && t.dims[0] == cols && t.dims.len() == 2
            }) || !gpack_quant::can_fuse(
                gpack_quant::canonical_layout_for(ty, cols),
                &member_rows,
            ) {
                continue;
            }
            let mut row = 0usize;
            for t in &members {
                let rows = rows_cols(t).0 as usize;
                index.insert(
                    t.name.clone(),
                    Entry::Native {
                        buf: jobs.len(),
                        row_start: row,
                        rows,
                    },
                );
                fused.insert(t.name.as_str());
                row += rows;
            }
            jobs.push(Job {
                members,
                ty,
                rows: row as u64,
                cols,
            });
        }
        for t in &source.tensors {
            if fused.contains(t.name.as_str()) {
                continue;
            }
            if is_matrix(t) {
                let (rows, cols) = rows_cols(t);
                index.insert(
                    t.name.clone(),
                    Entry::Native {
                        buf: jobs.len(),
                        row_start: 0,
                        rows: rows as usize,
                    },
                );
                jobs.push(Job {
                    members: vec![t],
                    ty: t.ggml_type,
                    rows,
                    cols,
                });
            } else {
                let bytes = source.tensor_bytes(t)?;
                index.insert(
                    t.name.clone(),
                    Entry::Dense {
                        ggml_type: t.ggml_type,
                        dims: t.dims.clone(),
                        bytes: bytes.into_owned(),
                    },
                );
            }
        }

        let run = |job: &Job<'_>| -> Result<AlignedBuf> {
            let name = &job.members[0].name;
            if let [t] = job.members[..] {
                return transcode_to_buf(
                    name,
                    job.ty,
                    &source.tensor_bytes(t)?,
                    job.rows,
                    job.cols,
                );
            }
            let mut bytes = Vec::new();
            for t in &job.members {
                bytes.extend_from_slice(&source.tensor_bytes(t)?);
            }
            transcode_to_buf(name, job.ty, &bytes, job.rows, job.cols)
        };
        let results: Vec<std::sync::Mutex<Option<Result<AlignedBuf>>>> =
            jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(jobs.len())
            .max(1);
        let work = || loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(job) = jobs.get(i) else { break };
            let r = run(job);
            *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        };
        std::thread::scope(|sc| {
            for _ in 1..threads {
                sc.spawn(work);
            }
            work();
        });
        let mut natives = Vec::with_capacity(jobs.len());
        for r in results {
            let r = r.into_inner().unwrap_or_else(|e| e.into_inner());
            natives.push(r.expect("every job ran")?);
        }
        let native_bytes = natives.iter().map(|b| b.as_slice().len()).sum();
        Ok(GgufWeights {
            metadata: source.metadata.clone(),
            natives,
            index,
            native_bytes,
        })
    }

    /// The metadata (GGUF keys; for HF directories as ingest derives them).
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Bytes of native tensors held in memory.
    pub fn native_bytes(&self) -> usize {
        self.native_bytes
    }
}

impl HasMetadata for GgufWeights {
    fn metadata_table(&self) -> &Metadata {
        &self.metadata
    }
}

impl WeightSource for GgufWeights {
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        match self.index.get(name)? {
            Entry::Native {
                buf,
                row_start,
                rows,
            } => {
                // Parsed successfully at load; the bytes are immutable since.
                let view = NativeView::parse(self.natives[*buf].as_slice()).ok()?;
                Some(TensorRef::Native {
                    view,
                    row_start: *row_start,
                    rows: *rows,
                })
            }
            Entry::Dense {
                ggml_type,
                dims,
                bytes,
            } => Some(TensorRef::Dense {
                ggml_type: *ggml_type,
                dims: dims.clone(),
                bytes,
            }),
        }
    }
}
