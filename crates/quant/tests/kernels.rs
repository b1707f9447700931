//! Kernels: every available ISA against the scalar reference (integer layouts
//! bit for bit; float layouts within 1e-5 of Σ|w·x|), ragged shapes, all-zero
//! groups, matmul against matvec, and the error budget against f32.

#![allow(clippy::needless_range_loop)]

use crate::common::{Aligned, Rng};
use gpack_quant::kernels::{matvec_quantized, QuantizedActivations};
use gpack_quant::layout::NativeTensorHeader;
use gpack_quant::{
    matmul_with, matvec, matvec_ref, matvec_with, transcode, GgmlType, Isa, Layout, NativeView,
    Pool,
};

/// f16 scale fields per block type (ggml-common.h).
pub fn f16_fields(t: GgmlType) -> &'static [usize] {
    use GgmlType as T;
    match t {
        T::Q4_0 | T::Q5_0 | T::Q8_0 | T::IQ4_NL | T::IQ4_XS => &[0],
        T::Q4_1 | T::Q5_1 | T::Q4_K | T::Q5_K => &[0, 2],
        T::Q2_K => &[80, 82],
        T::Q3_K => &[108],
        T::Q6_K => &[208],
        _ => &[],
    }
}

/// Random valid blocks (finite scales); every 7th block all zero.
pub fn random_blocks(rng: &mut Rng, t: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    if matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
        return match t {
            GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
            GgmlType::F16 => x
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect(),
            _ => x
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
        };
    }
    let (bs, ts) = t.block();
    let n = rows * cols / bs as usize;
    let mut b = rng.bytes(n * ts as usize);
    for (i, blk) in b.chunks_exact_mut(ts as usize).enumerate() {
        if i % 7 == 3 {
            blk.fill(0);
            continue;
        }
        for &o in f16_fields(t) {
            let v = half::f16::from_f32(rng.normal() * 0.02);
            blk[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
        if t == GgmlType::MXFP4 {
            // E8M0 exponents around 1 (2^-16 .. 2^3): finite products. Block
            // 5 gets e = 0 and 1 (subnormal scales).
            blk[0] = if i == 5 {
                0
            } else {
                112 + (rng.next_u64() % 20) as u8
            };
        }
    }
    b
}

pub fn native(rng: &mut Rng, t: GgmlType, rows: usize, cols: usize) -> Aligned {
    let src = random_blocks(rng, t, rows, cols);
    let mut out = Vec::new();
    transcode(t, &src, rows as u64, cols as u64, &mut out).unwrap();
    Aligned::new(&out)
}

pub fn random_x(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    if n >= 64 {
        x[32..64].fill(0.0); // an all-zero activation block
    }
    x
}

pub const INT_TYPES: [GgmlType; 10] = [
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q6_K,
    GgmlType::Q3_K,
    GgmlType::Q2_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
];

fn shapes(t: GgmlType) -> Vec<(usize, usize)> {
    let k = t.block_size() == 256;
    let cols: &[usize] = if k {
        &[256, 512, 768, 4096]
    } else {
        &[32, 64, 96, 160, 576, 4096]
    };
    let rows = [1usize, 3, 7, 17, 69];
    let mut v = Vec::new();
    for &c in cols {
        for &r in &rows {
            v.push((r, c));
        }
    }
    v.push((300, 4096)); // big enough to run on several threads
    v
}

fn sum_abs(v: &NativeView, x: &[f32], r: usize) -> f32 {
    let mut row = vec![0f32; v.cols()];
    v.dequantize_row(r, &mut row);
    row.iter().zip(x).map(|(a, b)| (a * b).abs()).sum()
}

#[test]
fn integer_paths_equal_the_reference_bit_for_bit() {
    let mut rng = Rng::new(1);
    for t in INT_TYPES {
        for (rows, cols) in shapes(t) {
            let buf = native(&mut rng, t, rows, cols);
            let v = NativeView::parse(buf.bytes()).unwrap();
            let x = random_x(&mut rng, cols);
            let mut want = vec![0f32; rows];
            matvec_ref(&v, &x, &mut want);
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; rows];
                matvec_with(isa, &v, &x, &mut got);
                for r in 0..rows {
                    assert_eq!(
                        got[r].to_bits(),
                        want[r].to_bits(),
                        "{t} ({}) {rows}x{cols} {isa:?} row {r}: {} vs {}",
                        v.layout(),
                        got[r],
                        want[r]
                    );
                }
            }
        }
    }
}

#[test]
fn float_paths_match_the_reference_within_tolerance() {
    let mut rng = Rng::new(2);
    for t in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for (rows, cols) in [
            (1, 1),
            (3, 7),
            (5, 16),
            (9, 33),
            (17, 576),
            (70, 1000),
            (300, 4096),
        ] {
            let buf = native(&mut rng, t, rows, cols);
            let v = NativeView::parse(buf.bytes()).unwrap();
            let x = random_x(&mut rng, cols);
            let mut want = vec![0f32; rows];
            matvec_ref(&v, &x, &mut want);
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; rows];
                matvec_with(isa, &v, &x, &mut got);
                for r in 0..rows {
                    let tol = 1e-5 * sum_abs(&v, &x, r) + 1e-30;
                    assert!(
                        (got[r] - want[r]).abs() <= tol,
                        "{t} {rows}x{cols} {isa:?} row {r}: {} vs {}",
                        got[r],
                        want[r]
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_equals_matvec_per_vector() {
    let mut rng = Rng::new(3);
    for t in [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q2_K,
        GgmlType::Q4_0,
        GgmlType::F16,
    ] {
        let (rows, cols) = (37, 512);
        let buf = native(&mut rng, t, rows, cols);
        let v = NativeView::parse(buf.bytes()).unwrap();
        for n in [1usize, 2, 3, 5] {
            let x = random_x(&mut rng, n * cols);
            for isa in Isa::available() {
                let mut y = vec![f32::NAN; n * rows];
                matmul_with(isa, &v, &x, n, &mut y);
                for i in 0..n {
                    let mut yi = vec![0f32; rows];
                    matvec_with(isa, &v, &x[i * cols..(i + 1) * cols], &mut yi);
                    let bits = |s: &[f32]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&y[i * rows..(i + 1) * rows]),
                        bits(&yi),
                        "{t} n={n} i={i} {isa:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn quantized_activations_can_be_reused() {
    let mut rng = Rng::new(4);
    let buf = native(&mut rng, GgmlType::Q4_1, 20, 576);
    let v = NativeView::parse(buf.bytes()).unwrap();
    let x = random_x(&mut rng, 576);
    let mut xq = QuantizedActivations::new();
    xq.quantize(&x, 1, 576);
    let (mut a, mut b) = (vec![0f32; 20], vec![0f32; 20]);
    matvec_quantized(Pool::global(), &v, &xq, &mut a);
    matvec(Pool::global(), &v, &x, &mut b);
    assert_eq!(a, b);
}

/// |y - y_f32| is bounded by the activation rounding: each quantized
/// activation is off by at most d_b / 2 = amax_b / 254, so
/// |Σ w (x - x̂)| ≤ Σ_b (amax_b / 254) Σ_{i∈b} |w_i| (plus f32 rounding).
#[test]
fn error_budget_against_f32() {
    let mut rng = Rng::new(5);
    for t in INT_TYPES {
        let cols = if t.block_size() == 256 { 1024 } else { 576 };
        let rows = 33;
        let buf = native(&mut rng, t, rows, cols);
        let v = NativeView::parse(buf.bytes()).unwrap();
        let x = random_x(&mut rng, cols);
        let mut y = vec![0f32; rows];
        matvec(Pool::global(), &v, &x, &mut y);
        let mut w = vec![0f32; cols];
        for r in 0..rows {
            v.dequantize_row(r, &mut w);
            let exact: f64 = w
                .iter()
                .zip(&x)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let mut bound = 0f64;
            let mut mag = 0f64;
            for (wb, xb) in w.chunks(32).zip(x.chunks(32)) {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
                let sw: f64 = wb.iter().map(|v| f64::from(v.abs())).sum();
                bound += f64::from(amax) / 254.0 * sw;
                mag += wb
                    .iter()
                    .zip(xb)
                    .map(|(a, b)| f64::from((a * b).abs()))
                    .sum::<f64>();
            }
            let err = (f64::from(y[r]) - exact).abs();
            assert!(
                err <= bound * 1.001 + 1e-5 * mag + 1e-30,
                "{t} row {r}: err {err:e} > bound {bound:e}"
            );
        }
    }
}

#[test]
fn raw_ggml_fallback_dequantizes() {
    let mut rng = Rng::new(6);
    let (rows, cols) = (5usize, 64usize);
    let src = random_blocks(&mut rng, GgmlType::Q8_0, rows, cols);
    let (h, total) = NativeTensorHeader::new(
        Layout::Ggml(GgmlType::Q8_0),
        rows as u64,
        cols as u64,
        false,
    )
    .unwrap();
    let mut bytes = h.to_bytes().to_vec();
    bytes.extend_from_slice(&src);
    assert_eq!(bytes.len() as u64, total);
    let a = Aligned::new(&bytes);
    let v = NativeView::parse(a.bytes()).unwrap();
    let x = random_x(&mut rng, cols);
    let mut deq = vec![0f32; rows * cols];
    gpack_quant::dequantize_ggml(GgmlType::Q8_0, &src, &mut deq).unwrap();
    for isa in Isa::available() {
        let mut y = vec![0f32; rows];
        matvec_with(isa, &v, &x, &mut y);
        for r in 0..rows {
            let want: f32 = deq[r * cols..(r + 1) * cols]
                .iter()
                .zip(&x)
                .map(|(a, b)| a * b)
                .sum();
            assert_eq!(y[r], want, "{isa:?} row {r}");
        }
    }
}

#[test]
fn isa_list_starts_with_scalar() {
    let a = Isa::available();
    assert_eq!(a[0], Isa::Scalar);
    assert!(a.contains(&Isa::best()));
}

/// A G16 layout whose cols are not a multiple of 32 cannot use the integer
/// kernels (activation blocks are 32 wide): it takes the dequantizing path.
#[test]
fn g16_with_ragged_cols_falls_back() {
    let mut rng = Rng::new(8);
    let (rows, cols) = (3usize, 48usize);
    for layout in [Layout::I8Sym { group: 16 }, Layout::I8Asym { group: 16 }] {
        let (h, total) = NativeTensorHeader::new(layout, rows as u64, cols as u64, false).unwrap();
        let mut b = vec![0u8; total as usize];
        b[..64].copy_from_slice(&h.to_bytes());
        let codes = rng.bytes(rows * cols);
        b[64..64 + rows * cols].copy_from_slice(&codes);
        for (k, off) in [h.scales_off, h.mins_off].into_iter().enumerate() {
            if off == 0 {
                continue;
            }
            for g in 0..rows * cols / 16 {
                let v = (rng.normal() * 0.01 + k as f32 * 0.001).to_le_bytes();
                b[off as usize + 4 * g..off as usize + 4 * g + 4].copy_from_slice(&v);
            }
        }
        let a = Aligned::new(&b);
        let v = NativeView::parse(a.bytes()).unwrap();
        let x = random_x(&mut rng, cols);
        let mut w = vec![0f32; cols];
        for isa in Isa::available() {
            let mut y = vec![0f32; rows];
            matvec_with(isa, &v, &x, &mut y);
            for r in 0..rows {
                v.dequantize_row(r, &mut w);
                let want: f32 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
                assert_eq!(y[r], want, "{layout} {isa:?} row {r}");
            }
        }
    }
}

#[test]
#[should_panic(expected = "dequantize_ggml does not support IQ2_XXS")]
fn raw_ggml_without_decoder_panics_clearly() {
    // Loaders refuse such tensors by name before any kernel sees them; a
    // kernel handed one anyway panics with the type named.
    let t = GgmlType::IQ2_XXS;
    let src = vec![0u8; 66];
    let mut out = Vec::new();
    transcode(t, &src, 1, 256, &mut out).unwrap();
    let a = Aligned::new(&out);
    let v = NativeView::parse(a.bytes()).unwrap();
    let mut y = [0f32; 1];
    matvec(Pool::global(), &v, &[0.0; 256], &mut y);
}

/// IQ4_NL, IQ4_XS and MXFP4 kept as raw ggml blocks run through the
/// dequantizing path: each output is the f32 dot product of the input with the
/// row `dequantize_ggml` gives.
#[test]
fn raw_nonlinear_types_run_through_the_dequantizing_path() {
    let mut rng = Rng::new(13);
    for t in [GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4] {
        let (rows, cols) = (5usize, 512usize);
        let (bs, ts) = t.block();
        let n_blocks = rows * cols / bs as usize;
        let mut src: Vec<u8> = (0..n_blocks * ts as usize)
            .map(|_| rng.next_u64() as u8)
            .collect();
        for blk in src.chunks_exact_mut(ts as usize) {
            if t == GgmlType::MXFP4 {
                blk[0] = 120 + (rng.next_u64() % 10) as u8; // e: 2^-8 .. 2^1
            } else {
                let d = half::f16::from_f32(0.01 * (1.0 + (rng.next_u64() % 100) as f32 / 50.0));
                blk[..2].copy_from_slice(&d.to_le_bytes());
            }
        }
        let mut out = Vec::new();
        transcode(t, &src, rows as u64, cols as u64, &mut out).unwrap();
        let a = Aligned::new(&out);
        let v = NativeView::parse(a.bytes()).unwrap();
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut y = vec![0f32; rows];
        matvec(Pool::global(), &v, &x, &mut y);
        let row_bytes = src.len() / rows;
        for (r, &got) in y.iter().enumerate() {
            let mut w = vec![0f32; cols];
            gpack_quant::dequantize_ggml(t, &src[r * row_bytes..(r + 1) * row_bytes], &mut w)
                .unwrap();
            let want: f64 = w.iter().zip(&x).map(|(a, b)| f64::from(a * b)).sum();
            let scale: f64 = w
                .iter()
                .zip(&x)
                .map(|(a, b)| f64::from((a * b).abs()))
                .sum();
            assert!(
                (f64::from(got) - want).abs() <= 1e-5 * scale.max(1e-30),
                "{t} row {r}: {got} vs {want}"
            );
        }
    }
}

/// Tensors carrying the exact f16 copy of their scales (and mins) give the
/// same bits on every path as the f32-scale reference.
#[test]
fn f16_scale_copies_give_identical_results() {
    use gpack_quant::write_with_f16_scales;
    let mut rng = Rng::new(10);
    for t in [
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
    ] {
        for (rows, cols) in [
            (1usize, 32usize),
            (7, 96),
            (17, 576),
            (69, 160),
            (300, 4096),
        ] {
            let buf = native(&mut rng, t, rows, cols);
            let v = NativeView::parse(buf.bytes()).unwrap();
            let mut with = Vec::new();
            write_with_f16_scales(&v, &mut with).unwrap();
            let b16 = Aligned::new(&with);
            let v16 = NativeView::parse(b16.bytes()).unwrap();
            assert!(v16.has_f16_scales() && !v.has_f16_scales());
            let x = random_x(&mut rng, cols);
            let mut want = vec![0f32; rows];
            matvec_ref(&v, &x, &mut want);
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; rows];
                matvec_with(isa, &v16, &x, &mut got);
                let bits = |s: &[f32]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{t} {rows}x{cols} {isa:?}");
                let n = 3;
                let xs = random_x(&mut rng, n * cols);
                let (mut y16, mut y32) = (vec![0f32; n * rows], vec![0f32; n * rows]);
                matmul_with(isa, &v16, &xs, n, &mut y16);
                matmul_with(isa, &v, &xs, n, &mut y32);
                assert_eq!(bits(&y16), bits(&y32), "matmul {t} {rows}x{cols} {isa:?}");
            }
        }
    }
}

/// A row range of a tensor is a tensor of its own: every ISA gives each of
/// its rows the same bits as the whole tensor's matvec and matmul (the MoE
/// runtime serves one expert of a stacked tensor this way).
#[test]
fn row_ranges_give_the_whole_tensors_rows() {
    use gpack_quant::write_with_f16_scales;
    let mut rng = Rng::new(11);
    for t in [
        GgmlType::Q8_0,
        GgmlType::Q4_1,
        GgmlType::Q6_K,
        GgmlType::F16,
    ] {
        let (rows, cols) = (69usize, if t.block_size() == 256 { 512 } else { 96 });
        let buf = native(&mut rng, t, rows, cols);
        let plain = NativeView::parse(buf.bytes()).unwrap();
        let mut with = Vec::new();
        let f16 = write_with_f16_scales(&plain, &mut with).is_ok();
        let b16 = Aligned::new(&with);
        let views = if f16 && !with.is_empty() {
            vec![plain, NativeView::parse(b16.bytes()).unwrap()]
        } else {
            vec![plain]
        };
        let n = 3;
        let xs = random_x(&mut rng, n * cols);
        for v in views {
            assert!(v.row_range(60, 10).is_none() && v.row_range(0, 0).is_none());
            for isa in Isa::available() {
                let mut whole = vec![0f32; n * rows];
                matmul_with(isa, &v, &xs, n, &mut whole);
                let mut whole1 = vec![0f32; rows];
                matvec_with(isa, &v, &xs[..cols], &mut whole1);
                for (start, len) in [(0usize, 1usize), (5, 17), (40, 29), (0, 69)] {
                    let sub = v.row_range(start, len).unwrap();
                    assert_eq!((sub.rows(), sub.cols()), (len, cols));
                    let mut y = vec![f32::NAN; n * len];
                    matmul_with(isa, &sub, &xs, n, &mut y);
                    for i in 0..n {
                        for r in 0..len {
                            assert_eq!(
                                y[i * len + r].to_bits(),
                                whole[i * rows + start + r].to_bits(),
                                "{t} {isa:?} rows {start}+{len} vector {i} row {r}"
                            );
                        }
                    }
                    let mut y1 = vec![f32::NAN; len];
                    matvec_with(isa, &sub, &xs[..cols], &mut y1);
                    let bits = |s: &[f32]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&y1), bits(&whole1[start..start + len]));
                    let mut row = vec![0f32; cols];
                    let mut row_w = vec![0f32; cols];
                    sub.dequantize_row(len - 1, &mut row);
                    v.dequantize_row(start + len - 1, &mut row_w);
                    assert_eq!(bits(&row), bits(&row_w));
                }
            }
        }
    }
}

/// `write_native` of a view (whole or a row range, with or without the f16
/// copy) parses back to a view with the same rows, bit for bit.
#[test]
fn write_native_round_trips_views_and_row_ranges() {
    use gpack_quant::{write_native, write_with_f16_scales};
    let mut rng = Rng::new(12);
    for t in [
        GgmlType::Q8_0,
        GgmlType::Q4_1,
        GgmlType::Q6_K,
        GgmlType::F16,
        GgmlType::F32,
    ] {
        let cols = if t.block_size() == 256 { 512 } else { 96 };
        let buf = native(&mut rng, t, 20, cols);
        let plain = NativeView::parse(buf.bytes()).unwrap();
        let mut with = Vec::new();
        let b16 = write_with_f16_scales(&plain, &mut with)
            .ok()
            .map(|_| Aligned::new(&with));
        let mut views = vec![plain, plain.row_range(3, 11).unwrap()];
        if let Some(b) = &b16 {
            let v = NativeView::parse(b.bytes()).unwrap();
            views.push(v);
            views.push(v.row_range(7, 13).unwrap());
        }
        for v in views {
            let mut out = Vec::new();
            let n = write_native(&v, &mut out).unwrap();
            assert_eq!(n as usize, out.len());
            let b = Aligned::new(&out);
            let w = NativeView::parse(b.bytes()).unwrap();
            assert_eq!(
                (w.rows(), w.cols(), w.layout()),
                (v.rows(), v.cols(), v.layout())
            );
            assert_eq!(w.has_f16_scales(), v.has_f16_scales());
            let (mut a, mut c) = (vec![0f32; cols], vec![0f32; cols]);
            for r in 0..v.rows() {
                v.dequantize_row(r, &mut a);
                w.dequantize_row(r, &mut c);
                assert!(
                    a.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{t} row {r}"
                );
            }
            assert_eq!(w.codes(), v.codes());
            assert_eq!(w.f16_scales(), v.f16_scales());
        }
    }
}

#[test]
fn attention_helpers_equal_their_scalar_references_bit_for_bit() {
    for isa in Isa::available() {
        attention_helpers_on(isa);
    }
}

/// [`attention_helpers_equal_their_scalar_references_bit_for_bit`] on `isa`.
fn attention_helpers_on(isa: Isa) {
    use gpack_quant::kernels::attn;
    let mut rng = Rng::new(0xA77);
    for &(hd, stride, start, len) in &[
        (64usize, 600usize, 0usize, 1usize),
        (64, 600, 0, 17),
        (64, 600, 5, 64),
        (64, 600, 3, 200),
        (64, 600, 0, 513),
        (20, 50, 3, 37),
        (1, 300, 7, 290),
        (128, 300, 0, 143),
    ] {
        let q: Vec<f32> = (0..hd).map(|_| rng.normal()).collect();
        let kt: Vec<f32> = (0..(hd - 1) * stride + start + len)
            .map(|_| rng.normal())
            .collect();
        let (mut a, mut b) = (vec![0f32; len], vec![1f32; len]);
        attn::scores_transposed_on(isa, &q, 0.125, &kt, stride, start, &mut a);
        attn::scores_transposed_ref(&q, 0.125, &kt, stride, start, &mut b);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{isa:?} scores hd {hd} len {len}"
        );
        for w in [1usize, 15, 16, 17, 40, 63, 64, 65, 100, 130] {
            let rows = len.min(stride / 2);
            let v: Vec<f32> = (0..(rows - 1) * stride + w).map(|_| rng.normal()).collect();
            let (mut o1, mut o2) = (vec![0f32; w], vec![2f32; w]);
            attn::weighted_rows_on(isa, &a[..rows], &v, stride, &mut o1);
            attn::weighted_rows_ref(&a[..rows], &v, stride, &mut o2);
            assert_eq!(
                o1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                o2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{isa:?} weighted rows {rows} x {w}"
            );
            // f16 values: the f32 kernel on the widened values, bit for bit.
            let v16: Vec<u16> = v
                .iter()
                .map(|&x| half::f16::from_f32(x).to_bits())
                .collect();
            let vw: Vec<f32> = v16
                .iter()
                .map(|&b| half::f16::from_bits(b).to_f32())
                .collect();
            let (mut h1, mut h2, mut h3) = (vec![0f32; w], vec![3f32; w], vec![4f32; w]);
            attn::weighted_rows_on(isa, &a[..rows], &v16, stride, &mut h1);
            attn::weighted_rows_ref(&a[..rows], &v16, stride, &mut h2);
            attn::weighted_rows_on(isa, &a[..rows], &vw, stride, &mut h3);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&h1),
                bits(&h2),
                "{isa:?} f16 weighted rows {rows} x {w}"
            );
            assert_eq!(bits(&h1), bits(&h3), "f16 vs widened {rows} x {w}");
        }
        // f16 keys (incl. the tail lanes the masked loads must not read).
        let kt16: Vec<u16> = kt
            .iter()
            .map(|&x| half::f16::from_f32(x).to_bits())
            .collect();
        let ktw: Vec<f32> = kt16
            .iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect();
        let (mut c1, mut c2, mut c3) = (vec![0f32; len], vec![5f32; len], vec![6f32; len]);
        attn::scores_transposed_on(isa, &q, 0.125, &kt16, stride, start, &mut c1);
        attn::scores_transposed_ref(&q, 0.125, &kt16, stride, start, &mut c2);
        attn::scores_transposed_on(isa, &q, 0.125, &ktw, stride, start, &mut c3);
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&c1), bits(&c2), "{isa:?} f16 scores hd {hd} len {len}");
        assert_eq!(
            bits(&c1),
            bits(&c3),
            "f16 scores vs widened hd {hd} len {len}"
        );
    }
}

/// The grouped attention helpers (the query heads sharing a KV head, 1–7 of
/// them: every 4/3/2/1 split; widths with and without tails; f32 and f16
/// caches) give each query exactly the single-query reference's bits, on
/// every path.
#[test]
fn grouped_attention_helpers_equal_the_single_query_reference() {
    use gpack_quant::kernels::attn;
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let mut rng = Rng::new(0x6A77);
    for isa in Isa::available() {
        for &(g, d, stride, start, n) in &[
            (1usize, 64usize, 64usize, 0usize, 64usize),
            (4, 64, 64, 0, 64),
            (4, 64, 64, 17, 30),
            (3, 64, 600, 5, 200),
            (7, 20, 50, 3, 37),
            (5, 1, 300, 7, 290),
            (2, 128, 300, 0, 143),
            (6, 64, 64, 0, 1),
        ] {
            let ld = n + 3;
            let q: Vec<f32> = (0..g * d).map(|_| rng.normal()).collect();
            let kt: Vec<f32> = (0..(d - 1) * stride + start + n)
                .map(|_| rng.normal())
                .collect();
            let kt16: Vec<u16> = kt
                .iter()
                .map(|&x| half::f16::from_f32(x).to_bits())
                .collect();
            let (mut a, mut b) = (vec![7f32; g * ld], vec![7f32; g * ld]);
            attn::scores_transposed_group_on(isa, &q, d, 0.125, &kt, stride, start, n, &mut a, ld);
            let (mut a16, mut b16) = (vec![7f32; g * ld], vec![7f32; g * ld]);
            attn::scores_transposed_group_on(
                isa, &q, d, 0.125, &kt16, stride, start, n, &mut a16, ld,
            );
            for i in 0..g {
                let qi = &q[i * d..(i + 1) * d];
                attn::scores_transposed_ref(
                    qi,
                    0.125,
                    &kt,
                    stride,
                    start,
                    &mut b[i * ld..i * ld + n],
                );
                attn::scores_transposed_ref(
                    qi,
                    0.125,
                    &kt16,
                    stride,
                    start,
                    &mut b16[i * ld..i * ld + n],
                );
            }
            assert_eq!(
                bits(&a),
                bits(&b),
                "{isa:?} grouped scores g {g} d {d} n {n}"
            );
            assert_eq!(
                bits(&a16),
                bits(&b16),
                "{isa:?} f16 grouped scores g {g} d {d} n {n}"
            );
            // The probabilities over `len` value rows, `w` wide.
            for w in [1usize, 8, 15, 16, 64, 65, 100] {
                let len = n.min(stride / 2).max(1);
                let p: Vec<f32> = (0..g * ld).map(|_| rng.normal().abs()).collect();
                let v: Vec<f32> = (0..(len - 1) * stride + w).map(|_| rng.normal()).collect();
                let v16: Vec<u16> = v
                    .iter()
                    .map(|&x| half::f16::from_f32(x).to_bits())
                    .collect();
                let (mut o1, mut o2) = (vec![1f32; g * w], vec![2f32; g * w]);
                let (mut h1, mut h2) = (vec![3f32; g * w], vec![4f32; g * w]);
                attn::weighted_rows_group_on(isa, &p, ld, len, &v, stride, &mut o1, w);
                attn::weighted_rows_group_on(isa, &p, ld, len, &v16, stride, &mut h1, w);
                for i in 0..g {
                    let pi = &p[i * ld..i * ld + len];
                    attn::weighted_rows_ref(pi, &v, stride, &mut o2[i * w..(i + 1) * w]);
                    attn::weighted_rows_ref(pi, &v16, stride, &mut h2[i * w..(i + 1) * w]);
                }
                assert_eq!(
                    bits(&o1),
                    bits(&o2),
                    "{isa:?} grouped rows g {g} len {len} w {w}"
                );
                assert_eq!(
                    bits(&h1),
                    bits(&h2),
                    "{isa:?} f16 grouped rows g {g} len {len} w {w}"
                );
            }
        }
    }
}

/// `softmax_rows` gives each of 1–11 rows (every 8/…/1 split of the
/// side-by-side sums) exactly the reference softmax's bits, also with
/// overflowing, infinite and NaN scores.
#[test]
fn softmax_rows_equal_the_reference_per_row() {
    use gpack_quant::kernels::attn;
    let mut rng = Rng::new(0x50F7);
    for rows in [1usize, 3, 4, 8, 11] {
        for len in [0usize, 1, 7, 8, 9, 100, 257] {
            let ld = len + 5;
            let mut x: Vec<f32> = (0..rows * ld).map(|_| rng.normal() * 30.0).collect();
            if len > 3 {
                x[2] = f32::NAN;
                x[(rows - 1) * ld + 1] = f32::INFINITY;
                x[3] = 200.0;
            }
            if rows > 2 {
                // A row of signed zeros (its maximum's sign is the fold's
                // choice) and a row of NaNs.
                for (j, v) in x[ld..ld + len].iter_mut().enumerate() {
                    *v = if j % 3 == 0 { -0.0 } else { 0.0 };
                }
                x[2 * ld..2 * ld + len].fill(f32::NAN);
            }
            let mut want = x.clone();
            for r in 0..rows {
                attn::softmax_ref(&mut want[r * ld..r * ld + len]);
            }
            attn::softmax_rows(&mut x, ld, len, rows);
            // Bits, every NaN as one pattern (IEEE leaves the sign and payload
            // of an operation's NaN open; where the NaNs are is what counts).
            let bits = |v: &[f32]| {
                v.iter()
                    .map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() })
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&x), bits(&want), "rows {rows} len {len}");
        }
    }
}

/// `softmax_rows_sinks` against the definition in f64 (transformers'
/// softmax over the scores with the sink appended, the sink's share
/// dropped): within 1e-6 relative, rows summing to 1 − the sink's share,
/// also when the sink dominates or is far below every score.
#[test]
fn softmax_rows_with_sinks_match_the_definition() {
    use gpack_quant::kernels::attn;
    let mut rng = Rng::new(0x5124);
    for rows in [1usize, 2, 8] {
        for len in [1usize, 7, 100] {
            for sink_scale in [0.0f32, 1.0, 40.0] {
                let ld = len + 3;
                let x: Vec<f32> = (0..rows * ld).map(|_| rng.normal() * 4.0).collect();
                let sinks: Vec<f32> = (0..rows).map(|_| rng.normal() * sink_scale).collect();
                let mut got = x.clone();
                attn::softmax_rows_sinks(&mut got, ld, len, rows, &sinks);
                for r in 0..rows {
                    let row = &x[r * ld..r * ld + len];
                    let m = row.iter().fold(sinks[r], |a, &b| a.max(b)) as f64;
                    let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
                    let z = e.iter().sum::<f64>() + (sinks[r] as f64 - m).exp();
                    for (i, e) in e.iter().enumerate() {
                        let want = e / z;
                        let g = got[r * ld + i] as f64;
                        assert!(
                            (g - want).abs() <= 1e-6 * want.max(1e-30) + 1e-12,
                            "rows {rows} len {len} sink {} [{r}][{i}]: {g} vs {want}",
                            sinks[r]
                        );
                    }
                }
            }
        }
    }
}

/// The matmul tiles for many vectors (2 × 8 tiles, 4-row tiles of the last
/// 1–7 vectors, blocks of 64 vectors, row chunks split over the pool, odd
/// block counts, f16 scale copies) give every (row, vector) the scalar
/// reference's bits.
#[test]
fn matmul_tiles_equal_the_reference_for_many_vectors() {
    use gpack_quant::write_with_f16_scales;
    let mut rng = Rng::new(12);
    let bits = |s: &[f32]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for t in [
        GgmlType::Q8_0,
        GgmlType::Q4_1,
        GgmlType::Q4_0,
        GgmlType::Q5_1,
        GgmlType::Q6_K,
        GgmlType::Q2_K,
    ] {
        let shapes: &[(usize, usize)] = if matches!(t, GgmlType::Q6_K | GgmlType::Q2_K) {
            &[(45, 256), (203, 768)]
        } else {
            &[(45, 96), (203, 544), (301, 160)]
        };
        for &(rows, cols) in shapes {
            let buf = native(&mut rng, t, rows, cols);
            let v = NativeView::parse(buf.bytes()).unwrap();
            let mut with = Vec::new();
            let b16 = write_with_f16_scales(&v, &mut with)
                .ok()
                .map(|_| Aligned::new(&with));
            for n in [2usize, 7, 8, 9, 13, 16, 23, 70] {
                let x = random_x(&mut rng, n * cols);
                let mut want = vec![0f32; n * rows];
                for i in 0..n {
                    matvec_ref(
                        &v,
                        &x[i * cols..(i + 1) * cols],
                        &mut want[i * rows..(i + 1) * rows],
                    );
                }
                for isa in Isa::available() {
                    let mut y = vec![f32::NAN; n * rows];
                    matmul_with(isa, &v, &x, n, &mut y);
                    assert_eq!(bits(&y), bits(&want), "{t} {rows}x{cols} n={n} {isa:?}");
                    if let Some(b) = &b16 {
                        let v16 = NativeView::parse(b.bytes()).unwrap();
                        let mut y = vec![f32::NAN; n * rows];
                        matmul_with(isa, &v16, &x, n, &mut y);
                        assert_eq!(bits(&y), bits(&want), "f16 {t} {rows}x{cols} n={n} {isa:?}");
                    }
                }
            }
        }
    }
}

/// The SIMD activation quantizer gives the scalar one's codes, scales and
/// lane sums, ties (x · (1/d) = k + 0.5), zeros, subnormals, huge, infinite
/// and NaN inputs included, for one scale per block and per span of 8
/// blocks (each edge case in a span of its own).
#[test]
fn activation_quantizer_equals_the_scalar_reference() {
    let mut rng = Rng::new(13);
    for span in [1usize, 8] {
        let cols = 32 * span * 9;
        let n = 5;
        let mut x: Vec<f32> = (0..n * cols).map(|_| rng.normal() * 3.0).collect();
        // Edge case e fills block e · span.
        let blk = |e: usize| 32 * span * e..32 * span * e + 32;
        // Exact ties against amax = 127 (d = 1).
        for (i, v) in x[blk(1)].iter_mut().enumerate() {
            *v = i as f32 * 4.0 - 63.5;
        }
        x[blk(1).start] = 127.0;
        if span > 1 {
            // The rest of the tie block's span below its amax.
            x[blk(1).end..blk(2).start]
                .iter_mut()
                .for_each(|v| *v = v.clamp(-100.0, 100.0));
        }
        x[blk(2)].fill(0.0);
        x[blk(3)].iter_mut().for_each(|v| *v *= 1e-40);
        x[blk(4)].iter_mut().for_each(|v| *v *= 1e30);
        x[blk(5).start + 10] = f32::INFINITY;
        x[blk(6).start + 8] = f32::NAN;
        x[blk(7).start + 6] = f32::NEG_INFINITY;
        x[blk(7).start + 7] = f32::NAN;
        x[blk(8).start + 12] = -0.0;
        for (i, v) in x[blk(8)].iter_mut().enumerate().skip(16) {
            *v = (i as f32 - 16.0) * 0.5;
        }
        let (mut a, mut b) = (QuantizedActivations::new(), QuantizedActivations::new());
        b.quantize_ref(&x, n, cols, span);
        a.quantize_span(&x, n, cols, span);
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "span {span}");
        for isa in Isa::available() {
            a.quantize_isa(isa, &x, n, cols, span);
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{isa:?} span {span}");
        }
        for _ in 0..20 {
            let x: Vec<f32> = (0..cols).map(|_| rng.normal() * rng.f32() * 10.0).collect();
            b.quantize_ref(&x, 1, cols, span);
            for isa in Isa::available() {
                a.quantize_isa(isa, &x, 1, cols, span);
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "{isa:?} span {span}");
            }
        }
    }
}

/// `attn::expf` is glibc's `expf` (FMA build) bit for bit on this kind of
/// machine (checked where `f32::exp` is that function: counted, not
/// asserted, elsewhere), and the AVX-512 softmax equals its scalar reference.
#[test]
fn softmax_and_expf_equal_their_references() {
    use gpack_quant::kernels::attn;
    let mut rng = Rng::new(14);
    let mut differ = 0usize;
    let mut v = -110.0f32;
    while v < 90.0 {
        for x in [v, v + rng.f32() * 0.01] {
            if attn::expf(x).to_bits() != x.exp().to_bits() {
                differ += 1;
            }
        }
        v += 0.000_37;
    }
    let glibc_fma = cfg!(all(target_arch = "x86_64", target_env = "gnu"))
        && std::arch::is_x86_feature_detected!("fma");
    if glibc_fma {
        assert_eq!(differ, 0, "attn::expf differs from glibc expf");
    } else {
        eprintln!("attn::expf differs from this libm's expf on {differ} inputs");
    }
    // exp_inplace: every element is attn::expf, whatever the lane or the
    // special value (overflow, underflow, ±inf, NaN, ±0).
    for n in [1usize, 15, 16, 17, 100, 1000] {
        for scale in [0.5f32, 10.0, 60.0, 200.0] {
            let mut a: Vec<f32> = (0..n).map(|_| rng.normal() * scale).collect();
            if n > 20 {
                a[1] = f32::INFINITY;
                a[2] = f32::NEG_INFINITY;
                a[3] = f32::NAN;
                a[4] = -0.0;
                a[5] = 88.8;
                a[6] = -104.0;
            }
            let want: Vec<u32> = a.iter().map(|&x| attn::expf(x).to_bits()).collect();
            attn::exp_inplace(&mut a);
            let got: Vec<u32> = a.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "exp_inplace n={n} scale={scale}");
        }
    }
    for n in [1usize, 5, 16, 17, 100, 513, 1000] {
        for scale in [0.1f32, 3.0, 40.0, 200.0] {
            let mut a: Vec<f32> = (0..n).map(|_| rng.normal() * scale).collect();
            if n > 20 {
                a[3] = f32::NEG_INFINITY;
                a[7] = -1.0e30;
            }
            let mut b = a.clone();
            attn::softmax(&mut a);
            attn::softmax_ref(&mut b);
            assert_eq!(
                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "softmax n={n} scale={scale}"
            );
        }
    }
}
