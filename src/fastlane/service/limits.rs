//! Limits on the fast lane's POSTs: a per-address rate (IPv4 address or IPv6 /64), a global cap
//! on requests being verified or settled, and one request at a time per session.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::session::SessionId;

/// POSTs allowed per client key per minute.
pub const POSTS_PER_MINUTE: u32 = 60;
/// Client keys tracked in one minute.
pub const MAX_RATE_KEYS: usize = 100_000;
/// Requests verified or settled at once, across all sessions.
pub const MAX_IN_FLIGHT: usize = 32;

/// The rate key of a client: the IPv4 address, or the /64 an IPv6 address lies in (one
/// customer line usually gets a whole /64).
pub fn rate_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_bits()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u128::from(v4.to_bits()),
            None => ((v6.to_bits() >> 64) << 64) | (1 << 32),
        },
    }
}

/// Fixed one-minute windows. The table is replaced whole when the minute turns, so every
/// operation is one hash lookup and the table never outgrows one minute's distinct clients;
/// when a minute brings more than [`MAX_RATE_KEYS`] clients, the ones beyond the cap are not
/// counted (a flood of fresh addresses is the abuse registry's job, and refusing every new
/// address would lock out honest visitors).
#[derive(Debug, Default)]
pub struct RateTable {
    inner: Mutex<RateWindow>,
}

#[derive(Debug, Default)]
struct RateWindow {
    minute: u64,
    counts: HashMap<u128, u32>,
}

impl RateTable {
    /// Counts one POST by `ip` at `now`; false when it is over the limit.
    pub fn allow(&self, ip: IpAddr, now: u64) -> bool {
        let minute = now / 60;
        let key = rate_key(ip);
        let retired = {
            let mut window = self.inner.lock();
            let retired = if window.minute != minute {
                window.minute = minute;
                Some(std::mem::take(&mut window.counts))
            } else {
                None
            };
            let full = window.counts.len() >= MAX_RATE_KEYS;
            let allowed = match window.counts.get_mut(&key) {
                Some(count) => {
                    *count = count.saturating_add(1);
                    *count <= POSTS_PER_MINUTE
                }
                None if full => true,
                None => {
                    window.counts.insert(key, 1);
                    true
                }
            };
            (allowed, retired)
        };
        // The old minute's table is freed outside the lock.
        let (allowed, retired) = retired;
        drop(retired);
        allowed
    }

    pub fn len(&self) -> usize {
        self.inner.lock().counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Requests of the POST routes that verify or settle.
#[derive(Debug)]
pub struct InFlight {
    global: Arc<Semaphore>,
    sessions: Arc<Mutex<HashSet<SessionId>>>,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight {
            global: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            sessions: Arc::default(),
        }
    }
}

/// Why a request could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    Global,
    Session,
}

/// Held while a request runs; frees its places when dropped.
#[derive(Debug)]
pub struct InFlightGuard {
    permit: Option<OwnedSemaphorePermit>,
    sessions: Arc<Mutex<HashSet<SessionId>>>,
    session: SessionId,
}

impl InFlightGuard {
    /// Gives the global place back while keeping the session's: a request that only waits
    /// for a detached settlement must not starve everyone else's verification.
    pub fn release_global(&mut self) {
        self.permit = None;
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.sessions.lock().remove(&self.session);
    }
}

impl InFlight {
    pub fn enter(&self, session: SessionId) -> Result<InFlightGuard, Busy> {
        let permit = self
            .global
            .clone()
            .try_acquire_owned()
            .map_err(|_| Busy::Global)?;
        if !self.sessions.lock().insert(session) {
            return Err(Busy::Session);
        }
        Ok(InFlightGuard {
            permit: Some(permit),
            sessions: self.sessions.clone(),
            session,
        })
    }

    pub fn running(&self) -> usize {
        MAX_IN_FLIGHT - self.global.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixty_per_minute_per_key_and_ipv6_by_slash_64() {
        let table = RateTable::default();
        let now = 1_800_000_000 / 60 * 60;
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        for n in 0..60 {
            assert!(table.allow(if n % 2 == 0 { a } else { b }, now), "{n}");
        }
        assert!(!table.allow(a, now + 59));
        assert!(table.allow(other, now + 59));
        assert!(table.allow(a, now + 60), "a new minute starts afresh");
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(rate_key(v4), rate_key(mapped));
        assert_ne!(rate_key(v4), rate_key("::c000:201".parse().unwrap()));
    }

    #[test]
    fn keys_beyond_the_cap_are_not_tracked() {
        let table = RateTable::default();
        let now = 1_800_000_000 / 60 * 60;
        for n in 0..MAX_RATE_KEYS as u32 + 10 {
            assert!(table.allow(IpAddr::V4(n.into()), now));
        }
        assert_eq!(table.len(), MAX_RATE_KEYS);
    }

    #[test]
    fn one_request_per_session_and_a_global_cap() {
        let in_flight = InFlight::default();
        let first = in_flight.enter([1; 32]).unwrap();
        assert_eq!(in_flight.enter([1; 32]).unwrap_err(), Busy::Session);
        drop(first);
        let mut held = Vec::new();
        for n in 0..MAX_IN_FLIGHT {
            held.push(in_flight.enter([n as u8 + 2; 32]).unwrap());
        }
        assert_eq!(in_flight.enter([200; 32]).unwrap_err(), Busy::Global);
        assert_eq!(in_flight.running(), MAX_IN_FLIGHT);
        held[0].release_global();
        let other = in_flight.enter([201; 32]).unwrap();
        assert_eq!(in_flight.enter([2; 32]).unwrap_err(), Busy::Global);
        drop(other);
        assert_eq!(
            in_flight.enter([2; 32]).unwrap_err(),
            Busy::Session,
            "the session stays busy"
        );
    }
}
