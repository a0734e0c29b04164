//! Concert: a FIFO waiting-room reverse proxy.
//!
//! The library holds everything; `main.rs` only parses the configuration and calls [`run`].
//! [`App`] is the assembled state shared by every connection: the current [`Generation`] of
//! settings-derived parts (swapped whole on a live change) and the long-lived components (room,
//! counters) that are reconfigured in place.

pub mod abuse;
pub mod allocator;
pub mod assets;
pub mod client;
pub mod coarse_clock;
pub mod config;
pub mod cookies;
pub mod core_turns;
pub mod demo;
mod framing;
mod idle_deadline;
mod io_wrap;
pub mod logging;
mod moving_timer;
pub mod ops;
pub mod pass;
pub mod persist;
pub mod priority;
pub mod proxy;
pub mod rejection;
pub mod room;
pub mod router;
pub mod sema;
pub mod server;
mod shard;
mod stream_send_limit;
pub mod streams;
pub mod systemd;
pub mod walltime;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use arc_swap::ArcSwap;

use config::Config;
use config::paths::RouteTable;
use cookies::CookieAttrs;
use proxy::{Proxy, ProxySettings};
use room::page::WaitingPage;
use room::{Room, RoomSettings};

/// The build's version, printed by `-version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything derived from one immutable settings snapshot. A request binds to one generation for
/// its whole life; a live change builds a new one and swaps it in atomically.
pub struct Generation {
    pub config: Arc<Config>,
    pub routes: RouteTable,
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
}

impl Generation {
    /// Builds every settings-derived part. `previous` lets unchanged parts be reused (the proxy
    /// keeps its pooled upstream connections when its inputs did not change).
    pub fn build(config: Arc<Config>, previous: Option<&Generation>) -> Result<Self, BuildError> {
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
        let proxy = match previous {
            Some(prev) if same_proxy_inputs(&prev.config, &config) => prev.proxy.clone(),
            _ => Arc::new(
                Proxy::new(proxy_settings(&config)?)
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
            proxy,
            page,
            cookies,
            ticket_max_age,
            assets,
            streams,
            lane,
            metrics_path_routed,
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

fn proxy_settings(config: &Config) -> Result<ProxySettings, BuildError> {
    let upstream = config
        .upstream_uri()
        .map_err(|e| BuildError::Config(format!("invalid -upstream {:?}: {e}", config.upstream)))?;
    Ok(ProxySettings {
        upstream,
        preserve_host: config.preserve_host,
        upstream_timeout: config.upstream_timeout,
        upload_min_rate: config.upload_min_rate,
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
pub fn room_settings(config: &Config) -> RoomSettings {
    RoomSettings {
        cap: config.cap,
        max_queue: config.max_queue,
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
    /// Strikes, bans and range bans (process-wide; reconfigured on live changes).
    pub abuse: Arc<abuse::Registry>,
    /// Signs and verifies admission passes and priority grants (secrets fixed for the process).
    pub pass: pass::PassSigner,
    /// Priority counters and grant handling.
    pub priority: priority::Priority,
    /// Serialises live changes so two of them never interleave build and swap.
    change_lock: parking_lot::Mutex<()>,
    /// The configuration before settings.json was applied: what "reset" restores.
    baseline: Arc<Config>,
    /// The locked data directory, when persistence is on.
    pub data_dir: Option<Arc<persist::DataDir>>,
    /// Open client connections per serving worker, once serving has started.
    connections: std::sync::OnceLock<Arc<server::WorkerLoad>>,
    /// The stop as long-lived answers see it: event streams end and WebSockets close when the
    /// drain starts, instead of holding the stop for its whole grace period.
    pub drain: proxy::Drain,
}

/// A refused live change, with the status the API answers.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The change itself is wrong (400); nothing was applied or written.
    #[error("{0}")]
    Invalid(String),
    /// The change is valid but could not be saved (500); nothing was applied.
    #[error("the change was not applied because it could not be saved: {0}")]
    Persist(String),
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
        data_dir: Option<Arc<persist::DataDir>>,
    ) -> Result<Arc<App>, BuildError> {
        let generation = Generation::build(Arc::new(config), None)?;
        let room = Room::new(generation.room_settings());
        let config = &generation.config;
        // `validate` always fills the secret; an unvalidated config still gets a random one.
        let secret = config
            .admit_secret
            .clone()
            .unwrap_or_else(|| rand::random::<[u8; 32]>().to_vec());
        let pass = pass::PassSigner::new(&secret, config.admit_secret_previous.as_deref());
        let abuse = Arc::new(abuse::Registry::new(abuse::AbuseSettings::from_config(
            config,
        )));
        wire_abuse(&abuse, &room);
        Ok(Arc::new(App {
            generation: ArcSwap::from_pointee(generation),
            room,
            counters: Counters::default(),
            abuse,
            pass,
            priority: priority::Priority::new(),
            change_lock: parking_lot::Mutex::new(()),
            connections: std::sync::OnceLock::new(),
            drain: proxy::Drain::default(),
            baseline: Arc::new(baseline),
            data_dir,
        }))
    }

    /// Open client connections per serving worker (empty before serving starts).
    pub fn open_connections(&self) -> Vec<usize> {
        self.connections
            .get()
            .map(|load| load.counts())
            .unwrap_or_default()
    }

    /// The per-worker connection counts for `workers` workers; the first call decides.
    pub(crate) fn worker_load(&self, workers: usize) -> Arc<server::WorkerLoad> {
        self.connections
            .get_or_init(|| Arc::new(server::WorkerLoad::new(workers)))
            .clone()
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
        self.change_settings_inner(edit, true)
    }

    /// Sets `changes` (settings-file keys and JSON values, checked one by one) and resets `resets`
    /// to their pre-file values, as the settings API does. Problems are reported together.
    pub fn apply_change(
        &self,
        changes: &serde_json::Map<String, serde_json::Value>,
        resets: &[String],
    ) -> Result<Arc<Generation>, ChangeError> {
        if changes.is_empty() && resets.is_empty() {
            return Err(ChangeError::Invalid("nothing to change".into()));
        }
        self.change_settings(|config, baseline| {
            let mut problems = Vec::new();
            let mut keys: Vec<&String> = changes.keys().collect();
            keys.sort();
            for key in keys {
                if let Err(problem) = config.set_json(key, &changes[key]) {
                    problems.push(problem);
                }
            }
            for key in resets {
                if let Err(problem) = config.reset_from(key, baseline) {
                    problems.push(problem);
                }
            }
            if problems.is_empty() {
                Ok(())
            } else {
                Err(problems.join("; "))
            }
        })
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
                persist::apply_settings_file(&dir, &mut fresh).map_err(|e| e.to_string())?;
                *config = fresh;
                Ok(())
            },
            false,
        )
    }

    fn change_settings_inner(
        &self,
        edit: impl FnOnce(&mut Config, &Config) -> Result<(), String>,
        save: bool,
    ) -> Result<Arc<Generation>, ChangeError> {
        let _serial = self.change_lock.lock();
        let current = self.generation.load_full();
        let mut next = Config::clone(&current.config);
        edit(&mut next, &self.baseline).map_err(ChangeError::Invalid)?;
        next.validate()
            .map_err(|e| ChangeError::Invalid(e.to_string()))?;
        let generation = Generation::build(Arc::new(next), Some(&current))
            .map_err(|e| ChangeError::Invalid(format!("settings are unusable: {e}")))?;
        if save && let Some(dir) = &self.data_dir {
            persist::save_settings(dir, &generation.config)
                .map_err(|e| ChangeError::Persist(e.to_string()))?;
        }
        let generation = Arc::new(generation);
        self.generation.store(generation.clone());
        self.room.reconfigure(generation.room_settings());
        self.abuse
            .reconfigure(abuse::AbuseSettings::from_config(&generation.config));
        Ok(generation)
    }

    /// Writes bans.json now (admin actions answer only once their ban is on disk).
    pub fn flush_bans(&self) -> Result<(), persist::PersistError> {
        match &self.data_dir {
            Some(dir) => persist::save_bans(dir, &self.abuse),
            None => Ok(()),
        }
    }

    /// Charges strikes against a client in the abuse registry (a no-op for exempt or unknown
    /// clients and while abuse handling is off). Enough strikes within the window ban it.
    pub fn strike(&self, client: Option<std::net::IpAddr>, weight: u32, reason: &'static str) {
        let Some(ip) = client else { return };
        let banned = self.abuse.strike(ip, weight);
        tracing::debug!(client = %ip, weight, reason, banned, "strike");
    }
}

/// Connects the registry and the room both ways: a visitor queued without any `room_ticket`
/// costs a strike (ticket churn), and a ban removes the client's waiting visitors at once. The
/// room is held weakly so the two do not keep each other alive.
fn wire_abuse(abuse: &Arc<abuse::Registry>, room: &Arc<Room>) {
    let line = Arc::downgrade(room);
    abuse.set_line_remover(Arc::new(
        move |banned: &dyn Fn(std::net::IpAddr) -> bool| {
            line.upgrade().map_or(0, |room| room.remove_clients(banned))
        },
    ));
    let registry = Arc::downgrade(abuse);
    room.set_queue_hook(Arc::new(move |event: &room::QueueEvent| {
        if event.stale_ticket {
            return;
        }
        if let (Some(client), Some(registry)) = (event.client, registry.upgrade()) {
            registry.strike(client, abuse::CHURN_STRIKE);
        }
    }));
}

/// A running Concert: its bound address and the handle that stops it.
pub struct Running {
    pub addr: SocketAddr,
    pub app: Arc<App>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), server::ServeError>>,
}

impl Running {
    /// Asks the server to drain and stop, and waits until it has.
    pub async fn shutdown(self) -> Result<(), server::ServeError> {
        let _ = self.stop.send(true);
        match self.task.await {
            Ok(result) => result,
            Err(join) => Err(server::ServeError::Task(join.to_string())),
        }
    }

    /// Waits for the server to end by itself (listener failure) or after [`Running::shutdown`].
    pub async fn wait(&mut self) -> Result<(), server::ServeError> {
        match (&mut self.task).await {
            Ok(result) => result,
            Err(join) => Err(server::ServeError::Task(join.to_string())),
        }
    }

    /// A sender that triggers the same drain as [`Running::shutdown`] (for signal handlers).
    pub fn stopper(&self) -> tokio::sync::watch::Sender<bool> {
        self.stop.clone()
    }
}

/// How long in-flight requests get to finish on shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Opens the data dir (when configured) and applies settings.json, validates the whole
/// configuration, builds the app, restores bans and the line, binds `-listen` (or uses
/// `listener`), and serves in the background. On stop it saves bans and the line.
pub async fn start(
    config: Config,
    listener: Option<tokio::net::TcpListener>,
) -> Result<Running, StartError> {
    start_on_workers(config, listener, 1).await
}

/// As [`start`], serving on `workers` threads (see [`server::serve_workers`]); the calling
/// runtime is the first of them and also runs the background tasks.
pub async fn start_on_workers(
    mut config: Config,
    listener: Option<tokio::net::TcpListener>,
    workers: usize,
) -> Result<Running, StartError> {
    let baseline = config.clone();
    let data_dir = open_data_dir(&mut config)?;
    config.validate().map_err(|e| {
        let message = e.to_string();
        // Point at settings.json only when a setting the message names came from it.
        let from_file = config::table::SETTINGS.iter().any(|d| {
            config.source(d.key) == config::Source::File
                && (message.contains(d.flag) || message.contains(d.key))
        });
        let hint = match &data_dir {
            Some(dir) if from_file => format!(
                " (with values from {})",
                dir.file(persist::SETTINGS_FILE).display()
            ),
            _ => String::new(),
        };
        StartError::Build(BuildError::Config(format!("{message}{hint}")))
    })?;
    refuse_unavailable_parts(&config)?;
    let listener = match listener {
        Some(listener) => listener,
        None => server::bind(&config.listen)
            .await
            .map_err(StartError::Serve)?,
    };
    let addr = listener.local_addr().map_err(|e| {
        StartError::Serve(server::ServeError::Listen {
            addr: config.listen.clone(),
            source: e,
        })
    })?;
    let app = App::with_data_dir(config, baseline, data_dir.clone()).map_err(StartError::Build)?;
    warn_if_metrics_path_is_routed(&app.generation());
    let mut background = Vec::new();
    let mut writers = Vec::new();
    let stop_writers = tokio_util::sync::CancellationToken::new();
    if let Some(dir) = &data_dir {
        let report = persist::load_bans(dir, &app.abuse).map_err(StartError::Persist)?;
        // Skipped entries are reported even when nothing was kept: the file is rewritten without
        // them, so this line is the only trace of what was dropped.
        if report.clients + report.ranges + report.skipped > 0 || report.dropped > 0 {
            tracing::info!(
                clients = report.clients,
                ranges = report.ranges,
                skipped = report.skipped,
                dropped = report.dropped,
                "bans restored"
            );
        }
        let restored = persist::restore_queue(dir, &app.room).map_err(StartError::Persist)?;
        if restored > 0 {
            tracing::info!(tickets = restored, "waiting line restored");
        }
        writers.push(persist::spawn_ban_writer(
            dir.clone(),
            app.abuse.clone(),
            stop_writers.clone(),
        ));
        writers.push(persist::spawn_queue_snapshots(
            dir.clone(),
            app.room.clone(),
            QUEUE_SNAPSHOT_EVERY,
            stop_writers.clone(),
        ));
    }
    // Only now, with the listener bound and saved state loaded, is the start a success.
    log_summary(&app.generation().config, data_dir.as_deref());
    warn_unavailable_parts(&app.generation().config);
    if app.generation().config.admit_secret_generated {
        tracing::warn!(
            "CONCERT_ADMIT_SECRET is not set: using a random secret, so passes reset on restart and are not shared between instances"
        );
    }
    background.push(app.room.spawn_reaper());
    background.push(app.abuse.spawn_janitor());
    background.push({
        let app = Arc::downgrade(&app);
        assets::spawn_sweeper(move || {
            app.upgrade()
                .map(|app| app.generation().assets.pools().clone())
        })
    });
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let serving = app.clone();
    let task = tokio::spawn(async move {
        let result = server::serve_workers(
            listener,
            serving.clone(),
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
            workers,
        )
        .await;
        // Writers finish the save they are in; the rest hold no files and are cut short. Both
        // are awaited, so nothing holding the data directory outlives the stop.
        stop_writers.cancel();
        for task in writers {
            let _ = task.await;
        }
        for task in &background {
            task.abort();
        }
        for task in background {
            let _ = task.await;
        }
        save_on_stop(&serving).await;
        result
    });
    Ok(Running {
        addr,
        app,
        stop,
        task,
    })
}

/// How often the waiting line is snapshotted while it changes (crash safety).
pub const QUEUE_SNAPSHOT_EVERY: Duration = Duration::from_secs(5);

fn open_data_dir(config: &mut Config) -> Result<Option<Arc<persist::DataDir>>, StartError> {
    if config.data_dir.trim().is_empty() {
        return Ok(None);
    }
    let dir = persist::DataDir::open(std::path::Path::new(&config.data_dir))
        .map_err(StartError::Persist)?;
    let applied = persist::apply_settings_file(&dir, config).map_err(StartError::Persist)?;
    if applied > 0 {
        tracing::info!(
            values = applied,
            file = %dir.file(persist::SETTINGS_FILE).display(),
            "settings.json overrides applied"
        );
    }
    Ok(Some(Arc::new(dir)))
}

/// After the listeners drained: bans flushed once more, the line saved for the next start.
async fn save_on_stop(app: &Arc<App>) {
    let Some(dir) = app.data_dir.clone() else {
        return;
    };
    let saving = app.clone();
    let saved = tokio::task::spawn_blocking(move || {
        if let Err(e) = persist::save_bans(&dir, &saving.abuse) {
            tracing::error!("cannot save bans at shutdown: {e}");
        }
        if saving.room.stats().live_queue_depth == 0 {
            return persist::clear_queue(&dir);
        }
        persist::save_queue(&dir, &saving.room)
    })
    .await;
    match saved {
        Ok(Ok(0)) => {}
        Ok(Ok(count)) => {
            let ttl = app.generation().config.effective_token_ttl();
            tracing::info!(
                tickets = count,
                "waiting line saved; restart within {} to keep it",
                config::duration::format_go_duration(ttl * 2 / 3)
            );
        }
        Ok(Err(e)) => tracing::error!("cannot save the waiting line: {e}"),
        Err(e) => tracing::error!("saving at shutdown failed: {e}"),
    }
}

/// [`run`] to its end on `runtime`, for the binary.
///
/// A plain function on purpose: async code the binary crate drives itself is compiled again
/// inside the binary, so the first worker (the thread calling this) would run its own copy of
/// the serving code while the other workers run the library's. The two copies are optimised
/// apart (a profile trained with one worker only reaches one of them); from here every worker
/// runs the same one.
#[inline(never)]
pub fn run_to_end(runtime: &tokio::runtime::Runtime, config: Config) -> Result<(), StartError> {
    runtime.block_on(run(config))
}

/// The whole process life behind the binary: optional demo origin, start, log a summary, wait for
/// SIGINT/SIGTERM, drain, stop.
pub async fn run(mut config: Config) -> Result<(), StartError> {
    let mut demo_origin = None;
    if config.demo {
        let origin = demo::start_origin()
            .await
            .map_err(|e| StartError::Demo(e.to_string()))?;
        config.upstream = origin.url();
        apply_demo_defaults(&mut config);
        demo_origin = Some(origin);
    }
    let demo = config.demo;
    let workers = effective_workers(&config);
    let mut running = start_on_workers(config, None, workers).await?;
    tracing::info!(addr = %running.addr, "listening");
    let crowd_stop = tokio::sync::watch::channel(false);
    if let Some(origin) = &demo_origin {
        let open = browse_addr(running.addr);
        demo::spawn_crowd(running.addr, 6, crowd_stop.1.clone());
        println!(
            "\nConcert demo: the built-in origin ({}) takes ~1 s per page and allows {} at once.\n\
             Open {open} in a few tabs: a simulated crowd keeps the line busy, so you will wait in\n\
             line, watch your position fall, and be let in automatically. Stats: {open}_room/stats\n\
             Press Ctrl-C to stop.\n",
            origin.url(),
            running.app.room.stats().cap,
        );
    }
    let stopper = running.stopper();
    let stop_signal = stop_signals();
    tokio::spawn(async move {
        stop_signal.await;
        systemd::notify_stopping();
        let _ = stopper.send(true);
    });
    handle_reload_requests(running.app.clone());
    systemd::notify_ready();
    let watchdog = systemd::spawn_watchdog();
    let result = running.wait().await.map_err(StartError::Serve);
    if let Some(watchdog) = watchdog {
        watchdog.abort();
    }
    let _ = crowd_stop.0.send(true);
    drop(demo_origin);
    if demo {
        tracing::info!("demo stopped");
    }
    result
}

/// Settings of parts this version does not have yet (HTTPS with automatic certificates, the
/// admin portal and its history, the fast lane): they are parsed and checked so an existing
/// configuration loads, but they do nothing, and an operator who set one must hear so.
const UNAVAILABLE_PARTS: &[(&str, &str)] = &[
    ("portal_listen", "the admin portal"),
    ("portal_allow", "the admin portal"),
    ("portal_session_ttl", "the admin portal"),
    ("portal_secure_cookie", "the admin portal"),
    ("history_log", "the request history"),
    ("fastlane_config", "the fast lane"),
    ("networks_config", "the fast lane's payments"),
    ("fastlane_entry_ttl", "the fast lane"),
    ("pass_duration", "the fast lane's skip passes"),
    ("tls_email", "HTTPS with automatic certificates"),
    ("tls_cache", "HTTPS with automatic certificates"),
    ("tls_staging", "HTTPS with automatic certificates"),
];

/// Shorter admin tokens start with a warning (the original had no length rule, so refusing
/// them would break existing deployments).
const MIN_ADMIN_TOKEN_LEN: usize = 16;

/// Refuses to start when HTTPS is asked for: serving plain HTTP where HTTPS was configured would
/// be worse than not starting.
fn refuse_unavailable_parts(config: &Config) -> Result<(), StartError> {
    if !config.tls_domains.is_empty() {
        return Err(StartError::Build(BuildError::Config(format!(
            "{} {}: this version does not serve HTTPS itself; terminate TLS in front of \
             Concert (docs/operations.md, \"nginx in front\") and leave -tls-domains and \
             CONCERT_TLS_DOMAINS empty",
            config.name_of("tls_domains"),
            config.tls_domains.as_str()
        ))));
    }
    Ok(())
}

/// Warns for every setting of a missing part that would have done something, and for a
/// guessable admin token. Said once the start has succeeded, so a failed start stays one line.
fn warn_unavailable_parts(config: &Config) {
    if !config.admin_token.is_empty() && config.admin_token.len() < MIN_ADMIN_TOKEN_LEN {
        tracing::warn!(
            "CONCERT_ADMIN_TOKEN is only {} bytes: anyone who guesses it can change the cap and bans; use at least {MIN_ADMIN_TOKEN_LEN} random bytes (e.g. openssl rand -hex 32)",
            config.admin_token.len()
        );
    }
    if config.portal_listens() {
        tracing::warn!(
            "CONCERT_PORTAL_PASS is set, but this version has no admin portal yet: nothing listens on {}; use /_room/stats, /metrics and POST /_room/cap",
            config.portal_listen
        );
    }
    for (key, part) in UNAVAILABLE_PARTS {
        // Turning a missing part off (an empty address or path, `false`) asks for nothing.
        let asks_for_something = config
            .value_text(key)
            .is_some_and(|text| !text.is_empty() && text != "false");
        if config.source(key) != config::Source::Default && asks_for_something {
            tracing::warn!(
                "{} is set, but {part} is not in this version: it has no effect",
                config.name_of(key)
            );
        }
    }
}

/// What `-demo` changes where the operator left the default: a small cap so a few tabs fill it,
/// and the demo origin's assets and clock on their own tiers (its data directory is settled
/// with the rest of the configuration).
fn apply_demo_defaults(config: &mut Config) {
    let left_default = |config: &Config, key: &str| config.source(key) == config::Source::Default;
    if left_default(config, "cap") {
        config.cap = 2;
    }
    if left_default(config, "assets")
        && let Ok(paths) = config::PathList::parse_strict(demo::ASSET_PATHS)
    {
        config.assets = paths;
    }
    if left_default(config, "stream_paths")
        && let Ok(paths) = config::PathList::parse_strict(demo::STREAM_PATHS)
    {
        config.stream_paths = paths;
    }
}

/// `-workers`, with 0 (the default, `TOKIO_WORKER_THREADS` unset) meaning one per core.
fn effective_workers(config: &Config) -> usize {
    match config.workers {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        workers => workers,
    }
}

fn browse_addr(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("http://127.0.0.1:{}/", addr.port())
    } else {
        format!("http://{addr}/")
    }
}

/// Path lists win over `-metrics-path`; say so, since the operator may expect metrics there.
fn warn_if_metrics_path_is_routed(generation: &Generation) {
    let Some(path) = generation.config.metrics_path.as_deref() else {
        return;
    };
    if generation.metrics_path_routed {
        tracing::warn!(
            metrics_path = path,
            "a path list routes the metrics path, so it is not answered there; metrics stay at /_room/metrics (choose another -metrics-path to move them)"
        );
    }
}

/// The start summary (02 §7): the room's numbers on one line, then a line for each part that
/// is on, so an operator reading the journal sees what this process enforces.
fn log_summary(config: &Config, data_dir: Option<&persist::DataDir>) {
    use config::duration::format_go_duration as go;
    // A cap of 0 is worked out from other settings; the summary says so next to its value.
    let derived = |cap: u32| if cap == 0 { " (derived)" } else { "" };
    tracing::info!(
        "concert {VERSION}: {} -> {} cap={} max-queue={} ticket-ttl={} first-poll-grace={} ready-grace={} asset-cap={}{} asset-user-cap-h1={} asset-user-cap-h2={}",
        config.listen,
        config.upstream_shown(),
        config.cap,
        config.max_queue,
        go(config.effective_token_ttl()),
        go(config.first_poll_grace),
        go(config.ready_grace),
        config.effective_asset_cap(),
        derived(config.asset_cap),
        config.asset_user_cap_h1,
        config.asset_user_cap_h2,
    );
    tracing::info!(
        "priority lane: cap={}{} wait={} ranks={} forms={}",
        config.effective_priority_cap(),
        derived(config.priority_cap),
        go(config.priority_wait),
        priority::lane_ranks_text(config.priority_lane_rank),
        if config.priority_forms { "on" } else { "off" },
    );
    if !config.stream_paths.is_empty() {
        tracing::info!(
            "streams: paths={} cap={}",
            config.stream_paths.as_str(),
            config.stream_cap,
        );
    }
    if config.abuse {
        tracing::info!(
            "abuse registry: strikes={} window={} cooldown={}..{} max-entries={} ban-paths={} allowed-ranges={}",
            config.abuse_strikes,
            go(config.abuse_window),
            go(config.abuse_cooldown),
            go(config.abuse_max_cooldown),
            config.abuse_max_entries,
            config.ban_paths.len(),
            config.abuse_allow.len(),
        );
    } else {
        tracing::info!("abuse registry: off");
    }
    match data_dir {
        Some(dir) => tracing::info!(
            "data dir: {} (bans, the waiting line and settings survive restarts)",
            dir.path().display()
        ),
        None => tracing::info!("data dir: none, so nothing survives a restart"),
    }
    if config.upstream_has_userinfo() {
        tracing::warn!(
            "-upstream carries a user name or password, which is never sent to the origin (nor shown in /_room/stats)"
        );
    }
}

/// SIGHUP (`systemctl reload`): re-read settings.json and apply it when valid; otherwise keep the
/// running settings and say why. Never ends the process.
fn handle_reload_requests(app: Arc<App>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        // Registered before READY=1 so an early reload cannot hit the default (fatal) action.
        match signal(SignalKind::hangup()) {
            Ok(mut hangups) => {
                tokio::spawn(async move {
                    while hangups.recv().await.is_some() {
                        match app.reload_settings_file() {
                            Ok(_) => tracing::info!("settings reloaded from settings.json"),
                            Err(e) => tracing::warn!("reload refused, running settings kept: {e}"),
                        }
                    }
                });
            }
            Err(error) => tracing::warn!(%error, "cannot handle SIGHUP"),
        }
    }
}

/// Registers SIGTERM and SIGINT now, and returns a future that ends when one arrives. Taking
/// them over before READY=1 matters: a stop signal that came before the handlers would kill
/// the process outright, with no drain.
fn stop_signals() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let terminate = signal(SignalKind::terminate());
        let interrupt = signal(SignalKind::interrupt());
        async move {
            match (terminate, interrupt) {
                (Ok(mut terminate), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = terminate.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                _ => {
                    tracing::warn!("cannot handle SIGTERM/SIGINT; falling back to Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Start-up failures, each naming what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Build(BuildError),
    #[error("{0}")]
    Serve(server::ServeError),
    #[error("cannot start the demo origin: {0}")]
    Demo(String),
    #[error("{0}")]
    Persist(persist::PersistError),
}
