//! The origin's response body on the direct path, read from its connection by whoever polls
//! it, decoded as its head framed it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, Bytes, BytesMut};
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use hyper::body::{Frame, SizeHint};

use super::conn::{Answer, DirectPool, OriginConn};
use super::head::{Chunk, Framing};
use crate::proxy::error::body_failed;
use crate::sys::slots::SlotHold;
use crate::wire::codec::parse_chunk_size;
use crate::wire::limits::MAX_HEADERS;

/// Largest chunk-size line (with extensions) of a chunked body.
const MAX_CHUNK_LINE: usize = 4 * 1024;

/// Largest trailer section of a chunked body.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// The origin's response body, read from its connection by whoever polls it, frame by frame
/// as the bytes arrive (server-sent events pass at once). The slot hold is dropped with the
/// last frame, on a failure, or when the client goes away and the body is dropped. The
/// connection returns to the pool only after a complete, cleanly framed body.
pub(in crate::proxy) struct DirectBody {
    conn: Option<OriginConn>,
    framing: Framing,
    reusable: bool,
    pool: Arc<DirectPool>,
    hold: Option<SlotHold>,
    /// A failure held back for one poll; see [`DirectBody::fail`].
    failure: Option<io::Error>,
}

/// One decoding step's outcome.
enum Step {
    Frame(Frame<Bytes>),
    NeedMore,
    End,
}

impl DirectBody {
    pub(in crate::proxy) fn new(
        answer: Answer,
        pool: &Arc<DirectPool>,
        hold: Option<SlotHold>,
    ) -> (http::response::Parts, DirectBody) {
        let mut body = DirectBody {
            conn: Some(answer.conn),
            framing: answer.framing,
            reusable: answer.reusable,
            pool: Arc::clone(pool),
            hold,
            failure: None,
        };
        match body.framing {
            // A body that is over before it starts may never be polled: give the connection
            // back now. The hold stays until the response is dropped, as for any other body.
            Framing::Empty | Framing::Length(0) => body.finish_reading(),
            _ => {}
        }
        (answer.head, body)
    }

    /// The body has been read to its end: the connection goes back if it can be reused.
    fn finish_reading(&mut self) {
        self.framing = Framing::Empty;
        if let Some(conn) = self.conn.take()
            && self.reusable
            && conn.buf.is_empty()
        {
            self.pool.put_back(conn);
        }
    }

    /// The origin failed mid-body. The slot and the connection go at once, but the error is
    /// reported one poll later: hyper drops the connection as soon as a body fails, and bytes
    /// it has buffered but not yet written (the head, the last frame) would be lost with it.
    /// Answering `Pending` first lets it flush them, so the client sees the status and the
    /// body cut short rather than an empty reply. The framing stays as it was meanwhile, so
    /// hyper cannot take the body for complete.
    fn fail(
        &mut self,
        err: io::Error,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        body_failed(&self.pool.failures, &err);
        self.hold = None;
        self.conn = None;
        self.failure = Some(err);
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Decodes what the buffer holds without reading.
    fn step(&mut self) -> io::Result<Step> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(Step::End);
        };
        let buf = &mut conn.buf;
        match &mut self.framing {
            Framing::Empty => Ok(Step::End),
            Framing::Length(remaining) | Framing::Chunked(Chunk::Data(remaining)) => {
                if buf.is_empty() {
                    return Ok(Step::NeedMore);
                }
                let take = usize::try_from(*remaining)
                    .unwrap_or(usize::MAX)
                    .min(buf.len());
                let data = buf.split_to(take).freeze();
                *remaining -= take as u64;
                if *remaining == 0 {
                    match self.framing {
                        Framing::Chunked(_) => self.framing = Framing::Chunked(Chunk::DataEnd),
                        _ => self.finish_reading(),
                    }
                }
                Ok(Step::Frame(Frame::data(data)))
            }
            Framing::UntilClose => {
                if buf.is_empty() {
                    return Ok(Step::NeedMore);
                }
                Ok(Step::Frame(Frame::data(buf.split().freeze())))
            }
            Framing::Chunked(Chunk::Size) => {
                let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
                    if buf.len() > MAX_CHUNK_LINE {
                        return Err(invalid_body("chunk-size line too long"));
                    }
                    return Ok(Step::NeedMore);
                };
                let line = buf[..newline]
                    .strip_suffix(b"\r")
                    .unwrap_or(&buf[..newline]);
                let size = parse_chunk_size(line).ok_or_else(|| invalid_body("bad chunk size"))?;
                buf.advance(newline + 1);
                self.framing = Framing::Chunked(if size == 0 {
                    Chunk::Trailers
                } else {
                    Chunk::Data(size)
                });
                self.step()
            }
            Framing::Chunked(Chunk::DataEnd) => {
                let ending = match &buf[..] {
                    [b'\n', ..] => 1,
                    [b'\r', b'\n', ..] => 2,
                    [] | [b'\r'] => return Ok(Step::NeedMore),
                    _ => return Err(invalid_body("chunk not followed by CRLF")),
                };
                buf.advance(ending);
                self.framing = Framing::Chunked(Chunk::Size);
                self.step()
            }
            Framing::Chunked(Chunk::Trailers) => {
                let blank = match &buf[..] {
                    [b'\n', ..] => Some(1),
                    [b'\r', b'\n', ..] => Some(2),
                    [] | [b'\r'] => return Ok(Step::NeedMore),
                    _ => None,
                };
                if let Some(blank) = blank {
                    buf.advance(blank);
                    self.finish_reading();
                    return Ok(Step::End);
                }
                let trailers = match parse_trailers(buf)? {
                    Some(trailers) => trailers,
                    None => return Ok(Step::NeedMore),
                };
                self.finish_reading();
                Ok(Step::Frame(Frame::trailers(trailers)))
            }
        }
    }
}

/// Parses a complete trailer section at the front of the buffer, consuming it.
fn parse_trailers(buf: &mut BytesMut) -> io::Result<Option<HeaderMap>> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let (len, lines) = match httparse::parse_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete((len, lines))) => (len, lines),
        Ok(httparse::Status::Partial) if buf.len() > MAX_TRAILER_BYTES => {
            return Err(invalid_body("trailer section too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(invalid_body("bad trailer section")),
    };
    let mut trailers = HeaderMap::with_capacity(lines.len());
    for line in lines.iter() {
        let name = HeaderName::from_bytes(line.name.as_bytes())
            .map_err(|_| invalid_body("bad trailer name"))?;
        let value =
            HeaderValue::from_bytes(line.value).map_err(|_| invalid_body("bad trailer value"))?;
        trailers.append(name, value);
    }
    buf.advance(len);
    Ok(Some(trailers))
}

fn invalid_body(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl hyper::body::Body for DirectBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(err) = this.failure.take() {
            this.framing = Framing::Empty;
            return Poll::Ready(Some(Err(err)));
        }
        loop {
            match this.step() {
                Err(err) => return this.fail(err, cx),
                Ok(Step::Frame(frame)) => {
                    if this.framing == Framing::Empty {
                        this.hold = None;
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Ok(Step::End) => {
                    this.hold = None;
                    return Poll::Ready(None);
                }
                Ok(Step::NeedMore) => {}
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if this.framing == Framing::UntilClose => {
                    this.conn = None;
                    this.framing = Framing::Empty;
                    this.hold = None;
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    return this.fail(
                        io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the origin closed the connection before the body ended",
                        ),
                        cx,
                    );
                }
                Ok(_) => {}
                Err(err) => return this.fail(err, cx),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.framing == Framing::Empty
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Empty => SizeHint::with_exact(0),
            Framing::Length(remaining) => SizeHint::with_exact(remaining),
            _ => SizeHint::default(),
        }
    }
}
