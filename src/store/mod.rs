//! The data directory: exclusive ownership (a lock file) and atomic 0600 writes, under which the
//! three files that survive a restart are kept: [`settings`], [`bans`] and the waiting line
//! ([`queue`]).
//!
//! Every write goes to a temp file in the same directory, is fsynced, renamed over the target and
//! the directory fsynced, so a crash leaves either the old file or the new one, never half of one.

mod bans;
mod queue;
mod settings;
mod spool;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub(crate) use bans::{load_bans, save_bans, spawn_ban_writer};
pub(crate) use queue::{clear_queue, restore_queue, save_queue, spawn_queue_snapshots};
pub(crate) use settings::{SETTINGS_FILE, apply_settings_file, save_settings};
pub(crate) use spool::{SpoolClaim, SpoolDir};

const LOCK_FILE: &str = ".lock";

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("data dir {path}: {source}")]
    Dir { path: PathBuf, source: io::Error },
    #[error(
        "data dir {path} is in use by another concert process (lock held on {path}/.lock); give each instance its own -data-dir"
    )]
    Locked { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {message} (fix or delete the file)")]
    Corrupt { path: PathBuf, message: String },
}

/// How long opening a data directory waits for its lock. The lock belongs to the open file,
/// so a process that forked while the previous instance held it (a supervisor or test harness
/// starting something else) keeps it held until that child execs or exits, a moment after the
/// previous instance let go; a restart right then would otherwise be refused.
pub(crate) const LOCK_PATIENCE: Duration = Duration::from_millis(500);

const LOCK_RETRY: Duration = Duration::from_millis(10);

/// An opened, locked data directory. The lock is held for the life of the value.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    _lock: File,
    /// Held from taking a snapshot of the state until its file is in place, so a slower, older
    /// save (the periodic writer) can never land after a newer one (an admin flush).
    saving: parking_lot::Mutex<()>,
    /// How the writes have gone, so an operator can see that state is being kept.
    record: parking_lot::Mutex<SaveRecord>,
}

/// How a data directory's writes have gone since start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SaveRecord {
    pub saved: u64,
    pub failed: u64,
    pub last_saved: Option<SystemTime>,
    /// Why the latest write failed, while no write has succeeded since.
    pub failing: Option<String>,
}

impl DataDir {
    /// Creates the directory (0700) if needed, then takes its lock, failing when another
    /// process still holds it after [`LOCK_PATIENCE`].
    pub fn open(path: &Path) -> Result<DataDir, PersistError> {
        let dir_error = |source| PersistError::Dir {
            path: path.to_path_buf(),
            source,
        };
        fs::create_dir_all(path).map_err(dir_error)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(dir_error)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path.join(LOCK_FILE))
            .map_err(dir_error)?;
        let asked = std::time::Instant::now();
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if asked.elapsed() < LOCK_PATIENCE => {
                    std::thread::sleep(LOCK_RETRY);
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(PersistError::Locked {
                        path: path.to_path_buf(),
                    });
                }
                Err(fs::TryLockError::Error(e)) => return Err(dir_error(e)),
            }
        }
        let dir = DataDir {
            path: path.to_path_buf(),
            _lock: lock,
            saving: parking_lot::Mutex::new(()),
            record: parking_lot::Mutex::default(),
        };
        // Fail fast on a read-only or full directory rather than at the first real save.
        dir.write_atomic(".probe", b"ok")?;
        let _ = fs::remove_file(path.join(".probe"));
        Ok(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// How the writes have gone since the directory was opened.
    pub fn saves(&self) -> SaveRecord {
        self.record.lock().clone()
    }

    /// The file's bytes, or `None` when it does not exist.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, PersistError> {
        let path = self.file(name);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(PersistError::Io { path, source }),
        }
    }

    /// Replaces `name` with `bytes` atomically, mode 0600.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), PersistError> {
        let target = self.file(name);
        // tempfile creates the file 0600 with a random name (O_EXCL) and removes it again if
        // anything below fails.
        let written = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(&self.path)
            .and_then(|mut temp| {
                temp.write_all(bytes)?;
                temp.as_file().sync_all()?;
                temp.persist(&target).map_err(|failed| failed.error)
            });
        if let Err(source) = written {
            let error = PersistError::Io {
                path: target,
                source,
            };
            let mut record = self.record.lock();
            record.failed += 1;
            record.failing = Some(error.to_string());
            return Err(error);
        }
        {
            let mut record = self.record.lock();
            record.saved += 1;
            record.last_saved = Some(SystemTime::now());
            record.failing = None;
        }
        // Best effort: make the rename itself durable.
        if let Ok(dir) = File::open(&self.path) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    /// Held from taking a snapshot of the state until its file is in place: saves of one
    /// directory never overtake each other.
    fn ordered(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.saving.lock()
    }

    /// Renames `name` to `name.bad` so a broken file is kept for inspection but not read again.
    pub fn quarantine(&self, name: &str) -> Result<PathBuf, PersistError> {
        let from = self.file(name);
        let to = self.file(&format!("{name}.bad"));
        fs::rename(&from, &to).map_err(|source| PersistError::Io { path: from, source })?;
        Ok(to)
    }

    pub fn remove(&self, name: &str) -> Result<(), PersistError> {
        let path = self.file(name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(PersistError::Io { path, source }),
        }
    }
}

/// Decodes a JSON document that must be an object. serde's derived decoders also take a struct
/// written as an array of its fields (`[1, "", {...}]`), a form no operator or client means.
pub(crate) fn json_object<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    match serde_json::from_slice::<serde_json::Value>(bytes)? {
        object @ serde_json::Value::Object(_) => serde_json::from_value(object),
        _ => Err(serde::de::Error::custom("expected a JSON object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queue::QUEUE_FILE;

    #[test]
    fn creates_the_dir_private_and_writes_0600_atomically() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("data");
        let dir = DataDir::open(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        dir.write_atomic("x.json", b"one").unwrap();
        dir.write_atomic("x.json", b"two").unwrap();
        assert_eq!(dir.read("x.json").unwrap().unwrap(), b"two");
        let mode = fs::metadata(dir.file("x.json"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let leftovers: Vec<_> = fs::read_dir(&path)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        assert!(dir.read("missing").unwrap().is_none());
    }

    #[test]
    fn saves_are_counted_and_a_failure_shows_until_the_next_success() {
        let root = tempfile::tempdir().unwrap();
        let dir = DataDir::open(root.path()).unwrap();
        let opened = dir.saves();
        assert!(opened.last_saved.is_some(), "the probe write counts");
        dir.write_atomic("x.json", b"one").unwrap();
        assert_eq!(dir.saves().saved, opened.saved + 1);
        // No such subdirectory: the rename into place fails.
        dir.write_atomic("gone/x.json", b"two").unwrap_err();
        let failed = dir.saves();
        assert_eq!(failed.failed, 1);
        assert!(
            failed
                .failing
                .as_deref()
                .is_some_and(|why| why.contains("gone/x.json"))
        );
        dir.write_atomic("x.json", b"three").unwrap();
        let recovered = dir.saves();
        assert_eq!((recovered.failed, recovered.failing), (1, None));
    }

    #[test]
    fn a_second_owner_is_refused_until_the_first_lets_go() {
        let root = tempfile::tempdir().unwrap();
        let first = DataDir::open(root.path()).unwrap();
        let second = DataDir::open(root.path()).unwrap_err();
        assert!(matches!(second, PersistError::Locked { .. }), "{second}");
        assert!(
            second
                .to_string()
                .contains("in use by another concert process")
        );
        drop(first);
        DataDir::open(root.path()).unwrap();
    }

    #[test]
    fn a_lock_let_go_within_the_patience_is_taken() {
        let root = tempfile::tempdir().unwrap();
        let first = DataDir::open(root.path()).unwrap();
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(LOCK_PATIENCE / 5);
            drop(first);
        });
        DataDir::open(root.path()).expect("taken once the first let go");
        letting_go.join().unwrap();
    }

    #[test]
    fn quarantine_keeps_the_bad_file_aside() {
        let root = tempfile::tempdir().unwrap();
        let dir = DataDir::open(root.path()).unwrap();
        dir.write_atomic(QUEUE_FILE, b"garbage").unwrap();
        let bad = dir.quarantine(QUEUE_FILE).unwrap();
        assert!(bad.ends_with("queue.snapshot.bad"));
        assert!(dir.read(QUEUE_FILE).unwrap().is_none());
    }
}
