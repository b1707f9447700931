//! Quantized K/V cache kernels (`kernels::attn::kvq`): every ISA path gives
//! the scalar reference's bits; the reference is the f32 attention sums
//! over the dequantized cache (within rounding); the key block holds each
//! position's ggml block (the bytes `quantize_row` writes, scattered).

use crate::common::Rng;
use gpack_quant::kernels::attn::kvq::{self, KvQuant};
use gpack_quant::kernels::Isa;
use gpack_quant::GgmlType;

const KB: usize = 64;
const TYPES: [KvQuant; 2] = [KvQuant::Q8_0, KvQuant::Q4_0];

/// A key block of `KB` random positions of `d` dims, and their values.
fn key_block(rng: &mut Rng, t: KvQuant, d: usize) -> (Vec<u8>, Vec<Vec<f32>>) {
    let mut blk = vec![0u8; kvq::key_block_bytes(t, d, KB)];
    let keys: Vec<Vec<f32>> = (0..KB)
        .map(|_| (0..d).map(|_| rng.normal()).collect())
        .collect();
    for (j, k) in keys.iter().enumerate() {
        kvq::put_key(t, k, &mut blk, KB, j);
    }
    (blk, keys)
}

#[test]
fn key_block_holds_each_positions_ggml_block() {
    let mut rng = Rng::new(41);
    for t in TYPES {
        let g = match t {
            KvQuant::Q8_0 => GgmlType::Q8_0,
            KvQuant::Q4_0 => GgmlType::Q4_0,
        };
        let d = 64;
        let (blk, keys) = key_block(&mut rng, t, d);
        let bb = t.block_bytes();
        for (j, k) in keys.iter().enumerate() {
            let mut want = vec![0u8; kvq::row_bytes(t, d)];
            gpack_quant::quantize::quantize_row(g, k, None, &mut want).unwrap();
            for (gi, b) in want.chunks_exact(bb).enumerate() {
                let grp = &blk[gi * bb * KB..];
                assert_eq!(&grp[2 * j..2 * j + 2], &b[..2], "{t:?} scale pos {j}");
                for (i, &q) in b[2..].iter().enumerate() {
                    assert_eq!(grp[2 * KB + i * KB + j], q, "{t:?} quant {i} pos {j}");
                }
            }
        }
    }
}

#[test]
fn scores_paths_equal_the_reference_bit_for_bit() {
    let mut rng = Rng::new(42);
    for t in TYPES {
        for d in [16, 48, 64, 128] {
            let (blk, _) = key_block(&mut rng, t, d);
            for rows in 1..=6 {
                let q: Vec<f32> = (0..rows * d).map(|_| rng.normal()).collect();
                for (start, n) in [(0, 64), (0, 1), (5, 37), (17, 47), (63, 1), (3, 16), (0, 0)] {
                    let ld = n + 3;
                    let mut want = vec![f32::NAN; rows * ld];
                    kvq::scores_group_ref(t, &q, d, 0.125, &blk, KB, start, n, &mut want, ld);
                    for isa in Isa::available() {
                        let mut got = vec![f32::NAN; rows * ld];
                        kvq::scores_group_on(
                            isa, t, &q, d, 0.125, &blk, KB, start, n, &mut got, ld,
                        );
                        for i in 0..rows {
                            let (g, w) = (&got[i * ld..i * ld + n], &want[i * ld..i * ld + n]);
                            let same = g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(same, "{t:?} {isa:?} d {d} rows {rows} start {start} n {n}: {g:?} vs {w:?}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn weighted_paths_equal_the_reference_bit_for_bit() {
    let mut rng = Rng::new(43);
    for t in TYPES {
        for w in [16, 64, 80, 128, 256] {
            let rb = kvq::row_bytes(t, w);
            let len_max = 70;
            let mut v = vec![0u8; len_max * rb];
            for r in v.chunks_exact_mut(rb) {
                let x: Vec<f32> = (0..w).map(|_| rng.normal()).collect();
                kvq::quantize_row(t, &x, r);
            }
            for rows in 1..=6 {
                for len in [1, 7, 33, 70] {
                    let lda = len + 2;
                    let a: Vec<f32> = (0..rows * lda).map(|_| rng.f32()).collect();
                    let mut want = vec![f32::NAN; rows * w];
                    kvq::weighted_group_ref(t, &a, lda, len, &v, &mut want, w);
                    for isa in Isa::available() {
                        let mut got = vec![f32::NAN; rows * w];
                        kvq::weighted_group_on(isa, t, &a, lda, len, &v, &mut got, w);
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "{t:?} {isa:?} w {w} rows {rows} len {len}");
                    }
                }
            }
        }
    }
}

/// The reference against the f32 sums over the dequantized cache: equal
/// up to f32 rounding (the scale is applied per block, not per element).
#[test]
fn reference_is_the_f32_sums_over_dequantized_values() {
    let mut rng = Rng::new(44);
    for t in TYPES {
        let d = 64;
        let (blk, keys) = key_block(&mut rng, t, d);
        let q: Vec<f32> = (0..d).map(|_| rng.normal()).collect();
        let mut sc = vec![0f32; KB];
        kvq::scores_group_ref(t, &q, d, 0.125, &blk, KB, 0, KB, &mut sc, KB);
        for (j, k) in keys.iter().enumerate() {
            let mut rb = vec![0u8; kvq::row_bytes(t, d)];
            kvq::quantize_row(t, k, &mut rb);
            let mut deq = vec![0f32; d];
            kvq::dequantize_row(t, &rb, &mut deq);
            let want: f64 = q
                .iter()
                .zip(&deq)
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum::<f64>()
                * 0.125;
            assert!(
                (sc[j] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()),
                "{t:?} pos {j}: {} vs {want}",
                sc[j]
            );
        }
        let w = 128;
        let rbw = kvq::row_bytes(t, w);
        let len = 40;
        let mut v = vec![0u8; len * rbw];
        let mut deq = vec![0f32; len * w];
        for (r, dq) in v.chunks_exact_mut(rbw).zip(deq.chunks_exact_mut(w)) {
            let x: Vec<f32> = (0..w).map(|_| rng.normal()).collect();
            kvq::quantize_row(t, &x, r);
            kvq::dequantize_row(t, r, dq);
        }
        let a: Vec<f32> = (0..len).map(|_| rng.f32()).collect();
        let mut out = vec![0f32; w];
        kvq::weighted_group_ref(t, &a, len, len, &v, &mut out, w);
        for (x, o) in out.iter().enumerate() {
            let want: f64 = (0..len).map(|j| a[j] as f64 * deq[j * w + x] as f64).sum();
            assert!(
                (*o as f64 - want).abs() < 1e-5 * (1.0 + want.abs()),
                "{t:?} out {x}: {o} vs {want}"
            );
        }
    }
}
