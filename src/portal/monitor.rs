//! The Monitor tab: how the process and its traffic are doing, from Concert's own counters and
//! what the kernel says about the process. A sampler keeps ten minutes of figures every five
//! seconds; `GET /api/monitor` adds the figures of the moment and a health verdict per part.
//!
//! Health is about whether something is wrong, not whether the room is busy: a full room with
//! a line that moves is what the room is for, so the waiting room is judged by whether the line
//! moves, and the origin by how its exchanges end.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use http::{Response, StatusCode};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Portal, respond};
use crate::app::App;
use crate::lifecycle::VERSION;
use crate::pipeline::traffic::{BOUNDS_MS, TrafficReading, buckets_between, quantile_ms};
use crate::proxy::Fault;
use crate::sys::process_figures::{self, ProcessFigures};

/// How often a sample is taken, and how many are kept: ten minutes.
pub(crate) const MONITOR_EVERY: Duration = Duration::from_secs(5);
const MONITOR_KEPT: usize = 120;
/// How far back the health verdicts look.
const RECENT: Duration = Duration::from_secs(60);
/// Share of the origin's exchanges that may fail or answer 5xx before it counts as unwell.
const ORIGIN_ERROR_SHARE: f64 = 0.05;
/// How long people may wait without the line moving before the room counts as stuck.
const LINE_STUCK_AFTER: Duration = RECENT;
/// Share of the abuse table, and of the open-file limit, in use before it counts as short of
/// room.
const TABLE_FULL_SHARE: f64 = 0.9;
const FILES_FULL_SHARE: f64 = 0.8;

/// One point of the Monitor's sparklines.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct MonitorSample {
    /// Unix seconds.
    t: u64,
    /// Per second since the previous sample.
    rps: f64,
    /// Latency of the answers since the previous sample; `null` without answers.
    p50_ms: Option<f64>,
    p95_ms: Option<f64>,
    /// 5xx answers per second.
    errors_per_s: f64,
    inflight: u64,
    threads: Option<u64>,
    rss_mb: Option<f64>,
    /// CPU time used per wall-clock time since the previous sample; 100 is one whole core.
    cpu_pct: Option<f64>,
    queue_depth: u64,
    occupancy: u64,
    #[serde(skip)]
    totals: Totals,
}

/// The running totals rates and health verdicts are differences of.
#[derive(Debug, Clone, Copy)]
struct Totals {
    at: Instant,
    traffic: TrafficReading,
    proxied: u64,
    origin_failures: u64,
    /// Places the head of the line has moved since start.
    line_served: u64,
    log_dropped: u64,
    abuse_dropped: u64,
    cpu_seconds: Option<f64>,
}

impl Totals {
    fn of(app: &App, cpu_seconds: Option<f64>) -> Totals {
        let room = app.room.stats();
        Totals {
            at: Instant::now(),
            traffic: app.traffic.read(),
            proxied: app
                .counters
                .proxied_total
                .load(std::sync::atomic::Ordering::Relaxed),
            origin_failures: app.upstream_failures.get(Fault::Origin),
            line_served: room.now_serving,
            log_dropped: app.history.log_status().map_or(0, |status| status.dropped),
            abuse_dropped: app.abuse.stats().dropped_total,
            cpu_seconds,
        }
    }
}

/// The samples, and what the sampler needs between them.
pub(crate) struct Monitor {
    started: SystemTime,
    kept: Mutex<Kept>,
}

struct Kept {
    samples: VecDeque<MonitorSample>,
    /// The totals at start, until a sample is old enough to compare with.
    first: Totals,
    /// When the line last moved (or was empty): a line with people in it that has not moved
    /// for long is stuck.
    line_moved: Instant,
}

impl Monitor {
    /// Starts counting from now: the first sample covers the time since.
    pub(crate) fn new(app: &App) -> Monitor {
        let first = Totals::of(app, process_figures::read().cpu_seconds);
        Monitor {
            started: SystemTime::now(),
            kept: Mutex::new(Kept {
                samples: VecDeque::with_capacity(MONITOR_KEPT),
                first,
                line_moved: first.at,
            }),
        }
    }

    /// Takes a sample at once and then every [`MONITOR_EVERY`] while the app exists.
    pub(crate) fn spawn_sampler(self: &Arc<Self>, app: &Arc<App>) -> tokio::task::JoinHandle<()> {
        let monitor = Arc::downgrade(self);
        let app = Arc::downgrade(app);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(MONITOR_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                // The kernel's files are read off the serving threads; should that fail, the
                // sample still has the traffic and the room, with the process figures unknown.
                let figures: ProcessFigures = tokio::task::spawn_blocking(process_figures::read)
                    .await
                    .unwrap_or_default();
                let (Some(monitor), Some(app)) = (monitor.upgrade(), app.upgrade()) else {
                    return;
                };
                monitor.sample(&app, &figures);
            }
        })
    }

    fn sample(&self, app: &App, figures: &ProcessFigures) {
        let now = Totals::of(app, figures.cpu_seconds);
        let room = app.room.stats();
        let mut kept = self.kept.lock();
        let before = kept
            .samples
            .back()
            .map_or(kept.first, |sample| sample.totals);
        let seconds = now.at.duration_since(before.at).as_secs_f64().max(0.001);
        let per_second = |after: u64, before: u64| after.saturating_sub(before) as f64 / seconds;
        let answers = buckets_between(&now.traffic.buckets, &before.traffic.buckets);
        if room.live_queue_depth == 0 || now.line_served > before.line_served {
            kept.line_moved = now.at;
        }
        let sample = MonitorSample {
            t: unix_seconds(SystemTime::now()),
            rps: per_second(now.traffic.answered(), before.traffic.answered()),
            p50_ms: quantile_ms(&answers, 0.50),
            p95_ms: quantile_ms(&answers, 0.95),
            errors_per_s: per_second(now.traffic.server_errors(), before.traffic.server_errors()),
            inflight: now.traffic.in_flight,
            threads: figures.threads,
            rss_mb: figures.rss_bytes.map(megabytes),
            cpu_pct: cpu_percent(before.cpu_seconds, now.cpu_seconds, seconds),
            queue_depth: room.live_queue_depth,
            occupancy: room.occupancy,
            totals: now,
        };
        if kept.samples.len() == MONITOR_KEPT {
            kept.samples.pop_front();
        }
        kept.samples.push_back(sample);
    }

    /// The totals to compare with for "recently": the oldest of those at start and the kept
    /// samples within [`RECENT`], else the newest (the sampler fell behind).
    fn recent_base(&self, now: Instant) -> (Totals, Instant) {
        let kept = self.kept.lock();
        let mut all =
            std::iter::once(&kept.first).chain(kept.samples.iter().map(|sample| &sample.totals));
        let base = all
            .find(|totals| now.duration_since(totals.at) <= RECENT)
            .or(kept.samples.back().map(|sample| &sample.totals))
            .copied()
            .unwrap_or(kept.first);
        (base, kept.line_moved)
    }

    fn samples(&self) -> Vec<MonitorSample> {
        self.kept.lock().samples.iter().copied().collect()
    }

    fn latest(&self) -> Option<MonitorSample> {
        self.kept.lock().samples.back().copied()
    }
}

fn unix_seconds(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

fn megabytes(bytes: u64) -> f64 {
    (bytes as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0
}

fn cpu_percent(before: Option<f64>, after: Option<f64>, seconds: f64) -> Option<f64> {
    let used = (after? - before?).max(0.0);
    Some((used / seconds * 1000.0).round() / 10.0)
}

/// One health verdict.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Health {
    name: &'static str,
    ok: bool,
    detail: String,
}

fn verdict(name: &'static str, ok: bool, detail: String) -> Health {
    Health { name, ok, detail }
}

/// What the origin verdict is made of: the last [`RECENT`] seconds (or fewer, just after
/// start).
struct OriginWindow {
    seconds: u64,
    proxied: u64,
    origin_errors: u64,
    failures: u64,
    server_errors: u64,
}

fn origin_health(window: &OriginWindow) -> Health {
    let seconds = window.seconds;
    if window.proxied == 0 {
        return verdict(
            "Origin",
            true,
            format!("no requests sent to the origin in the last {seconds} s"),
        );
    }
    let share = window.origin_errors as f64 / window.proxied as f64;
    let ok = share < ORIGIN_ERROR_SHARE;
    let mut detail = format!(
        "{} of {} requests failed or answered 5xx ({}) in the last {seconds} s",
        window.origin_errors,
        window.proxied,
        percent(share)
    );
    if window.failures > 0 {
        detail.push_str(&format!("; {} unreachable or cut short", window.failures));
    }
    if window.server_errors > window.origin_errors {
        // Concert's own 503s for a full line or pool: busy, not broken.
        detail.push_str(&format!(
            "; {} 5xx from Concert itself (line or pools full)",
            window.server_errors - window.origin_errors
        ));
    }
    verdict("Origin", ok, detail)
}

/// What the waiting-room verdict is made of.
struct RoomNow {
    waiting: u64,
    occupancy: u64,
    cap: u64,
    /// Places the line moved in the window, and the window's length.
    moved: u64,
    seconds: u64,
    /// How long the line has not moved while people waited.
    still_for: Duration,
}

fn room_health(room: &RoomNow) -> Health {
    let slots = format!("{} of {} page slots in use", room.occupancy, room.cap);
    if room.waiting == 0 {
        return verdict("Waiting room", true, format!("nobody waiting · {slots}"));
    }
    if room.moved > 0 || room.still_for < LINE_STUCK_AFTER {
        let moved = if room.moved > 0 {
            format!("line moved {} in the last {} s", room.moved, room.seconds)
        } else {
            format!("line still for {} s", room.still_for.as_secs())
        };
        return verdict(
            "Waiting room",
            true,
            format!("{} waiting · {moved} · {slots}", room.waiting),
        );
    }
    verdict(
        "Waiting room",
        false,
        format!(
            "{} waiting and the line has not moved for {} s · {slots}",
            room.waiting,
            room.still_for.as_secs()
        ),
    )
}

fn abuse_health(enabled: bool, tracked: u64, room_for: u64, dropped_recently: u64) -> Health {
    if !enabled {
        return verdict("Abuse registry", true, "off".to_owned());
    }
    let share = tracked as f64 / room_for.max(1) as f64;
    let mut detail = format!(
        "on · {tracked} of {room_for} clients tracked ({})",
        percent(share)
    );
    if dropped_recently > 0 {
        detail.push_str(&format!(
            " · {dropped_recently} dropped for want of room in the last minute"
        ));
    }
    verdict(
        "Abuse registry",
        share < TABLE_FULL_SHARE && dropped_recently == 0,
        detail,
    )
}

fn history_health(status: Option<&crate::history::LogStatus>, dropped_recently: u64) -> Health {
    match status {
        None => verdict(
            "History log",
            true,
            "kept in memory only (no log file)".to_owned(),
        ),
        Some(status) => {
            let mut detail = format!(
                "{} · {} event(s) written · {} dropped",
                status.path.display(),
                status.written,
                status.dropped
            );
            if dropped_recently > 0 {
                detail.push_str(&format!(" · {dropped_recently} in the last minute"));
            }
            // Told, not held against the log now: a crash can cut the last line short.
            if status.unreadable > 0 {
                detail.push_str(&format!(
                    " · {} unreadable line(s) skipped at start",
                    status.unreadable
                ));
            }
            verdict("History log", dropped_recently == 0, detail)
        }
    }
}

fn data_dir_health(app: &App, now: SystemTime) -> Health {
    let Some(dir) = &app.data_dir else {
        return verdict(
            "Data directory",
            true,
            "none: bans, the line and settings are not kept across restarts".to_owned(),
        );
    };
    let saves = dir.saves();
    let path = dir.path().display();
    if let Some(why) = saves.failing {
        return verdict(
            "Data directory",
            false,
            format!("{path} · saving fails: {why}"),
        );
    }
    let last = saves.last_saved.map_or_else(
        || "nothing saved yet".to_owned(),
        |at| {
            let ago = now.duration_since(at).unwrap_or_default().as_secs();
            format!("last saved {ago} s ago")
        },
    );
    verdict(
        "Data directory",
        true,
        format!("{path} · {} saves · {last}", saves.saved),
    )
}

fn files_health(open: Option<u64>, limit: Option<u64>) -> Health {
    match (open, limit) {
        (Some(open), Some(limit)) => {
            let share = open as f64 / limit.max(1) as f64;
            verdict(
                "Open files",
                share < FILES_FULL_SHARE,
                format!("{open} of {limit} in use ({})", percent(share)),
            )
        }
        (Some(open), None) => verdict("Open files", true, format!("{open} in use, no limit")),
        _ => verdict("Open files", true, "unknown on this system".to_owned()),
    }
}

fn percent(share: f64) -> String {
    let value = share * 100.0;
    if value > 0.0 && value < 0.1 {
        "under 0.1 %".to_owned()
    } else {
        format!("{value:.1} %")
    }
}

fn status_classes(classes: &[u64; 5]) -> Value {
    json!({
        "1xx": classes[0],
        "2xx": classes[1],
        "3xx": classes[2],
        "4xx": classes[3],
        "5xx": classes[4],
    })
}

/// The whole answer of `GET /api/monitor`.
pub(super) fn monitor_json(
    app: &App,
    monitor: &Monitor,
    figures: &ProcessFigures,
    now: SystemTime,
) -> Value {
    let current = Totals::of(app, figures.cpu_seconds);
    let (base, line_moved) = monitor.recent_base(current.at);
    let window = current.at.duration_since(base.at);
    let seconds = window.as_secs().max(1);
    let room = app.room.stats();
    let traffic = &current.traffic;
    let latest = monitor.latest();

    let still_for = if room.live_queue_depth == 0 || current.line_served > base.line_served {
        Duration::ZERO
    } else {
        current.at.duration_since(line_moved)
    };
    let abuse = app.abuse.stats();
    let log = app.history.log_status();
    let health = vec![
        origin_health(&OriginWindow {
            seconds,
            proxied: current.proxied.saturating_sub(base.proxied),
            origin_errors: traffic
                .origin_errors
                .saturating_sub(base.traffic.origin_errors),
            failures: current.origin_failures.saturating_sub(base.origin_failures),
            server_errors: traffic
                .server_errors()
                .saturating_sub(base.traffic.server_errors()),
        }),
        room_health(&RoomNow {
            waiting: room.live_queue_depth,
            occupancy: room.occupancy,
            cap: room.cap,
            moved: current.line_served.saturating_sub(base.line_served),
            seconds,
            still_for,
        }),
        abuse_health(
            abuse.enabled,
            abuse.tracked,
            u64::from(app.abuse.settings().max_entries),
            current.abuse_dropped.saturating_sub(base.abuse_dropped),
        ),
        history_health(
            log.as_ref(),
            current.log_dropped.saturating_sub(base.log_dropped),
        ),
        data_dir_health(app, now),
        files_health(figures.open_fds, figures.fd_limit),
    ];

    let connections = app.open_connections();
    let uptime = now.duration_since(monitor.started).unwrap_or_default();
    json!({
        "process": {
            "pid": std::process::id(),
            "version": VERSION,
            "started_at": unix_seconds(monitor.started),
            "uptime_seconds": uptime.as_secs(),
            "workers": connections.len(),
            "connections": connections.iter().sum::<usize>(),
            "threads": figures.threads,
            "open_fds": figures.open_fds,
            "fd_limit": figures.fd_limit,
            "cpu_seconds": figures.cpu_seconds,
            "cpu_pct": latest.and_then(|sample| sample.cpu_pct),
        },
        "memory": {
            "rss_bytes": figures.rss_bytes,
            "rss_mb": figures.rss_bytes.map(megabytes),
            "rss_peak_bytes": figures.rss_peak_bytes,
            "rss_peak_mb": figures.rss_peak_bytes.map(megabytes),
            "virtual_bytes": figures.virtual_bytes,
            "virtual_mb": figures.virtual_bytes.map(megabytes),
            "upload_spool_bytes": app.upload_spool_in_use(),
        },
        "traffic": {
            "requests_total": traffic.answered(),
            "inflight": traffic.in_flight,
            "inflight_peak": traffic.in_flight_peak,
            "status": status_classes(&traffic.classes),
            "origin_errors_total": traffic.origin_errors,
            "proxied_total": current.proxied,
            "p50_ms": quantile_ms(&traffic.buckets, 0.50),
            "p95_ms": quantile_ms(&traffic.buckets, 0.95),
            "p99_ms": quantile_ms(&traffic.buckets, 0.99),
            "bounds_ms": BOUNDS_MS,
            "buckets": traffic.buckets,
            "queue_depth": room.live_queue_depth,
            "occupancy": room.occupancy,
            "cap": room.cap,
        },
        "health": health,
        "history": {
            "persisted": log.is_some(),
            "path": log.as_ref().map(|status| status.path.display().to_string()),
            "written": log.as_ref().map(|status| status.written),
            "dropped": log.as_ref().map(|status| status.dropped),
            "unreadable_lines": app.history.unreadable_lines(),
            "status": log.as_ref().map_or_else(
                || "kept in memory only".to_owned(),
                ToString::to_string,
            ),
        },
        "interval": MONITOR_EVERY.as_secs(),
        "samples": monitor.samples(),
    })
}

/// `GET /api/monitor`.
pub(super) async fn show(State(portal): State<Arc<Portal>>) -> Response<Body> {
    // The kernel's files are read off the serving threads.
    let figures: ProcessFigures = tokio::task::spawn_blocking(process_figures::read)
        .await
        .unwrap_or_default();
    respond::json(
        StatusCode::OK,
        &monitor_json(&portal.app, &portal.monitor, &figures, SystemTime::now()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_room_whose_line_moves_is_healthy() {
        let busy = RoomNow {
            waiting: 500,
            occupancy: 100,
            cap: 100,
            moved: 40,
            seconds: 60,
            still_for: Duration::ZERO,
        };
        let health = room_health(&busy);
        assert!(health.ok, "{health:?}");
        assert_eq!(
            health.detail,
            "500 waiting · line moved 40 in the last 60 s · 100 of 100 page slots in use"
        );
        let empty = RoomNow {
            waiting: 0,
            moved: 0,
            still_for: Duration::from_secs(600),
            ..busy
        };
        assert!(room_health(&empty).ok);
        assert!(room_health(&empty).detail.starts_with("nobody waiting"));
    }

    #[test]
    fn a_line_that_stands_still_with_people_in_it_is_not() {
        let room = RoomNow {
            waiting: 3,
            occupancy: 1,
            cap: 1,
            moved: 0,
            seconds: 60,
            still_for: Duration::from_secs(20),
        };
        assert!(room_health(&room).ok, "still for less than a minute");
        let stuck = RoomNow {
            still_for: Duration::from_secs(75),
            ..room
        };
        let health = room_health(&stuck);
        assert!(!health.ok);
        assert_eq!(
            health.detail,
            "3 waiting and the line has not moved for 75 s · 1 of 1 page slots in use"
        );
    }

    #[test]
    fn the_origin_is_judged_by_its_own_errors_not_by_a_full_line() {
        let window = OriginWindow {
            seconds: 60,
            proxied: 1000,
            origin_errors: 2,
            failures: 1,
            server_errors: 302,
        };
        let health = origin_health(&window);
        assert!(health.ok, "{health:?}");
        assert_eq!(
            health.detail,
            "2 of 1000 requests failed or answered 5xx (0.2 %) in the last 60 s; 1 unreachable or cut short; 300 5xx from Concert itself (line or pools full)"
        );
        let failing = OriginWindow {
            origin_errors: 50,
            server_errors: 50,
            ..window
        };
        assert!(!origin_health(&failing).ok, "5 % is too many");
        let quiet = OriginWindow {
            proxied: 0,
            origin_errors: 0,
            failures: 0,
            server_errors: 0,
            ..window
        };
        assert!(origin_health(&quiet).ok);
    }

    #[test]
    fn tables_and_files_near_their_limits_are_flagged() {
        assert!(abuse_health(false, 0, 10, 0).ok);
        assert!(abuse_health(true, 10, 100, 0).ok);
        assert!(!abuse_health(true, 95, 100, 0).ok);
        let dropping = abuse_health(true, 10, 100, 4);
        assert!(!dropping.ok);
        assert!(dropping.detail.contains("4 dropped"), "{}", dropping.detail);
        assert!(files_health(Some(100), Some(1024)).ok);
        assert!(!files_health(Some(900), Some(1024)).ok);
        assert!(files_health(None, None).ok);
    }

    #[test]
    fn a_log_that_drops_events_is_flagged() {
        let status = crate::history::LogStatus {
            path: "/var/lib/concert/history.jsonl".into(),
            written: 10,
            dropped: 3,
            unreadable: 0,
        };
        assert!(history_health(Some(&status), 0).ok, "old drops only");
        let health = history_health(Some(&status), 2);
        assert!(!health.ok);
        assert_eq!(
            health.detail,
            "/var/lib/concert/history.jsonl · 10 event(s) written · 3 dropped · 2 in the last minute"
        );
        assert!(history_health(None, 0).ok);
        let torn = crate::history::LogStatus {
            unreadable: 2,
            ..status
        };
        let health = history_health(Some(&torn), 0);
        assert!(health.ok);
        assert_eq!(
            health.detail,
            "/var/lib/concert/history.jsonl · 10 event(s) written · 3 dropped · 2 unreadable line(s) skipped at start"
        );
    }
}
