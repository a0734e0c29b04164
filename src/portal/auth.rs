//! Who may use the portal: the pass check, the sessions it opens, the CSRF token each session
//! carries, the sign-in form's own token, and the lockout after repeated wrong passes.
//!
//! Sessions live here, in memory, not in the cookie: signing out removes the session, so a
//! copied cookie stops working with it, and the pass (an environment variable) can only change
//! with a restart, which voids them all.
//!
//! Failures are counted against whoever can be told apart best. A browser that signed in before
//! carries a signed "known browser" cookie, and its failures count under that cookie alone, so
//! a lockout others cause at the same address (one NAT, VPN or TLS proxy for everyone) does not
//! stop it. Any other attempt counts against its sign-in source: the socket peer's address,
//! and for a peer on this host (loopback) also the local account that owns the connecting
//! socket, so one local user guessing through an SSH tunnel locks only themselves.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::Duration;

use base64::Engine as _;
use hmac::Hmac;
use http::HeaderMap;
use parking_lot::Mutex;
use rand::RngCore as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use crate::sys::keyed_hash::{keyed, tag_of};

/// Wrong passes from one source within [`FAILURE_WINDOW`] that lock it.
pub(crate) const MAX_FAILURES: u32 = 5;
/// The window failures are counted in (from the first), and how long a lock lasts.
pub(crate) const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Sign-in sources remembered at once; the oldest are forgotten first.
const MAX_SOURCES: usize = 4096;
/// Known browsers with failures remembered at once; the oldest are forgotten first.
const MAX_BROWSERS: usize = 4096;
/// Sessions open at once; the one closest to expiry goes first when a new one needs room.
const MAX_SESSIONS: usize = 256;
/// How long a sign-in form may wait to be sent.
pub(crate) const SIGN_IN_FORM_TTL: Duration = Duration::from_secs(2 * 3600);
/// A form cookie with less than this left is replaced when the page is shown again, so a page
/// just shown always has an hour to be sent.
const SIGN_IN_FORM_RENEW: Duration = Duration::from_secs(3600);
/// How long a browser stays known after it last signed in.
pub(crate) const KNOWN_BROWSER_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

const MAC_LEN: usize = 16;
const ID_LEN: usize = 16;
/// Form cookie: nonce, expiry (unix seconds, big-endian), MAC.
const FORM_COOKIE_LEN: usize = ID_LEN + 8 + MAC_LEN;
/// Known-browser cookie: id, MAC.
const DEVICE_COOKIE_LEN: usize = ID_LEN + MAC_LEN;

/// Where sign-in attempts come from, for the lockout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SignInSource {
    pub peer: IpAddr,
    /// The account owning the connecting socket, for a peer on this host when it can be told.
    pub local_user: Option<u32>,
}

/// A browser that signed in before, by the id in its signed cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct KnownBrowser([u8; ID_LEN]);

/// Whose failures an attempt counts against.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt {
    Browser(KnownBrowser),
    Source(SignInSource),
}

/// One open session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub csrf: String,
    expires: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    first: Instant,
    count: u32,
    locked_until: Option<Instant>,
}

/// The outcome of a sign-in attempt.
#[derive(Debug)]
pub(crate) enum SignIn {
    /// The session cookie's value and the session.
    Opened {
        cookie: String,
    },
    Wrong,
    /// Locked: try again after this long.
    Locked(Duration),
}

/// What the sign-in page needs for its form: the token of its hidden field, and the cookie
/// that token is tied to when a new one must be set.
#[derive(Debug)]
pub(crate) struct SignInForm {
    pub token: String,
    pub new_cookie: Option<String>,
}

/// Failure records of one kind, bounded.
struct Tally<K> {
    records: HashMap<K, Failures>,
    limit: usize,
}

impl<K: Copy + Eq + Hash> Tally<K> {
    fn new(limit: usize) -> Tally<K> {
        Tally {
            records: HashMap::new(),
            limit,
        }
    }

    fn locked_for(&self, key: &K, now: Instant) -> Option<Duration> {
        let until = self.records.get(key)?.locked_until?;
        (until > now).then(|| until - now)
    }

    /// Counts one failure; true when other records were forgotten to make room.
    fn count(&mut self, key: K, now: Instant) -> bool {
        let mut reshaped = false;
        if self.records.len() >= self.limit && !self.records.contains_key(&key) {
            self.records.retain(|_, record| still_relevant(record, now));
            if self.records.len() >= self.limit
                && let Some(oldest) = self
                    .records
                    .iter()
                    .min_by_key(|(_, record)| record.first)
                    .map(|(key, _)| *key)
            {
                self.records.remove(&oldest);
            }
            reshaped = true;
        }
        let record = self.records.entry(key).or_insert(Failures {
            first: now,
            count: 0,
            locked_until: None,
        });
        if now.saturating_duration_since(record.first) >= FAILURE_WINDOW {
            *record = Failures {
                first: now,
                count: 0,
                locked_until: None,
            };
        }
        record.count += 1;
        if record.count >= MAX_FAILURES {
            // The lock restarts the count: the next window begins when it ends.
            record.locked_until = Some(now + FAILURE_WINDOW);
            record.first = now + FAILURE_WINDOW;
            record.count = 0;
        }
        reshaped
    }

    fn forget(&mut self, key: &K) -> bool {
        self.records.remove(key).is_some()
    }

    fn prune(&mut self, now: Instant) {
        self.records.retain(|_, record| still_relevant(record, now));
    }
}

/// The sources' records, with how many each address has: an attempt from this host needs its
/// local account looked up only when its address has records to tell apart.
struct SourceTally {
    tally: Tally<SignInSource>,
    per_address: HashMap<IpAddr, u32>,
}

impl SourceTally {
    fn count(&mut self, source: SignInSource, now: Instant) {
        let new = !self.tally.records.contains_key(&source);
        if self.tally.count(source, now) {
            self.recount();
        } else if new {
            *self.per_address.entry(source.peer).or_default() += 1;
        }
    }

    fn forget(&mut self, source: &SignInSource) {
        if self.tally.forget(source)
            && let Some(left) = self.per_address.get_mut(&source.peer)
        {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.per_address.remove(&source.peer);
            }
        }
    }

    fn prune(&mut self, now: Instant) {
        self.tally.prune(now);
        self.recount();
    }

    fn recount(&mut self) {
        self.per_address.clear();
        for source in self.tally.records.keys() {
            *self.per_address.entry(source.peer).or_default() += 1;
        }
    }
}

/// The pass, the sessions and the failure counts.
pub(crate) struct Auth {
    pass_digest: [u8; 32],
    /// Signs the known-browser cookies; derived from the pass, so a new pass forgets them all.
    browser_key: Hmac<Sha256>,
    /// Signs the sign-in form's cookie and token.
    form_key: Hmac<Sha256>,
    /// Keyed by the SHA-256 of the cookie value, so the table holds nothing a cookie can be
    /// made from.
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    sources: Mutex<SourceTally>,
    browsers: Mutex<Tally<KnownBrowser>>,
}

impl Auth {
    pub(crate) fn new(pass: &str) -> Auth {
        let derived = |purpose: &[u8]| keyed(&tag_of(&keyed(pass.as_bytes()), purpose));
        Auth {
            pass_digest: Sha256::digest(pass.as_bytes()).into(),
            browser_key: derived(b"concert/portal/known-browser-key"),
            form_key: derived(b"concert/portal/sign-in-form-key"),
            sessions: Mutex::new(HashMap::new()),
            sources: Mutex::new(SourceTally {
                tally: Tally::new(MAX_SOURCES),
                per_address: HashMap::new(),
            }),
            browsers: Mutex::new(Tally::new(MAX_BROWSERS)),
        }
    }

    /// Checks `presented` unless `attempt` is locked; a right pass forgets the attempt's
    /// failures and opens a session lasting `ttl`, a wrong one counts against it.
    pub(crate) fn sign_in(&self, attempt: Attempt, presented: &str, ttl: Duration) -> SignIn {
        if let Some(left) = self.locked_for(&attempt) {
            return SignIn::Locked(left);
        }
        if !self.pass_matches(presented) {
            self.count_failure(attempt);
            return SignIn::Wrong;
        }
        match attempt {
            Attempt::Browser(browser) => {
                self.browsers.lock().forget(&browser);
            }
            Attempt::Source(source) => self.sources.lock().forget(&source),
        }
        SignIn::Opened {
            cookie: self.open_session(ttl),
        }
    }

    /// Whether `presented` is the pass, in constant time: both sides are hashed to the same
    /// length first.
    pub(crate) fn pass_matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(digest.ct_eq(&self.pass_digest))
    }

    fn locked_for(&self, attempt: &Attempt) -> Option<Duration> {
        let now = Instant::now();
        match attempt {
            Attempt::Browser(browser) => self.browsers.lock().locked_for(browser, now),
            Attempt::Source(source) => self.sources.lock().tally.locked_for(source, now),
        }
    }

    pub(crate) fn count_failure(&self, attempt: Attempt) {
        let now = Instant::now();
        match attempt {
            Attempt::Browser(browser) => {
                self.browsers.lock().count(browser, now);
            }
            Attempt::Source(source) => self.sources.lock().count(source, now),
        }
    }

    /// Whether any source at `peer` has failures on record.
    pub(crate) fn address_has_failures(&self, peer: IpAddr) -> bool {
        self.sources.lock().per_address.contains_key(&peer)
    }

    /// The browser a known-browser cookie names, when its signature holds; anything else is
    /// no known browser at all.
    pub(crate) fn known_browser(&self, cookie: &str) -> Option<KnownBrowser> {
        let raw = decode_exact::<DEVICE_COOKIE_LEN>(cookie)?;
        let (id, mac) = raw.split_at(ID_LEN);
        let expected = self.browser_mac(id);
        if !bool::from(expected.ct_eq(mac)) {
            return None;
        }
        let mut known = [0u8; ID_LEN];
        known.copy_from_slice(id);
        Some(KnownBrowser(known))
    }

    /// The cookie value for `browser`, or for a new browser.
    pub(crate) fn known_browser_cookie(&self, browser: Option<KnownBrowser>) -> String {
        let id = browser.map_or_else(
            || {
                let mut id = [0u8; ID_LEN];
                rand::rng().fill_bytes(&mut id);
                id
            },
            |known| known.0,
        );
        let mut raw = [0u8; DEVICE_COOKIE_LEN];
        raw[..ID_LEN].copy_from_slice(&id);
        raw[ID_LEN..].copy_from_slice(&self.browser_mac(&id));
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    fn browser_mac(&self, id: &[u8]) -> [u8; MAC_LEN] {
        truncated(&tag_of(&self.browser_key, id))
    }

    /// The sign-in form's token, tied to the form cookie the browser holds when that one is
    /// valid for a while yet, else to a new one (returned, to be set). `now_unix` is the wall
    /// clock in seconds: the cookie outlives a restart with the same pass.
    pub(crate) fn sign_in_form(&self, held: Option<&str>, now_unix: u64) -> SignInForm {
        if let Some((nonce, expiry)) = held.and_then(|cookie| self.form_cookie(cookie, now_unix))
            && expiry >= now_unix + SIGN_IN_FORM_RENEW.as_secs()
        {
            return SignInForm {
                token: self.form_token(&nonce),
                new_cookie: None,
            };
        }
        let mut nonce = [0u8; ID_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let expiry = now_unix + SIGN_IN_FORM_TTL.as_secs();
        let mut raw = [0u8; FORM_COOKIE_LEN];
        raw[..ID_LEN].copy_from_slice(&nonce);
        raw[ID_LEN..ID_LEN + 8].copy_from_slice(&expiry.to_be_bytes());
        let mac = self.form_cookie_mac(&raw[..ID_LEN + 8]);
        raw[ID_LEN + 8..].copy_from_slice(&mac);
        SignInForm {
            token: self.form_token(&nonce),
            new_cookie: Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)),
        }
    }

    /// Whether a posted form's token belongs to the form cookie sent with it, and that cookie
    /// is signed and unexpired. A page on another site can neither read the cookie nor make
    /// the browser send it (it is `SameSite=Strict`), so it cannot post a form that passes.
    pub(crate) fn sign_in_form_matches(
        &self,
        cookie: Option<&str>,
        token: &str,
        now_unix: u64,
    ) -> bool {
        let Some((nonce, _)) = cookie.and_then(|cookie| self.form_cookie(cookie, now_unix)) else {
            return false;
        };
        let expected = self.form_token(&nonce);
        token.len() == expected.len() && bool::from(token.as_bytes().ct_eq(expected.as_bytes()))
    }

    /// The nonce and expiry of a signed, unexpired form cookie.
    fn form_cookie(&self, cookie: &str, now_unix: u64) -> Option<([u8; ID_LEN], u64)> {
        let raw = decode_exact::<FORM_COOKIE_LEN>(cookie)?;
        let (signed, mac) = raw.split_at(ID_LEN + 8);
        if !bool::from(self.form_cookie_mac(signed).ct_eq(mac)) {
            return None;
        }
        let mut nonce = [0u8; ID_LEN];
        nonce.copy_from_slice(&raw[..ID_LEN]);
        let mut expiry = [0u8; 8];
        expiry.copy_from_slice(&raw[ID_LEN..ID_LEN + 8]);
        let expiry = u64::from_be_bytes(expiry);
        (expiry > now_unix).then_some((nonce, expiry))
    }

    fn form_cookie_mac(&self, signed: &[u8]) -> [u8; MAC_LEN] {
        let mut message = Vec::with_capacity(7 + signed.len());
        message.extend_from_slice(b"cookie:");
        message.extend_from_slice(signed);
        truncated(&tag_of(&self.form_key, &message))
    }

    fn form_token(&self, nonce: &[u8; ID_LEN]) -> String {
        let mut message = [0u8; 5 + ID_LEN];
        message[..5].copy_from_slice(b"form:");
        message[5..].copy_from_slice(nonce);
        hex::encode(truncated(&tag_of(&self.form_key, &message)))
    }

    pub(crate) fn open_session(&self, ttl: Duration) -> String {
        let now = Instant::now();
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let cookie = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
        let mut csrf = [0u8; 16];
        rand::rng().fill_bytes(&mut csrf);
        let session = Session {
            csrf: hex::encode(csrf),
            expires: now + ttl,
        };
        let mut sessions = self.sessions.lock();
        sessions.retain(|_, open| open.expires > now);
        if sessions.len() >= MAX_SESSIONS
            && let Some(soonest) = sessions
                .iter()
                .min_by_key(|(_, open)| open.expires)
                .map(|(key, _)| *key)
        {
            sessions.remove(&soonest);
        }
        sessions.insert(Sha256::digest(cookie.as_bytes()).into(), session);
        cookie
    }

    /// The session a cookie value opens, if it is open and unexpired.
    pub(crate) fn session(&self, cookie: &str) -> Option<Session> {
        let key: [u8; 32] = Sha256::digest(cookie.as_bytes()).into();
        let mut sessions = self.sessions.lock();
        let session = sessions.get(&key)?;
        if session.expires <= Instant::now() {
            sessions.remove(&key);
            return None;
        }
        Some(session.clone())
    }

    /// Ends a session: its cookie opens nothing from now on.
    pub(crate) fn sign_out(&self, cookie: &str) {
        let key: [u8; 32] = Sha256::digest(cookie.as_bytes()).into();
        self.sessions.lock().remove(&key);
    }

    /// Forgets expired sessions and failure records (called now and then, not per request).
    pub(crate) fn prune(&self) {
        let now = Instant::now();
        self.sessions.lock().retain(|_, open| open.expires > now);
        self.sources.lock().prune(now);
        self.browsers.lock().prune(now);
    }

    #[cfg(test)]
    fn sessions_open(&self) -> usize {
        self.sessions.lock().len()
    }
}

/// A failure record still counts: its window or its lock has not ended.
fn still_relevant(record: &Failures, now: Instant) -> bool {
    record.locked_until.is_some_and(|until| until > now)
        || now.saturating_duration_since(record.first) < FAILURE_WINDOW
}

fn truncated(tag: &[u8; 32]) -> [u8; MAC_LEN] {
    let mut mac = [0u8; MAC_LEN];
    mac.copy_from_slice(&tag[..MAC_LEN]);
    mac
}

/// A cookie value decoded from unpadded base64url, when it is exactly `N` bytes.
fn decode_exact<const N: usize>(cookie: &str) -> Option<[u8; N]> {
    // Longer text cannot decode to N bytes; refusing it first bounds the work.
    if cookie.len() > N.div_ceil(3) * 4 {
        return None;
    }
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cookie)
        .ok()?;
    raw.try_into().ok()
}

/// Whether a CSRF token sent with a request is the session's (constant time).
pub(crate) fn csrf_matches(session: &Session, presented: &str) -> bool {
    presented.len() == session.csrf.len()
        && bool::from(presented.as_bytes().ct_eq(session.csrf.as_bytes()))
}

/// Whether a request says it comes from a page of another site: `Sec-Fetch-Site` other than
/// `same-origin` or `none` (typed or bookmarked), or an `Origin` whose host and port are not
/// the request's `Host`. Browsers send at least one of them with every form post; a client
/// that sends neither is judged by the sign-in form's token alone. `Origin: null` says
/// nothing: a browser sends it for the portal's own form, whose pages ask for no referrer.
pub(crate) fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site")
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return true;
    }
    let Some(origin) = headers
        .get(http::header::ORIGIN)
        .filter(|origin| origin.as_bytes() != b"null")
    else {
        return false;
    };
    let host = headers
        .get(http::header::HOST)
        .and_then(|host| host.to_str().ok());
    match (origin.to_str().ok(), host) {
        (Some(origin), Some(host)) => !same_authority(origin, host),
        _ => true,
    }
}

/// Whether `origin` (`scheme://host[:port]`) names the same host and port as a `Host` header,
/// a missing port being the scheme's default on both sides.
fn same_authority(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let split = |authority: &str| -> (String, String) {
        // The port follows the last colon outside an IPv6 literal's brackets.
        let port_at = authority
            .rfind(':')
            .filter(|&at| authority.rfind(']').is_none_or(|bracket| at > bracket));
        match port_at {
            Some(at) => (
                authority[..at].to_ascii_lowercase(),
                authority[at + 1..].to_owned(),
            ),
            None => (authority.to_ascii_lowercase(), default_port.to_owned()),
        }
    };
    !authority.is_empty() && split(authority) == split(host.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASS: &str = "correct horse battery staple";
    const TTL: Duration = Duration::from_secs(3600);
    const NOW: u64 = 1_700_000_000;

    fn source(peer: &str, local_user: Option<u32>) -> Attempt {
        Attempt::Source(SignInSource {
            peer: peer.parse().unwrap(),
            local_user,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn five_wrong_passes_lock_the_source_even_for_the_right_pass() {
        let auth = Auth::new(PASS);
        let operator = source("127.0.0.1", Some(1000));
        for _ in 0..5 {
            assert!(matches!(auth.sign_in(operator, "nope", TTL), SignIn::Wrong));
        }
        match auth.sign_in(operator, PASS, TTL) {
            SignIn::Locked(left) => assert_eq!(left, FAILURE_WINDOW),
            other => panic!("expected a lock, got {other:?}"),
        }
        tokio::time::advance(FAILURE_WINDOW).await;
        assert!(matches!(
            auth.sign_in(operator, PASS, TTL),
            SignIn::Opened { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn another_local_account_cannot_lock_the_operator_out() {
        let auth = Auth::new(PASS);
        let intruder = source("127.0.0.1", Some(1001));
        for _ in 0..20 {
            auth.sign_in(intruder, "guess", TTL);
        }
        assert!(matches!(
            auth.sign_in(intruder, PASS, TTL),
            SignIn::Locked(_)
        ));
        let operator = source("127.0.0.1", Some(1000));
        assert!(matches!(
            auth.sign_in(operator, PASS, TTL),
            SignIn::Opened { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_known_browser_is_not_stopped_by_its_addresss_lock_and_locks_only_itself() {
        let auth = Auth::new(PASS);
        let shared = source("192.0.2.7", None);
        for _ in 0..5 {
            auth.sign_in(shared, "guess", TTL);
        }
        assert!(matches!(auth.sign_in(shared, PASS, TTL), SignIn::Locked(_)));
        let cookie = auth.known_browser_cookie(None);
        let operator = Attempt::Browser(auth.known_browser(&cookie).expect("its own cookie"));
        assert!(matches!(
            auth.sign_in(operator, PASS, TTL),
            SignIn::Opened { .. }
        ));
        // Its own failures lock it, and nobody else.
        for _ in 0..5 {
            assert!(matches!(auth.sign_in(operator, "typo", TTL), SignIn::Wrong));
        }
        assert!(matches!(
            auth.sign_in(operator, PASS, TTL),
            SignIn::Locked(_)
        ));
        let other = auth.known_browser_cookie(None);
        let other = Attempt::Browser(auth.known_browser(&other).unwrap());
        assert!(matches!(
            auth.sign_in(other, PASS, TTL),
            SignIn::Opened { .. }
        ));
    }

    #[test]
    fn only_a_cookie_signed_with_this_pass_names_a_known_browser() {
        let auth = Auth::new(PASS);
        let cookie = auth.known_browser_cookie(None);
        let known = auth.known_browser(&cookie).expect("its own cookie");
        // Renewing keeps the same browser.
        assert_eq!(
            auth.known_browser(&auth.known_browser_cookie(Some(known))),
            Some(known)
        );
        let mut altered = cookie.clone().into_bytes();
        for at in [0, 21, altered.len() - 1] {
            let saved = altered[at];
            altered[at] = if saved == b'A' { b'B' } else { b'A' };
            assert!(
                auth.known_browser(std::str::from_utf8(&altered).unwrap())
                    .is_none()
            );
            altered[at] = saved;
        }
        for forged in ["", "made-up", &"A".repeat(43), &"A".repeat(4000), "%%%"] {
            assert!(auth.known_browser(forged).is_none(), "{forged}");
        }
        let other_pass = Auth::new("another pass entirely, long enough");
        assert!(other_pass.known_browser(&cookie).is_none());
    }

    #[test]
    fn a_sign_in_form_token_belongs_to_its_own_cookie_until_it_expires() {
        let auth = Auth::new(PASS);
        let form = auth.sign_in_form(None, NOW);
        let cookie = form.new_cookie.expect("a first form sets its cookie");
        assert_eq!(form.token.len(), 32);
        assert!(auth.sign_in_form_matches(Some(&cookie), &form.token, NOW));
        assert!(!auth.sign_in_form_matches(None, &form.token, NOW));
        assert!(!auth.sign_in_form_matches(Some(&cookie), "", NOW));
        let other = auth.sign_in_form(None, NOW).new_cookie.unwrap();
        assert!(!auth.sign_in_form_matches(Some(&other), &form.token, NOW));
        let expiry = NOW + SIGN_IN_FORM_TTL.as_secs();
        assert!(auth.sign_in_form_matches(Some(&cookie), &form.token, expiry - 1));
        assert!(!auth.sign_in_form_matches(Some(&cookie), &form.token, expiry));
        let other_pass = Auth::new("another pass entirely, long enough");
        assert!(!other_pass.sign_in_form_matches(Some(&cookie), &form.token, NOW));

        // The page shown again keeps a fresh cookie (other tabs' forms stay good) and replaces
        // one with less than an hour left.
        let again = auth.sign_in_form(Some(&cookie), NOW + 60);
        assert!(again.new_cookie.is_none());
        assert_eq!(again.token, form.token);
        let late = auth.sign_in_form(Some(&cookie), expiry - SIGN_IN_FORM_RENEW.as_secs() + 1);
        assert!(late.new_cookie.is_some());
        assert_ne!(late.token, form.token);
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_has_failures_until_they_are_forgotten() {
        let auth = Auth::new(PASS);
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(!auth.address_has_failures(peer));
        auth.sign_in(source("127.0.0.1", Some(1001)), "guess", TTL);
        auth.sign_in(source("127.0.0.1", Some(1002)), "guess", TTL);
        assert!(auth.address_has_failures(peer));
        auth.sign_in(source("127.0.0.1", Some(1001)), PASS, TTL);
        assert!(auth.address_has_failures(peer));
        tokio::time::advance(FAILURE_WINDOW).await;
        auth.prune();
        assert!(!auth.address_has_failures(peer));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_outside_the_window_start_a_new_count() {
        let auth = Auth::new(PASS);
        let peer = source("192.0.2.7", None);
        for _ in 0..4 {
            auth.sign_in(peer, "nope", TTL);
        }
        tokio::time::advance(FAILURE_WINDOW).await;
        for _ in 0..4 {
            assert!(matches!(auth.sign_in(peer, "nope", TTL), SignIn::Wrong));
        }
        assert!(matches!(
            auth.sign_in(peer, PASS, TTL),
            SignIn::Opened { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_ends_when_signed_out_or_expired() {
        let auth = Auth::new(PASS);
        let peer = source("127.0.0.1", None);
        let SignIn::Opened { cookie } = auth.sign_in(peer, PASS, TTL) else {
            panic!("the right pass opens a session");
        };
        assert_eq!(auth.session(&cookie).map(|s| s.csrf.len()), Some(32));
        assert!(auth.session("made-up").is_none());
        auth.sign_out(&cookie);
        assert!(auth.session(&cookie).is_none());

        let SignIn::Opened { cookie, .. } = auth.sign_in(peer, PASS, TTL) else {
            panic!("the right pass opens a session");
        };
        tokio::time::advance(TTL).await;
        assert!(auth.session(&cookie).is_none());
        auth.prune();
        assert_eq!(auth.sessions_open(), 0);
    }

    #[test]
    fn csrf_tokens_must_match_exactly() {
        let session = Session {
            csrf: "0123456789abcdef0123456789abcdef".into(),
            expires: Instant::now(),
        };
        assert!(csrf_matches(&session, "0123456789abcdef0123456789abcdef"));
        assert!(!csrf_matches(&session, "0000"));
        assert!(!csrf_matches(&session, ""));
        assert!(!csrf_matches(&session, "0123456789abcdef0123456789abcdeF"));
    }

    #[test]
    fn posts_from_other_sites_are_told_apart() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, http::HeaderValue::from_static(value));
            }
            map
        };
        for same in [
            vec![("host", "127.0.0.1:8081")],
            vec![
                ("host", "127.0.0.1:8081"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![("host", "127.0.0.1:8081"), ("sec-fetch-site", "none")],
            vec![
                ("host", "127.0.0.1:8081"),
                ("origin", "http://127.0.0.1:8081"),
            ],
            vec![
                ("host", "Portal.Example"),
                ("origin", "https://portal.example"),
            ],
            vec![
                ("host", "portal.example:443"),
                ("origin", "https://portal.example"),
            ],
            vec![("host", "[::1]:8081"), ("origin", "http://[::1]:8081")],
            vec![
                ("host", "127.0.0.1:8081"),
                ("origin", "null"),
                ("sec-fetch-site", "same-origin"),
            ],
        ] {
            assert!(!cross_site(&headers(&same)), "{same:?}");
        }
        for other in [
            vec![("host", "127.0.0.1:8081"), ("sec-fetch-site", "cross-site")],
            vec![("host", "127.0.0.1:8081"), ("sec-fetch-site", "same-site")],
            vec![
                ("host", "127.0.0.1:8081"),
                ("origin", "http://evil.example"),
            ],
            vec![
                ("host", "127.0.0.1:8081"),
                ("origin", "http://127.0.0.1:8082"),
            ],
            vec![
                ("host", "127.0.0.1:8081"),
                ("origin", "null"),
                ("sec-fetch-site", "cross-site"),
            ],
            vec![("host", "[::1]:8081"), ("origin", "http://[::1]")],
            vec![("origin", "http://127.0.0.1:8081")],
            vec![
                ("host", "127.0.0.1:8081"),
                ("origin", "http://127.0.0.1:8081"),
                ("sec-fetch-site", "cross-site"),
            ],
        ] {
            assert!(cross_site(&headers(&other)), "{other:?}");
        }
    }
}
