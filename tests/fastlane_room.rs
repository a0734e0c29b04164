//! The fast lane end to end: Concert started as the binary starts it, with fastlane.json and
//! networks.json in its data directory, an XRPL offer, and a loopback rippled that replays the
//! state of the vector payment. A visitor opens a session, is asked to pay (402), pays with the
//! vector's signed blob, and then rides the lane past a full room; a paid form that finds even
//! the lane full is refused, never sent; the lane's credentials never reach the origin.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use support::origins::{Origin, full, origin_with};
use tokio::sync::Semaphore;

const SECRET: &str = "fast-lane-room-test-secret-0123456789abcdef";

fn vector_case(name: &str) -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/xrpl.json"
    ))
    .expect("xrpl vectors");
    let vectors: Value = serde_json::from_str(&text).expect("vectors parse");
    vectors["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|case| case["name"] == name)
        .cloned()
        .expect("vector case")
}

/// A rippled that knows one account (the vector payer at sequence 5) on network 1 at ledger
/// 1000, accepts submissions and reports them validated.
struct Ledger {
    payer: String,
    submits: AtomicU64,
    /// Whether a submitted payment ever shows up validated.
    validates: std::sync::atomic::AtomicBool,
}

async fn rippled(
    axum::extract::State(ledger): axum::extract::State<Arc<Ledger>>,
    body: String,
) -> axum::Json<Value> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let params = &request["params"][0];
    let result = match request["method"].as_str().unwrap_or_default() {
        "server_info" => json!({
            "info": {"network_id": 1, "validated_ledger": {"seq": 1000}},
            "status": "success"
        }),
        "account_info" if params["account"] == json!(ledger.payer) => json!({
            "account_data": {"Account": ledger.payer, "Sequence": 5, "Flags": 0, "Balance": "100000000"},
            "validated": true,
            "status": "success"
        }),
        "simulate" => json!({"engine_result": "tesSUCCESS", "applied": false}),
        "submit" => {
            ledger.submits.fetch_add(1, Ordering::SeqCst);
            json!({"engine_result": "tesSUCCESS", "status": "success"})
        }
        "tx" if !ledger.validates.load(Ordering::SeqCst) => json!({
            "hash": params["transaction"],
            "validated": false
        }),
        "tx" => json!({
            "hash": params["transaction"],
            "validated": true,
            "meta": {"TransactionResult": "tesSUCCESS", "delivered_amount": "100000"}
        }),
        _ => json!({"error": "unknownCmd", "status": "error"}),
    };
    axum::Json(json!({ "result": result }))
}

async fn start_ledger(payer: &str) -> (String, Arc<Ledger>) {
    let ledger = Arc::new(Ledger {
        payer: payer.to_owned(),
        submits: AtomicU64::new(0),
        validates: std::sync::atomic::AtomicBool::new(true),
    });
    let app = axum::Router::new()
        .route("/", post(rippled))
        .with_state(ledger.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}/"), ledger)
}

/// `/hold…` waits for a permit of `gate`; everything else answers with the request's header
/// names and its Cookie header, so a test sees what reached the origin.
fn shop_origin(gate: Arc<Semaphore>) -> Origin {
    origin_with(move |req, tools| {
        let gate = gate.clone();
        async move {
            if req.uri().path().starts_with("/hold") {
                tokio::select! {
                    permit = gate.acquire() => {
                        if let Ok(permit) = permit {
                            permit.forget();
                        }
                    }
                    _ = tools.stopped() => {}
                }
            }
            let names: Vec<&str> = req.headers().keys().map(|name| name.as_str()).collect();
            let cookie = req
                .headers()
                .get("cookie")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default();
            let report = json!({"origin": true, "headers": names, "cookie": cookie});
            http::Response::new(full(report.to_string()))
        }
    })
}

struct Shop {
    concert: concert::Running,
    base: String,
    origin: Origin,
    gate: Arc<Semaphore>,
    ledger: Arc<Ledger>,
    requirements: Value,
    blob: String,
    _data: tempfile::TempDir,
}

async fn start_shop() -> Shop {
    let case = vector_case("valid secp256k1");
    let payer = case["payer"].as_str().unwrap().to_owned();
    let (rpc, ledger) = start_ledger(&payer).await;
    let gate = Arc::new(Semaphore::new(0));
    let origin = shop_origin(gate.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let data = tempfile::tempdir().unwrap();
    let fastlane = json!({
        "enabled": true,
        "origin": base,
        "test_mode": true,
        "pass_seconds": 300,
        "merchant": "The test shop",
        "terms_url": "https://shop.example/terms",
        "privacy_url": "https://shop.example/privacy",
        "refund_url": "https://shop.example/refunds",
        "offers": [{"label": "Five minutes", "requirements": case["requirements"]}],
    });
    std::fs::write(
        data.path().join("fastlane.json"),
        serde_json::to_vec_pretty(&fastlane).unwrap(),
    )
    .unwrap();
    std::fs::write(
        data.path().join("networks.json"),
        serde_json::to_vec_pretty(&json!({"xrpl:1": {"rpc": rpc}})).unwrap(),
    )
    .unwrap();
    let args: Vec<String> = vec![
        "-upstream".into(),
        origin.url(),
        "-cap".into(),
        "1".into(),
        "-priority-cap".into(),
        "1".into(),
        "-priority-wait".into(),
        "300ms".into(),
        "-data-dir".into(),
        data.path().display().to_string(),
    ];
    let env: HashMap<String, String> =
        HashMap::from([("CONCERT_ADMIT_SECRET".to_owned(), SECRET.to_owned())]);
    let config = match concert::config::load(&args, &env).expect("config") {
        concert::config::Loaded::Run(config) => *config,
        _ => unreachable!(),
    };
    let concert = concert::start(config, Some(listener)).await.expect("start");
    Shop {
        concert,
        base,
        origin,
        gate,
        ledger,
        requirements: case["requirements"].clone(),
        blob: case["blob"].as_str().unwrap().to_owned(),
        _data: data,
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A session over headers: `(token, csrf)`.
async fn open_session(shop: &Shop) -> (String, String) {
    let answer = client()
        .post(format!("{}/_concert/session", shop.base))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    (
        body["session"].as_str().unwrap().to_owned(),
        body["csrf"].as_str().unwrap().to_owned(),
    )
}

fn payment_header(shop: &Shop, accepted: &Value) -> String {
    let payment = json!({
        "x402Version": 2,
        "resource": {"url": format!("{}/_concert/payment", shop.base)},
        "accepted": accepted,
        "payload": {"signedTxBlob": shop.blob},
    });
    STANDARD.encode(payment.to_string())
}

async fn pay(shop: &Shop, session: &(String, String), header: Option<&str>) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}/_concert/payment", shop.base))
        .header("concert-session", &session.0)
        .header("x-concert-csrf", &session.1);
    if let Some(header) = header {
        request = request.header("payment-signature", header);
    }
    request.send().await.unwrap()
}

async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

#[tokio::test]
async fn a_paid_visitor_rides_the_lane_past_a_full_room_and_a_form_the_lane_cannot_take_is_refused()
{
    let shop = start_shop().await;
    let session = open_session(&shop).await;

    // Asked to pay: 402 with the offer, as JSON and in PAYMENT-REQUIRED.
    let asked = pay(&shop, &session, None).await;
    assert_eq!(asked.status(), 402);
    let required = asked.headers()["payment-required"]
        .to_str()
        .unwrap()
        .to_owned();
    let required: Value = serde_json::from_slice(&STANDARD.decode(required).unwrap()).unwrap();
    assert_eq!(required["x402Version"], 2);
    assert_eq!(required["accepts"][0], shop.requirements);

    // Paying with the signed vector payment settles it on the ledger once.
    let header = payment_header(&shop, &required["accepts"][0]);
    let paid = pay(&shop, &session, Some(&header)).await;
    assert_eq!(paid.status(), 200, "{:?}", paid.text().await);
    let receipt_header = paid.headers()["payment-response"]
        .to_str()
        .unwrap()
        .to_owned();
    let settled: Value = serde_json::from_slice(&STANDARD.decode(receipt_header).unwrap()).unwrap();
    assert_eq!(settled["success"], true);
    assert_eq!(settled["network"], "xrpl:1");
    assert_eq!(shop.ledger.submits.load(Ordering::SeqCst), 1);
    // The identical payment again returns the receipt and submits nothing.
    let again = pay(&shop, &session, Some(&header)).await;
    assert_eq!(again.status(), 200);
    assert_eq!(shop.ledger.submits.load(Ordering::SeqCst), 1);

    // Fill the room: one page held at the origin (cap 1).
    let base = shop.base.clone();
    let filler =
        tokio::spawn(async move { client().get(format!("{base}/hold-room")).send().await });
    assert!(eventually(|| shop.concert.app.room.stats().occupancy == 1).await);

    // Without a pass: the waiting room.
    let waiting = client()
        .get(format!("{}/page", shop.base))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    let waiting_body = waiting.text().await.unwrap();
    assert!(!waiting_body.contains("\"origin\":true"), "{waiting_body}");

    // With the pass: past the room, and the lane's credentials stay behind.
    let hits_before = shop.origin.hits();
    let riding = client()
        .get(format!("{}/page", shop.base))
        .header("accept", "text/html")
        .header("concert-session", &session.0)
        .header("x-concert-csrf", &session.1)
        .header(
            "cookie",
            format!("concert_fastlane={}; theme=dark", session.0),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(riding.status(), 200);
    let seen: Value = riding.json().await.unwrap();
    assert_eq!(seen["origin"], true);
    let names = seen["headers"].as_array().unwrap();
    for private in ["concert-session", "x-concert-csrf", "payment-signature"] {
        assert!(
            !names.contains(&json!(private)),
            "{private} reached the origin"
        );
    }
    assert_eq!(seen["cookie"], "theme=dark");
    assert_eq!(shop.origin.hits(), hits_before + 1);

    // Hold the lane's only slot with a paid page, then send a paid form: refused, not sent.
    let base = shop.base.clone();
    let token = session.0.clone();
    let lane_holder = tokio::spawn(async move {
        client()
            .get(format!("{base}/hold-lane"))
            .header("concert-session", token)
            .send()
            .await
    });
    assert!(eventually(|| shop.origin.in_flight() == 2).await);
    let hits_before = shop.origin.hits();
    let form = client()
        .post(format!("{}/order", shop.base))
        .header("concert-session", &session.0)
        .body("qty=1")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 503);
    assert!(form.headers().contains_key("retry-after"));
    let refusal: Value = form.json().await.unwrap();
    assert_eq!(refusal["error"], "fast_lane_busy");
    assert_eq!(refusal["submitted"], false);
    assert_eq!(refusal["charged_again"], false);
    assert_eq!(
        shop.origin.hits(),
        hits_before,
        "the refused form reached the origin"
    );

    shop.gate.add_permits(2);
    let _ = filler.await;
    let _ = lane_holder.await;
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn a_forged_session_is_not_eligible_and_waits_like_everyone_else() {
    let shop = start_shop().await;
    let base = shop.base.clone();
    let filler =
        tokio::spawn(async move { client().get(format!("{base}/hold-room")).send().await });
    assert!(eventually(|| shop.concert.app.room.stats().occupancy == 1).await);
    let hits_before = shop.origin.hits();
    let forged =
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.4102444800.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let answer = client()
        .get(format!("{}/page", shop.base))
        .header("accept", "text/html")
        .header("concert-session", forged)
        .send()
        .await
        .unwrap();
    let body = answer.text().await.unwrap();
    assert!(!body.contains("\"origin\":true"));
    assert_eq!(shop.origin.hits(), hits_before);
    shop.gate.add_permits(1);
    let _ = filler.await;
    let _ = shop.concert.shutdown().await;
}

fn text_of(id: &str) -> String {
    format!("document.getElementById('{id}') && document.getElementById('{id}').textContent")
}

fn is_shown(id: &str) -> String {
    format!(
        "(() => {{ const el = document.getElementById('{id}'); \
         return !!el && !el.hidden && el.getClientRects().length > 0; }})()"
    )
}

#[tokio::test]
async fn the_waiting_page_of_a_full_room_offers_the_lane_and_its_link_opens_the_offer() {
    const STEP: Duration = Duration::from_secs(15);
    let shop = start_shop().await;
    let base = shop.base.clone();
    let filler =
        tokio::spawn(async move { client().get(format!("{base}/hold-room")).send().await });
    assert!(eventually(|| shop.concert.app.room.stats().occupancy == 1).await);

    let browser = browser::Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.goto(&format!("{}/tickets?show=42", shop.base))
        .await
        .unwrap();
    page.wait_for(&is_shown("fastlane-link"), STEP)
        .await
        .unwrap();
    assert_eq!(
        page.eval(&text_of("fastlane-offer")).await.unwrap(),
        "0.1 XRP buys 5 minutes in the fast lane, past this line while it lasts."
    );
    assert_eq!(
        page.eval("document.getElementById('fastlane-terms-link').getAttribute('href')")
            .await
            .unwrap(),
        "https://shop.example/terms"
    );
    page.eval("document.getElementById('fastlane-link').click(), true")
        .await
        .unwrap();
    page.wait_for("location.pathname === '/_concert/access'", STEP)
        .await
        .unwrap();
    assert_eq!(
        page.eval("location.search").await.unwrap(),
        "?return=%2Ftickets%3Fshow%3D42"
    );
    page.wait_for("document.querySelectorAll('#offers li').length === 1", STEP)
        .await
        .unwrap();
    assert_eq!(
        page.eval(&text_of("merchant")).await.unwrap(),
        "The test shop"
    );
    let offer = page.eval(&text_of("offers")).await.unwrap();
    assert!(
        offer
            .as_str()
            .is_some_and(|text| text.contains("Five minutes") && text.contains("0.100000 XRP")),
        "{offer}"
    );
    assert_eq!(
        page.eval("document.getElementById('terms').getAttribute('href')")
            .await
            .unwrap(),
        "https://shop.example/terms"
    );
    // Both pages run under the self-only policy without a script error or violation.
    assert_eq!(page.problems(), Vec::<String>::new());

    shop.gate.add_permits(1);
    let _ = filler.await;
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn a_wallet_request_whose_body_stalls_is_cut_off_with_408() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let shop = start_shop().await;
    let address = shop.base.trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    socket
        .write_all(
            format!(
                "POST /_concert/session HTTP/1.1\r\nHost: {address}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buffer = [0u8; 1024];
        loop {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buffer[..n]);
                    if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the stalled body held the request open");
    let head = String::from_utf8_lossy(&answer);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    let _ = shop.concert.shutdown().await;
}

/// Writes fastlane.json (one XRPL offer, test mode, `origin`) and networks.json (`rpc`).
fn write_lane_files(dir: &std::path::Path, origin: &str, rpc: &str, requirements: &Value) {
    let fastlane = json!({
        "enabled": true,
        "origin": origin,
        "test_mode": true,
        "merchant": "The test shop",
        "terms_url": "https://shop.example/terms",
        "privacy_url": "https://shop.example/privacy",
        "refund_url": "https://shop.example/refunds",
        "offers": [{"label": "Five minutes", "requirements": requirements}],
    });
    std::fs::write(dir.join("fastlane.json"), fastlane.to_string()).unwrap();
    std::fs::write(
        dir.join("networks.json"),
        json!({"xrpl:1": {"rpc": rpc}}).to_string(),
    )
    .unwrap();
}

fn spawn_binary(port: u16, upstream: &str, dir: &std::path::Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_concert"))
        .args([
            "-listen",
            &format!("127.0.0.1:{port}"),
            "-upstream",
            upstream,
            "-data-dir",
        ])
        .arg(dir)
        .env("CONCERT_ADMIT_SECRET", SECRET)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

async fn healthy(base: &str) -> bool {
    for _ in 0..200 {
        if let Ok(answer) = client().get(format!("{base}/_room/healthz")).send().await
            && answer.status() == 200
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn killed_mid_settlement_nothing_is_resubmitted_after_the_restart() {
    let case = vector_case("valid secp256k1");
    let payer = case["payer"].as_str().unwrap().to_owned();
    let (rpc, ledger) = start_ledger(&payer).await;
    // Submitted payments never validate: the settlement is still running when Concert dies.
    ledger.validates.store(false, Ordering::SeqCst);
    let origin = support::origins::fast_origin();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let data = tempfile::tempdir().unwrap();
    write_lane_files(data.path(), &base, &rpc, &case["requirements"]);
    let mut child = spawn_binary(port, &origin.url(), data.path());
    assert!(healthy(&base).await, "concert did not start");

    let session: Value = client()
        .post(format!("{base}/_concert/session"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = session["session"].as_str().unwrap().to_owned();
    let csrf = session["csrf"].as_str().unwrap().to_owned();
    let payment = json!({
        "x402Version": 2,
        "resource": {"url": format!("{base}/_concert/payment")},
        "accepted": case["requirements"],
        "payload": {"signedTxBlob": case["blob"]},
    });
    let header = STANDARD.encode(payment.to_string());
    let pay = |header: String| {
        let (base, token, csrf) = (base.clone(), token.clone(), csrf.clone());
        async move {
            client()
                .post(format!("{base}/_concert/payment"))
                .header("concert-session", token)
                .header("x-concert-csrf", csrf)
                .header("payment-signature", header)
                .send()
                .await
        }
    };
    let hanging = tokio::spawn(pay(header.clone()));
    assert!(
        eventually(|| ledger.submits.load(Ordering::SeqCst) == 1).await,
        "the payment was never submitted"
    );
    child.kill().unwrap();
    let _ = child.wait();
    hanging.abort();

    let mut child = spawn_binary(port, &origin.url(), data.path());
    assert!(healthy(&base).await, "concert did not restart");
    let retried = pay(header).await.unwrap();
    assert_eq!(retried.status(), 503);
    let answer: Value = retried.json().await.unwrap();
    assert_eq!(
        answer["error"],
        "settlement_unresolved_retry_identical_payment_do_not_pay_again"
    );
    assert_eq!(
        ledger.submits.load(Ordering::SeqCst),
        1,
        "the payment was submitted again after the restart"
    );
    let settlements =
        std::fs::read_to_string(data.path().join("gateway/settlements.jsonl")).unwrap();
    assert!(settlements.contains("\"pending\"") || settlements.contains("\"unknown\""));
    child.kill().unwrap();
    let _ = child.wait();
}
