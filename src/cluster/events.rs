//! The events channel: one subscriber per instance hears every ban, lift and settings change
//! the other instances publish, and applies it.
//!
//! Pub/sub delivers only to whoever is listening, so on every (re)connect the subscriber first
//! subscribes and then reads the whole shared state (bans, ranges, settings): whatever was
//! published while it was away is picked up there, and whatever is published from then on
//! arrives as a message. Messages carry their sender's id; an instance skips its own. A message
//! that cannot be read is counted and skipped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;

use super::Cluster;
use super::messages::{Event, Unreadable, read};
use crate::app::App;

/// First wait before subscribing again after a failure; it doubles up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often a quiet subscription is checked with a ping, so a connection that died without
/// closing is noticed.
pub const PING_EVERY: Duration = Duration::from_secs(5);
/// How the subscription is doing.
#[derive(Debug, Default)]
pub struct EventsHealth {
    /// Subscribed and caught up with the shared state.
    connected: AtomicBool,
    /// Subscriptions made (the first one included).
    pub connects_total: AtomicU64,
    /// Messages from other instances that were read.
    pub received_total: AtomicU64,
    /// Messages that could not be read (not JSON, unknown kind, too large).
    pub invalid_total: AtomicU64,
}

impl EventsHealth {
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }
}

/// Subscribes, catches up, and applies messages until the app is gone; reconnects with backoff.
pub(crate) fn spawn(app: Weak<App>, cluster: Arc<Cluster>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = MIN_BACKOFF;
        let mut failing = false;
        loop {
            match cluster.link.subscribe(&cluster.keys.events()).await {
                Ok(pubsub) => {
                    backoff = MIN_BACKOFF;
                    if failing {
                        tracing::info!("cluster: events channel back");
                        failing = false;
                    }
                    if !listen(&app, &cluster, pubsub).await {
                        return;
                    }
                    cluster.events.connected.store(false, Ordering::Relaxed);
                    tracing::warn!("cluster: events channel lost; subscribing again");
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!("cluster: cannot subscribe to events: {error}");
                        failing = true;
                    }
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    })
}

/// One subscription's life. False when the app is gone.
async fn listen(app: &Weak<App>, cluster: &Arc<Cluster>, pubsub: redis::aio::PubSub) -> bool {
    let (mut sink, mut stream) = pubsub.split();
    cluster
        .events
        .connects_total
        .fetch_add(1, Ordering::Relaxed);
    {
        let Some(app) = app.upgrade() else {
            return false;
        };
        if let Err(error) = cluster.bans.resync(&app, cluster).await {
            tracing::warn!("cluster: cannot read the shared bans: {error}");
            return true;
        }
        if let Err(error) = cluster.settings.resync(&app, cluster).await {
            tracing::warn!("cluster: cannot read the shared settings: {error}");
            return true;
        }
    }
    cluster.events.connected.store(true, Ordering::Relaxed);
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            () = tokio::time::sleep(PING_EVERY) => {
                let pong = tokio::time::timeout(
                    super::link::COMMAND_TIMEOUT,
                    sink.ping::<redis::Value>(),
                )
                .await;
                if !matches!(pong, Ok(Ok(_))) {
                    return true;
                }
                continue;
            }
        };
        let Some(message) = message else {
            return true;
        };
        let Some(app) = app.upgrade() else {
            return false;
        };
        handle(&app, cluster, message.get_payload_bytes()).await;
    }
}

/// Applies one message.
pub(crate) async fn handle(app: &App, cluster: &Cluster, payload: &[u8]) {
    let event = match read(payload, &cluster.id) {
        Ok(Some(event)) => event,
        Ok(None) => return,
        Err(Unreadable) => {
            cluster.events.invalid_total.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                bytes = payload.len(),
                "cluster: unreadable message on the events channel skipped"
            );
            return;
        }
    };
    cluster
        .events
        .received_total
        .fetch_add(1, Ordering::Relaxed);
    match event {
        Event::Ban {
            client,
            range,
            record,
            ..
        } => {
            cluster.bans.apply(app, &client, range, &record);
        }
        Event::Settings { version, .. } => {
            if let Err(error) = cluster.settings.heard(app, cluster, version).await {
                tracing::warn!("cluster: cannot read the shared settings: {error}");
            }
        }
    }
}
