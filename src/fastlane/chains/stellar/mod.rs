//! Stellar's `exact` scheme for native XLM, moved through the network's Stellar Asset Contract:
//! the payer signs a Soroban authorisation for one `transfer(from, payTo, amount)`, and
//! Concert's sponsor account submits it, paying the fees.
//!
//! - `payment`: strict decoding and every check that needs no chain call, with the reference
//!   facilitator's reason strings;
//! - `settlement`: the sponsor's key, the transaction it submits, and the reconciliation match;
//! - this module: [`StellarExact`], the [`Mechanism`] that adds Soroban RPC (simulation,
//!   latest ledger, sequence, submission, status) and, when configured, Horizon's ledger pace.
//!
//! A settlement that does not reach `SUCCESS` within the payment's time limit is reported
//! unsuccessful with its hash, never resubmitted: the operator reconciles it by that hash.

pub mod deposits;
pub mod lookups;
pub mod nft;
pub mod payment;
pub mod settlement;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Value, json};
use stellar_xdr::{
    AccountId, LedgerEntryData, LedgerKey, LedgerKeyAccount, PublicKey, SorobanTransactionData,
    TransactionEnvelope, Uint256,
};

use self::payment::{
    EXPIRATION_TOLERANCE_LEDGERS, Expected, INCLUSION_FEE_STROOPS, MAX_ENVELOPE_BYTES, Refusal,
    Transfer, check_authorisations, check_events, decode_base64_exact, encode_base64, inspect,
    native_asset_contract, network_id, passphrase, reason,
};
use self::settlement::{Sponsor, carries_payment, envelope_hash, rebuild};
use super::rpc::{JsonRpcClient, RpcError};
use crate::fastlane::mechanism::{BoxFuture, ChainError, Mechanism};
use crate::fastlane::settings::NetworkSettings;
use crate::fastlane::x402::{
    PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse, X402_VERSION,
};

/// The x402 scheme name.
pub const SCHEME: &str = "exact";
/// The variable holding the sponsor's secret seed unless `secret_env` names another.
pub const DEFAULT_SECRET_ENV: &str = "CONCERT_STELLAR_FEE_SECRET";
/// The fee cap (stroops) when `max_fee` is not set.
pub const DEFAULT_MAX_FEE_STROOPS: u64 = 50_000;
/// The time limit assumed for terms that give none.
const DEFAULT_TIMEOUT_SECONDS: u64 = 60;
/// Ledger close time assumed without Horizon, or when its answer is unusable.
pub const DEFAULT_LEDGER_SECONDS: u64 = 5;
/// Ledgers Horizon is asked for to measure the pace.
const PACE_SAMPLE_LEDGERS: usize = 20;

const SETTLE_ACCOUNT_UNAVAILABLE: &str = "settle_exact_stellar_account_unavailable";
const SETTLE_SIGNING_FAILED: &str = "settle_exact_stellar_transaction_signing_failed";
const SETTLE_SUBMISSION_FAILED: &str = "settle_exact_stellar_transaction_submission_failed";
const SETTLE_FAILED: &str = "settle_exact_stellar_transaction_failed";

/// The name of the variable that holds the sponsor secret of `settings`.
pub fn secret_env(settings: &NetworkSettings) -> &str {
    if settings.secret_env.is_empty() {
        DEFAULT_SECRET_ENV
    } else {
        &settings.secret_env
    }
}

/// The `exact` mechanism of one Stellar network.
pub struct StellarExact {
    network: String,
    network_id: [u8; 32],
    /// The native asset contract (`C…`) of this network.
    asset: String,
    rpc: JsonRpcClient,
    horizon: Option<JsonRpcClient>,
    sponsor: Sponsor,
    max_fee: u64,
    poll_interval: Duration,
    /// Seconds since the Unix epoch; replaced in tests to fix the settlement's time bound.
    clock: fn() -> u64,
}

impl std::fmt::Debug for StellarExact {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("StellarExact")
            .field("network", &self.network)
            .field("sponsor", &self.sponsor)
            .finish_non_exhaustive()
    }
}

fn system_clock() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default()
}

impl StellarExact {
    /// The mechanism for `network` (`stellar:pubnet|testnet`) reached at `settings.rpc` (and
    /// `settings.horizon` when set), sponsored by the account of `sponsor_secret` (`S…`).
    /// Makes no call.
    pub fn new(
        network: &str,
        settings: &NetworkSettings,
        sponsor_secret: &str,
    ) -> Result<StellarExact, ChainError> {
        let unusable = |message: String| ChainError::Unavailable {
            network: network.to_owned(),
            message,
        };
        let passphrase =
            passphrase(network).ok_or_else(|| unusable("not a Stellar network".to_owned()))?;
        let asset = native_asset_contract(passphrase)
            .ok_or_else(|| unusable("the native asset contract cannot be derived".to_owned()))?;
        let sponsor = Sponsor::from_secret(sponsor_secret).ok_or_else(|| {
            unusable(format!(
                "${} is not a Stellar secret seed (S…)",
                secret_env(settings)
            ))
        })?;
        let rpc = JsonRpcClient::new(&settings.rpc).map_err(|error| unusable(error.to_string()))?;
        let horizon = if settings.horizon.is_empty() {
            None
        } else {
            Some(
                JsonRpcClient::new(&settings.horizon)
                    .map_err(|error| unusable(error.to_string()))?,
            )
        };
        let max_fee = if settings.max_fee == 0 {
            DEFAULT_MAX_FEE_STROOPS
        } else {
            settings.max_fee
        };
        Ok(StellarExact {
            network: network.to_owned(),
            network_id: network_id(passphrase),
            asset,
            rpc,
            horizon,
            sponsor,
            max_fee,
            poll_interval: Duration::from_secs(1),
            clock: system_clock,
        })
    }

    /// Replaces the time between two status queries of a settlement (tests shorten it). The
    /// number of queries stays the terms' `maxTimeoutSeconds`.
    pub fn with_poll_interval(mut self, interval: Duration) -> StellarExact {
        self.poll_interval = interval;
        self
    }

    /// Replaces the clock that sets the settlement's upper time bound.
    pub fn with_clock(mut self, clock: fn() -> u64) -> StellarExact {
        self.clock = clock;
        self
    }

    /// The sponsor's `G…` address.
    pub fn sponsor_address(&self) -> &str {
        self.sponsor.address()
    }

    /// The native asset contract this network's offers must name.
    pub fn asset(&self) -> &str {
        &self.asset
    }

    /// Every verify check, in the reference's order. The inner `Err` is a verdict of invalid;
    /// the outer one means no verdict could be reached.
    async fn check(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<Result<(Transfer, Simulation), Refusal>, ChainError> {
        let refuse = |reason| Ok(Err(Refusal::anonymous(reason)));
        if payment.x402_version != X402_VERSION {
            return refuse(reason::INVALID_VERSION);
        }
        if payment.accepted.scheme != SCHEME || terms.scheme != SCHEME {
            return refuse(reason::UNSUPPORTED_SCHEME);
        }
        if payment.accepted.network != terms.network {
            return refuse(reason::NETWORK_MISMATCH);
        }
        if terms.network != self.network {
            return refuse(reason::INVALID_NETWORK);
        }
        if terms.asset != self.asset {
            return refuse(reason::WRONG_ASSET);
        }
        let expected = Expected {
            asset: &terms.asset,
            pay_to: &terms.pay_to,
            amount: &terms.amount,
            sponsor: self.sponsor.public_key(),
        };
        let transfer = match inspect(&payment.payload, &expected) {
            Ok(transfer) => transfer,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let refuse = |reason| Ok(Err(Refusal::by(reason, &transfer.from)));
        let simulation: Simulation = match self
            .rpc
            .call(
                "simulateTransaction",
                json!({"transaction": transfer.envelope_text}),
            )
            .await
        {
            Ok(simulation) => simulation,
            // The endpoint judged the transaction and refused it.
            Err(RpcError::Remote { message, .. }) => {
                tracing::debug!(network = %self.network, %message, "stellar: simulation refused");
                return refuse(reason::SIMULATION_FAILED);
            }
            Err(error) => return Err(self.unavailable(format!("simulateTransaction: {error}"))),
        };
        if !simulation.succeeded() {
            return refuse(reason::SIMULATION_FAILED);
        }
        let fee_fits = simulation
            .min_resource_fee
            .as_deref()
            .and_then(|fee| fee.parse::<i64>().ok())
            .and_then(|fee| fee.checked_add(INCLUSION_FEE_STROOPS))
            .and_then(|fee| u64::try_from(fee).ok())
            .is_some_and(|fee| fee <= self.max_fee);
        if !fee_fits {
            return refuse(reason::FEE_EXCEEDS_MAXIMUM);
        }
        let events = simulation.events.as_deref().unwrap_or_default();
        if let Err(reason) = check_events(events, &transfer, &terms.asset) {
            return refuse(reason);
        }
        let latest: LatestLedger = self.call("getLatestLedger", json!({})).await?;
        let timeout = timeout_seconds(terms);
        let ledger_seconds = self.ledger_seconds().await;
        let ledgers = u32::try_from(timeout.div_ceil(ledger_seconds)).unwrap_or(u32::MAX);
        let max_expiration = latest
            .sequence
            .saturating_add(ledgers)
            .saturating_add(EXPIRATION_TOLERANCE_LEDGERS);
        if let Err(reason) = check_authorisations(
            &transfer,
            self.sponsor.public_key(),
            &self.network_id,
            max_expiration,
        ) {
            return refuse(reason);
        }
        Ok(Ok((transfer, simulation)))
    }

    /// Seconds per ledger from the spacing of Horizon's latest ledgers, rounded up; the
    /// default without Horizon or with an unusable answer.
    async fn ledger_seconds(&self) -> u64 {
        let Some(horizon) = &self.horizon else {
            return DEFAULT_LEDGER_SECONDS;
        };
        let path = format!("/ledgers?limit={PACE_SAMPLE_LEDGERS}&order=desc");
        match horizon.get_json::<LedgerPage>(&path).await {
            Ok(page) => page.pace().unwrap_or(DEFAULT_LEDGER_SECONDS),
            Err(error) => {
                tracing::debug!(network = %self.network, %error, "stellar: ledger pace unavailable");
                DEFAULT_LEDGER_SECONDS
            }
        }
    }

    async fn verify_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<VerifyResponse, ChainError> {
        Ok(match self.check(payment, terms).await? {
            Ok((transfer, _)) => VerifyResponse::valid(transfer.from),
            Err(refusal) => VerifyResponse::invalid(refusal.reason, refusal.payer),
        })
    }

    async fn settle_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<SettleResponse, ChainError> {
        let (transfer, simulation) = match self.check(payment, terms).await? {
            Ok(checked) => checked,
            Err(refusal) => {
                return Ok(self.unsettled(String::new(), refusal.reason, refusal.payer));
            }
        };
        let from = transfer.from.clone();
        let fail = |hash: String, reason: &str| Ok(self.unsettled(hash, reason, from.clone()));
        let sequence = match self.sponsor_sequence().await {
            Ok(sequence) => sequence,
            Err(error) => {
                tracing::warn!(network = %self.network, %error, "stellar: sponsor account unavailable");
                return fail(String::new(), SETTLE_ACCOUNT_UNAVAILABLE);
            }
        };
        let resources: Option<SorobanTransactionData> = simulation
            .transaction_data
            .as_deref()
            .and_then(|text| decode_base64_exact(text, MAX_ENVELOPE_BYTES));
        let Some(resources) = resources else {
            return fail(String::new(), SETTLE_SIGNING_FAILED);
        };
        let timeout = timeout_seconds(terms);
        let built = rebuild(
            &transfer,
            resources,
            &self.sponsor,
            sequence,
            timeout,
            (self.clock)(),
            &self.network_id,
        );
        let envelope = match built {
            Ok(envelope) => envelope,
            Err(error) => {
                tracing::warn!(network = %self.network, %error, "stellar: settlement not built");
                return fail(String::new(), SETTLE_SIGNING_FAILED);
            }
        };
        let (Some(hash), Some(text)) = (
            envelope_hash(&envelope, &self.network_id),
            encode_base64(&envelope),
        ) else {
            return fail(String::new(), SETTLE_SIGNING_FAILED);
        };
        // From here on the transaction may be on its way: every failure keeps its hash, so
        // the outcome can be reconciled, and nothing is sent again.
        let sent: Result<SendResult, _> = self
            .rpc
            .call("sendTransaction", json!({"transaction": text}))
            .await;
        match sent {
            Ok(sent) if sent.status == "PENDING" && sent.hash.eq_ignore_ascii_case(&hash) => {}
            Ok(sent) => {
                tracing::warn!(network = %self.network, %hash, status = %sent.status, answered = %sent.hash, "stellar: settlement not accepted");
                return fail(hash, SETTLE_SUBMISSION_FAILED);
            }
            Err(error) => {
                tracing::warn!(network = %self.network, %hash, %error, "stellar: settlement submission unanswered");
                return fail(hash, SETTLE_SUBMISSION_FAILED);
            }
        }
        tracing::info!(network = %self.network, %hash, payer = %from, "stellar: settlement submitted");
        for attempt in 0..timeout.max(1) {
            if attempt > 0 {
                tokio::time::sleep(self.poll_interval).await;
            }
            match self.transaction_status(&hash).await {
                Ok(status) if status.status == "SUCCESS" => {
                    return Ok(SettleResponse {
                        success: true,
                        error_reason: None,
                        transaction: hash,
                        network: self.network.clone(),
                        payer: Some(from),
                    });
                }
                Ok(status) if status.status == "FAILED" => {
                    tracing::warn!(network = %self.network, %hash, "stellar: settlement failed on the ledger");
                    return fail(hash, SETTLE_FAILED);
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(network = %self.network, %hash, %error, "stellar: status query failed");
                }
            }
        }
        tracing::warn!(network = %self.network, %hash, "stellar: settlement not final in time");
        fail(hash, SETTLE_FAILED)
    }

    async fn reconcile_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
        hint: Option<&str>,
    ) -> Result<Option<SettleResponse>, ChainError> {
        let hash = hint
            .map(str::to_ascii_lowercase)
            .filter(|hash| hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| {
                self.unavailable(
                    "reconciling a Stellar payment needs the sponsor transaction's hash (64 hex digits)"
                        .to_owned(),
                )
            })?;
        let expected = Expected {
            asset: &terms.asset,
            pay_to: &terms.pay_to,
            amount: &terms.amount,
            sponsor: self.sponsor.public_key(),
        };
        let transfer = inspect(&payment.payload, &expected).map_err(|refusal| {
            self.unavailable(format!(
                "the journaled payment is refused: {}",
                refusal.reason
            ))
        })?;
        let status = self.transaction_status(&hash).await?;
        match status.status.as_str() {
            "SUCCESS" => {}
            "FAILED" => {
                return Err(self.unavailable(format!("{hash} failed on the ledger")));
            }
            _ => return Ok(None),
        }
        let envelope = status.envelope_xdr.as_deref().unwrap_or_default();
        carries_payment(envelope, &hash, &transfer, &self.network_id)
            .map_err(|mismatch| self.unavailable(format!("{hash}: {mismatch}")))?;
        Ok(Some(SettleResponse {
            success: true,
            error_reason: None,
            transaction: hash,
            network: self.network.clone(),
            payer: Some(transfer.from),
        }))
    }

    /// The sponsor account's current sequence number, from its ledger entry.
    async fn sponsor_sequence(&self) -> Result<i64, ChainError> {
        let key = LedgerKey::Account(LedgerKeyAccount {
            account_id: AccountId(PublicKey::PublicKeyTypeEd25519(Uint256(
                *self.sponsor.public_key(),
            ))),
        });
        let key = encode_base64(&key)
            .ok_or_else(|| self.unavailable("the account key does not encode".to_owned()))?;
        let entries: LedgerEntries = self
            .call("getLedgerEntries", json!({"keys": [key]}))
            .await?;
        let [entry] = entries
            .entries
            .unwrap_or_default()
            .try_into()
            .map_err(|_| {
                self.unavailable(format!(
                    "the sponsor account {} was not found",
                    self.sponsor.address()
                ))
            })?;
        match decode_base64_exact::<LedgerEntryData>(&entry.xdr, MAX_ENVELOPE_BYTES) {
            Some(LedgerEntryData::Account(account)) => Ok(account.seq_num.0),
            _ => Err(self.unavailable("the sponsor's ledger entry is not an account".to_owned())),
        }
    }

    async fn transaction_status(&self, hash: &str) -> Result<TransactionStatus, ChainError> {
        self.call("getTransaction", json!({"hash": hash})).await
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, ChainError> {
        self.rpc
            .call(method, params)
            .await
            .map_err(|error| self.unavailable(format!("{method}: {error}")))
    }

    fn unavailable(&self, message: String) -> ChainError {
        ChainError::Unavailable {
            network: self.network.clone(),
            message,
        }
    }

    fn unsettled(&self, hash: String, reason: &str, payer: String) -> SettleResponse {
        SettleResponse {
            success: false,
            error_reason: Some(reason.to_owned()),
            transaction: hash,
            network: self.network.clone(),
            payer: (!payer.is_empty()).then_some(payer),
        }
    }
}

fn timeout_seconds(terms: &PaymentRequirements) -> u64 {
    if terms.max_timeout_seconds == 0 {
        DEFAULT_TIMEOUT_SECONDS
    } else {
        terms.max_timeout_seconds
    }
}

impl Mechanism for StellarExact {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn network(&self) -> &str {
        &self.network
    }

    fn verify<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<VerifyResponse, ChainError>> {
        Box::pin(self.verify_payment(payment, terms))
    }

    fn settle<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<SettleResponse, ChainError>> {
        Box::pin(self.settle_payment(payment, terms))
    }

    /// The settlement is a new transaction built by the sponsor, so its hash is not in the
    /// payload: the operator supplies it as `hint`.
    fn reconcile<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
        hint: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<SettleResponse>, ChainError>> {
        Box::pin(self.reconcile_payment(payment, terms, hint))
    }
}

/// `simulateTransaction`'s answer, as far as it is judged.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Simulation {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    transaction_data: Option<String>,
    #[serde(default)]
    min_resource_fee: Option<String>,
    #[serde(default)]
    events: Option<Vec<String>>,
    /// Present when archived state must be restored first: such a payment is refused rather
    /// than paid for with a restoration the payer never signed.
    #[serde(default)]
    restore_preamble: Option<Value>,
}

impl Simulation {
    fn succeeded(&self) -> bool {
        let no_error = self.error.as_deref().is_none_or(str::is_empty);
        let has_data = self
            .transaction_data
            .as_deref()
            .is_some_and(|data| !data.is_empty());
        no_error && has_data && self.restore_preamble.is_none()
    }
}

#[derive(Deserialize)]
struct LatestLedger {
    sequence: u32,
}

#[derive(Deserialize)]
struct LedgerEntries {
    #[serde(default)]
    entries: Option<Vec<LedgerEntryText>>,
}

#[derive(Deserialize)]
struct LedgerEntryText {
    xdr: String,
}

#[derive(Deserialize)]
struct SendResult {
    status: String,
    #[serde(default)]
    hash: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TransactionStatus {
    status: String,
    #[serde(default)]
    envelope_xdr: Option<String>,
}

/// Horizon's `/ledgers` page, newest first.
#[derive(Deserialize)]
struct LedgerPage {
    #[serde(rename = "_embedded")]
    embedded: LedgerRecords,
}

#[derive(Deserialize)]
struct LedgerRecords {
    records: Vec<LedgerRecord>,
}

#[derive(Deserialize)]
struct LedgerRecord {
    closed_at: String,
}

impl LedgerPage {
    /// The average spacing of the page's ledgers in whole seconds (rounded up), if positive.
    fn pace(&self) -> Option<u64> {
        let records = &self.embedded.records;
        let (newest, oldest) = (records.first()?, records.last()?);
        let gaps = i128::try_from(records.len().checked_sub(1)?).ok()?;
        if gaps == 0 {
            return None;
        }
        let parse = |text: &str| {
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
        };
        let span = (parse(&newest.closed_at)? - parse(&oldest.closed_at)?).whole_milliseconds();
        if span <= 0 {
            return None;
        }
        // Whole seconds, rounded up, as the reference computes the pace.
        let per_ledger = (span + gaps * 1000 - 1) / (gaps * 1000);
        u64::try_from(per_ledger)
            .ok()
            .filter(|seconds| *seconds > 0)
    }
}

/// Whether `envelope` (base64) decodes strictly as a Stellar transaction envelope; for tests
/// and tools that inspect what was submitted.
pub fn decode_envelope(text: &str) -> Option<TransactionEnvelope> {
    decode_base64_exact(text, MAX_ENVELOPE_BYTES)
}

#[cfg(test)]
mod tests;
