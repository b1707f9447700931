//! The GPU matmul of every layout it reads against the CPU scalar reference
//! (gpack-quant's `dequantize_row`, dotted in f64), on lavapipe when there is
//! no hardware GPU. Every test runs twice: with the adapter's `shader-f16`
//! and subgroups, and with both withheld (the fallback shaders).
//!
//! Tolerance: |gpu − exact| ≤ TOL(layout) · Σ|w·x| + 1e-30 per output. The
//! decoders reproduce the reference's f32 weights bit for bit (f16 and 6-bit
//! scale products are exact in f32), so what remains is the f32 summation
//! order: at most cols/256 + 40 rounding steps on the shapes here, each
//! ≤ 2^-24 of the running magnitude.

use gpack_gpu::matvec::{matmul_max_workgroups, matmul_source, supported_layouts, supports};
use gpack_gpu::{matmul, Allow, Error, Gpu, GpuMatrix, Want};
use gpack_quant::{
    quantize, quantize_with_f16_scales, transcode, transcode_canonical, GgmlType, Layout,
    NativeTensorHeader, NativeView,
};
use std::sync::{Arc, OnceLock};

/// The two feature sets every test runs with.
fn gpus() -> [&'static Gpu; 2] {
    static FULL: OnceLock<Gpu> = OnceLock::new();
    static BARE: OnceLock<Gpu> = OnceLock::new();
    let open = |allow| {
        Gpu::open_with(Want::Any, allow)
            .expect("a Vulkan adapter (apt-get install mesa-vulkan-drivers libvulkan1)")
    };
    [
        FULL.get_or_init(|| {
            open(Allow {
                int8_dot: false,
                ..Default::default()
            })
        }),
        BARE.get_or_init(|| {
            open(Allow {
                f16: false,
                subgroups: false,
                int8_dot: false,
                ..Default::default()
            })
        }),
    ]
}

/// The adapter with packed int8 dot products (the Q8_0/Q4_0 int8 path).
fn int8_gpu() -> &'static Gpu {
    static INT8: OnceLock<Gpu> = OnceLock::new();
    INT8.get_or_init(|| {
        Gpu::open_with(Want::Any, Allow::default())
            .expect("a Vulkan adapter (apt-get install mesa-vulkan-drivers libvulkan1)")
    })
}

/// The tolerance of each layout, relative to Σ|w·x| (module docs).
fn tolerance(layout: Layout) -> f64 {
    match layout {
        // Exact f32 weights; f32 sums over up to 2048 columns.
        Layout::F32 | Layout::F16 | Layout::BF16 => 2e-5,
        // Integer codes times f32 scales (and plus mins): exact products.
        Layout::I8Sym { .. } | Layout::I8Asym { .. } => 2e-5,
        Layout::I4Sym { .. } | Layout::I4Asym { .. } => 2e-5,
        // ggml blocks: f16 (or E8M0) scales times small integers, exact.
        Layout::Rows16(_) => 2e-5,
        l => panic!("no tolerance for {l}"),
    }
}

/// Bytes in a 16-aligned allocation, as a mapped tensor is.
struct Aligned {
    buf: Vec<u128>,
    len: usize,
}

impl Aligned {
    fn new(bytes: &[u8]) -> Self {
        let mut buf = vec![0u128; bytes.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut buf)[..bytes.len()].copy_from_slice(bytes);
        Aligned {
            buf,
            len: bytes.len(),
        }
    }
    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u128, u8>(&self.buf)[..self.len]
    }
}

/// A small deterministic PRNG (xorshift64*), as gpack-quant's tests use.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        (0..12).map(|_| self.f32()).sum::<f32>() - 6.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Offsets of each type's f16 scale fields in its block (ggml-common.h),
/// as gpack-quant's tests list them.
fn f16_fields(t: GgmlType) -> &'static [usize] {
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

/// Random valid ggml blocks (finite scales), every 7th block all zero, as
/// gpack-quant's tests build them. `edge`: every nonzero block gets its codes
/// at the maximum (all bits set) and an extreme f16 scale (0, the smallest
/// subnormal, 65504, ±1), MXFP4 an exponent of 0, 1 (subnormal scales) or
/// up to 2^12.
fn random_blocks(rng: &mut Rng, t: GgmlType, rows: usize, cols: usize, edge: bool) -> Vec<u8> {
    let (bs, ts) = t.block();
    let n = rows * cols / bs as usize;
    let mut b = rng.bytes(n * ts as usize);
    const EXTREME: [u16; 5] = [0x0000, 0x0001, 0x7BFF, 0x3C00, 0xBC00];
    for (i, blk) in b.chunks_exact_mut(ts as usize).enumerate() {
        if i % 7 == 3 {
            blk.fill(0);
            continue;
        }
        if edge {
            blk.fill(0xFF);
        }
        for &o in f16_fields(t) {
            let v = if edge {
                half::f16::from_bits(EXTREME[rng.below(EXTREME.len())])
            } else {
                half::f16::from_f32(rng.normal() * 0.02)
            };
            blk[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
        if t == GgmlType::MXFP4 {
            blk[0] = match (edge, i) {
                (true, _) => [0, 1, 127, 128, 140][rng.below(5)],
                (false, 5) => 0,
                (false, _) => 112 + rng.below(20) as u8,
            };
        }
    }
    b
}

fn random_x(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    if n >= 64 {
        x[32..64].fill(0.0); // an all-zero activation unit
    }
    x
}

/// A Rows16 tensor of `t` as convert writes it.
fn rows16(rng: &mut Rng, t: GgmlType, rows: usize, cols: usize, edge: bool) -> Aligned {
    let src = random_blocks(rng, t, rows, cols, edge);
    let mut out = Vec::new();
    transcode_canonical(t, &src, rows as u64, cols as u64, &mut out).unwrap();
    let a = Aligned::new(&out);
    assert_eq!(
        NativeView::parse(a.bytes()).unwrap().layout(),
        Layout::Rows16(t)
    );
    a
}

/// An F32, F16 or BF16 tensor of normal values.
fn float(rng: &mut Rng, t: GgmlType, rows: usize, cols: usize) -> Aligned {
    let x: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
    let src: Vec<u8> = match t {
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
    let mut out = Vec::new();
    transcode_canonical(t, &src, rows as u64, cols as u64, &mut out).unwrap();
    Aligned::new(&out)
}

/// `--quant int8|int4`'s writer: `target` quantized from random f32 values,
/// with or without the f16 copy of the scales.
fn quantized(rng: &mut Rng, target: Layout, rows: usize, cols: usize, f16: bool) -> Aligned {
    let x: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
    let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = Vec::new();
    let (r, c) = (rows as u64, cols as u64);
    if f16 {
        quantize_with_f16_scales(GgmlType::F32, &src, r, c, target, &mut out).unwrap();
    } else {
        quantize(GgmlType::F32, &src, r, c, target, &mut out).unwrap();
    }
    Aligned::new(&out)
}

/// A native I8/I4 tensor with random codes, scales and mins (no writer
/// makes every group and shape, e.g. I8Sym/G16 of 48 columns).
fn random_native(rng: &mut Rng, layout: Layout, rows: usize, cols: usize) -> Aligned {
    let (h, len) = NativeTensorHeader::new(layout, rows as u64, cols as u64, false).unwrap();
    let mut b = vec![0u8; len as usize];
    b[..64].copy_from_slice(&h.to_bytes());
    let codes = match layout {
        Layout::I4Sym { .. } | Layout::I4Asym { .. } => rows * cols / 2,
        _ => rows * cols,
    };
    let c0 = h.codes_off as usize;
    b[c0..c0 + codes].copy_from_slice(&rng.bytes(codes));
    let groups = rows * cols / layout.group() as usize;
    for off in [h.scales_off, h.mins_off] {
        if off == 0 {
            continue;
        }
        for g in 0..groups {
            let v = rng.normal() * 0.05;
            let o = off as usize + 4 * g;
            b[o..o + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    Aligned::new(&b)
}

/// Runs `w · x` for `n` vectors on the GPU and checks every output against
/// the f64 dot of the reference's dequantized rows.
fn check(gpu: &Gpu, tensor: &[u8], n: usize, rng: &mut Rng, what: &str) {
    let v = NativeView::parse(tensor).unwrap();
    let m = GpuMatrix::upload(gpu, "w", tensor).unwrap();
    check_matrix(gpu, &v, &m, n, rng, what, u32::MAX);
}

fn check_matrix(
    gpu: &Gpu,
    v: &NativeView<'_>,
    m: &GpuMatrix,
    n: usize,
    rng: &mut Rng,
    what: &str,
    max_workgroups: u32,
) {
    let (rows, cols) = (v.rows(), v.cols());
    let x = random_x(rng, n * cols);
    let xb = gpu.upload("x", bytemuck::cast_slice(&x)).unwrap();
    let yb = gpu.storage("y", (n * rows * 4) as u64).unwrap();
    matmul_max_workgroups(gpu, m, &xb, n, &yb, max_workgroups).unwrap();
    let y = gpu.read_f32(&yb, n * rows).unwrap();
    let tol = tolerance(v.layout());
    let mut w = vec![0f32; cols];
    for r in 0..rows {
        v.dequantize_row(r, &mut w);
        for j in 0..n {
            let xs = &x[j * cols..(j + 1) * cols];
            let exact: f64 = w.iter().zip(xs).map(|(a, b)| *a as f64 * *b as f64).sum();
            let mag: f64 = w
                .iter()
                .zip(xs)
                .map(|(a, b)| (*a as f64 * *b as f64).abs())
                .sum();
            let got = y[j * rows + r] as f64;
            assert!(
                (got - exact).abs() <= tol * mag + 1e-30,
                "{what} ({}, f16 {}): {rows}x{cols} n {n}, row {r} vector {j}: \
                 {got} vs {exact} (Σ|wx| {mag}, tolerance {tol})",
                v.layout(),
                gpu.caps().f16,
            );
        }
    }
}

const NS: [usize; 4] = [1, 3, 8, 11];

fn rows16_types(types: &[GgmlType], edge: bool, seed: u64) {
    for gpu in gpus() {
        let mut rng = Rng::new(seed);
        for &t in types {
            let shapes: &[(usize, usize)] = if t.block_size() == 256 {
                &[(1, 256), (5, 512), (17, 768), (40, 256)]
            } else {
                &[(1, 32), (5, 96), (17, 576), (40, 64)]
            };
            for &(rows, cols) in shapes {
                let a = rows16(&mut rng, t, rows, cols, edge);
                for n in NS {
                    check(gpu, a.bytes(), n, &mut rng, t.name());
                }
            }
        }
    }
}

#[test]
fn rows16_legacy_types_match_the_reference() {
    use GgmlType as T;
    rows16_types(&[T::Q4_0, T::Q4_1, T::Q5_0, T::Q5_1, T::Q8_0], false, 1);
}

#[test]
fn rows16_k_types_match_the_reference() {
    use GgmlType as T;
    rows16_types(&[T::Q2_K, T::Q3_K, T::Q4_K, T::Q5_K, T::Q6_K], false, 2);
}

#[test]
fn rows16_lookup_types_match_the_reference() {
    use GgmlType as T;
    rows16_types(&[T::IQ4_NL, T::IQ4_XS, T::MXFP4], false, 3);
}

#[test]
fn rows16_edge_case_blocks_match_the_reference() {
    use GgmlType as T;
    rows16_types(
        &[
            T::Q4_0,
            T::Q4_1,
            T::Q5_0,
            T::Q5_1,
            T::Q8_0,
            T::Q2_K,
            T::Q3_K,
            T::Q4_K,
            T::Q5_K,
            T::Q6_K,
            T::IQ4_NL,
            T::IQ4_XS,
            T::MXFP4,
        ],
        true,
        4,
    );
}

#[test]
fn float_layouts_match_the_reference() {
    for gpu in gpus() {
        let mut rng = Rng::new(5);
        for t in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            // Ragged: odd cols (F16/BF16 rows start mid-word), a partial
            // last unit, rows not a multiple of 16.
            for (rows, cols) in [(1, 1), (3, 7), (5, 16), (9, 33), (17, 100), (20, 576)] {
                let a = float(&mut rng, t, rows, cols);
                for n in NS {
                    check(gpu, a.bytes(), n, &mut rng, t.name());
                }
            }
        }
    }
}

#[test]
fn int_layouts_match_the_reference() {
    for gpu in gpus() {
        let mut rng = Rng::new(6);
        // The layouts `--quant int8|int4` writes, from the real writer, with
        // and without the f16 copy of the scales.
        for target in [
            Layout::I8Sym { group: 32 },
            Layout::I4Asym { group: 32 },
            Layout::I4Sym { group: 32 },
        ] {
            for (rows, cols) in [(1, 32), (7, 96), (33, 576)] {
                for f16 in [false, true] {
                    let a = quantized(&mut rng, target, rows, cols, f16);
                    for n in NS {
                        check(gpu, a.bytes(), n, &mut rng, "quantize");
                    }
                }
            }
        }
        // Every I8/I4 layout and group with random codes, including
        // I8/G16 rows of an odd number of groups (a half unit at the end).
        for layout in [
            Layout::I8Sym { group: 16 },
            Layout::I8Sym { group: 32 },
            Layout::I8Asym { group: 16 },
            Layout::I8Asym { group: 32 },
            Layout::I4Sym { group: 32 },
            Layout::I4Asym { group: 32 },
        ] {
            let g = layout.group() as usize;
            for (rows, cols) in [(1, g), (5, 3 * g), (17, 64), (40, 320)] {
                let a = random_native(&mut rng, layout, rows, cols);
                for n in [1, 8] {
                    check(gpu, a.bytes(), n, &mut rng, "random codes");
                }
            }
        }
        // The transcodes of ggml types with an exact native layout.
        for t in [
            GgmlType::Q6_K,
            GgmlType::Q2_K,
            GgmlType::Q5_1,
            GgmlType::Q4_0,
        ] {
            let (rows, cols) = (19, 512);
            let src = random_blocks(&mut rng, t, rows, cols, false);
            let mut out = Vec::new();
            transcode(t, &src, rows as u64, cols as u64, &mut out).unwrap();
            let a = Aligned::new(&out);
            check(gpu, a.bytes(), 3, &mut rng, t.name());
        }
    }
}

#[test]
fn row_pieces_at_an_offset_give_the_whole_matrix_results() {
    for gpu in gpus() {
        let mut rng = Rng::new(7);
        let tensors = [
            rows16(&mut rng, GgmlType::Q4_K, 16 * 9 + 5, 512, false),
            rows16(&mut rng, GgmlType::Q8_0, 100, 96, false),
            quantized(&mut rng, Layout::I4Asym { group: 32 }, 70, 96, true),
            random_native(&mut rng, Layout::I8Asym { group: 16 }, 50, 48),
            float(&mut rng, GgmlType::F16, 37, 33),
        ];
        for a in &tensors {
            let v = NativeView::parse(a.bytes()).unwrap();
            // The tensor 4 KiB + 260 bytes into a buffer of other bytes, so
            // no array starts at a bindable offset.
            let at = 4096 + 260;
            let mut bytes = rng.bytes(at);
            bytes.extend_from_slice(a.bytes());
            bytes.extend_from_slice(&rng.bytes(100));
            let buf = Arc::new(gpu.upload("section", &bytes).unwrap());
            let whole = GpuMatrix::in_buffer(gpu, buf.clone(), at as u64, &v).unwrap();
            assert_eq!(whole.pieces(), 1);
            check_matrix(gpu, &v, &whole, 3, &mut rng, "whole", u32::MAX);
            // Bindings of at most ~3 row groups: several pieces.
            let per16 = a.bytes().len() as u64 / v.rows().div_ceil(16) as u64;
            let cap = 3 * per16 + 2 * 256;
            let split = GpuMatrix::in_buffer_split(gpu, buf, at as u64, &v, cap).unwrap();
            assert!(
                split.pieces() > 1,
                "{}: {} piece(s)",
                v.layout(),
                split.pieces()
            );
            for n in [1, 8] {
                check_matrix(gpu, &v, &split, n, &mut rng, "pieces", u32::MAX);
            }
        }
    }
}

#[test]
fn many_row_groups_split_over_two_dispatch_axes() {
    for gpu in gpus() {
        let mut rng = Rng::new(8);
        let a = rows16(&mut rng, GgmlType::Q4_0, 16 * 7 + 3, 64, false);
        let v = NativeView::parse(a.bytes()).unwrap();
        let m = GpuMatrix::upload(gpu, "w", a.bytes()).unwrap();
        for max in [1, 2, 3] {
            check_matrix(gpu, &v, &m, 3, &mut rng, "two axes", max);
        }
    }
}

#[test]
fn a_vocabulary_sized_head_runs() {
    // 152064 rows (qwen2's vocabulary): 9504 row groups in one dispatch.
    for gpu in gpus() {
        let mut rng = Rng::new(9);
        let a = rows16(&mut rng, GgmlType::Q8_0, 152_064, 32, false);
        check(gpu, a.bytes(), 1, &mut rng, "head");
    }
}

#[test]
fn unsupported_layouts_are_refused_by_name() {
    let gpu = gpus()[0];
    // IQ4_NL has no exact native layout: `transcode` keeps its raw blocks.
    let mut rng = Rng::new(10);
    let src = random_blocks(&mut rng, GgmlType::IQ4_NL, 2, 64, false);
    let mut out = Vec::new();
    transcode(GgmlType::IQ4_NL, &src, 2, 64, &mut out).unwrap();
    let a = Aligned::new(&out);
    assert_eq!(
        NativeView::parse(a.bytes()).unwrap().layout(),
        Layout::Ggml(GgmlType::IQ4_NL)
    );
    let e = GpuMatrix::upload(gpu, "w", a.bytes()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Layout {
                layout: "IQ4_NL",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("IQ4_NL"), "{e}");
    assert!(!supports(Layout::Ggml(GgmlType::Q4_K)));
    assert!(matmul_source(Layout::Ggml(GgmlType::Q4_K), 1).is_err());
    // Bytes that are not a native tensor.
    let e = GpuMatrix::upload(gpu, "w", &[0u8; 10]).unwrap_err();
    assert!(matches!(e, Error::Tensor(_)), "{e}");
}

#[test]
fn buffers_too_small_are_errors() {
    let gpu = gpus()[0];
    let mut rng = Rng::new(11);
    let a = rows16(&mut rng, GgmlType::Q4_0, 20, 64, false);
    let m = GpuMatrix::upload(gpu, "w", a.bytes()).unwrap();
    let x = gpu.storage("x", 64 * 4).unwrap();
    let y = gpu.storage("y", 20 * 4).unwrap();
    matmul(gpu, &m, &x, 1, &y).unwrap();
    gpu.wait().unwrap();
    let e = matmul(gpu, &m, &x, 2, &y).unwrap_err();
    assert!(matches!(e, Error::Size { .. }), "{e}");
    let e = matmul(gpu, &m, &x, 0, &y).unwrap_err();
    assert!(matches!(e, Error::Size { .. }), "{e}");
}

#[test]
fn every_supported_layout_has_a_source_and_a_tolerance() {
    for l in supported_layouts() {
        assert!(supports(l), "{l}");
        tolerance(l);
        for nb in [1, 4, 8] {
            matmul_source(l, nb).unwrap();
        }
    }
}

/// The packed-int8 path (Q8_0, Q4_0 where the adapter's WGSL has
/// `dot4I8Packed`: every native wgpu backend, lavapipe here) against the
/// CPU's scalar reference of the same arithmetic (`gpack_quant::matmul_ref`:
/// activations to int8 per 32 with an f16 scale, integer sums per block):
/// within 2e-3 of Σ|w·x| (a code rounded the other way at a half, from the
/// shader's `1/d`, moves one product by d_x·|w|; measured below), while the
/// f32 path of the same matrix stays within its 2e-5 of the exact product.
/// Other layouts keep the f32 path.
#[test]
fn int8_path_matches_the_cpu_integer_reference() {
    use GgmlType as T;
    let g = int8_gpu();
    assert!(
        g.caps().int8_dot,
        "wgpu on a native backend has dot4I8Packed"
    );
    let mut rng = Rng::new(7);
    let mut worst = 0f64;
    for t in [T::Q8_0, T::Q4_0] {
        for &(rows, cols) in &[(1, 32), (5, 96), (17, 576), (40, 2048)] {
            let a = rows16(&mut rng, t, rows, cols, false);
            let v = NativeView::parse(a.bytes()).unwrap();
            let m = GpuMatrix::upload(g, "w", a.bytes()).unwrap();
            assert!(m.int8_path(g), "{t:?} takes the int8 path");
            for n in NS {
                let x = random_x(&mut rng, n * cols);
                let xb = g.upload("x", bytemuck::cast_slice(&x)).unwrap();
                let yb = g.storage("y", (n * rows * 4) as u64).unwrap();
                matmul(g, &m, &xb, n, &yb).unwrap();
                let y = g.read_f32(&yb, n * rows).unwrap();
                let mut cpu = vec![0f32; n * rows];
                gpack_quant::matmul_ref(&v, &x, n, &mut cpu);
                let mut w = vec![0f32; cols];
                for r in 0..rows {
                    v.dequantize_row(r, &mut w);
                    for j in 0..n {
                        let xs = &x[j * cols..(j + 1) * cols];
                        let mag: f64 = w
                            .iter()
                            .zip(xs)
                            .map(|(a, b)| (*a as f64 * *b as f64).abs())
                            .sum();
                        let (got, want) = (y[j * rows + r] as f64, cpu[j * rows + r] as f64);
                        let d = (got - want).abs() / mag.max(1e-30);
                        worst = worst.max(d);
                        assert!(
                            d <= 2e-3,
                            "{t:?} {rows}x{cols} n {n} row {r} vector {j}: GPU int8 {got}, CPU {want} \
                             ({d:.2e} of Σ|wx| {mag})"
                        );
                    }
                }
            }
            // The f32 path of the same matrix on the adapter without it.
            check(gpus()[0], a.bytes(), 3, &mut rng, t.name());
        }
    }
    eprintln!("int8 path: worst |gpu - cpu| / Σ|wx| = {worst:.2e}");
    // A layout without an int8 decoder keeps the f32 path.
    let a = rows16(&mut rng, T::Q4_1, 16, 64, false);
    let m = GpuMatrix::upload(g, "w", a.bytes()).unwrap();
    assert!(!m.int8_path(g), "Q4_1 keeps the f32 path");
    check(g, a.bytes(), 2, &mut rng, "Q4_1 beside the int8 path");
}
