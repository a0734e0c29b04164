//! XRPL's read-only lookups: NFT ownership (`nft`), incoming transfers for deposits
//! (`deposits`) and the NFT market (`market`). Built for every XRPL network a collection, a
//! deposit offer or a listing names.

use crate::fastlane::chains::rpc::JsonRpcClient;
use crate::fastlane::mechanism::ChainError;
use crate::fastlane::settings::NetworkSettings;

pub struct XrplLookups {
    network: String,
    rpc: JsonRpcClient,
}

impl XrplLookups {
    pub fn new(network: &str, settings: &NetworkSettings) -> Result<XrplLookups, ChainError> {
        let rpc =
            JsonRpcClient::new(&settings.rpc).map_err(|e| ChainError::unavailable(network, e))?;
        Ok(XrplLookups {
            network: network.to_owned(),
            rpc,
        })
    }

    pub fn rpc(&self) -> &JsonRpcClient {
        &self.rpc
    }
}

crate::fastlane::lookups::chain_lookups!(XrplLookups, market);
