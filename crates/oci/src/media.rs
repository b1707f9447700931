//! The names docs/OCI.md fixes: the media types, config schema and
//! annotation keys of a gpack artifact, and the media types gpack writes for
//! a Docker model artifact.
//!
//! They live apart from the layout that uses them ([`crate::artifact`],
//! [`crate::docker`], which re-export them under their own names) so the
//! errors that quote them ([`crate::ArtifactProblem`]) depend on the names
//! only, and the module graph points one way: layout → error → media.

/// `artifactType` of a gpack manifest.
pub const ARTIFACT_TYPE: &str = "application/vnd.gpack.model.v1";
/// Media type of the config blob.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.gpack.config.v1+json";
/// `schema` of the config blob.
pub const CONFIG_SCHEMA: &str = "gpack.oci.config.v1";
/// Prefix of a section layer's media type (then the kind's table name, then `.v1`).
pub const SECTION_MEDIA_PREFIX: &str = "application/vnd.gpack.section.";

/// Manifest annotation: the model name (also in `org.opencontainers.image.title`).
pub const ANN_NAME: &str = "dev.gpack.model.name";
/// Manifest annotation: `general.architecture`.
pub const ANN_ARCH: &str = "dev.gpack.model.architecture";
/// Manifest annotation: convert's `--quant`.
pub const ANN_QUANT: &str = "dev.gpack.model.quant";
/// Manifest annotation: the footer digest (`sha256:` + the manifest section's SHA-256).
pub const ANN_DIGEST: &str = "dev.gpack.digest";
/// Manifest annotation: the file size in bytes (decimal).
pub const ANN_SIZE: &str = "dev.gpack.size";
/// Layer annotation: the section's name in the table.
pub const ANN_SECTION: &str = "dev.gpack.section.name";
/// The standard title annotation.
pub const ANN_TITLE: &str = "org.opencontainers.image.title";

/// Docker's model config media type (current).
pub const DOCKER_CONFIG_MEDIA_TYPE: &str = "application/vnd.docker.ai.model.config.v0.1+json";
/// Docker's GGUF layer media type (current).
pub const DOCKER_GGUF_MEDIA_TYPE: &str = "application/vnd.docker.ai.gguf.v3";

/// `artifactType` of a CNCF ModelPack manifest (modelpack/model-spec
/// `specs-go/v1/mediatype.go`, `ArtifactTypeModelManifest`).
pub const MODELPACK_ARTIFACT_TYPE: &str = "application/vnd.cncf.model.manifest.v1+json";
/// Media type of a ModelPack config blob (`MediaTypeModelConfig`).
pub const MODELPACK_CONFIG_MEDIA_TYPE: &str = "application/vnd.cncf.model.config.v1+json";
/// Prefix of every ModelPack weight layer media type (`.raw`, `.tar`, …).
pub const MODELPACK_WEIGHT_PREFIX: &str = "application/vnd.cncf.model.weight.v1.";
/// A ModelPack weight layer that is one unarchived, uncompressed file
/// (`MediaTypeModelWeightRaw`): the whole .gpack.
pub const MODELPACK_WEIGHT_RAW: &str = "application/vnd.cncf.model.weight.v1.raw";
/// Layer annotation: the file's path in the model directory
/// (`AnnotationFilepath`); for gpack a bare file name.
pub const ANN_FILEPATH: &str = "org.cncf.model.filepath";
/// `config.format` of a ModelPack config holding a .gpack.
pub const MODELPACK_FORMAT: &str = "gpack";
/// The file name gpack gives the weight layer (title and filepath).
pub const MODELPACK_FILE: &str = "model.gpack";
