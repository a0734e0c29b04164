//! Every figure Concert reports, in one table: `/_room/stats` (JSON) and the Prometheus
//! exposition are both made from [`FIGURES`], so a figure cannot be in one and missing or
//! different in the other.
//!
//! Levels and limits are gauges, `…_total` keys counters (the exposition adds `_total` to a
//! counter's name itself). Text and settings stay in the JSON; a few figures (requests proxied,
//! malformed requests, open connections per worker) only the metrics carry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Map, Value};

use crate::abuse::AbuseStats;
use crate::admission::assets::AssetStats;
use crate::admission::priority::{PriorityCounters, lane_ranks_text};
use crate::admission::streams::StreamStats;
use crate::app::{App, Generation};
use crate::cluster::health::ClusterReport;
use crate::cluster::slots::Mode;
use crate::config::Config;
use crate::config::duration::format_go_duration;
use crate::proxy::Fault;
use crate::room::RoomStats;

/// Prefix of every metric name.
const METRIC_PREFIX: &str = "concert";

/// One reading of the live state, taken once per stats request or scrape.
pub(crate) struct Reading<'a> {
    app: &'a App,
    generation: Arc<Generation>,
    room: RoomStats,
    abuse: AbuseStats,
    assets: AssetStats,
    streams: StreamStats,
    /// With `-cluster` only.
    cluster: Option<ClusterReport>,
}

impl<'a> Reading<'a> {
    pub(crate) fn take(app: &'a App) -> Reading<'a> {
        let generation = app.generation();
        let assets = generation.assets.stats();
        let streams = generation.streams.stats();
        Reading {
            app,
            room: app.room.stats(),
            abuse: app.abuse.stats(),
            assets,
            streams,
            generation,
            cluster: ClusterReport::take(app),
        }
    }

    fn config(&self) -> &Config {
        &self.generation.config
    }

    fn priority(&self) -> &PriorityCounters {
        &self.app.priority.counters
    }
}

/// A figure's value in one reading.
enum Reads {
    Count(u64),
    Level(f64),
    Text(String),
    Flag(bool),
}

/// How a figure is exposed to Prometheus.
enum Exposed {
    /// In the JSON only (text and settings).
    No,
    Gauge(&'static str, &'static str),
    /// Name without `_total`, and help.
    Counter(&'static str, &'static str),
    /// One series of a labelled gauge: name, help, label name and value.
    LabelledGauge(&'static str, &'static str, &'static str, &'static str),
    /// One series of a labelled counter.
    LabelledCounter(&'static str, &'static str, &'static str, &'static str),
}

struct Figure {
    /// Key in `/_room/stats`; `None` for a figure only the metrics carry.
    key: Option<&'static str>,
    exposed: Exposed,
    read: fn(&Reading<'_>) -> Reads,
}

const fn stat(key: &'static str, exposed: Exposed, read: fn(&Reading<'_>) -> Reads) -> Figure {
    Figure {
        key: Some(key),
        exposed,
        read,
    }
}

/// One series of the upstream-failure counter, with its stats key.
const fn failures(key: &'static str, fault: Fault, read: fn(&Reading<'_>) -> Reads) -> Figure {
    let series = Exposed::LabelledCounter(
        "upstream_failures",
        UPSTREAM_FAILURES_HELP,
        "fault",
        fault.label(),
    );
    stat(key, series, read)
}

fn count(counter: &AtomicU64) -> Reads {
    Reads::Count(counter.load(Ordering::Relaxed))
}

fn failed(reading: &Reading<'_>, fault: Fault) -> Reads {
    Reads::Count(reading.app.upstream_failures.get(fault))
}

use Exposed::{Counter as C, Gauge as G, LabelledCounter as LC, LabelledGauge as LG, No};
use Reads::{Count, Flag, Level, Text};

static FIGURES: &[Figure] = &[
    stat("upstream", No, |r| Text(r.config().upstream_public())),
    // What the public listener speaks: "off" (plain HTTP), "on" (TLS), or "pending" (TLS asked
    // for, some name still without a certificate).
    stat("tls", No, |r| Text(r.app.tls.status().as_str().to_owned())),
    stat(
        "cap",
        G("cap", "Concurrent page requests allowed to the origin"),
        |r| Count(r.room.cap),
    ),
    stat(
        "occupancy",
        G("occupancy", "Page requests at the origin now"),
        |r| Count(r.room.occupancy),
    ),
    stat(
        "queue_depth",
        G(
            "queue_depth",
            "Tickets ahead of the serving window, abandoned ones included",
        ),
        |r| Count(r.room.queue_depth),
    ),
    stat(
        "live_queue_depth",
        G(
            "live_queue_depth",
            "Live tickets, including visitors told to come in who have not come back yet",
        ),
        |r| Count(r.room.live_queue_depth),
    ),
    stat(
        "max_queue_depth",
        G(
            "max_queue_depth",
            "Longest the line may grow (-max-queue); 0 means no limit",
        ),
        |r| Count(r.room.max_queue_depth),
    ),
    stat(
        "utilization",
        G("utilization", "Smoothed share of page slots in use"),
        |r| Level(r.room.utilization),
    ),
    stat("token_ttl", No, |r| {
        Text(format_go_duration(r.config().effective_token_ttl()))
    }),
    stat("first_poll_grace", No, |r| {
        Text(format_go_duration(r.config().first_poll_grace))
    }),
    stat("ready_grace", No, |r| {
        Text(format_go_duration(r.config().ready_grace))
    }),
    stat(
        "queued_total",
        C("queued", "Visitors who were put in the line"),
        |r| Count(r.room.queued_total),
    ),
    stat(
        "evicted_total",
        C("evicted", "Tickets dropped for not polling"),
        |r| Count(r.room.evicted_total),
    ),
    stat(
        "timeouts_total",
        C("timeouts", "Visitors who left while waiting for a slot"),
        |r| Count(r.room.timeouts_total),
    ),
    stat(
        "promoted_total",
        C("promoted", "Tickets moved forward"),
        |r| Count(r.room.promoted_total),
    ),
    stat(
        "removed_total",
        C("removed", "Tickets removed from the line"),
        |r| Count(r.room.removed_total),
    ),
    stat(
        "admitted_total",
        C("admitted", "Page requests admitted to the origin"),
        |r| Count(r.room.admitted_total),
    ),
    stat(
        "lapsed_total",
        C(
            "lapsed",
            "Visitors whose turn came while they were away; their place went to the next in line",
        ),
        |r| Count(r.room.lapsed_total),
    ),
    stat(
        "rejoined_total",
        C(
            "rejoined",
            "Lapsed visitors who came back and were put at the front of the line",
        ),
        |r| Count(r.room.rejoined_total),
    ),
    stat(
        "address_full_total",
        C(
            "address_full",
            "Newcomers turned away because their address already had -max-queue-per-ip visitors waiting",
        ),
        |r| Count(r.room.address_full_total),
    ),
    Figure {
        key: None,
        exposed: C("proxied", "Requests forwarded to the origin"),
        read: |r| count(&r.app.counters.proxied_total),
    },
    Figure {
        key: None,
        exposed: C("bad_requests", "Malformed requests refused before routing"),
        read: |r| count(&r.app.counters.bad_requests_total),
    },
    failures("upstream_failures_client_total", Fault::Client, |r| {
        failed(r, Fault::Client)
    }),
    failures("upstream_failures_origin_total", Fault::Origin, |r| {
        failed(r, Fault::Origin)
    }),
    failures("upstream_failures_concert_total", Fault::Concert, |r| {
        failed(r, Fault::Concert)
    }),
    stat(
        "asset_cap",
        G(
            "asset_cap",
            "Asset requests allowed at the origin at once, for all visitors together",
        ),
        |r| Count(r.assets.cap),
    ),
    stat(
        "asset_in_flight",
        G("asset_in_flight", "Asset requests at the origin now"),
        |r| Count(r.assets.in_flight),
    ),
    stat(
        "asset_users",
        G("asset_users", "Passes that hold a per-visitor asset pool"),
        |r| Count(r.assets.users),
    ),
    stat(
        "asset_user_cap_h1",
        LG("asset_user_cap", ASSET_USER_CAP_HELP, "protocol", "h1"),
        |r| Count(u64::from(r.config().asset_user_cap_h1)),
    ),
    stat(
        "asset_user_cap_h2",
        LG("asset_user_cap", ASSET_USER_CAP_HELP, "protocol", "h2"),
        |r| Count(u64::from(r.config().asset_user_cap_h2)),
    ),
    stat(
        "asset_served_total",
        C("asset_served", "Asset requests forwarded to the origin"),
        |r| Count(r.assets.served_total),
    ),
    stat(
        "asset_denied_total",
        C(
            "asset_denied",
            "Asset requests refused for want of a valid pass",
        ),
        |r| Count(r.assets.denied_total),
    ),
    stat(
        "asset_user_throttled_total",
        C(
            "asset_user_throttled",
            "Asset requests refused because the visitor's own pool stayed full",
        ),
        |r| Count(r.assets.user_throttled_total),
    ),
    stat(
        "asset_global_throttled_total",
        C(
            "asset_global_throttled",
            "Asset requests refused because the shared asset pool stayed full",
        ),
        |r| Count(r.assets.global_throttled_total),
    ),
    stat(
        "stream_cap",
        G("stream_cap", "Long-lived streams allowed at once"),
        |r| Count(r.streams.cap),
    ),
    stat(
        "stream_active",
        G("stream_active", "Streams open now"),
        |r| Count(r.streams.active),
    ),
    stat(
        "stream_served_total",
        C("stream_served", "Streams forwarded to the origin"),
        |r| Count(r.streams.served_total),
    ),
    stat(
        "stream_denied_total",
        C(
            "stream_denied",
            "Stream requests refused for want of a valid pass",
        ),
        |r| Count(r.streams.denied_total),
    ),
    stat(
        "stream_throttled_total",
        C(
            "stream_throttled",
            "Stream requests refused because every stream slot was taken",
        ),
        |r| Count(r.streams.throttled_total),
    ),
    stat(
        "upload_buffered_bytes",
        G(
            "upload_buffered_bytes",
            "Bytes of page uploads buffered on disk now, waiting for their page slot",
        ),
        |r| Count(r.app.spool.in_use()),
    ),
    stat("abuse_enabled", No, |r| Flag(r.abuse.enabled)),
    stat(
        "abuse_tracked",
        G(
            "abuse_tracked",
            "Clients the abuse registry tracks; 0 while abuse handling is off",
        ),
        |r| Count(r.abuse.tracked),
    ),
    stat(
        "abuse_range_bans",
        G(
            "abuse_range_bans",
            "Address ranges banned now; 0 while abuse handling is off",
        ),
        |r| Count(r.abuse.range_bans),
    ),
    stat(
        "abuse_strikes_total",
        C("abuse_strikes", "Strikes charged against clients"),
        |r| Count(r.abuse.strikes_total),
    ),
    stat("abuse_bans_total", C("abuse_bans", "Bans started"), |r| {
        Count(r.abuse.bans_total)
    }),
    stat(
        "abuse_rejected_total",
        C(
            "abuse_rejected",
            "Requests refused because the client is banned",
        ),
        |r| Count(r.abuse.rejected_total),
    ),
    stat(
        "abuse_dropped_total",
        C(
            "abuse_dropped",
            "Clients left untracked because the abuse registry was full",
        ),
        |r| Count(r.abuse.dropped_total),
    ),
    stat(
        "priority_lane_cap",
        G(
            "priority_lane_cap",
            "Requests the priority lane lets past a busy room at once",
        ),
        |r| Count(r.generation.lane.cap() as u64),
    ),
    stat(
        "priority_lane_in_flight",
        G(
            "priority_lane_in_flight",
            "Requests holding a priority lane slot now",
        ),
        |r| Count(r.generation.lane.in_use() as u64),
    ),
    stat(
        "priority_lane_waiting",
        G(
            "priority_lane_waiting",
            "Requests waiting for a priority lane slot",
        ),
        |r| Count(r.generation.lane.waiting() as u64),
    ),
    stat("priority_lane_ranks", No, |r| {
        Text(lane_ranks_text(r.config().priority_lane_rank))
    }),
    stat(
        "priority_lane_served_total",
        C(
            "priority_lane_served",
            "Requests that went past a busy room through the priority lane",
        ),
        |r| count(&r.priority().lane_served),
    ),
    stat(
        "priority_lane_full_total",
        C(
            "priority_lane_full",
            "Requests that found no priority lane slot in time",
        ),
        |r| count(&r.priority().lane_full),
    ),
    stat(
        "priority_grants_total",
        C(
            "priority_grants",
            "Ranks granted by the origin's Concert-Priority header",
        ),
        |r| count(&r.priority().grants),
    ),
    stat(
        "priority_grants_cleared_total",
        C(
            "priority_grants_cleared",
            "Ranks cleared by the origin's Concert-Priority header",
        ),
        |r| count(&r.priority().grants_cleared),
    ),
    stat(
        "priority_grants_rejected_total",
        C(
            "priority_grants_rejected",
            "Concert-Priority header values that could not be read",
        ),
        |r| count(&r.priority().grants_rejected),
    ),
    stat(
        "priority_forms_total",
        C("priority_forms", "Form submissions that met a busy room"),
        |r| count(&r.priority().forms),
    ),
    stat(
        "priority_forms_refused_total",
        C(
            "priority_forms_refused",
            "Form submissions refused because the priority lane stayed full",
        ),
        |r| count(&r.priority().forms_refused),
    ),
    stat(
        "priority_forms_over_budget_total",
        C(
            "priority_forms_over_budget",
            "Form submissions sent through the room because their pass had used its form budget",
        ),
        |r| count(&r.priority().forms_over_budget),
    ),
];

const UPSTREAM_FAILURES_HELP: &str = "Requests the origin gave no usable answer to, by whose fault: \
     the client's (a broken, stalled or too slow upload, a target the origin cannot take), the \
     origin's (refused, timed out, garbled or cut short), or Concert's host's (out of sockets \
     or memory)";
const ASSET_USER_CAP_HELP: &str = "Asset requests one visitor may have at the origin at once, by \
     the HTTP version of the visitor's connection";

/// `/_room/stats`: every figure with a key.
pub fn stats_json(app: &App) -> Value {
    let reading = Reading::take(app);
    let mut stats = Map::new();
    for figure in FIGURES {
        let Some(key) = figure.key else { continue };
        let value = match (figure.read)(&reading) {
            Count(value) => Value::from(value),
            Level(value) => Value::from(value),
            Text(value) => Value::from(value),
            Flag(value) => Value::from(value),
        };
        stats.insert(key.to_owned(), value);
    }
    // Only with -cluster, so a lone instance's stats stay as they were.
    if let Some(cluster) = &reading.cluster {
        stats.insert("cluster".to_owned(), cluster.json());
    }
    Value::Object(stats)
}

/// The metric families of one scrape: every exposed figure, then the open connections per
/// worker (a series per worker, so not a row of the table).
pub(crate) fn metric_families(app: &App) -> Registry {
    let reading = Reading::take(app);
    let mut registry = Registry::with_prefix(METRIC_PREFIX);
    let mut labelled: Vec<Labelled> = Vec::new();
    for figure in FIGURES {
        let value = match (figure.read)(&reading) {
            Count(value) => value as f64,
            Level(value) => value,
            Text(_) | Flag(_) => continue,
        };
        match figure.exposed {
            No => {}
            G(name, help) => {
                let gauge = Gauge::<f64, AtomicU64>::default();
                gauge.set(value);
                registry.register(name, help, gauge);
            }
            C(name, help) => {
                let counter = Counter::<u64>::default();
                counter.inc_by(value as u64);
                registry.register(name, help, counter);
            }
            LG(name, help, label, label_value) => {
                Labelled::add(
                    &mut labelled,
                    name,
                    help,
                    false,
                    (label, label_value),
                    value,
                );
            }
            LC(name, help, label, label_value) => {
                Labelled::add(&mut labelled, name, help, true, (label, label_value), value);
            }
        }
    }
    let workers: Vec<(String, f64)> = app
        .open_connections()
        .into_iter()
        .enumerate()
        .map(|(worker, open)| (worker.to_string(), open as f64))
        .collect();
    let connections = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
    for (worker, open) in workers {
        connections
            .get_or_create(&vec![("worker".to_owned(), worker)])
            .set(open);
    }
    for family in labelled {
        family.register(&mut registry);
    }
    registry.register(
        "connections",
        "Open client connections, per serving worker",
        connections,
    );
    if let Some(cluster) = &reading.cluster {
        register_cluster(&mut registry, cluster);
    }
    registry
}

/// The `concert_cluster_*` families (only with `-cluster`, so a lone instance's exposition
/// stays as it was).
fn register_cluster(registry: &mut Registry, cluster: &ClusterReport) {
    let gauge = |value: f64| {
        let gauge = Gauge::<f64, AtomicU64>::default();
        gauge.set(value);
        gauge
    };
    let mode = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
    for each in [Mode::Shared, Mode::Local] {
        let on = if each == cluster.mode { 1.0 } else { 0.0 };
        mode.get_or_create(&vec![("mode".to_owned(), each.as_str().to_owned())])
            .set(on);
    }
    registry.register(
        "cluster_mode",
        "1 for the mode this instance is in: shared (the cap is shared through Redis) or local (Redis unreachable, serving alone on a share of the cap)",
        mode,
    );
    registry.register(
        "cluster_instances",
        "Instances sharing the cap, this one included, as last seen",
        gauge(cluster.instances as f64),
    );
    registry.register(
        "cluster_lease",
        "Page slots this instance holds from the shared pool (in local mode, its share of the cap)",
        gauge(cluster.lease as f64),
    );
    registry.register(
        "cluster_in_use",
        "Page slots in use at this instance now",
        gauge(cluster.in_use as f64),
    );
    registry.register(
        "cluster_line",
        "Visitors waiting in the shared line, on every instance",
        gauge(cluster.line as f64),
    );
    registry.register(
        "cluster_line_here",
        "Visitors waiting in the shared line who joined through this instance",
        gauge(cluster.line_here as f64),
    );
    registry.register(
        "cluster_redis_up",
        "1 while the last exchange with Redis succeeded",
        gauge(if cluster.redis_up { 1.0 } else { 0.0 }),
    );
    registry.register(
        "cluster_redis_latency_seconds",
        "Smoothed round-trip time of exchanges with Redis",
        gauge(cluster.redis_latency.as_secs_f64()),
    );
    let errors = Counter::<u64>::default();
    errors.inc_by(cluster.redis_errors);
    registry.register(
        "cluster_redis_errors",
        "Exchanges with Redis that failed or timed out",
        errors,
    );
}

/// A labelled family gathered from its rows of the table.
struct Labelled {
    name: &'static str,
    help: &'static str,
    counter: bool,
    series: Vec<((&'static str, &'static str), f64)>,
}

impl Labelled {
    fn add(
        families: &mut Vec<Labelled>,
        name: &'static str,
        help: &'static str,
        counter: bool,
        label: (&'static str, &'static str),
        value: f64,
    ) {
        match families.iter_mut().find(|family| family.name == name) {
            Some(family) => family.series.push((label, value)),
            None => families.push(Labelled {
                name,
                help,
                counter,
                series: vec![(label, value)],
            }),
        }
    }

    fn register(self, registry: &mut Registry) {
        let labels = |(name, value): (&str, &str)| vec![(name.to_owned(), value.to_owned())];
        if self.counter {
            let family = Family::<Vec<(String, String)>, Counter<u64>>::default();
            for (label, value) in self.series {
                family.get_or_create(&labels(label)).inc_by(value as u64);
            }
            registry.register(self.name, self.help, family);
        } else {
            let family = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
            for (label, value) in self.series {
                family.get_or_create(&labels(label)).set(value);
            }
            registry.register(self.name, self.help, family);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_metric_series_are_unique() {
        let mut keys = std::collections::HashSet::new();
        let mut series = std::collections::HashSet::new();
        for figure in FIGURES {
            if let Some(key) = figure.key {
                assert!(keys.insert(key), "{key} twice");
            }
            let name = match figure.exposed {
                No => continue,
                G(name, _) | C(name, _) => name.to_owned(),
                LG(name, _, label, value) | LC(name, _, label, value) => {
                    format!("{name}{{{label}={value}}}")
                }
            };
            assert!(series.insert(name.clone()), "{name} twice");
        }
    }

    #[test]
    fn counters_are_the_total_keys() {
        for figure in FIGURES {
            let (Some(key), exposed) = (figure.key, &figure.exposed) else {
                continue;
            };
            match exposed {
                C(name, _) => assert_eq!(key, format!("{name}_total")),
                LC(name, _, _, value) => assert_eq!(key, format!("{name}_{value}_total")),
                G(..) | LG(..) => assert!(!key.ends_with("_total"), "{key}"),
                No => {}
            }
        }
    }
}
