//! An atomically published file that is not a GPACK being written section
//! by section: bytes placed at any offset (a pulled .gpack assembled from
//! its sections), then fsynced and moved into place exactly like
//! [`crate::GpackWriter::finish`] does, through the same locked temporary
//! file ([`crate::temp`]). Until [`AtomicFile::commit`] the destination is
//! untouched; dropping the value, an error or Ctrl-C
//! ([`crate::remove_live_temp_files`]) removes the temporary file.

use crate::error::{io, Error, Result};
use crate::temp::TempFile;
use crate::write::{persist, sync_parent};
use std::fs::File;
use std::path::{Path, PathBuf};

/// A file built as `.<out>.gpack-tmp.<pid>.<n>` and renamed to `out` on commit.
pub struct AtomicFile {
    out: PathBuf,
    temp: TempFile,
    file: File,
    replace: bool,
}

impl AtomicFile {
    /// Starts a file that will end up at `out`. Fails at once when `out`
    /// exists and `replace` is false (an existing file is never touched).
    pub fn create(out: &Path, replace: bool) -> Result<AtomicFile> {
        if !replace && out.exists() {
            return Err(Error::DestinationExists {
                path: out.to_path_buf(),
            });
        }
        let (temp, file) = TempFile::create(out)?;
        Ok(AtomicFile {
            out: out.to_path_buf(),
            temp,
            file,
            replace,
        })
    }

    /// The temporary file being written.
    pub fn temp_path(&self) -> &Path {
        &self.temp.path
    }

    /// The destination.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// The open temporary file (write access).
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// fsyncs the file, moves it into place (without `replace`, failing if
    /// the destination appeared meanwhile) and fsyncs the directory.
    pub fn commit(mut self) -> Result<PathBuf> {
        let tp = self.temp.path.clone();
        self.file.sync_all().map_err(io("fsync", &tp))?;
        persist(&tp, &self.out, self.replace)?;
        self.temp.disarm();
        sync_parent(&self.out)?;
        Ok(self.out.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn commit_publishes_and_drop_removes() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a.bin");
        let mut a = AtomicFile::create(&out, false).unwrap();
        a.file().write_all(b"abc").unwrap();
        assert!(!out.exists());
        a.commit().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"abc");
        // An existing destination is refused, and left alone.
        assert!(matches!(
            AtomicFile::create(&out, false),
            Err(Error::DestinationExists { .. })
        ));
        let mut b = AtomicFile::create(&out, true).unwrap();
        b.file().write_all(b"new").unwrap();
        let tp = b.temp_path().to_path_buf();
        drop(b);
        assert!(!tp.exists());
        assert_eq!(std::fs::read(&out).unwrap(), b"abc");
    }
}
