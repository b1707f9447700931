//! Building a bundle: the options, the streamed write of every unit, and
//! the report.

use super::metadata::metadata_gguf;
use super::record::{encode_into, Dest};
use super::units::{decide, is_matrix, plan_units, rows_cols, Unit};
use super::Error;
use crate::policy::Quant;
use crate::OptionProblem;
use gpack_format::giw::{GiwWriter, MemberSpec, Target};
use gpack_ingest::{Source, TensorInfo};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
    if let Quant::Mix(f) = opts.quant {
        return Err(OptionProblem::QuantNotForGiw { quant: f.name() }.into());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use gpack_ingest::gguf::{TensorHeader, Writer};
    use gpack_ingest::{GgmlType, Metadata, Value};
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
            println!("VMHWM_KB={}", crate::vm_hwm_kb());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("syn.gguf");
        let layer = make_synthetic(&src, 300);
        let model = std::fs::metadata(&src).unwrap().len();
        let bound = layer + (64 << 20);
        assert!(model > 3 * bound, "model {model} vs bound {bound}");
        let kb = crate::child_vm_hwm_kb(
            "giw::build::tests::giw_streaming_peak_rss_is_bounded",
            "GIW_RSS_CHILD",
            &src,
        );
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
