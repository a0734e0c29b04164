//! Deposits, listings, the shop and the market end to end: Concert started as the binary starts
//! it, selling an XRPL offer that takes deposits, one listing and one collection, over a
//! loopback rippled whose `account_tx`, `nfts_by_issuer` and `nft_sell_offers` answer what
//! each test puts there. A visitor asks for its deposit intent, "pays" it (the payment appears
//! in the ledger's history), and checks; the lane credits each transfer once, to one session,
//! sells a listing once across restarts and a kill -9, and flags late payers.
//!
//! The other chains' deposit lookups are run against loopback Horizon, mirror and Solana RPC
//! servers answering in the recorded shapes, and matched the way the gateway matches.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::routing::get;
use concert::fastlane::facilitator::{DepositQuery, DepositReference};
use concert::fastlane::gateway::deposits::matching;
use concert::fastlane::lookups::ChainLookups;
use concert::fastlane::settings::NetworkSettings;
use serde_json::{Value, json};
use support::rippled::{Ledger, incoming_payment, start as start_ledger, vector_case};

const SECRET: &str = "fast-lane-deposit-test-secret-0123456789abcdef";
const ISSUER: &str = "rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq";
const PRICE: u64 = 100_000;
const LISTING_PRICE: u64 = 5_000_000;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn pay_to() -> String {
    vector_case("valid secp256k1")["requirements"]["payTo"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// fastlane.json (origin `base`) and networks.json (`rpc`) in `dir`.
fn write_lane_files(dir: &Path, base: &str, rpc: &str) {
    let fastlane = json!({
        "enabled": true,
        "origin": base,
        "test_mode": true,
        "pass_seconds": 300,
        "merchant": "The test shop",
        "terms_url": "https://shop.example/terms",
        "privacy_url": "https://shop.example/privacy",
        "refund_url": "https://shop.example/refunds",
        "offers": [{"label": "Five minutes", "requirements": vector_case("valid secp256k1")["requirements"]}],
        "collections": [{"id": "art", "label": "The art", "network": "xrpl:1", "collection": format!("{ISSUER}:7")}],
        "listings": [{"id": "poster", "label": "A signed poster", "network": "xrpl:1", "price": LISTING_PRICE.to_string()}],
    });
    std::fs::write(dir.join("fastlane.json"), fastlane.to_string()).unwrap();
    std::fs::write(
        dir.join("networks.json"),
        json!({"xrpl:1": {"rpc": rpc}}).to_string(),
    )
    .unwrap();
}

struct Shop {
    concert: concert::Running,
    base: String,
    _origin: support::origins::Origin,
}

/// Starts Concert in-process on the data directory `dir`.
async fn start_shop(dir: &Path, rpc: &str) -> Shop {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    write_lane_files(dir, &base, rpc);
    let origin = support::origins::fast_origin();
    let args: Vec<String> = vec![
        "-upstream".into(),
        origin.url(),
        "-data-dir".into(),
        dir.display().to_string(),
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
        _origin: origin,
    }
}

/// A visitor's session: `(token, csrf)`.
async fn open_session(base: &str) -> (String, String) {
    let body: Value = client()
        .post(format!("{base}/_concert/session"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        body["session"].as_str().unwrap().to_owned(),
        body["csrf"].as_str().unwrap().to_owned(),
    )
}

async fn post(
    base: &str,
    path: &str,
    session: &(String, String),
    body: Value,
) -> (u16, HashMap<String, String>, Value) {
    let answer = client()
        .post(format!("{base}/_concert{path}"))
        .header("concert-session", &session.0)
        .header("x-concert-csrf", &session.1)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let headers = answer
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_owned()))
        .collect();
    let text = answer.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn intent(base: &str, session: &(String, String), listing: &str) -> Value {
    let (status, _, body) = post(
        base,
        "/deposit",
        session,
        json!({"network": "xrpl:1", "listing": listing}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn check(
    base: &str,
    session: &(String, String),
    listing: &str,
) -> (u16, HashMap<String, String>, Value) {
    post(
        base,
        "/deposit/check",
        session,
        json!({"network": "xrpl:1", "listing": listing}),
    )
    .await
}

fn amount_of(intent: &Value) -> u64 {
    intent["amount"].as_str().unwrap().parse().unwrap()
}

fn tag_of(intent: &Value) -> u32 {
    intent["tag"].as_u64().unwrap() as u32
}

/// The ledger shows a payment of `intent` (its amount and tag) from `from`.
fn pay(ledger: &Ledger, hash: &str, from: &str, drops: u64, tag: Option<u32>) {
    ledger
        .incoming
        .lock()
        .unwrap()
        .insert(0, incoming_payment(hash, from, &pay_to(), drops, tag, 30));
}

fn journal_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("fastlane.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test]
async fn the_public_config_names_the_networks_that_take_deposits() {
    let (rpc, _ledger) = start_ledger(ISSUER).await;
    let data = tempfile::tempdir().unwrap();
    let shop = start_shop(data.path(), &rpc).await;
    let config: Value = client()
        .get(format!("{}/_concert/config", shop.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["deposit_networks"], json!(["xrpl:1"]));
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn an_intent_is_stable_per_session_across_restarts_and_unique_across_sessions() {
    let (rpc, _ledger) = start_ledger(ISSUER).await;
    let data = tempfile::tempdir().unwrap();
    let shop = start_shop(data.path(), &rpc).await;
    let one = open_session(&shop.base).await;
    let first = intent(&shop.base, &one, "").await;
    assert_eq!(intent(&shop.base, &one, "").await, first);
    assert_eq!(first["address"], pay_to());
    assert_eq!(first["price"], PRICE.to_string());
    let amount = amount_of(&first);
    assert!(amount > PRICE && amount <= PRICE + 5_000, "{amount}");
    assert_eq!(
        first["amount_display"],
        format!("0.{:06}", amount),
        "drops shown as XRP"
    );
    assert_ne!(tag_of(&first), 0);
    assert_eq!(first["memo"], "");
    assert_eq!(first["lookback_seconds"], 7200);
    assert_eq!(first["qr_content"], pay_to());
    assert!(
        first["qr"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,")
    );

    // Many sessions waiting at once (within the 60 wallet POSTs a minute one address may
    // send): no two share an amount or a tag.
    let mut amounts = vec![amount];
    let mut tags = vec![tag_of(&first)];
    for _ in 0..20 {
        let other = open_session(&shop.base).await;
        let theirs = intent(&shop.base, &other, "").await;
        assert!(!amounts.contains(&amount_of(&theirs)), "amount shared");
        assert!(!tags.contains(&tag_of(&theirs)), "tag shared");
        amounts.push(amount_of(&theirs));
        tags.push(tag_of(&theirs));
    }
    // A listing has an intent of its own, at its price.
    let for_listing = intent(&shop.base, &one, "poster").await;
    assert_eq!(for_listing["price"], LISTING_PRICE.to_string());
    assert_ne!(for_listing["tag"], first["tag"]);
    let (status, _, body) = post(
        &shop.base,
        "/deposit",
        &one,
        json!({"network": "stellar:testnet"}),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("deposit_not_offered"))
    );
    let (status, _, body) = post(
        &shop.base,
        "/deposit",
        &one,
        json!({"network": "xrpl:1", "surprise": 1}),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_deposit_request"))
    );
    let (status, _, _) = post(
        &shop.base,
        "/deposit",
        &one,
        json!({"network": "xrpl:1", "listing": "nope"}),
    )
    .await;
    assert_eq!(status, 404);
    let _ = shop.concert.shutdown().await;

    // Nothing is stored: the restarted lane derives the same instructions.
    let shop = start_shop(data.path(), &rpc).await;
    assert_eq!(intent(&shop.base, &one, "").await, first);
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn a_transfer_is_credited_once_to_one_session_even_after_a_restart() {
    let (rpc, ledger) = start_ledger(ISSUER).await;
    let data = tempfile::tempdir().unwrap();
    let shop = start_shop(data.path(), &rpc).await;
    let alice = open_session(&shop.base).await;
    let bob = open_session(&shop.base).await;
    let alices = intent(&shop.base, &alice, "").await;
    let bobs = intent(&shop.base, &bob, "").await;

    // Nothing paid yet: keep waiting.
    let (status, _, body) = check(&shop.base, &alice, "").await;
    assert_eq!(
        (status, &body),
        (200, &json!({"eligible": false, "waiting": true}))
    );
    // Too soon for another chain lookup.
    let (status, headers, body) = check(&shop.base, &alice, "").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("deposit_check_too_soon"))
    );
    assert!(headers.contains_key("retry-after"));
    let calls = ledger.account_tx_calls.load(Ordering::SeqCst);

    // One transfer that carries Alice's tag and, by chance, Bob's exact amount: both intents
    // match it, but it is one payment.
    pay(
        &ledger,
        "HASH-ONE",
        "rAlicePays",
        amount_of(&bobs),
        Some(tag_of(&alices)),
    );
    // Older payments beyond the page size, to make the lookup page.
    for n in 0..4 {
        ledger.incoming.lock().unwrap().push(incoming_payment(
            &format!("OLD-{n}"),
            "rSomeone",
            &pay_to(),
            1,
            None,
            60,
        ));
    }
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    let (status, headers, body) = check(&shop.base, &alice, "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["eligible"], true);
    assert_eq!(body["receipt"]["kind"], "deposit");
    assert_eq!(body["receipt"]["transaction"], "HASH-ONE");
    assert_eq!(body["receipt"]["payer"], "rAlicePays");
    assert!(headers.contains_key("payment-response"));
    assert!(
        ledger.account_tx_calls.load(Ordering::SeqCst) > calls + 1,
        "paged"
    );

    // Bob's check finds the same transfer and is not credited with it.
    let (status, _, body) = check(&shop.base, &bob, "").await;
    assert_eq!(
        (status, &body),
        (200, &json!({"eligible": false, "waiting": true}))
    );
    // Alice asking again is answered from her receipt, without a chain call.
    let calls = ledger.account_tx_calls.load(Ordering::SeqCst);
    let (status, _, body) = check(&shop.base, &alice, "").await;
    assert_eq!(
        (status, &body["receipt"]["transaction"]),
        (200, &json!("HASH-ONE"))
    );
    assert_eq!(ledger.account_tx_calls.load(Ordering::SeqCst), calls);
    let status: Value = client()
        .get(format!("{}/_concert/status", shop.base))
        .header("concert-session", &alice.0)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["eligible"], true);
    let _ = shop.concert.shutdown().await;

    // After a restart the journal still says whose it is.
    let shop = start_shop(data.path(), &rpc).await;
    let (status, _, body) = check(&shop.base, &bob, "").await;
    assert_eq!(
        (status, &body),
        (200, &json!({"eligible": false, "waiting": true}))
    );
    let deposits: Vec<Value> = journal_lines(data.path())
        .into_iter()
        .filter(|line| line["transaction"] == "HASH-ONE")
        .collect();
    assert_eq!(deposits.len(), 1);
    assert_eq!(deposits[0]["kind"], "deposit");
    assert_eq!(deposits[0]["state"], "settled");

    // Bob's own exact-amount payment, without a tag, is his.
    pay(&ledger, "HASH-TWO", "rBobPays", amount_of(&bobs), None);
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    let (status, _, body) = check(&shop.base, &bob, "").await;
    assert_eq!(
        (status, &body["receipt"]["transaction"]),
        (200, &json!("HASH-TWO"))
    );
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn a_listing_sells_once_across_a_restart_and_late_payers_are_flagged() {
    let (rpc, ledger) = start_ledger(ISSUER).await;
    let data = tempfile::tempdir().unwrap();
    let shop = start_shop(data.path(), &rpc).await;
    let buyer = open_session(&shop.base).await;
    let late = open_session(&shop.base).await;
    let buyers = intent(&shop.base, &buyer, "poster").await;
    // The late payer was shown an intent before the sale.
    let lates = intent(&shop.base, &late, "poster").await;
    assert_ne!(buyers["amount"], lates["amount"]);

    let shop_answer: Value = client()
        .get(format!("{}/_concert/shop", shop.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        shop_answer["listings"],
        json!([{"id": "poster", "label": "A signed poster", "network": "xrpl:1", "price": "5000000", "price_display": "5.000000", "sold": false, "bought": false}])
    );

    // Paying the listing's price with the right tag is enough (the reference match).
    pay(
        &ledger,
        "SALE-1",
        "rBuyer",
        LISTING_PRICE,
        Some(tag_of(&buyers)),
    );
    let (status, headers, body) = check(&shop.base, &buyer, "poster").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["receipt"]["kind"], "nft_sale");
    assert_eq!(body["receipt"]["amount"], "5000000");
    assert!(!headers.contains_key("concert-listing-conflict"));
    let shop_answer: Value = client()
        .get(format!("{}/_concert/shop", shop.base))
        .header("concert-session", &buyer.0)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shop_answer["listings"][0]["sold"], true);
    assert_eq!(shop_answer["listings"][0]["bought"], true);
    let _ = shop.concert.shutdown().await;

    // Restarted: the listing is still sold; new intents for it are refused.
    let shop = start_shop(data.path(), &rpc).await;
    let newcomer = open_session(&shop.base).await;
    let (status, _, body) = post(
        &shop.base,
        "/deposit",
        &newcomer,
        json!({"network": "xrpl:1", "listing": "poster"}),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("listing_already_sold"))
    );
    // The late payer's money is found, still buys a pass, and is flagged.
    pay(
        &ledger,
        "SALE-2",
        "rLate",
        amount_of(&lates),
        Some(tag_of(&lates)),
    );
    let (status, headers, body) = check(&shop.base, &late, "poster").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["eligible"], true);
    assert_eq!(body["receipt"]["kind"], "nft_sale_conflict");
    assert_eq!(
        headers.get("concert-listing-conflict").map(String::as_str),
        Some("1")
    );
    // The buyer asking again gets its sale.
    let (status, _, body) = check(&shop.base, &buyer, "poster").await;
    assert_eq!(
        (status, &body["receipt"]["transaction"]),
        (200, &json!("SALE-1"))
    );
    let _ = shop.concert.shutdown().await;

    let kinds: Vec<(String, String)> = journal_lines(data.path())
        .iter()
        .map(|line| {
            (
                line["kind"].as_str().unwrap().to_owned(),
                line["transaction"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("nft_sale".to_owned(), "SALE-1".to_owned()),
            ("nft_sale_conflict".to_owned(), "SALE-2".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_listing_stays_sold_after_a_kill_9() {
    let (rpc, ledger) = start_ledger(ISSUER).await;
    let data = tempfile::tempdir().unwrap();
    let origin = support::origins::fast_origin();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}");
    write_lane_files(data.path(), &base, &rpc);
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_concert"))
            .args([
                "-listen",
                &format!("127.0.0.1:{port}"),
                "-upstream",
                &origin.url(),
                "-data-dir",
            ])
            .arg(data.path())
            .env("CONCERT_ADMIT_SECRET", SECRET)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut child = spawn();
    assert!(healthy(&base).await, "concert did not start");
    let buyer = open_session(&base).await;
    let late = open_session(&base).await;
    let buyers = intent(&base, &buyer, "poster").await;
    let lates = intent(&base, &late, "poster").await;
    pay(
        &ledger,
        "KILL-SALE",
        "rBuyer",
        amount_of(&buyers),
        Some(tag_of(&buyers)),
    );
    let (status, _, body) = check(&base, &buyer, "poster").await;
    assert_eq!(
        (status, &body["receipt"]["kind"]),
        (200, &json!("nft_sale"))
    );
    child.kill().unwrap();
    let _ = child.wait();

    let mut child = spawn();
    assert!(healthy(&base).await, "concert did not restart");
    pay(
        &ledger,
        "KILL-LATE",
        "rLate",
        amount_of(&lates),
        Some(tag_of(&lates)),
    );
    let (status, headers, body) = check(&base, &late, "poster").await;
    assert_eq!(
        (status, &body["receipt"]["kind"]),
        (200, &json!("nft_sale_conflict"))
    );
    assert_eq!(
        headers.get("concert-listing-conflict").map(String::as_str),
        Some("1")
    );
    child.kill().unwrap();
    let _ = child.wait();
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
async fn malformed_chain_answers_are_no_payment_and_no_panic() {
    let (rpc, ledger) = start_ledger(ISSUER).await;
    let data = tempfile::tempdir().unwrap();
    let shop = start_shop(data.path(), &rpc).await;
    let answers = [
        json!({"transactions": "junk", "status": "success"}),
        json!({"transactions": [null, 1, {"tx": {"date": "x"}}, {"tx": {"date": 1}, "meta": 5, "validated": true}]}),
        json!({"error": "lgrNotFound", "status": "error"}),
        json!([1, 2, 3]),
    ];
    for answer in answers {
        *ledger.account_tx_answer.lock().unwrap() = Some(answer.clone());
        // A fresh session each time, so no check waits for its turn.
        let visitor = open_session(&shop.base).await;
        intent(&shop.base, &visitor, "").await;
        let (status, _, body) = check(&shop.base, &visitor, "").await;
        assert!(
            (status == 200 && body["waiting"] == true)
                || (status == 503 && body["error"] == "deposit_check_unavailable"),
            "{answer}: {status} {body}"
        );
    }
    // The lane is still there.
    let visitor = open_session(&shop.base).await;
    intent(&shop.base, &visitor, "").await;
    let _ = shop.concert.shutdown().await;
}

fn token(n: u8) -> String {
    format!("{:064X}", n)
}

#[tokio::test]
async fn the_market_drops_bad_ids_shows_xrp_caches_and_knows_only_its_rules() {
    let (rpc, ledger) = start_ledger(ISSUER).await;
    *ledger.nfts.lock().unwrap() = vec![
        json!({"nft_id": token(1), "owner": "rSeller", "nft_taxon": 7, "is_burned": false, "uri": ""}),
        json!({"nft_id": "NOT-A-TOKEN-ID", "owner": "rSeller", "nft_taxon": 7}),
        json!({"nft_id": token(2), "owner": "rSeller", "nft_taxon": 7}),
        json!({"nft_id": token(3), "owner": "rSeller", "nft_taxon": 7, "is_burned": true}),
    ];
    {
        let mut offers = ledger.sell_offers.lock().unwrap();
        offers.insert(
            token(1),
            json!([
                {"amount": "5000000", "flags": 1, "nft_offer_index": "OFFER1", "owner": "rSeller"},
                {"amount": "9000000", "flags": 1, "nft_offer_index": "OFFER1B", "owner": "rSeller"},
            ]),
        );
        offers.insert(
            "NOT-A-TOKEN-ID".into(),
            json!([{"amount": "1", "flags": 1, "nft_offer_index": "BAD", "owner": "rSeller"}]),
        );
        // Reserved for one buyer: not for sale to visitors.
        offers.insert(
            token(2),
            json!([{"amount": "2000000", "flags": 1, "nft_offer_index": "OFFER2", "owner": "rSeller", "destination": "rFriend"}]),
        );
        offers.insert(
            token(3),
            json!([{"amount": "1000000", "flags": 1, "nft_offer_index": "OFFER3", "owner": "rSeller"}]),
        );
    }
    let data = tempfile::tempdir().unwrap();
    let shop = start_shop(data.path(), &rpc).await;
    let market = |rule: &'static str| {
        let base = shop.base.clone();
        async move {
            let answer = client()
                .get(format!("{base}/_concert/market?rule={rule}"))
                .send()
                .await
                .unwrap();
            (
                answer.status().as_u16(),
                answer.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, body) = market("art").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"network": "xrpl:1", "sales": [{
            "token_id": token(1),
            "offer": "OFFER1",
            "seller": "rSeller",
            "price": "5000000",
            "price_display": "5.000000",
            "buy_url": format!("https://test.bithomp.com/nft/{}", token(1)),
        }]})
    );
    // Within the minute the same answer comes from memory.
    ledger.sell_offers.lock().unwrap().clear();
    let (status, again) = market("art").await;
    assert_eq!((status, again), (200, body));
    assert_eq!(ledger.nfts_by_issuer_calls.load(Ordering::SeqCst), 1);
    let (status, body) = market("nope").await;
    assert_eq!(
        (status, &body["error"]),
        (404, &json!("no_market_for_collection"))
    );
    let (status, _) = market("").await;
    assert_eq!(status, 404);
    let _ = shop.concert.shutdown().await;
}

/// A loopback server answering GETs and JSON-RPC POSTs from fixed JSON by path or method.
async fn serve(routes: Vec<(&'static str, Value)>, rpc: HashMap<&'static str, Value>) -> String {
    let mut router = axum::Router::new();
    for (path, answer) in routes {
        router = router.route(
            path,
            get(move || {
                let answer = answer.clone();
                async move { axum::Json(answer) }
            }),
        );
    }
    let rpc = Arc::new(rpc);
    router = router.route(
        "/",
        axum::routing::post(move |axum::Json(request): axum::Json<Value>| {
            let rpc = rpc.clone();
            async move {
                let method = request["method"].as_str().unwrap_or_default();
                let result = rpc.get(method).cloned().unwrap_or(Value::Null);
                axum::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}")
}

fn now() -> u64 {
    concert::fastlane::service::clock::now_unix()
}

fn query(network: &str, pay_to: &str, amount: u64, memo: &str) -> DepositQuery {
    DepositQuery {
        network: network.into(),
        pay_to: pay_to.into(),
        amount,
        reference: DepositReference::Memo(memo.into()),
        minimum: 10_000_000,
        lookback_seconds: 7200,
    }
}

#[tokio::test]
async fn solana_memos_match_once_undecorated() {
    const SHOP: &str = "ShopAddress1111111111111111111111111111111";
    let network = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
    let recent = now() - 60;
    let transfer = |from: &str, lamports: u64| {
        json!({"program": "system", "programId": "11111111111111111111111111111111",
               "parsed": {"type": "transfer", "info": {"source": from, "destination": SHOP, "lamports": lamports}}})
    };
    let rpc = HashMap::from([
        (
            "getSignaturesForAddress",
            json!([
                {"signature": "SIG-MEMO", "err": null, "blockTime": recent, "memo": "[12] CT4142434445", "confirmationStatus": "finalized", "slot": 5},
            ]),
        ),
        (
            "getTransaction",
            json!({"blockTime": recent, "slot": 5, "meta": {"err": null, "fee": 5000},
            "transaction": {"signatures": ["SIG-MEMO"], "message": {"instructions": [
                transfer("PayerWallet", 10_500_000),
            ]}}}),
        ),
    ]);
    let url = serve(Vec::new(), rpc).await;
    let settings = NetworkSettings {
        rpc: url,
        ..NetworkSettings::default()
    };
    let lookups =
        concert::fastlane::chains::solana::lookups::SolanaLookups::new(network, &settings).unwrap();
    let transfers = lookups.incoming(SHOP, now() - 7200).await.unwrap();
    assert_eq!(transfers.len(), 1);
    assert_eq!(transfers[0].memos, ["CT4142434445"]);
    // Not the exact amount, but the session's memo and at least the price: it pays.
    let hits = matching(
        &query(network, SHOP, 10_000_777, "CT4142434445"),
        &transfers,
    );
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].payer, "PayerWallet");
    assert_eq!(hits[0].amount, 10_500_000);
    // Another session's memo does not.
    assert!(
        matching(
            &query(network, SHOP, 10_000_777, "CT0000000000"),
            &transfers
        )
        .is_empty()
    );
}

#[tokio::test]
async fn stellar_and_hedera_deposits_are_read_from_horizon_and_the_mirror() {
    let created = concert::fastlane::service::clock::format_rfc3339(now() - 60);
    const STELLAR_SHOP: &str = "GSHOPACCOUNT";
    let horizon_page = json!({"_embedded": {"records": [
        {"type": "payment", "created_at": created, "transaction_hash": "XLM-1", "transaction_successful": true,
         "asset_type": "native", "from": "GPAYER", "to": STELLAR_SHOP, "amount": "1.0000500",
         "transaction": {"memo_type": "text", "memo": "CT4142434445"}},
        {"type": "create_account", "created_at": created, "transaction_hash": "XLM-2", "transaction_successful": true,
         "funder": "GFUNDER", "account": STELLAR_SHOP, "starting_balance": "1.0000777",
         "transaction": {"memo_type": "none"}},
    ]}});
    let horizon = serve(
        vec![("/accounts/GSHOPACCOUNT/payments", horizon_page)],
        HashMap::new(),
    )
    .await;
    let settings = NetworkSettings {
        rpc: horizon.clone(),
        horizon,
        ..NetworkSettings::default()
    };
    let stellar = concert::fastlane::chains::stellar::lookups::StellarLookups::new(
        "stellar:testnet",
        &settings,
    )
    .unwrap();
    let transfers = stellar.incoming(STELLAR_SHOP, now() - 7200).await.unwrap();
    assert_eq!(transfers.len(), 2);
    let by_memo = matching(
        &query("stellar:testnet", STELLAR_SHOP, 1, "CT4142434445"),
        &transfers,
    );
    assert_eq!(by_memo[0].transaction, "XLM-1");
    let by_amount = matching(
        &query("stellar:testnet", STELLAR_SHOP, 10_000_777, "CTX"),
        &transfers,
    );
    assert_eq!(by_amount[0].payer, "GFUNDER");

    let mirror_page = json!({"transactions": [{
        "transaction_id": "0.0.7007-1700000000-000000001",
        "consensus_timestamp": format!("{}.000000001", now() - 60),
        "memo_base64": "Q1Q0MTQyNDM0NDQ1",
        "result": "SUCCESS",
        "transfers": [
            {"account": "0.0.3", "amount": 1000, "is_approval": false},
            {"account": "0.0.7007", "amount": -10001000, "is_approval": false},
            {"account": "0.0.5005", "amount": 10000000, "is_approval": false},
        ],
    }], "links": {"next": null}});
    let mirror = serve(vec![("/api/v1/transactions", mirror_page)], HashMap::new()).await;
    let settings = NetworkSettings {
        mirror,
        ..NetworkSettings::default()
    };
    let hedera =
        concert::fastlane::chains::hedera::lookups::HederaLookups::new("hedera:testnet", &settings)
            .unwrap();
    let transfers = hedera.incoming("0.0.5005", now() - 7200).await.unwrap();
    let hits = matching(
        &query("hedera:testnet", "0.0.5005", 1, "CT4142434445"),
        &transfers,
    );
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].payer, "0.0.7007");
    assert_eq!(hits[0].amount, 10_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_page_shows_a_transfer_with_its_tag_and_qr_and_checks_it() {
    let (rpc, ledger) = start_ledger(ISSUER).await;
    let data = tempfile::tempdir().unwrap();
    let shop = start_shop(data.path(), &rpc).await;
    let browser = browser::Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.goto(&format!("{}/_concert/access", shop.base))
        .await
        .unwrap();
    page.wait_for(
        "document.querySelector('#deposit-networks button') && document.querySelector('#listings button')",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let listing = page
        .eval("document.querySelector('#listings button').textContent")
        .await
        .unwrap();
    assert_eq!(listing, "A signed poster — 5.000000 XRP");
    page.eval("document.querySelector('#deposit-networks button').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "!document.getElementById('deposit').hidden && document.getElementById('deposit-tag').textContent",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let shown = page
        .eval("[document.getElementById('deposit-amount').textContent, document.getElementById('deposit-address').textContent, document.getElementById('deposit-tag').textContent, document.getElementById('deposit-qr').src.slice(0, 22), document.getElementById('deposit-qr').naturalWidth > 100]")
        .await
        .unwrap();
    assert_eq!(shown[1], pay_to());
    assert_eq!(shown[3], "data:image/png;base64,");
    assert_eq!(shown[4], true, "the QR picture loads under the CSP");
    let amount = shown[0]
        .as_str()
        .unwrap()
        .trim_end_matches(" XRP")
        .replace('.', "");
    let drops: u64 = amount.parse().unwrap();
    let tag: u32 = shown[2].as_str().unwrap().parse().unwrap();
    pay(&ledger, "PAGE-PAID", "rPagePayer", drops, Some(tag));
    page.eval("document.getElementById('deposit-check').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.getElementById('state').textContent.indexOf('Paid') === 0",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let problems = page.problems();
    assert!(problems.is_empty(), "{problems:?}");
    let _ = shop.concert.shutdown().await;
}
