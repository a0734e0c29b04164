use std::collections::HashMap;
use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::fastlane::settings::{example_fastlane, example_networks};

const STELLAR_PAY_TO: &str = "GCFIRY65OQE7DFP5KLNS2PF2LVZMUZYJX4OZIEQ36N2IQANUB5XVYOJR";
const STELLAR_SEED: &str = "SABAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAFNE7";
const HEDERA_SECRET: &str = "302e020100300506032b6570042204206666666666666666666666666666666666666666666666666666666666666666";

fn fastlane_path() -> PathBuf {
    PathBuf::from("/etc/concert/fastlane.json")
}

fn networks_path() -> PathBuf {
    PathBuf::from("/etc/concert/networks.json")
}

fn secrets() -> HashMap<String, String> {
    HashMap::from([
        (
            "CONCERT_STELLAR_FEE_SECRET".to_string(),
            STELLAR_SEED.to_string(),
        ),
        (
            "CONCERT_HEDERA_FEE_SECRET".to_string(),
            HEDERA_SECRET.to_string(),
        ),
    ])
}

/// A valid production pair with one offer on each chain.
fn base() -> (Value, Value) {
    let fastlane = json!({
        "enabled": true,
        "origin": "https://shop.example",
        "policy_url": "https://policy.example/screen",
        "merchant": "Shop",
        "terms_url": "https://shop.example/terms",
        "privacy_url": "/privacy",
        "refund_url": "https://shop.example/refunds",
        "offers": [
            {"label": "XRP", "requirements": {"scheme": "exact", "network": "xrpl:0", "amount": "1000000",
                "asset": "XRP", "payTo": "r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6", "maxTimeoutSeconds": 60,
                "extra": {"areFeesSponsored": false}}},
            {"label": "XLM", "requirements": {"scheme": "exact", "network": "stellar:pubnet", "amount": "10000000",
                "asset": "CAS3J7GYLGXMF6TDJBBYYSE3HQ6BBSMLNUQ34T6TZMYMW2EVH34XOWMA", "payTo": STELLAR_PAY_TO,
                "maxTimeoutSeconds": 60, "extra": {"areFeesSponsored": true}}},
            {"label": "HBAR", "requirements": {"scheme": "exact", "network": "hedera:mainnet", "amount": "100000000",
                "asset": "0.0.0", "payTo": "0.0.123", "maxTimeoutSeconds": 60, "extra": {"feePayer": "0.0.456"}}},
            {"label": "SOL", "requirements": {"scheme": "concert-native-sol", "network": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
                "amount": "10000000", "asset": "SOL", "payTo": "GyfFHe77pcZtdgGnWGw4T1VxCPB6JJyGLfjzMagDdsz3",
                "maxTimeoutSeconds": 120, "extra": {"areFeesSponsored": false}}}
        ],
        "collections": [
            {"id": "punks", "label": "Punks", "network": "xrpl:0", "collection": "r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6:7"}
        ],
        "listings": [
            {"id": "poster", "label": "Poster", "network": "xrpl:0", "price": "5000000"}
        ]
    });
    let networks = json!({
        "xrpl:0": {"rpc": "https://xrpl.example", "max_fee": "1000"},
        "stellar:pubnet": {"rpc": "https://soroban.example", "horizon": "https://horizon.example", "max_fee": 50000},
        "hedera:mainnet": {"mirror": "https://mirror.example", "fee_payer": "0.0.456", "max_fee_tinybars": "100000000"},
        "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp": {"rpc": "https://solana.example"}
    });
    (fastlane, networks)
}

fn check(fastlane: &Value, networks: &Value) -> Result<(), String> {
    check_with(fastlane, networks, &secrets())
}

fn check_with(
    fastlane: &Value,
    networks: &Value,
    env: &HashMap<String, String>,
) -> Result<(), String> {
    let parsed_fastlane = parse_fastlane(&fastlane_path(), fastlane.to_string().as_bytes())?;
    let parsed_networks = parse_networks(&networks_path(), networks.to_string().as_bytes())?;
    validate_networks(
        &networks_path(),
        &parsed_networks,
        parsed_fastlane.test_mode,
        Some(env as &dyn EnvSource),
    )?;
    validate_fastlane(
        &fastlane_path(),
        &parsed_fastlane,
        &networks_path(),
        &parsed_networks,
    )
}

/// Sets the key a JSON pointer names, adding it to its object when missing.
fn set(document: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    match document.pointer_mut(parent) {
        Some(Value::Object(object)) => {
            object.insert(key.to_string(), value);
        }
        Some(Value::Array(items)) => {
            let index: usize = key.parse().expect("an index");
            items[index] = value;
        }
        _ => panic!("no {parent}"),
    }
}

/// `pointer` set to `value` in the fastlane file must be refused, the error naming `needle`.
fn refused(pointer: &str, value: Value, needle: &str) -> String {
    let (mut fastlane, networks) = base();
    set(&mut fastlane, pointer, value);
    let error = check(&fastlane, &networks).expect_err(pointer);
    assert!(error.contains(needle), "{pointer}: {error}");
    error
}

fn refused_network(pointer: &str, value: Value, needle: &str) -> String {
    let (fastlane, mut networks) = base();
    set(&mut networks, pointer, value);
    let error = check(&fastlane, &networks).expect_err(pointer);
    assert!(error.contains(needle), "{pointer}: {error}");
    error
}

#[test]
fn the_base_files_and_the_printed_examples_are_valid() {
    let (fastlane, networks) = base();
    check(&fastlane, &networks).unwrap();
    let example: Value = serde_json::from_str(example_fastlane()).unwrap();
    let example_nets: Value = serde_json::from_str(example_networks()).unwrap();
    check_with(&example, &example_nets, &HashMap::new()).unwrap();
    let parsed = parse_fastlane(&fastlane_path(), example_fastlane().as_bytes()).unwrap();
    assert!(parsed.enabled && parsed.test_mode);
    assert!(
        parsed
            .offers
            .iter()
            .all(|offer| !is_mainnet(&offer.requirements.network))
    );
}

#[test]
fn errors_name_the_file_the_key_path_and_the_value() {
    let error = refused(
        "/offers/0/requirements/payTo",
        json!("rNotAnAddress"),
        "/etc/concert/fastlane.json: offers[0].requirements.payTo = \"rNotAnAddress\"",
    );
    assert!(error.contains("checksum"), "{error}");
}

#[test]
fn production_needs_a_policy_url_and_test_mode_refuses_mainnets() {
    refused("/policy_url", json!(""), "policy_url");
    let (mut fastlane, networks) = base();
    fastlane["test_mode"] = json!(true);
    let error = check(&fastlane, &networks).unwrap_err();
    for network in [
        "xrpl:0",
        "stellar:pubnet",
        "hedera:mainnet",
        "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
    ] {
        assert!(error.contains(network), "{network}: {error}");
    }
    assert!(error.contains("test mode refuses mainnet"), "{error}");
}

#[test]
fn the_origin_is_https_without_a_path_or_loopback_http_in_test_mode() {
    refused("/origin", json!("http://shop.example"), "origin");
    refused("/origin", json!("https://shop.example/shop"), "no path");
    refused(
        "/origin",
        json!("https://user:pw@shop.example"),
        "credentials",
    );
    refused("/origin", json!("http://127.0.0.1:8080"), "origin");
    let example: Value = serde_json::from_str(example_fastlane()).unwrap();
    let example_nets: Value = serde_json::from_str(example_networks()).unwrap();
    let mut remote = example.clone();
    remote["origin"] = json!("http://shop.example");
    let error = check_with(&remote, &example_nets, &HashMap::new()).unwrap_err();
    assert!(error.contains("loopback"), "{error}");
    let mut loopback_v6 = example;
    loopback_v6["origin"] = json!("http://[::1]:8080");
    check_with(&loopback_v6, &example_nets, &HashMap::new()).unwrap();
}

#[test]
fn numbers_and_texts_stay_in_range() {
    refused("/pass_seconds", json!(29), "pass_seconds = 29");
    refused("/pass_seconds", json!(3601), "30 to 3600");
    refused("/nft_pass_seconds", json!(61), "nft_pass_seconds");
    refused("/max_records", json!(99), "max_records");
    refused("/merchant", json!(""), "merchant");
    refused("/merchant", json!("m".repeat(121)), "merchant");
    refused("/terms_url", json!(""), "terms_url");
    refused("/privacy_url", json!("ftp://x.example"), "privacy_url");
    refused("/refund_url", json!("//evil.example/x"), "refund_url");
}

#[test]
fn amounts_are_atomic_units_within_int64() {
    for bad in ["0", "0100", "-5", "1.5", "9223372036854775808", "", "1e6"] {
        refused(
            "/offers/0/requirements/amount",
            json!(bad),
            "requirements.amount",
        );
    }
    let (mut fastlane, networks) = base();
    fastlane["offers"][0]["requirements"]["amount"] = json!("9223372036854775807");
    check(&fastlane, &networks).unwrap();
}

#[test]
fn timeouts_kinds_and_counts_are_bounded() {
    refused(
        "/offers/0/requirements/maxTimeoutSeconds",
        json!(29),
        "maxTimeoutSeconds",
    );
    refused(
        "/offers/0/requirements/maxTimeoutSeconds",
        json!(301),
        "30 to 300",
    );
    let (mut fastlane, networks) = base();
    let first = fastlane["offers"][0].clone();
    let mut copy = first.clone();
    copy["requirements"]["amount"] = json!("2000000");
    fastlane["offers"] = json!([first, copy]);
    let error = check(&fastlane, &networks).unwrap_err();
    assert!(error.contains("same scheme, network and asset"), "{error}");

    let (mut fastlane, networks) = base();
    let offer = fastlane["offers"][0].clone();
    fastlane["offers"] = Value::Array(vec![offer; 9]);
    let error = check(&fastlane, &networks).unwrap_err();
    assert!(error.contains("at most 8 offers"), "{error}");

    let (mut fastlane, networks) = base();
    fastlane["offers"] = json!([]);
    fastlane["collections"] = json!([]);
    fastlane["listings"] = json!([]);
    let error = check(&fastlane, &networks).unwrap_err();
    assert!(
        error.contains("at least one offer or collection"),
        "{error}"
    );
}

#[test]
fn unknown_networks_and_networks_missing_from_networks_json_are_refused() {
    refused(
        "/offers/0/requirements/network",
        json!("xrpl:9"),
        "unknown network",
    );
    let (fastlane, mut networks) = base();
    networks.as_object_mut().unwrap().remove("xrpl:0");
    let error = check(&fastlane, &networks).unwrap_err();
    assert!(
        error.contains("offers[0].requirements.network = \"xrpl:0\": has no entry in /etc/concert/networks.json"),
        "{error}"
    );
}

#[test]
fn xrpl_terms_follow_the_chain_table() {
    refused(
        "/offers/0/requirements/payTo",
        json!("r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG7"),
        "payTo",
    );
    refused("/offers/0/requirements/asset", json!("USD"), "must be XRP");
    refused("/offers/0/requirements/scheme", json!("upto"), "scheme");
    refused(
        "/offers/0/requirements/extra",
        json!({"areFeesSponsored": true}),
        "areFeesSponsored",
    );
    refused(
        "/offers/0/requirements/extra",
        json!({"areFeesSponsored": false, "memo": "x"}),
        "extra.memo",
    );
    refused(
        "/offers/0/requirements/extra",
        json!({"areFeesSponsored": false, "destinationTag": 4294967296u64}),
        "destinationTag",
    );
    refused(
        "/offers/0/requirements/extra",
        json!({"areFeesSponsored": false, "destinationTag": -1}),
        "destinationTag",
    );
    refused(
        "/offers/0/requirements/extra",
        json!({"areFeesSponsored": false, "invoiceId": ""}),
        "invoiceId",
    );
}

#[test]
fn large_destination_tags_are_read_exactly() {
    let (fastlane, networks) = base();
    let mut text = fastlane.to_string();
    text = text.replacen(
        "\"areFeesSponsored\":false}",
        "\"areFeesSponsored\":false,\"destinationTag\":4294967295}",
        1,
    );
    let parsed = parse_fastlane(&fastlane_path(), text.as_bytes()).unwrap();
    let tag = parsed.offers[0].requirements.extra.as_ref().unwrap()["destinationTag"].to_string();
    assert_eq!(tag, "4294967295");
    let float_tag = text.replacen("4294967295", "1.0", 1);
    let parsed = parse_fastlane(&fastlane_path(), float_tag.as_bytes()).unwrap();
    let nets = parse_networks(&networks_path(), networks.to_string().as_bytes()).unwrap();
    let error = validate_fastlane(&fastlane_path(), &parsed, &networks_path(), &nets).unwrap_err();
    assert!(error.contains("destinationTag"), "{error}");
}

#[test]
fn stellar_offers_need_the_native_asset_and_a_sponsor() {
    refused(
        "/offers/1/requirements/asset",
        json!("CDLZFC3SYJYDZT7K67VZ75HPJVIEUVNIXF47ZG2FB2RMQQVU2HHGCYSC"),
        "requirements.asset",
    );
    refused(
        "/offers/1/requirements/extra/areFeesSponsored",
        json!(false),
        "must be true",
    );
    refused(
        "/offers/1/requirements/payTo",
        json!("GCFIRY65OQE7DFP5KLNS2PF2LVZMUZYJX4OZIEQ36N2IQANUB5XVYOJS"),
        "payTo",
    );
    let (fastlane, networks) = base();
    let mut env = secrets();
    env.remove("CONCERT_STELLAR_FEE_SECRET");
    let error = check_with(&fastlane, &networks, &env).unwrap_err();
    assert!(
        error.contains("$CONCERT_STELLAR_FEE_SECRET") && error.contains("must be set"),
        "{error}"
    );
    env.insert("CONCERT_STELLAR_FEE_SECRET".into(), "not-a-seed".into());
    let error = check_with(&fastlane, &networks, &env).unwrap_err();
    assert!(
        !error.contains("not-a-seed"),
        "secrets are never printed: {error}"
    );
    let (fastlane, mut networks) = base();
    networks["stellar:pubnet"]["secret_env"] = json!("SHOP_XLM_SPONSOR");
    let error = check(&fastlane, &networks).unwrap_err();
    assert!(error.contains("$SHOP_XLM_SPONSOR"), "{error}");
    env.insert("SHOP_XLM_SPONSOR".into(), STELLAR_SEED.into());
    check_with(&fastlane, &networks, &env).unwrap();
}

#[test]
fn stellar_deposits_and_collections_need_horizon() {
    // The base Stellar offer pays a G… account, so it takes deposits, which read Horizon.
    let (fastlane, mut networks) = base();
    networks["stellar:pubnet"]
        .as_object_mut()
        .unwrap()
        .remove("horizon");
    let error = check(&fastlane, &networks).unwrap_err();
    assert!(
        error.contains("stellar:pubnet") && error.contains("horizon"),
        "{error}"
    );
    // Paid to a contract, the offer is x402 only, and payments need no Horizon.
    let mut contract_only = fastlane.clone();
    set(
        &mut contract_only,
        "/offers/1/requirements/payTo",
        json!("CAS3J7GYLGXMF6TDJBBYYSE3HQ6BBSMLNUQ34T6TZMYMW2EVH34XOWMA"),
    );
    check(&contract_only, &networks).unwrap();
    // A Stellar collection reads Horizon again.
    contract_only["collections"].as_array_mut().unwrap().push(json!(
        {"id": "stars", "label": "Stars", "network": "stellar:pubnet", "collection": "CAS3J7GYLGXMF6TDJBBYYSE3HQ6BBSMLNUQ34T6TZMYMW2EVH34XOWMA"}
    ));
    let error = check(&contract_only, &networks).unwrap_err();
    assert!(error.contains("horizon"), "{error}");
}

#[test]
fn hedera_fee_payers_are_set_distinct_from_pay_to_and_match_networks_json() {
    refused("/offers/2/requirements/extra", json!({}), "feePayer");
    refused(
        "/offers/2/requirements/extra/feePayer",
        json!("0.0.123"),
        "must differ from payTo",
    );
    refused(
        "/offers/2/requirements/extra/feePayer",
        json!("0.0.457"),
        "must equal hedera:mainnet.fee_payer",
    );
    refused("/offers/2/requirements/payTo", json!("0.1.123"), "payTo");
    refused_network("/hedera:mainnet/fee_payer", json!(""), "fee_payer");
    refused_network("/hedera:mainnet/mirror", json!(""), "mirror");
    refused_network(
        "/hedera:mainnet/max_fee_tinybars",
        json!(100_000_001),
        "at most 100000000",
    );
    let (fastlane, networks) = base();
    let mut env = secrets();
    env.remove("CONCERT_HEDERA_FEE_SECRET");
    let error = check_with(&fastlane, &networks, &env).unwrap_err();
    assert!(error.contains("CONCERT_HEDERA_FEE_SECRET"), "{error}");
}

#[test]
fn solana_terms_and_collections_follow_their_forms() {
    refused(
        "/offers/3/requirements/scheme",
        json!("exact"),
        "concert-native-sol",
    );
    refused(
        "/offers/3/requirements/payTo",
        json!("0.0.5"),
        "Solana address",
    );
    refused(
        "/collections/0/collection",
        json!("r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6"),
        "issuer:taxon",
    );
    refused(
        "/collections/0/id",
        json!("x".repeat(65)),
        "collections[0].id",
    );
}

#[test]
fn listings_need_an_offer_that_takes_deposits() {
    refused(
        "/offers/0/requirements/extra",
        json!({"areFeesSponsored": false, "destinationTag": 7}),
        "listings[0].network",
    );
    refused(
        "/listings/0/network",
        json!("hedera:testnet"),
        "listings[0].network",
    );
}

#[test]
fn endpoints_are_https_without_credentials_and_websockets_are_refused() {
    refused_network("/xrpl:0/rpc", json!("http://xrpl.example"), "https");
    refused_network("/xrpl:0/rpc", json!("http://127.0.0.1:5005"), "https");
    refused_network(
        "/xrpl:0/rpc",
        json!("https://user:secret@xrpl.example"),
        "credentials",
    );
    refused_network("/xrpl:0/ws", json!("wss://xrpl.example"), "websocket");
    refused_network("/xrpl:0/rpc", json!(""), "rpc");
    refused_network("/xrpl:0/max_fee", json!(1001), "at most 1000 drops");
    refused_network("/stellar:pubnet/max_fee", json!("50001"), "at most 50000");
    refused_network(
        "/stellar:pubnet/secret_env",
        json!("bad name"),
        "secret_env",
    );
}

#[test]
fn negative_or_fractional_fees_are_refused_when_read() {
    for bad in [
        json!(-1),
        json!("-1"),
        json!(1.5),
        json!(true),
        json!("ten"),
    ] {
        let (_, mut networks) = base();
        networks["xrpl:0"]["max_fee"] = bad.clone();
        let error = parse_networks(&networks_path(), networks.to_string().as_bytes()).unwrap_err();
        assert!(error.contains("xrpl:0.max_fee"), "{bad}: {error}");
    }
}

#[test]
fn files_are_read_strictly() {
    let error = parse_fastlane(&fastlane_path(), br#"{"enabled":true,"surprise":1}"#).unwrap_err();
    assert!(
        error.contains("surprise") && error.contains("fastlane.json"),
        "{error}"
    );
    let error = parse_fastlane(
        &fastlane_path(),
        br#"{"offers":[{"label":"x","requirements":{"scheme":"exact","network":"xrpl:1","amount":"1","asset":"XRP","payTo":"r","maxTimeoutSeconds":60,"color":"red"}}]}"#,
    )
    .unwrap_err();
    assert!(error.contains("offers[0].requirements"), "{error}");
    assert!(parse_fastlane(&fastlane_path(), b"[true]").is_err());
    assert!(parse_fastlane(&fastlane_path(), b"{} {}").is_err());
    assert!(parse_fastlane(&fastlane_path(), br#"{"enabled":true,"enabled":false}"#).is_err());
    let mut big = b"{\"merchant\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'a', MAX_FILE_BYTES));
    big.extend(b"\"}");
    let error = parse_fastlane(&fastlane_path(), &big).unwrap_err();
    assert!(error.contains("1 MiB"), "{error}");
    let error = parse_networks(
        &networks_path(),
        br#"{"xrpl:1":{"rpc":"https://x","grpc":"y"}}"#,
    )
    .unwrap_err();
    assert!(error.contains("grpc"), "{error}");
}

#[test]
fn a_disabled_lane_is_not_checked_further() {
    let parsed = parse_fastlane(
        &fastlane_path(),
        br#"{"enabled":false,"origin":"nonsense"}"#,
    )
    .unwrap();
    validate_fastlane(
        &fastlane_path(),
        &parsed,
        &networks_path(),
        &NetworksSettings::new(),
    )
    .unwrap();
}

#[test]
fn both_files_load_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let fastlane = dir.path().join(FASTLANE_FILE);
    let networks = dir.path().join(NETWORKS_FILE);
    std::fs::write(&fastlane, example_fastlane()).unwrap();
    std::fs::write(&networks, example_networks()).unwrap();
    let (loaded, nets) = load_files(&fastlane, &networks, &HashMap::new()).unwrap();
    assert_eq!(loaded.offers.len(), 2);
    assert_eq!(nets.len(), 2);
    std::fs::remove_file(&networks).unwrap();
    let error = load_files(&fastlane, &networks, &HashMap::new()).unwrap_err();
    assert!(error.contains("networks.json"), "{error}");
}

proptest! {
    #[test]
    fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_fastlane(&fastlane_path(), &bytes);
        let _ = parse_networks(&networks_path(), &bytes);
    }

    #[test]
    fn validating_parsed_text_never_panics(text in "\\{\"(enabled|origin|offers|merchant)\":(true|\"[a-z:/.]{0,20}\"|\\[\\]|1)\\}") {
        if let Ok(parsed) = parse_fastlane(&fastlane_path(), text.as_bytes()) {
            let _ = validate_fastlane(&fastlane_path(), &parsed, &networks_path(), &NetworksSettings::new());
        }
    }
}
