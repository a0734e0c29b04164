//! The XRPL `exact` mechanism for native XRP: checks a payer-signed Payment against the terms
//! and the validated ledger (with @x402/xrpl's reason strings, in its order), submits it once,
//! and waits until it is validated or can no longer be.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Map, Value};
use sha2::Digest as _;

use super::codec::{self, Amount, Transaction, field};
use super::keys;
use super::ledger::{Ledger, RpcLedger};
use crate::fastlane::chains::rpc::JsonRpcClient;
use crate::fastlane::mechanism::{BoxFuture, ChainError, Mechanism};
use crate::fastlane::settings::NetworkSettings;
use crate::fastlane::x402::{PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse};

/// Highest fee a payer may attach, in drops; also the default when none is configured.
pub const FEE_CAP_DROPS: u64 = 1000;
/// Networks up to this number predate `NetworkID`; their transactions must not carry it.
const LEGACY_NETWORK_LIMIT: u32 = 1024;
/// Nominal ledger close time and the slack on top of the timeout, in ledgers.
const LEDGER_CLOSE_SECONDS: u64 = 5;
const LEDGER_TOLERANCE: u64 = 2;
const TF_PARTIAL_PAYMENT: u32 = 0x0002_0000;
const LSF_DISABLE_MASTER: u32 = 0x0010_0000;
/// How long a submitted hash stays in the duplicate guard beyond the payment's timeout.
const DUPLICATE_GUARD_MARGIN: Duration = Duration::from_secs(120);
/// How often settlement looks for the validated result.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Longest signed blob accepted (hex characters); a Payment is a few hundred.
const MAX_BLOB_HEX: usize = 64 * 1024;
const SUCCESS: &str = "tesSUCCESS";

/// `exact` payments in native XRP on one XRPL network.
pub struct XrplExact {
    network: String,
    network_number: u32,
    max_fee_drops: u64,
    ledger: Arc<dyn Ledger>,
    poll_interval: Duration,
    /// Hashes already handed to `submit`, with when they may be forgotten.
    submitted: Mutex<HashMap<String, Instant>>,
}

/// A payment that passed every check.
struct Accepted {
    blob_hex: String,
    hash: String,
    payer: String,
    last_ledger: u32,
}

/// Either a payment to act on or the verdict to return.
type Examined = Result<Accepted, VerifyResponse>;

/// The number `N` of `xrpl:N`, written canonically.
pub fn network_number(network: &str) -> Option<u32> {
    let digits = network.strip_prefix("xrpl:")?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if canonical { digits.parse().ok() } else { None }
}

/// The latest `LastLedgerSequence` accepted at `current` for a timeout.
pub fn max_last_ledger(current: u32, max_timeout_seconds: u64) -> u64 {
    u64::from(current) + max_timeout_seconds.div_ceil(LEDGER_CLOSE_SECONDS) + LEDGER_TOLERANCE
}

/// SHA-256 of an invoice ID: the value `InvoiceID` must carry.
pub fn invoice_id_field(invoice_id: &str) -> [u8; 32] {
    sha2::Sha256::digest(invoice_id.as_bytes()).into()
}

fn invalid(reason: impl Into<String>, payer: &str) -> VerifyResponse {
    VerifyResponse::invalid(reason, payer)
}

fn invalid_with(reason: &str, payer: &str, message: String) -> VerifyResponse {
    let mut verdict = VerifyResponse::invalid(reason, payer);
    verdict.invalid_message = Some(message);
    verdict
}

fn extra_of(terms: &PaymentRequirements) -> Option<&Map<String, Value>> {
    terms.extra.as_ref()
}

fn extra_field<'a>(terms: &'a PaymentRequirements, key: &str) -> Option<&'a Value> {
    extra_of(terms).and_then(|m| m.get(key))
}

impl XrplExact {
    /// The mechanism for `network` (`xrpl:N`) reached through `settings.rpc`.
    pub fn new(network: &str, settings: &NetworkSettings) -> Result<XrplExact, ChainError> {
        let client =
            JsonRpcClient::new(&settings.rpc).map_err(|error| ChainError::Unavailable {
                network: network.to_owned(),
                message: error.to_string(),
            })?;
        let ledger = RpcLedger::new(network, client);
        XrplExact::with_ledger(network, settings.max_fee, Arc::new(ledger))
    }

    /// The mechanism over any ledger; `max_fee` 0 means the cap.
    pub fn with_ledger(
        network: &str,
        max_fee: u64,
        ledger: Arc<dyn Ledger>,
    ) -> Result<XrplExact, ChainError> {
        let network_number = network_number(network).ok_or_else(|| ChainError::Unavailable {
            network: network.to_string(),
            message: "not an XRPL network (xrpl:N)".to_string(),
        })?;
        let max_fee_drops = if max_fee == 0 {
            FEE_CAP_DROPS
        } else {
            max_fee.min(FEE_CAP_DROPS)
        };
        Ok(XrplExact {
            network: network.to_string(),
            network_number,
            max_fee_drops,
            ledger,
            poll_interval: DEFAULT_POLL_INTERVAL,
            submitted: Mutex::new(HashMap::new()),
        })
    }

    /// Settlement polls this often (tests shorten it).
    pub fn with_poll_interval(mut self, interval: Duration) -> XrplExact {
        self.poll_interval = interval;
        self
    }

    fn unavailable(&self, message: impl Into<String>) -> ChainError {
        ChainError::Unavailable {
            network: self.network.clone(),
            message: message.into(),
        }
    }

    /// The x402 envelope: the terms the payer accepted are these terms, on this network.
    fn envelope(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Option<&'static str> {
        let accepted = &payment.accepted;
        let same_extra =
            |key: &str| extra_field(terms, key) == accepted.extra.as_ref().and_then(|m| m.get(key));
        let fees_unsponsored = |extra: Option<&Map<String, Value>>| {
            extra.and_then(|m| m.get("areFeesSponsored")) == Some(&Value::Bool(false))
        };
        if payment.x402_version != 2 {
            Some("invalid_x402_version")
        } else if accepted.scheme != "exact" || terms.scheme != "exact" {
            Some("unsupported_scheme")
        } else if network_number(&terms.network).is_none()
            || network_number(&accepted.network).is_none()
            || terms.network != self.network
        {
            Some("invalid_network")
        } else if accepted.network != terms.network {
            Some("invalid_exact_xrpl_network_mismatch")
        } else if accepted.asset != terms.asset {
            Some("invalid_exact_xrpl_asset_mismatch")
        } else if accepted.amount != terms.amount {
            Some("invalid_exact_xrpl_amount_mismatch")
        } else if accepted.pay_to != terms.pay_to {
            Some("invalid_exact_xrpl_pay_to_mismatch")
        } else if accepted.max_timeout_seconds != terms.max_timeout_seconds {
            Some("invalid_exact_xrpl_max_timeout_mismatch")
        } else if !fees_unsponsored(terms.extra.as_ref())
            || !fees_unsponsored(accepted.extra.as_ref())
        {
            Some("invalid_exact_xrpl_fees_sponsored_unsupported")
        } else if !same_extra("invoiceId") {
            Some("invalid_exact_xrpl_invoice_mismatch")
        } else if !same_extra("destinationTag") {
            Some("invalid_exact_xrpl_destination_tag_mismatch")
        } else if terms.asset != "XRP" {
            // Only native XRP is settled here.
            Some("invalid_exact_xrpl_asset_unsupported")
        } else {
            None
        }
    }

    /// Checks that need no ledger, in order; the verdict carries the payer once known.
    fn check_offline(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<Offline, VerifyResponse> {
        if let Some(reason) = self.envelope(payment, terms) {
            return Err(invalid(reason, ""));
        }
        let method = transfer_method(payment, terms).map_err(|reason| invalid(reason, ""))?;
        let blob_hex = signed_blob(&payment.payload)
            .map_err(|message| invalid_with("invalid_exact_xrpl_facilitator_error", "", message))?;
        let blob = hex::decode(blob_hex).map_err(|_| {
            invalid_with(
                "invalid_exact_xrpl_facilitator_error",
                "",
                "signedTxBlob is not hex".to_string(),
            )
        })?;
        let tx = codec::decode(&blob).map_err(|e| {
            invalid_with(
                "invalid_exact_xrpl_facilitator_error",
                "",
                format!("signedTxBlob: {e}"),
            )
        })?;
        let public_key = tx.get(field::SIGNING_PUB_KEY).unwrap_or_default();
        if !keys::is_canonical_public_key(public_key) {
            return Err(invalid("invalid_exact_xrpl_payload_signing_pub_key", ""));
        }
        if !keys::verify_transaction(&tx) {
            return Err(invalid("invalid_exact_xrpl_payload_signature", ""));
        }
        if tx.u16(field::TRANSACTION_TYPE) != Some(codec::PAYMENT_TYPE) {
            return Err(invalid("invalid_exact_xrpl_payload_transaction_type", ""));
        }
        let Some(account) = tx.account(field::ACCOUNT) else {
            return Err(invalid_with(
                "invalid_exact_xrpl_facilitator_error",
                "",
                "transaction has no Account".to_string(),
            ));
        };
        let payer = keys::encode_address(&account);
        if let Some(reason) = self.structure(&tx, terms) {
            return Err(invalid(reason, &payer));
        }
        if let Some(reason) = sequencing_fields(&tx, method) {
            return Err(invalid(reason, &payer));
        }
        Ok(Offline {
            hash: keys::transaction_hash(&blob),
            blob_hex: blob_hex.to_string(),
            signer: keys::address_of_public_key(public_key),
            unsigned_blob: hex::encode_upper(unsigned_for_simulation(&tx)),
            tx,
            payer,
            method,
        })
    }

    /// The Payment's own fields against the terms.
    fn structure(&self, tx: &Transaction, terms: &PaymentRequirements) -> Option<&'static str> {
        let destination = keys::decode_address(&terms.pay_to);
        if destination.is_none() || tx.account(field::DESTINATION) != destination {
            return Some("invalid_exact_xrpl_payload_destination_mismatch");
        }
        if let Some(tag) = extra_field(terms, "destinationTag") {
            let Some(tag) = tag.as_u64().and_then(|t| u32::try_from(t).ok()) else {
                return Some("invalid_exact_xrpl_destination_tag_malformed");
            };
            if tx.u32(field::DESTINATION_TAG) != Some(tag) {
                return Some("invalid_exact_xrpl_payload_destination_tag_mismatch");
            }
        }
        if tx.has(field::DELEGATE) {
            return Some("invalid_exact_xrpl_payload_delegate_not_allowed");
        }
        if tx.has(field::SIGNERS) {
            return Some("invalid_exact_xrpl_payload_multisig_not_supported");
        }
        let network_id = tx.u32(field::NETWORK_ID);
        if self.network_number <= LEGACY_NETWORK_LIMIT && network_id.is_some() {
            return Some("invalid_exact_xrpl_payload_network_id_for_standard_network");
        }
        if self.network_number > LEGACY_NETWORK_LIMIT && network_id != Some(self.network_number) {
            return Some("invalid_exact_xrpl_payload_network_id_mismatch");
        }
        let Some(Amount::Native(drops)) = tx.amount(field::AMOUNT) else {
            return Some("invalid_exact_xrpl_payload_amount_xrp");
        };
        if super::ledger::parse_drops(&terms.amount) != Some(drops) {
            return Some("invalid_exact_xrpl_payload_amount_mismatch");
        }
        if tx.has(field::SEND_MAX) {
            return Some("invalid_exact_xrpl_payload_sendmax_not_allowed");
        }
        if tx.has(field::PATHS) {
            return Some("invalid_exact_xrpl_payload_paths_not_allowed");
        }
        if tx.has(field::DELIVER_MIN) {
            return Some("invalid_exact_xrpl_payload_delivermin_not_allowed");
        }
        if tx.u32(field::FLAGS).unwrap_or(0) & TF_PARTIAL_PAYMENT != 0 {
            return Some("invalid_exact_xrpl_payload_partial_payment_not_allowed");
        }
        if tx.has(field::MEMOS) {
            return Some("invalid_exact_xrpl_payload_memos_not_allowed");
        }
        if let Some(invoice) = extra_field(terms, "invoiceId") {
            let Some(invoice) = invoice.as_str().filter(|s| !s.is_empty()) else {
                return Some("invalid_exact_xrpl_payload_invoice_missing");
            };
            let Some(bound) = tx.hash256(field::INVOICE_ID) else {
                return Some("invalid_exact_xrpl_payload_invoice_missing");
            };
            if bound != invoice_id_field(invoice) {
                return Some("invalid_exact_xrpl_payload_invoice_id_mismatch");
            }
        }
        let Some(Amount::Native(fee)) = tx.amount(field::FEE) else {
            return Some("invalid_exact_xrpl_payload_fee_missing");
        };
        if fee > self.max_fee_drops {
            return Some("invalid_exact_xrpl_payload_fee_too_high");
        }
        // Stricter than the reference: a field no check above looked at is refused.
        if tx.unsupported_fields().next().is_some() {
            return Some("invalid_exact_xrpl_payload_unsupported_field");
        }
        None
    }

    /// Every check, offline then against the validated ledger.
    async fn examine(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<Examined, ChainError> {
        let offline = match self.check_offline(payment, terms) {
            Ok(offline) => offline,
            Err(verdict) => return Ok(Err(verdict)),
        };
        let payer = offline.payer.as_str();
        let server = self.ledger.server_state().await?;
        // A server that does not report its network cannot prove it follows ours: older
        // software omits the field on every network, so reading its absence as mainnet (as
        // the reference does) could verify a payment against the wrong chain.
        match server.network_id {
            Some(id) if id == self.network_number => {}
            Some(id) => {
                return Err(self.unavailable(format!(
                    "endpoint follows network {id}, not {}",
                    self.network_number
                )));
            }
            None => return Err(self.unavailable("endpoint does not report its network_id")),
        }
        let current = server.validated_ledger;
        let Some(last_ledger) = offline.tx.u32(field::LAST_LEDGER_SEQUENCE) else {
            return Ok(Err(invalid(
                "invalid_exact_xrpl_payload_lastledgersequence_missing",
                payer,
            )));
        };
        if last_ledger <= current {
            return Ok(Err(invalid("invalid_exact_xrpl_payload_expired", payer)));
        }
        if u64::from(last_ledger) > max_last_ledger(current, terms.max_timeout_seconds) {
            return Ok(Err(invalid(
                "invalid_exact_xrpl_payload_lastledgersequence_too_large",
                payer,
            )));
        }
        let Some(account) = self.ledger.account_state(payer).await? else {
            return Ok(Err(invalid_with(
                "invalid_exact_xrpl_facilitator_error",
                payer,
                "payer account not found in the validated ledger".to_string(),
            )));
        };
        // The regular key is accepted first, then the master key unless it is disabled.
        let by_regular_key = account.regular_key.as_deref() == Some(offline.signer.as_str());
        let by_master_key =
            offline.signer == offline.payer && account.flags & LSF_DISABLE_MASTER == 0;
        if !by_regular_key && !by_master_key {
            return Ok(Err(invalid(
                "invalid_exact_xrpl_payload_signer_not_authorized",
                payer,
            )));
        }
        match offline.method {
            TransferMethod::Sequence => {
                if offline.tx.u32(field::SEQUENCE) != Some(account.sequence) {
                    return Ok(Err(invalid(
                        "invalid_exact_xrpl_payload_sequence_not_current",
                        payer,
                    )));
                }
            }
            TransferMethod::Ticket => {
                let ticket = offline.tx.u32(field::TICKET_SEQUENCE).unwrap_or(0);
                if !self.ledger.ticket_exists(payer, ticket).await? {
                    return Ok(Err(invalid(
                        "invalid_exact_xrpl_payload_ticket_not_available",
                        payer,
                    )));
                }
            }
        }
        let engine = self.ledger.simulate(&offline.unsigned_blob).await?;
        if engine != SUCCESS {
            return Ok(Err(invalid(
                format!("invalid_exact_xrpl_payload_simulation_failed: {engine}"),
                payer,
            )));
        }
        Ok(Ok(Accepted {
            blob_hex: offline.blob_hex,
            hash: offline.hash,
            payer: offline.payer,
            last_ledger,
        }))
    }

    /// Records `hash` as submitted; false if it already was and has not expired.
    fn claim_submission(&self, hash: &str, ttl: Duration) -> bool {
        let now = Instant::now();
        let mut submitted = self.submitted.lock();
        submitted.retain(|_, until| *until > now);
        if submitted.contains_key(hash) {
            return false;
        }
        submitted.insert(hash.to_string(), now + ttl);
        true
    }

    fn settled(
        &self,
        success: bool,
        reason: Option<String>,
        transaction: &str,
        payer: &str,
    ) -> SettleResponse {
        SettleResponse {
            success,
            error_reason: reason,
            transaction: transaction.to_string(),
            network: self.network.clone(),
            payer: Some(payer.to_string()),
        }
    }

    async fn settle_checked(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<SettleResponse, ChainError> {
        let accepted = match self.examine(payment, terms).await? {
            Ok(accepted) => accepted,
            Err(verdict) => {
                let reason = verdict
                    .invalid_reason
                    .unwrap_or_else(|| "verification_failed".to_string());
                return Ok(self.settled(false, Some(reason), "", &verdict.payer));
            }
        };
        let ttl = Duration::from_secs(terms.max_timeout_seconds) + DUPLICATE_GUARD_MARGIN;
        if !self.claim_submission(&accepted.hash, ttl) {
            return Ok(self.settled(
                false,
                Some("duplicate_settlement".to_string()),
                "",
                &accepted.payer,
            ));
        }
        let preliminary = self.ledger.submit(&accepted.blob_hex).await?;
        if preliminary.starts_with("tem") {
            // Malformed: the transaction can never apply, under any ledger state.
            return Ok(self.settled(
                false,
                Some(format!("transaction_failed: {preliminary}")),
                &accepted.hash,
                &accepted.payer,
            ));
        }
        // Bounded: the transaction is final once the validated ledger passes its
        // LastLedgerSequence, which verification kept within the timeout; the bound adds the
        // guard margin for slow or unreachable servers.
        let polls = (ttl.as_millis() / self.poll_interval.as_millis().max(1)).max(1);
        for _ in 0..polls {
            tokio::time::sleep(self.poll_interval).await;
            if let Some(done) = self.final_outcome(&accepted).await {
                return done;
            }
            match self.ledger.server_state().await {
                Ok(server) if server.validated_ledger > accepted.last_ledger => {
                    // One more look: it may have been validated just before the ledger moved on.
                    if let Some(done) = self.final_outcome(&accepted).await {
                        return done;
                    }
                    return Err(self.unavailable(format!(
                        "transaction {} not validated by ledger {} (preliminary {preliminary})",
                        accepted.hash, accepted.last_ledger
                    )));
                }
                _ => {}
            }
        }
        Err(self.unavailable(format!("transaction {} still not final", accepted.hash)))
    }

    /// The validated result of a submitted payment, if there is one yet.
    async fn final_outcome(
        &self,
        accepted: &Accepted,
    ) -> Option<Result<SettleResponse, ChainError>> {
        let status = self.ledger.transaction(&accepted.hash).await.ok()??;
        if !status.validated {
            return None;
        }
        Some(Ok(if status.result == SUCCESS {
            self.settled(true, None, &accepted.hash, &accepted.payer)
        } else {
            self.settled(
                false,
                Some(format!("transaction_failed: {}", status.result)),
                &accepted.hash,
                &accepted.payer,
            )
        }))
    }

    async fn reconcile_blob(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<Option<SettleResponse>, ChainError> {
        let blob_hex = signed_blob(&payment.payload).map_err(|m| self.unavailable(m))?;
        let blob =
            hex::decode(blob_hex).map_err(|_| self.unavailable("signedTxBlob is not hex"))?;
        let tx =
            codec::decode(&blob).map_err(|e| self.unavailable(format!("signedTxBlob: {e}")))?;
        let payer = tx
            .account(field::ACCOUNT)
            .map(|a| keys::encode_address(&a))
            .unwrap_or_default();
        // Only a payment of these terms can settle them, whatever the ledger says of its hash.
        let expected = super::ledger::parse_drops(&terms.amount);
        if keys::decode_address(&terms.pay_to).is_none()
            || tx.account(field::DESTINATION) != keys::decode_address(&terms.pay_to)
            || expected.is_none()
            || tx.amount(field::AMOUNT) != expected.map(Amount::Native)
        {
            return Err(self.unavailable("signedTxBlob does not pay these terms"));
        }
        let hash = keys::transaction_hash(&blob);
        let Some(status) = self.ledger.transaction(&hash).await? else {
            return Ok(None);
        };
        if !status.validated {
            return Ok(None);
        }
        if status.result == SUCCESS && status.delivered_drops == expected {
            return Ok(Some(self.settled(true, None, &hash, &payer)));
        }
        let reason = if status.result == SUCCESS {
            "transaction_failed: delivered_amount differs".to_string()
        } else {
            format!("transaction_failed: {}", status.result)
        };
        Ok(Some(self.settled(false, Some(reason), &hash, &payer)))
    }
}

/// What the offline checks learned.
struct Offline {
    tx: Transaction,
    blob_hex: String,
    unsigned_blob: String,
    hash: String,
    payer: String,
    signer: String,
    method: TransferMethod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransferMethod {
    Sequence,
    Ticket,
}

/// `extra.assetTransferMethod`: the payer's choice, which the terms may fix.
fn transfer_method(
    payment: &PaymentPayload,
    terms: &PaymentRequirements,
) -> Result<TransferMethod, &'static str> {
    let parse = |value: Option<&Value>| match value {
        None => Ok(None),
        Some(Value::String(s)) if s == "sequence" => Ok(Some(TransferMethod::Sequence)),
        Some(Value::String(s)) if s == "ticketSequence" => Ok(Some(TransferMethod::Ticket)),
        Some(_) => Err("invalid_exact_xrpl_asset_transfer_method"),
    };
    let required = parse(extra_field(terms, "assetTransferMethod"))?;
    let chosen = parse(
        payment
            .accepted
            .extra
            .as_ref()
            .and_then(|m| m.get("assetTransferMethod")),
    )?;
    let method = chosen.or(required).unwrap_or(TransferMethod::Sequence);
    if required.is_some_and(|r| r != method) {
        return Err("invalid_exact_xrpl_asset_transfer_method_mismatch");
    }
    Ok(method)
}

/// The payload must be exactly `{"signedTxBlob": "<hex>"}`.
fn signed_blob(payload: &Map<String, Value>) -> Result<&str, String> {
    match payload.get("signedTxBlob") {
        Some(Value::String(blob))
            if payload.len() == 1 && !blob.is_empty() && blob.len() <= MAX_BLOB_HEX =>
        {
            Ok(blob)
        }
        _ => Err("XRPL exact payload requires exactly signedTxBlob".to_string()),
    }
}

fn sequencing_fields(tx: &Transaction, method: TransferMethod) -> Option<&'static str> {
    let sequence = tx.u32(field::SEQUENCE);
    let has_ticket = tx.has(field::TICKET_SEQUENCE);
    match method {
        TransferMethod::Sequence if has_ticket => {
            Some("invalid_exact_xrpl_payload_ticket_sequence_not_allowed")
        }
        TransferMethod::Sequence if sequence.unwrap_or(0) == 0 => {
            Some("invalid_exact_xrpl_payload_sequence_missing")
        }
        TransferMethod::Sequence => None,
        TransferMethod::Ticket if sequence != Some(0) => {
            Some("invalid_exact_xrpl_payload_sequence_must_be_zero")
        }
        TransferMethod::Ticket if !has_ticket => {
            Some("invalid_exact_xrpl_payload_ticket_sequence_missing")
        }
        TransferMethod::Ticket => None,
    }
}

/// The transaction as `simulate` wants it: no signature and an empty signing key.
fn unsigned_for_simulation(tx: &Transaction) -> Vec<u8> {
    let mut unsigned = Transaction {
        fields: tx
            .fields
            .iter()
            .filter(|f| f.id != field::TXN_SIGNATURE && f.id != field::SIGNERS)
            .cloned()
            .collect(),
    };
    unsigned.set(field::SIGNING_PUB_KEY, Vec::new());
    unsigned.encode()
}

impl Mechanism for XrplExact {
    fn scheme(&self) -> &str {
        "exact"
    }

    fn network(&self) -> &str {
        &self.network
    }

    fn verify<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<VerifyResponse, ChainError>> {
        Box::pin(async move {
            Ok(match self.examine(payment, terms).await? {
                Ok(accepted) => VerifyResponse::valid(accepted.payer),
                Err(verdict) => verdict,
            })
        })
    }

    fn settle<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<SettleResponse, ChainError>> {
        Box::pin(self.settle_checked(payment, terms))
    }

    fn reconcile<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
        _hint: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<SettleResponse>, ChainError>> {
        Box::pin(self.reconcile_blob(payment, terms))
    }
}
