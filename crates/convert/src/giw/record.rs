//! One record of a bundle: a unit's rows encoded as the policy decided,
//! with the f16 copy of the scales where the format and the values allow.

use super::Error;
use crate::policy::Decision;
use gpack_format::giw::{GiwWriter, MemberSpec};
use gpack_quant::quantize::RowWeights;
use gpack_quant::{GgmlType, NativeTensorHeader, NativeView};
use std::io::Write;

fn qerr(name: &str) -> impl FnOnce(gpack_quant::Error) -> Error + '_ {
    move |source| Error::Quant {
        tensor: name.to_string(),
        source,
    }
}

/// Where a unit goes: an ordinary record or a fused group.
pub(super) enum Dest<'a> {
    Native(&'a str),
    Group(&'a str, &'a [MemberSpec]),
}

fn begin<'w>(
    w: &'w mut GiwWriter,
    dest: &Dest<'_>,
    len: u64,
) -> Result<gpack_format::giw::PayloadWriter<'w>, Error> {
    Ok(match dest {
        Dest::Native(n) => w.begin_native(n, len)?,
        Dest::Group(n, m) => w.begin_group(n, m, len)?,
    })
}

/// Encodes `rows x cols` of `ty` from `src` into one record of `w`. Without
/// f16 scales the tensor is streamed straight into the file (memory: the
/// source tensor plus small buffers); with them (metal, v14) it is built in
/// memory first, because the header's flag depends on whether every scale is
/// exact in f16. Returns (payload bytes, quantized?, has f16 scales?).
#[allow(clippy::too_many_arguments)]
pub(super) fn encode_into(
    w: &mut GiwWriter,
    dest: &Dest<'_>,
    name: &str,
    ty: GgmlType,
    src: &[u8],
    rows: u64,
    cols: u64,
    d: Decision,
    f16: bool,
) -> Result<(u64, bool, bool), Error> {
    let (layout, quantize) = (d.layout, d.quantized);
    let (_, total) = NativeTensorHeader::new(layout, rows, cols, false).map_err(qerr(name))?;
    if !(f16 && layout.has_scales()) {
        let mut pw = begin(w, dest, total)?;
        crate::encode::encode(ty, src, rows, cols, d, false, RowWeights::NONE, &mut pw)
            .map_err(qerr(name))?;
        pw.finish()?;
        return Ok((total, quantize, false));
    }
    let mut buf = gpack_quant::AlignedBuf::zeroed(total as usize);
    crate::encode::encode(ty, src, rows, cols, d, false, RowWeights::NONE, &mut buf)
        .map_err(qerr(name))?;
    let v = NativeView::parse(buf.as_slice()).map_err(qerr(name))?;
    let exact = gpack_quant::f16_scales_if_exact(v.scales()).is_some()
        && gpack_quant::f16_scales_if_exact(v.mins()).is_some();
    if !exact {
        let mut pw = begin(w, dest, total)?;
        pw.write_all(buf.as_slice())
            .map_err(|e| qerr(name)(gpack_quant::Error::Io(e)))?;
        pw.finish()?;
        return Ok((total, quantize, false));
    }
    let (_, t16) = NativeTensorHeader::new(layout, rows, cols, true).map_err(qerr(name))?;
    let mut pw = begin(w, dest, t16)?;
    gpack_quant::write_with_f16_scales(&v, &mut pw).map_err(qerr(name))?;
    pw.finish()?;
    Ok((t16, quantize, true))
}
