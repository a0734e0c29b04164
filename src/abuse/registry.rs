//! The registry proper: strikes, escalating bans, operator bans, enforcement, listing, sweeping,
//! export and import, and dropping banned clients' visitors from the waiting line.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use ipnet::IpNet;
use parking_lot::{Mutex, RwLock};
use serde::Serialize;

use super::clock::{Clock, SystemClock};
use super::key::Key;
use super::ranges::{self, BanTarget, RangeBan, Ranges};
use super::record::{BanRecord, BanSnapshot, ImportReport, WallTime, ZERO_TIME};
use super::table::{Entry, Table};
use super::{AbuseSettings, BanError, BanLength, FOREVER, ceil_secs, deadline};

/// How many IPv6 /64s of one /48 get entries of their own while the table is at least half full;
/// further /64s of that /48 share one /48 entry. A /48 holder therefore cannot fill the table
/// (and push everyone else out) by rotating through its 65,536 /64s.
pub(crate) const V6_KEYS_PER_48: u32 = 64;

/// Removes the waiting visitors whose client address satisfies the predicate; returns how many.
/// The predicate is cheap and must not call back into the registry's caller.
pub(crate) type LineRemover = Arc<dyn Fn(&dyn Fn(IpAddr) -> bool) -> usize + Send + Sync>;

/// Told of every ban that begins or changes, after the banned visitors left the line. It runs
/// on the thread that banned (often a request's), with no registry lock held.
pub type BanHook = Arc<dyn Fn(&BanNotice) + Send + Sync>;

/// A ban change made on this instance that the other instances of a cluster should make too.
/// Changes applied because another instance made them are never reported again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedChange {
    Banned {
        /// A client's key (/32, /64, shared /48) or a range.
        scope: IpNet,
        range: bool,
        /// Unix nanos; [`FOREVER`] = permanent.
        until: i64,
        offenses: u32,
        cause: BanCause,
    },
    Lifted {
        scope: IpNet,
        range: bool,
    },
}

/// Told of every [`SharedChange`]. It runs on the thread that made the change (often a
/// request's), with no registry lock held, so it must not block.
pub type ShareHook = Arc<dyn Fn(&SharedChange) + Send + Sync>;

/// Told of every strike that was counted and did not ban: the struck key's addresses and the
/// weight. Same rules as [`ShareHook`].
pub type StrikeHook = Arc<dyn Fn(IpNet, u32) + Send + Sync>;

/// What made a ban begin or change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanCause {
    /// Strikes added up within the window.
    Strikes,
    /// The client asked for a ban path.
    BanPath,
    /// An operator (admin API, portal, kick and ban).
    Operator,
}

/// A ban that began or changed, as observers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BanNotice {
    /// The addresses it covers: a client's /32 (IPv4), /64 or shared /48 (IPv6), or a range.
    pub scope: IpNet,
    pub range: bool,
    /// Unix nanos; [`FOREVER`] = permanent.
    pub until: i64,
    /// A new offense (the scope was not banned just before), not a replaced end time.
    pub fresh: bool,
    pub cause: BanCause,
}

/// One active ban as operators see it (`GET /_room/abuse`, the portal). Field order is the JSON
/// key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BanView {
    pub client: String,
    /// UTC RFC 3339; the zero time for permanent bans.
    pub until: String,
    /// Rounded up; 0 for permanent bans.
    pub remaining_seconds: u64,
    pub offenses: u32,
    pub range: bool,
    pub permanent: bool,
}

/// The result of an operator ban.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BanOutcome {
    /// The normalised target: a client key or a masked range.
    pub client: String,
    /// `null` for a permanent ban.
    pub until: Option<WallTime>,
    pub range: bool,
    pub permanent: bool,
    /// Waiting visitors removed from the line by this ban.
    pub dropped: usize,
    /// For ranges: the exempt prefixes inside or around it, which the ban does not reach.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exempt_within: Option<Vec<String>>,
}

/// The `abuse_*` figures of `/_room/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AbuseStats {
    pub enabled: bool,
    /// Tracked clients; 0 while abuse handling is off.
    pub tracked: u64,
    /// Range bans; 0 while abuse handling is off.
    pub range_bans: u64,
    pub strikes_total: u64,
    pub bans_total: u64,
    pub rejected_total: u64,
    pub dropped_total: u64,
}

#[derive(Default)]
struct Counters {
    strikes: AtomicU64,
    bans: AtomicU64,
    rejected: AtomicU64,
    /// Bumped on every change worth saving, so a saver can tell when to write.
    changes: AtomicU64,
}

/// Ban scopes waiting to be applied to the line, and who is applying them.
#[derive(Default)]
struct LineDrop {
    remover: RwLock<Option<LineRemover>>,
    /// Observer of bans; it runs after the line has been cleared.
    ban_hook: RwLock<Option<BanHook>>,
    /// Observer of local ban changes other instances should hear of (`-cluster`).
    share_hook: RwLock<Option<ShareHook>>,
    /// Observer of strikes that did not ban, so other instances' strikes can add up.
    strike_hook: RwLock<Option<StrikeHook>>,
    pending: Mutex<Vec<IpNet>>,
    draining: AtomicBool,
}

/// Process-wide abuse state.
pub struct Registry {
    settings: ArcSwap<AbuseSettings>,
    clock: Arc<dyn Clock>,
    table: Table,
    ranges: Ranges,
    counters: Counters,
    line: LineDrop,
}

impl Registry {
    pub fn new(settings: AbuseSettings) -> Registry {
        Registry::with_clock(settings, Arc::new(SystemClock))
    }

    pub fn with_clock(settings: AbuseSettings, clock: Arc<dyn Clock>) -> Registry {
        Registry {
            settings: ArcSwap::from_pointee(settings),
            clock,
            table: Table::default(),
            ranges: Ranges::default(),
            counters: Counters::default(),
            line: LineDrop::default(),
        }
    }

    /// Swaps the tuning snapshot. Entries, bans and counters stay.
    pub fn reconfigure(&self, settings: AbuseSettings) {
        self.settings.store(Arc::new(settings));
    }

    pub fn settings(&self) -> Arc<AbuseSettings> {
        self.settings.load_full()
    }

    pub fn enabled(&self) -> bool {
        self.settings.load().enabled
    }

    /// Wall-clock now, unix nanos, from the registry's clock.
    pub fn now(&self) -> i64 {
        self.clock.now_nanos()
    }

    pub fn is_exempt(&self, ip: IpAddr) -> bool {
        self.settings.load().is_exempt(ip)
    }

    /// Where waiting visitors of a newly banned client are removed.
    pub fn set_line_remover(&self, remover: LineRemover) {
        *self.line.remover.write() = Some(remover);
    }

    /// Who is told of every ban that begins or changes (the request history).
    pub fn set_ban_hook(&self, hook: BanHook) {
        *self.line.ban_hook.write() = Some(hook);
    }

    fn notify(&self, notice: BanNotice) {
        self.notify_observers(notice);
        let share = self.line.share_hook.read().clone();
        if let Some(share) = share {
            share(&SharedChange::Banned {
                scope: notice.scope,
                range: notice.range,
                until: notice.until,
                offenses: self.offenses_of(notice.scope, notice.range),
                cause: notice.cause,
            });
        }
    }

    /// Tells the ban hook (the history) alone: for bans another instance made.
    fn notify_observers(&self, notice: BanNotice) {
        let hook = self.line.ban_hook.read().clone();
        if let Some(hook) = hook {
            hook(&notice);
        }
    }

    fn share_lift(&self, scope: IpNet, range: bool) {
        let share = self.line.share_hook.read().clone();
        if let Some(share) = share {
            share(&SharedChange::Lifted { scope, range });
        }
    }

    /// Who hears of ban changes made here so other instances can make them too.
    pub fn set_share_hook(&self, hook: ShareHook) {
        *self.line.share_hook.write() = Some(hook);
    }

    /// Who hears of strikes that did not ban, so strikes on several instances add up.
    pub fn set_strike_hook(&self, hook: StrikeHook) {
        *self.line.strike_hook.write() = Some(hook);
    }

    /// A counter that moves whenever bans or offense history change.
    pub fn changes(&self) -> u64 {
        self.counters.changes.load(Ordering::Relaxed)
    }

    // ----- enforcement -------------------------------------------------------------------

    /// The identify stage in one call: with abuse on, a banned client's remaining ban (counted
    /// as a rejection), or a fresh ban when `path` is a ban path. `None` = carry on.
    pub fn enforce(&self, client: Option<IpAddr>, path: &str) -> Option<BanLength> {
        let settings = self.settings.load();
        if !settings.enabled {
            return None;
        }
        let ip = client?;
        let now = self.now();
        if let Some(length) = self.ban_on(&settings, ip, now) {
            self.counters.rejected.fetch_add(1, Ordering::Relaxed);
            return Some(length);
        }
        if settings.is_ban_path(path) {
            return self.ban_escalating(ip, BanCause::BanPath);
        }
        None
    }

    /// Whether `ip` is banned now, whether or not abuse handling is on. An exempt address is
    /// never banned, even if its key or a range covering it is.
    pub fn banned(&self, ip: IpAddr) -> Option<BanLength> {
        self.ban_on(&self.settings.load(), ip, self.now())
    }

    fn ban_on(&self, settings: &AbuseSettings, ip: IpAddr, now: i64) -> Option<BanLength> {
        let key = Key::of(ip);
        let length = self
            .table
            .read(key, |entry| entry.and_then(|e| e.ban_left(now)))
            .or_else(|| {
                let wide = key.wide().filter(|_| self.table.has_wide_entries())?;
                self.table
                    .read(wide, |entry| entry.and_then(|e| e.ban_left(now)))
            })
            .or_else(|| {
                self.ranges
                    .lookup(ip, now)
                    .map(|until| length_of(until, now))
            })?;
        // Exemption is checked here, at enforcement, on the address itself: an allow-listed
        // address is never refused, even when a neighbour in its /64 or a range is banned.
        (!settings.is_exempt(ip)).then_some(length)
    }

    // ----- strikes and automatic bans ----------------------------------------------------

    /// Charges `weight` strikes. Returns whether the client is banned afterwards. Exempt
    /// clients, weight 0 and abuse off are no-ops.
    pub fn strike(&self, ip: IpAddr, weight: u32) -> bool {
        if weight == 0 {
            return false;
        }
        let settings = self.settings.load_full();
        if !settings.enabled || settings.is_exempt(ip) {
            return false;
        }
        self.counters.strikes.fetch_add(1, Ordering::Relaxed);
        let now = self.now();
        let key = self.key_for(ip, &settings);
        let window = settings.window_nanos();
        let outcome = self
            .table
            .upsert(key, now, max_entries(&settings), |entry| {
                entry.last_active = now;
                if entry.is_banned(now) {
                    return (true, None);
                }
                if entry.window.add(now, window, weight, settings.threshold) {
                    return (true, Some(self.escalate(entry, now, &settings)));
                }
                (false, None)
            });
        let banned = match outcome {
            Some((banned, fresh)) => {
                if let Some(length) = fresh {
                    self.started(key, length, now, BanCause::Strikes);
                }
                banned
            }
            None => false,
        };
        if !banned {
            let hook = self.line.strike_hook.read().clone();
            if let Some(hook) = hook {
                hook(key.network(), weight);
            }
        }
        banned
    }

    /// Bans at once, escalating (ban paths, "kick and ban"). Already banned → the time left, no
    /// new offense. Exempt or untrackable (table full) → `None`.
    pub fn ban_now(&self, ip: IpAddr) -> Option<BanLength> {
        self.ban_escalating(ip, BanCause::Operator)
    }

    /// An escalating ban (the next cooldown of the client's offense history) for `cause`;
    /// `None` for an exempt client.
    pub fn ban_escalating(&self, ip: IpAddr, cause: BanCause) -> Option<BanLength> {
        let settings = self.settings.load_full();
        if settings.is_exempt(ip) {
            return None;
        }
        let now = self.now();
        let key = self.key_for(ip, &settings);
        let (length, fresh) = self
            .table
            .upsert(key, now, max_entries(&settings), |entry| {
                entry.last_active = now;
                match entry.ban_left(now) {
                    Some(left) => (left, false),
                    None => (self.escalate(entry, now, &settings), true),
                }
            })?;
        if fresh {
            self.started(key, length, now, cause);
        }
        Some(length)
    }

    /// An escalating ban on `entry`: one more offense, a cooldown twice the last one.
    fn escalate(&self, entry: &mut Entry, now: i64, settings: &AbuseSettings) -> BanLength {
        entry.offenses = entry.offenses.saturating_add(1);
        let length = settings.cooldown_for(entry.offenses);
        entry.banned_until = deadline(now, length);
        entry.window.reset(now);
        self.counters.bans.fetch_add(1, Ordering::Relaxed);
        self.counters.changes.fetch_add(1, Ordering::Relaxed);
        BanLength::Timed(length)
    }

    /// The key a new strike or ban lands on: the address's own key, or its /48's shared entry
    /// once the table is under pressure and that /48 already holds its share of /64s.
    fn key_for(&self, ip: IpAddr, settings: &AbuseSettings) -> Key {
        let key = Key::of(ip);
        let Some(wide) = key.wide() else {
            return key;
        };
        if self.table.len() < max_entries(settings) / 2
            || self.table.per_wide(wide) < V6_KEYS_PER_48
            || self.table.read(key, |entry| entry.is_some())
        {
            return key;
        }
        wide
    }

    fn started(&self, key: Key, length: BanLength, now: i64, cause: BanCause) {
        let seconds = length.retry_after_secs().unwrap_or(0);
        let why = match cause {
            BanCause::Strikes => "strikes",
            BanCause::BanPath => "ban path",
            BanCause::Operator => "operator",
        };
        tracing::info!(client = %key, seconds, why, "abuse: ban started");
        self.drop_waiting(key.network());
        self.notify(BanNotice {
            scope: key.network(),
            range: false,
            until: match length {
                BanLength::Permanent => FOREVER,
                BanLength::Timed(left) => deadline(now, left),
            },
            fresh: true,
            cause,
        });
    }

    // ----- operator bans -----------------------------------------------------------------

    /// Bans one client for `length` (a zero length means permanent). Replacing an active ban is
    /// never a new offense. Returns the key banned.
    pub fn ban_for(&self, ip: IpAddr, length: BanLength) -> Result<Key, BanError> {
        let (key, notice) = self.ban_client(ip, length)?;
        self.drop_waiting(key.network());
        self.notify(notice);
        Ok(key)
    }

    fn ban_client(&self, ip: IpAddr, length: BanLength) -> Result<(Key, BanNotice), BanError> {
        let settings = self.settings.load_full();
        if !settings.enabled {
            return Err(BanError::Disabled);
        }
        if settings.is_exempt(ip) {
            return Err(BanError::Exempt);
        }
        let now = self.now();
        let key = Key::of(ip);
        let until = until_of(length, now);
        let fresh = self
            .table
            .upsert(key, now, max_entries(&settings), |entry| {
                let fresh = !entry.is_banned(now);
                if fresh {
                    entry.offenses = entry.offenses.saturating_add(1);
                    self.counters.bans.fetch_add(1, Ordering::Relaxed);
                }
                entry.banned_until = until;
                entry.window.reset(now);
                entry.last_active = now;
                fresh
            })
            .ok_or(BanError::Full)?;
        self.counters.changes.fetch_add(1, Ordering::Relaxed);
        tracing::info!(client = %key, permanent = until == FOREVER, "abuse: operator ban");
        let notice = BanNotice {
            scope: key.network(),
            range: false,
            until,
            fresh,
            cause: BanCause::Operator,
        };
        Ok((key, notice))
    }

    /// Bans a range for `length` (zero = permanent). Exemption is not checked here: exempt
    /// addresses inside are simply never refused.
    pub fn ban_range(&self, net: IpNet, length: BanLength) -> Result<(), BanError> {
        let notice = self.ban_net(net, length)?;
        self.drop_waiting(net);
        self.notify(notice);
        Ok(())
    }

    fn ban_net(&self, net: IpNet, length: BanLength) -> Result<BanNotice, BanError> {
        if !self.enabled() {
            return Err(BanError::Disabled);
        }
        let now = self.now();
        let until = until_of(length, now);
        let banned = self.ranges.ban(net.trunc(), until, now)?;
        if banned.new_offense {
            self.counters.bans.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.changes.fetch_add(1, Ordering::Relaxed);
        tracing::info!(range = %net.trunc(), "abuse: operator range ban");
        Ok(BanNotice {
            scope: net.trunc(),
            range: true,
            until,
            fresh: banned.new_offense,
            cause: BanCause::Operator,
        })
    }

    /// An operator ban of a parsed target, reporting exactly how many waiting visitors it
    /// removed (the line is cleared synchronously, before answering).
    pub fn ban(&self, target: BanTarget, length: BanLength) -> Result<BanOutcome, BanError> {
        let now = self.now();
        let until = until_of(length, now);
        let scope = target.scope();
        let (client, exempt_within, notice) = match target {
            BanTarget::Single(ip) => {
                let (key, notice) = self.ban_client(ip, length)?;
                (key.to_string(), None, notice)
            }
            BanTarget::Range(net) => {
                let notice = self.ban_net(net, length)?;
                (net.to_string(), Some(self.exempt_within(&net)), notice)
            }
        };
        let dropped = self.remove_waiting(&[scope]);
        self.notify(notice);
        Ok(BanOutcome {
            client,
            until: (until != FOREVER).then_some(WallTime(until)),
            range: target.is_range(),
            permanent: until == FOREVER,
            dropped,
            exempt_within,
        })
    }

    /// Forgets a client (its ban and offense history). False when it was not tracked.
    pub fn unban(&self, ip: IpAddr) -> bool {
        let key = Key::of(ip);
        let removed = self.forget(key);
        if removed {
            self.share_lift(key.network(), false);
        }
        removed
    }

    fn forget(&self, key: Key) -> bool {
        let removed = self.table.remove(key);
        if removed {
            self.counters.changes.fetch_add(1, Ordering::Relaxed);
            tracing::info!(client = %key, "abuse: unbanned");
        }
        removed
    }

    /// Lifts an operator target: a client, a range (exact prefix), or a shared IPv6 /48 entry.
    pub fn unban_target(&self, target: BanTarget) -> bool {
        match target {
            BanTarget::Single(ip) => self.unban(ip),
            BanTarget::Range(net) => {
                if self.ranges.unban(net) {
                    self.counters.changes.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(range = %net, "abuse: range unbanned");
                    self.share_lift(net, true);
                    return true;
                }
                match net {
                    IpNet::V6(v6) if v6.prefix_len() == 48 => {
                        let wide = Key::of(net.addr()).wide();
                        let removed = wide.is_some_and(|wide| self.forget(wide));
                        if let (true, Some(wide)) = (removed, wide) {
                            self.share_lift(wide.network(), false);
                        }
                        removed
                    }
                    _ => false,
                }
            }
        }
    }

    /// Text of every exempt prefix overlapping `net`.
    pub fn exempt_within(&self, net: &IpNet) -> Vec<String> {
        let settings = self.settings.load();
        ranges::exempt_within(
            net,
            settings.allow.nets().iter().chain(settings.trusted.nets()),
        )
    }

    // ----- waiting line ------------------------------------------------------------------

    /// Queues a ban scope for removal from the line and applies it at once. Bans arriving while
    /// another thread is already clearing the line are folded into its next pass, so a burst of
    /// bans costs a few passes, not one each, and no pass ever undoes another.
    fn drop_waiting(&self, scope: IpNet) {
        if self.line.remover.read().is_none() {
            return;
        }
        self.line.pending.lock().push(scope);
        loop {
            if self.line.draining.swap(true, Ordering::SeqCst) {
                // The thread draining now will pick our scope up.
                return;
            }
            loop {
                let batch = std::mem::take(&mut *self.line.pending.lock());
                if batch.is_empty() {
                    break;
                }
                self.remove_waiting(&batch);
            }
            self.line.draining.store(false, Ordering::SeqCst);
            // A scope pushed after our last look, by a thread that saw us draining, is ours.
            if self.line.pending.lock().is_empty() {
                return;
            }
        }
    }

    /// One pass over the line removing every non-exempt visitor inside any of `scopes`.
    fn remove_waiting(&self, scopes: &[IpNet]) -> usize {
        let Some(remover) = self.line.remover.read().clone() else {
            return 0;
        };
        let settings = self.settings.load_full();
        let removed = remover(&|ip: IpAddr| {
            let ip = ip.to_canonical();
            scopes.iter().any(|scope| scope.contains(&ip)) && !settings.is_exempt(ip)
        });
        if removed > 0 {
            tracing::info!("queue: bans removed {removed} waiting visitor(s)");
        }
        removed
    }

    // ----- listing, stats, sweeping ------------------------------------------------------

    /// Every active ban, clients and ranges: permanent first, then the latest end first, then
    /// clients before ranges, then by text.
    pub fn bans(&self) -> Vec<BanView> {
        let now = self.now();
        let mut views: Vec<(i64, BanView)> = Vec::new();
        self.table.for_each(|key, entry| {
            if entry.is_banned(now) {
                let shown = view(
                    key.to_string(),
                    entry.banned_until,
                    entry.offenses,
                    false,
                    now,
                );
                views.push((entry.banned_until, shown));
            }
        });
        for (net, ban) in self.ranges.all() {
            if ban.until > now {
                views.push((
                    ban.until,
                    view(net.to_string(), ban.until, ban.offenses, true, now),
                ));
            }
        }
        // FOREVER sorts first on its own, being the latest possible end.
        views.sort_by(|(a_until, a), (b_until, b)| {
            b_until
                .cmp(a_until)
                .then_with(|| a.range.cmp(&b.range))
                .then_with(|| a.client.cmp(&b.client))
        });
        views.into_iter().map(|(_, shown)| shown).collect()
    }

    /// When the ban on exactly `scope` ends (unix nanos, [`FOREVER`] = permanent), if one is
    /// in force: a client's key (/32, /64, shared /48) or a range, without looking at wider
    /// ranges or exemptions.
    pub fn ban_until_of(&self, scope: IpNet) -> Option<i64> {
        let now = self.now();
        let key = Key::of(scope.addr());
        let own = match scope {
            IpNet::V4(v4) if v4.prefix_len() == 32 => Some(key),
            IpNet::V6(v6) if v6.prefix_len() == 64 => Some(key),
            IpNet::V6(v6) if v6.prefix_len() == 48 => key.wide(),
            _ => None,
        };
        own.and_then(|key| {
            self.table.read(key, |entry| {
                entry.filter(|e| e.is_banned(now)).map(|e| e.banned_until)
            })
        })
        .or_else(|| {
            self.ranges
                .get(scope)
                .map(|ban| ban.until)
                .filter(|until| *until > now)
        })
    }

    /// Every ban in force: its scope, whether it is a range, and when it ends (unix nanos,
    /// [`FOREVER`] = permanent).
    pub fn bans_in_force(&self) -> Vec<(IpNet, bool, i64)> {
        let now = self.now();
        let mut found = Vec::new();
        self.table.for_each(|key, entry| {
            if entry.is_banned(now) {
                found.push((key.network(), false, entry.banned_until));
            }
        });
        for (net, ban) in self.ranges.all() {
            if ban.until > now {
                found.push((net, true, ban.until));
            }
        }
        found
    }

    pub fn tracked(&self) -> usize {
        self.table.len()
    }

    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    pub fn stats(&self) -> AbuseStats {
        let enabled = self.enabled();
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        AbuseStats {
            enabled,
            tracked: if enabled { self.table.len() as u64 } else { 0 },
            range_bans: if enabled { self.ranges.len() as u64 } else { 0 },
            strikes_total: load(&self.counters.strikes),
            bans_total: load(&self.counters.bans),
            rejected_total: load(&self.counters.rejected),
            dropped_total: self.table.dropped(),
        }
    }

    /// Forgets entries with nothing left to remember: not banned, no strike in the window, and
    /// either no offense or a last ban that ended more than the maximum cooldown ago.
    pub fn sweep(&self) -> usize {
        let settings = self.settings.load();
        let now = self.now();
        let window = settings.window_nanos();
        let keep_history = settings.max_cooldown_nanos();
        let mut history_dropped = false;
        let removed = self.table.retain(|_, entry| {
            if entry.is_banned(now) || !entry.window.is_idle(now, window) {
                return true;
            }
            if entry.offenses == 0 {
                return false;
            }
            let keep = now.saturating_sub(entry.banned_until) <= keep_history;
            history_dropped |= !keep;
            keep
        });
        if history_dropped {
            self.counters.changes.fetch_add(1, Ordering::Relaxed);
        }
        removed
    }

    /// Drops ended range bans.
    pub fn sweep_ranges(&self) -> usize {
        let removed = self.ranges.sweep(self.now());
        if removed > 0 {
            self.counters.changes.fetch_add(1, Ordering::Relaxed);
        }
        removed
    }

    /// How often the janitor runs: half the window, at least every 10 s.
    pub fn janitor_period(&self) -> Duration {
        (self.settings.load().window / 2).max(Duration::from_secs(10))
    }

    /// Sweeps entries and ranges every [`Registry::janitor_period`] until the registry is
    /// dropped or the task is aborted.
    pub fn spawn_janitor(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let registry = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(period) = registry.upgrade().map(|r| r.janitor_period()) else {
                    return;
                };
                tokio::time::sleep(period).await;
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                registry.sweep();
                registry.sweep_ranges();
            }
        })
    }

    // ----- export and import -------------------------------------------------------------

    /// Clients with offense history (ended bans included) and active ranges, each sorted by
    /// client text.
    pub fn export(&self) -> BanSnapshot {
        let now = self.now();
        let mut clients = Vec::new();
        self.table.for_each(|key, entry| {
            if entry.offenses > 0 {
                clients.push(record(key.to_string(), entry.banned_until, entry.offenses));
            }
        });
        let mut ranges: Vec<BanRecord> = self
            .ranges
            .all()
            .into_iter()
            .filter(|(_, ban)| ban.until > now)
            .map(|(net, ban)| record(net.to_string(), ban.until, ban.offenses))
            .collect();
        clients.sort_by(|a, b| a.client.cmp(&b.client));
        ranges.sort_by(|a, b| a.client.cmp(&b.client));
        BanSnapshot { clients, ranges }
    }

    /// Restores saved bans. Skips what cannot be parsed, clients that are now exempt, history
    /// older than the maximum cooldown and ended ranges; what does not fit is counted as dropped.
    /// Restored clients start with no strikes and at least one offense.
    pub fn import(&self, snapshot: &BanSnapshot) -> ImportReport {
        let settings = self.settings.load_full();
        let now = self.now();
        let keep_history = settings.max_cooldown_nanos();
        let mut report = ImportReport::default();
        for saved in &snapshot.clients {
            let Some(key) = super::key::Key::parse(&saved.client) else {
                report.skipped += 1;
                continue;
            };
            let Some(until) = saved_until(saved) else {
                report.skipped += 1;
                continue;
            };
            let exempt = settings.is_exempt(key.network().addr());
            if exempt || (until != FOREVER && now.saturating_sub(until) > keep_history) {
                report.skipped += 1;
                continue;
            }
            let offenses = saved.offenses.max(1);
            let restored = self
                .table
                .upsert(key, now, max_entries(&settings), |entry| {
                    entry.banned_until = until;
                    entry.offenses = offenses;
                    entry.window.reset(now);
                    entry.last_active = now;
                });
            match restored {
                Some(()) => report.clients += 1,
                None => report.dropped += 1,
            }
        }
        for saved in &snapshot.ranges {
            let net = match BanTarget::parse(&saved.client) {
                Ok(BanTarget::Range(net)) => net,
                _ => {
                    report.skipped += 1;
                    continue;
                }
            };
            let Some(until) = saved_until(saved).filter(|until| *until > now) else {
                report.skipped += 1;
                continue;
            };
            let ban = RangeBan {
                until,
                offenses: saved.offenses.max(1),
            };
            match self.ranges.restore(net, ban) {
                Ok(()) => report.ranges += 1,
                Err(_) => report.dropped += 1,
            }
        }
        report
    }
}

fn view(client: String, until: i64, offenses: u32, range: bool, now: i64) -> BanView {
    let permanent = until == FOREVER;
    let (until_text, remaining_seconds) = if permanent {
        (ZERO_TIME.to_string(), 0)
    } else {
        let left = Duration::from_nanos(until.saturating_sub(now).max(0).unsigned_abs());
        (WallTime(until).to_string(), ceil_secs(left))
    };
    BanView {
        client,
        until: until_text,
        remaining_seconds,
        offenses,
        range,
        permanent,
    }
}

fn record(client: String, until: i64, offenses: u32) -> BanRecord {
    let permanent = until == FOREVER;
    BanRecord {
        client,
        until: (!permanent).then_some(WallTime(until)),
        permanent,
        offenses,
    }
}

fn saved_until(saved: &BanRecord) -> Option<i64> {
    if saved.permanent {
        return Some(FOREVER);
    }
    saved.until.map(|t| t.0.min(FOREVER - 1))
}

fn until_of(length: BanLength, now: i64) -> i64 {
    match length {
        BanLength::Timed(d) if !d.is_zero() => deadline(now, d),
        _ => FOREVER,
    }
}

fn length_of(until: i64, now: i64) -> BanLength {
    if until == FOREVER {
        BanLength::Permanent
    } else {
        BanLength::Timed(Duration::from_nanos(
            until.saturating_sub(now).max(1).unsigned_abs(),
        ))
    }
}

fn max_entries(settings: &AbuseSettings) -> usize {
    usize::try_from(settings.max_entries)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// The client key whose addresses are exactly `scope`: a /32, a /64 or a shared /48.
fn key_of_scope(scope: IpNet) -> Option<Key> {
    let key = Key::of(scope.addr());
    match scope {
        IpNet::V4(v4) if v4.prefix_len() == 32 => Some(key),
        IpNet::V6(v6) if v6.prefix_len() == 64 => Some(key),
        IpNet::V6(v6) if v6.prefix_len() == 48 => key.wide(),
        _ => None,
    }
}

/// Bans another instance of a cluster made or lifted. They change this registry as an operator
/// ban would (waiting visitors leave the line, the history hears of it, bans.json is saved),
/// but are never reported to the share hook, so they do not travel back.
impl Registry {
    /// The offense count of the client key or range `scope` (0 when untracked).
    pub fn offenses_of(&self, scope: IpNet, range: bool) -> u32 {
        if range {
            return self.ranges.get(scope).map_or(0, |ban| ban.offenses);
        }
        key_of_scope(scope).map_or(0, |key| {
            self.table
                .read(key, |entry| entry.map_or(0, |e| e.offenses))
        })
    }

    /// Bans `scope` until `until` (unix nanos, [`FOREVER`] = permanent) with at least
    /// `offenses` offenses, as another instance did. False when nothing changed: the same end
    /// is already in force, it has ended, the client is exempt here, or there is no room.
    pub fn apply_shared_ban(
        &self,
        scope: IpNet,
        range: bool,
        until: i64,
        offenses: u32,
        cause: BanCause,
    ) -> bool {
        let now = self.now();
        if until != FOREVER && until <= now {
            return false;
        }
        let notice = if range {
            let net = scope.trunc();
            let before = self.ranges.get(net);
            if before.is_some_and(|ban| ban.until == until) {
                return false;
            }
            let fresh = before.is_none_or(|ban| ban.until <= now);
            let ban = RangeBan {
                until,
                offenses: offenses.max(before.map_or(0, |ban| ban.offenses)).max(1),
            };
            if self.ranges.restore(net, ban).is_err() {
                return false;
            }
            if fresh {
                self.counters.bans.fetch_add(1, Ordering::Relaxed);
            }
            BanNotice {
                scope: net,
                range: true,
                until,
                fresh,
                cause,
            }
        } else {
            let Some(key) = key_of_scope(scope) else {
                return false;
            };
            let settings = self.settings.load_full();
            if settings.is_exempt(scope.addr()) {
                return false;
            }
            let changed = self
                .table
                .upsert(key, now, max_entries(&settings), |entry| {
                    if entry.banned_until == until {
                        return None;
                    }
                    let fresh = !entry.is_banned(now);
                    entry.offenses = entry.offenses.max(offenses).max(1);
                    entry.banned_until = until;
                    entry.window.reset(now);
                    entry.last_active = now;
                    Some(fresh)
                })
                .flatten();
            let Some(fresh) = changed else {
                return false;
            };
            if fresh {
                self.counters.bans.fetch_add(1, Ordering::Relaxed);
            }
            BanNotice {
                scope: key.network(),
                range: false,
                until,
                fresh,
                cause,
            }
        };
        self.counters.changes.fetch_add(1, Ordering::Relaxed);
        tracing::info!(client = %notice.scope, range, permanent = until == FOREVER, "abuse: ban shared by another instance");
        self.drop_waiting(notice.scope);
        self.notify_observers(notice);
        true
    }

    /// Lifts the ban on exactly `scope` (a client key or a range) because another instance
    /// lifted it. False when there was nothing to lift.
    pub fn apply_shared_lift(&self, scope: IpNet, range: bool) -> bool {
        if range {
            let removed = self.ranges.unban(scope.trunc());
            if removed {
                self.counters.changes.fetch_add(1, Ordering::Relaxed);
                tracing::info!(range = %scope, "abuse: range unbanned by another instance");
            }
            return removed;
        }
        key_of_scope(scope).is_some_and(|key| self.forget(key))
    }
}
