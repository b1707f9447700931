//! A sequence's KV cache: keys transposed in blocks of [`KB`] positions,
//! values by position, each as f32 or f16.

use crate::config::Config;
use crate::ops;

/// Key or value storage of a sequence: f32, or IEEE half floats (as
/// llama.cpp keeps its cache; half the bytes for attention to stream).
#[derive(Debug)]
pub(super) enum Kv {
    F32(Vec<f32>),
    F16(Vec<u16>),
}

impl Kv {
    pub(super) fn new(len: usize, f16: bool) -> Kv {
        if f16 {
            Kv::F16(vec![0; len])
        } else {
            Kv::F32(vec![0.0; len])
        }
    }
    pub(super) fn bytes(&self) -> usize {
        match self {
            Kv::F32(v) => v.len() * 4,
            Kv::F16(v) => v.len() * 2,
        }
    }
    #[inline]
    pub(super) fn set(&mut self, i: usize, x: f32) {
        match self {
            Kv::F32(v) => v[i] = x,
            Kv::F16(v) => v[i] = half::f16::from_f32(x).to_bits(),
        }
    }
    /// [`ops::scores_transposed_group`] over one block of keys `kt` (a
    /// range of this cache: `[head_dim][KB]`), `n` positions from `start` in
    /// the block, for the queries `q` (`d` each), query `i`'s scores at
    /// `sc[i · ld ..]`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scores_group(
        &self,
        q: &[f32],
        d: usize,
        scale: f32,
        kt: std::ops::Range<usize>,
        start: usize,
        n: usize,
        sc: &mut [f32],
        ld: usize,
    ) {
        match self {
            Kv::F32(k) => ops::scores_transposed_group(q, d, scale, &k[kt], KB, start, n, sc, ld),
            Kv::F16(k) => ops::scores_transposed_group(q, d, scale, &k[kt], KB, start, n, sc, ld),
        }
    }
    /// [`ops::weighted_rows_group`] over the value rows in `v` (a range of
    /// this cache, rows `stride` apart): probability rows `a[i · lda ..][..len]`,
    /// outputs `w` wide.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn weighted_group(
        &self,
        a: &[f32],
        lda: usize,
        len: usize,
        v: std::ops::Range<usize>,
        stride: usize,
        out: &mut [f32],
        w: usize,
    ) {
        match self {
            Kv::F32(x) => ops::weighted_rows_group(a, lda, len, &x[v], stride, out, w),
            Kv::F16(x) => ops::weighted_rows_group(a, lda, len, &x[v], stride, out, w),
        }
    }
    /// [`ops::weighted_transposed_group`] over one block of keys `kt` (a
    /// range of this cache: `[head_dim][KB]`), `n` positions from `start`
    /// in the block: `out[i·w + j] += Σ a[i·lda + p] · kt[j][start + p]`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn weighted_transposed_group(
        &self,
        a: &[f32],
        lda: usize,
        kt: std::ops::Range<usize>,
        start: usize,
        n: usize,
        out: &mut [f32],
        w: usize,
    ) {
        match self {
            Kv::F32(k) => ops::weighted_transposed_group(a, lda, &k[kt], KB, start, n, out, w),
            Kv::F16(k) => ops::weighted_transposed_group(a, lda, &k[kt], KB, start, n, out, w),
        }
    }
    pub(super) fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Kv::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            Kv::F16(v) => v[at..at + src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &x)| *d = half::f16::from_f32(x).to_bits()),
        }
    }
}

/// One sequence's KV cache.
#[derive(Debug)]
pub struct Sequence {
    /// Positions the cache holds.
    pub(super) n_ctx: usize,
    /// Next position.
    pub(super) pos: usize,
    /// `[n_layer][n_head_kv][n_ctx / KB][head_dim][KB]` keys (rotated),
    /// transposed within blocks of [`KB`] positions so that q·K over a block
    /// runs over contiguous positions (vectorizes without horizontal sums;
    /// see `ops::scores_transposed`), and blocked so that one position's
    /// write and a short context's read touch a few pages, not `head_dim`
    /// pages `n_ctx · 4` bytes apart (see [`KB`]).
    pub(super) k_cache: Kv,
    /// `[n_layer][n_head_kv][n_ctx][head_dim_v]` values: one head's rows
    /// contiguous, as attention reads them ([`Sequence::v_at`]).
    pub(super) v_cache: Kv,
    /// The GPU blocks' f16 caches, made at the sequence's first step on a
    /// model loaded for a GPU.
    pub(super) gpu: Option<super::gpu::GpuKv>,
}

/// Positions per block of the transposed key cache.
///
/// Blocks, not one `[head_dim][n_ctx]` plane per head: with a plane, the
/// keys of a position are written `n_ctx · 4` bytes apart (4 KiB at a
/// 1024-token context) and every (row, head) score pass reads its rows as
/// far apart, which makes the key writes and `scores_transposed` a large
/// share of a batched server step (figures: docs/perf-history/kernels.md).
pub const KB: usize = 64;

impl Sequence {
    /// Index of key dim `d` of kv head `kvh`, layer `l`, position `p`.
    #[inline]
    pub(super) fn k_at(&self, c: &Config, l: usize, kvh: usize, d: usize, p: usize) -> usize {
        let nb = self.n_ctx.div_ceil(KB);
        ((l * c.n_head_kv + kvh) * nb + p / KB) * c.head_dim * KB + d * KB + p % KB
    }

    /// Writes the values `v` (`[v_dim]`) of position `p` in layer `l`.
    #[inline]
    pub(super) fn put_values(&mut self, c: &Config, l: usize, p: usize, v: &[f32]) {
        for (kvh, vh) in v.chunks_exact(c.head_dim_v).enumerate() {
            self.v_cache.write(self.v_at(c, l, kvh, p), vh);
        }
    }

    /// Index of the first value of kv head `kvh`, layer `l`, position `p`:
    /// each head's values are one run of `n_ctx` rows of `head_dim_v`.
    ///
    /// One run per head, not `[n_layer][n_ctx][v_dim]` rows: with whole rows,
    /// a (row, KV head) unit of attention reads 128 bytes of every 1 KiB row
    /// (a 1B body's 8 KV heads of 64), and at long contexts the weighted sums
    /// of the values cost several times what the scores do for as many
    /// multiply-adds (figures: docs/perf-history/kernels.md).
    #[inline]
    pub(super) fn v_at(&self, c: &Config, l: usize, kvh: usize, p: usize) -> usize {
        ((l * c.n_head_kv + kvh) * self.n_ctx + p) * c.head_dim_v
    }

    /// Writes the rotated keys `k` (`[n_head_kv][head_dim]`) of position `p`
    /// in layer `l`.
    #[inline]
    pub(super) fn put_keys(&mut self, c: &Config, l: usize, p: usize, k: &[f32]) {
        for (kvh, kh) in k.chunks_exact(c.head_dim).enumerate() {
            let base = self.k_at(c, l, kvh, 0, p);
            for (d, &v) in kh.iter().enumerate() {
                self.k_cache.set(base + d * KB, v);
            }
        }
    }

    /// Tokens in the cache (= the next position).
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// Forgets the cache after `pos` tokens (keeps the prefix).
    pub fn truncate(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }
    /// Empties the cache (the buffers are kept for the next sequence).
    pub fn reset(&mut self) {
        self.pos = 0;
    }
    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.k_cache.bytes() + self.v_cache.bytes()
    }
}
