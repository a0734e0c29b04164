//! How many form submissions one admission pass may send past a busy room.
//!
//! A form from an admitted visitor skips the line so that a visitor half-way through a checkout
//! is not sent to the back of it. Without a limit, one pass could send every request as a form
//! and never wait. Each pass may send [`FORMS_PER_WINDOW`] forms per [`WINDOW`] through the lane;
//! past that its requests go through the room like anyone's.
//!
//! Counts are kept per window in two tables, this one and the last: a pass's forms are the sum
//! of both, so a burst at the end of one window still counts at the start of the next, and a
//! table is dropped whole when its window has passed. Memory is bounded by the passes that sent
//! forms in the last two windows, and by [`MAX_PASSES`] at worst.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::pass::PassId;

/// Forms one pass may send through the lane per window: enough for a checkout, a comment and a
/// page that saves in the background every few seconds, not enough to stand in for page loads.
pub(crate) const FORMS_PER_WINDOW: u32 = 20;

/// Length of one counting window.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// Most passes counted per window. Past it, passes not yet counted get no lane for forms until
/// the window turns: a burst of that many passes sending forms is not a crowd of checkouts.
const MAX_PASSES: usize = 100_000;

#[derive(Debug)]
struct Windows {
    started: Instant,
    current: HashMap<PassId, u32>,
    previous: HashMap<PassId, u32>,
}

/// Form counts per pass over the last two windows.
#[derive(Debug)]
pub(crate) struct FormBudget {
    windows: Mutex<Windows>,
}

impl Default for FormBudget {
    fn default() -> FormBudget {
        FormBudget {
            windows: Mutex::new(Windows {
                started: Instant::now(),
                current: HashMap::new(),
                previous: HashMap::new(),
            }),
        }
    }
}

impl FormBudget {
    /// Counts one form from `pass` if its budget allows; false when it has used it up.
    pub(crate) fn take(&self, pass: &PassId, now: Instant) -> bool {
        let mut windows = self.windows.lock();
        let elapsed = now.saturating_duration_since(windows.started);
        if elapsed >= WINDOW {
            let old = std::mem::take(&mut windows.current);
            // Two windows or more without a form: nothing recent to remember.
            windows.previous = if elapsed >= 2 * WINDOW {
                HashMap::new()
            } else {
                old
            };
            windows.started = now;
        }
        let earlier = windows.previous.get(pass).copied().unwrap_or(0);
        let counted = windows.current.len();
        let sent = windows.current.get(pass).copied();
        if sent.is_none() && counted >= MAX_PASSES {
            return false;
        }
        let sent = sent.unwrap_or(0);
        if earlier.saturating_add(sent) >= FORMS_PER_WINDOW {
            return false;
        }
        windows.current.insert(*pass, sent + 1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_pass_gets_its_budget_per_window_and_others_their_own() {
        let budget = FormBudget::default();
        let (one, other) = ([1u8; 16], [2u8; 16]);
        let start = Instant::now();
        for _ in 0..FORMS_PER_WINDOW {
            assert!(budget.take(&one, start));
        }
        assert!(!budget.take(&one, start));
        assert!(budget.take(&other, start));
        // Forms at the end of a window still count at the start of the next one.
        assert!(!budget.take(&one, start + WINDOW));
        // Once they are two windows old they are forgotten.
        assert!(budget.take(&one, start + 2 * WINDOW));
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_quiet_spell_forgets_everything() {
        let budget = FormBudget::default();
        let start = Instant::now();
        for _ in 0..FORMS_PER_WINDOW {
            assert!(budget.take(&[1u8; 16], start));
        }
        assert!(budget.take(&[1u8; 16], start + 3 * WINDOW));
    }
}
