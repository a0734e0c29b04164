//! Counted multiset of ticket numbers with order statistics: the ghost ledger.
//!
//! A Fenwick tree over a sliding window of ticket numbers answers "how many entries below `t`",
//! "smallest entry" and "k-th entry" in O(log n) with O(log n) inserts and removals. The window is
//! rebuilt (amortised O(1) per operation) when an entry falls outside it, and shrunk when the live
//! span becomes much smaller than the storage, so memory follows the span of the line rather than
//! the history of the room.

/// Smallest window worth allocating.
const MIN_WINDOW: usize = 64;

/// Multiset of `u64` numbers (duplicates allowed) with O(log n) rank queries.
#[derive(Debug, Default, Clone)]
pub(crate) struct CountTree {
    /// Number stored at window slot 0.
    base: u64,
    /// Fenwick array, 1-indexed; `tree.len() - 1` is the window size (0 = no storage).
    tree: Vec<u32>,
    total: u64,
}

impl CountTree {
    pub(crate) fn new() -> CountTree {
        CountTree::default()
    }

    /// Number of entries (with multiplicity).
    pub(crate) fn len(&self) -> u64 {
        self.total
    }

    /// Window slots allocated; tests use it to check that storage shrinks.
    #[cfg(test)]
    pub(crate) fn storage(&self) -> usize {
        self.tree.len()
    }

    fn window(&self) -> usize {
        self.tree.len().saturating_sub(1)
    }

    fn slot(&self, number: u64) -> Option<usize> {
        let offset = number.checked_sub(self.base)?;
        let offset = usize::try_from(offset).ok()?;
        (offset < self.window()).then_some(offset + 1)
    }

    fn add(&mut self, mut index: usize, delta: u32) {
        while index < self.tree.len() {
            self.tree[index] += delta;
            index += index & index.wrapping_neg();
        }
    }

    fn subtract(&mut self, mut index: usize, delta: u32) {
        while index < self.tree.len() {
            self.tree[index] -= delta;
            index += index & index.wrapping_neg();
        }
    }

    /// Sum of slots 1..=index.
    fn prefix(&self, index: usize) -> u64 {
        let mut index = index.min(self.window());
        let mut sum = 0u64;
        while index > 0 {
            sum += u64::from(self.tree[index]);
            index &= index - 1;
        }
        sum
    }

    /// Adds `count` copies of `number`.
    pub(crate) fn insert(&mut self, number: u64, count: u32) {
        if count == 0 {
            return;
        }
        if self.slot(number).is_none() {
            let (low, high) = match (self.min(), self.max()) {
                (Some(low), Some(high)) => (low.min(number), high.max(number)),
                _ => (number, number),
            };
            self.rebuild(low, high);
        }
        if let Some(index) = self.slot(number) {
            self.add(index, count);
            self.total += u64::from(count);
        }
    }

    /// Removes up to `count` copies of `number`; returns how many were removed.
    pub(crate) fn remove(&mut self, number: u64, count: u32) -> u32 {
        let present = self.count_at(number);
        let removed = present.min(count);
        if removed > 0
            && let Some(index) = self.slot(number)
        {
            self.subtract(index, removed);
            self.total -= u64::from(removed);
            self.maybe_shrink();
        }
        removed
    }

    /// Entries strictly below `number`.
    pub(crate) fn count_below(&self, number: u64) -> u64 {
        if self.total == 0 || number <= self.base {
            return 0;
        }
        let offset = number - self.base;
        match usize::try_from(offset) {
            Ok(offset) if offset < self.window() => self.prefix(offset),
            _ => self.total,
        }
    }

    /// Entries at or below `number`.
    pub(crate) fn count_upto(&self, number: u64) -> u64 {
        match number.checked_add(1) {
            Some(next) => self.count_below(next),
            None => self.total,
        }
    }

    /// Copies of exactly `number`.
    pub(crate) fn count_at(&self, number: u64) -> u32 {
        // Difference of two prefixes; values per slot are small, so this never truncates.
        (self.count_upto(number) - self.count_below(number)) as u32
    }

    /// The `k`-th smallest entry, 1-based.
    pub(crate) fn kth(&self, k: u64) -> Option<u64> {
        if k == 0 || k > self.total {
            return None;
        }
        let window = self.window();
        let mut step = if window == 0 {
            0
        } else {
            1usize << (usize::BITS - 1 - window.leading_zeros())
        };
        let mut index = 0usize;
        let mut remaining = k;
        while step > 0 {
            let next = index + step;
            if next <= window && u64::from(self.tree[next]) < remaining {
                index = next;
                remaining -= u64::from(self.tree[next]);
            }
            step >>= 1;
        }
        // `index` slots hold fewer than k entries, so the k-th sits in slot index+1.
        Some(self.base + index as u64)
    }

    pub(crate) fn min(&self) -> Option<u64> {
        self.kth(1)
    }

    pub(crate) fn max(&self) -> Option<u64> {
        self.kth(self.total)
    }

    /// Removes every entry at or below `limit`; returns how many went.
    #[cfg(test)]
    pub(crate) fn consume_upto(&mut self, limit: u64) -> u64 {
        let mut consumed = 0u64;
        while let Some(lowest) = self.min() {
            if lowest > limit {
                break;
            }
            let count = self.count_at(lowest);
            consumed += u64::from(self.remove(lowest, count));
        }
        consumed
    }

    /// Inserts a batch (e.g. one reaper pass) in one go; sorted input keeps rebuilds to at most one.
    #[cfg(test)]
    pub(crate) fn insert_sorted(&mut self, numbers: &[u64]) {
        if let (Some(&first), Some(&last)) = (numbers.first(), numbers.last())
            && (self.slot(first).is_none() || self.slot(last).is_none())
        {
            let low = self.min().map_or(first, |m| m.min(first));
            let high = self.max().map_or(last, |m| m.max(last));
            self.rebuild(low, high);
        }
        for &number in numbers {
            self.insert(number, 1);
        }
    }

    /// Point values of the window, in order (undoes the Fenwick sums in O(window)).
    fn values(&self) -> Vec<(u64, u32)> {
        let mut plain = self.tree.clone();
        let window = self.window();
        for index in (1..=window).rev() {
            let parent = index + (index & index.wrapping_neg());
            if parent <= window {
                plain[parent] -= plain[index];
            }
        }
        plain
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, count)| **count > 0)
            .map(|(index, count)| (self.base + index as u64 - 1, *count))
            .collect()
    }

    /// Re-allocates the window to cover `[low, high]` with room to grow upward.
    fn rebuild(&mut self, low: u64, high: u64) {
        let entries = self.values();
        let span =
            usize::try_from(high.saturating_sub(low).saturating_add(1)).unwrap_or(usize::MAX);
        let window = span
            .saturating_mul(2)
            .max(MIN_WINDOW)
            .checked_next_power_of_two()
            .unwrap_or(span);
        let mut tree = vec![0u32; window + 1];
        for (number, count) in entries {
            tree[(number - low) as usize + 1] += count;
        }
        // Linear-time Fenwick construction from point values.
        for index in 1..=window {
            let parent = index + (index & index.wrapping_neg());
            if parent <= window {
                tree[parent] += tree[index];
            }
        }
        self.base = low;
        self.tree = tree;
    }

    fn maybe_shrink(&mut self) {
        if self.total == 0 {
            self.tree = Vec::new();
            self.base = 0;
            return;
        }
        if self.window() <= MIN_WINDOW {
            return;
        }
        if let (Some(low), Some(high)) = (self.min(), self.max()) {
            let span = high - low + 1;
            if span.saturating_mul(8) < self.window() as u64 {
                self.rebuild(low, high);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ledger_5_3_9_3_answers_min_below_and_consume() {
        let mut ledger = CountTree::new();
        for n in [5, 3, 9, 3] {
            ledger.insert(n, 1);
        }
        assert_eq!(ledger.min(), Some(3));
        assert_eq!(ledger.count_below(4), 2);
        assert_eq!(ledger.consume_upto(3), 2);
        assert_eq!(ledger.len(), 2);
        assert_eq!(ledger.min(), Some(5));
        assert_eq!(ledger.max(), Some(9));
    }

    #[test]
    fn sorted_batch_merge_equals_single_inserts() {
        let mut batch = CountTree::new();
        batch.insert(50, 1);
        batch.insert_sorted(&[10, 20, 20, 400]);
        let mut single = CountTree::new();
        for n in [50, 10, 20, 20, 400] {
            single.insert(n, 1);
        }
        for probe in [0, 10, 11, 20, 21, 50, 51, 400, 401] {
            assert_eq!(batch.count_below(probe), single.count_below(probe));
        }
        assert_eq!(batch.kth(3), Some(20));
        assert_eq!(batch.kth(4), Some(50));
    }

    #[test]
    fn storage_shrinks_after_bulk_consume() {
        let mut ledger = CountTree::new();
        for n in 1_000..6_000 {
            ledger.insert(n, 1);
        }
        let big = ledger.storage();
        assert!(big >= 5_000);
        ledger.consume_upto(5_990);
        assert_eq!(ledger.len(), 9);
        assert!(ledger.storage() < big / 8, "storage {}", ledger.storage());
        ledger.consume_upto(u64::MAX);
        assert_eq!(ledger.storage(), 0);
        assert_eq!(ledger.min(), None);
    }

    #[test]
    fn window_slides_down_and_up() {
        let mut ledger = CountTree::new();
        ledger.insert(1_000_000, 1);
        ledger.insert(5, 1);
        ledger.insert(2_000_000, 2);
        assert_eq!(ledger.min(), Some(5));
        assert_eq!(ledger.count_below(2_000_000), 2);
        assert_eq!(ledger.count_at(2_000_000), 2);
        assert_eq!(ledger.remove(2_000_000, 5), 2);
        assert_eq!(ledger.max(), Some(1_000_000));
    }

    proptest! {
        #[test]
        fn matches_a_sorted_vector(ops in proptest::collection::vec((0u8..3, 0u64..300), 1..200)) {
            let mut tree = CountTree::new();
            let mut model: Vec<u64> = Vec::new();
            for (op, number) in ops {
                match op {
                    0 | 1 => { tree.insert(number, 1); model.push(number); model.sort_unstable(); }
                    _ => {
                        let removed = tree.remove(number, 1);
                        let position = model.iter().position(|&m| m == number);
                        prop_assert_eq!(removed == 1, position.is_some());
                        if let Some(position) = position { model.remove(position); }
                    }
                }
                prop_assert_eq!(tree.len(), model.len() as u64);
                prop_assert_eq!(tree.min(), model.first().copied());
                prop_assert_eq!(tree.max(), model.last().copied());
                let below = model.iter().filter(|&&m| m < number).count() as u64;
                prop_assert_eq!(tree.count_below(number), below);
            }
        }
    }
}
