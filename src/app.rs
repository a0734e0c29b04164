//! The assembled state of a running Concert.
//!
//! [`App`] is shared by every connection: the current [`Generation`] of settings-derived parts
//! (swapped whole on a live change) and the long-lived components (room, abuse registry,
//! counters) that are reconfigured in place.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use arc_swap::ArcSwap;

use crate::abuse;
use crate::admission::cookies::CookieAttrs;
use crate::admission::{assets, pass, priority, streams};
use crate::config::Config;
use crate::history::History;
use crate::paths::matchers::{PathSet, RouteTable};
use crate::proxy::{self, FailureCounts, Proxy, ProxySettings};
use crate::room::page::WaitingPage;
use crate::room::{self, Room, RoomSettings};
use crate::store;
use crate::sys::workers::WorkerLoad;

/// Everything derived from one immutable settings snapshot. A request binds to one generation for
/// its whole life; a live change builds a new one and swaps it in atomically.
pub struct Generation {
    pub config: Arc<Config>,
    pub routes: RouteTable,
    /// Page paths whose request bodies stream to the origin instead of being taken in first.
    pub(crate) unbuffered_uploads: PathSet,
    pub proxy: Arc<Proxy>,
    pub page: Arc<WaitingPage>,
    pub cookies: CookieAttrs,
    /// Token lifetime in whole seconds, the `Max-Age` of the room cookies.
    pub ticket_max_age: u64,
    /// Asset tier: per-pass pools (replaced when their caps or the pass TTL change) and the
    /// global pool (shared across generations, resized in place).
    pub assets: assets::AssetTier,
    /// Stream slots (shared across generations, resized in place).
    pub streams: streams::StreamGuard,
    /// The ranked priority lane (shared across generations, resized in place).
    pub lane: Arc<priority::Lane>,
    /// A path list routes `-metrics-path` or its trailing-slash form, so neither answers metrics.
    pub metrics_path_routed: bool,
    /// `Strict-Transport-Security` for answers over TLS (`-hsts`), rendered once.
    pub hsts: Option<http::HeaderValue>,
}

/// Why a generation could not be built from a configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0}")]
    Config(String),
    #[error("cannot read -html page {path}: {source}")]
    Html {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot build the proxy for -upstream: {0}")]
    Proxy(String),
    #[error("cannot prepare the directory request bodies are buffered in: {0}")]
    Spool(std::io::Error),
    #[error("{0}")]
    Tls(String),
    /// `fastlane.json`, `networks.json`, a secret the lane needs, or its journals.
    #[error("{0}")]
    FastLane(String),
}

impl Generation {
    /// Builds every settings-derived part. `previous` lets unchanged parts be reused (the proxy
    /// keeps its pooled upstream connections when its inputs did not change).
    pub fn build(
        config: Arc<Config>,
        previous: Option<&Generation>,
        failures: &Arc<FailureCounts>,
    ) -> Result<Self, BuildError> {
        let routes = RouteTable::build(
            &config.bypass,
            &config.assets,
            &config.asset_public,
            &config.stream_paths,
        )
        .map_err(BuildError::Config)?;
        let metrics_path_routed = config.metrics_path.as_deref().is_some_and(|path| {
            routes.classify(path).is_some() || routes.classify(&format!("{path}/")).is_some()
        });
        let unbuffered_uploads = PathSet::new(&config.unbuffered_upload_paths);
        let proxy = match previous {
            Some(prev) if same_proxy_inputs(&prev.config, &config) => prev.proxy.clone(),
            _ => Arc::new(
                Proxy::new(proxy_settings(&config, failures)?)
                    .map_err(|e| BuildError::Proxy(e.to_string()))?,
            ),
        };
        let page = match previous {
            Some(prev) if same_page_inputs(&prev.config, &config) => prev.page.clone(),
            _ => Arc::new(load_page(&config)?),
        };
        let cookies = CookieAttrs::new(
            &config.cookie_path,
            &config.cookie_domain,
            config.secure_cookie,
        );
        let ticket_max_age = config.effective_token_ttl().as_secs();
        let hsts = match config.hsts.as_secs() {
            0 => None,
            secs => http::HeaderValue::from_str(&format!("max-age={secs}")).ok(),
        };
        // Built last: these share pools with `previous` and resize them, so nothing may fail
        // after this point.
        let assets =
            assets::AssetTier::build(asset_settings(&config), previous.map(|prev| &prev.assets));
        let streams =
            streams::StreamGuard::build(config.stream_cap, previous.map(|prev| &prev.streams));
        let lane_cap = config.effective_priority_cap();
        let lane = match previous {
            Some(prev) => {
                if prev.lane.cap() != lane_cap as usize {
                    prev.lane.resize(lane_cap);
                }
                prev.lane.clone()
            }
            None => priority::Lane::new(lane_cap),
        };
        Ok(Generation {
            config,
            routes,
            unbuffered_uploads,
            proxy,
            page,
            cookies,
            ticket_max_age,
            assets,
            streams,
            lane,
            metrics_path_routed,
            hsts,
        })
    }

    /// The room's view of these settings.
    pub fn room_settings(&self) -> RoomSettings {
        room_settings(&self.config)
    }
}

fn asset_settings(config: &Config) -> assets::AssetSettings {
    assets::AssetSettings {
        user_cap_h1: config.asset_user_cap_h1,
        user_cap_h2: config.asset_user_cap_h2,
        user_wait: config.asset_user_wait,
        global_cap: config.effective_asset_cap(),
        global_wait: config.asset_wait,
        admit_ttl: config.admit_ttl,
        client_proto_header: config.client_proto_header.clone(),
    }
}

fn same_proxy_inputs(a: &Config, b: &Config) -> bool {
    a.upstream == b.upstream
        && a.preserve_host == b.preserve_host
        && a.upstream_timeout == b.upstream_timeout
        && a.upload_min_rate == b.upload_min_rate
}

fn proxy_settings(
    config: &Config,
    failures: &Arc<FailureCounts>,
) -> Result<ProxySettings, BuildError> {
    let upstream = config
        .upstream_uri()
        .map_err(|e| BuildError::Config(format!("invalid -upstream {:?}: {e}", config.upstream)))?;
    Ok(ProxySettings {
        upstream,
        preserve_host: config.preserve_host,
        upstream_timeout: config.upstream_timeout,
        upload_min_rate: config.upload_min_rate,
        failures: Arc::clone(failures),
    })
}

/// The built-in page tells visitors without JavaScript how often to reload, which follows the
/// grace and the token lifetime; an operator's page depends on its file alone.
fn same_page_inputs(a: &Config, b: &Config) -> bool {
    a.html == b.html
        && (!a.html.trim().is_empty()
            || (a.first_poll_grace == b.first_poll_grace
                && a.ready_grace == b.ready_grace
                && a.effective_token_ttl() == b.effective_token_ttl()))
}

fn load_page(config: &Config) -> Result<WaitingPage, BuildError> {
    let path = config.html.as_str();
    if path.trim().is_empty() {
        return Ok(WaitingPage::builtin_for(
            config.first_poll_grace,
            config.ready_grace,
            config.effective_token_ttl(),
        ));
    }
    WaitingPage::from_file(std::path::Path::new(path)).map_err(|source| BuildError::Html {
        path: path.to_string(),
        source,
    })
}

/// The room's settings derived from a configuration.
pub(crate) fn room_settings(config: &Config) -> RoomSettings {
    RoomSettings {
        cap: config.cap,
        max_queue: config.max_queue,
        max_per_address: config.max_queue_per_ip,
        token_ttl: config.effective_token_ttl(),
        first_poll_grace: config.first_poll_grace,
        ready_grace: config.ready_grace,
        reaper: config.effective_reaper(),
        retry_after_secs: config.effective_retry_after(),
        pricing: room::Pricing::new(config.rate, config.surge),
    }
}

/// Process-wide counters that are not owned by a component.
#[derive(Default)]
pub struct Counters {
    /// Requests Concert refused as malformed before routing.
    pub bad_requests_total: AtomicU64,
    /// Requests that reached the origin.
    pub proxied_total: AtomicU64,
}

/// The assembled, shared state of a running Concert.
pub struct App {
    generation: ArcSwap<Generation>,
    pub room: Arc<Room>,
    pub counters: Counters,
    /// The main listener's requests by latency and status, and those in flight (the Monitor's).
    pub(crate) traffic: crate::pipeline::Traffic,
    /// Failed exchanges with the origin, by whose fault (every proxy generation counts here).
    pub upstream_failures: Arc<FailureCounts>,
    /// Strikes, bans and range bans (process-wide; reconfigured on live changes).
    pub abuse: Arc<abuse::Registry>,
    /// What each client asked for and which bans it met (kept with or without a portal).
    pub history: Arc<History>,
    /// Signs and verifies admission passes and priority grants (secrets fixed for the process).
    pub pass: pass::PassSigner,
    /// Priority counters and grant handling.
    pub priority: priority::Priority,
    /// Serialises live changes so two of them never interleave build and swap.
    change_lock: parking_lot::Mutex<()>,
    /// The configuration before settings.json was applied: what "reset" restores.
    baseline: Arc<Config>,
    /// The locked data directory, when persistence is on.
    pub data_dir: Option<Arc<store::DataDir>>,
    /// Where page bodies too large for memory wait for their slot.
    pub(crate) spool: Arc<store::SpoolDir>,
    /// Concert's own HTTPS: whether the public listener speaks TLS, its certificates, and the
    /// ACME engine's challenge answers.
    pub tls: Arc<crate::tls::Tls>,
    /// Open client connections per serving worker, once serving has started.
    connections: std::sync::OnceLock<Arc<WorkerLoad>>,
    /// The stop as long-lived answers see it: event streams end and WebSockets close when the
    /// drain starts, instead of holding the stop for its whole grace period.
    pub drain: proxy::Drain,
    /// The fast lane, when `fastlane.json` configures one: built at start-up, swapped whole
    /// when the portal saves new files.
    pub fastlane: crate::fastlane::live::LiveLane,
    /// The instances sharing this one's cap, line and bans (`-cluster`), when set.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

/// A refused live change, with the status the API answers.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The change itself is wrong (400); nothing was applied or written.
    #[error("{0}")]
    Invalid(String),
    /// Values refused one by one, each under its key (400), so a form can show every problem
    /// beside its field; nothing was applied or written.
    #[error("{}", Problem::joined(.0))]
    Refused(Vec<Problem>),
    /// The change is valid but could not be saved (500); nothing was applied.
    #[error("the change was not applied because it could not be saved: {0}")]
    Persist(String),
}

/// One refused value of a live change: the settings key and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

impl Problem {
    /// Every message, as one line.
    pub fn joined(problems: &[Problem]) -> String {
        problems
            .iter()
            .map(|problem| problem.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The settings key a whole-config message names first (as `config` names it: its flag, env
/// variable or settings.json key), so a form can show the message beside that field; empty
/// when it names none.
fn key_named_first(config: &Config, message: &str) -> &'static str {
    crate::config::SETTINGS
        .iter()
        .filter_map(|def| word_at(message, config.name_of(def.key)).map(|at| (at, def.key)))
        .min_by_key(|(at, _)| *at)
        .map_or("", |(_, key)| key)
}

/// Where `name` first stands on its own in `text`: not part of a longer flag or key.
fn word_at(text: &str, name: &str) -> Option<usize> {
    let part_of_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    text.match_indices(name).map(|(at, _)| at).find(|&at| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(part_of_name) && !after.is_some_and(part_of_name)
    })
}

impl App {
    /// Validates nothing: `config` must already have passed [`Config::validate`].
    pub fn new(config: Config) -> Result<Arc<App>, BuildError> {
        let baseline = config.clone();
        App::with_data_dir(config, baseline, None)
    }

    /// As [`App::new`], with the pre-file `baseline` and the data directory live changes are
    /// saved to.
    pub fn with_data_dir(
        config: Config,
        baseline: Config,
        data_dir: Option<Arc<store::DataDir>>,
    ) -> Result<Arc<App>, BuildError> {
        let upstream_failures = Arc::new(FailureCounts::default());
        let generation = Generation::build(Arc::new(config), None, &upstream_failures)?;
        let config = &generation.config;
        // `validate` always fills the secret; an unvalidated config still gets a random one.
        let secret = config
            .admit_secret
            .clone()
            .unwrap_or_else(|| rand::random::<[u8; 32]>().to_vec());
        let previous = config.admit_secret_previous.as_deref();
        let pass = pass::PassSigner::new(&secret, previous);
        let room = Room::sealed(
            generation.room_settings(),
            room::TicketSeal::from_secret(&secret, previous),
        );
        let abuse = Arc::new(abuse::Registry::new(abuse::AbuseSettings::from_config(
            config,
        )));
        let history = Arc::new(History::new(abuse.clone()));
        wire_abuse(&abuse, &room, &history);
        let spool = match &data_dir {
            Some(dir) => store::SpoolDir::in_data_dir(dir.path()),
            None => Ok(store::SpoolDir::in_system_temp()),
        }
        .map_err(BuildError::Spool)?;
        let tls = crate::tls::Tls::new().map_err(|e| BuildError::Tls(e.to_string()))?;
        let cluster = crate::cluster::ClusterOptions::from_config(config)
            .map(crate::cluster::Cluster::new)
            .transpose()
            .map_err(|e| BuildError::Config(e.to_string()))?;
        Ok(Arc::new(App {
            generation: ArcSwap::from_pointee(generation),
            room,
            counters: Counters::default(),
            traffic: crate::pipeline::Traffic::default(),
            upstream_failures,
            abuse,
            history,
            pass,
            priority: priority::Priority::new(),
            change_lock: parking_lot::Mutex::new(()),
            connections: std::sync::OnceLock::new(),
            drain: proxy::Drain::default(),
            baseline: Arc::new(baseline),
            data_dir,
            spool: Arc::new(spool),
            tls: Arc::new(tls),
            fastlane: crate::fastlane::live::LiveLane::default(),
            cluster,
        }))
    }

    /// The directory page bodies too large for memory are buffered in (their files have no
    /// name, so it always looks empty); made now if it is a temp one not yet needed.
    pub fn upload_spool_dir(&self) -> std::io::Result<&std::path::Path> {
        self.spool.path()
    }

    /// Bytes of page uploads buffered on disk now.
    pub fn upload_spool_in_use(&self) -> u64 {
        self.spool.in_use()
    }

    /// Open client connections per serving worker (empty before serving starts).
    pub fn open_connections(&self) -> Vec<usize> {
        self.connections
            .get()
            .map(|load| load.counts())
            .unwrap_or_default()
    }

    /// The per-worker connection counts for `workers` workers; the first call decides.
    pub(crate) fn worker_load(&self, workers: usize) -> Arc<WorkerLoad> {
        self.connections
            .get_or_init(|| Arc::new(WorkerLoad::new(workers)))
            .clone()
    }

    /// The fast lane when one is configured and switched on. A swap replaces it whole, so a
    /// request reads it once and keeps what it got.
    pub fn fast_lane(&self) -> Option<Arc<crate::fastlane::service::FastLane>> {
        self.fastlane
            .current()
            .filter(|lane| lane.settings().enabled)
    }

    /// The current generation; the caller keeps it for the whole request.
    pub fn generation(&self) -> Arc<Generation> {
        self.generation.load_full()
    }

    /// Applies a live settings change: edit a copy, validate it whole, build a new generation,
    /// save settings.json (with a data dir), swap it in, then reconfigure the long-lived parts.
    /// All or nothing: a change that cannot be saved is not applied.
    pub fn change_settings(
        &self,
        edit: impl FnOnce(&mut Config, &Config) -> Result<(), String>,
    ) -> Result<Arc<Generation>, ChangeError> {
        self.change_settings_inner(
            |config, baseline| edit(config, baseline).map_err(ChangeError::Invalid),
            true,
            true,
        )
    }

    /// Sets `changes` (settings-file keys and JSON values, checked one by one) and resets `resets`
    /// to their pre-file values, as the settings API does. Problems are reported together.
    pub fn apply_change(
        &self,
        changes: &serde_json::Map<String, serde_json::Value>,
        resets: &[String],
    ) -> Result<Arc<Generation>, ChangeError> {
        self.apply_change_guarded(changes, resets, |_| Ok(()))
    }

    /// As [`App::apply_change`], with `guard` judging the edited settings as well; its problem
    /// is reported with the others. A caller's own rule runs under the same lock as the change,
    /// so it judges exactly what would be applied.
    pub fn apply_change_guarded(
        &self,
        changes: &serde_json::Map<String, serde_json::Value>,
        resets: &[String],
        guard: impl FnOnce(&Config) -> Result<(), Problem>,
    ) -> Result<Arc<Generation>, ChangeError> {
        self.apply_change_shared(changes, resets, guard, true)
    }

    /// Applies values another instance of the cluster changed, as [`App::apply_change`] does,
    /// without sharing them again.
    pub(crate) fn apply_shared_change(
        &self,
        changes: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Arc<Generation>, ChangeError> {
        self.apply_change_shared(changes, &[], |_| Ok(()), false)
    }

    fn apply_change_shared(
        &self,
        changes: &serde_json::Map<String, serde_json::Value>,
        resets: &[String],
        guard: impl FnOnce(&Config) -> Result<(), Problem>,
        share: bool,
    ) -> Result<Arc<Generation>, ChangeError> {
        if changes.is_empty() && resets.is_empty() {
            return Err(ChangeError::Invalid("nothing to change".into()));
        }
        self.change_settings_inner(
            |config, baseline| {
                let mut problems = Vec::new();
                let mut keys: Vec<&String> = changes.keys().collect();
                keys.sort();
                for key in keys {
                    if let Err(message) = config.set_json(key, &changes[key]) {
                        problems.push(Problem {
                            key: key.clone(),
                            message,
                        });
                    }
                }
                for key in resets {
                    if let Err(message) = config.reset_from(key, baseline) {
                        problems.push(Problem {
                            key: key.clone(),
                            message,
                        });
                    }
                }
                if let Err(problem) = guard(config) {
                    problems.push(problem);
                }
                if problems.is_empty() {
                    Ok(())
                } else {
                    Err(ChangeError::Refused(problems))
                }
            },
            true,
            share,
        )
    }

    /// Re-reads settings.json (SIGHUP): the file's values on top of the pre-file baseline. An
    /// unreadable or invalid file changes nothing and says why.
    pub fn reload_settings_file(&self) -> Result<Arc<Generation>, ChangeError> {
        let Some(dir) = self.data_dir.clone() else {
            return Err(ChangeError::Invalid(
                "no data dir, so there is no settings.json to reload".into(),
            ));
        };
        self.change_settings_inner(
            |config, baseline| {
                let mut fresh = baseline.clone();
                store::apply_settings_file(&dir, &mut fresh)
                    .map_err(|e| ChangeError::Invalid(e.to_string()))?;
                *config = fresh;
                Ok(())
            },
            false,
            true,
        )
    }

    fn change_settings_inner(
        &self,
        edit: impl FnOnce(&mut Config, &Config) -> Result<(), ChangeError>,
        save: bool,
        share: bool,
    ) -> Result<Arc<Generation>, ChangeError> {
        let _serial = self.change_lock.lock();
        let current = self.generation.load_full();
        let mut next = Config::clone(&current.config);
        let edited = edit(&mut next, &self.baseline);
        // The whole config is judged even when values were refused one by one (those keep
        // their current values), so one answer lists every problem.
        let whole = match &edited {
            Ok(()) | Err(ChangeError::Refused(_)) => next.problems(),
            Err(_) => Vec::new(),
        };
        match edited {
            Err(ChangeError::Refused(mut problems)) => {
                problems.extend(whole.into_iter().map(|message| Problem {
                    key: key_named_first(&next, &message).to_owned(),
                    message,
                }));
                return Err(ChangeError::Refused(problems));
            }
            Err(other) => return Err(other),
            Ok(()) if !whole.is_empty() => return Err(ChangeError::Invalid(whole.join("; "))),
            Ok(()) => {}
        }
        let generation = Generation::build(Arc::new(next), Some(&current), &self.upstream_failures)
            .map_err(|e| ChangeError::Invalid(format!("settings are unusable: {e}")))?;
        let tls = self
            .tls
            .prepare(&generation.config)
            .map_err(|e| ChangeError::Invalid(format!("HTTPS cannot be served as set: {e}")))?;
        if save && let Some(dir) = &self.data_dir {
            store::save_settings(dir, &generation.config)
                .map_err(|e| ChangeError::Persist(e.to_string()))?;
        }
        let generation = Arc::new(generation);
        self.generation.store(generation.clone());
        self.tls.apply(tls);
        self.room.reconfigure(generation.room_settings());
        self.abuse
            .reconfigure(abuse::AbuseSettings::from_config(&generation.config));
        if let Some(lane) = self.fastlane.current() {
            lane.set_entry_ttl(generation.config.fastlane_entry_ttl);
        }
        // Other instances of a cluster take the change too (not one they sent us).
        if share && let Some(cluster) = &self.cluster {
            cluster
                .settings
                .on_local_change(&current.config, &generation.config);
        }
        Ok(generation)
    }

    /// Writes bans.json now (admin actions answer only once their ban is on disk).
    pub fn flush_bans(&self) -> Result<(), store::PersistError> {
        match &self.data_dir {
            Some(dir) => store::save_bans(dir, &self.abuse),
            None => Ok(()),
        }
    }

    /// Charges strikes against a client in the abuse registry (a no-op for exempt or unknown
    /// clients and while abuse handling is off). Enough strikes within the window ban it.
    pub fn strike(&self, client: Option<std::net::IpAddr>, offense: abuse::Offense) {
        let Some(ip) = client else { return };
        let weight = offense.weight();
        let banned = self.abuse.strike(ip, weight);
        tracing::debug!(client = %ip, weight, reason = offense.reason(), banned, "strike");
    }
}

/// Connects the registry and the room both ways: a visitor queued without a `room_ticket` the
/// room issued costs a strike (ticket churn), addresses the registry never bans are not held to
/// the per-address ticket bound, and a ban removes the client's waiting visitors at once, then
/// opens or updates its window in the history. Each is held weakly so the parts do not keep
/// each other alive.
fn wire_abuse(abuse: &Arc<abuse::Registry>, room: &Arc<Room>, history: &Arc<History>) {
    let windows = Arc::downgrade(history);
    abuse.set_ban_hook(Arc::new(move |notice: &abuse::BanNotice| {
        if let Some(history) = windows.upgrade() {
            history.on_ban(notice);
        }
    }));
    let line = Arc::downgrade(room);
    abuse.set_line_remover(Arc::new(
        move |banned: &dyn Fn(std::net::IpAddr) -> bool| {
            line.upgrade().map_or(0, |room| room.remove_clients(banned))
        },
    ));
    let registry = Arc::downgrade(abuse);
    room.set_address_exemption(Arc::new({
        let registry = registry.clone();
        move |client| registry.upgrade().is_some_and(|r| r.is_exempt(client))
    }));
    room.set_queue_hook(Arc::new(move |event: &room::QueueEvent| {
        if event.stale_ticket {
            return;
        }
        if let (Some(client), Some(registry)) = (event.client, registry.upgrade()) {
            registry.strike(client, abuse::Offense::TicketChurn.weight());
        }
    }));
}
