//! Header values and JSON answers shared by everything Concert answers itself, defined once.

use axum::body::Body;
use http::{HeaderValue, Response, StatusCode, header};

pub(crate) const JSON: HeaderValue = HeaderValue::from_static("application/json; charset=utf-8");
pub(crate) const HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");
pub(crate) const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
/// Every answer Concert makes itself is about this moment (a position, a ban, a count), so no
/// cache may keep it.
pub(crate) const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

/// A JSON answer with `status`, never cached.
pub(crate) fn json_response(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, JSON);
    headers.insert(header::CACHE_CONTROL, NO_STORE);
    response
}

/// `{"error": message}` with `status`.
pub(crate) fn error_json(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, serde_json::json!({ "error": message }).to_string())
}
