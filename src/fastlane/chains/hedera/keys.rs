//! Hedera keys: the payer's key as the mirror node reports it (a single ED25519 or
//! ECDSA_SECP256K1 key, or a protobuf key list or threshold key) and whether it signed a body;
//! and the sponsor's private key, read from its DER hex, which co-signs at settlement.
//!
//! Signatures: ed25519 over the body bytes (strict verification); ECDSA secp256k1 as 64 bytes
//! `r‖s` over keccak-256 of the body.

use ed25519_dalek::Signer as _;
use k256::ecdsa::signature::hazmat::{PrehashSigner as _, PrehashVerifier as _};
use prost::Message as _;
use sha3::{Digest as _, Keccak256};

use super::proto::{self, KeyKind, Signature, SignaturePair, SignedTransaction};

/// Deepest key list nesting followed.
const MAX_KEY_DEPTH: usize = 8;
/// Most keys one list may hold (the network's own limit is lower).
const MAX_KEYS: usize = 100;

/// PKCS#8 DER prefixes of the two private key forms Hedera tools print, each followed by the
/// 32-byte secret.
const ED25519_DER_PREFIX: &str = "302e020100300506032b657004220420";
const SECP256K1_DER_PREFIX: &str = "3030020100300706052b8104000a04220420";

/// A key that can authorise a payer account.
#[derive(Debug, Clone)]
pub enum PayerKey {
    Ed25519 {
        raw: Vec<u8>,
        key: ed25519_dalek::VerifyingKey,
    },
    Secp256k1 {
        raw: Vec<u8>,
        key: k256::ecdsa::VerifyingKey,
    },
    /// At least `threshold` of `keys` must sign (a plain key list needs all of them).
    Threshold {
        threshold: usize,
        keys: Vec<PayerKey>,
    },
}

impl PayerKey {
    /// The key of a mirror account record: `_type` and hex `key`. `None` if unsupported.
    pub fn from_mirror(kind: &str, hex_key: &str) -> Option<PayerKey> {
        let raw = hex::decode(hex_key).ok()?;
        match kind {
            "ED25519" => PayerKey::ed25519(raw),
            "ECDSA_SECP256K1" => PayerKey::secp256k1(raw),
            "ProtobufEncoded" => PayerKey::from_proto(&proto::Key::decode(raw.as_slice()).ok()?, 0),
            _ => None,
        }
    }

    fn ed25519(raw: Vec<u8>) -> Option<PayerKey> {
        let bytes: [u8; 32] = raw.as_slice().try_into().ok()?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&bytes).ok()?;
        Some(PayerKey::Ed25519 { raw, key })
    }

    fn secp256k1(raw: Vec<u8>) -> Option<PayerKey> {
        let key = k256::ecdsa::VerifyingKey::from_sec1_bytes(&raw).ok()?;
        Some(PayerKey::Secp256k1 { raw, key })
    }

    fn from_proto(key: &proto::Key, depth: usize) -> Option<PayerKey> {
        if depth > MAX_KEY_DEPTH {
            return None;
        }
        let list = |keys: &[proto::Key]| -> Option<Vec<PayerKey>> {
            if keys.is_empty() || keys.len() > MAX_KEYS {
                return None;
            }
            keys.iter()
                .map(|child| PayerKey::from_proto(child, depth + 1))
                .collect()
        };
        match key.key.as_ref()? {
            KeyKind::Ed25519(raw) => PayerKey::ed25519(raw.clone()),
            KeyKind::EcdsaSecp256k1(raw) => PayerKey::secp256k1(raw.clone()),
            KeyKind::KeyList(keys) => {
                let keys = list(&keys.keys)?;
                Some(PayerKey::Threshold {
                    threshold: keys.len(),
                    keys,
                })
            }
            KeyKind::ThresholdKey(threshold) => {
                let keys = list(&threshold.keys.as_ref()?.keys)?;
                let threshold = usize::try_from(threshold.threshold).ok()?;
                // A threshold of 0 or above the key count authorises nothing sensible.
                (1..=keys.len())
                    .contains(&threshold)
                    .then_some(PayerKey::Threshold { threshold, keys })
            }
        }
    }

    /// Whether this key signed `body` in `signed`'s signature map. A single key needs a pair
    /// naming its whole public key whose signature verifies.
    pub fn signed(&self, signed: &SignedTransaction, body: &[u8]) -> bool {
        let pairs = signed
            .sig_map
            .as_ref()
            .map(|map| map.sig_pair.as_slice())
            .unwrap_or_default();
        match self {
            PayerKey::Ed25519 { raw, key } => pairs.iter().any(|pair| {
                let Some(Signature::Ed25519(signature)) = pair_for(pair, raw) else {
                    return false;
                };
                ed25519_dalek::Signature::from_slice(signature)
                    .is_ok_and(|signature| key.verify_strict(body, &signature).is_ok())
            }),
            PayerKey::Secp256k1 { raw, key } => pairs.iter().any(|pair| {
                let Some(Signature::EcdsaSecp256k1(signature)) = pair_for(pair, raw) else {
                    return false;
                };
                let Ok(signature) = k256::ecdsa::Signature::from_slice(signature) else {
                    return false;
                };
                key.verify_prehash(&Keccak256::digest(body), &signature)
                    .is_ok()
            }),
            PayerKey::Threshold { threshold, keys } => {
                keys.iter().filter(|key| key.signed(signed, body)).count() >= *threshold
            }
        }
    }
}

/// The signature of `pair` if the pair names exactly `raw` as its key.
fn pair_for<'a>(pair: &'a SignaturePair, raw: &[u8]) -> Option<&'a Signature> {
    (pair.pub_key_prefix.as_deref() == Some(raw))
        .then_some(pair.signature.as_ref())
        .flatten()
}

/// The sponsor's private key: pays the network fee and co-signs every node copy.
pub enum SponsorKey {
    Ed25519(ed25519_dalek::SigningKey),
    Secp256k1(k256::ecdsa::SigningKey),
}

impl std::fmt::Debug for SponsorKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        write!(
            formatter,
            "SponsorKey({})",
            hex::encode(self.public_bytes())
        )
    }
}

impl SponsorKey {
    /// Reads the DER hex form (`302e…` ed25519, `3030…` secp256k1).
    pub fn from_der_hex(text: &str) -> Option<SponsorKey> {
        let text = text.trim().to_ascii_lowercase();
        if let Some(secret) = text.strip_prefix(ED25519_DER_PREFIX) {
            let bytes: [u8; 32] = hex::decode(secret).ok()?.try_into().ok()?;
            return Some(SponsorKey::Ed25519(ed25519_dalek::SigningKey::from_bytes(
                &bytes,
            )));
        }
        if let Some(secret) = text.strip_prefix(SECP256K1_DER_PREFIX) {
            let bytes = hex::decode(secret).ok()?;
            if bytes.len() != 32 {
                return None;
            }
            return k256::ecdsa::SigningKey::from_slice(&bytes)
                .ok()
                .map(SponsorKey::Secp256k1);
        }
        None
    }

    /// The public key as signature pairs name it (32 bytes, or 33 compressed).
    pub fn public_bytes(&self) -> Vec<u8> {
        match self {
            SponsorKey::Ed25519(key) => key.verifying_key().to_bytes().to_vec(),
            SponsorKey::Secp256k1(key) => key
                .verifying_key()
                .to_encoded_point(true)
                .as_bytes()
                .to_vec(),
        }
    }

    /// The sponsor's signature pair over `body`.
    pub fn sign(&self, body: &[u8]) -> Option<SignaturePair> {
        let signature = match self {
            SponsorKey::Ed25519(key) => Signature::Ed25519(key.sign(body).to_bytes().to_vec()),
            SponsorKey::Secp256k1(key) => {
                let signature: k256::ecdsa::Signature =
                    key.sign_prehash(&Keccak256::digest(body)).ok()?;
                Signature::EcdsaSecp256k1(signature.to_bytes().to_vec())
            }
        };
        Some(SignaturePair {
            pub_key_prefix: Some(self.public_bytes()),
            signature: Some(signature),
        })
    }
}
