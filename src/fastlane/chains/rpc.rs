//! A small JSON-RPC client for chain endpoints, with the limits every chain call keeps: no
//! redirects (an endpoint that moves is misconfigured, not followed), a 30 s deadline per
//! call, and answers read incrementally and refused past 4 MiB. TLS is rustls with the ring
//! provider and the bundled web roots, so the binary needs no system certificate store.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::fastlane::mechanism::ChainError;

/// Deadline of one call, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// One endpoint of one network.
#[derive(Debug, Clone)]
pub struct JsonRpcClient {
    http: reqwest::Client,
    url: reqwest::Url,
    network: String,
}

#[derive(Deserialize)]
struct Envelope<T> {
    #[serde(default = "Option::default")]
    result: Option<T>,
    #[serde(default)]
    error: Option<Value>,
}

impl JsonRpcClient {
    /// A client for `url`; `network` only labels errors.
    pub fn new(network: &str, url: &str) -> Result<JsonRpcClient, ChainError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| unavailable(network, format!("bad endpoint URL: {e}")))?;
        let http =
            build_http_client().map_err(|e| unavailable(network, format!("HTTP client: {e}")))?;
        Ok(JsonRpcClient {
            http,
            url,
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
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut response = self
            .http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| self.fail(format!("{method}: {}", describe(&e))))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.fail(format!("{method}: HTTP {status}")));
        }
        if response
            .content_length()
            .is_some_and(|len| len > MAX_RESPONSE_BYTES as u64)
        {
            return Err(self.fail(format!("{method}: answer larger than 4 MiB")));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.fail(format!("{method}: {}", describe(&e))))?
        {
            if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(self.fail(format!("{method}: answer larger than 4 MiB")));
            }
            bytes.extend_from_slice(&chunk);
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

/// reqwest's error text plus its cause chain, which carries the useful part.
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn build_http_client() -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(CALL_TIMEOUT)
        .connect_timeout(CALL_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| describe(&e))
}
