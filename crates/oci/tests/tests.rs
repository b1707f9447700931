//! The artifact layout without a registry: describe → plan → assemble gives
//! the file back byte for byte; mutated configs and manifests are refused
//! with errors, never a panic. (Push and pull against a real registry are
//! tested end to end in crates/cli/tests/oci.rs.)

use gpack_format::{GpackWriter, ManifestInput, SectionKind, WriteOptions};
use gpack_oci::artifact;
use gpack_oci::Store;
use std::path::Path;

fn sample(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("s.gpack");
    let mut w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
    w.add_section(SectionKind::MetadataKv, "metadata_kv", &[7u8; 100], 1)
        .unwrap();
    w.add_section(
        SectionKind::NativeDense,
        "native_dense",
        &vec![3u8; 9000],
        2,
    )
    .unwrap();
    w.add_section(SectionKind::TokenizerBin, "tokenizer_bin", &[], 0)
        .unwrap();
    w.finish(&ManifestInput {
        name: "sample".into(),
        ..Default::default()
    })
    .unwrap();
    out
}

#[test]
fn describe_plan_assemble_is_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample(dir.path());
    let g = gpack_format::Gpack::open(&f).unwrap();
    let (config, manifest) = artifact::describe(&g).unwrap();
    let plan = artifact::plan("sample", &manifest, &config).unwrap();
    assert_eq!(plan.sections.len(), 4);
    assert_eq!(plan.digest, artifact::oci_digest(&g.layout().digest()));
    // A store holding the sections' bytes under their digests.
    let store = Store::new(dir.path().join("store"));
    std::fs::create_dir_all(dir.path().join("store/blobs/sha256")).unwrap();
    for s in &g.layout().sections {
        let b = &g.bytes()[s.offset as usize..(s.offset + s.size) as usize];
        std::fs::write(
            store.blob_path(&artifact::oci_digest(&s.sha256)).unwrap(),
            b,
        )
        .unwrap();
    }
    let out = dir.path().join("rebuilt.gpack");
    gpack_oci::pull::assemble(&store, &plan, &out, false).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&f).unwrap());
    // A damaged blob in the store: the quick check or the size check fails
    // and nothing is left at the destination.
    let ns = &g.layout().sections[1];
    let p = store.blob_path(&artifact::oci_digest(&ns.sha256)).unwrap();
    std::fs::write(&p, [0u8; 5]).unwrap();
    let out2 = dir.path().join("rebuilt2.gpack");
    let e = gpack_oci::pull::assemble(&store, &plan, &out2, false).unwrap_err();
    assert!(e.to_string().contains("section native_dense"), "{e}");
    assert!(!out2.exists());
    assert!(gpack_format::temp_files_of(&out2).is_empty());
}

/// xorshift, for reproducible mutations.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn mutated_configs_and_manifests_are_refused_without_panic() {
    let dir = tempfile::tempdir().unwrap();
    let f = sample(dir.path());
    let g = gpack_format::Gpack::open(&f).unwrap();
    let (config, manifest) = artifact::describe(&g).unwrap();
    let c: serde_json::Value = serde_json::from_slice(&config).unwrap();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut refused = 0;
    for i in 0..3000 {
        let mut c2 = c.clone();
        let mut m2 = manifest.clone();
        match i % 6 {
            // Flip one hex digit of the header, table or footer.
            0..=2 => {
                let key = ["header", "section_table", "footer"][i % 3];
                let mut s = c2[key].as_str().unwrap().as_bytes().to_vec();
                let at = (next(&mut seed) as usize) % s.len();
                s[at] = b"0123456789abcdef"[(next(&mut seed) % 16) as usize];
                c2[key] = String::from_utf8(s).unwrap().into();
            }
            3 => {
                let n = m2.layers.len();
                m2.layers[(next(&mut seed) as usize) % n].size = next(&mut seed) as i64;
            }
            4 => {
                m2.layers.pop();
            }
            _ => {
                c2["size"] = (next(&mut seed) >> (next(&mut seed) % 64)).into();
            }
        }
        if artifact::plan("m", &m2, c2.to_string().as_bytes()).is_err() {
            refused += 1;
        }
    }
    // Some hex flips land on bytes the plan does not read (reserved, names,
    // item counts): the quick check of the assembled file catches those.
    assert!(refused > 1500, "only {refused} of 3000 mutations refused");
    assert!(artifact::plan("m", &manifest, b"\xff\x00garbage").is_err());
}
