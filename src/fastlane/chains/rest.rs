//! Bounded JSON GETs against a REST endpoint (the Hedera mirror node), with the limits of
//! [`super::rpc`]: no redirects, 30 s per call from connect to the last body byte, answers
//! abandoned past 4 MiB, and numbers read exactly into the caller's typed fields.

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, USER_AGENT};
use http::{Request, StatusCode, Uri};
use http_body_util::Full;
use serde::de::DeserializeOwned;

use super::rpc::{
    CALL_TIMEOUT, MAX_ANSWER_BYTES, PooledClient, RpcError, pooled_client, read_bounded,
};

const USER_AGENT_VALUE: &str = concat!("concert/", env!("CARGO_PKG_VERSION"));

/// A client for one REST base URL (`https://testnet.mirrornode.hedera.com`). Cheap to clone.
#[derive(Clone)]
pub struct RestClient {
    /// The base without a trailing slash; paths are appended to it.
    base: String,
    http: PooledClient,
    timeout: Duration,
}

impl std::fmt::Debug for RestClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RestClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl RestClient {
    /// A client for `base` (http or https, no query).
    pub fn new(base: &str) -> Result<RestClient, RpcError> {
        let trimmed = base.trim_end_matches('/');
        let uri: Uri = trimmed
            .parse()
            .map_err(|_| RpcError::Endpoint(base.to_owned()))?;
        let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
        if !scheme_ok || uri.host().is_none() || uri.query().is_some() {
            return Err(RpcError::Endpoint(base.to_owned()));
        }
        Ok(RestClient {
            base: trimmed.to_owned(),
            http: pooled_client()?,
            timeout: CALL_TIMEOUT,
        })
    }

    /// Replaces the whole-call limit (tests shorten it).
    pub fn with_timeout(mut self, timeout: Duration) -> RestClient {
        self.timeout = timeout;
        self
    }

    /// GETs `path` (starting with `/`, query allowed) below the base and reads the JSON answer
    /// as `T`. A 404 is `Ok(None)`: the resource does not exist (yet).
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>, RpcError> {
        tokio::time::timeout(self.timeout, self.get_unbounded(path))
            .await
            .map_err(|_| RpcError::Timeout)?
    }

    async fn get_unbounded<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>, RpcError> {
        // A path is appended, never a URL followed: the answer's links cannot send the client
        // to another host.
        if !path.starts_with('/') || path.starts_with("//") {
            return Err(RpcError::Endpoint(path.to_owned()));
        }
        let uri: Uri = format!("{}{path}", self.base)
            .parse()
            .map_err(|_| RpcError::Endpoint(path.to_owned()))?;
        let request = Request::get(uri)
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .body(Full::new(Bytes::new()))
            .map_err(|error| RpcError::Transport(error.to_string()))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|error| RpcError::Transport(error.to_string()))?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
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
        let answer = read_bounded(response.into_body()).await?;
        serde_json::from_slice(&answer)
            .map(Some)
            .map_err(|error| RpcError::Malformed(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_must_be_http_urls_without_a_query() {
        assert!(RestClient::new("https://testnet.mirrornode.hedera.com/").is_ok());
        assert!(RestClient::new("http://127.0.0.1:5551").is_ok());
        assert!(RestClient::new("ftp://example.com").is_err());
        assert!(RestClient::new("https://example.com/?a=1").is_err());
    }

    #[tokio::test]
    async fn only_paths_below_the_base_are_fetched() {
        let client = RestClient::new("http://127.0.0.1:9").expect("client");
        for path in [
            "api/v1/accounts",
            "//evil.example/x",
            "http://evil.example/",
        ] {
            let result = client.get::<serde_json::Value>(path).await;
            assert!(matches!(result, Err(RpcError::Endpoint(_))), "{path}");
        }
    }
}
