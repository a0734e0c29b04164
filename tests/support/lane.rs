//! A shop with a fast lane and a portal, for the Fast lane tab's tests: Concert started as the
//! binary starts it, fastlane.json and networks.json in its data directory selling one XRPL
//! offer, a loopback rippled that replays the state of the vector payment, and an operator
//! signed in to the portal.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

pub const ADMIT_SECRET: &str = "fast-lane-tab-test-secret-0123456789abcdef";
pub const PORTAL_PASS: &str = "a portal pass for the fast lane tab";

pub use crate::support::rippled::{Ledger, start as start_ledger, vector_case};

pub struct Shop {
    pub concert: concert::Running,
    /// The public listener, `http://127.0.0.1:port`.
    pub base: String,
    /// The portal, `http://127.0.0.1:port`.
    pub portal: String,
    pub ledger: Arc<Ledger>,
    pub rpc: String,
    pub requirements: Value,
    pub blob: String,
    pub fastlane_path: std::path::PathBuf,
    pub networks_path: std::path::PathBuf,
    pub data: tempfile::TempDir,
}

impl Shop {
    /// The fastlane.json the shop started with, with `offer` as its only offer's terms.
    pub fn fastlane_with(&self, requirements: &Value) -> Value {
        fastlane_document(&self.base, requirements)
    }

    pub fn networks(&self) -> Value {
        json!({"xrpl:1": {"rpc": self.rpc}})
    }
}

pub fn fastlane_document(origin: &str, requirements: &Value) -> Value {
    json!({
        "enabled": true,
        "origin": origin,
        "test_mode": true,
        "pass_seconds": 300,
        "merchant": "The test shop",
        "terms_url": "https://shop.example/terms",
        "privacy_url": "https://shop.example/privacy",
        "refund_url": "https://shop.example/refunds",
        "offers": [{"label": "Five minutes", "requirements": requirements}],
    })
}

/// Starts the shop; `networks_dir`, when given, is where networks.json lives instead of the
/// data directory (named with `-networks-config`). `journal` is written as fastlane.jsonl
/// before the start.
pub async fn start_shop(
    upstream: &str,
    networks_dir: Option<&std::path::Path>,
    journal: Option<&str>,
) -> Shop {
    let case = vector_case("valid secp256k1");
    let payer = case["payer"].as_str().unwrap().to_owned();
    let (rpc, ledger) = start_ledger(&payer).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let data = tempfile::tempdir().unwrap();
    let fastlane_path = data.path().join("fastlane.json");
    let networks_path = networks_dir.unwrap_or(data.path()).join("networks.json");
    std::fs::write(
        &fastlane_path,
        serde_json::to_vec_pretty(&fastlane_document(&base, &case["requirements"])).unwrap(),
    )
    .unwrap();
    std::fs::write(
        &networks_path,
        serde_json::to_vec_pretty(&json!({"xrpl:1": {"rpc": rpc}})).unwrap(),
    )
    .unwrap();
    if let Some(journal) = journal {
        std::fs::write(data.path().join("fastlane.jsonl"), journal).unwrap();
    }
    let mut args: Vec<String> = vec![
        "-upstream".into(),
        upstream.into(),
        "-data-dir".into(),
        data.path().display().to_string(),
        "-portal-listen".into(),
        "127.0.0.1:0".into(),
    ];
    if networks_dir.is_some() {
        args.push("-networks-config".into());
        args.push(networks_path.display().to_string());
    }
    let env: HashMap<String, String> = HashMap::from([
        ("CONCERT_ADMIT_SECRET".to_owned(), ADMIT_SECRET.to_owned()),
        ("CONCERT_PORTAL_PASS".to_owned(), PORTAL_PASS.to_owned()),
    ]);
    let config = match concert::config::load(&args, &env).expect("config") {
        concert::config::Loaded::Run(config) => *config,
        _ => unreachable!(),
    };
    let concert = concert::start(config, Some(listener)).await.expect("start");
    let portal = format!(
        "http://{}",
        concert.portal_addr.expect("the portal listens")
    );
    Shop {
        concert,
        base,
        portal,
        ledger,
        rpc,
        requirements: case["requirements"].clone(),
        blob: case["blob"].as_str().unwrap().to_owned(),
        fastlane_path,
        networks_path,
        data,
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A visitor's session over headers: `(token, csrf)`.
pub async fn open_session(shop: &Shop) -> (String, String) {
    let answer = client()
        .post(format!("{}/_concert/session", shop.base))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    (
        body["session"].as_str().unwrap().to_owned(),
        body["csrf"].as_str().unwrap().to_owned(),
    )
}

/// Pays the shop's offer with the vector payment; returns the answer.
pub async fn pay(shop: &Shop, session: &(String, String)) -> reqwest::Response {
    let payment = json!({
        "x402Version": 2,
        "resource": {"url": format!("{}/_concert/payment", shop.base)},
        "accepted": shop.requirements,
        "payload": {"signedTxBlob": shop.blob},
    });
    client()
        .post(format!("{}/_concert/payment", shop.base))
        .header("concert-session", &session.0)
        .header("x-concert-csrf", &session.1)
        .header("payment-signature", STANDARD.encode(payment.to_string()))
        .send()
        .await
        .unwrap()
}

/// The public `/_concert/config`.
pub async fn public_config(shop: &Shop) -> Value {
    client()
        .get(format!("{}/_concert/config", shop.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// An operator signed in to the shop's portal.
pub struct Operator {
    pub base: String,
    pub cookie: String,
    pub csrf: String,
    client: reqwest::Client,
}

impl Operator {
    pub async fn sign_in(shop: &Shop) -> Operator {
        let client = client();
        let base = shop.portal.clone();
        let page = client.get(format!("{base}/")).send().await.unwrap();
        let form_cookie = page
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(|line| line.strip_prefix("concert_portal_signin="))
            .and_then(|rest| rest.split(';').next())
            .expect("a sign-in form cookie")
            .to_owned();
        let html = page.text().await.unwrap();
        let marker = r#"name="csrf" value=""#;
        let at = html.find(marker).expect("a sign-in token") + marker.len();
        let token = html[at..].split('"').next().unwrap_or_default().to_owned();
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("csrf", &token)
            .append_pair("pass", PORTAL_PASS)
            .finish();
        let signed_in = client
            .post(format!("{base}/login"))
            .header("Cookie", format!("concert_portal_signin={form_cookie}"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .unwrap();
        assert_eq!(signed_in.status(), 303);
        let cookie = signed_in
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(|line| line.strip_prefix("concert_portal="))
            .and_then(|rest| rest.split(';').next())
            .expect("a session cookie")
            .to_owned();
        let page = client
            .get(format!("{base}/"))
            .header("Cookie", format!("concert_portal={cookie}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let marker = r#"<meta name="csrf-token" content=""#;
        let at = page.find(marker).expect("a CSRF token") + marker.len();
        let csrf = page[at..at + 32].to_owned();
        Operator {
            base,
            cookie,
            csrf,
            client,
        }
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header("Cookie", format!("concert_portal={}", self.cookie))
            .header("X-CSRF-Token", &self.csrf)
    }

    pub async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = Self::answer(self.request(reqwest::Method::GET, path)).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    }

    /// `POST /api/fastlane/config` with both documents (text or JSON values).
    pub async fn save(&self, fastlane: Value, networks: Value, dry_run: bool) -> (u16, Value) {
        Self::answer(
            self.request(reqwest::Method::POST, "/api/fastlane/config")
                .header("Content-Type", "application/json")
                .body(
                    json!({"fastlane": fastlane, "networks": networks, "dry_run": dry_run})
                        .to_string(),
                ),
        )
        .await
    }
}

/// A journal line of a settled sale of listing `listing`.
pub fn sale_line(requirements: &Value, fingerprint: &str, listing: &str) -> String {
    let line = json!({
        "session": "ab".repeat(32),
        "fingerprint": fingerprint,
        "state": "settled",
        "kind": "nft_sale",
        "network": "xrpl:1",
        "payer": "rPayerOfTheSale",
        "requirements": requirements,
        "transaction": format!("TX{fingerprint}"),
        "started": "2026-01-01T00:00:00Z",
        "settled": "2026-01-01T00:00:05Z",
        "expires": "2026-01-01T00:05:05Z",
        "listing": listing,
    });
    format!("{line}\n")
}
