//! Stellar's read-only lookups: NFT ownership (`nft`), incoming transfers for deposits
//! (`deposits`). Built for every Stellar network a collection, a
//! deposit offer or a listing names.

use crate::fastlane::chains::rest::RestClient;
use crate::fastlane::chains::rpc::JsonRpcClient;
use crate::fastlane::mechanism::ChainError;
use crate::fastlane::settings::NetworkSettings;

pub struct StellarLookups {
    network: String,
    rpc: JsonRpcClient,
    horizon: Option<RestClient>,
}

impl StellarLookups {
    pub fn new(network: &str, settings: &NetworkSettings) -> Result<StellarLookups, ChainError> {
        let rpc =
            JsonRpcClient::new(&settings.rpc).map_err(|e| ChainError::unavailable(network, e))?;
        let horizon = if settings.horizon.is_empty() {
            None
        } else {
            Some(
                RestClient::new(&settings.horizon)
                    .map_err(|e| ChainError::unavailable(network, e))?,
            )
        };
        Ok(StellarLookups {
            network: network.to_owned(),
            rpc,
            horizon,
        })
    }

    pub fn rpc(&self) -> &JsonRpcClient {
        &self.rpc
    }

    pub fn horizon(&self) -> Option<&RestClient> {
        self.horizon.as_ref()
    }
}

crate::fastlane::lookups::chain_lookups!(StellarLookups);
