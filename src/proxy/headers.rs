//! Header rewriting in both directions: what the origin may see of the client's request and
//! what the client may see of the origin's response.
//!
//! The request side is one pass that moves every kept header into a fresh map (no value is
//! copied), then adds the headers the proxy owns: `Host`, `X-Forwarded-*`, the filtered `Cookie`
//! and `X-Real-IP`, the filtered `Cookie` and, for upgrades, `Connection: upgrade` + `Upgrade`.

use std::io::Write as _;
use std::net::IpAddr;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode};

use crate::admission::cookies::{PRIVATE, cookie_pairs};
use crate::wire::codec::parse_decimal;
use crate::wire::names::{X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO, X_REAL_IP};

/// Concert's own cookies as bytes, as the `Cookie` line is read.
const PRIVATE_COOKIES: [&[u8]; PRIVATE.len()] = {
    let mut names: [&[u8]; PRIVATE.len()] = [b""; PRIVATE.len()];
    let mut index = 0;
    while index < PRIVATE.len() {
        names[index] = PRIVATE[index].as_bytes();
        index += 1;
    }
    names
};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

const UPGRADE_TOKEN: &str = "upgrade";
const TRAILERS_TOKEN: &str = "trailers";
const CLOSE_TOKEN: &str = "close";

/// What happens to one incoming request header.
enum Disposition {
    Keep,
    Drop,
    Host,
    Cookie,
    ForwardedFor,
    ForwardedProto,
    /// A client address a CDN or load balancer states: believed only from a trusted proxy.
    ClientAddressClaim,
    Te,
}

fn classify(name: &HeaderName) -> Disposition {
    match name.as_str() {
        "cookie" => Disposition::Cookie,
        "host" => Disposition::Host,
        "x-forwarded-for" => Disposition::ForwardedFor,
        "x-forwarded-proto" => Disposition::ForwardedProto,
        "te" => Disposition::Te,
        // Hop-by-hop (RFC 9110 §7.6.1 plus the legacy ones); `Upgrade` is re-added for tunnels.
        "connection" | "keep-alive" | "proxy-connection" | "proxy-authenticate"
        | "proxy-authorization" | "transfer-encoding" | "upgrade"
        // Client-supplied forwarding claims; the proxy writes its own. `Forwarded` goes even
        // from a trusted proxy: the proxy does not extend it, and a chain without its own hop
        // would name the wrong client.
        | "forwarded" | "x-real-ip"
        // Payment and portal credentials that only Concert may read.
        | "payment-signature" | "payment-required" | "payment-response" | "concert-session"
        | "x-concert-csrf" => Disposition::Drop,
        "true-client-ip" | "cf-connecting-ip" | "x-client-ip" | "x-cluster-client-ip"
        | "fastly-client-ip" => Disposition::ClientAddressClaim,
        other if other.starts_with("x-forwarded-") => Disposition::Drop,
        _ => Disposition::Keep,
    }
}

/// The header names a message's `Connection` header declares hop-by-hop.
///
/// Values are cloned out of the map (a reference-count bump) because the map is consumed or
/// edited while the list is consulted; one value needs no allocation.
#[derive(Default)]
pub(super) struct ConnectionList {
    first: Option<HeaderValue>,
    more: Vec<HeaderValue>,
}

impl ConnectionList {
    pub(super) fn of(headers: &HeaderMap) -> ConnectionList {
        let mut values = headers.get_all(header::CONNECTION).iter();
        let first = values.next().cloned();
        ConnectionList {
            first,
            more: values.cloned().collect(),
        }
    }

    fn values(&self) -> impl Iterator<Item = &HeaderValue> {
        self.first.iter().chain(self.more.iter())
    }

    pub(super) fn tokens(&self) -> impl Iterator<Item = &[u8]> {
        self.values().flat_map(|value| list_items(value.as_bytes()))
    }

    pub(super) fn lists(&self, name: &str) -> bool {
        self.first.is_some()
            && self
                .tokens()
                .any(|token| token.eq_ignore_ascii_case(name.as_bytes()))
    }
}

/// Items of a comma-separated header value, trimmed, empties skipped.
pub(super) fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|item| !item.is_empty())
}

fn has_token(value: &HeaderValue, token: &str) -> bool {
    list_items(value.as_bytes()).any(|item| item.eq_ignore_ascii_case(token.as_bytes()))
}

/// The protocol a request asks to switch to, when it is a real upgrade request
/// (`Connection: upgrade` plus an `Upgrade` value). `h2c` is not tunnelled: the proxy speaks
/// HTTP/2 itself where it can.
pub(super) fn requested_upgrade(headers: &HeaderMap) -> Option<HeaderValue> {
    let protocol = headers.get(header::UPGRADE)?;
    let asks = headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|value| has_token(value, UPGRADE_TOKEN));
    (asks && !has_token(protocol, "h2c")).then(|| protocol.clone())
}

/// Inputs for [`rewrite_request`] that do not come from the header map itself.
pub(super) struct RequestFacts<'a> {
    pub peer: Option<IpAddr>,
    pub peer_trusted: bool,
    /// The client as Concert resolved it (the peer, or a trusted proxy's `X-Forwarded-For`),
    /// sent as `X-Real-IP`.
    pub client: Option<IpAddr>,
    pub via_tls: bool,
    /// `Host` to send when it is not the client's own (`-preserve-host=false`, or none given).
    pub upstream_host: &'a HeaderValue,
    pub preserve_host: bool,
    /// The request's authority when it carried one in its URI (HTTP/2 `:authority`, absolute
    /// form); it takes precedence over a `Host` header.
    pub uri_authority: Option<&'a str>,
    pub upgrade: Option<HeaderValue>,
}

/// Where rewritten request headers go: a header map for the pooled clients, or straight into
/// the bytes of a request head for the direct exchange.
pub(super) trait HeaderSink {
    fn put(&mut self, name: &HeaderName, value: HeaderValue);

    /// A value given as pieces, for one the proxy composes: a request head takes the pieces
    /// as they are, with no value built and checked in between. Each piece is the proxy's own
    /// text or comes from a valid header value, so together they make a valid value.
    fn put_pieces(&mut self, name: &HeaderName, pieces: &[&[u8]]) {
        if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(pieces.concat())) {
            self.put(name, value);
        }
    }
}

impl HeaderSink for HeaderMap {
    fn put(&mut self, name: &HeaderName, value: HeaderValue) {
        self.append(name, value);
    }
}

/// Builds the header map the origin receives from the client's headers.
pub(super) fn rewrite_request(incoming: HeaderMap, facts: RequestFacts<'_>) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(incoming.len() + 7);
    rewrite_request_into(incoming, facts, &mut out);
    out
}

/// Passes the headers the origin receives, in order, to `out`: the client's headers that may
/// travel, then the ones the proxy owns. Each name is passed at most once per value and the
/// proxy's own names never repeat a client's.
pub(super) fn rewrite_request_into(
    incoming: HeaderMap,
    facts: RequestFacts<'_>,
    out: &mut impl HeaderSink,
) {
    let connection = ConnectionList::of(&incoming);
    let mut cookies = CookieMerge::default();
    let mut host_header: Option<HeaderValue> = None;
    let mut chain: Vec<u8> = Vec::new();
    let mut trusted_proto: Option<&'static str> = None;
    let mut te_trailers = false;
    let mut current: Option<HeaderName> = None;

    // `into_iter` yields a name only for the first value of each header.
    for (name, value) in incoming {
        if let Some(name) = name {
            current = Some(name);
        }
        let Some(name) = current.as_ref() else {
            continue;
        };
        match classify(name) {
            Disposition::Keep => {
                if !connection.lists(name.as_str()) {
                    out.put(name, value);
                }
            }
            Disposition::ClientAddressClaim => {
                if facts.peer_trusted && !connection.lists(name.as_str()) {
                    out.put(name, value);
                }
            }
            Disposition::Drop => {}
            Disposition::Host => {
                host_header.get_or_insert(value);
            }
            Disposition::Cookie => cookies.push(value),
            Disposition::ForwardedFor => {
                if facts.peer_trusted {
                    if !chain.is_empty() {
                        chain.extend_from_slice(b", ");
                    }
                    chain.extend_from_slice(value.as_bytes());
                }
            }
            Disposition::ForwardedProto => {
                // Only the first line counts, and only a plain scheme: anything else could make the
                // origin build `https://evil/...` links or mix two values.
                if facts.peer_trusted && trusted_proto.is_none() {
                    trusted_proto = Some(forwarded_proto(&value).unwrap_or(""));
                }
            }
            Disposition::Te => te_trailers |= has_token(&value, TRAILERS_TOKEN),
        }
    }

    let client_host = match facts.uri_authority {
        Some(authority) => HeaderValue::from_str(authority).ok(),
        None => host_header,
    };
    let sent_host = match (&client_host, facts.preserve_host) {
        (Some(host), true) => host.clone(),
        _ => facts.upstream_host.clone(),
    };
    out.put(&header::HOST, sent_host);
    if let Some(host) = client_host {
        out.put(&X_FORWARDED_HOST, host);
    }

    put_client_addresses(out, &chain, facts.peer, facts.client);

    let proto = match trusted_proto {
        Some(proto) if !proto.is_empty() => proto,
        _ if facts.via_tls => "https",
        _ => "http",
    };
    out.put(&X_FORWARDED_PROTO, HeaderValue::from_static(proto));

    if te_trailers {
        out.put(&header::TE, HeaderValue::from_static(TRAILERS_TOKEN));
    }
    if let Some(cookie) = cookies.finish() {
        out.put(&header::COOKIE, cookie);
    }
    if let Some(protocol) = facts.upgrade {
        out.put(&header::CONNECTION, HeaderValue::from_static(UPGRADE_TOKEN));
        out.put(&header::UPGRADE, protocol);
    }
}

/// `X-Forwarded-For` (the trusted chain so far, then the peer) and `X-Real-IP` (the resolved
/// client), each when there is something to say. The client is usually the peer, whose text
/// is then written once for both.
fn put_client_addresses(
    out: &mut impl HeaderSink,
    chain: &[u8],
    peer: Option<IpAddr>,
    client: Option<IpAddr>,
) {
    let mut peer_text = [0u8; IP_TEXT_MAX];
    let peer_len = peer.map_or(0, |peer| write_ip(&mut peer_text, peer));
    if !chain.is_empty() || peer_len > 0 {
        let separator: &[u8] = if chain.is_empty() || peer_len == 0 {
            b""
        } else {
            b", "
        };
        out.put_pieces(
            &X_FORWARDED_FOR,
            &[chain, separator, &peer_text[..peer_len]],
        );
    }
    match client {
        None => {}
        Some(client) if Some(client) == peer => {
            out.put_pieces(&X_REAL_IP, &[&peer_text[..peer_len]]);
        }
        Some(client) => {
            let mut client_text = [0u8; IP_TEXT_MAX];
            let client_len = write_ip(&mut client_text, client);
            out.put_pieces(&X_REAL_IP, &[&client_text[..client_len]]);
        }
    }
}

/// Longest text of an IP address (IPv6 with an embedded IPv4 address).
const IP_TEXT_MAX: usize = 45;

/// Writes an address as `Display` does and returns its length; IPv4, by far the most common,
/// without the formatting machinery (this runs for every proxied request).
fn write_ip(out: &mut [u8; IP_TEXT_MAX], ip: IpAddr) -> usize {
    let mut cursor = std::io::Cursor::new(&mut out[..]);
    match ip {
        IpAddr::V4(v4) => {
            let mut digits = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    let _ = cursor.write_all(b".");
                }
                let _ = cursor.write_all(digits.format(octet).as_bytes());
            }
        }
        // Every address fits in IP_TEXT_MAX bytes, so the writes cannot fail.
        IpAddr::V6(v6) => {
            let _ = write!(cursor, "{v6}");
        }
    }
    usize::try_from(cursor.position()).unwrap_or(0)
}

/// A trusted `X-Forwarded-Proto` value, if it names a plain web scheme. Anything else (other
/// schemes, lists, garbage) is ignored so it cannot be smuggled to the origin verbatim.
fn forwarded_proto(value: &HeaderValue) -> Option<&'static str> {
    let value = value.as_bytes().trim_ascii();
    if value.eq_ignore_ascii_case(b"https") {
        Some("https")
    } else if value.eq_ignore_ascii_case(b"http") {
        Some("http")
    } else {
        None
    }
}

/// Collects the `Cookie` headers into one, without the private cookies.
///
/// Pairs are filtered by name on the raw bytes, never re-parsed, so values a strict cookie
/// parser would reject still reach the origin unchanged (the origin, not Concert, decides what
/// its own cookies mean). A single header that
/// needs no filtering is passed on as it is.
#[derive(Default)]
struct CookieMerge {
    untouched: Option<HeaderValue>,
    merged: Vec<u8>,
}

impl CookieMerge {
    fn push(&mut self, value: HeaderValue) {
        let (has_pairs, has_private) = scan_pairs(&value);
        if !has_pairs {
            return;
        }
        if self.untouched.is_none() && self.merged.is_empty() && !has_private {
            self.untouched = Some(value);
            return;
        }
        if let Some(earlier) = self.untouched.take() {
            append_public_pairs(&mut self.merged, earlier.as_bytes());
        }
        append_public_pairs(&mut self.merged, value.as_bytes());
    }

    fn finish(self) -> Option<HeaderValue> {
        if let Some(value) = self.untouched {
            return Some(value);
        }
        if self.merged.is_empty() {
            return None;
        }
        // Made only of bytes taken from valid header values and "; ", so this cannot fail.
        HeaderValue::from_maybe_shared(Bytes::from(self.merged)).ok()
    }
}

fn is_private_pair(pair: &[u8]) -> bool {
    let name = match pair.iter().position(|&b| b == b'=') {
        Some(eq) => &pair[..eq],
        None => pair,
    };
    PRIVATE_COOKIES.contains(&name.trim_ascii())
}

/// Whether a `Cookie` value holds any pair at all, and any private one.
fn scan_pairs(value: &HeaderValue) -> (bool, bool) {
    let mut has_pairs = false;
    for pair in cookie_pairs(value.as_bytes()) {
        if is_private_pair(pair) {
            return (true, true);
        }
        has_pairs = true;
    }
    (has_pairs, false)
}

fn append_public_pairs(out: &mut Vec<u8>, value: &[u8]) {
    for pair in cookie_pairs(value).filter(|pair| !is_private_pair(pair)) {
        if !out.is_empty() {
            out.extend_from_slice(b"; ");
        }
        out.extend_from_slice(pair);
    }
}

const RESPONSE_HOP_BY_HOP_COUNT: usize = 8;

/// Headers that never travel past one hop of a response (`Upgrade` stays on a 101).
pub(super) static RESPONSE_HOP_BY_HOP: [HeaderName; RESPONSE_HOP_BY_HOP_COUNT] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers from an origin response. For a switched protocol (101) the
/// upgrade headers are kept, since the client needs them to finish its handshake.
///
/// A `Content-Length` beside `Transfer-Encoding` goes too: the body was framed by the coding
/// (RFC 9112 §6.3), and passing the length on would misframe it for the client or, when it does
/// not parse, leave hyper unable to write the response at all.
///
/// Returns whether the origin announced it closes the connection (`Connection: close`).
pub(super) fn strip_response(headers: &mut HeaderMap, switching: bool) -> bool {
    let connection = ConnectionList::of(headers);
    let mut closes = false;
    let mut transfer_coded = false;
    for token in connection.tokens() {
        closes |= token.eq_ignore_ascii_case(CLOSE_TOKEN.as_bytes());
        if switching && token.eq_ignore_ascii_case(UPGRADE_TOKEN.as_bytes()) {
            continue;
        }
        if token.eq_ignore_ascii_case(header::TRANSFER_ENCODING.as_str().as_bytes()) {
            transfer_coded |= headers.contains_key(header::TRANSFER_ENCODING);
        }
        // Tokens that are not valid header names cannot name a header; `remove` ignores them.
        if let Ok(name) = std::str::from_utf8(token) {
            headers.remove(name);
        }
    }
    // Removing a name hashes it, so look at the few names the response has first: most carry
    // one hop-by-hop header at most.
    let mut present: [Option<HeaderName>; RESPONSE_HOP_BY_HOP_COUNT] = Default::default();
    for (slot, name) in present.iter_mut().zip(headers.keys().filter(|name| {
        RESPONSE_HOP_BY_HOP.contains(name) && (*name != header::UPGRADE || !switching)
    })) {
        *slot = Some(name.clone());
    }
    for name in present.into_iter().flatten() {
        transfer_coded |= name == header::TRANSFER_ENCODING;
        headers.remove(name);
    }
    if transfer_coded {
        headers.remove(header::CONTENT_LENGTH);
    } else {
        single_content_length(headers);
    }
    if switching {
        headers.insert(header::CONNECTION, HeaderValue::from_static(UPGRADE_TOKEN));
    }
    closes
}

/// Repeated or listed `Content-Length` values (which the client library accepted only because
/// they agree) become the one value (RFC 9110 §8.6): a client may read `5, 5` differently.
fn single_content_length(headers: &mut HeaderMap) {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let Some(first) = values.next() else {
        return;
    };
    let repeated = values.next().is_some();
    let bytes = first.as_bytes();
    let item = match first_item_len(bytes) {
        Some(len) => &bytes[..len],
        None if repeated => bytes,
        None => return,
    };
    if let Ok(single) = HeaderValue::from_bytes(item) {
        headers.insert(header::CONTENT_LENGTH, single);
    }
}

/// Whether a response's framing headers announce a body: any transfer coding, or a
/// `Content-Length` other than 0 (unreadable ones included).
pub(super) fn announces_body<'v>(
    transfer_coded: bool,
    content_lengths: impl IntoIterator<Item = &'v [u8]>,
) -> bool {
    transfer_coded
        || content_lengths
            .into_iter()
            .flat_map(|value| value.split(|&b| b == b','))
            .any(|item| parse_decimal(item.trim_ascii()) != Some(0))
}

/// Whether a response to `method` may leave stray bytes behind on its connection: one to
/// `HEAD`, or a 204 or 304 whose headers announce a body. Such a connection is not reused.
pub(super) fn may_trail_a_body(method: &Method, status: StatusCode, headers: &HeaderMap) -> bool {
    *method == Method::HEAD
        || ((status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED)
            && announces_body(
                headers.contains_key(header::TRANSFER_ENCODING),
                headers
                    .get_all(header::CONTENT_LENGTH)
                    .iter()
                    .map(HeaderValue::as_bytes),
            ))
}

/// For a header value that is a list (`5, 5`), the length of its first item without the
/// whitespace before the comma; `None` for a single value. Header values have no leading or
/// trailing whitespace, so the item needs no other trimming.
pub(super) fn first_item_len(value: &[u8]) -> Option<usize> {
    let comma = memchr::memchr(b',', value)?;
    Some(value[..comma].trim_ascii_end().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `X-Forwarded-For` value [`put_client_addresses`] gives a header map.
    fn forwarded_for(chain: &[u8], peer: Option<IpAddr>) -> Option<String> {
        let mut map = HeaderMap::new();
        put_client_addresses(&mut map, chain, peer, peer);
        map.get(&X_FORWARDED_FOR)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
    }

    fn facts<'a>(upstream_host: &'a HeaderValue) -> RequestFacts<'a> {
        RequestFacts {
            peer: Some("127.0.0.1".parse().unwrap()),
            peer_trusted: false,
            client: Some("127.0.0.1".parse().unwrap()),
            via_tls: false,
            upstream_host,
            preserve_host: true,
            uri_authority: None,
            upgrade: None,
        }
    }

    fn map(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        headers
    }

    fn values(headers: &HeaderMap, name: &str) -> Vec<Vec<u8>> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect()
    }

    fn cookie_after(lines: &[&[u8]]) -> Option<Vec<u8>> {
        let pairs: Vec<(&str, &[u8])> = lines.iter().map(|line| ("cookie", *line)).collect();
        let upstream = HeaderValue::from_static("origin:1");
        let out = rewrite_request(map(&pairs), facts(&upstream));
        let mut cookies = values(&out, "cookie");
        assert!(cookies.len() <= 1, "one Cookie header at most");
        cookies.pop()
    }

    #[test]
    fn private_cookies_are_removed_and_the_rest_kept() {
        assert_eq!(
            cookie_after(&[b"room_ticket=a; session=keep; room_pass=b; room_probe=1; concert_admit=z; theme=dark"]),
            Some(b"session=keep; theme=dark".to_vec())
        );
        assert_eq!(
            cookie_after(&[
                b"room_ticket=abc; room_pass=def; room_probe=1; concert_admit=xyz; session=keep"
            ]),
            Some(b"session=keep".to_vec())
        );
        assert_eq!(
            cookie_after(&[b"concert_priority=p; concert_fastlane=f; a=1"]),
            Some(b"a=1".to_vec())
        );
    }

    /// Any byte, separators and spaces often.
    fn cookie_byte() -> impl proptest::strategy::Strategy<Value = u8> {
        use proptest::prelude::*;
        prop_oneof![Just(b';'), Just(b' '), Just(b'\t'), Just(b'='), any::<u8>()]
    }

    proptest::proptest! {
        #[test]
        fn cookie_pairs_are_the_trimmed_pieces_between_semicolons(
            value in proptest::collection::vec(cookie_byte(), 0..80),
        ) {
            let expected: Vec<&[u8]> = value
                .split(|&b| b == b';')
                .map(<[u8]>::trim_ascii)
                .filter(|pair| !pair.is_empty())
                .collect();
            proptest::prop_assert_eq!(cookie_pairs(&value).collect::<Vec<_>>(), expected);
        }

        #[test]
        fn filtered_cookies_keep_every_public_pair_in_order(
            lines in proptest::collection::vec("[ -~\t]{0,60}", 1..4),
        ) {
            let lines: Vec<&[u8]> = lines.iter().map(|line| line.as_bytes()).collect();
            let expected: Vec<&[u8]> = lines
                .iter()
                .flat_map(|line| cookie_pairs(line))
                .filter(|pair| !is_private_pair(pair))
                .collect();
            let got = cookie_after(&lines);
            let with_pairs: Vec<&[u8]> = lines
                .iter()
                .copied()
                .filter(|line| cookie_pairs(line).next().is_some())
                .collect();
            let lone_public = with_pairs.len() == 1
                && !cookie_pairs(with_pairs[0]).any(is_private_pair);
            if expected.is_empty() {
                proptest::prop_assert_eq!(got, None);
            } else if lone_public {
                // A lone header without private cookies passes untouched.
                proptest::prop_assert_eq!(got, Some(with_pairs[0].to_vec()));
            } else {
                proptest::prop_assert_eq!(got, Some(expected.join(&b"; "[..])));
            }
        }
    }

    #[test]
    fn no_cookie_header_is_added_when_none_remain() {
        assert_eq!(cookie_after(&[]), None);
        assert_eq!(cookie_after(&[b"room_ticket=a; concert_admit=b"]), None);
        assert_eq!(cookie_after(&[b" ; ;"]), None);
    }

    #[test]
    fn odd_cookie_values_pass_byte_for_byte() {
        let odd: &[u8] = b"q=\"quoted value\"; j={\"a\":[1,2]}; pct=%%%; b64=YWJj==; flag; t=\ttab";
        assert_eq!(cookie_after(&[odd]), Some(odd.to_vec()));
        assert_eq!(
            cookie_after(&[b"q=\"quoted value\"; room_ticket=x; flag"]),
            Some(b"q=\"quoted value\"; flag".to_vec())
        );
        let non_utf8: &[u8] = b"bin=\xff\xfe; room_pass=1";
        assert_eq!(cookie_after(&[non_utf8]), Some(b"bin=\xff\xfe".to_vec()));
    }

    #[test]
    fn cookie_names_match_exactly() {
        assert_eq!(
            cookie_after(&[b"Room_Ticket=a; room_tickets=b; xroom_ticket=c;  room_ticket =d"]),
            Some(b"Room_Ticket=a; room_tickets=b; xroom_ticket=c".to_vec())
        );
    }

    #[test]
    fn several_cookie_headers_merge_into_one() {
        assert_eq!(
            cookie_after(&[b"a=1", b"b=2; room_ticket=t", b"c=3"]),
            Some(b"a=1; b=2; c=3".to_vec())
        );
        assert_eq!(cookie_after(&[b"a=1", b"b=2"]), Some(b"a=1; b=2".to_vec()));
    }

    #[test]
    fn credentials_and_client_forwarding_claims_are_dropped() {
        let incoming = map(&[
            ("payment-signature", b"sig"),
            ("payment-required", b"r"),
            ("payment-response", b"r"),
            ("concert-session", b"s"),
            ("x-concert-csrf", b"c"),
            ("forwarded", b"for=6.6.6.6"),
            ("x-forwarded-port", b"443"),
            ("x-forwarded-server", b"evil"),
            ("x-forwarded-host", b"evil.example"),
            ("x-real-ip", b"6.6.6.6"),
            ("host", b"concert.example"),
        ]);
        let upstream = HeaderValue::from_static("origin:1");
        let out = rewrite_request(incoming, facts(&upstream));
        for gone in [
            "payment-signature",
            "payment-required",
            "payment-response",
            "concert-session",
            "x-concert-csrf",
            "forwarded",
            "x-forwarded-port",
            "x-forwarded-server",
        ] {
            assert!(!out.contains_key(gone), "{gone} forwarded");
        }
        assert_eq!(
            values(&out, "x-forwarded-host"),
            vec![b"concert.example".to_vec()]
        );
        assert_eq!(values(&out, "x-real-ip"), vec![b"127.0.0.1".to_vec()]);
    }

    fn address_claims() -> HeaderMap {
        map(&[
            ("x-real-ip", b"6.6.6.6"),
            ("true-client-ip", b"6.6.6.1"),
            ("cf-connecting-ip", b"6.6.6.2"),
            ("x-client-ip", b"6.6.6.3"),
            ("x-cluster-client-ip", b"6.6.6.4"),
            ("fastly-client-ip", b"6.6.6.5"),
        ])
    }

    const CLAIMS: [&str; 5] = [
        "true-client-ip",
        "cf-connecting-ip",
        "x-client-ip",
        "x-cluster-client-ip",
        "fastly-client-ip",
    ];

    #[test]
    fn client_address_claims_need_a_trusted_peer() {
        let upstream = HeaderValue::from_static("origin:1");
        let untrusted = rewrite_request(address_claims(), facts(&upstream));
        for claim in CLAIMS {
            assert!(!untrusted.contains_key(claim), "{claim} forwarded");
        }
        assert_eq!(values(&untrusted, "x-real-ip"), vec![b"127.0.0.1".to_vec()]);

        let trusted = rewrite_request(
            address_claims(),
            RequestFacts {
                peer_trusted: true,
                client: Some("203.0.113.9".parse().unwrap()),
                ..facts(&upstream)
            },
        );
        for (at, claim) in CLAIMS.into_iter().enumerate() {
            assert_eq!(
                values(&trusted, claim),
                vec![format!("6.6.6.{}", at + 1).into_bytes()]
            );
        }
        assert_eq!(values(&trusted, "x-real-ip"), vec![b"203.0.113.9".to_vec()]);
    }

    #[test]
    fn no_real_ip_without_a_known_client() {
        let upstream = HeaderValue::from_static("origin:1");
        let out = rewrite_request(
            address_claims(),
            RequestFacts {
                peer: None,
                client: None,
                ..facts(&upstream)
            },
        );
        assert!(!out.contains_key("x-real-ip"));
    }

    #[test]
    fn hop_by_hop_request_headers_are_dropped() {
        let incoming = map(&[
            ("connection", b"close, X-Secret"),
            ("connection", b"keep-alive"),
            ("x-secret", b"1"),
            ("keep-alive", b"timeout=5"),
            ("proxy-connection", b"keep-alive"),
            ("proxy-authorization", b"Basic x"),
            ("te", b"gzip"),
            ("transfer-encoding", b"chunked"),
            ("upgrade", b"websocket"),
            ("trailer", b"x-checksum"),
            ("x-kept", b"yes"),
        ]);
        let upstream = HeaderValue::from_static("origin:1");
        let out = rewrite_request(incoming, facts(&upstream));
        for gone in [
            "connection",
            "x-secret",
            "keep-alive",
            "proxy-connection",
            "proxy-authorization",
            "te",
            "transfer-encoding",
            "upgrade",
        ] {
            assert!(!out.contains_key(gone), "{gone} forwarded");
        }
        assert_eq!(values(&out, "x-kept"), vec![b"yes".to_vec()]);
        assert_eq!(values(&out, "trailer"), vec![b"x-checksum".to_vec()]);
    }

    #[test]
    fn te_is_reduced_to_trailers() {
        let upstream = HeaderValue::from_static("origin:1");
        let out = rewrite_request(map(&[("te", b"gzip, Trailers")]), facts(&upstream));
        assert_eq!(values(&out, "te"), vec![b"trailers".to_vec()]);
    }

    #[test]
    fn upgrade_requests_keep_their_upgrade_headers() {
        let incoming = map(&[
            ("connection", b"keep-alive, Upgrade"),
            ("upgrade", b"websocket"),
        ]);
        let upgrade = requested_upgrade(&incoming);
        assert_eq!(upgrade, Some(HeaderValue::from_static("websocket")));
        let upstream = HeaderValue::from_static("origin:1");
        let out = rewrite_request(
            incoming,
            RequestFacts {
                upgrade,
                ..facts(&upstream)
            },
        );
        assert_eq!(values(&out, "connection"), vec![b"upgrade".to_vec()]);
        assert_eq!(values(&out, "upgrade"), vec![b"websocket".to_vec()]);
    }

    #[test]
    fn upgrade_needs_both_headers_and_is_never_h2c() {
        assert_eq!(requested_upgrade(&map(&[("upgrade", b"websocket")])), None);
        assert_eq!(requested_upgrade(&map(&[("connection", b"upgrade")])), None);
        assert_eq!(
            requested_upgrade(&map(&[
                ("connection", b"Upgrade, HTTP2-Settings"),
                ("upgrade", b"h2c")
            ])),
            None
        );
    }

    #[test]
    fn forwarded_for_and_proto_follow_peer_trust() {
        let upstream = HeaderValue::from_static("origin:1");
        let incoming = || {
            map(&[
                ("x-forwarded-for", b"203.0.113.9"),
                ("x-forwarded-for", b"198.51.100.2"),
                ("x-forwarded-proto", b"https"),
            ])
        };
        let trusted = rewrite_request(
            incoming(),
            RequestFacts {
                peer_trusted: true,
                ..facts(&upstream)
            },
        );
        assert_eq!(
            values(&trusted, "x-forwarded-for"),
            vec![b"203.0.113.9, 198.51.100.2, 127.0.0.1".to_vec()]
        );
        assert_eq!(
            values(&trusted, "x-forwarded-proto"),
            vec![b"https".to_vec()]
        );

        let untrusted = rewrite_request(incoming(), facts(&upstream));
        assert_eq!(
            values(&untrusted, "x-forwarded-for"),
            vec![b"127.0.0.1".to_vec()]
        );
        assert_eq!(
            values(&untrusted, "x-forwarded-proto"),
            vec![b"http".to_vec()]
        );
    }

    #[test]
    fn trusted_proto_must_be_a_plain_scheme() {
        let upstream = HeaderValue::from_static("origin:1");
        for (sent, via_tls, want) in [
            (&b"javascript"[..], false, &b"http"[..]),
            (b"https, http", true, b"https"),
            (b"", true, b"https"),
            (b"HTTP", true, b"http"),
            (b" https ", false, b"https"),
        ] {
            let out = rewrite_request(
                map(&[("x-forwarded-proto", sent)]),
                RequestFacts {
                    peer_trusted: true,
                    via_tls,
                    ..facts(&upstream)
                },
            );
            assert_eq!(
                values(&out, "x-forwarded-proto"),
                vec![want.to_vec()],
                "{sent:?}"
            );
        }
    }

    #[test]
    fn ipv6_peer_is_written_bare_and_unknown_peer_adds_nothing() {
        let upstream = HeaderValue::from_static("origin:1");
        let out = rewrite_request(
            HeaderMap::new(),
            RequestFacts {
                peer: Some("2001:db8::7".parse().unwrap()),
                ..facts(&upstream)
            },
        );
        assert_eq!(
            values(&out, "x-forwarded-for"),
            vec![b"2001:db8::7".to_vec()]
        );
        let out = rewrite_request(
            HeaderMap::new(),
            RequestFacts {
                peer: None,
                ..facts(&upstream)
            },
        );
        assert!(!out.contains_key("x-forwarded-for"));
    }

    proptest::proptest! {
        #[test]
        fn forwarded_addresses_are_written_as_display_writes_them(bits: u32, wide: u128) {
            for ip in [IpAddr::from(bits.to_be_bytes()), IpAddr::from(wide.to_be_bytes())] {
                let mut text = [0u8; IP_TEXT_MAX];
                let len = write_ip(&mut text, ip);
                let shown = ip.to_string();
                proptest::prop_assert_eq!(&text[..len], shown.as_bytes());
                let expected = format!("203.0.113.9, {ip}");
                proptest::prop_assert_eq!(forwarded_for(b"203.0.113.9", Some(ip)), Some(expected));
            }
        }
    }

    #[test]
    fn longest_address_texts_fit() {
        for text in [
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:255.255.255.255",
            "255.255.255.255",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            let mut out = [0u8; IP_TEXT_MAX];
            let len = write_ip(&mut out, ip);
            assert_eq!(&out[..len], ip.to_string().as_bytes());
        }
        assert_eq!(forwarded_for(b"", None), None);
        assert_eq!(forwarded_for(b"a", None).as_deref(), Some("a"));
    }

    #[test]
    fn host_is_the_clients_or_the_upstreams() {
        let upstream = HeaderValue::from_static("origin:1");
        let preserved = rewrite_request(map(&[("host", b"concert.example")]), facts(&upstream));
        assert_eq!(
            values(&preserved, "host"),
            vec![b"concert.example".to_vec()]
        );
        let replaced = rewrite_request(
            map(&[("host", b"concert.example")]),
            RequestFacts {
                preserve_host: false,
                ..facts(&upstream)
            },
        );
        assert_eq!(values(&replaced, "host"), vec![b"origin:1".to_vec()]);
        assert_eq!(
            values(&replaced, "x-forwarded-host"),
            vec![b"concert.example".to_vec()]
        );
        let authority = rewrite_request(
            map(&[("host", b"ignored.example")]),
            RequestFacts {
                uri_authority: Some("h2.example"),
                ..facts(&upstream)
            },
        );
        assert_eq!(values(&authority, "host"), vec![b"h2.example".to_vec()]);
        let hostless = rewrite_request(HeaderMap::new(), facts(&upstream));
        assert_eq!(values(&hostless, "host"), vec![b"origin:1".to_vec()]);
        assert!(!hostless.contains_key("x-forwarded-host"));
    }

    #[test]
    fn response_hop_by_hop_headers_are_stripped() {
        let mut headers = map(&[
            ("connection", b"X-Internal, keep-alive"),
            ("x-internal", b"secret"),
            ("keep-alive", b"timeout=5"),
            ("proxy-authenticate", b"Basic"),
            ("transfer-encoding", b"chunked"),
            ("upgrade", b"h2c"),
            ("trailer", b"x-sum"),
            ("content-type", b"text/plain"),
        ]);
        assert!(!strip_response(&mut headers, false));
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, vec!["content-type", "trailer"]);
    }

    #[test]
    fn connection_close_is_reported_and_stripped() {
        let mut headers = map(&[("connection", b"X-A, Close"), ("x-a", b"1")]);
        assert!(strip_response(&mut headers, false));
        assert!(headers.is_empty());
        let mut headers = map(&[("connection", b"keep-alive"), ("closed", b"1")]);
        assert!(!strip_response(&mut headers, false));
        assert_eq!(values(&headers, "closed"), vec![b"1".to_vec()]);
    }

    #[test]
    fn a_length_beside_a_transfer_coding_is_dropped() {
        let cases: [&[(&str, &[u8])]; 2] = [
            &[("transfer-encoding", b"gzip"), ("content-length", b"-3")],
            // Named in Connection as well, so it goes before the hop-by-hop scan.
            &[
                ("connection", b"transfer-encoding"),
                ("transfer-encoding", b"chunked"),
                ("content-length", b"5"),
            ],
        ];
        for pairs in cases {
            let mut headers = map(pairs);
            strip_response(&mut headers, false);
            assert!(headers.is_empty(), "{pairs:?} left {headers:?}");
        }
        let mut length_only = map(&[("content-length", b"5"), ("connection", b"keep-alive")]);
        strip_response(&mut length_only, false);
        assert_eq!(values(&length_only, "content-length"), vec![b"5".to_vec()]);
    }

    #[test]
    fn switching_response_keeps_upgrade() {
        let mut headers = map(&[
            ("connection", b"Upgrade"),
            ("upgrade", b"websocket"),
            ("sec-websocket-accept", b"abc"),
        ]);
        strip_response(&mut headers, true);
        assert_eq!(values(&headers, "connection"), vec![b"upgrade".to_vec()]);
        assert_eq!(values(&headers, "upgrade"), vec![b"websocket".to_vec()]);
        assert!(headers.contains_key("sec-websocket-accept"));
    }

    #[test]
    fn bodiless_answers_that_announce_a_body_are_flagged() {
        let flagged = |method: Method, status: u16, pairs: &[(&str, &[u8])]| {
            may_trail_a_body(&method, StatusCode::from_u16(status).unwrap(), &map(pairs))
        };
        assert!(flagged(Method::HEAD, 200, &[("content-length", b"5")]));
        assert!(flagged(Method::HEAD, 200, &[]));
        assert!(flagged(Method::GET, 304, &[("content-length", b"5")]));
        assert!(flagged(Method::GET, 304, &[("content-length", b"0, 1")]));
        assert!(flagged(Method::GET, 304, &[("content-length", b"x")]));
        assert!(flagged(
            Method::POST,
            204,
            &[("transfer-encoding", b"chunked")]
        ));
        assert!(!flagged(Method::GET, 304, &[("etag", b"\"a\"")]));
        assert!(!flagged(Method::GET, 204, &[("content-length", b"0")]));
        assert!(!flagged(Method::GET, 200, &[("content-length", b"5")]));
        assert!(!flagged(
            Method::POST,
            200,
            &[("transfer-encoding", b"chunked")]
        ));
    }

    #[test]
    fn listed_or_repeated_lengths_become_one() {
        for values in [&["5, 5"][..], &["5", "5"], &["5 ,5", "5"], &["5"]] {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(header::CONTENT_LENGTH, HeaderValue::from_static(value));
            }
            strip_response(&mut headers, false);
            let lengths: Vec<_> = headers.get_all(header::CONTENT_LENGTH).iter().collect();
            assert_eq!(lengths, ["5"], "{values:?}");
        }
    }
}
