//! The fast lane's `/_concert/*` service end to end: a real listener on 127.0.0.1, real
//! cookies, a temporary data directory, a scripted facilitator (the gateway is tested on its
//! own) and a real policy server on loopback.

#[path = "support/browser.rs"]
mod browser;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::ConnectInfo;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use concert::fastlane::facilitator::{Facilitator, GatewayError};
use concert::fastlane::mechanism::BoxFuture;
use concert::fastlane::service::clock::{format_rfc3339, now_unix};
use concert::fastlane::service::journal::{JOURNAL_FILE, ReceiptState};
use concert::fastlane::service::session::SessionKeys;
use concert::fastlane::service::{FastLane, FastLaneError, FastLaneOptions, GrantKind};
use concert::fastlane::settings::{FastlaneSettings, Offer};
use concert::fastlane::x402::{
    FacilitatorRequest, PaymentRequirements, SettleResponse, SupportedKind, VerifyResponse,
};
use http::{HeaderMap, HeaderValue};
use parking_lot::Mutex;
use serde_json::{Value, json};

const SECRET: &[u8] = b"an admit secret of at least 32 bytes!!";
const PAYER: &str = "rPayerAccount";
const POLICY_TOKEN: &str = "policy-token-of-at-least-thirty-two-chars";

// ---------------------------------------------------------------- scripted facilitator

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SettleStep {
    Success,
    Error,
    NotSuccess,
    OtherPayer,
}

#[derive(Default)]
struct Script {
    verifies: AtomicUsize,
    settles: AtomicUsize,
    steps: Mutex<VecDeque<SettleStep>>,
    settle_delay: Mutex<Duration>,
}

struct ScriptedFacilitator(Arc<Script>);

impl Facilitator for ScriptedFacilitator {
    fn supported(&self) -> Vec<SupportedKind> {
        vec![SupportedKind {
            x402_version: 2,
            scheme: "exact".into(),
            network: "xrpl:1".into(),
        }]
    }

    fn verify<'a>(
        &'a self,
        _request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, GatewayError>> {
        self.0.verifies.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(VerifyResponse::valid(PAYER)) })
    }

    fn settle(
        &self,
        request: FacilitatorRequest,
    ) -> BoxFuture<'static, Result<SettleResponse, GatewayError>> {
        let script = self.0.clone();
        Box::pin(async move {
            script.settles.fetch_add(1, Ordering::SeqCst);
            let delay = *script.settle_delay.lock();
            tokio::time::sleep(delay).await;
            let step = script
                .steps
                .lock()
                .pop_front()
                .unwrap_or(SettleStep::Success);
            let blob = request.payment_payload.payload["signedTxBlob"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            let network = request.payment_requirements.network.clone();
            match step {
                SettleStep::Error => Err(GatewayError::Unavailable("ledger timed out".into())),
                SettleStep::NotSuccess => Ok(SettleResponse {
                    success: false,
                    error_reason: Some("settlement_unknown".into()),
                    transaction: String::new(),
                    network,
                    payer: Some(PAYER.into()),
                }),
                SettleStep::OtherPayer => Ok(SettleResponse {
                    success: true,
                    error_reason: None,
                    transaction: format!("TX-{blob}"),
                    network,
                    payer: Some("rSomebodyElse".into()),
                }),
                SettleStep::Success => Ok(SettleResponse {
                    success: true,
                    error_reason: None,
                    transaction: format!("TX-{blob}"),
                    network,
                    payer: Some(PAYER.into()),
                }),
            }
        })
    }

    fn solana_prepare<'a>(
        &'a self,
        _request: &'a Value,
    ) -> BoxFuture<'a, Result<Value, GatewayError>> {
        Box::pin(async { Err(GatewayError::Rejected("no solana here".into())) })
    }
}

// ---------------------------------------------------------------- policy server

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PolicyMode {
    Allow,
    Deny,
    Redirect,
}

struct PolicyServer {
    url: String,
    mode: Arc<Mutex<PolicyMode>>,
    asked: Arc<Mutex<Vec<Value>>>,
}

async fn policy_server() -> PolicyServer {
    let mode = Arc::new(Mutex::new(PolicyMode::Allow));
    let asked: Arc<Mutex<Vec<Value>>> = Arc::default();
    let (m, a) = (mode.clone(), asked.clone());
    let app = axum::Router::new()
        .route(
            "/screen",
            axum::routing::post(move |headers: HeaderMap, body: axum::Json<Value>| {
                let (mode, asked) = (m.clone(), a.clone());
                async move {
                    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
                    if auth != Some(format!("Bearer {POLICY_TOKEN}").as_str()) {
                        return (http::StatusCode::UNAUTHORIZED, axum::Json(json!({}))).finish();
                    }
                    asked.lock().push(body.0);
                    let mode = *mode.lock();
                    match mode {
                        PolicyMode::Redirect => (
                            http::StatusCode::FOUND,
                            axum::Json(json!({})),
                        )
                            .finish(),
                        PolicyMode::Allow | PolicyMode::Deny => (
                            http::StatusCode::OK,
                            axum::Json(json!({
                                "decision": if mode == PolicyMode::Allow { "allow" } else { "deny" },
                                "assessment_id": "assessment-1",
                                "expires_at": format_rfc3339(now_unix() + 300),
                            })),
                        )
                            .finish(),
                    }
                }
            }),
        )
        .route(
            "/allow",
            axum::routing::post(|| async {
                axum::Json(json!({
                    "decision": "allow",
                    "assessment_id": "via-redirect",
                    "expires_at": format_rfc3339(now_unix() + 300),
                }))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/screen", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    PolicyServer { url, mode, asked }
}

trait Finish {
    fn finish(self) -> axum::response::Response;
}

impl Finish for (http::StatusCode, axum::Json<Value>) {
    fn finish(self) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        let redirect = self.0 == http::StatusCode::FOUND;
        let mut response = self.into_response();
        if redirect {
            response
                .headers_mut()
                .insert("location", HeaderValue::from_static("/allow"));
        }
        response
    }
}

// ---------------------------------------------------------------- the lane under test

struct Lane {
    base: String,
    lane: Arc<FastLane>,
    script: Arc<Script>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.server.abort();
        self.lane.close();
    }
}

fn offer() -> PaymentRequirements {
    PaymentRequirements {
        scheme: "exact".into(),
        network: "xrpl:1".into(),
        amount: "1500000".into(),
        asset: "XRP".into(),
        pay_to: "rMerchantAccount".into(),
        max_timeout_seconds: 60,
        extra: Some(
            json!({"areFeesSponsored": false, "destinationTag": 4_294_967_295u64})
                .as_object()
                .unwrap()
                .clone(),
        ),
    }
}

fn settings(origin: &str, policy_url: &str) -> FastlaneSettings {
    FastlaneSettings {
        enabled: true,
        origin: origin.into(),
        gateway_url: String::new(),
        policy_url: policy_url.into(),
        test_mode: true,
        pass_seconds: 60,
        nft_pass_seconds: 30,
        max_records: 1000,
        merchant: "Example Tickets".into(),
        terms_url: "https://example.test/terms".into(),
        privacy_url: "https://example.test/privacy".into(),
        refund_url: "https://example.test/refund".into(),
        offers: vec![Offer {
            label: "Five minutes".into(),
            requirements: offer(),
            deposit_only: false,
        }],
        collections: vec![],
        listings: vec![],
    }
}

async fn start_lane(
    dir: &Path,
    policy_url: &str,
    entry_ttl: Duration,
) -> Result<Lane, FastLaneError> {
    start_lane_at(dir, policy_url, entry_ttl, "127.0.0.1:0").await
}

/// A lane listening on `bind`; a just-closed port is retried briefly, so a restart can keep
/// its origin.
async fn start_lane_at(
    dir: &Path,
    policy_url: &str,
    entry_ttl: Duration,
    bind: &str,
) -> Result<Lane, FastLaneError> {
    let script: Arc<Script> = Arc::default();
    let mut attempts = 0;
    let listener = loop {
        match tokio::net::TcpListener::bind(bind).await {
            Ok(listener) => break listener,
            Err(error) if attempts < 100 => {
                attempts += 1;
                let _ = error;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("bind {bind}: {error}"),
        }
    };
    let base = format!("http://{}", listener.local_addr().unwrap());
    let lane = FastLane::new(FastLaneOptions {
        settings: settings(&base, policy_url),
        data_dir: dir,
        admit_secret: SECRET,
        facilitator: Arc::new(ScriptedFacilitator(script.clone())),
        policy_token: POLICY_TOKEN,
        entry_ttl,
        skip_url: "/skip",
        line: None,
    })?;
    let served = lane.clone();
    // The request path hands the lane the canonical client address; this harness lets a test
    // pose as another address with `x-test-client`.
    let app = axum::Router::new().fallback(
        move |ConnectInfo(peer): ConnectInfo<SocketAddr>, req: http::Request<axum::body::Body>| {
            let lane = served.clone();
            async move {
                // Everything outside /_concert is the site itself, as the proxy would serve it.
                if !req.uri().path().starts_with("/_concert") {
                    return http::Response::new(axum::body::Body::from("the site"));
                }
                let client = req
                    .headers()
                    .get("x-test-client")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<IpAddr>().ok())
                    .unwrap_or(peer.ip());
                lane.handle(req, client).await
            }
        },
    );
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    Ok(Lane {
        base,
        lane,
        script,
        server,
    })
}

/// One visitor: a cookie jar that sends the lane's own Origin, and the session's CSRF value.
struct Visitor {
    http: reqwest::Client,
    /// The address this visitor poses as, so per-address limits count each visitor alone.
    address: String,
    base: String,
    csrf: String,
    token: String,
}

impl Visitor {
    async fn new(lane: &Lane) -> Visitor {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let address = format!("10.1.{}.{}", n / 250, n % 250 + 1);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("origin", lane.base.parse().unwrap());
        headers.insert("x-test-client", address.parse().unwrap());
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .default_headers(headers)
            .build()
            .unwrap();
        let mut visitor = Visitor {
            http,
            address,
            base: lane.base.clone(),
            csrf: String::new(),
            token: String::new(),
        };
        let response = visitor.post_raw("/_concert/session", None).await;
        assert_eq!(response.status(), 200);
        assert!(
            response
                .headers()
                .get("set-cookie")
                .unwrap()
                .to_str()
                .unwrap()
                .contains("HttpOnly; SameSite=Strict")
        );
        let body: Value = response.json().await.unwrap();
        visitor.csrf = body["csrf"].as_str().unwrap().to_owned();
        visitor.token = body["session"].as_str().unwrap().to_owned();
        visitor
    }

    async fn post_raw(&self, path: &str, payment: Option<&str>) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("x-concert-csrf", &self.csrf);
        if let Some(payment) = payment {
            request = request.header("payment-signature", payment);
        }
        request.send().await.unwrap()
    }

    async fn pay(&self, payment: Option<&str>) -> (u16, HeaderMap, Value) {
        let response = self.post_raw("/_concert/payment", payment).await;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, headers, body)
    }

    async fn status(&self) -> Value {
        self.http
            .get(format!("{}/_concert/status", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The headers a proxied request of this visitor carries (its cookie).
    fn cookie_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "cookie",
            HeaderValue::try_from(format!("other=1; concert_fastlane={}", self.token)).unwrap(),
        );
        headers
    }
}

fn payment_with(terms: &PaymentRequirements, blob: &str, resource: &str) -> String {
    let payment = json!({
        "x402Version": 2,
        "resource": {"url": resource},
        "accepted": terms,
        "payload": {"signedTxBlob": blob},
    });
    STANDARD.encode(payment.to_string())
}

fn payment(lane: &Lane, blob: &str) -> String {
    payment_with(&offer(), blob, &format!("{}/_concert/payment", lane.base))
}

fn assert_common_headers(headers: &HeaderMap) {
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    assert_eq!(headers["vary"], "Cookie, Concert-Session");
}

fn test_mode_lane_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

// ---------------------------------------------------------------- acceptance cases

#[tokio::test]
async fn case1_no_header_is_402_then_a_valid_payment_makes_the_session_eligible() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::from_secs(300))
        .await
        .unwrap();
    let visitor = Visitor::new(&lane).await;
    let (status, headers, body) = visitor.pay(None).await;
    assert_eq!(status, 402);
    assert_common_headers(&headers);
    let required = STANDARD
        .decode(headers["payment-required"].as_bytes())
        .unwrap();
    let required: Value = serde_json::from_slice(&required).unwrap();
    assert_eq!(required, body);
    assert_eq!(body["x402Version"], 2);
    assert_eq!(
        body["resource"]["url"],
        format!("{}/_concert/payment", lane.base)
    );
    assert_eq!(
        body["resource"]["description"],
        "60 seconds of Concert fast-lane eligibility; capacity limits apply"
    );
    assert_eq!(body["accepts"][0]["amount"], "1500000");
    assert!(
        lane.lane
            .eligible(&visitor.cookie_headers(), now_unix())
            .is_none()
    );

    let (status, headers, body) = visitor.pay(Some(&payment(&lane, "AA01"))).await;
    assert_eq!(status, 200, "{body}");
    assert_common_headers(&headers);
    assert_eq!(body["eligible"], true);
    assert_eq!(body["receipt"]["transaction"], "TX-AA01");
    let settle: Value = serde_json::from_slice(
        &STANDARD
            .decode(headers["payment-response"].as_bytes())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(settle["success"], true);
    assert_eq!(settle["transaction"], "TX-AA01");
    let grant = lane
        .lane
        .eligible(&visitor.cookie_headers(), now_unix())
        .unwrap();
    assert_eq!(grant.kind, GrantKind::Payment);
    // The header form of the session works as well as the cookie.
    let mut by_header = HeaderMap::new();
    by_header.insert("concert-session", visitor.token.parse().unwrap());
    assert!(lane.lane.eligible(&by_header, now_unix()).is_some());
    let status = visitor.status().await;
    assert_eq!(status["eligible"], true);
    assert_eq!(status["kind"], "payment");
    assert_eq!(status["test_mode"], true);
    let journal = std::fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap();
    assert_eq!(journal.lines().count(), 2, "pending then settled");
    assert!(journal.contains("test-mode-no-screening"));
}

#[tokio::test]
async fn case2_the_same_payment_settles_once_and_no_other_session_can_redeem_it() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::from_secs(300))
        .await
        .unwrap();
    let visitor = Visitor::new(&lane).await;
    let header = payment(&lane, "BB02");
    assert_eq!(visitor.pay(Some(&header)).await.0, 200);
    let (status, headers, _) = visitor.pay(Some(&header)).await;
    assert_eq!(status, 200);
    assert!(headers.contains_key("payment-response"));
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 1);
    let thief = Visitor::new(&lane).await;
    let (status, _, body) = thief.pay(Some(&header)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("payment_already_redeemed"))
    );
    // Reformatted JSON of the same payment is the same payment.
    let reordered = {
        let json = String::from_utf8(STANDARD.decode(&header).unwrap()).unwrap();
        let value: Value = serde_json::from_str(&json).unwrap();
        STANDARD.encode(serde_json::to_string_pretty(&value).unwrap())
    };
    let (status, _, body) = thief.pay(Some(&reordered)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("payment_already_redeemed"))
    );
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 1);
    assert!(
        lane.lane
            .eligible(&thief.cookie_headers(), now_unix())
            .is_none()
    );
}

#[tokio::test]
async fn case3_a_pass_survives_restart_expires_on_time_and_replay_never_extends_it() {
    let dir = test_mode_lane_dir();
    let (visitor_token, header, expires, bound) = {
        let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
        let visitor = Visitor::new(&lane).await;
        let header = payment(&lane, "CC03");
        let (status, _, body) = visitor.pay(Some(&header)).await;
        assert_eq!(status, 200);
        let bound = lane.base.trim_start_matches("http://").to_owned();
        (
            visitor.token.clone(),
            header,
            body["expires"].as_str().unwrap().to_owned(),
            bound,
        )
    };
    let lane = start_lane_at(dir.path(), "", Duration::ZERO, &bound)
        .await
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("concert-session", visitor_token.parse().unwrap());
    let grant = lane.lane.eligible(&headers, now_unix()).unwrap();
    assert_eq!(format_rfc3339(grant.expires), expires);
    assert!(lane.lane.eligible(&headers, grant.expires - 1).is_some());
    assert!(
        lane.lane.eligible(&headers, grant.expires).is_none(),
        "ends on time"
    );
    // The same payment, replayed through the new process (its resource names the old
    // listener, so it is re-signed for this one): the receipt is returned, not extended.
    let response = reqwest::Client::new()
        .post(format!("{}/_concert/payment", lane.base))
        .header("concert-session", &visitor_token)
        .header(
            "x-concert-csrf",
            SessionKeys::new(SECRET).csrf(&visitor_token),
        )
        .header("payment-signature", &header)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["expires"], expires.as_str());
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn case4_tampered_terms_are_refused_before_the_gateway_is_asked() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    let visitor = Visitor::new(&lane).await;
    let resource = format!("{}/_concert/payment", lane.base);
    let mut cheaper = offer();
    cheaper.amount = "1".into();
    let (status, _, body) = visitor
        .pay(Some(&payment_with(&cheaper, "DD04", &resource)))
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("payment_terms_mismatch"))
    );
    let mut other_tag = offer();
    other_tag
        .extra
        .as_mut()
        .unwrap()
        .insert("destinationTag".into(), json!(1));
    let (status, _, _) = visitor
        .pay(Some(&payment_with(&other_tag, "DD04", &resource)))
        .await;
    assert_eq!(status, 400);
    let (status, _, body) = visitor
        .pay(Some(&payment_with(
            &offer(),
            "DD04",
            "https://elsewhere.example/_concert/payment",
        )))
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("wrong_resource"))
    );
    let (status, _, body) = visitor.pay(Some("%%%")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_payment_encoding"))
    );
    let v1 = STANDARD
        .encode(json!({"x402Version": 1, "accepted": offer(), "payload": {"a": 1}}).to_string());
    let (status, _, body) = visitor.pay(Some(&v1)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_payment_payload"))
    );
    let big = "A".repeat(64 * 1024 + 4);
    let (status, _, body) = visitor.pay(Some(&big)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (413, Some("payment_header_too_large"))
    );
    assert_eq!(lane.script.verifies.load(Ordering::SeqCst), 0);
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn case5_settle_error_then_other_payment_is_blocked_and_identical_retry_succeeds() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    lane.script.steps.lock().push_back(SettleStep::Error);
    let visitor = Visitor::new(&lane).await;
    let header = payment(&lane, "EE05");
    let (status, _, body) = visitor.pay(Some(&header)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (
            503,
            Some("settlement_unresolved_retry_identical_payment_do_not_pay_again")
        )
    );
    assert_eq!(visitor.status().await["state"], "unknown");
    let (status, _, body) = visitor.pay(Some(&payment(&lane, "EE05-other"))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("previous_payment_unresolved_do_not_pay_again"))
    );
    let (status, headers, body) = visitor.pay(Some(&header)).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.contains_key("payment-response"));
    assert_eq!(
        lane.script.verifies.load(Ordering::SeqCst),
        1,
        "the retry is not verified again"
    );
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 2);
    assert!(
        lane.lane
            .eligible(&visitor.cookie_headers(), now_unix())
            .is_some()
    );
}

#[tokio::test]
async fn case6_settlement_naming_another_payer_is_unresolved_and_a_policy_deny_settles_nothing() {
    let policy = policy_server().await;
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), &policy.url, Duration::ZERO)
        .await
        .unwrap();
    lane.script.steps.lock().push_back(SettleStep::OtherPayer);
    let visitor = Visitor::new(&lane).await;
    let (status, _, body) = visitor.pay(Some(&payment(&lane, "FF06"))).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        lane.lane
            .eligible(&visitor.cookie_headers(), now_unix())
            .is_none()
    );
    {
        let asked = policy.asked.lock();
        assert_eq!(asked[0]["action"], "payment");
        assert_eq!(asked[0]["payer"], PAYER);
        assert_eq!(asked[0]["merchant"], "Example Tickets");
        assert_eq!(asked[0]["client_ip"], visitor.address.as_str());
        assert_eq!(asked[0]["requirements"]["amount"], "1500000");
    }
    let journal = std::fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap();
    assert!(journal.contains("assessment-1"));

    *policy.mode.lock() = PolicyMode::Deny;
    let settles = lane.script.settles.load(Ordering::SeqCst);
    let other = Visitor::new(&lane).await;
    let (status, _, body) = other.pay(Some(&payment(&lane, "FF06-b"))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("policy_not_approved"))
    );
    // A redirect is not an answer: the client never follows it.
    *policy.mode.lock() = PolicyMode::Redirect;
    let (status, _, _) = other.pay(Some(&payment(&lane, "FF06-c"))).await;
    assert_eq!(status, 403);
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), settles);
    // The retry of the unresolved payment is screened as a retry.
    *policy.mode.lock() = PolicyMode::Allow;
    lane.script.steps.lock().push_back(SettleStep::Success);
    let (status, _, _) = visitor.pay(Some(&payment(&lane, "FF06"))).await;
    assert_eq!(status, 200);
    assert_eq!(
        policy.asked.lock().last().unwrap()["action"],
        "payment_retry"
    );
}

#[tokio::test]
async fn case6b_settlement_without_success_is_unresolved() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    lane.script.steps.lock().push_back(SettleStep::NotSuccess);
    let visitor = Visitor::new(&lane).await;
    let (status, _, _) = visitor.pay(Some(&payment(&lane, "FF6B"))).await;
    assert_eq!(status, 503);
    assert_eq!(
        lane.lane
            .journal()
            .unsettled(
                &SessionKeys::new(SECRET)
                    .verify(&visitor.token, now_unix())
                    .unwrap()
                    .id
            )
            .unwrap()
            .state,
        ReceiptState::Unknown
    );
}

#[tokio::test]
async fn case7_forged_tokens_missing_csrf_and_foreign_origins_are_refused() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    let visitor = Visitor::new(&lane).await;
    assert_eq!(visitor.pay(Some(&payment(&lane, "GG07"))).await.0, 200);
    let forged = SessionKeys::new(b"someone else's secret, 32 bytes long")
        .issue(None, now_unix())
        .0;
    for token in [forged.as_str(), "garbage", ""] {
        let mut headers = HeaderMap::new();
        headers.insert("concert-session", token.parse().unwrap());
        assert!(
            lane.lane.eligible(&headers, now_unix()).is_none(),
            "{token}"
        );
    }
    let mut tampered = visitor.token.clone();
    tampered.replace_range(0..1, if tampered.starts_with('A') { "B" } else { "A" });
    let mut headers = HeaderMap::new();
    headers.insert(
        "cookie",
        format!("concert_fastlane={tampered}").parse().unwrap(),
    );
    assert!(lane.lane.eligible(&headers, now_unix()).is_none());

    let url = format!("{}/_concert/payment", lane.base);
    let plain = reqwest::Client::new();
    let cookie = format!("concert_fastlane={}", visitor.token);
    // Cookie session, no CSRF.
    let response = plain
        .post(&url)
        .header("origin", &lane.base)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"],
        "csrf_required"
    );
    // Header session, no CSRF: refused as well.
    let response = plain
        .post(&url)
        .header("concert-session", &visitor.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"],
        "csrf_required"
    );
    // Foreign origin, cross-site fetch, and a browser fetch without Origin.
    for (name, value) in [
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-origin"),
    ] {
        let response = plain
            .post(&url)
            .header(name, value)
            .header("cookie", &cookie)
            .header("x-concert-csrf", &visitor.csrf)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{name}: {value}");
        assert_eq!(
            response.json::<Value>().await.unwrap()["error"],
            "origin_rejected"
        );
    }
    // A non-browser client (no Origin, no Sec-Fetch-Site) with the CSRF value is served.
    let response = plain
        .post(&url)
        .header("concert-session", &visitor.token)
        .header("x-concert-csrf", &visitor.csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // No session at all.
    let response = plain.post(&url).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"],
        "session_required"
    );
}

#[tokio::test]
async fn case9_twenty_concurrent_identical_payments_settle_once_and_one_session_is_eligible() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    *lane.script.settle_delay.lock() = Duration::from_millis(200);
    let header = payment(&lane, "HH09");
    let mut visitors = Vec::new();
    for _ in 0..20 {
        visitors.push(Arc::new(Visitor::new(&lane).await));
    }
    let mut tasks = Vec::new();
    for visitor in &visitors {
        let (visitor, header) = (visitor.clone(), header.clone());
        tasks.push(tokio::spawn(
            async move { visitor.pay(Some(&header)).await },
        ));
    }
    let mut ok = 0;
    for task in tasks {
        let (status, _, body) = task.await.unwrap();
        match status {
            200 => ok += 1,
            409 => assert_eq!(body["error"], "payment_already_redeemed"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(ok, 1);
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 1);
    let now = now_unix();
    let eligible = visitors
        .iter()
        .filter(|v| lane.lane.eligible(&v.cookie_headers(), now).is_some())
        .count();
    assert_eq!(eligible, 1);

    // One authorisation presented by 16 other sessions: one of them gets it, nobody else.
    let second = payment(&lane, "HH09-second");
    let mut sessions = Vec::new();
    for _ in 0..16 {
        sessions.push(Visitor::new(&lane).await);
    }
    let mut ok = 0;
    for visitor in &sessions {
        if visitor.pay(Some(&second)).await.0 == 200 {
            ok += 1;
        }
    }
    assert_eq!(ok, 1);
    let eligible = sessions
        .iter()
        .filter(|v| lane.lane.eligible(&v.cookie_headers(), now).is_some())
        .count();
    assert_eq!(eligible, 1);
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn case10_journal_is_exclusive_refuses_corruption_and_unknown_blocks_after_restart() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    // A second opener of the same data directory fails.
    let second = start_lane(dir.path(), "", Duration::ZERO).await;
    assert!(
        matches!(second, Err(FastLaneError::Journal(_))),
        "{:?}",
        second.as_ref().err()
    );

    // An unknown outcome survives a restart and blocks a different payment of that session.
    lane.script.steps.lock().push_back(SettleStep::Error);
    let visitor = Visitor::new(&lane).await;
    let (status, _, _) = visitor.pay(Some(&payment(&lane, "JJ10"))).await;
    assert_eq!(status, 503);
    let bound = lane.base.trim_start_matches("http://").to_owned();
    let token = visitor.token.clone();
    drop(visitor);
    drop(lane);
    let lane = start_lane_at(dir.path(), "", Duration::ZERO, &bound)
        .await
        .unwrap();
    let response = reqwest::Client::new()
        .post(format!("{}/_concert/payment", lane.base))
        .header("concert-session", &token)
        .header("x-concert-csrf", SessionKeys::new(SECRET).csrf(&token))
        .header("payment-signature", payment(&lane, "JJ10-new"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"],
        "previous_payment_unresolved_do_not_pay_again"
    );

    // A closed journal takes no payments and grants nothing.
    let visitor = Visitor::new(&lane).await;
    lane.lane.close();
    let (status, _, body) = visitor.pay(Some(&payment(&lane, "JJ10-closed"))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("fast_lane_unavailable"))
    );
    drop(lane);

    // A corrupt file refuses to open.
    let journal = dir.path().join(JOURNAL_FILE);
    let mut text = std::fs::read_to_string(&journal).unwrap();
    text.push_str("{\"session\":");
    std::fs::write(&journal, text).unwrap();
    let reopened = start_lane(dir.path(), "", Duration::ZERO).await;
    assert!(
        matches!(reopened, Err(FastLaneError::Journal(_))),
        "{:?}",
        reopened.as_ref().err()
    );
}

#[tokio::test]
async fn case12_near_expiry_sessions_must_renew_renewal_keeps_the_id_and_a_disconnect_still_records()
 {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    let keys = SessionKeys::new(SECRET);
    // Issued 23 hours ago: one hour left, less than the two a payment needs.
    let (old, old_session) = keys.issue(None, now_unix() - 23 * 3600);
    let client = reqwest::Client::new();
    let url = format!("{}/_concert/payment", lane.base);
    let response = client
        .post(&url)
        .header("concert-session", &old)
        .header("x-concert-csrf", keys.csrf(&old))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"],
        "session_renewal_required"
    );
    let renewed: Value = client
        .post(format!("{}/_concert/session", lane.base))
        .header("concert-session", &old)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = renewed["session"].as_str().unwrap().to_owned();
    assert_ne!(token, old);
    let session = keys.verify(&token, now_unix()).unwrap();
    assert_eq!(session.id, old_session.id, "renewal keeps the session id");
    assert_eq!(renewed["csrf"], keys.csrf(&token));

    // The client gives up mid-settlement; the settlement still completes and is recorded.
    *lane.script.settle_delay.lock() = Duration::from_millis(600);
    let header = payment(&lane, "KK12");
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let gone = impatient
        .post(&url)
        .header("concert-session", &token)
        .header("x-concert-csrf", keys.csrf(&token))
        .header("payment-signature", &header)
        .send()
        .await;
    assert!(gone.is_err(), "the client should have timed out");
    let mut settled = false;
    for _ in 0..100 {
        let unsettled = lane.lane.journal().unsettled(&session.id);
        if unsettled.is_none() && lane.lane.journal().best_settled(&session.id).is_some() {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(settled, "the detached settlement was not recorded");
    let mut headers = HeaderMap::new();
    headers.insert("concert-session", token.parse().unwrap());
    assert!(lane.lane.eligible(&headers, now_unix()).is_some());
    // The identical retry returns the recorded receipt; nothing is settled again.
    let response = client
        .post(&url)
        .header("concert-session", &token)
        .header("x-concert-csrf", keys.csrf(&token))
        .header("payment-signature", &header)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn case12b_an_identical_retry_after_a_disconnect_settles_nothing_new() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    *lane.script.settle_delay.lock() = Duration::from_millis(400);
    let keys = SessionKeys::new(SECRET);
    let (token, _) = keys.issue(None, now_unix());
    let header = payment(&lane, "KK12B");
    let url = format!("{}/_concert/payment", lane.base);
    let send = |timeout: Duration| {
        let (url, token, header, csrf) = (
            url.clone(),
            token.clone(),
            header.clone(),
            keys.csrf(&token),
        );
        async move {
            reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .unwrap()
                .post(&url)
                .header("concert-session", &token)
                .header("x-concert-csrf", csrf)
                .header("payment-signature", &header)
                .send()
                .await
        }
    };
    assert!(send(Duration::from_millis(100)).await.is_err());
    // The server may not have seen the first client leave yet (one request per session).
    let mut status = 0;
    for _ in 0..50 {
        let response = send(Duration::from_secs(10)).await.unwrap();
        status = response.status().as_u16();
        if status != 409 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200);
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn case14_the_61st_post_in_a_minute_from_one_slash_64_is_refused_others_are_not() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    // Keep all 61 requests inside one minute window.
    for _ in 0..12 {
        if now_unix() % 60 < 45 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let client = reqwest::Client::new();
    let post = |address: &'static str| {
        client
            .post(format!("{}/_concert/session", lane.base))
            .header("x-test-client", address)
            .send()
    };
    for n in 0..60 {
        let address = if n % 2 == 0 {
            "2001:db8:7:7::1"
        } else {
            "2001:db8:7:7:ffff::2"
        };
        assert_eq!(post(address).await.unwrap().status(), 200, "request {n}");
    }
    let refused = post("2001:db8:7:7::3").await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "60");
    assert_eq!(
        refused.json::<Value>().await.unwrap()["error"],
        "too_many_wallet_requests"
    );
    assert_eq!(post("2001:db8:7:8::1").await.unwrap().status(), 200);
    assert_eq!(post("192.0.2.7").await.unwrap().status(), 200);
}

#[tokio::test]
async fn case18_entry_window_outlasts_the_pass_then_ends_and_only_use_opens_it() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::from_secs(300))
        .await
        .unwrap();
    let used = Visitor::new(&lane).await;
    let idle = Visitor::new(&lane).await;
    let (_, _, first) = used.pay(Some(&payment(&lane, "LL18-a"))).await;
    let (_, _, second) = idle.pay(Some(&payment(&lane, "LL18-b"))).await;
    let pass_end =
        concert::fastlane::service::clock::parse_rfc3339(first["expires"].as_str().unwrap())
            .unwrap();
    let idle_end =
        concert::fastlane::service::clock::parse_rfc3339(second["expires"].as_str().unwrap())
            .unwrap();
    let now = now_unix();
    // The idle visitor only asks for its status: that opens nothing.
    assert_eq!(idle.status().await["eligible"], true);

    let grant = lane.lane.eligible(&used.cookie_headers(), now).unwrap();
    assert_eq!(grant.kind, GrantKind::Payment);
    assert_eq!(
        grant.expires,
        now + 300,
        "access lasts until the later of pass and window"
    );
    let after_pass = lane
        .lane
        .eligible(&used.cookie_headers(), pass_end + 1)
        .unwrap();
    assert_eq!(after_pass.kind, GrantKind::Window);
    assert!(
        lane.lane
            .eligible(&used.cookie_headers(), now + 300)
            .is_none(),
        "window ends"
    );
    // /status shows the window without opening one, and the idle pass never got one.
    assert!(
        lane.lane
            .eligible(&idle.cookie_headers(), idle_end + 1)
            .is_none()
    );

    // TTL 0 turns windows off, also for windows already open.
    lane.lane.set_entry_ttl(Duration::ZERO);
    assert!(
        lane.lane
            .eligible(&used.cookie_headers(), pass_end + 1)
            .is_none()
    );
    lane.lane.set_entry_ttl(Duration::from_secs(300));
    assert!(
        lane.lane
            .eligible(&used.cookie_headers(), pass_end + 1)
            .is_some()
    );
}

// ---------------------------------------------------------------- routes and bodies

#[tokio::test]
async fn routes_answer_with_the_common_headers_and_strict_bodies() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    let client = reqwest::Client::new();
    for (path, kind) in [
        ("/_concert/", "text/html"),
        ("/_concert/access", "text/html"),
        ("/_concert/access.js", "text/javascript"),
        ("/_concert/wallet-adapters.js", "text/javascript"),
        ("/_concert/waiting.css", "text/css"),
        ("/_concert/waiting.js", "text/javascript"),
    ] {
        let response = client
            .get(format!("{}{path}", lane.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_common_headers(response.headers());
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        assert!(
            response.headers()["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        let response = client
            .post(format!("{}{path}", lane.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{path}");
    }
    let config: Value = client
        .get(format!("{}/_concert/config", lane.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["enabled"], true);
    assert_eq!(config["test_mode"], true);
    assert_eq!(config["screening"], false);
    assert_eq!(config["merchant"], "Example Tickets");
    assert_eq!(config["legacy_skip_url"], "/skip");
    assert_eq!(config["pass_seconds"], 60);
    assert_eq!(config["offers"][0]["label"], "Five minutes");
    assert_eq!(
        config["offers"][0]["requirements"]["extra"]["destinationTag"],
        4_294_967_295u64
    );
    for key in [
        "origin",
        "collections",
        "nft_pass_seconds",
        "terms_url",
        "privacy_url",
        "refund_url",
        "deposit_networks",
    ] {
        assert!(config.get(key).is_some(), "{key}");
    }
    for (method, path, status, code) in [
        ("GET", "/_concert/nope", 404, "not_found"),
        // This lane has no collections, so it offers no NFT admission at all.
        ("POST", "/_concert/nft/challenge", 404, "not_found"),
        ("POST", "/_concert/deposit", 401, "session_required"),
        ("GET", "/_concert/market", 404, "no_market_for_collection"),
        ("GET", "/_concert/payment", 405, "method_not_allowed"),
        ("POST", "/_concert/status", 405, "method_not_allowed"),
    ] {
        let response = client
            .request(method.parse().unwrap(), format!("{}{path}", lane.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
        assert_common_headers(response.headers());
        assert_eq!(response.json::<Value>().await.unwrap()["error"], code);
    }
    let visitor = Visitor::new(&lane).await;
    for body in [r#"{"unknown":1}"#, "{} {}", "[]"] {
        let response = visitor
            .http
            .post(format!("{}/_concert/payment", lane.base))
            .header("x-concert-csrf", &visitor.csrf)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        assert_eq!(
            response.json::<Value>().await.unwrap()["error"],
            "invalid_request"
        );
    }
    let response = visitor
        .http
        .post(format!("{}/_concert/session", lane.base))
        .body(vec![b' '; 64 * 1024 + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let response = visitor
        .http
        .post(format!("{}/_concert/solana/prepare", lane.base))
        .header("x-concert-csrf", &visitor.csrf)
        .body(r#"{"network":"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1","from":"x","extra":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(visitor.status().await["eligible"], false);
}

#[tokio::test]
async fn a_disabled_lane_answers_config_and_nothing_else() {
    let dir = test_mode_lane_dir();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut off = settings(&base, "");
    off.enabled = false;
    let lane = FastLane::new(FastLaneOptions {
        settings: off,
        data_dir: dir.path(),
        admit_secret: SECRET,
        facilitator: Arc::new(ScriptedFacilitator(Arc::default())),
        policy_token: "",
        entry_ttl: Duration::ZERO,
        skip_url: "/skip",
        line: None,
    })
    .unwrap();
    let request = |method: &str, path: &str| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let client: IpAddr = "127.0.0.1".parse().unwrap();
    let response = lane
        .handle(request("GET", "/_concert/config"), client)
        .await;
    assert_eq!(response.status(), 200);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["enabled"], false);
    assert_eq!(body["legacy_skip_url"], "/skip");
    let response = lane
        .handle(request("POST", "/_concert/payment"), client)
        .await;
    assert_eq!(response.status(), 404);
    assert_eq!(
        lane.handle(request("GET", "/_concert/access"), client)
            .await
            .status(),
        200
    );
    assert_eq!(
        concert::fastlane::service::disabled_config("/s"),
        r#"{"enabled":false,"legacy_skip_url":"/s"}"#
    );
}

// ---------------------------------------------------------------- the access page in a browser

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_page_shows_the_offer_and_retries_a_stored_payment_unchanged() {
    let dir = test_mode_lane_dir();
    let lane = start_lane(dir.path(), "", Duration::ZERO).await.unwrap();
    let browser = browser::Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    // A return target inside /_concert is refused in favour of the site's root.
    page.goto(&format!(
        "{}/_concert/access?return=/_concert/config",
        lane.base
    ))
    .await
    .unwrap();
    let offer = page
        .wait_for(
            "document.querySelector('#offers button') && document.querySelector('#offers button').textContent",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(offer, "Five minutes — 1.500000 XRP");
    let merchant = page
        .eval("document.getElementById('merchant').textContent")
        .await
        .unwrap();
    assert_eq!(merchant, "Example Tickets");
    let no_wallet = page
        .eval("document.getElementById('no-wallet').hidden")
        .await
        .unwrap();
    assert_eq!(
        no_wallet, false,
        "the page says no wallet adapter is installed"
    );
    let terms = page
        .eval("document.getElementById('terms').href")
        .await
        .unwrap();
    assert_eq!(terms, "https://example.test/terms");
    page.wait_for(
        "document.cookie !== undefined && window.performance.getEntriesByName(location.origin + '/_concert/status').length > 0",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let cookies = page.cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name == "concert_fastlane")
        .expect("session cookie");
    assert!(session.http_only);
    assert_eq!(session.same_site.as_deref(), Some("Strict"));

    // A payment signed earlier waits in sessionStorage; the retry sends exactly that header.
    let header = payment(&lane, "PAGE01");
    page.eval(&format!(
        "sessionStorage.setItem('concert.pending-payment', '{header}'); document.getElementById('retry').click(); true"
    ))
    .await
    .unwrap();
    page.wait_for(
        "document.getElementById('state').textContent.indexOf('Paid') === 0",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let stored = page
        .eval("sessionStorage.getItem('concert.pending-payment')")
        .await
        .unwrap();
    assert_eq!(
        stored,
        Value::Null,
        "a final answer clears the stored payment"
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        "cookie",
        HeaderValue::try_from(format!("concert_fastlane={}", session.value)).unwrap(),
    );
    assert!(lane.lane.eligible(&headers, now_unix()).is_some());
    assert_eq!(lane.script.settles.load(Ordering::SeqCst), 1);
    page.wait_for("location.pathname === '/'", Duration::from_secs(10))
        .await
        .unwrap();
    let problems = page.problems();
    assert!(problems.is_empty(), "{problems:?}");
}
