//! Transcoders: bit-exact against the `gguf` Python package's dequantizer
//! (testdata/quant/make_reference.py), on random blocks and on real tensors.

use crate::common::{read_ref, repo_root, testdata, Aligned};
use gpack_quant::{
    dequantize_ggml, encoded_len, native_layout_for, transcode, GgmlType, Layout, NativeView,
};
use sha2::{Digest, Sha256};
use std::io::{Read, Seek, SeekFrom};

const TYPES: [&str; 16] = [
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
    "IQ4_XS", "MXFP4", "F16", "BF16", "F32",
];

fn transcode_to_vec(t: GgmlType, src: &[u8], rows: u64, cols: u64) -> Aligned {
    let mut out = Vec::new();
    let n = transcode(t, src, rows, cols, &mut out).unwrap();
    assert_eq!(n, out.len() as u64);
    assert_eq!(n, encoded_len(native_layout_for(t), rows, cols).unwrap());
    Aligned::new(&out)
}

fn dequant_all(v: &NativeView) -> Vec<f32> {
    let mut all = vec![0f32; v.rows() * v.cols()];
    for (r, row) in all.chunks_exact_mut(v.cols()).enumerate() {
        v.dequantize_row(r, row);
    }
    all
}

fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{what}: element {i}: got {g:e} want {w:e}"
        );
    }
}

#[test]
fn native_layouts_follow_the_design_table() {
    use GgmlType as T;
    let g32 = |l: fn(u32) -> Layout| l(32);
    assert_eq!(
        native_layout_for(T::Q8_0),
        g32(|group| Layout::I8Sym { group })
    );
    assert_eq!(native_layout_for(T::Q5_0), Layout::I8Sym { group: 32 });
    assert_eq!(native_layout_for(T::Q5_1), Layout::I8Asym { group: 32 });
    assert_eq!(native_layout_for(T::Q5_K), Layout::I8Asym { group: 32 });
    assert_eq!(native_layout_for(T::Q6_K), Layout::I8Sym { group: 16 });
    assert_eq!(native_layout_for(T::Q3_K), Layout::I8Sym { group: 16 });
    assert_eq!(native_layout_for(T::Q2_K), Layout::I8Asym { group: 16 });
    assert_eq!(native_layout_for(T::Q4_0), Layout::I4Sym { group: 32 });
    assert_eq!(native_layout_for(T::Q4_1), Layout::I4Asym { group: 32 });
    assert_eq!(native_layout_for(T::Q4_K), Layout::I4Asym { group: 32 });
    assert_eq!(native_layout_for(T::F16), Layout::F16);
    assert_eq!(native_layout_for(T::IQ4_XS), Layout::Ggml(T::IQ4_XS));
    for t in GgmlType::ALL {
        let l = native_layout_for(t);
        assert_eq!(Layout::from_code(l.code(), l.group()).unwrap(), l);
    }
}

#[test]
fn every_type_is_bit_exact_against_gguf_py() {
    for name in TYPES {
        let r = read_ref(name);
        // The reference-side decoder.
        let mut deq = vec![0f32; r.deq.len()];
        dequantize_ggml(r.t, &r.blocks, &mut deq).unwrap();
        assert_bits_eq(&format!("dequantize_ggml {name}"), &deq, &r.deq);
        // Transcode → parse → dequantize.
        let buf = transcode_to_vec(r.t, &r.blocks, r.rows, r.cols);
        let v = NativeView::parse(buf.bytes()).unwrap();
        assert_eq!(v.layout(), native_layout_for(r.t));
        assert_eq!((v.rows() as u64, v.cols() as u64), (r.rows, r.cols));
        assert_bits_eq(&format!("native {name}"), &dequant_all(&v), &r.deq);
    }
}

/// Every type `can_dequantize` refuses is an error from `dequantize_ggml`
/// (never a panic), naming the type; every type it accepts decodes a block.
#[test]
fn undecodable_types_are_refused_by_name() {
    use gpack_quant::ggml::can_dequantize;
    let mut refused = Vec::new();
    for t in GgmlType::ALL {
        let (bs, ts) = t.block();
        let src = vec![0u8; ts as usize];
        let mut out = vec![0f32; bs as usize];
        let r = dequantize_ggml(t, &src, &mut out);
        if can_dequantize(t) {
            r.unwrap_or_else(|e| panic!("{t}: {e}"));
        } else {
            let e = r.unwrap_err().to_string();
            assert!(e.contains(t.name()), "{t}: {e}");
            refused.push(t);
        }
    }
    use GgmlType as T;
    for t in [
        T::IQ1_S,
        T::IQ1_M,
        T::IQ2_XXS,
        T::IQ2_XS,
        T::IQ2_S,
        T::IQ3_XXS,
        T::IQ3_S,
        T::TQ1_0,
        T::TQ2_0,
    ] {
        assert!(refused.contains(&t), "{t} should be refused");
    }
}

#[test]
fn raw_ggml_layout_keeps_blocks() {
    // IQ4_NL has no native layout: its blocks are kept byte for byte.
    let t = GgmlType::IQ4_NL;
    let src: Vec<u8> = (0..2 * 2 * 18).map(|i| i as u8).collect();
    let buf = transcode_to_vec(t, &src, 2, 64);
    let v = NativeView::parse(buf.bytes()).unwrap();
    assert_eq!(v.layout(), Layout::Ggml(t));
    assert_eq!(v.codes(), &src[..]);
    assert_eq!(v.row_codes(1), &src[36..]);
}

#[test]
fn transcode_rejects_bad_shapes() {
    let src = vec![0u8; 18];
    assert!(transcode(GgmlType::Q4_0, &src, 1, 33, &mut Vec::new()).is_err());
    assert!(transcode(GgmlType::Q4_0, &src, 2, 32, &mut Vec::new()).is_err());
    assert!(transcode(GgmlType::Q4_0, &src, 0, 32, &mut Vec::new()).is_err());
    assert!(transcode(GgmlType::Q4_0, &src, u64::MAX, 32, &mut Vec::new()).is_err());
}

#[derive(Debug)]
struct RealTensor {
    file: String,
    name: String,
    t: GgmlType,
    rows: u64,
    cols: u64,
    offset: u64,
    n_bytes: u64,
    sha: String,
    first_rows_offset: Option<u64>,
}

fn real_tensors() -> Vec<RealTensor> {
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata("quant/real_tensors.json")).unwrap())
            .unwrap();
    j.as_array()
        .unwrap()
        .iter()
        .map(|e| RealTensor {
            file: e["file"].as_str().unwrap().to_string(),
            name: e["name"].as_str().unwrap().to_string(),
            t: GgmlType::from_name(e["type"].as_str().unwrap()).unwrap(),
            rows: e["rows"].as_u64().unwrap(),
            cols: e["cols"].as_u64().unwrap(),
            offset: e["offset"].as_u64().unwrap(),
            n_bytes: e["n_bytes"].as_u64().unwrap(),
            sha: e["sha256_f32"].as_str().unwrap().to_string(),
            first_rows_offset: e.get("first_rows_offset").and_then(|v| v.as_u64()),
        })
        .collect()
}

/// Checks one tensor of `real_tensors.json`: its file must be there (the
/// committed tiny fixtures, or the real SmolLM2 the reference was made from,
/// fetched by `scripts/fetch-models.sh` when absent).
fn check_real(t: &RealTensor, rows_bin: &[u8]) {
    let path = if t.file.starts_with('/') {
        assert!(
            t.file.ends_with("/SmolLM2-135M-Instruct.Q4_1.gguf"),
            "{}: only SmolLM2 is referenced outside the repository",
            t.file
        );
        gpack_testkit::smollm2()
    } else {
        repo_root().join(&t.file)
    };
    let mut f = std::fs::File::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (the reference tensors' file)", path.display()));
    let mut src = vec![0u8; t.n_bytes as usize];
    f.seek(SeekFrom::Start(t.offset)).unwrap();
    f.read_exact(&mut src).unwrap();
    let buf = transcode_to_vec(t.t, &src, t.rows, t.cols);
    let v = NativeView::parse(buf.bytes()).unwrap();
    let all = dequant_all(&v);
    let mut h = Sha256::new();
    for x in &all {
        h.update(x.to_le_bytes());
    }
    assert_eq!(
        hex::encode(h.finalize()),
        t.sha,
        "{} {} ({}): sha256 of dequantized f32",
        t.file,
        t.name,
        t.t
    );
    if let Some(off) = t.first_rows_offset {
        let n = 2 * t.cols as usize;
        let want: Vec<f32> = rows_bin[off as usize..off as usize + 4 * n]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_bits_eq(&t.name, &all[..n], &want);
    }
}

#[test]
fn real_tiny_fixture_tensors_are_bit_exact() {
    let rows_bin = std::fs::read(testdata("quant/real_rows.bin")).unwrap();
    let all = real_tensors();
    let tiny: Vec<_> = all.iter().filter(|t| !t.file.starts_with('/')).collect();
    assert!(
        tiny.len() > 100,
        "expected the tiny fixtures' tensors in real_tensors.json"
    );
    for t in tiny {
        check_real(t, &rows_bin);
    }
}

#[test]
fn real_smollm2_tensors_are_bit_exact() {
    let rows_bin = std::fs::read(testdata("quant/real_rows.bin")).unwrap();
    let smol: Vec<_> = real_tensors()
        .into_iter()
        .filter(|t| t.file.starts_with('/'))
        .collect();
    assert!(
        !smol.is_empty(),
        "expected SmolLM2's tensors in real_tensors.json"
    );
    for t in &smol {
        check_real(t, &rows_bin);
    }
}

/// Arbitrary block bytes (NaN/Inf scales included) never panic the
/// transcoder, and native dequantization agrees with `dequantize_ggml`
/// (bit for bit, or both NaN).
#[test]
fn arbitrary_blocks_transcode_consistently() {
    let mut rng = crate::common::Rng::new(99);
    for name in TYPES {
        let t = GgmlType::from_name(name).unwrap();
        let (bs, ts) = t.block();
        let (rows, cols) = (3u64, bs * 2);
        for _ in 0..20 {
            let src = rng.bytes((rows * 2 * ts) as usize);
            let mut want = vec![0f32; (rows * cols) as usize];
            dequantize_ggml(t, &src, &mut want).unwrap();
            let buf = transcode_to_vec(t, &src, rows, cols);
            let v = NativeView::parse(buf.bytes()).unwrap();
            let got = dequant_all(&v);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{name} element {i}: {g} vs {w}"
                );
            }
        }
    }
}

/// transcode_with_f16_scales = transcode + write_with_f16_scales, byte for byte.
#[test]
fn transcode_with_f16_scales_matches_the_rewrite() {
    use gpack_quant::{f16_scales_exact_for, transcode_with_f16_scales, write_with_f16_scales};
    for name in TYPES {
        let r = read_ref(name);
        let mut direct = Vec::new();
        let res = transcode_with_f16_scales(r.t, &r.blocks, r.rows, r.cols, &mut direct);
        if !f16_scales_exact_for(r.t) {
            assert!(res.is_err(), "{name}");
            continue;
        }
        assert_eq!(res.unwrap(), direct.len() as u64);
        let plain = transcode_to_vec(r.t, &r.blocks, r.rows, r.cols);
        let v = NativeView::parse(plain.bytes()).unwrap();
        let mut rewritten = Vec::new();
        write_with_f16_scales(&v, &mut rewritten).unwrap();
        assert_eq!(direct, rewritten, "{name}");
        let a = Aligned::new(&direct);
        let v16 = NativeView::parse(a.bytes()).unwrap();
        assert!(v16.has_f16_scales());
        assert_bits_eq(name, &dequant_all(&v16), &r.deq);
    }
}
