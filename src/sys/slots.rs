//! Slots: the counting semaphore behind page, asset and stream slots, and the hold an answer
//! keeps until it has been delivered.
//!
//! `Gate` wraps a tokio semaphore and adds *permit debt*: shrinking the capacity below the number of
//! slots currently held does not hand the surplus back to newcomers. Every later release first pays
//! the debt (its slot simply disappears) and only then frees a slot, so once the old holders are gone
//! at most the new capacity is ever in use. It also keeps a smoothed utilization figure for stats.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Semaphore;

/// Whatever keeps a page, asset or stream slot busy for the life of an answer; dropping it
/// releases the slot.
pub(crate) type SlotHold = Box<dyn std::any::Any + Send + Sync>;

/// Weight of the newest sample in the utilization average.
const UTILIZATION_ALPHA: f64 = 0.1;

/// A resizable counting semaphore with permit debt and an EWMA of utilization.
#[derive(Debug)]
pub struct Gate {
    /// Free slots. Permits taken from it are forgotten at once; `Permit` gives them back by hand so
    /// that a release can pay debt instead.
    free: Semaphore,
    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    capacity: usize,
    in_use: usize,
    /// Slots that must vanish on release before any release frees a slot again.
    debt: usize,
    utilization: f64,
}

impl GateState {
    fn sample_utilization(&mut self) {
        let load = if self.capacity == 0 {
            1.0
        } else {
            self.in_use as f64 / self.capacity as f64
        };
        self.utilization = UTILIZATION_ALPHA * load + (1.0 - UTILIZATION_ALPHA) * self.utilization;
    }
}

/// One held slot; dropping it releases the slot (or pays one unit of debt).
#[derive(Debug)]
#[must_use = "the slot is released as soon as the permit is dropped"]
pub struct Permit {
    gate: Arc<Gate>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.release();
    }
}

impl Permit {
    /// The gate this permit belongs to.
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }
}

impl Gate {
    /// A gate with `capacity` slots (clamped to the semaphore's maximum).
    pub fn new(capacity: usize) -> Arc<Gate> {
        let capacity = capacity.min(Semaphore::MAX_PERMITS);
        Arc::new(Gate {
            free: Semaphore::new(capacity),
            state: Mutex::new(GateState {
                capacity,
                in_use: 0,
                debt: 0,
                utilization: 0.0,
            }),
        })
    }

    /// Takes a slot if one is free right now.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        let permit = self.free.try_acquire().ok()?;
        permit.forget();
        Some(self.record_acquired())
    }

    /// Waits for a slot. Dropping the future before it completes takes nothing.
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        loop {
            match self.free.acquire().await {
                Ok(permit) => {
                    // No await between winning the permit and recording it: cancel-safe.
                    permit.forget();
                    return self.record_acquired();
                }
                // The semaphore is never closed; if it were, nobody could ever be admitted.
                Err(_) => std::future::pending::<()>().await,
            }
        }
    }

    fn record_acquired(self: &Arc<Self>) -> Permit {
        self.state.lock().in_use += 1;
        Permit {
            gate: Arc::clone(self),
        }
    }

    fn release(&self) {
        let mut state = self.state.lock();
        state.in_use = state.in_use.saturating_sub(1);
        if state.debt > 0 {
            state.debt -= 1;
        } else {
            self.free.add_permits(1);
        }
        state.sample_utilization();
    }

    /// Changes the capacity. Growing frees slots at once (after paying any debt); shrinking removes
    /// free slots and records the rest as debt paid by future releases.
    pub fn resize(&self, capacity: usize) {
        let capacity = capacity.min(Semaphore::MAX_PERMITS);
        let mut state = self.state.lock();
        if capacity > state.capacity {
            let mut grow = capacity - state.capacity;
            let paid = grow.min(state.debt);
            state.debt -= paid;
            grow -= paid;
            if grow > 0 {
                self.free.add_permits(grow);
            }
        } else if capacity < state.capacity {
            let shrink = state.capacity - capacity;
            let removed = self.free.forget_permits(shrink);
            state.debt += shrink - removed;
        }
        state.capacity = capacity;
        state.sample_utilization();
    }

    /// Adds one slot and hands it to the caller in the same step, so no one else can take it:
    /// a visitor called from the shared line comes in on a slot the cluster leased for them
    /// alone. Free slots and any debt are left as they were; dropping the permit releases it
    /// as any other (paying debt first).
    pub fn grow_one(self: &Arc<Self>) -> Permit {
        let mut state = self.state.lock();
        state.capacity = (state.capacity + 1).min(Semaphore::MAX_PERMITS);
        state.in_use += 1;
        state.sample_utilization();
        drop(state);
        Permit {
            gate: Arc::clone(self),
        }
    }

    /// Takes up to `most` free slots out of the capacity in one step (held slots are never
    /// touched, and no debt is made); returns how many went. Slots given back to a shared pool
    /// must first leave the gate this way, or a newcomer could take one meanwhile.
    pub fn shed_idle(&self, most: usize) -> usize {
        let mut state = self.state.lock();
        let removed = self.free.forget_permits(most);
        state.capacity -= removed.min(state.capacity);
        state.sample_utilization();
        removed
    }

    /// Adds `count` slots to the capacity (paying any debt first), as a change relative to
    /// whatever the capacity is now.
    pub fn add(&self, count: usize) {
        let mut state = self.state.lock();
        let count = count.min(Semaphore::MAX_PERMITS - state.capacity);
        let paid = count.min(state.debt);
        state.debt -= paid;
        if count > paid {
            self.free.add_permits(count - paid);
        }
        state.capacity += count;
        state.sample_utilization();
    }

    /// Slots currently held (may exceed the capacity right after a shrink).
    pub fn in_use(&self) -> usize {
        self.state.lock().in_use
    }

    /// Configured number of slots.
    pub fn capacity(&self) -> usize {
        self.state.lock().capacity
    }

    /// Slots immediately available to a newcomer.
    pub fn available(&self) -> usize {
        self.free.available_permits()
    }

    /// Smoothed `in_use / capacity`, updated on every release and resize.
    pub fn utilization(&self) -> f64 {
        self.state.lock().utilization
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn try_acquire_stops_at_capacity_and_release_frees() {
        let gate = Gate::new(2);
        let a = gate.try_acquire().unwrap();
        let _b = gate.try_acquire().unwrap();
        assert!(gate.try_acquire().is_none());
        assert_eq!(gate.in_use(), 2);
        drop(a);
        assert_eq!(gate.in_use(), 1);
        assert!(gate.try_acquire().is_some());
    }

    #[test]
    fn shrink_below_holders_never_over_admits_after_they_leave() {
        let gate = Gate::new(4);
        let holders: Vec<_> = (0..4).map(|_| gate.try_acquire().unwrap()).collect();
        gate.resize(1);
        assert!(gate.try_acquire().is_none());
        drop(holders);
        assert_eq!(gate.in_use(), 0);
        let one = gate.try_acquire().unwrap();
        assert!(
            gate.try_acquire().is_none(),
            "only the new capacity may be in use"
        );
        drop(one);
        assert_eq!(gate.available(), 1);
    }

    #[test]
    fn partial_release_after_shrink_keeps_in_use_within_new_cap() {
        let gate = Gate::new(4);
        let mut holders: Vec<_> = (0..4).map(|_| gate.try_acquire().unwrap()).collect();
        gate.resize(2);
        holders.pop();
        assert!(gate.try_acquire().is_none(), "3 held > cap 2");
        holders.pop();
        assert!(gate.try_acquire().is_none(), "2 held = cap 2");
        holders.pop();
        let extra = gate.try_acquire().unwrap();
        assert_eq!(gate.in_use(), 2);
        assert!(gate.try_acquire().is_none());
        drop(extra);
        drop(holders);
    }

    #[test]
    fn growing_pays_debt_before_adding_slots() {
        let gate = Gate::new(4);
        let holders: Vec<_> = (0..4).map(|_| gate.try_acquire().unwrap()).collect();
        gate.resize(1); // debt 3
        gate.resize(3); // pays 2 of the debt, nothing free yet
        assert!(gate.try_acquire().is_none());
        drop(holders);
        assert_eq!(gate.available(), 3);
        assert_eq!(gate.capacity(), 3);
    }

    #[test]
    fn growing_frees_slots_immediately() {
        let gate = Gate::new(1);
        let _a = gate.try_acquire().unwrap();
        gate.resize(2);
        assert!(gate.try_acquire().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_waits_for_release() {
        let gate = Gate::new(1);
        let held = gate.try_acquire().unwrap();
        let waiter = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        drop(held);
        let permit = waiter.await.unwrap();
        assert_eq!(gate.in_use(), 1);
        drop(permit);
        assert_eq!(gate.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_acquire_leaks_nothing() {
        let gate = Gate::new(1);
        let held = gate.try_acquire().unwrap();
        let attempt = tokio::time::timeout(Duration::from_millis(50), gate.acquire()).await;
        assert!(attempt.is_err());
        drop(held);
        assert_eq!(gate.in_use(), 0);
        assert_eq!(gate.available(), 1);
    }

    #[test]
    fn grow_one_hands_its_slot_to_the_caller_alone() {
        let gate = Gate::new(1);
        let held = gate.try_acquire().unwrap();
        let grown = gate.grow_one();
        assert_eq!((gate.capacity(), gate.in_use()), (2, 2));
        assert!(
            gate.try_acquire().is_none(),
            "the new slot is already taken"
        );
        drop(grown);
        assert_eq!(gate.available(), 1);
        drop(held);
        assert_eq!((gate.available(), gate.in_use()), (2, 0));
        // With debt outstanding the grown slot pays it on release instead of freeing a slot.
        let holders: Vec<_> = (0..2).map(|_| gate.try_acquire().unwrap()).collect();
        gate.resize(1);
        let grown = gate.grow_one();
        assert_eq!(gate.capacity(), 2);
        drop(grown);
        assert!(gate.try_acquire().is_none(), "debt paid, 2 held of 2");
        drop(holders);
        assert_eq!(gate.available(), 2);
    }

    #[test]
    fn shed_idle_takes_only_free_slots_and_add_gives_them_back() {
        let gate = Gate::new(3);
        let held = gate.try_acquire().unwrap();
        assert_eq!(gate.shed_idle(usize::MAX), 2);
        assert_eq!((gate.capacity(), gate.available()), (1, 0));
        drop(held);
        assert_eq!(gate.available(), 1);
        gate.add(2);
        assert_eq!((gate.capacity(), gate.available()), (3, 3));
        // Debt is paid before any slot is freed.
        let holders: Vec<_> = (0..3).map(|_| gate.try_acquire().unwrap()).collect();
        gate.resize(1);
        gate.add(1);
        assert_eq!(gate.capacity(), 2);
        drop(holders);
        assert_eq!(gate.available(), 2);
    }

    #[test]
    fn utilization_is_smoothed_on_release() {
        let gate = Gate::new(1);
        let a = gate.try_acquire().unwrap();
        assert_eq!(gate.utilization(), 0.0);
        gate.resize(1); // sample at full load: 0.1
        assert!((gate.utilization() - 0.1).abs() < 1e-9);
        drop(a); // sample at zero load: 0.09
        assert!((gate.utilization() - 0.09).abs() < 1e-9);
    }
}
