//! The matrices of the GPU's blocks and head, on the device.
//!
//! A `.gpack` hands its weight sections (the NativeDense arena, Head, and
//! Embed when the head is tied to it) to [`Uploader::add_section`]: every
//! matrix the device needs that lies whole in one of them is placed
//! ([`gpack_gpu::placement`]), and the section streams to the device once,
//! front to back, its SHA-256 checked on the way ([`Gpu::upload_section`]);
//! the matrices are then bound where they landed, nothing repacked. A
//! matrix that is not a whole tensor of a section (a member of a fused
//! tensor used apart, a provider's in-memory transcode: .gguf, .giw, Hugging
//! Face inputs) is uploaded on its own from its native arrays.
//!
//! A tensor larger than one storage binding is cut by rows at placement
//! ([`cut_of`]: Rows16 at 16-row groups, F32/F16/BF16 at any row) and bound
//! as row pieces in several buffers ([`GpuMatrix::in_pieces`]); an int8/int4
//! tensor (scales after all its codes) must fit one binding, else it is
//! refused naming it.

use crate::error::{Error, Result};
use crate::matrix::{Matrix, Proj};
use gpack_gpu::matvec::Out;
use gpack_gpu::placement::{Cut, Tensor};
use gpack_gpu::upload::{Report, Section};
use gpack_gpu::{Gpu, GpuMatrix};
use gpack_quant::{Layout, NativeTensorHeader, NativeView};
use std::collections::HashMap;
use std::sync::Arc;

/// A projection on the device: one matrix, or members written side by
/// side into one row ([`gpack_gpu::matmul_into`]).
#[derive(Debug)]
pub(super) struct GpuProj {
    /// Each member and its first output column.
    parts: Vec<(Arc<GpuMatrix>, usize)>,
    /// Output width (the members' rows summed).
    rows: usize,
}

impl GpuProj {
    /// The member matrices.
    pub fn members(&self) -> impl Iterator<Item = &GpuMatrix> {
        self.parts.iter().map(|(m, _)| &**m)
    }

    /// `y[t] = [W0 · x[t], W1 · x[t], …]` for `n` rows (`y`: `[n][rows]`).
    pub fn matmul(
        &self,
        g: &Gpu,
        x: &gpack_gpu::ops::Buffer,
        n: usize,
        y: &gpack_gpu::ops::Buffer,
    ) -> std::result::Result<(), gpack_gpu::Error> {
        for (m, col0) in &self.parts {
            let out = Out {
                stride: self.rows,
                col0: *col0,
            };
            gpack_gpu::matmul_into(g, m, x, n, y, out)?;
        }
        Ok(())
    }
}

/// Where a whole native tensor is: section `section`, byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct At {
    section: usize,
    offset: u64,
}

/// A matrix wanted on the device.
enum Want<'a> {
    /// A whole tensor of a section.
    InSection(At, NativeView<'a>),
    /// Its own upload (its native arrays re-serialized: no value changes).
    Own(NativeView<'a>),
    /// Its own upload of these words (a native tensor).
    Words(Vec<u32>),
}

/// Collects the matrices the device needs, uploads them, and hands out
/// [`GpuMatrix`]es.
pub(super) struct Uploader<'a> {
    sections: Vec<Section<'a>>,
    /// (name, what) of every matrix asked for, in order.
    wanted: Vec<(String, Want<'a>)>,
}

/// A matrix's place in [`Uploader::wanted`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Ticket(usize);

impl Ticket {
    /// A placeholder, replaced before use.
    pub const NONE: Ticket = Ticket(usize::MAX);
}

/// A projection's members' tickets and output columns.
pub(super) struct ProjTicket {
    parts: Vec<(Ticket, usize)>,
    rows: usize,
}

fn gpu_err(what: String) -> impl FnOnce(gpack_gpu::Error) -> Error {
    move |source| Error::Gpu { what, source }
}

/// The byte offset of `view`'s header in `bytes`, if the whole tensor lies
/// there (found by address: the view borrows from the same mapping).
fn offset_in(bytes: &[u8], view: &NativeView<'_>) -> Option<u64> {
    let (h, _) = NativeTensorHeader::new(
        view.layout(),
        view.rows() as u64,
        view.cols() as u64,
        view.has_f16_scales(),
    )
    .ok()?;
    let codes = view.codes().as_ptr() as usize;
    let start = (codes.checked_sub(bytes.as_ptr() as usize)?).checked_sub(h.codes_off as usize)?;
    let end = start.checked_add(view.byte_len())?;
    if end > bytes.len() {
        return None;
    }
    // The same tensor parses there (not a row range that happens to sit
    // inside a section).
    let again = NativeView::parse(&bytes[start..]).ok()?;
    (again.codes().as_ptr() == view.codes().as_ptr()
        && again.rows() == view.rows()
        && again.byte_len() == view.byte_len())
    .then_some(start as u64)
}

/// `view`'s arrays as one native tensor of their own (the canonical header
/// and offsets), in 4-byte words so the scale arrays are aligned.
fn serialize(view: &NativeView<'_>) -> std::result::Result<Vec<u32>, gpack_quant::Error> {
    let has_f16 = view.has_f16_scales();
    let (h, len) = NativeTensorHeader::new(
        view.layout(),
        view.rows() as u64,
        view.cols() as u64,
        has_f16,
    )?;
    let mut words = vec![0u32; (len as usize).div_ceil(4)];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
    let mut put = |off: u64, src: &[u8]| {
        if off != 0 || !src.is_empty() {
            bytes[off as usize..off as usize + src.len()].copy_from_slice(src);
        }
    };
    put(0, &h.to_bytes());
    put(h.codes_off, view.codes());
    put(h.scales_off, bytemuck::cast_slice(view.scales()));
    put(h.mins_off, bytemuck::cast_slice(view.mins()));
    if has_f16 {
        let s: &[u8] = bytemuck::cast_slice(view.f16_scales());
        put(h.f16_scales_off, s);
        put(
            h.f16_scales_off + s.len() as u64,
            bytemuck::cast_slice(view.f16_mins()),
        );
    }
    Ok(words)
}

/// The view of `m` (a whole tensor or a row range of one).
fn view_of<'a>(name: &str, m: &Matrix<'a>) -> Result<NativeView<'a>> {
    match m {
        Matrix::Native {
            view,
            row_start,
            rows,
        } => {
            if *row_start == 0 && *rows == view.rows() {
                Ok(*view)
            } else {
                // Checked at bind.
                view.row_range(*row_start, *rows).ok_or_else(|| Error::Shape {
                    name: name.into(),
                    expected: vec![view.cols() as u64, *rows as u64],
                    found: vec![view.cols() as u64, view.rows() as u64],
                })
            }
        }
        Matrix::Owned { .. } | Matrix::Dense { .. } => Err(Error::Gpu {
            what: format!("tensor {name}"),
            source: gpack_gpu::Error::Layout {
                layout: "raw ggml rows",
                why: "read in place from the source (not a native tensor); the GPU reads native tensors",
            },
        }),
    }
}

impl<'a> Uploader<'a> {
    pub fn new(sections: Vec<Section<'a>>) -> Uploader<'a> {
        Uploader {
            sections,
            wanted: Vec::new(),
        }
    }

    /// Asks for `m` (named `name` in errors) on the device.
    pub fn matrix(&mut self, name: &str, m: &Matrix<'a>) -> Result<Ticket> {
        let quant = |source| Error::Quant {
            name: name.into(),
            source,
        };
        let view = match m {
            Matrix::Owned { buf, .. } => {
                // A provider's transcode, owned by the model (not in a
                // section): its arrays are copied now.
                let v = NativeView::parse(buf.as_slice()).map_err(quant)?;
                check_layout(name, &v)?;
                let words = serialize(&v).map_err(quant)?;
                return Ok(self.push(name, Want::Words(words)));
            }
            _ => view_of(name, m)?,
        };
        check_layout(name, &view)?;
        let at =
            self.sections.iter().enumerate().find_map(|(i, s)| {
                offset_in(s.bytes, &view).map(|offset| At { section: i, offset })
            });
        Ok(self.push(
            name,
            match at {
                Some(at) => Want::InSection(at, view),
                None => Want::Own(view),
            },
        ))
    }

    fn push(&mut self, name: &str, w: Want<'a>) -> Ticket {
        self.wanted.push((name.to_string(), w));
        Ticket(self.wanted.len() - 1)
    }

    /// Asks for the members of `p` (one matrix when they are one tensor).
    pub fn proj(&mut self, name: &str, p: &Proj<'a>) -> Result<ProjTicket> {
        let mut parts = Vec::new();
        let mut col = 0;
        match p.fused_whole() {
            Some(m) => {
                parts.push((self.matrix(name, &m)?, 0));
                col = m.rows();
            }
            None => {
                for (i, m) in p.parts().iter().enumerate() {
                    parts.push((self.matrix(&format!("{name} part {i}"), m)?, col));
                    col += m.rows();
                }
            }
        }
        Ok(ProjTicket { parts, rows: col })
    }

    /// How many matrices have been asked for (a mark for [`Uploader::truncate`]).
    pub fn len(&self) -> usize {
        self.wanted.len()
    }

    /// Forgets every matrix asked for after the first `n` (the blocks a
    /// memory budget leaves on the CPU).
    pub fn truncate(&mut self, n: usize) {
        self.wanted.truncate(n);
    }

    /// Device bytes the first `n` matrices asked for would take: each
    /// section's placement of the tensors they use (the buffers
    /// [`Uploader::upload`] makes, padding included) and the own uploads.
    /// Pure arithmetic: nothing is allocated.
    pub fn device_bytes(&self, g: &Gpu, n: usize) -> Result<u64> {
        let wanted = &self.wanted[..n.min(self.wanted.len())];
        let mut total = 0u64;
        for (si, sec) in self.sections.iter().enumerate() {
            let mut seen = std::collections::HashSet::new();
            let list: Vec<Tensor> = wanted
                .iter()
                .filter_map(|(_, w)| match w {
                    Want::InSection(at, v) if at.section == si && seen.insert(at.offset) => {
                        Some(Tensor {
                            offset: at.offset,
                            len: v.byte_len() as u64,
                            cut: cut_of(v),
                        })
                    }
                    _ => None,
                })
                .collect();
            if list.is_empty() {
                continue;
            }
            let p = g
                .place(&list, sec.bytes.len() as u64)
                .map_err(gpu_err(format!("placing section {}", sec.name)))?;
            total += p.device_bytes();
        }
        for (name, w) in wanted {
            total += match w {
                Want::InSection(..) => 0,
                Want::Own(v) => {
                    let (_, len) = NativeTensorHeader::new(
                        v.layout(),
                        v.rows() as u64,
                        v.cols() as u64,
                        v.has_f16_scales(),
                    )
                    .map_err(|source| Error::Quant {
                        name: name.clone(),
                        source,
                    })?;
                    len.next_multiple_of(4)
                }
                Want::Words(words) => words.len() as u64 * 4,
            };
        }
        Ok(total)
    }

    /// Uploads everything asked for: each section once (placed, streamed,
    /// SHA-256 checked), the rest one tensor each. Returns the matrices in
    /// ticket order and the sections' reports.
    pub fn upload(self, g: &Gpu) -> Result<(Uploaded, Vec<Report>, u64)> {
        let mut out: Vec<Option<Arc<GpuMatrix>>> = vec![None; self.wanted.len()];
        let mut reports = Vec::new();
        for (si, sec) in self.sections.iter().enumerate() {
            // The distinct tensors of this section the device needs.
            let mut tensors: Vec<(u64, NativeView<'_>)> = Vec::new();
            let mut index: HashMap<u64, usize> = HashMap::new();
            for (_, w) in &self.wanted {
                if let Want::InSection(at, v) = w {
                    if at.section == si && !index.contains_key(&at.offset) {
                        index.insert(at.offset, tensors.len());
                        tensors.push((at.offset, *v));
                    }
                }
            }
            if tensors.is_empty() {
                continue;
            }
            let list: Vec<Tensor> = tensors
                .iter()
                .map(|(off, v)| Tensor {
                    offset: *off,
                    len: v.byte_len() as u64,
                    cut: cut_of(v),
                })
                .collect();
            let name_of = |i: usize| {
                let off = tensors[i].0;
                self.wanted
                    .iter()
                    .find(|(_, w)| matches!(w, Want::InSection(at, _) if at.section == si && at.offset == off))
                    .map_or_else(String::new, |(n, _)| n.clone())
            };
            let placement = g.place(&list, sec.bytes.len() as u64).map_err(|e| {
                let what = match &e {
                    gpack_gpu::Error::Placement {
                        tensor: Some(i), ..
                    } => format!("placing tensor {} of section {}", name_of(*i), sec.name),
                    _ => format!("placing section {}", sec.name),
                };
                Error::Gpu { what, source: e }
            })?;
            let res = g
                .upload_section(*sec, placement, &mut |_, _| {})
                .map_err(gpu_err(format!("uploading section {}", sec.name)))?;
            let buffers: Vec<Arc<gpack_gpu::ops::Buffer>> =
                res.buffers.iter().cloned().map(Arc::new).collect();
            let mut bound: Vec<Option<Arc<GpuMatrix>>> = vec![None; tensors.len()];
            for (i, (_, v)) in tensors.iter().enumerate() {
                let pieces = res.placement.pieces_of(i);
                let m = match pieces {
                    [one] => GpuMatrix::in_buffer(g, buffers[one.buffer].clone(), one.offset, v),
                    // Larger than one binding: cut by rows at placement.
                    cut => {
                        let parts: Vec<_> = cut
                            .iter()
                            .map(|p| (buffers[p.buffer].clone(), p.offset, p.rows.clone(), p.head))
                            .collect();
                        GpuMatrix::in_pieces(g, v, &parts)
                    }
                }
                .map_err(gpu_err(format!("tensor {}", name_of(i))))?;
                bound[i] = Some(Arc::new(m));
            }
            for (k, (_, w)) in self.wanted.iter().enumerate() {
                if let Want::InSection(at, _) = w {
                    if at.section == si {
                        out[k] = bound[index[&at.offset]].clone();
                    }
                }
            }
            reports.push(res.report);
        }
        let mut own_bytes = 0u64;
        for (k, (name, w)) in self.wanted.iter().enumerate() {
            let words = match w {
                Want::InSection(..) => continue,
                Want::Own(v) => serialize(v).map_err(|source| Error::Quant {
                    name: name.clone(),
                    source,
                })?,
                Want::Words(words) => words.clone(),
            };
            own_bytes += words.len() as u64 * 4;
            let m = GpuMatrix::upload(g, name, bytemuck::cast_slice(&words))
                .map_err(gpu_err(format!("tensor {name}")))?;
            out[k] = Some(Arc::new(m));
        }
        let mats = out
            .into_iter()
            .map(|m| m.expect("every ticket uploaded"))
            .collect();
        let bytes = own_bytes + reports.iter().map(|r| r.device_bytes).sum::<u64>();
        Ok((Uploaded(mats), reports, bytes))
    }
}

/// Where `v` may be cut by rows if it does not fit one binding: Rows16
/// tensors at 16-row groups, F32/F16/BF16 at any row (one array of rows
/// after the header); `None` for the layouts whose scales follow all the
/// codes (int8/int4), which must fit a binding whole.
fn cut_of(v: &NativeView<'_>) -> Option<Cut> {
    let (rows, cols) = (v.rows() as u64, v.cols() as u64);
    let (h, len) = NativeTensorHeader::new(v.layout(), rows, cols, v.has_f16_scales()).ok()?;
    let (group_rows, group_bytes) = match v.layout() {
        Layout::Rows16(_) => (16, v.rows16_group_bytes() as u64),
        Layout::F32 | Layout::F16 | Layout::BF16 => (1, (len - h.codes_off) / rows.max(1)),
        _ => return None,
    };
    let cut = Cut {
        head: h.codes_off,
        rows,
        group_rows,
        group_bytes,
    };
    // Only where the tensor is exactly its header and its row groups.
    (rows > 0 && cut.head + cut.groups() * group_bytes == v.byte_len() as u64).then_some(cut)
}

/// A layout no GPU kernel reads is refused naming the tensor.
fn check_layout(name: &str, v: &NativeView<'_>) -> Result<()> {
    match gpack_gpu::matvec::supports(v.layout()) {
        true => Ok(()),
        false => Err(Error::Gpu {
            what: format!("tensor {name}"),
            source: gpack_gpu::matvec::source::unsupported(v.layout()),
        }),
    }
}

/// The uploaded matrices, by ticket.
pub(super) struct Uploaded(Vec<Arc<GpuMatrix>>);

impl Uploaded {
    pub fn get(&self, t: Ticket) -> Arc<GpuMatrix> {
        self.0[t.0].clone()
    }

    pub fn proj(&self, t: &ProjTicket) -> GpuProj {
        GpuProj {
            parts: t.parts.iter().map(|&(k, c)| (self.get(k), c)).collect(),
            rows: t.rows,
        }
    }
}
