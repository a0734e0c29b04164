//! The `concert-native-sol` mechanism against a fake Solana JSON-RPC endpoint: a real axum
//! server on loopback that keeps a tiny ledger (genesis hash, blockhash validity, simulation
//! verdict, signature statuses) and counts every broadcast.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use concert::fastlane::chains::rpc::{JsonRpcClient, MAX_ANSWER_BYTES, RpcError};
use concert::fastlane::chains::solana::transfer::{parse_key, unsigned_transfer};
use concert::fastlane::chains::solana::wire::Transaction;
use concert::fastlane::chains::solana::{
    INVALID_REASON, PrepareError, SCHEME, SettlePolling, SolanaNativeSol,
};
use concert::fastlane::mechanism::{ChainError, Mechanism};
use concert::fastlane::settings::NetworkSettings;
use concert::fastlane::x402::{PaymentPayload, PaymentRequirements};
use ed25519_dalek::{Signer as _, SigningKey};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;

const DEVNET: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const DEVNET_GENESIS: &str = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG";
const MAINNET_GENESIS: &str = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d";
const PAY_TO: &str = "GyfFHe77pcZtdgGnWGw4T1VxCPB6JJyGLfjzMagDdsz3";
const BLOCKHASH: &str = "Hy6psfgdEAs9KVVxgG1i9WXhpzQ1BjGus4AZXzdJwwSE";
const LAMPORTS: u64 = 1_500_000;

/// When a broadcast transaction becomes final in the fake ledger.
#[derive(Clone, Copy)]
enum Finality {
    /// After this many status queries following the broadcast.
    AfterQueries(u32),
    /// Never: it stays `confirmed`.
    Never,
}

struct Ledger {
    genesis: String,
    blockhash_valid: bool,
    simulation_error: Option<Value>,
    finality: Finality,
    /// Signature → (queries since seen, error on chain).
    seen: HashMap<String, (u32, Option<Value>)>,
    /// `sendTransaction` calls.
    broadcasts: u32,
    /// Whether broadcasts are lost on the way (never seen by the ledger).
    lose_broadcasts: bool,
    /// Every method called, in order.
    calls: Vec<String>,
    answer_wrong_signature: bool,
}

impl Ledger {
    fn devnet() -> Ledger {
        Ledger {
            genesis: DEVNET_GENESIS.to_owned(),
            blockhash_valid: true,
            simulation_error: None,
            finality: Finality::AfterQueries(2),
            seen: HashMap::new(),
            broadcasts: 0,
            lose_broadcasts: false,
            calls: Vec::new(),
            answer_wrong_signature: false,
        }
    }

    fn status(&mut self, signature: &str) -> Value {
        let finality = self.finality;
        let Some((queries, error)) = self.seen.get_mut(signature) else {
            return Value::Null;
        };
        *queries += 1;
        let finalized = match finality {
            Finality::AfterQueries(needed) => *queries > needed,
            Finality::Never => false,
        };
        json!({
            "slot": 350_000_000u64,
            "confirmations": if finalized { Value::Null } else { json!(1) },
            "err": error.clone(),
            "status": if error.is_some() { json!({"Err": error}) } else { json!({"Ok": null}) },
            "confirmationStatus": if finalized { "finalized" } else { "confirmed" },
        })
    }

    fn answer(&mut self, method: &str, params: &Value) -> Value {
        self.calls.push(method.to_owned());
        let context = json!({"slot": 350_000_000u64, "apiVersion": "2.2.0"});
        match method {
            "getGenesisHash" => json!(self.genesis),
            "getSignatureStatuses" => {
                let signature = params[0][0].as_str().unwrap_or_default().to_owned();
                json!({"context": context, "value": [self.status(&signature)]})
            }
            "isBlockhashValid" => json!({"context": context, "value": self.blockhash_valid}),
            "simulateTransaction" => json!({"context": context, "value": {
                "err": self.simulation_error.clone(),
                "logs": [],
                "unitsConsumed": 150,
            }}),
            "getLatestBlockhash" => json!({"context": context, "value": {
                "blockhash": BLOCKHASH,
                "lastValidBlockHeight": 18_446_744_073_709_551_000u64,
            }}),
            "sendTransaction" => {
                self.broadcasts += 1;
                let wire = STANDARD
                    .decode(params[0].as_str().unwrap_or_default())
                    .unwrap_or_default();
                let signature = Transaction::decode(&wire)
                    .ok()
                    .and_then(|tx| tx.signatures.first().copied())
                    .map(|signature| bs58::encode(signature).into_string())
                    .unwrap_or_default();
                if !self.lose_broadcasts {
                    self.seen.insert(signature.clone(), (0, None));
                }
                if self.answer_wrong_signature {
                    json!("1111111111111111111111111111111111111111111111111111111111111111")
                } else {
                    json!(signature)
                }
            }
            _ => Value::Null,
        }
    }
}

struct FakeRpc {
    url: String,
    ledger: Arc<Mutex<Ledger>>,
}

impl FakeRpc {
    async fn start(ledger: Ledger) -> FakeRpc {
        let ledger = Arc::new(Mutex::new(ledger));
        let router = Router::new()
            .route("/", post(answer))
            .with_state(Arc::clone(&ledger));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        FakeRpc {
            url: format!("http://{address}/"),
            ledger,
        }
    }

    fn settings(&self) -> NetworkSettings {
        NetworkSettings {
            rpc: self.url.clone(),
            ..NetworkSettings::default()
        }
    }

    fn mechanism(&self) -> SolanaNativeSol {
        SolanaNativeSol::new(DEVNET, &self.settings())
            .expect("a mechanism")
            .with_polling(SettlePolling {
                interval: Duration::from_millis(10),
                budget: Duration::from_millis(300),
            })
    }

    fn broadcasts(&self) -> u32 {
        self.ledger.lock().broadcasts
    }

    fn calls(&self, method: &str) -> usize {
        self.ledger
            .lock()
            .calls
            .iter()
            .filter(|call| *call == method)
            .count()
    }
}

async fn answer(
    State(ledger): State<Arc<Mutex<Ledger>>>,
    Json(request): Json<Value>,
) -> Json<Value> {
    let method = request["method"].as_str().unwrap_or_default().to_owned();
    let result = ledger.lock().answer(&method, &request["params"]);
    Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
}

fn terms() -> PaymentRequirements {
    PaymentRequirements {
        scheme: SCHEME.to_owned(),
        network: DEVNET.to_owned(),
        amount: LAMPORTS.to_string(),
        asset: "SOL".to_owned(),
        pay_to: PAY_TO.to_owned(),
        max_timeout_seconds: 60,
        extra: None,
    }
}

/// A transfer of `lamports` to `PAY_TO`, signed by the key made from `seed`.
fn signed_transfer(seed: u8, lamports: u64) -> (PaymentPayload, String, String) {
    let signer = SigningKey::from_bytes(&[seed; 32]);
    let from = signer.verifying_key().to_bytes();
    let to = parse_key(PAY_TO).expect("payTo");
    let blockhash = parse_key(BLOCKHASH).expect("blockhash");
    let mut transaction = unsigned_transfer(from, to, lamports, blockhash);
    let signature = signer.sign(&transaction.message.encode()).to_bytes();
    transaction.signatures = vec![signature];
    let mut payload = Map::new();
    payload.insert(
        "transaction".to_owned(),
        Value::String(STANDARD.encode(transaction.encode())),
    );
    let payment = PaymentPayload {
        x402_version: 2,
        resource: None,
        accepted: terms(),
        payload,
        extensions: None,
    };
    (
        payment,
        bs58::encode(from).into_string(),
        bs58::encode(signature).into_string(),
    )
}

#[tokio::test]
async fn a_fresh_transfer_verifies_after_every_chain_check() {
    let rpc = FakeRpc::start(Ledger::devnet()).await;
    let (payment, payer, _) = signed_transfer(1, LAMPORTS);
    let verdict = rpc
        .mechanism()
        .verify(&payment, &terms())
        .await
        .expect("a verdict");
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(verdict.payer, payer);
    for method in [
        "getGenesisHash",
        "getSignatureStatuses",
        "isBlockhashValid",
        "simulateTransaction",
    ] {
        assert_eq!(rpc.calls(method), 1, "{method}");
    }
    assert_eq!(rpc.broadcasts(), 0);
}

#[tokio::test]
async fn a_wrong_amount_is_refused_without_a_chain_call() {
    let rpc = FakeRpc::start(Ledger::devnet()).await;
    let (payment, payer, _) = signed_transfer(1, LAMPORTS - 1);
    let verdict = rpc
        .mechanism()
        .verify(&payment, &terms())
        .await
        .expect("a verdict");
    assert!(!verdict.is_valid);
    assert_eq!(verdict.invalid_reason.as_deref(), Some(INVALID_REASON));
    assert_eq!(verdict.payer, payer);
    assert!(rpc.ledger.lock().calls.is_empty());
}

#[tokio::test]
async fn a_transfer_the_chain_has_seen_is_refused() {
    let rpc = FakeRpc::start(Ledger::devnet()).await;
    let (payment, _, signature) = signed_transfer(2, LAMPORTS);
    rpc.ledger.lock().seen.insert(signature, (0, None));
    let verdict = rpc
        .mechanism()
        .verify(&payment, &terms())
        .await
        .expect("a verdict");
    assert!(!verdict.is_valid);
    assert_eq!(verdict.invalid_reason.as_deref(), Some(INVALID_REASON));
    assert_eq!(rpc.calls("simulateTransaction"), 0);
}

#[tokio::test]
async fn an_endpoint_of_another_cluster_is_refused() {
    let mut ledger = Ledger::devnet();
    ledger.genesis = MAINNET_GENESIS.to_owned();
    let rpc = FakeRpc::start(ledger).await;
    let refused = SolanaNativeSol::connect(DEVNET, &rpc.settings()).await;
    assert!(matches!(refused, Err(ChainError::Unavailable { .. })));
    let (payment, _, _) = signed_transfer(3, LAMPORTS);
    let mechanism = rpc.mechanism();
    assert!(mechanism.verify(&payment, &terms()).await.is_err());
    assert!(mechanism.settle(&payment, &terms()).await.is_err());
    assert_eq!(rpc.calls("getSignatureStatuses"), 0);
    assert_eq!(rpc.broadcasts(), 0);
    // The right cluster connects.
    rpc.ledger.lock().genesis = DEVNET_GENESIS.to_owned();
    assert!(
        SolanaNativeSol::connect(DEVNET, &rpc.settings())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn an_expired_or_foreign_blockhash_is_refused() {
    let mut ledger = Ledger::devnet();
    ledger.blockhash_valid = false;
    let rpc = FakeRpc::start(ledger).await;
    let (payment, _, _) = signed_transfer(4, LAMPORTS);
    let verdict = rpc
        .mechanism()
        .verify(&payment, &terms())
        .await
        .expect("a verdict");
    assert!(!verdict.is_valid);
    assert_eq!(verdict.invalid_reason.as_deref(), Some(INVALID_REASON));
    assert_eq!(rpc.calls("simulateTransaction"), 0);
}

#[tokio::test]
async fn a_failing_simulation_is_refused() {
    let mut ledger = Ledger::devnet();
    ledger.simulation_error = Some(json!({"InstructionError": [0, {"Custom": 1}]}));
    let rpc = FakeRpc::start(ledger).await;
    let (payment, _, _) = signed_transfer(5, LAMPORTS);
    let verdict = rpc
        .mechanism()
        .verify(&payment, &terms())
        .await
        .expect("a verdict");
    assert!(!verdict.is_valid);
    assert_eq!(verdict.invalid_reason.as_deref(), Some(INVALID_REASON));
}

#[tokio::test]
async fn settle_sends_once_and_a_retry_sends_nothing_new() {
    let rpc = FakeRpc::start(Ledger::devnet()).await;
    let mechanism = rpc.mechanism();
    let (payment, payer, signature) = signed_transfer(6, LAMPORTS);
    let settled = mechanism.settle(&payment, &terms()).await.expect("settled");
    assert!(settled.success);
    assert_eq!(settled.transaction, signature);
    assert_eq!(settled.network, DEVNET);
    assert_eq!(settled.payer.as_deref(), Some(payer.as_str()));
    assert_eq!(rpc.broadcasts(), 1);

    // The same payment again, from this process and from a fresh one (after a restart).
    let again = mechanism.settle(&payment, &terms()).await.expect("settled");
    assert_eq!(again, settled);
    let restarted = rpc.mechanism();
    assert_eq!(
        restarted.settle(&payment, &terms()).await.expect("settled"),
        settled
    );
    assert_eq!(rpc.broadcasts(), 1);
}

#[tokio::test]
async fn settle_without_finality_is_an_error_and_a_retry_does_not_resend() {
    let mut ledger = Ledger::devnet();
    ledger.finality = Finality::Never;
    let rpc = FakeRpc::start(ledger).await;
    let mechanism = rpc.mechanism();
    let (payment, _, _) = signed_transfer(7, LAMPORTS);
    let started = tokio::time::Instant::now();
    let unresolved = mechanism.settle(&payment, &terms()).await;
    assert!(
        matches!(unresolved, Err(ChainError::Unavailable { .. })),
        "{unresolved:?}"
    );
    // The wait is bounded by the budget, not by luck.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(rpc.calls("getSignatureStatuses") >= 3);
    assert_eq!(rpc.broadcasts(), 1);
    // Not final yet, so not reconciled.
    assert_eq!(
        mechanism
            .reconcile(&payment, &terms(), None)
            .await
            .expect("no error"),
        None
    );

    assert!(mechanism.settle(&payment, &terms()).await.is_err());
    assert_eq!(rpc.broadcasts(), 1);

    // Once final, reconciliation reports the settlement, still without broadcasting.
    rpc.ledger.lock().finality = Finality::AfterQueries(0);
    let reconciled = mechanism
        .reconcile(&payment, &terms(), None)
        .await
        .expect("no error")
        .expect("final");
    assert!(reconciled.success);
    assert_eq!(rpc.broadcasts(), 1);
}

#[tokio::test]
async fn a_retry_after_a_lost_broadcast_does_not_broadcast_again() {
    let mut ledger = Ledger::devnet();
    ledger.lose_broadcasts = true;
    let rpc = FakeRpc::start(ledger).await;
    let mechanism = rpc.mechanism();
    let (payment, _, _) = signed_transfer(10, LAMPORTS);
    assert!(mechanism.settle(&payment, &terms()).await.is_err());
    assert!(mechanism.settle(&payment, &terms()).await.is_err());
    assert_eq!(rpc.broadcasts(), 1);
}

#[tokio::test]
async fn reconcile_reports_nothing_for_an_unknown_transfer_and_refuses_a_failed_one() {
    let rpc = FakeRpc::start(Ledger::devnet()).await;
    let mechanism = rpc.mechanism();
    let (payment, _, signature) = signed_transfer(8, LAMPORTS);
    assert_eq!(
        mechanism
            .reconcile(&payment, &terms(), None)
            .await
            .expect("no error"),
        None
    );
    rpc.ledger.lock().seen.insert(
        signature,
        (5, Some(json!({"InstructionError": [0, "Custom"]}))),
    );
    assert!(mechanism.reconcile(&payment, &terms(), None).await.is_err());
    assert!(mechanism.settle(&payment, &terms()).await.is_err());
    assert_eq!(rpc.broadcasts(), 0);
}

#[tokio::test]
async fn settle_refuses_an_endpoint_that_names_another_signature() {
    let mut ledger = Ledger::devnet();
    ledger.answer_wrong_signature = true;
    let rpc = FakeRpc::start(ledger).await;
    let (payment, _, _) = signed_transfer(9, LAMPORTS);
    assert!(rpc.mechanism().settle(&payment, &terms()).await.is_err());
    assert_eq!(rpc.broadcasts(), 1);
}

#[tokio::test]
async fn prepare_builds_the_transfer_on_a_finalized_blockhash() {
    let rpc = FakeRpc::start(Ledger::devnet()).await;
    let mechanism = rpc.mechanism();
    let from = "GM4eCsQuaLNXApYz6YYUQVMxajTaJ7dB4TbroFGBaou9";
    let prepared = mechanism.prepare(from, &terms()).await.expect("prepared");
    // The vector's unsigned transfer: same payer, payee, amount and blockhash.
    let vectors: Value =
        serde_json::from_str(include_str!("vectors/solana.json")).expect("vectors");
    assert_eq!(prepared["transaction"], vectors["unsigned"]["tx"]);
    assert_eq!(prepared["blockhash"], BLOCKHASH);
    assert_eq!(
        prepared["lastValidBlockHeight"],
        json!(18_446_744_073_709_551_000u64)
    );
    assert_eq!(rpc.calls("getLatestBlockhash"), 1);

    assert!(matches!(
        mechanism.prepare(PAY_TO, &terms()).await,
        Err(PrepareError::Invalid(_))
    ));
    assert!(matches!(
        mechanism.prepare("not-base58-0OIl", &terms()).await,
        Err(PrepareError::Invalid(_))
    ));
    let mut other = terms();
    other.network = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp".to_owned();
    assert!(matches!(
        mechanism.prepare(from, &other).await,
        Err(PrepareError::Invalid(_))
    ));
    assert_eq!(rpc.calls("getLatestBlockhash"), 1);
}

/// A server answering every POST with `reply`, for the client's limits.
async fn serve_raw(reply: fn() -> axum::response::Response) -> String {
    let router = Router::new().route("/", post(move || async move { reply() }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}/")
}

#[tokio::test]
async fn the_client_follows_no_redirect() {
    let url = serve_raw(|| {
        axum::response::Response::builder()
            .status(307)
            .header("location", "http://127.0.0.1:1/")
            .body(axum::body::Body::empty())
            .expect("response")
    })
    .await;
    let client = JsonRpcClient::new(&url).expect("client");
    let answer = client.call::<Value>("getGenesisHash", json!([])).await;
    assert!(matches!(answer, Err(RpcError::Status(307))), "{answer:?}");
}

#[tokio::test]
async fn the_client_stops_reading_past_four_mebibytes() {
    // Declared length over the limit.
    let declared = serve_raw(|| {
        let filler = " ".repeat(MAX_ANSWER_BYTES);
        axum::response::Response::new(axum::body::Body::from(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}}{filler}"
        )))
    })
    .await;
    let client = JsonRpcClient::new(&declared).expect("client");
    let answer = client.call::<u64>("getSlot", json!([])).await;
    assert!(matches!(answer, Err(RpcError::TooLarge)), "{answer:?}");

    // No declared length: chunks until the limit is passed.
    let chunked = serve_raw(|| {
        let chunks = (0..80).map(|_| Ok::<_, std::io::Error>(vec![b' '; 64 * 1024]));
        axum::response::Response::new(axum::body::Body::from_stream(futures_util::stream::iter(
            chunks,
        )))
    })
    .await;
    let client = JsonRpcClient::new(&chunked).expect("client");
    let answer = client.call::<u64>("getSlot", json!([])).await;
    assert!(matches!(answer, Err(RpcError::TooLarge)), "{answer:?}");
}

#[tokio::test]
async fn the_client_gives_up_on_a_silent_endpoint() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    // Accepts and never answers.
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let client = JsonRpcClient::new(&format!("http://{address}/"))
        .expect("client")
        .with_timeout(Duration::from_millis(200));
    let answer = client.call::<u64>("getSlot", json!([])).await;
    assert!(matches!(answer, Err(RpcError::Timeout)), "{answer:?}");
    holder.abort();
}
