//! Priority: ranks granted by the origin (`Concert-Priority` response header → signed
//! `concert_priority` cookie bound to the visitor's pass), and the ranked lane that lets ranked
//! visitors and form submissions past a busy room.
//!
//! The lane is a small semaphore (`-priority-cap`) whose waiters are served highest rank first,
//! then in arrival order; a newcomer takes a free slot only when nobody is waiting. Waiters sit
//! in an ordered map, so handing a slot on is O(log n), never a scan.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::HeaderValue;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::form_budget::FormBudget;
use super::pass::{PassId, PassSigner, ValidPass, expiry_at};
use crate::config::duration::parse_go_duration;
use crate::respond::Rejection;

/// Distinct rejected header values that are logged; later ones are only counted.
const LOGGED_REJECTIONS: usize = 50;
const MIN_GRANT_TTL: Duration = Duration::from_secs(60);
const MAX_GRANT_TTL: Duration = Duration::from_secs(24 * 3600);

/// A visitor's rank, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rank {
    Guest = 0,
    Member = 1,
    Prospect = 2,
    Customer = 3,
    Subscriber = 4,
    Checkout = 5,
    Staff = 6,
}

impl Rank {
    pub const ALL: [Rank; 7] = [
        Rank::Guest,
        Rank::Member,
        Rank::Prospect,
        Rank::Customer,
        Rank::Subscriber,
        Rank::Checkout,
        Rank::Staff,
    ];

    pub fn from_u8(value: u8) -> Option<Rank> {
        Rank::ALL.get(usize::from(value)).copied()
    }

    pub fn as_u8(self) -> u8 {
        self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            Rank::Guest => "guest",
            Rank::Member => "member",
            Rank::Prospect => "prospect",
            Rank::Customer => "customer",
            Rank::Subscriber => "subscriber",
            Rank::Checkout => "checkout",
            Rank::Staff => "staff",
        }
    }

    fn from_name(name: &str) -> Option<Rank> {
        Rank::ALL
            .into_iter()
            .find(|rank| rank.name().eq_ignore_ascii_case(name))
    }

    /// Grant lifetime when the origin names none.
    pub fn default_ttl(self) -> Duration {
        match self {
            Rank::Guest => Duration::ZERO,
            Rank::Prospect | Rank::Checkout => Duration::from_secs(30 * 60),
            Rank::Member | Rank::Customer | Rank::Subscriber | Rank::Staff => {
                Duration::from_secs(8 * 3600)
            }
        }
    }
}

/// What a `Concert-Priority` value asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OriginGrant {
    pub rank: Rank,
    /// Zero for guest; otherwise within 1m…24h.
    pub ttl: Duration,
}

/// Parses `<rank>[; ttl=<seconds | Go duration>]`, case-insensitive. A comma-separated value
/// counts by its last item (the last value wins).
pub(crate) fn parse_priority(value: &str) -> Result<OriginGrant, String> {
    let value = value
        .rsplit(',')
        .map(str::trim)
        .find(|item| !item.is_empty())
        .unwrap_or("");
    let mut parts = value.split(';').map(str::trim);
    let name = parts.next().unwrap_or("");
    let rank = Rank::from_name(name).ok_or_else(|| format!("unknown rank {name:?}"))?;
    let mut ttl = None;
    for param in parts.filter(|param| !param.is_empty()) {
        let (key, text) = param
            .split_once('=')
            .ok_or_else(|| format!("malformed parameter {param:?}"))?;
        if !key.trim().eq_ignore_ascii_case("ttl") {
            return Err(format!("unknown parameter {:?}", key.trim()));
        }
        let text = text.trim();
        let parsed = match text.parse::<u64>() {
            Ok(seconds) => Duration::from_secs(seconds),
            Err(_) => parse_go_duration(text).map_err(|e| format!("bad ttl {text:?}: {e}"))?,
        };
        ttl = Some(parsed);
    }
    if rank == Rank::Guest {
        return Ok(OriginGrant {
            rank,
            ttl: Duration::ZERO,
        });
    }
    let ttl = ttl
        .unwrap_or_else(|| rank.default_ttl())
        .clamp(MIN_GRANT_TTL, MAX_GRANT_TTL);
    Ok(OriginGrant { rank, ttl })
}

/// The ranks that use the lane, as the portal shows them.
pub(crate) fn lane_ranks_text(lane_rank: u32) -> String {
    match u8::try_from(lane_rank).ok().and_then(Rank::from_u8) {
        Some(Rank::Staff) => "staff".to_string(),
        Some(rank) => format!("{} and above", rank.name()),
        None => "off".to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// The ranked lane

/// Waiters ordered by rank (highest first), then arrival.
type WaiterKey = (Reverse<u8>, u64);

#[derive(Debug)]
struct LaneState {
    cap: usize,
    in_use: usize,
    next_arrival: u64,
    waiters: BTreeMap<WaiterKey, oneshot::Sender<()>>,
}

impl LaneState {
    /// Gives one held slot back: it vanishes while over capacity (after a shrink), else it goes
    /// to the best waiter still listening, else it becomes free.
    fn release_one(&mut self) {
        if self.in_use > self.cap {
            self.in_use -= 1;
            return;
        }
        while let Some((_, waiter)) = self.waiters.pop_first() {
            if waiter.send(()).is_ok() {
                return;
            }
        }
        self.in_use = self.in_use.saturating_sub(1);
    }

    /// Hands free slots to waiters (after a grow).
    fn fill_from_waiters(&mut self) {
        while self.in_use < self.cap {
            let Some((_, waiter)) = self.waiters.pop_first() else {
                return;
            };
            if waiter.send(()).is_ok() {
                self.in_use += 1;
            }
        }
    }
}

/// The ranked priority semaphore.
#[derive(Debug)]
pub struct Lane {
    state: Mutex<LaneState>,
}

/// A held lane slot; dropping it passes the slot on.
#[derive(Debug)]
#[must_use = "the lane slot is released as soon as the permit is dropped"]
pub struct LanePermit {
    lane: Arc<Lane>,
}

impl Drop for LanePermit {
    fn drop(&mut self) {
        self.lane.state.lock().release_one();
    }
}

/// A queued acquire; dropping it before it is served withdraws it, and gives back a slot that
/// was handed over at the last moment.
struct Waiter {
    lane: Arc<Lane>,
    key: WaiterKey,
    handed: oneshot::Receiver<()>,
    served: bool,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.served {
            return;
        }
        let mut state = self.lane.state.lock();
        if state.waiters.remove(&self.key).is_none() && self.handed.try_recv().is_ok() {
            state.release_one();
        }
    }
}

impl Lane {
    pub fn new(cap: u32) -> Arc<Lane> {
        Arc::new(Lane {
            state: Mutex::new(LaneState {
                cap: cap as usize,
                in_use: 0,
                next_arrival: 0,
                waiters: BTreeMap::new(),
            }),
        })
    }

    /// Changes the capacity in place; holders over a smaller capacity simply finish.
    pub fn resize(&self, cap: u32) {
        let mut state = self.state.lock();
        state.cap = cap as usize;
        state.fill_from_waiters();
    }

    /// Takes a free slot now, only if nobody is waiting.
    pub fn try_acquire(self: &Arc<Self>) -> Option<LanePermit> {
        let mut state = self.state.lock();
        (state.in_use < state.cap && state.waiters.is_empty()).then(|| {
            state.in_use += 1;
            LanePermit {
                lane: Arc::clone(self),
            }
        })
    }

    /// Waits up to `wait` for a slot, behind higher ranks and earlier arrivals of the same rank.
    pub async fn acquire(self: &Arc<Self>, rank: Rank, wait: Duration) -> Option<LanePermit> {
        if let Some(permit) = self.try_acquire() {
            return Some(permit);
        }
        if wait.is_zero() {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let key = {
            let mut state = self.state.lock();
            state.next_arrival += 1;
            let key = (Reverse(rank.as_u8()), state.next_arrival);
            state.waiters.insert(key, tx);
            key
        };
        let mut waiter = Waiter {
            lane: Arc::clone(self),
            key,
            handed: rx,
            served: false,
        };
        match tokio::time::timeout(wait, &mut waiter.handed).await {
            Ok(Ok(())) => {
                waiter.served = true;
                Some(LanePermit {
                    lane: Arc::clone(self),
                })
            }
            _ => None,
        }
    }

    pub fn cap(&self) -> usize {
        self.state.lock().cap
    }

    pub fn in_use(&self) -> usize {
        self.state.lock().in_use
    }

    pub fn waiting(&self) -> usize {
        self.state.lock().waiters.len()
    }
}

// ---------------------------------------------------------------------------------------------
// The gate and grants

/// Process-wide priority counters.
#[derive(Debug, Default)]
pub struct PriorityCounters {
    pub lane_served: AtomicU64,
    pub lane_full: AtomicU64,
    /// Queued visitors moved by rank (line re-ordering is off, so it stays 0).
    pub placed: AtomicU64,
    pub grants: AtomicU64,
    pub grants_cleared: AtomicU64,
    pub grants_rejected: AtomicU64,
    pub forms: AtomicU64,
    pub forms_refused: AtomicU64,
    /// Forms whose pass had used up its form budget: they went through the room instead.
    pub forms_over_budget: AtomicU64,
    /// Gated page requests by rank.
    pub requests: [AtomicU64; 7],
}

/// One busy-room request at the priority gate.
#[derive(Debug, Clone, Copy)]
pub struct LaneRequest {
    pub rank: Rank,
    /// For a form submission (`-priority-forms`, a standard method that changes something, and
    /// a valid pass): the pass it came with, whose form budget it draws on.
    pub form: Option<PassId>,
    /// `-priority-lane-rank`.
    pub lane_rank: u32,
    /// `-priority-wait`.
    pub wait: Duration,
    /// `-retry-after` seconds, for a refused form.
    pub retry_after: u32,
    /// The request carries a live fast-lane pass: it waits for the lane whatever its rank.
    pub fast_lane: bool,
    /// The method changes something (not GET or HEAD): such a fast-lane request is refused
    /// rather than queued when the lane stays full, since a form cannot wait in the line.
    pub writes: bool,
}

/// Where the gate sends a request.
#[derive(Debug)]
pub enum LaneDecision {
    /// Skip the room; the permit is held until the response is delivered.
    Lane(LanePermit),
    /// Go through the waiting room as usual.
    Room,
    /// A form below the lane rank found no lane slot: refuse rather than queue it.
    Refused(Rejection),
}

/// What to do with the visitor's grant cookie after the origin answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantAction {
    /// Set `concert_priority` to `value` for `max_age` seconds.
    Set { value: String, max_age: u64 },
    /// The origin granted guest: delete the cookie.
    Clear,
    /// No usable header: leave the cookie alone.
    Keep,
}

/// Priority state that lives as long as the process: counters and the rejected-value log.
#[derive(Debug, Default)]
pub struct Priority {
    pub counters: PriorityCounters,
    logged_rejections: Mutex<HashSet<String>>,
    form_budget: FormBudget,
}

impl Priority {
    pub fn new() -> Priority {
        Priority::default()
    }

    /// The rank of a request: a valid grant bound to a valid pass, else guest.
    pub fn request_rank(
        &self,
        signer: &PassSigner,
        grant_cookie: Option<&str>,
        pass: Option<&ValidPass>,
        now: u64,
    ) -> Rank {
        let (Some(grant), Some(pass)) = (grant_cookie, pass) else {
            return Rank::Guest;
        };
        signer
            .verify_grant(grant, &pass.id, now)
            .and_then(Rank::from_u8)
            .unwrap_or(Rank::Guest)
    }

    /// Counts a gated page request by rank.
    pub fn count_request(&self, rank: Rank) {
        self.counters.requests[usize::from(rank.as_u8())].fetch_add(1, Ordering::Relaxed);
    }

    /// The gate, for a request that met a busy room.
    pub async fn gate(&self, lane: &Arc<Lane>, request: LaneRequest) -> LaneDecision {
        let ranked = u32::from(request.rank.as_u8()) >= request.lane_rank || request.fast_lane;
        if let Some(pass) = &request.form {
            self.counters.forms.fetch_add(1, Ordering::Relaxed);
            if !ranked && !self.form_budget.take(pass, tokio::time::Instant::now()) {
                self.counters
                    .forms_over_budget
                    .fetch_add(1, Ordering::Relaxed);
                return LaneDecision::Room;
            }
        } else if !ranked {
            return LaneDecision::Room;
        }
        if let Some(permit) = lane.acquire(request.rank, request.wait).await {
            self.counters.lane_served.fetch_add(1, Ordering::Relaxed);
            return LaneDecision::Lane(permit);
        }
        self.counters.lane_full.fetch_add(1, Ordering::Relaxed);
        if request.fast_lane && request.writes {
            self.counters.forms_refused.fetch_add(1, Ordering::Relaxed);
            return LaneDecision::Refused(Rejection::FastLaneBusy {
                retry_after: request.retry_after,
            });
        }
        if request.form.is_some() && !ranked {
            self.counters.forms_refused.fetch_add(1, Ordering::Relaxed);
            return LaneDecision::Refused(Rejection::LaneFull {
                retry_after: request.retry_after,
            });
        }
        LaneDecision::Room
    }

    /// Turns the origin's `Concert-Priority` value into a grant for pass `pass`.
    pub fn grant_from_origin(
        &self,
        signer: &PassSigner,
        value: &HeaderValue,
        pass: &PassId,
        now: u64,
    ) -> GrantAction {
        let parsed = value
            .to_str()
            .map_err(|_| "not visible ASCII".to_string())
            .and_then(parse_priority);
        match parsed {
            Ok(OriginGrant {
                rank: Rank::Guest, ..
            }) => {
                self.counters.grants_cleared.fetch_add(1, Ordering::Relaxed);
                GrantAction::Clear
            }
            Ok(grant) => {
                self.counters.grants.fetch_add(1, Ordering::Relaxed);
                GrantAction::Set {
                    value: signer.sign_grant(pass, grant.rank.as_u8(), expiry_at(now, grant.ttl)),
                    max_age: grant.ttl.as_secs(),
                }
            }
            Err(reason) => {
                self.counters
                    .grants_rejected
                    .fetch_add(1, Ordering::Relaxed);
                self.log_rejection(value, &reason);
                GrantAction::Keep
            }
        }
    }

    fn log_rejection(&self, value: &HeaderValue, reason: &str) {
        let text = String::from_utf8_lossy(value.as_bytes());
        let mut logged = self.logged_rejections.lock();
        if logged.len() >= LOGGED_REJECTIONS || logged.contains(text.as_ref()) {
            return;
        }
        logged.insert(text.to_string());
        drop(logged);
        tracing::warn!(value = %text, reason, "priority: ignoring a bad Concert-Priority header from the origin");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(value: &str) -> OriginGrant {
        parse_priority(value).unwrap()
    }

    #[test]
    fn parses_ranks_and_ttls_as_specified() {
        assert_eq!(
            grant("checkout"),
            OriginGrant {
                rank: Rank::Checkout,
                ttl: Duration::from_secs(1800)
            }
        );
        assert_eq!(
            grant(" Customer ; ttl=600"),
            OriginGrant {
                rank: Rank::Customer,
                ttl: Duration::from_secs(600)
            }
        );
        assert_eq!(grant("staff; ttl=2h").ttl, Duration::from_secs(7200));
        assert_eq!(grant("member; ttl=5").ttl, Duration::from_secs(60));
        assert_eq!(
            grant("subscriber; ttl=72h").ttl,
            Duration::from_secs(86_400)
        );
        assert_eq!(grant("guest").rank, Rank::Guest);
        assert_eq!(grant("guest").ttl, Duration::ZERO);
        assert_eq!(grant("prospect").ttl, Duration::from_secs(1800));
        assert_eq!(grant("member, staff").rank, Rank::Staff);
        assert!(parse_priority("emperor").is_err());
        assert!(parse_priority("member; ttl=soon").is_err());
        assert!(parse_priority("member; color=red").is_err());
        assert!(parse_priority("").is_err());
    }

    #[test]
    fn lane_rank_text() {
        assert_eq!(lane_ranks_text(3), "customer and above");
        assert_eq!(lane_ranks_text(6), "staff");
        // 7 is the lane rank no grant reaches: the lane is off.
        assert_eq!(lane_ranks_text(7), "off");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_lane_times_out_and_leaves_no_waiter() {
        let lane = Lane::new(1);
        let held = lane.try_acquire().unwrap();
        let got = lane.acquire(Rank::Staff, Duration::from_millis(20)).await;
        assert!(got.is_none());
        assert_eq!(lane.waiting(), 0);
        drop(held);
        assert_eq!(lane.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn higher_ranks_are_served_first_then_arrival_order() {
        let lane = Lane::new(1);
        let held = lane.try_acquire().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for rank in [Rank::Customer, Rank::Staff, Rank::Customer] {
            let lane = Arc::clone(&lane);
            let order = Arc::clone(&order);
            tasks.push(tokio::spawn(async move {
                let permit = lane.acquire(rank, Duration::from_secs(5)).await.unwrap();
                order.lock().push(rank);
                tokio::time::sleep(Duration::from_millis(10)).await;
                drop(permit);
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(lane.waiting(), 3);
        // A newcomer never jumps the waiters, even at the moment a slot frees.
        drop(held);
        assert!(lane.try_acquire().is_none());
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(
            *order.lock(),
            vec![Rank::Staff, Rank::Customer, Rank::Customer]
        );
        assert_eq!(lane.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_waiter_gives_back_a_slot_handed_to_it() {
        let lane = Lane::new(1);
        let held = lane.try_acquire().unwrap();
        let waiting = {
            let lane = Arc::clone(&lane);
            tokio::spawn(async move { lane.acquire(Rank::Staff, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        waiting.abort();
        let _ = waiting.await;
        drop(held);
        assert_eq!(lane.in_use(), 0);
        assert!(lane.try_acquire().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn shrinking_lets_holders_finish_and_growing_serves_waiters() {
        let lane = Lane::new(2);
        let a = lane.try_acquire().unwrap();
        let b = lane.try_acquire().unwrap();
        lane.resize(1);
        drop(a);
        assert!(lane.try_acquire().is_none(), "one still held, cap 1");
        drop(b);
        let c = lane.try_acquire().unwrap();
        let waiter = {
            let lane = Arc::clone(&lane);
            tokio::spawn(async move { lane.acquire(Rank::Member, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        lane.resize(2);
        let d = waiter.await.unwrap().unwrap();
        assert_eq!(lane.in_use(), 2);
        drop((c, d));
        assert_eq!(lane.in_use(), 0);
    }

    fn signer() -> PassSigner {
        PassSigner::new(&[5u8; 32], None)
    }

    #[test]
    fn origin_headers_become_grants_for_that_pass_only() {
        let priority = Priority::new();
        let signer = signer();
        let pass = ValidPass {
            id: [1; 16],
            expiry: 10_000,
            previous_key: false,
        };
        let other = ValidPass {
            id: [2; 16],
            ..pass
        };
        let action = priority.grant_from_origin(
            &signer,
            &HeaderValue::from_static("customer"),
            &pass.id,
            1000,
        );
        let GrantAction::Set { value, max_age } = action else {
            panic!("expected a grant, got {action:?}");
        };
        assert_eq!(max_age, 8 * 3600);
        assert_eq!(
            priority.request_rank(&signer, Some(&value), Some(&pass), 1000),
            Rank::Customer
        );
        assert_eq!(
            priority.request_rank(&signer, Some(&value), Some(&other), 1000),
            Rank::Guest
        );
        assert_eq!(
            priority.request_rank(&signer, Some(&value), None, 1000),
            Rank::Guest
        );
        assert_eq!(
            priority.grant_from_origin(&signer, &HeaderValue::from_static("guest"), &pass.id, 0),
            GrantAction::Clear
        );
        assert_eq!(
            priority.grant_from_origin(&signer, &HeaderValue::from_static("junk"), &pass.id, 0),
            GrantAction::Keep
        );
        let counters = &priority.counters;
        assert_eq!(counters.grants.load(Ordering::Relaxed), 1);
        assert_eq!(counters.grants_cleared.load(Ordering::Relaxed), 1);
        assert_eq!(counters.grants_rejected.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_sends_ranks_and_forms_to_the_lane_and_refuses_unranked_forms() {
        let priority = Priority::new();
        let lane = Lane::new(1);
        let request = |rank, form: bool| LaneRequest {
            rank,
            form: form.then_some([7u8; 16]),
            lane_rank: 3,
            wait: Duration::from_millis(20),
            retry_after: 5,
            fast_lane: false,
            writes: form,
        };
        assert!(matches!(
            priority.gate(&lane, request(Rank::Prospect, false)).await,
            LaneDecision::Room
        ));
        let LaneDecision::Lane(held) = priority.gate(&lane, request(Rank::Customer, false)).await
        else {
            panic!("customer should use the lane");
        };
        assert!(matches!(
            priority.gate(&lane, request(Rank::Staff, false)).await,
            LaneDecision::Room
        ));
        assert!(matches!(
            priority.gate(&lane, request(Rank::Guest, true)).await,
            LaneDecision::Refused(_)
        ));
        drop(held);
        assert!(matches!(
            priority.gate(&lane, request(Rank::Guest, true)).await,
            LaneDecision::Lane(_)
        ));
        let counters = &priority.counters;
        assert_eq!(counters.lane_served.load(Ordering::Relaxed), 2);
        assert_eq!(counters.lane_full.load(Ordering::Relaxed), 2);
        assert_eq!(counters.forms.load(Ordering::Relaxed), 2);
        assert_eq!(counters.forms_refused.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_lane_pass_uses_the_lane_even_when_it_is_off_and_its_forms_are_never_queued() {
        let priority = Priority::new();
        let lane = Lane::new(1);
        // Lane rank 7: no grant reaches it, yet a paid pass still rides the lane.
        let request = |writes: bool| LaneRequest {
            rank: Rank::Customer,
            form: None,
            lane_rank: 7,
            wait: Duration::from_millis(20),
            retry_after: 9,
            fast_lane: true,
            writes,
        };
        let LaneDecision::Lane(held) = priority.gate(&lane, request(false)).await else {
            panic!("a fast-lane page should take the free lane slot");
        };
        assert!(matches!(
            priority.gate(&lane, request(false)).await,
            LaneDecision::Room
        ));
        assert!(matches!(
            priority.gate(&lane, request(true)).await,
            LaneDecision::Refused(Rejection::FastLaneBusy { retry_after: 9 })
        ));
        drop(held);
        assert!(matches!(
            priority.gate(&lane, request(true)).await,
            LaneDecision::Lane(_)
        ));
    }
}
