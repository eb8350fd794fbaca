//! [`AtomicFile`]: the one way files of this workspace are written durably. It lives in
//! this crate, which has no internal dependencies, so that every crate above can use it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::faults::{self, Op};

/// A file written atomically: bytes go to a temporary file beside `path`;
/// [`commit`](Self::commit) flushes, fsyncs, renames it over `path` and fsyncs the
/// directory, so that after a crash `path` holds either its old content or all of the new
/// one. Dropped without a commit (an error on the way), the temporary file is removed.
///
/// ```
/// use std::io::Write;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("state");
/// let mut f = tidemark_bloom::AtomicFile::create(&path)?;
/// f.write_all(b"hello")?;
/// f.commit()?;
/// assert_eq!(std::fs::read(&path)?, b"hello");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Starts writing `path`: creates `.<name>.tmp-<pid>` in the same directory (see
    /// [`is_temp_name`]).
    ///
    /// # Errors
    /// I/O errors creating the temporary file; a path without a file name.
    pub fn create(path: impl AsRef<Path>) -> io::Result<AtomicFile> {
        let path = path.as_ref().to_path_buf();
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
        let tmp = dir_of(&path).join(format!(
            ".{}.tmp-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        faults::check(&path, Op::Create)?;
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        Ok(AtomicFile {
            path,
            tmp,
            file: Some(BufWriter::with_capacity(1 << 16, file)),
        })
    }

    /// Writes `bytes` to `path` atomically in one call.
    ///
    /// # Errors
    /// I/O errors (the temporary file is removed).
    pub fn write_all_to(path: impl AsRef<Path>, bytes: &[u8]) -> io::Result<()> {
        let mut f = AtomicFile::create(path)?;
        f.write_all(bytes)?;
        f.commit()
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes, fsyncs, renames over the final path and fsyncs the directory.
    ///
    /// # Errors
    /// I/O errors (the temporary file is removed, the final path is untouched).
    pub fn commit(mut self) -> io::Result<()> {
        let Some(buffered) = self.file.take() else {
            return Err(io::Error::other("atomic file already finished"));
        };
        let result = (|| {
            let file = buffered
                .into_inner()
                .map_err(io::IntoInnerError::into_error)?;
            faults::check(&self.path, Op::Sync)?;
            file.sync_all()?;
            drop(file);
            faults::check(&self.path, Op::Rename)?;
            fs::rename(&self.tmp, &self.path)?;
            sync_dir(dir_of(&self.path))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&self.tmp);
        }
        result
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => {
                let n = faults::allowance(&self.path, buf.len())?;
                if n < buf.len() {
                    f.write_all(buf.get(..n).unwrap_or(buf))?;
                    return Err(faults::short_write_error());
                }
                f.write(buf)
            }
            None => Err(io::Error::other("atomic file already finished")),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.file {
            Some(f) => faults::write_all(&self.path, f, buf),
            None => Err(io::Error::other("atomic file already finished")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Whether `name` (a file name, no directory) is one [`AtomicFile`] gives its temporary
/// files: `.<name>.tmp-<pid>`. Such a file left after a crash was never committed, and a
/// recovery may delete it.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Fsyncs a directory so that entries created, renamed or removed in it are durable. A
/// no-op where directories cannot be opened as files (not Unix).
///
/// # Errors
/// I/O errors opening or syncing the directory.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    faults::check(dir, Op::SyncDir)?;
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_without_commit_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        let mut f = AtomicFile::create(&path).unwrap();
        f.write_all(b"partial").unwrap();
        drop(f);
        assert!(!path.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_failed_rename_removes_the_temp_file_and_keeps_the_target() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a non-empty directory fails: the commit's last steps.
        let path = dir.path().join("target");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inside"), b"kept").unwrap();
        let mut f = AtomicFile::create(&path).unwrap();
        f.write_all(b"new").unwrap();
        assert!(f.commit().is_err());
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["target"]);
        assert_eq!(fs::read(path.join("inside")).unwrap(), b"kept");
        assert!(AtomicFile::write_all_to(&path, b"new").is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_create_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("x");
        assert!(AtomicFile::write_all_to(&path, b"x").is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(AtomicFile::create(Path::new("/")).is_err());
    }

    #[test]
    fn temp_names_are_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let f = AtomicFile::create(dir.path().join("MANIFEST")).unwrap();
        let name = fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap();
        assert!(is_temp_name(name.file_name().to_str().unwrap()));
        drop(f);
        assert!(!is_temp_name("MANIFEST"));
        assert!(!is_temp_name("seg-1.tms"));
    }

    #[test]
    fn commit_replaces_the_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        fs::write(&path, b"old").unwrap();
        AtomicFile::write_all_to(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
