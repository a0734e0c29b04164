//! What `/_room/healthz`, `/_room/stats` and the metrics say of the cluster: the mode, the
//! instances seen, this instance's slots and the link to Redis. Only present with `-cluster`.

use std::time::Duration;

use serde_json::{Value, json};

use super::slots::Mode;
use crate::app::App;

/// One reading of the cluster's state.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterReport {
    pub mode: Mode,
    /// This instance's id among the others.
    pub instance: String,
    /// Instances seen at the last lease, this one included (the last count in local mode).
    pub instances: u64,
    /// Page slots this instance holds now: its lease, or in local mode its share.
    pub lease: u64,
    /// Page slots in use here now.
    pub in_use: u64,
    /// Visitors in the shared line at the last lease.
    pub line: u64,
    /// Of those, the ones that joined through this instance (its share of the line).
    pub line_here: u64,
    /// Slots set aside for visitors called from the line, at the last lease.
    pub reserved: u64,
    pub redis_up: bool,
    /// Smoothed round-trip time of good exchanges.
    pub redis_latency: Duration,
    pub redis_errors: u64,
}

impl ClusterReport {
    /// The cluster's state now, or `None` without `-cluster`.
    pub fn take(app: &App) -> Option<ClusterReport> {
        let cluster = app.cluster.as_ref()?;
        let (lease, in_use) = app.room.page_slots();
        let health = cluster.link.health();
        Some(ClusterReport {
            mode: cluster.slots.mode(),
            instance: cluster.id.clone(),
            instances: cluster.slots.instances(),
            lease: lease as u64,
            in_use: in_use as u64,
            line: cluster.slots.line_length(),
            line_here: cluster.line.joined_here(),
            reserved: cluster.slots.reserved(),
            redis_up: health.is_up(),
            redis_latency: health.latency(),
            redis_errors: health.errors_total(),
        })
    }

    fn latency_ms(&self) -> f64 {
        // Microsecond precision is all the link keeps.
        (self.redis_latency.as_secs_f64() * 1e6).round() / 1e3
    }

    /// The `cluster` object of the health report and the stats.
    pub fn json(&self) -> Value {
        json!({
            "mode": self.mode.as_str(),
            "instance": self.instance,
            "instances": self.instances,
            "lease": self.lease,
            "in_use": self.in_use,
            "line": self.line,
            "line_here": self.line_here,
            "reserved": self.reserved,
            "redis": {
                "up": self.redis_up,
                "latency_ms": self.latency_ms(),
                "errors_total": self.redis_errors,
            },
        })
    }

    /// The lines the plain-text health report adds.
    pub fn text(&self) -> String {
        format!(
            "cluster: {}\ninstances: {}\nlease: {}\nin_use: {}\nredis: {} {:.3} ms, {} errors",
            self.mode.as_str(),
            self.instances,
            self.lease,
            self.in_use,
            if self.redis_up { "up" } else { "down" },
            self.latency_ms(),
            self.redis_errors,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_reads_the_same_in_json_and_text() {
        let report = ClusterReport {
            mode: Mode::Local,
            instance: "h-1-abc".into(),
            instances: 3,
            lease: 2,
            in_use: 1,
            line: 0,
            line_here: 0,
            reserved: 0,
            redis_up: false,
            redis_latency: Duration::from_micros(420),
            redis_errors: 7,
        };
        let json = report.json();
        assert_eq!(json["mode"], "local");
        assert_eq!(json["instances"], 3);
        assert_eq!(json["redis"]["latency_ms"], 0.42);
        assert_eq!(json["redis"]["up"], false);
        assert_eq!(
            report.text(),
            "cluster: local\ninstances: 3\nlease: 2\nin_use: 1\nredis: down 0.420 ms, 7 errors"
        );
    }
}
