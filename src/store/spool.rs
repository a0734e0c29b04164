//! The private directory where request bodies too large to keep in memory wait for their page
//! slot: `uploads/` in the data directory, or a directory of its own in the system's temp
//! directory when there is no data directory.
//!
//! Each body goes into a file without a name (`O_TMPFILE`, or created and unlinked at once
//! where the system lacks it): it is gone as soon as its last handle closes, whether the request
//! ended well, failed or was cancelled, and even if the process is killed.

use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Name of the spool directory inside the data directory.
const UPLOADS_DIR: &str = "uploads";

/// The spool directory (mode 0700).
#[derive(Debug)]
pub(crate) struct SpoolDir {
    path: PathBuf,
    /// Holds the directory made in the system temp directory; it goes when the app does.
    _own: Option<tempfile::TempDir>,
}

impl SpoolDir {
    /// `uploads/` inside `data_dir`, created 0700 (and set back to 0700 if someone widened it).
    pub(crate) fn in_data_dir(data_dir: &Path) -> io::Result<SpoolDir> {
        let path = data_dir.join(UPLOADS_DIR);
        match DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
            }
            Err(e) => return Err(e),
        }
        Ok(SpoolDir { path, _own: None })
    }

    /// A fresh `concert-uploads-…` directory (0700) in the system temp directory, removed when
    /// the value is dropped.
    pub(crate) fn in_system_temp() -> io::Result<SpoolDir> {
        let own = tempfile::Builder::new()
            .prefix("concert-uploads-")
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir()?;
        Ok(SpoolDir {
            path: own.path().to_path_buf(),
            _own: Some(own),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A new nameless file (0600) in the directory. Blocking: call it off the async workers.
    pub(crate) fn new_file(&self) -> io::Result<File> {
        let file = tempfile::tempfile_in(&self.path)?;
        // `O_TMPFILE` files take their mode from the umask; the directory already keeps
        // others out, and this keeps a file reopened through `/proc` private as well.
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_private_and_its_files_have_no_name() {
        let data = tempfile::tempdir().unwrap();
        let spool = SpoolDir::in_data_dir(data.path()).unwrap();
        let mode = fs::metadata(spool.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = spool.new_file().unwrap();
        assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(spool.path()).unwrap().count(), 0);

        // Widened by hand: narrowed again on the next start.
        fs::set_permissions(spool.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let again = SpoolDir::in_data_dir(data.path()).unwrap();
        let mode = fs::metadata(again.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn a_temp_spool_goes_with_its_owner() {
        let spool = SpoolDir::in_system_temp().unwrap();
        let path = spool.path().to_path_buf();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(spool);
        assert!(!path.exists());
    }
}
