//! A Concert process from start to stop: opening the data directory, building the app,
//! restoring bans and the line, serving, reloading on SIGHUP, draining on SIGTERM and saving
//! what must survive the restart.

mod certificates;
mod fastlane;
pub(crate) use fastlane::{LaneDocuments, SaveError, save_files};
mod summary;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::admission::assets;
use crate::app::{App, BuildError};
use crate::config::{self, Config};
use crate::demo;
use crate::portal;
use crate::server;
use crate::store;
use crate::sys::systemd;

use summary::{log_summary, warn_if_metrics_path_is_routed, warn_unavailable_parts};

/// The build's version, printed by `-version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A running Concert: its bound address and the handle that stops it.
pub struct Running {
    pub addr: SocketAddr,
    /// The admin portal's address, when it listens.
    pub portal_addr: Option<SocketAddr>,
    /// The plain-HTTP port beside HTTPS (`-http-listen`), when it listens.
    pub http_addr: Option<SocketAddr>,
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
                dir.file(store::SETTINGS_FILE).display()
            ),
            _ => String::new(),
        };
        StartError::Build(BuildError::Config(format!("{message}{hint}")))
    })?;
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
    // Bound before anything is restored, like the main listener: a portal address in use stops
    // the start with its name.
    let portal_listener = if config.portal_listens() {
        let listener = server::bind(&config.portal_listen)
            .await
            .map_err(|e| StartError::Serve(e.named("-portal-listen")))?;
        Some(listener)
    } else {
        None
    };
    let http_listener = if config.http_listen.trim().is_empty() {
        None
    } else {
        let listener = server::bind(&config.http_listen)
            .await
            .map_err(|e| StartError::Serve(e.named("-http-listen")))?;
        Some(listener)
    };
    let app = App::with_data_dir(config, baseline, data_dir.clone()).map_err(StartError::Build)?;
    // Certificates are read and checked before anything is restored: a bad pair stops the
    // start with one line naming the setting and the file.
    {
        let config = &app.generation().config;
        let plan = app
            .tls
            .prepare(config)
            .map_err(|e| StartError::Build(BuildError::Tls(e)))?;
        app.tls.apply(plan);
        app.tls
            .start_portal(config)
            .map_err(|e| StartError::Build(BuildError::Tls(e)))?;
    }
    warn_if_metrics_path_is_routed(&app.generation());
    let mut background = Vec::new();
    let mut writers = Vec::new();
    let stop_writers = tokio_util::sync::CancellationToken::new();
    if let Some(dir) = &data_dir {
        let report = store::load_bans(dir, &app.abuse).map_err(StartError::Persist)?;
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
        let restored = store::restore_queue(dir, &app.room).map_err(StartError::Persist)?;
        if restored > 0 {
            tracing::info!(tickets = restored, "waiting line restored");
        }
        writers.push(store::spawn_ban_writer(
            dir.clone(),
            app.abuse.clone(),
            stop_writers.clone(),
        ));
        writers.push(store::spawn_queue_snapshots(
            dir.clone(),
            app.room.clone(),
            QUEUE_SNAPSHOT_EVERY,
            stop_writers.clone(),
        ));
    }
    let history_log = crate::history::log_path(
        &app.generation().config.history_log,
        data_dir.as_deref().map(|dir| dir.path()),
    );
    app.history.start(history_log);
    fastlane::start(&app, data_dir.as_deref()).map_err(StartError::Build)?;
    // Only now, with the listener bound and saved state loaded, is the start a success.
    log_summary(&app.generation().config, data_dir.as_deref(), &app.tls);
    warn_unavailable_parts(&app.generation().config);
    if app.generation().config.admit_secret_generated {
        tracing::warn!(
            "CONCERT_ADMIT_SECRET is not set: using a random secret, so passes (and the recognition of expired line tickets) reset on restart and are not shared between instances"
        );
    }
    background.push(app.room.spawn_reaper());
    background.extend(crate::cluster::start(&app, addr));
    background.push(app.abuse.spawn_janitor());
    background.push(app.history.spawn_maintenance());
    background.push(certificates::spawn_file_watch(&app));
    background.push(certificates::spawn_certificate_requests(&app));
    background.push({
        let app = Arc::downgrade(&app);
        assets::spawn_sweeper(move || {
            app.upgrade()
                .map(|app| app.generation().assets.pools().clone())
        })
    });
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let mut portal_addr = None;
    let portal_task = match (portal::Portal::new(app.clone()), portal_listener) {
        (Some(portal), Some(listener)) => {
            background.extend(portal.spawn_tasks());
            portal_addr = listener.local_addr().ok();
            if let Some(addr) = portal_addr {
                tracing::info!(%addr, "admin portal listening");
            }
            let mut stopped = stopped.clone();
            Some(tokio::spawn(server::serve_router(
                listener,
                portal::router(portal),
                server::SIDE_LIMITS,
                app.tls.portal_acceptor(),
                async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                },
                PORTAL_GRACE,
            )))
        }
        _ => None,
    };
    let mut http_addr = None;
    let http_task = http_listener.map(|listener| {
        http_addr = listener.local_addr().ok();
        if let Some(http) = http_addr {
            tracing::info!(addr = %http, "plain HTTP listening: ACME challenges, and redirects to https");
        }
        let mut stopped = stopped.clone();
        tokio::spawn(server::serve_router(
            listener,
            crate::tls::http_port::router(app.tls.clone(), addr.port()),
            server::SIDE_LIMITS,
            None,
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
            PORTAL_GRACE,
        ))
    });
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
        if let Some(portal) = portal_task {
            let _ = portal.await;
        }
        if let Some(http) = http_task {
            let _ = http.await;
        }
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
        fastlane::stop(&serving).await;
        save_on_stop(&serving).await;
        serving.history.shut_down().await;
        result
    });
    Ok(Running {
        addr,
        portal_addr,
        http_addr,
        app,
        stop,
        task,
    })
}

/// How long the portal's open requests get to finish at stop.
const PORTAL_GRACE: Duration = Duration::from_secs(5);

/// How often the waiting line is snapshotted while it changes (crash safety).
pub const QUEUE_SNAPSHOT_EVERY: Duration = Duration::from_secs(5);

fn open_data_dir(config: &mut Config) -> Result<Option<Arc<store::DataDir>>, StartError> {
    if config.data_dir.trim().is_empty() {
        return Ok(None);
    }
    let dir = store::DataDir::open(std::path::Path::new(&config.data_dir))
        .map_err(StartError::Persist)?;
    let applied = store::apply_settings_file(&dir, config).map_err(StartError::Persist)?;
    if applied > 0 {
        tracing::info!(
            values = applied,
            file = %dir.file(store::SETTINGS_FILE).display(),
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
        if let Err(e) = store::save_bans(&dir, &saving.abuse) {
            tracing::error!("cannot save bans at shutdown: {e}");
        }
        if saving.room.stats().live_queue_depth == 0 {
            return store::clear_queue(&dir);
        }
        store::save_queue(&dir, &saving.room)
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

/// SIGHUP (`systemctl reload`): re-read settings.json and apply it when valid, otherwise keep
/// the running settings and say why; then read the certificate files again, keeping the served
/// pair when a new one does not load. Never ends the process.
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
                            Err(_) if app.data_dir.is_none() => {
                                tracing::info!(
                                    "SIGHUP: no data dir, so no settings.json to re-read"
                                )
                            }
                            Err(e) => tracing::warn!("reload refused, running settings kept: {e}"),
                        }
                        let reloading = app.clone();
                        let _ =
                            tokio::task::spawn_blocking(move || reloading.tls.reload_files(true))
                                .await;
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
    Persist(store::PersistError),
}
