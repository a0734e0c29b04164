//! The FIFO waiting room: tickets, serving window, ghost ledger, tokens, VIP passes, status polls,
//! reaper, promotion and the queue snapshot.
//!
//! [`Room::arrive`] decides for a request (admit, wait, or full); [`Room::admit`] takes a page
//! slot for an admitted request and returns a [`PageSlot`] whose drop ends the visit. The window
//! is counted as now serving + cap, with ghosts for abandoned tickets; see `line` for the rules.
//! The state and the steps that change it are in `shared`, the settings in `settings`, the
//! vocabulary of arrivals and figures in `visit`.

mod estimate;
mod kicks;
mod ledger;
mod line;
mod notes;
pub mod page;
mod pool;
mod reaper;
mod seal;
mod settings;
mod shared;
mod snapshot;
mod status;
mod tokens;
mod visit;

#[cfg(test)]
mod tests;

use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::sys::slots::Gate;

pub(crate) use estimate::RateMeter;
pub use estimate::WaitEstimate;
pub use notes::{NoteStats, TicketNote};
pub use pool::SlotPool;
pub use seal::TicketSeal;
pub use settings::RoomSettings;
pub use shared::{Admission, AdmitResult, Decision, PageSlot};
pub use visit::{Arrival, LineEntry, RoomStats, TicketInfo, Waiting};

pub(crate) use settings::Pricing;
pub(crate) use snapshot::{Snapshot, SnapshotError, WallTime};
pub(crate) use status::PollOutcome;
pub(crate) use visit::{AddressExemption, QueueEvent, QueueHook, RoomPromoteError};

use line::{Key, Line};
use settings::duration_ms;
use shared::{CLOCK_BIAS_MS, Core, Counters, Shared, bump};
use tokens::{Entry, PROMOTED, TokenId, TokenStore, parse_token};

/// The waiting room.
pub struct Room {
    shared: Arc<Shared>,
    reaper_stop: watch::Sender<bool>,
}

impl fmt::Debug for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Room")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Room {
    /// A room whose tickets are sealed under a key of its own (recognised until the process
    /// ends).
    pub fn new(settings: RoomSettings) -> Arc<Room> {
        Room::sealed(settings, TicketSeal::random())
    }

    /// A room whose tickets are sealed with `seal`: derived from the admission secret, its
    /// tickets are recognised across restarts and by every instance sharing the secret.
    pub fn sealed(settings: RoomSettings, seal: TicketSeal) -> Arc<Room> {
        let settings = settings.normalized();
        let epoch = Instant::now();
        let cap = settings.cap;
        let shared = Arc::new(Shared {
            settings: ArcSwap::from_pointee(settings),
            core: Mutex::new(Core {
                line: Line::new(u64::from(cap)),
                occupancy: 0,
                meter: RateMeter::new(CLOCK_BIAS_MS),
            }),
            tokens: TokenStore::new(),
            passes: Mutex::new(HashMap::new()),
            lapsed: Mutex::new(HashMap::new()),
            gate: Gate::new(cap as usize),
            counters: Counters::default(),
            hook: RwLock::new(None),
            address_exemption: RwLock::new(None),
            seal,
            kicks: kicks::Kicks::default(),
            notes: notes::Notes::default(),
            epoch,
            pool: std::sync::OnceLock::new(),
        });
        Arc::new(Room {
            shared,
            reaper_stop: watch::Sender::new(false),
        })
    }

    /// Current settings.
    pub fn settings(&self) -> RoomSettings {
        RoomSettings::clone(&self.shared.settings.load())
    }

    /// Applies new settings live. A cap change moves the edge and drains the ledger at once.
    pub fn reconfigure(&self, settings: RoomSettings) {
        let settings = settings.normalized();
        let cap = settings.cap;
        self.shared.settings.store(Arc::new(settings));
        let mut core = self.shared.core.lock();
        if core.line.cap() != u64::from(cap) {
            match self.shared.pool.get() {
                // The lender sizes the gate; it reads the new cap at its next round, now.
                Some(pool) => pool.nudge(),
                None => self.shared.gate.resize(cap as usize),
            }
            // A cap change is a one-off jump of the edge, not a pace the line keeps, so the
            // wait estimate does not count it.
            core.line.set_cap(u64::from(cap));
        }
    }

    /// The room middleware's decision for one request (steps 1–5 of the waiting-room rules).
    pub fn arrive(&self, arrival: Arrival<'_>) -> Decision {
        let shared = &self.shared;
        let settings = shared.settings.load();
        let now = shared.now_ms();
        let has_pass = arrival
            .pass_cookie
            .is_some_and(|pass| shared.pass_valid(pass, now));
        if let Some(token) = arrival.ticket_cookie.and_then(parse_token)
            && let Some(decision) = shared.returning(token, has_pass, now, &settings)
        {
            return decision;
        }
        shared.new_arrival(&arrival, has_pass, now, &settings)
    }

    /// Waits (bounded) for a page slot. Dropping the future before it completes retires the ticket
    /// and counts a timeout; running out of time puts the visitor back in line with their place.
    pub async fn admit(&self, mut admission: Admission) -> AdmitResult {
        let gate = Arc::clone(&admission.shared.gate);
        // A free slot is taken at once, without reading the clock and arming a timer for a
        // wait that does not happen (most requests, whenever the room is not full).
        let permit = match gate.try_acquire() {
            Some(permit) => Some(permit),
            None => {
                let wait = self.shared.settings.load().slot_wait();
                // With shared slots, the lender hears of the shortage at once and may lend more
                // while this visitor waits, within the same bound.
                let _short = self.shared.pool.get().map(|pool| pool.short());
                tokio::time::timeout(wait, gate.acquire()).await.ok()
            }
        };
        match permit {
            Some(permit) => {
                admission.armed = false;
                let slot = admission.shared.enter(Some(admission.key), permit);
                AdmitResult::Admitted(slot)
            }
            None => {
                admission.armed = false;
                AdmitResult::Requeued(admission.shared.requeue(&admission))
            }
        }
    }

    /// Claims and retires one visitor (portal removal, kicks). Missing → false.
    pub fn remove_token(&self, token: &str) -> bool {
        let Some(token) = parse_token(token) else {
            return false;
        };
        let shared = &self.shared;
        let mut shard = shared.tokens.lock_for(&token);
        let Some(entry) = shard.remove(&token) else {
            drop(shard);
            // A lapsed visitor holds no place, only a claim on the front; removal drops it.
            let removed = shared.lapsed.lock().remove(&token).is_some();
            if removed {
                bump(&shared.counters.removed, 1);
            }
            return removed;
        };
        shared.tokens.note_removed(&entry);
        let now = shared.now_ms();
        shared.core.lock().retire(entry.key, now);
        drop(shard);
        bump(&shared.counters.removed, 1);
        true
    }

    /// Removes a visitor and remembers its ticket for `remember_for`, so its next request is
    /// told it was removed ([`Room::was_removed`]) rather than queued again. False when the
    /// ticket is not in the line.
    pub fn remove_and_remember(&self, token: &str, remember_for: Duration) -> bool {
        let Some(id) = parse_token(token) else {
            return false;
        };
        if !self.remove_token(token) {
            return false;
        }
        let now = self.shared.now_ms();
        self.shared
            .kicks
            .remember(id, now.saturating_add(duration_ms(remember_for)), now);
        true
    }

    /// Whether `token` belongs to a visitor an operator removed from the line lately.
    pub fn was_removed(&self, token: &str) -> bool {
        if self.shared.kicks.is_empty() {
            return false;
        }
        parse_token(token).is_some_and(|id| self.shared.kicks.contains(&id, self.shared.now_ms()))
    }

    /// Starts noting each new ticket's first path and browser (the portal shows them).
    pub fn enable_notes(&self) {
        self.shared.notes.enable();
    }

    /// Whether new tickets are being noted: callers skip gathering what a note holds if not.
    pub fn notes_enabled(&self) -> bool {
        self.shared.notes.enabled()
    }

    /// Notes the first request of a ticket this room just issued.
    pub fn note_ticket(&self, token: &str, path: &str, user_agent: &str) {
        if let Some(id) = parse_token(token) {
            self.shared.notes.add(id, path, user_agent);
        }
    }

    /// The notes of these visitors, in their order.
    pub fn notes_of(&self, entries: &[LineEntry]) -> Vec<Option<TicketNote>> {
        self.shared
            .notes
            .lookup(entries.iter().map(|entry| entry.info.token))
    }

    /// Forgets the notes of visitors no longer in line or waiting to come back.
    pub fn prune_notes(&self) -> usize {
        let shared = &self.shared;
        shared.notes.prune(|token| {
            shared.tokens.lock_for(token).contains_key(token)
                || shared.lapsed.lock().contains_key(token)
        })
    }

    pub fn note_stats(&self) -> NoteStats {
        self.shared.notes.stats()
    }

    /// How many removed tickets are remembered now (some may have just run out).
    pub fn removed_remembered(&self) -> usize {
        self.shared.kicks.len()
    }

    /// Forgets removed tickets whose time is over; returns how many are still remembered.
    pub fn prune_removed(&self) -> usize {
        self.shared.kicks.prune(self.shared.now_ms())
    }

    /// Claims and retires every visitor matching `pred`, one shard at a time. `pred` runs with that
    /// shard locked, so it must be quick and must not call back into the room.
    pub fn remove_where(&self, pred: impl Fn(&TicketInfo) -> bool) -> usize {
        let shared = &self.shared;
        self.remove_matching(|token, entry| pred(&shared.info(token, entry)))
    }

    /// [`Room::remove_where`] for a test of the client's address alone (a ban): it looks at
    /// nothing else, so a pass over a long line costs less.
    pub fn remove_clients(&self, banned: impl Fn(IpAddr) -> bool) -> usize {
        self.remove_matching(|_, entry| entry.client.is_some_and(&banned))
    }

    fn remove_matching(&self, matches: impl Fn(&TokenId, &Entry) -> bool) -> usize {
        let shared = &self.shared;
        let mut removed_keys: Vec<Key> = Vec::new();
        let mut total = {
            let mut lapsed = shared.lapsed.lock();
            let before = lapsed.len();
            lapsed.retain(|token, entry| !matches(token, entry));
            before - lapsed.len()
        };
        for index in 0..tokens::SHARD_COUNT {
            let mut shard = shared.tokens.lock_shard(index);
            shard.retain(|token, entry| {
                let remove = matches(token, entry);
                if remove {
                    removed_keys.push(entry.key);
                    shared.tokens.note_removed(entry);
                }
                !remove
            });
            if removed_keys.is_empty() {
                continue;
            }
            total += removed_keys.len();
            let now = shared.now_ms();
            let mut core = shared.core.lock();
            removed_keys.sort_unstable();
            for key in removed_keys.drain(..) {
                core.retire(key, now);
            }
        }
        if total > 0 {
            bump(&shared.counters.removed, total as u64);
        }
        total
    }

    /// Moves a waiting visitor to `position` (free; portal "move to front" = 1). Returns whether
    /// the visitor moved.
    pub fn promote(&self, token: &str, position: u64) -> Result<bool, RoomPromoteError> {
        let token = parse_token(token).ok_or(RoomPromoteError::NotFound)?;
        let shared = &self.shared;
        let mut shard = shared.tokens.lock_for(&token);
        let entry = shard.get_mut(&token).ok_or(RoomPromoteError::NotFound)?;
        let mut core = shared.core.lock();
        match core.line.promote(entry.key, position)? {
            Some(key) => {
                entry.key = key;
                entry.set(PROMOTED, true);
                bump(&shared.counters.promoted, 1);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Records a visitor's priority rank (shown in the portal only; the line stays in arrival order).
    pub fn set_ticket_rank(&self, token: &str, rank: u8) -> bool {
        let Some(token) = parse_token(token) else {
            return false;
        };
        let mut shard = self.shared.tokens.lock_for(&token);
        match shard.get_mut(&token) {
            Some(entry) => {
                entry.rank = rank;
                true
            }
            None => false,
        }
    }

    /// Registers a VIP `room_pass` valid for `ttl`.
    pub fn add_pass(&self, pass: &str, ttl: Duration) {
        let expiry = self.shared.now_ms().saturating_add(duration_ms(ttl));
        self.shared.passes.lock().insert(pass.into(), expiry);
    }

    pub fn pass_valid(&self, pass: &str) -> bool {
        self.shared.pass_valid(pass, self.shared.now_ms())
    }

    /// The front of the line (at most `limit` visitors, in line order) with positions.
    pub fn line_front(&self, limit: usize) -> Vec<LineEntry> {
        if limit == 0 {
            return Vec::new();
        }
        let shared = &self.shared;
        // Max-heap on key keeps the `limit` smallest keys: O(n log limit), one shard at a time.
        let expected = limit.min(usize::try_from(shared.tokens.len()).unwrap_or(usize::MAX));
        let mut front: BinaryHeap<(Key, TokenId, Entry)> = BinaryHeap::with_capacity(expected + 1);
        for index in 0..tokens::SHARD_COUNT {
            let shard = shared.tokens.lock_shard(index);
            for (token, entry) in shard.iter() {
                if front.len() < limit {
                    front.push((entry.key, *token, *entry));
                } else if front.peek().is_some_and(|(worst, _, _)| entry.key < *worst) {
                    front.pop();
                    front.push((entry.key, *token, *entry));
                }
            }
        }
        let rows = front.into_sorted_vec();
        let core = shared.core.lock();
        rows.into_iter()
            .map(|(key, token, entry)| {
                let position = core.line.position(key);
                LineEntry {
                    info: shared.info(&token, &entry),
                    position,
                    ready: position <= 0,
                }
            })
            .collect()
    }

    /// True when the page slots are all taken or anyone is waiting (the priority gate's test).
    pub fn is_busy(&self) -> bool {
        if self.shared.pool.get().is_some() && self.shared.gate.available() == 0 {
            // Lent slots may be fewer than the cap: none free here is busy.
            return true;
        }
        let occupancy = {
            let core = self.shared.core.lock();
            core.occupancy >= core.line.cap()
        };
        occupancy || self.shared.tokens.len() > 0
    }

    /// The page gate: the slots this instance may hold at the origin at once.
    pub fn page_gate(&self) -> &Arc<Gate> {
        &self.shared.gate
    }

    /// Counts a visitor the cluster's shared line let in on `permit` (a slot of the page gate)
    /// as the room counts its own: occupancy and admissions. The local line is not touched.
    pub fn admit_shared(&self, permit: crate::sys::slots::Permit) -> PageSlot {
        self.shared.enter(None, permit)
    }

    /// A new ticket sealed as the room seals its own, as its cookie value: valid on every
    /// instance sharing the admission secret.
    pub fn issue_ticket(&self) -> String {
        tokens::token_hex(&self.shared.seal.issue())
    }

    /// Whether `ticket` (a cookie value) holds a place in this room's own line.
    pub fn holds_ticket(&self, ticket: &str) -> bool {
        parse_token(ticket).is_some_and(|token| {
            self.shared.tokens.lock_for(&token).contains_key(&token)
                || self.shared.lapsed.lock().contains_key(&token)
        })
    }

    /// Whether `ticket` (a cookie value) was sealed under this room's secret.
    pub fn recognises(&self, ticket: &str) -> bool {
        parse_token(ticket).is_some_and(|token| self.shared.seal.issued_here(&token))
    }

    /// Reports a visitor queued elsewhere than in this room (the shared line) as the room
    /// reports its own: the queued count and the queue hook.
    pub(crate) fn note_queued(&self, event: QueueEvent) {
        self.shared.emit_queue(event);
    }

    /// Whether the per-address ticket bound leaves `client` alone.
    pub(crate) fn address_exempt(&self, client: IpAddr) -> bool {
        let exemption = self.shared.address_exemption.read().clone();
        exemption.is_some_and(|exempt| exempt(client))
    }

    /// Takes the page slots from a pool shared with other instances from now on: the gate
    /// holds none until [`Room::set_page_slots`] lends some (those in use stay in use), and a
    /// cap change no longer resizes it. Later calls return the same pool.
    pub fn share_page_slots(&self) -> Arc<SlotPool> {
        let mut first = false;
        let pool = self.shared.pool.get_or_init(|| {
            first = true;
            Arc::new(SlotPool::default())
        });
        if first {
            self.shared.gate.resize(0);
        }
        Arc::clone(pool)
    }

    /// Sets how many page slots this instance holds (shared slots only; alone, the cap does).
    /// Shrinking below the slots in use leaves permit debt: they end, and none is given out
    /// until fewer than `slots` are in use.
    pub fn set_page_slots(&self, slots: usize) {
        self.shared.gate.resize(slots);
    }

    /// Waits at most `wait` for a free page slot (shared slots: the lender hears of the
    /// shortage at once and may lend one meanwhile).
    pub async fn wait_page_slot(&self, wait: Duration) -> Option<crate::sys::slots::Permit> {
        if let Some(permit) = self.shared.gate.try_acquire() {
            return Some(permit);
        }
        let _short = self.shared.pool.get().map(|pool| pool.short());
        tokio::time::timeout(wait, self.shared.gate.acquire())
            .await
            .ok()
    }

    /// Page slots held now and how many of them are in use (in use may exceed held for a
    /// while after a shrink).
    pub fn page_slots(&self) -> (usize, usize) {
        (self.shared.gate.capacity(), self.shared.gate.in_use())
    }

    /// Page requests admitted since start (one atomic load).
    pub fn admitted_total(&self) -> u64 {
        self.shared.counters.admitted.load(Ordering::Relaxed)
    }

    pub fn set_queue_hook(&self, hook: QueueHook) {
        *self.shared.hook.write() = Some(hook);
    }

    /// Sets which addresses the per-address ticket bound leaves alone.
    pub fn set_address_exemption(&self, exemption: AddressExemption) {
        *self.shared.address_exemption.write() = Some(exemption);
    }

    pub fn stats(&self) -> RoomStats {
        let shared = &self.shared;
        let now = shared.now_ms();
        let settings = shared.settings.load();
        let mut core = shared.core.lock();
        let counters = &shared.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RoomStats {
            cap: core.line.cap(),
            occupancy: core.occupancy,
            queue_depth: core.line.queue_depth(),
            live_queue_depth: shared.tokens.len(),
            max_queue_depth: settings.max_queue,
            utilization: shared.gate.utilization(),
            queued_total: load(&counters.queued),
            evicted_total: load(&counters.evicted),
            timeouts_total: load(&counters.timeouts),
            promoted_total: load(&counters.promoted),
            removed_total: load(&counters.removed),
            admitted_total: load(&counters.admitted),
            lapsed_total: load(&counters.lapsed),
            rejoined_total: load(&counters.rejoined),
            address_full_total: load(&counters.address_full),
            issued: core.line.issued(),
            now_serving: core.line.now_serving(),
            ghosts: core.line.ghost_count(),
            admission_rate: core.meter.rate(now),
        }
    }
}
