//! What the XRPL mechanism asks of a ledger, as a trait so tests can answer from recorded
//! state, and its implementation over rippled's JSON-RPC.

use serde::Deserialize;
use serde_json::json;

use crate::fastlane::chains::rpc::{JsonRpcClient, RpcError};
use crate::fastlane::mechanism::{BoxFuture, ChainError};

/// `server_info` as far as it matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerState {
    /// The network the server follows; `None` when the server did not say.
    pub network_id: Option<u32>,
    /// Index of the newest validated ledger.
    pub validated_ledger: u32,
}

/// An account root in the validated ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountState {
    pub sequence: u32,
    /// Classic address of the regular key, if one is set.
    pub regular_key: Option<String>,
    pub flags: u32,
}

/// A transaction as the ledger knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionStatus {
    pub validated: bool,
    /// The engine result (`tesSUCCESS`, `tecUNFUNDED_PAYMENT`, …); empty if not yet applied.
    pub result: String,
    /// `delivered_amount` in drops when it is native; `None` when absent or issued.
    pub delivered_drops: Option<u64>,
}

/// The ledger calls verification, settlement and reconciliation make.
pub trait Ledger: Send + Sync + 'static {
    fn server_state(&self) -> BoxFuture<'_, Result<ServerState, ChainError>>;
    /// `Ok(None)` when the account does not exist in the validated ledger.
    fn account_state<'a>(
        &'a self,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Option<AccountState>, ChainError>>;
    fn ticket_exists<'a>(
        &'a self,
        address: &'a str,
        ticket: u32,
    ) -> BoxFuture<'a, Result<bool, ChainError>>;
    /// Dry-runs an unsigned transaction blob (upper hex); returns the engine result.
    fn simulate<'a>(&'a self, unsigned_blob: &'a str) -> BoxFuture<'a, Result<String, ChainError>>;
    /// Submits a signed blob with `fail_hard`; returns the preliminary engine result.
    fn submit<'a>(&'a self, signed_blob: &'a str) -> BoxFuture<'a, Result<String, ChainError>>;
    /// `Ok(None)` when the server does not know the transaction.
    fn transaction<'a>(
        &'a self,
        hash: &'a str,
    ) -> BoxFuture<'a, Result<Option<TransactionStatus>, ChainError>>;
}

/// rippled over JSON-RPC. Every read is of the validated ledger.
#[derive(Debug, Clone)]
pub struct RpcLedger {
    client: JsonRpcClient,
    /// Labels errors.
    network: String,
}

impl RpcLedger {
    pub fn new(network: &str, client: JsonRpcClient) -> RpcLedger {
        RpcLedger {
            client,
            network: network.to_owned(),
        }
    }

    /// Calls `method`; a call that gives no result is the network being unavailable.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<T, ChainError> {
        self.client
            .call(method, params)
            .await
            .map_err(|error: RpcError| ChainError::Unavailable {
                network: self.network.clone(),
                message: format!("{method}: {error}"),
            })
    }

    fn refused(&self, method: &str, error: &str, message: Option<&str>) -> ChainError {
        ChainError::Unavailable {
            network: self.network.clone(),
            message: format!(
                "{method}: {error}{}",
                message.map(|m| format!(" ({m})")).unwrap_or_default()
            ),
        }
    }
}

/// Fields rippled puts in every failed `result`.
#[derive(Debug, Default, Deserialize)]
struct Failure {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_message: Option<String>,
}

#[derive(Deserialize)]
struct ServerInfoResult {
    #[serde(flatten)]
    failure: Failure,
    info: Option<ServerInfo>,
}

#[derive(Deserialize)]
struct ServerInfo {
    #[serde(default)]
    network_id: Option<u32>,
    #[serde(default)]
    validated_ledger: Option<ValidatedLedger>,
}

#[derive(Deserialize)]
struct ValidatedLedger {
    seq: u32,
}

#[derive(Deserialize)]
struct AccountInfoResult {
    #[serde(flatten)]
    failure: Failure,
    account_data: Option<AccountData>,
    #[serde(default)]
    validated: bool,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct AccountData {
    Sequence: u32,
    #[serde(default)]
    RegularKey: Option<String>,
    #[serde(default)]
    Flags: u32,
}

#[derive(Deserialize)]
struct LedgerEntryResult {
    #[serde(flatten)]
    failure: Failure,
    #[serde(default)]
    node: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Deserialize)]
struct EngineResult {
    #[serde(flatten)]
    failure: Failure,
    #[serde(default)]
    engine_result: Option<String>,
}

#[derive(Deserialize)]
struct TxResult {
    #[serde(flatten)]
    failure: Failure,
    #[serde(default)]
    validated: bool,
    #[serde(default)]
    meta: Option<TxMeta>,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct TxMeta {
    #[serde(default)]
    TransactionResult: Option<String>,
    #[serde(default)]
    delivered_amount: Option<serde_json::Value>,
}

impl Ledger for RpcLedger {
    fn server_state(&self) -> BoxFuture<'_, Result<ServerState, ChainError>> {
        Box::pin(async move {
            let answer: ServerInfoResult = self.call("server_info", json!([{}])).await?;
            if let Some(error) = &answer.failure.error {
                return Err(self.refused(
                    "server_info",
                    error,
                    answer.failure.error_message.as_deref(),
                ));
            }
            let info = answer
                .info
                .ok_or_else(|| self.refused("server_info", "no info", None))?;
            let validated = info
                .validated_ledger
                .ok_or_else(|| self.refused("server_info", "no validated ledger yet", None))?;
            Ok(ServerState {
                network_id: info.network_id,
                validated_ledger: validated.seq,
            })
        })
    }

    fn account_state<'a>(
        &'a self,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Option<AccountState>, ChainError>> {
        Box::pin(async move {
            let params = json!([{"account": address, "ledger_index": "validated", "strict": true}]);
            let answer: AccountInfoResult = self.call("account_info", params).await?;
            match answer.failure.error.as_deref() {
                Some("actNotFound") => return Ok(None),
                Some(error) => {
                    return Err(self.refused(
                        "account_info",
                        error,
                        answer.failure.error_message.as_deref(),
                    ));
                }
                None => {}
            }
            if !answer.validated {
                return Err(self.refused(
                    "account_info",
                    "answer is not from a validated ledger",
                    None,
                ));
            }
            let data = answer
                .account_data
                .ok_or_else(|| self.refused("account_info", "no account_data", None))?;
            Ok(Some(AccountState {
                sequence: data.Sequence,
                regular_key: data.RegularKey,
                flags: data.Flags,
            }))
        })
    }

    fn ticket_exists<'a>(
        &'a self,
        address: &'a str,
        ticket: u32,
    ) -> BoxFuture<'a, Result<bool, ChainError>> {
        Box::pin(async move {
            let params = json!([{
                "ticket": {"account": address, "ticket_seq": ticket},
                "ledger_index": "validated",
            }]);
            let answer: LedgerEntryResult = self.call("ledger_entry", params).await?;
            match answer.failure.error.as_deref() {
                Some("entryNotFound") => Ok(false),
                Some(error) => Err(self.refused(
                    "ledger_entry",
                    error,
                    answer.failure.error_message.as_deref(),
                )),
                None => Ok(answer.node.is_some_and(|node| {
                    node.get("LedgerEntryType").and_then(|v| v.as_str()) == Some("Ticket")
                })),
            }
        })
    }

    fn simulate<'a>(&'a self, unsigned_blob: &'a str) -> BoxFuture<'a, Result<String, ChainError>> {
        Box::pin(async move {
            let answer: EngineResult = self
                .call("simulate", json!([{"tx_blob": unsigned_blob}]))
                .await?;
            if let Some(error) = &answer.failure.error {
                return Err(self.refused(
                    "simulate",
                    error,
                    answer.failure.error_message.as_deref(),
                ));
            }
            answer
                .engine_result
                .ok_or_else(|| self.refused("simulate", "no engine_result", None))
        })
    }

    fn submit<'a>(&'a self, signed_blob: &'a str) -> BoxFuture<'a, Result<String, ChainError>> {
        Box::pin(async move {
            let params = json!([{"tx_blob": signed_blob, "fail_hard": true}]);
            let answer: EngineResult = self.call("submit", params).await?;
            if let Some(error) = &answer.failure.error {
                return Err(self.refused("submit", error, answer.failure.error_message.as_deref()));
            }
            answer
                .engine_result
                .ok_or_else(|| self.refused("submit", "no engine_result", None))
        })
    }

    fn transaction<'a>(
        &'a self,
        hash: &'a str,
    ) -> BoxFuture<'a, Result<Option<TransactionStatus>, ChainError>> {
        Box::pin(async move {
            let answer: TxResult = self
                .call("tx", json!([{"transaction": hash, "binary": false}]))
                .await?;
            match answer.failure.error.as_deref() {
                Some("txnNotFound") => return Ok(None),
                Some(error) => {
                    return Err(self.refused("tx", error, answer.failure.error_message.as_deref()));
                }
                None => {}
            }
            let meta = answer.meta;
            let result = meta
                .as_ref()
                .and_then(|m| m.TransactionResult.clone())
                .unwrap_or_default();
            // Native deliveries are a decimal string of drops; anything else is not XRP.
            let delivered_drops = meta
                .as_ref()
                .and_then(|m| m.delivered_amount.as_ref())
                .and_then(|v| v.as_str())
                .and_then(parse_drops);
            Ok(Some(TransactionStatus {
                validated: answer.validated,
                result,
                delivered_drops,
            }))
        })
    }
}

/// A canonical decimal drops amount (no sign, no leading zeros, fits u64).
pub fn parse_drops(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}
