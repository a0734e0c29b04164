//! Clock reads for the request path, where milliseconds are precise enough.
//!
//! Every proxied page reads the time several times (pass expiry, the abuse registry, the room's
//! admission clock, the origin connection pool). A precise read scales the CPU's time-stamp
//! counter; Linux also keeps a copy of each clock updated once per scheduler tick (1 to 10 ms)
//! that a read only has to load. Nothing these reads feed needs finer than the tick: passes and
//! bans count in seconds, the room in milliseconds, idle connections and the origin's answer
//! time in seconds. Elsewhere than on Linux the precise clocks are read.

#[cfg(target_os = "linux")]
use std::sync::LazyLock;
use std::time::{Duration, Instant};
#[cfg(not(target_os = "linux"))]
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(target_os = "linux")]
use rustix::time::ClockId;

/// Time since the Unix epoch, to within a scheduler tick; zero if the clock is set before 1970.
pub fn since_unix_epoch() -> Duration {
    #[cfg(target_os = "linux")]
    {
        read_coarse(ClockId::RealtimeCoarse)
    }
    #[cfg(not(target_os = "linux"))]
    {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

/// The wall clock in whole unix seconds.
pub(crate) fn unix_seconds() -> u64 {
    since_unix_epoch().as_secs()
}

/// A monotonic instant to within a scheduler tick, comparable with `Instant::now()` up to
/// that tick: the coarse clock's distance from a fixed starting point, added to the precise
/// instant read at that point. Both clocks count the same time; only their resolution differs.
pub fn instant() -> Instant {
    #[cfg(target_os = "linux")]
    {
        static START: LazyLock<(Instant, Duration)> =
            LazyLock::new(|| (Instant::now(), read_coarse(ClockId::MonotonicCoarse)));
        let (start, coarse_start) = *START;
        start + read_coarse(ClockId::MonotonicCoarse).saturating_sub(coarse_start)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Instant::now()
    }
}

/// [`instant`] as tokio's type, for the deadlines of tokio's timers. Not for code whose tests
/// pause tokio's clock: this one keeps running.
pub(crate) fn tokio_instant() -> tokio::time::Instant {
    tokio::time::Instant::from_std(instant())
}

/// How far [`instant`] may be from `Instant::now()`, either way: one step of the coarse clock
/// (a scheduler tick). A deadline that must not come early adds it.
pub(crate) fn max_error() -> Duration {
    #[cfg(target_os = "linux")]
    {
        static STEP: LazyLock<Duration> = LazyLock::new(|| {
            let step = rustix::time::clock_getres(ClockId::MonotonicCoarse);
            match (u64::try_from(step.tv_sec), u32::try_from(step.tv_nsec)) {
                (Ok(secs), Ok(nanos)) => Duration::new(secs, nanos),
                // A kernel that cannot say: the slowest tick Linux is built with (HZ=100).
                _ => Duration::from_millis(10),
            }
        });
        *STEP
    }
    #[cfg(not(target_os = "linux"))]
    {
        Duration::ZERO
    }
}

/// A coarse clock's reading; zero before its origin (a wall clock set before 1970).
#[cfg(target_os = "linux")]
fn read_coarse(clock: ClockId) -> Duration {
    let now = rustix::time::clock_gettime(clock);
    match (u64::try_from(now.tv_sec), u32::try_from(now.tv_nsec)) {
        (Ok(secs), Ok(nanos)) => Duration::new(secs, nanos),
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    /// The coarse clocks trail the precise ones by at most a tick (allowing a generous 50 ms
    /// for a loaded test machine) and never run ahead of a later precise read by more.
    #[test]
    fn coarse_reads_stay_within_a_tick_of_precise_ones() {
        const SLACK: Duration = Duration::from_millis(50);
        for _ in 0..1_000 {
            let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            let coarse = since_unix_epoch();
            let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            assert!(coarse + SLACK >= before, "{coarse:?} trails {before:?}");
            assert!(coarse <= after + SLACK, "{coarse:?} leads {after:?}");

            let before = Instant::now();
            let coarse = instant();
            let after = Instant::now();
            assert!(coarse + SLACK >= before);
            assert!(coarse <= after + SLACK);
        }
    }

    /// What deadlines rely on: a coarse instant is within `max_error` of the precise clock
    /// either way, with no slack for a loaded machine.
    #[test]
    fn max_error_bounds_the_coarse_instant() {
        let step = max_error();
        #[cfg(target_os = "linux")]
        assert!(
            step > Duration::ZERO && step <= Duration::from_millis(10),
            "{step:?}"
        );
        for _ in 0..10_000 {
            let before = Instant::now();
            let coarse = instant();
            let after = Instant::now();
            assert!(
                coarse + step >= before,
                "{coarse:?} + {step:?} trails {before:?}"
            );
            assert!(
                coarse <= after + step,
                "{coarse:?} leads {after:?} by more than {step:?}"
            );
        }
    }

    #[test]
    fn coarse_instants_never_go_back() {
        let mut last = instant();
        let until = Instant::now() + Duration::from_millis(30);
        while Instant::now() < until {
            let now = instant();
            assert!(now >= last);
            last = now;
        }
        assert!(last > Instant::now() - Duration::from_millis(50));
    }

    #[test]
    fn unix_seconds_is_the_current_second() {
        let precise = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(unix_seconds().abs_diff(precise) <= 1);
    }
}
