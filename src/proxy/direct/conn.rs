//! Keep-alive connections to the origin on the direct path: the pool, the exchange of a request
//! head for a response head, and the deadline on it.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use http::Method;
use http::header::HeaderName;
use tokio::io::AsyncWrite as _;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::error::DirectError;
use super::head::{Framing, KnownNames, parse_head};
use crate::proxy::error::FailureCounts;
use crate::proxy::idle::IdleList;
use crate::proxy::pool::{PoolLimits, connect_tcp};
use crate::sys::moving_timer::MovingTimer;
use crate::wire::buffers;
use crate::wire::limits::MAX_RESPONSE_HEAD_BYTES;

/// Free space made in the read buffer before each read.
const READ_RESERVE: usize = 32 * 1024;

/// One keep-alive connection to the origin and the bytes read from it but not yet used.
pub(in crate::proxy) struct OriginConn {
    stream: TcpStream,
    pub(super) buf: BytesMut,
    /// Names of the response headers being parsed and where their values lie; kept to reuse
    /// its allocation.
    spans: Vec<(HeaderName, usize, usize)>,
    names: KnownNames,
    /// The `-upstream-timeout` timer, kept with the connection so that a pooled connection
    /// moves one timer from request to request.
    timer: MovingTimer,
}

impl OriginConn {
    fn new(stream: TcpStream) -> OriginConn {
        OriginConn {
            stream,
            buf: BytesMut::new(),
            spans: Vec::new(),
            names: KnownNames::default(),
            timer: MovingTimer::default(),
        }
    }

    /// `io` on this connection, or `TimedOut` once `deadline` has passed with `io` still
    /// waiting for the socket.
    fn poll_before<T>(
        &mut self,
        deadline: Option<Instant>,
        cx: &mut Context<'_>,
        io: impl FnOnce(&mut Self, &mut Context<'_>) -> Poll<T>,
    ) -> Poll<Result<T, DirectError>> {
        if let Poll::Ready(done) = io(self, cx) {
            return Poll::Ready(Ok(done));
        }
        match deadline {
            Some(deadline) if self.timer.poll_passed(deadline, cx) => {
                Poll::Ready(Err(DirectError::TimedOut))
            }
            _ => Poll::Pending,
        }
    }

    /// Writes what is left of the request head after `written` bytes.
    fn poll_write_head(
        &mut self,
        head: &[u8],
        written: &mut usize,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while let Some(rest) = head.get(*written..).filter(|rest| !rest.is_empty()) {
            match ready!(Pin::new(&mut self.stream).poll_write(cx, rest)) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(sent) => *written += sent,
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Whether an idle connection can take a request: nothing arrived on it while idle, the
    /// origin has not closed it. The quick check asks tokio's readiness, which costs no system
    /// call but only knows what the reactor has already seen; `thorough` also asks the kernel,
    /// for requests that cannot be sent again if the connection turns out to be closed.
    fn is_usable(&self, thorough: bool) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let would_block = |read: io::Result<usize>| matches!(read, Err(err) if err.kind() == io::ErrorKind::WouldBlock);
        let mut probe = [0u8; 1];
        if !would_block(self.stream.try_read(&mut probe)) {
            return false;
        }
        // A peek leaves any byte where it is; the connection is dropped if one is there.
        !thorough
            || would_block(socket2::SockRef::from(&self.stream).peek(&mut [MaybeUninit::uninit()]))
    }

    /// Reads more of the response into the buffer; `Ok(0)` is the end of the stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        buffers::take_spare(&mut self.buf);
        buffers::make_room(&mut self.buf, READ_RESERVE);
        // Through `AsyncRead` rather than `try_read_buf`: a read that leaves room in the buffer
        // tells tokio the socket is drained, so the idle probe in `is_usable` is answered from
        // the readiness tokio already holds instead of a `recvfrom` that fails with EAGAIN.
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.buf)
    }
}

/// Keep-alive connections to one origin for bodiless requests.
pub(in crate::proxy) struct DirectPool {
    addr: Arc<str>,
    limits: PoolLimits,
    idle: IdleList<OriginConn>,
    /// Where a body that fails after its head is counted.
    pub(in crate::proxy) failures: Arc<FailureCounts>,
}

/// The origin's answer: its head, how its body is framed, and the connection carrying it.
pub(in crate::proxy) struct Answer {
    pub head: http::response::Parts,
    pub framing: Framing,
    /// The connection can take another request once the body has been read: the framing
    /// delimits the body, and the origin neither said it closes nor spoke HTTP/1.0.
    pub reusable: bool,
    pub conn: OriginConn,
}

impl DirectPool {
    pub(in crate::proxy) fn new(
        addr: &str,
        limits: PoolLimits,
        failures: Arc<FailureCounts>,
    ) -> DirectPool {
        DirectPool {
            addr: Arc::from(addr),
            limits,
            idle: IdleList::new(limits.max_idle, limits.idle_timeout),
            failures,
        }
    }

    /// Sends a bodiless request (`head` is its complete head) and reads the response head.
    ///
    /// An idempotent request that finds its pooled connection closed before any answer is
    /// sent once more on a new connection; other requests are never sent twice.
    pub(in crate::proxy) async fn send(
        &self,
        method: &Method,
        head: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, DirectError> {
        let retryable = method.is_idempotent();
        if let Some(conn) = self.checkout(!retryable) {
            match exchange(conn, method, head, deadline).await {
                Ok(answer) => return Ok(answer),
                Err(err) if err.before_any_answer() && retryable => {
                    tracing::debug!(error = %err, "proxy: pooled origin connection was closed, retrying on a new one");
                }
                Err(err) => return Err(err),
            }
        }
        let connecting = Box::pin(connect_tcp(&self.addr, &self.limits));
        let stream = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, connecting)
                .await
                .map_err(|_| DirectError::TimedOut)??,
            None => connecting.await?,
        };
        exchange(OriginConn::new(stream), method, head, deadline).await
    }

    /// The newest idle connection that looks open (`thorough`: see [`OriginConn::is_usable`]).
    fn checkout(&self, thorough: bool) -> Option<OriginConn> {
        loop {
            let conn = self.idle.pop_newest()?;
            if conn.is_usable(thorough) {
                return Some(conn);
            }
        }
    }

    /// Takes a connection back after a complete exchange; beyond the idle cap it is closed.
    pub(super) fn put_back(&self, mut conn: OriginConn) {
        buffers::give_back(&mut conn.buf);
        self.idle.push(conn);
    }

    /// Idle connections currently held.
    #[cfg(test)]
    pub(in crate::proxy) fn idle_count(&self) -> usize {
        self.idle.len()
    }

    /// Idle connections the origin has not been seen closing.
    #[cfg(test)]
    pub(in crate::proxy) fn idle_open_count(&self, thorough: bool) -> usize {
        self.idle.count(|conn| conn.is_usable(thorough))
    }
}

/// Sends the request head on `conn` and reads the response head, failing with `TimedOut` if
/// that is not done by `deadline`.
async fn exchange(
    mut conn: OriginConn,
    method: &Method,
    head: &[u8],
    deadline: Option<Instant>,
) -> Result<Answer, DirectError> {
    let mut written = 0;
    std::future::poll_fn(|cx| {
        conn.poll_before(deadline, cx, |conn, cx| {
            conn.poll_write_head(head, &mut written, cx)
        })
    })
    .await?
    .map_err(DirectError::Write)?;
    let answers_without_body = *method == Method::HEAD;
    // Whether the origin has sent anything at all (an interim 1xx included): from then on it
    // has seen the request, and a failure must not be taken for a connection that was dead.
    let mut answered = false;
    loop {
        if !conn.buf.is_empty()
            && let Some((head, framing, reusable)) = parse_head(
                &mut conn.buf,
                &mut conn.spans,
                &mut conn.names,
                answers_without_body,
            )?
        {
            conn.timer.disown();
            return Ok(Answer {
                head,
                framing,
                reusable,
                conn,
            });
        }
        if conn.buf.len() >= MAX_RESPONSE_HEAD_BYTES {
            return Err(DirectError::HeadTooLarge);
        }
        match std::future::poll_fn(|cx| conn.poll_before(deadline, cx, OriginConn::poll_fill))
            .await?
        {
            Ok(0) if answered => return Err(DirectError::ClosedInHead),
            Ok(0) => return Err(DirectError::Closed),
            Ok(_) => answered = true,
            Err(err) if answered => return Err(DirectError::ReadInHead(err)),
            Err(err) => return Err(DirectError::Read(err)),
        }
    }
}
