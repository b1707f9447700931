//! `gpack push`: a .gpack (or a GGUF) to a registry.

use super::RegistryArgs;
use crate::progress::TransferBars;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Push a .gpack to an OCI registry as a CNCF ModelPack artifact.
///
/// REF is host[:port]/repository[:tag] (the registry host is required).
/// By default the whole file is ONE layer (application/vnd.cncf.model.weight.v1.raw,
/// titled model.gpack, its digest the file's SHA-256) under a ModelPack
/// config (application/vnd.cncf.model.config.v1+json, config.format
/// "gpack"): what Kubernetes image volumes mount as one mappable
/// /…/model.gpack and what ModelPack tools read. --per-section pushes
/// gpack's own layout instead: one layer per section, whose digest is the
/// section's SHA-256, so two quant variants of one model share their
/// tokenizer and embedding blobs in the registry (docs/OCI.md says when
/// that is worth it). Either way the manifest is annotated with the model
/// name, architecture, quant and file digest. A blob the registry already
/// has is not sent again: it is checked with HEAD, then mounted from
/// another repository of the registry that holds it (--mount-from, and
/// every repository this machine pushed it to or pulled it from). A .gguf
/// FILE is pushed as a Docker model artifact
/// (application/vnd.docker.ai.gguf.v3), which `docker model pull` and
/// `gpack pull` both take.
///
/// --image also pushes a runnable image of the .gpack, for runtimes that
/// mount only container images (containerd's image volumes): an OCI image
/// index (linux/amd64, linux/arm64) whose images have one uncompressed tar
/// layer holding /model.gpack, their configs' rootfs.diff_ids its SHA-256.
/// It goes to --image-ref, by default the same repository with the tag
/// TAG-image; its layer shares no blob with the artifact (a tar is not the
/// file), so the registry stores the bytes twice (docs/OCI.md).
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    gpack push smollm2.gpack registry.example.com/models/smollm2:q4_1\n  \
    gpack push smollm2.q8.gpack registry.example.com/models/smollm2:q8_0 --mount-from models/other\n  \
    gpack push m.gpack localhost:5000/m:v1 --insecure --username ci --password \"$PW\" --json\n  \
    gpack push m.gpack registry.example.com/models/m:v1 --image   (also registry.example.com/models/m:v1-image)")]
pub struct Args {
    /// The .gpack (or .gguf) to push.
    file: PathBuf,
    /// Where: host[:port]/repository[:tag].
    reference: String,
    /// A repository of the same registry to mount existing blobs from
    /// (repeatable).
    #[arg(long, value_name = "REPO")]
    mount_from: Vec<String>,
    /// Layers uploaded at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    jobs: usize,
    /// One layer per section (gpack's own layout) instead of one ModelPack
    /// layer holding the whole file.
    #[arg(long)]
    per_section: bool,
    /// Also push the runnable image variant (/model.gpack in one tar
    /// layer) for containerd.
    #[arg(long)]
    image: bool,
    /// Where the image variant goes (default: REF's repository, tag
    /// TAG-image).
    #[arg(long, value_name = "REF", requires = "image")]
    image_ref: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Print a JSON report (schema "gpack.push.v1") instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let r = gpack_oci::reference::parse(&a.reference)?;
    let reg = gpack_oci::Registry::connect(
        &r,
        &a.registry.options(),
        gpack_oci::RegistryOperation::Push,
    )?;
    let store = gpack_oci::Store::open_default();
    let bars = Arc::new(TransferBars::new("push", !a.json));
    let image = match (a.image, &a.image_ref) {
        (false, _) => None,
        (true, Some(i)) => {
            let i = gpack_oci::reference::parse(i)?;
            if i.registry() != r.registry() {
                anyhow::bail!(
                    "--image-ref {} is on another registry than {}: the image variant goes to the same registry",
                    i.whole(),
                    a.reference
                );
            }
            Some(i)
        }
        (true, None) => Some(gpack_oci::Reference::with_tag(
            r.registry().to_string(),
            r.repository().to_string(),
            format!("{}-image", r.tag().unwrap_or("latest")),
        )),
    };
    let opts = gpack_oci::PushOptions {
        mount_from: a.mount_from.clone(),
        jobs: a.jobs,
        per_section: a.per_section,
        image,
    };
    let rep = gpack_oci::push(&reg, &store, &a.file, &r, &opts, bars.clone())
        .with_context(|| format!("pushing {} to {}", a.file.display(), a.reference));
    bars.finish();
    let rep = rep?;
    if a.json {
        let mut v = serde_json::to_value(&rep)?;
        v["schema"] = "gpack.push.v1".into();
        super::print_json(&v)?;
    } else {
        let count = |s: &str| rep.layers.iter().filter(|l| l.status == s).count();
        println!(
            "pushed {} ({} layout, {} blobs: {} uploaded, {} already there, {} mounted; {} bytes sent) in {:.2} s\nmanifest: {}\ndigest: {}",
            rep.reference,
            rep.layout,
            rep.layers.len(),
            count("uploaded"),
            count("exists"),
            count("mounted"),
            rep.uploaded,
            rep.seconds,
            rep.manifest_digest,
            rep.digest
        );
        if let Some(i) = &rep.image {
            println!(
                "image: {} (index {}, layer {}, {} bytes)",
                i.reference, i.index_digest, i.layer_digest, i.layer_size
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
