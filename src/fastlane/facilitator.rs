//! The seam between the service and the gateway: what the service asks of a facilitator. The
//! in-process gateway implements it; the service's tests use a scripted one.

use serde_json::Value;

use super::mechanism::BoxFuture;
use super::x402::{FacilitatorRequest, SettleResponse, SupportedKind, VerifyResponse};

/// Why the gateway gave no verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// The request itself is wrong (version, terms, resource, unknown network): a client error.
    #[error("rejected: {0}")]
    Rejected(String),
    /// A chain or the journal could not answer now; trying again later may work.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The gateway is closing or its journal is unhealthy; it takes nothing new.
    #[error("closed")]
    Closed,
}

/// The gateway's operations, as the service calls them.
pub trait Facilitator: Send + Sync + 'static {
    /// One kind per configured mechanism.
    fn supported(&self) -> Vec<SupportedKind>;

    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, GatewayError>>;

    /// Settles in a task of its own: dropping the returned future (the client went away) does
    /// not stop the settlement, and its outcome is journaled either way.
    fn settle(
        &self,
        request: FacilitatorRequest,
    ) -> BoxFuture<'static, Result<SettleResponse, GatewayError>>;

    /// `/solana/prepare`: an unsigned transfer for the page's wallet to sign.
    fn solana_prepare<'a>(
        &'a self,
        request: &'a Value,
    ) -> BoxFuture<'a, Result<Value, GatewayError>>;
}
