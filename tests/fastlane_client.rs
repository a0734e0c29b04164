//! `concert client`, the real binary, against real Concert fast lanes on loopback: an XRPL lane
//! whose rippled is a loopback fake and a Solana lane whose RPC is one, each behind a relay
//! that records every payment it passes on together with what the client's state file held at
//! that moment. Guards, the lock, an expired session and `--nft` are checked the same way; the
//! NFT routes are served by a small site of this file that checks signatures with the crate's
//! own verify functions. Hedera payments the client builds are judged by the real Hedera
//! mechanism against a loopback mirror.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const ADMIT_SECRET: &str = "fast-lane-client-test-secret-0123456789abcdef";
/// The XRPL vector account: its seed, its address and the payee of its offer.
const XRP_SEED: &str = "sp59tVwt6dzAsmAVBCFLdpL5SoBwA";
const XRP_PAYER: &str = "rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq";
const XRP_PAY_TO: &str = "r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6";
const XRP_AMOUNT: &str = "100000";
const DEVNET: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const DEVNET_GENESIS: &str = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG";
const SOL_PAY_TO: &str = "GyfFHe77pcZtdgGnWGw4T1VxCPB6JJyGLfjzMagDdsz3";
const SOL_BLOCKHASH: &str = "Hy6psfgdEAs9KVVxgG1i9WXhpzQ1BjGus4AZXzdJwwSE";
const SOL_AMOUNT: &str = "1500000";

async fn serve(router: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}")
}

// ------------------------------------------------------------------ a loopback rippled

/// Network 1 at validated ledger 1000; the vector payer at sequence 5. `simulate` answers
/// `tooBusy` while `busy_simulations` lasts, which leaves a payment's verification open.
#[derive(Default)]
struct Rippled {
    busy_simulations: AtomicU32,
    /// Whether `simulate` finds the payment unfunded (a verdict of invalid).
    unfunded: std::sync::atomic::AtomicBool,
    submitted: Mutex<Vec<String>>,
}

async fn rippled_answer(State(ledger): State<Arc<Rippled>>, body: String) -> Json<Value> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let params = &request["params"][0];
    let result = match request["method"].as_str().unwrap_or_default() {
        "server_info" => json!({
            "info": {"network_id": 1, "validated_ledger": {"seq": 1000}},
            "status": "success"
        }),
        "account_info" if params["account"] == XRP_PAYER => json!({
            "account_data": {"Account": XRP_PAYER, "Sequence": 5, "Flags": 0, "Balance": "100000000"},
            "validated": true,
            "status": "success"
        }),
        "account_info" => json!({"error": "actNotFound", "status": "error"}),
        "simulate" => {
            let busy = ledger
                .busy_simulations
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok();
            if busy {
                json!({"error": "tooBusy", "error_message": "The server is too busy", "status": "error"})
            } else if ledger.unfunded.load(Ordering::SeqCst) {
                json!({"engine_result": "tecUNFUNDED_PAYMENT", "applied": false})
            } else {
                json!({"engine_result": "tesSUCCESS", "applied": false})
            }
        }
        "submit" => {
            let blob = params["tx_blob"].as_str().unwrap_or_default().to_owned();
            ledger.submitted.lock().push(blob);
            json!({"engine_result": "tesSUCCESS", "status": "success"})
        }
        "tx" => json!({
            "hash": params["transaction"],
            "validated": true,
            "meta": {"TransactionResult": "tesSUCCESS", "delivered_amount": XRP_AMOUNT}
        }),
        _ => json!({"error": "unknownCmd", "status": "error"}),
    };
    Json(json!({ "result": result }))
}

async fn start_rippled() -> (String, Arc<Rippled>) {
    let ledger = Arc::new(Rippled::default());
    let url = serve(
        Router::new()
            .route("/", post(rippled_answer))
            .with_state(Arc::clone(&ledger)),
    )
    .await;
    (format!("{url}/"), ledger)
}

// ------------------------------------------------------------- a loopback Solana RPC

/// Devnet, one valid blockhash; a broadcast transfer is final from the second status query on.
#[derive(Default)]
struct SolanaLedger {
    /// Signature → status queries since it was broadcast.
    seen: HashMap<String, u32>,
    broadcasts: u32,
}

async fn solana_answer(
    State(ledger): State<Arc<Mutex<SolanaLedger>>>,
    Json(request): Json<Value>,
) -> Json<Value> {
    let params = &request["params"];
    let context = json!({"slot": 350_000_000u64});
    let mut ledger = ledger.lock();
    let result = match request["method"].as_str().unwrap_or_default() {
        "getGenesisHash" => json!(DEVNET_GENESIS),
        "getLatestBlockhash" => json!({"context": context, "value": {
            "blockhash": SOL_BLOCKHASH, "lastValidBlockHeight": 300_000_000u64,
        }}),
        "isBlockhashValid" => json!({"context": context, "value": true}),
        "simulateTransaction" => {
            json!({"context": context, "value": {"err": null, "logs": [], "unitsConsumed": 150}})
        }
        "getSignatureStatuses" => {
            let signature = params[0][0].as_str().unwrap_or_default().to_owned();
            let status = match ledger.seen.get_mut(&signature) {
                None => Value::Null,
                Some(queries) => {
                    *queries += 1;
                    json!({
                        "slot": 350_000_000u64,
                        "confirmations": null,
                        "err": null,
                        "status": {"Ok": null},
                        "confirmationStatus": if *queries > 1 { "finalized" } else { "confirmed" },
                    })
                }
            };
            json!({"context": context, "value": [status]})
        }
        "sendTransaction" => {
            ledger.broadcasts += 1;
            let wire = STANDARD
                .decode(params[0].as_str().unwrap_or_default())
                .unwrap_or_default();
            // The signature is the 64 bytes after the one-byte signature count.
            let signature = wire
                .get(1..65)
                .map(|bytes| bs58::encode(bytes).into_string())
                .unwrap_or_default();
            ledger.seen.insert(signature.clone(), 0);
            json!(signature)
        }
        _ => Value::Null,
    };
    Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
}

async fn start_solana() -> (String, Arc<Mutex<SolanaLedger>>) {
    let ledger = Arc::new(Mutex::new(SolanaLedger::default()));
    let url = serve(
        Router::new()
            .route("/", post(solana_answer))
            .with_state(Arc::clone(&ledger)),
    )
    .await;
    (format!("{url}/"), ledger)
}

// --------------------------------------------------------------------- the relay

/// Passes every request on to Concert and keeps, for each payment carrying a signed header,
/// the header and what the client's state file held when it arrived.
struct Relay {
    target: String,
    state_file: PathBuf,
    /// `(PAYMENT-SIGNATURE, state file text at arrival)`.
    payments: Mutex<Vec<(String, Option<String>)>>,
    /// `METHOD path` of every request, in order.
    requests: Mutex<Vec<String>>,
    http: reqwest::Client,
}

async fn relay_request(
    State(relay): State<Arc<Relay>>,
    request: http::Request<Body>,
) -> http::Response<Body> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    relay
        .requests
        .lock()
        .push(format!("{} {}", parts.method, parts.uri.path()));
    if let Some(header) = parts.headers.get("payment-signature") {
        let held = std::fs::read_to_string(&relay.state_file).ok();
        relay
            .payments
            .lock()
            .push((header.to_str().unwrap_or_default().to_owned(), held));
    }
    let mut forward = relay
        .http
        .request(parts.method.clone(), format!("{}{path}", relay.target))
        .body(body);
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
            forward = forward.header(name, value);
        }
    }
    let answer = forward.send().await.expect("concert answers");
    let mut response = http::Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != http::header::CONTENT_LENGTH && name != http::header::TRANSFER_ENCODING {
            response = response.header(name, value);
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    response.body(Body::from(bytes)).expect("response")
}

async fn start_relay(target: &str, state_file: &Path) -> (String, Arc<Relay>) {
    let relay = Arc::new(Relay {
        target: target.to_owned(),
        state_file: state_file.to_owned(),
        payments: Mutex::new(Vec::new()),
        requests: Mutex::new(Vec::new()),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client"),
    });
    let url = serve(
        Router::new()
            .fallback(relay_request)
            .with_state(Arc::clone(&relay)),
    )
    .await;
    (url, relay)
}

// --------------------------------------------------------------------- a lane

struct Lane {
    _concert: concert::Running,
    /// What the client is pointed at: the relay in front of Concert.
    origin: String,
    relay: Arc<Relay>,
    networks_path: PathBuf,
    state_path: PathBuf,
    data: tempfile::TempDir,
}

/// Concert selling `offer` on `network` whose chain endpoint is `rpc`, behind a relay.
async fn start_lane(network: &str, offer: Value, rpc: &str) -> Lane {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let data = tempfile::tempdir().expect("temp dir");
    let fastlane = json!({
        "enabled": true,
        "origin": base,
        "test_mode": true,
        "pass_seconds": 300,
        "merchant": "The client test shop",
        "terms_url": "https://shop.example/terms",
        "privacy_url": "https://shop.example/privacy",
        "refund_url": "https://shop.example/refunds",
        "offers": [{"label": "Five minutes", "requirements": offer}],
    });
    std::fs::write(
        data.path().join("fastlane.json"),
        serde_json::to_vec_pretty(&fastlane).expect("json"),
    )
    .expect("fastlane.json");
    let networks_path = data.path().join("networks.json");
    std::fs::write(
        &networks_path,
        serde_json::to_vec_pretty(&json!({ network: {"rpc": rpc} })).expect("json"),
    )
    .expect("networks.json");
    let args: Vec<String> = [
        "-upstream",
        "http://127.0.0.1:9",
        "-data-dir",
        &data.path().display().to_string(),
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let env: HashMap<String, String> =
        HashMap::from([("CONCERT_ADMIT_SECRET".to_owned(), ADMIT_SECRET.to_owned())]);
    let config = match concert::config::load(&args, &env).expect("config") {
        concert::config::Loaded::Run(config) => *config,
        _ => panic!("a runnable configuration"),
    };
    let running = concert::start(config, Some(listener)).await.expect("start");
    let state_path = data.path().join("client").join("state.json");
    let (origin, relay) = start_relay(&base, &state_path).await;
    Lane {
        _concert: running,
        origin,
        relay,
        networks_path,
        state_path,
        data,
    }
}

fn xrpl_offer() -> Value {
    json!({
        "scheme": "exact",
        "network": "xrpl:1",
        "amount": XRP_AMOUNT,
        "asset": "XRP",
        "payTo": XRP_PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"areFeesSponsored": false},
    })
}

fn solana_offer() -> Value {
    json!({
        "scheme": "concert-native-sol",
        "network": DEVNET,
        "amount": SOL_AMOUNT,
        "asset": "SOL",
        "payTo": SOL_PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"areFeesSponsored": false},
    })
}

/// The variables of a client that pays `lane` on `network` with `key`.
fn client_env(lane: &Lane, network: &str, key: (&str, &str)) -> Vec<(String, String)> {
    [
        ("CONCERT_CLIENT_NETWORK", network),
        ("CONCERT_ORIGIN", lane.origin.as_str()),
        (
            "CONCERT_NETWORKS_CONFIG",
            lane.networks_path.to_str().expect("path"),
        ),
        (
            "CONCERT_CLIENT_STATE",
            lane.state_path.to_str().expect("path"),
        ),
        ("CONCERT_MAX_ATOMIC_AMOUNT", "2000000"),
        ("CONCERT_ACCEPT_TERMS", "yes"),
        key,
    ]
    .iter()
    .map(|(name, value)| (name.to_string(), value.to_string()))
    .collect()
}

fn with(env: &[(String, String)], name: &str, value: Option<&str>) -> Vec<(String, String)> {
    let mut changed: Vec<(String, String)> =
        env.iter().filter(|(n, _)| n != name).cloned().collect();
    if let Some(value) = value {
        changed.push((name.to_owned(), value.to_owned()));
    }
    changed
}

struct Ran {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Runs `concert client args…` with exactly `env` (plus a HOME inside `home`).
async fn run_client(env: &[(String, String)], args: &[&str], home: &Path) -> Ran {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_concert"))
        .arg("client")
        .args(args)
        .env_clear()
        .env("HOME", home)
        .envs(
            env.iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        )
        .output()
        .await
        .expect("the binary runs");
    Ran {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn decoded_header(header: &str) -> Value {
    serde_json::from_slice(&STANDARD.decode(header).expect("base64")).expect("json")
}

fn state_of(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("state file")).expect("state json")
}

async fn status_of(lane: &Lane, session: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{}/_concert/status", lane.origin))
        .header("concert-session", session)
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status json")
}

// --------------------------------------------------------------------- the tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_xrpl_payment_is_saved_before_it_is_sent_and_retried_identically_after_a_503() {
    let (rpc, ledger) = start_rippled().await;
    // The first verification finds rippled busy: Concert answers 503 and settles nothing.
    ledger.busy_simulations.store(1, Ordering::SeqCst);
    let lane = start_lane("xrpl:1", xrpl_offer(), &rpc).await;
    let env = client_env(&lane, "xrpl:1", ("CONCERT_CLIENT_XRP_SEED", XRP_SEED));
    let ran = run_client(&env, &[], lane.data.path()).await;
    assert_eq!(ran.status, 0, "stderr: {}", ran.stderr);
    assert!(
        ran.stderr.contains("The client test shop"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("https://shop.example/refunds"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("payment_verification_unavailable"),
        "{}",
        ran.stderr
    );

    // Two sends, the second byte for byte the first, and each time the state file already
    // held that very header when the server saw it.
    let payments = lane.relay.payments.lock().clone();
    assert_eq!(payments.len(), 2, "{payments:?}");
    assert_eq!(payments[0].0, payments[1].0);
    for (header, held) in &payments {
        let held: Value =
            serde_json::from_str(held.as_deref().expect("a state file")).expect("json");
        assert_eq!(held["payment"], json!(header));
        assert_eq!(held["origin"], json!(lane.origin));
    }
    let payment = decoded_header(&payments[0].0);
    assert_eq!(payment["accepted"], xrpl_offer());
    let blob = payment["payload"]["signedTxBlob"]
        .as_str()
        .expect("blob")
        .to_owned();
    assert_eq!(*ledger.submitted.lock(), vec![blob.clone()]);

    // The blob is the payer's, checked by the crate's own codec and signature check.
    let tx = concert::fastlane::chains::xrpl::codec::decode(&hex::decode(&blob).expect("hex"))
        .expect("decodes");
    assert!(concert::fastlane::chains::xrpl::keys::verify_transaction(
        &tx
    ));

    let report: Value = serde_json::from_str(ran.stdout.trim()).expect("report json");
    assert_eq!(report["eligible"], json!(true));
    assert_eq!(report["receipt"]["payer"], json!(XRP_PAYER));
    assert_eq!(report["receipt"]["network"], json!("xrpl:1"));
    let session = report["session"].as_str().expect("session");
    assert_eq!(status_of(&lane, session).await["eligible"], json!(true));

    // Done: the state keeps the session and no open payment; a second run pays nothing.
    let state = state_of(&lane.state_path);
    assert_eq!(state["payment"], json!(""));
    assert_eq!(state["session"], json!(session));
    let again = run_client(&env, &[], lane.data.path()).await;
    assert_eq!(again.status, 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("already holds a pass"),
        "{}",
        again.stderr
    );
    assert_eq!(lane.relay.payments.lock().len(), 2);
    assert_eq!(ledger.submitted.lock().len(), 1);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&lane.state_path)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_solana_payment_is_prepared_by_the_site_checked_signed_and_settled() {
    let (rpc, ledger) = start_solana().await;
    let lane = start_lane(DEVNET, solana_offer(), &rpc).await;
    let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let keypair = bs58::encode(key.to_keypair_bytes()).into_string();
    let env = client_env(&lane, DEVNET, ("CONCERT_CLIENT_SOL_KEY", &keypair));
    let ran = run_client(&env, &[], lane.data.path()).await;
    assert_eq!(ran.status, 0, "stderr: {}", ran.stderr);
    let requests = lane.relay.requests.lock().clone();
    let prepared = requests
        .iter()
        .position(|r| r == "POST /_concert/solana/prepare");
    assert!(prepared.is_some(), "{requests:?}");
    let payments = lane.relay.payments.lock().clone();
    assert_eq!(payments.len(), 1);
    let held: Value = serde_json::from_str(payments[0].1.as_deref().expect("state")).expect("json");
    assert_eq!(held["payment"], json!(payments[0].0));
    assert_eq!(ledger.lock().broadcasts, 1);
    let report: Value = serde_json::from_str(ran.stdout.trim()).expect("report");
    assert_eq!(report["eligible"], json!(true));
    assert_eq!(
        report["receipt"]["payer"],
        json!(bs58::encode(key.verifying_key().to_bytes()).into_string())
    );
    let session = report["session"].as_str().expect("session");
    assert_eq!(status_of(&lane, session).await["eligible"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_guard_stops_the_client_before_any_payment_is_sent() {
    let (rpc, ledger) = start_rippled().await;
    let lane = start_lane("xrpl:1", xrpl_offer(), &rpc).await;
    let env = client_env(&lane, "xrpl:1", ("CONCERT_CLIENT_XRP_SEED", XRP_SEED));
    let cases: Vec<(&str, Vec<(String, String)>)> = vec![
        (
            "CONCERT_MAX_ATOMIC_AMOUNT",
            with(&env, "CONCERT_MAX_ATOMIC_AMOUNT", Some("99999")),
        ),
        (
            "CONCERT_MAX_ATOMIC_AMOUNT",
            with(&env, "CONCERT_MAX_ATOMIC_AMOUNT", None),
        ),
        (
            "CONCERT_EXPECT_PAY_TO",
            with(
                &env,
                "CONCERT_EXPECT_PAY_TO",
                Some("rn5W85Srey74NZyxtLUiusSGtaiK37agos"),
            ),
        ),
        (
            "CONCERT_ACCEPT_TERMS",
            with(&env, "CONCERT_ACCEPT_TERMS", Some("no")),
        ),
        (
            "CONCERT_ACCEPT_TERMS",
            with(&env, "CONCERT_ACCEPT_TERMS", None),
        ),
        (
            "CONCERT_CLIENT_XRP_SEED",
            with(&env, "CONCERT_CLIENT_XRP_SEED", None),
        ),
        (
            "CONCERT_CLIENT_SOL_KEY",
            with(
                &env,
                "CONCERT_CLIENT_SOL_KEY",
                Some("4NMwxzmYj2uvHuq8xoqhY8RXg63KSVJM1DXkpbmkUY7Y"),
            ),
        ),
    ];
    for (variable, env) in cases {
        let ran = run_client(&env, &[], lane.data.path()).await;
        assert_eq!(ran.status, 1, "{variable}: {}", ran.stderr);
        assert!(ran.stderr.contains(variable), "{variable}: {}", ran.stderr);
        assert!(lane.relay.payments.lock().is_empty(), "{variable}");
        if lane.state_path.exists() {
            assert_eq!(
                state_of(&lane.state_path)["payment"],
                json!(""),
                "{variable}"
            );
        }
    }
    // Refusing the terms still shows them first.
    let ran = run_client(
        &with(&env, "CONCERT_ACCEPT_TERMS", None),
        &[],
        lane.data.path(),
    )
    .await;
    assert!(
        ran.stderr.contains("https://shop.example/terms"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("https://shop.example/privacy"),
        "{}",
        ran.stderr
    );
    assert!(ledger.submitted.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_refused_on_its_first_arrival_is_dropped_not_retried() {
    let (rpc, ledger) = start_rippled().await;
    ledger.unfunded.store(true, Ordering::SeqCst);
    let lane = start_lane("xrpl:1", xrpl_offer(), &rpc).await;
    let env = client_env(&lane, "xrpl:1", ("CONCERT_CLIENT_XRP_SEED", XRP_SEED));
    let ran = run_client(&env, &[], lane.data.path()).await;
    assert_eq!(ran.status, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("payment_not_verified"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("not taken"), "{}", ran.stderr);
    assert_eq!(lane.relay.payments.lock().len(), 1);
    assert_eq!(state_of(&lane.state_path)["payment"], json!(""));
    assert!(ledger.submitted.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_payment_whose_session_expired_is_neither_sent_nor_replaced() {
    let (rpc, ledger) = start_rippled().await;
    let lane = start_lane("xrpl:1", xrpl_offer(), &rpc).await;
    let env = client_env(&lane, "xrpl:1", ("CONCERT_CLIENT_XRP_SEED", XRP_SEED));
    // A state left by a run that died mid-payment, whose session the site no longer knows.
    std::fs::create_dir_all(lane.state_path.parent().expect("dir")).expect("dir");
    let saved = json!({
        "origin": lane.origin,
        "network": "xrpl:1",
        "session": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.1700000000.bm90LWEtcmVhbC1tYWM",
        "payment": STANDARD.encode(b"{\"x402Version\":2}"),
    });
    std::fs::write(&lane.state_path, saved.to_string()).expect("state");
    let ran = run_client(&env, &[], lane.data.path()).await;
    assert_eq!(ran.status, 1, "{}", ran.stderr);
    assert!(ran.stderr.contains("expired"), "{}", ran.stderr);
    assert!(ran.stderr.contains("Do not pay again"), "{}", ran.stderr);
    assert!(lane.relay.payments.lock().is_empty());
    assert!(
        !lane
            .relay
            .requests
            .lock()
            .iter()
            .any(|request| request.ends_with("/payment"))
    );
    assert_eq!(state_of(&lane.state_path), saved);
    assert!(ledger.submitted.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_client_on_the_same_state_stops() {
    let (rpc, _ledger) = start_rippled().await;
    let lane = start_lane("xrpl:1", xrpl_offer(), &rpc).await;
    let env = client_env(&lane, "xrpl:1", ("CONCERT_CLIENT_XRP_SEED", XRP_SEED));
    std::fs::create_dir_all(lane.state_path.parent().expect("dir")).expect("dir");
    let mut lock_path = lane.state_path.as_os_str().to_owned();
    lock_path.push(".lock");
    let held = std::fs::File::create(PathBuf::from(lock_path)).expect("lock file");
    held.try_lock().expect("the lock");
    let ran = run_client(&env, &[], lane.data.path()).await;
    assert_eq!(ran.status, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("another concert client"),
        "{}",
        ran.stderr
    );
    assert!(lane.relay.requests.lock().is_empty());
    drop(held);
}

// ------------------------------------------------------------- NFT admission

/// A site with only what `--nft` uses: config, sessions, and challenges whose signatures are
/// checked with the crate's verify functions.
#[derive(Default)]
struct NftSite {
    origin: Mutex<String>,
    /// nonce → (network, wallet, message).
    challenges: Mutex<HashMap<String, (String, String, String)>>,
    verified: Mutex<Vec<String>>,
}

async fn nft_config() -> Json<Value> {
    Json(json!({
        "enabled": true,
        "merchant": "The NFT shop",
        "terms_url": "https://nft.example/terms",
        "privacy_url": "https://nft.example/privacy",
        "refund_url": "https://nft.example/refunds",
    }))
}

async fn nft_session() -> Json<Value> {
    Json(
        json!({"session": "bm9uY2U.1900000000.bWFj", "csrf": "csrf-value", "expires": "2030-03-17T17:46:40Z"}),
    )
}

async fn nft_challenge(
    State(site): State<Arc<NftSite>>,
    headers: http::HeaderMap,
    Json(request): Json<Value>,
) -> (http::StatusCode, Json<Value>) {
    if headers.get("x-concert-csrf").and_then(|v| v.to_str().ok()) != Some("csrf-value") {
        return (
            http::StatusCode::FORBIDDEN,
            Json(json!({"error": "csrf_required"})),
        );
    }
    let network = match request["rule"].as_str() {
        Some("xrpl-punks") => "xrpl:1",
        Some("sol-punks") => DEVNET,
        Some("xlm-punks") => "stellar:testnet",
        Some("hbar-punks") => "hedera:testnet",
        _ => {
            return (
                http::StatusCode::BAD_REQUEST,
                Json(json!({"error": "unknown_collection_rule"})),
            );
        }
    };
    let wallet = request["address"].as_str().unwrap_or_default().to_owned();
    let nonce = format!("nonce{}", site.challenges.lock().len());
    let message = format!(
        "Concert NFT admission v1\nOrigin: {}\nNetwork: {network}\nWallet: {wallet}\nCollection: {}\nToken: {}\nSession: s\nNonce: {nonce}\nIssued: now\nExpires: soon\nPurpose: proves NFT ownership; authorises no payment",
        site.origin.lock(),
        request["rule"].as_str().unwrap_or_default(),
        request["token_id"].as_str().unwrap_or_default(),
    );
    site.challenges
        .lock()
        .insert(nonce.clone(), (network.to_owned(), wallet, message.clone()));
    (
        http::StatusCode::OK,
        Json(
            json!({"nonce": nonce, "message": message, "expires": "soon", "network": network, "rule": request["rule"]}),
        ),
    )
}

async fn nft_verify(
    State(site): State<Arc<NftSite>>,
    Json(proof): Json<Value>,
) -> (http::StatusCode, Json<Value>) {
    let Some((network, wallet, message)) = site
        .challenges
        .lock()
        .remove(proof["nonce"].as_str().unwrap_or_default())
    else {
        return (
            http::StatusCode::UNAUTHORIZED,
            Json(json!({"error": "challenge_expired_or_used"})),
        );
    };
    let signature = STANDARD
        .decode(proof["signature"].as_str().unwrap_or_default())
        .unwrap_or_default();
    let public_key = proof["public_key"].as_str().unwrap_or_default();
    let message_bytes = message.as_bytes();
    let verified = match network.as_str() {
        "xrpl:1" => concert::fastlane::chains::xrpl::keys::verify_account_message(
            &wallet,
            &hex::decode(public_key).unwrap_or_default(),
            message_bytes,
            &signature,
        ),
        "stellar:testnet" => {
            use sha2::Digest as _;
            let key = stellar_strkey::ed25519::PublicKey::from_string(public_key)
                .map(|key| key.0)
                .unwrap_or_default();
            let digest = sha2::Sha256::new()
                .chain_update(b"Stellar Signed Message:\n")
                .chain_update(message_bytes)
                .finalize();
            public_key == wallet
                && concert::fastlane::chains::stellar::payment::ed25519_verifies(
                    &key, &digest, &signature,
                )
        }
        "hedera:testnet" => concert::fastlane::chains::stellar::payment::ed25519_verifies(
            &hex::decode(public_key).unwrap_or_default(),
            message_bytes,
            &signature,
        ),
        _ => {
            public_key == wallet
                && concert::fastlane::chains::solana::nft::message_signature_verifies(
                    &wallet, &message, &signature,
                )
        }
    };
    if !verified {
        return (
            http::StatusCode::FORBIDDEN,
            Json(json!({"error": "ownership_not_verified"})),
        );
    }
    site.verified.lock().push(network);
    (
        http::StatusCode::OK,
        Json(json!({"eligible": true, "kind": "nft", "expires": "2030-01-01T00:00:00Z"})),
    )
}

async fn start_nft_site() -> (String, Arc<NftSite>) {
    let site = Arc::new(NftSite::default());
    let url = serve(
        Router::new()
            .route("/_concert/config", get(nft_config))
            .route("/_concert/session", post(nft_session))
            .route("/_concert/nft/challenge", post(nft_challenge))
            .route("/_concert/nft/verify", post(nft_verify))
            .with_state(Arc::clone(&site)),
    )
    .await;
    *site.origin.lock() = url.clone();
    (url, site)
}

/// A wallet's key variables and their values.
type KeyVariables = Vec<(&'static str, String)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nft_signs_the_challenge_with_each_chains_wallet_key() {
    let (origin, site) = start_nft_site().await;
    let home = tempfile::tempdir().expect("home");
    let solana = bs58::encode(ed25519_dalek::SigningKey::from_bytes(&[9; 32]).to_keypair_bytes())
        .into_string();
    // The Stellar vectors' sponsor seed, used here only as some payer's key.
    let stellar = "SABAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAFNE7".to_owned();
    let hedera = format!("302e020100300506032b657004220420{}", hex::encode([3u8; 32]));
    let runs: Vec<(&str, &str, KeyVariables)> = vec![
        (
            "xrpl:1",
            "xrpl-punks",
            vec![("CONCERT_CLIENT_XRP_SEED", XRP_SEED.to_owned())],
        ),
        (
            DEVNET,
            "sol-punks",
            vec![("CONCERT_CLIENT_SOL_KEY", solana)],
        ),
        (
            "stellar:testnet",
            "xlm-punks",
            vec![("CONCERT_CLIENT_XLM_SECRET", stellar)],
        ),
        (
            "hedera:testnet",
            "hbar-punks",
            vec![
                ("CONCERT_CLIENT_HBAR_ACCOUNT", "0.0.1001".to_owned()),
                ("CONCERT_CLIENT_HBAR_KEY", hedera),
            ],
        ),
    ];
    for (network, rule, keys) in runs {
        let mut env: Vec<(String, String)> = vec![
            ("CONCERT_CLIENT_NETWORK".into(), network.into()),
            ("CONCERT_ORIGIN".into(), origin.clone()),
            ("CONCERT_ACCEPT_TERMS".into(), "yes".into()),
        ];
        env.extend(
            keys.into_iter()
                .map(|(name, value)| (name.to_owned(), value)),
        );
        let ran = run_client(&env, &["--nft", rule, "--token", "42"], home.path()).await;
        assert_eq!(ran.status, 0, "{network}: {}", ran.stderr);
        let report: Value = serde_json::from_str(ran.stdout.trim()).expect("report");
        assert_eq!(report["kind"], json!("nft"), "{network}");
        assert_eq!(site.verified.lock().last(), Some(&network.to_owned()));
    }
    assert_eq!(site.verified.lock().len(), 4);
    // An unknown rule is the site's refusal, named.
    let env: Vec<(String, String)> = vec![
        ("CONCERT_CLIENT_NETWORK".into(), "xrpl:1".into()),
        ("CONCERT_ORIGIN".into(), origin.clone()),
        ("CONCERT_ACCEPT_TERMS".into(), "yes".into()),
        ("CONCERT_CLIENT_XRP_SEED".into(), XRP_SEED.into()),
    ];
    let ran = run_client(&env, &["--nft", "nobody"], home.path()).await;
    assert_eq!(ran.status, 1);
    assert!(
        ran.stderr.contains("unknown_collection_rule"),
        "{}",
        ran.stderr
    );
}

#[tokio::test]
async fn help_describes_the_variables() {
    let home = tempfile::tempdir().expect("home");
    let ran = run_client(&[], &["--help"], home.path()).await;
    assert_eq!(ran.status, 0);
    for variable in [
        "CONCERT_CLIENT_NETWORK",
        "CONCERT_ORIGIN",
        "CONCERT_ACCEPT_TERMS",
        "CONCERT_MAX_ATOMIC_AMOUNT",
        "CONCERT_EXPECT_PAY_TO",
        "CONCERT_NETWORKS_CONFIG",
        "CONCERT_CLIENT_STATE",
        "CONCERT_CLIENT_SOL_KEY",
    ] {
        assert!(ran.stdout.contains(variable), "{variable}");
    }
    let wrong = run_client(&[], &["--bogus"], home.path()).await;
    assert_eq!(wrong.status, 2);
}

// ------------------------------------------------------------- Hedera payments

/// A mirror node knowing one payer account (its key as the mirror reports it) and a few
/// consensus nodes.
async fn start_mirror(payer: &str, key_type: &str, key_hex: &str) -> String {
    let account = json!({
        "account": payer,
        "key": {"_type": key_type, "key": key_hex},
        "balance": {"balance": 10_000_000_000u64},
        "deleted": false,
    });
    let payer = payer.to_owned();
    let router = Router::new()
        .route(
            "/api/v1/accounts/{id}",
            get(move |axum::extract::Path(id): axum::extract::Path<String>| {
                let account = account.clone();
                let known = id == payer;
                async move {
                    if known {
                        (http::StatusCode::OK, Json(account))
                    } else {
                        (http::StatusCode::NOT_FOUND, Json(json!({})))
                    }
                }
            }),
        )
        .route(
            "/api/v1/network/nodes",
            get(|| async {
                let nodes: Vec<Value> = (3..=9)
                    .map(|n| {
                        json!({
                            "node_account_id": format!("0.0.{n}"),
                            "service_endpoints": [{"domain_name": "", "ip_address_v4": "127.0.0.1", "port": 50211}],
                        })
                    })
                    .collect();
                Json(json!({"nodes": nodes, "links": {"next": null}}))
            }),
        );
    serve(router).await
}

#[tokio::test]
async fn hedera_payments_built_by_the_client_pass_the_hedera_mechanisms_verification() {
    use concert::fastlane::chains::hedera::HederaExact;
    use concert::fastlane::client::payload::{Chain, build};
    use concert::fastlane::client::{Family, Wallet};
    use concert::fastlane::mechanism::Mechanism as _;
    use concert::fastlane::settings::NetworkSettings;
    use concert::fastlane::x402::{PaymentPayload, PaymentRequirements};

    let sponsor = format!("302e020100300506032b657004220420{}", hex::encode([1u8; 32]));
    let ed25519_secret = [0x42u8; 32];
    let ed25519_public = hex::encode(
        ed25519_dalek::SigningKey::from_bytes(&ed25519_secret)
            .verifying_key()
            .to_bytes(),
    );
    let ecdsa_secret = [0x24u8; 32];
    let ecdsa_public = hex::encode(
        k256::ecdsa::SigningKey::from_slice(&ecdsa_secret)
            .expect("key")
            .verifying_key()
            .to_encoded_point(true)
            .as_bytes(),
    );
    let payers = [
        (
            "ED25519",
            ed25519_public,
            format!(
                "302e020100300506032b657004220420{}",
                hex::encode(ed25519_secret)
            ),
        ),
        (
            "ECDSA_SECP256K1",
            ecdsa_public,
            format!(
                "3030020100300706052b8104000a04220420{}",
                hex::encode(ecdsa_secret)
            ),
        ),
    ];
    let terms: PaymentRequirements = serde_json::from_value(json!({
        "scheme": "exact",
        "network": "hedera:testnet",
        "amount": "50000000",
        "asset": "0.0.0",
        "payTo": "0.0.789",
        "maxTimeoutSeconds": 60,
        "extra": {"feePayer": "0.0.123"},
    }))
    .expect("terms");
    for (kind, public, secret) in payers {
        let mirror = start_mirror("0.0.1001", kind, &public).await;
        let settings = NetworkSettings {
            mirror: mirror.clone(),
            fee_payer: "0.0.123".into(),
            ..NetworkSettings::default()
        };
        let env: HashMap<String, String> = HashMap::from([
            (
                "CONCERT_CLIENT_HBAR_ACCOUNT".to_owned(),
                "0.0.1001".to_owned(),
            ),
            ("CONCERT_CLIENT_HBAR_KEY".to_owned(), secret),
        ]);
        let wallet = Wallet::from_env(&env, Family::Hedera).expect("wallet");
        let chain = Chain {
            network: "hedera:testnet",
            settings: Some(&settings),
            site: None,
            session_headers: &[],
        };
        let payload = build(&wallet, &terms, &chain).await.expect("payload");
        let payment = PaymentPayload {
            x402_version: 2,
            resource: None,
            accepted: terms.clone(),
            payload,
            extensions: None,
        };
        let mechanism =
            HederaExact::new("hedera:testnet", &settings, Some(&sponsor)).expect("mechanism");
        let verdict = mechanism.verify(&payment, &terms).await.expect("a verdict");
        assert!(verdict.is_valid, "{kind}: {verdict:?}");
        assert_eq!(verdict.payer, "0.0.1001");

        // Someone else's mirror record (another key) makes the same payment invalid.
        let stranger = start_mirror("0.0.1001", "ED25519", &hex::encode([9u8; 32])).await;
        let elsewhere = NetworkSettings {
            mirror: stranger,
            ..settings.clone()
        };
        let judge =
            HederaExact::new("hedera:testnet", &elsewhere, Some(&sponsor)).expect("mechanism");
        let verdict = judge.verify(&payment, &terms).await.expect("a verdict");
        assert!(!verdict.is_valid, "{kind}");
    }
}

// ------------------------------------------------------------- Stellar payments

/// A Soroban RPC that simulates a native-asset `transfer` as the network does: without
/// authorisations it names the one the call needs (recording mode); either way it reports the
/// resources and the contract's `transfer` event for the call it was given.
async fn stellar_answer(Json(request): Json<Value>) -> Json<Value> {
    use stellar_xdr::{
        ContractEvent, ContractEventBody, ContractEventType, ContractEventV0, DiagnosticEvent,
        ExtensionPoint, HostFunction, Limits, OperationBody, ReadXdr as _, ScAddress, ScSymbol,
        ScVal, SorobanAddressCredentials, SorobanAuthorizationEntry, SorobanAuthorizedFunction,
        SorobanAuthorizedInvocation, SorobanCredentials, TransactionEnvelope, WriteXdr as _,
    };
    let result = match request["method"].as_str().unwrap_or_default() {
        "getLatestLedger" => json!({"id": "x", "protocolVersion": 23, "sequence": 5000}),
        "simulateTransaction" => {
            let bytes = STANDARD
                .decode(
                    request["params"]["transaction"]
                        .as_str()
                        .unwrap_or_default(),
                )
                .unwrap_or_default();
            let Ok(TransactionEnvelope::Tx(envelope)) =
                TransactionEnvelope::from_xdr(&bytes, Limits::none())
            else {
                return Json(
                    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"error": "bad envelope", "latestLedger": 5000}}),
                );
            };
            let Some(OperationBody::InvokeHostFunction(op)) =
                envelope.tx.operations.first().map(|op| op.body.clone())
            else {
                return Json(
                    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"error": "no invocation", "latestLedger": 5000}}),
                );
            };
            let HostFunction::InvokeContract(call) = op.host_function else {
                return Json(
                    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"error": "not a call", "latestLedger": 5000}}),
                );
            };
            let ScVal::Address(from) = call.args[0].clone() else {
                return Json(
                    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"error": "no from", "latestLedger": 5000}}),
                );
            };
            let needed = SorobanAuthorizationEntry {
                credentials: SorobanCredentials::Address(SorobanAddressCredentials {
                    address: from.clone(),
                    nonce: 7_070_707,
                    signature_expiration_ledger: 0,
                    signature: ScVal::Void,
                }),
                root_invocation: SorobanAuthorizedInvocation {
                    function: SorobanAuthorizedFunction::ContractFn(call.clone()),
                    sub_invocations: Default::default(),
                },
            };
            let ScAddress::Contract(contract) = call.contract_address.clone() else {
                return Json(
                    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"error": "no contract", "latestLedger": 5000}}),
                );
            };
            let event = DiagnosticEvent {
                in_successful_contract_call: true,
                event: ContractEvent {
                    ext: ExtensionPoint::V0,
                    contract_id: Some(contract),
                    type_: ContractEventType::Contract,
                    body: ContractEventBody::V0(ContractEventV0 {
                        topics: vec![
                            ScVal::Symbol(ScSymbol("transfer".try_into().unwrap())),
                            call.args[0].clone(),
                            call.args[1].clone(),
                        ]
                        .try_into()
                        .unwrap(),
                        data: call.args[2].clone(),
                    }),
                },
            };
            let encode = |bytes: Vec<u8>| STANDARD.encode(bytes);
            let auth = if op.auth.is_empty() {
                vec![encode(needed.to_xdr(Limits::none()).unwrap())]
            } else {
                Vec::new()
            };
            json!({
                "transactionData": "AAAAAAAAAAAAAAAAAA9CQAAAB9AAAAu4AAAAAAAATiA=",
                "minResourceFee": "20000",
                "events": [encode(event.to_xdr(Limits::none()).unwrap())],
                "results": [{"auth": auth, "xdr": "AAAAAQ=="}],
                "latestLedger": 5000,
            })
        }
        _ => Value::Null,
    };
    Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
}

#[tokio::test]
async fn a_stellar_payment_built_by_the_client_passes_the_stellar_mechanisms_verification() {
    use concert::fastlane::chains::stellar::StellarExact;
    use concert::fastlane::client::payload::{Chain, build};
    use concert::fastlane::client::{Family, Wallet};
    use concert::fastlane::mechanism::Mechanism as _;
    use concert::fastlane::settings::NetworkSettings;
    use concert::fastlane::x402::{PaymentPayload, PaymentRequirements};

    let rpc = serve(Router::new().route("/", post(stellar_answer))).await;
    let settings = NetworkSettings {
        rpc: format!("{rpc}/"),
        ..NetworkSettings::default()
    };
    let terms: PaymentRequirements = serde_json::from_value(json!({
        "scheme": "exact",
        "network": "stellar:testnet",
        "amount": "1000000",
        "asset": "CDLZFC3SYJYDZT7K67VZ75HPJVIEUVNIXF47ZG2FB2RMQQVU2HHGCYSC",
        "payTo": "GDWUSKGGFDI4FRXK5EBTRECZSVQSSWJHHJOGH6JWG3AUMFFMQ435DIAG",
        "maxTimeoutSeconds": 60,
        "extra": {"areFeesSponsored": true},
    }))
    .expect("terms");
    // The payer: a key of this test, not the sponsor's.
    let payer_seed = stellar_strkey::ed25519::PrivateKey([0x11; 32])
        .as_unredacted()
        .to_string()
        .as_str()
        .to_owned();
    let env: HashMap<String, String> =
        HashMap::from([("CONCERT_CLIENT_XLM_SECRET".to_owned(), payer_seed)]);
    let wallet = Wallet::from_env(&env, Family::Stellar).expect("wallet");
    let chain = Chain {
        network: "stellar:testnet",
        settings: Some(&settings),
        site: None,
        session_headers: &[],
    };
    let payload = build(&wallet, &terms, &chain).await.expect("payload");
    let payment = PaymentPayload {
        x402_version: 2,
        resource: None,
        accepted: terms.clone(),
        payload,
        extensions: None,
    };
    let sponsor = "SABAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAFNE7";
    let mechanism = StellarExact::new("stellar:testnet", &settings, sponsor).expect("mechanism");
    let verdict = mechanism.verify(&payment, &terms).await.expect("a verdict");
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(verdict.payer, wallet.address());

    // Another amount in the terms: the same payment is refused.
    let mut dearer = terms.clone();
    dearer.amount = "1000001".into();
    let verdict = mechanism
        .verify(&payment, &dearer)
        .await
        .expect("a verdict");
    assert!(!verdict.is_valid);
}
