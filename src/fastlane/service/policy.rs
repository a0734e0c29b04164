//! Policy screening: before a payment is taken (and on an identical retry) the operator's
//! policy service is asked whether this payer may pay for this merchant. Only an explicit,
//! fresh "allow" lets the payment through; every failure to get one is a refusal.
//!
//! In test mode without a `policy_url` nothing is asked and the policy id recorded is
//! [`TEST_MODE_POLICY_ID`]; the public config and status say so.

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::{ConfigBuilderExt as _, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::{Deserialize, Serialize};

use super::clock;
use crate::fastlane::x402::PaymentRequirements;

/// Recorded as the policy id when screening is off in test mode.
pub const TEST_MODE_POLICY_ID: &str = "test-mode-no-screening";
/// How long the policy service may take for one answer.
pub const POLICY_TIMEOUT: Duration = Duration::from_secs(45);
/// An allow must expire within this many seconds: a stale or open-ended verdict is refused.
pub const MAX_VERDICT_AGE: u64 = 600;
/// Larger answers are refused unread.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What is being screened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Payment,
    PaymentRetry,
    Nft,
    Deposit,
}

/// The question put to the policy service.
#[derive(Debug, Clone, Serialize)]
pub struct Screening<'a> {
    pub network: &'a str,
    pub payer: &'a str,
    pub action: Action,
    pub requirements: &'a PaymentRequirements,
    pub client_ip: String,
    pub merchant: &'a str,
}

impl Screening<'_> {
    pub fn client_ip(ip: IpAddr) -> String {
        ip.to_string()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the policy service denied it")]
    Denied,
    #[error("the policy service gave no usable answer: {0}")]
    NoAnswer(String),
}

#[derive(Debug, Deserialize)]
struct Verdict {
    #[serde(default)]
    decision: String,
    #[serde(default)]
    assessment_id: String,
    #[serde(default)]
    expires_at: String,
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

enum Mode {
    /// Test mode without a policy service.
    Skip,
    Remote(Box<Remote>),
}

struct Remote {
    url: http::Uri,
    authorization: http::HeaderValue,
    client: HttpClient,
}

/// The screening client.
pub struct Policy {
    mode: Mode,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.skips() {
            "Policy(skip)"
        } else {
            "Policy(remote)"
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy_url is required outside test mode")]
    UrlRequired,
    #[error("policy_url: {0}")]
    BadUrl(String),
    #[error("CONCERT_POLICY_TOKEN: {0}")]
    BadToken(String),
    #[error("policy client: {0}")]
    Tls(#[from] rustls::Error),
}

impl Policy {
    /// `url` empty is allowed only in test mode. `token` is `CONCERT_POLICY_TOKEN`.
    pub fn new(url: &str, token: &str, test_mode: bool) -> Result<Policy, PolicyError> {
        if url.is_empty() {
            return if test_mode {
                Ok(Policy { mode: Mode::Skip })
            } else {
                Err(PolicyError::UrlRequired)
            };
        }
        let parsed: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| PolicyError::BadUrl(e.to_string()))?;
        if !matches!(parsed.scheme_str(), Some("https" | "http")) || parsed.host().is_none() {
            return Err(PolicyError::BadUrl("must be an http(s) URL".into()));
        }
        let authorization = http::HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|_| PolicyError::BadToken("not a valid header value".into()))?;
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(POLICY_TIMEOUT));
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_webpki_roots()
        .with_no_client_auth();
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        // The legacy client never follows redirects: a 3xx is just a status, and not 200.
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        Ok(Policy {
            mode: Mode::Remote(Box::new(Remote {
                url: parsed,
                authorization,
                client,
            })),
        })
    }

    /// True when nothing is screened (test mode without a policy service).
    pub fn skips(&self) -> bool {
        matches!(self.mode, Mode::Skip)
    }

    /// The policy id to record when `screening` is allowed at `now`.
    pub async fn screen(&self, screening: &Screening<'_>, now: u64) -> Result<String, Refusal> {
        let Mode::Remote(remote) = &self.mode else {
            return Ok(TEST_MODE_POLICY_ID.to_owned());
        };
        let Remote {
            url,
            authorization,
            client,
        } = &**remote;
        let body = serde_json::to_vec(screening).map_err(|e| Refusal::NoAnswer(e.to_string()))?;
        let request = http::Request::post(url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::AUTHORIZATION, authorization.clone())
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Refusal::NoAnswer(e.to_string()))?;
        let exchange = async {
            let response = client
                .request(request)
                .await
                .map_err(|e| Refusal::NoAnswer(e.to_string()))?;
            if response.status() != http::StatusCode::OK {
                return Err(Refusal::NoAnswer(format!("status {}", response.status())));
            }
            let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| Refusal::NoAnswer(e.to_string()))?
                .to_bytes();
            Ok(bytes)
        };
        let bytes = tokio::time::timeout(POLICY_TIMEOUT, exchange)
            .await
            .map_err(|_| Refusal::NoAnswer("timed out".into()))??;
        let verdict: Verdict =
            serde_json::from_slice(&bytes).map_err(|e| Refusal::NoAnswer(e.to_string()))?;
        allowed(&verdict, now).ok_or(Refusal::Denied)
    }
}

/// The assessment id when `verdict` is an allow that expires within (now, now + 10 min].
fn allowed(verdict: &Verdict, now: u64) -> Option<String> {
    if verdict.decision != "allow" || verdict.assessment_id.is_empty() {
        return None;
    }
    let expires = clock::parse_rfc3339(&verdict.expires_at)?;
    (expires > now && expires <= now + MAX_VERDICT_AGE).then(|| verdict.assessment_id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(decision: &str, id: &str, expires: u64) -> Verdict {
        Verdict {
            decision: decision.into(),
            assessment_id: id.into(),
            expires_at: clock::format_rfc3339(expires),
        }
    }

    #[test]
    fn only_a_fresh_allow_with_an_id_passes() {
        let now = 1_800_000_000;
        assert_eq!(
            allowed(&verdict("allow", "a1", now + 60), now),
            Some("a1".into())
        );
        assert_eq!(
            allowed(&verdict("allow", "a1", now + 600), now),
            Some("a1".into())
        );
        assert_eq!(allowed(&verdict("allow", "a1", now + 601), now), None);
        assert_eq!(allowed(&verdict("allow", "a1", now), now), None);
        assert_eq!(allowed(&verdict("allow", "", now + 60), now), None);
        assert_eq!(allowed(&verdict("Allow", "a1", now + 60), now), None);
        assert_eq!(allowed(&verdict("deny", "a1", now + 60), now), None);
    }

    #[test]
    fn production_needs_a_policy_url() {
        assert!(matches!(
            Policy::new("", "t", false),
            Err(PolicyError::UrlRequired)
        ));
        assert!(Policy::new("", "", true).unwrap().skips());
        assert!(Policy::new("ftp://x", "t", false).is_err());
    }
}
