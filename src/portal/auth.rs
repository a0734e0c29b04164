//! Who may use the portal: the pass check, the sessions it opens, the CSRF token each session
//! carries, and the lockout after repeated wrong passes.
//!
//! Sessions live here, in memory, not in the cookie: signing out removes the session, so a
//! copied cookie stops working with it, and the pass (an environment variable) can only change
//! with a restart, which voids them all.
//!
//! Failures are counted per sign-in source: the socket peer's address, and for a peer on this
//! host (loopback) also the local account that owns the connecting socket. Everyone who reaches
//! a loopback portal through an SSH tunnel or from a shell on the host is 127.0.0.1, so by
//! address alone one local user could lock every other out; by account, they lock only
//! themselves.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use base64::Engine as _;
use parking_lot::Mutex;
use rand::RngCore as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::time::Instant;

/// Wrong passes from one source within [`FAILURE_WINDOW`] that lock it.
pub(crate) const MAX_FAILURES: u32 = 5;
/// The window failures are counted in (from the first), and how long a lock lasts.
pub(crate) const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Sign-in sources remembered at once; the oldest are forgotten first.
const MAX_SOURCES: usize = 4096;
/// Sessions open at once; the one closest to expiry goes first when a new one needs room.
const MAX_SESSIONS: usize = 256;

/// Where sign-in attempts come from, for the lockout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SignInSource {
    pub peer: IpAddr,
    /// The account owning the connecting socket, for a peer on this host when it can be told.
    pub local_user: Option<u32>,
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

/// The pass, the sessions and the failure counts.
pub(crate) struct Auth {
    pass_digest: [u8; 32],
    /// Keyed by the SHA-256 of the cookie value, so the table holds nothing a cookie can be
    /// made from.
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    failures: Mutex<HashMap<SignInSource, Failures>>,
}

impl Auth {
    pub(crate) fn new(pass: &str) -> Auth {
        Auth {
            pass_digest: Sha256::digest(pass.as_bytes()).into(),
            sessions: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Checks `presented` (in constant time: both sides are hashed to the same length first)
    /// unless `source` is locked; a right pass opens a session lasting `ttl`.
    pub(crate) fn sign_in(&self, source: SignInSource, presented: &str, ttl: Duration) -> SignIn {
        let now = Instant::now();
        if let Some(left) = self.locked_for(source, now) {
            return SignIn::Locked(left);
        }
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        if !bool::from(digest.ct_eq(&self.pass_digest)) {
            self.count_failure(source, now);
            return SignIn::Wrong;
        }
        self.failures.lock().remove(&source);
        let cookie = self.open_session(now, ttl);
        SignIn::Opened { cookie }
    }

    fn locked_for(&self, source: SignInSource, now: Instant) -> Option<Duration> {
        let failures = self.failures.lock();
        let until = failures.get(&source)?.locked_until?;
        (until > now).then(|| until - now)
    }

    fn count_failure(&self, source: SignInSource, now: Instant) {
        let mut failures = self.failures.lock();
        if failures.len() >= MAX_SOURCES && !failures.contains_key(&source) {
            failures.retain(|_, record| still_relevant(record, now));
            if failures.len() >= MAX_SOURCES
                && let Some(oldest) = failures
                    .iter()
                    .min_by_key(|(_, record)| record.first)
                    .map(|(key, _)| *key)
            {
                failures.remove(&oldest);
            }
        }
        let record = failures.entry(source).or_insert(Failures {
            first: now,
            count: 0,
            locked_until: None,
        });
        if now.duration_since(record.first) >= FAILURE_WINDOW {
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
    }

    fn open_session(&self, now: Instant, ttl: Duration) -> String {
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
        self.failures
            .lock()
            .retain(|_, record| still_relevant(record, now));
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

/// Whether a CSRF token sent with a request is the session's (constant time).
pub(crate) fn csrf_matches(session: &Session, presented: &str) -> bool {
    presented.len() == session.csrf.len()
        && bool::from(presented.as_bytes().ct_eq(session.csrf.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASS: &str = "correct horse battery staple";
    const TTL: Duration = Duration::from_secs(3600);

    fn source(peer: &str, local_user: Option<u32>) -> SignInSource {
        SignInSource {
            peer: peer.parse().unwrap(),
            local_user,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn five_wrong_passes_lock_the_source_even_for_the_right_pass() {
        let auth = Auth::new(PASS);
        let operator = source("127.0.0.1", Some(1000));
        for _ in 0..4 {
            assert!(matches!(auth.sign_in(operator, "nope", TTL), SignIn::Wrong));
        }
        assert!(matches!(auth.sign_in(operator, "nope", TTL), SignIn::Wrong));
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
}
