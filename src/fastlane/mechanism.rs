//! The seam between the gateway and a chain: one [`Mechanism`] per configured network. The
//! gateway owns terms checks, the settlement journal and serialisation per network; a
//! mechanism only checks a payload against the chain and moves it there.

use std::future::Future;
use std::pin::Pin;

use super::x402::{PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse};

/// Futures returned by mechanisms: boxed so the gateway can hold `dyn Mechanism`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a mechanism could not give a verdict (as opposed to a verdict of "invalid").
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The chain's endpoint failed, timed out, or answered something unusable.
    #[error("{network}: {message}")]
    Unavailable { network: String, message: String },
    /// The operation is not offered by this network (e.g. `/solana/prepare` elsewhere).
    #[error("{network} does not support {operation}")]
    Unsupported {
        network: String,
        operation: &'static str,
    },
}

impl ChainError {
    /// The endpoint of `network` failed with `error`.
    pub fn unavailable(network: &str, error: impl std::fmt::Display) -> ChainError {
        ChainError::Unavailable {
            network: network.to_owned(),
            message: error.to_string(),
        }
    }
}

/// A payment network's checks and settlement.
pub trait Mechanism: Send + Sync + 'static {
    /// The x402 scheme (`exact`, `concert-native-sol`).
    fn scheme(&self) -> &str;
    /// The CAIP-2 network (`xrpl:1`, `solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1`).
    fn network(&self) -> &str;

    /// Every check of the payment against `terms`, with the chain calls it needs. An invalid
    /// payment is `Ok` with `is_valid: false` and the mechanism's reason string.
    fn verify<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<VerifyResponse, ChainError>>;

    /// Submits the (already verified) payment and waits for finality. Anything short of a
    /// final success is an error or `success: false`; the gateway records that as unknown.
    fn settle<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
    ) -> BoxFuture<'a, Result<SettleResponse, ChainError>>;

    /// Looks up the final chain state of a payment whose settlement outcome is unknown; never
    /// signs or broadcasts. `Ok(None)`: not final (or not found) yet. `hint` is an
    /// operator-supplied transaction hash for chains whose payload does not fix it.
    fn reconcile<'a>(
        &'a self,
        payment: &'a PaymentPayload,
        terms: &'a PaymentRequirements,
        hint: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<SettleResponse>, ChainError>>;
}
