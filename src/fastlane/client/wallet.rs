//! The payer's key, read from the one key variable the network's chain uses, and what it
//! signs off-ledger (NFT admission challenges).

use ed25519_dalek::Signer as _;
use k256::ecdsa::signature::hazmat::PrehashSigner as _;
use sha2::{Digest as _, Sha256};
use sha3::Keccak256;

use crate::config::EnvSource;
use crate::fastlane::chains::hedera::keys::SponsorKey;
use crate::fastlane::chains::hedera::payment::EntityId;
use crate::fastlane::chains::xrpl::keys::KeyPair;

const XRP_SEED: &str = "CONCERT_CLIENT_XRP_SEED";
const XLM_SECRET: &str = "CONCERT_CLIENT_XLM_SECRET";
const HBAR_ACCOUNT: &str = "CONCERT_CLIENT_HBAR_ACCOUNT";
const HBAR_KEY: &str = "CONCERT_CLIENT_HBAR_KEY";
const SOL_KEY: &str = "CONCERT_CLIENT_SOL_KEY";

/// The key variables, each with the chain family it is for.
const KEY_VARIABLES: [(&str, Family); 5] = [
    (XRP_SEED, Family::Xrpl),
    (XLM_SECRET, Family::Stellar),
    (HBAR_ACCOUNT, Family::Hedera),
    (HBAR_KEY, Family::Hedera),
    (SOL_KEY, Family::Solana),
];

/// SEP-53's prefix of a signed Stellar message.
const STELLAR_MESSAGE_PREFIX: &[u8] = b"Stellar Signed Message:\n";

/// The chain a CAIP-2 network belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Xrpl,
    Stellar,
    Hedera,
    Solana,
}

impl Family {
    /// The family of one of the networks Concert sells on.
    pub fn of(network: &str) -> Option<Family> {
        match network {
            "xrpl:0" | "xrpl:1" | "xrpl:2" => Some(Family::Xrpl),
            "stellar:pubnet" | "stellar:testnet" => Some(Family::Stellar),
            "hedera:mainnet" | "hedera:testnet" => Some(Family::Hedera),
            "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
            | "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1" => Some(Family::Solana),
            _ => None,
        }
    }

    /// The variable(s) holding this family's key, for messages.
    pub fn key_variables(self) -> &'static str {
        match self {
            Family::Xrpl => XRP_SEED,
            Family::Stellar => XLM_SECRET,
            Family::Hedera => "CONCERT_CLIENT_HBAR_ACCOUNT and CONCERT_CLIENT_HBAR_KEY",
            Family::Solana => SOL_KEY,
        }
    }
}

/// The payer's key.
pub enum Wallet {
    Xrpl(KeyPair),
    Stellar(ed25519_dalek::SigningKey),
    Hedera { account: String, key: SponsorKey },
    Solana(ed25519_dalek::SigningKey),
}

impl std::fmt::Debug for Wallet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The address only: never the secret.
        write!(f, "Wallet({})", self.address())
    }
}

impl Wallet {
    /// The key for `family` from its variables. Exactly one key set may be given, and it must
    /// be the network's: a key of another chain is an error, not ignored.
    pub fn from_env(env: &dyn EnvSource, family: Family) -> Result<Wallet, String> {
        let given = |name: &str| env.var(name).filter(|value| !value.trim().is_empty());
        let present: Vec<(&str, Family)> = KEY_VARIABLES
            .iter()
            .copied()
            .filter(|(name, _)| given(name).is_some())
            .collect();
        if let Some((name, _)) = present.iter().find(|(_, other)| *other != family) {
            return Err(format!(
                "{name} is set, but this network needs {}; give only the key of the network you pay on",
                family.key_variables()
            ));
        }
        match family {
            Family::Xrpl => {
                let seed = given(XRP_SEED).ok_or_else(|| missing(family))?;
                KeyPair::from_seed(seed.trim())
                    .map(Wallet::Xrpl)
                    .map_err(|e| format!("{XRP_SEED}: {e} (expected a family seed, s…)"))
            }
            Family::Stellar => {
                let secret = given(XLM_SECRET).ok_or_else(|| missing(family))?;
                let seed = stellar_strkey::ed25519::PrivateKey::from_string(secret.trim())
                    .map_err(|_| format!("{XLM_SECRET}: not a Stellar secret seed (S…)"))?;
                Ok(Wallet::Stellar(ed25519_dalek::SigningKey::from_bytes(
                    &seed.0,
                )))
            }
            Family::Hedera => {
                let (Some(account), Some(key)) = (given(HBAR_ACCOUNT), given(HBAR_KEY)) else {
                    return Err(missing(family));
                };
                let account = account.trim().to_owned();
                if EntityId::parse(&account).is_none() {
                    return Err(format!(
                        "{HBAR_ACCOUNT}: {account:?} is not an account id (0.0.N)"
                    ));
                }
                let key = SponsorKey::from_der_hex(&key).ok_or_else(|| {
                    format!("{HBAR_KEY}: not a DER hex private key (302e… ed25519 or 3030… ECDSA secp256k1)")
                })?;
                Ok(Wallet::Hedera { account, key })
            }
            Family::Solana => {
                let text = given(SOL_KEY).ok_or_else(|| missing(family))?;
                solana_key(text.trim()).map(Wallet::Solana)
            }
        }
    }

    /// The paying account: `r…`, `G…`, `0.0.N` or a base58 key.
    pub fn address(&self) -> String {
        match self {
            Wallet::Xrpl(pair) => pair.address(),
            Wallet::Stellar(key) => {
                stellar_strkey::ed25519::PublicKey(key.verifying_key().to_bytes())
                    .to_string()
                    .as_str()
                    .to_owned()
            }
            Wallet::Hedera { account, .. } => account.clone(),
            Wallet::Solana(key) => bs58::encode(key.verifying_key().to_bytes()).into_string(),
        }
    }

    /// The public key as `/nft/verify` takes it: XRPL's 33 bytes in hex, a Stellar `G…`
    /// address, Hedera's raw key in hex, a Solana base58 key.
    pub fn nft_public_key(&self) -> String {
        match self {
            Wallet::Xrpl(pair) => hex::encode_upper(pair.public_key()),
            Wallet::Stellar(_) | Wallet::Solana(_) => self.address(),
            Wallet::Hedera { key, .. } => hex::encode(key.public_bytes()),
        }
    }

    /// Signs an off-ledger message as each chain's wallets do: XRPL with its transaction
    /// algorithms and no prefix, Stellar per SEP-53, Hedera ed25519 over the bytes or ECDSA
    /// `r‖s` over their keccak-256, Solana ed25519 over the raw bytes.
    pub fn sign_message(&self, message: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Wallet::Xrpl(pair) => Ok(pair.sign(message)),
            Wallet::Stellar(key) => {
                let digest = Sha256::new()
                    .chain_update(STELLAR_MESSAGE_PREFIX)
                    .chain_update(message)
                    .finalize();
                Ok(key.sign(&digest).to_bytes().to_vec())
            }
            Wallet::Hedera { key, .. } => match key {
                SponsorKey::Ed25519(key) => Ok(key.sign(message).to_bytes().to_vec()),
                SponsorKey::Secp256k1(key) => {
                    let signature: k256::ecdsa::Signature = key
                        .sign_prehash(&<Keccak256 as sha3::Digest>::digest(message))
                        .map_err(|e| format!("signing failed: {e}"))?;
                    let signature = signature.normalize_s().unwrap_or(signature);
                    Ok(signature.to_bytes().to_vec())
                }
            },
            Wallet::Solana(key) => Ok(key.sign(message).to_bytes().to_vec()),
        }
    }
}

fn missing(family: Family) -> String {
    format!(
        "no key: set {} to pay on this network",
        family.key_variables()
    )
}

/// A Solana key: base58 of the 64-byte keypair (secret ‖ public, as wallets export it) or of
/// the 32-byte secret, or the JSON byte array `solana-keygen` writes.
fn solana_key(text: &str) -> Result<ed25519_dalek::SigningKey, String> {
    let bytes = if text.starts_with('[') {
        serde_json::from_str::<Vec<u8>>(text)
            .map_err(|_| format!("{SOL_KEY}: not a JSON array of bytes"))?
    } else {
        bs58::decode(text)
            .into_vec()
            .map_err(|_| format!("{SOL_KEY}: not base58"))?
    };
    match bytes.len() {
        32 => {
            let secret: [u8; 32] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| format!("{SOL_KEY}: wrong length"))?;
            Ok(ed25519_dalek::SigningKey::from_bytes(&secret))
        }
        64 => {
            let pair: [u8; 64] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| format!("{SOL_KEY}: wrong length"))?;
            ed25519_dalek::SigningKey::from_keypair_bytes(&pair).map_err(|_| {
                format!("{SOL_KEY}: the public half does not belong to the secret half")
            })
        }
        other => Err(format!(
            "{SOL_KEY}: {other} bytes; expected a 64-byte keypair or a 32-byte secret"
        )),
    }
}
