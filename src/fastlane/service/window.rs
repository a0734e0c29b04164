//! Entry windows: once a paid grant is first used on the site, its holder keeps access for the
//! entry TTL even if the pass ends sooner, so a pass bought just before the room filled is not
//! lost in the line. Only presenting the grant on the request path opens a window; the status
//! page never does. Bounded; kept in memory while running and saved to
//! `fastlane.windows.json` when the lane closes, so a restart does not cut open windows short
//! (a missing or unreadable file only means no windows).

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Windows held at once.
pub const MAX_WINDOWS: usize = 100_000;
/// Where open windows are kept across a restart.
pub const WINDOWS_FILE: &str = "fastlane.windows.json";

#[derive(Debug, Default)]
pub struct EntryWindows {
    ttl_seconds: AtomicU64,
    inner: Mutex<Windows>,
}

#[derive(Debug, Default)]
struct Windows {
    /// Grant key (`pay/<fingerprint>`) → window end (unix seconds).
    ends: HashMap<Arc<str>, u64>,
    /// When ended windows were last swept, so a full table is swept at most once a second.
    swept: u64,
}

impl EntryWindows {
    pub fn new(ttl_seconds: u64) -> EntryWindows {
        EntryWindows {
            ttl_seconds: AtomicU64::new(ttl_seconds),
            inner: Mutex::default(),
        }
    }

    /// Applies a new TTL (0 turns windows off); open windows keep their end.
    pub fn set_ttl(&self, ttl_seconds: u64) {
        self.ttl_seconds.store(ttl_seconds, Ordering::Relaxed);
    }

    pub fn ttl(&self) -> u64 {
        self.ttl_seconds.load(Ordering::Relaxed)
    }

    /// The end of `key`'s window, opening one now if none was ever opened.
    pub fn open_or_get(&self, key: &Arc<str>, now: u64) -> Option<u64> {
        let ttl = self.ttl();
        let mut windows = self.inner.lock();
        if let Some(end) = windows.ends.get(key) {
            return (ttl > 0).then_some(*end);
        }
        if ttl == 0 {
            return None;
        }
        if windows.ends.len() >= MAX_WINDOWS {
            if windows.swept == now {
                return None;
            }
            windows.swept = now;
            windows.ends.retain(|_, end| *end > now);
            if windows.ends.len() >= MAX_WINDOWS {
                return None;
            }
        }
        let end = now.saturating_add(ttl);
        windows.ends.insert(key.clone(), end);
        Some(end)
    }

    /// The end of `key`'s window if one was opened; never opens one.
    pub fn get(&self, key: &str) -> Option<u64> {
        if self.ttl() == 0 {
            return None;
        }
        self.inner.lock().ends.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().ends.len()
    }

    /// Writes the windows still open at `now` to `<dir>/fastlane.windows.json` (atomically,
    /// 0600).
    pub fn save(&self, dir: &Path, now: u64) -> std::io::Result<()> {
        let open: BTreeMap<String, u64> = self
            .inner
            .lock()
            .ends
            .iter()
            .filter(|(_, end)| **end > now)
            .map(|(key, end)| (key.to_string(), *end))
            .collect();
        let json = serde_json::to_vec(&open).map_err(std::io::Error::other)?;
        let mut temp = tempfile::Builder::new()
            .prefix(".fastlane.windows.")
            .tempfile_in(dir)?;
        temp.write_all(&json)?;
        temp.as_file().sync_all()?;
        temp.persist(dir.join(WINDOWS_FILE))
            .map_err(|failed| failed.error)?;
        Ok(())
    }

    /// Takes back the windows a previous run saved that are still open at `now`.
    pub fn restore(&self, dir: &Path, now: u64) {
        let path = dir.join(WINDOWS_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "fast lane: entry windows not restored");
                return;
            }
        };
        let saved: BTreeMap<String, u64> = match serde_json::from_slice(&bytes) {
            Ok(saved) => saved,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "fast lane: entry windows not restored");
                return;
            }
        };
        let mut windows = self.inner.lock();
        for (key, end) in saved
            .into_iter()
            .filter(|(_, end)| *end > now)
            .take(MAX_WINDOWS)
        {
            windows.ends.insert(Arc::from(key), end);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_once_and_ttl_zero_turns_it_off() {
        let windows = EntryWindows::new(300);
        let key: Arc<str> = Arc::from("pay/f");
        assert_eq!(windows.get(&key), None);
        assert_eq!(windows.open_or_get(&key, 1000), Some(1300));
        assert_eq!(windows.open_or_get(&key, 1200), Some(1300));
        windows.set_ttl(0);
        assert_eq!(windows.get(&key), None);
        assert_eq!(windows.open_or_get(&Arc::from("pay/g"), 1200), None);
    }

    #[test]
    fn open_windows_survive_save_and_restore() {
        let dir = tempfile::tempdir().unwrap();
        let windows = EntryWindows::new(300);
        windows.open_or_get(&Arc::from("a"), 1000);
        windows.open_or_get(&Arc::from("b"), 2000);
        windows.save(dir.path(), 1500).unwrap();
        let again = EntryWindows::new(300);
        again.restore(dir.path(), 1500);
        assert_eq!(again.get("a"), None, "ended before the save");
        assert_eq!(again.get("b"), Some(2300));
        std::fs::write(dir.path().join(WINDOWS_FILE), "garbage").unwrap();
        EntryWindows::new(300).restore(dir.path(), 1500);
    }
}
