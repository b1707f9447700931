//! [`NativeView`]: a validated, borrowed view over one serialized native tensor.
//!
//! Validation happens once, in [`NativeView::parse`]: the header fields, the
//! implied array lengths (checked arithmetic), the canonical 16-aligned array
//! offsets, zero padding, the tensor fitting in the given bytes and the
//! address alignment of the scale arrays (so they can be read as `&[f32]`
//! without a copy). After that the accessors cannot fail. `parse` never panics,
//! whatever the input.

use crate::layout::{ArrayLens, Layout, NativeTensorHeader, FLAG_F16_SCALES, HEADER_LEN};
use crate::{add, to_usize, Error};
use half::{bf16, f16};

/// A borrowed native tensor: header fields plus its arrays, all validated.
#[derive(Clone, Copy, Debug)]
pub struct NativeView<'a> {
    layout: Layout,
    rows: usize,
    cols: usize,
    codes: &'a [u8],
    scales: &'a [f32],
    mins: &'a [f32],
    /// The f16 copy of the scales (empty when absent).
    f16_scales: &'a [u16],
    /// The f16 copy of the mins (empty when absent or symmetric).
    f16_mins: &'a [u16],
    byte_len: usize,
}

fn cast_f32<'a>(b: &'a [u8], what: &'static str) -> Result<&'a [f32], Error> {
    if b.is_empty() {
        return Ok(&[]);
    }
    bytemuck::try_cast_slice(b).map_err(|_| Error::Invalid {
        what,
        value: b.as_ptr() as u64 % 4,
    })
}

impl<'a> NativeView<'a> {
    /// Validates the native tensor at the start of `bytes` (which may extend
    /// past its end; see [`NativeView::byte_len`]) and borrows its arrays.
    ///
    /// Fails, never panics, on: a truncated header or array, an unknown layout
    /// code, an unsupported group, unknown flags, a zero or overflowing shape,
    /// a shape the layout does not allow, an offset other than the canonical
    /// one, non-zero padding, or a scale array whose address is not 4-aligned
    /// (the caller's mapping must place the tensor at least 16-aligned).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let h = NativeTensorHeader::from_bytes(bytes)?;
        let layout = Layout::from_code(h.layout, h.group)?;
        if h.flags & !FLAG_F16_SCALES != 0 {
            return Err(Error::Invalid {
                what: "flags",
                value: u64::from(h.flags),
            });
        }
        let has_f16 = h.flags & FLAG_F16_SCALES != 0;
        let lens = ArrayLens::new(layout, h.rows, h.cols, has_f16)?;
        let (canon, end) = NativeTensorHeader::new(layout, h.rows, h.cols, has_f16)?;
        let checks = [
            ("codes", canon.codes_off, h.codes_off),
            ("scales", canon.scales_off, h.scales_off),
            ("mins", canon.mins_off, h.mins_off),
            ("f16 scales", canon.f16_scales_off, h.f16_scales_off),
        ];
        for (what, expected, found) in checks {
            if expected != found {
                return Err(Error::Offset {
                    what,
                    expected,
                    found,
                });
            }
        }
        if (bytes.len() as u64) < end {
            return Err(Error::Truncated {
                what: "native tensor",
                needed: end,
                have: bytes.len() as u64,
            });
        }
        let end_us = to_usize(end, "tensor length")?;
        let bytes = &bytes[..end_us];
        // Arrays in file order: (offset, length); padding between them must be zero.
        let arrays = [
            (canon.codes_off, lens.codes),
            (canon.scales_off, lens.scales),
            (canon.mins_off, lens.mins),
            (canon.f16_scales_off, lens.f16_scales),
        ];
        let mut prev_end = HEADER_LEN;
        let mut slices: [&[u8]; 4] = [&[]; 4];
        for (i, (off, len)) in arrays.into_iter().enumerate() {
            if len == 0 {
                continue;
            }
            let (o, e) = (
                to_usize(off, "array offset")?,
                to_usize(add(off, len, "array end")?, "array end")?,
            );
            let pad = bytes
                .get(to_usize(prev_end, "padding")?..o)
                .ok_or(Error::Overflow { what: "padding" })?;
            if pad.iter().any(|&b| b != 0) {
                return Err(Error::Invalid {
                    what: "padding byte",
                    value: prev_end,
                });
            }
            slices[i] = bytes.get(o..e).ok_or(Error::Truncated {
                what: "native array",
                needed: off + len,
                have: bytes.len() as u64,
            })?;
            prev_end = off + len;
        }
        let scales = cast_f32(slices[1], "scales address alignment")?;
        let mins = cast_f32(slices[2], "mins address alignment")?;
        let f16_scales: &[u16] = if slices[3].is_empty() {
            &[]
        } else {
            bytemuck::try_cast_slice(slices[3]).map_err(|_| Error::Invalid {
                what: "f16 scales address alignment",
                value: slices[3].as_ptr() as u64 % 2,
            })?
        };
        if matches!(layout, Layout::F32 | Layout::F16 | Layout::BF16) {
            let a = if layout == Layout::F32 { 4 } else { 2 };
            if !(slices[0].as_ptr() as usize).is_multiple_of(a) {
                return Err(Error::Invalid {
                    what: "codes address alignment",
                    value: slices[0].as_ptr() as u64 % a as u64,
                });
            }
        }
        Ok(NativeView {
            layout,
            rows: to_usize(h.rows, "rows")?,
            cols: to_usize(h.cols, "cols")?,
            codes: slices[0],
            scales,
            mins,
            f16_scales: &f16_scales[..f16_scales.len().min(scales.len())],
            f16_mins: &f16_scales[f16_scales.len().min(scales.len())..],
            byte_len: end_us,
        })
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// Rows (ne1, output features).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Cols (ne0, input features).
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Elements per group (0 for float and raw ggml layouts).
    pub fn group(&self) -> usize {
        self.layout.group() as usize
    }
    /// Groups per row (0 for float and raw ggml layouts).
    pub fn groups_per_row(&self) -> usize {
        if self.group() == 0 {
            0
        } else {
            self.cols / self.group()
        }
    }
    /// The whole codes array (raw values for float layouts, raw blocks for Ggml).
    pub fn codes(&self) -> &'a [u8] {
        self.codes
    }
    /// Bytes of one group-block of a [`Layout::Rows16`] tensor times the
    /// blocks per row: the bytes of one group of 16 rows (0 for other layouts).
    pub fn rows16_group_bytes(&self) -> usize {
        match self.layout {
            Layout::Rows16(t) => {
                let (bs, ts) = t.block();
                self.cols / bs as usize * crate::interleave::R * ts as usize
            }
            _ => 0,
        }
    }
    /// Bytes of codes per row (for [`Layout::Rows16`]: the average, its
    /// rows are interleaved).
    pub fn row_code_bytes(&self) -> usize {
        self.codes.len() / self.rows
    }
    /// The codes of row `r`.
    pub fn row_codes(&self, r: usize) -> &'a [u8] {
        let n = self.row_code_bytes();
        &self.codes[r * n..(r + 1) * n]
    }
    /// All f32 scales, row-major `[rows][groups_per_row]` (empty if none).
    pub fn scales(&self) -> &'a [f32] {
        self.scales
    }
    /// All f32 mins (empty for symmetric layouts).
    pub fn mins(&self) -> &'a [f32] {
        self.mins
    }
    /// The f16 copy of the scales, as raw bits (empty when absent).
    pub fn f16_scales(&self) -> &'a [u16] {
        self.f16_scales
    }
    /// The f16 copy of the mins, as raw bits (empty when absent or symmetric).
    pub fn f16_mins(&self) -> &'a [u16] {
        self.f16_mins
    }
    /// The f16 scales of row `r` (empty when absent).
    pub fn row_f16_scales(&self, r: usize) -> &'a [u16] {
        let h = self.f16_scales();
        if h.is_empty() {
            return h;
        }
        let g = self.groups_per_row();
        &h[r * g..(r + 1) * g]
    }
    /// The f16 mins of row `r` (empty when absent or symmetric).
    pub fn row_f16_mins(&self, r: usize) -> &'a [u16] {
        let h = self.f16_mins();
        if h.is_empty() {
            return h;
        }
        let g = self.groups_per_row();
        &h[r * g..(r + 1) * g]
    }
    /// Whether the tensor carries the exact f16 copy of its scales (and mins).
    pub fn has_f16_scales(&self) -> bool {
        !self.f16_scales.is_empty()
    }
    /// The scales of row `r`.
    pub fn row_scales(&self, r: usize) -> &'a [f32] {
        let g = self.groups_per_row();
        &self.scales[r * g..(r + 1) * g]
    }
    /// The mins of row `r` (empty for symmetric layouts).
    pub fn row_mins(&self, r: usize) -> &'a [f32] {
        if self.mins.is_empty() {
            return &[];
        }
        let g = self.groups_per_row();
        &self.mins[r * g..(r + 1) * g]
    }
    /// Length of the tensor in bytes, header included (for a
    /// [`NativeView::row_range`] sub-view: the bytes of its rows' arrays).
    pub fn byte_len(&self) -> usize {
        self.byte_len
    }

    /// Rows `start .. start + n` as a view of their own (no copy: every array
    /// is row-major, so a row range is a sub-slice of each). Kernels run on
    /// it exactly as on a whole tensor, and each row's result is the same.
    /// `None` when the range is empty or outside the tensor.
    ///
    /// A [`Layout::Rows16`] view splits only at row groups: `start` must be a
    /// multiple of 16, and so must `n` unless the range ends the tensor.
    pub fn row_range(&self, start: usize, n: usize) -> Option<NativeView<'a>> {
        let end = start.checked_add(n).filter(|&e| e <= self.rows && n > 0)?;
        if let Layout::Rows16(_) = self.layout {
            const R: usize = crate::interleave::R;
            if !start.is_multiple_of(R) || !(n.is_multiple_of(R) || end == self.rows) {
                return None;
            }
            let gs = self.rows16_group_bytes();
            let codes = &self.codes[start / R * gs..end.div_ceil(R) * gs];
            return Some(NativeView {
                rows: n,
                codes,
                byte_len: codes.len(),
                ..*self
            });
        }
        let cb = self.row_code_bytes();
        let g = self.groups_per_row();
        let sub = |a: &'a [f32]| {
            if a.is_empty() {
                a
            } else {
                &a[start * g..end * g]
            }
        };
        let sub16 = |a: &'a [u16]| {
            if a.is_empty() {
                a
            } else {
                &a[start * g..end * g]
            }
        };
        let (codes, scales, mins) = (
            &self.codes[start * cb..end * cb],
            sub(self.scales),
            sub(self.mins),
        );
        let (f16_scales, f16_mins) = (sub16(self.f16_scales), sub16(self.f16_mins));
        let byte_len =
            codes.len() + 4 * (scales.len() + mins.len()) + 2 * (f16_scales.len() + f16_mins.len());
        Some(NativeView {
            layout: self.layout,
            rows: n,
            cols: self.cols,
            codes,
            scales,
            mins,
            f16_scales,
            f16_mins,
            byte_len,
        })
    }

    /// Dequantizes row `r` into `out` (`cols` values), bit-identical to ggml's
    /// dequantization of the source blocks.
    ///
    /// # Panics
    /// If `r >= rows`, `out.len() != cols`, or the layout is a raw ggml type
    /// [`crate::dequantize_ggml`] does not support.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows, "row {r} out of range ({} rows)", self.rows);
        assert_eq!(out.len(), self.cols, "output length must equal cols");
        if let Layout::Rows16(t) = self.layout {
            let (bs, ts) = t.block();
            let (bs, ts) = (bs as usize, ts as usize);
            const R: usize = crate::interleave::R;
            let gs = self.rows16_group_bytes();
            let group = &self.codes[r / R * gs..(r / R + 1) * gs];
            // One block on the stack (Q6_K's 210 bytes is the largest).
            let mut buf = [0u8; 256];
            let blk = &mut buf[..ts];
            for (b, o) in out.chunks_exact_mut(bs).enumerate() {
                crate::interleave::gather_block(
                    t,
                    &group[b * R * ts..(b + 1) * R * ts],
                    r % R,
                    blk,
                );
                if let Err(e) = crate::dequantize_ggml(t, blk, o) {
                    panic!("dequantize_row: {e}");
                }
            }
            return;
        }
        let c = self.row_codes(r);
        match self.layout {
            Layout::F32 => {
                for (o, b) in out.iter_mut().zip(c.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Layout::F16 => {
                for (o, b) in out.iter_mut().zip(c.chunks_exact(2)) {
                    *o = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
                }
            }
            Layout::BF16 => {
                for (o, b) in out.iter_mut().zip(c.chunks_exact(2)) {
                    *o = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
                }
            }
            Layout::Ggml(t) => {
                if let Err(e) = crate::dequantize_ggml(t, c, out) {
                    panic!("dequantize_row: {e}");
                }
            }
            l => crate::ggml::expand_native(l, c, self.row_scales(r), self.row_mins(r), out),
        }
    }
}
