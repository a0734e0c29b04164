//! Stage 5: the tiers outside the room. Asset and stream requests never take a page slot and
//! never queue: they need a valid admission pass (public assets excepted) and a slot of their
//! own tier, held until the answer has been delivered.

use axum::body::Body;
use axum::response::IntoResponse;
use http::{Request, Response};

use super::origin::forward;
use super::pass_check::{check_pass, with_cookie};
use super::request::RequestInfo;
use crate::app::{App, Generation};
use crate::wire::body::RequestBody;

/// `-assets`: a valid pass, a slot in the pass's own pool for its protocol family, then a
/// global slot; both held until the response is delivered. Never reaches the origin otherwise.
pub(super) async fn private_asset<B: RequestBody>(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<B>,
) -> Response<Body> {
    let tier = &generation.assets;
    let (status, slid) = check_pass(app, generation, info, req.headers());
    let Some(pass) = status.valid() else {
        return tier.deny().into_response();
    };
    let peer_trusted = info
        .conn
        .peer
        .is_some_and(|peer| generation.config.trusted_proxies.contains(peer));
    let family = tier.family(req.version(), req.headers(), peer_trusted);
    let response = match tier.admit_private(&pass.id, family).await {
        Ok(hold) => forward(app, generation, info, req, Some(Box::new(hold))).await,
        Err(refusal) => {
            if let Some(offense) = refusal.offense() {
                app.strike(info.client, offense);
            }
            refusal.into_response()
        }
    };
    with_cookie(response, slid)
}

/// `-asset-public`: no pass, only the global pool.
pub(super) async fn public_asset<B: RequestBody>(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<B>,
) -> Response<Body> {
    match generation.assets.admit_public().await {
        Ok(hold) => forward(app, generation, info, req, Some(Box::new(hold))).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// `-stream-paths`: a valid pass and a stream slot (never waited for), held for the life of the
/// streamed body or the upgraded connection.
pub(super) async fn stream<B: RequestBody>(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<B>,
) -> Response<Body> {
    let guard = &generation.streams;
    let (status, slid) = check_pass(app, generation, info, req.headers());
    if status.valid().is_none() {
        return guard.deny().into_response();
    }
    let response = match guard.enter() {
        Ok(slot) => forward(app, generation, info, req, Some(Box::new(slot))).await,
        Err(refusal) => refusal.into_response(),
    };
    with_cookie(response, slid)
}
