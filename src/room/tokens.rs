//! Sharded store of waiting visitors' tokens.
//!
//! 64 independently locked shards, chosen by the token's first byte (tokens are random), so a reaper
//! or bulk-removal pass holds one shard at a time and polls on other shards never wait. Entries are
//! compact: times are milliseconds on the room's clock, the client is an `IpAddr`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::line::Key;

pub const SHARD_COUNT: usize = 64;

/// Raw token: 16 random bytes, sent to the client as 32 lowercase hex digits.
pub type TokenId = [u8; 16];

pub const SEEN: u8 = 1;
pub const PROMOTED: u8 = 2;
pub const HAS_PASS: u8 = 4;
/// Re-send cookies on the next accepted poll (set for restored tickets).
pub const REFRESH_DUE: u8 = 8;

/// One waiting visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub key: Key,
    pub created: u64,
    pub last_seen: u64,
    /// 0 = never polled.
    pub last_poll: u64,
    pub cookie_set_at: u64,
    pub client: Option<IpAddr>,
    pub flags: u8,
    /// Priority rank recorded for the portal (0 = guest).
    pub rank: u8,
}

impl Entry {
    pub fn new(key: Key, now: u64, client: Option<IpAddr>) -> Entry {
        Entry {
            key,
            created: now,
            last_seen: now,
            last_poll: 0,
            cookie_set_at: now,
            client,
            flags: 0,
            rank: 0,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    pub fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }
}

pub type Shard = HashMap<TokenId, Entry>;

#[derive(Debug)]
pub struct TokenStore {
    shards: Box<[Mutex<Shard>]>,
    count: AtomicU64,
}

impl TokenStore {
    pub fn new() -> TokenStore {
        TokenStore {
            shards: (0..SHARD_COUNT)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            count: AtomicU64::new(0),
        }
    }

    pub fn shard_index(token: &TokenId) -> usize {
        usize::from(token[0]) % SHARD_COUNT
    }

    pub fn lock_for(&self, token: &TokenId) -> MutexGuard<'_, Shard> {
        self.shards[Self::shard_index(token)].lock()
    }

    pub fn lock_shard(&self, index: usize) -> MutexGuard<'_, Shard> {
        self.shards[index % SHARD_COUNT].lock()
    }

    /// Live tokens.
    pub fn len(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Call with the shard locked, after inserting a new token.
    pub fn note_added(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Call with the shard locked, after removing `n` tokens.
    pub fn note_removed(&self, n: u64) {
        self.count.fetch_sub(n, Ordering::Relaxed);
    }
}

/// Parses a `room_ticket` cookie value (32 hex digits).
pub fn parse_token(text: &str) -> Option<TokenId> {
    let mut token = [0u8; 16];
    if text.len() != 32 {
        return None;
    }
    hex::decode_to_slice(text, &mut token).ok()?;
    Some(token)
}

pub fn token_hex(token: &TokenId) -> String {
    hex::encode(token)
}

/// Approximate heap bytes one queued visitor costs in the store: the map's key/value slot plus one
/// control byte, divided by the worst load factor a hash table keeps right after growing (7/16).
#[cfg(test)]
pub fn bytes_per_entry_estimate() -> usize {
    let slot = std::mem::size_of::<(TokenId, Entry)>() + 1;
    slot * 16 / 7
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trip_and_rejects() {
        let token = [0xabu8; 16];
        let text = token_hex(&token);
        assert_eq!(text.len(), 32);
        assert_eq!(text, text.to_lowercase());
        assert_eq!(parse_token(&text), Some(token));
        assert_eq!(parse_token("not-a-real-ticket"), None);
        assert_eq!(parse_token(&"g".repeat(32)), None);
        assert_eq!(parse_token(""), None);
    }

    #[test]
    fn a_queued_visitor_costs_well_under_256_bytes() {
        // Token store slot at the worst load factor, plus nothing else per visitor: the ghost ledger
        // and promotion table only grow with retirements and promotions, not with waiting visitors.
        let per_entry = bytes_per_entry_estimate();
        assert!(per_entry < 256, "{per_entry} bytes");
        assert!(std::mem::size_of::<Entry>() <= 72);
    }
}
