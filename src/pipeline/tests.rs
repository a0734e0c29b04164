//! Each stage of the pipeline, in process: the pipeline is the catch-all of an axum `Router`
//! (see [`super::router`]), called with `oneshot` and no listener. Requests that reach the
//! origin go to a real origin on 127.0.0.1:0 (or a port nothing listens on, for failures).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use http::{HeaderMap, Method, Request, Response, StatusCode, Version, header};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use super::{ConnInfo, router};
use crate::abuse::{BanLength, BanTarget};
use crate::app::App;
use crate::config::{self, Loaded};
use crate::proxy::Fault;
use crate::room::{Arrival, Decision};

use crate::test_origins as origins;

const BROWSER: &str = "text/html,application/xhtml+xml,*/*;q=0.8";
/// A client the default `-trusted-proxies` do not cover.
const VISITOR: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));

/// An application built from Go-style flags, without a data directory.
fn app(args: &[&str]) -> Arc<App> {
    let mut argv: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    argv.push("-data-dir=".into());
    argv.push("-access-log=false".into());
    let mut config = match config::load(&argv, &HashMap::new()) {
        Ok(Loaded::Run(config)) => *config,
        _ => panic!("flags {argv:?} refused"),
    };
    config.validate().expect("valid settings");
    App::new(config).expect("app")
}

/// A request from `peer`, as the server would hand it over.
fn request(method: Method, target: &str, peer: IpAddr) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(target)
        .header(header::HOST, "shop.test")
        .extension(ConnInfo {
            peer: Some(peer),
            tls: false,
        })
}

fn get(target: &str) -> Request<Body> {
    request(Method::GET, target, VISITOR)
        .body(Body::empty())
        .unwrap()
}

/// Bans `target` (an address or range) for `length`.
fn ban(app: &App, target: &str, length: BanLength) {
    let target = BanTarget::parse(target).expect("a ban target");
    app.abuse.ban(target, length).expect("the ban is taken");
}

async fn send(app: &Arc<App>, req: Request<Body>) -> Response<Body> {
    router(app.clone()).oneshot(req).await.unwrap()
}

async fn text(response: Response<Body>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn set_cookies(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .collect()
}

/// Takes the room's only page slot, as a visitor being served would.
fn occupy_the_only_slot(app: &App) -> impl Drop {
    let arrival = Arrival {
        ticket_cookie: None,
        pass_cookie: None,
        client: None,
    };
    let Decision::Admit(admission) = app.room.arrive(arrival) else {
        panic!("an empty room admits");
    };
    let slot = futures_util::FutureExt::now_or_never(app.room.admit(admission));
    match slot {
        Some(crate::room::AdmitResult::Admitted(slot)) => slot,
        _ => panic!("a free slot is taken at once"),
    }
}

// Stage 1: inspect.

#[tokio::test]
async fn malformed_requests_are_refused_and_counted_before_any_route() {
    let app = app(&["-upstream", "http://127.0.0.1:9"]);
    let no_host = Request::builder()
        .uri("/page")
        .version(Version::HTTP_11)
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, no_host).await.status(), StatusCode::BAD_REQUEST);
    let long = format!("/{}", "a".repeat(9 * 1024));
    assert_eq!(
        send(&app, get(&long)).await.status(),
        StatusCode::URI_TOO_LONG
    );
    let coded = request(Method::POST, "/form", VISITOR)
        .header(header::TRANSFER_ENCODING, "gzip, chunked")
        .body(Body::empty())
        .unwrap();
    let refused = send(&app, coded).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(refused.headers()[header::CONNECTION], "close");
    let hidden = send(&app, get("/static/%2e%2e%2fadmin")).await;
    assert_eq!(hidden.status(), StatusCode::BAD_REQUEST);
    assert_eq!(app.counters.bad_requests_total.load(Ordering::Relaxed), 4);
    assert_eq!(app.counters.proxied_total.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_normalised_path_reaches_the_reserved_route_it_names() {
    let app = app(&["-upstream", "http://127.0.0.1:9"]);
    let response = send(&app, get("/static/../_room/%68ealthz")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(text(response).await, "ok");
}

// Stages 2 and 3: client identity and bans.

#[tokio::test]
async fn a_trusted_proxy_names_the_client_the_ban_applies_to() {
    let app = app(&["-upstream", "http://127.0.0.1:9"]);
    ban(
        &app,
        "203.0.113.9",
        BanLength::Timed(Duration::from_secs(600)),
    );
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let forwarded = request(Method::GET, "/_room/healthz", loopback)
        .header("x-forwarded-for", "203.0.113.9")
        .body(Body::empty())
        .unwrap();
    let banned = send(&app, forwarded).await;
    assert_eq!(banned.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(banned.headers().contains_key(header::RETRY_AFTER));
    // The same claim from an untrusted peer names nobody: the peer is the client.
    let untrusted = request(Method::GET, "/_room/healthz", VISITOR)
        .header("x-forwarded-for", "203.0.113.9")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, untrusted).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_banned_waiting_page_is_sent_in_and_its_ticket_dropped() {
    let app = app(&["-upstream", "http://127.0.0.1:9"]);
    ban(&app, &VISITOR.to_string(), BanLength::Permanent);
    let poll = send(&app, get("/queue/status")).await;
    assert_eq!(poll.status(), StatusCode::OK);
    assert_eq!(text(poll).await, r#"{"ready":true}"#);
    let page = request(Method::GET, "/page", VISITOR)
        .header(header::ACCEPT, BROWSER)
        .header(header::COOKIE, "room_ticket=abc")
        .body(Body::empty())
        .unwrap();
    let blocked = send(&app, page).await;
    assert_eq!(blocked.status(), StatusCode::FORBIDDEN);
    assert!(
        set_cookies(blocked.headers())
            .iter()
            .any(|cookie| cookie.starts_with("room_ticket=;") && cookie.contains("Max-Age=0"))
    );
    assert!(text(blocked).await.contains("Access blocked"));
}

// Stage 4: routes.

#[tokio::test]
async fn reserved_routes_are_answered_for_every_method_and_never_forwarded() {
    let app = app(&["-upstream", "http://127.0.0.1:9"]);
    let stats = send(&app, get("/_room/stats/")).await;
    assert_eq!(stats.status(), StatusCode::OK);
    let stats: serde_json::Value = serde_json::from_str(&text(stats).await).unwrap();
    assert_eq!(stats["cap"], 434);
    assert_eq!(
        send(&app, get("/_room/nope")).await.status(),
        StatusCode::NOT_FOUND
    );
    let delete = request(Method::DELETE, "/_room/healthz", VISITOR)
        .body(Body::empty())
        .unwrap();
    let refused = send(&app, delete).await;
    assert_eq!(refused.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(refused.headers()[header::ALLOW], "GET, HEAD");
    let config = send(&app, get("/_concert/config")).await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text(config).await).unwrap()["enabled"],
        false
    );
    let script = send(&app, get("/_concert/waiting.js")).await;
    assert_eq!(script.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    let metrics = text(send(&app, get("/metrics")).await).await;
    assert!(metrics.contains("concert_cap 434"), "{metrics}");
    assert_eq!(app.counters.proxied_total.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_bypassed_path_goes_to_the_origin_and_a_refused_one_is_the_origins_fault() {
    let origin = origins::fast_origin();
    let served = app(&["-upstream", &origin.url(), "-bypass", "/webhooks/*"]);
    let passed = send(&served, get("/webhooks/pay")).await;
    assert_eq!(passed.status(), StatusCode::OK);
    assert_eq!(text(passed).await, "ok");
    assert_eq!(origin.paths(), ["/webhooks/pay"]);

    let dead = self::app(&[
        "-upstream",
        &origins::dead_origin_url(),
        "-bypass",
        "/webhooks/*",
    ]);
    let failed = send(&dead, get("/webhooks/pay")).await;
    assert_eq!(failed.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(dead.upstream_failures.get(Fault::Origin), 1);
    assert_eq!(dead.upstream_failures.get(Fault::Client), 0);
    let stats = crate::endpoints::figures::stats_json(&dead);
    assert_eq!(stats["upstream_failures_origin_total"], 1);
}

// Stage 5: the tiers.

#[tokio::test]
async fn assets_and_streams_need_a_pass_and_public_assets_do_not() {
    let origin = origins::fast_origin();
    let app = app(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/static/*",
        "-asset-public",
        "/public/*",
        "-stream-paths",
        "/events",
    ]);
    assert_eq!(
        send(&app, get("/static/app.css")).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        send(&app, get("/events")).await.status(),
        StatusCode::FORBIDDEN
    );
    let forged = request(Method::GET, "/static/app.css", VISITOR)
        .header(header::COOKIE, "concert_admit=forged")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, forged).await.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        send(&app, get("/public/logo.png")).await.status(),
        StatusCode::OK
    );
    assert_eq!(origin.paths(), ["/public/logo.png"]);
}

// Stage 6: gated.

#[tokio::test]
async fn an_admitted_page_gets_its_pass_and_the_origins_answer() {
    let origin = origins::fast_origin();
    let app = app(&["-upstream", &origin.url(), "-cap", "1"]);
    let page = send(&app, get("/page")).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        set_cookies(page.headers())
            .iter()
            .any(|cookie| cookie.starts_with("concert_admit="))
    );
    assert_eq!(text(page).await, "ok");
    assert_eq!(app.room.stats().admitted_total, 1);
    assert_eq!(
        app.room.stats().occupancy,
        0,
        "the slot ends with the answer"
    );
}

#[tokio::test]
async fn a_full_room_queues_browsers_on_the_page_and_api_clients_with_json() {
    let app = app(&["-upstream", "http://127.0.0.1:9", "-cap", "1"]);
    let _held = occupy_the_only_slot(&app);
    let browser = request(Method::GET, "/page", VISITOR)
        .header(header::ACCEPT, BROWSER)
        .body(Body::empty())
        .unwrap();
    let page = send(&app, browser).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.headers()[header::CACHE_CONTROL], "no-store");
    let cookies = set_cookies(page.headers());
    assert!(cookies.iter().any(|c| c.starts_with("room_ticket=")));
    assert!(cookies.iter().any(|c| c.starts_with("room_probe=1")));

    let api = send(&app, get("/api/items")).await;
    assert_eq!(api.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(api.headers()[header::RETRY_AFTER], "5");
    let body: serde_json::Value = serde_json::from_str(&text(api).await).unwrap();
    assert_eq!(body["queued"], true);
    assert_eq!(body["status_url"], "/queue/status");
    assert_eq!(app.counters.proxied_total.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_newcomer_to_a_full_line_is_turned_away() {
    let app = app(&[
        "-upstream",
        "http://127.0.0.1:9",
        "-cap",
        "1",
        "-max-queue",
        "1",
    ]);
    let _held = occupy_the_only_slot(&app);
    assert_eq!(
        send(&app, get("/first")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let second = send(&app, get("/second")).await;
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = serde_json::from_str(&text(second).await).unwrap();
    assert_eq!(body["queued"], false);
}

#[tokio::test]
async fn the_service_takes_the_peer_from_axums_connect_info() {
    let app = app(&["-upstream", "http://127.0.0.1:9"]);
    ban(&app, &VISITOR.to_string(), BanLength::Permanent);
    let req = Request::builder()
        .uri("/_room/healthz")
        .header(header::HOST, "shop.test")
        .extension(axum::extract::ConnectInfo(std::net::SocketAddr::new(
            VISITOR, 40_000,
        )))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, req).await.status(), StatusCode::FORBIDDEN);
}
