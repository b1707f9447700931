//! The one error type of this crate.

use crate::manifest::ManifestProblem;
use crate::payload::PayloadProblem;
use crate::SectionKind;
use std::path::PathBuf;

/// Everything that can go wrong reading, verifying or writing a GPACK file.
///
/// Every variant names what was expected and what was found, with byte
/// offsets from the start of the file where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed.
    #[error("{op} {}", path.display())]
    Io {
        /// What was being done ("open", "write", "rename"…).
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is smaller than a header plus a footer.
    #[error("file is {size} bytes, smaller than the {min} bytes of a header and footer")]
    TooSmall {
        /// Actual size.
        size: u64,
        /// Smallest possible file.
        min: u64,
    },
    /// A magic number is wrong.
    #[error("bad {what} magic at offset {offset}: expected {expected:#010x}, found {found:#010x}")]
    BadMagic {
        /// "header" or "footer".
        what: &'static str,
        /// Where it was read.
        offset: u64,
        /// What it should be.
        expected: u32,
        /// What it is.
        found: u32,
    },
    /// The file needs a newer reader.
    #[error(
        "this file needs a reader of version {needed} or newer; this reader is version {reader}"
    )]
    NeedsNewerReader {
        /// The file's `min_reader_version`.
        needed: u16,
        /// This crate's reader version.
        reader: u16,
    },
    /// A header field holds a value no writer produces.
    #[error("invalid {field} at offset {offset}: {found} ({expected})")]
    BadField {
        /// Name of the field.
        field: &'static str,
        /// Where it is.
        offset: u64,
        /// Its value.
        found: u64,
        /// What it must be, in words.
        expected: &'static str,
    },
    /// The file is shorter than its header says.
    #[error("file is truncated: header says {expected} bytes, found {actual} ({} missing)", expected - actual)]
    Truncated {
        /// `total_file_size`.
        expected: u64,
        /// Actual size.
        actual: u64,
    },
    /// The file is longer than its header says.
    #[error("file has {} trailing bytes: header says {expected} bytes, found {actual}", actual - expected)]
    TrailingBytes {
        /// `total_file_size`.
        expected: u64,
        /// Actual size.
        actual: u64,
    },
    /// Reserved bytes are not zero.
    #[error("reserved bytes of the {what} at offset {offset} are not zero")]
    ReservedNotZero {
        /// Which struct.
        what: &'static str,
        /// Offset of the first non-zero byte.
        offset: u64,
    },
    /// Flag bits this reader does not know are set.
    #[error("unknown header flags {bits:#x}: a newer writer made this file; refusing to guess")]
    UnknownFlags {
        /// The unknown bits.
        bits: u32,
    },
    /// The header flags disagree with the sections present.
    #[error("header flags {found:#x} do not match the sections present (expected {expected:#x})")]
    FlagsMismatch {
        /// Flags in the header.
        found: u32,
        /// Flags the sections imply.
        expected: u32,
    },
    /// A field of the footer disagrees with the header.
    #[error("footer {field} is {footer}, header says {header}")]
    FooterMismatch {
        /// Which field.
        field: &'static str,
        /// Footer value.
        footer: u64,
        /// Header value.
        header: u64,
    },
    /// A section table entry is invalid.
    #[error("section table entry {index} at offset {offset}: {problem}")]
    BadSection {
        /// Position in the table.
        index: usize,
        /// Offset of the entry in the file.
        offset: u64,
        /// What is wrong.
        problem: SectionProblem,
    },
    /// The manifest's SHA-256 is not the one in the footer.
    #[error("manifest digest mismatch: footer says {expected}, manifest bytes hash to {found}")]
    ManifestDigest {
        /// Hex digest in the footer.
        expected: String,
        /// Hex digest of the bytes.
        found: String,
    },
    /// The manifest is not valid canonical JSON of the expected schema.
    #[error("manifest at offset {offset} is invalid")]
    BadManifest {
        /// Manifest offset.
        offset: u64,
        /// What is wrong.
        #[source]
        problem: ManifestProblem,
    },
    /// The manifest and the section table disagree.
    #[error(
        "section {name:?} ({kind}): manifest says {field} = {manifest}, section table says {table}"
    )]
    ManifestMismatch {
        /// Section kind.
        kind: SectionKind,
        /// Section name in the table.
        name: String,
        /// The field that differs.
        field: &'static str,
        /// Manifest value.
        manifest: String,
        /// Table value.
        table: String,
    },
    /// Full verification found sections whose bytes do not hash to their digest.
    #[error("{} section(s) failed SHA-256 verification: {}", failed.len(), failed.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("; "))]
    DigestMismatch {
        /// Each failing section.
        failed: Vec<DigestFailure>,
    },
    /// Padding between sections holds non-zero bytes.
    #[error("padding byte at offset {offset} is not zero")]
    PaddingNotZero {
        /// Offset of the first non-zero padding byte.
        offset: u64,
    },
    /// A payload inside a section is malformed.
    #[error("{section} section: {problem}")]
    BadPayload {
        /// Section kind.
        section: SectionKind,
        /// What is wrong.
        problem: PayloadProblem,
    },
    /// Writer: a section was added out of kind order or twice.
    #[error("section {kind} cannot follow {previous}: sections must be written in kind order, each at most once")]
    KindOrder {
        /// The section being added.
        kind: SectionKind,
        /// The last section written.
        previous: SectionKind,
    },
    /// Writer: the manifest is written by `finish`, never by hand.
    #[error("the manifest section is written by finish(), not added by hand")]
    ManifestByHand,
    /// Writer: an invalid section name.
    #[error("invalid section name {name:?}: 1 to 23 printable ASCII bytes")]
    BadName {
        /// The name.
        name: String,
    },
    /// Writer: the destination exists and replacing it was not asked for.
    #[error("{path} already exists (pass --force to replace it)")]
    DestinationExists {
        /// The destination.
        path: PathBuf,
    },
    /// Writer: a section writer was dropped without `finish`, or an earlier
    /// write failed, so the file cannot be completed.
    #[error("the writer is unusable after an earlier failure")]
    Poisoned,
    /// Writer: the file just written failed its own quick verification.
    #[error("the written file {} failed verification", path.display())]
    WrittenFileInvalid {
        /// The temporary file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// An external expert file is missing, resized or altered.
    #[error("external expert file {file}")]
    ExternalExperts {
        /// The recorded file name.
        file: String,
        /// What is wrong.
        #[source]
        problem: ExternalProblem,
    },
    /// A size computation overflowed u64.
    #[error("size overflow computing {what}")]
    Overflow {
        /// What was being computed.
        what: &'static str,
    },
}

/// What is wrong with an external expert file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExternalProblem {
    /// It cannot be opened, examined or mapped.
    #[error("cannot {op} {}", path.display())]
    Unreadable {
        /// "open", "stat" or "map".
        op: &'static str,
        /// Where it was looked for (next to the .gpack).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Its size is not the one recorded.
    #[error("size is {found} bytes, the .gpack recorded {recorded} (resized or replaced?)")]
    Resized {
        /// Size on disk.
        found: u64,
        /// Size recorded.
        recorded: u64,
    },
    /// Slices whose bytes do not hash to their recorded SHA-256 (or lie
    /// outside the file); the first one (in table order) is named.
    #[error(
        "{count} slice(s) failed their SHA-256 check; the first is layer {layer} expert {expert} \
         {part} [{offset}, +{size})"
    )]
    SliceDigest {
        /// How many failed.
        count: u64,
        /// Layer of the first.
        layer: u64,
        /// Expert of the first.
        expert: u64,
        /// "gate", "up" or "down".
        part: &'static str,
        /// Offset in the file.
        offset: u64,
        /// Size.
        size: u64,
    },
}

/// One section whose bytes do not match its digest.
#[derive(Debug, Clone)]
pub struct DigestFailure {
    /// Kind.
    pub kind: SectionKind,
    /// Name.
    pub name: String,
    /// Offset of the payload.
    pub offset: u64,
    /// Digest recorded in the table (hex).
    pub expected: String,
    /// Digest of the bytes (hex).
    pub found: String,
}

impl std::fmt::Display for DigestFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}) at offset {}: expected {}, found {}",
            self.name, self.kind, self.offset, self.expected, self.found
        )
    }
}

/// What is wrong with a section table entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SectionProblem {
    /// Kind number not defined by this version.
    #[error("unknown section kind {0}")]
    UnknownKind(u32),
    /// Reserved flags set.
    #[error("reserved section flags {0:#x} are set")]
    ReservedFlags(u32),
    /// Alignment is not the one the kind requires.
    #[error("alignment is {found}, kind {kind} requires {expected}")]
    Alignment {
        /// Kind.
        kind: SectionKind,
        /// Found.
        found: u64,
        /// Required.
        expected: u64,
    },
    /// Name is not NUL-terminated printable ASCII.
    #[error("name is not NUL-terminated printable ASCII with zero fill")]
    Name,
    /// Kinds are not strictly increasing.
    #[error("kind {kind} after {previous}: kinds must be strictly increasing")]
    Order {
        /// Kind.
        kind: SectionKind,
        /// Previous kind.
        previous: SectionKind,
    },
    /// Offset is not where the previous section's end, aligned, puts it.
    #[error("payload offset {found} is not {expected} (previous end aligned to {alignment}): gap, overlap or misalignment")]
    Offset {
        /// Found.
        found: u64,
        /// Expected.
        expected: u64,
        /// Alignment.
        alignment: u64,
    },
    /// Payload runs past the section table.
    #[error("payload [{offset}, +{size}) runs past the section table at {limit}")]
    OutOfBounds {
        /// Offset.
        offset: u64,
        /// Size.
        size: u64,
        /// The section table offset.
        limit: u64,
    },
    /// The last section is not the manifest, or the manifest is not last.
    #[error("the manifest must be the last section")]
    ManifestNotLast,
}

/// Shorthand.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `error: cause: cause…` on one line: how every gpack program prints an
/// error. Messages never repeat their cause (it is their `source`), so a
/// plain `{e}` shows only the outermost step; print this instead.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// An error that may name a file in its own message: what a caller's
/// context need not repeat ([`job_context`]).
pub trait NamesFile {
    /// Whether this error's message names `path` already.
    fn names_file(&self, path: &std::path::Path) -> bool;
}

impl NamesFile for Error {
    fn names_file(&self, path: &std::path::Path) -> bool {
        matches!(self, Error::Io { path: p, .. } if p == path)
    }
}

/// The context of a failed job that reads `src` and writes `out`, the one
/// form every front end (CLI, Python) gives it: `VERB SRC to OUT`, or `VERB
/// to OUT` when the cause names `src` already (`open SRC: …`), so each
/// path is printed once.
pub fn job_context(
    verb: &str,
    src: &std::path::Path,
    out: &std::path::Path,
    cause: &dyn NamesFile,
) -> String {
    if cause.names_file(src) {
        format!("{verb} to {}", out.display())
    } else {
        format!("{verb} {} to {}", src.display(), out.display())
    }
}

pub(crate) fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

pub(crate) fn add(a: u64, b: u64, what: &'static str) -> Result<u64> {
    a.checked_add(b).ok_or(Error::Overflow { what })
}

pub(crate) fn mul(a: u64, b: u64, what: &'static str) -> Result<u64> {
    a.checked_mul(b).ok_or(Error::Overflow { what })
}

/// Rounds `v` up to a multiple of `align` (a power of two).
pub(crate) fn align_up(v: u64, align: u64, what: &'static str) -> Result<u64> {
    debug_assert!(align.is_power_of_two());
    Ok(add(v, align - 1, what)? & !(align - 1))
}
