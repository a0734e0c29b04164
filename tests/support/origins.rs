//! Fake origins for tests: real hyper servers on `127.0.0.1:0`, one per behaviour.
//!
//! Every origin counts the requests it received (`hits`), how many it is serving right now
//! (`in_flight`: from the request's arrival until its response body is finished or dropped,
//! or a WebSocket is closed) and the most it ever served at once (`max_concurrency`). An origin
//! stops when its handle is dropped. A dead origin is an address nobody listens on.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt as _, StreamExt as _};
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{Semaphore, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

/// The body type origin handlers answer with.
pub type OriginBody = UnsyncBoxBody<Bytes, Infallible>;

type BoxedHandler = Arc<
    dyn Fn(
            Request<Incoming>,
            OriginTools,
        ) -> Pin<Box<dyn Future<Output = Response<OriginBody>> + Send>>
        + Send
        + Sync,
>;

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    in_flight: AtomicI64,
    max_concurrency: AtomicI64,
    /// Path and query of every request, in the order they arrived.
    paths: std::sync::Mutex<Vec<String>>,
}

impl Counters {
    fn enter(self: &Arc<Self>) -> InFlight {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_concurrency.fetch_max(now, Ordering::SeqCst);
        InFlight(Arc::clone(self))
    }
}

/// Counts one exchange as in flight until dropped.
pub struct InFlight(Arc<Counters>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a handler may use besides the request: the origin's stop signal (for work that
/// outlives the response, such as a WebSocket) and its counters.
#[derive(Clone)]
pub struct OriginTools {
    stop: watch::Receiver<()>,
    counters: Arc<Counters>,
}

impl OriginTools {
    /// Resolves when the origin's handle is dropped.
    pub async fn stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.changed().await;
    }

    /// Counts something that outlives the response (an open WebSocket) as in flight.
    pub fn in_flight_guard(&self) -> InFlight {
        self.counters.enter()
    }
}

/// A running fake origin. Dropping it stops the server and every connection it holds.
pub struct Origin {
    addr: SocketAddr,
    counters: Arc<Counters>,
    gate: Arc<Semaphore>,
    _stop: watch::Sender<()>,
}

impl Origin {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn hits(&self) -> u64 {
        self.counters.hits.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> i64 {
        self.counters.in_flight.load(Ordering::SeqCst)
    }

    pub fn max_concurrency(&self) -> i64 {
        self.counters.max_concurrency.load(Ordering::SeqCst)
    }

    /// Starts measuring `max_concurrency` afresh from what is in flight now.
    pub fn reset_max_concurrency(&self) {
        let now = self.counters.in_flight.load(Ordering::SeqCst);
        self.counters.max_concurrency.store(now, Ordering::SeqCst);
    }

    /// Path and query of every request received, in arrival order.
    pub fn paths(&self) -> Vec<String> {
        self.counters
            .paths
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// Lets `n` more held requests answer (see [`held_origin`]).
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }
}

/// Starts an origin answering every request with `handler`. Must be called inside a tokio
/// runtime.
pub fn origin_with<F, Fut>(handler: F) -> Origin
where
    F: Fn(Request<Incoming>, OriginTools) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<OriginBody>> + Send + 'static,
{
    start(Arc::new(Semaphore::new(0)), handler)
}

fn start<F, Fut>(gate: Arc<Semaphore>, handler: F) -> Origin
where
    F: Fn(Request<Incoming>, OriginTools) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<OriginBody>> + Send + 'static,
{
    let handler: BoxedHandler = Arc::new(move |req, tools| Box::pin(handler(req, tools)));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    let addr = listener.local_addr().expect("listener address");
    let listener =
        tokio::net::TcpListener::from_std(listener).expect("tokio listener (inside a runtime?)");
    let counters = Arc::new(Counters::default());
    let (stop_tx, stop_rx) = watch::channel(());
    let tools = OriginTools {
        stop: stop_rx,
        counters: Arc::clone(&counters),
    };
    tokio::spawn(accept_loop(listener, handler, tools));
    Origin {
        addr,
        counters,
        gate,
        _stop: stop_tx,
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, handler: BoxedHandler, tools: OriginTools) {
    // Connections live in this set, so they end with the loop.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = tools.stopped() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let handler = Arc::clone(&handler);
                let tools = tools.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let handler = Arc::clone(&handler);
                        let tools = tools.clone();
                        async move {
                            tools.counters.hits.fetch_add(1, Ordering::SeqCst);
                            if let Ok(mut paths) = tools.counters.paths.lock() {
                                paths.push(
                                    req.uri().path_and_query().map(|pq| pq.to_string()).unwrap_or_default(),
                                );
                            }
                            let in_flight = tools.counters.enter();
                            let response = handler(req, tools).await;
                            Ok::<_, Infallible>(response.map(|body| {
                                Tracked { inner: body, _in_flight: in_flight }.boxed_unsync()
                            }))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
}

/// A response body that keeps the exchange counted as in flight until it is done.
struct Tracked {
    inner: OriginBody,
    _in_flight: InFlight,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A complete body.
pub fn full(data: impl Into<Bytes>) -> OriginBody {
    Full::new(data.into()).boxed_unsync()
}

/// A 200 `text/plain` response.
pub fn text(body: &'static str) -> Response<OriginBody> {
    let mut response = Response::new(full(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A body fed frame by frame from a channel; the body ends when the sender is dropped.
pub fn channel_body() -> (tokio::sync::mpsc::Sender<Frame<Bytes>>, OriginBody) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Frame<Bytes>>(16);
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|frame| (Ok::<_, Infallible>(frame), rx))
    });
    (tx, StreamBody::new(frames).boxed_unsync())
}

/// Answers `200 ok` at once.
pub fn fast_origin() -> Origin {
    origin_with(|_, _| async { text("ok") })
}

/// Answers `200 ok` after `delay`.
pub fn slow_origin(delay: Duration) -> Origin {
    origin_with(move |_, _| async move {
        tokio::time::sleep(delay).await;
        text("ok")
    })
}

/// Reads requests and never answers them (until it is dropped).
pub fn stalling_origin() -> Origin {
    origin_with(|_, tools| async move {
        tools.stopped().await;
        text("stopped")
    })
}

/// Each request waits until the test lets it through with [`Origin::release`], then answers
/// `200 ok`. Waiting requests count as in flight, so tests can hold slots deterministically.
pub fn held_origin() -> Origin {
    let gate = Arc::new(Semaphore::new(0));
    let waiting_on = Arc::clone(&gate);
    start(gate, move |_, tools| {
        let gate = Arc::clone(&waiting_on);
        async move {
            tokio::select! {
                permit = gate.acquire() => {
                    if let Ok(permit) = permit {
                        permit.forget();
                    }
                    text("ok")
                }
                _ = tools.stopped() => text("stopped"),
            }
        }
    })
}

/// Answers with JSON describing what it received:
/// `{"method", "path" (path and query), "version", "headers": {name: [values]}, "body"}`.
pub fn echo_origin() -> Origin {
    origin_with(|req, _| async move {
        let (parts, body) = req.into_parts();
        let mut headers = serde_json::Map::new();
        for (name, value) in &parts.headers {
            let entry = headers
                .entry(name.as_str())
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            if let serde_json::Value::Array(values) = entry {
                values.push(
                    String::from_utf8_lossy(value.as_bytes())
                        .into_owned()
                        .into(),
                );
            }
        }
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let report = serde_json::json!({
            "method": parts.method.as_str(),
            "path": parts.uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/"),
            "version": format!("{:?}", parts.version),
            "headers": headers,
            "body": String::from_utf8_lossy(&body),
        });
        let mut response = Response::new(full(report.to_string()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    })
}

/// Answers with a chunked body of `chunks` lines `chunk <i>\n`, the first at once and then one
/// every `every`.
pub fn streaming_origin(chunks: usize, every: Duration) -> Origin {
    origin_with(move |_, _| async move {
        let frames = futures_util::stream::unfold(0usize, move |sent| async move {
            if sent >= chunks {
                return None;
            }
            if sent > 0 {
                tokio::time::sleep(every).await;
            }
            let frame = Frame::data(Bytes::from(format!("chunk {sent}\n")));
            Some((Ok::<_, Infallible>(frame), sent + 1))
        });
        Response::new(StreamBody::new(frames).boxed_unsync())
    })
}

/// Answers with `bytes` bytes of `x` in 64 KiB chunks, as fast as the reader takes them: more
/// than the sockets and buffers on the way hold, so a client that stops reading stalls it.
pub fn large_origin(bytes: usize) -> Origin {
    const CHUNK: usize = 64 * 1024;
    origin_with(move |_, _| async move {
        let chunk = Bytes::from(vec![b'x'; CHUNK]);
        let frames = futures_util::stream::unfold(0usize, move |sent| {
            let chunk = chunk.clone();
            async move {
                if sent >= bytes {
                    return None;
                }
                let piece = chunk.slice(..CHUNK.min(bytes - sent));
                let next = sent + piece.len();
                Some((Ok::<_, Infallible>(Frame::data(piece)), next))
            }
        });
        Response::new(StreamBody::new(frames).boxed_unsync())
    })
}

/// Server-sent events: `data: hello` at once, then `data: tick <n>` every 100 ms for at most
/// a minute, so a stream stays open as long as a test needs it.
pub fn sse_origin() -> Origin {
    origin_with(|_, _| async move {
        let frames = futures_util::stream::unfold(0u32, |n| async move {
            let event = if n == 0 {
                Bytes::from_static(b"data: hello\n\n")
            } else if n <= 600 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Bytes::from(format!("data: tick {n}\n\n"))
            } else {
                return None;
            };
            Some((Ok::<_, Infallible>(Frame::data(event)), n + 1))
        });
        let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    })
}

/// A WebSocket echo server: every text or binary message comes back unchanged. Requests that
/// are not WebSocket handshakes get 400. An open socket counts as in flight.
pub fn ws_echo_origin() -> Origin {
    origin_with(|mut req, tools| async move {
        let is_websocket = req
            .headers()
            .get(header::UPGRADE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
        let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
            return status_only(StatusCode::BAD_REQUEST);
        };
        if !is_websocket {
            return status_only(StatusCode::BAD_REQUEST);
        }
        let on_upgrade = hyper::upgrade::on(&mut req);
        let socket_guard = tools.in_flight_guard();
        tokio::spawn(async move {
            let _socket_guard = socket_guard;
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            let mut socket = tokio_tungstenite::WebSocketStream::from_raw_socket(
                TokioIo::new(upgraded),
                Role::Server,
                None,
            )
            .await;
            loop {
                tokio::select! {
                    _ = tools.stopped() => break,
                    message = socket.next() => match message {
                        Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
                            if socket.send(message).await.is_err() {
                                break;
                            }
                        }
                        Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                        Some(Ok(_)) => {}
                    },
                }
            }
            let _ = socket.close(None).await;
        });
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        let mut response = Response::new(full(Bytes::new()));
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(accept) = HeaderValue::from_str(&accept) {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        response
    })
}

fn status_only(status: StatusCode) -> Response<OriginBody> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// An address nothing listens on: connecting to it is refused.
pub fn dead_origin_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("listener address")
}

/// `http://` URL of [`dead_origin_addr`].
pub fn dead_origin_url() -> String {
    format!("http://{}", dead_origin_addr())
}

/// An origin whose accept queue is full, so a new connection to it neither completes nor is
/// refused: the kernel drops its handshake and the client keeps retrying. The listener never
/// accepts; a backlog of 0 holds the one connection made here, and the next ones wait.
pub struct UnacceptingOrigin {
    listener: socket2::Socket,
    _queued: std::net::TcpStream,
}

impl UnacceptingOrigin {
    pub fn new() -> UnacceptingOrigin {
        let listener = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("origin socket");
        let any_port: SocketAddr = "127.0.0.1:0".parse().expect("loopback address");
        listener.bind(&any_port.into()).expect("bind 127.0.0.1:0");
        listener.listen(0).expect("listen");
        let addr = listener
            .local_addr()
            .ok()
            .and_then(|addr| addr.as_socket())
            .expect("listener address");
        let queued = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
            .expect("the one connection the backlog holds");
        UnacceptingOrigin {
            listener,
            _queued: queued,
        }
    }

    pub fn url(&self) -> String {
        let addr = self
            .listener
            .local_addr()
            .ok()
            .and_then(|addr| addr.as_socket())
            .expect("listener address");
        format!("http://{addr}")
    }
}

/// A raw origin (no HTTP library), for answers no well-behaved server would send: it reads each
/// request head, writes `answer()` and hangs up. With a `pause`, the answer's head goes first
/// and the rest follows after the pause; without one, it all goes in one write.
pub async fn hanging_up_origin<F>(answer: F, pause: Duration) -> String
where
    F: Fn() -> Vec<u8> + Send + Sync + 'static,
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head_end = answer
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .map_or(answer.len(), |at| at + 4);
                if pause.is_zero() {
                    let _ = stream.write_all(&answer).await;
                } else {
                    let _ = stream.write_all(&answer[..head_end]).await;
                    tokio::time::sleep(pause).await;
                    let _ = stream.write_all(&answer[head_end..]).await;
                }
                // A request body left unread would make the close a reset, which may discard
                // what the proxy has not read yet.
                let mut rest = [0u8; 256];
                let _ =
                    tokio::time::timeout(Duration::from_millis(20), stream.read(&mut rest)).await;
            });
        }
    });
    format!("http://{addr}")
}

/// What [`trailing_body_origin`] sends as the body nobody should read: a complete response of
/// its own, so a proxy that reads it takes it for the answer to the next request.
pub const TRAILING_RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nX-Trailing: yes\r\n\r\nSMUGGLED";

/// A raw origin (no HTTP library) whose answers without a body still carry one. To `HEAD`, and
/// to `/not-modified` (304) and `/no-content` (204) with any method, it answers a head whose
/// `Content-Length` announces [`TRAILING_RESPONSE`], and sends those bytes late: when the next
/// request arrives on the same connection, before that request's own answer, as a framework
/// that writes the body after a slow render would. Everything else is answered `200 real`.
/// Request bodies framed by `Content-Length` are read and ignored.
pub struct TrailingBodyOrigin {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
}

impl TrailingBodyOrigin {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

pub async fn trailing_body_origin() -> TrailingBodyOrigin {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicU64::new(0));
    let accepted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut owed: &[u8] = b"";
                loop {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let length: usize = head
                        .lines()
                        .find_map(|line| {
                            let (name, value) = line.split_once(':')?;
                            name.eq_ignore_ascii_case("content-length")
                                .then(|| value.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    let mut body = vec![0u8; length];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let mut words = head.split(' ');
                    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                    let status = match path {
                        "/not-modified" => Some("304 Not Modified"),
                        "/no-content" => Some("204 No Content"),
                        _ if method == "HEAD" => Some("200 OK"),
                        _ => None,
                    };
                    let mut answer = std::mem::take(&mut owed).to_vec();
                    match status {
                        Some(status) => {
                            answer.extend_from_slice(
                                format!(
                                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n",
                                    TRAILING_RESPONSE.len()
                                )
                                .as_bytes(),
                            );
                            owed = TRAILING_RESPONSE;
                        }
                        None => answer
                            .extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal"),
                    }
                    if stream.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    TrailingBodyOrigin { addr, connections }
}
