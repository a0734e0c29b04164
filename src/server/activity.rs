//! What a client connection is doing, as its reads need to know it: whether a request has
//! come, how many exchanges (HTTP/1) or streams (HTTP/2) are open, and whether it became a
//! tunnel. Response bodies keep their exchange counted open until they are finished or dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use super::send_limit::SendStamp;

/// How long an idle HTTP/2 connection asked to close with GOAWAY has to finish the exchange
/// (the client acknowledges with a ping) before its reads fail.
pub(crate) const GOAWAY_GRACE: Duration = Duration::from_secs(5);

/// How long a client connection may wait; see the module's documentation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    /// For a request head: the first from the connection's opening, a later HTTP/1 one from its
    /// first bytes.
    pub head: Duration,
    /// For the next request on a keep-alive connection, from the last answer (HTTP/1) or the
    /// last stream's end (HTTP/2).
    pub idle: Duration,
    /// For a write the client does not take: a client that stops reading would otherwise hold
    /// its page, asset or stream slot for as long as it keeps the connection open.
    pub send: Duration,
}

/// What the service has seen of one connection's requests, shared with its stream's reads.
#[derive(Debug)]
pub(crate) struct ConnectionActivity {
    first_arrived: AtomicBool,
    /// The connection has carried an HTTP/2 stream (an idle HTTP/1 one is left to hyper).
    multiplexed: AtomicBool,
    open_streams: AtomicUsize,
    /// Milliseconds after `since` at which the last open stream ended.
    quiet_from_ms: AtomicU64,
    since: Instant,
    /// The connection's reader, woken when its last stream ends so it arms the idle deadline.
    reader: futures_util::task::AtomicWaker,
    /// An idle HTTP/2 connection has been asked to close with GOAWAY.
    close_requested: AtomicBool,
    /// The connection left HTTP for a tunnel (WebSocket, CONNECT): no deadline applies.
    tunnelled: AtomicBool,
}

impl Default for ConnectionActivity {
    fn default() -> Self {
        ConnectionActivity {
            first_arrived: AtomicBool::new(false),
            multiplexed: AtomicBool::new(false),
            open_streams: AtomicUsize::new(0),
            quiet_from_ms: AtomicU64::new(0),
            since: Instant::now(),
            reader: futures_util::task::AtomicWaker::new(),
            close_requested: AtomicBool::new(false),
            tunnelled: AtomicBool::new(false),
        }
    }
}

impl ConnectionActivity {
    fn request_arrived(&self) {
        // Checked before storing: after the first request this stays a shared read.
        if !self.first_arrived.load(Ordering::Relaxed) {
            self.first_arrived.store(true, Ordering::Relaxed);
        }
    }

    /// Records an HTTP/1 request, its exchange counted open until the returned guard is
    /// dropped (with the response body, once hyper has taken all of it).
    pub(crate) fn exchange_opened(self: &Arc<Self>) -> OpenStream {
        self.open_streams.fetch_add(1, Ordering::Relaxed);
        self.request_arrived();
        OpenStream {
            activity: Arc::clone(self),
            send: None,
        }
    }

    /// Records an HTTP/2 stream, counted open until the returned guard is dropped.
    pub(crate) fn stream_opened(self: &Arc<Self>) -> OpenStream {
        self.multiplexed.store(true, Ordering::Relaxed);
        self.exchange_opened()
    }

    /// The connection now carries a tunnel (a 101 answer, or a CONNECT answered 2xx).
    pub(crate) fn tunnel_opened(&self) {
        self.tunnelled.store(true, Ordering::Relaxed);
    }

    /// Whether an idle HTTP/2 connection should be closed with GOAWAY. Set from within the
    /// connection's own reads, so the task polling the connection sees it right after that poll
    /// without being woken.
    pub(crate) fn close_requested(&self) -> bool {
        self.close_requested.load(Ordering::Relaxed)
    }

    /// What the connection's reads wait for. `None`: no deadline while an exchange is open;
    /// `Never`: none again (a tunnel); `BetweenExchanges`: an HTTP/1 connection waiting for its
    /// next request (the reader knows its last write and the next head's first bytes);
    /// `Close`: `limits.idle` after the last stream of an HTTP/2 connection ended, the polite
    /// close is due; `Fail`: reads fail, `limits.head` after opening while no request has come,
    /// or [`GOAWAY_GRACE`] after a polite close was asked. The flag says whether the reader must
    /// stay registered for stream endings.
    pub(super) fn deadline(&self, limits: ConnLimits) -> (Deadline, bool) {
        if !self.first_arrived.load(Ordering::Relaxed) {
            return (Deadline::Fail(self.since + limits.head), true);
        }
        if self.tunnelled.load(Ordering::Relaxed) {
            return (Deadline::Never, false);
        }
        let multiplexed = self.multiplexed.load(Ordering::Relaxed);
        if self.open_streams.load(Ordering::Acquire) > 0 {
            return (Deadline::None, multiplexed);
        }
        if !multiplexed {
            // hyper reads for the next request head as soon as it has answered, so no
            // wake-up is needed when an HTTP/1 exchange ends.
            return (Deadline::BetweenExchanges, false);
        }
        let quiet_from = Duration::from_millis(self.quiet_from_ms.load(Ordering::Relaxed));
        let idle_at = self.since + quiet_from + limits.idle;
        if self.close_requested.load(Ordering::Relaxed) {
            (Deadline::Fail(idle_at + GOAWAY_GRACE), true)
        } else {
            (Deadline::Close(idle_at), true)
        }
    }

    /// Wakes `waker` when the last open stream ends, so the reads arm the idle deadline.
    pub(super) fn register_reader(&self, waker: &std::task::Waker) {
        self.reader.register(waker);
    }

    pub(super) fn request_close(&self) {
        self.close_requested.store(true, Ordering::Relaxed);
    }

    fn stream_closed(&self) {
        if !self.multiplexed.load(Ordering::Relaxed) {
            // HTTP/1 counts its idle time from the last write instead (see IdleDeadline).
            self.open_streams.fetch_sub(1, Ordering::Release);
            return;
        }
        let elapsed = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Stamped before the count drops, so a reader that sees no open stream sees this time.
        self.quiet_from_ms.fetch_max(elapsed, Ordering::Relaxed);
        if self.open_streams.fetch_sub(1, Ordering::Release) == 1 {
            self.reader.wake();
        }
    }
}

/// See [`ConnectionActivity::deadline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deadline {
    /// Not now: an exchange is open.
    None,
    /// Never again: the connection is a tunnel.
    Never,
    /// HTTP/1 between exchanges: the idle limit after the last write, or the head limit after
    /// the next head's first bytes.
    BetweenExchanges,
    Close(Instant),
    Fail(Instant),
}

/// One open exchange (an HTTP/1 request or an HTTP/2 stream); dropping it (response finished,
/// or abandoned) closes it.
pub(crate) struct OpenStream {
    activity: Arc<ConnectionActivity>,
    /// HTTP/2 only, from when the answer is handed to hyper: whether it waits on the client.
    send: Option<Arc<SendStamp>>,
}

impl OpenStream {
    /// The exchange switched the connection to a tunnel: no deadline applies from now on.
    pub(crate) fn tunnel_opened(&self) {
        self.activity.tunnel_opened();
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if let Some(send) = &self.send {
            send.not_awaiting_client();
        }
        self.activity.stream_closed();
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
    /// `inner` is the answer's body, handed to hyper with the head: an HTTP/2 stream waits on
    /// the client from here until hyper first asks for the body. Called from the stream's task.
    pub(crate) fn new(inner: B, mut stream: OpenStream) -> Self
    where
        B: Body,
    {
        // An HTTP/2 connection carries only streams, each run as a task of its own.
        if stream.activity.multiplexed.load(Ordering::Relaxed) {
            stream.send = SendStamp::of_current_stream();
            if let Some(send) = &stream.send
                && !inner.is_end_stream()
            {
                send.awaiting_client();
            }
        }
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
        let this = self.project();
        match &this.stream.send {
            // HTTP/1: a client holding the answer back blocks the writes instead.
            None => this.inner.poll_frame(cx),
            Some(send) => multiplexed_poll_frame(this.inner, send, cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What polling a body for its next frame gives.
type PolledFrame<B> = Poll<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>>;

/// [`CountedBody::poll_frame`] on an HTTP/2 stream: notes whether hyper is left waiting on the
/// client. Out of line, so the HTTP/1 poll stays as small as it was.
#[inline(never)]
fn multiplexed_poll_frame<B: Body>(
    mut inner: Pin<&mut B>,
    send: &SendStamp,
    cx: &mut Context<'_>,
) -> PolledFrame<B> {
    send.not_awaiting_client();
    let polled = inner.as_mut().poll_frame(cx);
    if let Poll::Ready(Some(Ok(_))) = &polled
        && !inner.is_end_stream()
    {
        send.awaiting_client();
    }
    polled
}
