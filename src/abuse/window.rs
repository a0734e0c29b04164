//! A sliding strike window in constant space.
//!
//! Strikes are counted in consecutive buckets one window long; the level at any moment is the
//! current bucket plus the previous bucket weighted by how much of it still lies inside the last
//! window. A burst straddling a bucket edge is therefore seen whole (a fixed window lets nearly
//! twice the threshold through), and an entry needs two words of state, not a log.

/// Strike counts of the current and the previous bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct StrikeWindow {
    /// Start of the current bucket, unix nanos.
    start: i64,
    /// 32 bits each, like the threshold they are compared with: a count saturates at about four
    /// billion, which loses nothing, and every tracked client's entry is 8 bytes smaller.
    current: u32,
    previous: u32,
}

impl StrikeWindow {
    pub(super) fn new(now: i64) -> Self {
        StrikeWindow {
            start: now,
            current: 0,
            previous: 0,
        }
    }

    /// Rolls the buckets forward to the one containing `now`.
    fn advance(&mut self, now: i64, window: i64) {
        let elapsed = now.saturating_sub(self.start);
        if elapsed < window {
            // Inside the current bucket, or the clock stepped back: keep counting here.
            return;
        }
        let buckets = elapsed / window;
        self.previous = if buckets == 1 { self.current } else { 0 };
        self.current = 0;
        self.start = self.start.saturating_add(buckets.saturating_mul(window));
    }

    /// Adds `weight` at `now` and reports whether the sliding level reached `threshold`.
    pub(super) fn add(&mut self, now: i64, window: i64, weight: u32, threshold: u32) -> bool {
        self.advance(now, window);
        self.current = self.current.saturating_add(weight);
        self.reached(now, window, threshold)
    }

    /// Level ≥ threshold, in integers: `previous·(window − into) + current·window ≥
    /// threshold·window`.
    fn reached(&self, now: i64, window: i64, threshold: u32) -> bool {
        let window = window.max(1) as u128;
        let into = (now.saturating_sub(self.start).max(0) as u128).min(window);
        let level = u128::from(self.previous) * (window - into) + u128::from(self.current) * window;
        level >= u128::from(threshold) * window
    }

    /// No strike inside the last window: nothing to remember.
    pub(super) fn is_idle(&mut self, now: i64, window: i64) -> bool {
        self.advance(now, window);
        self.current == 0 && self.previous == 0
    }

    /// Forgets every strike (after a ban).
    pub(super) fn reset(&mut self, now: i64) {
        *self = StrikeWindow::new(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000_000_000;
    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn reaches_the_threshold_within_one_window() {
        let mut w = StrikeWindow::new(0);
        assert!(!w.add(0, MINUTE, 1, 3));
        assert!(!w.add(SECOND, MINUTE, 1, 3));
        assert!(w.add(2 * SECOND, MINUTE, 1, 3));
    }

    #[test]
    fn strikes_older_than_the_window_are_forgotten() {
        let mut w = StrikeWindow::new(0);
        assert!(!w.add(0, MINUTE, 2, 3));
        assert!(!w.add(2 * MINUTE, MINUTE, 1, 3));
        assert!(w.is_idle(4 * MINUTE, MINUTE));
    }

    #[test]
    fn a_burst_across_the_bucket_edge_is_seen_whole() {
        // A fixed window would see 2 and then 2: never 3.
        let mut w = StrikeWindow::new(0);
        assert!(!w.add(MINUTE - SECOND, MINUTE, 2, 3));
        assert!(w.add(MINUTE + SECOND, MINUTE, 2, 3));
    }

    #[test]
    fn the_previous_bucket_fades_as_it_slides_out() {
        let mut w = StrikeWindow::new(0);
        assert!(!w.add(0, MINUTE, 2, 3));
        // 59 s into the next bucket only 1/60 of the old two strikes remains.
        assert!(!w.add(MINUTE + 59 * SECOND, MINUTE, 1, 3));
        assert!(!w.is_idle(MINUTE + 59 * SECOND, MINUTE));
        assert!(w.is_idle(3 * MINUTE, MINUTE));
    }

    #[test]
    fn a_clock_stepping_back_does_not_panic_or_reset() {
        let mut w = StrikeWindow::new(10 * MINUTE);
        assert!(!w.add(MINUTE, MINUTE, 2, 3));
        assert!(w.add(MINUTE, MINUTE, 1, 3));
    }

    #[test]
    fn counts_saturate_instead_of_wrapping() {
        let mut w = StrikeWindow::new(0);
        assert!(w.add(0, MINUTE, u32::MAX, u32::MAX));
        assert!(w.add(SECOND, MINUTE, u32::MAX, u32::MAX));
        assert!(w.add(MINUTE + SECOND, MINUTE, 1, u32::MAX / 2));
    }

    #[test]
    fn reset_forgets_everything() {
        let mut w = StrikeWindow::new(0);
        w.add(0, MINUTE, 5, 100);
        w.reset(SECOND);
        assert!(w.is_idle(SECOND, MINUTE));
    }
}
