use crate::common::small_file;
use gpack_format::{parse_layout, Error, Gpack, SectionKind};

/// Flipping any single byte of the header, the section table, the manifest or
/// the footer makes the quick open fail, with an error and never a panic.
#[test]
fn every_structural_byte_flip_fails_quick_open() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    let layout = parse_layout(&good).unwrap();
    let m = layout.section(SectionKind::Manifest).unwrap().clone();
    let table = layout.header.section_table_offset.get() as usize;
    let table_end = table + 96 * layout.sections.len();
    let footer = good.len() - 64;
    let mut ranges = vec![(0usize, 64usize), (table, table_end), (footer, good.len())];
    ranges.push((m.offset as usize, (m.offset + m.size) as usize));
    let mut checked = 0;
    for (a, b) in ranges {
        for i in a..b {
            for mask in [0x01u8, 0x80, 0xFF] {
                let mut bad = good.clone();
                bad[i] ^= mask;
                let r = parse_layout(&bad);
                assert!(r.is_err(), "flip {mask:#x} at byte {i} was not detected");
                checked += 1;
            }
        }
    }
    assert!(checked > 3 * (64 + 64 + 96 * 7));
}

/// A flipped byte inside any payload passes the quick open but fails full
/// verification, which names the section.
#[test]
fn payload_flip_fails_full_verification_naming_the_section() {
    let dir = tempfile::tempdir().unwrap();
    let (path, sections) = small_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    let layout = parse_layout(&good).unwrap();
    for (kind, payload) in &sections {
        if payload.is_empty() {
            continue;
        }
        let info = layout.section(*kind).unwrap();
        for pos in [0, payload.len() / 2, payload.len() - 1] {
            let mut bad = good.clone();
            bad[info.offset as usize + pos] ^= 0x10;
            let g = Gpack::from_bytes(bad).expect("quick open does not read payloads");
            match g.verify_full(&|_| {}) {
                Err(Error::DigestMismatch { failed }) => {
                    assert_eq!(failed.len(), 1);
                    assert_eq!(failed[0].kind, *kind);
                    assert_eq!(failed[0].name, kind.default_name());
                    let msg = Error::DigestMismatch { failed }.to_string();
                    assert!(msg.contains(kind.default_name()), "{msg}");
                }
                other => panic!("{kind}: expected a digest mismatch, got {other:?}"),
            }
        }
    }
}

#[test]
fn nonzero_padding_fails_full_verification() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path());
    let mut bad = std::fs::read(&path).unwrap();
    let layout = parse_layout(&bad).unwrap();
    // The gap right before the 4096-aligned NativeDense section.
    let nd = layout.section(SectionKind::NativeDense).unwrap().offset as usize;
    bad[nd - 1] = 1;
    let g = Gpack::from_bytes(bad).unwrap();
    assert!(matches!(
        g.verify_full(&|_| {}),
        Err(Error::PaddingNotZero { offset }) if offset == nd as u64 - 1
    ));
}

#[test]
fn truncation_at_many_offsets_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    let n = good.len();
    let mut cuts: Vec<usize> = (0..24).map(|i| i * n / 24).collect();
    cuts.extend([1, 63, 64, 65, n - 65, n - 64, n - 1]);
    for cut in cuts {
        let e = parse_layout(&good[..cut]).unwrap_err();
        match e {
            Error::TooSmall { .. } if cut < 64 => {}
            Error::BadMagic { what: "header", .. } if cut < 4 => {}
            Error::Truncated { expected, actual } => {
                assert_eq!((expected, actual), (n as u64, cut as u64));
                assert!(e.to_string().contains("truncated"));
            }
            other => panic!("cut at {cut}: {other}"),
        }
    }
}

#[test]
fn trailing_bytes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    for extra in 1..=4096usize {
        let mut bad = good.clone();
        bad.resize(good.len() + extra, if extra % 2 == 0 { 0 } else { 0xAA });
        match parse_layout(&bad) {
            Err(Error::TrailingBytes { expected, actual }) => {
                assert_eq!(actual - expected, extra as u64)
            }
            other => panic!("{extra} trailing bytes: {other:?}"),
        }
    }
}

#[test]
fn newer_reader_requirement_names_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path());
    let mut bad = std::fs::read(&path).unwrap();
    bad[4..6].copy_from_slice(&3u16.to_le_bytes());
    bad[6..8].copy_from_slice(&2u16.to_le_bytes());
    let e = parse_layout(&bad).unwrap_err();
    assert!(matches!(
        e,
        Error::NeedsNewerReader {
            needed: 2,
            reader: 1
        }
    ));
    let msg = e.to_string();
    assert!(
        msg.contains("version 2") && msg.contains("version 1"),
        "{msg}"
    );
}

#[test]
fn unknown_flags_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path());
    let mut bad = std::fs::read(&path).unwrap();
    bad[9] |= 0x01; // bit 8
    assert!(matches!(
        parse_layout(&bad),
        Err(Error::UnknownFlags { bits: 0x100 })
    ));
}

#[test]
fn random_bytes_never_panic() {
    use proptest::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(
            &(
                proptest::collection::vec(any::<u8>(), 0..600),
                proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
            ),
            |(noise, edits)| {
                let _ = parse_layout(&noise);
                // A valid header prefix in front of noise reaches deeper checks.
                let mut v = good[..64].to_vec();
                v.extend_from_slice(&noise);
                let _ = parse_layout(&v);
                let mut m = good.clone();
                for (at, b) in edits {
                    let i = at % m.len();
                    m[i] = b;
                }
                if let Ok(g) = Gpack::from_bytes(m) {
                    let _ = g.verify_full(&|_| {});
                }
                Ok(())
            },
        )
        .unwrap();
}

/// A manifest over the 16 MiB cap is refused at quick open with a typed
/// problem, before it is hashed or parsed; the writer that made it sees its
/// own file fail verification and leaves nothing behind.
#[test]
fn oversized_manifest_is_refused_by_size() {
    use gpack_format::{GpackWriter, ManifestInput, ManifestProblem, WriteOptions};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big-manifest.gpack");
    let mut w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
    w.add_section(SectionKind::MetadataKv, "metadata_kv", b"x", 1)
        .unwrap();
    let mut input = ManifestInput {
        name: "m".into(),
        ..Default::default()
    };
    input.extra.insert(
        "padding".into(),
        serde_json::Value::String("a".repeat(17 << 20)),
    );
    match w.finish(&input) {
        Err(Error::WrittenFileInvalid { source, .. }) => match *source {
            Error::BadManifest {
                problem: ManifestProblem::TooLarge { size },
                ..
            } => assert!(size > gpack_format::manifest::MAX_MANIFEST_SIZE),
            other => panic!("expected a too-large manifest, got {other:?}"),
        },
        other => panic!("expected the writer's own check to fail, got {other:?}"),
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Payload problems are values callers can match on, naming the field and
/// the offset inside the payload.
#[test]
fn payload_problems_are_typed() {
    use gpack_format::payload::{encode_kv, parse_kv, parse_tensor_index, KvRecord};
    use gpack_format::PayloadProblem;
    let kv = encode_kv([KvRecord {
        key: "general.name",
        value_type: 8,
        value: b"\x02\0\0\0\0\0\0\0hi",
    }]);
    match parse_kv(&kv[..kv.len() - 1]) {
        Err(Error::BadPayload {
            section: SectionKind::MetadataKv,
            problem:
                PayloadProblem::Short {
                    what,
                    offset,
                    need,
                    remain,
                },
        }) => {
            assert_eq!((what, need, remain), ("value", 10, 9));
            assert_eq!(offset as usize, kv.len() - 10);
        }
        other => panic!("expected a short value, got {other:?}"),
    }
    let mut twice = kv.clone();
    twice[8] = 2;
    twice.extend_from_slice(&kv[16..]);
    assert!(matches!(
        parse_kv(&twice),
        Err(Error::BadPayload {
            problem: PayloadProblem::DuplicateKey(k),
            ..
        }) if k == "general.name"
    ));
    let mut wrong = kv.clone();
    wrong[0] ^= 1;
    assert!(matches!(
        parse_tensor_index(&wrong),
        Err(Error::BadPayload {
            section: SectionKind::TensorIndex,
            problem: PayloadProblem::Magic { .. },
        })
    ));
}

/// An error's message never repeats its cause: printed as a chain, the OS
/// reason appears once.
#[test]
fn an_error_chain_names_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let e = Gpack::open(&dir.path().join("absent.gpack")).unwrap_err();
    let chain = gpack_format::error_chain(&e);
    let reason = std::io::Error::from_raw_os_error(libc::ENOENT).to_string();
    assert_eq!(chain.matches(&reason).count(), 1, "{chain}");
    assert!(
        chain.starts_with("open ") && chain.contains("absent.gpack"),
        "{chain}"
    );
}
