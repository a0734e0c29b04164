//! The operator's path lists (bypass, assets, asset_public, stream_paths, ban_paths): parsing
//! them, and the checks that keep them from overlapping each other or the reserved routes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use super::normalize::normalize_request_path;
use super::reserved::{RESERVED_ROOTS, is_reserved_path, is_strictly_below, reserved_label};

/// One entry of a path list.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathRule {
    /// Matches this path only.
    Exact(String),
    /// Written `base/*`; matches paths strictly below `base` (`/static/x`, not `/static`).
    /// Holds `base` without the `/*`.
    Prefix(String),
}

impl PathRule {
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathRule::Exact(exact) => path == exact,
            PathRule::Prefix(base) => is_strictly_below(path, base),
        }
    }

    /// The exact path, or the base of a prefix rule.
    fn anchor(&self) -> &str {
        match self {
            PathRule::Exact(path) | PathRule::Prefix(path) => path,
        }
    }

    fn parse_entry(entry: &str) -> Result<PathRule, String> {
        if let Some(bad) = entry.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("entry {entry:?} contains {bad:?}"));
        }
        let rule = match entry.strip_suffix("/*") {
            Some("") => {
                return Err("\"/*\" would capture every path".to_string());
            }
            Some(base) if base.ends_with('/') => {
                return Err(format!("entry {entry:?} has an empty last segment"));
            }
            Some(base) => PathRule::Prefix(base.to_string()),
            None => PathRule::Exact(entry.to_string()),
        };
        // Requests are matched after normalisation, so a rule in any other form could never match.
        match normalize_request_path(rule.anchor()) {
            Ok(Cow::Borrowed(_)) => {}
            Ok(Cow::Owned(normal)) => {
                return Err(format!(
                    "entry {entry:?} is not a normalised path (did you mean {normal:?}?)"
                ));
            }
            Err(rejection) => return Err(format!("entry {entry:?}: {rejection}")),
        }
        if let Some(reserved) = reserved_conflict(&rule) {
            return Err(format!(
                "entry {entry:?} would capture the reserved path {reserved}"
            ));
        }
        Ok(rule)
    }
}

impl fmt::Display for PathRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathRule::Exact(path) => f.write_str(path),
            PathRule::Prefix(base) => write!(f, "{base}/*"),
        }
    }
}

/// The reserved path a rule would capture, if any.
fn reserved_conflict(rule: &PathRule) -> Option<&'static str> {
    let anchor = rule.anchor();
    if is_reserved_path(anchor) {
        return Some(reserved_label(anchor));
    }
    if let PathRule::Prefix(base) = rule {
        return RESERVED_ROOTS
            .into_iter()
            .find(|reserved| is_strictly_below(reserved, base));
    }
    None
}

/// Checks a single path Concert answers itself outside the reserved prefixes (the metrics path):
/// it must start with `/`, be normalised, and not sit on a reserved route, which already has
/// its own answer. A trailing `/` is trimmed, since both forms are answered.
pub(crate) fn parse_own_path(raw: &str) -> Result<String, String> {
    if !raw.starts_with('/') {
        return Err("must start with /".to_string());
    }
    if raw.len() > 1024 {
        return Err("must be at most 1024 bytes".to_string());
    }
    if let Some(bad) = raw.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("contains {bad:?}"));
    }
    if raw.contains(['?', '#', '*']) {
        return Err("must be a plain path (no ?, # or *)".to_string());
    }
    let trimmed = raw
        .strip_suffix('/')
        .filter(|p| !p.is_empty())
        .unwrap_or(raw);
    if trimmed == "/" {
        return Err("/ would capture the home page".to_string());
    }
    match normalize_request_path(trimmed) {
        Ok(Cow::Borrowed(_)) => {}
        Ok(Cow::Owned(normal)) => {
            return Err(format!(
                "is not a normalised path (did you mean {normal:?}?)"
            ));
        }
        Err(rejection) => return Err(rejection.to_string()),
    }
    if is_reserved_path(trimmed) {
        return Err(format!(
            "is the reserved path {}, which Concert answers already",
            reserved_label(trimmed)
        ));
    }
    Ok(trimmed.to_string())
}

/// A parsed path list; `as_str` is the canonical comma-joined form.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PathList {
    canonical: String,
    rules: Vec<PathRule>,
}

impl PathList {
    /// Parses a comma-separated list. Every layer (flag, environment, settings.json, the API)
    /// uses this one form: an entry not starting with `/` is an error, never dropped quietly,
    /// so a typo cannot switch a ban or bypass rule off unnoticed.
    pub fn parse_strict(raw: &str) -> Result<Self, String> {
        let mut rules: Vec<PathRule> = Vec::new();
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if !entry.starts_with('/') {
                return Err(format!("entry {entry:?} must start with /"));
            }
            let rule = PathRule::parse_entry(entry)?;
            if rules.contains(&rule) {
                return Err(format!("entry {entry:?} is listed twice"));
            }
            rules.push(rule);
        }
        let canonical = rules
            .iter()
            .map(PathRule::to_string)
            .collect::<Vec<_>>()
            .join(",");
        Ok(PathList { canonical, rules })
    }

    pub fn rules(&self) -> &[PathRule] {
        &self.rules
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn as_str(&self) -> &str {
        &self.canonical
    }
}

impl fmt::Debug for PathList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PathList").field(&self.canonical).finish()
    }
}

/// Proper ancestors of a normalised path, deepest first: `/a/b/c` → `/a/b`, `/a`.
pub(super) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.rmatch_indices('/')
        .filter(|(index, _)| *index > 0)
        .map(|(index, _)| &path[..index])
}

/// Cross-list checks. `route_lists` are lists that become routes and must not overlap
/// structurally; `ban_paths` only may not repeat a rule of another list. Names are the flags
/// used in messages.
pub(crate) fn check_path_lists(
    route_lists: &[(&str, &PathList)],
    ban_paths: Option<(&str, &PathList)>,
) -> Result<(), String> {
    let mut owner: HashMap<&PathRule, &str> = HashMap::new();
    for (name, list) in route_lists.iter().copied().chain(ban_paths) {
        for rule in list.rules() {
            // Lists are parsed already, but a rule may have been built elsewhere; recheck the
            // per-entry invariants that matter for routing.
            if let Some(reserved) = reserved_conflict(rule) {
                return Err(format!(
                    "{name} {rule} would capture the reserved path {reserved}"
                ));
            }
            if let Some(other) = owner.insert(rule, name)
                && other != name
            {
                return Err(format!(
                    "{rule} is in both {other} and {name}; a rule may be in only one list"
                ));
            }
        }
    }
    let mut prefix_owner: HashMap<&str, usize> = HashMap::new();
    for (index, (_, list)) in route_lists.iter().enumerate() {
        for rule in list.rules() {
            if let PathRule::Prefix(base) = rule {
                prefix_owner.insert(base, index);
            }
        }
    }
    for (index, (name, list)) in route_lists.iter().enumerate() {
        for rule in list.rules() {
            for ancestor in ancestors(rule.anchor()) {
                if let Some(&other) = prefix_owner.get(ancestor)
                    && other != index
                {
                    let other_name = route_lists[other].0;
                    return Err(format!(
                        "{name} {rule} overlaps {other_name} {ancestor}/*; rules in different lists must not overlap"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strict(raw: &str) -> PathList {
        PathList::parse_strict(raw).unwrap()
    }

    #[test]
    fn strict_lists_accept_the_check_list_examples() {
        for ok in ["", "/a", " /a , /b/* ", "/a,,/b,", "/x,/x/*"] {
            assert!(
                PathList::parse_strict(ok).is_ok(),
                "{ok:?} should be accepted"
            );
        }
        assert_eq!(strict(" /a , /b/* ").as_str(), "/a,/b/*");
    }

    #[test]
    fn strict_lists_reject_the_check_list_examples() {
        for bad in ["a", "/a,b", "/a,/a", " /a , /a ", "/a b"] {
            assert!(
                PathList::parse_strict(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn relative_entries_are_errors_not_dropped() {
        let error = PathList::parse_strict("/a, b").unwrap_err();
        assert!(error.contains("\"b\""), "{error}");
        assert!(PathList::parse_strict("a,/b").is_err());
        assert!(PathList::parse_strict("/a,/a").is_err());
        assert!(PathList::parse_strict("/a b").is_err());
    }

    #[test]
    fn prefix_rules_cover_paths_strictly_below() {
        let list = strict("/static/*");
        let rule = &list.rules()[0];
        assert_eq!(rule, &PathRule::Prefix("/static".into()));
        assert!(rule.matches("/static/x"));
        assert!(rule.matches("/static/"));
        assert!(!rule.matches("/static"));
        assert!(!rule.matches("/staticx/y"));
    }

    #[test]
    fn catch_all_and_reserved_entries_are_refused() {
        for bad in [
            "/*",
            "/queue/status",
            "/queue/*",
            "/_room",
            "/_room/*",
            "/_room/stats",
            "/_concert",
            "/_concert/x/*",
            "/_room/stats/*",
            "/queue/status/",
        ] {
            assert!(
                PathList::parse_strict(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        for ok in ["/queue", "/queue/other", "/_roomy", "/_concerts/*"] {
            assert!(
                PathList::parse_strict(ok).is_ok(),
                "{ok:?} should be accepted"
            );
        }
    }

    #[test]
    fn entries_must_already_be_normalised() {
        for bad in ["/a//b", "/a/../b", "/a/./b", "/a%2eb", "/x//*", "/a/..%2fb"] {
            assert!(
                PathList::parse_strict(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert!(PathList::parse_strict("/a/").is_ok());
    }

    fn check(lists: &[(&str, &str)], ban: Option<&str>) -> Result<(), String> {
        let parsed: Vec<(&str, PathList)> =
            lists.iter().map(|(n, raw)| (*n, strict(raw))).collect();
        let named: Vec<(&str, &PathList)> = parsed.iter().map(|(n, l)| (*n, l)).collect();
        let ban_list = ban.map(strict);
        check_path_lists(&named, ban_list.as_ref().map(|l| ("-ban-paths", l)))
    }

    #[test]
    fn identical_rules_in_two_lists_are_refused() {
        assert!(check(&[("-bypass", "/x"), ("-assets", "/x")], None).is_err());
        assert!(check(&[("-assets", "/x")], Some("/x")).is_err());
        assert!(check(&[("-bypass", "/ws"), ("-stream-paths", "/ws")], None).is_err());
        assert!(check(&[("-bypass", "/x/*"), ("-assets", "/x/*")], None).is_err());
    }

    #[test]
    fn overlapping_rules_across_route_lists_are_refused() {
        assert!(
            check(
                &[("-bypass", "/static/*"), ("-assets", "/static/app.js")],
                None
            )
            .is_err()
        );
        assert!(
            check(
                &[("-assets", "/static/app.js"), ("-bypass", "/static/*")],
                None
            )
            .is_err()
        );
        assert!(check(&[("-bypass", "/a/*"), ("-assets", "/a/b/*")], None).is_err());
        assert!(check(&[("-bypass", "/a/*"), ("-assets", "/a/")], None).is_err());
    }

    #[test]
    fn compatible_lists_pass() {
        assert!(check(&[("-bypass", "/static"), ("-assets", "/static/*")], None).is_ok());
        assert!(check(&[("-bypass", "/a/*,/a/b/*,/a/c")], None).is_ok());
        assert!(check(&[("-assets", "/api/*")], Some("/api/admin")).is_ok());
        assert!(check(&[("-bypass", "/x")], Some("/x/*")).is_ok());
    }

    #[test]
    fn rule_entries_with_escapes_must_be_written_normalised() {
        for bad in ["/.%65nv", "/a%2fb", "/%7e", "/50%off"] {
            let error = PathList::parse_strict(bad).unwrap_err();
            assert!(error.contains("did you mean"), "{bad:?}: {error}");
        }
        assert!(PathList::parse_strict("/a%2Fb").is_ok());
        assert!(PathList::parse_strict("/..;/x").is_err());
    }

    proptest! {
        #[test]
        fn list_parsing_never_panics(raw in "\\PC*") {
            let _ = PathList::parse_strict(&raw);
        }
    }
}
