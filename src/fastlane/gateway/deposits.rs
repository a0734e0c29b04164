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
///
/// A transfer that names another session's reference (another XRPL tag, another `CT…` memo)
/// is that session's even when its amount happens to be this one's: the reference is the
/// stronger sign of whom the payer meant.
pub fn matching(query: &DepositQuery, transfers: &[IncomingTransfer]) -> Vec<DepositHit> {
    let mut hits: Vec<DepositHit> = Vec::new();
    for transfer in transfers {
        if hits.len() >= MAX_HITS {
            break;
        }
        let (referenced, foreign) = match &query.reference {
            DepositReference::Tag(tag) => (
                transfer.tag == Some(*tag),
                transfer.tag.is_some_and(|other| other != *tag),
            ),
            DepositReference::Memo(memo) => {
                let ours = transfer.memos.iter().any(|m| m.trim() == memo);
                let others = transfer
                    .memos
                    .iter()
                    .any(|m| is_intent_memo(m.trim()) && m.trim() != memo);
                (ours, !ours && others)
            }
        };
        let pays = (transfer.amount == query.amount && !foreign)
            || (referenced && transfer.amount >= query.minimum);
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

/// A memo as the service writes them: `CT` and ten upper-case hex digits.
fn is_intent_memo(memo: &str) -> bool {
    memo.len() == 12
        && memo.starts_with("CT")
        && memo[2..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn transfer(tx: &str, amount: u64, tag: Option<u32>, memos: &[&str]) -> IncomingTransfer {
        IncomingTransfer {
            transaction: tx.into(),
            payer: format!("payer-{tx}"),
            amount,
            tag,
            memos: memos.iter().map(|m| (*m).to_owned()).collect(),
            time: 0,
        }
    }

    fn query(reference: DepositReference) -> DepositQuery {
        DepositQuery {
            network: "xrpl:1".into(),
            pay_to: "rShop".into(),
            amount: 100_042,
            reference,
            minimum: 100_000,
            lookback_seconds: 7200,
        }
    }

    fn hits(query: &DepositQuery, transfers: &[IncomingTransfer]) -> Vec<String> {
        matching(query, transfers)
            .into_iter()
            .map(|hit| hit.transaction)
            .collect()
    }

    #[test]
    fn the_exact_amount_or_the_reference_with_the_price_pays() {
        let tagged = query(DepositReference::Tag(7));
        let transfers = [
            transfer("exact", 100_042, None, &[]),
            transfer("tagged-more", 250_000, Some(7), &[]),
            transfer("tagged-short", 99_999, Some(7), &[]),
            transfer("other-tag-same-amount", 100_042, Some(8), &[]),
            transfer("unrelated", 100_043, None, &[]),
            transfer("exact", 100_042, None, &[]),
        ];
        assert_eq!(hits(&tagged, &transfers), ["exact", "tagged-more"]);
        let memo = query(DepositReference::Memo("CT0123456789".into()));
        let transfers = [
            transfer("memo", 100_000, None, &[" CT0123456789 "]),
            transfer("exact-free-text", 100_042, None, &["thanks!"]),
            transfer("exact-other-session", 100_042, None, &["CTABCDEF0123"]),
        ];
        assert_eq!(hits(&memo, &transfers), ["memo", "exact-free-text"]);
    }

    #[test]
    fn at_most_ten_hits() {
        let many: Vec<IncomingTransfer> = (0..30)
            .map(|n| transfer(&format!("t{n}"), 100_042, None, &[]))
            .collect();
        assert_eq!(
            matching(&query(DepositReference::Tag(1)), &many).len(),
            MAX_HITS
        );
    }
}
