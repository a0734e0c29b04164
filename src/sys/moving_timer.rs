//! One timer kept for many successive deadlines.
//!
//! Registering a tokio timer and removing it again costs a trip through the timer wheel each
//! way; on a connection that waits under a deadline once per request (a client connection for
//! its next request, an origin connection for its answer) that was a few percent of a proxied
//! page. Moving an armed timer to a later instant only updates the instant: the wheel keeps the
//! old slot and re-files the timer when that slot comes due. Deadlines on one connection
//! nearly always move forward, so a busy connection re-files its timer about once per limit
//! period instead of twice per request.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use tokio::time::{Instant, Sleep};

/// A timer created on first use and moved to each new deadline.
#[derive(Debug, Default)]
pub(crate) struct MovingTimer {
    /// The timer and the instant it is set for.
    armed: Option<(Pin<Box<Sleep>>, Instant)>,
}

impl MovingTimer {
    /// Whether `deadline` has passed; if not, the timer is set for it and the task is woken
    /// when it passes (or, after a later call moved the timer, possibly once for nothing).
    pub(crate) fn poll_passed(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        let timer = match &mut self.armed {
            Some((timer, armed_for)) => {
                if *armed_for != deadline {
                    timer.as_mut().reset(deadline);
                    *armed_for = deadline;
                }
                timer
            }
            None => {
                let timer = Box::pin(tokio::time::sleep_until(deadline));
                &mut self.armed.insert((timer, deadline)).0
            }
        };
        timer.as_mut().poll(cx).is_ready()
    }

    /// Lets go of the task the timer would wake, keeping the timer: an origin connection passes
    /// from task to task through the pool, and its timer must neither keep the last task's
    /// memory alive nor wake that task for nothing later.
    pub(crate) fn disown(&mut self) {
        if let Some((timer, _)) = &mut self.armed {
            let _ = timer
                .as_mut()
                .poll(&mut Context::from_waker(std::task::Waker::noop()));
        }
    }

    /// Drops the timer, for a connection that has no deadline any more.
    pub(crate) fn clear(&mut self) {
        self.armed = None;
    }

    /// Which timer is armed (its address, to tell one timer from another) and the instant the
    /// timer itself is set for.
    #[cfg(test)]
    pub(crate) fn armed(&self) -> Option<(*const Sleep, Instant)> {
        let (timer, _) = self.armed.as_ref()?;
        Some((&**timer as *const Sleep, timer.deadline()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    fn passed(timer: &mut MovingTimer, deadline: Instant) -> bool {
        let waker = futures_util::task::noop_waker();
        timer.poll_passed(deadline, &mut Context::from_waker(&waker))
    }

    #[tokio::test(start_paused = true)]
    async fn each_deadline_holds_whatever_the_timer_was_set_for_before() {
        let mut timer = MovingTimer::default();
        let start = Instant::now();
        assert!(!passed(&mut timer, start + Duration::from_secs(1)));
        // Moved later before the first deadline came: the first instant no longer counts.
        assert!(!passed(&mut timer, start + Duration::from_secs(3)));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!passed(&mut timer, start + Duration::from_secs(3)));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(passed(&mut timer, start + Duration::from_secs(3)));
        // After firing, a new later deadline arms it again rather than reading as passed.
        assert!(!passed(&mut timer, start + Duration::from_secs(10)));
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(!passed(&mut timer, start + Duration::from_secs(10)));
        // Moved earlier: the earlier instant is the one that counts.
        assert!(!passed(
            &mut timer,
            start + Duration::from_secs(9) + Duration::from_millis(500)
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(passed(
            &mut timer,
            start + Duration::from_secs(9) + Duration::from_millis(500)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_disowned_timer_neither_holds_nor_wakes_its_last_task() {
        struct CountedWakes(AtomicUsize);
        impl std::task::Wake for CountedWakes {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let task = Arc::new(CountedWakes(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(Arc::clone(&task));
        let mut timer = MovingTimer::default();
        let deadline = Instant::now() + Duration::from_secs(1);
        assert!(!timer.poll_passed(deadline, &mut Context::from_waker(&waker)));
        drop(waker);
        assert_eq!(
            Arc::strong_count(&task),
            2,
            "the armed timer holds the task"
        );
        timer.disown();
        assert_eq!(Arc::strong_count(&task), 1, "let go");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "not woken");
        assert!(passed(&mut timer, deadline), "still a timer");
    }

    #[tokio::test(start_paused = true)]
    async fn a_moved_timer_wakes_its_task_at_the_new_deadline() {
        let mut timer = MovingTimer::default();
        let start = Instant::now();
        let first = start + Duration::from_secs(1);
        let second = start + Duration::from_secs(5);
        assert!(!passed(&mut timer, first));
        std::future::poll_fn(|cx| {
            if timer.poll_passed(second, cx) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        assert!(Instant::now() >= second);
        assert!(Instant::now() < second + Duration::from_millis(10));
    }
}
