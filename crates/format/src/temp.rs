//! Temporary files of the atomic writers (GPACK, GIW, small fixtures).
//!
//! A writer builds `.<name>.gpack-tmp.<pid>.<seq>` next to its destination
//! `<name>` (hidden, and marked as gpack's so that the cleanup below never
//! judges another program's file: a `notes.tmp.1` is not gpack's to remove):
//!
//! - created with `create_new` (`O_CREAT | O_EXCL`), so a planted file or
//!   symlink at that name is never opened, followed or truncated (the next
//!   `seq` is tried instead);
//! - held under an exclusive advisory lock (`flock`) for as long as the
//!   writer lives, through the rename into place. The kernel drops the lock
//!   when the process dies, however it dies (SIGKILL included), so a temp
//!   whose lock can be taken is a dead writer's: [`remove_stale_temps`],
//!   run by every writer when it starts, removes those of *any* destination
//!   in the directory (only names of this pattern, only regular files). This holds across PID namespaces and without procfs,
//!   where a pid lookup would not.
//!
//! Dropping a [`TempFile`] that was not persisted unlinks it;
//! [`remove_live_temp_files`] does the same from a signal handler.

use crate::error::{io, Result};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static LIVE_TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Names tried before giving up on creating a temporary file.
const MAX_TRIES: u32 = 64;

/// Unlinks every temporary file a writer in this process is still building.
/// Meant for a Ctrl-C / SIGTERM handler that exits right after.
pub fn remove_live_temp_files() {
    let list = LIVE_TEMPS.lock().unwrap_or_else(|e| e.into_inner());
    for p in list.iter() {
        let _ = std::fs::remove_file(p);
    }
}

/// A locked temporary file, unlinked on drop unless disarmed (persisted).
pub(crate) struct TempFile {
    pub(crate) path: PathBuf,
    armed: bool,
    /// A handle on the file's open description, which carries the lock
    /// until this value is dropped (after the rename into place).
    _lock: File,
}

impl TempFile {
    /// Removes the directory's stale temps, then creates, opens (write) and
    /// locks a new temporary file for `out`.
    pub(crate) fn create(out: &Path) -> Result<(TempFile, File)> {
        remove_stale_temps(out);
        let mut last = None;
        for _ in 0..MAX_TRIES {
            let path = candidate(out);
            let file = match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(io("create", &path)(e)),
            };
            let lock = file.try_clone().map_err(io("open", &path))?;
            lock.lock().map_err(io("lock", &path))?;
            // Another writer's cleanup may have taken the lock and unlinked
            // the name between create and lock: then start over.
            if !same_file(&path, &lock) {
                continue;
            }
            LIVE_TEMPS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(path.clone());
            let t = TempFile {
                path,
                armed: true,
                _lock: lock,
            };
            return Ok((t, file));
        }
        let path = candidate(out);
        Err(io("create", &path)(last.unwrap_or_else(|| {
            std::io::Error::other("no free temporary file name")
        })))
    }

    /// Keeps the file (it was moved into place).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
        LIVE_TEMPS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| p != &self.path);
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_file(&self.path);
            self.disarm();
        }
    }
}

/// What marks a temporary file as gpack's: `.<name>` + this + `<pid>.<seq>`.
const MARK: &str = ".gpack-tmp.";

/// `.<name>.gpack-tmp.<pid>.<seq>` for the destination `<dir>/<name>`.
fn candidate(out: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(out.file_name().unwrap_or_default());
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    name.push(format!("{MARK}{}.{seq}", std::process::id()));
    out.with_file_name(name)
}

/// Whether `name` is a gpack writer's temporary file name
/// (`.<name>.gpack-tmp.<digits>.<digits>`, `<name>` not empty). Nothing else
/// is ever removed as a temp: other programs' `*.tmp.*` files, and those of
/// gpack writers older than this name (`<out>.tmp.<pid>.<n>`), which cannot
/// be told from them, are left alone.
fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some(i) = rest.rfind(MARK) else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    i > 0
        && rest[i + MARK.len()..]
            .split_once('.')
            .is_some_and(|(pid, seq)| digits(pid) && digits(seq))
}

#[cfg(unix)]
fn same_file(path: &Path, f: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(path), f.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(path: &Path, _f: &File) -> bool {
    path.exists()
}

/// The directory a destination's temps live in.
fn dir_of(out: &Path) -> &Path {
    match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Removes the temporary files in `out`'s directory whose writer is gone
/// (their lock can be taken), for every destination, not only `out`.
/// Returns what was removed. Symlinks and other non-regular files are left
/// alone; errors are ignored (a temp that cannot be judged stays).
pub fn remove_stale_temps(out: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir_of(out)) else {
        return removed;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        if !is_temp_name(&name.to_string_lossy()) {
            continue;
        }
        let path = e.path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_file() => {}
            _ => continue,
        }
        let Ok(f) = File::open(&path) else { continue };
        match f.try_lock() {
            Ok(()) if same_file(&path, &f) => {
                if std::fs::remove_file(&path).is_ok() {
                    removed.push(path);
                }
            }
            Ok(()) | Err(TryLockError::WouldBlock) | Err(TryLockError::Error(_)) => {}
        }
    }
    removed
}

/// The temporary files currently next to `out` that belong to `out` (live
/// or stale): what a test looks at after a writer was killed or dropped.
pub fn temp_files_of(out: &Path) -> Vec<PathBuf> {
    let Some(name) = out.file_name() else {
        return Vec::new();
    };
    let prefix = format!(".{}{MARK}", name.to_string_lossy());
    let Ok(rd) = std::fs::read_dir(dir_of(out)) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with(&prefix) && is_temp_name(&n)
        })
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names() {
        assert!(is_temp_name(".m.gpack.gpack-tmp.123.4"));
        assert!(is_temp_name("..hidden.gpack-tmp.1.0"));
        assert_eq!(
            candidate(Path::new("/d/m.gpack"))
                .file_name()
                .unwrap()
                .to_string_lossy()
                .rsplit_once('.')
                .unwrap()
                .0,
            format!(".m.gpack.gpack-tmp.{}", std::process::id())
        );
        for other in [
            "m.gpack.gpack-tmp.1.2",
            ".m.gpack.gpack-tmp.123",
            ".m.gpack.gpack-tmp.1.2.3",
            ".m.gpack.gpack-tmp.12a.1",
            ".gpack-tmp.1.2",
            "m.gpack.tmp.123.4",
            "m.gpack.tmp.123",
            "notes.tmp.1",
            ".notes.tmp.1.2",
            "m.gpack",
        ] {
            assert!(!is_temp_name(other), "{other}");
        }
    }

    // See: issue 15 (the cleanup removed any unlocked `*.tmp.<n>[.<n>]`).
    #[test]
    fn other_programs_tmp_files_are_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        let keep = [
            "notes.tmp.1",
            "notes.tmp.1.2",
            "m.gpack.tmp.999999.0",
            "m.gpack.gpack-tmp.999999.0",
        ];
        for k in keep {
            std::fs::write(dir.path().join(k), b"not gpack's").unwrap();
        }
        let dead = dir.path().join(".m.gpack.gpack-tmp.999999.0");
        std::fs::write(&dead, b"half a file").unwrap();
        let removed = remove_stale_temps(&dir.path().join("x.gpack"));
        assert_eq!(removed, vec![dead]);
        for k in keep {
            assert_eq!(std::fs::read(dir.path().join(k)).unwrap(), b"not gpack's");
        }
    }

    #[test]
    fn a_live_writers_temp_is_kept_and_a_dead_ones_removed() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.gpack");
        let (live, _f) = TempFile::create(&a).unwrap();
        // A dead writer's temp: no process holds its lock.
        let dead = dir.path().join(".b.giw.gpack-tmp.999999.0");
        std::fs::write(&dead, b"half a file").unwrap();
        // A symlink planted at a temp name, pointing at a file.
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, dir.path().join(".c.gpack.gpack-tmp.1.1")).unwrap();
        let removed = remove_stale_temps(&dir.path().join("other.gpack"));
        assert_eq!(removed, vec![dead.clone()]);
        assert!(live.path.exists(), "a live writer's temp must stay");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        drop(live);
        assert!(temp_files_of(&a).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_at_the_next_name_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("m.gpack");
        let target = dir.path().join("victim");
        std::fs::write(&target, b"keep me").unwrap();
        // Plant links at the next few names this process would try.
        let next = SEQ.load(Ordering::Relaxed);
        for s in next..next + 8 {
            let p = dir
                .path()
                .join(format!(".m.gpack.gpack-tmp.{}.{s}", std::process::id()));
            std::os::unix::fs::symlink(&target, p).unwrap();
        }
        let (t, mut f) = TempFile::create(&out).unwrap();
        std::io::Write::write_all(&mut f, b"new bytes").unwrap();
        let seq: u64 = t
            .path
            .to_string_lossy()
            .rsplit('.')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(seq >= next + 8, "the planted names were skipped");
        assert!(std::fs::symlink_metadata(&t.path)
            .unwrap()
            .file_type()
            .is_file());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        drop(t);
        // The links are not temps of a dead writer (not regular files): kept.
        assert_eq!(temp_files_of(&out).len(), 8);
    }
}
