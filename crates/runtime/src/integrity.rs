//! Integrity of the weights at run time: every section of a .gpack hashed
//! against its SHA-256 from the section table, either before anything runs
//! or in the background while it runs, so that a flipped byte on disk (or in
//! the page cache) is reported instead of giving silently wrong text.
//!
//! The background check opens its own mapping of the file (the same pages
//! of the page cache, no copy) and hashes the sections one after another on
//! one thread at the lowest priority (nice 19 on Linux), paced to one 8 MiB
//! chunk per [`PACE`] (~200 MB/s, under 1 % of a DRAM channel: decode is
//! bound by memory bandwidth, which no priority protects) until someone
//! waits for the verdict ([`Integrity::wait`]), which lifts the pace (full
//! speed, ~1.5 GB/s with SHA-NI). Inputs without digests (GGUF, HF
//! directories, GIW bundles) have nothing to check.

use crate::open::Loaded;
use gpack_format::DigestFailure;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The pause after each hashed chunk while nobody waits for the verdict.
pub const PACE: Duration = Duration::from_millis(40);

/// When the sections are hashed (`--verify`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VerifyMode {
    /// Never.
    Off,
    /// On a background thread, started after the first token (`run`; in
    /// `serve`, the first token or embedding of any request): never delays
    /// a first token.
    #[default]
    Background,
    /// Before the model is loaded, on every core; a mismatch is a start-up
    /// error.
    Before,
}

impl std::str::FromStr for VerifyMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(VerifyMode::Off),
            "background" => Ok(VerifyMode::Background),
            "before" => Ok(VerifyMode::Before),
            _ => Err(format!(
                "unknown verify mode {s:?} (expected off, background or before)"
            )),
        }
    }
}

/// Why a check failed. `Display` says what failed; the cause, if any, is
/// its `source()` (printed once by a chain printer).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// Sections whose bytes do not hash to their digests: the file's
    /// weights are not the ones it was written with.
    #[error(
        "integrity check of {} failed: {}; its weights are not the ones it was written \
         with (a damaged disk or copy): output produced from it may be wrong",
        path.display(),
        list(sections)
    )]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// Each failing section (kind, name, offset, both digests), by
        /// offset.
        sections: Vec<DigestFailure>,
    },
    /// The file no longer opens or validates as a .gpack (removed,
    /// truncated, or damaged outside the sections: header, table,
    /// padding).
    #[error("{} failed", crate::open::named(
        ("integrity check of", "integrity check"),
        &path.display().to_string(),
        &**source,
    ))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Arc<gpack_format::Error>,
    },
    /// The hashing thread (or its pool) could not be started.
    #[error("starting the integrity check")]
    Start {
        /// Why.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
}

fn list(sections: &[DigestFailure]) -> String {
    let each: Vec<String> = sections.iter().map(ToString::to_string).collect();
    format!(
        "{} section(s) do not match their SHA-256: {}",
        each.len(),
        each.join("; ")
    )
}

impl Problem {
    fn of(path: &Path, e: gpack_format::Error) -> Problem {
        match e {
            gpack_format::Error::DigestMismatch { failed } => Problem::Mismatch {
                path: path.to_path_buf(),
                sections: failed,
            },
            e => Problem::Invalid {
                path: path.to_path_buf(),
                source: Arc::new(e),
            },
        }
    }
}

/// Where a check stands.
#[derive(Clone, Debug)]
pub enum Status {
    /// Hashing.
    Running,
    /// Every section matched its digest.
    Ok,
    /// A section did not, or the file could no longer be read.
    Failed(Problem),
}

/// A background check of one file's sections.
#[derive(Clone, Debug)]
pub struct Integrity {
    inner: Arc<(Mutex<Status>, Condvar)>,
    /// Set by [`Integrity::wait`]: hash at full speed.
    urgent: Arc<AtomicBool>,
}

impl Integrity {
    /// Starts hashing the .gpack behind `loaded` on a new thread; `None` for
    /// inputs without section digests.
    pub fn start(loaded: &Loaded) -> Option<Integrity> {
        let Loaded::Gpack { path, .. } = loaded else {
            return None;
        };
        let inner = Arc::new((Mutex::new(Status::Running), Condvar::new()));
        let urgent = Arc::new(AtomicBool::new(false));
        let it = Integrity {
            inner: inner.clone(),
            urgent: urgent.clone(),
        };
        let p = path.clone();
        let spawned = std::thread::Builder::new()
            .name("gpack-verify".into())
            .spawn(move || {
                let status = match check(&p, 1, Some(&urgent)) {
                    Ok(()) => Status::Ok,
                    Err(e) => Status::Failed(e),
                };
                let (m, cv) = &*inner;
                *m.lock().unwrap_or_else(|e| e.into_inner()) = status;
                cv.notify_all();
            });
        if let Err(e) = spawned {
            it.set(Status::Failed(Problem::Start {
                source: Arc::new(e),
            }));
        }
        Some(it)
    }

    fn set(&self, s: Status) {
        let (m, cv) = &*self.inner;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = s;
        cv.notify_all();
    }

    /// The status now.
    pub fn status(&self) -> Status {
        self.inner
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The failure, if the check has failed.
    pub fn failure(&self) -> Option<Problem> {
        match self.status() {
            Status::Failed(m) => Some(m),
            _ => None,
        }
    }

    /// Blocks until the check is done (lifting its pace); its verdict.
    pub fn wait(&self) -> Status {
        self.urgent.store(true, Ordering::Relaxed);
        let (m, cv) = &*self.inner;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        while matches!(*g, Status::Running) {
            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.clone()
    }
}

/// Hashes every section of the .gpack behind `loaded` now, on every core
/// (`--verify=before`); `Ok` for inputs without section digests.
pub fn verify_now(loaded: &Loaded) -> Result<(), Problem> {
    match loaded {
        Loaded::Gpack { path, .. } => check(path, 0, None),
        _ => Ok(()),
    }
}

/// Opens `path` afresh and hashes its sections on `threads` threads (0: the
/// default pool, every core), pausing [`PACE`] after each chunk while
/// `urgent` (when given) is unset.
fn check(path: &Path, threads: usize, urgent: Option<&AtomicBool>) -> Result<(), Problem> {
    let fail = |e| Problem::of(path, e);
    let g = gpack_format::Gpack::open(path).map_err(fail)?;
    if threads == 0 {
        return g.verify_full(&|_| {}).map_err(fail);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|_| "gpack-verify".into())
        .start_handler(|_| lowest_priority())
        .build()
        .map_err(|e| Problem::Start {
            source: Arc::new(e),
        })?;
    let pace = |_| {
        if urgent.is_some_and(|u| !u.load(Ordering::Relaxed)) {
            std::thread::sleep(PACE);
        }
    };
    pool.install(|| g.verify_full(&pace)).map_err(fail)
}

/// Lowers the calling thread to the lowest scheduling priority (Linux: a
/// thread's nice value is its own); elsewhere, or when refused, it keeps
/// its priority.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
    }
}
