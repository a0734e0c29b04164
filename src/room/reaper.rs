//! The reaper: retires visitors who stopped polling and purges expired VIP passes.
//!
//! A pass walks the token store one shard at a time, so polls on other shards never wait for it,
//! and retires each shard's dead visitors in one batch under the line lock.

use std::sync::Arc;

use super::Room;
use super::line::Key;
use super::shared::bump;
use super::tokens::{self, Entry, SEEN, TokenId};

impl Room {
    /// One reaper pass; returns how many visitors were retired (lapsed ones included).
    ///
    /// Besides the dead (unseen for the token lifetime, or never seen within the first-poll
    /// grace), a pass lapses ready visitors unseen for the ready grace: a ready ticket holds a
    /// place in the serving window, so one whose visitor has left would keep that place idle
    /// until the lifetime ends, and a handful of them can stall the line for minutes. Their
    /// place goes to the next in line; they keep a claim on the front until the lifetime ends.
    pub fn reap_now(&self) -> usize {
        let shared = &self.shared;
        let settings = shared.settings.load();
        let (ttl, grace) = (settings.ttl_ms(), settings.grace_ms());
        let ready_grace = settings.ready_grace_ms();
        let now = shared.now_ms();
        let mut ended: Vec<Key> = Vec::new();
        let mut lapsed: Vec<(TokenId, Entry)> = Vec::new();
        let (mut dead_total, mut lapsed_total) = (0usize, 0usize);
        for index in 0..tokens::SHARD_COUNT {
            let mut shard = shared.tokens.lock_shard(index);
            shard.retain(|token, entry| {
                let unseen_for = now.saturating_sub(entry.last_seen());
                let idle = unseen_for > ttl;
                let never_polled =
                    grace > 0 && !entry.has(SEEN) && now.saturating_sub(entry.created()) > grace;
                if idle || never_polled {
                    ended.push(entry.key);
                    shared.tokens.note_removed(entry);
                    return false;
                }
                // Only the few tickets unseen for the ready grace pay for the rank lookup.
                if ready_grace > 0
                    && unseen_for > ready_grace
                    && shared.core.lock().line.is_ready(entry.key)
                {
                    ended.push(entry.key);
                    lapsed.push((*token, *entry));
                    shared.tokens.note_removed(entry);
                    return false;
                }
                true
            });
            if ended.is_empty() {
                continue;
            }
            // A mass eviction should give memory back.
            if shard.capacity() > 64 && shard.capacity() > 4 * shard.len() {
                shard.shrink_to_fit();
            }
            lapsed_total += lapsed.len();
            dead_total += ended.len() - lapsed.len();
            ended.sort_unstable();
            let mut core = shared.core.lock();
            for key in ended.drain(..) {
                core.retire(key, now);
            }
            drop(core);
            drop(shard);
            if !lapsed.is_empty() {
                shared.lapsed.lock().extend(lapsed.drain(..));
            }
        }
        if dead_total > 0 {
            bump(&shared.counters.evicted, dead_total as u64);
            tracing::debug!("reaper retired {dead_total} idle visitor(s)");
        }
        if lapsed_total > 0 {
            bump(&shared.counters.lapsed, lapsed_total as u64);
            tracing::info!(
                "{lapsed_total} visitor(s) whose turn came stayed away past the ready grace; their places went to the next in line"
            );
        }
        shared.passes.lock().retain(|_, expiry| *expiry > now);
        shared
            .lapsed
            .lock()
            .retain(|_, entry| now.saturating_sub(entry.last_seen()) <= ttl);
        shared.tokens.compact_unproven_order();
        dead_total + lapsed_total
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
