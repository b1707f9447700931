//! `gpack push`: one layer per section, each uploaded only when the
//! registry lacks it. For each distinct digest: `HEAD` (the repository has
//! it: skipped), else a cross-repository mount from a repository of the
//! same registry known to hold it (`--mount-from`, and every repository the
//! store saw it in), else one streamed monolithic upload (`POST`, then one
//! `PUT` of the section's bytes, read from the file in 1 MiB chunks). The
//! registry checks each upload against its digest, the section's SHA-256.
//! Then the config blob and the manifest.

use crate::artifact;
use crate::error::{io, ArtifactProblem, Document, Error, Operation, Result};
use crate::progress::Progress;
use crate::registry::Registry;
use crate::store::Store;
use futures_util::StreamExt;
use oci_client::manifest::{OciImageManifest, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE};
use oci_client::Reference;
use serde::Serialize;
use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// How to push.
#[derive(Debug, Clone, Default)]
pub struct PushOptions {
    /// Repositories of the same registry to mount blobs from.
    pub mount_from: Vec<String>,
    /// Layers uploaded at once (0: 4).
    pub jobs: usize,
    /// A .gpack as one layer per section (gpack's own layout, which shares
    /// identical sections between variants) instead of the default CNCF
    /// ModelPack artifact with the whole file as one layer.
    pub per_section: bool,
    /// Also push the runnable image variant ([`crate::image`]: an image
    /// index whose images hold `/model.gpack` in one uncompressed tar
    /// layer) under this reference (a .gpack only).
    pub image: Option<Reference>,
}

/// The image variant pushed (`gpack push --image`).
#[derive(Debug, Clone, Serialize)]
pub struct PushedImage {
    /// Its reference (the tag points at the index).
    pub reference: String,
    /// Digest of the image index.
    pub index_digest: String,
    /// The tar layer's digest (also each config's `rootfs.diff_ids[0]`:
    /// it is uncompressed).
    pub layer_digest: String,
    /// The tar layer's size.
    pub layer_size: u64,
    /// Per platform (`linux/amd64`, …): its manifest's digest.
    pub manifests: Vec<PushedPlatform>,
}

/// One platform's image manifest.
#[derive(Debug, Clone, Serialize)]
pub struct PushedPlatform {
    /// `os/architecture[/variant]`.
    pub platform: String,
    /// The manifest's digest.
    pub digest: String,
}

/// What happened to one layer.
#[derive(Debug, Clone, Serialize)]
pub struct PushedLayer {
    /// Section name (`gguf` for a GGUF artifact, `config` for the config).
    pub section: String,
    /// Digest.
    pub digest: String,
    /// Size.
    pub size: u64,
    /// `uploaded`, `exists` (the registry had it) or `mounted` (from `from`).
    pub status: &'static str,
    /// The repository it was mounted from.
    pub from: Option<String>,
}

/// The result of a push (`gpack push --json`, schema `gpack.push.v1`).
#[derive(Debug, Clone, Serialize)]
pub struct PushReport {
    /// The reference pushed.
    pub reference: String,
    /// Digest of the manifest (pull by `REPO@DIGEST`).
    pub manifest_digest: String,
    /// `gpack` or `gguf`.
    pub kind: &'static str,
    /// `modelpack` (one layer, the whole file), `sections` (one layer per
    /// section) or `docker` (a GGUF).
    pub layout: &'static str,
    /// The file's digest (a .gpack's footer; a GGUF's SHA-256).
    pub digest: String,
    /// Every blob.
    pub layers: Vec<PushedLayer>,
    /// Bytes sent.
    pub uploaded: u64,
    /// Blobs sent (each one PUT).
    pub uploaded_blobs: usize,
    /// Wall time.
    pub seconds: f64,
    /// The image variant, when asked for (its blobs are in `layers` too,
    /// their `section` starting with `image `).
    pub image: Option<PushedImage>,
}

/// A blob to publish: a byte range of a file (or bytes in memory).
struct Blob {
    section: String,
    digest: String,
    size: u64,
    src: Source,
}

enum Source {
    File {
        path: PathBuf,
        offset: u64,
    },
    Memory(Vec<u8>),
    /// The whole file inside a tar stream: `header`, the file, `trailer`.
    Tar {
        path: PathBuf,
        header: Vec<u8>,
        trailer: Vec<u8>,
    },
}

/// Pushes the .gpack or GGUF `file` to `r`.
pub fn push(
    reg: &Registry,
    store: &Store,
    file: &Path,
    r: &Reference,
    opts: &PushOptions,
    progress: Arc<dyn Progress>,
) -> Result<PushReport> {
    let start = Instant::now();
    let is_gguf = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if opts.image.is_some() && is_gguf {
        return Err(Error::ImageOfGguf {
            path: file.to_path_buf(),
        });
    }
    // The image variant's tar and its digest, hashed in the same pass as
    // the file's own SHA-256 (read once).
    let tarred = match &opts.image {
        Some(_) => {
            let size = std::fs::metadata(file).map_err(io("stat", file))?.len();
            let tar = crate::image::tar_layer(file, size)?;
            let (file_sha, tar_sha) = hash_file_in_tar(file, &tar)?;
            Some((tar, file_sha, tar_sha))
        }
        None => None,
    };
    let (kind, layout, digest, config, manifest, mut blobs) = if is_gguf {
        let size = std::fs::metadata(file).map_err(io("stat", file))?.len();
        let sha = hash_file(file)?;
        let digest = format!("sha256:{sha}");
        let (config, m) = crate::docker::describe_gguf(file, size, &digest)?;
        let blobs = vec![Blob {
            section: "gguf".into(),
            digest: digest.clone(),
            size,
            src: Source::File {
                path: file.to_path_buf(),
                offset: 0,
            },
        }];
        ("gguf", "docker", digest, config, m, blobs)
    } else if !opts.per_section {
        let g = gpack_format::Gpack::open(file)?;
        let size = g.bytes().len() as u64;
        let sha = match &tarred {
            Some((_, file_sha, _)) => format!("sha256:{file_sha}"),
            None => format!("sha256:{}", hash_file(file)?),
        };
        let (config, m) = crate::modelpack::describe(&g, &sha)?;
        let blobs = vec![Blob {
            section: crate::media::MODELPACK_FILE.into(),
            digest: sha,
            size,
            src: Source::File {
                path: file.to_path_buf(),
                offset: 0,
            },
        }];
        (
            "gpack",
            "modelpack",
            artifact::oci_digest(&g.layout().digest()),
            config,
            m,
            blobs,
        )
    } else {
        let g = gpack_format::Gpack::open(file)?;
        let (config, m) = artifact::describe(&g)?;
        let blobs = g
            .layout()
            .sections
            .iter()
            .map(|s| Blob {
                section: s.name.clone(),
                digest: artifact::oci_digest(&s.sha256),
                size: s.size,
                src: Source::File {
                    path: file.to_path_buf(),
                    offset: s.offset,
                },
            })
            .collect();
        (
            "gpack",
            "sections",
            artifact::oci_digest(&g.layout().digest()),
            config,
            m,
            blobs,
        )
    };
    blobs.push(Blob {
        section: "config".into(),
        digest: manifest.config.digest.clone(),
        size: config.len() as u64,
        src: Source::Memory(config),
    });
    let image = match (&tarred, &opts.image) {
        (Some((tar, _, tar_sha)), Some(at)) => {
            let g = gpack_format::Gpack::open(file)?;
            let name = g.manifest().name.clone();
            let tar_digest = format!("sha256:{tar_sha}");
            let docs = crate::image::describe(&tar_digest, tar.size, &name, &digest)?;
            let mut blobs = vec![Blob {
                section: "image layer".into(),
                digest: tar_digest.clone(),
                size: tar.size,
                src: Source::Tar {
                    path: file.to_path_buf(),
                    header: tar.header.clone(),
                    trailer: tar.trailer.clone(),
                },
            }];
            for i in &docs.images {
                let config = i.config.clone();
                blobs.push(Blob {
                    section: format!("image config {}", i.platform),
                    digest: format!("sha256:{}", artifact::sha256_hex(&config)),
                    size: config.len() as u64,
                    src: Source::Memory(config),
                });
            }
            Some((at, tar_digest, tar.size, docs, blobs))
        }
        _ => None,
    };
    let mut layers = upload_all(reg, store, r, opts, blobs, progress.clone())?;
    let manifest_digest = push_manifest(reg, r, &manifest)?;
    store.note_known(
        reg.host(),
        r.repository(),
        layers.iter().map(|l| l.digest.as_str()),
    )?;
    // The image's blobs go to its own repository (a manifest may reference
    // only blobs of its repository), then its manifests and index.
    let image = match image {
        Some((at, layer_digest, layer_size, docs, blobs)) => {
            let pushed = upload_all(reg, store, at, opts, blobs, progress)?;
            store.note_known(
                reg.host(),
                at.repository(),
                pushed.iter().map(|l| l.digest.as_str()),
            )?;
            layers.extend(pushed);
            let mut manifests = Vec::new();
            for i in &docs.images {
                let by_digest = Reference::with_digest(
                    at.registry().to_string(),
                    at.repository().to_string(),
                    i.manifest_digest.clone(),
                );
                push_manifest_bytes(reg, &by_digest, i.manifest.clone(), OCI_IMAGE_MEDIA_TYPE)?;
                manifests.push(PushedPlatform {
                    platform: i.platform.clone(),
                    digest: i.manifest_digest.clone(),
                });
            }
            let index_digest =
                push_manifest_bytes(reg, at, docs.index.clone(), OCI_IMAGE_INDEX_MEDIA_TYPE)?;
            Some(PushedImage {
                reference: at.whole(),
                index_digest,
                layer_digest,
                layer_size,
                manifests,
            })
        }
        None => None,
    };
    let sent: Vec<&PushedLayer> = layers.iter().filter(|l| l.status == "uploaded").collect();
    Ok(PushReport {
        reference: r.whole(),
        manifest_digest,
        kind,
        layout,
        digest,
        uploaded: sent.iter().map(|l| l.size).sum(),
        uploaded_blobs: sent.len(),
        layers,
        seconds: start.elapsed().as_secs_f64(),
        image,
    })
}

fn push_manifest(reg: &Registry, r: &Reference, m: &OciImageManifest) -> Result<String> {
    let body = serde_json::to_vec(m).map_err(|e| Error::BadArtifact {
        what: Document::PushedManifest,
        problem: ArtifactProblem::Serialize(e),
    })?;
    push_manifest_bytes(reg, r, body, OCI_IMAGE_MEDIA_TYPE)
}

/// PUTs the manifest (or index) `body` of media type `ct` at `r`: its
/// digest.
fn push_manifest_bytes(
    reg: &Registry,
    r: &Reference,
    body: Vec<u8>,
    ct: &'static str,
) -> Result<String> {
    let digest = format!("sha256:{}", artifact::sha256_hex(&body));
    let ct = http::HeaderValue::from_static(ct);
    reg.rt
        .block_on(reg.client.push_manifest_raw(r, body, ct))
        .map_err(|e| {
            reg.err(
                Operation::PushManifest {
                    reference: r.whole(),
                },
                e,
            )
        })?;
    Ok(digest)
}

fn hash_file(p: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(p).map_err(io("open", p))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io("read", p))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// The SHA-256 of `p` and of the tar stream `tar` makes around it, in one
/// read of the file: (file hex, tar hex).
fn hash_file_in_tar(p: &Path, tar: &crate::image::TarLayer) -> Result<(String, String)> {
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(p).map_err(io("open", p))?;
    let (mut file, mut whole) = (Sha256::new(), Sha256::new());
    whole.update(&tar.header);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io("read", p))?;
        if n == 0 {
            break;
        }
        file.update(&buf[..n]);
        whole.update(&buf[..n]);
    }
    whole.update(&tar.trailer);
    Ok((hex::encode(file.finalize()), hex::encode(whole.finalize())))
}

/// Upload chunk size.
const CHUNK: usize = 1 << 20;

fn upload_all(
    reg: &Registry,
    store: &Store,
    r: &Reference,
    opts: &PushOptions,
    blobs: Vec<Blob>,
    progress: Arc<dyn Progress>,
) -> Result<Vec<PushedLayer>> {
    let known = store.known(reg.host());
    let total: u64 = blobs.iter().map(|b| b.size).sum();
    progress.total(total, 0);
    let mut seen = BTreeSet::new();
    let jobs = if opts.jobs == 0 { 4 } else { opts.jobs };
    let mut tasks = Vec::new();
    let mut out = Vec::new();
    for b in blobs {
        if !seen.insert(b.digest.clone()) {
            continue; // two empty sections share one blob
        }
        let mut from: Vec<String> = opts.mount_from.clone();
        if let Some(repos) = known.get(&b.digest) {
            from.extend(repos.iter().filter(|x| *x != r.repository()).cloned());
        }
        tasks.push((b, from));
    }
    let client = &reg.client;
    let futs = tasks.into_iter().map(|(b, from)| {
        let progress = progress.clone();
        async move {
            let what = Operation::Upload {
                section: b.section.clone(),
                digest: b.digest.clone(),
            };
            let exists = client
                .blob_exists(r, &b.digest)
                .await
                .map_err(|e| (what.clone(), e))?;
            let mut status = "exists";
            let mut mounted = None;
            if !exists {
                for repo in &from {
                    let Ok(src) = Reference::try_from(format!("{}/{repo}", r.registry())) else {
                        continue;
                    };
                    if client.mount_blob(r, &src, &b.digest).await.is_ok()
                        && client.blob_exists(r, &b.digest).await.unwrap_or(false)
                    {
                        status = "mounted";
                        mounted = Some(repo.clone());
                        break;
                    }
                }
            }
            if !exists && mounted.is_none() {
                status = "uploaded";
                progress.begin(&b.digest, &b.section, b.size, 0);
                match &b.src {
                    Source::Memory(v) => {
                        client
                            .push_blob(r, v.clone(), &b.digest)
                            .await
                            .map_err(|e| (what.clone(), e))?;
                        progress.advance(&b.digest, b.size);
                    }
                    Source::File { path, offset } => {
                        let stream = file_stream(
                            path.clone(),
                            *offset,
                            b.size,
                            progress.clone(),
                            b.digest.clone(),
                        );
                        client
                            .push_blob_stream(r, stream, &b.digest, Some(b.size))
                            .await
                            .map_err(|e| (what.clone(), e))?;
                    }
                    Source::Tar {
                        path,
                        header,
                        trailer,
                    } => {
                        let file_size = b.size - (header.len() + trailer.len()) as u64;
                        let ends = header.len() as u64 + trailer.len() as u64;
                        let head =
                            futures_util::stream::iter([Ok(bytes::Bytes::from(header.clone()))]);
                        let tail =
                            futures_util::stream::iter([Ok(bytes::Bytes::from(trailer.clone()))]);
                        let body = file_stream(
                            path.clone(),
                            0,
                            file_size,
                            progress.clone(),
                            b.digest.clone(),
                        );
                        progress.advance(&b.digest, ends);
                        client
                            .push_blob_stream(
                                r,
                                head.chain(body).chain(tail),
                                &b.digest,
                                Some(b.size),
                            )
                            .await
                            .map_err(|e| (what.clone(), e))?;
                    }
                }
                progress.end(&b.digest);
            }
            Ok::<PushedLayer, (Operation, oci_client::errors::OciDistributionError)>(PushedLayer {
                section: b.section,
                digest: b.digest,
                size: b.size,
                status,
                from: mounted,
            })
        }
    });
    let results: Vec<_> = reg.rt.block_on(
        futures_util::stream::iter(futs)
            .buffered(jobs)
            .collect::<Vec<_>>(),
    );
    for res in results {
        match res {
            Ok(l) => out.push(l),
            Err((what, e)) => return Err(reg.err(what, e)),
        }
    }
    Ok(out)
}

/// `size` bytes of `path` from `offset`, as a stream of 1 MiB chunks.
fn file_stream(
    path: PathBuf,
    offset: u64,
    size: u64,
    progress: Arc<dyn Progress>,
    id: String,
) -> impl futures_util::Stream<Item = oci_client::errors::Result<bytes::Bytes>> + Send + 'static {
    let state = (None::<std::fs::File>, size);
    futures_util::stream::unfold(state, move |(f, left)| {
        let path = path.clone();
        let progress = progress.clone();
        let id = id.clone();
        async move {
            if left == 0 {
                return None;
            }
            let mut f = match f {
                Some(f) => f,
                None => match std::fs::File::open(&path)
                    .and_then(|mut f| f.seek(SeekFrom::Start(offset)).map(|_| f))
                {
                    Ok(f) => f,
                    Err(e) => return Some((Err(e.into()), (None, 0))),
                },
            };
            let n = (left as usize).min(CHUNK);
            let mut buf = vec![0u8; n];
            if let Err(e) = f.read_exact(&mut buf) {
                return Some((Err(e.into()), (None, 0)));
            }
            progress.advance(&id, n as u64);
            Some((Ok(bytes::Bytes::from(buf)), (Some(f), left - n as u64)))
        }
    })
}
