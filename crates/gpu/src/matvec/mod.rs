//! Matrix-vector and matrix-matrix products with a weight on the device:
//! `y[v] = W · x[v]` for `n` vectors, `W` in its file layout.
//!
//! A [`GpuMatrix`] is a native tensor (crates/quant/src/layout.rs) whose
//! bytes are on the device exactly as in the file: the shaders read the
//! Rows16 ggml blocks, the row-major F32/F16/BF16 values and the I8/I4 codes
//! with their f32 scale and min arrays where they lie; nothing is
//! dequantized or repacked on the host. A tensor larger than one storage
//! binding is bound as several row pieces (whole groups of 16 rows), each a
//! dispatch of its own.
//!
//! One WGSL body serves every layout; a per-layout decoder turns the 32
//! weights of one row and one 32-column unit into f32 ([`source`]). A
//! workgroup is 16 rows × [`source::K`] slices of the units; a Rows16
//! group-block keeps its 16 rows' words side by side, so the 16 invocations
//! of a slice read consecutive words. Up to 8 vectors share each decoded
//! unit (the batch sizes a decoding server runs); the accumulation is in
//! f32.
//!
//! The f16 fields are decoded with `unpack2x16float` whether or not the
//! adapter has `shader-f16` (exact, and a matvec is bound by memory, not by
//! arithmetic); `shaders/matvec/f16.wgsl` says why not a bitcast.
//!
//! Packed int8 dot products: on an adapter whose WGSL has
//! `packed_4x8_integer_dot_product` ([`crate::Caps::int8_dot`]), the Q8_0
//! and Q4_0 matmuls first quantize the activations to int8 per 32 columns on
//! the device (`shaders/matvec/quant_x.wgsl`, the CPU's rule) and sum codes
//! with `dot4I8Packed` (`body_i8.wgsl`): the CPU's integer arithmetic, and a
//! quarter of the activation bytes read. Other layouts, and adapters
//! without the feature, take the f32 path.
//!
//! Perf log (lavapipe proves correctness only; nothing here has been timed
//! on a GPU yet): the reduction of the K partial sums is in workgroup memory
//! (8 values per row, cheap next to the unit loop), so subgroup operations
//! are not used; prefill-sized batches re-read the weights once per 8
//! vectors, where a tiled matmul through workgroup memory would read them
//! once per tile: that is the next step for prefill speed.

pub mod source;

use crate::{Error, Gpu};
use gpack_quant::layout::ArrayLens;
use gpack_quant::{Layout, NativeTensorHeader, NativeView};
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};

pub use source::{
    has_int8_path, matmul_i8_source, matmul_source, quant_x_source, supported_layouts, supports,
};

/// Rows per group of the Rows16 layouts and per workgroup of every kernel.
const R: usize = 16;

/// A byte range of a device buffer, bound at an offset the adapter accepts:
/// the range starts `word` 4-byte words after `base`.
#[derive(Clone, Debug)]
struct Binding {
    buffer: Arc<wgpu::Buffer>,
    base: u64,
    size: u64,
    word: u32,
}

impl Binding {
    fn entry(&self, binding: u32) -> wgpu::BindGroupEntry<'_> {
        wgpu::BindGroupEntry {
            binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &self.buffer,
                offset: self.base,
                size: NonZeroU64::new(self.size),
            }),
        }
    }
}

/// Rows `row0 .. row0 + rows` of a matrix and their arrays' bindings.
#[derive(Clone, Debug)]
struct Piece {
    row0: usize,
    rows: usize,
    codes: Binding,
    scales: Option<Binding>,
    mins: Option<Binding>,
}

/// A weight on the device in its file layout, ready for [`matmul`].
#[derive(Debug)]
pub struct GpuMatrix {
    layout: Layout,
    rows: usize,
    cols: usize,
    pieces: Vec<Piece>,
    /// The compiled kernels, one per [`source::TILES`] entry, made on first
    /// use: the f32 path's, then the int8 path's.
    pipelines: Mutex<[Option<Arc<wgpu::ComputePipeline>>; 6]>,
}

impl GpuMatrix {
    /// Uploads one native tensor (its 64-byte header and arrays, as
    /// [`NativeView::parse`] reads them from the mapping) to a buffer of its
    /// own. Fails on bytes that do not parse and on a layout no kernel
    /// reads ([`Error::Layout`], naming it; the caller adds the tensor's name).
    pub fn upload(gpu: &Gpu, label: &str, tensor: &[u8]) -> Result<GpuMatrix, Error> {
        let v = NativeView::parse(tensor)?;
        if !supports(v.layout()) {
            return Err(source::unsupported(v.layout()));
        }
        let buffer = Arc::new(gpu.upload(label, &tensor[..v.byte_len()])?);
        GpuMatrix::in_buffer(gpu, buffer, 0, &v)
    }

    /// The tensor `view` (a whole tensor as [`NativeView::parse`] returned
    /// it, not a row range) whose bytes, header first, are already at byte
    /// `offset` (a multiple of 4) of `buffer`, e.g. inside an uploaded
    /// section. Nothing is copied.
    pub fn in_buffer(
        gpu: &Gpu,
        buffer: Arc<wgpu::Buffer>,
        offset: u64,
        view: &NativeView<'_>,
    ) -> Result<GpuMatrix, Error> {
        GpuMatrix::in_buffer_split(gpu, buffer, offset, view, gpu.caps().max_binding)
    }

    /// [`GpuMatrix::in_buffer`] with the bindings capped at `max_binding`
    /// bytes (at most the adapter's limit): tests force row pieces with it.
    pub fn in_buffer_split(
        gpu: &Gpu,
        buffer: Arc<wgpu::Buffer>,
        offset: u64,
        view: &NativeView<'_>,
        max_binding: u64,
    ) -> Result<GpuMatrix, Error> {
        let layout = view.layout();
        if !supports(layout) {
            return Err(source::unsupported(layout));
        }
        let (rows, cols) = (view.rows(), view.cols());
        let has_f16 = view.has_f16_scales();
        let (h, len) = NativeTensorHeader::new(layout, rows as u64, cols as u64, has_f16)?;
        let lens = ArrayLens::new(layout, rows as u64, cols as u64, has_f16)?;
        if !offset.is_multiple_of(4) {
            return Err(Error::Size {
                what: "tensor offset alignment (4 bytes)",
                needed: offset.next_multiple_of(4),
                have: offset,
            });
        }
        if offset + len > buffer.size() {
            return Err(Error::Size {
                what: "tensor in its buffer",
                needed: offset + len,
                have: buffer.size(),
            });
        }
        let align = u64::from(gpu.device().limits().min_storage_buffer_offset_alignment);
        // Shader indices are u32 element and byte counts inside a binding:
        // keep each binding under 2 GiB (I4 indexes by element, 2 per byte).
        let cap = max_binding.min(gpu.caps().max_binding).min(1 << 31);
        // Bytes of each array per group of 16 rows.
        let (codes16, scales16) = match layout {
            Layout::Rows16(_) => (view.rows16_group_bytes() as u64, 0),
            // Row-major arrays: the same bytes in every row (mins as scales).
            _ => (
                lens.codes / rows as u64 * R as u64,
                lens.scales / rows as u64 * R as u64,
            ),
        };
        let per = codes16.max(scales16);
        let groups_per_piece = cap.saturating_sub(align + 4) / per;
        if groups_per_piece == 0 {
            return Err(Error::TooLarge {
                what: format!("16 rows of a {layout} matrix in one binding"),
                bytes: per,
                limit: cap,
            });
        }
        let rows_per_piece = (groups_per_piece as usize).saturating_mul(R);
        let bind = |start: u64, end: u64| -> Binding {
            let at = offset + start;
            let base = at / align * align;
            let size = ((offset + end - base).next_multiple_of(4)).min(buffer.size() - base);
            Binding {
                buffer: buffer.clone(),
                base,
                size,
                word: ((at - base) / 4) as u32,
            }
        };
        let mut pieces = Vec::new();
        let mut row0 = 0;
        while row0 < rows {
            let row1 = rows.min(row0 + rows_per_piece);
            let (r0, r1) = (row0 as u64, row1 as u64);
            let codes = match layout {
                Layout::Rows16(_) => bind(
                    h.codes_off + r0 / R as u64 * codes16,
                    h.codes_off + r1.div_ceil(R as u64) * codes16,
                ),
                _ => {
                    let rb = lens.codes / rows as u64;
                    bind(h.codes_off + r0 * rb, h.codes_off + r1 * rb)
                }
            };
            let per_row = scales16 / R as u64;
            let array = |off: u64| (off != 0).then(|| bind(off + r0 * per_row, off + r1 * per_row));
            pieces.push(Piece {
                row0,
                rows: row1 - row0,
                codes,
                scales: array(h.scales_off),
                mins: array(h.mins_off),
            });
            row0 = row1;
        }
        Ok(GpuMatrix {
            layout,
            rows,
            cols,
            pieces,
            pipelines: Mutex::new(Default::default()),
        })
    }

    /// The tensor `view` (a whole tensor, as [`NativeView::parse`] returned
    /// it) laid out as a [`crate::placement::Placement`] cut it: row pieces
    /// in buffers of their own, each `(buffer, byte offset, rows, head)`
    /// (`head`: the header bytes in front of the first piece's rows, 0 for
    /// the others), in row order, covering every row. Only the layouts a
    /// placement may cut (Rows16 at 16-row groups, F32/F16/BF16 at any
    /// row: one array of rows, nothing after it).
    pub fn in_pieces(
        gpu: &Gpu,
        view: &NativeView<'_>,
        parts: &[(Arc<wgpu::Buffer>, u64, std::ops::Range<u64>, u64)],
    ) -> Result<GpuMatrix, Error> {
        let layout = view.layout();
        if !supports(layout) {
            return Err(source::unsupported(layout));
        }
        let (rows, cols) = (view.rows(), view.cols());
        let row_bytes: Option<(u64, u64)> = match layout {
            Layout::Rows16(_) => Some((view.rows16_group_bytes() as u64, R as u64)),
            Layout::F32 | Layout::F16 | Layout::BF16 => {
                let lens = ArrayLens::new(layout, rows as u64, cols as u64, false)?;
                Some((lens.codes / rows.max(1) as u64, 1))
            }
            _ => None,
        };
        let Some((group_bytes, group_rows)) = row_bytes else {
            return Err(Error::Layout {
                layout: "a layout with separate scale arrays",
                why: "cannot be cut into row pieces (its scales follow all the codes)",
            });
        };
        let align = u64::from(gpu.device().limits().min_storage_buffer_offset_alignment);
        let mut pieces = Vec::with_capacity(parts.len());
        let mut next = 0u64;
        for (buffer, offset, range, head) in parts {
            let (r0, r1) = (range.start, range.end);
            if r0 != next || r1 <= r0 || r1 > rows as u64 || r0 % group_rows != 0 {
                return Err(Error::Size {
                    what: "row pieces (contiguous, whole groups, every row)",
                    needed: next,
                    have: r0,
                });
            }
            next = r1;
            let at = offset + head;
            let len = (r1 - r0).div_ceil(group_rows) * group_bytes;
            if at + len > buffer.size() || !at.is_multiple_of(4) {
                return Err(Error::Size {
                    what: "row piece in its buffer",
                    needed: at + len,
                    have: buffer.size(),
                });
            }
            let base = at / align * align;
            pieces.push(Piece {
                row0: r0 as usize,
                rows: (r1 - r0) as usize,
                codes: Binding {
                    buffer: buffer.clone(),
                    base,
                    size: (at + len - base)
                        .next_multiple_of(4)
                        .min(buffer.size() - base),
                    word: ((at - base) / 4) as u32,
                },
                scales: None,
                mins: None,
            });
        }
        if next != rows as u64 {
            return Err(Error::Size {
                what: "row pieces covering every row",
                needed: rows as u64,
                have: next,
            });
        }
        Ok(GpuMatrix {
            layout,
            rows,
            cols,
            pieces,
            pipelines: Mutex::new(Default::default()),
        })
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Cols (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// How many row pieces the matrix is bound as (1 unless it is larger
    /// than one storage binding).
    pub fn pieces(&self) -> usize {
        self.pieces.len()
    }

    /// The kernel for tile `t` (an index of [`source::TILES`]), of the
    /// int8 path when `int8`.
    fn pipeline(
        &self,
        gpu: &Gpu,
        t: usize,
        int8: bool,
    ) -> Result<Arc<wgpu::ComputePipeline>, Error> {
        let slot = t + if int8 { source::TILES.len() } else { 0 };
        if let Some(p) = self.pipelines.lock().ok().and_then(|c| c[slot].clone()) {
            return Ok(p);
        }
        let nb = source::TILES[t];
        let p = if int8 {
            let src = matmul_i8_source(self.layout, nb).ok_or(Error::Layout {
                layout: self.layout.name(),
                why: "has no int8 matmul",
            })?;
            gpu.pipeline(&format!("matmul_i8 {} nb{nb}", self.layout), &src, "main")?
        } else {
            let src = matmul_source(self.layout, nb)?;
            gpu.pipeline(&format!("matmul {} nb{nb}", self.layout), &src, "main")?
        };
        if let Ok(mut c) = self.pipelines.lock() {
            c[slot] = Some(p.clone());
        }
        Ok(p)
    }

    /// Whether [`matmul`] takes the packed-int8 path for this matrix on `gpu`.
    pub fn int8_path(&self, gpu: &Gpu) -> bool {
        gpu.caps().int8_dot && has_int8_path(self.layout)
    }
}

/// `y[v] = W · x[v]` for `v < n`: `x` holds `n × cols` f32 (vector-major),
/// `y` receives `n × rows` f32. `n = 1` is the matvec. Submits the work and
/// returns; [`Gpu::read`] or [`Gpu::wait`] waits for it.
pub fn matmul(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &wgpu::Buffer,
    n: usize,
    y: &wgpu::Buffer,
) -> Result<(), Error> {
    matmul_max_workgroups(gpu, w, x, n, y, gpu.caps().max_workgroups)
}

/// Where [`matmul_into`] writes: vector `v`'s outputs at
/// `y[v · stride + col0 ..][..rows]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    /// Elements from one vector's outputs to the next (≥ `col0 + rows`).
    pub stride: usize,
    /// The first output's column.
    pub col0: usize,
}

/// [`matmul`] into columns `out.col0 ..` of rows `out.stride` wide: the
/// members of a projection stored as separate tensors (q, k, v; gate, up)
/// write their parts of one q‖k‖v or gate‖up row, as one fused tensor does.
pub fn matmul_into(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &wgpu::Buffer,
    n: usize,
    y: &wgpu::Buffer,
    out: Out,
) -> Result<(), Error> {
    run_matmul(gpu, w, x, n, y, out, gpu.caps().max_workgroups)
}

/// [`matmul`] with at most `max_workgroups` workgroups per dispatch axis
/// (at most the adapter's): tests exercise the split of many row groups
/// over two axes with it.
pub fn matmul_max_workgroups(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &wgpu::Buffer,
    n: usize,
    y: &wgpu::Buffer,
    max_workgroups: u32,
) -> Result<(), Error> {
    let out = Out {
        stride: w.rows,
        col0: 0,
    };
    run_matmul(gpu, w, x, n, y, out, max_workgroups)
}

/// `x` (`n × cols` f32) quantized to int8 per 32 columns into the device's
/// activation buffer (`shaders/matvec/quant_x.wgsl`): 9 words per unit.
fn quantize_x(
    gpu: &Gpu,
    x: &wgpu::Buffer,
    n: usize,
    cols: usize,
) -> Result<Arc<wgpu::Buffer>, Error> {
    let units = cols.div_ceil(32);
    let blocks = n * units;
    let xq = gpu.scratch("int8 activations", blocks as u64 * 36)?;
    let max = gpu.caps().max_workgroups.max(1) as usize;
    let groups = blocks.div_ceil(64);
    let gx = groups.min(max);
    let gy = groups.div_ceil(gx);
    let params: [u32; 4] = [n as u32, cols as u32, units as u32, (gx * 64) as u32];
    let uniform = gpu.uniform("quant_x params", bytemuck::cast_slice(&params));
    let p = gpu.pipeline("quant_x", quant_x_source(), "main")?;
    gpu.dispatch(&p, &[x, &*xq, &uniform], [gx as u32, gy as u32, 1])?;
    Ok(xq)
}

fn run_matmul(
    gpu: &Gpu,
    w: &GpuMatrix,
    x: &wgpu::Buffer,
    n: usize,
    y: &wgpu::Buffer,
    out: Out,
    max_workgroups: u32,
) -> Result<(), Error> {
    assert!(
        out.col0 + w.rows <= out.stride,
        "matmul_into: columns {}..{} past rows of {}",
        out.col0,
        out.col0 + w.rows,
        out.stride
    );
    let need = |what: &'static str, floats: usize, buf: &wgpu::Buffer| {
        let needed = floats as u64 * 4;
        if n == 0 || needed > buf.size() || needed > u64::from(u32::MAX) {
            Err(Error::Size {
                what,
                needed,
                have: buf.size(),
            })
        } else {
            Ok(())
        }
    };
    need("x (n × cols f32)", n * w.cols, x)?;
    need(
        "y (n × rows f32)",
        n.saturating_sub(1) * out.stride + out.col0 + w.rows,
        y,
    )?;
    let max = max_workgroups.min(gpu.caps().max_workgroups).max(1) as usize;
    let t = source::TILES
        .iter()
        .position(|&nb| nb as usize >= n)
        .unwrap_or(source::TILES.len() - 1);
    let nb = source::TILES[t] as usize;
    let int8 = w.int8_path(gpu);
    let pipeline = w.pipeline(gpu, t, int8)?;
    let tiles = n.div_ceil(nb);
    // The int8 path reads the activations quantized on the device first.
    let xq = if int8 {
        Some(quantize_x(gpu, x, n, w.cols)?)
    } else {
        None
    };
    let x = xq.as_deref().unwrap_or(x);
    let (gb_words, blocks) = match w.layout {
        Layout::Rows16(ty) => {
            let (bs, ts) = ty.block();
            (ts as usize * R / 4, w.cols / bs as usize)
        }
        _ => (0, 0),
    };
    for piece in &w.pieces {
        let groups = piece.rows.div_ceil(R);
        let gx = groups.min(max);
        let gz = groups.div_ceil(gx);
        let params: [u32; 12] = [
            piece.rows as u32,
            w.cols as u32,
            n as u32,
            w.cols.div_ceil(32) as u32,
            piece.codes.word,
            piece.scales.as_ref().map_or(0, |b| b.word),
            piece.mins.as_ref().map_or(0, |b| b.word),
            gx as u32,
            out.stride as u32,
            (out.col0 + piece.row0) as u32,
            gb_words as u32,
            blocks as u32,
        ];
        let uniform = gpu.uniform("matmul params", bytemuck::cast_slice(&params));
        let mut entries = vec![
            piece.codes.entry(0),
            wgpu::BindGroupEntry {
                binding: 1,
                resource: x.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: y.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 3,
                resource: uniform.as_entire_binding(),
            },
        ];
        if let Some(s) = &piece.scales {
            entries.push(s.entry(4));
        }
        if let Some(m) = &piece.mins {
            entries.push(m.entry(5));
        }
        gpu.dispatch_entries(&pipeline, &entries, [gx as u32, tiles as u32, gz as u32])?;
    }
    Ok(())
}
