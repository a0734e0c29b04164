//! Deadlines on a client connection: its reads (the first request, the wait between HTTP/1
//! requests (slow heads and idle keep-alive), an idle HTTP/2 connection) and its writes.
//!
//! hyper's header-read timer starts only once it knows the protocol: before that, the
//! connection builder waits for the first bytes (up to the 24 of the HTTP/2 preface) without any
//! timer, and an HTTP/2 connection then waits for its first stream with none either. An HTTP/2
//! connection with no open stream would also stay open for as long as the client answers pings.
//! And for HTTP/1 the timer is a new boxed sleep per request, registered with the timer wheel
//! and removed again: about 4% of the instructions of a proxied page. So Concert keeps these
//! deadlines itself, with one timer per connection that is moved in place.
//!
//! [`IdleDeadline`] wraps the connection's stream and fails its reads once a limit passes. Two
//! limits, the head and idle timeouts deployments already count on: a request head must be complete
//! within the head limit (10 s), counted for the first request from the connection's opening and
//! for a later HTTP/1 request from its first bytes; and a keep-alive connection may wait for the
//! next request, with nothing of it read yet, for the idle limit (120 s) after its last answer was
//! written (an answer still being sent, even slowly, keeps the connection). While the worker
//! holds a crowd of connections, an HTTP/1 connection that falls idle gets the head limit
//! instead: each idle connection keeps hyper's buffers (about 36 KB), and a spike of visitors
//! would otherwise pile up two minutes' worth of them. An HTTP/2 connection whose last stream
//! ended the idle limit ago is first asked to close politely
//! ([`ConnectionActivity::close_requested`]: the connection task then sends GOAWAY, so a client about to reuse the connection knows which of its requests were not
//! taken and can send them again); its reads fail only if it is still open [`GOAWAY_GRACE`]
//! later. A connection switched to another protocol (WebSocket, CONNECT) has no deadline.
//! The checks live in the read path hyper polls anyway: a busy HTTP/1 connection pays a few
//! atomic loads per read and one clock read per exchange.
//!
//! Writes have one limit, the send limit (60 s, nginx's `send_timeout`): a write the client
//! takes nothing of for that long fails, so hyper closes the connection and the response it was
//! carrying (with the slot it holds) is dropped. A page slot is otherwise held until the answer
//! is delivered, and visitors who stop reading could hold every slot indefinitely. Any bytes
//! taken start the limit again, so a slow reader keeps its answer. The timer is made the first
//! time a write blocks; writes that go straight out cost nothing more. An HTTP/2 client holds an
//! answer back with flow control instead, and its writes never block: there the limit applies to
//! each stream on its own (see [`crate::server::send_limit`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::activity::{ConnLimits, ConnectionActivity, Deadline};
use crate::sys::moving_timer::MovingTimer;
use crate::sys::workers::Crowded;

/// Why reads fail (no request came in time) or writes fail (the client took nothing).
const NO_REQUEST: &str = "no request within the idle timeout";
const SEND_TIMED_OUT: &str = "the client took nothing within the send timeout";

/// A client stream whose reads fail with `TimedOut` at the [`ConnectionActivity`] deadline,
/// and whose writes fail with `TimedOut` once the client has taken nothing for the send limit.
pub(crate) struct IdleDeadline<T> {
    inner: T,
    activity: Arc<ConnectionActivity>,
    limits: ConnLimits,
    crowded: Crowded,
    /// Kept while no deadline applies (it may then wake the task once for nothing), so a busy
    /// connection moves one timer forward instead of making a new one per request; dropped for
    /// a tunnel.
    timer: MovingTimer,
    /// When the connection last wrote: an HTTP/1 answer ends with a write.
    last_write: Option<Instant>,
    /// The last write could not go out (the client is not reading): like hyper, no read
    /// deadline runs while an answer is still on its way.
    write_blocked: bool,
    /// When the client last stopped taking bytes, while it still has not taken any since.
    blocked_since: Option<Instant>,
    /// Set for `blocked_since` + the send limit; created the first time a write blocks.
    send_timer: MovingTimer,
    /// Bytes have been read since the last write: on HTTP/1 between exchanges, the start of the
    /// next request head.
    head_begun: bool,
    /// When the deadline first saw `head_begun`: right after the read that set it, as hyper
    /// reads again at once when a head is incomplete. Stamped there rather than in the read, so
    /// a complete head, answered without another read, costs no clock read.
    head_begun_at: Option<Instant>,
}

impl<T> IdleDeadline<T> {
    pub(crate) fn new(
        inner: T,
        activity: Arc<ConnectionActivity>,
        limits: ConnLimits,
        crowded: Crowded,
    ) -> Self {
        IdleDeadline {
            inner,
            activity,
            limits,
            crowded,
            timer: MovingTimer::default(),
            last_write: None,
            write_blocked: false,
            blocked_since: None,
            send_timer: MovingTimer::default(),
            head_begun: false,
            head_begun_at: None,
        }
    }

    /// The stream beneath.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Notes a write's outcome; a write still blocked past the send limit becomes an error.
    fn note_write(
        &mut self,
        written: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {}
            Poll::Ready(Ok(_)) => {
                self.last_write = Some(Instant::now());
                self.write_blocked = false;
                self.head_begun = false;
                self.head_begun_at = None;
                if self.blocked_since.take().is_some() {
                    // The client reads again; its timer must not wake the task for nothing.
                    self.send_timer.disown();
                }
            }
            Poll::Pending => return self.blocked(cx),
        }
        written
    }

    /// The client is not taking bytes: pending until the send limit, then `TimedOut`.
    fn blocked<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        self.write_blocked = true;
        let since = *self.blocked_since.get_or_insert_with(Instant::now);
        if self.send_timer.poll_passed(since + self.limits.send, cx) {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, SEND_TIMED_OUT)));
        }
        Poll::Pending
    }

    /// Whether reads must fail now; asks for the polite close when that is due, and arms,
    /// moves or drops the timer as the activity says.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let (deadline, watch_streams) = self.activity.deadline(self.limits);
        if watch_streams {
            self.activity.register_reader(cx.waker());
        }
        let deadline = match deadline {
            Deadline::None => return false,
            Deadline::Never => {
                self.timer.clear();
                return false;
            }
            Deadline::BetweenExchanges => {
                if self.write_blocked {
                    return false;
                }
                if self.head_begun {
                    let begun = *self.head_begun_at.get_or_insert_with(Instant::now);
                    begun + self.limits.head
                } else {
                    // An exchange has ended, so its answer has been written.
                    let last_write = *self.last_write.get_or_insert_with(Instant::now);
                    let idle = if (self.crowded)() {
                        self.limits.head
                    } else {
                        self.limits.idle
                    };
                    last_write + idle
                }
            }
            Deadline::Close(at) => {
                if self.wait_until(at, cx) {
                    self.activity.request_close();
                    // Arms the timer for the failing deadline that follows.
                    return self.expired(cx);
                }
                return false;
            }
            Deadline::Fail(at) => at,
        };
        self.wait_until(deadline, cx)
    }

    /// Whether `deadline` has passed; otherwise the timer is set for it.
    fn wait_until(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        self.timer.poll_passed(deadline, cx)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.expired(cx) {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, NO_REQUEST)));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.head_begun = true;
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note_write(written, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note_write(written, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        match flushed {
            // Not progress by itself: only a write that takes bytes resets the send limit.
            Poll::Ready(Ok(())) => this.write_blocked = false,
            Poll::Pending => return this.blocked(cx),
            Poll::Ready(Err(_)) => {}
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use hyper::body::Frame;

    use crate::server::activity::{CountedBody, GOAWAY_GRACE};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    const HEAD: Duration = Duration::from_secs(10);
    const IDLE: Duration = Duration::from_secs(120);
    const SEND: Duration = Duration::from_secs(60);
    const LIMITS: ConnLimits = ConnLimits {
        head: HEAD,
        idle: IDLE,
        send: SEND,
    };

    fn guarded() -> (
        tokio::io::DuplexStream,
        IdleDeadline<tokio::io::DuplexStream>,
        Arc<ConnectionActivity>,
    ) {
        guarded_with(Arc::new(|| false))
    }

    fn guarded_with(
        crowded: Crowded,
    ) -> (
        tokio::io::DuplexStream,
        IdleDeadline<tokio::io::DuplexStream>,
        Arc<ConnectionActivity>,
    ) {
        let (client, server) = tokio::io::duplex(64);
        let activity = Arc::new(ConnectionActivity::default());
        let stream = IdleDeadline::new(server, activity.clone(), LIMITS, crowded);
        (client, stream, activity)
    }

    /// Answers one exchange, then says how long the connection is kept with nothing read.
    async fn kept_idle_after_an_answer(
        stream: &mut IdleDeadline<tokio::io::DuplexStream>,
        activity: &Arc<ConnectionActivity>,
    ) -> Duration {
        let exchange = activity.exchange_opened();
        stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        let answered = Instant::now();
        drop(exchange);
        let error = stream.read(&mut [0u8; 64]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        answered.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_fails_its_read_at_the_deadline() {
        let (_client, mut stream, _) = guarded();
        let started = Instant::now();
        let error = stream.read(&mut [0u8; 1]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), HEAD);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_alone_do_not_lift_the_deadline_but_a_request_does() {
        // Half an HTTP/2 preface: readable, yet no request.
        let (mut client, mut stream, _) = guarded();
        client.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(stream.read(&mut buf).await.unwrap(), 16);
        let error = stream.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);

        // An HTTP/1 request that arrives in time: no deadline while its exchange is open.
        let (mut client, mut stream, activity) = guarded();
        client.write_all(b"GET").await.unwrap();
        assert_eq!(stream.read(&mut buf).await.unwrap(), 3);
        let exchange = activity.exchange_opened();
        tokio::time::sleep(Duration::from_secs(60)).await;
        client.write_all(b"more").await.unwrap();
        assert_eq!(stream.read(&mut buf).await.unwrap(), 4);
        drop(exchange);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_http1_connection_is_kept_for_the_idle_limit_after_its_last_answer() {
        let (_client, mut stream, activity) = guarded();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            kept_idle_after_an_answer(&mut stream, &activity).await,
            IDLE
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_crowded_worker_keeps_an_idle_connection_only_for_the_head_limit() {
        let crowded = Arc::new(AtomicBool::new(true));
        let is_crowded: Crowded = {
            let crowded = crowded.clone();
            Arc::new(move || crowded.load(Ordering::Relaxed))
        };
        let (_client, mut stream, activity) = guarded_with(is_crowded.clone());
        assert_eq!(
            kept_idle_after_an_answer(&mut stream, &activity).await,
            HEAD
        );

        // Once the crowd has gone, the next idle wait is the full idle limit again.
        crowded.store(false, Ordering::Relaxed);
        let (_client, mut stream, activity) = guarded_with(is_crowded);
        assert_eq!(
            kept_idle_after_an_answer(&mut stream, &activity).await,
            IDLE
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_http1_head_has_the_head_limit_from_its_first_bytes() {
        let (mut client, mut stream, activity) = guarded();
        let exchange = activity.exchange_opened();
        stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        drop(exchange);
        // Idle for longer than a head may take, then half of the next head and silence.
        tokio::time::sleep(Duration::from_secs(30)).await;
        client.write_all(b"GET / HT").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(stream.read(&mut buf).await.unwrap(), 8);
        let begun = Instant::now();
        let error = stream.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(begun.elapsed(), HEAD);

        // The next answer starts the idle time again: a head cut short before it does not count.
        let (mut client, mut stream, activity) = guarded();
        let exchange = activity.exchange_opened();
        client.write_all(b"body").await.unwrap();
        assert_eq!(stream.read(&mut buf).await.unwrap(), 4);
        stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        drop(exchange);
        let waiting = tokio::time::timeout(IDLE - Duration::from_secs(1), stream.read(&mut buf));
        assert!(waiting.await.is_err(), "kept while idle");
    }

    #[tokio::test(start_paused = true)]
    async fn one_timer_is_moved_forward_from_exchange_to_exchange() {
        let (_client, mut stream, activity) = guarded();
        let mut buf = [0u8; 64];
        let mut timers = Vec::new();
        for _ in 0..3 {
            let exchange = activity.exchange_opened();
            stream.write_all(b"answer").await.unwrap();
            drop(exchange);
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
            assert!(read.is_err(), "still waiting for the next head");
            timers.push(stream.timer.armed().expect("a timer while waiting"));
        }
        let first = timers[0].0;
        assert!(timers.iter().all(|(timer, _)| *timer == first), "one timer");
        assert_eq!(timers[2].1, Instant::now() - Duration::from_secs(5) + IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_the_client_is_not_reading_keeps_the_connection() {
        let (mut client, stream, activity) = guarded();
        let (mut reader, mut writer) = tokio::io::split(stream);
        let exchange = activity.exchange_opened();
        // More than the pipe holds: the write blocks until the client reads.
        let writing = tokio::spawn(async move {
            writer.write_all(&[b'x'; 200]).await.unwrap();
            writer
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(exchange);
        let mut buf = [0u8; 8];
        // Longer than a head may take, within the send limit.
        let read = tokio::time::timeout(Duration::from_secs(30), reader.read(&mut buf)).await;
        assert!(read.is_err(), "no deadline while the answer is stuck");
        let mut answer = vec![0u8; 200];
        client.read_exact(&mut answer).await.unwrap();
        let _writer = writing.await.unwrap();
        let error = reader.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_takes_nothing_fails_the_write_at_the_send_limit() {
        let (_client, mut stream, activity) = guarded();
        let _exchange = activity.exchange_opened();
        // The pipe holds 64 bytes: the rest waits for a client that never reads.
        stream.write_all(&[b'x'; 64]).await.unwrap();
        let blocked = Instant::now();
        let error = stream.write_all(&[b'y'; 64]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(blocked.elapsed(), SEND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_keeps_its_connection_as_long_as_it_takes_bytes() {
        let (mut client, mut stream, activity) = guarded();
        let _exchange = activity.exchange_opened();
        let started = Instant::now();
        // Ten pipefuls, the client taking one every 50 s: 450 s in all, never 60 s stuck.
        let writing =
            tokio::spawn(async move { stream.write_all(&[b'x'; 640]).await.map(|()| stream) });
        let mut taken = 0;
        let mut buf = [0u8; 64];
        while taken < 640 {
            tokio::time::sleep(Duration::from_secs(50)).await;
            match client.read(&mut buf).await.unwrap() {
                0 => break,
                read => taken += read,
            }
        }
        let mut stream = writing
            .await
            .unwrap()
            .expect("the slow reader got everything");
        assert!(started.elapsed() > SEND * 5);
        assert!(stream.blocked_since.is_none());

        // Its timer let go of the task: blocked again, the limit counts from the new block.
        stream.write_all(&[b'x'; 64]).await.unwrap();
        let blocked = Instant::now();
        let error = stream.write_all(&[b'y'; 1]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(blocked.elapsed(), SEND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tunnel_has_no_deadline() {
        let (mut client, mut stream, activity) = guarded();
        let mut buf = [0u8; 8];
        // The request's head arrives while the first-request deadline is armed.
        client.write_all(b"GET").await.unwrap();
        assert_eq!(stream.read(&mut buf).await.unwrap(), 3);
        assert!(
            stream.timer.armed().is_some(),
            "armed before the first request"
        );
        let exchange = activity.exchange_opened();
        stream
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
            .await
            .unwrap();
        exchange.tunnel_opened();
        drop(exchange);
        tokio::time::sleep(Duration::from_secs(120)).await;
        client.write_all(b"frame").await.unwrap();
        assert_eq!(stream.read(&mut buf).await.unwrap(), 5);
        assert!(stream.timer.armed().is_none(), "no timer kept for a tunnel");
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_connection_times_out_only_once_its_last_stream_ends() {
        let (mut client, mut stream, activity) = guarded();
        let first = activity.stream_opened();
        let second = activity.stream_opened();
        let reading = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            let started = Instant::now();
            let error = loop {
                match stream.read(&mut buf).await {
                    Ok(_) => continue,
                    Err(error) => break error,
                }
            };
            (error.kind(), started.elapsed())
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(first);
        client.write_all(b"ping").await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        // Only the last stream's end starts the idle time; nothing is read after it. First the
        // connection is asked to close politely; reads fail only if it is still open later.
        drop(second);
        tokio::time::sleep(IDLE).await;
        tokio::task::yield_now().await;
        assert!(activity.close_requested(), "no polite close asked for");
        let (kind, waited) = reading.await.unwrap();
        assert_eq!(kind, io::ErrorKind::TimedOut);
        assert_eq!(waited, Duration::from_secs(60) + IDLE + GOAWAY_GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn the_polite_close_is_asked_for_once_the_idle_limit_passes() {
        let (_client, mut stream, activity) = guarded();
        drop(activity.stream_opened());
        let started = Instant::now();
        let reading = tokio::spawn(async move { stream.read(&mut [0u8; 8]).await });
        tokio::time::sleep(IDLE - Duration::from_millis(1)).await;
        assert!(!activity.close_requested(), "asked too early");
        tokio::time::sleep(Duration::from_millis(1)).await;
        tokio::task::yield_now().await;
        assert!(activity.close_requested(), "asked at the idle limit");
        assert!(!reading.is_finished(), "reads still work during the grace");
        let error = reading.await.unwrap().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), IDLE + GOAWAY_GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_holds_its_stream_open_until_dropped() {
        use http_body_util::BodyExt as _;
        let activity = Arc::new(ConnectionActivity::default());
        let mut body = CountedBody::new(
            http_body_util::Full::new(bytes::Bytes::from_static(b"x")),
            activity.stream_opened(),
        );
        assert_eq!(activity.deadline(LIMITS).0, Deadline::None);
        body.frame().await.unwrap().unwrap();
        assert_eq!(activity.deadline(LIMITS).0, Deadline::None);
        drop(body);
        assert!(matches!(activity.deadline(LIMITS).0, Deadline::Close(_)));
    }

    type TestBody = http_body_util::StreamBody<
        futures_util::stream::BoxStream<'static, Result<Frame<bytes::Bytes>, io::Error>>,
    >;

    /// A body that yields `frames` frames and then waits for ever, like an event stream.
    fn open_ended_body(frames: usize) -> TestBody {
        use futures_util::StreamExt as _;
        let frames = futures_util::stream::iter(
            (0..frames).map(|_| Ok(Frame::data(bytes::Bytes::from_static(b"event")))),
        );
        http_body_util::StreamBody::new(frames.chain(futures_util::stream::pending()).boxed())
    }

    /// An HTTP/2 stream's task as hyper runs it: the answer's body is made within the task and
    /// asked for `taken` frames, one a little under the send limit after the other (the client
    /// letting that much through), and then once more if `asks_again`. Says how long after the
    /// last frame was taken the task ended, or `None` if it still ran after ten send limits.
    async fn stream_task_lasted(
        body: TestBody,
        taken: usize,
        asks_again: bool,
    ) -> Option<Duration> {
        use http_body_util::BodyExt as _;
        let activity = Arc::new(ConnectionActivity::default());
        let open = activity.stream_opened();
        let (done_taking, last_taken) = tokio::sync::oneshot::channel();
        let stream = async move {
            let mut body = CountedBody::new(body, open);
            for _ in 0..taken {
                tokio::time::sleep(SEND - Duration::from_secs(1)).await;
                body.frame().await.unwrap().unwrap();
            }
            let _ = done_taking.send(Instant::now());
            if asks_again {
                let asked = tokio::time::timeout(Duration::from_millis(1), body.frame()).await;
                assert!(asked.is_err(), "the body has no more frames");
            }
            std::future::pending::<()>().await;
        };
        let task = tokio::spawn(crate::server::send_limit::SendLimited::new(stream, SEND));
        let last_taken = last_taken.await.unwrap();
        tokio::time::timeout(SEND * 10, task).await.ok()?.unwrap();
        Some(last_taken.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_answer_the_client_never_lets_through_ends_its_stream_at_the_send_limit() {
        assert_eq!(
            stream_task_lasted(open_ended_body(3), 0, false).await,
            Some(SEND)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_answer_counts_from_the_last_frame_hyper_took() {
        // Three frames taken, each within the limit of the one before; more is on hand, and the
        // client lets none of it through.
        assert_eq!(
            stream_task_lasted(open_ended_body(4), 3, false).await,
            Some(SEND)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_answer_waiting_on_its_origin_keeps_its_stream() {
        // All frames taken and more asked for: nobody waits on the client.
        assert_eq!(stream_task_lasted(open_ended_body(2), 2, true).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_answer_held_back_does_not_close_the_connection() {
        let (_client, mut stream, activity) = guarded();
        let body = CountedBody::new(open_ended_body(1), activity.stream_opened());
        let read = tokio::time::timeout(SEND * 5, stream.read(&mut [0u8; 8])).await;
        assert!(read.is_err(), "the connection's reads went on waiting");
        drop(body);
    }
}
