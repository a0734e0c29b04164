//! XRPL keys and signatures: classic addresses and family seeds (base58check, Ripple
//! alphabet), key derivation from a seed, transaction hashes, and signing and verifying with
//! secp256k1 (ECDSA over SHA-512Half, strict DER, low-S only) or ed25519 (raw bytes).

use ed25519_dalek::Signer as _;
use k256::ecdsa::signature::hazmat::{PrehashSigner as _, PrehashVerifier as _};
use k256::elliptic_curve::PrimeField as _;
use k256::elliptic_curve::sec1::ToEncodedPoint as _;
use ripemd::Digest as _;
use sha2::Digest as _;

use super::codec::{self, Transaction, field};

/// Signing data prefix of a single-signed transaction (`STX\0`).
const SIGNING_PREFIX: [u8; 4] = *b"STX\0";
/// Transaction ID prefix (`TXN\0`).
const TX_ID_PREFIX: [u8; 4] = *b"TXN\0";
/// Address version byte.
const ACCOUNT_VERSION: [u8; 1] = [0x00];
const SECP256K1_SEED_VERSION: [u8; 1] = [0x21];
const ED25519_SEED_VERSION: [u8; 3] = [0x01, 0xE1, 0x4B];
/// Marks an ed25519 public key in XRPL's 33-byte form.
const ED25519_KEY_PREFIX: u8 = 0xED;

/// First half of SHA-512: the hash XRPL uses for IDs, key derivation and ECDSA digests.
pub fn sha512_half(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = sha2::Sha512::new();
    for part in parts {
        hasher.update(part);
    }
    let full = hasher.finalize();
    let mut out = [0u8; 32];
    out.copy_from_slice(&full[..32]);
    out
}

fn checksum(payload: &[u8]) -> [u8; 4] {
    let once = sha2::Sha256::digest(payload);
    let twice = sha2::Sha256::digest(once);
    let mut out = [0u8; 4];
    out.copy_from_slice(&twice[..4]);
    out
}

fn base58check_encode(version: &[u8], body: &[u8]) -> String {
    let mut payload = Vec::with_capacity(version.len() + body.len() + 4);
    payload.extend_from_slice(version);
    payload.extend_from_slice(body);
    let sum = checksum(&payload);
    payload.extend_from_slice(&sum);
    bs58::encode(payload)
        .with_alphabet(bs58::Alphabet::RIPPLE)
        .into_string()
}

/// The body after `version` if `text` is base58check of exactly `version ‖ body[len]`.
fn base58check_decode(text: &str, version: &[u8], len: usize) -> Option<Vec<u8>> {
    // Longest valid input here is a 38-byte payload; anything longer is not ours.
    if text.len() > 64 {
        return None;
    }
    let raw = bs58::decode(text)
        .with_alphabet(bs58::Alphabet::RIPPLE)
        .into_vec()
        .ok()?;
    if raw.len() != version.len() + len + 4 {
        return None;
    }
    let (payload, sum) = raw.split_at(raw.len() - 4);
    if checksum(payload) != sum || !payload.starts_with(version) {
        return None;
    }
    payload.get(version.len()..).map(<[u8]>::to_vec)
}

/// RIPEMD160(SHA256(public key)).
pub fn account_id(public_key: &[u8]) -> [u8; 20] {
    let inner = sha2::Sha256::digest(public_key);
    let outer = ripemd::Ripemd160::digest(inner);
    let mut out = [0u8; 20];
    out.copy_from_slice(&outer);
    out
}

/// The classic `r…` address of an account ID.
pub fn encode_address(account: &[u8; 20]) -> String {
    base58check_encode(&ACCOUNT_VERSION, account)
}

/// The account ID of a classic address; `None` for anything else (X-addresses included).
pub fn decode_address(address: &str) -> Option<[u8; 20]> {
    base58check_decode(address, &ACCOUNT_VERSION, 20).and_then(|v| <[u8; 20]>::try_from(v).ok())
}

/// The classic address of a 33-byte public key.
pub fn address_of_public_key(public_key: &[u8]) -> String {
    encode_address(&account_id(public_key))
}

/// Whether `key` has the shape of a signing key: compressed secp256k1 or `ED`-prefixed ed25519.
pub fn is_canonical_public_key(key: &[u8]) -> bool {
    key.len() == 33 && matches!(key.first().copied(), Some(0x02 | 0x03 | ED25519_KEY_PREFIX))
}

/// A key pair derived from a family seed.
pub enum KeyPair {
    Secp256k1(k256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secret material.
        f.debug_struct("KeyPair")
            .field("public_key", &hex::encode_upper(self.public_key()))
            .finish()
    }
}

/// Why a seed could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    #[error("not a family seed")]
    Malformed,
    #[error("seed yields no valid key")]
    NoKey,
}

impl KeyPair {
    /// Derives the account key pair of a family seed (`s…`, `sEd…`) as ripple-keypairs does.
    pub fn from_seed(seed: &str) -> Result<KeyPair, SeedError> {
        if let Some(entropy) = base58check_decode(seed, &ED25519_SEED_VERSION, 16) {
            let secret = sha512_half(&[&entropy]);
            return Ok(KeyPair::Ed25519(ed25519_dalek::SigningKey::from_bytes(
                &secret,
            )));
        }
        let entropy =
            base58check_decode(seed, &SECP256K1_SEED_VERSION, 16).ok_or(SeedError::Malformed)?;
        let root = first_valid_scalar(&[&entropy])?;
        let root_public = k256::ProjectivePoint::GENERATOR * root;
        let root_public = root_public.to_affine().to_encoded_point(true);
        // Account family 0: the intermediate key is derived from the root public key.
        let intermediate = first_valid_scalar(&[root_public.as_bytes(), &0u32.to_be_bytes()])?;
        let secret = root + intermediate;
        let key = k256::ecdsa::SigningKey::from_bytes(&secret.to_bytes())
            .map_err(|_| SeedError::NoKey)?;
        Ok(KeyPair::Secp256k1(key))
    }

    /// The 33-byte public key as it appears in `SigningPubKey`.
    pub fn public_key(&self) -> Vec<u8> {
        match self {
            KeyPair::Secp256k1(key) => key
                .verifying_key()
                .to_encoded_point(true)
                .as_bytes()
                .to_vec(),
            KeyPair::Ed25519(key) => {
                let mut out = vec![ED25519_KEY_PREFIX];
                out.extend_from_slice(key.verifying_key().as_bytes());
                out
            }
        }
    }

    pub fn address(&self) -> String {
        address_of_public_key(&self.public_key())
    }

    /// Signs `message` as XRPL does: deterministic low-S DER ECDSA over SHA-512Half, or
    /// ed25519 over the bytes themselves.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match self {
            KeyPair::Secp256k1(key) => {
                let digest = sha512_half(&[message]);
                // A 32-byte prehash is always accepted; the fallback is unreachable.
                let signature: k256::ecdsa::Signature = match key.sign_prehash(&digest) {
                    Ok(sig) => sig,
                    Err(_) => return Vec::new(),
                };
                let signature = signature.normalize_s().unwrap_or(signature);
                signature.to_der().as_bytes().to_vec()
            }
            KeyPair::Ed25519(key) => key.sign(message).to_bytes().to_vec(),
        }
    }

    /// Fills `SigningPubKey` and `TxnSignature` of `tx`.
    pub fn sign_transaction(&self, tx: &mut Transaction) {
        tx.set(field::SIGNING_PUB_KEY, self.public_key());
        let signature = self.sign(&signing_data(tx));
        tx.set(field::TXN_SIGNATURE, signature);
    }
}

/// The first `SHA-512Half(parts ‖ i)`, i = 0, 1, …, that is a non-zero scalar below the order.
fn first_valid_scalar(parts: &[&[u8]]) -> Result<k256::Scalar, SeedError> {
    // A hash lands outside [1, n) with probability about 2^-128; the bound is generous.
    for i in 0u32..64 {
        let index = i.to_be_bytes();
        let mut all: Vec<&[u8]> = parts.to_vec();
        all.push(&index);
        let candidate = sha512_half(&all);
        let scalar: Option<k256::Scalar> = k256::Scalar::from_repr(candidate.into()).into_option();
        if let Some(scalar) = scalar.filter(|s| !bool::from(s.is_zero())) {
            return Ok(scalar);
        }
    }
    Err(SeedError::NoKey)
}

/// What a single signer signs: `STX\0` then every field except the signature and signers.
pub fn signing_data(tx: &Transaction) -> Vec<u8> {
    let mut out = SIGNING_PREFIX.to_vec();
    out.extend_from_slice(&tx.encode_for_signing());
    out
}

/// The transaction ID: SHA-512Half(`TXN\0` ‖ blob) as uppercase hex.
pub fn transaction_hash(blob: &[u8]) -> String {
    hex::encode_upper(sha512_half(&[&TX_ID_PREFIX, blob]))
}

/// Verifies `signature` by the 33-byte XRPL `public_key` over `message`.
pub fn verify_message(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    match public_key.split_first() {
        Some((&ED25519_KEY_PREFIX, raw)) if raw.len() == 32 => {
            verify_ed25519(raw, message, signature)
        }
        Some((0x02 | 0x03, _)) if public_key.len() == 33 => {
            verify_secp256k1(public_key, message, signature)
        }
        _ => false,
    }
}

fn verify_ed25519(raw_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let Ok(key_bytes) = <[u8; 32]>::try_from(raw_key) else {
        return false;
    };
    let Ok(sig_bytes) = <[u8; 64]>::try_from(signature) else {
        return false;
    };
    let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(&key_bytes) else {
        return false;
    };
    let signature = ed25519_dalek::Signature::from_bytes(&sig_bytes);
    key.verify_strict(message, &signature).is_ok()
}

fn verify_secp256k1(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let Ok(key) = k256::ecdsa::VerifyingKey::from_sec1_bytes(public_key) else {
        return false;
    };
    let Ok(parsed) = k256::ecdsa::Signature::from_der(signature) else {
        return false;
    };
    // Strict DER: the bytes must be exactly the canonical encoding of (r, s).
    if parsed.to_der().as_bytes() != signature {
        return false;
    }
    // Low-S only: a high-S twin of a valid signature is a malleated copy.
    if parsed.normalize_s().is_some() {
        return false;
    }
    key.verify_prehash(&sha512_half(&[message]), &parsed)
        .is_ok()
}

/// Verifies the single signature of a decoded transaction.
pub fn verify_transaction(tx: &Transaction) -> bool {
    let (Some(public_key), Some(signature)) =
        (tx.get(field::SIGNING_PUB_KEY), tx.get(field::TXN_SIGNATURE))
    else {
        return false;
    };
    verify_message(public_key, &signing_data(tx), signature)
}

/// Verifies a signed off-ledger message (NFT admission): the key must belong to `address`
/// and sign `message` with the transaction algorithms but no prefix.
pub fn verify_account_message(
    address: &str,
    public_key: &[u8],
    message: &[u8],
    signature: &[u8],
) -> bool {
    is_canonical_public_key(public_key)
        && decode_address(address) == Some(account_id(public_key))
        && verify_message(public_key, message, signature)
}

/// Builds an unsigned native Payment (for tests, tools and the client side).
#[derive(Debug, Clone, Default)]
pub struct PaymentDraft {
    pub account: [u8; 20],
    pub destination: [u8; 20],
    pub drops: u64,
    pub fee_drops: u64,
    pub sequence: u32,
    pub last_ledger_sequence: u32,
    pub destination_tag: Option<u32>,
    pub ticket_sequence: Option<u32>,
    pub invoice_id: Option<[u8; 32]>,
}

impl PaymentDraft {
    pub fn to_transaction(&self) -> Transaction {
        let mut tx = Transaction::default();
        tx.set(
            field::TRANSACTION_TYPE,
            codec::PAYMENT_TYPE.to_be_bytes().to_vec(),
        );
        tx.set(field::SEQUENCE, self.sequence.to_be_bytes().to_vec());
        tx.set(
            field::LAST_LEDGER_SEQUENCE,
            self.last_ledger_sequence.to_be_bytes().to_vec(),
        );
        if let Some(tag) = self.destination_tag {
            tx.set(field::DESTINATION_TAG, tag.to_be_bytes().to_vec());
        }
        if let Some(ticket) = self.ticket_sequence {
            tx.set(field::TICKET_SEQUENCE, ticket.to_be_bytes().to_vec());
        }
        if let Some(invoice) = self.invoice_id {
            tx.set(field::INVOICE_ID, invoice.to_vec());
        }
        tx.set(field::AMOUNT, codec::native_amount(self.drops));
        tx.set(field::FEE, codec::native_amount(self.fee_drops));
        tx.set(field::ACCOUNT, self.account.to_vec());
        tx.set(field::DESTINATION, self.destination.to_vec());
        tx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_reject_bad_checksums() {
        let address = "r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6";
        let id = decode_address(address);
        assert!(id.is_some());
        assert_eq!(id.map(|id| encode_address(&id)).as_deref(), Some(address));
        assert_eq!(decode_address("r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG7"), None);
        assert_eq!(decode_address("sp59tVwt6dzAsmAVBCFLdpL5SoBwA"), None);
        assert_eq!(decode_address(""), None);
    }

    #[test]
    fn high_s_twin_of_a_valid_signature_is_refused() {
        let Ok(pair) = KeyPair::from_seed("sp59tVwt6dzAsmAVBCFLdpL5SoBwA") else {
            panic!("vector seed must decode");
        };
        let message = b"hello";
        let der = pair.sign(message);
        assert!(verify_message(&pair.public_key(), message, &der));
        let Ok(sig) = k256::ecdsa::Signature::from_der(&der) else {
            panic!("own signature must parse");
        };
        let (r, s) = sig.split_scalars();
        let Ok(high) = k256::ecdsa::Signature::from_scalars(r.to_bytes(), (-*s).to_bytes()) else {
            panic!("negated s is a valid scalar");
        };
        let high_der = high.to_der().as_bytes().to_vec();
        assert!(!verify_message(&pair.public_key(), message, &high_der));
    }
}
