//! `--quant` with llama-quantize's types against llama-quantize itself, on
//! the fixtures of testdata/quantize (make_fixtures.py; the references were
//! written by the registry-built llama-quantize with make_references.sh,
//! which checks its SHA256SUMS on a rerun): the blocks of every type bit for
//! bit, edge rows included; the per-tensor types of every mix; and the
//! refusals. See: issue 45, item 1.

use super::common::{convert_to, gpack_f32, tensor_index, testdata};
use gpack_convert::mix::{mix_types, Facts, Ftype, MixTensor};
use gpack_convert::{convert, ConvertOptions, Error, ImatrixProblem, Quant, QuantizeProblem};
use gpack_ingest::imatrix::Imatrix;
use gpack_ingest::{GgmlType, Source};
use gpack_quant::interleave::{gather_block, R};
use gpack_quant::quantize::quantize_canonical;
use std::collections::BTreeMap;
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

/// Quantizes every tensor of edge-F32.gguf that `reference` (a
/// llama-quantize output of it) quantized, into the reference's type, with
/// the importance weights of `weights` (by tensor name) where given, and
/// asserts every row's blocks equal the reference's. Returns
/// `label:tensor:type` of each tensor checked.
fn assert_blocks_equal(
    label: &str,
    reference: &str,
    weights: Option<&BTreeMap<&str, Vec<f32>>>,
) -> Vec<String> {
    let src = Source::open(&dir().join("edge-F32.gguf")).unwrap();
    let reference = Source::open(&dir().join(reference))
        .unwrap_or_else(|e| panic!("reference {reference} (make_references.sh): {e}"));
    let mut checked = Vec::new();
    for rt in &reference.tensors {
        let st = src.tensors.iter().find(|t| t.name == rt.name).unwrap();
        let want = reference.tensor_bytes(rt).unwrap();
        if rt.ggml_type == st.ggml_type {
            // Not quantized (1-D): llama-quantize copies it.
            assert_eq!(
                &*src.tensor_bytes(st).unwrap(),
                &*want,
                "{label} {}",
                rt.name
            );
            continue;
        }
        let cols = st.dims[0];
        let rows = st.dims[1..].iter().product::<u64>();
        let im = weights
            .and_then(|w| w.get(rt.name.as_str()))
            .map(Vec::as_slice);
        let mut out = Vec::new();
        quantize_canonical(
            st.ggml_type,
            &src.tensor_bytes(st).unwrap(),
            rows,
            cols,
            rt.ggml_type,
            im,
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
                "{label}: {} ({}) row {r} differs from llama-quantize's",
                rt.name,
                rt.ggml_type
            );
        }
        checked.push(format!("{label}:{}:{}", rt.name, rt.ggml_type));
    }
    checked
}

#[test]
fn blocks_equal_llama_quantize_for_every_type() {
    let mut checked = Vec::new();
    for name in TYPES {
        checked.extend(assert_blocks_equal(
            name,
            &format!("edge-{name}.gguf"),
            None,
        ));
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
    read_types(&p)
}

fn read_types(p: &std::path::Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.to_string(), t.to_string())
        })
        .collect()
}

#[test]
fn mix_types_equal_llama_quantize() {
    for (model, has_imatrix) in [("mix", false), ("moe", false), ("mix", true), ("moe", true)] {
        let src = Source::open(&dir().join(format!("{model}-F16.gguf"))).unwrap();
        let facts = Facts {
            has_imatrix,
            ..Facts::of(&src)
        };
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
            let want = match has_imatrix {
                false => reference_types(model, ftype),
                // llama-quantize --imatrix (types-*-imatrix-*.txt).
                true => {
                    read_types(&dir().join(format!("types-{model}-imatrix-{}.txt", ftype.name())))
                }
            };
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

/// See: issue 45, item 2. With an importance matrix (make_imatrix.py's
/// synthetic one: zero-weight sub-blocks, subnormal and 1e12 weights) every
/// type's blocks equal `llama-quantize --pure --imatrix`'s, from the GGUF
/// imatrix and from the legacy .dat (whose weights are mean × ncall / ncall,
/// not the GGUF's sum / count: a different rounding, also reproduced).
#[test]
fn blocks_with_an_imatrix_equal_llama_quantize_for_every_type() {
    let gguf = Imatrix::read(&dir().join("edge.imatrix")).unwrap();
    let dat = Imatrix::read(&dir().join("edge.imatrix.dat")).unwrap();
    assert!(!gguf.legacy && dat.legacy);
    let (wg, wd) = (gguf.weights(), dat.weights());
    // The two files hold the same statistics, rounded differently.
    assert_eq!(wg.keys().collect::<Vec<_>>(), wd.keys().collect::<Vec<_>>());
    assert!(
        wg.iter().any(|(k, v)| v != &wd[k]),
        "no rounding difference to test"
    );
    let mut checked = Vec::new();
    for name in TYPES {
        checked.extend(assert_blocks_equal(
            name,
            &format!("edge-imatrix-{name}.gguf"),
            Some(&wg),
        ));
    }
    for name in ["Q2_K", "Q4_K", "IQ4_XS"] {
        let label = format!("dat-{name}");
        let file = format!("edge-imatrix-dat-{name}.gguf");
        checked.extend(assert_blocks_equal(&label, &file, Some(&wd)));
    }
    for must in [
        "Q4_K:blk.0.attn_q.weight:Q4_K",
        "Q2_K:blk.0.attn_k.weight:Q2_K",
        "Q3_K:blk.0.attn_q.weight:Q3_K",
        "Q6_K:blk.0.attn_q.weight:Q6_K",
        "IQ4_XS:blk.0.ffn_down.weight:IQ4_NL",
        "Q4_0:blk.0.attn_q.weight:Q4_0",
        "Q5_1:blk.0.attn_q.weight:Q5_1",
        "dat-Q4_K:blk.0.attn_q.weight:Q4_K",
    ] {
        assert!(
            checked.iter().any(|c| c == must),
            "{must} not checked: {checked:?}"
        );
    }
    // The importance matrix matters: without it the blocks differ.
    let with = Source::open(&dir().join("edge-imatrix-Q4_K.gguf")).unwrap();
    let without = Source::open(&dir().join("edge-Q4_K.gguf")).unwrap();
    let q = |s: &Source| {
        s.tensor_bytes(s.tensor("blk.0.attn_k.weight").unwrap())
            .unwrap()
            .to_vec()
    };
    assert_ne!(q(&with), q(&without));
}

/// Every tensor of `out` dequantizes to the bits of the same tensor of
/// llama-quantize's `reference` file (so the blocks are the same).
fn assert_same_values(out: &std::path::Path, reference: &str) {
    let g = gpack_format::Gpack::open(out).unwrap();
    let reference = Source::open(&dir().join(reference)).unwrap();
    let index = tensor_index(&g);
    assert_eq!(index.len(), reference.tensors.len());
    for e in index {
        let rt = reference.tensor(&e.name).unwrap();
        let mut want = vec![0f32; rt.n_elements() as usize];
        gpack_quant::dequantize_ggml(
            rt.ggml_type,
            &reference.tensor_bytes(rt).unwrap(),
            &mut want,
        )
        .unwrap();
        let ours = gpack_f32(&g, &e);
        assert_eq!(
            super::common::first_difference(&ours, &want),
            None,
            "{}: {} differs from llama-quantize's",
            out.display(),
            e.name
        );
    }
}

/// `gpack convert --quant FTYPE --imatrix` of the 8-layer mix and the
/// 4-expert MoE equals `llama-quantize --imatrix` tensor for tensor: the
/// mix's imatrix-dependent choices (Q4_0's first ffn_down → Q4_1, IQ4_XS's
/// no longer Q5_K), fused q‖k‖v and gate‖up each member with its own
/// weights, and each expert of a stacked tensor with its own slice (expert
/// 1 saw no rows: weights of 1).
#[test]
fn convert_with_an_imatrix_equals_llama_quantize() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, ftype) in [
        ("mix", "Q4_0"),
        ("mix", "IQ4_XS"),
        ("mix", "Q4_K_M"),
        ("moe", "Q4_K_M"),
        ("moe", "Q5_0"),
    ] {
        let out = tmp.path().join(format!("{model}-{ftype}.gpack"));
        let opts = ConvertOptions {
            source: dir().join(format!("{model}-F16.gguf")),
            output: out.clone(),
            quant: ftype.parse().unwrap(),
            imatrix: Some(dir().join(format!("{model}.imatrix"))),
            ..Default::default()
        };
        convert(&opts, &()).unwrap_or_else(|e| panic!("{model} {ftype}: {e}"));
        assert_same_values(&out, &format!("{model}-imatrix-{ftype}.gguf"));
    }
}

/// An importance matrix of another model (names it does not have, or
/// lengths that are not its columns), one with a NaN, or one given with a
/// quant that takes none: a clear error, and no output.
#[test]
fn a_mismatched_imatrix_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.gpack");
    let run = |src: &str, quant: &str, imatrix: PathBuf| {
        let opts = ConvertOptions {
            source: dir().join(src),
            output: out.clone(),
            quant: quant.parse().unwrap(),
            imatrix: Some(imatrix),
            ..Default::default()
        };
        let e = convert(&opts, &()).unwrap_err();
        assert!(!out.exists(), "{e}");
        assert!(
            std::fs::read_dir(tmp.path()).unwrap().count() == 0 || {
                // Only the files this test wrote.
                std::fs::read_dir(tmp.path()).unwrap().all(|f| {
                    f.unwrap()
                        .file_name()
                        .to_string_lossy()
                        .ends_with(".imatrix")
                })
            },
            "a temporary file was left: {e}"
        );
        (e.to_string(), e)
    };
    // The MoE's matrix names expert tensors the dense mix does not have.
    let (msg, e) = run("mix-F16.gguf", "Q4_K_M", dir().join("moe.imatrix"));
    assert!(
        matches!(
            e,
            Error::ImatrixMismatch {
                problem: ImatrixProblem::UnknownNames { .. },
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("another model") && msg.contains("moe.imatrix"),
        "{msg}"
    );
    // The edge model's attn_k has 512 columns, the mix's 256.
    let (msg, e) = run("mix-F16.gguf", "Q4_K_M", dir().join("edge.imatrix"));
    assert!(
        matches!(
            &e,
            Error::ImatrixMismatch {
                problem: ImatrixProblem::Length {
                    found: 512,
                    expected: 256,
                    ..
                },
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("blk.0.attn_k.weight"), "{msg}");
    // A NaN.
    let mut m = Imatrix::read(&dir().join("mix.imatrix")).unwrap();
    m.entries.get_mut("blk.3.attn_v.weight").unwrap().sums[7] = f32::NAN;
    let nan = tmp.path().join("nan.imatrix");
    m.write(&nan, false, false).unwrap();
    let (msg, _) = run("mix-F16.gguf", "Q4_K_M", nan);
    assert!(
        msg.contains("blk.3.attn_v.weight") && msg.contains("NaN"),
        "{msg}"
    );
    // gpack's own layouts take no importance matrix.
    let (msg, _) = run("mix-F16.gguf", "int4", dir().join("mix.imatrix"));
    assert!(
        msg.contains("--imatrix needs") && msg.contains("int4"),
        "{msg}"
    );
    // Not an importance matrix at all.
    let (msg, _) = run("mix-F16.gguf", "Q4_K_M", dir().join("mix-F16.gguf"));
    assert!(msg.contains("imatrix.datasets"), "{msg}");
}
