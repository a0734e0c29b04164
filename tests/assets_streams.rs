//! End to end: the asset tier (pass check, per-pass pools by protocol family, the global pool,
//! public assets) and the stream guard (SSE and WebSocket through `-stream-paths`).

mod support;

use std::sync::Arc;
use std::time::Duration;

use concert::admission::pass::{PassId, unix_now};
use futures_util::{SinkExt as _, StreamExt as _};
use http::HeaderValue;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, COOKIE, RETRY_AFTER};
use support::origins::{self, Origin, full};
use support::*;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;

/// Parks requests whose path contains `slow` until the test adds permits to the returned gate;
/// answers everything else at once with `ok`, echoing the Cookie header in `x-seen-cookie` and
/// always sending a `Concert-Priority` header (which must never reach the client).
fn asset_origin() -> (Origin, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let parked = Arc::clone(&gate);
    let origin = origins::origin_with(move |req, _| {
        let gate = Arc::clone(&parked);
        async move {
            if req.uri().path().contains("slow")
                && let Ok(permit) = gate.acquire().await
            {
                permit.forget();
            }
            let mut response = http::Response::new(full("ok"));
            let headers = response.headers_mut();
            if let Some(cookie) = req.headers().get(http::header::COOKIE) {
                headers.insert("x-seen-cookie", cookie.clone());
            }
            headers.insert("concert-priority", HeaderValue::from_static("staff"));
            response
        }
    });
    (origin, gate)
}

fn pass_cookie(concert: &concert::Running, n: u8) -> String {
    let id: PassId = [n; 16];
    format!(
        "concert_admit={}",
        concert.app.pass.mint(&id, unix_now() + 600)
    )
}

async fn stats(concert: &concert::Running) -> serde_json::Value {
    room_stats(concert).await
}

/// Sends `request` in the background and waits until the origin holds `in_flight` requests.
async fn park(
    origin: &Origin,
    request: reqwest::RequestBuilder,
    in_flight: i64,
) -> tokio::task::JoinHandle<reqwest::Response> {
    let task = tokio::spawn(async move { request.send().await.unwrap() });
    assert!(
        eventually(Duration::from_secs(5), || origin.in_flight() == in_flight).await,
        "origin never reached {in_flight} in flight"
    );
    task
}

#[tokio::test]
async fn private_assets_without_a_valid_pass_get_403_and_never_reach_the_origin() {
    let (origin, _) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/assets/*",
        "-trusted-proxies",
        "10.0.0.1",
    ])
    .await;
    let client = plain_client();
    let none = client
        .get(url(&concert, "/assets/app.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), StatusCode::FORBIDDEN);
    assert!(none.bytes().await.unwrap().is_empty());
    let forged = client
        .get(url(&concert, "/assets/app.js"))
        .header(COOKIE, "concert_admit=forged")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(origin.hits(), 0);
    let stats = stats(&concert).await;
    assert_eq!(stats["asset_denied_total"], 2);
    assert_eq!(
        stats["abuse_strikes_total"], 1,
        "only the forged pass is charged"
    );
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_valid_pass_fetches_assets_even_while_the_room_is_full() {
    let (origin, gate) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "1",
        "-assets",
        "/assets/*",
    ])
    .await;
    let parked = park(&origin, plain_client().get(url(&concert, "/slow-page")), 1).await;
    let response = plain_client()
        .get(url(&concert, "/assets/app.js"))
        .header(COOKIE, format!("{}; theme=dark", pass_cookie(&concert, 1)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-seen-cookie"], "theme=dark");
    assert!(response.headers().get("concert-priority").is_none());
    assert!(set_cookies(&response, "concert_priority").is_empty());
    assert_eq!(response.text().await.unwrap(), "ok");
    gate.add_permits(1);
    parked.await.unwrap();
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn public_assets_need_no_pass() {
    let (origin, _) = asset_origin();
    let concert = concert(&["-upstream", &origin.url(), "-asset-public", "/uploads/*"]).await;
    let response = plain_client()
        .get(url(&concert, "/uploads/logo.png"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(set_cookies(&response, "concert_admit").is_empty());
    assert_eq!(stats(&concert).await["asset_served_total"], 1);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_pass_over_its_h1_pool_gets_429_while_another_pass_is_served() {
    let (origin, gate) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/assets/*",
        "-asset-user-cap-h1",
        "1",
        "-asset-user-wait",
        "50ms",
    ])
    .await;
    let client = plain_client();
    let a = pass_cookie(&concert, 1);
    let parked = park(
        &origin,
        client
            .get(url(&concert, "/assets/slow"))
            .header(COOKIE, a.clone()),
        1,
    )
    .await;
    let second = client
        .get(url(&concert, "/assets/app.js"))
        .header(COOKIE, a)
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.headers()[RETRY_AFTER], "1");
    let other = client
        .get(url(&concert, "/assets/app.js"))
        .header(COOKIE, pass_cookie(&concert, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(stats(&concert).await["asset_user_throttled_total"], 1);
    gate.add_permits(1);
    parked.await.unwrap();
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_trusted_proxy_header_selects_the_h2_pool() {
    let (origin, gate) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/assets/*",
        "-asset-user-cap-h1",
        "1",
        "-asset-user-cap-h2",
        "2",
        "-asset-user-wait",
        "50ms",
        "-client-proto-header",
        "X-Client-Proto",
    ])
    .await;
    let client = plain_client();
    let a = pass_cookie(&concert, 1);
    let h2 = |path: &str| {
        client
            .get(url(&concert, path))
            .header(COOKIE, a.clone())
            .header("X-Client-Proto", "HTTP/2.0")
    };
    let first = park(&origin, h2("/assets/slow1"), 1).await;
    let second = park(&origin, h2("/assets/slow2"), 2).await;
    let third = h2("/assets/app.js").send().await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let h1 = client
        .get(url(&concert, "/assets/app.js"))
        .header(COOKIE, a.clone())
        .header("X-Client-Proto", "HTTP/1.1")
        .send()
        .await
        .unwrap();
    assert_eq!(h1.status(), StatusCode::OK);
    gate.add_permits(2);
    first.await.unwrap();
    second.await.unwrap();
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_proto_header_from_an_untrusted_peer_is_ignored() {
    let (origin, gate) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/assets/*",
        "-asset-user-cap-h1",
        "1",
        "-asset-user-wait",
        "20ms",
        "-client-proto-header",
        "X-Client-Proto",
        "-trusted-proxies",
        "10.0.0.1",
    ])
    .await;
    let client = plain_client();
    let a = pass_cookie(&concert, 1);
    let claim = |path: &str| {
        client
            .get(url(&concert, path))
            .header(COOKIE, a.clone())
            .header("X-Client-Proto", "HTTP/2.0")
    };
    let parked = park(&origin, claim("/assets/slow"), 1).await;
    let second = claim("/assets/app.js").send().await.unwrap();
    assert_eq!(
        second.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "a direct client claiming HTTP/2 stays in the h1 pool"
    );
    gate.add_permits(1);
    parked.await.unwrap();
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_http2_client_uses_the_h2_pool() {
    let (origin, gate) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/assets/*",
        "-asset-user-cap-h1",
        "1",
        "-asset-user-cap-h2",
        "4",
        "-asset-user-wait",
        "20ms",
    ])
    .await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let a = pass_cookie(&concert, 1);
    let get = |path: &str| client.get(url(&concert, path)).header(COOKIE, a.clone());
    let first = park(&origin, get("/assets/slow1"), 1).await;
    let second = park(&origin, get("/assets/slow2"), 2).await;
    let third = get("/assets/app.js").send().await.unwrap();
    assert_eq!(third.version(), reqwest::Version::HTTP_2);
    assert_eq!(third.status(), StatusCode::OK, "h2 pool holds 4");
    gate.add_permits(2);
    assert_eq!(first.await.unwrap().status(), StatusCode::OK);
    assert_eq!(second.await.unwrap().status(), StatusCode::OK);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_global_pool_refuses_private_and_public_assets_alike() {
    let (origin, gate) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/assets/*",
        "-asset-public",
        "/uploads/*",
        "-asset-cap",
        "1",
        "-asset-wait",
        "50ms",
    ])
    .await;
    let client = plain_client();
    let parked = park(
        &origin,
        client
            .get(url(&concert, "/assets/slow"))
            .header(COOKIE, pass_cookie(&concert, 1)),
        1,
    )
    .await;
    let other = client
        .get(url(&concert, "/assets/app.js"))
        .header(COOKIE, pass_cookie(&concert, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(other.headers()[RETRY_AFTER], "1");
    let public = client
        .get(url(&concert, "/uploads/logo.png"))
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), StatusCode::SERVICE_UNAVAILABLE);
    let stats = stats(&concert).await;
    assert_eq!(stats["asset_global_throttled_total"], 2);
    assert_eq!(stats["asset_in_flight"], 1);
    gate.add_permits(1);
    parked.await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || concert
            .app
            .generation()
            .assets
            .stats()
            .in_flight
            == 0)
        .await
    );
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn asset_stats_report_the_derived_cap_users_and_totals() {
    let (origin, _) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "3",
        "-asset-user-cap-h2",
        "16",
        "-assets",
        "/assets/*",
    ])
    .await;
    let client = plain_client();
    let denied = client
        .get(url(&concert, "/assets/a.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), StatusCode::FORBIDDEN);
    let served = client
        .get(url(&concert, "/assets/a.css"))
        .header(COOKIE, pass_cookie(&concert, 1))
        .send()
        .await
        .unwrap();
    assert_eq!(served.text().await.unwrap(), "ok");
    let stats = stats(&concert).await;
    assert_eq!(stats["asset_cap"], 48);
    assert_eq!(stats["asset_users"], 1);
    assert_eq!(stats["asset_denied_total"], 1);
    assert_eq!(stats["asset_served_total"], 1);
    assert_eq!(stats["asset_in_flight"], 0);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_browser_loads_its_css_with_the_pass_from_the_page_and_a_stranger_cannot() {
    let (origin, _) = asset_origin();
    let concert = concert(&["-upstream", &origin.url(), "-assets", "/static/*"]).await;
    let browser = cookie_client();
    let page = browser
        .get(url(&concert, "/"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(set_cookies(&page, "concert_admit").len(), 1);
    for asset in ["/static/site.css", "/static/app.js"] {
        let response = browser.get(url(&concert, asset)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{asset}");
        assert!(set_cookies(&response, "concert_admit").is_empty());
    }
    let stranger = cookie_client()
        .get(url(&concert, "/static/site.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), StatusCode::FORBIDDEN);
    assert_eq!(origin.hits(), 3);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_asset_request_slides_an_aging_pass_without_issuing_new_ones() {
    let (origin, _) = asset_origin();
    let concert = concert(&["-upstream", &origin.url(), "-assets", "/static/*"]).await;
    let id: PassId = [9; 16];
    let aging = concert.app.pass.mint(&id, unix_now() + 200);
    let response = plain_client()
        .get(url(&concert, "/static/site.css"))
        .header(COOKIE, format!("concert_admit={aging}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let line = set_cookies(&response, "concert_admit")[0];
    let value = line
        .split(';')
        .next()
        .and_then(|pair| pair.split_once('='))
        .map(|(_, value)| value)
        .unwrap();
    let pass = concert.app.pass.verify(value, unix_now());
    assert_eq!(pass.valid().map(|pass| pass.id), Some(id));
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn stream_cap_limits_sse_streams_and_counts_them() {
    let origin = origins::sse_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "1",
        "-stream-paths",
        "/sse",
        "-stream-cap",
        "1",
    ])
    .await;
    let client = plain_client();
    let denied = client.get(url(&concert, "/sse")).send().await.unwrap();
    assert_eq!(denied.status(), StatusCode::FORBIDDEN);
    let cookie = pass_cookie(&concert, 1);
    let mut open = client
        .get(url(&concert, "/sse"))
        .header(ACCEPT, "text/event-stream")
        .header(COOKIE, cookie.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    let first = tokio::time::timeout(Duration::from_secs(3), open.chunk())
        .await
        .expect("the first event arrives unbuffered")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("data: hello"));
    let second = client
        .get(url(&concert, "/sse"))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.headers()[RETRY_AFTER], "5");
    let stats = stats(&concert).await;
    assert_eq!(stats["stream_served_total"], 1);
    assert_eq!(stats["stream_throttled_total"], 1);
    assert_eq!(stats["stream_denied_total"], 1);
    assert_eq!(stats["stream_active"], 1);
    assert_eq!(stats["occupancy"], 0, "streams never take a page slot");
    drop(open);
    assert!(eventually(Duration::from_secs(3), || active_streams(&concert) == 0).await);
    concert.shutdown().await.unwrap();
}

/// Streams (SSE, WebSocket) holding a stream slot now.
fn active_streams(concert: &concert::Running) -> u64 {
    concert.app.generation().streams.stats().active
}

/// A WebSocket to `/ws` through Concert, with an admission pass.
async fn websocket_with_pass(
    concert: &concert::Running,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://{}/ws",
            concert.addr
        ))
        .unwrap();
    request
        .headers_mut()
        .insert("cookie", pass_cookie(concert, 1).parse().unwrap());
    let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    socket
}

#[tokio::test]
async fn a_websocket_echoes_through_a_stream_path_and_holds_its_slot() {
    let origin = origins::ws_echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-stream-paths", "/ws"]).await;
    let mut socket = websocket_with_pass(&concert).await;
    for text in ["one", "two"] {
        socket.send(Message::text(text)).await.unwrap();
        let echoed = tokio::time::timeout(Duration::from_secs(3), socket.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(echoed.into_text().unwrap().as_str(), text);
    }
    assert_eq!(active_streams(&concert), 1);
    socket.close(None).await.unwrap();
    drop(socket);
    assert!(eventually(Duration::from_secs(3), || active_streams(&concert) == 0).await);
    let refused = tokio_tungstenite::connect_async(format!("ws://{}/ws", concert.addr)).await;
    assert!(refused.is_err(), "no pass, no stream");
    concert.shutdown().await.unwrap();
}

/// A WebSocket client that stops reading while the origin keeps sending loses its tunnel
/// after the send timeout, and its stream slot with it.
#[tokio::test]
async fn a_websocket_client_that_stops_reading_gives_its_stream_slot_back() {
    let origin = origins::ws_echo_origin();
    let concert = concert_adjusted(
        &["-upstream", &origin.url(), "-stream-paths", "/ws"],
        &[],
        |config| config.client_send_timeout = Duration::from_secs(1),
    )
    .await;
    let socket = websocket_with_pass(&concert).await;
    let (mut sender, _never_read) = socket.split();
    // Echoed megabytes pile up towards a client that reads none of them; its own sends stall
    // too once the echo backs up. Bounded: 512 messages at most, or until the tunnel is gone.
    let sending = tokio::spawn(async move {
        let message = vec![b'x'; 1024 * 1024];
        for _ in 0..512 {
            if sender.send(Message::binary(message.clone())).await.is_err() {
                break;
            }
        }
        sender
    });
    assert!(eventually(Duration::from_secs(3), || active_streams(&concert) == 1).await);
    let freed = eventually(Duration::from_secs(15), || active_streams(&concert) == 0).await;
    assert!(freed, "the stream slot was not given back");
    // The tunnel is closed on the client's side too: its sends end.
    let _sender = tokio::time::timeout(Duration::from_secs(30), sending)
        .await
        .expect("the stalled client's sends ended")
        .unwrap();
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn forged_asset_passes_lead_to_a_ban_and_stale_ones_cost_nothing() {
    let (origin, _) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/assets/*",
        "-abuse-strikes",
        "10",
        "-trusted-proxies",
        "10.0.0.1",
    ])
    .await;
    let client = plain_client();
    let stale = concert::admission::pass::PassSigner::new(&[b'q'; 32], None)
        .mint(&[1; 16], unix_now() + 600);
    for _ in 0..5 {
        let response = client
            .get(url(&concert, "/assets/app.js"))
            .header(COOKIE, format!("concert_admit={stale}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
    }
    assert_eq!(stats(&concert).await["abuse_strikes_total"], 0);
    let forged = || {
        client
            .get(url(&concert, "/assets/app.js"))
            .header(COOKIE, "concert_admit=forged")
    };
    assert_eq!(
        forged().send().await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        forged().send().await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    let blocked = forged().send().await.unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        blocked
            .text()
            .await
            .unwrap()
            .contains("temporarily blocked")
    );
    assert_eq!(origin.hits(), 0);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_pass_that_keeps_exhausting_its_pool_is_banned() {
    let (origin, gate) = asset_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-assets",
        "/assets/*",
        "-asset-user-cap-h1",
        "1",
        "-asset-user-wait",
        "20ms",
        "-abuse-strikes",
        "2",
        "-trusted-proxies",
        "10.0.0.1",
    ])
    .await;
    let client = plain_client();
    let a = pass_cookie(&concert, 1);
    let get = |path: &str| client.get(url(&concert, path)).header(COOKIE, a.clone());
    let parked = park(&origin, get("/assets/slow"), 1).await;
    for _ in 0..2 {
        let response = get("/assets/app.js").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            response.bytes().await.unwrap().is_empty(),
            "throttled, not blocked"
        );
    }
    let blocked = get("/assets/app.js").send().await.unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        blocked
            .text()
            .await
            .unwrap()
            .contains("temporarily blocked")
    );
    gate.add_permits(1);
    parked.await.unwrap();
    concert.shutdown().await.unwrap();
}
