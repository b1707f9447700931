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
use crate::weights::{MetadataSource, TensorRef, WeightSource};
use gpack_format::payload::{self, TensorEntry};
use gpack_format::{single_tensor, Gpack, SectionKind};
use gpack_ingest::{Array, GgufString, Metadata, Value};
use gpack_quant::{GgmlType, NativeView};
use std::collections::HashMap;
use std::path::Path;

/// A quick-validated, mapped `.gpack` serving its tensors in place.
pub struct GpackWeights {
    g: Gpack,
    metadata: Metadata,
    index: HashMap<String, TensorEntry>,
}

fn scalar(ty: u32, b: &[u8]) -> Option<Value> {
    let arr = |n: usize| -> Option<[u8; 8]> {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(b.get(..n)?);
        Some(a)
    };
    Some(match ty {
        0 => Value::U8(*b.first()?),
        1 => Value::I8(*b.first()? as i8),
        2 => Value::U16(u16::from_le_bytes(arr(2)?[..2].try_into().ok()?)),
        3 => Value::I16(i16::from_le_bytes(arr(2)?[..2].try_into().ok()?)),
        4 => Value::U32(u32::from_le_bytes(arr(4)?[..4].try_into().ok()?)),
        5 => Value::I32(i32::from_le_bytes(arr(4)?[..4].try_into().ok()?)),
        6 => Value::F32(f32::from_le_bytes(arr(4)?[..4].try_into().ok()?)),
        7 => Value::Bool(*b.first()? != 0),
        8 => {
            let n = usize::try_from(u64::from_le_bytes(arr(8)?)).ok()?;
            Value::String(GgufString::from_bytes(
                b.get(8..8usize.checked_add(n)?)?.to_vec(),
            ))
        }
        9 => {
            // Numeric f32 / i32 arrays only (per-layer values); others skipped.
            let et = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
            let n = usize::try_from(u64::from_le_bytes(b.get(4..12)?.try_into().ok()?)).ok()?;
            let body = b.get(12..12usize.checked_add(n.checked_mul(4)?)?)?;
            let words = body.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
            match et {
                6 => Value::Array(Array::F32(words.map(f32::from_le_bytes).collect())),
                5 => Value::Array(Array::I32(words.map(i32::from_le_bytes).collect())),
                4 => Value::Array(Array::U32(words.map(u32::from_le_bytes).collect())),
                _ => return None,
            }
        }
        10 => Value::U64(u64::from_le_bytes(arr(8)?)),
        11 => Value::I64(i64::from_le_bytes(arr(8)?)),
        12 => Value::F64(f64::from_le_bytes(arr(8)?)),
        _ => return None,
    })
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
                if let Some(v) = scalar(r.value_type, r.value) {
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

impl MetadataSource for GpackWeights {
    fn meta_u64(&self, key: &str) -> Option<u64> {
        self.metadata.meta_u64(key)
    }
    fn meta_f32(&self, key: &str) -> Option<f32> {
        self.metadata.meta_f32(key)
    }
    fn meta_str(&self, key: &str) -> Option<&str> {
        self.metadata.meta_str(key)
    }
    fn meta_bool(&self, key: &str) -> Option<bool> {
        self.metadata.meta_bool(key)
    }
    fn meta_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        self.metadata.meta_f32_array(key)
    }
}

impl WeightSource for GpackWeights {
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        self.lookup(name)?.ok()
    }
}
