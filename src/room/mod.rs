//! The FIFO waiting room: tickets, serving window, ghost ledger, tokens, VIP passes, status polls,
//! reaper, promotion and the queue snapshot.
//!
//! `Room::arrive` is the room middleware's decision (admit, wait, or full); `Room::admit` takes a page
//! slot for an admitted request and returns a `PageSlot` whose drop ends the visit. Counting follows
//! the original (edge = now serving + cap, ghosts for abandoned tickets); see `line` for the rules.
//! Locks: a token shard, then the line; never the other way round, and never across an await.

mod estimate;
mod ledger;
mod line;
pub mod page;
mod reaper;
mod snapshot;
mod status;
mod tokens;

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

use crate::sys::slots::{Gate, Permit};

pub use estimate::WaitEstimate;
pub use ledger::CountTree;
pub use line::PromoteError;
pub use snapshot::{
    MAX_TOKEN_LEN, SNAPSHOT_VERSION, Snapshot, SnapshotError, SnapshotPass, SnapshotTicket,
    WallTime,
};
pub use status::PollOutcome;

use estimate::RateMeter;
use line::{Key, Line};
use tokens::{Entry, HAS_PASS, PROMOTED, SEEN, TokenId, TokenStore, parse_token, token_hex};

/// Room clock offset, so times restored from a snapshot can lie before the room started.
const CLOCK_BIAS_MS: u64 = 7 * 24 * 3_600 * 1_000;
/// Default token TTL and reaper period when the settings say 0.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(300);
pub const DEFAULT_REAPER: Duration = Duration::from_secs(300);
/// Shortest reaper period the ready grace asks for (the least `-reaper` allows).
const MIN_LAPSE_CHECK: Duration = Duration::from_secs(5);
/// Shortest bound on a ready visitor's wait for a page slot.
const MIN_SLOT_WAIT: Duration = Duration::from_secs(10);
/// How long a new ticket has to prove itself before a newcomer at a full line may take its
/// room: two poll intervals, the least the first-poll grace may be.
fn proof_window_ms(settings: &RoomSettings) -> u64 {
    u64::from(settings.retry_after_secs.max(1)) * 2_000
}

/// Most entries of the unproven order one arrival looks at (shed or dropped as stale): twice
/// the one entry each arrival may add, so a backlog shrinks, and a fixed cost per request.
const TIDY_STEPS: usize = 4;

/// Skip-the-line pricing: `rate + queue depth × surge` per position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pricing {
    pub rate: f64,
    pub surge: f64,
}

impl Pricing {
    /// Pricing is on only when either part is positive.
    pub fn new(rate: f64, surge: f64) -> Option<Pricing> {
        (rate > 0.0 || surge > 0.0).then_some(Pricing { rate, surge })
    }

    pub fn price_per_position(&self, queue_depth: u64) -> f64 {
        self.rate + queue_depth as f64 * self.surge
    }
}

/// Live room settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomSettings {
    pub cap: u32,
    /// 0 = unlimited.
    pub max_queue: u64,
    pub token_ttl: Duration,
    /// 0 = off.
    pub first_poll_grace: Duration,
    /// How long a visitor whose turn has come may go unseen before their place in the window
    /// passes to the next in line. 0 = off: the place is held until the token lifetime ends.
    pub ready_grace: Duration,
    pub reaper: Duration,
    pub retry_after_secs: u32,
    pub pricing: Option<Pricing>,
}

impl Default for RoomSettings {
    fn default() -> RoomSettings {
        RoomSettings {
            cap: 434,
            max_queue: 369,
            token_ttl: DEFAULT_TOKEN_TTL,
            first_poll_grace: Duration::from_secs(30),
            ready_grace: Duration::from_secs(30),
            reaper: Duration::from_secs(36),
            retry_after_secs: 5,
            pricing: None,
        }
    }
}

impl RoomSettings {
    /// Replaces values the room cannot work with by its defaults (cap ≥ 1, TTL and reaper > 0,
    /// retry-after ≥ 1). Validation with messages belongs to the configuration layer.
    fn normalized(mut self) -> RoomSettings {
        self.cap = self.cap.max(1);
        if self.token_ttl.is_zero() {
            self.token_ttl = DEFAULT_TOKEN_TTL;
        }
        if self.reaper.is_zero() {
            self.reaper = DEFAULT_REAPER;
        }
        self.retry_after_secs = self.retry_after_secs.max(1);
        self
    }

    fn ttl_ms(&self) -> u64 {
        duration_ms(self.token_ttl)
    }

    fn grace_ms(&self) -> u64 {
        duration_ms(self.first_poll_grace)
    }

    fn ready_grace_ms(&self) -> u64 {
        duration_ms(self.ready_grace)
    }

    /// How long a ready visitor may wait for a page slot before being sent back to the line.
    pub fn slot_wait(&self) -> Duration {
        MIN_SLOT_WAIT.max(Duration::from_secs(2 * u64::from(self.retry_after_secs)))
    }

    /// Reaper period: min(reaper, the first-poll grace when on, a sixth of the ready grace when
    /// on but not under 5 s). Every second a lapsed ticket goes unnoticed is a second its place
    /// in the window stands idle, so lapses are looked for often; a pass over 100,000 waiting
    /// visitors costs well under a millisecond.
    pub fn reaper_period(&self) -> Duration {
        let lapse_check =
            (!self.ready_grace.is_zero()).then(|| (self.ready_grace / 6).max(MIN_LAPSE_CHECK));
        [
            (!self.first_poll_grace.is_zero()).then_some(self.first_poll_grace),
            lapse_check,
        ]
        .into_iter()
        .flatten()
        .fold(self.reaper, Duration::min)
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What the middleware knows about a request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arrival<'a> {
    /// `room_ticket` cookie.
    pub ticket_cookie: Option<&'a str>,
    /// `room_pass` cookie.
    pub pass_cookie: Option<&'a str>,
    pub client: Option<IpAddr>,
}

/// Outcome of an arrival.
#[derive(Debug)]
pub enum Decision {
    /// Ready: take a slot with `Room::admit`.
    Admit(Admission),
    /// Render the waiting page (set both cookies with `token`).
    Wait(Waiting),
    /// Breaker open: 503.
    Full,
}

/// A visitor told to wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// 32 lowercase hex digits, the `room_ticket` value.
    pub token: String,
    /// ≥ 1.
    pub position: u64,
    pub estimate: WaitEstimate,
}

/// Result of waiting for a page slot.
#[derive(Debug)]
pub enum AdmitResult {
    Admitted(PageSlot),
    /// No slot freed within the bound; the visitor keeps their place and gets the waiting page.
    Requeued(Waiting),
}

/// Sent to the queue hook when a new visitor is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueEvent {
    pub client: Option<IpAddr>,
    /// The request carried some `room_ticket` cookie (stale or unknown), so it is no cookieless
    /// churn.
    pub stale_ticket: bool,
}

pub type QueueHook = Arc<dyn Fn(&QueueEvent) + Send + Sync>;

/// A waiting visitor as seen by removal predicates and the portal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketInfo {
    pub token: [u8; 16],
    pub client: Option<IpAddr>,
    pub joined: Instant,
    pub last_seen: Instant,
    pub seen: bool,
    pub promoted: bool,
    pub has_pass: bool,
    pub rank: u8,
}

impl TicketInfo {
    /// The `room_ticket` value.
    pub fn token_hex(&self) -> String {
        token_hex(&self.token)
    }
}

/// One row of the line as the portal lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineEntry {
    pub info: TicketInfo,
    /// ≤ 0 once ready.
    pub position: i64,
    pub ready: bool,
}

/// Counters and gauges (`/_room/stats`).
#[derive(Debug, Clone, PartialEq)]
pub struct RoomStats {
    pub cap: u64,
    pub occupancy: u64,
    pub queue_depth: u64,
    pub live_queue_depth: u64,
    /// 0 = unlimited.
    pub max_queue_depth: u64,
    pub utilization: f64,
    pub queued_total: u64,
    pub evicted_total: u64,
    pub timeouts_total: u64,
    pub promoted_total: u64,
    pub removed_total: u64,
    pub admitted_total: u64,
    /// Ready visitors who stayed away past the ready grace; their place went to the next in line.
    pub lapsed_total: u64,
    /// Lapsed visitors who came back and were put at the front of the line.
    pub rejoined_total: u64,
    /// Line counters, for diagnostics: issued = now_serving + ghosts + live + in flight.
    pub issued: u64,
    pub now_serving: u64,
    pub ghosts: u64,
    /// Places the waiting visitors move forward per second (smoothed): releases and ready
    /// tickets ending, not the abandoned tickets the edge passes.
    pub admission_rate: f64,
}

/// Why an administrative promotion failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoomPromoteError {
    #[error("that visitor is no longer in line")]
    NotFound,
    #[error(transparent)]
    Refused(#[from] PromoteError),
}

#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    evicted: AtomicU64,
    timeouts: AtomicU64,
    promoted: AtomicU64,
    removed: AtomicU64,
    admitted: AtomicU64,
    lapsed: AtomicU64,
    rejoined: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Line state guarded by one short-held mutex.
struct Core {
    line: Line,
    occupancy: u64,
    meter: RateMeter,
}

impl Core {
    fn retire(&mut self, key: Key, now: u64) {
        let moved = self.line.retire(key);
        if moved > 0 {
            self.meter.record(now, moved);
        }
    }

    fn position(&self, key: Key) -> u64 {
        // A ready key told to wait (requeued) is at the front.
        self.line.position(key).max(1) as u64
    }
}

struct Shared {
    settings: ArcSwap<RoomSettings>,
    core: Mutex<Core>,
    tokens: TokenStore,
    /// VIP `room_pass` tokens → expiry (room clock ms).
    passes: Mutex<HashMap<Box<str>, u64>>,
    /// Visitors whose turn came while they were away, kept until their token lifetime ends so
    /// they can take the front of the line when they come back. Taken after any other lock.
    lapsed: Mutex<HashMap<TokenId, Entry>>,
    gate: Arc<Gate>,
    counters: Counters,
    hook: RwLock<Option<QueueHook>>,
    epoch: Instant,
}

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

/// A claimed ready ticket (or a new ticket admitted at once). Dropping it without `Room::admit`
/// completing retires the ticket and counts a timeout.
pub struct Admission {
    shared: Arc<Shared>,
    key: Key,
    /// The token and entry to put back if the slot wait runs out.
    restore: Option<(TokenId, Entry)>,
    client: Option<IpAddr>,
    armed: bool,
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
    shared: Arc<Shared>,
    key: Key,
    permit: Option<Permit>,
}

impl fmt::Debug for PageSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageSlot")
            .field("ticket", &self.key.number)
            .finish()
    }
}

impl Drop for PageSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        let shared = &self.shared;
        let now = shared.now_ms();
        let mut core = shared.core.lock();
        let cap = core.line.cap();
        core.occupancy = core.occupancy.saturating_sub(1);
        let drained = core.occupancy + 1 == cap;
        core.line.mark_ended(self.key);
        let moved = core.line.release();
        core.meter.record(now, moved);
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

/// The room counts in milliseconds, so the coarse clock (one scheduler tick, 1 to 10 ms) serves
/// its timelines of seconds and minutes. Unit tests keep tokio's clock, which they pause and
/// move by hand.
#[cfg(not(test))]
fn room_clock() -> Instant {
    crate::sys::coarse_clock::tokio_instant()
}

#[cfg(test)]
fn room_clock() -> Instant {
    Instant::now()
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.ms_at(room_clock())
    }

    /// [`Shared::now_ms`] from the precise clock, for the status poll: its one-second throttle
    /// must not turn away a client polling every second because two ticks rounded differently.
    fn precise_now_ms(&self) -> u64 {
        self.ms_at(Instant::now())
    }

    fn ms_at(&self, instant: Instant) -> u64 {
        CLOCK_BIAS_MS + duration_ms(instant.saturating_duration_since(self.epoch))
    }

    fn instant_of(&self, ms: u64) -> Instant {
        if ms >= CLOCK_BIAS_MS {
            self.epoch + Duration::from_millis(ms - CLOCK_BIAS_MS)
        } else {
            self.epoch
                .checked_sub(Duration::from_millis(CLOCK_BIAS_MS - ms))
                .unwrap_or(self.epoch)
        }
    }

    fn pass_valid(&self, pass: &str, now: u64) -> bool {
        self.passes
            .lock()
            .get(pass)
            .is_some_and(|&expiry| expiry > now)
    }

    fn info(&self, token: &TokenId, entry: &Entry) -> TicketInfo {
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

    fn emit_queue(&self, event: QueueEvent) {
        bump(&self.counters.queued, 1);
        let hook = self.hook.read().clone();
        if let Some(hook) = hook {
            hook(&event);
        }
    }

    /// Auto-promotes a VIP to the front once.
    fn promote_vip(&self, core: &mut Core, entry: &mut Entry) {
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
    fn returning(
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
    fn admit_claimed(self: &Arc<Self>, token: TokenId, entry: Entry) -> Decision {
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
    fn rejoin(
        self: &Arc<Self>,
        mut shard: parking_lot::MutexGuard<'_, tokens::Shard>,
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

    fn new_arrival(
        self: &Arc<Self>,
        arrival: &Arrival<'_>,
        has_pass: bool,
        now: u64,
        settings: &RoomSettings,
    ) -> Decision {
        // The breaker trips, as the original's does, when the tickets alive reach max-queue.
        // But the original then turns every newcomer away until the first-poll grace sweeps a
        // burst of clients that never keep the cookie (30 s with the origin idle). Here a
        // ticket that has had two poll intervals to prove itself (poll, or come back with its
        // cookie) and has not is taken to be abandoned: the newcomer takes its room instead.
        // Proven visitors are never displaced, and within the window the breaker answers as
        // the original does.
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
        self.tidy_unproven(max, &token, now);
        self.emit_queue(QueueEvent {
            client: arrival.client,
            stale_ticket: arrival.ticket_cookie.is_some(),
        });
        waiting
    }

    /// Retires the oldest never-proven ticket if it was issued at or before `cutoff`, making
    /// room for a newcomer; stale order entries met on the way are dropped. Bounded steps.
    fn shed_abandoned(&self, cutoff: u64, now: u64) -> bool {
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
    fn tidy_unproven(&self, max: u64, newest: &TokenId, now: u64) {
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
    fn insert_waiting(&self, mut entry: Entry, vip: bool, now: u64) -> (TokenId, Decision) {
        loop {
            let token: TokenId = rand::random();
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
            return (token, Decision::Wait(waiting));
        }
    }

    fn enter(self: &Arc<Self>, key: Key, permit: Permit) -> PageSlot {
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
    fn requeue(&self, admission: &Admission) -> Waiting {
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
        match self.insert_waiting(entry, false, now).1 {
            Decision::Wait(waiting) => waiting,
            // insert_waiting only ever answers Wait.
            Decision::Admit(_) | Decision::Full => Waiting {
                token: String::new(),
                position: 1,
                estimate: WaitEstimate::UNKNOWN,
            },
        }
    }
}

impl Room {
    pub fn new(settings: RoomSettings) -> Arc<Room> {
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
            epoch,
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
            self.shared.gate.resize(cap as usize);
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
                tokio::time::timeout(wait, gate.acquire()).await.ok()
            }
        };
        match permit {
            Some(permit) => {
                admission.armed = false;
                let slot = admission.shared.enter(admission.key, permit);
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
        let occupancy = {
            let core = self.shared.core.lock();
            core.occupancy >= core.line.cap()
        };
        occupancy || self.shared.tokens.len() > 0
    }

    pub fn set_queue_hook(&self, hook: QueueHook) {
        *self.shared.hook.write() = Some(hook);
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
            issued: core.line.issued(),
            now_serving: core.line.now_serving(),
            ghosts: core.line.ghost_count(),
            admission_rate: core.meter.rate(now),
        }
    }
}
