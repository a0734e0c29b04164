//! Hedera NFT admission: the wallet's signature over the challenge and its holding.
//!
//! The account must be guarded by one key (the mirror says which); a key list or threshold
//! key cannot sign a message alone. Ed25519 keys sign the raw message, secp256k1 keys sign
//! keccak-256 of it as 64 bytes `r‖s`. The collection must be a `NON_FUNGIBLE_UNIQUE` token,
//! and the account must own the asked-for serial, or any serial when none was asked for.

use serde::Deserialize;
use sha3::{Digest as _, Keccak256};

use super::keys::PayerKey;
use super::lookups::HederaLookups;
use super::payment::EntityId;
use crate::fastlane::lookups::{ChainLookups as _, NftClaim, NftVerdict};
use crate::fastlane::mechanism::ChainError;

/// A mirror key record: `_type` and hex `key`.
#[derive(Debug, Clone, Deserialize)]
pub struct MirrorKey {
    #[serde(rename = "_type")]
    pub kind: String,
    pub key: String,
}

/// Whether the single key of a mirror key record signed `message`, and that key in hex.
/// A key list or threshold key never does.
pub fn single_key_signed(
    key: &MirrorKey,
    message: &[u8],
    signature: &[u8],
) -> Result<(), &'static str> {
    match PayerKey::from_mirror(&key.kind, &key.key) {
        Some(PayerKey::Ed25519 { key, .. }) => {
            let valid = ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|signature| key.verify_strict(message, &signature).is_ok());
            if valid {
                Ok(())
            } else {
                Err("invalid_signature")
            }
        }
        Some(PayerKey::Secp256k1 { key, .. }) => {
            let valid = k256::ecdsa::Signature::from_slice(signature).is_ok_and(|signature| {
                // Wallets may hand out either S; the challenge is single-use, so a malleated
                // twin gains nothing.
                let signature = signature.normalize_s().unwrap_or(signature);
                k256::ecdsa::signature::hazmat::PrehashVerifier::verify_prehash(
                    &key,
                    &Keccak256::digest(message),
                    &signature,
                )
                .is_ok()
            });
            if valid {
                Ok(())
            } else {
                Err("invalid_signature")
            }
        }
        Some(PayerKey::Threshold { .. }) => Err("single_key_account_required"),
        None => Err("unsupported_account_key"),
    }
}

/// The wallet-reported public key names the account's key: the same hex, or the same hex
/// after a DER prefix (wallets report both forms).
fn reported_key_matches(reported: &str, account_key: &str) -> bool {
    let reported = reported
        .trim()
        .trim_start_matches("0x")
        .to_ascii_lowercase();
    let account_key = account_key.to_ascii_lowercase();
    reported.is_empty() || reported == account_key || reported.ends_with(&account_key)
}

#[derive(Debug, Deserialize)]
struct MirrorAccount {
    #[serde(default)]
    key: Option<MirrorKey>,
    #[serde(default)]
    deleted: bool,
}

#[derive(Debug, Deserialize)]
struct MirrorToken {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct MirrorNft {
    #[serde(default)]
    account_id: Option<String>,
    #[serde(default)]
    deleted: bool,
    serial_number: u64,
    #[serde(default)]
    token_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct MirrorNfts {
    #[serde(default)]
    nfts: Vec<MirrorNft>,
}

fn unavailable(lookups: &HederaLookups, message: String) -> ChainError {
    ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    }
}

/// A serial as the `Token:` line may carry it: a positive decimal without leading zeros.
fn parse_serial(text: &str) -> Option<u64> {
    let plain =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0');
    if !plain {
        return None;
    }
    text.parse()
        .ok()
        .filter(|serial| *serial <= i64::MAX as u64)
}

/// Whether the claim's signature is the wallet's and the wallet holds the token.
pub(super) async fn owner(
    lookups: &HederaLookups,
    claim: &NftClaim,
) -> Result<NftVerdict, ChainError> {
    let refused = |reason: &str| Ok(NftVerdict::Refused(reason.to_owned()));
    // Both go into mirror paths: only canonical entity ids are taken.
    if EntityId::parse(&claim.wallet).is_none() {
        return refused("invalid_wallet");
    }
    if EntityId::parse(&claim.collection).is_none() {
        return refused("invalid_collection");
    }
    let serial = if claim.token.is_empty() {
        None
    } else {
        match parse_serial(&claim.token) {
            Some(serial) => Some(serial),
            None => return refused("invalid_serial"),
        }
    };
    let mirror = lookups.mirror();
    let account: Option<MirrorAccount> = mirror
        .get(&format!("/api/v1/accounts/{}", claim.wallet))
        .await
        .map_err(|e| unavailable(lookups, format!("mirror account: {e}")))?;
    let Some(account) = account.filter(|account| !account.deleted) else {
        return refused("account_not_found");
    };
    let Some(key) = account.key else {
        return refused("unsupported_account_key");
    };
    if !reported_key_matches(&claim.public_key, &key.key) {
        return refused("public_key_not_account_key");
    }
    if let Err(reason) = single_key_signed(&key, claim.message.as_bytes(), &claim.signature) {
        return refused(reason);
    }
    let token: Option<MirrorToken> = mirror
        .get(&format!("/api/v1/tokens/{}", claim.collection))
        .await
        .map_err(|e| unavailable(lookups, format!("mirror token: {e}")))?;
    match token {
        Some(token) if token.kind == "NON_FUNGIBLE_UNIQUE" => {}
        _ => return refused("not_an_nft_collection"),
    }
    let held = match serial {
        Some(serial) => {
            let nft: Option<MirrorNft> = mirror
                .get(&format!(
                    "/api/v1/tokens/{}/nfts/{serial}",
                    claim.collection
                ))
                .await
                .map_err(|e| unavailable(lookups, format!("mirror nft: {e}")))?;
            nft.filter(|nft| nft.serial_number == serial)
        }
        None => {
            let page: Option<MirrorNfts> = mirror
                .get(&format!(
                    "/api/v1/accounts/{}/nfts?token.id={}&limit=25",
                    claim.wallet, claim.collection
                ))
                .await
                .map_err(|e| unavailable(lookups, format!("mirror account nfts: {e}")))?;
            page.and_then(|page| {
                page.nfts.into_iter().find(|nft| {
                    nft.token_id.as_deref() == Some(claim.collection.as_str())
                        && nft.account_id.as_deref() == Some(claim.wallet.as_str())
                        && !nft.deleted
                })
            })
        }
    };
    match held {
        Some(nft) if nft.account_id.as_deref() == Some(claim.wallet.as_str()) && !nft.deleted => {
            Ok(NftVerdict::Owner {
                owner: claim.wallet.clone(),
                token: nft.serial_number.to_string(),
            })
        }
        _ => refused("not_held"),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use proptest::prelude::*;

    use super::*;

    fn vectors() -> serde_json::Value {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/hedera.json"
        ))
        .unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn the_vector_messages_verify_for_both_key_kinds() {
        let vectors = vectors();
        let messages = vectors["messages"].as_array().unwrap();
        let kinds: Vec<&str> = messages
            .iter()
            .map(|case| case["key"]["_type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["ED25519", "ECDSA_SECP256K1"]);
        for case in messages {
            let key: MirrorKey = serde_json::from_value(case["key"].clone()).unwrap();
            let message = case["message"].as_str().unwrap().as_bytes();
            let signature = STANDARD
                .decode(case["signature"].as_str().unwrap())
                .unwrap();
            assert_eq!(single_key_signed(&key, message, &signature), Ok(()));
            assert_eq!(
                single_key_signed(&key, b"Concert NFT admission v1", &signature),
                Err("invalid_signature")
            );
            let mut flipped = signature.clone();
            flipped[5] ^= 1;
            assert_eq!(
                single_key_signed(&key, message, &flipped),
                Err("invalid_signature")
            );
        }
    }

    #[test]
    fn key_lists_cannot_sign_a_message() {
        let vectors = vectors();
        let key: MirrorKey =
            serde_json::from_value(vectors["accounts"]["0.0.458"]["key"].clone()).unwrap();
        assert_eq!(
            single_key_signed(&key, b"m", &[0; 64]),
            Err("single_key_account_required")
        );
    }

    #[test]
    fn reported_keys_and_serials() {
        assert!(reported_key_matches("", "abcd"));
        assert!(reported_key_matches("ABCD", "abcd"));
        assert!(reported_key_matches("302a300506032b6570032100abcd", "abcd"));
        assert!(!reported_key_matches("abce", "abcd"));
        assert_eq!(parse_serial("7"), Some(7));
        assert_eq!(parse_serial("07"), None);
        assert_eq!(parse_serial("0"), None);
        assert_eq!(parse_serial("-1"), None);
        assert_eq!(parse_serial("99999999999999999999"), None);
    }

    proptest! {
        #[test]
        fn arbitrary_keys_and_signatures_never_panic(
            kind in prop_oneof![Just("ED25519"), Just("ECDSA_SECP256K1"), Just("ProtobufEncoded"), Just("RSA")],
            key in "[0-9a-f]{0,140}",
            message in proptest::collection::vec(any::<u8>(), 0..200),
            signature in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let key = MirrorKey { kind: kind.to_owned(), key };
            prop_assert!(single_key_signed(&key, &message, &signature).is_err());
        }
    }
}
