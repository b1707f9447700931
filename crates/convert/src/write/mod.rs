//! Executing a plan: the sections are written in kind order, each tensor read,
//! transcoded into its section and dropped.
//!
//! [`convert`] reads as the file does: after the inputs are opened and
//! checked ([`input`]), one step per section, or per index and its payload,
//! in the order of docs/FORMAT.md's section kinds, each step in its own
//! module and appending to the one [`output::Output`], which records every
//! section for the [`Report`].

mod arena;
mod experts;
mod importance;
mod index;
mod input;
mod manifest;
mod metadata;
mod mtp;
mod options;
mod output;
mod report;
mod single;
mod tensor;
mod tokenizer;

pub use options::{ConvertOptions, Progress, DRAFT_PREFIX};
pub use report::{Report, SectionReport, TensorReport};

use crate::Error;

/// Converts a model into a .gpack file.
pub fn convert(opts: &ConvertOptions, progress: &dyn Progress) -> Result<Report, Error> {
    let start = std::time::Instant::now();
    let mut input = input::Input::open(opts)?;
    let mut out = output::Output::create(opts, progress)?;
    metadata::write(&mut out, &input)?; // 0 MetadataKv
    let index_pos = index::write(&mut out, &input, opts.external_experts)?; // 1 TensorIndex
    arena::write_dense(&mut out, &input, &index_pos)?; // 2 DenseIndex, 3 DensePack
    arena::write_native(&mut out, &input, &index_pos)?; // 4 NativeDenseIndex, 5 NativeDense
    single::write(&mut out, &input)?; // 6 Embed, 7 Head, 8 Ple
    experts::write(&mut out, &input, opts)?; // 9 ExpertLayout, 10 ExpertBlobs
    tokenizer::write_bin(&mut out, &input.source)?; // 11 TokenizerBin
    tokenizer::write_assets(&mut out, &input.source)?; // 12 TokenizerAssets
    let mtp = mtp::write(&mut out, &mut input, opts)?; // 13 Mtp
    manifest::finish(out, &input, opts, mtp, start) // 14 Manifest, footer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Quant;
    use gpack_ingest::gguf::{TensorHeader, Writer};
    use gpack_ingest::{GgmlType, Metadata, Value};
    use std::io::BufWriter;
    use std::path::{Path, PathBuf};

    /// Columns and rows of each synthetic matrix: 64 Mi weights, 256 MiB as f32.
    const COLS: u64 = 4096;
    const ROWS: u64 = 16384;

    /// A GGUF with one Q8_0 and one Q4_K matrix of `COLS × ROWS` (random
    /// codes, small finite scales). Returns the larger tensor's bytes.
    fn make_synthetic(path: &Path) -> u64 {
        let tensors = [
            ("blk.0.ffn_up.weight", GgmlType::Q8_0, 2usize),
            ("blk.0.ffn_down.weight", GgmlType::Q4_K, 4),
        ];
        let headers: Vec<TensorHeader> = tensors
            .iter()
            .map(|&(n, ty, _)| TensorHeader {
                name: n.into(),
                ggml_type: ty,
                dims: vec![COLS, ROWS],
            })
            .collect();
        let mut md = Metadata::new();
        md.insert("general.architecture", Value::String("llama".into()));
        let f = BufWriter::new(std::fs::File::create(path).unwrap());
        let mut w = Writer::new(f, &md, &headers).unwrap();
        let mut seed = 1u64;
        let mut largest = 0;
        for (_, ty, scale_bytes) in tensors {
            let mut buf = vec![0u8; ty.bytes_for(COLS * ROWS).unwrap() as usize];
            for c in buf.chunks_mut(8) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                c.copy_from_slice(&seed.to_le_bytes()[..c.len()]);
            }
            // Each block's leading f16 scale(s) (Q8_0: d; Q4_K: d, dmin) = 2^-7.
            for blk in buf.chunks_mut(ty.block().1 as usize) {
                for s in blk[..scale_bytes].chunks_mut(2) {
                    s.copy_from_slice(&0x2000u16.to_le_bytes());
                }
            }
            largest = largest.max(buf.len() as u64);
            w.write_tensor_data(&buf).unwrap();
        }
        w.finish().unwrap();
        largest
    }

    /// See: issue 13, item 4 ("re-quantize in bounded chunks"): `convert
    /// --quant int4|int8` of a GGUF whose matrices are 256 MiB each as f32
    /// (Q8_0 → int4 and Q4_K → int8 are re-quantized; the others are exact)
    /// peaks at the largest source tensor plus 64 MiB, under the f32 size of
    /// one tensor (dequantizing a whole tensor, as convert did, held twice
    /// that: the f32 values and their byte copy). As
    /// `giw_streaming_peak_rss_is_bounded`:
    /// the conversions run in a child process (this test re-executed), so
    /// its VmHWM is theirs alone.
    #[test]
    fn convert_requantize_peak_rss_is_bounded() {
        if let Ok(src) = std::env::var("CONVERT_RSS_CHILD") {
            let src = PathBuf::from(src);
            for quant in [Quant::Int4, Quant::Int8] {
                let opts = ConvertOptions {
                    source: src.clone(),
                    output: src.with_extension(format!("{quant}.gpack")),
                    quant,
                    force: true,
                    ..Default::default()
                };
                let r = convert(&opts, &()).unwrap();
                let requantized: Vec<&str> = r
                    .tensors
                    .iter()
                    .filter(|t| matches!(t.layout, "I4Asym/G32" | "I8Sym/G32"))
                    .map(|t| t.source_type)
                    .collect();
                // One of the two is re-quantized, the other transcoded exactly.
                let want = if quant == Quant::Int4 { "Q8_0" } else { "Q4_K" };
                assert_eq!(requantized, [want], "{quant}");
            }
            println!("VMHWM_KB={}", crate::vm_hwm_kb());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("syn.gguf");
        let largest = make_synthetic(&src);
        let f32_bytes = COLS * ROWS * 4;
        let bound = largest + (64 << 20);
        assert!(bound < f32_bytes, "bound {bound} vs f32 {f32_bytes}");
        let kb = crate::child_vm_hwm_kb(
            "write::tests::convert_requantize_peak_rss_is_bounded",
            "CONVERT_RSS_CHILD",
            &src,
        );
        eprintln!(
            "convert --quant int4/int8 of two {} MiB-as-f32 matrices: peak RSS {} MiB (bound {} MiB = largest source tensor {} MiB + 64 MiB)",
            f32_bytes >> 20,
            kb / 1024,
            bound >> 20,
            largest >> 20
        );
        assert!(
            kb * 1024 <= bound,
            "peak RSS {} KiB > bound {} KiB",
            kb,
            bound / 1024
        );
    }
}
