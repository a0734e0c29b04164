//! End-to-end tests of the proxy on real sockets: a small hyper front server calls
//! `Proxy::forward` the way the router will, in front of the fake origins.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt as _, StreamExt as _};
use http::header::HeaderName;
use http::{HeaderMap, Method};
use http_body_util::BodyExt as _;
use hyper::body::{Frame, Incoming};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use hyper_util::rt::{TokioExecutor, TokioIo};

use super::*;
use crate::proxy::drain::is_event_stream;
use crate::proxy::pool::{PLAIN_HTTP_POOL, PoolLimits};

use crate::test_origins as origins;

use origins::{OriginBody, full};

const PATIENCE: Duration = Duration::from_secs(3);

fn settings(upstream: &str) -> ProxySettings {
    ProxySettings {
        upstream: upstream.parse().unwrap(),
        preserve_host: true,
        upstream_timeout: Duration::from_secs(30),
        upload_min_rate: 500,
        failures: Arc::default(),
    }
}

/// Counts live holds; the proxy must drop each exactly when its exchange ends.
struct CountedHold(Arc<AtomicI64>);

impl CountedHold {
    fn new(live: &Arc<AtomicI64>) -> CountedHold {
        live.fetch_add(1, Ordering::SeqCst);
        CountedHold(Arc::clone(live))
    }
}

impl Drop for CountedHold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A front server calling `Proxy::forward` for every request, with one hold per request.
struct Front {
    addr: SocketAddr,
    holds: Arc<AtomicI64>,
    proxy: Arc<Proxy>,
    task: JoinHandle<()>,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Front {
    fn holds(&self) -> i64 {
        self.holds.load(Ordering::SeqCst)
    }
}

fn front(proxy: Proxy, peer_trusted: bool) -> Front {
    let proxy = Arc::new(proxy);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let holds = Arc::new(AtomicI64::new(0));
    let live = Arc::clone(&holds);
    let shared = Arc::clone(&proxy);
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => {
                    let Ok((stream, peer)) = accepted else { continue };
                    let proxy = Arc::clone(&proxy);
                    let live = Arc::clone(&live);
                    connections.spawn(async move {
                        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                            let proxy = Arc::clone(&proxy);
                            let hold: SlotHold = Box::new(CountedHold::new(&live));
                            let target = req
                                .uri()
                                .path_and_query()
                                .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned());
                            let req = req.map(Body::new);
                            async move {
                                // These tests never stop the server.
                                let drain = Drain::default();
                                let ctx = ForwardContext {
                                    peer: Some(crate::pipeline::identity::unmap(peer.ip())),
                                    peer_trusted,
                                    client: Some(crate::pipeline::identity::unmap(peer.ip())),
                                    via_tls: false,
                                    path_and_query: &target,
                                    drain: &drain,
                                };
                                Ok::<_, Infallible>(proxy.forward(req, ctx, Some(hold)).await)
                            }
                        });
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection_with_upgrades(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        }
    });
    Front {
        addr,
        holds,
        proxy: shared,
        task,
    }
}

/// One client connection; dropping it closes the socket.
struct Conn {
    sender: hyper::client::conn::http1::SendRequest<OriginBody>,
    task: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connect(addr: SocketAddr) -> Conn {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let task = tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    Conn { sender, task }
}

fn request(
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: OriginBody,
) -> Request<OriginBody> {
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = path.parse().unwrap();
    for (name, value) in headers {
        req.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    req
}

async fn send(addr: SocketAddr, req: Request<OriginBody>) -> (Conn, Response<Incoming>) {
    let mut conn = connect(addr).await;
    let response = tokio::time::timeout(PATIENCE, conn.sender.send_request(req))
        .await
        .expect("response headers in time")
        .unwrap();
    (conn, response)
}

async fn get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Bytes) {
    let (_conn, response) = send(
        addr,
        request(Method::GET, path, headers, full(Bytes::new())),
    )
    .await;
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(PATIENCE, body.collect())
        .await
        .expect("body in time")
        .unwrap()
        .to_bytes();
    (parts.status, parts.headers, body)
}

/// What the echo origin saw for a request sent through `front`.
async fn seen_by_echo(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> serde_json::Value {
    let (status, _, body) = get(addr, path, headers).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_slice(&body).unwrap()
}

fn header_lines(seen: &serde_json::Value, name: &str) -> Vec<String> {
    seen["headers"][name]
        .as_array()
        .map(|values| {
            values
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn next_data(body: &mut Incoming) -> Bytes {
    let frame = tokio::time::timeout(PATIENCE, body.frame())
        .await
        .expect("a frame in time")
        .expect("body still open")
        .unwrap();
    frame.into_data().unwrap_or_default()
}

#[tokio::test]
async fn free_room_request_reaches_the_origin_once() {
    let origin = origins::fast_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let (status, headers, body) = get(front.addr, "/hello", &[("host", "concert.example")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"ok");
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(origin.hits(), 1);
    eventually("hold released after the body", || front.holds() == 0).await;
}

#[tokio::test]
async fn client_host_is_preserved_with_forwarding_headers() {
    let origin = origins::echo_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let seen = seen_by_echo(front.addr, "/hello", &[("host", "concert.example")]).await;
    assert_eq!(header_lines(&seen, "host"), ["concert.example"]);
    assert_eq!(header_lines(&seen, "x-forwarded-host"), ["concert.example"]);
    assert_eq!(header_lines(&seen, "x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(header_lines(&seen, "x-forwarded-proto"), ["http"]);
    assert_eq!(seen["version"], "HTTP/1.1");
}

#[tokio::test]
async fn upstream_host_is_sent_when_not_preserving() {
    let origin = origins::echo_origin();
    let mut config = settings(&origin.url());
    config.preserve_host = false;
    let front = front(Proxy::new(config).unwrap(), false);
    let seen = seen_by_echo(front.addr, "/hello", &[("host", "concert.example")]).await;
    assert_eq!(header_lines(&seen, "host"), [origin.addr().to_string()]);
    assert_eq!(header_lines(&seen, "x-forwarded-host"), ["concert.example"]);
}

#[tokio::test]
async fn trusted_peer_keeps_its_chain_and_scheme() {
    let origin = origins::echo_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), true);
    let seen = seen_by_echo(
        front.addr,
        "/",
        &[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-proto", "https"),
        ],
    )
    .await;
    assert_eq!(
        header_lines(&seen, "x-forwarded-for"),
        ["203.0.113.9, 127.0.0.1"]
    );
    assert_eq!(header_lines(&seen, "x-forwarded-proto"), ["https"]);
}

#[tokio::test]
async fn untrusted_peer_chain_and_scheme_are_replaced() {
    let origin = origins::echo_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let seen = seen_by_echo(
        front.addr,
        "/",
        &[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("forwarded", "for=6.6.6.6"),
            ("x-forwarded-port", "443"),
        ],
    )
    .await;
    assert_eq!(header_lines(&seen, "x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(header_lines(&seen, "x-forwarded-proto"), ["http"]);
    assert!(header_lines(&seen, "forwarded").is_empty());
    assert!(header_lines(&seen, "x-forwarded-port").is_empty());
}

#[tokio::test]
async fn private_cookies_and_credentials_never_reach_the_origin() {
    let origin = origins::echo_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let seen = seen_by_echo(
        front.addr,
        "/",
        &[
            (
                "cookie",
                "room_ticket=abc; room_pass=def; room_probe=1; concert_admit=xyz; session=keep",
            ),
            ("payment-signature", "sig"),
            ("concert-session", "s"),
            ("x-concert-csrf", "c"),
        ],
    )
    .await;
    assert_eq!(header_lines(&seen, "cookie"), ["session=keep"]);
    assert!(header_lines(&seen, "payment-signature").is_empty());
    assert!(header_lines(&seen, "concert-session").is_empty());
    assert!(header_lines(&seen, "x-concert-csrf").is_empty());

    let seen = seen_by_echo(front.addr, "/", &[("cookie", "room_ticket=abc")]).await;
    assert!(seen["headers"].get("cookie").is_none());
}

#[tokio::test]
async fn hop_by_hop_request_headers_stop_at_the_proxy() {
    let origin = origins::echo_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let seen = seen_by_echo(
        front.addr,
        "/",
        &[
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic eA=="),
            ("te", "trailers, gzip"),
            ("x-end-to-end", "yes"),
        ],
    )
    .await;
    for gone in ["x-hop", "keep-alive", "proxy-authorization"] {
        assert!(
            header_lines(&seen, gone).is_empty(),
            "{gone} reached the origin"
        );
    }
    assert_eq!(header_lines(&seen, "te"), ["trailers"]);
    assert_eq!(header_lines(&seen, "x-end-to-end"), ["yes"]);
}

#[tokio::test]
async fn hop_by_hop_response_headers_stop_at_the_proxy() {
    let origin = origins::origin_with(|_, _| async {
        let mut response = origins::text("ok");
        let headers = response.headers_mut();
        headers.insert("connection", HeaderValue::from_static("x-internal"));
        headers.insert("x-internal", HeaderValue::from_static("secret"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("proxy-authenticate", HeaderValue::from_static("Basic"));
        headers.insert("x-end-to-end", HeaderValue::from_static("yes"));
        response
    });
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let (status, headers, _) = get(front.addr, "/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    for gone in ["x-internal", "keep-alive", "proxy-authenticate"] {
        assert!(!headers.contains_key(gone), "{gone} reached the client");
    }
    assert_eq!(headers["x-end-to-end"], "yes");
}

#[tokio::test]
async fn paths_go_upstream_unchanged() {
    let origin = origins::echo_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    for path in ["/foo/", "/_room/stats/", "/a?b=1&c"] {
        let seen = seen_by_echo(front.addr, path, &[]).await;
        assert_eq!(seen["path"], path);
    }
    assert_eq!(origin.hits(), 3);
}

#[tokio::test]
async fn upstream_base_path_and_query_are_merged() {
    let origin = origins::echo_origin();
    let upstream = format!("{}/base?key=1", origin.url());
    let front = front(Proxy::new(settings(&upstream)).unwrap(), false);
    let seen = seen_by_echo(front.addr, "/x/y?q=2", &[]).await;
    assert_eq!(seen["path"], "/base/x/y?key=1&q=2");
}

#[tokio::test]
async fn dead_upstream_answers_502_and_releases_the_hold() {
    let front = front(
        Proxy::new(settings(&origins::dead_origin_url())).unwrap(),
        false,
    );
    let (status, headers, body) = get(front.addr, "/hello", &[]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(&body[..], b"upstream unavailable\n");
    eventually("hold released after the 502", || front.holds() == 0).await;
}

#[tokio::test]
async fn response_header_timeout_answers_502() {
    let origin = origins::stalling_origin();
    let mut config = settings(&origin.url());
    config.upstream_timeout = Duration::from_millis(200);
    let front = front(Proxy::new(config).unwrap(), false);
    let started = Instant::now();
    let (status, _, body) = get(front.addr, "/", &[]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(&body[..], b"upstream unavailable\n");
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(origin.hits(), 1);
    eventually("hold released after the timeout", || front.holds() == 0).await;
    eventually("origin request abandoned", || origin.in_flight() == 0).await;
}

#[tokio::test]
async fn the_header_timeout_bounds_connecting_to_an_origin_that_never_accepts() {
    // The connect limit is 5 s; a 300 ms `-upstream-timeout` must end the wait first, for a
    // page (the direct path) and for a request with a body (the pooled client).
    let origin = origins::UnacceptingOrigin::new();
    let mut config = settings(&origin.url());
    config.upstream_timeout = Duration::from_millis(300);
    let front = front(Proxy::new(config).unwrap(), false);
    let started = Instant::now();
    let (status, _, body) = get(front.addr, "/", &[]).await;
    let waited = started.elapsed();
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(&body[..], b"upstream unavailable\n");
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    eventually("hold released after the timeout", || front.holds() == 0).await;

    let mut conn = connect(front.addr).await;
    let started = Instant::now();
    let response = tokio::time::timeout(
        PATIENCE,
        conn.sender.send_request(request(
            Method::POST,
            "/upload",
            &[],
            full(Bytes::from_static(b"form=1")),
        )),
    )
    .await
    .expect("an answer in time")
    .unwrap();
    let waited = started.elapsed();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    eventually("hold released after the timeout", || front.holds() == 0).await;
}

/// A POST to `/upload` under way through a proxy with a 300 ms `-upstream-timeout`.
struct Upload {
    front: Front,
    /// Feeds the request body; dropping it ends the body.
    body: tokio::sync::mpsc::Sender<Frame<Bytes>>,
    answer: JoinHandle<hyper::Result<Response<Incoming>>>,
    started: Instant,
    /// The client's connection, which ends when this is dropped.
    _conn: Conn,
}

async fn start_upload(origin_url: &str) -> Upload {
    let mut config = settings(origin_url);
    config.upstream_timeout = Duration::from_millis(300);
    let front = front(Proxy::new(config).unwrap(), false);
    let (body, client_body) = origins::channel_body();
    let mut conn = connect(front.addr).await;
    let started = Instant::now();
    let answer =
        tokio::spawn(
            conn.sender
                .send_request(request(Method::POST, "/upload", &[], client_body)),
        );
    Upload {
        front,
        body,
        answer,
        started,
        _conn: conn,
    }
}

/// The upload's answer: its status, its whole body, and how long after the start it came.
async fn upload_answer(
    answer: JoinHandle<hyper::Result<Response<Incoming>>>,
    started: Instant,
) -> (StatusCode, Bytes, Duration) {
    let response = tokio::time::timeout(PATIENCE, answer)
        .await
        .expect("an answer in time")
        .unwrap()
        .unwrap();
    let waited = started.elapsed();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body, waited)
}

/// Sends a POST whose body is `chunks` pieces of `piece_bytes` each, `every` apart, through a
/// proxy with a 300 ms `-upstream-timeout`, to the echo origin; `stall_after` stops sending
/// (without ending the body) after that many pieces. Returns the answer, its body and when it
/// came, and the body sent.
async fn upload_in_pieces(
    chunks: usize,
    every: Duration,
    piece_bytes: usize,
    stall_after: Option<usize>,
) -> (StatusCode, Bytes, Duration, String) {
    let origin = origins::echo_origin();
    let upload = start_upload(&origin.url()).await;
    let mut sent = String::new();
    for piece in 0..chunks {
        if stall_after == Some(piece) {
            break;
        }
        tokio::time::sleep(every).await;
        let mut text = format!("{piece};");
        text.extend(std::iter::repeat_n(
            '.',
            piece_bytes.saturating_sub(text.len()),
        ));
        // The proxy may answer (and stop reading) before the body ends.
        if upload
            .body
            .send(Frame::data(Bytes::from(text.clone())))
            .await
            .is_err()
        {
            break;
        }
        sent.push_str(&text);
    }
    if stall_after.is_none() {
        drop(upload.body);
    }
    let (status, body, waited) = upload_answer(upload.answer, upload.started).await;
    eventually("hold released after the upload", || {
        upload.front.holds() == 0
    })
    .await;
    (status, body, waited, sent)
}

#[tokio::test]
async fn a_slow_upload_that_keeps_moving_outlasts_the_header_timeout() {
    // Six pieces 150 ms apart: 900 ms of upload against a 300 ms limit, never 300 ms idle,
    // and at 1,600 bytes a second above the minimum average of 500.
    let (status, body, waited, sent) =
        upload_in_pieces(6, Duration::from_millis(150), 240, None).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let seen: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["body"], sent);
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
}

#[tokio::test]
async fn a_stalled_upload_is_the_clients_timeout_not_the_origins() {
    // Two pieces earn a second at the minimum rate: the 300 ms stall ends the upload first.
    let (status, body, waited, _) =
        upload_in_pieces(6, Duration::from_millis(50), 250, Some(2)).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(&body[..], b"request body timed out\n");
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
}

#[tokio::test]
async fn an_upload_trickling_below_the_minimum_rate_gets_408() {
    // Two bytes every 100 ms never stall for the 300 ms limit, but average 20 bytes a second:
    // after the 300 ms grace the 500-byte minimum ends the upload, not the last of 30 pieces.
    let (status, body, waited, _) = upload_in_pieces(30, Duration::from_millis(100), 2, None).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{body:?}");
    assert_eq!(&body[..], b"request body timed out\n");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
}

#[tokio::test]
async fn the_header_timeout_counts_from_the_end_of_the_upload() {
    let origin = origins::stalling_origin();
    let upload = start_upload(&origin.url()).await;
    // Each piece earns half a second at the minimum rate, so only the stall limit can end it.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        upload
            .body
            .send(Frame::data(Bytes::from(vec![b'p'; 250])))
            .await
            .unwrap();
    }
    let body_sent = upload.started.elapsed();
    drop(upload.body);
    let (status, _, waited) = upload_answer(upload.answer, upload.started).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(
        waited >= body_sent + Duration::from_millis(300),
        "answered {waited:?} after a body sent at {body_sent:?}"
    );
    eventually("hold released after the timeout", || {
        upload.front.holds() == 0
    })
    .await;
}

/// An origin that reads one request head and nothing more until `drain` fires; then it reads
/// until the proxy closes the connection and returns how many body bytes came.
async fn origin_reading_only_the_head()
-> (String, tokio::sync::oneshot::Sender<()>, JoinHandle<u64>) {
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (drain, drain_now) = tokio::sync::oneshot::channel::<()>();
    let origin = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(socket.read_u8().await.unwrap());
        }
        let _ = drain_now.await;
        let (mut body_bytes, mut buf) = (0u64, vec![0u8; 64 * 1024]);
        while let Ok(read @ 1..) = socket.read(&mut buf).await {
            body_bytes += read as u64;
        }
        body_bytes
    });
    (url, drain, origin)
}

#[tokio::test]
async fn an_origin_that_stops_reading_an_upload_is_the_origins_timeout_not_the_clients() {
    // The client always has more to send and the origin reads none of it, so once the socket
    // buffers on the way are full the upload stops moving through no fault of the client's.
    let (url, drain, origin) = origin_reading_only_the_head().await;
    let upload = start_upload(&url).await;
    // Far more than loopback's buffers hold, offered as fast as it is taken.
    const PIECE: usize = 64 * 1024;
    const PIECES: usize = 1024;
    let client_body = upload.body;
    let _client = tokio::spawn(async move {
        let piece = Bytes::from(vec![b'u'; PIECE]);
        for _ in 0..PIECES {
            if client_body.send(Frame::data(piece.clone())).await.is_err() {
                break;
            }
        }
    });
    let (status, body, waited) = upload_answer(upload.answer, upload.started).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body:?}");
    assert_eq!(&body[..], b"upstream unavailable\n");
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    eventually("hold released after the timeout", || {
        upload.front.holds() == 0
    })
    .await;
    // The abandoned exchange must close its origin connection: were it kept, the rest of the
    // upload would flow once the origin reads, and the origin would wait for its end for ever.
    drain.send(()).unwrap();
    let body_bytes = tokio::time::timeout(PATIENCE, origin)
        .await
        .expect("the proxy closed its origin connection")
        .unwrap();
    assert!(
        body_bytes < (PIECE * PIECES) as u64,
        "the whole upload reached the origin ({body_bytes} bytes)"
    );
}

#[tokio::test]
async fn sse_events_arrive_while_the_stream_stays_open() {
    let origin = origins::sse_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let (conn, response) = send(
        front.addr,
        request(
            Method::GET,
            "/events",
            &[("accept", "text/event-stream")],
            full(Bytes::new()),
        ),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let first = next_data(&mut body).await;
    assert!(first.starts_with(b"data: hello"), "{first:?}");
    let second = next_data(&mut body).await;
    assert!(second.starts_with(b"data: tick"), "{second:?}");
    assert_eq!(front.holds(), 1, "the stream holds its slot while open");

    drop(body);
    drop(conn);
    eventually("hold released when the client left", || front.holds() == 0).await;
    eventually("origin stream abandoned", || origin.in_flight() == 0).await;
}

#[tokio::test]
async fn request_body_streams_to_the_origin() {
    let (first_seen_tx, first_seen_rx) = tokio::sync::oneshot::channel::<Bytes>();
    let first_seen = Arc::new(parking_lot::Mutex::new(Some(first_seen_tx)));
    let origin = origins::origin_with(move |req, _| {
        let first_seen = Arc::clone(&first_seen);
        async move {
            let mut body = req.into_body();
            let mut total = 0usize;
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(data) = frame.data_ref() {
                    total += data.len();
                    if let Some(tx) = first_seen.lock().take() {
                        let _ = tx.send(data.clone());
                    }
                }
            }
            Response::new(full(total.to_string()))
        }
    });
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let (client_body_tx, client_body) = origins::channel_body();
    let mut conn = connect(front.addr).await;
    let req = request(Method::POST, "/upload", &[], client_body);
    let pending = tokio::spawn(conn.sender.send_request(req));
    client_body_tx
        .send(Frame::data(Bytes::from_static(b"first")))
        .await
        .unwrap();
    let seen = tokio::time::timeout(PATIENCE, first_seen_rx)
        .await
        .expect("origin saw the first chunk before the last was sent")
        .unwrap();
    assert_eq!(&seen[..], b"first");
    client_body_tx
        .send(Frame::data(Bytes::from_static(b"last")))
        .await
        .unwrap();
    drop(client_body_tx);
    let response = tokio::time::timeout(PATIENCE, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"9");
}

#[tokio::test]
async fn response_body_streams_and_the_hold_ends_with_it() {
    let finish = Arc::new(tokio::sync::Notify::new());
    let origin_finish = Arc::clone(&finish);
    let origin = origins::origin_with(move |_, _| {
        let finish = Arc::clone(&origin_finish);
        async move {
            let (tx, body) = origins::channel_body();
            tokio::spawn(async move {
                let _ = tx.send(Frame::data(Bytes::from_static(b"first\n"))).await;
                finish.notified().await;
                let _ = tx.send(Frame::data(Bytes::from_static(b"last\n"))).await;
            });
            Response::new(body)
        }
    });
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let (_conn, response) = send(
        front.addr,
        request(Method::GET, "/", &[], full(Bytes::new())),
    )
    .await;
    let mut body = response.into_body();
    assert_eq!(&next_data(&mut body).await[..], b"first\n");
    assert_eq!(front.holds(), 1, "slot held while the body is still coming");
    assert_eq!(origin.in_flight(), 1, "origin has not finished");

    finish.notify_one();
    assert_eq!(&next_data(&mut body).await[..], b"last\n");
    let end = tokio::time::timeout(PATIENCE, body.frame()).await.unwrap();
    assert!(end.is_none(), "body ends after the last chunk");
    eventually("hold released at the end of the body", || {
        front.holds() == 0
    })
    .await;
}

#[tokio::test]
async fn held_origin_keeps_the_slot_until_released() {
    let origin = origins::held_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let addr = front.addr;
    let waiting = tokio::spawn(async move { get(addr, "/", &[]).await });
    eventually("request waiting at the origin", || origin.in_flight() == 1).await;
    assert_eq!(front.holds(), 1);
    origin.release(1);
    let (status, _, body) = tokio::time::timeout(PATIENCE, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"ok");
    eventually("hold released", || front.holds() == 0).await;
    assert_eq!(origin.max_concurrency(), 1);
}

async fn websocket_round_trip(front: &Front, origin: &origins::Origin) {
    let stream = TcpStream::connect(front.addr).await.unwrap();
    let url = format!("ws://{}/socket", front.addr);
    let (mut socket, response) =
        tokio::time::timeout(PATIENCE, tokio_tungstenite::client_async(url, stream))
            .await
            .expect("handshake in time")
            .unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    socket.send(Message::text("hello")).await.unwrap();
    let echoed = tokio::time::timeout(PATIENCE, socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(echoed, Message::text("hello"));
    socket.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    let echoed = tokio::time::timeout(PATIENCE, socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(echoed, Message::binary(vec![1u8, 2, 3]));
    assert_eq!(front.holds(), 1, "the open tunnel holds its slot");
    assert_eq!(origin.in_flight(), 1, "the socket is open at the origin");

    socket.close(None).await.unwrap();
    // Drain until the close handshake completes.
    let _ = tokio::time::timeout(PATIENCE, async {
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
    drop(socket);
    eventually("hold released after the socket closed", || {
        front.holds() == 0
    })
    .await;
    eventually("origin socket closed", || origin.in_flight() == 0).await;
}

#[tokio::test]
async fn websocket_is_tunnelled_and_holds_its_slot_until_closed() {
    let origin = origins::ws_echo_origin();
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    websocket_round_trip(&front, &origin).await;
}

#[tokio::test]
async fn switching_protocols_nobody_asked_for_is_refused() {
    let origin = origins::origin_with(|_, _| async {
        let mut response = Response::new(full(Bytes::new()));
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        response
            .headers_mut()
            .insert("upgrade", HeaderValue::from_static("websocket"));
        response
            .headers_mut()
            .insert("connection", HeaderValue::from_static("upgrade"));
        response
    });
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    let (status, _, _) = get(front.addr, "/", &[]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    eventually("hold released", || front.holds() == 0).await;
}

#[tokio::test]
async fn invalid_upstream_is_rejected() {
    for bad in ["ftp://files.example", "/just/a/path"] {
        let err = Proxy::new(settings(bad)).unwrap_err();
        assert!(matches!(err, ProxyError::Scheme(_)), "{bad}: {err}");
    }
}

/// TLS in front of a plain fake origin, with a certificate for 127.0.0.1 that only the returned
/// client configuration trusts. Offers h2 and http/1.1 like a real server; the plain origin
/// speaks whichever the handshake picked.
struct TlsFront {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn tls_in_front_of(plain: SocketAddr) -> (TlsFront, rustls::ClientConfig) {
    tls_offering(plain, &[b"h2", b"http/1.1"])
}

/// [`tls_in_front_of`], offering only the protocols in `alpn`.
fn tls_offering(plain: SocketAddr, alpn: &[&[u8]]) -> (TlsFront, rustls::ClientConfig) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert_der = certified.cert.der().clone();
    let key_der =
        rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone()], key_der)
        .unwrap();
    server.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let acceptor = acceptor.clone();
                    connections.spawn(async move {
                        let Ok(mut tls) = acceptor.accept(stream).await else { return };
                        let Ok(mut origin) = TcpStream::connect(plain).await else { return };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut origin).await;
                    });
                }
            }
        }
    });
    (TlsFront { addr, task }, client)
}

#[tokio::test]
async fn https_upstream_is_reached_over_http2() {
    let origin = origins::echo_origin();
    let (tls, client_tls) = tls_in_front_of(origin.addr());
    let upstream = format!("https://{}/base", tls.addr);
    let proxy = Proxy::with_tls_config(settings(&upstream), client_tls).unwrap();
    let front = front(proxy, false);
    let seen = seen_by_echo(
        front.addr,
        "/hello?x=1",
        &[
            ("host", "concert.example"),
            ("cookie", "room_ticket=t; a=b"),
        ],
    )
    .await;
    assert_eq!(seen["version"], "HTTP/2.0");
    assert_eq!(seen["path"], "/base/hello?x=1");
    assert_eq!(header_lines(&seen, "host"), ["concert.example"]);
    assert_eq!(header_lines(&seen, "cookie"), ["a=b"]);
    eventually("hold released", || front.holds() == 0).await;
}

/// The shared client (`https` origins) puts a connection back in its pool on its own. After
/// a `HEAD`, or a 304 announcing a body, it must not be used again: the origin sends the body
/// late, and it would be read as the answer to the next request.
#[tokio::test]
async fn a_late_body_after_head_or_304_never_answers_the_next_https_request() {
    let origin = origins::trailing_body_origin().await;
    let (tls, client_tls) = tls_offering(origin.addr(), &[b"http/1.1"]);
    let upstream = format!("https://{}", tls.addr);
    let front = front(
        Proxy::with_tls_config(settings(&upstream), client_tls).unwrap(),
        false,
    );
    for (method, path) in [(Method::HEAD, "/page"), (Method::GET, "/not-modified")] {
        let (_conn, first) = send(front.addr, request(method, path, &[], full(Bytes::new()))).await;
        assert!(first.status().is_success() || first.status() == StatusCode::NOT_MODIFIED);
        drop(first);
        let (status, headers, body) = get(front.addr, "/page", &[]).await;
        assert_eq!(
            (status, &body[..]),
            (StatusCode::OK, &b"real"[..]),
            "after {path}"
        );
        assert!(!headers.contains_key("x-trailing"));
    }
    eventually("holds released", || front.holds() == 0).await;
}

#[tokio::test]
async fn https_upstream_with_unknown_certificate_is_a_502() {
    let origin = origins::echo_origin();
    let (tls, _trusting_client) = tls_in_front_of(origin.addr());
    let upstream = format!("https://{}", tls.addr);
    // Only the system / bundled roots: the test certificate is not among them.
    let front = front(Proxy::new(settings(&upstream)).unwrap(), false);
    let (status, _, body) = get(front.addr, "/", &[]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(&body[..], b"upstream unavailable\n");
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn websocket_through_an_https_upstream() {
    let origin = origins::ws_echo_origin();
    let (tls, client_tls) = tls_in_front_of(origin.addr());
    let proxy =
        Proxy::with_tls_config(settings(&format!("https://{}", tls.addr)), client_tls).unwrap();
    let front = front(proxy, false);
    websocket_round_trip(&front, &origin).await;
}

/// An origin that counts the connections it accepts and still holds open. Each request answers
/// `ok`, after a [`ConnectionCountingOrigin::release`] when `held`, announcing
/// `Connection: close` when `closing`.
struct ConnectionCountingOrigin {
    addr: SocketAddr,
    accepted: Arc<AtomicI64>,
    open: Arc<AtomicI64>,
    gate: Arc<tokio::sync::Semaphore>,
    task: JoinHandle<()>,
}

impl Drop for ConnectionCountingOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ConnectionCountingOrigin {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn accepted(&self) -> i64 {
        self.accepted.load(Ordering::SeqCst)
    }

    fn open(&self) -> i64 {
        self.open.load(Ordering::SeqCst)
    }

    fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }
}

fn connection_counting_origin(held: bool, closing: bool) -> ConnectionCountingOrigin {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let accepted = Arc::new(AtomicI64::new(0));
    let open = Arc::new(AtomicI64::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (accepted_count, open_count, waiting_on) =
        (Arc::clone(&accepted), Arc::clone(&open), Arc::clone(&gate));
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                incoming = listener.accept() => {
                    let Ok((stream, _)) = incoming else { continue };
                    accepted_count.fetch_add(1, Ordering::SeqCst);
                    open_count.fetch_add(1, Ordering::SeqCst);
                    let open_count = Arc::clone(&open_count);
                    let gate = Arc::clone(&waiting_on);
                    connections.spawn(async move {
                        let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                            let gate = Arc::clone(&gate);
                            async move {
                                if held && let Ok(permit) = gate.acquire().await {
                                    permit.forget();
                                }
                                let mut response = Response::new(full(Bytes::from_static(b"ok")));
                                if closing {
                                    response
                                        .headers_mut()
                                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                                }
                                Ok::<_, Infallible>(response)
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                        open_count.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            }
        }
    });
    ConnectionCountingOrigin {
        addr,
        accepted,
        open,
        gate,
        task,
    }
}

/// The pool bodiless requests (all of these tests' requests) go through.
fn plain_pool(front: &Front) -> &DirectPool {
    front
        .proxy
        .direct
        .as_deref()
        .expect("an http origin gets the direct pool")
}

#[tokio::test]
async fn origin_connections_are_reused_across_requests() {
    let origin = connection_counting_origin(false, false);
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    for _ in 0..20 {
        let (status, _, body) = get(front.addr, "/", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&body[..], b"ok");
    }
    // Concurrent requests, several rounds: never more connections than requests at once.
    for _ in 0..3 {
        let batch: Vec<_> = (0..4)
            .map(|_| tokio::spawn(get(front.addr, "/", &[])))
            .collect();
        for request in batch {
            assert_eq!(request.await.unwrap().0, StatusCode::OK);
        }
    }
    assert!(
        origin.accepted() <= 5,
        "32 requests opened {} origin connections",
        origin.accepted()
    );
    eventually("holds released", || front.holds() == 0).await;
}

#[tokio::test]
async fn origin_closing_idle_connections_causes_no_502() {
    // An origin that answers once per connection and then closes it without saying so, as
    // an origin's keep-alive timeout does.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicI64::new(0));
    let counter = Arc::clone(&accepted);
    let origin = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            });
        }
    });
    let front = front(
        Proxy::new(settings(&format!("http://{addr}"))).unwrap(),
        false,
    );
    for round in 1..=4 {
        let (status, _, body) = get(front.addr, "/", &[]).await;
        assert_eq!(status, StatusCode::OK, "round {round}");
        assert_eq!(&body[..], b"ok");
        assert_eq!(accepted.load(Ordering::SeqCst), round);
        // The close reaches the proxy while the connection sits idle.
        eventually("the close is noticed", || {
            plain_pool(&front).idle_open_count(false) == 0
        })
        .await;
    }
    origin.abort();
}

#[tokio::test]
async fn connection_close_responses_are_not_reused() {
    let origin = connection_counting_origin(false, true);
    let front = front(Proxy::new(settings(&origin.url())).unwrap(), false);
    for round in 1..=5 {
        let (status, headers, body) = get(front.addr, "/", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&body[..], b"ok");
        assert!(!headers.contains_key(header::CONNECTION));
        assert_eq!(origin.accepted(), round);
        assert_eq!(plain_pool(&front).idle_count(), 0);
    }
    eventually("origin connections closed", || origin.open() == 0).await;
}

#[tokio::test]
async fn idle_origin_connections_never_exceed_the_cap() {
    let origin = connection_counting_origin(true, false);
    let mut proxy = Proxy::new(settings(&origin.url())).unwrap();
    let cap = 2;
    proxy.direct = Some(Arc::new(DirectPool::new(
        &origin.addr.to_string(),
        PoolLimits {
            max_idle: cap,
            ..PLAIN_HTTP_POOL
        },
        Arc::default(),
    )));
    let front = front(proxy, false);
    let burst = 6;
    let requests: Vec<_> = (0..burst)
        .map(|_| tokio::spawn(get(front.addr, "/", &[])))
        .collect();
    eventually("every request reached the origin", || {
        origin.accepted() == burst
    })
    .await;
    origin.release(usize::try_from(burst).unwrap());
    for request in requests {
        assert_eq!(request.await.unwrap().0, StatusCode::OK);
    }
    eventually("holds released", || front.holds() == 0).await;
    assert_eq!(plain_pool(&front).idle_count(), cap);
    eventually("the surplus closed", || {
        origin.open() == i64::try_from(cap).unwrap()
    })
    .await;
    origin.release(10);
    for _ in 0..10 {
        assert_eq!(get(front.addr, "/", &[]).await.0, StatusCode::OK);
    }
    assert_eq!(
        origin.accepted(),
        burst,
        "the kept connections serve what follows"
    );
}

#[tokio::test]
async fn clients_get_http_1_1_and_keep_alive_from_an_http_1_0_origin() {
    // A legacy origin: HTTP/1.0, one answer per connection.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let origin = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let mut seen = Vec::new();
                let mut chunk = [0u8; 1024];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => seen.extend_from_slice(&chunk[..read]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            });
        }
    });
    let front = front(
        Proxy::new(settings(&format!("http://{addr}"))).unwrap(),
        false,
    );
    let mut conn = connect(front.addr).await;
    // A GET takes the direct exchange, a POST with a body the pooled client.
    for (method, body) in [
        (Method::GET, Bytes::new()),
        (Method::POST, Bytes::from_static(b"form=1")),
        (Method::GET, Bytes::new()),
    ] {
        let response = tokio::time::timeout(
            PATIENCE,
            conn.sender
                .send_request(request(method.clone(), "/", &[], full(body))),
        )
        .await
        .expect("response in time")
        .unwrap();
        assert_eq!(response.version(), Version::HTTP_11, "{method}");
        assert_eq!(
            response.into_body().collect().await.unwrap().to_bytes(),
            "ok"
        );
    }
    assert!(
        !conn.sender.is_closed(),
        "the client's connection stays open"
    );
    origin.abort();
}

#[test]
fn only_event_streams_end_on_drain() {
    let with_type = |value: &'static str| {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
        headers
    };
    assert!(is_event_stream(&with_type("text/event-stream")));
    assert!(is_event_stream(&with_type(
        "Text/Event-Stream; charset=utf-8"
    )));
    assert!(is_event_stream(&with_type(" text/event-stream ;x=y")));
    assert!(!is_event_stream(&with_type("text/event-streams")));
    assert!(!is_event_stream(&with_type("text/html")));
    assert!(!is_event_stream(&HeaderMap::new()));
}
