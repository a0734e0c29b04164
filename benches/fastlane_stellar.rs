//! Local costs of a Stellar `exact` payment before and after the chain calls: decoding the
//! envelope and the transfer checks, the authorisation signature check (valid and signed by
//! another key), and rebuilding plus signing the sponsor's settlement.

use std::hint::black_box;

use concert::fastlane::chains::stellar::payment::{
    Expected, Transfer, check_authorisations, decode_base64_exact, inspect, network_id,
};
use concert::fastlane::chains::stellar::settlement::{Sponsor, rebuild};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Map, Value};
use stellar_xdr::SorobanTransactionData;

const VECTORS: &str = include_str!("../tests/vectors/stellar.json");

fn payload(envelope: &str) -> Map<String, Value> {
    let mut payload = Map::new();
    payload.insert("transaction".to_owned(), Value::String(envelope.to_owned()));
    payload
}

fn stellar_exact(c: &mut Criterion) {
    let vectors: Value = serde_json::from_str(VECTORS).unwrap();
    let sponsor = Sponsor::from_secret(vectors["sponsorSecret"].as_str().unwrap()).unwrap();
    let network = network_id(vectors["passphrase"].as_str().unwrap());
    let case = |name: &str| {
        vectors["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|case| case["name"] == name)
            .unwrap()
            .clone()
    };
    let valid = case("valid");
    let terms = &valid["requirements"];
    let expected = Expected {
        asset: terms["asset"].as_str().unwrap(),
        pay_to: terms["payTo"].as_str().unwrap(),
        amount: terms["amount"].as_str().unwrap(),
        sponsor: sponsor.public_key(),
    };
    let valid_payload = payload(valid["transaction"].as_str().unwrap());
    let other_key = payload(
        case("auth signed by another key")["transaction"]
            .as_str()
            .unwrap(),
    );
    let transfer: Transfer = inspect(&valid_payload, &expected).unwrap();
    let forged: Transfer = inspect(&other_key, &expected).unwrap();
    assert!(check_authorisations(&transfer, sponsor.public_key(), &network, 1014).is_ok());
    assert!(check_authorisations(&forged, sponsor.public_key(), &network, 1014).is_err());
    let resources: SorobanTransactionData = decode_base64_exact(
        valid["simulation"]["transactionData"].as_str().unwrap(),
        1024,
    )
    .unwrap();

    c.bench_function("stellar/inspect", |b| {
        b.iter(|| inspect(black_box(&valid_payload), black_box(&expected)))
    });
    c.bench_function("stellar/authorisations_valid", |b| {
        b.iter(|| check_authorisations(black_box(&transfer), sponsor.public_key(), &network, 1014))
    });
    c.bench_function("stellar/authorisations_other_key", |b| {
        b.iter(|| check_authorisations(black_box(&forged), sponsor.public_key(), &network, 1014))
    });
    c.bench_function("stellar/rebuild_and_sign", |b| {
        b.iter(|| {
            rebuild(
                black_box(&transfer),
                resources.clone(),
                &sponsor,
                777_000,
                60,
                1_800_000_000,
                &network,
            )
        })
    });
}

criterion_group!(benches, stellar_exact);
criterion_main!(benches);
