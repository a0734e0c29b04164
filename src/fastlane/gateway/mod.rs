//! The in-process gateway: checks that a payment is for one of the configured offers, keeps the
//! settlement journal, and hands each payment to the mechanism of its network. It is what makes
//! settling idempotent: a payment id that is journaled is never submitted again, whatever the
//! client, the service or a restart does.
//!
//! Settles of one network run one at a time (a per-network async mutex) so a duplicate arriving
//! mid-settle waits and then finds the journaled outcome; networks never wait for each other.
//! Every settle runs in a task of its own, bounded by the offer's `maxTimeoutSeconds` plus a
//! grace, so a client that goes away cannot cut a settlement short; [`Gateway::close`] waits
//! for those tasks.

pub mod deposits;
pub mod journal;
pub mod nft;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Mutex as AsyncMutex;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::canonical::settlement_id;
use super::facilitator::{DepositHit, DepositQuery, Facilitator, GatewayError};
use super::lookups::{ChainLookups, NftClaim, NftVerdict, SellOffer};
use super::mechanism::{BoxFuture, ChainError, Mechanism};
use super::quote::QuoteKey;
use super::settings::{FastlaneSettings, NetworkSettings, NetworksSettings, Offer, takes_deposits};
use super::x402::{
    FacilitatorRequest, PaymentRequirements, SettleResponse, SupportedKind, VerifyResponse,
    X402_VERSION,
};
pub use journal::{JournalError, SettlementJournal, SettlementRecord, SettlementState};

/// How long a settle may run beyond the offer's `maxTimeoutSeconds`.
pub const SETTLE_GRACE: Duration = Duration::from_secs(180);

/// The path of the resource every payment buys, under the configured origin.
pub const PAYMENT_PATH: &str = "/_concert/payment";

/// Reason strings the gateway itself gives (the mechanisms give their own).
pub mod reasons {
    pub const ALREADY_SETTLED: &str = "payment_already_settled";
    pub const RECONCILIATION_REQUIRED: &str = "reconciliation_required";
    pub const VERIFICATION_FAILED: &str = "verification_failed";
    pub const SETTLEMENT_UNKNOWN: &str = "settlement_unknown";
    pub const RESPONSE_MISMATCH: &str = "settlement_response_mismatch";
}

/// Builds the unsigned Solana transfer a browser wallet signs (`/solana/prepare`). The Solana
/// mechanism provides it; without one the operation is refused.
pub trait SolanaPreparer: Send + Sync + 'static {
    fn prepare<'a>(&'a self, request: &'a Value) -> BoxFuture<'a, Result<Value, GatewayError>>;
}

/// What a chain's factory is given to build the mechanism of one `(scheme, network)`.
#[derive(Debug, Clone, Copy)]
pub struct MechanismRequest<'a> {
    pub scheme: &'a str,
    pub network: &'a str,
    /// The network's `networks.json` entry.
    pub network_settings: &'a NetworkSettings,
    /// The offers of `fastlane.json` on this scheme and network (none when reconciling).
    pub offers: &'a [&'a Offer],
    pub test_mode: bool,
}

/// One mechanism per `(scheme, network)` the offers use, each built by `factory` from the
/// network's entry in `networks.json` (an offer on a network missing there is an error).
/// Which chains exist is the factory's business, so the gateway never names one.
pub fn build_mechanisms<F>(
    fastlane: &FastlaneSettings,
    networks: &NetworksSettings,
    mut factory: F,
) -> Result<Vec<Arc<dyn Mechanism>>, String>
where
    F: FnMut(&MechanismRequest<'_>) -> Result<Arc<dyn Mechanism>, String>,
{
    let mut kinds: Vec<(&str, &str)> = Vec::new();
    for offer in &fastlane.offers {
        let kind = (
            offer.requirements.scheme.as_str(),
            offer.requirements.network.as_str(),
        );
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let mut mechanisms = Vec::with_capacity(kinds.len());
    for (scheme, network) in kinds {
        let network_settings = networks.get(network).ok_or_else(|| {
            format!("networks.json has no entry for {network:?}, which an offer uses")
        })?;
        let offers: Vec<&Offer> = fastlane
            .offers
            .iter()
            .filter(|offer| {
                offer.requirements.scheme == scheme && offer.requirements.network == network
            })
            .collect();
        let mechanism = factory(&MechanismRequest {
            scheme,
            network,
            network_settings,
            offers: &offers,
            test_mode: fastlane.test_mode,
        })?;
        if mechanism.scheme() != scheme || mechanism.network() != network {
            return Err(format!(
                "the mechanism built for {scheme} on {network} says it is {} on {}",
                mechanism.scheme(),
                mechanism.network()
            ));
        }
        mechanisms.push(mechanism);
    }
    Ok(mechanisms)
}

/// A factory that knows no chain: every network is refused with a message saying so. The
/// binary passes the real one once chains are built in.
pub fn no_chains(request: &MechanismRequest<'_>) -> Result<Arc<dyn Mechanism>, String> {
    Err(format!(
        "{}: payments on this network are not built into this concert",
        request.network
    ))
}

/// The gateway. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    /// Keyed by `(scheme, network)`.
    mechanisms: HashMap<(String, String), Arc<dyn Mechanism>>,
    kinds: Vec<SupportedKind>,
    /// The terms a payment may be made against, as they serialise (the comparison is exact).
    offers: Vec<Vec<u8>>,
    /// The same offers, for recognising quotes priced from them.
    payable: Vec<PaymentRequirements>,
    /// Recognises offers priced by the line; none: only offers as configured are taken.
    quotes: Option<QuoteKey>,
    resource_url: String,
    journal: Arc<SettlementJournal>,
    network_locks: HashMap<String, Arc<AsyncMutex<()>>>,
    solana: Option<Arc<dyn SolanaPreparer>>,
    /// Read-only lookups by network, for NFT admission, deposits and the market.
    lookups: HashMap<String, Arc<dyn ChainLookups>>,
    settle_grace: Duration,
    closing: AtomicBool,
    settles: TaskTracker,
}

impl Gateway {
    /// A gateway for the offers of `settings` (those a visitor can pay: deposit-only offers are
    /// paid by plain transfers and never reach `/verify`). Every offer, deposit-only ones too,
    /// must have a mechanism.
    pub fn new(
        settings: &FastlaneSettings,
        mechanisms: Vec<Arc<dyn Mechanism>>,
        journal: SettlementJournal,
    ) -> Result<Gateway, String> {
        let mut by_kind = HashMap::new();
        let mut kinds = Vec::new();
        let mut network_locks = HashMap::new();
        for mechanism in mechanisms {
            let key = (
                mechanism.scheme().to_string(),
                mechanism.network().to_string(),
            );
            if by_kind.contains_key(&key) {
                return Err(format!(
                    "two mechanisms for {} on {}",
                    mechanism.scheme(),
                    mechanism.network()
                ));
            }
            kinds.push(SupportedKind {
                x402_version: X402_VERSION,
                scheme: key.0.clone(),
                network: key.1.clone(),
            });
            network_locks
                .entry(key.1.clone())
                .or_insert_with(|| Arc::new(AsyncMutex::new(())));
            by_kind.insert(key, mechanism);
        }
        let mut offers = Vec::new();
        let mut payable = Vec::new();
        for (index, offer) in settings.offers.iter().enumerate() {
            let terms = &offer.requirements;
            if !by_kind.contains_key(&(terms.scheme.clone(), terms.network.clone())) {
                return Err(format!(
                    "offers[{index}]: no mechanism for {} on {}",
                    terms.scheme, terms.network
                ));
            }
            if !offer.deposit_only {
                offers.push(serialised(terms));
                payable.push(terms.clone());
            }
        }
        Ok(Gateway {
            inner: Arc::new(Inner {
                mechanisms: by_kind,
                kinds,
                offers,
                payable,
                quotes: None,
                resource_url: payment_resource_url(&settings.origin),
                journal: Arc::new(journal),
                network_locks,
                solana: None,
                lookups: HashMap::new(),
                settle_grace: SETTLE_GRACE,
                closing: AtomicBool::new(false),
                settles: TaskTracker::new(),
            }),
        })
    }

    /// Adds the `/solana/prepare` handler. Only before the gateway is shared.
    pub fn with_solana_preparer(mut self, preparer: Arc<dyn SolanaPreparer>) -> Gateway {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.solana = Some(preparer);
        }
        self
    }

    /// Adds the read-only lookups of the networks collections, deposits and listings use.
    /// Only before the gateway is shared.
    pub fn with_lookups(mut self, lookups: Vec<Arc<dyn ChainLookups>>) -> Gateway {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            for lookup in lookups {
                inner.lookups.insert(lookup.network().to_owned(), lookup);
            }
        }
        self
    }

    /// Also takes offers priced by the line with quotes signed by `key` (the service's key).
    /// Only before the gateway is shared.
    pub fn with_quote_key(mut self, key: QuoteKey) -> Gateway {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.quotes = Some(key);
        }
        self
    }

    /// Changes how long a settle may run beyond the offer's timeout. Only before the gateway
    /// is shared.
    pub fn with_settle_grace(mut self, grace: Duration) -> Gateway {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.settle_grace = grace;
        }
        self
    }

    /// `<origin>/_concert/payment`: the only resource a payment may name.
    pub fn resource_url(&self) -> &str {
        &self.inner.resource_url
    }

    pub fn journal(&self) -> &SettlementJournal {
        &self.inner.journal
    }

    /// Healthy while the journal is and the gateway is not closing.
    pub fn is_healthy(&self) -> bool {
        self.inner.journal.is_healthy() && !self.inner.closing.load(Ordering::Acquire)
    }

    /// Refuses new settles, waits for those in flight to be journaled, then closes the journal
    /// (releasing its lock).
    pub async fn close(&self) {
        self.inner.closing.store(true, Ordering::Release);
        self.inner.settles.close();
        self.inner.settles.wait().await;
        self.inner.journal.close();
    }

    /// Settles running now (each in its own task).
    pub fn settles_running(&self) -> usize {
        self.inner.settles.len()
    }
}

/// `<origin>/_concert/payment`.
pub fn payment_resource_url(origin: &str) -> String {
    format!("{}{PAYMENT_PATH}", origin.trim_end_matches('/'))
}

fn serialised(terms: &PaymentRequirements) -> Vec<u8> {
    serde_json::to_vec(terms).unwrap_or_default()
}

fn rejected(message: impl Into<String>) -> GatewayError {
    GatewayError::Rejected(message.into())
}

fn unavailable(error: ChainError) -> GatewayError {
    GatewayError::Unavailable(error.to_string())
}

impl Inner {
    /// The checks every `/verify` and `/settle` passes before anything else: the mechanism to
    /// use when they pass.
    fn check(&self, request: &FacilitatorRequest) -> Result<Arc<dyn Mechanism>, GatewayError> {
        let payment = &request.payment_payload;
        let terms = &request.payment_requirements;
        if request.x402_version != X402_VERSION || payment.x402_version != X402_VERSION {
            return Err(rejected(format!(
                "x402 version {} is not supported (only {X402_VERSION})",
                if request.x402_version != X402_VERSION {
                    request.x402_version
                } else {
                    payment.x402_version
                }
            )));
        }
        if payment.payload.is_empty() {
            return Err(rejected("the payment payload is empty"));
        }
        let wanted = serialised(terms);
        if serialised(&payment.accepted) != wanted {
            return Err(rejected(
                "the payment's accepted terms differ from the requirements",
            ));
        }
        // A quote's expiry is the service's business: an identical retry of a journaled
        // payment must still settle after its quote ended.
        let quoted = || {
            self.quotes
                .as_ref()
                .is_some_and(|key| key.check(terms, &self.payable).is_some())
        };
        if !self.offers.contains(&wanted) && !quoted() {
            return Err(rejected("the requirements are not a configured offer"));
        }
        if let Some(resource) = &payment.resource
            && resource.url != self.resource_url
        {
            return Err(rejected(format!(
                "the payment is for another resource ({:?})",
                resource.url
            )));
        }
        self.mechanisms
            .get(&(terms.scheme.clone(), terms.network.clone()))
            .cloned()
            .ok_or_else(|| {
                rejected(format!(
                    "no mechanism for {} on {}",
                    terms.scheme, terms.network
                ))
            })
    }

    async fn verify(&self, request: &FacilitatorRequest) -> Result<VerifyResponse, GatewayError> {
        let mechanism = self.check(request)?;
        if !self.journal.is_healthy() {
            return Err(GatewayError::Closed);
        }
        let terms = &request.payment_requirements;
        let payment = &request.payment_payload;
        if let Some(record) = self.journal.find(terms, payment) {
            if serialised(&record.terms) != serialised(terms) {
                return Err(rejected("this payment was journaled under different terms"));
            }
            return Ok(match record.state {
                SettlementState::Settled => {
                    VerifyResponse::invalid(reasons::ALREADY_SETTLED, record.payer)
                }
                // Verified before it was journaled; the chain may have taken it since, so it
                // is not asked again.
                SettlementState::Pending | SettlementState::Unknown => {
                    VerifyResponse::valid(record.payer)
                }
            });
        }
        mechanism.verify(payment, terms).await.map_err(unavailable)
    }

    /// The whole settlement of one payment, run in its own task.
    async fn settle(
        self: Arc<Self>,
        mechanism: Arc<dyn Mechanism>,
        request: FacilitatorRequest,
    ) -> Result<SettleResponse, GatewayError> {
        let terms = &request.payment_requirements;
        let payment = &request.payment_payload;
        let Some(lock) = self.network_locks.get(&terms.network).cloned() else {
            return Err(rejected(format!("no mechanism for {}", terms.network)));
        };
        let _turn = lock.lock().await;
        if let Some(record) = self.journal.find(terms, payment) {
            return Ok(journaled_answer(record));
        }
        if !self.journal.is_healthy() {
            return Err(GatewayError::Closed);
        }
        let deadline =
            Instant::now() + Duration::from_secs(terms.max_timeout_seconds) + self.settle_grace;
        let verdict =
            match tokio::time::timeout_at(deadline, mechanism.verify(payment, terms)).await {
                Ok(Ok(verdict)) => verdict,
                Ok(Err(error)) => return Err(unavailable(error)),
                Err(_) => {
                    return Err(GatewayError::Unavailable(format!(
                        "{}: verifying before settling timed out",
                        terms.network
                    )));
                }
            };
        if !verdict.is_valid {
            return Ok(failure(
                reasons::VERIFICATION_FAILED,
                terms,
                Some(verdict.payer),
            ));
        }
        let payer = verdict.payer;
        let id = settlement_id(&terms.network, &terms.scheme, &payment.payload);
        let pending = SettlementRecord {
            id,
            terms: terms.clone(),
            payload: payment.clone(),
            payer: payer.clone(),
            state: SettlementState::Pending,
            response: None,
            created: String::new(),
            updated: String::new(),
        };
        let pending = self.write(pending).await?;
        let outcome = tokio::time::timeout_at(deadline, mechanism.settle(payment, terms)).await;
        let (state, response) = match outcome {
            Ok(Ok(mut response)) => {
                if response.payer.is_none() {
                    response.payer = Some(payer.clone());
                }
                if !response.success {
                    if response.error_reason.is_none() {
                        response.error_reason = Some(reasons::SETTLEMENT_UNKNOWN.to_string());
                    }
                    (SettlementState::Unknown, response)
                } else if response.network != terms.network
                    || response.payer.as_deref() != Some(payer.as_str())
                    || response.transaction.is_empty()
                {
                    tracing::warn!(
                        network = %terms.network,
                        transaction = %response.transaction,
                        "the chain's settlement answer does not match the payment; recorded as unknown"
                    );
                    (
                        SettlementState::Unknown,
                        failure(reasons::RESPONSE_MISMATCH, terms, Some(payer.clone())),
                    )
                } else {
                    (SettlementState::Settled, response)
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(network = %terms.network, "settlement outcome unknown: {error}");
                (
                    SettlementState::Unknown,
                    failure(reasons::SETTLEMENT_UNKNOWN, terms, Some(payer.clone())),
                )
            }
            Err(_) => {
                tracing::warn!(network = %terms.network, "settlement timed out; outcome unknown");
                (
                    SettlementState::Unknown,
                    failure(reasons::SETTLEMENT_UNKNOWN, terms, Some(payer.clone())),
                )
            }
        };
        let done = SettlementRecord {
            state,
            response: Some(response.clone()),
            ..pending
        };
        self.write(done).await?;
        Ok(response)
    }

    /// Appends off the async workers: an fsync can take milliseconds.
    async fn write(&self, record: SettlementRecord) -> Result<SettlementRecord, GatewayError> {
        let journal = self.journal.clone();
        tokio::task::spawn_blocking(move || journal.record(record))
            .await
            .map_err(|e| GatewayError::Unavailable(format!("settlement journal: {e}")))?
            .map_err(|e| match e {
                JournalError::Unhealthy { .. } => GatewayError::Closed,
                other => GatewayError::Unavailable(other.to_string()),
            })
    }
}

/// What a settle of an already journaled payment answers: never a second submission.
fn journaled_answer(record: SettlementRecord) -> SettleResponse {
    match (record.state, record.response) {
        (SettlementState::Settled, Some(response)) => response,
        _ => SettleResponse {
            success: false,
            error_reason: Some(reasons::RECONCILIATION_REQUIRED.to_string()),
            transaction: String::new(),
            network: record.terms.network,
            payer: Some(record.payer),
        },
    }
}

fn failure(reason: &str, terms: &PaymentRequirements, payer: Option<String>) -> SettleResponse {
    SettleResponse {
        success: false,
        error_reason: Some(reason.to_string()),
        transaction: String::new(),
        network: terms.network.clone(),
        payer,
    }
}

impl Facilitator for Gateway {
    fn supported(&self) -> Vec<SupportedKind> {
        self.inner.kinds.clone()
    }

    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, GatewayError>> {
        Box::pin(self.inner.verify(request))
    }

    fn settle(
        &self,
        request: FacilitatorRequest,
    ) -> BoxFuture<'static, Result<SettleResponse, GatewayError>> {
        let inner = self.inner.clone();
        let mechanism = match inner.check(&request) {
            Ok(mechanism) => mechanism,
            Err(error) => return Box::pin(std::future::ready(Err(error))),
        };
        if inner.closing.load(Ordering::Acquire) || !inner.journal.is_healthy() {
            return Box::pin(std::future::ready(Err(GatewayError::Closed)));
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Box::pin(std::future::ready(Err(GatewayError::Unavailable(
                "no async runtime to settle on".to_string(),
            ))));
        };
        // Spawned now, not at the first poll: the settlement runs even if the caller drops
        // the future straight away.
        let task = inner
            .settles
            .spawn_on(inner.clone().settle(mechanism, request), &runtime);
        Box::pin(async move {
            task.await
                .map_err(|e| GatewayError::Unavailable(format!("settlement task failed: {e}")))?
        })
    }

    fn solana_prepare<'a>(
        &'a self,
        request: &'a Value,
    ) -> BoxFuture<'a, Result<Value, GatewayError>> {
        Box::pin(async move {
            match &self.inner.solana {
                Some(preparer) => preparer.prepare(request).await,
                None => Err(rejected("no Solana network is configured")),
            }
        })
    }

    fn nft_verify<'a>(
        &'a self,
        claim: &'a NftClaim,
    ) -> BoxFuture<'a, Result<NftVerdict, GatewayError>> {
        Box::pin(nft::verify(&self.inner, claim))
    }

    fn deposit_check<'a>(
        &'a self,
        query: &'a DepositQuery,
    ) -> BoxFuture<'a, Result<Vec<DepositHit>, GatewayError>> {
        Box::pin(deposits::check(&self.inner, query))
    }

    fn market<'a>(
        &'a self,
        network: &'a str,
        collection: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SellOffer>, GatewayError>> {
        Box::pin(deposits::market(&self.inner, network, collection))
    }
}

impl Inner {
    /// The lookups of `network`, or the refusal a request naming an unconfigured one gets.
    fn lookups_of(&self, network: &str) -> Result<&Arc<dyn ChainLookups>, GatewayError> {
        self.lookups
            .get(network)
            .ok_or_else(|| rejected(format!("no lookups for {network}")))
    }
}

/// The networks that need read-only lookups: those of collections, of offers that take
/// deposits and of listings, each once.
pub fn lookup_networks(settings: &FastlaneSettings) -> Vec<String> {
    let mut networks: Vec<String> = Vec::new();
    let mut add = |network: &str| {
        if !networks.iter().any(|known| known == network) {
            networks.push(network.to_owned());
        }
    };
    for collection in &settings.collections {
        add(&collection.network);
    }
    for offer in &settings.offers {
        if takes_deposits(offer) {
            add(&offer.requirements.network);
        }
    }
    for listing in &settings.listings {
        add(&listing.network);
    }
    networks
}

/// The lookups of every network [`lookup_networks`] names, each built by `factory` from its
/// `networks.json` entry (a network missing there is an error).
pub fn build_lookups<F>(
    fastlane: &FastlaneSettings,
    networks: &NetworksSettings,
    mut factory: F,
) -> Result<Vec<Arc<dyn ChainLookups>>, String>
where
    F: FnMut(&str, &NetworkSettings) -> Result<Arc<dyn ChainLookups>, String>,
{
    lookup_networks(fastlane)
        .iter()
        .map(|network| {
            let settings = networks.get(network).ok_or_else(|| {
                format!("networks.json has no entry for {network:?}, which a collection, deposit offer or listing uses")
            })?;
            factory(network, settings)
        })
        .collect()
}

#[cfg(test)]
mod tests;
