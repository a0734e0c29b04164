//! End to end: strikes, bans, ban paths, range bans, the ban answers, the admin abuse API, and
//! what bans do to the waiting line. Clients are named with `X-Forwarded-For` through the
//! default trusted loopback proxy, or loopback itself is made an ordinary client with
//! `-trusted-proxies 10.9.9.9`.

mod support;

use std::time::Duration;

use concert::admission::pass::{PassId, PassSigner, unix_now};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, COOKIE, RETRY_AFTER, SET_COOKIE};
use serde_json::{Value, json};
use support::origins::{self, Origin};
use support::*;

const TOKEN: &str = "secret";
/// Makes loopback an ordinary (strikable) client.
const UNTRUSTED_LOOPBACK: [&str; 2] = ["-trusted-proxies", "10.9.9.9"];

async fn start(origin: &Origin, extra: &[&str]) -> concert::Running {
    let upstream = origin.url();
    let mut args = vec!["-upstream", upstream.as_str()];
    args.extend_from_slice(extra);
    concert_with_env(&args, &[("CONCERT_ADMIN_TOKEN", TOKEN)]).await
}

async fn get(concert: &concert::Running, path: &str, client: Option<&str>) -> reqwest::Response {
    let mut request = plain_client().get(url(concert, path));
    if let Some(client) = client {
        request = request.header("x-forwarded-for", client);
    }
    request.send().await.unwrap()
}

/// 429 with the temporary-ban JSON.
async fn is_blocked(response: reqwest::Response) -> bool {
    response.status() == StatusCode::TOO_MANY_REQUESTS
        && response
            .text()
            .await
            .unwrap()
            .contains("temporarily blocked")
}

async fn stats(concert: &concert::Running) -> Value {
    get(concert, "/_room/stats", None)
        .await
        .json()
        .await
        .unwrap()
}

async fn admin(
    concert: &concert::Running,
    method: reqwest::Method,
    query: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = plain_client()
        .request(method, url(concert, &format!("/_room/abuse{query}")))
        .bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn ban(concert: &concert::Running, body: Value) -> (StatusCode, Value) {
    admin(concert, reqwest::Method::POST, "", Some(body)).await
}

async fn unban(concert: &concert::Running, client: &str) -> (StatusCode, Value) {
    let query = format!("?client={}", client.replace('/', "%2F"));
    admin(concert, reqwest::Method::DELETE, &query, None).await
}

/// A Concert with cap 1 whose only slot is held by a request parked at the origin.
async fn full_room(extra: &[&str]) -> (Origin, concert::Running, tokio::task::JoinHandle<()>) {
    let origin = origins::held_origin();
    let mut args = vec!["-cap", "1", "-max-queue", "0"];
    args.extend_from_slice(extra);
    let concert = start(&origin, &args).await;
    let holder_url = url(&concert, "/holder");
    let holder = tokio::spawn(async move {
        let _ = plain_client()
            .get(holder_url)
            .header("x-forwarded-for", "192.0.2.200")
            .send()
            .await;
    });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    (origin, concert, holder)
}

fn waiting_clients(concert: &concert::Running) -> Vec<String> {
    concert
        .app
        .room
        .line_front(100)
        .into_iter()
        .filter_map(|entry| entry.info.client.map(|ip| ip.to_string()))
        .collect()
}

// ----- ban paths ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_ban_path_bans_on_first_hit_and_everything_is_then_blocked() {
    let origin = origins::fast_origin();
    let mut args = vec!["-ban-paths", "/.env,/.git/*"];
    args.extend_from_slice(&UNTRUSTED_LOOPBACK);
    let concert = start(&origin, &args).await;
    let hit = get(&concert, "/.git/config", None).await;
    assert_eq!(hit.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(hit.headers()[RETRY_AFTER], "300");
    assert_eq!(hit.headers()["cache-control"], "no-store");
    assert!(is_blocked(hit).await);
    assert_eq!(origin.hits(), 0);
    assert!(is_blocked(get(&concert, "/hello", None).await).await);
    assert!(is_blocked(get(&concert, "/_room/healthz", None).await).await);
    assert_eq!(origin.hits(), 0);
    let stats = stats_as_admin_sees(&concert).await;
    assert_eq!(stats["abuse_bans_total"], 1);
    // The first hit started the ban; the next two were refused by it.
    assert_eq!(stats["abuse_rejected_total"], 2);
    assert_eq!(stats["abuse_tracked"], 1);
}

/// Stats read through a trusted-looking path would be blocked for a banned loopback, so read
/// them in-process.
async fn stats_as_admin_sees(concert: &concert::Running) -> Value {
    concert::endpoints::figures::stats_json(&concert.app)
}

#[tokio::test]
async fn an_allow_listed_client_on_a_ban_path_is_proxied() {
    let origin = origins::fast_origin();
    let concert = start(
        &origin,
        &[
            "-ban-paths",
            "/.env",
            "-abuse-allow",
            "127.0.0.1/32",
            "-trusted-proxies",
            "10.9.9.9",
        ],
    )
    .await;
    let response = get(&concert, "/.env", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn a_forwarded_client_is_banned_and_its_proxy_is_not() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-ban-paths", "/.env"]).await;
    assert!(is_blocked(get(&concert, "/.env", Some("203.0.113.9")).await).await);
    assert!(is_blocked(get(&concert, "/hello", Some("203.0.113.9")).await).await);
    assert_eq!(
        get(&concert, "/hello", Some("198.51.100.4")).await.status(),
        StatusCode::OK
    );
    assert_eq!(get(&concert, "/hello", None).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_trailing_slash_or_dot_segment_does_not_dodge_a_ban_path() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-ban-paths", "/.env"]).await;
    assert!(is_blocked(get(&concert, "/.env/", Some("203.0.113.1")).await).await);
    assert!(is_blocked(get(&concert, "//.env", Some("203.0.113.2")).await).await);
    assert!(is_blocked(get(&concert, "/./.env", Some("203.0.113.3")).await).await);
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn an_ipv6_ban_covers_its_64() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-ban-paths", "/.env"]).await;
    assert!(is_blocked(get(&concert, "/.env", Some("2001:db8:1:2::1")).await).await);
    assert!(is_blocked(get(&concert, "/x", Some("2001:db8:1:2:ffff::9")).await).await);
    assert_eq!(
        get(&concert, "/x", Some("2001:db8:1:3::1")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn ban_paths_changed_at_runtime_apply_at_once() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &[]).await;
    assert_eq!(
        get(&concert, "/.env", Some("203.0.113.9")).await.status(),
        StatusCode::OK
    );
    concert
        .app
        .apply_change(
            serde_json::json!({"ban_paths": "/.env", "abuse_strikes": 7, "abuse_window": "2m"})
                .as_object()
                .unwrap(),
            &[],
        )
        .unwrap();
    assert!(is_blocked(get(&concert, "/.env", Some("203.0.113.10")).await).await);
    let live = concert.app.abuse.settings();
    assert_eq!(live.threshold, 7);
    assert_eq!(live.window, Duration::from_secs(120));
    concert
        .app
        .apply_change(
            serde_json::json!({"abuse_strikes": 20})
                .as_object()
                .unwrap(),
            &[],
        )
        .unwrap();
    assert_eq!(concert.app.abuse.settings().threshold, 20);
}

// ----- strikes end to end ----------------------------------------------------------------------

#[tokio::test]
async fn the_fifth_wrong_admin_token_is_answered_as_banned() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &UNTRUSTED_LOOPBACK).await;
    for _ in 0..4 {
        let response = plain_client()
            .post(url(&concert, "/_room/cap"))
            .bearer_auth("wrong")
            .body(r#"{"cap":3}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    let fifth = plain_client()
        .post(url(&concert, "/_room/cap"))
        .bearer_auth("wrong")
        .body(r#"{"cap":3}"#)
        .send()
        .await
        .unwrap();
    assert!(is_blocked(fifth).await);
    let stats = stats_as_admin_sees(&concert).await;
    // The fourth strike (4 × 5 = 20) started the ban; the fifth request never got as far.
    assert_eq!(stats["abuse_strikes_total"], 4);
    assert_eq!(stats["abuse_bans_total"], 1);
}

#[tokio::test]
async fn wrong_tokens_on_the_abuse_routes_are_struck_too() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &UNTRUSTED_LOOPBACK).await;
    for _ in 0..4 {
        let response = plain_client()
            .get(url(&concert, "/_room/abuse"))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    assert!(is_blocked(get(&concert, "/hello", None).await).await);
}

#[tokio::test]
async fn with_abuse_off_nobody_is_struck_and_the_abuse_routes_are_gone() {
    let origin = origins::fast_origin();
    let mut args = vec!["-abuse=false"];
    args.extend_from_slice(&UNTRUSTED_LOOPBACK);
    let concert = start(&origin, &args).await;
    for _ in 0..10 {
        let response = plain_client()
            .post(url(&concert, "/_room/cap"))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    assert_eq!(get(&concert, "/hello", None).await.status(), StatusCode::OK);
    let (status, body) = admin(&concert, reqwest::Method::GET, "", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({"error": "abuse registry disabled"}));
    let stats = stats(&concert).await;
    assert_eq!(stats["abuse_enabled"], false);
    assert_eq!(stats["abuse_strikes_total"], 0);
}

fn pass_cookie(concert: &concert::Running, n: u8) -> String {
    let id: PassId = [n; 16];
    format!(
        "concert_admit={}",
        concert.app.pass.mint(&id, unix_now() + 600)
    )
}

#[tokio::test]
async fn the_third_forged_asset_pass_is_answered_as_banned() {
    let origin = origins::fast_origin();
    let mut args = vec!["-assets", "/assets/*", "-abuse-strikes", "10"];
    args.extend_from_slice(&UNTRUSTED_LOOPBACK);
    let concert = start(&origin, &args).await;
    let forged = || {
        plain_client()
            .get(url(&concert, "/assets/app.js"))
            .header(COOKIE, "concert_admit=forged")
            .send()
    };
    assert_eq!(forged().await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(forged().await.unwrap().status(), StatusCode::FORBIDDEN);
    assert!(is_blocked(forged().await.unwrap()).await);
}

#[tokio::test]
async fn stale_passes_are_refused_but_never_struck() {
    let origin = origins::fast_origin();
    let mut args = vec!["-assets", "/assets/*"];
    args.extend_from_slice(&UNTRUSTED_LOOPBACK);
    let concert = start(&origin, &args).await;
    let other = PassSigner::new(&[b'x'; 32], None);
    let stale = format!("concert_admit={}", other.mint(&[7; 16], unix_now() + 600));
    for _ in 0..5 {
        let response = plain_client()
            .get(url(&concert, "/assets/app.js"))
            .header(COOKIE, &stale)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
    }
    assert_eq!(stats(&concert).await["abuse_strikes_total"], 0);
}

#[tokio::test]
async fn the_third_per_pass_throttle_is_answered_as_banned() {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let parked = gate.clone();
    let origin = origins::origin_with(move |req, _| {
        let gate = parked.clone();
        async move {
            if req.uri().path().contains("slow")
                && let Ok(permit) = gate.acquire().await
            {
                permit.forget();
            }
            origins::text("ok")
        }
    });
    let mut args = vec![
        "-assets",
        "/assets/*",
        "-asset-user-cap-h1",
        "1",
        "-asset-user-wait",
        "20ms",
        "-abuse-strikes",
        "2",
    ];
    args.extend_from_slice(&UNTRUSTED_LOOPBACK);
    let concert = start(&origin, &args).await;
    let pass = pass_cookie(&concert, 1);
    let parked_request = plain_client()
        .get(url(&concert, "/assets/slow"))
        .header(COOKIE, &pass);
    let holder = tokio::spawn(async move { parked_request.send().await });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    let throttled = || {
        plain_client()
            .get(url(&concert, "/assets/x"))
            .header(COOKIE, &pass)
            .send()
    };
    for _ in 0..2 {
        let response = throttled().await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(!is_blocked(response).await);
    }
    assert!(is_blocked(throttled().await.unwrap()).await);
    gate.add_permits(1);
    let _ = holder.await;
}

#[tokio::test]
async fn cookieless_queue_churn_is_banned_but_a_cookie_jar_never_is() {
    let (origin, concert, holder) = full_room(&["-abuse-strikes", "3"]).await;
    // A cookie-jar client keeps its ticket: only its first arrival is cookieless.
    let jar = cookie_client();
    for _ in 0..6 {
        let response = jar
            .get(url(&concert, "/api/x"))
            .header("x-forwarded-for", "198.51.100.4")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(!is_blocked(response).await);
    }
    // A script that never keeps the cookie queues afresh each time.
    for _ in 0..3 {
        let response = get(&concert, "/api/x", Some("203.0.113.9")).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(!is_blocked(response).await);
    }
    let abuse = &concert.app.abuse;
    assert!(
        eventually(Duration::from_secs(2), || abuse
            .banned("203.0.113.9".parse().unwrap())
            .is_some())
        .await
    );
    assert!(is_blocked(get(&concert, "/api/x", Some("203.0.113.9")).await).await);
    assert!(abuse.banned("198.51.100.4".parse().unwrap()).is_none());
    origin.release(1);
    let _ = holder.await;
}

// ----- ban answers -----------------------------------------------------------------------------

#[tokio::test]
async fn a_permanent_ban_is_403_and_the_status_poll_says_ready() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &[]).await;
    let (status, _) = ban(
        &concert,
        json!({"client": "203.0.113.9", "duration": "permanent"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let api = get(&concert, "/x", Some("203.0.113.9")).await;
    assert_eq!(api.status(), StatusCode::FORBIDDEN);
    assert!(api.headers().get(RETRY_AFTER).is_none());
    assert_eq!(
        api.headers()[CONTENT_TYPE],
        "application/json; charset=utf-8"
    );
    assert!(api.text().await.unwrap().contains(r#""permanent":true"#));
    let page = plain_client()
        .get(url(&concert, "/x"))
        .header("x-forwarded-for", "203.0.113.9")
        .header(ACCEPT, HTML_ACCEPT)
        .header(COOKIE, "room_ticket=abc")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::FORBIDDEN);
    let cleared = set_cookies(&page, "room_ticket");
    assert_eq!(cleared.len(), 1);
    assert!(cleared[0].starts_with("room_ticket=;"));
    assert!(cleared[0].contains("Max-Age=0"));
    assert!(page.text().await.unwrap().contains("Access blocked"));
    let poll = get(&concert, "/queue/status", Some("203.0.113.9")).await;
    assert_eq!(poll.status(), StatusCode::OK);
    assert_eq!(poll.headers()["cache-control"], "no-store");
    assert_eq!(poll.text().await.unwrap(), r#"{"ready":true}"#);
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn a_temporary_ban_page_names_the_wait_in_go_duration_text() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-ban-paths", "/.env"]).await;
    let page = plain_client()
        .get(url(&concert, "/.env"))
        .header("x-forwarded-for", "203.0.113.9")
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(page.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
    let text = page.text().await.unwrap();
    assert!(text.contains("Try again in 5m0s."), "{text}");
}

#[tokio::test]
async fn abuse_off_stops_enforcing_and_on_again_restores_a_permanent_ban() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &[]).await;
    ban(
        &concert,
        json!({"client": "203.0.113.9", "permanent": true}),
    )
    .await;
    let toggle = |on: bool| {
        concert
            .app
            .apply_change(serde_json::json!({ "abuse": on }).as_object().unwrap(), &[])
            .unwrap();
    };
    toggle(false);
    assert_eq!(
        get(&concert, "/x", Some("203.0.113.9")).await.status(),
        StatusCode::OK
    );
    toggle(true);
    assert_eq!(
        get(&concert, "/x", Some("203.0.113.9")).await.status(),
        StatusCode::FORBIDDEN
    );
}

// ----- admin API ----------------------------------------------------------------------------------

#[tokio::test]
async fn the_admin_list_shows_a_ban_path_ban_and_delete_lifts_it() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-ban-paths", "/.env"]).await;
    get(&concert, "/.env", Some("203.0.113.9")).await;
    let (status, list) = admin(&concert, reqwest::Method::GET, "", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["tracked"], 1);
    assert_eq!(list["ranges"], 0);
    let bans = list["bans"].as_array().unwrap();
    assert_eq!(bans.len(), 1);
    assert_eq!(bans[0]["client"], "203.0.113.9");
    assert_eq!(bans[0]["offenses"], 1);
    assert_eq!(bans[0]["range"], false);
    assert_eq!(bans[0]["permanent"], false);
    assert!(bans[0]["remaining_seconds"].as_u64().unwrap() <= 300);
    assert!(bans[0]["until"].as_str().unwrap().ends_with('Z'));

    let (status, body) = unban(&concert, "203.0.113.9").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"unbanned": "203.0.113.9"}));
    assert_eq!(
        get(&concert, "/x", Some("203.0.113.9")).await.status(),
        StatusCode::OK
    );
    let (status, body) = unban(&concert, "nope").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"],
        "client must be an IP address or a CIDR range such as 203.0.113.0/24"
    );
    let (status, body) = unban(&concert, "192.0.2.1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"client": "192.0.2.1", "error": "client not tracked"})
    );
    let (status, _) = admin(&concert, reqwest::Method::DELETE, "", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_repeated_client_in_delete_lifts_the_first_one_named() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-ban-paths", "/.env"]).await;
    get(&concert, "/.env", Some("203.0.113.10")).await;
    get(&concert, "/.env", Some("203.0.113.13")).await;
    let (status, body) = admin(
        &concert,
        reqwest::Method::DELETE,
        "?client=203.0.113.10&client=203.0.113.13",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"unbanned": "203.0.113.10"}));
    assert_eq!(
        get(&concert, "/x", Some("203.0.113.10")).await.status(),
        StatusCode::OK
    );
    assert_ne!(
        get(&concert, "/x", Some("203.0.113.13")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn abuse_routes_need_the_token() {
    let origin = origins::fast_origin();
    let without = concert(&["-upstream", &origin.url()]).await;
    let response = get(&without, "/_room/abuse", None).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.text().await.unwrap().is_empty());
    let with = start(&origin, &[]).await;
    let response = get(&with, "/_room/abuse", None).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_range_ban_blocks_its_addresses_until_deleted() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-abuse-allow", "198.51.5.0/24"]).await;
    let (status, body) = ban(
        &concert,
        json!({"client": "198.51.7.9/16", "duration": "1h"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["client"], "198.51.0.0/16");
    assert_eq!(body["range"], true);
    assert_eq!(body["permanent"], false);
    assert_eq!(body["exempt_within"], json!(["198.51.5.0/24"]));
    assert!(body["until"].is_string());
    assert!(is_blocked(get(&concert, "/x", Some("198.51.100.4")).await).await);
    assert!(is_blocked(get(&concert, "/x", Some("198.51.200.1")).await).await);
    assert_eq!(
        get(&concert, "/x", Some("198.51.5.9")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        get(&concert, "/x", Some("198.52.0.1")).await.status(),
        StatusCode::OK
    );
    assert_eq!(get(&concert, "/x", None).await.status(), StatusCode::OK);
    let (_, list) = admin(&concert, reqwest::Method::GET, "", None).await;
    assert_eq!(list["ranges"], 1);
    assert_eq!(list["bans"][0]["client"], "198.51.0.0/16");
    assert_eq!(list["bans"][0]["range"], true);
    let (status, _) = ban(&concert, json!({"client": "10.0.0.0/7", "duration": "1h"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = unban(&concert, "10.0.0.0/7").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"],
        "range is too broad: use /8 or narrower for IPv4 and /16 or narrower for IPv6"
    );
    let (status, body) = unban(&concert, "198.51.0.0/16").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["unbanned"], "198.51.0.0/16");
    assert_eq!(
        get(&concert, "/x", Some("198.51.100.4")).await.status(),
        StatusCode::OK
    );
    assert_eq!(stats(&concert).await["abuse_range_bans"], 0);
}

#[tokio::test]
async fn admin_bans_validate_duration_target_and_exemption() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &[]).await;
    let (status, body) = ban(&concert, json!({"client": "203.0.113.9", "duration": "1h"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["client"], "203.0.113.9");
    assert_eq!(body["range"], false);
    assert!(body.get("exempt_within").is_none());
    let left = concert
        .app
        .abuse
        .banned("203.0.113.9".parse().unwrap())
        .and_then(|b| b.retry_after_secs())
        .unwrap();
    assert!(left >= 59 * 60);
    ban(
        &concert,
        json!({"client": "203.0.113.9", "duration": "10m"}),
    )
    .await;
    let left = concert
        .app
        .abuse
        .banned("203.0.113.9".parse().unwrap())
        .and_then(|b| b.retry_after_secs())
        .unwrap();
    assert!(left <= 600);
    assert_eq!(stats(&concert).await["abuse_bans_total"], 1);
    for duration in ["forever", "5s", "9000h", ""] {
        let (status, body) = ban(
            &concert,
            json!({"client": "203.0.113.9", "duration": duration}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{duration:?}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .starts_with("duration must be between 1m and 8760h")
        );
    }
    let (status, _) = ban(&concert, json!({"client": "nope", "duration": "1h"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Loopback is a trusted proxy by default, hence exempt.
    let (status, body) = ban(&concert, json!({"client": "127.0.0.1", "duration": "1h"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body["error"].as_str().unwrap().contains("exempt"));
    let (status, _) = unban(&concert, "203.0.113.9").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        get(&concert, "/x", Some("203.0.113.9")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn stats_report_the_registry() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-ban-paths", "/.env"]).await;
    get(&concert, "/.env", Some("203.0.113.9")).await;
    get(&concert, "/x", Some("203.0.113.9")).await;
    ban(&concert, json!({"client": "10.1.0.0/16", "duration": "1h"})).await;
    let stats = stats(&concert).await;
    assert_eq!(stats["abuse_enabled"], true);
    assert_eq!(stats["abuse_tracked"], 1);
    assert_eq!(stats["abuse_range_bans"], 1);
    assert_eq!(stats["abuse_bans_total"], 2);
    assert_eq!(stats["abuse_rejected_total"], 1);
    assert_eq!(stats["abuse_strikes_total"], 0);
    assert_eq!(stats["abuse_dropped_total"], 0);
}

// ----- the waiting line ---------------------------------------------------------------------------

#[tokio::test]
async fn a_queued_client_is_keyed_by_its_forwarded_address() {
    let (origin, concert, holder) = full_room(&[]).await;
    get(&concert, "/api/x", Some("203.0.113.7")).await;
    assert_eq!(waiting_clients(&concert), ["203.0.113.7"]);
    origin.release(1);
    let _ = holder.await;
}

/// Joins the line from `client` with `cookie` (if any) and returns the `room_ticket` it was given.
async fn join(concert: &concert::Running, client: &str, cookie: Option<&str>) -> String {
    let mut request = plain_client()
        .get(url(concert, "/api/x"))
        .header("x-forwarded-for", client);
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    response
        .cookies()
        .find(|cookie| cookie.name() == "room_ticket")
        .map(|cookie| cookie.value().to_string())
        .expect("a room_ticket")
}

#[tokio::test]
async fn cookieless_arrivals_are_struck_but_stale_tickets_are_not() {
    let (origin, concert, holder) = full_room(&["-abuse-strikes", "2"]).await;
    for _ in 0..2 {
        get(&concert, "/api/x", Some("203.0.113.9")).await;
    }
    // A ticket Concert issued and has since dropped (expired, removed, before a restart) is a
    // returning visitor: joining again with it costs nothing.
    let issued = join(&concert, "198.51.100.4", None).await;
    assert!(concert.app.room.remove_token(&issued));
    for _ in 0..3 {
        join(
            &concert,
            "198.51.100.4",
            Some(&format!("room_ticket={issued}")),
        )
        .await;
    }
    let abuse = &concert.app.abuse;
    assert!(
        eventually(Duration::from_secs(2), || abuse
            .banned("203.0.113.9".parse().unwrap())
            .is_some())
        .await
    );
    assert!(abuse.banned("198.51.100.4".parse().unwrap()).is_none());
    origin.release(1);
    let _ = holder.await;
}

/// The attack: any `room_ticket` value at all used to spare a newcomer the churn strike, so one
/// address could fill the line with made-up tickets. Made-up and foreign tickets now count as
/// none.
#[tokio::test]
async fn made_up_tickets_are_struck_like_no_ticket() {
    let (origin, concert, holder) = full_room(&["-abuse-strikes", "3"]).await;
    // Another Concert's ticket (another admission secret) is as foreign as a made-up one.
    let elsewhere = {
        let other_origin = origins::held_origin();
        let other = start(&other_origin, &["-cap", "1", "-max-queue", "0"]).await;
        let _held = tokio::spawn({
            let holder_url = url(&other, "/holder");
            async move { plain_client().get(holder_url).send().await }
        });
        assert!(eventually(Duration::from_secs(5), || other_origin.in_flight() == 1).await);
        let ticket = join(&other, "192.0.2.50", None).await;
        other_origin.release(1);
        ticket
    };
    for cookie in [
        "room_ticket=x".to_string(),
        format!("room_ticket={}", "0".repeat(32)),
        format!("room_ticket={elsewhere}"),
    ] {
        join(&concert, "198.51.100.77", Some(&cookie)).await;
    }
    let abuse = &concert.app.abuse;
    assert!(
        eventually(Duration::from_secs(2), || abuse
            .banned("198.51.100.77".parse().unwrap())
            .is_some())
        .await
    );
    assert!(waiting_clients(&concert).is_empty());
    origin.release(1);
    let _ = holder.await;
}

/// One address (or IPv6 /64) may not hold more than `-max-queue-per-ip` places in line, even with
/// every ticket kept and polled; other addresses queue as usual, and `-abuse-allow` lifts the bound.
#[tokio::test]
async fn one_address_cannot_fill_the_line() {
    let (origin, concert, holder) =
        full_room(&["-max-queue-per-ip", "2", "-abuse-allow", "192.0.2.0/24"]).await;
    for _ in 0..2 {
        join(&concert, "203.0.113.5", None).await;
    }
    let refused = get(&concert, "/api/x", Some("203.0.113.5")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()[RETRY_AFTER], "5");
    assert!(refused.headers().get(SET_COOKIE).is_none());
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["queued"], false);
    assert_eq!(body["error"], "too many visitors waiting from this address");
    // Browsers get a page that retries by itself.
    let page = plain_client()
        .get(url(&concert, "/"))
        .header("x-forwarded-for", "203.0.113.5")
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("http-equiv=\"refresh\"")
    );
    // The same /64 is one client; another /64 and another address are not.
    for client in ["2001:db8:5:6::1", "2001:db8:5:6::2"] {
        join(&concert, client, None).await;
    }
    let same_net = get(&concert, "/api/x", Some("2001:db8:5:6:ffff::9")).await;
    assert!(same_net.headers().get(SET_COOKIE).is_none());
    join(&concert, "2001:db8:5:7::1", None).await;
    join(&concert, "198.51.100.8", None).await;
    for _ in 0..3 {
        join(&concert, "192.0.2.9", None).await;
    }
    assert_eq!(concert.app.room.stats().live_queue_depth, 9);
    assert_eq!(stats(&concert).await["address_full_total"], 3);
    origin.release(1);
    let _ = holder.await;
}

#[tokio::test]
async fn a_ban_drops_the_clients_waiting_visitors_at_once() {
    let (origin, concert, holder) = full_room(&[]).await;
    get(&concert, "/api/x", Some("203.0.113.7")).await;
    get(&concert, "/api/x", Some("198.51.100.4")).await;
    assert_eq!(concert.app.room.stats().live_queue_depth, 2);
    let (status, body) = ban(&concert, json!({"client": "203.0.113.7", "duration": "1h"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["dropped"], 1);
    // Applied before the answer: no waiting, no flicker.
    let room = concert.app.room.stats();
    assert_eq!(room.live_queue_depth, 1);
    assert!(room.removed_total >= 1);
    assert_eq!(waiting_clients(&concert), ["198.51.100.4"]);
    origin.release(1);
    let _ = holder.await;
}

#[tokio::test]
async fn a_strike_ban_drops_waiting_visitors_without_an_operator() {
    let (origin, concert, holder) = full_room(&[]).await;
    get(&concert, "/api/x", Some("203.0.113.7")).await;
    get(&concert, "/api/x", Some("198.51.100.4")).await;
    concert
        .app
        .abuse
        .ban_for(
            "203.0.113.7".parse().unwrap(),
            concert::abuse::BanLength::Timed(Duration::from_secs(3600)),
        )
        .unwrap();
    assert!(
        eventually(Duration::from_secs(2), || concert
            .app
            .room
            .stats()
            .live_queue_depth
            == 1)
        .await
    );
    assert_eq!(waiting_clients(&concert), ["198.51.100.4"]);
    origin.release(1);
    let _ = holder.await;
}

#[tokio::test]
async fn a_permanently_banned_visitor_is_dropped_and_its_page_reloads_into_the_notice() {
    let (origin, concert, holder) = full_room(&UNTRUSTED_LOOPBACK).await;
    let jar = cookie_client();
    let queued = jar
        .get(url(&concert, "/page"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), StatusCode::OK);
    assert_eq!(concert.app.room.stats().live_queue_depth, 1);
    // Banned through the in-process API: loopback is the banned client here, so the admin API
    // over loopback would be refused once the ban starts.
    let outcome = concert
        .app
        .abuse
        .ban(
            concert::abuse::BanTarget::parse("127.0.0.1").unwrap(),
            concert::abuse::BanLength::Permanent,
        )
        .unwrap();
    assert_eq!(outcome.dropped, 1);
    assert!(outcome.permanent);
    assert_eq!(outcome.until, None);
    assert_eq!(concert.app.room.stats().live_queue_depth, 0);
    let poll = jar
        .get(url(&concert, "/queue/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(poll.text().await.unwrap(), r#"{"ready":true}"#);
    let reload = jar
        .get(url(&concert, "/page"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status(), StatusCode::FORBIDDEN);
    assert!(!set_cookies(&reload, "room_ticket").is_empty());
    assert!(reload.text().await.unwrap().contains("Access blocked"));
    origin.release(1);
    let _ = holder.await;
}

#[tokio::test]
async fn a_queued_client_hitting_a_ban_path_leaves_the_line() {
    let (origin, concert, holder) = full_room(&["-ban-paths", "/.env"]).await;
    let jar = cookie_client();
    let queued = jar
        .get(url(&concert, "/page"))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(concert.app.room.stats().live_queue_depth, 1);
    let hit = jar
        .get(url(&concert, "/.env"))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert!(is_blocked(hit).await);
    assert!(
        eventually(Duration::from_secs(2), || concert
            .app
            .room
            .stats()
            .live_queue_depth
            == 0)
        .await
    );
    origin.release(1);
    let _ = holder.await;
}

#[tokio::test]
async fn an_allow_listed_visitor_stays_in_line_under_a_range_ban() {
    let (origin, concert, holder) = full_room(&[
        "-abuse-allow",
        "127.0.0.1/32",
        "-trusted-proxies",
        "10.9.9.9",
    ])
    .await;
    get(&concert, "/api/x", None).await;
    assert_eq!(concert.app.room.stats().live_queue_depth, 1);
    let (status, body) = ban(&concert, json!({"client": "127.0.0.0/8", "duration": "1h"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["dropped"], 0);
    assert_eq!(body["exempt_within"], json!(["127.0.0.1/32"]));
    assert_eq!(concert.app.room.stats().live_queue_depth, 1);
    origin.release(1);
    let _ = holder.await;
}
