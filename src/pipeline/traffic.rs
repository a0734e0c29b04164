//! The main listener's traffic as the Monitor shows it: answered requests by latency and by
//! status class, and how many are being worked on now.
//!
//! Every request passes here twice, so the figures are plain relaxed atomics: no lock, no
//! allocation, nothing that waits. A request is in flight from its arrival until the pipeline
//! has its answer (or drops the request, when the client goes away first); the answer's time is
//! its latency, counted in the first bucket whose upper edge it does not pass.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper edges of the latency buckets, in milliseconds; one more bucket holds the slower rest.
pub(crate) const BOUNDS_MS: [u64; 13] =
    [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];
/// The buckets: one per edge, and the overflow.
pub(crate) const BUCKETS: usize = BOUNDS_MS.len() + 1;
/// Status classes 1xx to 5xx.
pub(crate) const CLASSES: usize = 5;

/// The edges in microseconds, so a latency is compared without a division.
const BOUNDS_US: [u64; BOUNDS_MS.len()] = {
    let mut us = [0; BOUNDS_MS.len()];
    let mut i = 0;
    while i < us.len() {
        us[i] = BOUNDS_MS[i] * 1000;
        i += 1;
    }
    us
};

/// The figures. The in-flight count sits on a cache line of its own: it changes twice per
/// request on whichever worker has the request, and the answer counters should not move with it.
#[derive(Default)]
pub(crate) struct Traffic {
    now: InFlightCounts,
    buckets: [AtomicU64; BUCKETS],
    /// The answers of requests handed to the origin alone: the origin's latency as visitors
    /// see it (the Overview's chart), without waiting pages and refusals.
    proxied_buckets: [AtomicU64; BUCKETS],
    classes: [AtomicU64; CLASSES],
    /// 5xx answers from the origin side: the origin's own, and Concert's for an origin that
    /// failed. Apart from the 5xx class, which also holds Concert's "line full" answers.
    origin_errors: AtomicU64,
}

#[derive(Default)]
#[repr(align(64))]
struct InFlightCounts {
    current: AtomicU64,
    peak: AtomicU64,
}

/// A request being worked on: counted in flight until this is dropped, which happens with the
/// request's future whether it ends with an answer, an error or the client going away.
pub(crate) struct InFlight<'a>(&'a Traffic);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.now.current.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A reading of the figures, for the Monitor. Not one instant: each counter is read on its own,
/// so a request answered during the reading may show in one and not yet in another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TrafficReading {
    pub(crate) in_flight: u64,
    pub(crate) in_flight_peak: u64,
    pub(crate) buckets: [u64; BUCKETS],
    pub(crate) proxied_buckets: [u64; BUCKETS],
    pub(crate) classes: [u64; CLASSES],
    pub(crate) origin_errors: u64,
}

impl TrafficReading {
    /// Answered requests.
    pub(crate) fn answered(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Answers with a 5xx status.
    pub(crate) fn server_errors(&self) -> u64 {
        self.classes[CLASSES - 1]
    }
}

impl Traffic {
    /// A request arrived; it is in flight until the returned value is dropped.
    #[inline]
    pub(crate) fn arrive(&self) -> InFlight<'_> {
        let now = self.now.current.fetch_add(1, Ordering::Relaxed) + 1;
        // A plain load first: the peak rarely moves, and a read shares the line where a
        // read-modify-write would take it.
        if now > self.now.peak.load(Ordering::Relaxed) {
            self.now.peak.fetch_max(now, Ordering::Relaxed);
        }
        InFlight(self)
    }

    /// A request was answered with `status` after `latency`; `proxied` if the origin answered.
    #[inline]
    pub(crate) fn answered(&self, status: u16, latency: Duration, proxied: bool) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        // Most answers are fast, so a scan from the fastest bucket ends early.
        let bucket = BOUNDS_US
            .iter()
            .position(|&edge| us <= edge)
            .unwrap_or(BOUNDS_MS.len());
        if let Some(count) = self.buckets.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if proxied && let Some(count) = self.proxied_buckets.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(count) = self.classes.get(class_index(status)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request handed to the origin came back with a 5xx.
    #[inline]
    pub(crate) fn origin_error(&self) {
        self.origin_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> TrafficReading {
        let load = |count: &AtomicU64| count.load(Ordering::Relaxed);
        TrafficReading {
            in_flight: load(&self.now.current),
            in_flight_peak: load(&self.now.peak),
            buckets: self.buckets.each_ref().map(load),
            proxied_buckets: self.proxied_buckets.each_ref().map(load),
            classes: self.classes.each_ref().map(load),
            origin_errors: load(&self.origin_errors),
        }
    }
}

/// 1xx → 0 … 5xx → 4. The status line allows up to 999; whatever is past 5xx is no success
/// either, so it counts with the server errors.
fn class_index(status: u16) -> usize {
    usize::from(status / 100).clamp(1, CLASSES) - 1
}

/// The latency below which a share `q` (0 to 1) of the answers in `buckets` fell, in
/// milliseconds, or `None` without answers.
///
/// Answers are taken as spread evenly inside their bucket, so the estimate moves with the data
/// instead of jumping from edge to edge: with 90 answers under 1 ms and 10 between 1 and 2 ms,
/// the 95th percentile is 1.5 ms, not 2. The overflow bucket has no upper edge; a quantile that
/// falls in it is reported as its lower edge (10 s), a floor.
pub(crate) fn quantile_ms(buckets: &[u64; BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (index, &count) in buckets.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let upto = below + count;
        if (upto as f64) >= rank {
            let lower = if index == 0 {
                0.0
            } else {
                BOUNDS_MS[index - 1] as f64
            };
            let Some(&upper) = BOUNDS_MS.get(index) else {
                return Some(lower);
            };
            let inside = (rank - below as f64) / count as f64;
            return Some(lower + (upper as f64 - lower) * inside.clamp(0.0, 1.0));
        }
        below = upto;
    }
    // Not reached: the rank is at most the total, which the last non-empty bucket reaches.
    None
}

/// `after - before`, bucket by bucket: the answers between two readings.
pub(crate) fn buckets_between(after: &[u64; BUCKETS], before: &[u64; BUCKETS]) -> [u64; BUCKETS] {
    std::array::from_fn(|i| after[i].saturating_sub(before[i]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: f64) -> Duration {
        Duration::from_secs_f64(value / 1000.0)
    }

    #[test]
    fn latencies_land_in_the_first_bucket_they_do_not_pass() {
        let traffic = Traffic::default();
        for latency in [0.0, 0.4, 1.0, 1.001, 2.0, 7.0, 10_000.0, 10_000.5, 60_000.0] {
            traffic.answered(200, ms(latency), latency > 5.0);
        }
        let reading = traffic.read();
        assert_eq!(reading.buckets[0], 3, "0, 0.4 and exactly 1 ms");
        assert_eq!(reading.buckets[1], 2, "1.001 and 2 ms");
        assert_eq!(reading.buckets[3], 1, "7 ms in ≤ 10");
        assert_eq!(reading.buckets[12], 1, "exactly 10 s");
        assert_eq!(reading.buckets[13], 2, "past 10 s");
        assert_eq!(reading.answered(), 9);
        assert_eq!(
            reading.proxied_buckets.iter().sum::<u64>(),
            4,
            "only the origin's answers count as its latency"
        );
        assert_eq!(reading.proxied_buckets[3], 1);
    }

    #[test]
    fn statuses_count_by_class() {
        let traffic = Traffic::default();
        for status in [101, 200, 204, 302, 404, 429, 500, 503, 999] {
            traffic.answered(status, Duration::ZERO, false);
        }
        assert_eq!(traffic.read().classes, [1, 2, 1, 2, 3]);
        assert_eq!(traffic.read().server_errors(), 3);
    }

    #[test]
    fn in_flight_follows_the_guards_and_keeps_its_peak() {
        let traffic = Traffic::default();
        let first = traffic.arrive();
        let second = traffic.arrive();
        assert_eq!(traffic.read().in_flight, 2);
        drop(first);
        let third = traffic.arrive();
        drop(second);
        drop(third);
        let reading = traffic.read();
        assert_eq!(reading.in_flight, 0);
        assert_eq!(reading.in_flight_peak, 2);
    }

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        let mut buckets = [0u64; BUCKETS];
        assert_eq!(quantile_ms(&buckets, 0.5), None);
        buckets[0] = 90;
        buckets[1] = 10;
        let near = |q: f64, expected: f64| {
            let value = quantile_ms(&buckets, q).unwrap();
            assert!(
                (value - expected).abs() < 1e-9,
                "q {q}: {value}, not {expected}"
            );
        };
        near(0.5, 50.0 / 90.0);
        near(0.95, 1.5);
        near(1.0, 2.0);
        // All in (100, 250]: the median is the middle of the bucket.
        let mut buckets = [0u64; BUCKETS];
        buckets[7] = 4;
        assert_eq!(quantile_ms(&buckets, 0.5), Some(175.0));
        // Past the last edge the estimate is a floor.
        let mut buckets = [0u64; BUCKETS];
        buckets[13] = 1;
        assert_eq!(quantile_ms(&buckets, 0.99), Some(10_000.0));
    }

    #[test]
    fn quantiles_never_leave_their_bucket_and_grow_with_q() {
        let buckets = [3, 0, 5, 1, 0, 0, 7, 2, 0, 0, 0, 0, 1, 4];
        let mut previous = 0.0;
        for step in 0..=100 {
            let q = f64::from(step) / 100.0;
            let value = quantile_ms(&buckets, q).unwrap();
            assert!(value >= previous, "q {q}: {value} < {previous}");
            assert!((0.0..=10_000.0).contains(&value));
            previous = value;
        }
    }
}
