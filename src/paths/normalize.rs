//! Request-path normalisation: every rule sees, and the origin receives, one canonical form of
//! the path, so no encoding trick reaches a path a rule was meant to keep apart.

use std::borrow::Cow;

/// Why a request path cannot be normalised; the caller answers 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathRejection {
    #[error("the path does not start with /")]
    NotAbsolute,
    #[error("a dot segment is hidden behind an encoded slash or a backslash")]
    HiddenDotSegment,
    #[error("a dot segment carries ;parameters")]
    DotSegmentWithParameters,
    #[error("an escape encodes a control character")]
    EncodedControl,
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
/// parameters. Also refused: an escape of a control character (`%00`-`%1F`, `%7F`), which no
/// page's name holds and which cuts or splits the path for origins that decode it into C
/// strings, file names or log lines. Unchanged paths are borrowed.
pub(crate) fn normalize_request_path(path: &str) -> Result<Cow<'_, str>, PathRejection> {
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
            if has_encoded_control(bytes) {
                return Err(PathRejection::EncodedControl);
            }
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

/// True when some `%` in `segment` starts an escape of a control character. Every `%` is
/// looked at, stray ones included: `%%00` is written `%25%00`, which still holds the escape.
fn has_encoded_control(segment: &[u8]) -> bool {
    segment
        .iter()
        .enumerate()
        .filter(|&(_, &byte)| byte == b'%')
        .any(|(at, _)| match read_escape(&segment[at..]) {
            Escape::Kept(byte) => byte.is_ascii_control(),
            _ => false,
        })
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

    fn normal(path: &str) -> Result<String, PathRejection> {
        normalize_request_path(path).map(Cow::into_owned)
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
            normalize_request_path("/%20%7B"),
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
    fn rejects_escaped_control_characters() {
        for path in [
            "/a%00",
            "/a%00.php",
            "/%01/x",
            "/x/%1f",
            "/x/%1F",
            "/x/%7f",
            "/x/%7F/",
            "/a/%%00",
            "/a/%0a%0dSet-Cookie:x",
            "/ok/../%09",
        ] {
            assert_eq!(normal(path), Err(PathRejection::EncodedControl), "{path:?}");
        }
        // Neighbours of the control range, a literal `%25` before digits, and the two bytes
        // of an escape read apart are not controls.
        for fine in ["/%20", "/%7E", "/%80", "/%2500", "/%0", "/%0g", "/%C3%A9"] {
            assert!(normal(fine).is_ok(), "{fine:?}");
        }
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

    }
}
