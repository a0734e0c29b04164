//! Reading request cookies without allocating, and building Concert's own `Set-Cookie` headers.
//!
//! Every cookie Concert sets shares one attribute set (path, domain, Secure) derived from the
//! configuration, so the attribute tail is rendered once per generation, not per response.

use bytes::Bytes;
use http::header::{COOKIE, SET_COOKIE};
use http::{HeaderMap, HeaderValue};

/// The waiting-room ticket: the visitor's place in line (HttpOnly).
pub(crate) const TICKET: &str = "room_ticket";
/// Set beside the ticket, readable by the waiting page, so its script can tell that cookies
/// work.
pub(crate) const PROBE: &str = "room_probe";
/// A VIP pass into the room.
pub(crate) const ROOM_PASS: &str = "room_pass";
/// The admission pass of an admitted visitor.
pub(crate) const ADMIT: &str = "concert_admit";
/// A priority grant from the origin, bound to the admission pass.
pub(crate) const PRIORITY: &str = "concert_priority";
/// The fast lane's session.
pub(crate) const FASTLANE: &str = "concert_fastlane";
/// The admin portal's session. Browsers do not tell cookies apart by port, so when the portal
/// and the site share a host name this one would reach the origin too.
pub(crate) const PORTAL: &str = "concert_portal";
/// The portal's "known browser" mark, set at sign-in: that browser's wrong passes count
/// against it alone.
pub(crate) const PORTAL_DEVICE: &str = "concert_portal_device";
/// The portal's sign-in form cookie, which the form's hidden token must match.
pub(crate) const PORTAL_SIGN_IN: &str = "concert_portal_signin";
/// Concert's own cookies: they are never passed on to the origin.
pub(crate) const PRIVATE: [&str; 9] = [
    TICKET,
    ROOM_PASS,
    PROBE,
    ADMIT,
    PRIORITY,
    FASTLANE,
    PORTAL,
    PORTAL_DEVICE,
    PORTAL_SIGN_IN,
];

/// Value of the first cookie called `name` across all `Cookie` headers, borrowed from the request.
///
/// Pairs that do not parse are skipped rather than failing the whole header, so one odd cookie set
/// by the origin cannot hide ours.
pub(crate) fn read_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let [value] = read_cookies(headers, [name]);
    value
}

/// [`read_cookie`] for several names in one pass over the `Cookie` headers: a request that
/// needs four of Concert's cookies splits its cookie line once, not four times.
///
/// The line is read as bytes, pair by pair, and a value is taken only when it is ASCII text: a
/// browser sends all of a site's cookies in one line, and one cookie of the origin's with a
/// UTF-8 value must not hide Concert's (reading the whole line as text would drop all of them).
/// A header value holds no control bytes but tab, so ASCII means visible text here.
pub(crate) fn read_cookies<'a, const N: usize>(
    headers: &'a HeaderMap,
    names: [&str; N],
) -> [Option<&'a str>; N] {
    let mut found = [None; N];
    let mut missing = N;
    for line in headers.get_all(COOKIE) {
        for pair in cookie_pairs(line.as_bytes()) {
            let Some(equals) = memchr::memchr(b'=', pair) else {
                continue;
            };
            let key = pair[..equals].trim_ascii();
            // The first valid pair of each name counts, as browsers send the most specific
            // first.
            for (name, slot) in names.iter().zip(found.iter_mut()) {
                if slot.is_none()
                    && name.as_bytes() == key
                    && let Some(value) = ascii_text(pair[equals + 1..].trim_ascii())
                {
                    *slot = Some(value.trim_matches('"'));
                    missing -= 1;
                }
            }
            if missing == 0 {
                return found;
            }
        }
    }
    found
}

/// The pairs of a `Cookie` line, trimmed, empty ones left out. The separators are found with
/// memchr, many bytes a step: a returning visitor's line is mostly its admission pass, and a
/// byte-by-byte split of it cost about a thousand instructions per page.
pub(crate) fn cookie_pairs(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    memchr::memchr_iter(b';', line)
        .chain(std::iter::once(line.len()))
        .map(move |end| {
            let pair = &line[start..end];
            start = end + 1;
            pair.trim_ascii()
        })
        .filter(|pair| !pair.is_empty())
}

/// `bytes` as text when they are all ASCII.
fn ascii_text(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        std::str::from_utf8(bytes).ok()
    } else {
        None
    }
}

/// The attributes shared by every cookie Concert sets.
#[derive(Clone, Debug)]
pub struct CookieAttrs {
    /// `; Path=/; Domain=…` — rendered once.
    scope: String,
    secure: bool,
}

impl CookieAttrs {
    pub fn new(path: &str, domain: &str, secure: bool) -> Self {
        let path = if path.trim().is_empty() {
            "/"
        } else {
            path.trim()
        };
        let mut scope = format!("; Path={path}");
        let domain = domain.trim();
        if !domain.is_empty() {
            scope.push_str("; Domain=");
            scope.push_str(domain);
        }
        CookieAttrs { scope, secure }
    }

    /// `name=value` with Concert's attributes, `Max-Age` in seconds and SameSite=Lax.
    ///
    /// `force_secure` adds `Secure` for requests that arrived over Concert's own TLS even when
    /// `-secure-cookie` is off.
    pub fn set(
        &self,
        name: &str,
        value: &str,
        max_age_secs: u64,
        http_only: bool,
        force_secure: bool,
    ) -> HeaderValue {
        const MAX_AGE: &str = "; Max-Age=";
        const HTTP_ONLY: &str = "; HttpOnly";
        const SECURE: &str = "; Secure";
        const SAME_SITE: &str = "; SameSite=Lax";
        let mut digits = itoa::Buffer::new();
        let max_age = digits.format(max_age_secs);
        let secure = self.secure || force_secure;
        // The exact length, so the header value takes the buffer over without copying it.
        let len = name.len()
            + 1
            + value.len()
            + self.scope.len()
            + MAX_AGE.len()
            + max_age.len()
            + if http_only { HTTP_ONLY.len() } else { 0 }
            + if secure { SECURE.len() } else { 0 }
            + SAME_SITE.len();
        let mut line = String::with_capacity(len);
        line.push_str(name);
        line.push('=');
        line.push_str(value);
        line.push_str(&self.scope);
        line.push_str(MAX_AGE);
        line.push_str(max_age);
        if http_only {
            line.push_str(HTTP_ONLY);
        }
        if secure {
            line.push_str(SECURE);
        }
        line.push_str(SAME_SITE);
        debug_assert_eq!(line.len(), len, "cookie length computed wrongly");
        // Names and values are ours (hex tokens, digits) and attributes were validated at start-up;
        // an unexpected byte degrades to a harmless empty header instead of a panic.
        HeaderValue::from_maybe_shared(Bytes::from(line))
            .unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// A header that deletes cookie `name` (empty value, `Max-Age=0`).
    pub fn clear(&self, name: &str, force_secure: bool) -> HeaderValue {
        self.set(name, "", 0, true, force_secure)
    }

    /// Appends a waiting visitor's cookies: the ticket `token` (HttpOnly) and the probe the
    /// waiting page reads, both for `max_age_secs`.
    pub fn append_room_cookies(
        &self,
        headers: &mut HeaderMap,
        token: &str,
        max_age_secs: u64,
        force_secure: bool,
    ) {
        headers.append(
            SET_COOKIE,
            self.set(TICKET, token, max_age_secs, true, force_secure),
        );
        headers.append(
            SET_COOKIE,
            self.set(PROBE, "1", max_age_secs, false, force_secure),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(COOKIE, HeaderValue::from_str(line).unwrap());
        }
        map
    }

    #[test]
    fn finds_a_cookie_among_several_headers() {
        let map = headers(&["a=1; room_ticket=abc", "b=2"]);
        assert_eq!(read_cookie(&map, "room_ticket"), Some("abc"));
        assert_eq!(read_cookie(&map, "b"), Some("2"));
        assert_eq!(read_cookie(&map, "missing"), None);
    }

    // One name looked up on its own, the plain way: the first pair of that name whose value
    // is ASCII.
    fn read_cookie_by_splitting<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers
            .get_all(COOKIE)
            .iter()
            .flat_map(|line| line.as_bytes().split(|&b| b == b';'))
            .find_map(|pair| {
                let equals = pair.iter().position(|&b| b == b'=')?;
                if pair[..equals].trim_ascii() != name.as_bytes() {
                    return None;
                }
                let value = std::str::from_utf8(pair[equals + 1..].trim_ascii()).ok()?;
                value.is_ascii().then(|| value.trim_matches('"'))
            })
    }

    proptest::proptest! {
        #[test]
        fn reading_several_names_at_once_matches_reading_each(
            lines in proptest::collection::vec("[a-c_ =;\"é\t]{0,24}", 0..4),
            names in proptest::array::uniform3("[a-c_]{1,3}"),
        ) {
            let mut map = HeaderMap::new();
            for line in &lines {
                if let Ok(value) = HeaderValue::from_bytes(line.as_bytes()) {
                    map.append(COOKIE, value);
                }
            }
            let together = read_cookies(&map, [&names[0], &names[1], &names[2]]);
            for (name, value) in names.iter().zip(together) {
                proptest::prop_assert_eq!(value, read_cookie_by_splitting(&map, name));
            }
        }
    }

    #[test]
    fn a_cookie_with_a_utf8_value_hides_nothing_else_on_the_line() {
        let line =
            HeaderValue::from_bytes("lang=Español; room_ticket=abc; x=ü".as_bytes()).unwrap();
        let mut map = HeaderMap::new();
        map.append(COOKIE, line);
        assert_eq!(read_cookie(&map, "room_ticket"), Some("abc"));
        assert_eq!(read_cookie(&map, "lang"), None, "not ASCII text");
        // A value of ours that is not ASCII is passed over for a later valid one.
        let line = HeaderValue::from_bytes("room_ticket=ä; room_ticket=ok".as_bytes()).unwrap();
        let mut map = HeaderMap::new();
        map.append(COOKIE, line);
        assert_eq!(read_cookie(&map, "room_ticket"), Some("ok"));
    }

    #[test]
    fn tolerates_malformed_pairs_and_quotes() {
        let map = headers(&["garbage; ; =x; room_ticket=\"q\""]);
        assert_eq!(read_cookie(&map, "room_ticket"), Some("q"));
        assert_eq!(
            read_cookie(&headers(&["room_ticket="]), "room_ticket"),
            Some("")
        );
    }

    #[test]
    fn renders_attributes_once_and_in_order() {
        let attrs = CookieAttrs::new("", "example.com", false);
        let line = attrs.set("room_ticket", "tok", 300, true, false);
        assert_eq!(
            line.to_str().unwrap(),
            "room_ticket=tok; Path=/; Domain=example.com; Max-Age=300; HttpOnly; SameSite=Lax"
        );
        let secure = CookieAttrs::new("/shop", "", true).set("room_probe", "1", 5, false, false);
        assert_eq!(
            secure.to_str().unwrap(),
            "room_probe=1; Path=/shop; Max-Age=5; Secure; SameSite=Lax"
        );
        let cleared = CookieAttrs::new("/", "", false).clear("room_ticket", true);
        assert_eq!(
            cleared.to_str().unwrap(),
            "room_ticket=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Lax"
        );
    }
}
