//! A small JSON-RPC client for chain endpoints, with the limits every chain call keeps: no
//! redirects (hyper's client never follows one; an endpoint that moves is misconfigured, and its
//! 3xx is an error), a 30 s deadline per call from connect to the last byte, and answers read
//! frame by frame and refused past 4 MiB. TLS is rustls with the ring provider and the bundled
//! web roots, the stack the proxy already links, so the binary needs no system certificate
//! store and no second HTTP stack.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, USER_AGENT};
use http::{Request, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_rustls::{ConfigBuilderExt as _, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::fastlane::mechanism::ChainError;

/// Deadline of one call, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

const USER_AGENT_VALUE: &str = concat!("concert/", env!("CARGO_PKG_VERSION"));

/// One endpoint of one network. Cheap to clone; connections are pooled.
#[derive(Clone)]
pub struct JsonRpcClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    url: Uri,
    network: String,
}

impl std::fmt::Debug for JsonRpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonRpcClient")
            .field("url", &self.url)
            .field("network", &self.network)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Envelope<T> {
    #[serde(default = "Option::default")]
    result: Option<T>,
    #[serde(default)]
    error: Option<Value>,
}

impl JsonRpcClient {
    /// A client for `url` (http or https; whether plain http is allowed is the configuration's
    /// decision, made before this); `network` only labels errors.
    pub fn new(network: &str, url: &str) -> Result<JsonRpcClient, ChainError> {
        let uri: Uri = url
            .parse()
            .map_err(|e| unavailable(network, format!("bad endpoint URL: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(unavailable(
                network,
                format!("endpoint {url:?} is not an http(s) URL"),
            ));
        }
        let http =
            build_http_client().map_err(|e| unavailable(network, format!("HTTP client: {e}")))?;
        Ok(JsonRpcClient {
            http,
            url: uri,
            network: network.to_string(),
        })
    }

    pub fn network(&self) -> &str {
        &self.network
    }

    /// Calls `method` and returns its `result` as a JSON value. Integers beyond 64 bits lose
    /// precision in a `Value`; callers that read such numbers use [`JsonRpcClient::call_as`].
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ChainError> {
        self.call_as(method, params).await
    }

    /// Calls `method` and deserializes its `result` straight into `T`, so numbers are read
    /// into their exact types (an integer that does not fit is an error, never rounded).
    pub async fn call_as<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, ChainError> {
        tokio::time::timeout(CALL_TIMEOUT, self.call_unbounded(method, params))
            .await
            .map_err(|_| self.fail(format!("{method}: no complete answer in time")))?
    }

    async fn call_unbounded<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, ChainError> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let request = Request::post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| self.fail(format!("{method}: {e}")))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| self.fail(format!("{method}: {}", describe(&e))))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.fail(format!("{method}: HTTP {status}")));
        }
        let declared = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|len| len > MAX_RESPONSE_BYTES as u64) {
            return Err(self.fail(format!("{method}: answer larger than 4 MiB")));
        }
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| self.fail(format!("{method}: {}", describe(&e))))?;
            if let Ok(data) = frame.into_data() {
                if bytes.len() + data.len() > MAX_RESPONSE_BYTES {
                    return Err(self.fail(format!("{method}: answer larger than 4 MiB")));
                }
                bytes.extend_from_slice(&data);
            }
        }
        let envelope: Envelope<T> = serde_json::from_slice(&bytes)
            .map_err(|e| self.fail(format!("{method}: unreadable answer: {e}")))?;
        if let Some(error) = envelope.error {
            return Err(self.fail(format!("{method}: {error}")));
        }
        envelope
            .result
            .ok_or_else(|| self.fail(format!("{method}: answer has no result")))
    }

    fn fail(&self, message: String) -> ChainError {
        unavailable(&self.network, message)
    }
}

fn unavailable(network: &str, message: String) -> ChainError {
    ChainError::Unavailable {
        network: network.to_string(),
        message,
    }
}

/// An error's text plus its cause chain, which carries the useful part.
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn build_http_client() -> Result<Client<HttpsConnector<HttpConnector>, Full<Bytes>>, String> {
    let mut tcp = HttpConnector::new();
    // The TLS layer decides which schemes are allowed.
    tcp.enforce_http(false);
    tcp.set_connect_timeout(Some(CALL_TIMEOUT));
    tcp.set_nodelay(true);
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_webpki_roots()
    .with_no_client_auth();
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector))
}
