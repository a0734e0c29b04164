//! What the fast lane costs the request path: `FastLane::eligible` for a request whose session
//! holds a live receipt (cookie and header forms) and for one without any credential.

use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use concert::fastlane::facilitator::{Facilitator, GatewayError};
use concert::fastlane::mechanism::BoxFuture;
use concert::fastlane::service::clock::now_unix;
use concert::fastlane::service::{FastLane, FastLaneOptions};
use concert::fastlane::settings::{FastlaneSettings, Offer};
use concert::fastlane::x402::{
    FacilitatorRequest, PaymentRequirements, SettleResponse, SupportedKind, VerifyResponse,
};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue, Request};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

/// Accepts every payment at once: the bench measures the lane, not a chain.
struct AcceptingFacilitator;

impl Facilitator for AcceptingFacilitator {
    fn supported(&self) -> Vec<SupportedKind> {
        vec![SupportedKind {
            x402_version: 2,
            scheme: "exact".into(),
            network: "xrpl:1".into(),
        }]
    }

    fn verify<'a>(
        &'a self,
        _: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, GatewayError>> {
        Box::pin(async { Ok(VerifyResponse::valid("rPayer")) })
    }

    fn settle(
        &self,
        request: FacilitatorRequest,
    ) -> BoxFuture<'static, Result<SettleResponse, GatewayError>> {
        Box::pin(async move {
            Ok(SettleResponse {
                success: true,
                error_reason: None,
                transaction: "TXBENCH".into(),
                network: request.payment_requirements.network,
                payer: Some("rPayer".into()),
            })
        })
    }

    fn solana_prepare<'a>(&'a self, _: &'a Value) -> BoxFuture<'a, Result<Value, GatewayError>> {
        Box::pin(async { Err(GatewayError::Rejected("none".into())) })
    }
}

fn terms() -> PaymentRequirements {
    PaymentRequirements {
        scheme: "exact".into(),
        network: "xrpl:1".into(),
        amount: "1000000".into(),
        asset: "XRP".into(),
        pay_to: "rMerchant".into(),
        max_timeout_seconds: 60,
        extra: None,
    }
}

async fn body_json(lane: &Arc<FastLane>, request: Request<axum::body::Body>) -> Value {
    let client: IpAddr = "127.0.0.1".parse().unwrap();
    let response = lane.handle(request, client).await;
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

fn paid_lane(dir: &std::path::Path) -> (Arc<FastLane>, String) {
    let origin = "http://127.0.0.1:8080";
    let lane = FastLane::new(FastLaneOptions {
        settings: FastlaneSettings {
            enabled: true,
            origin: origin.into(),
            gateway_url: String::new(),
            policy_url: String::new(),
            test_mode: true,
            pass_seconds: 3600,
            nft_pass_seconds: 30,
            max_records: 1000,
            merchant: "Bench".into(),
            terms_url: "https://x/t".into(),
            privacy_url: "https://x/p".into(),
            refund_url: "https://x/r".into(),
            offers: vec![Offer {
                label: "pass".into(),
                requirements: terms(),
                deposit_only: false,
            }],
            collections: vec![],
            listings: vec![],
        },
        data_dir: dir,
        admit_secret: b"bench secret bench secret bench secret",
        facilitator: Arc::new(AcceptingFacilitator),
        policy_token: "",
        entry_ttl: Duration::from_secs(300),
        skip_url: "",
        line: None,
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let token = runtime.block_on(async {
        let session = body_json(
            &lane,
            Request::post("/_concert/session")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
        let token = session["session"].as_str().unwrap().to_owned();
        let csrf = session["csrf"].as_str().unwrap().to_owned();
        let payment =
            json!({"x402Version": 2, "accepted": terms(), "payload": {"signedTxBlob": "AA"}});
        let paid = body_json(
            &lane,
            Request::post("/_concert/payment")
                .header("concert-session", &token)
                .header("x-concert-csrf", csrf)
                .header("payment-signature", STANDARD.encode(payment.to_string()))
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(paid["eligible"], true, "{paid}");
        token
    });
    (lane, token)
}

fn eligibility(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (lane, token) = paid_lane(dir.path());
    let now = now_unix();
    let mut cookie = HeaderMap::new();
    cookie.insert("accept", HeaderValue::from_static("text/html"));
    cookie.insert(
        "cookie",
        HeaderValue::try_from(format!("theme=dark; concert_fastlane={token}; cart=3")).unwrap(),
    );
    let mut header = HeaderMap::new();
    header.insert("concert-session", HeaderValue::try_from(token).unwrap());
    let mut nothing = HeaderMap::new();
    nothing.insert("accept", HeaderValue::from_static("text/html"));
    nothing.insert("cookie", HeaderValue::from_static("theme=dark; cart=3"));
    assert!(lane.eligible(&cookie, now).is_some());
    assert!(lane.eligible(&header, now).is_some());
    assert!(lane.eligible(&nothing, now).is_none());

    let mut group = c.benchmark_group("fastlane_eligible");
    group.bench_function("live_receipt_cookie", |b| {
        b.iter(|| black_box(lane.eligible(black_box(&cookie), now)))
    });
    group.bench_function("live_receipt_header", |b| {
        b.iter(|| black_box(lane.eligible(black_box(&header), now)))
    });
    group.bench_function("no_credential", |b| {
        b.iter(|| black_box(lane.eligible(black_box(&nothing), now)))
    });
    group.finish();
}

criterion_group!(benches, eligibility);
criterion_main!(benches);
