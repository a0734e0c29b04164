//! NFT admission: `POST /nft/challenge` issues a message for the wallet to sign, `POST
//! /nft/verify` has the gateway check the signature and the holding, and a verified holder
//! gets a lease of `nft_pass_seconds`. Challenges and leases live in memory only.

use std::net::IpAddr;

use axum::body::Body;
use http::{Response, StatusCode};

use super::FastLane;
use super::routes::error;
use super::session::Session;

/// Open challenges and granted leases.
#[derive(Debug, Default)]
pub(super) struct NftState {}

impl FastLane {
    /// `POST /nft/challenge {rule, address, token_id}`.
    pub(super) fn nft_challenge(&self, body: &[u8], session: &Session, now: u64) -> Response<Body> {
        let _ = (body, session, now, &self.nft);
        error(StatusCode::NOT_FOUND, "not_found")
    }

    /// `POST /nft/verify {nonce, signature, public_key}`.
    pub(super) async fn nft_verify(
        &self,
        body: &[u8],
        session: &Session,
        client: IpAddr,
        now: u64,
    ) -> Response<Body> {
        let _ = (body, session, client, now);
        error(StatusCode::NOT_FOUND, "not_found")
    }
}
