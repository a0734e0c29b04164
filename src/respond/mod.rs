//! Every answer Concert gives on its own (instead of the origin's), in one place.
//!
//! A handler returns a `Rejection`; the value knows its status, headers and body for both HTML and
//! API clients, so the same refusal is never built twice in different shapes.

use axum::body::Body;
use http::{HeaderValue, Response, StatusCode, header};

const JSON: HeaderValue = HeaderValue::from_static("application/json; charset=utf-8");
const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
const HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Malformed request (bad path, smuggling attempt, bad JSON body).
    BadRequest(String),
    /// The request target is longer than Concert accepts.
    UriTooLong,
    /// More header fields than Concert accepts (HTTP/1 requests get this from hyper).
    TooManyHeaders,
    /// An unknown path under a reserved prefix (`/_room/…`, `/_concert/…`): answered here so it
    /// never leaks to the origin.
    ReservedNotFound,
    /// A reserved path asked with a method it does not serve.
    MethodNotAllowed { allow: &'static str },
    /// The line is at `-max-queue`: a newcomer cannot even queue.
    QueueFull { retry_after: u32 },
    /// An admin route while no admin token is configured: it does not exist.
    AdminDisabled,
    /// An admin route with a missing or wrong token.
    Unauthorized,
    /// Something broke inside Concert (never caused by input).
    Internal,
    /// The client is banned: 429 with `Retry-After` while timed, 403 when permanent.
    Banned(crate::abuse::BanLength),
}

impl Rejection {
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::BadRequest(_) => StatusCode::BAD_REQUEST,
            Rejection::UriTooLong => StatusCode::URI_TOO_LONG,
            Rejection::TooManyHeaders => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Rejection::ReservedNotFound | Rejection::AdminDisabled => StatusCode::NOT_FOUND,
            Rejection::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Rejection::QueueFull { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Unauthorized => StatusCode::UNAUTHORIZED,
            Rejection::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Rejection::Banned(length) => crate::abuse::BanAnswer::new(*length).status(),
        }
    }

    /// Strikes this refusal charges against the client in the abuse registry.
    pub fn strike_weight(&self) -> u32 {
        match self {
            Rejection::Unauthorized => 5,
            _ => 0,
        }
    }

    /// The response for a client that prefers HTML (`html`) or JSON/plain text.
    pub fn into_response(self, html: bool) -> Response<Body> {
        let status = self.status();
        let mut builder = Response::builder()
            .status(status)
            .header(header::CACHE_CONTROL, NO_STORE);
        let body = match self {
            Rejection::QueueFull { retry_after } => {
                builder = builder.header(header::RETRY_AFTER, retry_after);
                if html {
                    builder = builder.header(header::CONTENT_TYPE, HTML);
                    Body::from(queue_full_page(retry_after))
                } else {
                    builder = builder.header(header::CONTENT_TYPE, JSON);
                    Body::from(format!(
                        "{{\"error\":\"waiting room is full\",\"queued\":false,\"retry_after_seconds\":{retry_after}}}"
                    ))
                }
            }
            Rejection::BadRequest(reason) => {
                builder = builder
                    .header(header::CONTENT_TYPE, TEXT)
                    .header(header::CONNECTION, "close");
                Body::from(format!("bad request: {reason}\n"))
            }
            Rejection::UriTooLong => {
                builder = builder.header(header::CONTENT_TYPE, TEXT);
                Body::from("request target too long\n")
            }
            Rejection::TooManyHeaders => {
                builder = builder.header(header::CONTENT_TYPE, TEXT);
                Body::from("too many request header fields\n")
            }
            Rejection::ReservedNotFound => {
                builder = builder.header(header::CONTENT_TYPE, TEXT);
                Body::from("not found\n")
            }
            Rejection::MethodNotAllowed { allow } => {
                builder = builder
                    .header(header::ALLOW, allow)
                    .header(header::CONTENT_TYPE, TEXT);
                Body::from("method not allowed\n")
            }
            Rejection::Banned(length) => {
                let answer = crate::abuse::BanAnswer::new(length);
                if let Some(secs) = answer.retry_after_secs() {
                    builder = builder.header(header::RETRY_AFTER, secs);
                }
                builder = builder.header(header::CONTENT_TYPE, if html { HTML } else { JSON });
                Body::from(answer.body(html))
            }
            Rejection::AdminDisabled | Rejection::Unauthorized | Rejection::Internal => {
                Body::empty()
            }
        };
        builder
            .body(body)
            .unwrap_or_else(|_| Response::new(Body::empty()))
    }
}

/// The page a browser gets when even the line is full. It retries by itself (meta refresh, no
/// script needed) instead of leaving the visitor on a bare error.
fn queue_full_page(retry_after: u32) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta http-equiv=\"refresh\" content=\"{retry_after}\">\
<title>The line is full</title><link rel=\"stylesheet\" href=\"/_concert/waiting.css\"></head>\
<body><main class=\"card\"><h1>The line is full right now</h1>\
<p>So many people are waiting that we cannot add you to the line yet. \
This page tries again by itself in {retry_after} seconds.</p></main></body></html>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body_text(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn queue_full_answers_json_with_retry_after() {
        let response = Rejection::QueueFull { retry_after: 5 }.into_response(false);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        let body: serde_json::Value = serde_json::from_str(&body_text(response).await).unwrap();
        assert_eq!(body["queued"], false);
        assert_eq!(body["retry_after_seconds"], 5);
        assert_eq!(body["error"], "waiting room is full");
    }

    #[tokio::test]
    async fn queue_full_gives_browsers_a_page_that_retries() {
        let response = Rejection::QueueFull { retry_after: 7 }.into_response(true);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        let text = body_text(response).await;
        assert!(text.contains("http-equiv=\"refresh\" content=\"7\""));
    }

    #[test]
    fn only_wrong_tokens_cost_strikes() {
        assert_eq!(Rejection::Unauthorized.strike_weight(), 5);
        assert_eq!(Rejection::ReservedNotFound.strike_weight(), 0);
        assert_eq!(
            Rejection::MethodNotAllowed { allow: "GET" }
                .into_response(false)
                .headers()[header::ALLOW],
            "GET"
        );
    }
}
