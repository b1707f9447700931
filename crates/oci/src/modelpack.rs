//! The CNCF ModelPack layout (modelpack/model-spec v1; normative for gpack:
//! docs/OCI.md "ModelPack layout"): the .gpack is ONE layer,
//! `application/vnd.cncf.model.weight.v1.raw`, the file as it is, so that
//! Kubernetes' image volumes (CRI-O mounts each layer as one file named by
//! `org.opencontainers.image.title`) and any ModelPack tool see one
//! mappable `model.gpack`; the config is the spec's
//! `application/vnd.cncf.model.config.v1+json` (`descriptor`, `config`,
//! `modelfs`) with `config.format = "gpack"`.
//!
//! The layer digest is the plain SHA-256 of the whole file (the registry
//! checks the upload against it, and a puller checks the assembled file
//! against it before the rename); the file's own footer digest rides along
//! as the annotation `dev.gpack.digest`. Everything here that reads a
//! manifest or config parses registry bytes, which are untrusted: nothing
//! panics, and a file name from an annotation is accepted only as one plain
//! path component.

use crate::error::{ArtifactProblem, Document, Error, Result};
use crate::media::{
    ANN_ARCH, ANN_DIGEST, ANN_FILEPATH, ANN_NAME, ANN_QUANT, ANN_SIZE, ANN_TITLE,
    MODELPACK_ARTIFACT_TYPE, MODELPACK_CONFIG_MEDIA_TYPE, MODELPACK_FILE, MODELPACK_FORMAT,
    MODELPACK_WEIGHT_PREFIX, MODELPACK_WEIGHT_RAW,
};
use gpack_format::{Gpack, SectionKind};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OCI_IMAGE_MEDIA_TYPE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A ModelPack config (`application/vnd.cncf.model.config.v1+json`), the
/// fields gpack writes and reads; unknown fields are ignored on read (the
/// spec's schema forbids extra ones, so gpack writes none).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// General information.
    pub descriptor: Descriptor,
    /// Execution parameters.
    pub config: ModelConfig,
    /// The layers' content addresses.
    pub modelfs: ModelFs,
}

/// `descriptor` of a ModelPack config.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Descriptor {
    /// Model name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Model family (gpack: `general.architecture`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub family: String,
}

/// `config` of a ModelPack config.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelConfig {
    /// Architecture (gpack: `general.architecture`, e.g. `llama`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub architecture: String,
    /// File format: `gpack` for gpack's own artifacts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub format: String,
    /// Parameter count, as the spec writes it (`135m`, `1.7b`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub param_size: String,
    /// Quantization (convert's `--quant`: `keep`, `int8`, `int4`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub quantization: String,
}

/// `modelfs` of a ModelPack config.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ModelFs {
    /// Always `layers`.
    #[serde(rename = "type")]
    pub kind: String,
    /// One per layer, bottom first: the SHA-256 of the uncompressed layer
    /// (for a `.raw` layer, its digest).
    #[serde(rename = "diffIds")]
    pub diff_ids: Vec<String>,
}

/// `135m`, `1.7b`: a parameter count the way ModelPack configs write it.
pub fn param_size(n: u64) -> String {
    let (v, unit) = match n {
        n if n >= 1_000_000_000_000 => (n as f64 / 1e12, "t"),
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "b"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "m"),
        n if n >= 1_000 => (n as f64 / 1e3, "k"),
        n => return n.to_string(),
    };
    let s = format!("{v:.1}");
    let s = s.strip_suffix(".0").unwrap_or(&s);
    format!("{s}{unit}")
}

/// The model's parameter count: the product of every tensor's dimensions
/// in its tensor index (0 when the file has none).
fn parameters(g: &Gpack) -> u64 {
    let Some(s) = g.section(SectionKind::TensorIndex) else {
        return 0;
    };
    let Ok(entries) = gpack_format::payload::parse_tensor_index(s.bytes) else {
        return 0;
    };
    entries.iter().map(|e| e.dims.iter().product::<u64>()).sum()
}

/// The config blob and manifest of the ModelPack artifact holding the open
/// file `g`, whose plain SHA-256 is `file_sha256` (`sha256:…`).
pub fn describe(g: &Gpack, file_sha256: &str) -> Result<(Vec<u8>, OciImageManifest)> {
    let m = g.manifest();
    let quant = m
        .extra
        .get("convert")
        .and_then(|c| c.get("quant"))
        .and_then(|q| q.as_str())
        .unwrap_or("")
        .to_string();
    let size = g.bytes().len() as u64;
    let footer = crate::artifact::oci_digest(&g.layout().digest());
    let config = Config {
        descriptor: Descriptor {
            name: m.name.clone(),
            family: m.architecture.clone(),
        },
        config: ModelConfig {
            architecture: m.architecture.clone(),
            format: MODELPACK_FORMAT.into(),
            param_size: param_size(parameters(g)),
            quantization: quant.clone(),
        },
        modelfs: ModelFs {
            kind: "layers".into(),
            diff_ids: vec![file_sha256.to_string()],
        },
    };
    let config_bytes = serde_json::to_vec(&config).map_err(|e| Error::BadArtifact {
        what: Document::Config,
        problem: ArtifactProblem::Serialize(e),
    })?;
    let layer = OciDescriptor {
        media_type: MODELPACK_WEIGHT_RAW.into(),
        digest: file_sha256.to_string(),
        size: size as i64,
        urls: None,
        annotations: Some(BTreeMap::from([
            (ANN_TITLE.to_string(), MODELPACK_FILE.to_string()),
            (ANN_FILEPATH.to_string(), MODELPACK_FILE.to_string()),
            (ANN_DIGEST.to_string(), footer.clone()),
        ])),
        artifact_type: None,
    };
    let annotations = BTreeMap::from([
        (ANN_TITLE.to_string(), m.name.clone()),
        (ANN_NAME.to_string(), m.name.clone()),
        (ANN_ARCH.to_string(), m.architecture.clone()),
        (ANN_QUANT.to_string(), quant),
        (ANN_DIGEST.to_string(), footer),
        (ANN_SIZE.to_string(), size.to_string()),
    ]);
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
        config: OciDescriptor {
            media_type: MODELPACK_CONFIG_MEDIA_TYPE.into(),
            digest: format!("sha256:{}", crate::artifact::sha256_hex(&config_bytes)),
            size: config_bytes.len() as i64,
            urls: None,
            annotations: None,
            artifact_type: None,
        },
        layers: vec![layer],
        subject: None,
        artifact_type: Some(MODELPACK_ARTIFACT_TYPE.into()),
        annotations: Some(annotations),
    };
    Ok((config_bytes, manifest))
}

/// What the one weight file of a ModelPack artifact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// A .gpack: pulled by ranges, sections checked as they complete.
    Gpack,
    /// A GGUF (another tool's artifact): downloaded and converted.
    Gguf,
}

/// A checked ModelPack artifact: its one weight layer.
#[derive(Debug, Clone)]
pub struct Single {
    /// The weight layer's descriptor.
    pub layer: OciDescriptor,
    /// Its size (the descriptor's, non-negative).
    pub size: u64,
    /// The file name it carries (`org.cncf.model.filepath`, else the title).
    pub file_name: String,
    /// What it holds.
    pub format: WeightFormat,
    /// The .gpack's footer digest, when the artifact names it
    /// (`dev.gpack.digest` on the layer, else on the manifest).
    pub footer_digest: Option<String>,
}

/// Whether `m` is a ModelPack manifest (by its config media type or its
/// `artifactType`).
pub fn is_modelpack(m: &OciImageManifest) -> bool {
    m.config.media_type == MODELPACK_CONFIG_MEDIA_TYPE
        || m.artifact_type.as_deref() == Some(MODELPACK_ARTIFACT_TYPE)
}

/// Checks a ModelPack manifest and its (verified) config blob: exactly one
/// weight layer, uncompressed (`.raw`, or a GGUF media type), a
/// non-negative size agreeing with `dev.gpack.size` when given, `modelfs`
/// naming that layer, and a file name that is one plain path component.
pub fn check(reference: &str, m: &OciImageManifest, config: &[u8]) -> Result<Single> {
    let bad = |problem| Error::BadArtifact {
        what: Document::ModelArtifact {
            reference: reference.to_string(),
        },
        problem,
    };
    let c: Config =
        serde_json::from_slice(config).map_err(|e| bad(ArtifactProblem::NotModelPackConfig(e)))?;
    let weights: Vec<&OciDescriptor> = m
        .layers
        .iter()
        .filter(|l| l.media_type.starts_with(MODELPACK_WEIGHT_PREFIX))
        .collect();
    let layer = match weights.as_slice() {
        [one] => (*one).clone(),
        [] => return Err(bad(ArtifactProblem::NoWeightLayer)),
        many => {
            return Err(bad(ArtifactProblem::WeightLayers { count: many.len() }));
        }
    };
    let ann = layer.annotations.clone().unwrap_or_default();
    let file_name = ann
        .get(ANN_FILEPATH)
        .or_else(|| ann.get(ANN_TITLE))
        .cloned()
        .ok_or_else(|| bad(ArtifactProblem::NoFilePath))?;
    if !is_plain_file_name(&file_name) {
        return Err(bad(ArtifactProblem::FilePath { path: file_name }));
    }
    let gguf_type = crate::docker::is_gguf_media_type(&layer.media_type);
    let format = if gguf_type
        || c.config.format.eq_ignore_ascii_case("gguf")
        || file_name.to_ascii_lowercase().ends_with(".gguf")
    {
        WeightFormat::Gguf
    } else if c.config.format == MODELPACK_FORMAT || file_name.ends_with(".gpack") {
        WeightFormat::Gpack
    } else {
        return Err(bad(ArtifactProblem::WeightFormat {
            format: c.config.format.clone(),
            file: file_name,
        }));
    };
    if !gguf_type && layer.media_type != MODELPACK_WEIGHT_RAW {
        return Err(bad(ArtifactProblem::WeightMediaType {
            found: layer.media_type.clone(),
        }));
    }
    let size = u64::try_from(layer.size)
        .map_err(|_| bad(ArtifactProblem::NegativeSize { size: layer.size }))?;
    if let Some(s) = m.annotations.as_ref().and_then(|a| a.get(ANN_SIZE)) {
        if s.parse::<u64>().ok() != Some(size) {
            return Err(bad(ArtifactProblem::SizeAnnotation {
                annotation: s.clone(),
                descriptor: size,
            }));
        }
    }
    if c.modelfs.diff_ids.len() != 1 || c.modelfs.diff_ids[0] != layer.digest {
        return Err(bad(ArtifactProblem::DiffIds {
            found: c.modelfs.diff_ids.clone(),
            layer: layer.digest.clone(),
        }));
    }
    let footer_digest = ann
        .get(ANN_DIGEST)
        .or_else(|| m.annotations.as_ref().and_then(|a| a.get(ANN_DIGEST)))
        .cloned();
    Ok(Single {
        layer,
        size,
        file_name,
        format,
        footer_digest,
    })
}

/// One path component that names a file in the model directory: not empty,
/// no `/` or `\`, not `.` or `..` (nor containing `..`), no NUL or other
/// control characters.
pub fn is_plain_file_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.contains(['/', '\\'])
        && !s.contains("..")
        && s != "."
        && !s.chars().any(|c| c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_sizes_read_as_the_spec_writes_them() {
        assert_eq!(param_size(134_515_008), "134.5m");
        assert_eq!(param_size(8_000_000_000), "8b");
        assert_eq!(param_size(1_711_376_384), "1.7b");
        assert_eq!(param_size(999), "999");
    }

    #[test]
    fn file_names_are_one_plain_component() {
        for ok in ["model.gpack", "m.gguf", "a b"] {
            assert!(is_plain_file_name(ok), "{ok}");
        }
        for bad in [
            "",
            "../x",
            "a/b",
            "..",
            ".",
            "/etc/passwd",
            "a\\b",
            "x..y",
            "a\0b",
        ] {
            assert!(!is_plain_file_name(bad), "{bad}");
        }
    }
}
