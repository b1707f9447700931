//! The metadata GGUF a bundle carries ahead of its weight records.

use super::Error;
use gpack_ingest::{Array, Metadata, Source, SourceKind, Value};
use std::borrow::Cow;

/// The metadata GGUF of the bundle: a single-file GGUF source truncated at
/// its tensor-data boundary (keeps the tokenizer); otherwise a metadata-only
/// GGUF written from ingest's metadata, plus, for an HF source, each
/// tokenizer/config asset as a `gpack.asset.<file name>` u8 array.
pub(super) fn metadata_gguf(source: &Source) -> Result<Cow<'_, [u8]>, Error> {
    if source.kind == SourceKind::Gguf && source.files.len() == 1 {
        let bytes = source.files[0].bytes();
        let g = gpack_ingest::gguf::parse(bytes)?;
        return Ok(Cow::Borrowed(&bytes[..g.data_offset as usize]));
    }
    let mut md: Metadata = source.metadata.clone();
    for a in &source.assets {
        md.insert(
            format!("gpack.asset.{}", a.name),
            Value::Array(Array::U8(a.bytes.clone())),
        );
    }
    let w = gpack_ingest::gguf::Writer::new(Vec::new(), &md, &[])?;
    Ok(Cow::Owned(w.finish()?))
}
