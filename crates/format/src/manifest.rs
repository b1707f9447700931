//! The canonical JSON manifest: the second level of the file's Merkle tree.
//!
//! The manifest lists every other section (kind, name, offset, size,
//! alignment, item count, SHA-256) together with the header's versions and
//! flags, the model's name and architecture, the source it came from and the
//! tool that wrote it. Its own SHA-256 sits in the footer, so that one digest
//! identifies the whole file: footer → manifest → sections.
//!
//! "Canonical" means: object keys sorted by their UTF-8 bytes, no whitespace,
//! integers only (no floats), strings escaped the way `serde_json` escapes them.
//! A reader re-serializes what it parsed and rejects the manifest unless the
//! bytes are identical, so two writers can never produce two different
//! manifests (and so two different digests) for the same content.

use serde_json::Value;
use std::collections::BTreeMap;

/// The schema identifier written into every manifest.
pub const SCHEMA: &str = "gpack.v1";

/// A section as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestSection {
    /// Kind number.
    pub kind: u32,
    /// Name in the section table.
    pub name: String,
    /// Payload offset.
    pub offset: u64,
    /// Payload size.
    pub size: u64,
    /// Alignment.
    pub alignment: u64,
    /// Logical item count.
    pub item_count: u64,
    /// Lower-case hex SHA-256 of the payload.
    pub sha256: String,
}

/// The parsed manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Header's `format_version`.
    pub format_version: u64,
    /// Header's `min_reader_version`.
    pub min_reader_version: u64,
    /// Header's flags.
    pub flags: u64,
    /// Model name.
    pub name: String,
    /// Model architecture (`general.architecture`), or empty.
    pub architecture: String,
    /// What it was converted from (free-form object).
    pub source: Value,
    /// The writing tool: `{"name": …, "version": …}`.
    pub tool: Value,
    /// Every section but the manifest, in file order.
    pub sections: Vec<ManifestSection>,
    /// Any other top-level keys (written by newer tools, or by convert).
    pub extra: BTreeMap<String, Value>,
}

/// What a writer says about the model; the rest of the manifest is filled in
/// by the writer itself.
#[derive(Debug, Clone, Default)]
pub struct ManifestInput {
    /// Model name.
    pub name: String,
    /// Architecture, or empty.
    pub architecture: String,
    /// Free-form description of the source.
    pub source: Value,
    /// Extra top-level keys (must not collide with the standard ones).
    pub extra: BTreeMap<String, Value>,
}

const STANDARD_KEYS: [&str; 10] = [
    "schema",
    "format_version",
    "min_reader_version",
    "flags",
    "name",
    "architecture",
    "source",
    "tool",
    "sections",
    "writer_note",
];

impl Manifest {
    /// The manifest as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        m.insert("schema".into(), self.schema.clone().into());
        m.insert("format_version".into(), self.format_version.into());
        m.insert("min_reader_version".into(), self.min_reader_version.into());
        m.insert("flags".into(), self.flags.into());
        m.insert("name".into(), self.name.clone().into());
        m.insert("architecture".into(), self.architecture.clone().into());
        m.insert("source".into(), self.source.clone());
        m.insert("tool".into(), self.tool.clone());
        let sections = self
            .sections
            .iter()
            .map(|s| {
                serde_json::json!({
                    "kind": s.kind,
                    "name": s.name,
                    "offset": s.offset,
                    "size": s.size,
                    "alignment": s.alignment,
                    "item_count": s.item_count,
                    "sha256": s.sha256,
                })
            })
            .collect();
        m.insert("sections".into(), Value::Array(sections));
        Value::Object(m)
    }

    /// Canonical bytes of the manifest.
    pub fn to_canonical(&self) -> Vec<u8> {
        canonical_json(&self.to_value())
    }

    /// Parses canonical manifest bytes; any deviation from the schema or from
    /// canonical form is an error saying what. Manifests larger than
    /// [`MAX_MANIFEST_SIZE`] are refused before they are parsed.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestProblem> {
        if bytes.len() as u64 > MAX_MANIFEST_SIZE {
            return Err(ManifestProblem::TooLarge {
                size: bytes.len() as u64,
            });
        }
        let v: Value = serde_json::from_slice(bytes).map_err(ManifestProblem::NotJson)?;
        if canonical_json(&v) != bytes {
            return Err(ManifestProblem::NotCanonical);
        }
        let Value::Object(mut m) = v else {
            return Err(ManifestProblem::NotObject);
        };
        let mut take = |k: &'static str| m.remove(k).ok_or(ManifestProblem::MissingKey(k));
        let schema = as_string(take("schema")?, "schema")?;
        if schema != SCHEMA {
            return Err(ManifestProblem::Schema(schema));
        }
        let format_version = as_u64(take("format_version")?, "format_version")?;
        let min_reader_version = as_u64(take("min_reader_version")?, "min_reader_version")?;
        let flags = as_u64(take("flags")?, "flags")?;
        let name = as_string(take("name")?, "name")?;
        let architecture = as_string(take("architecture")?, "architecture")?;
        let source = take("source")?;
        let tool = take("tool")?;
        let Value::Array(list) = take("sections")? else {
            return Err(ManifestProblem::Type {
                field: "sections",
                expected: "an array",
            });
        };
        let mut sections = Vec::with_capacity(list.len());
        for (i, s) in list.into_iter().enumerate() {
            let at = |problem| ManifestProblem::InSection {
                index: i as u64,
                problem: Box::new(problem),
            };
            let Value::Object(mut o) = s else {
                return Err(at(ManifestProblem::NotObject));
            };
            let mut get = |k: &'static str| o.remove(k).ok_or(at(ManifestProblem::MissingKey(k)));
            let sec = ManifestSection {
                kind: u32::try_from(as_u64(get("kind")?, "kind").map_err(at)?).map_err(|_| {
                    at(ManifestProblem::Type {
                        field: "kind",
                        expected: "a 32-bit unsigned integer",
                    })
                })?,
                name: as_string(get("name")?, "name").map_err(at)?,
                offset: as_u64(get("offset")?, "offset").map_err(at)?,
                size: as_u64(get("size")?, "size").map_err(at)?,
                alignment: as_u64(get("alignment")?, "alignment").map_err(at)?,
                item_count: as_u64(get("item_count")?, "item_count").map_err(at)?,
                sha256: as_string(get("sha256")?, "sha256").map_err(at)?,
            };
            if let Some(k) = o.keys().next() {
                return Err(at(ManifestProblem::UnknownKey(k.clone())));
            }
            sections.push(sec);
        }
        Ok(Manifest {
            schema,
            format_version,
            min_reader_version,
            flags,
            name,
            architecture,
            source,
            tool,
            sections,
            extra: m.into_iter().collect(),
        })
    }

    /// Builds the manifest a writer records.
    pub(crate) fn from_input(
        input: &ManifestInput,
        flags: u32,
        sections: Vec<ManifestSection>,
    ) -> Manifest {
        let extra = input
            .extra
            .iter()
            .filter(|(k, _)| !STANDARD_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Manifest {
            schema: SCHEMA.into(),
            format_version: u64::from(crate::raw::FORMAT_VERSION),
            min_reader_version: u64::from(crate::raw::READER_VERSION),
            flags: u64::from(flags),
            name: input.name.clone(),
            architecture: input.architecture.clone(),
            source: if input.source.is_null() {
                Value::Object(Default::default())
            } else {
                input.source.clone()
            },
            tool: serde_json::json!({"name": "gpack", "version": env!("CARGO_PKG_VERSION")}),
            sections,
            extra,
        }
    }
}

fn as_u64(v: Value, field: &'static str) -> Result<u64, ManifestProblem> {
    v.as_u64().ok_or(ManifestProblem::Type {
        field,
        expected: "an unsigned integer",
    })
}

fn as_string(v: Value, field: &'static str) -> Result<String, ManifestProblem> {
    match v {
        Value::String(s) => Ok(s),
        _ => Err(ManifestProblem::Type {
            field,
            expected: "a string",
        }),
    }
}

/// The largest manifest a reader parses: 16 MiB. A manifest lists at most
/// 15 sections and the model's description; real ones are a few KiB, so this
/// only stops a crafted size from making quick open hash and parse gigabytes.
pub const MAX_MANIFEST_SIZE: u64 = 16 << 20;

/// What is wrong with a manifest (or with how it agrees with the header).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestProblem {
    /// Larger than [`MAX_MANIFEST_SIZE`].
    #[error("{size} bytes, more than the {MAX_MANIFEST_SIZE}-byte limit")]
    TooLarge {
        /// Its size.
        size: u64,
    },
    /// Not JSON at all (serde_json's error, which names the line and
    /// column, is the source).
    #[error("not JSON")]
    NotJson(#[source] serde_json::Error),
    /// JSON, but not in canonical form.
    #[error("not in canonical form (sorted keys, no whitespace, integers)")]
    NotCanonical,
    /// The top level (or a section entry) is not an object.
    #[error("not a JSON object")]
    NotObject,
    /// A required key is absent.
    #[error("missing key {0:?}")]
    MissingKey(&'static str),
    /// A key a section entry must not have.
    #[error("unknown key {0:?}")]
    UnknownKey(String),
    /// A value of the wrong JSON type.
    #[error("{field} is not {expected}")]
    Type {
        /// The key.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A schema other than [`SCHEMA`].
    #[error("schema is {0:?}, expected {SCHEMA:?}")]
    Schema(String),
    /// A problem in one entry of `sections`.
    #[error("sections[{index}]")]
    InSection {
        /// Position in the list.
        index: u64,
        /// What is wrong with it.
        #[source]
        problem: Box<ManifestProblem>,
    },
    /// A field that disagrees with the header.
    #[error("{field} is {manifest}, the header says {header}")]
    Header {
        /// The field.
        field: &'static str,
        /// Manifest value.
        manifest: u64,
        /// Header value.
        header: u64,
    },
    /// A section count that disagrees with the section table.
    #[error("lists {manifest} sections, the table has {table}")]
    SectionCount {
        /// Listed in the manifest.
        manifest: u64,
        /// In the table (manifest excluded).
        table: u64,
    },
}

/// Serializes a JSON value canonically: keys sorted by bytes, no whitespace.
/// Floats are written as `serde_json` writes them; writers must not use them.
pub fn canonical_json(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::String(k.clone()).to_string().as_bytes());
                out.push(b':');
                write_canonical(&m[k], out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_sorts_and_strips() {
        let v: Value =
            serde_json::from_str(r#" { "b": [1, {"z":1,"a":"x"}], "a": null } "#).unwrap();
        assert_eq!(canonical_json(&v), br#"{"a":null,"b":[1,{"a":"x","z":1}]}"#);
    }

    #[test]
    fn round_trip_and_reject_non_canonical() {
        let m = Manifest::from_input(
            &ManifestInput {
                name: "m".into(),
                architecture: "llama".into(),
                source: serde_json::json!({"format": "gguf"}),
                extra: [("converted".to_string(), serde_json::json!({"tensors": 3}))].into(),
            },
            1,
            vec![ManifestSection {
                kind: 0,
                name: "metadata_kv".into(),
                offset: 64,
                size: 10,
                alignment: 64,
                item_count: 2,
                sha256: "00".repeat(32),
            }],
        );
        let bytes = m.to_canonical();
        assert_eq!(Manifest::parse(&bytes).unwrap(), m);
        let mut spaced = bytes.clone();
        spaced.insert(1, b' ');
        assert!(matches!(
            Manifest::parse(&spaced).unwrap_err(),
            ManifestProblem::NotCanonical
        ));
        // Not JSON: serde_json's error (line and column) is the source.
        let e = Manifest::parse(b"{\"a\":").unwrap_err();
        assert!(
            matches!(&e, ManifestProblem::NotJson(j) if j.line() == 1 && j.column() == 5),
            "{e:?}"
        );
        assert_eq!(
            crate::error_chain(&e),
            "not JSON: EOF while parsing a value at line 1 column 5"
        );
    }
}
