//! `GET /queue/status`: the waiting page's poll. One locked step on the visitor's shard of the
//! room, and a small JSON answer the page reads.

use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};

use crate::admission::cookies::{CookieAttrs, TICKET, read_cookie};
use crate::app::App;
use crate::cluster::Cluster;
use crate::respond::Rejection;
use crate::respond::values::{JSON, NO_STORE};
use crate::room::{PollOutcome, Room};

/// The answer that sends the waiting page in: it reloads, and the reload is admitted (or, for
/// a banned client, meets the block notice).
pub(crate) const READY: &str = r#"{"ready":true}"#;

/// The poll answer. `OPTIONS` → 204; methods other than GET and HEAD → 405. `cookies` and
/// `ticket_max_age` re-send the room cookies when the room says they are due; `tls` marks
/// them `Secure`.
pub(crate) fn answer(
    room: &Room,
    cookies: &CookieAttrs,
    ticket_max_age: u64,
    tls: bool,
    method: &Method,
    headers: &HeaderMap,
) -> Response<Body> {
    if let Some(early) = method_answer(method) {
        return early;
    }
    let ticket = read_cookie(headers, TICKET);
    // A removed visitor's page is sent in, to be told what happened.
    let outcome = match ticket {
        Some(token) if room.was_removed(token) => PollOutcome::Ready,
        _ => room.poll(ticket),
    };
    respond(&outcome, ticket, cookies, ticket_max_age, tls)
}

/// [`answer`] while the cluster's shared line is live: the place is read from Redis, so a
/// ticket issued on any instance is answered here.
pub(crate) async fn answer_shared(
    app: &App,
    cluster: &Cluster,
    cookies: &CookieAttrs,
    ticket_max_age: u64,
    tls: bool,
    method: &Method,
    headers: &HeaderMap,
) -> Response<Body> {
    if let Some(early) = method_answer(method) {
        return early;
    }
    let ticket = read_cookie(headers, TICKET);
    let outcome = match ticket {
        Some(token) if app.room.was_removed(token) => PollOutcome::Ready,
        _ => crate::cluster::line::poll_outcome(app, cluster, ticket).await,
    };
    respond(&outcome, ticket, cookies, ticket_max_age, tls)
}

/// The answer to methods other than GET and HEAD, if any.
fn method_answer(method: &Method) -> Option<Response<Body>> {
    match *method {
        Method::GET | Method::HEAD => {}
        Method::OPTIONS => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::NO_CONTENT;
            response.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, OPTIONS"),
            );
            return Some(response);
        }
        _ => {
            return Some(
                Rejection::MethodNotAllowed {
                    allow: "GET, HEAD, OPTIONS",
                }
                .into_response(),
            );
        }
    }
    None
}

fn respond(
    outcome: &PollOutcome,
    ticket: Option<&str>,
    cookies: &CookieAttrs,
    ticket_max_age: u64,
    tls: bool,
) -> Response<Body> {
    let (status, body, refresh) = status_body(outcome);
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, JSON);
    headers.insert(header::CACHE_CONTROL, NO_STORE);
    if status == StatusCode::TOO_MANY_REQUESTS {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let (true, Some(token)) = (refresh, ticket) {
        cookies.append_room_cookies(headers, token, ticket_max_age, tls);
    }
    response
}

/// The JSON of one poll outcome (zero values omitted, as the page expects), its status, and
/// whether the room cookies must be re-sent.
pub fn status_body(outcome: &PollOutcome) -> (StatusCode, String, bool) {
    use serde_json::{Map, Value, json};
    match outcome {
        PollOutcome::CookiesRequired => (
            StatusCode::OK,
            r#"{"ready":false,"cookies_required":true}"#.to_string(),
            false,
        ),
        PollOutcome::Ready => (StatusCode::OK, READY.to_string(), false),
        PollOutcome::Throttled { position } => (
            StatusCode::TOO_MANY_REQUESTS,
            format!(r#"{{"ready":false,"position":{position}}}"#),
            false,
        ),
        PollOutcome::Waiting {
            position,
            utilization,
            has_pass,
            refresh_cookies,
            rate_per_pos,
            skip_cost,
            estimate,
        } => {
            let mut map = Map::new();
            map.insert("ready".into(), Value::Bool(false));
            map.insert("position".into(), json!(position));
            if *utilization != 0.0 {
                map.insert("utilization".into(), json!(utilization));
            }
            if let Some(cost) = skip_cost.filter(|c| *c != 0.0) {
                map.insert("skip_cost".into(), json!(cost));
            }
            if let Some(rate) = rate_per_pos.filter(|r| *r != 0.0) {
                map.insert("rate_per_pos".into(), json!(rate));
            }
            if *has_pass {
                map.insert("has_pass".into(), Value::Bool(true));
            }
            map.insert("wait_known".into(), Value::Bool(estimate.known));
            if estimate.known {
                map.insert("wait_min_seconds".into(), json!(estimate.min_secs));
                map.insert("wait_max_seconds".into(), json!(estimate.max_secs));
            }
            (
                StatusCode::OK,
                Value::Object(map).to_string(),
                *refresh_cookies,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::WaitEstimate;

    #[test]
    fn status_json_omits_zero_values_and_reports_the_estimate() {
        let (status, body, refresh) = status_body(&PollOutcome::Waiting {
            position: 4,
            utilization: 0.0,
            has_pass: false,
            refresh_cookies: true,
            rate_per_pos: None,
            skip_cost: None,
            estimate: WaitEstimate {
                known: true,
                min_secs: 40,
                max_secs: 70,
            },
        });
        assert_eq!(status, StatusCode::OK);
        assert!(refresh);
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(value["ready"], false);
        assert_eq!(value["position"], 4);
        assert!(value.get("utilization").is_none());
        assert!(value.get("has_pass").is_none());
        assert_eq!(value["wait_known"], true);
        assert_eq!(value["wait_min_seconds"], 40);
        assert_eq!(value["wait_max_seconds"], 70);

        let (status, body, _) = status_body(&PollOutcome::Throttled { position: 2 });
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body, r#"{"ready":false,"position":2}"#);
        assert_eq!(status_body(&PollOutcome::Ready).1, r#"{"ready":true}"#);
    }
}
