//! One module per payment network. Each exposes a [`crate::fastlane::mechanism::Mechanism`]
//! built from its `networks.json` entry; the gateway never knows which chain it talks to.
//! `rpc` is the JSON-RPC client they reach their endpoints with, `rest` the bounded GET client
//! of REST endpoints (the Hedera mirror node); both share the same limits.

pub mod hedera;
pub mod rest;
pub mod rpc;
pub mod solana;
pub mod stellar;
pub mod xrpl;

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::facilitator::GatewayError;
use super::gateway::{MechanismRequest, SolanaPreparer};
use super::lookups::ChainLookups;
use super::mechanism::{BoxFuture, Mechanism};
use super::settings::NetworkSettings;
use super::x402::PaymentRequirements;
use crate::config::{EnvSource, ProcessEnv};

/// The chains built into this binary: builds the mechanism of each `(scheme, network)` the
/// offers use, and keeps the Solana ones to prepare transfers for browser wallets.
#[derive(Default)]
pub struct BuiltIn {
    solana: Mutex<Vec<(Arc<solana::SolanaNativeSol>, PaymentRequirements)>>,
    /// Where sponsoring networks' fee secrets are read; the process environment when unset.
    secrets: Option<Arc<dyn EnvSource + Send + Sync>>,
}

impl BuiltIn {
    pub fn new() -> Arc<BuiltIn> {
        Arc::new(BuiltIn::default())
    }

    /// Chains that read fee secrets from `secrets` instead of the process environment.
    pub fn with_secrets(secrets: Arc<dyn EnvSource + Send + Sync>) -> Arc<BuiltIn> {
        Arc::new(BuiltIn {
            secrets: Some(secrets),
            ..BuiltIn::default()
        })
    }

    fn secret(&self, name: &str) -> Option<String> {
        let value = match &self.secrets {
            Some(secrets) => secrets.var(name),
            None => ProcessEnv.var(name),
        };
        value.filter(|value| !value.trim().is_empty())
    }

    /// The factory [`super::gateway::build_mechanisms`] and `concert reconcile` call.
    pub fn build(&self, request: &MechanismRequest<'_>) -> Result<Arc<dyn Mechanism>, String> {
        let family = request.network.split(':').next().unwrap_or_default();
        let named = |e: super::mechanism::ChainError| format!("{}: {e}", request.network);
        match (family, request.scheme) {
            ("xrpl", "exact") => {
                let mechanism = xrpl::XrplExact::new(request.network, request.network_settings)
                    .map_err(named)?;
                Ok(Arc::new(mechanism))
            }
            ("solana", solana::SCHEME) => {
                let mechanism = Arc::new(
                    solana::SolanaNativeSol::new(request.network, request.network_settings)
                        .map_err(named)?,
                );
                if let Some(offer) = request.offers.iter().find(|offer| !offer.deposit_only) {
                    self.solana
                        .lock()
                        .push((mechanism.clone(), offer.requirements.clone()));
                }
                Ok(mechanism)
            }
            ("stellar", stellar::SCHEME) => {
                let variable = stellar::secret_env(request.network_settings);
                let secret = self.secret(variable).unwrap_or_default();
                if secret.trim().is_empty() {
                    return Err(format!(
                        "{}: ${variable} must hold the fee sponsor's secret seed (S…)",
                        request.network
                    ));
                }
                let mechanism =
                    stellar::StellarExact::new(request.network, request.network_settings, &secret)
                        .map_err(named)?;
                Ok(Arc::new(mechanism))
            }
            ("hedera", hedera::SCHEME) => {
                let settings = request.network_settings;
                let env = if settings.secret_env.is_empty() {
                    hedera::DEFAULT_SECRET_ENV
                } else {
                    settings.secret_env.as_str()
                };
                let secret = self.secret(env);
                // Reconciling (no offers) never signs, so it needs no secret.
                if secret.is_none() && !request.offers.is_empty() {
                    return Err(format!(
                        "{}: the sponsor's fee secret ${env} must be set",
                        request.network
                    ));
                }
                let mechanism =
                    hedera::HederaExact::new(request.network, settings, secret.as_deref())
                        .map_err(named)?;
                Ok(Arc::new(mechanism))
            }
            _ => Err(format!(
                "{}: no mechanism for scheme {:?} on this network",
                request.network, request.scheme
            )),
        }
    }
}

impl BuiltIn {
    /// The factory [`super::gateway::build_lookups`] calls: the read-only lookups of one
    /// network. They need no secret.
    pub fn lookups(
        &self,
        network: &str,
        settings: &NetworkSettings,
    ) -> Result<Arc<dyn ChainLookups>, String> {
        let named = |e: super::mechanism::ChainError| format!("{network}: {e}");
        let lookups: Arc<dyn ChainLookups> = match network.split(':').next().unwrap_or_default() {
            "xrpl" => Arc::new(xrpl::lookups::XrplLookups::new(network, settings).map_err(named)?),
            "stellar" => {
                Arc::new(stellar::lookups::StellarLookups::new(network, settings).map_err(named)?)
            }
            "hedera" => {
                Arc::new(hedera::lookups::HederaLookups::new(network, settings).map_err(named)?)
            }
            "solana" => {
                Arc::new(solana::lookups::SolanaLookups::new(network, settings).map_err(named)?)
            }
            _ => return Err(format!("{network}: no lookups for this network")),
        };
        Ok(lookups)
    }
}

impl SolanaPreparer for BuiltIn {
    fn prepare<'a>(&'a self, request: &'a Value) -> BoxFuture<'a, Result<Value, GatewayError>> {
        Box::pin(async move {
            let network = request.get("network").and_then(Value::as_str);
            let from = request.get("from").and_then(Value::as_str);
            let (Some(network), Some(from)) = (network, from) else {
                return Err(GatewayError::Rejected(
                    "network and from are required".into(),
                ));
            };
            let found = self
                .solana
                .lock()
                .iter()
                .find(|(mechanism, _)| mechanism.network() == network)
                .cloned();
            let Some((mechanism, mut terms)) = found else {
                return Err(GatewayError::Rejected(format!(
                    "no Solana offer on {network}"
                )));
            };
            // A line-priced quote asks for more than the offer; never for less.
            if let Some(amount) = request.get("amount") {
                let quoted = amount.as_str().and_then(|a| a.parse::<u64>().ok());
                let offered = terms.amount.parse::<u64>().ok();
                match (quoted, offered) {
                    (Some(quoted), Some(offered)) if quoted >= offered => {
                        terms.amount = quoted.to_string();
                    }
                    _ => {
                        return Err(GatewayError::Rejected(
                            "the amount is below the offer's".into(),
                        ));
                    }
                }
            }
            mechanism.prepare(from, &terms).await.map_err(|e| match e {
                solana::PrepareError::Invalid(code) => GatewayError::Rejected(code.to_owned()),
                solana::PrepareError::Chain(e) => GatewayError::Unavailable(e.to_string()),
            })
        })
    }
}
