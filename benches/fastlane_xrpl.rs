//! What checking a payer's signed XRPL Payment costs before any ledger call: decoding the
//! blob strictly and verifying its signature, for both key types of the reference vectors.

use std::hint::black_box;

use concert::fastlane::chains::xrpl::{codec, keys};
use criterion::{Criterion, criterion_group, criterion_main};

const VECTORS: &str = include_str!("../tests/vectors/xrpl.json");

fn blob(name: &str) -> Vec<u8> {
    let vectors: serde_json::Value = serde_json::from_str(VECTORS).unwrap_or_default();
    let case = vectors["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|c| c["name"] == name))
        .cloned()
        .unwrap_or_default();
    hex::decode(case["blob"].as_str().unwrap_or_default()).unwrap_or_default()
}

fn decode_and_verify(c: &mut Criterion) {
    for (label, name) in [
        ("xrpl/decode_verify_secp256k1", "valid secp256k1"),
        ("xrpl/decode_verify_ed25519", "valid ed25519"),
    ] {
        let bytes = blob(name);
        assert!(
            codec::decode(&bytes).is_ok_and(|tx| keys::verify_transaction(&tx)),
            "{name} must verify"
        );
        c.bench_function(label, |b| {
            b.iter(|| {
                let tx = codec::decode(black_box(&bytes));
                tx.is_ok_and(|tx| keys::verify_transaction(&tx))
            })
        });
    }
    let bytes = blob("valid secp256k1");
    c.bench_function("xrpl/decode_only", |b| {
        b.iter(|| codec::decode(black_box(&bytes)).is_ok())
    });
}

criterion_group!(benches, decode_and_verify);
criterion_main!(benches);
