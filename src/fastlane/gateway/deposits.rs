//! `/deposit/check` and `/market/sales`: read-only questions about a network, answered from
//! its lookups. Which transfers pay an intent is decided here, the same for every chain; the
//! chains only list what arrived.

use super::{Inner, rejected};
use crate::fastlane::facilitator::{DepositHit, DepositQuery, DepositReference, GatewayError};
use crate::fastlane::lookups::{IncomingTransfer, SellOffer};

/// Longest lookback a check may ask for.
pub const MAX_LOOKBACK_SECONDS: u64 = 24 * 3600;
/// Most hits one check returns.
pub const MAX_HITS: usize = 10;

pub(super) async fn check(
    inner: &Inner,
    query: &DepositQuery,
) -> Result<Vec<DepositHit>, GatewayError> {
    let lookups = inner.lookups_of(&query.network)?;
    let lookback = query.lookback_seconds.min(MAX_LOOKBACK_SECONDS);
    let since = crate::fastlane::service::clock::now_unix().saturating_sub(lookback);
    let transfers = lookups
        .incoming(&query.pay_to, since)
        .await
        .map_err(|e| GatewayError::Unavailable(e.to_string()))?;
    Ok(matching(query, &transfers))
}

/// The transfers that pay `query`: the exact amount, or the session's reference with at least
/// the minimum. Each transaction once, at most [`MAX_HITS`].
pub fn matching(query: &DepositQuery, transfers: &[IncomingTransfer]) -> Vec<DepositHit> {
    let mut hits: Vec<DepositHit> = Vec::new();
    for transfer in transfers {
        if hits.len() >= MAX_HITS {
            break;
        }
        let referenced = match &query.reference {
            DepositReference::Tag(tag) => transfer.tag == Some(*tag),
            DepositReference::Memo(memo) => transfer.memos.iter().any(|m| m.trim() == memo),
        };
        let pays =
            transfer.amount == query.amount || (referenced && transfer.amount >= query.minimum);
        if pays
            && !hits
                .iter()
                .any(|hit| hit.transaction == transfer.transaction)
        {
            hits.push(DepositHit {
                transaction: transfer.transaction.clone(),
                payer: transfer.payer.clone(),
                amount: transfer.amount,
            });
        }
    }
    hits
}

pub(super) async fn market(
    inner: &Inner,
    network: &str,
    collection: &str,
) -> Result<Vec<SellOffer>, GatewayError> {
    if collection.is_empty() {
        return Err(rejected("a collection is required"));
    }
    let lookups = inner.lookups_of(network)?;
    lookups
        .sell_offers(collection)
        .await
        .map_err(|e| GatewayError::Unavailable(e.to_string()))
}
