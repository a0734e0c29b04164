//! The general pooled client, for `https` origins and protocol upgrades: hyper's pooled client
//! over rustls, with the connection attempt bounded as a whole.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::Uri;
use hyper_rustls::{ConfigBuilderExt as _, HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::error::ProxyError;
use super::pool::{CONNECT_TIMEOUT, POOL_IDLE_TIMEOUT, POOL_MAX_IDLE_PER_HOST, TCP_KEEPALIVE};

/// Time allowed for the TLS handshake once connected.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn tls_builder()
-> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, rustls::Error> {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
}

pub(super) fn system_tls_config() -> Result<rustls::ClientConfig, ProxyError> {
    match tls_builder()?.with_native_roots() {
        Ok(builder) => Ok(builder.with_no_client_auth()),
        Err(err) => {
            tracing::warn!(error = %err, "proxy: no usable system root certificates, using the bundled ones");
            Ok(tls_builder()?.with_webpki_roots().with_no_client_auth())
        }
    }
}

pub(super) fn tcp_connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    // The TLS layer on top decides which schemes are allowed.
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.set_nodelay(true);
    http
}

pub(super) fn pooled_client(connector: HttpsConnector<HttpConnector>) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        // `Host` is always written by the header rewrite.
        .set_host(false)
        .build(BoundedConnector {
            inner: connector,
            limit: CONNECT_TIMEOUT + TLS_HANDSHAKE_TIMEOUT,
        })
}

pub(super) type UpstreamClient = Client<BoundedConnector, Body>;

type ConnectError = Box<dyn std::error::Error + Send + Sync>;

type OriginStream = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;

/// Bounds a whole connection attempt. The TCP connect has its own 5 s limit inside, so the
/// remainder bounds the TLS handshake, which the TLS connector itself does not.
#[derive(Clone)]
pub(super) struct BoundedConnector {
    inner: HttpsConnector<HttpConnector>,
    limit: Duration,
}

impl tower::Service<Uri> for BoundedConnector {
    type Response = OriginStream;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<OriginStream, ConnectError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(format!("connecting took longer than {limit:?}").into()),
            }
        })
    }
}
