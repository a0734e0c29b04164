//! Attacks at the edges of the proxy, each against a real Concert and a real origin on loopback:
//! forged client-address headers, bodies an origin sends where none belongs, `CONNECT`, what
//! the public stats reveal of the upstream, and control characters hidden in escapes.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use support::origins;
use support::*;
use tokio::net::TcpStream;

/// Headers with which a CDN or load balancer tells the origin who the client is.
const ADDRESS_CLAIMS: [(&str, &str); 5] = [
    ("true-client-ip", "6.6.6.1"),
    ("cf-connecting-ip", "6.6.6.2"),
    ("x-client-ip", "6.6.6.3"),
    ("x-cluster-client-ip", "6.6.6.4"),
    ("fastly-client-ip", "6.6.6.5"),
];

/// A request head to Concert carrying every address claim plus a forged `X-Real-IP`,
/// `Forwarded` and `X-Forwarded-For`; `extra` lines go before the blank line.
fn forging_request(method: &str, path: &str, extra: &str) -> String {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: shop.test\r\nX-Real-IP: 6.6.6.6\r\n\
         Forwarded: for=6.6.6.7\r\nX-Forwarded-For: 203.0.113.9\r\n"
    );
    for (name, value) in ADDRESS_CLAIMS {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(extra);
    head.push_str("\r\n");
    head
}

/// What the echo origin saw of one request sent through `concert` on a new connection.
async fn seen_by_origin(concert: &concert::Running, request: &str) -> serde_json::Value {
    let mut stream = TcpStream::connect(concert.addr).await.unwrap();
    let (head, body) = tokio::time::timeout(
        Duration::from_secs(10),
        keep_alive_exchange(&mut stream, request),
    )
    .await
    .expect("an answer in time");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    serde_json::from_slice(&body).unwrap()
}

fn header_values(seen: &serde_json::Value, name: &str) -> Vec<String> {
    seen["headers"][name]
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(|value| value.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The requests that reach the origin each way: the direct path (bodiless), the pooled path
/// (an upload), the public asset tier, and the general client (a WebSocket handshake the
/// origin declines with a plain answer).
fn every_forwarding_path() -> [String; 4] {
    [
        forging_request("GET", "/page", ""),
        forging_request("POST", "/form", "Content-Length: 2\r\n") + "hi",
        forging_request("GET", "/pub/logo.png", ""),
        forging_request(
            "GET",
            "/socket",
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        ),
    ]
}

/// A client that is not a trusted proxy says, in every header an origin might read, that it is
/// someone else. On every path to the origin, none of those claims arrive; `X-Real-IP` and
/// `X-Forwarded-For` name the socket peer.
#[tokio::test]
async fn forged_client_addresses_from_an_untrusted_client_never_reach_the_origin() {
    let origin = origins::echo_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-trusted-proxies",
        "192.0.2.0/24",
        "-asset-public",
        "/pub/*",
    ])
    .await;
    for request in every_forwarding_path() {
        let seen = seen_by_origin(&concert, &request).await;
        for (name, _) in ADDRESS_CLAIMS {
            assert!(header_values(&seen, name).is_empty(), "{name}: {seen}");
        }
        assert!(header_values(&seen, "forwarded").is_empty(), "{seen}");
        assert_eq!(header_values(&seen, "x-real-ip"), ["127.0.0.1"], "{seen}");
        assert_eq!(
            header_values(&seen, "x-forwarded-for"),
            ["127.0.0.1"],
            "{seen}"
        );
    }
    assert_eq!(origin.hits(), 4);
}

/// Behind a trusted proxy the same headers are the proxy's word: they pass unchanged, and
/// `X-Real-IP` is the client Concert resolved from the proxy's `X-Forwarded-For`.
#[tokio::test]
async fn a_trusted_proxys_address_headers_pass_and_x_real_ip_is_the_resolved_client() {
    let origin = origins::echo_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-trusted-proxies",
        "127.0.0.1/32",
        "-asset-public",
        "/pub/*",
    ])
    .await;
    for request in every_forwarding_path() {
        let seen = seen_by_origin(&concert, &request).await;
        for (name, value) in ADDRESS_CLAIMS {
            assert_eq!(header_values(&seen, name), [value], "{name}: {seen}");
        }
        assert_eq!(header_values(&seen, "x-real-ip"), ["203.0.113.9"], "{seen}");
        assert_eq!(
            header_values(&seen, "x-forwarded-for"),
            ["203.0.113.9, 127.0.0.1"],
            "{seen}"
        );
    }
}

async fn body_of(response: reqwest::Response) -> (StatusCode, Option<String>, String) {
    let status = response.status();
    let trailing = response
        .headers()
        .get("x-trailing")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    (status, trailing, response.text().await.unwrap())
}

/// An origin answers `HEAD` with a length and then, late, sends a body anyway: a whole second
/// response. One client's `HEAD` must not hand that response to the next client.
#[tokio::test]
async fn a_body_sent_after_a_head_answer_never_reaches_the_next_client() {
    let origin = origins::trailing_body_origin().await;
    let concert = concert(&["-upstream", &origin.url()]).await;
    for _ in 0..3 {
        let attacker = plain_client().head(url(&concert, "/page")).send().await;
        assert_eq!(attacker.unwrap().status(), StatusCode::OK);
        let victim = plain_client().get(url(&concert, "/page")).send().await;
        assert_eq!(
            body_of(victim.unwrap()).await,
            (StatusCode::OK, None, "real".to_owned())
        );
    }
}

/// The same with 304 and 204 answers whose `Content-Length` announces a body.
#[tokio::test]
async fn a_body_sent_after_a_304_or_204_never_reaches_the_next_client() {
    let origin = origins::trailing_body_origin().await;
    let concert = concert(&["-upstream", &origin.url()]).await;
    for (path, status) in [
        ("/not-modified", StatusCode::NOT_MODIFIED),
        ("/no-content", StatusCode::NO_CONTENT),
    ] {
        let first = plain_client().get(url(&concert, path)).send().await;
        assert_eq!(first.unwrap().status(), status);
        let next = plain_client().get(url(&concert, "/page")).send().await;
        assert_eq!(
            body_of(next.unwrap()).await,
            (StatusCode::OK, None, "real".to_owned()),
            "after {path}"
        );
    }
}

/// Uploads travel on their own pooled connections; a 204 with a stray body must not poison
/// them either.
#[tokio::test]
async fn a_body_sent_after_a_204_to_an_upload_never_reaches_the_next_upload() {
    let origin = origins::trailing_body_origin().await;
    let concert = concert(&["-upstream", &origin.url()]).await;
    for _ in 0..2 {
        let first = plain_client()
            .post(url(&concert, "/no-content"))
            .body("form=1")
            .send()
            .await;
        assert_eq!(first.unwrap().status(), StatusCode::NO_CONTENT);
        let next = plain_client()
            .post(url(&concert, "/page"))
            .body("form=2")
            .send()
            .await;
        assert_eq!(
            body_of(next.unwrap()).await,
            (StatusCode::OK, None, "real".to_owned())
        );
    }
}

/// `CONNECT` asks for a tunnel, which a reverse proxy does not open; with a path as its target
/// it is not even well formed. Either way it is refused with 400 and never reaches the origin.
#[tokio::test]
async fn connect_is_refused_and_never_reaches_the_origin() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    for target in ["/foo", "/", "127.0.0.1:443", &origin.addr().to_string()] {
        let request = format!("CONNECT {target} HTTP/1.1\r\nHost: shop.test\r\n\r\n");
        let answer = raw_exchange(concert.addr, request.as_bytes(), Duration::from_secs(3)).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{target}: {answer}");
    }
    assert_eq!(origin.hits(), 0);
}

/// `/_room/stats` answers anyone. An upstream with credentials, a base path and a token in its
/// query shows there as scheme, host and port only; the metrics name none of it; requests
/// still reach the base path.
#[tokio::test]
async fn public_stats_show_only_the_upstreams_scheme_host_and_port() {
    let origin = origins::echo_origin();
    let addr = origin.addr();
    let upstream = format!("http://admin:pw-s3cret@{addr}/base-s3cret?token=s3cret");
    let concert = concert(&["-upstream", &upstream]).await;
    let stats = plain_client()
        .get(url(&concert, "/_room/stats"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["upstream"], format!("http://{addr}"));
    assert!(!stats.to_string().contains("s3cret"), "{stats}");
    let metrics = plain_client()
        .get(url(&concert, "/_room/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!metrics.contains("s3cret"));
    let seen = json_of(plain_client().get(url(&concert, "/page"))).await;
    assert_eq!(seen["path"], "/base-s3cret/page?token=s3cret");
}

/// Escapes of control characters (`%00`-`%1F`, `%7F`) cut or split paths in origins that
/// decode them; raw control bytes never get past the parser. All are refused with 400 and
/// nothing reaches the origin, while other escapes still pass.
#[tokio::test]
async fn control_characters_in_the_path_are_refused() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let answer_to = |target: &[u8]| {
        let mut request = b"GET ".to_vec();
        request.extend_from_slice(target);
        request.extend_from_slice(b" HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n");
        let addr = concert.addr;
        async move { raw_exchange(addr, &request, Duration::from_secs(3)).await }
    };
    for escape in [
        "%00", "%01", "%09", "%0a", "%0D", "%1f", "%1F", "%7f", "%7F",
    ] {
        for target in [
            format!("/file{escape}.php"),
            format!("/{escape}"),
            format!("/a/{escape}/b?x=1"),
        ] {
            let answer = answer_to(target.as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{target}: {answer}");
        }
    }
    for raw in [
        &b"/a\x00b"[..],
        b"/a\x01b",
        b"/a\x1fb",
        b"/a\x7fb",
        b"/a\tb",
    ] {
        let answer = answer_to(raw).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{raw:?}: {answer}");
    }
    assert_eq!(origin.hits(), 0);
    let answer = answer_to(b"/a%20b%C3%A9%25").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(origin.paths(), ["/a%20b%C3%A9%25"]);
}
