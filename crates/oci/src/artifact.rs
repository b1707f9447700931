//! The artifact layout (normative: docs/OCI.md): media types, annotations,
//! the config blob, and the checks a puller applies to a manifest and
//! config it received before it downloads anything.
//!
//! A .gpack's layout is canonical (docs/FORMAT.md), so the file is rebuilt
//! byte for byte from its header, section table and footer (the config) and
//! its sections (one layer each, the layer digest being the section's own
//! SHA-256 from the table). Everything here is parsed from registry bytes,
//! which are untrusted: sizes are capped and every offset is checked with
//! overflow-checked arithmetic; nothing panics.

use crate::error::{ArtifactProblem, Document, Error, Result};
use gpack_format::raw::{
    FooterV1, HeaderV1, SectionEntryV1, FOOTER_SIZE, HEADER_SIZE, SECTION_ENTRY_SIZE,
    SECTION_NAME_LEN,
};
use gpack_format::{Gpack, SectionKind};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OCI_IMAGE_MEDIA_TYPE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use zerocopy::FromBytes;

pub use crate::media::{
    ANN_ARCH, ANN_DIGEST, ANN_NAME, ANN_QUANT, ANN_SECTION, ANN_SIZE, ANN_TITLE, ARTIFACT_TYPE,
    CONFIG_MEDIA_TYPE, CONFIG_SCHEMA, SECTION_MEDIA_PREFIX,
};

/// Largest manifest accepted (distribution's own limit is 4 MiB).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// Largest config blob accepted: a header, at most 15 table entries, a
/// footer and the .gpack manifest (itself capped by the format at 16 MiB).
pub const MAX_CONFIG_BYTES: u64 = 17 << 20;
/// Most sections a GPACK v1 file can have (one per kind).
const MAX_SECTIONS: usize = 15;

/// The config blob: what rebuilds the file besides its sections.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// [`CONFIG_SCHEMA`].
    pub schema: String,
    /// File size in bytes.
    pub size: u64,
    /// `sha256:` + the footer's manifest SHA-256.
    pub digest: String,
    /// The 64-byte header, hex.
    pub header: String,
    /// The section table (96 bytes per entry), hex.
    pub section_table: String,
    /// The 64-byte footer, hex.
    pub footer: String,
    /// The .gpack manifest (the ManifestJson section, parsed), for `gpack ls`
    /// and registry browsers; the section itself is a layer like the others.
    pub manifest: serde_json::Value,
}

/// One section of the file to rebuild.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionPlan {
    /// Table name.
    pub name: String,
    /// Kind.
    pub kind: SectionKind,
    /// File offset.
    pub offset: u64,
    /// Size.
    pub size: u64,
    /// `sha256:…`, the layer digest.
    pub digest: String,
}

/// A validated plan to rebuild a .gpack from its layers.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Header bytes.
    pub header: Vec<u8>,
    /// Section table bytes and offset.
    pub table: (u64, Vec<u8>),
    /// Footer bytes.
    pub footer: Vec<u8>,
    /// File size.
    pub size: u64,
    /// Sections, in file order (their layers in the same order).
    pub sections: Vec<SectionPlan>,
    /// `sha256:` + the footer digest.
    pub digest: String,
}

/// The media type of a section layer of `kind`.
pub fn section_media_type(kind: SectionKind) -> String {
    format!("{SECTION_MEDIA_PREFIX}{}.v1", kind.default_name())
}

/// `sha256:` + hex.
pub fn oci_digest(sha: &[u8; 32]) -> String {
    format!("sha256:{}", hex::encode(sha))
}

/// The config blob and the manifest (without the config descriptor's
/// digest filled in by the caller) describing the open file `g`.
pub fn describe(g: &Gpack) -> Result<(Vec<u8>, OciImageManifest)> {
    let bytes = g.bytes();
    let l = g.layout();
    let table_off = l.header.section_table_offset.get() as usize;
    let n = l.sections.len();
    let total = bytes.len();
    let manifest = g
        .section(SectionKind::Manifest)
        .map(|s| s.bytes)
        .unwrap_or(&[]);
    let manifest_value: serde_json::Value =
        serde_json::from_slice(manifest).unwrap_or(serde_json::Value::Null);
    let digest = oci_digest(&l.digest());
    let config = Config {
        schema: CONFIG_SCHEMA.into(),
        size: total as u64,
        digest: digest.clone(),
        header: hex::encode(&bytes[..HEADER_SIZE as usize]),
        section_table: hex::encode(&bytes[table_off..table_off + SECTION_ENTRY_SIZE as usize * n]),
        footer: hex::encode(&bytes[total - FOOTER_SIZE as usize..]),
        manifest: manifest_value,
    };
    let config_bytes = serde_json::to_vec(&config).map_err(|e| Error::BadArtifact {
        what: Document::Config,
        problem: ArtifactProblem::Serialize(e),
    })?;
    let layers = l
        .sections
        .iter()
        .map(|s| OciDescriptor {
            media_type: section_media_type(s.kind),
            digest: oci_digest(&s.sha256),
            size: s.size as i64,
            urls: None,
            annotations: Some(BTreeMap::from([
                (ANN_SECTION.to_string(), s.name.clone()),
                (ANN_TITLE.to_string(), s.name.clone()),
            ])),
            artifact_type: None,
        })
        .collect();
    let m = g.manifest();
    let quant = m
        .extra
        .get("convert")
        .and_then(|c| c.get("quant"))
        .and_then(|q| q.as_str())
        .unwrap_or("")
        .to_string();
    let annotations = BTreeMap::from([
        (ANN_TITLE.to_string(), m.name.clone()),
        (ANN_NAME.to_string(), m.name.clone()),
        (ANN_ARCH.to_string(), m.architecture.clone()),
        (ANN_QUANT.to_string(), quant),
        (ANN_DIGEST.to_string(), digest),
        (ANN_SIZE.to_string(), total.to_string()),
    ]);
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
        config: OciDescriptor {
            media_type: CONFIG_MEDIA_TYPE.into(),
            digest: format!("sha256:{}", sha256_hex(&config_bytes)),
            size: config_bytes.len() as i64,
            urls: None,
            annotations: None,
            artifact_type: None,
        },
        layers,
        subject: None,
        artifact_type: Some(ARTIFACT_TYPE.into()),
        annotations: Some(annotations),
    };
    Ok((config_bytes, manifest))
}

/// SHA-256 of `b`, hex.
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(b))
}

/// Checks a gpack manifest and its config against each other and returns
/// the plan to rebuild the file. `reference` names the artifact in errors.
///
/// The header, table entries and footer are read through the format
/// crate's zerocopy structs ([`HeaderV1`], [`SectionEntryV1`],
/// [`FooterV1`]), whose sizes the hex lengths are checked against first.
pub fn plan(reference: &str, manifest: &OciImageManifest, config: &[u8]) -> Result<Plan> {
    let bad = |problem| Error::BadArtifact {
        what: Document::Artifact {
            reference: reference.to_string(),
        },
        problem,
    };
    let c: Config =
        serde_json::from_slice(config).map_err(|e| bad(ArtifactProblem::NotGpackConfig(e)))?;
    if c.schema != CONFIG_SCHEMA {
        return Err(bad(ArtifactProblem::ConfigSchema { found: c.schema }));
    }
    let hexed = |field: &'static str, s: &str, len: Option<u64>| -> Result<Vec<u8>> {
        let v = hex::decode(s).map_err(|source| bad(ArtifactProblem::NotHex { field, source }))?;
        match len {
            Some(l) if v.len() as u64 != l => Err(bad(ArtifactProblem::FieldSize {
                field,
                found: v.len(),
                expected: l as usize,
            })),
            _ => Ok(v),
        }
    };
    let header = hexed("header", &c.header, Some(HEADER_SIZE))?;
    let footer = hexed("footer", &c.footer, Some(FOOTER_SIZE))?;
    let table = hexed("section_table", &c.section_table, None)?;
    let p = layout(reference, header, table, footer)?;
    if p.size != c.size {
        return Err(bad(ArtifactProblem::SizeDiffers {
            header: p.size,
            config: c.size,
        }));
    }
    if manifest.layers.len() != p.sections.len() {
        return Err(bad(ArtifactProblem::LayerCount {
            found: manifest.layers.len(),
            expected: p.sections.len(),
        }));
    }
    for (i, (layer, s)) in manifest.layers.iter().zip(&p.sections).enumerate() {
        if layer.digest != s.digest {
            return Err(bad(ArtifactProblem::LayerDigest {
                index: i,
                name: s.name.clone(),
                found: layer.digest.clone(),
                expected: s.digest.clone(),
            }));
        }
        if u64::try_from(layer.size).ok() != Some(s.size) {
            return Err(bad(ArtifactProblem::LayerSize {
                index: i,
                name: s.name.clone(),
                found: layer.size,
                expected: s.size,
            }));
        }
        if layer.media_type != section_media_type(s.kind) {
            return Err(bad(ArtifactProblem::LayerMediaType {
                index: i,
                name: s.name.clone(),
                found: layer.media_type.clone(),
                expected: section_media_type(s.kind),
            }));
        }
    }
    if p.digest != c.digest {
        return Err(bad(ArtifactProblem::ConfigDigest {
            config: c.digest,
            footer: p.digest,
        }));
    }
    Ok(p)
}

/// Checks a .gpack's header, section table and footer (bytes as received,
/// untrusted) against each other: the section count 1..=15, the table's
/// size, sections in increasing non-overlapping order before the table,
/// the table before the footer, all offsets overflow-checked. Returns the
/// plan of the file they describe. `reference` names the artifact in errors.
pub fn layout(reference: &str, header: Vec<u8>, table: Vec<u8>, footer: Vec<u8>) -> Result<Plan> {
    let bad = |problem| Error::BadArtifact {
        what: Document::Artifact {
            reference: reference.to_string(),
        },
        problem,
    };
    let h = HeaderV1::read_from_bytes(&header).map_err(|_| {
        bad(ArtifactProblem::FieldSize {
            field: "header",
            found: header.len(),
            expected: HEADER_SIZE as usize,
        })
    })?;
    let f = FooterV1::read_from_bytes(&footer).map_err(|_| {
        bad(ArtifactProblem::FieldSize {
            field: "footer",
            found: footer.len(),
            expected: FOOTER_SIZE as usize,
        })
    })?;
    let count = h.section_count.get();
    if count == 0 || count as usize > MAX_SECTIONS {
        return Err(bad(ArtifactProblem::SectionCount {
            found: count,
            max: MAX_SECTIONS,
        }));
    }
    let count = count as usize;
    let entries = <[SectionEntryV1]>::ref_from_bytes_with_elems(&table, count).map_err(|_| {
        bad(ArtifactProblem::TableSize {
            found: table.len(),
            count,
        })
    })?;
    let size = h.total_file_size.get();
    let table_off = h.section_table_offset.get();
    let footer_off = size
        .checked_sub(FOOTER_SIZE)
        .ok_or_else(|| bad(ArtifactProblem::SmallerThanFooter { size }))?;
    if table_off
        .checked_add(table.len() as u64)
        .is_none_or(|e| e > footer_off)
    {
        return Err(bad(ArtifactProblem::TableOutside {
            offset: table_off,
            len: table.len(),
            footer: footer_off,
        }));
    }
    let mut sections = Vec::with_capacity(count);
    let mut end = HEADER_SIZE;
    for (i, e) in entries.iter().enumerate() {
        let kind_id = e.kind.get();
        let kind = SectionKind::from_u32(kind_id).ok_or_else(|| {
            bad(ArtifactProblem::UnknownKind {
                index: i,
                kind: kind_id,
            })
        })?;
        let (offset, len) = (e.offset.get(), e.size.get());
        let name_len = e
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(SECTION_NAME_LEN);
        let name = String::from_utf8_lossy(&e.name[..name_len]).into_owned();
        let stop = offset.checked_add(len).filter(|&s| s <= table_off);
        let Some(stop) = stop.filter(|_| offset >= end) else {
            return Err(bad(ArtifactProblem::SectionOverlap {
                name,
                offset,
                size: len,
                end,
                table: table_off,
            }));
        };
        end = stop;
        let digest = oci_digest(&e.sha256);
        sections.push(SectionPlan {
            name,
            kind,
            offset,
            size: len,
            digest,
        });
    }
    let digest = oci_digest(&f.manifest_sha256);
    Ok(Plan {
        header,
        table: (table_off, table),
        footer,
        size,
        sections,
        digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_name_the_kind() {
        assert_eq!(
            section_media_type(SectionKind::NativeDense),
            "application/vnd.gpack.section.native_dense.v1"
        );
    }

    #[test]
    fn a_config_that_is_not_ours_is_refused_by_name() {
        let m = OciImageManifest {
            schema_version: 2,
            media_type: None,
            config: OciDescriptor::default(),
            layers: vec![],
            subject: None,
            artifact_type: None,
            annotations: None,
        };
        let e = plan("r", &m, b"{\"schema\":\"x\"}").unwrap_err();
        assert!(
            matches!(&e, Error::BadArtifact { what: Document::Artifact { reference }, problem: ArtifactProblem::NotGpackConfig(_) } if reference == "r"),
            "{e:?}"
        );
        let chain = gpack_format::error_chain(&e);
        assert!(
            chain.starts_with("artifact r: config blob is not a gpack config: "),
            "{chain}"
        );
        let config = |header: String, table: &str| {
            serde_json::json!({"schema": CONFIG_SCHEMA, "size": 1u64 << 63, "digest": "",
                "header": header, "section_table": table, "footer": "00".repeat(64),
                "manifest": null})
            .to_string()
        };
        let e = plan("r", &m, config("00".repeat(64), "").as_bytes()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadArtifact {
                    problem: ArtifactProblem::SectionCount {
                        found: 0,
                        max: MAX_SECTIONS
                    },
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            gpack_format::error_chain(&e),
            "artifact r: header section_count 0, expected 1..=15"
        );
        let e = plan("r", &m, config("00".repeat(63), "").as_bytes()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadArtifact {
                    problem: ArtifactProblem::FieldSize {
                        field: "header",
                        found: 63,
                        expected: 64
                    },
                    ..
                }
            ),
            "{e:?}"
        );
        // section_count (bytes 12..16) 2, but one table entry.
        let mut h = vec![0u8; 64];
        h[12] = 2;
        let e = plan(
            "r",
            &m,
            config(hex::encode(&h), &"00".repeat(96)).as_bytes(),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadArtifact {
                    problem: ArtifactProblem::TableSize {
                        found: 96,
                        count: 2
                    },
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
