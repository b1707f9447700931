//! Writing one native tensor as [`crate::policy::decide`] chose, for both
//! containers: the one streaming encoder behind `gpack convert` and `gpack
//! prequant`.
//!
//! Memory is bounded whatever the tensor's size: exact transcodes go 16 rows
//! (Rows16) or one row (row-major layouts) at a time; quantizing, also from
//! ggml blocks (re-quantization), dequantizes one row at a time per worker
//! and holds one chunk of codes plus the tensor's scales and mins (at most
//! 1/16 of its f32 size) until the end ([`gpack_quant::quantize`]). The
//! converters used to dequantize a whole tensor into f32 first (convert: 8
//! bytes per weight, values plus their byte copy; prequant: 4 MiB chunks);
//! groups are quantized independently, so the bytes written are the same.

use crate::policy::Decision;
use gpack_quant::quantize::RowWeights;
use gpack_quant::{native_layout_for, GgmlType, Layout};
use std::io::Write;

/// Writes `rows × cols` elements of `ty` from `src` (whole ggml rows) as one
/// native tensor in `d.layout` to `w`: quantized when `d.quantized`, else
/// transcoded exactly. `f16_scales` adds the f16 copy of the scales and mins
/// (exact transcodes: only types whose block scales are f16,
/// [`gpack_quant::f16_scales_exact_for`]; quantized: always exact unless a
/// scale exceeds f16's range). `imatrix`: the importance weights of each
/// row, for llama-quantize's types (gpack's own layouts take none).
/// Returns the bytes written.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ty: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    d: Decision,
    f16_scales: bool,
    imatrix: RowWeights<'_>,
    w: &mut impl Write,
) -> Result<u64, gpack_quant::Error> {
    use gpack_quant::quantize::quantize_canonical_rows as quantize;
    use gpack_quant::transcode as t;
    match d.layout {
        // llama-quantize's types: ggml's quantizers, canonical layouts.
        Layout::Rows16(t) if d.quantized => quantize(ty, src, rows, cols, t, imatrix, w),
        Layout::F16 if d.quantized => quantize(ty, src, rows, cols, GgmlType::F16, imatrix, w),
        layout if d.quantized && f16_scales => {
            gpack_quant::quantize_with_f16_scales(ty, src, rows, cols, layout, w)
        }
        layout if d.quantized => gpack_quant::quantize(ty, src, rows, cols, layout, w),
        Layout::Rows16(r) if r == ty => gpack_quant::transcode_canonical(ty, src, rows, cols, w),
        layout if layout == native_layout_for(ty) && f16_scales => {
            t::transcode_with_f16_scales(ty, src, rows, cols, w)
        }
        layout if layout == native_layout_for(ty) => gpack_quant::transcode(ty, src, rows, cols, w),
        // No exact transcode of `ty` writes this layout: a policy bug, refused.
        layout => Err(gpack_quant::Error::Unsupported {
            what: "exact transcode of this type to",
            name: layout.name(),
        }),
    }
}
