//! The naddr client: `GET <base>/ip?addr=<ip>` against an naddr service, its base-URL rules, the
//! bound on lookups running and waiting, and the count of failed ones.
//!
//! The client is hyper's pooled client over rustls with the ring provider, the same stack the
//! proxy uses for `https` origins, so no second HTTP or crypto stack comes in for a few JSON
//! calls.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, USER_AGENT};
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_rustls::{ConfigBuilderExt as _, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::{Semaphore, watch};

use super::details::{Facts, IpDetails, Ipv8Forms};

/// Lookups sent to the service at once.
pub(super) const PARALLEL_LOOKUPS: usize = 8;
/// Lookups running or waiting for a turn; a miss beyond this is not fetched this time.
pub(super) const MAX_IN_FLIGHT: usize = 1024;
/// Whole-call limit: connect, answer and body.
pub(super) const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest answer read; a naddr answer is a few hundred bytes.
pub(super) const MAX_ANSWER_BYTES: usize = 64 * 1024;

const USER_AGENT_VALUE: &str = concat!("concert/", env!("CARGO_PKG_VERSION"));

/// Why a `NADDR_ADDR` value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseUrlError {
    #[error("is empty")]
    Empty,
    #[error("{0:?} is neither host:port nor an http(s) URL")]
    Malformed(String),
    #[error("{0:?}: only http and https are supported")]
    Scheme(String),
    #[error("{0:?} names no host")]
    NoHost(String),
    #[error("{0:?} carries credentials, which would show on the admin pages")]
    Credentials(String),
}

/// The base URL lookups are made under: scheme, host (and port) and path, without a trailing
/// `/`. A bare `host:port` means plain HTTP.
pub fn normalize_base_url(text: &str) -> Result<String, BaseUrlError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(BaseUrlError::Empty);
    }
    let malformed = || BaseUrlError::Malformed(text.to_string());
    let full = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let uri: Uri = full.parse().map_err(|_| malformed())?;
    let scheme = uri.scheme_str().ok_or_else(malformed)?.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(BaseUrlError::Scheme(text.to_string()));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| BaseUrlError::NoHost(text.to_string()))?;
    if authority.as_str().contains('@') {
        return Err(BaseUrlError::Credentials(text.to_string()));
    }
    if authority.host().is_empty() {
        return Err(BaseUrlError::NoHost(text.to_string()));
    }
    let path = uri.path().trim_end_matches('/');
    Ok(format!("{scheme}://{authority}{path}"))
}

/// What the service said about an address.
#[derive(Debug)]
pub(super) enum Answer {
    Found(Arc<IpDetails>),
    /// 404: not in the service's data. A miss, not a failure.
    NotFound,
}

/// Why a lookup failed; every one is counted.
#[derive(Debug, thiserror::Error)]
pub(super) enum FetchError {
    #[error("no answer within {}s", LOOKUP_TIMEOUT.as_secs())]
    Timeout,
    #[error("cannot build the request: {0}")]
    Request(#[from] http::Error),
    #[error("{0}")]
    Connection(#[from] hyper_util::client::legacy::Error),
    #[error("answered {0}")]
    Status(StatusCode),
    #[error("cannot read the answer (over 64 KiB or cut short): {0}")]
    Body(String),
    #[error("the answer is not naddr JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the answer reports failure: {0}")]
    Unsuccessful(String),
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// A lookup under way: while it lives the address counts as in flight; dropping it (after the
/// answer is cached) wakes whoever waits on it.
pub(super) struct InFlight {
    client: Arc<NaddrClient>,
    addr: IpAddr,
    done: watch::Sender<()>,
}

impl InFlight {
    pub(super) fn addr(&self) -> IpAddr {
        self.addr
    }

    pub(super) fn waiter(&self) -> watch::Receiver<()> {
        self.done.subscribe()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.client.in_flight.lock().remove(&self.addr);
    }
}

/// The outcome of asking to look an address up.
pub(super) enum Claim {
    /// The caller runs the lookup.
    Started(InFlight),
    /// Already under way; the receiver closes when it ends.
    Joined(watch::Receiver<()>),
    /// Too many under way; try on a later view.
    Full,
}

pub(super) struct NaddrClient {
    base: String,
    http: HttpClient,
    pub(super) permits: Semaphore,
    in_flight: Mutex<HashMap<IpAddr, watch::Receiver<()>>>,
    failures: AtomicU64,
    /// Whether the last lookup worked, so a run of failures is logged once, not per address.
    healthy: AtomicBool,
}

impl NaddrClient {
    pub(super) fn new(base: String) -> Result<NaddrClient, rustls::Error> {
        let mut tcp = HttpConnector::new();
        // The TLS layer decides which schemes are allowed.
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(LOOKUP_TIMEOUT));
        tcp.set_nodelay(true);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(base.starts_with("https:"))?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(PARALLEL_LOOKUPS)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        Ok(NaddrClient {
            base,
            http,
            permits: Semaphore::new(PARALLEL_LOOKUPS),
            in_flight: Mutex::new(HashMap::new()),
            failures: AtomicU64::new(0),
            healthy: AtomicBool::new(true),
        })
    }

    pub(super) fn base(&self) -> &str {
        &self.base
    }

    pub(super) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    pub(super) fn claim(self: &Arc<Self>, addr: IpAddr) -> Claim {
        let mut in_flight = self.in_flight.lock();
        if let Some(waiter) = in_flight.get(&addr) {
            return Claim::Joined(waiter.clone());
        }
        if in_flight.len() >= MAX_IN_FLIGHT {
            return Claim::Full;
        }
        let (done, waiter) = watch::channel(());
        in_flight.insert(addr, waiter);
        Claim::Started(InFlight {
            client: Arc::clone(self),
            addr,
            done,
        })
    }

    pub(super) fn record(&self, addr: IpAddr, outcome: &Result<Answer, FetchError>) {
        match outcome {
            Ok(_) => {
                if !self.healthy.swap(true, Ordering::Relaxed) {
                    tracing::info!(base = %self.base, "ipinfo: naddr service answers again");
                }
            }
            Err(error) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if self.healthy.swap(false, Ordering::Relaxed) {
                    tracing::warn!(base = %self.base, %addr, %error, "ipinfo: naddr lookup failed");
                } else {
                    tracing::debug!(base = %self.base, %addr, %error, "ipinfo: naddr lookup failed");
                }
            }
        }
    }

    /// One lookup, bounded in time and size.
    pub(super) async fn fetch(&self, addr: IpAddr) -> Result<Answer, FetchError> {
        tokio::time::timeout(LOOKUP_TIMEOUT, self.fetch_unbounded(addr))
            .await
            .map_err(|_| FetchError::Timeout)?
    }

    async fn fetch_unbounded(&self, addr: IpAddr) -> Result<Answer, FetchError> {
        let request = Request::get(format!("{}/ip?addr={addr}", self.base))
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .body(Empty::new())?;
        let response = self.http.request(request).await?;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Ok(Answer::NotFound),
            other => return Err(FetchError::Status(other)),
        }
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|error| FetchError::Body(error.to_string()))?
            .to_bytes();
        let answer: NaddrAnswer = serde_json::from_slice(&body)?;
        answer
            .into_details(addr)
            .map(|details| Answer::Found(Arc::new(details)))
    }
}

/// Roots are only read from the system when the service is reached over https; plain http
/// never uses them.
fn tls_config(https: bool) -> Result<rustls::ClientConfig, rustls::Error> {
    let builder = || {
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
    };
    if https {
        match builder()?.with_native_roots() {
            Ok(with_roots) => return Ok(with_roots.with_no_client_auth()),
            Err(error) => tracing::warn!(
                %error,
                "ipinfo: no usable system root certificates, using the bundled ones"
            ),
        }
    }
    Ok(builder()?.with_webpki_roots().with_no_client_auth())
}

/// The fields of a naddr `/ip` answer that the pages use. Every field is optional and may be
/// null, so an older or newer service still answers.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NaddrAnswer {
    error: Option<String>,
    success: bool,
    country: Option<String>,
    country_code: Option<String>,
    asn: serde_json::Value,
    description: Option<String>,
    routed: Option<bool>,
    range4: Option<String>,
    range6: Option<String>,
    ip8: Option<String>,
    ip8asn: Option<String>,
    range8: Option<String>,
    range8asn: Option<String>,
}

impl NaddrAnswer {
    fn into_details(self, addr: IpAddr) -> Result<IpDetails, FetchError> {
        if !self.success {
            let reason = self
                .error
                .filter(|text| !text.is_empty())
                .unwrap_or_else(|| "success is not true".to_string());
            return Err(FetchError::Unsuccessful(reason));
        }
        let asn = asn_number(&self.asn);
        let routed = self.routed.unwrap_or(asn != 0);
        let (own_range, other_range) = if addr.is_ipv4() {
            (self.range4, self.range6)
        } else {
            (self.range6, self.range4)
        };
        let range = non_empty(own_range)
            .or_else(|| non_empty(other_range))
            .unwrap_or_default();
        // As with the local table: IPv8 forms only for IPv4 in a routed network.
        let ipv8 = match (
            addr.is_ipv4() && routed,
            non_empty(self.ip8),
            non_empty(self.ip8asn),
            non_empty(self.range8),
            non_empty(self.range8asn),
        ) {
            (true, Some(ip8), Some(ip8asn), Some(range8), Some(range8asn)) => Some(Ipv8Forms {
                ip8,
                ip8asn,
                range8,
                range8asn,
            }),
            _ => None,
        };
        Ok(IpDetails::found(
            addr,
            Facts {
                country_code: self.country_code.as_deref(),
                country_hint: self.country.as_deref(),
                asn,
                description: self.description.as_deref().unwrap_or(""),
                routed,
                range,
                ipv8,
            },
        ))
    }
}

fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|text| !text.trim().is_empty())
}

/// The AS number as a number or as text (`218785`, `"218785"`, `"AS218785"`); 0 otherwise.
fn asn_number(value: &serde_json::Value) -> u32 {
    match value {
        serde_json::Value::Number(number) => number
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        serde_json::Value::String(text) => {
            let digits = text.trim();
            let digits = digits
                .strip_prefix("AS")
                .or_else(|| digits.strip_prefix("as"))
                .unwrap_or(digits);
            digits.parse().unwrap_or(0)
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::details::Status;
    use super::*;

    #[test]
    fn base_urls_are_normalized_or_refused() {
        let cases = [
            ("127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("https://naddr.internal/", "https://naddr.internal"),
            (
                "http://naddr.internal:8080/api//",
                "http://naddr.internal:8080/api",
            ),
            ("HTTPS://Naddr.Internal", "https://Naddr.Internal"),
            ("naddr.internal", "http://naddr.internal"),
            ("[::1]:9000", "http://[::1]:9000"),
            ("  http://10.0.0.5:80/  ", "http://10.0.0.5:80"),
            (
                "http://naddr.internal/base?x=1",
                "http://naddr.internal/base",
            ),
        ];
        for (given, expected) in cases {
            assert_eq!(
                normalize_base_url(given).as_deref(),
                Ok(expected),
                "{given}"
            );
        }
        assert!(matches!(
            normalize_base_url("ftp://x"),
            Err(BaseUrlError::Scheme(_))
        ));
        assert!(normalize_base_url("http://").is_err());
        assert!(normalize_base_url("https://").is_err());
        assert_eq!(normalize_base_url(""), Err(BaseUrlError::Empty));
        assert!(matches!(
            normalize_base_url("http://user:secret@naddr.internal"),
            Err(BaseUrlError::Credentials(_))
        ));
        assert!(normalize_base_url("not a url").is_err());
    }

    fn answer(json: &str, addr: &str) -> Result<IpDetails, FetchError> {
        serde_json::from_str::<NaddrAnswer>(json)
            .unwrap()
            .into_details(addr.parse().unwrap())
    }

    #[test]
    fn a_full_answer_becomes_details() {
        let details = answer(
            r#"{"error":null,"success":true,"v":4,"country":"Lithuania","country_code":"LT",
                "n":"45.138.12.0/24","asn":218785,"description":"UAB Cherry Servers","routed":true,
                "ip4":"45.138.12.24","ip6":"","ip8":"0.3.86.161.45.138.12.24",
                "ip8asn":"218785.45.138.12.24","range4":"45.138.12.0/24","range6":"",
                "range8":"0.3.86.161.45.138.12.0/56","range8asn":"218785.45.138.12.0/24"}"#,
            "45.138.12.24",
        )
        .unwrap();
        assert_eq!(details.status, Status::Found);
        assert_eq!(details.flag, "🇱🇹");
        assert_eq!(details.flag_title, "Lithuania (LT)");
        assert_eq!(details.range, "45.138.12.0/24");
        assert_eq!(details.ipv8.unwrap().ip8asn, "218785.45.138.12.24");
    }

    #[test]
    fn a_sparse_answer_still_gives_what_it_has() {
        let details = answer(
            r#"{"success":true,"country_code":"None","asn":"AS0","description":"Not routed","range4":null}"#,
            "100.64.0.1",
        )
        .unwrap();
        assert!(!details.routed);
        assert_eq!(details.country_code, None);
        assert_eq!(details.flag_title, "No country assigned");
        assert_eq!(details.ipv8, None);
        assert_eq!(details.range, "");
    }

    #[test]
    fn an_answer_without_success_is_a_failure() {
        assert!(matches!(
            answer(r#"{"success":false,"error":"not loaded"}"#, "1.2.3.4"),
            Err(FetchError::Unsuccessful(reason)) if reason == "not loaded"
        ));
        assert!(matches!(
            answer("{}", "1.2.3.4"),
            Err(FetchError::Unsuccessful(_))
        ));
    }

    #[test]
    fn as_numbers_are_read_from_numbers_or_text() {
        assert_eq!(asn_number(&serde_json::json!(218785)), 218785);
        assert_eq!(asn_number(&serde_json::json!("AS13335")), 13335);
        assert_eq!(asn_number(&serde_json::json!("64500")), 64500);
        assert_eq!(asn_number(&serde_json::json!(-1)), 0);
        assert_eq!(asn_number(&serde_json::json!(null)), 0);
    }
}
