//! The request history: what each client asked for on the main listener and how it was
//! answered, and every ban as a window (what started it, what the banned addresses asked for
//! while it lasted, how it ended). Kept in memory within fixed bounds whether or not anyone
//! looks at it, logged to `history.jsonl` and read back at start.
//!
//! - [`History`] is the store, shared by `Arc`: the request path records into it
//!   ([`History::record`]), the abuse registry tells it of bans (its ban hook), a maintenance
//!   task notices lifted bans and forgets what is too old, and the portal reads it through the
//!   query methods of [`view`].
//! - `clients` holds the per-address records, `windows` the ban windows.
//! - `event` is the line format, `writer` the thread that appends it, `replay` reads it back.
//!
//! Time is wall-clock unix nanoseconds from an injectable [`Clock`], as in the abuse registry.

mod clients;
mod event;
mod replay;
mod view;
mod windows;
mod writer;

#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderValue, Method};
use ipnet::IpNet;
use parking_lot::Mutex;

use crate::abuse::clock::{Clock, SystemClock};
use crate::abuse::{BanCause, BanNotice, Registry};
use clients::{Clients, Entry, MethodText, floor_boundary};
use event::{BanState, Event, ReqEvent};
use windows::{Lift, Pending, Trigger, Window, Windows};
use writer::{Log, LogLimits};

pub use view::{
    BANS_LISTED, BanDetail, BanPage, BanQuery, BanRow, ClientDetail, ClientPage, ClientQuery,
    ClientRow, EntryRow, HistoryView, Hits, LISTED, Limits, TriggerRow,
};
pub use writer::LogStatus;

/// Clients remembered at most (across all shards).
pub const MAX_CLIENTS: usize = 4096;
/// Requests remembered per client.
pub const PER_CLIENT: usize = 100;
/// How long an idle client, or an ended ban window, is remembered; older log lines of requests
/// are not read back.
pub const RETENTION: Duration = Duration::from_secs(72 * 3600);
/// Ban windows remembered at most.
pub const MAX_WINDOWS: usize = 5000;
/// Paths, and addresses, itemised per ban window; the rest are counted together.
pub const WINDOW_ITEMS: usize = 100;
/// Browsers remembered per client; further ones show as "(another browser)".
pub const MAX_AGENTS: usize = 4;
/// Characters of a `User-Agent` kept.
pub const AGENT_LEN: usize = 200;
/// Bytes of a request's path and query kept.
pub const TARGET_LEN: usize = 256;
/// Blocked requests of one client under one ban logged line by line; the rest are summed.
pub const RAW_BLOCKED_LINES: u32 = 100;

/// How long after a ban began without a known cause the newest request in its scope is taken
/// as its trigger, and how far back that request may be.
const TRIGGER_GRACE: Duration = Duration::from_millis(500);
const TRIGGER_LOOKBACK: Duration = Duration::from_secs(5);

/// Who lifted a ban that vanished from the registry without the portal.
pub const LIFTED_OUTSIDE: &str = "the admin API or another tool outside the portal";
/// Who lifted a logged ban the registry no longer had after a restart.
pub const LIFTED_BY_RESTART: &str = "concert restarted without it (not in bans.json)";
/// The source of a ban found in force at start-up with no window.
pub const RESTORED_SOURCE: &str = "in force when concert started (restored from bans.json)";
/// The source of an operator ban nobody named a source for.
pub const OPERATOR_SOURCE: &str = "banned through the admin API or another tool outside the portal";

/// The log file for the `history_log` setting: `off`, `none`, `false` or `0` keep the history
/// in memory only; empty means `history.jsonl` in the data directory (memory only without
/// one); anything else is the file's path.
pub fn log_path(setting: &str, data_dir: Option<&Path>) -> Option<PathBuf> {
    let setting = setting.trim();
    if ["off", "none", "false", "0"]
        .iter()
        .any(|off| setting.eq_ignore_ascii_case(off))
    {
        return None;
    }
    if setting.is_empty() {
        return data_dir.map(|dir| dir.join("history.jsonl"));
    }
    Some(PathBuf::from(setting))
}

/// What the request path notes when a request arrives, for [`History::record`].
pub(crate) struct Arrival {
    /// The ban sequence number then: a ban with a higher one began during the request.
    seq: u64,
    agent: Option<HeaderValue>,
}

/// A request whose answer is known.
pub(crate) struct Seen<'a> {
    pub client: IpAddr,
    pub method: &'a Method,
    /// Path and query.
    pub target: &'a str,
    /// Length of the path part of `target`.
    pub path_len: usize,
    pub status: u16,
    pub latency: Duration,
    /// Answered with the notice of a ban (in force, or begun by this very request).
    pub banned: bool,
    /// A successful answer here is not worth keeping (assets, status polls, health checks).
    pub quiet: bool,
    pub rank: u8,
}

/// The request history. See the module documentation.
pub struct History {
    clock: Arc<dyn Clock>,
    registry: Arc<Registry>,
    clients: Clients,
    windows: Mutex<Windows>,
    /// Moves with every ban notice; read at each arrival.
    ban_seq: AtomicU64,
    /// Bans whose trigger is still being looked for; while 0 the request path skips the look.
    pending: AtomicUsize,
    log: OnceLock<Log>,
    limits: LogLimits,
    /// Lines of the log that could not be read back at start.
    unreadable_lines: AtomicU64,
}

impl History {
    pub fn new(registry: Arc<Registry>) -> History {
        History::with_clock(registry, Arc::new(SystemClock))
    }

    pub fn with_clock(registry: Arc<Registry>, clock: Arc<dyn Clock>) -> History {
        History {
            clock,
            registry,
            clients: Clients::new(),
            windows: Mutex::new(Windows::new()),
            ban_seq: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            log: OnceLock::new(),
            limits: LogLimits::default(),
            unreadable_lines: AtomicU64::new(0),
        }
    }

    fn now(&self) -> i64 {
        self.clock.now_nanos()
    }

    // ----- start and stop ----------------------------------------------------------------

    /// Reads the log at `path` back (when there is one), forgets what is too old, starts the
    /// writer and squares the windows with the bans the registry has now. Never fails: a log
    /// that cannot be read or written is reported and the history carries on in memory.
    pub fn start(&self, path: Option<PathBuf>) {
        let report = path
            .as_deref()
            .map(|path| replay::replay(self, path, self.limits.keep));
        self.forget_old();
        // The log may hold more windows than are kept.
        let trimmed = self.windows.lock().trim(self.now());
        if let (Some(path), Some(report)) = (&path, report) {
            self.unreadable_lines.store(report.bad, Ordering::Relaxed);
            if report.lines > 0 || report.bad > 0 {
                tracing::info!(
                    path = %path.display(),
                    files = report.files,
                    lines = report.lines,
                    skipped_old = report.old,
                    bad = report.bad,
                    windows_trimmed = trimmed,
                    "request history read back"
                );
            }
        }
        match path {
            None => tracing::info!("request history kept in memory only"),
            Some(path) => match Log::start(path.clone(), self.limits) {
                Ok(log) => {
                    tracing::info!(path = %path.display(), "request history logged");
                    let _ = self.log.set(log);
                }
                Err(error) => tracing::error!(
                    path = %path.display(),
                    "cannot start the history writer: {error}; the history is kept in memory only"
                ),
            },
        }
        self.reconcile();
    }

    /// Writes out and fsyncs what was logged, then stops the writer. Blocks until done.
    pub fn close(&self) {
        if let Some(log) = self.log.get() {
            log.close();
        }
    }

    /// [`History::close`] on the blocking pool.
    pub async fn shut_down(self: &Arc<Self>) {
        let history = self.clone();
        if let Err(error) = tokio::task::spawn_blocking(move || history.close()).await {
            tracing::error!("closing the history log failed: {error}");
        }
    }

    /// The log's path and counts, or `None` when the history is kept in memory only.
    pub fn log_status(&self) -> Option<LogStatus> {
        self.log.get().map(|log| LogStatus {
            unreadable: self.unreadable_lines(),
            ..log.status()
        })
    }

    /// Lines of the log skipped at start because they could not be read: too long, not
    /// JSON, or missing what their kind needs (a crash can leave one, cut short).
    pub fn unreadable_lines(&self) -> u64 {
        self.unreadable_lines.load(Ordering::Relaxed)
    }

    /// Whether the history is written to a file.
    pub fn persisted(&self) -> bool {
        self.log.get().is_some()
    }

    /// Runs [`History::maintain`] twice a second and [`History::forget_old`] every minute
    /// until the history is dropped or the task aborted.
    pub fn spawn_maintenance(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let history = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut ticks: u64 = 0;
            loop {
                tick.tick().await;
                let Some(history) = history.upgrade() else {
                    return;
                };
                history.maintain();
                ticks += 1;
                if ticks.is_multiple_of(120) {
                    history.forget_old();
                }
            }
        })
    }

    fn emit(&self, event: Event) {
        if let Some(log) = self.log.get() {
            log.send(event);
        }
    }

    // ----- the request path --------------------------------------------------------------

    /// Notes what [`History::record`] needs from the request's arrival. Cheap: one atomic
    /// load, and the `User-Agent` value shared, not copied.
    pub(crate) fn arrive(&self, headers: &http::HeaderMap) -> Arrival {
        Arrival {
            seq: self.ban_seq.load(Ordering::Acquire),
            agent: headers.get(http::header::USER_AGENT).cloned(),
        }
    }

    /// Records a request once its answer is known. Holds one shard lock for the update (and
    /// the window lock for blocked requests), never across an await; allocates the entry's
    /// path, unless its client asked for the same one last, and nothing else in the common
    /// case.
    pub(crate) fn record(&self, arrival: Arrival, seen: Seen<'_>) {
        let now = self.now();
        let at = now.saturating_sub(crate::abuse::nanos(seen.latency));
        let target = &seen.target[..floor_boundary(seen.target, TARGET_LEN)];
        let path_only = &seen.target[..seen.path_len.min(seen.target.len())];
        let triggered = if self.pending.load(Ordering::Acquire) > 0 {
            self.claim_trigger(&arrival, &seen, at, target, path_only)
        } else {
            None
        };
        let blocked = seen.banned && triggered.is_none();
        if !seen.banned && triggered.is_none() && seen.status < 400 && seen.quiet {
            return;
        }
        let ban = match &triggered {
            Some((id, _)) => *id,
            None if blocked => self
                .windows
                .lock()
                .blocking(seen.client, now)
                .map_or(0, |window| {
                    window.hit(seen.client, path_only, at, 1);
                    window.id
                }),
            None => 0,
        };
        let agent = arrival
            .agent
            .as_ref()
            .map(|value| clients::agent_of(value.as_bytes()));
        let method = MethodText::new(seen.method.as_str());
        let latency_us = u32::try_from(seen.latency.as_micros()).unwrap_or(u32::MAX);
        let flags = if blocked { clients::BLOCKED } else { 0 }
            | if triggered.is_some() {
                clients::TRIGGERED
            } else {
                0
            };
        let log = self.log.get();
        let entry = |path| Entry {
            at,
            path,
            ban,
            latency_us,
            status: seen.status,
            method,
            agent: 0,
            flags,
            rank: seen.rank,
        };
        // The log shares the entry's copy of the target.
        let stored = self.clients.store(
            seen.client,
            at,
            target,
            entry,
            agent.as_deref(),
            log.is_some(),
        );
        let (Some(log), Some(path)) = (log, stored.path) else {
            return;
        };
        if blocked && !stored.raw_line {
            log.send(Event::Blocked {
                at,
                ip: seen.client,
                ban,
                path,
            });
        } else {
            let agent = match (stored.agent, stored.other_agent) {
                (Some(kept), _) => Some(kept),
                (None, true) => agent.as_deref().map(Arc::from),
                (None, false) => None,
            };
            log.send(Event::Req(ReqEvent {
                at,
                ip: seen.client,
                method,
                path,
                status: seen.status,
                latency_us,
                agent,
                blocked,
                triggered: triggered.is_some(),
                rank: seen.rank,
                ban,
            }));
        }
        if let Some((ban, trigger)) = triggered {
            log.send(Event::Trig {
                at: now,
                ban,
                trigger: Box::new(trigger),
            });
        }
    }

    /// Whether this request is the one after which its client became banned: a ban without an
    /// operator began while it was under way, on its client's own scope. A ban path bans the
    /// request that asks for it, which is then answered with the ban; strikes ban a request
    /// that is answered normally.
    fn claim_trigger(
        &self,
        arrival: &Arrival,
        seen: &Seen<'_>,
        at: i64,
        target: &str,
        path_only: &str,
    ) -> Option<(u64, Trigger)> {
        if seen.banned && !self.registry.settings().is_ban_path(path_only) {
            return None;
        }
        let mut windows = self.windows.lock();
        let index = windows.pending.iter().position(|pending| {
            pending.seq > arrival.seq
                && pending.scope.contains(&seen.client)
                && (pending.cause == BanCause::BanPath) == seen.banned
        })?;
        let pending = windows.pending.swap_remove(index);
        self.pending.store(windows.pending.len(), Ordering::Release);
        let trigger = Trigger {
            client: seen.client,
            method: MethodText::new(seen.method.as_str()),
            path: Arc::from(target),
            status: seen.status,
            at,
        };
        let window = windows.get_mut(pending.window)?;
        window.trigger = Some(trigger.clone());
        Some((pending.window, trigger))
    }

    // ----- bans --------------------------------------------------------------------------

    /// The registry's ban hook: opens a window for a new ban, or notes a changed end.
    pub(crate) fn on_ban(&self, notice: &BanNotice) {
        let now = self.now();
        let seq = self.ban_seq.fetch_add(1, Ordering::AcqRel) + 1;
        let mut events = Vec::new();
        {
            let mut windows = self.windows.lock();
            let current = windows
                .active_id(notice.scope)
                .filter(|id| windows.get(*id).is_some_and(|w| w.in_force(now)));
            match current {
                Some(id) if !notice.fresh => {
                    let source = (notice.cause == BanCause::Operator)
                        .then(|| windows.take_expected_source(notice.scope))
                        .flatten();
                    if let Some(window) = windows.get_mut(id) {
                        if window.until != notice.until {
                            window.until = notice.until;
                            window.changes += 1;
                        }
                        if let Some(source) = source {
                            window.source = source;
                        }
                        events.push(Event::Ban(Box::new(state_of(window, now))));
                    }
                }
                _ => {
                    if let Some(id) = current {
                        // The registry calls this a new ban, so the one we knew of ended
                        // without our noticing.
                        events.extend(lift(&mut windows, id, now, LIFTED_OUTSIDE));
                    }
                    let source = windows
                        .take_expected_source(notice.scope)
                        .unwrap_or_else(|| match notice.cause {
                            BanCause::Operator => OPERATOR_SOURCE.to_string(),
                            BanCause::Strikes | BanCause::BanPath => String::new(),
                        });
                    let window = windows.open(notice.scope, notice.range, notice.until, now);
                    // A replaced ban we had no window for began before we could see it.
                    window.began = notice.fresh.then_some(now);
                    window.source = source;
                    let id = window.id;
                    events.push(Event::Ban(Box::new(state_of(window, now))));
                    if notice.cause != BanCause::Operator && !notice.range {
                        windows.pending.push(Pending {
                            scope: notice.scope,
                            window: id,
                            seq,
                            began: now,
                            cause: notice.cause,
                        });
                        self.pending.store(windows.pending.len(), Ordering::Release);
                    }
                }
            }
        }
        for event in events {
            self.emit(event);
        }
    }

    /// Names who is banning `scope` (`banned in the portal by 192.0.2.1`): the window in force
    /// takes it at once, otherwise the next ban of that scope does.
    pub fn note_source(&self, scope: IpNet, source: impl Into<String>) {
        let source = source.into();
        let now = self.now();
        let mut windows = self.windows.lock();
        let current = windows
            .active_id(scope)
            .filter(|id| windows.get(*id).is_some_and(|w| w.in_force(now)));
        if let Some(window) = current.and_then(|id| windows.get_mut(id)) {
            window.source = source;
            let event = Event::Ban(Box::new(state_of(window, now)));
            drop(windows);
            self.emit(event);
            return;
        }
        // Bounded: a source named for a ban that then failed must not stay forever.
        if windows.expected_sources.len() >= 64 {
            windows.expected_sources.remove(0);
        }
        windows.expected_sources.push((scope, source));
    }

    /// Ends the window of `scope` now, lifted by `by` (`the portal (192.0.2.1)`), after the
    /// operator removed the ban. False when no window of that scope was in force.
    pub fn note_lift(&self, scope: IpNet, by: &str) -> bool {
        let now = self.now();
        let event = {
            let mut windows = self.windows.lock();
            let Some(id) = windows
                .active_id(scope)
                .filter(|id| windows.get(*id).is_some_and(|w| w.in_force(now)))
            else {
                return false;
            };
            lift(&mut windows, id, now, by)
        };
        if let Some(event) = event {
            self.emit(event);
        }
        true
    }

    /// Finds the triggers of bans that began without one in sight, and ends the windows whose
    /// bans vanished from the registry or ran out.
    pub fn maintain(&self) {
        let now = self.now();
        self.resolve_due_triggers(now);
        self.notice_ended(now);
    }

    fn resolve_due_triggers(&self, now: i64) {
        let grace = crate::abuse::nanos(TRIGGER_GRACE);
        let due: Vec<Pending> = {
            let mut windows = self.windows.lock();
            let (due, waiting) = windows
                .pending
                .drain(..)
                .partition(|p| p.began.saturating_add(grace) <= now);
            windows.pending = waiting;
            self.pending.store(windows.pending.len(), Ordering::Release);
            due
        };
        let lookback = crate::abuse::nanos(TRIGGER_LOOKBACK);
        for pending in due {
            let Some((client, entry)) = self.clients.newest_unblocked(
                pending.scope,
                pending.began - lookback,
                pending.began,
            ) else {
                continue;
            };
            let trigger = Trigger {
                client,
                method: entry.method,
                path: entry.path.clone(),
                status: entry.status,
                at: entry.at,
            };
            {
                let mut windows = self.windows.lock();
                let Some(window) = windows.get_mut(pending.window) else {
                    continue;
                };
                if window.trigger.is_some() {
                    continue;
                }
                window.trigger = Some(trigger.clone());
            }
            self.clients
                .mark_trigger(client, entry.at, &entry.path, pending.window);
            self.emit(Event::Trig {
                at: now,
                ban: pending.window,
                trigger: Box::new(trigger),
            });
        }
    }

    fn notice_ended(&self, now: i64) {
        let active = self.windows.lock().active_ids();
        for (scope, id) in active {
            let in_registry = self.registry.ban_until_of(scope);
            let mut windows = self.windows.lock();
            if windows.active_id(scope) != Some(id) {
                continue;
            }
            let Some(window) = windows.get_mut(id) else {
                windows.deactivate(scope, id);
                continue;
            };
            if !window.in_force(now) {
                windows.deactivate(scope, id);
                continue;
            }
            let event = match in_registry {
                None => lift(&mut windows, id, now, LIFTED_OUTSIDE),
                Some(until) if until != window.until => {
                    window.until = until;
                    window.changes += 1;
                    Some(Event::Ban(Box::new(state_of(window, now))))
                }
                Some(_) => None,
            };
            drop(windows);
            if let Some(event) = event {
                self.emit(event);
            }
        }
    }

    /// After the log was read back: windows the registry no longer has are lifted, and bans it
    /// has with no window get one whose start is unknown.
    fn reconcile(&self) {
        let now = self.now();
        let in_force = self.registry.bans_in_force();
        let mut events = Vec::new();
        {
            let mut windows = self.windows.lock();
            for (scope, id) in windows.active_ids() {
                let Some(window) = windows.get_mut(id) else {
                    windows.deactivate(scope, id);
                    continue;
                };
                if !window.in_force(now) {
                    windows.deactivate(scope, id);
                    continue;
                }
                match in_force.iter().find(|(s, _, _)| *s == scope) {
                    None => events.extend(lift(&mut windows, id, now, LIFTED_BY_RESTART)),
                    Some((_, _, until)) if *until != window.until => {
                        window.until = *until;
                        events.push(Event::Ban(Box::new(state_of(window, now))));
                    }
                    Some(_) => {}
                }
            }
            for (scope, range, until) in in_force {
                let known = windows
                    .active_id(scope)
                    .is_some_and(|id| windows.get(id).is_some_and(|w| w.in_force(now)));
                if known {
                    continue;
                }
                let window = windows.open(scope, range, until, now);
                window.source = RESTORED_SOURCE.to_string();
                events.push(Event::Ban(Box::new(state_of(window, now))));
            }
        }
        for event in events {
            self.emit(event);
        }
    }

    /// Forgets clients idle for [`RETENTION`] and windows that ended longer ago than that.
    pub fn forget_old(&self) {
        let now = self.now();
        let cutoff = now.saturating_sub(crate::abuse::nanos(RETENTION));
        self.clients.forget_idle(cutoff);
        let mut windows = self.windows.lock();
        windows.forget_ended(cutoff, now);
        self.pending.store(windows.pending.len(), Ordering::Release);
    }
}

/// Marks window `id` lifted now by `by` and takes it out of force; the event to log.
fn lift(windows: &mut Windows, id: u64, now: i64, by: &str) -> Option<Event> {
    let window = windows.get_mut(id)?;
    if window.lifted.is_some() {
        return None;
    }
    let by: Arc<str> = Arc::from(by);
    window.lifted = Some(Lift {
        at: now,
        by: by.clone(),
    });
    let scope = window.scope;
    windows.deactivate(scope, id);
    Some(Event::Lift {
        at: now,
        ban: id,
        by,
    })
}

fn state_of(window: &Window, now: i64) -> BanState {
    BanState {
        at: now,
        id: window.id,
        scope: window.scope,
        range: window.range,
        began: window.began,
        until: window.until,
        changes: window.changes,
        source: window.source.clone(),
    }
}
