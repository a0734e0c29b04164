//! IP details for the admin pages: for any client address, its country and flag, AS number and
//! network description, range, and IPv4/IPv6/IPv8 facts.
//!
//! This module owns where the details come from and how long they are kept:
//! - `NADDR_DATA`, an IPtoASN combined file (plain or gzip) held in memory, loaded on a
//!   blocking thread, re-checked every `NADDR_DATA_POLL` and swapped whole when it changes;
//! - else, and while that file is not loaded yet, `NADDR_ADDR`, an naddr service asked in the
//!   background;
//! - else nothing: every address shows bare.
//!
//! Nothing here is fatal and nothing sits on the proxy's request path. [`IpInfo::lookup`]
//! never waits: it answers from the cache or the loaded table, and a miss that needs the naddr
//! service is fetched in the background and shows as [`Status::Pending`] until it lands.
//! [`IpInfo::warm`] lets a page wait a bounded moment for its whole set of addresses first.
//! Log lines start with `ipinfo:`.

mod cache;
mod countries;
mod details;
mod local;
mod remote;
mod span;
mod table;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use ipnet::IpNet;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use countries::country_name;
pub use details::{
    GLOBE, IpDetails, Ipv8Forms, LogInfo, NO_COUNTRY, Status, WHITE_FLAG, flag_emoji, flag_title,
    ipv8_forms, normalize_country_code,
};
pub use remote::{BaseUrlError, normalize_base_url};
pub use table::{IpTable, MAX_LINE_BYTES, TableError, TableHit};

use cache::{CACHE_CAPACITY, Cached, DetailsCache};
use local::LocalSource;
use remote::{Answer, Claim, InFlight, NaddrClient};

/// How long an answer from the local table is kept.
pub const TTL_LOCAL: Duration = Duration::from_secs(10 * 60);
/// How long a naddr answer is kept (the service marks its answers cacheable this long).
pub const TTL_REMOTE: Duration = Duration::from_secs(60 * 60);
/// How long "not in the data" from the naddr service is kept.
pub const TTL_NOT_FOUND: Duration = Duration::from_secs(10 * 60);
/// How long a failed naddr lookup keeps the address from being asked again.
pub const TTL_ERROR: Duration = Duration::from_secs(60);
/// The longest a page should wait in [`IpInfo::warm`] before it renders.
pub const WARM_BUDGET: Duration = Duration::from_millis(600);
/// `NADDR_DATA_POLL` when unset.
pub const DEFAULT_POLL: Duration = Duration::from_secs(30);
/// Shortest `NADDR_DATA_POLL`; shorter values are raised to it.
pub const MIN_POLL: Duration = Duration::from_secs(1);
/// How often a first load that failed is tried again (or on the poll, when that is shorter).
pub const FIRST_LOAD_RETRY: Duration = Duration::from_secs(60);

/// Where details come from right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The `NADDR_DATA` table is loaded.
    Local,
    /// The naddr service at `NADDR_ADDR` (also while the file is not loaded yet).
    Remote,
    Off,
}

/// Counters for the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct IpInfoStats {
    /// Tables loaded from `NADDR_DATA`, the first one included.
    pub loads: u64,
    /// Changed files that could not be loaded (the previous table stayed).
    pub refused_reloads: u64,
    /// naddr lookups that failed (a 404 is an answer, not a failure).
    pub failed_lookups: u64,
    /// Addresses in the cache.
    pub cached: usize,
}

/// The three environment settings, read and checked.
#[derive(Debug, Clone, Default)]
pub struct IpInfoSettings {
    /// `NADDR_DATA`: the IPtoASN file.
    pub data: Option<PathBuf>,
    /// `NADDR_DATA_POLL`: how often the file is re-checked; `None` never re-checks.
    pub data_poll: Option<Duration>,
    /// `NADDR_ADDR` as given; checked when the service starts.
    pub naddr: Option<String>,
    /// Values that were replaced by a default, logged at start.
    notes: Vec<String>,
}

impl IpInfoSettings {
    /// Reads `NADDR_DATA`, `NADDR_DATA_POLL` and `NADDR_ADDR` through `env`, so tests pass a
    /// map instead of changing the process environment. Empty values count as unset.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> IpInfoSettings {
        let value = |name: &str| {
            env(name)
                .map(|text| text.trim().to_string())
                .filter(|text| !text.is_empty())
        };
        let mut notes = Vec::new();
        let data_poll = match parse_poll(value("NADDR_DATA_POLL").as_deref()) {
            Ok(poll) => poll,
            Err(note) => {
                notes.push(note);
                Some(DEFAULT_POLL)
            }
        };
        if let Some(poll) = data_poll.filter(|poll| *poll < MIN_POLL) {
            notes.push(format!(
                "NADDR_DATA_POLL {} is below the minimum; using {}",
                crate::config::format_go_duration(poll),
                crate::config::format_go_duration(MIN_POLL)
            ));
        }
        IpInfoSettings {
            data: value("NADDR_DATA").map(PathBuf::from),
            data_poll: data_poll.map(|poll| poll.max(MIN_POLL)),
            naddr: value("NADDR_ADDR"),
            notes,
        }
    }
}

/// `NADDR_DATA_POLL`: a duration such as `30s` or `5m`; `0` or `off` turns re-checking off.
fn parse_poll(text: Option<&str>) -> Result<Option<Duration>, String> {
    let Some(text) = text else {
        return Ok(Some(DEFAULT_POLL));
    };
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match crate::config::duration::parse_go_duration(text) {
        Ok(poll) if poll.is_zero() => Ok(None),
        Ok(poll) => Ok(Some(poll)),
        Err(reason) => Err(format!(
            "NADDR_DATA_POLL {text:?} is not a duration ({reason}); using {}",
            crate::config::format_go_duration(DEFAULT_POLL)
        )),
    }
}

/// The IP details service. Built with [`IpInfo::from_env`] or [`IpInfo::start`]; its
/// background work ends with [`IpInfo::stop`] or when the last `Arc` is dropped.
pub struct IpInfo {
    shared: Arc<Shared>,
}

/// What the background tasks share with the handle.
struct Shared {
    local: Option<LocalSource>,
    remote: Option<Arc<NaddrClient>>,
    /// Why there is no source, told when neither is configured.
    off_reason: String,
    cache: Mutex<DetailsCache>,
    runtime: Option<Handle>,
    tasks: TaskTracker,
    stop: CancellationToken,
}

impl IpInfo {
    /// Reads the settings through `env` and starts on the current tokio runtime.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Arc<IpInfo> {
        IpInfo::start(IpInfoSettings::from_env(env))
    }

    /// Starts loading the file (if any) on the current tokio runtime. Never fails: whatever
    /// cannot be used is logged and described.
    pub fn start(settings: IpInfoSettings) -> Arc<IpInfo> {
        for note in &settings.notes {
            tracing::warn!("ipinfo: {note}");
        }
        let runtime = Handle::try_current().ok();
        let mut off_reason = "neither NADDR_DATA nor NADDR_ADDR is set".to_string();
        let mut remote = None;
        if let Some(given) = &settings.naddr {
            match normalize_base_url(given).map(NaddrClient::new) {
                Ok(Ok(client)) => remote = Some(Arc::new(client)),
                Ok(Err(error)) => off_reason = format!("NADDR_ADDR: no TLS setup ({error})"),
                Err(error) => off_reason = format!("NADDR_ADDR {error}"),
            }
        }
        let mut local = settings
            .data
            .map(|path| LocalSource::new(path, settings.data_poll));
        if runtime.is_none() && (local.is_some() || remote.is_some()) {
            off_reason = "started outside an async runtime".to_string();
            local = None;
            remote = None;
        }
        let shared = Arc::new(Shared {
            local,
            remote,
            off_reason,
            cache: Mutex::new(DetailsCache::new(CACHE_CAPACITY)),
            runtime,
            tasks: TaskTracker::new(),
            stop: CancellationToken::new(),
        });
        if let (Some(local), Some(runtime)) = (&shared.local, &shared.runtime) {
            tracing::info!(file = %local.name, "ipinfo: loading NADDR_DATA in the background");
            shared
                .tasks
                .spawn_on(local::keep_loaded(Arc::clone(&shared)), runtime);
        }
        if let Some(remote) = &shared.remote {
            tracing::info!(base = %remote.base(), "ipinfo: using the naddr service");
        } else if shared.local.is_none() {
            tracing::info!("ipinfo: off: {}", shared.off_reason);
        }
        Arc::new(IpInfo { shared })
    }

    /// What is known about `addr` now, without waiting. A miss that only the naddr service can
    /// answer is fetched in the background and comes back [`Status::Pending`].
    pub fn lookup(&self, addr: IpAddr) -> IpDetails {
        self.shared.lookup(addr.to_canonical()).0
    }

    /// A range (such as a range ban) is described by its first address.
    pub fn lookup_net(&self, net: IpNet) -> IpDetails {
        self.lookup(net.network())
    }

    /// Looks up a page's addresses at once, waiting until every naddr lookup this starts or
    /// joins has landed, or `deadline` passes (see [`WARM_BUDGET`]). Returns the details in the
    /// order given; those still under way at the deadline are [`Status::Pending`].
    pub async fn warm(&self, addrs: &[IpAddr], deadline: Instant) -> Vec<IpDetails> {
        let mut waiting = Vec::new();
        let mut details = Vec::with_capacity(addrs.len());
        for &addr in addrs {
            let (found, waiter) = self.shared.lookup(addr.to_canonical());
            if let Some(waiter) = waiter {
                waiting.push((details.len(), addr.to_canonical(), waiter));
            }
            details.push(found);
        }
        if waiting.is_empty() {
            return details;
        }
        let landed = join_all(waiting.iter_mut().map(|(_, _, waiter)| async move {
            // The sender is never used to send: it closes when the lookup has been cached.
            let _ = waiter.changed().await;
        }));
        let _ = tokio::time::timeout_at(deadline, landed).await;
        for (at, addr, _) in waiting {
            if let Some(slot) = details.get_mut(at) {
                *slot = self.shared.lookup(addr).0;
            }
        }
        details
    }

    /// One line for the operator: `ip2asn-combined.tsv.gz (N IPv4 | N IPv6 | N ASNs)`,
    /// `NADDR_ADDR naddr service at <base> (N lookups failed)`, or `off: <reason>`; while the
    /// file is not loaded, what is happening to it follows.
    pub fn describe(&self) -> String {
        let local = self.shared.local.as_ref();
        if let Some(loaded) = local.and_then(LocalSource::describe_loaded) {
            return loaded;
        }
        let waiting = local.and_then(LocalSource::waiting_note);
        match (&self.shared.remote, waiting) {
            (Some(remote), waiting) => {
                let service = format!(
                    "NADDR_ADDR naddr service at {} ({} lookups failed)",
                    remote.base(),
                    remote.failures()
                );
                match waiting {
                    Some(note) => format!("{service}; {note}"),
                    None => service,
                }
            }
            (None, Some(note)) => format!("off: {note}"),
            (None, None) => format!("off: {}", self.shared.off_reason),
        }
    }

    pub fn source(&self) -> Source {
        if self.shared.local_table().is_some() {
            Source::Local
        } else if self.shared.remote.is_some() {
            Source::Remote
        } else {
            Source::Off
        }
    }

    pub fn stats(&self) -> IpInfoStats {
        let local = self.shared.local.as_ref();
        IpInfoStats {
            loads: local.map_or(0, |local| local.loads.load(Ordering::Relaxed)),
            refused_reloads: local.map_or(0, |local| local.refused_reloads.load(Ordering::Relaxed)),
            failed_lookups: self
                .shared
                .remote
                .as_ref()
                .map_or(0, |remote| remote.failures()),
            cached: self.shared.cache.lock().len(),
        }
    }

    /// Ends the file watcher and the lookups under way, and waits for them to finish.
    pub async fn stop(&self) {
        self.shared.stop.cancel();
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
    }
}

impl Drop for IpInfo {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

impl Shared {
    fn local_table(&self) -> Option<Arc<IpTable>> {
        self.local.as_ref().and_then(LocalSource::table)
    }

    /// The details now, and a receiver that closes when a naddr lookup of `addr` under way
    /// lands in the cache.
    fn lookup(self: &Arc<Self>, addr: IpAddr) -> (IpDetails, Option<watch::Receiver<()>>) {
        let now = Instant::now();
        // The epoch is read before the table, so an answer from a table replaced meanwhile is
        // not cached over the purge that came with the new one.
        let (cached, epoch) = {
            let mut cache = self.cache.lock();
            (cache.get(addr, now), cache.epoch())
        };
        match cached {
            Some(Cached::Known(details)) => return ((*details).clone(), None),
            Some(Cached::Failed) => {
                return (IpDetails::without_data(addr, Status::Unavailable), None);
            }
            None => {}
        }
        if let Some(table) = self.local_table() {
            let details = table.details(addr);
            self.store(
                epoch,
                addr,
                Cached::Known(Arc::new(details.clone())),
                TTL_LOCAL,
            );
            return (details, None);
        }
        let Some(remote) = &self.remote else {
            return (IpDetails::without_data(addr, Status::Unavailable), None);
        };
        let waiter = self.schedule(remote, addr, epoch);
        let status = if waiter.is_some() {
            Status::Pending
        } else {
            Status::Unavailable
        };
        (IpDetails::without_data(addr, status), waiter)
    }

    fn store(&self, epoch: u64, addr: IpAddr, value: Cached, ttl: Duration) {
        let mut cache = self.cache.lock();
        if cache.epoch() == epoch {
            cache.insert(addr, value, ttl, Instant::now());
        }
    }

    /// Starts (or joins) a background naddr lookup; `None` when none can run.
    fn schedule(
        self: &Arc<Self>,
        remote: &Arc<NaddrClient>,
        addr: IpAddr,
        epoch: u64,
    ) -> Option<watch::Receiver<()>> {
        let runtime = self.runtime.as_ref()?;
        if self.stop.is_cancelled() {
            return None;
        }
        match remote.claim(addr) {
            Claim::Joined(waiter) => Some(waiter),
            Claim::Full => None,
            Claim::Started(flight) => {
                let waiter = flight.waiter();
                let shared = Arc::clone(self);
                let remote = Arc::clone(remote);
                self.tasks
                    .spawn_on(shared.fetch_into_cache(remote, flight, epoch), runtime);
                Some(waiter)
            }
        }
    }

    async fn fetch_into_cache(
        self: Arc<Self>,
        remote: Arc<NaddrClient>,
        flight: InFlight,
        epoch: u64,
    ) {
        let addr = flight.addr();
        let asked = async {
            // A closed semaphore only happens if the client is torn down; treat it as stop.
            let _turn = remote.permits.acquire().await.ok()?;
            Some(remote.fetch(addr).await)
        };
        let outcome = tokio::select! {
            _ = self.stop.cancelled() => None,
            outcome = asked => outcome,
        };
        let Some(outcome) = outcome else {
            return;
        };
        remote.record(addr, &outcome);
        let (value, ttl) = match outcome {
            Ok(Answer::Found(details)) => (Cached::Known(details), TTL_REMOTE),
            Ok(Answer::NotFound) => (
                Cached::Known(Arc::new(IpDetails::without_data(addr, Status::NotFound))),
                TTL_NOT_FOUND,
            ),
            Err(_) => (Cached::Failed, TTL_ERROR),
        };
        self.store(epoch, addr, value, ttl);
        // Dropping the flight now wakes the waiters, after the answer is in the cache.
        drop(flight);
    }

    /// Sleeps, or returns false at once when stopped.
    async fn pause(&self, period: Duration) -> bool {
        tokio::select! {
            _ = self.stop.cancelled() => false,
            _ = tokio::time::sleep(period) => true,
        }
    }

    /// Runs file work on the blocking pool so no async worker waits on the disk or the parse.
    /// `None` when stopped meanwhile (the job is left to finish and its result dropped).
    async fn off_the_workers<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let runtime = self.runtime.as_ref()?;
        let running = runtime.spawn_blocking(job);
        tokio::select! {
            _ = self.stop.cancelled() => None,
            joined = running => match joined {
                Ok(value) => Some(value),
                Err(error) => {
                    tracing::error!(%error, "ipinfo: the file loader stopped unexpectedly");
                    None
                }
            },
        }
    }
}

#[cfg(test)]
mod tests;
