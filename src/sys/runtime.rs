//! The event loop each serving worker runs.
//!
//! A worker is one thread with a current-thread tokio runtime: I/O and timers, no work
//! stealing, no hand-offs between threads. Nothing is added to when it waits for events.
//!
//! Workers once offered their core (`sched_yield`) after 400 µs without sleeping, so that two
//! workers the scheduler had put on one core would not hold it for a whole timer tick each.
//! Measured with the proxy and the origin sharing a core (as deployed, `make bench-compare`),
//! the Linux scheduler (EEVDF) pushes a thread's deadline back by a whole slice when it yields,
//! so the origin then preempted the worker at every request it was handed: context switches
//! per request rose from 0.29 to 0.39 with one worker and from 0.22 to 0.46 with two, and two
//! workers served fewer requests with a higher p99 than without the yield. The scheduler
//! already shares the core between runnable threads without it.

/// A current-thread runtime for a serving worker, with I/O and timers enabled.
pub fn worker_runtime() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_runtime_runs_timers_and_tasks() {
        let runtime = worker_runtime().build().expect("runtime");
        let answer = runtime.block_on(async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            tokio::task::spawn(async { 42 }).await
        });
        assert_eq!(answer.ok(), Some(42));
    }
}
