//! The ggml tensor type table: type ids, names, block sizes and type sizes.
//!
//! These are byte-layout facts shared by every crate that reads or writes ggml
//! data (GGUF ingest, the quant transcoders, GPACK single-tensor headers, GIW).
//! Values follow `ggml.h` / `ggml-common.h` and the `gguf` Python package's
//! `GGML_QUANT_SIZES` (gguf 0.19.0, which adds NVFP4 and Q1_0; its Q8_1 entry
//! says 40 bytes where ggml's `block_q8_1` is 36); ids of removed types
//! (4, 5, 31–33, 36–38) are unknown.

/// A ggml tensor element type, identified by its stable numeric id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types, missing_docs)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    NVFP4 = 40,
    Q1_0 = 41,
}

/// Super-block size of the K-quants and i-quants (`QK_K` in ggml).
pub const QK_K: u64 = 256;

impl GgmlType {
    /// Every known type, in id order.
    pub const ALL: [GgmlType; 34] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::Q8_K,
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ3_XXS,
        Self::IQ1_S,
        Self::IQ4_NL,
        Self::IQ3_S,
        Self::IQ2_S,
        Self::IQ4_XS,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F64,
        Self::IQ1_M,
        Self::BF16,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
        Self::NVFP4,
        Self::Q1_0,
    ];

    /// The type with this id, or `None` for an unknown or removed id.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        Self::ALL.iter().copied().find(|t| *t as u32 == id)
    }

    /// The numeric id stored in GGUF and GPACK files.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// `(elements per block, bytes per block)`.
    pub fn block(self) -> (u64, u64) {
        use GgmlType::*;
        match self {
            F32 => (1, 4),
            F16 => (1, 2),
            BF16 => (1, 2),
            F64 => (1, 8),
            I8 => (1, 1),
            I16 => (1, 2),
            I32 => (1, 4),
            I64 => (1, 8),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2_K => (QK_K, 84),
            Q3_K => (QK_K, 110),
            Q4_K => (QK_K, 144),
            Q5_K => (QK_K, 176),
            Q6_K => (QK_K, 210),
            Q8_K => (QK_K, 292),
            IQ2_XXS => (QK_K, 66),
            IQ2_XS => (QK_K, 74),
            IQ3_XXS => (QK_K, 98),
            IQ1_S => (QK_K, 50),
            IQ4_NL => (32, 18),
            IQ3_S => (QK_K, 110),
            IQ2_S => (QK_K, 82),
            IQ4_XS => (QK_K, 136),
            IQ1_M => (QK_K, 56),
            TQ1_0 => (QK_K, 54),
            TQ2_0 => (QK_K, 66),
            MXFP4 => (32, 17),
            NVFP4 => (64, 36),
            Q1_0 => (128, 18),
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> u64 {
        self.block().0
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.block().1
    }

    /// The ggml name, as `gguf` prints it (`"Q4_K"`, `"F16"`, …).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            Q1_0 => "Q1_0",
        }
    }

    /// The type with this ggml name (case-insensitive).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Bytes taken by `n_elements` elements, or `None` when `n_elements` is not a
    /// whole number of blocks or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let (bs, ts) = self.block();
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(ts)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        for removed in [4u32, 5, 31, 32, 33, 36, 37, 38, 42, 1000] {
            assert_eq!(GgmlType::from_id(removed), None);
        }
    }

    #[test]
    fn bytes_for_checks_blocks() {
        assert_eq!(GgmlType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(GgmlType::Q4_0.bytes_for(33), None);
        assert_eq!(GgmlType::Q6_K.bytes_for(512), Some(420));
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
    }
}
