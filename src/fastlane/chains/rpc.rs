//! The one JSON-RPC client every chain uses, with the limits every chain call shares: no
//! redirects are followed (hyper's client never follows them; an endpoint that moves is
//! misconfigured, and its 3xx is an error), each call is bounded to 30 s from connect to the
//! last body byte, and an answer is read frame by frame and abandoned once it passes 4 MiB.
//!
//! Numbers stay exact: `result` is deserialised straight into the caller's typed structure, so
//! an integer is read into its `u64` field digit for digit, and one that does not fit is an
//! error, never a rounded float.
//!
//! An answer naming another request's id is refused; one without an id is taken, because
//! rippled's HTTP interface answers without one.
//!
//! The stack is hyper's pooled client over rustls with the ring provider and the bundled web
//! roots, the one the proxy and the address-details client already use; no second HTTP or
//! crypto stack is linked for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
use serde_json::Value;

/// Whole-call limit: connect, request, answer and body.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

const USER_AGENT_VALUE: &str = concat!("concert/", env!("CARGO_PKG_VERSION"));

/// Why a call gave no result.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("endpoint {0:?} is not an http(s) URL")]
    Endpoint(String),
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("no complete answer in time")]
    Timeout,
    #[error("transport: {0}")]
    Transport(String),
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("answer larger than {} bytes", MAX_ANSWER_BYTES)]
    TooLarge,
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// The endpoint answered with a JSON-RPC error object.
    #[error("error {code}: {message}")]
    Remote { code: i64, message: String },
}

/// The HTTP client type behind every chain client.
pub(crate) type PooledClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client for one JSON-RPC endpoint. Cheap to share; connections are pooled.
#[derive(Clone)]
pub struct JsonRpcClient {
    endpoint: Uri,
    http: PooledClient,
    next_id: Arc<AtomicU64>,
    timeout: Duration,
}

impl std::fmt::Debug for JsonRpcClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("JsonRpcClient")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl JsonRpcClient {
    /// A client for `endpoint` (http or https; whether plain http is allowed is the
    /// configuration's decision, made before this).
    pub fn new(endpoint: &str) -> Result<JsonRpcClient, RpcError> {
        let uri: Uri = endpoint
            .parse()
            .map_err(|_| RpcError::Endpoint(endpoint.to_owned()))?;
        let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
        if !scheme_ok || uri.host().is_none() {
            return Err(RpcError::Endpoint(endpoint.to_owned()));
        }
        let http = pooled_client()?;
        Ok(JsonRpcClient {
            endpoint: uri,
            http,
            next_id: Arc::new(AtomicU64::new(1)),
            timeout: CALL_TIMEOUT,
        })
    }

    /// Replaces the whole-call limit (tests shorten it).
    pub fn with_timeout(mut self, timeout: Duration) -> JsonRpcClient {
        self.timeout = timeout;
        self
    }

    pub fn endpoint(&self) -> &Uri {
        &self.endpoint
    }

    /// Calls `method` with `params` and reads `result` as `T`. A `null` or missing result
    /// reads as `T` from `null` (so `Option<_>` results work).
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, RpcError> {
        tokio::time::timeout(self.timeout, self.call_unbounded(method, params))
            .await
            .map_err(|_| RpcError::Timeout)?
    }

    async fn call_unbounded<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": method,
            "params": params,
        });
        let body =
            serde_json::to_vec(&body).map_err(|error| RpcError::Malformed(error.to_string()))?;
        let request = Request::post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| RpcError::Transport(error.to_string()))?;
        let answer = self.exchange(request).await?;
        parse_answer(&answer, id)
    }

    /// GETs `path_and_query` (beginning with `/`) below the endpoint's path and reads the JSON
    /// answer as `T`, with the same limits as [`JsonRpcClient::call`]: for REST companions of
    /// an RPC endpoint, such as Stellar's Horizon.
    pub async fn get_json<T: DeserializeOwned>(&self, path_and_query: &str) -> Result<T, RpcError> {
        let base = self.endpoint.path().trim_end_matches('/');
        let target = format!("{base}{path_and_query}");
        let mut parts = self.endpoint.clone().into_parts();
        parts.path_and_query = Some(
            target
                .parse()
                .map_err(|_| RpcError::Endpoint(format!("{}{path_and_query}", self.endpoint)))?,
        );
        let uri = Uri::from_parts(parts).map_err(|error| RpcError::Endpoint(error.to_string()))?;
        let request = Request::get(uri)
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .body(Full::new(Bytes::new()))
            .map_err(|error| RpcError::Transport(error.to_string()))?;
        let exchange = async {
            let answer = self.exchange(request).await?;
            serde_json::from_slice(&answer).map_err(|error| RpcError::Malformed(error.to_string()))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| RpcError::Timeout)?
    }

    /// Sends `request` and reads the whole answer body, refusing a non-2xx status (a redirect
    /// included) and anything past the size limit.
    async fn exchange(&self, request: Request<Full<Bytes>>) -> Result<Vec<u8>, RpcError> {
        let response = self
            .http
            .request(request)
            .await
            .map_err(|error| RpcError::Transport(error.to_string()))?;
        if !response.status().is_success() {
            return Err(RpcError::Status(response.status().as_u16()));
        }
        let declared = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|len| len > MAX_ANSWER_BYTES as u64) {
            return Err(RpcError::TooLarge);
        }
        read_bounded(response.into_body()).await
    }
}

/// The pooled hyper client every chain endpoint is reached with: rustls over ring with the
/// bundled web roots, http or https (whether plain http is allowed is decided by the settings
/// check), HTTP/1.1 or HTTP/2, connect bounded to the call limit.
pub(crate) fn pooled_client() -> Result<PooledClient, RpcError> {
    let mut tcp = HttpConnector::new();
    // The TLS layer decides which schemes are allowed.
    tcp.enforce_http(false);
    tcp.set_connect_timeout(Some(CALL_TIMEOUT));
    tcp.set_nodelay(true);
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|error| RpcError::Tls(error.to_string()))?
    .with_webpki_roots()
    .with_no_client_auth();
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(tcp);
    let http = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector);
    Ok(http)
}

/// Reads a body frame by frame, giving up as soon as it grows past the limit.
pub(crate) async fn read_bounded(mut body: hyper::body::Incoming) -> Result<Vec<u8>, RpcError> {
    let mut answer = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| RpcError::Transport(error.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if answer.len() + data.len() > MAX_ANSWER_BYTES {
                return Err(RpcError::TooLarge);
            }
            answer.extend_from_slice(&data);
        }
    }
    Ok(answer)
}

#[derive(Deserialize)]
struct Answer<T> {
    #[serde(default)]
    id: Value,
    #[serde(default = "Option::default")]
    result: Option<T>,
    #[serde(default)]
    error: Option<RemoteError>,
}

#[derive(Deserialize)]
struct RemoteError {
    code: i64,
    #[serde(default)]
    message: String,
}

/// The `result` of an answer to request `id`, or the error it reports.
fn parse_answer<T: DeserializeOwned>(answer: &[u8], id: u64) -> Result<T, RpcError> {
    let answer: Answer<T> =
        serde_json::from_slice(answer).map_err(|error| RpcError::Malformed(error.to_string()))?;
    if let Some(error) = answer.error {
        return Err(RpcError::Remote {
            code: error.code,
            message: error.message,
        });
    }
    if !answer.id.is_null() && answer.id.as_u64() != Some(id) {
        return Err(RpcError::Malformed(format!(
            "answer to request {} for request {id}",
            answer.id
        )));
    }
    match answer.result {
        Some(result) => Ok(result),
        None => serde_json::from_value(Value::Null)
            .map_err(|_| RpcError::Malformed("no result".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_integers_are_read_exactly_or_refused() {
        let exact: u64 = parse_answer(
            br#"{"jsonrpc":"2.0","id":7,"result":18446744073709551615}"#,
            7,
        )
        .expect("u64::MAX fits");
        assert_eq!(exact, u64::MAX);
        let too_big = parse_answer::<u64>(br#"{"id":7,"result":18446744073709551616}"#, 7);
        assert!(matches!(too_big, Err(RpcError::Malformed(_))));
    }

    #[test]
    fn errors_and_foreign_ids_are_not_results() {
        let remote = parse_answer::<u64>(br#"{"id":1,"error":{"code":-32602,"message":"bad"}}"#, 1);
        assert!(matches!(remote, Err(RpcError::Remote { code: -32602, .. })));
        let foreign = parse_answer::<u64>(br#"{"id":2,"result":1}"#, 1);
        assert!(matches!(foreign, Err(RpcError::Malformed(_))));
        let foreign = parse_answer::<u64>(br#"{"id":"1","result":1}"#, 1);
        assert!(matches!(foreign, Err(RpcError::Malformed(_))));
        // rippled answers without an id.
        let unnumbered: u64 = parse_answer(br#"{"result":5}"#, 4).expect("taken");
        assert_eq!(unnumbered, 5);
        let null: Option<u64> = parse_answer(br#"{"id":3,"result":null}"#, 3).expect("null");
        assert_eq!(null, None);
    }

    #[test]
    fn endpoints_must_be_http_urls() {
        assert!(JsonRpcClient::new("ftp://example.com").is_err());
        assert!(JsonRpcClient::new("not a url").is_err());
        assert!(JsonRpcClient::new("https://api.devnet.solana.com").is_ok());
    }
}
