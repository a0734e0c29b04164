//! The paths Concert answers itself, each defined once: no path list may claim them, and the
//! pipeline routes them before any list is consulted.

/// Operator routes (health, stats, metrics, the admin API); everything below is Concert's.
pub(crate) const ROOM_TREE: &str = "/_room";
/// The waiting page's own files and the fast lane; everything below is Concert's.
pub(crate) const CONCERT_TREE: &str = "/_concert";
/// The waiting page's status poll.
pub(crate) const QUEUE_STATUS: &str = "/queue/status";

pub(crate) const HEALTHZ: &str = "/_room/healthz";
pub(crate) const STATS: &str = "/_room/stats";
pub(crate) const METRICS: &str = "/_room/metrics";
pub(crate) const CAP: &str = "/_room/cap";
pub(crate) const ABUSE: &str = "/_room/abuse";
/// The waiting page's fast-lane configuration.
pub(crate) const CONCERT_CONFIG: &str = "/_concert/config";
pub(crate) const WAITING_SCRIPT: &str = "/_concert/waiting.js";
pub(crate) const WAITING_STYLESHEET: &str = "/_concert/waiting.css";

/// Roots reserved together with everything below them.
const RESERVED_TREES: [&str; 2] = [ROOM_TREE, CONCERT_TREE];

/// True when `path` starts with `base/`.
pub(crate) fn is_strictly_below(path: &str, base: &str) -> bool {
    path.strip_prefix(base)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `path` is `root` or lies below it, by whole segments (`/_roomy` is not under
/// `/_room`).
pub(crate) fn is_under(path: &str, root: &str) -> bool {
    path.strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `path` without one trailing slash, except for `/` itself: reserved routes answer both forms.
pub(crate) fn without_trailing_slash(path: &str) -> &str {
    path.strip_suffix('/')
        .filter(|p| !p.is_empty())
        .unwrap_or(path)
}

pub(crate) fn is_reserved_path(path: &str) -> bool {
    // Concert answers the status path with a trailing slash too, so a rule for it never matches.
    without_trailing_slash(path) == QUEUE_STATUS
        || RESERVED_TREES.iter().any(|root| is_under(path, root))
}

/// The reserved path or tree `path` belongs to (for messages).
pub(crate) fn reserved_label(path: &str) -> &'static str {
    RESERVED_TREES
        .into_iter()
        .find(|root| is_under(path, root))
        .unwrap_or(QUEUE_STATUS)
}

/// Every reserved path and tree root, for the checks that keep rules off them.
pub(crate) const RESERVED_ROOTS: [&str; 3] = [QUEUE_STATUS, ROOM_TREE, CONCERT_TREE];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_trees_match_whole_segments_only() {
        assert!(is_under("/_room", ROOM_TREE));
        assert!(is_under("/_room/stats/", ROOM_TREE));
        assert!(!is_under("/_roomy", ROOM_TREE));
        assert!(!is_under("/x/_room", ROOM_TREE));
    }

    #[test]
    fn every_named_route_lies_in_its_tree() {
        for route in [HEALTHZ, STATS, METRICS, CAP, ABUSE] {
            assert!(is_strictly_below(route, ROOM_TREE), "{route}");
        }
        for route in [CONCERT_CONFIG, WAITING_SCRIPT, WAITING_STYLESHEET] {
            assert!(is_strictly_below(route, CONCERT_TREE), "{route}");
        }
        assert!(is_reserved_path("/queue/status/"));
        assert!(!is_reserved_path("/queue"));
    }
}
