//! A Stellar `exact` payment: a `transfer(from, to, amount)` call on the network's native asset
//! contract, simulated by the Soroban RPC (which names the authorisation the call needs and
//! the resources it uses), the payer's address authorisation signed, and the envelope left
//! for the site's sponsor to submit. The source is the zero account, as the reference client
//! leaves it: the sponsor rebuilds the transaction around its own account.

use std::str::FromStr as _;

use ed25519_dalek::Signer as _;
use serde_json::{Map, Value, json};
use stellar_xdr::{
    AccountId, BytesM, HostFunction, Int128Parts, InvokeContractArgs, InvokeHostFunctionOp, Memo,
    MuxedAccount, Operation, OperationBody, Preconditions, PublicKey, ScAddress, ScMap, ScMapEntry,
    ScSymbol, ScVal, ScVec, SequenceNumber, SorobanAuthorizationEntry, SorobanAuthorizedFunction,
    SorobanCredentials, SorobanTransactionData, TimeBounds, TimePoint, Transaction,
    TransactionEnvelope, TransactionExt, TransactionV1Envelope, Uint256, VecM,
};

use super::payload::{Chain, parse_amount};
use crate::fastlane::chains::rpc::JsonRpcClient;
use crate::fastlane::chains::stellar::payment::{
    INCLUSION_FEE_STROOPS, MAX_ENVELOPE_BYTES, PAYLOAD_FIELD, authorisation_digest,
    decode_base64_exact, encode_base64, native_asset_contract, network_id, passphrase,
};
use crate::fastlane::x402::PaymentRequirements;

/// Seconds per ledger assumed when bounding the authorisation: a little slower than the
/// network's usual pace, so the expiry stays inside what the site accepts.
const LEDGER_SECONDS: u64 = 6;

pub(super) async fn build(
    key: &ed25519_dalek::SigningKey,
    terms: &PaymentRequirements,
    chain: &Chain<'_>,
) -> Result<Map<String, Value>, String> {
    let network = terms.network.as_str();
    let passphrase =
        passphrase(network).ok_or_else(|| format!("{network} is not a Stellar network"))?;
    let asset = native_asset_contract(passphrase).ok_or("the native asset contract")?;
    if terms.scheme != "exact" || terms.asset != asset {
        return Err(format!(
            "the offer on {network} is {} {}; only exact native XLM ({asset}) is paid",
            terms.scheme, terms.asset
        ));
    }
    let amount = i128::from(parse_amount(&terms.amount)?);
    let public = key.verifying_key().to_bytes();
    let from = ScAddress::Account(AccountId(PublicKey::PublicKeyTypeEd25519(Uint256(public))));
    let to = ScAddress::from_str(&terms.pay_to).map_err(|_| {
        format!(
            "the offer's payTo {:?} is not a Stellar address",
            terms.pay_to
        )
    })?;
    if to == from {
        return Err("the offer pays the paying account; nothing was signed".into());
    }
    let contract = ScAddress::from_str(&asset).map_err(|_| "the asset contract address")?;
    let call = InvokeContractArgs {
        contract_address: contract,
        function_name: ScSymbol("transfer".try_into().map_err(|_| "symbol")?),
        args: vec![
            ScVal::Address(from.clone()),
            ScVal::Address(to),
            ScVal::I128(Int128Parts {
                hi: (amount >> 64) as i64,
                lo: amount as u64,
            }),
        ]
        .try_into()
        .map_err(|_| "arguments")?,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "the clock is before 1970".to_string())?
        .as_secs();
    let mut transaction = Transaction {
        source_account: MuxedAccount::Ed25519(Uint256([0; 32])),
        fee: INCLUSION_FEE_STROOPS as u32,
        seq_num: SequenceNumber(1),
        cond: Preconditions::Time(TimeBounds {
            min_time: TimePoint(0),
            max_time: TimePoint(now.saturating_add(terms.max_timeout_seconds)),
        }),
        memo: Memo::None,
        operations: vec![Operation {
            source_account: None,
            body: OperationBody::InvokeHostFunction(InvokeHostFunctionOp {
                host_function: HostFunction::InvokeContract(call.clone()),
                auth: VecM::default(),
            }),
        }]
        .try_into()
        .map_err(|_| "operations")?,
        ext: TransactionExt::V0,
    };
    let envelope = |transaction: &Transaction| {
        TransactionEnvelope::Tx(TransactionV1Envelope {
            tx: transaction.clone(),
            signatures: VecM::default(),
        })
    };
    let unsigned = encode_base64(&envelope(&transaction)).ok_or("the envelope does not encode")?;

    let rpc = chain.endpoint("rpc", |settings| &settings.rpc)?;
    let client = JsonRpcClient::new(&rpc).map_err(|e| format!("{network}: {e}"))?;
    let simulation: Value = client
        .call("simulateTransaction", json!({"transaction": unsigned}))
        .await
        .map_err(|e| format!("{network} simulateTransaction: {e}"))?;
    if let Some(error) = simulation.get("error").and_then(Value::as_str)
        && !error.is_empty()
    {
        return Err(format!(
            "the transfer does not simulate on {network} ({error}); nothing was signed"
        ));
    }
    if simulation
        .get("restorePreamble")
        .is_some_and(|v| !v.is_null())
    {
        return Err(format!(
            "the transfer needs archived state restored on {network}; nothing was signed"
        ));
    }
    let text = |field: &str| simulation.get(field).and_then(Value::as_str);
    let resources: SorobanTransactionData = text("transactionData")
        .and_then(|data| decode_base64_exact(data, MAX_ENVELOPE_BYTES))
        .ok_or("the simulation gave no resources")?;
    let resource_fee: u32 = text("minResourceFee")
        .and_then(|fee| fee.parse().ok())
        .ok_or("the simulation gave no resource fee")?;
    let cap = chain
        .settings
        .map(|settings| settings.max_fee)
        .filter(|cap| *cap > 0)
        .unwrap_or(50_000);
    let fee = resource_fee
        .checked_add(INCLUSION_FEE_STROOPS as u32)
        .filter(|fee| u64::from(*fee) <= cap)
        .ok_or_else(|| {
            format!("the transfer's fee ({resource_fee} + 100 stroops) is above the cap of {cap}")
        })?;
    let latest = simulation
        .get("latestLedger")
        .and_then(|ledger| ledger.as_u64().or_else(|| ledger.as_str()?.parse().ok()))
        .and_then(|ledger| u32::try_from(ledger).ok())
        .ok_or("the simulation named no ledger")?;
    let entries: Vec<SorobanAuthorizationEntry> = simulation
        .pointer("/results/0/auth")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|entry| {
            entry
                .as_str()
                .and_then(|entry| decode_base64_exact(entry, MAX_ENVELOPE_BYTES))
        })
        .collect::<Option<_>>()
        .ok_or("the simulation's authorisations do not decode")?;
    // Only the authorisation of exactly this transfer, by this account, is signed.
    let [mut entry] = <[SorobanAuthorizationEntry; 1]>::try_from(entries)
        .map_err(|_| "the simulation asks for other than one authorisation; nothing was signed")?;
    let SorobanCredentials::Address(credentials) = &mut entry.credentials else {
        return Err(
            "the simulation asks for a source-account authorisation; nothing was signed".into(),
        );
    };
    let exactly_the_transfer = credentials.address == from
        && entry.root_invocation.function == SorobanAuthorizedFunction::ContractFn(call)
        && entry.root_invocation.sub_invocations.is_empty();
    if !exactly_the_transfer {
        return Err(
            "the simulation's authorisation is not exactly this transfer; nothing was signed"
                .into(),
        );
    }
    let ledgers = u32::try_from(terms.max_timeout_seconds.div_ceil(LEDGER_SECONDS)).unwrap_or(1);
    credentials.signature_expiration_ledger = latest.saturating_add(ledgers);
    let digest = authorisation_digest(&network_id(passphrase), credentials, &entry.root_invocation)
        .ok_or("the authorisation does not encode")?;
    let signature = key.sign(&digest).to_bytes();
    let bytes = |raw: &[u8]| -> Result<ScVal, String> {
        Ok(ScVal::Bytes(
            BytesM::try_from(raw.to_vec()).map_err(|_| "bytes")?.into(),
        ))
    };
    let symbol = |name: &str| -> Result<ScVal, String> {
        Ok(ScVal::Symbol(ScSymbol(
            name.try_into().map_err(|_| "symbol")?,
        )))
    };
    let signed = ScMap(
        vec![
            ScMapEntry {
                key: symbol("public_key")?,
                val: bytes(&public)?,
            },
            ScMapEntry {
                key: symbol("signature")?,
                val: bytes(&signature)?,
            },
        ]
        .try_into()
        .map_err(|_| "map")?,
    );
    credentials.signature = ScVal::Vec(Some(ScVec(
        vec![ScVal::Map(Some(signed))]
            .try_into()
            .map_err(|_| "vector")?,
    )));
    if let Some(Operation {
        body: OperationBody::InvokeHostFunction(invocation),
        ..
    }) = transaction.operations.first()
    {
        let mut invocation = invocation.clone();
        invocation.auth = vec![entry].try_into().map_err(|_| "auth")?;
        transaction.operations = vec![Operation {
            source_account: None,
            body: OperationBody::InvokeHostFunction(invocation),
        }]
        .try_into()
        .map_err(|_| "operations")?;
    }
    transaction.fee = fee;
    transaction.ext = TransactionExt::V1(resources);
    let signed = encode_base64(&envelope(&transaction)).ok_or("the envelope does not encode")?;
    let mut payload = Map::new();
    payload.insert(PAYLOAD_FIELD.into(), Value::String(signed));
    Ok(payload)
}
