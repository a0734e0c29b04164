//! The plain-HTTP port beside HTTPS (`-http-listen`, e.g. `:80`): it answers ACME HTTP-01
//! challenges and `/_room/healthz` (readable even while no certificate is ready, when nothing
//! on the HTTPS port can be), and sends everything else to https with `308 Permanent
//! Redirect`, which keeps the method and body, path and query kept. The main listener uses
//! [`challenge`] too while it speaks plain HTTP.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};

use super::{HTTP01_PREFIX, Tls};
use crate::paths::reserved::{HEALTHZ, without_trailing_slash};
use crate::respond::values::TEXT;

/// Longest challenge token answered; real ones are 43 characters.
const MAX_TOKEN_LEN: usize = 256;

/// The router of the plain-HTTP listener. `https_port` is the port of the public listener
/// (left out of the redirect when it is 443).
pub fn router(tls: Arc<Tls>, https_port: u16) -> Router {
    Router::new()
        .fallback(move |request: Request| std::future::ready(answer(&tls, https_port, &request)))
}

fn answer(tls: &Tls, https_port: u16, request: &Request) -> Response<Body> {
    let path = request.uri().path();
    if let Some(response) = challenge(tls, request.method(), path) {
        return response;
    }
    if without_trailing_slash(path) == HEALTHZ
        && matches!(*request.method(), Method::GET | Method::HEAD)
    {
        return text(StatusCode::OK, tls.health_text().to_string());
    }
    let Some(host) = request_host(request.headers(), request.uri()) else {
        return text(
            StatusCode::BAD_REQUEST,
            "a Host header is needed to send you to https\n".to_string(),
        );
    };
    let port = if https_port == 443 {
        String::new()
    } else {
        format!(":{https_port}")
    };
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", |path_and_query| path_and_query.as_str());
    let location = format!("https://{host}{port}{target}");
    let Ok(value) = HeaderValue::from_str(&location) else {
        return text(StatusCode::BAD_REQUEST, "bad request target\n".to_string());
    };
    let mut response = text(StatusCode::PERMANENT_REDIRECT, format!("{location}\n"));
    response.headers_mut().insert(header::LOCATION, value);
    response
}

/// The answer to an HTTP-01 challenge request, when `path` is one: the key authorization
/// while a validation waits for it, else 404. `None` for any other request, and always while
/// no ACME engine answers (one relaxed load).
pub fn challenge(tls: &Tls, method: &Method, path: &str) -> Option<Response<Body>> {
    if !tls.answering() || !matches!(*method, Method::GET | Method::HEAD) {
        return None;
    }
    let token = path.strip_prefix(HTTP01_PREFIX)?;
    let valid = !token.is_empty()
        && token.len() <= MAX_TOKEN_LEN
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    Some(match valid.then(|| tls.http01(token)).flatten() {
        Some(key_authorization) => text(StatusCode::OK, key_authorization),
        None => text(StatusCode::NOT_FOUND, "no such challenge\n".to_string()),
    })
}

/// The host the client asked for, without its port: from `Host`, or an absolute request
/// target. Only a plain host name or IP literal is used, so nothing else reaches `Location`.
fn request_host(headers: &HeaderMap, uri: &http::Uri) -> Option<String> {
    let authority = match headers.get(header::HOST) {
        Some(value) => value.to_str().ok()?.trim().to_string(),
        None => uri.authority()?.as_str().to_string(),
    };
    let host = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (literal, rest) = authority.split_at(end + 1);
        if !(rest.is_empty() || is_port(rest.strip_prefix(':')?)) {
            return None;
        }
        let inside = &literal[1..literal.len() - 1];
        inside.parse::<std::net::Ipv6Addr>().ok()?;
        literal.to_string()
    } else {
        let host = match authority.rsplit_once(':') {
            Some((host, port)) if is_port(port) => host,
            Some(_) => return None,
            None => authority.as_str(),
        };
        let fine = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !fine {
            return None;
        }
        host.to_ascii_lowercase()
    };
    Some(host)
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, TEXT);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_of(host: &str) -> Option<String> {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        request_host(&headers, &http::Uri::from_static("/"))
    }

    #[test]
    fn the_host_is_kept_and_its_port_dropped() {
        assert_eq!(host_of("Example.COM").as_deref(), Some("example.com"));
        assert_eq!(host_of("example.com:80").as_deref(), Some("example.com"));
        assert_eq!(host_of("203.0.113.9:8080").as_deref(), Some("203.0.113.9"));
        assert_eq!(
            host_of("[2001:db8::1]:80").as_deref(),
            Some("[2001:db8::1]")
        );
        assert_eq!(host_of("[2001:db8::1]").as_deref(), Some("[2001:db8::1]"));
        for bad in [
            "",
            "exa mple.com",
            "example.com:http",
            "evil.example/x",
            "a@b",
            "[nope]:80",
            "[::1]x",
        ] {
            assert_eq!(host_of(bad), None, "{bad:?}");
        }
        let absolute = http::Uri::from_static("http://Site.example:80/x?y");
        assert_eq!(
            request_host(&HeaderMap::new(), &absolute).as_deref(),
            Some("site.example")
        );
    }
}
