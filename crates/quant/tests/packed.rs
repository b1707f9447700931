//! `PackedMatrix`: the AVX-512 kernel bit for bit against the scalar
//! reference (all four group-32 integer layouts, f32 and f16 scales, ragged
//! shapes, extreme codes and scales, all-zero blocks), batch and thread
//! invariance, the reference against an f64 dot, and `pack` refusing what it
//! does not support.

use gpack_quant::kernels::packed::dequantized_activations;
use gpack_quant::{
    matmul_with, transcode, transcode_with_f16_scales, GgmlType, Isa, Layout, NativeView,
    PackedMatrix, Pool, QuantizedActivations,
};

use crate::common::{Aligned as Tensor, Rng};

/// A native tensor's view.
fn view(t: &Tensor) -> NativeView<'_> {
    NativeView::parse(t.bytes()).unwrap()
}

/// The four group-32 integer layouts, from the ggml types that map to them.
const TYPES: [(GgmlType, Layout); 4] = [
    (GgmlType::Q8_0, Layout::I8Sym { group: 32 }),
    (GgmlType::Q5_1, Layout::I8Asym { group: 32 }),
    (GgmlType::Q4_0, Layout::I4Sym { group: 32 }),
    (GgmlType::Q4_1, Layout::I4Asym { group: 32 }),
];

/// f16 scale (and min) field offsets in a block.
fn f16_fields(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q8_0 | GgmlType::Q4_0 => &[0],
        _ => &[0, 2],
    }
}

/// How the blocks' codes and scales are chosen.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Fill {
    /// Random codes, scales ~ N(0, 0.02²), every 7th block all zero.
    Random,
    /// Codes at their extremes (all max, all min, or alternating) and
    /// extreme f16 scales/mins (±65504, subnormal, ±0, tiny), some zero blocks.
    Extreme,
}

fn blocks(rng: &mut Rng, t: GgmlType, rows: usize, cols: usize, fill: Fill) -> Vec<u8> {
    let (bs, ts) = t.block();
    let n = rows * cols / bs as usize;
    let mut b: Vec<u8> = (0..n * ts as usize).map(|_| rng.next_u64() as u8).collect();
    let extremes = [
        65504.0f32, -65504.0, 6.0e-8, -6.0e-8, 0.0, -0.0, 1.0, -1.0e-3, 0.5,
    ];
    for (i, blk) in b.chunks_exact_mut(ts as usize).enumerate() {
        if i % 7 == 3 {
            blk.fill(0);
            continue;
        }
        let fields = f16_fields(t);
        if fill == Fill::Extreme {
            let code = match rng.below(4) {
                0 => 0xFF,
                1 => 0x00,
                2 => 0x80,
                _ => 0x7F,
            };
            let end = *fields.last().unwrap() + 2;
            for (k, c) in blk[end..].iter_mut().enumerate() {
                *c = if rng.below(3) == 0 && k % 2 == 1 {
                    !code
                } else {
                    code
                };
            }
        }
        for &o in fields {
            let v = match fill {
                Fill::Random => rng.normal() * 0.02,
                Fill::Extreme => extremes[rng.below(extremes.len())],
            };
            blk[o..o + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
    }
    b
}

fn tensor(rng: &mut Rng, t: GgmlType, rows: usize, cols: usize, f16: bool, fill: Fill) -> Tensor {
    let src = blocks(rng, t, rows, cols, fill);
    let mut out = Vec::new();
    if f16 {
        transcode_with_f16_scales(t, &src, rows as u64, cols as u64, &mut out).unwrap();
    } else {
        transcode(t, &src, rows as u64, cols as u64, &mut out).unwrap();
    }
    Tensor::new(&out)
}

/// Activations: normal values with an all-zero block, one block of a
/// single huge value among zeros, and (for `Fill::Extreme`) constant blocks
/// that quantize to all ±127.
fn acts(rng: &mut Rng, n: usize, cols: usize, fill: Fill) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
    for v in 0..n {
        let row = &mut x[v * cols..(v + 1) * cols];
        if cols >= 64 {
            row[32..64].fill(0.0);
        }
        if cols >= 96 {
            row[64..96].fill(0.0);
            row[64 + v % 32] = 1.0e4;
        }
        if fill == Fill::Extreme {
            for (b, blk) in row.chunks_exact_mut(32).enumerate() {
                if b % 3 == 0 {
                    blk.fill(if b % 2 == 0 { 3.0 } else { -3.0 });
                }
            }
        }
    }
    x
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

fn simd() -> bool {
    let ok = Isa::Avx512Vnni.is_available();
    if !ok {
        eprintln!("packed: this CPU lacks AVX-512 VNNI; SIMD comparisons skipped");
    }
    ok
}

/// Every path (AVX-512 on pools of 1 and 2 threads, the scalar path on the
/// pool, `matmul_quantized`) equals the reference bit for bit.
fn check_all_paths(pm: &PackedMatrix, x: &[f32], n: usize, what: &str) -> Vec<f32> {
    let rows = pm.rows();
    let mut want = vec![f32::NAN; n * rows];
    pm.matmul_ref(x, n, &mut want);
    assert!(want.iter().all(|v| v.is_finite()), "{what}: non-finite");
    let pool2 = Pool::new(2);
    let mut isas = vec![Isa::Scalar];
    if simd() {
        isas.push(Isa::Avx512Vnni);
    }
    for isa in isas {
        for pool in [&Pool::new(1), &pool2] {
            let mut got = vec![f32::NAN; n * rows];
            pm.matmul_on(isa, pool, x, n, &mut got);
            assert_eq!(
                bits(&got),
                bits(&want),
                "{what}: {} on {} threads",
                isa.name(),
                pool.threads()
            );
        }
    }
    let mut qa = QuantizedActivations::new();
    qa.quantize(x, n, pm.cols());
    let mut got = vec![f32::NAN; n * rows];
    pm.matmul_quantized(&qa, &mut got);
    assert_eq!(bits(&got), bits(&want), "{what}: matmul_quantized");
    want
}

#[test]
fn simd_equals_reference_random_shapes() {
    let mut rng = Rng::new(1);
    let rows_set = [1usize, 15, 16, 17, 192, 577];
    let cols_set = [32usize, 64, 96, 576, 1536];
    let ns = [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 17];
    for (t, layout) in TYPES {
        for f16 in [false, true] {
            for (k, &rows) in rows_set.iter().enumerate() {
                // Each rows value meets two cols values, varying per type.
                for c in [k, k + 2 + (t as usize)] {
                    let cols = cols_set[c % cols_set.len()];
                    let w = tensor(&mut rng, t, rows, cols, f16, Fill::Random);
                    let v = view(&w);
                    assert_eq!(v.layout(), layout);
                    assert_eq!(v.has_f16_scales(), f16);
                    let pm = PackedMatrix::pack(&v).expect("packable");
                    assert_eq!((pm.rows(), pm.cols(), pm.layout()), (rows, cols, layout));
                    assert_eq!(pm.has_f16_scales(), f16);
                    let n = ns[rng.below(ns.len())];
                    let x = acts(&mut rng, n, cols, Fill::Random);
                    check_all_paths(&pm, &x, n, &format!("{t:?} f16={f16} {rows}x{cols} n={n}"));
                }
            }
        }
    }
}

#[test]
fn simd_equals_reference_every_n() {
    let mut rng = Rng::new(2);
    for (t, _) in TYPES {
        let (rows, cols) = (33, 96);
        let w = tensor(&mut rng, t, rows, cols, true, Fill::Random);
        let pm = PackedMatrix::pack(&view(&w)).unwrap();
        for n in (1..=9).chain([16, 17]) {
            let x = acts(&mut rng, n, cols, Fill::Random);
            check_all_paths(&pm, &x, n, &format!("{t:?} n={n}"));
        }
    }
}

#[test]
fn simd_equals_reference_extremes() {
    let mut rng = Rng::new(3);
    for (t, _) in TYPES {
        for f16 in [false, true] {
            for (rows, cols, n) in [(17, 64, 9), (48, 288, 8), (5, 1536, 3)] {
                let w = tensor(&mut rng, t, rows, cols, f16, Fill::Extreme);
                let pm = PackedMatrix::pack(&view(&w)).unwrap();
                let x = acts(&mut rng, n, cols, Fill::Extreme);
                check_all_paths(
                    &pm,
                    &x,
                    n,
                    &format!("extreme {t:?} f16={f16} {rows}x{cols}"),
                );
            }
        }
    }
}

#[test]
fn all_zero_weights_and_activations_give_zero() {
    let mut rng = Rng::new(4);
    for (t, _) in TYPES {
        let (rows, cols) = (20, 64);
        let (_, ts) = t.block();
        let src = vec![0u8; rows * cols / 32 * ts as usize];
        let mut out = Vec::new();
        transcode(t, &src, rows as u64, cols as u64, &mut out).unwrap();
        let w = Tensor::new(&out);
        let pm = PackedMatrix::pack(&view(&w)).unwrap();
        let x = acts(&mut rng, 3, cols, Fill::Random);
        let y = check_all_paths(&pm, &x, 3, &format!("zero {t:?}"));
        assert!(y.iter().all(|&v| v == 0.0));
        // And zero activations against random weights.
        let w = tensor(&mut rng, t, rows, cols, false, Fill::Random);
        let pm = PackedMatrix::pack(&view(&w)).unwrap();
        let y = check_all_paths(&pm, &vec![0.0; 2 * cols], 2, &format!("zero x {t:?}"));
        assert!(y.iter().all(|&v| v == 0.0));
    }
}

/// Row results for vector i are the same bits whether the call has 1 or 9
/// (or 17) vectors, whatever the pool size.
#[test]
fn batched_equals_solo() {
    let mut rng = Rng::new(5);
    let pools = [Pool::new(1), Pool::new(2)];
    for (t, _) in TYPES {
        let (rows, cols) = (577, 576);
        let w = tensor(&mut rng, t, rows, cols, true, Fill::Random);
        let pm = PackedMatrix::pack(&view(&w)).unwrap();
        for n in [9usize, 17] {
            let x = acts(&mut rng, n, cols, Fill::Random);
            for isa in Isa::available() {
                if !matches!(isa, Isa::Scalar | Isa::Avx512Vnni) {
                    continue;
                }
                for pool in &pools {
                    let mut all = vec![0f32; n * rows];
                    pm.matmul_on(isa, pool, &x, n, &mut all);
                    for i in 0..n {
                        let mut solo = vec![0f32; rows];
                        pm.matmul_on(
                            isa,
                            &pools[i % 2],
                            &x[i * cols..(i + 1) * cols],
                            1,
                            &mut solo,
                        );
                        assert_eq!(
                            bits(&solo),
                            bits(&all[i * rows..(i + 1) * rows]),
                            "{t:?} {} vector {i} of {n}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}

/// The reference against an f64 dot of the dequantized weights and the
/// dequantized activation codes: within 1e-5 of Σ (|w| + |min|)·|a| (the
/// f32 dequantization rounds `q·s` and `+ m` separately).
#[test]
fn reference_close_to_f64() {
    let mut rng = Rng::new(6);
    for (t, _) in TYPES {
        for (rows, cols) in [(17, 32), (40, 576), (9, 1536)] {
            let w = tensor(&mut rng, t, rows, cols, false, Fill::Random);
            let v = view(&w);
            let pm = PackedMatrix::pack(&v).unwrap();
            let n = 3;
            let x = acts(&mut rng, n, cols, Fill::Random);
            let mut y = vec![0f32; n * rows];
            pm.matmul_ref(&x, n, &mut y);
            let mut qa = QuantizedActivations::new();
            qa.quantize_ref(&x, n, cols);
            let mut wr = vec![0f32; cols];
            for i in 0..n {
                let a = dequantized_activations(&qa, i);
                for r in 0..rows {
                    v.dequantize_row(r, &mut wr);
                    let mins = v.row_mins(r);
                    let (mut dot, mut mag) = (0f64, 0f64);
                    for e in 0..cols {
                        let m = mins.get(e / 32).map_or(0.0, |m| m.abs());
                        dot += f64::from(wr[e]) * f64::from(a[e]);
                        mag += (f64::from(wr[e].abs()) + f64::from(m)) * f64::from(a[e].abs());
                    }
                    let got = f64::from(y[i * rows + r]);
                    assert!(
                        (got - dot).abs() <= 1e-5 * mag + 1e-30,
                        "{t:?} {rows}x{cols} row {r} vec {i}: {got} vs {dot} (mag {mag})"
                    );
                }
            }
            // And the unpacked kernels agree to the same budget (a different
            // summation order of the same products).
            let mut y2 = vec![0f32; n * rows];
            matmul_with(Isa::Scalar, &v, &x, n, &mut y2);
            for (k, (a, b)) in y.iter().zip(&y2).enumerate() {
                let scale = y2.iter().map(|v| v.abs()).fold(0f32, f32::max).max(1e-20);
                assert!(
                    (a - b).abs() <= 1e-4 * scale,
                    "{t:?} vs unpacked at {k}: {a} {b}"
                );
            }
        }
    }
}

#[test]
fn pack_refuses_other_layouts() {
    let mut rng = Rng::new(7);
    for (t, rows, cols) in [
        (GgmlType::F32, 4, 64),
        (GgmlType::F16, 4, 64),
        (GgmlType::BF16, 4, 64),
        (GgmlType::Q6_K, 2, 256),  // I8Sym group 16
        (GgmlType::Q2_K, 2, 256),  // I8Asym group 16
        (GgmlType::IQ4_NL, 2, 64), // raw ggml blocks
    ] {
        let (bs, ts) = t.block();
        let src: Vec<u8> = match t {
            GgmlType::F32 => (0..rows * cols)
                .flat_map(|_| rng.normal().to_le_bytes())
                .collect(),
            GgmlType::F16 | GgmlType::BF16 => (0..rows * cols)
                .flat_map(|_| half::f16::from_f32(rng.normal()).to_le_bytes())
                .collect(),
            _ => vec![0u8; rows * cols / bs as usize * ts as usize],
        };
        let mut out = Vec::new();
        transcode(t, &src, rows as u64, cols as u64, &mut out).unwrap();
        let w = Tensor::new(&out);
        let v = view(&w);
        assert!(PackedMatrix::pack(&v).is_none(), "{t:?} ({})", v.layout());
    }
    // Q4_K maps to I4Asym/G32 with f32 scales: packable.
    let w = tensor_q4k(&mut rng);
    assert!(PackedMatrix::pack(&view(&w)).is_some());
}

fn tensor_q4k(rng: &mut Rng) -> Tensor {
    let (rows, cols) = (3usize, 256usize);
    let mut src: Vec<u8> = (0..rows * 144).map(|_| rng.next_u64() as u8).collect();
    for blk in src.chunks_exact_mut(144) {
        blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        blk[2..4].copy_from_slice(&half::f16::from_f32(0.02).to_le_bytes());
    }
    let mut out = Vec::new();
    transcode(GgmlType::Q4_K, &src, rows as u64, cols as u64, &mut out).unwrap();
    Tensor::new(&out)
}

/// The packed form is as large as the bytes the unpacked kernels stream
/// (codes + the scales they read), up to the last group's zero rows and the
/// per-group 64-byte padding.
#[test]
fn byte_len_matches_native_form() {
    let mut rng = Rng::new(8);
    for (t, _) in TYPES {
        for f16 in [false, true] {
            let (rows, cols) = (64, 576);
            let w = tensor(&mut rng, t, rows, cols, f16, Fill::Random);
            let v = view(&w);
            let pm = PackedMatrix::pack(&v).unwrap();
            let es = if f16 { 2 } else { 4 };
            let streamed = v.codes().len() + es * (v.scales().len() + v.mins().len());
            assert_eq!(pm.byte_len(), streamed, "{t:?} f16={f16}");
        }
    }
}
