//! The room's shared state and the steps that change it: arrivals, admission to a page slot,
//! the handles whose drop ends a wait or a visit, and the room's clock.
//!
//! Locks: a token shard, then the line; never the other way round, and never across an await.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

use super::estimate::RateMeter;
use super::line::{Key, Line};
use super::seal::TicketSeal;
use super::settings::{RoomSettings, duration_ms, proof_window_ms};
use super::tokens::{Entry, HAS_PASS, PROMOTED, SEEN, TokenId, TokenStore, parse_token, token_hex};
use super::visit::{AddressExemption, Arrival, QueueEvent, QueueHook, TicketInfo, Waiting};
use crate::sys::slots::{Gate, Permit};

/// Room clock offset, so times restored from a snapshot can lie before the room started.
pub(super) const CLOCK_BIAS_MS: u64 = 7 * 24 * 3_600 * 1_000;

/// Most entries of the unproven order one arrival looks at (shed or dropped as stale): twice
/// the one entry each arrival may add, so a backlog shrinks, and a fixed cost per request.
pub(super) const TIDY_STEPS: usize = 4;

/// Outcome of an arrival.
#[derive(Debug)]
pub enum Decision {
    /// Ready: take a slot with `Room::admit`.
    Admit(Admission),
    /// Render the waiting page (set both cookies with `token`).
    Wait(Waiting),
    /// Breaker open: 503.
    Full,
    /// The client's address (IPv6: its /64) already holds the most tickets one address may:
    /// 429, and no ticket.
    AddressFull,
}

/// Result of waiting for a page slot.
#[derive(Debug)]
pub enum AdmitResult {
    Admitted(PageSlot),
    /// No slot freed within the bound; the visitor keeps their place and gets the waiting page.
    Requeued(Waiting),
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) queued: AtomicU64,
    pub(super) evicted: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) promoted: AtomicU64,
    pub(super) removed: AtomicU64,
    pub(super) admitted: AtomicU64,
    pub(super) lapsed: AtomicU64,
    pub(super) rejoined: AtomicU64,
    pub(super) address_full: AtomicU64,
}

pub(super) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Line state guarded by one short-held mutex.
pub(super) struct Core {
    pub(super) line: Line,
    pub(super) occupancy: u64,
    pub(super) meter: RateMeter,
}

impl Core {
    pub(super) fn retire(&mut self, key: Key, now: u64) {
        let moved = self.line.retire(key);
        if moved > 0 {
            self.meter.record(now, moved);
        }
    }

    pub(super) fn position(&self, key: Key) -> u64 {
        // A ready key told to wait (requeued) is at the front.
        self.line.position(key).max(1) as u64
    }
}

pub(super) struct Shared {
    pub(super) settings: ArcSwap<RoomSettings>,
    pub(super) core: Mutex<Core>,
    pub(super) tokens: TokenStore,
    /// VIP `room_pass` tokens → expiry (room clock ms).
    pub(super) passes: Mutex<HashMap<Box<str>, u64>>,
    /// Visitors whose turn came while they were away, kept until their token lifetime ends so
    /// they can take the front of the line when they come back. Taken after any other lock.
    pub(super) lapsed: Mutex<HashMap<TokenId, Entry>>,
    pub(super) gate: Arc<Gate>,
    pub(super) counters: Counters,
    pub(super) hook: RwLock<Option<QueueHook>>,
    /// Addresses the per-address ticket bound does not apply to.
    pub(super) address_exemption: RwLock<Option<AddressExemption>>,
    /// Seals new tickets and recognises old ones.
    pub(super) seal: TicketSeal,
    /// Tickets of visitors an operator removed, remembered for a while.
    pub(super) kicks: super::kicks::Kicks,
    /// First path and browser of new tickets, while the portal wants them.
    pub(super) notes: super::notes::Notes,
    pub(super) epoch: Instant,
    /// Set when the page slots are lent by a pool shared with other instances: the gate then
    /// holds what was lent, not the cap.
    pub(super) pool: std::sync::OnceLock<Arc<super::pool::SlotPool>>,
}

/// A claimed ready ticket (or a new ticket admitted at once). Dropping it without `Room::admit`
/// completing retires the ticket and counts a timeout.
pub struct Admission {
    pub(super) shared: Arc<Shared>,
    pub(super) key: Key,
    /// The token and entry to put back if the slot wait runs out.
    pub(super) restore: Option<(TokenId, Entry)>,
    pub(super) client: Option<IpAddr>,
    pub(super) armed: bool,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("ticket", &self.key.number)
            .field("returning", &self.restore.is_some())
            .finish()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.armed {
            let now = self.shared.now_ms();
            self.shared.core.lock().retire(self.key, now);
            bump(&self.shared.counters.timeouts, 1);
        }
    }
}

/// A held page slot; dropping it ends the visit (occupancy − 1, now serving + 1, ledger drained).
pub struct PageSlot {
    pub(super) shared: Arc<Shared>,
    /// The local line's key; `None` for a visitor let in by the cluster's shared line, whose
    /// ending moves no place in the local line.
    pub(super) key: Option<Key>,
    pub(super) permit: Option<Permit>,
}

impl fmt::Debug for PageSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageSlot")
            .field("ticket", &self.key.map(|key| key.number))
            .finish()
    }
}

impl Drop for PageSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        let shared = &self.shared;
        if let Some(pool) = shared.pool.get() {
            pool.released();
        }
        let now = shared.now_ms();
        let mut core = shared.core.lock();
        let cap = core.line.cap();
        core.occupancy = core.occupancy.saturating_sub(1);
        let drained = core.occupancy + 1 == cap;
        if let Some(key) = self.key {
            core.line.mark_ended(key);
            let moved = core.line.release();
            core.meter.record(now, moved);
        }
        let (occupancy, depth) = (core.occupancy, core.line.queue_depth());
        drop(core);
        if drained {
            tracing::info!(
                "upstream draining: {occupancy}/{cap} slots, {depth} queued ({} live)",
                shared.tokens.len()
            );
        }
    }
}

impl Shared {
    pub(super) fn now_ms(&self) -> u64 {
        self.ms_at(room_clock())
    }

    /// [`Shared::now_ms`] from the precise clock, for the status poll: its one-second throttle
    /// must not turn away a client polling every second because two ticks rounded differently.
    pub(super) fn precise_now_ms(&self) -> u64 {
        self.ms_at(Instant::now())
    }

    pub(super) fn ms_at(&self, instant: Instant) -> u64 {
        CLOCK_BIAS_MS + duration_ms(instant.saturating_duration_since(self.epoch))
    }

    pub(super) fn instant_of(&self, ms: u64) -> Instant {
        if ms >= CLOCK_BIAS_MS {
            self.epoch + Duration::from_millis(ms - CLOCK_BIAS_MS)
        } else {
            self.epoch
                .checked_sub(Duration::from_millis(CLOCK_BIAS_MS - ms))
                .unwrap_or(self.epoch)
        }
    }

    pub(super) fn pass_valid(&self, pass: &str, now: u64) -> bool {
        self.passes
            .lock()
            .get(pass)
            .is_some_and(|&expiry| expiry > now)
    }

    pub(super) fn info(&self, token: &TokenId, entry: &Entry) -> TicketInfo {
        TicketInfo {
            token: *token,
            client: entry.client,
            joined: self.instant_of(entry.created()),
            last_seen: self.instant_of(entry.last_seen()),
            seen: entry.has(SEEN),
            promoted: entry.has(PROMOTED),
            has_pass: entry.has(HAS_PASS),
            rank: entry.rank,
        }
    }

    pub(super) fn emit_queue(&self, event: QueueEvent) {
        bump(&self.counters.queued, 1);
        let hook = self.hook.read().clone();
        if let Some(hook) = hook {
            hook(&event);
        }
    }

    /// Auto-promotes a VIP to the front once.
    pub(super) fn promote_vip(&self, core: &mut Core, entry: &mut Entry) {
        if entry.has(PROMOTED) {
            return;
        }
        entry.set(PROMOTED, true);
        if let Ok(Some(key)) = core.line.promote(entry.key, 1) {
            entry.key = key;
            bump(&self.counters.promoted, 1);
        }
    }

    /// A request with a `room_ticket` we know. `None` = continue as a new arrival.
    pub(super) fn returning(
        self: &Arc<Self>,
        token: TokenId,
        has_pass: bool,
        now: u64,
        settings: &RoomSettings,
    ) -> Option<Decision> {
        let mut shard = self.tokens.lock_for(&token);
        let Some(mut entry) = shard.get(&token).copied() else {
            return self.rejoin(shard, token, has_pass, now, settings);
        };
        if now.saturating_sub(entry.last_seen()) > settings.ttl_ms() {
            shard.remove(&token);
            self.tokens.note_removed(&entry);
            self.core.lock().retire(entry.key, now);
            bump(&self.counters.evicted, 1);
            return None;
        }
        let mut core = self.core.lock();
        if core.line.is_ready(entry.key) {
            // Claim: whoever removes the token first (us, the reaper, a removal) owns its ending.
            shard.remove(&token);
            self.tokens.note_removed(&entry);
            return Some(self.admit_claimed(token, entry));
        }
        if has_pass {
            self.promote_vip(&mut core, &mut entry);
        }
        // Coming back with the cookie proves a real client as much as a poll does (and covers
        // visitors without JavaScript, whose page reloads itself instead of polling).
        if entry.came_back(now, has_pass) {
            self.tokens.note_proven();
        }
        let position = core.position(entry.key);
        let estimate = core.meter.estimate(now, position);
        drop(core);
        shard.insert(token, entry);
        Some(Decision::Wait(Waiting {
            token: token_hex(&token),
            position,
            estimate,
        }))
    }

    /// Admits a visitor whose ticket was claimed (taken out of the store); if no slot frees in
    /// time they go back in line under the same token and place.
    pub(super) fn admit_claimed(self: &Arc<Self>, token: TokenId, entry: Entry) -> Decision {
        Decision::Admit(Admission {
            shared: Arc::clone(self),
            key: entry.key,
            restore: Some((token, entry)),
            client: entry.client,
            armed: true,
        })
    }

    /// A visitor whose turn came and went while they were away (see the reaper) is back: they
    /// take the front of the line, or enter at once if the window has room. `None` when the
    /// token is not a lapsed one, or its lifetime has ended: they arrive as anyone new does.
    pub(super) fn rejoin(
        self: &Arc<Self>,
        mut shard: parking_lot::MutexGuard<'_, super::tokens::Shard>,
        token: TokenId,
        has_pass: bool,
        now: u64,
        settings: &RoomSettings,
    ) -> Option<Decision> {
        let mut entry = self.lapsed.lock().remove(&token)?;
        if now.saturating_sub(entry.last_seen()) > settings.ttl_ms() {
            return None;
        }
        // Not in the store, so not counted among the unproven: nothing to note.
        entry.came_back(now, has_pass);
        bump(&self.counters.rejoined, 1);
        let mut core = self.core.lock();
        entry.key = core.line.issue();
        if core.line.is_ready(entry.key) {
            drop(core);
            return Some(self.admit_claimed(token, entry));
        }
        // Already at the front, or no ordering room left there (a long run of promotions to
        // one place): the visitor keeps the new place at the back rather than being refused.
        if let Ok(Some(front)) = core.line.promote(entry.key, 1) {
            entry.key = front;
        }
        let position = core.position(entry.key);
        let estimate = core.meter.estimate(now, position);
        drop(core);
        shard.insert(token, entry);
        self.tokens.note_added(&token, &entry);
        Some(Decision::Wait(Waiting {
            token: token_hex(&token),
            position,
            estimate,
        }))
    }

    pub(super) fn new_arrival(
        self: &Arc<Self>,
        arrival: &Arrival<'_>,
        has_pass: bool,
        now: u64,
        settings: &RoomSettings,
    ) -> Decision {
        // The breaker trips when the tickets alive reach max-queue. Refusing every newcomer
        // until the first-poll grace sweeps a burst of clients that never keep the cookie would
        // lock real visitors out for 30 s with the origin idle. So a ticket that has had two
        // poll intervals to prove itself (poll, or come back with its cookie) and has not is
        // taken to be abandoned: the newcomer takes its room instead. Proven visitors are never
        // displaced, and within those two intervals a full line refuses newcomers as always.
        if let Some(client) = arrival.client
            && self.address_is_full(client, settings)
        {
            bump(&self.counters.address_full, 1);
            return Decision::AddressFull;
        }
        let max = settings.max_queue;
        if max > 0 {
            let proven = self.tokens.proven();
            if proven >= max
                || (proven + self.tokens.unproven() >= max
                    && !self.shed_abandoned(now.saturating_sub(proof_window_ms(settings)), now))
            {
                return Decision::Full;
            }
        }
        let mut core = self.core.lock();
        let key = core.line.issue();
        if core.line.is_ready(key) {
            drop(core);
            return Decision::Admit(Admission {
                shared: Arc::clone(self),
                key,
                restore: None,
                client: arrival.client,
                armed: true,
            });
        }
        drop(core);
        let mut entry = Entry::new(key, now, arrival.client);
        entry.set(HAS_PASS, has_pass);
        let (token, waiting) = self.insert_waiting(entry, has_pass, now);
        let waiting = Decision::Wait(waiting);
        self.tidy_unproven(max, &token, now);
        let issued_ticket = arrival
            .ticket_cookie
            .and_then(parse_token)
            .is_some_and(|old| self.seal.issued_here(&old));
        self.emit_queue(QueueEvent {
            client: arrival.client,
            stale_ticket: issued_ticket,
        });
        waiting
    }

    /// Whether `client`'s address already holds `max_per_address` live tickets. While the whole
    /// line holds fewer, no address can, so most arrivals cost one atomic load here.
    fn address_is_full(&self, client: IpAddr, settings: &RoomSettings) -> bool {
        let max = settings.max_per_address;
        if max == 0 || self.tokens.len() < u64::from(max) || self.tokens.held_by(client) < max {
            return false;
        }
        let exemption = self.address_exemption.read().clone();
        !exemption.is_some_and(|exempt| exempt(client))
    }

    /// Retires the oldest never-proven ticket if it was issued at or before `cutoff`, making
    /// room for a newcomer; stale order entries met on the way are dropped. Bounded steps.
    pub(super) fn shed_abandoned(&self, cutoff: u64, now: u64) -> bool {
        for _ in 0..TIDY_STEPS {
            let Some(token) = self.tokens.oldest_unproven() else {
                return false;
            };
            let mut shard = self.tokens.lock_for(&token);
            match shard.get(&token).copied() {
                Some(entry) if !entry.has(SEEN) => {
                    if entry.created() > cutoff {
                        // The oldest has not had its chance yet, so none behind it has.
                        return false;
                    }
                    shard.remove(&token);
                    self.tokens.note_removed(&entry);
                    self.core.lock().retire(entry.key, now);
                    drop(shard);
                    self.tokens.pop_oldest_unproven(&token);
                    bump(&self.counters.evicted, 1);
                    return true;
                }
                // Seen or gone since it was queued: a stale entry.
                _ => {}
            }
            drop(shard);
            self.tokens.pop_oldest_unproven(&token);
        }
        false
    }

    /// Sheds the oldest unproven tickets while there are more than `max` (0 = no bound) and
    /// drops order entries of tickets seen or removed since. A bounded number of steps per call,
    /// so a lowered max-queue or a long stale run is worked off over several arrivals, never
    /// in one request. `newest` (the caller's own ticket) is never shed.
    pub(super) fn tidy_unproven(&self, max: u64, newest: &TokenId, now: u64) {
        let mut shed = 0u64;
        for _ in 0..TIDY_STEPS {
            let over = max > 0 && self.tokens.unproven() > max;
            if !over && !self.tokens.unproven_order_has_stale() {
                break;
            }
            let Some(token) = self.tokens.oldest_unproven() else {
                break;
            };
            if token == *newest {
                break;
            }
            let mut shard = self.tokens.lock_for(&token);
            match shard.get(&token).copied() {
                Some(entry) if !entry.has(SEEN) => {
                    if !over {
                        // Live and not yet due: it waits for its grace like everyone else.
                        break;
                    }
                    shard.remove(&token);
                    self.tokens.note_removed(&entry);
                    self.core.lock().retire(entry.key, now);
                    shed += 1;
                }
                // Seen or gone since it was queued: a stale entry.
                _ => {}
            }
            self.tokens.pop_oldest_unproven(&token);
        }
        if shed > 0 {
            bump(&self.counters.evicted, shed);
        }
    }

    /// Stores `entry` under a fresh random token and reports its place.
    pub(super) fn insert_waiting(
        &self,
        mut entry: Entry,
        vip: bool,
        now: u64,
    ) -> (TokenId, Waiting) {
        loop {
            let token = self.seal.issue();
            let mut shard = self.tokens.lock_for(&token);
            if shard.contains_key(&token) {
                continue;
            }
            let mut core = self.core.lock();
            if vip {
                self.promote_vip(&mut core, &mut entry);
            }
            let position = core.position(entry.key);
            let estimate = core.meter.estimate(now, position);
            drop(core);
            shard.insert(token, entry);
            self.tokens.note_added(&token, &entry);
            let waiting = Waiting {
                token: token_hex(&token),
                position,
                estimate,
            };
            return (token, waiting);
        }
    }

    pub(super) fn enter(self: &Arc<Self>, key: Option<Key>, permit: Permit) -> PageSlot {
        let mut core = self.core.lock();
        core.occupancy += 1;
        let cap = core.line.cap();
        let (occupancy, depth) = (core.occupancy, core.line.queue_depth());
        drop(core);
        bump(&self.counters.admitted, 1);
        if occupancy == cap {
            tracing::warn!(
                "upstream saturated: {occupancy}/{cap} slots, {depth} queued ({} live)",
                self.tokens.len()
            );
        }
        PageSlot {
            shared: Arc::clone(self),
            key,
            permit: Some(permit),
        }
    }

    /// Puts a claimed ticket back in line with its place kept.
    pub(super) fn requeue(&self, admission: &Admission) -> Waiting {
        let now = self.now_ms();
        let (token, mut entry) = match admission.restore {
            Some((token, entry)) => (Some(token), entry),
            None => (None, Entry::new(admission.key, now, admission.client)),
        };
        entry.set_last_seen(now);
        entry.set_cookie_set_at(now);
        if let Some(token) = token {
            let mut shard = self.tokens.lock_for(&token);
            if let std::collections::hash_map::Entry::Vacant(slot) = shard.entry(token) {
                let mut core = self.core.lock();
                let position = core.position(entry.key);
                let estimate = core.meter.estimate(now, position);
                drop(core);
                slot.insert(entry);
                self.tokens.note_added(&token, &entry);
                return Waiting {
                    token: token_hex(&token),
                    position,
                    estimate,
                };
            }
        }
        self.insert_waiting(entry, false, now).1
    }
}

/// The room counts in milliseconds, so the coarse clock (one scheduler tick, 1 to 10 ms) serves
/// its timelines of seconds and minutes. Unit tests keep tokio's clock, which they pause and
/// move by hand.
#[cfg(not(test))]
pub(super) fn room_clock() -> Instant {
    crate::sys::coarse_clock::tokio_instant()
}

#[cfg(test)]
pub(super) fn room_clock() -> Instant {
    Instant::now()
}
