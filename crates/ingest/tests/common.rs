//! Shared helpers: fixture paths and a hand-made GGUF byte builder.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository's `testdata/`.
pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// `testdata/tiny/<arch>`.
pub fn tiny(arch: &str) -> PathBuf {
    testdata().join("tiny").join(arch)
}

/// The tiny fixtures with GGUFs from llama.cpp's converter: the testkit's
/// families, Gemma 3n (which llama.cpp's runtime cannot run at that size)
/// DeepSeek's V2-Lite and V3 variants and GLM-4.7-Flash with its MTP block.
pub fn arches() -> impl Iterator<Item = &'static str> {
    gpack_testkit::TINY_FAMILIES.into_iter().chain([
        "gemma3n",
        "deepseek2-lite",
        "deepseek2-v3",
        "glm4-mtp",
    ])
}

/// Little-endian GGUF bytes, written field by field so tests can lie.
#[derive(Default, Clone)]
pub struct B(pub Vec<u8>);

impl B {
    pub fn new() -> Self {
        B(Vec::new())
    }
    /// Magic + version + counts.
    pub fn header(version: u32, tensors: u64, kvs: u64) -> Self {
        B::new().raw(b"GGUF").u32(version).u64(tensors).u64(kvs)
    }
    pub fn raw(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u8(self, v: u8) -> Self {
        self.raw(&[v])
    }
    pub fn u32(self, v: u32) -> Self {
        self.raw(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Self {
        self.raw(&v.to_le_bytes())
    }
    pub fn str(self, s: &str) -> Self {
        self.u64(s.len() as u64).raw(s.as_bytes())
    }
    /// A key with a UINT32 value.
    pub fn kv_u32(self, k: &str, v: u32) -> Self {
        self.str(k).u32(4).u32(v)
    }
    /// A tensor descriptor.
    pub fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Self {
        let mut b = self.str(name).u32(dims.len() as u32);
        for d in dims {
            b = b.u64(*d);
        }
        b.u32(ty).u64(offset)
    }
    /// Zero padding up to a multiple of `a`.
    pub fn pad(mut self, a: usize) -> Self {
        while !self.0.len().is_multiple_of(a) {
            self.0.push(0);
        }
        self
    }
    pub fn zeros(mut self, n: usize) -> Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Bit pattern of `v` rounded to f16 (round to nearest even, as numpy does).
pub fn f16_bits(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}
