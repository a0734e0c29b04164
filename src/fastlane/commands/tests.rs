use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::*;
use crate::fastlane::canonical::settlement_id;
use crate::fastlane::mechanism::{BoxFuture, ChainError};
use crate::fastlane::settings::{parse_fastlane, validate_fastlane};
use crate::fastlane::x402::{
    PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse, X402_VERSION,
};

const PAYER: &str = "rPayerAccount";

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A chain that answers `reconcile` with a fixed result and remembers the hint it was given.
struct FinalState {
    answer: Option<SettleResponse>,
    hints: Mutex<Vec<Option<String>>>,
}

impl Mechanism for FinalState {
    fn scheme(&self) -> &str {
        "exact"
    }

    fn network(&self) -> &str {
        "xrpl:1"
    }

    fn verify<'a>(
        &'a self,
        _payment: &'a PaymentPayload,
        _terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<VerifyResponse, ChainError>> {
        panic!("reconcile never verifies")
    }

    fn settle<'a>(
        &'a self,
        _payment: &'a PaymentPayload,
        _terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<SettleResponse, ChainError>> {
        panic!("reconcile never submits")
    }

    fn reconcile<'a>(
        &'a self,
        _payment: &'a PaymentPayload,
        _terms: &'a PaymentRequirements,
        hint: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<SettleResponse>, ChainError>> {
        if let Ok(mut hints) = self.hints.lock() {
            hints.push(hint.map(str::to_string));
        }
        Box::pin(std::future::ready(Ok(self.answer.clone())))
    }
}

fn settled_answer() -> SettleResponse {
    SettleResponse {
        success: true,
        error_reason: None,
        transaction: "ABCDEF".into(),
        network: "xrpl:1".into(),
        payer: Some(PAYER.into()),
    }
}

fn terms() -> PaymentRequirements {
    PaymentRequirements {
        scheme: "exact".into(),
        network: "xrpl:1".into(),
        amount: "1000000".into(),
        asset: "XRP".into(),
        pay_to: "r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6".into(),
        max_timeout_seconds: 60,
        extra: None,
    }
}

/// A data dir whose journal holds one payment of unknown outcome, and a networks.json.
fn unresolved_payment(dir: &Path) -> String {
    let Value::Object(payload) = json!({"signedTxBlob": "1200"}) else {
        unreachable!()
    };
    let id = settlement_id("xrpl:1", "exact", &payload);
    let journal = SettlementJournal::open(dir).unwrap();
    journal
        .record(SettlementRecord {
            id: id.clone(),
            terms: terms(),
            payload: PaymentPayload {
                x402_version: X402_VERSION,
                resource: None,
                accepted: terms(),
                payload,
                extensions: None,
            },
            payer: PAYER.into(),
            state: SettlementState::Unknown,
            response: None,
            created: String::new(),
            updated: String::new(),
        })
        .unwrap();
    std::fs::write(
        dir.join(NETWORKS_FILE),
        r#"{"xrpl:1":{"rpc":"http://127.0.0.1:5005"}}"#,
    )
    .unwrap();
    id
}

fn args_for(dir: &Path, fingerprint: &str, hint: Option<&str>) -> ReconcileArgs {
    ReconcileArgs {
        data_dir: dir.to_path_buf(),
        networks_config: dir.join(NETWORKS_FILE),
        fingerprint: fingerprint.to_string(),
        hint: hint.map(str::to_string),
    }
}

fn chain(answer: Option<SettleResponse>) -> Arc<FinalState> {
    Arc::new(FinalState {
        answer,
        hints: Mutex::new(Vec::new()),
    })
}

#[tokio::test]
async fn a_final_payment_is_recorded_settled_with_the_hint_passed_on() {
    let root = tempfile::tempdir().unwrap();
    let id = unresolved_payment(root.path());
    let final_state = chain(Some(settled_answer()));
    let factory_chain = final_state.clone();
    let message = reconcile(
        &args_for(root.path(), &id, Some("HASH")),
        move |request: &MechanismRequest<'_>| {
            assert_eq!((request.scheme, request.network), ("exact", "xrpl:1"));
            assert_eq!(request.network_settings.rpc, "http://127.0.0.1:5005");
            Ok(factory_chain as Arc<dyn Mechanism>)
        },
        RECONCILE_TIMEOUT,
    )
    .await
    .unwrap();
    assert!(message.contains("ABCDEF"), "{message}");
    assert_eq!(
        *final_state.hints.lock().unwrap(),
        vec![Some("HASH".to_string())]
    );
    let journal = SettlementJournal::open(root.path()).unwrap();
    let record = journal.get(&id).unwrap();
    assert_eq!(record.state, SettlementState::Settled);
    assert_eq!(record.response.unwrap().transaction, "ABCDEF");
    drop(journal);

    let again = reconcile(
        &args_for(root.path(), &id, None),
        |_: &MechanismRequest<'_>| -> Result<Arc<dyn Mechanism>, String> {
            panic!("a settled payment needs no chain")
        },
        RECONCILE_TIMEOUT,
    )
    .await
    .unwrap();
    assert!(again.contains("already settled"), "{again}");
}

#[tokio::test]
async fn a_payment_not_final_yet_or_answered_for_someone_else_is_left_unknown() {
    let root = tempfile::tempdir().unwrap();
    let id = unresolved_payment(root.path());
    let mut other_payer = settled_answer();
    other_payer.payer = Some("rSomeoneElse".into());
    for answer in [None, Some(other_payer)] {
        let error = reconcile(
            &args_for(root.path(), &id, None),
            |_: &MechanismRequest<'_>| Ok(chain(answer) as Arc<dyn Mechanism>),
            RECONCILE_TIMEOUT,
        )
        .await
        .unwrap_err();
        assert!(error.contains("nothing recorded"), "{error}");
    }
    let journal = SettlementJournal::open(root.path()).unwrap();
    assert_eq!(journal.get(&id).unwrap().state, SettlementState::Unknown);
}

#[tokio::test]
async fn reconcile_refuses_while_concert_holds_the_journal() {
    let root = tempfile::tempdir().unwrap();
    let id = unresolved_payment(root.path());
    let running = SettlementJournal::open(root.path()).unwrap();
    let error = reconcile(
        &args_for(root.path(), &id, None),
        |_: &MechanismRequest<'_>| Ok(chain(Some(settled_answer())) as Arc<dyn Mechanism>),
        RECONCILE_TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(error.contains("stop concert"), "{error}");
    assert_eq!(running.get(&id).unwrap().state, SettlementState::Unknown);
}

#[tokio::test]
async fn an_unknown_fingerprint_or_network_is_an_error() {
    let root = tempfile::tempdir().unwrap();
    let id = unresolved_payment(root.path());
    let error = reconcile(
        &args_for(root.path(), &"0".repeat(64), None),
        |_: &MechanismRequest<'_>| Ok(chain(None) as Arc<dyn Mechanism>),
        RECONCILE_TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(error.contains("no payment with fingerprint"), "{error}");
    std::fs::write(root.path().join(NETWORKS_FILE), "{}").unwrap();
    let error = reconcile(
        &args_for(root.path(), &id, None),
        |_: &MechanismRequest<'_>| Ok(chain(None) as Arc<dyn Mechanism>),
        RECONCILE_TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(error.contains("no entry for xrpl:1"), "{error}");
    let error = reconcile(
        &args_for(root.path(), &id, None),
        crate::fastlane::gateway::no_chains,
        RECONCILE_TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(error.contains("xrpl:1"), "{error}");
}

#[test]
fn reconcile_arguments_take_go_style_flags_and_the_environment() {
    let env = HashMap::from([("CONCERT_DATA_DIR".to_string(), "/env/data".to_string())]);
    let fingerprint = "AB".repeat(32);
    let parsed = ReconcileArgs::parse(&strings(&[&fingerprint]), &env)
        .unwrap()
        .unwrap();
    assert_eq!(parsed.data_dir, PathBuf::from("/env/data"));
    assert_eq!(
        parsed.networks_config,
        PathBuf::from("/env/data/networks.json")
    );
    assert_eq!(parsed.fingerprint, "ab".repeat(32));
    let parsed = ReconcileArgs::parse(
        &strings(&[
            "-data-dir",
            "/d",
            "--networks-config=/n.json",
            &fingerprint,
            "HASH",
        ]),
        &env,
    )
    .unwrap()
    .unwrap();
    assert_eq!(parsed.data_dir, PathBuf::from("/d"));
    assert_eq!(parsed.networks_config, PathBuf::from("/n.json"));
    assert_eq!(parsed.hint.as_deref(), Some("HASH"));
    assert!(
        ReconcileArgs::parse(&strings(&["-h"]), &env)
            .unwrap()
            .is_none()
    );
    for bad in [
        &["abc"][..],
        &[],
        &["-data-dir"],
        &["-cap", "5"],
        &[&fingerprint, "a", "b"],
    ] {
        assert!(
            ReconcileArgs::parse(&strings(bad), &env).is_err(),
            "{bad:?}"
        );
    }
    let no_dir = HashMap::from([("CONCERT_DATA_DIR".to_string(), String::new())]);
    assert!(ReconcileArgs::parse(&strings(&[&fingerprint]), &no_dir).is_err());
}

#[test]
fn example_prints_valid_json_on_stdout_and_notes_on_stderr() {
    let fastlane = example(&strings(&["fastlane"]));
    assert_eq!(fastlane.status, 0);
    assert!(fastlane.stderr.contains("policy_url"));
    let networks = example(&strings(&["networks"]));
    let path = Path::new("fastlane.json");
    let parsed = parse_fastlane(path, fastlane.stdout.as_bytes()).unwrap();
    let nets = parse_networks(Path::new("networks.json"), networks.stdout.as_bytes()).unwrap();
    validate_fastlane(path, &parsed, Path::new("networks.json"), &nets).unwrap();
    assert_eq!(example(&strings(&["wallet"])).status, 2);
    assert_eq!(example(&[]).status, 2);
}

#[test]
fn only_a_first_argument_naming_a_command_runs_one() {
    let env: HashMap<String, String> = HashMap::new();
    assert!(
        run(
            &strings(&["-cap", "5"]),
            &env,
            crate::fastlane::gateway::no_chains
        )
        .is_none()
    );
    assert!(
        run(
            &strings(&["-cap", "reconcile"]),
            &env,
            crate::fastlane::gateway::no_chains
        )
        .is_none()
    );
    let out = run(
        &strings(&["example", "networks"]),
        &env,
        crate::fastlane::gateway::no_chains,
    )
    .unwrap();
    assert_eq!(out.status, 0);
    let out = run(
        &strings(&["reconcile", "nope"]),
        &env,
        crate::fastlane::gateway::no_chains,
    )
    .unwrap();
    assert_eq!(out.status, 2);
    assert!(out.stderr.contains("usage: concert reconcile"));
}
