//! Stage 4: where a request goes. Reserved routes first (no path list can claim them), then the
//! operator's path lists, then the metrics path; everything else is gated.

use crate::app::Generation;
use crate::paths::matchers::RouteKind;
use crate::paths::reserved::{
    CONCERT_TREE, QUEUE_STATUS, ROOM_TREE, is_under, without_trailing_slash,
};

/// Where a request goes after the reserved prefixes and path lists are consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    Ops,
    ConcertFiles,
    QueueStatus,
    Bypass,
    Asset,
    AssetPublic,
    Stream,
    /// `-metrics-path` (`/metrics` by default), when no path list claims it.
    Metrics,
    Gated,
}

pub(super) fn classify(generation: &Generation, path: &str) -> Stage {
    if is_under(path, ROOM_TREE) {
        return Stage::Ops;
    }
    if is_under(path, CONCERT_TREE) {
        return Stage::ConcertFiles;
    }
    if without_trailing_slash(path) == QUEUE_STATUS {
        return Stage::QueueStatus;
    }
    match generation.routes.classify(path) {
        Some(RouteKind::Bypass) => Stage::Bypass,
        Some(RouteKind::Asset) => Stage::Asset,
        Some(RouteKind::AssetPublic) => Stage::AssetPublic,
        Some(RouteKind::Stream) => Stage::Stream,
        None if is_metrics_path(generation, path) => Stage::Metrics,
        None => Stage::Gated,
    }
}

/// The metrics path and its trailing-slash form. A path list that routes either form keeps
/// both: answering metrics at the other would split one path between Concert and the origin.
fn is_metrics_path(generation: &Generation, path: &str) -> bool {
    !generation.metrics_path_routed
        && generation
            .config
            .metrics_path
            .as_deref()
            .is_some_and(|own| without_trailing_slash(path) == own)
}
