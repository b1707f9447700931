//! One routed expert's matrix as a weight store hands it out
//! ([`super::WeightSource::expert_slice`]), and the default answer from a
//! GGUF's stacked expert tensors. The expert caches that use the slices are
//! `crate::experts`'.

use super::{TensorRef, WeightSource};
use crate::error::{Error, Result};
use gpack_quant::{GgmlType, NativeView};

/// Part names, in slice order (ExpertLayout: 0 gate, 1 up, 2 down).
pub const PARTS: [&str; 3] = ["gate", "up", "down"];

/// The stacked tensor name of `part` in layer `l` (`blk.L.ffn_gate_exps.weight`).
pub fn stacked_name(l: usize, part: usize) -> String {
    format!("blk.{l}.ffn_{}_exps.weight", PARTS[part])
}

/// The default [`WeightSource::expert_slice`]: expert `e`'s rows of the
/// stacked tensor of `part` in layer `l` (`[cols, rows_per_expert, n_expert]`).
pub fn stacked_slice<W: WeightSource + ?Sized>(
    w: &W,
    l: usize,
    e: usize,
    part: usize,
    n_expert: usize,
) -> Option<Result<ExpertSlice<'_>>> {
    let name = stacked_name(l, part);
    let t = w.tensor(&name)?;
    let bad = |found: Vec<u64>| Error::Shape {
        name: name.clone(),
        expected: vec![0, 0, n_expert as u64],
        found,
    };
    let origin = format!("{name} expert {e}");
    Some((|| match t {
        TensorRef::Native {
            view,
            row_start,
            rows,
        } => {
            if n_expert == 0 || e >= n_expert || rows % n_expert != 0 {
                return Err(bad(vec![view.cols() as u64, rows as u64]));
            }
            let per = rows / n_expert;
            let v = view
                .row_range(row_start + e * per, per)
                .ok_or_else(|| bad(vec![view.cols() as u64, rows as u64]))?;
            Ok(ExpertSlice {
                data: SliceData::Native(v),
                sha256: None,
                origin,
                mapped: &[],
            })
        }
        TensorRef::Dense {
            ggml_type,
            dims,
            bytes,
        } => {
            let (cols, per) = match dims[..] {
                [c, r, n] if n as usize == n_expert && e < n_expert => (c as usize, r as usize),
                _ => return Err(bad(dims.clone())),
            };
            let len = bytes.len() / n_expert;
            if len * n_expert != bytes.len() {
                return Err(bad(dims.clone()));
            }
            Ok(ExpertSlice {
                data: SliceData::Raw {
                    ty: ggml_type,
                    rows: per,
                    cols,
                    bytes: &bytes[e * len..(e + 1) * len],
                },
                sha256: None,
                origin,
                mapped: &[],
            })
        }
    })())
}

/// One expert matrix where its provider keeps it.
#[derive(Clone, Copy, Debug)]
pub enum SliceData<'a> {
    /// A native tensor (or a row range of one).
    Native(NativeView<'a>),
    /// Raw ggml rows, `rows × cols` of `ty`, in place in a mapped file.
    Raw {
        /// ggml type of the rows.
        ty: GgmlType,
        /// Output features.
        rows: usize,
        /// Input features.
        cols: usize,
        /// The rows' bytes.
        bytes: &'a [u8],
    },
}

impl SliceData<'_> {
    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            SliceData::Native(v) => (v.rows(), v.cols()),
            SliceData::Raw { rows, cols, .. } => (*rows, *cols),
        }
    }
    /// Bytes the kernels read for this matrix.
    pub fn byte_len(&self) -> usize {
        match self {
            SliceData::Native(v) => v.byte_len(),
            SliceData::Raw { bytes, .. } => bytes.len(),
        }
    }
}

/// A slice plus what is needed to check it.
#[derive(Clone, Debug)]
pub struct ExpertSlice<'a> {
    /// The matrix.
    pub data: SliceData<'a>,
    /// SHA-256 a raw slice's bytes must have (external slices), checked at
    /// first use.
    pub sha256: Option<[u8; 32]>,
    /// Where it lives, for errors (`experts.gguf @ 1234+5678`).
    pub origin: String,
    /// Its bytes in a mapped file (released from the resident set after a
    /// resident copy is made), or empty.
    pub mapped: &'a [u8],
}
