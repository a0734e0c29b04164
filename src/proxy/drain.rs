//! The stop as the proxy's long-lived answers see it: event streams end between two frames and
//! WebSocket tunnels close properly when the drain starts, instead of holding the stop for its
//! whole grace period.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use http::{Response, header};
use hyper::body::{Frame, SizeHint};

use super::upgrade::Tunnel;

/// What the long-lived answers need to know about a stop: when the drain starts, and which
/// WebSocket tunnels it must wait for while they close.
#[derive(Debug, Clone, Default)]
pub struct Drain {
    started: tokio_util::sync::CancellationToken,
    websockets: tokio_util::task::TaskTracker,
}

impl Drain {
    /// Starts the drain: event streams end, WebSocket tunnels send their Close frames.
    pub fn start(&self) {
        self.websockets.close();
        self.started.cancel();
    }

    /// Runs a WebSocket tunnel tracked by the drain, so the stop waits for its Close frames.
    pub(super) fn track_websocket(&self, tunnel: Tunnel) {
        let started = self.started.clone();
        self.websockets.spawn(tunnel.websocket(started));
    }

    /// Resolves once the drain has started and every WebSocket tunnel has closed.
    pub async fn websockets_closed(&self) {
        self.started.cancelled().await;
        self.websockets.wait().await;
    }
}

/// Lets an event stream (`Content-Type: text/event-stream`) end once the drain starts, so a
/// stop does not wait out its grace period for answers that never finish; every other response
/// passes unchanged and keeps the whole grace period.
pub(crate) fn end_event_stream_on_drain(response: Response<Body>, drain: &Drain) -> Response<Body> {
    if !is_event_stream(response.headers()) {
        return response;
    }
    let started = drain.started.clone();
    response.map(|body| Body::new(EndsOnDrain::new(body, started)))
}

pub(super) fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).is_some_and(|value| {
        let media = value.as_bytes().split(|&byte| byte == b';').next();
        media.is_some_and(|media| {
            media
                .trim_ascii()
                .eq_ignore_ascii_case(b"text/event-stream")
        })
    })
}

/// A response body that ends cleanly, between two frames, once the server starts draining.
/// Event streams never end by themselves, so without this a single open one held every stop for
/// the whole grace period; ended, the client's `EventSource` reconnects (to the restarted
/// server) as it does after any network hiccup.
struct EndsOnDrain<B> {
    /// `None` once ended: dropping the origin's body releases its slot and connection at once.
    inner: Option<B>,
    drained: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl<B> EndsOnDrain<B> {
    fn new(inner: B, draining: tokio_util::sync::CancellationToken) -> EndsOnDrain<B> {
        EndsOnDrain {
            inner: Some(inner),
            drained: Box::pin(draining.cancelled_owned()),
        }
    }
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for EndsOnDrain<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        if self.inner.is_some() && self.drained.as_mut().poll(cx).is_ready() {
            self.inner = None;
        }
        match self.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(hyper::body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) => inner.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }
}
