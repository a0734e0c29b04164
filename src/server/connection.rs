//! One client connection: hyper's HTTP/1.1 and HTTP/2 server wrapped in the smuggling guard and
//! the connection's deadlines, each request handed to the pipeline with panics turned into a 500.
//! A plain-HTTP connection starts in [`super::h1_loop`], which hands it here at its first request
//! that is not a plain `GET`.
//! The same code serves a plain TCP stream and a TLS one ([`ClientStream`]); which it is, is
//! known at compile time, so the plain path carries nothing of TLS.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use futures_util::FutureExt;
use futures_util::future::Either;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::activity::{ConnLimits, ConnectionActivity, CountedBody};
use super::deadline::IdleDeadline;
use super::send_limit::StreamExecutor;
use crate::app::App;
use crate::pipeline::ConnInfo;
use crate::pipeline::identity::is_html_client;
use crate::respond::Rejection;
use crate::sys::workers::OpenConnection;
use crate::wire::client_body::ClientBody;
use crate::wire::limits::{HEADER_READ_TIMEOUT, MAX_HEAD_BYTES};
use crate::wire::smuggling::{FramingGuard, FramingWatch, Refusal};

/// `send_limit`: how long an HTTP/2 stream's answer may wait on the client's flow control before
/// the stream is reset.
pub(super) fn connection_builder(send_limit: Duration) -> auto::Builder<StreamExecutor> {
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

/// A stream a client connection is served over.
pub(super) trait ClientStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Concert's own TLS: requests say so (Secure cookies, `X-Forwarded-Proto: https`) and
    /// answers carry HSTS when it is set.
    const TLS: bool;
}

impl ClientStream for TcpStream {
    const TLS: bool = false;
}

impl ClientStream for tokio_rustls::server::TlsStream<TcpStream> {
    const TLS: bool = true;
}

/// Serves a plain TCP connection until it ends; `stop_signal` turning true (the worker
/// stopping) asks it to finish what is in flight and close. Plain keep-alive `GET`s are
/// answered by [`super::h1_loop`], the rest by hyper.
pub(super) fn serve_plain(
    builder: &Arc<auto::Builder<StreamExecutor>>,
    stop_signal: tokio::sync::watch::Receiver<bool>,
    stream: TcpStream,
    peer: SocketAddr,
    app: Arc<App>,
    held: OpenConnection,
) -> impl Future<Output = ()> + Send + 'static {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(ConnectionActivity::default());
    super::h1_loop::serve(
        builder.clone(),
        stop_signal,
        stream,
        peer,
        activity,
        app,
        held,
    )
}

/// Serves one connection over `stream` until it ends. `activity` was made when the connection
/// was accepted: the first request's deadline counts from then (a TLS handshake included).
pub(super) fn serve_connection<S: ClientStream>(
    builder: &Arc<auto::Builder<StreamExecutor>>,
    stop_signal: tokio::sync::watch::Receiver<bool>,
    stream: S,
    peer: SocketAddr,
    activity: Arc<ConnectionActivity>,
    app: Arc<App>,
    held: OpenConnection,
) -> impl Future<Output = ()> + Send + 'static {
    let conn = ConnInfo {
        peer: Some(crate::pipeline::identity::unmap(peer.ip())),
        tls: S::TLS,
    };
    let stream = deadline_stream(stream, &activity, &app, &held);
    serve_hyper(builder, stop_signal, stream, conn, activity, app, held)
}

/// `stream` under the connection's read and write deadlines.
pub(super) fn deadline_stream<S>(
    stream: S,
    activity: &Arc<ConnectionActivity>,
    app: &App,
    held: &OpenConnection,
) -> IdleDeadline<S> {
    let config = &app.generation().config;
    let limits = ConnLimits {
        head: HEADER_READ_TIMEOUT,
        idle: config.keep_alive_idle,
        send: config.client_send_timeout,
    };
    let crowded = held.crowding(config.keep_alive_crowd);
    IdleDeadline::new(stream, activity.clone(), limits, crowded)
}

/// Serves the connection with hyper, behind the smuggling guard, until it ends.
pub(super) fn serve_hyper<S: ClientStream>(
    builder: &Arc<auto::Builder<StreamExecutor>>,
    mut stop_signal: tokio::sync::watch::Receiver<bool>,
    stream: IdleDeadline<S>,
    conn: ConnInfo,
    activity: Arc<ConnectionActivity>,
    app: Arc<App>,
    held: OpenConnection,
) -> impl Future<Output = ()> + Send + 'static {
    let watch = Arc::new(FramingWatch::default());
    let idle = activity.clone();
    let io = TokioIo::new(FramingGuard::new(stream, watch.clone()));
    let service = service_fn(move |req: hyper::Request<Incoming>| {
        let app_for_hsts = &app;
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
        // Combinators rather than an `async` block, which would keep the request in its own
        // state beside the pipeline's future that holds it too.
        let connect = req.method() == http::Method::CONNECT;
        let refused = refusal.is_some();
        let answer = match refusal {
            Some(refusal) => Either::Left(std::future::ready(refused_framing(&app, &req, refusal))),
            None => Either::Right(handle_recovering(app, conn, req.map(ClientBody::Streaming))),
        };
        // Only over TLS: a plain connection's service does not hold the application twice.
        let hsts_from = S::TLS.then(|| app_for_hsts.clone());
        answer.map(move |mut response| {
            // Before hyper writes it: the guard may stop once the connection leaves HTTP/1,
            // and a tunnel has no idle deadline.
            if !refused && watch.record_answer(connect, response.status()) {
                exchange.tunnel_opened();
            }
            if let Some(app) = hsts_from
                && let Some(hsts) = &app.generation().hsts
            {
                response
                    .headers_mut()
                    .insert(http::header::STRICT_TRANSPORT_SECURITY, hsts.clone());
            }
            Ok::<_, Infallible>(response.map(|body| Body::new(CountedBody::new(body, exchange))))
        })
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
    Rejection::BadRequest(refusal.reason().to_string())
        .for_client(is_html_client(req.headers()))
        .into_response()
}

/// Runs the pipeline; a panic becomes an empty 500 and one log line, never a dead connection task
/// with a header dump. The one entry for both hyper's requests and the plain loop's, so the
/// request path is compiled once.
pub(super) fn handle_recovering(
    app: Arc<App>,
    conn: ConnInfo,
    req: hyper::Request<ClientBody<Incoming>>,
) -> impl Future<Output = http::Response<Body>> + Send {
    // A reference-count bump; the path is only formatted if the pipeline panics.
    let uri = req.uri().clone();
    recovering(uri, crate::pipeline::handle_client_body(app, conn, req))
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
}
