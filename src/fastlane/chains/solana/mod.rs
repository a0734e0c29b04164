//! Solana's `concert-native-sol` scheme: the payer signs a legacy transaction whose single
//! instruction transfers the offered lamports to `payTo`, and Concert broadcasts it.
//!
//! - `wire`: the strict legacy-transaction codec;
//! - `transfer`: the local checks of a payment and the unsigned transfer `/solana/prepare`
//!   hands out;
//! - `nft`: message signatures and metadata addresses for NFT admission;
//! - this module: [`SolanaNativeSol`], the [`Mechanism`] that adds the chain's view.
//!
//! The network name is `solana:` followed by the first 32 characters of the cluster's genesis
//! hash, and the endpoint is asked for that hash before anything is judged or sent, so an
//! endpoint of another cluster can never confirm or receive a payment.

pub mod deposits;
pub mod lookups;
pub mod nft;
pub mod transfer;
pub mod wire;

use std::collections::HashSet;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Value, json};

use self::transfer::{NativeTransfer, TransferTerms, inspect_payload, parse_key};
use self::wire::SIGNATURE_LEN;
use super::rpc::{JsonRpcClient, RpcError};
use crate::fastlane::mechanism::{BoxFuture, ChainError, Mechanism};
use crate::fastlane::settings::NetworkSettings;
use crate::fastlane::x402::{PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse};

/// The x402 scheme name.
pub const SCHEME: &str = "concert-native-sol";
/// The offer's asset.
pub const ASSET: &str = "SOL";
/// The reason of every refused payment, whichever check failed.
pub const INVALID_REASON: &str = "invalid_native_sol_payment";
/// The CAIP-2 namespace of Solana networks.
const NETWORK_PREFIX: &str = "solana:";
/// Characters of the genesis hash that name a cluster.
const CLUSTER_ID_LEN: usize = 32;
/// How often the endpoint asks validators to rebroadcast a sent transaction.
const SEND_MAX_RETRIES: u64 = 3;

/// How a settlement waits for finality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettlePolling {
    /// Time between two status queries.
    pub interval: Duration,
    /// How long after sending a transaction may take to become final before the settlement
    /// is reported unresolved.
    pub budget: Duration,
}

impl Default for SettlePolling {
    /// Every 2 s for up to 120 s: a finalized transaction normally takes 13-20 s, and a
    /// blockhash expires after about 60-90 s, so a transfer still not final by then is not
    /// coming without help.
    fn default() -> SettlePolling {
        SettlePolling {
            interval: Duration::from_secs(2),
            budget: Duration::from_secs(120),
        }
    }
}

/// Why `/solana/prepare` built nothing.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The request is wrong (an error code for the client).
    #[error("{0}")]
    Invalid(&'static str),
    #[error(transparent)]
    Chain(#[from] ChainError),
}

/// The `concert-native-sol` mechanism of one Solana cluster.
#[derive(Debug)]
pub struct SolanaNativeSol {
    network: String,
    rpc: JsonRpcClient,
    polling: SettlePolling,
    /// Signatures this process has broadcast and not yet seen final, so a repeated settle
    /// never broadcasts the same transfer twice.
    sent: Mutex<HashSet<[u8; SIGNATURE_LEN]>>,
}

impl SolanaNativeSol {
    /// The mechanism for `network` (`solana:<32 characters of the genesis hash>`) reached at
    /// `settings.rpc`. Makes no call; see [`SolanaNativeSol::connect`].
    pub fn new(network: &str, settings: &NetworkSettings) -> Result<SolanaNativeSol, ChainError> {
        let unusable = |message: String| ChainError::Unavailable {
            network: network.to_owned(),
            message,
        };
        let cluster = network
            .strip_prefix(NETWORK_PREFIX)
            .ok_or_else(|| unusable("not a solana: network".to_owned()))?;
        let cluster_ok =
            cluster.len() == CLUSTER_ID_LEN && bs58::decode(cluster).into_vec().is_ok();
        if !cluster_ok {
            return Err(unusable(
                "a Solana network is solana: and 32 characters of the genesis hash".to_owned(),
            ));
        }
        let rpc = JsonRpcClient::new(&settings.rpc).map_err(|error| unusable(error.to_string()))?;
        Ok(SolanaNativeSol {
            network: network.to_owned(),
            rpc,
            polling: SettlePolling::default(),
            sent: Mutex::new(HashSet::new()),
        })
    }

    /// Replaces the finality wait (tests shorten it).
    pub fn with_polling(mut self, polling: SettlePolling) -> SolanaNativeSol {
        self.polling = polling;
        self
    }

    /// [`SolanaNativeSol::new`], then checks that the endpoint serves the configured cluster:
    /// the call to make at startup.
    pub async fn connect(
        network: &str,
        settings: &NetworkSettings,
    ) -> Result<SolanaNativeSol, ChainError> {
        let mechanism = SolanaNativeSol::new(network, settings)?;
        mechanism.check_cluster().await?;
        Ok(mechanism)
    }

    /// Fails unless the endpoint's genesis hash starts with this network's cluster id.
    pub async fn check_cluster(&self) -> Result<(), ChainError> {
        let genesis: String = self.call("getGenesisHash", json!([])).await?;
        let expected = self
            .network
            .strip_prefix(NETWORK_PREFIX)
            .unwrap_or_default();
        if genesis.get(..CLUSTER_ID_LEN) == Some(expected) {
            Ok(())
        } else {
            Err(self.unavailable(format!(
                "the endpoint serves another cluster (genesis {genesis})"
            )))
        }
    }

    /// `/solana/prepare`: the unsigned transfer from `from` that pays `terms`, on a finalized
    /// blockhash, for the page's wallet to sign. Answers
    /// `{transaction: base64, blockhash, lastValidBlockHeight}`.
    pub async fn prepare(
        &self,
        from: &str,
        terms: &PaymentRequirements,
    ) -> Result<Value, PrepareError> {
        let terms = self
            .terms(terms)
            .ok_or(PrepareError::Invalid("payment_terms_mismatch"))?;
        let from = parse_key(from).ok_or(PrepareError::Invalid("invalid_wallet_address"))?;
        if from == terms.pay_to || from == transfer::SYSTEM_PROGRAM {
            return Err(PrepareError::Invalid("invalid_wallet_address"));
        }
        self.check_cluster().await?;
        let latest: WithContext<LatestBlockhash> = self
            .call("getLatestBlockhash", json!([{"commitment": "finalized"}]))
            .await?;
        let blockhash = parse_key(&latest.value.blockhash)
            .ok_or_else(|| self.unavailable("the endpoint named an unreadable blockhash".into()))?;
        let unsigned = transfer::unsigned_transfer(from, terms.pay_to, terms.lamports, blockhash);
        Ok(json!({
            "transaction": STANDARD.encode(unsigned.encode()),
            "blockhash": latest.value.blockhash,
            "lastValidBlockHeight": latest.value.last_valid_block_height,
        }))
    }

    /// The terms, if they are this mechanism's and readable.
    fn terms(&self, terms: &PaymentRequirements) -> Option<TransferTerms> {
        let ours = terms.scheme == SCHEME && terms.network == self.network && terms.asset == ASSET;
        if ours {
            TransferTerms::parse(terms)
        } else {
            None
        }
    }

    /// The transfer in `payment` if it passes every local check against `terms`.
    fn local_checks(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<NativeTransfer, transfer::Refusal> {
        let terms = self.terms(terms).ok_or(transfer::Refusal {
            why: "the terms are not this network's concert-native-sol terms",
            payer: None,
        })?;
        inspect_payload(&payment.payload, &terms)
    }

    async fn verify_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<VerifyResponse, ChainError> {
        let transfer = match self.local_checks(payment, terms) {
            Ok(transfer) => transfer,
            Err(refusal) => {
                return Ok(refused(refusal.why, refusal.payer.unwrap_or_default()));
            }
        };
        let payer = transfer.payer();
        self.check_cluster().await?;
        if self.status(&transfer.signature_text()).await?.is_some() {
            return Ok(refused("the chain has already seen this transfer", payer));
        }
        let valid: WithContext<bool> = self
            .call(
                "isBlockhashValid",
                json!([transfer.blockhash_text(), {"commitment": "processed"}]),
            )
            .await?;
        if !valid.value {
            return Ok(refused("the blockhash is not valid on this cluster", payer));
        }
        let simulation: WithContext<Simulation> = self
            .call(
                "simulateTransaction",
                json!([transfer.wire_base64(), {
                    "encoding": "base64",
                    "sigVerify": true,
                    "replaceRecentBlockhash": false,
                    "commitment": "processed",
                }]),
            )
            .await?;
        if let Some(error) = simulation.value.err {
            tracing::debug!(network = %self.network, %payer, %error, "solana: simulation failed");
            return Ok(refused("the simulation failed", payer));
        }
        Ok(VerifyResponse::valid(payer))
    }

    async fn settle_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<SettleResponse, ChainError> {
        let transfer = self
            .local_checks(payment, terms)
            .map_err(|refusal| self.unavailable(format!("payment refused: {}", refusal.why)))?;
        let signature = transfer.signature_text();
        self.check_cluster().await?;
        match self.status(&signature).await? {
            None => self.send_once(&transfer, &signature).await?,
            Some(status) if status.err.is_some() => {
                return Err(self.failed_on_chain(&signature, &status));
            }
            // Already on the chain (a retry of an earlier settle): only wait.
            Some(_) => {}
        }
        self.await_finality(&signature).await?;
        self.sent.lock().remove(&transfer.signature);
        Ok(SettleResponse {
            success: true,
            error_reason: None,
            transaction: signature,
            network: self.network.clone(),
            payer: Some(transfer.payer()),
        })
    }

    /// Broadcasts the transfer unless this process already did.
    async fn send_once(
        &self,
        transfer: &NativeTransfer,
        signature: &str,
    ) -> Result<(), ChainError> {
        if !self.sent.lock().insert(transfer.signature) {
            return Ok(());
        }
        let returned: String = self
            .call(
                "sendTransaction",
                json!([transfer.wire_base64(), {
                    "encoding": "base64",
                    "maxRetries": SEND_MAX_RETRIES,
                    "preflightCommitment": "processed",
                }]),
            )
            .await?;
        if returned != signature {
            return Err(self.unavailable(format!(
                "sent {signature}, the endpoint answered {returned}"
            )));
        }
        tracing::info!(network = %self.network, %signature, "solana: transfer sent");
        Ok(())
    }

    /// Waits for `signature` to be finalized without error, within the polling budget. A
    /// failed status query is retried on the next round; an error on the chain ends the wait.
    async fn await_finality(&self, signature: &str) -> Result<(), ChainError> {
        let deadline = tokio::time::Instant::now() + self.polling.budget;
        loop {
            match self.status(signature).await {
                Ok(Some(status)) if status.err.is_some() => {
                    return Err(self.failed_on_chain(signature, &status));
                }
                Ok(Some(status)) if status.is_finalized() => return Ok(()),
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(network = %self.network, %signature, %error, "solana: status query failed");
                }
            }
            if tokio::time::Instant::now() + self.polling.interval > deadline {
                return Err(self.unavailable(format!(
                    "{signature} not finalized within {} s",
                    self.polling.budget.as_secs()
                )));
            }
            tokio::time::sleep(self.polling.interval).await;
        }
    }

    async fn reconcile_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<Option<SettleResponse>, ChainError> {
        let transfer = self
            .local_checks(payment, terms)
            .map_err(|refusal| self.unavailable(format!("payment refused: {}", refusal.why)))?;
        let signature = transfer.signature_text();
        self.check_cluster().await?;
        match self.status(&signature).await? {
            Some(status) if status.err.is_some() => Err(self.failed_on_chain(&signature, &status)),
            Some(status) if status.is_finalized() => Ok(Some(SettleResponse {
                success: true,
                error_reason: None,
                transaction: signature,
                network: self.network.clone(),
                payer: Some(transfer.payer()),
            })),
            _ => Ok(None),
        }
    }

    /// The signature's status, searched through the whole history; `None` if never seen.
    async fn status(&self, signature: &str) -> Result<Option<SignatureStatus>, ChainError> {
        let statuses: WithContext<Vec<Option<SignatureStatus>>> = self
            .call(
                "getSignatureStatuses",
                json!([[signature], {"searchTransactionHistory": true}]),
            )
            .await?;
        match <[Option<SignatureStatus>; 1]>::try_from(statuses.value) {
            Ok([status]) => Ok(status),
            Err(_) => {
                Err(self
                    .unavailable("getSignatureStatuses answered a list of another length".into()))
            }
        }
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, ChainError> {
        self.rpc
            .call(method, params)
            .await
            .map_err(|error: RpcError| self.unavailable(format!("{method}: {error}")))
    }

    fn unavailable(&self, message: String) -> ChainError {
        ChainError::Unavailable {
            network: self.network.clone(),
            message,
        }
    }

    fn failed_on_chain(&self, signature: &str, status: &SignatureStatus) -> ChainError {
        let error = status
            .err
            .as_ref()
            .map(Value::to_string)
            .unwrap_or_default();
        self.unavailable(format!("{signature} failed on the chain: {error}"))
    }
}

fn refused(why: &'static str, payer: String) -> VerifyResponse {
    VerifyResponse {
        is_valid: false,
        invalid_reason: Some(INVALID_REASON.to_owned()),
        invalid_message: Some(why.to_owned()),
        payer,
    }
}

impl Mechanism for SolanaNativeSol {
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

    /// The transaction id is the payload's own signature, so `hint` is not needed.
    fn reconcile<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
        _hint: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<SettleResponse>, ChainError>> {
        Box::pin(self.reconcile_payment(payment, terms))
    }
}

/// RPC answers shaped `{context, value}`; only `value` is used.
#[derive(Deserialize)]
struct WithContext<T> {
    value: T,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LatestBlockhash {
    blockhash: String,
    last_valid_block_height: u64,
}

#[derive(Deserialize)]
struct Simulation {
    #[serde(default)]
    err: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SignatureStatus {
    #[serde(default)]
    err: Option<Value>,
    #[serde(default)]
    confirmation_status: Option<String>,
}

impl SignatureStatus {
    fn is_finalized(&self) -> bool {
        self.confirmation_status.as_deref() == Some("finalized")
    }
}

#[cfg(test)]
mod tests;
