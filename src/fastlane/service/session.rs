//! Fast-lane sessions: self-contained signed tokens `nonce.expUnix.mac`, their stable session
//! id, and the CSRF value bound to each token.
//!
//! `mac(x)` is base64url (no padding) of HMAC-SHA256 under the admit secret over
//! `"concert/fastlane/v1/" + x`. The keyed state with that prefix already absorbed is built once
//! and cloned per check, so verifying a token costs three SHA-256 blocks and no allocation.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac as _};
use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::sys::keyed_hash::keyed;

/// Domain separation for every MAC the fast lane makes.
const MAC_PREFIX: &[u8] = b"concert/fastlane/v1/";
/// Random bytes in a session nonce.
const NONCE_BYTES: usize = 24;
/// The nonce as base64url: 24 bytes encode to exactly 32 characters, no trailing bits.
const NONCE_CHARS: usize = 32;
/// A MAC as base64url: 32 bytes → 43 characters.
const MAC_CHARS: usize = 43;
/// The longest token accepted: nonce, a 20-digit expiry, the MAC and two dots.
const MAX_TOKEN_CHARS: usize = NONCE_CHARS + 1 + 20 + 1 + MAC_CHARS;

/// How long a freshly issued or renewed token lives.
pub const SESSION_SECONDS: u64 = 24 * 3600;
/// Tokens claiming to live longer than this from now are refused (clock skew allowance).
pub const MAX_SESSION_AHEAD: u64 = 25 * 3600;
/// A token with less than this left must be renewed before paying: a pass (≤ 1 h) plus the
/// longest settlement (≤ 390 s) must fit inside the session that bought it.
pub const RENEWAL_WINDOW: u64 = 2 * 3600;

/// A session id: SHA-256 of `"session/" + nonce`; hex in the journal and on the wire.
pub type SessionId = [u8; 32];

/// A token that verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    pub id: SessionId,
    pub expires: u64,
}

impl Session {
    pub fn id_hex(&self) -> String {
        hex::encode(self.id)
    }
}

/// The keys sessions are signed with.
#[derive(Clone)]
pub struct SessionKeys {
    prefixed: Hmac<Sha256>,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

impl SessionKeys {
    pub fn new(admit_secret: &[u8]) -> SessionKeys {
        let mut prefixed = keyed(admit_secret);
        prefixed.update(MAC_PREFIX);
        SessionKeys { prefixed }
    }

    /// `mac(x)` as raw bytes (deposit intents take numbers from it).
    pub(crate) fn mac_raw(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.prefixed.clone();
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// `mac(x)` as text.
    pub fn mac(&self, parts: &[&[u8]]) -> String {
        URL_SAFE_NO_PAD.encode(self.mac_raw(parts))
    }

    /// A token for a new session (random nonce) or a renewal of `existing` (same nonce, so the
    /// same session id), valid for [`SESSION_SECONDS`] from `now`.
    pub fn issue(&self, existing: Option<&str>, now: u64) -> (String, Session) {
        let nonce = match existing.and_then(|token| token.split('.').next()) {
            Some(nonce) if nonce.len() == NONCE_CHARS => nonce.to_owned(),
            _ => {
                let mut raw = [0u8; NONCE_BYTES];
                rand::rng().fill_bytes(&mut raw);
                URL_SAFE_NO_PAD.encode(raw)
            }
        };
        let expires = now + SESSION_SECONDS;
        let signed = format!("{nonce}.{expires}");
        let mac = self.mac(&[signed.as_bytes()]);
        let session = Session {
            id: session_id(nonce.as_bytes()),
            expires,
        };
        (format!("{signed}.{mac}"), session)
    }

    /// The session a token names, if its MAC matches and its expiry lies in
    /// `(now, now + 25 h]`. Never allocates.
    pub fn verify(&self, token: &str, now: u64) -> Option<Session> {
        if token.len() > MAX_TOKEN_CHARS {
            return None;
        }
        let bytes = token.as_bytes();
        let first_dot = memchr::memchr(b'.', bytes)?;
        let last_dot = memchr::memrchr(b'.', bytes)?;
        if first_dot != NONCE_CHARS || last_dot <= first_dot + 1 {
            return None;
        }
        let nonce = &bytes[..first_dot];
        let expiry_text = &bytes[first_dot + 1..last_dot];
        let presented_mac = &bytes[last_dot + 1..];
        if presented_mac.len() != MAC_CHARS || !nonce.iter().all(|b| is_base64url(*b)) {
            return None;
        }
        let expires = parse_unix(expiry_text)?;
        if expires <= now || expires > now.saturating_add(MAX_SESSION_AHEAD) {
            return None;
        }
        let mut decoded = [0u8; 33];
        let written = URL_SAFE_NO_PAD
            .decode_slice(presented_mac, &mut decoded)
            .ok()?;
        if written != 32 {
            return None;
        }
        let expected = self.mac_raw(&[&bytes[..last_dot]]);
        if !bool::from(expected.ct_eq(&decoded[..32])) {
            return None;
        }
        Some(Session {
            id: session_id(nonce),
            expires,
        })
    }

    /// The CSRF value bound to `token`.
    pub fn csrf(&self, token: &str) -> String {
        self.mac(&[b"csrf/", token.as_bytes()])
    }

    /// Whether `presented` is the CSRF value of `token`, compared in constant time.
    pub fn csrf_matches(&self, token: &str, presented: &str) -> bool {
        let expected = self.mac_raw(&[b"csrf/", token.as_bytes()]);
        let mut decoded = [0u8; 33];
        presented.len() == MAC_CHARS
            && URL_SAFE_NO_PAD
                .decode_slice(presented.as_bytes(), &mut decoded)
                .is_ok_and(|n| n == 32)
            && bool::from(expected.ct_eq(&decoded[..32]))
    }
}

/// SHA-256 of `"session/" + nonce`.
pub fn session_id(nonce: &[u8]) -> SessionId {
    let mut hash = Sha256::new();
    hash.update(b"session/");
    hash.update(nonce);
    hash.finalize().into()
}

fn is_base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Decimal seconds, digits only (no sign, no spaces), without overflow.
fn parse_unix(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 20 {
        return None;
    }
    text.iter().try_fold(0u64, |acc, b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn keys() -> SessionKeys {
        SessionKeys::new(b"0123456789abcdef0123456789abcdef")
    }

    #[test]
    fn issued_token_verifies_and_renewal_keeps_the_id() {
        let keys = keys();
        let (token, session) = keys.issue(None, NOW);
        assert_eq!(token.split('.').count(), 3);
        assert_eq!(token.split('.').next().map(str::len), Some(32));
        assert_eq!(keys.verify(&token, NOW), Some(session));
        let (renewed, again) = keys.issue(Some(&token), NOW + 3600);
        assert_ne!(renewed, token);
        assert_eq!(again.id, session.id);
        assert_eq!(again.expires, NOW + 3600 + SESSION_SECONDS);
    }

    #[test]
    fn mac_follows_the_documented_construction() {
        let keys = keys();
        let (token, _) = keys.issue(None, NOW);
        let (signed, mac) = token.rsplit_once('.').unwrap();
        let mut direct = keyed(b"0123456789abcdef0123456789abcdef");
        direct.update(format!("concert/fastlane/v1/{signed}").as_bytes());
        assert_eq!(URL_SAFE_NO_PAD.encode(direct.finalize().into_bytes()), mac);
        let nonce = signed.split('.').next().unwrap();
        let expected = Sha256::digest(format!("session/{nonce}").as_bytes());
        assert_eq!(
            keys.verify(&token, NOW).unwrap().id_hex(),
            hex::encode(expected)
        );
    }

    #[test]
    fn forged_expired_and_far_future_tokens_fail() {
        let keys = keys();
        let (token, _) = keys.issue(None, NOW);
        let other = SessionKeys::new(b"another secret of thirty-two bytes!!");
        assert!(other.verify(&token, NOW).is_none());
        assert!(keys.verify(&token, NOW + SESSION_SECONDS).is_none());
        let (nonce, rest) = token.split_once('.').unwrap();
        let (_, mac) = rest.split_once('.').unwrap();
        let stretched = format!("{nonce}.{}.{mac}", NOW + SESSION_SECONDS + 1);
        assert!(keys.verify(&stretched, NOW).is_none());
        let far = format!("{nonce}.{}", NOW + MAX_SESSION_AHEAD + 1);
        let far = format!("{far}.{}", keys.mac(&[far.as_bytes()]));
        assert!(keys.verify(&far, NOW).is_none());
        for bad in ["", "a.b.c", "..", &token[1..], &format!("{token}x")] {
            assert!(keys.verify(bad, NOW).is_none(), "{bad}");
        }
    }

    #[test]
    fn csrf_is_bound_to_the_token() {
        let keys = keys();
        let (token, _) = keys.issue(None, NOW);
        let (other, _) = keys.issue(None, NOW);
        let csrf = keys.csrf(&token);
        assert!(keys.csrf_matches(&token, &csrf));
        assert!(!keys.csrf_matches(&other, &csrf));
        assert!(!keys.csrf_matches(&token, ""));
    }
}
