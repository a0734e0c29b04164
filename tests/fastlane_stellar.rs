//! The Stellar `exact` mechanism against a fake Soroban RPC and Horizon: one real axum server
//! on loopback that replays a vector's recorded simulation, keeps the sponsor's sequence
//! number, records every submitted envelope and answers status queries from a script.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use concert::fastlane::chains::BuiltIn;
use concert::fastlane::chains::stellar::payment::{decode_base64_exact, encode_base64, network_id};
use concert::fastlane::chains::stellar::{SCHEME, StellarExact, decode_envelope};
use concert::fastlane::gateway::MechanismRequest;
use concert::fastlane::mechanism::{ChainError, Mechanism};
use concert::fastlane::settings::NetworkSettings;
use concert::fastlane::x402::{PaymentPayload, PaymentRequirements};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use stellar_xdr::{
    AccountEntry, AccountEntryExt, LedgerEntryData, LedgerKey, SequenceNumber, String32,
    Thresholds, TransactionEnvelope,
};
use tokio::net::TcpListener;

const VECTORS: &str = include_str!("vectors/stellar.json");
const TESTNET: &str = "stellar:testnet";
const PASSPHRASE: &str = "Test SDF Network ; September 2015";

fn vectors() -> Value {
    serde_json::from_str(VECTORS).expect("the vector file is JSON")
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().expect("a string field")
}

fn case<'a>(vectors: &'a Value, name: &str) -> &'a Value {
    vectors["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|case| case["name"] == name))
        .expect("the named case")
}

fn terms_of(value: &Value) -> PaymentRequirements {
    serde_json::from_value(value.clone()).expect("x402 requirements")
}

fn payment(envelope: &str, terms: &PaymentRequirements) -> PaymentPayload {
    let mut payload = Map::new();
    payload.insert("transaction".into(), json!(envelope));
    PaymentPayload {
        x402_version: 2,
        resource: None,
        accepted: terms.clone(),
        payload,
        extensions: None,
    }
}

fn hash_of(envelope: &str) -> String {
    let envelope = decode_envelope(envelope).expect("a strict envelope");
    hex::encode(envelope.hash(network_id(PASSPHRASE)).expect("hash"))
}

/// The recorded chain state one test replays.
struct Ledger {
    simulation: Value,
    latest: u32,
    sponsor_sequence: i64,
    /// `sendTransaction`'s status (`PENDING` when accepted).
    send_status: String,
    /// Whether `sendTransaction` names another hash than the envelope's.
    send_wrong_hash: bool,
    /// `getTransaction` answers, one per query; the last one repeats.
    statuses: VecDeque<String>,
    /// The envelope `getTransaction` reports once the status is SUCCESS or FAILED.
    ledger_envelope: Option<String>,
    /// Every envelope submitted.
    submitted: Vec<String>,
    /// Every method called, in order.
    calls: Vec<String>,
    /// Horizon's ledger close times, newest first; `None` answers 404.
    closed_at: Option<Vec<String>>,
    /// Answer every RPC call with HTTP 503.
    down: bool,
}

impl Ledger {
    fn replaying(case: &Value) -> Ledger {
        let vectors = vectors();
        Ledger {
            simulation: case["simulation"].clone(),
            latest: u32::try_from(vectors["current"].as_u64().expect("current")).expect("u32"),
            sponsor_sequence: text(&vectors, "sponsorSequence").parse().expect("sequence"),
            send_status: "PENDING".to_owned(),
            send_wrong_hash: false,
            statuses: VecDeque::from(["SUCCESS".to_owned()]),
            ledger_envelope: None,
            submitted: Vec::new(),
            calls: Vec::new(),
            closed_at: None,
            down: false,
        }
    }

    fn answer(&mut self, method: &str, params: &Value) -> Value {
        self.calls.push(method.to_owned());
        match method {
            "simulateTransaction" => self.simulation.clone(),
            "getLatestLedger" => {
                json!({"id": "ab", "protocolVersion": 23, "sequence": self.latest})
            }
            "getLedgerEntries" => {
                let key = params["keys"][0].as_str().unwrap_or_default();
                let Some(LedgerKey::Account(account)) = decode_base64_exact::<LedgerKey>(key, 1024)
                else {
                    return json!({"entries": [], "latestLedger": self.latest});
                };
                let entry = LedgerEntryData::Account(AccountEntry {
                    account_id: account.account_id,
                    balance: 100_000_000,
                    seq_num: SequenceNumber(self.sponsor_sequence),
                    num_sub_entries: 0,
                    inflation_dest: None,
                    flags: 0,
                    home_domain: String32::default(),
                    thresholds: Thresholds([1, 0, 0, 0]),
                    signers: Vec::new().try_into().expect("no signers"),
                    ext: AccountEntryExt::V0,
                });
                json!({"entries": [{"key": params["keys"][0], "xdr": encode_base64(&entry)}], "latestLedger": self.latest})
            }
            "sendTransaction" => {
                let envelope = params["transaction"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let hash = if self.send_wrong_hash {
                    "ab".repeat(32)
                } else {
                    hash_of(&envelope)
                };
                self.submitted.push(envelope.clone());
                self.ledger_envelope.get_or_insert(envelope);
                json!({"status": self.send_status, "hash": hash, "latestLedger": self.latest})
            }
            "getTransaction" => {
                let status = if self.statuses.len() > 1 {
                    self.statuses.pop_front().unwrap_or_default()
                } else {
                    self.statuses.front().cloned().unwrap_or_default()
                };
                let mut answer = json!({"status": status, "latestLedger": self.latest});
                if status != "NOT_FOUND" {
                    answer["envelopeXdr"] = json!(self.ledger_envelope);
                }
                answer
            }
            _ => Value::Null,
        }
    }

    fn count(&self, method: &str) -> usize {
        self.calls.iter().filter(|call| *call == method).count()
    }
}

struct FakeStellar {
    url: String,
    ledger: Arc<Mutex<Ledger>>,
}

impl FakeStellar {
    async fn start(ledger: Ledger) -> FakeStellar {
        let ledger = Arc::new(Mutex::new(ledger));
        let router = Router::new()
            .route("/", post(rpc))
            .route("/ledgers", get(horizon_ledgers))
            .with_state(Arc::clone(&ledger));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        FakeStellar {
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

    fn mechanism_with(&self, settings: &NetworkSettings) -> StellarExact {
        StellarExact::new(TESTNET, settings, text(&vectors(), "sponsorSecret"))
            .expect("a mechanism")
            .with_poll_interval(Duration::from_millis(5))
    }

    fn mechanism(&self) -> StellarExact {
        self.mechanism_with(&self.settings())
    }

    fn count(&self, method: &str) -> usize {
        self.ledger.lock().count(method)
    }

    fn submitted(&self) -> Vec<String> {
        self.ledger.lock().submitted.clone()
    }
}

async fn rpc(State(ledger): State<Arc<Mutex<Ledger>>>, Json(request): Json<Value>) -> Response {
    let method = request["method"].as_str().unwrap_or_default().to_owned();
    let mut ledger = ledger.lock();
    if ledger.down {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let result = ledger.answer(&method, &request["params"]);
    Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result})).into_response()
}

async fn horizon_ledgers(State(ledger): State<Arc<Mutex<Ledger>>>) -> Response {
    let Some(times) = ledger.lock().closed_at.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let records: Vec<Value> = times
        .iter()
        .map(|time| json!({"closed_at": time}))
        .collect();
    Json(json!({"_embedded": {"records": records}})).into_response()
}

/// The reference submission's upper time bound less the settle terms' time limit: the clock
/// under which the rebuilt envelope is the reference's byte for byte.
fn reference_clock() -> u64 {
    let vectors = vectors();
    let submitted = decode_envelope(text(&vectors["settle"], "submitted")).expect("envelope");
    let TransactionEnvelope::Tx(envelope) = submitted else {
        panic!("a v1 envelope");
    };
    let stellar_xdr::Preconditions::Time(bounds) = envelope.tx.cond else {
        panic!("time bounds");
    };
    let timeout = vectors["settle"]["requirements"]["maxTimeoutSeconds"]
        .as_u64()
        .expect("timeout");
    bounds.max_time.0 - timeout
}

#[tokio::test]
async fn every_vector_case_gets_concerts_verdict_and_the_reference_payer() {
    let vectors = vectors();
    let cases = vectors["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 18);
    let mut valid = 0;
    for case in cases {
        let fake = FakeStellar::start(Ledger::replaying(case)).await;
        let terms = terms_of(&case["requirements"]);
        let verdict = fake
            .mechanism()
            .verify(&payment(text(case, "transaction"), &terms), &terms)
            .await
            .expect("a verdict");
        let name = text(case, "name");
        let concert = &case["concert"];
        assert_eq!(verdict.is_valid, concert["valid"] == true, "{name}");
        let reason = text(concert, "reason");
        assert_eq!(
            verdict.invalid_reason.as_deref().unwrap_or_default(),
            reason,
            "{name}"
        );
        assert_eq!(verdict.payer, text(&case["reference"], "payer"), "{name}");
        valid += usize::from(verdict.is_valid);
        // Nothing is ever submitted by a verification.
        assert_eq!(fake.count("sendTransaction"), 0, "{name}");
    }
    assert_eq!(valid, 1);
}

#[tokio::test]
async fn settle_submits_the_reference_envelope_byte_for_byte_and_waits_for_success() {
    let vectors = vectors();
    let mut ledger = Ledger::replaying(case(&vectors, "valid"));
    // The reference settles with a 2 s limit, so two status queries: success on the second.
    ledger.statuses = VecDeque::from(["NOT_FOUND".into(), "SUCCESS".into()]);
    let fake = FakeStellar::start(ledger).await;
    let settle = &vectors["settle"];
    let terms = terms_of(&settle["requirements"]);
    let mechanism = fake.mechanism().with_clock(reference_clock);
    let result = mechanism
        .settle(&payment(text(settle, "transaction"), &terms), &terms)
        .await
        .expect("settled");
    let submitted = fake.submitted();
    assert_eq!(submitted, vec![text(settle, "submitted").to_owned()]);
    assert!(result.success, "{result:?}");
    assert_eq!(result.transaction, hash_of(text(settle, "submitted")));
    assert_eq!(result.network, TESTNET);
    assert_eq!(
        result.payer.as_deref(),
        Some(text(&case(&vectors, "valid")["reference"], "payer"))
    );
    assert_eq!(fake.count("getTransaction"), 2);
}

#[tokio::test]
async fn settle_with_the_real_clock_differs_from_the_reference_only_in_time_bounds() {
    let vectors = vectors();
    let fake = FakeStellar::start(Ledger::replaying(case(&vectors, "valid"))).await;
    let settle = &vectors["settle"];
    let terms = terms_of(&settle["requirements"]);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let result = fake
        .mechanism()
        .settle(&payment(text(settle, "transaction"), &terms), &terms)
        .await
        .expect("settled");
    assert!(result.success);
    let [sent] = fake.submitted().try_into().expect("one submission");
    let TransactionEnvelope::Tx(mut sent) = decode_envelope(&sent).expect("envelope") else {
        panic!("v1");
    };
    let TransactionEnvelope::Tx(mut reference) =
        decode_envelope(text(settle, "submitted")).expect("envelope")
    else {
        panic!("v1");
    };
    let stellar_xdr::Preconditions::Time(bounds) = &sent.tx.cond else {
        panic!("time bounds");
    };
    assert_eq!(bounds.min_time.0, 0);
    assert!(bounds.max_time.0 >= before + 2 && bounds.max_time.0 <= before + 2 + 60);
    // The sponsor signed this transaction on this network.
    let hash = sent.tx.hash(network_id(PASSPHRASE)).expect("hash");
    let sponsor = stellar_strkey::ed25519::PrivateKey::from_string(text(&vectors, "sponsorSecret"))
        .expect("seed");
    let key = ed25519_dalek::SigningKey::from_bytes(&sponsor.0).verifying_key();
    let [signature] = sent.signatures.as_slice() else {
        panic!("one signature");
    };
    let signature =
        ed25519_dalek::Signature::from_slice(signature.signature.0.as_slice()).expect("64 bytes");
    assert!(key.verify_strict(&hash, &signature).is_ok());
    sent.tx.cond = stellar_xdr::Preconditions::None;
    reference.tx.cond = stellar_xdr::Preconditions::None;
    assert_eq!(
        encode_base64(&sent.tx),
        encode_base64(&reference.tx),
        "all but the time bounds match"
    );
}

#[tokio::test]
async fn a_settlement_never_final_keeps_its_hash_and_is_sent_once() {
    let vectors = vectors();
    let mut ledger = Ledger::replaying(case(&vectors, "valid"));
    ledger.statuses = VecDeque::from(["NOT_FOUND".to_owned()]);
    let fake = FakeStellar::start(ledger).await;
    let settle = &vectors["settle"];
    let terms = terms_of(&settle["requirements"]);
    let result = fake
        .mechanism()
        .settle(&payment(text(settle, "transaction"), &terms), &terms)
        .await
        .expect("an answer");
    assert!(!result.success);
    assert_eq!(
        result.error_reason.as_deref(),
        Some("settle_exact_stellar_transaction_failed")
    );
    let [sent] = fake.submitted().try_into().expect("one submission");
    assert_eq!(result.transaction, hash_of(&sent));
    // maxTimeoutSeconds (2) queries, one second apart in production.
    assert_eq!(fake.count("getTransaction"), 2);
    assert_eq!(fake.count("sendTransaction"), 1);
}

#[tokio::test]
async fn a_settlement_failed_on_the_ledger_or_refused_by_the_endpoint_is_unsuccessful() {
    let vectors = vectors();
    let settle = &vectors["settle"];
    let terms = terms_of(&settle["requirements"]);

    let mut failed = Ledger::replaying(case(&vectors, "valid"));
    failed.statuses = VecDeque::from(["NOT_FOUND".to_owned(), "FAILED".to_owned()]);
    let fake = FakeStellar::start(failed).await;
    let result = fake
        .mechanism()
        .settle(&payment(text(settle, "transaction"), &terms), &terms)
        .await
        .expect("an answer");
    assert!(!result.success);
    assert_eq!(
        result.error_reason.as_deref(),
        Some("settle_exact_stellar_transaction_failed")
    );
    assert!(!result.transaction.is_empty());

    for (status, wrong_hash) in [
        ("ERROR", false),
        ("TRY_AGAIN_LATER", false),
        ("PENDING", true),
    ] {
        let mut refused = Ledger::replaying(case(&vectors, "valid"));
        refused.send_status = status.to_owned();
        refused.send_wrong_hash = wrong_hash;
        let fake = FakeStellar::start(refused).await;
        let result = fake
            .mechanism()
            .settle(&payment(text(settle, "transaction"), &terms), &terms)
            .await
            .expect("an answer");
        assert!(!result.success, "{status}");
        assert_eq!(
            result.error_reason.as_deref(),
            Some("settle_exact_stellar_transaction_submission_failed")
        );
        // The hash of what was sent is kept for reconciliation; nothing is polled or resent.
        let [sent] = fake.submitted().try_into().expect("one submission");
        assert_eq!(result.transaction, hash_of(&sent));
        assert_eq!(fake.count("getTransaction"), 0);
    }
}

#[tokio::test]
async fn settle_of_an_invalid_payment_submits_nothing() {
    let vectors = vectors();
    let case = case(&vectors, "wrong amount");
    let fake = FakeStellar::start(Ledger::replaying(case)).await;
    let terms = terms_of(&case["requirements"]);
    let result = fake
        .mechanism()
        .settle(&payment(text(case, "transaction"), &terms), &terms)
        .await
        .expect("an answer");
    assert!(!result.success);
    assert_eq!(
        result.error_reason.as_deref(),
        Some("invalid_exact_stellar_payload_wrong_amount")
    );
    assert!(fake.submitted().is_empty());
}

#[tokio::test]
async fn a_simulation_that_needs_a_restore_is_refused() {
    let vectors = vectors();
    let case = case(&vectors, "valid");
    let mut ledger = Ledger::replaying(case);
    ledger.simulation["restorePreamble"] = json!({
        "transactionData": text(&case["simulation"], "transactionData"),
        "minResourceFee": "100",
    });
    let fake = FakeStellar::start(ledger).await;
    let terms = terms_of(&case["requirements"]);
    let verdict = fake
        .mechanism()
        .verify(&payment(text(case, "transaction"), &terms), &terms)
        .await
        .expect("a verdict");
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_stellar_payload_simulation_failed")
    );
}

#[tokio::test]
async fn the_fee_cap_comes_from_networks_json() {
    let vectors = vectors();
    let case = case(&vectors, "valid");
    let fake = FakeStellar::start(Ledger::replaying(case)).await;
    let terms = terms_of(&case["requirements"]);
    let payment = payment(text(case, "transaction"), &terms);
    // The simulation asks 20000 stroops; with the inclusion fee that is 20100.
    for (cap, valid) in [(20_099, false), (20_100, true)] {
        let settings = NetworkSettings {
            max_fee: cap,
            ..fake.settings()
        };
        let verdict = fake
            .mechanism_with(&settings)
            .verify(&payment, &terms)
            .await
            .expect("a verdict");
        assert_eq!(verdict.is_valid, valid, "cap {cap}");
        if !valid {
            assert_eq!(
                verdict.invalid_reason.as_deref(),
                Some("invalid_exact_stellar_payload_fee_exceeds_maximum")
            );
        }
    }
}

#[tokio::test]
async fn horizons_ledger_pace_sets_how_far_an_authorisation_may_expire() {
    let vectors = vectors();
    let case = case(&vectors, "valid");
    let terms = terms_of(&case["requirements"]);
    let payment = payment(text(case, "transaction"), &terms);
    // Slow ledgers (60 s apart) leave a 60 s payment one ledger plus tolerance: the vector's
    // authorisation, made for 5 s ledgers, then expires too late.
    let mut slow = Ledger::replaying(case);
    slow.closed_at = Some(vec![
        "2026-12-07T12:02:00Z".into(),
        "2026-12-07T12:01:00Z".into(),
        "2026-12-07T12:00:00Z".into(),
    ]);
    let fake = FakeStellar::start(slow).await;
    let settings = NetworkSettings {
        horizon: fake.url.clone(),
        ..fake.settings()
    };
    let verdict = fake
        .mechanism_with(&settings)
        .verify(&payment, &terms)
        .await
        .expect("a verdict");
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_stellar_signature_expiration_too_far")
    );
    // Horizon answering nothing usable falls back to 5 s ledgers.
    fake.ledger.lock().closed_at = None;
    let verdict = fake
        .mechanism_with(&settings)
        .verify(&payment, &terms)
        .await
        .expect("a verdict");
    assert!(verdict.is_valid, "{verdict:?}");
}

#[tokio::test]
async fn an_unreachable_endpoint_gives_no_verdict_rather_than_a_refusal() {
    let vectors = vectors();
    let case = case(&vectors, "valid");
    let mut ledger = Ledger::replaying(case);
    ledger.down = true;
    let fake = FakeStellar::start(ledger).await;
    let terms = terms_of(&case["requirements"]);
    let outcome = fake
        .mechanism()
        .verify(&payment(text(case, "transaction"), &terms), &terms)
        .await;
    assert!(
        matches!(outcome, Err(ChainError::Unavailable { .. })),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn reconcile_finds_the_settlement_by_its_hash_only_when_it_carries_this_payment() {
    let vectors = vectors();
    let settle = &vectors["settle"];
    let terms = terms_of(&settle["requirements"]);
    let paid = payment(text(settle, "transaction"), &terms);
    let submitted = text(settle, "submitted");
    let hash = hash_of(submitted);

    let mut ledger = Ledger::replaying(case(&vectors, "valid"));
    ledger.ledger_envelope = Some(submitted.to_owned());
    let fake = FakeStellar::start(ledger).await;
    let mechanism = fake.mechanism();
    let found = mechanism
        .reconcile(&paid, &terms, Some(hash.to_uppercase().as_str()))
        .await
        .expect("reconciled")
        .expect("final");
    assert!(found.success);
    assert_eq!(found.transaction, hash);
    assert_eq!(found.network, TESTNET);
    assert_eq!(
        found.payer.as_deref(),
        Some(text(&case(&vectors, "valid")["reference"], "payer"))
    );
    // Reconciling never signs or sends.
    assert_eq!(fake.count("sendTransaction"), 0);

    // Without a hash, or with one that is not hex, there is nothing to look up.
    assert!(mechanism.reconcile(&paid, &terms, None).await.is_err());
    assert!(
        mechanism
            .reconcile(&paid, &terms, Some("xyz"))
            .await
            .is_err()
    );

    // Not on the ledger yet: not final.
    fake.ledger.lock().statuses = VecDeque::from(["NOT_FOUND".to_owned()]);
    let pending = mechanism
        .reconcile(&paid, &terms, Some(hash.as_str()))
        .await;
    assert!(matches!(pending, Ok(None)), "{pending:?}");

    // A transaction whose hash is not the one asked for.
    fake.ledger.lock().statuses = VecDeque::from(["SUCCESS".to_owned()]);
    let other = "ab".repeat(32);
    assert!(
        mechanism
            .reconcile(&paid, &terms, Some(other.as_str()))
            .await
            .is_err()
    );

    // The right hash, but the journaled payment is another one (its authorisation differs).
    let other_case = case(&vectors, "valid");
    let other_terms = terms_of(&other_case["requirements"]);
    let other_payment = payment(text(other_case, "transaction"), &other_terms);
    assert!(
        mechanism
            .reconcile(&other_payment, &other_terms, Some(hash.as_str()))
            .await
            .is_err()
    );

    // A failed settlement is final and not a payment.
    fake.ledger.lock().statuses = VecDeque::from(["FAILED".to_owned()]);
    assert!(
        mechanism
            .reconcile(&paid, &terms, Some(hash.as_str()))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn the_built_in_chains_build_stellar_exact_with_the_named_secret() {
    let vectors = vectors();
    let fake = FakeStellar::start(Ledger::replaying(case(&vectors, "valid"))).await;
    let settings = NetworkSettings {
        secret_env: "SHOP_XLM_SPONSOR".into(),
        ..fake.settings()
    };
    let request = MechanismRequest {
        scheme: SCHEME,
        network: TESTNET,
        network_settings: &settings,
        offers: &[],
        test_mode: true,
    };
    let secrets = HashMap::from([(
        "SHOP_XLM_SPONSOR".to_owned(),
        text(&vectors, "sponsorSecret").to_owned(),
    )]);
    let mechanism = BuiltIn::with_secrets(Arc::new(secrets))
        .build(&request)
        .expect("built");
    assert_eq!(mechanism.scheme(), "exact");
    assert_eq!(mechanism.network(), TESTNET);
    let case = case(&vectors, "valid");
    let terms = terms_of(&case["requirements"]);
    let verdict = mechanism
        .verify(&payment(text(case, "transaction"), &terms), &terms)
        .await
        .expect("a verdict");
    assert!(verdict.is_valid);

    let missing = BuiltIn::with_secrets(Arc::new(HashMap::new()))
        .build(&request)
        .err()
        .expect("refused");
    assert!(missing.contains("$SHOP_XLM_SPONSOR"), "{missing}");
    let wrong = BuiltIn::with_secrets(Arc::new(HashMap::from([(
        "SHOP_XLM_SPONSOR".to_owned(),
        "GDWUSKGGFDI4FRXK5EBTRECZSVQSSWJHHJOGH6JWG3AUMFFMQ435DIAG".to_owned(),
    )])))
    .build(&request)
    .err()
    .expect("refused");
    assert!(
        !wrong.contains("GDWUSK"),
        "the value is never echoed: {wrong}"
    );
    let other_scheme = MechanismRequest {
        scheme: "concert-native-sol",
        ..request
    };
    assert!(BuiltIn::new().build(&other_scheme).is_err());
}

#[tokio::test]
async fn payloads_that_are_not_one_canonical_envelope_are_malformed() {
    let vectors = vectors();
    let case = case(&vectors, "valid");
    let fake = FakeStellar::start(Ledger::replaying(case)).await;
    let terms = terms_of(&case["requirements"]);
    let mechanism = fake.mechanism();
    let envelope = text(case, "transaction");
    let mut extra = payment(envelope, &terms);
    extra.payload.insert("memo".into(), json!("x"));
    let with_newline = payment(&format!("{envelope}\n"), &terms);
    let not_text = {
        let mut payment = payment(envelope, &terms);
        payment.payload.insert("transaction".into(), json!(5));
        payment
    };
    let fee_bump_like = payment("AAAABQ==", &terms);
    for bad in [extra, with_newline, not_text, fee_bump_like] {
        let verdict = mechanism.verify(&bad, &terms).await.expect("a verdict");
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some("invalid_exact_stellar_payload_malformed")
        );
    }
    assert_eq!(fake.count("simulateTransaction"), 0);
}
