//! The data directory: exclusive ownership (a lock file), atomic 0600 writes, and the formats of
//! `settings.json` and `queue.snapshot`.
//!
//! Every write goes to a temp file in the same directory, is fsynced, renamed over the target and
//! the directory fsynced, so a crash leaves either the old file or the new one, never half of one.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::abuse::{BanSnapshot, ImportReport, Registry};
use crate::config::table::{SETTINGS, setting};
use crate::config::{Config, Source};
use crate::room::{Room, Snapshot, SnapshotError, WallTime};

pub const SETTINGS_FILE: &str = "settings.json";
pub const QUEUE_FILE: &str = "queue.snapshot";
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
pub const LOCK_PATIENCE: Duration = Duration::from_millis(500);
const LOCK_RETRY: Duration = Duration::from_millis(10);

/// An opened, locked data directory. The lock is held for the life of the value.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    _lock: File,
    /// Held from taking a snapshot of the state until its file is in place, so a slower, older
    /// save (the periodic writer) can never land after a newer one (an admin flush).
    saving: parking_lot::Mutex<()>,
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
        let temp = self
            .path
            .join(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
        let io_error = |source| PersistError::Io {
            path: target.clone(),
            source,
        };
        let result = (|| {
            let mut file = OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&temp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            drop(file);
            fs::rename(&temp, &target)?;
            // Best effort: make the rename itself durable.
            if let Ok(dir) = File::open(&self.path) {
                let _ = dir.sync_all();
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result.map_err(io_error)
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

/// `settings.json`: only the values an operator changed at runtime.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SettingsFile {
    #[serde(default)]
    pub version: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub updated: String,
    #[serde(default)]
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// Keys beside `version`, `updated` and `settings`, most likely a setting put at the top level
    /// by hand; reported at start-up, never written back.
    #[serde(flatten, skip_serializing)]
    pub misplaced: serde_json::Map<String, serde_json::Value>,
}

impl SettingsFile {
    /// Parses the file; a version from the future or invalid JSON is an error naming the file.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<SettingsFile, PersistError> {
        let corrupt = |message: String| PersistError::Corrupt {
            path: path.to_path_buf(),
            message,
        };
        let file: SettingsFile =
            json_object(bytes).map_err(|e| corrupt(format!("invalid JSON: {e}")))?;
        if file.version > 1 {
            return Err(corrupt(format!(
                "version {} is newer than this concert understands (1)",
                file.version
            )));
        }
        Ok(file)
    }

    /// Indented JSON with a trailing newline, as operators read and diff it.
    pub fn render(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// Applies `settings.json` on top of flags/env/defaults. Unknown and restart-only keys are logged
/// and skipped (an old file must not stop a newer binary); a value of the wrong type or out of
/// range stops start-up naming the file. Returns how many values were applied.
pub fn apply_settings_file(dir: &DataDir, config: &mut Config) -> Result<usize, PersistError> {
    let path = dir.file(SETTINGS_FILE);
    let Some(bytes) = dir.read(SETTINGS_FILE)? else {
        return Ok(0);
    };
    let file = SettingsFile::parse(&path, &bytes)?;
    for key in file.misplaced.keys() {
        tracing::warn!(
            file = %path.display(),
            key = %key,
            "key outside \"settings\" ignored (settings belong inside the \"settings\" object)"
        );
    }
    let mut applied = 0;
    for (key, value) in &file.settings {
        match setting(key) {
            None => {
                tracing::warn!(file = %path.display(), key = %key, "unknown setting ignored");
                continue;
            }
            Some((_, def)) if def.restart => {
                tracing::warn!(
                    file = %path.display(),
                    key = %key,
                    "restart-only setting ignored in the file: set {} in the environment",
                    def.env
                );
                continue;
            }
            Some(_) => {}
        }
        config
            .set_json(key, value)
            .map_err(|message| PersistError::Corrupt {
                path: path.clone(),
                message,
            })?;
        applied += 1;
    }
    Ok(applied)
}

/// Writes every value whose source is the file (or a live change) to `settings.json`.
pub fn save_settings(dir: &DataDir, config: &Config) -> Result<(), PersistError> {
    let _ordered = dir.saving.lock();
    let mut file = SettingsFile {
        version: 1,
        updated: WallTime::from_system(std::time::SystemTime::now()).to_string(),
        ..SettingsFile::default()
    };
    for def in SETTINGS {
        if config.source(def.key) == Source::File
            && let Some(value) = config.value_json(def.key)
        {
            file.settings.insert(def.key.to_string(), value);
        }
    }
    dir.write_atomic(SETTINGS_FILE, &file.render())
}

/// Restores the line saved at the last stop (or by the periodic snapshot before a crash), then
/// deletes the file so it is never imported twice. A malformed file is set aside as `.bad` and
/// start-up goes on with an empty line; an unreadable one is left where it is.
pub fn restore_queue(dir: &DataDir, room: &Room) -> Result<usize, PersistError> {
    let path = dir.file(QUEUE_FILE);
    let bytes = match dir.read(QUEUE_FILE) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(0),
        Err(e) => {
            tracing::warn!("{e}; starting with an empty line and leaving the file in place");
            return Ok(0);
        }
    };
    let imported = Snapshot::from_json(&bytes)
        .and_then(|snapshot| room.import_snapshot(snapshot, std::time::SystemTime::now()));
    match imported {
        Ok(count) => {
            dir.remove(QUEUE_FILE)?;
            Ok(count)
        }
        Err(SnapshotError::NotPristine) => Err(PersistError::Corrupt {
            path,
            message: SnapshotError::NotPristine.to_string(),
        }),
        Err(message) => {
            let bad = dir.quarantine(QUEUE_FILE)?;
            tracing::warn!(
                file = %path.display(),
                kept_as = %bad.display(),
                "queue snapshot refused ({message}); starting with an empty line"
            );
            Ok(0)
        }
    }
}

/// Saves the line (tickets in order, with their tokens) for the next start.
pub fn save_queue(dir: &DataDir, room: &Room) -> Result<usize, PersistError> {
    let _ordered = dir.saving.lock();
    let snapshot = room.export_snapshot(std::time::SystemTime::now());
    let count = snapshot.tickets.len();
    let bytes = snapshot.to_json().map_err(|e| PersistError::Corrupt {
        path: dir.file(QUEUE_FILE),
        message: e.to_string(),
    })?;
    dir.write_atomic(QUEUE_FILE, &bytes)?;
    Ok(count)
}

/// Removes a saved line that is no longer true (the line emptied), ordered with the saves.
pub fn clear_queue(dir: &DataDir) -> Result<usize, PersistError> {
    let _ordered = dir.saving.lock();
    dir.remove(QUEUE_FILE).map(|()| 0)
}

/// Snapshots the line every `every` while it changes, so a crash (`kill -9`, power loss) loses at
/// most that much of the line. Writes run on the blocking pool; a write that takes longer than the
/// period stretches the period, which bounds the cost for very long lines.
///
/// `stop` ends the task between writes, never during one (see [`spawn_ban_writer`]).
pub fn spawn_queue_snapshots(
    dir: Arc<DataDir>,
    room: Arc<Room>,
    every: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last_seen = None;
        let mut period = every;
        loop {
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                () = stop.cancelled() => return,
            }
            let stats = room.stats();
            let fingerprint = (stats.issued, stats.now_serving, stats.live_queue_depth);
            if last_seen == Some(fingerprint) {
                continue;
            }
            let (dir, room) = (dir.clone(), room.clone());
            let started = std::time::Instant::now();
            let written = tokio::task::spawn_blocking(move || {
                // An empty line leaves no file behind: nothing to restore.
                if room.stats().live_queue_depth == 0 {
                    clear_queue(&dir)
                } else {
                    save_queue(&dir, &room)
                }
            })
            .await;
            match written {
                Ok(Ok(_)) => last_seen = Some(fingerprint),
                Ok(Err(e)) => tracing::warn!("periodic queue snapshot failed: {e}"),
                Err(e) => tracing::warn!("periodic queue snapshot task failed: {e}"),
            }
            period = every.max(started.elapsed() * 2);
        }
    })
}

pub const BANS_FILE: &str = "bans.json";

/// `bans.json`: every client with offense history (expired bans too, so escalation survives a
/// restart) and the active range bans.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BansFile {
    #[serde(default)]
    pub version: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub saved: String,
    #[serde(flatten)]
    pub bans: BanSnapshot,
}

/// Restores bans at start. Anything but a missing file that cannot be read exactly stops
/// start-up: silently starting without them would lift permanent bans.
pub fn load_bans(dir: &DataDir, registry: &Registry) -> Result<ImportReport, PersistError> {
    let path = dir.file(BANS_FILE);
    let Some(bytes) = dir.read(BANS_FILE)? else {
        return Ok(ImportReport::default());
    };
    let file: BansFile = serde_json::from_slice(&bytes).map_err(|e| PersistError::Corrupt {
        path: path.clone(),
        message: format!("invalid JSON: {e}"),
    })?;
    if file.version > 1 {
        return Err(PersistError::Corrupt {
            path,
            message: format!(
                "version {} is newer than this concert understands (1)",
                file.version
            ),
        });
    }
    Ok(registry.import(&file.bans))
}

/// Writes the registry's bans and offense history.
pub fn save_bans(dir: &DataDir, registry: &Registry) -> Result<(), PersistError> {
    let _ordered = dir.saving.lock();
    let file = BansFile {
        version: 1,
        saved: WallTime::from_system(std::time::SystemTime::now()).to_string(),
        bans: registry.export(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file).unwrap_or_default();
    bytes.push(b'\n');
    dir.write_atomic(BANS_FILE, &bytes)
}

/// Saves bans within a second of any change. A failed save is retried every second and logged
/// once until it recovers.
///
/// `stop` ends the task between saves, never during one: a save runs on the blocking pool and
/// holds the data directory (and its lock) until it is done, so aborting the task instead would
/// let the process report itself stopped while a write still holds the lock.
pub fn spawn_ban_writer(
    dir: Arc<DataDir>,
    registry: Arc<Registry>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut saved_at = registry.changes();
        let mut failing = false;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => return,
            }
            let changes = registry.changes();
            if changes == saved_at {
                continue;
            }
            let (dir, registry) = (dir.clone(), registry.clone());
            let result = tokio::task::spawn_blocking(move || save_bans(&dir, &registry)).await;
            match result {
                Ok(Ok(())) => {
                    if failing {
                        tracing::info!("bans.json saved again");
                    }
                    failing = false;
                    saved_at = changes;
                }
                Ok(Err(e)) if !failing => {
                    tracing::error!("cannot save bans: {e}; retrying every second");
                    failing = true;
                }
                Ok(Err(_)) => {}
                Err(e) => tracing::error!("ban writer task failed: {e}"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn settings_must_be_a_json_object() {
        let path = Path::new("/data/settings.json");
        for bad in [&b"[1,\"\",{\"cap\":5}]"[..], b"[]", b"5", b"null"] {
            let error = SettingsFile::parse(path, bad).unwrap_err().to_string();
            assert!(error.contains("/data/settings.json"), "{error}");
        }
        let file = SettingsFile::parse(path, br#"{"version":1,"settings":{"cap":5}}"#).unwrap();
        assert_eq!(file.settings["cap"], 5);
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

    #[test]
    fn settings_file_round_trips_and_refuses_garbage() {
        let path = Path::new("/data/settings.json");
        let mut file = SettingsFile {
            version: 1,
            updated: "2026-11-30T10:00:00Z".into(),
            ..SettingsFile::default()
        };
        file.settings.insert("cap".into(), serde_json::json!(9));
        let bytes = file.render();
        assert!(bytes.ends_with(b"}\n"));
        assert!(String::from_utf8_lossy(&bytes).contains("  \"settings\""));
        let back = SettingsFile::parse(path, &bytes).unwrap();
        assert_eq!(back.settings["cap"], 9);
        let err = SettingsFile::parse(path, b"{").unwrap_err();
        assert!(err.to_string().starts_with("/data/settings.json"), "{err}");
        assert!(SettingsFile::parse(path, br#"{"version":2}"#).is_err());
        assert!(SettingsFile::parse(path, br#"{"settings":{}}"#).is_ok());
    }

    #[test]
    fn keys_beside_settings_are_kept_apart_and_never_written_back() {
        let path = Path::new("/data/settings.json");
        let file = SettingsFile::parse(
            path,
            br#"{"version":1,"settings":{"cap":3},"stream_cap":1}"#,
        )
        .unwrap();
        assert_eq!(file.settings["cap"], 3);
        assert_eq!(
            file.misplaced.keys().collect::<Vec<_>>(),
            vec!["stream_cap"]
        );
        assert!(!String::from_utf8_lossy(&file.render()).contains("stream_cap"));
    }
}
