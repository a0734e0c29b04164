//! The serving workers: which one the current thread is, and how many connections each holds,
//! so that a worker clearly busier than another leaves new connections to it (as nginx's
//! workers compare their loads before accepting).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

thread_local! {
    /// The serving worker this thread runs: 0 for the main runtime and any thread that is not
    /// a worker.
    static WORKER_INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The serving worker the current thread runs (see [`serve_workers`]); 0 outside workers.
pub(crate) fn worker_index() -> usize {
    WORKER_INDEX.with(Cell::get)
}

/// Marks the current thread as serving worker `index`.
pub(crate) fn become_worker(index: usize) {
    WORKER_INDEX.set(index);
}

/// Longest a worker steps aside at a time: should the others stop accepting (stalled, or
/// starved of CPU), new connections wait at most this long before it competes for them again.
pub(crate) const SHARE_STEP_ASIDE_LIMIT: Duration = Duration::from_millis(250);
/// Connections a worker may hold beyond the least busy worker before it stops accepting.
const SHARE_SLACK: usize = 2;

/// Open connections per serving worker, the way nginx's workers compare how busy they are before
/// accepting.
pub(crate) struct WorkerLoad {
    open: Box<[AtomicUsize]>,
    /// Woken at every change of a count, so a worker that stepped aside looks again at once.
    /// Looking on a timer instead left every worker asleep at times during a burst of new
    /// connections: each had stepped aside while it held more than the others, and none had
    /// looked again yet. Connections then waited in the kernel for 30 ms and more.
    changed: tokio::sync::Notify,
}

impl WorkerLoad {
    pub(crate) fn new(workers: usize) -> WorkerLoad {
        WorkerLoad {
            open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// Counts a connection on `worker` until the returned value is dropped.
    pub(crate) fn open(self: &Arc<Self>, worker: usize) -> OpenConnection {
        if let Some(count) = self.open.get(worker) {
            count.fetch_add(1, Ordering::Relaxed);
            self.changed.notify_waiters();
        }
        OpenConnection {
            load: self.clone(),
            worker,
        }
    }

    /// Open connections per worker.
    pub(crate) fn counts(&self) -> Vec<usize> {
        self.open
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
            .collect()
    }

    /// Connections open on `worker`; `None` for a worker that does not exist.
    fn open_on(&self, worker: usize) -> Option<usize> {
        self.open
            .get(worker)
            .map(|count| count.load(Ordering::Relaxed))
    }

    /// Whether `worker` holds clearly more connections than the least busy other worker.
    pub(crate) fn over_share(&self, worker: usize) -> bool {
        let Some(mine) = self.open_on(worker) else {
            return false;
        };
        let least_other = self
            .open
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != worker)
            .map(|(_, count)| count.load(Ordering::Relaxed))
            .min();
        least_other.is_some_and(|least| mine > least + SHARE_SLACK)
    }

    /// Returns once `worker` no longer holds more than its share, or at `limit`.
    pub(crate) async fn wait_for_share(&self, worker: usize, limit: tokio::time::Instant) {
        let mut limit = std::pin::pin!(tokio::time::sleep_until(limit));
        loop {
            // Registered before the check, so a change between the two is not missed.
            let mut changed = std::pin::pin!(self.changed.notified());
            changed.as_mut().enable();
            if !self.over_share(worker) {
                return;
            }
            tokio::select! {
                () = changed => {}
                () = &mut limit => return,
            }
        }
    }
}

/// Whether a connection's worker is crowded, so that an HTTP/1 connection falling idle is kept
/// only briefly.
pub(crate) type Crowded = Arc<dyn Fn() -> bool + Send + Sync>;

/// One open connection counted in [`WorkerLoad`].
pub(crate) struct OpenConnection {
    load: Arc<WorkerLoad>,
    worker: usize,
}

impl OpenConnection {
    /// Whether this connection's worker holds more than `crowd` connections.
    pub(crate) fn crowding(&self, crowd: usize) -> Crowded {
        let (load, worker) = (self.load.clone(), self.worker);
        Arc::new(move || load.open_on(worker).is_some_and(|open| open > crowd))
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if let Some(count) = self.load.open.get(self.worker) {
            count.fetch_sub(1, Ordering::Relaxed);
            self.load.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_steps_aside_only_when_clearly_busier_than_another() {
        let load = Arc::new(WorkerLoad::new(3));
        let mut held: Vec<OpenConnection> = (0..2).map(|_| load.open(0)).collect();
        assert!(
            !load.over_share(0),
            "two more than the others is within the slack"
        );
        held.push(load.open(0));
        assert!(load.over_share(0));
        assert!(!load.over_share(1) && !load.over_share(2));
        // One other worker catching up is not enough: the least busy one decides.
        held.push(load.open(1));
        assert!(load.over_share(0));
        held.push(load.open(2));
        assert!(!load.over_share(0));
        assert_eq!(load.counts(), [3, 1, 1]);
        drop(held);
        assert_eq!(load.counts(), [0, 0, 0]);
        // A single worker never steps aside.
        let alone = Arc::new(WorkerLoad::new(1));
        let _many: Vec<OpenConnection> = (0..10).map(|_| alone.open(0)).collect();
        assert!(!alone.over_share(0));
    }

    #[tokio::test]
    async fn a_worker_that_stepped_aside_looks_again_when_another_takes_a_connection() {
        let load = Arc::new(WorkerLoad::new(2));
        let busy: Vec<OpenConnection> = (0..3).map(|_| load.open(0)).collect();
        let far = tokio::time::Instant::now() + Duration::from_secs(60);
        let waiting = tokio::spawn({
            let load = load.clone();
            async move { load.wait_for_share(0, far).await }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "worker 0 holds three more than worker 1"
        );
        let taken = load.open(1);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken by worker 1's new connection, not by the one-minute limit")
            .unwrap();
        drop((busy, taken));
    }

    #[tokio::test]
    async fn a_worker_stops_stepping_aside_at_the_limit() {
        let load = Arc::new(WorkerLoad::new(2));
        let _busy: Vec<OpenConnection> = (0..3).map(|_| load.open(0)).collect();
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        tokio::time::timeout(Duration::from_secs(10), load.wait_for_share(0, soon))
            .await
            .expect("the limit ends the wait");
        assert!(load.over_share(0), "still busier: only the limit let it go");
    }
}
