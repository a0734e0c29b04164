//! Bodiless requests to a plain-HTTP origin, exchanged on the caller's own task.
//!
//! Most page and asset requests carry no body. For them the proxy writes the request head
//! straight onto a pooled origin connection and reads the response head back in the same task
//! that serves the client; the response body is then read from the origin socket by whoever
//! polls it (the client connection writing it out). Nothing crosses a task or a channel, and
//! the connection goes back to the pool when the body's last byte has been read.
//!
//! Requests with a body keep using `pool`, whose connection task can read an early answer
//! while the upload is still going on.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode, Version};
use hyper::body::{Frame, SizeHint};
use tokio::io::AsyncWrite as _;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::SlotHold;
use super::headers::{HeaderSink, RESPONSE_HOP_BY_HOP, first_item_len, list_items};
use super::idle::IdleList;
use super::pool::{PoolError, PoolLimits, connect_tcp};
use super::target::Target;
use crate::sys::moving_timer::MovingTimer;
use crate::wire::codec::{parse_chunk_size, parse_decimal};
use crate::wire::limits::MAX_HEADERS;

/// Largest response head (status line and headers) read before giving up.
const MAX_HEAD_BYTES: usize = 128 * 1024;
/// Largest chunk-size line (with extensions) of a chunked body.
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// Largest trailer section of a chunked body.
const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// Response headers the proxy may add to an origin's answer without regrowing its map.
const RESPONSE_HEADROOM: usize = 4;
/// Free space made in the read buffer before each read.
const READ_RESERVE: usize = 16 * 1024;

/// What went wrong talking to the origin.
#[derive(Debug, thiserror::Error)]
pub(super) enum DirectError {
    #[error(transparent)]
    Connect(#[from] PoolError),
    #[error("writing the request to the origin failed")]
    Write(#[source] io::Error),
    #[error("reading the response from the origin failed")]
    Read(#[source] io::Error),
    #[error("reading the response from the origin failed after it began to answer")]
    ReadInHead(#[source] io::Error),
    #[error("the origin closed the connection without answering")]
    Closed,
    #[error("the origin closed the connection in the middle of the response head")]
    ClosedInHead,
    #[error("the origin's response head is invalid: {0}")]
    Invalid(&'static str),
    #[error("the origin's response head could not be parsed")]
    Parse(#[source] httparse::Error),
    #[error("the origin's response head is larger than {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("no response head before the deadline")]
    TimedOut,
}

impl DirectError {
    /// Whether the connection failed before the origin answered anything: found closed while
    /// writing, or closed or reset before a single response byte (an interim 1xx counts as an
    /// answer). Only then may an idempotent request be sent again.
    fn before_any_answer(&self) -> bool {
        matches!(self, DirectError::Write(_) | DirectError::Closed)
            || matches!(self, DirectError::Read(err) if err.kind() == io::ErrorKind::ConnectionReset)
    }
}

/// One keep-alive connection to the origin and the bytes read from it but not yet used.
pub(super) struct OriginConn {
    stream: TcpStream,
    buf: BytesMut,
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
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_RESERVE / 4 {
            self.buf.reserve(READ_RESERVE);
        }
        // Through `AsyncRead` rather than `try_read_buf`: a read that leaves room in the buffer
        // tells tokio the socket is drained, so the idle probe in `is_usable` is answered from
        // the readiness tokio already holds instead of a `recvfrom` that fails with EAGAIN.
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.buf)
    }
}

/// Keep-alive connections to one origin for bodiless requests.
pub(super) struct DirectPool {
    addr: Arc<str>,
    limits: PoolLimits,
    idle: IdleList<OriginConn>,
}

/// The origin's answer: its head, how its body is framed, and the connection carrying it.
pub(super) struct Answer {
    pub head: http::response::Parts,
    pub framing: Framing,
    /// The connection can take another request once the body has been read: the framing
    /// delimits the body, and the origin neither said it closes nor spoke HTTP/1.0.
    pub reusable: bool,
    pub conn: OriginConn,
}

/// How the end of a response body is found (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// No body: a `HEAD` request, or a 1xx, 204 or 304 answer.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunk),
    /// Everything until the origin closes the connection.
    UntilClose,
}

/// Where a chunked body decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

impl DirectPool {
    pub(super) fn new(addr: &str, limits: PoolLimits) -> DirectPool {
        DirectPool {
            addr: Arc::from(addr),
            limits,
            idle: IdleList::new(limits.max_idle, limits.idle_timeout),
        }
    }

    /// Sends a bodiless request (`head` is its complete head) and reads the response head.
    ///
    /// An idempotent request that finds its pooled connection closed before any answer is
    /// sent once more on a new connection; other requests are never sent twice.
    pub(super) async fn send(
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
    fn put_back(&self, conn: OriginConn) {
        self.idle.push(conn);
    }

    /// Idle connections currently held.
    #[cfg(test)]
    pub(super) fn idle_count(&self) -> usize {
        self.idle.len()
    }

    /// Idle connections the origin has not been seen closing.
    #[cfg(test)]
    pub(super) fn idle_open_count(&self, thorough: bool) -> usize {
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
        if conn.buf.len() >= MAX_HEAD_BYTES {
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

/// The first header names of a connection's last response as the origin wrote them, with
/// their parsed form. An origin sends the same names in the same order on every response, and
/// comparing the bytes costs a fraction of parsing a name again.
#[derive(Default)]
struct KnownNames(Vec<(Box<[u8]>, HeaderName)>);

impl KnownNames {
    /// Names kept, and the longest kept, so an idle connection holds little.
    const KEPT: usize = 32;
    const KEPT_LENGTH: usize = 64;

    /// The parsed name of header `index`, whose bytes are `raw`; `None` for an invalid name.
    fn name(&mut self, index: usize, raw: &[u8]) -> Option<HeaderName> {
        if let Some((known, name)) = self.0.get(index)
            && **known == *raw
        {
            return Some(name.clone());
        }
        let name = HeaderName::from_bytes(raw).ok()?;
        if index < Self::KEPT && raw.len() <= Self::KEPT_LENGTH {
            let entry = (Box::from(raw), name.clone());
            if index < self.0.len() {
                self.0[index] = entry;
            } else if index == self.0.len() {
                self.0.push(entry);
            }
        }
        Some(name)
    }
}

/// Parses a complete response head at the front of the buffer, consuming it. Interim (1xx)
/// answers are skipped; `None` means more bytes are needed.
fn parse_head(
    buf: &mut BytesMut,
    spans: &mut Vec<(HeaderName, usize, usize)>,
    names: &mut KnownNames,
    answers_without_body: bool,
) -> Result<Option<(http::response::Parts, Framing, bool)>, DirectError> {
    loop {
        // Left uninitialised: zeroing room for MAX_HEADERS lines on every response cost more
        // than parsing the few an origin sends.
        let mut slots = [const { MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut []);
        let mut config = httparse::ParserConfig::default();
        config.allow_spaces_after_header_name_in_responses(true);
        let len = match config.parse_response_with_uninit_headers(&mut parsed, &*buf, &mut slots) {
            // A read can bring in more than the limit at once: the limit is the head's size,
            // not how much the buffer held when it was last checked.
            Ok(httparse::Status::Complete(len)) if len > MAX_HEAD_BYTES => {
                return Err(DirectError::HeadTooLarge);
            }
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(err) => return Err(DirectError::Parse(err)),
        };
        // `StatusCode` takes 100..=999, but HTTP ends at 599 (RFC 9110 §15).
        let status = parsed
            .code
            .filter(|code| *code <= 599)
            .and_then(|code| StatusCode::from_u16(code).ok())
            .ok_or(DirectError::Invalid("status code"))?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(DirectError::Invalid(
                "switching protocols without being asked to",
            ));
        }
        if status.is_informational() {
            buf.advance(len);
            if buf.is_empty() {
                return Ok(None);
            }
            continue;
        }
        let version = match parsed.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        let base = buf.as_ptr() as usize;
        spans.clear();
        for (index, line) in parsed.headers.iter().enumerate() {
            let name = names
                .name(index, line.name.as_bytes())
                .ok_or(DirectError::Invalid("header name"))?;
            let start = line.value.as_ptr() as usize - base;
            spans.push((name, start, start + line.value.len()));
        }
        let (found, head_bytes) = (&*spans, &*buf);
        let values_of = |wanted: HeaderName| {
            found
                .iter()
                .filter(move |(name, _, _)| *name == wanted)
                .map(|&(_, start, end)| &head_bytes[start..end])
        };
        let last_coding = values_of(header::TRANSFER_ENCODING).next_back();
        let transfer_coded = last_coding.is_some();
        let (framing, framing_reusable) = framing_of(
            status,
            answers_without_body,
            last_coding,
            values_of(header::CONTENT_LENGTH),
        )?;
        // `keep-alive` and `close` name no header the answer keeps; anything else an origin's
        // `Connection` lists is rare, and only then is each header looked up in it.
        let (mut closes, mut names_more) = (false, false);
        for token in values_of(header::CONNECTION).flat_map(list_items) {
            if token.eq_ignore_ascii_case(b"close") {
                closes = true;
            } else if !token.eq_ignore_ascii_case(b"keep-alive") {
                names_more = true;
            }
        }
        let connection_values: Vec<(usize, usize)> = if names_more {
            spans
                .iter()
                .filter(|(name, _, _)| *name == header::CONNECTION)
                .map(|&(_, start, end)| (start, end))
                .collect()
        } else {
            Vec::new()
        };
        let raw = buf.split_to(len).freeze();
        // Room for what the proxy adds on the way out (the admission pass and priority
        // cookies), so adding them does not regrow the map.
        let mut headers = HeaderMap::with_capacity(spans.len() + RESPONSE_HEADROOM);
        let mut length_kept = false;
        for (name, start, mut end) in spans.drain(..) {
            // Hop-by-hop headers are left out rather than removed afterwards (a removal hashes
            // the name): those RFC 9110 §7.6.1 names, those the origin's `Connection` lists,
            // and a length beside a transfer coding (RFC 9112 §6.3).
            if RESPONSE_HOP_BY_HOP.contains(&name)
                || (transfer_coded && name == header::CONTENT_LENGTH)
                || connection_values
                    .iter()
                    .flat_map(|&(start, end)| list_items(&raw[start..end]))
                    .any(|token| token.eq_ignore_ascii_case(name.as_str().as_bytes()))
            {
                continue;
            }
            if name == header::CONTENT_LENGTH {
                // Repeated or listed lengths agree (the framing checked), but are passed on as
                // one value (RFC 9110 §8.6): a client may read `5, 5` differently.
                if std::mem::replace(&mut length_kept, true) {
                    continue;
                }
                if let Some(len) = first_item_len(&raw[start..end]) {
                    end = start + len;
                }
            }
            let value = HeaderValue::from_maybe_shared(raw.slice(start..end))
                .map_err(|_| DirectError::Invalid("header value"))?;
            headers.append(name, value);
        }
        let (mut head, ()) = http::Response::new(()).into_parts();
        head.status = status;
        head.version = version;
        head.headers = headers;
        // An origin that says it closes, or speaks HTTP/1.0, does not get the connection back.
        let reusable = framing_reusable && !closes && version == Version::HTTP_11;
        return Ok(Some((head, framing, reusable)));
    }
}

/// How the body is delimited, and whether that leaves the connection reusable afterwards.
fn framing_of<'h>(
    status: StatusCode,
    answers_without_body: bool,
    last_transfer_coding: Option<&[u8]>,
    mut content_lengths: impl Iterator<Item = &'h [u8]>,
) -> Result<(Framing, bool), DirectError> {
    if answers_without_body
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, true));
    }
    if let Some(coding) = last_transfer_coding {
        let chunked = coding
            .rsplit(|&b| b == b',')
            .next()
            .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        // A length next to a transfer coding is ignored, and the message was a smuggling
        // attempt or a broken origin: the connection is not trusted again (RFC 9112 §6.3).
        let had_length = content_lengths.next().is_some();
        return Ok(if chunked {
            (Framing::Chunked(Chunk::Size), !had_length)
        } else {
            (Framing::UntilClose, false)
        });
    }
    let mut length: Option<u64> = None;
    for value in content_lengths {
        for item in value.split(|&b| b == b',') {
            let parsed =
                parse_decimal(item.trim_ascii()).ok_or(DirectError::Invalid("content-length"))?;
            if length.is_some_and(|seen| seen != parsed) {
                return Err(DirectError::Invalid("conflicting content-length values"));
            }
            length = Some(parsed);
        }
    }
    Ok(match length {
        Some(length) => (Framing::Length(length), true),
        None => (Framing::UntilClose, false),
    })
}

/// The head of a bodiless request, written straight into the bytes sent to the origin: the
/// request line when started, then each header as the rewrite passes it, then the blank line.
pub(super) struct RequestHead {
    bytes: Vec<u8>,
}

/// The bytes `headers` take in a request head, each line being `name: value` and CRLF.
pub(super) fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum()
}

impl RequestHead {
    /// Writes the request line. The origin-form target is refused unless it is visible ASCII,
    /// since anything else would end or split the request line. `header_bytes` sizes the
    /// buffer for the headers to come.
    pub(super) fn start(
        method: &Method,
        target: &Target,
        path_and_query: &str,
        header_bytes: usize,
    ) -> Option<RequestHead> {
        const VERSION: &str = " HTTP/1.1\r\n";
        let line_bytes =
            method.as_str().len() + 1 + target.origin_form_len(path_and_query) + VERSION.len();
        let mut line = String::with_capacity(line_bytes + header_bytes + 2);
        line.push_str(method.as_str());
        line.push(' ');
        let target_start = line.len();
        target.push_origin_form(&mut line, path_and_query);
        let written = &line.as_bytes()[target_start..];
        if written.is_empty()
            || !written
                .iter()
                .all(|&b| (0x21..0x7f).contains(&b) && b != b'#')
        {
            return None;
        }
        line.push_str(VERSION);
        Some(RequestHead {
            bytes: line.into_bytes(),
        })
    }

    /// Ends the head with its blank line.
    pub(super) fn finish(mut self) -> Vec<u8> {
        self.bytes.extend_from_slice(b"\r\n");
        self.bytes
    }
}

impl HeaderSink for RequestHead {
    fn put(&mut self, name: &HeaderName, value: HeaderValue) {
        self.put_pieces(name, &[value.as_bytes()]);
    }

    fn put_pieces(&mut self, name: &HeaderName, pieces: &[&[u8]]) {
        self.bytes.extend_from_slice(name.as_str().as_bytes());
        self.bytes.extend_from_slice(b": ");
        for piece in pieces {
            self.bytes.extend_from_slice(piece);
        }
        self.bytes.extend_from_slice(b"\r\n");
    }
}

/// The origin's response body, read from its connection by whoever polls it, frame by frame
/// as the bytes arrive (server-sent events pass at once). The slot hold is dropped with the
/// last frame, on a failure, or when the client goes away and the body is dropped. The
/// connection returns to the pool only after a complete, cleanly framed body.
pub(super) struct DirectBody {
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
    pub(super) fn new(
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
        tracing::warn!(error = %err, "proxy: origin response body failed");
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use http_body_util::BodyExt as _;
    use parking_lot::Mutex;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    const LIMITS: PoolLimits = PoolLimits {
        max_idle: 16,
        idle_timeout: Duration::from_secs(90),
        connect_timeout: Duration::from_secs(5),
        tcp_keepalive: Duration::from_secs(30),
    };

    /// A raw origin: on each connection it reads request heads and answers the n-th one with
    /// `answers[n]`, written in pieces of `piece` bytes; past the script it closes.
    struct ScriptedOrigin {
        addr: String,
        accepted: Arc<AtomicUsize>,
        requests: Arc<AtomicUsize>,
        /// Heads seen, in order.
        heads: Arc<Mutex<Vec<String>>>,
    }

    async fn scripted_origin<A>(answers: Vec<A>, piece: usize) -> ScriptedOrigin
    where
        A: AsRef<[u8]> + Clone + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = ScriptedOrigin {
            addr: listener.local_addr().unwrap().to_string(),
            accepted: Arc::default(),
            requests: Arc::default(),
            heads: Arc::default(),
        };
        let (accepted, requests, heads) = (
            Arc::clone(&origin.accepted),
            Arc::clone(&origin.requests),
            Arc::clone(&origin.heads),
        );
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let answers = answers.clone();
                let (requests, heads) = (Arc::clone(&requests), Arc::clone(&heads));
                tokio::spawn(async move {
                    for answer in answers {
                        let Some(head) = read_head(&mut stream).await else {
                            return;
                        };
                        requests.fetch_add(1, Ordering::SeqCst);
                        heads.lock().push(head);
                        let answer = answer.as_ref();
                        for part in answer.chunks(piece) {
                            if stream.write_all(part).await.is_err() {
                                return;
                            }
                            if piece < answer.len() {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                        }
                    }
                });
            }
        });
        origin
    }

    async fn read_head(stream: &mut TcpStream) -> Option<String> {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            match stream.read(&mut byte).await {
                Ok(1) => head.push(byte[0]),
                _ => return None,
            }
        }
        String::from_utf8(head).ok()
    }

    fn get_head() -> Vec<u8> {
        b"GET /x HTTP/1.1\r\nhost: origin\r\n\r\n".to_vec()
    }

    /// Everything the body yields: the data joined, and the trailers if any.
    async fn drain(body: DirectBody) -> Result<(Vec<u8>, Option<HeaderMap>), io::Error> {
        let mut body = std::pin::pin!(body);
        let mut data = Vec::new();
        let mut trailers = None;
        while let Some(frame) = body.frame().await {
            let frame = frame?;
            match frame.into_data() {
                Ok(bytes) => data.extend_from_slice(&bytes),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        Ok((data, trailers))
    }

    async fn fetch(
        pool: &Arc<DirectPool>,
        method: Method,
    ) -> Result<
        (
            StatusCode,
            HeaderMap,
            Result<(Vec<u8>, Option<HeaderMap>), io::Error>,
        ),
        DirectError,
    > {
        let head = format!("{method} /x HTTP/1.1\r\nhost: origin\r\n\r\n");
        let answer = pool.send(&method, head.as_bytes(), None).await?;
        let (head, body) = DirectBody::new(answer, pool, None);
        Ok((head.status, head.headers, drain(body).await))
    }

    /// An answer, the body it carries, and its one trailer if any.
    type DecodeCase = (
        &'static [u8],
        &'static [u8],
        Option<(&'static str, &'static str)>,
    );
    type IsExpected = fn(&DirectError) -> bool;

    /// Response lines drawn from names and values that exercise the hop-by-hop rules.
    fn response_lines()
    -> impl proptest::strategy::Strategy<Value = Vec<(&'static str, &'static str)>> {
        const NAMES: &[&str] = &[
            "Connection",
            "connection",
            "Keep-Alive",
            "Transfer-Encoding",
            "Content-Length",
            "TE",
            "Upgrade",
            "Proxy-Authenticate",
            "Set-Cookie",
            "X-A",
            "x-a",
            "Trailer",
        ];
        const VALUES: &[&str] = &[
            "close",
            "keep-alive",
            "Keep-Alive, X-A",
            "x-a , close",
            "set-cookie",
            "chunked",
            "gzip, chunked",
            "chunked, gzip",
            "5",
            "5, 5",
            "6",
            "Content-Length",
            "transfer-encoding",
            "upgrade",
            "",
        ];
        proptest::collection::vec(
            (
                proptest::sample::select(NAMES),
                proptest::sample::select(VALUES),
            ),
            0..8,
        )
    }

    proptest::proptest! {
        /// Leaving hop-by-hop headers out while parsing gives what building the whole map and
        /// then stripping it (as the pooled client's answers are) gives.
        #[test]
        fn parsed_heads_match_the_stripped_map(
            lines in response_lines(),
            status in proptest::sample::select(&[200u16, 204, 304, 404][..]),
            head_request: bool,
            http_10: bool,
        ) {
            let mut raw = format!("HTTP/1.{} {status} X\r\n", u8::from(!http_10));
            let mut whole = HeaderMap::new();
            for (name, value) in &lines {
                raw.push_str(&format!("{name}: {value}\r\n"));
                whole.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_static(value),
                );
            }
            raw.push_str("\r\n");
            let status = StatusCode::from_u16(status).unwrap();
            let last_coding = whole
                .get_all(header::TRANSFER_ENCODING)
                .iter()
                .next_back()
                .map(HeaderValue::as_bytes);
            let lengths = whole.get_all(header::CONTENT_LENGTH).iter().map(HeaderValue::as_bytes);
            let expected = framing_of(status, head_request, last_coding, lengths);
            let mut buf = BytesMut::from(raw.as_bytes());
            let parsed = parse_head(&mut buf, &mut Vec::new(), &mut KnownNames::default(), head_request);
            let (parsed, expected) = match (parsed, expected) {
                (Err(_), Err(_)) => return Ok(()),
                (Ok(Some(parsed)), Ok(expected)) => (parsed, expected),
                (parsed, expected) => {
                    return Err(proptest::test_runner::TestCaseError::fail(format!(
                        "parsed {parsed:?}, expected {expected:?}"
                    )))
                }
            };
            let (head, framing, reusable) = parsed;
            let closes = super::super::headers::strip_response(&mut whole, false);
            proptest::prop_assert!(buf.is_empty());
            proptest::prop_assert_eq!(framing, expected.0);
            proptest::prop_assert_eq!(reusable, expected.1 && !closes && !http_10);
            let names: std::collections::BTreeSet<_> =
                head.headers.keys().chain(whole.keys()).map(HeaderName::as_str).collect();
            for name in names {
                let kept: Vec<_> = head.headers.get_all(name).iter().collect();
                let stripped: Vec<_> = whole.get_all(name).iter().collect();
                proptest::prop_assert_eq!(kept, stripped, "{}", name);
            }
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let framing = |status: u16, pairs: &[(&str, &str)], head_request: bool| {
            let values_of = |wanted: &'static str| {
                pairs
                    .iter()
                    .filter(move |(name, _)| *name == wanted)
                    .map(|(_, value)| value.as_bytes())
            };
            let status = StatusCode::from_u16(status).unwrap();
            let last_coding = values_of("transfer-encoding").next_back();
            framing_of(
                status,
                head_request,
                last_coding,
                values_of("content-length"),
            )
        };
        let length = [("content-length", "5")];
        assert_eq!(framing(200, &length, true).unwrap(), (Framing::Empty, true));
        assert_eq!(framing(204, &[], false).unwrap(), (Framing::Empty, true));
        assert_eq!(
            framing(304, &length, false).unwrap(),
            (Framing::Empty, true)
        );
        assert_eq!(
            framing(200, &length, false).unwrap(),
            (Framing::Length(5), true)
        );
        let repeated = [("content-length", "5, 5"), ("content-length", "5")];
        assert_eq!(
            framing(200, &repeated, false).unwrap(),
            (Framing::Length(5), true)
        );
        for bad in [
            &[("content-length", "5"), ("content-length", "6")][..],
            &[("content-length", "-1")],
            &[("content-length", "0x5")],
            &[("content-length", "99999999999999999999")],
        ] {
            assert!(framing(200, bad, false).is_err(), "{bad:?}");
        }
        let chunked = [("transfer-encoding", "gzip, chunked")];
        assert_eq!(
            framing(200, &chunked, false).unwrap(),
            (Framing::Chunked(Chunk::Size), true)
        );
        let not_last = [("transfer-encoding", "chunked, gzip")];
        assert_eq!(
            framing(200, &not_last, false).unwrap(),
            (Framing::UntilClose, false)
        );
        let both = [("transfer-encoding", "chunked"), ("content-length", "5")];
        let found = framing(200, &both, false).unwrap();
        assert_eq!(found, (Framing::Chunked(Chunk::Size), false));
        assert_eq!(
            framing(200, &[], false).unwrap(),
            (Framing::UntilClose, false)
        );
    }

    fn target(upstream: &str) -> Target {
        Target::new(&upstream.parse().unwrap()).unwrap()
    }

    /// The head for `headers` taken as they are.
    fn request_head(
        method: &Method,
        target: &Target,
        path_and_query: &str,
        headers: &HeaderMap,
    ) -> Option<Vec<u8>> {
        let mut head = RequestHead::start(method, target, path_and_query, header_bytes(headers))?;
        for (name, value) in headers {
            head.put(name, value.clone());
        }
        Some(head.finish())
    }

    #[test]
    fn request_target_must_be_visible_ascii() {
        let headers = HeaderMap::new();
        let plain = target("http://origin");
        let head = request_head(&Method::GET, &plain, "/a?b=c", &headers).unwrap();
        assert_eq!(head, b"GET /a?b=c HTTP/1.1\r\n\r\n");
        for bad in ["/a b", "/a\r\nx: y", "/a#frag", "/caf\u{e9}", "/a\u{7f}"] {
            assert!(
                request_head(&Method::GET, &plain, bad, &headers).is_none(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn request_head_is_one_exact_allocation() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("example.test"));
        headers.insert("x-forwarded-for", HeaderValue::from_static("192.0.2.1"));
        for (upstream, path) in [
            ("http://origin", "/"),
            ("http://origin/base?k=v", "/p/q?x=1"),
            ("http://origin/base/", "/p"),
        ] {
            let head = request_head(&Method::OPTIONS, &target(upstream), path, &headers).unwrap();
            // Never regrown: the estimate only over-counts the joining `/`, `?` and `&`.
            let spare = head.capacity() - head.len();
            assert!(spare <= 4, "{upstream} {path}: {spare} bytes spare");
        }
    }

    #[test]
    fn written_head_carries_exactly_the_rewritten_map() {
        use super::super::headers::{RequestFacts, rewrite_request, rewrite_request_into};
        let upstream = HeaderValue::from_static("origin:8080");
        let cases: [&[(&str, &str)]; 4] = [
            &[("host", "shop.test"), ("accept", "*/*")],
            &[
                ("host", "shop.test"),
                ("cookie", "a=1; concert_admit=x"),
                ("cookie", "b=2"),
                ("x-forwarded-for", "198.51.100.7"),
                ("x-forwarded-proto", "https"),
                ("connection", "keep-alive, x-secret"),
                ("x-secret", "1"),
                ("te", "trailers"),
                ("accept", "text/html"),
                ("accept", "application/json"),
            ],
            &[("user-agent", "probe"), ("forwarded", "for=1.2.3.4")],
            &[],
        ];
        for (index, pairs) in cases.iter().enumerate() {
            for trusted in [false, true] {
                let mut incoming = HeaderMap::new();
                for (name, value) in pairs.iter() {
                    incoming.append(
                        HeaderName::from_bytes(name.as_bytes()).unwrap(),
                        HeaderValue::from_str(value).unwrap(),
                    );
                }
                let facts = || RequestFacts {
                    peer: Some("192.0.2.10".parse().unwrap()),
                    peer_trusted: trusted,
                    via_tls: false,
                    upstream_host: &upstream,
                    preserve_host: index % 2 == 0,
                    uri_authority: None,
                    upgrade: None,
                };
                let plain = target("http://origin:8080");
                let mapped = rewrite_request(incoming.clone(), facts());
                let expected = request_head(&Method::GET, &plain, "/x", &mapped).unwrap();
                let mut written = RequestHead::start(&Method::GET, &plain, "/x", 0).unwrap();
                rewrite_request_into(incoming, facts(), &mut written);
                assert_eq!(
                    String::from_utf8_lossy(&written.finish()),
                    String::from_utf8_lossy(&expected),
                    "case {index}, trusted {trusted}"
                );
            }
        }
    }

    #[tokio::test]
    async fn request_head_is_written_as_given() {
        let origin = scripted_origin(vec![b"HTTP/1.1 204 No Content\r\n\r\n"], usize::MAX).await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("example.test"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        let head = request_head(
            &Method::DELETE,
            &target("http://origin"),
            "/p?q=1",
            &headers,
        )
        .unwrap();
        let answer = pool.send(&Method::DELETE, &head, None).await.unwrap();
        assert_eq!(answer.head.status, StatusCode::NO_CONTENT);
        assert_eq!(
            origin.heads.lock()[0],
            "DELETE /p?q=1 HTTP/1.1\r\nhost: example.test\r\nx-a: 1\r\nx-a: 2\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn bodies_decode_however_the_bytes_are_split() {
        let cases: [DecodeCase; 4] = [
            (b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world", b"hello world", None),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                b"hello world",
                None,
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nb\r\nhello world\r\n0\r\nx-sum: 42\r\n\r\n",
                b"hello world",
                Some(("x-sum", "42")),
            ),
            (
                b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
                b"ok",
                None,
            ),
        ];
        for (answer, expected, trailer) in cases {
            for piece in [1, 3, 7, usize::MAX] {
                // The same answer twice on one connection: the second proves the first left
                // the connection exactly at a message boundary.
                let origin = scripted_origin(vec![answer, answer], piece).await;
                let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
                for round in 0..2 {
                    let (status, _, body) = fetch(&pool, Method::GET).await.unwrap();
                    let (data, trailers) = body.unwrap();
                    assert_eq!(status, StatusCode::OK);
                    assert_eq!(data, expected, "piece {piece}, round {round}");
                    let got = trailers.as_ref().and_then(|map| {
                        map.iter().next().map(|(name, value)| {
                            (name.as_str().to_owned(), value.to_str().unwrap().to_owned())
                        })
                    });
                    assert_eq!(
                        got,
                        trailer.map(|(name, value)| (name.to_owned(), value.to_owned()))
                    );
                    assert_eq!(pool.idle_count(), 1, "reused after a complete body");
                }
                assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
            }
        }
    }

    /// A response carrying `body`, framed by length or as chunks of the given sizes (hex
    /// digits in either case, zero-padded, with extensions and a trailer when asked).
    fn framed_answer(body: &[u8], chunking: &Option<ChunkStyle>) -> Vec<u8> {
        let Some(style) = chunking else {
            let mut out =
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
            out.extend_from_slice(body);
            return out;
        };
        let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        let mut rest = body;
        for (index, size) in style.sizes.iter().cycle().enumerate() {
            if rest.is_empty() {
                break;
            }
            let size = (*size).clamp(1, rest.len());
            let hex = format!("{:0width$x}", size, width = style.pad);
            let hex = if index % 2 == 1 && style.upper {
                hex.to_uppercase()
            } else {
                hex
            };
            out.extend_from_slice(hex.as_bytes());
            if style.extensions {
                out.extend_from_slice(b";name=\"v;1\"");
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&rest[..size]);
            out.extend_from_slice(b"\r\n");
            rest = &rest[size..];
        }
        out.extend_from_slice(b"0\r\n");
        if style.trailer {
            out.extend_from_slice(b"x-check: done\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    #[derive(Debug, Clone)]
    struct ChunkStyle {
        sizes: Vec<usize>,
        pad: usize,
        upper: bool,
        extensions: bool,
        trailer: bool,
    }

    fn chunk_style() -> impl proptest::strategy::Strategy<Value = Option<ChunkStyle>> {
        use proptest::prelude::*;
        proptest::option::of(
            (
                proptest::collection::vec(1usize..700, 1..6),
                1usize..5,
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            )
                .prop_map(|(sizes, pad, upper, extensions, trailer)| ChunkStyle {
                    sizes,
                    pad,
                    upper,
                    extensions,
                    trailer,
                }),
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 48,
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        /// Any body, framed either way, cut into pieces of any size, comes out whole, twice
        /// over one connection (so the first left it exactly at the message boundary).
        #[test]
        fn any_framed_body_decodes_whole_however_it_arrives(
            body in proptest::prop_oneof![
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2500),
            ],
            chunking in chunk_style(),
            // The origin pauses between pieces, so their number (not their size) is bounded.
            pieces in 1usize..40,
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let answer = Arc::<[u8]>::from(framed_answer(&body, &chunking));
                let piece = answer.len().div_ceil(pieces);
                let origin = scripted_origin(vec![answer.clone(), answer], piece).await;
                let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
                for round in 0..2 {
                    let (status, _, decoded) = fetch(&pool, Method::GET).await.unwrap();
                    let (data, trailers) = decoded.unwrap();
                    assert_eq!(status, StatusCode::OK);
                    assert!(data == body, "round {round}: {} bytes, not {}", data.len(), body.len());
                    let wants_trailer = chunking.as_ref().is_some_and(|style| style.trailer);
                    assert_eq!(
                        trailers.is_some_and(|map| map.get("x-check").is_some()),
                        wants_trailer
                    );
                }
                assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
            });
        }
    }

    #[tokio::test]
    async fn body_until_close_is_read_whole_and_not_reused() {
        let origin = scripted_origin(vec![b"HTTP/1.0 200 OK\r\n\r\nall of it"], 4).await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
        let (status, _, body) = fetch(&pool, Method::GET).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body.unwrap().0, b"all of it");
        assert_eq!(pool.idle_count(), 0);
    }

    #[tokio::test]
    async fn head_answers_have_no_body_whatever_they_announce() {
        let origin = scripted_origin(
            vec![
                b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n",
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            ],
            usize::MAX,
        )
        .await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
        let (_, headers, body) = fetch(&pool, Method::HEAD).await.unwrap();
        assert_eq!(headers[header::CONTENT_LENGTH], "100");
        assert!(body.unwrap().0.is_empty());
        let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
        assert_eq!(body.unwrap().0, b"ok");
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn broken_answers_are_errors_not_guesses() {
        let big: &'static [u8] = Box::leak(
            [
                &b"HTTP/1.1 200 OK\r\nx-big: "[..],
                &vec![b'a'; MAX_HEAD_BYTES],
                b"\r\n\r\n",
            ]
            .concat()
            .into_boxed_slice(),
        );
        let cases: [(&'static [u8], IsExpected); 5] = [
            (
                b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
                |err| matches!(err, DirectError::Invalid(_)),
            ),
            (b"SSH-2.0-OpenSSH\r\n\r\n", |err| {
                matches!(err, DirectError::Parse(_))
            }),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nx",
                |err| matches!(err, DirectError::Invalid(_)),
            ),
            (b"HTTP/1.1 200 OK\r\ncontent-", |err| {
                matches!(err, DirectError::ClosedInHead)
            }),
            (big, |err| matches!(err, DirectError::HeadTooLarge)),
        ];
        for (answer, expected) in cases {
            let origin = scripted_origin(vec![answer], usize::MAX).await;
            let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
            match fetch(&pool, Method::GET).await {
                Err(err) => assert!(expected(&err), "{err:?}"),
                Ok((status, ..)) => panic!("accepted as {status}"),
            }
        }
    }

    #[test]
    fn answers_outside_http_are_refused_and_listed_lengths_pass_as_one() {
        let parse = |raw: &[u8]| {
            parse_head(
                &mut BytesMut::from(raw),
                &mut Vec::new(),
                &mut KnownNames::default(),
                false,
            )
        };
        for code in ["600", "999"] {
            let raw = format!("HTTP/1.1 {code} Odd\r\ncontent-length: 0\r\n\r\n");
            assert!(
                matches!(parse(raw.as_bytes()), Err(DirectError::Invalid(_))),
                "{code}"
            );
        }
        // A head over the limit that arrived whole, as one large read brings it.
        let mut big = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
        big.resize(MAX_HEAD_BYTES + 10, b'a');
        big.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
        assert!(matches!(parse(&big), Err(DirectError::HeadTooLarge)));
        let mut at_limit = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
        at_limit.resize(MAX_HEAD_BYTES - 4, b'a');
        at_limit.extend_from_slice(b"\r\n\r\n");
        assert_eq!(at_limit.len(), MAX_HEAD_BYTES);
        assert!(matches!(parse(&at_limit), Ok(Some(_))));

        for raw in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 5 ,5\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-other: 1\r\ncontent-length: 5,5\r\n\r\n",
        ] {
            let Ok(Some((head, framing, _))) = parse(raw) else {
                panic!("{}", String::from_utf8_lossy(raw));
            };
            assert_eq!(framing, Framing::Length(5));
            let lengths: Vec<_> = head
                .headers
                .get_all(header::CONTENT_LENGTH)
                .iter()
                .collect();
            assert_eq!(lengths, ["5"], "{}", String::from_utf8_lossy(raw));
        }
    }

    #[tokio::test]
    async fn bodies_cut_short_are_errors_and_close_the_connection() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        ] {
            let answer: &'static [u8] = Box::leak(answer.to_vec().into_boxed_slice());
            let origin = scripted_origin(vec![answer], usize::MAX).await;
            let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
            let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
            assert!(body.is_err(), "{}", String::from_utf8_lossy(answer));
            assert_eq!(pool.idle_count(), 0);
        }
    }

    #[tokio::test]
    async fn trailing_bytes_after_a_body_retire_the_connection() {
        let origin = scripted_origin(
            vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA"],
            usize::MAX,
        )
        .await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
        let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
        assert_eq!(body.unwrap().0, b"ok");
        assert_eq!(pool.idle_count(), 0);
    }

    #[tokio::test]
    async fn idempotent_requests_are_retried_once_on_a_fresh_connection() {
        // Each connection answers one request, then reads the next and hangs up without a
        // word: the race between a request and an origin's keep-alive timeout.
        let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let hang_up: &'static [u8] = b"";
        let origin = scripted_origin(vec![ok, hang_up], usize::MAX).await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
        let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
        assert_eq!(body.unwrap().0, b"ok");
        let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
        assert_eq!(body.unwrap().0, b"ok");
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 2);
        assert_eq!(origin.requests.load(Ordering::SeqCst), 3);

        // The same race for a POST: the origin may have acted on it, so it is not repeated.
        let failed = fetch(&pool, Method::POST).await;
        assert!(
            matches!(failed, Err(DirectError::Closed)),
            "{:?}",
            failed.err()
        );
        assert_eq!(origin.requests.load(Ordering::SeqCst), 4);
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_origin_that_began_to_answer_is_never_asked_again() {
        // The second request on the connection gets an interim answer, then the origin hangs
        // up: it has seen the request, so even a GET is not repeated.
        let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let interim_then_gone: &'static [u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
        let origin = scripted_origin(vec![ok, interim_then_gone], usize::MAX).await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
        let (_, _, body) = fetch(&pool, Method::GET).await.unwrap();
        assert_eq!(body.unwrap().0, b"ok");
        let failed = fetch(&pool, Method::GET).await;
        assert!(
            matches!(failed, Err(DirectError::ClosedInHead)),
            "{:?}",
            failed.err()
        );
        assert_eq!(origin.requests.load(Ordering::SeqCst), 2);
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn connections_closed_while_idle_are_skipped_without_sending() {
        let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let origin = scripted_origin(vec![ok], usize::MAX).await;
        let pool = Arc::new(DirectPool::new(&origin.addr, LIMITS));
        for round in 1..=4 {
            // A POST cannot be repeated, so it checks with the kernel; a GET trusts what the
            // runtime has seen of the socket (and would be retried if that were stale).
            let (method, thorough) = if round % 2 == 0 {
                (Method::POST, true)
            } else {
                (Method::GET, false)
            };
            let (_, _, body) = fetch(&pool, method).await.unwrap();
            assert_eq!(body.unwrap().0, b"ok");
            // The origin closes after its one answer; once that is visible, the idle
            // connection is passed over and the next request goes to a new one.
            for _ in 0..300 {
                if pool.idle_open_count(thorough) == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(pool.idle_open_count(thorough), 0, "round {round}");
            assert_eq!(origin.accepted.load(Ordering::SeqCst), round);
        }
        assert_eq!(origin.requests.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn the_response_deadline_holds_on_a_connection_reused_after_its_timer_fired() {
        const LIMIT: Duration = Duration::from_millis(300);
        // Answers three requests, then takes the fourth and never answers it.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    for _ in 0..3 {
                        read_head(&mut stream).await.unwrap();
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        stream.write_all(ok).await.unwrap();
                    }
                    let _ = read_head(&mut stream).await;
                    tokio::time::sleep(Duration::from_secs(60)).await;
                });
            }
        });
        let pool = Arc::new(DirectPool::new(&addr, LIMITS));
        let send = |pool: Arc<DirectPool>| async move {
            let started = Instant::now();
            let sent = pool
                .send(&Method::GET, &get_head(), Some(started + LIMIT))
                .await;
            let answer = match sent {
                Ok(answer) => {
                    let (head, body) = DirectBody::new(answer, &pool, None);
                    assert_eq!(drain(body).await.unwrap().0, b"ok");
                    Ok(head.status)
                }
                Err(err) => Err(err),
            };
            (answer, started.elapsed())
        };
        let (first, _) = send(Arc::clone(&pool)).await;
        assert_eq!(first.unwrap(), StatusCode::OK);
        // Idle in the pool past its deadline: the connection's timer fires meanwhile, and the
        // next request must arm it again rather than find it already passed.
        tokio::time::sleep(LIMIT + Duration::from_millis(200)).await;
        for _ in 0..2 {
            let (answer, took) = send(Arc::clone(&pool)).await;
            assert_eq!(answer.unwrap(), StatusCode::OK, "answered after {took:?}");
        }
        let (stalled, took) = send(Arc::clone(&pool)).await;
        assert!(matches!(stalled, Err(DirectError::TimedOut)), "{stalled:?}");
        assert!(took >= LIMIT, "gave up after {took:?}");
        assert!(took < LIMIT * 5, "gave up after {took:?}");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "every request on one connection"
        );
        assert_eq!(
            pool.idle_count(),
            0,
            "the connection that timed out is not kept"
        );
    }

    proptest::proptest! {
        #[test]
        fn known_names_give_what_parsing_gives_however_the_names_change(
            responses in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::prop_oneof![
                        proptest::strategy::Just("Content-Length".to_owned()),
                        proptest::strategy::Just("content-length".to_owned()),
                        proptest::strategy::Just("Date".to_owned()),
                        proptest::strategy::Just("X-Custom".to_owned()),
                        proptest::strategy::Just("bad name".to_owned()),
                        "[A-Za-z-]{1,80}",
                    ],
                    0..40,
                ),
                1..6,
            ),
        ) {
            let mut names = KnownNames::default();
            for response in &responses {
                for (index, raw) in response.iter().enumerate() {
                    let known = names.name(index, raw.as_bytes());
                    proptest::prop_assert_eq!(known, HeaderName::from_bytes(raw.as_bytes()).ok());
                }
            }
            proptest::prop_assert!(names.0.len() <= KnownNames::KEPT);
            proptest::prop_assert!(names.0.iter().all(|(raw, _)| raw.len() <= KnownNames::KEPT_LENGTH));
        }
    }

    #[tokio::test]
    async fn refused_connection_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let pool = DirectPool::new(&addr, LIMITS);
        assert!(matches!(
            pool.send(&Method::GET, &get_head(), None).await,
            Err(DirectError::Connect(PoolError::Connect { .. }))
        ));
    }
}
