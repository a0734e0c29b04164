//! Side listeners (the admin portal, the plain-HTTP port beside HTTPS): an axum [`Router`]
//! served over HTTP/1 with the public listener's connection deadlines (head, idle and send
//! limits), on the calling runtime, and drained when told to stop. With a TLS configuration,
//! each connection completes its handshake within the head limit first.
//!
//! Each request carries a [`SideConn`] extension (and axum's `ConnectInfo`) naming the socket's
//! two ends: a side listener decides who may use it from the socket peer alone.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use futures_util::FutureExt as _;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tower::ServiceExt as _;

use super::activity::{ConnLimits, ConnectionActivity, CountedBody};
use super::deadline::IdleDeadline;

/// The two ends of a side-listener connection, IPv4-mapped peers unmapped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SideConn {
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
}

/// How long a side listener's connections may wait; the public listener's defaults.
pub(crate) const SIDE_LIMITS: ConnLimits = ConnLimits {
    head: crate::wire::limits::HEADER_READ_TIMEOUT,
    idle: Duration::from_secs(120),
    send: Duration::from_secs(30),
};

/// Serves `router` on `listener` (over TLS with `tls`) until `shutdown` resolves, then lets open
/// exchanges finish for up to `grace` and closes what is left.
pub(crate) async fn serve_router(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    tls: Option<Arc<ServerConfig>>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "side listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().unwrap_or(peer);
        let conn = SideConn {
            peer: SocketAddr::new(crate::pipeline::identity::unmap(peer.ip()), peer.port()),
            local,
        };
        let router = router.clone();
        let watcher = graceful.watcher();
        match &tls {
            None => {
                tokio::spawn(serve_side(stream, conn, router, limits, watcher));
            }
            Some(config) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(config));
                tokio::spawn(async move {
                    match tokio::time::timeout(limits.head, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => serve_side(stream, conn, router, limits, watcher).await,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "side listener: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!("side listener: TLS handshake timed out"),
                    }
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("side listener: grace period over; closing remaining connections");
    }
}

/// One side connection over `stream`, until it ends or the drain closes it.
async fn serve_side<S>(
    stream: S,
    conn: SideConn,
    router: Router,
    limits: ConnLimits,
    watcher: Watcher,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(ConnectionActivity::default());
    let never_crowded: crate::sys::workers::Crowded = Arc::new(|| false);
    let stream = IdleDeadline::new(stream, activity.clone(), limits, never_crowded);
    let service = service_fn(move |mut req: hyper::Request<Incoming>| {
        let open = activity.exchange_opened();
        req.extensions_mut().insert(conn);
        req.extensions_mut().insert(ConnectInfo(conn.peer));
        router.clone().oneshot(req).map(move |answered| {
            answered.map(|response| response.map(|body| Body::new(CountedBody::new(body, open))))
        })
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = watcher.watch(connection).await {
        tracing::debug!(error = %e, "side connection ended with an error");
    }
}
