//! Section 0, MetadataKv: every source key, in source order; then a draft
//! model's keys but its tokenizer's, prefixed with [`DRAFT_PREFIX`].

use super::input::Input;
use super::options::DRAFT_PREFIX;
use super::output::Output;
use crate::Error;
use gpack_format::payload::{self, KvRecord};
use gpack_format::SectionKind;

/// Writes MetadataKv.
pub(super) fn write(out: &mut Output<'_>, input: &Input) -> Result<(), Error> {
    let draft_keys = input.draft.iter().flat_map(|d| {
        d.metadata
            .iter()
            .filter(|(k, _)| !k.starts_with("tokenizer."))
            .map(|(k, v)| (format!("{DRAFT_PREFIX}{k}"), v))
    });
    let values: Vec<(String, u32, Vec<u8>)> = input
        .source
        .metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(draft_keys)
        .map(|(k, v)| (k, v.value_type().id(), gpack_ingest::gguf::encode_value(v)))
        .collect();
    let kv = payload::encode_kv(values.iter().map(|(k, t, v)| KvRecord {
        key: k,
        value_type: *t,
        value: v,
    }));
    out.add(SectionKind::MetadataKv, &kv, values.len() as u64)
}
