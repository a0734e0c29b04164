//! One set of live settings for every instance.
//!
//! While the cluster is up, the shared settings in Redis (`settings`: `{version, from,
//! values}`) are the source of truth for every live setting except the few that name files on
//! one host ([`HOST_LOCAL`]); restart-only settings are never shared. A change made here
//! (portal, settings API, `/_room/cap`, SIGHUP reload) is written there by `settings.lua`, which
//! raises the version and tells the other instances; they apply it through the app's ordinary
//! change path (validated, saved to their settings.json) without writing it back. The write
//! only succeeds on top of the version this instance last saw, so two changes made at once on
//! two instances are merged, not lost: the later writer first takes the other's values, keeps
//! its own changed keys, and writes again.
//!
//! At start (and after any reconnect) an instance reads the stored settings and applies them;
//! when Redis holds none, it writes its own live set.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::Notify;

use super::{Cluster, LinkError};
use crate::app::{App, ChangeError};
use crate::config::{Config, SETTINGS};

/// Live settings that name a file on this host; each instance keeps its own.
pub const HOST_LOCAL: &[&str] = &[
    "html",
    "tls_cert",
    "tls_key",
    "tls_cache",
    "tls_directory_ca",
];
/// How often an unwritten change is tried again while Redis is away.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// Merges in a row before a write gives up until the next change or reconnect.
const MAX_MERGES: usize = 5;

/// Whether `key` is shared between instances.
pub fn is_shared(key: &str) -> bool {
    SETTINGS
        .iter()
        .any(|def| def.key == key && !def.restart && !HOST_LOCAL.contains(&key))
}

/// The shared settings of `config`, as settings-file keys and values.
pub fn shared_values(config: &Config) -> serde_json::Map<String, serde_json::Value> {
    SETTINGS
        .iter()
        .filter(|def| is_shared(def.key))
        .filter_map(|def| config.value_json(def.key).map(|v| (def.key.to_owned(), v)))
        .collect()
}

/// The stored settings.
#[derive(Debug, Deserialize)]
struct Stored {
    version: u64,
    #[serde(default)]
    from: String,
    values: serde_json::Map<String, serde_json::Value>,
}

/// This instance's side of the shared settings.
#[derive(Debug, Default)]
pub struct SharedSettings {
    /// Keys changed here and not yet written.
    pending: Mutex<BTreeSet<String>>,
    wake: Notify,
    /// The stored version this instance last wrote or applied.
    seen: Mutex<Option<u64>>,
    /// One writer at a time.
    writing: tokio::sync::Mutex<()>,
    /// Changes from other instances applied here.
    pub applied_total: AtomicU64,
    /// Values from other instances this instance refused (logged with the reason).
    pub refused_total: AtomicU64,
}

impl SharedSettings {
    /// Notes a successful local change (called by the app after it applied one, under its
    /// change lock, so it only queues).
    pub fn on_local_change(&self, before: &Config, after: &Config) {
        let changed: Vec<String> = SETTINGS
            .iter()
            .filter(|def| is_shared(def.key))
            .filter(|def| before.value_json(def.key) != after.value_json(def.key))
            .map(|def| def.key.to_owned())
            .collect();
        if changed.is_empty() {
            return;
        }
        self.pending.lock().extend(changed);
        self.wake.notify_one();
    }

    /// The stored version this instance is at.
    pub fn version(&self) -> Option<u64> {
        *self.seen.lock()
    }

    /// Writes this instance's live set if it has unwritten changes; false when Redis could not
    /// take it (the changes stay queued).
    pub async fn flush(&self, app: &App, cluster: &Cluster) -> bool {
        self.write(app, cluster, false).await
    }

    async fn write(&self, app: &App, cluster: &Cluster, init: bool) -> bool {
        let _writer = self.writing.lock().await;
        for _ in 0..MAX_MERGES {
            let written: BTreeSet<String> = self.pending.lock().clone();
            if written.is_empty() && !init {
                return true;
            }
            let values = shared_values(&app.generation().config);
            let text = serde_json::Value::Object(values).to_string();
            let expected = self.version().unwrap_or(0);
            let keys = cluster.keys.clone();
            let from = serde_json::Value::String(cluster.id.clone()).to_string();
            let mode = if init { "init" } else { "put" };
            let outcome = cluster
                .link
                .run(|mut conn| async move {
                    redis::Script::new(include_str!("lua/settings.lua"))
                        .key(keys.settings())
                        .key(keys.settings_version())
                        .arg(expected)
                        .arg(text)
                        .arg(from)
                        .arg(keys.events())
                        .arg(mode)
                        .invoke_async::<(i64, redis::Value)>(&mut conn)
                        .await
                })
                .await;
            match outcome {
                Ok((1, version)) => {
                    let version = redis::from_redis_value::<u64>(version).unwrap_or(0);
                    *self.seen.lock() = Some(version);
                    self.pending.lock().retain(|key| !written.contains(key));
                    tracing::info!(version, "cluster: live settings shared");
                    return true;
                }
                Ok((_, stored)) => {
                    // Someone wrote first: take theirs (our pending keys kept) and write again.
                    let text = redis::from_redis_value::<String>(stored).unwrap_or_default();
                    self.apply_text(app, &text);
                    if init {
                        return true;
                    }
                }
                Err(error) => {
                    tracing::debug!("cluster: settings not shared yet: {error}");
                    return false;
                }
            }
        }
        false
    }

    /// After a (re)connect: writes what waited, then applies the stored settings, or writes
    /// this instance's own live set when none are stored.
    pub async fn resync(&self, app: &App, cluster: &Cluster) -> Result<(), LinkError> {
        self.flush(app, cluster).await;
        match self.read(cluster).await? {
            Some(text) => self.apply_text(app, &text),
            None => {
                self.write(app, cluster, true).await;
            }
        }
        Ok(())
    }

    /// A message said `version` was written.
    pub async fn heard(&self, app: &App, cluster: &Cluster, version: u64) -> Result<(), LinkError> {
        if self.version() == Some(version) {
            return Ok(());
        }
        if let Some(text) = self.read(cluster).await? {
            self.apply_text(app, &text);
        }
        Ok(())
    }

    async fn read(&self, cluster: &Cluster) -> Result<Option<String>, LinkError> {
        let key = cluster.keys.settings();
        cluster
            .link
            .run(|mut conn| async move {
                redis::cmd("GET")
                    .arg(key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await
    }

    /// Applies stored settings text, unless it is the version already applied. Keys changed
    /// here and not yet written keep their local values.
    fn apply_text(&self, app: &App, text: &str) {
        let stored: Stored = match serde_json::from_str(text) {
            Ok(stored) => stored,
            Err(error) => {
                tracing::warn!("cluster: the shared settings cannot be read: {error}");
                return;
            }
        };
        if self.version() == Some(stored.version) {
            return;
        }
        let config = app.generation().config.clone();
        let pending = self.pending.lock().clone();
        let mut changes: serde_json::Map<String, serde_json::Value> = stored
            .values
            .into_iter()
            .filter(|(key, value)| {
                is_shared(key)
                    && !pending.contains(key)
                    && config.value_json(key).as_ref() != Some(value)
            })
            .collect();
        // Values this instance refuses are dropped one by one, so the rest still apply.
        for _ in 0..2 {
            if changes.is_empty() {
                break;
            }
            match app.apply_shared_change(&changes) {
                Ok(_) => {
                    self.applied_total.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        version = stored.version,
                        from = %stored.from,
                        keys = ?changes.keys().collect::<Vec<_>>(),
                        "cluster: live settings changed on another instance applied"
                    );
                    break;
                }
                Err(ChangeError::Refused(problems)) => {
                    self.refused_total.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "cluster: shared settings refused here: {}",
                        crate::app::Problem::joined(&problems)
                    );
                    let before = changes.len();
                    for problem in &problems {
                        changes.remove(&problem.key);
                    }
                    if changes.len() == before {
                        break;
                    }
                }
                Err(error) => {
                    self.refused_total.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("cluster: shared settings refused here: {error}");
                    break;
                }
            }
        }
        *self.seen.lock() = Some(stored.version);
    }
}

/// Writes local changes as they come, retrying every second while Redis is away.
pub(crate) fn spawn_writer(app: Weak<App>, cluster: Arc<Cluster>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = cluster.settings.wake.notified() => {}
                () = tokio::time::sleep(RETRY_EVERY) => {}
            }
            if cluster.settings.pending.lock().is_empty() {
                continue;
            }
            let Some(app) = app.upgrade() else { return };
            cluster.settings.flush(&app, &cluster).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Loaded;

    fn app(args: &[&str]) -> Arc<App> {
        let mut argv: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        argv.extend(["-data-dir=".into(), "-cluster=redis://127.0.0.1:1/0".into()]);
        let mut config = match crate::config::load(&argv, &std::collections::HashMap::new()) {
            Ok(Loaded::Run(config)) => *config,
            _ => panic!("flags {argv:?} refused"),
        };
        config.validate().expect("valid settings");
        App::new(config).expect("app")
    }

    #[tokio::test]
    async fn local_changes_are_queued_and_shared_ones_are_not() {
        let app = app(&["-cap", "10"]);
        let cluster = app.cluster.clone().unwrap();
        let mut change = serde_json::Map::new();
        change.insert("cap".into(), serde_json::json!(9));
        app.apply_shared_change(&change).unwrap();
        assert!(cluster.settings.pending.lock().is_empty());
        change.insert("cap".into(), serde_json::json!(8));
        change.insert("max_queue".into(), serde_json::json!(5));
        app.apply_change(&change, &[]).unwrap();
        let pending: Vec<String> = cluster.settings.pending.lock().iter().cloned().collect();
        assert_eq!(pending, ["cap", "max_queue"]);
    }

    #[tokio::test]
    async fn stored_settings_apply_except_refused_unshared_and_unwritten_local_values() {
        let app = app(&["-cap", "10", "-max-queue", "100"]);
        let shared = &app.cluster.as_ref().unwrap().settings;
        shared.pending.lock().insert("retry_after".into());
        let stored = serde_json::json!({
            "version": 3,
            "from": "elsewhere",
            "values": {
                "cap": 12,
                "max_queue": "many",
                "retry_after": 9,
                "listen": "0.0.0.0:1",
                "no_such_setting": 1,
            },
        });
        shared.apply_text(&app, &stored.to_string());
        let config = app.generation().config.clone();
        assert_eq!(config.cap, 12);
        assert_eq!(config.max_queue, 100);
        assert_eq!(config.retry_after, 5);
        assert_ne!(config.listen, "0.0.0.0:1");
        assert_eq!(shared.version(), Some(3));
        assert_eq!(shared.refused_total.load(Ordering::Relaxed), 1);
        // Garbage is logged and leaves everything as it was.
        shared.apply_text(&app, "{\"version\":\"x\"}");
        assert_eq!(shared.version(), Some(3));
    }

    #[test]
    fn restart_only_and_host_file_settings_are_not_shared() {
        assert!(is_shared("cap"));
        assert!(is_shared("max_queue"));
        assert!(is_shared("abuse_strikes"));
        assert!(!is_shared("listen"));
        assert!(!is_shared("cluster"));
        assert!(!is_shared("html"));
        assert!(!is_shared("tls_cert"));
        assert!(!is_shared("no_such_setting"));
    }
}
