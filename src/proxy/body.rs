//! The bodies on the proxy's general path: the origin's response body, which keeps the slot busy
//! until it has been delivered, and the client's request body, watched on its way to the origin
//! so that a broken or stalled upload is the client's fault, not the origin's.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::Instant;

use super::error::{FailureCounts, body_failed};
use super::pool::Lease;
use crate::sys::slots::SlotHold;

pin_project_lite::pin_project! {
    /// The origin's response body, passed through frame by frame (nothing is buffered, so
    /// server-sent events reach the client as they arrive). The hold is dropped when the last
    /// frame has been handed on, when the origin fails mid-body, or when the client goes away
    /// and the body is dropped, whichever comes first.
    ///
    /// A pooled origin connection goes back to its pool when the body has been read to its
    /// end, and only then: a body cut short leaves the connection mid-message, so it is closed.
    pub(super) struct HeldBody {
        #[pin]
        inner: Incoming,
        hold: Option<SlotHold>,
        lease: Option<Lease>,
        failures: Arc<FailureCounts>,
        // The origin's failure, reported one poll late so hyper flushes what it holds first
        // (as the direct path's body does).
        failure: Option<hyper::Error>,
    }
}

impl HeldBody {
    pub(super) fn new(
        inner: Incoming,
        hold: Option<SlotHold>,
        lease: Option<Lease>,
        failures: Arc<FailureCounts>,
    ) -> HeldBody {
        let mut lease = lease;
        // A body that is over before it starts (HEAD, 204, 304, empty) may never be polled.
        if inner.is_end_stream()
            && let Some(lease) = lease.take()
        {
            lease.give_back();
        }
        HeldBody {
            inner,
            hold,
            lease,
            failures,
            failure: None,
        }
    }
}

impl Body for HeldBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let mut this = self.project();
        if let Some(err) = this.failure.take() {
            return Poll::Ready(Some(Err(err)));
        }
        let polled = this.inner.as_mut().poll_frame(cx);
        let finished = match polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            Poll::Ready(Some(Err(err))) => {
                body_failed(this.failures, &err);
                *this.hold = None;
                *this.lease = None;
                *this.failure = Some(err);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Pending => false,
        };
        if finished {
            *this.hold = None;
            if let Some(lease) = this.lease.take() {
                lease.give_back();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.failure.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What the proxy learns from the client's request body while it streams to the origin.
#[derive(Debug)]
pub(super) struct ClientBodyProgress {
    /// The client's side failed (a malformed chunked body, a connection cut mid-body).
    failed: AtomicBool,
    /// The body is waiting for the client to send more.
    awaiting_client: AtomicBool,
    /// Milliseconds after `since` at which the body last moved: a frame, its end, or the start.
    moved_at_ms: AtomicU64,
    /// Bytes of body received from the client so far.
    received: AtomicU64,
    /// The client has sent the whole body.
    complete: AtomicBool,
    since: Instant,
}

impl ClientBodyProgress {
    fn new() -> ClientBodyProgress {
        ClientBodyProgress {
            failed: AtomicBool::new(false),
            awaiting_client: AtomicBool::new(false),
            moved_at_ms: AtomicU64::new(0),
            received: AtomicU64::new(0),
            complete: AtomicBool::new(false),
            since: Instant::now(),
        }
    }

    pub(super) fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Whether the last look at the body found it waiting for the client.
    pub(super) fn awaiting_client(&self) -> bool {
        self.awaiting_client.load(Ordering::Relaxed)
    }

    /// When the body last moved: the response-head timeout counts from here, so a slow upload
    /// that keeps moving is not cut off, and the timeout proper starts once the body is sent.
    pub(super) fn last_moved(&self) -> Instant {
        self.since + Duration::from_millis(self.moved_at_ms.load(Ordering::Relaxed))
    }

    /// When an upload still under way falls below `min_rate` bytes a second on average,
    /// after `grace` from the request's start (each byte received buys `1 / min_rate` s more);
    /// `None` once the body is complete or with no minimum. A trickle (a byte every few
    /// seconds, each just inside the stall limit) would otherwise hold its page slot for as
    /// long as the client likes.
    pub(super) fn too_slow_at(&self, grace: Duration, min_rate: u64) -> Option<Instant> {
        if min_rate == 0 || self.complete.load(Ordering::Relaxed) {
            return None;
        }
        let received = self.received.load(Ordering::Relaxed);
        let earned_ms = received.saturating_mul(1000) / min_rate;
        // Past the clock's range: never too slow.
        self.since
            .checked_add(grace)?
            .checked_add(Duration::from_millis(earned_ms))
    }

    fn moved(&self) {
        let elapsed = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.moved_at_ms.store(elapsed, Ordering::Relaxed);
    }
}

pin_project_lite::pin_project! {
    /// The client's request body on its way to the origin, reporting its progress to the proxy
    /// (see [`ClientBodyProgress`]): a failure on the client's side is answered as the client's
    /// fault (400) and not as the origin's (502).
    pub(super) struct ClientBody<B> {
        #[pin]
        inner: B,
        progress: Arc<ClientBodyProgress>,
    }
}

impl<B> ClientBody<B> {
    /// The wrapped body and the progress it reports.
    pub(super) fn watch(inner: B) -> (ClientBody<B>, Arc<ClientBodyProgress>) {
        let progress = Arc::new(ClientBodyProgress::new());
        let body = ClientBody {
            inner,
            progress: Arc::clone(&progress),
        };
        (body, progress)
    }
}

impl<B: Body> Body for ClientBody<B>
where
    B::Data: bytes::Buf,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        let progress = &**this.progress;
        progress
            .awaiting_client
            .store(polled.is_pending(), Ordering::Relaxed);
        match &polled {
            Poll::Pending => {}
            Poll::Ready(Some(Err(_))) => progress.failed.store(true, Ordering::Relaxed),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let bytes = u64::try_from(bytes::Buf::remaining(data)).unwrap_or(u64::MAX);
                    progress.received.fetch_add(bytes, Ordering::Relaxed);
                }
                if this.inner.is_end_stream() {
                    progress.complete.store(true, Ordering::Relaxed);
                }
                progress.moved();
            }
            Poll::Ready(None) => {
                progress.complete.store(true, Ordering::Relaxed);
                progress.moved();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(30);

    #[test]
    fn each_byte_received_buys_time_at_the_minimum_rate() {
        let progress = ClientBodyProgress::new();
        assert_eq!(
            progress.too_slow_at(GRACE, 500),
            Some(progress.since + GRACE)
        );
        progress.received.store(1_000, Ordering::Relaxed);
        assert_eq!(
            progress.too_slow_at(GRACE, 500),
            Some(progress.since + GRACE + Duration::from_secs(2))
        );
        assert_eq!(progress.too_slow_at(GRACE, 0), None, "no minimum");
        progress.complete.store(true, Ordering::Relaxed);
        assert_eq!(progress.too_slow_at(GRACE, 500), None, "the body is in");
    }

    #[test]
    fn no_byte_count_overflows_the_deadline() {
        let progress = ClientBodyProgress::new();
        progress.received.store(u64::MAX, Ordering::Relaxed);
        let at = progress.too_slow_at(GRACE, 1);
        // Far in the future, or (where the clock's range ends sooner) never.
        assert!(at.is_none_or(|at| at > progress.since + GRACE * 1_000_000));
    }
}
