//! The portal's Fast lane API over real sockets, with a real lane (test mode, an XRPL offer, a
//! loopback rippled): the view and its gate, dry runs that only check, saves that replace both
//! files and swap the lane the site sells from, one save at a time, a save that cannot be
//! written changing nothing, receipts kept across a swap, receiving-address changes logged, and
//! sales marked delivered in the journal.

#[path = "support/lane.rs"]
mod lane;
mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, Once};
use std::time::Duration;

use lane::{Operator, Shop, client, open_session, pay, public_config, start_shop};
use reqwest::Method;
use serde_json::{Value, json};

/// Everything the process logs, for the tests that look for a warning.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut log) = LOG.lock() {
            log.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(|| LogWriter)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

fn logged() -> String {
    String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned()
}

async fn shop() -> Shop {
    let origin = support::origins::fast_origin();
    let shop = start_shop(&origin.url(), None, None).await;
    // The origin only has to outlive the test; the shop's tests never reach it.
    std::mem::forget(origin);
    shop
}

fn with_amount(requirements: &Value, amount: &str) -> Value {
    let mut changed = requirements.clone();
    changed["amount"] = json!(amount);
    changed
}

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn no_temporary_files(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .all(|entry| !entry.file_name().to_string_lossy().ends_with(".tmp"))
}

#[tokio::test]
async fn the_api_wants_a_signed_in_session_and_its_csrf_token() {
    let shop = shop().await;
    let operator = Operator::sign_in(&shop).await;
    let anonymous = client();
    for path in ["/api/fastlane", "/api/fastlane/config"] {
        let answer = anonymous
            .get(format!("{}{path}", shop.portal))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 401, "{path}");
    }
    for (token, path) in [
        ("", "/api/fastlane/config"),
        ("0000", "/api/fastlane/config"),
        ("", "/api/fastlane/sales/delivered"),
    ] {
        let answer = client()
            .post(format!("{}{path}", shop.portal))
            .header("Cookie", format!("concert_portal={}", operator.cookie))
            .header("X-CSRF-Token", token)
            .header("Content-Type", "application/json")
            .body(json!({"fastlane": {}, "networks": {}, "dry_run": true}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403, "{path} with {token:?}");
    }
    let view = operator.get("/api/fastlane").await;
    assert_eq!(view["enabled"], true);
    assert_eq!(view["healthy"], true);
    assert_eq!(view["test_mode"], true);
    assert_eq!(view["screening"], false, "test mode without policy_url");
    assert_eq!(view["capacity"]["in_flight"], 0);
    assert_eq!(view["states"]["settled"], 0);
    assert_eq!(
        view["config"]["offers"][0]["amount"],
        shop.requirements["amount"]
    );
    let config = operator.get("/api/fastlane/config").await;
    assert_eq!(config["saved"], true);
    assert_eq!(config["running"], true);
    assert_eq!(config["in_sync"], true);
    assert_eq!(config["writable"], true);
    assert_eq!(
        config["fastlane_path"],
        shop.fastlane_path.display().to_string()
    );
    assert_eq!(
        config["fastlane"].as_str().unwrap().as_bytes(),
        read(&shop.fastlane_path)
    );
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn a_dry_run_lists_every_problem_and_writes_nothing() {
    let shop = shop().await;
    let operator = Operator::sign_in(&shop).await;
    let fastlane_before = read(&shop.fastlane_path);
    let networks_before = read(&shop.networks_path);

    let mut unknown_key = shop.fastlane_with(&shop.requirements);
    unknown_key["colour"] = json!("blue");
    let (status, body) = operator.save(unknown_key, shop.networks(), true).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["ok"], false);
    let problems = body["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().contains("colour")),
        "{body}"
    );

    // Every broken rule at once, each naming its key.
    let mut broken = shop.fastlane_with(&shop.requirements);
    broken["pass_seconds"] = json!(5);
    broken["offers"][0]["requirements"]["payTo"] = json!("not-an-address");
    let (status, body) = operator
        .save(
            broken,
            json!({"xrpl:1": {"rpc": "ftp://ledger.example"}}),
            true,
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let text = body["problems"].to_string();
    for key in ["pass_seconds", "payTo", "rpc"] {
        assert!(text.contains(key), "{key} missing from {text}");
    }

    // Text that is not JSON is a problem too, not a crash.
    let (status, body) = operator.save(json!("{ not json"), json!("{}"), true).await;
    assert_eq!(status, 400, "{body}");

    // A valid change passes the dry run and is still not written or sold.
    let cheaper = shop.fastlane_with(&with_amount(&shop.requirements, "50000"));
    let (status, body) = operator.save(cheaper, shop.networks(), true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ok"], true);
    assert_eq!(body["dry_run"], true);
    assert_eq!(read(&shop.fastlane_path), fastlane_before);
    assert_eq!(read(&shop.networks_path), networks_before);
    let public = public_config(&shop).await;
    assert_eq!(
        public["offers"][0]["requirements"]["amount"],
        shop.requirements["amount"]
    );
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn saving_swaps_the_lane_keeps_receipts_and_logs_a_new_receiving_address() {
    capture_logs();
    let shop = shop().await;
    let operator = Operator::sign_in(&shop).await;
    let session = open_session(&shop).await;
    let paid = pay(&shop, &session).await;
    assert_eq!(paid.status(), 200, "{:?}", paid.text().await);
    let receipts = operator.get("/api/fastlane").await;
    assert_eq!(receipts["states"]["settled"], 1);
    let fingerprint = receipts["receipts"][0]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();

    // A new price and a new receiving address, saved as the operator typed them.
    let old_pay_to = shop.requirements["payTo"].as_str().unwrap().to_owned();
    let new_pay_to = lane::vector_case("valid secp256k1")["payer"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(old_pay_to, new_pay_to);
    let mut terms = with_amount(&shop.requirements, "200000");
    terms["payTo"] = json!(new_pay_to);
    let fastlane_text = serde_json::to_string_pretty(&shop.fastlane_with(&terms)).unwrap() + "\n";
    let networks_text = serde_json::to_string_pretty(&shop.networks()).unwrap() + "\n";
    let (status, body) = operator
        .save(json!(fastlane_text), json!(networks_text), false)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["running"], true);
    assert_eq!(
        body["pay_to_changes"],
        json!([{"label": "Five minutes", "network": "xrpl:1", "from": old_pay_to, "to": new_pay_to}])
    );
    let log = logged();
    assert!(
        log.lines().any(|line| line.contains("WARN")
            && line.contains(&format!(
                "receiving address changed from {old_pay_to} to {new_pay_to}"
            ))),
        "no warning about the receiving address in the log"
    );

    // Both files replaced whole, mode 0640, nothing left beside them.
    assert_eq!(read(&shop.fastlane_path), fastlane_text.as_bytes());
    assert_eq!(read(&shop.networks_path), networks_text.as_bytes());
    for path in [&shop.fastlane_path, &shop.networks_path] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640, "{}", path.display());
    }
    assert!(no_temporary_files(shop.data.path()));

    // The site sells the new offer at once.
    let public = public_config(&shop).await;
    assert_eq!(public["offers"][0]["requirements"]["amount"], "200000");
    assert_eq!(
        public["offers"][0]["requirements"]["payTo"],
        json!(new_pay_to)
    );
    let visitor = open_session(&shop).await;
    let asked = client()
        .post(format!("{}/_concert/payment", shop.base))
        .header("concert-session", &visitor.0)
        .header("x-concert-csrf", &visitor.1)
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 402);
    let asked: Value = asked.json().await.unwrap();
    assert_eq!(asked["accepts"][0]["amount"], "200000");

    // The receipt paid before the swap is still there, and its visitor still rides the lane.
    let view = operator.get("/api/fastlane").await;
    let kept = view["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|receipt| receipt["fingerprint"] == json!(fingerprint))
        .cloned()
        .expect("the receipt survives the swap");
    assert_eq!(kept["state"], "settled");
    assert_eq!(kept["live"], true);
    assert_eq!(view["healthy"], true);
    let status: Value = client()
        .get(format!("{}/_concert/status", shop.base))
        .header("concert-session", &session.0)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["eligible"], true, "{status}");
    let config = operator.get("/api/fastlane/config").await;
    assert_eq!(config["in_sync"], true);
    assert_eq!(config["running"], true);

    // Files that switch the lane off: the site answers as without one, the tab says so.
    let mut off = shop.fastlane_with(&terms);
    off["enabled"] = json!(false);
    let (status, body) = operator.save(off, shop.networks(), false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["running"], false);
    assert_eq!(
        operator.get("/api/fastlane").await,
        json!({"enabled": false})
    );
    assert_eq!(public_config(&shop).await["enabled"], false);
    let config = operator.get("/api/fastlane/config").await;
    assert_eq!(config["running"], false);
    assert_eq!(config["in_sync"], true);

    // And on again, with the receipt still in the journal.
    let (status, body) = operator
        .save(json!(fastlane_text), json!(networks_text), false)
        .await;
    assert_eq!(status, 200, "{body}");
    let view = operator.get("/api/fastlane").await;
    assert_eq!(view["states"]["settled"], 1);
    let _ = shop.concert.shutdown().await;
}

#[tokio::test]
async fn one_save_at_a_time_and_settlements_under_way_finish_first() {
    let shop = shop().await;
    let operator = Operator::sign_in(&shop).await;

    // A payment whose submission the ledger holds: a settlement in flight.
    shop.ledger.hold_submits.store(true, Ordering::SeqCst);
    let session = open_session(&shop).await;
    let paying = {
        let shop_base = shop.base.clone();
        let requirements = shop.requirements.clone();
        let blob = shop.blob.clone();
        let session = session.clone();
        tokio::spawn(async move {
            use base64::Engine as _;
            let payment = json!({
                "x402Version": 2,
                "resource": {"url": format!("{shop_base}/_concert/payment")},
                "accepted": requirements,
                "payload": {"signedTxBlob": blob},
            });
            client()
                .post(format!("{shop_base}/_concert/payment"))
                .header("concert-session", &session.0)
                .header("x-concert-csrf", &session.1)
                .header(
                    "payment-signature",
                    base64::engine::general_purpose::STANDARD.encode(payment.to_string()),
                )
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    assert!(
        support::eventually(Duration::from_secs(10), || {
            shop.concert
                .app
                .fast_lane()
                .is_some_and(|lane| lane.settling() == 1)
        })
        .await,
        "the payment is settling"
    );

    // The first save waits for it; meanwhile a second is refused and wallets are told to wait.
    let cheaper = shop.fastlane_with(&with_amount(&shop.requirements, "90000"));
    let first = {
        let operator = Operator::sign_in(&shop).await;
        let cheaper = cheaper.clone();
        let networks = shop.networks();
        tokio::spawn(async move { operator.save(cheaper, networks, false).await })
    };
    assert!(
        support::eventually(Duration::from_secs(10), || shop
            .concert
            .app
            .fastlane
            .is_reloading())
        .await
    );
    let (status, body) = operator.save(cheaper.clone(), shop.networks(), false).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("another"),
        "{body}"
    );
    let wallet = client()
        .post(format!("{}/_concert/session", shop.base))
        .send()
        .await
        .unwrap();
    assert_eq!(wallet.status(), 503);
    assert_eq!(wallet.headers()["retry-after"], "5");
    let refusal: Value = wallet.json().await.unwrap();
    assert_eq!(refusal["error"], "fast_lane_reloading");
    assert_eq!(
        public_config(&shop).await["offers"][0]["requirements"]["amount"],
        shop.requirements["amount"],
        "nothing is swapped while the payment settles"
    );

    // The ledger answers: the payment settles, then the save goes through.
    shop.ledger.submit_gate.add_permits(1);
    assert_eq!(paying.await.unwrap(), 200);
    let (status, body) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        public_config(&shop).await["offers"][0]["requirements"]["amount"],
        "90000"
    );
    assert_eq!(shop.ledger.submits.load(Ordering::SeqCst), 1);
    let view = operator.get("/api/fastlane").await;
    assert_eq!(view["states"]["settled"], 1, "{view}");
    assert_eq!(view["receipts"][0]["state"], "settled");
    let again = client()
        .post(format!("{}/_concert/session", shop.base))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let _ = shop.concert.shutdown().await;
}

/// Makes `dir` refuse new files, even to root (the immutable attribute); false when this
/// system allows neither that nor a read-only mode to work.
fn make_unwritable(dir: &std::path::Path) -> bool {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = dir.join("probe");
    if std::fs::File::create(&probe).is_err() {
        return true;
    }
    let _ = std::fs::remove_file(&probe);
    let _ = std::process::Command::new("chattr")
        .arg("+i")
        .arg(dir)
        .status();
    let refused = std::fs::File::create(&probe).is_err();
    let _ = std::fs::remove_file(&probe);
    refused
}

fn make_writable(dir: &std::path::Path) {
    let _ = std::process::Command::new("chattr")
        .arg("-i")
        .arg(dir)
        .status();
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
}

#[tokio::test]
async fn a_save_that_cannot_be_written_puts_the_first_file_back_and_keeps_selling() {
    let networks_dir = tempfile::tempdir().unwrap();
    let origin = support::origins::fast_origin();
    let shop = start_shop(&origin.url(), Some(networks_dir.path()), None).await;
    let operator = Operator::sign_in(&shop).await;
    let fastlane_before = read(&shop.fastlane_path);
    let networks_before = read(&shop.networks_path);
    assert!(
        make_unwritable(networks_dir.path()),
        "the networks directory could not be made read-only"
    );

    let cheaper = shop.fastlane_with(&with_amount(&shop.requirements, "70000"));
    let (status, body) = operator.save(cheaper, shop.networks(), false).await;
    make_writable(networks_dir.path());
    assert_eq!(status, 500, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("nothing was changed"),
        "{body}"
    );
    assert_eq!(read(&shop.fastlane_path), fastlane_before, "put back");
    assert_eq!(read(&shop.networks_path), networks_before);
    assert!(no_temporary_files(shop.data.path()));
    assert!(no_temporary_files(networks_dir.path()));

    // The old lane never stopped: same offer, and a visitor can still pay.
    assert_eq!(
        public_config(&shop).await["offers"][0]["requirements"]["amount"],
        shop.requirements["amount"]
    );
    let session = open_session(&shop).await;
    let paid = pay(&shop, &session).await;
    assert_eq!(paid.status(), 200);
    let view = operator.get("/api/fastlane").await;
    assert_eq!(view["healthy"], true);
    assert_eq!(view["states"]["settled"], 1);
    let _ = shop.concert.shutdown().await;
    drop(origin);
}

#[tokio::test]
async fn a_sale_is_marked_delivered_in_the_journal() {
    let requirements = lane::vector_case("valid secp256k1")["requirements"].clone();
    let fingerprint = "5a1e".repeat(16);
    let journal = lane::sale_line(&requirements, &fingerprint, "poster-1");
    let origin = support::origins::fast_origin();
    let shop = start_shop(&origin.url(), None, Some(&journal)).await;
    let operator = Operator::sign_in(&shop).await;

    let view = operator.get("/api/fastlane").await;
    assert_eq!(view["sales_total"], 1);
    assert_eq!(view["sales"][0]["fingerprint"], json!(fingerprint));
    assert_eq!(view["sales"][0]["delivered"], false);
    assert_eq!(view["sales"][0]["sale"], true);

    let mark = |fingerprint: &str| {
        Operator::answer(
            operator
                .request(Method::POST, "/api/fastlane/sales/delivered")
                .header("Content-Type", "application/json")
                .body(json!({ "fingerprint": fingerprint }).to_string()),
        )
    };
    let (status, body) = mark(&"0".repeat(64)).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = mark(&fingerprint).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["delivered"]["delivered"], true);
    let lines = std::fs::read_to_string(shop.data.path().join("fastlane.jsonl")).unwrap();
    let last: Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(last["fingerprint"], json!(fingerprint));
    assert_eq!(last["delivered"], true);
    assert_eq!(lines.lines().count(), 2);
    // Marking it again changes nothing.
    let (status, _) = mark(&fingerprint).await;
    assert_eq!(status, 200);
    let again = std::fs::read_to_string(shop.data.path().join("fastlane.jsonl")).unwrap();
    assert_eq!(again.lines().count(), 2);

    // A pass is not a sale.
    let session = open_session(&shop).await;
    assert_eq!(pay(&shop, &session).await.status(), 200);
    let view = operator.get("/api/fastlane").await;
    let pass = view["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|receipt| receipt["kind"] == "payment")
        .cloned()
        .expect("the pass is listed");
    let (status, body) = mark(pass["fingerprint"].as_str().unwrap()).await;
    assert_eq!(status, 409, "{body}");
    let _ = shop.concert.shutdown().await;
    drop(origin);
}
