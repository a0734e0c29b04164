//! The Hedera `exact` mechanism against a fake mirror node (a real axum server on loopback
//! serving the vectors' account records, a node list and transaction records) and a fake
//! consensus node (tonic's gRPC server handling over a real HTTP/2 listener) that records
//! every submission and answers receipts as each test scripts.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use concert::fastlane::chains::BuiltIn;
use concert::fastlane::chains::hedera::keys::{PayerKey, SponsorKey};
use concert::fastlane::chains::hedera::payment::{Undecodable, decode_payload};
use concert::fastlane::chains::hedera::proto::{
    self, AccountAmount, AccountId, CryptoTransfer, Signature, SignatureMap, SignaturePair,
    SignedTransaction, Timestamp, TransactionBody, TransactionId, TransactionList,
    TransactionResponse, TransferList, code,
};
use concert::fastlane::chains::hedera::{HederaExact, SettlePolling};
use concert::fastlane::gateway::MechanismRequest;
use concert::fastlane::mechanism::{ChainError, Mechanism};
use concert::fastlane::settings::{NetworkSettings, Offer};
use concert::fastlane::x402::{PaymentPayload, PaymentRequirements};
use ed25519_dalek::{Signer as _, SigningKey, Verifier as _};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use prost::Message as _;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;

const VECTORS: &str = include_str!("vectors/hedera.json");
const NETWORK: &str = "hedera:testnet";
const SPONSOR: &str = "0.0.123";
const PAY_TO: &str = "0.0.789";
/// An account of our own, with a key we hold, for payloads built here.
const OWN_PAYER: &str = "0.0.1001";
/// A final receipt status other than `SUCCESS`.
const INSUFFICIENT_PAYER_BALANCE: i32 = 10;

fn vectors() -> Value {
    serde_json::from_str(VECTORS).expect("vectors parse")
}

fn case(name: &str) -> Value {
    vectors()["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|case| case["name"] == name)
        .cloned()
        .expect("case exists")
}

fn terms() -> PaymentRequirements {
    serde_json::from_value(case("valid ed25519 payer (client signer)")["requirements"].clone())
        .expect("requirements")
}

fn payment(transaction: &str, terms: &PaymentRequirements) -> PaymentPayload {
    let mut payload = Map::new();
    payload.insert("transaction".into(), json!(transaction));
    PaymentPayload {
        x402_version: 2,
        resource: None,
        accepted: terms.clone(),
        payload,
        extensions: None,
    }
}

fn own_key() -> SigningKey {
    SigningKey::from_bytes(&[0x42; 32])
}

// ---------------------------------------------------------------- fake mirror

#[derive(Default)]
struct MirrorState {
    accounts: HashMap<String, Value>,
    transactions: HashMap<String, Value>,
    node_port: u16,
    account_lookups: u32,
}

type Mirror = Arc<Mutex<MirrorState>>;

async fn account(
    State(mirror): State<Mirror>,
    Path(id): Path<String>,
) -> (StatusCode, Json<Value>) {
    let mut mirror = mirror.lock();
    mirror.account_lookups += 1;
    match mirror.accounts.get(&id) {
        Some(record) => (StatusCode::OK, Json(record.clone())),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"_status": {"messages": [{"message": "Not found"}]}})),
        ),
    }
}

async fn transaction(
    State(mirror): State<Mirror>,
    Path(id): Path<String>,
) -> (StatusCode, Json<Value>) {
    match mirror.lock().transactions.get(&id) {
        Some(record) => (StatusCode::OK, Json(record.clone())),
        None => (StatusCode::NOT_FOUND, Json(json!({}))),
    }
}

async fn nodes(State(mirror): State<Mirror>) -> Json<Value> {
    let port = mirror.lock().node_port;
    let nodes: Vec<Value> = (3..=9)
        .map(|n| {
            json!({
                "node_account_id": format!("0.0.{n}"),
                "service_endpoints": [
                    {"domain_name": "", "ip_address_v4": "127.0.0.1", "port": 50212},
                    {"domain_name": "", "ip_address_v4": "127.0.0.1", "port": port},
                ],
            })
        })
        .collect();
    Json(json!({"nodes": nodes, "links": {"next": null}}))
}

async fn start_mirror(node_port: u16) -> (Mirror, String) {
    let mut state = MirrorState {
        node_port,
        ..MirrorState::default()
    };
    for (id, record) in vectors()["accounts"].as_object().expect("accounts") {
        state.accounts.insert(id.clone(), record.clone());
    }
    let own = hex::encode(own_key().verifying_key().to_bytes());
    state.accounts.insert(
        OWN_PAYER.into(),
        json!({"key": {"_type": "ED25519", "key": own}, "balance": {"balance": 50_000_000}}),
    );
    let mirror = Arc::new(Mutex::new(state));
    let router = Router::new()
        .route("/api/v1/accounts/{id}", get(account))
        .route("/api/v1/transactions/{id}", get(transaction))
        .route("/api/v1/network/nodes", get(nodes))
        .with_state(mirror.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (mirror, format!("http://{address}"))
}

// ---------------------------------------------------------------- fake consensus node

/// What the node answers to receipt queries.
#[derive(Clone, Copy)]
enum Receipts {
    /// `UNKNOWN` for this many queries, then `SUCCESS`.
    SuccessAfter(u32),
    /// A final status other than `SUCCESS`.
    Final(i32),
    /// `UNKNOWN` forever.
    NeverFinal,
}

struct NodeState {
    precheck: Vec<i32>,
    receipts: Receipts,
    receipt_queries: u32,
    submitted: Vec<proto::Transaction>,
}

type Node = Arc<Mutex<NodeState>>;

async fn start_node(receipts: Receipts, precheck: Vec<i32>) -> (Node, u16) {
    let node = Arc::new(Mutex::new(NodeState {
        precheck,
        receipts,
        receipt_queries: 0,
        submitted: Vec::new(),
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let state = node.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(route_grpc(state, request).await) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (node, port)
}

async fn route_grpc(
    state: Node,
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<tonic::body::Body> {
    match request.uri().path() {
        "/proto.CryptoService/submitTransaction" => {
            let submit = tower::service_fn(move |request: tonic::Request<proto::Transaction>| {
                let state = state.clone();
                async move {
                    let mut node = state.lock();
                    node.submitted.push(request.into_inner());
                    let code = if node.precheck.is_empty() {
                        code::OK
                    } else {
                        node.precheck.remove(0)
                    };
                    Ok::<_, tonic::Status>(tonic::Response::new(TransactionResponse {
                        node_transaction_precheck_code: code,
                        cost: 0,
                    }))
                }
            });
            let codec =
                tonic_prost::ProstCodec::<TransactionResponse, proto::Transaction>::default();
            tonic::server::Grpc::new(codec).unary(submit, request).await
        }
        "/proto.CryptoService/getTransactionReceipts" => {
            let receipt = tower::service_fn(move |_request: tonic::Request<proto::Query>| {
                let state = state.clone();
                async move {
                    let mut node = state.lock();
                    node.receipt_queries += 1;
                    let status = match node.receipts {
                        Receipts::SuccessAfter(n) if node.receipt_queries > n => code::SUCCESS,
                        Receipts::Final(status) => status,
                        _ => code::UNKNOWN,
                    };
                    Ok::<_, tonic::Status>(tonic::Response::new(proto::Response {
                        transaction_get_receipt: Some(proto::TransactionGetReceiptResponse {
                            header: Some(proto::ResponseHeader {
                                node_transaction_precheck_code: code::OK,
                            }),
                            receipt: Some(proto::TransactionReceipt { status }),
                        }),
                    }))
                }
            });
            let codec = tonic_prost::ProstCodec::<proto::Response, proto::Query>::default();
            tonic::server::Grpc::new(codec)
                .unary(receipt, request)
                .await
        }
        _ => tonic::Status::unimplemented("no such method").into_http(),
    }
}

// ---------------------------------------------------------------- helpers

fn settings(mirror: &str) -> NetworkSettings {
    NetworkSettings {
        mirror: mirror.to_owned(),
        fee_payer: SPONSOR.to_owned(),
        ..NetworkSettings::default()
    }
}

fn sponsor_der() -> String {
    vectors()["sponsorKey"]
        .as_str()
        .expect("sponsor key")
        .to_owned()
}

struct Fixture {
    mechanism: HederaExact,
    mirror: Mirror,
    node: Node,
}

async fn fixture(receipts: Receipts, precheck: Vec<i32>) -> Fixture {
    let (node, port) = start_node(receipts, precheck).await;
    let (mirror, url) = start_mirror(port).await;
    let mechanism = HederaExact::new(NETWORK, &settings(&url), Some(&sponsor_der()))
        .expect("mechanism")
        .with_node_port(port)
        .with_polling(SettlePolling {
            interval: Duration::from_millis(20),
            budget: Duration::from_millis(400),
        });
    Fixture {
        mechanism,
        mirror,
        node,
    }
}

fn account_id(text: &str) -> AccountId {
    let num = text
        .rsplit('.')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("id");
    AccountId {
        shard_num: Some(0),
        realm_num: Some(0),
        account_num: Some(num),
    }
}

/// A transfer of `amount` from our own account to `PAY_TO`, fee paid by the sponsor, as the
/// SDKs encode it; `edit` may change the body before it is signed.
fn own_body(node: &str, edit: impl Fn(&mut TransactionBody)) -> Vec<u8> {
    let mut body = TransactionBody {
        transaction_id: Some(TransactionId {
            transaction_valid_start: Some(Timestamp {
                seconds: Some(1_790_528_800),
                nanos: Some(5),
            }),
            account_id: Some(account_id(SPONSOR)),
            scheduled: Some(false),
            nonce: None,
        }),
        node_account_id: Some(account_id(node)),
        transaction_fee: Some(100_000_000),
        transaction_valid_duration: Some(proto::Duration { seconds: Some(120) }),
        memo: Some(String::new()),
        crypto_transfer: Some(CryptoTransfer {
            transfers: Some(TransferList {
                account_amounts: vec![
                    AccountAmount {
                        account_id: Some(account_id(OWN_PAYER)),
                        amount: Some(-10_000_000),
                        is_approval: Some(false),
                    },
                    AccountAmount {
                        account_id: Some(account_id(PAY_TO)),
                        amount: Some(10_000_000),
                        is_approval: Some(false),
                    },
                ],
            }),
            token_transfers: Vec::new(),
        }),
    };
    edit(&mut body);
    body.encode_to_vec()
}

/// Signs each node's body with our key and lists them; `extend` may append raw bytes to each
/// body before signing (fields the declared messages do not know).
fn own_payload(edit: impl Fn(&mut TransactionBody), extend: &[u8]) -> String {
    let key = own_key();
    let list = TransactionList {
        transaction_list: ["0.0.3", "0.0.4"]
            .iter()
            .map(|node| {
                let mut body = own_body(node, &edit);
                body.extend_from_slice(extend);
                let signed = SignedTransaction {
                    sig_map: Some(SignatureMap {
                        sig_pair: vec![SignaturePair {
                            pub_key_prefix: Some(key.verifying_key().to_bytes().to_vec()),
                            signature: Some(Signature::Ed25519(
                                key.sign(&body).to_bytes().to_vec(),
                            )),
                        }],
                    }),
                    body_bytes: Some(body),
                };
                proto::Transaction {
                    signed_transaction_bytes: Some(signed.encode_to_vec()),
                }
            })
            .collect(),
    };
    STANDARD.encode(list.encode_to_vec())
}

// ---------------------------------------------------------------- vectors

#[tokio::test]
async fn every_vector_case_gets_concerts_verdict_and_the_reference_payer() {
    let f = fixture(Receipts::SuccessAfter(0), Vec::new()).await;
    let cases = vectors()["cases"].as_array().expect("cases").clone();
    assert_eq!(cases.len(), 12);
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let terms: PaymentRequirements =
            serde_json::from_value(case["requirements"].clone()).expect("terms");
        let transaction = case["transaction"].as_str().expect("transaction");
        let verdict = f
            .mechanism
            .verify(&payment(transaction, &terms), &terms)
            .await
            .expect("a verdict");
        let expected_valid = case["concert"]["valid"].as_bool().expect("valid");
        assert_eq!(verdict.is_valid, expected_valid, "{name}: {verdict:?}");
        let expected_reason = case["concert"]["reason"].as_str().expect("reason");
        assert_eq!(
            verdict.invalid_reason.as_deref().unwrap_or(""),
            expected_reason,
            "{name}"
        );
        assert_eq!(
            verdict.payer,
            case["reference"]["payer"].as_str().expect("payer"),
            "{name}"
        );
    }
}

#[test]
fn every_vector_transaction_decodes_to_its_id_with_identical_bodies() {
    for case in vectors()["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        let text = case["transaction"].as_str().expect("transaction");
        let transfer = decode_payload(text).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(
            transfer.transaction_id_text,
            case["transactionId"].as_str().expect("id"),
            "{name}"
        );
        assert_eq!(transfer.copies.len(), 7, "{name}");
        // The strict decoding is byte-exact: each copy re-encodes to the payload itself.
        let raw = STANDARD.decode(text).expect("base64");
        let rebuilt = TransactionList {
            transaction_list: transfer
                .copies
                .iter()
                .map(|copy| proto::Transaction {
                    signed_transaction_bytes: Some(copy.signed.encode_to_vec()),
                })
                .collect(),
        };
        assert_eq!(rebuilt.encode_to_vec(), raw, "{name}");
        for copy in &transfer.copies {
            assert_eq!(
                copy.signed.body_bytes.as_deref(),
                Some(copy.body_bytes.as_slice())
            );
        }
    }
}

#[test]
fn message_signatures_verify_and_a_changed_message_does_not() {
    for message in vectors()["messages"].as_array().expect("messages") {
        let key = PayerKey::from_mirror(
            message["key"]["_type"].as_str().expect("type"),
            message["key"]["key"].as_str().expect("key"),
        )
        .expect("key");
        let raw_key = hex::decode(message["key"]["key"].as_str().expect("key")).expect("hex");
        let signature = STANDARD
            .decode(message["signature"].as_str().expect("signature"))
            .expect("base64");
        let signature = if message["key"]["_type"] == "ED25519" {
            Signature::Ed25519(signature)
        } else {
            Signature::EcdsaSecp256k1(signature)
        };
        let signed = SignedTransaction {
            body_bytes: None,
            sig_map: Some(SignatureMap {
                sig_pair: vec![SignaturePair {
                    pub_key_prefix: Some(raw_key),
                    signature: Some(signature),
                }],
            }),
        };
        let text = message["message"].as_str().expect("message");
        assert!(
            key.signed(&signed, text.as_bytes()),
            "{}",
            message["account"]
        );
        assert!(!key.signed(&signed, format!("{text}!").as_bytes()));
    }
}

#[test]
fn the_sponsor_key_loads_from_its_der_hex() {
    let sponsor = SponsorKey::from_der_hex(&sponsor_der()).expect("sponsor key");
    let expected = SigningKey::from_bytes(&[0x66; 32])
        .verifying_key()
        .to_bytes();
    assert_eq!(sponsor.public_bytes(), expected.to_vec());
    let secp = format!("3030020100300706052b8104000a04220420{}", "11".repeat(32));
    assert_eq!(
        SponsorKey::from_der_hex(&secp)
            .expect("secp256k1")
            .public_bytes()
            .len(),
        33
    );
    assert!(SponsorKey::from_der_hex("302e0201").is_none());
}

// ---------------------------------------------------------------- strictness

#[tokio::test]
async fn a_payload_built_here_is_valid_until_a_field_is_added() {
    let f = fixture(Receipts::SuccessAfter(0), Vec::new()).await;
    let terms = terms();
    let plain = own_payload(|_| {}, &[]);
    let verdict = f
        .mechanism
        .verify(&payment(&plain, &terms), &terms)
        .await
        .expect("verdict");
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(verdict.payer, OWN_PAYER);
    // Field 999 (varint 1), signed along with the body: still refused.
    let extended = own_payload(|_| {}, &[0xb8, 0x3e, 0x01]);
    let verdict = f
        .mechanism
        .verify(&payment(&extended, &terms), &terms)
        .await
        .expect("verdict");
    assert!(!verdict.is_valid);
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_hedera_payload_transaction_could_not_be_decoded")
    );
}

#[tokio::test]
async fn ids_that_are_scheduled_or_nonced_and_token_transfers_are_refused() {
    let f = fixture(Receipts::SuccessAfter(0), Vec::new()).await;
    let terms = terms();
    let decode_failure = "invalid_exact_hedera_payload_transaction_could_not_be_decoded";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "nonce",
            own_payload(
                |b| b.transaction_id.as_mut().expect("id").nonce = Some(1),
                &[],
            ),
            decode_failure,
        ),
        (
            "scheduled",
            own_payload(
                |b| b.transaction_id.as_mut().expect("id").scheduled = Some(true),
                &[],
            ),
            decode_failure,
        ),
        (
            "approval",
            own_payload(
                |b| {
                    let transfers = b.crypto_transfer.as_mut().expect("transfer");
                    transfers.transfers.as_mut().expect("list").account_amounts[0].is_approval =
                        Some(true);
                },
                &[],
            ),
            decode_failure,
        ),
        (
            "token transfer",
            own_payload(
                |b| {
                    b.crypto_transfer
                        .as_mut()
                        .expect("transfer")
                        .token_transfers = vec![vec![0x0a, 0x00]]
                },
                &[],
            ),
            "invalid_exact_hedera_payload_asset_mismatch",
        ),
        (
            "not a transfer",
            own_payload(|b| b.crypto_transfer = None, &[0x7a, 0x00]),
            "invalid_exact_hedera_payload_contains_non_transfer_ops",
        ),
        (
            "sum not zero",
            own_payload(
                |b| {
                    let transfers = b.crypto_transfer.as_mut().expect("transfer");
                    transfers.transfers.as_mut().expect("list").account_amounts[0].amount =
                        Some(-9_999_999);
                },
                &[],
            ),
            "invalid_exact_hedera_payload_hbar_sum_non_zero",
        ),
        ("not base64", "%%%".to_owned(), decode_failure),
    ];
    for (name, payload, reason) in cases {
        let verdict = f
            .mechanism
            .verify(&payment(&payload, &terms), &terms)
            .await
            .expect("verdict");
        assert!(!verdict.is_valid, "{name}");
        assert_eq!(verdict.invalid_reason.as_deref(), Some(reason), "{name}");
    }
    // None of these needed the mirror.
    assert_eq!(f.mirror.lock().account_lookups, 0);
}

#[tokio::test]
async fn terms_naming_another_sponsor_or_asset_are_refused() {
    let f = fixture(Receipts::SuccessAfter(0), Vec::new()).await;
    let transaction = case("valid ed25519 payer (client signer)")["transaction"]
        .as_str()
        .expect("tx")
        .to_owned();
    let mut other_sponsor = terms();
    other_sponsor.extra = Some(
        json!({"feePayer": "0.0.124"})
            .as_object()
            .cloned()
            .expect("map"),
    );
    let verdict = f
        .mechanism
        .verify(&payment(&transaction, &other_sponsor), &other_sponsor)
        .await
        .expect("verdict");
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("fee_payer_not_managed_by_facilitator")
    );
    let mut token = terms();
    token.asset = "0.0.5".into();
    let verdict = f
        .mechanism
        .verify(&payment(&transaction, &token), &token)
        .await
        .expect("verdict");
    assert_eq!(verdict.invalid_reason.as_deref(), Some("invalid_asset"));
}

// ---------------------------------------------------------------- settle and reconcile

#[tokio::test]
async fn settle_co_signs_submits_once_and_waits_for_success() {
    let f = fixture(Receipts::SuccessAfter(2), Vec::new()).await;
    let case = case("valid ed25519 payer (client signer)");
    let terms = terms();
    let transaction = case["transaction"].as_str().expect("tx");
    let settled = f
        .mechanism
        .settle(&payment(transaction, &terms), &terms)
        .await
        .expect("settled");
    assert!(settled.success);
    assert_eq!(
        settled.transaction,
        case["transactionId"].as_str().expect("id")
    );
    assert_eq!(settled.payer.as_deref(), Some("0.0.456"));
    assert_eq!(settled.network, NETWORK);
    let node = f.node.lock();
    assert_eq!(node.submitted.len(), 1);
    assert_eq!(node.receipt_queries, 3);
    // The submitted copy is the payer's first, body untouched, with the sponsor's signature
    // added after the payer's.
    let original = decode_payload(transaction).expect("decodes");
    let sent = SignedTransaction::decode(
        node.submitted[0]
            .signed_transaction_bytes
            .as_deref()
            .expect("bytes"),
    )
    .expect("signed");
    assert_eq!(
        sent.body_bytes.as_deref(),
        Some(original.copies[0].body_bytes.as_slice())
    );
    let pairs = &sent.sig_map.as_ref().expect("sigs").sig_pair;
    assert_eq!(pairs.len(), 2);
    assert_eq!(
        pairs[0],
        original.copies[0]
            .signed
            .sig_map
            .as_ref()
            .expect("sigs")
            .sig_pair[0]
    );
    let sponsor = SigningKey::from_bytes(&[0x66; 32]).verifying_key();
    assert_eq!(
        pairs[1].pub_key_prefix.as_deref(),
        Some(sponsor.to_bytes().as_slice())
    );
    let Some(Signature::Ed25519(signature)) = &pairs[1].signature else {
        panic!("an ed25519 signature");
    };
    let signature = ed25519_dalek::Signature::from_slice(signature).expect("64 bytes");
    sponsor
        .verify(&original.copies[0].body_bytes, &signature)
        .expect("the sponsor signed the body");
}

#[tokio::test]
async fn a_failed_receipt_is_an_error_and_a_retry_submits_nothing_new() {
    let f = fixture(Receipts::Final(INSUFFICIENT_PAYER_BALANCE), Vec::new()).await;
    let terms = terms();
    let transaction = case("valid ecdsa payer (client signer)")["transaction"]
        .as_str()
        .expect("tx")
        .to_owned();
    let failed = f
        .mechanism
        .settle(&payment(&transaction, &terms), &terms)
        .await;
    assert!(
        matches!(failed, Err(ChainError::Unavailable { .. })),
        "{failed:?}"
    );
    let again = f
        .mechanism
        .settle(&payment(&transaction, &terms), &terms)
        .await;
    assert!(again.is_err());
    assert_eq!(f.node.lock().submitted.len(), 1, "never resubmitted");
}

#[tokio::test]
async fn no_final_receipt_within_the_budget_leaves_the_outcome_unknown() {
    let f = fixture(Receipts::NeverFinal, Vec::new()).await;
    let terms = terms();
    let transaction = case("threshold key payer")["transaction"]
        .as_str()
        .expect("tx")
        .to_owned();
    let outcome = f
        .mechanism
        .settle(&payment(&transaction, &terms), &terms)
        .await;
    let Err(ChainError::Unavailable { message, .. }) = outcome else {
        panic!("unknown outcome expected: {outcome:?}");
    };
    assert!(message.contains("no SUCCESS receipt"), "{message}");
    assert!(f.node.lock().receipt_queries >= 2);
    assert_eq!(f.node.lock().submitted.len(), 1);
}

#[tokio::test]
async fn a_busy_node_passes_the_payment_to_the_next_node_copy() {
    let f = fixture(Receipts::SuccessAfter(0), vec![code::BUSY]).await;
    let terms = terms();
    let transaction = case("valid ed25519 payer (client signer)")["transaction"]
        .as_str()
        .expect("tx")
        .to_owned();
    let settled = f
        .mechanism
        .settle(&payment(&transaction, &terms), &terms)
        .await
        .expect("settled");
    assert!(settled.success);
    let node = f.node.lock();
    assert_eq!(node.submitted.len(), 2);
    let nodes: Vec<_> = node
        .submitted
        .iter()
        .map(|sent| {
            let signed =
                SignedTransaction::decode(sent.signed_transaction_bytes.as_deref().expect("bytes"))
                    .expect("signed");
            TransactionBody::decode(signed.body_bytes.as_deref().expect("body"))
                .expect("body")
                .node_account_id
        })
        .collect();
    assert_ne!(
        nodes[0], nodes[1],
        "each try sends the copy made for that node"
    );
}

#[tokio::test]
async fn reconcile_reads_the_mirror_and_needs_the_exact_amounts() {
    let f = fixture(Receipts::NeverFinal, Vec::new()).await;
    let terms = terms();
    let case = case("valid ed25519 payer (client signer)");
    let transaction = case["transaction"].as_str().expect("tx").to_owned();
    let paid = payment(&transaction, &terms);
    assert_eq!(
        f.mechanism
            .reconcile(&paid, &terms, None)
            .await
            .expect("answer"),
        None
    );
    let record = |payer_amount: i64| {
        json!({"transactions": [
            {"result": "DUPLICATE_TRANSACTION", "nonce": 0, "scheduled": false, "name": "CRYPTOTRANSFER", "transfers": []},
            {"result": "SUCCESS", "nonce": 0, "scheduled": false, "name": "CRYPTOTRANSFER", "token_transfers": [],
             "transfers": [
                {"account": "0.0.3", "amount": 1000},
                {"account": "0.0.123", "amount": -1000},
                {"account": "0.0.456", "amount": payer_amount},
                {"account": "0.0.789", "amount": 10_000_000},
             ]}
        ]})
    };
    let key = "0.0.123-1790528720-577528800".to_owned();
    f.mirror
        .lock()
        .transactions
        .insert(key.clone(), record(-10_000_000));
    let found = f
        .mechanism
        .reconcile(&paid, &terms, None)
        .await
        .expect("answer")
        .expect("final");
    assert!(found.success);
    assert_eq!(
        found.transaction,
        case["transactionId"].as_str().expect("id")
    );
    assert_eq!(found.payer.as_deref(), Some("0.0.456"));
    f.mirror.lock().transactions.insert(key, record(-9_000_000));
    assert!(f.mechanism.reconcile(&paid, &terms, None).await.is_err());
    assert!(
        f.node.lock().submitted.is_empty(),
        "reconcile never submits"
    );
}

#[test]
fn built_in_chains_build_hedera_only_with_the_sponsor_secret() {
    let settings = settings("https://testnet.mirrornode.hedera.com");
    let offer = Offer {
        label: "HBAR".into(),
        requirements: terms(),
        deposit_only: false,
    };
    let offers = [&offer];
    let request = MechanismRequest {
        scheme: "exact",
        network: NETWORK,
        network_settings: &settings,
        offers: &offers,
        test_mode: true,
    };
    let mut secrets = HashMap::new();
    let empty = BuiltIn::with_secrets(Arc::new(secrets.clone()));
    let refused = empty
        .build(&request)
        .err()
        .expect("no secret, no mechanism");
    assert!(refused.contains("CONCERT_HEDERA_FEE_SECRET"), "{refused}");
    secrets.insert("CONCERT_HEDERA_FEE_SECRET".to_owned(), sponsor_der());
    let built = BuiltIn::with_secrets(Arc::new(secrets))
        .build(&request)
        .expect("built");
    assert_eq!((built.scheme(), built.network()), ("exact", NETWORK));
    // Reconciling builds without offers and never signs, so it needs no secret.
    let reconcile = MechanismRequest {
        offers: &[],
        ..request
    };
    assert!(empty.build(&reconcile).is_ok());
}

// ---------------------------------------------------------------- robustness

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    fn vector_bytes() -> Vec<u8> {
        let text = case("threshold key payer")["transaction"]
            .as_str()
            .expect("tx")
            .to_owned();
        STANDARD.decode(text).expect("base64")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn on_any_text(text in "\\PC{0,300}") {
            let _ = decode_payload(&text);
        }

        #[test]
        fn on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode_payload(&STANDARD.encode(bytes));
        }

        #[test]
        fn on_a_vector_with_bytes_changed(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
            let mut bytes = vector_bytes();
            for (index, value) in edits {
                let at = index.index(bytes.len());
                bytes[at] = value;
            }
            match decode_payload(&STANDARD.encode(&bytes)) {
                Ok(_) | Err(Undecodable::Malformed(_)) | Err(Undecodable::NotTransfer) => {}
            }
        }

        #[test]
        fn on_any_mirror_key(kind in prop::sample::select(vec!["ED25519", "ECDSA_SECP256K1", "ProtobufEncoded", "RSA"]), bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = PayerKey::from_mirror(kind, &hex::encode(bytes));
        }
    }
}
