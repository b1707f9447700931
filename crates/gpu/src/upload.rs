//! A weight section streamed from the file's mapping to device buffers, its
//! SHA-256 checked on the way.
//!
//! The section is read once, front to back, in chunks ([`Options::chunk`]):
//! each chunk is hashed and the parts of it that the [`Placement`] puts on
//! the device are handed to `queue.write_buffer`, then the chunk is
//! submitted. No second pass over the file, no dequantization, no
//! repacking: the buffers hold the file's bytes. At the end the digest is
//! compared with the one the file's section table records; on a mismatch
//! the buffers are destroyed and the error names the section and both
//! digests.
//!
//! `write_buffer` copies into wgpu's staging memory, which is freed only when
//! the submission that carries it has run; so at most
//! [`Options::in_flight`] chunks are left unfinished, and staging memory
//! stays at a few chunks whatever the section's size.
//!
//! Perf notes: `write_buffer` costs one memcpy from the mapping into staging
//! (and the driver's DMA, or on lavapipe a second memcpy, into the buffer).
//! A mapped staging ring (`MAP_WRITE | COPY_SRC` buffers + `copy_buffer_to_buffer`)
//! would do the same copies with more code; a `mapped_at_creation` buffer
//! would skip staging only on unified-memory adapters. Not measured yet on a
//! GPU: `bench/gpu.sh` reports upload bytes/s.

use crate::placement::{Piece, Placement, Tensor};
use crate::{Error, Gpu};
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::time::Instant;

/// A section's bytes as the file holds them.
#[derive(Clone, Copy, Debug)]
pub struct Section<'a> {
    /// The section's name in the file ("native_dense", "embed", …), for
    /// errors, reports and buffer labels.
    pub name: &'a str,
    /// The payload, borrowed from the mapping.
    pub bytes: &'a [u8],
    /// The SHA-256 the section table records.
    pub sha256: [u8; 32],
}

/// How a section is streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Bytes hashed and submitted per step (rounded up to a multiple of 4).
    pub chunk: usize,
    /// Submitted chunks that may still be running before the next waits.
    pub in_flight: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            chunk: 16 << 20,
            in_flight: 2,
        }
    }
}

/// What an upload moved and took.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The section's name.
    pub section: String,
    /// Bytes of the section read and hashed (all of it).
    pub bytes: u64,
    /// Bytes written to the device (the copies: tensors and the padding
    /// between them).
    pub uploaded: u64,
    /// Wall time from the first byte to the device having all of them.
    pub seconds: f64,
    /// Device memory the buffers take (sum of their sizes).
    pub device_bytes: u64,
    /// Device buffers.
    pub buffers: usize,
}

impl Report {
    /// Section bytes per second (read, hashed and on the device).
    pub fn bytes_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds
        } else {
            0.0
        }
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {:.1} MiB in {:.3} s ({:.1} MB/s, SHA-256 checked), {} buffer{}, {:.1} MiB of device memory",
            self.section,
            mib(self.bytes),
            self.seconds,
            self.bytes_per_second() / 1e6,
            self.buffers,
            if self.buffers == 1 { "" } else { "s" },
            mib(self.device_bytes),
        )
    }
}

/// A section on the device: its buffers and where each tensor is in them.
#[derive(Debug)]
pub struct Resident {
    /// The section's name.
    pub name: String,
    /// The device buffers (`placement.buffers[i]` bytes each).
    pub buffers: Vec<wgpu::Buffer>,
    /// Where every tensor (or row piece) is.
    pub placement: Placement,
    /// What the upload moved and took.
    pub report: Report,
}

impl Resident {
    /// The storage binding of `piece` (its bytes, rounded up to a whole word).
    pub fn binding(&self, piece: &Piece) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffers[piece.buffer],
            offset: piece.offset,
            size: wgpu::BufferSize::new(piece.len.next_multiple_of(4)),
        })
    }
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `data` at `offset` (a multiple of 4), the last partial word padded
/// with zeros.
fn write_words(queue: &wgpu::Queue, buf: &wgpu::Buffer, offset: u64, data: &[u8]) {
    let whole = data.len() / 4 * 4;
    if whole > 0 {
        queue.write_buffer(buf, offset, &data[..whole]);
    }
    if whole < data.len() {
        let mut tail = [0u8; 4];
        tail[..data.len() - whole].copy_from_slice(&data[whole..]);
        queue.write_buffer(buf, offset + whole as u64, &tail);
    }
}

impl Gpu {
    /// The placement of `tensors` of a section of `section_len` bytes in
    /// buffers this device can bind whole ([`Placement::new`] with the
    /// adapter's binding limit and offset alignment).
    pub fn place(&self, tensors: &[Tensor], section_len: u64) -> Result<Placement, Error> {
        let c = self.caps();
        Placement::new(
            tensors,
            section_len,
            c.max_binding.min(c.max_buffer),
            c.offset_align.max(4),
        )
    }

    /// Streams `section` into device buffers as `placement` says, hashing
    /// it on the way ([`Options::default`]); `progress(done, total)` is
    /// called with section bytes after each chunk.
    pub fn upload_section(
        &self,
        section: Section<'_>,
        placement: Placement,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Resident, Error> {
        self.upload_section_with(section, placement, Options::default(), progress)
    }

    /// [`Gpu::upload_section`] with explicit [`Options`].
    pub fn upload_section_with(
        &self,
        section: Section<'_>,
        placement: Placement,
        options: Options,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Resident, Error> {
        let total = section.bytes.len() as u64;
        if placement.section_len != total {
            return Err(Error::Placement {
                tensor: None,
                why: format!(
                    "the placement is for {} bytes, section {} has {total}",
                    placement.section_len, section.name
                ),
            });
        }
        // The fields are public: a placement not made by Placement::new for
        // this section must not make the copies below slice out of bounds.
        let mut prev_end = 0u64;
        for c in &placement.copies {
            let size = placement.buffers.get(c.buffer).copied().unwrap_or(0);
            let ok = c.src >= prev_end
                && c.src.checked_add(c.len).is_some_and(|e| e <= total)
                && c.offset.is_multiple_of(4)
                && c.offset.checked_add(c.len).is_some_and(|e| e <= size)
                && size.is_multiple_of(4);
            if !ok {
                return Err(Error::Placement {
                    tensor: None,
                    why: format!(
                        "copy {c:?} does not fit section {} ({total} bytes) and its buffers",
                        section.name
                    ),
                });
            }
            prev_end = c.src + c.len;
        }
        let start = Instant::now();
        // Failures of earlier work are not this upload's; report them first.
        self.check()?;
        let mut buffers = Vec::with_capacity(placement.buffers.len());
        for (i, &size) in placement.buffers.iter().enumerate() {
            buffers.push(self.storage(&format!("{}#{i}", section.name), size)?);
        }
        // Out of device memory shows here, before any byte moves.
        self.check()?;
        let destroy = |buffers: &[wgpu::Buffer]| buffers.iter().for_each(wgpu::Buffer::destroy);

        let chunk = options.chunk.max(4).next_multiple_of(4) as u64;
        let bytes = section.bytes;
        let queue = self.queue();
        let mut hasher = Sha256::new();
        let mut pending = VecDeque::new();
        let (mut copy, mut done) = (0usize, 0u64);
        let mut at = 0u64;
        while at < total {
            let end = (at + chunk).min(total);
            hasher.update(&bytes[at as usize..end as usize]);
            // The copies (or their parts) inside this chunk. A copy cut at
            // the chunk's end is cut where its device offset is a whole word.
            while let Some(c) = placement.copies.get(copy) {
                if c.src >= end {
                    break;
                }
                let from = c.src + done;
                let c_end = c.src + c.len;
                let mut to = c_end.min(end);
                if to < c_end {
                    to -= (c.offset + (to - c.src)) % 4;
                }
                if to > from {
                    write_words(
                        queue,
                        &buffers[c.buffer],
                        c.offset + done,
                        &bytes[from as usize..to as usize],
                    );
                    done = to - c.src;
                }
                if to < c_end {
                    break;
                }
                copy += 1;
                done = 0;
            }
            pending.push_back(self.submit([]));
            if pending.len() > options.in_flight {
                let idx = pending.pop_front();
                let r = self.device().poll(wgpu::PollType::Wait {
                    submission_index: idx,
                    timeout: None,
                });
                if let Err(e) = r.map_err(|e| Error::Device(e.to_string())) {
                    destroy(&buffers);
                    return Err(e);
                }
            }
            at = end;
            progress(at, total);
        }
        let digest: [u8; 32] = hasher.finalize().into();
        if digest != section.sha256 {
            destroy(&buffers);
            return Err(Error::Digest {
                section: section.name.to_string(),
                expected: hex(&section.sha256),
                found: hex(&digest),
            });
        }
        if let Err(e) = self.wait() {
            destroy(&buffers);
            return Err(e);
        }
        let report = Report {
            section: section.name.to_string(),
            bytes: total,
            uploaded: placement.copies.iter().map(|c| c.len).sum(),
            seconds: start.elapsed().as_secs_f64(),
            device_bytes: placement.device_bytes(),
            buffers: buffers.len(),
        };
        log::debug!("uploaded {report}");
        Ok(Resident {
            name: section.name.to_string(),
            buffers,
            placement,
            report,
        })
    }
}
