//! Each Rows16 type's byte facts, stated once: where every field of a
//! group-block (16 rows × one ggml block, `interleave.rs`'s byte layout)
//! starts. Every offset is [`crate::interleave::fields`]' field start
//! (ggml-common.h's struct order) times the 16 rows, computed at compile
//! time, so the decoders of every ISA (`avx512.rs`, `avx2_decode.rs`,
//! `avx2_direct.rs`, `amx.rs`) read the same numbers and cannot disagree
//! with the layout. The formula's per-type constants (block size, sub-block
//! size, code offset, symmetric or not) are [`super::Kind`]'s table.
//!
//! A field of 1 or 2 bytes per row is `[16][len]` at its offset (a 32-byte
//! run of f16 values for `d`); a longer one is `[len / 4][16][4]`, one
//! 64-byte vector of 32-bit lanes per 4 bytes of each row ([`WORD`]).

use crate::interleave::{fields, R};
use crate::GgmlType as T;

/// Bytes of one interleaved word of a long field: 4 bytes of each of the
/// 16 rows (one 512-bit register; an AVX2 decoder takes 8 rows = 32 bytes).
pub(crate) const WORD: usize = 4 * R;

/// The start of field `i` of `t` in a group-block.
const fn at(t: T, i: usize) -> usize {
    match fields(t) {
        Some(f) => R * f[i].0 as usize,
        None => panic!("type without a Rows16 layout"),
    }
}

/// `block_q8_0 { d; qs[32] }`.
pub(crate) mod q8_0 {
    use super::{at, T};
    pub(crate) const D: usize = at(T::Q8_0, 0);
    pub(crate) const QS: usize = at(T::Q8_0, 1);
}

/// `block_q4_0 { d; qs[16] }` (IQ4_NL has the same fields).
pub(crate) mod q4_0 {
    use super::{at, T};
    pub(crate) const D: usize = at(T::Q4_0, 0);
    pub(crate) const QS: usize = at(T::Q4_0, 1);
}

/// `block_q4_1 { d; m; qs[16] }`.
pub(crate) mod q4_1 {
    use super::{at, T};
    pub(crate) const D: usize = at(T::Q4_1, 0);
    pub(crate) const M: usize = at(T::Q4_1, 1);
    pub(crate) const QS: usize = at(T::Q4_1, 2);
}

/// `block_q5_0 { d; qh[4]; qs[16] }`.
pub(crate) mod q5_0 {
    use super::{at, T};
    pub(crate) const D: usize = at(T::Q5_0, 0);
    pub(crate) const QH: usize = at(T::Q5_0, 1);
    pub(crate) const QS: usize = at(T::Q5_0, 2);
}

/// `block_q5_1 { d; m; qh[4]; qs[16] }`.
pub(crate) mod q5_1 {
    use super::{at, T};
    pub(crate) const D: usize = at(T::Q5_1, 0);
    pub(crate) const M: usize = at(T::Q5_1, 1);
    pub(crate) const QH: usize = at(T::Q5_1, 2);
    pub(crate) const QS: usize = at(T::Q5_1, 3);
}

/// `block_q2_K { scales[16]; qs[64]; d; dmin }`.
pub(crate) mod q2_k {
    use super::{at, T};
    pub(crate) const SCALES: usize = at(T::Q2_K, 0);
    pub(crate) const QS: usize = at(T::Q2_K, 1);
    pub(crate) const D: usize = at(T::Q2_K, 2);
    pub(crate) const DMIN: usize = at(T::Q2_K, 3);
}

/// `block_q3_K { hmask[32]; qs[64]; scales[12]; d }`.
pub(crate) mod q3_k {
    use super::{at, T};
    pub(crate) const HMASK: usize = at(T::Q3_K, 0);
    pub(crate) const QS: usize = at(T::Q3_K, 1);
    pub(crate) const SCALES: usize = at(T::Q3_K, 2);
    pub(crate) const D: usize = at(T::Q3_K, 3);
}

/// `block_q4_K { d; dmin; scales[12]; qs[128] }`.
pub(crate) mod q4_k {
    use super::{at, T};
    pub(crate) const D: usize = at(T::Q4_K, 0);
    pub(crate) const DMIN: usize = at(T::Q4_K, 1);
    pub(crate) const SCALES: usize = at(T::Q4_K, 2);
    pub(crate) const QS: usize = at(T::Q4_K, 3);
}

/// `block_q5_K { d; dmin; scales[12]; qh[32]; qs[128] }`.
pub(crate) mod q5_k {
    use super::{at, T};
    pub(crate) const D: usize = at(T::Q5_K, 0);
    pub(crate) const DMIN: usize = at(T::Q5_K, 1);
    pub(crate) const SCALES: usize = at(T::Q5_K, 2);
    pub(crate) const QH: usize = at(T::Q5_K, 3);
    pub(crate) const QS: usize = at(T::Q5_K, 4);
}

/// `block_q6_K { ql[128]; qh[64]; scales[16]; d }`.
pub(crate) mod q6_k {
    use super::{at, T};
    pub(crate) const QL: usize = at(T::Q6_K, 0);
    pub(crate) const QH: usize = at(T::Q6_K, 1);
    pub(crate) const SCALES: usize = at(T::Q6_K, 2);
    pub(crate) const D: usize = at(T::Q6_K, 3);
}

/// `block_iq4_xs { d; scales_h; scales_l[4]; qs[128] }`.
pub(crate) mod iq4_xs {
    use super::{at, T};
    pub(crate) const D: usize = at(T::IQ4_XS, 0);
    pub(crate) const SCALES_H: usize = at(T::IQ4_XS, 1);
    pub(crate) const SCALES_L: usize = at(T::IQ4_XS, 2);
    pub(crate) const QS: usize = at(T::IQ4_XS, 3);
}

/// `block_mxfp4 { e; qs[16] }`.
pub(crate) mod mxfp4 {
    use super::{at, T};
    pub(crate) const E: usize = at(T::MXFP4, 0);
    pub(crate) const QS: usize = at(T::MXFP4, 1);
}

// The decoders shared by Q4_0/Q4_1 and by Q5_0/Q5_1 read `d` at one
// offset for both; IQ4_NL's reads Q4_0's fields.
const _: () = assert!(q4_0::D == q4_1::D && q5_0::D == q5_1::D);
// Q4_K's decoder serves Q5_K: their d, dmin and scales coincide.
const _: () =
    assert!(q4_k::D == q5_k::D && q4_k::DMIN == q5_k::DMIN && q4_k::SCALES == q5_k::SCALES);
const _: () = assert!(
    matches!(fields(T::IQ4_NL), Some(f) if f.len() == 2 && f[1].0 == 2) && q4_0::QS == 2 * R
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets the decoders were written against (ggml-common.h's
    /// struct offsets × 16), checked against the layout table: a change to
    /// `interleave::fields` that moves a field shows up here.
    #[test]
    fn offsets_are_the_struct_offsets_times_16() {
        assert_eq!((q8_0::D, q8_0::QS), (0, 2 * 16));
        assert_eq!((q4_1::D, q4_1::M, q4_1::QS), (0, 2 * 16, 4 * 16));
        assert_eq!((q5_0::QH, q5_0::QS), (2 * 16, 6 * 16));
        assert_eq!((q5_1::M, q5_1::QH, q5_1::QS), (2 * 16, 4 * 16, 8 * 16));
        assert_eq!((q2_k::QS, q2_k::D, q2_k::DMIN), (16 * 16, 80 * 16, 82 * 16));
        assert_eq!(
            (q3_k::QS, q3_k::SCALES, q3_k::D),
            (32 * 16, 96 * 16, 108 * 16)
        );
        assert_eq!((q4_k::SCALES, q4_k::QS), (4 * 16, 16 * 16));
        assert_eq!((q5_k::QH, q5_k::QS), (16 * 16, 48 * 16));
        assert_eq!(
            (q6_k::QH, q6_k::SCALES, q6_k::D),
            (128 * 16, 192 * 16, 208 * 16)
        );
        assert_eq!(
            (iq4_xs::SCALES_H, iq4_xs::SCALES_L, iq4_xs::QS),
            (2 * 16, 4 * 16, 8 * 16)
        );
        assert_eq!((mxfp4::E, mxfp4::QS), (0, 16));
        assert_eq!(WORD, 64);
    }
}
