//! The room's live settings and the defaults and bounds it applies to them.

use std::time::Duration;

/// Default token TTL and reaper period when the settings say 0.
pub(crate) const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(300);

pub(crate) const DEFAULT_REAPER: Duration = Duration::from_secs(300);

/// Shortest reaper period the ready grace asks for (the least `-reaper` allows).
pub(super) const MIN_LAPSE_CHECK: Duration = Duration::from_secs(5);

/// Shortest bound on a ready visitor's wait for a page slot.
pub(super) const MIN_SLOT_WAIT: Duration = Duration::from_secs(10);

/// How long a new ticket has to prove itself before a newcomer at a full line may take its
/// room: two poll intervals, the least the first-poll grace may be.
pub(super) fn proof_window_ms(settings: &RoomSettings) -> u64 {
    u64::from(settings.retry_after_secs.max(1)) * 2_000
}

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
    /// Most live tickets one address (IPv6: one /64) may hold; 0 = unlimited.
    pub max_per_address: u32,
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
            max_per_address: 0,
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
    pub(super) fn normalized(mut self) -> RoomSettings {
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

    pub(super) fn ttl_ms(&self) -> u64 {
        duration_ms(self.token_ttl)
    }

    pub(super) fn grace_ms(&self) -> u64 {
        duration_ms(self.first_poll_grace)
    }

    pub(super) fn ready_grace_ms(&self) -> u64 {
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

pub(super) fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
