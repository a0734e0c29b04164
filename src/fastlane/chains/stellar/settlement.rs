//! The sponsor's side of a payment: its key, the transaction it submits in the payer's place
//! (the payer's signed invocation with the sponsor as source and fee payer), and the check
//! that a transaction found on the ledger carries exactly a journaled payment.

use ed25519_dalek::{Signer as _, SigningKey};
use stellar_xdr::{
    DecoratedSignature, InvokeHostFunctionOp, Limits, MuxedAccount, Operation, OperationBody,
    Preconditions, SequenceNumber, Signature, SignatureHint, SorobanTransactionData, TimeBounds,
    TimePoint, Transaction, TransactionEnvelope, TransactionExt, TransactionV1Envelope, Uint256,
    WriteXdr,
};

use super::payment::{INCLUSION_FEE_STROOPS, Transfer, decode_base64_exact};

/// The largest ledger envelope read back when reconciling (a ledger transaction can be far
/// larger than a payment, up to Stellar's own transaction size limit).
const MAX_LEDGER_ENVELOPE_BYTES: usize = 1 << 20;

/// The account that pays the fees and submits settlements.
pub struct Sponsor {
    signing: SigningKey,
    public: [u8; 32],
    address: String,
}

impl std::fmt::Debug for Sponsor {
    // The secret never reaches a log.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Sponsor")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Sponsor {
    /// The sponsor of an `S…` secret seed; `None` when it is not one.
    pub fn from_secret(secret: &str) -> Option<Sponsor> {
        let seed = stellar_strkey::ed25519::PrivateKey::from_string(secret.trim()).ok()?;
        let signing = SigningKey::from_bytes(&seed.0);
        let public = signing.verifying_key().to_bytes();
        let address = stellar_strkey::ed25519::PublicKey(public)
            .to_string()
            .as_str()
            .to_owned();
        Some(Sponsor {
            signing,
            public,
            address,
        })
    }

    pub fn public_key(&self) -> &[u8; 32] {
        &self.public
    }

    /// The sponsor's `G…` address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// A decorated signature of a transaction hash: the key's last four bytes as the hint.
    fn sign(&self, hash: &[u8; 32]) -> Option<DecoratedSignature> {
        let signature = self.signing.sign(hash).to_bytes();
        let hint: [u8; 4] = self.public[28..].try_into().ok()?;
        Some(DecoratedSignature {
            hint: SignatureHint(hint),
            signature: Signature(signature.to_vec().try_into().ok()?),
        })
    }
}

/// Why no settlement transaction could be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RebuildError {
    #[error("the simulated resource fee does not fit a transaction fee")]
    Fee,
    #[error("the sponsor's sequence number is exhausted")]
    Sequence,
    #[error("the time limit does not fit a time bound")]
    Time,
    #[error("the transaction could not be encoded or signed")]
    Encoding,
}

/// The settlement envelope: the payer's invocation and signed authorisations, with the
/// sponsor as source, fee 100 + the simulated resource fee, the sponsor's next sequence
/// number, time bounds `[0, now + timeout]` (kept inside the payer's other preconditions when
/// it set any), the payer's memo and operation source, and the simulated Soroban data; signed
/// by the sponsor over the network's transaction hash.
pub fn rebuild(
    transfer: &Transfer,
    resources: SorobanTransactionData,
    sponsor: &Sponsor,
    sponsor_sequence: i64,
    timeout_seconds: u64,
    now_unix: u64,
    network_id: &[u8; 32],
) -> Result<TransactionEnvelope, RebuildError> {
    let fee = INCLUSION_FEE_STROOPS
        .checked_add(resources.resource_fee)
        .and_then(|fee| u32::try_from(fee).ok())
        .ok_or(RebuildError::Fee)?;
    let sequence = sponsor_sequence
        .checked_add(1)
        .ok_or(RebuildError::Sequence)?;
    let bounds = TimeBounds {
        min_time: TimePoint(0),
        max_time: TimePoint(
            now_unix
                .checked_add(timeout_seconds)
                .ok_or(RebuildError::Time)?,
        ),
    };
    let cond = match &transfer.transaction.cond {
        Preconditions::V2(payer) => {
            let mut kept = payer.clone();
            kept.time_bounds = Some(bounds);
            Preconditions::V2(kept)
        }
        _ => Preconditions::Time(bounds),
    };
    let operation = Operation {
        source_account: transfer.operation_source.clone(),
        body: OperationBody::InvokeHostFunction(InvokeHostFunctionOp {
            host_function: transfer.invocation.host_function.clone(),
            auth: transfer.invocation.auth.clone(),
        }),
    };
    let tx = Transaction {
        source_account: MuxedAccount::Ed25519(Uint256(*sponsor.public_key())),
        fee,
        seq_num: SequenceNumber(sequence),
        cond,
        memo: transfer.transaction.memo.clone(),
        operations: vec![operation]
            .try_into()
            .map_err(|_| RebuildError::Encoding)?,
        ext: TransactionExt::V1(resources),
    };
    let hash = tx.hash(*network_id).map_err(|_| RebuildError::Encoding)?;
    let signature = sponsor.sign(&hash).ok_or(RebuildError::Encoding)?;
    Ok(TransactionEnvelope::Tx(TransactionV1Envelope {
        tx,
        signatures: vec![signature]
            .try_into()
            .map_err(|_| RebuildError::Encoding)?,
    }))
}

/// The network hash of an envelope (of its inner transaction for a fee bump), lowercase hex.
pub fn envelope_hash(envelope: &TransactionEnvelope, network_id: &[u8; 32]) -> Option<String> {
    envelope.hash(*network_id).ok().map(hex::encode)
}

/// Why a ledger transaction is not the settlement of a journaled payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MismatchError {
    #[error("the ledger's envelope does not decode")]
    Undecodable,
    #[error("the ledger's envelope hashes to another transaction")]
    OtherHash,
    #[error("the ledger's transaction does not carry exactly this payment's signed invocation")]
    OtherOperation,
}

/// Checks that `envelope_xdr` (base64, as the RPC reports it) is the transaction `hash` on
/// this network and that its single operation is, byte for byte, the payer's signed
/// invocation.
pub fn carries_payment(
    envelope_xdr: &str,
    hash: &str,
    transfer: &Transfer,
    network_id: &[u8; 32],
) -> Result<(), MismatchError> {
    // The ledger's own envelope may be larger than a payment header allows.
    let envelope: TransactionEnvelope =
        decode_base64_exact(envelope_xdr, MAX_LEDGER_ENVELOPE_BYTES)
            .ok_or(MismatchError::Undecodable)?;
    if envelope_hash(&envelope, network_id).as_deref() != Some(hash) {
        return Err(MismatchError::OtherHash);
    }
    let tx = match &envelope {
        TransactionEnvelope::Tx(v1) => &v1.tx,
        TransactionEnvelope::TxFeeBump(bump) => match &bump.tx.inner_tx {
            stellar_xdr::FeeBumpTransactionInnerTx::Tx(v1) => &v1.tx,
        },
        TransactionEnvelope::TxV0(_) => return Err(MismatchError::OtherOperation),
    };
    let [operation] = tx.operations.as_slice() else {
        return Err(MismatchError::OtherOperation);
    };
    let OperationBody::InvokeHostFunction(found) = &operation.body else {
        return Err(MismatchError::OtherOperation);
    };
    let found = found.to_xdr(Limits::none()).ok();
    let paid = transfer.invocation.to_xdr(Limits::none()).ok();
    if found.is_none() || found != paid {
        return Err(MismatchError::OtherOperation);
    }
    Ok(())
}
