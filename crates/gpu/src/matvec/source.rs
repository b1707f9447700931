//! The WGSL source of each layout's matmul: one generic body
//! (`shaders/matvec/body.wgsl`) plus the layout's decoder
//! (`shaders/matvec/decode/*.wgsl`, one file per layout: the one place for
//! that type's facts), spliced here.

use crate::Error;
use gpack_quant::{GgmlType, Layout};

const BODY: &str = include_str!("../../shaders/matvec/body.wgsl");
const COMMON: &str = include_str!("../../shaders/matvec/common.wgsl");
const ROWS16: &str = include_str!("../../shaders/matvec/rows16.wgsl");
const F16: &str = include_str!("../../shaders/matvec/f16.wgsl");
const BODY_I8: &str = include_str!("../../shaders/matvec/body_i8.wgsl");
const QUANT_X: &str = include_str!("../../shaders/matvec/quant_x.wgsl");

/// Row slices per workgroup: a workgroup is 16 rows × `K` invocations.
pub(crate) const K: u32 = 8;

/// The vectors one workgroup multiplies (a compile-time constant of the
/// shader): 1 for the matvec, 4 and 8 for small and larger batches.
pub(crate) const TILES: [u32; 3] = [1, 4, 8];

/// The decoder of `layout` and, for the Rows16 layouts, the elements per
/// ggml block; an error naming the layout when no kernel reads it.
fn decoder(layout: Layout) -> Result<(&'static str, bool), Error> {
    use GgmlType as T;
    let rows16 = |src: &'static str| Ok((src, true));
    let dense = |src: &'static str| Ok((src, false));
    match layout {
        Layout::F32 => dense(include_str!("../../shaders/matvec/decode/f32.wgsl")),
        Layout::F16 => dense(include_str!("../../shaders/matvec/decode/f16.wgsl")),
        Layout::BF16 => dense(include_str!("../../shaders/matvec/decode/bf16.wgsl")),
        Layout::I8Sym { .. } => dense(include_str!("../../shaders/matvec/decode/i8sym.wgsl")),
        Layout::I8Asym { .. } => dense(include_str!("../../shaders/matvec/decode/i8asym.wgsl")),
        Layout::I4Sym { group: 32 } => {
            dense(include_str!("../../shaders/matvec/decode/i4sym.wgsl"))
        }
        Layout::I4Asym { group: 32 } => {
            dense(include_str!("../../shaders/matvec/decode/i4asym.wgsl"))
        }
        Layout::Rows16(t) => match t {
            T::Q4_0 => rows16(include_str!("../../shaders/matvec/decode/q4_0.wgsl")),
            T::Q4_1 => rows16(include_str!("../../shaders/matvec/decode/q4_1.wgsl")),
            T::Q5_0 => rows16(include_str!("../../shaders/matvec/decode/q5_0.wgsl")),
            T::Q5_1 => rows16(include_str!("../../shaders/matvec/decode/q5_1.wgsl")),
            T::Q8_0 => rows16(include_str!("../../shaders/matvec/decode/q8_0.wgsl")),
            T::Q2_K => rows16(include_str!("../../shaders/matvec/decode/q2_k.wgsl")),
            T::Q3_K => rows16(include_str!("../../shaders/matvec/decode/q3_k.wgsl")),
            T::Q4_K => rows16(include_str!("../../shaders/matvec/decode/q4_k.wgsl")),
            T::Q5_K => rows16(include_str!("../../shaders/matvec/decode/q5_k.wgsl")),
            T::Q6_K => rows16(include_str!("../../shaders/matvec/decode/q6_k.wgsl")),
            T::IQ4_NL => rows16(include_str!("../../shaders/matvec/decode/iq4_nl.wgsl")),
            T::IQ4_XS => rows16(include_str!("../../shaders/matvec/decode/iq4_xs.wgsl")),
            T::MXFP4 => rows16(include_str!("../../shaders/matvec/decode/mxfp4.wgsl")),
            _ => Err(unsupported(layout)),
        },
        _ => Err(unsupported(layout)),
    }
}

/// The error for a layout no GPU kernel reads.
pub fn unsupported(layout: Layout) -> Error {
    Error::Layout {
        layout: layout.name(),
        why: "no GPU matmul reads it (supported: F32, F16, BF16, I8Sym, I8Asym, I4Sym/G32, \
              I4Asym/G32 and the Rows16 layouts of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, \
              Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4)",
    }
}

/// Whether a GPU matmul reads `layout`.
pub fn supports(layout: Layout) -> bool {
    decoder(layout).is_ok()
}

/// The complete WGSL module of the matmul of `layout` for `nb` vectors per
/// workgroup (one of 1, 4, 8). Entry point `main`; bindings: 0 codes, 1 x,
/// 2 y, 3 the parameters, 4 scales and 5 mins where the layout has them.
/// Public so that the naga translation test covers every source.
///
/// The same source serves adapters with and without `shader-f16`: f16 bits
/// are decoded with `unpack2x16float` (exact; `shaders/matvec/f16.wgsl` says
/// why not a bitcast), and the arithmetic is f32.
pub fn matmul_source(layout: Layout, nb: u32) -> Result<String, Error> {
    let (decode, rows16) = decoder(layout)?;
    let mut s = String::new();
    s.push_str(&format!(
        "// matmul of {layout}, {nb} vector(s) per workgroup.\nconst NB: u32 = {nb}u;\nconst K: u32 = {K}u;\n"
    ));
    let g = layout.group();
    if g != 0 {
        s.push_str(&format!("const G: u32 = {g}u;\n"));
    }
    s.push('\n');
    for part in [BODY, COMMON, F16, if rows16 { ROWS16 } else { "" }, decode] {
        s.push_str(part);
        s.push('\n');
    }
    Ok(s)
}

/// The int8 decoder of `layout`, for the layouts whose weights are small
/// integers times one scale per 32 (plus a constant offset): Q8_0, Q4_0.
fn decoder_i8(layout: Layout) -> Option<&'static str> {
    match layout {
        Layout::Rows16(GgmlType::Q8_0) => {
            Some(include_str!("../../shaders/matvec/decode_i8/q8_0.wgsl"))
        }
        Layout::Rows16(GgmlType::Q4_0) => {
            Some(include_str!("../../shaders/matvec/decode_i8/q4_0.wgsl"))
        }
        _ => None,
    }
}

/// Whether `layout` has a packed-int8 matmul ([`matmul_i8_source`]).
pub fn has_int8_path(layout: Layout) -> bool {
    decoder_i8(layout).is_some()
}

/// The matmul of `layout` with packed int8 dot products (`dot4I8Packed`)
/// over activations quantized to int8 per 32 ([`quant_x_source`]), for
/// `nb` vectors per workgroup; `None` for a layout without one. Bindings
/// as [`matmul_source`], binding 1 the quantized activations.
pub fn matmul_i8_source(layout: Layout, nb: u32) -> Option<String> {
    let decode = decoder_i8(layout)?;
    let mut s = format!(
        "// int8 matmul of {layout}, {nb} vector(s) per workgroup.\nconst NB: u32 = {nb}u;\nconst K: u32 = {K}u;\n\n"
    );
    for part in [BODY_I8, COMMON, F16, ROWS16, decode] {
        s.push_str(part);
        s.push('\n');
    }
    Some(s)
}

/// The kernel quantizing activations to int8 per 32 columns for the int8
/// matmuls (entry `main`; bindings 0 x, 1 the codes and scales, 2 the
/// parameters).
pub fn quant_x_source() -> &'static str {
    QUANT_X
}

/// Every layout with a GPU matmul (for tests and listings).
pub fn supported_layouts() -> Vec<Layout> {
    use GgmlType as T;
    let mut v = vec![
        Layout::F32,
        Layout::F16,
        Layout::BF16,
        Layout::I8Sym { group: 16 },
        Layout::I8Sym { group: 32 },
        Layout::I8Asym { group: 16 },
        Layout::I8Asym { group: 32 },
        Layout::I4Sym { group: 32 },
        Layout::I4Asym { group: 32 },
    ];
    for t in [
        T::Q4_0,
        T::Q4_1,
        T::Q5_0,
        T::Q5_1,
        T::Q8_0,
        T::Q2_K,
        T::Q3_K,
        T::Q4_K,
        T::Q5_K,
        T::Q6_K,
        T::IQ4_NL,
        T::IQ4_XS,
        T::MXFP4,
    ] {
        v.push(Layout::Rows16(t));
    }
    v
}
