//! Path rules: the five path lists (bypass, assets, asset_public, stream_paths, ban_paths), the
//! checks that keep them from overlapping each other or the reserved routes, the compiled
//! matchers used on every request, and request-path normalisation.
//!
//! Matching cost depends only on the depth of the request path: exact rules sit in a hash map and
//! prefix rules are found by probing each `/`-ancestor of the path.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// Paths the waiting room answers itself; no list may claim them.
const RESERVED_EXACT: &str = "/queue/status";
/// Roots reserved together with everything below them.
const RESERVED_TREES: [&str; 2] = ["/_room", "/_concert"];

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

/// True when `path` starts with `base/`.
fn is_strictly_below(path: &str, base: &str) -> bool {
    path.strip_prefix(base)
        .is_some_and(|rest| rest.starts_with('/'))
}

fn is_reserved_path(path: &str) -> bool {
    // Concert answers the status path with a trailing slash too, so a rule for it never matches.
    path.strip_suffix('/').unwrap_or(path) == RESERVED_EXACT
        || RESERVED_TREES
            .iter()
            .any(|root| path == *root || is_strictly_below(path, root))
}

/// The reserved path a rule would capture, if any.
fn reserved_conflict(rule: &PathRule) -> Option<&'static str> {
    let anchor = rule.anchor();
    if is_reserved_path(anchor) {
        return Some(reserved_label(anchor));
    }
    if let PathRule::Prefix(base) = rule {
        return [RESERVED_EXACT, RESERVED_TREES[0], RESERVED_TREES[1]]
            .into_iter()
            .find(|reserved| is_strictly_below(reserved, base));
    }
    None
}

fn reserved_label(path: &str) -> &'static str {
    RESERVED_TREES
        .into_iter()
        .find(|root| path == *root || is_strictly_below(path, root))
        .unwrap_or(RESERVED_EXACT)
}

/// Checks a single path Concert answers itself outside the reserved prefixes (the metrics path):
/// it must start with `/`, be normalised, and not sit on a reserved route, which already has
/// its own answer. A trailing `/` is trimmed, since both forms are answered.
pub fn parse_own_path(raw: &str) -> Result<String, String> {
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
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.rmatch_indices('/')
        .filter(|(index, _)| *index > 0)
        .map(|(index, _)| &path[..index])
}

/// Cross-list checks (02 §3). `route_lists` are lists that become routes and must not overlap
/// structurally; `ban_paths` only may not repeat a rule of another list. Names are the flags
/// used in messages.
pub fn check_path_lists(
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

/// Why a request path cannot be normalised; the caller answers 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathRejection {
    #[error("the path does not start with /")]
    NotAbsolute,
    #[error("a dot segment is hidden behind an encoded slash or a backslash")]
    HiddenDotSegment,
    #[error("a dot segment carries ;parameters")]
    DotSegmentWithParameters,
}

/// Normalises a request path before rules are matched; the origin receives the result.
///
/// Repeated slashes collapse; percent-encoded unreserved characters (RFC 3986 §2.3: letters,
/// digits, `-`, `.`, `_`, `~`) are decoded, since origins read `/.%65nv` as `/.env`; other escapes
/// keep their meaning but get upper-case hex, and a `%` that starts no escape becomes `%25`, so
/// decoding never forms a new escape (`%2%65` must not turn into `%2e`). Then `.`/`..` segments
/// resolve (never above the root; a trailing dot segment leaves a trailing slash, as in RFC
/// 3986). Refused: a segment that hides a dot segment behind `%2f`, `%5c` or `\` (origins
/// disagree on whether those separate segments, so no answer is safe), and a dot segment with
/// `;parameters` (`..;`), which servlet containers resolve as `..` after dropping the
/// parameters. Unchanged paths are borrowed.
pub fn normalize_request_path(path: &str) -> Result<Cow<'_, str>, PathRejection> {
    let body = path.strip_prefix('/').ok_or(PathRejection::NotAbsolute)?;
    let mut unchanged = true;
    let mut segments = body.split('/').peekable();
    while let Some(segment) = segments.next() {
        let is_last = segments.peek().is_none();
        let bytes = segment.as_bytes();
        let Some(&first) = bytes.first() else {
            unchanged &= is_last;
            continue;
        };
        if matches!(first, b'.' | b'%') && is_dot_segment_with_parameters(bytes) {
            return Err(PathRejection::DotSegmentWithParameters);
        }
        if segment.contains(['%', '\\']) {
            if hides_dot_segment(bytes) {
                return Err(PathRejection::HiddenDotSegment);
            }
            unchanged &= !needs_escape_rewrite(bytes);
        }
        unchanged &= segment != "." && segment != "..";
    }
    if unchanged {
        return Ok(Cow::Borrowed(path));
    }
    let mut normal = String::with_capacity(path.len());
    let mut trailing_slash = false;
    let mut segments = body.split('/').peekable();
    while let Some(segment) = segments.next() {
        let is_last = segments.peek().is_none();
        let segment = canonical_escapes(segment);
        trailing_slash = false;
        match segment.as_ref() {
            "" | "." => trailing_slash = is_last,
            ".." => {
                let parent_end = normal.rfind('/').unwrap_or(0);
                normal.truncate(parent_end);
                trailing_slash = is_last;
            }
            name => {
                normal.push('/');
                normal.push_str(name);
            }
        }
    }
    if normal.is_empty() || trailing_slash {
        normal.push('/');
    }
    Ok(Cow::Owned(normal))
}

/// Length of an encoded separator (`%2f`, `%5c`, any case) or backslash at the start of `bytes`.
fn separator_len(bytes: &[u8]) -> Option<usize> {
    match bytes {
        [b'\\', ..] => Some(1),
        [b'%', b'2', b'f' | b'F', ..] | [b'%', b'5', b'c' | b'C', ..] => Some(3),
        _ => None,
    }
}

fn is_encoded_dot(bytes: &[u8]) -> bool {
    matches!(bytes, [b'%', b'2', b'e' | b'E', ..])
}

/// `;` or its escape: where a segment's parameters start for origins that honour them.
fn starts_parameters(bytes: &[u8]) -> bool {
    matches!(bytes, [b';', ..] | [b'%', b'3', b'b' | b'B', ..])
}

/// How many dots (`.` or `%2e`) `bytes` starts with, and where the rest begins.
fn leading_dots(bytes: &[u8]) -> (usize, usize) {
    let (mut dots, mut at) = (0, 0);
    loop {
        let rest = &bytes[at..];
        if rest.first() == Some(&b'.') {
            at += 1;
        } else if is_encoded_dot(rest) {
            at += 3;
        } else {
            return (dots, at);
        }
        dots += 1;
    }
}

/// True for `.;…` and `..;…`, dots and `;` in any encoding.
fn is_dot_segment_with_parameters(segment: &[u8]) -> bool {
    let (dots, end) = leading_dots(segment);
    (dots == 1 || dots == 2) && starts_parameters(&segment[end..])
}

/// True when `piece`, once `%2e` is decoded, is `.` or `..`, with or without `;parameters`.
fn is_dot_piece(piece: &[u8]) -> bool {
    let (dots, end) = leading_dots(piece);
    (dots == 1 || dots == 2) && (end == piece.len() || starts_parameters(&piece[end..]))
}

/// True when splitting `segment` at encoded slashes or backslashes yields a dot segment.
/// Runs on every request path with a `%` in it, so it walks the bytes without allocating.
fn hides_dot_segment(bytes: &[u8]) -> bool {
    let mut piece_start = 0;
    let mut saw_separator = false;
    let mut i = 0;
    while i < bytes.len() {
        match separator_len(&bytes[i..]) {
            Some(len) => {
                if is_dot_piece(&bytes[piece_start..i]) {
                    return true;
                }
                saw_separator = true;
                i += len;
                piece_start = i;
            }
            None => i += 1,
        }
    }
    saw_separator && is_dot_piece(&bytes[piece_start..])
}

/// How a `%` at the start of `bytes` is written in a normalised path.
enum Escape {
    /// An escaped unreserved character: written as the character.
    Decoded(u8),
    /// Any other escape: kept, hex in upper case.
    Kept(u8),
    /// Not followed by two hex digits: the `%` itself, written `%25`.
    Stray,
}

fn read_escape(bytes: &[u8]) -> Escape {
    let [b'%', high, low, ..] = bytes else {
        return Escape::Stray;
    };
    let (Some(high), Some(low)) = (hex_value(*high), hex_value(*low)) else {
        return Escape::Stray;
    };
    let byte = high << 4 | low;
    if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
        Escape::Decoded(byte)
    } else {
        Escape::Kept(byte)
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// True when some `%` in `segment` is not already in its normalised form.
fn needs_escape_rewrite(segment: &[u8]) -> bool {
    let mut i = 0;
    while i < segment.len() {
        if segment[i] != b'%' {
            i += 1;
            continue;
        }
        match read_escape(&segment[i..]) {
            Escape::Kept(_) if !segment[i + 1..i + 3].iter().any(u8::is_ascii_lowercase) => {
                i += 3;
            }
            _ => return true,
        }
    }
    false
}

const UPPER_HEX: &[u8; 16] = b"0123456789ABCDEF";

/// `segment` with every escape in its normalised form (see [`normalize_request_path`]).
fn canonical_escapes(segment: &str) -> Cow<'_, str> {
    if !needs_escape_rewrite(segment.as_bytes()) {
        return Cow::Borrowed(segment);
    }
    let mut out = String::with_capacity(segment.len() + 2);
    let mut rest = segment;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = &rest.as_bytes()[at..];
        let used = match read_escape(escape) {
            Escape::Decoded(byte) => {
                out.push(char::from(byte));
                3
            }
            Escape::Kept(byte) => {
                out.push('%');
                out.push(char::from(UPPER_HEX[usize::from(byte >> 4)]));
                out.push(char::from(UPPER_HEX[usize::from(byte & 0xF)]));
                3
            }
            Escape::Stray => {
                out.push_str("%25");
                1
            }
        };
        rest = &rest[at + used..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strict(raw: &str) -> PathList {
        PathList::parse_strict(raw).unwrap()
    }

    fn normal(path: &str) -> Result<String, PathRejection> {
        normalize_request_path(path).map(Cow::into_owned)
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
    fn clean_paths_are_borrowed() {
        for path in [
            "/",
            "/a",
            "/a/b/",
            "/a.b/c..d/...",
            "/%C3%A9/%2F/x",
            "/a\\b",
            "/a;b/c;d=1",
        ] {
            assert!(matches!(normalize_request_path(path), Ok(Cow::Borrowed(p)) if p == path));
        }
    }

    #[test]
    fn normalises_dots_and_slashes() {
        let cases = [
            ("//", "/"),
            ("/a//b", "/a/b"),
            ("/a/./b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/..", "/"),
            ("/../../x", "/x"),
            ("/webhooks/../admin", "/admin"),
            ("/assets/%2e%2e/x", "/x"),
            ("/assets/%2E./x", "/x"),
            ("/file%2ejs", "/file.js"),
            ("/a/%2e/b/", "/a/b/"),
        ];
        for (input, expected) in cases {
            assert_eq!(normal(input), Ok(expected.to_string()), "{input:?}");
        }
    }

    #[test]
    fn rejects_dot_segments_behind_encoded_separators() {
        for path in [
            "/webhooks/..%2fadmin",
            "/webhooks/..%2Fadmin",
            "/a/%2e%2e%5cadmin",
            "/a/..%5Cb",
            "/a/..\\b",
            "/a/b\\..",
            "/a/x%2f.",
        ] {
            assert_eq!(
                normal(path),
                Err(PathRejection::HiddenDotSegment),
                "{path:?}"
            );
        }
        assert_eq!(normal("*"), Err(PathRejection::NotAbsolute));
        assert_eq!(normal(""), Err(PathRejection::NotAbsolute));
        // An encoded slash that hides no dot segment stays encoded.
        assert_eq!(normal("/files/a%2fb"), Ok("/files/a%2Fb".to_string()));
    }

    #[test]
    fn decodes_escaped_unreserved_characters() {
        let cases = [
            ("/.%65nv", "/.env"),
            ("/wp%2dlogin.php", "/wp-login.php"),
            ("/%77p-login.php", "/wp-login.php"),
            ("/%5Froom/stats", "/_room/stats"),
            ("/_room/%73tats", "/_room/stats"),
            ("/%41%7a%30%7E", "/Az0~"),
            ("/%2e%2E/%2e/%61", "/a"),
        ];
        for (input, expected) in cases {
            assert_eq!(normal(input), Ok(expected.to_string()), "{input:?}");
        }
    }

    #[test]
    fn keeps_other_escapes_with_upper_case_hex() {
        let cases = [
            ("/a%2fb", "/a%2Fb"),
            ("/%c3%a9", "/%C3%A9"),
            ("/a%3bb", "/a%3Bb"),
            ("/q%3f%23", "/q%3F%23"),
            ("/%25", "/%25"),
        ];
        for (input, expected) in cases {
            assert_eq!(normal(input), Ok(expected.to_string()), "{input:?}");
        }
        assert!(matches!(
            normalize_request_path("/%00%20"),
            Ok(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn a_percent_that_starts_no_escape_is_encoded() {
        assert_eq!(normal("/50%off"), Ok("/50%25off".to_string()));
        assert_eq!(normal("/a%"), Ok("/a%25".to_string()));
        assert_eq!(normal("/a%4"), Ok("/a%254".to_string()));
        // Decoding `%65` must not complete the stray `%2` into an encoded dot.
        assert_eq!(normal("/x/%2%65%2%65/y"), Ok("/x/%252e%252e/y".to_string()));
        assert_eq!(normal("/x/%2%66"), Ok("/x/%252f".to_string()));
    }

    #[test]
    fn rejects_dot_segments_with_parameters() {
        for path in [
            "/public/..;/private",
            "/public/..;x/private",
            "/a/.;",
            "/a/.;x/b",
            "/a/%2e%2e;/b",
            "/a/%2E.;v=1",
            "/a/..%3Bx/b",
            "/a/.%3b",
            "/..;",
        ] {
            assert_eq!(
                normal(path),
                Err(PathRejection::DotSegmentWithParameters),
                "{path:?}"
            );
        }
        // Hidden behind an encoded slash, it is still a dot segment.
        assert_eq!(normal("/a/x%2f..;/b"), Err(PathRejection::HiddenDotSegment));
        for fine in ["/a/...;", "/a/..x;", "/a/x..;", "/a;b/../c"] {
            assert!(normal(fine).is_ok(), "{fine:?}");
        }
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
    fn rule_entries_with_escapes_must_be_written_normalised() {
        for bad in ["/.%65nv", "/a%2fb", "/%7e", "/50%off"] {
            let error = PathList::parse_strict(bad).unwrap_err();
            assert!(error.contains("did you mean"), "{bad:?}: {error}");
        }
        assert!(PathList::parse_strict("/a%2Fb").is_ok());
        assert!(PathList::parse_strict("/..;/x").is_err());
    }

    fn assert_normal_form(out: &str) -> Result<(), TestCaseError> {
        prop_assert!(out.starts_with('/'));
        prop_assert!(!out.contains("//"));
        prop_assert!(out.split('/').all(|s| s != "." && s != ".."));
        // Every `%` starts an escape, in upper-case hex, of a character that needs one.
        let bytes = out.as_bytes();
        for (at, _) in out.match_indices('%') {
            let hex = bytes.get(at + 1..at + 3).unwrap_or_default();
            prop_assert!(
                hex.len() == 2
                    && hex
                        .iter()
                        .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(b)),
                "{out}"
            );
            prop_assert!(
                matches!(read_escape(&bytes[at..]), Escape::Kept(_)),
                "{out}"
            );
        }
        prop_assert!(
            matches!(normalize_request_path(out), Ok(Cow::Borrowed(again)) if again == out)
        );
        Ok(())
    }

    proptest! {
        #[test]
        fn normalisation_never_panics(path in "\\PC*") {
            if let Ok(out) = normalize_request_path(&path) {
                assert_normal_form(&out)?;
            }
        }

        #[test]
        fn normalised_paths_are_canonical_and_idempotent(
            tokens in proptest::collection::vec(
                prop::sample::select(vec![
                    "/", ".", "..", "%2e", "%2E", "%2f", "%5C", "\\", "a", "é", "%", "2", "e", "%65",
                    "%7e", "%3B", ";", "%c3",
                ]),
                0..24,
            )
        ) {
            let path = format!("/{}", tokens.concat());
            if let Ok(out) = normalize_request_path(&path) {
                assert_normal_form(&out)?;
            }
        }

        #[test]
        fn list_parsing_never_panics(raw in "\\PC*") {
            let _ = PathList::parse_strict(&raw);
        }

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
