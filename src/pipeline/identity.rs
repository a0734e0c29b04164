//! Client identity: who a request comes from.
//!
//! Owns the resolution of the client address (socket peer, trusted proxies and `X-Forwarded-For`),
//! the abuse key that groups addresses for strikes and bans (an IPv4 address or an IPv6 /64), and
//! the "does this client want HTML" test used to pick between the waiting page and JSON answers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::HeaderMap;
use http::header::{ACCEPT, HeaderValue};

use crate::wire::names::X_FORWARDED_FOR;

/// How many non-empty `X-Forwarded-For` items are examined before the chain is treated as
/// malformed. A real chain of proxies is a handful of hops; this bounds the work a client can cause.
const MAX_FORWARDED_ITEMS: usize = 64;

/// Turns an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) into the IPv4 address it carries.
///
/// Unlike `Ipv6Addr::to_ipv4`, this leaves `::1` and other IPv6 addresses alone.
pub(crate) fn unmap(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// Parses one address as it appears in a peer or `X-Forwarded-For` item: a bare address
/// (`203.0.113.7`, `2001:db8::1`, `fe80::1%eth0`), `a.b.c.d:port`, or `[v6]:port` / `[v6]`.
/// The result is unmapped. Anything else is `None`.
pub(crate) fn parse_address(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest.split_once(']')?;
        if !after.is_empty() {
            parse_port(after.strip_prefix(':')?)?;
        }
        return parse_bare(inner).map(unmap);
    }
    if let Some(ip) = parse_bare(text) {
        return Some(unmap(ip));
    }
    // `a.b.c.d:port`; an unbracketed IPv6 address has several colons and was handled above.
    let (host, port) = text.rsplit_once(':')?;
    parse_port(port)?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A bare address, with an IPv6 zone (`%eth0`) ignored: the zone names a local interface and
/// says nothing about who the client is.
fn parse_bare(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (addr, zone) = text.split_once('%')?;
    if zone.is_empty() {
        return None;
    }
    addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Resolves the client address of a request.
///
/// `peer` is the socket peer (already unmapped or not; it is unmapped here). An untrusted peer is
/// the client. For a trusted peer the `X-Forwarded-For` lines are read last-to-first and each
/// line's items right-to-left, skipping empty items: the first untrusted address is the client; a
/// malformed item (or a chain longer than we are willing to read) distrusts the whole header and
/// the peer is the client; if every hop is trusted the left-most one is. `None` peer → `None`.
pub(crate) fn resolve_client(
    peer: Option<IpAddr>,
    forwarded_for: &HeaderMap,
    is_trusted: impl Fn(IpAddr) -> bool,
) -> Option<IpAddr> {
    let peer = unmap(peer?);
    if !is_trusted(peer) {
        return Some(peer);
    }
    let mut hop = peer;
    let mut items = 0usize;
    for line in forwarded_for.get_all(X_FORWARDED_FOR).iter().rev() {
        // Work on bytes so a huge line is only read as far as the scan gets.
        for item in line.as_bytes().rsplit(|&b| b == b',') {
            let item = item.trim_ascii();
            if item.is_empty() {
                continue;
            }
            items += 1;
            if items > MAX_FORWARDED_ITEMS {
                return Some(peer);
            }
            let Some(ip) = std::str::from_utf8(item).ok().and_then(parse_address) else {
                return Some(peer);
            };
            if !is_trusted(ip) {
                return Some(ip);
            }
            hop = ip;
        }
    }
    Some(hop)
}

/// True when the client asks for HTML: one of its `Accept` values mentions `text/html`
/// (media types compare case-insensitively).
pub(crate) fn is_html_client(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().any(accepts_html)
}

fn accepts_html(value: &HeaderValue) -> bool {
    const NEEDLE: &[u8] = b"text/html";
    value
        .as_bytes()
        .windows(NEEDLE.len())
        .any(|window| window.eq_ignore_ascii_case(NEEDLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn trusted_in(nets: &'static [&'static str]) -> impl Fn(IpAddr) -> bool {
        move |candidate| {
            nets.iter()
                .any(|net| net.parse::<ipnet::IpNet>().unwrap().contains(&candidate))
        }
    }

    fn forwarded(lines: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(X_FORWARDED_FOR, HeaderValue::from_str(line).unwrap());
        }
        headers
    }

    fn accept(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    const LOOPBACK: &[&str] = &["127.0.0.1/32"];
    const LOOPBACK_AND_TEN: &[&str] = &["127.0.0.1/32", "10.0.0.0/8"];

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_forwards() {
        let got = resolve_client(
            Some(ip("203.0.113.7")),
            &forwarded(&["198.51.100.1"]),
            trusted_in(&[]),
        );
        assert_eq!(got, Some(ip("203.0.113.7")));
    }

    #[test]
    fn trusted_peer_passes_on_the_forwarded_address() {
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&["198.51.100.1"]),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("198.51.100.1")));
    }

    #[test]
    fn right_most_untrusted_hop_wins() {
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&["192.0.2.66, 198.51.100.1"]),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("198.51.100.1")));
    }

    #[test]
    fn trusted_hops_are_skipped_in_one_line_or_across_lines() {
        let peer = Some(ip("127.0.0.1"));
        let one_line = forwarded(&["198.51.100.1, 10.1.2.3"]);
        let two_lines = forwarded(&["198.51.100.1", "10.1.2.3"]);
        assert_eq!(
            resolve_client(peer, &one_line, trusted_in(LOOPBACK_AND_TEN)),
            Some(ip("198.51.100.1"))
        );
        assert_eq!(
            resolve_client(peer, &two_lines, trusted_in(LOOPBACK_AND_TEN)),
            Some(ip("198.51.100.1"))
        );
    }

    #[test]
    fn later_lines_are_read_before_earlier_ones() {
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&["192.0.2.66", "198.51.100.1"]),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("198.51.100.1")));
    }

    #[test]
    fn malformed_item_falls_back_to_the_peer() {
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&["not-an-ip"]),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("127.0.0.1")));
    }

    #[test]
    fn malformed_item_left_of_an_untrusted_hop_is_never_reached() {
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&["garbage, 198.51.100.1"]),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("198.51.100.1")));
    }

    #[test]
    fn trusted_peer_without_header_is_the_client() {
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &HeaderMap::new(),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("127.0.0.1")));
    }

    #[test]
    fn all_trusted_chain_gives_the_left_most_hop() {
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&["10.0.0.5, 10.0.0.6"]),
            trusted_in(LOOPBACK_AND_TEN),
        );
        assert_eq!(got, Some(ip("10.0.0.5")));
    }

    #[test]
    fn empty_items_are_skipped() {
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&[" , 198.51.100.1 ,, ", ""]),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("198.51.100.1")));
    }

    #[test]
    fn bracketed_and_ported_items_are_accepted_and_unmapped() {
        let peer = Some(ip("127.0.0.1"));
        for (item, want) in [
            ("[2001:db8::1]:443", "2001:db8::1"),
            ("[::ffff:203.0.113.7]:1", "203.0.113.7"),
            ("203.0.113.7:8080", "203.0.113.7"),
            ("::ffff:198.51.100.3", "198.51.100.3"),
            ("[2001:db8::2]", "2001:db8::2"),
        ] {
            let got = resolve_client(peer, &forwarded(&[item]), trusted_in(LOOPBACK));
            assert_eq!(got, Some(ip(want)), "item {item}");
        }
    }

    #[test]
    fn peer_text_forms_parse_to_unmapped_addresses() {
        assert_eq!(parse_address("[2001:db8::1]:443"), Some(ip("2001:db8::1")));
        assert_eq!(
            parse_address("[::ffff:203.0.113.7]:1"),
            Some(ip("203.0.113.7"))
        );
        assert_eq!(parse_address("fe80::1%eth0"), Some(ip("fe80::1")));
        for bad in [
            "",
            "nope",
            "1.2.3",
            "[2001:db8::1]:",
            "[2001:db8::1]:99999",
            "203.0.113.7:x",
            "2001:db8::1]:443",
            "fe80::1%",
            "[::1]443",
        ] {
            assert_eq!(parse_address(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn mapped_peer_is_unmapped_before_trust_is_checked() {
        let got = resolve_client(
            Some(ip("::ffff:127.0.0.1")),
            &forwarded(&["198.51.100.1"]),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("198.51.100.1")));
    }

    #[test]
    fn unknown_peer_has_no_client_address() {
        assert_eq!(
            resolve_client(None, &forwarded(&["198.51.100.1"]), |_| true),
            None
        );
    }

    #[test]
    fn overlong_all_trusted_chain_is_treated_as_malformed() {
        let chain = vec!["10.0.0.1"; MAX_FORWARDED_ITEMS + 1].join(", ");
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&[&chain]),
            trusted_in(LOOPBACK_AND_TEN),
        );
        assert_eq!(got, Some(ip("127.0.0.1")));
        let chain = vec!["10.0.0.1"; MAX_FORWARDED_ITEMS].join(", ");
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&[&chain]),
            trusted_in(LOOPBACK_AND_TEN),
        );
        assert_eq!(got, Some(ip("10.0.0.1")));
    }

    #[test]
    fn huge_header_with_client_on_the_right_resolves_quickly() {
        let mut line = "x,".repeat(200_000);
        line.push_str("198.51.100.1");
        let got = resolve_client(
            Some(ip("127.0.0.1")),
            &forwarded(&[&line]),
            trusted_in(LOOPBACK),
        );
        assert_eq!(got, Some(ip("198.51.100.1")));
    }

    #[test]
    fn non_ascii_item_is_malformed() {
        let mut headers = HeaderMap::new();
        headers.append(
            X_FORWARDED_FOR,
            HeaderValue::from_bytes(b"198.51.100.1, \xff\xfe").unwrap(),
        );
        let got = resolve_client(Some(ip("127.0.0.1")), &headers, trusted_in(LOOPBACK));
        assert_eq!(got, Some(ip("127.0.0.1")));
    }

    #[test]
    fn html_detection_follows_accept() {
        for not_html in [
            "",
            "*/*",
            "application/json",
            "text/event-stream",
            "image/avif,image/webp,*/*",
        ] {
            assert!(!is_html_client(&accept(&[not_html])), "{not_html:?}");
        }
        for html in [
            "text/html",
            "text/html,application/xhtml+xml,*/*",
            "Text/HTML",
        ] {
            assert!(is_html_client(&accept(&[html])), "{html:?}");
        }
        assert!(!is_html_client(&HeaderMap::new()));
        assert!(is_html_client(&accept(&["application/json", "text/html"])));
    }

    proptest::proptest! {
        #[test]
        fn any_forwarded_header_resolves_to_the_peer_or_one_of_its_items(
            lines in proptest::collection::vec("[ -~]{0,80}", 0..4),
            trust_all in proptest::bool::ANY,
        ) {
            let mut headers = HeaderMap::new();
            for line in &lines {
                if let Ok(value) = HeaderValue::from_str(line) {
                    headers.append(X_FORWARDED_FOR, value);
                }
            }
            let peer = ip("127.0.0.1");
            let got = resolve_client(Some(peer), &headers, |candidate| {
                trust_all || candidate == peer
            });
            let got = got.expect("a known peer always resolves");
            let from_items = lines
                .iter()
                .flat_map(|line| line.split(','))
                .filter_map(parse_address)
                .any(|item| item == got);
            proptest::prop_assert!(got == peer || from_items);
        }
    }
}
