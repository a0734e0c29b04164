//! Idle origin connections kept for reuse: newest first, each for a limited time, at most a
//! fixed number of them.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

pub(super) struct IdleList<T> {
    max_idle: usize,
    idle_timeout: Duration,
    /// Oldest at the front.
    entries: Mutex<VecDeque<(T, Instant)>>,
}

impl<T> IdleList<T> {
    pub(super) fn new(max_idle: usize, idle_timeout: Duration) -> IdleList<T> {
        IdleList {
            max_idle,
            idle_timeout,
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// The newest entry, unless it has idled too long: then it and every older one (which
    /// have idled longer still) are dropped. Reusing the newest keeps the busy set small and
    /// lets the rest age out.
    pub(super) fn pop_newest(&self) -> Option<T> {
        let (entry, since) = self.entries.lock().pop_back()?;
        if since.elapsed() < self.idle_timeout {
            return Some(entry);
        }
        let expired = std::mem::take(&mut *self.entries.lock());
        // Dropping closes connections: done outside the lock.
        drop(expired);
        drop(entry);
        None
    }

    /// Keeps `entry`, unless the list is full (then it is dropped). Expiry is otherwise only
    /// noticed when the newest is taken, so the oldest is retired here when it has expired,
    /// one per return, and stale entries do not sit at the bottom for ever.
    pub(super) fn push(&self, entry: T) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        let expired = match entries.front() {
            Some((_, since)) if now.duration_since(*since) >= self.idle_timeout => {
                entries.pop_front()
            }
            _ => None,
        };
        let refused = if entries.len() < self.max_idle {
            entries.push_back((entry, now));
            None
        } else {
            Some(entry)
        };
        drop(entries);
        drop(expired);
        drop(refused);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// How many entries satisfy `test`.
    #[cfg(test)]
    pub(super) fn count(&self, test: impl Fn(&T) -> bool) -> usize {
        self.entries
            .lock()
            .iter()
            .filter(|(entry, _)| test(entry))
            .count()
    }
}
