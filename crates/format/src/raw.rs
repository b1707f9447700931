//! The fixed-size structs of GPACK v1, exactly as they lie in the file.
//!
//! Every field is a little-endian integer type from `zerocopy`, so the structs
//! have alignment 1, no padding, and the same meaning on any host. Casting
//! bytes to them is done by `zerocopy` (checked size, no `unsafe` here); the
//! compile-time assertions below pin each size to `docs/FORMAT.md`.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `"GPCK"` read as a little-endian u32.
pub const GPACK_MAGIC: u32 = 0x4B43_5047;
/// `"GPKE"` read as a little-endian u32.
pub const FOOTER_MAGIC: u32 = 0x454B_5047;
/// The format version this crate writes.
pub const FORMAT_VERSION: u16 = 1;
/// The newest `min_reader_version` this crate can read.
pub const READER_VERSION: u16 = 1;
/// Size of [`HeaderV1`].
pub const HEADER_SIZE: u64 = 64;
/// Size of [`SectionEntryV1`].
pub const SECTION_ENTRY_SIZE: u64 = 96;
/// Size of [`FooterV1`].
pub const FOOTER_SIZE: u64 = 64;
/// Size of [`SingleTensorHeaderV1`]; also its `data_offset`.
pub const SINGLE_TENSOR_HEADER_SIZE: u64 = 64;
/// Bytes of a section name, NUL terminator included.
pub const SECTION_NAME_LEN: usize = 24;

/// `GPackHeaderV1`: 64 bytes at offset 0.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct HeaderV1 {
    /// [`GPACK_MAGIC`].
    pub magic: U32,
    /// The version the writer wrote (1).
    pub format_version: U16,
    /// The oldest reader version that can read this file.
    pub min_reader_version: U16,
    /// [`crate::HeaderFlags`] bits.
    pub flags: U32,
    /// Number of [`SectionEntryV1`] records in the section table.
    pub section_count: U32,
    /// Byte offset of the section table (64-aligned).
    pub section_table_offset: U64,
    /// Byte offset of the manifest section.
    pub manifest_offset: U64,
    /// Byte length of the manifest section.
    pub manifest_size: U64,
    /// Exact size of the whole file.
    pub total_file_size: U64,
    /// Must be zero.
    pub reserved: [u8; 16],
}

/// `GPackSectionEntryV1`: 96 bytes per section in the section table.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct SectionEntryV1 {
    /// [`crate::SectionKind`] as a number.
    pub kind: U32,
    /// Reserved; must be zero in version 1.
    pub flags: U32,
    /// Byte offset of the payload from the start of the file.
    pub offset: U64,
    /// Payload length in bytes.
    pub size: U64,
    /// Required alignment of `offset`: 64 or 4096, fixed per kind.
    pub alignment: U64,
    /// Number of logical items (tensors, rows, tokens…) in the payload.
    pub item_count: U64,
    /// SHA-256 of the payload bytes.
    pub sha256: [u8; 32],
    /// NUL-terminated ASCII name, zero-filled after the terminator.
    pub name: [u8; SECTION_NAME_LEN],
}

/// `GPackFooterV1`: the last 64 bytes of the file.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct FooterV1 {
    /// Same as the header's.
    pub manifest_offset: U64,
    /// Same as the header's.
    pub section_table_offset: U64,
    /// Sum of every section's `size`.
    pub total_payload_bytes: U64,
    /// SHA-256 of the manifest bytes: the digest of the whole file.
    pub manifest_sha256: [u8; 32],
    /// [`FOOTER_MAGIC`].
    pub footer_magic: U32,
    /// Must be zero.
    pub reserved: U32,
}

/// `GPackSingleTensorHeaderV1`: starts the Embed, Head and Ple sections.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct SingleTensorHeaderV1 {
    /// ggml type id of the payload (see [`crate::ggml::GgmlType`]); a native
    /// layout code when `reserved0` says so (defined by the writer's crate).
    pub ggml_type: U32,
    /// Reserved for the payload's layout tag; see docs/FORMAT.md.
    pub reserved0: U32,
    /// Elements per row (innermost dimension).
    pub ne0: U64,
    /// Rows.
    pub ne1: U64,
    /// Payload bytes following the header.
    pub byte_size: U64,
    /// Offset of the payload from the start of the section: 64.
    pub data_offset: U64,
    /// Must be zero.
    pub reserved: [u8; 24],
}

const _: () = assert!(core::mem::size_of::<HeaderV1>() as u64 == HEADER_SIZE);
const _: () = assert!(core::mem::size_of::<SectionEntryV1>() as u64 == SECTION_ENTRY_SIZE);
const _: () = assert!(core::mem::size_of::<FooterV1>() as u64 == FOOTER_SIZE);
const _: () =
    assert!(core::mem::size_of::<SingleTensorHeaderV1>() as u64 == SINGLE_TENSOR_HEADER_SIZE);

impl SingleTensorHeaderV1 {
    /// The 64 header bytes for a payload of `byte_size` bytes: `layout_tag` 0
    /// means ggml blocks of `ggml_type`, 1 a native tensor (docs/FORMAT.md).
    pub fn encode(ggml_type: u32, layout_tag: u32, ne0: u64, ne1: u64, byte_size: u64) -> [u8; 64] {
        let h = SingleTensorHeaderV1 {
            ggml_type: ggml_type.into(),
            reserved0: layout_tag.into(),
            ne0: ne0.into(),
            ne1: ne1.into(),
            byte_size: byte_size.into(),
            data_offset: SINGLE_TENSOR_HEADER_SIZE.into(),
            reserved: [0; 24],
        };
        let mut out = [0u8; 64];
        out.copy_from_slice(h.as_bytes());
        out
    }
}

impl SectionEntryV1 {
    /// The name up to its NUL terminator, if it is well-formed ASCII with a
    /// terminator and only zeros after it.
    pub fn name_str(&self) -> Option<&str> {
        let end = self.name.iter().position(|&b| b == 0)?;
        if self.name[end..].iter().any(|&b| b != 0) {
            return None;
        }
        let s = std::str::from_utf8(&self.name[..end]).ok()?;
        s.bytes()
            .all(|b| b.is_ascii_graphic())
            .then_some(s)
            .filter(|s| !s.is_empty())
    }
}

/// Encodes a section name into its fixed field; `None` if it is empty, not
/// printable ASCII, or longer than 23 bytes.
pub fn encode_name(name: &str) -> Option<[u8; SECTION_NAME_LEN]> {
    if name.is_empty()
        || name.len() >= SECTION_NAME_LEN
        || !name.bytes().all(|b| b.is_ascii_graphic())
    {
        return None;
    }
    let mut out = [0u8; SECTION_NAME_LEN];
    out[..name.len()].copy_from_slice(name.as_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn field_offsets_match_the_spec() {
        let mut h = HeaderV1::new_zeroed();
        h.magic = GPACK_MAGIC.into();
        h.format_version = 1.into();
        h.min_reader_version = 1.into();
        h.flags = 0x0102_0304.into();
        h.section_count = 7.into();
        h.section_table_offset = 0x1111.into();
        h.manifest_offset = 0x2222.into();
        h.manifest_size = 0x3333.into();
        h.total_file_size = 0x4444.into();
        let b = h.as_bytes();
        assert_eq!(&b[0..4], b"GPCK");
        assert_eq!(u16::from_le_bytes([b[4], b[5]]), 1);
        assert_eq!(
            u32::from_le_bytes(b[8..12].try_into().unwrap()),
            0x0102_0304
        );
        assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), 7);
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 0x1111);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 0x2222);
        assert_eq!(u64::from_le_bytes(b[32..40].try_into().unwrap()), 0x3333);
        assert_eq!(u64::from_le_bytes(b[40..48].try_into().unwrap()), 0x4444);

        let mut e = SectionEntryV1::new_zeroed();
        e.kind = 5.into();
        e.offset = 8.into();
        e.size = 16.into();
        e.alignment = 4096.into();
        e.item_count = 32.into();
        e.sha256 = [0xAB; 32];
        e.name = encode_name("native_dense").unwrap();
        let b = e.as_bytes();
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), 5);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 8);
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 16);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 4096);
        assert_eq!(u64::from_le_bytes(b[32..40].try_into().unwrap()), 32);
        assert_eq!(b[40], 0xAB);
        assert_eq!(&b[72..84], b"native_dense");
        assert_eq!(e.name_str(), Some("native_dense"));

        let mut f = FooterV1::new_zeroed();
        f.footer_magic = FOOTER_MAGIC.into();
        assert_eq!(&f.as_bytes()[56..60], b"GPKE");
    }

    #[test]
    fn names_are_checked() {
        assert!(encode_name("").is_none());
        assert!(encode_name("has space").is_none());
        assert!(encode_name("x".repeat(24).as_str()).is_none());
        assert!(encode_name("x".repeat(23).as_str()).is_some());
        let mut e = SectionEntryV1::new_zeroed();
        e.name = encode_name("abc").unwrap();
        e.name[10] = 1;
        assert_eq!(e.name_str(), None);
    }
}
