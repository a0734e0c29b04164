//! Stellar NFT admission: the wallet's SEP-53 signature over the challenge and its holding.
//!
//! The signature must be by the account's master key with enough weight to act for it
//! (at least the medium threshold, and never a master key whose weight is 0). The RPC server
//! and Horizon must both be on the network the rule names, and a simulated
//! `balance(wallet)` on the collection's contract must be positive. Collections are whole
//! contracts, so the verdict's token is always [`COLLECTION_BALANCE`].

use serde::Deserialize;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use stellar_xdr::{
    AccountId, ContractId, Hash, HostFunction, InvokeContractArgs, InvokeHostFunctionOp, Memo,
    MuxedAccount, Operation, OperationBody, Preconditions, PublicKey, ScAddress, ScSymbol, ScVal,
    SequenceNumber, Transaction, TransactionEnvelope, TransactionExt, TransactionV1Envelope,
    Uint256, VecM,
};

use super::lookups::StellarLookups;
use super::payment::{decode_base64_exact, ed25519_verifies, encode_base64, passphrase};
use crate::fastlane::lookups::{ChainLookups as _, NftClaim, NftVerdict};
use crate::fastlane::mechanism::ChainError;

/// What SEP-53 puts before the message it hashes.
pub const SEP53_PREFIX: &[u8] = b"Stellar Signed Message:\n";
/// The token a Stellar verdict names: the balance is of the whole collection.
pub const COLLECTION_BALANCE: &str = "collection-balance";
/// Largest simulated return value read.
const MAX_RESULT_BYTES: usize = 4096;

/// Whether `signature` is the SEP-53 signature of the account `address` (`G…`) over
/// `message`: ed25519 over SHA-256(prefix ‖ message).
pub fn sep53_verifies(address: &str, message: &str, signature: &[u8]) -> bool {
    let Ok(key) = stellar_strkey::ed25519::PublicKey::from_string(address) else {
        return false;
    };
    let digest = Sha256::new()
        .chain_update(SEP53_PREFIX)
        .chain_update(message.as_bytes())
        .finalize();
    ed25519_verifies(&key.0, &digest, signature)
}

/// Whether a contract's `balance` answer is a positive number, whatever integer type the
/// contract returns it in.
pub fn positive_balance(value: &ScVal) -> bool {
    match value {
        ScVal::U32(n) => *n > 0,
        ScVal::I32(n) => *n > 0,
        ScVal::U64(n) => *n > 0,
        ScVal::I64(n) => *n > 0,
        ScVal::U128(parts) => parts.hi > 0 || parts.lo > 0,
        ScVal::I128(parts) => parts.hi > 0 || (parts.hi == 0 && parts.lo > 0),
        _ => false,
    }
}

/// An unsigned transaction from `source` calling `balance(holder)` on `contract`, for
/// simulation only.
pub fn balance_query(
    source: [u8; 32],
    sequence: i64,
    contract: [u8; 32],
    holder: [u8; 32],
) -> Option<String> {
    let holder = ScVal::Address(ScAddress::Account(AccountId(
        PublicKey::PublicKeyTypeEd25519(Uint256(holder)),
    )));
    let call = InvokeContractArgs {
        contract_address: ScAddress::Contract(ContractId(Hash(contract))),
        function_name: ScSymbol("balance".try_into().ok()?),
        args: vec![holder].try_into().ok()?,
    };
    let operation = Operation {
        source_account: None,
        body: OperationBody::InvokeHostFunction(InvokeHostFunctionOp {
            host_function: HostFunction::InvokeContract(call),
            auth: VecM::default(),
        }),
    };
    let transaction = Transaction {
        source_account: MuxedAccount::Ed25519(Uint256(source)),
        fee: 100,
        seq_num: SequenceNumber(sequence),
        cond: Preconditions::None,
        memo: Memo::None,
        operations: vec![operation].try_into().ok()?,
        ext: TransactionExt::V0,
    };
    encode_base64(&TransactionEnvelope::Tx(TransactionV1Envelope {
        tx: transaction,
        signatures: VecM::default(),
    }))
}

#[derive(Debug, Deserialize)]
struct HorizonAccount {
    sequence: String,
    thresholds: Thresholds,
    signers: Vec<Signer>,
}

#[derive(Debug, Deserialize)]
struct Thresholds {
    med_threshold: u32,
}

#[derive(Debug, Deserialize)]
struct Signer {
    key: String,
    weight: u32,
}

#[derive(Debug, Deserialize)]
struct HorizonRoot {
    network_passphrase: String,
}

#[derive(Debug, Deserialize)]
struct RpcNetwork {
    passphrase: String,
}

#[derive(Debug, Deserialize)]
struct BalanceSimulation {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    results: Vec<SimulatedResult>,
}

#[derive(Debug, Deserialize)]
struct SimulatedResult {
    xdr: String,
}

fn unavailable(lookups: &StellarLookups, message: String) -> ChainError {
    ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    }
}

/// Whether the claim's signature is the wallet's and the wallet holds the token.
pub(super) async fn owner(
    lookups: &StellarLookups,
    claim: &NftClaim,
) -> Result<NftVerdict, ChainError> {
    let refused = |reason: &str| Ok(NftVerdict::Refused(reason.to_owned()));
    if !claim.token.is_empty() {
        return refused("token_not_supported_for_collection");
    }
    if !claim.public_key.is_empty() && claim.public_key != claim.wallet {
        return refused("public_key_not_wallet");
    }
    let Ok(wallet) = stellar_strkey::ed25519::PublicKey::from_string(&claim.wallet) else {
        return refused("invalid_wallet");
    };
    let Ok(contract) = stellar_strkey::Contract::from_string(&claim.collection) else {
        return refused("invalid_collection");
    };
    if !sep53_verifies(&claim.wallet, &claim.message, &claim.signature) {
        return refused("invalid_signature");
    }
    let Some(expected) = passphrase(lookups.network()) else {
        return Err(unavailable(lookups, "unknown Stellar network".into()));
    };
    let Some(horizon) = lookups.horizon() else {
        return Err(unavailable(
            lookups,
            "NFT admission needs `horizon` in networks.json".into(),
        ));
    };
    let root: HorizonRoot = horizon
        .get("/")
        .await
        .map_err(|e| unavailable(lookups, format!("horizon: {e}")))?
        .ok_or_else(|| unavailable(lookups, "horizon: no root document".into()))?;
    let network: RpcNetwork = lookups
        .rpc()
        .call("getNetwork", json!({}))
        .await
        .map_err(|e| unavailable(lookups, format!("getNetwork: {e}")))?;
    if root.network_passphrase != expected || network.passphrase != expected {
        return Err(unavailable(
            lookups,
            "the RPC server and Horizon do not both follow the configured network".into(),
        ));
    }
    let path = format!("/accounts/{}", claim.wallet);
    let account: Option<HorizonAccount> = horizon
        .get(&path)
        .await
        .map_err(|e| unavailable(lookups, format!("horizon account: {e}")))?;
    let Some(account) = account else {
        return refused("account_not_found");
    };
    let master_weight = account
        .signers
        .iter()
        .find(|signer| signer.key == claim.wallet)
        .map_or(0, |signer| signer.weight);
    if master_weight < account.thresholds.med_threshold.max(1) {
        return refused("key_not_authorised");
    }
    let Some(sequence) = account
        .sequence
        .parse::<i64>()
        .ok()
        .and_then(|seq| seq.checked_add(1))
    else {
        return Err(unavailable(lookups, "horizon: unreadable sequence".into()));
    };
    let Some(query) = balance_query(wallet.0, sequence, contract.0, wallet.0) else {
        return Err(unavailable(lookups, "balance query not encodable".into()));
    };
    let simulation: BalanceSimulation = lookups
        .rpc()
        .call("simulateTransaction", json!({ "transaction": query }))
        .await
        .map_err(|e| unavailable(lookups, format!("simulateTransaction: {e}")))?;
    if simulation.error.as_deref().is_some_and(|e| !e.is_empty()) {
        // The contract refused the call: not a collection, or no balance entry.
        return refused("not_held");
    }
    let value = simulation
        .results
        .first()
        .and_then(|result| decode_base64_exact::<ScVal>(&result.xdr, MAX_RESULT_BYTES));
    match value {
        Some(value) if positive_balance(&value) => Ok(NftVerdict::Owner {
            owner: claim.wallet.clone(),
            token: COLLECTION_BALANCE.to_owned(),
        }),
        Some(_) => refused("not_held"),
        None => Err(unavailable(
            lookups,
            "simulateTransaction: no readable result".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use proptest::prelude::*;
    use stellar_xdr::{Int128Parts, UInt128Parts};

    use super::*;

    #[test]
    fn the_sep53_vector_verifies_and_changes_do_not() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/stellar.json"
        ))
        .unwrap();
        let vectors: serde_json::Value = serde_json::from_str(&text).unwrap();
        let case = &vectors["sep53"];
        let address = case["address"].as_str().unwrap();
        let message = case["message"].as_str().unwrap();
        let signature = STANDARD
            .decode(case["signature"].as_str().unwrap())
            .unwrap();
        assert!(sep53_verifies(address, message, &signature));
        assert!(!sep53_verifies(address, &format!("{message}!"), &signature));
        // Signing the raw message (no SEP-53 prefix) is a different signature.
        assert!(!ed25519_verifies(
            &stellar_strkey::ed25519::PublicKey::from_string(address)
                .unwrap()
                .0,
            message.as_bytes(),
            &signature
        ));
        let mut flipped = signature.clone();
        flipped[0] ^= 1;
        assert!(!sep53_verifies(address, message, &flipped));
        assert!(!sep53_verifies("GBAD", message, &signature));
    }

    #[test]
    fn only_positive_integers_are_holdings() {
        assert!(positive_balance(&ScVal::U32(1)));
        assert!(!positive_balance(&ScVal::U32(0)));
        assert!(positive_balance(&ScVal::I128(Int128Parts { hi: 0, lo: 1 })));
        assert!(!positive_balance(&ScVal::I128(Int128Parts {
            hi: -1,
            lo: 5
        })));
        assert!(positive_balance(&ScVal::U128(UInt128Parts {
            hi: 1,
            lo: 0
        })));
        assert!(!positive_balance(&ScVal::Bool(true)));
    }

    #[test]
    fn the_balance_query_round_trips() {
        let text = balance_query([1; 32], 5, [2; 32], [3; 32]).unwrap();
        let envelope: TransactionEnvelope = decode_base64_exact(&text, 10_000).unwrap();
        let TransactionEnvelope::Tx(v1) = envelope else {
            panic!("v1 envelope")
        };
        let OperationBody::InvokeHostFunction(op) = &v1.tx.operations[0].body else {
            panic!("invoke")
        };
        let HostFunction::InvokeContract(call) = &op.host_function else {
            panic!("contract call")
        };
        assert_eq!(call.function_name.0.to_string(), "balance");
        assert_eq!(
            call.contract_address,
            ScAddress::Contract(ContractId(Hash([2; 32])))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_signatures_and_addresses_never_panic(
            address in "[A-Z2-7]{0,60}",
            message in ".{0,200}",
            signature in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            prop_assert!(!sep53_verifies(&address, &message, &signature));
        }
    }
}
