//! The Hedera protobuf messages a payment and its submission use, declared by hand with the
//! field numbers of Hedera's public `.proto` files. Only the fields a plain HBAR transfer
//! needs are declared; everything else is unknown here.
//!
//! prost skips unknown fields silently, so [`decode_exact`] re-encodes every decoded message
//! and requires the very bytes it was given: an unknown field, a repeated singular field, a
//! second oneof member or a non-minimal varint all change the bytes and are refused. Scalars
//! are declared `optional` so a field written explicitly with its default value (the SDKs
//! write `shardNum: 0`, `memo: ""`) survives the round trip.

use prost::Message;

/// Decodes `bytes` as `M` and refuses them unless re-encoding gives them back exactly.
pub fn decode_exact<M: Message + Default>(bytes: &[u8]) -> Option<M> {
    let message = M::decode(bytes).ok()?;
    (message.encode_to_vec() == bytes).then_some(message)
}

/// `TransactionList`: one `Transaction` per node the payer froze the transfer for.
#[derive(Clone, PartialEq, Message)]
pub struct TransactionList {
    #[prost(message, repeated, tag = "1")]
    pub transaction_list: Vec<Transaction>,
}

/// `Transaction`: only the `signedTransactionBytes` form (the older fields are unknown here).
#[derive(Clone, PartialEq, Message)]
pub struct Transaction {
    #[prost(bytes = "vec", optional, tag = "5")]
    pub signed_transaction_bytes: Option<Vec<u8>>,
}

/// `SignedTransaction`: the body's bytes and the signatures over them.
#[derive(Clone, PartialEq, Message)]
pub struct SignedTransaction {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub body_bytes: Option<Vec<u8>>,
    #[prost(message, optional, tag = "2")]
    pub sig_map: Option<SignatureMap>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SignatureMap {
    #[prost(message, repeated, tag = "1")]
    pub sig_pair: Vec<SignaturePair>,
}

/// One signature and the public key it is by (`pubKeyPrefix`, here the whole key).
#[derive(Clone, PartialEq, Message)]
pub struct SignaturePair {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub pub_key_prefix: Option<Vec<u8>>,
    #[prost(oneof = "Signature", tags = "3, 6")]
    pub signature: Option<Signature>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Signature {
    /// 64 bytes over the body.
    #[prost(bytes = "vec", tag = "3")]
    Ed25519(Vec<u8>),
    /// 64 bytes `r‖s` over keccak-256 of the body.
    #[prost(bytes = "vec", tag = "6")]
    EcdsaSecp256k1(Vec<u8>),
}

/// `TransactionBody` with the one transaction kind accepted, a crypto transfer.
#[derive(Clone, PartialEq, Message)]
pub struct TransactionBody {
    #[prost(message, optional, tag = "1")]
    pub transaction_id: Option<TransactionId>,
    #[prost(message, optional, tag = "2")]
    pub node_account_id: Option<AccountId>,
    #[prost(uint64, optional, tag = "3")]
    pub transaction_fee: Option<u64>,
    #[prost(message, optional, tag = "4")]
    pub transaction_valid_duration: Option<Duration>,
    #[prost(string, optional, tag = "6")]
    pub memo: Option<String>,
    #[prost(message, optional, tag = "14")]
    pub crypto_transfer: Option<CryptoTransfer>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TransactionId {
    #[prost(message, optional, tag = "1")]
    pub transaction_valid_start: Option<Timestamp>,
    #[prost(message, optional, tag = "2")]
    pub account_id: Option<AccountId>,
    #[prost(bool, optional, tag = "3")]
    pub scheduled: Option<bool>,
    #[prost(int32, optional, tag = "4")]
    pub nonce: Option<i32>,
}

/// `AccountID` by number only: an alias (field 4) is unknown here, so refused.
#[derive(Clone, PartialEq, Eq, Hash, Message)]
pub struct AccountId {
    #[prost(int64, optional, tag = "1")]
    pub shard_num: Option<i64>,
    #[prost(int64, optional, tag = "2")]
    pub realm_num: Option<i64>,
    #[prost(int64, optional, tag = "3")]
    pub account_num: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Timestamp {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Duration {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
}

/// `CryptoTransferTransactionBody`. Token transfers are read as opaque bytes only so their
/// presence can be named; they are always refused.
#[derive(Clone, PartialEq, Message)]
pub struct CryptoTransfer {
    #[prost(message, optional, tag = "1")]
    pub transfers: Option<TransferList>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub token_transfers: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TransferList {
    #[prost(message, repeated, tag = "1")]
    pub account_amounts: Vec<AccountAmount>,
}

/// `AccountAmount`; the allowance hooks (fields 4 and 5) are unknown here, so refused.
#[derive(Clone, PartialEq, Message)]
pub struct AccountAmount {
    #[prost(message, optional, tag = "1")]
    pub account_id: Option<AccountId>,
    #[prost(sint64, optional, tag = "2")]
    pub amount: Option<i64>,
    #[prost(bool, optional, tag = "3")]
    pub is_approval: Option<bool>,
}

/// `Key`, as the mirror node reports a `ProtobufEncoded` account key. Other key kinds decode
/// to `None` and count as unsupported.
#[derive(Clone, PartialEq, Message)]
pub struct Key {
    #[prost(oneof = "KeyKind", tags = "2, 5, 6, 7")]
    pub key: Option<KeyKind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum KeyKind {
    #[prost(bytes = "vec", tag = "2")]
    Ed25519(Vec<u8>),
    #[prost(message, tag = "5")]
    ThresholdKey(ThresholdKey),
    #[prost(message, tag = "6")]
    KeyList(KeyList),
    #[prost(bytes = "vec", tag = "7")]
    EcdsaSecp256k1(Vec<u8>),
}

#[derive(Clone, PartialEq, Message)]
pub struct ThresholdKey {
    #[prost(uint32, tag = "1")]
    pub threshold: u32,
    #[prost(message, optional, tag = "2")]
    pub keys: Option<KeyList>,
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyList {
    #[prost(message, repeated, tag = "1")]
    pub keys: Vec<Key>,
}

// The consensus node's gRPC messages (`proto.CryptoService`).

/// `TransactionResponse` of `submitTransaction`.
#[derive(Clone, PartialEq, Message)]
pub struct TransactionResponse {
    /// A `ResponseCodeEnum` value; `OK` means the node accepted it for consensus.
    #[prost(int32, tag = "1")]
    pub node_transaction_precheck_code: i32,
    #[prost(uint64, tag = "2")]
    pub cost: u64,
}

/// `Query`, with the one query asked: a transaction's receipt (free, no payment).
#[derive(Clone, PartialEq, Message)]
pub struct Query {
    #[prost(message, optional, tag = "14")]
    pub transaction_get_receipt: Option<TransactionGetReceiptQuery>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TransactionGetReceiptQuery {
    #[prost(message, optional, tag = "1")]
    pub header: Option<QueryHeader>,
    #[prost(message, optional, tag = "2")]
    pub transaction_id: Option<TransactionId>,
}

/// `QueryHeader`; `responseType` 0 is `ANSWER_ONLY`.
#[derive(Clone, PartialEq, Message)]
pub struct QueryHeader {
    #[prost(int32, tag = "2")]
    pub response_type: i32,
}

/// `Response`, with the receipt answer.
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(message, optional, tag = "14")]
    pub transaction_get_receipt: Option<TransactionGetReceiptResponse>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TransactionGetReceiptResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, optional, tag = "2")]
    pub receipt: Option<TransactionReceipt>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResponseHeader {
    #[prost(int32, tag = "1")]
    pub node_transaction_precheck_code: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct TransactionReceipt {
    /// A `ResponseCodeEnum` value: `UNKNOWN` until consensus, then the outcome.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `ResponseCodeEnum` values used here.
pub mod code {
    pub const OK: i32 = 0;
    pub const DUPLICATE_TRANSACTION: i32 = 11;
    pub const BUSY: i32 = 12;
    pub const RECEIPT_NOT_FOUND: i32 = 18;
    pub const UNKNOWN: i32 = 21;
    pub const SUCCESS: i32 = 22;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_defaults_survive_and_anything_dropped_is_refused() {
        // AccountID 0.0.123 with shard and realm written out as zeros, as the SDKs do.
        let account = [0x08, 0x00, 0x10, 0x00, 0x18, 0x7b];
        let decoded = decode_exact::<AccountId>(&account).expect("exact");
        assert_eq!(decoded.account_num, Some(123));
        // The same with an alias (field 4), a non-minimal varint, or the number twice.
        assert!(decode_exact::<AccountId>(&[0x18, 0x7b, 0x22, 0x01, 0xff]).is_none());
        assert!(decode_exact::<AccountId>(&[0x18, 0xfb, 0x00]).is_none());
        assert!(decode_exact::<AccountId>(&[0x18, 0x7b, 0x18, 0x7c]).is_none());
        // A Transaction with a deprecated `body` (field 1) beside its signed bytes.
        assert!(decode_exact::<Transaction>(&[0x0a, 0x00, 0x2a, 0x01, 0x00]).is_none());
        assert!(decode_exact::<Transaction>(&[0x2a, 0x01, 0x00]).is_some());
        // A TransactionList with a field 2, and a SignedTransaction with field 3.
        assert!(decode_exact::<TransactionList>(&[0x0a, 0x00, 0x12, 0x00]).is_none());
        assert!(decode_exact::<SignedTransaction>(&[0x0a, 0x01, 0x00, 0x18, 0x01]).is_none());
        // Two signatures in one pair (a oneof set twice).
        let pair = [0x0a, 0x01, 0x01, 0x1a, 0x01, 0x02, 0x32, 0x01, 0x03];
        assert!(decode_exact::<SignaturePair>(&pair).is_none());
        // Truncated input.
        assert!(decode_exact::<AccountId>(&[0x18]).is_none());
    }
}
