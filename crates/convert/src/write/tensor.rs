//! One tensor's trip through a conversion: its bytes read from the source,
//! encoded into a streamed section as its plan says, and its source pages
//! released, so memory stays about one tensor whatever the model size.

use super::importance::Run;
use super::options::Progress;
use crate::plan::{self, PlannedTensor};
use crate::{Error, TensorProblem};
use gpack_format::SectionWriter;
use gpack_ingest::{Source, TensorInfo};
use gpack_quant::quantize::RowWeights;
use std::borrow::Cow;
use std::io::Write;

/// The bytes of `t` in `source` (borrowed from the mapping when they are
/// contiguous in one file).
pub(super) fn bytes<'s>(source: &'s Source, t: &TensorInfo) -> Result<Cow<'s, [u8]>, Error> {
    Ok(source.tensor_bytes(t)?)
}

/// Drops a finished tensor's source pages from the resident set, so the
/// conversion's memory stays about one tensor whatever the model size.
pub(super) fn release(source: &Source, t: &TensorInfo) {
    for r in t.source_ranges() {
        if let Some(f) = source.files.get(r.file) {
            f.release(r.offset, r.size);
        }
    }
}

/// Writes `rows × p.cols` elements of `t`'s type from `bytes` into `s` as
/// `p`'s decision says ([`crate::encode::encode`], bounded memory), with the
/// f16 copy of the scales where [`plan::with_f16_scales`] says so, and the
/// importance weights of `runs` ([`super::importance`]; empty: none),
/// telling `progress` of every byte. Returns the bytes written.
pub(super) fn write_native(
    s: &mut SectionWriter<'_>,
    progress: &dyn Progress,
    t: &TensorInfo,
    bytes: &[u8],
    rows: u64,
    p: &PlannedTensor,
    runs: &[Run<'_>],
) -> Result<u64, Error> {
    let q = |source| Error::Quant {
        tensor: t.name.clone(),
        source,
    };
    let Some(d) = p.decision() else {
        return Err(Error::Tensor {
            tensor: t.name.clone(),
            problem: TensorProblem::NoNativeLayout,
        });
    };
    let f16 = plan::with_f16_scales(t.ggml_type, d.layout);
    let mut w = Counting { s, progress };
    let im = RowWeights::runs(runs);
    crate::encode::encode(t.ggml_type, bytes, rows, p.cols, d, f16, im, &mut w).map_err(q)
}

/// A section writer that tells the progress callbacks of every byte.
struct Counting<'a, 'w> {
    s: &'a mut SectionWriter<'w>,
    progress: &'a dyn Progress,
}

impl Write for Counting<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.s.write_all(buf)?;
        self.progress.advance(buf.len() as u64);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
