//! The private directory where request bodies too large to keep in memory wait for their page
//! slot: `uploads/` in the data directory, or a directory of its own in the system's temp
//! directory when there is no data directory (made when the first body needs it, so a process
//! that never buffers to disk leaves nothing behind even if it is killed).
//!
//! Each body goes into a file without a name (`O_TMPFILE`, or created and unlinked at once
//! where the system lacks it): it is gone as soon as its last handle closes, whether the request
//! ended well, failed or was cancelled, and even if the process is killed.

use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

#[derive(Debug)]
enum Place {
    InDataDir(PathBuf),
    /// Made in the system temp directory on first use, and removed when the value is dropped.
    InSystemTemp(OnceLock<tempfile::TempDir>),
}

/// Name of the spool directory inside the data directory.
const UPLOADS_DIR: &str = "uploads";

/// The spool directory (mode 0700).
#[derive(Debug)]
pub(crate) struct SpoolDir {
    place: Place,
    /// Bytes of the files now in the directory (claimed before they are written).
    in_use: AtomicU64,
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
        Ok(SpoolDir {
            place: Place::InDataDir(path),
            in_use: AtomicU64::new(0),
        })
    }

    /// A fresh `concert-uploads-…` directory (0700) in the system temp directory, made when
    /// first needed and removed when the value is dropped.
    pub(crate) fn in_system_temp() -> SpoolDir {
        SpoolDir {
            place: Place::InSystemTemp(OnceLock::new()),
            in_use: AtomicU64::new(0),
        }
    }

    /// The directory, made now if it is the system temp one and not made yet.
    pub(crate) fn path(&self) -> io::Result<&Path> {
        let own = match &self.place {
            Place::InDataDir(path) => return Ok(path),
            Place::InSystemTemp(own) => own,
        };
        if let Some(made) = own.get() {
            return Ok(made.path());
        }
        let made = tempfile::Builder::new()
            .prefix("concert-uploads-")
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir()?;
        // Two first bodies at once: one directory is kept, the other is removed as it drops.
        let _ = own.set(made);
        own.get()
            .map(tempfile::TempDir::path)
            .ok_or_else(|| io::Error::other("the upload directory was not kept"))
    }

    /// Bytes of the files now in the directory.
    pub(crate) fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// A new nameless file (0600) in the directory. Blocking: call it off the async workers.
    pub(crate) fn new_file(&self) -> io::Result<File> {
        let file = tempfile::tempfile_in(self.path()?)?;
        // `O_TMPFILE` files take their mode from the umask; the directory already keeps
        // others out, and this keeps a file reopened through `/proc` private as well.
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        Ok(file)
    }
}

/// The room one body's file takes in the spool directory; given back when it is dropped (with
/// the file).
#[derive(Debug)]
pub(crate) struct SpoolClaim {
    spool: Arc<SpoolDir>,
    bytes: u64,
}

/// Writing `wanted` more bytes would take the directory past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpoolFull;

impl SpoolClaim {
    pub(crate) fn new(spool: &Arc<SpoolDir>) -> SpoolClaim {
        SpoolClaim {
            spool: Arc::clone(spool),
            bytes: 0,
        }
    }

    /// Claims `wanted` more bytes unless that takes the directory past `limit` (0 = none).
    pub(crate) fn grow(&mut self, wanted: u64, limit: u64) -> Result<(), SpoolFull> {
        let in_use = &self.spool.in_use;
        if limit == 0 {
            in_use.fetch_add(wanted, Ordering::Relaxed);
        } else {
            in_use
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                    used.checked_add(wanted).filter(|total| *total <= limit)
                })
                .map_err(|_| SpoolFull)?;
        }
        self.bytes += wanted;
        Ok(())
    }
}

impl Drop for SpoolClaim {
    fn drop(&mut self) {
        self.spool.in_use.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_private_and_its_files_have_no_name() {
        let data = tempfile::tempdir().unwrap();
        let spool = SpoolDir::in_data_dir(data.path()).unwrap();
        let mode = fs::metadata(spool.path().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = spool.new_file().unwrap();
        assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(spool.path().unwrap()).unwrap().count(), 0);

        // Widened by hand: narrowed again on the next start.
        fs::set_permissions(spool.path().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        let again = SpoolDir::in_data_dir(data.path()).unwrap();
        let mode = fs::metadata(again.path().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn claims_share_the_directory_limit_and_give_it_back_when_dropped() {
        let spool = Arc::new(SpoolDir::in_system_temp());
        let mut first = SpoolClaim::new(&spool);
        let mut second = SpoolClaim::new(&spool);
        first.grow(600, 1_000).unwrap();
        assert_eq!(second.grow(500, 1_000), Err(SpoolFull));
        second.grow(400, 1_000).unwrap();
        assert_eq!(spool.in_use(), 1_000);
        drop(first);
        assert_eq!(spool.in_use(), 400);
        second.grow(5_000, 0).unwrap();
        drop(second);
        assert_eq!(spool.in_use(), 0);
    }

    #[test]
    fn a_temp_spool_is_made_when_first_needed_and_goes_with_its_owner() {
        let spool = SpoolDir::in_system_temp();
        assert!(matches!(&spool.place, Place::InSystemTemp(own) if own.get().is_none()));
        let _file = spool.new_file().unwrap();
        let path = spool.path().unwrap().to_path_buf();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(spool);
        assert!(!path.exists());
    }
}
