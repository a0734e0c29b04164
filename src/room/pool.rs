//! Page slots lent by a pool the room shares with other instances (`-cluster`).
//!
//! Alone, the room's gate holds `cap` slots. When the slots come from a shared pool, the gate
//! holds only what this instance was lent, and whatever keeps the lease sets it through
//! [`super::Room::set_page_slots`]. The room stays ignorant of where the slots come from: it
//! only says when it ran short (an admitted visitor found no free slot) and, when asked to,
//! when a slot was let go, so the lender can act at once instead of at its next round.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The room's side of a shared pool of page slots.
#[derive(Debug, Default)]
pub struct SlotPool {
    /// Wakes whoever keeps the lease.
    nudge: Notify,
    /// Whether a released slot should wake it too (others are waiting for slots elsewhere).
    nudge_on_release: AtomicBool,
    /// Admitted visitors waiting for a local slot now.
    waiting: AtomicUsize,
}

impl SlotPool {
    /// Resolves once the room asked for attention since the last call (a permit is kept if
    /// nobody was waiting, so a nudge is never lost).
    pub async fn nudged(&self) {
        self.nudge.notified().await;
    }

    /// Asks the lender to act now.
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// Whether releases should nudge (set while others wait for slots).
    pub fn set_nudge_on_release(&self, on: bool) {
        self.nudge_on_release.store(on, Ordering::Relaxed);
    }

    /// Admitted visitors waiting for a local slot now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    pub(super) fn released(&self) {
        if self.nudge_on_release.load(Ordering::Relaxed) {
            self.nudge.notify_one();
        }
    }

    /// Counts a visitor waiting for a slot until the guard is dropped (also when its wait is
    /// cancelled), and nudges the lender: the lease may grow.
    pub(super) fn short(&self) -> WaitingGuard<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.nudge.notify_one();
        WaitingGuard(self)
    }
}

pub(super) struct WaitingGuard<'a>(&'a SlotPool);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
