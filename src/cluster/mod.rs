//! Several instances, one line (`-cluster`): instances in front of the same origin share one
//! cap, one FIFO line, one ban list and one set of live settings through a Redis (or Valkey)
//! server.
//!
//! Off unless `-cluster` names a server; without it nothing here runs. With it, Redis is the
//! one source of truth for what the instances share, every change to it is one Lua script (never
//! a read-modify-write from Concert), and an instance that loses Redis keeps serving on its own
//! with a share of the cap until Redis is back.
//!
//! - `keys`: the names of the shared keys, under `concert:{<cluster-name>}:`;
//! - `link`: the connection, its timeouts and its health figures;
//! - `messages`: what goes on that channel, and the ban record stored for each client;
//! - `events`: the channel every instance hears the others' ban and settings changes on;
//! - `bans`: one ban list and one strike count;
//! - `settings`: one set of live settings;
//! - `line`: the one FIFO line, its tickets, calls and entries;
//! - `slots`: the global cap (membership, slot leases, degraded mode), whose task also calls
//!   the head of the line;
//! - `health`: what `/_room/healthz`, the stats and the metrics say of the cluster.

pub mod bans;
pub mod events;
pub mod health;
pub mod keys;
pub mod line;
pub mod link;
pub mod messages;
pub mod settings;
pub mod slots;

use std::fmt;
use std::sync::Arc;

pub use keys::Keys;
pub use link::{Health, Link, LinkError};

use crate::config::Config;

/// What `-cluster`, `-cluster-name`, `-cluster-fallback-share` and
/// `CONCERT_CLUSTER_PASSWORD` ask for.
#[derive(Clone)]
pub struct ClusterOptions {
    /// `redis://` or `rediss://` URL (it may carry a password as well).
    pub url: String,
    /// Prefix of the shared keys.
    pub name: String,
    /// `CONCERT_CLUSTER_PASSWORD`; overrides a password in the URL.
    pub password: Option<String>,
    /// Fraction of the cap to admit alone while Redis is unreachable; 0 = one part in as many
    /// as the instances last seen.
    pub fallback_share: f64,
}

impl fmt::Debug for ClusterOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterOptions")
            .field("url", &link::redact_url(&self.url))
            .field("name", &self.name)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("fallback_share", &self.fallback_share)
            .finish()
    }
}

impl ClusterOptions {
    /// The cluster settings of `config`, or `None` when `-cluster` is empty.
    pub fn from_config(config: &Config) -> Option<ClusterOptions> {
        if config.cluster.is_empty() {
            return None;
        }
        Some(ClusterOptions {
            url: config.cluster.clone(),
            name: config.cluster_name.clone(),
            password: Some(config.cluster_password.clone()).filter(|p| !p.is_empty()),
            fallback_share: config.cluster_fallback_share,
        })
    }

    /// The slots this instance may use alone out of `cap` while Redis is unreachable, having
    /// last seen `instances` instances (itself included): at least one slot when the cap is not
    /// zero, so a lone survivor still serves.
    pub fn fallback_slots(&self, cap: u32, instances: usize) -> u32 {
        let share = if self.fallback_share > 0.0 {
            self.fallback_share
        } else {
            1.0 / instances.max(1) as f64
        };
        let slots = (f64::from(cap) * share).floor() as u32;
        if cap == 0 { 0 } else { slots.clamp(1, cap) }
    }
}

/// This instance's place in a cluster: its options, its name among the others, the shared keys
/// and the link to Redis. Held by the app when `-cluster` is set; the parts that share state
/// (slots, line, bans, settings) each hang their own state and tasks off it.
pub struct Cluster {
    pub options: ClusterOptions,
    /// This instance's id (see [`instance_id`]).
    pub id: String,
    pub keys: Keys,
    pub link: Link,
    /// Bans and strikes shared with the other instances.
    pub bans: bans::SharedBans,
    /// Live settings shared with the other instances.
    pub settings: settings::SharedSettings,
    /// The events subscription.
    pub events: events::EventsHealth,
    /// The shared line's figures, script and admission rate.
    pub line: line::SharedLine,
    /// The global cap's state (see [`slots`]).
    pub slots: slots::Slots,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("id", &self.id)
            .field("name", &self.options.name)
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// The cluster part of an app; nothing is sent to Redis until a part uses the link.
    pub fn new(options: ClusterOptions) -> Result<Arc<Cluster>, LinkError> {
        let link = Link::open(&options)?;
        Ok(Arc::new(Cluster {
            keys: Keys::new(&options.name),
            id: instance_id(),
            link,
            options,
            bans: bans::SharedBans::default(),
            settings: settings::SharedSettings::default(),
            events: events::EventsHealth::default(),
            line: line::SharedLine::new(),
            slots: slots::Slots::default(),
        }))
    }
}

/// Starts the cluster's background work for `app` serving on `addr` (nothing without
/// `-cluster`); the handles are stopped with the other background tasks.
pub(crate) fn start(
    app: &Arc<crate::app::App>,
    addr: std::net::SocketAddr,
) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(cluster) = app.cluster.clone() else {
        return Vec::new();
    };
    cluster.slots.set_address(addr.to_string());
    tracing::info!(
        instance = %cluster.id,
        server = %link::redact_url(&cluster.options.url),
        name = %cluster.options.name,
        "sharing the cap, line and bans with other instances through Redis"
    );
    bans::wire(app, &cluster);
    vec![
        bans::spawn_writer(cluster.clone()),
        bans::spawn_strikes(Arc::downgrade(app), cluster.clone()),
        settings::spawn_writer(Arc::downgrade(app), cluster.clone()),
        line::spawn_leaver(cluster.clone()),
        events::spawn(Arc::downgrade(app), cluster),
        // One lease task: slot leases, then the line's call step, in one rhythm.
        slots::spawn(app),
    ]
}

/// This instance's name among the others: host name, process id and a random part, so two
/// runs on one host (or a restart that reuses a pid) never take each other's slots.
pub fn instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .take(40)
        .collect();
    format!(
        "{host}-{}-{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(share: f64) -> ClusterOptions {
        ClusterOptions {
            url: "redis://127.0.0.1:6379".into(),
            name: "concert".into(),
            password: None,
            fallback_share: share,
        }
    }

    #[test]
    fn fallback_share_defaults_to_one_part_per_instance_seen() {
        assert_eq!(options(0.0).fallback_slots(100, 3), 33);
        assert_eq!(options(0.0).fallback_slots(100, 0), 100);
        assert_eq!(options(0.5).fallback_slots(100, 3), 50);
        // A lone slot is kept even when the share rounds down to nothing.
        assert_eq!(options(0.0).fallback_slots(2, 5), 1);
        assert_eq!(options(0.0).fallback_slots(0, 5), 0);
    }

    #[test]
    fn instance_ids_differ_between_calls() {
        let (a, b) = (instance_id(), instance_id());
        assert_ne!(a, b);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        );
    }
}
