//! The details cache: a bounded map from address to what was last learned about it, each entry
//! with its own expiry, evicted by CLOCK (second chance).
//!
//! CLOCK keeps the addresses the pages keep showing (the line, the bans) and lets one-off
//! addresses go first, at O(1) amortised per insert and without reordering on every read as
//! LRU would. Expired entries are taken before any live one. The clock is passed in as `now`,
//! so tests drive time by hand.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use tokio::time::{Duration, Instant};

use super::details::IpDetails;

/// Most addresses remembered.
pub(super) const CACHE_CAPACITY: usize = 65_536;

/// What the cache remembers about an address.
#[derive(Debug, Clone)]
pub(super) enum Cached {
    /// An answer: found, or not in the data.
    Known(Arc<IpDetails>),
    /// The naddr service failed; asked again once this expires.
    Failed,
}

struct Slot {
    addr: IpAddr,
    value: Cached,
    expires: Instant,
    /// Set by a read; the clock hand clears it once before it may evict the slot.
    referenced: bool,
}

pub(super) struct DetailsCache {
    slots: Vec<Slot>,
    index: HashMap<IpAddr, usize>,
    hand: usize,
    capacity: usize,
    /// Bumped by every purge, so an answer asked for before it is not stored after it.
    epoch: u64,
}

impl DetailsCache {
    pub(super) fn new(capacity: usize) -> DetailsCache {
        let capacity = capacity.max(1);
        DetailsCache {
            slots: Vec::new(),
            index: HashMap::new(),
            hand: 0,
            capacity,
            epoch: 0,
        }
    }

    /// The live entry for `addr`, marking it recently used.
    pub(super) fn get(&mut self, addr: IpAddr, now: Instant) -> Option<Cached> {
        let slot = self.slots.get_mut(*self.index.get(&addr)?)?;
        if now >= slot.expires {
            return None;
        }
        slot.referenced = true;
        Some(slot.value.clone())
    }

    pub(super) fn insert(&mut self, addr: IpAddr, value: Cached, ttl: Duration, now: Instant) {
        let expires = now + ttl;
        if let Some(slot) = self.index.get(&addr).and_then(|&at| self.slots.get_mut(at)) {
            slot.value = value;
            slot.expires = expires;
            slot.referenced = true;
            return;
        }
        let fresh = Slot {
            addr,
            value,
            expires,
            referenced: false,
        };
        if self.slots.len() < self.capacity {
            self.index.insert(addr, self.slots.len());
            self.slots.push(fresh);
            return;
        }
        let at = self.victim(now);
        if let Some(slot) = self.slots.get_mut(at) {
            self.index.remove(&slot.addr);
            *slot = fresh;
            self.index.insert(addr, at);
        }
    }

    /// The slot to reuse: the first expired or unreferenced one from the hand on, clearing the
    /// marks it passes. Ends within two turns, since the first turn clears every mark.
    fn victim(&mut self, now: Instant) -> usize {
        loop {
            let at = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            match self.slots.get_mut(at) {
                Some(slot) if slot.referenced && now < slot.expires => slot.referenced = false,
                _ => return at,
            }
        }
    }

    /// Forgets everything, for a newly loaded table.
    pub(super) fn purge(&mut self) {
        self.slots.clear();
        self.index.clear();
        self.hand = 0;
        self.epoch += 1;
    }

    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::details::Status;
    use super::*;

    fn addr(n: u32) -> IpAddr {
        IpAddr::from(std::net::Ipv4Addr::from(n))
    }

    fn known(n: u32) -> Cached {
        Cached::Known(Arc::new(IpDetails::without_data(addr(n), Status::NotFound)))
    }

    fn holds(cache: &mut DetailsCache, n: u32, now: Instant) -> bool {
        cache.get(addr(n), now).is_some()
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn an_entry_lives_for_its_own_ttl() {
        let start = Instant::now();
        let mut cache = DetailsCache::new(8);
        cache.insert(addr(1), known(1), 10 * MINUTE, start);
        cache.insert(addr(2), Cached::Failed, MINUTE, start);
        assert!(holds(&mut cache, 1, start + 9 * MINUTE));
        assert!(holds(&mut cache, 2, start + Duration::from_secs(59)));
        assert!(!holds(&mut cache, 2, start + MINUTE));
        assert!(!holds(&mut cache, 1, start + 10 * MINUTE));
    }

    #[test]
    fn storing_again_replaces_the_value_and_its_expiry() {
        let start = Instant::now();
        let mut cache = DetailsCache::new(8);
        cache.insert(addr(1), Cached::Failed, MINUTE, start);
        cache.insert(addr(1), known(1), 60 * MINUTE, start + MINUTE);
        assert!(matches!(
            cache.get(addr(1), start + 30 * MINUTE),
            Some(Cached::Known(_))
        ));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_cache_never_grows_past_its_capacity() {
        let now = Instant::now();
        let mut cache = DetailsCache::new(64);
        for n in 0..1000 {
            cache.insert(addr(n), known(n), MINUTE, now);
        }
        assert_eq!(cache.len(), 64);
        assert_eq!(cache.index.len(), 64);
        assert!(holds(&mut cache, 999, now));
    }

    #[test]
    fn entries_read_since_the_hand_passed_survive_and_one_off_entries_go_first() {
        let now = Instant::now();
        let mut cache = DetailsCache::new(4);
        for n in 0..4 {
            cache.insert(addr(n), known(n), MINUTE, now);
        }
        // 0 and 2 are shown again; 1 and 3 were seen once.
        assert!(holds(&mut cache, 0, now));
        assert!(holds(&mut cache, 2, now));
        cache.insert(addr(10), known(10), MINUTE, now);
        cache.insert(addr(11), known(11), MINUTE, now);
        for kept in [0, 2, 10, 11] {
            assert!(holds(&mut cache, kept, now), "{kept} was evicted");
        }
        assert!(!holds(&mut cache, 1, now));
        assert!(!holds(&mut cache, 3, now));
    }

    #[test]
    fn expired_entries_are_taken_before_live_ones_even_when_read_recently() {
        let start = Instant::now();
        let mut cache = DetailsCache::new(3);
        cache.insert(addr(0), known(0), 10 * MINUTE, start);
        cache.insert(addr(1), Cached::Failed, MINUTE, start);
        cache.insert(addr(2), known(2), 10 * MINUTE, start);
        for n in 0..3 {
            cache.get(addr(n), start);
        }
        let later = start + 2 * MINUTE;
        cache.insert(addr(3), known(3), 10 * MINUTE, later);
        assert!(holds(&mut cache, 0, later));
        assert!(holds(&mut cache, 2, later));
        assert!(holds(&mut cache, 3, later));
    }

    #[test]
    fn a_purge_forgets_everything_and_moves_the_epoch() {
        let now = Instant::now();
        let mut cache = DetailsCache::new(4);
        cache.insert(addr(1), known(1), MINUTE, now);
        let before = cache.epoch();
        cache.purge();
        assert!(!holds(&mut cache, 1, now));
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.epoch(), before + 1);
        cache.insert(addr(1), known(1), MINUTE, now);
        assert!(holds(&mut cache, 1, now));
    }
}
