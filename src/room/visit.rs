//! What the room tells about visitors: what an arrival carries, a waiting visitor's answer, the
//! rows and figures operators see, and the queue hook.

use std::net::IpAddr;
use std::sync::Arc;

use tokio::time::Instant;

use super::estimate::WaitEstimate;
use super::line::PromoteError;
use super::tokens::token_hex;

/// What the middleware knows about a request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arrival<'a> {
    /// `room_ticket` cookie.
    pub ticket_cookie: Option<&'a str>,
    /// `room_pass` cookie.
    pub pass_cookie: Option<&'a str>,
    pub client: Option<IpAddr>,
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

/// Sent to the queue hook when a new visitor is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueEvent {
    pub client: Option<IpAddr>,
    /// The request carried a `room_ticket` this room issued (expired, removed, or from before a
    /// restart), so it is no cookieless churn. A made-up or foreign value counts as none.
    pub stale_ticket: bool,
}

pub(crate) type QueueHook = Arc<dyn Fn(&QueueEvent) + Send + Sync>;

/// Says whether an address is exempt from the per-address ticket bound.
pub(crate) type AddressExemption = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

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
    /// Newcomers turned away because their address already had `max_per_address` tickets.
    pub address_full_total: u64,
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
