//! Every answer Concert gives on its own instead of the origin's, in one place.
//!
//! A stage that refuses a request returns a [`Rejection`]; the value knows its status, its
//! headers, its body for browsers and for API clients, and the strike it charges, so the same
//! refusal is never built twice in two shapes. [`Rejection::for_client`] picks the form the
//! client prefers; both it and the bare rejection (API form) are `IntoResponse`.

mod pages;
pub(crate) mod values;

use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderValue, Response, StatusCode, header};

use crate::abuse::{BanLength, Offense};
use crate::wire::intake::IntakeError;
use values::{HTML, JSON, NO_STORE, TEXT};

/// `Retry-After` seconds when every stream slot is taken.
pub(crate) const STREAMS_FULL_RETRY_AFTER: u32 = 5;
/// `Retry-After` seconds when an asset pool stays full: asset requests are short, so the
/// browser may try again at once.
const ASSET_POOL_RETRY_AFTER: u32 = 1;

/// `Retry-After` seconds when the upload buffer is full: uploads take a while to drain.
const UPLOADS_BUSY_RETRY_AFTER: u32 = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Malformed request (bad path, smuggling attempt, bad JSON body); the connection closes
    /// after the answer, as nothing after it can be trusted.
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
    /// The client's address (IPv6: its /64) already has `-max-queue-per-ip` visitors waiting.
    AddressLineFull { retry_after: u32 },
    /// An admin route while no admin token is configured: it does not exist.
    AdminDisabled,
    /// An admin route with a missing or wrong token.
    Unauthorized,
    /// Something broke inside Concert (never caused by input).
    Internal,
    /// The client is banned: 429 with `Retry-After` while timed, 403 when permanent.
    Banned(BanLength),
    /// A form submission met a busy room and found no priority-lane slot in time: it is not
    /// delivered, and the client is told to send it again.
    LaneFull { retry_after: u32 },
    /// A fast-lane visitor's form met a busy room and found no lane slot in time: not
    /// delivered, not charged again, and the pass stays valid.
    FastLaneBusy { retry_after: u32 },
    /// An asset or stream path without a valid admission pass.
    NoPass,
    /// The admission pass's own asset pool stayed full for `-asset-user-wait`.
    AssetUserPoolFull,
    /// The shared asset pool stayed full for `-asset-wait`.
    AssetPoolFull,
    /// Every stream slot is taken.
    StreamsFull,
    /// The origin gave no usable answer.
    BadGateway,
    /// The request cannot be sent to the origin as it stands (a target the origin's URI cannot
    /// hold).
    Unforwardable,
    /// The client's request body broke off or could not be decoded before the origin answered.
    BadRequestBody,
    /// The client's upload stalled, or came too slowly: within `-upstream-timeout` while it
    /// streamed to the origin, or past a deadline while Concert took it in.
    UploadTimedOut,
    /// The request body is larger than Concert takes (`-max-body`, or the admin limit).
    BodyTooLarge,
    /// The page uploads being buffered already take `-upload-disk-limit`: try again shortly.
    UploadsBusy,
    /// An operator removed this visitor's ticket from the line.
    RemovedFromLine,
}

impl Rejection {
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::BadRequest(_) | Rejection::Unforwardable | Rejection::BadRequestBody => {
                StatusCode::BAD_REQUEST
            }
            Rejection::UriTooLong => StatusCode::URI_TOO_LONG,
            Rejection::TooManyHeaders => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Rejection::ReservedNotFound | Rejection::AdminDisabled => StatusCode::NOT_FOUND,
            Rejection::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Rejection::QueueFull { .. }
            | Rejection::LaneFull { .. }
            | Rejection::FastLaneBusy { .. }
            | Rejection::AssetPoolFull
            | Rejection::StreamsFull
            | Rejection::UploadsBusy => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Unauthorized => StatusCode::UNAUTHORIZED,
            Rejection::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Rejection::Banned(BanLength::Permanent)
            | Rejection::NoPass
            | Rejection::RemovedFromLine => StatusCode::FORBIDDEN,
            Rejection::Banned(BanLength::Timed(_))
            | Rejection::AssetUserPoolFull
            | Rejection::AddressLineFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            Rejection::BadGateway => StatusCode::BAD_GATEWAY,
            Rejection::UploadTimedOut => StatusCode::REQUEST_TIMEOUT,
            Rejection::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// What this refusal charges the client in the abuse registry, if anything.
    pub fn offense(&self) -> Option<Offense> {
        match self {
            Rejection::Unauthorized => Some(Offense::WrongAdminToken),
            Rejection::AssetUserPoolFull => Some(Offense::AssetPoolExhausted),
            _ => None,
        }
    }

    /// The refusal in the form the client prefers: pages for browsers (`html`), JSON or plain
    /// text otherwise.
    pub fn for_client(self, html: bool) -> Refusal {
        Refusal {
            rejection: self,
            html,
        }
    }

    /// `Retry-After` seconds, where the refusal is one that passes.
    fn retry_after(&self) -> Option<u64> {
        match self {
            Rejection::QueueFull { retry_after }
            | Rejection::LaneFull { retry_after }
            | Rejection::FastLaneBusy { retry_after }
            | Rejection::AddressLineFull { retry_after } => Some(u64::from(*retry_after)),
            Rejection::Banned(length) => length.retry_after_secs(),
            Rejection::AssetUserPoolFull | Rejection::AssetPoolFull => {
                Some(u64::from(ASSET_POOL_RETRY_AFTER))
            }
            Rejection::StreamsFull => Some(u64::from(STREAMS_FULL_RETRY_AFTER)),
            Rejection::UploadsBusy => Some(u64::from(UPLOADS_BUSY_RETRY_AFTER)),
            _ => None,
        }
    }

    /// Whether the client's connection must close after the answer: what it sent next cannot
    /// be told apart from the broken request (or the rest of an unread body).
    fn closes_connection(&self) -> bool {
        matches!(
            self,
            Rejection::BadRequest(_)
                | Rejection::BadRequestBody
                | Rejection::UploadTimedOut
                | Rejection::BodyTooLarge
        )
    }

    /// The body and its content type (`None` for an empty body).
    fn body(self, html: bool) -> (Option<HeaderValue>, Body) {
        let page_or_json = |page: String, json: String| {
            if html {
                (Some(HTML), Body::from(page))
            } else {
                (Some(JSON), Body::from(json))
            }
        };
        match self {
            Rejection::QueueFull { retry_after } => page_or_json(
                pages::queue_full_page(retry_after),
                pages::queue_full_json(retry_after),
            ),
            Rejection::LaneFull { retry_after } => {
                page_or_json(pages::busy_page(retry_after), pages::busy_json(retry_after))
            }
            Rejection::FastLaneBusy { retry_after } => page_or_json(
                pages::fast_lane_busy_page(retry_after),
                pages::fast_lane_busy_json(retry_after),
            ),
            Rejection::AddressLineFull { retry_after } => page_or_json(
                pages::address_line_full_page(retry_after),
                pages::address_line_full_json(retry_after),
            ),
            Rejection::Banned(length) => {
                let content_type = if html { HTML } else { JSON };
                (
                    Some(content_type),
                    Body::from(pages::banned_body(length, html)),
                )
            }
            Rejection::RemovedFromLine => {
                page_or_json(pages::removed_page(), pages::REMOVED_JSON.to_owned())
            }
            Rejection::BadRequest(reason) => {
                (Some(TEXT), Body::from(format!("bad request: {reason}\n")))
            }
            Rejection::UriTooLong => (Some(TEXT), Body::from("request target too long\n")),
            Rejection::TooManyHeaders => {
                (Some(TEXT), Body::from("too many request header fields\n"))
            }
            Rejection::ReservedNotFound => (Some(TEXT), Body::from("not found\n")),
            Rejection::MethodNotAllowed { .. } => (Some(TEXT), Body::from("method not allowed\n")),
            Rejection::BadGateway => (Some(TEXT), Body::from("upstream unavailable\n")),
            Rejection::Unforwardable | Rejection::BadRequestBody => {
                (Some(TEXT), Body::from("bad request\n"))
            }
            Rejection::UploadTimedOut => (Some(TEXT), Body::from("request body timed out\n")),
            Rejection::BodyTooLarge => (Some(TEXT), Body::from("request body too large\n")),
            Rejection::UploadsBusy => (
                Some(TEXT),
                Body::from("too many uploads in progress, try again shortly\n"),
            ),
            Rejection::AdminDisabled
            | Rejection::Unauthorized
            | Rejection::Internal
            | Rejection::NoPass
            | Rejection::AssetUserPoolFull
            | Rejection::AssetPoolFull
            | Rejection::StreamsFull => (None, Body::empty()),
        }
    }
}

impl From<&IntakeError> for Rejection {
    fn from(error: &IntakeError) -> Rejection {
        match error {
            IntakeError::TooLarge => Rejection::BodyTooLarge,
            IntakeError::TimedOut => Rejection::UploadTimedOut,
            IntakeError::Broken(_) => Rejection::BadRequestBody,
            IntakeError::Spool(_) => Rejection::Internal,
            IntakeError::SpoolFull => Rejection::UploadsBusy,
        }
    }
}

/// A [`Rejection`] in the form one client prefers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub rejection: Rejection,
    /// Pages for a browser; JSON or plain text otherwise.
    pub html: bool,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response<Body> {
        let Refusal { rejection, html } = self;
        let status = rejection.status();
        let retry_after = rejection.retry_after();
        let closes = rejection.closes_connection();
        let allow = match &rejection {
            Rejection::MethodNotAllowed { allow } => Some(*allow),
            _ => None,
        };
        let (content_type, body) = rejection.body(html);
        let mut response = Response::new(body);
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, NO_STORE);
        if let Some(content_type) = content_type {
            headers.insert(header::CONTENT_TYPE, content_type);
        }
        if let Some(seconds) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(allow) = allow {
            headers.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if closes {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The API form: JSON or plain text.
impl IntoResponse for Rejection {
    fn into_response(self) -> Response<Body> {
        self.for_client(false).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::time::Duration;

    async fn body_text(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn queue_full_answers_json_with_retry_after() {
        let response = Rejection::QueueFull { retry_after: 5 }.into_response();
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
        let response = Rejection::QueueFull { retry_after: 7 }
            .for_client(true)
            .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        let text = body_text(response).await;
        assert!(text.contains("http-equiv=\"refresh\" content=\"7\""));
    }

    #[test]
    fn only_wrong_tokens_and_exhausted_asset_pools_cost_strikes() {
        assert_eq!(
            Rejection::Unauthorized.offense(),
            Some(Offense::WrongAdminToken)
        );
        assert_eq!(Offense::WrongAdminToken.weight(), 5);
        assert_eq!(
            Rejection::AssetUserPoolFull.offense(),
            Some(Offense::AssetPoolExhausted)
        );
        assert_eq!(Offense::AssetPoolExhausted.weight(), 1);
        for free in [
            Rejection::ReservedNotFound,
            Rejection::AssetPoolFull,
            Rejection::NoPass,
            Rejection::StreamsFull,
        ] {
            assert_eq!(free.offense(), None, "{free:?}");
        }
        assert_eq!(
            Rejection::MethodNotAllowed { allow: "GET" }
                .into_response()
                .headers()[header::ALLOW],
            "GET"
        );
    }

    #[tokio::test]
    async fn bans_are_429_while_timed_and_403_when_permanent() {
        let timed = Rejection::Banned(BanLength::Timed(Duration::from_millis(299_500)))
            .for_client(true)
            .into_response();
        assert_eq!(timed.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(timed.headers()[header::RETRY_AFTER], "300");
        assert_eq!(
            timed.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        let permanent = Rejection::Banned(BanLength::Permanent).into_response();
        assert_eq!(permanent.status(), StatusCode::FORBIDDEN);
        assert!(permanent.headers().get(header::RETRY_AFTER).is_none());
        assert_eq!(
            body_text(permanent).await,
            r#"{"error":"blocked","permanent":true}"#
        );
    }

    #[tokio::test]
    async fn a_fast_lane_form_the_lane_could_not_take_says_nothing_was_charged() {
        let response = Rejection::FastLaneBusy { retry_after: 7 }.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        assert_eq!(
            body_text(response).await,
            r#"{"error":"fast_lane_busy","submitted":false,"charged_again":false,"retry_after_seconds":7}"#
        );
        let page = Rejection::FastLaneBusy { retry_after: 7 }
            .for_client(true)
            .into_response();
        assert_eq!(page.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(body_text(page).await.contains("not charged again"));
    }

    #[tokio::test]
    async fn a_form_the_lane_could_not_take_is_not_sent() {
        let response = Rejection::LaneFull { retry_after: 5 }.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        assert_eq!(
            body_text(response).await,
            r#"{"error":"busy","submitted":false,"retry_after_seconds":5}"#
        );
        let page = Rejection::LaneFull { retry_after: 5 }
            .for_client(true)
            .into_response();
        assert_eq!(
            page.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
    }

    #[tokio::test]
    async fn tier_refusals_are_empty_with_retry_after_where_they_pass() {
        for (rejection, status, retry_after) in [
            (Rejection::NoPass, StatusCode::FORBIDDEN, None),
            (
                Rejection::AssetUserPoolFull,
                StatusCode::TOO_MANY_REQUESTS,
                Some("1"),
            ),
            (
                Rejection::AssetPoolFull,
                StatusCode::SERVICE_UNAVAILABLE,
                Some("1"),
            ),
            (
                Rejection::StreamsFull,
                StatusCode::SERVICE_UNAVAILABLE,
                Some("5"),
            ),
        ] {
            let response = rejection.into_response();
            assert_eq!(response.status(), status);
            assert_eq!(
                response
                    .headers()
                    .get(header::RETRY_AFTER)
                    .map(|v| v.to_str().unwrap()),
                retry_after
            );
            assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
            assert!(body_text(response).await.is_empty());
        }
    }

    #[test]
    fn broken_requests_close_their_connection() {
        for rejection in [
            Rejection::BadRequest("x".into()),
            Rejection::BadRequestBody,
            Rejection::UploadTimedOut,
            Rejection::BodyTooLarge,
        ] {
            assert_eq!(
                rejection.into_response().headers()[header::CONNECTION],
                "close"
            );
        }
        let response = Rejection::BadGateway.into_response();
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert!(response.headers().get(header::CONNECTION).is_none());
    }
}
