//! Serving workers take turns on a shared core instead of holding it for a whole scheduler tick.
//!
//! Each worker is one thread with its own event loop. Under load a worker rarely finds nothing
//! to do, so it rarely sleeps, and Linux lets a thread that does not sleep run until its time
//! slice is used up, which it notices only at a timer tick (every 4 ms with the common
//! `HZ=250`). When the scheduler has put two workers on one core (it does, with the origin busy
//! on the other) or a worker beside a busy origin process, everything waiting on the other
//! thread waits up to a tick or two: measured with two workers and the origin on a two-core
//! machine, that was the slowest hundredth of requests, 7–9 ms against 5–7 when taking turns.
//!
//! So a worker that has been running for [`TURN`] without sleeping offers its core
//! (`sched_yield`) each time its event loop is about to look for more events. With nothing else
//! waiting for that core the call returns at once (about a microsecond, at most once per turn);
//! otherwise the other thread runs first. The scheduler's fairness is unchanged: a thread that
//! yields keeps its claim on its share of the CPU, it only gives up its place for now.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long a worker runs without sleeping before it offers its core. Short next to the
/// scheduler's tick, long next to the cost of a yield and of the context switch it may cause
/// (a few microseconds), so turns cost well under one percent of a busy core.
const TURN: Duration = Duration::from_micros(400);

/// A wait for events at least this long means the thread was off the core (it slept in the
/// kernel, or it yielded and another thread ran): its turn starts again. Checking for ready
/// events and finding some takes a few microseconds.
const OFF_CORE: Duration = Duration::from_micros(50);

/// One worker thread's current turn.
#[derive(Clone, Copy, Debug, Default)]
struct Turn {
    /// When the thread last came back onto the core; `None` before its first park.
    running_since: Option<Instant>,
    /// When it last began waiting for events.
    parked_at: Option<Instant>,
}

impl Turn {
    /// The event loop is about to wait for events at `now`: whether to yield first.
    fn parking(&mut self, now: Instant) -> bool {
        let since = *self.running_since.get_or_insert(now);
        let yield_now = now.saturating_duration_since(since) >= TURN;
        if yield_now {
            self.running_since = Some(now);
        }
        self.parked_at = Some(now);
        yield_now
    }

    /// The event loop has its events at `now`.
    fn unparked(&mut self, now: Instant) {
        let off_core = self
            .parked_at
            .is_some_and(|parked| now.saturating_duration_since(parked) >= OFF_CORE);
        if off_core {
            self.running_since = Some(now);
        }
    }
}

thread_local! {
    static CURRENT: Cell<Turn> = const {
        Cell::new(Turn {
            running_since: None,
            parked_at: None,
        })
    };
}

/// Runtime hook: called on the worker's thread before it waits for events.
fn before_park() {
    let mut turn = CURRENT.get();
    if turn.parking(Instant::now()) {
        std::thread::yield_now();
    }
    CURRENT.set(turn);
}

/// Runtime hook: called on the worker's thread when its wait for events ends.
fn after_unpark() {
    let mut turn = CURRENT.get();
    turn.unparked(Instant::now());
    CURRENT.set(turn);
}

/// A current-thread runtime for a serving worker: I/O and timers enabled, and taking turns on
/// a shared core.
pub fn worker_runtime() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder
        .enable_all()
        .on_thread_park(before_park)
        .on_thread_unpark(after_unpark);
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, micros: u64) -> Instant {
        start + Duration::from_micros(micros)
    }

    #[test]
    fn no_yield_until_a_whole_turn_has_run() {
        let start = Instant::now();
        let mut turn = Turn::default();
        // Event checks that find work at once: the thread never leaves the core.
        let mut now = 0;
        while now + 10 < TURN.as_micros() as u64 {
            assert!(!turn.parking(at(start, now)), "yielded after {now} us");
            turn.unparked(at(start, now + 2));
            now += 10;
        }
        assert!(turn.parking(at(start, TURN.as_micros() as u64)));
    }

    #[test]
    fn after_a_yield_the_next_turn_is_a_whole_one() {
        let start = Instant::now();
        let mut turn = Turn::default();
        let turn_us = TURN.as_micros() as u64;
        assert!(!turn.parking(start));
        turn.unparked(at(start, 1));
        assert!(turn.parking(at(start, turn_us)));
        // The yield returned at once: nothing else wanted the core.
        turn.unparked(at(start, turn_us + 1));
        assert!(!turn.parking(at(start, 2 * turn_us - 1)));
        turn.unparked(at(start, 2 * turn_us));
        assert!(turn.parking(at(start, 2 * turn_us + 1)));
    }

    #[test]
    fn sleeping_starts_a_new_turn() {
        let start = Instant::now();
        let turn_us = TURN.as_micros() as u64;
        let mut turn = Turn::default();
        assert!(!turn.parking(start));
        turn.unparked(at(start, 1));
        assert!(!turn.parking(at(start, turn_us - 100)));
        // No events for a while: the thread slept, so others had the core.
        let woke = turn_us - 100 + OFF_CORE.as_micros() as u64;
        turn.unparked(at(start, woke));
        assert!(!turn.parking(at(start, turn_us + 50)));
        assert!(!turn.parking(at(start, woke + turn_us - 1)));
        assert!(turn.parking(at(start, woke + turn_us)));
    }

    #[test]
    fn a_yield_that_gave_the_core_away_starts_a_new_turn() {
        let start = Instant::now();
        let turn_us = TURN.as_micros() as u64;
        let mut turn = Turn::default();
        assert!(!turn.parking(start));
        assert!(turn.parking(at(start, turn_us)));
        // Another thread ran for a while before this one came back.
        let back = turn_us + 300;
        turn.unparked(at(start, back));
        assert!(!turn.parking(at(start, back + turn_us - 1)));
        assert!(turn.parking(at(start, back + turn_us)));
    }

    #[test]
    fn the_runtime_runs_with_the_hooks_installed() {
        let runtime = worker_runtime().build().expect("runtime");
        let answer = runtime.block_on(async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            tokio::task::spawn(async { 42 }).await
        });
        assert_eq!(answer.ok(), Some(42));
        let turn = CURRENT.get();
        assert!(turn.running_since.is_some() && turn.parked_at.is_some());
    }
}
