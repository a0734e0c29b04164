//! The Solana vectors (made with @solana/web3.js 1.99.0) and properties of the decoder over
//! untrusted bytes. The chain calls are tested against a fake JSON-RPC server in
//! `tests/fastlane_solana.rs`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::nft::{message_signature_verifies, metadata_address};
use super::transfer::{TransferTerms, inspect, inspect_payload, parse_key, unsigned_transfer};
use super::wire::Transaction;
use super::*;
use crate::fastlane::x402::PaymentRequirements;

const VECTORS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/vectors/solana.json"
));

#[derive(Deserialize)]
struct Vectors {
    requirements: PaymentRequirements,
    payer: String,
    cases: Vec<Case>,
    unsigned: Unsigned,
    pdas: Vec<Pda>,
    message: SignedMessage,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    tx: String,
    ok: bool,
}

#[derive(Deserialize)]
struct Unsigned {
    from: String,
    to: String,
    lamports: String,
    blockhash: String,
    tx: String,
}

#[derive(Deserialize)]
struct Pda {
    mint: String,
    pda: String,
    bump: u8,
}

#[derive(Deserialize)]
struct SignedMessage {
    address: String,
    message: String,
    signature: String,
}

fn vectors() -> Vectors {
    serde_json::from_str(VECTORS).expect("the vector file parses")
}

fn payload(tx: &str) -> Map<String, Value> {
    let mut payload = Map::new();
    payload.insert("transaction".to_owned(), Value::String(tx.to_owned()));
    payload
}

fn key(text: &str) -> [u8; 32] {
    parse_key(text).expect("a vector key")
}

/// Which check each failing vector must trip, so a case cannot pass by failing early for an
/// unrelated reason.
fn expected_refusal(name: &str) -> &'static str {
    match name {
        "wrong amount" => "the transfer moves another amount",
        "wrong recipient" => "the transfer pays another account",
        "extra instruction" | "compute budget instruction" => {
            "the transaction must hold exactly one instruction"
        }
        "trailing byte" | "versioned transaction" => "the transaction does not decode strictly",
        "corrupted signature" => "the signature does not verify",
        other => panic!("no expectation for vector case {other:?}"),
    }
}

#[test]
fn every_vector_case_gets_its_verdict_and_payer() {
    let vectors = vectors();
    let terms = TransferTerms::parse(&vectors.requirements).expect("vector terms");
    assert_eq!(vectors.cases.len(), 8);
    for case in &vectors.cases {
        let verdict = inspect_payload(&payload(&case.tx), &terms);
        match verdict {
            Ok(transfer) => {
                assert!(case.ok, "{} was accepted", case.name);
                assert_eq!(transfer.payer(), vectors.payer, "{}", case.name);
                assert_eq!(transfer.lamports, 1_500_000);
                assert_eq!(transfer.wire, STANDARD.decode(&case.tx).expect("base64"));
            }
            Err(refusal) => {
                assert!(!case.ok, "{} was refused: {}", case.name, refusal.why);
                assert_eq!(refusal.why, expected_refusal(&case.name), "{}", case.name);
            }
        }
    }
}

#[test]
fn the_valid_vector_is_refused_under_other_terms() {
    let vectors = vectors();
    let valid = &vectors.cases[0].tx;
    let mut terms = TransferTerms::parse(&vectors.requirements).expect("vector terms");
    terms.lamports += 1;
    assert!(inspect_payload(&payload(valid), &terms).is_err());
    // Paying oneself: payTo is the payer.
    let terms = TransferTerms {
        pay_to: key(&vectors.payer),
        lamports: 1_500_000,
    };
    assert!(inspect_payload(&payload(valid), &terms).is_err());
}

#[test]
fn payloads_must_be_canonical_base64_with_one_field() {
    let vectors = vectors();
    let terms = TransferTerms::parse(&vectors.requirements).expect("vector terms");
    let valid = vectors.cases[0].tx.clone();
    assert!(inspect_payload(&payload(&valid), &terms).is_ok());
    // The valid transaction ends in one padding character; the last data character then
    // carries two unused bits, which a canonical encoding leaves zero.
    let tail = valid.len() - 2;
    let mut tweaked = valid.clone();
    let last = &valid[tail..tail + 1];
    let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let position = alphabet.find(last).expect("a base64 character");
    let bumped = &alphabet[position + 1..position + 2];
    tweaked.replace_range(tail..tail + 1, bumped);
    assert!(inspect_payload(&payload(&tweaked), &terms).is_err());
    let unpadded = valid.trim_end_matches('=');
    assert!(inspect_payload(&payload(unpadded), &terms).is_err());
    let mut extra = payload(&valid);
    extra.insert("memo".to_owned(), Value::String(String::new()));
    assert!(inspect_payload(&extra, &terms).is_err());
    let mut not_text = Map::new();
    not_text.insert("transaction".to_owned(), Value::from(1));
    assert!(inspect_payload(&not_text, &terms).is_err());
}

#[test]
fn the_unsigned_transfer_serialises_exactly() {
    let unsigned = vectors().unsigned;
    let lamports = unsigned.lamports.parse().expect("lamports");
    let built = unsigned_transfer(
        key(&unsigned.from),
        key(&unsigned.to),
        lamports,
        key(&unsigned.blockhash),
    );
    assert_eq!(STANDARD.encode(built.encode()), unsigned.tx);
    let decoded =
        Transaction::decode(&STANDARD.decode(&unsigned.tx).expect("base64")).expect("decodes");
    assert_eq!(decoded, built);
}

#[test]
fn every_metadata_address_and_bump_recomputes() {
    let pdas = vectors().pdas;
    assert_eq!(pdas.len(), 5);
    for pda in pdas {
        let (address, bump) = metadata_address(&key(&pda.mint)).expect("a bump exists");
        assert_eq!(bs58::encode(address).into_string(), pda.pda, "{}", pda.mint);
        assert_eq!(bump, pda.bump, "{}", pda.mint);
    }
}

#[test]
fn the_message_signature_verifies_and_a_changed_message_does_not() {
    let message = vectors().message;
    let signature = STANDARD.decode(&message.signature).expect("base64");
    assert!(message_signature_verifies(
        &message.address,
        &message.message,
        &signature
    ));
    let changed = message.message.replace("8080", "8081");
    assert!(!message_signature_verifies(
        &message.address,
        &changed,
        &signature
    ));
    let other_address = vectors().requirements.pay_to;
    assert!(!message_signature_verifies(
        &other_address,
        &message.message,
        &signature
    ));
    assert!(!message_signature_verifies(
        &message.address,
        &message.message,
        &signature[..63]
    ));
}

#[test]
fn network_names_must_carry_a_cluster_id() {
    let settings = NetworkSettings {
        rpc: "https://api.devnet.solana.com".to_owned(),
        ..NetworkSettings::default()
    };
    assert!(SolanaNativeSol::new("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", &settings).is_ok());
    assert!(SolanaNativeSol::new("solana:devnet", &settings).is_err());
    assert!(SolanaNativeSol::new("xrpl:1", &settings).is_err());
    let no_rpc = NetworkSettings::default();
    assert!(SolanaNativeSol::new("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", &no_rpc).is_err());
}

fn vector_wires() -> Vec<Vec<u8>> {
    vectors()
        .cases
        .iter()
        .map(|case| STANDARD.decode(&case.tx).expect("base64"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Any bytes: no panic, and whatever decodes encodes back to the same bytes.
    #[test]
    fn arbitrary_bytes_never_panic_and_decoding_is_one_to_one(
        bytes in proptest::collection::vec(any::<u8>(), 0..1400)
    ) {
        if let Ok(transaction) = Transaction::decode(&bytes) {
            prop_assert_eq!(transaction.encode(), bytes.clone());
        }
        let terms = TransferTerms { pay_to: [7; 32], lamports: 1 };
        let _ = inspect(bytes, &terms);
    }

    /// The vector transactions with bytes changed, cut or inserted: never a panic, and only
    /// the valid transfer's exact bytes are accepted.
    #[test]
    fn mutated_vector_transactions_never_panic_or_pass(
        case in 0usize..8,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let vectors = vectors();
        let terms = TransferTerms::parse(&vectors.requirements).expect("vector terms");
        let mut bytes = vector_wires()[case].clone();
        for (index, value, kind) in edits {
            if bytes.is_empty() {
                bytes.push(value);
                continue;
            }
            let at = index.index(bytes.len());
            match kind {
                0 => bytes[at] = value,
                1 => { bytes.remove(at); }
                _ => bytes.insert(at, value),
            }
        }
        if let Ok(transaction) = Transaction::decode(&bytes) {
            prop_assert_eq!(transaction.encode(), bytes.clone());
        }
        // Cutting the extra byte off "trailing byte" gives back the valid transfer; nothing
        // else may pass.
        let accepted = inspect(bytes.clone(), &terms).is_ok();
        prop_assert!(!accepted || bytes == vector_wires()[0]);
    }
}
