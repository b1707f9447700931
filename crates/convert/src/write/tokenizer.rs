//! Sections 11 TokenizerBin (the GBT1 tokenizer built from the source,
//! [`crate::tokenizer::build`]) and 12 TokenizerAssets (a Hugging Face
//! source's tokenizer and config files, as they are).

use super::output::Output;
use crate::Error;
use gpack_format::payload;
use gpack_format::SectionKind;
use gpack_ingest::Source;

/// Writes TokenizerBin, when the source has a tokenizer.
pub(super) fn write_bin(out: &mut Output<'_>, source: &Source) -> Result<(), Error> {
    if let Some(gbt1) = crate::tokenizer::build(source)? {
        out.add(SectionKind::TokenizerBin, &gbt1.bytes, gbt1.vocab_size)?;
    }
    Ok(())
}

/// Writes TokenizerAssets, when the source has assets.
pub(super) fn write_assets(out: &mut Output<'_>, source: &Source) -> Result<(), Error> {
    if source.assets.is_empty() {
        return Ok(());
    }
    let b = payload::encode_assets(
        source
            .assets
            .iter()
            .map(|a| (a.name.as_str(), a.bytes.as_slice())),
    );
    out.add(SectionKind::TokenizerAssets, &b, source.assets.len() as u64)
}
