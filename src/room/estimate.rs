//! Admission-rate meter and the estimated wait shown to visitors.
//!
//! The meter counts the steps that move waiting visitors forward: a release, or a ready ticket
//! ending (both free a place in the window). The edge also steps past abandoned tickets, but those
//! left everyone's position when they were retired, so counting them would make the line look
//! faster than positions really fall (ten times faster when nine in ten tickets are abandoned).
//! Steps are counted in 10-second buckets; closed buckets feed an EWMA and a one-minute history. An estimate is only
//! "known" when the last minute saw a few advances and the last 30 seconds were not idle; the range
//! spans the slowest to the fastest recent bucket, so it is as wide as the rate is unsteady.

/// Bucket length in milliseconds.
const BUCKET_MS: u64 = 10_000;
/// Closed buckets kept (one minute).
const HISTORY: usize = 6;
/// Weight of the newest bucket in the EWMA.
const ALPHA: f64 = 0.3;
/// Advances needed in the last minute before an estimate is offered.
const MIN_ADVANCES: u64 = 3;

/// A wait range for one position; `known == false` means "not enough data to say".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitEstimate {
    pub known: bool,
    pub min_secs: u64,
    pub max_secs: u64,
}

impl WaitEstimate {
    pub const UNKNOWN: WaitEstimate = WaitEstimate {
        known: false,
        min_secs: 0,
        max_secs: 0,
    };
}

#[derive(Debug, Clone)]
pub(crate) struct RateMeter {
    bucket_start: u64,
    current: u64,
    /// Newest last.
    history: [u64; HISTORY],
    closed: usize,
    /// Advances per second.
    ewma: f64,
}

impl RateMeter {
    pub(crate) fn new(now_ms: u64) -> RateMeter {
        RateMeter {
            bucket_start: now_ms,
            current: 0,
            history: [0; HISTORY],
            closed: 0,
            ewma: 0.0,
        }
    }

    fn roll(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.bucket_start) / BUCKET_MS;
        if elapsed == 0 {
            return;
        }
        // After a long idle gap the older buckets are all zero; no need to close each one.
        let to_close = elapsed.min(HISTORY as u64 + 1);
        for _ in 0..to_close {
            self.history.rotate_left(1);
            self.history[HISTORY - 1] = self.current;
            let rate = self.current as f64 / (BUCKET_MS as f64 / 1000.0);
            self.ewma = if self.closed == 0 {
                rate
            } else {
                ALPHA * rate + (1.0 - ALPHA) * self.ewma
            };
            self.closed = (self.closed + 1).min(HISTORY);
            self.current = 0;
        }
        self.bucket_start += elapsed * BUCKET_MS;
    }

    /// Counts `advances` places the waiting visitors moved forward at `now_ms`.
    pub(crate) fn record(&mut self, now_ms: u64, advances: u64) {
        self.roll(now_ms);
        self.current += advances;
    }

    /// Places moved forward per second (smoothed), for stats.
    pub(crate) fn rate(&mut self, now_ms: u64) -> f64 {
        self.roll(now_ms);
        self.ewma
    }

    /// Estimated wait for someone at `position` (≥ 1).
    pub(crate) fn estimate(&mut self, now_ms: u64, position: u64) -> WaitEstimate {
        self.roll(now_ms);
        let recent: u64 = self.history.iter().sum::<u64>() + self.current;
        let last_half_minute: u64 = self.history[HISTORY - 3..].iter().sum::<u64>() + self.current;
        if self.closed == 0 || recent < MIN_ADVANCES || last_half_minute == 0 || self.ewma <= 0.0 {
            return WaitEstimate::UNKNOWN;
        }
        let per_second = |count: u64| count as f64 / (BUCKET_MS as f64 / 1000.0);
        let closed = &self.history[HISTORY - self.closed..];
        let fastest = closed
            .iter()
            .copied()
            .map(per_second)
            .fold(self.ewma, f64::max);
        // An idle bucket would make the slow end infinite; a third of the average is the floor.
        let slowest = closed
            .iter()
            .copied()
            .map(per_second)
            .fold(self.ewma, f64::min)
            .max(self.ewma / 3.0);
        let position = position.max(1) as f64;
        WaitEstimate {
            known: true,
            min_secs: (position / fastest).floor() as u64,
            max_secs: (position / slowest).ceil() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_without_data() {
        let mut meter = RateMeter::new(0);
        assert_eq!(meter.estimate(0, 5), WaitEstimate::UNKNOWN);
        meter.record(1_000, 2);
        assert!(
            !meter.estimate(15_000, 5).known,
            "two advances are not enough"
        );
    }

    #[test]
    fn steady_rate_gives_a_tight_range() {
        let mut meter = RateMeter::new(0);
        // One advance per second for a minute.
        for second in 0..60 {
            meter.record(second * 1_000, 1);
        }
        let estimate = meter.estimate(60_000, 30);
        assert!(estimate.known);
        assert_eq!(estimate.min_secs, 30);
        assert_eq!(estimate.max_secs, 30);
    }

    #[test]
    fn unsteady_rate_widens_the_range() {
        let mut meter = RateMeter::new(0);
        for bucket in 0..6u64 {
            let advances = if bucket % 2 == 0 { 20 } else { 5 };
            meter.record(bucket * BUCKET_MS + 1, advances);
        }
        let estimate = meter.estimate(60_000, 10);
        assert!(estimate.known);
        assert!(estimate.min_secs < estimate.max_secs);
        assert!(
            estimate.min_secs <= 5 && estimate.max_secs >= 10,
            "{estimate:?}"
        );
    }

    #[test]
    fn nothing_moving_makes_it_unknown_again() {
        let mut meter = RateMeter::new(0);
        for second in 0..30 {
            meter.record(second * 1_000, 1);
        }
        assert!(meter.estimate(30_000, 3).known);
        assert!(!meter.estimate(65_000, 3).known);
        assert!(!meter.estimate(10_000_000, 3).known);
    }
}
