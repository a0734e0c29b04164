//! Wall-clock time for the registry, injectable so tests can move it by hand.

#[cfg(test)]
use std::sync::atomic::{AtomicI64, Ordering};
#[cfg(test)]
use std::time::Duration;

/// A source of wall-clock time in unix nanoseconds.
pub trait Clock: Send + Sync {
    fn now_nanos(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now_nanos(&self) -> i64 {
        // Bans and rate windows count in seconds: a clock read to the scheduler tick will do.
        // A clock set before 1970 is broken and reads as the epoch.
        i64::try_from(crate::sys::coarse_clock::since_unix_epoch().as_nanos())
            .unwrap_or(i64::MAX - 1)
    }
}

/// A clock that only moves when told to.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct ManualClock {
    nanos: AtomicI64,
}

#[cfg(test)]
impl ManualClock {
    pub(crate) fn at(unix_nanos: i64) -> Self {
        ManualClock {
            nanos: AtomicI64::new(unix_nanos),
        }
    }

    pub(crate) fn set(&self, unix_nanos: i64) {
        self.nanos.store(unix_nanos, Ordering::SeqCst);
    }

    pub(crate) fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(by))
            });
    }
}

#[cfg(test)]
impl Clock for ManualClock {
    fn now_nanos(&self) -> i64 {
        self.nanos.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at(1_000);
        assert_eq!(clock.now_nanos(), 1_000);
        clock.advance(Duration::from_nanos(500));
        assert_eq!(clock.now_nanos(), 1_500);
        clock.set(7);
        assert_eq!(clock.now_nanos(), 7);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_nanos() > 1_577_836_800 * 1_000_000_000);
    }
}
