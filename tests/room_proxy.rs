//! End-to-end behaviour of the gated path: the waiting room in front of a real origin, through the
//! real server, with real cookies.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, COOKIE, RETRY_AFTER};
use support::origins;
use support::*;

#[tokio::test]
async fn free_room_proxies_once() {
    let origin = origins::fast_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "4"]).await;
    let response = plain_client()
        .get(url(&concert, "/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(origin.hits(), 1);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn origin_sees_only_its_own_cookies() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let seen: serde_json::Value = plain_client()
        .get(url(&concert, "/x"))
        .header(
            COOKIE,
            "room_ticket=abc; room_pass=def; room_probe=1; concert_admit=xyz; session=keep",
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(seen["headers"]["cookie"][0], "session=keep");
}

#[tokio::test]
async fn forwarding_headers_follow_trusted_proxies_and_preserve_host() {
    let origin = origins::echo_origin();
    // What a client behind a proxy sends, with a stale `Forwarded` that must not pass.
    let seen_through = |concert: concert::Running| async move {
        json_of(
            plain_client()
                .get(url(&concert, "/x"))
                .header("host", "concert.example")
                .header("x-forwarded-for", "203.0.113.9")
                .header("x-forwarded-proto", "https")
                .header("forwarded", "for=6.6.6.6")
                .header("x-forwarded-host", "evil.example"),
        )
        .await["headers"]
            .clone()
    };
    let single = |headers: &serde_json::Value, name: &str| {
        let values = headers[name].as_array().cloned().unwrap_or_default();
        assert!(values.len() <= 1, "{name}: {values:?}");
        values.first().and_then(|v| v.as_str()).map(str::to_owned)
    };

    let origin_host = origin.url().trim_start_matches("http://").to_owned();
    let cases: [(&[&str], [&str; 3]); 2] = [
        // Defaults: loopback is a trusted proxy, and the visitor's Host is kept.
        (&[], ["concert.example", "203.0.113.9, 127.0.0.1", "https"]),
        // Loopback not trusted, Host not kept: the claims are dropped, the origin's host sent.
        (
            &["-trusted-proxies", "10.0.0.0/8", "-preserve-host=false"],
            [&origin_host, "127.0.0.1", "http"],
        ),
    ];
    let upstream = origin.url();
    for (flags, [host, forwarded_for, proto]) in cases {
        let mut args = vec!["-upstream", upstream.as_str()];
        args.extend_from_slice(flags);
        let headers = seen_through(concert(&args).await).await;
        let expected = [
            ("host", Some(host)),
            ("x-forwarded-for", Some(forwarded_for)),
            ("x-forwarded-proto", Some(proto)),
            ("x-forwarded-host", Some("concert.example")),
            ("forwarded", None),
        ];
        for (name, value) in expected {
            assert_eq!(
                single(&headers, name).as_deref(),
                value,
                "{name} with {flags:?}"
            );
        }
    }
}

#[tokio::test]
async fn trailing_slash_paths_reach_the_origin_unchanged() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let seen = json_of(plain_client().get(url(&concert, "/foo/?a=1"))).await;
    assert_eq!(seen["path"], "/foo/?a=1");
}

#[tokio::test]
async fn dead_origin_is_a_502() {
    let dead = origins::dead_origin_url();
    let concert = concert(&["-upstream", &dead]).await;
    let response = plain_client().get(url(&concert, "/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.text().await.unwrap(), "upstream unavailable\n");
    // The slot came back: the room is free again.
    assert!(room_empties(&concert).await);
}

/// A raw origin that answers every request with `answer` and then drops the connection, so a
/// body announced longer than what was sent ends in the middle. With a pause, the head and the
/// start of the body arrive apart; without one, together with the close.
async fn origin_hanging_up_with(answer: &'static [u8], pause: Duration) -> String {
    origins::hanging_up_origin(move || answer.to_vec(), pause).await
}

#[tokio::test]
async fn an_origin_gone_mid_body_gives_the_slot_back() {
    let cut_short: [&'static [u8]; 2] = [
        b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part of it",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
    ];
    let pauses = [Duration::from_millis(50), Duration::ZERO];
    for (answer, pause) in cut_short.into_iter().flat_map(|a| pauses.map(|p| (a, p))) {
        let upstream = origin_hanging_up_with(answer, pause).await;
        let concert = concert(&["-upstream", &upstream, "-cap", "1"]).await;
        for round in 0..3 {
            let response = plain_client().get(url(&concert, "/")).send().await.unwrap();
            // The client gets the head and sees the body end early.
            assert_eq!(response.status(), StatusCode::OK, "round {round}");
            assert!(
                response.bytes().await.is_err(),
                "round {round}: a complete body?"
            );
            // What arrived is what the origin sent, and nothing that makes it look complete,
            // through both ways to the origin (bodiless requests, and requests with a body).
            let body_start = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let sent_body = std::str::from_utf8(&answer[body_start..]).unwrap();
            let requests: [&[u8]; 2] = [
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
            ];
            for request in requests {
                let raw = raw_exchange(concert.addr, request, Duration::from_secs(3)).await;
                assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "{pause:?}: {raw:?}");
                assert!(raw.ends_with(sent_body), "{pause:?}: {raw:?}");
            }
            assert!(
                room_empties(&concert).await,
                "round {round}: occupancy {}",
                concert.app.room.stats().occupancy
            );
            // The one slot comes back each time, or the next round would be queued (429).
            assert!(
                room_empties(&concert).await,
                "round {round}: occupancy {}",
                concert.app.room.stats().occupancy
            );
        }
        concert.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn a_body_the_origin_garbles_at_once_still_reaches_the_client_with_its_head() {
    // The first chunk size is not hexadecimal: the body fails on its first poll, with the head
    // still unwritten. The client must get the head anyway, on both ways to the origin.
    let garbled: &'static [u8] =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n";
    let upstream = origin_hanging_up_with(garbled, Duration::ZERO).await;
    let concert = concert(&["-upstream", &upstream, "-cap", "1"]).await;
    let requests: [&[u8]; 2] = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
    ];
    for round in 0..3 {
        for request in requests {
            let raw = raw_exchange(concert.addr, request, Duration::from_secs(3)).await;
            assert!(
                raw.starts_with("HTTP/1.1 200 OK\r\n"),
                "round {round}: {raw:?}"
            );
            assert!(
                !raw.contains("hello"),
                "an undecodable body is not passed on: {raw:?}"
            );
            assert!(room_empties(&concert).await, "round {round}");
        }
    }
}

#[tokio::test]
async fn a_length_beside_a_transfer_coding_never_reaches_the_client() {
    // The transfer coding frames the body (here: until the origin closes), so the length is
    // dropped, valid or not, on both ways to the origin.
    let answers: [&'static [u8]; 2] = [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 3\r\n\r\nhello-all",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: -3\r\n\r\nhello-all",
    ];
    for answer in answers {
        let upstream = origin_hanging_up_with(answer, Duration::ZERO).await;
        let concert = concert(&["-upstream", &upstream]).await;
        let client = plain_client();
        for request in [
            client.get(url(&concert, "/page")),
            client.post(url(&concert, "/form")).body("hi"),
        ] {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert!(response.headers().get("content-length").is_none());
            assert!(response.headers().get("transfer-encoding").is_some());
            assert_eq!(response.text().await.unwrap(), "hello-all");
        }
        assert!(room_empties(&concert).await);
    }
}

#[tokio::test]
async fn sse_flows_through_the_room() {
    let origin = origins::sse_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let mut response = plain_client()
        .get(url(&concert, "/events"))
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(3), response.chunk())
        .await
        .expect("first event within 3 s")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("data: hello"));
    // The stream pins a page slot for its whole life.
    assert_eq!(concert.app.room.stats().occupancy, 1);
    drop(response);
    assert!(
        eventually(Duration::from_secs(3), || concert
            .app
            .room
            .stats()
            .occupancy
            == 0)
        .await
    );
}

/// Cap 1 with the only slot held by a request the origin has not answered yet.
async fn full_room(
    extra: &[&str],
) -> (
    origins::Origin,
    concert::Running,
    tokio::task::JoinHandle<()>,
) {
    let origin = origins::held_origin();
    let upstream = origin.url();
    let mut args = vec!["-upstream", upstream.as_str(), "-cap", "1"];
    args.extend_from_slice(extra);
    let concert = concert(&args).await;
    let holder = hold_the_only_slot(&concert, &origin, "/slow").await;
    (origin, concert, holder)
}

#[tokio::test]
async fn browsers_get_the_waiting_page_with_cookies() {
    let (origin, concert, _holder) = full_room(&[]).await;
    let response = plain_client()
        .get(url(&concert, "/page"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(response.headers()["cache-control"], "no-store");
    let ticket = set_cookies(&response, "room_ticket");
    let probe = set_cookies(&response, "room_probe");
    assert_eq!(ticket.len(), 1);
    assert!(ticket[0].contains("HttpOnly") && ticket[0].contains("Max-Age=300"));
    assert_eq!(probe.len(), 1);
    assert!(!probe[0].contains("HttpOnly"));
    let body = response.text().await.unwrap();
    assert!(body.contains("/queue/status") || body.contains("waiting.js"));
    assert_eq!(origin.hits(), 1, "only the holder reached the origin");
}

#[tokio::test]
async fn polls_past_a_third_of_the_ttl_send_the_same_cookies_again() {
    let (_origin, concert, _holder) = full_room(&[
        "-token-ttl",
        "30s",
        "-cookie-domain",
        "shop.test",
        "-cookie-path",
        "/shop",
    ])
    .await;
    let owned = |lines: Vec<&str>| lines.into_iter().map(str::to_owned).collect::<Vec<_>>();
    let page = plain_client()
        .get(url(&concert, "/shop/item"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    let issued = [
        owned(set_cookies(&page, "room_ticket")),
        owned(set_cookies(&page, "room_probe")),
    ];
    assert_eq!((issued[0].len(), issued[1].len()), (1, 1), "{issued:?}");
    assert!(issued[0][0].contains("Max-Age=30"), "{issued:?}");
    let cookie = issued
        .iter()
        .map(|lines| lines[0].split(';').next().unwrap())
        .collect::<Vec<_>>()
        .join("; ");
    let poll = || {
        plain_client()
            .get(url(&concert, "/queue/status"))
            .header(COOKIE, cookie.clone())
            .send()
    };

    // Fresh cookies are not sent again.
    let fresh = poll().await.unwrap();
    assert_eq!(fresh.status(), StatusCode::OK);
    assert!(set_cookies(&fresh, "room_ticket").is_empty());
    // A third of the lifetime later they are: same token, same attributes, both cookies.
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    let due = poll().await.unwrap();
    assert_eq!(due.status(), StatusCode::OK);
    let refreshed = [
        owned(set_cookies(&due, "room_ticket")),
        owned(set_cookies(&due, "room_probe")),
    ];
    assert_eq!(refreshed, issued);
    // A throttled poll right after keeps the ticket but sends no cookies.
    let throttled = poll().await.unwrap();
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(set_cookies(&throttled, "room_ticket").is_empty());
    assert!(set_cookies(&throttled, "room_probe").is_empty());
}

#[tokio::test]
async fn api_clients_get_429_json() {
    let (_origin, concert, _holder) = full_room(&[]).await;
    let response = plain_client()
        .get(url(&concert, "/api"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[RETRY_AFTER], "5");
    assert_eq!(set_cookies(&response, "room_ticket").len(), 1);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["queued"], true);
    assert_eq!(body["status_url"], "/queue/status");
    assert_eq!(body["retry_after_seconds"], 5);
    assert!(
        eventually(Duration::from_secs(2), || concert
            .app
            .room
            .stats()
            .queued_total
            >= 1)
        .await
    );
}

#[tokio::test]
async fn api_json_off_gives_everyone_the_page() {
    let (_origin, concert, _holder) = full_room(&["-api-json=false"]).await;
    let response = plain_client()
        .get(url(&concert, "/api"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
}

#[tokio::test]
async fn max_queue_turns_newcomers_away_with_retry_after() {
    let (_origin, concert, _holder) = full_room(&["-max-queue", "1"]).await;
    let first = cookie_client();
    let queued = first.get(url(&concert, "/a")).send().await.unwrap();
    assert_eq!(queued.status(), StatusCode::TOO_MANY_REQUESTS);
    let second = plain_client()
        .get(url(&concert, "/b"))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(second.headers().contains_key(RETRY_AFTER));
    let body: serde_json::Value = second.json().await.unwrap();
    assert_eq!(body["queued"], false);
    // Browsers get a page that retries by itself, not an empty 503.
    let page = plain_client()
        .get(url(&concert, "/c"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(page.headers().contains_key(RETRY_AFTER));
    assert!(page.text().await.unwrap().contains("refresh"));
}

/// A burst of clients that never keep the cookie fills `-max-queue` inside the first-poll
/// grace. The full line refuses newcomers while the burst is young, but a real
/// visitor arriving two poll intervals later gets in line, not the whole grace later.
#[tokio::test]
async fn a_cookieless_burst_turns_real_visitors_away_for_two_poll_intervals_only() {
    let (_origin, concert, _holder) = full_room(&[
        "-max-queue",
        "3",
        "-retry-after",
        "1",
        "-abuse-strikes",
        "2000000000",
    ])
    .await;
    let burst = plain_client();
    let mut statuses = Vec::new();
    for i in 0..30 {
        let response = burst
            .get(url(&concert, &format!("/burst/{i}")))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses[..3], [429, 429, 429]);
    assert!(
        statuses[3..].iter().all(|&status| status == 503),
        "{statuses:?}"
    );
    // Two poll intervals (2 s) later the burst's tickets count as abandoned.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let visitor = cookie_client();
    let page = visitor
        .get(url(&concert, "/real"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(
        page.status(),
        StatusCode::OK,
        "a real newcomer is not told the line is full"
    );
    let status = json_of(visitor.get(url(&concert, "/queue/status"))).await;
    assert_eq!(status["ready"], false);
    assert_eq!(status["position"], 3, "{status}");
    let stats = json_of(burst.get(url(&concert, "/_room/stats"))).await;
    assert_eq!(stats["live_queue_depth"], 3, "{stats}");
    assert_eq!(stats["evicted_total"], 1, "{stats}");
}

#[tokio::test]
async fn custom_html_page_gets_the_plain_position() {
    let dir = tempfile::tempdir().unwrap();
    let page_path = dir.path().join("waiting.html");
    std::fs::write(&page_path, "<p>You are number {{.Position}}</p>").unwrap();
    let page_arg = page_path.to_str().unwrap().to_owned();
    let (_origin, concert, _holder) = full_room(&["-html", &page_arg]).await;
    let page = plain_client()
        .get(url(&concert, "/page"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.text().await.unwrap(), "<p>You are number 1</p>");
}

/// `room_ticket`=… and `room_probe`=… pairs from a waiting page's cookies, as a `Cookie` header.
fn room_cookie_header(response: &reqwest::Response) -> String {
    ["room_ticket", "room_probe"]
        .iter()
        .map(|name| set_cookies(response, name)[0].split(';').next().unwrap())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A visitor without JavaScript only reloads the page. The built-in page reloads itself in time
/// for the first-poll grace, and each reload keeps the place; a ticket nobody comes back for is
/// dropped when the grace ends.
#[tokio::test]
async fn reloading_the_builtin_page_without_script_keeps_the_place() {
    let (_origin, concert, _holder) = full_room(&["-first-poll-grace", "10s"]).await;
    let view = |cookie: Option<String>| {
        let mut request = plain_client()
            .get(url(&concert, "/page"))
            .header(ACCEPT, HTML_ACCEPT);
        if let Some(cookie) = cookie {
            request = request.header(COOKIE, cookie);
        }
        request.send()
    };
    let page = view(None).await.unwrap();
    let cookie = room_cookie_header(&page);
    let body = page.text().await.unwrap();
    assert!(
        body.contains(r#"<noscript><meta http-equiv="refresh" content="5"></noscript>"#),
        "the page reloads itself within the 10 s grace"
    );
    assert!(body.contains("every 5 seconds"));
    let silent = view(None).await.unwrap();
    assert_eq!(silent.status(), StatusCode::OK);
    // Reload when the page says, then let the grace run out for both tickets.
    for wait in [5_000, 5_500] {
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let reload = view(Some(cookie.clone())).await.unwrap();
        assert_eq!(reload.status(), StatusCode::OK);
        assert!(
            reload
                .text()
                .await
                .unwrap()
                .contains(r#"id="position">001<"#)
        );
    }
    concert.app.room.reap_now();
    let stats = concert.app.room.stats();
    assert_eq!(stats.live_queue_depth, 1, "{stats:?}");
    assert_eq!(
        stats.evicted_total, 1,
        "only the ticket never seen again went"
    );
    let status = json_of(
        plain_client()
            .get(url(&concert, "/queue/status"))
            .header(COOKIE, cookie),
    )
    .await;
    assert_eq!(status["position"], 1, "{status}");
}

#[tokio::test]
async fn cookie_keeping_client_is_let_in_after_release() {
    let (origin, concert, holder) = full_room(&[]).await;
    let client = cookie_client();
    let queued = client.get(url(&concert, "/mine")).send().await.unwrap();
    assert_eq!(queued.status(), StatusCode::TOO_MANY_REQUESTS);
    origin.release(1);
    holder.await.unwrap();
    origin.release(1);
    let mut admitted = None;
    for _ in 0..100 {
        let response = client.get(url(&concert, "/mine")).send().await.unwrap();
        if response.status() == StatusCode::OK {
            admitted = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let admitted = admitted.expect("admitted once the slot freed");
    assert_eq!(admitted.text().await.unwrap(), "ok");
    assert_eq!(origin.hits(), 2, "holder + this client, exactly once each");
}

#[tokio::test]
async fn bypass_paths_skip_the_room() {
    let (origin, concert, holder) = full_room(&["-bypass", "/webhooks/*,/robots.txt"]).await;
    // The one page slot stays held while the bypass requests are sent: they reach the origin
    // alongside it, without a slot, while a gated request is still turned away.
    let bypassed: Vec<_> = ["/webhooks/stripe", "/webhooks/paypal/ipn", "/robots.txt"]
        .into_iter()
        .map(|path| {
            let path_url = url(&concert, path);
            tokio::spawn(async move {
                let response = plain_client().get(path_url).send().await.unwrap();
                (path, response.status(), response.text().await.unwrap())
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || origin.in_flight() == 4).await,
        "in flight at the origin: {}",
        origin.in_flight()
    );
    assert_eq!(concert.app.room.stats().occupancy, 1);
    let gated = plain_client()
        .get(url(&concert, "/gated"))
        .send()
        .await
        .unwrap();
    assert_eq!(gated.status(), StatusCode::TOO_MANY_REQUESTS);

    origin.release(4);
    for request in bypassed {
        let (path, status, body) = request.await.unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"), "{path}");
    }
    holder.await.unwrap();
    assert_eq!(origin.hits(), 4, "the holder and the three bypass requests");
}

#[tokio::test]
async fn queue_status_reports_position_then_ready() {
    let (origin, concert, holder) = full_room(&[]).await;
    let client = cookie_client();
    let _ = client
        .get(url(&concert, "/p"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    let status = json_of(client.get(url(&concert, "/queue/status"))).await;
    assert_eq!(status["ready"], false);
    assert_eq!(status["position"], 1);
    // A second poll within a second is throttled, with the position still shown.
    let throttled = client
        .get(url(&concert, "/queue/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(throttled.headers()[RETRY_AFTER], "1");
    let body: serde_json::Value = throttled.json().await.unwrap();
    assert!(body["position"].as_u64().unwrap() >= 1);
    origin.release(1);
    holder.await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let ready = json_of(client.get(url(&concert, "/queue/status"))).await;
    assert_eq!(ready["ready"], true);
    // Without a ticket the page learns cookies are required.
    let cookieless = json_of(plain_client().get(url(&concert, "/queue/status"))).await;
    assert_eq!(cookieless["cookies_required"], true);
}

/// The origin never sees more than `cap` pages at once under a bounded burst of browser-like
/// clients, and every client is eventually served, in arrival order for cookie keepers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_never_exceeds_cap_under_a_burst() {
    let origin = origins::slow_origin(Duration::from_millis(40));
    let concert = concert(&["-upstream", &origin.url(), "-cap", "3", "-max-queue", "0"]).await;
    let visitors = 40;
    let mut tasks = Vec::new();
    for i in 0..visitors {
        let target = url(&concert, &format!("/v/{i}"));
        tasks.push(tokio::spawn(
            async move { visit_until_admitted(target).await },
        ));
    }
    for task in tasks {
        assert!(task.await.unwrap(), "every visitor got the page");
    }
    assert!(
        origin.max_concurrency() <= 3,
        "origin saw {}",
        origin.max_concurrency()
    );
    assert_eq!(origin.hits(), visitors);
    assert_eq!(concert.app.room.stats().occupancy, 0);
}

/// A cookie-keeping client: retries the page (as the waiting page's reload would) until served.
async fn visit_until_admitted(target: String) -> bool {
    let client = cookie_client();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        match client.get(&target).send().await {
            Ok(response) if response.status() == StatusCode::OK => return true,
            Ok(response) if response.status() == StatusCode::TOO_MANY_REQUESTS => {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            Ok(response) => panic!("unexpected status {}", response.status()),
            Err(e) => panic!("request failed: {e}"),
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_the_cap_live_is_never_exceeded() {
    let origin = origins::held_origin();
    let concert = concert_with_env(
        &["-upstream", &origin.url(), "-cap", "6", "-max-queue", "0"],
        &[("CONCERT_ADMIN_TOKEN", "tok")],
    )
    .await;
    let mut tasks = Vec::new();
    for i in 0..24 {
        let target = url(&concert, &format!("/v/{i}"));
        tasks.push(tokio::spawn(
            async move { visit_until_admitted(target).await },
        ));
    }
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 6).await);
    let response = plain_client()
        .post(url(&concert, "/_room/cap"))
        .bearer_auth("tok")
        .body(r#"{"cap":2}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(origin.max_concurrency(), 6);
    // Release the six old holders one at a time. Their releases pay the cap's debt first, so no
    // newcomer is admitted until fewer than two pages are at the origin.
    for _ in 0..4 {
        origin.release(1);
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(origin.in_flight() <= 6);
    }
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() <= 2).await);
    origin.reset_max_concurrency();
    for _ in 0..60 {
        origin.release(1);
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    origin.release(1000);
    for task in tasks {
        assert!(task.await.unwrap());
    }
    assert!(
        origin.max_concurrency() <= 2,
        "after the cap fell to 2 the origin saw {} at once",
        origin.max_concurrency()
    );
    assert_eq!(concert.app.room.stats().cap, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_keepers_are_served_in_arrival_order() {
    let origin = origins::held_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "1", "-max-queue", "0"]).await;
    let holder = hold_the_only_slot(&concert, &origin, "/holder").await;
    // Five visitors queue one after another, then keep retrying in reverse order of arrival.
    let mut clients = Vec::new();
    for i in 0..5 {
        let client = cookie_client();
        let response = client
            .get(url(&concert, &format!("/q/{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        clients.push((i, client));
    }
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().rev() {
        let target = url(&concert, &format!("/q/{i}"));
        tasks.push(tokio::spawn(async move {
            loop {
                let response = client.get(&target).send().await.unwrap();
                if response.status() == StatusCode::OK {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    origin.release(1);
    holder.await.unwrap();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        origin.release(1);
    }
    for task in tasks {
        task.await.unwrap();
    }
    let order: Vec<String> = origin.paths().into_iter().skip(1).collect();
    assert_eq!(order, vec!["/q/0", "/q/1", "/q/2", "/q/3", "/q/4"]);
}

#[tokio::test]
async fn queued_through_a_trusted_proxy_is_keyed_by_the_forwarded_client() {
    let (_origin, concert, _holder) = full_room(&[]).await;
    let response = plain_client()
        .get(url(&concert, "/via-proxy"))
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let line = concert.app.room.line_front(10);
    assert_eq!(line.len(), 1);
    assert_eq!(line[0].info.client, Some("203.0.113.7".parse().unwrap()));
}

/// A visitor whose turn comes while they are away no longer holds the line up for the whole
/// ticket lifetime: after the ready grace the next visitor is let in, and the one who was away
/// gets the front of the line back when they return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visitor_away_when_their_turn_comes_does_not_stall_the_line() {
    let (origin, concert, holder) =
        full_room(&["-ready-grace", "10s", "-retry-after", "1", "-reaper", "5s"]).await;
    let page = |client: &reqwest::Client| {
        client
            .get(url(&concert, "/page"))
            .header(ACCEPT, HTML_ACCEPT)
            .send()
    };
    let away = cookie_client();
    let present = cookie_client();
    assert_eq!(page(&away).await.unwrap().status(), StatusCode::OK);
    assert_eq!(page(&present).await.unwrap().status(), StatusCode::OK);
    let status = json_of(present.get(url(&concert, "/queue/status"))).await;
    assert_eq!(status["position"], 2, "{status}");
    origin.release(1);
    holder.await.unwrap();

    // `away` never polls again. Without the ready grace `present` would wait out the 5-minute
    // ticket lifetime; with it, the place passes on within the grace plus one reaper period.
    let started = std::time::Instant::now();
    let mut ready = false;
    while started.elapsed() < Duration::from_secs(25) {
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let status = json_of(present.get(url(&concert, "/queue/status"))).await;
        if status["ready"] == true {
            ready = true;
            break;
        }
        assert_eq!(status["position"], 1, "{status}");
    }
    assert!(ready, "the line stalled behind a visitor who left");
    let entering = tokio::spawn(page(&present));
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);

    // Back while `present` holds the only slot: first in line, with the same ticket.
    let back = page(&away).await.unwrap();
    assert_eq!(back.status(), StatusCode::OK);
    assert!(set_cookies(&back, "room_ticket").len() == 1);
    let status = json_of(away.get(url(&concert, "/queue/status"))).await;
    assert_eq!(status["position"], 1, "{status}");
    let stats = json_of(plain_client().get(url(&concert, "/_room/stats"))).await;
    assert_eq!(stats["lapsed_total"], 1, "{stats}");
    assert_eq!(stats["rejoined_total"], 1, "{stats}");

    origin.release(1);
    let served = entering.await.unwrap().unwrap();
    assert_eq!(served.text().await.unwrap(), "ok");
    let admitted = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            let status = json_of(away.get(url(&concert, "/queue/status"))).await;
            if status["ready"] == true {
                break;
            }
        }
    })
    .await;
    assert!(admitted.is_ok(), "the returning visitor was let in next");
    origin.release(1);
    let response = page(&away).await.unwrap();
    assert_eq!(response.text().await.unwrap(), "ok");
}

/// The pipeline is a `tower::Service`: mounted as the catch-all of an application's own axum
/// `Router`, it answers everything the application does not, with the socket peer from axum's
/// `ConnectInfo` as the client.
#[tokio::test]
async fn the_pipeline_serves_as_the_catch_all_of_an_axum_router() {
    use std::collections::HashMap;
    use std::net::SocketAddr;

    let origin = origins::fast_origin();
    let argv: Vec<String> = ["-upstream", &origin.url(), "-cap", "2", "-data-dir="]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
    let Ok(concert::config::Loaded::Run(mut config)) =
        concert::config::load(&argv, &HashMap::<String, String>::new())
    else {
        panic!("flags refused");
    };
    config.validate().unwrap();
    let app = concert::App::new(*config).unwrap();
    let service = axum::Router::new()
        .route("/hello", axum::routing::get(|| async { "mounted beside" }))
        .merge(concert::router(app.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            service.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });

    let client = plain_client();
    let get = |path: &str| client.get(format!("http://{addr}{path}")).send();
    assert_eq!(
        get("/hello").await.unwrap().text().await.unwrap(),
        "mounted beside"
    );
    assert_eq!(
        get("/_room/healthz").await.unwrap().text().await.unwrap(),
        "ok"
    );
    let page = get("/page").await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        page.headers().contains_key("set-cookie"),
        "a pass is issued"
    );
    assert_eq!(page.text().await.unwrap(), "ok");
    assert_eq!(origin.paths(), ["/page"]);
    assert_eq!(app.room.stats().admitted_total, 1);
    server.abort();
}
