//! The client's side of a Concert site: GET and POST under `/_concert`, with the limits the
//! chain clients use (no redirects, a bounded wait, answers read up to 4 MiB).

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::Full;

use crate::fastlane::chains::rpc::{MAX_ANSWER_BYTES, PooledClient, pooled_client, read_bounded};

const USER_AGENT_VALUE: &str = concat!("concert-client/", env!("CARGO_PKG_VERSION"));

/// How long one exchange may take. A payment's answer waits for its settlement, which the
/// server bounds by the offer's timeout (at most 300 s) plus 90 s.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(420);

/// One answer of the site.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    /// The JSON body, `Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The `error` code of a refusal, or the status when the body names none.
    pub fn error_code(&self) -> String {
        match self.json().get("error").and_then(|code| code.as_str()) {
            Some(code) => code.to_owned(),
            None => format!("HTTP {}", self.status),
        }
    }

    /// `Retry-After` in seconds, when the site gave one.
    pub fn retry_after(&self) -> Option<u64> {
        self.headers
            .get(http::header::RETRY_AFTER)?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// A Concert site reached at its origin.
pub struct Site {
    origin: String,
    http: PooledClient,
    timeout: Duration,
}

impl Site {
    /// `origin` is already checked (https, or http to a loopback address).
    pub fn new(origin: &str) -> Result<Site, String> {
        let http = pooled_client().map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Site {
            origin: origin.trim_end_matches('/').to_owned(),
            http,
            timeout: EXCHANGE_TIMEOUT,
        })
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub async fn get(&self, path: &str) -> Result<Answer, String> {
        self.exchange(Method::GET, path, &[], Bytes::new()).await
    }

    /// POSTs `body` (JSON) with `headers` to `path` (below `/_concert`).
    pub async fn post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Answer, String> {
        self.exchange(
            Method::POST,
            path,
            headers,
            Bytes::copy_from_slice(body.as_bytes()),
        )
        .await
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, String> {
        let url = format!("{}/_concert{path}", self.origin);
        let uri: Uri = url.parse().map_err(|_| format!("{url}: not a URL"))?;
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE);
        if !body.is_empty() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| format!("{url}: {e}"))?;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let declared = headers
                .get(CONTENT_LENGTH)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.parse::<u64>().ok());
            if declared.is_some_and(|len| len > MAX_ANSWER_BYTES as u64) {
                return Err(format!("{url}: answer too large"));
            }
            let body = read_bounded(response.into_body())
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            Ok(Answer {
                status,
                headers,
                body,
            })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("{url}: no answer within {} s", self.timeout.as_secs()))?
    }
}

/// Whether `origin` may be paid over: https, or plain http to a loopback address (a test
/// site), with no path, query or credentials.
pub fn check_origin(origin: &str) -> Result<String, String> {
    let trimmed = origin.trim().trim_end_matches('/');
    let parsed =
        url::Url::parse(trimmed).map_err(|_| format!("CONCERT_ORIGIN {origin:?} is not a URL"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    let scheme_ok = parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback);
    if !scheme_ok {
        return Err(format!(
            "CONCERT_ORIGIN {origin:?} must be https (plain http only to a loopback address)"
        ));
    }
    if parsed.path() != "/"
        || parsed.query().is_some()
        || parsed.fragment().is_some()
        || !parsed.username().is_empty()
        || parsed.password().is_some()
    {
        return Err(format!(
            "CONCERT_ORIGIN {origin:?} must be the site's origin alone (no path, query or credentials)"
        ));
    }
    Ok(trimmed.to_owned())
}
