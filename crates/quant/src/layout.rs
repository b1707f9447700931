//! Native layouts and the serialized native tensor header.
//!
//! # Serialized native tensor (normative; little-endian)
//!
//! A native tensor is a 64-byte [`NativeTensorHeader`] followed by up to four
//! arrays. Every offset is relative to the start of the tensor (its header),
//! and every array starts 16-byte aligned relative to it; writers place
//! tensors 256-aligned, so the arrays are 16-aligned in a mapped file.
//!
//! ```text
//! @0  layout      u32   Layout::code()
//! @4  group       u32   elements per group (0 for F32/F16/BF16/Ggml)
//! @8  flags       u32   bit 0: has_f16_scales (f16 copies of scales and mins); other bits must be 0
//! @12 reserved    u32   must be 0
//! @16 rows        u64   ne1, output features, >= 1
//! @24 cols        u64   ne0, input features (contiguous), >= 1
//! @32 codes_off   u64   = 64
//! @40 scales_off  u64   = align16(codes_off + codes_len), or 0 when no scales
//! @48 mins_off    u64   = align16(scales_off + scales_len) for asymmetric layouts, else 0
//! @56 f16_off     u64   = align16(end of previous array) iff flags bit 0, else 0
//! ```
//!
//! Lengths are implied by layout, rows and cols (see [`ArrayLens`]):
//!
//! * codes: F32 `rows*cols*4`, F16/BF16 `rows*cols*2` (raw little-endian
//!   values, row-major); I8 `rows*cols` bytes (`i8` for symmetric, `u8` for
//!   asymmetric); I4 `rows*cols/2` bytes; Ggml(t) `rows * (cols/block) * type_size`
//!   (the ggml blocks, byte for byte).
//! * scales: f32, one per (row, group), row-major: `rows*(cols/group)*4` bytes.
//! * mins (asymmetric only): the same shape as the scales.
//! * f16 copy (optional, flag bit 0): the scales as IEEE binary16,
//!   `rows*(cols/group)*2` bytes, followed for asymmetric layouts by the mins
//!   in the same form. Every f16 value must convert back to exactly its f32
//!   value (writers only set the flag when all do), so kernels may read either
//!   copy and compute bit-identical results; reading the f16 copy moves fewer
//!   bytes per token (I4Asym: 20 instead of 24 bytes per 32 weights, as Q4_1).
//!
//! The tensor ends at the end of its last array (no trailing padding is part of
//! it); padding bytes between arrays must be zero.
//!
//! Values: symmetric I8 `q * s`; asymmetric I8 `q * s + m` (q unsigned);
//! I4 symmetric `(q - 8) * s`; I4 asymmetric `q * s + m` (q in 0..=15).
//! I4 nibble order, per group of 32 elements (16 bytes): byte `i` holds element
//! `i` in its low nibble and element `i + 16` in its high nibble (ggml's
//! `block_q4_0` order, so Q4_0/Q4_1 codes are copied unchanged and the AVX2
//! unpack is one shift and one mask).

use crate::{add, align16, mul, Error, GgmlType};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// A native weight layout. The numeric codes ([`Layout::code`]) are stable and
/// stored in files; never renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// f32 values, row-major.
    F32,
    /// IEEE binary16 values, row-major.
    F16,
    /// bfloat16 values, row-major.
    BF16,
    /// `i8` codes, one f32 scale per group: `q * s`.
    I8Sym {
        /// Elements per group (16 or 32).
        group: u32,
    },
    /// `u8` codes, f32 scale and min per group: `q * s + m`.
    I8Asym {
        /// Elements per group (16 or 32).
        group: u32,
    },
    /// 4-bit codes, f32 scale per group: `(q - 8) * s`.
    I4Sym {
        /// Elements per group (32).
        group: u32,
    },
    /// 4-bit codes, f32 scale and min per group: `q * s + m`.
    I4Asym {
        /// Elements per group (32).
        group: u32,
    },
    /// Raw ggml blocks kept byte for byte, for types without an exact native
    /// layout (IQ*, TQ*, MXFP4, …). Kernels dequantize them row by row.
    Ggml(GgmlType),
    /// ggml's blocks, byte for byte, with 16 rows interleaved so that a SIMD
    /// lane is a row ([`crate::interleave`]): the canonical `.gpack` layout of
    /// every quantized ggml type, no larger than the GGUF.
    Rows16(GgmlType),
}

/// Layout codes: 1..=7 for the native layouts; `0x1000 + ggml id` for raw ggml.
const CODE_GGML_BASE: u32 = 0x1000;
/// `0x2000 + ggml id` for the row-interleaved ggml layouts.
const CODE_ROWS16_BASE: u32 = 0x2000;

impl Layout {
    /// The stable numeric code stored in [`NativeTensorHeader::layout`].
    pub fn code(self) -> u32 {
        match self {
            Layout::F32 => 1,
            Layout::F16 => 2,
            Layout::BF16 => 3,
            Layout::I8Sym { .. } => 4,
            Layout::I8Asym { .. } => 5,
            Layout::I4Sym { .. } => 6,
            Layout::I4Asym { .. } => 7,
            Layout::Ggml(t) => CODE_GGML_BASE + t.id(),
            Layout::Rows16(t) => CODE_ROWS16_BASE + t.id(),
        }
    }

    /// The layout for a header's `(code, group)`, validated: the group must be
    /// one the layout supports (16 or 32 for I8, 32 for I4, 0 otherwise).
    pub fn from_code(code: u32, group: u32) -> Result<Layout, Error> {
        let l = match code {
            1 => Layout::F32,
            2 => Layout::F16,
            3 => Layout::BF16,
            4 => Layout::I8Sym { group },
            5 => Layout::I8Asym { group },
            6 => Layout::I4Sym { group },
            7 => Layout::I4Asym { group },
            c if c >= CODE_ROWS16_BASE => {
                let t = GgmlType::from_id(c - CODE_ROWS16_BASE)
                    .filter(|&t| crate::interleave::supports(t))
                    .ok_or(Error::Invalid {
                        what: "layout code",
                        value: u64::from(code),
                    })?;
                Layout::Rows16(t)
            }
            c if c >= CODE_GGML_BASE => {
                let t = GgmlType::from_id(c - CODE_GGML_BASE).ok_or(Error::Invalid {
                    what: "layout code",
                    value: u64::from(code),
                })?;
                Layout::Ggml(t)
            }
            _ => {
                return Err(Error::Invalid {
                    what: "layout code",
                    value: u64::from(code),
                })
            }
        };
        if l.group() != group {
            return Err(Error::Invalid {
                what: "group",
                value: u64::from(group),
            });
        }
        l.check_group()?;
        Ok(l)
    }

    fn check_group(self) -> Result<(), Error> {
        let ok = match self {
            Layout::I8Sym { group } | Layout::I8Asym { group } => group == 16 || group == 32,
            Layout::I4Sym { group } | Layout::I4Asym { group } => group == 32,
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(Error::Invalid {
                what: "group",
                value: u64::from(self.group()),
            })
        }
    }

    /// Elements per group (0 for layouts without groups).
    pub fn group(self) -> u32 {
        match self {
            Layout::I8Sym { group }
            | Layout::I8Asym { group }
            | Layout::I4Sym { group }
            | Layout::I4Asym { group } => group,
            _ => 0,
        }
    }

    /// Whether this layout has per-group scales.
    pub fn has_scales(self) -> bool {
        self.group() != 0
    }

    /// Whether this layout has per-group mins (asymmetric).
    pub fn has_mins(self) -> bool {
        matches!(self, Layout::I8Asym { .. } | Layout::I4Asym { .. })
    }

    /// A short name (`"I4Asym/G32"`), for logs and errors.
    pub fn name(self) -> &'static str {
        match self {
            Layout::F32 => "F32",
            Layout::F16 => "F16",
            Layout::BF16 => "BF16",
            Layout::I8Sym { group: 16 } => "I8Sym/G16",
            Layout::I8Sym { .. } => "I8Sym/G32",
            Layout::I8Asym { group: 16 } => "I8Asym/G16",
            Layout::I8Asym { .. } => "I8Asym/G32",
            Layout::I4Sym { .. } => "I4Sym/G32",
            Layout::I4Asym { .. } => "I4Asym/G32",
            Layout::Ggml(t) => t.name(),
            Layout::Rows16(t) => rows16_name(t),
        }
    }

    /// Whether this is a row-interleaved layout ([`Layout::Rows16`]).
    pub fn is_rows16(self) -> bool {
        matches!(self, Layout::Rows16(_))
    }
}

/// `"Q4_Kx16"` and so on: a static name per interleaved type.
fn rows16_name(t: GgmlType) -> &'static str {
    use GgmlType as T;
    match t {
        T::Q4_0 => "Q4_0x16",
        T::Q4_1 => "Q4_1x16",
        T::Q5_0 => "Q5_0x16",
        T::Q5_1 => "Q5_1x16",
        T::Q8_0 => "Q8_0x16",
        T::Q2_K => "Q2_Kx16",
        T::Q3_K => "Q3_Kx16",
        T::Q4_K => "Q4_Kx16",
        T::Q5_K => "Q5_Kx16",
        T::Q6_K => "Q6_Kx16",
        T::IQ4_NL => "IQ4_NLx16",
        T::IQ4_XS => "IQ4_XSx16",
        T::MXFP4 => "MXFP4x16",
        _ => "x16",
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The native layout a ggml type is transcoded to, exactly (DESIGN.md table).
pub fn native_layout_for(t: GgmlType) -> Layout {
    use GgmlType as T;
    match t {
        T::F32 => Layout::F32,
        T::F16 => Layout::F16,
        T::BF16 => Layout::BF16,
        T::Q8_0 | T::Q5_0 => Layout::I8Sym { group: 32 },
        T::Q5_1 | T::Q5_K => Layout::I8Asym { group: 32 },
        T::Q6_K | T::Q3_K => Layout::I8Sym { group: 16 },
        T::Q2_K => Layout::I8Asym { group: 16 },
        T::Q4_0 => Layout::I4Sym { group: 32 },
        T::Q4_1 | T::Q4_K => Layout::I4Asym { group: 32 },
        other => Layout::Ggml(other),
    }
}

/// Whether matrices of `rows` rows each (applied to one input) may be stored
/// as one tensor in `layout`, rows back to back (q‖k‖v, gate‖up): always,
/// except that a [`Layout::Rows16`] member must start on a row group, so
/// every member's rows must be a multiple of 16. Convert and the runtime's
/// transcoding providers both ask this.
pub fn can_fuse(layout: Layout, rows: &[u64]) -> bool {
    !layout.is_rows16()
        || rows
            .iter()
            .all(|r| r.is_multiple_of(crate::interleave::R as u64))
}

/// The implied byte lengths of a native tensor's arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayLens {
    /// Codes (or raw values / raw ggml blocks).
    pub codes: u64,
    /// f32 scales (0 when the layout has none).
    pub scales: u64,
    /// f32 mins (0 when the layout has none).
    pub mins: u64,
    /// f16 copy of the scales, then of the mins for asymmetric layouts (0 when absent).
    pub f16_scales: u64,
}

impl ArrayLens {
    /// Array lengths for `layout` with `rows x cols`, or an error when the shape
    /// does not fit the layout or the sizes overflow.
    pub fn new(layout: Layout, rows: u64, cols: u64, has_f16_scales: bool) -> Result<Self, Error> {
        let shape_err = || Error::Shape {
            what: layout.name(),
            rows,
            cols,
        };
        if rows == 0 || cols == 0 {
            return Err(shape_err());
        }
        let n = mul(rows, cols, "element count")?;
        let codes = match layout {
            Layout::F32 => mul(n, 4, "codes length")?,
            Layout::F16 | Layout::BF16 => mul(n, 2, "codes length")?,
            Layout::I8Sym { .. } | Layout::I8Asym { .. } => n,
            Layout::I4Sym { .. } | Layout::I4Asym { .. } => n / 2,
            Layout::Ggml(t) => {
                let (bs, ts) = t.block();
                if !cols.is_multiple_of(bs) {
                    return Err(shape_err());
                }
                mul(mul(rows, cols / bs, "block count")?, ts, "codes length")?
            }
            Layout::Rows16(t) => crate::interleave::codes_len(t, rows, cols)?,
        };
        let g = u64::from(layout.group());
        let (scales, mins, f16_scales) = if g == 0 {
            if has_f16_scales {
                return Err(Error::Invalid {
                    what: "flags",
                    value: FLAG_F16_SCALES.into(),
                });
            }
            (0, 0, 0)
        } else {
            if !cols.is_multiple_of(g) {
                return Err(shape_err());
            }
            let ng = mul(rows, cols / g, "group count")?;
            let s = mul(ng, 4, "scales length")?;
            let m = if layout.has_mins() { s } else { 0 };
            let h = if has_f16_scales {
                mul(
                    ng,
                    if layout.has_mins() { 4 } else { 2 },
                    "f16 scales length",
                )?
            } else {
                0
            };
            (s, m, h)
        };
        Ok(ArrayLens {
            codes,
            scales,
            mins,
            f16_scales,
        })
    }
}

/// Header flag: an f16 copy of the scales (and mins) follows the other arrays.
pub const FLAG_F16_SCALES: u32 = 1;

/// Size of [`NativeTensorHeader`] in bytes.
pub const HEADER_LEN: u64 = 64;

/// The fixed 64-byte little-endian descriptor at the start of every native
/// tensor (layout in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeTensorHeader {
    /// [`Layout::code`].
    pub layout: u32,
    /// Elements per group, 0 for layouts without groups.
    pub group: u32,
    /// Flags; bit 0 = has f16 scales.
    pub flags: u32,
    /// Rows (ne1).
    pub rows: u64,
    /// Cols (ne0).
    pub cols: u64,
    /// Offset of the codes array (always 64).
    pub codes_off: u64,
    /// Offset of the f32 scales, 0 if none.
    pub scales_off: u64,
    /// Offset of the f32 mins, 0 if none.
    pub mins_off: u64,
    /// Offset of the f16 scales, 0 if none.
    pub f16_scales_off: u64,
}

impl NativeTensorHeader {
    /// The canonical header of a `layout` tensor of `rows x cols`, and the
    /// tensor's total byte length.
    pub fn new(
        layout: Layout,
        rows: u64,
        cols: u64,
        has_f16_scales: bool,
    ) -> Result<(Self, u64), Error> {
        layout.check_group()?;
        let lens = ArrayLens::new(layout, rows, cols, has_f16_scales)?;
        let codes_off = HEADER_LEN;
        let mut end = add(codes_off, lens.codes, "codes end")?;
        let mut place = |len: u64, what: &'static str| -> Result<u64, Error> {
            if len == 0 {
                return Ok(0);
            }
            let off = align16(end, what)?;
            end = add(off, len, what)?;
            Ok(off)
        };
        let scales_off = place(lens.scales, "scales offset")?;
        let mins_off = place(lens.mins, "mins offset")?;
        let f16_scales_off = place(lens.f16_scales, "f16 scales offset")?;
        Ok((
            NativeTensorHeader {
                layout: layout.code(),
                group: layout.group(),
                flags: if has_f16_scales { FLAG_F16_SCALES } else { 0 },
                rows,
                cols,
                codes_off,
                scales_off,
                mins_off,
                f16_scales_off,
            },
            end,
        ))
    }

    /// The 64 header bytes.
    pub fn to_bytes(&self) -> [u8; 64] {
        let raw = RawHeader {
            layout: self.layout.into(),
            group: self.group.into(),
            flags: self.flags.into(),
            reserved: 0.into(),
            rows: self.rows.into(),
            cols: self.cols.into(),
            codes_off: self.codes_off.into(),
            scales_off: self.scales_off.into(),
            mins_off: self.mins_off.into(),
            f16_scales_off: self.f16_scales_off.into(),
        };
        let mut b = [0u8; 64];
        b.copy_from_slice(raw.as_bytes());
        b
    }

    /// Reads the raw fields (no validation beyond length and the reserved word;
    /// [`crate::NativeView::parse`] validates the rest).
    pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
        let Ok((r, _)) = RawHeader::ref_from_prefix(b) else {
            return Err(Error::Truncated {
                what: "native tensor header",
                needed: HEADER_LEN,
                have: b.len() as u64,
            });
        };
        let reserved = r.reserved.get();
        if reserved != 0 {
            return Err(Error::Invalid {
                what: "reserved header word",
                value: u64::from(reserved),
            });
        }
        Ok(NativeTensorHeader {
            layout: r.layout.get(),
            group: r.group.get(),
            flags: r.flags.get(),
            rows: r.rows.get(),
            cols: r.cols.get(),
            codes_off: r.codes_off.get(),
            scales_off: r.scales_off.get(),
            mins_off: r.mins_off.get(),
            f16_scales_off: r.f16_scales_off.get(),
        })
    }
}

/// The 64-byte native tensor header exactly as it lies in the file
/// (little-endian, alignment 1, no padding).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawHeader {
    layout: U32,
    group: U32,
    flags: U32,
    reserved: U32,
    rows: U64,
    cols: U64,
    codes_off: U64,
    scales_off: U64,
    mins_off: U64,
    f16_scales_off: U64,
}

const _: () = assert!(std::mem::size_of::<RawHeader>() as u64 == HEADER_LEN);

/// Total serialized length (header included) of a `layout` tensor of
/// `rows x cols` without f16 scales.
pub fn encoded_len(layout: Layout, rows: u64, cols: u64) -> Result<u64, Error> {
    Ok(NativeTensorHeader::new(layout, rows, cols, false)?.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_places_arrays_16_aligned() {
        let (h, total) =
            NativeTensorHeader::new(Layout::I4Asym { group: 32 }, 3, 96, true).unwrap();
        assert_eq!(NativeTensorHeader::from_bytes(&h.to_bytes()).unwrap(), h);
        // codes 3*96/2 = 144 @64; scales 3*3*4 = 36 @208; mins 36 @256; f16 scales+mins 36 @304.
        assert_eq!(
            (h.codes_off, h.scales_off, h.mins_off, h.f16_scales_off),
            (64, 208, 256, 304)
        );
        assert_eq!(total, 340);
        assert_eq!(encoded_len(Layout::F16, 2, 3).unwrap(), 64 + 12);
    }

    #[test]
    fn layout_codes_are_stable() {
        assert_eq!(Layout::F32.code(), 1);
        assert_eq!(Layout::I8Sym { group: 16 }.code(), 4);
        assert_eq!(Layout::I4Asym { group: 32 }.code(), 7);
        assert_eq!(Layout::Ggml(GgmlType::IQ4_XS).code(), 0x1000 + 23);
        assert!(Layout::from_code(6, 16).is_err());
        assert!(Layout::from_code(1, 32).is_err());
    }
}
