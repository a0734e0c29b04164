//! The asset tier: per-pass pools split by protocol family, then one global pool, for the
//! `-assets` (private) and `-asset-public` paths. Asset requests never take a page slot and
//! never queue; they wait (bounded) for an asset slot or are refused.
//!
//! A private request first takes a slot in its pass's pool for its family (h1: `-asset-user-cap-h1`,
//! h2: `-asset-user-cap-h2`, waiting up to `-asset-user-wait`), then a slot in the global pool
//! (`-asset-cap`, waiting up to `-asset-wait`). Checking the per-pass pool first means a pass that
//! floods requests never holds more than its own share of global slots. Both slots are held until
//! the response has been delivered and are released in reverse order.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Version};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::pass::PassId;
use crate::respond::Rejection;
use crate::sys::slots::{Gate, Permit};

/// Shards of the per-pass store (shard = first id byte & 63); ids are random, so they spread.
const SHARDS: usize = 64;
/// Shortest pause between two sweeps of idle per-pass pools.
const MIN_SWEEP_PERIOD: Duration = Duration::from_secs(10);

/// Which per-pass pool a request draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// One request per connection at a time: browsers open about six connections.
    H1,
    /// Multiplexed (HTTP/2 and HTTP/3): browsers send many requests at once on one connection.
    H2,
}

/// The protocol family of a request. `proto_header` is the value of `-client-proto-header`, and
/// the caller passes it only when that header is configured **and** the socket peer is a trusted
/// proxy: a direct client claiming `HTTP/2` must not get the larger pool. A value starting with
/// `HTTP/1` means h1, `HTTP/2` or `HTTP/3` means h2; anything else falls back to the connection.
pub(crate) fn protocol_family(version: Version, proto_header: Option<&HeaderValue>) -> Family {
    if let Some(value) = proto_header {
        let bytes = value.as_bytes();
        if bytes.starts_with(b"HTTP/1") {
            return Family::H1;
        }
        if bytes.starts_with(b"HTTP/2") || bytes.starts_with(b"HTTP/3") {
            return Family::H2;
        }
    }
    if version >= Version::HTTP_2 {
        Family::H2
    } else {
        Family::H1
    }
}

/// The asset settings one generation runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetSettings {
    pub user_cap_h1: u32,
    pub user_cap_h2: u32,
    pub user_wait: Duration,
    /// Effective global cap (explicit or derived).
    pub global_cap: u32,
    pub global_wait: Duration,
    /// Per-pass pools idle this long are swept (the pass TTL).
    pub admit_ttl: Duration,
    /// `-client-proto-header`; empty when not configured.
    pub client_proto_header: String,
}

/// Process-wide asset counters (carried from one generation to the next).
#[derive(Debug, Default)]
pub(crate) struct AssetCounters {
    pub served: AtomicU64,
    pub denied: AtomicU64,
    pub user_throttled: AtomicU64,
    pub global_throttled: AtomicU64,
}

/// Figures for `/_room/stats`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AssetStats {
    pub cap: u64,
    pub in_flight: u64,
    pub users: u64,
    pub served_total: u64,
    pub denied_total: u64,
    pub user_throttled_total: u64,
    pub global_throttled_total: u64,
}

/// The slots an admitted asset request holds until its response is delivered. Fields drop in
/// order, so the global slot (taken last) is released first.
#[derive(Debug)]
pub struct AssetHold {
    _global: Permit,
    _user: Option<OwnedSemaphorePermit>,
}

/// One pass's pools, created lazily per family.
struct UserEntry {
    last_seen: Instant,
    h1: Option<Arc<Semaphore>>,
    h2: Option<Arc<Semaphore>>,
}

impl UserEntry {
    fn idle(&self, h1_cap: usize, h2_cap: usize) -> bool {
        let unused = |pool: &Option<Arc<Semaphore>>, cap: usize| {
            pool.as_ref()
                .is_none_or(|pool| pool.available_permits() >= cap)
        };
        unused(&self.h1, h1_cap) && unused(&self.h2, h2_cap)
    }
}

/// Per-pass pools, sharded by pass id. Entries exist only for valid passes; idle ones are swept.
pub struct UserPools {
    shards: Box<[Mutex<HashMap<PassId, UserEntry>>]>,
    users: AtomicU64,
    h1_cap: usize,
    h2_cap: usize,
    idle_after: Duration,
}

impl std::fmt::Debug for UserPools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserPools")
            .field("users", &self.users())
            .field("h1_cap", &self.h1_cap)
            .field("h2_cap", &self.h2_cap)
            .finish()
    }
}

impl UserPools {
    pub fn new(h1_cap: u32, h2_cap: u32, idle_after: Duration) -> UserPools {
        UserPools {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            users: AtomicU64::new(0),
            h1_cap: (h1_cap as usize).clamp(1, Semaphore::MAX_PERMITS),
            h2_cap: (h2_cap as usize).clamp(1, Semaphore::MAX_PERMITS),
            idle_after,
        }
    }

    /// The pool of pass `id` for `family`, created if missing. `last_seen` is updated under the
    /// shard lock, so a sweep never removes an entry a request has just looked up.
    pub fn pool(&self, id: &PassId, family: Family) -> Arc<Semaphore> {
        let mut shard = self.shards[usize::from(id[0]) % SHARDS].lock();
        let entry = shard.entry(*id).or_insert_with(|| {
            self.users.fetch_add(1, Ordering::Relaxed);
            UserEntry {
                last_seen: Instant::now(),
                h1: None,
                h2: None,
            }
        });
        entry.last_seen = Instant::now();
        let (slot, cap) = match family {
            Family::H1 => (&mut entry.h1, self.h1_cap),
            Family::H2 => (&mut entry.h2, self.h2_cap),
        };
        Arc::clone(slot.get_or_insert_with(|| Arc::new(Semaphore::new(cap))))
    }

    /// Passes with pools right now.
    pub fn users(&self) -> u64 {
        self.users.load(Ordering::Relaxed)
    }

    /// Removes passes not seen since `now − idle_after` whose pools are all idle; returns how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let Some(cutoff) = now.checked_sub(self.idle_after) else {
            return 0;
        };
        let mut evicted = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let before = shard.len();
            shard.retain(|_, entry| {
                entry.last_seen >= cutoff || !entry.idle(self.h1_cap, self.h2_cap)
            });
            evicted += before - shard.len();
        }
        if evicted > 0 {
            self.users.fetch_sub(evicted as u64, Ordering::Relaxed);
        }
        evicted
    }

    /// How often the sweep should run: half the pass TTL, at least 10 s.
    pub fn sweep_period(&self) -> Duration {
        (self.idle_after / 2).max(MIN_SWEEP_PERIOD)
    }
}

/// The asset tier of one generation. Counters are process-wide; the global pool is shared with
/// the previous generation and resized in place (holders of old slots are covered by its permit
/// debt); the per-pass store is replaced when its caps or the pass TTL change.
#[derive(Debug)]
pub struct AssetTier {
    settings: AssetSettings,
    proto_header: Option<HeaderName>,
    pools: Arc<UserPools>,
    global: Arc<Gate>,
    counters: Arc<AssetCounters>,
}

impl AssetTier {
    pub fn build(settings: AssetSettings, previous: Option<&AssetTier>) -> AssetTier {
        let proto_header = HeaderName::from_bytes(settings.client_proto_header.trim().as_bytes())
            .ok()
            .filter(|_| !settings.client_proto_header.trim().is_empty());
        let same_pools = |old: &AssetSettings| {
            old.user_cap_h1 == settings.user_cap_h1
                && old.user_cap_h2 == settings.user_cap_h2
                && old.admit_ttl == settings.admit_ttl
        };
        let pools = match previous {
            Some(prev) if same_pools(&prev.settings) => Arc::clone(&prev.pools),
            _ => Arc::new(UserPools::new(
                settings.user_cap_h1,
                settings.user_cap_h2,
                settings.admit_ttl,
            )),
        };
        let global = match previous {
            Some(prev) => {
                if prev.settings.global_cap != settings.global_cap {
                    prev.global.resize(settings.global_cap as usize);
                }
                Arc::clone(&prev.global)
            }
            None => Gate::new(settings.global_cap as usize),
        };
        let counters = previous
            .map(|prev| Arc::clone(&prev.counters))
            .unwrap_or_default();
        AssetTier {
            settings,
            proto_header,
            pools,
            global,
            counters,
        }
    }

    /// The request's family; `peer_trusted` decides whether `-client-proto-header` is believed.
    pub fn family(&self, version: Version, headers: &HeaderMap, peer_trusted: bool) -> Family {
        let claimed = self
            .proto_header
            .as_ref()
            .filter(|_| peer_trusted)
            .and_then(|name| headers.get(name));
        protocol_family(version, claimed)
    }

    /// Counts a request refused for want of a valid pass.
    pub fn deny(&self) -> Rejection {
        self.counters.denied.fetch_add(1, Ordering::Relaxed);
        Rejection::NoPass
    }

    /// Admits a private asset request of pass `id`: its own pool, then the global pool. If the
    /// client goes away while waiting, the future is dropped and nothing is counted.
    pub async fn admit_private(&self, id: &PassId, family: Family) -> Result<AssetHold, Rejection> {
        let pool = self.pools.pool(id, family);
        let user = match pool.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) if self.settings.user_wait.is_zero() => None,
            Err(_) => tokio::time::timeout(self.settings.user_wait, pool.acquire_owned())
                .await
                .ok()
                .and_then(Result::ok),
        };
        let Some(user) = user else {
            self.counters.user_throttled.fetch_add(1, Ordering::Relaxed);
            return Err(Rejection::AssetUserPoolFull);
        };
        self.admit_global(Some(user)).await
    }

    /// Admits a public asset request: the global pool only.
    pub async fn admit_public(&self) -> Result<AssetHold, Rejection> {
        self.admit_global(None).await
    }

    async fn admit_global(
        &self,
        user: Option<OwnedSemaphorePermit>,
    ) -> Result<AssetHold, Rejection> {
        let global = match self.global.try_acquire() {
            Some(permit) => Some(permit),
            None if self.settings.global_wait.is_zero() => None,
            None => tokio::time::timeout(self.settings.global_wait, self.global.acquire())
                .await
                .ok(),
        };
        let Some(global) = global else {
            self.counters
                .global_throttled
                .fetch_add(1, Ordering::Relaxed);
            return Err(Rejection::AssetPoolFull);
        };
        self.counters.served.fetch_add(1, Ordering::Relaxed);
        Ok(AssetHold {
            _global: global,
            _user: user,
        })
    }

    /// The per-pass store (for the sweeper).
    pub fn pools(&self) -> &Arc<UserPools> {
        &self.pools
    }

    pub fn stats(&self) -> AssetStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        AssetStats {
            cap: u64::from(self.settings.global_cap),
            in_flight: self.global.in_use() as u64,
            users: self.pools.users(),
            served_total: load(&self.counters.served),
            denied_total: load(&self.counters.denied),
            user_throttled_total: load(&self.counters.user_throttled),
            global_throttled_total: load(&self.counters.global_throttled),
        }
    }
}

/// Sweeps idle per-pass pools of whatever store `current` returns, every
/// `max(admit_ttl / 2, 10 s)`. Ends when `current` returns `None` (the app is gone).
pub(crate) fn spawn_sweeper<F>(current: F) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Option<Arc<UserPools>> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let Some(period) = current().map(|pools| pools.sweep_period()) else {
                return;
            };
            tokio::time::sleep(period).await;
            let Some(pools) = current() else { return };
            pools.sweep(Instant::now());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> AssetSettings {
        AssetSettings {
            user_cap_h1: 1,
            user_cap_h2: 2,
            user_wait: Duration::from_millis(50),
            global_cap: 10,
            global_wait: Duration::from_millis(50),
            admit_ttl: Duration::from_secs(600),
            client_proto_header: "X-Client-Proto".into(),
        }
    }

    fn id(n: u8) -> PassId {
        [n; 16]
    }

    #[test]
    fn family_follows_the_trusted_header_then_the_connection() {
        let h = |v: &'static str| HeaderValue::from_static(v);
        assert_eq!(protocol_family(Version::HTTP_11, None), Family::H1);
        assert_eq!(protocol_family(Version::HTTP_2, None), Family::H2);
        assert_eq!(
            protocol_family(Version::HTTP_11, Some(&h("HTTP/2.0"))),
            Family::H2
        );
        assert_eq!(
            protocol_family(Version::HTTP_11, Some(&h("HTTP/3.0"))),
            Family::H2
        );
        assert_eq!(
            protocol_family(Version::HTTP_2, Some(&h("HTTP/1.1"))),
            Family::H1
        );
        assert_eq!(
            protocol_family(Version::HTTP_2, Some(&h("SPDY"))),
            Family::H2
        );
        assert_eq!(protocol_family(Version::HTTP_11, Some(&h(""))), Family::H1);
        assert_eq!(
            protocol_family(Version::HTTP_11, Some(&h("http/2"))),
            Family::H1,
            "prefixes are case-sensitive"
        );
    }

    #[test]
    fn the_proto_header_counts_only_when_configured_and_from_a_trusted_peer() {
        let mut headers = HeaderMap::new();
        headers.insert("x-client-proto", HeaderValue::from_static("HTTP/2.0"));
        let tier = AssetTier::build(settings(), None);
        assert_eq!(tier.family(Version::HTTP_11, &headers, true), Family::H2);
        assert_eq!(tier.family(Version::HTTP_11, &headers, false), Family::H1);
        let unconfigured = AssetTier::build(
            AssetSettings {
                client_proto_header: String::new(),
                ..settings()
            },
            None,
        );
        assert_eq!(
            unconfigured.family(Version::HTTP_11, &headers, true),
            Family::H1
        );
    }

    #[test]
    fn user_store_gives_one_pool_per_pass_and_family() {
        let pools = UserPools::new(2, 5, Duration::from_millis(500));
        let a = pools.pool(&id(1), Family::H1);
        let b = pools.pool(&id(1), Family::H1);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.available_permits(), 2);
        assert_eq!(pools.pool(&id(1), Family::H2).available_permits(), 5);
        assert_eq!(pools.users(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn sweep_evicts_only_idle_passes() {
        let pools = UserPools::new(2, 5, Duration::from_millis(500));
        let start = Instant::now();
        let _idle = pools.pool(&id(1), Family::H1);
        let busy = pools.pool(&id(2), Family::H2);
        let held = busy.clone().try_acquire_owned().unwrap();
        tokio::time::advance(Duration::from_millis(900)).await;
        let _recent = pools.pool(&id(3), Family::H1);
        assert_eq!(pools.sweep(start + Duration::from_millis(1000)), 1);
        assert_eq!(pools.users(), 2);
        drop(held);
        assert_eq!(pools.sweep(start + Duration::from_millis(1000)), 1);
        assert_eq!(pools.users(), 1);
        assert_eq!(pools.sweep_period(), MIN_SWEEP_PERIOD);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_pass_pool_is_refused_but_another_pass_is_served() {
        let tier = AssetTier::build(settings(), None);
        let first = tier.admit_private(&id(1), Family::H1).await.unwrap();
        let second = tier.admit_private(&id(1), Family::H1).await;
        assert_eq!(second.unwrap_err(), Rejection::AssetUserPoolFull);
        let other = tier.admit_private(&id(2), Family::H1).await.unwrap();
        let h2a = tier.admit_private(&id(1), Family::H2).await.unwrap();
        let h2b = tier.admit_private(&id(1), Family::H2).await.unwrap();
        assert_eq!(
            tier.admit_private(&id(1), Family::H2).await.unwrap_err(),
            Rejection::AssetUserPoolFull
        );
        let stats = tier.stats();
        assert_eq!(stats.in_flight, 4);
        assert_eq!(stats.served_total, 4);
        assert_eq!(stats.user_throttled_total, 2);
        assert_eq!(stats.users, 2);
        drop((first, other, h2a, h2b));
        assert_eq!(tier.stats().in_flight, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_request_gets_the_slot_freed_within_the_wait() {
        let tier = Arc::new(AssetTier::build(settings(), None));
        let held = tier.admit_private(&id(1), Family::H1).await.unwrap();
        let waiter = {
            let tier = Arc::clone(&tier);
            tokio::spawn(async move { tier.admit_private(&id(1), Family::H1).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn the_global_pool_limits_public_and_private_alike() {
        let tier = AssetTier::build(
            AssetSettings {
                global_cap: 1,
                ..settings()
            },
            None,
        );
        let held = tier.admit_private(&id(1), Family::H1).await.unwrap();
        assert_eq!(
            tier.admit_private(&id(2), Family::H1).await.unwrap_err(),
            Rejection::AssetPoolFull
        );
        assert_eq!(
            tier.admit_public().await.unwrap_err(),
            Rejection::AssetPoolFull
        );
        assert_eq!(tier.stats().global_throttled_total, 2);
        // The refused private request gave its per-pass slot back.
        drop(held);
        assert!(tier.admit_private(&id(2), Family::H1).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn zero_waits_refuse_at_once() {
        let tier = AssetTier::build(
            AssetSettings {
                user_wait: Duration::ZERO,
                global_wait: Duration::ZERO,
                global_cap: 1,
                ..settings()
            },
            None,
        );
        let _held = tier.admit_private(&id(1), Family::H1).await.unwrap();
        let started = Instant::now();
        assert!(tier.admit_private(&id(1), Family::H1).await.is_err());
        assert!(tier.admit_public().await.is_err());
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn rebuilding_keeps_counters_resizes_global_and_replaces_pools_on_cap_change() {
        let first = AssetTier::build(settings(), None);
        let held = first.admit_private(&id(1), Family::H1).await.unwrap();
        let same = AssetTier::build(settings(), Some(&first));
        assert!(Arc::ptr_eq(same.pools(), first.pools()));
        let smaller = AssetTier::build(
            AssetSettings {
                global_cap: 1,
                user_cap_h1: 3,
                ..settings()
            },
            Some(&same),
        );
        assert!(!Arc::ptr_eq(smaller.pools(), first.pools()));
        assert_eq!(smaller.stats().served_total, 1);
        assert_eq!(smaller.stats().in_flight, 1);
        assert_eq!(
            smaller.admit_public().await.unwrap_err(),
            Rejection::AssetPoolFull
        );
        drop(held);
        let one = smaller.admit_public().await.unwrap();
        assert!(smaller.admit_public().await.is_err());
        drop(one);
    }
}
