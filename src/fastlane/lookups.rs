//! The read-only side of a chain: who holds an NFT, which transfers reached an address, and
//! (XRPL) which NFTs are offered for sale. The gateway asks these for `/nft/verify`,
//! `/deposit/check` and `/market`. Unlike a [`super::mechanism::Mechanism`] a lookup signs
//! nothing, so one exists for every network a collection, a deposit offer or a listing names,
//! whether or not an x402 offer uses it.

use super::mechanism::{BoxFuture, ChainError};

/// A wallet's claim to hold a token of a collection, with its signature over the challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftClaim {
    pub network: String,
    /// The challenge message exactly as the service issued it and the wallet signed it.
    pub message: String,
    pub signature: Vec<u8>,
    /// The wallet's public key as it reported it (hex, strkey or base58, per chain); empty
    /// where the address is the key (Stellar, Solana).
    pub public_key: String,
    /// The address named on the challenge's `Wallet:` line.
    pub wallet: String,
    /// The rule's collection: `issuer:taxon` (XRPL), `C…` (Stellar), `0.0.N` (Hedera) or a
    /// mint (Solana).
    pub collection: String,
    /// The token asked for on the `Token:` line; empty when any token of the collection will do.
    pub token: String,
}

/// What a chain says about an [`NftClaim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NftVerdict {
    /// The signature is the wallet's and the wallet holds `token` of the collection.
    Owner { owner: String, token: String },
    /// The claim does not hold, for the stated reason (a short snake_case code).
    Refused(String),
}

/// A transfer of the chain's native asset into an address, as a deposit check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingTransfer {
    /// The transaction's hash or id, as the chain's explorers show it.
    pub transaction: String,
    /// Who paid (for Hedera, the most-debited account).
    pub payer: String,
    /// Atomic units actually delivered.
    pub amount: u64,
    /// XRPL destination tag.
    pub tag: Option<u32>,
    /// Memo texts as written by the payer, without any decoration the chain's API adds.
    pub memos: Vec<String>,
    /// When the transfer became final (unix seconds); 0 when the chain does not say.
    pub time: u64,
}

/// One open sell offer of an NFT (XRPL market).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SellOffer {
    pub nft_id: String,
    pub offer_id: String,
    pub owner: String,
    /// Drops asked.
    pub amount: u64,
    /// Set when the offer is reserved for one buyer.
    pub destination: Option<String>,
    /// Unix seconds; none: no expiry.
    pub expiration: Option<u64>,
}

/// A network's read-only lookups.
pub trait ChainLookups: Send + Sync + 'static {
    /// The CAIP-2 network.
    fn network(&self) -> &str;

    /// Checks the claim's signature with the chain's message rules and the wallet's holding
    /// against the chain's state.
    fn nft_owner<'a>(
        &'a self,
        claim: &'a NftClaim,
    ) -> BoxFuture<'a, Result<NftVerdict, ChainError>>;

    /// Native transfers into `pay_to` that became final at or after `since` (unix seconds),
    /// newest first, as far back as the chain's bounded lookback reaches.
    fn incoming<'a>(
        &'a self,
        pay_to: &'a str,
        since: u64,
    ) -> BoxFuture<'a, Result<Vec<IncomingTransfer>, ChainError>>;

    /// Open sell offers of the collection's NFTs. Only XRPL has a market.
    fn sell_offers<'a>(
        &'a self,
        collection: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SellOffer>, ChainError>> {
        let _ = collection;
        Box::pin(std::future::ready(Err(ChainError::Unsupported {
            network: self.network().to_owned(),
            operation: "market",
        })))
    }
}

/// Implements [`ChainLookups`] for a chain's lookups type by handing each question to the
/// chain module's own function: `super::nft::owner`, `super::deposits::incoming` and, when
/// `market` is named, `super::market::sell_offers`. The type needs a `network` field.
macro_rules! chain_lookups {
    ($lookups:ty) => {
        impl $crate::fastlane::lookups::ChainLookups for $lookups {
            $crate::fastlane::lookups::chain_lookups!(@common);
        }
    };
    ($lookups:ty, market) => {
        impl $crate::fastlane::lookups::ChainLookups for $lookups {
            $crate::fastlane::lookups::chain_lookups!(@common);

            fn sell_offers<'a>(
                &'a self,
                collection: &'a str,
            ) -> $crate::fastlane::mechanism::BoxFuture<
                'a,
                Result<Vec<$crate::fastlane::lookups::SellOffer>, $crate::fastlane::mechanism::ChainError>,
            > {
                Box::pin(super::market::sell_offers(self, collection))
            }
        }
    };
    (@common) => {
        fn network(&self) -> &str {
            &self.network
        }

        fn nft_owner<'a>(
            &'a self,
            claim: &'a $crate::fastlane::lookups::NftClaim,
        ) -> $crate::fastlane::mechanism::BoxFuture<
            'a,
            Result<$crate::fastlane::lookups::NftVerdict, $crate::fastlane::mechanism::ChainError>,
        > {
            Box::pin(super::nft::owner(self, claim))
        }

        fn incoming<'a>(
            &'a self,
            pay_to: &'a str,
            since: u64,
        ) -> $crate::fastlane::mechanism::BoxFuture<
            'a,
            Result<Vec<$crate::fastlane::lookups::IncomingTransfer>, $crate::fastlane::mechanism::ChainError>,
        > {
            Box::pin(super::deposits::incoming(self, pay_to, since))
        }
    };
}
pub(crate) use chain_lookups;
