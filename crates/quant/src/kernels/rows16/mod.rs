//! Kernels over the row-interleaved ggml layouts ([`Layout::Rows16`]): the
//! mapped file is already in kernel order, so nothing is repacked at load.
//!
//! # Canonical formula (normative for every ISA)
//!
//! Activations are quantized as for every integer kernel
//! ([`QuantizedActivations`]: int8 codes `xq`), with one f16-rounded scale
//! `D_B` per ggml block `B` of the weight type (32 or 256 elements: the
//! span of [`QuantizedActivations::quantize_span`] is the block's 32-element
//! blocks), as ggml's own `q8_0`/`q8_K` activations have. Each ggml block
//! splits into sub-blocks `h` of `SUB` = 16 or 32 weights, each with an f32
//! scale `s_h` and, for the asymmetric types, an f32 min `m_h`: exactly the
//! values ggml forms before its last multiply (the same split as the
//! row-major transcode, `ggml::decode_block`: `d * sc`, `-(dmin * m)`, …).
//! With `w` the signed weight value (symmetric types) or the unsigned code
//! (asymmetric types), per row:
//!
//! ```text
//! acc = 0f32
//! for B in the row's ggml blocks (in order):
//!     t = 0f32
//!     for h in the sub-blocks of B (in order):
//!         P_h = Σ_{e in h} w[e] * xq[e]                 exact i32
//!         t = fma(s_h, P_h as f32, t)
//!         asym: t = fma(m_h, S_h as f32, t)          S_h = Σ_{e in h} xq[e]
//!     acc = fma(D_B, t, acc)
//! y = acc
//! ```
//!
//! Q6_K and IQ4_XS ([`Kind::iscale`]), whose sub-block scales are small
//! integers `sc_h` (int8; 6-bit less 32) times one f16 `d` per row and ggml
//! block, apply them as integers instead:
//!
//! ```text
//!     T = Σ_h sc_h * P_h                             exact i32
//!     t = d * (T as f32)                             one rounded product
//!     acc = fma(D_B, t, acc)
//! ```
//!
//! (Q6_K: `|P_h| ≤ 16 · 32 · 127`, `|sc_h| ≤ 128`, 16 sub-blocks; IQ4_XS:
//! `|P_h| ≤ 32 · 127 · 127`, `|sc_h| ≤ 32`, 8 sub-blocks: `|T| < 2^28`.)
//! This is how ggml's own Q6_K and IQ4_XS dots sum (`madd(scale, p16)`),
//! and it lets the AMX tile take them whole: the weights times their
//! scales, `w · sc_h` (at most 4096 in magnitude), split into a high and a
//! low i8 plane, give `T` from two products per 64 elements summed in the
//! tile registers over the whole ggml block, with one store and one float
//! step per ggml block instead of one per sub-block.
//!
//! The activation scale is applied once per ggml block: a K-quant's 8 or 16
//! sub-blocks cost one `cvt` and one `fma` each per (16 rows × vector), not
//! a scale product besides (the prefill tile's float steps were a quarter
//! of its work). `|P_h| < 2^24`, so `P_h as f32` is exact. The result does
//! not depend on the ISA, the number of vectors in a call, the tile a
//! vector lands in or the thread split (tests hold every path to the scalar
//! reference bit for bit).
//!
//! # How the kernels get `P_h`
//!
//! A group-block (16 rows × one ggml block) is decoded into a [`Stage`]: per
//! 32-element block, 8 words × 16 rows of unsigned codes `u = w + OFF` (OFF a
//! per-type constant: 0 for the asymmetric types, 8 for Q4_0, 16 for Q5_0, 32
//! for Q6_K, 4 for Q3_K, 128 for Q8_0 and the lookup types), and the 16 rows'
//! `s_h` and `m_h`. AVX-512 VNNI runs `vpdpbusd(u, xq)` with the activation
//! words broadcast and starts each sum at `-OFF · S_h` (exact); AVX2 runs
//! `vpmaddubsw(u, xq)` on the small codes (`UMAX < 128`: every type but the
//! 8-bit and lookup ones), likewise started at `-OFF · S_h`, adding as many
//! words in 16 bits as cannot overflow ([`words_in_i16`]), and for the
//! others takes `w = u - OFF` as i8 and uses `vpmaddubsw(|w|, sign(xq, w))`
//! (|w| ≤ 128, no saturation). On CPUs with AMX-INT8, the AVX-512 path's
//! prefill tile takes `P_h` of the kinds with 32-element sub-blocks from
//! tile products (`rows16/amx.rs`): the symmetric kinds multiply a signed
//! copy of the codes (`u - OFF`, so their sums need no start), the
//! asymmetric ones the unsigned codes; the integer-scale kinds take `T`
//! itself from the two planes of `w · sc_h`, 64 elements per product. The
//! stage is decoded once per group-block and shared by every vector of the
//! call, which is the on-the-fly conversion to an int8
//! interleaved form that makes prefill compute-bound rather than
//! unpack-bound.
//!
//! The scalar decoder ([`decode_scalar`]: each row's block gathered and
//! split by `ggml::decode_block`) is the reference; the AVX-512
//! (`avx512.rs`) and AVX2 (`avx2_decode.rs`, also the AVX-VNNI path's)
//! decoders write its stage bit for bit, every type unpacked straight from
//! the interleaved words, 16 or 8 rows per register. For up to [`VT`]
//! vectors (decode) both ISAs skip the stage: `avx512::dot_direct` and
//! `avx2_direct.rs` dot the decoded registers at once.

use super::{Isa, QuantizedActivations, SendPtr, QA};
use crate::interleave::R;
use crate::layout::Layout;
use crate::pool::Pool;
use crate::view::NativeView;
use crate::GgmlType;
use std::cell::RefCell;

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_decode;
#[cfg(target_arch = "x86_64")]
mod avx2_direct;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub(crate) mod facts;
mod regions;

/// How a type's blocks map onto the canonical formula.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kind {
    /// The ggml type.
    pub t: GgmlType,
    /// Elements per ggml block (32 or 256).
    pub qk: usize,
    /// Bytes per ggml block.
    pub ts: usize,
    /// Weights per sub-block (16 or 32).
    pub sub: usize,
    /// Whether sub-blocks have mins.
    pub asym: bool,
    /// `u = w + off` for the staged unsigned codes.
    pub off: i32,
    /// The largest staged code `u` (what bounds `vpmaddubsw(u, xq)`).
    pub umax: u32,
    /// Whether the sub-block scales are applied as integers (Q6_K and
    /// IQ4_XS: see the module docs), from the stage's `iscales` and `d`.
    pub iscale: bool,
}

impl Kind {
    /// The kind of `t`, or `None` when `t` has no interleaved kernel.
    pub fn of(t: GgmlType) -> Option<Kind> {
        use GgmlType as T;
        let (sub, asym, off, umax) = match t {
            T::Q4_0 => (32, false, 8, 15),
            T::Q4_1 | T::Q4_K => (32, true, 0, 15),
            T::Q5_1 | T::Q5_K => (32, true, 0, 31),
            T::Q5_0 => (32, false, 16, 31),
            T::Q8_0 | T::IQ4_NL | T::IQ4_XS | T::MXFP4 => (32, false, 128, 255),
            T::Q2_K => (16, true, 0, 3),
            T::Q3_K => (16, false, 4, 7),
            T::Q6_K => (16, false, 32, 63),
            _ => return None,
        };
        if !crate::interleave::supports(t) || !crate::ggml::can_dequantize(t) {
            return None;
        }
        // The SIMD tiles start asymmetric sums at zero.
        debug_assert!(!asym || off == 0);
        let (qk, ts) = t.block();
        Some(Kind {
            t,
            qk: qk as usize,
            ts: ts as usize,
            sub,
            asym,
            off,
            umax,
            iscale: matches!(t, T::Q6_K | T::IQ4_XS),
        })
    }

    /// 32-element blocks per ggml block.
    pub fn blocks(&self) -> usize {
        self.qk / QA
    }

    /// Blocks of 32 sharing one activation scale (the ggml block's).
    pub fn span(&self) -> usize {
        self.blocks()
    }

    /// Sub-blocks per ggml block.
    pub fn subs(&self) -> usize {
        self.qk / self.sub
    }

    /// Bytes of one group-block.
    pub fn group_block(&self) -> usize {
        R * self.ts
    }
}

/// One group-block decoded for the dot loops (see the module docs).
#[repr(C, align(64))]
pub(crate) struct Stage {
    /// Per 32-element block `k`: `[word j][row i][4 bytes]` unsigned codes
    /// (word `j` = elements `4j .. 4j + 4`).
    pub codes: [[u8; 8 * R * 4]; 8],
    /// Per sub-block: the 16 rows' scales.
    pub scales: [[f32; R]; 16],
    /// Per sub-block: the 16 rows' mins (asymmetric kinds).
    pub mins: [[f32; R]; 16],
    /// Per 32-element block, for the AMX tile (written by `amx::prepare`;
    /// unused elsewhere): the symmetric kinds' `codes` less OFF, as i8;
    /// for [`Kind::iscale`], the low 7 bits of `w · sc_h` (0..=127).
    pub signed: [[i8; 8 * R * 4]; 8],
    /// For [`Kind::iscale`] on the AMX tile: `w · sc_h` less its low 7
    /// bits, over 128 (`-32..=32`).
    pub high: [[i8; 8 * R * 4]; 8],
    /// For [`Kind::iscale`]: per sub-block, the 16 rows' integer scales.
    pub iscales: [[i32; R]; 16],
    /// For [`Kind::iscale`]: the 16 rows' block scale `d`.
    pub d: [f32; R],
}

impl Stage {
    pub fn new() -> Box<Stage> {
        Box::new(Stage {
            codes: [[0; 8 * R * 4]; 8],
            scales: [[0.0; R]; 16],
            mins: [[0.0; R]; 16],
            signed: [[0; 8 * R * 4]; 8],
            high: [[0; 8 * R * 4]; 8],
            iscales: [[0; R]; 16],
            d: [0.0; R],
        })
    }
}

/// The scalar decoder: each row's block gathered and split by
/// `ggml::decode_block` (the transcoder the exactness tests cover), its
/// values offset into unsigned codes.
pub(crate) fn decode_scalar(k: &Kind, gb: &[u8], st: &mut Stage) {
    let native = crate::layout::native_layout_for(k.t);
    let i4 = matches!(native, Layout::I4Sym { .. } | Layout::I4Asym { .. });
    let mut blk = [0u8; 256];
    let mut codes = [0u8; 256];
    let mut scales = [0f32; 16];
    let mut mins = [0f32; 16];
    for i in 0..R {
        crate::interleave::gather_block(k.t, gb, i, &mut blk[..k.ts]);
        crate::ggml::decode_block(k.t, &blk[..k.ts], &mut codes, &mut scales, &mut mins);
        for e in 0..k.qk {
            let w: i32 = if i4 {
                let byte = codes[(e / 32) * 16 + (e % 16)];
                let q = if e % 32 < 16 { byte & 0xF } else { byte >> 4 };
                i32::from(q) - if k.asym { 0 } else { 8 }
            } else if k.asym {
                i32::from(codes[e])
            } else {
                i32::from(codes[e] as i8)
            };
            let u = w + k.off;
            debug_assert!((0..=255).contains(&u), "{}: code {u}", k.t);
            let (kb, o) = (e / QA, e % QA);
            st.codes[kb][(o / 4) * R * 4 + i * 4 + o % 4] = u as u8;
        }
        for h in 0..k.subs() {
            st.scales[h][i] = scales[h];
            st.mins[h][i] = if k.asym { mins[h] } else { 0.0 };
        }
        if k.iscale {
            let mut sc = [0i32; 16];
            let d = crate::ggml::integer_scales(k.t, &blk[..k.ts], &mut sc);
            st.d[i] = d.expect("an integer-scale kind");
            for (h, &c) in sc[..k.subs()].iter().enumerate() {
                st.iscales[h][i] = c;
            }
        }
    }
}

/// The canonical formula for one group-block's stage (one ggml block) and
/// one vector's activation codes `xq` from the block on and its scale `db`
/// (scalar, written out).
fn dot_stage_scalar(k: &Kind, st: &Stage, xq: &[i8], db: f32, acc: &mut [f32; R]) {
    let per = QA / k.sub; // sub-blocks per 32-block
    for (i, a) in acc.iter_mut().enumerate() {
        let mut t = 0f32;
        let mut ti = 0i32;
        for kb in 0..k.blocks() {
            for hh in 0..per {
                let h = kb * per + hh;
                let (mut p, mut s) = (0i32, 0i32);
                for o in hh * k.sub..(hh + 1) * k.sub {
                    let u = i32::from(st.codes[kb][(o / 4) * R * 4 + i * 4 + o % 4]);
                    let x = i32::from(xq[kb * QA + o]);
                    p += (u - k.off) * x;
                    s += x;
                }
                if k.iscale {
                    ti += st.iscales[h][i] * p;
                    continue;
                }
                t = st.scales[h][i].mul_add(p as f32, t);
                if k.asym {
                    t = st.mins[h][i].mul_add(s as f32, t);
                }
            }
        }
        if k.iscale {
            t = st.d[i] * ti as f32;
        }
        *a = db.mul_add(t, *a);
    }
}

/// Words (4 elements each) of one sub-block whose `vpmaddubsw(u, xq)`
/// products can be added in 16 bits before they are widened: the most that
/// keep `words · 2 · umax · 127 ≤ 32767` (at least 1, at most the
/// sub-block's `words`; `|xq| ≤ 127`).
#[cfg(target_arch = "x86_64")]
pub(crate) const fn words_in_i16(umax: u32, words: usize) -> usize {
    let g = 32767 / (254 * umax as usize);
    if g == 0 {
        1
    } else if g > words {
        words
    } else {
        g
    }
}

/// Vectors per block of the outer loop: their accumulators and prep words
/// stay in L1/L2 while a task's row groups stream past.
const VB: usize = 64;

/// Prep words per (vector, 32-block): 8 code words, the ggml block's
/// activation scale `D_B`, the integer starts `-OFF·S` of the two halves
/// (or the whole block at index 9 when `SUB = 32`), `S` as f32 likewise,
/// `S` as i32 likewise (the AVX2 integer-scale start), padding.
pub(crate) const PREP: usize = 16;

/// Builds the prep words of every vector for each `(SUB, OFF, span)` key of
/// `preps`, in tiles of [`VT`] vectors (the last narrower) interleaved per
/// block: `[tile][b][vector of the tile][PREP]`, so the broadcasts of one
/// block's tile come from a few adjacent lines. Each vector is quantized
/// once per distinct span ([`QuantizedActivations`]' scheme and quantizer,
/// into a per-thread buffer of one vector) and its words written straight
/// from it: no `[n][cols]` codes pass through memory. Prefill-sized calls
/// split the tiles over `pool` (each tile's words depend on its own vectors
/// only), so that quantizing and preparing a batch is not serial work that
/// leaves the other cores waiting.
///
/// Where the AMX tile takes an integer-scale kind ([`Kind::iscale`]: the
/// key's last field), the buffer goes on after the words with each full
/// tile's activation codes as that tile's operands of 64 elements:
/// `[tile][block pair][vector of the tile][64 bytes]` ([`pairs_at`]).
type PrepKey = (usize, i32, usize, bool);

fn build_preps(
    pool: &Pool,
    x: &[f32],
    n: usize,
    cols: usize,
    pt: usize,
    preps: &mut [(PrepKey, Vec<u32>)],
) {
    assert_eq!(x.len(), n * cols, "x length must equal n * cols");
    let nb = cols / QA;
    let mut outs: Vec<(PrepKey, SendPtr<u32>)> = preps
        .iter_mut()
        .map(|(key, p)| {
            // Grown, never shrunk: a layer's calls alternate between
            // widths (2048 and 8192 columns on the 1B), and growing back
            // after a truncation zero-filled megabytes per call. Words
            // past this call's are not read.
            let len = n * nb * PREP + if key.3 { pair_words(n, nb) } else { 0 };
            if p.len() < len {
                p.resize(len, 0);
            }
            (*key, SendPtr(p.as_mut_ptr()))
        })
        .collect();
    // Keys of one span next to each other: each vector quantized once per span.
    outs.sort_by_key(|(key, _)| key.2);
    let tiles = n.div_ceil(pt);
    if tiles == 0 {
        return;
    }
    let per = if pool.threads() > 1 && n * cols >= PARALLEL_PREP {
        tiles.div_ceil(pool.threads() * 4)
    } else {
        tiles
    };
    let task = |c: usize| {
        let (v0, v1) = (c * per * pt, ((c + 1) * per * pt).min(n));
        ONE.with(|one| {
            let mut one = one.borrow_mut();
            let one = &mut *one;
            for v in v0..v1 {
                let (t0, nt) = (v - v % pt, pt.min(n - (v - v % pt)));
                let mut span = 0;
                for &((sub, off, sp, pairs), p) in &outs {
                    if sp != span {
                        one.quantize_span(&x[v * cols..(v + 1) * cols], 1, cols, sp);
                        span = sp;
                    }
                    // SAFETY: tile t0's words ([t0 · nb · PREP, (t0 + nt) · nb
                    // · PREP)) are in bounds (resized above) and written only
                    // by this task (tasks own whole tiles); the buffers
                    // outlive the pool run, which waits for every task.
                    let tile = unsafe {
                        std::slice::from_raw_parts_mut(p.at(t0 * nb * PREP), nt * nb * PREP)
                    };
                    prep_vector(sub, off, one.get(0), v - t0, nt, tile);
                    if pairs && nt == pt {
                        // SAFETY: as above, this tile's pair words (after
                        // the n · nb · PREP words; a full tile's nb · 8 per
                        // vector).
                        let words = unsafe {
                            std::slice::from_raw_parts_mut(
                                p.at(n * nb * PREP + t0 * nb * 8),
                                pt * nb * 8,
                            )
                        };
                        let bytes: &mut [u8] = bytemuck::cast_slice_mut(words);
                        for (b, q) in one.get(0).q.chunks_exact(QA).enumerate() {
                            let at = ((b / 2) * pt + v - t0) * 2 * QA + (b % 2) * QA;
                            bytes[at..at + QA].copy_from_slice(bytemuck::cast_slice(q));
                        }
                    }
                }
            }
        });
    };
    if per >= tiles {
        (0..tiles.div_ceil(per)).for_each(task);
    } else {
        pool.run(tiles.div_ceil(per), &task);
    }
}

/// Words of the AMX pair operands after `n` vectors' prep words over `nb`
/// blocks (see [`PrepKey`]): the full tiles' codes.
fn pair_words(n: usize, nb: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        (n - n % amx::TW) * nb * 8
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (n, nb);
        0
    }
}

/// The AMX pair operands (see [`PrepKey`]) of the tile of vectors from `v`
/// (a multiple of 16) from 32-element block `blk` (even) on, in a buffer of
/// `n` vectors' prep words over `nba` blocks.
#[cfg(target_arch = "x86_64")]
fn pairs_at(prep: &[u32], n: usize, nba: usize, v: usize, blk: usize) -> &[u8] {
    debug_assert!(v.is_multiple_of(amx::TW) && blk.is_multiple_of(2));
    let words = &prep[n * nba * PREP + v * nba * 8 + (blk / 2) * amx::TW * 16..];
    bytemuck::cast_slice(words)
}

thread_local! {
    /// One vector's quantized activations (see [`build_preps`]).
    static ONE: RefCell<QuantizedActivations> = RefCell::new(QuantizedActivations::new());
}

/// Activation elements from which preparing them is split over the pool
/// (below, waking it costs more than it saves).
const PARALLEL_PREP: usize = 16 * 1024;

/// Vector `i` of a tile of `nt` (its words in `tile`) from its quantized
/// activations `a`, for sub-blocks of `sub` and offset `off`.
fn prep_vector(sub: usize, off: i32, a: super::ActRef, i: usize, nt: usize, tile: &mut [u32]) {
    for (b, q) in a.q.chunks_exact(QA).enumerate() {
        let p = &mut tile[(b * nt + i) * PREP..][..PREP];
        bytemuck::cast_slice_mut::<u32, u8>(&mut p[..8]).copy_from_slice(bytemuck::cast_slice(q));
        p[8] = a.d[b].to_bits();
        let ls = &a.ls[8 * b..8 * b + 8];
        let (s0, s1): (i32, i32) = if sub == 16 {
            (ls[..4].iter().sum(), ls[4..].iter().sum())
        } else {
            (ls.iter().sum(), 0)
        };
        p[9] = (-off * s0) as u32;
        p[10] = (-off * s1) as u32;
        p[11] = (s0 as f32).to_bits();
        p[12] = (s1 as f32).to_bits();
        p[13] = s0 as u32;
        p[14] = s1 as u32;
    }
}

/// Per-call buffers reused on one thread.
#[derive(Default)]
struct Bufs {
    /// Prep words per distinct `(SUB, OFF, span)` of the call's kinds (what
    /// [`build_preps`] depends on).
    preps: Vec<(PrepKey, Vec<u32>)>,
    /// Per member of the call: its kind, its prep words' index in `preps`
    /// and its first output row.
    parts: Vec<(Kind, usize, usize)>,
    /// The call's tasks: `(member, first group, end group)`.
    tasks: Vec<(usize, usize, usize)>,
    /// The threads' regions of a decode-sized call.
    regions: regions::Regions,
}

thread_local! {
    static BUFS: RefCell<Bufs> = RefCell::new(Bufs::default());
}

/// Below this many weight bytes (times the vectors' work) a call runs on
/// the caller alone.
const MIN_PARALLEL_BYTES: usize = 96 * 1024;
/// At least this many weight bytes per task.
const MIN_TASK_BYTES: usize = 32 * 1024;

/// `y[v] = W · x[v]` for `n` vectors on `isa` (the dispatcher's entry for
/// [`Layout::Rows16`] views). `w` must be a Rows16 view with a [`Kind`].
pub(crate) fn matmul(isa: Isa, pool: &Pool, w: &NativeView, x: &[f32], n: usize, y: &mut [f32]) {
    matmul_concat(isa, pool, std::slice::from_ref(w), x, n, y)
}

/// `y[v] = [W0 · x[v], W1 · x[v], …]` (`y` is `[n][Σ rows]`) for Rows16
/// views of one width, of any mix of types: the activations are quantized
/// once and every member's row groups run in one pool call, so a q‖k‖v of
/// Q4_K and Q6_K members costs what one fused matrix does. Each member's
/// rows get exactly the bits [`matmul`] gives it alone.
pub(crate) fn matmul_concat(
    isa: Isa,
    pool: &Pool,
    ws: &[NativeView],
    x: &[f32],
    n: usize,
    y: &mut [f32],
) {
    let Some(first) = ws.first() else { return };
    let cols = first.cols();
    let total: usize = ws.iter().map(NativeView::rows).sum();
    assert!(
        ws.iter().all(|w| w.cols() == cols),
        "members must share cols"
    );
    assert_eq!(x.len(), n * cols, "x length must equal n * cols");
    assert_eq!(y.len(), n * total, "y length must equal n * total rows");
    let mut bufs = BUFS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    // Prep words once per distinct (SUB, OFF, span); each member notes which.
    let mut used = 0;
    let mut off = 0;
    bufs.parts.clear();
    for w in ws {
        let k = kind_of(w);
        #[cfg(target_arch = "x86_64")]
        let pairs = k.iscale && prep_width(isa) == amx::TW && amx::runs(&k);
        #[cfg(not(target_arch = "x86_64"))]
        let pairs = false;
        let key = (k.sub, k.off, k.span(), pairs);
        let (prep, _) = claim(&mut bufs.preps, &mut used, key);
        bufs.parts.push((k, prep, off));
        off += w.rows();
    }
    let pt = prep_width(isa);
    build_preps(pool, x, n, cols, pt, &mut bufs.preps[..used]);
    // Tasks: each member's row groups in chunks sized as for one matrix.
    let bytes: usize = ws.iter().map(NativeView::byte_len).sum();
    let work = bytes + bytes * (n - 1) / 4;
    let split = pool.threads() > 1 && work >= MIN_PARALLEL_BYTES;
    let decode = split && n <= VT;
    bufs.tasks.clear();
    if decode {
        // Each thread streams its own region (see `regions`).
        bufs.regions.reset(ws, pool.threads());
    } else if split {
        guided_tasks(ws, pool.threads(), &mut bufs.tasks);
    } else {
        for (p, w) in ws.iter().enumerate() {
            bufs.tasks.push((p, 0, w.rows().div_ceil(R)));
        }
    }
    let out = SendPtr(y.as_mut_ptr());
    let (tasks, regions, parts, preps) = (&bufs.tasks, &bufs.regions, &bufs.parts, &bufs.preps);
    // Row groups g0..g1 of member p, for every vector.
    let run = |p: usize, g0: usize, g1: usize| {
        let (k, prep, first_row) = &parts[p];
        // SAFETY: both schedules hand out every group of every member exactly
        // once, so runs write disjoint rows of y ([n][total]), which outlives
        // the pool run; first_row + rows of p <= total.
        let o = unsafe { out.at(*first_row) };
        let per = panel_groups(k, ws[p].cols() / k.qk);
        run_groups(isa, k, &ws[p], g0, g1, n, &preps[*prep].1, o, total, per);
    };
    if decode {
        pool.run(regions.len(), &|t| {
            while let Some((p, g0, g1)) = regions.next(t) {
                run(p, g0, g1);
            }
        });
    } else if !split || tasks.len() == 1 {
        tasks.iter().for_each(|&(p, g0, g1)| run(p, g0, g1));
    } else {
        pool.run(tasks.len(), &|t| {
            let (p, g0, g1) = tasks[t];
            run(p, g0, g1)
        });
    }
    BUFS.with(|b| *b.borrow_mut() = bufs);
}

/// The tasks of a split prefill-sized call (more than [`VT`] vectors;
/// decode-sized calls split by [`regions::Regions`]): each member's row
/// groups in chunks that shrink as the call proceeds (guided scheduling): a
/// chunk takes
/// `1 / (2 · threads)` of the weight bytes still unassigned, at least
/// [`MIN_TASK_BYTES`], so the first chunks are long streams and the last
/// ones short, and the thread that finishes first waits for at most a short
/// chunk. With equal chunks (`4 · threads` per member) a thread could wait up
/// to a whole one, 1/8 of the matrix on 2 threads, at the end of every call.
fn guided_tasks(ws: &[NativeView], threads: usize, tasks: &mut Vec<(usize, usize, usize)>) {
    let mut left: usize = ws.iter().map(NativeView::byte_len).sum();
    for (p, w) in ws.iter().enumerate() {
        let groups = w.rows().div_ceil(R);
        let gb = w.rows16_group_bytes().max(1);
        let mut g0 = 0;
        while g0 < groups {
            let want = (left / (2 * threads.max(1))).max(MIN_TASK_BYTES);
            let g1 = (g0 + want.div_ceil(gb)).min(groups);
            tasks.push((p, g0, g1));
            left = left.saturating_sub((g1 - g0) * gb);
            g0 = g1;
        }
    }
}

/// The entry for `key` among the first `*used` of `v` (`false`), else the
/// next one (reused or new) claimed for it (`true`: its value is stale and
/// must be rebuilt by the caller).
fn claim<K: PartialEq + Copy, T: Default>(
    v: &mut Vec<(K, T)>,
    used: &mut usize,
    key: K,
) -> (usize, bool) {
    if let Some(i) = v[..*used].iter().position(|(k, _)| *k == key) {
        return (i, false);
    }
    if *used == v.len() {
        v.push((key, T::default()));
    }
    v[*used].0 = key;
    *used += 1;
    (*used - 1, true)
}

/// The scalar reference, single-threaded, from the reference quantizer.
pub(crate) fn matmul_ref(w: &NativeView, x: &[f32], n: usize, y: &mut [f32]) {
    let k = kind_of(w);
    let mut qa = QuantizedActivations::new();
    qa.quantize_ref(x, n, w.cols(), k.span());
    let groups = w.rows().div_ceil(R);
    let nbg = w.cols() / k.qk;
    let gs = w.rows16_group_bytes();
    let mut st = Stage::new();
    for g in 0..groups {
        let mut acc = vec![[0f32; R]; n];
        for b in 0..nbg {
            let gb = &w.codes()[g * gs + b * k.group_block()..][..k.group_block()];
            decode_scalar(&k, gb, &mut st);
            for (v, acc) in acc.iter_mut().enumerate() {
                let a = qa.get(v);
                let b0 = b * k.blocks();
                dot_stage_scalar(&k, &st, &a.q[b0 * QA..], a.d[b0], acc);
            }
        }
        for (v, acc) in acc.iter().enumerate() {
            for (i, &val) in acc.iter().enumerate().take(R.min(w.rows() - g * R)) {
                y[v * w.rows() + g * R + i] = val;
            }
        }
    }
}

fn kind_of(w: &NativeView) -> Kind {
    match w.layout() {
        Layout::Rows16(t) => Kind::of(t).expect("Rows16 view of a type with a kernel"),
        l => panic!("rows16 kernel on a {l} view"),
    }
}

/// Whether `w` runs on these kernels.
pub(crate) fn handles(w: &NativeView) -> bool {
    matches!(w.layout(), Layout::Rows16(t) if Kind::of(t).is_some())
}

thread_local! {
    static STAGE: RefCell<Option<Box<Stage>>> = const { RefCell::new(None) };
    /// The prefill path's decoded group-blocks (see [`run_groups`]).
    static PANEL: RefCell<Vec<Stage>> = const { RefCell::new(Vec::new()) };
}

/// Bytes of the stages the prefill path keeps decoded at once (counting
/// what the dot loops read of each: its blocks' codes, its sub-blocks'
/// scales and mins): a chunk of row groups whose group-blocks over one
/// column range fit is decoded once and then run for every vector of the
/// call, while each block of [`VB`] vectors' prep words over the range
/// ([`RANGE_PREP_BYTES`]) stays in L2 across the chunk.
const PANEL_BYTES: usize = 256 * 1024;

/// Row groups per panel chunk for a kind with `nbg` group-blocks per row
/// group (at least 1): the groups' blocks of one column range
/// ([`range_blocks`]) fit [`PANEL_BYTES`].
fn panel_groups(k: &Kind, nbg: usize) -> usize {
    let read = k.blocks() * 8 * R * 4 + 2 * k.subs() * R * 4;
    (PANEL_BYTES / (read * range_blocks(k).min(nbg)).max(1)).max(1)
}

/// Bytes of one block of [`VB`] vectors' prep words over a column range.
const RANGE_PREP_BYTES: usize = 256 * 1024;

/// ggml blocks per column range of the prefill path: [`VB`] vectors' prep
/// words over the range fit [`RANGE_PREP_BYTES`] (2048 columns for every
/// kind), so they stay in L2 while a panel's groups pass. Rows longer than
/// that run range by range, each continuing the previous one's sums: the
/// same operations in the same order. As one range, a long row's prep words
/// leave L2: the 8B's down projection (14336 columns) has 1.8 MiB of them
/// per block of vectors, which would be read from L3 once per row group.
fn range_blocks(k: &Kind) -> usize {
    (RANGE_PREP_BYTES / (VB * k.blocks() * PREP * 4)).max(1)
}

/// Row groups `g0..g1` for all `n` vectors, writing `out[v * stride + r]`.
///
/// Up to [`VT`] vectors (decode) take the register paths: each group's codes
/// decoded in registers and dotted at once. More vectors (prefill) take the
/// staged path: the groups run in chunks of `per` ([`panel_groups`]) and
/// column ranges ([`range_blocks`]); a chunk's group-blocks over a range are
/// decoded once into the thread's panel, then every block of [`VB`] vectors
/// runs over them, in tiles of [`VT`] vectors per stage. So each weight is
/// decoded once per call whatever `n`, not once per block of [`VB`] vectors
/// (decoding is a visible share of a prefill's time).
#[allow(clippy::too_many_arguments)]
fn run_groups(
    isa: Isa,
    k: &Kind,
    w: &NativeView,
    g0: usize,
    g1: usize,
    n: usize,
    prep: &[u32],
    out: *mut f32,
    stride: usize,
    per: usize,
) {
    let rows = w.rows();
    let nbg = w.cols() / k.qk;
    let nba = w.cols() / QA;
    let gs = w.rows16_group_bytes();
    let codes = w.codes();
    let mut acc = vec![[0f32; R]; VB.min(n)];
    // The group's accumulators of vectors v0.. into the output.
    let write = |acc: &[[f32; R]], v0: usize, g: usize| {
        let valid = R.min(rows - g * R);
        for (v, a) in acc.iter().enumerate() {
            // SAFETY: v0 + v < n and g * 16 + valid <= rows <= stride:
            // inside the caller's [n][stride] output; this task owns
            // group g, and `acc` is not part of it.
            unsafe {
                let o = out.add((v0 + v) * stride + g * R);
                if valid == R {
                    // One full line: a fixed-size copy, not a call.
                    o.cast::<[f32; R]>().write_unaligned(*a);
                } else {
                    std::ptr::copy_nonoverlapping(a.as_ptr(), o, valid);
                }
            };
        }
    };
    // A column range's partial sums back from the output (the next range
    // continues them: the same fmas in the same order as one pass).
    let read = |acc: &mut [[f32; R]], v0: usize, g: usize| {
        let valid = R.min(rows - g * R);
        for (v, a) in acc.iter_mut().enumerate() {
            // SAFETY: as `write`: the same entries, which this task wrote
            // for the previous range.
            unsafe {
                let o = out.add((v0 + v) * stride + g * R);
                if valid == R {
                    *a = o.cast::<[f32; R]>().read_unaligned();
                } else {
                    *a = [0.0; R];
                    std::ptr::copy_nonoverlapping(o, a.as_mut_ptr(), valid);
                }
            }
        }
    };
    let direct = cfg!(target_arch = "x86_64")
        && n <= VT
        && matches!(isa, Isa::Avx512Vnni | Isa::Avx2 | Isa::AvxVnni);
    if direct {
        #[cfg(target_arch = "x86_64")]
        {
            let mut st = STAGE
                .with(|s| s.borrow_mut().take())
                .unwrap_or_else(Stage::new);
            let (pp, bs) = prep_tile(prep, nba, 0, n, 0);
            for g in g0..g1 {
                acc.iter_mut().for_each(|a| *a = [0.0; R]);
                // The whole row group in one call, codes decoded in
                // registers, accumulators kept in registers.
                let grp = &codes[g * gs..(g + 1) * gs];
                if isa == Isa::Avx512Vnni {
                    // SAFETY: the dispatcher checked the ISA; `grp` is the
                    // group's group-blocks; `pp` holds the tile's prep words.
                    unsafe { avx512::dot_direct(k, grp, &mut st, pp, bs, &mut acc) };
                } else {
                    // SAFETY: as above (AVX2, FMA and F16C checked).
                    unsafe { avx2_direct::dot_direct(k, grp, &mut st, pp, bs, &mut acc) };
                }
                write(&acc, 0, g);
            }
            STAGE.with(|s| *s.borrow_mut() = Some(st));
        }
        return;
    }
    let pt = prep_width(isa);
    // Whether this kind's full tiles run on AMX (decided once per call).
    #[cfg(target_arch = "x86_64")]
    let on_amx = pt == amx::TW && amx::runs(k);
    let mut panel = PANEL.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let span = range_blocks(k).min(nbg);
    let need = per.min(g1 - g0) * span;
    if panel.len() < need {
        panel.resize_with(need, || *Stage::new());
    }
    let mut b0 = 0;
    while b0 < nbg {
        let b1 = (b0 + span).min(nbg);
        let nbr = b1 - b0;
        let mut c0 = g0;
        while c0 < g1 {
            let c1 = (c0 + per).min(g1);
            for g in c0..c1 {
                for b in b0..b1 {
                    let at = g * gs + b * k.group_block();
                    let gb = &codes[at..][..k.group_block()];
                    let next = codes.as_ptr().wrapping_add(at + k.group_block() + PF_BYTES);
                    let st = &mut panel[(g - c0) * nbr + b - b0];
                    stage(isa, k, gb, st, next);
                    #[cfg(target_arch = "x86_64")]
                    if on_amx {
                        // SAFETY: AMX is enabled only with AVX-512.
                        unsafe { amx::prepare(k, st) };
                    }
                }
            }
            let mut v0 = 0;
            while v0 < n {
                let nv = VB.min(n - v0);
                for g in c0..c1 {
                    let acc = &mut acc[..nv];
                    if b0 == 0 {
                        acc.iter_mut().for_each(|a| *a = [0.0; R]);
                    } else {
                        read(acc, v0, g);
                    }
                    let mut b = b0;
                    while b < b1 {
                        // `tile_stages` staged group-blocks at a time.
                        let bn = tile_stages(k).min(b1 - b);
                        let at = (g - c0) * nbr + b - b0;
                        let sts = &mut panel[at..at + bn];
                        // Tiles of `pt` vectors, each with its prep words
                        // interleaved per block (see `build_prep`); on AMX
                        // the full ones on its tile, the rest on AVX-512's.
                        let mut t0 = 0;
                        #[cfg(target_arch = "x86_64")]
                        if on_amx && nv >= pt {
                            let full = nv / pt;
                            for i in 0..full {
                                let v = v0 + i * pt;
                                let (pp, bs) = prep_tile(prep, nba, v, pt, b * k.blocks());
                                let acc = &mut acc[i * pt..(i + 1) * pt];
                                let pairs = if k.iscale {
                                    pairs_at(prep, n, nba, v, b * k.blocks())
                                } else {
                                    &[]
                                };
                                // SAFETY: `prep_width` found AMX usable (on
                                // this ISA) and `runs` holds; the tile's prep
                                // words (and pair operands) from block b on.
                                unsafe { amx::dot(k, sts, pp, bs, pairs, acc) };
                            }
                            t0 = full * pt;
                        }
                        while t0 < nv {
                            let nt = pt.min(nv - t0);
                            let (pp, bs) = prep_tile(prep, nba, v0 + t0, nt, b * k.blocks());
                            let acc = &mut acc[t0..t0 + nt];
                            match isa {
                                #[cfg(target_arch = "x86_64")]
                                // SAFETY: the dispatcher checked the ISA; `pp` holds
                                // the tile's prep words from block b on, VT-vector
                                // parts of it at i · PREP.
                                Isa::Avx512Vnni => unsafe {
                                    for (i, acc) in acc.chunks_mut(VT).enumerate() {
                                        avx512::dot(k, sts, &pp[i * VT * PREP..], bs, acc)
                                    }
                                },
                                #[cfg(target_arch = "x86_64")]
                                // SAFETY: as above (AVX2 + FMA checked).
                                Isa::Avx2 | Isa::AvxVnni => unsafe {
                                    avx2::dot(k, sts, pp, bs, acc)
                                },
                                _ => {
                                    for (i, st) in sts.iter().enumerate() {
                                        let pp = &pp[i * k.blocks() * bs..];
                                        for (v, a) in acc.iter_mut().enumerate() {
                                            dot_prep_scalar(k, st, &pp[v * PREP..], bs, a);
                                        }
                                    }
                                }
                            }
                            t0 += nt;
                        }
                        b += bn;
                    }
                    write(acc, v0, g);
                }
                v0 += nv;
            }
            c0 = c1;
        }
        b0 = b1;
    }
    PANEL.with(|p| *p.borrow_mut() = panel);
}

/// Vectors per dot tile (the widest register tile of the SIMD paths).
const VT: usize = 8;

/// The tile prefill-sized calls run on `isa`: `"amx-int8"` where the
/// AVX-512 path hands kinds with 32-element sub-blocks to AMX (see
/// `rows16/amx.rs`), else the ISA's own name.
pub fn prefill_tile(isa: Isa) -> &'static str {
    if prep_width(isa) == VT {
        isa.name()
    } else {
        "amx-int8"
    }
}

/// Whether this process may use AMX-INT8 for the prefill tile: the CPU has
/// it, Linux granted the tile state (asked once, here), and `GPACK_NO_AMX`
/// is not set. Probes that run AMX code of their own call it for the
/// permission.
pub fn amx_enabled() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        amx::enabled()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Vectors per tile of the prep words' layout on `isa` (see
/// [`prep_tile`]): [`VT`], or the AMX tile's 16 where that runs.
fn prep_width(isa: Isa) -> usize {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni && amx::enabled() {
        return amx::TW;
    }
    let _ = isa;
    VT
}

/// Staged group-blocks per dot call of the prefill path: one-block kinds
/// (32-element group-blocks, 64 `vpdpbusd`s per tile and stage) take 8 at
/// a time, keeping their accumulators in registers across them; bigger
/// group-blocks one (their codes, 4 KiB a stage, are read by every tile of
/// the call from L1).
fn tile_stages(k: &Kind) -> usize {
    if k.blocks() == 1 {
        8
    } else {
        1
    }
}

/// Prefetch distance of the weight stream, in bytes (into L2): the fastest of
/// the distances measured (2 to 32 KiB) on an 8B body's decode; on a 1B body
/// 8 and 16 KiB are within noise of each other (figures:
/// docs/perf-history/kernels.md).
pub(crate) const PF_BYTES: usize = 16384;

/// The AVX2 register path's prefetch distance: its decoders spend about
/// twice the instructions per byte, so the same latency is covered by half
/// the bytes. On an AVX2-only CPU decode is far slower without software
/// prefetch, and 4 to 16 KiB are close. The hints are spread over a
/// group-block's blocks, because a burst of them stalls on full miss buffers;
/// spread, 8 and 16 KiB are within noise of each other (figures:
/// docs/perf-history/kernels.md).
pub(crate) const PF_BYTES_AVX2: usize = 8192;

/// Prefetches `len` bytes from `p` into L2, one hint per 64-byte line (the
/// SIMD decoders' look-ahead over the weight stream).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_l2(p: *const u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    let mut o = 0;
    while o < len {
        // SAFETY: SSE is part of x86_64, and a prefetch is a hint that never
        // faults, whatever the address (hence `wrapping_add`).
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(o).cast()) };
        o += 64;
    }
}

/// A lookup type's staged codes by 4-bit index: ggml's value table plus the
/// kind's OFF of 128, the operand of the SIMD decoders' byte shuffles.
#[cfg(target_arch = "x86_64")]
const fn staged_lut(values: &[i8; 16]) -> [u8; 16] {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (values[i] as i16 + 128) as u8;
        i += 1;
    }
    t
}

/// IQ4_NL and IQ4_XS: ggml `kvalues_iq4nl` + 128.
#[cfg(target_arch = "x86_64")]
const LUT_IQ4NL: [u8; 16] = staged_lut(&crate::ggml::KVALUES_IQ4NL);
/// MXFP4: ggml `kvalues_mxfp4` (the doubled e2m1 values) + 128.
#[cfg(target_arch = "x86_64")]
const LUT_MXFP4: [u8; 16] = staged_lut(&crate::ggml::KVALUES_MXFP4);

/// Decodes a group-block into the stage on `isa`.
fn stage(isa: Isa, k: &Kind, gb: &[u8], st: &mut Stage, next: *const u8) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the dispatcher checked the ISA; `gb` is one group-block.
        Isa::Avx512Vnni => unsafe { avx512::decode(k, gb, st, next) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the dispatcher checked the ISA (AVX-VNNI's check includes
        // AVX2, FMA and F16C); `gb` is one group-block.
        Isa::Avx2 | Isa::AvxVnni => unsafe { avx2_decode::decode(k, gb, st, next) },
        _ => {
            let _ = next;
            decode_scalar(k, gb, st)
        }
    }
}

/// The prep words of the tile of `nt` vectors starting at vector `v` (a
/// multiple of the call's [`prep_width`]) from 32-element block `blk` on,
/// and their block stride in words (vector `i` of the tile is `i * PREP`
/// words in).
fn prep_tile(prep: &[u32], nba: usize, v: usize, nt: usize, blk: usize) -> (&[u32], usize) {
    (&prep[(v * nba + blk * nt) * PREP..], nt * PREP)
}

/// The canonical formula from prep words (the scalar path of
/// [`run_groups`]: the same operations as [`dot_stage_scalar`], reading the
/// prepared sums).
fn dot_prep_scalar(k: &Kind, st: &Stage, p: &[u32], bs: usize, acc: &mut [f32; R]) {
    let per = QA / k.sub;
    for (i, a) in acc.iter_mut().enumerate() {
        let mut t = 0f32;
        let mut ti = 0i32;
        for kb in 0..k.blocks() {
            let pw = &p[kb * bs..][..PREP];
            let xq: &[u8] = bytemuck::cast_slice(&pw[..8]);
            for hh in 0..per {
                let h = kb * per + hh;
                let mut pv = pw[9 + hh] as i32;
                for (o, &x) in xq.iter().enumerate().skip(hh * k.sub).take(k.sub) {
                    let u = i32::from(st.codes[kb][(o / 4) * R * 4 + i * 4 + o % 4]);
                    pv += u * i32::from(x as i8);
                }
                if k.iscale {
                    ti += st.iscales[h][i] * pv;
                    continue;
                }
                t = st.scales[h][i].mul_add(pv as f32, t);
                if k.asym {
                    t = st.mins[h][i].mul_add(f32::from_bits(pw[11 + hh]), t);
                }
            }
        }
        if k.iscale {
            t = st.d[i] * ti as f32;
        }
        *a = f32::from_bits(p[8]).mul_add(t, *a);
    }
}

/// Test hook: decodes group-block `(g, b)` of `w` with the scalar decoder
/// and with the SIMD decoder of `isa`, returning whether the stages agree
/// bit for bit where the dot loops read them (codes, scales, and the mins
/// of the asymmetric kinds; the SIMD decoders leave the symmetric kinds'
/// mins, which no loop reads, as they were).
#[doc(hidden)]
pub fn stage_matches(isa: Isa, w: &NativeView, g: usize, b: usize) -> bool {
    let k = kind_of(w);
    let gs = w.rows16_group_bytes();
    let gb = &w.codes()[g * gs + b * k.group_block()..][..k.group_block()];
    let mut a = Stage::new();
    let mut s = Stage::new();
    decode_scalar(&k, gb, &mut a);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            assert!(isa.is_available());
            // SAFETY: checked above; `gb` is one group-block.
            unsafe { avx512::decode(&k, gb, &mut s, gb.as_ptr()) };
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => {
            assert!(isa.is_available());
            // SAFETY: checked above; `gb` is one group-block.
            unsafe { avx2_decode::decode(&k, gb, &mut s, gb.as_ptr()) };
        }
        _ => decode_scalar(&k, gb, &mut s),
    }
    let bits = |st: &Stage| -> Vec<u32> {
        let mut v: Vec<u32> = st.scales[..k.subs()]
            .iter()
            .chain(&st.mins[..if k.asym { k.subs() } else { 0 }])
            .flatten()
            .map(|f| f.to_bits())
            .collect();
        v.extend(
            st.codes[..k.blocks()]
                .iter()
                .flatten()
                .map(|&c| u32::from(c)),
        );
        if k.iscale {
            v.extend(st.iscales[..k.subs()].iter().flatten().map(|&c| c as u32));
            v.extend(st.d.iter().map(|f| f.to_bits()));
        }
        v
    };
    bits(&a) == bits(&s)
}

/// Probe hook (the `stage_probe` example times it): decodes every
/// group-block of `w` into one stage on `isa`, as the prefill path does,
/// and returns a checksum of the stage so the work cannot be skipped.
///
/// # Panics
/// If `isa` is not available or `w` is not a Rows16 view with a kernel.
#[doc(hidden)]
pub fn stage_all(isa: Isa, w: &NativeView) -> u32 {
    assert!(isa.is_available());
    let k = kind_of(w);
    let gbs = k.group_block();
    let codes = w.codes();
    let mut st = Stage::new();
    let mut sum = 0u32;
    for (i, gb) in codes.chunks_exact(gbs).enumerate() {
        let next = codes.as_ptr().wrapping_add((i + 1) * gbs + PF_BYTES);
        stage(isa, &k, gb, &mut st, next);
        sum = sum.wrapping_add(u32::from(st.codes[0][i % 512]) ^ st.scales[0][i % R].to_bits());
    }
    sum
}

/// Rows `r0 ..` of a Rows16 view dequantized into `out` (row-major,
/// `out.len() / cols` rows), bit-identical to
/// [`NativeView::dequantize_row`] (ggml's dequantization): each group-block
/// is decoded once into the stage on `isa` — no gather of each row's block
/// — and every value formed as ggml forms it from the stage's split: `s_h ·
/// w` (symmetric kinds, `w = u - OFF`), `s_h · u + m_h` (asymmetric, `m_h`
/// the negated min), a rounded product then a rounded add.
///
/// # Panics
/// If `w` is not a Rows16 view with a kernel, `out.len()` is not a multiple
/// of the columns, or the rows run past the view.
pub(crate) fn dequantize_rows(isa: Isa, w: &NativeView, r0: usize, out: &mut [f32]) {
    let k = kind_of(w);
    let cols = w.cols();
    assert!(
        cols > 0 && out.len().is_multiple_of(cols),
        "out must hold whole rows"
    );
    let r1 = r0 + out.len() / cols;
    assert!(
        r1 <= w.rows(),
        "rows {r0}..{r1} out of range ({} rows)",
        w.rows()
    );
    let mut st = STAGE
        .with(|s| s.borrow_mut().take())
        .unwrap_or_else(Stage::new);
    let (gs, nbg, per) = (w.rows16_group_bytes(), cols / k.qk, QA / k.sub);
    let mut g = r0 / R;
    while g * R < r1 {
        let (i0, i1) = (r0.max(g * R) - g * R, (r1 - g * R).min(R));
        for b in 0..nbg {
            let gb = &w.codes()[g * gs + b * k.group_block()..][..k.group_block()];
            stage(isa, &k, gb, &mut st, std::ptr::null());
            for i in i0..i1 {
                let row = (g * R + i - r0) * cols + b * k.qk;
                for (kb, ob) in out[row..row + k.qk].chunks_exact_mut(QA).enumerate() {
                    // Row i's 32 codes of this block, out of the words.
                    let mut c = [0u8; QA];
                    for (j, cj) in c.chunks_exact_mut(4).enumerate() {
                        cj.copy_from_slice(&st.codes[kb][j * R * 4 + i * 4..][..4]);
                    }
                    for (hh, (o, c)) in ob
                        .chunks_exact_mut(k.sub)
                        .zip(c.chunks_exact(k.sub))
                        .enumerate()
                    {
                        let h = kb * per + hh;
                        let s = st.scales[h][i];
                        if k.asym {
                            let m = st.mins[h][i];
                            for (o, &u) in o.iter_mut().zip(c) {
                                *o = s * f32::from(u) + m;
                            }
                        } else {
                            for (o, &u) in o.iter_mut().zip(c) {
                                *o = s * (i32::from(u) - k.off) as f32;
                            }
                        }
                    }
                }
            }
        }
        g += 1;
    }
    STAGE.with(|s| *s.borrow_mut() = Some(st));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Random ggml blocks of `t` (`rows × cols`) whose f16 scale fields
    /// (the first `f16s` of each block) are small finite values.
    pub(crate) fn blocks(
        t: GgmlType,
        rows: usize,
        cols: usize,
        f16s: usize,
        seed: &mut u64,
    ) -> Vec<u8> {
        let (qk, ts) = t.block();
        let mut next = || {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*seed >> 33) as u8
        };
        let mut v: Vec<u8> = (0..rows * cols / qk as usize * ts as usize)
            .map(|_| next())
            .collect();
        for b in v.chunks_exact_mut(ts as usize) {
            for f in 0..f16s {
                // 0x2000..0x2FFF: f16 values around 0.01 to 0.1.
                b[2 * f] = next();
                b[2 * f + 1] = 0x20 | (next() & 0x0F);
            }
        }
        v
    }

    /// `src` (ggml blocks of `t`, `rows × cols`) in the canonical Rows16
    /// layout, in an aligned buffer for [`NativeView::parse`].
    pub(crate) fn rows16(t: GgmlType, src: &[u8], rows: usize, cols: usize) -> crate::AlignedBuf {
        let mut bytes = Vec::new();
        crate::transcode_canonical(t, src, rows as u64, cols as u64, &mut bytes).unwrap();
        let mut buf = crate::AlignedBuf::zeroed(bytes.len());
        std::io::Write::write_all(&mut buf, &bytes).unwrap();
        buf
    }

    /// `n` activation vectors for `w` (a fixed spread of values) and the
    /// scalar reference's product with them.
    fn inputs_and_reference(w: &NativeView, n: usize) -> (Vec<f32>, Vec<f32>) {
        let x: Vec<f32> = (0..n * w.cols())
            .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 97.0)
            .collect();
        let mut want = vec![0f32; n * w.rows()];
        matmul_ref(w, &x, n, &mut want);
        (x, want)
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    /// Every panel chunk size (one row group per chunk, two, a ragged last
    /// chunk, all at once) gives the reference's bits on every path, for a
    /// one-block kind and a 256-element kind, across a vector block boundary
    /// (70 vectors: 64 + 6).
    #[test]
    fn every_panel_chunk_size_gives_the_reference_bits() {
        let mut seed = 11u64;
        for (t, f16s) in [(GgmlType::Q8_0, 1), (GgmlType::Q4_K, 2)] {
            let (rows, cols, n) = (100, 512, 70);
            let buf = rows16(t, &blocks(t, rows, cols, f16s, &mut seed), rows, cols);
            let w = NativeView::parse(buf.as_slice()).unwrap();
            let (x, want) = inputs_and_reference(&w, n);
            let k = kind_of(&w);
            let groups = rows.div_ceil(R);
            for isa in Isa::available() {
                let pt = prep_width(isa);
                let pairs = k.iscale && pt == 16;
                let mut preps = vec![((k.sub, k.off, k.span(), pairs), Vec::new())];
                build_preps(Pool::global(), &x, n, cols, prep_width(isa), &mut preps);
                let prep = &preps[0].1;
                for per in [1, 2, 3, groups] {
                    let mut got = vec![f32::NAN; n * rows];
                    run_groups(isa, &k, &w, 0, groups, n, prep, got.as_mut_ptr(), rows, per);
                    assert_eq!(bits(&got), bits(&want), "{t} {isa:?} per {per}");
                }
            }
        }
    }

    /// Guided tasks cover every member's row groups once, in order, and
    /// each task is short against the work still queued after it (at most
    /// `1 / (2 · threads - 1)` of it, up to the rounding to groups, or the
    /// minimum task size): whoever takes it, the others have enough left to
    /// finish together.
    #[test]
    fn guided_tasks_cover_every_group_once_and_shrink() {
        let mut seed = 5u64;
        let mut bufs = Vec::new();
        for (t, rows) in [
            (GgmlType::Q4_K, 1024),
            (GgmlType::Q6_K, 256),
            (GgmlType::Q8_0, 256),
        ] {
            let cols = 2048;
            let buf = rows16(t, &blocks(t, rows, cols, 1, &mut seed), rows, cols);
            bufs.push(buf);
        }
        let ws: Vec<NativeView> = bufs
            .iter()
            .map(|b| NativeView::parse(b.as_slice()).unwrap())
            .collect();
        for threads in [2, 3, 8] {
            let mut tasks = Vec::new();
            guided_tasks(&ws, threads, &mut tasks);
            let mut next = vec![0; ws.len()];
            let bytes =
                |&(p, g0, g1): &(usize, usize, usize)| (g1 - g0) * ws[p].rows16_group_bytes();
            for (i, task) in tasks.iter().enumerate() {
                let (p, g0, g1) = *task;
                assert!(next[..p].iter().zip(&ws).all(|(&n, w)| n == w.rows() / R));
                assert_eq!(g0, next[p], "member {p} continues where it stopped");
                assert!(g1 > g0);
                next[p] = g1;
                let after: usize = tasks[i + 1..].iter().map(bytes).sum();
                let gb = ws[p].rows16_group_bytes();
                // Rounding up to whole groups: at most 2t/(2t-1) groups.
                let cap = (after / (2 * threads - 1)).max(MIN_TASK_BYTES) + 2 * gb;
                assert!(bytes(task) <= cap, "{threads} threads, task {i}: {tasks:?}");
            }
            for (p, w) in ws.iter().enumerate() {
                assert_eq!(next[p], w.rows() / R, "member {p} fully covered");
            }
            assert!(
                tasks.len() > 2 * threads,
                "{threads} threads: {} tasks",
                tasks.len()
            );
        }
    }

    /// Rows longer than a column range ([`range_blocks`]: 2048 columns) run
    /// range by range, each continuing the last one's sums from the output:
    /// the reference's bits on every path, with a ragged last range and a
    /// ragged last row group (40 rows: its padding lanes are not stored).
    #[test]
    fn rows_longer_than_a_column_range_give_the_reference_bits() {
        let mut seed = 23u64;
        for (t, f16s) in [
            (GgmlType::Q8_0, 1),
            (GgmlType::IQ4_XS, 1),
            (GgmlType::Q6_K, 1),
        ] {
            let (rows, cols, n) = (40, 2 * 2048 + 512, 70);
            let k = Kind::of(t).unwrap();
            assert!(cols / k.qk > 2 * range_blocks(&k), "{t}: three ranges");
            let buf = rows16(t, &blocks(t, rows, cols, f16s, &mut seed), rows, cols);
            let w = NativeView::parse(buf.as_slice()).unwrap();
            let (x, want) = inputs_and_reference(&w, n);
            for isa in Isa::available() {
                let mut got = vec![f32::NAN; n * rows];
                super::super::matmul_on(isa, Pool::global(), &w, &x, n, &mut got);
                assert_eq!(bits(&got), bits(&want), "{t} {isa:?}");
            }
        }
    }
}
