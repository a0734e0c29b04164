//! Listeners and connections: binding Go-style addresses, serving HTTP/1.1 and h2c with the
//! hardening limits, panic recovery per request, and graceful shutdown.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use futures_util::FutureExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};

use crate::App;
use crate::framing::{FramingGuard, FramingWatch, Refusal};
use crate::idle_deadline::{ConnLimits, ConnectionActivity, CountedBody, IdleDeadline};
use crate::stream_send_limit::StreamExecutor;

/// Slow clients get this long to send a request head (slowloris): the first request from the
/// connection's opening, a later one from its first bytes.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most headers one request may carry before it is answered 431. This is hyper's built-in
/// HTTP/1 limit: setting any limit of our own makes hyper allocate its parse arrays (about
/// 8 KiB) on the heap for every request instead of using the stack. HTTP/2 has no such count,
/// so the pipeline checks it there.
pub const MAX_HEADERS: usize = 100;
/// Largest read buffer per connection; a request head that does not fit is answered 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("listen {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("server task failed: {0}")]
    Task(String),
}

/// What the request pipeline knows about the connection a request came on.
#[derive(Clone, Copy, Debug)]
pub struct ConnInfo {
    /// Socket peer, IPv4-mapped addresses unmapped.
    pub peer: Option<IpAddr>,
    /// Whether the connection is Concert's own TLS.
    pub tls: bool,
}

/// Parses a listen address the way Go does: `:8080` means every interface, `host:port` a host.
pub fn parse_listen(addr: &str) -> Result<Vec<SocketAddr>, String> {
    let addr = addr.trim();
    if let Some(port) = addr.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| format!("bad port in {addr:?}"))?;
        // Both families, IPv6 first: on a dual-stack host one socket serves both.
        return Ok(vec![
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
            SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), port),
        ]);
    }
    if let Ok(socket) = addr.parse::<SocketAddr>() {
        return Ok(vec![socket]);
    }
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("missing port in {addr:?}"))?;
    let port: u16 = port.parse().map_err(|_| format!("bad port in {addr:?}"))?;
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => Ok(vec![SocketAddr::new(ip, port)]),
        Err(_) => Err(format!(
            "host in {addr:?} must be an IP address or localhost"
        )),
    }
}

/// Binds the main listener. Errors name the address, as operators grep for `listen`.
pub async fn bind(addr: &str) -> Result<TcpListener, ServeError> {
    let candidates = parse_listen(addr).map_err(|msg| ServeError::Listen {
        addr: addr.to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, msg),
    })?;
    let mut last_error = None;
    for candidate in candidates {
        match bind_socket(candidate) {
            Ok(listener) => return Ok(listener),
            Err(e) => last_error = Some(e),
        }
    }
    Err(ServeError::Listen {
        addr: addr.to_string(),
        source: last_error.unwrap_or_else(|| std::io::Error::other("no address to bind")),
    })
}

fn bind_socket(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // Accept IPv4 too on `[::]`, as Go's `:port` does.
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

thread_local! {
    /// The serving worker this thread runs: 0 for the main runtime and any thread that is not
    /// a worker.
    static WORKER_INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The serving worker the current thread runs (see [`serve_workers`]); 0 outside workers.
pub fn worker_index() -> usize {
    WORKER_INDEX.with(Cell::get)
}

/// Marks the current thread as serving worker `index`.
pub(crate) fn become_worker(index: usize) {
    WORKER_INDEX.set(index);
}

/// Longest a worker steps aside at a time: should the others stop accepting (stalled, or
/// starved of CPU), new connections wait at most this long before it competes for them again.
const SHARE_STEP_ASIDE_LIMIT: Duration = Duration::from_millis(250);
/// Connections a worker may hold beyond the least busy worker before it stops accepting.
const SHARE_SLACK: usize = 2;

/// Open connections per serving worker, the way nginx's workers compare how busy they are before
/// accepting.
pub(crate) struct WorkerLoad {
    open: Box<[AtomicUsize]>,
    /// Woken at every change of a count, so a worker that stepped aside looks again at once.
    /// Looking on a timer instead left every worker asleep at times during a burst of new
    /// connections: each had stepped aside while it held more than the others, and none had
    /// looked again yet. Connections then waited in the kernel for 30 ms and more.
    changed: tokio::sync::Notify,
}

impl WorkerLoad {
    pub(crate) fn new(workers: usize) -> WorkerLoad {
        WorkerLoad {
            open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// Counts a connection on `worker` until the returned value is dropped.
    fn open(self: &Arc<Self>, worker: usize) -> OpenConnection {
        if let Some(count) = self.open.get(worker) {
            count.fetch_add(1, Ordering::Relaxed);
            self.changed.notify_waiters();
        }
        OpenConnection {
            load: self.clone(),
            worker,
        }
    }

    /// Open connections per worker.
    pub(crate) fn counts(&self) -> Vec<usize> {
        self.open
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
            .collect()
    }

    /// Connections open on `worker`; `None` for a worker that does not exist.
    fn open_on(&self, worker: usize) -> Option<usize> {
        self.open
            .get(worker)
            .map(|count| count.load(Ordering::Relaxed))
    }

    /// Whether `worker` holds clearly more connections than the least busy other worker.
    fn over_share(&self, worker: usize) -> bool {
        let Some(mine) = self.open_on(worker) else {
            return false;
        };
        let least_other = self
            .open
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != worker)
            .map(|(_, count)| count.load(Ordering::Relaxed))
            .min();
        least_other.is_some_and(|least| mine > least + SHARE_SLACK)
    }

    /// Returns once `worker` no longer holds more than its share, or at `limit`.
    async fn wait_for_share(&self, worker: usize, limit: tokio::time::Instant) {
        let mut limit = std::pin::pin!(tokio::time::sleep_until(limit));
        loop {
            // Registered before the check, so a change between the two is not missed.
            let mut changed = std::pin::pin!(self.changed.notified());
            changed.as_mut().enable();
            if !self.over_share(worker) {
                return;
            }
            tokio::select! {
                () = changed => {}
                () = &mut limit => return,
            }
        }
    }
}

/// One open connection counted in [`WorkerLoad`].
struct OpenConnection {
    load: Arc<WorkerLoad>,
    worker: usize,
}

impl OpenConnection {
    /// Whether this connection's worker holds more than `crowd` connections.
    fn crowding(&self, crowd: usize) -> crate::idle_deadline::Crowded {
        let (load, worker) = (self.load.clone(), self.worker);
        Arc::new(move || load.open_on(worker).is_some_and(|open| open > crowd))
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if let Some(count) = self.load.open.get(self.worker) {
            count.fetch_sub(1, Ordering::Relaxed);
            self.load.changed.notify_waiters();
        }
    }
}

/// Serves `listener` on `workers` threads until `shutdown` resolves, each worker then draining
/// its own connections.
///
/// The calling task's runtime is worker 0; every other worker is a thread with a current-thread
/// runtime of its own, accepting from the same listening socket. A connection stays on the
/// worker that accepted it from start to end, so a request never crosses threads and workers
/// share nothing but the application state and their connection counts (which keep new
/// connections spread between them): the way nginx's worker processes divide a machine,
/// without a work-stealing scheduler's hand-offs between cores. Workers that the scheduler puts
/// on one core take turns on it (see [`crate::core_turns`]).
pub async fn serve_workers(
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
                let served = crate::core_turns::worker_runtime()
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
/// and gives in-flight requests and closing WebSockets up to [`crate::SHUTDOWN_GRACE`] before
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
        connections.spawn(serve_connection(
            &builder,
            stop_signal,
            stream,
            peer,
            app.clone(),
            held,
        ));
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
        () = tokio::time::sleep(crate::SHUTDOWN_GRACE) => {
            tracing::warn!(worker = worker_index(), "grace period over; closing remaining connections");
        }
    }
    tracing::info!(worker = worker_index(), "stopped");
    Ok(())
}

/// `send_limit`: how long an HTTP/2 stream's answer may wait on the client's flow control before
/// the stream is reset.
fn connection_builder(send_limit: Duration) -> auto::Builder<StreamExecutor> {
    let mut builder = auto::Builder::new(StreamExecutor { send_limit });
    builder
        .http1()
        .timer(TokioTimer::new())
        // Kept by the connection's IdleDeadline instead: hyper's timer is a new boxed sleep
        // registered and removed for every request.
        .header_read_timeout(None)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .max_header_list_size(MAX_HEAD_BYTES as u32)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// Serves one connection until it ends; `stop_signal` turning true (the worker stopping) asks
/// it to finish what is in flight and close.
fn serve_connection(
    builder: &Arc<auto::Builder<StreamExecutor>>,
    mut stop_signal: tokio::sync::watch::Receiver<bool>,
    stream: TcpStream,
    peer: SocketAddr,
    app: Arc<App>,
    held: OpenConnection,
) -> impl Future<Output = ()> + Send + 'static {
    let _ = stream.set_nodelay(true);
    let conn = ConnInfo {
        peer: Some(crate::client::unmap(peer.ip())),
        tls: false,
    };
    let watch = Arc::new(FramingWatch::default());
    let activity = Arc::new(ConnectionActivity::default());
    let idle = activity.clone();
    let (limits, crowded) = {
        let config = &app.generation().config;
        let limits = ConnLimits {
            head: HEADER_READ_TIMEOUT,
            idle: config.keep_alive_idle,
            send: config.client_send_timeout,
        };
        (limits, held.crowding(config.keep_alive_crowd))
    };
    let stream = IdleDeadline::new(stream, activity.clone(), limits, crowded);
    let io = TokioIo::new(FramingGuard::new(stream, watch.clone()));
    let service = service_fn(move |req: hyper::Request<Incoming>| {
        let app = app.clone();
        let watch = watch.clone();
        let refusal = watch.next_refusal();
        // Held by the request's future, then by its response body: open until either ends,
        // and the connection's idle deadline does not run meanwhile.
        let exchange = if req.version() == http::Version::HTTP_2 {
            activity.stream_opened()
        } else {
            activity.exchange_opened()
        };
        async move {
            let response = match refusal {
                Some(refusal) => refused_framing(&app, &req, refusal),
                None => {
                    let connect = req.method() == http::Method::CONNECT;
                    let response = handle_recovering(app, conn, req).await;
                    // Before hyper writes it: the guard may stop once the connection leaves
                    // HTTP/1, and a tunnel has no idle deadline.
                    if watch.record_answer(connect, response.status()) {
                        exchange.tunnel_opened();
                    }
                    response
                }
            };
            Ok::<_, Infallible>(response.map(|body| Body::new(CountedBody::new(body, exchange))))
        }
    });
    let builder = builder.clone();
    let connection = builder
        .serve_connection_with_upgrades(io, service)
        .into_owned();
    // Only read, to learn whether the signal moved (one atomic load).
    let stop_version = stop_signal.clone();
    async move {
        let mut connection = std::pin::pin!(connection);
        let mut stop = std::pin::pin!(stop_signal.wait_for(|stopping| *stopping));
        // Polling the stop future locks the channel's waiter list, which every connection of
        // every worker shares, and the connection is polled several times per request. Once
        // polled, the task's waker stays registered until the signal moves, so it is polled
        // again only when it has.
        let mut stop_registered = false;
        // Once asked (the worker stopping, or an idle HTTP/2 connection), hyper finishes what
        // is in flight and closes: HTTP/1 after the current exchange, HTTP/2 with GOAWAY.
        let mut close_asked = false;
        let ended = std::future::poll_fn(|cx| {
            loop {
                if let Poll::Ready(ended) = connection.as_mut().poll(cx) {
                    return Poll::Ready(ended);
                }
                if close_asked {
                    return Poll::Pending;
                }
                // The idle deadline asks from inside the reads just polled: no wake-up needed.
                // A stop signal whose sender is gone counts as a stop.
                let mut stopping = idle.close_requested();
                if !stopping && (!stop_registered || stop_version.has_changed().unwrap_or(true)) {
                    stop_registered = true;
                    stopping = stop.as_mut().poll(cx).is_ready();
                }
                if !stopping {
                    return Poll::Pending;
                }
                connection.as_mut().graceful_shutdown();
                close_asked = true;
            }
        })
        .await;
        if let Err(e) = ended {
            tracing::debug!(error = %e, "connection ended with an error");
        }
        drop(held);
    }
}

/// The answer to a request whose head carried both `Content-Length` and `Transfer-Encoding`,
/// or that came after framing the guard could not follow: it never reaches the origin, and the
/// connection closes after the answer (the answer says `Connection: close`), so nothing the
/// client sent after it is read as a request.
fn refused_framing(
    app: &App,
    req: &hyper::Request<Incoming>,
    refusal: Refusal,
) -> http::Response<Body> {
    app.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    crate::rejection::Rejection::BadRequest(refusal.reason().to_string())
        .into_response(crate::client::is_html_client(req.headers()))
}

/// Runs the pipeline; a panic becomes an empty 500 and one log line, never a dead connection task
/// with a header dump.
fn handle_recovering(
    app: Arc<App>,
    conn: ConnInfo,
    req: hyper::Request<Incoming>,
) -> impl Future<Output = http::Response<Body>> + Send {
    // A reference-count bump; the path is only formatted if the pipeline panics.
    let uri = req.uri().clone();
    recovering(uri, crate::router::handle(app, conn, req))
}

/// `pipeline`, with a panic turned into an empty 500. A plain function rather than an async
/// one: an async wrapper would hold a second copy of the request and move the whole pipeline
/// future once more for every request.
fn recovering(
    uri: http::Uri,
    pipeline: impl Future<Output = http::Response<Body>> + Send,
) -> impl Future<Output = http::Response<Body>> + Send {
    AssertUnwindSafe(pipeline)
        .catch_unwind()
        .map(move |outcome| match outcome {
            Ok(response) => response,
            Err(_) => {
                let path: String = uri.path().chars().take(256).collect();
                tracing::error!("request panic on {path}");
                let mut response = http::Response::new(Body::empty());
                *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                response
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_pipeline_answers_an_empty_500_and_others_pass_through() {
        let uri: http::Uri = "/checkout?step=2".parse().unwrap();
        let answered = recovering(uri.clone(), async {
            let mut response = http::Response::new(Body::from("fine"));
            *response.status_mut() = http::StatusCode::ACCEPTED;
            response
        })
        .await;
        assert_eq!(answered.status(), http::StatusCode::ACCEPTED);

        let step = std::hint::black_box(2);
        let panicked = recovering(uri, async move {
            if step == 2 {
                panic!("the pipeline broke");
            }
            http::Response::new(Body::empty())
        })
        .await;
        assert_eq!(panicked.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
        let body = http_body_util::BodyExt::collect(panicked.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert!(body.is_empty());
    }

    #[test]
    fn a_worker_steps_aside_only_when_clearly_busier_than_another() {
        let load = Arc::new(WorkerLoad::new(3));
        let mut held: Vec<OpenConnection> = (0..2).map(|_| load.open(0)).collect();
        assert!(
            !load.over_share(0),
            "two more than the others is within the slack"
        );
        held.push(load.open(0));
        assert!(load.over_share(0));
        assert!(!load.over_share(1) && !load.over_share(2));
        // One other worker catching up is not enough: the least busy one decides.
        held.push(load.open(1));
        assert!(load.over_share(0));
        held.push(load.open(2));
        assert!(!load.over_share(0));
        assert_eq!(load.counts(), [3, 1, 1]);
        drop(held);
        assert_eq!(load.counts(), [0, 0, 0]);
        // A single worker never steps aside.
        let alone = Arc::new(WorkerLoad::new(1));
        let _many: Vec<OpenConnection> = (0..10).map(|_| alone.open(0)).collect();
        assert!(!alone.over_share(0));
    }

    #[test]
    fn go_style_listen_addresses() {
        let all = parse_listen(":8080").unwrap();
        assert_eq!(all[0].port(), 8080);
        assert!(all[0].ip().is_unspecified());
        assert_eq!(
            parse_listen("127.0.0.1:9000").unwrap(),
            vec!["127.0.0.1:9000".parse().unwrap()]
        );
        assert_eq!(
            parse_listen("localhost:9000").unwrap(),
            vec!["127.0.0.1:9000".parse().unwrap()]
        );
        assert_eq!(parse_listen("[::1]:80").unwrap()[0].port(), 80);
        assert!(parse_listen("nope").is_err());
        assert!(parse_listen(":http").is_err());
        assert!(parse_listen("example.com:80").is_err());
    }

    #[tokio::test]
    async fn a_worker_that_stepped_aside_looks_again_when_another_takes_a_connection() {
        let load = Arc::new(WorkerLoad::new(2));
        let busy: Vec<OpenConnection> = (0..3).map(|_| load.open(0)).collect();
        let far = tokio::time::Instant::now() + Duration::from_secs(60);
        let waiting = tokio::spawn({
            let load = load.clone();
            async move { load.wait_for_share(0, far).await }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "worker 0 holds three more than worker 1"
        );
        let taken = load.open(1);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken by worker 1's new connection, not by the one-minute limit")
            .unwrap();
        drop((busy, taken));
    }

    #[tokio::test]
    async fn a_worker_stops_stepping_aside_at_the_limit() {
        let load = Arc::new(WorkerLoad::new(2));
        let _busy: Vec<OpenConnection> = (0..3).map(|_| load.open(0)).collect();
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        tokio::time::timeout(Duration::from_secs(10), load.wait_for_share(0, soon))
            .await
            .expect("the limit ends the wait");
        assert!(load.over_share(0), "still busier: only the limit let it go");
    }

    #[tokio::test]
    async fn binding_a_busy_port_names_listen() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let err = bind(&addr).await.unwrap_err();
        assert!(err.to_string().starts_with("listen "), "{err}");
        assert!(err.to_string().contains(&addr));
    }
}
