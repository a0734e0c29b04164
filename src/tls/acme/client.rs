//! The HTTPS client the ACME protocol runs over: the same hyper and rustls (ring) as the rest of
//! Concert, trusting the bundled web roots plus any the operator adds for a private CA.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

/// A CA that does not answer within this is treated as unreachable for this attempt.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type Inner = Client<HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>;

#[derive(Clone)]
pub(crate) struct AcmeHttp {
    inner: Inner,
}

impl AcmeHttp {
    /// `extra_roots` are further CA certificates trusted for the directory's HTTPS;
    /// `plain_allowed` lets requests go over plain HTTP, for a directory on loopback.
    pub(crate) fn new(
        extra_roots: &[CertificateDer<'static>],
        plain_allowed: bool,
    ) -> Result<AcmeHttp, String> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for certificate in extra_roots {
            roots
                .add(certificate.clone())
                .map_err(|error| format!("an extra root is not usable: {error}"))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let builder = HttpsConnectorBuilder::new().with_tls_config(tls);
        let builder = if plain_allowed {
            builder.https_or_http()
        } else {
            builder.https_only()
        };
        let connector = builder.enable_http1().enable_http2().wrap_connector(tcp);
        let inner = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        Ok(AcmeHttp { inner })
    }
}

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        request: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let pending = self.inner.request(request);
        Box::pin(async move {
            match tokio::time::timeout(REQUEST_TIMEOUT, pending).await {
                Ok(Ok(response)) => Ok(BytesResponse::from(response)),
                Ok(Err(error)) => Err(instant_acme::Error::Other(describe(&error).into())),
                Err(_) => Err(instant_acme::Error::Other(
                    format!("no answer within {}s", REQUEST_TIMEOUT.as_secs()).into(),
                )),
            }
        })
    }
}

/// An error with its causes, which is where hyper keeps the useful part ("connection
/// refused", "invalid peer certificate").
pub(crate) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
