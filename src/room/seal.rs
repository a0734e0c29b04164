//! Tickets Concert can recognise as its own.
//!
//! A ticket is 16 bytes: 8 random bytes, then the first 8 bytes of an HMAC-SHA256 of them under a
//! key derived from the admission secret. A ticket the room no longer holds (expired, removed,
//! or issued before a restart) still carries a valid tag, so its holder is a returning visitor;
//! a made-up value, or one sealed under another secret, carries no valid tag and counts as no
//! ticket at all. Without the tag, any cookie value at all would spare a client the strike a
//! cookieless newcomer costs, and one address could fill the line.
//!
//! Tickets restored from a queue snapshot written before tickets were sealed are found in the
//! store, so they keep working; only their expired copies lose the benefit of the doubt.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::tokens::TokenId;
use crate::sys::keyed_hash::{keyed, tag_of};

/// Bytes of the ticket that are random; the rest is the tag.
const NONCE_BYTES: usize = 8;

/// Label the ticket key is derived under, so it never equals the key passes are signed with.
const TICKET_KEY_LABEL: &[u8] = b"concert/room/ticket-key";

/// The key (and, during a secret rotation, the previous key) tickets are sealed with.
#[derive(Clone)]
pub struct TicketSeal {
    current: Hmac<Sha256>,
    previous: Option<Hmac<Sha256>>,
}

impl std::fmt::Debug for TicketSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketSeal")
            .field("rotating", &self.previous.is_some())
            .finish_non_exhaustive()
    }
}

impl TicketSeal {
    /// Seals under a key derived from the admission secret; tickets sealed under `previous`
    /// (the secret being rotated out) are still recognised.
    pub fn from_secret(secret: &[u8], previous: Option<&[u8]>) -> TicketSeal {
        TicketSeal {
            current: derived_key(secret),
            previous: previous
                .filter(|old| !old.is_empty() && *old != secret)
                .map(derived_key),
        }
    }

    /// A key of its own, for a room without a configured secret: its tickets are recognised
    /// for the life of the process.
    pub fn random() -> TicketSeal {
        TicketSeal::from_secret(&rand::random::<[u8; 32]>(), None)
    }

    /// A new ticket: random bytes followed by their tag.
    pub(super) fn issue(&self) -> TokenId {
        let mut token = [0u8; 16];
        token[..NONCE_BYTES].copy_from_slice(&rand::random::<[u8; NONCE_BYTES]>());
        let tag = tag_of(&self.current, &token[..NONCE_BYTES]);
        token[NONCE_BYTES..].copy_from_slice(&tag[..16 - NONCE_BYTES]);
        token
    }

    /// Whether `token` was issued under the current or the previous key.
    pub(super) fn issued_here(&self, token: &TokenId) -> bool {
        let (nonce, tag) = token.split_at(NONCE_BYTES);
        std::iter::once(&self.current)
            .chain(&self.previous)
            .any(|key| {
                let mut mac = key.clone();
                mac.update(nonce);
                // Constant-time comparison of the truncated tag.
                mac.verify_truncated_left(tag).is_ok()
            })
    }
}

fn derived_key(secret: &[u8]) -> Hmac<Sha256> {
    keyed(&tag_of(&keyed(secret), TICKET_KEY_LABEL))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const OTHER: &[u8] = b"fedcba9876543210fedcba9876543210";

    #[test]
    fn issued_tickets_are_recognised_and_made_up_ones_are_not() {
        let seal = TicketSeal::from_secret(SECRET, None);
        let token = seal.issue();
        assert!(seal.issued_here(&token));
        assert!(!seal.issued_here(&[0u8; 16]));
        let mut tampered = token;
        tampered[0] ^= 1;
        assert!(!seal.issued_here(&tampered));
        let mut retagged = token;
        retagged[15] ^= 0x80;
        assert!(!seal.issued_here(&retagged));
    }

    #[test]
    fn two_tickets_differ() {
        let seal = TicketSeal::from_secret(SECRET, None);
        assert_ne!(seal.issue(), seal.issue());
    }

    #[test]
    fn another_secret_does_not_recognise_them_but_a_rotation_does() {
        let old = TicketSeal::from_secret(OTHER, None);
        let token = old.issue();
        assert!(!TicketSeal::from_secret(SECRET, None).issued_here(&token));
        let rotating = TicketSeal::from_secret(SECRET, Some(OTHER));
        assert!(rotating.issued_here(&token));
        assert!(rotating.issued_here(&rotating.issue()));
        // The same secret twice is no rotation.
        assert!(
            TicketSeal::from_secret(SECRET, Some(SECRET))
                .previous
                .is_none()
        );
    }

    #[test]
    fn the_ticket_key_is_not_the_secret_itself() {
        let seal = TicketSeal::from_secret(SECRET, None);
        let token = seal.issue();
        let mut plain = keyed(SECRET);
        plain.update(&token[..NONCE_BYTES]);
        assert!(plain.verify_truncated_left(&token[NONCE_BYTES..]).is_err());
    }
}
