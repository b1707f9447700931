//! One hand-made-bytes test per GGUF error variant.

use gpack_ingest::gguf;
use gpack_ingest::{ByteRange, Error, GgmlType, Source, TensorInfo, Transform};

use crate::common::B;

fn err(b: &B) -> Error {
    match gguf::parse(b.bytes()) {
        Ok(g) => panic!("parsed: {g:?}"),
        Err(e) => {
            // Every message names the file.
            assert!(e.to_string().contains("<memory>"), "{e}");
            e
        }
    }
}

#[test]
fn truncated_files() {
    let full = B::header(3, 1, 1)
        .kv_u32("k", 5)
        .tensor("t", &[2], 0, 0)
        .pad(32)
        .zeros(8);
    for cut in [0, 3, 7, 15, 23, 30, full.0.len() - 40] {
        let b = B(full.0[..cut].to_vec());
        assert!(
            matches!(err(&b), Error::Truncated { .. } | Error::TooLarge { .. }),
            "cut at {cut}"
        );
    }
    let e = err(&B(full.0[..10].to_vec()));
    assert!(
        matches!(
            e,
            Error::Truncated {
                offset: 8,
                what: "tensor count",
                needed: 8,
                available: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "<memory>: truncated at byte 8: expected tensor count (8 bytes), 2 bytes remain"
    );
    // Tensor data cut off.
    let e = err(&B(full.0[..full.0.len() - 1].to_vec()));
    assert!(matches!(e, Error::TensorOutOfBounds { .. }), "{e:?}");
}

#[test]
fn bad_magic() {
    let e = err(&B::new().raw(b"GGML").u32(3).u64(0).u64(0));
    assert!(matches!(
        e,
        Error::BadMagic {
            found: [b'G', b'G', b'M', b'L'],
            ..
        }
    ));
}

#[test]
fn version_1_and_big_endian_are_rejected() {
    let e = err(&B::new().raw(b"GGUF").u32(1).u32(0).u32(0));
    assert!(matches!(e, Error::UnsupportedVersion { version: 1, .. }));
    assert!(e.to_string().contains("v1 is obsolete"), "{e}");
    let e = err(&B::new().raw(b"GGUF").raw(&3u32.to_be_bytes()).u64(0).u64(0));
    assert!(e.to_string().contains("big-endian"), "{e}");
    let e = err(&B::header(4, 0, 0));
    assert!(matches!(e, Error::UnsupportedVersion { version: 4, .. }));
}

#[test]
fn lying_counts_are_rejected_before_allocating() {
    let e = err(&B::header(3, 0, u64::MAX));
    assert!(
        matches!(
            e,
            Error::TooLarge {
                what: "metadata key/value count",
                value: u64::MAX,
                max: 0,
                offset: 16,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(&B::header(3, 1 << 40, 0).zeros(64));
    assert!(
        matches!(
            e,
            Error::TooLarge {
                what: "tensor count",
                max: 2,
                offset: 8,
                ..
            }
        ),
        "{e:?}"
    );
    // A plausible count, but the entries are not there.
    let e = err(&B::header(3, 0, 2).kv_u32("a", 1).str("b").u32(4));
    assert!(
        matches!(
            e,
            Error::Truncated {
                what: "UINT32 value",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn huge_string_and_array_lengths() {
    let e = err(&B::header(3, 0, 1).str("k").u32(8).u64(u64::MAX - 1));
    assert!(
        matches!(e, Error::TooLarge { what: "string length", value, max: 0, .. } if value == u64::MAX - 1),
        "{e:?}"
    );
    let e = err(&B::header(3, 0, 1).u64(1 << 50).raw(b"k").zeros(20));
    assert!(
        matches!(
            e,
            Error::TooLarge {
                what: "metadata key",
                ..
            }
        ),
        "{e:?}"
    );
    // Array of 2^40 u32: 4 TiB claimed, 8 bytes present.
    let e = err(&B::header(3, 0, 1)
        .str("k")
        .u32(9)
        .u32(4)
        .u64(1 << 40)
        .zeros(8));
    assert!(
        matches!(
            e,
            Error::TooLarge {
                what: "array length",
                max: 2,
                ..
            }
        ),
        "{e:?}"
    );
    // Array of strings: each needs 8 bytes at least.
    let e = err(&B::header(3, 0, 1).str("k").u32(9).u32(8).u64(3).zeros(16));
    assert!(
        matches!(
            e,
            Error::TooLarge {
                what: "array length",
                value: 3,
                max: 2,
                ..
            }
        ),
        "{e:?}"
    );
    // Tensor name longer than ggml's GGML_MAX_NAME - 1.
    let e = err(&B::header(3, 1, 0)
        .str(&"x".repeat(64))
        .u32(1)
        .u64(1)
        .u32(0)
        .u64(0)
        .zeros(32));
    assert!(
        matches!(
            e,
            Error::TooLarge {
                what: "tensor name",
                value: 64,
                max: 63,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn non_utf8_key() {
    let e = err(&B::header(3, 0, 1).u64(2).raw(&[0xff, 0xfe]).u32(0).u8(1));
    assert!(
        matches!(
            e,
            Error::NotUtf8 {
                what: "metadata key",
                offset: 24,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn unknown_value_type() {
    let e = err(&B::header(3, 0, 1).str("k").u32(13).u32(0));
    assert!(
        matches!(e, Error::UnknownValueType { type_id: 13, ref key, offset: 33, .. } if key == "k"),
        "{e:?}"
    );
    let e = err(&B::header(3, 0, 1).str("k").u32(9).u32(99).u64(0));
    assert!(
        matches!(e, Error::UnknownValueType { type_id: 99, .. }),
        "{e:?}"
    );
}

#[test]
fn invalid_bool() {
    let e = err(&B::header(3, 0, 1).str("k").u32(7).u8(2));
    assert!(matches!(e, Error::InvalidBool { value: 2, .. }), "{e:?}");
}

#[test]
fn nesting_too_deep() {
    let mut b = B::header(3, 0, 1).str("k").u32(9);
    for _ in 0..40 {
        b = b.u32(9).u64(1);
    }
    let e = err(&b.u32(4).u64(0));
    assert!(matches!(e, Error::NestingTooDeep { max: 16, .. }), "{e:?}");
}

#[test]
fn duplicate_key() {
    let e = err(&B::header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2));
    assert!(
        matches!(e, Error::DuplicateKey { ref key, offset: 41, .. } if key == "k"),
        "{e:?}"
    );
}

#[test]
fn alignment_must_be_u32_power_of_two() {
    let e = err(&B::header(3, 0, 1).str("general.alignment").u32(10).u64(64));
    assert!(
        matches!(
            e,
            Error::WrongValueType {
                expected: "UINT32",
                found: "UINT64",
                ..
            }
        ),
        "{e:?}"
    );
    for a in [0, 3, 48] {
        let e = err(&B::header(3, 0, 1).kv_u32("general.alignment", a));
        assert!(
            matches!(e, Error::BadAlignment { value, .. } if value == u64::from(a)),
            "{e:?}"
        );
    }
    // A valid non-default alignment moves the data section.
    let b = B::header(3, 1, 1)
        .kv_u32("general.alignment", 256)
        .tensor("t", &[1], 0, 0)
        .pad(256)
        .zeros(4);
    assert_eq!(gguf::parse(b.bytes()).unwrap().data_offset, 256);
}

#[test]
fn unknown_ggml_type_names_the_tensor_and_id() {
    for id in [4u32, 42, 1000] {
        let e = err(&B::header(3, 1, 0)
            .tensor("blk.0.x", &[32], id, 0)
            .pad(32)
            .zeros(64));
        assert!(
            matches!(e, Error::UnknownGgmlType { type_id, ref tensor, .. } if type_id == id && tensor == "blk.0.x"),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains(&format!("unknown ggml type id {id}")),
            "{e}"
        );
    }
}

#[test]
fn too_many_dims() {
    let e = err(&B::header(3, 1, 0)
        .tensor("t", &[1, 1, 1, 1, 1], 0, 0)
        .pad(32)
        .zeros(4));
    assert!(
        matches!(
            e,
            Error::TooManyDims {
                n_dims: 5,
                max: 4,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn bad_shapes() {
    // Q8_0 rows must be multiples of 32.
    let e = err(&B::header(3, 1, 0)
        .tensor("t", &[48], 8, 0)
        .pad(32)
        .zeros(64));
    assert!(
        matches!(
            e,
            Error::BadShape {
                ggml_type: GgmlType::Q8_0,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(&B::header(3, 1, 0)
        .tensor("t", &[1 << 32, 1 << 32], 0, 0)
        .pad(32));
    assert!(
        matches!(
            e,
            Error::BadShape {
                reason: gpack_ingest::ShapeProblem::ElementsOverflow,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(&B::header(3, 1, 0).tensor("t", &[u64::MAX], 0, 0).pad(32));
    assert!(
        matches!(
            e,
            Error::BadShape {
                reason: gpack_ingest::ShapeProblem::DimTooLarge,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(&B::header(3, 1, 0).tensor("t", &[1 << 62], 0, 0).pad(32));
    assert!(
        matches!(
            e,
            Error::BadShape {
                reason: gpack_ingest::ShapeProblem::BytesOverflow,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn duplicate_tensor() {
    let e = err(&B::header(3, 2, 0)
        .tensor("t", &[1], 0, 0)
        .tensor("t", &[1], 0, 32)
        .pad(32)
        .zeros(64));
    assert!(
        matches!(e, Error::DuplicateTensor { ref tensor, .. } if tensor == "t"),
        "{e:?}"
    );
}

#[test]
fn misaligned_offset() {
    let e = err(&B::header(3, 1, 0).tensor("t", &[1], 0, 4).pad(32).zeros(64));
    assert!(
        matches!(
            e,
            Error::MisalignedTensor {
                offset: 4,
                alignment: 32,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn tensor_out_of_bounds() {
    let e = err(&B::header(3, 1, 0)
        .tensor("t", &[16], 0, 0)
        .pad(32)
        .zeros(32));
    assert!(
        matches!(e, Error::TensorOutOfBounds { size: 64, .. }),
        "{e:?}"
    );
}

#[test]
fn size_overflow() {
    // 4 × (2^62 - 1) bytes fit in u64, but not once padded to the alignment.
    let e = err(&B::header(3, 1, 0)
        .tensor("t", &[(1 << 62) - 1], 0, 0)
        .pad(32));
    assert!(
        matches!(
            e,
            Error::Overflow {
                what: "aligned offset",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn offsets_must_be_packed_in_order() {
    // Overlap: b starts inside a.
    let e = err(&B::header(3, 2, 0)
        .tensor("a", &[16], 0, 0)
        .tensor("b", &[8], 0, 32)
        .pad(32)
        .zeros(96));
    assert!(
        matches!(e, Error::UnexpectedOffset { ref tensor, offset: 32, expected: 64, .. } if tensor == "b"),
        "{e:?}"
    );
    // Hole: b starts after a gap.
    let e = err(&B::header(3, 2, 0)
        .tensor("a", &[1], 0, 0)
        .tensor("b", &[1], 0, 64)
        .pad(32)
        .zeros(96));
    assert!(
        matches!(
            e,
            Error::UnexpectedOffset {
                offset: 64,
                expected: 32,
                ..
            }
        ),
        "{e:?}"
    );
    // Out of order.
    let e = err(&B::header(3, 2, 0)
        .tensor("a", &[1], 0, 32)
        .tensor("b", &[1], 0, 0)
        .pad(32)
        .zeros(64));
    assert!(
        matches!(
            e,
            Error::UnexpectedOffset {
                offset: 32,
                expected: 0,
                ..
            }
        ),
        "{e:?}"
    );
    // Empty tensors take no room; each tensor is padded to the alignment.
    let b = B::header(3, 3, 0)
        .tensor("a", &[3], 0, 0)
        .tensor("e", &[0], 0, 32)
        .tensor("c", &[1], 0, 32)
        .pad(32)
        .zeros(36);
    let g = gguf::parse(b.bytes()).unwrap();
    assert_eq!(g.tensors[2].offset, g.data_offset + 32);
}

#[test]
fn bad_tensor_info_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    std::fs::write(
        &p,
        B::header(3, 1, 0)
            .tensor("t", &[4], 0, 0)
            .pad(32)
            .zeros(16)
            .bytes(),
    )
    .unwrap();
    let s = Source::open(&p).unwrap();
    let base = s.tensors[0].clone();
    let cases = [
        TensorInfo {
            file: 3,
            ..base.clone()
        },
        TensorInfo {
            offset: u64::MAX,
            ..base.clone()
        },
        TensorInfo {
            size: 1 << 20,
            ..base.clone()
        },
        TensorInfo {
            transform: Some(Transform::RopePermute { n_head: 3 }),
            ..base.clone()
        },
        TensorInfo {
            transform: Some(Transform::PlusOne {
                from: GgmlType::Q4_0,
            }),
            ..base.clone()
        },
        TensorInfo {
            transform: Some(Transform::PlusOne {
                from: GgmlType::F16,
            }),
            ggml_type: GgmlType::F16,
            ..base.clone()
        },
        TensorInfo {
            transform: Some(Transform::Stack {
                parts: vec![ByteRange {
                    file: 0,
                    offset: 0,
                    size: 4,
                }],
            }),
            ..base.clone()
        },
    ];
    for t in cases {
        assert!(
            matches!(s.tensor_bytes(&t), Err(Error::BadTensorInfo { .. })),
            "{t:?}"
        );
    }
}

#[test]
fn unknown_format_and_io_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.bin");
    std::fs::write(&p, b"abc").unwrap();
    assert!(matches!(Source::open(&p), Err(Error::UnknownFormat { .. })));
    let e = Source::open(&dir.path().join("missing.gguf")).unwrap_err();
    assert!(matches!(e, Error::Io { what: "open", .. }), "{e:?}");
    let p = dir.path().join("bad.gguf");
    std::fs::write(&p, b"GGMLxxxxxxxxxxxxxxxxxxxxxxxx").unwrap();
    let e = Source::open(&p).unwrap_err();
    assert!(matches!(e, Error::BadMagic { .. }), "{e:?}");
    assert!(e.to_string().contains("bad.gguf"), "{e}");
}

/// A sparse 64 GiB GGUF whose tensor count claims one descriptor per 24
/// bytes of it (2.9·10^9): an error naming the file, without allocating for
/// the count. Before, the reader reserved tensor_count descriptors up front
/// (~200 GB, more than the machine has): the allocation failed and the
/// process aborted.
#[test]
fn a_huge_tensor_count_in_a_huge_sparse_file_is_an_error_not_an_abort() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sparse.gguf");
    let len = 64u64 << 30;
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(B::header(3, len / 24 - 1, 0).bytes()).unwrap();
    f.set_len(len).unwrap();
    drop(f);
    let e = match Source::open(&p) {
        Ok(_) => panic!("a 64 GiB file of zeros is no model"),
        Err(e) => e,
    };
    assert!(e.to_string().contains("sparse.gguf"), "{e}");
}

/// A file without tensors may declare `general.alignment` = 2^31 and end right
/// after its metadata (nothing is aligned, so the reader accepts it). Writing it
/// back must not pad the header to the alignment: that asked for 2 GiB from these
/// 99 bytes (found by the `ingest_gguf` fuzz target, 2026-12-05; the input is its
/// artifact, magic and version prepended as the target does).
#[test]
fn a_huge_alignment_without_tensors_is_written_back_unpadded() {
    let tail = "0000000000000000020000000000000002000000000000000000090000000000\
                000002000000000000000200110000000000000067656e6572616c2e616c6967\
                6e6d656e740400000000000080020000000000000000000000000000000007010000";
    let mut bytes = b"GGUF\x03\0\0\0".to_vec();
    bytes.extend(
        (0..tail.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&tail[i..i + 2], 16).unwrap()),
    );
    let g = gguf::parse(&bytes).expect("a tensorless file with a large alignment is valid");
    assert_eq!((g.alignment, g.tensors.len()), (1 << 31, 0));
    let out = gguf::to_vec(&g.metadata, std::iter::empty()).expect("written back");
    assert!(
        out.len() <= bytes.len(),
        "{} bytes written for {}",
        out.len(),
        bytes.len()
    );
    let again = gguf::parse(&out).expect("re-read");
    assert_eq!(again.alignment, 1 << 31);
}
