//! `fastlane.json` and `networks.json` as parsed. Validation (whole-file, unknown keys refused,
//! mainnets refused in test mode, https-only endpoints) and the commented examples printed by
//! `concert example fastlane|networks` live beside these types.

pub mod addresses;
mod examples;
mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::x402::PaymentRequirements;
pub use examples::{
    FASTLANE_EXAMPLE_NOTES, NETWORKS_EXAMPLE_NOTES, example_fastlane, example_networks,
};
pub use validate::{
    FASTLANE_FILE, KNOWN_NETWORKS, MAX_FILE_BYTES, NETWORKS_FILE, fastlane_problems, is_mainnet,
    load_files, networks_problems, parse_fastlane, parse_networks, takes_deposits,
    validate_fastlane, validate_networks,
};

/// `fastlane.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FastlaneSettings {
    #[serde(default)]
    pub enabled: bool,
    /// The public origin visitors use (`https://shop.example`), no path.
    #[serde(default)]
    pub origin: String,
    /// Accepted for compatibility and ignored: the gateway runs in-process.
    #[serde(default)]
    pub gateway_url: String,
    #[serde(default)]
    pub policy_url: String,
    #[serde(default)]
    pub test_mode: bool,
    #[serde(default = "default_pass_seconds")]
    pub pass_seconds: u64,
    #[serde(default = "default_nft_pass_seconds")]
    pub nft_pass_seconds: u64,
    #[serde(default = "default_max_records")]
    pub max_records: u64,
    #[serde(default)]
    pub merchant: String,
    #[serde(default)]
    pub terms_url: String,
    #[serde(default)]
    pub privacy_url: String,
    #[serde(default)]
    pub refund_url: String,
    #[serde(default)]
    pub offers: Vec<Offer>,
    #[serde(default)]
    pub collections: Vec<Collection>,
    #[serde(default)]
    pub listings: Vec<Listing>,
}

pub fn default_pass_seconds() -> u64 {
    300
}

pub fn default_nft_pass_seconds() -> u64 {
    30
}

pub fn default_max_records() -> u64 {
    100_000
}

/// One way to pay: a label for the page and the exact x402 terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offer {
    pub label: String,
    pub requirements: PaymentRequirements,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deposit_only: bool,
}

/// An NFT collection whose holders are admitted (see `service::nft` and each chain's `nft`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Collection {
    pub id: String,
    pub label: String,
    pub network: String,
    pub collection: String,
}

/// An item sold by deposit: the first transfer found for it buys it (see `service::deposit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listing {
    pub id: String,
    pub label: String,
    pub network: String,
    #[serde(default)]
    pub price: String,
}

/// `networks.json`: CAIP-2 network → how to reach it.
pub type NetworksSettings = BTreeMap<String, NetworkSettings>;

/// One network's endpoints and limits. Numbers may be written as JSON strings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSettings {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rpc: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub horizon: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mirror: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fee_payer: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret_env: String,
    /// Drops (XRPL) or stroops (Stellar); 0 = the chain's default cap.
    #[serde(default, deserialize_with = "number_or_numeric_text")]
    pub max_fee: u64,
    #[serde(default, deserialize_with = "number_or_numeric_text")]
    pub max_fee_tinybars: u64,
    /// Refused when set: websocket endpoints are not supported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ws: String,
}

/// A whole number written bare (`1000`) or quoted (`"1000"`), as the original's files allow.
/// Read through `Value` so the literal is seen as written: a negative or fractional fee is
/// refused with its text rather than silently wrapped or rounded.
fn number_or_numeric_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    use serde::de::Error;
    let value = serde_json::Value::deserialize(deserializer)?;
    let text = match &value {
        serde_json::Value::Number(number) => number.to_string(),
        serde_json::Value::String(text) => text.trim().to_string(),
        other => {
            return Err(D::Error::custom(format!(
                "expected a whole number of at least 0, got {other}"
            )));
        }
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(D::Error::custom(format!(
            "expected a whole number of at least 0, got {value}"
        )));
    }
    text.parse::<u64>()
        .map_err(|_| D::Error::custom(format!("{value} is too large")))
}
