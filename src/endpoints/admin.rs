//! The admin API under `/_room/`: the live cap and the abuse registry (list, unban, ban), all
//! behind `Authorization: Bearer <CONCERT_ADMIN_TOKEN>`. The token is checked before any of a
//! request's body is read, and a body is read only up to [`ADMIN_BODY_LIMIT`] and within the
//! body deadlines.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::Extension;
use axum::response::IntoResponse;
use http::{HeaderMap, Response, StatusCode, header};
use serde_json::json;
use subtle::ConstantTimeEq;

use crate::app::{App, ChangeError};
use crate::respond::Rejection;
use crate::respond::values::{error_json, json_response};
use crate::wire::intake::{IntakeLimits, collect};

/// Largest admin request body: the calls carry a few fields of JSON.
const ADMIN_BODY_LIMIT: u64 = 64 * 1024;

/// An authorised admin call's body, read within the admin limit and the body deadlines; the
/// refusal (413, 408, 400) otherwise.
async fn read_admin_body(app: &App, body: Body) -> Result<Bytes, Response<Body>> {
    let config = &app.generation().config;
    let limits = IntakeLimits::starting_now(
        ADMIN_BODY_LIMIT,
        config.body_progress_timeout,
        config.upload_timeout,
    );
    collect(body, limits)
        .await
        .map_err(|error| Rejection::from(&error).into_response())
}

/// The resolved client of an admin request, for strikes.
#[derive(Clone, Copy)]
pub(super) struct Client(pub(super) Option<IpAddr>);

/// Bearer-token check for admin routes: no token configured → the route does not exist (404);
/// missing or wrong token → 401 and strikes. Compared in constant time.
fn authorize(app: &App, headers: &HeaderMap, client: Option<IpAddr>) -> Result<(), Rejection> {
    let generation = app.generation();
    let expected = generation.config.admin_token.as_bytes();
    if expected.is_empty() {
        return Err(Rejection::AdminDisabled);
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .unwrap_or("");
    if bool::from(presented.as_bytes().ct_eq(expected)) {
        Ok(())
    } else {
        let rejection = Rejection::Unauthorized;
        if let Some(offense) = rejection.offense() {
            app.strike(client, offense);
        }
        Err(rejection)
    }
}

#[derive(serde::Deserialize)]
struct CapBody {
    cap: Option<i64>,
}

pub(super) async fn set_cap(
    Extension(app): Extension<Arc<App>>,
    Extension(Client(client)): Extension<Client>,
    headers: HeaderMap,
    body: Body,
) -> Response<Body> {
    if let Err(rejection) = authorize(&app, &headers, client) {
        return rejection.into_response();
    }
    let body = match read_admin_body(&app, body).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let requested: CapBody = match crate::store::json_object(&body) {
        Ok(parsed) => parsed,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let cap = match requested.cap.map(u32::try_from) {
        Some(Ok(cap)) if (1..=i32::MAX as u32).contains(&cap) => cap,
        _ => {
            return error_json(
                StatusCode::BAD_REQUEST,
                "cap must be a whole number between 1 and 2147483647",
            );
        }
    };
    let mut change = serde_json::Map::new();
    change.insert("cap".into(), json!(cap));
    match app.apply_change(&change, &[]) {
        Ok(_) => {
            let room = app.room.stats();
            tracing::info!(cap, "cap changed through /_room/cap");
            json_response(
                StatusCode::OK,
                json!({"cap": room.cap, "occupancy": room.occupancy}).to_string(),
            )
        }
        Err(e) => change_error(&e),
    }
}

/// A refused change: the caller's mistake (400) or a failed save (500, nothing applied).
fn change_error(error: &ChangeError) -> Response<Body> {
    let status = match error {
        ChangeError::Invalid(_) | ChangeError::Refused(_) => StatusCode::BAD_REQUEST,
        ChangeError::Persist(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error_json(status, &error.to_string())
}

/// Admin ban changes are acknowledged only once bans.json holds them.
fn flush_bans_or_fail(app: &App) -> Option<Response<Body>> {
    let error = app.flush_bans().err()?;
    tracing::error!("cannot save bans: {error}");
    Some(error_json(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("the change is in effect but could not be saved: {error}"),
    ))
}

/// The abuse routes' gate: the admin token first (a wrong one is struck), then whether the
/// registry is on at all.
fn abuse_gate(app: &App, headers: &HeaderMap, client: Option<IpAddr>) -> Option<Response<Body>> {
    if let Err(rejection) = authorize(app, headers, client) {
        return Some(rejection.into_response());
    }
    if !app.abuse.enabled() {
        return Some(error_json(
            StatusCode::NOT_FOUND,
            &crate::abuse::BanError::Disabled.to_string(),
        ));
    }
    None
}

/// `GET /_room/abuse`: active bans, range count and tracked clients.
pub(super) async fn abuse_list(
    Extension(app): Extension<Arc<App>>,
    Extension(Client(client)): Extension<Client>,
    headers: HeaderMap,
) -> Response<Body> {
    if let Some(refused) = abuse_gate(&app, &headers, client) {
        return refused;
    }
    let body = json!({
        "bans": app.abuse.bans(),
        "ranges": app.abuse.range_count(),
        "tracked": app.abuse.tracked(),
    });
    json_response(StatusCode::OK, body.to_string())
}

/// `DELETE /_room/abuse?client=X`: lifts a client (address or /64) or a range, forgetting its
/// offense history.
pub(super) async fn abuse_unban(
    Extension(app): Extension<Arc<App>>,
    Extension(Client(client)): Extension<Client>,
    headers: HeaderMap,
    query: Result<
        axum::extract::Query<Vec<(String, String)>>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Response<Body> {
    if let Some(refused) = abuse_gate(&app, &headers, client) {
        return refused;
    }
    // The first `client=` counts when it is repeated (Go's `Query().Get` reads the first too,
    // and scripts written against it send one), not the last as a map would keep it.
    let named = query
        .ok()
        .and_then(|axum::extract::Query(pairs)| {
            pairs
                .into_iter()
                .find_map(|(key, value)| (key == "client").then_some(value))
        })
        .unwrap_or_default();
    let target = match crate::abuse::BanTarget::parse(&named) {
        Ok(target) => target,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let shown = target.to_string();
    if !app.abuse.unban_target(target) {
        return json_response(
            StatusCode::NOT_FOUND,
            json!({"client": shown, "error": "client not tracked"}).to_string(),
        );
    }
    if let Some(failed) = flush_bans_or_fail(&app) {
        return failed;
    }
    json_response(StatusCode::OK, json!({ "unbanned": shown }).to_string())
}

#[derive(serde::Deserialize)]
struct BanBody {
    #[serde(default)]
    client: String,
    #[serde(default)]
    duration: String,
    #[serde(default)]
    permanent: bool,
}

/// `POST /_room/abuse` `{"client": "...", "duration": "1h"}`, or `"duration": "permanent"` /
/// `"permanent": true`: bans an address, a /64 or a range, and drops its waiting visitors.
pub(super) async fn abuse_ban(
    Extension(app): Extension<Arc<App>>,
    Extension(Client(client)): Extension<Client>,
    headers: HeaderMap,
    body: Body,
) -> Response<Body> {
    use crate::abuse::{BanError, BanLength, BanTarget};
    if let Some(refused) = abuse_gate(&app, &headers, client) {
        return refused;
    }
    let body = match read_admin_body(&app, body).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let request: BanBody = match crate::store::json_object(&body) {
        Ok(parsed) => parsed,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let target = match BanTarget::parse(&request.client) {
        Ok(target) => target,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let length = match BanLength::from_request(&request.duration, request.permanent) {
        Ok(length) => length,
        Err(problem) => return error_json(StatusCode::BAD_REQUEST, problem),
    };
    match app.abuse.ban(target, length) {
        Ok(outcome) => match serde_json::to_string(&outcome) {
            Ok(_) if let Some(failed) = flush_bans_or_fail(&app) => failed,
            Ok(text) => json_response(StatusCode::OK, text),
            Err(_) => Rejection::Internal.into_response(),
        },
        Err(e @ (BanError::BadTarget | BanError::TooBroad)) => {
            error_json(StatusCode::BAD_REQUEST, &e.to_string())
        }
        Err(e) => error_json(StatusCode::CONFLICT, &e.to_string()),
    }
}
