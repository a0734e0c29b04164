//! The bounded, sharded table of tracked clients.
//!
//! Shards are picked with a randomly keyed hash (attackers choose their addresses, so a
//! predictable spread would let them pile onto one shard). The entry count is reserved
//! atomically before an insert, so concurrent inserts can never push it past the limit. When
//! the table is full a newcomer may evict, from its own shard, the least recently active of a
//! few entries that are neither banned nor carrying offense history; failing that it is not
//! tracked.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};

use super::key::Key;
use super::window::StrikeWindow;
use super::{BanLength, FOREVER};

use crate::sys::shard::SHARD_COUNT as SHARDS;

/// One tracked client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub window: StrikeWindow,
    /// Unix nanos; 0 = never banned, [`FOREVER`] = permanent.
    pub banned_until: i64,
    /// Bans so far; drives the escalating cooldown.
    pub offenses: u32,
    /// Last strike or ban, for choosing whom to evict.
    pub last_active: i64,
}

impl Entry {
    pub(super) fn new(now: i64) -> Self {
        Entry {
            window: StrikeWindow::new(now),
            banned_until: 0,
            offenses: 0,
            last_active: now,
        }
    }

    pub(super) fn is_banned(&self, now: i64) -> bool {
        self.banned_until > now
    }

    pub(super) fn ban_left(&self, now: i64) -> Option<BanLength> {
        if self.banned_until == FOREVER {
            return Some(BanLength::Permanent);
        }
        let left = self
            .banned_until
            .checked_sub(now)
            .filter(|left| *left > 0)?;
        Some(BanLength::Timed(std::time::Duration::from_nanos(
            left.unsigned_abs(),
        )))
    }

    /// Only strike-only entries may be pushed out: bans and offense history are what the
    /// registry exists to remember.
    fn evictable(&self, now: i64) -> bool {
        !self.is_banned(now) && self.offenses == 0
    }
}

type Shard = HashMap<Key, Entry>;

/// Evictable entries compared when a full table takes a newcomer. Table order follows the
/// keyed hash, not activity, so they are an arbitrary sample and the choice is approximately
/// the least recently active (as sampled-LRU caches do), at a bounded cost.
const EVICTION_CANDIDATES: usize = 32;

pub(super) struct Table {
    shards: Box<[RwLock<Shard>]>,
    picker: RandomState,
    count: AtomicUsize,
    /// How many /64 entries each IPv6 /48 holds (keyed by the /48's [`Key::V6Wide`]).
    per_wide: Mutex<HashMap<Key, u32>>,
    /// Shared /48 entries present; while 0 the per-request check skips the /48 probe.
    wide_entries: AtomicUsize,
    /// Newcomers not tracked because the table was full.
    dropped: AtomicU64,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::new())).collect(),
            picker: RandomState::new(),
            count: AtomicUsize::new(0),
            per_wide: Mutex::new(HashMap::new()),
            wide_entries: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        }
    }
}

impl Table {
    fn shard(&self, key: &Key) -> &RwLock<Shard> {
        let hash = self.picker.hash_one(key);
        &self.shards[crate::sys::shard::staggered((hash >> 32) as u32)]
    }

    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub(super) fn has_wide_entries(&self) -> bool {
        self.wide_entries.load(Ordering::Relaxed) > 0
    }

    /// How many /64 entries of `wide`'s /48 are tracked.
    pub(super) fn per_wide(&self, wide: Key) -> u32 {
        self.per_wide.lock().get(&wide).copied().unwrap_or(0)
    }

    /// Reads one entry under its shard's read lock.
    pub(super) fn read<R>(&self, key: Key, f: impl FnOnce(Option<&Entry>) -> R) -> R {
        f(self.shard(&key).read().get(&key))
    }

    /// Runs `f` on `key`'s entry, creating it (subject to the limit) when missing. `None` when
    /// the table is full and nothing could be evicted; that is counted as a drop.
    pub(super) fn upsert<R>(
        &self,
        key: Key,
        now: i64,
        max_entries: usize,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Option<R> {
        let mut shard = self.shard(&key).write();
        if let Some(entry) = shard.get_mut(&key) {
            return Some(f(entry));
        }
        let reserved = self
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                (count < max_entries).then_some(count + 1)
            })
            .is_ok();
        if !reserved {
            // The least recently active of the first few candidates, not of the whole shard:
            // a full table meets a newcomer at every request of a flood from many addresses,
            // and a scan of the shard (1,600 entries at the default limit, more when it is
            // raised) under its write lock for each would make every such request cost that.
            let victim = shard
                .iter()
                .filter(|(_, entry)| entry.evictable(now))
                .take(EVICTION_CANDIDATES)
                .min_by_key(|(_, entry)| entry.last_active)
                .map(|(key, _)| *key);
            let Some(victim) = victim else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            shard.remove(&victim);
            self.forget_counts(victim);
            // The victim's slot passes to the newcomer: the count stays as it is.
        }
        self.note_counts(key);
        let entry = shard.entry(key).or_insert(Entry::new(now));
        Some(f(entry))
    }

    pub(super) fn remove(&self, key: Key) -> bool {
        let removed = self.shard(&key).write().remove(&key).is_some();
        if removed {
            self.count.fetch_sub(1, Ordering::AcqRel);
            self.forget_counts(key);
        }
        removed
    }

    /// Keeps the entries for which `keep` is true, one shard at a time. Returns how many went.
    pub(super) fn retain(&self, mut keep: impl FnMut(&Key, &mut Entry) -> bool) -> usize {
        let mut removed_keys = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            shard.retain(|key, entry| {
                let stays = keep(key, entry);
                if !stays {
                    removed_keys.push(*key);
                }
                stays
            });
        }
        for key in &removed_keys {
            self.count.fetch_sub(1, Ordering::AcqRel);
            self.forget_counts(*key);
        }
        removed_keys.len()
    }

    /// Visits every entry (listing, export). Each shard is read-locked while it is visited.
    pub(super) fn for_each(&self, mut visit: impl FnMut(&Key, &Entry)) {
        for shard in self.shards.iter() {
            for (key, entry) in shard.read().iter() {
                visit(key, entry);
            }
        }
    }

    fn note_counts(&self, key: Key) {
        if key.is_wide() {
            self.wide_entries.fetch_add(1, Ordering::AcqRel);
        } else if let Some(wide) = key.wide() {
            *self.per_wide.lock().entry(wide).or_insert(0) += 1;
        }
    }

    fn forget_counts(&self, key: Key) {
        if key.is_wide() {
            self.wide_entries.fetch_sub(1, Ordering::AcqRel);
        } else if let Some(wide) = key.wide() {
            let mut per_wide = self.per_wide.lock();
            if let Some(count) = per_wide.get_mut(&wide) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    per_wide.remove(&wide);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn key(text: &str) -> Key {
        Key::of(text.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn full_table_evicts_only_strike_only_entries() {
        let table = Table::default();
        // Max 1: a banned entry is never evicted, so the newcomer is dropped.
        table
            .upsert(key("198.51.100.1"), 0, 1, |e| e.banned_until = 100)
            .unwrap();
        assert!(table.upsert(key("198.51.100.2"), 1, 1, |_| ()).is_none());
        assert_eq!(table.dropped(), 1);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_full_table_evicts_old_entries_without_searching_the_whole_shard() {
        let table = Table::default();
        let limit = 20_000i64;
        let tracked = |i: i64| Key::V4(0x0a00_0000 + i as u32);
        // Each entry last active at its own moment; every tenth carries offense history.
        for i in 0..limit {
            table
                .upsert(tracked(i), i, limit as usize, |e| {
                    e.offenses = u32::from(i % 10 == 0);
                })
                .unwrap();
        }
        let newcomers = 300;
        let mut newer_share = 0.0;
        for n in 0..newcomers {
            let newcomer = Key::V4(0xc000_0000 + n as u32);
            let now = limit + n;
            let before: Vec<(Key, Entry)> = table
                .shard(&newcomer)
                .read()
                .iter()
                .map(|(k, e)| (*k, *e))
                .collect();
            table.upsert(newcomer, now, limit as usize, |_| ()).unwrap();
            assert_eq!(table.len(), limit as usize);
            let shard = table.shard(&newcomer).read();
            let gone: Vec<&Entry> = before
                .iter()
                .filter(|(k, _)| !shard.contains_key(k))
                .map(|(_, e)| e)
                .collect();
            assert_eq!(gone.len(), 1, "exactly one entry made room");
            let victim = gone[0];
            assert_eq!(victim.offenses, 0, "offense history is never evicted");
            let evictable: Vec<i64> = before
                .iter()
                .filter(|(_, e)| e.offenses == 0)
                .map(|(_, e)| e.last_active)
                .collect();
            let newer = evictable
                .iter()
                .filter(|t| **t > victim.last_active)
                .count();
            newer_share += newer as f64 / (evictable.len() - 1) as f64;
        }
        // The least recent of a sample of 32 is, on average, older than ~97% of the rest; an
        // arbitrary pick would be older than half.
        let newer_share = newer_share / newcomers as f64;
        assert!(
            newer_share > 0.85,
            "victims older than {newer_share:.2} of the rest"
        );
    }

    #[test]
    fn counts_follow_inserts_and_removals() {
        let table = Table::default();
        for i in 0..10u8 {
            table.upsert(key(&format!("10.0.0.{i}")), 0, 100, |_| ());
        }
        assert_eq!(table.len(), 10);
        assert!(table.remove(key("10.0.0.3")));
        assert!(!table.remove(key("10.0.0.3")));
        assert_eq!(table.len(), 9);
        let gone = table.retain(|k, _| *k != key("10.0.0.4"));
        assert_eq!(gone, 1);
        assert_eq!(table.len(), 8);
    }

    #[test]
    fn per_wide_counts_track_64s_of_a_48() {
        let table = Table::default();
        let a = key("2001:db8:1:2::1");
        let b = key("2001:db8:1:3::1");
        table.upsert(a, 0, 10, |_| ());
        table.upsert(b, 0, 10, |_| ());
        let wide = a.wide().unwrap();
        assert_eq!(table.per_wide(wide), 2);
        table.remove(a);
        assert_eq!(table.per_wide(wide), 1);
        table.remove(b);
        assert_eq!(table.per_wide(wide), 0);
        assert!(!table.has_wide_entries());
        table.upsert(wide, 0, 10, |_| ());
        assert!(table.has_wide_entries());
    }

    #[test]
    fn evicts_the_least_recently_active_entry_of_the_shard() {
        let table = Table::default();
        // Three keys that land in the same shard.
        let anchor = key("10.1.0.0");
        let same_shard: Vec<Key> = (1..=u16::MAX)
            .map(|i| Key::V4(0x0a01_0000 + u32::from(i)))
            .filter(|k| std::ptr::eq(table.shard(k), table.shard(&anchor)))
            .take(2)
            .collect();
        let (older, newer, third) = (anchor, same_shard[0], same_shard[1]);
        table.upsert(older, 10, 2, |_| ()).unwrap();
        table.upsert(newer, 20, 2, |_| ()).unwrap();
        table.upsert(third, 1_000, 2, |_| ()).unwrap();
        assert_eq!(table.len(), 2);
        assert!(table.read(older, |e| e.is_none()));
        assert!(table.read(newer, |e| e.is_some()));
        assert!(table.read(third, |e| e.is_some()));
    }
}
