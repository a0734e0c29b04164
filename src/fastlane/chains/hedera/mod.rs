//! Hedera's `exact` scheme for HBAR (asset `0.0.0`): the payer signs a crypto transfer whose
//! transaction id (and so network fee) belongs to Concert's sponsoring account; Concert checks
//! it against the terms and the mirror node, co-signs it as the sponsor and submits it to a
//! consensus node over gRPC, then waits for a `SUCCESS` receipt.
//!
//! - `proto`: the protobuf messages, decoded strictly (unknown fields refused);
//! - `payment`: the payload's decoding and the checks that need no chain;
//! - `keys`: payer keys from the mirror and their signatures, and the sponsor's key;
//! - `node`: the consensus node's gRPC calls;
//! - this module: [`HederaExact`], the [`Mechanism`].

pub mod deposits;
pub mod keys;
pub mod lookups;
pub mod nft;
pub mod node;
pub mod payment;
pub mod proto;

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message as _;
use serde::Deserialize;
use serde_json::Value;

use self::keys::{PayerKey, SponsorKey};
use self::node::{NODE_GRPC_PORT, NodeClient};
use self::payment::{
    EntityId, HbarTransfer, Payer, Refused, TransferTerms, Undecodable, check_transfer,
    decode_payload,
};
use self::proto::code;
use super::rest::RestClient;
use crate::fastlane::mechanism::{BoxFuture, ChainError, Mechanism};
use crate::fastlane::settings::NetworkSettings;
use crate::fastlane::x402::{PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse};

pub const SCHEME: &str = "exact";
/// HBAR itself.
pub const ASSET: &str = "0.0.0";
/// The highest network fee a payer may make the sponsor pay, in tinybars (1 HBAR); also the
/// default when `max_fee_tinybars` is not set.
pub const FEE_CAP_TINYBARS: u64 = 100_000_000;
/// The fee secret's variable when `secret_env` does not rename it.
pub const DEFAULT_SECRET_ENV: &str = "CONCERT_HEDERA_FEE_SECRET";
/// Node copies tried at settlement before giving up (a busy node passes to the next; the
/// network keeps one transaction per id, so a second copy can never pay twice).
const MAX_SUBMIT_NODES: usize = 3;
/// Pages of the mirror's node list read at most.
const MAX_NODE_PAGES: usize = 20;
const NODE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How a settlement waits for the receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettlePolling {
    pub interval: Duration,
    pub budget: Duration,
}

impl Default for SettlePolling {
    /// Every second for up to 120 s: consensus takes a few seconds, and a transaction not
    /// executed within its 120 s valid duration never will be.
    fn default() -> SettlePolling {
        SettlePolling {
            interval: Duration::from_secs(1),
            budget: Duration::from_secs(120),
        }
    }
}

/// `exact` HBAR payments on `hedera:mainnet` or `hedera:testnet`, fees sponsored.
#[derive(Debug)]
pub struct HederaExact {
    network: String,
    fee_payer: EntityId,
    max_fee: u64,
    mirror: RestClient,
    /// Absent only where nothing is ever submitted (reconciliation).
    sponsor: Option<SponsorKey>,
    polling: SettlePolling,
    node_port: u16,
    /// Transaction ids this process has submitted, so a repeated settle only waits.
    submitted: Mutex<HashSet<String>>,
}

impl HederaExact {
    /// The mechanism for `network` from its `networks.json` entry and the sponsor's key (DER
    /// hex, from the variable `secret_env` names). Makes no call.
    pub fn new(
        network: &str,
        settings: &NetworkSettings,
        sponsor_der_hex: Option<&str>,
    ) -> Result<HederaExact, ChainError> {
        let unusable = |message: &str| ChainError::Unavailable {
            network: network.to_owned(),
            message: message.to_owned(),
        };
        if !matches!(network, "hedera:mainnet" | "hedera:testnet") {
            return Err(unusable(
                "not a Hedera network (hedera:mainnet, hedera:testnet)",
            ));
        }
        let fee_payer = EntityId::parse(&settings.fee_payer)
            .ok_or_else(|| unusable("fee_payer must be the sponsoring account 0.0.N"))?;
        let sponsor = match sponsor_der_hex {
            Some(text) => Some(SponsorKey::from_der_hex(text).ok_or_else(|| {
                unusable("the fee secret is not a DER hex ed25519 or secp256k1 private key")
            })?),
            None => None,
        };
        let mirror = RestClient::new(&settings.mirror)
            .map_err(|error| unusable(&format!("mirror: {error}")))?;
        let max_fee = match settings.max_fee_tinybars {
            0 => FEE_CAP_TINYBARS,
            set => set.min(FEE_CAP_TINYBARS),
        };
        Ok(HederaExact {
            network: network.to_owned(),
            fee_payer,
            max_fee,
            mirror,
            sponsor,
            polling: SettlePolling::default(),
            node_port: NODE_GRPC_PORT,
            submitted: Mutex::new(HashSet::new()),
        })
    }

    /// Replaces the receipt wait (tests shorten it).
    pub fn with_polling(mut self, polling: SettlePolling) -> HederaExact {
        self.polling = polling;
        self
    }

    /// Replaces the port node endpoints must list (tests run a node on an ephemeral port).
    pub fn with_node_port(mut self, port: u16) -> HederaExact {
        self.node_port = port;
        self
    }

    fn unavailable(&self, message: impl Into<String>) -> ChainError {
        ChainError::Unavailable {
            network: self.network.clone(),
            message: message.into(),
        }
    }

    /// The x402 envelope and the terms: this network's HBAR terms, accepted unchanged, with
    /// this sponsor as fee payer.
    fn terms(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<TransferTerms, &'static str> {
        let accepted = &payment.accepted;
        let fee_payer_of = |terms: &PaymentRequirements| -> Option<Value> {
            terms
                .extra
                .as_ref()
                .and_then(|extra| extra.get("feePayer"))
                .cloned()
        };
        if payment.x402_version != 2 {
            return Err("invalid_x402_version");
        }
        if accepted.scheme != SCHEME || terms.scheme != SCHEME {
            return Err("unsupported_scheme");
        }
        if accepted.network != terms.network {
            return Err("network_mismatch");
        }
        let same = accepted.asset == terms.asset
            && accepted.amount == terms.amount
            && accepted.pay_to == terms.pay_to
            && accepted.max_timeout_seconds == terms.max_timeout_seconds
            && fee_payer_of(accepted) == fee_payer_of(terms);
        if !same {
            return Err("accepted_payment_requirements_mismatch");
        }
        if terms.network != self.network {
            return Err("network_mismatch");
        }
        if terms.asset != ASSET {
            return Err("invalid_asset");
        }
        let pay_to = EntityId::parse(&terms.pay_to).ok_or("invalid_exact_hedera_payload_pay_to")?;
        let amount_text = terms.amount.as_str();
        let amount = amount_text
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| amount_text.parse::<u64>().ok())
            .flatten()
            .filter(|amount| i64::try_from(*amount).is_ok())
            .ok_or("invalid_amount")?;
        let fee_payer = fee_payer_of(terms)
            .as_ref()
            .and_then(Value::as_str)
            .and_then(EntityId::parse)
            .ok_or("invalid_exact_hedera_payload_missing_fee_payer")?;
        if fee_payer != self.fee_payer {
            return Err("fee_payer_not_managed_by_facilitator");
        }
        Ok(TransferTerms {
            fee_payer,
            pay_to,
            amount,
            max_fee: self.max_fee,
        })
    }

    /// Every check that needs no chain, in order.
    fn local_checks(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<(HbarTransfer, Payer), Refused> {
        let plain = |reason| Refused {
            reason,
            payer: None,
        };
        let terms = self.terms(payment, terms).map_err(plain)?;
        let text = payment
            .payload
            .get("transaction")
            .and_then(Value::as_str)
            .ok_or(plain(
                "invalid_exact_hedera_payload_transaction_could_not_be_decoded",
            ))?;
        let transfer = decode_payload(text).map_err(|error| match error {
            Undecodable::NotTransfer => {
                plain("invalid_exact_hedera_payload_contains_non_transfer_ops")
            }
            Undecodable::Malformed(why) => {
                tracing::debug!(why, "hedera: payload refused");
                plain("invalid_exact_hedera_payload_transaction_could_not_be_decoded")
            }
        })?;
        let payer = check_transfer(&transfer, &terms)?;
        Ok((transfer, payer))
    }

    async fn verify_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<VerifyResponse, ChainError> {
        let (transfer, payer) = match self.local_checks(payment, terms) {
            Ok(checked) => checked,
            Err(refused) => return Ok(verdict(refused)),
        };
        let refuse = |reason| {
            Ok(verdict(Refused {
                reason,
                payer: Some(payer.account),
            }))
        };
        let path = format!("/api/v1/accounts/{}", payer.account);
        let account: Option<MirrorAccount> = self
            .mirror
            .get(&path)
            .await
            .map_err(|error| self.unavailable(format!("mirror {path}: {error}")))?;
        let Some(account) = account else {
            return refuse("invalid_exact_hedera_payload_signature_invalid");
        };
        let key = account
            .key
            .as_ref()
            .and_then(|key| PayerKey::from_mirror(&key.kind, &key.key));
        let signed_everywhere = key.is_some_and(|key| {
            transfer
                .copies
                .iter()
                .all(|copy| key.signed(&copy.signed, &copy.body_bytes))
        });
        if !signed_everywhere {
            return refuse("invalid_exact_hedera_payload_signature_invalid");
        }
        let balance = account.balance.and_then(|balance| balance.balance);
        if account.deleted || balance.is_none_or(|balance| balance < payer.debit) {
            return refuse("invalid_exact_hedera_payload_preflight_failed");
        }
        Ok(VerifyResponse::valid(payer.account.to_string()))
    }

    async fn settle_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<SettleResponse, ChainError> {
        let sponsor = self
            .sponsor
            .as_ref()
            .ok_or_else(|| self.unavailable("no sponsor key to co-sign with"))?;
        let (transfer, payer) = self
            .local_checks(payment, terms)
            .map_err(|refused| self.unavailable(format!("payment refused: {}", refused.reason)))?;
        let id = transfer.transaction_id_text.clone();
        let nodes = self.node_addresses(&transfer).await?;
        let first_time = self.submitted.lock().insert(id.clone());
        let node = if first_time {
            self.submit(&transfer, sponsor, &nodes).await?
        } else {
            // Submitted earlier by this process: only wait for its receipt.
            let (_, address) = nodes
                .first()
                .ok_or_else(|| self.unavailable("no node to ask for the receipt"))?;
            NodeClient::connect(address, NODE_CALL_TIMEOUT)
                .await
                .map_err(|error| self.unavailable(format!("node {address}: {error}")))?
        };
        self.await_success(&node, &transfer).await?;
        // Final: the journal holds it from here, and the set stays as small as what is open.
        self.submitted.lock().remove(&id);
        Ok(SettleResponse {
            success: true,
            error_reason: None,
            transaction: id,
            network: self.network.clone(),
            payer: Some(payer.account.to_string()),
        })
    }

    /// Co-signs and submits the node copies in turn until a node takes one; returns that node.
    async fn submit(
        &self,
        transfer: &HbarTransfer,
        sponsor: &SponsorKey,
        nodes: &[(EntityId, String)],
    ) -> Result<NodeClient, ChainError> {
        let mut last_problem = String::from("no node tried");
        for (node_id, address) in nodes.iter().take(MAX_SUBMIT_NODES) {
            let Some(copy) = transfer.copies.iter().find(|copy| copy.node == *node_id) else {
                continue;
            };
            let mut signed = copy.signed.clone();
            let pair = sponsor
                .sign(&copy.body_bytes)
                .ok_or_else(|| self.unavailable("the sponsor key could not sign"))?;
            signed.sig_map.get_or_insert_default().sig_pair.push(pair);
            let wire = proto::Transaction {
                signed_transaction_bytes: Some(signed.encode_to_vec()),
            };
            let client = match NodeClient::connect(address, NODE_CALL_TIMEOUT).await {
                Ok(client) => client,
                Err(error) => {
                    last_problem = format!("node {node_id} at {address}: {error}");
                    continue;
                }
            };
            match client.submit(wire).await {
                Ok(code::OK | code::DUPLICATE_TRANSACTION) => {
                    tracing::info!(network = %self.network, transaction = %transfer.transaction_id_text, node = %node_id, "hedera: transfer submitted");
                    return Ok(client);
                }
                Ok(code::BUSY) => last_problem = format!("node {node_id} is busy"),
                Ok(precheck) => {
                    return Err(self.unavailable(format!(
                        "node {node_id} refused {} (precheck code {precheck})",
                        transfer.transaction_id_text
                    )));
                }
                Err(error) => last_problem = format!("node {node_id} at {address}: {error}"),
            }
        }
        Err(self.unavailable(format!(
            "{} not submitted: {last_problem}",
            transfer.transaction_id_text
        )))
    }

    /// Polls the node for the receipt until `SUCCESS`, a final failure, or the budget ends.
    async fn await_success(
        &self,
        node: &NodeClient,
        transfer: &HbarTransfer,
    ) -> Result<(), ChainError> {
        let id = &transfer.transaction_id_text;
        let deadline = tokio::time::Instant::now() + self.polling.budget;
        loop {
            match node.receipt(&transfer.transaction_id).await {
                Ok((code::OK, Some(code::SUCCESS))) => return Ok(()),
                Ok((code::OK, Some(status))) if status != code::UNKNOWN && status != code::OK => {
                    return Err(self.unavailable(format!(
                        "{id} failed on the network (receipt status {status})"
                    )));
                }
                Ok((precheck, status)) => {
                    tracing::debug!(network = %self.network, %id, precheck, ?status, node = node.address(), "hedera: receipt not final");
                }
                Err(error) => {
                    tracing::debug!(network = %self.network, %id, %error, "hedera: receipt query failed");
                }
            }
            if tokio::time::Instant::now() + self.polling.interval > deadline {
                return Err(self.unavailable(format!(
                    "{id}: no SUCCESS receipt within {} s",
                    self.polling.budget.as_secs()
                )));
            }
            tokio::time::sleep(self.polling.interval).await;
        }
    }

    /// The transaction's nodes that the mirror lists with a gRPC endpoint on the node port, in
    /// the payload's order.
    async fn node_addresses(
        &self,
        transfer: &HbarTransfer,
    ) -> Result<Vec<(EntityId, String)>, ChainError> {
        let mut known: Vec<(EntityId, String)> = Vec::new();
        let mut next = Some("/api/v1/network/nodes?limit=25".to_owned());
        for _ in 0..MAX_NODE_PAGES {
            let Some(path) = next.take() else { break };
            let page: Option<NodePage> = self
                .mirror
                .get(&path)
                .await
                .map_err(|error| self.unavailable(format!("mirror {path}: {error}")))?;
            let Some(page) = page else { break };
            for node in page.nodes {
                let Some(id) = EntityId::parse(&node.node_account_id) else {
                    continue;
                };
                let endpoint = node.service_endpoints.iter().find_map(|endpoint| {
                    (endpoint.port == u64::from(self.node_port))
                        .then(|| endpoint.host())
                        .flatten()
                });
                if let Some(host) = endpoint {
                    known.push((id, format!("{host}:{}", self.node_port)));
                }
            }
            next = page
                .links
                .and_then(|links| links.next)
                .filter(|next| next.starts_with("/api/v1/network/nodes"));
        }
        let ordered: Vec<(EntityId, String)> = transfer
            .copies
            .iter()
            .filter_map(|copy| known.iter().find(|(id, _)| *id == copy.node).cloned())
            .collect();
        if ordered.is_empty() {
            return Err(self.unavailable(
                "the mirror lists none of the transaction's nodes with a gRPC endpoint",
            ));
        }
        Ok(ordered)
    }

    async fn reconcile_payment(
        &self,
        payment: &PaymentPayload,
        terms: &PaymentRequirements,
    ) -> Result<Option<SettleResponse>, ChainError> {
        let (transfer, payer) = self
            .local_checks(payment, terms)
            .map_err(|refused| self.unavailable(format!("payment refused: {}", refused.reason)))?;
        let id = &transfer.transaction_id_text;
        let path = format!("/api/v1/transactions/{}", transfer.mirror_transaction_id());
        let found: Option<MirrorTransactions> = self
            .mirror
            .get(&path)
            .await
            .map_err(|error| self.unavailable(format!("mirror {path}: {error}")))?;
        let Some(found) = found else { return Ok(None) };
        let amount = i128::from(payer.debit);
        let pay_to = terms.pay_to.as_str();
        let payer_text = payer.account.to_string();
        for entry in found.transactions {
            let plain_transfer = entry.result == "SUCCESS"
                && entry.nonce == 0
                && !entry.scheduled
                && entry.name == "CRYPTOTRANSFER"
                && entry.token_transfers.as_ref().is_none_or(Vec::is_empty);
            if !plain_transfer {
                continue;
            }
            let net = |account: &str| -> i128 {
                entry
                    .transfers
                    .iter()
                    .filter(|t| t.account == account)
                    .map(|t| i128::from(t.amount))
                    .sum()
            };
            if net(&payer_text) != -amount || net(pay_to) != amount {
                return Err(self.unavailable(format!(
                    "{id} on the ledger does not move exactly {amount} tinybars from {payer_text} to {pay_to}"
                )));
            }
            return Ok(Some(SettleResponse {
                success: true,
                error_reason: None,
                transaction: id.clone(),
                network: self.network.clone(),
                payer: Some(payer_text),
            }));
        }
        Ok(None)
    }
}

fn verdict(refused: Refused) -> VerifyResponse {
    VerifyResponse::invalid(
        refused.reason,
        refused
            .payer
            .map(|payer| payer.to_string())
            .unwrap_or_default(),
    )
}

impl Mechanism for HederaExact {
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

    /// The transaction id is fixed by the payload, so `hint` is not needed.
    fn reconcile<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
        _hint: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<SettleResponse>, ChainError>> {
        Box::pin(self.reconcile_payment(payment, terms))
    }
}

/// `/api/v1/accounts/{id}`, the parts read.
#[derive(Deserialize)]
struct MirrorAccount {
    #[serde(default)]
    key: Option<MirrorKey>,
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    balance: Option<MirrorBalance>,
}

#[derive(Deserialize)]
struct MirrorKey {
    #[serde(rename = "_type")]
    kind: String,
    key: String,
}

#[derive(Deserialize)]
struct MirrorBalance {
    #[serde(default)]
    balance: Option<u64>,
}

/// `/api/v1/network/nodes`, the parts read.
#[derive(Deserialize)]
struct NodePage {
    #[serde(default)]
    nodes: Vec<MirrorNode>,
    #[serde(default)]
    links: Option<Links>,
}

#[derive(Deserialize)]
struct Links {
    #[serde(default)]
    next: Option<String>,
}

#[derive(Deserialize)]
struct MirrorNode {
    node_account_id: String,
    #[serde(default)]
    service_endpoints: Vec<ServiceEndpoint>,
}

#[derive(Deserialize)]
struct ServiceEndpoint {
    #[serde(default)]
    domain_name: Option<String>,
    #[serde(default)]
    ip_address_v4: Option<String>,
    #[serde(default)]
    port: u64,
}

impl ServiceEndpoint {
    /// The address to dial: the IPv4 address, else the domain name, if it is a plain host.
    fn host(&self) -> Option<String> {
        if let Some(ip) = self.ip_address_v4.as_deref().filter(|ip| !ip.is_empty()) {
            return ip.parse::<IpAddr>().ok().map(|ip| ip.to_string());
        }
        let domain = self
            .domain_name
            .as_deref()
            .filter(|name| !name.is_empty())?;
        let plain = domain.len() <= 253
            && domain
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        plain.then(|| domain.to_owned())
    }
}

/// `/api/v1/transactions/{id}`, the parts read.
#[derive(Deserialize)]
struct MirrorTransactions {
    #[serde(default)]
    transactions: Vec<MirrorTransaction>,
}

#[derive(Deserialize)]
struct MirrorTransaction {
    #[serde(default)]
    result: String,
    #[serde(default)]
    nonce: i64,
    #[serde(default)]
    scheduled: bool,
    #[serde(default)]
    name: String,
    #[serde(default)]
    token_transfers: Option<Vec<Value>>,
    #[serde(default)]
    transfers: Vec<MirrorTransfer>,
}

#[derive(Deserialize)]
struct MirrorTransfer {
    account: String,
    amount: i64,
}
