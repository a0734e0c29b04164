//! The XRPL NFT market: open sell offers of a collection's NFTs.

use super::lookups::XrplLookups;
use crate::fastlane::lookups::{ChainLookups as _, SellOffer};
use crate::fastlane::mechanism::ChainError;

pub(super) async fn sell_offers(
    lookups: &XrplLookups,
    collection: &str,
) -> Result<Vec<SellOffer>, ChainError> {
    let _ = collection;
    Err(ChainError::Unsupported {
        network: lookups.network().to_owned(),
        operation: "market",
    })
}
