//! The row-interleaved ggml layouts ([`Layout::Rows16`]): ggml's own blocks,
//! byte for byte, with 16 weight rows interleaved so that one SIMD lane is one
//! row.
//!
//! # Byte layout (normative; docs/FORMAT.md repeats it)
//!
//! A `rows × cols` tensor of ggml type `T` (block of `QK` elements, `TS`
//! bytes: `block_q4_K` is 256 elements in 144 bytes) is cut into row groups of
//! [`R`] = 16 rows (the last group padded with all-zero rows) and each row into
//! `nb = cols / QK` blocks. The codes array is
//!
//! ```text
//! [group g = 0 .. ceil(rows / 16)][block b = 0 .. nb][field f of T, in struct order]
//! ```
//!
//! and each *group-block* `(g, b)` holds the 16 rows' block `b`, field by
//! field (the fields of each type are listed by [`fields`]; they tile the
//! block):
//!
//! * a field of 1 or 2 bytes (`d`, `dmin`, `e`, `scales_h`): the 16 rows'
//!   values one after another, `[16][len]`;
//! * a longer field (its length is always a multiple of 4: `qs`, `qh`,
//!   `scales`, `hmask`): interleaved in 4-byte words, `[len / 4][16][4]`,
//!   i.e. word `j` of rows 0..16, then word `j + 1`, …
//!
//! So a group-block is exactly `16 × TS` bytes (the GGUF's bytes for 16 rows),
//! and a 64-byte load at word `j` of a long field gives one 32-bit lane per
//! row, holding bytes `4j .. 4j + 4` of that row's field: the operand of a
//! `vpdpbusd` with the activations broadcast. The tensor is `groups × nb × 16
//! × TS` bytes; its size over the GGUF's is only the padding rows of the last
//! group (none when `rows % 16 == 0`, which every released model's matrices
//! satisfy).
//!
//! Dequantizing row `r` gathers its blocks back ([`gather_block`]) and
//! decodes them as ggml does, so values are bit-identical by construction.

use crate::{mul, to_usize, Error, GgmlType};

/// Rows per group (one AVX-512 register of 32-bit lanes).
pub const R: usize = 16;

/// The fields of one ggml block in struct order: `(offset, length)` bytes
/// (ggml-common.h), or `None` for types without a row-interleaved layout.
pub const fn fields(t: GgmlType) -> Option<&'static [(u16, u16)]> {
    use GgmlType as T;
    Some(match t {
        // block_q4_0 { ggml_half d; uint8_t qs[16]; }
        T::Q4_0 | T::IQ4_NL => &[(0, 2), (2, 16)],
        // block_q4_1 { ggml_half d; ggml_half m; uint8_t qs[16]; }
        T::Q4_1 => &[(0, 2), (2, 2), (4, 16)],
        // block_q5_0 { ggml_half d; uint8_t qh[4]; uint8_t qs[16]; }
        T::Q5_0 => &[(0, 2), (2, 4), (6, 16)],
        // block_q5_1 { ggml_half d; ggml_half m; uint8_t qh[4]; uint8_t qs[16]; }
        T::Q5_1 => &[(0, 2), (2, 2), (4, 4), (8, 16)],
        // block_q8_0 { ggml_half d; int8_t qs[32]; }
        T::Q8_0 => &[(0, 2), (2, 32)],
        // block_q2_K { uint8_t scales[16]; uint8_t qs[64]; ggml_half d; ggml_half dmin; }
        T::Q2_K => &[(0, 16), (16, 64), (80, 2), (82, 2)],
        // block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; ggml_half d; }
        T::Q3_K => &[(0, 32), (32, 64), (96, 12), (108, 2)],
        // block_q4_K { ggml_half d; ggml_half dmin; uint8_t scales[12]; uint8_t qs[128]; }
        T::Q4_K => &[(0, 2), (2, 2), (4, 12), (16, 128)],
        // block_q5_K { d; dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }
        T::Q5_K => &[(0, 2), (2, 2), (4, 12), (16, 32), (48, 128)],
        // block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }
        T::Q6_K => &[(0, 128), (128, 64), (192, 16), (208, 2)],
        // block_iq4_xs { ggml_half d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; }
        T::IQ4_XS => &[(0, 2), (2, 2), (4, 4), (8, 128)],
        // block_mxfp4 { uint8_t e; uint8_t qs[16]; }
        T::MXFP4 => &[(0, 1), (1, 16)],
        _ => return None,
    })
}

/// Whether `t` has a row-interleaved layout.
pub const fn supports(t: GgmlType) -> bool {
    fields(t).is_some()
}

/// Where byte `o` of row `i`'s block lands inside a group-block: the field
/// start scaled by 16, then `[16][len]` or `[len/4][16][4]`.
#[inline]
fn place(start: usize, len: usize, i: usize, o: usize) -> usize {
    let base = start * R;
    if len <= 2 {
        base + i * len + o
    } else {
        base + (o / 4) * (R * 4) + i * 4 + o % 4
    }
}

/// Interleaves the blocks `b` of up to 16 rows into one group-block.
///
/// `rows[i]` is row `i`'s block (`TS` bytes); rows past `rows.len()` are zero.
/// `out` is `16 × TS` bytes.
///
/// # Panics
/// If `t` has no interleaved layout or the lengths do not match.
pub fn interleave_block(t: GgmlType, rows: &[&[u8]], out: &mut [u8]) {
    let f = fields(t).expect("type without a row-interleaved layout");
    let ts = t.block().1 as usize;
    assert!(rows.len() <= R && out.len() == R * ts);
    out.fill(0);
    for (i, blk) in rows.iter().enumerate() {
        assert_eq!(blk.len(), ts);
        for &(s, l) in f {
            let (s, l) = (s as usize, l as usize);
            for o in 0..l {
                out[place(s, l, i, o)] = blk[s + o];
            }
        }
    }
}

/// Gathers row `i`'s block back out of a group-block (`16 × TS` bytes) into
/// `out` (`TS` bytes): the inverse of [`interleave_block`].
///
/// # Panics
/// If `t` has no interleaved layout, `i >= 16` or the lengths do not match.
pub fn gather_block(t: GgmlType, group_block: &[u8], i: usize, out: &mut [u8]) {
    let f = fields(t).expect("type without a row-interleaved layout");
    let ts = t.block().1 as usize;
    assert!(i < R && group_block.len() == R * ts && out.len() == ts);
    for &(s, l) in f {
        let (s, l) = (s as usize, l as usize);
        let base = s * R;
        if l <= 2 {
            // Small fields lie whole per row.
            let from = base + i * l;
            out[s..s + l].copy_from_slice(&group_block[from..from + l]);
            continue;
        }
        // Larger fields are 4-byte words, 16 rows per word index: copy a
        // word at a time (the same bytes `place` names one by one).
        let words = l / 4;
        for w in 0..words {
            let from = base + w * (R * 4) + i * 4;
            out[s + 4 * w..s + 4 * w + 4].copy_from_slice(&group_block[from..from + 4]);
        }
        for o in 4 * words..l {
            out[s + o] = group_block[place(s, l, i, o)];
        }
    }
}

/// Bytes of the codes array of a `rows × cols` tensor of `t`, checked; an
/// error when `cols` is not a whole number of blocks.
pub fn codes_len(t: GgmlType, rows: u64, cols: u64) -> Result<u64, Error> {
    let (bs, ts) = t.block();
    if rows == 0 || cols == 0 || !cols.is_multiple_of(bs) {
        return Err(Error::Shape {
            what: t.name(),
            rows,
            cols,
        });
    }
    let groups = rows.div_ceil(R as u64);
    mul(
        mul(groups, cols / bs, "group-block count")?,
        mul(R as u64, ts, "group-block bytes")?,
        "codes length",
    )
}

/// Writes `rows` rows of ggml data (`src`, row-major, `rows × cols`) in the
/// interleaved order, 16 rows at a time (bounded memory: one group).
pub fn write_interleaved(
    t: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    w: &mut impl std::io::Write,
) -> Result<u64, Error> {
    let len = codes_len(t, rows, cols)?;
    let (bs, ts) = t.block();
    let nb = to_usize(cols / bs, "blocks per row")?;
    let ts = to_usize(ts, "type size")?;
    let row_bytes = nb * ts;
    let rows = to_usize(rows, "rows")?;
    if src.len()
        != rows
            .checked_mul(row_bytes)
            .ok_or(Error::Overflow { what: "rows" })?
    {
        return Err(Error::Truncated {
            what: "ggml data",
            needed: (rows * row_bytes) as u64,
            have: src.len() as u64,
        });
    }
    let mut group = vec![0u8; nb * R * ts];
    for g in 0..rows.div_ceil(R) {
        let r0 = g * R;
        let n = R.min(rows - r0);
        for b in 0..nb {
            let blocks: [&[u8]; R] =
                std::array::from_fn(|i| &src[(r0 + i.min(n - 1)) * row_bytes + b * ts..][..ts]);
            interleave_block(t, &blocks[..n], &mut group[b * R * ts..(b + 1) * R * ts]);
        }
        w.write_all(&group)?;
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_tile_each_block_and_long_fields_are_words() {
        for id in 0..64 {
            let Some(t) = GgmlType::from_id(id) else {
                continue;
            };
            let Some(f) = fields(t) else { continue };
            let mut end = 0;
            for &(s, l) in f {
                assert_eq!(s, end, "{t}: fields must be contiguous");
                assert!(l <= 2 || l % 4 == 0, "{t}: field of {l} bytes");
                end = s + l;
            }
            assert_eq!(
                u64::from(end),
                t.block().1,
                "{t}: fields must tile the block"
            );
        }
    }

    #[test]
    fn interleave_round_trips_and_places_words_per_lane() {
        let t = GgmlType::Q4_K;
        let ts = 144;
        let rows: Vec<Vec<u8>> = (0..13)
            .map(|i| (0..ts).map(|o| (i * 31 + o * 7) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = rows.iter().map(|r| &r[..]).collect();
        let mut g = vec![0u8; 16 * ts];
        interleave_block(t, &refs, &mut g);
        // d of row 3 at 3*2; word 5 of qs (bytes 16+20..) of row 7.
        assert_eq!(&g[6..8], &rows[3][0..2]);
        let qs = 16 * 16;
        assert_eq!(&g[qs + 5 * 64 + 7 * 4..][..4], &rows[7][16 + 20..16 + 24]);
        let mut back = vec![0u8; ts];
        for (i, r) in rows.iter().enumerate() {
            gather_block(t, &g, i, &mut back);
            assert_eq!(&back, r);
        }
        gather_block(t, &g, 15, &mut back);
        assert!(back.iter().all(|&b| b == 0), "padding rows are zero");
    }
}
