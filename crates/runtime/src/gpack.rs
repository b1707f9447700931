//! The zero-copy `.gpack` provider: every tensor is a view into the mapped
//! file (NativeDense arena, DensePack, Embed, Head); nothing is copied to the
//! heap but the handful of metadata scalars the graph asks for.
//!
//! Metadata: the MetadataKv section holds every key of the source, including
//! the tokenizer's vocabulary arrays (megabytes). The graph needs only scalars,
//! so at open only scalar, string and numeric-array records are decoded;
//! string arrays (vocabularies, merges) are skipped without being parsed — the
//! tokenizer comes from the TokenizerBin section instead.

use crate::error::{Error, Result};
use crate::weights::{HasMetadata, TensorRef, WeightSource};
use gpack_format::payload::{self, TensorEntry};
use gpack_format::{single_tensor, Gpack, SectionKind};
use gpack_ingest::Metadata;
use gpack_quant::{GgmlType, NativeView};
use std::collections::HashMap;
use std::path::Path;

/// A quick-validated, mapped `.gpack` serving its tensors in place.
pub struct GpackWeights {
    g: Gpack,
    metadata: Metadata,
    index: HashMap<String, TensorEntry>,
}

impl GpackWeights {
    /// Maps and quick-validates `path`, then indexes its tensors.
    pub fn open(path: &Path) -> Result<Self> {
        Self::from_gpack(Gpack::open(path)?)
    }

    /// Indexes an opened file.
    pub fn from_gpack(g: Gpack) -> Result<Self> {
        let mut metadata = Metadata::new();
        if let Some(s) = g.section(SectionKind::MetadataKv) {
            for r in payload::parse_kv(s.bytes)? {
                // A string array is skipped (type 9 with element type 8).
                if r.value_type == 9 && r.value.get(..4) == Some(&8u32.to_le_bytes()[..]) {
                    continue;
                }
                if let Ok(v) = gpack_ingest::gguf::decode_value(r.value_type, r.value) {
                    metadata.insert(r.key, v);
                }
            }
        }
        let index = match g.section(SectionKind::TensorIndex) {
            Some(s) => payload::parse_tensor_index(s.bytes)?
                .into_iter()
                .map(|e| (e.name.clone(), e))
                .collect(),
            None => HashMap::new(),
        };
        let w = GpackWeights { g, metadata, index };
        // Validate every view once here, so `tensor()` cannot fail later.
        for name in w.index.keys() {
            if let Some(Err(e)) = w.lookup(name) {
                return Err(e);
            }
        }
        Ok(w)
    }

    /// The underlying file.
    pub fn gpack(&self) -> &Gpack {
        &self.g
    }

    /// The metadata scalars decoded at open.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn lookup(&self, name: &str) -> Option<Result<TensorRef<'_>>> {
        let e = self.index.get(name)?;
        let kind = SectionKind::from_u32(e.section)?;
        let bad = |problem: String| {
            Error::Gpack(gpack_format::Error::BadPayload {
                section: kind,
                problem: format!("tensor {name}: {problem}"),
            })
        };
        let slice = |bytes| {
            slice_of(bytes, e)
                .ok_or_else(|| bad(format!("[{}, +{}) outside the section", e.offset, e.size)))
        };
        let native = |b| native_ref(name, b);
        Some((|| match kind {
            SectionKind::DensePack => {
                let s = self
                    .g
                    .section(kind)
                    .ok_or_else(|| bad("section missing".into()))?;
                let ggml_type = GgmlType::from_id(e.src_type)
                    .ok_or_else(|| bad(format!("unknown type {}", e.src_type)))?;
                Ok(TensorRef::Dense {
                    ggml_type,
                    dims: e.dims.clone(),
                    bytes: slice(s.bytes)?,
                })
            }
            SectionKind::NativeDense => {
                // Possibly one member of a fused q‖k‖v / gate‖up tensor.
                let s = self
                    .g
                    .section(kind)
                    .ok_or_else(|| bad("section missing".into()))?;
                let TensorRef::Native { view, .. } = native(slice(s.bytes)?)? else {
                    return Err(bad("not a native tensor".into()));
                };
                let rows = e.dims.get(1..).map_or(1, |d| d.iter().product::<u64>());
                match (usize::try_from(e.row_start), usize::try_from(rows)) {
                    (Ok(row_start), Ok(rows))
                        if row_start
                            .checked_add(rows)
                            .is_some_and(|end| end <= view.rows()) =>
                    {
                        Ok(TensorRef::Native {
                            view,
                            row_start,
                            rows,
                        })
                    }
                    _ => Err(bad(format!(
                        "rows {}..+{rows} outside its {}-row native tensor",
                        e.row_start,
                        view.rows()
                    ))),
                }
            }
            SectionKind::Embed | SectionKind::Head | SectionKind::Ple => {
                let s = self
                    .g
                    .section(kind)
                    .ok_or_else(|| bad("section missing".into()))?;
                let (h, payload) = single_tensor(s)?;
                if h.reserved0.get() == 0 {
                    // Raw ggml blocks (the PLE table).
                    let ggml_type = GgmlType::from_id(h.ggml_type.get())
                        .ok_or_else(|| bad(format!("unknown type {}", h.ggml_type.get())))?;
                    return Ok(TensorRef::Dense {
                        ggml_type,
                        dims: e.dims.clone(),
                        bytes: payload,
                    });
                }
                native(payload)
            }
            _ => Err(bad("routed experts are served by the MoE runtime".into())),
        })())
    }
}

fn slice_of<'b>(bytes: &'b [u8], e: &TensorEntry) -> Option<&'b [u8]> {
    let end = e
        .offset
        .checked_add(e.size)
        .filter(|&x| x <= bytes.len() as u64)?;
    Some(&bytes[e.offset as usize..end as usize])
}

fn native_ref<'b>(name: &str, b: &'b [u8]) -> Result<TensorRef<'b>> {
    let view = NativeView::parse(b).map_err(|source| Error::Quant {
        name: name.to_string(),
        source,
    })?;
    let rows = view.rows();
    Ok(TensorRef::Native {
        view,
        row_start: 0,
        rows,
    })
}

impl HasMetadata for GpackWeights {
    fn metadata_table(&self) -> &Metadata {
        &self.metadata
    }
}

impl WeightSource for GpackWeights {
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        self.lookup(name)?.ok()
    }
}
