//! The portal's JSON API: the Overview's counters and the samples its charts draw.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Query, State};
use http::{Response, StatusCode};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Portal, respond};
use crate::admission::priority::Rank;
use crate::app::App;
use crate::endpoints::figures::stats_json;
use crate::pipeline::traffic::{TrafficReading, buckets_between, quantile_ms};
use crate::proxy::Fault;

/// How often the charts get a sample, and how many are kept: an hour's worth.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(5);
const SAMPLES_KEPT: usize = 720;

/// `GET /api/overview`: every figure of `/_room/stats`, plus what only the portal shows.
pub(super) async fn overview(State(portal): State<Arc<Portal>>) -> Response<Body> {
    respond::json(StatusCode::OK, &overview_json(&portal.app))
}

pub(super) fn overview_json(app: &App) -> Value {
    let mut stats = stats_json(app);
    let generation = app.generation();
    let config = &generation.config;
    if let Value::Object(stats) = &mut stats {
        let active_bans = if app.abuse.enabled() {
            app.abuse.bans().len()
        } else {
            0
        };
        stats.insert("active_bans".into(), active_bans.into());
        stats.insert("kicked_active".into(), app.room.removed_remembered().into());
        let notes = app.room.note_stats();
        stats.insert("notes_tracked".into(), notes.tracked.into());
        stats.insert("notes_dropped".into(), notes.dropped.into());
        stats.insert("history_clients".into(), app.history.tracked().into());
        stats.insert("rate".into(), config.rate.into());
        stats.insert("surge".into(), config.surge.into());
        stats.insert("skip_url".into(), config.skip_url.clone().into());
        let skip_price = if config.rate > 0.0 || config.surge > 0.0 {
            if app.fast_lane().is_some() {
                // With a lane the price counts in offer prices, not money.
                format!(
                    "offer × (1 + ahead × ({} + {} per queued))",
                    config.rate, config.surge
                )
            } else {
                format!("${} + ${} per queued", config.rate, config.surge)
            }
        } else {
            "off".to_owned()
        };
        stats.insert("skip_price".into(), skip_price.into());
        let counters = &app.priority.counters;
        stats.insert(
            "priority_placed_total".into(),
            counters.placed.load(Ordering::Relaxed).into(),
        );
        for rank in Rank::ALL {
            let requests = counters
                .requests
                .get(usize::from(rank.as_u8()))
                .map_or(0, |count| count.load(Ordering::Relaxed));
            stats.insert(
                format!("priority_requests_{}", rank.name()),
                requests.into(),
            );
        }
    }
    stats
}

/// One point of the Overview's charts.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Sample {
    /// Unix seconds.
    pub t: u64,
    pub queue_depth: u64,
    pub occupancy: u64,
    pub cap: u64,
    /// Per second since the previous sample.
    pub admissions: f64,
    pub proxied: f64,
    pub origin_failures: f64,
    /// Latency of the origin's answers in this interval, in milliseconds; `null` without any.
    pub origin_p50_ms: Option<f64>,
    pub origin_p95_ms: Option<f64>,
    pub origin_p99_ms: Option<f64>,
    /// Answers per second by status class, all listeners' pages included (waiting pages are
    /// 200, a full line 503, a ban 403 or 429).
    pub answers_1xx: f64,
    pub answers_2xx: f64,
    pub answers_3xx: f64,
    pub answers_4xx: f64,
    pub answers_5xx: f64,
}

/// The last hour of samples, taken every [`SAMPLE_EVERY`] whether or not anyone is looking, so
/// an operator who opens the portal during an event sees how it began.
#[derive(Default)]
pub(crate) struct Samples {
    kept: Mutex<VecDeque<Sample>>,
}

/// The running totals a sample turns into rates.
#[derive(Clone, Copy)]
struct Totals {
    admitted: u64,
    proxied: u64,
    failures: u64,
    traffic: TrafficReading,
}

fn totals(app: &App) -> Totals {
    Totals {
        admitted: app.room.stats().admitted_total,
        proxied: app.counters.proxied_total.load(Ordering::Relaxed),
        failures: app.upstream_failures.get(Fault::Origin),
        traffic: app.traffic.read(),
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl Samples {
    /// Takes a sample every [`SAMPLE_EVERY`] while the app exists.
    pub(crate) fn spawn_sampler(self: &Arc<Self>, app: &Arc<App>) -> tokio::task::JoinHandle<()> {
        let samples = Arc::downgrade(self);
        let app = Arc::downgrade(app);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last: Option<(tokio::time::Instant, Totals)> = None;
            loop {
                every.tick().await;
                let (Some(samples), Some(app)) = (samples.upgrade(), app.upgrade()) else {
                    return;
                };
                let now = tokio::time::Instant::now();
                let current = totals(&app);
                if let Some((then, before)) = last {
                    let seconds = now.duration_since(then).as_secs_f64().max(0.001);
                    let rate =
                        |after: u64, before: u64| after.saturating_sub(before) as f64 / seconds;
                    let room = app.room.stats();
                    let origin = buckets_between(
                        &current.traffic.proxied_buckets,
                        &before.traffic.proxied_buckets,
                    );
                    let class = |index: usize| {
                        rate(
                            current.traffic.classes[index],
                            before.traffic.classes[index],
                        )
                    };
                    samples.push(Sample {
                        t: unix_seconds(),
                        queue_depth: room.live_queue_depth,
                        occupancy: room.occupancy,
                        cap: room.cap,
                        admissions: rate(current.admitted, before.admitted),
                        proxied: rate(current.proxied, before.proxied),
                        origin_failures: rate(current.failures, before.failures),
                        origin_p50_ms: quantile_ms(&origin, 0.50),
                        origin_p95_ms: quantile_ms(&origin, 0.95),
                        origin_p99_ms: quantile_ms(&origin, 0.99),
                        answers_1xx: class(0),
                        answers_2xx: class(1),
                        answers_3xx: class(2),
                        answers_4xx: class(3),
                        answers_5xx: class(4),
                    });
                }
                last = Some((now, current));
            }
        })
    }

    fn push(&self, sample: Sample) {
        let mut kept = self.kept.lock();
        if kept.len() == SAMPLES_KEPT {
            kept.pop_front();
        }
        kept.push_back(sample);
    }

    /// The samples taken after `since` (unix seconds), oldest first.
    pub(crate) fn after(&self, since: u64) -> Vec<Sample> {
        let kept = self.kept.lock();
        let start = kept.partition_point(|sample| sample.t <= since);
        kept.range(start..).copied().collect()
    }
}

#[derive(Deserialize)]
pub(super) struct SeriesQuery {
    #[serde(default)]
    since: u64,
}

/// `GET /api/series?since=<unix seconds>`: the chart samples after `since` (all of the last
/// hour without it), so a poll fetches only what is new.
pub(super) async fn series(
    State(portal): State<Arc<Portal>>,
    Query(query): Query<SeriesQuery>,
) -> Response<Body> {
    let samples = portal.samples.after(query.since);
    respond::json(
        StatusCode::OK,
        &serde_json::json!({
            "interval": SAMPLE_EVERY.as_secs(),
            "samples": samples,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: u64) -> Sample {
        Sample {
            t,
            queue_depth: t,
            occupancy: 0,
            cap: 1,
            admissions: 0.0,
            proxied: 0.0,
            origin_failures: 0.0,
            origin_p50_ms: None,
            origin_p95_ms: None,
            origin_p99_ms: None,
            answers_1xx: 0.0,
            answers_2xx: 0.0,
            answers_3xx: 0.0,
            answers_4xx: 0.0,
            answers_5xx: 0.0,
        }
    }

    #[test]
    fn an_hour_of_samples_is_kept_and_read_from_a_point() {
        let samples = Samples::default();
        for t in 0..(SAMPLES_KEPT as u64 + 10) {
            samples.push(sample(t));
        }
        let all = samples.after(0);
        assert_eq!(all.len(), SAMPLES_KEPT);
        assert_eq!(all.first().map(|s| s.t), Some(10));
        let newest = samples.after(SAMPLES_KEPT as u64 + 7);
        assert_eq!(
            newest.iter().map(|s| s.t).collect::<Vec<_>>(),
            vec![SAMPLES_KEPT as u64 + 8, SAMPLES_KEPT as u64 + 9]
        );
    }
}
