//! Idle origin connections kept for reuse: newest first, each for a limited time, at most a
//! fixed number of them in all.
//!
//! Each worker (see `server::serve_workers`) keeps its own list: a connection opened by one
//! worker's runtime is registered with that runtime's reactor, and its response timer with that
//! runtime's timer wheel, so in another worker every response would cost a cross-thread
//! wake-up, and once its runtime had stopped, the connection would fail (a timer of a stopped
//! runtime cannot even be polled). The cap counts all workers together, so more workers never
//! mean more idle connections held open against a small origin.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// One list for each worker there can be, so that no two workers ever share one.
const SHARDS: usize = crate::config::validate::MAX_WORKERS;

/// One worker's entries, oldest at the front, each with the moment it became idle.
type Shard<T> = Mutex<VecDeque<(T, Instant)>>;

pub(super) struct IdleList<T> {
    max_idle: usize,
    idle_timeout: Duration,
    /// Entries in all shards together.
    held: AtomicUsize,
    /// One per worker, oldest at the front of each.
    shards: Box<[Shard<T>]>,
}

impl<T> IdleList<T> {
    pub(super) fn new(max_idle: usize, idle_timeout: Duration) -> IdleList<T> {
        IdleList {
            max_idle,
            idle_timeout,
            held: AtomicUsize::new(0),
            shards: (0..SHARDS).map(|_| Mutex::new(VecDeque::new())).collect(),
        }
    }

    /// The current worker's list.
    fn entries(&self) -> &Shard<T> {
        &self.shards[crate::sys::workers::worker_index() % SHARDS]
    }

    /// `removed` entries left the lists.
    fn released(&self, removed: usize) {
        if removed > 0 {
            self.held.fetch_sub(removed, Ordering::Relaxed);
        }
    }

    /// The newest entry, unless it has idled too long: then it and every older one (which
    /// have idled longer still) are dropped. Reusing the newest keeps the busy set small and
    /// lets the rest age out.
    pub(super) fn pop_newest(&self) -> Option<T> {
        let entries = self.entries();
        let (entry, since) = entries.lock().pop_back()?;
        self.released(1);
        if crate::sys::coarse_clock::instant().saturating_duration_since(since) < self.idle_timeout
        {
            return Some(entry);
        }
        let expired = std::mem::take(&mut *entries.lock());
        self.released(expired.len());
        // Dropping closes connections: done outside the lock.
        drop(expired);
        drop(entry);
        None
    }

    /// Keeps `entry`, unless the lists hold the most allowed (then it is dropped). Expiry is
    /// otherwise only noticed when the newest is taken, so the oldest is retired here when it
    /// has expired, one per return, and stale entries do not sit at the bottom for ever.
    pub(super) fn push(&self, entry: T) {
        let now = crate::sys::coarse_clock::instant();
        let mut entries = self.entries().lock();
        let expired = match entries.front() {
            Some((_, since)) if now.duration_since(*since) >= self.idle_timeout => {
                entries.pop_front()
            }
            _ => None,
        };
        if expired.is_some() {
            self.released(1);
        }
        let refused = if self.held.fetch_add(1, Ordering::Relaxed) < self.max_idle {
            entries.push_back((entry, now));
            None
        } else {
            self.released(1);
            Some(entry)
        };
        drop(entries);
        drop(expired);
        drop(refused);
    }

    /// Entries held, all workers together.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }

    /// How many entries satisfy `test`, all workers together.
    #[cfg(test)]
    pub(super) fn count(&self, test: impl Fn(&T) -> bool) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().iter().filter(|(entry, _)| test(entry)).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(90);

    #[test]
    fn newest_first_and_capped() {
        let list = IdleList::new(2, LONG);
        list.push(1);
        list.push(2);
        list.push(3);
        assert_eq!(list.len(), 2, "the third was refused");
        assert_eq!(list.pop_newest(), Some(2));
        assert_eq!(list.pop_newest(), Some(1));
        assert_eq!(list.pop_newest(), None);
    }

    #[test]
    fn expired_entries_are_never_handed_out() {
        let list = IdleList::new(8, Duration::ZERO);
        list.push("a");
        list.push("b");
        assert_eq!(list.pop_newest(), None);
        assert_eq!(list.len(), 0, "an expired newest clears the older ones too");
    }

    #[test]
    fn the_cap_counts_every_worker() {
        let list = std::sync::Arc::new(IdleList::new(2, LONG));
        list.push("worker 0");
        let elsewhere = std::sync::Arc::clone(&list);
        std::thread::spawn(move || {
            crate::sys::workers::become_worker(1);
            elsewhere.push("worker 1");
            elsewhere.push("worker 1, over the cap");
        })
        .join()
        .unwrap();
        list.push("worker 0, over the cap");
        assert_eq!(list.len(), 2);
        assert_eq!(list.pop_newest(), Some("worker 0"));
        list.push("worker 0 again");
        assert_eq!(list.len(), 2, "a taken entry frees its place");
    }

    #[test]
    fn each_worker_reuses_only_its_own_connections() {
        let list = std::sync::Arc::new(IdleList::new(8, LONG));
        list.push("opened by worker 0");
        let elsewhere = std::sync::Arc::clone(&list);
        let seen_by_worker_1 = std::thread::spawn(move || {
            crate::sys::workers::become_worker(1);
            let before = elsewhere.pop_newest();
            elsewhere.push("opened by worker 1");
            (before, elsewhere.pop_newest())
        })
        .join()
        .unwrap();
        assert_eq!(seen_by_worker_1, (None, Some("opened by worker 1")));
        assert_eq!(list.pop_newest(), Some("opened by worker 0"));
    }

    #[test]
    fn no_two_workers_share_a_list_however_many_there_are() {
        let list = std::sync::Arc::new(IdleList::new(8, LONG));
        let on_worker = |index: usize, work: fn(&IdleList<usize>) -> Option<usize>| {
            let list = std::sync::Arc::clone(&list);
            std::thread::spawn(move || {
                crate::sys::workers::become_worker(index);
                work(&list)
            })
            .join()
            .unwrap()
        };
        let last = crate::config::validate::MAX_WORKERS - 1;
        for index in [70, last] {
            on_worker(index, |list| {
                list.push(crate::sys::workers::worker_index());
                None
            });
        }
        // Other workers find nothing, among them those 64 apart, which once shared a list.
        for other in [6, last - 64, 0, 1] {
            assert_eq!(
                on_worker(other, IdleList::pop_newest),
                None,
                "worker {other}"
            );
        }
        assert_eq!(on_worker(last, IdleList::pop_newest), Some(last));
        assert_eq!(on_worker(70, IdleList::pop_newest), Some(70));
    }
}
