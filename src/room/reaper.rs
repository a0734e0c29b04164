//! The reaper: retires visitors who stopped polling and purges expired VIP passes.
//!
//! A pass walks the token store one shard at a time, so polls on other shards never wait for it,
//! and retires each shard's dead visitors in one batch under the line lock.

use std::sync::Arc;

use super::line::Key;
use super::tokens::{self, SEEN};
use super::{Room, bump};

impl Room {
    /// One reaper pass; returns how many visitors were retired.
    pub fn reap_now(&self) -> usize {
        let shared = &self.shared;
        let settings = shared.settings.load();
        let (ttl, grace) = (settings.ttl_ms(), settings.grace_ms());
        let now = shared.now_ms();
        let mut dead: Vec<Key> = Vec::new();
        let mut total = 0usize;
        for index in 0..tokens::SHARD_COUNT {
            let mut shard = shared.tokens.lock_shard(index);
            shard.retain(|_, entry| {
                let idle = now.saturating_sub(entry.last_seen()) > ttl;
                let never_polled =
                    grace > 0 && !entry.has(SEEN) && now.saturating_sub(entry.created()) > grace;
                if idle || never_polled {
                    dead.push(entry.key);
                    shared.tokens.note_removed(entry);
                }
                !(idle || never_polled)
            });
            if dead.is_empty() {
                continue;
            }
            // A mass eviction should give memory back.
            if shard.capacity() > 64 && shard.capacity() > 4 * shard.len() {
                shard.shrink_to_fit();
            }
            total += dead.len();
            dead.sort_unstable();
            let mut core = shared.core.lock();
            for key in dead.drain(..) {
                core.retire(key, now);
            }
        }
        if total > 0 {
            bump(&shared.counters.evicted, total as u64);
            tracing::debug!("reaper retired {total} idle visitor(s)");
        }
        shared.passes.lock().retain(|_, expiry| *expiry > now);
        shared.tokens.compact_unproven_order();
        total
    }

    /// Runs `reap_now` every min(reaper, grace) until the room is dropped or `stop_reaper` is called.
    pub fn spawn_reaper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let room = Arc::downgrade(self);
        self.reaper_stop.send_replace(false);
        let mut stop = self.reaper_stop.subscribe();
        tokio::spawn(async move {
            loop {
                if *stop.borrow_and_update() {
                    break;
                }
                let period = match room.upgrade() {
                    Some(room) => room.shared.settings.load().reaper_period(),
                    None => break,
                };
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    changed = stop.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        continue;
                    }
                }
                match room.upgrade() {
                    Some(room) => {
                        room.reap_now();
                    }
                    None => break,
                }
            }
        })
    }

    /// Stops reapers started with `spawn_reaper`.
    pub fn stop_reaper(&self) {
        self.reaper_stop.send_replace(true);
    }
}
