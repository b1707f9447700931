//! Where a weight section's tensors live on the device: a placement plan.
//!
//! A section (the NativeDense arena, Embed, Head, expert blobs) is packed
//! into as few device buffers as the adapter allows. Each buffer is at most
//! one storage binding (`max_storage_buffer_binding_size`), so a kernel can
//! bind any tensor of it, or the whole buffer, in one binding. Tensors are
//! never given a buffer each: a model has hundreds, and every buffer costs a
//! driver allocation and a bind-group slot.
//!
//! The tensors are placed in the order of their offsets in the section, each
//! at the next offset of its buffer that is a multiple of the device's
//! storage-buffer offset alignment. The arena's tensors are 256-aligned in
//! the file, which is what every adapter asks for at most, so a buffer is
//! then a byte-exact copy of a stretch of the section (padding included) and
//! consecutive tensors merge into one [`Copy`]: the section goes to the
//! device in one transfer per buffer, not one per tensor.
//!
//! A tensor larger than a binding is cut by rows into pieces, only where its
//! layout allows ([`Cut`]): a `Rows16` tensor at 16-row group boundaries (a
//! group-block holds 16 rows' blocks interleaved), an F32/F16/BF16 tensor at
//! any row. The first piece keeps the tensor's header (`Cut::head` bytes) in
//! front of its rows; the others hold rows only. A tensor that may not be cut
//! (`cut: None`, e.g. the int8/int4 layouts whose scales are a separate array
//! after the codes) and does not fit one binding is an error naming it.
//!
//! Planning is pure arithmetic over the descriptors, so the limit and the
//! alignment are parameters ([`Placement::new`]): tests use a 1 MiB binding.

use crate::Error;
use std::ops::Range;

/// One tensor of a section, as the runtime describes it from the file's
/// tensor table (the NativeDenseIndex, a single-tensor section's header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// Byte offset of the tensor (its header, if any) in the section.
    pub offset: u64,
    /// Byte length, header included.
    pub len: u64,
    /// How it may be cut by rows when it does not fit one binding; `None`:
    /// never cut.
    pub cut: Option<Cut>,
}

/// Where a tensor may be cut: `len = head + ceil(rows / group_rows) *
/// group_bytes`, the rows in groups of `group_rows` rows, each group
/// `group_bytes` contiguous bytes, nothing after the last group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Bytes before the first row (the 64-byte native tensor header).
    pub head: u64,
    /// Rows of the tensor.
    pub rows: u64,
    /// Rows per cuttable group: 16 for `Rows16`, 1 for F32/F16/BF16.
    pub group_rows: u64,
    /// Bytes per group (the last group is padded to `group_rows` rows when
    /// the layout pads, as `Rows16` does).
    pub group_bytes: u64,
}

impl Cut {
    /// Row groups of the tensor.
    pub fn groups(&self) -> u64 {
        self.rows.div_ceil(self.group_rows)
    }
}

/// One tensor, or one row piece of a cut tensor, on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The tensor's position in the list given to [`Placement::new`].
    pub tensor: usize,
    /// Index into [`Placement::buffers`].
    pub buffer: usize,
    /// Byte offset in that buffer (a multiple of the alignment).
    pub offset: u64,
    /// Byte offset of the piece's first byte in the section.
    pub src: u64,
    /// Byte length.
    pub len: u64,
    /// The tensor's rows this piece holds (`0..rows` when not cut; `0..0`
    /// for a tensor without [`Cut`]).
    pub rows: Range<u64>,
    /// Bytes of header in front of the rows: [`Cut::head`] for a tensor's
    /// first (or only) piece, 0 for the others (and 0 without a [`Cut`]).
    pub head: u64,
}

/// One transfer: `len` bytes from section offset `src` to `offset` in
/// buffer `buffer`. Covers one or more consecutive pieces and the padding
/// between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy {
    /// Index into [`Placement::buffers`].
    pub buffer: usize,
    /// Byte offset in that buffer.
    pub offset: u64,
    /// Byte offset in the section.
    pub src: u64,
    /// Byte length.
    pub len: u64,
}

/// Where every tensor of a section lives on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Size of each buffer in bytes (a multiple of 4, at most the limit).
    pub buffers: Vec<u64>,
    /// Every piece, in section order.
    pub pieces: Vec<Piece>,
    /// The transfers, in section order (non-overlapping on both sides).
    pub copies: Vec<Copy>,
    /// `pieces[tensors[i]]` are tensor `i`'s pieces, in row order.
    pub tensors: Vec<Range<usize>>,
    /// The section's length in bytes.
    pub section_len: u64,
    /// The binding limit it was planned for.
    pub limit: u64,
    /// The offset alignment it was planned for.
    pub align: u64,
}

fn add(a: u64, b: u64, what: &'static str) -> Result<u64, Error> {
    a.checked_add(b).ok_or(Error::Placement {
        tensor: None,
        why: format!("{what} overflows"),
    })
}

fn bad(tensor: usize, why: String) -> Error {
    Error::Placement {
        tensor: Some(tensor),
        why,
    }
}

impl Placement {
    /// Places `tensors` (any order; they must lie inside a section of
    /// `section_len` bytes and not overlap) into buffers of at most `limit`
    /// bytes, every piece at a multiple of `align` (a power of two, at
    /// least 4). Errors name the tensor by its position in `tensors`.
    pub fn new(
        tensors: &[Tensor],
        section_len: u64,
        limit: u64,
        align: u64,
    ) -> Result<Placement, Error> {
        if !align.is_power_of_two() || align < 4 {
            return Err(Error::Placement {
                tensor: None,
                why: format!("alignment {align} is not a power of two of at least 4"),
            });
        }
        // Buffer sizes and copies are whole 4-byte words (wgpu's
        // COPY_BUFFER_ALIGNMENT).
        let limit = limit / 4 * 4;
        if limit < align {
            return Err(Error::Placement {
                tensor: None,
                why: format!("binding limit {limit} is below the alignment {align}"),
            });
        }
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| (tensors[i].offset, tensors[i].len));
        let mut end_prev = 0u64;
        for (n, &i) in order.iter().enumerate() {
            let t = &tensors[i];
            let end = add(t.offset, t.len, "tensor end")?;
            if end > section_len {
                return Err(bad(
                    i,
                    format!(
                        "bytes {}..{end} lie outside the section of {section_len} bytes",
                        t.offset
                    ),
                ));
            }
            if t.len == 0 {
                return Err(bad(i, "is empty".into()));
            }
            if n > 0 && t.offset < end_prev {
                return Err(bad(
                    i,
                    format!(
                        "at {} overlaps tensor {} (ending at {end_prev})",
                        t.offset,
                        order[n - 1]
                    ),
                ));
            }
            end_prev = end;
            if let Some(c) = t.cut {
                if c.group_rows == 0 || c.rows == 0 || c.group_bytes == 0 {
                    return Err(bad(i, format!("has an empty row cut {c:?}")));
                }
                let body = c
                    .groups()
                    .checked_mul(c.group_bytes)
                    .and_then(|b| b.checked_add(c.head));
                if body != Some(t.len) {
                    return Err(bad(
                        i,
                        format!("is {} bytes, but its row cut {c:?} makes {body:?}", t.len),
                    ));
                }
            }
        }

        let mut p = Placement {
            buffers: Vec::new(),
            pieces: Vec::new(),
            copies: Vec::new(),
            tensors: vec![0..0; tensors.len()],
            section_len,
            limit,
            align,
        };
        // The open buffer's used bytes; `None` before the first piece.
        let mut cursor: Option<u64> = None;
        for &i in &order {
            let t = &tensors[i];
            let first = p.pieces.len();
            let fits_whole = t.len <= limit;
            match t.cut {
                _ if fits_whole => {
                    let at = p.room(&mut cursor, t.len);
                    p.push(Piece {
                        tensor: i,
                        buffer: p.buffers.len() - 1,
                        offset: at,
                        src: t.offset,
                        len: t.len,
                        rows: 0..t.cut.map_or(0, |c| c.rows),
                        head: t.cut.map_or(0, |c| c.head),
                    });
                    cursor = Some(at + t.len);
                }
                None => {
                    return Err(Error::TooLarge {
                        what: format!("tensor {i} (a layout that cannot be cut by rows)"),
                        bytes: t.len,
                        limit,
                    })
                }
                Some(c) => {
                    if add(c.head, c.group_bytes, "first row group")? > limit {
                        return Err(Error::TooLarge {
                            what: format!("tensor {i}: one row group of {} rows", c.group_rows),
                            bytes: c.head + c.group_bytes,
                            limit,
                        });
                    }
                    let mut group = 0u64;
                    let mut src = t.offset;
                    while group < c.groups() {
                        let head = if group == 0 { c.head } else { 0 };
                        // Fill the open buffer's tail when at least one group
                        // fits there, else start a new buffer.
                        let mut at = cursor.map(|u| u.next_multiple_of(align));
                        if at.is_none_or(|a| a + head + c.group_bytes > limit) {
                            at = None;
                        }
                        let at = match at {
                            Some(a) => a,
                            None => {
                                p.buffers.push(0);
                                0
                            }
                        };
                        let n = ((limit - at - head) / c.group_bytes).min(c.groups() - group);
                        let len = head + n * c.group_bytes;
                        let rows = group * c.group_rows..((group + n) * c.group_rows).min(c.rows);
                        p.push(Piece {
                            tensor: i,
                            buffer: p.buffers.len() - 1,
                            offset: at,
                            src,
                            len,
                            rows,
                            head,
                        });
                        cursor = Some(at + len);
                        group += n;
                        src += len;
                    }
                }
            }
            p.tensors[i] = first..p.pieces.len();
        }
        Ok(p)
    }

    /// The offset for a piece of `len` bytes (`len <= limit`): in the open
    /// buffer when it fits there, else at 0 of a new buffer.
    fn room(&mut self, cursor: &mut Option<u64>, len: u64) -> u64 {
        if let Some(u) = *cursor {
            let at = u.next_multiple_of(self.align);
            if at + len <= self.limit {
                return at;
            }
        }
        self.buffers.push(0);
        *cursor = Some(0);
        0
    }

    /// Records `piece`: grows its buffer and extends the last copy when the
    /// piece follows it at the same distance on both sides (the padding
    /// between them goes along), else starts a copy.
    fn push(&mut self, piece: Piece) {
        let size = &mut self.buffers[piece.buffer];
        *size = (*size).max((piece.offset + piece.len).next_multiple_of(4));
        match self.copies.last_mut() {
            Some(c)
                if c.buffer == piece.buffer
                    && piece.src >= c.src + c.len
                    && piece.offset >= c.offset + c.len
                    && piece.src - c.src == piece.offset - c.offset =>
            {
                c.len = piece.src + piece.len - c.src;
            }
            _ => self.copies.push(Copy {
                buffer: piece.buffer,
                offset: piece.offset,
                src: piece.src,
                len: piece.len,
            }),
        }
        self.pieces.push(piece);
    }

    /// Tensor `i`'s pieces, in row order.
    pub fn pieces_of(&self, i: usize) -> &[Piece] {
        &self.pieces[self.tensors[i].clone()]
    }

    /// Bytes of device memory the buffers take.
    pub fn device_bytes(&self) -> u64 {
        self.buffers.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(offset: u64, len: u64) -> Tensor {
        Tensor {
            offset,
            len,
            cut: None,
        }
    }

    #[test]
    fn aligned_tensors_pack_into_one_copy() {
        let t = [plain(0, 300), plain(512, 100), plain(768, 256)];
        let p = Placement::new(&t, 1024, 1 << 20, 256).unwrap();
        assert_eq!(p.buffers, vec![1024]);
        assert_eq!(
            p.copies,
            vec![Copy {
                buffer: 0,
                offset: 0,
                src: 0,
                len: 1024
            }]
        );
        let offs: Vec<u64> = p.pieces.iter().map(|x| x.offset).collect();
        assert_eq!(offs, vec![0, 512, 768]);
    }

    #[test]
    fn a_tensor_too_large_is_cut_at_group_boundaries() {
        // 64-byte head, 40 rows in groups of 16 (3 groups of 1000 bytes).
        let cut = Cut {
            head: 64,
            rows: 40,
            group_rows: 16,
            group_bytes: 1000,
        };
        let t = [Tensor {
            offset: 0,
            len: 3064,
            cut: Some(cut),
        }];
        let p = Placement::new(&t, 3064, 2100, 256).unwrap();
        let rows: Vec<_> = p.pieces.iter().map(|x| x.rows.clone()).collect();
        assert_eq!(rows, vec![0..32, 32..40]);
        assert_eq!(p.pieces[0].len, 2064);
        assert_eq!(p.pieces[1].src, 2064);
        assert_eq!(p.buffers, vec![2064, 1000]);
    }

    #[test]
    fn an_uncuttable_tensor_too_large_is_an_error_naming_it() {
        let t = [plain(0, 256), plain(256, 5000)];
        let e = Placement::new(&t, 5256, 4096, 256).unwrap_err().to_string();
        assert!(e.contains("tensor 1"), "{e}");
    }

    #[test]
    fn overlap_and_bounds_are_refused() {
        let e = Placement::new(&[plain(0, 300), plain(256, 10)], 1024, 4096, 256).unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
        let e = Placement::new(&[plain(1000, 300)], 1024, 4096, 256).unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
    }
}
