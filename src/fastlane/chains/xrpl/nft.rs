//! XRPL NFT admission: the wallet's signature over the challenge and its holding.

use super::lookups::XrplLookups;
use crate::fastlane::lookups::{ChainLookups as _, NftClaim, NftVerdict};
use crate::fastlane::mechanism::ChainError;

/// Whether the claim's signature is the wallet's and the wallet holds the token.
pub(super) async fn owner(
    lookups: &XrplLookups,
    claim: &NftClaim,
) -> Result<NftVerdict, ChainError> {
    let _ = claim;
    Err(ChainError::Unsupported {
        network: lookups.network().to_owned(),
        operation: "nft",
    })
}
