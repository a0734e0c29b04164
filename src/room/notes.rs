//! What the portal shows about a waiting visitor beyond its place: the path it first asked for
//! and its browser, noted when its ticket was issued.
//!
//! Notes are off until the portal turns them on (a process without a portal keeps no
//! browser strings per visitor), bounded in number, and pruned with the line, so they never
//! outgrow it. Only issuing a ticket writes one: a page from a visitor already in line costs
//! nothing here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::tokens::TokenId;

/// Notes kept at once; past it new ones are dropped and counted.
pub(super) const MAX_NOTES: usize = 100_000;
/// Longest path (with its query) kept, in bytes.
const PATH_LIMIT: usize = 256;
/// Longest browser string kept, in bytes.
const AGENT_LIMIT: usize = 200;

/// A waiting visitor's first request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketNote {
    /// Path and query, cut at a character boundary past [`PATH_LIMIT`] bytes.
    pub path: Box<str>,
    /// The `User-Agent` sent, cut likewise; empty when none was.
    pub user_agent: Box<str>,
}

#[derive(Debug)]
pub(super) struct Notes {
    enabled: AtomicBool,
    capacity: usize,
    by_ticket: Mutex<HashMap<TokenId, TicketNote>>,
    tracked: AtomicUsize,
    dropped: AtomicU64,
}

impl Default for Notes {
    fn default() -> Self {
        Notes::with_capacity(MAX_NOTES)
    }
}

/// Counts for the portal's overview.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoteStats {
    pub tracked: usize,
    pub dropped: u64,
}

/// `text` cut to at most `limit` bytes without splitting a character.
fn clipped(text: &str, limit: usize) -> Box<str> {
    if text.len() <= limit {
        return text.into();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].into()
}

impl Notes {
    pub(super) fn with_capacity(capacity: usize) -> Notes {
        Notes {
            enabled: AtomicBool::new(false),
            capacity,
            by_ticket: Mutex::new(HashMap::new()),
            tracked: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    pub(super) fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Notes a new ticket's first request; a full store drops it and counts the drop.
    pub(super) fn add(&self, ticket: TokenId, path: &str, user_agent: &str) {
        if !self.enabled() {
            return;
        }
        let note = TicketNote {
            path: clipped(path, PATH_LIMIT),
            user_agent: clipped(user_agent, AGENT_LIMIT),
        };
        let mut notes = self.by_ticket.lock();
        if notes.len() >= self.capacity && !notes.contains_key(&ticket) {
            drop(notes);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        notes.insert(ticket, note);
        self.tracked.store(notes.len(), Ordering::Relaxed);
    }

    /// The notes of these tickets, in their order, under one lock.
    pub(super) fn lookup(&self, tickets: impl Iterator<Item = TokenId>) -> Vec<Option<TicketNote>> {
        let notes = self.by_ticket.lock();
        tickets.map(|ticket| notes.get(&ticket).cloned()).collect()
    }

    /// Forgets the notes of tickets `still_held` says are gone; returns how many are kept. The
    /// test runs outside this store's lock (it takes the line's own locks), so issuing tickets
    /// is never held up by a long prune.
    pub(super) fn prune(&self, still_held: impl Fn(&TokenId) -> bool) -> usize {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let tickets: Vec<TokenId> = self.by_ticket.lock().keys().copied().collect();
        let gone: Vec<TokenId> = tickets
            .into_iter()
            .filter(|ticket| !still_held(ticket))
            .collect();
        let mut notes = self.by_ticket.lock();
        for ticket in &gone {
            notes.remove(ticket);
        }
        self.tracked.store(notes.len(), Ordering::Relaxed);
        notes.len()
    }

    pub(super) fn stats(&self) -> NoteStats {
        NoteStats {
            tracked: self.tracked.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(n: u8) -> TokenId {
        [n; 16]
    }

    #[test]
    fn nothing_is_noted_until_the_portal_turns_notes_on() {
        let notes = Notes::with_capacity(4);
        notes.add(ticket(1), "/", "curl");
        assert_eq!(notes.stats(), NoteStats::default());
        notes.enable();
        notes.add(ticket(1), "/", "curl");
        assert_eq!(notes.stats().tracked, 1);
    }

    #[test]
    fn a_full_store_drops_and_counts_and_a_prune_of_everything_empties_it() {
        let notes = Notes::with_capacity(1);
        notes.enable();
        notes.add(ticket(1), "/one", "a");
        notes.add(ticket(2), "/two", "b");
        assert_eq!(
            notes.stats(),
            NoteStats {
                tracked: 1,
                dropped: 1
            }
        );
        let found = notes.lookup([ticket(1), ticket(2)].into_iter());
        assert_eq!(found[0].as_ref().map(|n| &*n.path), Some("/one"));
        assert_eq!(found[1], None);
        assert_eq!(notes.prune(|_| false), 0);
        assert_eq!(notes.stats().tracked, 0);
    }

    #[test]
    fn prune_keeps_the_tickets_still_held() {
        let notes = Notes::with_capacity(8);
        notes.enable();
        for n in 0..4 {
            notes.add(ticket(n), "/", "");
        }
        assert_eq!(notes.prune(|t| t[0] % 2 == 0), 2);
        let found = notes.lookup((0..4).map(ticket));
        assert!(found[0].is_some() && found[1].is_none() && found[2].is_some());
    }

    #[test]
    fn long_values_are_cut_at_a_character_boundary() {
        let notes = Notes::with_capacity(2);
        notes.enable();
        let path = format!("/{}", "é".repeat(200));
        notes.add(ticket(1), &path, &"x".repeat(500));
        let note = notes.lookup([ticket(1)].into_iter()).remove(0).unwrap();
        assert!(note.path.len() <= PATH_LIMIT && note.path.starts_with("/é"));
        assert_eq!(note.user_agent.len(), AGENT_LIMIT);
    }
}
