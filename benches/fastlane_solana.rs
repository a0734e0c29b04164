//! Local costs of a `concert-native-sol` payment before any chain call: decoding the payload
//! and every check including the ed25519 signature (valid and tampered), the strict decode
//! alone, and the metadata-address search NFT admission uses.

use std::hint::black_box;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use concert::fastlane::chains::solana::nft::metadata_address;
use concert::fastlane::chains::solana::transfer::{TransferTerms, inspect_payload, parse_key};
use concert::fastlane::chains::solana::wire::Transaction;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Map, Value};

const VECTORS: &str = include_str!("../tests/vectors/solana.json");

fn payload(tx: &str) -> Map<String, Value> {
    let mut payload = Map::new();
    payload.insert("transaction".to_owned(), Value::String(tx.to_owned()));
    payload
}

fn native_sol(c: &mut Criterion) {
    let vectors: Value = serde_json::from_str(VECTORS).unwrap();
    let terms = TransferTerms {
        pay_to: parse_key(vectors["requirements"]["payTo"].as_str().unwrap()).unwrap(),
        lamports: 1_500_000,
    };
    let case = |name: &str| {
        vectors["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|case| case["name"] == name)
            .and_then(|case| case["tx"].as_str())
            .unwrap()
            .to_owned()
    };
    let valid = payload(&case("valid transfer"));
    let corrupted = payload(&case("corrupted signature"));
    let wire = STANDARD.decode(case("valid transfer")).unwrap();
    assert!(inspect_payload(&valid, &terms).is_ok());
    assert!(inspect_payload(&corrupted, &terms).is_err());

    c.bench_function("solana/inspect_valid", |b| {
        b.iter(|| inspect_payload(black_box(&valid), black_box(&terms)))
    });
    c.bench_function("solana/inspect_bad_signature", |b| {
        b.iter(|| inspect_payload(black_box(&corrupted), black_box(&terms)))
    });
    c.bench_function("solana/decode_only", |b| {
        b.iter(|| Transaction::decode(black_box(&wire)))
    });
    let mint = parse_key(vectors["pdas"][0]["mint"].as_str().unwrap()).unwrap();
    c.bench_function("solana/metadata_address", |b| {
        b.iter(|| metadata_address(black_box(&mint)))
    });
}

criterion_group!(benches, native_sol);
criterion_main!(benches);
