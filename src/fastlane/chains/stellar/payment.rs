//! Everything about a Stellar `exact` payment that needs no chain call: the strict decoding of
//! the payer's envelope, the shape of its single `transfer` invocation, the simulated events,
//! and the Soroban authorisation entries with their signatures, checked here with the
//! network's passphrase rather than trusted to the simulation.
//!
//! Reason strings are the x402 facilitator's (`invalid_exact_stellar_payload_*`), so a payer
//! sees the same verdict from Concert as from the reference implementation.

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, VerifyingKey};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use stellar_xdr::{
    AccountId, Asset, ContractEventBody, ContractEventType, ContractIdPreimage, DiagnosticEvent,
    Hash, HashIdPreimage, HashIdPreimageContractId, HashIdPreimageSorobanAuthorization,
    HostFunction, InvokeContractArgs, InvokeHostFunctionOp, Limits, MuxedAccount, OperationBody,
    PublicKey, ReadXdr, ScAddress, ScVal, SorobanAddressCredentials, SorobanAuthorizedInvocation,
    SorobanCredentials, Transaction, TransactionEnvelope, Uint256, WriteXdr,
};

/// The payload's only field.
pub const PAYLOAD_FIELD: &str = "transaction";
/// The largest envelope accepted: far above one transfer with a few signatures (under 2 KiB),
/// and the payment header's own limit.
pub const MAX_ENVELOPE_BYTES: usize = 64 * 1024;
/// Nesting allowed while decoding XDR; a transfer nests about a dozen deep, and the limit keeps
/// hostile nesting from exhausting the stack.
const MAX_XDR_DEPTH: u32 = 64;
/// What a sponsor adds to the simulated resource fee to be included in a ledger.
pub const INCLUSION_FEE_STROOPS: i64 = 100;
/// Ledgers an authorisation may outlive the payment's time limit by.
pub const EXPIRATION_TOLERANCE_LEDGERS: u32 = 2;

pub const PUBNET: &str = "stellar:pubnet";
pub const TESTNET: &str = "stellar:testnet";

pub mod reason {
    pub const MALFORMED: &str = "invalid_exact_stellar_payload_malformed";
    pub const WRONG_OPERATION: &str = "invalid_exact_stellar_payload_wrong_operation";
    pub const UNSAFE_SOURCE: &str = "invalid_exact_stellar_payload_unsafe_tx_or_op_source";
    pub const WRONG_ASSET: &str = "invalid_exact_stellar_payload_wrong_asset";
    pub const WRONG_FUNCTION: &str = "invalid_exact_stellar_payload_wrong_function_name";
    pub const FACILITATOR_IS_PAYER: &str = "invalid_exact_stellar_payload_facilitator_is_payer";
    pub const WRONG_RECIPIENT: &str = "invalid_exact_stellar_payload_wrong_recipient";
    pub const WRONG_AMOUNT: &str = "invalid_exact_stellar_payload_wrong_amount";
    pub const SIMULATION_FAILED: &str = "invalid_exact_stellar_payload_simulation_failed";
    pub const FEE_EXCEEDS_MAXIMUM: &str = "invalid_exact_stellar_payload_fee_exceeds_maximum";
    pub const EVENT_NOT_TRANSFER: &str = "invalid_exact_stellar_payload_event_not_transfer";
    pub const EVENT_MISSING_CONTRACT: &str =
        "invalid_exact_stellar_payload_event_missing_contract_id";
    pub const EVENT_WRONG_ASSET: &str = "invalid_exact_stellar_payload_event_wrong_asset";
    pub const EVENT_WRONG_FROM: &str = "invalid_exact_stellar_payload_event_wrong_from";
    pub const EVENT_WRONG_TO: &str = "invalid_exact_stellar_payload_event_wrong_to";
    pub const EVENT_WRONG_AMOUNT: &str = "invalid_exact_stellar_payload_event_wrong_amount";
    pub const NO_TRANSFER_EVENTS: &str = "invalid_exact_stellar_payload_no_transfer_events";
    pub const MULTIPLE_TRANSFERS: &str = "invalid_exact_stellar_payload_multiple_transfers";
    pub const NO_AUTH_ENTRIES: &str = "invalid_exact_stellar_payload_no_auth_entries";
    pub const UNSUPPORTED_CREDENTIAL: &str =
        "invalid_exact_stellar_payload_unsupported_credential_type";
    pub const FACILITATOR_IN_AUTH: &str = "invalid_exact_stellar_payload_facilitator_in_auth";
    pub const EXPIRATION_TOO_FAR: &str = "invalid_exact_stellar_signature_expiration_too_far";
    pub const HAS_SUBINVOCATIONS: &str = "invalid_exact_stellar_payload_has_subinvocations";
    pub const BAD_PAYER_SIGNATURE: &str = "invalid_exact_stellar_payload_bad_payer_signature";
    pub const MISSING_PAYER_SIGNATURE: &str =
        "invalid_exact_stellar_payload_missing_payer_signature";
    pub const PENDING_SIGNATURES: &str =
        "invalid_exact_stellar_payload_unexpected_pending_signatures";
    pub const UNEXPECTED: &str = "unexpected_verify_error";
    pub const INVALID_VERSION: &str = "invalid_x402_version";
    pub const UNSUPPORTED_SCHEME: &str = "unsupported_scheme";
    pub const NETWORK_MISMATCH: &str = "network_mismatch";
    pub const INVALID_NETWORK: &str = "invalid_network";
}

/// A refused payment: the reason string and the payer, once the envelope names one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub payer: String,
}

impl Refusal {
    pub fn anonymous(reason: &'static str) -> Refusal {
        Refusal {
            reason,
            payer: String::new(),
        }
    }

    pub fn by(reason: &'static str, payer: &str) -> Refusal {
        Refusal {
            reason,
            payer: payer.to_owned(),
        }
    }
}

/// A network's passphrase, which every signature on it commits to.
pub fn passphrase(network: &str) -> Option<&'static str> {
    match network {
        PUBNET => Some("Public Global Stellar Network ; September 2015"),
        TESTNET => Some("Test SDF Network ; September 2015"),
        _ => None,
    }
}

/// The network id: SHA-256 of the passphrase.
pub fn network_id(passphrase: &str) -> [u8; 32] {
    Sha256::digest(passphrase.as_bytes()).into()
}

/// The address (`C…`) of the contract that moves native XLM on the network of `passphrase`.
pub fn native_asset_contract(passphrase: &str) -> Option<String> {
    let preimage = HashIdPreimage::ContractId(HashIdPreimageContractId {
        network_id: Hash(network_id(passphrase)),
        contract_id_preimage: ContractIdPreimage::Asset(Asset::Native),
    });
    let bytes = preimage.to_xdr(Limits::none()).ok()?;
    let id: [u8; 32] = Sha256::digest(&bytes).into();
    Some(stellar_strkey::Contract(id).to_string().as_str().to_owned())
}

fn xdr_limits(len: usize) -> Limits {
    Limits {
        depth: MAX_XDR_DEPTH,
        len,
    }
}

/// Decodes XDR `bytes` as `T`, refusing trailing bytes and any spelling that does not encode
/// back to the same bytes.
pub fn decode_exact<T: ReadXdr + WriteXdr>(bytes: &[u8]) -> Option<T> {
    let value = T::from_xdr(bytes, xdr_limits(bytes.len())).ok()?;
    let again = value.to_xdr(xdr_limits(bytes.len())).ok()?;
    (again == bytes).then_some(value)
}

/// Decodes standard base64 of XDR, refusing any text that is not the canonical spelling.
pub fn decode_base64_exact<T: ReadXdr + WriteXdr>(text: &str, max_bytes: usize) -> Option<T> {
    if text.len() > max_bytes.div_ceil(3) * 4 {
        return None;
    }
    let bytes = STANDARD.decode(text).ok()?;
    if STANDARD.encode(&bytes) != text {
        return None;
    }
    decode_exact(&bytes)
}

/// Standard base64 of `value`'s XDR.
pub fn encode_base64<T: WriteXdr>(value: &T) -> Option<String> {
    value
        .to_xdr(Limits::none())
        .ok()
        .map(|bytes| STANDARD.encode(bytes))
}

/// The payer's envelope text of a payload `{"transaction": base64}`.
pub fn payload_envelope(payload: &Map<String, Value>) -> Option<&str> {
    if payload.len() != 1 {
        return None;
    }
    match payload.get(PAYLOAD_FIELD) {
        Some(Value::String(text)) if !text.is_empty() => Some(text),
        _ => None,
    }
}

/// The ed25519 key behind an account, muxed or not.
pub fn muxed_key(account: &MuxedAccount) -> [u8; 32] {
    match account {
        MuxedAccount::Ed25519(Uint256(key)) => *key,
        MuxedAccount::MuxedEd25519(muxed) => muxed.ed25519.0,
    }
}

/// The ed25519 key of an address that is an account (plain or muxed).
fn address_key(address: &ScAddress) -> Option<[u8; 32]> {
    match address {
        ScAddress::Account(AccountId(PublicKey::PublicKeyTypeEd25519(Uint256(key)))) => Some(*key),
        ScAddress::MuxedAccount(muxed) => Some(muxed.ed25519.0),
        _ => None,
    }
}

/// The strkey of an address value, or `None` when the value is no address.
pub fn address_text(value: &ScVal) -> Option<String> {
    match value {
        ScVal::Address(address) => Some(address.to_string()),
        _ => None,
    }
}

fn i128_of(value: &ScVal) -> Option<i128> {
    match value {
        ScVal::I128(parts) => Some((i128::from(parts.hi) << 64) | i128::from(parts.lo)),
        _ => None,
    }
}

/// A positive decimal amount without sign or leading zeros.
pub fn parse_amount(text: &str) -> Option<i128> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || text.starts_with('0') || text.len() > 38 {
        return None;
    }
    text.parse().ok()
}

/// A payment whose envelope passed every local check before simulation.
#[derive(Debug, Clone)]
pub struct Transfer {
    /// The payer's envelope exactly as sent (canonical base64).
    pub envelope_text: String,
    pub transaction: Transaction,
    pub operation_source: Option<MuxedAccount>,
    pub invocation: InvokeHostFunctionOp,
    /// The payer (`from` of the transfer) as a strkey.
    pub from: String,
    pub to: String,
    pub amount: i128,
}

/// What a payment must match, from the terms.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub asset: &'a str,
    pub pay_to: &'a str,
    pub amount: &'a str,
    /// The sponsor's key, which must not appear anywhere as a party of the payment.
    pub sponsor: &'a [u8; 32],
}

/// The checks on the envelope alone, in the reference's order: one `InvokeHostFunction`, no
/// sponsor as a source, a `transfer(from, to, i128)` on the asset contract, sponsor not the
/// payer, the terms' recipient and exact amount.
pub fn inspect(payload: &Map<String, Value>, expected: &Expected<'_>) -> Result<Transfer, Refusal> {
    let malformed = || Refusal::anonymous(reason::MALFORMED);
    let text = payload_envelope(payload).ok_or_else(malformed)?;
    let envelope: TransactionEnvelope =
        decode_base64_exact(text, MAX_ENVELOPE_BYTES).ok_or_else(malformed)?;
    let TransactionEnvelope::Tx(envelope) = envelope else {
        return Err(malformed());
    };
    let transaction = envelope.tx;
    let [operation] = transaction.operations.as_slice() else {
        return Err(Refusal::anonymous(reason::WRONG_OPERATION));
    };
    let OperationBody::InvokeHostFunction(invocation) = &operation.body else {
        return Err(Refusal::anonymous(reason::WRONG_OPERATION));
    };
    let sponsor_is_source = operation
        .source_account
        .as_ref()
        .is_some_and(|source| muxed_key(source) == *expected.sponsor)
        || muxed_key(&transaction.source_account) == *expected.sponsor;
    if sponsor_is_source {
        return Err(Refusal::anonymous(reason::UNSAFE_SOURCE));
    }
    let HostFunction::InvokeContract(call) = &invocation.host_function else {
        return Err(Refusal::anonymous(reason::WRONG_OPERATION));
    };
    let InvokeContractArgs {
        contract_address,
        function_name,
        args,
    } = call;
    if contract_address.to_string() != expected.asset {
        return Err(Refusal::anonymous(reason::WRONG_ASSET));
    }
    let [from, to, amount] = args.as_slice() else {
        return Err(Refusal::anonymous(reason::WRONG_FUNCTION));
    };
    if function_name.0.as_slice() != b"transfer" {
        return Err(Refusal::anonymous(reason::WRONG_FUNCTION));
    }
    let ScVal::Address(from_address) = from else {
        return Err(malformed());
    };
    if address_key(from_address) == Some(*expected.sponsor) {
        return Err(Refusal::anonymous(reason::FACILITATOR_IS_PAYER));
    }
    let from_text = from_address.to_string();
    let to_text = address_text(to).unwrap_or_default();
    if to_text != expected.pay_to {
        return Err(Refusal::by(reason::WRONG_RECIPIENT, &from_text));
    }
    let amount = match (parse_amount(expected.amount), i128_of(amount)) {
        (Some(wanted), Some(moved)) if wanted == moved => moved,
        _ => return Err(Refusal::by(reason::WRONG_AMOUNT, &from_text)),
    };
    Ok(Transfer {
        envelope_text: text.to_owned(),
        operation_source: operation.source_account.clone(),
        invocation: invocation.clone(),
        transaction,
        from: from_text,
        to: to_text,
        amount,
    })
}

/// The simulated events must hold exactly one `transfer` event of the asset contract, moving
/// the amount from the payer to the recipient. Diagnostic and system events are skipped.
pub fn check_events(
    events: &[String],
    transfer: &Transfer,
    asset: &str,
) -> Result<(), &'static str> {
    let mut transfers = 0usize;
    for text in events {
        let event: DiagnosticEvent =
            decode_base64_exact(text, MAX_ENVELOPE_BYTES).ok_or(reason::UNEXPECTED)?;
        let event = event.event;
        if event.type_ != ContractEventType::Contract {
            continue;
        }
        let ContractEventBody::V0(body) = &event.body;
        let topics = body.topics.as_slice();
        let [name, from, to, ..] = topics else {
            return Err(reason::EVENT_NOT_TRANSFER);
        };
        let is_transfer =
            matches!(name, ScVal::Symbol(symbol) if symbol.0.as_slice() == b"transfer");
        if !is_transfer {
            return Err(reason::EVENT_NOT_TRANSFER);
        }
        let Some(contract) = &event.contract_id else {
            return Err(reason::EVENT_MISSING_CONTRACT);
        };
        if contract.to_string() != asset {
            return Err(reason::EVENT_WRONG_ASSET);
        }
        transfers += 1;
        if transfers > 1 {
            continue;
        }
        if address_text(from).as_deref() != Some(transfer.from.as_str()) {
            return Err(reason::EVENT_WRONG_FROM);
        }
        if address_text(to).as_deref() != Some(transfer.to.as_str()) {
            return Err(reason::EVENT_WRONG_TO);
        }
        if i128_of(&body.data) != Some(transfer.amount) {
            return Err(reason::EVENT_WRONG_AMOUNT);
        }
    }
    match transfers {
        0 => Err(reason::NO_TRANSFER_EVENTS),
        1 => Ok(()),
        _ => Err(reason::MULTIPLE_TRANSFERS),
    }
}

/// The authorisation entries: address credentials only, never the sponsor, expiring within
/// `max_expiration`, no sub-invocations; every account credential's signatures verify here
/// (one by the account's own key); the payer has signed, and nobody's signature is left
/// pending.
pub fn check_authorisations(
    transfer: &Transfer,
    sponsor: &[u8; 32],
    network_id: &[u8; 32],
    max_expiration: u32,
) -> Result<(), &'static str> {
    let entries = transfer.invocation.auth.as_slice();
    if entries.is_empty() {
        return Err(reason::NO_AUTH_ENTRIES);
    }
    let mut signed = BTreeSet::new();
    let mut pending = BTreeSet::new();
    for entry in entries {
        // The newer credential kinds sign other preimages; only the classic one is checked.
        let SorobanCredentials::Address(credentials) = &entry.credentials else {
            return Err(reason::UNSUPPORTED_CREDENTIAL);
        };
        if address_key(&credentials.address) == Some(*sponsor) {
            return Err(reason::FACILITATOR_IN_AUTH);
        }
        if credentials.signature_expiration_ledger > max_expiration {
            return Err(reason::EXPIRATION_TOO_FAR);
        }
        if !entry.root_invocation.sub_invocations.is_empty() {
            return Err(reason::HAS_SUBINVOCATIONS);
        }
        let address = credentials.address.to_string();
        if credentials.signature == ScVal::Void {
            pending.insert(address);
            continue;
        }
        // The simulation does not check signatures, so an account's are checked here.
        if let ScAddress::Account(AccountId(PublicKey::PublicKeyTypeEd25519(Uint256(key)))) =
            &credentials.address
        {
            let digest = authorisation_digest(network_id, credentials, &entry.root_invocation)
                .ok_or(reason::BAD_PAYER_SIGNATURE)?;
            if !account_signatures_verify(&credentials.signature, &digest, key) {
                return Err(reason::BAD_PAYER_SIGNATURE);
            }
        }
        signed.insert(address);
    }
    if !signed.contains(&transfer.from) {
        return Err(reason::MISSING_PAYER_SIGNATURE);
    }
    if !pending.is_empty() {
        return Err(reason::PENDING_SIGNATURES);
    }
    Ok(())
}

/// What an address credential signs: SHA-256 of the XDR `HashIdPreimage` of type
/// SOROBAN_AUTHORIZATION (network id, nonce, expiration ledger, invocation).
pub fn authorisation_digest(
    network_id: &[u8; 32],
    credentials: &SorobanAddressCredentials,
    invocation: &SorobanAuthorizedInvocation,
) -> Option<[u8; 32]> {
    let preimage = HashIdPreimage::SorobanAuthorization(HashIdPreimageSorobanAuthorization {
        network_id: Hash(*network_id),
        nonce: credentials.nonce,
        signature_expiration_ledger: credentials.signature_expiration_ledger,
        invocation: invocation.clone(),
    });
    let bytes = preimage.to_xdr(Limits::none()).ok()?;
    Some(Sha256::digest(&bytes).into())
}

/// An account credential's signature value: a non-empty vector of `{public_key, signature}`
/// maps, each signature valid over `digest`, one of them by `account` itself. Signer weights
/// are the network's to enforce.
pub fn account_signatures_verify(signature: &ScVal, digest: &[u8; 32], account: &[u8; 32]) -> bool {
    let ScVal::Vec(Some(signatures)) = signature else {
        return false;
    };
    if signatures.is_empty() {
        return false;
    }
    let mut by_account = false;
    for item in signatures.iter() {
        let ScVal::Map(Some(map)) = item else {
            return false;
        };
        let mut public_key = None;
        let mut signature = None;
        for entry in map.iter() {
            let (ScVal::Symbol(name), ScVal::Bytes(bytes)) = (&entry.key, &entry.val) else {
                return false;
            };
            match name.0.as_slice() {
                b"public_key" if public_key.is_none() => public_key = Some(bytes.0.as_slice()),
                b"signature" if signature.is_none() => signature = Some(bytes.0.as_slice()),
                _ => return false,
            }
        }
        let (Some(public_key), Some(signature)) = (public_key, signature) else {
            return false;
        };
        if !ed25519_verifies(public_key, digest, signature) {
            return false;
        }
        by_account |= public_key == account;
    }
    by_account
}

/// Strict ed25519 over `message`; any malformed key or signature is simply not valid.
pub fn ed25519_verifies(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let (Ok(key), Ok(signature)) = (
        <[u8; 32]>::try_from(public_key),
        <[u8; 64]>::try_from(signature),
    ) else {
        return false;
    };
    let Ok(key) = VerifyingKey::from_bytes(&key) else {
        return false;
    };
    key.verify_strict(message, &Signature::from_bytes(&signature))
        .is_ok()
}
