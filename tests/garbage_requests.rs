//! Random traffic against the real server, from both sides. Whatever a client sends, Concert
//! answers below 500 (or closes the connection), never panics and gives every slot back; well
//! formed requests pipelined on one connection are each answered once, in order; whatever an
//! origin answers, the client hears something, never a 500, and the slot comes back; and a
//! crowd whose members walk away at any moment leaves no slot taken and the origin at its cap;
//! and the admin API answers any JSON an operator's script might send without a 5xx.
//! `GARBAGE_CASES=N` runs more cases when hunting.

mod support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::origins;
use support::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Notify;

const ADMIN_TOKEN: &str = "garbage-test-admin-token";

/// One request as raw parts; the header block and body may contradict each other on purpose.
#[derive(Debug, Clone)]
struct RawRequest {
    method: String,
    target: String,
    version: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl RawRequest {
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.version.as_bytes());
        out.extend_from_slice(b"\r\n");
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// Bytes that tend to break parsers: separators, escapes, controls, high bytes.
fn nasty_text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            4 => proptest::char::range('a', 'z').prop_map(String::from),
            1 => Just("%".to_string()),
            1 => Just("%2e".to_string()),
            1 => Just("%2F".to_string()),
            1 => Just("%00".to_string()),
            1 => Just("..".to_string()),
            1 => Just("/".to_string()),
            1 => Just("\\".to_string()),
            1 => Just(";".to_string()),
            1 => Just(",".to_string()),
            1 => Just("=".to_string()),
            1 => Just(" ".to_string()),
            1 => Just("\"".to_string()),
            1 => Just("é".to_string()),
            1 => Just("\u{7f}".to_string()),
            1 => Just("\t".to_string()),
        ],
        0..max,
    )
    .prop_map(|parts| parts.concat())
}

/// Text a path, query or header value may carry, with the escapes and dot segments that path
/// rules must see through, but nothing a parser refuses outright.
fn plausible_text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            6 => proptest::char::range('a', 'z').prop_map(String::from),
            1 => Just("/".to_string()),
            1 => Just("%2e".to_string()),
            1 => Just("%2F".to_string()),
            1 => Just("%41".to_string()),
            1 => Just("%5f".to_string()),
            1 => Just(";".to_string()),
            1 => Just("..".to_string()),
            1 => Just(".".to_string()),
            1 => Just("-".to_string()),
            1 => Just("=".to_string()),
        ],
        0..max,
    )
    .prop_map(|parts| parts.concat())
}

/// Mostly plausible, sometimes hostile: most cases get past the parser and into the pipeline.
fn some_text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![3 => plausible_text(max), 1 => nasty_text(max)]
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("GET".to_string()),
        2 => Just("POST".to_string()),
        1 => Just("HEAD".to_string()),
        1 => Just("PUT".to_string()),
        1 => Just("DELETE".to_string()),
        1 => Just("OPTIONS".to_string()),
        1 => Just("CONNECT".to_string()),
        1 => Just("TRACE".to_string()),
        1 => "[A-Z]{1,12}",
        1 => nasty_text(8),
    ]
}

fn target() -> impl Strategy<Value = String> {
    let base = prop_oneof![
        Just("/"),
        Just("/queue/status"),
        Just("/_room/stats"),
        Just("/_room/cap"),
        Just("/_room/abuse"),
        Just("/_room/metrics"),
        Just("/metrics"),
        Just("/_concert/"),
        Just("/favicon.ico"),
        Just("/static/"),
        Just("/events"),
        Just("/hooks/"),
        Just("*"),
        Just("http://127.0.0.1/"),
        Just(""),
    ];
    (base, some_text(24), proptest::option::of(some_text(12))).prop_map(|(base, tail, query)| {
        match query {
            Some(query) => format!("{base}{tail}?{query}"),
            None => format!("{base}{tail}"),
        }
    })
}

fn version() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => Just("HTTP/1.1".to_string()),
        2 => Just("HTTP/1.0".to_string()),
        1 => Just("HTTP/2.0".to_string()),
        1 => Just("HTTP/9.9".to_string()),
        1 => Just("http/1.1".to_string()),
        1 => Just(String::new()),
    ]
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let value = || some_text(40).prop_map(String::into_bytes);
    prop_oneof![
        3 => value().prop_map(|v| ("Host".to_string(), v)),
        3 => (some_text(30), some_text(30)).prop_map(|(ticket, pass)| {
            let cookie = format!("room_ticket={ticket}; concert_admit={pass}; room_probe={ticket}");
            ("Cookie".to_string(), cookie.into_bytes())
        }),
        2 => value().prop_map(|v| ("Cookie".to_string(), v)),
        2 => value().prop_map(|v| ("X-Forwarded-For".to_string(), v)),
        1 => Just(("X-Forwarded-For".to_string(), "1.2.3.4, ".repeat(300).into_bytes())),
        2 => prop_oneof![
            Just("text/html".to_string()),
            Just("application/json".to_string()),
            Just("*/*".to_string()),
            nasty_text(20),
        ]
        .prop_map(|v| ("Accept".to_string(), v.into_bytes())),
        2 => prop_oneof![
            Just("0".to_string()),
            Just("3".to_string()),
            Just("-1".to_string()),
            Just("99999999999999999999999".to_string()),
            Just("3, 4".to_string()),
            nasty_text(6),
        ]
        .prop_map(|v| ("Content-Length".to_string(), v.into_bytes())),
        1 => prop_oneof![
            Just("chunked".to_string()),
            Just("gzip, chunked".to_string()),
            Just("chunked, gzip".to_string()),
            nasty_text(10),
        ]
        .prop_map(|v| ("Transfer-Encoding".to_string(), v.into_bytes())),
        1 => prop_oneof![
            Just(format!("Bearer {ADMIN_TOKEN}")),
            Just("Bearer wrong".to_string()),
            nasty_text(20),
        ]
        .prop_map(|v| ("Authorization".to_string(), v.into_bytes())),
        1 => prop_oneof![Just("websocket".to_string()), Just("h2c".to_string()), nasty_text(8)]
            .prop_map(|v| ("Upgrade".to_string(), v.into_bytes())),
        1 => prop_oneof![Just("close".to_string()), Just("upgrade".to_string()), nasty_text(8)]
            .prop_map(|v| ("Connection".to_string(), v.into_bytes())),
        1 => prop_oneof![Just("100-continue".to_string()), nasty_text(8)]
            .prop_map(|v| ("Expect".to_string(), v.into_bytes())),
        1 => (nasty_text(12), value()),
        1 => proptest::collection::vec(any::<u8>(), 0..24).prop_map(|v| ("X-Raw".to_string(), v)),
    ]
}

fn request() -> impl Strategy<Value = RawRequest> {
    (
        method(),
        target(),
        version(),
        // Nearly every real client names the host; without one, HTTP/1.1 stops at the front
        // door, so most cases carry a valid one and random Host headers come on top.
        prop_oneof![
            6 => Just(Some("127.0.0.1")),
            1 => Just(Some("example.test:8080")),
            1 => Just(None),
        ],
        proptest::collection::vec(header(), 0..8),
        prop_oneof![
            3 => proptest::collection::vec(any::<u8>(), 0..16),
            // A second request riding in the first one's body, or after it.
            1 => Just(b"GET /_room/stats HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
            1 => Just(b"0\r\n\r\nGET / HTTP/1.1\r\n\r\n".to_vec()),
        ],
    )
        .prop_map(|(method, target, version, host, mut headers, body)| {
            if let Some(host) = host {
                headers.insert(0, ("Host".to_string(), host.as_bytes().to_vec()));
            }
            RawRequest {
                method,
                target,
                version,
                headers,
                body,
            }
        })
}

/// The status of the first answer on the connection, or `None` when it was closed (or stayed
/// silent for `wait`) without one.
async fn first_status(addr: std::net::SocketAddr, bytes: &[u8], wait: Duration) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    stream.write_all(bytes).await.ok()?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 512];
    let read_line = async {
        while !answer.windows(2).any(|w| w == b"\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(wait, read_line).await;
    let line = String::from_utf8_lossy(&answer);
    line.strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
}

/// A property runner with `default_cases` cases, or `GARBAGE_CASES` when set (a longer hunt).
fn runner(default_cases: u32) -> TestRunner {
    let cases = std::env::var("GARBAGE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Starts Concert with every stage configured, plus `extra` flags.
async fn concert_with_every_stage(upstream: &str, extra: &[&str]) -> concert::Running {
    let mut args = vec![
        "-upstream",
        upstream,
        "-bypass",
        "/favicon.ico,/hooks/*",
        "-assets",
        "/static/*",
        "-stream-paths",
        "/events",
        // Strikes are counted but never add up to a ban, so every case reaches the stage it
        // aims at.
        "-abuse-strikes",
        "2000000000",
    ];
    args.extend_from_slice(extra);
    concert_with_env(&args, &[("CONCERT_ADMIN_TOKEN", ADMIN_TOKEN)]).await
}

/// Sends random requests; fails on the first answer of 500 or more.
fn send_random_requests(runtime: &tokio::runtime::Runtime, addr: std::net::SocketAddr) {
    let mut runner = runner(256);
    let result = runner.run(&request(), |raw| {
        let status = runtime.block_on(first_status(addr, &raw.to_bytes(), Duration::from_secs(2)));
        match status {
            Some(code) if code >= 500 => Err(TestCaseError::fail(format!(
                "{code} for {:?}",
                String::from_utf8_lossy(&raw.to_bytes())
            ))),
            _ => Ok(()),
        }
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn random_and_malformed_requests_never_get_a_5xx_or_leak_a_slot() {
    let runtime = runtime();
    let (origin, concert) = runtime.block_on(async {
        let origin = origins::fast_origin();
        let concert = concert_with_every_stage(&origin.url(), &["-cap", "4"]).await;
        (origin, concert)
    });
    send_random_requests(&runtime, concert.addr);
    runtime.block_on(async {
        let health = plain_client()
            .get(url(&concert, "/_room/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        assert!(
            room_empties(&concert).await,
            "occupancy {}",
            concert.app.room.stats().occupancy
        );
        // The traffic did reach the origin, so the cases went past the front door.
        assert!(origin.hits() > 0);
    });
}

#[test]
fn random_and_malformed_requests_meet_a_full_room_without_a_5xx() {
    let runtime = runtime();
    let release = Arc::new(Notify::new());
    let (_origin, concert, holder) = runtime.block_on(async {
        let gate = Arc::clone(&release);
        // `/hold` waits for the test; everything else (bypass, assets) is answered at once.
        let origin = origins::origin_with(move |req, _| {
            let gate = Arc::clone(&gate);
            async move {
                if req.uri().path() == "/hold" {
                    gate.notified().await;
                }
                origins::text("ok")
            }
        });
        // No line limit: a full line's 503 for API clients is an answer, not a failure.
        let concert =
            concert_with_every_stage(&origin.url(), &["-cap", "1", "-max-queue", "0"]).await;
        // A raw connection, so no client timeout gives the slot up during a long hunt.
        let holder = tokio::spawn(first_status(
            concert.addr,
            b"GET /hold HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n",
            Duration::from_secs(600),
        ));
        assert!(
            eventually(Duration::from_secs(3), || concert
                .app
                .room
                .stats()
                .occupancy
                == 1)
            .await
        );
        (origin, concert, holder)
    });
    send_random_requests(&runtime, concert.addr);
    runtime.block_on(async {
        let stats = concert.app.room.stats();
        assert_eq!(stats.occupancy, 1, "the holder keeps the only slot");
        assert!(
            stats.queue_depth > 0,
            "the cases joined the line: {stats:?}"
        );
        release.notify_waiters();
        assert_eq!(holder.await.unwrap(), Some(200));
    });
}

/// A response as an origin might garble it: any status line, headers that may contradict each
/// other, a body that may not match them, and sometimes bare `\n` line ends.
fn origin_answer() -> impl Strategy<Value = Vec<u8>> {
    let status = prop_oneof![
        4 => Just("HTTP/1.1 200 OK"),
        1 => Just("HTTP/1.0 200 OK"),
        1 => Just("HTTP/1.1 204 No Content"),
        1 => Just("HTTP/1.1 304 Not Modified"),
        1 => Just("HTTP/1.1 404 Not Found"),
        1 => Just("HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\nHTTP/1.1 200 OK"),
        1 => Just("HTTP/1.1 101 Switching Protocols"),
        1 => Just("HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade"),
        1 => Just("HTTP/1.1 999 Odd"),
        1 => Just("HTTP/1.1 20 Short"),
        1 => Just("HTTP/2 200"),
        1 => Just("ICY 200 OK"),
        1 => Just(""),
    ];
    let name = prop_oneof![
        Just("content-length".to_string()),
        Just("transfer-encoding".to_string()),
        Just("connection".to_string()),
        Just("set-cookie".to_string()),
        Just("x-priority-grant".to_string()),
        Just("upgrade".to_string()),
        nasty_text(10),
    ];
    let value = prop_oneof![
        Just("chunked".to_string()),
        Just("close".to_string()),
        Just("5".to_string()),
        Just("0".to_string()),
        Just("-3".to_string()),
        Just("room_ticket=x; Path=/".to_string()),
        Just("websocket".to_string()),
        Just("upgrade".to_string()),
        nasty_text(16),
    ];
    let body = prop_oneof![
        Just(b"hello".to_vec()),
        Just(b"5\r\nhello\r\n0\r\n\r\n".to_vec()),
        Just(b"zz\r\nhello\r\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    (
        status,
        proptest::collection::vec((name, value), 0..5),
        body,
        any::<bool>(),
    )
        .prop_map(|(status, headers, body, bare_newlines)| {
            let end = if bare_newlines { "\n" } else { "\r\n" };
            let mut out = format!("{status}{end}");
            for (name, value) in headers {
                out.push_str(&format!("{name}: {value}{end}"));
            }
            out.push_str(end);
            let mut out = out.into_bytes();
            out.extend_from_slice(&body);
            out
        })
}

#[test]
fn whatever_an_origin_answers_concert_relays_or_says_502_and_frees_the_slot() {
    let runtime = runtime();
    let script = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let concert = runtime.block_on(async {
        let current = Arc::clone(&script);
        // Answers every request with the current script, then closes.
        let upstream =
            origins::hanging_up_origin(move || current.lock().clone(), Duration::ZERO).await;
        concert(&["-upstream", &upstream, "-cap", "1"]).await
    });
    let addr = concert.addr;
    let mut runner = runner(128);
    let requests: [&[u8]; 3] = [
        b"GET /page HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n",
        b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
        b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    ];
    let result = runner.run(&(origin_answer(), 0..3usize), |(answer, which)| {
        *script.lock() = answer.clone();
        let status = runtime.block_on(first_status(addr, requests[which], Duration::from_secs(3)));
        let shown = String::from_utf8_lossy(&answer).into_owned();
        // Concert's own failure would be a 500; the origin's is a 502 (or whatever it sent).
        // Either way the client hears something.
        if status.is_none() || status == Some(500) {
            return Err(TestCaseError::fail(format!(
                "{status:?} for origin answer {shown:?}"
            )));
        }
        // Cap 1: the one slot must come back after every answer, good or broken.
        let freed = runtime.block_on(room_empties(&concert));
        if !freed {
            return Err(TestCaseError::fail(format!(
                "slot kept after origin answer {shown:?} (status {status:?})"
            )));
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    runtime.block_on(async {
        let health = plain_client()
            .get(url(&concert, "/_room/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
    });
}

/// Answers that parse but are not HTTP as a client may take it: a status beyond 599 is the
/// origin's failure (502), and a length given as a list of equal values reaches the client as
/// the one value (RFC 9110 §8.6). Pages take Concert's own origin path, forms the pooled client.
#[tokio::test]
async fn odd_statuses_and_listed_lengths_from_the_origin_are_not_passed_on() {
    let script = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let current = Arc::clone(&script);
    let upstream = origins::hanging_up_origin(move || current.lock().clone(), Duration::ZERO).await;
    let concert = concert(&["-upstream", &upstream]).await;
    let requests: [&[u8]; 2] = [
        b"GET /page HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    ];
    for request in requests {
        let shown = String::from_utf8_lossy(request).into_owned();
        *script.lock() = b"HTTP/1.1 600 Beyond\r\ncontent-length: 2\r\n\r\nok".to_vec();
        let answer = whole_answer(concert.addr, request).await;
        assert!(answer.starts_with("HTTP/1.1 502 "), "{shown}: {answer}");

        for length in ["2, 2", "2,2", "2 , 2"] {
            *script.lock() =
                format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\nok").into_bytes();
            let answer = whole_answer(concert.addr, request).await;
            let lengths: Vec<&str> = answer
                .lines()
                .filter(|line| line.to_ascii_lowercase().starts_with("content-length:"))
                .collect();
            assert_eq!(
                lengths,
                ["content-length: 2"],
                "{shown} {length:?}: {answer}"
            );
            assert!(
                answer.ends_with("\r\n\r\nok"),
                "{shown} {length:?}: {answer}"
            );
        }
    }
}

/// Everything Concert sends back for `request` until it closes the connection.
async fn whole_answer(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// A well-formed request to a page or a bypass path: bodiless, with a length, or chunked (extensions,
/// trailers), its body full of text that looks like requests.
fn valid_request() -> impl Strategy<Value = Vec<u8>> {
    let body = prop_oneof![
        Just(b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        Just(b"0\r\n\r\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..200),
    ];
    let chunk_sizes = proptest::collection::vec(1usize..40, 1..4);
    let kind = 0..4usize;
    // Spellings every HTTP/1.1 parser must take alike: header-name case, optional whitespace
    // around values. (A coding before `chunked` is refused: see ops_hardening.)
    let length_name = prop_oneof![
        Just("Content-Length"),
        Just("content-length"),
        Just("CONTENT-LENGTH")
    ];
    let coding = prop_oneof![
        Just("Transfer-Encoding: chunked"),
        Just("transfer-encoding:chunked"),
        Just("TRANSFER-ENCODING: \tChunked "),
    ];
    let spelling = (
        length_name,
        prop_oneof![Just(""), Just(" "), Just("\t")],
        coding,
    );
    (kind, body, chunk_sizes, nasty_text(10), any::<bool>(), spelling).prop_map(
        |(kind, body, sizes, tail, gated, (length_name, space, coding))| {
            let tail: String = tail.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
            // Through the room (a page slot each) or a bypass rule.
            let path = if gated {
                format!("/p/{tail}")
            } else {
                format!("/hooks/{tail}")
            };
            let mut out = Vec::new();
            match kind {
                0 => out.extend_from_slice(
                    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
                ),
                1 => out.extend_from_slice(
                    format!("HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
                ),
                2 => {
                    let head = format!(
                        "POST {path} HTTP/1.1\r\nHost: x\r\n{length_name}:{space}{}{space}\r\n\r\n",
                        body.len()
                    );
                    out.extend_from_slice(head.as_bytes());
                    out.extend_from_slice(&body);
                }
                _ => {
                    let head = format!("PUT {path} HTTP/1.1\r\nHost: x\r\n{coding}\r\n\r\n");
                    out.extend_from_slice(head.as_bytes());
                    let mut rest = body.as_slice();
                    for size in sizes.iter().cycle() {
                        if rest.is_empty() {
                            break;
                        }
                        let take = (*size).min(rest.len());
                        out.extend_from_slice(format!("{take:x};ext=1\r\n").as_bytes());
                        out.extend_from_slice(&rest[..take]);
                        out.extend_from_slice(b"\r\n");
                        rest = &rest[take..];
                    }
                    out.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\n");
                }
            }
            out
        },
    )
}

#[test]
fn pipelined_well_formed_requests_are_each_answered_once_in_order() {
    let runtime = runtime();
    let (origin, concert) = runtime.block_on(async {
        let origin = origins::echo_origin();
        let concert = concert(&["-upstream", &origin.url(), "-bypass", "/hooks/*"]).await;
        (origin, concert)
    });
    let addr = concert.addr;
    let mut runner = runner(64);
    let strategy = (proptest::collection::vec(valid_request(), 1..5), 1usize..4);
    let result = runner.run(&strategy, |(requests, pieces)| {
        let mut stream_bytes: Vec<u8> = requests.concat();
        stream_bytes.extend_from_slice(b"GET /hooks/last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let before = origin.hits();
        let answer = runtime.block_on(async {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            for piece in stream_bytes.chunks(stream_bytes.len().div_ceil(pieces)) {
                stream.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
            String::from_utf8_lossy(&answer).into_owned()
        });
        let expected = requests.len() + 1;
        let answered = answer.matches("HTTP/1.1 200 OK\r\n").count();
        // Every request reached the origin once: nothing smuggled, nothing lost.
        let reached = origin.hits() - before;
        // The echoed paths come back in the order sent (HEAD answers carry no body).
        let request_lines = requests
            .iter()
            .map(|request| request.as_slice())
            .chain([b"GET /hooks/last HTTP/1.1".as_slice()]);
        let sent_paths: Vec<String> = request_lines
            .filter_map(|request| {
                let line = request.split(|&b| b == b'\r').next()?;
                let mut words = std::str::from_utf8(line).ok()?.split(' ');
                let method = words.next()?;
                let path = words.next()?;
                (method != "HEAD").then(|| path.to_string())
            })
            .collect();
        let echoed: Vec<String> = answer
            .split("\"path\":\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_string)
            .collect();
        if answered != expected || reached != expected as u64 || echoed != sent_paths {
            return Err(TestCaseError::fail(format!(
                "{answered} answers and {reached} origin hits for {expected} requests: {:?}\n{answer}",
                String::from_utf8_lossy(&stream_bytes)
            )));
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// One client's behaviour: what it sends, how long it lingers, and whether it waits for the
/// answer or walks away.
#[derive(Debug, Clone)]
struct Visit {
    origin_delay_ms: u64,
    /// Bytes of the request sent before lingering (all of it when larger).
    sent: usize,
    linger_ms: u64,
    waits_for_answer: bool,
    html: bool,
    /// A page (through the room), an asset or a stream (both with an admission pass).
    target: &'static str,
}

fn visit() -> impl Strategy<Value = Visit> {
    let target = prop_oneof![Just(""), Just("/static"), Just("/events")];
    (
        0u64..40,
        0usize..300,
        0u64..40,
        any::<bool>(),
        any::<bool>(),
        target,
    )
        .prop_map(
            |(origin_delay_ms, sent, linger_ms, waits_for_answer, html, target)| Visit {
                origin_delay_ms,
                sent,
                linger_ms,
                waits_for_answer,
                html,
                target,
            },
        )
}

async fn play(addr: std::net::SocketAddr, pass: Arc<str>, visit: Visit) {
    let accept = if visit.html {
        "text/html"
    } else {
        "application/json"
    };
    let request = format!(
        "GET {}/d/{} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nCookie: concert_admit={pass}\r\nConnection: close\r\n\r\n",
        visit.target, visit.origin_delay_ms
    );
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return;
    };
    let sent = visit.sent.min(request.len());
    let _ = stream.write_all(&request.as_bytes()[..sent]).await;
    tokio::time::sleep(Duration::from_millis(visit.linger_ms)).await;
    if visit.waits_for_answer {
        let _ = stream.write_all(&request.as_bytes()[sent..]).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    }
    // Otherwise dropped here: gone mid-head, mid-wait or mid-answer.
}

#[test]
fn clients_leaving_at_any_moment_never_leak_a_slot_or_pass_the_cap() {
    let runtime = runtime();
    let (origin, concert) = runtime.block_on(async {
        let origin = origins::origin_with(|req, _| async move {
            let delay = req
                .uri()
                .path()
                .rsplit_once("/d/")
                .and_then(|(_, ms)| ms.parse().ok())
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            origins::text("ok")
        });
        let concert = concert(&[
            "-upstream",
            &origin.url(),
            "-cap",
            "2",
            "-max-queue",
            "0",
            "-assets",
            "/static/*",
            "-asset-user-cap-h1",
            "3",
            "-asset-cap",
            "5",
            "-asset-wait",
            "20ms",
            "-asset-user-wait",
            "20ms",
            "-stream-paths",
            "/events/*",
            "-stream-cap",
            "3",
            "-abuse-strikes",
            "2000000000",
        ])
        .await;
        (origin, concert)
    });
    // One admission pass, taken while the room is still free, carried by the whole crowd.
    let pass: Arc<str> = runtime.block_on(async {
        let response = plain_client()
            .get(url(&concert, "/d/0"))
            .send()
            .await
            .unwrap();
        let cookie = set_cookies(&response, "concert_admit")[0].to_string();
        let value = cookie.split(';').next().unwrap().split_once('=').unwrap().1;
        Arc::from(value)
    });
    let addr = concert.addr;
    let mut runner = runner(16);
    let crowd = proptest::collection::vec(visit(), 1..40);
    let result = runner.run(&crowd, |visits| {
        runtime.block_on(async {
            let players: Vec<_> = visits
                .iter()
                .cloned()
                .map(|visit| tokio::spawn(play(addr, Arc::clone(&pass), visit)))
                .collect();
            for player in players {
                let _ = player.await;
            }
        });
        let generation = concert.app.generation();
        let all_freed = runtime.block_on(eventually(Duration::from_secs(2), || {
            concert.app.room.stats().occupancy == 0
                && generation.assets.stats().in_flight == 0
                && generation.streams.stats().active == 0
        }));
        // Pages are capped at 2; assets (5) and streams (3) have their own limits on top.
        if !all_freed || origin.max_concurrency() > 2 + 5 + 3 {
            return Err(TestCaseError::fail(format!(
                "occupancy {}, assets {}, streams {}, origin at most {} after {visits:?}",
                concert.app.room.stats().occupancy,
                generation.assets.stats().in_flight,
                generation.streams.stats().active,
                origin.max_concurrency()
            )));
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    // The pass worked: the crowd really went through the asset and stream tiers.
    let generation = concert.app.generation();
    assert!(generation.assets.stats().served_total > 0);
    assert!(generation.streams.stats().served_total > 0);
}

/// A JSON value an operator's script might send by mistake.
fn odd_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    prop_oneof![
        Just(json!("203.0.113.7")),
        Just(json!("2001:db8::1")),
        Just(json!("10.0.0.0/8")),
        Just(json!("0.0.0.0/0")),
        Just(json!("::/0")),
        Just(json!("permanent")),
        Just(json!("5m")),
        Just(json!("-1s")),
        Just(json!("99999999999h")),
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(5)),
        Just(json!(2_147_483_647)),
        Just(json!(-1)),
        Just(json!(2_147_483_648_u64)),
        Just(json!(1e300)),
        Just(json!(null)),
        Just(json!([1, 2])),
        Just(json!({"nested": true})),
        nasty_text(12).prop_map(serde_json::Value::String),
    ]
}

#[test]
fn the_admin_api_answers_any_json_without_a_5xx() {
    let runtime = runtime();
    let concert = runtime.block_on(async {
        let origin = origins::fast_origin();
        let concert = concert_with_env(
            &["-upstream", &origin.url(), "-abuse-allow", "127.0.0.1/32"],
            &[("CONCERT_ADMIN_TOKEN", ADMIN_TOKEN)],
        )
        .await;
        // The origin may go: the admin API never reaches it.
        drop(origin);
        concert
    });
    // The client's timeouts start when a request is built, which needs the runtime.
    let _entered = runtime.enter();
    let client = plain_client();
    let mut runner = runner(128);
    let call = (0..3usize, odd_json(), odd_json(), any::<bool>());
    let result = runner.run(&call, |(kind, first, second, as_object)| {
        let body = if as_object {
            match kind {
                0 => serde_json::json!({"client": first, "duration": second}),
                _ => serde_json::json!({"cap": first}),
            }
        } else {
            first
        };
        let request = match kind {
            0 => client
                .post(url(&concert, "/_room/abuse"))
                .body(body.to_string()),
            1 => client
                .post(url(&concert, "/_room/cap"))
                .body(body.to_string()),
            _ => {
                let target = percent_encoded(&first_text(&body));
                client.delete(url(&concert, &format!("/_room/abuse?client={target}")))
            }
        };
        let status = runtime
            .block_on(request.bearer_auth(ADMIN_TOKEN).send())
            .map(|response| response.status().as_u16());
        match status {
            Ok(code) if code < 500 => Ok(()),
            other => Err(TestCaseError::fail(format!("{other:?} for {kind} {body}"))),
        }
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    runtime.block_on(async {
        let health = client
            .get(url(&concert, "/_room/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        // Whatever was asked, the cap stays a usable number.
        assert!(concert.app.generation().config.cap >= 1);
    });
}

/// The value as the text an unban query would carry.
fn first_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Every byte outside the unreserved set as `%XX`, for a query value.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[test]
fn random_requests_over_http2_never_get_a_5xx_or_leak_a_slot() {
    let runtime = runtime();
    let _entered = runtime.enter();
    let (origin, concert) = runtime.block_on(async {
        let origin = origins::echo_origin();
        // No line limit: a full line's 503 for API clients is an answer, not a failure.
        let concert =
            concert_with_every_stage(&origin.url(), &["-cap", "2", "-max-queue", "0"]).await;
        (origin, concert)
    });
    // Cleartext HTTP/2 by prior knowledge, one multiplexed connection per burst, as one visitor's
    // browser keeps. (Over a single connection, thousands of requests with bodies answered
    // before their bodies are read end in hyper's guard against reset floods: GOAWAY with
    // ENHANCE_YOUR_CALM after 1,024 resets.)
    let h2_client = || {
        reqwest::Client::builder()
            .http2_prior_knowledge()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    let mut runner = runner(32);
    let one = (
        prop_oneof![Just("GET"), Just("POST"), Just("HEAD"), Just("PUT")],
        prop_oneof![
            Just("/"),
            Just("/hooks/"),
            Just("/static/"),
            Just("/events"),
            Just("/queue/status"),
            Just("/metrics")
        ],
        plausible_text(20),
        plausible_text(20),
        proptest::collection::vec(any::<u8>(), 0..64),
        any::<bool>(),
    );
    // A burst of requests at once on the one connection.
    let burst = proptest::collection::vec(one, 1..12);
    let result = runner.run(&burst, |requests| {
        let client = h2_client();
        let statuses = runtime.block_on(async {
            let calls = requests
                .iter()
                .map(|(method, base, tail, cookie, body, html)| {
                    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
                    let accept = if *html {
                        "text/html"
                    } else {
                        "application/json"
                    };
                    let request = client
                        .request(method, url(&concert, &format!("{base}{tail}")))
                        .header("accept", accept)
                        .header(
                            "cookie",
                            format!("room_ticket={cookie}; concert_admit={cookie}"),
                        )
                        .body(body.clone());
                    async move { request.send().await.map(|r| r.status().as_u16()) }
                });
            futures_util::future::join_all(calls).await
        });
        for (status, request) in statuses.iter().zip(&requests) {
            match status {
                Ok(code) if *code < 500 => {}
                other => {
                    return Err(TestCaseError::fail(format!("{other:?} for {request:?}")));
                }
            }
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    runtime.block_on(async {
        assert!(
            room_empties(&concert).await,
            "occupancy {}",
            concert.app.room.stats().occupancy
        );
        assert!(origin.hits() > 0);
    });
}
