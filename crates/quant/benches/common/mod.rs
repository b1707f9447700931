//! Helpers shared by the quant benches: a seeded generator and random native
//! tensors transcoded from random ggml blocks (as the runtime loads GGUFs).

#![allow(dead_code)]

use criterion::Criterion;
use gpack_quant::{transcode, transcode_with_f16_scales, GgmlType, NativeView};
use std::time::Duration;

/// The benches' criterion settings: `measure_ms` per benchmark, shorter
/// with `GPACK_BENCH_QUICK=1`.
pub fn criterion(measure_ms: u64) -> Criterion {
    let quick = std::env::var_os("GPACK_BENCH_QUICK").is_some();
    Criterion::default()
        .sample_size(if quick { 10 } else { 20 })
        .warm_up_time(Duration::from_millis(if quick { 100 } else { 300 }))
        .measurement_time(Duration::from_millis(if quick { 300 } else { measure_ms }))
}

/// xorshift64* with a crude normal.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn normal(&mut self) -> f32 {
        (0..4)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32)
            .sum::<f32>()
            - 2.0
    }
}

/// A native tensor transcoded from random `t` blocks (small f16 scales), in
/// a 16-aligned buffer; with the exact f16 scale copies when `f16_scales`.
pub struct Tensor {
    buf: Vec<u128>,
    len: usize,
}
impl Tensor {
    pub fn new(t: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Tensor {
        Self::with_scales(t, rows, cols, rng, false)
    }
    pub fn with_scales(
        t: GgmlType,
        rows: usize,
        cols: usize,
        rng: &mut Rng,
        f16_scales: bool,
    ) -> Tensor {
        let (bs, ts) = t.block();
        let nblk = rows * cols / bs as usize;
        let mut src: Vec<u8> = (0..nblk * ts as usize).map(|_| rng.next() as u8).collect();
        let f16_at: &[usize] = match t {
            GgmlType::Q4_0 | GgmlType::Q8_0 | GgmlType::Q5_0 => &[0],
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q6_K => &[208],
            GgmlType::F16 => &[],
            _ => &[],
        };
        if t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::F32 {
            let vals: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
            src = match t {
                GgmlType::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
                GgmlType::F16 => vals
                    .iter()
                    .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                    .collect(),
                _ => vals
                    .iter()
                    .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                    .collect(),
            };
        } else {
            for blk in src.chunks_exact_mut(ts as usize) {
                for &o in f16_at {
                    blk[o..o + 2]
                        .copy_from_slice(&half::f16::from_f32(rng.normal() * 0.01).to_le_bytes());
                }
            }
        }
        let mut out = Vec::new();
        if f16_scales {
            transcode_with_f16_scales(t, &src, rows as u64, cols as u64, &mut out).unwrap();
        } else {
            transcode(t, &src, rows as u64, cols as u64, &mut out).unwrap();
        }
        let mut buf = vec![0u128; out.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut buf)[..out.len()].copy_from_slice(&out);
        Tensor {
            buf,
            len: out.len(),
        }
    }
    pub fn view(&self) -> NativeView<'_> {
        NativeView::parse(&bytemuck::cast_slice::<u128, u8>(&self.buf)[..self.len]).unwrap()
    }
}
