use std::convert::Infallible;

use axum::body::Body;
use http::Response;
use hyper::body::Body as _;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

#[test]
fn dates_are_written_as_http_dates() {
    for (seconds, expected) in [
        (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
        (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (951_782_400, "Tue, 29 Feb 2000 00:00:00 GMT"),
        (1_796_653_560, "Mon, 07 Dec 2026 14:26:00 GMT"),
        (4_107_628_799, "Mon, 01 Mar 2100 23:59:59 GMT"),
    ] {
        assert_eq!(std::str::from_utf8(&http_date(seconds)).unwrap(), expected);
    }
}

#[test]
fn chunk_size_lines_are_lowercase_hex() {
    let mut line = [0u8; 18];
    assert_eq!(chunk_size_line(0, &mut line), b"0\r\n");
    assert_eq!(chunk_size_line(1024, &mut line), b"400\r\n");
    assert_eq!(chunk_size_line(0xabc_def, &mut line), b"abcdef\r\n");
    assert_eq!(
        chunk_size_line(usize::MAX, &mut line),
        b"ffffffffffffffff\r\n"
    );
}

fn read(bytes: &[u8]) -> (Head, BytesMut) {
    let mut buf = BytesMut::from(bytes);
    let mut names = Vec::new();
    let head = read_head(&mut buf, &mut names);
    (head, buf)
}

fn plain_request(bytes: &[u8]) -> Request<()> {
    match read(bytes).0 {
        Head::Plain { request, .. } => request,
        _ => panic!("not read as a plain request"),
    }
}

#[test]
fn a_request_takes_the_map_an_answer_left_and_never_a_map_still_holding_headers() {
    let roomy = HeaderMap::with_capacity(40);
    let room = roomy.capacity();
    keep_spare_map(roomy);
    let request = plain_request(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert!(request.headers().capacity() >= room);
    assert_eq!(request.headers().len(), 1);

    let mut not_emptied = HeaderMap::new();
    not_emptied.insert("x-from-the-origin", HeaderValue::from_static("secret"));
    keep_spare_map(not_emptied);
    let request = plain_request(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert!(!request.headers().contains_key("x-from-the-origin"));
    assert_eq!(request.headers().len(), 1);
}

#[test]
fn a_plain_get_is_read_and_what_follows_it_is_left() {
    let (head, rest) = read(
        b"\r\nGET /a/b?c=d HTTP/1.1\r\nHost: example.test\r\nX-Thing: one\r\nx-thing: two\r\nConnection: keep-alive\r\n\r\nGET /next",
    );
    let Head::Plain {
        request,
        keep_alive,
    } = head
    else {
        panic!("not read as plain");
    };
    assert!(keep_alive);
    assert_eq!(request.method(), Method::GET);
    assert_eq!(request.uri(), "/a/b?c=d");
    assert_eq!(request.version(), Version::HTTP_11);
    assert_eq!(request.headers()["host"], "example.test");
    let things: Vec<_> = request.headers().get_all("x-thing").iter().collect();
    assert_eq!(things, ["one", "two"]);
    assert_eq!(&rest[..], b"GET /next");
}

#[test]
fn connection_close_is_kept_and_an_unfinished_head_waits() {
    let (head, _) = read(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n");
    assert!(matches!(
        head,
        Head::Plain {
            keep_alive: false,
            ..
        }
    ));
    let (head, rest) = read(b"GET / HTTP/1.1\r\nHost: a\r\n");
    assert!(matches!(head, Head::Partial));
    assert_eq!(rest.len(), 25);
}

#[test]
fn anything_but_a_plain_get_is_left_to_hyper_untouched() {
    let others: [&[u8]; 14] = [
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx",
        b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, x-secret\r\n\r\n",
        b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
        b"GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
    ];
    for bytes in others {
        let (head, rest) = read(bytes);
        assert!(
            matches!(head, Head::Other(None)),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
        assert_eq!(&rest[..], bytes, "consumed bytes");
    }
}

#[test]
fn too_many_headers_are_left_to_hyper() {
    let mut bytes = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        bytes.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
    }
    bytes.extend_from_slice(b"\r\n");
    assert!(matches!(read(&bytes).0, Head::Other(None)));
}

/// The head hyper's own server writes for `response` to a `GET` (the `date` line left out).
async fn hyper_head(response: fn() -> Response<Body>, close: bool) -> String {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let service =
        hyper::service::service_fn(move |_req| async move { Ok::<_, Infallible>(response()) });
    let serving = tokio::spawn(
        hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .serve_connection(TokioIo::new(server), service),
    );
    let request = if close {
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    } else {
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    };
    client.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        got.push(byte[0]);
    }
    drop(client);
    let _ = serving.await;
    without_date(&got)
}

/// Our head for `response`, and how its body is framed.
fn our_head(response: Response<Body>, keep_alive: bool) -> (String, Written) {
    let (mut parts, body) = response.into_parts();
    let length = if body.is_end_stream() {
        BodyLength::Empty
    } else {
        match body.size_hint().exact() {
            Some(length) => BodyLength::Known(length),
            None => BodyLength::Unknown,
        }
    };
    let mut out = Vec::new();
    let written = write_response_head(
        parts.status,
        parts.version,
        &mut parts.headers,
        length,
        keep_alive,
        &mut out,
    )
    .unwrap();
    assert!(parts.headers.is_empty());
    (without_date(&out), written)
}

fn without_date(head: &[u8]) -> String {
    let text = String::from_utf8(head.to_vec()).unwrap();
    let dates = text
        .lines()
        .filter(|line| line.starts_with("date: "))
        .count();
    assert_eq!(dates, 1, "{text}");
    text.split("\r\n")
        .filter(|line| !line.starts_with("date: "))
        .collect::<Vec<_>>()
        .join("\r\n")
}

fn unknown_length() -> Body {
    Body::from_stream(futures_util::stream::iter([Ok::<_, Infallible>(
        bytes::Bytes::from_static(b"abc"),
    )]))
}

/// An answer, made afresh for each side, and how its body must be framed.
type Case = (fn() -> Response<Body>, BodyFraming);

#[tokio::test]
async fn heads_are_written_as_hyper_writes_them() {
    let responses: [Case; 12] = [
        (
            || Response::new(Body::from("hello")),
            BodyFraming::Length(5),
        ),
        (|| Response::new(Body::empty()), BodyFraming::Length(0)),
        (
            || {
                Response::builder()
                    .status(404)
                    .header("content-type", "text/plain")
                    .header("set-cookie", "a=1")
                    .header("set-cookie", "b=2")
                    .body(Body::from("nope"))
                    .unwrap()
            },
            BodyFraming::Length(4),
        ),
        (
            || {
                Response::builder()
                    .header("content-length", "3")
                    .body(Body::from("abc"))
                    .unwrap()
            },
            BodyFraming::Length(3),
        ),
        (
            || {
                Response::builder()
                    .header("content-length", "3")
                    .body(unknown_length())
                    .unwrap()
            },
            BodyFraming::Length(3),
        ),
        (
            || Response::new(unknown_length()),
            BodyFraming::Chunked(None),
        ),
        (
            || {
                Response::builder()
                    .header("transfer-encoding", "gzip")
                    .body(unknown_length())
                    .unwrap()
            },
            BodyFraming::Chunked(None),
        ),
        (
            || {
                Response::builder()
                    .header("trailer", "x-sum")
                    .body(unknown_length())
                    .unwrap()
            },
            BodyFraming::Chunked(Some(vec![HeaderName::from_static("x-sum")])),
        ),
        (
            || {
                Response::builder()
                    .status(204)
                    .header("content-length", "0")
                    .body(Body::empty())
                    .unwrap()
            },
            BodyFraming::Length(0),
        ),
        (
            || {
                Response::builder()
                    .status(304)
                    .header("etag", "\"x\"")
                    .body(Body::empty())
                    .unwrap()
            },
            BodyFraming::Length(0),
        ),
        (
            || {
                Response::builder()
                    .header("connection", "close")
                    .header("x-after", "1")
                    .body(Body::from("x"))
                    .unwrap()
            },
            BodyFraming::Length(1),
        ),
        (
            || {
                Response::builder()
                    .status(599)
                    .body(Body::from("x"))
                    .unwrap()
            },
            BodyFraming::Length(1),
        ),
    ];
    for (index, (response, framing)) in responses.into_iter().enumerate() {
        for close in [false, true] {
            let (ours, written) = our_head(response(), !close);
            if index == 6 && close {
                // hyper adds `chunked` to whatever header line follows a coding list that
                // lacked it, here `Connection`; only the coding list gets it here.
                assert_eq!(
                    ours,
                    "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\nconnection: close\r\n\r\n"
                );
                assert!(written.last);
                continue;
            }
            let expected = hyper_head(response, close).await;
            assert_eq!(ours, expected, "response {index}, close {close}");
            assert_eq!(written.framing, framing, "response {index}");
            let says_close = expected.contains("connection: close");
            assert_eq!(written.last, says_close, "response {index}, close {close}");
        }
    }
}
