#![no_main]
//! Fuzz the GPACK quick-open parser and, on success, full verification and
//! every payload table parser (touch every accessor after Ok).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(layout) = gpack_format::parse_layout(data) {
        let _ = gpack_format::verify_payloads(data, &layout, &|_| {});
        if let Ok(g) = gpack_format::Gpack::from_bytes(data.to_vec()) {
            use gpack_format::{payload, SectionKind};
            if let Some(s) = g.section(SectionKind::MetadataKv) {
                let _ = payload::parse_kv(s.bytes);
            }
            if let Some(s) = g.section(SectionKind::TensorIndex) {
                let _ = payload::parse_tensor_index(s.bytes);
            }
            if let Some(s) = g.section(SectionKind::TokenizerAssets) {
                let _ = payload::parse_assets(s.bytes);
            }
            if let Some(r) = g.expert_layout() {
                let _ = r;
            }
            for k in [SectionKind::Embed, SectionKind::Head, SectionKind::Ple] {
                if let Some(s) = g.section(k) {
                    let _ = gpack_format::single_tensor(s);
                }
            }
        }
    }
    // The table parsers on raw bytes too.
    let _ = gpack_format::payload::parse_kv(data);
    let _ = gpack_format::payload::parse_tensor_index(data);
    let _ = gpack_format::payload::ExpertLayout::parse(data);
    let _ = gpack_format::payload::parse_assets(data);
});
