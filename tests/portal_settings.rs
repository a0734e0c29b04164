//! The portal's Settings API over real sockets: the view, live changes that reach the proxy at
//! once, every problem reported with nothing applied, resets, restart-only keys, the operator's
//! own address kept in `-portal-allow`, and settings.json across a restart.

mod support;

use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::origins::{self, Origin};
use support::{concert_with_env, plain_client, room_stats, set_cookies, url};

const PASS: &str = "a portal pass for the settings";
const ADMIT_SECRET: &str = "an admission secret that is long enough to use";

/// A signed-in operator of a running Concert's portal.
struct Operator {
    running: concert::Running,
    base: String,
    cookie: String,
    csrf: String,
    client: reqwest::Client,
}

async fn start(args: &[&str], env: &[(&str, &str)]) -> Operator {
    let mut argv = vec!["-portal-listen", "127.0.0.1:0"];
    argv.extend_from_slice(args);
    let mut env = env.to_vec();
    env.push(("CONCERT_PORTAL_PASS", PASS));
    let running = concert_with_env(&argv, &env).await;
    let base = format!(
        "http://{}",
        running.portal_addr.expect("the portal listens")
    );
    let client = plain_client();
    let signed_in = support::portal_sign_in(&client, &base, PASS).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in
        .headers()
        .get_all(SET_COOKIE)
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
        running,
        base,
        cookie,
        csrf,
        client,
    }
}

impl Operator {
    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header("Cookie", format!("concert_portal={}", self.cookie))
            .header("X-CSRF-Token", &self.csrf)
    }

    async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let answer = request.send().await.unwrap();
        let status = answer.status();
        let text = answer.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    async fn view(&self) -> Value {
        let (status, body) = Self::answer(self.request(Method::GET, "/api/settings")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    async fn change(&self, changes: Value) -> (StatusCode, Value) {
        Self::answer(
            self.request(Method::POST, "/api/settings")
                .header(CONTENT_TYPE, "application/json")
                .body(changes.to_string()),
        )
        .await
    }

    async fn reset(&self, query: &str) -> (StatusCode, Value) {
        Self::answer(self.request(Method::DELETE, &format!("/api/settings{query}"))).await
    }

    /// A change that must be accepted; returns the new view.
    async fn changed(&self, changes: Value) -> Value {
        let (status, body) = self.change(changes.clone()).await;
        assert_eq!(status, StatusCode::OK, "{changes}: {body}");
        body
    }
}

/// The row of `key` in a settings view.
fn row<'a>(view: &'a Value, key: &str) -> &'a Value {
    view["settings"]
        .as_array()
        .expect("a settings list")
        .iter()
        .find(|setting| setting["key"] == key)
        .unwrap_or_else(|| panic!("{key} is not in the view"))
}

fn error_of(body: &Value) -> String {
    body["error"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_view_lists_every_setting_its_source_and_what_is_fixed() {
    let operator = start(
        &["-cap", "7"],
        &[
            ("CONCERT_MAX_QUEUE", "60"),
            ("CONCERT_ADMIT_SECRET", ADMIT_SECRET),
        ],
    )
    .await;
    let view = operator.view().await;
    let settings = view["settings"].as_array().unwrap();
    assert_eq!(settings.len(), concert::config::SETTINGS.len());
    for setting in settings {
        for field in [
            "key", "group", "label", "help", "kind", "flag", "env", "value", "source", "restart",
        ] {
            assert!(setting.get(field).is_some(), "{field} missing: {setting}");
        }
    }
    let cap = row(&view, "cap");
    assert_eq!(cap["value"], 7);
    assert_eq!(cap["source"], "flag");
    assert_eq!(cap["kind"], "int");
    assert_eq!(cap["flag"], "-cap");
    assert_eq!(cap["env"], "CONCERT_CAPACITY");
    assert_eq!(cap["group"], "Room");
    assert_eq!(row(&view, "max_queue")["source"], "env");
    assert_eq!(row(&view, "max_queue")["value"], 60);
    assert_eq!(row(&view, "rate")["kind"], "float");
    assert_eq!(row(&view, "rate")["source"], "default");
    assert_eq!(row(&view, "abuse")["kind"], "bool");
    assert_eq!(row(&view, "admit_ttl")["kind"], "duration");
    assert_eq!(row(&view, "admit_ttl")["value"], "10m0s");
    assert_eq!(row(&view, "bypass")["list"], "path");
    assert_eq!(row(&view, "portal_allow")["list"], "cidr");
    assert_eq!(row(&view, "tls_domains")["list"], "host");
    assert_eq!(row(&view, "listen")["restart"], true);
    assert_eq!(row(&view, "cap")["restart"], false);

    assert_eq!(view["persisted"], false);
    assert_eq!(view["file"], "");
    let fixed = view["fixed"].as_object().unwrap();
    let mut labels: Vec<&str> = fixed.keys().map(String::as_str).collect();
    labels.sort_unstable();
    assert_eq!(
        labels,
        [
            "Admin token",
            "Admission secret",
            "Data directory",
            "History log",
            "IP details",
            "Main listener",
            "Portal listener",
            "Portal pass",
            "Version",
        ]
    );
    assert!(
        fixed["Admin token"]
            .as_str()
            .unwrap()
            .starts_with("not set")
    );
    assert!(fixed["Portal pass"].as_str().unwrap().starts_with("set"));
    assert!(
        fixed["Admission secret"]
            .as_str()
            .unwrap()
            .starts_with("set")
    );
    assert!(fixed["IP details"].as_str().unwrap().starts_with("off"));
    assert!(
        fixed["Portal listener"]
            .as_str()
            .unwrap()
            .contains(&operator.base["http://".len()..]),
        "{fixed:?}"
    );
    // Secrets are described, never shown.
    let text = view.to_string();
    assert!(!text.contains(ADMIT_SECRET));
    assert!(!text.contains(PASS));

    // Without a session there is nothing to see.
    let anonymous = plain_client()
        .get(format!("{}/api/settings", operator.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_change_needs_the_csrf_token() {
    let operator = start(&[], &[]).await;
    for token in [None, Some("0000")] {
        let mut request = operator
            .client
            .post(format!("{}/api/settings", operator.base))
            .header("Cookie", format!("concert_portal={}", operator.cookie))
            .body(r#"{"cap":3}"#);
        if let Some(token) = token {
            request = request.header("X-CSRF-Token", token);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::FORBIDDEN, "{token:?}");
    }
    assert_eq!(operator.running.app.room.stats().cap, 434);
    let view = operator.changed(json!({"cap": 3})).await;
    assert_eq!(row(&view, "cap")["value"], 3);
    assert_eq!(row(&view, "cap")["source"], "file");
    assert_eq!(operator.running.app.room.stats().cap, 3);
}

#[tokio::test]
async fn room_and_pricing_changes_apply_together_or_not_at_all() {
    let operator = start(&[], &[]).await;
    let view = operator
        .changed(json!({
            "cap": 4,
            "max_queue": 50,
            "rate": 2.5,
            "surge": 0.1,
            "skip_url": "/skip",
            "pass_duration": "30m",
            "token_ttl": "2m",
        }))
        .await;
    assert_eq!(row(&view, "token_ttl")["value"], "2m0s");
    assert_eq!(row(&view, "pass_duration")["value"], "30m0s");
    let stats = room_stats(&operator.running).await;
    assert_eq!(stats["cap"], 4);
    assert_eq!(stats["max_queue_depth"], 50);
    let generation = operator.running.app.generation();
    let config = &generation.config;
    assert_eq!((config.rate, config.surge), (2.5, 0.1));
    assert_eq!(config.skip_url, "/skip");
    assert_eq!(config.pass_duration, Duration::from_secs(1800));
    assert_eq!(config.token_ttl, Duration::from_secs(120));
    let pricing = generation.room_settings().pricing.expect("pricing is on");
    assert!((pricing.price_per_position(10) - 3.5).abs() < 1e-9);

    // One bad value refuses the whole change.
    let (status, body) = operator.change(json!({"cap": 2, "rate": -1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("rate"), "{body}");
    assert_eq!(room_stats(&operator.running).await["cap"], 4);
    assert_eq!(operator.running.app.generation().config.rate, 2.5);

    // Every problem is named, joined in one line and listed by key.
    let (status, body) = operator
        .change(json!({"cap": 0, "rate": -1, "surge": 0.5, "mystery": 1}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let error = error_of(&body);
    assert_eq!(error.matches("; ").count(), 2, "{error}");
    for named in ["for cap", "for rate", "mystery"] {
        assert!(error.contains(named), "{named} missing: {error}");
    }
    let keys: Vec<&str> = body["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|problem| problem["key"].as_str())
        .collect();
    assert_eq!(keys, ["cap", "mystery", "rate"]);
    assert_eq!(operator.running.app.generation().config.surge, 0.1);

    // A problem only the settings as a whole show is refused too.
    let (status, body) = operator
        .change(json!({"abuse_cooldown": "2h", "abuse_max_cooldown": "1h"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("abuse_max_cooldown"), "{body}");
}

#[tokio::test]
async fn a_change_is_a_json_object_of_settings() {
    let operator = start(&[], &[]).await;
    for body in ["", "[]", "\"cap\"", "{}", "{\"cap\":", "null"] {
        let (status, answer) = Operator::answer(
            operator
                .request(Method::POST, "/api/settings")
                .header(CONTENT_TYPE, "application/json")
                .body(body),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");
        assert_eq!(
            error_of(&answer),
            "send a JSON object of the settings to change",
            "{body:?}"
        );
    }
    let huge = format!(r#"{{"html":"{}"}}"#, "x".repeat(1024 * 1024));
    let answer = operator
        .request(Method::POST, "/api/settings")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn restart_only_settings_are_refused_and_left_alone() {
    let operator = start(&[], &[]).await;
    for (key, value, env) in [
        ("listen", ":9999", "CONCERT_LISTEN"),
        ("portal_listen", "127.0.0.1:9998", "CONCERT_PORTAL_LISTEN"),
        ("history_log", "off", "CONCERT_HISTORY_LOG"),
    ] {
        let (status, body) = operator.change(json!({ key: value, "cap": 5 })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}");
        assert!(error_of(&body).contains(env), "{key}: {body}");
        let (status, body) = operator.reset(&format!("?key={key}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}");
        assert!(error_of(&body).contains(env), "{key}: {body}");
    }
    let generation = operator.running.app.generation();
    assert_eq!(generation.config.listen, ":8080");
    assert_eq!(generation.config.portal_listen, "127.0.0.1:0");
    assert_eq!(generation.config.cap, 434, "nothing of a refused change");
}

#[tokio::test]
async fn the_operator_cannot_lock_themselves_out_of_the_portal() {
    let operator = start(&[], &[]).await;
    let (status, body) = operator
        .change(json!({"portal_allow": "10.0.0.0/8", "cap": 9}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("127.0.0.1"), "{body}");
    assert_eq!(body["problems"][0]["key"], "portal_allow");
    let config = &operator.running.app.generation().config;
    assert!(config.portal_allow.contains("127.0.0.1".parse().unwrap()));
    assert_eq!(config.cap, 434);

    // A list that still holds the operator is fine, and resetting it is too.
    let view = operator
        .changed(json!({"portal_allow": "10.0.0.0/8, 127.0.0.1"}))
        .await;
    assert_eq!(row(&view, "portal_allow")["value"], "10.0.0.0/8, 127.0.0.1");
    let (status, body) = operator.reset("?key=portal_allow").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(row(&body, "portal_allow")["source"], "default");
}

#[tokio::test]
async fn a_reset_brings_back_the_flag_env_or_default_value() {
    let operator = start(&["-cap", "6"], &[("CONCERT_ABUSE_STRIKES", "9")]).await;
    operator
        .changed(json!({"cap": 8, "abuse_strikes": 3, "rate": 1.5}))
        .await;
    for query in ["", "?key=", "?other=cap"] {
        let (status, body) = operator.reset(query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(error_of(&body), "key is required", "{query}");
    }
    let (status, body) = operator.reset("?key=nope").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("nope"), "{body}");

    let (status, view) = operator.reset("?key=cap&key=abuse_strikes").await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(row(&view, "cap")["value"], 6);
    assert_eq!(row(&view, "cap")["source"], "flag");
    assert_eq!(row(&view, "abuse_strikes")["value"], 9);
    assert_eq!(row(&view, "abuse_strikes")["source"], "env");
    assert_eq!(row(&view, "rate")["source"], "file", "only what was named");
    assert_eq!(operator.running.app.room.stats().cap, 6);
    let (_, view) = operator.reset("?key=rate").await;
    assert_eq!(row(&view, "rate")["value"], 0.0);
    assert_eq!(row(&view, "rate")["source"], "default");
}

/// A page request from `client` (named through the trusted loopback proxy).
async fn page(operator: &Operator, path: &str, client: &str) -> reqwest::Response {
    plain_client()
        .get(url(&operator.running, path))
        .header("X-Forwarded-For", client)
        .send()
        .await
        .unwrap()
}

async fn is_blocked(response: reqwest::Response) -> bool {
    response.status() == StatusCode::TOO_MANY_REQUESTS
        && response
            .text()
            .await
            .unwrap()
            .contains("temporarily blocked")
}

#[tokio::test]
async fn live_changes_reach_the_proxy_at_once() {
    let first = origins::fast_origin();
    let second: Origin = origins::echo_origin();
    let operator = start(&["-upstream", &first.url()], &[]).await;
    assert_eq!(
        page(&operator, "/one", "198.51.100.1").await.status(),
        StatusCode::OK
    );
    assert_eq!(first.hits(), 1);

    // A new origin is used by the next request.
    operator.changed(json!({"upstream": second.url()})).await;
    assert_eq!(
        page(&operator, "/two", "198.51.100.1").await.status(),
        StatusCode::OK
    );
    assert_eq!((first.hits(), second.hits()), (1, 1));

    // A ban path bans whoever asks for it.
    operator.changed(json!({"ban_paths": "/.env"})).await;
    assert!(is_blocked(page(&operator, "/.env", "203.0.113.9").await).await);
    assert!(is_blocked(page(&operator, "/", "203.0.113.9").await).await);

    // With abuse protection off the ban is kept but not enforced; on again, it is.
    operator
        .changed(json!({"abuse": false, "ban_paths": ""}))
        .await;
    assert_eq!(
        page(&operator, "/", "203.0.113.9").await.status(),
        StatusCode::OK
    );
    operator.changed(json!({"abuse": true})).await;
    assert!(is_blocked(page(&operator, "/", "203.0.113.9").await).await);

    // The admission pass lasts the new lifetime.
    operator.changed(json!({"admit_ttl": "2m"})).await;
    let admitted = page(&operator, "/three", "198.51.100.2").await;
    let pass = set_cookies(&admitted, "concert_admit");
    assert_eq!(pass.len(), 1, "{pass:?}");
    assert!(pass[0].contains("Max-Age=120"), "{}", pass[0]);

    // The listeners are fixed until a restart.
    for key in ["listen", "portal_listen"] {
        let (status, _) = operator.change(json!({ key: "127.0.0.1:1" })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}");
    }
}

#[tokio::test]
async fn changes_are_kept_in_settings_json_and_restored_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = format!("-data-dir={}", dir.path().display());
    let operator = start(&["-cap", "5", &data_dir], &[]).await;
    let view = operator.view().await;
    assert_eq!(view["persisted"], true);
    let file = dir.path().join("settings.json");
    assert_eq!(view["file"], file.display().to_string());
    assert_eq!(
        view["fixed"]["Data directory"],
        dir.path().display().to_string()
    );
    assert_eq!(
        view["fixed"]["History log"],
        dir.path().join("history.jsonl").display().to_string()
    );

    operator
        .changed(json!({"cap": 12, "admit_ttl": "3m", "bypass": "/favicon.ico,/health"}))
        .await;
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["settings"]["cap"], 12);
    assert_eq!(saved["settings"]["admit_ttl"], "3m0s");
    assert_eq!(saved["settings"]["bypass"], "/favicon.ico,/health");
    // A refused change leaves the file as it was.
    let before = std::fs::read(&file).unwrap();
    let (status, _) = operator.change(json!({"cap": 13, "rate": -1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // A reset takes the key out of the file.
    operator.reset("?key=bypass").await;
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(saved["settings"].get("bypass").is_none(), "{saved}");
    tokio::time::timeout(Duration::from_secs(20), operator.running.shutdown())
        .await
        .expect("stops in time")
        .unwrap();

    // The next start takes the saved values over its flags.
    let again = start(&["-cap", "5", &data_dir], &[]).await;
    let view = again.view().await;
    assert_eq!(row(&view, "cap")["value"], 12);
    assert_eq!(row(&view, "cap")["source"], "file");
    assert_eq!(row(&view, "admit_ttl")["value"], "3m0s");
    assert_eq!(row(&view, "bypass")["source"], "default");
    assert_eq!(again.running.app.room.stats().cap, 12);
}
