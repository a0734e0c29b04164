//! XRPL NFT admission: the wallet's signature over the challenge and its holding.
//!
//! The key that signed must be one the account authorises now (its regular key, or its
//! master key while that is enabled), and the account's NFT pages in the validated ledger
//! must hold a token of the collection (`issuer:taxon`), the asked-for one if a token id
//! was given.

use serde::Deserialize;
use serde_json::{Value, json};

use super::keys::{account_id, address_of_public_key, decode_address, verify_message};
use super::ledger::{Ledger as _, RpcLedger};
use super::lookups::XrplLookups;
use crate::fastlane::lookups::{ChainLookups as _, NftClaim, NftVerdict};
use crate::fastlane::mechanism::ChainError;

/// `lsfDisableMaster`: the master key no longer signs for the account.
const LSF_DISABLE_MASTER: u32 = 0x0010_0000;
/// NFTs asked for per `account_nfts` page, and the most pages read.
pub const NFTS_PER_PAGE: u32 = 400;
pub const MAX_NFT_PAGES: usize = 100;

/// A collection rule's two parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionRule {
    pub issuer: String,
    pub taxon: u32,
}

/// `issuer:taxon`, the issuer a classic address.
pub fn parse_collection(text: &str) -> Option<CollectionRule> {
    let (issuer, taxon) = text.split_once(':')?;
    decode_address(issuer)?;
    let taxon = taxon.parse().ok()?;
    Some(CollectionRule {
        issuer: issuer.to_owned(),
        taxon,
    })
}

/// The wallet's key and signature checks, without the ledger: `Ok(key bytes)` or the
/// refusal reason.
pub fn check_signature(claim: &NftClaim) -> Result<Vec<u8>, &'static str> {
    let Ok(public_key) = hex::decode(claim.public_key.trim()) else {
        return Err("invalid_public_key");
    };
    if decode_address(&claim.wallet).is_none() {
        return Err("invalid_wallet");
    }
    if !verify_message(&public_key, claim.message.as_bytes(), &claim.signature) {
        return Err("invalid_signature");
    }
    Ok(public_key)
}

#[derive(Debug, Deserialize)]
struct NftsPage {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    account_nfts: Vec<HeldNft>,
    #[serde(default)]
    marker: Option<Value>,
    #[serde(default)]
    validated: bool,
}

#[derive(Debug, Deserialize)]
#[allow(non_snake_case)]
struct HeldNft {
    NFTokenID: String,
    Issuer: String,
    NFTokenTaxon: u32,
}

fn unavailable(lookups: &XrplLookups, message: String) -> ChainError {
    ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    }
}

/// Whether the claim's signature is the wallet's and the wallet holds the token.
pub(super) async fn owner(
    lookups: &XrplLookups,
    claim: &NftClaim,
) -> Result<NftVerdict, ChainError> {
    let refused = |reason: &str| Ok(NftVerdict::Refused(reason.to_owned()));
    let Some(rule) = parse_collection(&claim.collection) else {
        return refused("invalid_collection");
    };
    let public_key = match check_signature(claim) {
        Ok(key) => key,
        Err(reason) => return refused(reason),
    };
    let ledger = RpcLedger::new(lookups.network(), lookups.rpc().clone());
    let Some(account) = ledger.account_state(&claim.wallet).await? else {
        return refused("account_not_found");
    };
    let is_master = decode_address(&claim.wallet) == Some(account_id(&public_key));
    let master_enabled = account.flags & LSF_DISABLE_MASTER == 0;
    let is_regular = account
        .regular_key
        .as_deref()
        .is_some_and(|regular| regular == address_of_public_key(&public_key));
    if !(is_master && master_enabled || is_regular) {
        return refused("key_not_authorised");
    }
    match held_token(lookups, &claim.wallet, &rule, &claim.token).await? {
        Some(token) => Ok(NftVerdict::Owner {
            owner: claim.wallet.clone(),
            token,
        }),
        None => refused("not_held"),
    }
}

/// The first token of `rule` (and id `wanted`, when not empty) the account holds, reading
/// at most [`MAX_NFT_PAGES`] pages.
async fn held_token(
    lookups: &XrplLookups,
    account: &str,
    rule: &CollectionRule,
    wanted: &str,
) -> Result<Option<String>, ChainError> {
    let mut marker: Option<Value> = None;
    for _ in 0..MAX_NFT_PAGES {
        let mut params = json!({
            "account": account,
            "ledger_index": "validated",
            "limit": NFTS_PER_PAGE,
        });
        if let Some(marker) = marker.take() {
            params["marker"] = marker;
        }
        let page: NftsPage = lookups
            .rpc()
            .call("account_nfts", json!([params]))
            .await
            .map_err(|e| unavailable(lookups, format!("account_nfts: {e}")))?;
        if let Some(error) = page.error {
            if error == "actNotFound" {
                return Ok(None);
            }
            let detail = page.error_message.unwrap_or_default();
            return Err(unavailable(
                lookups,
                format!("account_nfts: {error} {detail}"),
            ));
        }
        if !page.validated {
            return Err(unavailable(
                lookups,
                "account_nfts: answer is not from a validated ledger".into(),
            ));
        }
        let found = page.account_nfts.iter().find(|nft| {
            nft.Issuer == rule.issuer
                && nft.NFTokenTaxon == rule.taxon
                && (wanted.is_empty() || nft.NFTokenID.eq_ignore_ascii_case(wanted))
        });
        if let Some(nft) = found {
            // Answer with the id as asked, so the service's exact comparison holds.
            let token = if wanted.is_empty() {
                nft.NFTokenID.clone()
            } else {
                wanted.to_owned()
            };
            return Ok(Some(token));
        }
        match page.marker {
            Some(next) if !next.is_null() => marker = Some(next),
            _ => return Ok(None),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use proptest::prelude::*;

    use super::*;

    fn vectors() -> Value {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/xrpl.json"
        ))
        .unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn claim_of(case: &Value) -> NftClaim {
        NftClaim {
            network: "xrpl:1".into(),
            message: case["message"].as_str().unwrap().into(),
            signature: STANDARD
                .decode(case["signature"].as_str().unwrap())
                .unwrap(),
            public_key: case["publicKey"].as_str().unwrap().into(),
            wallet: case["address"].as_str().unwrap().into(),
            collection: String::new(),
            token: String::new(),
        }
    }

    #[test]
    fn the_vector_messages_verify_and_altered_ones_do_not() {
        let vectors = vectors();
        let messages = vectors["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2, "a secp256k1 and an ed25519 case");
        for case in messages {
            let claim = claim_of(case);
            let key = check_signature(&claim).expect("vector signature verifies");
            assert_eq!(address_of_public_key(&key), claim.wallet);

            let mut altered = claim.clone();
            altered.message.push(' ');
            assert_eq!(check_signature(&altered), Err("invalid_signature"));
            let mut flipped = claim.clone();
            flipped.signature[10] ^= 1;
            assert_eq!(check_signature(&flipped), Err("invalid_signature"));
            let mut bad_key = claim.clone();
            bad_key.public_key = "zz".into();
            assert_eq!(check_signature(&bad_key), Err("invalid_public_key"));
        }
    }

    #[test]
    fn collections_are_issuer_and_taxon() {
        assert_eq!(
            parse_collection("rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq:7"),
            Some(CollectionRule {
                issuer: "rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq".into(),
                taxon: 7
            })
        );
        assert_eq!(parse_collection("rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq"), None);
        assert_eq!(parse_collection("rBad:7"), None);
        assert_eq!(
            parse_collection("rwJBYQGmggLTa8PMJ9VWgfcUTtCeshL8Gq:-1"),
            None
        );
    }

    proptest! {
        #[test]
        fn arbitrary_keys_signatures_and_messages_never_panic(
            key in "[0-9A-Fa-f]{0,140}",
            signature in proptest::collection::vec(any::<u8>(), 0..100),
            message in ".{0,200}",
            wallet in "[a-zA-Z0-9]{0,40}",
        ) {
            let claim = NftClaim {
                network: "xrpl:1".into(),
                message,
                signature,
                public_key: key,
                wallet,
                collection: String::new(),
                token: String::new(),
            };
            prop_assert!(check_signature(&claim).is_err());
        }
    }
}
