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
use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use support::origins::{Origin, full, origin_with};
use tokio::sync::Semaphore;

const SECRET: &str = "fast-lane-room-test-secret-0123456789abcdef";

use support::rippled::{Ledger, start as start_ledger, vector_case};

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
    start_shop_with(&[]).await
}

/// A shop whose Concert also gets `extra` arguments.
async fn start_shop_with(extra: &[&str]) -> Shop {
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
    let args: Vec<String> = args
        .into_iter()
        .chain(extra.iter().map(|arg| arg.to_string()))
        .collect();
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

/// Desktop and phone-width pictures of the page, kept with the build for a look.
async fn screenshots(page: &browser::Page, name: &str) {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fastlane-screens");
    std::fs::create_dir_all(&dir).unwrap();
    for (width, height, mobile, suffix) in
        [(1280, 900, false, "desktop"), (390, 844, true, "phone")]
    {
        page.set_viewport(width, height, mobile).await.unwrap();
        page.screenshot(dir.join(format!("{name}-{suffix}.png")))
            .await
            .unwrap();
    }
    page.set_viewport(1280, 900, false).await.unwrap();
}

/// Queues a visitor at the full room: its `room_ticket` cookie.
async fn queue_visitor(shop: &Shop) -> String {
    let answer = client()
        .get(format!("{}/page", shop.base))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    answer
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|cookie| cookie.strip_prefix("room_ticket="))
        .and_then(|rest| rest.split(';').next())
        .expect("a room_ticket")
        .to_owned()
}

/// The 402's offers for `session`, asked with `ticket` (if any) in the Cookie header.
async fn quoted_offers(shop: &Shop, session: &(String, String), ticket: Option<&str>) -> Value {
    let mut request = client()
        .post(format!("{}/_concert/payment", shop.base))
        .header("concert-session", &session.0)
        .header("x-concert-csrf", &session.1);
    if let Some(ticket) = ticket {
        request = request.header("cookie", format!("room_ticket={ticket}"));
    }
    let asked = request.send().await.unwrap();
    assert_eq!(asked.status(), 402);
    let header = asked.headers()["payment-required"]
        .to_str()
        .unwrap()
        .to_owned();
    let required: Value = serde_json::from_slice(&STANDARD.decode(header).unwrap()).unwrap();
    assert_eq!(required, asked.json::<Value>().await.unwrap());
    required["accepts"].clone()
}

/// The vector payment re-signed by its payer for `drops`.
fn blob_paying(shop: &Shop, drops: u64) -> String {
    use concert::fastlane::chains::xrpl::{codec, keys::KeyPair};
    let mut tx = codec::decode(&hex::decode(&shop.blob).unwrap()).unwrap();
    tx.set(codec::field::AMOUNT, codec::native_amount(drops));
    KeyPair::from_seed("sp59tVwt6dzAsmAVBCFLdpL5SoBwA")
        .unwrap()
        .sign_transaction(&mut tx);
    hex::encode_upper(tx.encode())
}

fn payment_with_blob(shop: &Shop, accepted: &Value, blob: &str) -> String {
    let payment = json!({
        "x402Version": 2,
        "resource": {"url": format!("{}/_concert/payment", shop.base)},
        "accepted": accepted,
        "payload": {"signedTxBlob": blob},
    });
    STANDARD.encode(payment.to_string())
}

#[tokio::test]
async fn with_rate_set_the_offer_costs_what_skipping_the_visitors_ahead_costs() {
    // Each visitor ahead adds half the offer's price (0.1 XRP).
    let shop = start_shop_with(&["-rate", "0.5"]).await;
    let base = shop.base.clone();
    let filler =
        tokio::spawn(async move { client().get(format!("{base}/hold-room")).send().await });
    assert!(eventually(|| shop.concert.app.room.stats().occupancy == 1).await);
    let first = queue_visitor(&shop).await;
    let third_ahead = [queue_visitor(&shop).await, queue_visitor(&shop).await];
    let third = third_ahead[1].clone();

    // First in line: nobody to skip, the offer as configured.
    let first_session = open_session(&shop).await;
    let offers = quoted_offers(&shop, &first_session, Some(&first)).await;
    assert_eq!(offers[0], shop.requirements);

    // Third in line: two ahead, 0.1 + 2 × 0.05 XRP, quoted for this session.
    let session = open_session(&shop).await;
    let offers = quoted_offers(&shop, &session, Some(&third)).await;
    let quote = offers[0].clone();
    assert_eq!(quote["amount"], "200000");
    assert_eq!(quote["extra"]["areFeesSponsored"], false);
    assert!(quote["extra"]["concertQuote"].is_string(), "{quote}");

    // Without a ticket the price is the whole line's: three ahead.
    let offers = quoted_offers(&shop, &session, None).await;
    assert_eq!(offers[0]["amount"], "250000");

    // A quote with its amount lowered, or presented by another session, is refused.
    let mut cheaper = quote.clone();
    cheaper["amount"] = json!("150000");
    let header = payment_with_blob(&shop, &cheaper, &blob_paying(&shop, 150_000));
    let refused = pay(&shop, &session, Some(&header)).await;
    assert_eq!(refused.status(), 400);
    assert_eq!(
        refused.json::<Value>().await.unwrap()["error"],
        "payment_terms_mismatch"
    );
    let header = payment_with_blob(&shop, &quote, &blob_paying(&shop, 200_000));
    let borrowed = pay(&shop, &first_session, Some(&header)).await;
    assert_eq!(borrowed.status(), 400);
    // A payment of the old price against the quote does not verify.
    let underpaid = payment_with_blob(&shop, &quote, &shop.blob);
    assert_eq!(pay(&shop, &session, Some(&underpaid)).await.status(), 402);
    // The same quote ended: asked again, with a fresh quote, before anything is submitted.
    let session_hex = quote["extra"]["concertQuote"]
        .as_str()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_owned();
    let offer: concert::fastlane::x402::PaymentRequirements =
        serde_json::from_value(shop.requirements.clone()).unwrap();
    let ended = concert::fastlane::quote::QuoteKey::from_admit_secret(SECRET.as_bytes()).quote(
        &offer,
        1.0,
        &session_hex,
        1,
    );
    assert_eq!(ended.amount, "200000");
    let ended = payment_with_blob(
        &shop,
        &serde_json::to_value(&ended).unwrap(),
        &blob_paying(&shop, 200_000),
    );
    let asked_again = pay(&shop, &session, Some(&ended)).await;
    assert_eq!(asked_again.status(), 402);
    let again: Value = asked_again.json().await.unwrap();
    assert_eq!(again["error"], "quote_expired");
    assert_eq!(again["accepts"][0]["amount"], "250000");
    assert_eq!(shop.ledger.submits.load(Ordering::SeqCst), 0);

    // The quoted price, paid by its session: settled once, and the pass rides the lane.
    *shop.ledger.delivered.lock().unwrap() = "200000".into();
    let paid = pay(&shop, &session, Some(&header)).await;
    assert_eq!(paid.status(), 200, "{:?}", paid.text().await);
    assert_eq!(shop.ledger.submits.load(Ordering::SeqCst), 1);
    let riding = client()
        .get(format!("{}/page", shop.base))
        .header("concert-session", &session.0)
        .send()
        .await
        .unwrap();
    assert_eq!(riding.json::<Value>().await.unwrap()["origin"], true);

    // Pricing off again (live): the offer is back to its configured price.
    shop.concert
        .app
        .change_settings(|config, _| {
            config.rate = 0.0;
            Ok(())
        })
        .expect("live change");
    let other = open_session(&shop).await;
    let offers = quoted_offers(&shop, &other, Some(&third_ahead[0])).await;
    assert_eq!(offers[0], shop.requirements);

    shop.gate.add_permits(2);
    let _ = filler.await;
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn the_waiting_page_shows_the_price_for_the_visitors_place_in_the_line() {
    const STEP: Duration = Duration::from_secs(15);
    let shop = start_shop_with(&["-rate", "0.5"]).await;
    let base = shop.base.clone();
    let filler =
        tokio::spawn(async move { client().get(format!("{base}/hold-room")).send().await });
    assert!(eventually(|| shop.concert.app.room.stats().occupancy == 1).await);
    // Two ahead: the browser's visitor is third, so skipping costs 2 × 0.5 offer prices.
    let _ahead = [queue_visitor(&shop).await, queue_visitor(&shop).await];

    let browser = browser::Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.goto(&format!("{}/tickets", shop.base)).await.unwrap();
    page.wait_for(
        &format!(
            "({}) === 'For your place in the line, 0.2 XRP buys 5 minutes in the fast lane, past this line while it lasts.'",
            text_of("fastlane-offer")
        ),
        STEP,
    )
    .await
    .unwrap();
    // The money-priced skip link belongs to sites without a lane.
    assert_eq!(
        page.eval(&is_shown("skip-price")).await.unwrap(),
        json!(false)
    );
    screenshots(&page, "waiting-priced").await;

    // On the access page a wallet (one the site would install) pays what the line asks.
    page.eval("document.getElementById('fastlane-link').click(), true")
        .await
        .unwrap();
    page.wait_for(
        "document.querySelectorAll('#offers button').length === 1",
        STEP,
    )
    .await
    .unwrap();
    let wallet = format!(
        "window.paidAmounts = []; window.concertWallets.xrpl = {{            connect: async () => ({{ address: '{payer}' }}),            createPaymentPayload: async (ask) => {{              window.paidAmounts.push(ask.requirements.amount);              return {{ signedTxBlob: '{blob}' }}; }} }};          document.querySelector('#offers button').disabled = false; true",
        payer = "rPayerOfTheVectorPayment",
        blob = blob_paying(&shop, 200_000),
    );
    page.eval(&wallet).await.unwrap();
    // First choice: the price for this place is shown, and no wallet is asked yet.
    page.eval("document.querySelector('#offers button').click(), true")
        .await
        .unwrap();
    page.wait_for(
        "document.getElementById('state').textContent.startsWith('For your place in the line the price is 0.200000 XRP')",
        STEP,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval("document.querySelector('#offers button').textContent")
            .await
            .unwrap(),
        "Five minutes — 0.200000 XRP"
    );
    assert_eq!(page.eval("window.paidAmounts.length").await.unwrap(), 0);
    screenshots(&page, "access-quoted").await;
    // Second choice: paid at that price, settled once, and back to the site past the line.
    *shop.ledger.delivered.lock().unwrap() = "200000".into();
    page.eval("document.querySelector('#offers button').click(), true")
        .await
        .unwrap();
    page.wait_for(
        "document.getElementById('state').textContent.startsWith('Paid.')",
        STEP,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval("window.paidAmounts").await.unwrap(),
        json!(["200000"])
    );
    assert_eq!(shop.ledger.submits.load(Ordering::SeqCst), 1);
    page.wait_for("location.pathname === '/tickets'", STEP)
        .await
        .unwrap();
    page.wait_for(
        "document.body.textContent.includes('\"origin\":true')",
        STEP,
    )
    .await
    .unwrap();
    // The only complaints are the two 402s the exchange is made of.
    let problems = page.problems();
    assert!(
        problems.len() == 2 && problems.iter().all(|p| p.contains("status of 402")),
        "{problems:?}"
    );

    shop.gate.add_permits(1);
    let _ = filler.await;
    let _ = shop.concert.shutdown().await;
}
