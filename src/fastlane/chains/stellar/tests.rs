//! The Stellar vectors (@stellar/stellar-sdk 16.3.0, judged by @x402/stellar 2.27.0) against
//! the local half of the mechanism, and properties of the decoders over hostile input.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use stellar_xdr::{Preconditions, SorobanCredentials, TransactionEnvelope};

use super::payment::{
    Expected, account_signatures_verify, authorisation_digest, decode_base64_exact, inspect,
    native_asset_contract, network_id, passphrase,
};
use super::settlement::{Sponsor, envelope_hash, rebuild};
use super::*;

const VECTORS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/vectors/stellar.json"
));

fn vectors() -> Value {
    serde_json::from_str(VECTORS).expect("the vector file is JSON")
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().expect("a string field")
}

fn payload(envelope: &str) -> Map<String, Value> {
    let mut payload = Map::new();
    payload.insert("transaction".into(), json!(envelope));
    payload
}

fn sponsor(vectors: &Value) -> Sponsor {
    Sponsor::from_secret(text(vectors, "sponsorSecret")).expect("the vector sponsor seed")
}

fn case<'a>(vectors: &'a Value, name: &str) -> &'a Value {
    vectors["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|case| case["name"] == name))
        .expect("the named case")
}

#[test]
fn native_asset_contracts_derive_from_the_passphrases() {
    let vectors = vectors();
    let testnet = passphrase(payment::TESTNET).expect("testnet");
    assert_eq!(text(&vectors, "passphrase"), testnet);
    assert_eq!(
        native_asset_contract(testnet).as_deref(),
        Some(text(&vectors, "asset"))
    );
    let pubnet = passphrase(payment::PUBNET).expect("pubnet");
    assert_eq!(
        native_asset_contract(pubnet).as_deref(),
        Some("CAS3J7GYLGXMF6TDJBBYYSE3HQ6BBSMLNUQ34T6TZMYMW2EVH34XOWMA")
    );
}

#[test]
fn every_vector_envelope_decodes_strictly_and_encodes_back_identically() {
    let vectors = vectors();
    let cases = vectors["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 18);
    let mut envelopes: Vec<&str> = cases.iter().map(|case| text(case, "transaction")).collect();
    envelopes.push(text(&vectors["settle"], "transaction"));
    envelopes.push(text(&vectors["settle"], "submitted"));
    for envelope in envelopes {
        let decoded: TransactionEnvelope =
            decode_base64_exact(envelope, payment::MAX_ENVELOPE_BYTES).expect("strict decode");
        assert_eq!(encode_base64(&decoded).as_deref(), Some(envelope));
    }
}

#[test]
fn non_canonical_spellings_are_refused() {
    let vectors = vectors();
    let envelope = text(&vectors["cases"][0], "transaction");
    // A trailing byte, missing padding, and whitespace each give another spelling.
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, envelope)
        .expect("base64");
    let mut trailing = bytes.clone();
    trailing.push(0);
    let trailing = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, trailing);
    // The unsigned entry's envelope (524 bytes) needs padding; without it it is refused.
    let padded = text(case(&vectors, "unsigned auth entry"), "transaction");
    assert!(padded.ends_with('='));
    let unpadded = padded.trim_end_matches('=');
    for spelling in [
        trailing.as_str(),
        unpadded,
        &format!("{envelope}\n"),
        &format!(" {envelope}"),
    ] {
        assert!(
            decode_base64_exact::<TransactionEnvelope>(spelling, payment::MAX_ENVELOPE_BYTES)
                .is_none(),
            "{spelling:?} decoded"
        );
    }
}

#[test]
fn the_payer_signature_verifies_over_the_authorisation_preimage_and_another_key_does_not() {
    let vectors = vectors();
    let network = network_id(text(&vectors, "passphrase"));
    let sponsor = sponsor(&vectors);
    for (name, verifies) in [("valid", true), ("auth signed by another key", false)] {
        let case = case(&vectors, name);
        let terms = &case["requirements"];
        let expected = Expected {
            asset: text(terms, "asset"),
            pay_to: text(terms, "payTo"),
            amount: text(terms, "amount"),
            sponsor: sponsor.public_key(),
        };
        let transfer = inspect(&payload(text(case, "transaction")), &expected).expect("a transfer");
        let [entry] = transfer.invocation.auth.as_slice() else {
            panic!("one auth entry");
        };
        let SorobanCredentials::Address(credentials) = &entry.credentials else {
            panic!("address credentials");
        };
        let digest = authorisation_digest(&network, credentials, &entry.root_invocation)
            .expect("the preimage encodes");
        let payer = stellar_strkey::ed25519::PublicKey::from_string(&transfer.from)
            .expect("a G address")
            .0;
        assert_eq!(
            account_signatures_verify(&credentials.signature, &digest, &payer),
            verifies,
            "{name}"
        );
        // The same signature over another network's preimage never verifies.
        let other = network_id(passphrase(payment::PUBNET).expect("pubnet"));
        let foreign = authorisation_digest(&other, credentials, &entry.root_invocation)
            .expect("the preimage encodes");
        assert!(!account_signatures_verify(
            &credentials.signature,
            &foreign,
            &payer
        ));
    }
}

#[test]
fn the_rebuilt_settlement_is_byte_for_byte_the_reference_submission() {
    let vectors = vectors();
    let network = network_id(text(&vectors, "passphrase"));
    let sponsor = sponsor(&vectors);
    let settle = &vectors["settle"];
    let terms = &settle["requirements"];
    let expected = Expected {
        asset: text(terms, "asset"),
        pay_to: text(terms, "payTo"),
        amount: text(terms, "amount"),
        sponsor: sponsor.public_key(),
    };
    let transfer = inspect(&payload(text(settle, "transaction")), &expected).expect("a transfer");
    let simulation = &vectors["cases"][0]["simulation"];
    let resources = decode_base64_exact(
        text(simulation, "transactionData"),
        payment::MAX_ENVELOPE_BYTES,
    )
    .expect("soroban data");
    let submitted: TransactionEnvelope =
        decode_base64_exact(text(settle, "submitted"), payment::MAX_ENVELOPE_BYTES)
            .expect("the reference submission");
    // The reference's clock: its upper time bound less the time limit.
    let TransactionEnvelope::Tx(reference) = &submitted else {
        panic!("a v1 envelope");
    };
    let Preconditions::Time(bounds) = &reference.tx.cond else {
        panic!("time bounds");
    };
    let timeout = terms["maxTimeoutSeconds"].as_u64().expect("timeout");
    let now = bounds.max_time.0 - timeout;
    let sequence: i64 = text(&vectors, "sponsorSequence").parse().expect("sequence");
    let rebuilt = rebuild(
        &transfer, resources, &sponsor, sequence, timeout, now, &network,
    )
    .expect("rebuilt");
    assert_eq!(
        encode_base64(&rebuilt).as_deref(),
        Some(text(settle, "submitted"))
    );
    assert_eq!(
        envelope_hash(&rebuilt, &network),
        envelope_hash(&submitted, &network)
    );
}

#[test]
fn the_ledger_pace_is_the_rounded_up_average_spacing() {
    let page = |times: &[&str]| -> LedgerPage {
        let records: Vec<Value> = times.iter().map(|t| json!({"closed_at": t})).collect();
        serde_json::from_value(json!({"_embedded": {"records": records}})).expect("page")
    };
    let three = page(&[
        "2026-12-07T11:40:12Z",
        "2026-12-07T11:40:06Z",
        "2026-12-07T11:40:01Z",
    ]);
    // 11 s over 2 gaps: 5.5 s, rounded up.
    assert_eq!(three.pace(), Some(6));
    assert_eq!(page(&["2026-12-07T11:40:12Z"]).pace(), None);
    assert_eq!(
        page(&["2026-12-07T11:40:01Z", "2026-12-07T11:40:12Z"]).pace(),
        None
    );
    assert_eq!(page(&["yesterday", "2026-12-07T11:40:12Z"]).pace(), None);
}

#[test]
fn sponsor_secrets_must_be_seeds() {
    let vectors = vectors();
    assert!(Sponsor::from_secret(text(&vectors, "sponsorSecret")).is_some());
    // An account address, a corrupted checksum, and garbage are not seeds.
    assert!(
        Sponsor::from_secret("GDWUSKGGFDI4FRXK5EBTRECZSVQSSWJHHJOGH6JWG3AUMFFMQ435DIAG").is_none()
    );
    assert!(
        Sponsor::from_secret("SABAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAFNE6").is_none()
    );
    assert!(Sponsor::from_secret("").is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes);
        let _ = decode_base64_exact::<TransactionEnvelope>(&text, payment::MAX_ENVELOPE_BYTES);
        let _ = decode_base64_exact::<stellar_xdr::DiagnosticEvent>(&text, payment::MAX_ENVELOPE_BYTES);
        let _ = payment::decode_exact::<stellar_xdr::SorobanTransactionData>(&bytes);
        let sponsor = [7u8; 32];
        let expected = Expected { asset: "C", pay_to: "G", amount: "1", sponsor: &sponsor };
        let _ = inspect(&payload(&text), &expected);
    }

    #[test]
    fn mutated_vector_envelopes_never_panic(index in 0usize..18, position in any::<usize>(), byte in any::<u8>()) {
        let vectors = vectors();
        let case = &vectors["cases"][index];
        let mut bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text(case, "transaction")).expect("base64");
        let at = position % bytes.len();
        bytes[at] = byte;
        let mutated = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes);
        let sponsor = sponsor(&vectors);
        let terms = &case["requirements"];
        let expected = Expected {
            asset: text(terms, "asset"),
            pay_to: text(terms, "payTo"),
            amount: text(terms, "amount"),
            sponsor: sponsor.public_key(),
        };
        if let Ok(transfer) = inspect(&payload(&mutated), &expected) {
            let network = network_id(text(&vectors, "passphrase"));
            let _ = payment::check_authorisations(&transfer, sponsor.public_key(), &network, u32::MAX);
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_strkey_and_base64_readers(text in "\\PC{0,120}") {
        let _ = Sponsor::from_secret(&text);
        let _ = decode_base64_exact::<TransactionEnvelope>(&text, payment::MAX_ENVELOPE_BYTES);
        let _ = payment::parse_amount(&text);
    }
}
