//! Hedera's read-only lookups: NFT ownership (`nft`), incoming transfers for deposits
//! (`deposits`). Built for every Hedera network a collection, a
//! deposit offer or a listing names.

use std::fmt::Display;

use crate::fastlane::chains::rest::RestClient;
use crate::fastlane::lookups::{ChainLookups, IncomingTransfer, NftClaim, NftVerdict};
use crate::fastlane::mechanism::{BoxFuture, ChainError};
use crate::fastlane::settings::NetworkSettings;

pub struct HederaLookups {
    network: String,
    mirror: RestClient,
}

fn unavailable(network: &str, error: impl Display) -> ChainError {
    ChainError::Unavailable {
        network: network.to_owned(),
        message: error.to_string(),
    }
}

impl HederaLookups {
    pub fn new(network: &str, settings: &NetworkSettings) -> Result<HederaLookups, ChainError> {
        let mirror = RestClient::new(&settings.mirror).map_err(|e| unavailable(network, e))?;
        Ok(HederaLookups {
            network: network.to_owned(),
            mirror,
        })
    }

    pub fn mirror(&self) -> &RestClient {
        &self.mirror
    }
}

impl ChainLookups for HederaLookups {
    fn network(&self) -> &str {
        &self.network
    }

    fn nft_owner<'a>(
        &'a self,
        claim: &'a NftClaim,
    ) -> BoxFuture<'a, Result<NftVerdict, ChainError>> {
        Box::pin(super::nft::owner(self, claim))
    }

    fn incoming<'a>(
        &'a self,
        pay_to: &'a str,
        since: u64,
    ) -> BoxFuture<'a, Result<Vec<IncomingTransfer>, ChainError>> {
        Box::pin(super::deposits::incoming(self, pay_to, since))
    }
}
