//! Hedera's read-only lookups: NFT ownership (`nft`), incoming transfers for deposits
//! (`deposits`). Built for every Hedera network a collection, a
//! deposit offer or a listing names.

use crate::fastlane::chains::rest::RestClient;
use crate::fastlane::mechanism::ChainError;
use crate::fastlane::settings::NetworkSettings;

pub struct HederaLookups {
    network: String,
    mirror: RestClient,
}

impl HederaLookups {
    pub fn new(network: &str, settings: &NetworkSettings) -> Result<HederaLookups, ChainError> {
        let mirror =
            RestClient::new(&settings.mirror).map_err(|e| ChainError::unavailable(network, e))?;
        Ok(HederaLookups {
            network: network.to_owned(),
            mirror,
        })
    }

    pub fn mirror(&self) -> &RestClient {
        &self.mirror
    }
}

crate::fastlane::lookups::chain_lookups!(HederaLookups);
