//! `.giw` bundles: the streaming prequantizer behind `gpack prequant` and the
//! `<model>.<quant>.<target>.giw` sidecars of `--stream-weights`.
//!
//! # Streaming
//!
//! The source is read one *unit* at a time (a tensor, or a fused q‖k‖v /
//! gate‖up group for `--target metal`), in source order: its bytes are read
//! from the mapping, transcoded or quantized into one aligned buffer, appended
//! to the bundle ([`gpack_format::giw::GiwWriter`]), and the buffer is freed
//! and the source pages released ([`gpack_ingest::SourceFile::release`]). So
//! peak memory is the largest unit's source bytes plus its encoded bytes, for
//! GGUF and safetensors sources alike, never the model. Quantizing from a
//! ggml block type (re-quantizing) dequantizes one row at a time
//! ([`crate::encode`], shared with `gpack convert`).
//! [`PrequantOptions::resident`] reads every tensor into memory first instead;
//! it exists only to prove the output is byte-identical to the streamed one.
//!
//! # Quant
//!
//! [`crate::policy`] decides every matrix's layout, as for `gpack convert`,
//! with the GIW container's exact layouts (`native_layout_for`: the
//! row-major split layouts of weights formats 12–14, no Rows16). `keep`:
//! every matrix exact. `int8`/`int8int8`: I8Sym G32 (int8int8 records that
//! activations are int8 too, which the kernels always do); `int4`: I4Asym
//! G32; sources already at that precision (Q8_0, Q5_0 for int8; Q4_0,
//! Q4_1, Q4_K for int4), embedding tables, and matrices whose cols are not a
//! multiple of 32 are transcoded exactly instead. 1-D tensors are stored raw
//! (dense records).
//!
//! # Fused groups and f16 scales (metal)
//!
//! Weights format 13+: q‖k‖v and gate‖up of one layer become one group record
//! when [`crate::policy::fuses`] says so for a .giw: every member exists, is
//! 2-D, has the same source type and cols, and ends up int4 G32; otherwise
//! (a K=V layer without v, int8 members, mixed cols or types) the members are
//! ordinary records. Quantizers and transcoders are row-independent, so a
//! group's tensor is the members' rows concatenated and encoded once.
//! Weights format 14+: an f16 copy of the scales is added to every scaled
//! tensor whose scales are all exactly representable in f16.

use crate::policy::{self, Container, Decision, Member, Quant};
use crate::OptionProblem;
use gpack_format::giw::{Giw, GiwWriter, MemberSpec, ReadOptions, Target};
use gpack_ingest::{Array, Metadata, Source, SourceKind, TensorInfo, Value};
use gpack_quant::{GgmlType, NativeTensorHeader, NativeView};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Errors of [`prequant`] and [`ensure_sidecar`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source could not be read.
    #[error(transparent)]
    Ingest(#[from] gpack_ingest::Error),
    /// Writing or reading the bundle failed.
    #[error(transparent)]
    Giw(#[from] gpack_format::giw::Error),
    /// Transcoding or quantizing a tensor failed.
    #[error("tensor {tensor}")]
    Quant {
        /// Tensor name.
        tensor: String,
        /// Why.
        #[source]
        source: gpack_quant::Error,
    },
    /// A tensor is stored in a ggml type gpack cannot decode (refused before
    /// the bundle is created).
    #[error(
        "tensor {tensor} has ggml type {ty}, which gpack cannot decode (it decodes {})",
        gpack_quant::ggml::decodable_type_names()
    )]
    UnsupportedType {
        /// Tensor name.
        tensor: String,
        /// The ggml type name.
        ty: &'static str,
    },
    /// An option does not apply.
    #[error(transparent)]
    Option(#[from] crate::OptionProblem),
}

/// Options of [`prequant`].
#[derive(Clone, Copy, Debug)]
pub struct PrequantOptions {
    /// Quantization (the label baked into the bundle).
    pub quant: Quant,
    /// Target backend.
    pub target: Target,
    /// Weights format to write (default: the target's, 12 for cpu, 14 for
    /// metal). 13 writes metal groups without f16 scales (older-writer mode,
    /// for fixtures).
    pub weights_version: Option<u16>,
    /// Replace an existing output.
    pub force: bool,
    /// Read every tensor into memory before writing (tests only: the output
    /// must be byte-identical to the streamed build).
    pub resident: bool,
}

impl Default for PrequantOptions {
    fn default() -> Self {
        PrequantOptions {
            quant: Quant::Int8Int8,
            target: Target::Cpu,
            weights_version: None,
            force: false,
            resident: false,
        }
    }
}

/// What [`prequant`] wrote.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PrequantReport {
    /// Output path.
    pub path: PathBuf,
    /// Output size.
    pub bytes: u64,
    /// Records written.
    pub records: u32,
    /// Fused group records among them.
    pub fused_groups: usize,
    /// Native tensors stored with an f16 copy of their scales.
    pub f16_scale_tensors: usize,
    /// Matrices quantized (rather than transcoded exactly).
    pub quantized: usize,
    /// Weights format written.
    pub weights_version: u16,
    /// Quant label.
    pub quant: String,
    /// Target name.
    pub target: String,
    /// Largest encoded record payload.
    pub largest_payload: u64,
    /// CRC-32 of the file.
    pub crc32: u32,
    /// Wall time.
    pub seconds: f64,
}

fn is_matrix(t: &TensorInfo) -> bool {
    t.dims.len() >= 2 && t.dims[1..].iter().product::<u64>() > 1
}

fn rows_cols(t: &TensorInfo) -> (u64, u64) {
    (t.dims[1..].iter().product(), t.dims[0])
}

fn qerr(name: &str) -> impl FnOnce(gpack_quant::Error) -> Error + '_ {
    move |source| Error::Quant {
        tensor: name.to_string(),
        source,
    }
}

/// Where a unit goes: an ordinary record or a fused group.
enum Dest<'a> {
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
fn encode_into(
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
        crate::encode::encode(ty, src, rows, cols, d, false, &mut pw).map_err(qerr(name))?;
        pw.finish()?;
        return Ok((total, quantize, false));
    }
    let mut buf = gpack_quant::AlignedBuf::zeroed(total as usize);
    crate::encode::encode(ty, src, rows, cols, d, false, &mut buf).map_err(qerr(name))?;
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

/// The metadata GGUF of the bundle: a single-file GGUF source truncated at
/// its tensor-data boundary (keeps the tokenizer); otherwise a metadata-only
/// GGUF written from ingest's metadata, plus, for an HF source, each
/// tokenizer/config asset as a `gpack.asset.<file name>` u8 array.
fn metadata_gguf(source: &Source) -> Result<Cow<'_, [u8]>, Error> {
    if source.kind == SourceKind::Gguf && source.files.len() == 1 {
        let bytes = source.files[0].bytes();
        let g = gpack_ingest::gguf::parse(bytes)?;
        return Ok(Cow::Borrowed(&bytes[..g.data_offset as usize]));
    }
    let mut md: Metadata = source.metadata.clone();
    for a in &source.assets {
        md.insert(
            format!("gpack.asset.{}", a.name),
            Value::Array(Array::U8(a.bytes.clone())),
        );
    }
    let w = gpack_ingest::gguf::Writer::new(Vec::new(), &md, &[])?;
    Ok(Cow::Owned(w.finish()?))
}

/// One unit of work: a tensor, or a fused group's members in row order.
enum Unit<'s> {
    Single(usize, &'s TensorInfo),
    Group(String, Vec<(usize, &'s TensorInfo)>),
}

/// The policy's decision for matrix `t` in a .giw.
fn decide(t: &TensorInfo, quant: Quant) -> Decision {
    policy::decide(Container::Giw, quant, &t.name, t.ggml_type, t.dims[0])
}

fn plan_units(source: &Source, quant: Quant, fuse: bool) -> Vec<Unit<'_>> {
    let mut grouped: HashMap<usize, usize> = HashMap::new(); // first member -> unit
    let mut member_of: HashSet<usize> = HashSet::new();
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for idx in source.fusable_groups().into_iter().filter(|_| fuse) {
        let members: Vec<Member<'_>> = idx
            .iter()
            .map(|&i| {
                let t = &source.tensors[i];
                Member {
                    ty: t.ggml_type,
                    dims: &t.dims,
                    layout: is_matrix(t).then(|| decide(t, quant).layout),
                }
            })
            .collect();
        if !policy::fuses(Container::Giw, &members) {
            continue;
        }
        // `blk.L.attn_q.weight`, … → `blk.L.attn_q+attn_k+attn_v`.
        let names: Vec<&str> = idx
            .iter()
            .map(|&i| source.tensors[i].name.as_str())
            .collect();
        let Some(layer) = names[0]
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
        else {
            continue;
        };
        let prefix = format!("blk.{layer}.");
        let parts: Option<Vec<&str>> = names
            .iter()
            .map(|n| n.strip_prefix(prefix.as_str())?.strip_suffix(".weight"))
            .collect();
        let Some(parts) = parts else { continue };
        let min = *idx.iter().min().unwrap_or(&idx[0]);
        grouped.insert(min, groups.len());
        member_of.extend(idx.iter().copied());
        groups.push((format!("{prefix}{}", parts.join("+")), idx));
    }
    let mut units = Vec::new();
    for (i, t) in source.tensors.iter().enumerate() {
        if let Some(&g) = grouped.get(&i) {
            let (name, idx) = &groups[g];
            units.push(Unit::Group(
                name.clone(),
                idx.iter().map(|&j| (j, &source.tensors[j])).collect(),
            ));
        } else if !member_of.contains(&i) {
            units.push(Unit::Single(i, t));
        }
    }
    units
}

/// Builds `out` from the model at `src` (GGUF, split GGUF, safetensors file
/// or index, HF directory), streaming one tensor (or fused group) at a time.
pub fn prequant(src: &Path, out: &Path, opts: &PrequantOptions) -> Result<PrequantReport, Error> {
    let source = Source::open(src)?;
    prequant_source(&source, out, opts)
}

/// [`prequant`] from an opened source.
pub fn prequant_source(
    source: &Source,
    out: &Path,
    opts: &PrequantOptions,
) -> Result<PrequantReport, Error> {
    let start = Instant::now();
    let wv = opts
        .weights_version
        .unwrap_or(opts.target.default_weights_version());
    if opts.target == Target::Cpu && wv != 12 {
        return Err(OptionProblem::CpuWeightsVersion { asked: wv }.into());
    }
    let fuse = opts.target == Target::Metal && wv >= gpack_format::giw::FUSED_SINCE;
    let f16 = opts.target == Target::Metal && wv >= gpack_format::giw::F16_SCALES_SINCE;
    for t in &source.tensors {
        if crate::plan::undecodable(t, !is_matrix(t)) {
            return Err(Error::UnsupportedType {
                tensor: t.name.clone(),
                ty: t.ggml_type.name(),
            });
        }
    }
    let meta = metadata_gguf(source)?;
    let mut w = GiwWriter::create(out, opts.force, opts.quant.name(), opts.target, wv, &meta)?;
    drop(meta);
    for f in &source.files {
        f.advise_sequential();
    }
    let resident: Vec<Vec<u8>> = if opts.resident {
        source
            .tensors
            .iter()
            .map(|t| source.tensor_bytes(t).map(Cow::into_owned))
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let bytes_of = |i: usize, t: &TensorInfo| -> Result<Cow<'_, [u8]>, Error> {
        if opts.resident {
            Ok(Cow::Borrowed(&resident[i][..]))
        } else {
            Ok(source.tensor_bytes(t)?)
        }
    };
    let release = |t: &TensorInfo| {
        if !opts.resident {
            if let Some(f) = source.files.get(t.file) {
                f.release(t.offset, t.size);
            }
        }
    };
    let (mut groups, mut f16n, mut quantized, mut largest) = (0usize, 0usize, 0usize, 0u64);
    for unit in plan_units(source, opts.quant, fuse) {
        match unit {
            Unit::Single(i, t) => {
                let bytes = bytes_of(i, t)?;
                if is_matrix(t) {
                    let (rows, cols) = rows_cols(t);
                    let dest = Dest::Native(&t.name);
                    let (len, q, h) = encode_into(
                        &mut w,
                        &dest,
                        &t.name,
                        t.ggml_type,
                        &bytes,
                        rows,
                        cols,
                        decide(t, opts.quant),
                        f16,
                    )?;
                    quantized += usize::from(q);
                    f16n += usize::from(h);
                    largest = largest.max(len);
                } else {
                    w.add_dense(&t.name, t.ggml_type.id(), &t.dims, &bytes)?;
                }
                drop(bytes);
                release(t);
            }
            Unit::Group(name, members) => {
                let ty = members[0].1.ggml_type;
                let cols = members[0].1.dims[0];
                let mut cat = Vec::new();
                let mut specs = Vec::new();
                let mut row = 0u64;
                for &(i, t) in &members {
                    cat.extend_from_slice(&bytes_of(i, t)?);
                    release(t);
                    let rows = rows_cols(t).0;
                    specs.push(MemberSpec {
                        name: t.name.clone(),
                        row_start: row,
                        rows,
                    });
                    row += rows;
                }
                let dest = Dest::Group(&name, &specs);
                // Members share type, cols and layout ([`policy::fuses`]).
                let d = decide(members[0].1, opts.quant);
                let (len, q, h) = encode_into(&mut w, &dest, &name, ty, &cat, row, cols, d, f16)?;
                drop(cat);
                quantized += usize::from(q) * members.len();
                f16n += usize::from(h);
                largest = largest.max(len);
                groups += 1;
            }
        }
    }
    let s = w.finish()?;
    Ok(PrequantReport {
        path: s.path,
        bytes: s.bytes,
        records: s.records,
        fused_groups: groups,
        f16_scale_tensors: f16n,
        quantized,
        weights_version: s.weights_version,
        quant: opts.quant.name().to_string(),
        target: opts.target.name().to_string(),
        largest_payload: largest,
        crc32: s.crc,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// `<model>.<quant>.<target>.giw` next to `gguf` (`model.gguf` →
/// `model.int8int8.cpu.giw`).
pub fn sidecar_for(gguf: &Path, quant: Quant, target: Target) -> PathBuf {
    let stem = gguf
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    gguf.with_file_name(format!("{stem}.{}.{}.giw", quant.name(), target.name()))
}

/// What [`ensure_sidecar`] did.
#[derive(Debug)]
pub enum SidecarStatus {
    /// It was valid and newer than the source: reused as is.
    Reused,
    /// It did not exist: built.
    Built,
    /// It existed but was invalid or stale: rebuilt. The reason is for the
    /// caller to report (a rebuild is never silent).
    Rebuilt {
        /// Why the old one was not used.
        reason: StaleSidecar,
    },
}

/// Why an existing sidecar is not used (the reason of
/// [`SidecarStatus::Rebuilt`], the error of [`check_sidecar`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StaleSidecar {
    /// It does not open as a valid bundle (corrupted, truncated, another
    /// format version).
    #[error("it is not a valid bundle")]
    Invalid(#[source] gpack_format::giw::Error),
    /// It is a bundle of another quant or target.
    #[error(
        "it holds quant {quant} for {}, not {} for {}",
        target.name(),
        want_quant.name(),
        want_target.name()
    )]
    OtherQuant {
        /// The quant it holds (its header's name, which may be one this
        /// build does not know).
        quant: String,
        /// The target it holds.
        target: Target,
        /// The quant asked for.
        want_quant: Quant,
        /// The target asked for.
        want_target: Target,
    },
    /// The source was modified after the sidecar was written.
    #[error("the source is newer than the sidecar")]
    SourceNewer,
    /// The modification time of the sidecar or the source cannot be read.
    #[error("cannot read the modification time of {}", path.display())]
    Mtime {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Checks that `giw` is a valid bundle of `quant` for `target` that is not
/// older than `source`; why it is not otherwise.
pub fn check_sidecar(
    giw: &Path,
    source: &Path,
    quant: Quant,
    target: Target,
) -> Result<(), StaleSidecar> {
    let g = Giw::open_with(giw, &ReadOptions::default()).map_err(StaleSidecar::Invalid)?;
    let h = g.header();
    if h.quant != quant.name() || h.target != target {
        return Err(StaleSidecar::OtherQuant {
            quant: h.quant.to_string(),
            target: h.target,
            want_quant: quant,
            want_target: target,
        });
    }
    let mtime = |p: &Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .map_err(|source| StaleSidecar::Mtime {
                path: p.to_path_buf(),
                source,
            })
    };
    if mtime(giw)? >= mtime(source)? {
        Ok(())
    } else {
        Err(StaleSidecar::SourceNewer)
    }
}

/// Returns the sidecar of `gguf` for `quant`/`target`, building it
/// atomically when missing and rebuilding it (with a reason the caller must
/// report) when it is invalid or older than the source. A valid, current
/// sidecar is never rebuilt.
pub fn ensure_sidecar(
    gguf: &Path,
    quant: Quant,
    target: Target,
) -> Result<(PathBuf, SidecarStatus), Error> {
    let path = sidecar_for(gguf, quant, target);
    let status = if path.exists() {
        match check_sidecar(&path, gguf, quant, target) {
            Ok(()) => return Ok((path, SidecarStatus::Reused)),
            Err(reason) => SidecarStatus::Rebuilt { reason },
        }
    } else {
        SidecarStatus::Built
    };
    let opts = PrequantOptions {
        quant,
        target,
        force: true,
        ..Default::default()
    };
    prequant(gguf, &path, &opts)?;
    Ok((path, status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpack_ingest::gguf::{TensorHeader, Writer};
    use std::io::BufWriter;

    const EMBD: u64 = 1024;
    const FFN: u64 = 2816;
    const VOCAB: u64 = 8192;

    /// A llama-shaped Q8_0 GGUF of about `mb` MB (the logic of
    /// `examples/make_synthetic.rs`, smaller shapes). Returns the bytes of
    /// its largest layer.
    fn make_synthetic(path: &Path, mb: u64) -> u64 {
        let q8 = |n: u64| n / 32 * 34;
        let per_layer = q8(4 * EMBD * EMBD + 3 * EMBD * FFN);
        let layers = (mb * 1_000_000 / per_layer).max(1);
        let mut t: Vec<(String, Vec<u64>)> = vec![("token_embd.weight".into(), vec![EMBD, VOCAB])];
        for l in 0..layers {
            let p = |n: &str| format!("blk.{l}.{n}.weight");
            t.extend([
                (p("attn_norm"), vec![EMBD]),
                (p("attn_q"), vec![EMBD, EMBD]),
                (p("attn_k"), vec![EMBD, EMBD]),
                (p("attn_v"), vec![EMBD, EMBD]),
                (p("attn_output"), vec![EMBD, EMBD]),
                (p("ffn_norm"), vec![EMBD]),
                (p("ffn_gate"), vec![EMBD, FFN]),
                (p("ffn_up"), vec![EMBD, FFN]),
                (p("ffn_down"), vec![FFN, EMBD]),
            ]);
        }
        t.push(("output_norm.weight".into(), vec![EMBD]));
        t.push(("output.weight".into(), vec![EMBD, VOCAB]));
        let ty = |d: &[u64]| {
            if d.len() == 1 {
                GgmlType::F32
            } else {
                GgmlType::Q8_0
            }
        };
        let headers: Vec<TensorHeader> = t
            .iter()
            .map(|(n, d)| TensorHeader {
                name: n.clone(),
                ggml_type: ty(d),
                dims: d.clone(),
            })
            .collect();
        let mut md = Metadata::new();
        md.insert("general.architecture", Value::String("llama".into()));
        let f = BufWriter::new(std::fs::File::create(path).unwrap());
        let mut w = Writer::new(f, &md, &headers).unwrap();
        let mut seed = 1u64;
        for (_, d) in &t {
            let n: u64 = d.iter().product();
            let mut buf = vec![0u8; ty(d).bytes_for(n).unwrap() as usize];
            for c in buf.chunks_mut(8) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                c.copy_from_slice(&seed.to_le_bytes()[..c.len()]);
            }
            if d.len() == 1 {
                for c in buf.chunks_mut(4) {
                    c.copy_from_slice(&1.0f32.to_le_bytes());
                }
            } else {
                for blk in buf.chunks_mut(34) {
                    blk[0..2].copy_from_slice(&0x2000u16.to_le_bytes());
                }
            }
            w.write_tensor_data(&buf).unwrap();
        }
        w.finish().unwrap();
        per_layer
    }

    /// See: issue 5 ("a test-sized run of the streaming transcoder asserts
    /// bounded peak RSS on a model several times larger than the bound").
    /// The transcode runs in a child process (this test re-executed), so its
    /// VmHWM is the transcoder's alone.
    #[test]
    fn giw_streaming_peak_rss_is_bounded() {
        if let Ok(src) = std::env::var("GIW_RSS_CHILD") {
            let src = PathBuf::from(src);
            for (quant, target) in [(Quant::Int4, Target::Metal), (Quant::Int8Int8, Target::Cpu)] {
                let opts = PrequantOptions {
                    quant,
                    target,
                    force: true,
                    ..Default::default()
                };
                prequant(&src, &src.with_extension("giw"), &opts).unwrap();
            }
            println!("GIW_VMHWM_KB={}", crate::vm_hwm_kb());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("syn.gguf");
        let layer = make_synthetic(&src, 300);
        let model = std::fs::metadata(&src).unwrap().len();
        let bound = layer + (64 << 20);
        assert!(model > 3 * bound, "model {model} vs bound {bound}");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sidecar::tests::giw_streaming_peak_rss_is_bounded",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GIW_RSS_CHILD", &src)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kb: u64 = stdout
            .lines()
            .find_map(|l| l.split_once("GIW_VMHWM_KB=").map(|(_, v)| v))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("child did not report VmHWM: {stdout}"));
        eprintln!(
            "streaming prequant of a {} MB model: peak RSS {} MiB (bound {} MiB = largest layer {} MiB + 64 MiB)",
            model / 1_000_000,
            kb / 1024,
            bound >> 20,
            layer >> 20
        );
        assert!(
            kb * 1024 <= bound,
            "peak RSS {} KiB > bound {} KiB",
            kb,
            bound / 1024
        );
    }
}

#[cfg(test)]
mod check_tests {
    use super::*;

    // See: issue 15 (the reason of a rebuild was a String).
    #[test]
    fn check_sidecar_says_why_a_sidecar_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("m.gguf");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-q8_0.gguf"),
            &src,
        )
        .unwrap();
        let (giw, s) = ensure_sidecar(&src, Quant::Int4, Target::Cpu).unwrap();
        assert!(matches!(s, SidecarStatus::Built), "{s:?}");
        check_sidecar(&giw, &src, Quant::Int4, Target::Cpu).unwrap();
        let e = check_sidecar(&giw, &src, Quant::Int8, Target::Cpu).unwrap_err();
        assert!(
            matches!(&e, StaleSidecar::OtherQuant { quant, target: Target::Cpu, want_quant: Quant::Int8, want_target: Target::Cpu } if quant == "int4"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "it holds quant int4 for cpu, not int8 for cpu"
        );
        let missing = dir.path().join("gone.gguf");
        let e = check_sidecar(&giw, &missing, Quant::Int4, Target::Cpu).unwrap_err();
        assert!(
            matches!(&e, StaleSidecar::Mtime { path, .. } if *path == missing),
            "{e:?}"
        );
        let later = std::fs::metadata(&giw).unwrap().modified().unwrap()
            + std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&src)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let e = check_sidecar(&giw, &src, Quant::Int4, Target::Cpu).unwrap_err();
        assert!(matches!(e, StaleSidecar::SourceNewer), "{e:?}");
        let (_, s) = ensure_sidecar(&src, Quant::Int4, Target::Cpu).unwrap();
        assert!(
            matches!(
                s,
                SidecarStatus::Rebuilt {
                    reason: StaleSidecar::SourceNewer
                }
            ),
            "{s:?}"
        );
        std::fs::write(&giw, b"GIW? no").unwrap();
        let e = check_sidecar(&giw, &src, Quant::Int4, Target::Cpu).unwrap_err();
        assert!(matches!(e, StaleSidecar::Invalid(_)), "{e:?}");
    }
}
