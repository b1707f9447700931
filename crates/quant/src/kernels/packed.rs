//! [`PackedMatrix`]: integer weights repacked so that SIMD lanes are weight
//! *rows*, for batched (several activation vectors) matmuls.
//!
//! The unpacked kernels (module docs of `kernels`) give every (row, vector)
//! pair 8 float lanes per 32-element block, so each `vpdpbusd` is surrounded
//! by ~4 float ops (convert, scale multiply, FMA, min FMA): with 8 vectors
//! per step that tile is bound by float work. Here one
//! `vpdpbusd zmm_acc, zmm_w, m32{1to16}` (4 activation bytes broadcast from
//! memory) advances 16 rows by 4 elements; 8 of them leave each row's exact
//! integer block sum in its own lane, and the float work is one convert,
//! one multiply and one FMA (plus one FMA for asymmetric layouts) per block
//! per 16 rows per vector (llama.cpp's "repack" Q4_0x8 kernels do the same).
//!
//! # Canonical formula (packed matrices)
//!
//! Deliberately different from the unpacked kernels' canonical dot (which
//! stays as it is): a packed matrix's results are bit-identical between the
//! scalar reference ([`PackedMatrix::matmul_ref`]) and the AVX-512 kernel,
//! and do not depend on how many vectors a call has, on the tile a vector
//! lands in, or on the thread split. For weight row `r` and one vector of
//! [`QuantizedActivations`] (int8 codes `xq`, f16-rounded block scales
//! `d_b`, lane sums), per 32-element block `b`:
//!
//! ```text
//! P_b  = Σ_{e in block b} w[r][e] * xq[e]      exact i32 (w = the signed value
//!                                              for sym layouts: i8 code, or
//!                                              nibble - 8; the unsigned code
//!                                              for asym layouts)
//! S_b  = Σ_{e in block b} xq[e]                exact i32 (sum of the 8 lane sums)
//! dS_b = d_b * (S_b as f32)                    f32, once per call per vector
//! acc = 0f32
//! for b in 0..cols/32:
//!     acc = fma(scale[r][b] * d_b, P_b as f32, acc)
//!     asym: acc = fma(min[r][b], dS_b, acc)
//! y[r] = acc
//! ```
//!
//! `|P_b| ≤ 32 · 255 · 127 < 2^24`, so `P_b as f32` is exact. The kernel
//! feeds `vpdpbusd` unsigned codes: I8Sym stores `code ^ 0x80` (= q + 128)
//! and starts the block's integer accumulator at `-128 · S_b`; I4Sym keeps
//! the nibble (= v + 8) and starts at `-8 · S_b` (both exact).
//!
//! # Layout
//!
//! Rows are grouped by 16 (the last group padded with zero codes and zero
//! scales). Group `g` is one contiguous, 64-byte aligned region:
//!
//! ```text
//! codes  [nb][chunk][16 rows][4 bytes]   chunk = 64 bytes (16 dword lanes)
//!        I8 (8 chunks per block): chunk j, lane r = bytes 4j..4j+4 of row
//!           r's block (elements 4j..4j+4; I8Sym stored as code ^ 0x80).
//!        I4 (4 chunks per block): chunk j, lane r = bytes 4j..4j+4 of row
//!           r's native block (16 bytes per 32 elements, ggml order): low
//!           nibbles are elements 4j..4j+4, high nibbles elements
//!           16+4j..16+4j+4, so one 64-byte load gives two k-groups after
//!           an AND and a shift + AND. (This is the native byte order per
//!           row, so the repack is a 4-byte gather.)
//! scales [nb][16 rows]                   f32, or f16 when the view carries
//!                                        the exact f16 copy (same values)
//! mins   [nb][16 rows]                   asymmetric layouts only, as scales
//! (zero padding to a multiple of 64 bytes)
//! ```
//!
//! The byte count is the native form's (the f16 copy when present, which is
//! what the unpacked kernels stream: I4Asym 20 bytes per 32 weights), up to
//! the zero rows of the last group and ≤ 63 bytes of padding per group.
//!
//! # Kernel
//!
//! A tile is 16 rows × up to [`VECS`] vectors: the weights of a block are
//! loaded (and for I4 unpacked) once and shared by the tile's vectors; each
//! vector has one i32 and one f32 accumulator. A vector's codes, `d_b` and
//! `dS_b` (or the integer offset) are interleaved per tile and block in a
//! per-call buffer ([`PREP_WORDS`] words per vector and block), so one
//! pointer addresses every broadcast operand with constant displacements.
//! Threads split the row groups (`split_groups`); within a task, each group
//! runs every vector tile while its weights sit in L1.
//!
//! Perf log (2-core AMD EPYC VM, AVX-512 VNNI, 2026-11-29; concurrent
//! builds kept the load average at 3–5, so single-thread runs (min / median
//! over rounds of a whole SmolLM2-135M step's matrices: 30 × (q, k, v, o,
//! gate‖up, down) distinct tensors plus the 49152 × 576 Q8_0 head, f16
//! scales, ~96 MB streamed per step) are the reliable guide):
//! * First version, 16 × 8 tiles, no prefetch: fast in cache, but the
//!   30 MB head on 2 threads took 1.27 ms at n = 1 (matvec 1.04 ms).
//!   Software prefetch 8 KiB ahead, linear over the contiguous group
//!   regions: 0.72 ms; the Q4_1 step at n = 1 (2 threads) 10.2 → 4.6 ms.
//!   4 KiB and 16 KiB: the same within noise (2.5–2.9 ms per step); none:
//!   ~5 % slower on 2 threads, no change on 1. Prefetching into L2
//!   (`_MM_HINT_T1`) instead of L1: Q4_1 step n = 8, 2 threads, idle
//!   machine, 3 interleaved runs: 3.46 / 3.48 / 3.49 ms median vs 3.70 /
//!   3.65 / 3.65 (n = 1 unchanged, 2.06–2.2 ms): kept T1. 32 KiB ahead:
//!   no change.
//! * Task sizing (2 threads, Q4_1 step n = 8): 4 tasks per thread and
//!   32 KiB minimum (as `split_rows`) 3.81 ms median; 2 per thread 3.52;
//!   8 per thread with 16 KiB 3.62; 1 per thread 3.73; 64 KiB minimum
//!   3.67: all within the run-to-run noise (±0.2 ms), kept `split_rows`'
//!   sizing, with n = 8 counted as twice the bytes for the parallel cut-off.
//! * Tile width (1 thread, Q4_1 step / Q8_0 step at n = 8): 16 × 4 tiles
//!   4.78 / 6.15 ms, 16 × 8 tiles 4.30 / 5.37 ms (unpacked `matmul`
//!   12.5–13.3 / 12.1 ms). Kept 8 (24 zmm live, no spills: the inner loop
//!   is 64 `vpdpbusd` with `{1to16}` memory operands + 8 `vcvtdq2ps` + 8
//!   `vmulps` + 8 (16 asym) `vfmadd` per block and 16 rows).
//! * n = 8 is now bound by `vpdpbusd` itself: 576 × 576 Q4_1 in L2, 1
//!   thread, 8.1 µs = 648 (group, block) steps × 12.4 ns, i.e. ~2
//!   `vpdpbusd` zmm per cycle at the 2.6 GHz base clock; the float work
//!   is a quarter of the ops.
//! * Where n = 8 stands (2 threads, quiet spells, Q4_1 layers only, 66 MB):
//!   unpacked `matmul` 6.8–8.6 ms, packed 2.6–3.0 ms; streaming alone
//!   (packed n = 1) 1.7 ms, the same calls in cache ~1.8 ms (per-shape
//!   in-L2 times × counts), so compute and streaming overlap only in
//!   part; prefetch distance (2–64 KiB) and task sizing do not move it.
//!   Per call, quantizing 8 × 576 activations costs 1.1 µs and the
//!   activation buffer 0.2 µs on the caller (was 0.7 µs with word-by-word
//!   copies), ~0.25 ms of a step's 181 calls.
//! * Rejected: two integer chains per vector for tiles of ≤ 2 vectors
//!   (halving the `vpdpbusd` latency chain of n = 1): no measurable change
//!   (576 × 576 n = 1 1.70 vs 1.70 µs, steps within noise); the float chain
//!   is not the limit either, so the formula keeps one accumulator.

use super::{Isa, QuantizedActivations, SendPtr, QA};
use crate::aligned::AlignedBuf;
use crate::layout::Layout;
use crate::pool::Pool;
use crate::view::NativeView;
use std::cell::RefCell;
use std::io::Write;

/// Rows per group (one zmm of i32/f32 lanes).
pub const ROWS: usize = 16;

/// Vectors per tile (the widest kernel instance; narrower ones take the rest).
pub const VECS: usize = 8;

/// u32 words per (vector, block) in the per-call activation buffer: 8 words of
/// codes, `d_b`, and `dS_b` (asym, f32 bits) or the integer offset (sym).
pub const PREP_WORDS: usize = 10;

/// Layout kinds, as const generic parameters.
const I8SYM: u8 = 0;
const I8ASYM: u8 = 1;
const I4SYM: u8 = 2;
const I4ASYM: u8 = 3;

/// Rows per task: at least this many weight bytes per task (as `split_rows`).
const MIN_TASK_BYTES: usize = 32 * 1024;
/// Below this many weight bytes (times the work factor of the vectors) a
/// call runs on the caller thread alone.
const MIN_PARALLEL_BYTES: usize = 96 * 1024;

/// An integer matrix repacked for the batched kernels (see the module docs).
pub struct PackedMatrix {
    buf: AlignedBuf,
    layout: Layout,
    kind: u8,
    rows: usize,
    cols: usize,
    /// Blocks (of 32) per row.
    nb: usize,
    /// Row groups (of 16).
    groups: usize,
    /// Scales and mins stored as f16.
    f16: bool,
    /// Bytes per group region.
    group_stride: usize,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("layout", &self.layout)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("f16", &self.f16)
            .finish()
    }
}

/// Code bytes per (group, block).
const fn code_bytes(kind: u8) -> usize {
    if kind == I4SYM || kind == I4ASYM {
        ROWS * 16
    } else {
        ROWS * 32
    }
}

const fn is_asym(kind: u8) -> bool {
    kind == I8ASYM || kind == I4ASYM
}

/// Per-call buffers reused on one thread (taken out while in use).
#[derive(Default)]
struct Bufs {
    qa: QuantizedActivations,
    prep: Vec<u32>,
}

thread_local! {
    static BUFS: RefCell<Bufs> = RefCell::new(Bufs::default());
}

impl PackedMatrix {
    /// Repacks `view` (I8Sym, I8Asym, I4Sym or I4Asym with group 32 and
    /// `cols % 32 == 0`); `None` for any other layout or shape. Uses the
    /// view's f16 scale copy when it has one (exact, so the same values).
    pub fn pack(view: &NativeView) -> Option<PackedMatrix> {
        let layout = view.layout();
        let kind = match layout {
            Layout::I8Sym { group: 32 } => I8SYM,
            Layout::I8Asym { group: 32 } => I8ASYM,
            Layout::I4Sym { group: 32 } => I4SYM,
            Layout::I4Asym { group: 32 } => I4ASYM,
            _ => return None,
        };
        let (rows, cols) = (view.rows(), view.cols());
        if rows == 0 || cols == 0 || !cols.is_multiple_of(QA) {
            return None;
        }
        let nb = cols / QA;
        let groups = rows.div_ceil(ROWS);
        let f16 = view.has_f16_scales();
        let es = if f16 { 2 } else { 4 };
        let asym = is_asym(kind);
        let cb = code_bytes(kind);
        let sc_bytes = nb * ROWS * es;
        let group_stride = (nb * cb + sc_bytes * if asym { 2 } else { 1 }).next_multiple_of(64);
        let mut buf = AlignedBuf::zeroed(groups.checked_mul(group_stride)?);
        let rb = cb / ROWS; // native code bytes per row and block
        let mut region = vec![0u8; group_stride];
        for g in 0..groups {
            region.fill(0);
            let (codes, rest) = region.split_at_mut(nb * cb);
            let (scales, mins) = rest.split_at_mut(sc_bytes);
            for i in 0..ROWS.min(rows - g * ROWS) {
                let r = g * ROWS + i;
                let rc = view.row_codes(r);
                for b in 0..nb {
                    for j in 0..rb / 4 {
                        let src = &rc[b * rb + 4 * j..b * rb + 4 * j + 4];
                        let o = b * cb + j * 64 + 4 * i;
                        let dst = &mut codes[o..o + 4];
                        dst.copy_from_slice(src);
                        if kind == I8SYM {
                            dst.iter_mut().for_each(|c| *c ^= 0x80);
                        }
                    }
                    let o = (b * ROWS + i) * es;
                    if f16 {
                        scales[o..o + 2].copy_from_slice(&view.row_f16_scales(r)[b].to_le_bytes());
                        if asym {
                            mins[o..o + 2].copy_from_slice(&view.row_f16_mins(r)[b].to_le_bytes());
                        }
                    } else {
                        scales[o..o + 4].copy_from_slice(&view.row_scales(r)[b].to_le_bytes());
                        if asym {
                            mins[o..o + 4].copy_from_slice(&view.row_mins(r)[b].to_le_bytes());
                        }
                    }
                }
            }
            buf.write_all(&region).ok()?;
        }
        Some(PackedMatrix {
            buf,
            layout,
            kind,
            rows,
            cols,
            nb,
            groups,
            f16,
            group_stride,
        })
    }

    /// Rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Cols (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The layout the matrix was packed from.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Bytes of packed storage.
    pub fn byte_len(&self) -> usize {
        self.buf.as_slice().len()
    }

    /// Whether scales (and mins) are stored as f16.
    pub fn has_f16_scales(&self) -> bool {
        self.f16
    }

    /// `y[i] = W · x[i]` for `n` vectors (`x` is `[n][cols]`, `y` is
    /// `[n][rows]`), on [`Isa::best`] and [`Pool::global`], with the
    /// activations quantized as for [`crate::matmul`].
    ///
    /// # Panics
    /// On shape mismatches.
    pub fn matmul(&self, x: &[f32], n: usize, y: &mut [f32]) {
        self.matmul_on(Isa::best(), Pool::global(), x, n, y)
    }

    /// [`PackedMatrix::matmul`] on a given ISA and pool. Only
    /// [`Isa::Avx512Vnni`] has a SIMD kernel; the others run the scalar
    /// reference (the same bits), split over `pool`.
    ///
    /// # Panics
    /// As [`PackedMatrix::matmul`], and if `isa` is not available.
    pub fn matmul_on(&self, isa: Isa, pool: &Pool, x: &[f32], n: usize, y: &mut [f32]) {
        assert!(
            isa.is_available(),
            "ISA {} is not available on this CPU",
            isa.name()
        );
        assert_eq!(x.len(), n * self.cols, "x length must equal n * cols");
        assert_eq!(y.len(), n * self.rows, "y length must equal n * rows");
        if n == 0 {
            return;
        }
        let mut bufs = BUFS.with(|b| std::mem::take(&mut *b.borrow_mut()));
        bufs.qa.quantize(x, n, self.cols);
        self.run(isa, pool, &bufs.qa, &mut bufs.prep, y);
        BUFS.with(|b| *b.borrow_mut() = bufs);
    }

    /// [`PackedMatrix::matmul`] with activations already quantized (`xq.n()`
    /// vectors of `cols`; `y` is `[xq.n()][rows]`).
    ///
    /// # Panics
    /// If `xq.cols() != cols` or `y.len() != xq.n() * rows`.
    pub fn matmul_quantized(&self, xq: &QuantizedActivations, y: &mut [f32]) {
        self.matmul_quantized_on(Isa::best(), Pool::global(), xq, y)
    }

    /// [`PackedMatrix::matmul_quantized`] on a given ISA and pool.
    ///
    /// # Panics
    /// As [`PackedMatrix::matmul_quantized`], and if `isa` is not available.
    pub fn matmul_quantized_on(
        &self,
        isa: Isa,
        pool: &Pool,
        xq: &QuantizedActivations,
        y: &mut [f32],
    ) {
        assert!(
            isa.is_available(),
            "ISA {} is not available on this CPU",
            isa.name()
        );
        assert_eq!(xq.cols(), self.cols, "activation cols must equal cols");
        assert_eq!(y.len(), xq.n() * self.rows, "y length must equal n * rows");
        if xq.n() == 0 {
            return;
        }
        let mut prep = BUFS.with(|b| std::mem::take(&mut b.borrow_mut().prep));
        self.run(isa, pool, xq, &mut prep, y);
        BUFS.with(|b| b.borrow_mut().prep = prep);
    }

    /// The scalar reference: the canonical formula of the module docs,
    /// single-threaded, written out row by row. Every path equals it bit for
    /// bit.
    ///
    /// # Panics
    /// On shape mismatches.
    pub fn matmul_ref(&self, x: &[f32], n: usize, y: &mut [f32]) {
        assert_eq!(x.len(), n * self.cols, "x length must equal n * cols");
        assert_eq!(y.len(), n * self.rows, "y length must equal n * rows");
        let mut qa = QuantizedActivations::new();
        qa.quantize_ref(x, n, self.cols);
        self.scalar_groups(&qa, 0, self.groups, y.as_mut_ptr());
    }

    /// Row groups per task and the number of tasks for `n` vectors.
    fn split_groups(&self, threads: usize, n: usize) -> (usize, usize) {
        let total = self.byte_len();
        // Each extra vector adds compute on the same bytes: count it as 1/7
        // of streaming them (n = 8 doubles the effective size; a 16 × 8
        // tile step costs about what streaming it twice from L3 does).
        let work = total + total * (n - 1) / 7;
        if threads <= 1 || work < MIN_PARALLEL_BYTES {
            return (self.groups, 1);
        }
        let min_groups = MIN_TASK_BYTES.div_ceil(self.group_stride).max(1);
        let chunk = self
            .groups
            .div_ceil(threads * 4)
            .max(min_groups)
            .min(self.groups);
        (chunk, self.groups.div_ceil(chunk))
    }

    fn run(
        &self,
        isa: Isa,
        pool: &Pool,
        qa: &QuantizedActivations,
        prep: &mut Vec<u32>,
        y: &mut [f32],
    ) {
        let n = qa.n();
        let simd = cfg!(target_arch = "x86_64") && isa == Isa::Avx512Vnni;
        if simd {
            build_prep(self.kind, qa, prep);
        }
        let (chunk, tasks) = self.split_groups(pool.threads(), n);
        let out = SendPtr(y.as_mut_ptr());
        let prep: &[u32] = prep;
        let task = |t: usize| {
            let g0 = t * chunk;
            let g1 = (g0 + chunk).min(self.groups);
            if simd {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX-512 VNNI is available (asserted by the callers);
                // `prep` was built for these n vectors and this kind; tasks
                // write the rows of their own groups, disjoint and inside the
                // `[n][rows]` y, which outlives the pool run.
                unsafe {
                    avx512::run_groups(self, g0, g1, n, prep, out.at(0))
                }
            } else {
                // SAFETY: offset 0 of y.
                self.scalar_groups(qa, g0, g1, unsafe { out.at(0) });
            }
        };
        if tasks == 1 {
            task(0);
        } else {
            pool.run(tasks, &task);
        }
    }

    /// The group region `g`: (codes, scales, mins) byte slices.
    fn group(&self, g: usize) -> (&[u8], &[u8], &[u8]) {
        let es = if self.f16 { 2 } else { 4 };
        let reg = &self.buf.as_slice()[g * self.group_stride..(g + 1) * self.group_stride];
        let (codes, rest) = reg.split_at(self.nb * code_bytes(self.kind));
        let (scales, rest) = rest.split_at(self.nb * ROWS * es);
        let mins = if is_asym(self.kind) {
            &rest[..self.nb * ROWS * es]
        } else {
            &[]
        };
        (codes, scales, mins)
    }

    /// Scale or min `i` of a group array, as f32.
    fn value(&self, a: &[u8], i: usize) -> f32 {
        if self.f16 {
            half::f16::from_bits(u16::from_le_bytes([a[2 * i], a[2 * i + 1]])).to_f32()
        } else {
            f32::from_le_bytes([a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]])
        }
    }

    /// The signed (sym) or unsigned (asym) code of element `e` (0..32) of
    /// lane `i` in one block's packed codes.
    fn code(&self, c: &[u8], i: usize, e: usize) -> i32 {
        match self.kind {
            I8SYM => i32::from((c[(e / 4) * 64 + 4 * i + e % 4] ^ 0x80) as i8),
            I8ASYM => i32::from(c[(e / 4) * 64 + 4 * i + e % 4]),
            _ => {
                let k = e % 16;
                let byte = c[(k / 4) * 64 + 4 * i + k % 4];
                let q = i32::from(if e < 16 { byte & 0x0F } else { byte >> 4 });
                if self.kind == I4SYM {
                    q - 8
                } else {
                    q
                }
            }
        }
    }

    /// The canonical formula, scalar, for groups `g0..g1` and every vector
    /// of `qa`; writes row `r` of vector `v` to `out[v * rows + r]`.
    fn scalar_groups(&self, qa: &QuantizedActivations, g0: usize, g1: usize, out: *mut f32) {
        let n = qa.n();
        let cb = code_bytes(self.kind);
        let asym = is_asym(self.kind);
        // Per vector and block: d_b * S_b (computed once per call).
        let ds: Vec<f32> = (0..n)
            .flat_map(|v| {
                let a = qa.get(v);
                (0..self.nb).map(move |b| a.d[b] * block_sum(a.ls, b) as f32)
            })
            .collect();
        for g in g0..g1 {
            let (codes, scales, mins) = self.group(g);
            for i in 0..ROWS.min(self.rows - g * ROWS) {
                let r = g * ROWS + i;
                for v in 0..n {
                    let a = qa.get(v);
                    let mut acc = 0f32;
                    for b in 0..self.nb {
                        let c = &codes[b * cb..(b + 1) * cb];
                        let p: i32 = (0..QA)
                            .map(|e| self.code(c, i, e) * i32::from(a.q[b * QA + e]))
                            .sum();
                        let s = self.value(scales, b * ROWS + i);
                        acc = (s * a.d[b]).mul_add(p as f32, acc);
                        if asym {
                            let m = self.value(mins, b * ROWS + i);
                            acc = m.mul_add(ds[v * self.nb + b], acc);
                        }
                    }
                    // SAFETY: r < rows and v < n: in bounds of the caller's
                    // `[n][rows]` output; distinct tasks own distinct rows.
                    unsafe { *out.add(v * self.rows + r) = acc };
                }
            }
        }
    }
}

/// `S_b`: the sum of block `b`'s 8 lane sums.
#[inline]
fn block_sum(ls: &[i32], b: usize) -> i32 {
    ls[8 * b..8 * b + 8].iter().sum()
}

/// Builds the per-call activation buffer: vectors in tiles of [`VECS`] (the
/// last tile narrower); tile `[v0, v0 + nv)` starts at word
/// `v0 * nb * PREP_WORDS` and holds, per block `b` (stride `nv *
/// PREP_WORDS`): the `nv` vectors' 32 codes (8 words each), their `d_b`
/// (`nv` words), then their `dS_b = d_b * S_b` (asym, f32 bits) or the
/// integer offset `-128 · S_b` (I8Sym) / `-8 · S_b` (I4Sym).
fn build_prep(kind: u8, qa: &QuantizedActivations, prep: &mut Vec<u32>) {
    let (n, nb) = (qa.n(), qa.cols() / QA);
    // Every word is written below: no need to clear what a previous call left.
    prep.resize(n * nb * PREP_WORDS, 0);
    let mut v0 = 0;
    while v0 < n {
        let nv = VECS.min(n - v0);
        let tile = &mut prep[v0 * nb * PREP_WORDS..(v0 + nv) * nb * PREP_WORDS];
        for k in 0..nv {
            let a = qa.get(v0 + k);
            for b in 0..nb {
                let o = b * nv * PREP_WORDS;
                // The 32 codes in memory order (the kernel broadcasts dwords
                // from memory, so byte order is all that matters).
                bytemuck::cast_slice_mut::<u32, u8>(&mut tile[o + 8 * k..o + 8 * k + 8])
                    .copy_from_slice(bytemuck::cast_slice::<i8, u8>(&a.q[b * QA..(b + 1) * QA]));
                tile[o + 8 * nv + k] = a.d[b].to_bits();
                let s = block_sum(a.ls, b);
                tile[o + 9 * nv + k] = match kind {
                    I8SYM => (-128 * s) as u32,
                    I4SYM => (-8 * s) as u32,
                    _ => (a.d[b] * s as f32).to_bits(),
                };
            }
        }
        v0 += nv;
    }
}

/// Test hook: vector `v` of `xq` dequantized (`xq[e] as f32 * d_b`), so tests
/// can check results against an f64 dot without re-deriving the quantizer.
#[doc(hidden)]
pub fn dequantized_activations(xq: &QuantizedActivations, v: usize) -> Vec<f32> {
    let a = xq.get(v);
    a.q.iter()
        .enumerate()
        .map(|(e, &q)| f32::from(q) * a.d[e / QA])
        .collect()
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{
        code_bytes, is_asym, PackedMatrix, I4ASYM, I4SYM, I8ASYM, I8SYM, PREP_WORDS, ROWS, VECS,
    };
    use std::arch::x86_64::*;

    /// Software prefetch distance in bytes of the packed stream (into L2).
    const PF_BYTES: isize = 8192;
    /// Whether the tile prefetches.
    const PF: bool = true;

    /// Runs row groups `g0..g1` for all `n` vectors.
    ///
    /// # Safety
    /// `Isa::Avx512Vnni.is_available()`; `prep` built by `build_prep` for
    /// `n` vectors of `pm.cols()`; `out` valid for writes at `v * rows + r`
    /// for every `v < n` and every row `r` of groups `g0..g1`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn run_groups(
        pm: &PackedMatrix,
        g0: usize,
        g1: usize,
        n: usize,
        prep: &[u32],
        out: *mut f32,
    ) {
        assert!(prep.len() >= n * pm.nb * PREP_WORDS && g1 <= pm.groups);
        macro_rules! go {
            ($k:expr, $h:expr) => {
                // SAFETY: per this fn's contract.
                unsafe { groups::<{ $k }, { $h }>(pm, g0, g1, n, prep, out) }
            };
        }
        match (pm.kind, pm.f16) {
            (I8SYM, false) => go!(I8SYM, false),
            (I8SYM, true) => go!(I8SYM, true),
            (I8ASYM, false) => go!(I8ASYM, false),
            (I8ASYM, true) => go!(I8ASYM, true),
            (I4SYM, false) => go!(I4SYM, false),
            (I4SYM, true) => go!(I4SYM, true),
            (_, false) => go!(I4ASYM, false),
            (_, true) => go!(I4ASYM, true),
        }
    }

    /// [`run_groups`] for one kind and scale width.
    ///
    /// # Safety
    /// As [`run_groups`].
    #[inline(always)]
    unsafe fn groups<const K: u8, const H: bool>(
        pm: &PackedMatrix,
        g0: usize,
        g1: usize,
        n: usize,
        prep: &[u32],
        out: *mut f32,
    ) {
        let base = pm.buf.as_slice().as_ptr();
        let nb = pm.nb;
        for g in g0..g1 {
            let valid = ROWS.min(pm.rows - g * ROWS);
            let mask: __mmask16 = if valid == ROWS {
                0xFFFF
            } else {
                (1u16 << valid) - 1
            };
            let mut v0 = 0;
            while v0 < n {
                let nv = VECS.min(n - v0);
                // SAFETY: group g is inside the buffer (g < groups); the
                // tile's prep words start at v0 * nb * PREP_WORDS (in bounds,
                // asserted by the caller); out + v0 * rows + g * 16 + k * rows
                // + i for k < nv, i < valid are rows of this group for
                // vectors < n (the caller's contract); the mask keeps the
                // padded rows unwritten.
                unsafe {
                    let gp = base.add(g * pm.group_stride);
                    let pp = prep.as_ptr().add(v0 * nb * PREP_WORDS);
                    let o = out.add(v0 * pm.rows + g * ROWS);
                    macro_rules! t {
                        ($n:expr) => {
                            tile::<K, H, { $n }>(gp, nb, pp, o, pm.rows, mask)
                        };
                    }
                    match nv {
                        8 => t!(8),
                        7 => t!(7),
                        6 => t!(6),
                        5 => t!(5),
                        4 => t!(4),
                        3 => t!(3),
                        2 => t!(2),
                        _ => t!(1),
                    }
                }
                v0 += nv;
            }
        }
    }

    /// Broadcast of word `i` of `p` (an embedded-broadcast memory operand
    /// where the compiler folds it).
    ///
    /// # Safety
    /// `p.add(i)` readable; AVX-512F.
    #[inline(always)]
    unsafe fn bcast_i(p: *const u32, i: usize) -> __m512i {
        // SAFETY: the caller guarantees a readable word.
        unsafe { _mm512_set1_epi32(p.add(i).read() as i32) }
    }

    /// As [`bcast_i`], as f32.
    ///
    /// # Safety
    /// As [`bcast_i`].
    #[inline(always)]
    unsafe fn bcast_f(p: *const u32, i: usize) -> __m512 {
        // SAFETY: the caller guarantees a readable word.
        unsafe { _mm512_set1_ps(f32::from_bits(p.add(i).read())) }
    }

    /// 16 scales or mins as f32 (f16 converted exactly when `H`).
    ///
    /// # Safety
    /// `p` readable for 16 values; AVX-512F.
    #[inline(always)]
    unsafe fn load16<const H: bool>(p: *const u8) -> __m512 {
        // SAFETY: the caller guarantees 16 readable values.
        unsafe {
            if H {
                _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
            } else {
                _mm512_loadu_ps(p as *const f32)
            }
        }
    }

    /// One 16 rows × `N` vectors tile over all `nb` blocks: the canonical
    /// formula of the module docs per (row lane, vector).
    ///
    /// # Safety
    /// AVX-512 F/BW/VNNI; `gp` a group region of a packed matrix of kind
    /// `K` (scales f16 iff `H`) with `nb` blocks; `pp` the tile's prep words
    /// (`nb * N * PREP_WORDS`); `out + k * ystride + i` writable for `k < N`
    /// and the lanes `i` set in `mask`.
    #[inline(always)]
    unsafe fn tile<const K: u8, const H: bool, const N: usize>(
        gp: *const u8,
        nb: usize,
        pp: *const u32,
        out: *mut f32,
        ystride: usize,
        mask: __mmask16,
    ) {
        let cb = code_bytes(K);
        let es = if H { 2 } else { 4 };
        let asym = is_asym(K);
        let i4 = K == I4SYM || K == I4ASYM;
        // SAFETY: every load is inside the group region or the tile's prep
        // words (offsets below stay under nb blocks); stores per the mask.
        unsafe {
            let sp = gp.add(nb * cb);
            let mp = sp.add(nb * ROWS * es);
            let nib = _mm512_set1_epi8(0x0F);
            let mut acc = [_mm512_setzero_ps(); N];
            // Software prefetch, linear over the group regions (which are
            // contiguous): block b of this group covers `per_block` bytes.
            let per_block = (cb + ROWS * es * if asym { 2 } else { 1 }) as isize;
            for b in 0..nb {
                let bp = pp.add(b * N * PREP_WORDS);
                let cp = gp.add(b * cb);
                if PF {
                    let pf = gp.wrapping_offset(PF_BYTES + b as isize * per_block);
                    let mut o = 0;
                    while o < per_block {
                        _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_offset(o) as *const i8);
                        o += 64;
                    }
                }
                let mut p = [_mm512_setzero_si512(); N];
                if !asym {
                    for (k, pk) in p.iter_mut().enumerate() {
                        *pk = bcast_i(bp, 9 * N + k);
                    }
                }
                if i4 {
                    for j in 0..4 {
                        let w = _mm512_load_si512(cp.add(64 * j) as *const _);
                        let lo = _mm512_and_si512(w, nib);
                        let hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), nib);
                        for (k, pk) in p.iter_mut().enumerate() {
                            *pk = _mm512_dpbusd_epi32(*pk, lo, bcast_i(bp, 8 * k + j));
                            *pk = _mm512_dpbusd_epi32(*pk, hi, bcast_i(bp, 8 * k + 4 + j));
                        }
                    }
                } else {
                    for j in 0..8 {
                        let w = _mm512_load_si512(cp.add(64 * j) as *const _);
                        for (k, pk) in p.iter_mut().enumerate() {
                            *pk = _mm512_dpbusd_epi32(*pk, w, bcast_i(bp, 8 * k + j));
                        }
                    }
                }
                let sc = load16::<H>(sp.add(b * ROWS * es));
                for (k, a) in acc.iter_mut().enumerate() {
                    let ds = _mm512_mul_ps(sc, bcast_f(bp, 8 * N + k));
                    *a = _mm512_fmadd_ps(ds, _mm512_cvtepi32_ps(p[k]), *a);
                }
                if asym {
                    let mn = load16::<H>(mp.add(b * ROWS * es));
                    for (k, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(mn, bcast_f(bp, 9 * N + k), *a);
                    }
                }
            }
            for (k, a) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(out.add(k * ystride), mask, *a);
            }
        }
    }
}
