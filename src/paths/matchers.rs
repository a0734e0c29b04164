//! The path lists compiled for the request path: the route table (bypass, assets, public
//! assets, streams), the ban-path matcher, and plain path sets (unbuffered uploads).
//!
//! Matching cost depends only on the depth of the request path: exact rules sit in a hash map and
//! prefix rules are found by probing each `/`-ancestor of the path.

use std::collections::HashMap;

use super::rules::{PathList, PathRule, ancestors, check_path_lists};

/// Which registered route list a request path belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteKind {
    Bypass,
    Asset,
    AssetPublic,
    Stream,
}

/// Exact-plus-prefix lookup shared by the route table and the ban-path matcher.
#[derive(Clone, Debug)]
struct RuleIndex<V> {
    exact: HashMap<Box<str>, V>,
    prefixes: HashMap<Box<str>, V>,
}

impl<V: Copy> RuleIndex<V> {
    fn new() -> Self {
        RuleIndex {
            exact: HashMap::new(),
            prefixes: HashMap::new(),
        }
    }

    fn insert(&mut self, rule: &PathRule, value: V) {
        match rule {
            PathRule::Exact(path) => self.exact.insert(path.as_str().into(), value),
            PathRule::Prefix(base) => self.prefixes.insert(base.as_str().into(), value),
        };
    }

    fn lookup(&self, path: &str) -> Option<V> {
        if let Some(value) = self.exact.get(path) {
            return Some(*value);
        }
        if self.prefixes.is_empty() {
            return None;
        }
        ancestors(path).find_map(|ancestor| self.prefixes.get(ancestor).copied())
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }
}

/// Compiled route lists. Paths given to `classify` must be normalised first.
#[derive(Clone, Debug)]
pub struct RouteTable {
    index: RuleIndex<RouteKind>,
}

impl RouteTable {
    pub fn build(
        bypass: &PathList,
        assets: &PathList,
        asset_public: &PathList,
        stream_paths: &PathList,
    ) -> Result<RouteTable, String> {
        let lists = [
            ("-bypass", bypass, RouteKind::Bypass),
            ("-assets", assets, RouteKind::Asset),
            ("-asset-public", asset_public, RouteKind::AssetPublic),
            ("-stream-paths", stream_paths, RouteKind::Stream),
        ];
        let named: Vec<(&str, &PathList)> =
            lists.iter().map(|(name, list, _)| (*name, *list)).collect();
        check_path_lists(&named, None)?;
        let mut index = RuleIndex::new();
        for (_, list, kind) in lists {
            for rule in list.rules() {
                index.insert(rule, kind);
            }
        }
        Ok(RouteTable { index })
    }

    pub fn classify(&self, path: &str) -> Option<RouteKind> {
        self.index.lookup(path)
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// Compiled ban paths. Paths given to `matches` must be normalised first.
#[derive(Clone, Debug)]
pub struct BanPathMatcher {
    index: RuleIndex<()>,
}

impl BanPathMatcher {
    pub fn new(ban_paths: &PathList) -> BanPathMatcher {
        let mut index = RuleIndex::new();
        for rule in ban_paths.rules() {
            index.insert(rule, ());
        }
        BanPathMatcher { index }
    }

    /// Servlet containers (Tomcat, Jetty) drop each segment's `;parameters` before finding the
    /// file, so `/.env;x` and `/.git;x/config` reach what `/.env` and `/.git/config` would.
    /// A ban path is a trap for scanners, so it also catches those forms. Route rules do not
    /// need this: a path that misses them is gated, which is only stricter.
    pub fn matches(&self, path: &str) -> bool {
        if self.index.lookup(path).is_some() {
            return true;
        }
        path.contains(';') && self.index.lookup(&without_parameters(path)).is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// A compiled path list that only answers whether it holds a path. Paths given to `contains`
/// must be normalised first.
#[derive(Clone, Debug)]
pub(crate) struct PathSet {
    index: RuleIndex<()>,
}

impl PathSet {
    pub(crate) fn new(list: &PathList) -> PathSet {
        let mut index = RuleIndex::new();
        for rule in list.rules() {
            index.insert(rule, ());
        }
        PathSet { index }
    }

    pub(crate) fn contains(&self, path: &str) -> bool {
        !self.index.is_empty() && self.index.lookup(path).is_some()
    }
}

/// `path` with each segment's `;parameters` removed; a segment that was only parameters goes
/// too, so `/.env/;x` reads `/.env`.
fn without_parameters(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for segment in path.split('/').skip(1) {
        match segment.split_once(';') {
            Some(("", _)) => {}
            Some((name, _)) => {
                out.push('/');
                out.push_str(name);
            }
            None => {
                out.push('/');
                out.push_str(segment);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(raw: &str) -> PathList {
        PathList::parse_strict(raw).unwrap()
    }

    use proptest::prelude::*;

    #[test]
    fn route_table_classifies_exact_and_prefix_rules() {
        let table = RouteTable::build(
            &strict("/favicon.ico,/webhooks/*"),
            &strict("/static/*,/app.js"),
            &strict("/public/*"),
            &strict("/sse,/ws/*"),
        )
        .unwrap();
        assert_eq!(table.classify("/favicon.ico"), Some(RouteKind::Bypass));
        assert_eq!(
            table.classify("/webhooks/paypal/ipn"),
            Some(RouteKind::Bypass)
        );
        assert_eq!(table.classify("/webhooks"), None);
        assert_eq!(table.classify("/static/css/a.css"), Some(RouteKind::Asset));
        assert_eq!(table.classify("/app.js"), Some(RouteKind::Asset));
        assert_eq!(
            table.classify("/public/logo.png"),
            Some(RouteKind::AssetPublic)
        );
        assert_eq!(table.classify("/sse"), Some(RouteKind::Stream));
        assert_eq!(table.classify("/ws/chat"), Some(RouteKind::Stream));
        assert_eq!(table.classify("/gated"), None);
        assert_eq!(table.classify("/"), None);
    }

    #[test]
    fn route_table_refuses_structural_conflicts() {
        let empty = PathList::default();
        assert!(
            RouteTable::build(
                &strict("/static/*"),
                &strict("/static/app.js"),
                &empty,
                &empty
            )
            .is_err()
        );
        assert!(RouteTable::build(&empty, &empty, &strict("/x"), &strict("/x")).is_err());
    }

    #[test]
    fn ban_matcher_matches_exact_and_prefix_rules() {
        let matcher = BanPathMatcher::new(&strict("/.env,/.git/*"));
        assert!(matcher.matches("/.env"));
        assert!(matcher.matches("/.git/config"));
        assert!(!matcher.matches("/.git"));
        assert!(!matcher.matches("/.envx"));
        assert!(!BanPathMatcher::new(&PathList::default()).matches("/.env"));
    }

    #[test]
    fn ban_paths_see_through_segment_parameters() {
        let matcher = BanPathMatcher::new(&strict("/.env,/.git/*"));
        for caught in [
            "/.env;x",
            "/.env;",
            "/.git;v=1/config",
            "/.git/config;x",
            "/.env/;x",
        ] {
            assert!(matcher.matches(caught), "{caught:?}");
        }
        for missed in ["/.envx;y", "/x;/.env", "/.git;x", "/;x"] {
            assert!(!matcher.matches(missed), "{missed:?}");
        }
    }

    #[test]
    fn path_sets_hold_exact_and_prefix_rules() {
        let set = PathSet::new(&strict("/upload,/media/*"));
        assert!(set.contains("/upload"));
        assert!(set.contains("/media/big.mp4"));
        assert!(!set.contains("/media"));
        assert!(!set.contains("/upload/x"));
        assert!(!PathSet::new(&PathList::default()).contains("/upload"));
    }

    proptest! {
        #[test]
        fn route_lookup_agrees_with_rule_matching(
            rules in proptest::collection::vec("/[ab]{1,2}(/[ab]{1,2}){0,2}(/\\*)?", 0..6),
            path in "/[ab]{1,2}(/[ab]{1,2}){0,3}/?",
        ) {
            if let Ok(list) = PathList::parse_strict(&rules.join(",")) {
                let matcher = BanPathMatcher::new(&list);
                let expected = list.rules().iter().any(|rule| rule.matches(&path));
                prop_assert_eq!(matcher.matches(&path), expected);
            }
        }
    }
}
