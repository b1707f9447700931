//! Matrix weights bound to their storage, and projections that share an input.
//!
//! [`Matrix`] is a validated [`TensorRef`]: a native row range (fast path,
//! the quant crate's kernels) or raw ggml data (slow correctness path,
//! dequantized row by row). [`Proj`] is a group of matrices applied to the
//! same input (q, k, v or gate, up); when its members tile one native tensor
//! it runs as one kernel call.

use crate::decodable::{check_decodable, check_view_decodable};
use crate::error::{Error, Result};
use crate::weights::{AlignedBuf, TensorRef};
use gpack_quant::{GgmlType, NativeView, Pool};
use std::sync::Arc;

/// A `rows × cols` weight (y = W·x has `rows` outputs).
#[derive(Clone, Debug)]
pub(crate) enum Matrix<'a> {
    /// Rows `row_start..row_start + rows` of a native tensor.
    Native {
        view: NativeView<'a>,
        row_start: usize,
        rows: usize,
    },
    /// A native tensor transcoded at load from raw ggml rows (a provider
    /// that hands out a ggml-typed head or projection); re-parsed per call
    /// (O(1): header and padding checks).
    Owned {
        buf: Arc<AlignedBuf>,
        rows: usize,
        cols: usize,
    },
    /// Raw ggml rows.
    Dense {
        ty: GgmlType,
        rows: usize,
        cols: usize,
        row_bytes: usize,
        bytes: &'a [u8],
    },
}

impl<'a> Matrix<'a> {
    /// Binds `t` as a matrix of `cols` columns (and `rows` rows when given).
    pub fn bind(name: &str, t: TensorRef<'a>, cols: usize, rows: Option<usize>) -> Result<Self> {
        let shape_err = |found: Vec<u64>| Error::Shape {
            name: name.to_string(),
            expected: vec![cols as u64, rows.unwrap_or(0) as u64],
            found,
        };
        let m = match t {
            TensorRef::Native {
                view,
                row_start,
                rows: r,
            } => {
                check_view_decodable(name, &view)?;
                // `row_range` checks the bounds (and that a row-interleaved
                // tensor splits at a row group).
                if view.cols() != cols || view.row_range(row_start, r).is_none() {
                    return Err(shape_err(vec![view.cols() as u64, r as u64]));
                }
                Matrix::Native {
                    view,
                    row_start,
                    rows: r,
                }
            }
            TensorRef::Dense {
                ggml_type,
                dims,
                bytes,
            } => {
                check_decodable(name, ggml_type)?;
                if dims.first().copied() != Some(cols as u64) {
                    return Err(shape_err(dims));
                }
                // Every size here comes from the file: the rows' product and
                // the byte count are overflow-checked, and must equal the
                // bytes present.
                let sizes = gpack_ingest::checked_product(dims.get(1..).unwrap_or(&[]))
                    .and_then(|r| Some((r, ggml_type.bytes_for(cols as u64)?)))
                    .and_then(|(r, rb)| Some((r, rb, rb.checked_mul(r)?)))
                    .and_then(|(r, rb, total)| {
                        Some((usize::try_from(r).ok()?, usize::try_from(rb).ok()?, total))
                    });
                let Some((r, row_bytes, total)) = sizes else {
                    return Err(shape_err(dims));
                };
                if bytes.len() as u64 != total {
                    return Err(shape_err(dims));
                }
                Matrix::Dense {
                    ty: ggml_type,
                    rows: r,
                    cols,
                    row_bytes,
                    bytes,
                }
            }
        };
        if let Some(want) = rows {
            if m.rows() != want {
                return Err(shape_err(vec![cols as u64, m.rows() as u64]));
            }
        }
        Ok(m)
    }

    /// This matrix in a native layout: raw ggml rows are transcoded into an
    /// owned buffer (the kernels have no fast path for ggml blocks).
    pub fn into_native(self, name: &str) -> Result<Self> {
        match self {
            Matrix::Dense {
                ty,
                rows,
                cols,
                bytes,
                ..
            } => {
                let buf = crate::gguf::transcode_to_buf(name, ty, bytes, rows as u64, cols as u64)?;
                Ok(Matrix::Owned {
                    buf: Arc::new(buf),
                    rows,
                    cols,
                })
            }
            m => Ok(m),
        }
    }

    /// Splits a stacked matrix into `parts` matrices of equal row counts
    /// (gemma3n's `altup_unembd_proj`, one `n_embd × n_embd` per stream).
    /// `None` if the rows do not divide or the matrix is already an owned
    /// transcode (split before [`Matrix::into_native`]).
    pub fn split_rows(self, parts: usize) -> Option<Vec<Matrix<'a>>> {
        let total = self.rows();
        if parts == 0 || !total.is_multiple_of(parts) {
            return None;
        }
        let rows = total / parts;
        match self {
            Matrix::Native {
                view, row_start, ..
            } => Some(
                (0..parts)
                    .map(|i| Matrix::Native {
                        view,
                        row_start: row_start + i * rows,
                        rows,
                    })
                    .collect(),
            ),
            Matrix::Dense {
                ty,
                cols,
                row_bytes,
                bytes,
                ..
            } => Some(
                (0..parts)
                    .map(|i| Matrix::Dense {
                        ty,
                        rows,
                        cols,
                        row_bytes,
                        bytes: &bytes[i * rows * row_bytes..(i + 1) * rows * row_bytes],
                    })
                    .collect(),
            ),
            Matrix::Owned { .. } => None,
        }
    }

    /// Bytes of one row in its storage.
    pub fn row_bytes(&self) -> usize {
        match self {
            Matrix::Native { view, .. } => view.byte_len() / view.rows().max(1),
            Matrix::Owned { buf, rows, .. } => buf.as_slice().len() / (*rows).max(1),
            Matrix::Dense { row_bytes, .. } => *row_bytes,
        }
    }

    pub fn rows(&self) -> usize {
        match self {
            Matrix::Native { rows, .. }
            | Matrix::Owned { rows, .. }
            | Matrix::Dense { rows, .. } => *rows,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Matrix::Native { view, .. } => view.cols(),
            Matrix::Owned { cols, .. } | Matrix::Dense { cols, .. } => *cols,
        }
    }

    fn owned_view(buf: &AlignedBuf) -> NativeView<'_> {
        NativeView::parse(buf.as_slice()).expect("validated when transcoded")
    }

    /// Dequantizes row `r` into `out` (`cols` values): the embedding lookup.
    pub fn row(&self, r: usize, out: &mut [f32]) {
        match self {
            Matrix::Native {
                view, row_start, ..
            } => view.dequantize_row(row_start + r, out),
            Matrix::Owned { buf, .. } => Self::owned_view(buf).dequantize_row(r, out),
            Matrix::Dense {
                ty,
                row_bytes,
                bytes,
                ..
            } => {
                // Checked at bind: the type decodes and the row fits.
                let _ = gpack_quant::dequantize_ggml(
                    *ty,
                    &bytes[r * row_bytes..(r + 1) * row_bytes],
                    out,
                );
            }
        }
    }

    /// `y[i] = W · x[i]` for `n` inputs: `x` is `[n][cols]`, `y` is
    /// `[n][rows]`, on the threads of `pool` (the model's).
    pub fn matmul(&self, pool: &Pool, x: &[f32], n: usize, y: &mut [f32]) {
        let cols = self.cols();
        let rows = self.rows();
        debug_assert_eq!(x.len(), n * cols);
        debug_assert_eq!(y.len(), n * rows);
        match self {
            Matrix::Owned { buf, .. } => {
                let view = Self::owned_view(buf);
                if n == 1 {
                    gpack_quant::matvec(pool, &view, x, y);
                } else {
                    gpack_quant::matmul(pool, &view, x, n, y);
                }
            }
            Matrix::Native {
                view, row_start, ..
            } => {
                // A member of a fused tensor used apart, or one expert of a
                // stacked tensor: its rows as a view of their own (no copy).
                let v = if *row_start == 0 && rows == view.rows() {
                    *view
                } else {
                    view.row_range(*row_start, rows)
                        .expect("row range checked at bind")
                };
                if n == 1 {
                    gpack_quant::matvec(pool, &v, x, y);
                } else {
                    gpack_quant::matmul(pool, &v, x, n, y);
                }
            }
            Matrix::Dense {
                ty,
                row_bytes,
                bytes,
                ..
            } => {
                // Raw ggml rows read in place (external experts in mmap
                // mode): each chunk of rows is transcoded into a small
                // native scratch tensor and run by the same kernels, so every
                // row's result is bit-identical to the transcoded tensor's.
                let chunk = (RAW_CHUNK_BYTES / (*row_bytes).max(1)).clamp(1, rows);
                let mut out = vec![0f32; n * chunk];
                let mut r0 = 0;
                while r0 < rows {
                    let m = chunk.min(rows - r0);
                    let src = &bytes[r0 * row_bytes..(r0 + m) * row_bytes];
                    // Checked at bind: the rows decode (same helper as load).
                    let Ok(buf) =
                        crate::gguf::transcode_to_buf("raw rows", *ty, src, m as u64, cols as u64)
                    else {
                        return;
                    };
                    let view = Self::owned_view(&buf);
                    let o = &mut out[..n * m];
                    if n == 1 {
                        gpack_quant::matvec(pool, &view, x, o);
                    } else {
                        gpack_quant::matmul(pool, &view, x, n, o);
                    }
                    for (i, oi) in o.chunks_exact(m).enumerate() {
                        y[i * rows + r0..i * rows + r0 + m].copy_from_slice(oi);
                    }
                    r0 += m;
                }
            }
        }
    }
}

/// Bytes of raw ggml rows transcoded per kernel call on the raw path (fits L2
/// with its native form).
const RAW_CHUNK_BYTES: usize = 256 << 10;

/// Matrices applied to one input whose outputs are concatenated per token:
/// `out[i] = [W0·x[i], W1·x[i], …]`.
#[derive(Debug)]
pub(crate) struct Proj<'a> {
    /// One matrix covering all members, when they are adjacent rows of one view.
    fused: Option<Matrix<'a>>,
    /// Every member's view, when all are mapped row-interleaved tensors (or
    /// row ranges of one): run as one call however their types differ.
    views: Option<Vec<NativeView<'a>>>,
    parts: Vec<Matrix<'a>>,
    total: usize,
}

fn same_view(a: &NativeView, b: &NativeView) -> bool {
    std::ptr::eq(a.codes().as_ptr(), b.codes().as_ptr()) && a.codes().len() == b.codes().len()
}

impl<'a> Proj<'a> {
    pub fn new(parts: Vec<Matrix<'a>>) -> Self {
        let total = parts.iter().map(Matrix::rows).sum();
        let mut fused = None;
        if let Some(Matrix::Native {
            view, row_start, ..
        }) = parts.first()
        {
            let mut next = *row_start;
            let adjacent = parts.iter().all(|p| match p {
                Matrix::Native {
                    view: v,
                    row_start: s,
                    rows,
                } if same_view(v, view) && *s == next => {
                    next += rows;
                    true
                }
                _ => false,
            });
            if adjacent && parts.len() > 1 {
                fused = Some(Matrix::Native {
                    view: *view,
                    row_start: *row_start,
                    rows: total,
                });
            }
        }
        let views = if fused.is_none() && parts.len() > 1 {
            parts
                .iter()
                .map(|p| match p {
                    Matrix::Native {
                        view,
                        row_start,
                        rows,
                    } if *row_start == 0 && *rows == view.rows() => Some(*view),
                    Matrix::Native {
                        view,
                        row_start,
                        rows,
                    } => view.row_range(*row_start, *rows),
                    _ => None,
                })
                .collect::<Option<Vec<NativeView<'a>>>>()
                .filter(|v| {
                    v.iter()
                        .all(|w| matches!(w.layout(), gpack_quant::Layout::Rows16(_)))
                })
        } else {
            None
        };
        Proj {
            fused,
            views,
            parts,
            total,
        }
    }

    /// The members.
    pub fn parts(&self) -> &[Matrix<'a>] {
        &self.parts
    }

    /// The one matrix the members are, when they are a whole native tensor
    /// (rows `0 .. rows` of it, in order) or there is one member.
    pub fn fused_whole(&self) -> Option<Matrix<'a>> {
        match (&self.fused, self.parts.as_slice()) {
            (
                Some(
                    m @ Matrix::Native {
                        view,
                        row_start: 0,
                        rows,
                    },
                ),
                _,
            ) if *rows == view.rows() => Some(m.clone()),
            (_, [one]) => Some(one.clone()),
            _ => None,
        }
    }

    /// Whether the members run as one kernel call.
    pub fn is_fused(&self) -> bool {
        self.fused.is_some() || self.views.is_some() || self.parts.len() == 1
    }

    /// `out` is `[n][rows()]`, on the threads of `pool` (the model's).
    pub fn matmul(&self, pool: &Pool, x: &[f32], n: usize, out: &mut [f32], tmp: &mut Vec<f32>) {
        if let Some(f) = &self.fused {
            return f.matmul(pool, x, n, out);
        }
        if self.parts.len() == 1 {
            return self.parts[0].matmul(pool, x, n, out);
        }
        if let Some(v) = &self.views {
            return gpack_quant::matmul_concat(pool, v, x, n, out);
        }
        let mut off = 0;
        for p in &self.parts {
            let r = p.rows();
            if n == 1 {
                p.matmul(pool, x, 1, &mut out[off..off + r]);
            } else {
                tmp.resize(n * r, 0.0);
                p.matmul(pool, x, n, tmp);
                for (o, t) in out.chunks_exact_mut(self.total).zip(tmp.chunks_exact(r)) {
                    o[off..off + r].copy_from_slice(t);
                }
            }
            off += r;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dims whose product passes 2^64 are a shape error. Before, the product
    /// wrapped (2^63+1 × 2 = 2 rows, in release), so 2 rows of bytes were
    /// accepted as this absurd shape; in debug builds it panicked.
    #[test]
    fn dims_whose_product_overflows_are_a_shape_error() {
        let bytes = vec![0u8; 2 * 34]; // two Q8_0 rows of 32
        for dims in [
            vec![32, (1u64 << 63) + 1, 2],
            vec![32, 1 << 32, 1 << 32, 1],
            vec![32, u64::MAX, u64::MAX],
        ] {
            let t = TensorRef::Dense {
                ggml_type: GgmlType::Q8_0,
                dims: dims.clone(),
                bytes: &bytes,
            };
            match Matrix::bind("blk.0.attn_q.weight", t, 32, None) {
                Err(Error::Shape { name, found, .. }) => {
                    assert_eq!((name.as_str(), found), ("blk.0.attn_q.weight", dims));
                }
                Err(e) => panic!("{dims:?}: {e}"),
                Ok(_) => panic!("{dims:?} accepted over {} bytes", bytes.len()),
            }
        }
        // The honest shape of the same bytes binds.
        let t = TensorRef::Dense {
            ggml_type: GgmlType::Q8_0,
            dims: vec![32, 2],
            bytes: &bytes,
        };
        assert_eq!(Matrix::bind("x", t, 32, Some(2)).unwrap().rows(), 2);
    }
}
