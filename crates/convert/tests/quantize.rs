//! `--quant` with llama-quantize's types against llama-quantize itself, on
//! the fixtures of testdata/quantize (make_fixtures.py; the references were
//! written by the registry-built llama-quantize with make_references.sh,
//! which checks its SHA256SUMS on a rerun): the blocks of every type bit for
//! bit, edge rows included; the per-tensor types of every mix; and the
//! refusals. See: issue 45, item 1.

use super::common::{convert_to, gpack_f32, tensor_index, testdata};
use gpack_convert::mix::{mix_types, Facts, Ftype, MixTensor};
use gpack_convert::{convert, ConvertOptions, Error, Quant, QuantizeProblem};
use gpack_ingest::{GgmlType, Source};
use gpack_quant::interleave::{gather_block, R};
use gpack_quant::quantize::quantize_canonical;
use std::path::PathBuf;

fn dir() -> PathBuf {
    testdata().join("quantize")
}

/// The 13 types and their reference files (`--pure`: every quantizable
/// tensor in that type, but llama-quantize's fallbacks for row lengths).
const TYPES: [&str; 13] = [
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
    "IQ4_XS", "MXFP4",
];

/// Row `r`'s bytes of a Rows16 tensor (codes after the 64-byte header).
fn rows16_row(t: GgmlType, native: &[u8], r: usize, cols: u64) -> Vec<u8> {
    let (bs, ts) = t.block();
    let (nb, ts) = ((cols / bs) as usize, ts as usize);
    let codes = &native[64..];
    let (g, i) = (r / R, r % R);
    let mut row = vec![0u8; nb * ts];
    for b in 0..nb {
        let gb = &codes[(g * nb + b) * R * ts..][..R * ts];
        gather_block(t, gb, i, &mut row[b * ts..(b + 1) * ts]);
    }
    row
}

#[test]
fn blocks_equal_llama_quantize_for_every_type() {
    let src = Source::open(&dir().join("edge-F32.gguf")).unwrap();
    let mut checked = Vec::new();
    for name in TYPES {
        let reference = Source::open(&dir().join(format!("edge-{name}.gguf")))
            .unwrap_or_else(|e| panic!("reference edge-{name}.gguf (make_references.sh): {e}"));
        for rt in &reference.tensors {
            let st = src.tensors.iter().find(|t| t.name == rt.name).unwrap();
            let want = reference.tensor_bytes(rt).unwrap();
            if rt.ggml_type == st.ggml_type {
                // Not quantized (1-D): llama-quantize copies it.
                assert_eq!(
                    &*src.tensor_bytes(st).unwrap(),
                    &*want,
                    "{name} {}",
                    rt.name
                );
                continue;
            }
            let cols = st.dims[0];
            let rows = st.dims[1..].iter().product::<u64>();
            let mut out = Vec::new();
            quantize_canonical(
                st.ggml_type,
                &src.tensor_bytes(st).unwrap(),
                rows,
                cols,
                rt.ggml_type,
                None,
                &mut out,
            )
            .unwrap();
            let row_bytes = rt.ggml_type.bytes_for(cols).unwrap() as usize;
            for r in 0..rows as usize {
                let ours = match rt.ggml_type {
                    GgmlType::F16 => out[64 + r * row_bytes..][..row_bytes].to_vec(),
                    t => rows16_row(t, &out, r, cols),
                };
                assert!(
                    ours == want[r * row_bytes..(r + 1) * row_bytes],
                    "{name}: {} ({}) row {r} differs from llama-quantize's",
                    rt.name,
                    rt.ggml_type
                );
            }
            checked.push(format!("{name}:{}:{}", rt.name, rt.ggml_type));
        }
    }
    // Every type, and llama-quantize's fallbacks (288 columns, 40 columns).
    for must in [
        "Q4_K:blk.0.attn_q.weight:Q4_K",
        "Q4_K:blk.0.ffn_down.weight:Q5_0",
        "Q5_K:blk.0.ffn_down.weight:Q5_1",
        "Q6_K:blk.0.ffn_down.weight:Q8_0",
        "IQ4_XS:blk.0.ffn_down.weight:IQ4_NL",
        "Q2_K:blk.0.ffn_down.weight:Q4_0",
        "Q8_0:blk.0.ffn_up.weight:F16",
        "MXFP4:blk.0.attn_q.weight:MXFP4",
    ] {
        assert!(
            checked.iter().any(|c| c == must),
            "{must} not checked: {checked:?}"
        );
    }
}

/// `mix-F16.gguf` / `moe-F16.gguf` tensors and llama-quantize's type for
/// each under `ftype` (types-*.txt).
fn reference_types(model: &str, ftype: Ftype) -> Vec<(String, String)> {
    let p = dir().join(format!("types-{model}-{}.txt", ftype.name()));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.to_string(), t.to_string())
        })
        .collect()
}

#[test]
fn mix_types_equal_llama_quantize() {
    for model in ["mix", "moe"] {
        let src = Source::open(&dir().join(format!("{model}-F16.gguf"))).unwrap();
        let facts = Facts::of(&src);
        let tensors: Vec<MixTensor<'_>> = src
            .tensors
            .iter()
            .map(|t| MixTensor {
                name: &t.name,
                dims: &t.dims,
                ty: t.ggml_type,
            })
            .collect();
        for ftype in Ftype::ALL {
            let ours = mix_types(ftype, &facts, &tensors).unwrap();
            let want = reference_types(model, ftype);
            assert_eq!(want.len(), tensors.len(), "{model} {}", ftype.name());
            for (t, ty) in tensors.iter().zip(&ours) {
                let w = &want.iter().find(|(n, _)| n == t.name).unwrap().1;
                assert_eq!(ty.name(), w, "{model} {}: {}", ftype.name(), t.name);
            }
        }
    }
}

/// `gpack convert --quant Q8_0` of the edge fixture: the Q8_0 mix is
/// `--pure` Q8_0 (its output/embedding rule keeps Q8_0; the 40-column
/// tensor falls back to F16), so every tensor of the .gpack dequantizes to
/// exactly the values of llama-quantize's file; and `--quant Q4_K_M` of the
/// 8-layer mix stores each tensor in its llama-quantize type.
#[test]
fn convert_writes_llama_quantize_types_and_values() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("edge.gpack");
    let report = convert_to(
        &dir().join("edge-F32.gguf"),
        &out,
        "q8_0".parse().unwrap(),
        false,
    );
    assert_eq!(report.quant, "Q8_0");
    let g = gpack_format::Gpack::open(&out).unwrap();
    let reference = Source::open(&dir().join("edge-Q8_0.gguf")).unwrap();
    for e in tensor_index(&g) {
        let rt = reference.tensors.iter().find(|t| t.name == e.name).unwrap();
        let mut want = vec![0f32; rt.n_elements() as usize];
        gpack_quant::dequantize_ggml(
            rt.ggml_type,
            &reference.tensor_bytes(rt).unwrap(),
            &mut want,
        )
        .unwrap();
        let ours = gpack_f32(&g, &e);
        let same = ours
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same && ours.len() == want.len(), "{}", e.name);
    }

    let out = tmp.path().join("mix.gpack");
    let report = convert_to(
        &dir().join("mix-F16.gguf"),
        &out,
        "Q4_K_M".parse().unwrap(),
        false,
    );
    let want = reference_types("mix", Ftype::Q4_K_M);
    for t in &report.tensors {
        let w = &want.iter().find(|(n, _)| *n == t.name).unwrap().1;
        let expect = match w.as_str() {
            "F32" | "F16" if t.source_type == w => "exact",
            "F16" => "F16",
            q => q,
        };
        if expect != "exact" {
            assert!(
                t.layout.contains(expect),
                "{}: {} is not {w}",
                t.name,
                t.layout
            );
        }
    }
}

/// An already-quantized source needs --allow-requantize (and no output is
/// left behind without it); an unknown type lists the valid ones.
#[test]
fn requantize_needs_the_flag_and_unknown_types_are_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let src = testdata().join("quant-types/tiny-llama-256-Q8_0.gguf");
    let out = tmp.path().join("r.gpack");
    let mut opts = ConvertOptions {
        source: src,
        output: out.clone(),
        quant: Quant::Mix(Ftype::Q4_K_M),
        ..Default::default()
    };
    let e = convert(&opts, &()).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Quantize {
                problem: QuantizeProblem::Requantize { from: "Q8_0", .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("--allow-requantize"), "{e}");
    assert!(!out.exists());
    opts.allow_requantize = true;
    let r = convert(&opts, &()).unwrap();
    assert!(
        r.tensors.iter().any(|t| t.layout.contains("Q4_K")),
        "{:?}",
        r.tensors
    );

    let e = "Q4_K_X".parse::<Quant>().unwrap_err();
    for name in ["keep", "int4", "Q4_K_M", "IQ4_XS", "MXFP4_MOE"] {
        assert!(e.contains(name), "{e}");
    }
}

/// An explicit type that does not divide a row is refused, not padded.
#[test]
fn a_type_that_does_not_divide_the_row_is_an_error() {
    let x = vec![0u8; 288 * 4 * 2];
    let e = quantize_canonical(
        GgmlType::F32,
        &x,
        2,
        288,
        GgmlType::Q4_K,
        None,
        &mut Vec::new(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("288"), "{e}");
}
