use gpack_format::{GpackWriter, ManifestInput, SectionKind, WriteOptions};
use std::path::{Path, PathBuf};

/// Writes a small file with a mix of sections and returns its path and the
/// sections' payloads.
pub fn small_file(dir: &Path) -> (PathBuf, Vec<(SectionKind, Vec<u8>)>) {
    let out = dir.join("small.gpack");
    let sections: Vec<(SectionKind, Vec<u8>)> = vec![
        (SectionKind::MetadataKv, b"key=value".to_vec()),
        (
            SectionKind::TensorIndex,
            (0..300u32).map(|i| i as u8).collect(),
        ),
        (SectionKind::NativeDense, vec![7u8; 5000]),
        (SectionKind::Embed, vec![3u8; 100]),
        (SectionKind::ExpertLayout, Vec::new()),
        (SectionKind::TokenizerBin, b"GBT1....".to_vec()),
    ];
    let mut w = GpackWriter::create(&out, WriteOptions::default()).unwrap();
    for (k, b) in &sections {
        w.add_section(*k, k.default_name(), b, b.len() as u64)
            .unwrap();
    }
    w.finish(&ManifestInput {
        name: "small".into(),
        architecture: "test".into(),
        source: serde_json::json!({"format": "synthetic"}),
        ..Default::default()
    })
    .unwrap();
    (out, sections)
}

pub fn synth_bin() -> &'static str {
    env!("CARGO_BIN_EXE_gpack-synth")
}
