//! Solana's read-only lookups: NFT ownership (`nft`), incoming transfers for deposits
//! (`deposits`). Built for every Solana network a collection, a
//! deposit offer or a listing names.

use crate::fastlane::chains::rpc::JsonRpcClient;
use crate::fastlane::mechanism::ChainError;
use crate::fastlane::settings::NetworkSettings;

pub struct SolanaLookups {
    network: String,
    rpc: JsonRpcClient,
}

impl SolanaLookups {
    pub fn new(network: &str, settings: &NetworkSettings) -> Result<SolanaLookups, ChainError> {
        let rpc =
            JsonRpcClient::new(&settings.rpc).map_err(|e| ChainError::unavailable(network, e))?;
        Ok(SolanaLookups {
            network: network.to_owned(),
            rpc,
        })
    }

    pub fn rpc(&self) -> &JsonRpcClient {
        &self.rpc
    }
}

crate::fastlane::lookups::chain_lookups!(SolanaLookups);
