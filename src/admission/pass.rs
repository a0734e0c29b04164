//! The admission pass (`concert_admit`) and the priority grant (`concert_priority`): minting,
//! verification and the slide rule, under the current secret and, during a rotation, the
//! previous one.
//!
//! Pass layout (44 bytes, base64url without padding = 59 characters):
//! random id 16 | expiry unix seconds u64 big-endian 8 | key id 4 | HMAC-SHA256 tag truncated to 16.
//! Grant layout (41 bytes = 55 characters): pass id 16 | rank 1 | expiry u64 BE 8 | tag 16.
//!
//! Verification never allocates and does one HMAC over 28 bytes: the keyed HMAC state is built
//! once and cloned per use.

use std::cell::RefCell;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Hmac;
use rand::rngs::StdRng;
use rand::{RngCore as _, SeedableRng as _};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::sys::keyed_hash::{keyed, tag_of};

/// Raw pass length.
pub(crate) const PASS_BYTES: usize = 44;
/// Encoded pass length: only a value this long can decode to [`PASS_BYTES`].
pub(crate) const PASS_CHARS: usize = 59;
/// Raw grant length.
pub(crate) const GRANT_BYTES: usize = 41;
/// Encoded grant length.
pub(crate) const GRANT_CHARS: usize = 55;

const ID_BYTES: usize = 16;
const SIGNED_BYTES: usize = 28;
const TAG_BYTES: usize = 16;
const GRANT_SIGNED_BYTES: usize = 25;
const KEY_ID_LABEL: &[u8] = b"concert/admit/key-id";
const GRANT_KEY_LABEL: &[u8] = b"concert/priority/grant-key";

/// A pass's random identifier; per-pass asset pools and grants are keyed by it.
pub type PassId = [u8; ID_BYTES];

/// What a presented `concert_admit` value turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassStatus {
    /// No value (no cookie, or an empty one).
    Missing,
    /// Malformed, or a bad tag under a key we hold. Charged as abuse.
    Forged,
    /// Signed under a key we do not hold (a restart without a fixed secret, an old rotation,
    /// another fleet). Refused, never charged.
    Stale,
    /// Correctly signed but past its expiry.
    Expired,
    Valid(ValidPass),
}

impl PassStatus {
    /// The pass, when it is valid.
    pub fn valid(&self) -> Option<&ValidPass> {
        match self {
            PassStatus::Valid(pass) => Some(pass),
            _ => None,
        }
    }

    pub fn is_forged(&self) -> bool {
        matches!(self, PassStatus::Forged)
    }
}

/// A pass that verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidPass {
    pub id: PassId,
    /// Unix seconds.
    pub expiry: u64,
    /// Signed under `CONCERT_ADMIT_SECRET_PREVIOUS`: accepted, and moved to the current key at
    /// the next slide.
    pub previous_key: bool,
}

/// The gated page's pass after the issue/slide rule: the id the visitor ends up with, and the
/// new cookie value when one must be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageIssue {
    /// `None` only when the system's random source failed (no pass is issued then).
    pub id: Option<PassId>,
    pub cookie: Option<String>,
}

/// One signing secret with its derived values.
struct SigningKey {
    /// HMAC keyed with the secret; cloned for each tag.
    admit: Hmac<Sha256>,
    key_id: [u8; 4],
    /// HMAC keyed with the grant key derived from the secret.
    grant: Hmac<Sha256>,
}

impl SigningKey {
    fn new(secret: &[u8]) -> SigningKey {
        let admit = keyed(secret);
        let label_tag = tag_of(&admit, KEY_ID_LABEL);
        let key_id = [label_tag[0], label_tag[1], label_tag[2], label_tag[3]];
        let grant_key = tag_of(&admit, GRANT_KEY_LABEL);
        SigningKey {
            admit,
            key_id,
            grant: keyed(&grant_key),
        }
    }

    fn admit_tag(&self, signed: &[u8]) -> [u8; TAG_BYTES] {
        truncate(tag_of(&self.admit, signed))
    }

    fn grant_tag(&self, signed: &[u8]) -> [u8; TAG_BYTES] {
        truncate(tag_of(&self.grant, signed))
    }
}

fn truncate(full: [u8; 32]) -> [u8; TAG_BYTES] {
    let mut tag = [0u8; TAG_BYTES];
    tag.copy_from_slice(&full[..TAG_BYTES]);
    tag
}

/// Signs and verifies passes and grants. Process-wide: the secrets are fixed for the life of
/// the process; TTLs come from the settings in force at each call.
pub struct PassSigner {
    current: SigningKey,
    previous: Option<SigningKey>,
}

impl std::fmt::Debug for PassSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassSigner")
            .field("key_id", &hex::encode(self.current.key_id))
            .field("rotating", &self.previous.is_some())
            .finish()
    }
}

impl PassSigner {
    /// `previous` is the secret being rotated out; passes and grants signed under it stay valid
    /// until they expire. A previous secret equal to the current one is ignored.
    pub fn new(secret: &[u8], previous: Option<&[u8]>) -> PassSigner {
        PassSigner {
            current: SigningKey::new(secret),
            previous: previous
                .filter(|old| !old.is_empty() && *old != secret)
                .map(SigningKey::new),
        }
    }

    /// The current key id (first 4 bytes of HMAC(secret, `concert/admit/key-id`)).
    pub fn key_id(&self) -> [u8; 4] {
        self.current.key_id
    }

    /// The encoded pass for `id` expiring at `expiry` (unix seconds), under the current key.
    pub fn mint(&self, id: &PassId, expiry: u64) -> String {
        let mut raw = [0u8; PASS_BYTES];
        raw[..ID_BYTES].copy_from_slice(id);
        raw[ID_BYTES..24].copy_from_slice(&expiry.to_be_bytes());
        raw[24..SIGNED_BYTES].copy_from_slice(&self.current.key_id);
        let tag = self.current.admit_tag(&raw[..SIGNED_BYTES]);
        raw[SIGNED_BYTES..].copy_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// Verifies a presented value at `now` (unix seconds). The checks run cheapest first:
    /// empty, length, base64, key id, tag (constant time), expiry.
    pub fn verify(&self, value: &str, now: u64) -> PassStatus {
        if value.is_empty() {
            return PassStatus::Missing;
        }
        if value.len() != PASS_CHARS {
            return PassStatus::Forged;
        }
        let mut raw = [0u8; PASS_BYTES + 3];
        // Non-canonical final characters (non-zero trailing bits) are refused as forged:
        // nothing Concert mints looks like that.
        match URL_SAFE_NO_PAD.decode_slice(value.as_bytes(), &mut raw) {
            Ok(PASS_BYTES) => {}
            _ => return PassStatus::Forged,
        }
        let raw = &raw[..PASS_BYTES];
        let key_id = &raw[24..SIGNED_BYTES];
        let presented = &raw[SIGNED_BYTES..PASS_BYTES];
        let mut previous_key = false;
        let mut known_key = false;
        let mut authentic = false;
        if key_id == self.current.key_id {
            known_key = true;
            let tag = self.current.admit_tag(&raw[..SIGNED_BYTES]);
            authentic = bool::from(tag.ct_eq(presented));
        }
        if !authentic && let Some(previous) = &self.previous {
            // A 32-bit key-id collision between the two secrets must not make old passes look
            // forged, so the previous key is tried whenever its id matches.
            if key_id == previous.key_id {
                known_key = true;
                let tag = previous.admit_tag(&raw[..SIGNED_BYTES]);
                authentic = bool::from(tag.ct_eq(presented));
                previous_key = authentic;
            }
        }
        if !known_key {
            return PassStatus::Stale;
        }
        if !authentic {
            return PassStatus::Forged;
        }
        let mut id = [0u8; ID_BYTES];
        id.copy_from_slice(&raw[..ID_BYTES]);
        let mut expiry_bytes = [0u8; 8];
        expiry_bytes.copy_from_slice(&raw[ID_BYTES..24]);
        let expiry = u64::from_be_bytes(expiry_bytes);
        if now >= expiry {
            return PassStatus::Expired;
        }
        PassStatus::Valid(ValidPass {
            id,
            expiry,
            previous_key,
        })
    }

    /// Verifies an optional cookie value (absent = missing).
    pub fn verify_cookie(&self, cookie: Option<&str>, now: u64) -> PassStatus {
        match cookie {
            Some(value) => self.verify(value, now),
            None => PassStatus::Missing,
        }
    }

    /// The re-signed value of a valid pass that is past half of `ttl`, same id, new expiry
    /// `now + ttl`; `None` while it is fresher than that.
    pub fn slide(&self, pass: &ValidPass, now: u64, ttl: Duration) -> Option<String> {
        let remaining = Duration::from_secs(pass.expiry.saturating_sub(now));
        (remaining <= ttl / 2).then(|| self.mint(&pass.id, expiry_at(now, ttl)))
    }

    /// The rule for an admitted page: keep and maybe slide a valid pass; otherwise mint a new
    /// one with a fresh random id. The caller charges a forged status.
    pub fn issue_for_page(&self, status: &PassStatus, now: u64, ttl: Duration) -> PageIssue {
        if let PassStatus::Valid(pass) = status {
            return PageIssue {
                id: Some(pass.id),
                cookie: self.slide(pass, now, ttl),
            };
        }
        match new_pass_id() {
            Some(id) => PageIssue {
                id: Some(id),
                cookie: Some(self.mint(&id, expiry_at(now, ttl))),
            },
            None => {
                tracing::warn!("admission pass: the system random source failed; no pass issued");
                PageIssue {
                    id: None,
                    cookie: None,
                }
            }
        }
    }

    /// The grant binding `rank` to pass `id` until `expiry`, under the current key.
    pub fn sign_grant(&self, id: &PassId, rank: u8, expiry: u64) -> String {
        let mut raw = [0u8; GRANT_BYTES];
        raw[..ID_BYTES].copy_from_slice(id);
        raw[ID_BYTES] = rank;
        raw[ID_BYTES + 1..GRANT_SIGNED_BYTES].copy_from_slice(&expiry.to_be_bytes());
        let tag = self.current.grant_tag(&raw[..GRANT_SIGNED_BYTES]);
        raw[GRANT_SIGNED_BYTES..].copy_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// The rank of a grant that is authentic, unexpired and bound to `pass`; `None` otherwise.
    pub fn verify_grant(&self, value: &str, pass: &PassId, now: u64) -> Option<u8> {
        if value.len() != GRANT_CHARS {
            return None;
        }
        let mut raw = [0u8; GRANT_BYTES + 3];
        match URL_SAFE_NO_PAD.decode_slice(value.as_bytes(), &mut raw) {
            Ok(GRANT_BYTES) => {}
            _ => return None,
        }
        let signed = &raw[..GRANT_SIGNED_BYTES];
        let presented = &raw[GRANT_SIGNED_BYTES..GRANT_BYTES];
        let authentic = bool::from(self.current.grant_tag(signed).ct_eq(presented))
            || self
                .previous
                .as_ref()
                .is_some_and(|previous| bool::from(previous.grant_tag(signed).ct_eq(presented)));
        if !authentic || !bool::from(raw[..ID_BYTES].ct_eq(pass)) {
            return None;
        }
        let mut expiry_bytes = [0u8; 8];
        expiry_bytes.copy_from_slice(&raw[ID_BYTES + 1..GRANT_SIGNED_BYTES]);
        (now < u64::from_be_bytes(expiry_bytes)).then_some(raw[ID_BYTES])
    }
}

/// `floor(now + ttl)` in unix seconds.
pub(crate) fn expiry_at(now: u64, ttl: Duration) -> u64 {
    now.saturating_add(ttl.as_secs())
}

/// Pass ids a thread draws from one seed (64 KiB of output) before it reseeds from the OS.
const IDS_PER_SEED: u32 = 4096;

thread_local! {
    /// A ChaCha generator per thread, seeded from the operating system: an id costs no system
    /// call, and reseeding bounds how much output any one seed ever produces.
    static ID_GENERATOR: RefCell<Option<(StdRng, u32)>> = const { RefCell::new(None) };
}

/// A fresh, unguessable pass id; `None` only if the operating system's random source has
/// never been readable on this thread.
pub(crate) fn new_pass_id() -> Option<PassId> {
    ID_GENERATOR.with_borrow_mut(|slot| {
        if slot
            .as_ref()
            .is_none_or(|(_, drawn)| *drawn >= IDS_PER_SEED)
        {
            match StdRng::try_from_os_rng() {
                Ok(fresh) => *slot = Some((fresh, 0)),
                // A failed reseed keeps the current generator, which is still sound; it is
                // retried on the next id.
                Err(err) => tracing::warn!(error = %err, "pass: reseeding from the OS failed"),
            }
        }
        let (generator, drawn) = slot.as_mut()?;
        *drawn = drawn.saturating_add(1);
        let mut id = [0u8; ID_BYTES];
        generator.fill_bytes(&mut id);
        Some(id)
    })
}

/// The wall clock in unix seconds (passes carry wall-clock expiries so they survive restarts).
pub fn unix_now() -> u64 {
    crate::sys::coarse_clock::unix_seconds()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(600);
    const EXPIRY: u64 = 1_767_225_600;
    const SECRET_A: &[u8] = b"concert-test-secret-0123456789abcdef";
    const VALUE_A: &str = "AAECAwQFBgcICQoLDA0ODwAAAABpVbkAiqBnfV_CAmSmyNUQIs_eCnqmxdo";

    fn id_a() -> PassId {
        core::array::from_fn(|i| i as u8)
    }

    fn id_b() -> PassId {
        let mut id = [0u8; 16];
        id[..3].copy_from_slice(&[9, 8, 7]);
        id
    }

    fn valid(status: PassStatus) -> ValidPass {
        *status.valid().expect("a valid pass")
    }

    #[test]
    fn vector_a_matches_byte_for_byte() {
        let signer = PassSigner::new(SECRET_A, None);
        assert_eq!(hex::encode(signer.key_id()), "8aa0677d");
        let value = signer.mint(&id_a(), EXPIRY);
        assert_eq!(value, VALUE_A);
        let raw = URL_SAFE_NO_PAD.decode(&value).unwrap();
        assert_eq!(
            hex::encode(raw),
            "000102030405060708090a0b0c0d0e0f000000006955b9008aa0677d5fc20264a6c8d51022cfde0a7aa6c5da"
        );
        assert_eq!(expiry_at(1_767_225_000, TTL), EXPIRY);
        let pass = valid(signer.verify(VALUE_A, 1_767_225_599));
        assert_eq!((pass.id, pass.expiry), (id_a(), EXPIRY));
        assert_eq!(signer.verify(VALUE_A, EXPIRY), PassStatus::Expired);
    }

    #[test]
    fn vector_a_slides_at_exactly_half_the_ttl() {
        let signer = PassSigner::new(SECRET_A, None);
        let at_half = valid(signer.verify(VALUE_A, 1_767_225_300));
        let slid = signer
            .slide(&at_half, 1_767_225_300, TTL)
            .expect("re-issued");
        let again = valid(signer.verify(&slid, 1_767_225_300));
        assert_eq!(again.id, id_a());
        assert_eq!(again.expiry, 1_767_225_900);
        let fresher = valid(signer.verify(VALUE_A, 1_767_225_299));
        assert_eq!(signer.slide(&fresher, 1_767_225_299, TTL), None);
    }

    #[test]
    fn vector_a_with_one_character_changed_is_forged() {
        let signer = PassSigner::new(SECRET_A, None);
        let tampered = "AAECAAQFBgcICQoLDA0ODwAAAABpVbkAiqBnfV_CAmSmyNUQIs_eCnqmxdo";
        assert_eq!(VALUE_A.chars().nth(5), Some('w'));
        assert_eq!(signer.verify(tampered, 1_767_225_000), PassStatus::Forged);
    }

    #[test]
    fn vectors_b_c_d_match_and_another_secret_is_stale() {
        let b = PassSigner::new(&[b's'; 32], None);
        assert_eq!(hex::encode(b.key_id()), "ca1ce39c");
        assert_eq!(
            b.mint(&id_b(), EXPIRY),
            "CQgHAAAAAAAAAAAAAAAAAAAAAABpVbkAyhzjnA4aEBM87KwRyNH5zktey2Y"
        );
        let c = PassSigner::new(&[b'x'; 32], None);
        assert_eq!(hex::encode(c.key_id()), "6ca56391");
        let value_c = c.mint(&id_b(), EXPIRY);
        assert_eq!(
            value_c,
            "CQgHAAAAAAAAAAAAAAAAAAAAAABpVbkAbKVjkb1I2EEIbdpD07g4lntWykc"
        );
        assert_eq!(b.verify(&value_c, 1_767_225_000), PassStatus::Stale);
        let d = PassSigner::new(&[b'o'; 32], None);
        assert_eq!(hex::encode(d.key_id()), "b8a9baa0");
        let mut id_d = [0u8; 16];
        id_d[0] = 1;
        assert_eq!(
            d.mint(&id_d, EXPIRY),
            "AQAAAAAAAAAAAAAAAAAAAAAAAABpVbkAuKm6oIb95Q8vaq8IY1EtgZ3UZeY"
        );
    }

    #[test]
    fn round_trip_and_every_bad_shape() {
        let signer = PassSigner::new(&[7u8; 32], None);
        let now = 1_000_000;
        let ttl = Duration::from_secs(60);
        let issue = signer.issue_for_page(&PassStatus::Missing, now, ttl);
        let value = issue.cookie.unwrap();
        assert_eq!(value.len(), PASS_CHARS);
        let pass = valid(signer.verify(&value, now));
        assert_eq!(Some(pass.id), issue.id);
        assert_eq!(pass.expiry, now + 60);
        assert_eq!(signer.verify(&value, now + 60), PassStatus::Expired);
        let other = PassSigner::new(&[8u8; 32], None);
        assert_eq!(other.verify(&value, now), PassStatus::Stale);
        for bad in [
            "nope",
            "!!!!",
            &format!("{value}A"),
            &"!".repeat(PASS_CHARS),
        ] {
            assert_eq!(signer.verify(bad, now), PassStatus::Forged, "{bad}");
        }
        assert_eq!(signer.verify("", now), PassStatus::Missing);
        assert_eq!(signer.verify_cookie(None, now), PassStatus::Missing);
    }

    #[test]
    fn non_canonical_trailing_bits_are_forged() {
        let signer = PassSigner::new(SECRET_A, None);
        // The last character carries 2 unused bits; `o` → `p` sets one of them.
        let odd = format!("{}p", &VALUE_A[..PASS_CHARS - 1]);
        assert_eq!(signer.verify(&odd, 1_767_225_000), PassStatus::Forged);
    }

    #[test]
    fn pass_ids_do_not_repeat_across_reseeds_and_threads() {
        let draws = usize::try_from(IDS_PER_SEED).unwrap() * 2 + 10;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..draws {
            assert!(seen.insert(new_pass_id().unwrap()));
        }
        let other: Vec<PassId> =
            std::thread::spawn(|| (0..100).map(|_| new_pass_id().unwrap()).collect())
                .join()
                .unwrap();
        for id in other {
            assert!(seen.insert(id), "another thread repeated an id");
        }
    }

    #[test]
    fn page_rule_keeps_fresh_slides_old_and_replaces_invalid() {
        let signer = PassSigner::new(&[1u8; 32], None);
        let now = 5_000_000;
        let fresh = signer.mint(&id_a(), now + 600);
        let issue = signer.issue_for_page(&signer.verify(&fresh, now), now, TTL);
        assert_eq!(issue.id, Some(id_a()));
        assert_eq!(issue.cookie, None);
        // Minted three quarters of the TTL ago.
        let old = signer.mint(&id_a(), now + 150);
        let issue = signer.issue_for_page(&signer.verify(&old, now), now, TTL);
        assert_eq!(issue.id, Some(id_a()));
        let slid = valid(signer.verify(&issue.cookie.unwrap(), now));
        assert_eq!((slid.id, slid.expiry), (id_a(), now + 600));
        for status in [PassStatus::Forged, PassStatus::Stale, PassStatus::Expired] {
            let issue = signer.issue_for_page(&status, now, TTL);
            let minted = valid(signer.verify(&issue.cookie.unwrap(), now));
            assert_eq!(Some(minted.id), issue.id);
            assert_ne!(minted.id, id_a());
        }
    }

    #[test]
    fn previous_secret_keeps_old_passes_valid_and_slides_them_to_the_new_key() {
        let old = PassSigner::new(&[b'o'; 32], None);
        let rotated = PassSigner::new(&[b'n'; 32], Some(&[b'o'; 32]));
        let now = 2_000_000;
        let value = old.mint(&id_a(), now + 100);
        let pass = valid(rotated.verify(&value, now));
        assert!(pass.previous_key);
        let slid = rotated.slide(&pass, now, TTL).unwrap();
        let moved = valid(rotated.verify(&slid, now));
        assert!(!moved.previous_key);
        assert_eq!(moved.id, id_a());
        assert_eq!(
            PassSigner::new(&[b'n'; 32], None).verify(&slid, now),
            moved.into_status()
        );
        // A tampered old pass is forged, not stale: its key is known.
        let mut tampered = value.clone().into_bytes();
        tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert_eq!(rotated.verify(&tampered, now), PassStatus::Forged);
        // Past its expiry the old pass is just expired.
        assert_eq!(rotated.verify(&value, now + 100), PassStatus::Expired);
    }

    impl ValidPass {
        fn into_status(self) -> PassStatus {
            PassStatus::Valid(self)
        }
    }

    #[test]
    fn grants_bind_to_one_pass_and_expire() {
        let signer = PassSigner::new(&[3u8; 32], None);
        let grant = signer.sign_grant(&id_a(), 3, 100);
        assert_eq!(grant.len(), GRANT_CHARS);
        assert_eq!(signer.verify_grant(&grant, &id_a(), 99), Some(3));
        assert_eq!(signer.verify_grant(&grant, &id_b(), 99), None);
        assert_eq!(signer.verify_grant(&grant, &id_a(), 100), None);
        let other = PassSigner::new(&[4u8; 32], None);
        assert_eq!(other.verify_grant(&grant, &id_a(), 99), None);
        let rotated = PassSigner::new(&[4u8; 32], Some(&[3u8; 32]));
        assert_eq!(rotated.verify_grant(&grant, &id_a(), 99), Some(3));
        assert_eq!(signer.verify_grant("garbage", &id_a(), 0), None);
    }

    proptest::proptest! {
        #[test]
        fn verify_never_panics_and_random_text_is_never_valid(text in ".{0,80}") {
            let signer = PassSigner::new(&[9u8; 32], None);
            let status = signer.verify(&text, 0);
            proptest::prop_assert!(status.valid().is_none());
            let _ = signer.verify_grant(&text, &[0u8; 16], 0);
        }
    }
}
