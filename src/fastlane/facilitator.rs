//! The seam between the service and the gateway: what the service asks of a facilitator. The
//! in-process gateway implements it; the service's tests use a scripted one.

use serde_json::Value;

use super::lookups::{NftClaim, NftVerdict, SellOffer};
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

    /// `/nft/verify`: re-checks the challenge message's lines, then asks the claim's network
    /// whether the signature is the wallet's and the wallet holds the token.
    fn nft_verify<'a>(
        &'a self,
        claim: &'a NftClaim,
    ) -> BoxFuture<'a, Result<NftVerdict, GatewayError>> {
        let _ = claim;
        Box::pin(std::future::ready(Err(GatewayError::Rejected(
            "NFT admission is not offered".into(),
        ))))
    }

    /// `/deposit/check`: the transfers that pay a session's deposit intent.
    fn deposit_check<'a>(
        &'a self,
        query: &'a DepositQuery,
    ) -> BoxFuture<'a, Result<Vec<DepositHit>, GatewayError>> {
        let _ = query;
        Box::pin(std::future::ready(Err(GatewayError::Rejected(
            "deposits are not offered".into(),
        ))))
    }

    /// `/market/sales`: open sell offers of a collection's NFTs.
    fn market<'a>(
        &'a self,
        network: &'a str,
        collection: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SellOffer>, GatewayError>> {
        let _ = (network, collection);
        Box::pin(std::future::ready(Err(GatewayError::Rejected(
            "no market is offered".into(),
        ))))
    }
}

/// How a deposit intent is recognised on chain, besides its exact amount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DepositReference {
    /// XRPL: the intent's destination tag.
    Tag(u32),
    /// Other chains: the intent's memo text.
    Memo(String),
}

/// What `/deposit/check` looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositQuery {
    pub network: String,
    pub pay_to: String,
    /// The intent's amount (price plus the session's dust): a transfer of exactly this counts.
    pub amount: u64,
    /// A transfer carrying the session's reference counts when it pays at least `minimum`.
    pub reference: DepositReference,
    pub minimum: u64,
    /// How far back to look, in seconds (capped by the gateway).
    pub lookback_seconds: u64,
}

/// A transfer that pays a deposit intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositHit {
    pub transaction: String,
    pub payer: String,
    pub amount: u64,
}
