//! Reading a Hedera payment payload: the base64 `TransactionList` (one signed copy of the
//! transfer per consensus node), decoded strictly and checked to be one plain HBAR transfer,
//! and the checks of that transfer against the terms that need no chain.

use std::collections::HashSet;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::proto::{self, SignedTransaction, TransactionBody, TransactionList, decode_exact};

/// Largest decoded payload, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// Most node copies one payload may carry (the SDKs freeze for a handful).
pub const MAX_NODE_TRANSACTIONS: usize = 64;

/// A Hedera entity id `shard.realm.num`, each part a non-negative int64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityId {
    pub shard: i64,
    pub realm: i64,
    pub num: i64,
}

impl EntityId {
    /// Reads `0.0.N` (any shard and realm; each part plain decimal digits).
    pub fn parse(text: &str) -> Option<EntityId> {
        let mut parts = text.split('.');
        let mut next = || -> Option<i64> {
            let part = parts.next()?;
            let plain = !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_digit())
                && (part == "0" || !part.starts_with('0'));
            if plain { part.parse().ok() } else { None }
        };
        let id = EntityId {
            shard: next()?,
            realm: next()?,
            num: next()?,
        };
        parts.next().is_none().then_some(id)
    }

    /// The id of an `AccountID` given by number (absent shard or realm read as 0, as protobuf
    /// defaults are); `None` for an alias, a missing number or a negative part.
    fn from_proto(account: Option<&proto::AccountId>) -> Option<EntityId> {
        let account = account?;
        let id = EntityId {
            shard: account.shard_num.unwrap_or(0),
            realm: account.realm_num.unwrap_or(0),
            num: account.account_num?,
        };
        (id.shard >= 0 && id.realm >= 0 && id.num >= 0).then_some(id)
    }
}

impl fmt::Display for EntityId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}.{}.{}", self.shard, self.realm, self.num)
    }
}

/// One HBAR movement of the transfer, in tinybars (negative: debit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub account: EntityId,
    pub amount: i64,
}

/// One node's copy: the signed body as sent, decoded.
#[derive(Debug, Clone)]
pub struct NodeCopy {
    pub node: EntityId,
    pub signed: SignedTransaction,
    pub body_bytes: Vec<u8>,
}

/// A payload that decoded into one plain HBAR transfer, identical for every node.
#[derive(Debug, Clone)]
pub struct HbarTransfer {
    pub copies: Vec<NodeCopy>,
    /// As the body carries it, for the receipt query.
    pub transaction_id: proto::TransactionId,
    /// `payer@seconds.nanos`, nanos zero-padded to 9 digits.
    pub transaction_id_text: String,
    /// The valid start of the transaction id: seconds and nanoseconds.
    pub valid_start: (i64, i32),
    /// The account of the transaction id: who pays the network fee.
    pub fee_payer: EntityId,
    pub transfers: Vec<Transfer>,
    pub token_transfers: bool,
    /// The most network fee the fee payer authorised, in tinybars.
    pub max_fee: u64,
}

/// Why a payload is not a usable transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecodable {
    /// Well-formed, but a transaction of another kind.
    NotTransfer,
    /// Not decodable, or decodable only by dropping something (unknown fields).
    Malformed(&'static str),
}

/// Decodes the payload's `transaction` text. Every node copy must be a `signedTransactionBytes`
/// transaction whose body is a crypto transfer equal to the others but for its node.
pub fn decode_payload(text: &str) -> Result<HbarTransfer, Undecodable> {
    // Base64 of the largest payload, padding included.
    if text.is_empty() || text.len() > MAX_PAYLOAD_BYTES.div_ceil(3) * 4 {
        return Err(Undecodable::Malformed("payload size"));
    }
    let raw = STANDARD
        .decode(text)
        .map_err(|_| Undecodable::Malformed("not base64"))?;
    if raw.is_empty() || raw.len() > MAX_PAYLOAD_BYTES {
        return Err(Undecodable::Malformed("payload size"));
    }
    let transactions = match decode_exact::<TransactionList>(&raw) {
        Some(list) if !list.transaction_list.is_empty() => list.transaction_list,
        // The SDKs may also send a single transaction instead of a list.
        _ => vec![
            decode_exact::<proto::Transaction>(&raw)
                .ok_or(Undecodable::Malformed("not a transaction list"))?,
        ],
    };
    if transactions.len() > MAX_NODE_TRANSACTIONS {
        return Err(Undecodable::Malformed("too many node transactions"));
    }
    let mut copies = Vec::with_capacity(transactions.len());
    let mut nodes = HashSet::new();
    let mut reference: Option<TransactionBody> = None;
    for transaction in transactions {
        let signed_bytes = transaction
            .signed_transaction_bytes
            .filter(|bytes| !bytes.is_empty())
            .ok_or(Undecodable::Malformed("no signed transaction bytes"))?;
        let signed = decode_exact::<SignedTransaction>(&signed_bytes)
            .ok_or(Undecodable::Malformed("signed transaction"))?;
        let body_bytes = signed
            .body_bytes
            .clone()
            .filter(|bytes| !bytes.is_empty())
            .ok_or(Undecodable::Malformed("no body"))?;
        let body = decode_body(&body_bytes)?;
        let node = EntityId::from_proto(body.node_account_id.as_ref())
            .ok_or(Undecodable::Malformed("node account"))?;
        if !nodes.insert(node) {
            return Err(Undecodable::Malformed("repeated node"));
        }
        let mut nodeless = body;
        nodeless.node_account_id = None;
        match &reference {
            None => reference = Some(nodeless),
            Some(first) if *first == nodeless => {}
            Some(_) => return Err(Undecodable::Malformed("node copies differ")),
        }
        copies.push(NodeCopy {
            node,
            signed,
            body_bytes,
        });
    }
    let body = reference.ok_or(Undecodable::Malformed("no transaction"))?;
    transfer_of(body, copies)
}

/// A body that is a crypto transfer and nothing the declared messages do not know.
fn decode_body(bytes: &[u8]) -> Result<TransactionBody, Undecodable> {
    use prost::Message as _;
    let body =
        TransactionBody::decode(bytes).map_err(|_| Undecodable::Malformed("transaction body"))?;
    if body.crypto_transfer.is_none() {
        return Err(Undecodable::NotTransfer);
    }
    if body.encode_to_vec() != bytes {
        return Err(Undecodable::Malformed("unknown or repeated body fields"));
    }
    Ok(body)
}

fn transfer_of(body: TransactionBody, copies: Vec<NodeCopy>) -> Result<HbarTransfer, Undecodable> {
    let id = body
        .transaction_id
        .ok_or(Undecodable::Malformed("no transaction id"))?;
    let start = id
        .transaction_valid_start
        .as_ref()
        .ok_or(Undecodable::Malformed("no valid start"))?;
    let (seconds, nanos) = (start.seconds.unwrap_or(0), start.nanos.unwrap_or(0));
    if seconds < 0 || !(0..1_000_000_000).contains(&nanos) {
        return Err(Undecodable::Malformed("valid start"));
    }
    // A scheduled or child transaction id is not a payment the payer submits.
    if id.scheduled == Some(true) || id.nonce.unwrap_or(0) != 0 {
        return Err(Undecodable::Malformed("scheduled or nonce transaction id"));
    }
    let fee_payer = EntityId::from_proto(id.account_id.as_ref())
        .ok_or(Undecodable::Malformed("transaction id account"))?;
    let crypto = body.crypto_transfer.unwrap_or_default();
    let mut seen = HashSet::new();
    let mut transfers = Vec::new();
    for entry in crypto
        .transfers
        .map(|t| t.account_amounts)
        .unwrap_or_default()
    {
        if entry.is_approval == Some(true) {
            return Err(Undecodable::Malformed("approved transfer"));
        }
        let account = EntityId::from_proto(entry.account_id.as_ref())
            .ok_or(Undecodable::Malformed("transfer account"))?;
        if !seen.insert(account) {
            return Err(Undecodable::Malformed("repeated transfer account"));
        }
        transfers.push(Transfer {
            account,
            amount: entry.amount.unwrap_or(0),
        });
    }
    Ok(HbarTransfer {
        copies,
        transaction_id_text: format!("{fee_payer}@{seconds}.{nanos:09}"),
        transaction_id: id,
        valid_start: (seconds, nanos),
        fee_payer,
        transfers,
        token_transfers: !crypto.token_transfers.is_empty(),
        max_fee: body.transaction_fee.unwrap_or(0),
    })
}

impl HbarTransfer {
    /// The transaction id as the mirror node's REST paths write it: `payer-seconds-nanos`.
    pub fn mirror_transaction_id(&self) -> String {
        let (seconds, nanos) = self.valid_start;
        format!("{}-{seconds}-{nanos:09}", self.fee_payer)
    }
}

/// What the transfer checks found: the one payer and what it is debited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payer {
    pub account: EntityId,
    /// Tinybars leaving the payer (positive).
    pub debit: u64,
}

/// The terms a transfer is judged against.
#[derive(Debug, Clone, Copy)]
pub struct TransferTerms {
    pub fee_payer: EntityId,
    pub pay_to: EntityId,
    pub amount: u64,
    pub max_fee: u64,
}

/// A refused transfer: the reason string and the payer when one is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: &'static str,
    pub payer: Option<EntityId>,
}

fn refused(reason: &'static str) -> Refused {
    Refused {
        reason,
        payer: None,
    }
}

/// The net change of `account` over all transfers.
fn net(transfers: &[Transfer], account: EntityId) -> i128 {
    transfers
        .iter()
        .filter(|t| t.account == account)
        .map(|t| i128::from(t.amount))
        .sum()
}

/// The checks of the transfer itself, in order: who pays the fee, that HBAR is only moved
/// (never made), that the sponsor only pays fees, that only HBAR moves, the exact amount to
/// the receiver and to no one else, exactly one payer, and the fee cap.
pub fn check_transfer(transfer: &HbarTransfer, terms: &TransferTerms) -> Result<Payer, Refused> {
    let transfers = &transfer.transfers;
    if transfer.fee_payer != terms.fee_payer {
        return Err(refused("invalid_exact_hedera_payload_fee_payer_mismatch"));
    }
    if transfers.iter().map(|t| i128::from(t.amount)).sum::<i128>() != 0 {
        return Err(refused("invalid_exact_hedera_payload_hbar_sum_non_zero"));
    }
    if net(transfers, terms.fee_payer) < 0 {
        return Err(refused(
            "invalid_exact_hedera_payload_fee_payer_transferring_hbar",
        ));
    }
    if transfer.token_transfers {
        return Err(refused("invalid_exact_hedera_payload_asset_mismatch"));
    }
    if net(transfers, terms.pay_to) != i128::from(terms.amount) {
        return Err(refused("invalid_exact_hedera_payload_amount_mismatch"));
    }
    if transfers
        .iter()
        .any(|t| t.amount > 0 && t.account != terms.pay_to)
    {
        return Err(refused(
            "invalid_exact_hedera_payload_extra_positive_transfers",
        ));
    }
    let mut payers = transfers.iter().filter(|t| t.amount < 0);
    let first = payers.next();
    let payer = first.map(|t| t.account);
    // Every debited account would need screening: one payer only.
    let (Some(first), None) = (first, payers.next()) else {
        return Err(Refused {
            reason: "invalid_exact_hedera_payload_multiple_payers",
            payer,
        });
    };
    if transfer.max_fee > terms.max_fee {
        return Err(Refused {
            reason: "invalid_exact_hedera_payload_max_fee_too_high",
            payer,
        });
    }
    Ok(Payer {
        account: first.account,
        debit: first.amount.unsigned_abs(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_ids_are_three_plain_numbers() {
        let id = EntityId::parse("0.0.123").expect("id");
        assert_eq!(id.to_string(), "0.0.123");
        for bad in [
            "0.0",
            "0.0.01",
            "0.0.-1",
            "0.0.1.2",
            "a.b.c",
            "",
            "0.0.99999999999999999999",
        ] {
            assert_eq!(EntityId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        assert!(matches!(decode_payload(""), Err(Undecodable::Malformed(_))));
        assert!(matches!(
            decode_payload("!!"),
            Err(Undecodable::Malformed(_))
        ));
        assert!(matches!(
            decode_payload("AAAA"),
            Err(Undecodable::Malformed(_))
        ));
    }
}
