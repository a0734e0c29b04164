//! Admission-pass and asset-tier costs on the request path: verifying a `concert_admit` value
//! (valid and forged), minting one, and admitting an asset request through the per-pass and the
//! global pool (and releasing both).

use std::hint::black_box;
use std::time::Duration;

use concert::admission::assets::{AssetSettings, AssetTier, Family};
use concert::admission::pass::{PassSigner, unix_now};
use criterion::{Criterion, criterion_group, criterion_main};

fn pass_verify(c: &mut Criterion) {
    let signer = PassSigner::new(&[b'k'; 40], None);
    let now = unix_now();
    let id = [7u8; 16];
    let valid = signer.mint(&id, now + 600);
    let forged = format!("{}A", &valid[..valid.len() - 1]);
    c.bench_function("pass/verify_valid", |b| {
        b.iter(|| signer.verify(black_box(&valid), black_box(now)))
    });
    c.bench_function("pass/verify_forged", |b| {
        b.iter(|| signer.verify(black_box(&forged), black_box(now)))
    });
    c.bench_function("pass/mint", |b| {
        b.iter(|| signer.mint(black_box(&id), black_box(now + 600)))
    });
}

fn asset_admission(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let tier = AssetTier::build(
        AssetSettings {
            user_cap_h1: 8,
            user_cap_h2: 128,
            user_wait: Duration::from_secs(2),
            global_cap: 55_552,
            global_wait: Duration::from_secs(2),
            admit_ttl: Duration::from_secs(600),
            client_proto_header: String::new(),
        },
        None,
    );
    // Many known passes, as on a busy site: the lookup is one shard of the store.
    for n in 0..10_000u32 {
        let mut id = [0u8; 16];
        id[..4].copy_from_slice(&n.to_le_bytes());
        drop(runtime.block_on(tier.admit_private(&id, Family::H1)));
    }
    let id = [42u8; 16];
    c.bench_function("assets/admit_private_and_release", |b| {
        b.iter(|| {
            let hold = runtime.block_on(tier.admit_private(black_box(&id), Family::H2));
            drop(black_box(hold));
        })
    });
    c.bench_function("assets/admit_public_and_release", |b| {
        b.iter(|| drop(black_box(runtime.block_on(tier.admit_public()))))
    });
}

criterion_group!(benches, pass_verify, asset_admission);
criterion_main!(benches);
