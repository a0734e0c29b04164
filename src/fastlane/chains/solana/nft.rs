//! The two local checks NFT admission on Solana rests on: a wallet's ed25519 signature over
//! the raw challenge text, and the address of a mint's metadata account, a program-derived
//! address (PDA) of the token-metadata program.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use curve25519_dalek::edwards::CompressedEdwardsY;
use serde::Deserialize;
use serde_json::json;
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

/// The SPL Token program, owner of every classic mint and token account.
pub const TOKEN_PROGRAM: &str = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
/// Size of a classic mint account.
const MINT_LEN: usize = 82;
/// The metadata account's first byte for a `MetadataV1` record.
const METADATA_V1_KEY: u8 = 4;

/// What a mint account says, as far as admission needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MintState {
    pub supply: u64,
    pub decimals: u8,
    pub initialized: bool,
}

/// Reads a classic mint: `COption<Pubkey>` authority (36 bytes), supply (u64 LE), decimals,
/// the initialised flag, then the freeze authority. `None` unless exactly 82 bytes.
pub fn parse_mint(data: &[u8]) -> Option<MintState> {
    if data.len() != MINT_LEN {
        return None;
    }
    let supply = u64::from_le_bytes(data.get(36..44)?.try_into().ok()?);
    Some(MintState {
        supply,
        decimals: *data.get(44)?,
        initialized: *data.get(45)? == 1,
    })
}

/// A Borsh reader that never reads past the end.
struct Borsh<'a> {
    rest: &'a [u8],
}

impl<'a> Borsh<'a> {
    fn take(&mut self, count: usize) -> Option<&'a [u8]> {
        if count > self.rest.len() {
            return None;
        }
        let (head, tail) = self.rest.split_at(count);
        self.rest = tail;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }

    fn key(&mut self) -> Option<[u8; KEY_LEN]> {
        self.take(KEY_LEN)?.try_into().ok()
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn string(&mut self) -> Option<()> {
        let len = usize::try_from(self.u32()?).ok()?;
        self.take(len).map(|_| ())
    }

    /// An `Option<T>` tag: 0 none, 1 some, anything else malformed.
    fn present(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

/// A metadata record's `collection` field: whether the collection verified it, and its mint.
pub type CollectionField = Option<(bool, [u8; KEY_LEN])>;

/// The metadata record's mint and its collection as `(verified, key)`, if it names one.
/// `None` when the record is not a well-formed `MetadataV1` up to its collection field.
pub fn parse_metadata_collection(data: &[u8]) -> Option<([u8; KEY_LEN], CollectionField)> {
    let mut reader = Borsh { rest: data };
    if reader.byte()? != METADATA_V1_KEY {
        return None;
    }
    let _update_authority = reader.key()?;
    let mint = reader.key()?;
    // name, symbol, uri, seller fee
    reader.string()?;
    reader.string()?;
    reader.string()?;
    reader.take(2)?;
    if reader.present()? {
        let creators = usize::try_from(reader.u32()?).ok()?;
        // address, verified, share
        reader.take(creators.checked_mul(KEY_LEN + 2)?)?;
    }
    // primary sale happened, is mutable
    reader.take(2)?;
    // edition nonce, token standard
    for _ in 0..2 {
        if reader.present()? {
            reader.byte()?;
        }
    }
    let collection = if reader.present()? {
        let verified = match reader.byte()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        Some((verified, reader.key()?))
    } else {
        None
    };
    Some((mint, collection))
}

#[derive(Debug, Deserialize)]
struct AccountInfo {
    value: Option<AccountValue>,
}

#[derive(Debug, Deserialize)]
struct AccountValue {
    owner: String,
    data: (String, String),
}

#[derive(Debug, Deserialize)]
struct TokenAccounts {
    value: Vec<TokenAccount>,
}

#[derive(Debug, Deserialize)]
struct TokenAccount {
    account: TokenAccountBody,
}

#[derive(Debug, Deserialize)]
struct TokenAccountBody {
    owner: String,
    data: ParsedData,
}

#[derive(Debug, Deserialize)]
struct ParsedData {
    parsed: ParsedAccount,
}

#[derive(Debug, Deserialize)]
struct ParsedAccount {
    info: TokenInfo,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenInfo {
    mint: String,
    owner: String,
    token_amount: TokenAmount,
}

#[derive(Debug, Deserialize)]
struct TokenAmount {
    amount: String,
}

fn unavailable(lookups: &SolanaLookups, message: String) -> ChainError {
    ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    }
}

/// The finalized account at `address`: its owner program and its data, or `None`.
async fn account(
    lookups: &SolanaLookups,
    address: &str,
) -> Result<Option<(String, Vec<u8>)>, ChainError> {
    let info: AccountInfo = lookups
        .rpc()
        .call(
            "getAccountInfo",
            json!([address, {"encoding": "base64", "commitment": "finalized"}]),
        )
        .await
        .map_err(|e| unavailable(lookups, format!("getAccountInfo: {e}")))?;
    let Some(value) = info.value else {
        return Ok(None);
    };
    if value.data.1 != "base64" {
        return Err(unavailable(
            lookups,
            "getAccountInfo: data not in base64".into(),
        ));
    }
    let data = STANDARD
        .decode(&value.data.0)
        .map_err(|e| unavailable(lookups, format!("getAccountInfo: {e}")))?;
    Ok(Some((value.owner, data)))
}

/// Whether the claim's signature is the wallet's and the wallet holds the token.
pub(super) async fn owner(
    lookups: &SolanaLookups,
    claim: &NftClaim,
) -> Result<NftVerdict, ChainError> {
    let refused = |reason: &str| Ok(NftVerdict::Refused(reason.to_owned()));
    // The address is the key; a key reported beside it must be the same one.
    if !claim.public_key.is_empty() && claim.public_key != claim.wallet {
        return refused("public_key_not_wallet");
    }
    if !message_signature_verifies(&claim.wallet, &claim.message, &claim.signature) {
        return refused("invalid_signature");
    }
    let (Some(mint), Some(collection)) = (parse_key(&claim.token), parse_key(&claim.collection))
    else {
        return refused("invalid_mint");
    };
    match account(lookups, &claim.token).await? {
        Some((owner, data)) if owner == TOKEN_PROGRAM => match parse_mint(&data) {
            Some(state) if state.initialized && state.supply == 1 && state.decimals == 0 => {}
            _ => return refused("not_an_nft_mint"),
        },
        _ => return refused("not_an_nft_mint"),
    }
    let holdings: TokenAccounts = lookups
        .rpc()
        .call(
            "getTokenAccountsByOwner",
            json!([
                claim.wallet,
                {"mint": claim.token},
                {"encoding": "jsonParsed", "commitment": "finalized"}
            ]),
        )
        .await
        .map_err(|e| unavailable(lookups, format!("getTokenAccountsByOwner: {e}")))?;
    let holds = holdings.value.iter().any(|held| {
        let info = &held.account.data.parsed.info;
        held.account.owner == TOKEN_PROGRAM
            && info.mint == claim.token
            && info.owner == claim.wallet
            && info.token_amount.amount == "1"
    });
    if !holds {
        return refused("not_held");
    }
    let Some((metadata, _)) = metadata_address(&mint) else {
        return refused("no_metadata_address");
    };
    let metadata = bs58::encode(metadata).into_string();
    let Some((owner, data)) = account(lookups, &metadata).await? else {
        return refused("no_metadata");
    };
    if owner != METADATA_PROGRAM {
        return refused("no_metadata");
    }
    match parse_metadata_collection(&data) {
        Some((named, Some((true, key)))) if named == mint && key == collection => {
            Ok(NftVerdict::Owner {
                owner: claim.wallet.clone(),
                token: claim.token.clone(),
            })
        }
        Some((_, Some((false, _)))) => refused("collection_not_verified"),
        _ => refused("not_in_collection"),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A `MetadataV1` record as the metadata program lays it out, up to its collection.
    fn metadata_record(mint: [u8; KEY_LEN], collection: CollectionField) -> Vec<u8> {
        let mut data = vec![METADATA_V1_KEY];
        data.extend([9u8; KEY_LEN]);
        data.extend(mint);
        for text in ["Pass", "PASS", "https://example.com/1.json"] {
            data.extend(u32::try_from(text.len()).unwrap().to_le_bytes());
            data.extend(text.as_bytes());
        }
        data.extend(500u16.to_le_bytes());
        data.push(1);
        data.extend(1u32.to_le_bytes());
        data.extend([8u8; KEY_LEN]);
        data.extend([1, 100]);
        data.extend([0, 1]);
        data.extend([1, 254]);
        data.extend([1, 0]);
        match collection {
            Some((verified, key)) => {
                data.extend([1, u8::from(verified)]);
                data.extend(key);
            }
            None => data.push(0),
        }
        // uses, collection details and padding follow on chain.
        data.extend([0; 40]);
        data
    }

    #[test]
    fn metadata_records_name_their_mint_and_collection() {
        let record = metadata_record([1; KEY_LEN], Some((true, [2; KEY_LEN])));
        assert_eq!(
            parse_metadata_collection(&record),
            Some(([1; KEY_LEN], Some((true, [2; KEY_LEN]))))
        );
        let none = metadata_record([1; KEY_LEN], None);
        assert_eq!(parse_metadata_collection(&none), Some(([1; KEY_LEN], None)));
        let mut wrong_kind = record.clone();
        wrong_kind[0] = 6;
        assert_eq!(parse_metadata_collection(&wrong_kind), None);
        // Cut anywhere before the collection key, the record is unreadable.
        let key_end = record.len() - 40;
        for cut in 0..key_end {
            assert_eq!(
                parse_metadata_collection(&record[..cut]),
                None,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn mints_are_82_bytes_with_supply_and_decimals() {
        let mut mint = vec![0u8; MINT_LEN];
        mint[36..44].copy_from_slice(&1u64.to_le_bytes());
        mint[45] = 1;
        assert_eq!(
            parse_mint(&mint),
            Some(MintState {
                supply: 1,
                decimals: 0,
                initialized: true
            })
        );
        assert_eq!(parse_mint(&mint[..81]), None);
        mint.push(0);
        assert_eq!(parse_mint(&mint), None);
    }

    proptest! {
        #[test]
        fn arbitrary_account_data_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_metadata_collection(&data);
            let _ = parse_mint(&data);
        }

        #[test]
        fn arbitrary_signatures_never_panic(
            address in "[1-9A-HJ-NP-Za-km-z]{0,50}",
            message in ".{0,100}",
            signature in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            prop_assert!(!message_signature_verifies(&address, &message, &signature));
        }
    }
}
