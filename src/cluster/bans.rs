//! One ban list and one strike count for every instance.
//!
//! A ban, unban, range ban or range unban made here (admin API, portal, strikes, ban paths)
//! reaches the registry's share hook, waits in an outbox keyed by client or range, and is
//! written to Redis (`bans` / `ranges`, one JSON record per client or range) by `ban.lua`, which
//! also publishes it on the events channel. Every other instance applies it to its own registry
//! (and so to its bans.json) without sharing it again. A lift is stored as a record too, kept
//! for [`LIFT_KEPT`], so an instance that was away learns of it.
//!
//! The outbox is what makes a Redis outage safe: changes made while Redis is unreachable stay in
//! it and are written when the link returns, and a record only replaces a stored one that is
//! not newer. On every (re)connect the instance reads every record back ([`SharedBans::resync`])
//! and writes the bans it holds that Redis has never heard of (after a Redis restart without
//! its data, for example), so no acknowledged ban is lost in either direction.
//!
//! Strikes that did not ban locally are queued (bounded; a full queue drops and counts) and
//! sent every [`STRIKE_BATCH`] to `strikes.lua`, which adds them to a per-client counter living
//! as long as the strike window. When the total reaches the threshold, this instance bans.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ipnet::IpNet;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

use super::Cluster;
use super::messages::{Event, Record};
use crate::abuse::{BanCause, FOREVER, SharedChange};
use crate::app::App;

/// How long a lift is remembered in Redis, so an instance away for less than this does not
/// keep a ban lifted elsewhere (nor write it back).
pub const LIFT_KEPT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Strikes are collected this long before they go to Redis in one script.
pub const STRIKE_BATCH: Duration = Duration::from_millis(100);
/// Strikes waiting for the next batch at most; more are dropped (and counted).
pub const STRIKE_QUEUE: usize = 8192;
/// How often unwritten changes are retried and ended records cleaned.
const RETRY_EVERY: Duration = Duration::from_secs(1);
const CLEAN_EVERY: Duration = Duration::from_secs(30);

impl Record {
    /// The ban's end in the registry's unix nanos, when this is a ban.
    fn until_nanos(&self) -> Option<i64> {
        if self.lifted {
            return None;
        }
        if self.permanent {
            return Some(FOREVER);
        }
        self.until
            .map(|ms| ms.saturating_mul(1_000_000).min(FOREVER - 1))
    }

    /// When Redis may forget the record (unix ms; 0 = never).
    fn forget_at(&self) -> i64 {
        if self.lifted {
            return self.at.saturating_add(millis(LIFT_KEPT));
        }
        if self.permanent {
            return 0;
        }
        self.until.unwrap_or(0).max(1)
    }

    fn cause(&self) -> BanCause {
        match self.cause.as_str() {
            "strikes" => BanCause::Strikes,
            "ban_path" => BanCause::BanPath,
            _ => BanCause::Operator,
        }
    }
}

fn cause_name(cause: BanCause) -> &'static str {
    match cause {
        BanCause::Strikes => "strikes",
        BanCause::BanPath => "ban_path",
        BanCause::Operator => "operator",
    }
}

/// A client or a range, as the registry names it.
type Scope = (IpNet, bool);

/// The Redis field of a client or range: a client's address alone for IPv4, else the prefix.
pub fn field_of(scope: IpNet, range: bool) -> String {
    match scope {
        IpNet::V4(v4) if !range && v4.prefix_len() == 32 => v4.addr().to_string(),
        _ => scope.to_string(),
    }
}

/// The client or range a Redis field names.
pub fn scope_of(field: &str) -> Option<IpNet> {
    if field.contains('/') {
        return field.parse::<IpNet>().ok().map(|net| net.trunc());
    }
    field.parse::<IpAddr>().ok().map(IpNet::from)
}

/// This instance's share of the ban list: what it has yet to write, what it has seen, and the
/// strike queue.
pub struct SharedBans {
    /// Changes made here not yet stored in Redis (the latest per client or range).
    outbox: Mutex<HashMap<Scope, Record>>,
    wake: Notify,
    /// The latest change time (unix ms) this instance made or applied per client or range; a
    /// record not newer than it is old news.
    known: Mutex<HashMap<Scope, i64>>,
    /// The time of the last change made here.
    last_at: AtomicI64,
    /// One writer at a time, so a retried change never overtakes a newer one.
    writing: tokio::sync::Mutex<()>,
    strikes: mpsc::Sender<(IpNet, u32)>,
    strike_queue: Mutex<Option<mpsc::Receiver<(IpNet, u32)>>>,
    /// Strikes dropped because the queue was full.
    pub strikes_dropped: AtomicU64,
    /// Strikes that could not be sent to Redis (counted here alone while it is away).
    pub strikes_unsent: AtomicU64,
    /// Bans and lifts applied because another instance made them.
    pub applied_total: AtomicU64,
    /// Records or messages that could not be read.
    pub invalid_total: AtomicU64,
}

impl Default for SharedBans {
    fn default() -> Self {
        let (strikes, queue) = mpsc::channel(STRIKE_QUEUE);
        SharedBans {
            outbox: Mutex::default(),
            wake: Notify::new(),
            known: Mutex::default(),
            last_at: AtomicI64::new(0),
            writing: tokio::sync::Mutex::new(()),
            strikes,
            strike_queue: Mutex::new(Some(queue)),
            strikes_dropped: AtomicU64::new(0),
            strikes_unsent: AtomicU64::new(0),
            applied_total: AtomicU64::new(0),
            invalid_total: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for SharedBans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBans")
            .field("outbox", &self.outbox.lock().len())
            .finish_non_exhaustive()
    }
}

/// Wall-clock now in unix ms.
pub(crate) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    millis(since)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl SharedBans {
    /// Queues a change made here for Redis (called by the registry's share hook, so it never
    /// blocks).
    pub fn on_local(&self, change: &SharedChange, from: &str) {
        let at = self.next_at();
        let (scope, record) = match *change {
            SharedChange::Banned {
                scope,
                range,
                until,
                offenses,
                cause,
            } => (
                (scope, range),
                Record {
                    until: (until != FOREVER).then_some(until / 1_000_000),
                    permanent: until == FOREVER,
                    offenses,
                    cause: cause_name(cause).to_owned(),
                    lifted: false,
                    at,
                    from: from.to_owned(),
                },
            ),
            SharedChange::Lifted { scope, range } => (
                (scope, range),
                Record {
                    until: None,
                    permanent: false,
                    offenses: 0,
                    cause: String::new(),
                    lifted: true,
                    at,
                    from: from.to_owned(),
                },
            ),
        };
        self.known.lock().insert(scope, at);
        self.outbox.lock().insert(scope, record);
        self.wake.notify_one();
    }

    /// A change time later than any this instance made before, so two changes within one
    /// millisecond keep their order.
    fn next_at(&self) -> i64 {
        let now = now_ms();
        let previous = self
            .last_at
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(now.max(last.saturating_add(1)))
            })
            .unwrap_or(now);
        now.max(previous.saturating_add(1))
    }

    /// Queues a strike for the next batch; a full queue drops it.
    pub fn on_strike(&self, scope: IpNet, weight: u32) {
        if self.strikes.try_send((scope, weight)).is_err() {
            self.strikes_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets change times older than a lift is kept: Redis holds no record that old.
    fn forget_old_news(&self) {
        let horizon = now_ms().saturating_sub(millis(LIFT_KEPT));
        self.known.lock().retain(|_, at| *at >= horizon);
    }

    /// Changes made here and not yet in Redis.
    pub fn unwritten(&self) -> usize {
        self.outbox.lock().len()
    }

    /// Writes every queued change; false when Redis could not take them all (the rest stay
    /// queued).
    pub async fn flush(&self, cluster: &Cluster) -> bool {
        let _writer = self.writing.lock().await;
        let queued: Vec<(Scope, Record)> = {
            let outbox = self.outbox.lock();
            outbox.iter().map(|(k, v)| (*k, v.clone())).collect()
        };
        let script = redis::Script::new(include_str!("lua/ban.lua"));
        for (scope, record) in queued {
            let written = write_record(cluster, &script, scope, &record).await;
            if let Err(error) = written {
                tracing::debug!(
                    "cluster: ban change for {} not stored yet: {error}",
                    scope.0
                );
                return false;
            }
            // A newer change of the same client made meanwhile stays for the next pass.
            let mut outbox = self.outbox.lock();
            if outbox
                .get(&scope)
                .is_some_and(|queued| queued.at == record.at)
            {
                outbox.remove(&scope);
            }
        }
        true
    }

    /// Applies a record another instance stored. True when the registry changed.
    pub fn apply(&self, app: &App, field: &str, range: bool, record: &Record) -> bool {
        let Some(scope) = scope_of(field) else {
            self.invalid_total.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let key = (scope, range);
        {
            let mut known = self.known.lock();
            if known.get(&key).is_some_and(|seen| *seen >= record.at) {
                return false;
            }
            // A change made here and still queued is newer than anything Redis holds.
            if self.outbox.lock().contains_key(&key) {
                return false;
            }
            known.insert(key, record.at);
        }
        let changed = match record.until_nanos() {
            None => {
                app.history
                    .note_lift(scope, &format!("instance {}", record.from));
                app.abuse.apply_shared_lift(scope, range)
            }
            Some(until) => {
                let same = app
                    .abuse
                    .ban_until_of(scope)
                    .is_some_and(|held| held / 1_000_000 == until / 1_000_000);
                let changed = !same
                    && app.abuse.apply_shared_ban(
                        scope,
                        range,
                        until,
                        record.offenses,
                        record.cause(),
                    );
                if changed && record.cause() == BanCause::Operator {
                    app.history
                        .note_source(scope, format!("banned on instance {}", record.from));
                }
                changed
            }
        };
        if changed {
            self.applied_total.fetch_add(1, Ordering::Relaxed);
        }
        changed
    }

    /// After a (re)connect: writes what waited, reads every record back and applies what is
    /// new, then writes the bans held here that Redis does not know at all.
    pub async fn resync(&self, app: &App, cluster: &Cluster) -> Result<(), super::LinkError> {
        clean(cluster).await?;
        self.flush(cluster).await;
        let clients = read_all(cluster, cluster.keys.bans()).await?;
        let ranges = read_all(cluster, cluster.keys.ranges()).await?;
        let mut stored = std::collections::HashSet::new();
        for (records, range) in [(&clients, false), (&ranges, true)] {
            for (field, text) in records {
                match serde_json::from_str::<Record>(text) {
                    Ok(record) => {
                        if let Some(scope) = scope_of(field) {
                            stored.insert((scope, range));
                        }
                        self.apply(app, field, range, &record);
                    }
                    Err(_) => {
                        self.invalid_total.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        let mut missing = 0;
        for (scope, range, until) in app.abuse.bans_in_force() {
            if stored.contains(&(scope, range)) || self.outbox.lock().contains_key(&(scope, range))
            {
                continue;
            }
            let offenses = app.abuse.offenses_of(scope, range);
            self.on_local(
                &SharedChange::Banned {
                    scope,
                    range,
                    until,
                    offenses,
                    cause: BanCause::Operator,
                },
                &cluster.id,
            );
            missing += 1;
        }
        if missing > 0 {
            tracing::info!(
                bans = missing,
                "cluster: writing bans held here that Redis did not have"
            );
            self.flush(cluster).await;
        }
        Ok(())
    }
}

async fn write_record(
    cluster: &Cluster,
    script: &redis::Script,
    (scope, range): Scope,
    record: &Record,
) -> Result<(), super::LinkError> {
    let field = field_of(scope, range);
    let text = serde_json::to_string(record).unwrap_or_default();
    let message = Event::Ban {
        from: cluster.id.clone(),
        client: field.clone(),
        range,
        record: record.clone(),
    }
    .to_json();
    let keys = &cluster.keys;
    let mut invocation = script.prepare_invoke();
    if range {
        invocation.key(keys.ranges()).key(keys.range_ends());
    } else {
        invocation
            .key(keys.bans())
            .key(keys.ban_ends())
            .key(keys.strikes(&field));
    }
    invocation
        .arg(&field)
        .arg(text)
        .arg(record.at)
        .arg(record.forget_at())
        .arg(keys.events())
        .arg(message);
    cluster
        .link
        .run(|mut conn| async move { invocation.invoke_async::<i64>(&mut conn).await })
        .await
        .map(|_| ())
}

/// Every field and value of a records hash, read in bounded pieces so a long ban list never
/// makes one exchange outlast the command timeout.
async fn read_all(
    cluster: &Cluster,
    key: String,
) -> Result<Vec<(String, String)>, super::LinkError> {
    let mut found = Vec::new();
    let mut cursor = "0".to_owned();
    // HSCAN may return a field more than once; later copies are the same record.
    for _ in 0..100_000 {
        let key = key.clone();
        let (next, page) = cluster
            .link
            .run(|mut conn| async move {
                redis::cmd("HSCAN")
                    .arg(key)
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async::<(String, Vec<String>)>(&mut conn)
                    .await
            })
            .await?;
        let mut page = page.into_iter();
        while let (Some(field), Some(value)) = (page.next(), page.next()) {
            found.push((field, value));
        }
        if next == "0" {
            break;
        }
        cursor = next;
    }
    Ok(found)
}

/// Forgets records whose time has passed.
async fn clean(cluster: &Cluster) -> Result<(), super::LinkError> {
    let keys = cluster.keys.clone();
    cluster
        .link
        .run(|mut conn| async move {
            redis::Script::new(include_str!("lua/clean.lua"))
                .key(keys.bans())
                .key(keys.ban_ends())
                .key(keys.ranges())
                .key(keys.range_ends())
                .arg(500)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|_| ())
}

/// Connects the registry to the cluster: local changes and strikes are queued for Redis.
pub(crate) fn wire(app: &App, cluster: &Arc<Cluster>) {
    let sharing = Arc::downgrade(cluster);
    app.abuse
        .set_share_hook(Arc::new(move |change: &SharedChange| {
            if let Some(cluster) = sharing.upgrade() {
                cluster.bans.on_local(change, &cluster.id);
            }
        }));
    let striking = Arc::downgrade(cluster);
    app.abuse
        .set_strike_hook(Arc::new(move |scope: IpNet, weight: u32| {
            if let Some(cluster) = striking.upgrade() {
                cluster.bans.on_strike(scope, weight);
            }
        }));
}

/// Writes queued changes as they come (retrying every second while Redis is away) and cleans
/// ended records now and then.
pub(crate) fn spawn_writer(cluster: Arc<Cluster>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last_clean = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = cluster.bans.wake.notified() => {}
                () = tokio::time::sleep(RETRY_EVERY) => {}
            }
            if cluster.bans.unwritten() > 0 {
                cluster.bans.flush(&cluster).await;
            }
            if last_clean.elapsed() >= CLEAN_EVERY {
                last_clean = tokio::time::Instant::now();
                cluster.bans.forget_old_news();
                if let Err(error) = clean(&cluster).await {
                    tracing::debug!("cluster: cleaning ended bans failed: {error}");
                }
            }
        }
    })
}

/// Sends queued strikes to Redis in batches and bans the clients whose shared total reached
/// the threshold.
pub(crate) fn spawn_strikes(app: Weak<App>, cluster: Arc<Cluster>) -> tokio::task::JoinHandle<()> {
    let queue = cluster.bans.strike_queue.lock().take();
    tokio::spawn(async move {
        let Some(mut queue) = queue else { return };
        let script = redis::Script::new(include_str!("lua/strikes.lua"));
        let mut batch = Vec::new();
        loop {
            if queue.recv_many(&mut batch, STRIKE_QUEUE).await == 0 {
                return;
            }
            tokio::time::sleep(STRIKE_BATCH).await;
            while let Ok(strike) = queue.try_recv() {
                batch.push(strike);
            }
            let mut sums: HashMap<IpNet, u32> = HashMap::new();
            for (scope, weight) in batch.drain(..) {
                let sum = sums.entry(scope).or_default();
                *sum = sum.saturating_add(weight);
            }
            let Some(app) = app.upgrade() else { return };
            let settings = app.abuse.settings();
            let scopes: Vec<(IpNet, u32)> = sums.into_iter().collect();
            let mut invocation = script.prepare_invoke();
            invocation
                .arg(millis(settings.window).max(1))
                .arg(settings.threshold.max(1));
            for (scope, _) in &scopes {
                invocation.key(cluster.keys.strikes(&field_of(*scope, false)));
            }
            for (_, weight) in &scopes {
                invocation.arg(*weight);
            }
            let totals = cluster
                .link
                .run(|mut conn| async move { invocation.invoke_async::<Vec<i64>>(&mut conn).await })
                .await;
            let totals = match totals {
                Ok(totals) => totals,
                Err(error) => {
                    let count = u64::try_from(scopes.len()).unwrap_or(u64::MAX);
                    cluster
                        .bans
                        .strikes_unsent
                        .fetch_add(count, Ordering::Relaxed);
                    tracing::debug!("cluster: strikes not shared: {error}");
                    continue;
                }
            };
            for ((scope, _), total) in scopes.iter().zip(totals) {
                if total < 0 {
                    tracing::info!(client = %scope, strikes = -total, "abuse: strikes on all instances reached the threshold");
                    app.abuse.ban_escalating(scope.addr(), BanCause::Strikes);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_strike_queue_drops_and_counts_without_waiting() {
        let bans = SharedBans::default();
        let scope: IpNet = "203.0.113.7/32".parse().unwrap();
        for _ in 0..STRIKE_QUEUE + 5 {
            bans.on_strike(scope, 1);
        }
        assert_eq!(bans.strikes_dropped.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn changes_made_here_keep_their_order_within_a_millisecond() {
        let bans = SharedBans::default();
        let scope: IpNet = "203.0.113.7/32".parse().unwrap();
        let ban = SharedChange::Banned {
            scope,
            range: false,
            until: FOREVER,
            offenses: 1,
            cause: BanCause::Operator,
        };
        bans.on_local(&ban, "a");
        let first = bans.outbox.lock()[&(scope, false)].at;
        bans.on_local(
            &SharedChange::Lifted {
                scope,
                range: false,
            },
            "a",
        );
        let queued = bans.outbox.lock()[&(scope, false)].clone();
        assert!(queued.lifted && queued.at > first);
        assert_eq!(bans.unwritten(), 1);
    }

    #[test]
    fn fields_name_clients_and_ranges_both_ways() {
        let v4: IpNet = "203.0.113.7/32".parse().unwrap();
        assert_eq!(field_of(v4, false), "203.0.113.7");
        assert_eq!(scope_of("203.0.113.7"), Some(v4));
        let v6: IpNet = "2001:db8:1:2::/64".parse().unwrap();
        assert_eq!(field_of(v6, false), "2001:db8:1:2::/64");
        assert_eq!(scope_of("2001:db8:1:2::/64"), Some(v6));
        let range: IpNet = "198.51.100.0/24".parse().unwrap();
        assert_eq!(field_of(range, true), "198.51.100.0/24");
        assert_eq!(scope_of("198.51.100.9/24"), Some(range));
        assert_eq!(scope_of("not an address"), None);
    }

    #[test]
    fn records_know_their_end_and_when_to_be_forgotten() {
        let ban = Record {
            until: Some(5_000),
            permanent: false,
            offenses: 1,
            cause: "strikes".into(),
            lifted: false,
            at: 1_000,
            from: "a".into(),
        };
        assert_eq!(ban.until_nanos(), Some(5_000_000_000));
        assert_eq!(ban.forget_at(), 5_000);
        assert_eq!(ban.cause(), BanCause::Strikes);
        let forever = Record {
            until: None,
            permanent: true,
            ..ban.clone()
        };
        assert_eq!(forever.until_nanos(), Some(FOREVER));
        assert_eq!(forever.forget_at(), 0);
        let lift = Record {
            lifted: true,
            ..ban
        };
        assert_eq!(lift.until_nanos(), None);
        assert_eq!(lift.forget_at(), 1_000 + millis(LIFT_KEPT));
        let garbage: Result<Record, _> = serde_json::from_str(r#"{"until":"soon"}"#);
        assert!(garbage.is_err());
    }
}
