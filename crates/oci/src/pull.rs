//! `gpack pull`: the manifest, then the config, then every layer not yet in
//! the store, several at once, each streamed through SHA-256 into
//! `blobs/partial/<hex>` and renamed into `blobs/sha256/<hex>` only when its
//! digest matched (a mismatch deletes the partial blob and names the
//! section). An interrupted pull leaves its partial blobs; the next pull
//! hashes what is there and asks for the rest with a ranged GET. The file is
//! then assembled from the store like convert writes its output (a locked
//! temporary file, fsynced, quick-verified, renamed into place), and its
//! footer digest is compared with the manifest's annotation before the
//! rename. A Docker model artifact (one GGUF layer) is converted on arrival.

use crate::artifact::{self, Plan};
use crate::docker;
use crate::error::{io, ArtifactProblem, Document, Error, Operation, Result};
use crate::modelpack::WeightFormat;
use crate::progress::Progress;
use crate::registry::Registry;
use crate::store::{RefEntry, Store};
use futures_util::StreamExt;
use gpack_format::raw::FOOTER_SIZE;
use oci_client::client::BlobResponse;
use oci_client::manifest::{OciDescriptor, OciImageManifest, OCI_IMAGE_MEDIA_TYPE};
use oci_client::Reference;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Why a conversion failed (the converter's own error).
pub type ConvertError = Box<dyn std::error::Error + Send + Sync>;

/// The converter's signature: GGUF in, .gpack out, replace; size and
/// footer digest back.
pub type ConvertFn =
    dyn Fn(&Path, &Path, bool) -> Result<(u64, String), ConvertError> + Send + Sync;

/// Turns a Docker model artifact's GGUF into a .gpack: called with the GGUF
/// (a path ending in `.gguf`), the .gpack to write and whether to replace
/// it; returns the written file's size and its footer digest (hex). The
/// registry crate converts nothing itself: the CLI passes gpack-convert's.
#[derive(Clone)]
pub struct ConvertGguf(pub std::sync::Arc<ConvertFn>);

impl std::fmt::Debug for ConvertGguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConvertGguf")
    }
}

/// How to pull.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Where to write the .gpack (`None`: only the store's copy, for `run`).
    pub output: Option<PathBuf>,
    /// Replace an existing output.
    pub force: bool,
    /// Layers downloaded at once.
    pub jobs: usize,
    /// Cap on the download rate, bytes per second, all layers together.
    pub limit_rate: Option<u64>,
    /// How a Docker GGUF model artifact is converted on arrival (`None`:
    /// such an artifact is refused, [`crate::Error::NoConverter`]).
    pub convert: Option<ConvertGguf>,
    /// Bytes per `Range` request of a single-layer (ModelPack) pull (0:
    /// 16 MiB).
    pub range_size: u64,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            output: None,
            force: false,
            jobs: 4,
            limit_rate: None,
            convert: None,
            range_size: 0,
        }
    }
}

/// What happened to one layer.
#[derive(Debug, Clone, Serialize)]
pub struct LayerReport {
    /// Section name (`gguf` for a Docker model's weights).
    pub section: String,
    /// Layer digest.
    pub digest: String,
    /// Size.
    pub size: u64,
    /// `downloaded`, `resumed` (a partial blob continued) or `cached` (in the store).
    pub status: &'static str,
    /// Bytes fetched from the registry for it.
    pub downloaded: u64,
    /// Where a resumed download started.
    pub resumed_from: u64,
}

/// The result of a pull (`gpack pull --json`, schema `gpack.pull.v1`).
#[derive(Debug, Clone, Serialize)]
pub struct PullReport {
    /// The reference.
    pub reference: String,
    /// OCI manifest digest.
    pub manifest_digest: String,
    /// `gpack`, or `gguf` (converted on arrival).
    pub kind: &'static str,
    /// The .gpack written (`-o`), or the store's copy.
    pub output: PathBuf,
    /// Its size.
    pub size: u64,
    /// Its digest (footer).
    pub digest: String,
    /// Every layer.
    pub layers: Vec<LayerReport>,
    /// Bytes fetched from the registry (layers and config).
    pub downloaded: u64,
    /// Wall time.
    pub seconds: f64,
}

/// Media types a pull accepts for the manifest.
const ACCEPT: &[&str] = &[OCI_IMAGE_MEDIA_TYPE];

/// Pulls `r` into the store (and to `opts.output`).
pub fn pull(
    reg: &Registry,
    store: &Store,
    r: &Reference,
    opts: &PullOptions,
    progress: Arc<dyn Progress>,
) -> Result<PullReport> {
    let start = Instant::now();
    let shown = r.whole();
    let (body, manifest_digest) = reg
        .rt
        .block_on(reg.client.pull_manifest_raw(r, &reg.auth, ACCEPT))
        .map_err(|e| {
            reg.err(
                Operation::FetchManifest {
                    reference: shown.clone(),
                },
                e,
            )
        })?;
    if body.len() > artifact::MAX_MANIFEST_BYTES {
        return Err(Error::BadArtifact {
            what: Document::Manifest {
                reference: shown.clone(),
            },
            problem: ArtifactProblem::TooLarge {
                size: body.len(),
                max: artifact::MAX_MANIFEST_BYTES,
            },
        });
    }
    let manifest: OciImageManifest =
        serde_json::from_slice(&body).map_err(|e| Error::BadArtifact {
            what: Document::Manifest {
                reference: shown.clone(),
            },
            problem: ArtifactProblem::NotManifest(e),
        })?;
    let fetched = Arc::new(AtomicU64::new(0));
    let is_modelpack = crate::modelpack::is_modelpack(&manifest);
    let is_docker = !is_modelpack && docker::is_model_config(&manifest.config.media_type);
    if manifest.config.media_type != artifact::CONFIG_MEDIA_TYPE && !is_docker && !is_modelpack {
        return Err(Error::BadArtifact {
            what: Document::Manifest {
                reference: shown.clone(),
            },
            problem: ArtifactProblem::ConfigMediaType {
                found: manifest.config.media_type.clone(),
            },
        });
    }
    let config = fetch_small(
        reg,
        r,
        &manifest.config,
        artifact::MAX_CONFIG_BYTES,
        &fetched,
    )?;
    let ctx = Ctx {
        reg,
        store,
        r,
        opts,
        progress,
        fetched: fetched.clone(),
        start,
    };
    let single = if is_modelpack {
        Some(crate::modelpack::check(&shown, &manifest, &config)?)
    } else {
        None
    };
    let mut report = if let Some(one) = single.as_ref().filter(|o| o.format == WeightFormat::Gpack)
    {
        let p = crate::ranged::pull(crate::ranged::Request {
            reg,
            r,
            shown: &shown,
            layer: &one.layer,
            size: one.size,
            footer_annotation: one.footer_digest.as_deref(),
            output: opts.output.clone(),
            store,
            replace: opts.force || opts.output.is_none(),
            jobs: opts.jobs,
            range_size: if opts.range_size == 0 {
                crate::ranged::DEFAULT_RANGE_SIZE
            } else {
                opts.range_size
            },
            limit: opts.limit_rate.map(|rate| (rate.max(1), start)),
            progress: ctx.progress.clone(),
            fetched: fetched.clone(),
        })?;
        PullReport {
            reference: shown.clone(),
            manifest_digest: manifest_digest.clone(),
            kind: "gpack",
            output: p.output,
            size: p.plan.size,
            digest: p.plan.digest,
            layers: vec![p.layer],
            downloaded: 0,
            seconds: 0.0,
        }
    } else if is_docker || single.is_some() {
        let layer = match &single {
            Some(one) => one.layer.clone(),
            None => docker::gguf_layer(&shown, &manifest)?,
        };
        let layers = ctx.fetch_layers(&[(layer.clone(), "gguf".to_string())])?;
        let gguf = store.blob_path(&layer.digest)?;
        let (out, size, digest) = docker::convert_on_arrival(store, &gguf, &layer.digest, opts)?;
        PullReport {
            reference: shown.clone(),
            manifest_digest: manifest_digest.clone(),
            kind: "gguf",
            output: out,
            size,
            digest,
            layers,
            downloaded: 0,
            seconds: 0.0,
        }
    } else {
        let plan = artifact::plan(&shown, &manifest, &config)?;
        if let Some(want) = manifest
            .annotations
            .as_ref()
            .and_then(|a| a.get(artifact::ANN_DIGEST))
        {
            if *want != plan.digest {
                return Err(Error::BadArtifact {
                    what: Document::Manifest {
                        reference: shown.clone(),
                    },
                    problem: ArtifactProblem::AnnotationDigest {
                        annotation: want.clone(),
                        footer: plan.digest.clone(),
                    },
                });
            }
        }
        let wanted: Vec<(OciDescriptor, String)> = manifest
            .layers
            .iter()
            .cloned()
            .zip(plan.sections.iter().map(|s| s.name.clone()))
            .collect();
        let layers = ctx.fetch_layers(&wanted)?;
        let out = match &opts.output {
            Some(o) => o.clone(),
            None => store.model_path(&plan.digest)?,
        };
        let store_copy = store.model_path(&plan.digest)?;
        if opts.output.is_none() && store_copy.is_file() {
            // Already assembled by an earlier pull: quick-check it again.
            gpack_format::Gpack::open(&store_copy)?;
        } else {
            if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
                Store::mkdir(d)?;
            }
            assemble(store, &plan, &out, opts.force || opts.output.is_none())?;
        }
        PullReport {
            reference: shown.clone(),
            manifest_digest: manifest_digest.clone(),
            kind: "gpack",
            output: out,
            size: plan.size,
            digest: plan.digest.clone(),
            layers,
            downloaded: 0,
            seconds: 0.0,
        }
    };
    // The store keeps the config with the layers, and remembers the reference.
    let config_path = store.blob_path(&manifest.config.digest)?;
    if !config_path.is_file() {
        write_blob(&config_path, &config)?;
    }
    let mut blobs: Vec<String> = vec![manifest.config.digest.clone()];
    blobs.extend(manifest.layers.iter().map(|l| l.digest.clone()));
    // The entry points at the store's copy, or at `-o`'s file (which `gpack
    // rm` forgets but never deletes) when the pull wrote only that.
    let store_copy = store.model_path(&report.digest)?;
    let model = if store_copy.is_file() {
        store_copy
    } else {
        report.output.clone()
    };
    let name = manifest
        .annotations
        .as_ref()
        .and_then(|a| {
            a.get(artifact::ANN_NAME)
                .or_else(|| a.get(artifact::ANN_TITLE))
        })
        .cloned()
        .unwrap_or_default();
    if model.is_file() {
        store.put(
            r,
            &RefEntry {
                reference: shown.clone(),
                manifest_digest,
                kind: report.kind.into(),
                digest: report.digest.clone(),
                name,
                model,
                size: report.size,
                blobs: blobs.clone(),
            },
        )?;
    }
    store.note_known(reg.host(), r.repository(), blobs.iter().map(|s| s.as_str()))?;
    report.downloaded = fetched.load(Ordering::Relaxed);
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

/// Writes a small verified blob into the store.
fn write_blob(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(d) = path.parent() {
        Store::mkdir(d)?;
    }
    let mut f = gpack_format::AtomicFile::create(path, true)?;
    f.file().write_all(bytes).map_err(io("write", path))?;
    f.commit()?;
    Ok(())
}

/// Downloads a small blob (the config) into memory, at most `cap` bytes,
/// verified against its digest.
fn fetch_small(
    reg: &Registry,
    r: &Reference,
    desc: &OciDescriptor,
    cap: u64,
    fetched: &AtomicU64,
) -> Result<Vec<u8>> {
    let what = Document::ConfigBlob {
        digest: desc.digest.clone(),
    };
    let size = u64::try_from(desc.size)
        .ok()
        .filter(|&s| s <= cap)
        .ok_or_else(|| Error::BadArtifact {
            what: what.clone(),
            problem: ArtifactProblem::Size {
                size: desc.size,
                max: cap,
            },
        })?;
    let mut stream = reg
        .rt
        .block_on(reg.client.pull_blob_stream(r, desc))
        .map_err(|e| {
            reg.err(
                Operation::FetchConfig {
                    digest: desc.digest.clone(),
                },
                e,
            )
        })?;
    let mut out = Vec::with_capacity(size as usize);
    let mut hasher = Sha256::new();
    reg.rt.block_on(async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Error::BadArtifact {
                what: what.clone(),
                problem: ArtifactProblem::Download(e),
            })?;
            if out.len() as u64 + chunk.len() as u64 > size {
                return Err(Error::BadArtifact {
                    what: what.clone(),
                    problem: ArtifactProblem::TooLong { size },
                });
            }
            hasher.update(&chunk);
            out.extend_from_slice(&chunk);
        }
        Ok(())
    })?;
    fetched.fetch_add(out.len() as u64, Ordering::Relaxed);
    let got = format!("sha256:{}", hex::encode(hasher.finalize()));
    if got != desc.digest {
        return Err(Error::BadArtifact {
            what,
            problem: ArtifactProblem::Digest { found: got },
        });
    }
    Ok(out)
}

struct Ctx<'a> {
    reg: &'a Registry,
    store: &'a Store,
    r: &'a Reference,
    opts: &'a PullOptions,
    progress: Arc<dyn Progress>,
    fetched: Arc<AtomicU64>,
    start: Instant,
}

impl Ctx<'_> {
    /// Fetches every layer not in the store, `opts.jobs` at a time.
    fn fetch_layers(&self, layers: &[(OciDescriptor, String)]) -> Result<Vec<LayerReport>> {
        let mut total = 0u64;
        let mut done = 0u64;
        for (d, _) in layers {
            let s = u64::try_from(d.size).map_err(|_| Error::BadArtifact {
                what: Document::Layer {
                    digest: d.digest.clone(),
                },
                problem: ArtifactProblem::NegativeSize { size: d.size },
            })?;
            total = total.checked_add(s).ok_or_else(|| Error::BadArtifact {
                what: Document::Layers,
                problem: ArtifactProblem::SizesOverflow,
            })?;
            if self.store.blob_path(&d.digest)?.is_file() {
                done += s;
            }
        }
        self.progress.total(total, done);
        Store::mkdir(&self.store.root().join("blobs/sha256"))?;
        Store::mkdir(&self.store.root().join("blobs/partial"))?;
        let jobs = self.opts.jobs.max(1);
        let tasks = layers.iter().map(|(d, name)| {
            let job = Job {
                client: self.reg.client.clone(),
                r: self.r.clone(),
                desc: d.clone(),
                section: name.clone(),
                final_path: self.store.blob_path(&d.digest),
                partial_path: self.store.partial_path(&d.digest),
                progress: self.progress.clone(),
                fetched: self.fetched.clone(),
                limit: self.opts.limit_rate.map(|rate| (rate.max(1), self.start)),
            };
            async move { tokio::spawn(job.run()).await }
        });
        let results: Vec<_> = self.reg.rt.block_on(
            futures_util::stream::iter(tasks)
                .buffered(jobs)
                .collect::<Vec<_>>(),
        );
        let mut out = Vec::with_capacity(results.len());
        for res in results {
            match res {
                Ok(Ok(rep)) => out.push(rep),
                Ok(Err(JobError::Gpack(e))) => return Err(e),
                Ok(Err(JobError::Client(op, e))) => return Err(self.reg.err(op, e)),
                Err(join) => {
                    return Err(Error::BadArtifact {
                        what: Document::DownloadTask,
                        problem: ArtifactProblem::Task(join),
                    })
                }
            }
        }
        Ok(out)
    }
}

enum JobError {
    Gpack(Error),
    Client(Operation, oci_client::errors::OciDistributionError),
}

impl From<Error> for JobError {
    fn from(e: Error) -> Self {
        JobError::Gpack(e)
    }
}

struct Job {
    client: oci_client::Client,
    r: Reference,
    desc: OciDescriptor,
    section: String,
    final_path: Result<PathBuf>,
    partial_path: Result<PathBuf>,
    progress: Arc<dyn Progress>,
    fetched: Arc<AtomicU64>,
    limit: Option<(u64, Instant)>,
}

/// Opens (creating it if absent, never truncating it) the partial blob
/// `p` for resuming, without following a symbolic link at `p`: a link
/// planted there would otherwise have the download appended to, and the
/// resume hash read from, whatever it points at.
pub(crate) fn open_partial(p: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW);
    }
    #[cfg(not(unix))]
    if std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::other("the partial blob is a symbolic link"));
    }
    o.open(p)
}

/// Whether `e` is [`open_partial`] refusing a symbolic link (`O_NOFOLLOW`
/// fails with `ELOOP`).
pub(crate) fn is_symlink_refusal(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    return e.raw_os_error() == Some(libc::ELOOP);
    #[cfg(not(unix))]
    return e.kind() == std::io::ErrorKind::Other;
}

/// Bytes read per chunk when hashing an existing partial blob.
const HASH_CHUNK: usize = 1 << 20;

impl Job {
    async fn run(self) -> std::result::Result<LayerReport, JobError> {
        let final_path = self.final_path?;
        let partial = self.partial_path?;
        let size = self.desc.size as u64; // checked non-negative by the caller
        let id = self.desc.digest.clone();
        let mut rep = LayerReport {
            section: self.section.clone(),
            digest: id.clone(),
            size,
            status: "cached",
            downloaded: 0,
            resumed_from: 0,
        };
        if let Ok(m) = std::fs::metadata(&final_path) {
            if m.len() == size {
                return Ok(rep);
            }
        }
        let mut f = open_partial(&partial).map_err(|e| {
            if is_symlink_refusal(&e) {
                JobError::Gpack(Error::BadArtifact {
                    what: Document::Blob { digest: id.clone() },
                    problem: ArtifactProblem::PartialIsSymlink {
                        path: partial.clone(),
                    },
                })
            } else {
                io("open", &partial)(e).into()
            }
        })?;
        if f.try_lock().is_err() {
            return Err(Error::BadArtifact {
                what: Document::Blob { digest: id.clone() },
                problem: ArtifactProblem::Locked {
                    path: partial.clone(),
                },
            }
            .into());
        }
        // Resume: hash what a previous pull left, then ask for the rest.
        let mut have = f.metadata().map_err(io("stat", &partial))?.len();
        if have > size {
            f.set_len(0).map_err(io("truncate", &partial))?;
            have = 0;
        }
        let mut hasher = Sha256::new();
        if have > 0 {
            f.seek(SeekFrom::Start(0)).map_err(io("seek", &partial))?;
            let mut buf = vec![0u8; HASH_CHUNK];
            let mut left = have;
            while left > 0 {
                let n = (left as usize).min(HASH_CHUNK);
                f.read_exact(&mut buf[..n]).map_err(io("read", &partial))?;
                hasher.update(&buf[..n]);
                left -= n as u64;
            }
        }
        self.progress.begin(&id, &self.section, size, have);
        rep.resumed_from = have;
        rep.status = if have > 0 { "resumed" } else { "downloaded" };
        if have < size {
            let what = Operation::Download {
                section: self.section.clone(),
                digest: id.clone(),
            };
            let resp = self
                .client
                .pull_blob_stream_partial(&self.r, &self.desc, have, None)
                .await
                .map_err(|e| JobError::Client(what.clone(), e))?;
            let mut stream = match resp {
                BlobResponse::Partial(s) => s,
                BlobResponse::Full(s) => {
                    // The registry ignored the range: start over.
                    f.set_len(0).map_err(io("truncate", &partial))?;
                    hasher = Sha256::new();
                    have = 0;
                    rep.resumed_from = 0;
                    rep.status = "downloaded";
                    s
                }
            };
            f.seek(SeekFrom::Start(have))
                .map_err(io("seek", &partial))?;
            let mut got = have;
            while let Some(chunk) = stream.next().await {
                let chunk = match chunk {
                    Ok(c) => c,
                    // The client's own check failed at the end of a full
                    // response: ours below names the section.
                    Err(_) if got == size => break,
                    Err(e) => {
                        return Err(Error::Io {
                            op: "download",
                            path: PathBuf::from(format!("section {} ({id})", self.section)),
                            source: e,
                        }
                        .into())
                    }
                };
                if got + chunk.len() as u64 > size {
                    drop(f);
                    let _ = std::fs::remove_file(&partial);
                    return Err(Error::SizeMismatch {
                        section: self.section.clone(),
                        digest: id,
                        expected: size,
                        found: got + chunk.len() as u64,
                    }
                    .into());
                }
                hasher.update(&chunk);
                f.write_all(&chunk).map_err(io("write", &partial))?;
                got += chunk.len() as u64;
                rep.downloaded += chunk.len() as u64;
                let total = self
                    .fetched
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed)
                    + chunk.len() as u64;
                self.progress.advance(&id, chunk.len() as u64);
                if let Some((rate, t0)) = self.limit {
                    let due = std::time::Duration::from_secs_f64(total as f64 / rate as f64);
                    let el = t0.elapsed();
                    if due > el {
                        tokio::time::sleep(due - el).await;
                    }
                }
            }
            if got != size {
                return Err(Error::SizeMismatch {
                    section: self.section.clone(),
                    digest: id,
                    expected: size,
                    found: got,
                }
                .into());
            }
        }
        let actual = hex::encode(hasher.finalize());
        if format!("sha256:{actual}") != id {
            drop(f);
            let _ = std::fs::remove_file(&partial);
            return Err(Error::DigestMismatch {
                section: self.section.clone(),
                digest: id,
                size,
                actual,
            }
            .into());
        }
        f.sync_all().map_err(io("fsync", &partial))?;
        std::fs::rename(&partial, &final_path).map_err(io("rename", &final_path))?;
        drop(f);
        self.progress.end(&id);
        Ok(rep)
    }
}

/// Writes the .gpack of `plan` from the store's blobs to `out` atomically:
/// header, each section at its offset, the table and the footer (padding
/// stays zero), then the quick check and the footer digest against the
/// plan's before the rename.
pub fn assemble(store: &Store, plan: &Plan, out: &Path, replace: bool) -> Result<()> {
    let mut a = gpack_format::AtomicFile::create(out, replace)?;
    let tp = a.temp_path().to_path_buf();
    {
        let f = a.file();
        f.set_len(plan.size).map_err(io("resize", &tp))?;
        let at = |off: u64, bytes: &[u8], f: &mut std::fs::File| -> Result<()> {
            f.seek(SeekFrom::Start(off)).map_err(io("seek", &tp))?;
            f.write_all(bytes).map_err(io("write", &tp))
        };
        at(0, &plan.header, f)?;
        for s in &plan.sections {
            let src = store.blob_path(&s.digest)?;
            let mut b = std::fs::File::open(&src).map_err(io("open", &src))?;
            let len = b.metadata().map_err(io("stat", &src))?.len();
            if len != s.size {
                return Err(Error::SizeMismatch {
                    section: s.name.clone(),
                    digest: s.digest.clone(),
                    expected: s.size,
                    found: len,
                });
            }
            f.seek(SeekFrom::Start(s.offset)).map_err(io("seek", &tp))?;
            std::io::copy(&mut b, f).map_err(io("copy into", &tp))?;
        }
        at(plan.table.0, &plan.table.1, f)?;
        at(plan.size - FOOTER_SIZE, &plan.footer, f)?;
        f.sync_all().map_err(io("fsync", &tp))?;
    }
    let g = gpack_format::Gpack::open(&tp)?;
    let found = hex::encode(g.layout().digest());
    if format!("sha256:{found}") != plan.digest {
        return Err(Error::FooterMismatch {
            path: tp,
            expected: plan.digest.clone(),
            found,
        });
    }
    drop(g);
    a.commit()?;
    Ok(())
}
