//! ggml's quantizers, ported: F32 rows → ggml blocks, bit for bit what
//! llama-quantize writes (`ggml_quantize_chunk` per row), with or without an
//! importance matrix; and [`quantize_canonical`], which streams a tensor's
//! rows through them straight into the canonical Rows16 layout.
//!
//! One module per family of types: [`legacy`] (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0), [`k`] (Q2_K … Q6_K), [`iq4`] (IQ4_NL, IQ4_XS), [`mxfp4`]; the
//! shared search helpers and the exact fp16 conversion are in [`common`]
//! (its docs say how bit identity is kept: no FMA, C's evaluation order,
//! `nearest_int`'s magic number, x86's float → int casts). The [`TYPES`]
//! table below is the one list of what can be quantized.
//!
//! These are the functions llama-quantize reaches through
//! `ggml_quantize_chunk`, so where ggml has a `_ref` and a `quantize_*`
//! that differ (IQ4_NL: the row function searches 7 scales each side, the
//! `_ref` none), the `quantize_*` one is ported. An importance matrix (one
//! weight per column) selects ggml's `_impl` paths where it has them (all
//! but Q8_0 and MXFP4, which ignore it as ggml does).

// The ports index as the C does (`x[16*j + k]`, `L[j + l + 32]`), so each
// line can be checked against ggml-quants.c; iterator rewrites would hide
// the correspondence that bit identity rests on.
#![allow(clippy::needless_range_loop)]

mod common;
mod iq4;
mod isa;
mod k;
mod lanes;
mod legacy;
mod mxfp4;

pub use common::fp32_to_fp16;

use crate::kernels::Isa;
use crate::layout::{Layout, NativeTensorHeader};
use crate::{to_usize, Error, GgmlType};
use rayon::prelude::*;
use std::io::Write;

/// A row quantizer: `(isa, x, importance, out)`; `out` is the row's blocks,
/// the same bits on every `isa` ([`isa`]).
type RowFn = fn(Isa, &[f32], Option<&[f32]>, &mut [u8]);

/// Every ggml type gpack quantizes into, with its row function.
pub const TYPES: [GgmlType; 13] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
];

fn row_fn(t: GgmlType) -> Option<RowFn> {
    use isa::on_isa;
    use GgmlType as T;
    Some(match t {
        T::Q4_0 => |_, x, qw, o| legacy::q4_0(x, qw, o),
        T::Q4_1 => |_, x, qw, o| legacy::q4_1(x, qw, o),
        T::Q5_0 => |_, x, qw, o| legacy::q5_0(x, qw, o),
        T::Q5_1 => |_, x, qw, o| legacy::q5_1(x, qw, o),
        T::Q8_0 => |_, x, _, o| legacy::q8_0(x, o),
        T::Q2_K => on_isa!(k::q2_k),
        T::Q3_K => on_isa!(k::q3_k),
        T::Q4_K => on_isa!(k::q4_k),
        T::Q5_K => on_isa!(k::q5_k),
        T::Q6_K => on_isa!(k::q6_k),
        T::IQ4_NL => on_isa!(iq4::iq4_nl),
        T::IQ4_XS => on_isa!(iq4::iq4_xs),
        T::MXFP4 => |_, x, _, o| mxfp4::mxfp4(x, o),
        _ => return None,
    })
}

/// Whether rows can be quantized into `t` (one of [`TYPES`]).
pub fn can_quantize(t: GgmlType) -> bool {
    row_fn(t).is_some()
}

/// Quantizes one row `x` (a whole number of `t`'s blocks) into `out`
/// (`t.bytes_for(x.len())` bytes): the bytes `ggml_quantize_chunk(t, x, out,
/// 0, 1, x.len(), imatrix)` writes. `imatrix`, when given, holds one weight
/// per element of the row. Runs on [`Isa::best`].
pub fn quantize_row(
    t: GgmlType,
    x: &[f32],
    imatrix: Option<&[f32]>,
    out: &mut [u8],
) -> Result<(), Error> {
    quantize_row_on(Isa::best(), t, x, imatrix, out)
}

/// [`quantize_row`] compiled for `isa` (baseline code when the CPU lacks
/// it): the same bytes on every path (tests compare them).
pub fn quantize_row_on(
    isa: Isa,
    t: GgmlType,
    x: &[f32],
    imatrix: Option<&[f32]>,
    out: &mut [u8],
) -> Result<(), Error> {
    let f = row_fn(t).ok_or(Error::Unsupported {
        what: "quantize into",
        name: t.name(),
    })?;
    let shape = Error::Shape {
        what: t.name(),
        rows: 1,
        cols: x.len() as u64,
    };
    let need = t.bytes_for(x.len() as u64).ok_or(shape)?;
    if out.len() as u64 != need || imatrix.is_some_and(|w| w.len() != x.len()) {
        return Err(Error::Truncated {
            what: "quantized row",
            needed: need,
            have: out.len() as u64,
        });
    }
    f(isa, x, imatrix, out);
    Ok(())
}

/// Decodes one source row (F32/F16/BF16, or any block type gpack
/// dequantizes: re-quantization) to f32, as llama-quantize does before it
/// quantizes (`ggml_fp16_to_fp32_row`, `ggml_bf16_to_fp32_row`, `to_float`:
/// all exact).
fn row_to_f32(src_type: GgmlType, row: &[u8], x: &mut [f32]) -> Result<(), Error> {
    match src_type {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            crate::transcode::row_to_f32(src_type, row, x);
            Ok(())
        }
        t => crate::ggml::dequantize_ggml(t, row, x),
    }
}

/// The layout [`quantize_canonical`] writes for `target`: Rows16 for a
/// block type, F32/F16/BF16 as themselves.
pub fn canonical_target_layout(target: GgmlType) -> Result<Layout, Error> {
    match target {
        GgmlType::F32 => Ok(Layout::F32),
        GgmlType::F16 => Ok(Layout::F16),
        GgmlType::BF16 => Ok(Layout::BF16),
        t if can_quantize(t) && crate::interleave::supports(t) => Ok(Layout::Rows16(t)),
        t => Err(Error::Unsupported {
            what: "quantize into",
            name: t.name(),
        }),
    }
}

/// Rows quantized per parallel chunk (a multiple of 16: whole row groups).
const CHUNK_ROWS: usize = 256;

/// Importance weights for the rows of one tensor being quantized: each
/// row's `cols` weights, or none. A stored tensor may be several source
/// tensors back to back (q‖k‖v fused) or one expert of a stacked tensor, so
/// the weights are given per run of rows: `(rows, weights)` pairs in row
/// order covering the tensor.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowWeights<'a> {
    runs: &'a [(u64, Option<&'a [f32]>)],
}

impl<'a> RowWeights<'a> {
    /// No importance matrix.
    pub const NONE: RowWeights<'static> = RowWeights { runs: &[] };

    /// Runs of `(rows, weights)` in row order (rows past the last run get none).
    pub fn runs(runs: &'a [(u64, Option<&'a [f32]>)]) -> Self {
        RowWeights { runs }
    }

    /// The weights of row `r`.
    pub fn of(&self, r: u64) -> Option<&'a [f32]> {
        let mut end = 0;
        for &(n, w) in self.runs {
            end += n;
            if r < end {
                return w;
            }
        }
        None
    }
}

/// Writes one native tensor of `rows × cols` values of `src_type` (from
/// `src`, whole rows) quantized into `target`, in its canonical layout
/// ([`canonical_target_layout`]: ggml's blocks row-interleaved by 16, or
/// F32/F16/BF16 rows): the blocks are those llama-quantize writes for the
/// same rows and importance matrix (`imatrix`: `cols` weights, shared by
/// every row). Rows are quantized in parallel (rayon), a chunk of rows at a
/// time, so memory stays one chunk of blocks whatever the tensor's size.
/// Returns the bytes written.
pub fn quantize_canonical(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    target: GgmlType,
    imatrix: Option<&[f32]>,
    w: &mut impl Write,
) -> Result<u64, Error> {
    let run = [(rows, imatrix)];
    quantize_canonical_rows(src_type, src, rows, cols, target, RowWeights::runs(&run), w)
}

/// [`quantize_canonical`] with importance weights per run of rows
/// ([`RowWeights`]; each given vector must hold `cols` weights).
pub fn quantize_canonical_rows(
    src_type: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    target: GgmlType,
    imatrix: RowWeights<'_>,
    w: &mut impl Write,
) -> Result<u64, Error> {
    let layout = canonical_target_layout(target)?;
    let shape = Error::Shape {
        what: target.name(),
        rows,
        cols,
    };
    let src_row = src_type.bytes_for(cols).ok_or(Error::Shape {
        what: src_type.name(),
        rows,
        cols,
    })?;
    let dst_row = target.bytes_for(cols).ok_or(shape)?;
    let need = crate::mul(src_row, rows, "source length")?;
    if src.len() as u64 != need {
        return Err(Error::Truncated {
            what: "source tensor",
            needed: need,
            have: src.len() as u64,
        });
    }
    if let Some(im) = imatrix
        .runs
        .iter()
        .find_map(|r| r.1.filter(|w| w.len() as u64 != cols))
    {
        return Err(Error::Invalid {
            what: "importance matrix length",
            value: im.len() as u64,
        });
    }
    let (h, total) = NativeTensorHeader::new(layout, rows, cols, false)?;
    w.write_all(&h.to_bytes())?;
    let (src_row, dst_row) = (
        to_usize(src_row, "row bytes")?,
        to_usize(dst_row, "row bytes")?,
    );
    let cols_us = to_usize(cols, "cols")?;
    let rows_us = to_usize(rows, "rows")?;
    let isa = Isa::best();
    let mut buf = vec![0u8; CHUNK_ROWS.min(rows_us) * dst_row];
    let mut r0 = 0;
    while r0 < rows_us {
        let n = CHUNK_ROWS.min(rows_us - r0);
        let out = &mut buf[..n * dst_row];
        out.par_chunks_mut(dst_row)
            .zip(src[r0 * src_row..(r0 + n) * src_row].par_chunks(src_row))
            .enumerate()
            .try_for_each_init(
                || vec![0f32; cols_us],
                |x, (i, (o, s))| -> Result<(), Error> {
                    row_to_f32(src_type, s, x)?;
                    match target {
                        GgmlType::F32 => o.copy_from_slice(bytemuck::cast_slice(&x[..])),
                        GgmlType::F16 => {
                            for (d, &v) in o.chunks_exact_mut(2).zip(x.iter()) {
                                d.copy_from_slice(&fp32_to_fp16(v).to_le_bytes());
                            }
                        }
                        GgmlType::BF16 => {
                            for (d, &v) in o.chunks_exact_mut(2).zip(x.iter()) {
                                d.copy_from_slice(&fp32_to_bf16(v).to_le_bytes());
                            }
                        }
                        t => quantize_row_on(isa, t, x, imatrix.of((r0 + i) as u64), o)?,
                    }
                    Ok(())
                },
            )?;
        match layout {
            Layout::Rows16(t) => {
                crate::interleave::write_interleaved(t, out, n as u64, cols, w)?;
            }
            _ => w.write_all(out)?,
        }
        r0 += n;
    }
    Ok(total)
}

/// ggml's `ggml_compute_fp32_to_bf16` (`ggml_fp32_to_bf16_row_ref`): round
/// to nearest even, NaN → quiet NaN with the sign kept.
pub fn fp32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every quantized type decodes back close to its input (the
    /// bit-identity tests against llama-quantize are in the convert crate's
    /// integration tests, on committed reference blocks).
    #[test]
    fn every_type_round_trips_within_its_precision() {
        let cols = 512;
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i as f32 * 0.37).sin() + 0.3 * (i as f32 * 1.7).cos()) * 0.05)
            .collect();
        let im: Vec<f32> = (0..cols).map(|i| 1.0 + (i % 7) as f32).collect();
        for t in TYPES {
            for imatrix in [None, Some(&im[..])] {
                let mut q = vec![0u8; t.bytes_for(cols as u64).unwrap() as usize];
                quantize_row(t, &x, imatrix, &mut q).unwrap();
                let mut y = vec![0f32; cols];
                crate::ggml::dequantize_ggml(t, &q, &mut y).unwrap();
                let (mut e, mut s) = (0f64, 0f64);
                for (a, b) in x.iter().zip(&y) {
                    e += f64::from(a - b).powi(2);
                    s += f64::from(*a).powi(2);
                }
                let rel = (e / s).sqrt();
                let bound = match t {
                    GgmlType::Q2_K => 0.45,
                    GgmlType::Q3_K => 0.25,
                    _ => 0.15,
                };
                assert!(
                    rel < bound,
                    "{t} imatrix {}: rel rms {rel}",
                    imatrix.is_some()
                );
            }
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(fp32_to_bf16(1.0), 0x3f80);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    }
}
