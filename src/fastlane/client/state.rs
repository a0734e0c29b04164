//! The client's state file, `{origin, network, session, payment}`: the session it pays from
//! and the signed payment whose outcome is not yet known. The payment is written (and
//! fsynced) before it is sent, so a client that dies mid-exchange retries that same payment
//! instead of signing a second one. One client at a time: a lock file beside the state is
//! held, non-blocking, for the whole run.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Largest state file read; a real one is a few kilobytes.
const MAX_STATE_BYTES: u64 = 256 * 1024;

/// What the state file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientState {
    pub origin: String,
    pub network: String,
    /// The session token (`Concert-Session`), empty before the first session.
    #[serde(default)]
    pub session: String,
    /// The signed `PAYMENT-SIGNATURE` value whose outcome is open, empty when none is.
    #[serde(default)]
    pub payment: String,
}

/// The state file, locked for as long as this lives.
pub struct StateFile {
    path: PathBuf,
    _lock: File,
    pub state: ClientState,
}

impl StateFile {
    /// Takes the lock and reads the state; a missing file is a fresh state for `origin` and
    /// `network`. A state of another origin or network is refused rather than mixed up.
    pub fn open(path: &Path, origin: &str, network: &str) -> Result<StateFile, String> {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty())
            && !dir.is_dir()
        {
            use std::os::unix::fs::DirBuilderExt as _;
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let lock_path = lock_path(path);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| format!("{}: {e}", lock_path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "{}: another concert client is using this state file; wait for it to finish",
                    lock_path.display()
                ));
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(format!("{}: {e}", lock_path.display()));
            }
        }
        let state = match read_state(path)? {
            Some(state) => {
                if state.origin != origin || state.network != network {
                    return Err(format!(
                        "{}: this state belongs to {} on {}, not {origin} on {network}; use another CONCERT_CLIENT_STATE",
                        path.display(),
                        state.origin,
                        state.network
                    ));
                }
                state
            }
            None => ClientState {
                origin: origin.to_owned(),
                network: network.to_owned(),
                ..ClientState::default()
            },
        };
        Ok(StateFile {
            path: path.to_owned(),
            _lock: lock,
            state,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the state to a temporary file, fsyncs it, renames it over the state and fsyncs
    /// the directory: once this returns the state survives a crash.
    pub fn save(&self) -> Result<(), String> {
        let bytes = serde_json::to_vec_pretty(&self.state).map_err(|e| e.to_string())?;
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        let name = self
            .path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "state".into());
        let written = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(&dir)
            .and_then(|mut temp| {
                temp.write_all(&bytes)?;
                temp.write_all(b"\n")?;
                temp.as_file().sync_all()?;
                temp.persist(&self.path).map_err(|failed| failed.error)
            });
        written.map_err(|e| format!("{}: {e}", self.path.display()))?;
        File::open(&dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| format!("{}: {e}", dir.display()))
    }
}

fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

fn read_state(path: &Path) -> Result<Option<ClientState>, String> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    use std::io::Read as _;
    file.take(MAX_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(format!("{}: too large for a client state", path.display()));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("{}: not a client state ({e})", path.display()))
}
