//! `/_concert/…` while no fast lane is configured: the waiting page's and the access page's
//! files and the skip-link configuration; every other route answers as an installation
//! without a fast lane does. A configured lane answers the whole tree itself
//! ([`crate::fastlane::service::FastLane::handle`]).

use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderValue, Method, Response, StatusCode, header};

use crate::fastlane::service::files;
use crate::paths::reserved::{CONCERT_CONFIG, CONCERT_TREE, without_trailing_slash};
use crate::respond::Rejection;
use crate::respond::values::{NO_STORE, json_response};

/// The answer for `path` under `/_concert`; `skip_url` is `-skip-url`.
pub(crate) fn answer(skip_url: &str, method: &Method, path: &str) -> Response<Body> {
    let path = without_trailing_slash(path);
    let readable = matches!(*method, Method::GET | Method::HEAD);
    if path == CONCERT_CONFIG {
        if !readable {
            return Rejection::MethodNotAllowed { allow: "GET, HEAD" }.into_response();
        }
        let body = serde_json::json!({
            "enabled": false,
            "legacy_skip_url": skip_url,
        })
        .to_string();
        return json_response(StatusCode::OK, body);
    }
    let relative = path.strip_prefix(CONCERT_TREE).unwrap_or(path);
    if let Some((content_type, body)) = files::static_file(relative) {
        if !readable {
            return Rejection::MethodNotAllowed { allow: "GET, HEAD" }.into_response();
        }
        let mut response = Response::new(Body::from(body));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::CACHE_CONTROL, NO_STORE);
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(files::CSP),
        );
        return response;
    }
    json_response(
        StatusCode::NOT_FOUND,
        r#"{"error":"fast_lane_disabled"}"#.to_string(),
    )
}
