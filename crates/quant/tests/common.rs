//! Shared helpers: aligned buffers, reference files, random data.

use gpack_quant::GgmlType;
use std::path::PathBuf;

/// Bytes in a 16-aligned allocation (as a mapped tensor would be).
pub struct Aligned {
    buf: Vec<u128>,
    len: usize,
}

impl Aligned {
    pub fn new(bytes: &[u8]) -> Self {
        let mut buf = vec![0u128; bytes.len().div_ceil(16)];
        let len = bytes.len();
        bytemuck::cast_slice_mut::<u128, u8>(&mut buf)[..len].copy_from_slice(bytes);
        Aligned { buf, len }
    }
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u128, u8>(&self.buf)[..self.len]
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn testdata(rel: &str) -> PathBuf {
    repo_root().join("testdata").join(rel)
}

/// A `ref_<TYPE>.bin` file: (type, rows, cols, blocks, dequantized f32).
pub struct RefFile {
    pub t: GgmlType,
    pub rows: u64,
    pub cols: u64,
    pub blocks: Vec<u8>,
    pub deq: Vec<f32>,
}

pub fn read_ref(name: &str) -> RefFile {
    let b = std::fs::read(testdata(&format!("quant/ref_{name}.bin")))
        .expect("reference file (run make_reference.py)");
    assert_eq!(&b[..4], b"GQRF");
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let t = GgmlType::from_id(u32_at(4)).unwrap();
    let rows = u64::from(u32_at(8));
    let cols = u64::from(u32_at(12));
    let n = u64::from_le_bytes(b[16..24].try_into().unwrap()) as usize;
    let blocks = b[24..24 + n].to_vec();
    let deq = b[24 + n..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect::<Vec<_>>();
    assert_eq!(deq.len() as u64, rows * cols);
    RefFile {
        t,
        rows,
        cols,
        blocks,
        deq,
    }
}

/// A small deterministic PRNG (xorshift64*), so tests need no extra crates.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Uniform in [0, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Approximately standard normal (sum of uniforms).
    pub fn normal(&mut self) -> f32 {
        (0..12).map(|_| self.f32()).sum::<f32>() - 6.0
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}
