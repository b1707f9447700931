//! Quantizers: RMSE relative to f32 no worse than ggml's Q8_0 / Q4_0 / Q4_1 on
//! the same data (the reference RMSE comes from the gguf package).

use crate::common::{testdata, Aligned, Rng};
use gpack_quant::{encoded_len, quantize, GgmlType, Layout, NativeView};

fn quantize_f32(x: &[f32], rows: u64, cols: u64, target: Layout) -> Aligned {
    let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = Vec::new();
    let n = quantize(GgmlType::F32, &src, rows, cols, target, &mut out).unwrap();
    assert_eq!(n, out.len() as u64);
    assert_eq!(n, encoded_len(target, rows, cols).unwrap());
    Aligned::new(&out)
}

fn rmse(v: &NativeView, x: &[f32]) -> f64 {
    let mut row = vec![0f32; v.cols()];
    let mut e = 0f64;
    for r in 0..v.rows() {
        v.dequantize_row(r, &mut row);
        for (a, b) in row.iter().zip(&x[r * v.cols()..]) {
            e += (f64::from(*a) - f64::from(*b)).powi(2);
        }
    }
    (e / x.len() as f64).sqrt()
}

#[test]
fn rmse_within_ggml_budget() {
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(testdata("quant/quant_ref.json")).unwrap()).unwrap();
    let bin = std::fs::read(testdata("quant/quant_inputs.bin")).unwrap();
    let mut off = 0;
    for name in j["datasets"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        let rows = u32::from_le_bytes(bin[off..off + 4].try_into().unwrap()) as usize;
        let cols = u32::from_le_bytes(bin[off + 4..off + 8].try_into().unwrap()) as usize;
        off += 8;
        let x: Vec<f32> = bin[off..off + 4 * rows * cols]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        off += 4 * rows * cols;
        let refs = &j["rmse"][name];
        for (target, ggml) in [
            (Layout::I8Sym { group: 32 }, "Q8_0"),
            (Layout::I4Sym { group: 32 }, "Q4_0"),
            (Layout::I4Asym { group: 32 }, "Q4_1"),
        ] {
            let buf = quantize_f32(&x, rows as u64, cols as u64, target);
            let v = NativeView::parse(buf.bytes()).unwrap();
            let ours = rmse(&v, &x);
            let theirs = refs[ggml].as_f64().unwrap();
            eprintln!("{name:24} {target:10}: rmse {ours:.6e}  ggml {ggml} {theirs:.6e}");
            assert!(
                ours <= theirs * (1.0 + 1e-9),
                "{name} {target}: rmse {ours} > ggml {ggml} {theirs}"
            );
        }
    }
}

#[test]
fn quantize_from_f16_and_bf16_and_edge_groups() {
    let mut rng = Rng::new(7);
    let (rows, cols) = (3usize, 96usize);
    let mut x: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
    x[..32].iter_mut().for_each(|v| *v = 0.0); // all-zero group
    x[32..64].iter_mut().for_each(|v| *v = -2.5); // constant group
    for (t, bytes) in [
        (
            GgmlType::F16,
            x.iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
        (
            GgmlType::BF16,
            x.iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
    ] {
        for target in [
            Layout::I8Sym { group: 32 },
            Layout::I4Sym { group: 32 },
            Layout::I4Asym { group: 32 },
        ] {
            let mut out = Vec::new();
            quantize(t, &bytes, rows as u64, cols as u64, target, &mut out).unwrap();
            let a = Aligned::new(&out);
            let v = NativeView::parse(a.bytes()).unwrap();
            let mut row = vec![0f32; cols];
            v.dequantize_row(0, &mut row);
            assert!(
                row[..32].iter().all(|&v| v == 0.0),
                "{t} {target}: zero group"
            );
            assert!(
                row[32..64]
                    .iter()
                    .all(|&v| (v + 2.5).abs() <= 2.5 * 2f32.powi(-11)), // f16-exact scales
                "{t} {target}: constant group {:?}",
                &row[32..40]
            );
            let e = rmse(&v, &x);
            assert!(e < 0.15, "{t} {target}: rmse {e}");
        }
    }
}

#[test]
fn quantize_rejects_unsupported() {
    let src = vec![0u8; 4 * 32];
    let mut out = Vec::new();
    // A type gpack cannot decode (IQ2_XXS: 256 elements in 66 bytes).
    assert!(quantize(
        GgmlType::IQ2_XXS,
        &[0u8; 66],
        1,
        256,
        Layout::I8Sym { group: 32 },
        &mut out
    )
    .is_err());
    // A truncated block source.
    assert!(quantize(
        GgmlType::Q8_0,
        &src[..33],
        1,
        32,
        Layout::I8Sym { group: 32 },
        &mut out
    )
    .is_err());
    assert!(quantize(
        GgmlType::F32,
        &src,
        1,
        32,
        Layout::I8Asym { group: 32 },
        &mut out
    )
    .is_err());
    assert!(quantize(
        GgmlType::F32,
        &src,
        1,
        32,
        Layout::I8Sym { group: 16 },
        &mut out
    )
    .is_err());
    assert!(quantize(
        GgmlType::F32,
        &src,
        1,
        48,
        Layout::I8Sym { group: 32 },
        &mut out
    )
    .is_err());
}

/// Non-finite inputs neither panic nor leak non-finite scales into the file.
#[test]
fn quantize_survives_non_finite_input() {
    let mut x = vec![0.5f32; 96];
    x[3] = f32::NAN;
    x[40] = f32::INFINITY;
    x[80] = f32::NEG_INFINITY;
    let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    for target in [
        Layout::I8Sym { group: 32 },
        Layout::I4Sym { group: 32 },
        Layout::I4Asym { group: 32 },
    ] {
        let mut out = Vec::new();
        quantize(GgmlType::F32, &src, 1, 96, target, &mut out).unwrap();
        let a = Aligned::new(&out);
        let v = NativeView::parse(a.bytes()).unwrap();
        assert!(
            v.scales().iter().chain(v.mins()).all(|s| s.is_finite()),
            "{target}: {:?}",
            v.scales()
        );
    }
}

/// Quantized scales and mins are f16-exact, so the f16 copy can be written
/// and the kernels give the same bits with it.
#[test]
fn quantized_scales_are_f16_exact() {
    use gpack_quant::{
        f16_scales_if_exact, matvec_ref, matvec_with, quantize_with_f16_scales, Isa,
    };
    let mut rng = Rng::new(11);
    let (rows, cols) = (37usize, 576usize);
    let x: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.02).collect();
    let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let act: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
    for target in [
        Layout::I8Sym { group: 32 },
        Layout::I4Sym { group: 32 },
        Layout::I4Asym { group: 32 },
    ] {
        let plain = quantize_f32(&x, rows as u64, cols as u64, target);
        let v = NativeView::parse(plain.bytes()).unwrap();
        assert!(
            f16_scales_if_exact(v.scales()).is_some() && f16_scales_if_exact(v.mins()).is_some()
        );
        let mut out = Vec::new();
        let n = quantize_with_f16_scales(
            GgmlType::F32,
            &src,
            rows as u64,
            cols as u64,
            target,
            &mut out,
        )
        .unwrap();
        assert_eq!(n, out.len() as u64);
        let a = Aligned::new(&out);
        let v16 = NativeView::parse(a.bytes()).unwrap();
        assert!(v16.has_f16_scales());
        assert_eq!(v16.codes(), v.codes());
        let mut want = vec![0f32; rows];
        matvec_ref(&v, &act, &mut want);
        for isa in Isa::available() {
            let mut got = vec![0f32; rows];
            matvec_with(isa, &v16, &act, &mut got);
            assert_eq!(got, want, "{target} {isa:?}");
        }
    }
}

/// Re-quantization: quantizing a ggml block tensor (every decodable type)
/// writes the same bytes as quantizing its dequantized f32 values, which is
/// what the converters did before it took block sources (a whole-tensor f32
/// buffer); so the bounded, row-at-a-time path changes no output.
#[test]
fn requantize_from_blocks_equals_quantize_from_dequantized_f32() {
    use crate::common::read_ref;
    for name in [
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
        "IQ4_XS", "MXFP4",
    ] {
        let r = read_ref(name);
        let f32s: Vec<u8> = r.deq.iter().flat_map(|v| v.to_le_bytes()).collect();
        for target in [
            Layout::I8Sym { group: 32 },
            Layout::I4Sym { group: 32 },
            Layout::I4Asym { group: 32 },
        ] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let n = quantize(r.t, &r.blocks, r.rows, r.cols, target, &mut a).unwrap();
            quantize(GgmlType::F32, &f32s, r.rows, r.cols, target, &mut b).unwrap();
            assert_eq!(n, a.len() as u64, "{name} {target}");
            assert!(a == b, "{name} {target}: re-quantized bytes differ");
        }
    }
}

/// ggml's quantizers (`quantize::quantize_row_on`) write the same bytes on
/// every ISA path as on the baseline one (which the unit tests compare with
/// the one-sub-block scalar ports, and the convert crate's tests with
/// llama-quantize): every type, without and with importance weights, on
/// rows of 5 super-blocks (a group of 4 and one alone) of random values
/// over many magnitudes and edge rows (zeros, a constant, an outlier,
/// subnormals, one sign).
#[test]
fn ggml_quantizers_write_the_same_bytes_on_every_isa() {
    use gpack_quant::kernels::Isa;
    use gpack_quant::quantize::{quantize_row_on, TYPES};
    let cols = 5 * 256;
    let mut rng = Rng::new(45);
    let mut rows: Vec<Vec<f32>> = (0..12)
        .map(|_| {
            (0..cols)
                .map(|_| {
                    let e = 100 + (rng.next_u64() % 40) as u32;
                    f32::from_bits(((rng.next_u64() as u32) & 0x807f_ffff) | (e << 23))
                })
                .collect()
        })
        .collect();
    rows[1] = vec![0.0; cols];
    rows[2] = vec![0.25; cols];
    rows[3][700] = 1e6;
    rows[4] = rows[4]
        .iter()
        .map(|v| f32::from_bits(v.to_bits() & 0x807f_ffff))
        .collect();
    rows[5] = rows[5].iter().map(|v| -v.abs()).collect();
    rows[6] = rows[6].iter().map(|v| v.abs()).collect();
    rows[7][..512].fill(0.0);
    let im: Vec<f32> = (0..cols)
        .map(|i| {
            if i % 37 == 0 {
                0.0
            } else {
                (rng.next_u64() % 1000) as f32 * 0.01
            }
        })
        .collect();
    let isas = Isa::available();
    assert!(isas.len() > 1 || !cfg!(target_arch = "x86_64"), "{isas:?}");
    for t in TYPES {
        let n = t.bytes_for(cols as u64).unwrap() as usize;
        for imatrix in [None, Some(&im[..])] {
            for (r, x) in rows.iter().enumerate() {
                let mut want = vec![0u8; n];
                quantize_row_on(Isa::Scalar, t, x, imatrix, &mut want).unwrap();
                for &isa in &isas[1..] {
                    let mut got = vec![0u8; n];
                    quantize_row_on(isa, t, x, imatrix, &mut got).unwrap();
                    assert!(
                        got == want,
                        "{t} on {} (imatrix {}), row {r}: differs from the baseline path",
                        isa.name(),
                        imatrix.is_some()
                    );
                }
            }
        }
    }
}
