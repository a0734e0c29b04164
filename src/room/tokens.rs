//! Sharded store of waiting visitors' tokens.
//!
//! 64 independently locked shards, chosen by the token's first byte (tokens are random), so a reaper
//! or bulk-removal pass holds one shard at a time and polls on other shards never wait. Entries are
//! compact: times are milliseconds on the room's clock, the client is an `IpAddr`.
//!
//! The store also keeps apart the tokens that have not proved themselves yet (never seen since
//! their page was sent): how many there are, and the order they came in, so the room can bound
//! them without a scan. Locks: a shard, then the order; never the other way round.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::line::Key;

pub(super) use crate::sys::shard::SHARD_COUNT;

/// Raw token: 16 random bytes, sent to the client as 32 lowercase hex digits.
pub(super) type TokenId = [u8; 16];

pub(super) const SEEN: u8 = 1;
pub(super) const PROMOTED: u8 = 2;
pub(super) const HAS_PASS: u8 = 4;
/// Re-send cookies on the next accepted poll (set for restored tickets).
pub(super) const REFRESH_DUE: u8 = 8;

/// `last_poll` holds a time (a ticket polled at its very first millisecond has offset 0).
pub(super) const POLLED: u8 = 16;

/// One waiting visitor.
///
/// Every waiting visitor has one of these, so it is kept small: the times after `created` are
/// stored as milliseconds after it in 32 bits, which covers 49 days. A ticket kept alive in
/// line for longer moves `created` forward as needed: every time within 49 days of the newest
/// stays exact, and only older ones (the joining time, mostly) are clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Entry {
    pub key: Key,
    /// Room clock, milliseconds.
    created: u64,
    seen_after: u32,
    polled_after: u32,
    cookie_after: u32,
    pub client: Option<IpAddr>,
    pub flags: u8,
    /// Priority rank recorded for the portal (0 = guest).
    pub rank: u8,
}

impl Entry {
    pub(super) fn new(key: Key, now: u64, client: Option<IpAddr>) -> Entry {
        Entry {
            key,
            created: now,
            seen_after: 0,
            polled_after: 0,
            cookie_after: 0,
            client,
            flags: 0,
            rank: 0,
        }
    }

    pub(super) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    pub(super) fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    pub(super) fn created(&self) -> u64 {
        self.created
    }

    /// The visitor came back with the cookie: seen now, cookies sent again now, pass status as
    /// found. Returns whether this is the first sign of them (the entry was not yet `SEEN`).
    pub(super) fn came_back(&mut self, now: u64, has_pass: bool) -> bool {
        let first_sign = !self.has(SEEN);
        self.set_last_seen(now);
        self.set_cookie_set_at(now);
        self.set(SEEN, true);
        self.set(HAS_PASS, has_pass);
        self.set(REFRESH_DUE, false);
        first_sign
    }

    pub(super) fn last_seen(&self) -> u64 {
        self.created + u64::from(self.seen_after)
    }

    pub(super) fn set_last_seen(&mut self, at: u64) {
        self.seen_after = self.offset_of(at);
    }

    /// `None` until the first status poll.
    pub(super) fn last_poll(&self) -> Option<u64> {
        self.has(POLLED)
            .then(|| self.created + u64::from(self.polled_after))
    }

    pub(super) fn set_last_poll(&mut self, at: u64) {
        self.polled_after = self.offset_of(at);
        self.set(POLLED, true);
    }

    pub(super) fn cookie_set_at(&self) -> u64 {
        self.created + u64::from(self.cookie_after)
    }

    pub(super) fn set_cookie_set_at(&mut self, at: u64) {
        self.cookie_after = self.offset_of(at);
    }

    /// `at` as an offset from `created`; a time before `created` (only from an odd snapshot)
    /// counts as `created`. Past the 32-bit range, `created` moves forward and the other
    /// offsets with it, so every recorded time stays where it was or (if even older) at the
    /// new `created`.
    fn offset_of(&mut self, at: u64) -> u32 {
        let offset = at.saturating_sub(self.created);
        let Some(excess) = offset.checked_sub(u64::from(u32::MAX)).filter(|e| *e > 0) else {
            return offset as u32;
        };
        self.created += excess;
        let keep = |after: u32| u64::from(after).saturating_sub(excess) as u32;
        self.seen_after = keep(self.seen_after);
        self.polled_after = keep(self.polled_after);
        self.cookie_after = keep(self.cookie_after);
        u32::MAX
    }
}

pub(super) type Shard = HashMap<TokenId, Entry>;

/// Stale entries in the unproven order tolerated beyond twice the live ones before the reaper
/// compacts it.
const ORDER_SLACK: u64 = 1_024;

#[derive(Debug)]
pub(super) struct TokenStore {
    shards: Box<[Mutex<Shard>]>,
    count: AtomicU64,
    /// Live tokens without `SEEN`.
    unproven: AtomicU64,
    /// Tokens in the order they were stored without `SEEN`, oldest first. An entry whose token
    /// was seen or removed since is stale: it is dropped when it reaches the front (or by
    /// `compact_unproven_order`), which keeps every change O(1).
    unproven_order: Mutex<VecDeque<TokenId>>,
    /// Live tokens per client address (IPv6: per /64).
    per_address: AddressCounts,
}

impl TokenStore {
    pub(super) fn new() -> TokenStore {
        TokenStore {
            shards: (0..SHARD_COUNT)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            count: AtomicU64::new(0),
            unproven: AtomicU64::new(0),
            unproven_order: Mutex::new(VecDeque::new()),
            per_address: AddressCounts::new(),
        }
    }

    pub(super) fn shard_index(token: &TokenId) -> usize {
        crate::sys::shard::staggered(u32::from_le_bytes([token[0], token[1], token[2], token[3]]))
    }

    pub(super) fn lock_for(&self, token: &TokenId) -> MutexGuard<'_, Shard> {
        self.shards[Self::shard_index(token)].lock()
    }

    pub(super) fn lock_shard(&self, index: usize) -> MutexGuard<'_, Shard> {
        self.shards[index % SHARD_COUNT].lock()
    }

    /// Live tokens.
    pub(super) fn len(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Live tokens that have not been seen since their page was sent.
    pub(super) fn unproven(&self) -> u64 {
        self.unproven.load(Ordering::Relaxed)
    }

    /// Live tokens that have been seen (polled, or came back with their cookie).
    pub(super) fn proven(&self) -> u64 {
        self.len().saturating_sub(self.unproven())
    }

    /// Call with the shard locked, after inserting `entry` under a new `token`.
    pub(super) fn note_added(&self, token: &TokenId, entry: &Entry) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Some(client) = entry.client {
            self.per_address.add(client);
        }
        if !entry.has(SEEN) {
            self.unproven.fetch_add(1, Ordering::Relaxed);
            self.unproven_order.lock().push_back(*token);
        }
    }

    /// Call with the shard locked, after removing `entry` (as it was stored).
    pub(super) fn note_removed(&self, entry: &Entry) {
        self.count.fetch_sub(1, Ordering::Relaxed);
        if let Some(client) = entry.client {
            self.per_address.remove(client);
        }
        if !entry.has(SEEN) {
            self.unproven.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Live tokens held by `client`'s address (IPv6: its /64).
    pub(super) fn held_by(&self, client: IpAddr) -> u32 {
        self.per_address.get(client)
    }

    /// Call with the shard locked, when a stored entry that lacked `SEEN` gets it.
    pub(super) fn note_proven(&self) {
        self.unproven.fetch_sub(1, Ordering::Relaxed);
    }

    /// The oldest token in the unproven order (it may since have been seen or removed).
    pub(super) fn oldest_unproven(&self) -> Option<TokenId> {
        self.unproven_order.lock().front().copied()
    }

    /// Drops `token` from the front of the unproven order if it is still there.
    pub(super) fn pop_oldest_unproven(&self, token: &TokenId) {
        let mut order = self.unproven_order.lock();
        if order.front() == Some(token) {
            order.pop_front();
        }
    }

    /// Whether the unproven order holds entries for tokens that were seen or removed.
    pub(super) fn unproven_order_has_stale(&self) -> bool {
        self.unproven_order.lock().len() as u64 > self.unproven()
    }

    /// Drops stale entries from the unproven order once they clearly outnumber the live ones
    /// (stale entries stuck behind a live token too young to shed). One lookup per entry, so it
    /// belongs to the reaper, not to requests.
    pub(super) fn compact_unproven_order(&self) {
        let taken = {
            let mut order = self.unproven_order.lock();
            if order.len() as u64 <= 2 * self.unproven() + ORDER_SLACK {
                return;
            }
            std::mem::take(&mut *order)
        };
        let kept: VecDeque<TokenId> = taken
            .into_iter()
            .filter(|token| {
                self.lock_for(token)
                    .get(token)
                    .is_some_and(|entry| !entry.has(SEEN))
            })
            .collect();
        let mut order = self.unproven_order.lock();
        // Tokens stored meanwhile are newer than every kept one.
        let newer = std::mem::replace(&mut *order, kept);
        order.extend(newer);
    }

    #[cfg(test)]
    pub(super) fn unproven_order_len(&self) -> usize {
        self.unproven_order.lock().len()
    }

    /// Counts unproven tokens the slow way, to check the running count in tests.
    #[cfg(test)]
    pub(super) fn unproven_by_scan(&self) -> u64 {
        (0..SHARD_COUNT)
            .map(|index| {
                self.lock_shard(index)
                    .values()
                    .filter(|entry| !entry.has(SEEN))
                    .count() as u64
            })
            .sum()
    }
}

/// One client's network as the per-address bound sees it: an IPv4 address, or an IPv6 /64 (one
/// subscriber's usual allocation, so a client cannot step around the bound by changing the low
/// bits of its address). Eight bytes in two halves, so a key and its count take 12 bytes in the
/// table, which holds one per address in line: an IPv4 address is stored as if under
/// `ffff:ffff::/32`, a prefix no network is ever given.
type AddressKey = [u32; 2];

fn address_key(ip: IpAddr) -> AddressKey {
    match ip.to_canonical() {
        IpAddr::V4(v4) => [u32::MAX, v4.to_bits()],
        IpAddr::V6(v6) => {
            let prefix = (v6.to_bits() >> 64) as u64;
            [(prefix >> 32) as u32, prefix as u32]
        }
    }
}

/// Live tokens per address. An address with none has no entry, so the table is as large as the
/// set of addresses in line. Sharded like the tokens (staggered, so the shards do not all
/// double at once): it changes with every ticket added or removed, from every worker.
#[derive(Debug)]
struct AddressCounts {
    shards: Box<[Mutex<HashMap<AddressKey, u32>>]>,
    /// Keyed per process, so clients cannot choose addresses that crowd one shard.
    hasher: RandomState,
}

impl AddressCounts {
    fn new() -> AddressCounts {
        AddressCounts {
            shards: (0..SHARD_COUNT)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: AddressKey) -> &Mutex<HashMap<AddressKey, u32>> {
        // The low bits pick the shard: the table inside uses the top ones for its tags, which
        // must stay spread.
        &self.shards[crate::sys::shard::staggered(self.hasher.hash_one(key) as u32)]
    }

    fn add(&self, client: IpAddr) {
        let key = address_key(client);
        *self.shard(key).lock().entry(key).or_insert(0) += 1;
    }

    fn remove(&self, client: IpAddr) {
        let key = address_key(client);
        let mut shard = self.shard(key).lock();
        if let Some(count) = shard.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                shard.remove(&key);
            }
        }
    }

    fn get(&self, client: IpAddr) -> u32 {
        let key = address_key(client);
        self.shard(key).lock().get(&key).copied().unwrap_or(0)
    }
}

/// Parses a `room_ticket` cookie value (32 hex digits).
pub(super) fn parse_token(text: &str) -> Option<TokenId> {
    let mut token = [0u8; 16];
    if text.len() != 32 {
        return None;
    }
    hex::decode_to_slice(text, &mut token).ok()?;
    Some(token)
}

pub(super) fn token_hex(token: &TokenId) -> String {
    hex::encode(token)
}

/// Approximate heap bytes one queued visitor costs in the store: the map's key/value slot plus one
/// control byte, divided by the worst load factor a hash table keeps right after growing (7/16).
#[cfg(test)]
pub(super) fn bytes_per_entry_estimate() -> usize {
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
        // The token store's slot at the worst load factor of a single shard; the ghost ledger and
        // promotion table grow only with retirements and promotions. What a visitor costs in all
        // (the abuse registry's entry included, at many line lengths) is tests/memory.rs.
        let per_entry = bytes_per_entry_estimate();
        assert!(per_entry < 256, "{per_entry} bytes");
        assert!(std::mem::size_of::<Entry>() <= 56);
    }

    #[test]
    fn times_round_trip_through_their_offsets() {
        let mut entry = Entry::new(Key::original(7), 1_000, None);
        assert_eq!(entry.last_poll(), None);
        entry.set_last_seen(61_000);
        entry.set_last_poll(1_000);
        entry.set_cookie_set_at(31_000);
        assert_eq!(entry.created(), 1_000);
        assert_eq!(entry.last_seen(), 61_000);
        assert_eq!(entry.last_poll(), Some(1_000));
        assert_eq!(entry.cookie_set_at(), 31_000);
        // A time before the ticket's creation (an odd snapshot) reads as the creation.
        entry.set_last_seen(10);
        assert_eq!(entry.last_seen(), 1_000);
    }

    #[test]
    fn a_ticket_older_than_the_offsets_reach_keeps_its_recent_times() {
        let mut entry = Entry::new(Key::original(7), 1_000, None);
        let day = 86_400_000u64;
        entry.set_last_poll(40 * day);
        entry.set_cookie_set_at(2_000);
        entry.set_last_seen(60 * day);
        assert_eq!(entry.last_seen(), 60 * day);
        assert_eq!(entry.last_poll(), Some(40 * day));
        // Older than 49 days before the newest time: clamped to the moved creation.
        assert_eq!(entry.created(), 60 * day - u64::from(u32::MAX));
        assert_eq!(entry.cookie_set_at(), entry.created());
        entry.set_last_seen(60 * day + 5);
        assert_eq!(entry.last_seen(), 60 * day + 5);
    }
}
