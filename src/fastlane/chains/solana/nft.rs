//! The two local checks NFT admission on Solana rests on: a wallet's ed25519 signature over
//! the raw challenge text, and the address of a mint's metadata account, a program-derived
//! address (PDA) of the token-metadata program.

use curve25519_dalek::edwards::CompressedEdwardsY;
use sha2::{Digest as _, Sha256};

use super::lookups::SolanaLookups;
use super::transfer::{parse_key, signature_verifies};
use super::wire::{KEY_LEN, SIGNATURE_LEN};
use crate::fastlane::lookups::{ChainLookups as _, NftClaim, NftVerdict};
use crate::fastlane::mechanism::ChainError;

/// The token-metadata program (`metaqbxxUerdq28cj1RbAWkYQm3ybzjb6a8bt518x1s`).
pub const METADATA_PROGRAM: &str = "metaqbxxUerdq28cj1RbAWkYQm3ybzjb6a8bt518x1s";
/// The suffix hashed after the seeds and program id of every PDA.
const PDA_MARKER: &[u8] = b"ProgramDerivedAddress";

/// Whether `signature` is `address`'s signature over the UTF-8 bytes of `message`, as
/// wallets' `signMessage` makes it (no prefix, no hashing).
pub fn message_signature_verifies(address: &str, message: &str, signature: &[u8]) -> bool {
    let Some(key) = parse_key(address) else {
        return false;
    };
    let Ok(signature) = <[u8; SIGNATURE_LEN]>::try_from(signature) else {
        return false;
    };
    signature_verifies(&key, message.as_bytes(), &signature)
}

/// The program-derived address of `seeds` under `program` and its bump seed: the first
/// bump from 255 down whose hash is not an ed25519 point (so no private key can sign for
/// it). `None` if no bump works, which is vanishingly unlikely but possible.
pub fn find_program_address(
    seeds: &[&[u8]],
    program: &[u8; KEY_LEN],
) -> Option<([u8; KEY_LEN], u8)> {
    (0..=u8::MAX).rev().find_map(|bump| {
        let mut hasher = Sha256::new();
        for seed in seeds {
            hasher.update(seed);
        }
        hasher.update([bump]);
        hasher.update(program);
        hasher.update(PDA_MARKER);
        let candidate: [u8; KEY_LEN] = hasher.finalize().into();
        let on_curve = CompressedEdwardsY(candidate).decompress().is_some();
        (!on_curve).then_some((candidate, bump))
    })
}

/// The metadata account of `mint`: seeds `["metadata", metadata program, mint]`.
pub fn metadata_address(mint: &[u8; KEY_LEN]) -> Option<([u8; KEY_LEN], u8)> {
    let program = parse_key(METADATA_PROGRAM)?;
    find_program_address(&[b"metadata", &program, mint], &program)
}

/// Whether the claim's signature is the wallet's and the wallet holds the token.
pub(super) async fn owner(
    lookups: &SolanaLookups,
    claim: &NftClaim,
) -> Result<NftVerdict, ChainError> {
    let _ = claim;
    Err(ChainError::Unsupported {
        network: lookups.network().to_owned(),
        operation: "nft",
    })
}
