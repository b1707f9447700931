//! Docker model artifacts (Docker Model Runner, `docker model push`): an OCI
//! image manifest whose config is `application/vnd.docker.ai.model.config.v0.1+json`
//! and whose weights are one GGUF layer, `application/vnd.docker.ai.gguf.v3`
//! (docker/model-distribution `types/config.go`; the older
//! `application/vnd.docker.ai.model.file.v1+gguf` and the CNCF ModelPack
//! `application/vnd.cncf.model.weight.v1.gguf` are accepted too). A pull
//! downloads the GGUF into the store like any layer and converts it on
//! arrival; `gpack push M.gguf REF` publishes a GGUF in the same layout.

use crate::error::{io, ArtifactProblem, Document, Error, Result};
use crate::pull::PullOptions;
use crate::store::Store;
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use std::path::{Path, PathBuf};

pub use crate::media::{
    DOCKER_CONFIG_MEDIA_TYPE as CONFIG_MEDIA_TYPE, DOCKER_GGUF_MEDIA_TYPE as GGUF_MEDIA_TYPE,
};

/// Config media types accepted on pull.
const CONFIG_TYPES: &[&str] = &[
    CONFIG_MEDIA_TYPE,
    "application/vnd.docker.ai.model.config.v1+json",
    "application/vnd.cncf.model.config.v1+json",
];
/// GGUF layer media types accepted on pull.
const GGUF_TYPES: &[&str] = &[
    GGUF_MEDIA_TYPE,
    "application/vnd.docker.ai.model.file.v1+gguf",
    "application/vnd.cncf.model.weight.v1.gguf",
];

/// Whether a config media type marks a model artifact of Docker or ModelPack.
pub fn is_model_config(media_type: &str) -> bool {
    CONFIG_TYPES.contains(&media_type)
}

/// Whether a layer media type is one of the GGUF ones accepted on pull.
pub fn is_gguf_media_type(media_type: &str) -> bool {
    GGUF_TYPES.contains(&media_type)
}

/// The one GGUF layer of a model artifact.
pub fn gguf_layer(shown: &str, m: &OciImageManifest) -> Result<OciDescriptor> {
    let ggufs: Vec<&OciDescriptor> = m
        .layers
        .iter()
        .filter(|l| GGUF_TYPES.contains(&l.media_type.as_str()))
        .collect();
    match ggufs.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Error::BadArtifact {
            what: Document::ModelArtifact {
                reference: shown.to_string(),
            },
            problem: ArtifactProblem::NoGguf,
        }),
        many => Err(Error::BadArtifact {
            what: Document::ModelArtifact {
                reference: shown.to_string(),
            },
            problem: ArtifactProblem::SplitGguf { count: many.len() },
        }),
    }
}

/// Converts the GGUF blob `gguf` (verified, in the store) into the store's
/// model file, and to `opts.output` when given. Returns the output, its
/// size and its digest.
pub fn convert_on_arrival(
    store: &Store,
    gguf: &Path,
    digest: &str,
    opts: &PullOptions,
) -> Result<(PathBuf, u64, String)> {
    // convert recognises a GGUF by its name: give the blob one, a hard link
    // (no copy) next to the blobs.
    let hexd = digest.trim_start_matches("sha256:");
    let dir = store.root().join("oci/gguf");
    Store::mkdir(&dir)?;
    let named = dir.join(format!("{hexd}.gguf"));
    if !named.is_file() {
        std::fs::hard_link(gguf, &named)
            .or_else(|_| std::fs::copy(gguf, &named).map(|_| ()))
            .map_err(io("link", &named))?;
    }
    let tmp_out = match &opts.output {
        Some(o) => o.clone(),
        None => store
            .root()
            .join("oci/models")
            .join(format!("gguf-{hexd}.gpack")),
    };
    if let Some(d) = tmp_out.parent().filter(|d| !d.as_os_str().is_empty()) {
        Store::mkdir(d)?;
    }
    let Some(convert) = &opts.convert else {
        let _ = std::fs::remove_file(&named);
        return Err(Error::NoConverter);
    };
    let (size, hex_digest) = (convert.0)(&named, &tmp_out, opts.force || opts.output.is_none())
        .map_err(Error::Convert)?;
    let fdigest = format!("sha256:{hex_digest}");
    // The store keeps the converted file under its own digest, for `run REF`.
    let model = store.model_path(&fdigest)?;
    if opts.output.is_none() {
        std::fs::rename(&tmp_out, &model).map_err(io("rename", &model))?;
        let _ = std::fs::remove_file(&named);
        return Ok((model, size, fdigest));
    }
    let _ = std::fs::remove_file(&named);
    Ok((tmp_out, size, fdigest))
}

/// The config and manifest of a Docker model artifact holding the GGUF
/// `gguf` of `size` bytes and digest `digest`.
pub fn describe_gguf(gguf: &Path, size: u64, digest: &str) -> Result<(Vec<u8>, OciImageManifest)> {
    let _ = gguf;
    let config = serde_json::json!({
        "config": {"format": "gguf", "size": size.to_string()},
        "files": [{"diffID": digest, "type": GGUF_MEDIA_TYPE}],
    });
    let config = serde_json::to_vec(&config).map_err(|e| Error::BadArtifact {
        what: Document::DockerModelConfig,
        problem: ArtifactProblem::Serialize(e),
    })?;
    let m = OciImageManifest {
        schema_version: 2,
        media_type: Some(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.to_string()),
        config: OciDescriptor {
            media_type: CONFIG_MEDIA_TYPE.into(),
            digest: format!("sha256:{}", crate::artifact::sha256_hex(&config)),
            size: config.len() as i64,
            ..Default::default()
        },
        layers: vec![OciDescriptor {
            media_type: GGUF_MEDIA_TYPE.into(),
            digest: digest.to_string(),
            size: size as i64,
            ..Default::default()
        }],
        subject: None,
        artifact_type: None,
        annotations: None,
    };
    Ok((config, m))
}
