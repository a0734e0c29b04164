//! One FIFO line shared by every instance: places, calls and entries live in Redis, and every
//! change is one run of `lua/line.lua` (atomic there, never read-modify-write from here).
//!
//! A visitor joins with a ticket sealed by the room's [`crate::room::TicketSeal`], so the same
//! `room_ticket` is recognised on every instance that shares the admission secret; the place is
//! the ticket's rank in `P line`, counted the same from anywhere. The head of the line is
//! *called* when the shared pool has a free slot (`call`: the slot moves to `P reserved` and
//! the ticket to `P called` with a deadline); a called visitor comes in on whichever instance
//! it reaches (`arrive`: the reserved slot becomes that instance's lease, and the local page
//! gate grows by one permit taken by the visitor at once).
//!
//! New visitors only meet Redis when they must: one goes straight in when a local permit is free
//! and the line was empty when last seen. That figure is refreshed by every `call`, which the
//! lease task runs right after each lease round (at least every [`super::slots::ROUND`], and
//! within [`super::slots::MIN_GAP`] when a slot frees here), so a newcomer may go in ahead of
//! someone who joined on another instance at most that long before (the tolerance). While the
//! link is down, or the figure is older than [`VIEW_STALE_AFTER`], the local room serves.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Script;
use tokio::sync::{Notify, mpsc};

use super::{Cluster, LinkError};
use crate::app::App;
use crate::room::{
    PageSlot, PollOutcome, QueueEvent, RateMeter, RoomSettings, WaitEstimate, Waiting,
};

/// How long a newcomer waits for this instance's lease to grow when the line is empty and no
/// local slot is free, before joining the line (one lease round, nudged, takes far less).
pub const SHORT_WAIT: Duration = Duration::from_millis(250);
/// A line figure older than this is not trusted: the instance serves from its local room.
pub const VIEW_STALE_AFTER: Duration = Duration::from_secs(1);
/// Shortest time a called visitor has to come in before its slot goes back to the pool.
pub const MIN_CALL_WINDOW: Duration = Duration::from_secs(15);
/// Most tickets one `call` or `reap` run moves, so a run stays short inside Redis.
const BATCH: u32 = 200;
/// Polls of one ticket closer together than this are throttled (as the room's are).
const POLL_THROTTLE_MS: u64 = 1_000;
/// Tickets waiting to be taken out of the line; past this, more are left to the reaper.
const LEAVE_QUEUE: usize = 1_024;
/// Most tickets one `leave` run takes out.
const LEAVE_BATCH: usize = 64;
/// Most entries remembered whose answers were lost (one per visitor whose `arrive` timed out;
/// past this the pool keeps counting the rest until this instance next rejoins).
const UNANSWERED_MAX: usize = 256;
/// Tickets remembered as settled per generation (two are kept): enough for every visitor
/// an instance lets in over a ticket's lifetime at a busy event, and a few hundred KiB at most.
const SETTLED_GENERATION: usize = 8_192;

/// The line part of a cluster: the script, the last figures seen, and the admission rate.
pub struct SharedLine {
    script: Script,
    view: View,
    timing: Timing,
    /// Calls counted into `meter` so far (the shared `calls` total last seen).
    meter: Mutex<(RateMeter, Option<u64>)>,
    /// Woken when a page slot taken through the shared line is let go, so the head is called
    /// at once instead of at the next period.
    nudge: Notify,
    epoch: Instant,
    /// Tickets this instance knows are out of the shared line (see [`SharedLine::settle`]).
    settled: Mutex<Settled>,
    leaving: mpsc::Sender<String>,
    /// Taken by the task that sends the tickets to Redis.
    leaving_queue: Mutex<Option<mpsc::Receiver<String>>>,
    /// Tickets whose `arrive` got no answer, with the count of lease rewrites when it was
    /// sent: if the script ran, the pool counts a slot this instance never used.
    unanswered: Mutex<Vec<(String, u64)>>,
}

/// Ticket ids (the token's 128 bits) in two generations: when the newer fills, the older is
/// forgotten. A forgotten ticket costs at most one more look-up in Redis.
#[derive(Default)]
struct Settled {
    current: HashSet<u128>,
    previous: HashSet<u128>,
}

impl Settled {
    fn contains(&self, id: u128) -> bool {
        self.current.contains(&id) || self.previous.contains(&id)
    }

    /// Remembers `id`; false if it was already known.
    fn insert(&mut self, id: u128) -> bool {
        if self.contains(id) {
            return false;
        }
        if self.current.len() >= SETTLED_GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(id)
    }
}

/// A ticket's id, if it is one (32 hex digits).
fn ticket_id(token: &str) -> Option<u128> {
    if token.len() != 32 {
        return None;
    }
    u128::from_str_radix(token, 16).ok()
}

impl std::fmt::Debug for SharedLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLine")
            .field("waiting", &self.view.waiting.load(Ordering::Relaxed))
            .field("called", &self.view.called.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The line's figures as last seen.
#[derive(Default)]
struct View {
    waiting: AtomicU64,
    called: AtomicU64,
    /// Of those waiting, the ones that joined through this instance.
    joined_here: AtomicU64,
    /// Milliseconds after `epoch` (plus one, so 0 means never).
    refreshed: AtomicU64,
}

/// The room settings the scripts need, copied from the live settings by the caller task.
struct Timing {
    ttl_ms: AtomicU64,
    grace_ms: AtomicU64,
    proof_ms: AtomicU64,
    window_ms: AtomicU64,
    max_queue: AtomicU64,
    max_per_address: AtomicU64,
}

impl Default for SharedLine {
    fn default() -> SharedLine {
        SharedLine::new()
    }
}

impl SharedLine {
    pub fn new() -> SharedLine {
        let (leaving, leaving_queue) = mpsc::channel(LEAVE_QUEUE);
        let line = SharedLine {
            script: Script::new(include_str!("lua/line.lua")),
            view: View::default(),
            timing: Timing {
                ttl_ms: AtomicU64::new(300_000),
                grace_ms: AtomicU64::new(30_000),
                proof_ms: AtomicU64::new(10_000),
                window_ms: AtomicU64::new(ms(MIN_CALL_WINDOW)),
                max_queue: AtomicU64::new(0),
                max_per_address: AtomicU64::new(0),
            },
            meter: Mutex::new((RateMeter::new(0), None)),
            nudge: Notify::new(),
            epoch: Instant::now(),
            settled: Mutex::new(Settled::default()),
            leaving,
            leaving_queue: Mutex::new(Some(leaving_queue)),
            unanswered: Mutex::new(Vec::new()),
        };
        line.set_timing(&RoomSettings::default());
        line
    }

    /// Copies what the scripts need from the room's live settings.
    pub fn set_timing(&self, settings: &RoomSettings) {
        let t = &self.timing;
        t.ttl_ms
            .store(ms(settings.token_ttl).max(1), Ordering::Relaxed);
        t.grace_ms
            .store(ms(settings.first_poll_grace), Ordering::Relaxed);
        // Two poll intervals, as the room gives a new ticket before a full line sheds it.
        t.proof_ms.store(
            u64::from(settings.retry_after_secs.max(1)) * 2_000,
            Ordering::Relaxed,
        );
        let window = MIN_CALL_WINDOW.max(Duration::from_secs(
            3 * u64::from(settings.retry_after_secs.max(1)),
        ));
        t.window_ms.store(ms(window), Ordering::Relaxed);
        t.max_queue.store(settings.max_queue, Ordering::Relaxed);
        t.max_per_address
            .store(u64::from(settings.max_per_address), Ordering::Relaxed);
    }

    fn now_ms(&self) -> u64 {
        ms(self.epoch.elapsed())
    }

    /// Whether the instance should use the shared line now: the link is up and the line's
    /// figures are fresh.
    pub fn is_live(&self, cluster: &Cluster) -> bool {
        let refreshed = self.view.refreshed.load(Ordering::Relaxed);
        refreshed != 0
            && self.now_ms().saturating_sub(refreshed - 1) <= ms(VIEW_STALE_AFTER)
            && cluster.link.health().is_up()
    }

    /// Visitors waiting in the shared line, as last seen.
    pub fn waiting(&self) -> u64 {
        self.view.waiting.load(Ordering::Relaxed)
    }

    /// Visitors waiting in the shared line who joined through this instance, as last seen.
    pub fn joined_here(&self) -> u64 {
        self.view.joined_here.load(Ordering::Relaxed)
    }

    /// Visitors called and not yet in, as last seen.
    pub fn called(&self) -> u64 {
        self.view.called.load(Ordering::Relaxed)
    }

    /// Places the shared line moves forward per second (smoothed).
    pub fn admission_rate(&self) -> f64 {
        let now = self.now_ms();
        self.meter.lock().0.rate(now)
    }

    /// The wait for someone at `position`, from the shared admission rate.
    pub fn estimate(&self, position: u64) -> WaitEstimate {
        let now = self.now_ms();
        self.meter.lock().0.estimate(now, position)
    }

    /// Calls the head of the line as soon as possible (a slot was let go here).
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// Resolves at the next nudge (one nudge given meanwhile is kept).
    pub async fn nudged(&self) {
        self.nudge.notified().await;
    }

    /// Whether `token` is known here to be out of the shared line (let in, gone, or sent to
    /// leave): no need to look it up in Redis again.
    pub fn is_settled(&self, token: &str) -> bool {
        ticket_id(token).is_some_and(|id| self.settled.lock().contains(id))
    }

    /// Remembers that `token` is out of the shared line; false if that was known already.
    fn mark_settled(&self, token: &str) -> bool {
        ticket_id(token).is_some_and(|id| self.settled.lock().insert(id))
    }

    /// Takes `token` out of the shared line, off the request path: its holder was let in on
    /// this instance's own slot without a look-up (the figures said nobody waited), or is
    /// banned. A ticket still waiting there would otherwise be called later and hold a slot
    /// idle for the whole call window; one already called gives its slot back at once. Each
    /// ticket is sent at most once per instance (while remembered), so visitors let in keep
    /// costing Redis nothing however many pages they load with their old ticket.
    pub fn settle(&self, token: &str) {
        if self.mark_settled(token) && self.leaving.try_send(token.to_owned()).is_err() {
            tracing::debug!("cluster: leave queue full; the reaper will take the ticket out");
        }
    }

    /// Remembers that `token`'s `arrive`, sent when the lease had been rewritten `rewrites`
    /// times, got no answer, so the lease task can take the entry back if it happened.
    fn note_unanswered(&self, token: &str, rewrites: u64) {
        let mut unanswered = self.unanswered.lock();
        if unanswered.len() < UNANSWERED_MAX {
            unanswered.push((token.to_owned(), rewrites));
        }
    }

    /// The unanswered tickets to take back now: those sent since the last rewrite of the
    /// lease. Older ones are dropped, since a rewrite counts only the slots the gate holds.
    pub(crate) fn take_unanswered(&self, rewrites: u64) -> Vec<String> {
        std::mem::take(&mut *self.unanswered.lock())
            .into_iter()
            .filter(|(_, sent_at)| *sent_at == rewrites)
            .map(|(token, _)| token)
            .collect()
    }

    /// Keeps `tokens` for the next round (their undo got no answer either).
    pub(crate) fn keep_unanswered(&self, tokens: Vec<String>, rewrites: u64) {
        let mut unanswered = self.unanswered.lock();
        for token in tokens {
            if unanswered.len() < UNANSWERED_MAX {
                unanswered.push((token, rewrites));
            }
        }
    }

    fn seen(&self, waiting: u64, called: u64) {
        self.view.waiting.store(waiting, Ordering::Relaxed);
        self.view.called.store(called, Ordering::Relaxed);
        self.view
            .refreshed
            .store(self.now_ms() + 1, Ordering::Relaxed);
    }

    fn count_calls(&self, total: u64) {
        let now = self.now_ms();
        let mut meter = self.meter.lock();
        let (rate, last) = &mut *meter;
        if let Some(before) = *last {
            // A smaller total means Redis was emptied: count nothing for that step.
            let advanced = total.saturating_sub(before);
            if advanced > 0 {
                rate.record(now, advanced);
            }
        }
        *last = Some(total);
    }

    async fn run(
        &self,
        cluster: &Cluster,
        op: &str,
        args: &[String],
    ) -> Result<Vec<i64>, LinkError> {
        let mut invocation = self.script.prepare_invoke();
        for key in keys(cluster) {
            invocation.key(key);
        }
        invocation.arg(op);
        for arg in args {
            invocation.arg(arg.as_str());
        }
        cluster
            .link
            .run(|mut connection| async move {
                invocation.invoke_async::<Vec<i64>>(&mut connection).await
            })
            .await
    }
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn arg(value: impl ToString) -> String {
    value.to_string()
}

fn keys(cluster: &Cluster) -> [String; 13] {
    let k = &cluster.keys;
    [
        k.seq(),
        k.line(),
        k.seen(),
        k.called(),
        k.tickets(),
        k.per_address(),
        k.leases(),
        k.reserved(),
        k.polled(),
        k.line_stats(),
        k.instances(),
        k.joined_at(),
        k.entered(),
    ]
}

/// A reply's `at`-th figure as a count (a missing or negative one reads 0).
fn figure(reply: &[i64], at: usize) -> u64 {
    reply
        .get(at)
        .and_then(|value| u64::try_from(*value).ok())
        .unwrap_or(0)
}

/// The per-address bound's key for `client`: an IPv4 address, or an IPv6 /64 (as the room
/// counts them).
pub fn address_key(client: IpAddr) -> String {
    match client.to_canonical() {
        IpAddr::V4(v4) => format!("4:{v4}"),
        IpAddr::V6(v6) => format!("6:{:016x}", (v6.to_bits() >> 64) as u64),
    }
}

/// What `join` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// In line at `position` (≥ 1) of `waiting`.
    Waiting { position: u64, waiting: u64 },
    /// The client's address already holds the most tickets one address may.
    AddressFull,
    /// The line holds `-max-queue` visitors.
    Full,
    /// The token is already in use (it never is, for a fresh one).
    Taken,
}

/// Puts `token` at the back of the shared line. `client` is counted against the per-address
/// bound unless it is `None` (exempt or unknown).
pub async fn join(
    cluster: &Cluster,
    token: &str,
    client: Option<IpAddr>,
) -> Result<Joined, LinkError> {
    let line = &cluster.line;
    let t = &line.timing;
    let address = client.map(address_key).unwrap_or_default();
    let reply = line
        .run(
            cluster,
            "join",
            &[
                arg(token),
                arg(address),
                arg(t.max_per_address.load(Ordering::Relaxed)),
                arg(t.max_queue.load(Ordering::Relaxed)),
                arg(&cluster.id),
                arg(t.ttl_ms.load(Ordering::Relaxed)),
                arg(t.grace_ms.load(Ordering::Relaxed)),
                arg(t.proof_ms.load(Ordering::Relaxed)),
            ],
        )
        .await?;
    Ok(match reply.first().copied() {
        Some(-1) => Joined::AddressFull,
        Some(-2) => Joined::Full,
        Some(-3) | None => Joined::Taken,
        Some(_) => {
            let (position, waiting) = (figure(&reply, 0).max(1), figure(&reply, 1));
            line.seen(waiting, figure(&reply, 2));
            Joined::Waiting { position, waiting }
        }
    })
}

/// What a page request with a ticket found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// The ticket was called: one reserved slot is now this instance's lease, for this visitor.
    Entered,
    /// Still waiting at `position` (≥ 1).
    Waiting { position: u64, waiting: u64 },
    /// Called, but the slot set aside for it is gone and the pool has none: try again.
    NoSlot,
    /// Not in the line (entered already, expired, or never there).
    Unknown,
}

/// A page request carrying `token`: lets a called visitor in on this instance, or refreshes a
/// waiting one. `cap` is the live cap (the pool's size).
pub async fn arrive(cluster: &Cluster, token: &str, cap: u32) -> Result<Visit, LinkError> {
    let line = &cluster.line;
    let reply = line
        .run(
            cluster,
            "arrive",
            &[
                arg(token),
                arg(&cluster.id),
                arg(cap),
                arg(line.timing.ttl_ms.load(Ordering::Relaxed)),
            ],
        )
        .await?;
    Ok(match reply.first().copied() {
        Some(0) => Visit::Entered,
        Some(1) => Visit::Waiting {
            position: figure(&reply, 1).max(1),
            waiting: figure(&reply, 2),
        },
        Some(2) => Visit::NoSlot,
        _ => Visit::Unknown,
    })
}

/// What a status poll found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// Called: the page should reload and come in.
    Called,
    Waiting {
        position: u64,
        waiting: u64,
    },
    /// Polled again within a second.
    Throttled {
        position: u64,
    },
    Unknown,
}

/// A `/queue/status` poll of `token`: marks it seen and reads its place.
pub async fn poll(cluster: &Cluster, token: &str) -> Result<Polled, LinkError> {
    let line = &cluster.line;
    let reply = line
        .run(
            cluster,
            "poll",
            &[
                arg(token),
                arg(line.timing.ttl_ms.load(Ordering::Relaxed)),
                arg(POLL_THROTTLE_MS),
            ],
        )
        .await?;
    Ok(match reply.first().copied() {
        Some(0) => Polled::Called,
        Some(1) => Polled::Waiting {
            position: figure(&reply, 1).max(1),
            waiting: figure(&reply, 2),
        },
        Some(2) => Polled::Throttled {
            position: figure(&reply, 1).max(1),
        },
        _ => Polled::Unknown,
    })
}

/// What one `call` did and saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Calls {
    /// Visitors called by this run.
    pub called_now: u64,
    /// Still waiting in line.
    pub waiting: u64,
    /// Called and not yet in (this run's included).
    pub called: u64,
    /// Pool slots still free after the run.
    pub free: u64,
    pub calls_total: u64,
    pub entered_total: u64,
    /// Still waiting, having joined through this instance.
    pub joined_here: u64,
}

/// The periodic step: reaps expired tickets, then calls as many visitors from the head of the
/// line as the pool (`cap - sum(leases) - reserved`) has free slots, setting those slots aside
/// for them. Run right after each lease, so freed slots go to the line first.
pub async fn call(cluster: &Cluster, cap: u32) -> Result<Calls, LinkError> {
    let line = &cluster.line;
    let t = &line.timing;
    let reply = line
        .run(
            cluster,
            "call",
            &[
                arg(cap),
                arg(t.window_ms.load(Ordering::Relaxed)),
                arg(t.ttl_ms.load(Ordering::Relaxed)),
                arg(BATCH),
                arg(&cluster.id),
            ],
        )
        .await?;
    let calls = Calls {
        called_now: figure(&reply, 0),
        waiting: figure(&reply, 1),
        called: figure(&reply, 2),
        free: figure(&reply, 3),
        calls_total: figure(&reply, 4),
        entered_total: figure(&reply, 5),
        joined_here: figure(&reply, 6),
    };
    line.seen(calls.waiting, calls.called);
    line.view
        .joined_here
        .store(calls.joined_here, Ordering::Relaxed);
    line.count_calls(calls.calls_total);
    Ok(calls)
}

/// Reaps expired waiting tickets and called tickets past their deadline (also part of
/// every `call`). Returns (expired, lapsed).
pub async fn reap(cluster: &Cluster) -> Result<(u64, u64), LinkError> {
    let line = &cluster.line;
    let reply = line
        .run(
            cluster,
            "reap",
            &[arg(line.timing.ttl_ms.load(Ordering::Relaxed)), arg(BATCH)],
        )
        .await?;
    Ok((figure(&reply, 0), figure(&reply, 1)))
}

/// Takes `tokens` out of the line or the called set, in one run. Returns (left the line,
/// left the called set).
pub async fn leave(cluster: &Cluster, tokens: &[String]) -> Result<(u64, u64), LinkError> {
    let reply = cluster.line.run(cluster, "leave", tokens).await?;
    Ok((figure(&reply, 0), figure(&reply, 1)))
}

/// Gives back the slots of entries through this instance whose answers were lost (see
/// [`SharedLine::take_unanswered`]); tickets that never entered are passed over. Returns the
/// slots given back.
pub async fn undo(cluster: &Cluster, tokens: &[String]) -> Result<u64, LinkError> {
    let mut args = Vec::with_capacity(tokens.len() + 1);
    args.push(cluster.id.clone());
    args.extend(tokens.iter().cloned());
    let reply = cluster.line.run(cluster, "undo", &args).await?;
    Ok(figure(&reply, 0))
}

/// Sends the tickets given to [`SharedLine::settle`] to Redis in batches. One that fails
/// (Redis away) is left to the reaper, which takes it out when it lapses, as before.
pub(crate) fn spawn_leaver(cluster: Arc<Cluster>) -> tokio::task::JoinHandle<()> {
    let queue = cluster.line.leaving_queue.lock().take();
    tokio::spawn(async move {
        let Some(mut queue) = queue else { return };
        let mut batch = Vec::with_capacity(LEAVE_BATCH);
        loop {
            if queue.recv_many(&mut batch, LEAVE_BATCH).await == 0 {
                return;
            }
            match leave(&cluster, &batch).await {
                Ok((from_line, from_called)) => {
                    if from_called > 0 {
                        // A slot went back to the pool: the next in line can be called.
                        cluster.line.nudge();
                    }
                    tracing::debug!(from_line, from_called, "cluster: tickets left the line");
                }
                Err(error) => {
                    tracing::debug!("cluster: taking tickets out of the line failed: {error}");
                }
            }
            batch.clear();
        }
    })
}

/// A page slot taken through the shared line; letting it go calls the next in line at once
/// (the lease task returns it to the pool and calls the head).
pub(crate) struct SharedHold {
    slot: Option<PageSlot>,
    cluster: Arc<Cluster>,
}

impl Drop for SharedHold {
    fn drop(&mut self) {
        drop(self.slot.take());
        // Only worth a round while someone waits for the slot.
        if self.cluster.line.waiting() > 0 {
            self.cluster.line.nudge();
        }
    }
}

/// The gated stage's answer from the shared line.
pub(crate) enum SharedDecision {
    /// In, holding this slot until the answer is delivered.
    Admit(Box<SharedHold>),
    /// The waiting page, with the global position.
    Wait(Waiting),
    Full,
    AddressFull,
    /// Redis could not decide: the local room does, as without a cluster.
    Local,
}

/// Decides for a gated request while the shared line is live (see the module notes).
pub(crate) async fn decide(
    app: &App,
    cluster: &Arc<Cluster>,
    ticket: Option<&str>,
    client: Option<IpAddr>,
) -> SharedDecision {
    let room = &app.room;
    let line = &cluster.line;
    let admit = |permit| {
        SharedDecision::Admit(Box::new(SharedHold {
            slot: Some(room.admit_shared(permit)),
            cluster: Arc::clone(cluster),
        }))
    };
    // A ticket of the local room (queued while Redis was away) keeps its place there.
    if ticket.is_some_and(|ticket| room.holds_ticket(ticket)) {
        return SharedDecision::Local;
    }
    let ticket = ticket.filter(|ticket| room.recognises(ticket));
    // The figures may be up to a round old: a visitor called a moment ago by another instance
    // may find them empty here. With no local slot free Redis is asked anyway (to join), so
    // then the ticket is looked up first rather than replaced, which would leave its called
    // slot idle for the whole call window.
    if let Some(token) = ticket
        && !line.is_settled(token)
        && (line.waiting() > 0 || line.called() > 0 || room.page_gate().available() == 0)
    {
        let rewrites = cluster.slots.rewrites();
        let visit = arrive(cluster, token, room.settings().cap).await;
        let decision = match visit {
            Ok(Visit::Entered) => {
                // The pool raised this instance's lease by one; the gate follows, and the
                // lease task learns of it only after the slot is in the gate (see
                // `Slots::entered`).
                let permit = room.page_gate().grow_one();
                cluster.slots.entered();
                line.mark_settled(token);
                Some(admit(permit))
            }
            Ok(Visit::Waiting { position, .. }) => Some(SharedDecision::Wait(Waiting {
                token: token.to_owned(),
                position,
                estimate: line.estimate(position),
            })),
            Ok(Visit::NoSlot) => Some(SharedDecision::Wait(Waiting {
                token: token.to_owned(),
                position: 1,
                estimate: line.estimate(1),
            })),
            Ok(Visit::Unknown) => {
                line.mark_settled(token);
                None
            }
            Err(_) => {
                // The script may have run and raised the lease for a visitor not let in
                // on it: the lease task takes the entry back if so.
                line.note_unanswered(token, rewrites);
                Some(SharedDecision::Local)
            }
        };
        if let Some(decision) = decision {
            return decision;
        }
    }
    if line.waiting() == 0 {
        // Nobody waits, but every slot this instance holds may be taken: the lease task hears
        // of it at once and may lend one from the pool within a round. Only the cap reached
        // everywhere (or the line filling meanwhile) sends the visitor to the line.
        let permit = match room.page_gate().try_acquire() {
            Some(permit) => Some(permit),
            None => room.wait_page_slot(SHORT_WAIT).await,
        };
        if let Some(permit) = permit {
            // In without a look-up: a ticket it still held (the figures may be a round
            // behind) must not keep a place, or a call, in the line.
            if let Some(token) = ticket {
                line.settle(token);
            }
            return admit(permit);
        }
    }
    let token = room.issue_ticket();
    let counted = client.filter(|client| !room.address_exempt(*client));
    match join(cluster, &token, counted).await {
        Ok(Joined::Waiting { position, .. }) => {
            room.note_queued(QueueEvent {
                client,
                stale_ticket: ticket.is_some(),
            });
            SharedDecision::Wait(Waiting {
                token,
                position,
                estimate: line.estimate(position),
            })
        }
        Ok(Joined::Full) => SharedDecision::Full,
        Ok(Joined::AddressFull) => SharedDecision::AddressFull,
        Ok(Joined::Taken) | Err(_) => SharedDecision::Local,
    }
}

/// `/queue/status` for `ticket` while the shared line is live.
pub(crate) async fn poll_outcome(
    app: &App,
    cluster: &Cluster,
    ticket: Option<&str>,
) -> PollOutcome {
    let room = &app.room;
    let Some(token) = ticket else {
        return PollOutcome::CookiesRequired;
    };
    if !room.recognises(token) || room.holds_ticket(token) {
        return room.poll(ticket);
    }
    let line = &cluster.line;
    match poll(cluster, token).await {
        Ok(Polled::Called) => {
            // The visitor reloads at once, maybe before this instance's next call run.
            line.view.called.fetch_max(1, Ordering::Relaxed);
            PollOutcome::Ready
        }
        Ok(Polled::Waiting { position, waiting }) => {
            let settings = room.settings();
            let (rate_per_pos, skip_cost) = match settings.pricing {
                Some(pricing) => {
                    let rate = pricing.price_per_position(waiting);
                    (
                        Some(rate),
                        (position > 1).then(|| (position - 1) as f64 * rate),
                    )
                }
                None => (None, None),
            };
            PollOutcome::Waiting {
                position,
                utilization: room.page_gate().utilization(),
                has_pass: false,
                // Cheap, and keeps the cookies alive however the visitor moves between
                // instances.
                refresh_cookies: true,
                rate_per_pos,
                skip_cost,
                estimate: line.estimate(position),
            }
        }
        Ok(Polled::Throttled { position }) => PollOutcome::Throttled { position },
        Ok(Polled::Unknown) => PollOutcome::Ready,
        Err(_) => room.poll(ticket),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICKET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_ticket_is_settled_once_and_only_tickets_are() {
        let line = SharedLine::new();
        assert!(!line.is_settled(TICKET));
        assert!(line.mark_settled(TICKET));
        assert!(line.is_settled(TICKET));
        assert!(!line.mark_settled(TICKET), "already known");
        for junk in [
            "",
            "short",
            "0123456789abcdef0123456789abcdeg",
            &"f".repeat(33),
        ] {
            assert!(!line.mark_settled(junk), "{junk:?}");
            assert!(!line.is_settled(junk));
        }
    }

    #[test]
    fn settled_tickets_are_kept_for_two_generations_then_forgotten() {
        let mut settled = Settled::default();
        assert!(settled.insert(0));
        for id in 1..SETTLED_GENERATION as u128 {
            settled.insert(id);
        }
        // The first generation is full: the next one starts, and the first is still known.
        assert!(settled.insert(u128::MAX));
        assert!(settled.contains(0) && settled.contains(u128::MAX));
        for id in 0..SETTLED_GENERATION as u128 {
            settled.insert(1_000_000 + id);
        }
        assert!(!settled.contains(0), "the oldest generation is forgotten");
        assert!(settled.contains(u128::MAX));
        assert!(settled.current.len() + settled.previous.len() <= 2 * SETTLED_GENERATION);
    }

    #[test]
    fn unanswered_entries_from_before_a_lease_rewrite_are_dropped() {
        let line = SharedLine::new();
        line.note_unanswered("before", 0);
        line.note_unanswered("after", 1);
        // The lease was rewritten once since "before" was sent: only "after" is taken back.
        assert_eq!(line.take_unanswered(1), vec!["after".to_owned()]);
        assert!(line.take_unanswered(1).is_empty(), "taken once");
        line.keep_unanswered(vec!["again".to_owned()], 1);
        assert_eq!(line.take_unanswered(1), vec!["again".to_owned()]);
        for i in 0..UNANSWERED_MAX + 5 {
            line.note_unanswered(&format!("t{i}"), 2);
        }
        assert_eq!(line.take_unanswered(2).len(), UNANSWERED_MAX);
    }

    #[tokio::test]
    async fn settling_queues_each_ticket_once_and_never_blocks() {
        let line = SharedLine::new();
        let mut queue = line.leaving_queue.lock().take().unwrap();
        line.settle(TICKET);
        line.settle(TICKET);
        assert_eq!(queue.try_recv().ok().as_deref(), Some(TICKET));
        assert!(queue.try_recv().is_err(), "sent once");
        // A full queue drops the rest (the reaper takes them out later) instead of waiting.
        for id in 0..(LEAVE_QUEUE as u128 + 10) {
            line.settle(&format!("{id:032x}"));
        }
        let mut queued = 0;
        while queue.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, LEAVE_QUEUE);
    }
}
