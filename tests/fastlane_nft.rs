//! NFT admission end to end: the fast lane's service on a real listener, the real gateway
//! with the built-in lookups of all four chains, and each chain's read API answered by a
//! loopback fake (tests/support/nft_chains.rs). Wallets sign the issued challenges with
//! real keys: the XRPL vector seeds, and fixed ed25519 / secp256k1 keys elsewhere.

#[path = "support/browser.rs"]
mod browser;
#[path = "support/nft_chains.rs"]
mod nft_chains;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::ConnectInfo;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use concert::fastlane::chains::BuiltIn;
use concert::fastlane::chains::solana::nft::metadata_address;
use concert::fastlane::chains::xrpl::keys::KeyPair;
use concert::fastlane::gateway::{Gateway, SettlementJournal, build_lookups};
use concert::fastlane::service::clock::now_unix;
use concert::fastlane::service::{FastLane, FastLaneOptions, GrantKind};
use concert::fastlane::settings::{
    Collection, FastlaneSettings, NetworkSettings, NetworksSettings,
};
use ed25519_dalek::{Signer as _, SigningKey};
use http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use nft_chains::{Hedera, Solana, Stellar, Xrpl, XrplAccount};

const SECRET: &[u8] = b"an admit secret of at least 32 bytes!!";
const SOLANA_DEVNET: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
/// The XRPL collection's issuer and taxon.
const XRPL_ISSUER: &str = "rn5W85Srey74NZyxtLUiusSGtaiK37agos";
const XRPL_TOKEN: &str = "000800006B7E7C5F0F2D6B3C3A5C1E7F8E9D0A1B2C3D4E5F0000000000000001";
const HEDERA_TOKEN: &str = "0.0.5005";
const NFT_PASS_SECONDS: u64 = 5;

fn vector_keys() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/xrpl.json"
    ))
    .unwrap();
    let vectors: Value = serde_json::from_str(&text).unwrap();
    vectors["keys"].as_array().unwrap().clone()
}

/// An XRPL key of the vectors: (key pair, address, public key hex).
fn xrpl_key(index: usize) -> (KeyPair, String, String) {
    let key = &vector_keys()[index];
    let pair = KeyPair::from_seed(key["seed"].as_str().unwrap()).unwrap();
    (
        pair,
        key["address"].as_str().unwrap().to_owned(),
        key["publicKey"].as_str().unwrap().to_owned(),
    )
}

fn stellar_key(seed: u8) -> (SigningKey, String) {
    let key = SigningKey::from_bytes(&[seed; 32]);
    let address = stellar_strkey::ed25519::PublicKey(key.verifying_key().to_bytes())
        .to_string()
        .as_str()
        .to_owned();
    (key, address)
}

fn stellar_contract(seed: u8) -> String {
    stellar_strkey::Contract([seed; 32])
        .to_string()
        .as_str()
        .to_owned()
}

fn sep53_sign(key: &SigningKey, message: &str) -> Vec<u8> {
    let digest = Sha256::new()
        .chain_update(b"Stellar Signed Message:\n")
        .chain_update(message.as_bytes())
        .finalize();
    key.sign(&digest).to_bytes().to_vec()
}

fn solana_key(seed: u8) -> (SigningKey, String) {
    let key = SigningKey::from_bytes(&[seed; 32]);
    let address = bs58::encode(key.verifying_key().to_bytes()).into_string();
    (key, address)
}

struct Chains {
    xrpl: Arc<Xrpl>,
    stellar: Arc<Stellar>,
    hedera: Arc<Hedera>,
    solana: Arc<Solana>,
    networks: NetworksSettings,
}

async fn start_chains() -> Chains {
    let (xrpl_url, xrpl) = nft_chains::start_xrpl().await;
    let (stellar_rpc, horizon, stellar) = nft_chains::start_stellar().await;
    let (mirror, hedera) = nft_chains::start_hedera().await;
    let (solana_url, solana) = nft_chains::start_solana().await;
    let mut networks = NetworksSettings::new();
    networks.insert(
        "xrpl:1".into(),
        NetworkSettings {
            rpc: xrpl_url,
            ..NetworkSettings::default()
        },
    );
    networks.insert(
        "stellar:testnet".into(),
        NetworkSettings {
            rpc: stellar_rpc,
            horizon,
            ..NetworkSettings::default()
        },
    );
    networks.insert(
        "hedera:testnet".into(),
        NetworkSettings {
            mirror,
            ..NetworkSettings::default()
        },
    );
    networks.insert(
        SOLANA_DEVNET.into(),
        NetworkSettings {
            rpc: solana_url,
            ..NetworkSettings::default()
        },
    );
    Chains {
        xrpl,
        stellar,
        hedera,
        solana,
        networks,
    }
}

fn collection(id: &str, network: &str, collection: &str) -> Collection {
    Collection {
        id: id.into(),
        label: format!("{id} members"),
        network: network.into(),
        collection: collection.into(),
    }
}

fn settings(origin: &str) -> FastlaneSettings {
    FastlaneSettings {
        enabled: true,
        origin: origin.into(),
        gateway_url: String::new(),
        policy_url: String::new(),
        test_mode: true,
        pass_seconds: 60,
        nft_pass_seconds: NFT_PASS_SECONDS,
        max_records: 1000,
        merchant: "Example Tickets".into(),
        terms_url: "https://example.test/terms".into(),
        privacy_url: "https://example.test/privacy".into(),
        refund_url: "https://example.test/refund".into(),
        offers: vec![],
        collections: vec![
            collection("xrpl-club", "xrpl:1", &format!("{XRPL_ISSUER}:7")),
            collection("stellar-club", "stellar:testnet", &stellar_contract(40)),
            collection("hedera-club", "hedera:testnet", HEDERA_TOKEN),
            collection(
                "solana-club",
                SOLANA_DEVNET,
                &solana_key(50).1, // the collection mint
            ),
        ],
        listings: vec![],
    }
}

struct Lane {
    base: String,
    lane: Arc<FastLane>,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.server.abort();
        self.lane.close();
    }
}

async fn start_lane(networks: &NetworksSettings, entry_ttl: Duration) -> Lane {
    start_screened_lane(networks, entry_ttl, "").await
}

const POLICY_TOKEN: &str = "policy-token-of-at-least-thirty-two-chars";

/// A policy service that answers every screening with `decision` and keeps the questions.
async fn policy_server(decision: &'static str) -> (String, Arc<parking_lot::Mutex<Vec<Value>>>) {
    let asked: Arc<parking_lot::Mutex<Vec<Value>>> = Arc::default();
    let kept = asked.clone();
    let app = axum::Router::new().route(
        "/screen",
        axum::routing::post(move |body: axum::Json<Value>| {
            let kept = kept.clone();
            async move {
                kept.lock().push(body.0);
                axum::Json(json!({
                    "decision": decision,
                    "assessment_id": "assessment-nft",
                    "expires_at": concert::fastlane::service::clock::format_rfc3339(now_unix() + 300),
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/screen", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, asked)
}

async fn start_screened_lane(
    networks: &NetworksSettings,
    entry_ttl: Duration,
    policy_url: &str,
) -> Lane {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut settings = settings(&base);
    settings.policy_url = policy_url.to_owned();
    let built = BuiltIn::new();
    let lookups = build_lookups(&settings, networks, |network, entry| {
        built.lookups(network, entry)
    })
    .unwrap();
    assert_eq!(lookups.len(), 4, "one lookup per collection network");
    let journal = SettlementJournal::open(dir.path()).unwrap();
    let gateway = Gateway::new(&settings, vec![], journal)
        .unwrap()
        .with_lookups(lookups);
    let lane = FastLane::new(FastLaneOptions {
        settings,
        data_dir: dir.path(),
        admit_secret: SECRET,
        facilitator: Arc::new(gateway),
        policy_token: POLICY_TOKEN,
        entry_ttl,
        skip_url: "/skip",
        line: None,
    })
    .unwrap();
    let served = lane.clone();
    let app = axum::Router::new().fallback(
        move |ConnectInfo(peer): ConnectInfo<SocketAddr>, req: http::Request<axum::body::Body>| {
            let lane = served.clone();
            async move {
                let client = req
                    .headers()
                    .get("x-test-client")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<IpAddr>().ok())
                    .unwrap_or(peer.ip());
                lane.handle(req, client).await
            }
        },
    );
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    Lane {
        base,
        lane,
        server,
        _dir: dir,
    }
}

/// One visitor with a session, posing as an address of its own.
struct Visitor {
    http: reqwest::Client,
    base: String,
    csrf: String,
    token: String,
}

impl Visitor {
    async fn new(lane: &Lane) -> Visitor {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let address = format!("10.2.{}.{}", n / 250, n % 250 + 1);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("origin", lane.base.parse().unwrap());
        headers.insert("x-test-client", address.parse().unwrap());
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .default_headers(headers)
            .build()
            .unwrap();
        let response = http
            .post(format!("{}/_concert/session", lane.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        Visitor {
            http,
            base: lane.base.clone(),
            csrf: body["csrf"].as_str().unwrap().to_owned(),
            token: body["session"].as_str().unwrap().to_owned(),
        }
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("x-concert-csrf", &self.csrf)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn challenge(&self, rule: &str, address: &str, token: &str) -> (u16, Value) {
        self.post(
            "/_concert/nft/challenge",
            json!({"rule": rule, "address": address, "token_id": token}),
        )
        .await
    }

    async fn verify(&self, nonce: &str, signature: &[u8], public_key: &str) -> (u16, Value) {
        self.post(
            "/_concert/nft/verify",
            json!({"nonce": nonce, "signature": STANDARD.encode(signature), "public_key": public_key}),
        )
        .await
    }

    async fn status(&self) -> Value {
        self.http
            .get(format!("{}/_concert/status", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "cookie",
            HeaderValue::try_from(format!("concert_fastlane={}", self.token)).unwrap(),
        );
        headers
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap()
}

/// An XRPL holder: the secp256k1 vector account holds token 1 of `issuer:7` (on the second
/// page, behind tokens of other collections).
fn xrpl_holder(chains: &Chains) -> (KeyPair, String, String) {
    let (pair, address, public_key) = xrpl_key(0);
    chains.xrpl.accounts.lock().insert(
        address.clone(),
        XrplAccount {
            flags: 0,
            regular_key: None,
            nfts: vec![
                ("00080000AA".into(), XRPL_ISSUER.into(), 8),
                (
                    "00080000BB".into(),
                    "rLdECbGnrafJhq1jXPmvLuWTUhFpSfgfo3".into(),
                    7,
                ),
                (XRPL_TOKEN.into(), XRPL_ISSUER.into(), 7),
            ],
        },
    );
    (pair, address, public_key)
}

#[tokio::test]
async fn case8_an_xrpl_holder_gets_a_lease_that_ends_at_its_ttl() {
    let chains = start_chains().await;
    let (pair, address, public_key) = xrpl_holder(&chains);
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let visitor = Visitor::new(&lane).await;

    let config: Value = visitor
        .http
        .get(format!("{}/_concert/config", lane.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rules: Vec<&str> = config["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| text(&c["id"]))
        .collect();
    assert_eq!(
        rules,
        ["xrpl-club", "stellar-club", "hedera-club", "solana-club"]
    );
    assert_eq!(config["collections"][3]["token"], "required");

    let (status, challenge) = visitor.challenge("xrpl-club", &address, XRPL_TOKEN).await;
    assert_eq!(status, 200, "{challenge}");
    assert_eq!(challenge["network"], "xrpl:1");
    assert_eq!(challenge["rule"], "xrpl-club");
    let message = text(&challenge["message"]);
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(lines[0], "Concert NFT admission v1");
    assert_eq!(lines[1], format!("Origin: {}", lane.base));
    assert_eq!(lines[3], format!("Wallet: {address}"));
    assert_eq!(lines[5], format!("Token: {XRPL_TOKEN}"));
    assert!(lines[10].starts_with("Purpose:") && lines[10].contains("no payment"));

    let signature = pair.sign(message.as_bytes());
    let (status, verdict) = visitor
        .verify(text(&challenge["nonce"]), &signature, &public_key)
        .await;
    assert_eq!(status, 200, "{verdict}");
    assert_eq!(verdict["kind"], "nft");
    assert_eq!(verdict["owner"], address.as_str());
    assert!(
        chains.xrpl.nft_pages.load(Ordering::SeqCst) >= 2,
        "the token sat on the second page"
    );

    let status = visitor.status().await;
    assert_eq!(status["eligible"], true);
    assert_eq!(status["kind"], "nft");

    let now = now_unix();
    let grant = lane.lane.eligible(&visitor.headers(), now).unwrap();
    assert_eq!(grant.kind, GrantKind::Nft);
    assert!(grant.expires <= now + NFT_PASS_SECONDS);
    // Without entry windows the lease is all there is: it ends on time.
    assert!(
        lane.lane
            .eligible(&visitor.headers(), now + NFT_PASS_SECONDS + 1)
            .is_none()
    );
    // Another session holds nothing.
    let stranger = Visitor::new(&lane).await;
    assert!(lane.lane.eligible(&stranger.headers(), now).is_none());
    assert_eq!(stranger.status().await["eligible"], false);
    // And on the clock: once the lease's seconds have passed, status says so.
    tokio::time::sleep(Duration::from_secs(NFT_PASS_SECONDS + 1)).await;
    let status = visitor.status().await;
    assert_eq!(status["eligible"], false, "{status}");
}

#[tokio::test]
async fn case8_an_nft_lease_opens_an_entry_window_that_outlasts_it() {
    let chains = start_chains().await;
    let (pair, address, public_key) = xrpl_holder(&chains);
    let lane = start_lane(&chains.networks, Duration::from_secs(300)).await;
    let visitor = Visitor::new(&lane).await;
    let (_, challenge) = visitor.challenge("xrpl-club", &address, "").await;
    let signature = pair.sign(text(&challenge["message"]).as_bytes());
    let (status, _) = visitor
        .verify(text(&challenge["nonce"]), &signature, &public_key)
        .await;
    assert_eq!(status, 200);
    let now = now_unix();
    // Status never opens a window.
    assert!(
        lane.lane
            .eligible(&visitor.headers(), now + NFT_PASS_SECONDS + 1)
            .is_none()
    );
    let grant = lane.lane.eligible(&visitor.headers(), now).unwrap();
    assert_eq!(grant.kind, GrantKind::Nft);
    assert!(grant.expires >= now + 300);
    let later = lane
        .lane
        .eligible(&visitor.headers(), now + NFT_PASS_SECONDS + 1)
        .unwrap();
    assert_eq!(later.kind, GrantKind::Window);
    assert!(
        lane.lane
            .eligible(&visitor.headers(), now + 301 + NFT_PASS_SECONDS)
            .is_none()
    );
}

#[tokio::test]
async fn case8_foreign_and_reused_challenges_are_401_and_other_owners_403() {
    let chains = start_chains().await;
    let (pair, address, public_key) = xrpl_holder(&chains);
    // The ed25519 vector account exists but holds nothing of the collection.
    let (other_pair, other_address, other_key) = xrpl_key(1);
    chains
        .xrpl
        .accounts
        .lock()
        .insert(other_address.clone(), XrplAccount::default());
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let owner = Visitor::new(&lane).await;
    let thief = Visitor::new(&lane).await;

    let (_, challenge) = owner.challenge("xrpl-club", &address, "").await;
    let nonce = text(&challenge["nonce"]);
    let signature = pair.sign(text(&challenge["message"]).as_bytes());
    // Another session cannot redeem it, and trying does not burn it.
    let (status, body) = thief.verify(nonce, &signature, &public_key).await;
    assert_eq!(
        (status, body),
        (401, json!({"error": "challenge_expired_or_used"}))
    );
    let (status, _) = owner.verify(nonce, &signature, &public_key).await;
    assert_eq!(status, 200);
    let (status, body) = owner.verify(nonce, &signature, &public_key).await;
    assert_eq!(
        (status, body),
        (401, json!({"error": "challenge_expired_or_used"}))
    );
    let (status, _) = owner.verify("no-such-nonce", &signature, &public_key).await;
    assert_eq!(status, 401);

    // A wallet without the NFT.
    let (_, challenge) = thief.challenge("xrpl-club", &other_address, "").await;
    let signature = other_pair.sign(text(&challenge["message"]).as_bytes());
    let (status, body) = thief
        .verify(text(&challenge["nonce"]), &signature, &other_key)
        .await;
    assert_eq!(
        (status, body),
        (403, json!({"error": "ownership_not_verified"}))
    );

    // Claiming the holder's wallet with another key.
    let (_, challenge) = thief.challenge("xrpl-club", &address, "").await;
    let signature = other_pair.sign(text(&challenge["message"]).as_bytes());
    let (status, _) = thief
        .verify(text(&challenge["nonce"]), &signature, &other_key)
        .await;
    assert_eq!(status, 403);

    // The holder's key over a message other than the challenge.
    let (_, challenge) = thief.challenge("xrpl-club", &address, "").await;
    let signature = pair.sign(b"Concert NFT admission v1\nsomething else");
    let (status, _) = thief
        .verify(text(&challenge["nonce"]), &signature, &public_key)
        .await;
    assert_eq!(status, 403);

    // A token id the holder does not hold.
    let (_, challenge) = thief
        .challenge("xrpl-club", &address, "00080000FFFFFFFF")
        .await;
    let signature = pair.sign(text(&challenge["message"]).as_bytes());
    let (status, _) = thief
        .verify(text(&challenge["nonce"]), &signature, &public_key)
        .await;
    assert_eq!(status, 403);
    assert!(lane.lane.eligible(&thief.headers(), now_unix()).is_none());
}

#[tokio::test]
async fn xrpl_regular_keys_count_and_disabled_master_keys_do_not() {
    let chains = start_chains().await;
    let (master, address, master_key) = xrpl_key(0);
    let (regular, regular_address, regular_key) = xrpl_key(2);
    chains.xrpl.accounts.lock().insert(
        address.clone(),
        XrplAccount {
            flags: 0x0010_0000,
            regular_key: Some(regular_address),
            nfts: vec![(XRPL_TOKEN.into(), XRPL_ISSUER.into(), 7)],
        },
    );
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let visitor = Visitor::new(&lane).await;

    let (_, challenge) = visitor.challenge("xrpl-club", &address, "").await;
    let signature = master.sign(text(&challenge["message"]).as_bytes());
    let (status, _) = visitor
        .verify(text(&challenge["nonce"]), &signature, &master_key)
        .await;
    assert_eq!(status, 403, "the master key is disabled");

    let (_, challenge) = visitor.challenge("xrpl-club", &address, "").await;
    let signature = regular.sign(text(&challenge["message"]).as_bytes());
    let (status, body) = visitor
        .verify(text(&challenge["nonce"]), &signature, &regular_key)
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn case13_solana_without_a_mint_and_stellar_with_a_token_are_400() {
    let chains = start_chains().await;
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let visitor = Visitor::new(&lane).await;
    let (_, wallet) = solana_key(1);
    let (status, body) = visitor.challenge("solana-club", &wallet, "").await;
    assert_eq!((status, body), (400, json!({"error": "nft_mint_required"})));
    let (_, g_address) = stellar_key(1);
    let (status, body) = visitor.challenge("stellar-club", &g_address, "5").await;
    assert_eq!(
        (status, body),
        (400, json!({"error": "token_not_supported_for_collection"}))
    );
    let (status, body) = visitor.challenge("no-such-rule", &g_address, "").await;
    assert_eq!(
        (status, body),
        (400, json!({"error": "unknown_collection_rule"}))
    );
    for (address, token) in [
        ("rAddr\nNetwork: xrpl:0", ""),
        ("rAddress", "1\r\nWallet: rOther"),
        ("rAdd\0ress", ""),
        ("ab", ""),
    ] {
        let (status, body) = visitor.challenge("xrpl-club", address, token).await;
        assert_eq!(
            (status, body),
            (400, json!({"error": "invalid_wallet_request"})),
            "{address:?} {token:?}"
        );
    }
    let (status, _) = visitor
        .post(
            "/_concert/nft/challenge",
            json!({"rule": "xrpl-club", "address": "rAddress", "extra": 1}),
        )
        .await;
    assert_eq!(status, 400, "unknown fields are refused");
}

/// A Solana holder of `mint` (in the rule's collection unless `collection` says otherwise).
fn solana_nft(
    chains: &Chains,
    owner: &str,
    mint_seed: u8,
    collection: Option<(bool, [u8; 32])>,
) -> String {
    let (_, mint) = solana_key(mint_seed);
    let mint_bytes: [u8; 32] = bs58::decode(&mint).into_vec().unwrap().try_into().unwrap();
    chains.solana.add_mint(&mint, 1, 0);
    let (pda, _) = metadata_address(&mint_bytes).unwrap();
    let rule_collection: [u8; 32] = bs58::decode(solana_key(50).1)
        .into_vec()
        .unwrap()
        .try_into()
        .unwrap();
    chains.solana.add_metadata(
        &bs58::encode(pda).into_string(),
        &mint_bytes,
        collection.or(Some((true, rule_collection))),
    );
    chains
        .solana
        .holdings
        .lock()
        .insert((owner.to_owned(), mint.clone()), 1);
    mint
}

#[tokio::test]
async fn case13_solana_holders_pass_and_a_mint_of_another_collection_is_403() {
    let chains = start_chains().await;
    let (key, wallet) = solana_key(1);
    let member = solana_nft(&chains, &wallet, 60, None);
    let outsider = solana_nft(&chains, &wallet, 61, Some((true, [7; 32])));
    let unverified = solana_nft(
        &chains,
        &wallet,
        62,
        Some((false, {
            let bytes: [u8; 32] = bs58::decode(solana_key(50).1)
                .into_vec()
                .unwrap()
                .try_into()
                .unwrap();
            bytes
        })),
    );
    let not_held = solana_nft(
        &chains,
        "SomeoneElse1111111111111111111111111111111",
        63,
        None,
    );
    // A fungible mint: supply above one.
    let (_, fungible) = solana_key(64);
    chains.solana.add_mint(&fungible, 1000, 0);
    chains
        .solana
        .holdings
        .lock()
        .insert((wallet.clone(), fungible.clone()), 1);
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let visitor = Visitor::new(&lane).await;

    for mint in [&outsider, &unverified, &not_held, &fungible] {
        let (status, challenge) = visitor.challenge("solana-club", &wallet, mint).await;
        assert_eq!(status, 200);
        let signature = key.sign(text(&challenge["message"]).as_bytes()).to_bytes();
        let (status, body) = visitor
            .verify(text(&challenge["nonce"]), &signature, &wallet)
            .await;
        assert_eq!(
            (status, body),
            (403, json!({"error": "ownership_not_verified"})),
            "mint {mint}"
        );
    }
    let (_, challenge) = visitor.challenge("solana-club", &wallet, &member).await;
    let signature = key.sign(text(&challenge["message"]).as_bytes()).to_bytes();
    let (status, body) = visitor
        .verify(text(&challenge["nonce"]), &signature, "")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        lane.lane
            .eligible(&visitor.headers(), now_unix())
            .unwrap()
            .kind,
        GrantKind::Nft
    );
}

#[tokio::test]
async fn stellar_holders_pass_on_a_positive_balance_with_an_authorised_master_key() {
    let chains = start_chains().await;
    let (key, wallet) = stellar_key(7);
    let (weak_key, weak_wallet) = stellar_key(8);
    let (empty_key, empty_wallet) = stellar_key(9);
    let contract = stellar_contract(40);
    chains.stellar.accounts.lock().extend([
        (wallet.clone(), (1, 0)),
        (weak_wallet.clone(), (1, 2)),
        (empty_wallet.clone(), (1, 0)),
    ]);
    chains.stellar.balances.lock().extend([
        ((contract.clone(), wallet.clone()), 1),
        ((contract.clone(), weak_wallet.clone()), 3),
        ((contract.clone(), empty_wallet.clone()), 0),
    ]);
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let visitor = Visitor::new(&lane).await;

    for (signer, address) in [(&weak_key, &weak_wallet), (&empty_key, &empty_wallet)] {
        let (_, challenge) = visitor.challenge("stellar-club", address, "").await;
        let signature = sep53_sign(signer, text(&challenge["message"]));
        let (status, _) = visitor
            .verify(text(&challenge["nonce"]), &signature, "")
            .await;
        assert_eq!(status, 403, "{address}");
    }
    // A raw ed25519 signature (no SEP-53 prefix) is not a SEP-53 signature.
    let (_, challenge) = visitor.challenge("stellar-club", &wallet, "").await;
    let raw = key.sign(text(&challenge["message"]).as_bytes()).to_bytes();
    let (status, _) = visitor.verify(text(&challenge["nonce"]), &raw, "").await;
    assert_eq!(status, 403);

    let (_, challenge) = visitor.challenge("stellar-club", &wallet, "").await;
    let signature = sep53_sign(&key, text(&challenge["message"]));
    let (status, body) = visitor
        .verify(text(&challenge["nonce"]), &signature, &wallet)
        .await;
    assert_eq!(status, 200, "{body}");

    // Horizon on another network: no verdict at all.
    *chains.stellar.horizon_passphrase.lock() =
        "Public Global Stellar Network ; September 2015".into();
    let (_, challenge) = visitor.challenge("stellar-club", &wallet, "").await;
    let signature = sep53_sign(&key, text(&challenge["message"]));
    let (status, body) = visitor
        .verify(text(&challenge["nonce"]), &signature, &wallet)
        .await;
    assert_eq!(
        (status, body),
        (503, json!({"error": "nft_verification_unavailable"}))
    );
}

#[tokio::test]
async fn hedera_holders_pass_by_serial_or_by_their_nft_list() {
    let chains = start_chains().await;
    let key = SigningKey::from_bytes(&[21; 32]);
    let public = hex::encode(key.verifying_key().to_bytes());
    let secp = k256::ecdsa::SigningKey::from_slice(&[22; 32]).unwrap();
    let secp_public = hex::encode(secp.verifying_key().to_sec1_bytes());
    chains.hedera.accounts.lock().extend([
        ("0.0.1001".to_owned(), json!({"_type": "ED25519", "key": public})),
        ("0.0.1002".to_owned(), json!({"_type": "ECDSA_SECP256K1", "key": secp_public})),
        ("0.0.1003".to_owned(), json!({"_type": "ProtobufEncoded", "key": "2a4c080112480a22122017cb79fb2b4120f2b1ec65e4198d6e08b28e813feb01e4a400839b85e18080ce0a221220d759793bbc13a2819a827c76adb6fba8a49aee007f49f2d0992d99b825ad2c48"})),
    ]);
    chains
        .hedera
        .tokens
        .lock()
        .insert(HEDERA_TOKEN.into(), "NON_FUNGIBLE_UNIQUE".into());
    chains.hedera.nfts.lock().extend([
        ((HEDERA_TOKEN.to_owned(), 3), "0.0.1001".to_owned()),
        ((HEDERA_TOKEN.to_owned(), 4), "0.0.2002".to_owned()),
        ((HEDERA_TOKEN.to_owned(), 5), "0.0.1002".to_owned()),
    ]);
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let visitor = Visitor::new(&lane).await;

    let sign_ed = |message: &str| key.sign(message.as_bytes()).to_bytes().to_vec();
    let sign_secp = |message: &str| {
        use k256::ecdsa::signature::hazmat::PrehashSigner as _;
        use sha3::Digest as _;
        let digest = sha3::Keccak256::digest(message.as_bytes());
        let signature: k256::ecdsa::Signature = secp.sign_prehash(&digest).unwrap();
        signature.to_bytes().to_vec()
    };

    // Serial 4 belongs to someone else.
    let (_, challenge) = visitor.challenge("hedera-club", "0.0.1001", "4").await;
    let (status, _) = visitor
        .verify(
            text(&challenge["nonce"]),
            &sign_ed(text(&challenge["message"])),
            &public,
        )
        .await;
    assert_eq!(status, 403);
    // A key list cannot sign alone.
    let (_, challenge) = visitor.challenge("hedera-club", "0.0.1003", "").await;
    let (status, _) = visitor
        .verify(
            text(&challenge["nonce"]),
            &sign_ed(text(&challenge["message"])),
            "",
        )
        .await;
    assert_eq!(status, 403);
    // By serial.
    let (_, challenge) = visitor.challenge("hedera-club", "0.0.1001", "3").await;
    let (status, body) = visitor
        .verify(
            text(&challenge["nonce"]),
            &sign_ed(text(&challenge["message"])),
            &public,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Any serial, found through the account's NFT list, signed with secp256k1.
    let (_, challenge) = visitor.challenge("hedera-club", "0.0.1002", "").await;
    let (status, body) = visitor
        .verify(
            text(&challenge["nonce"]),
            &sign_secp(text(&challenge["message"])),
            &secp_public,
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn an_unreachable_chain_is_503_and_the_challenge_is_spent() {
    let chains = start_chains().await;
    let (pair, address, public_key) = xrpl_holder(&chains);
    let mut networks = chains.networks.clone();
    // A port that was just closed.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    networks.get_mut("xrpl:1").unwrap().rpc = format!("http://{closed}");
    let lane = start_lane(&networks, Duration::ZERO).await;
    let visitor = Visitor::new(&lane).await;
    let (_, challenge) = visitor.challenge("xrpl-club", &address, "").await;
    let signature = pair.sign(text(&challenge["message"]).as_bytes());
    let (status, body) = visitor
        .verify(text(&challenge["nonce"]), &signature, &public_key)
        .await;
    assert_eq!(
        (status, body),
        (503, json!({"error": "nft_verification_unavailable"}))
    );
    let (status, _) = visitor
        .verify(text(&challenge["nonce"]), &signature, &public_key)
        .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn malformed_verify_bodies_are_400_and_never_reach_a_chain() {
    let chains = start_chains().await;
    let (_, address, _) = xrpl_holder(&chains);
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let visitor = Visitor::new(&lane).await;
    let (_, challenge) = visitor.challenge("xrpl-club", &address, "").await;
    let nonce = text(&challenge["nonce"]);
    for body in [
        json!({"nonce": nonce, "signature": "not base64!", "public_key": ""}),
        json!({"nonce": nonce, "signature": "AAAA", "public_key": "", "more": 1}),
        json!({"nonce": nonce}),
        json!({"nonce": nonce, "signature": "A".repeat(5000)}),
    ] {
        let (status, answer) = visitor.post("/_concert/nft/verify", body.clone()).await;
        assert_eq!(status, 400, "{body} {answer}");
    }
    assert_eq!(chains.xrpl.nft_pages.load(Ordering::SeqCst), 0);
    // The challenge is still good for a well-formed answer (garbage signature: 403).
    let (status, _) = visitor.verify(nonce, &[1, 2, 3], "02AB").await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn challenges_are_capped_at_ten_thousand_across_sessions() {
    let chains = start_chains().await;
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let keys = concert::fastlane::service::session::SessionKeys::new(SECRET);
    let http = reqwest::Client::new();
    let now = now_unix();
    let ask = |n: usize| {
        let (token, _) = keys.issue(None, now);
        let csrf = keys.csrf(&token);
        let request = http
            .post(format!("{}/_concert/nft/challenge", lane.base))
            .header("origin", &lane.base)
            .header("concert-session", &token)
            .header("x-concert-csrf", csrf)
            // Spread over addresses so the per-address rate limit is not what answers.
            .header(
                "x-test-client",
                format!("10.9.{}.{}", n / 50 / 250, n / 50 % 250 + 1),
            )
            .json(&json!({"rule": "hedera-club", "address": "0.0.1001", "token_id": ""}));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let mut answered = 0;
    for batch in (0..10_000).collect::<Vec<_>>().chunks(25) {
        let statuses = futures_util::future::join_all(batch.iter().map(|n| ask(*n))).await;
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        answered += statuses.len();
    }
    assert_eq!(answered, 10_000);
    assert_eq!(ask(10_000).await, 503);
    // Every new session is refused the same way until old challenges expire.
    let visitor = Visitor::new(&lane).await;
    let (status, body) = visitor.challenge("hedera-club", "0.0.1001", "").await;
    assert_eq!(
        (status, body),
        (503, json!({"error": "challenge_capacity"}))
    );
}

#[tokio::test]
async fn holders_are_screened_with_the_nft_action_and_a_deny_grants_nothing() {
    let chains = start_chains().await;
    let (pair, address, public_key) = xrpl_holder(&chains);
    for (decision, expected) in [("deny", 403), ("allow", 200)] {
        let (url, asked) = policy_server(decision).await;
        let lane = start_screened_lane(&chains.networks, Duration::ZERO, &url).await;
        let visitor = Visitor::new(&lane).await;
        let (_, challenge) = visitor.challenge("xrpl-club", &address, XRPL_TOKEN).await;
        let signature = pair.sign(text(&challenge["message"]).as_bytes());
        let (status, body) = visitor
            .verify(text(&challenge["nonce"]), &signature, &public_key)
            .await;
        assert_eq!(status, expected, "{decision}: {body}");
        let asked = asked.lock().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0]["action"], "nft");
        assert_eq!(asked[0]["payer"], address.as_str());
        assert_eq!(asked[0]["network"], "xrpl:1");
        assert_eq!(
            asked[0]["requirements"]["asset"],
            format!("{XRPL_ISSUER}:7").as_str()
        );
        let eligible = lane.lane.eligible(&visitor.headers(), now_unix()).is_some();
        assert_eq!(eligible, decision == "allow");
        if decision == "deny" {
            assert_eq!(body, json!({"error": "policy_not_approved"}));
        }
    }
}

/// A wallet the access page can use, as an extension would add it: an XRPL ed25519 account
/// whose key signs in the page with WebCrypto, so the signature the server checks is made by
/// the browser from the challenge text the page received.
fn injected_xrpl_wallet(secret: &[u8; 32], address: &str, public_key_hex: &str) -> String {
    // PKCS#8 wrapping of a raw ed25519 private key (RFC 8410).
    let mut pkcs8 = hex::decode("302e020100300506032b657004220420").unwrap();
    pkcs8.extend_from_slice(secret);
    let pkcs8 = STANDARD.encode(pkcs8);
    format!(
        r#"window.concertWallets = {{ xrpl: {{
  connect: async function () {{ return {{ address: "{address}" }}; }},
  signMessage: async function (request) {{
    var der = Uint8Array.from(atob("{pkcs8}"), function (c) {{ return c.charCodeAt(0); }});
    var key = await crypto.subtle.importKey("pkcs8", der, {{ name: "Ed25519" }}, false, ["sign"]);
    var signature = await crypto.subtle.sign({{ name: "Ed25519" }}, key, new TextEncoder().encode(request.message));
    window.signedMessages = (window.signedMessages || 0) + 1;
    return {{ signature: new Uint8Array(signature), publicKey: "{public_key_hex}" }};
  }},
  createPaymentPayload: async function () {{ throw new Error("this wallet only proves holdings"); }}
}} }};"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_page_proves_an_xrpl_holding_with_the_visitors_wallet() {
    let chains = start_chains().await;
    let secret = [41u8; 32];
    let key = SigningKey::from_bytes(&secret);
    let mut public_key = vec![0xED];
    public_key.extend_from_slice(key.verifying_key().as_bytes());
    let address = concert::fastlane::chains::xrpl::keys::address_of_public_key(&public_key);
    let public_key_hex = hex::encode_upper(&public_key);
    chains.xrpl.accounts.lock().insert(
        address.clone(),
        XrplAccount {
            flags: 0,
            regular_key: None,
            nfts: vec![(XRPL_TOKEN.into(), XRPL_ISSUER.into(), 7)],
        },
    );
    let lane = start_lane(&chains.networks, Duration::ZERO).await;
    let browser = browser::Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.add_init_script(&injected_xrpl_wallet(&secret, &address, &public_key_hex))
        .await
        .unwrap();
    page.goto(&format!("{}/_concert/access", lane.base))
        .await
        .unwrap();
    page.wait_for(
        "document.readyState === 'complete' && !document.getElementById('nft').hidden && document.querySelectorAll('#collections button').length === 4",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    // Pictures of the page's NFT option, to look at after a change.
    let screens = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fastlane-screens");
    std::fs::create_dir_all(&screens).unwrap();
    page.screenshot(screens.join("access-nft-desktop.png"))
        .await
        .unwrap();
    page.set_viewport(390, 844, true).await.unwrap();
    page.screenshot(screens.join("access-nft-phone.png"))
        .await
        .unwrap();
    // Only the chain with a wallet can be used; the others say why not.
    let enabled = page
        .eval("Array.from(document.querySelectorAll('#collections button')).map(function (b) { return !b.disabled; })")
        .await
        .unwrap();
    assert_eq!(enabled, json!([true, false, false, false]));
    page.eval("document.querySelector('#collections button').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.getElementById('state').textContent.indexOf('Verified') === 0",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let problems = page.problems();
    assert!(problems.is_empty(), "{problems:?}");
    assert!(chains.xrpl.nft_pages.load(Ordering::SeqCst) >= 1);
    // The page's session (its HttpOnly cookie) now holds a lease.
    let cookies = page.cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|cookie| cookie.name == "concert_fastlane")
        .expect("the page's session cookie");
    let status: Value = reqwest::Client::new()
        .get(format!("{}/_concert/status", lane.base))
        .header("cookie", format!("concert_fastlane={}", session.value))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["eligible"], true, "{status}");
    assert_eq!(status["kind"], "nft", "{status}");
}
