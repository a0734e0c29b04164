//! The x402 v2 wire types. JSON names are normative; amounts are atomic units as decimal
//! strings. The three headers (`PAYMENT-REQUIRED`, `PAYMENT-SIGNATURE`, `PAYMENT-RESPONSE`)
//! carry standard base64 of the JSON; the v1 `X-PAYMENT` header is never read or written.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The only protocol version spoken.
pub const X402_VERSION: u32 = 2;

pub const PAYMENT_REQUIRED: &str = "payment-required";
pub const PAYMENT_SIGNATURE: &str = "payment-signature";
pub const PAYMENT_RESPONSE: &str = "payment-response";

/// What a payment must be: one offer of `fastlane.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentRequirements {
    pub scheme: String,
    pub network: String,
    /// Atomic units, decimal.
    pub amount: String,
    pub asset: String,
    #[serde(rename = "payTo")]
    pub pay_to: String,
    #[serde(rename = "maxTimeoutSeconds")]
    pub max_timeout_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// The thing being paid for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceInfo {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// The body of a 402 answer and of `PAYMENT-REQUIRED`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentRequired {
    #[serde(rename = "x402Version")]
    pub x402_version: u32,
    pub resource: ResourceInfo,
    pub accepts: Vec<PaymentRequirements>,
    /// Why a payment was asked for again (a quote that ended, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the client sends in `PAYMENT-SIGNATURE`: the terms it accepted and the
/// mechanism-specific signed payment (`payload`, a JSON object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentPayload {
    #[serde(rename = "x402Version")]
    pub x402_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    pub accepted: PaymentRequirements,
    pub payload: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
}

/// The body of the gateway's `/verify` and `/settle`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FacilitatorRequest {
    #[serde(rename = "x402Version")]
    pub x402_version: u32,
    #[serde(rename = "paymentPayload")]
    pub payment_payload: PaymentPayload,
    #[serde(rename = "paymentRequirements")]
    pub payment_requirements: PaymentRequirements,
}

/// The verdict of `/verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyResponse {
    #[serde(rename = "isValid")]
    pub is_valid: bool,
    #[serde(
        rename = "invalidReason",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub invalid_reason: Option<String>,
    #[serde(
        rename = "invalidMessage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub invalid_message: Option<String>,
    pub payer: String,
}

impl VerifyResponse {
    pub fn valid(payer: impl Into<String>) -> VerifyResponse {
        VerifyResponse {
            is_valid: true,
            invalid_reason: None,
            invalid_message: None,
            payer: payer.into(),
        }
    }

    pub fn invalid(reason: impl Into<String>, payer: impl Into<String>) -> VerifyResponse {
        VerifyResponse {
            is_valid: false,
            invalid_reason: Some(reason.into()),
            invalid_message: None,
            payer: payer.into(),
        }
    }
}

/// The result of `/settle`, also the JSON of `PAYMENT-RESPONSE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleResponse {
    pub success: bool,
    #[serde(
        rename = "errorReason",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub error_reason: Option<String>,
    pub transaction: String,
    pub network: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// One `(version, scheme, network)` the gateway can handle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupportedKind {
    #[serde(rename = "x402Version")]
    pub x402_version: u32,
    pub scheme: String,
    pub network: String,
}
