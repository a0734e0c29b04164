//! The portal's Visitors and Ban log on real sockets: a real Concert in front of a real
//! origin, visitors named with `X-Forwarded-For` through the default trusted loopback proxy,
//! an operator signed in with a cookie and the page's CSRF token. The history's JSON, the
//! rendered tables and panels, and how the portal's own bans are named in the history.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, SET_COOKIE};
use serde_json::{Value, json};
use support::origins::{self, Origin};
use support::*;

const PASS: &str = "a portal pass for the history";
const TOKEN: &str = "portal-history-admin-token";

struct Operator {
    running: concert::Running,
    base: String,
    client: reqwest::Client,
    cookie: String,
    csrf: String,
}

async fn signed_in(origin: &Origin, args: &[&str], env: &[(&str, &str)]) -> Operator {
    let upstream = origin.url();
    let mut argv = vec![
        "-upstream",
        upstream.as_str(),
        "-portal-listen",
        "127.0.0.1:0",
    ];
    argv.extend_from_slice(args);
    let mut all_env = vec![
        ("CONCERT_PORTAL_PASS", PASS),
        ("CONCERT_ADMIN_TOKEN", TOKEN),
    ];
    all_env.extend_from_slice(env);
    let running = concert_with_env(&argv, &all_env).await;
    let base = format!(
        "http://{}",
        running.portal_addr.expect("the portal listens")
    );
    let client = plain_client();
    let answer = support::portal_sign_in(&client, &base, PASS).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    let cookie = answer
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
        client,
        cookie,
        csrf,
    }
}

impl Operator {
    /// `method path` on the portal with the session and its CSRF token.
    async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("Cookie", format!("concert_portal={}", self.cookie))
            .header("X-CSRF-Token", &self.csrf);
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let answer = request.send().await.unwrap();
        let status = answer.status();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.api(reqwest::Method::GET, path, None).await
    }

    /// A fragment's rows (or panel) as HTML, after checking it was answered.
    async fn html(&self, path: &str) -> (String, Value) {
        let (status, fragment) = self.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {fragment}");
        let html = fragment["html"].as_str().expect("html").to_owned();
        (html, fragment)
    }

    async fn ban(&self, client: &str, duration: &str) -> Value {
        let (status, made) = self
            .api(
                reqwest::Method::POST,
                "/api/bans",
                Some(json!({"client": client, "duration": duration})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{made}");
        made
    }

    /// A visitor's request to the site.
    async fn visit(&self, path: &str, address: &str) -> StatusCode {
        plain_client()
            .get(url(&self.running, path))
            .header("X-Forwarded-For", address)
            .header("User-Agent", "portal-history-test/1")
            .send()
            .await
            .unwrap()
            .status()
    }
}

fn paths(detail: &Value) -> Vec<&str> {
    detail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["path"].as_str().unwrap())
        .collect()
}

/// The only ban window in the log, in full.
async fn only_window(operator: &Operator) -> Value {
    let (_, history) = operator.get("/api/history").await;
    let bans = history["bans"].as_array().unwrap();
    assert_eq!(bans.len(), 1, "{history}");
    let id = bans[0]["id"].as_u64().unwrap();
    let (status, window) = operator.get(&format!("/api/history/ban?id={id}")).await;
    assert_eq!(status, StatusCode::OK);
    window["ban"].clone()
}

#[tokio::test]
async fn two_clients_are_two_rows_and_a_clients_requests_come_newest_first() {
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &[], &[]).await;
    assert_eq!(
        operator.visit("/one?x=1", "203.0.113.1").await,
        StatusCode::OK
    );
    assert_eq!(operator.visit("/two", "203.0.113.1").await, StatusCode::OK);
    assert_eq!(operator.visit("/", "203.0.113.2").await, StatusCode::OK);

    let (html, fragment) = operator
        .html("/api/frag/visitors?q=203.0.113.&keys=203.0.113.1,192.0.2.99,nope")
        .await;
    assert_eq!(html.matches("<tr data-key=").count(), 2, "{html}");
    assert!(
        html.contains(r#"data-key="203.0.113.1""#) && html.contains(r#"data-key="203.0.113.2""#)
    );
    assert!(
        html.contains("/api/frag/visitor?client=203.0.113.1"),
        "{html}"
    );
    assert!(
        html.contains(r#"class="table-success""#),
        "last answers were 2xx: {html}"
    );
    assert!(html.contains(r#"data-action="ban" data-client="203.0.113.1""#));
    assert!(html.contains(">GET /two<"), "the last request: {html}");
    assert_eq!(fragment["total"], 2);
    assert_eq!(fragment["where"]["203.0.113.1"], 1);
    assert_eq!(fragment["where"]["192.0.2.99"], 0);
    assert_eq!(fragment["where"]["nope"], 0);
    let summary = fragment["summary"].as_str().unwrap();
    assert!(summary.starts_with("1–2 of 2 matching · "), "{summary}");
    assert!(summary.ends_with("addresses recorded"), "{summary}");
    assert_eq!(fragment["flags"]["abuse_enabled"], true);
    assert_eq!(fragment["flags"]["persisted"], false);

    let (status, detail) = operator.get("/api/history/client?client=203.0.113.1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(paths(&detail), ["/two", "/one?x=1"]);
    assert_eq!(detail["client"]["requests"], 2);
    assert_eq!(detail["user_agents"][0], "portal-history-test/1");
    let (status, history) = operator.get("/api/history?q=203.0.113.2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (history["matched"].clone(), history["listed"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(history["clients"][0]["client"], "203.0.113.2");
    assert_eq!(history["limits"]["max_clients"], 4096);
    assert_eq!(history["limits"]["per_client"], 100);
    assert_eq!(history["limits"]["retention_hours"], 72);

    // The dashboard has both tabs, the pill and the note on the history's limits.
    let page = operator
        .client
        .get(format!("{}/", operator.base))
        .header("Cookie", format!("concert_portal={}", operator.cookie))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(r#"data-tab="visitors""#) && page.contains(r#"data-tab="banlog""#));
    assert!(page.contains(r#"data-stat="history_clients""#));
    assert!(
        page.contains("latest 100 requests of each of at most 4096 addresses"),
        "{page}"
    );
    assert!(page.contains("<abbr title=") && !page.contains("<attr"));
    assert!(!page.contains("<script>") && !page.contains("style="));
    let (_, overview) = operator.get("/api/overview").await;
    assert_eq!(overview["history_clients"], 2);
}

#[tokio::test]
async fn a_ban_path_window_counts_the_banned_clients_requests_and_a_portal_unban_lifts_it() {
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &["-ban-paths", "/.env"], &[]).await;
    let client = "203.0.113.20";
    assert_ne!(operator.visit("/.env", client).await, StatusCode::OK);
    for path in ["/hello", "/hello", "/wp-login.php"] {
        assert_eq!(
            operator.visit(path, client).await,
            StatusCode::TOO_MANY_REQUESTS
        );
    }

    let window = only_window(&operator).await;
    assert_eq!(window["active"], true);
    assert!(window["began"].is_string(), "{window}");
    assert_eq!(window["requests"], 3);
    assert_eq!(window["trigger"]["path"], "/.env");
    assert_eq!(window["trigger"]["method"], "GET");
    assert_eq!(
        window["paths"],
        json!([{"name": "/hello", "hits": 2}, {"name": "/wp-login.php", "hits": 1}])
    );
    assert_eq!(window["clients"], json!([{"name": client, "hits": 3}]));

    let (_, detail) = operator
        .get(&format!("/api/history/client?client={client}"))
        .await;
    let notes: Vec<(bool, bool)> = detail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["triggered_ban"].as_bool().unwrap(),
                e["blocked"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        notes,
        [(false, true), (false, true), (false, true), (true, false)]
    );
    assert_eq!(detail["client"]["blocked"], 3);
    assert_eq!(detail["client"]["bans_triggered"], 1);

    // The tables: the client is banned, its ban button is off; the log names the trigger.
    let (visitors, _) = operator.html("/api/frag/visitors?flagged=1").await;
    assert!(visitors.contains(r#"class="table-warning""#), "{visitors}");
    assert!(visitors.contains("banned · "), "{visitors}");
    assert!(
        visitors.contains(r#"title="Ban this client" disabled"#),
        "{visitors}"
    );
    let (log, fragment) = operator.html("/api/frag/banlog").await;
    let id = window["id"].as_u64().unwrap();
    assert!(log.contains(&format!(r#"data-key="{id}""#)), "{log}");
    assert!(
        log.contains(r#"class="table-warning""#) && log.contains(">active<"),
        "{log}"
    );
    assert!(log.contains("GET /.env") && log.contains("/hello"), "{log}");
    assert_eq!(fragment["summary"], "1–1 of 1 bans");
    assert_eq!(fragment["flags"]["abuse_enabled"], true);
    let (panel, _) = operator.html(&format!("/api/frag/ban?id={id}")).await;
    assert!(panel.contains("Paths requested while banned"), "{panel}");
    assert!(panel.contains("Addresses that made them") && panel.contains(client));
    assert!(
        panel.contains("GET /.env")
            && panel.contains(&format!(
                "from <span class=\"font-monospace\" data-copy=\"{client}\">"
            )),
        "{panel}"
    );
    let (detail_panel, detail_fragment) = operator
        .html(&format!("/api/frag/visitor?client={client}"))
        .await;
    assert_eq!(detail_fragment["summary"], "1–4 of 4");
    assert!(detail_panel.contains("history-trigger") && detail_panel.contains("started ban"));
    assert_eq!(
        detail_panel.matches("history-blocked").count(),
        3,
        "{detail_panel}"
    );
    assert!(
        detail_panel.contains(&format!(r#"data-ban-id="{id}""#)),
        "its ban's panel"
    );

    let (status, lifted) = operator
        .api(
            reqwest::Method::DELETE,
            &format!("/api/bans?client={client}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{lifted}");
    let window = only_window(&operator).await;
    assert_eq!(window["active"], false);
    assert_eq!(window["end_reason"], "lifted");
    assert!(window["ended"].is_string());
    assert_eq!(window["lifted_by"], "the portal (127.0.0.1)");
    assert_eq!(operator.visit("/after", client).await, StatusCode::OK);
    let (_, detail) = operator
        .get(&format!("/api/history/client?client={client}"))
        .await;
    assert_eq!(detail["entries"][0]["path"], "/after");
    assert_eq!(detail["entries"][0]["blocked"], false);
    let (log, _) = operator.html("/api/frag/banlog").await;
    assert!(
        log.contains(">lifted<") && !log.contains("table-warning"),
        "{log}"
    );
}

#[tokio::test]
async fn a_successful_asset_is_not_recorded_but_a_refused_one_is() {
    let origin = origins::fast_origin();
    let operator = signed_in(
        &origin,
        &["-assets", "/static/*", "-asset-public", "/pub/*"],
        &[],
    )
    .await;
    let client = "203.0.113.30";
    assert_eq!(
        operator.visit("/pub/logo.png", client).await,
        StatusCode::OK
    );
    let (status, _) = operator
        .get(&format!("/api/history/client?client={client}"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        operator.visit("/static/app.js", client).await,
        StatusCode::FORBIDDEN
    );
    let (status, detail) = operator
        .get(&format!("/api/history/client?client={client}"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(paths(&detail), ["/static/app.js"]);
    assert_eq!(detail["client"]["errors"], 1);
    let (html, _) = operator.html("/api/frag/visitors").await;
    assert!(html.contains(r#"class="table-info""#), "a 403 last: {html}");
    assert!(html.contains("text-bg-warning\">403<"), "{html}");
}

#[tokio::test]
async fn a_range_banned_in_the_portal_counts_the_addresses_inside_and_names_the_portal() {
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &[], &[]).await;
    let made = operator.ban("198.51.7.9/16", "1h").await;
    assert_eq!(made["client"], "198.51.0.0/16");
    for address in ["198.51.1.1", "198.51.2.2", "198.51.2.2", "203.0.113.40"] {
        operator.visit("/inside", address).await;
    }
    let window = only_window(&operator).await;
    assert_eq!(
        (window["range"].clone(), window["active"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(window["target"], "198.51.0.0/16");
    assert_eq!(window["requests"], 3);
    assert_eq!(window["distinct_clients"], 2);
    assert!(window["trigger"].is_null());
    assert_eq!(window["source"], "banned in the portal by 127.0.0.1");
    let (_, outside) = operator
        .get("/api/history/client?client=203.0.113.40")
        .await;
    assert_eq!(outside["entries"][0]["blocked"], false);
    let (log, _) = operator.html("/api/frag/banlog?q=198.51.2.2").await;
    assert!(
        log.contains(">range<") && log.contains("banned in the portal by 127.0.0.1"),
        "{log}"
    );
    let (none, fragment) = operator.html("/api/frag/banlog?q=no-such-thing").await;
    assert!(none.trim().is_empty());
    assert_eq!(fragment["summary"], "0 of 0 bans");
}

#[tokio::test]
async fn an_unban_outside_the_portal_is_seen_as_lifted_by_the_admin_api() {
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &[], &[]).await;
    operator.ban("203.0.113.50", "30m").await;
    let status = plain_client()
        .delete(url(&operator.running, "/_room/abuse?client=203.0.113.50"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, StatusCode::OK);
    let mut window = Value::Null;
    for _ in 0..100 {
        window = only_window(&operator).await;
        if window["active"] == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        window["active"], false,
        "the sweep notices the lift: {window}"
    );
    assert_eq!(window["end_reason"], "lifted");
    assert!(
        window["lifted_by"].as_str().unwrap().contains("admin API"),
        "{window}"
    );
}

#[tokio::test]
async fn a_permanent_ban_from_before_the_start_has_no_known_beginning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bans.json"),
        r#"{"version":1,"clients":[{"client":"203.0.113.60","permanent":true,"offenses":1}],"ranges":[]}"#,
    )
    .unwrap();
    let origin = origins::fast_origin();
    let data = format!("-data-dir={}", dir.path().display());
    let operator = signed_in(&origin, &[&data], &[]).await;
    let window = only_window(&operator).await;
    assert!(window["began"].is_null(), "{window}");
    assert_eq!(
        (window["permanent"].clone(), window["active"].clone()),
        (json!(true), json!(true))
    );
    let (log, _) = operator.html("/api/frag/banlog").await;
    assert!(
        log.contains("before restart") && log.contains(r#"class="table-danger""#),
        "{log}"
    );
    assert!(
        log.contains(">never</td>"),
        "a permanent ban never ends: {log}"
    );
    let id = window["id"].as_u64().unwrap();
    let (panel, _) = operator.html(&format!("/api/frag/ban?id={id}")).await;
    assert!(
        panel.contains("not known") && panel.contains("restored from bans.json"),
        "{panel}"
    );
    let (_, fragment) = operator.get("/api/frag/visitors").await;
    assert_eq!(fragment["flags"]["persisted"], true);
}

#[tokio::test]
async fn addresses_carry_their_details_in_every_history_table_and_panel() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ip2asn-combined.tsv");
    std::fs::write(
        &file,
        "45.138.12.0\t45.138.12.255\t218785\tLT\tUAB Cherry Servers\n\
         2001:1948::\t2001:1948:ffff:ffff:ffff:ffff:ffff:ffff\t11537\tUS\tInternet2\n",
    )
    .unwrap();
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &[], &[("NADDR_DATA", file.to_str().unwrap())]).await;
    operator.visit("/lt", "45.138.12.24").await;
    operator.visit("/us", "2001:1948::5").await;
    // The file is read off the async workers shortly after the start.
    let mut html = String::new();
    for _ in 0..100 {
        html = operator.html("/api/frag/visitors").await.0;
        if html.contains("UAB Cherry Servers") && html.contains("Internet2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for expected in [
        "🇱🇹",
        "🇺🇸",
        "UAB Cherry Servers",
        "Internet2",
        r#"data-copy="45.138.12.24""#,
        r#"data-copy="0.3.86.161.45.138.12.24""#,
        r#"data-copy="2001:1948::5""#,
        "ip-badge-v4",
        "ip-badge-v6",
        "218785.45.138.12.24",
    ] {
        assert!(html.contains(expected), "{expected}: {html}");
    }
    assert_eq!(html.matches("ip-badge-v8").count(), 1, "{html}");

    let (detail, _) = operator.html("/api/frag/visitor?client=45.138.12.24").await;
    for expected in [
        "Lithuania",
        "45.138.12.0/24",
        "0.3.86.161.45.138.12.0/56",
        "AS218785 · UAB Cherry Servers",
    ] {
        assert!(detail.contains(expected), "{expected}: {detail}");
    }

    operator.ban("45.138.12.24", "1h").await;
    let (bans, _) = operator.html("/api/frag/bans").await;
    assert!(
        bans.contains("🇱🇹") && bans.contains("UAB Cherry Servers"),
        "{bans}"
    );
    let (log, _) = operator.html("/api/frag/banlog").await;
    assert!(
        log.contains("🇱🇹") && log.contains("UAB Cherry Servers") && log.contains("ip-badge-v8"),
        "{log}"
    );
}

#[tokio::test]
async fn a_clients_requests_are_paged_newest_first_in_its_detail() {
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &[], &[]).await;
    let client = "203.0.113.70";
    for n in 0..30 {
        assert_eq!(
            operator.visit(&format!("/r{n}"), client).await,
            StatusCode::OK
        );
    }
    let (first, fragment) = operator
        .html(&format!("/api/frag/visitor?client={client}"))
        .await;
    assert_eq!(fragment["summary"], "1–25 of 30");
    assert!(
        first.contains("1–25 of 30") && first.contains("GET /r29<"),
        "{first}"
    );
    assert!(!first.contains("GET /r0<"), "{first}");
    assert_eq!(
        (fragment["page"].clone(), fragment["pages"].clone()),
        (json!(1), json!(2))
    );
    let (second, fragment) = operator
        .html(&format!("/api/frag/visitor?client={client}&page=2"))
        .await;
    assert_eq!(fragment["summary"], "26–30 of 30");
    assert!(
        second.contains("GET /r0<") && !second.contains("GET /r29<"),
        "{second}"
    );
    // A page past the end shows the last one.
    let (_, fragment) = operator
        .html(&format!("/api/frag/visitor?client={client}&page=99"))
        .await;
    assert_eq!(fragment["page"], 2);
    let (status, answer) = operator.get("/api/frag/visitor?client=192.0.2.200").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(answer["error"], "no requests recorded from that address");
}

#[tokio::test]
async fn bad_questions_get_clear_answers_and_the_history_wants_a_session() {
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &[], &[]).await;
    for (path, status, message) in [
        ("/api/history/client", 400, "client must be an IP address"),
        (
            "/api/history/client?client=nope",
            400,
            "client must be an IP address",
        ),
        (
            "/api/history/client?client=192.0.2.1",
            404,
            "no requests recorded from that address",
        ),
        (
            "/api/frag/visitor?client=203.0.113.0/24",
            400,
            "client must be an IP address",
        ),
        ("/api/history/ban", 400, "id is required"),
        ("/api/history/ban?id=", 400, "id is required"),
        (
            "/api/history/ban?id=x1",
            400,
            "id must be the number of a ban in the log",
        ),
        (
            "/api/history/ban?id=999",
            404,
            "that ban is no longer in the history",
        ),
        (
            "/api/frag/ban?id=999",
            404,
            "that ban is no longer in the history",
        ),
        ("/api/frag/ban", 400, "id is required"),
    ] {
        let (answered, body) = operator.get(path).await;
        assert_eq!(answered.as_u16(), status, "{path}: {body}");
        assert_eq!(body["error"], message, "{path}");
    }
    // Odd paging and filters are clamped, never refused.
    for path in [
        "/api/frag/visitors?page=-3&size=7&flagged=maybe&keys=,,,",
        "/api/frag/banlog?page=999999999999999999999&size=100&q=%00",
    ] {
        let (answered, fragment) = operator.get(path).await;
        assert_eq!(answered, StatusCode::OK, "{path}");
        assert_eq!(fragment["page"], 1, "{path}");
    }

    let anonymous = plain_client();
    for path in [
        "/api/history",
        "/api/history/client?client=192.0.2.1",
        "/api/history/ban?id=1",
        "/api/frag/visitors",
        "/api/frag/visitor?client=192.0.2.1",
        "/api/frag/banlog",
        "/api/frag/ban?id=1",
    ] {
        let answer = anonymous
            .get(format!("{}{path}", operator.base))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{path}");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["error"], "sign in required");
    }

    // Banning from the Visitors row is a change: without the CSRF token nothing happens.
    operator.visit("/x", "203.0.113.80").await;
    let refused = operator
        .client
        .post(format!("{}/api/bans", operator.base))
        .header("Cookie", format!("concert_portal={}", operator.cookie))
        .header(CONTENT_TYPE, "application/json")
        .body(json!({"client": "203.0.113.80", "duration": "1h"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let (_, history) = operator.get("/api/history").await;
    assert_eq!(history["bans"], json!([]));
    assert_eq!(history["clients"][0]["banned_now"], false);
}

#[tokio::test]
async fn a_removal_with_a_ban_is_named_in_the_history_and_turns_the_row_red() {
    let origin = origins::held_origin();
    let operator = signed_in(&origin, &["-cap", "1"], &[]).await;
    let holder = hold_the_only_slot(&operator.running, &origin, "/busy").await;
    let visitor = cookie_client();
    let waiting = visitor
        .get(url(&operator.running, "/api/wait"))
        .header("X-Forwarded-For", "203.0.113.90")
        .send()
        .await
        .unwrap();
    assert_eq!(waiting.status(), StatusCode::TOO_MANY_REQUESTS);
    let (_, line) = operator.get("/api/queue").await;
    let id = line["occupants"][0]["id"].as_str().unwrap().to_owned();
    let (status, kicked) = operator
        .api(
            reqwest::Method::POST,
            "/api/queue/kick",
            Some(json!({"id": id, "ban": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{kicked}");
    let window = only_window(&operator).await;
    assert_eq!(window["target"], "203.0.113.90");
    assert_eq!(
        window["source"],
        "removed from the line and banned in the portal by 127.0.0.1"
    );
    let (html, _) = operator.html("/api/frag/visitors?q=203.0.113.90").await;
    assert!(
        html.contains(r#"class="table-warning""#) || html.contains(r#"class="table-danger""#),
        "{html}"
    );
    origin.release(10);
    let _ = holder.await;
}

/// A naddr service on loopback that knows two addresses and takes 150 ms over each answer,
/// so a table that did not wait for it would show them bare; it never answers for
/// [`STALLED`].
async fn slow_naddr() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    async fn answer(
        axum::extract::Query(query): axum::extract::Query<
            std::collections::HashMap<String, String>,
        >,
    ) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        let asked = query.get("addr").map(String::as_str);
        let wait = if asked == Some(STALLED) { 30_000 } else { 150 };
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let (country, code, asn, network, range) = match query.get("addr").map(String::as_str) {
            Some("45.138.12.24") => (
                "Lithuania",
                "LT",
                218785,
                "UAB Cherry Servers",
                "45.138.12.0/24",
            ),
            Some("2001:1948::") => ("United States", "US", 11537, "Internet2", "2001:1948::/32"),
            _ => return http::StatusCode::NOT_FOUND.into_response(),
        };
        axum::Json(json!({
            "success": true, "country": country, "country_code": code, "asn": asn,
            "description": network, "routed": true, "range4": range, "range6": range,
        }))
        .into_response()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = axum::Router::new().route("/ip", axum::routing::get(answer));
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (addr, server)
}

const STALLED: &str = "192.0.2.77";

#[tokio::test]
async fn with_a_naddr_service_the_first_view_of_a_table_already_has_the_details() {
    let (naddr, server) = slow_naddr().await;
    let origin = origins::fast_origin();
    let service = format!("http://{naddr}");
    let operator = signed_in(&origin, &[], &[("NADDR_ADDR", service.as_str())]).await;
    operator.visit("/lt", "45.138.12.24").await;
    let (html, _) = operator.html("/api/frag/visitors").await;
    assert!(
        html.contains("🇱🇹") && html.contains("AS218785 · UAB Cherry Servers"),
        "{html}"
    );
    // The bans table's first view, of an address no page has shown yet: a client's /64.
    operator.ban("2001:1948::5", "1h").await;
    let (bans, _) = operator.html("/api/frag/bans").await;
    assert!(
        bans.contains("2001:1948::/64") && bans.contains("🇺🇸") && bans.contains("Internet2"),
        "{bans}"
    );
    let (log, _) = operator.html("/api/frag/banlog").await;
    assert!(
        log.contains("2001:1948::/64") && log.contains("🇺🇸") && log.contains("Internet2"),
        "{log}"
    );

    // A service that does not answer holds a page no longer than the budget (600 ms), well
    // before its lookups give up (3 s); the address shows bare and fills in later.
    operator.visit("/stalled", STALLED).await;
    let asked = std::time::Instant::now();
    let (html, _) = operator.html("/api/frag/visitors?q=192.0.2.77").await;
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(2_500),
        "{took:?}"
    );
    assert!(
        html.contains(STALLED) && !html.contains("ip-network"),
        "{html}"
    );
    server.abort();
}

#[tokio::test]
async fn an_ipv6_64_is_one_client_and_carries_no_range_badge() {
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &[], &[]).await;
    operator.ban("2001:db8:1:2::7", "1h").await;
    for path in ["/api/frag/banlog", "/api/frag/bans"] {
        let (html, _) = operator.html(path).await;
        assert!(html.contains("2001:db8:1:2::/64"), "{path}: {html}");
        assert!(html.contains("ip-badge-v6"), "{path}: {html}");
        assert!(!html.contains(">range<"), "{path}: {html}");
    }
    // A wider IPv6 network is a range.
    operator.ban("2001:db8:9::/48", "1h").await;
    let (html, _) = operator.html("/api/frag/banlog?q=2001:db8:9").await;
    assert!(
        html.contains("2001:db8:9::/48") && html.contains(">range<"),
        "{html}"
    );
}

#[tokio::test]
async fn the_visitors_summary_counts_the_clients_forgotten_to_make_room() {
    use std::io::Write as _;
    const CLIENTS: u32 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history.jsonl");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut file = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
    for index in 0..CLIENTS {
        let at = concert::abuse::record::WallTime(now - i64::from(CLIENTS - index) * 1_000_000);
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 + index);
        writeln!(
            file,
            r#"{{"t":"req","at":"{at}","ip":"{ip}","method":"GET","path":"/p","status":200}}"#
        )
        .unwrap();
    }
    file.flush().unwrap();
    drop(file);
    let origin = origins::fast_origin();
    let operator = signed_in(&origin, &["-history-log", log.to_str().unwrap()], &[]).await;
    let (_, fragment) = operator.get("/api/frag/visitors").await;
    let summary = fragment["summary"].as_str().unwrap();
    let number_before = |words: &str| -> u64 {
        let end = summary
            .find(words)
            .unwrap_or_else(|| panic!("{words}: {summary}"));
        let start = summary[..end].rfind(' ').map_or(0, |at| at + 1);
        summary[start..end].parse().unwrap()
    };
    let recorded = number_before(" addresses recorded");
    let forgotten = number_before(" forgotten to make room");
    assert!(recorded <= 4_096 && forgotten >= 904, "{summary}");
    assert_eq!(recorded + forgotten, u64::from(CLIENTS), "{summary}");

    // Without anyone forgotten, the summary says nothing of it.
    let fresh = signed_in(&origin, &[], &[]).await;
    fresh.visit("/", "203.0.113.1").await;
    let (_, fragment) = fresh.get("/api/frag/visitors").await;
    assert!(
        !fragment["summary"].as_str().unwrap().contains("forgotten"),
        "{fragment}"
    );
}
