//! GIW bundles: round trip, CRC over every byte, version guard, reading the
//! committed older-writer fixtures, aliasing vs copying, fused-group detection.

use gpack_format::giw::{
    Error, Fused, Giw, GiwWriter, MemberSpec, ReadOptions, RecordKind, RecordProblem, Target,
};
use std::path::{Path, PathBuf};

/// A fake serialized native tensor: the 64-byte header fields the GIW
/// reader looks at (flags @8, rows @16), then `body` bytes.
fn native(rows: u64, flags: u32, body: usize, seed: u8) -> Vec<u8> {
    let mut v = vec![0u8; 64 + body];
    v[0..4].copy_from_slice(&4u32.to_le_bytes());
    v[8..12].copy_from_slice(&flags.to_le_bytes());
    v[16..24].copy_from_slice(&rows.to_le_bytes());
    for (i, b) in v[64..].iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
    v
}

fn member(name: &str, row_start: u64, rows: u64) -> MemberSpec {
    MemberSpec {
        name: name.into(),
        row_start,
        rows,
    }
}

/// A small bundle: a dense record, a native record, and for v13+ two groups
/// (an adjacent q‖k‖v, and a gate‖up‖x group whose member order is not row
/// order) plus a K=V layer (q, k separate, no v).
fn build(dir: &Path, wv: u16, target: Target) -> PathBuf {
    let p = dir.join(format!("t{wv}.giw"));
    let mut w = GiwWriter::create(&p, true, "int4", target, wv, b"GGUF-metadata-bytes").unwrap();
    w.add_dense("blk.0.attn_norm.weight", 0, &[5], &[1u8; 20])
        .unwrap();
    w.add_native("token_embd.weight", &native(3, 0, 37, 1))
        .unwrap();
    if wv >= 13 {
        let flags = if wv >= 14 { 1 } else { 0 };
        w.add_group(
            "blk.0.attn_q+attn_k+attn_v",
            &[
                member("blk.0.attn_q.weight", 0, 4),
                member("blk.0.attn_k.weight", 4, 2),
                member("blk.0.attn_v.weight", 6, 2),
            ],
            &native(8, flags, 50, 2),
        )
        .unwrap();
        // Stored rows: gate 0..4, up 6..10, x 4..6: (gate, up) are not adjacent.
        w.add_group(
            "blk.0.ffn_gate+ffn_up",
            &[
                member("blk.0.ffn_gate.weight", 0, 4),
                member("blk.0.ffn_up.weight", 6, 4),
                member("blk.0.ffn_x.weight", 4, 2),
            ],
            &native(10, 0, 16, 3),
        )
        .unwrap();
    }
    w.add_native("blk.1.attn_q.weight", &native(4, 0, 3, 4))
        .unwrap();
    w.add_native("blk.1.attn_k.weight", &native(2, 0, 9, 5))
        .unwrap();
    w.finish().unwrap();
    p
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn giw_round_trip_all_versions() {
    let dir = tempfile::tempdir().unwrap();
    for (wv, target) in [(12, Target::Cpu), (13, Target::Metal), (14, Target::Metal)] {
        let p = build(dir.path(), wv, target);
        let g = Giw::open(&p).unwrap();
        let h = g.header();
        assert_eq!(
            (h.weights_version, h.target, h.quant.as_str()),
            (wv, target, "int4")
        );
        assert_eq!(g.metadata(), b"GGUF-metadata-bytes");
        assert_eq!(g.copied_payloads(), 0);
        let n = if wv >= 13 { 6 } else { 4 };
        assert_eq!(g.records().len(), n);
        assert_eq!(h.record_count as usize, n);
        for (i, r) in g.records().iter().enumerate() {
            assert_eq!(r.payload_off % 16, 0);
            assert_eq!(g.payload(i).as_ptr() as usize % 16, 0);
            assert!(g.is_aliased(i));
        }
        let (i, m) = g.find("token_embd.weight").unwrap();
        assert_eq!(m, None);
        assert_eq!(g.payload(i), &native(3, 0, 37, 1)[..]);
        let (i, _) = g.find("blk.0.attn_norm.weight").unwrap();
        let r = &g.records()[i];
        assert_eq!(
            (r.kind, r.dims.clone(), r.ggml_type),
            (RecordKind::Dense, vec![5], 0)
        );
        assert_eq!(g.payload(i), &[1u8; 20][..]);
        if wv >= 13 {
            let (i, m) = g.find("blk.0.attn_k.weight").unwrap();
            assert_eq!(m, Some(1));
            assert_eq!(g.records()[i].kind, RecordKind::Group);
            assert_eq!(g.records()[i].native_rows, 8);
            assert_eq!(g.records()[i].native_flags, u32::from(wv >= 14));
        }
        // The same bytes from an unaligned heap buffer: every payload copied.
        let bytes = std::fs::read(&p).unwrap();
        let u = Giw::from_bytes(&bytes, 3, &ReadOptions::default()).unwrap();
        assert_eq!(u.copied_payloads(), n);
        for i in 0..n {
            assert!(!u.is_aliased(i));
            assert_eq!(u.payload(i), g.payload(i));
            assert_eq!(u.payload(i).as_ptr() as usize % 16, 0);
        }
        let a = Giw::from_bytes(&bytes, 0, &ReadOptions::default()).unwrap();
        assert_eq!(a.copied_payloads(), 0);
    }
}

/// See: issue 5 ("CRC catches every single-byte flip, padding included").
#[test]
fn giw_crc_catches_every_byte_flip() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 14, Target::Metal);
    let bytes = std::fs::read(&p).unwrap();
    let opts = ReadOptions::default();
    Giw::from_bytes(&bytes, 0, &opts).unwrap();
    let mut zero_pads = 0;
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        zero_pads += usize::from(b[i] == 0);
        b[i] ^= 0x40;
        let e = Giw::from_bytes(&b, 0, &opts).expect_err("flip not caught");
        // Past the header, the CRC is what catches it (before any parsing).
        if (64..bytes.len() - 4).contains(&i) {
            assert!(matches!(e, Error::Crc { .. }), "byte {i}: {e}");
        }
    }
    assert!(zero_pads > 100, "the bundle has padding to flip");
}

/// See: issue 5 ("a v12 reader refuses a v14 file").
#[test]
fn giw_older_reader_refuses_newer_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = build(dir.path(), 14, Target::Metal);
    for max in [12, 13] {
        let opts = ReadOptions {
            max_weights_version: max,
            ..Default::default()
        };
        let e = Giw::open_with(&p, &opts).unwrap_err();
        assert!(
            matches!(e, Error::NewerWeightsFormat { found: 14, max: m, .. } if m == max),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("v14") && msg.contains(&format!("v{max}")),
            "{msg}"
        );
    }
    // A v12 reader still reads a v12 file.
    let p12 = build(dir.path(), 12, Target::Cpu);
    let opts = ReadOptions {
        max_weights_version: 12,
        ..Default::default()
    };
    Giw::open_with(&p12, &opts).unwrap();
}

/// The committed fixtures made by the older writer modes (testdata/giw/make.sh).
#[test]
fn giw_reader_reads_v12_and_v13_fixtures() {
    for (f, wv, groups) in [
        ("llama-int4.cpu.v12.giw", 12, 0),
        ("llama-int4.metal.v13.giw", 13, 4),
    ] {
        let g = Giw::open(&repo().join("testdata/giw").join(f)).unwrap();
        assert_eq!(g.header().weights_version, wv);
        assert_eq!(g.copied_payloads(), 0);
        let n = g
            .records()
            .iter()
            .filter(|r| r.kind == RecordKind::Group)
            .count();
        assert_eq!(n, groups, "{f}");
        assert!(g.metadata().starts_with(b"GGUF"));
        let qkv = [
            "blk.0.attn_q.weight",
            "blk.0.attn_k.weight",
            "blk.0.attn_v.weight",
        ];
        let fused = g.fused(&qkv);
        if wv >= 13 {
            assert!(matches!(fused, Fused::Contiguous { .. }), "{fused:?}");
        } else {
            assert_eq!(fused, Fused::Separate);
        }
    }
}

#[test]
fn giw_fused_detection() {
    let dir = tempfile::tempdir().unwrap();
    let g = Giw::open(&build(dir.path(), 13, Target::Metal)).unwrap();
    // Adjacent members of one group.
    let (rec, _) = g.find("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        g.fused(&[
            "blk.0.attn_q.weight",
            "blk.0.attn_k.weight",
            "blk.0.attn_v.weight"
        ]),
        Fused::Contiguous {
            record: rec,
            rows: vec![(0, 4), (4, 2), (6, 2)]
        }
    );
    // Asked in another order: not one adjacent run.
    assert_eq!(
        g.fused(&["blk.0.attn_k.weight", "blk.0.attn_q.weight"]),
        Fused::Separate
    );
    // Same group, members not adjacent (gate 0..4, up 6..10).
    assert_eq!(
        g.fused(&["blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"]),
        Fused::Separate
    );
    // Separate records.
    assert_eq!(
        g.fused(&["blk.1.attn_q.weight", "blk.1.attn_k.weight"]),
        Fused::Separate
    );
    // A K=V layer: no v.
    assert_eq!(
        g.fused(&[
            "blk.1.attn_q.weight",
            "blk.1.attn_k.weight",
            "blk.1.attn_v.weight"
        ]),
        Fused::Absent {
            missing: "blk.1.attn_v.weight".into()
        }
    );
}

#[test]
fn giw_writer_and_reader_guards() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("g.giw");
    // No groups before v13, no f16 scales before v14.
    let mut w = GiwWriter::create(&p, true, "int4", Target::Cpu, 12, b"m").unwrap();
    assert!(w
        .add_group(
            "g",
            &[member("a", 0, 1), member("b", 1, 1)],
            &native(2, 0, 1, 0)
        )
        .is_err());
    w.add_native("x", &native(1, 1, 4, 0)).unwrap();
    w.finish().unwrap();
    let e = Giw::open(&p).unwrap_err();
    assert!(
        matches!(&e, Error::BadRecord { index: 0, name, problem: RecordProblem::F16ScalesBeforeV14 } if name == "x"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "record 0 (x): f16 scales in a pre-v14 file");
    // An existing output is kept without `replace`.
    assert!(matches!(
        GiwWriter::create(&p, false, "int4", Target::Cpu, 12, b"m"),
        Err(Error::DestinationExists { .. })
    ));
    // Weights format older than 12.
    let mut b = std::fs::read(build(dir.path(), 12, Target::Cpu)).unwrap();
    b[6..8].copy_from_slice(&11u16.to_le_bytes());
    let e = Giw::from_bytes(&b, 0, &ReadOptions::default()).unwrap_err();
    assert!(
        matches!(e, Error::OlderWeightsFormat { found: 11, .. }),
        "{e}"
    );
    // Truncated.
    let b = std::fs::read(build(dir.path(), 12, Target::Cpu)).unwrap();
    assert!(Giw::from_bytes(&b[..b.len() - 1], 0, &ReadOptions::default()).is_err());
    assert!(Giw::from_bytes(&b[..10], 0, &ReadOptions::default()).is_err());
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any mix of dense and native records of any payload size round-trips,
        /// every payload aligned and aliased, and the file always passes its CRC.
        #[test]
        fn giw_round_trip_prop(
            recs in proptest::collection::vec((any::<bool>(), 1usize..300, any::<u8>()), 1..12),
            meta in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("p.giw");
            let mut w = GiwWriter::create(&p, true, "int8int8", Target::Cpu, 12, &meta).unwrap();
            let mut want = Vec::new();
            for (i, (dense, len, seed)) in recs.iter().enumerate() {
                let name = format!("t{i}");
                let payload = if *dense {
                    let b: Vec<u8> = (0..*len).map(|j| seed.wrapping_add(j as u8)).collect();
                    w.add_dense(&name, 8, &[*len as u64], &b).unwrap();
                    b
                } else {
                    let b = native(1 + (*len as u64 % 7), 0, *len, *seed);
                    w.add_native(&name, &b).unwrap();
                    b
                };
                want.push((name, payload));
            }
            w.finish().unwrap();
            let g = Giw::open(&p).unwrap();
            prop_assert_eq!(g.metadata(), &meta[..]);
            prop_assert_eq!(g.copied_payloads(), 0);
            for (name, payload) in &want {
                let (i, _) = g.find(name).unwrap();
                prop_assert_eq!(g.payload(i), &payload[..]);
                prop_assert_eq!(g.payload(i).as_ptr() as usize % 16, 0);
            }
        }
    }
}
