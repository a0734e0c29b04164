//! Stage 1: the request as it arrived is checked before anything else looks at it, and its
//! target is normalised; the client is resolved (stage 2, [`super::identity`]) on the way.

use std::net::Ipv6Addr;

use http::{Method, Request, Version, header};

use super::identity::{is_html_client, resolve_client};
use super::request::{ConnInfo, RequestInfo};
use crate::app::Generation;
use crate::paths::normalize::normalize_request_path;
use crate::respond::Rejection;
use crate::wire::limits::{MAX_HEADERS, MAX_TARGET_BYTES};

/// Checks the request target and resolves the client before anything else looks at them.
pub(super) fn inspect<B>(
    generation: &Generation,
    conn: ConnInfo,
    req: &Request<B>,
) -> Result<RequestInfo, Rejection> {
    // hyper refuses an HTTP/1 head with more fields itself; HTTP/2 only bounds their size.
    if req.version() == Version::HTTP_2 && req.headers().len() > MAX_HEADERS {
        return Err(Rejection::TooManyHeaders);
    }
    // A reverse proxy opens no tunnels, and a CONNECT with an origin-form target is no valid
    // request at all: passed on, it would ask the origin to tunnel, or confuse it.
    if req.method() == Method::CONNECT {
        return Err(Rejection::BadRequest(
            "CONNECT is not served here".to_string(),
        ));
    }
    check_host(req)?;
    if req.headers().contains_key(header::TRANSFER_ENCODING) && !only_chunked(req.headers()) {
        return Err(Rejection::BadRequest(
            "transfer codings other than chunked are not supported".to_string(),
        ));
    }
    let uri = req.uri();
    let raw_target = uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/");
    if raw_target.len() > MAX_TARGET_BYTES {
        return Err(Rejection::UriTooLong);
    }
    let path = normalize_request_path(uri.path())
        .map_err(|e| Rejection::BadRequest(format!("path: {e}")))?;
    let mut target = String::with_capacity(raw_target.len() + 1);
    target.push_str(&path);
    let path_len = target.len();
    if let Some(query) = uri.query() {
        target.push('?');
        target.push_str(query);
    }
    let config = &generation.config;
    let client = resolve_client(conn.peer, req.headers(), |ip| {
        config.trusted_proxies.contains(ip)
    });
    Ok(RequestInfo {
        conn,
        client,
        html: is_html_client(req.headers()),
        target,
        path_len,
        rank: Default::default(),
        proxied: Default::default(),
    })
}

/// Whether the request's transfer codings are exactly `chunked`, the one coding the proxy decodes
/// and re-applies. hyper reads `gzip, chunked` as plain chunked, so the origin would get
/// compressed bytes with nothing saying so. Refused with 400, as hyper refuses other unknown
/// codings (RFC 9112 suggests 501, but no malformed or unsupported input gets a 5xx from
/// Concert). Codings without a final `chunked` never get here: the framing guard refuses them.
fn only_chunked(headers: &http::HeaderMap) -> bool {
    let mut codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|coding| !coding.is_empty());
    matches!(
        (codings.next(), codings.next()),
        (Some(coding), None) if coding.eq_ignore_ascii_case(b"chunked")
    )
}

/// RFC 9112 §3.2: an HTTP/1.1 request names its host in exactly one `Host` field, and any
/// `Host` or authority (HTTP/2 `:authority`, absolute-form target) is a plain `host[:port]`.
/// The proxy forwards them as `Host` and `X-Forwarded-Host`, so nothing else may pass.
fn check_host<B>(req: &Request<B>) -> Result<(), Rejection> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if req.version() == Version::HTTP_11 => {
            return Err(Rejection::BadRequest("missing Host header".to_string()));
        }
        (Some(_), Some(_)) => {
            return Err(Rejection::BadRequest(
                "more than one Host header".to_string(),
            ));
        }
        (Some(host), None) if !is_host_and_port(host.as_bytes()) => {
            return Err(Rejection::BadRequest("invalid Host header".to_string()));
        }
        _ => {}
    }
    if let Some(authority) = req.uri().authority()
        && !is_host_and_port(authority.as_str().as_bytes())
    {
        return Err(Rejection::BadRequest(
            "invalid request authority".to_string(),
        ));
    }
    Ok(())
}

/// `uri-host [ ":" port ]` (RFC 3986 §3.2.2): a bracketed IPv6 address, or a name or IPv4
/// address of unreserved characters and sub-delimiters. Two characters the grammar allows are
/// refused, since no DNS name or address uses them and both change meaning downstream: `%`
/// (an origin may decode `%2F` into a slash) and `,` (it splits `X-Forwarded-Host` into two
/// hosts). An empty value is allowed, as RFC 9112 sends one for targets without an authority.
fn is_host_and_port(value: &[u8]) -> bool {
    let (host_ok, rest) = match value {
        [b'[', inner @ ..] => {
            let Some(close) = inner.iter().position(|&b| b == b']') else {
                return false;
            };
            let address = std::str::from_utf8(&inner[..close]).ok();
            (
                address.is_some_and(|a| a.parse::<Ipv6Addr>().is_ok()),
                &inner[close + 1..],
            )
        }
        _ => {
            let end = value.iter().position(|&b| b == b':').unwrap_or(value.len());
            let name = &value[..end];
            (
                name.iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+;=".contains(&b)),
                &value[end..],
            )
        }
    };
    host_ok
        && match rest {
            [] => true,
            [b':', port @ ..] => port.len() <= 5 && port.iter().all(u8::is_ascii_digit),
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_values_must_be_a_plain_host_and_port() {
        for good in [
            "",
            "shop.test",
            "shop.test:8080",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[2001:db8::1]:443",
            "xn--bcher-kva.example",
            "a_b~c",
            "host:",
        ] {
            assert!(is_host_and_port(good.as_bytes()), "{good:?}");
        }
        for bad in [
            "shop.test/evil",
            "shop test",
            "user@shop.test",
            "shop.test?x",
            "shop.test#x",
            "shop.test:80:80",
            "shop.test:http",
            "shop.test:123456",
            "[::1",
            "[nope]",
            "[::1]x",
            "[::1]:x",
            "a,b",
            "a%2Fb",
            "a\\b",
            "shop.test\t",
            "é.test",
        ] {
            assert!(!is_host_and_port(bad.as_bytes()), "{bad:?}");
        }
    }
}
