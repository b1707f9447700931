use gpack_format::{
    Error, Gpack, GpackWriter, HeaderFlags, ManifestInput, SectionKind, WriteOptions,
};
use proptest::prelude::*;

fn kinds_strategy() -> impl Strategy<Value = Vec<(SectionKind, Vec<u8>)>> {
    let kinds: Vec<SectionKind> = SectionKind::ALL[..14].to_vec();
    proptest::collection::vec((any::<bool>(), 0usize..9000, any::<u8>()), kinds.len()).prop_map(
        move |choices| {
            kinds
                .iter()
                .zip(choices)
                .filter(|(_, (present, _, _))| *present)
                .map(|(k, (_, len, seed))| {
                    // Some present sections are empty.
                    let len = if seed % 5 == 0 { 0 } else { len };
                    let bytes = (0..len).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
                    (*k, bytes)
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn write_then_read_random_section_sets(sections in kinds_strategy(), name in "[a-z0-9-]{0,20}") {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("m.gpack");
        let mut w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
        for (i, (k, b)) in sections.iter().enumerate() {
            if i % 2 == 0 {
                w.add_section(*k, k.default_name(), b, i as u64).unwrap();
            } else {
                // Stream in uneven pieces.
                let mut s = w.begin_section(*k, k.default_name()).unwrap();
                for c in b.chunks(777) {
                    std::io::Write::write_all(&mut s, c).unwrap();
                }
                s.finish(i as u64).unwrap();
            }
        }
        let written = w.finish(&ManifestInput { name: name.clone(), ..Default::default() }).unwrap();
        let g = Gpack::open(&out).unwrap();
        prop_assert_eq!(g.bytes().len() as u64, written.size);
        prop_assert_eq!(g.layout().digest(), written.digest);
        prop_assert_eq!(&g.manifest().name, &name);
        for k in SectionKind::ALL[..14].iter() {
            match sections.iter().position(|(sk, _)| sk == k) {
                Some(i) => {
                    let s = g.section(*k).unwrap();
                    prop_assert_eq!(s.bytes, &sections[i].1[..]);
                    prop_assert_eq!(s.info.item_count, i as u64);
                    prop_assert_eq!(s.info.offset % k.alignment(), 0);
                }
                None => prop_assert!(g.section(*k).is_none()),
            }
        }
        prop_assert_eq!(
            g.layout().flags(),
            HeaderFlags::for_sections(sections.iter().map(|s| s.0).chain([SectionKind::Manifest]))
        );
        g.verify_full(&|_| {}).unwrap();
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        prop_assert_eq!(names.len(), 1);
    }
}

#[test]
fn writer_refuses_out_of_order_duplicate_and_manifest_sections() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    let mut w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
    w.add_section(SectionKind::Embed, "embed", b"x", 1).unwrap();
    assert!(matches!(
        w.add_section(SectionKind::MetadataKv, "metadata_kv", b"x", 1),
        Err(Error::KindOrder { .. })
    ));
    assert!(matches!(
        w.add_section(SectionKind::Embed, "embed", b"x", 1),
        Err(Error::KindOrder { .. })
    ));
    assert!(matches!(
        w.add_section(SectionKind::Manifest, "manifest", b"{}", 1),
        Err(Error::ManifestByHand)
    ));
    assert!(matches!(
        w.add_section(SectionKind::Head, "bad name", b"x", 1),
        Err(Error::BadName { .. })
    ));
}

#[test]
fn existing_destination_is_refused_unless_replacing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    std::fs::write(&out, b"precious").unwrap();
    assert!(matches!(
        GpackWriter::create(&out, WriteOptions::default()),
        Err(Error::DestinationExists { .. })
    ));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    let w = GpackWriter::create(&out, WriteOptions { replace: true }).unwrap();
    w.finish(&ManifestInput::default()).unwrap();
    Gpack::open(&out).unwrap();
}

#[test]
fn destination_appearing_during_the_build_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    let w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
    std::fs::write(&out, b"someone else's").unwrap();
    assert!(matches!(
        w.finish(&ManifestInput::default()),
        Err(Error::DestinationExists { .. })
    ));
    assert_eq!(std::fs::read(&out).unwrap(), b"someone else's");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn panic_while_writing_unlinks_the_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    let out2 = out.clone();
    let r = std::panic::catch_unwind(move || {
        let mut w = GpackWriter::create(&out2, WriteOptions::default()).unwrap();
        let mut s = w
            .begin_section(SectionKind::NativeDense, "native_dense")
            .unwrap();
        s.write_bytes(&[1u8; 100_000]).unwrap();
        assert!(w_temp_exists(&out2));
        panic!("converter bug");
    });
    assert!(r.is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    assert!(!out.exists());
}

fn w_temp_exists(out: &std::path::Path) -> bool {
    !gpack_format::temp_files_of(out).is_empty()
}

#[test]
fn dropping_an_unfinished_writer_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    {
        let mut w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
        w.add_section(SectionKind::MetadataKv, "metadata_kv", b"abc", 1)
            .unwrap();
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn unfinished_section_poisons_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    let mut w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
    {
        let _s = w
            .begin_section(SectionKind::MetadataKv, "metadata_kv")
            .unwrap();
    }
    assert!(matches!(
        w.finish(&ManifestInput::default()),
        Err(Error::Poisoned)
    ));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn missing_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("no/such/dir/m.gpack");
    let e = GpackWriter::create(&out, WriteOptions::default())
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains("create") && msg.contains("no/such/dir"),
        "{msg}"
    );
}
