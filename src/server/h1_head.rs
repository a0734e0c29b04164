//! Request heads read and response heads written by the plain HTTP/1 loop ([`super::h1_loop`]).
//!
//! The loop serves only requests it can read exactly as hyper would; for anything else
//! [`read_head`] says [`Head::Other`] without consuming a byte, and hyper serves the rest of the
//! connection from there. Responses are written by hyper's rules for a `GET` on HTTP/1.1
//! (`Content-Length` from the body when it knows its size, `chunked` when it does not, no body for
//! 204 and 304, `Connection: close` when the connection ends, a cached `Date`), so a client
//! cannot tell which of the two answered.

use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};

use crate::wire::codec::parse_decimal;
use crate::wire::limits::MAX_HEADERS;

/// Longest request target hyper takes; a longer one gets its 414.
const MAX_URI_LEN: usize = u16::MAX as usize - 1;

/// What the front of the read buffer holds.
pub(super) enum Head {
    /// A `GET` without a body the loop serves itself, its head taken off the buffer.
    Plain {
        request: Request<()>,
        /// The client did not ask to close after this exchange.
        keep_alive: bool,
    },
    /// The head is not complete yet.
    Partial,
    /// Anything else (another method, a body, an upgrade, `Expect`, HTTP/1.0, HTTP/2, bytes
    /// hyper refuses): hyper answers it. The bytes already taken off the buffer, if any, come
    /// first.
    Other(Option<Bytes>),
}

/// Header maps emptied by writing an answer's head, kept for the worker's next requests, newest
/// last. Kept per worker rather than per connection: the next request on this worker (on any
/// connection) takes the map written last, whose memory is still in the cache, where one kept
/// by each connection would have gone cold while the worker served the other connections.
const SPARE_MAPS_KEPT: usize = 8;

thread_local! {
    static SPARE_MAPS: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// An empty header map for a request: the worker's newest spare one, or a new one.
fn spare_map() -> HeaderMap {
    SPARE_MAPS.with_borrow_mut(Vec::pop).unwrap_or_default()
}

/// Keeps `map`, emptied by [`write_response_head`], for a later request on this worker. A map
/// that still holds anything is dropped: an answer's headers must never reach a request.
pub(super) fn keep_spare_map(map: HeaderMap) {
    if !map.is_empty() {
        return;
    }
    SPARE_MAPS.with_borrow_mut(|maps| {
        if maps.len() < SPARE_MAPS_KEPT {
            maps.push(map);
        }
    });
}

/// Reads a request head at the front of `buf`. `names` is scratch space kept by the
/// connection; the request's header map is a spare one left from an earlier answer.
pub(super) fn read_head(buf: &mut BytesMut, names: &mut Vec<(HeaderName, usize, usize)>) -> Head {
    names.clear();
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut []);
    let base = buf.as_ptr() as usize;
    let length = match parsed.parse_with_uninit_headers(buf, &mut raw) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Other(None),
    };
    if parsed.method != Some("GET") || parsed.version != Some(1) {
        return Head::Other(None);
    }
    let Some(path) = parsed.path else {
        return Head::Other(None);
    };
    // Origin form only: an absolute or asterisk target goes through hyper's own reading.
    if !path.starts_with('/') || path.len() > MAX_URI_LEN {
        return Head::Other(None);
    }
    let path_at = path.as_ptr() as usize - base;
    let path_range = path_at..path_at + path.len();
    let mut keep_alive = true;
    for field in parsed.headers.iter() {
        let name = field.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"upgrade")
        {
            return Head::Other(None);
        }
        if name.eq_ignore_ascii_case(b"connection") {
            match connection_token(field.value) {
                Some(ConnectionToken::KeepAlive) => {}
                Some(ConnectionToken::Close) => keep_alive = false,
                None => return Head::Other(None),
            }
        }
        let Ok(name) = HeaderName::from_bytes(name) else {
            return Head::Other(None);
        };
        let value_at = field.value.as_ptr() as usize - base;
        names.push((name, value_at, value_at + field.value.len()));
    }
    let head = buf.split_to(length).freeze();
    let Ok(uri) = Uri::from_maybe_shared(head.slice(path_range)) else {
        return Head::Other(Some(head));
    };
    let mut headers = spare_map();
    headers.reserve(names.len());
    for (name, start, end) in names.drain(..) {
        match HeaderValue::from_maybe_shared(head.slice(start..end)) {
            Ok(value) => {
                headers.append(name, value);
            }
            Err(_) => return Head::Other(Some(head)),
        }
    }
    let mut request = Request::new(());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Head::Plain {
        request,
        keep_alive,
    }
}

enum ConnectionToken {
    KeepAlive,
    Close,
}

/// A request's `Connection` value when it is a single `keep-alive` or `close`; anything else
/// (an upgrade, a list of hop-by-hop names) is left to hyper.
fn connection_token(value: &[u8]) -> Option<ConnectionToken> {
    let token = value.trim_ascii();
    if token.eq_ignore_ascii_case(b"keep-alive") {
        Some(ConnectionToken::KeepAlive)
    } else if token.eq_ignore_ascii_case(b"close") {
        Some(ConnectionToken::Close)
    } else {
        None
    }
}

/// How much of a response body the body's own hints announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyLength {
    /// The body has already ended.
    Empty,
    Known(u64),
    Unknown,
}

/// How the body after a written head is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BodyFraming {
    /// This many bytes (0: the body is not sent at all).
    Length(u64),
    /// `chunked`, with the trailer fields the head announced.
    Chunked(Option<Vec<HeaderName>>),
    /// Until the connection closes (an HTTP/1.0 answer of unknown length).
    UntilClose,
}

/// A response head written out: how its body follows, and whether the connection ends after it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Written {
    pub framing: BodyFraming,
    pub last: bool,
}

/// The response's headers could not be written (disagreeing or invalid lengths): hyper drops
/// the connection without an answer.
#[derive(Debug)]
pub(super) struct InvalidHead;

/// Writes the head of the answer to a `GET` into `dst` (empty); the header map is left empty,
/// its room kept for the next request. `keep_alive`: the connection may take another request.
pub(super) fn write_response_head(
    status: StatusCode,
    version: Version,
    headers: &mut HeaderMap,
    body: BodyLength,
    keep_alive: bool,
    dst: &mut Vec<u8>,
) -> Result<Written, InvalidHead> {
    if !keep_alive {
        mark_close(headers);
    }
    let mut last = !keep_alive;
    let (status, body) = if status == StatusCode::SWITCHING_PROTOCOLS {
        last = true;
        (status, body)
    } else if status.is_informational() {
        // hyper cannot send an interim answer as the response: it answers 500 and closes.
        headers.clear();
        last = true;
        (StatusCode::INTERNAL_SERVER_ERROR, BodyLength::Empty)
    } else {
        (status, body)
    };
    let http10 = version == Version::HTTP_10;
    if status == StatusCode::OK && !http10 {
        dst.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        dst.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
        dst.extend_from_slice(status.as_str().as_bytes());
        dst.push(b' ');
        dst.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    let informational = status.is_informational();
    let bodiless =
        informational || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
    let can_chunk = !http10 && !bodiless;

    let mut framing = BodyFraming::Length(0);
    let mut wrote_length = false;
    let mut wrote_date = false;
    let mut length_seen: Option<u64> = None;
    let mut trailers: Option<Vec<HeaderName>> = None;
    // A header of the joined kinds (length, codings, connection, trailer) is open on its line.
    let mut open: Option<HeaderName> = None;
    let mut must_add_chunked = false;
    let mut current: Option<HeaderName> = None;
    for (name, value) in headers.drain() {
        if let Some(name) = name {
            close_line(dst, &mut open, must_add_chunked);
            current = Some(name);
        }
        let Some(name) = current.as_ref() else {
            continue;
        };
        let joined_here = open.as_ref() == Some(name);
        match *name {
            header::CONTENT_LENGTH => {
                if wrote_length && !joined_here {
                    return Err(InvalidHead);
                }
                match body {
                    BodyLength::Known(known) => {
                        if !joined_here {
                            framing = BodyFraming::Length(known);
                            open_line(dst, &mut open, name, &value);
                            wrote_length = true;
                        }
                        continue;
                    }
                    BodyLength::Unknown => {
                        let Some(length) = parse_decimal(value.as_bytes()) else {
                            return Err(InvalidHead);
                        };
                        match length_seen {
                            Some(seen) if seen != length => return Err(InvalidHead),
                            Some(_) => {}
                            None => {
                                framing = BodyFraming::Length(length);
                                open_line(dst, &mut open, name, &value);
                                wrote_length = true;
                                length_seen = Some(length);
                            }
                        }
                        continue;
                    }
                    // No body to send: the length is left out and `0` written below.
                    BodyLength::Empty => continue,
                }
            }
            header::TRANSFER_ENCODING => {
                if wrote_length && !joined_here {
                    return Err(InvalidHead);
                }
                if !can_chunk {
                    continue;
                }
                wrote_length = true;
                must_add_chunked = !ends_with_chunked(&value);
                if joined_here {
                    append_item(dst, &value);
                } else {
                    framing = BodyFraming::Chunked(None);
                    open_line(dst, &mut open, name, &value);
                }
                continue;
            }
            header::CONNECTION => {
                if has_token(&value, "close") {
                    last = true;
                }
                if joined_here {
                    append_item(dst, &value);
                } else {
                    open_line(dst, &mut open, name, &value);
                }
                continue;
            }
            header::TRAILER => {
                if !can_chunk {
                    continue;
                }
                if joined_here {
                    append_item(dst, &value);
                } else {
                    open_line(dst, &mut open, name, &value);
                }
                if let Ok(listed) = value.to_str() {
                    trailers.get_or_insert_with(Vec::new).extend(
                        listed
                            .split(',')
                            .filter_map(|item| HeaderName::from_bytes(item.trim().as_bytes()).ok()),
                    );
                }
                continue;
            }
            header::DATE => wrote_date = true,
            _ => {}
        }
        dst.extend_from_slice(name.as_str().as_bytes());
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    close_line(dst, &mut open, must_add_chunked);

    if !wrote_length {
        framing = match body {
            BodyLength::Unknown if can_chunk => {
                dst.extend_from_slice(b"transfer-encoding: chunked\r\n");
                BodyFraming::Chunked(None)
            }
            BodyLength::Unknown => BodyFraming::UntilClose,
            BodyLength::Empty | BodyLength::Known(0) => {
                if !bodiless {
                    dst.extend_from_slice(b"content-length: 0\r\n");
                }
                BodyFraming::Length(0)
            }
            BodyLength::Known(length) => {
                if !bodiless {
                    dst.extend_from_slice(b"content-length: ");
                    dst.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
                    dst.extend_from_slice(b"\r\n");
                }
                BodyFraming::Length(length)
            }
        };
    }
    if bodiless {
        framing = BodyFraming::Length(0);
    }
    if let BodyFraming::Chunked(allowed) = &mut framing {
        *allowed = trailers;
    }
    if framing == BodyFraming::UntilClose {
        last = true;
    }
    if !wrote_date {
        dst.extend_from_slice(b"date: ");
        append_date(dst);
        dst.extend_from_slice(b"\r\n");
    }
    dst.extend_from_slice(b"\r\n");
    Ok(Written { framing, last })
}

/// Adds `close` to the answer's `Connection` unless it is there.
fn mark_close(headers: &mut HeaderMap) {
    match headers.entry(header::CONNECTION) {
        header::Entry::Occupied(mut entry) => {
            if !entry.iter().any(|value| has_token(value, "close")) {
                entry.append(HeaderValue::from_static("close"));
            }
        }
        header::Entry::Vacant(entry) => {
            entry.insert(HeaderValue::from_static("close"));
        }
    }
}

fn open_line(
    dst: &mut Vec<u8>,
    open: &mut Option<HeaderName>,
    name: &HeaderName,
    value: &HeaderValue,
) {
    dst.extend_from_slice(name.as_str().as_bytes());
    dst.extend_from_slice(b": ");
    dst.extend_from_slice(value.as_bytes());
    *open = Some(name.clone());
}

fn append_item(dst: &mut Vec<u8>, value: &HeaderValue) {
    dst.extend_from_slice(b", ");
    dst.extend_from_slice(value.as_bytes());
}

/// Ends a joined header's line; a coding list that does not end in `chunked` gets it added.
fn close_line(dst: &mut Vec<u8>, open: &mut Option<HeaderName>, must_add_chunked: bool) {
    if let Some(name) = open.take() {
        if must_add_chunked && name == header::TRANSFER_ENCODING {
            dst.extend_from_slice(b", chunked\r\n");
        } else {
            dst.extend_from_slice(b"\r\n");
        }
    }
}

/// Whether a comma-separated header value lists `token`.
fn has_token(value: &HeaderValue, token: &str) -> bool {
    value.to_str().is_ok_and(|listed| {
        listed
            .split(',')
            .any(|item| item.trim().eq_ignore_ascii_case(token))
    })
}

fn ends_with_chunked(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|listed| {
        listed
            .rsplit(',')
            .next()
            .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
    })
}

/// The chunk-size line for `length` bytes of data.
pub(super) fn chunk_size_line(length: usize, line: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut count = 0;
    let mut rest = length;
    loop {
        digits[count] = HEX[rest & 0xf];
        count += 1;
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    for (slot, digit) in line.iter_mut().zip(digits[..count].iter().rev()) {
        *slot = *digit;
    }
    line[count] = b'\r';
    line[count + 1] = b'\n';
    &line[..count + 2]
}

/// The end of a chunked body: the last chunk, the trailer fields the head announced, the
/// final line.
pub(super) fn last_chunk(
    trailers: Option<&HeaderMap>,
    allowed: Option<&[HeaderName]>,
    dst: &mut Vec<u8>,
) {
    dst.extend_from_slice(b"0\r\n");
    if let (Some(trailers), Some(allowed)) = (trailers, allowed) {
        for (name, value) in trailers {
            if allowed.contains(name) {
                dst.extend_from_slice(name.as_str().as_bytes());
                dst.extend_from_slice(b": ");
                dst.extend_from_slice(value.as_bytes());
                dst.extend_from_slice(b"\r\n");
            }
        }
    }
    dst.extend_from_slice(b"\r\n");
}

thread_local! {
    /// The `Date` value for the current second, formatted once per second and worker.
    static DATE: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [0; 29])) };
}

/// Appends the current time as an HTTP date (RFC 9110 §5.6.7), to within a scheduler tick.
fn append_date(dst: &mut Vec<u8>) {
    let now = crate::sys::coarse_clock::unix_seconds();
    let (second, mut text) = DATE.get();
    if second != now {
        text = http_date(now);
        DATE.set((now, text));
    }
    dst.extend_from_slice(&text);
}

/// `seconds` after the Unix epoch as `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date(seconds: u64) -> [u8; 29] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = seconds / 86_400;
    let in_day = seconds % 86_400;
    let (year, month, day) = civil_date(days);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    put_two(&mut out[5..7], day);
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    let year = year.min(9999);
    put_two(&mut out[12..14], year / 100);
    put_two(&mut out[14..16], year % 100);
    put_two(&mut out[17..19], in_day / 3600);
    put_two(&mut out[20..22], in_day / 60 % 60);
    put_two(&mut out[23..25], in_day % 60);
    out
}

fn put_two(slot: &mut [u8], value: u64) {
    slot[0] = b'0' + (value / 10 % 10) as u8;
    slot[1] = b'0' + (value % 10) as u8;
}

/// Year, month (1–12) and day (1–31) of the day `days` after 1970-01-01 (proleptic Gregorian).
fn civil_date(days: u64) -> (u64, u64, u64) {
    // Counted in 400-year eras starting on 0000-03-01, so leap days fall at each year's end.
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
