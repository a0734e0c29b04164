//! The `NADDR_DATA` file: loading it off the async workers, retrying a failed first load, and
//! re-checking it on a poll so a changed file replaces the table whole.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant as WallInstant, SystemTime};

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;

use super::table::{IpTable, TableError};
use super::{FIRST_LOAD_RETRY, Shared};

/// The file's identity and version as the file system reports it; a change of any part means
/// the file was rewritten or replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl FileStamp {
    fn of(path: &Path) -> io::Result<FileStamp> {
        let meta = std::fs::metadata(path)?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Ok(FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
        })
    }
}

/// Where the first load stands; once a table is in, only reloads happen.
#[derive(Debug, Clone)]
enum FirstLoad {
    Pending,
    Failed(String),
    Done,
}

pub(super) struct LocalSource {
    path: PathBuf,
    /// The file name alone, as the operator sees it described.
    pub(super) name: String,
    poll: Option<Duration>,
    table: ArcSwapOption<IpTable>,
    first_load: Mutex<FirstLoad>,
    pub(super) loads: AtomicU64,
    pub(super) refused_reloads: AtomicU64,
}

impl LocalSource {
    pub(super) fn new(path: PathBuf, poll: Option<Duration>) -> LocalSource {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        LocalSource {
            path,
            name,
            poll,
            table: ArcSwapOption::empty(),
            first_load: Mutex::new(FirstLoad::Pending),
            loads: AtomicU64::new(0),
            refused_reloads: AtomicU64::new(0),
        }
    }

    pub(super) fn table(&self) -> Option<Arc<IpTable>> {
        self.table.load_full()
    }

    /// How often a failed first load is tried again: every minute, or on the poll when that
    /// is shorter.
    fn retry_interval(&self) -> Duration {
        self.poll
            .map_or(FIRST_LOAD_RETRY, |poll| poll.min(FIRST_LOAD_RETRY))
    }

    /// What the operator is told while no table is in: `None` once one is.
    pub(super) fn waiting_note(&self) -> Option<String> {
        match &*self.first_load.lock() {
            FirstLoad::Done => None,
            FirstLoad::Pending => Some(format!("loading NADDR_DATA {}", self.name)),
            FirstLoad::Failed(error) => Some(format!(
                "NADDR_DATA {} not loaded ({error}); retrying every {}",
                self.name,
                crate::config::format_go_duration(self.retry_interval())
            )),
        }
    }

    pub(super) fn describe_loaded(&self) -> Option<String> {
        let table = self.table.load();
        let table = table.as_ref()?;
        Some(format!(
            "{} ({} IPv4 | {} IPv6 | {} ASNs)",
            self.name,
            table.ipv4_ranges(),
            table.ipv6_ranges(),
            table.asn_count()
        ))
    }
}

/// Loads the file once it can, then keeps it current until stopped.
pub(super) async fn keep_loaded(shared: Arc<Shared>) {
    let Some(local) = shared.local.as_ref() else {
        return;
    };
    let mut loaded = loop {
        let path = local.path.clone();
        let attempt = shared
            .off_the_workers(move || {
                let stamp = FileStamp::of(&path)?;
                let started = WallInstant::now();
                IpTable::load(&path).map(|table| (table, stamp, started.elapsed()))
            })
            .await;
        match attempt {
            None => return,
            Some(Ok((table, stamp, took))) => {
                install(&shared, local, table, took);
                break stamp;
            }
            Some(Err(error)) => {
                let text = error.to_string();
                let repeated = matches!(
                    std::mem::replace(&mut *local.first_load.lock(), FirstLoad::Failed(text.clone())),
                    FirstLoad::Failed(previous) if previous == text
                );
                // With a short poll the same failure comes every second: say it once.
                if repeated {
                    tracing::debug!(path = %local.path.display(), %error, "ipinfo: IP data still not loadable");
                } else {
                    tracing::warn!(
                        path = %local.path.display(),
                        %error,
                        retry_in = %crate::config::format_go_duration(local.retry_interval()),
                        "ipinfo: cannot load the IP data; retrying"
                    );
                }
            }
        }
        if !shared.pause(local.retry_interval()).await {
            return;
        }
    };
    let Some(poll) = local.poll else {
        return;
    };
    // A changed file that failed to load is not tried again until it changes once more, so a
    // bad file is reported once rather than on every poll.
    let mut refused: Option<FileStamp> = None;
    let mut unreadable_reported = false;
    loop {
        if !shared.pause(poll).await {
            return;
        }
        let path = local.path.clone();
        let checked = shared
            .off_the_workers(move || reload_if_changed(&path, loaded, refused))
            .await;
        match checked {
            None => return,
            Some(Reload::Unchanged) => {}
            Some(Reload::Unreadable(error)) => {
                if !unreadable_reported {
                    tracing::warn!(
                        path = %local.path.display(),
                        %error,
                        "ipinfo: cannot check the IP data file; keeping the loaded data"
                    );
                    unreadable_reported = true;
                }
            }
            Some(Reload::Loaded(table, stamp, took)) => {
                install(&shared, local, *table, took);
                loaded = stamp;
                refused = None;
                unreadable_reported = false;
            }
            Some(Reload::Refused(stamp, error)) => {
                local.refused_reloads.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    path = %local.path.display(),
                    %error,
                    "ipinfo: the IP data file changed but cannot be loaded; keeping the loaded data"
                );
                refused = Some(stamp);
                unreadable_reported = false;
            }
        }
    }
}

enum Reload {
    Unchanged,
    Unreadable(io::Error),
    Loaded(Box<IpTable>, FileStamp, Duration),
    Refused(FileStamp, TableError),
}

fn reload_if_changed(path: &Path, loaded: FileStamp, refused: Option<FileStamp>) -> Reload {
    let stamp = match FileStamp::of(path) {
        Ok(stamp) => stamp,
        Err(error) => return Reload::Unreadable(error),
    };
    if stamp == loaded || Some(stamp) == refused {
        return Reload::Unchanged;
    }
    let started = WallInstant::now();
    match IpTable::load(path) {
        Ok(table) => Reload::Loaded(Box::new(table), stamp, started.elapsed()),
        Err(error) => Reload::Refused(stamp, error),
    }
}

/// Puts a new table in and forgets every cached answer, which came from older data.
fn install(shared: &Shared, local: &LocalSource, table: IpTable, took: Duration) {
    tracing::info!(
        path = %local.path.display(),
        ipv4 = table.ipv4_ranges(),
        ipv6 = table.ipv6_ranges(),
        asns = table.asn_count(),
        took_ms = took.as_millis() as u64,
        "ipinfo: IP data loaded"
    );
    local.table.store(Some(Arc::new(table)));
    shared.cache.lock().purge();
    *local.first_load.lock() = FirstLoad::Done;
    local.loads.fetch_add(1, Ordering::Relaxed);
}
