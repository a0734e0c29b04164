//! The one shape of payment the `concert-native-sol` scheme accepts: a legacy transaction,
//! signed by its single signer, whose only instruction is a System Program transfer of exactly
//! the offered lamports to the offer's `payTo`. Everything here is local (no chain call):
//! decoding, the shape, the terms and the signature. It also builds the unsigned transfer the
//! page asks a wallet to sign.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, VerifyingKey};
use serde_json::{Map, Value};

use super::wire::{
    CompiledInstruction, KEY_LEN, Message, MessageHeader, SIGNATURE_LEN, Transaction,
};
use crate::fastlane::x402::PaymentRequirements;

/// The System Program's address: 32 zero bytes (`11111111111111111111111111111111`).
pub const SYSTEM_PROGRAM: [u8; KEY_LEN] = [0; KEY_LEN];
/// The System Program's instruction number for a lamport transfer.
const TRANSFER_INSTRUCTION: u32 = 2;
/// Smallest and largest accepted wire transaction; the upper bound is Solana's packet limit.
pub const MIN_TRANSACTION_LEN: usize = 100;
pub const MAX_TRANSACTION_LEN: usize = 1232;
/// Keys a transfer needs (payer, recipient, System Program) and the most accepted.
const MIN_KEYS: usize = 3;
const MAX_KEYS: usize = 16;
/// The payload's only field.
pub const PAYLOAD_FIELD: &str = "transaction";

/// Why a payment is refused. The verdict's reason is always `invalid_native_sol_payment`; this
/// says which check failed, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub why: &'static str,
    /// The signer, when the transaction decoded far enough to name one.
    pub payer: Option<String>,
}

impl Refusal {
    fn new(why: &'static str) -> Refusal {
        Refusal { why, payer: None }
    }
}

/// A payment that passed every local check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeTransfer {
    /// The exact wire bytes, as sent to the chain.
    pub wire: Vec<u8>,
    pub from: [u8; KEY_LEN],
    pub to: [u8; KEY_LEN],
    pub lamports: u64,
    pub signature: [u8; SIGNATURE_LEN],
    pub recent_blockhash: [u8; KEY_LEN],
}

impl NativeTransfer {
    /// The payer's address (base58).
    pub fn payer(&self) -> String {
        bs58::encode(self.from).into_string()
    }

    /// The transaction's id on the chain: its first signature in base58.
    pub fn signature_text(&self) -> String {
        bs58::encode(self.signature).into_string()
    }

    pub fn blockhash_text(&self) -> String {
        bs58::encode(self.recent_blockhash).into_string()
    }

    /// The wire bytes in standard base64, the encoding the RPC methods are given.
    pub fn wire_base64(&self) -> String {
        STANDARD.encode(&self.wire)
    }
}

/// What the terms ask for, parsed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferTerms {
    pub pay_to: [u8; KEY_LEN],
    pub lamports: u64,
}

impl TransferTerms {
    /// `None` when `payTo` is not a canonical base58 key or `amount` not a positive decimal
    /// that fits 64 bits.
    pub fn parse(terms: &PaymentRequirements) -> Option<TransferTerms> {
        Some(TransferTerms {
            pay_to: parse_key(&terms.pay_to)?,
            lamports: parse_amount(&terms.amount)?,
        })
    }
}

/// A base58 address in its canonical spelling (the one it encodes back to) as 32 bytes.
pub fn parse_key(text: &str) -> Option<[u8; KEY_LEN]> {
    // 32 bytes never take more than 44 base58 characters.
    if text.is_empty() || text.len() > 44 {
        return None;
    }
    let bytes = bs58::decode(text).into_vec().ok()?;
    let key: [u8; KEY_LEN] = bytes.try_into().ok()?;
    (bs58::encode(key).into_string() == text).then_some(key)
}

/// A positive decimal without sign or leading zeros that fits 64 bits.
fn parse_amount(text: &str) -> Option<u64> {
    let digits_only = !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    if !digits_only || text.starts_with('0') {
        return None;
    }
    text.parse().ok()
}

/// Checks a payment payload (`{"transaction": base64}`) against `terms`.
pub fn inspect_payload(
    payload: &Map<String, Value>,
    terms: &TransferTerms,
) -> Result<NativeTransfer, Refusal> {
    let wire = decode_payload(payload)?;
    inspect(wire, terms)
}

/// The wire bytes of a payload, without judging them.
pub fn decode_payload(payload: &Map<String, Value>) -> Result<Vec<u8>, Refusal> {
    if payload.len() != 1 {
        return Err(Refusal::new("the payload must hold only `transaction`"));
    }
    let Some(Value::String(text)) = payload.get(PAYLOAD_FIELD) else {
        return Err(Refusal::new("`transaction` must be a string"));
    };
    // Four characters per three bytes: anything longer cannot decode to an accepted size.
    if text.len() > MAX_TRANSACTION_LEN.div_ceil(3) * 4 {
        return Err(Refusal::new("the transaction is too large"));
    }
    // The standard engine refuses non-canonical padding and trailing bits, so each
    // transaction has one accepted spelling.
    STANDARD
        .decode(text)
        .map_err(|_| Refusal::new("the transaction is not canonical base64"))
}

/// Every local check of a wire transaction against `terms`.
pub fn inspect(wire: Vec<u8>, terms: &TransferTerms) -> Result<NativeTransfer, Refusal> {
    if !(MIN_TRANSACTION_LEN..=MAX_TRANSACTION_LEN).contains(&wire.len()) {
        return Err(Refusal::new("the transaction size is out of range"));
    }
    let transaction = Transaction::decode(&wire)
        .map_err(|_| Refusal::new("the transaction does not decode strictly"))?;
    if transaction.encode() != wire {
        return Err(Refusal::new(
            "the transaction does not re-encode to its bytes",
        ));
    }
    let message = &transaction.message;
    let from = *message
        .account_keys
        .first()
        .ok_or(Refusal::new("the transaction names no keys"))?;
    let payer = bs58::encode(from).into_string();
    let refuse = |why| Refusal {
        why,
        payer: Some(payer.clone()),
    };

    let [signature] = transaction.signatures.as_slice() else {
        return Err(refuse("the transaction must carry exactly one signature"));
    };
    let keys = &message.account_keys;
    let header = message.header;
    // The payer signs and pays fees, so it is the only signer and writable.
    if header.required_signatures != 1 || header.readonly_signed != 0 {
        return Err(refuse("the payer must be the only, writable signer"));
    }
    if !(MIN_KEYS..=MAX_KEYS).contains(&keys.len()) {
        return Err(refuse("the transaction must name 3 to 16 keys"));
    }
    if usize::from(header.readonly_unsigned) > keys.len() - 1 {
        return Err(refuse("the header marks more keys read-only than exist"));
    }
    for (index, key) in keys.iter().enumerate() {
        if keys[..index].contains(key) {
            return Err(refuse("a key is listed twice"));
        }
    }
    let [instruction] = message.instructions.as_slice() else {
        return Err(refuse("the transaction must hold exactly one instruction"));
    };
    // Keys from this index on are read-only and unsigned.
    let first_readonly = keys.len() - usize::from(header.readonly_unsigned);
    let program_index = usize::from(instruction.program_index);
    if keys.get(program_index) != Some(&SYSTEM_PROGRAM) || program_index < first_readonly {
        return Err(refuse("the instruction is not a System Program call"));
    }
    let [from_index, to_index] = instruction.accounts.as_slice() else {
        return Err(refuse("a transfer names exactly two accounts"));
    };
    let (from_index, to_index) = (usize::from(*from_index), usize::from(*to_index));
    if from_index != 0 || to_index == 0 || to_index >= first_readonly {
        return Err(refuse(
            "the transfer must move lamports from the signer to a writable key",
        ));
    }
    let lamports = transfer_lamports(&instruction.data)
        .ok_or_else(|| refuse("the instruction is not a System transfer"))?;
    let to = keys[to_index];
    if to != terms.pay_to {
        return Err(refuse("the transfer pays another account"));
    }
    if from == terms.pay_to {
        return Err(refuse("the payer is the recipient"));
    }
    if lamports != terms.lamports {
        return Err(refuse("the transfer moves another amount"));
    }
    if !signature_verifies(&from, &message.encode(), signature) {
        return Err(refuse("the signature does not verify"));
    }
    Ok(NativeTransfer {
        from,
        to,
        lamports,
        signature: *signature,
        recent_blockhash: message.recent_blockhash,
        wire,
    })
}

/// The lamports of a System transfer's data: `u32 LE 2 ‖ u64 LE lamports`, nothing more.
fn transfer_lamports(data: &[u8]) -> Option<u64> {
    let (kind, lamports) = data.split_first_chunk::<4>()?;
    let lamports: [u8; 8] = lamports.try_into().ok()?;
    (u32::from_le_bytes(*kind) == TRANSFER_INSTRUCTION).then(|| u64::from_le_bytes(lamports))
}

/// Strict ed25519: refuses small-order keys and non-canonical signatures as well as forgeries.
pub fn signature_verifies(
    key: &[u8; KEY_LEN],
    message: &[u8],
    signature: &[u8; SIGNATURE_LEN],
) -> bool {
    let Ok(key) = VerifyingKey::from_bytes(key) else {
        return false;
    };
    key.verify_strict(message, &Signature::from_bytes(signature))
        .is_ok()
}

/// The unsigned transfer of `lamports` from `from` to `to` with `blockhash`: keys
/// `[from, to, System Program]`, one all-zero signature slot for the wallet to fill.
pub fn unsigned_transfer(
    from: [u8; KEY_LEN],
    to: [u8; KEY_LEN],
    lamports: u64,
    blockhash: [u8; KEY_LEN],
) -> Transaction {
    let mut data = Vec::with_capacity(12);
    data.extend_from_slice(&TRANSFER_INSTRUCTION.to_le_bytes());
    data.extend_from_slice(&lamports.to_le_bytes());
    Transaction {
        signatures: vec![[0; SIGNATURE_LEN]],
        message: Message {
            header: MessageHeader {
                required_signatures: 1,
                readonly_signed: 0,
                readonly_unsigned: 1,
            },
            account_keys: vec![from, to, SYSTEM_PROGRAM],
            recent_blockhash: blockhash,
            instructions: vec![CompiledInstruction {
                program_index: 2,
                accounts: vec![0, 1],
                data,
            }],
        },
    }
}
