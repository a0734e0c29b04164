//! The fast lane as it runs: the lane the request path reads (swapped whole, read without a
//! lock), the parts a stop or a swap closes, where its two files live, and the flag that lets
//! one swap run at a time. Building a lane is the start-up's business (`lifecycle`); this
//! module only holds what was built and hands it over.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;

use super::gateway::Gateway;
use super::service::FastLane;
use super::settings::{FastlaneSettings, NetworksSettings};

/// Mode of `fastlane.json` and `networks.json` as the portal writes them: the service's group
/// may read them (they hold addresses and endpoints, never secrets).
pub const FILE_MODE: u32 = 0o640;

/// A built lane: the service, its gateway, and the documents it was built from (so a swap that
/// fails can build it again without reading files that were just replaced).
pub struct RunningLane {
    pub lane: Arc<FastLane>,
    pub gateway: Gateway,
    pub fastlane: FastlaneSettings,
    pub networks: NetworksSettings,
}

impl RunningLane {
    /// Settlements under way in either half.
    pub fn settling(&self) -> usize {
        self.lane.settling() + self.gateway.settles_running()
    }

    /// Lets settlements under way finish (at most `limit`), then closes both journals,
    /// releasing their locks.
    pub async fn close(&self, limit: Duration) {
        self.lane.close_after_settlements(limit).await;
        if tokio::time::timeout(limit, self.gateway.close())
            .await
            .is_err()
        {
            tracing::warn!("fast lane: the gateway still had settlements running at its close");
        }
    }
}

/// Where `fastlane.json` and `networks.json` are read from and written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneFiles {
    pub fastlane: PathBuf,
    pub networks: PathBuf,
    /// Whether the portal may replace them: only with a data directory, which holds the
    /// journals any lane needs.
    pub writable: bool,
}

/// The running lane and its swap.
#[derive(Default)]
pub struct LiveLane {
    /// What the request path reads, once per request.
    current: ArcSwapOption<FastLane>,
    /// The same lane with its gateway and documents, for the stop and for swaps.
    running: Mutex<Option<RunningLane>>,
    /// Set while a swap (or the stop) runs; a second one is refused rather than queued.
    reloading: AtomicBool,
    /// Set for good at the stop: no swap may open the journals again.
    stopped: AtomicBool,
    files: Mutex<Option<LaneFiles>>,
}

/// Holds the reload flag; dropping it lets the next swap in.
pub struct ReloadFlag<'a> {
    live: &'a LiveLane,
}

impl Drop for ReloadFlag<'_> {
    fn drop(&mut self) {
        self.live.reloading.store(false, Ordering::Release);
    }
}

impl LiveLane {
    /// The lane now, for a request that will not hold it across an await.
    pub fn load(&self) -> arc_swap::Guard<Option<Arc<FastLane>>> {
        self.current.load()
    }

    /// The lane now, to keep for a whole request.
    pub fn current(&self) -> Option<Arc<FastLane>> {
        self.current.load_full()
    }

    /// Makes `running` the lane requests see.
    pub fn install(&self, running: RunningLane) {
        let lane = running.lane.clone();
        *self.running.lock() = Some(running);
        self.current.store(Some(lane));
    }

    /// Takes the running lane out to close it. Requests keep reading it until another is
    /// installed or [`LiveLane::clear`] is called: its journals answer reads after the close.
    pub fn take_running(&self) -> Option<RunningLane> {
        self.running.lock().take()
    }

    /// No lane at all: `/_concert/*` answers as without one.
    pub fn clear(&self) {
        self.current.store(None);
    }

    /// Reads the running lane's documents (and anything else of it) under the holder's lock.
    pub fn with_running<R>(&self, read: impl FnOnce(Option<&RunningLane>) -> R) -> R {
        read(self.running.lock().as_ref())
    }

    /// The reload flag, unless a swap already holds it or the lane has stopped.
    pub fn begin_reload(&self) -> Option<ReloadFlag<'_>> {
        if self.stopped.load(Ordering::Acquire) {
            return None;
        }
        self.reloading
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(ReloadFlag { live: self })
    }

    /// True while a swap runs: wallet requests are turned away rather than charged by a lane
    /// that is closing.
    pub fn is_reloading(&self) -> bool {
        self.reloading.load(Ordering::Acquire)
    }

    pub fn set_files(&self, files: LaneFiles) {
        *self.files.lock() = Some(files);
    }

    pub fn files(&self) -> Option<LaneFiles> {
        self.files.lock().clone()
    }

    /// The stop: waits (bounded) for a swap under way, then closes the lane after its
    /// settlements drain (at most `limit`); no swap runs afterwards.
    pub async fn stop(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        let flag = loop {
            if let Some(flag) = self.begin_reload() {
                break Some(flag);
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("fast lane: stopping while a reload is still running");
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        self.stopped.store(true, Ordering::Release);
        if let Some(running) = self.take_running() {
            running.close(limit).await;
        }
        drop(flag);
    }
}

/// Replaces `path` with `bytes` so a reader sees the old file or the new one, never a mix: a
/// temporary file beside it (mode [`FILE_MODE`]) is written and fsynced, renamed over it, and
/// the directory fsynced so the rename survives a crash.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|failed| failed.error)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Puts back what `path` held before a swap: its old bytes, or no file when there was none.
pub fn restore_file(path: &Path, previous: Option<&[u8]>) -> std::io::Result<()> {
    match previous {
        Some(bytes) => write_file_atomically(path, bytes),
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_reload_at_a_time_and_none_after_the_stop() {
        let live = LiveLane::default();
        let first = live.begin_reload().expect("the flag is free");
        assert!(live.is_reloading());
        assert!(live.begin_reload().is_none(), "a second swap is refused");
        drop(first);
        assert!(!live.is_reloading());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(live.stop(Duration::from_millis(100)));
        assert!(live.begin_reload().is_none(), "no swap after the stop");
    }

    #[test]
    fn files_are_replaced_whole_with_mode_0640_and_restored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fastlane.json");
        std::fs::write(&path, b"old").unwrap();
        write_file_atomically(&path, b"{\"new\":true}").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"new\":true}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, FILE_MODE);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "no temporary file is left behind");
        restore_file(&path, Some(b"old")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        restore_file(&path, None).unwrap();
        assert!(!path.exists());
        restore_file(&path, None).unwrap();
    }
}
