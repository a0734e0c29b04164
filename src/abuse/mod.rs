//! The abuse registry: strikes, escalating bans, range bans, ban paths and the answers banned
//! clients get.
//!
//! - [`Registry`] owns per-client entries (IPv4 address or IPv6 /64, sharded, bounded), the range
//!   table, the counters and the tuning snapshot. It is process-wide and reconfigured in place.
//! - [`ranges`] is the prefix table for operator range bans and the ban-target parser.
//! - [`answer`] renders the 429/403 a banned client gets.
//! - [`record`] is the serde form of bans (wall-clock `until`) for export and import.
//!
//! Time is wall-clock unix nanoseconds throughout, because bans outlive the process; a [`Clock`]
//! is injected so tests control it.

pub mod clock;
mod key;
pub mod ranges;
pub mod record;
mod registry;
mod table;
mod window;

use std::net::IpAddr;
use std::time::Duration;

use crate::config::{BanPathMatcher, CidrList, Config, PathList};

pub use ranges::BanTarget;
pub use registry::{
    AbuseStats, BanCause, BanHook, BanNotice, BanView, Registry, ShareHook, SharedChange,
    StrikeHook,
};

pub(crate) use record::{BanSnapshot, ImportReport};

#[cfg(test)]
use self::{
    clock::{Clock, ManualClock},
    record::{BanRecord, WallTime},
    registry::V6_KEYS_PER_48,
};

/// What a client is struck for, and how much each weighs: guessing at secrets weighs most, a
/// nuisance a real browser may also cause weighs least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offense {
    /// An admission pass whose signature does not check out.
    ForgedPass,
    /// An admin route with a missing or wrong token.
    WrongAdminToken,
    /// The pass's own asset pool stayed full.
    AssetPoolExhausted,
    /// A visitor queued without any `room_ticket` cookie: ticket churn.
    TicketChurn,
}

impl Offense {
    pub const fn weight(self) -> u32 {
        match self {
            Offense::ForgedPass | Offense::WrongAdminToken => 5,
            Offense::AssetPoolExhausted | Offense::TicketChurn => 1,
        }
    }

    /// For the debug log line of a strike.
    pub const fn reason(self) -> &'static str {
        match self {
            Offense::ForgedPass => "forged admission pass",
            Offense::WrongAdminToken => "wrong admin token",
            Offense::AssetPoolExhausted => "per-pass asset pool exhausted",
            Offense::TicketChurn => "queued without a ticket",
        }
    }
}

/// `banned_until` of a permanent ban.
pub const FOREVER: i64 = i64::MAX;

/// How long a ban lasts from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanLength {
    /// A timed ban with this much left (never zero).
    Timed(Duration),
    /// Until an operator lifts it.
    Permanent,
}

impl BanLength {
    /// Whole seconds to announce in `Retry-After`: the remaining time rounded up, at least 1.
    /// `None` for a permanent ban.
    pub fn retry_after_secs(self) -> Option<u64> {
        match self {
            BanLength::Permanent => None,
            BanLength::Timed(left) => Some(ceil_secs(left).max(1)),
        }
    }
}

/// Why an operator's ban duration was refused; the message names the accepted forms.
pub const BAN_DURATION_ERROR: &str =
    "duration must be between 1m and 8760h, for example 30m or 24h, or the ban must be permanent";

impl BanLength {
    /// An operator's ban length: `permanent` (or the word `permanent` as the duration), else a
    /// duration from 1m to 8760h.
    pub fn from_request(duration: &str, permanent: bool) -> Result<BanLength, &'static str> {
        let duration = duration.trim();
        if permanent || duration == "permanent" {
            return Ok(BanLength::Permanent);
        }
        match crate::config::parse_go_duration(duration) {
            Ok(length) if (60..=8760 * 3600).contains(&length.as_secs()) => {
                Ok(BanLength::Timed(length))
            }
            _ => Err(BAN_DURATION_ERROR),
        }
    }
}

/// `duration` rounded up to whole seconds.
pub(crate) fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// Why an operator ban or unban was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BanError {
    #[error("abuse registry disabled")]
    Disabled,
    #[error("client must be an IP address or a CIDR range such as 203.0.113.0/24")]
    BadTarget,
    #[error("range is too broad: use /8 or narrower for IPv4 and /16 or narrower for IPv6")]
    TooBroad,
    #[error("too many range bans (limit 4096)")]
    RangeLimit,
    #[error("that client is exempt from bans (-abuse-allow or -trusted-proxies)")]
    Exempt,
    #[error("the abuse registry is full")]
    Full,
}

/// The tuning snapshot. Swapped whole on a settings change; entries and bans survive the swap
/// and a new window or threshold applies to them at once.
#[derive(Debug, Clone)]
pub struct AbuseSettings {
    /// `-abuse`: off keeps bans (and the janitor) but neither enforces nor strikes.
    pub enabled: bool,
    /// `-abuse-strikes`: strike weight within one window that bans.
    pub threshold: u32,
    /// `-abuse-window`: the sliding window strikes are summed over.
    pub window: Duration,
    /// `-abuse-cooldown`: the first ban's length; each further offense doubles it.
    pub cooldown: Duration,
    /// `-abuse-max-cooldown`: the longest escalated ban, and how long history is kept after one.
    pub max_cooldown: Duration,
    /// `-abuse-max-entries`: tracked clients at most.
    pub max_entries: u32,
    /// `-abuse-allow`.
    pub allow: CidrList,
    /// `-trusted-proxies`: never struck either, since their requests speak for many clients.
    pub trusted: CidrList,
    /// `-ban-paths`, compiled.
    pub ban_paths: BanPathMatcher,
}

impl Default for AbuseSettings {
    /// The documented defaults, with nothing exempt and no ban paths.
    fn default() -> Self {
        AbuseSettings {
            enabled: true,
            threshold: 20,
            window: Duration::from_secs(60),
            cooldown: Duration::from_secs(300),
            max_cooldown: Duration::from_secs(86_400),
            max_entries: 100_000,
            allow: CidrList::default(),
            trusted: CidrList::default(),
            ban_paths: BanPathMatcher::new(&PathList::default()),
        }
    }
}

impl AbuseSettings {
    pub fn from_config(config: &Config) -> Self {
        AbuseSettings {
            enabled: config.abuse,
            threshold: config.abuse_strikes.max(1),
            window: config.abuse_window,
            cooldown: config.abuse_cooldown,
            max_cooldown: config.abuse_max_cooldown,
            max_entries: config.abuse_max_entries.max(1),
            allow: config.abuse_allow.clone(),
            trusted: config.trusted_proxies.clone(),
            ban_paths: config.ban_path_matcher(),
        }
    }

    /// Exempt addresses are never struck, banned, caught by a range or dropped from the line.
    pub fn is_exempt(&self, ip: IpAddr) -> bool {
        self.allow.contains(ip) || self.trusted.contains(ip)
    }

    /// Whether `path` (already normalised) is a ban path. A trailing slash does not dodge the
    /// rule: `/.env/` is treated as `/.env`.
    pub fn is_ban_path(&self, path: &str) -> bool {
        if self.ban_paths.is_empty() {
            return false;
        }
        if self.ban_paths.matches(path) {
            return true;
        }
        let trimmed = path.trim_end_matches('/');
        trimmed.len() != path.len() && !trimmed.is_empty() && self.ban_paths.matches(trimmed)
    }

    /// The length of a ban for the `offenses`-th offense: the base cooldown doubled once per
    /// earlier offense, never more than the maximum.
    pub fn cooldown_for(&self, offenses: u32) -> Duration {
        let max = self.max_cooldown.max(self.cooldown);
        let mut length = self.cooldown;
        for _ in 1..offenses {
            if length >= max {
                break;
            }
            length = length.saturating_mul(2);
        }
        length.min(max)
    }

    pub(crate) fn window_nanos(&self) -> i64 {
        nanos(self.window).max(1)
    }

    pub(crate) fn max_cooldown_nanos(&self) -> i64 {
        nanos(self.max_cooldown)
    }
}

/// A duration in nanoseconds, saturating at the permanent-ban sentinel minus one so no timed
/// value ever reads as "forever".
pub(crate) fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos())
        .unwrap_or(FOREVER - 1)
        .min(FOREVER - 1)
}

/// `now + duration`, kept strictly below [`FOREVER`].
pub(crate) fn deadline(now: i64, duration: Duration) -> i64 {
    now.saturating_add(nanos(duration)).min(FOREVER - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cooldowns(base: u64, max: u64) -> AbuseSettings {
        AbuseSettings {
            cooldown: Duration::from_secs(base),
            max_cooldown: Duration::from_secs(max),
            ..AbuseSettings::default()
        }
    }

    #[test]
    fn cooldown_doubles_up_to_the_maximum() {
        let s = with_cooldowns(60, 180);
        let got: Vec<u64> = (1..=4).map(|k| s.cooldown_for(k).as_secs()).collect();
        assert_eq!(got, [60, 120, 180, 180]);
        let defaults = AbuseSettings::default();
        let got: Vec<u64> = (1..=4)
            .map(|k| defaults.cooldown_for(k).as_secs())
            .collect();
        assert_eq!(got, [300, 600, 1200, 2400]);
        assert_eq!(defaults.cooldown_for(40).as_secs(), 86_400);
        assert_eq!(defaults.cooldown_for(u32::MAX).as_secs(), 86_400);
    }

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one_second() {
        assert_eq!(
            BanLength::Timed(Duration::from_millis(1)).retry_after_secs(),
            Some(1)
        );
        assert_eq!(
            BanLength::Timed(Duration::from_millis(299_001)).retry_after_secs(),
            Some(300)
        );
        assert_eq!(
            BanLength::Timed(Duration::from_secs(300)).retry_after_secs(),
            Some(300)
        );
        assert_eq!(BanLength::Permanent.retry_after_secs(), None);
    }

    #[test]
    fn ban_paths_match_with_or_without_a_trailing_slash() {
        let settings = AbuseSettings {
            ban_paths: BanPathMatcher::new(&PathList::parse_strict("/.env,/.git/*").unwrap()),
            ..AbuseSettings::default()
        };
        assert!(settings.is_ban_path("/.env"));
        assert!(settings.is_ban_path("/.env/"));
        assert!(settings.is_ban_path("/.git/config"));
        assert!(!settings.is_ban_path("/.git"));
        assert!(!settings.is_ban_path("/"));
        assert!(!settings.is_ban_path("/hello"));
    }

    #[test]
    fn deadlines_never_reach_forever() {
        assert_eq!(deadline(FOREVER - 5, Duration::from_secs(1)), FOREVER - 1);
        assert_eq!(deadline(10, Duration::MAX), FOREVER - 1);
        assert_eq!(deadline(10, Duration::from_nanos(5)), 15);
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod registry_tests;
