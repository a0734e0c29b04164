//! A loopback rippled for the fast lane's tests: network 1 at ledger 1000, one known account
//! (the vector payer at sequence 5), submissions that succeed and show up validated, and the
//! XRPL vector cases the payments come from.

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
}

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
