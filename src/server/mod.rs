//! The public listener: binding it, the serving workers that accept from it, and the drain
//! at stop. Each connection is served by [`connection`], under the deadlines of [`deadline`]
//! and, for HTTP/2 streams, the send limit of [`send_limit`]; a plain-HTTP connection's
//! keep-alive `GET`s are answered by the lean loop of [`h1_loop`] and the rest by hyper; while
//! the listener speaks TLS,
//! [`tls_accept`] first completes the handshake (or answers a plain-HTTP client).

mod activity;
mod connection;
mod deadline;
mod h1_head;
mod h1_loop;
mod listen;
mod send_limit;
mod side;
mod tls_accept;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::app::App;
use crate::sys::workers::{SHARE_STEP_ASIDE_LIMIT, WorkerLoad, become_worker, worker_index};

use connection::{connection_builder, serve_plain};

pub(crate) use listen::ServeError;
pub(crate) use listen::bind;
pub(crate) use side::{SIDE_LIMITS, SideConn, serve_router};

/// How long in-flight requests get to finish on shutdown.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Serves `listener` on `workers` threads until `shutdown` resolves, each worker then draining
/// its own connections.
///
/// The calling task's runtime is worker 0; every other worker is a thread with a current-thread
/// runtime of its own, accepting from the same listening socket. A connection stays on the
/// worker that accepted it from start to end, so a request never crosses threads and workers
/// share nothing but the application state and their connection counts (which keep new
/// connections spread between them): the way nginx's worker processes divide a machine,
/// without a work-stealing scheduler's hand-offs between cores (see [`crate::sys::runtime`]).
pub(crate) async fn serve_workers(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()>,
    workers: usize,
) -> Result<(), ServeError> {
    let load = app.worker_load(workers.max(1));
    if workers <= 1 {
        return serve(listener, app, shutdown, load).await;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut finished = Vec::with_capacity(workers - 1);
    for index in 1..workers {
        let socket = socket2::SockRef::from(&listener)
            .try_clone()
            .map_err(|e| ServeError::Task(format!("worker {index}: {e}")))?;
        let app = app.clone();
        let load = load.clone();
        let mut stopped = stopped.clone();
        let (done, done_rx) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            // Short: Linux shows at most 15 bytes of a thread name (`top -H`, `ps -L`).
            .name(format!("concert-w{index}"))
            .spawn(move || {
                become_worker(index);
                let served = crate::sys::runtime::worker_runtime()
                    .build()
                    .map_err(|e| ServeError::Task(format!("worker {index}: {e}")))
                    .and_then(|runtime| {
                        runtime.block_on(async move {
                            let listener = TcpListener::from_std(socket.into())
                                .map_err(|e| ServeError::Task(format!("worker {index}: {e}")))?;
                            let stop = async move {
                                let _ = stopped.wait_for(|stop| *stop).await;
                            };
                            serve(listener, app, stop, load).await
                        })
                    });
                let _ = done.send(served);
            })
            .map_err(|e| ServeError::Task(format!("worker {index}: {e}")))?;
        finished.push((thread, done_rx));
    }
    let stop_all = async move {
        shutdown.await;
        let _ = stop.send(true);
    };
    let served = serve(listener, app, stop_all, load).await;
    for (index, (thread, done)) in finished.into_iter().enumerate() {
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(worker = index + 1, error = %e, "worker failed"),
            Err(_) => tracing::error!(worker = index + 1, "worker thread ended abruptly"),
        }
        // Its runtime is gone and its result sent: the thread is only returning now, so this
        // wait is momentary, and nothing of the worker outlives the call.
        let _ = thread.join();
    }
    served
}

/// Serves `listener` as worker [`worker_index`] until `shutdown` resolves, then stops accepting
/// and gives in-flight requests and closing WebSockets up to [`SHUTDOWN_GRACE`] before
/// closing what is left.
/// While this worker holds clearly more connections than the least busy one, it leaves new
/// connections to the others.
async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()>,
    load: Arc<WorkerLoad>,
) -> Result<(), ServeError> {
    let builder = Arc::new(connection_builder(
        app.generation().config.client_send_timeout,
    ));
    let (stopping, stop_signal) = tokio::sync::watch::channel(false);
    let connections = tokio_util::task::TaskTracker::new();
    let worker = worker_index();
    tokio::pin!(shutdown);
    'accepting: loop {
        // Every worker is woken for each new connection and the first to call accept wins, so
        // a burst of connections can land on one worker while the others idle. Stepping aside
        // lets a less busy worker take them (the others keep accepting meanwhile).
        if load.over_share(worker) {
            let limit = tokio::time::Instant::now() + SHARE_STEP_ASIDE_LIMIT;
            tokio::select! {
                () = load.wait_for_share(worker, limit) => {}
                () = &mut shutdown => break 'accepting,
            }
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break 'accepting,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of descriptors or a connection reset before accept: back off briefly rather
                // than spinning, and keep serving.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let held = load.open(worker);
        let stop_signal = stop_signal.clone();
        // Asked per connection: turning TLS on or off applies to the next one accepted.
        match app.tls.acceptor() {
            None => {
                connections.spawn(serve_plain(
                    &builder,
                    stop_signal,
                    stream,
                    peer,
                    app.clone(),
                    held,
                ));
            }
            Some(tls) => {
                connections.spawn(tls_accept::serve_tls(
                    builder.clone(),
                    stop_signal,
                    stream,
                    peer,
                    app.clone(),
                    held,
                    tls,
                ));
            }
        }
    }
    drop(listener);
    tracing::info!(worker = worker_index(), "draining...");
    app.drain.start();
    stopping.send_replace(true);
    connections.close();
    // WebSocket tunnels are no longer connections hyper tracks; they run on this worker too,
    // so it waits for their Close frames before its runtime goes.
    let drained = async {
        connections.wait().await;
        app.drain.websockets_closed().await;
    };
    tokio::select! {
        () = drained => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!(worker = worker_index(), "grace period over; closing remaining connections");
        }
    }
    tracing::info!(worker = worker_index(), "stopped");
    Ok(())
}
