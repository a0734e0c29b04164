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
use serde::{Deserialize, Serialize};

use super::Cluster;
use super::bans::Record;
use crate::app::App;

/// First wait before subscribing again after a failure; it doubles up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often a quiet subscription is checked with a ping, so a connection that died without
/// closing is noticed.
pub const PING_EVERY: Duration = Duration::from_secs(5);
/// Larger messages are not ours.
const MAX_MESSAGE: usize = 64 * 1024;

/// A message on the events channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A ban or lift of one client (`range: false`) or range, as stored in Redis.
    Ban {
        from: String,
        client: String,
        range: bool,
        record: Record,
    },
    /// The shared settings were written; their version.
    Settings { from: String, version: u64 },
}

impl Event {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The instance that sent it.
    pub fn from(&self) -> &str {
        match self {
            Event::Ban { from, .. } | Event::Settings { from, .. } => from,
        }
    }
}

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

/// A message that is not one of ours: not JSON, an unknown kind, or too large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable;

/// What a message asks of this instance; `None` for one it sent itself.
pub fn read(payload: &[u8], own_id: &str) -> Result<Option<Event>, Unreadable> {
    if payload.len() > MAX_MESSAGE {
        return Err(Unreadable);
    }
    let event: Event = serde_json::from_slice(payload).map_err(|_| Unreadable)?;
    Ok((event.from() != own_id).then_some(event))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_foreign_and_garbage_messages_are_told_apart() {
        let event = Event::Settings {
            from: "a".into(),
            version: 3,
        };
        let text = event.to_json();
        assert_eq!(text, r#"{"kind":"settings","from":"a","version":3}"#);
        assert_eq!(read(text.as_bytes(), "a"), Ok(None));
        assert_eq!(read(text.as_bytes(), "b"), Ok(Some(event)));
        for garbage in [
            &b"not json"[..],
            b"{}",
            br#"{"kind":"reboot","from":"x"}"#,
            br#"{"kind":"ban","from":"x","client":"1.2.3.4"}"#,
            b"\xff\xfe",
        ] {
            assert_eq!(read(garbage, "b"), Err(Unreadable), "{garbage:?}");
        }
        assert_eq!(read(&vec![b' '; MAX_MESSAGE + 1], "b"), Err(Unreadable));
    }
}
