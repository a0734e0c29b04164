//! The note of each request taken once its answer is known: in the traffic figures, and in
//! the request history.

use std::sync::atomic::Ordering;

use http::{Method, StatusCode};
use tokio::time::Instant;

use super::request::RequestInfo;
use super::routes::Stage;
use crate::app::App;
use crate::history::{Arrival, Seen};
use crate::paths::reserved::{HEALTHZ, without_trailing_slash};

/// Successful answers not worth keeping: asset files, status polls, health checks. Refused
/// ones still are.
fn quiet(stage: Option<Stage>, path: &str) -> bool {
    matches!(
        stage,
        Some(Stage::Asset | Stage::AssetPublic | Stage::QueueStatus)
    ) || without_trailing_slash(path) == HEALTHZ
}

/// `stage` is `None` for a request answered with a ban before routing.
pub(super) fn record(
    app: &App,
    info: &RequestInfo,
    arrival: Arrival,
    method: &Method,
    status: StatusCode,
    started: Instant,
    stage: Option<Stage>,
) {
    let latency = started.elapsed();
    app.traffic.answered(
        status.as_u16(),
        latency,
        info.proxied.load(Ordering::Relaxed),
    );
    let Some(client) = info.client else { return };
    app.history.record(
        arrival,
        Seen {
            client,
            method,
            target: &info.target,
            path_len: info.path_len,
            status: status.as_u16(),
            latency,
            banned: stage.is_none(),
            quiet: quiet(stage, info.path()),
            rank: info.rank.load(Ordering::Relaxed),
        },
    );
}
