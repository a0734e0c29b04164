//! The access log: one line per request a person would look for (pages, bypassed paths,
//! streams, operator calls), none for the polls, files and probes that would drown them.

use http::{Method, StatusCode, Version};
use tokio::time::Instant;

use super::request::RequestInfo;
use super::routes::Stage;
use crate::paths::reserved::{HEALTHZ, without_trailing_slash};

pub(super) fn logs(stage: Stage, path: &str) -> bool {
    !matches!(
        stage,
        Stage::QueueStatus
            | Stage::ConcertFiles
            | Stage::Asset
            | Stage::AssetPublic
            | Stage::Metrics
    ) && without_trailing_slash(path) != HEALTHZ
}

/// One line: status, latency, client, how the request came (`https` or `http`, and the HTTP
/// version), method and target.
pub(super) fn log(
    info: &RequestInfo,
    method: &Method,
    version: Version,
    status: StatusCode,
    started: Instant,
) {
    let client = info.client.map(|ip| ip.to_string()).unwrap_or_default();
    tracing::info!(
        target: "concert::access",
        status = status.as_u16(),
        latency_us = started.elapsed().as_micros() as u64,
        client = %client,
        scheme = %if info.conn.tls { "https" } else { "http" },
        version = ?version,
        method = %method,
        path = %info.target,
    );
}
