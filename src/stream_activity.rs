//! Whether an HTTP/2 connection is idle.
//!
//! hyper closes an idle HTTP/1 connection through its header-read timer, but an HTTP/2
//! connection with no open stream stays open for as long as the client answers pings, so a
//! client could hold any number of them (each a descriptor and a task) after one request each.
//! [`StreamActivity`] counts a connection's open streams, from request to the end of the
//! response body, so the connection task can send GOAWAY once none has been open for the idle
//! limit.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

/// One connection's open HTTP/2 streams.
#[derive(Debug)]
pub(crate) struct StreamActivity {
    /// Whether the connection has carried an HTTP/2 stream (HTTP/1 is left to hyper).
    multiplexed: AtomicBool,
    open: AtomicUsize,
    /// Milliseconds after `since` at which the last open stream ended.
    quiet_from_ms: AtomicU64,
    since: Instant,
}

impl Default for StreamActivity {
    fn default() -> Self {
        StreamActivity {
            multiplexed: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            quiet_from_ms: AtomicU64::new(0),
            since: Instant::now(),
        }
    }
}

impl StreamActivity {
    /// Counts a stream open until the returned guard is dropped.
    pub(crate) fn stream_opened(self: &Arc<Self>) -> OpenStream {
        self.multiplexed.store(true, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenStream(Arc::clone(self))
    }

    /// When the connection will have been idle for `limit`: `None` while a stream is open or
    /// before the first HTTP/2 stream.
    pub(crate) fn idle_deadline(&self, limit: Duration) -> Option<Instant> {
        if !self.multiplexed.load(Ordering::Relaxed) || self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let quiet_from = Duration::from_millis(self.quiet_from_ms.load(Ordering::Relaxed));
        Some(self.since + quiet_from + limit)
    }

    fn stream_closed(&self) {
        let elapsed = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Stamped before the count drops, so a reader that sees no open stream sees this time.
        self.quiet_from_ms.fetch_max(elapsed, Ordering::Relaxed);
        self.open.fetch_sub(1, Ordering::Release);
    }
}

/// One open stream; dropping it (response finished, or the stream abandoned) closes it.
pub(crate) struct OpenStream(Arc<StreamActivity>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.stream_closed();
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its stream counted open until it is finished or dropped.
    pub(crate) struct CountedBody<B> {
        #[pin]
        inner: B,
        stream: OpenStream,
    }
}

impl<B> CountedBody<B> {
    pub(crate) fn new(inner: B, stream: OpenStream) -> Self {
        CountedBody { inner, stream }
    }
}

impl<B: Body> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
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

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_end_of_the_last_stream() {
        let activity = Arc::new(StreamActivity::default());
        let limit = Duration::from_secs(10);
        assert_eq!(activity.idle_deadline(limit), None, "HTTP/1 is not watched");
        let first = activity.stream_opened();
        let second = activity.stream_opened();
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(first);
        assert_eq!(
            activity.idle_deadline(limit),
            None,
            "a stream is still open"
        );
        tokio::time::sleep(Duration::from_secs(4)).await;
        let ended_at = Instant::now();
        drop(second);
        assert_eq!(activity.idle_deadline(limit), Some(ended_at + limit));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_holds_its_stream_open_until_dropped() {
        let activity = Arc::new(StreamActivity::default());
        let body = CountedBody::new(
            http_body_util::Full::new(bytes::Bytes::from_static(b"x")),
            activity.stream_opened(),
        );
        assert_eq!(activity.idle_deadline(Duration::from_secs(1)), None);
        drop(body);
        assert!(activity.idle_deadline(Duration::from_secs(1)).is_some());
    }
}
