//! The send limit for one HTTP/2 stream whose answer the client holds back with flow control.
//!
//! Over HTTP/1 a client holds an answer back by leaving the socket unread, and the connection's
//! blocked write fails once the send limit passes (see [`crate::server::deadline`]). Over HTTP/2 it
//! simply never reopens the stream's window: hyper then stops asking the body for more, the
//! connection keeps moving (pings, other streams), and no write ever blocks. Each stream is its
//! own task, spawned through the connection's executor, so [`StreamExecutor`] wraps each one in
//! [`SendLimited`], which drops the stream once its answer has waited on the client for the send
//! limit. Dropping it resets that stream alone (`RST_STREAM` with `CANCEL`, as nginx does for a
//! stream that times out) and drops its answer, which gives back the slot the answer held and
//! abandons the origin request; the connection and its other streams carry on.
//!
//! The answer's body marks when hyper was handed part of it (or its head) and has not asked for
//! more ([`SendStamp`]). hyper, not Concert, puts the body into the stream's task, so the body
//! finds the stamp through a task-local the wrapper sets while it polls the stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::futures::TaskLocalFuture;
use tokio::time::Instant;

use crate::sys::moving_timer::MovingTimer;

tokio::task_local! {
    /// The stamp of the HTTP/2 stream whose task is running.
    static CURRENT_STREAM: Arc<SendStamp>;
}

/// When an HTTP/2 answer last had something for the client that hyper has not taken.
#[derive(Debug)]
pub(crate) struct SendStamp {
    since: Instant,
    /// Milliseconds after `since`, plus one; zero while hyper is not waiting on the client
    /// (asking the body for more, or done with it).
    waiting_from_ms: AtomicU64,
}

impl SendStamp {
    fn new() -> Self {
        SendStamp {
            since: Instant::now(),
            waiting_from_ms: AtomicU64::new(0),
        }
    }

    /// The stamp of the HTTP/2 stream being answered, when called from within its task;
    /// `None` elsewhere (HTTP/1 exchanges run in their connection's task).
    pub(crate) fn of_current_stream() -> Option<Arc<SendStamp>> {
        CURRENT_STREAM.try_with(Arc::clone).ok()
    }

    /// The answer has something for hyper (its head, or a frame with more to follow): until
    /// hyper asks for more, the client's flow control may be what holds it.
    pub(crate) fn awaiting_client(&self) {
        let elapsed = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.waiting_from_ms.store(elapsed + 1, Ordering::Relaxed);
    }

    /// hyper asks for more of the answer, or is done with it: it is not waiting on the client.
    pub(crate) fn not_awaiting_client(&self) {
        self.waiting_from_ms.store(0, Ordering::Relaxed);
    }

    /// Since when the answer has waited on the client, if it does.
    fn waiting_since(&self) -> Option<Instant> {
        match self.waiting_from_ms.load(Ordering::Relaxed) {
            0 => None,
            stamp => Some(self.since + Duration::from_millis(stamp - 1)),
        }
    }
}

/// Spawns the tasks of a client connection's HTTP/2 streams on the worker's runtime, each with
/// the send limit applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamExecutor {
    pub(crate) send_limit: Duration,
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        tokio::spawn(SendLimited::new(stream, self.send_limit));
    }
}

pin_project_lite::pin_project! {
    /// An HTTP/2 stream's task, ended early once its answer has waited on the client for the
    /// send limit.
    pub(crate) struct SendLimited<F: Future> {
        #[pin]
        stream: TaskLocalFuture<Arc<SendStamp>, F>,
        stamp: Arc<SendStamp>,
        send_limit: Duration,
        // Made the first time the answer waits on the client, then moved with the stamp.
        timer: MovingTimer,
    }
}

impl<F: Future> SendLimited<F> {
    pub(crate) fn new(stream: F, send_limit: Duration) -> Self {
        let stamp = Arc::new(SendStamp::new());
        SendLimited {
            stream: CURRENT_STREAM.scope(Arc::clone(&stamp), stream),
            stamp,
            send_limit,
            timer: MovingTimer::default(),
        }
    }
}

impl<F: Future<Output = ()>> Future for SendLimited<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if this.stream.poll(cx).is_ready() {
            return Poll::Ready(());
        }
        // hyper has just polled the stream as far as it goes: if it is left waiting on the
        // client, the stamp says since when.
        let Some(since) = this.stamp.waiting_since() else {
            return Poll::Pending;
        };
        if this.timer.poll_passed(since + *this.send_limit, cx) {
            tracing::debug!(
                limit = ?this.send_limit,
                "the client took nothing of an HTTP/2 answer within the send timeout; resetting its stream"
            );
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    const SEND: Duration = Duration::from_secs(60);

    /// Sets its flag when dropped: the stream's task, with everything it holds, is gone.
    struct DropFlag(Arc<AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// What the test tells the stream's task to do next, as hyper and the body would.
    enum Step {
        /// The body handed hyper a frame with more to follow.
        FrameTaken,
        /// hyper asked the body for more, and the origin has nothing yet.
        BodyAsked,
        /// The answer is complete.
        Finish,
    }

    /// A stream task driven by `steps`, spawned as hyper would; the flag says whether its task
    /// has been dropped.
    fn spawn_stream(
        send_limit: Duration,
    ) -> (
        tokio::sync::mpsc::UnboundedSender<Step>,
        Arc<AtomicBool>,
        tokio::task::JoinHandle<()>,
    ) {
        let (steps, mut next) = tokio::sync::mpsc::unbounded_channel();
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(Arc::clone(&dropped));
        let stream = async move {
            let _flag = flag;
            // The answer's head is handed over as the task starts.
            let stamp = SendStamp::of_current_stream().expect("runs as a stream's task");
            stamp.awaiting_client();
            while let Some(step) = next.recv().await {
                match step {
                    Step::FrameTaken => stamp.awaiting_client(),
                    Step::BodyAsked => stamp.not_awaiting_client(),
                    Step::Finish => return,
                }
            }
            std::future::pending::<()>().await;
        };
        let task = tokio::spawn(SendLimited::new(stream, send_limit));
        (steps, dropped, task)
    }

    /// Waits for `task` to end, for at most ten send limits (a paused clock with nothing
    /// else to wake would otherwise wait for ever); says after how long.
    async fn ended_after(task: tokio::task::JoinHandle<()>) -> Duration {
        let started = Instant::now();
        tokio::time::timeout(SEND * 10, task)
            .await
            .expect("the stream's task ended within ten send limits")
            .unwrap();
        started.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_the_client_never_lets_through_ends_its_stream_at_the_send_limit() {
        let (_steps, dropped, task) = spawn_stream(SEND);
        assert_eq!(ended_after(task).await, SEND);
        assert!(dropped.load(Ordering::Relaxed), "the stream was dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_counts_from_the_last_frame_hyper_took() {
        let (steps, _dropped, task) = spawn_stream(SEND);
        tokio::time::sleep(SEND - Duration::from_secs(1)).await;
        steps.send(Step::BodyAsked).unwrap();
        steps.send(Step::FrameTaken).unwrap();
        let last_taken = Instant::now();
        ended_after(task).await;
        assert_eq!(last_taken.elapsed(), SEND);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_waiting_on_its_origin_keeps_its_stream() {
        let (steps, dropped, task) = spawn_stream(SEND);
        steps.send(Step::BodyAsked).unwrap();
        tokio::time::sleep(SEND * 5).await;
        assert!(!task.is_finished(), "ended while the origin was slow");
        assert!(!dropped.load(Ordering::Relaxed));
        // The origin sends again and the client takes nothing more: the limit runs from here.
        steps.send(Step::FrameTaken).unwrap();
        let sent = Instant::now();
        ended_after(task).await;
        assert_eq!(sent.elapsed(), SEND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_answer_ends_its_task_at_once() {
        let (steps, dropped, task) = spawn_stream(SEND);
        steps.send(Step::Finish).unwrap();
        assert_eq!(ended_after(task).await, Duration::ZERO);
        assert!(dropped.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn outside_a_stream_task_there_is_no_stamp() {
        assert!(SendStamp::of_current_stream().is_none());
        let inside = SendLimited::new(
            async { assert!(SendStamp::of_current_stream().is_some()) },
            SEND,
        );
        tokio::spawn(inside).await.unwrap();
    }
}
