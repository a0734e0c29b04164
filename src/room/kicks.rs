//! Visitors an operator removed from the line: their tickets are remembered for a while, so
//! the waiting page can tell them what happened instead of quietly queueing them again.
//!
//! Most of the time nobody has been removed, and every page with a ticket asks: the count is
//! read first, and the table is locked only when it holds someone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::tokens::TokenId;

/// Removed tickets remembered at once; past it the ones ending soonest are forgotten first.
const MAX_KICKS: usize = 100_000;

#[derive(Debug, Default)]
pub(super) struct Kicks {
    /// Ticket → room-clock milliseconds until which it is remembered.
    until: Mutex<HashMap<TokenId, u64>>,
    remembered: AtomicUsize,
}

impl Kicks {
    pub(super) fn remember(&self, token: TokenId, until: u64, now: u64) {
        let mut kicks = self.until.lock();
        if kicks.len() >= MAX_KICKS {
            kicks.retain(|_, end| *end > now);
            if kicks.len() >= MAX_KICKS
                && let Some(soonest) = kicks.iter().min_by_key(|(_, end)| **end).map(|(t, _)| *t)
            {
                kicks.remove(&soonest);
            }
        }
        kicks.insert(token, until);
        self.remembered.store(kicks.len(), Ordering::Relaxed);
    }

    /// Nobody is remembered: one atomic load, so the common case costs nothing more.
    pub(super) fn is_empty(&self) -> bool {
        self.remembered.load(Ordering::Relaxed) == 0
    }

    pub(super) fn len(&self) -> usize {
        self.remembered.load(Ordering::Relaxed)
    }

    pub(super) fn contains(&self, token: &TokenId, now: u64) -> bool {
        self.until.lock().get(token).is_some_and(|end| *end > now)
    }

    /// Forgets the tickets whose time is over; returns how many are still remembered.
    pub(super) fn prune(&self, now: u64) -> usize {
        let mut kicks = self.until.lock();
        kicks.retain(|_, end| *end > now);
        self.remembered.store(kicks.len(), Ordering::Relaxed);
        kicks.len()
    }
}
