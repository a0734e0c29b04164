//! A consensus node's gRPC interface (`proto.CryptoService`), as settlement uses it: submit a
//! signed transaction, then ask for its receipt. Nodes serve plaintext gRPC on port 50211, so
//! the channel has no TLS; every call is bounded.

use std::time::Duration;

use http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use super::proto::{
    Query, QueryHeader, Response, Transaction, TransactionGetReceiptQuery, TransactionId,
    TransactionResponse,
};

/// The only port consensus nodes serve plaintext gRPC on.
pub const NODE_GRPC_PORT: u16 = 50211;
const SUBMIT_PATH: &str = "/proto.CryptoService/submitTransaction";
const RECEIPT_PATH: &str = "/proto.CryptoService/getTransactionReceipts";

/// Why a node call gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("node address {0:?} is unusable")]
    Address(String),
    #[error("connect: {0}")]
    Connect(String),
    #[error("gRPC: {0}")]
    Status(String),
}

/// One consensus node's channel.
#[derive(Clone, Debug)]
pub struct NodeClient {
    address: String,
    channel: Channel,
}

impl NodeClient {
    /// Connects to `host:port` over plaintext HTTP/2, each call bounded to `timeout`.
    pub async fn connect(address: &str, timeout: Duration) -> Result<NodeClient, NodeError> {
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|_| NodeError::Address(address.to_owned()))?
            .connect_timeout(timeout)
            .timeout(timeout);
        let channel = tokio::time::timeout(timeout, endpoint.connect())
            .await
            .map_err(|_| NodeError::Connect("timed out".to_owned()))?
            .map_err(|error| NodeError::Connect(error.to_string()))?;
        Ok(NodeClient {
            address: address.to_owned(),
            channel,
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// `submitTransaction`: the node's precheck code (`OK` = taken for consensus).
    pub async fn submit(&self, transaction: Transaction) -> Result<i32, NodeError> {
        let answer: TransactionResponse = self.unary(transaction, SUBMIT_PATH).await?;
        Ok(answer.node_transaction_precheck_code)
    }

    /// `getTransactionReceipts`: `(precheck code, receipt status)`; the status is absent when
    /// the node answered without a receipt.
    pub async fn receipt(&self, id: &TransactionId) -> Result<(i32, Option<i32>), NodeError> {
        let query = Query {
            transaction_get_receipt: Some(TransactionGetReceiptQuery {
                header: Some(QueryHeader { response_type: 0 }),
                transaction_id: Some(id.clone()),
            }),
        };
        let answer: Response = self.unary(query, RECEIPT_PATH).await?;
        let answer = answer.transaction_get_receipt.unwrap_or_default();
        let precheck = answer
            .header
            .map(|header| header.node_transaction_precheck_code)
            .unwrap_or_default();
        Ok((precheck, answer.receipt.map(|receipt| receipt.status)))
    }

    async fn unary<Q, A>(&self, request: Q, path: &'static str) -> Result<A, NodeError>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|error| NodeError::Connect(error.to_string()))?;
        let codec = tonic_prost::ProstCodec::<Q, A>::default();
        let answer = grpc
            .unary(
                tonic::Request::new(request),
                PathAndQuery::from_static(path),
                codec,
            )
            .await
            .map_err(|status| NodeError::Status(status.to_string()))?;
        Ok(answer.into_inner())
    }
}
