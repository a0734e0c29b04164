//! `/nft/verify`: the gateway's own check of the challenge text, then the chain's verdict.
//! The service wrote the message, but the gateway trusts only what it reads back: the claim's
//! network, wallet, collection and token must be the ones the signed lines name.

use super::{Inner, rejected};
use crate::fastlane::facilitator::GatewayError;
use crate::fastlane::lookups::{NftClaim, NftVerdict};

/// The first line of every challenge.
pub const MESSAGE_PREFIX: &str = "Concert NFT admission v1";
/// Longest challenge text taken; the service's are far shorter.
pub const MAX_MESSAGE_BYTES: usize = 4096;

pub(super) async fn verify(inner: &Inner, claim: &NftClaim) -> Result<NftVerdict, GatewayError> {
    if let Err(problem) = check_message(claim) {
        return Err(rejected(problem));
    }
    let lookups = inner.lookups_of(&claim.network)?;
    lookups
        .nft_owner(claim)
        .await
        .map_err(|e| GatewayError::Unavailable(e.to_string()))
}

/// The message is a challenge of this claim: the prefix first, then the `Network:`,
/// `Wallet:`, `Collection:` and `Token:` lines in that order, each naming the claim's value.
pub fn check_message(claim: &NftClaim) -> Result<(), String> {
    if claim.message.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "the challenge is longer than {MAX_MESSAGE_BYTES} bytes"
        ));
    }
    let mut lines = claim.message.split('\n');
    if lines.next() != Some(MESSAGE_PREFIX) {
        return Err("the message is not a Concert NFT challenge".into());
    }
    let wanted = [
        ("Network:", claim.network.as_str()),
        ("Wallet:", claim.wallet.as_str()),
        ("Collection:", claim.collection.as_str()),
        ("Token:", claim.token.as_str()),
    ];
    let mut next = 0;
    for line in lines {
        let Some((label, value)) = wanted.get(next) else {
            break;
        };
        if let Some(rest) = line.strip_prefix(label) {
            if rest.trim() != *value {
                return Err(format!("the challenge's {label} line names another value"));
            }
            next += 1;
        }
    }
    match wanted.get(next) {
        None => Ok(()),
        Some((label, _)) => Err(format!("the challenge has no {label} line in its place")),
    }
}
