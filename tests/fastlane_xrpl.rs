//! The XRPL `exact` mechanism against the reference vectors (verdicts, hashes, keys, message
//! signatures, signed blobs), against a real loopback JSON-RPC server that answers like
//! rippled from the recorded ledger states, and under property tests of its decoders.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::post;
use base64::Engine as _;
use concert::fastlane::chains::rpc::JsonRpcClient;
use concert::fastlane::chains::xrpl::codec;
use concert::fastlane::chains::xrpl::keys::{self, KeyPair, PaymentDraft};
use concert::fastlane::chains::xrpl::{
    AccountState, Ledger, RpcLedger, ServerState, TransactionStatus, XrplExact,
};
use concert::fastlane::mechanism::{BoxFuture, ChainError, Mechanism};
use concert::fastlane::settings::NetworkSettings;
use concert::fastlane::x402::{PaymentPayload, PaymentRequirements};
use parking_lot::Mutex;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const VECTORS: &str = include_str!("vectors/xrpl.json");

fn vectors() -> Value {
    serde_json::from_str(VECTORS).unwrap_or(Value::Null)
}

fn cases() -> Vec<Value> {
    vectors()["cases"].as_array().cloned().unwrap_or_default()
}

fn case(name: &str) -> Value {
    cases()
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no vector case {name}"))
}

fn requirements_of(case: &Value) -> PaymentRequirements {
    serde_json::from_value(case["requirements"].clone()).expect("vector requirements parse")
}

fn payment_of(blob: &str, terms: &PaymentRequirements) -> PaymentPayload {
    let mut payload = Map::new();
    payload.insert("signedTxBlob".into(), Value::String(blob.to_string()));
    PaymentPayload {
        x402_version: 2,
        resource: None,
        accepted: terms.clone(),
        payload,
        extensions: None,
    }
}

/// A ledger's answers, taken from a vector's `state` and adjustable per test.
#[derive(Debug, Clone)]
struct LedgerState {
    network_id: Option<u32>,
    validated: u32,
    /// The validated ledger once something was submitted (to let LastLedgerSequence pass).
    validated_after_submit: Option<u32>,
    account: String,
    sequence: u32,
    regular_key: Option<String>,
    master_disabled: bool,
    ticket: bool,
    simulate: String,
    submit_result: String,
    /// What `tx` reports after a submit: (validated, result, delivered drops as text).
    tx_after_submit: Option<(bool, String, String)>,
    /// What `tx` reports regardless of submits (reconciliation).
    tx_always: Option<(bool, String, String)>,
}

impl LedgerState {
    fn from_case(case: &Value) -> LedgerState {
        let state = &case["state"];
        LedgerState {
            network_id: Some(1),
            validated: state["current"].as_u64().unwrap_or(0) as u32,
            validated_after_submit: None,
            account: case["payer"].as_str().unwrap_or_default().to_string(),
            sequence: state["sequence"].as_u64().unwrap_or(0) as u32,
            regular_key: state["regularKey"].as_str().map(str::to_string),
            master_disabled: state["masterDisabled"].as_bool().unwrap_or(false),
            ticket: state["ticket"].as_bool().unwrap_or(false),
            simulate: state["simulate"].as_str().unwrap_or_default().to_string(),
            submit_result: "tesSUCCESS".into(),
            tx_after_submit: Some((true, "tesSUCCESS".into(), "100000".into())),
            tx_always: None,
        }
    }
}

/// Shared by the in-memory ledger and the loopback server: state plus call counters.
#[derive(Debug)]
struct Recorded {
    state: Mutex<LedgerState>,
    submits: AtomicUsize,
    simulated: Mutex<Vec<String>>,
}

impl Recorded {
    fn new(state: LedgerState) -> Arc<Recorded> {
        Arc::new(Recorded {
            state: Mutex::new(state),
            submits: AtomicUsize::new(0),
            simulated: Mutex::new(Vec::new()),
        })
    }

    fn validated(&self) -> u32 {
        let state = self.state.lock();
        match state.validated_after_submit {
            Some(later) if self.submits.load(Ordering::SeqCst) > 0 => later,
            _ => state.validated,
        }
    }

    fn tx_status(&self) -> Option<(bool, String, String)> {
        let state = self.state.lock();
        if let Some(always) = &state.tx_always {
            return Some(always.clone());
        }
        if self.submits.load(Ordering::SeqCst) > 0 {
            state.tx_after_submit.clone()
        } else {
            None
        }
    }
}

/// The in-memory ledger.
struct MemoryLedger(Arc<Recorded>);

impl Ledger for MemoryLedger {
    fn server_state(&self) -> BoxFuture<'_, Result<ServerState, ChainError>> {
        Box::pin(async move {
            let network_id = self.0.state.lock().network_id;
            Ok(ServerState {
                network_id,
                validated_ledger: self.0.validated(),
            })
        })
    }

    fn account_state<'a>(
        &'a self,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Option<AccountState>, ChainError>> {
        Box::pin(async move {
            let state = self.0.state.lock();
            if address != state.account {
                return Ok(None);
            }
            Ok(Some(AccountState {
                sequence: state.sequence,
                regular_key: state.regular_key.clone(),
                flags: if state.master_disabled {
                    0x0010_0000
                } else {
                    0
                },
            }))
        })
    }

    fn ticket_exists<'a>(
        &'a self,
        _address: &'a str,
        _ticket: u32,
    ) -> BoxFuture<'a, Result<bool, ChainError>> {
        Box::pin(async move { Ok(self.0.state.lock().ticket) })
    }

    fn simulate<'a>(&'a self, unsigned_blob: &'a str) -> BoxFuture<'a, Result<String, ChainError>> {
        Box::pin(async move {
            self.0.simulated.lock().push(unsigned_blob.to_string());
            Ok(self.0.state.lock().simulate.clone())
        })
    }

    fn submit<'a>(&'a self, _signed_blob: &'a str) -> BoxFuture<'a, Result<String, ChainError>> {
        Box::pin(async move {
            self.0.submits.fetch_add(1, Ordering::SeqCst);
            Ok(self.0.state.lock().submit_result.clone())
        })
    }

    fn transaction<'a>(
        &'a self,
        _hash: &'a str,
    ) -> BoxFuture<'a, Result<Option<TransactionStatus>, ChainError>> {
        Box::pin(async move {
            Ok(self
                .0
                .tx_status()
                .map(|(validated, result, delivered)| TransactionStatus {
                    validated,
                    result,
                    delivered_drops: delivered.parse().ok(),
                }))
        })
    }
}

/// Extra behaviours of the loopback server for the HTTP limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Rippled,
    Redirect,
    Huge,
}

struct Server {
    recorded: Arc<Recorded>,
    mode: Mode,
    last_submit: Mutex<Option<Value>>,
}

async fn rippled(State(server): State<Arc<Server>>, body: String) -> axum::response::Response {
    match server.mode {
        Mode::Redirect => {
            return (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, "http://127.0.0.1:1/")],
            )
                .into_response();
        }
        Mode::Huge => {
            let pad = "x".repeat(5 * 1024 * 1024);
            return axum::Json(json!({"result": {"pad": pad}})).into_response();
        }
        Mode::Rippled => {}
    }
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let params = request["params"][0].clone();
    let recorded = &server.recorded;
    let result = match request["method"].as_str().unwrap_or_default() {
        "server_info" => {
            let mut info = json!({"validated_ledger": {"seq": recorded.validated()}});
            if let Some(id) = recorded.state.lock().network_id {
                info["network_id"] = json!(id);
            }
            json!({"info": info, "status": "success"})
        }
        "account_info" => {
            let state = recorded.state.lock().clone();
            if params["account"] != json!(state.account) || params["ledger_index"] != "validated" {
                json!({"error": "actNotFound", "status": "error"})
            } else {
                let mut data = json!({
                    "Account": state.account,
                    "Sequence": state.sequence,
                    "Flags": if state.master_disabled { 0x0010_0000u32 } else { 0 },
                    "Balance": "100000000",
                });
                if let Some(key) = state.regular_key {
                    data["RegularKey"] = json!(key);
                }
                json!({"account_data": data, "validated": true, "status": "success"})
            }
        }
        "ledger_entry" => {
            if recorded.state.lock().ticket && params["ticket"]["ticket_seq"].is_u64() {
                json!({"node": {"LedgerEntryType": "Ticket"}, "validated": true})
            } else {
                json!({"error": "entryNotFound", "status": "error"})
            }
        }
        "simulate" => {
            recorded
                .simulated
                .lock()
                .push(params["tx_blob"].as_str().unwrap_or_default().to_string());
            json!({"engine_result": recorded.state.lock().simulate, "applied": false})
        }
        "submit" => {
            recorded.submits.fetch_add(1, Ordering::SeqCst);
            *server.last_submit.lock() = Some(params.clone());
            json!({"engine_result": recorded.state.lock().submit_result, "status": "success"})
        }
        "tx" => match recorded.tx_status() {
            None => json!({"error": "txnNotFound", "status": "error"}),
            Some((validated, result, delivered)) => json!({
                "hash": params["transaction"],
                "validated": validated,
                "meta": {"TransactionResult": result, "delivered_amount": delivered},
            }),
        },
        _ => json!({"error": "unknownCmd", "status": "error"}),
    };
    axum::Json(json!({"result": result})).into_response()
}

/// Starts the fake rippled on a free loopback port; returns its URL.
async fn start_server(recorded: Arc<Recorded>, mode: Mode) -> (String, Arc<Server>) {
    let server = Arc::new(Server {
        recorded,
        mode,
        last_submit: Mutex::new(None),
    });
    let app = axum::Router::new()
        .route("/", post(rippled))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}/"), server)
}

fn memory_mechanism(recorded: &Arc<Recorded>) -> XrplExact {
    XrplExact::with_ledger("xrpl:1", 0, Arc::new(MemoryLedger(recorded.clone())))
        .expect("xrpl:1 is an XRPL network")
        .with_poll_interval(Duration::from_millis(10))
}

fn rpc_mechanism(url: &str) -> XrplExact {
    let settings = NetworkSettings {
        rpc: url.to_string(),
        ..NetworkSettings::default()
    };
    XrplExact::new("xrpl:1", &settings)
        .expect("mechanism over loopback")
        .with_poll_interval(Duration::from_millis(10))
}

fn expect_verdict(case: &Value, verdict: &concert::fastlane::x402::VerifyResponse) {
    let name = case["name"].as_str().unwrap_or_default();
    assert_eq!(
        verdict.is_valid,
        case["valid"] == true,
        "{name}: {verdict:?}"
    );
    let reason = case["reason"].as_str().unwrap_or_default();
    assert_eq!(
        verdict.invalid_reason.as_deref().unwrap_or_default(),
        reason,
        "{name}"
    );
    assert_eq!(
        verdict.payer,
        case["payer"].as_str().unwrap_or_default(),
        "{name}"
    );
}

#[tokio::test]
async fn every_vector_case_gets_the_reference_verdict_and_hash() {
    let all = cases();
    assert_eq!(all.len(), 28);
    for case in &all {
        let blob = case["blob"].as_str().unwrap_or_default();
        let bytes = hex::decode(blob).expect("vector blob is hex");
        assert_eq!(
            keys::transaction_hash(&bytes),
            case["hash"].as_str().unwrap_or_default(),
            "{}",
            case["name"]
        );
        let decoded = codec::decode(&bytes).expect("vector blob decodes");
        assert_eq!(
            decoded.encode(),
            bytes,
            "{} re-encodes exactly",
            case["name"]
        );

        let recorded = Recorded::new(LedgerState::from_case(case));
        let terms = requirements_of(case);
        let verdict = memory_mechanism(&recorded)
            .verify(&payment_of(blob, &terms), &terms)
            .await
            .expect("the in-memory ledger always answers");
        expect_verdict(case, &verdict);
    }
}

#[tokio::test]
async fn valid_and_several_invalid_cases_through_a_loopback_rippled() {
    let names = [
        "valid secp256k1",
        "valid ed25519",
        "regular key authorized",
        "ticket method valid",
        "destination tag required and present",
        "invoice required and bound",
        "source tag allowed",
        "sequence not current",
        "master key disabled",
        "simulation failure",
        "expired",
        "regular key not authorized",
    ];
    for name in names {
        let case = case(name);
        let recorded = Recorded::new(LedgerState::from_case(&case));
        let (url, _server) = start_server(recorded.clone(), Mode::Rippled).await;
        let terms = requirements_of(&case);
        let blob = case["blob"].as_str().unwrap_or_default();
        let verdict = rpc_mechanism(&url)
            .verify(&payment_of(blob, &terms), &terms)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        expect_verdict(&case, &verdict);
    }
}

#[tokio::test]
async fn simulation_gets_the_payment_without_its_signature() {
    let case = case("valid secp256k1");
    let recorded = Recorded::new(LedgerState::from_case(&case));
    let terms = requirements_of(&case);
    let blob = case["blob"].as_str().unwrap_or_default();
    let verdict = memory_mechanism(&recorded)
        .verify(&payment_of(blob, &terms), &terms)
        .await
        .expect("answers");
    assert!(verdict.is_valid);
    let simulated = recorded.simulated.lock().clone();
    assert_eq!(simulated.len(), 1);
    let unsigned = codec::decode(&hex::decode(&simulated[0]).expect("hex")).expect("decodes");
    assert_eq!(unsigned.get(codec::field::TXN_SIGNATURE), None);
    assert_eq!(unsigned.get(codec::field::SIGNING_PUB_KEY), Some(&[][..]));
    assert_eq!(
        unsigned.get(codec::field::AMOUNT),
        Some(&hex::decode("40000000000186A0").expect("hex")[..])
    );
}

#[tokio::test]
async fn a_server_without_network_id_or_on_another_network_gives_no_verdict() {
    let case = case("valid secp256k1");
    let terms = requirements_of(&case);
    let blob = case["blob"].as_str().unwrap_or_default();
    for network_id in [None, Some(0), Some(2)] {
        let mut state = LedgerState::from_case(&case);
        state.network_id = network_id;
        let recorded = Recorded::new(state);
        let (url, _server) = start_server(recorded, Mode::Rippled).await;
        let result = rpc_mechanism(&url)
            .verify(&payment_of(blob, &terms), &terms)
            .await;
        assert!(
            matches!(result, Err(ChainError::Unavailable { .. })),
            "network_id {network_id:?}: {result:?}"
        );
    }
}

#[tokio::test]
async fn chain_http_refuses_redirects_and_oversized_answers() {
    let recorded = Recorded::new(LedgerState::from_case(&case("valid secp256k1")));
    let (url, _server) = start_server(recorded.clone(), Mode::Redirect).await;
    let ledger = RpcLedger::new("xrpl:1", JsonRpcClient::new(&url).expect("client"));
    let err = ledger.server_state().await;
    assert!(
        matches!(&err, Err(ChainError::Unavailable { message, .. }) if message.contains("307")),
        "{err:?}"
    );

    let (url, _server) = start_server(recorded, Mode::Huge).await;
    let ledger = RpcLedger::new("xrpl:1", JsonRpcClient::new(&url).expect("client"));
    let err = ledger.server_state().await;
    assert!(
        matches!(&err, Err(ChainError::Unavailable { message, .. }) if message.contains("larger than")),
        "{err:?}"
    );
}

#[tokio::test]
async fn rpc_ledger_reads_the_recorded_state() {
    let case = case("regular key authorized");
    let recorded = Recorded::new(LedgerState::from_case(&case));
    let (url, _server) = start_server(recorded, Mode::Rippled).await;
    let ledger = RpcLedger::new("xrpl:1", JsonRpcClient::new(&url).expect("client"));
    assert_eq!(
        ledger.server_state().await.expect("server_info"),
        ServerState {
            network_id: Some(1),
            validated_ledger: 1000
        }
    );
    let account = ledger
        .account_state("rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq")
        .await
        .expect("account_info");
    assert_eq!(
        account,
        Some(AccountState {
            sequence: 5,
            regular_key: Some("rn5W85Srey74NZyxtLUiusSGtaiK37agos".into()),
            flags: 0
        })
    );
    assert_eq!(
        ledger
            .account_state("r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6")
            .await
            .expect("answers"),
        None
    );
    assert!(
        ledger
            .ticket_exists("rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq", 9)
            .await
            .expect("answers")
    );
    assert_eq!(ledger.transaction("00").await.expect("answers"), None);
}

async fn settle_case(
    state_change: impl FnOnce(&mut LedgerState),
) -> (
    Arc<Recorded>,
    Arc<Server>,
    XrplExact,
    PaymentPayload,
    PaymentRequirements,
) {
    let case = case("valid secp256k1");
    let mut state = LedgerState::from_case(&case);
    state_change(&mut state);
    let recorded = Recorded::new(state);
    let (url, server) = start_server(recorded.clone(), Mode::Rippled).await;
    let terms = requirements_of(&case);
    let payment = payment_of(case["blob"].as_str().unwrap_or_default(), &terms);
    (recorded, server, rpc_mechanism(&url), payment, terms)
}

#[tokio::test]
async fn settle_submits_with_fail_hard_and_waits_for_validation() {
    let (recorded, server, mechanism, payment, terms) = settle_case(|_| {}).await;
    let settled = mechanism.settle(&payment, &terms).await.expect("settles");
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.transaction, case("valid secp256k1")["hash"]);
    assert_eq!(settled.network, "xrpl:1");
    assert_eq!(
        settled.payer.as_deref(),
        Some("rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq")
    );
    assert_eq!(recorded.submits.load(Ordering::SeqCst), 1);
    let submitted = server.last_submit.lock().clone().unwrap_or(Value::Null);
    assert_eq!(submitted["fail_hard"], true);
    assert_eq!(submitted["tx_blob"], payment.payload["signedTxBlob"]);
}

#[tokio::test]
async fn a_second_settle_of_the_same_blob_is_not_resubmitted() {
    let (recorded, _server, mechanism, payment, terms) = settle_case(|_| {}).await;
    assert!(
        mechanism
            .settle(&payment, &terms)
            .await
            .expect("settles")
            .success
    );
    let again = mechanism.settle(&payment, &terms).await.expect("answers");
    assert!(!again.success);
    assert_eq!(again.error_reason.as_deref(), Some("duplicate_settlement"));
    assert_eq!(recorded.submits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_malformed_submission_fails_at_once() {
    let (recorded, _server, mechanism, payment, terms) =
        settle_case(|s| s.submit_result = "temBAD_FEE".into()).await;
    let settled = mechanism.settle(&payment, &terms).await.expect("answers");
    assert!(!settled.success);
    assert_eq!(
        settled.error_reason.as_deref(),
        Some("transaction_failed: temBAD_FEE")
    );
    assert_eq!(recorded.submits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_validated_failure_is_reported_as_failed() {
    let (_recorded, _server, mechanism, payment, terms) = settle_case(|s| {
        s.tx_after_submit = Some((true, "tecUNFUNDED_PAYMENT".into(), "0".into()));
    })
    .await;
    let settled = mechanism.settle(&payment, &terms).await.expect("answers");
    assert!(!settled.success);
    assert_eq!(
        settled.error_reason.as_deref(),
        Some("transaction_failed: tecUNFUNDED_PAYMENT")
    );
}

#[tokio::test]
async fn settle_errors_once_the_last_ledger_passes_unvalidated() {
    let (recorded, _server, mechanism, payment, terms) = settle_case(|s| {
        s.submit_result = "terQUEUED".into();
        s.tx_after_submit = None;
        s.validated_after_submit = Some(1011);
    })
    .await;
    let result = mechanism.settle(&payment, &terms).await;
    assert!(
        matches!(&result, Err(ChainError::Unavailable { message, .. }) if message.contains("not validated by ledger 1010")),
        "{result:?}"
    );
    assert_eq!(recorded.submits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn settle_of_an_invalid_payment_submits_nothing() {
    let (recorded, _server, mechanism, payment, terms) = settle_case(|s| s.sequence = 6).await;
    let settled = mechanism.settle(&payment, &terms).await.expect("answers");
    assert!(!settled.success);
    assert_eq!(
        settled.error_reason.as_deref(),
        Some("invalid_exact_xrpl_payload_sequence_not_current")
    );
    assert_eq!(recorded.submits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn reconcile_reads_the_validated_delivery() {
    let hash = case("valid secp256k1")["hash"].clone();
    let (_r, _s, mechanism, payment, terms) = settle_case(|s| {
        s.tx_always = Some((true, "tesSUCCESS".into(), "100000".into()));
    })
    .await;
    let found = mechanism
        .reconcile(&payment, &terms, None)
        .await
        .expect("answers");
    let found = found.expect("final");
    assert!(found.success);
    assert_eq!(found.transaction, hash);

    let (_r, _s, mechanism, payment, terms) = settle_case(|s| {
        s.tx_always = Some((true, "tesSUCCESS".into(), "99999".into()));
    })
    .await;
    let short = mechanism
        .reconcile(&payment, &terms, None)
        .await
        .expect("answers");
    assert_eq!(short.map(|r| r.success), Some(false));

    let (_r, _s, mechanism, payment, terms) = settle_case(|s| {
        s.tx_always = Some((false, String::new(), String::new()));
    })
    .await;
    assert_eq!(
        mechanism
            .reconcile(&payment, &terms, None)
            .await
            .expect("answers"),
        None
    );

    let (_r, _s, mechanism, payment, terms) = settle_case(|_| {}).await;
    assert_eq!(
        mechanism
            .reconcile(&payment, &terms, None)
            .await
            .expect("answers"),
        None
    );

    // A blob that does not pay the terms is never reported settled for them.
    let (_r, _s, mechanism, payment, mut terms) = settle_case(|s| {
        s.tx_always = Some((true, "tesSUCCESS".into(), "100000".into()));
    })
    .await;
    terms.amount = "100001".into();
    let mut payment = payment;
    payment.accepted.amount = "100001".into();
    assert!(mechanism.reconcile(&payment, &terms, None).await.is_err());
}

#[test]
fn vector_keys_derive_from_their_seeds() {
    let all = vectors()["keys"].as_array().cloned().unwrap_or_default();
    assert_eq!(all.len(), 3);
    for key in all {
        let pair = KeyPair::from_seed(key["seed"].as_str().unwrap_or_default()).expect("seed");
        assert_eq!(hex::encode_upper(pair.public_key()), key["publicKey"]);
        assert_eq!(pair.address(), key["address"]);
    }
    assert!(KeyPair::from_seed("sp59tVwt6dzAsmAVBCFLdpL5SoBwB").is_err());
    assert!(KeyPair::from_seed("rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq").is_err());
}

#[test]
fn vector_messages_verify_and_modified_ones_do_not() {
    let all = vectors()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(all.len(), 2);
    for m in all {
        let key = hex::decode(m["publicKey"].as_str().unwrap_or_default()).expect("hex");
        let signature = base64::engine::general_purpose::STANDARD
            .decode(m["signature"].as_str().unwrap_or_default())
            .expect("base64");
        let address = m["address"].as_str().unwrap_or_default();
        let message = m["message"].as_str().unwrap_or_default().as_bytes();
        assert!(keys::verify_account_message(
            address, &key, message, &signature
        ));
        let mut modified = message.to_vec();
        modified.push(b'!');
        assert!(!keys::verify_account_message(
            address, &key, &modified, &signature
        ));
        assert!(!keys::verify_account_message(
            "r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6",
            &key,
            message,
            &signature
        ));
    }
}

#[test]
fn signing_the_vector_payments_reproduces_their_blobs() {
    let all = vectors()["signing"].as_array().cloned().unwrap_or_default();
    assert_eq!(all.len(), 2);
    for s in all {
        let tx = &s["tx"];
        let draft = PaymentDraft {
            account: keys::decode_address(tx["Account"].as_str().unwrap_or_default())
                .expect("account"),
            destination: keys::decode_address(tx["Destination"].as_str().unwrap_or_default())
                .expect("destination"),
            drops: tx["Amount"]
                .as_str()
                .unwrap_or_default()
                .parse()
                .expect("drops"),
            fee_drops: tx["Fee"].as_str().unwrap_or_default().parse().expect("fee"),
            sequence: tx["Sequence"].as_u64().unwrap_or(0) as u32,
            last_ledger_sequence: tx["LastLedgerSequence"].as_u64().unwrap_or(0) as u32,
            ..PaymentDraft::default()
        };
        let pair = KeyPair::from_seed(s["seed"].as_str().unwrap_or_default()).expect("seed");
        let mut payment = draft.to_transaction();
        pair.sign_transaction(&mut payment);
        assert_eq!(hex::encode_upper(payment.encode()), s["blob"]);
        assert!(keys::verify_transaction(&payment));
    }
}

#[tokio::test]
async fn ed25519_signature_with_a_flipped_bit_is_refused() {
    let case = case("valid ed25519");
    let mut bytes = hex::decode(case["blob"].as_str().unwrap_or_default()).expect("hex");
    let mut tx = codec::decode(&bytes).expect("decodes");
    let mut signature = tx
        .get(codec::field::TXN_SIGNATURE)
        .unwrap_or_default()
        .to_vec();
    signature[10] ^= 1;
    tx.set(codec::field::TXN_SIGNATURE, signature);
    bytes = tx.encode();
    let terms = requirements_of(&case);
    let recorded = Recorded::new(LedgerState::from_case(&case));
    let verdict = memory_mechanism(&recorded)
        .verify(&payment_of(&hex::encode_upper(&bytes), &terms), &terms)
        .await
        .expect("answers");
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_xrpl_payload_signature")
    );
}

#[tokio::test]
async fn an_extra_field_signed_by_the_payer_is_unsupported() {
    let case = case("valid secp256k1");
    let pair = KeyPair::from_seed("sp59tVwt6dzAsmAVBCFLdpL5SoBwA").expect("seed");
    let mut tx =
        codec::decode(&hex::decode(case["blob"].as_str().unwrap_or_default()).expect("hex"))
            .expect("decodes");
    // AccountTxnID: well formed, never needed by a payment.
    tx.set(codec::FieldId::new(5, 9), vec![7; 32]);
    pair.sign_transaction(&mut tx);
    let terms = requirements_of(&case);
    let recorded = Recorded::new(LedgerState::from_case(&case));
    let verdict = memory_mechanism(&recorded)
        .verify(&payment_of(&hex::encode_upper(tx.encode()), &terms), &terms)
        .await
        .expect("answers");
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_xrpl_payload_unsupported_field")
    );
    assert_eq!(verdict.payer, "rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq");
}

#[tokio::test]
async fn malformed_payloads_and_foreign_terms_are_invalid() {
    let case = case("valid secp256k1");
    let terms = requirements_of(&case);
    let recorded = Recorded::new(LedgerState::from_case(&case));
    let mechanism = memory_mechanism(&recorded);
    let blob = case["blob"].as_str().unwrap_or_default();
    for bad in ["", "zz", &blob[..blob.len() - 2], &format!("{blob}00")] {
        let verdict = mechanism
            .verify(&payment_of(bad, &terms), &terms)
            .await
            .expect("answers");
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some("invalid_exact_xrpl_facilitator_error"),
            "{bad}"
        );
    }
    let mut payment = payment_of(blob, &terms);
    payment.payload.insert("extra".into(), json!(1));
    let verdict = mechanism.verify(&payment, &terms).await.expect("answers");
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_xrpl_facilitator_error")
    );

    let mut other = terms.clone();
    other.network = "xrpl:0".into();
    let verdict = mechanism
        .verify(&payment_of(blob, &other), &other)
        .await
        .expect("answers");
    assert_eq!(verdict.invalid_reason.as_deref(), Some("invalid_network"));

    let mut sponsored = terms.clone();
    sponsored.extra = Some(Map::new());
    let verdict = mechanism
        .verify(&payment_of(blob, &sponsored), &sponsored)
        .await
        .expect("answers");
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_xrpl_fees_sponsored_unsupported")
    );
    assert_eq!(recorded.submits.load(Ordering::SeqCst), 0);
}

fn vector_blobs() -> Vec<Vec<u8>> {
    cases()
        .iter()
        .filter_map(|c| hex::decode(c["blob"].as_str().unwrap_or_default()).ok())
        .collect()
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics_and_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(tx) = codec::decode(&bytes) {
            prop_assert_eq!(tx.encode(), bytes);
        }
    }

    #[test]
    fn mutated_vector_blobs_never_panic_and_round_trip(
        which in 0usize..28,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let blobs = vector_blobs();
        let mut bytes = blobs[which % blobs.len()].clone();
        for (at, value, kind) in edits {
            let at = at % (bytes.len() + 1);
            match kind {
                0 if at < bytes.len() => bytes[at] = value,
                1 => bytes.insert(at, value),
                _ => bytes.truncate(at),
            }
        }
        if let Ok(tx) = codec::decode(&bytes) {
            prop_assert_eq!(tx.encode(), bytes.clone());
            let _ = keys::verify_transaction(&tx);
            let _ = keys::transaction_hash(&bytes);
        }
    }

    #[test]
    fn address_and_seed_text_never_panics(text in "\\PC{0,80}", ripple in "[rpshnaf39wBUDNEGHJKLM4PQRST7VWXYZ2bcdeCg65jkm8oFqi1tuvAxyz]{0,60}") {
        let _ = keys::decode_address(&text);
        let _ = keys::decode_address(&ripple);
        let _ = KeyPair::from_seed(&text);
        let _ = KeyPair::from_seed(&ripple);
    }

    #[test]
    fn verify_never_panics_on_arbitrary_blob_text(text in "[0-9A-Fa-f]{0,400}|\\PC{0,40}") {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let case = case("valid secp256k1");
        let terms = requirements_of(&case);
        let recorded = Recorded::new(LedgerState::from_case(&case));
        let verdict = runtime
            .block_on(memory_mechanism(&recorded).verify(&payment_of(&text, &terms), &terms))
            .expect("the in-memory ledger answers");
        prop_assert!(!verdict.is_valid);
    }

    #[test]
    fn message_verification_never_panics(key in proptest::collection::vec(any::<u8>(), 0..40), sig in proptest::collection::vec(any::<u8>(), 0..80)) {
        prop_assert!(!keys::verify_message(&key, b"message", &sig) || key.len() == 33);
    }
}

#[tokio::test]
async fn eight_concurrent_settles_of_one_blob_submit_once() {
    let (recorded, _server, mechanism, payment, terms) = settle_case(|_| {}).await;
    let mechanism = Arc::new(mechanism);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (mechanism, payment, terms) = (mechanism.clone(), payment.clone(), terms.clone());
        tasks.push(tokio::spawn(async move {
            mechanism.settle(&payment, &terms).await
        }));
    }
    let mut successes = 0;
    for task in tasks {
        let settled = task.await.expect("task").expect("answers");
        if settled.success {
            successes += 1;
        } else {
            assert_eq!(
                settled.error_reason.as_deref(),
                Some("duplicate_settlement")
            );
        }
    }
    assert_eq!(successes, 1);
    assert_eq!(recorded.submits.load(Ordering::SeqCst), 1);
}
