//! The runnable image variant of a model (`gpack push --image`): for
//! runtimes that mount only container images (containerd's image volumes),
//! the .gpack as an ordinary OCI image whose root file system holds one
//! file, `/model.gpack`.
//!
//! * one layer, `application/vnd.oci.image.layer.v1.tar`, uncompressed (so
//!   the file's bytes are stored once, and a runtime that unpacks it copies
//!   them without inflating anything): a tar whose only member is the
//!   regular file `model.gpack` (mode 0644, owner 0:0, mtime 0), a GNU
//!   header so that files beyond ustar's 8 GiB keep their size;
//! * per platform (`linux/amd64`, `linux/arm64`: the file runs on both), an
//!   image config (`application/vnd.oci.image.config.v1+json`) whose
//!   `rootfs.diff_ids` is the tar's plain SHA-256 (uncompressed: the layer
//!   digest itself) and an image manifest referencing it and the shared
//!   layer;
//! * an image index over those manifests, which the tag points at.
//!
//! The bytes are deterministic: the same .gpack gives the same digests on
//! every machine.

use crate::error::{ArtifactProblem, Document, Error, Result};
use crate::media::{ANN_DIGEST, ANN_TITLE, MODELPACK_FILE};
use oci_client::manifest::{
    OciDescriptor, OciImageManifest, IMAGE_CONFIG_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// Media type of the image's one layer (an uncompressed tar).
pub const IMAGE_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";

/// The platforms the index lists (os, architecture, variant).
pub const PLATFORMS: [(&str, &str, Option<&str>); 2] =
    [("linux", "amd64", None), ("linux", "arm64", Some("v8"))];

/// The tar stream around the file: `header`, then the file's bytes, then
/// `trailer` (padding to 512 bytes and the two zero end blocks).
#[derive(Debug, Clone)]
pub struct TarLayer {
    /// The member's 512-byte header.
    pub header: Vec<u8>,
    /// Zero padding after the file, then two zero blocks.
    pub trailer: Vec<u8>,
    /// The whole tar's size.
    pub size: u64,
}

/// The tar layer holding the file `path` of `file_size` bytes as
/// `model.gpack`.
pub fn tar_layer(path: &std::path::Path, file_size: u64) -> Result<TarLayer> {
    let mut h = tar::Header::new_gnu();
    h.set_path(MODELPACK_FILE)
        .map_err(crate::error::io("make a tar header for", path))?;
    h.set_size(file_size);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    let pad = (512 - file_size % 512) % 512;
    let trailer = vec![0u8; pad as usize + 1024];
    let size = file_size
        .checked_add(512 + trailer.len() as u64)
        .ok_or_else(|| {
            crate::error::io("make a tar header for", path)(std::io::Error::other(
                "the file is too large",
            ))
        })?;
    Ok(TarLayer {
        header: h.as_bytes().to_vec(),
        trailer,
        size,
    })
}

/// An image config: the fields the OCI image spec requires (and
/// containerd reads), in a fixed order.
#[derive(Serialize)]
struct ImageConfig<'a> {
    architecture: &'a str,
    os: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    variant: Option<&'a str>,
    config: RunConfig,
    rootfs: RootFs<'a>,
    history: [History<'a>; 1],
}

#[derive(Serialize)]
struct RunConfig {
    #[serde(rename = "Labels")]
    labels: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct RootFs<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    diff_ids: [&'a str; 1],
}

/// An image index (its entries' platform as the image spec writes it).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Index<'a> {
    schema_version: u8,
    media_type: &'a str,
    manifests: Vec<IndexEntry<'a>>,
    annotations: BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IndexEntry<'a> {
    media_type: &'a str,
    digest: String,
    size: u64,
    platform: PlatformDoc<'a>,
}

#[derive(Serialize)]
struct PlatformDoc<'a> {
    architecture: &'a str,
    os: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    variant: Option<&'a str>,
}

#[derive(Serialize)]
struct History<'a> {
    created_by: &'a str,
    comment: &'a str,
}

/// One platform's config blob and manifest.
#[derive(Debug, Clone)]
pub struct PlatformImage {
    /// `os/architecture[/variant]`.
    pub platform: String,
    /// The config blob.
    pub config: Vec<u8>,
    /// Its manifest's bytes (pushed as they are: the index names their
    /// digest).
    pub manifest: Vec<u8>,
    /// `sha256:` of `manifest`.
    pub manifest_digest: String,
}

/// The documents of the image variant.
#[derive(Debug, Clone)]
pub struct Image {
    /// One per platform.
    pub images: Vec<PlatformImage>,
    /// The index's bytes (what the tag points at).
    pub index: Vec<u8>,
    /// `sha256:` of `index`.
    pub index_digest: String,
}

fn to_json(v: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::BadArtifact {
        what: Document::PushedManifest,
        problem: ArtifactProblem::Serialize(e),
    })
}

fn digest_of(b: &[u8]) -> String {
    format!("sha256:{}", crate::artifact::sha256_hex(b))
}

/// The configs, manifests and index of the image whose one layer is the
/// tar with digest `tar_digest` (`sha256:…`) and size `tar_size`, for the
/// model `name` whose footer digest is `footer`.
pub fn describe(tar_digest: &str, tar_size: u64, name: &str, footer: &str) -> Result<Image> {
    let labels = BTreeMap::from([
        (ANN_TITLE.to_string(), name.to_string()),
        (ANN_DIGEST.to_string(), footer.to_string()),
    ]);
    let mut images = Vec::new();
    let mut entries = Vec::new();
    for (os, arch, variant) in PLATFORMS {
        let config = to_json(&ImageConfig {
            architecture: arch,
            os,
            variant,
            config: RunConfig {
                labels: labels.clone(),
            },
            rootfs: RootFs {
                kind: "layers",
                diff_ids: [tar_digest],
            },
            history: [History {
                created_by: "gpack push --image",
                comment: "/model.gpack",
            }],
        })?;
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(OCI_IMAGE_MEDIA_TYPE.into()),
            config: OciDescriptor {
                media_type: IMAGE_CONFIG_MEDIA_TYPE.into(),
                digest: digest_of(&config),
                size: config.len() as i64,
                urls: None,
                annotations: None,
                artifact_type: None,
            },
            layers: vec![OciDescriptor {
                media_type: IMAGE_LAYER_TAR.into(),
                digest: tar_digest.into(),
                size: tar_size as i64,
                urls: None,
                annotations: None,
                artifact_type: None,
            }],
            subject: None,
            artifact_type: None,
            annotations: Some(labels.clone()),
        };
        let manifest = to_json(&manifest)?;
        let manifest_digest = digest_of(&manifest);
        entries.push(IndexEntry {
            media_type: OCI_IMAGE_MEDIA_TYPE,
            digest: manifest_digest.clone(),
            size: manifest.len() as u64,
            platform: PlatformDoc {
                architecture: arch,
                os,
                variant,
            },
        });
        images.push(PlatformImage {
            platform: match variant {
                Some(v) => format!("{os}/{arch}/{v}"),
                None => format!("{os}/{arch}"),
            },
            config,
            manifest,
            manifest_digest,
        });
    }
    let index = to_json(&Index {
        schema_version: 2,
        media_type: OCI_IMAGE_INDEX_MEDIA_TYPE,
        manifests: entries,
        annotations: labels,
    })?;
    Ok(Image {
        index_digest: digest_of(&index),
        images,
        index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tar stream is a valid archive whose one member is the file:
    /// read back by the tar crate's reader, sizes on 512-byte boundaries.
    #[test]
    fn the_tar_layer_holds_one_regular_file() {
        for len in [0usize, 1, 511, 512, 513, 4096 + 7] {
            let body: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let t = tar_layer(std::path::Path::new("x"), len as u64).unwrap();
            let mut all = t.header.clone();
            all.extend_from_slice(&body);
            all.extend_from_slice(&t.trailer);
            assert_eq!(all.len() as u64, t.size);
            assert_eq!(all.len() % 512, 0);
            let mut a = tar::Archive::new(&all[..]);
            let mut n = 0;
            for e in a.entries().unwrap() {
                let mut e = e.unwrap();
                assert_eq!(e.path().unwrap().to_str(), Some("model.gpack"));
                assert_eq!(e.header().entry_type(), tar::EntryType::Regular);
                let mut got = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut got).unwrap();
                assert_eq!(got, body);
                n += 1;
            }
            assert_eq!(n, 1);
        }
    }
}
