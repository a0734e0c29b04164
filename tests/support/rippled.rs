//! A loopback rippled for the fast lane's tests: network 1 at ledger 1000, one known account
//! (the vector payer at sequence 5), submissions that succeed and show up validated, and the
//! XRPL vector cases the payments come from. It also answers the read-only questions of
//! deposits and the market as rippled and Clio do: `account_tx` (the payments a test put in
//! `incoming`, newest first, in pages), `nfts_by_issuer` and `nft_sell_offers`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::routing::post;
use serde_json::{Value, json};

/// The XRPL vector case called `name`.
pub fn vector_case(name: &str) -> Value {
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

/// What the ledger has seen, and how it answers.
pub struct Ledger {
    payer: String,
    pub submits: AtomicU64,
    /// Whether a submitted payment ever shows up validated.
    pub validates: AtomicBool,
    /// The `delivered_amount` a validated payment reports, in drops.
    pub delivered: std::sync::Mutex<String>,
    /// While set, a submission waits for a permit of `submit_gate` (a settlement in flight).
    pub hold_submits: AtomicBool,
    pub submit_gate: tokio::sync::Semaphore,
    /// `account_tx` entries (as rippled writes them), newest first.
    pub incoming: std::sync::Mutex<Vec<Value>>,
    /// When set, `account_tx` answers this `result` instead (malformed answers).
    pub account_tx_answer: std::sync::Mutex<Option<Value>>,
    pub account_tx_calls: AtomicU64,
    /// `nfts_by_issuer` tokens, and `nft_sell_offers` offers by token id.
    pub nfts: std::sync::Mutex<Vec<Value>>,
    pub sell_offers: std::sync::Mutex<std::collections::HashMap<String, Value>>,
    pub nfts_by_issuer_calls: AtomicU64,
}

/// An `account_tx` entry: a validated, successful XRP payment of `drops` from `from` to
/// `to` with `tag`, closed `age` seconds ago.
pub fn incoming_payment(
    hash: &str,
    from: &str,
    to: &str,
    drops: u64,
    tag: Option<u32>,
    age: u64,
) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut tx = json!({
        "Account": from,
        "Destination": to,
        "TransactionType": "Payment",
        "Amount": drops.to_string(),
        "Fee": "12",
        "hash": hash,
        "date": now - age - 946_684_800,
        "ledger_index": 1000,
    });
    if let Some(tag) = tag {
        tx["DestinationTag"] = json!(tag);
    }
    json!({
        "meta": {"TransactionResult": "tesSUCCESS", "delivered_amount": drops.to_string()},
        "tx": tx,
        "validated": true,
    })
}

/// Page size of the fake `account_tx` (small, so a test sees paging).
const ACCOUNT_TX_PAGE: usize = 3;

async fn answer(
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
            if ledger.hold_submits.load(Ordering::SeqCst)
                && let Ok(permit) = ledger.submit_gate.acquire().await
            {
                permit.forget();
            }
            ledger.submits.fetch_add(1, Ordering::SeqCst);
            json!({"engine_result": "tesSUCCESS", "status": "success"})
        }
        "account_tx" => {
            ledger.account_tx_calls.fetch_add(1, Ordering::SeqCst);
            if let Some(answer) = ledger.account_tx_answer.lock().unwrap().clone() {
                answer
            } else {
                let all = ledger.incoming.lock().unwrap().clone();
                let start = params["marker"]["seq"].as_u64().unwrap_or(0) as usize;
                let end = (start + ACCOUNT_TX_PAGE).min(all.len());
                let mut result = json!({
                    "account": params["account"],
                    "transactions": all.get(start..end).unwrap_or_default(),
                    "validated": true,
                    "status": "success"
                });
                if end < all.len() {
                    result["marker"] = json!({"ledger": 1000, "seq": end});
                }
                result
            }
        }
        "nfts_by_issuer" => {
            ledger.nfts_by_issuer_calls.fetch_add(1, Ordering::SeqCst);
            json!({
                "issuer": params["issuer"],
                "nfts": ledger.nfts.lock().unwrap().clone(),
                "status": "success"
            })
        }
        "nft_sell_offers" => {
            let id = params["nft_id"].as_str().unwrap_or_default().to_owned();
            match ledger.sell_offers.lock().unwrap().get(&id) {
                Some(offers) => json!({"nft_id": id, "offers": offers, "status": "success"}),
                None => json!({"error": "objectNotFound", "status": "error"}),
            }
        }
        "tx" if !ledger.validates.load(Ordering::SeqCst) => json!({
            "hash": params["transaction"],
            "validated": false
        }),
        "tx" => json!({
            "hash": params["transaction"],
            "validated": true,
            "meta": {
                "TransactionResult": "tesSUCCESS",
                "delivered_amount": ledger.delivered.lock().unwrap().clone()
            }
        }),
        _ => json!({"error": "unknownCmd", "status": "error"}),
    };
    axum::Json(json!({ "result": result }))
}

/// Starts a ledger that knows `payer`: its URL and its state.
pub async fn start(payer: &str) -> (String, Arc<Ledger>) {
    let ledger = Arc::new(Ledger {
        payer: payer.to_owned(),
        submits: AtomicU64::new(0),
        validates: AtomicBool::new(true),
        delivered: std::sync::Mutex::new("100000".into()),
        hold_submits: AtomicBool::new(false),
        submit_gate: tokio::sync::Semaphore::new(0),
        incoming: std::sync::Mutex::new(Vec::new()),
        account_tx_answer: std::sync::Mutex::new(None),
        account_tx_calls: AtomicU64::new(0),
        nfts: std::sync::Mutex::new(Vec::new()),
        sell_offers: std::sync::Mutex::new(std::collections::HashMap::new()),
        nfts_by_issuer_calls: AtomicU64::new(0),
    });
    let app = axum::Router::new()
        .route("/", post(answer))
        .with_state(ledger.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}/"), ledger)
}
