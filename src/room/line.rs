//! The line itself: ticket numbers, the serving window, ghosts and promotions. Pure bookkeeping with
//! no clock and no tokens, so every rule of the window can be tested (and property tested) alone.
//!
//! Every place in line is a [`Key`]. Arrivals get `(n, ORIGINAL)` with `n` = the next ticket number.
//! A promotion gives the visitor a fresh key that sorts immediately before the visitor currently at
//! the target position (same number, smaller `sub`) and leaves a ghost at the old key. Keys are never
//! shared, so two visitors never read the same position and the window never admits one extra
//! visitor (as it would if a promoted visitor shared a number with the one it was put before). The *rank* of a key is the number of keys ever issued
//! that sort at or before it; the window compares ranks:
//!
//! - `edge = now_serving + cap`; a key is ready when `rank <= edge`;
//! - position = `rank - edge - ghosts before the key` (≥ 1 while waiting);
//! - every key ends exactly once: released (admitted visitor done) or consumed (ghost reached by the
//!   edge); each ending advances `now_serving` by one.
//!
//! Only some of those steps move anyone forward. A release or a ready key ending frees a place in
//! the window, so every waiting position falls by one. A consumed ghost moves nobody: the ghost
//! already stopped counting in positions when it was retired. `release` and `retire` report the
//! first kind only, which is what the wait estimate must measure.

use std::collections::BTreeMap;

use super::ledger::CountTree;

/// `sub` of a key created by an arrival; promoted keys use smaller values.
pub(super) const ORIGINAL: u64 = u64::MAX;

/// A place in line: ticket number plus an ordering slot for promotions in front of that number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Key {
    pub number: u64,
    pub sub: u64,
}

impl Key {
    pub(super) fn original(number: u64) -> Key {
        Key {
            number,
            sub: ORIGINAL,
        }
    }

    fn is_promoted(self) -> bool {
        self.sub != ORIGINAL
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PromotedState {
    /// Held by a visitor (waiting or in flight).
    Held,
    /// Retired, not yet reached by the edge.
    Ghost,
    /// Ended; kept only because it still counts in ranks above it.
    Ended,
}

/// Why a promotion was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromoteError {
    #[error("the visitor is already at the front and may enter")]
    AlreadyReady,
    #[error("position must be at least 1")]
    InvalidPosition,
    #[error("no room left to order another promotion at that place")]
    NoOrderingRoom,
}

/// The line's counters and order-statistics structures.
#[derive(Debug, Clone)]
pub(super) struct Line {
    next_ticket: u64,
    /// Extra keys created by promotions (each also leaves a ghost behind).
    promotions: u64,
    now_serving: u64,
    cap: u64,
    /// Retired keys not yet reached, counted by ticket number.
    ghosts: CountTree,
    /// Promoted keys by ticket number (window part; older ones are folded into `promoted_folded`).
    promoted_counts: CountTree,
    /// Promoted keys in the window, for ordering among keys sharing a number.
    promoted: BTreeMap<Key, PromotedState>,
    promoted_folded: u64,
    /// Numbers below this are ready for good (folded away); their exact rank is no longer kept.
    fold_floor: u64,
}

impl Line {
    pub(super) fn new(cap: u64) -> Line {
        Line {
            next_ticket: 0,
            promotions: 0,
            now_serving: 0,
            cap: cap.max(1),
            ghosts: CountTree::new(),
            promoted_counts: CountTree::new(),
            promoted: BTreeMap::new(),
            promoted_folded: 0,
            fold_floor: 0,
        }
    }

    pub(super) fn cap(&self) -> u64 {
        self.cap
    }

    pub(super) fn now_serving(&self) -> u64 {
        self.now_serving
    }

    /// Keys ever issued: arrivals plus promotions.
    pub(super) fn issued(&self) -> u64 {
        self.next_ticket + self.promotions
    }

    pub(super) fn ghost_count(&self) -> u64 {
        self.ghosts.len()
    }

    pub(super) fn edge(&self) -> u64 {
        self.now_serving.saturating_add(self.cap)
    }

    /// True before anything was issued (snapshot import needs a pristine line).
    pub(super) fn is_pristine(&self) -> bool {
        self.issued() == 0 && self.now_serving == 0
    }

    /// Keys beyond the edge that are not ghosts (may include abandoned ready tickets).
    pub(super) fn queue_depth(&self) -> u64 {
        self.issued()
            .saturating_sub(self.edge())
            .saturating_sub(self.ghosts.len())
    }

    /// Issues the next arrival's key.
    pub(super) fn issue(&mut self) -> Key {
        self.next_ticket += 1;
        Key::original(self.next_ticket)
    }

    /// Number of keys ever issued that sort at or before `key`.
    pub(super) fn rank(&self, key: Key) -> u64 {
        if key.number + 1 < self.fold_floor {
            // Folded numbers were at or below `now_serving` when folded, so they stay ready; only
            // the last folded number (the boundary) still needs its exact rank.
            return key.number.min(self.now_serving);
        }
        let promoted_before_number =
            self.promoted_folded + self.promoted_counts.count_below(key.number);
        if key.is_promoted() {
            let same_number_up_to_key = self
                .promoted
                .range(
                    Key {
                        number: key.number,
                        sub: 0,
                    }..=key,
                )
                .count() as u64;
            (key.number - 1) + promoted_before_number + same_number_up_to_key
        } else {
            key.number
                + promoted_before_number
                + u64::from(self.promoted_counts.count_at(key.number))
        }
    }

    /// Ghosts that sort before `key`.
    fn ghosts_before(&self, key: Key) -> u64 {
        let below_number = self.ghosts.count_below(key.number);
        let same_number = if key.is_promoted() {
            self.promoted
                .range(
                    Key {
                        number: key.number,
                        sub: 0,
                    }..key,
                )
                .filter(|(_, state)| **state == PromotedState::Ghost)
                .count() as u64
        } else {
            // Every ghost at this number is a promoted key, all of which sort before the number's
            // original key.
            u64::from(self.ghosts.count_at(key.number))
        };
        below_number + same_number
    }

    pub(super) fn is_ready(&self, key: Key) -> bool {
        self.rank(key) <= self.edge()
    }

    /// Position of a held key: ≥ 1 while waiting, ≤ 0 once ready.
    pub(super) fn position(&self, key: Key) -> i64 {
        let rank = self.rank(key);
        let edge = self.edge();
        if rank <= edge {
            return rank as i64 - edge as i64;
        }
        (rank - edge - self.ghosts_before(key)) as i64
    }

    /// A visitor who held a slot finished. Returns how many places the waiting visitors moved
    /// forward: always one, however many ghosts the edge passes on the way.
    pub(super) fn release(&mut self) -> u64 {
        self.now_serving += 1;
        self.consume();
        1
    }

    /// A key ends without being admitted (gone, reaped, removed, cancelled). Returns how many
    /// places the waiting visitors moved forward: one when the key held a place in the window,
    /// none when it was still waiting (it becomes a ghost; only those behind it move, and
    /// they read that at once in their position).
    pub(super) fn retire(&mut self, key: Key) -> u64 {
        if self.is_ready(key) {
            // Already inside the window: it ends now, no ghost needed.
            self.mark_promoted(key, PromotedState::Ended);
            self.now_serving += 1;
            self.consume();
            return 1;
        }
        self.ghosts.insert(key.number, 1);
        self.mark_promoted(key, PromotedState::Ghost);
        self.consume();
        0
    }

    /// An admitted key ended through `release`; promoted keys need their marker updated.
    pub(super) fn mark_ended(&mut self, key: Key) {
        self.mark_promoted(key, PromotedState::Ended);
    }

    fn mark_promoted(&mut self, key: Key, state: PromotedState) {
        if key.is_promoted()
            && let Some(slot) = self.promoted.get_mut(&key)
        {
            *slot = state;
        }
    }

    /// A cap change moves the edge at once; ghosts it reaches are consumed.
    pub(super) fn set_cap(&mut self, cap: u64) {
        self.cap = cap.max(1);
        self.consume();
    }

    /// Smallest ghost key.
    fn min_ghost(&self) -> Option<Key> {
        let number = self.ghosts.min()?;
        let promoted_ghost = self
            .promoted
            .range(Key { number, sub: 0 }..Key::original(number))
            .find(|(_, state)| **state == PromotedState::Ghost)
            .map(|(key, _)| *key);
        Some(promoted_ghost.unwrap_or(Key::original(number)))
    }

    /// Consumes ghosts the edge has reached, one `now_serving` step each, until none is left.
    fn consume(&mut self) -> u64 {
        let mut consumed = 0;
        while let Some(ghost) = self.min_ghost() {
            if self.rank(ghost) > self.edge() {
                break;
            }
            self.ghosts.remove(ghost.number, 1);
            self.mark_promoted(ghost, PromotedState::Ended);
            self.now_serving += 1;
            consumed += 1;
        }
        self.fold_promotions();
        consumed
    }

    /// Drops promotion records whose number is behind `now_serving` for good, keeping their count.
    fn fold_promotions(&mut self) {
        while let Some((&first, _)) = self.promoted.first_key_value() {
            let number = first.number;
            if self.rank(Key::original(number)) > self.now_serving {
                break;
            }
            let folded = self
                .promoted_counts
                .remove(number, self.promoted_counts.count_at(number));
            self.promoted_folded += u64::from(folded);
            while self
                .promoted
                .first_key_value()
                .is_some_and(|(key, _)| key.number == number)
            {
                self.promoted.pop_first();
            }
            self.fold_floor = self.fold_floor.max(number + 1);
        }
    }

    /// Non-ghost keys beyond the edge up to and including `(number, ORIGINAL)` (may be negative
    /// when the number is inside the window).
    fn waiting_through(&self, number: u64) -> i64 {
        self.rank(Key::original(number)) as i64
            - self.edge() as i64
            - self.ghosts.count_upto(number) as i64
    }

    /// The key currently at `position` (≥ 1), if the line is that long.
    fn key_at_position(&self, position: u64) -> Option<Key> {
        let target = i64::try_from(position).ok()?;
        let (mut low, mut high) = (self.fold_floor.max(1), self.next_ticket);
        if low > high || self.waiting_through(high) < target {
            return None;
        }
        while low < high {
            let middle = low + (high - low) / 2;
            if self.waiting_through(middle) >= target {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        let number = low;
        // Negative when the edge falls inside this number's group: keys up to the edge are not
        // waiting, and counting them brings the total back to zero exactly at the edge.
        let mut count = self.waiting_through(number - 1);
        for (key, state) in self
            .promoted
            .range(Key { number, sub: 0 }..Key::original(number))
        {
            if *state != PromotedState::Ghost {
                count += 1;
                if count == target {
                    return Some(*key);
                }
            }
        }
        Some(Key::original(number))
    }

    /// Moves a waiting key to `position`. Returns the new key, or `None` when it is already at or
    /// ahead of that position.
    pub(super) fn promote(&mut self, key: Key, position: u64) -> Result<Option<Key>, PromoteError> {
        if position == 0 {
            return Err(PromoteError::InvalidPosition);
        }
        let current = self.position(key);
        if current <= 0 {
            return Err(PromoteError::AlreadyReady);
        }
        if current as u64 <= position {
            return Ok(None);
        }
        let Some(target) = self.key_at_position(position) else {
            return Ok(None);
        };
        if target >= key {
            return Ok(None);
        }
        let floor = self
            .promoted
            .range(
                Key {
                    number: target.number,
                    sub: 0,
                }..target,
            )
            .next_back()
            .map_or(0, |(before, _)| before.sub);
        let gap = target.sub - floor;
        if gap < 2 {
            return Err(PromoteError::NoOrderingRoom);
        }
        let promoted = Key {
            number: target.number,
            sub: floor + gap / 2,
        };
        // The old place becomes a ghost: everyone behind it keeps their position.
        self.ghosts.insert(key.number, 1);
        self.mark_promoted(key, PromotedState::Ghost);
        self.promoted.insert(promoted, PromotedState::Held);
        self.promoted_counts.insert(promoted.number, 1);
        self.promotions += 1;
        self.consume();
        Ok(Some(promoted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn window_and_positions_follow_the_formulas() {
        let mut line = Line::new(2);
        let keys: Vec<Key> = (0..5).map(|_| line.issue()).collect();
        assert!(line.is_ready(keys[0]) && line.is_ready(keys[1]));
        assert_eq!(line.position(keys[2]), 1);
        assert_eq!(line.position(keys[4]), 3);
        assert_eq!(line.queue_depth(), 3);
        line.retire(keys[3]);
        assert_eq!(line.position(keys[4]), 2);
        assert_eq!(line.queue_depth(), 2);
        line.release();
        assert!(line.is_ready(keys[2]));
        assert_eq!(line.position(keys[4]), 1);
    }

    #[test]
    fn ghosts_at_the_edge_are_consumed_and_never_freeze_the_window() {
        let mut line = Line::new(1);
        let first = line.issue();
        let second = line.issue();
        let third = line.issue();
        assert!(line.is_ready(first));
        line.retire(second);
        assert_eq!(line.ghost_count(), 1);
        line.release(); // first done; ghost 2 reached and consumed
        assert_eq!(line.now_serving(), 2);
        assert_eq!(line.ghost_count(), 0);
        assert!(line.is_ready(third));
    }

    #[test]
    fn passing_ghosts_is_not_reported_as_moving_anyone_forward() {
        let mut line = Line::new(1);
        let _inside = line.issue();
        let abandoned: Vec<Key> = (0..9).map(|_| line.issue()).collect();
        let next = line.issue();
        let behind = line.issue();
        for key in abandoned {
            assert_eq!(
                line.retire(key),
                0,
                "a waiting key leaving frees no window place"
            );
        }
        assert_eq!((line.position(next), line.position(behind)), (1, 2));
        // The edge passes nine ghosts on this release, but positions fall by one.
        assert_eq!(line.release(), 1);
        assert_eq!(line.now_serving(), 10);
        assert!(line.is_ready(next));
        assert_eq!(line.position(behind), 1);
        // A ready key that never comes in frees its place: everyone behind moves up one.
        assert_eq!(line.retire(next), 1);
        assert!(line.is_ready(behind));
    }

    #[test]
    fn set_cap_one_to_two_consumes_ghost_two_and_readies_three() {
        let mut line = Line::new(1);
        let _first = line.issue();
        let second = line.issue();
        let third = line.issue();
        line.retire(second);
        assert!(!line.is_ready(third));
        line.set_cap(2);
        assert_eq!(line.ghost_count(), 0);
        assert_eq!(line.now_serving(), 1);
        assert!(line.is_ready(third));
    }

    #[test]
    fn triple_ghost_ahead_never_yields_non_positive_position() {
        let mut line = Line::new(1);
        let _first = line.issue();
        let ghosts: Vec<Key> = (0..3).map(|_| line.issue()).collect();
        let waiting = line.issue();
        for ghost in ghosts {
            line.retire(ghost);
            assert!(line.position(waiting) >= 1);
        }
        assert_eq!(line.position(waiting), 1);
        assert!(!line.is_ready(waiting));
        line.release();
        assert!(line.is_ready(waiting));
    }

    #[test]
    fn promotion_to_front_creates_no_tie() {
        let mut line = Line::new(1);
        let _inside = line.issue();
        let waiting: Vec<Key> = (0..4).map(|_| line.issue()).collect();
        let vip = line.promote(waiting[3], 1).unwrap().unwrap();
        assert_eq!(line.position(vip), 1);
        assert_eq!(line.position(waiting[0]), 2);
        assert_eq!(line.position(waiting[1]), 3);
        assert_eq!(line.position(waiting[2]), 4);
        // A second promotion to the front goes ahead of the first, still without ties.
        let vip2 = line.promote(waiting[2], 1).unwrap().unwrap();
        assert_eq!(line.position(vip2), 1);
        assert_eq!(line.position(vip), 2);
        assert_eq!(line.position(waiting[0]), 3);
        assert_eq!(line.position(waiting[1]), 4);
        // Exactly one visitor becomes ready per release.
        line.release();
        assert!(line.is_ready(vip2));
        assert!(!line.is_ready(vip));
        assert_eq!(line.issued(), 7);
    }

    #[test]
    fn promotion_noops_and_errors() {
        let mut line = Line::new(1);
        let ready = line.issue();
        let second = line.issue();
        assert_eq!(line.promote(ready, 1), Err(PromoteError::AlreadyReady));
        assert_eq!(line.promote(second, 1), Ok(None));
        assert_eq!(line.promote(second, 0), Err(PromoteError::InvalidPosition));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Arrive,
        Admit(usize),
        Release(usize),
        Retire(usize),
        SetCap(u64),
        Promote(usize, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Arrive),
            3 => any::<usize>().prop_map(Op::Admit),
            3 => any::<usize>().prop_map(Op::Release),
            2 => any::<usize>().prop_map(Op::Retire),
            1 => (1u64..5).prop_map(Op::SetCap),
            1 => (any::<usize>(), 1u64..4).prop_map(|(i, p)| Op::Promote(i, p)),
        ]
    }

    fn pick<T: Copy + Ord>(set: &BTreeSet<T>, index: usize) -> Option<T> {
        if set.is_empty() {
            None
        } else {
            set.iter().nth(index % set.len()).copied()
        }
    }

    proptest! {
        #[test]
        fn random_sequences_keep_the_accounting_and_order(
            cap in 1u64..4,
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let mut line = Line::new(cap);
            let mut held: BTreeSet<Key> = BTreeSet::new();
            let mut in_flight: BTreeSet<Key> = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Arrive => { held.insert(line.issue()); }
                    Op::Admit(i) => {
                        let ready: BTreeSet<Key> =
                            held.iter().copied().filter(|k| line.is_ready(*k)).collect();
                        if let Some(key) = pick(&ready, i) {
                            held.remove(&key);
                            in_flight.insert(key);
                        }
                    }
                    Op::Release(i) => {
                        if let Some(key) = pick(&in_flight, i) {
                            in_flight.remove(&key);
                            line.mark_ended(key);
                            line.release();
                        }
                    }
                    Op::Retire(i) => {
                        if let Some(key) = pick(&held, i) {
                            held.remove(&key);
                            line.retire(key);
                        }
                    }
                    Op::SetCap(c) => { line.set_cap(c); }
                    Op::Promote(i, p) => {
                        let waiting: BTreeSet<Key> =
                            held.iter().copied().filter(|k| !line.is_ready(*k)).collect();
                        if let Some(key) = pick(&waiting, i)
                            && let Ok(Some(new_key)) = line.promote(key, p)
                        {
                            prop_assert_eq!(line.position(new_key), p as i64);
                            held.remove(&key);
                            held.insert(new_key);
                        }
                    }
                }
                prop_assert_eq!(
                    line.issued(),
                    line.now_serving() + line.ghost_count() + held.len() as u64 + in_flight.len() as u64
                );
                // Waiting keys read strictly increasing positions from 1, in key order.
                let mut last = 0i64;
                let mut seen_waiting = false;
                for key in &held {
                    let position = line.position(*key);
                    if line.is_ready(*key) {
                        prop_assert!(!seen_waiting, "a ready key sorts behind a waiting one");
                        prop_assert!(position <= 0);
                    } else {
                        seen_waiting = true;
                        prop_assert!(position >= 1);
                        prop_assert!(position > last, "tie or inversion at {:?}", key);
                        last = position;
                    }
                }
            }
        }
    }
}
