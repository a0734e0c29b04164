//! A deadline on a new connection's first request.
//!
//! hyper's header-read timeout starts only once it knows the protocol: before that, the
//! connection builder waits for the first bytes (up to the 24 of the HTTP/2 preface) without any
//! timer, and an HTTP/2 connection then waits for the client's settings and first stream with
//! none either. A client that opens connections and sends nothing, or half a preface, would hold
//! each one (a descriptor, a task) forever. [`FirstRequestDeadline`] fails the connection's reads
//! once [`HEADER_READ_TIMEOUT`](crate::server::HEADER_READ_TIMEOUT) has passed without a request
//! reaching the service; after the first request, hyper's own timers govern the connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Set by the service when a request arrives; read by the connection's reads.
#[derive(Debug, Default)]
pub(crate) struct FirstRequest {
    arrived: AtomicBool,
}

impl FirstRequest {
    /// Records that the connection has delivered a request.
    pub(crate) fn arrived(&self) {
        // Checked before storing: after the first request this stays a shared read.
        if !self.arrived.load(Ordering::Relaxed) {
            self.arrived.store(true, Ordering::Relaxed);
        }
    }

    fn has_arrived(&self) -> bool {
        self.arrived.load(Ordering::Relaxed)
    }
}

/// An I/O stream whose reads fail with `TimedOut` once `limit` has passed since it was wrapped
/// without the first request arriving; writes pass through untouched.
pub(crate) struct FirstRequestDeadline<T> {
    inner: T,
    first: Arc<FirstRequest>,
    /// `None` once the first request has arrived: the stream is then a plain pass-through.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> FirstRequestDeadline<T> {
    pub(crate) fn new(inner: T, first: Arc<FirstRequest>, limit: Duration) -> Self {
        FirstRequestDeadline {
            inner,
            first,
            deadline: Some(Box::pin(tokio::time::sleep(limit))),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FirstRequestDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(deadline) = this.deadline.as_mut() {
            if this.first.has_arrived() {
                this.deadline = None;
            } else if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request within the header timeout",
                )));
            }
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FirstRequestDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_fails_its_read_at_the_deadline() {
        let (_client, server) = tokio::io::duplex(64);
        let first = Arc::new(FirstRequest::default());
        let mut guarded = FirstRequestDeadline::new(server, first, Duration::from_secs(10));
        let started = tokio::time::Instant::now();
        let mut byte = [0u8; 1];
        let error = guarded.read(&mut byte).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_alone_do_not_lift_the_deadline_but_a_request_does() {
        let (mut client, server) = tokio::io::duplex(64);
        let first = Arc::new(FirstRequest::default());
        let mut guarded = FirstRequestDeadline::new(server, first.clone(), Duration::from_secs(10));
        // Half an HTTP/2 preface: readable, yet no request.
        client.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(guarded.read(&mut buf).await.unwrap(), 16);
        let error = guarded.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);

        // A second connection whose request arrives in time is never cut off afterwards.
        let (mut client, server) = tokio::io::duplex(64);
        let first = Arc::new(FirstRequest::default());
        let mut guarded = FirstRequestDeadline::new(server, first.clone(), Duration::from_secs(10));
        client.write_all(b"GET").await.unwrap();
        assert_eq!(guarded.read(&mut buf).await.unwrap(), 3);
        first.arrived();
        tokio::time::sleep(Duration::from_secs(60)).await;
        client.write_all(b"more").await.unwrap();
        assert_eq!(guarded.read(&mut buf).await.unwrap(), 4);
        assert!(guarded.deadline.is_none());
    }
}
