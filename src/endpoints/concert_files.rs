//! `/_concert/…`: the waiting page's own files and the skip-link configuration. The fast lane is
//! not part of this build, so its other routes answer as an installation without it does.

use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderValue, Method, Response, StatusCode, header};

use crate::paths::reserved::{CONCERT_CONFIG, without_trailing_slash};
use crate::respond::Rejection;
use crate::respond::values::{NO_STORE, json_response};
use crate::room::page::concert_asset;

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
    if let Some((content_type, body)) = concert_asset(path) {
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
            HeaderValue::from_static("default-src 'self'; img-src 'self' data: https:"),
        );
        return response;
    }
    json_response(
        StatusCode::NOT_FOUND,
        r#"{"error":"fast_lane_disabled"}"#.to_string(),
    )
}
