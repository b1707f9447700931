//! The zero-copy `.gpack` provider: every tensor is a view into the mapped
//! file (NativeDense arena, DensePack, Embed, Head); nothing is copied to the
//! heap but the handful of metadata scalars the graph asks for.
//!
//! Metadata: the MetadataKv section holds every key of the source, including
//! the tokenizer's vocabulary arrays (megabytes). The graph needs only scalars,
//! so at open only scalar, string and numeric-array records are decoded;
//! string arrays (vocabularies, merges) are skipped without being parsed — the
//! tokenizer comes from the TokenizerBin section instead.

use crate::error::{Error, ExpertSliceProblem, Result, SectionProblem};
use crate::experts::{ExpertSlice, SliceData, PARTS};
use crate::weights::{HasMetadata, TensorRef, WeightSource};
use gpack_format::mmap::Mmap;
use gpack_format::payload::{self, ExpertLayout, TensorEntry, EXPERT_ABSENT, EXPERT_EMBEDDED};
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
    /// The ExpertLayout and, for external experts, its files mapped.
    experts: Option<(ExpertLayout, Vec<Mmap>)>,
    /// The model's own multi-token-prediction blocks, when the Mtp section
    /// holds them (not a draft model): their tensor index and where the
    /// section's data area starts.
    mtp: Option<(HashMap<String, TensorEntry>, usize)>,
}

impl GpackWeights {
    /// Maps and quick-validates `path`, then indexes its tensors.
    pub fn open(path: &Path) -> Result<Self> {
        Self::from_gpack(Gpack::open(path)?)
    }

    /// Indexes an opened file and validates every tensor's view, so that
    /// [`WeightSource::tensor`] cannot fail later.
    pub fn from_gpack(g: Gpack) -> Result<Self> {
        let w = Self::from_gpack_lazy(g)?;
        for name in w.index.keys() {
            if let Some(Err(e)) = w.lookup(name) {
                return Err(e);
            }
        }
        if let Some((index, _)) = &w.mtp {
            for name in index.keys() {
                if let Some(Err(e)) = w.lookup(name) {
                    return Err(e);
                }
            }
        }
        Ok(w)
    }

    /// Like [`GpackWeights::from_gpack`], but each tensor's view is validated
    /// only when [`GpackWeights::try_tensor`] looks it up: for readers that
    /// touch a few tensors of a file (validating all of them faults in a page
    /// of every tensor). [`WeightSource::tensor`] on such a store returns
    /// `None` for a tensor whose view is invalid; use `try_tensor`.
    pub fn from_gpack_lazy(g: Gpack) -> Result<Self> {
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
        // Routed experts: external shard files are size-checked (the quick
        // check of `gpack verify`) and mapped now; their slices' digests are
        // checked the first time each is used (`crate::experts`).
        let experts = match g.expert_layout() {
            None => None,
            Some(layout) => {
                let layout = layout?;
                g.verify_external(false)?;
                let mut maps = Vec::with_capacity(layout.files.len());
                for (f, p) in layout.files.iter().zip(g.external_paths(&layout)) {
                    let map = std::fs::File::open(&p)
                        .and_then(|file| gpack_format::mmap::map_file(&file))
                        .map_err(|source| {
                            Error::Gpack(gpack_format::Error::ExternalExperts {
                                file: f.name.clone(),
                                problem: gpack_format::ExternalProblem::Unreadable {
                                    op: "map",
                                    path: p.clone(),
                                    source,
                                },
                            })
                        })?;
                    maps.push(map);
                }
                Some((layout, maps))
            }
        };
        // The Mtp section holds a draft model or the model's own MTP blocks.
        let mtp = match g.section(SectionKind::Mtp) {
            Some(s) if !holds_draft(&metadata) => {
                let (entries, data) = payload::parse_mtp(s.bytes)?;
                let start = data.as_ptr() as usize - s.bytes.as_ptr() as usize;
                Some((
                    entries.into_iter().map(|e| (e.name.clone(), e)).collect(),
                    start,
                ))
            }
            _ => None,
        };
        Ok(GpackWeights {
            g,
            metadata,
            index,
            experts,
            mtp,
        })
    }

    /// Tensor `name` with the reason its view is invalid, if it is; `None`
    /// when the file has no such tensor or it is a stacked routed expert
    /// (served per expert by [`WeightSource::expert_slice`]).
    pub fn try_tensor(&self, name: &str) -> Option<Result<TensorRef<'_>>> {
        self.lookup(name)
    }

    /// The TensorIndex record of tensor `name`.
    pub fn tensor_entry(&self, name: &str) -> Option<&TensorEntry> {
        self.index.get(name)
    }

    /// Every TensorIndex record, in no particular order.
    pub fn tensor_entries(&self) -> impl Iterator<Item = &TensorEntry> {
        self.index.values()
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
        let Some(e) = self.index.get(name) else {
            // A tensor of the model's MTP blocks, in the Mtp section.
            let (index, start) = self.mtp.as_ref()?;
            let e = index.get(name)?;
            let s = self.g.section(SectionKind::Mtp)?;
            return Some(mtp_tensor(name, e, &s.bytes[*start..]));
        };
        let kind = SectionKind::from_u32(e.section)?;
        if matches!(kind, SectionKind::ExpertBlobs | SectionKind::ExpertLayout) {
            // Stacked routed experts: served per expert by `expert_slice`.
            return None;
        }
        let bad = |problem: SectionProblem| Error::Section {
            section: kind,
            problem,
        };
        let tensor = || name.to_string();
        let slice = |bytes| {
            slice_of(bytes, e).ok_or_else(|| {
                bad(SectionProblem::TensorOutside {
                    tensor: tensor(),
                    offset: e.offset,
                    size: e.size,
                    len: bytes.len() as u64,
                })
            })
        };
        let missing = || bad(SectionProblem::SectionMissing { tensor: tensor() });
        let unknown = |ty: u32| {
            bad(SectionProblem::UnknownType {
                tensor: tensor(),
                ty,
            })
        };
        let native = |b| native_ref(name, b);
        Some((|| match kind {
            SectionKind::DensePack => {
                let s = self.g.section(kind).ok_or_else(missing)?;
                let ggml_type = GgmlType::from_id(e.src_type).ok_or_else(|| unknown(e.src_type))?;
                Ok(TensorRef::Dense {
                    ggml_type,
                    dims: e.dims.clone(),
                    bytes: slice(s.bytes)?,
                })
            }
            SectionKind::NativeDense => {
                // Possibly one member of a fused q‖k‖v / gate‖up tensor.
                let s = self.g.section(kind).ok_or_else(missing)?;
                let TensorRef::Native { view, .. } = native(slice(s.bytes)?)? else {
                    return Err(bad(SectionProblem::NotNative { tensor: tensor() }));
                };
                let Some(rows) = gpack_ingest::checked_product(e.dims.get(1..).unwrap_or(&[]))
                else {
                    return Err(bad(SectionProblem::DimsOverflow {
                        tensor: tensor(),
                        dims: e.dims.clone(),
                    }));
                };
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
                    _ => Err(bad(SectionProblem::RowsOutside {
                        tensor: tensor(),
                        row_start: e.row_start,
                        rows,
                        native_rows: view.rows(),
                    })),
                }
            }
            SectionKind::Embed | SectionKind::Head | SectionKind::Ple => {
                let s = self.g.section(kind).ok_or_else(missing)?;
                let (h, payload) = single_tensor(s)?;
                if h.reserved0.get() == 0 {
                    // Raw ggml blocks (the PLE table).
                    let ty = h.ggml_type.get();
                    let ggml_type = GgmlType::from_id(ty).ok_or_else(|| unknown(ty))?;
                    return Ok(TensorRef::Dense {
                        ggml_type,
                        dims: e.dims.clone(),
                        bytes: payload,
                    });
                }
                native(payload)
            }
            _ => Err(bad(SectionProblem::NoTensors { tensor: tensor() })),
        })())
    }
}

impl GpackWeights {
    /// The draft model packed in the Mtp section (`gpack convert --draft`),
    /// its tensors validated; `None` when the file has none (no Mtp section,
    /// or one holding a draft module or the model's own MTP blocks).
    pub fn draft(&self) -> Option<Result<DraftWeights<'_>>> {
        let s = self.g.section(SectionKind::Mtp)?;
        if !holds_draft(&self.metadata) {
            return None;
        }
        let mut metadata = Metadata::new();
        for (k, v) in self.metadata.iter() {
            if let Some(own) = k.strip_prefix(payload::DRAFT_KEY_PREFIX) {
                metadata.insert(own.to_string(), v.clone());
            }
        }
        Some((|| {
            let (entries, data) = payload::parse_mtp(s.bytes)?;
            let d = DraftWeights {
                g: &self.g,
                metadata,
                index: entries.into_iter().map(|e| (e.name.clone(), e)).collect(),
                data,
            };
            for name in d.index.keys() {
                d.lookup(name)?;
            }
            Ok(d)
        })())
    }
}

/// Whether the Mtp section of a file with `metadata` holds a draft model
/// (`gpack convert --draft`): exactly when `gpack.draft.general.architecture`
/// is present (docs/FORMAT.md, "Mtp (13)").
fn holds_draft(metadata: &Metadata) -> bool {
    metadata
        .get_str(&format!(
            "{}general.architecture",
            payload::DRAFT_KEY_PREFIX
        ))
        .is_some()
}

/// A draft model's weights, served in place from the Mtp section of a
/// mapped `.gpack` (matrices in native layouts, the rest raw ggml blocks).
pub struct DraftWeights<'g> {
    g: &'g Gpack,
    metadata: Metadata,
    index: HashMap<String, TensorEntry>,
    /// The Mtp data area (tensor offsets are relative to it).
    data: &'g [u8],
}

impl DraftWeights<'_> {
    fn lookup(&self, name: &str) -> Result<TensorRef<'_>> {
        let e = self.index.get(name).ok_or_else(|| Error::Section {
            section: SectionKind::Mtp,
            problem: SectionProblem::DraftTensorAbsent {
                tensor: name.to_string(),
            },
        })?;
        mtp_tensor(name, e, self.data)
    }
}

/// Tensor `name` (index record `e`) of the Mtp section's data area `data`:
/// raw ggml blocks or a native view, bounds-checked.
fn mtp_tensor<'b>(name: &str, e: &TensorEntry, data: &'b [u8]) -> Result<TensorRef<'b>> {
    let bad = |problem: SectionProblem| Error::Section {
        section: SectionKind::Mtp,
        problem,
    };
    let tensor = || name.to_string();
    let bytes = slice_of(data, e).ok_or_else(|| {
        bad(SectionProblem::DraftTensorOutside {
            tensor: tensor(),
            offset: e.offset,
            size: e.size,
            len: data.len() as u64,
        })
    })?;
    if e.layout == payload::LAYOUT_GGML {
        let ggml_type = GgmlType::from_id(e.src_type).ok_or_else(|| {
            bad(SectionProblem::UnknownType {
                tensor: tensor(),
                ty: e.src_type,
            })
        })?;
        return Ok(TensorRef::Dense {
            ggml_type,
            dims: e.dims.clone(),
            bytes,
        });
    }
    native_ref(name, bytes)
}

impl HasMetadata for DraftWeights<'_> {
    fn metadata_table(&self) -> &Metadata {
        &self.metadata
    }
}

impl WeightSource for DraftWeights<'_> {
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        if !self.index.contains_key(name) {
            return None;
        }
        self.lookup(name).ok()
    }

    fn release(&self, bytes: &[u8]) {
        self.g.release(bytes);
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

    fn device_sections(&self) -> Vec<gpack_gpu::upload::Section<'_>> {
        [
            SectionKind::NativeDense,
            SectionKind::Head,
            SectionKind::Embed,
            SectionKind::ExpertBlobs,
        ]
        .into_iter()
        .filter_map(|k| self.g.section(k))
        .map(|s| gpack_gpu::upload::Section {
            name: &s.info.name,
            bytes: s.bytes,
            sha256: s.info.sha256,
        })
        .collect()
    }

    fn ple_table(&self, io: crate::ple::PleIo) -> Option<Result<crate::ple::PleTable>> {
        self.g.section(gpack_format::SectionKind::Ple)?;
        Some(crate::ple::PleTable::open(self.g.path(), io))
    }

    fn release(&self, bytes: &[u8]) {
        self.g.release(bytes);
        if let Some((_, maps)) = &self.experts {
            for m in maps {
                let (w, p) = (m.as_ptr() as usize, bytes.as_ptr() as usize);
                if p >= w && p + bytes.len() <= w + m.len() {
                    gpack_format::mmap::release(m, p - w, bytes.len());
                }
            }
        }
    }

    fn expert_slice(
        &self,
        layer: usize,
        expert: usize,
        part: usize,
        n_expert: usize,
    ) -> Option<Result<ExpertSlice<'_>>> {
        let in_mtp = self.mtp.as_ref().is_some_and(|(index, _)| {
            index.contains_key(&crate::experts::stacked_name(layer, part))
        });
        let (Some((layout, maps)), false) = (&self.experts, in_mtp) else {
            // A dense model's, or an MTP block's experts (stacked matrices
            // in the Mtp section).
            return crate::experts::stacked_slice(self, layer, expert, part, n_expert);
        };
        let err = |origin: String, problem: ExpertSliceProblem| Error::ExpertSlice {
            layer,
            expert,
            part: PARTS[part],
            origin,
            problem,
        };
        if layout.n_expert as usize != n_expert || layer >= layout.n_layers as usize {
            return Some(Err(err(
                "ExpertLayout".into(),
                ExpertSliceProblem::LayoutShape {
                    n_layers: layout.n_layers,
                    n_expert: layout.n_expert,
                    layer,
                    needed: n_expert,
                },
            )));
        }
        let s = layout.slice(layer, expert, part)?;
        let range = |len: usize| {
            s.offset
                .checked_add(s.size)
                .filter(|&end| end <= len as u64)
                .map(|end| s.offset as usize..end as usize)
        };
        Some((|| match s.file {
            EXPERT_ABSENT => Err(err("ExpertLayout".into(), ExpertSliceProblem::Absent)),
            EXPERT_EMBEDDED => {
                let origin = format!("ExpertBlobs @ {}+{}", s.offset, s.size);
                let blobs = self
                    .g
                    .section(SectionKind::ExpertBlobs)
                    .ok_or_else(|| err(origin.clone(), ExpertSliceProblem::NoExpertBlobs))?;
                let len = blobs.bytes.len();
                let r = range(len).ok_or_else(|| {
                    err(
                        origin.clone(),
                        ExpertSliceProblem::OutsideSection { len: len as u64 },
                    )
                })?;
                let view = NativeView::parse(&blobs.bytes[r]).map_err(|source| {
                    err(origin.clone(), ExpertSliceProblem::NotNative { source })
                })?;
                let r = range(blobs.bytes.len()).expect("checked above");
                Ok(ExpertSlice {
                    data: SliceData::Native(view),
                    sha256: None,
                    origin,
                    mapped: &blobs.bytes[r],
                })
            }
            f => {
                let (file, map) = layout
                    .files
                    .get(f as usize)
                    .zip(maps.get(f as usize))
                    .ok_or_else(|| {
                        err(
                            "ExpertLayout".into(),
                            ExpertSliceProblem::FileIndex {
                                index: f,
                                files: layout.files.len(),
                            },
                        )
                    })?;
                let origin = format!("{} @ {}+{}", file.name, s.offset, s.size);
                let r = range(map.len()).ok_or_else(|| {
                    err(
                        origin.clone(),
                        ExpertSliceProblem::OutsideFile {
                            len: map.len() as u64,
                        },
                    )
                })?;
                let ty = GgmlType::from_id(s.src_type).ok_or_else(|| {
                    err(
                        origin.clone(),
                        ExpertSliceProblem::UnknownType { ty: s.src_type },
                    )
                })?;
                let (rows, cols) = (s.rows as usize, s.cols as usize);
                let want = ty
                    .bytes_for(s.cols)
                    .and_then(|b| b.checked_mul(s.rows))
                    .filter(|&b| b == s.size);
                if want.is_none() {
                    return Err(err(
                        origin,
                        ExpertSliceProblem::Size {
                            bytes: s.size,
                            rows: s.rows,
                            cols: s.cols,
                            ty,
                        },
                    ));
                }
                Ok(ExpertSlice {
                    data: SliceData::Raw {
                        ty,
                        rows,
                        cols,
                        bytes: &map[r.clone()],
                    },
                    sha256: Some(s.sha256),
                    origin,
                    mapped: &map[r],
                })
            }
        })())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpack_format::{GpackWriter, ManifestInput, WriteOptions};

    /// A .gpack with one 16 × 32 Q8_0 native tensor whose TensorIndex entry
    /// claims `dims`.
    fn file_with_dims(dir: &Path, dims: Vec<u64>) -> std::path::PathBuf {
        let (rows, cols) = (16u64, 32u64);
        let mut native = Vec::new();
        gpack_quant::transcode(GgmlType::Q8_0, &vec![0u8; 16 * 34], rows, cols, &mut native)
            .unwrap();
        let index = payload::encode_tensor_index(&[TensorEntry {
            name: "blk.0.attn_q.weight".into(),
            dims,
            src_type: GgmlType::Q8_0 as u32,
            section: SectionKind::NativeDense as u32,
            layout: 0,
            group: 0,
            offset: 0,
            size: native.len() as u64,
            row_start: 0,
            flags: 0,
        }]);
        let out = dir.join("t.gpack");
        let mut w = GpackWriter::create(&out, WriteOptions { replace: true }).unwrap();
        for (k, b) in [
            (SectionKind::TensorIndex, &index),
            (SectionKind::NativeDense, &native),
        ] {
            w.add_section(k, k.default_name(), b, 1).unwrap();
        }
        w.finish(&ManifestInput {
            name: "t".into(),
            architecture: "llama".into(),
            source: serde_json::json!({"format": "synthetic"}),
            ..Default::default()
        })
        .unwrap();
        out
    }

    /// A NativeDense entry whose dims multiply past 2^64 is refused by name.
    /// Before, the product wrapped (32 × (2^63+1) × 2 gave 2 rows, inside
    /// the 16-row tensor, in release) and the absurd shape was served; in
    /// debug builds it panicked.
    #[test]
    fn native_dims_whose_product_overflows_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ok = GpackWeights::open(&file_with_dims(dir.path(), vec![32, 16])).unwrap();
        assert!(ok.tensor("blk.0.attn_q.weight").is_some());
        for dims in [vec![32, (1u64 << 63) + 1, 2], vec![32, u64::MAX, 2, 2]] {
            let e = GpackWeights::open(&file_with_dims(dir.path(), dims.clone()))
                .err()
                .unwrap_or_else(|| panic!("{dims:?} accepted"));
            assert!(
                matches!(
                    &e,
                    Error::Section {
                        section: SectionKind::NativeDense,
                        problem: SectionProblem::DimsOverflow { .. },
                    }
                ),
                "{e:?}"
            );
            // The message with its causes.
            let e = gpack_format::error_chain(&e);
            assert!(
                e.contains("blk.0.attn_q.weight") && e.contains("product passes 2^64"),
                "{dims:?}: {e}"
            );
        }
    }

    /// A NativeDense member whose rows run past its native tensor is refused
    /// by name, the rows and the tensor's row count in the problem.
    #[test]
    fn native_rows_outside_the_tensor_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = GpackWeights::open(&file_with_dims(dir.path(), vec![32, 17]))
            .err()
            .expect("17 rows of a 16-row tensor accepted");
        match &e {
            Error::Section {
                section: SectionKind::NativeDense,
                problem:
                    SectionProblem::RowsOutside {
                        tensor,
                        row_start: 0,
                        rows: 17,
                        native_rows: 16,
                    },
            } => assert_eq!(tensor, "blk.0.attn_q.weight"),
            e => panic!("{e:?}"),
        }
        let chain = gpack_format::error_chain(&e);
        assert!(
            chain.ends_with(
                " section: tensor blk.0.attn_q.weight: rows 0..+17 outside its 16-row native tensor"
            ),
            "{chain}"
        );
    }
}
