//! The gateway against scripted mechanisms: each test says what the chain answers and counts
//! what the gateway asked of it.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, json};
use tokio::sync::Notify;

use super::*;
use crate::fastlane::x402::{PaymentPayload, ResourceInfo};

const ORIGIN: &str = "https://shop.example";
const PAYER: &str = "rPayerAccount";

/// How the scripted chain answers a settle.
#[derive(Clone)]
enum SettleScript {
    Success,
    ChainError,
    OtherPayer,
    EmptyTransaction,
    /// Never answers: the gateway's deadline has to end it.
    Hang,
}

struct ScriptedChain {
    scheme: String,
    network: String,
    valid: bool,
    script: SettleScript,
    /// When set, settles wait for it before answering.
    gate: Option<Arc<Notify>>,
    verifies: AtomicUsize,
    settles: AtomicUsize,
}

impl ScriptedChain {
    fn new(network: &str, script: SettleScript) -> ScriptedChain {
        ScriptedChain {
            scheme: "exact".into(),
            network: network.into(),
            valid: true,
            script,
            gate: None,
            verifies: AtomicUsize::new(0),
            settles: AtomicUsize::new(0),
        }
    }

    fn gated(mut self, gate: Arc<Notify>) -> ScriptedChain {
        self.gate = Some(gate);
        self
    }

    fn invalid(mut self) -> ScriptedChain {
        self.valid = false;
        self
    }
}

impl Mechanism for ScriptedChain {
    fn scheme(&self) -> &str {
        &self.scheme
    }

    fn network(&self) -> &str {
        &self.network
    }

    fn verify<'a>(
        &'a self,
        _payment: &'a PaymentPayload,
        _terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<VerifyResponse, ChainError>> {
        self.verifies.fetch_add(1, Ordering::SeqCst);
        let verdict = if self.valid {
            VerifyResponse::valid(PAYER)
        } else {
            VerifyResponse::invalid("invalid_exact_xrpl_payload_signature", PAYER)
        };
        Box::pin(std::future::ready(Ok(verdict)))
    }

    fn settle<'a>(
        &'a self,
        _payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<SettleResponse, ChainError>> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if let Some(gate) = &self.gate {
                gate.notified().await;
            }
            let success = |transaction: &str, payer: &str| SettleResponse {
                success: true,
                error_reason: None,
                transaction: transaction.to_string(),
                network: terms.network.clone(),
                payer: Some(payer.to_string()),
            };
            match self.script {
                SettleScript::Success => Ok(success("TX1", PAYER)),
                SettleScript::OtherPayer => Ok(success("TX1", "rSomeoneElse")),
                SettleScript::EmptyTransaction => Ok(success("", PAYER)),
                SettleScript::ChainError => Err(ChainError::Unavailable {
                    network: terms.network.clone(),
                    message: "submit timed out".into(),
                }),
                SettleScript::Hang => std::future::pending().await,
            }
        })
    }

    fn reconcile<'a>(
        &'a self,
        _payment: &'a PaymentPayload,
        _terms: &'a PaymentRequirements,
        _hint: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<SettleResponse>, ChainError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

fn terms(network: &str) -> PaymentRequirements {
    PaymentRequirements {
        scheme: "exact".into(),
        network: network.into(),
        amount: "1000000".into(),
        asset: "XRP".into(),
        pay_to: "rHb9CJAWyB4rj91VRWn96DkukG4bwdtyTh".into(),
        max_timeout_seconds: 60,
        extra: Some(
            json!({"areFeesSponsored": false})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        ),
    }
}

fn settings(networks: &[&str]) -> FastlaneSettings {
    let offers: Vec<Value> = networks
        .iter()
        .map(
            |network| json!({"label": format!("pay on {network}"), "requirements": terms(network)}),
        )
        .collect();
    serde_json::from_value(json!({"enabled": true, "origin": ORIGIN, "offers": offers}))
        .expect("settings")
}

fn payload(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        other => panic!("not an object: {other:?}"),
    }
}

fn request_with(network: &str, inner: Map<String, Value>) -> FacilitatorRequest {
    FacilitatorRequest {
        x402_version: X402_VERSION,
        payment_payload: PaymentPayload {
            x402_version: X402_VERSION,
            resource: Some(ResourceInfo {
                url: format!("{ORIGIN}{PAYMENT_PATH}"),
                description: None,
                mime_type: None,
            }),
            accepted: terms(network),
            payload: inner,
            extensions: None,
        },
        payment_requirements: terms(network),
    }
}

fn request(network: &str) -> FacilitatorRequest {
    request_with(
        network,
        payload(r#"{"signedTxBlob":"12000022","memo":{"a":1,"b":2}}"#),
    )
}

fn gateway(dir: &Path, chains: &[Arc<ScriptedChain>]) -> Gateway {
    let networks: Vec<&str> = chains.iter().map(|chain| chain.network.as_str()).collect();
    let mechanisms = chains
        .iter()
        .map(|chain| chain.clone() as Arc<dyn Mechanism>)
        .collect();
    let journal = SettlementJournal::open(dir).expect("journal");
    Gateway::new(&settings(&networks), mechanisms, journal).expect("gateway")
}

fn rejection(result: Result<VerifyResponse, GatewayError>) -> String {
    match result {
        Err(GatewayError::Rejected(why)) => why,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

use std::path::Path;

#[tokio::test]
async fn rejects_changed_terms_foreign_resources_old_versions_and_empty_payloads() {
    let root = tempfile::tempdir().unwrap();
    let chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success));
    let gateway = gateway(root.path(), std::slice::from_ref(&chain));

    let mut changed_amount = request("xrpl:1");
    changed_amount.payment_requirements.amount = "1".into();
    changed_amount.payment_payload.accepted.amount = "1".into();
    assert!(rejection(gateway.verify(&changed_amount).await).contains("not a configured offer"));

    let mut differing = request("xrpl:1");
    differing.payment_payload.accepted.pay_to = "rSomewhereElse".into();
    assert!(rejection(gateway.verify(&differing).await).contains("differ"));

    let mut foreign = request("xrpl:1");
    if let Some(resource) = foreign.payment_payload.resource.as_mut() {
        resource.url = "https://evil.example/_concert/payment".into();
    }
    assert!(rejection(gateway.verify(&foreign).await).contains("another resource"));

    let mut old_request = request("xrpl:1");
    old_request.x402_version = 1;
    assert!(rejection(gateway.verify(&old_request).await).contains("version 1"));
    let mut old_payment = request("xrpl:1");
    old_payment.payment_payload.x402_version = 1;
    assert!(rejection(gateway.verify(&old_payment).await).contains("version 1"));

    let empty = request_with("xrpl:1", Map::new());
    assert!(rejection(gateway.verify(&empty).await).contains("empty"));

    let mut unknown_network = request("xrpl:0");
    unknown_network.payment_payload.accepted = terms("xrpl:0");
    assert!(rejection(gateway.verify(&unknown_network).await).contains("not a configured offer"));

    for bad in [changed_amount, differing, foreign, old_request, empty] {
        assert!(matches!(
            gateway.settle(bad).await,
            Err(GatewayError::Rejected(_))
        ));
    }
    assert_eq!(chain.verifies.load(Ordering::SeqCst), 0);
    assert_eq!(chain.settles.load(Ordering::SeqCst), 0);
    assert!(gateway.journal().is_empty());

    // A payment that names no resource is taken: the field is optional.
    let mut unnamed = request("xrpl:1");
    unnamed.payment_payload.resource = None;
    assert!(gateway.verify(&unnamed).await.unwrap().is_valid);
}

#[tokio::test]
async fn a_line_priced_quote_is_taken_only_with_the_key_that_signed_it() {
    use crate::fastlane::quote::QuoteKey;
    let root = tempfile::tempdir().unwrap();
    let chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success));
    let key = QuoteKey::from_admit_secret(b"the secret the service signs quotes with");
    let quoted_request = |key: &QuoteKey| {
        let mut quoted = request("xrpl:1");
        let terms = key.quote(&quoted.payment_requirements, 0.5, "5e55", 1);
        quoted.payment_requirements = terms.clone();
        quoted.payment_payload.accepted = terms;
        quoted
    };
    let without_key = gateway(root.path(), std::slice::from_ref(&chain));
    let refused = without_key.verify(&quoted_request(&key)).await;
    assert!(rejection(refused).contains("not a configured offer"));
    drop(without_key);

    let with_key = gateway(root.path(), std::slice::from_ref(&chain)).with_quote_key(key.clone());
    // Ended long ago (expires 1): still the gateway's to take, the expiry is the service's.
    assert!(
        with_key
            .verify(&quoted_request(&key))
            .await
            .unwrap()
            .is_valid
    );
    let stranger = QuoteKey::from_admit_secret(b"some other secret, not the service's");
    let refused = with_key.verify(&quoted_request(&stranger)).await;
    assert!(rejection(refused).contains("not a configured offer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_settles_reach_the_chain_once_and_the_result_survives_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let gate = Arc::new(Notify::new());
    let chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success).gated(gate.clone()));
    let first = gateway(root.path(), std::slice::from_ref(&chain));
    let settles: Vec<_> = (0..8).map(|_| first.settle(request("xrpl:1"))).collect();
    let all = tokio::spawn(futures_util::future::join_all(settles));
    // Let every settle queue on the network before the chain answers.
    while chain.settles.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.notify_one();
    let answers = all.await.unwrap();
    for answer in answers {
        let answer = answer.unwrap();
        assert!(answer.success, "{answer:?}");
        assert_eq!(answer.transaction, "TX1");
    }
    assert_eq!(chain.settles.load(Ordering::SeqCst), 1);
    assert_eq!(chain.verifies.load(Ordering::SeqCst), 1);

    let again = first.verify(&request("xrpl:1")).await.unwrap();
    assert!(!again.is_valid);
    assert_eq!(
        again.invalid_reason.as_deref(),
        Some(reasons::ALREADY_SETTLED)
    );
    assert_eq!(again.payer, PAYER);
    first.close().await;
    drop(first);

    let fresh_chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success));
    let restarted = gateway(root.path(), std::slice::from_ref(&fresh_chain));
    let stored = restarted.settle(request("xrpl:1")).await.unwrap();
    assert!(stored.success);
    assert_eq!(stored.transaction, "TX1");
    assert_eq!(fresh_chain.settles.load(Ordering::SeqCst), 0);
    assert_eq!(fresh_chain.verifies.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_chain_error_is_unknown_and_after_a_restart_asks_for_reconciliation() {
    let root = tempfile::tempdir().unwrap();
    let chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::ChainError));
    let first = gateway(root.path(), std::slice::from_ref(&chain));
    let answer = first.settle(request("xrpl:1")).await.unwrap();
    assert!(!answer.success);
    assert_eq!(
        answer.error_reason.as_deref(),
        Some(reasons::SETTLEMENT_UNKNOWN)
    );
    let id = settlement_id(
        "xrpl:1",
        "exact",
        &request("xrpl:1").payment_payload.payload,
    );
    assert_eq!(
        first.journal().get(&id).map(|record| record.state),
        Some(SettlementState::Unknown)
    );
    first.close().await;
    drop(first);

    let fresh_chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success));
    let restarted = gateway(root.path(), std::slice::from_ref(&fresh_chain));
    // The same payment with its keys in another order and other whitespace.
    let reordered = request_with(
        "xrpl:1",
        payload(r#"{ "memo": {"b":2, "a":1}, "signedTxBlob": "12000022" }"#),
    );
    let answer = restarted.settle(reordered.clone()).await.unwrap();
    assert!(!answer.success);
    assert_eq!(
        answer.error_reason.as_deref(),
        Some(reasons::RECONCILIATION_REQUIRED)
    );
    // Verifying a journaled, unresolved payment does not ask the chain.
    assert!(restarted.verify(&reordered).await.unwrap().is_valid);
    assert_eq!(fresh_chain.settles.load(Ordering::SeqCst), 0);
    assert_eq!(fresh_chain.verifies.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_answer_for_another_payer_or_without_a_transaction_is_a_mismatch() {
    for script in [SettleScript::OtherPayer, SettleScript::EmptyTransaction] {
        let root = tempfile::tempdir().unwrap();
        let chain = Arc::new(ScriptedChain::new("xrpl:1", script));
        let gateway = gateway(root.path(), &[chain]);
        let answer = gateway.settle(request("xrpl:1")).await.unwrap();
        assert!(!answer.success);
        assert_eq!(
            answer.error_reason.as_deref(),
            Some(reasons::RESPONSE_MISMATCH)
        );
        let id = settlement_id(
            "xrpl:1",
            "exact",
            &request("xrpl:1").payment_payload.payload,
        );
        assert_eq!(
            gateway.journal().get(&id).map(|record| record.state),
            Some(SettlementState::Unknown)
        );
    }
}

#[tokio::test]
async fn a_payment_that_fails_verification_again_is_not_journaled() {
    let root = tempfile::tempdir().unwrap();
    let chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success).invalid());
    let gateway = gateway(root.path(), std::slice::from_ref(&chain));
    let answer = gateway.settle(request("xrpl:1")).await.unwrap();
    assert_eq!(
        answer.error_reason.as_deref(),
        Some(reasons::VERIFICATION_FAILED)
    );
    assert_eq!(chain.settles.load(Ordering::SeqCst), 0);
    assert!(gateway.journal().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_settle_that_never_ends_is_cut_at_the_deadline_and_recorded_unknown() {
    let root = tempfile::tempdir().unwrap();
    let chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Hang));
    let gateway = gateway(root.path(), &[chain]);
    let answer = gateway.settle(request("xrpl:1")).await.unwrap();
    assert_eq!(
        answer.error_reason.as_deref(),
        Some(reasons::SETTLEMENT_UNKNOWN)
    );
    let id = settlement_id(
        "xrpl:1",
        "exact",
        &request("xrpl:1").payment_payload.payload,
    );
    assert_eq!(
        gateway.journal().get(&id).map(|record| record.state),
        Some(SettlementState::Unknown)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn networks_settle_independently_and_close_waits_for_settles_in_flight() {
    let root = tempfile::tempdir().unwrap();
    let gate = Arc::new(Notify::new());
    let slow = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success).gated(gate.clone()));
    let quick = Arc::new(ScriptedChain::new("xrpl:0", SettleScript::Success));
    let gateway = gateway(root.path(), &[slow.clone(), quick.clone()]);

    let stuck = tokio::spawn(gateway.settle(request("xrpl:1")));
    while slow.settles.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let other = tokio::time::timeout(Duration::from_secs(5), gateway.settle(request("xrpl:0")))
        .await
        .expect("another network's settle does not wait")
        .unwrap();
    assert!(other.success);

    let closing = tokio::spawn({
        let gateway = gateway.clone();
        async move { gateway.close().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !closing.is_finished(),
        "close waits for the settle in flight"
    );
    assert!(matches!(
        gateway.settle(request("xrpl:0")).await,
        Err(GatewayError::Closed)
    ));
    gate.notify_one();
    tokio::time::timeout(Duration::from_secs(5), closing)
        .await
        .expect("close ends once the settle is journaled")
        .unwrap();
    assert!(stuck.await.unwrap().unwrap().success);
    let id = settlement_id(
        "xrpl:1",
        "exact",
        &request("xrpl:1").payment_payload.payload,
    );
    assert_eq!(
        gateway.journal().get(&id).map(|record| record.state),
        Some(SettlementState::Settled)
    );
}

#[tokio::test]
async fn a_settle_whose_caller_goes_away_still_completes() {
    let root = tempfile::tempdir().unwrap();
    let chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success));
    let gateway = gateway(root.path(), std::slice::from_ref(&chain));
    drop(gateway.settle(request("xrpl:1")));
    gateway.close().await;
    assert_eq!(chain.settles.load(Ordering::SeqCst), 1);
    assert_eq!(gateway.journal().len(), 1);
}

#[tokio::test]
async fn supported_lists_one_kind_per_mechanism_and_every_offer_needs_one() {
    let root = tempfile::tempdir().unwrap();
    let chains = [
        Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success)),
        Arc::new(ScriptedChain::new("xrpl:0", SettleScript::Success)),
    ];
    let gateway = gateway(root.path(), &chains);
    let kinds = gateway.supported();
    assert_eq!(kinds.len(), 2);
    assert!(
        kinds
            .iter()
            .all(|kind| kind.x402_version == 2 && kind.scheme == "exact")
    );
    drop(gateway);

    let journal = SettlementJournal::open(root.path()).unwrap();
    let only_one: Vec<Arc<dyn Mechanism>> = vec![Arc::new(ScriptedChain::new(
        "xrpl:1",
        SettleScript::Success,
    ))];
    let error = Gateway::new(&settings(&["xrpl:1", "xrpl:0"]), only_one, journal)
        .err()
        .expect("an offer without a mechanism is refused");
    assert!(
        error.contains("offers[1]") && error.contains("xrpl:0"),
        "{error}"
    );
}

struct EchoPreparer;

impl SolanaPreparer for EchoPreparer {
    fn prepare<'a>(&'a self, request: &'a Value) -> BoxFuture<'a, Result<Value, GatewayError>> {
        Box::pin(std::future::ready(Ok(json!({"prepared": request}))))
    }
}

#[tokio::test]
async fn solana_prepare_goes_to_the_preparer_or_is_refused_without_one() {
    let root = tempfile::tempdir().unwrap();
    let chain = Arc::new(ScriptedChain::new("xrpl:1", SettleScript::Success));
    let without = gateway(root.path(), std::slice::from_ref(&chain));
    assert!(matches!(
        without.solana_prepare(&json!({})).await,
        Err(GatewayError::Rejected(_))
    ));
    drop(without);
    let with = gateway(root.path(), &[chain]).with_solana_preparer(Arc::new(EchoPreparer));
    assert_eq!(
        with.solana_prepare(&json!({"from": "x"})).await.unwrap(),
        json!({"prepared": {"from": "x"}})
    );
}

#[test]
fn mechanisms_are_built_once_per_kind_from_their_network_entry() {
    let fastlane = settings(&["xrpl:1", "xrpl:1", "xrpl:0"]);
    let networks: NetworksSettings = serde_json::from_value(json!({
        "xrpl:1": {"rpc": "https://one.example"},
        "xrpl:0": {"rpc": "https://zero.example"},
    }))
    .unwrap();
    let mut asked = Vec::new();
    let built = build_mechanisms(&fastlane, &networks, |request| {
        asked.push((
            request.network.to_string(),
            request.network_settings.rpc.clone(),
            request.offers.len(),
        ));
        Ok(
            Arc::new(ScriptedChain::new(request.network, SettleScript::Success))
                as Arc<dyn Mechanism>,
        )
    })
    .unwrap();
    assert_eq!(built.len(), 2);
    assert_eq!(
        asked,
        vec![
            ("xrpl:1".to_string(), "https://one.example".to_string(), 2),
            ("xrpl:0".to_string(), "https://zero.example".to_string(), 1),
        ]
    );

    let missing: NetworksSettings =
        serde_json::from_value(json!({"xrpl:1": {"rpc": "https://one.example"}})).unwrap();
    let error = build_mechanisms(&fastlane, &missing, |request| {
        Ok(
            Arc::new(ScriptedChain::new(request.network, SettleScript::Success))
                as Arc<dyn Mechanism>,
        )
    })
    .err()
    .expect("an offer's network must be in networks.json");
    assert!(error.contains("xrpl:0"), "{error}");

    let error = build_mechanisms(&fastlane, &networks, no_chains)
        .err()
        .expect("no chains built in");
    assert!(error.contains("not built into"), "{error}");
}
