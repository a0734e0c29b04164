//! `GET /queue/status` logic: one locked step per poll on the visitor's shard.

use super::Room;
use super::estimate::WaitEstimate;
use super::shared::bump;
use super::tokens::{HAS_PASS, REFRESH_DUE, SEEN, parse_token};

/// Polls closer together than this are throttled.
const POLL_INTERVAL_MS: u64 = 1_000;

/// What a status poll answers.
#[derive(Debug, Clone, PartialEq)]
pub enum PollOutcome {
    /// No `room_ticket` cookie: `{"ready":false,"cookies_required":true}`.
    CookiesRequired,
    /// Unknown, expired or ready ticket: `{"ready":true}` (the page reloads).
    Ready,
    /// Polled again within a second: 429 `Retry-After: 1`, no Set-Cookie. `position` ≥ 1.
    Throttled { position: u64 },
    Waiting {
        /// ≥ 1.
        position: u64,
        utilization: f64,
        has_pass: bool,
        /// Re-send `room_ticket` and `room_probe`.
        refresh_cookies: bool,
        rate_per_pos: Option<f64>,
        skip_cost: Option<f64>,
        estimate: WaitEstimate,
    },
}

impl Room {
    pub fn poll(&self, ticket_cookie: Option<&str>) -> PollOutcome {
        let Some(cookie) = ticket_cookie else {
            return PollOutcome::CookiesRequired;
        };
        let Some(token) = parse_token(cookie) else {
            return PollOutcome::Ready;
        };
        let shared = &self.shared;
        let settings = shared.settings.load();
        let now = shared.precise_now_ms();
        let mut shard = shared.tokens.lock_for(&token);
        let Some(mut entry) = shard.get(&token).copied() else {
            return PollOutcome::Ready;
        };
        if now.saturating_sub(entry.last_seen()) > settings.ttl_ms() {
            shard.remove(&token);
            shared.tokens.note_removed(&entry);
            shared.core.lock().retire(entry.key, now);
            bump(&shared.counters.evicted, 1);
            return PollOutcome::Ready;
        }
        let throttled = entry
            .last_poll()
            .is_some_and(|polled| now.saturating_sub(polled) < POLL_INTERVAL_MS);
        // Throttled polls still count as signs of life.
        entry.set_last_seen(now);
        entry.set_last_poll(now);
        if !entry.has(SEEN) {
            shared.tokens.note_proven();
        }
        entry.set(SEEN, true);
        let mut core = shared.core.lock();
        let raw_position = core.line.position(entry.key);
        if raw_position <= 0 {
            drop(core);
            shard.insert(token, entry);
            return PollOutcome::Ready;
        }
        let position = raw_position as u64;
        if throttled {
            drop(core);
            shard.insert(token, entry);
            return PollOutcome::Throttled { position };
        }
        let refresh_cookies = entry.has(REFRESH_DUE)
            || now.saturating_sub(entry.cookie_set_at()) >= settings.ttl_ms() / 3;
        if refresh_cookies {
            entry.set_cookie_set_at(now);
            entry.set(REFRESH_DUE, false);
        }
        let queue_depth = core.line.queue_depth();
        let estimate = core.meter.estimate(now, position);
        drop(core);
        shard.insert(token, entry);
        drop(shard);
        let has_pass = entry.has(HAS_PASS);
        let (rate_per_pos, skip_cost) = match settings.pricing {
            Some(pricing) if !has_pass => {
                let rate = pricing.price_per_position(queue_depth);
                (
                    Some(rate),
                    (position > 1).then(|| (position - 1) as f64 * rate),
                )
            }
            _ => (None, None),
        };
        PollOutcome::Waiting {
            position,
            utilization: shared.gate.utilization(),
            has_pass,
            refresh_cookies,
            rate_per_pos,
            skip_cost,
            estimate,
        }
    }
}

impl Room {
    /// What skipping the line costs the holder of `ticket_cookie` now, in the pricing's units
    /// (`-rate` + depth × `-surge` per visitor ahead; 0 when pricing is off). A visitor already
    /// let in, or holding a VIP pass, skips nobody. Without a ticket in the line the price is
    /// that of the whole line, so dropping the ticket never makes skipping cheaper. Reads only:
    /// the ticket is not marked seen.
    pub fn skip_cost_for(&self, ticket_cookie: Option<&str>) -> f64 {
        let shared = &self.shared;
        let settings = shared.settings.load();
        let Some(pricing) = settings.pricing else {
            return 0.0;
        };
        let entry = ticket_cookie
            .and_then(parse_token)
            .and_then(|token| shared.tokens.lock_for(&token).get(&token).copied());
        if entry.is_some_and(|entry| entry.has(HAS_PASS)) {
            return 0.0;
        }
        let core = shared.core.lock();
        let queue_depth = core.line.queue_depth();
        let ahead = match entry {
            Some(entry) => (core.line.position(entry.key) - 1).max(0) as u64,
            None => queue_depth,
        };
        drop(core);
        ahead as f64 * pricing.price_per_position(queue_depth)
    }
}
