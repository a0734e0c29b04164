//! The portal's answers that are not pages: plain refusals, JSON, and the headers every answer
//! carries.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use http::{HeaderName, HeaderValue, Response, StatusCode, header};
use serde::Serialize;

/// Scripts, styles, fonts and requests only from the portal itself: no inline script or style
/// anywhere, so an injected one would not run.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; font-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

pub(crate) fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

pub(crate) fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "not found")
}

pub(crate) fn forbidden() -> Response<Body> {
    text(StatusCode::FORBIDDEN, "forbidden")
}

pub(crate) fn json(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(e) => {
            tracing::error!("portal: cannot encode an answer: {e}");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot encode the answer",
            )
        }
    }
}

/// `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response<Body> {
    json(status, &serde_json::json!({ "error": message }))
}

/// A question the portal cannot answer, and why: small, so lookups can return it and the
/// handler turns it into `{"error": message}` with `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub message: &'static str,
}

impl Refusal {
    pub(crate) fn answer(self) -> Response<Body> {
        error(self.status, self.message)
    }
}

pub(crate) fn html(status: StatusCode, page: String) -> Response<Body> {
    let mut response = Response::new(Body::from(page));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

pub(crate) fn see_other(location: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SEE_OTHER;
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(location));
    response
}

/// Adds the security headers to every answer; `Cache-Control: no-store` unless the handler
/// chose a cache rule (the static files do).
pub(crate) async fn security_headers(request: Request, next: Next) -> Response<Body> {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let fixed: [(HeaderName, &'static str); 4] = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
