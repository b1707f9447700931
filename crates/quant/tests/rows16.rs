//! The row-interleaved layouts (`Layout::Rows16`): dequantization equals
//! ggml's bit for bit, every ISA path and batch size equals the scalar
//! reference bit for bit, the SIMD decoders write the scalar decoder's
//! stage, results are close to the exact dot of the dequantized weights,
//! row ranges split at row groups, and members of mixed types run as one
//! call give each member's own bits.

use crate::common::{Aligned, Rng};
use crate::kernels::{f16_fields, random_blocks, random_x, INT_TYPES};
use gpack_quant::kernels::rows16::stage_matches;
use gpack_quant::{
    dequantize_ggml, matmul_concat_on, matmul_ref, matmul_with, matvec_with, transcode,
    transcode_canonical, GgmlType, Isa, Layout, NativeView, Pool,
};

/// Every type with a row-interleaved layout: the integer types of the
/// row-major kernels' tests plus the lookup types.
const TYPES: [GgmlType; 13] = {
    let mut t = [GgmlType::IQ4_NL; 13];
    let mut i = 0;
    while i < INT_TYPES.len() {
        t[i] = INT_TYPES[i];
        i += 1;
    }
    t[10] = GgmlType::IQ4_NL;
    t[11] = GgmlType::IQ4_XS;
    t[12] = GgmlType::MXFP4;
    t
};

fn rows16(t: GgmlType, src: &[u8], rows: usize, cols: usize) -> Aligned {
    let mut out = Vec::new();
    let n = transcode_canonical(t, src, rows as u64, cols as u64, &mut out).unwrap();
    assert_eq!(n as usize, out.len());
    Aligned::new(&out)
}

fn cols_for(t: GgmlType) -> &'static [usize] {
    if t.block_size() == 256 {
        &[256, 768, 2048]
    } else {
        &[32, 96, 576, 2048]
    }
}

#[test]
fn canonical_layout_is_rows16_and_no_larger_than_ggml() {
    let mut rng = Rng::new(1);
    for t in TYPES {
        let (rows, cols) = (48, cols_for(t)[1]);
        let src = random_blocks(&mut rng, t, rows, cols);
        let a = rows16(t, &src, rows, cols);
        let v = NativeView::parse(a.bytes()).unwrap();
        assert_eq!(v.layout(), Layout::Rows16(t));
        // 64-byte header, then exactly the ggml bytes (rows % 16 == 0).
        assert_eq!(a.bytes().len(), 64 + src.len(), "{t}");
    }
}

#[test]
fn dequantization_is_ggml_bit_for_bit() {
    let mut rng = Rng::new(2);
    for t in TYPES {
        for &cols in cols_for(t) {
            for rows in [1usize, 3, 16, 17, 33] {
                let src = random_blocks(&mut rng, t, rows, cols);
                let a = rows16(t, &src, rows, cols);
                let v = NativeView::parse(a.bytes()).unwrap();
                let row_bytes = src.len() / rows;
                let (mut got, mut want) = (vec![0f32; cols], vec![0f32; cols]);
                for r in 0..rows {
                    v.dequantize_row(r, &mut got);
                    dequantize_ggml(t, &src[r * row_bytes..(r + 1) * row_bytes], &mut want)
                        .unwrap();
                    let gb: Vec<u32> = got.iter().map(|f| f.to_bits()).collect();
                    let wb: Vec<u32> = want.iter().map(|f| f.to_bits()).collect();
                    assert_eq!(gb, wb, "{t} {rows}x{cols} row {r}");
                }
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn every_isa_and_batch_size_equals_the_reference() {
    let mut rng = Rng::new(3);
    for t in TYPES {
        for &cols in cols_for(t) {
            for rows in [5usize, 16, 40, 300] {
                let src = random_blocks(&mut rng, t, rows, cols);
                let a = rows16(t, &src, rows, cols);
                let v = NativeView::parse(a.bytes()).unwrap();
                for n in [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 17, 70] {
                    if rows * cols * n > 40_000_000 {
                        continue;
                    }
                    let mut x = random_x(&mut rng, n * cols);
                    // A block of subnormal activations in the first vector.
                    if cols >= 64 {
                        x[..32].fill(f32::from_bits(3));
                    }
                    let mut want = vec![0f32; n * rows];
                    matmul_ref(&v, &x, n, &mut want);
                    for isa in Isa::available() {
                        let mut got = vec![f32::NAN; n * rows];
                        if n == 1 {
                            matvec_with(isa, &v, &x, &mut got);
                        } else {
                            matmul_with(isa, &v, &x, n, &mut got);
                        }
                        assert_eq!(bits(&got), bits(&want), "{t} {rows}x{cols} n {n} {isa:?}");
                    }
                    // Batched = solo: vector 1 alone gives its batched bits.
                    if n > 1 {
                        let mut solo = vec![0f32; rows];
                        matvec_with(Isa::best(), &v, &x[cols..2 * cols], &mut solo);
                        assert_eq!(bits(&solo), bits(&want[rows..2 * rows]), "{t} solo");
                    }
                }
            }
        }
    }
}

/// f16 bit patterns at the edges: ±0, the smallest and largest
/// subnormals, the smallest normal, ±65504, ±infinity, one.
const EXTREME_F16: [u16; 11] = [
    0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x3C00, 0xBC00,
];

/// Sets every nonzero block's f16 scale fields to extreme values (and
/// MXFP4's exponent to any byte, 0 and 1 the subnormal scales, 255 the
/// largest); the other bytes stay random.
fn extreme_scales(rng: &mut Rng, t: GgmlType, src: &mut [u8]) {
    let ts = t.block().1 as usize;
    for blk in src.chunks_exact_mut(ts) {
        if blk.iter().all(|&b| b == 0) {
            continue;
        }
        for &o in f16_fields(t) {
            let v = EXTREME_F16[rng.below(EXTREME_F16.len())];
            blk[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
        if t == GgmlType::MXFP4 {
            blk[0] = match rng.below(4) {
                0 => 0,
                1 => 1,
                2 => 255,
                _ => rng.next_u64() as u8,
            };
        }
    }
}

#[test]
fn simd_decoders_write_the_scalar_stage() {
    let simd: Vec<Isa> = Isa::available()
        .into_iter()
        .filter(|&i| i != Isa::Scalar)
        .collect();
    if simd.is_empty() {
        eprintln!("no SIMD path on this CPU: only the scalar decoder exists here");
        return;
    }
    let mut rng = Rng::new(4);
    for t in TYPES {
        let cols = cols_for(t)[1];
        // One ragged group (5 rows) and two full groups plus a ragged one.
        for rows in [5usize, 37] {
            for extreme in [false, true] {
                let mut src = random_blocks(&mut rng, t, rows, cols);
                if extreme {
                    extreme_scales(&mut rng, t, &mut src);
                }
                let a = rows16(t, &src, rows, cols);
                let v = NativeView::parse(a.bytes()).unwrap();
                for &isa in &simd {
                    for g in 0..rows.div_ceil(16) {
                        for b in 0..cols / t.block_size() as usize {
                            assert!(
                                stage_matches(isa, &v, g, b),
                                "{t} {isa:?} {rows} rows, extreme {extreme}: group {g} block {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn results_are_close_to_the_f64_dot_of_dequantized_values() {
    let mut rng = Rng::new(6);
    for t in TYPES {
        let (rows, cols) = (20, 2048);
        let src = random_blocks(&mut rng, t, rows, cols);
        let a = rows16(t, &src, rows, cols);
        let v = NativeView::parse(a.bytes()).unwrap();
        let x = random_x(&mut rng, cols);
        let mut y = vec![0f32; rows];
        matvec_with(Isa::best(), &v, &x, &mut y);
        let mut w = vec![0f32; cols];
        for (r, &yr) in y.iter().enumerate() {
            v.dequantize_row(r, &mut w);
            let exact: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
            let mag: f64 = w
                .iter()
                .zip(&x)
                .map(|(a, b)| (*a as f64 * *b as f64).abs())
                .sum();
            // int8 activations: ~1/127 relative error per block, far below Σ|w·x|.
            assert!(
                (yr as f64 - exact).abs() <= 0.02 * mag + 1e-6,
                "{t} row {r}: {yr} vs {exact} (Σ|wx| {mag})"
            );
        }
    }
}

#[test]
fn row_ranges_split_at_row_groups() {
    let mut rng = Rng::new(7);
    let t = GgmlType::Q4_K;
    let (rows, cols) = (16 * 5 + 3, 512);
    let src = random_blocks(&mut rng, t, rows, cols);
    let a = rows16(t, &src, rows, cols);
    let v = NativeView::parse(a.bytes()).unwrap();
    assert!(v.row_range(8, 16).is_none(), "not at a group boundary");
    assert!(v.row_range(16, 20).is_none(), "ends inside a group");
    let x = random_x(&mut rng, cols);
    let mut whole = vec![0f32; rows];
    matvec_with(Isa::best(), &v, &x, &mut whole);
    for (s, n) in [(0, 16), (16, 48), (64, rows - 64), (32, rows - 32)] {
        let sub = v.row_range(s, n).unwrap();
        let mut y = vec![0f32; n];
        matvec_with(Isa::best(), &sub, &x, &mut y);
        assert_eq!(bits(&y), bits(&whole[s..s + n]), "rows {s}..{}", s + n);
        let (mut a, mut b) = (vec![0f32; cols], vec![0f32; cols]);
        sub.dequantize_row(n - 1, &mut a);
        v.dequantize_row(s + n - 1, &mut b);
        assert_eq!(bits(&a), bits(&b));
    }
}

/// Rows16 buffers of random blocks, one per `(type, rows)`, `cols` wide:
/// the members of a fused call.
fn member_bufs(rng: &mut Rng, members: &[(GgmlType, usize)], cols: usize) -> Vec<Aligned> {
    members
        .iter()
        .map(|&(t, rows)| rows16(t, &random_blocks(rng, t, rows, cols), rows, cols))
        .collect()
}

/// The views of [`member_bufs`]' buffers.
fn member_views(bufs: &[Aligned]) -> Vec<NativeView<'_>> {
    bufs.iter()
        .map(|b| NativeView::parse(b.bytes()).unwrap())
        .collect()
}

#[test]
fn mixed_type_members_in_one_call_give_each_members_bits() {
    // q‖k‖v of Q4_K_M: Q4_K, Q4_K, Q6_K (and a ragged Q8_0 member, and an
    // F16 one that makes the call fall back to one member at a time).
    let mut rng = Rng::new(11);
    let cols = 512;
    let members = [
        (GgmlType::Q4_K, 48),
        (GgmlType::Q4_K, 16),
        (GgmlType::Q6_K, 21),
        (GgmlType::Q8_0, 40),
    ];
    let bufs = member_bufs(&mut rng, &members, cols);
    let f16 = {
        let src: Vec<u8> = (0..8 * cols)
            .flat_map(|i| half::f16::from_f32((i % 13) as f32 * 0.01 - 0.05).to_le_bytes())
            .collect();
        let mut out = Vec::new();
        transcode(GgmlType::F16, &src, 8, cols as u64, &mut out).unwrap();
        Aligned::new(&out)
    };
    let mut views = member_views(&bufs);
    let pool = Pool::new(2);
    for with_f16 in [false, true] {
        if with_f16 {
            views.push(NativeView::parse(f16.bytes()).unwrap());
        }
        let total: usize = views.iter().map(NativeView::rows).sum();
        for n in [1usize, 3, 9, 70] {
            let x = random_x(&mut rng, n * cols);
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; n * total];
                matmul_concat_on(isa, &pool, &views, &x, n, &mut got);
                let mut off = 0;
                for w in &views {
                    let r = w.rows();
                    let mut want = vec![0f32; n * r];
                    if n == 1 {
                        matvec_with(isa, w, &x, &mut want);
                    } else {
                        matmul_with(isa, w, &x, n, &mut want);
                    }
                    for v in 0..n {
                        assert_eq!(
                            bits(&got[v * total + off..v * total + off + r]),
                            bits(&want[v * r..(v + 1) * r]),
                            "{} member at {off}, n {n}, {isa:?}, f16 {with_f16}",
                            w.layout()
                        );
                    }
                    off += r;
                }
            }
        }
    }
}

/// Decode-sized calls (at most 8 vectors) large enough to be split share
/// their row groups among the threads by regions, each thread streaming its
/// own and then taking from the back of the others: on 2, 3 and 5 threads,
/// with members of mixed types and ragged row counts, every member's rows
/// are the scalar reference's bits on every ISA.
#[test]
fn decode_sized_calls_split_over_threads_give_the_reference_bits() {
    let mut rng = Rng::new(31);
    let cols = 2048;
    let members = [
        (GgmlType::Q4_K, 400),
        (GgmlType::Q6_K, 37),
        (GgmlType::IQ4_XS, 64),
        (GgmlType::Q8_0, 40),
    ];
    let bufs = member_bufs(&mut rng, &members, cols);
    let views = member_views(&bufs);
    // The Q4_K member alone is 450 KiB: above the 96 KiB from which a call
    // is split over the pool.
    for threads in [2, 3, 5] {
        let pool = Pool::new(threads);
        for n in [1usize, 2, 8] {
            let x = random_x(&mut rng, n * cols);
            let want: Vec<Vec<f32>> = views
                .iter()
                .map(|w| {
                    let mut y = vec![0f32; n * w.rows()];
                    matmul_ref(w, &x, n, &mut y);
                    y
                })
                .collect();
            for isa in Isa::available() {
                for single in [true, false] {
                    let ws = if single { &views[..1] } else { &views[..] };
                    let rows: usize = ws.iter().map(NativeView::rows).sum();
                    let mut got = vec![f32::NAN; n * rows];
                    matmul_concat_on(isa, &pool, ws, &x, n, &mut got);
                    let mut off = 0;
                    for (w, want) in ws.iter().zip(&want) {
                        let r = w.rows();
                        for v in 0..n {
                            assert_eq!(
                                bits(&got[v * rows + off..v * rows + off + r]),
                                bits(&want[v * r..(v + 1) * r]),
                                "{} at {off}, n {n}, {threads} threads, {isa:?}",
                                w.layout()
                            );
                        }
                        off += r;
                    }
                }
            }
        }
    }
}

/// Bits, with every NaN the same (its sign and payload depend on which
/// operand an ISA propagates, not on the formula).
fn bits_nan_as_one(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() })
        .collect()
}

#[test]
fn whole_row_ranges_dequantize_as_ggml_on_every_isa() {
    let mut rng = Rng::new(9);
    for t in TYPES {
        for &cols in cols_for(t) {
            for (rows, extreme) in [(1usize, false), (17, false), (40, true)] {
                let mut src = random_blocks(&mut rng, t, rows, cols);
                if extreme {
                    extreme_scales(&mut rng, t, &mut src);
                }
                let a = rows16(t, &src, rows, cols);
                let v = NativeView::parse(a.bytes()).unwrap();
                let row_bytes = src.len() / rows;
                let mut want = vec![0f32; rows * cols];
                for (r, w) in want.chunks_exact_mut(cols).enumerate() {
                    dequantize_ggml(t, &src[r * row_bytes..(r + 1) * row_bytes], w).unwrap();
                }
                for isa in Isa::available() {
                    // Whole groups, a range starting and ending inside
                    // groups, one row, none.
                    let ranges = [
                        (0, rows),
                        (rows / 3, rows - rows / 4),
                        (rows - 1, rows),
                        (0, 0),
                    ];
                    for (r0, r1) in ranges {
                        let mut got = vec![f32::NAN; (r1 - r0) * cols];
                        v.dequantize_rows_on(isa, r0, &mut got);
                        assert_eq!(
                            bits_nan_as_one(&got),
                            bits_nan_as_one(&want[r0 * cols..r1 * cols]),
                            "{t} {rows}x{cols} rows {r0}..{r1} on {}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}
