//! The global cap: every instance leases page slots from one pool in Redis, so the origin never
//! sees more than `-cap` page requests from all of them together.
//!
//! One task per instance runs `lua/lease.lua` every [`ROUND`] and at once when nudged (an
//! admitted visitor found no free slot here, or a slot was let go here while the shared line has
//! visitors waiting), then the shared line's `call` step, so slots freed anywhere go to the head
//! of the line. The script reaps instances whose membership ran out (a `kill -9`'d instance's
//! slots are back in the pool within [`MEMBERSHIP_TTL`] plus a round), renews this one's
//! membership, takes back what the instance returned and grants what it asks for within the
//! free pool. The room's gate holds the lease, so a request never waits on Redis while a local
//! slot is free.
//!
//! The lease changes by deltas only, because the line's `arrive` raises it concurrently (a
//! called visitor coming in here): the instance first takes idle surplus out of its gate and
//! reports it as `returned`, the script subtracts that and adds its grant, and the gate grows
//! by the grant once the answer is back. The instance keeps its own count of what the pool
//! believes it holds ([`Slots::entered`] and each round keep it), and returns whatever that
//! count exceeds its gate by, so slots a degraded spell took away go back too. A lost answer
//! leaves the pool counting more than the instance holds, never less.
//!
//! When Redis cannot be reached the instance serves alone (local mode): at once with no more
//! than it was lent and no more than its fallback share, and with the whole fallback share once
//! a membership TTL has passed since its last lease, by which time the others have taken its
//! lease back into the pool. Coming back, it holds on to what it used alone for one more TTL
//! before it asks for more, so instances still on their own are not crowded out.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use super::{Cluster, ClusterOptions, LinkError};
use crate::app::App;
use crate::room::SlotPool;

/// How often an instance renews its membership and lease when nothing nudges it.
pub const ROUND: Duration = Duration::from_millis(250);
/// How long a membership lasts without renewal: an instance silent this long is taken for dead
/// and its slots go back to the pool.
pub const MEMBERSHIP_TTL: Duration = Duration::from_secs(3);
/// Least time between two rounds, so a crowd of nudges costs one round, not one each.
pub const MIN_GAP: Duration = Duration::from_millis(20);
/// Headroom covers the admissions expected in this long (two rounds).
const HEADROOM_SECS: f64 = 0.5;
/// Shortest span an admission rate is measured over.
const RATE_SPAN: Duration = Duration::from_millis(100);

static LEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/lease.lua")));

/// Whether the instance shares the cap through Redis or serves alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Local,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Local => "local",
        }
    }
}

/// What this instance last learned of the pool, for the health report, stats and metrics.
#[derive(Debug)]
pub struct Slots {
    local: AtomicBool,
    instances: AtomicU64,
    line: AtomicU64,
    reserved: AtomicU64,
    /// Unix ms this process started leasing, for the report others read.
    started_ms: u64,
    /// The address this instance serves on, for the report others read.
    address: OnceLock<String>,
    /// What the pool counts as this instance's lease, as far as it can tell: every good round
    /// and every entry from the shared line change it as they change the lease in Redis.
    /// Signed, so a round's correction may cross an entry's increment in either order.
    believed: AtomicI64,
    /// Times the pool wrote this instance's lease afresh (a rejoin): an entry whose answer was
    /// lost before one of those is already left out of the lease.
    rewrites: AtomicU64,
}

impl Default for Slots {
    fn default() -> Slots {
        Slots {
            local: AtomicBool::new(false),
            instances: AtomicU64::new(0),
            line: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            started_ms: u64::try_from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis(),
            )
            .unwrap_or(0),
            address: OnceLock::new(),
            believed: AtomicI64::new(0),
            rewrites: AtomicU64::new(0),
        }
    }
}

impl Slots {
    pub fn mode(&self) -> Mode {
        if self.local.load(Ordering::Relaxed) {
            Mode::Local
        } else {
            Mode::Shared
        }
    }

    /// Instances seen at the last lease (this one included); in local mode, the last count.
    pub fn instances(&self) -> u64 {
        self.instances.load(Ordering::Relaxed)
    }

    /// Visitors in the shared line at the last lease.
    pub fn line_length(&self) -> u64 {
        self.line.load(Ordering::Relaxed)
    }

    /// Slots set aside for visitors called from the line, at the last lease.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Times the pool has written this instance's lease afresh so far.
    pub fn rewrites(&self) -> u64 {
        self.rewrites.load(Ordering::Relaxed)
    }

    /// A visitor called from the shared line came in here: the pool raised this instance's
    /// lease by one. Called after the gate grew, so a round that reads this count before the
    /// gate never returns a slot the pool has not counted.
    pub fn entered(&self) {
        self.believed.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the address this instance serves on (the first call counts).
    pub fn set_address(&self, address: String) {
        let _ = self.address.set(address);
    }
}

/// One lease round's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Slots added to this instance's lease by this round (the gate grows by as many).
    pub granted: u32,
    /// Slots the pool counts as this instance's after the round.
    pub lease: u32,
    /// Instances alive, this one included.
    pub instances: u32,
    /// Visitors waiting in the shared line.
    pub line: u64,
    pub reserved: u64,
    /// This instance had no membership before the round (first round, or taken for dead).
    pub rejoined: bool,
    /// Redis time, ms.
    pub now_ms: u64,
    /// The most this instance should hold: the cap, or its even share while another instance
    /// below its share asks for more.
    pub limit: u32,
}

impl Lease {
    /// Reads the script's reply; anything malformed is an error, never a panic.
    fn from_reply(reply: &[i64]) -> Option<Lease> {
        let &[
            granted,
            lease,
            instances,
            line,
            reserved,
            rejoined,
            now_ms,
            limit,
        ] = reply
        else {
            return None;
        };
        let small = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
        let big = |n: i64| u64::try_from(n).unwrap_or(0);
        Some(Lease {
            granted: small(granted),
            lease: small(lease),
            instances: small(instances),
            line: big(line),
            reserved: big(reserved),
            rejoined: rejoined != 0,
            now_ms: big(now_ms),
            limit: small(limit),
        })
    }
}

/// Runs one lease round in Redis: see `lua/lease.lua`. `returned` slots already left the gate;
/// `floor` is what the instance may have at the origin now (used only on a rejoin).
pub async fn lease_round(
    cluster: &Cluster,
    cap: u32,
    want: u32,
    returned: u32,
    floor: u32,
    in_use: u32,
) -> Result<Lease, LinkError> {
    let keys = &cluster.keys;
    let ttl = u64::try_from(MEMBERSHIP_TTL.as_millis()).unwrap_or(3_000);
    let address = cluster.slots.address.get().cloned().unwrap_or_default();
    let mut invocation = LEASE.prepare_invoke();
    invocation
        .key(keys.instances())
        .key(keys.leases())
        .key(keys.wants())
        .key(keys.instance(&cluster.id))
        .key(keys.reserved())
        .key(keys.line())
        .arg(&cluster.id)
        .arg(cap)
        .arg(want)
        .arg(returned)
        .arg(floor)
        .arg(ttl)
        .arg(keys.prefix())
        .arg(in_use)
        .arg(cluster.slots.started_ms)
        .arg(address);
    let reply: Vec<i64> = cluster
        .link
        .run(|mut connection| async move { invocation.invoke_async(&mut connection).await })
        .await?;
    Lease::from_reply(&reply).ok_or(LinkError::Reply("the lease script's answer"))
}

/// The slots an instance asks for: those in use plus headroom for the admissions expected
/// before the next round (at least one slot, and at least the visitors already waiting here),
/// never more than the cap. While the shared line has anyone waiting, only those in use: idle
/// slots go back to the pool, where the line's head gets them.
pub fn want(
    in_use: u32,
    waiting: u32,
    admissions_per_sec: f64,
    cap: u32,
    line_waiting: bool,
) -> u32 {
    if line_waiting {
        return in_use;
    }
    let expected = (admissions_per_sec.max(0.0) * HEADROOM_SECS).ceil();
    let expected = if expected.is_finite() && expected < f64::from(u32::MAX) {
        expected as u32
    } else {
        u32::MAX
    };
    let headroom = expected.max(waiting).clamp(1, cap.max(1));
    in_use.saturating_add(headroom).min(cap).max(in_use)
}

/// Slots an instance uses alone, `since_lease` after its last good lease: no more than it was
/// lent and no more than its fallback share at once (the others still count its lease as
/// taken), and the whole fallback share once a membership TTL has passed (by then the others
/// have taken its lease back).
pub fn degraded_slots(last_granted: u32, fallback: u32, since_lease: Duration) -> u32 {
    if since_lease >= MEMBERSHIP_TTL {
        fallback
    } else {
        last_granted.min(fallback)
    }
}

/// A change of mode worth one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Redis went away: serving alone.
    Local,
    /// A TTL passed in local mode: the whole fallback share.
    FullFallback,
    /// Redis is back: sharing again.
    Rejoined,
}

/// The instance's standing with the pool: the mode and what degraded mode needs to remember.
#[derive(Debug)]
pub struct Standing {
    mode: Mode,
    last_good: Instant,
    last_granted: u32,
    instances_seen: u32,
    /// Until then, the instance asks for no more than it used alone (see the module notes).
    hold_until: Option<Instant>,
    full_fallback: bool,
    /// Whether any round has succeeded yet (the first one always finds the instance new).
    ever_leased: bool,
    /// The most to hold, from the last round (see [`Lease::limit`]).
    limit: u32,
}

impl Standing {
    /// A standing with nothing lent yet: alone, it would wait a TTL before it serves, as if it
    /// had held nothing (others may hold the whole pool).
    pub fn new(now: Instant) -> Standing {
        Standing {
            mode: Mode::Shared,
            last_good: now,
            last_granted: 0,
            instances_seen: 0,
            hold_until: None,
            full_fallback: false,
            ever_leased: false,
            limit: u32::MAX,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether the instance just came back and must not ask for more than it holds yet.
    pub fn holding(&self, now: Instant) -> bool {
        self.hold_until.is_some_and(|until| now < until)
    }

    /// A good lease round. A rejoin is coming back from local mode, or finding the pool had
    /// forgotten this instance (Redis restarted between two rounds, or it was taken for dead):
    /// either way others may be using slots the pool does not know of yet.
    pub fn leased(&mut self, now: Instant, lease: &Lease) -> Option<Switch> {
        let forgotten = lease.rejoined && self.ever_leased;
        self.ever_leased = true;
        self.last_good = now;
        self.last_granted = lease.lease;
        self.instances_seen = lease.instances;
        self.limit = lease.limit;
        self.full_fallback = false;
        if self.mode == Mode::Local || forgotten {
            self.mode = Mode::Shared;
            self.hold_until = Some(now + MEMBERSHIP_TTL);
            return Some(Switch::Rejoined);
        }
        None
    }

    /// A failed round: the slots to use alone now, and the switch if this is one.
    pub fn failed(
        &mut self,
        now: Instant,
        cap: u32,
        options: &ClusterOptions,
    ) -> (u32, Option<Switch>) {
        let fallback = options.fallback_slots(cap, self.instances_seen.max(1) as usize);
        let since = now.saturating_duration_since(self.last_good);
        let slots = degraded_slots(self.last_granted, fallback, since);
        let switch = if self.mode == Mode::Shared {
            self.mode = Mode::Local;
            self.hold_until = None;
            Some(Switch::Local)
        } else if since >= MEMBERSHIP_TTL && !self.full_fallback {
            self.full_fallback = true;
            Some(Switch::FullFallback)
        } else {
            None
        };
        (slots, switch)
    }

    pub fn instances_seen(&self) -> u32 {
        self.instances_seen
    }

    /// Records what the gate holds after a good round: degraded mode starts from no more.
    pub fn note_held(&mut self, held: u32) {
        self.last_granted = held;
    }

    /// The most to hold, from the last good round.
    pub fn limit(&self) -> u32 {
        self.limit
    }
}

/// Admissions per second, measured between rounds.
#[derive(Debug, Default)]
struct AdmissionRate {
    last: Option<(Instant, u64)>,
    rate: f64,
}

impl AdmissionRate {
    fn sample(&mut self, now: Instant, admitted_total: u64) -> f64 {
        match self.last {
            None => self.last = Some((now, admitted_total)),
            Some((at, seen)) => {
                let span = now.saturating_duration_since(at);
                if span >= RATE_SPAN {
                    let recent = admitted_total.saturating_sub(seen) as f64 / span.as_secs_f64();
                    // Half the newest span, half the past: follows a surge within a few rounds.
                    self.rate = 0.5 * recent + 0.5 * self.rate;
                    self.last = Some((now, admitted_total));
                }
            }
        }
        self.rate
    }
}

/// Starts the lease task: from now on the room's page slots are what the pool lends.
pub(crate) fn spawn(app: &Arc<App>) -> tokio::task::JoinHandle<()> {
    let pool = app.room.share_page_slots();
    let app = Arc::downgrade(app);
    tokio::spawn(async move {
        let mut standing = Standing::new(Instant::now());
        let mut rate = AdmissionRate::default();
        loop {
            let started = Instant::now();
            {
                let Some(app) = app.upgrade() else { break };
                let Some(cluster) = app.cluster.clone() else {
                    break;
                };
                round(&app, &cluster, &pool, &mut standing, &mut rate).await;
            }
            let Some(cluster) = app.upgrade().and_then(|app| app.cluster.clone()) else {
                break;
            };
            // A slot let go here through the shared line nudges the line: the round returns
            // it to the pool and the call step hands it to the head, wherever they wait.
            tokio::select! {
                _ = tokio::time::sleep(ROUND) => {}
                _ = pool.nudged() => {
                    tokio::time::sleep_until(started + MIN_GAP).await;
                }
                _ = cluster.line.nudged() => {
                    tokio::time::sleep_until(started + MIN_GAP).await;
                }
            }
        }
    })
}

/// One round: give back what is idle, ask, grow the gate by the grant (or size it by
/// degraded mode when there is no answer), then call the head of the shared line.
async fn round(
    app: &App,
    cluster: &Cluster,
    pool: &SlotPool,
    standing: &mut Standing,
    rate: &mut AdmissionRate,
) {
    let now = Instant::now();
    let settings = app.room.settings();
    let cap = settings.cap;
    cluster.line.set_timing(&settings);
    let admissions = rate.sample(now, app.room.admitted_total());
    let gate = app.room.page_gate();
    let (held, in_use) = (as_u32(gate.capacity()), as_u32(gate.in_use()));
    let line_waiting = cluster.slots.line_length() > 0 || cluster.line.waiting() > 0;
    let waiting = as_u32(pool.waiting());
    let mut asked = want(in_use, waiting, admissions, cap, line_waiting).min(standing.limit());
    // Coming back (this round, or within a TTL of it), no more than what was used alone:
    // instances still on their own hold their shares without the pool knowing.
    if standing.mode() == Mode::Local || standing.holding(now) {
        asked = asked.min(held.max(in_use));
    }
    // Idle surplus leaves the gate before the pool hears of it, so no newcomer takes it
    // meanwhile; slots in use stay until they end.
    if held > asked {
        gate.shed_idle((held - asked) as usize);
    }
    // What the pool counts beyond what the gate holds goes back: the surplus just shed, and
    // what a degraded spell took away. The count is read before the gate (entries raise the
    // gate first), and taken down before the answer: a lost answer leaves the pool counting
    // more, never less.
    let slots = &cluster.slots;
    let believed = slots.believed.load(Ordering::Relaxed);
    let floor = as_u32(gate.capacity().max(gate.in_use()));
    let returned = u32::try_from(believed.saturating_sub(i64::from(floor)).max(0)).unwrap_or(0);
    slots
        .believed
        .fetch_sub(i64::from(returned), Ordering::Relaxed);
    let in_use_now = as_u32(gate.in_use());
    match lease_round(cluster, cap, asked, returned, floor, in_use_now).await {
        Ok(lease) => {
            let rejoined = standing.leased(Instant::now(), &lease) == Some(Switch::Rejoined);
            if lease.rejoined {
                slots.rewrites.fetch_add(1, Ordering::Relaxed);
                // The pool wrote the lease afresh (floor plus the grant) instead of applying
                // the return: the count follows, keeping entries made meanwhile.
                let was = believed - i64::from(returned);
                let now_held = i64::from(floor) + i64::from(lease.granted);
                slots.believed.fetch_add(now_held - was, Ordering::Relaxed);
            } else {
                slots
                    .believed
                    .fetch_add(i64::from(lease.granted), Ordering::Relaxed);
            }
            // Rejoining, no more than was held before the round, whatever the pool granted:
            // the grant stays counted and goes back next round.
            if !rejoined {
                gate.add(lease.granted as usize);
            }
            standing.note_held(as_u32(gate.capacity()));
            pool.set_nudge_on_release(lease.line > 0);
            slots.local.store(false, Ordering::Relaxed);
            slots
                .instances
                .store(u64::from(lease.instances), Ordering::Relaxed);
            slots.line.store(lease.line, Ordering::Relaxed);
            slots.reserved.store(lease.reserved, Ordering::Relaxed);
            if rejoined {
                tracing::info!(
                    instances = lease.instances,
                    slots = gate.capacity(),
                    "sharing the cap through Redis again"
                );
            }
            if gate.capacity() > lease.limit as usize && gate.available() > 0 {
                // Above the even share while another instance is short: shed at once.
                pool.nudge();
            }
            after_lease(cluster, cap).await;
        }
        Err(error) => {
            let (slots, switch) = standing.failed(Instant::now(), cap, &cluster.options);
            app.room.set_page_slots(slots as usize);
            pool.set_nudge_on_release(false);
            cluster.slots.local.store(true, Ordering::Relaxed);
            match switch {
                Some(Switch::Local) => tracing::warn!(
                    slots,
                    cap,
                    instances_last_seen = standing.instances_seen(),
                    %error,
                    "Redis is unreachable: serving alone on a share of the cap until it is back"
                ),
                Some(Switch::FullFallback) => tracing::warn!(
                    slots,
                    cap,
                    "Redis still unreachable: serving alone on the whole fallback share"
                ),
                _ => tracing::debug!(%error, "lease round failed"),
            }
        }
    }
}

/// Runs right after every good lease round: entries whose answers were lost give their slots
/// back, then slots the pool has free go to the head of the shared line (set aside in
/// `reserved`) in the same rhythm as the leases.
async fn after_lease(cluster: &Cluster, cap: u32) {
    // Here, in the lease task, so no rewrite of the lease can come between the check of the
    // count of rewrites and the undo.
    let unanswered = cluster.line.take_unanswered(cluster.slots.rewrites());
    if !unanswered.is_empty() {
        match super::line::undo(cluster, &unanswered).await {
            Ok(undone) => {
                if undone > 0 {
                    tracing::debug!(undone, "cluster: slots of unanswered entries given back");
                }
            }
            // Taking an entry back twice is harmless (the first run removes its record), so
            // an undo whose own answer is lost is simply sent again.
            Err(_) => cluster
                .line
                .keep_unanswered(unanswered, cluster.slots.rewrites()),
        }
    }
    if let Err(error) = super::line::call(cluster, cap).await {
        tracing::debug!(%error, "calling the shared line failed");
    }
}

fn as_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(share: f64) -> ClusterOptions {
        ClusterOptions {
            url: "redis://127.0.0.1:6379".into(),
            name: "t".into(),
            password: None,
            fallback_share: share,
        }
    }

    fn lease(granted: u32, instances: u32) -> Lease {
        Lease {
            granted,
            lease: granted,
            instances,
            line: 0,
            reserved: 0,
            rejoined: false,
            now_ms: 0,
            limit: u32::MAX,
        }
    }

    #[test]
    fn want_is_in_use_plus_headroom_within_the_cap() {
        // Idle: one slot ready for the next visitor.
        assert_eq!(want(0, 0, 0.0, 10, false), 1);
        // 20 admissions a second: ten expected before the next round but one.
        assert_eq!(want(3, 0, 20.0, 100, false), 13);
        // Visitors already waiting here count when the rate says less.
        assert_eq!(want(3, 7, 1.0, 100, false), 10);
        // Never past the cap, never below what is in use.
        assert_eq!(want(8, 0, 1_000.0, 10, false), 10);
        assert_eq!(want(12, 0, 1_000.0, 10, false), 12);
        // Nonsense rates do not overflow.
        assert_eq!(want(1, 0, f64::INFINITY, 5, false), 5);
        assert_eq!(want(1, 0, f64::NAN, 5, false), 2);
    }

    #[test]
    fn with_a_shared_line_waiting_only_the_slots_in_use_are_kept() {
        assert_eq!(want(3, 4, 50.0, 10, true), 3);
        assert_eq!(want(0, 0, 0.0, 10, true), 0);
    }

    #[test]
    fn degraded_slots_start_at_the_smaller_and_grow_to_the_share_after_a_ttl() {
        let soon = Duration::from_millis(300);
        assert_eq!(degraded_slots(5, 2, soon), 2);
        assert_eq!(degraded_slots(1, 2, soon), 1);
        assert_eq!(degraded_slots(0, 2, soon), 0);
        assert_eq!(degraded_slots(0, 2, MEMBERSHIP_TTL), 2);
        assert_eq!(degraded_slots(5, 2, MEMBERSHIP_TTL * 2), 2);
    }

    #[test]
    fn standing_switches_once_each_way_and_holds_after_rejoining() {
        let start = Instant::now();
        let options = options(0.0);
        let mut standing = Standing::new(start);
        assert_eq!(standing.leased(start, &lease(3, 2)), None);
        // Cap 8, two instances seen: a share of 4, but no more than the 3 it was lent.
        let at = start + Duration::from_millis(250);
        assert_eq!(standing.failed(at, 8, &options), (3, Some(Switch::Local)));
        assert_eq!(standing.mode(), Mode::Local);
        assert_eq!(standing.failed(at + ROUND, 8, &options), (3, None));
        let later = start + MEMBERSHIP_TTL;
        assert_eq!(
            standing.failed(later, 8, &options),
            (4, Some(Switch::FullFallback))
        );
        assert_eq!(standing.failed(later + ROUND, 8, &options), (4, None));
        let back = later + ROUND * 2;
        assert_eq!(standing.leased(back, &lease(4, 2)), Some(Switch::Rejoined));
        assert_eq!(standing.mode(), Mode::Shared);
        assert!(standing.holding(back + ROUND));
        assert!(!standing.holding(back + MEMBERSHIP_TTL));
    }

    #[test]
    fn a_pool_that_forgot_the_instance_is_a_rejoin_but_the_first_round_is_not() {
        let start = Instant::now();
        let mut standing = Standing::new(start);
        let mut first = lease(2, 1);
        first.rejoined = true;
        assert_eq!(standing.leased(start, &first), None);
        assert!(!standing.holding(start));
        let later = start + ROUND;
        assert_eq!(standing.leased(later, &first), Some(Switch::Rejoined));
        assert!(standing.holding(later));
    }

    #[test]
    fn an_instance_that_never_reached_redis_waits_a_ttl_then_serves_its_share() {
        let start = Instant::now();
        let mut standing = Standing::new(start);
        assert_eq!(standing.failed(start, 6, &options(0.5)).0, 0);
        assert_eq!(
            standing.failed(start + MEMBERSHIP_TTL, 6, &options(0.5)).0,
            3
        );
        // Never saw another instance: alone, the whole cap.
        assert_eq!(
            standing.failed(start + MEMBERSHIP_TTL, 6, &options(0.0)).0,
            6
        );
    }

    #[test]
    fn malformed_script_replies_are_refused() {
        assert_eq!(Lease::from_reply(&[1, 2, 3]), None);
        assert_eq!(Lease::from_reply(&[1, 2, 3, 4, 5, 6, 7]), None);
        let lease = Lease::from_reply(&[-1, 4, 2, 0, 0, 1, 99, 5]).unwrap();
        assert_eq!((lease.granted, lease.lease, lease.rejoined), (0, 4, true));
    }

    #[tokio::test(start_paused = true)]
    async fn the_admission_rate_follows_recent_admissions() {
        let mut rate = AdmissionRate::default();
        let start = Instant::now();
        assert_eq!(rate.sample(start, 0), 0.0);
        let r = rate.sample(start + Duration::from_secs(1), 100);
        assert!((r - 50.0).abs() < 1e-9, "{r}");
        let r = rate.sample(start + Duration::from_secs(2), 200);
        assert!((r - 75.0).abs() < 1e-9, "{r}");
        // Too short a span keeps the figure.
        assert_eq!(rate.sample(start + Duration::from_millis(2_010), 300), r);
    }
}
