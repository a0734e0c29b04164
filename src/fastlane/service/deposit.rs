//! Deposits, listings, the shop and the market: `POST /deposit` derives a session's payment
//! intent (amount with dust, XRPL tag or memo), `POST /deposit/check` asks the gateway for the
//! transfers that pay it and records each once as a settled receipt, `GET /shop` lists what is
//! for sale and `GET /market` the XRPL sell offers of a collection.

use std::net::IpAddr;

use axum::body::Body;
use http::{HeaderMap, Response, StatusCode};

use super::FastLane;
use super::routes::error;
use super::session::Session;

/// Per-session check pacing and the market cache.
#[derive(Debug, Default)]
pub(super) struct DepositState {}

impl FastLane {
    /// `POST /deposit {network, listing?}`.
    pub(super) fn deposit(&self, body: &[u8], session: &Session, now: u64) -> Response<Body> {
        let _ = (body, session, now, &self.deposits);
        error(StatusCode::NOT_FOUND, "not_found")
    }

    /// `POST /deposit/check {network, listing?}`.
    pub(super) async fn deposit_check(
        &self,
        body: &[u8],
        session: &Session,
        client: IpAddr,
        now: u64,
    ) -> Response<Body> {
        let _ = (body, session, client, now);
        error(StatusCode::NOT_FOUND, "not_found")
    }

    /// `GET /shop`.
    pub(super) fn shop(&self, headers: &HeaderMap, now: u64) -> Response<Body> {
        let _ = (headers, now);
        error(StatusCode::NOT_FOUND, "not_found")
    }

    /// `GET /market?rule=`.
    pub(super) async fn market(&self, query: Option<&str>) -> Response<Body> {
        let _ = query;
        error(StatusCode::NOT_FOUND, "not_found")
    }
}
