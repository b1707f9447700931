//! Section kinds and header flags.

/// What a section holds. Kinds appear in the file in this order, each at most once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum SectionKind {
    /// Binary key-value table (the source's metadata).
    MetadataKv = 0,
    /// Sorted directory of every tensor.
    TensorIndex = 1,
    /// Pre-parsed rows of the small dense tensors.
    DenseIndex = 2,
    /// Packed small dense tensors (norms, biases).
    DensePack = 3,
    /// Index of the native matmul-weight arena.
    NativeDenseIndex = 4,
    /// The native matmul-weight arena.
    NativeDense = 5,
    /// `token_embd.weight`.
    Embed = 6,
    /// `output.weight` (absent when tied to the embedding).
    Head = 7,
    /// Per-layer embedding (PLE) table.
    Ple = 8,
    /// Per-layer expert table (embedded or external).
    ExpertLayout = 9,
    /// Routed expert weights, `[layer][expert]`, each `[gate | up | down]`.
    ExpertBlobs = 10,
    /// GBT1 binary tokenizer.
    TokenizerBin = 11,
    /// Raw tokenizer files.
    TokenizerAssets = 12,
    /// Multi-token-prediction draft layers.
    Mtp = 13,
    /// Canonical JSON manifest (always present, always last).
    Manifest = 14,
}

impl SectionKind {
    /// Every kind in file order.
    pub const ALL: [SectionKind; 15] = [
        Self::MetadataKv,
        Self::TensorIndex,
        Self::DenseIndex,
        Self::DensePack,
        Self::NativeDenseIndex,
        Self::NativeDense,
        Self::Embed,
        Self::Head,
        Self::Ple,
        Self::ExpertLayout,
        Self::ExpertBlobs,
        Self::TokenizerBin,
        Self::TokenizerAssets,
        Self::Mtp,
        Self::Manifest,
    ];

    /// The kind with this number, if known.
    pub fn from_u32(v: u32) -> Option<SectionKind> {
        Self::ALL.get(usize::try_from(v).ok()?).copied()
    }

    /// Required alignment of the payload offset: 4096 for blobs, 64 otherwise.
    pub fn alignment(self) -> u64 {
        use SectionKind::*;
        match self {
            DensePack | NativeDense | Embed | Head | Ple | ExpertBlobs | Mtp => 4096,
            _ => 64,
        }
    }

    /// The seed's name for the kind (`"NativeDenseBlob"`…).
    pub fn spec_name(self) -> &'static str {
        use SectionKind::*;
        match self {
            MetadataKv => "MetadataKvBin",
            TensorIndex => "TensorIndexBin",
            DenseIndex => "DenseIndexBin",
            DensePack => "DensePackBlob",
            NativeDenseIndex => "NativeDenseIndexBin",
            NativeDense => "NativeDenseBlob",
            Embed => "EmbedBlob",
            Head => "HeadBlob",
            Ple => "PleBlob",
            ExpertLayout => "ExpertLayoutBin",
            ExpertBlobs => "ExpertBlobs",
            TokenizerBin => "TokenizerBin",
            TokenizerAssets => "TokenizerAssets",
            Mtp => "MtpBlob",
            Manifest => "ManifestJson",
        }
    }

    /// The default section name written into the table (`"native_dense"`…).
    pub fn default_name(self) -> &'static str {
        use SectionKind::*;
        match self {
            MetadataKv => "metadata_kv",
            TensorIndex => "tensor_index",
            DenseIndex => "dense_index",
            DensePack => "dense_pack",
            NativeDenseIndex => "native_dense_index",
            NativeDense => "native_dense",
            Embed => "embed",
            Head => "head",
            Ple => "ple",
            ExpertLayout => "expert_layout",
            ExpertBlobs => "expert_blobs",
            TokenizerBin => "tokenizer_bin",
            TokenizerAssets => "tokenizer_assets",
            Mtp => "mtp",
            Manifest => "manifest",
        }
    }

    /// The header flag that says this section is present, if any.
    pub fn presence_flag(self) -> Option<HeaderFlags> {
        use SectionKind::*;
        Some(match self {
            DensePack => HeaderFlags::HAS_DENSE_PACK,
            NativeDense => HeaderFlags::HAS_NATIVE_DENSE,
            ExpertBlobs => HeaderFlags::HAS_EXPERT_BLOBS,
            TokenizerBin => HeaderFlags::HAS_TOKENIZER_BIN,
            Mtp => HeaderFlags::HAS_MTP,
            Ple => HeaderFlags::HAS_PLE,
            _ => return None,
        })
    }
}

impl std::fmt::Display for SectionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.spec_name())
    }
}

/// The header's flag bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct HeaderFlags(pub u32);

impl HeaderFlags {
    /// All integers are little-endian (always set).
    pub const LITTLE_ENDIAN: HeaderFlags = HeaderFlags(1 << 0);
    /// A DensePack section is present.
    pub const HAS_DENSE_PACK: HeaderFlags = HeaderFlags(1 << 1);
    /// A NativeDense section is present.
    pub const HAS_NATIVE_DENSE: HeaderFlags = HeaderFlags(1 << 2);
    /// An ExpertBlobs section is present.
    pub const HAS_EXPERT_BLOBS: HeaderFlags = HeaderFlags(1 << 3);
    /// A TokenizerBin section is present.
    pub const HAS_TOKENIZER_BIN: HeaderFlags = HeaderFlags(1 << 4);
    /// An Mtp section is present.
    pub const HAS_MTP: HeaderFlags = HeaderFlags(1 << 5);
    /// A Ple section is present.
    pub const HAS_PLE: HeaderFlags = HeaderFlags(1 << 6);
    /// Routed experts live in files next to this one (ExpertLayout present,
    /// ExpertBlobs absent).
    pub const EXTERNAL_EXPERTS: HeaderFlags = HeaderFlags(1 << 7);
    /// Every bit version 1 defines; any other bit makes a v1 reader fail closed.
    pub const KNOWN: HeaderFlags = HeaderFlags(0xFF);

    /// The flags with their names, in bit order.
    pub const NAMED: [(HeaderFlags, &'static str); 8] = [
        (Self::LITTLE_ENDIAN, "LITTLE_ENDIAN"),
        (Self::HAS_DENSE_PACK, "HAS_DENSE_PACK"),
        (Self::HAS_NATIVE_DENSE, "HAS_NATIVE_DENSE"),
        (Self::HAS_EXPERT_BLOBS, "HAS_EXPERT_BLOBS"),
        (Self::HAS_TOKENIZER_BIN, "HAS_TOKENIZER_BIN"),
        (Self::HAS_MTP, "HAS_MTP"),
        (Self::HAS_PLE, "HAS_PLE"),
        (Self::EXTERNAL_EXPERTS, "EXTERNAL_EXPERTS"),
    ];

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: HeaderFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the set bits (unknown bits as `BIT_n`).
    pub fn names(self) -> Vec<String> {
        (0..32)
            .filter(|b| self.0 & (1 << b) != 0)
            .map(|b| {
                Self::NAMED
                    .iter()
                    .find(|(f, _)| f.0 == 1 << b)
                    .map(|(_, n)| (*n).to_string())
                    .unwrap_or_else(|| format!("BIT_{b}"))
            })
            .collect()
    }

    /// The flags a file with exactly these section kinds must carry.
    pub fn for_sections(kinds: impl IntoIterator<Item = SectionKind>) -> HeaderFlags {
        let mut bits = Self::LITTLE_ENDIAN.0;
        let (mut layout, mut blobs) = (false, false);
        for k in kinds {
            if let Some(f) = k.presence_flag() {
                bits |= f.0;
            }
            layout |= k == SectionKind::ExpertLayout;
            blobs |= k == SectionKind::ExpertBlobs;
        }
        if layout && !blobs {
            bits |= Self::EXTERNAL_EXPERTS.0;
        }
        HeaderFlags(bits)
    }
}

impl std::ops::BitOr for HeaderFlags {
    type Output = HeaderFlags;
    fn bitor(self, rhs: HeaderFlags) -> HeaderFlags {
        HeaderFlags(self.0 | rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_numbered_in_file_order() {
        for (i, k) in SectionKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
            assert_eq!(SectionKind::from_u32(i as u32), Some(*k));
        }
        assert_eq!(SectionKind::from_u32(15), None);
        let blobs: Vec<_> = SectionKind::ALL
            .iter()
            .filter(|k| k.alignment() == 4096)
            .map(|k| *k as u32)
            .collect();
        assert_eq!(blobs, [3, 5, 6, 7, 8, 10, 13]);
    }

    #[test]
    fn flags_follow_sections() {
        use SectionKind::*;
        let f = HeaderFlags::for_sections([MetadataKv, ExpertLayout, Manifest]);
        assert_eq!(f.0, 1 | 1 << 7);
        let f = HeaderFlags::for_sections([ExpertLayout, ExpertBlobs, TokenizerBin]);
        assert_eq!(f.0, 1 | 1 << 3 | 1 << 4);
        assert_eq!(
            HeaderFlags(0b1_0000_0001 | 1 << 4).names(),
            ["LITTLE_ENDIAN", "HAS_TOKENIZER_BIN", "BIT_8"]
        );
    }
}
