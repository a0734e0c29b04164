//! The direct path against scripted origins on real sockets: framing, reuse, retries and
//! deadlines.

use http_body_util::BodyExt as _;
use parking_lot::Mutex;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use bytes::BytesMut;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::*;
use crate::proxy::headers::HeaderSink;
use crate::proxy::pool::{PoolError, PoolLimits};
use crate::proxy::target::Target;
use crate::wire::limits::MAX_RESPONSE_HEAD_BYTES;

const LIMITS: PoolLimits = PoolLimits {
    max_idle: 16,
    idle_timeout: Duration::from_secs(90),
    connect_timeout: Duration::from_secs(5),
    tcp_keepalive: Duration::from_secs(30),
};

/// A raw origin: on each connection it reads request heads and answers the n-th one with
/// `answers[n]`, written in pieces of `piece` bytes; past the script it closes.
struct ScriptedOrigin {
    addr: String,
    accepted: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    /// Heads seen, in order.
    heads: Arc<Mutex<Vec<String>>>,
}

async fn scripted_origin<A>(answers: Vec<A>, piece: usize) -> ScriptedOrigin
where
    A: AsRef<[u8]> + Clone + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = ScriptedOrigin {
        addr: listener.local_addr().unwrap().to_string(),
        accepted: Arc::default(),
        requests: Arc::default(),
        heads: Arc::default(),
    };
    let (accepted, requests, heads) = (
        Arc::clone(&origin.accepted),
        Arc::clone(&origin.requests),
        Arc::clone(&origin.heads),
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            let answers = answers.clone();
            let (requests, heads) = (Arc::clone(&requests), Arc::clone(&heads));
            tokio::spawn(async move {
                for answer in answers {
                    let Some(head) = read_head(&mut stream).await else {
                        return;
                    };
                    requests.fetch_add(1, Ordering::SeqCst);
                    heads.lock().push(head);
                    let answer = answer.as_ref();
                    for part in answer.chunks(piece) {
                        if stream.write_all(part).await.is_err() {
                            return;
                        }
                        if piece < answer.len() {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
            });
        }
    });
    origin
}

async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    String::from_utf8(head).ok()
}

fn get_head() -> Vec<u8> {
    b"GET /x HTTP/1.1\r\nhost: origin\r\n\r\n".to_vec()
}

/// Everything the body yields: the data joined, and the trailers if any.
async fn drain(body: DirectBody) -> Result<(Vec<u8>, Option<HeaderMap>), io::Error> {
    let mut body = std::pin::pin!(body);
    let mut data = Vec::new();
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        match frame.into_data() {
            Ok(bytes) => data.extend_from_slice(&bytes),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    Ok((data, trailers))
}

async fn fetch(
    pool: &Arc<DirectPool>,
    method: Method,
) -> Result<
    (
        StatusCode,
        HeaderMap,
        Result<(Vec<u8>, Option<HeaderMap>), io::Error>,
    ),
    DirectError,
> {
    let head = format!("{method} /x HTTP/1.1\r\nhost: origin\r\n\r\n");
    let answer = pool.send(&method, head.as_bytes(), None).await?;
    let (head, body) = DirectBody::new(answer, pool, None);
    Ok((head.status, head.headers, drain(body).await))
}

/// An answer, the body it carries, and its one trailer if any.
type DecodeCase = (
    &'static [u8],
    &'static [u8],
    Option<(&'static str, &'static str)>,
);

type IsExpected = fn(&DirectError) -> bool;

/// Response lines drawn from names and values that exercise the hop-by-hop rules.
fn response_lines() -> impl proptest::strategy::Strategy<Value = Vec<(&'static str, &'static str)>>
{
    const NAMES: &[&str] = &[
        "Connection",
        "connection",
        "Keep-Alive",
        "Transfer-Encoding",
        "Content-Length",
        "TE",
        "Upgrade",
        "Proxy-Authenticate",
        "Set-Cookie",
        "X-A",
        "x-a",
        "Trailer",
    ];
    const VALUES: &[&str] = &[
        "close",
        "keep-alive",
        "Keep-Alive, X-A",
        "x-a , close",
        "set-cookie",
        "chunked",
        "gzip, chunked",
        "chunked, gzip",
        "5",
        "5, 5",
        "6",
        "Content-Length",
        "transfer-encoding",
        "upgrade",
        "",
    ];
    proptest::collection::vec(
        (
            proptest::sample::select(NAMES),
            proptest::sample::select(VALUES),
        ),
        0..8,
    )
}

proptest::proptest! {
    /// Leaving hop-by-hop headers out while parsing gives what building the whole map and
    /// then stripping it (as the pooled client's answers are) gives.
    #[test]
    fn parsed_heads_match_the_stripped_map(
        lines in response_lines(),
        status in proptest::sample::select(&[200u16, 204, 304, 404][..]),
        head_request: bool,
        http_10: bool,
    ) {
        let mut raw = format!("HTTP/1.{} {status} X\r\n", u8::from(!http_10));
        let mut whole = HeaderMap::new();
        for (name, value) in &lines {
            raw.push_str(&format!("{name}: {value}\r\n"));
            whole.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static(value),
            );
        }
        raw.push_str("\r\n");
        let status = StatusCode::from_u16(status).unwrap();
        let last_coding = whole
            .get_all(header::TRANSFER_ENCODING)
            .iter()
            .next_back()
            .map(HeaderValue::as_bytes);
        let lengths = whole.get_all(header::CONTENT_LENGTH).iter().map(HeaderValue::as_bytes);
        let expected = framing_of(status, head_request, last_coding, lengths);
        let mut buf = BytesMut::from(raw.as_bytes());
        let parsed = parse_head(&mut buf, &mut Vec::new(), &mut KnownNames::default(), head_request);
        let (parsed, expected) = match (parsed, expected) {
            (Err(_), Err(_)) => return Ok(()),
            (Ok(Some(parsed)), Ok(expected)) => (parsed, expected),
            (parsed, expected) => {
                return Err(proptest::test_runner::TestCaseError::fail(format!(
                    "parsed {parsed:?}, expected {expected:?}"
                )))
            }
        };
        let (head, framing, reusable) = parsed;
        let closes = super::super::headers::strip_response(&mut whole, false);
        proptest::prop_assert!(buf.is_empty());
        proptest::prop_assert_eq!(framing, expected.0);
        proptest::prop_assert_eq!(reusable, expected.1 && !closes && !http_10);
        let names: std::collections::BTreeSet<_> =
            head.headers.keys().chain(whole.keys()).map(HeaderName::as_str).collect();
        for name in names {
            let kept: Vec<_> = head.headers.get_all(name).iter().collect();
            let stripped: Vec<_> = whole.get_all(name).iter().collect();
            proptest::prop_assert_eq!(kept, stripped, "{}", name);
        }
    }
}

#[test]
fn framing_follows_rfc_9112() {
    let framing = |status: u16, pairs: &[(&str, &str)], head_request: bool| {
        let values_of = |wanted: &'static str| {
            pairs
                .iter()
                .filter(move |(name, _)| *name == wanted)
                .map(|(_, value)| value.as_bytes())
        };
        let status = StatusCode::from_u16(status).unwrap();
        let last_coding = values_of("transfer-encoding").next_back();
        framing_of(
            status,
            head_request,
            last_coding,
            values_of("content-length"),
        )
    };
    let length = [("content-length", "5")];
    assert_eq!(
        framing(200, &length, true).unwrap(),
        (Framing::Empty, false)
    );
    assert_eq!(framing(204, &[], false).unwrap(), (Framing::Empty, true));
    assert_eq!(
        framing(204, &[("content-length", "0")], false).unwrap(),
        (Framing::Empty, true)
    );
    assert_eq!(
        framing(304, &length, false).unwrap(),
        (Framing::Empty, false)
    );
    assert_eq!(
        framing(204, &[("transfer-encoding", "chunked")], false).unwrap(),
        (Framing::Empty, false)
    );
    assert_eq!(
        framing(200, &length, false).unwrap(),
        (Framing::Length(5), true)
    );
    let repeated = [("content-length", "5, 5"), ("content-length", "5")];
    assert_eq!(
        framing(200, &repeated, false).unwrap(),
        (Framing::Length(5), true)
    );
    for bad in [
        &[("content-length", "5"), ("content-length", "6")][..],
        &[("content-length", "-1")],
        &[("content-length", "0x5")],
        &[("content-length", "99999999999999999999")],
    ] {
        assert!(framing(200, bad, false).is_err(), "{bad:?}");
    }
    let chunked = [("transfer-encoding", "gzip, chunked")];
    assert_eq!(
        framing(200, &chunked, false).unwrap(),
        (Framing::Chunked(Chunk::Size), true)
    );
    let not_last = [("transfer-encoding", "chunked, gzip")];
    assert_eq!(
        framing(200, &not_last, false).unwrap(),
        (Framing::UntilClose, false)
    );
    let both = [("transfer-encoding", "chunked"), ("content-length", "5")];
    let found = framing(200, &both, false).unwrap();
    assert_eq!(found, (Framing::Chunked(Chunk::Size), false));
    assert_eq!(
        framing(200, &[], false).unwrap(),
        (Framing::UntilClose, false)
    );
}

fn target(upstream: &str) -> Target {
    Target::new(&upstream.parse().unwrap()).unwrap()
}

/// The head for `headers` taken as they are.
fn request_head(
    method: &Method,
    target: &Target,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Option<Vec<u8>> {
    let mut head = RequestHead::start(method, target, path_and_query, header_bytes(headers))?;
    for (name, value) in headers {
        head.put(name, value.clone());
    }
    Some(head.finish())
}

#[test]
fn request_target_must_be_visible_ascii() {
    let headers = HeaderMap::new();
    let plain = target("http://origin");
    let head = request_head(&Method::GET, &plain, "/a?b=c", &headers).unwrap();
    assert_eq!(head, b"GET /a?b=c HTTP/1.1\r\n\r\n");
    for bad in ["/a b", "/a\r\nx: y", "/a#frag", "/caf\u{e9}", "/a\u{7f}"] {
        assert!(
            request_head(&Method::GET, &plain, bad, &headers).is_none(),
            "{bad:?}"
        );
    }
}

#[test]
fn request_head_is_one_exact_allocation() {
    let mut headers = HeaderMap::new();
    headers.insert(header::HOST, HeaderValue::from_static("example.test"));
    headers.insert("x-forwarded-for", HeaderValue::from_static("192.0.2.1"));
    for (upstream, path) in [
        ("http://origin", "/"),
        ("http://origin/base?k=v", "/p/q?x=1"),
        ("http://origin/base/", "/p"),
    ] {
        let head = request_head(&Method::OPTIONS, &target(upstream), path, &headers).unwrap();
        // Never regrown: the estimate only over-counts the joining `/`, `?` and `&`.
        let spare = head.capacity() - head.len();
        assert!(spare <= 4, "{upstream} {path}: {spare} bytes spare");
    }
}

#[test]
fn written_head_carries_exactly_the_rewritten_map() {
    use super::super::headers::{RequestFacts, rewrite_request, rewrite_request_into};
    let upstream = HeaderValue::from_static("origin:8080");
    let cases: [&[(&str, &str)]; 4] = [
        &[("host", "shop.test"), ("accept", "*/*")],
        &[
            ("host", "shop.test"),
            ("cookie", "a=1; concert_admit=x"),
            ("cookie", "b=2"),
            ("x-forwarded-for", "198.51.100.7"),
            ("x-forwarded-proto", "https"),
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("accept", "text/html"),
            ("accept", "application/json"),
        ],
        &[
            ("user-agent", "probe"),
            ("forwarded", "for=1.2.3.4"),
            ("x-real-ip", "6.6.6.6"),
            ("cf-connecting-ip", "6.6.6.7"),
        ],
        &[],
    ];
    for (index, pairs) in cases.iter().enumerate() {
        for trusted in [false, true] {
            let mut incoming = HeaderMap::new();
            for (name, value) in pairs.iter() {
                incoming.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            let facts = || RequestFacts {
                peer: Some("192.0.2.10".parse().unwrap()),
                peer_trusted: trusted,
                client: Some(
                    if trusted { "203.0.113.7" } else { "192.0.2.10" }
                        .parse()
                        .unwrap(),
                ),
                via_tls: false,
                upstream_host: &upstream,
                preserve_host: index % 2 == 0,
                uri_authority: None,
                upgrade: None,
            };
            let plain = target("http://origin:8080");
            let mapped = rewrite_request(incoming.clone(), facts());
            let expected = request_head(&Method::GET, &plain, "/x", &mapped).unwrap();
            let mut written = RequestHead::start(&Method::GET, &plain, "/x", 0).unwrap();
            rewrite_request_into(incoming, facts(), &mut written);
            assert_eq!(
                String::from_utf8_lossy(&written.finish()),
                String::from_utf8_lossy(&expected),
                "case {index}, trusted {trusted}"
            );
        }
    }
}

#[tokio::test]
async fn request_head_is_written_as_given() {
    let origin = scripted_origin(vec![b"HTTP/1.1 204 No Content\r\n\r\n"], usize::MAX).await;
    let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
    let mut headers = HeaderMap::new();
    headers.insert(header::HOST, HeaderValue::from_static("example.test"));
    headers.append("x-a", HeaderValue::from_static("1"));
    headers.append("x-a", HeaderValue::from_static("2"));
    let head = request_head(
        &Method::DELETE,
        &target("http://origin"),
        "/p?q=1",
        &headers,
    )
    .unwrap();
    let answer = pool.send(&Method::DELETE, &head, None).await.unwrap();
    assert_eq!(answer.head.status, StatusCode::NO_CONTENT);
    assert_eq!(
        origin.heads.lock()[0],
        "DELETE /p?q=1 HTTP/1.1\r\nhost: example.test\r\nx-a: 1\r\nx-a: 2\r\n\r\n"
    );
}

#[tokio::test]
async fn bodies_decode_however_the_bytes_are_split() {
    let cases: [DecodeCase; 4] = [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world", b"hello world", None),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            b"hello world",
            None,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nb\r\nhello world\r\n0\r\nx-sum: 42\r\n\r\n",
            b"hello world",
            Some(("x-sum", "42")),
        ),
        (
            b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            b"ok",
            None,
        ),
    ];
    for (answer, expected, trailer) in cases {
        for piece in [1, 3, 7, usize::MAX] {
            // The same answer twice on one connection: the second proves the first left
            // the connection exactly at a message boundary.
            let origin = scripted_origin(vec![answer, answer], piece).await;
            let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
            for round in 0..2 {
                let (status, _, body) = fetch(&pool, Method::GET).await.unwrap();
                let (data, trailers) = body.unwrap();
                assert_eq!(status, StatusCode::OK);
                assert_eq!(data, expected, "piece {piece}, round {round}");
                let got = trailers.as_ref().and_then(|map| {
                    map.iter().next().map(|(name, value)| {
                        (name.as_str().to_owned(), value.to_str().unwrap().to_owned())
                    })
                });
                assert_eq!(
                    got,
                    trailer.map(|(name, value)| (name.to_owned(), value.to_owned()))
                );
                assert_eq!(pool.idle_count(), 1, "reused after a complete body");
            }
            assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
        }
    }
}

/// A response carrying `body`, framed by length or as chunks of the given sizes (hex
/// digits in either case, zero-padded, with extensions and a trailer when asked).
fn framed_answer(body: &[u8], chunking: &Option<ChunkStyle>) -> Vec<u8> {
    let Some(style) = chunking else {
        let mut out =
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
        out.extend_from_slice(body);
        return out;
    };
    let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    let mut rest = body;
    for (index, size) in style.sizes.iter().cycle().enumerate() {
        if rest.is_empty() {
            break;
        }
        let size = (*size).clamp(1, rest.len());
        let hex = format!("{:0width$x}", size, width = style.pad);
        let hex = if index % 2 == 1 && style.upper {
            hex.to_uppercase()
        } else {
            hex
        };
        out.extend_from_slice(hex.as_bytes());
        if style.extensions {
            out.extend_from_slice(b";name=\"v;1\"");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&rest[..size]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[size..];
    }
    out.extend_from_slice(b"0\r\n");
    if style.trailer {
        out.extend_from_slice(b"x-check: done\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[derive(Debug, Clone)]
struct ChunkStyle {
    sizes: Vec<usize>,
    pad: usize,
    upper: bool,
    extensions: bool,
    trailer: bool,
}

fn chunk_style() -> impl proptest::strategy::Strategy<Value = Option<ChunkStyle>> {
    use proptest::prelude::*;
    proptest::option::of(
        (
            proptest::collection::vec(1usize..700, 1..6),
            1usize..5,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(sizes, pad, upper, extensions, trailer)| ChunkStyle {
                sizes,
                pad,
                upper,
                extensions,
                trailer,
            }),
    )
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 48,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]

    /// Any body, framed either way, cut into pieces of any size, comes out whole, twice
    /// over one connection (so the first left it exactly at the message boundary).
    #[test]
    fn any_framed_body_decodes_whole_however_it_arrives(
        body in proptest::prop_oneof![
            proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
            proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2500),
        ],
        chunking in chunk_style(),
        // The origin pauses between pieces, so their number (not their size) is bounded.
        pieces in 1usize..40,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let answer = Arc::<[u8]>::from(framed_answer(&body, &chunking));
            let piece = answer.len().div_ceil(pieces);
            let origin = scripted_origin(vec![answer.clone(), answer], piece).await;
            let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
            for round in 0..2 {
                let (status, _, decoded) = fetch(&pool, Method::GET).await.unwrap();
                let (data, trailers) = decoded.unwrap();
                assert_eq!(status, StatusCode::OK);
                assert!(data == body, "round {round}: {} bytes, not {}", data.len(), body.len());
                let wants_trailer = chunking.as_ref().is_some_and(|style| style.trailer);
                assert_eq!(
                    trailers.is_some_and(|map| map.get("x-check").is_some()),
                    wants_trailer
                );
            }
            assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
        });
    }
}

#[tokio::test]
async fn body_until_close_is_read_whole_and_not_reused() {
    let origin = scripted_origin(vec![b"HTTP/1.0 200 OK\r\n\r\nall of it"], 4).await;
    let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
    let (status, _, body) = fetch(&pool, Method::GET).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.unwrap().0, b"all of it");
    assert_eq!(pool.idle_count(), 0);
}

#[tokio::test]
async fn head_answers_have_no_body_and_leave_their_connection_unused() {
    let origin = scripted_origin(
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n"],
        usize::MAX,
    )
    .await;
    let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
    for round in 1..=2 {
        let (_, headers, body) = fetch(&pool, Method::HEAD).await.unwrap();
        assert_eq!(headers[header::CONTENT_LENGTH], "100");
        assert!(body.unwrap().0.is_empty());
        // The announced body may still come; the connection is closed rather than pooled.
        assert_eq!(pool.idle_count(), 0);
        assert_eq!(origin.accepted.load(Ordering::SeqCst), round);
    }
}

#[tokio::test]
async fn broken_answers_are_errors_not_guesses() {
    let big: &'static [u8] = Box::leak(
        [
            &b"HTTP/1.1 200 OK\r\nx-big: "[..],
            &vec![b'a'; MAX_RESPONSE_HEAD_BYTES],
            b"\r\n\r\n",
        ]
        .concat()
        .into_boxed_slice(),
    );
    let cases: [(&'static [u8], IsExpected); 5] = [
        (
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
            |err| matches!(err, DirectError::Invalid(_)),
        ),
        (b"SSH-2.0-OpenSSH\r\n\r\n", |err| {
            matches!(err, DirectError::Parse(_))
        }),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nx",
            |err| matches!(err, DirectError::Invalid(_)),
        ),
        (b"HTTP/1.1 200 OK\r\ncontent-", |err| {
            matches!(err, DirectError::ClosedInHead)
        }),
        (big, |err| matches!(err, DirectError::HeadTooLarge)),
    ];
    for (answer, expected) in cases {
        let origin = scripted_origin(vec![answer], usize::MAX).await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
        match fetch(&pool, Method::GET).await {
            Err(err) => assert!(expected(&err), "{err:?}"),
            Ok((status, ..)) => panic!("accepted as {status}"),
        }
    }
}

#[test]
fn answers_outside_http_are_refused_and_listed_lengths_pass_as_one() {
    let parse = |raw: &[u8]| {
        parse_head(
            &mut BytesMut::from(raw),
            &mut Vec::new(),
            &mut KnownNames::default(),
            false,
        )
    };
    for code in ["600", "999"] {
        let raw = format!("HTTP/1.1 {code} Odd\r\ncontent-length: 0\r\n\r\n");
        assert!(
            matches!(parse(raw.as_bytes()), Err(DirectError::Invalid(_))),
            "{code}"
        );
    }
    // A head over the limit that arrived whole, as one large read brings it.
    let mut big = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
    big.resize(MAX_RESPONSE_HEAD_BYTES + 10, b'a');
    big.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
    assert!(matches!(parse(&big), Err(DirectError::HeadTooLarge)));
    let mut at_limit = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
    at_limit.resize(MAX_RESPONSE_HEAD_BYTES - 4, b'a');
    at_limit.extend_from_slice(b"\r\n\r\n");
    assert_eq!(at_limit.len(), MAX_RESPONSE_HEAD_BYTES);
    assert!(matches!(parse(&at_limit), Ok(Some(_))));

    for raw in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 5 ,5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-other: 1\r\ncontent-length: 5,5\r\n\r\n",
    ] {
        let Ok(Some((head, framing, _))) = parse(raw) else {
            panic!("{}", String::from_utf8_lossy(raw));
        };
        assert_eq!(framing, Framing::Length(5));
        let lengths: Vec<_> = head
            .headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .collect();
        assert_eq!(lengths, ["5"], "{}", String::from_utf8_lossy(raw));
    }
}

#[tokio::test]
async fn bodies_cut_short_are_errors_and_close_the_connection() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"[..],
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    ] {
        let answer: &'static [u8] = Box::leak(answer.to_vec().into_boxed_slice());
        let origin = scripted_origin(vec![answer], usize::MAX).await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
        let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
        assert!(body.is_err(), "{}", String::from_utf8_lossy(answer));
        assert_eq!(pool.idle_count(), 0);
    }
}

#[tokio::test]
async fn trailing_bytes_after_a_body_retire_the_connection() {
    let origin = scripted_origin(
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA"],
        usize::MAX,
    )
    .await;
    let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
    let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
    assert_eq!(body.unwrap().0, b"ok");
    assert_eq!(pool.idle_count(), 0);
}

#[tokio::test]
async fn idempotent_requests_are_retried_once_on_a_fresh_connection() {
    // Each connection answers one request, then reads the next and hangs up without a
    // word: the race between a request and an origin's keep-alive timeout.
    let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let hang_up: &'static [u8] = b"";
    let origin = scripted_origin(vec![ok, hang_up], usize::MAX).await;
    let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
    let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
    assert_eq!(body.unwrap().0, b"ok");
    let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
    assert_eq!(body.unwrap().0, b"ok");
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(origin.requests.load(Ordering::SeqCst), 3);

    // The same race for a POST: the origin may have acted on it, so it is not repeated.
    let failed = fetch(&pool, Method::POST).await;
    assert!(
        matches!(failed, Err(DirectError::Closed)),
        "{:?}",
        failed.err()
    );
    assert_eq!(origin.requests.load(Ordering::SeqCst), 4);
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_origin_that_began_to_answer_is_never_asked_again() {
    // The second request on the connection gets an interim answer, then the origin hangs
    // up: it has seen the request, so even a GET is not repeated.
    let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let interim_then_gone: &'static [u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
    let origin = scripted_origin(vec![ok, interim_then_gone], usize::MAX).await;
    let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
    let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
    assert_eq!(body.unwrap().0, b"ok");
    let failed = fetch(&pool, Method::GET).await;
    assert!(
        matches!(failed, Err(DirectError::ClosedInHead)),
        "{:?}",
        failed.err()
    );
    assert_eq!(origin.requests.load(Ordering::SeqCst), 2);
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn connections_closed_while_idle_are_skipped_without_sending() {
    let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let origin = scripted_origin(vec![ok], usize::MAX).await;
    let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS, Arc::default()));
    for round in 1..=4 {
        // A POST cannot be repeated, so it checks with the kernel; a GET trusts what the
        // runtime has seen of the socket (and would be retried if that were stale).
        let (method, thorough) = if round % 2 == 0 {
            (Method::POST, true)
        } else {
            (Method::GET, false)
        };
        let (_, _, body) = fetch(&pool, method).await.unwrap();
        assert_eq!(body.unwrap().0, b"ok");
        // The origin closes after its one answer; once that is visible, the idle
        // connection is passed over and the next request goes to a new one.
        for _ in 0..300 {
            if pool.idle_open_count(thorough) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(pool.idle_open_count(thorough), 0, "round {round}");
        assert_eq!(origin.accepted.load(Ordering::SeqCst), round);
    }
    assert_eq!(origin.requests.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn the_response_deadline_holds_on_a_connection_reused_after_its_timer_fired() {
    const LIMIT: Duration = Duration::from_millis(300);
    // Answers three requests, then takes the fourth and never answers it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                for _ in 0..3 {
                    read_head(&mut stream).await.unwrap();
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    stream.write_all(ok).await.unwrap();
                }
                let _ = read_head(&mut stream).await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
    });
    let pool = Arc::new(DirectPool::new(&addr, LIMITS, Arc::default()));
    let send = |pool: Arc<DirectPool>| async move {
        let started = Instant::now();
        let sent = pool
            .send(&Method::GET, &get_head(), Some(started + LIMIT))
            .await;
        let answer = match sent {
            Ok(answer) => {
                let (head, body) = DirectBody::new(answer, &pool, None);
                assert_eq!(drain(body).await.unwrap().0, b"ok");
                Ok(head.status)
            }
            Err(err) => Err(err),
        };
        (answer, started.elapsed())
    };
    let (first, _) = send(Arc::clone(&pool)).await;
    assert_eq!(first.unwrap(), StatusCode::OK);
    // Idle in the pool past its deadline: the connection's timer fires meanwhile, and the
    // next request must arm it again rather than find it already passed.
    tokio::time::sleep(LIMIT + Duration::from_millis(200)).await;
    for _ in 0..2 {
        let (answer, took) = send(Arc::clone(&pool)).await;
        assert_eq!(answer.unwrap(), StatusCode::OK, "answered after {took:?}");
    }
    let (stalled, took) = send(Arc::clone(&pool)).await;
    assert!(matches!(stalled, Err(DirectError::TimedOut)), "{stalled:?}");
    assert!(took >= LIMIT, "gave up after {took:?}");
    assert!(took < LIMIT * 5, "gave up after {took:?}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "every request on one connection"
    );
    assert_eq!(
        pool.idle_count(),
        0,
        "the connection that timed out is not kept"
    );
}

proptest::proptest! {
    #[test]
    fn known_names_give_what_parsing_gives_however_the_names_change(
        responses in proptest::collection::vec(
            proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("Content-Length".to_owned()),
                    proptest::strategy::Just("content-length".to_owned()),
                    proptest::strategy::Just("Date".to_owned()),
                    proptest::strategy::Just("X-Custom".to_owned()),
                    proptest::strategy::Just("bad name".to_owned()),
                    "[A-Za-z-]{1,80}",
                ],
                0..40,
            ),
            1..6,
        ),
    ) {
        let mut names = KnownNames::default();
        for response in &responses {
            for (index, raw) in response.iter().enumerate() {
                let known = names.name(index, raw.as_bytes());
                proptest::prop_assert_eq!(known, HeaderName::from_bytes(raw.as_bytes()).ok());
            }
        }
        proptest::prop_assert!(names.0.len() <= KnownNames::KEPT);
        proptest::prop_assert!(names.0.iter().all(|(raw, _)| raw.len() <= KnownNames::KEPT_LENGTH));
    }
}

#[tokio::test]
async fn refused_connection_is_an_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let pool = DirectPool::new(&addr, LIMITS, Arc::default());
    assert!(matches!(
        pool.send(&Method::GET, &get_head(), None).await,
        Err(DirectError::Connect(PoolError::Connect { .. }))
    ));
}
