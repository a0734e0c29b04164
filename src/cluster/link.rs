//! The connection to Redis and how well it is going: one multiplexed connection that reconnects
//! by itself, a bound on every command, and the figures the health report, stats and the portal
//! show (up or down, latency, errors).
//!
//! The client is the `redis` crate (redis-rs) rather than `fred`. Both are maintained, async on
//! tokio and speak TLS through rustls. What the cluster needs is one multiplexed connection
//! that reconnects by itself, one subscriber for the events channel, and Lua scripts sent by
//! digest with the full text as a fallback: redis-rs has exactly those (`ConnectionManager`,
//! `Script`, its async pub/sub) in a smaller dependency tree. fred's strengths, connection
//! pools, Redis Cluster and Sentinel support and reconnect policies of its own, are machinery
//! one connection to one server would leave unused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, RedisError};

use super::ClusterOptions;

/// Longest a command may take before it counts as failed: a Redis that answers slower than this
/// is treated as gone, so a request never waits longer on it.
pub const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
/// Longest a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Why the cluster link could not be set up or a command failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("-cluster {url}: {message}")]
    Address { url: String, message: String },
    #[error("Redis: {0}")]
    Redis(#[from] RedisError),
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis answered, but not in the shape a script promises.
    #[error("Redis answered in an unexpected shape: {0}")]
    Reply(&'static str),
}

/// The shared connection; cheap to clone.
#[derive(Clone)]
pub struct Link {
    manager: ConnectionManager,
    /// For the dedicated pub/sub connection, which a multiplexed connection cannot carry.
    client: redis::Client,
    health: Arc<Health>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("up", &self.health.is_up())
            .finish_non_exhaustive()
    }
}

impl Link {
    /// A link to the server `options` names. It connects on first use and again after any loss,
    /// so an instance can start while Redis is down.
    pub fn open(options: &ClusterOptions) -> Result<Link, LinkError> {
        let address_error = |message: String| LinkError::Address {
            url: redact_url(&options.url),
            message,
        };
        let mut info = options
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| address_error(e.to_string()))?;
        if let Some(password) = &options.password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let client = redis::Client::open(info).map_err(|e| address_error(e.to_string()))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            // Reconnects are driven by the next command; no long retry loop inside one call.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| address_error(e.to_string()))?;
        Ok(Link {
            manager,
            client,
            health: Arc::new(Health::default()),
        })
    }

    /// A connection handle for one or more commands (clones share the one connection).
    pub fn connection(&self) -> ConnectionManager {
        self.manager.clone()
    }

    /// A new connection subscribed to `channel`, within [`CONNECT_TIMEOUT`] plus
    /// [`COMMAND_TIMEOUT`]. It does not reconnect by itself: its stream ends when the
    /// connection is lost, and the caller opens another.
    pub async fn subscribe(&self, channel: &str) -> Result<redis::aio::PubSub, LinkError> {
        let subscribed = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            Ok::<_, RedisError>(pubsub)
        };
        match tokio::time::timeout(CONNECT_TIMEOUT + COMMAND_TIMEOUT, subscribed).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(error)) => Err(LinkError::Redis(error)),
            Err(_) => Err(LinkError::Timeout(CONNECT_TIMEOUT + COMMAND_TIMEOUT)),
        }
    }

    /// How the link is doing.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// Runs one exchange with Redis under [`COMMAND_TIMEOUT`], counting its latency or its
    /// failure. `exchange` gets its own connection handle.
    pub async fn run<T, F, Fut>(&self, exchange: F) -> Result<T, LinkError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let started = Instant::now();
        let outcome = tokio::time::timeout(COMMAND_TIMEOUT, exchange(self.connection())).await;
        match outcome {
            Ok(Ok(value)) => {
                self.health.record_ok(started.elapsed());
                Ok(value)
            }
            Ok(Err(error)) => {
                self.health.record_error();
                Err(LinkError::Redis(error))
            }
            Err(_) => {
                self.health.record_error();
                Err(LinkError::Timeout(COMMAND_TIMEOUT))
            }
        }
    }
}

/// Figures about the link, updated by every exchange.
#[derive(Debug, Default)]
pub struct Health {
    up: AtomicBool,
    ok_total: AtomicU64,
    errors_total: AtomicU64,
    /// Smoothed latency of successful exchanges, in microseconds.
    latency_us: AtomicU64,
    /// Latency of the last successful exchange, in microseconds.
    last_latency_us: AtomicU64,
}

impl Health {
    /// Whether the last exchange succeeded.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn ok_total(&self) -> u64 {
        self.ok_total.load(Ordering::Relaxed)
    }

    pub fn errors_total(&self) -> u64 {
        self.errors_total.load(Ordering::Relaxed)
    }

    /// Smoothed round-trip time of successful exchanges (zero before the first).
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_us.load(Ordering::Relaxed))
    }

    /// Round-trip time of the last successful exchange.
    pub fn last_latency(&self) -> Duration {
        Duration::from_micros(self.last_latency_us.load(Ordering::Relaxed))
    }

    pub(super) fn record_ok(&self, took: Duration) {
        let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.last_latency_us.store(sample, Ordering::Relaxed);
        // An average over about the last eight exchanges; the first sample stands alone.
        let previous = self.latency_us.load(Ordering::Relaxed);
        let smoothed = if previous == 0 {
            sample
        } else {
            (previous.saturating_mul(7).saturating_add(sample)) / 8
        };
        self.latency_us.store(smoothed, Ordering::Relaxed);
        self.ok_total.fetch_add(1, Ordering::Relaxed);
        self.up.store(true, Ordering::Relaxed);
    }

    pub(super) fn record_error(&self) {
        self.errors_total.fetch_add(1, Ordering::Relaxed);
        self.up.store(false, Ordering::Relaxed);
    }
}

/// `url` with any password in it replaced, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact_url("redis://:hunter2@10.0.0.5:6379/2"),
            "redis://:***@10.0.0.5:6379/2"
        );
        assert_eq!(
            redact_url("rediss://app:pw@cache.example:6380"),
            "rediss://app:***@cache.example:6380"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
    }

    #[test]
    fn latency_is_smoothed_and_errors_mark_the_link_down() {
        let health = Health::default();
        assert!(!health.is_up());
        health.record_ok(Duration::from_micros(800));
        assert_eq!(health.latency(), Duration::from_micros(800));
        health.record_ok(Duration::from_micros(0));
        assert_eq!(health.latency(), Duration::from_micros(700));
        assert!(health.is_up());
        health.record_error();
        assert!(!health.is_up());
        assert_eq!((health.ok_total(), health.errors_total()), (2, 1));
    }
}
