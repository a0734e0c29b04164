//! The plain-HTTP client connection's own HTTP/1 loop, for the requests most connections carry:
//! keep-alive `GET`s without a body.
//!
//! hyper's server reads each request into a new request object, moves the pipeline's future
//! (several kilobytes) into a boxed slot of its dispatcher, and runs it and the response body
//! through a few layers of polling: together the largest block of a proxied page's user time.
//! Here a head is parsed in place from one buffer the connection keeps, the pipeline is awaited
//! where it stands, and the answer's head goes out with the first piece of its body in one
//! `writev`. The connection's deadlines are the same [`IdleDeadline`] hyper's connections read
//! through.
//!
//! Anything else — another method, a request body, an upgrade, `Expect`, HTTP/1.0 or HTTP/2,
//! bytes hyper refuses, a head past the size limit — is handed to hyper with every byte read so
//! far, and hyper (behind the smuggling guard, as on any connection) serves the rest of the
//! connection from there: a client sees hyper's behaviour for every request the loop does not
//! know to be plain.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::{Buf as _, Bytes, BytesMut};
use http::{HeaderMap, Response};
use hyper::body::{Body as _, Frame};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;

use super::activity::ConnectionActivity;
use super::connection::{ClientStream, deadline_stream, handle_recovering, serve_hyper};
use super::deadline::IdleDeadline;
use super::h1_head::{
    BodyFraming, BodyLength, Head, InvalidHead, chunk_size_line, keep_spare_map, last_chunk,
    read_head, write_response_head,
};
use super::send_limit::StreamExecutor;
use crate::app::App;
use crate::pipeline::ConnInfo;
use crate::sys::workers::OpenConnection;
use crate::wire::client_body::ClientBody;
use crate::wire::limits::MAX_HEAD_BYTES;

/// What the read buffer starts with and grows by, as hyper's does.
const READ_CHUNK: usize = 8 * 1024;

/// A stream that first gives back bytes already read from it: what the loop read before
/// handing the connection to hyper.
pub(super) struct Replay<S> {
    pending: Bytes,
    inner: S,
}

impl<S> Replay<S> {
    fn new(inner: S) -> Replay<S> {
        Replay {
            pending: Bytes::new(),
            inner,
        }
    }
}

impl ClientStream for Replay<TcpStream> {
    const TLS: bool = false;
}

impl<S: AsyncRead + Unpin> AsyncRead for Replay<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let taken = this.pending.len().min(buf.remaining());
        buf.put_slice(&this.pending[..taken]);
        this.pending.advance(taken);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replay<S> {
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
        bufs: &[IoSlice<'_>],
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

type ClientIo = IdleDeadline<Replay<TcpStream>>;

/// How the loop left the connection.
enum Ended {
    /// Closed (the client went, a deadline passed, the worker stops, the answer said so).
    Closed,
    /// hyper takes over from these bytes; `served`: requests the loop answered before.
    HandOver { bytes: Bytes, served: u64 },
}

/// Serves a plain-HTTP connection until it ends; `stop_signal` turning true (the worker
/// stopping) closes it once the request in flight, if any, has been answered.
pub(super) async fn serve(
    builder: Arc<auto::Builder<StreamExecutor>>,
    stop_signal: tokio::sync::watch::Receiver<bool>,
    stream: TcpStream,
    peer: SocketAddr,
    activity: Arc<ConnectionActivity>,
    app: Arc<App>,
    held: OpenConnection,
) {
    let conn = ConnInfo {
        peer: Some(crate::pipeline::identity::unmap(peer.ip())),
        tls: false,
    };
    let mut io = deadline_stream(Replay::new(stream), &activity, &app, &held);
    match serve_plain_requests(&mut io, &stop_signal, &activity, &app, conn).await {
        Ended::Closed => drop(held),
        Ended::HandOver { bytes, served } => {
            io.get_mut().pending = bytes;
            // Only a connection's first bytes may be HTTP/2's preface; later ones are HTTP/1.
            let builder = if served == 0 {
                builder
            } else {
                Arc::new((*builder).clone().http1_only())
            };
            serve_hyper(&builder, stop_signal, io, conn, activity, app, held).await;
        }
    }
}

/// Answers plain requests until the connection ends or needs hyper.
async fn serve_plain_requests(
    io: &mut ClientIo,
    stop_signal: &tokio::sync::watch::Receiver<bool>,
    activity: &Arc<ConnectionActivity>,
    app: &Arc<App>,
    conn: ConnInfo,
) -> Ended {
    // Only read, to learn whether the signal moved (one atomic load).
    let stop_version = stop_signal.clone();
    let mut stop_waiter = stop_signal.clone();
    let mut stop = pin!(stop_waiter.wait_for(|stopping| *stopping));
    // See `serve_hyper`: once polled, the task stays registered until the signal moves.
    let mut stop_registered = false;
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut names = Vec::new();
    let mut out = Vec::new();
    let mut served = 0u64;
    loop {
        let (request, keep_alive) = loop {
            if !buf.is_empty() {
                match read_head(&mut buf, &mut names) {
                    Head::Plain {
                        request,
                        keep_alive,
                    } => break (request, keep_alive),
                    Head::Partial if buf.len() < MAX_HEAD_BYTES => {}
                    // hyper reads on to its own limit and answers 431.
                    Head::Partial => return hand_over(None, buf, served),
                    Head::Other(taken) => return hand_over(taken, buf, served),
                }
            }
            crate::wire::buffers::make_room(&mut buf, READ_CHUNK);
            let read = std::future::poll_fn(|cx| {
                if let Poll::Ready(read) =
                    tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, &mut buf)
                {
                    return Poll::Ready(Some(read));
                }
                // A stop signal whose sender is gone counts as a stop.
                if !stop_registered || stop_version.has_changed().unwrap_or(true) {
                    stop_registered = true;
                    if stop.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(None);
                    }
                }
                Poll::Pending
            })
            .await;
            match read {
                // The worker stops: like hyper, a connection between requests closes, even
                // with part of a head read.
                None => return Ended::Closed,
                Some(Ok(0)) if buf.is_empty() => return Ended::Closed,
                // hyper reads the unfinished head and the end of the stream itself.
                Some(Ok(0)) => return hand_over(None, buf, served),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "connection ended with an error");
                    return Ended::Closed;
                }
            }
        };
        // Held until the answer has been written: no read deadline runs meanwhile.
        let exchange = activity.exchange_opened();
        let response = {
            let mut pipeline = pin!(handle_recovering(
                app.clone(),
                conn,
                request.map(|()| ClientBody::Empty)
            ));
            std::future::poll_fn(|cx| {
                if let Poll::Ready(response) = pipeline.as_mut().poll(cx) {
                    return Poll::Ready(Some(response));
                }
                if client_gone(io, &mut buf, cx) {
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await
        };
        // The client went while its request ran: like hyper, the request is dropped, and with
        // it whatever it held (a slot, an origin connection).
        let Some(response) = response else {
            return Ended::Closed;
        };
        // The worker stopping while the request ran: this answer is the connection's last.
        let keep_alive = keep_alive && !stop_version.has_changed().unwrap_or(true);
        let kept = write_response(io, &mut buf, response, keep_alive, &mut out).await;
        drop(exchange);
        served += 1;
        match kept {
            Ok(true) => {}
            Ok(false) => {
                let _ = io.shutdown().await;
                return Ended::Closed;
            }
            Err(e) => {
                tracing::debug!(error = %e, "connection ended with an error");
                return Ended::Closed;
            }
        }
    }
}

/// The bytes hyper is to read first: a head already taken off the buffer, then the buffer.
fn hand_over(taken: Option<Bytes>, buf: BytesMut, served: u64) -> Ended {
    let bytes = match taken {
        None => buf.freeze(),
        Some(taken) => {
            let mut joined = BytesMut::with_capacity(taken.len() + buf.len());
            joined.extend_from_slice(&taken);
            joined.extend_from_slice(&buf);
            joined.freeze()
        }
    };
    Ended::HandOver { bytes, served }
}

/// What the response body gave when asked.
enum Next {
    Frame(Option<Result<Frame<Bytes>, axum::Error>>),
    /// Nothing yet, and the head has not been sent: it goes out first.
    Stalled,
    /// The client went while the body was awaited.
    ClientGone,
}

/// Writes the answer; `Ok(false)` when the connection must close after it (the answer or the
/// client said so, or its body did not match its framing).
async fn write_response(
    io: &mut ClientIo,
    buf: &mut BytesMut,
    response: Response<Body>,
    keep_alive: bool,
    out: &mut Vec<u8>,
) -> io::Result<bool> {
    let (mut parts, mut body) = response.into_parts();
    let length = if body.is_end_stream() {
        BodyLength::Empty
    } else {
        match body.size_hint().exact() {
            Some(length) => BodyLength::Known(length),
            None => BodyLength::Unknown,
        }
    };
    out.clear();
    let written = write_response_head(
        parts.status,
        parts.version,
        &mut parts.headers,
        length,
        keep_alive,
        out,
    );
    // Emptied by writing the head; its room serves the next request's headers.
    keep_spare_map(parts.headers);
    let written = match written {
        Ok(written) => written,
        // hyper drops such a connection without an answer.
        Err(InvalidHead) => return Ok(false),
    };
    let mut head_pending = true;
    let complete = match &written.framing {
        BodyFraming::Length(0) => {
            write_all(io, &mut [IoSlice::new(out)]).await?;
            true
        }
        BodyFraming::Length(length) => {
            let mut left = *length;
            loop {
                match next_frame(&mut body, head_pending, io, buf).await {
                    Next::ClientGone => break false,
                    Next::Stalled => {
                        write_all(io, &mut [IoSlice::new(out)]).await?;
                        head_pending = false;
                    }
                    Next::Frame(Some(Ok(frame))) => {
                        let Ok(data) = frame.into_data() else {
                            continue;
                        };
                        // Never more than the head announced.
                        let taken = data.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                        if taken == 0 {
                            continue;
                        }
                        let head: &[u8] = if head_pending { out } else { &[] };
                        write_all(io, &mut [IoSlice::new(head), IoSlice::new(&data[..taken])])
                            .await?;
                        head_pending = false;
                        left -= taken as u64;
                        if left == 0 {
                            break true;
                        }
                    }
                    Next::Frame(Some(Err(_))) => break false,
                    // The body ended short of its length.
                    Next::Frame(None) => break false,
                }
            }
        }
        BodyFraming::Chunked(allowed) => loop {
            match next_frame(&mut body, head_pending, io, buf).await {
                Next::ClientGone => break false,
                Next::Stalled => {
                    write_all(io, &mut [IoSlice::new(out)]).await?;
                    head_pending = false;
                }
                Next::Frame(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => {
                        let mut line = [0u8; 18];
                        let size = chunk_size_line(data.len(), &mut line);
                        let head: &[u8] = if head_pending { out } else { &[] };
                        write_all(
                            io,
                            &mut [
                                IoSlice::new(head),
                                IoSlice::new(size),
                                IoSlice::new(&data),
                                IoSlice::new(b"\r\n"),
                            ],
                        )
                        .await?;
                        head_pending = false;
                    }
                    Err(frame) => {
                        let end = end_of_chunks(frame.trailers_ref(), allowed.as_deref());
                        let head: &[u8] = if head_pending { out } else { &[] };
                        write_all(io, &mut [IoSlice::new(head), IoSlice::new(&end)]).await?;
                        break true;
                    }
                },
                Next::Frame(Some(Err(_))) => break false,
                Next::Frame(None) => {
                    let end = end_of_chunks(None, None);
                    let head: &[u8] = if head_pending { out } else { &[] };
                    write_all(io, &mut [IoSlice::new(head), IoSlice::new(&end)]).await?;
                    break true;
                }
            }
        },
        BodyFraming::UntilClose => loop {
            match next_frame(&mut body, head_pending, io, buf).await {
                Next::ClientGone => break false,
                Next::Stalled => {
                    write_all(io, &mut [IoSlice::new(out)]).await?;
                    head_pending = false;
                }
                Next::Frame(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        let head: &[u8] = if head_pending { out } else { &[] };
                        write_all(io, &mut [IoSlice::new(head), IoSlice::new(&data)]).await?;
                        head_pending = false;
                    }
                }
                Next::Frame(Some(Err(_))) => break false,
                Next::Frame(None) => {
                    if head_pending {
                        write_all(io, &mut [IoSlice::new(out)]).await?;
                    }
                    break true;
                }
            }
        },
    };
    Ok(complete && !written.last)
}

fn end_of_chunks(trailers: Option<&HeaderMap>, allowed: Option<&[http::HeaderName]>) -> Vec<u8> {
    let mut end = Vec::new();
    last_chunk(trailers, allowed, &mut end);
    end
}

/// The body's next frame; [`Next::Stalled`] instead of waiting while the head is unsent.
async fn next_frame(
    body: &mut Body,
    head_pending: bool,
    io: &mut ClientIo,
    buf: &mut BytesMut,
) -> Next {
    std::future::poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
        Poll::Ready(frame) => Poll::Ready(Next::Frame(frame)),
        Poll::Pending if head_pending => Poll::Ready(Next::Stalled),
        Poll::Pending if client_gone(io, buf, cx) => Poll::Ready(Next::ClientGone),
        Poll::Pending => Poll::Pending,
    })
    .await
}

/// While a request is answered: whether the client has closed its side or the connection
/// failed, so the answer is dropped, as hyper drops it. Bytes of a next request wait in `buf`,
/// and once some are there nothing more is read until the answer is out.
fn client_gone(io: &mut ClientIo, buf: &mut BytesMut, cx: &mut Context<'_>) -> bool {
    if !buf.is_empty() {
        return false;
    }
    // A small read on the stack: the buffer's room may still be shared with the request's
    // head, and growing it would allocate for every request.
    let mut probe = [0u8; 256];
    let mut probe = ReadBuf::new(&mut probe);
    match Pin::new(io).poll_read(cx, &mut probe) {
        Poll::Ready(Ok(())) if probe.filled().is_empty() => true,
        Poll::Ready(Ok(())) => {
            buf.extend_from_slice(probe.filled());
            false
        }
        Poll::Ready(Err(_)) => true,
        Poll::Pending => false,
    }
}

/// Writes every slice, with as few `writev`s as the socket takes.
async fn write_all(io: &mut ClientIo, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let written =
            std::future::poll_fn(|cx| Pin::new(&mut *io).poll_write_vectored(cx, slices)).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, written);
    }
    Ok(())
}
