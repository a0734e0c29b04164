//! Request and response heads on the direct path: the request head written straight into the
//! bytes sent to the origin, and the origin's response head parsed with how its body is framed.

use std::mem::MaybeUninit;

use bytes::{Buf as _, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode, Version};

use super::error::DirectError;
use crate::proxy::headers::{
    HeaderSink, RESPONSE_HOP_BY_HOP, announces_body, first_item_len, list_items,
};
use crate::proxy::target::Target;
use crate::wire::codec::parse_decimal;
use crate::wire::limits::{MAX_HEADERS, MAX_RESPONSE_HEAD_BYTES};

/// Response headers the proxy may add to an origin's answer without regrowing its map.
const RESPONSE_HEADROOM: usize = 4;

/// How the end of a response body is found (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::proxy) enum Framing {
    /// No body: a `HEAD` request, or a 1xx, 204 or 304 answer.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunk),
    /// Everything until the origin closes the connection.
    UntilClose,
}

/// Where a chunked body decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::proxy) enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

/// The first header names of a connection's last response as the origin wrote them, with
/// their parsed form. An origin sends the same names in the same order on every response, and
/// comparing the bytes costs a fraction of parsing a name again.
#[derive(Default)]
pub(super) struct KnownNames(pub(super) Vec<(Box<[u8]>, HeaderName)>);

impl KnownNames {
    /// Names kept, and the longest kept, so an idle connection holds little.
    pub(super) const KEPT: usize = 32;
    pub(super) const KEPT_LENGTH: usize = 64;

    /// The parsed name of header `index`, whose bytes are `raw`; `None` for an invalid name.
    pub(super) fn name(&mut self, index: usize, raw: &[u8]) -> Option<HeaderName> {
        if let Some((known, name)) = self.0.get(index)
            && **known == *raw
        {
            return Some(name.clone());
        }
        let name = HeaderName::from_bytes(raw).ok()?;
        if index < Self::KEPT && raw.len() <= Self::KEPT_LENGTH {
            let entry = (Box::from(raw), name.clone());
            if index < self.0.len() {
                self.0[index] = entry;
            } else if index == self.0.len() {
                self.0.push(entry);
            }
        }
        Some(name)
    }
}

/// Parses a complete response head at the front of the buffer, consuming it. Interim (1xx)
/// answers are skipped; `None` means more bytes are needed.
pub(super) fn parse_head(
    buf: &mut BytesMut,
    spans: &mut Vec<(HeaderName, usize, usize)>,
    names: &mut KnownNames,
    answers_without_body: bool,
) -> Result<Option<(http::response::Parts, Framing, bool)>, DirectError> {
    loop {
        // Left uninitialised: zeroing room for MAX_HEADERS lines on every response cost more
        // than parsing the few an origin sends.
        let mut slots = [const { MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut []);
        let mut config = httparse::ParserConfig::default();
        config.allow_spaces_after_header_name_in_responses(true);
        let len = match config.parse_response_with_uninit_headers(&mut parsed, &*buf, &mut slots) {
            // A read can bring in more than the limit at once: the limit is the head's size,
            // not how much the buffer held when it was last checked.
            Ok(httparse::Status::Complete(len)) if len > MAX_RESPONSE_HEAD_BYTES => {
                return Err(DirectError::HeadTooLarge);
            }
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(err) => return Err(DirectError::Parse(err)),
        };
        // `StatusCode` takes 100..=999, but HTTP ends at 599 (RFC 9110 §15).
        let status = parsed
            .code
            .filter(|code| *code <= 599)
            .and_then(|code| StatusCode::from_u16(code).ok())
            .ok_or(DirectError::Invalid("status code"))?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(DirectError::Invalid(
                "switching protocols without being asked to",
            ));
        }
        if status.is_informational() {
            buf.advance(len);
            if buf.is_empty() {
                return Ok(None);
            }
            continue;
        }
        let version = match parsed.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        let base = buf.as_ptr() as usize;
        spans.clear();
        for (index, line) in parsed.headers.iter().enumerate() {
            let name = names
                .name(index, line.name.as_bytes())
                .ok_or(DirectError::Invalid("header name"))?;
            let start = line.value.as_ptr() as usize - base;
            spans.push((name, start, start + line.value.len()));
        }
        let (found, head_bytes) = (&*spans, &*buf);
        let values_of = |wanted: HeaderName| {
            found
                .iter()
                .filter(move |(name, _, _)| *name == wanted)
                .map(|&(_, start, end)| &head_bytes[start..end])
        };
        let last_coding = values_of(header::TRANSFER_ENCODING).next_back();
        let transfer_coded = last_coding.is_some();
        let (framing, framing_reusable) = framing_of(
            status,
            answers_without_body,
            last_coding,
            values_of(header::CONTENT_LENGTH),
        )?;
        // `keep-alive` and `close` name no header the answer keeps; anything else an origin's
        // `Connection` lists is rare, and only then is each header looked up in it.
        let (mut closes, mut names_more) = (false, false);
        for token in values_of(header::CONNECTION).flat_map(list_items) {
            if token.eq_ignore_ascii_case(b"close") {
                closes = true;
            } else if !token.eq_ignore_ascii_case(b"keep-alive") {
                names_more = true;
            }
        }
        let connection_values: Vec<(usize, usize)> = if names_more {
            spans
                .iter()
                .filter(|(name, _, _)| *name == header::CONNECTION)
                .map(|&(_, start, end)| (start, end))
                .collect()
        } else {
            Vec::new()
        };
        let raw = buf.split_to(len).freeze();
        // Room for what the proxy adds on the way out (the admission pass and priority
        // cookies), so adding them does not regrow the map.
        let mut headers = HeaderMap::with_capacity(spans.len() + RESPONSE_HEADROOM);
        let mut length_kept = false;
        for (name, start, mut end) in spans.drain(..) {
            // Hop-by-hop headers are left out rather than removed afterwards (a removal hashes
            // the name): those RFC 9110 §7.6.1 names, those the origin's `Connection` lists,
            // and a length beside a transfer coding (RFC 9112 §6.3).
            if RESPONSE_HOP_BY_HOP.contains(&name)
                || (transfer_coded && name == header::CONTENT_LENGTH)
                || connection_values
                    .iter()
                    .flat_map(|&(start, end)| list_items(&raw[start..end]))
                    .any(|token| token.eq_ignore_ascii_case(name.as_str().as_bytes()))
            {
                continue;
            }
            if name == header::CONTENT_LENGTH {
                // Repeated or listed lengths agree (the framing checked), but are passed on as
                // one value (RFC 9110 §8.6): a client may read `5, 5` differently.
                if std::mem::replace(&mut length_kept, true) {
                    continue;
                }
                if let Some(len) = first_item_len(&raw[start..end]) {
                    end = start + len;
                }
            }
            let value = HeaderValue::from_maybe_shared(raw.slice(start..end))
                .map_err(|_| DirectError::Invalid("header value"))?;
            headers.append(name, value);
        }
        let (mut head, ()) = http::Response::new(()).into_parts();
        head.status = status;
        head.version = version;
        head.headers = headers;
        // An origin that says it closes, or speaks HTTP/1.0, does not get the connection back.
        let reusable = framing_reusable && !closes && version == Version::HTTP_11;
        return Ok(Some((head, framing, reusable)));
    }
}

/// How the body is delimited, and whether that leaves the connection reusable afterwards.
pub(super) fn framing_of<'h>(
    status: StatusCode,
    answers_without_body: bool,
    last_transfer_coding: Option<&[u8]>,
    mut content_lengths: impl Iterator<Item = &'h [u8]>,
) -> Result<(Framing, bool), DirectError> {
    // The answer to `HEAD` announces the length of a body it must not carry. An origin that
    // sends one anyway, even later, would have it read as the next request's answer, and no
    // check before reuse can rule out bytes still on their way: the connection is closed.
    if answers_without_body {
        return Ok((Framing::Empty, false));
    }
    // 204 and 304 have no body either; framing headers that announce one show a broken origin,
    // whose connection is not trusted again for the same reason.
    if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        let announces_body = announces_body(last_transfer_coding.is_some(), content_lengths);
        return Ok((Framing::Empty, !announces_body));
    }
    if let Some(coding) = last_transfer_coding {
        let chunked = coding
            .rsplit(|&b| b == b',')
            .next()
            .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        // A length next to a transfer coding is ignored, and the message was a smuggling
        // attempt or a broken origin: the connection is not trusted again (RFC 9112 §6.3).
        let had_length = content_lengths.next().is_some();
        return Ok(if chunked {
            (Framing::Chunked(Chunk::Size), !had_length)
        } else {
            (Framing::UntilClose, false)
        });
    }
    let mut length: Option<u64> = None;
    for value in content_lengths {
        for item in value.split(|&b| b == b',') {
            let parsed =
                parse_decimal(item.trim_ascii()).ok_or(DirectError::Invalid("content-length"))?;
            if length.is_some_and(|seen| seen != parsed) {
                return Err(DirectError::Invalid("conflicting content-length values"));
            }
            length = Some(parsed);
        }
    }
    Ok(match length {
        Some(length) => (Framing::Length(length), true),
        None => (Framing::UntilClose, false),
    })
}

/// The head of a bodiless request, written straight into the bytes sent to the origin: the
/// request line when started, then each header as the rewrite passes it, then the blank line.
pub(in crate::proxy) struct RequestHead {
    bytes: Vec<u8>,
}

/// The bytes `headers` take in a request head, each line being `name: value` and CRLF.
pub(in crate::proxy) fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum()
}

impl RequestHead {
    /// Writes the request line. The origin-form target is refused unless it is visible ASCII,
    /// since anything else would end or split the request line. `header_bytes` sizes the
    /// buffer for the headers to come.
    pub(in crate::proxy) fn start(
        method: &Method,
        target: &Target,
        path_and_query: &str,
        header_bytes: usize,
    ) -> Option<RequestHead> {
        const VERSION: &str = " HTTP/1.1\r\n";
        let line_bytes =
            method.as_str().len() + 1 + target.origin_form_len(path_and_query) + VERSION.len();
        let mut line = String::with_capacity(line_bytes + header_bytes + 2);
        line.push_str(method.as_str());
        line.push(' ');
        let target_start = line.len();
        target.push_origin_form(&mut line, path_and_query);
        let written = &line.as_bytes()[target_start..];
        if written.is_empty()
            || !written
                .iter()
                .all(|&b| (0x21..0x7f).contains(&b) && b != b'#')
        {
            return None;
        }
        line.push_str(VERSION);
        Some(RequestHead {
            bytes: line.into_bytes(),
        })
    }

    /// Ends the head with its blank line.
    pub(in crate::proxy) fn finish(mut self) -> Vec<u8> {
        self.bytes.extend_from_slice(b"\r\n");
        self.bytes
    }
}

impl HeaderSink for RequestHead {
    fn put(&mut self, name: &HeaderName, value: HeaderValue) {
        self.put_pieces(name, &[value.as_bytes()]);
    }

    fn put_pieces(&mut self, name: &HeaderName, pieces: &[&[u8]]) {
        self.bytes.extend_from_slice(name.as_str().as_bytes());
        self.bytes.extend_from_slice(b": ");
        for piece in pieces {
            self.bytes.extend_from_slice(piece);
        }
        self.bytes.extend_from_slice(b"\r\n");
    }
}
