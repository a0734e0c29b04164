//! The XRPL NFT market: open sell offers of a collection's NFTs.
//!
//! The collection (`issuer:taxon`) is listed with `nfts_by_issuer`, which only Clio servers
//! answer (the public clusters run Clio), one page of at most [`MAX_TOKENS`]; then each live
//! token's sell offers are read with `nft_sell_offers`, a few at a time. Only offers for XRP
//! made by the token's current owner are kept. Whether an offer is public, unexpired and names a
//! well-formed token, and which is the cheapest of a token, is the service's to judge.

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::ledger::parse_drops;
use super::lookups::XrplLookups;
use crate::fastlane::lookups::{ChainLookups as _, SellOffer};
use crate::fastlane::mechanism::ChainError;

/// Tokens of a collection looked at.
pub const MAX_TOKENS: u32 = 60;
/// `nft_sell_offers` calls in flight at once.
const PARALLEL_CALLS: usize = 6;

pub(super) async fn sell_offers(
    lookups: &XrplLookups,
    collection: &str,
) -> Result<Vec<SellOffer>, ChainError> {
    let unavailable = |message: String| ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    };
    let (issuer, taxon) = parse_collection(collection)
        .ok_or_else(|| unavailable(format!("{collection:?} is not issuer:taxon")))?;
    let listing: Value = lookups
        .rpc()
        .call(
            "nfts_by_issuer",
            json!([{"issuer": issuer, "nft_taxon": taxon, "limit": MAX_TOKENS}]),
        )
        .await
        .map_err(|e| unavailable(format!("nfts_by_issuer: {e}")))?;
    if let Some(code) = listing.get("error").and_then(Value::as_str) {
        return Err(unavailable(format!("nfts_by_issuer: {code}")));
    }
    let tokens = read_tokens(&listing, taxon);
    let offers: Vec<Vec<SellOffer>> = futures_util::stream::iter(tokens)
        .map(|(id, owner)| async move {
            let answer: Result<Value, _> = lookups
                .rpc()
                .call(
                    "nft_sell_offers",
                    json!([{"nft_id": id, "ledger_index": "validated"}]),
                )
                .await;
            // A token without offers is an error (objectNotFound) to rippled: nothing for sale.
            match answer {
                Ok(result) => read_offers(&result, &id, &owner),
                Err(_) => Vec::new(),
            }
        })
        .buffer_unordered(PARALLEL_CALLS)
        .collect()
        .await;
    Ok(offers.into_iter().flatten().collect())
}

/// `issuer:taxon`.
pub fn parse_collection(collection: &str) -> Option<(&str, u32)> {
    let (issuer, taxon) = collection.split_once(':')?;
    let taxon = taxon.parse().ok()?;
    (!issuer.is_empty()).then_some((issuer, taxon))
}

/// The unburned tokens of the taxon on an `nfts_by_issuer` result: `(id, owner)`.
pub fn read_tokens(result: &Value, taxon: u32) -> Vec<(String, String)> {
    let Some(nfts) = result.get("nfts").and_then(Value::as_array) else {
        return Vec::new();
    };
    nfts.iter()
        .take(MAX_TOKENS as usize)
        .filter(|nft| nft.get("is_burned").and_then(Value::as_bool) != Some(true))
        .filter(|nft| {
            nft.get("nft_taxon")
                .and_then(Value::as_u64)
                .is_none_or(|t| t == u64::from(taxon))
        })
        .filter_map(|nft| {
            let id = nft.get("nft_id")?.as_str()?;
            let owner = nft.get("owner")?.as_str()?;
            (!id.is_empty() && !owner.is_empty()).then(|| (id.to_owned(), owner.to_owned()))
        })
        .collect()
}

/// The XRP sell offers of `owner` for token `id` on an `nft_sell_offers` result.
pub fn read_offers(result: &Value, id: &str, owner: &str) -> Vec<SellOffer> {
    if result.get("error").is_some() {
        return Vec::new();
    }
    let Some(offers) = result.get("offers").and_then(Value::as_array) else {
        return Vec::new();
    };
    offers
        .iter()
        .filter_map(|offer| {
            let amount = parse_drops(offer.get("amount")?.as_str()?)?;
            let seller = offer.get("owner")?.as_str()?;
            let offer_id = offer.get("nft_offer_index")?.as_str()?;
            if seller != owner || amount == 0 || offer_id.is_empty() {
                return None;
            }
            let destination = offer
                .get("destination")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
                .map(str::to_owned);
            let expiration = offer
                .get("expiration")
                .and_then(Value::as_u64)
                .filter(|e| *e > 0)
                .map(|e| e.saturating_add(super::deposits::RIPPLE_EPOCH));
            Some(SellOffer {
                nft_id: id.to_owned(),
                offer_id: offer_id.to_owned(),
                owner: seller.to_owned(),
                amount,
                destination,
                expiration,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_are_issuer_and_taxon() {
        assert_eq!(parse_collection("rIssuer:7"), Some(("rIssuer", 7)));
        assert_eq!(parse_collection("rIssuer"), None);
        assert_eq!(parse_collection(":7"), None);
        assert_eq!(parse_collection("rIssuer:-1"), None);
    }

    #[test]
    fn burned_foreign_and_malformed_tokens_are_left_out() {
        let result = json!({"nfts": [
            {"nft_id": "T1", "owner": "rA", "nft_taxon": 7},
            {"nft_id": "T2", "owner": "rB", "nft_taxon": 7, "is_burned": true},
            {"nft_id": "T3", "owner": "rC", "nft_taxon": 8},
            {"nft_id": 5, "owner": "rD"},
            {"owner": "rE"},
            null,
        ]});
        assert_eq!(
            read_tokens(&result, 7),
            vec![("T1".to_owned(), "rA".to_owned())]
        );
        assert!(read_tokens(&json!({"nfts": "x"}), 7).is_empty());
    }

    #[test]
    fn xrp_offers_of_the_owner_are_kept() {
        let result = json!({"nft_id": "T1", "offers": [
            {"amount": "9000000", "owner": "rA", "nft_offer_index": "O1", "flags": 1},
            {"amount": "5000000", "owner": "rA", "nft_offer_index": "O2", "flags": 1, "destination": "rBuyer", "expiration": 10},
            {"amount": "1000000", "owner": "rStale", "nft_offer_index": "O3", "flags": 1},
            {"amount": {"currency": "USD", "issuer": "rI", "value": "1"}, "owner": "rA", "nft_offer_index": "O4"},
            {"amount": "-5", "owner": "rA", "nft_offer_index": "O5"},
            "junk",
        ]});
        let offers = read_offers(&result, "T1", "rA");
        let ids: Vec<&str> = offers.iter().map(|o| o.offer_id.as_str()).collect();
        assert_eq!(ids, ["O1", "O2"]);
        assert_eq!(offers[0].destination, None);
        assert_eq!(offers[0].expiration, None);
        assert_eq!(offers[1].amount, 5_000_000);
        assert_eq!(offers[1].destination.as_deref(), Some("rBuyer"));
        assert_eq!(
            offers[1].expiration,
            Some(10 + super::super::deposits::RIPPLE_EPOCH)
        );
        assert!(read_offers(&json!({"error": "objectNotFound"}), "T1", "rA").is_empty());
        assert!(read_offers(&json!(null), "T1", "rA").is_empty());
    }
}
