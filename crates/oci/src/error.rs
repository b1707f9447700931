//! Errors of push, pull and the store.

use std::path::PathBuf;

/// What can go wrong moving a model through a registry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The REF argument does not parse.
    #[error(
        "{reference:?} is not a registry reference ({problem}); expected host[:port]/repo[:tag|@sha256:HEX]"
    )]
    BadReference {
        /// What was given.
        reference: String,
        /// Why it does not parse.
        problem: ReferenceProblem,
    },
    /// `--insecure` asked for a registry that is not on this machine.
    #[error(
        "--insecure (plain HTTP, no TLS) is refused for {host}: only a loopback registry (localhost, 127.0.0.0/8, [::1]) may be reached without TLS"
    )]
    InsecureNotLoopback {
        /// The registry host.
        host: String,
    },
    /// `--image` with a GGUF: the image variant holds a .gpack.
    #[error(
        "{}: --image pushes a runnable image holding /model.gpack; convert the GGUF first (gpack convert)", path.display()
    )]
    ImageOfGguf {
        /// The file given.
        path: PathBuf,
    },
    /// The registry answered 401 Unauthorized.
    #[error(
        "registry {registry}: 401 Unauthorized while {op} (credentials: {credentials}); pass --username and --password (or GPACK_REGISTRY_USERNAME / GPACK_REGISTRY_PASSWORD), or log in with `docker login {registry}`"
    )]
    Unauthorized {
        /// Registry host.
        registry: String,
        /// The operation.
        op: Operation,
        /// Where the credentials came from (boxed: it would make every
        /// `Result` of this crate larger).
        credentials: Box<Credentials>,
    },
    /// Any other registry or transport failure.
    #[error(
        "registry {registry}: {op}{}",
        if *needs_insecure { " (a plain-HTTP registry on this machine needs --insecure)" } else { "" }
    )]
    Registry {
        /// Registry host.
        registry: String,
        /// The operation.
        op: Operation,
        /// The registry is this machine's, the request failed to connect
        /// and `--insecure` was not given: the likely cause.
        needs_insecure: bool,
        /// The client's error.
        #[source]
        source: Box<oci_client::errors::OciDistributionError>,
    },
    /// A manifest or config from the registry is not what gpack expects.
    #[error("{what}")]
    BadArtifact {
        /// Which document or blob.
        what: Document,
        /// What is wrong, with the expected and found values.
        #[source]
        problem: ArtifactProblem,
    },
    /// A downloaded layer does not hash to its digest.
    #[error(
        "section {section} (layer {digest}): the {size} bytes received hash to sha256:{actual}; the blob in the registry is damaged (the partial download was deleted)"
    )]
    DigestMismatch {
        /// Section name (or "gguf").
        section: String,
        /// The layer digest.
        digest: String,
        /// Bytes received.
        size: u64,
        /// What they hash to.
        actual: String,
    },
    /// A layer's stream ended early or ran long.
    #[error("section {section} (layer {digest}): expected {expected} bytes, received {found}")]
    SizeMismatch {
        /// Section name.
        section: String,
        /// The layer digest.
        digest: String,
        /// Size in the manifest.
        expected: u64,
        /// Bytes received so far.
        found: u64,
    },
    /// The assembled file's digest differs from the manifest's annotation.
    #[error(
        "{path}: the assembled file's digest sha256:{found} differs from the manifest annotation {expected}"
    )]
    FooterMismatch {
        /// The file (its temporary name; it was removed).
        path: PathBuf,
        /// The annotation.
        expected: String,
        /// The footer's manifest SHA-256.
        found: String,
    },
    /// A section of a single-layer (ModelPack) pull does not hash to its
    /// table entry's SHA-256.
    #[error(
        "section {section} (bytes {offset}..{end} of layer {layer}): received bytes hash to sha256:{actual}, the section table says sha256:{expected}; the blob in the registry is damaged (the partial download was deleted)"
    )]
    SectionDigest {
        /// Section name.
        section: String,
        /// Its offset in the file.
        offset: u64,
        /// Its end.
        end: u64,
        /// The layer digest.
        layer: String,
        /// The table's SHA-256 (hex).
        expected: String,
        /// What the bytes hash to (hex).
        actual: String,
    },
    /// A single-layer pull's whole file does not hash to the layer digest.
    #[error(
        "layer {layer}: the {size} bytes received hash to sha256:{actual}, not the layer digest (every section matched its own hash: bytes outside them differ, or the table itself was forged); the partial download was deleted"
    )]
    LayerDigest {
        /// The layer digest.
        layer: String,
        /// Its size.
        size: u64,
        /// What the bytes hash to (hex).
        actual: String,
    },
    /// A ranged GET returned another length than asked for.
    #[error("layer {layer}: the range {offset}..{end} returned {found} bytes")]
    RangeLength {
        /// The layer digest.
        layer: String,
        /// Start of the range.
        offset: u64,
        /// Its end.
        end: u64,
        /// Bytes received.
        found: u64,
    },
    /// A local file operation failed.
    #[error("{op} {path}")]
    Io {
        /// What was done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The docker config file is unreadable or malformed.
    #[error("docker config {}", path.display())]
    DockerConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        problem: DockerConfigProblem,
    },
    /// A .gpack error (opening the file to push, or checking the assembled one).
    #[error(transparent)]
    Format(#[from] gpack_format::Error),
    /// Converting a pulled GGUF failed.
    #[error("converting the pulled GGUF")]
    Convert(#[source] crate::pull::ConvertError),
    /// A Docker GGUF model artifact, and no converter was given.
    #[error("this is a Docker GGUF model artifact, and this pull was given no GGUF converter")]
    NoConverter,
    /// The reference is not in the local store.
    #[error("{0} is not in the local store (gpack ls lists what is)")]
    NotInStore(String),
}

/// Why a REF does not parse (the problem of [`Error::BadReference`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceProblem {
    /// No `/` after the host.
    #[error("no registry host before the first '/'")]
    NoHost,
    /// Nothing after the host's `/`.
    #[error("no repository after the host")]
    NoRepository,
    /// The first component has no `.` or `:port` and is not `localhost`.
    #[error(
        "the first component is not a registry host (it needs a '.' or a ':port', or to be localhost)"
    )]
    NotAHost,
    /// The OCI reference grammar refuses it.
    #[error("{0}")]
    Syntax(oci_client::ParseError),
}

/// Which document or blob an [`Error::BadArtifact`] is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Document {
    /// The manifest of a reference, as received.
    #[error("manifest of {reference}")]
    Manifest {
        /// The reference.
        reference: String,
    },
    /// A gpack artifact (its manifest and config checked together).
    #[error("artifact {reference}")]
    Artifact {
        /// The reference.
        reference: String,
    },
    /// A Docker model artifact.
    #[error("model artifact {reference}")]
    ModelArtifact {
        /// The reference.
        reference: String,
    },
    /// The config blob, as received.
    #[error("config blob {digest}")]
    ConfigBlob {
        /// Its digest.
        digest: String,
    },
    /// A layer's descriptor.
    #[error("layer {digest}")]
    Layer {
        /// Its digest.
        digest: String,
    },
    /// The layers together.
    #[error("layers")]
    Layers,
    /// A layer's download task.
    #[error("a download task")]
    DownloadTask,
    /// A blob being downloaded.
    #[error("blob {digest}")]
    Blob {
        /// Its digest.
        digest: String,
    },
    /// A digest given to the store.
    #[error("digest {digest:?}")]
    Digest {
        /// The digest as given.
        digest: String,
    },
    /// A store entry file, as read.
    #[error("{}", path.display())]
    StoreEntry {
        /// The file.
        path: PathBuf,
    },
    /// A store entry gpack writes.
    #[error("store entry")]
    NewStoreEntry,
    /// The store's list of known blobs.
    #[error("known blobs")]
    KnownBlobs,
    /// The config blob gpack pushes.
    #[error("config")]
    Config,
    /// The Docker model config gpack writes for a pulled GGUF.
    #[error("docker model config")]
    DockerModelConfig,
    /// The manifest gpack pushes.
    #[error("manifest")]
    PushedManifest,
}

/// Where the credentials sent to a registry came from (never the secret):
/// what [`Error::Unauthorized`] reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Credentials {
    /// `--username` and `--password`.
    #[error("user {user} from the flags")]
    Flags {
        /// The user name.
        user: String,
    },
    /// `GPACK_REGISTRY_USERNAME` and `GPACK_REGISTRY_PASSWORD`.
    #[error("user {user} from the environment")]
    Environment {
        /// The user name.
        user: String,
    },
    /// `GPACK_REGISTRY_TOKEN`.
    #[error("a bearer token from GPACK_REGISTRY_TOKEN")]
    Token,
    /// A docker config file's `auths` entry.
    #[error("user {user} from {}", path.display())]
    DockerConfig {
        /// The user name.
        user: String,
        /// The docker config file.
        path: PathBuf,
    },
    /// A docker credential helper named by a docker config file
    /// (`credHelpers.<host>` or `credsStore`).
    #[error("user {user} from docker-credential-{helper} (named by {})", path.display())]
    DockerCredentialHelper {
        /// The user name.
        user: String,
        /// The helper's name (the program is `docker-credential-NAME`).
        helper: String,
        /// The docker config file.
        path: PathBuf,
    },
    /// None: anonymous.
    #[error("none (anonymous)")]
    Anonymous,
}

/// What gpack was doing with the registry (the operation of
/// [`Error::Registry`] and [`Error::Unauthorized`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Operation {
    /// Getting a token.
    #[error("authenticating")]
    Authenticating,
    /// Fetching the manifest of a reference.
    #[error("fetching the manifest of {reference}")]
    FetchManifest {
        /// The reference.
        reference: String,
    },
    /// Fetching the config blob.
    #[error("fetching the config blob {digest}")]
    FetchConfig {
        /// Its digest.
        digest: String,
    },
    /// Pushing the manifest of a reference.
    #[error("pushing the manifest of {reference}")]
    PushManifest {
        /// The reference.
        reference: String,
    },
    /// Uploading a section's layer.
    #[error("uploading section {section} ({digest})")]
    Upload {
        /// Section name.
        section: String,
        /// Layer digest.
        digest: String,
    },
    /// Downloading a section's layer.
    #[error("downloading section {section} ({digest})")]
    Download {
        /// Section name (or "gguf").
        section: String,
        /// Layer digest.
        digest: String,
    },
}

/// What is wrong with a manifest, config or blob from the registry, or with
/// a store entry (the source of [`Error::BadArtifact`]): matchable, each
/// variant carrying the values its message names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArtifactProblem {
    /// A document gpack writes could not be serialized.
    #[error("cannot be serialized")]
    Serialize(#[source] serde_json::Error),
    /// The manifest is larger than gpack accepts.
    #[error("{size} bytes, more than the {max} accepted")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// The manifest does not parse.
    #[error("not an OCI image manifest")]
    NotManifest(#[source] serde_json::Error),
    /// The config is neither a gpack's nor a Docker model's.
    #[error(
        "config media type {found}, expected {} (ModelPack), {} (a per-section gpack) or {} (a Docker model)",
        crate::media::MODELPACK_CONFIG_MEDIA_TYPE,
        crate::media::CONFIG_MEDIA_TYPE,
        crate::media::DOCKER_CONFIG_MEDIA_TYPE
    )]
    ConfigMediaType {
        /// The media type found.
        found: String,
    },
    /// The digest annotation differs from the config's footer digest.
    #[error(
        "annotation {} = {annotation} but the config's footer digest is {footer}",
        crate::media::ANN_DIGEST
    )]
    AnnotationDigest {
        /// The annotation's value.
        annotation: String,
        /// The footer's digest.
        footer: String,
    },
    /// A Docker model artifact without a GGUF layer.
    #[error("no GGUF layer (media type {})", crate::media::DOCKER_GGUF_MEDIA_TYPE)]
    NoGguf,
    /// A Docker model artifact with several GGUF layers.
    #[error("{count} GGUF layers (a split GGUF); gpack pulls single-file GGUF artifacts")]
    SplitGguf {
        /// How many.
        count: usize,
    },
    /// The config blob is not a gpack config.
    #[error("config blob is not a gpack config")]
    NotGpackConfig(#[source] serde_json::Error),
    /// The config's schema is another.
    #[error("config schema {found:?}, expected {:?}", crate::media::CONFIG_SCHEMA)]
    ConfigSchema {
        /// The schema found.
        found: String,
    },
    /// A config field is not hex.
    #[error("config {field} is not hex")]
    NotHex {
        /// `header`, `footer` or `section_table`.
        field: &'static str,
        /// The decoder's error.
        #[source]
        source: hex::FromHexError,
    },
    /// A config field has the wrong size.
    #[error("config {field} is {found} bytes, expected {expected}")]
    FieldSize {
        /// `header` or `footer`.
        field: &'static str,
        /// Bytes found.
        found: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// The header's section count is 0 or past the cap.
    #[error("header section_count {found}, expected 1..={max}")]
    SectionCount {
        /// The count.
        found: u32,
        /// The cap.
        max: usize,
    },
    /// The section table's size is not 96 bytes per section.
    #[error("section table is {found} bytes, expected 96 × {count}")]
    TableSize {
        /// Bytes found.
        found: usize,
        /// Sections.
        count: usize,
    },
    /// The header's file size differs from the config's.
    #[error("header total_file_size {header} differs from config size {config}")]
    SizeDiffers {
        /// The header's.
        header: u64,
        /// The config's.
        config: u64,
    },
    /// The file is smaller than a footer.
    #[error("file size {size} is smaller than a footer")]
    SmallerThanFooter {
        /// The file size.
        size: u64,
    },
    /// The section table runs past the footer.
    #[error("section table at {offset} (+{len}) runs past the footer at {footer}")]
    TableOutside {
        /// Its offset.
        offset: u64,
        /// Its size.
        len: usize,
        /// The footer's offset.
        footer: u64,
    },
    /// Not one layer per section.
    #[error("{found} layers, expected one per section ({expected})")]
    LayerCount {
        /// Layers.
        found: usize,
        /// Sections.
        expected: usize,
    },
    /// A section kind this reader does not know.
    #[error("section {index}: unknown kind {kind}")]
    UnknownKind {
        /// Its index in the table.
        index: usize,
        /// The kind number.
        kind: u32,
    },
    /// A section overlaps the previous one or runs past the table.
    #[error(
        "section {name}: [{offset}, +{size}) overlaps the previous section (ends at {end}) or runs past the table at {table}"
    )]
    SectionOverlap {
        /// Section name.
        name: String,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// Where the previous one ends.
        end: u64,
        /// The table's offset.
        table: u64,
    },
    /// A layer's digest is not its section's.
    #[error("layer {index} has digest {found}, expected the section {name}'s {expected}")]
    LayerDigest {
        /// Layer index.
        index: usize,
        /// Section name.
        name: String,
        /// The layer's digest.
        found: String,
        /// The section's.
        expected: String,
    },
    /// A layer's size is not its section's.
    #[error("layer {index} ({name}) has size {found}, expected {expected}")]
    LayerSize {
        /// Layer index.
        index: usize,
        /// Section name.
        name: String,
        /// The layer's size.
        found: i64,
        /// The section's.
        expected: u64,
    },
    /// A layer's media type is not its section's.
    #[error("layer {index} ({name}) has media type {found}, expected {expected}")]
    LayerMediaType {
        /// Layer index.
        index: usize,
        /// Section name.
        name: String,
        /// The layer's media type.
        found: String,
        /// The section kind's.
        expected: String,
    },
    /// The config's digest is not its footer's.
    #[error("config digest {config} differs from its footer's {footer}")]
    ConfigDigest {
        /// The config's.
        config: String,
        /// The footer's.
        footer: String,
    },
    /// A descriptor's size is negative or past the cap.
    #[error("size {size} outside 0..={max}")]
    Size {
        /// The descriptor's size.
        size: i64,
        /// The cap.
        max: u64,
    },
    /// A descriptor's size is negative.
    #[error("negative size {size}")]
    NegativeSize {
        /// The descriptor's size.
        size: i64,
    },
    /// The layers' sizes add up past 2^64.
    #[error("their sizes overflow 2^64")]
    SizesOverflow,
    /// A download stream failed.
    #[error("download failed")]
    Download(#[source] std::io::Error),
    /// A blob streamed more bytes than its descriptor gives.
    #[error("more than the {size} bytes its descriptor gives")]
    TooLong {
        /// The descriptor's size.
        size: u64,
    },
    /// A blob's bytes do not hash to its digest.
    #[error("the bytes received hash to {found}")]
    Digest {
        /// `sha256:` + what they hash to.
        found: String,
    },
    /// A download task panicked or was cancelled.
    #[error("the task failed")]
    Task(#[source] tokio::task::JoinError),
    /// Another pull holds the partial blob's lock.
    #[error("{} is locked: another gpack pull is downloading it", path.display())]
    Locked {
        /// The partial blob.
        path: PathBuf,
    },
    /// The partial blob's path is a symbolic link (refused, not followed).
    #[error("{} is a symbolic link; gpack does not follow it (remove it to download the blob)", path.display())]
    PartialIsSymlink {
        /// The partial blob.
        path: PathBuf,
    },
    /// A digest that is not `sha256:` + 64 lower-case hex digits.
    #[error("expected sha256: and 64 lower-case hex digits")]
    BadDigest,
    /// A store entry that does not parse.
    #[error("not a store entry")]
    NotStoreEntry(#[source] serde_json::Error),
    /// The verifier of a ranged pull stopped because a download failed.
    #[error("the pull stopped (a range failed)")]
    Stopped,
    /// The verifier thread of a ranged pull panicked.
    #[error("the verifier thread failed")]
    VerifierPanicked,
    /// A ModelPack config that does not parse.
    #[error("config blob is not a ModelPack config (descriptor, config, modelfs)")]
    NotModelPackConfig(#[source] serde_json::Error),
    /// A ModelPack manifest without a weight layer.
    #[error(
        "no weight layer (media type {}…)",
        crate::media::MODELPACK_WEIGHT_PREFIX
    )]
    NoWeightLayer,
    /// A ModelPack manifest with several weight layers.
    #[error("{count} weight layers; gpack pulls an artifact whose weights are exactly one file")]
    WeightLayers {
        /// How many.
        count: usize,
    },
    /// The weight layer names no file.
    #[error(
        "the weight layer has neither {} nor {}",
        crate::media::ANN_FILEPATH,
        crate::media::ANN_TITLE
    )]
    NoFilePath,
    /// The weight layer's file path is not one plain file name.
    #[error(
        "weight layer {} {path:?} is not a plain file name (expected one path component without '/', '\\' or '..')",
        crate::media::ANN_FILEPATH
    )]
    FilePath {
        /// The annotation's value.
        path: String,
    },
    /// The weight file is neither a .gpack nor a GGUF.
    #[error(
        "config.format {format:?} and file {file:?}: expected a gpack (format \"gpack\") or a GGUF"
    )]
    WeightFormat {
        /// `config.format`.
        format: String,
        /// The file name.
        file: String,
    },
    /// The weight layer is archived or compressed.
    #[error(
        "weight layer media type {found}, expected {} (one uncompressed file)",
        crate::media::MODELPACK_WEIGHT_RAW
    )]
    WeightMediaType {
        /// The media type found.
        found: String,
    },
    /// `dev.gpack.size` disagrees with the layer descriptor.
    #[error(
        "annotation {} = {annotation} but the weight layer's descriptor says {descriptor} bytes",
        crate::media::ANN_SIZE
    )]
    SizeAnnotation {
        /// The annotation's value.
        annotation: String,
        /// The descriptor's size.
        descriptor: u64,
    },
    /// `modelfs.diffIds` is not the weight layer's digest.
    #[error("modelfs.diffIds {found:?}, expected [{layer:?}] (the raw layer's digest)")]
    DiffIds {
        /// What the config lists.
        found: Vec<String>,
        /// The layer digest.
        layer: String,
    },
    /// The .gpack header's file size disagrees with the layer descriptor.
    #[error("the file's header says {header} bytes, the layer descriptor {descriptor}")]
    HeaderSize {
        /// `total_file_size`.
        header: u64,
        /// The descriptor's size.
        descriptor: u64,
    },
    /// The footer digest differs from the artifact's `dev.gpack.digest`.
    #[error(
        "annotation {} = {annotation} but the file's footer digest is {footer}",
        crate::media::ANN_DIGEST
    )]
    FooterAnnotation {
        /// The annotation.
        annotation: String,
        /// The footer's.
        footer: String,
    },
}

/// What is wrong with a docker config file (the source of
/// [`Error::DockerConfig`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DockerConfigProblem {
    /// It is larger than the cap.
    #[error("larger than {max} bytes")]
    TooLarge {
        /// The cap.
        max: u64,
    },
    /// It does not parse.
    #[error("not JSON")]
    NotJson(#[source] serde_json::Error),
    /// `auths.KEY.auth` is not base64.
    #[error("auths.{key}.auth is not base64")]
    NotBase64 {
        /// The auths key.
        key: String,
        /// The decoder's error.
        #[source]
        source: base64::DecodeError,
    },
    /// `auths.KEY.auth` decodes to bytes that are not UTF-8.
    #[error("auths.{key}.auth is not UTF-8 once decoded")]
    NotUtf8 {
        /// The auths key.
        key: String,
    },
    /// `auths.KEY.auth` has no `:`.
    #[error("auths.{key}.auth is not user:password once decoded")]
    NoColon {
        /// The auths key.
        key: String,
    },
    /// The credential helper it names failed.
    #[error("its credential helper docker-credential-{helper}: {problem}")]
    Helper {
        /// The helper's name.
        helper: String,
        /// What went wrong.
        problem: HelperProblem,
    },
}

/// Why a docker credential helper gave no credentials (the problem of
/// [`DockerConfigProblem::Helper`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HelperProblem {
    /// The program could not be started (not on `PATH`, not executable).
    #[error("could not be run (is it on PATH?): {0}")]
    Spawn(std::io::Error),
    /// It exited with an error other than "credentials not found".
    #[error("exited with {status}: {stderr}")]
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed (stderr, else stdout), trimmed and capped.
        stderr: String,
    },
    /// It did not answer in time.
    #[error("gave no answer within {secs} s")]
    TimedOut {
        /// The limit.
        secs: u64,
    },
    /// Its answer is not the protocol's JSON object.
    #[error("answered something that is not {{\"Username\", \"Secret\"}} JSON: {0}")]
    BadAnswer(serde_json::Error),
    /// Its answer is larger than the cap.
    #[error("answered more than {max} bytes")]
    TooLarge {
        /// The cap.
        max: u64,
    },
    /// It holds an identity token (user `<token>`), which gpack cannot use.
    #[error("holds an identity token (user <token>), which gpack does not support: pass --username and --password, or GPACK_REGISTRY_TOKEN")]
    IdentityToken,
}

/// `Result` with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `map_err` helper for io errors.
pub(crate) fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}
