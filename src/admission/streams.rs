//! The stream guard for `-stream-paths` (WebSocket and server-sent events). There is no protocol
//! sniffing: a stream is whatever matches the list. A listed request needs a valid pass and then
//! one of `-stream-cap` slots, tried without waiting, held for the connection's whole life (the
//! streamed body or the upgraded tunnel).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::respond::Rejection;
use crate::sys::slots::{Gate, Permit};

/// Process-wide stream counters.
#[derive(Debug, Default)]
pub(crate) struct StreamCounters {
    pub served: AtomicU64,
    pub denied: AtomicU64,
    pub throttled: AtomicU64,
}

/// Figures for `/_room/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamStats {
    pub cap: u64,
    pub active: u64,
    pub served_total: u64,
    pub denied_total: u64,
    pub throttled_total: u64,
}

/// The stream semaphore of one generation: shared with the previous generation and resized in
/// place when `-stream-cap` changes, so holders of old slots are covered by its permit debt.
#[derive(Debug)]
pub struct StreamGuard {
    gate: Arc<Gate>,
    counters: Arc<StreamCounters>,
}

impl StreamGuard {
    pub fn build(cap: u32, previous: Option<&StreamGuard>) -> StreamGuard {
        match previous {
            Some(prev) => {
                if prev.gate.capacity() != cap as usize {
                    prev.gate.resize(cap as usize);
                }
                StreamGuard {
                    gate: Arc::clone(&prev.gate),
                    counters: Arc::clone(&prev.counters),
                }
            }
            None => StreamGuard {
                gate: Gate::new(cap as usize),
                counters: Arc::default(),
            },
        }
    }

    /// Counts a request refused for want of a valid pass.
    pub fn deny(&self) -> Rejection {
        self.counters.denied.fetch_add(1, Ordering::Relaxed);
        Rejection::NoPass
    }

    /// Takes a stream slot if one is free now; never waits.
    pub fn enter(&self) -> Result<Permit, Rejection> {
        match self.gate.try_acquire() {
            Some(permit) => {
                self.counters.served.fetch_add(1, Ordering::Relaxed);
                Ok(permit)
            }
            None => {
                self.counters.throttled.fetch_add(1, Ordering::Relaxed);
                Err(Rejection::StreamsFull)
            }
        }
    }

    pub fn stats(&self) -> StreamStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StreamStats {
            cap: self.gate.capacity() as u64,
            active: self.gate.in_use() as u64,
            served_total: load(&self.counters.served),
            denied_total: load(&self.counters.denied),
            throttled_total: load(&self.counters.throttled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_tried_without_waiting_and_counted() {
        let guard = StreamGuard::build(1, None);
        let held = guard.enter().unwrap();
        assert_eq!(guard.enter().unwrap_err(), Rejection::StreamsFull);
        assert_eq!(guard.deny(), Rejection::NoPass);
        assert_eq!(
            guard.stats(),
            StreamStats {
                cap: 1,
                active: 1,
                served_total: 1,
                denied_total: 1,
                throttled_total: 1,
            }
        );
        drop(held);
        assert_eq!(guard.stats().active, 0);
        assert!(guard.enter().is_ok());
    }

    #[test]
    fn a_smaller_cap_is_not_exceeded_once_old_holders_leave() {
        let first = StreamGuard::build(3, None);
        let held: Vec<_> = (0..3).map(|_| first.enter().unwrap()).collect();
        let next = StreamGuard::build(1, Some(&first));
        assert!(next.enter().is_err());
        drop(held);
        let one = next.enter().unwrap();
        assert!(next.enter().is_err());
        drop(one);
        assert_eq!(next.stats().served_total, 4);
    }
}
