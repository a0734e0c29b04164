//! The built-in waiting page in headless Chromium, against a small scripted server that
//! answers like Concert does: page + cookies, `/_concert/*` assets and config, and a
//! `/queue/status` that plays back a list of answers.

#[path = "support/browser.rs"]
mod browser;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use browser::{Browser, Page};
use bytes::Bytes;
use concert::room::page::{WaitingPage, concert_asset};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::time::Instant;

const TICKET: &str = "0123456789abcdef0123456789abcdef";
const PAGE_PATH: &str = "/tickets?show=42";
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
                   report-uri /csp-report";
const STEP: Duration = Duration::from_secs(10);

/// How the fake Concert behaves.
struct Script {
    set_cookies: bool,
    config: serde_json::Value,
    /// `/queue/status` answers in order; the last one repeats.
    statuses: Vec<(u16, serde_json::Value)>,
}

#[derive(Default)]
struct Seen {
    /// Cookie header of every request for the page itself.
    page_requests: Vec<Option<String>>,
    status_polls: Vec<Instant>,
    csp_reports: Vec<String>,
    admitted: bool,
}

struct FakeConcert {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
}

impl FakeConcert {
    async fn start(script: Script) -> FakeConcert {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let script = Arc::new(script);
        let page = Arc::new(WaitingPage::builtin());
        let shared_seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = Arc::clone(&shared_seen);
                let script = Arc::clone(&script);
                let page = Arc::clone(&page);
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        respond(
                            request,
                            Arc::clone(&script),
                            Arc::clone(&seen),
                            Arc::clone(&page),
                        )
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeConcert { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}{PAGE_PATH}", self.addr)
    }

    fn seen<T>(&self, read: impl FnOnce(&Seen) -> T) -> T {
        read(&self.seen.lock().unwrap())
    }
}

fn reply(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("cache-control", "no-store")
        .body(Full::new(body.into()))
        .unwrap()
}

async fn respond(
    request: Request<Incoming>,
    script: Arc<Script>,
    seen: Arc<Mutex<Seen>>,
    page: Arc<WaitingPage>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let cookie = request
        .headers()
        .get("cookie")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);

    if path == "/csp-report" {
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let report = String::from_utf8_lossy(&body).into_owned();
        seen.lock().unwrap().csp_reports.push(report);
        return Ok(reply(204, "text/plain", ""));
    }
    if let Some((content_type, body)) = concert_asset(&path) {
        return Ok(reply(200, content_type, body));
    }
    match path.as_str() {
        "/_concert/config" => Ok(reply(200, "application/json", script.config.to_string())),
        "/queue/status" => {
            let mut seen = seen.lock().unwrap();
            let index = seen.status_polls.len().min(script.statuses.len() - 1);
            seen.status_polls.push(Instant::now());
            let (status, body) = &script.statuses[index];
            if body["ready"] == true {
                seen.admitted = true;
            }
            let mut response = reply(*status, "application/json", body.to_string());
            if *status == 429 {
                response
                    .headers_mut()
                    .insert("retry-after", "1".parse().unwrap());
            }
            Ok(response)
        }
        "/tickets" => {
            let mut seen = seen.lock().unwrap();
            seen.page_requests.push(cookie);
            if seen.admitted {
                return Ok(reply(
                    200,
                    "text/html; charset=utf-8",
                    "<!doctype html><title>Shop</title><h1 id=\"welcome\">Welcome in</h1>",
                ));
            }
            let mut response = reply(200, "text/html; charset=utf-8", page.render(3, "/skip"));
            let headers = response.headers_mut();
            headers.insert("content-security-policy", CSP.parse().unwrap());
            if script.set_cookies {
                let ticket =
                    format!("room_ticket={TICKET}; Path=/; Max-Age=300; HttpOnly; SameSite=Lax");
                headers.append("set-cookie", ticket.parse().unwrap());
                headers.append(
                    "set-cookie",
                    "room_probe=1; Path=/; Max-Age=300; SameSite=Lax"
                        .parse()
                        .unwrap(),
                );
            }
            Ok(response)
        }
        "/inline" => {
            // Deliberately breaks the policy the waiting page must live under.
            let mut response = reply(
                200,
                "text/html; charset=utf-8",
                "<!doctype html><title>inline</title><script>document.title = 'ran'</script>",
            );
            response
                .headers_mut()
                .insert("content-security-policy", CSP.parse().unwrap());
            Ok(response)
        }
        _ => Ok(reply(404, "text/plain", "not found")),
    }
}

fn waiting(position: u64) -> (u16, serde_json::Value) {
    (
        200,
        json!({ "ready": false, "position": position, "utilization": 0.93 }),
    )
}

fn text_of(id: &str) -> String {
    format!("document.getElementById('{id}') && document.getElementById('{id}').textContent")
}

fn is_shown(id: &str) -> String {
    format!(
        "(() => {{ const el = document.getElementById('{id}'); \
         return !!el && !el.hidden && el.getClientRects().length > 0; }})()"
    )
}

async fn open(concert: &FakeConcert) -> (Browser, Page) {
    let browser = Browser::launch().await.unwrap();
    let page = browser.new_page().await.unwrap();
    page.goto(&concert.url()).await.unwrap();
    (browser, page)
}

/// No script errors and no CSP violations: the page works under a self-only policy.
fn assert_clean(page: &Page, concert: &FakeConcert) {
    let problems: Vec<String> = page
        .problems()
        .into_iter()
        .filter(|problem| !problem.starts_with("network:"))
        .collect();
    assert!(problems.is_empty(), "page problems: {problems:?}");
    let reports = concert.seen(|seen| seen.csp_reports.clone());
    assert!(reports.is_empty(), "CSP violations: {reports:?}");
}

#[tokio::test]
async fn page_counts_down_and_reloads_into_the_site_when_ready() {
    let concert = FakeConcert::start(Script {
        set_cookies: true,
        config: json!({ "enabled": false, "legacy_skip_url": "" }),
        statuses: vec![
            (
                200,
                json!({ "ready": false, "position": 3, "utilization": 0.93,
                        "wait_known": true, "wait_min_seconds": 40, "wait_max_seconds": 75 }),
            ),
            waiting(2),
            waiting(1),
            (200, json!({ "ready": true })),
        ],
    })
    .await;
    let (_browser, page) = open(&concert).await;

    assert_eq!(page.eval(&text_of("position")).await.unwrap(), "003");
    page.wait_for(
        &format!("{} === 'about 1–2 minutes'", text_of("estimate")),
        STEP,
    )
    .await
    .unwrap();
    page.wait_for(
        &format!(
            "{} === 'Live — your place updates automatically.'",
            text_of("connection-text")
        ),
        STEP,
    )
    .await
    .unwrap();

    let cookies = page.cookies().await.unwrap();
    let ticket = cookies.iter().find(|c| c.name == "room_ticket").unwrap();
    assert!(ticket.http_only);
    assert_eq!(ticket.value, TICKET);
    let probe = cookies.iter().find(|c| c.name == "room_probe").unwrap();
    assert!(!probe.http_only);
    assert_eq!(
        page.eval("document.cookie").await.unwrap(),
        "room_probe=1",
        "only the probe cookie is visible to script"
    );

    page.wait_for(&format!("{} === '002'", text_of("position")), STEP)
        .await
        .unwrap();
    // At least one poll interval (2 s) has passed, so the waiting clock has moved on.
    let clock = page.eval(&text_of("clock")).await.unwrap();
    let clock = clock.as_str().unwrap();
    assert!(
        clock.len() == 5 && clock.starts_with("00:0") && clock != "00:00",
        "{clock}"
    );
    // Without `wait_known` the page says so instead of guessing.
    assert_eq!(
        page.eval(&text_of("estimate")).await.unwrap(),
        "estimating…"
    );
    assert_eq!(
        page.eval(&text_of("position-spoken")).await.unwrap(),
        "You are number 2 in line."
    );
    page.wait_for(&format!("{} === '001'", text_of("position")), STEP)
        .await
        .unwrap();
    assert_clean(&page, &concert);

    page.wait_for("!!document.getElementById('welcome')", STEP)
        .await
        .unwrap();
    let page_requests = concert.seen(|seen| seen.page_requests.clone());
    assert_eq!(
        page_requests.len(),
        2,
        "one visit, one reload: {page_requests:?}"
    );
    assert_eq!(page_requests[0], None);
    let reload_cookie = page_requests[1].clone().unwrap_or_default();
    assert!(
        reload_cookie.contains(&format!("room_ticket={TICKET}")),
        "reload carried {reload_cookie:?}"
    );
    assert_eq!(concert.seen(|seen| seen.status_polls.len()), 4);
}

#[tokio::test]
async fn without_cookies_the_page_explains_and_never_polls() {
    let concert = FakeConcert::start(Script {
        set_cookies: false,
        config: json!({ "enabled": false, "legacy_skip_url": "" }),
        statuses: vec![waiting(3)],
    })
    .await;
    let (_browser, page) = open(&concert).await;

    page.wait_for(&is_shown("notice-cookies"), STEP)
        .await
        .unwrap();
    assert_eq!(
        page.eval(&text_of("headline")).await.unwrap(),
        "Cookies are required"
    );
    assert_eq!(page.eval(&is_shown("ticket")).await.unwrap(), false);
    // The first poll would have gone out at once; give it ample time to show up.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(concert.seen(|seen| seen.status_polls.len()), 0);
    assert_clean(&page, &concert);
}

#[tokio::test]
async fn cookies_required_answer_is_terminal() {
    let concert = FakeConcert::start(Script {
        set_cookies: true,
        config: json!({ "enabled": false, "legacy_skip_url": "" }),
        statuses: vec![(200, json!({ "ready": false, "cookies_required": true }))],
    })
    .await;
    let (_browser, page) = open(&concert).await;

    page.wait_for(&is_shown("notice-cookies"), STEP)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(concert.seen(|seen| seen.status_polls.len()), 1);
    assert_clean(&page, &concert);
}

#[tokio::test]
async fn forbidden_status_shows_unavailable_and_stops_polling() {
    let concert = FakeConcert::start(Script {
        set_cookies: true,
        config: json!({ "enabled": false, "legacy_skip_url": "" }),
        statuses: vec![(403, json!({ "error": "banned" }))],
    })
    .await;
    let (_browser, page) = open(&concert).await;

    page.wait_for(&is_shown("notice-unavailable"), STEP)
        .await
        .unwrap();
    assert_eq!(
        page.eval(&text_of("headline")).await.unwrap(),
        "This page is unavailable"
    );
    assert_eq!(page.eval(&is_shown("ticket")).await.unwrap(), false);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(concert.seen(|seen| seen.status_polls.len()), 1);
    assert_clean(&page, &concert);
}

#[tokio::test]
async fn throttling_retries_soon_and_errors_back_off_with_reconnecting() {
    let concert = FakeConcert::start(Script {
        set_cookies: true,
        config: json!({ "enabled": false, "legacy_skip_url": "" }),
        statuses: vec![
            (429, json!({ "ready": false, "position": 3 })),
            (500, json!({ "error": "boom" })),
            waiting(2),
        ],
    })
    .await;
    let (_browser, page) = open(&concert).await;

    page.wait_for(
        &format!("{} === 'Reconnecting…'", text_of("connection-text")),
        STEP,
    )
    .await
    .unwrap();
    page.wait_for(&format!("{} === '002'", text_of("position")), STEP)
        .await
        .unwrap();
    assert_eq!(
        page.eval("document.getElementById('connection').dataset.tone")
            .await
            .unwrap(),
        "live"
    );
    let polls = concert.seen(|seen| seen.status_polls.clone());
    let after_throttle = polls[1] - polls[0];
    let after_error = polls[2] - polls[1];
    // 429: 3–3.5 s and no failure counted; one failure: 4 s (+ jitter). Had the 429
    // counted as a failure the second gap would be 8 s.
    assert!(
        (Duration::from_millis(2900)..Duration::from_millis(4500)).contains(&after_throttle),
        "retry after 429 came {after_throttle:?} later"
    );
    assert!(
        (Duration::from_millis(3900)..Duration::from_millis(6000)).contains(&after_error),
        "retry after an error came {after_error:?} later"
    );
    assert_clean(&page, &concert);
}

#[tokio::test]
async fn skip_card_follows_config_and_pricing_rules() {
    let concert = FakeConcert::start(Script {
        set_cookies: true,
        config: json!({ "enabled": true, "legacy_skip_url": "/skip?from=line&x=1" }),
        statuses: vec![
            (
                200,
                json!({ "ready": false, "position": 7, "utilization": 0.97,
                        "wait_known": true, "wait_min_seconds": 150, "wait_max_seconds": 260,
                        "skip_cost": 4.5, "rate_per_pos": 0.75 }),
            ),
            (
                200,
                json!({ "ready": false, "position": 1, "utilization": 0.97,
                        "skip_cost": 4.5, "rate_per_pos": 0.75 }),
            ),
            (
                200,
                json!({ "ready": false, "position": 1, "has_pass": true }),
            ),
        ],
    })
    .await;
    let (_browser, page) = open(&concert).await;

    page.wait_for(&format!("{} === '007'", text_of("position")), STEP)
        .await
        .unwrap();
    page.wait_for(&is_shown("fastlane-link"), STEP)
        .await
        .unwrap();
    // With a lane the skip cost counts offer prices, so the money-priced legacy link is not
    // shown beside it (the lane's card carries the visitor's price).
    assert_eq!(page.eval(&is_shown("skip-price")).await.unwrap(), false);
    assert_eq!(page.eval(&is_shown("skip-link")).await.unwrap(), false);
    assert_eq!(
        page.eval("document.getElementById('fastlane-link').getAttribute('href')")
            .await
            .unwrap(),
        "/_concert/access?return=%2Ftickets%3Fshow%3D42"
    );
    assert_eq!(
        page.eval(&text_of("estimate")).await.unwrap(),
        "about 3–5 minutes"
    );
    page.screenshot("/tmp/waiting-page.png").await.unwrap();

    // Position 1: nothing to skip, but the fast lane is still offered.
    page.wait_for(&format!("{} === '001'", text_of("position")), STEP)
        .await
        .unwrap();
    assert_eq!(page.eval(&is_shown("skip-link")).await.unwrap(), false);
    assert_eq!(page.eval(&is_shown("skip-price")).await.unwrap(), false);
    assert_eq!(page.eval(&is_shown("fastlane-link")).await.unwrap(), true);

    // A VIP pass: no card at all.
    page.wait_for(&format!("!{}", is_shown("skip")), STEP)
        .await
        .unwrap();
    assert_clean(&page, &concert);
}

#[tokio::test]
async fn skip_link_falls_back_to_rendered_url_without_config() {
    let concert = FakeConcert::start(Script {
        set_cookies: true,
        // Not a JSON object: the page must ignore it and use the rendered link.
        config: json!("unavailable"),
        statuses: vec![(
            200,
            json!({ "ready": false, "position": 4, "skip_cost": 2.0 }),
        )],
    })
    .await;
    let (_browser, page) = open(&concert).await;

    page.wait_for(&is_shown("skip-price"), STEP).await.unwrap();
    assert_eq!(
        page.eval("document.getElementById('skip-link').getAttribute('href')")
            .await
            .unwrap(),
        "/skip"
    );
    assert_eq!(
        page.eval(&text_of("skip-price")).await.unwrap(),
        "Current skip price: $2.00"
    );
    assert_eq!(page.eval(&is_shown("fastlane-link")).await.unwrap(), false);
    assert_clean(&page, &concert);
}

#[tokio::test]
async fn cleanliness_check_sees_csp_violations_and_script_errors() {
    let concert = FakeConcert::start(Script {
        set_cookies: false,
        config: json!({ "enabled": false, "legacy_skip_url": "" }),
        statuses: vec![waiting(3)],
    })
    .await;
    let browser = Browser::launch().await.unwrap();
    let page = browser.new_page().await.unwrap();
    page.goto(&format!("http://{}/inline", concert.addr))
        .await
        .unwrap();
    assert_eq!(page.eval("document.title").await.unwrap(), "inline");
    page.eval("setTimeout(() => { throw new Error('planted'); }, 0)")
        .await
        .unwrap();
    page.wait_for("new Promise(r => setTimeout(() => r(true), 300))", STEP)
        .await
        .unwrap();
    let problems = page.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("javascript:") && p.contains("planted")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.starts_with("security:")),
        "inline script was not reported: {problems:?}"
    );
}
