//! The HTTP/1 smuggling guard: it watches how each client request on a connection is framed
//! (RFC 9112 §6).
//!
//! hyper decides a request that carries both `Content-Length` and `Transfer-Encoding` by the
//! transfer coding, drops the length and closes the connection afterwards — allowed, but such a
//! request is nearly always an attempt to desynchronise some server behind Concert, and hyper
//! leaves no trace of the length for the handler to see. [`FramingGuard`] reads the same bytes
//! hyper reads, one step ahead of it, follows the framing from head to head, and records from
//! which request on the connection must be refused (400) instead of forwarded.
//!
//! The guard follows the grammar exactly as hyper reads it (lengths and chunk sizes of any
//! number of digits, chunk lines ended by CRLF only). Where it cannot follow — bytes hyper also
//! rejects, or anything it does not understand — it fails closed: every later request on the
//! connection is refused, so a disagreement with hyper can cost a connection, never let a
//! request through unwatched. It stops only once the connection has left HTTP/1: the HTTP/2
//! preface at its start, or an answer that switches protocols (see
//! [`FramingWatch::record_answer`]).

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::StatusCode;
use tokio::io::{AsyncRead, ReadBuf};

use super::codec::{add_hex_digit, parse_decimal};
use super::limits::{MAX_HEAD_BYTES, MAX_HEADERS};

/// What a connection starts with when it speaks HTTP/2 without an upgrade (RFC 9113 §3.4);
/// hyper's connection builder compares the first bytes with it the same way.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Largest buffer for split heads a connection keeps between requests.
const KEPT_PENDING_CAPACITY: usize = 4096;

/// Why requests on a connection are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A request head carried both `Content-Length` and `Transfer-Encoding`.
    BothFramings,
    /// The guard could not follow an earlier request's framing.
    Unfollowable,
}

impl Refusal {
    /// The reason given to the client.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::BothFramings => "Content-Length and Transfer-Encoding together",
            Refusal::Unfollowable => "request framing that cannot be followed",
        }
    }
}

/// What one connection's guard has seen, shared with the service that answers its requests.
#[derive(Debug, Default)]
pub(crate) struct FramingWatch {
    /// 1-based index of the first refused request; every later one is refused too. 0 for none.
    refused_from: AtomicU64,
    /// Why: whether the first refusal was for both framing headers.
    refused_for_both: AtomicBool,
    /// Requests handed to the service so far.
    dispatched: AtomicU64,
    /// An answer switched the connection away from HTTP/1.
    switched: AtomicBool,
}

impl FramingWatch {
    /// Called once per request, in order: whether (and why) this request must be refused.
    ///
    /// hyper dispatches an HTTP/1 connection's requests in the order their heads arrive, and
    /// only after reading a head, so the guard has always seen the head in question.
    pub(crate) fn next_refusal(&self) -> Option<Refusal> {
        let index = self.dispatched.fetch_add(1, Ordering::Relaxed) + 1;
        let from = self.refused_from.load(Ordering::Acquire);
        if from == 0 || index < from {
            return None;
        }
        Some(if self.refused_for_both.load(Ordering::Relaxed) {
            Refusal::BothFramings
        } else {
            Refusal::Unfollowable
        })
    }

    /// Called with each answer before it is handed to hyper to write.
    ///
    /// hyper ends HTTP/1 on a connection after a 101, or a 2xx to `CONNECT`: the response is
    /// its last, and the bytes after it belong to the new protocol. Only then may the guard
    /// stop. It learns this before hyper writes the answer, and hyper serves one request at a
    /// time, so no later request can have been dispatched yet. Bytes hyper read ahead before
    /// then were followed as HTTP/1; had they been tunnel data, whatever the guard concluded
    /// from them concerns requests hyper will never dispatch. Any other answer leaves the
    /// guard following, as hyper keeps reading requests. Returns whether the connection
    /// switched.
    pub(crate) fn record_answer(&self, request_was_connect: bool, status: StatusCode) -> bool {
        let switched = status == StatusCode::SWITCHING_PROTOCOLS
            || (request_was_connect && status.is_success());
        if switched {
            self.switched.store(true, Ordering::Release);
        }
        switched
    }

    fn refuse_from(&self, index: u64, refusal: Refusal) {
        // Only the first refusal counts: it already covers every later request. The guard is
        // the only writer, so reading before writing races with nothing.
        if self.refused_from.load(Ordering::Relaxed) != 0 {
            return;
        }
        self.refused_for_both
            .store(refusal == Refusal::BothFramings, Ordering::Relaxed);
        self.refused_from.store(index, Ordering::Release);
    }

    fn has_switched(&self) -> bool {
        self.switched.load(Ordering::Acquire)
    }
}

/// Where in the byte stream of requests the guard is. The chunked states mirror hyper's
/// chunked decoder byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The start of the connection: this many bytes of the HTTP/2 preface seen so far.
    Preface(usize),
    /// Before or inside a request head.
    Head,
    /// Inside a body of known length: this many bytes left.
    Fixed(u64),
    /// The first hex digit of a chunk size.
    ChunkStart,
    /// More hex digits of a chunk size; the size so far.
    ChunkSize(u64),
    /// Spaces or tabs after a chunk size.
    ChunkSizeSpace(u64),
    /// A chunk extension, up to the line's CR.
    ChunkExtension(u64),
    /// The LF ending a chunk-size line.
    ChunkSizeLf(u64),
    /// Inside a chunk's data: this many bytes left.
    ChunkData(u64),
    /// The CR after a chunk's data.
    ChunkDataCr,
    /// The LF after a chunk's data.
    ChunkDataLf,
    /// The start of a trailer line, or of the empty line ending the body.
    TrailerStart,
    /// Inside a trailer line, up to its CR.
    TrailerLine,
    /// The LF ending a trailer line.
    TrailerLf,
    /// The LF of the empty line ending the body.
    EndLf,
    /// The framing could not be followed: every later request is refused (the watch says
    /// from which), so nothing more needs reading.
    Refusing,
    /// The connection left HTTP/1 (HTTP/2, or a switch of protocols): nothing to follow.
    Released,
}

/// Client side of a connection, read through so that request framing is watched.
pub(crate) struct FramingGuard<S> {
    inner: S,
    watch: Arc<FramingWatch>,
    state: State,
    /// Request heads seen so far.
    heads: u64,
    /// A head split across reads.
    pending: Vec<u8>,
}

impl<S> FramingGuard<S> {
    pub(crate) fn new(inner: S, watch: Arc<FramingWatch>) -> FramingGuard<S> {
        FramingGuard {
            inner,
            watch,
            state: State::Preface(0),
            heads: 0,
            pending: Vec::new(),
        }
    }

    fn is_following(&self) -> bool {
        !matches!(self.state, State::Refusing | State::Released)
    }

    /// Follows the framing over bytes just read from the client.
    fn observe(&mut self, mut bytes: &[u8]) {
        if self.watch.has_switched() {
            self.release();
            return;
        }
        while !bytes.is_empty() {
            bytes = match self.state {
                State::Refusing | State::Released => return,
                State::Preface(matched) => self.observe_preface(matched, bytes),
                State::Head => self.observe_head(bytes),
                State::Fixed(left) => {
                    let (rest, left) = skip(bytes, left);
                    self.state = if left == 0 {
                        State::Head
                    } else {
                        State::Fixed(left)
                    };
                    rest
                }
                State::ChunkData(left) => {
                    let (rest, left) = skip(bytes, left);
                    self.state = if left == 0 {
                        State::ChunkDataCr
                    } else {
                        State::ChunkData(left)
                    };
                    rest
                }
                State::ChunkExtension(size) => {
                    match bytes.iter().position(|&b| b == b'\r' || b == b'\n') {
                        None => &[],
                        Some(end) if bytes[end] == b'\r' => {
                            self.state = State::ChunkSizeLf(size);
                            &bytes[end + 1..]
                        }
                        // hyper rejects a bare LF in an extension.
                        Some(_) => return self.fail_inside_body(),
                    }
                }
                State::TrailerLine => match bytes.iter().position(|&b| b == b'\r') {
                    None => &[],
                    Some(end) => {
                        self.state = State::TrailerLf;
                        &bytes[end + 1..]
                    }
                },
                _ => {
                    let Some(next) = self.chunk_step(bytes[0]) else {
                        return self.fail_inside_body();
                    };
                    self.state = next;
                    &bytes[1..]
                }
            };
        }
    }

    /// One byte of the chunked framing outside data, extensions and trailer lines; `None` where
    /// hyper rejects the body.
    fn chunk_step(&self, byte: u8) -> Option<State> {
        Some(match (self.state, byte) {
            (State::ChunkStart, _) => State::ChunkSize(add_hex_digit(0, byte)?),
            (State::ChunkSize(size), b' ' | b'\t') => State::ChunkSizeSpace(size),
            (State::ChunkSize(size) | State::ChunkSizeSpace(size), b';') => {
                State::ChunkExtension(size)
            }
            (State::ChunkSize(size) | State::ChunkSizeSpace(size), b'\r') => {
                State::ChunkSizeLf(size)
            }
            // An overflowing size fails here too, as it does in hyper.
            (State::ChunkSize(size), _) => State::ChunkSize(add_hex_digit(size, byte)?),
            (State::ChunkSizeSpace(size), b' ' | b'\t') => State::ChunkSizeSpace(size),
            (State::ChunkSizeLf(0), b'\n') => State::TrailerStart,
            (State::ChunkSizeLf(size), b'\n') => State::ChunkData(size),
            (State::ChunkDataCr, b'\r') => State::ChunkDataLf,
            (State::ChunkDataLf, b'\n') => State::ChunkStart,
            (State::TrailerStart, b'\r') => State::EndLf,
            // Any other byte starts a trailer line (hyper keeps even a bare LF in it).
            (State::TrailerStart, _) => State::TrailerLine,
            (State::TrailerLf, b'\n') => State::TrailerStart,
            (State::EndLf, b'\n') => State::Head,
            _ => return None,
        })
    }

    /// Compares the first bytes of the connection with the HTTP/2 preface; returns the bytes
    /// left to read as HTTP/1 (none while they still match).
    fn observe_preface<'a>(&mut self, matched: usize, bytes: &'a [u8]) -> &'a [u8] {
        let expected = &H2_PREFACE[matched..];
        let common = expected
            .iter()
            .zip(bytes)
            .take_while(|(expected, got)| expected == got)
            .count();
        if common == expected.len() {
            // HTTP/2 from the first byte: hyper runs it as such, with no HTTP/1 framing.
            self.release();
            return &[];
        }
        if common == bytes.len() {
            self.state = State::Preface(matched + common);
            return &[];
        }
        // HTTP/1 after all: what matched so far starts its first head.
        self.state = State::Head;
        // A part of the preface is never a whole head: nothing of it is left over.
        self.observe_head(&H2_PREFACE[..matched]);
        bytes
    }

    /// Reads as much of a request head as `bytes` holds; returns what follows the head.
    fn observe_head<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        if self.pending.is_empty() {
            // Empty lines before a request line are allowed (RFC 9112 §2.2).
            let start = bytes
                .iter()
                .position(|&b| b != b'\r' && b != b'\n')
                .unwrap_or(bytes.len());
            let bytes = &bytes[start..];
            if bytes.is_empty() {
                return bytes;
            }
            return match self.judge_head(bytes) {
                HeadRead::Complete(length) => &bytes[length..],
                HeadRead::Partial => {
                    self.pending.extend_from_slice(bytes);
                    &[]
                }
                HeadRead::Refused => &[],
            };
        }
        let before = self.pending.len();
        self.pending.extend_from_slice(bytes);
        if self.pending.len() > MAX_HEAD_BYTES {
            // hyper answers 431 and closes; should it not, nothing after is let through.
            self.refuse_from(self.heads + 1, Refusal::Unfollowable);
            return &[];
        }
        if !bytes.contains(&b'\n') {
            // A head only ends on a line end: no need to parse it again yet.
            return &[];
        }
        let pending = std::mem::take(&mut self.pending);
        let read = self.judge_head(&pending);
        match read {
            HeadRead::Complete(length) => {
                // Keep a small buffer for the next split head, but not the room a huge one took:
                // idle keep-alive connections would each hold on to it.
                if pending.capacity() <= KEPT_PENDING_CAPACITY {
                    self.pending = pending;
                    self.pending.clear();
                }
                &bytes[length - before..]
            }
            HeadRead::Partial => {
                self.pending = pending;
                &[]
            }
            HeadRead::Refused => &[],
        }
    }

    /// Parses a head starting at `bytes[0]` and sets the state for what follows it.
    fn judge_head(&mut self, bytes: &[u8]) -> HeadRead {
        let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut []);
        let length = match request.parse_with_uninit_headers(bytes, &mut headers) {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) => return HeadRead::Partial,
            Err(_) => {
                // hyper refuses the same bytes (400 or 431) and closes the connection.
                self.refuse_from(self.heads + 1, Refusal::Unfollowable);
                return HeadRead::Refused;
            }
        };
        self.heads += 1;
        let framing = Framing::of(&request);
        if framing.lengths > 0 && framing.transfer_coded {
            // The connection ends after this request's answer.
            self.refuse_from(self.heads, Refusal::BothFramings);
            return HeadRead::Complete(length);
        }
        let next = if framing.transfer_coded {
            // hyper refuses any coding but a final `chunked`, and any coding in HTTP/1.0.
            (framing.chunked && request.version == Some(1)).then_some(State::ChunkStart)
        } else {
            match (framing.lengths, framing.length) {
                (0, _) | (_, Some(0)) => Some(State::Head),
                (_, Some(length)) => Some(State::Fixed(length)),
                // Unparsable or disagreeing lengths: hyper answers 400.
                (_, None) => None,
            }
        };
        match next {
            Some(next) => self.state = next,
            // hyper refuses this very head; should it not, it is refused here.
            None => self.refuse_from(self.heads, Refusal::Unfollowable),
        }
        HeadRead::Complete(length)
    }

    /// A body that breaks the chunked framing: hyper fails it and stops reading; should it go
    /// on, the requests after it are refused.
    fn fail_inside_body(&mut self) {
        self.refuse_from(self.heads + 1, Refusal::Unfollowable);
    }

    fn refuse_from(&mut self, index: u64, refusal: Refusal) {
        self.watch.refuse_from(index, refusal);
        self.state = State::Refusing;
        self.pending = Vec::new();
    }

    fn release(&mut self) {
        self.state = State::Released;
        self.pending = Vec::new();
    }
}

/// Skips up to `left` bytes; returns the rest and how many are still to skip.
fn skip(bytes: &[u8], left: u64) -> (&[u8], u64) {
    let taken = usize::try_from(left).map_or(bytes.len(), |left| left.min(bytes.len()));
    (&bytes[taken..], left - taken as u64)
}

enum HeadRead {
    /// A whole head of this many bytes.
    Complete(usize),
    /// The head continues in bytes not read yet.
    Partial,
    /// Not a request head hyper would take.
    Refused,
}

/// How a parsed head frames its body, as RFC 9112 §6.3 reads it.
struct Framing {
    /// `Content-Length` fields seen.
    lengths: usize,
    /// Their value, when every one parses and all agree.
    length: Option<u64>,
    /// A `Transfer-Encoding` field is present.
    transfer_coded: bool,
    /// The final transfer coding is `chunked`.
    chunked: bool,
}

impl Framing {
    fn of(request: &httparse::Request<'_, '_>) -> Framing {
        let mut framing = Framing {
            lengths: 0,
            length: None,
            transfer_coded: false,
            chunked: false,
        };
        let mut lengths_agree = true;
        for header in request.headers.iter() {
            let name = header.name;
            if name.eq_ignore_ascii_case("content-length") {
                framing.lengths += 1;
                let value = parse_decimal(header.value.trim_ascii());
                match (framing.length, value) {
                    (_, None) => lengths_agree = false,
                    (None, Some(value)) if framing.lengths == 1 => framing.length = Some(value),
                    (Some(seen), Some(value)) if seen == value => {}
                    _ => lengths_agree = false,
                }
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                framing.transfer_coded = true;
                framing.chunked = header
                    .value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
        }
        if !lengths_agree {
            framing.length = None;
        }
        framing
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FramingGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.is_following() {
            let filled = buf.filled();
            if filled.len() > before {
                this.observe(&filled[before..]);
            }
        }
        polled
    }
}

crate::sys::io_wrap::writes_pass_through!(FramingGuard);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Text that looks like framing, to be carried inside bodies.
    const DECOY: &[u8] =
        b"\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

    /// Feeds `stream` to a fresh guard, cut at `cuts` (offsets, any order, out of range ignored).
    fn feed(stream: &[u8], cuts: &[usize]) -> (FramingGuard<()>, Arc<FramingWatch>) {
        let watch = Arc::new(FramingWatch::default());
        let mut guard = FramingGuard::new((), watch.clone());
        let mut cuts: Vec<usize> = cuts.iter().copied().filter(|&c| c < stream.len()).collect();
        cuts.sort_unstable();
        let mut from = 0;
        for cut in cuts.into_iter().chain([stream.len()]) {
            guard.observe(&stream[from..cut]);
            from = cut;
        }
        (guard, watch)
    }

    fn refused_from(watch: &FramingWatch) -> u64 {
        watch.refused_from.load(Ordering::Relaxed)
    }

    #[derive(Debug, Clone)]
    enum Message {
        Bodiless {
            blank_lines_before: usize,
        },
        Fixed(Vec<u8>),
        Chunked {
            chunks: Vec<Vec<u8>>,
            trailers: bool,
        },
        Ambiguous,
    }

    impl Message {
        fn bytes(&self, index: usize) -> Vec<u8> {
            let mut out = Vec::new();
            match self {
                Message::Bodiless { blank_lines_before } => {
                    out.extend(b"\r\n".repeat(*blank_lines_before));
                    out.extend(format!("GET /{index} HTTP/1.1\r\nHost: x\r\n\r\n").bytes());
                }
                Message::Fixed(body) => {
                    out.extend(
                        format!(
                            "POST /{index} HTTP/1.1\r\nHost: x\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        )
                        .bytes(),
                    );
                    out.extend(body);
                }
                Message::Chunked { chunks, trailers } => {
                    out.extend(
                        format!(
                            "POST /{index} HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                        )
                        .bytes(),
                    );
                    for chunk in chunks.iter().filter(|chunk| !chunk.is_empty()) {
                        out.extend(format!("{:X};name=\"v\"\r\n", chunk.len()).bytes());
                        out.extend(chunk);
                        out.extend(b"\r\n");
                    }
                    out.extend(b"0\r\n");
                    if *trailers {
                        out.extend(b"x-sum: 1\r\nx-more: \r\n");
                    }
                    out.extend(b"\r\n");
                }
                Message::Ambiguous => {
                    out.extend(
                        format!(
                            "POST /{index} HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                        )
                        .bytes(),
                    );
                }
            }
            out
        }
    }

    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            Just(DECOY.to_vec()),
        ]
    }

    fn message() -> impl Strategy<Value = Message> {
        prop_oneof![
            (0usize..3).prop_map(|blank_lines_before| Message::Bodiless { blank_lines_before }),
            body().prop_map(Message::Fixed),
            (proptest::collection::vec(body(), 0..4), any::<bool>())
                .prop_map(|(chunks, trailers)| Message::Chunked { chunks, trailers }),
        ]
    }

    fn stream_of(messages: &[Message]) -> Vec<u8> {
        messages
            .iter()
            .enumerate()
            .flat_map(|(index, message)| message.bytes(index))
            .collect()
    }

    proptest! {
        #[test]
        fn well_framed_requests_are_followed_however_they_are_cut(
            messages in proptest::collection::vec(message(), 1..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
        ) {
            let stream = stream_of(&messages);
            let cuts: Vec<usize> = cuts.iter().map(|cut| cut % (stream.len() + 1)).collect();
            let (guard, watch) = feed(&stream, &cuts);
            prop_assert_eq!(guard.heads, messages.len() as u64);
            prop_assert_eq!(guard.state, State::Head);
            prop_assert!(guard.pending.is_empty());
            prop_assert_eq!(refused_from(&watch), 0);
        }

        #[test]
        fn the_ambiguous_request_is_the_one_marked(
            mut messages in proptest::collection::vec(message(), 1..6),
            position in any::<prop::sample::Index>(),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
        ) {
            let at = position.index(messages.len() + 1);
            messages.insert(at, Message::Ambiguous);
            let stream = stream_of(&messages);
            let cuts: Vec<usize> = cuts.iter().map(|cut| cut % (stream.len() + 1)).collect();
            let (_, watch) = feed(&stream, &cuts);
            prop_assert_eq!(refused_from(&watch), at as u64 + 1);
        }
    }

    #[test]
    fn every_request_from_the_first_refused_one_on_is_refused() {
        let watch = FramingWatch::default();
        watch.refuse_from(2, Refusal::BothFramings);
        watch.refuse_from(3, Refusal::Unfollowable); // the first refusal already covers it
        let seen: Vec<Option<Refusal>> = (0..4).map(|_| watch.next_refusal()).collect();
        assert_eq!(
            seen,
            [
                None,
                Some(Refusal::BothFramings),
                Some(Refusal::BothFramings),
                Some(Refusal::BothFramings)
            ]
        );
    }

    #[test]
    fn byte_by_byte_and_bare_line_feeds_in_heads_are_followed() {
        let stream = b"GET /a HTTP/1.1\nHost: x\n\nPOST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET /c HTTP/1.1\r\n\r\n";
        let cuts: Vec<usize> = (1..stream.len()).collect();
        let (guard, watch) = feed(stream, &cuts);
        assert_eq!(guard.heads, 3);
        assert_eq!(guard.state, State::Head);
        assert_eq!(refused_from(&watch), 0);
    }

    /// The request an attacker hides behind a first one on the same connection.
    const SMUGGLED: &[u8] = b"POST /smuggled HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

    /// Feeds `first` then [`SMUGGLED`], whole and byte by byte; returns the guard and watch of
    /// the whole feed after checking both agree.
    fn behind(first: &[u8]) -> (FramingGuard<()>, Arc<FramingWatch>) {
        let stream = [first, SMUGGLED].concat();
        let (guard, watch_whole) = feed(&stream, &[]);
        let cuts: Vec<usize> = (1..stream.len()).collect();
        let (_, watch_bytes) = feed(&stream, &cuts);
        assert_eq!(
            refused_from(&watch_whole),
            refused_from(&watch_bytes),
            "{:?}",
            String::from_utf8_lossy(first)
        );
        (guard, watch_whole)
    }

    #[test]
    fn a_request_asking_for_an_upgrade_does_not_stop_the_watch() {
        for first in [
            &b"GET /first HTTP/1.1\r\nHost: a\r\nUpgrade: foo\r\n\r\n"[..],
            b"GET /first HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
        ] {
            let (guard, watch) = behind(first);
            assert_eq!(guard.heads, 2, "{:?}", String::from_utf8_lossy(first));
            assert_eq!(refused_from(&watch), 2);
            // Answered without switching protocols, hyper goes on reading requests.
            watch.record_answer(first.starts_with(b"CONNECT"), StatusCode::OK);
            assert_eq!(watch.next_refusal(), None);
            assert_eq!(watch.next_refusal(), Some(Refusal::BothFramings));
        }
    }

    #[test]
    fn chunk_sizes_with_many_leading_zeros_are_followed() {
        let first = b"POST /first HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000003\r\nabc\r\n0000000000000000000000\r\n\r\n";
        let (guard, watch) = behind(first);
        assert_eq!(guard.heads, 2);
        assert_eq!(refused_from(&watch), 2);
        assert_eq!(watch.next_refusal(), None);
        assert_eq!(watch.next_refusal(), Some(Refusal::BothFramings));
    }

    #[test]
    fn lengths_with_many_leading_zeros_are_followed() {
        let first = b"POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: 000000000000000000005\r\n\r\nhello";
        let (guard, watch) = behind(first);
        assert_eq!(guard.heads, 2);
        assert_eq!(refused_from(&watch), 2);
    }

    #[test]
    fn chunk_framing_the_guard_cannot_follow_refuses_what_comes_after() {
        let bodies: [&[u8]; 7] = [
            // A size past 64 bits: hyper fails it too.
            b"10000000000000000\r\n",
            b"zz\r\n",
            b" 3\r\nabc\r\n0\r\n\r\n",
            // Bare line feeds where hyper wants CRLF.
            b"3\nabc\r\n0\r\n\r\n",
            b"3\r\nabc\n0\r\n\r\n",
            b"3;ext\nabc\r\n0\r\n\r\n",
            b"0\r\n\n",
        ];
        for body in bodies {
            let first = [
                &b"POST /first HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
                body,
            ]
            .concat();
            let (guard, watch) = behind(&first);
            let case = String::from_utf8_lossy(body);
            assert_eq!(guard.state, State::Refusing, "{case:?}");
            assert_eq!((guard.heads, refused_from(&watch)), (1, 2), "{case:?}");
            assert_eq!(watch.next_refusal(), None, "{case:?}");
            assert_eq!(
                watch.next_refusal(),
                Some(Refusal::Unfollowable),
                "{case:?}"
            );
        }
    }

    #[test]
    fn chunk_extensions_and_trailers_are_followed_as_hyper_reads_them() {
        // Spaces after the size, a long extension, and a trailer line holding a bare LF (hyper
        // keeps it in the line; only CRLF ends a trailer line).
        let mut first = b"POST /first HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3 \t;".to_vec();
        first.extend(std::iter::repeat_n(b'e', 10_000));
        first.extend_from_slice(b"\r\nabc\r\n0\r\nx-a: 1\nGET /not-a-head HTTP/1.1\r\n\r\n");
        let cuts: Vec<usize> = (1..first.len()).step_by(7).collect();
        let stream = [&first[..], SMUGGLED].concat();
        let (guard, watch) = feed(&stream, &cuts);
        assert_eq!(guard.heads, 2);
        assert_eq!(refused_from(&watch), 2);
        // The extension was skipped, never buffered.
        assert_eq!(guard.pending.capacity(), 0);
    }

    #[test]
    fn lengths_hyper_refuses_refuse_that_request_and_the_rest() {
        for length in [
            "Content-Length: 1\r\nContent-Length: 2",
            "Content-Length: 4, 5",
            "Content-Length: -4",
            "Content-Length: 99999999999999999999",
        ] {
            let first = format!("POST /first HTTP/1.1\r\n{length}\r\n\r\n");
            let (guard, watch) = behind(first.as_bytes());
            assert_eq!(guard.state, State::Refusing, "{length}");
            assert_eq!((guard.heads, refused_from(&watch)), (1, 1), "{length}");
            assert_eq!(watch.next_refusal(), Some(Refusal::Unfollowable));
        }
        for first in [
            &b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            let (guard, watch) = behind(first);
            assert_eq!((guard.heads, refused_from(&watch)), (1, 1));
        }
    }

    #[test]
    fn an_answer_that_switches_protocols_ends_the_watch() {
        let upgrade =
            b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n";
        let cases: [(&[u8], bool, StatusCode); 3] = [
            (upgrade, false, StatusCode::SWITCHING_PROTOCOLS),
            (
                b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
                true,
                StatusCode::OK,
            ),
            // hyper ends HTTP/1 after any 101, asked for or not.
            (
                b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
                false,
                StatusCode::SWITCHING_PROTOCOLS,
            ),
        ];
        for (head, connect, status) in cases {
            let watch = Arc::new(FramingWatch::default());
            let mut guard = FramingGuard::new((), watch.clone());
            guard.observe(head);
            assert_eq!(watch.next_refusal(), None);
            watch.record_answer(connect, status);
            // Tunnel bytes that would read as an ambiguous head are not interpreted.
            guard.observe(SMUGGLED);
            assert_eq!(guard.state, State::Released);
            assert_eq!((guard.heads, refused_from(&watch)), (1, 0));
        }
    }

    #[test]
    fn tunnel_bytes_read_ahead_of_the_switch_concern_no_request() {
        // A client sends data right behind its upgrade request, before the 101: hyper may read
        // it early, and the guard follows it as HTTP/1 until it hears of the switch.
        let watch = Arc::new(FramingWatch::default());
        let mut guard = FramingGuard::new((), watch.clone());
        guard.observe(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x85garbage");
        assert_eq!(guard.state, State::Refusing);
        // The upgrade request itself is still answered, by the origin.
        assert_eq!(watch.next_refusal(), None);
        watch.record_answer(false, StatusCode::SWITCHING_PROTOCOLS);
        guard.observe(b"more tunnel bytes");
        assert_eq!(guard.heads, 1);
    }

    #[test]
    fn other_answers_keep_the_watch() {
        let watch = Arc::new(FramingWatch::default());
        watch.record_answer(false, StatusCode::OK);
        watch.record_answer(true, StatusCode::BAD_REQUEST);
        watch.record_answer(false, StatusCode::NO_CONTENT);
        watch.record_answer(true, StatusCode::PROXY_AUTHENTICATION_REQUIRED);
        assert!(!watch.has_switched());
    }

    #[test]
    fn the_http2_preface_releases_the_watch_only_at_the_start() {
        let (guard, watch) = feed(
            &[H2_PREFACE, b"\x00\x00\x12\x04\x00\x00\x00\x00\x00"].concat(),
            &[1, 3, 20],
        );
        assert_eq!(
            (guard.state, guard.heads, refused_from(&watch)),
            (State::Released, 0, 0)
        );
        assert_eq!(watch.next_refusal(), None);
        // Anywhere else it is a head hyper refuses, and so is what follows.
        let stream = [&b"GET / HTTP/1.1\r\n\r\n"[..], H2_PREFACE, SMUGGLED].concat();
        let (guard, watch) = feed(&stream, &[]);
        assert_eq!(
            (guard.state, guard.heads, refused_from(&watch)),
            (State::Refusing, 1, 2)
        );
        // A request whose first bytes happen to match the preface is still followed.
        let stream = [&b"PRIVATE / HTTP/1.1\r\n\r\n"[..], SMUGGLED].concat();
        let cuts: Vec<usize> = (1..stream.len()).collect();
        let (guard, watch) = feed(&stream, &cuts);
        assert_eq!((guard.heads, refused_from(&watch)), (2, 2));
        let (_, watch) = feed(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", &[]);
        assert_eq!(refused_from(&watch), 1);
    }

    #[test]
    fn oversized_heads_refuse_without_growing() {
        let mut head = b"GET / HTTP/1.1\r\nx-big: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES));
        let cuts: Vec<usize> = (1..head.len()).step_by(1000).collect();
        let (guard, watch) = feed(&head, &cuts);
        assert_eq!(guard.state, State::Refusing);
        assert_eq!(refused_from(&watch), 1);
        assert_eq!(guard.pending.capacity(), 0);
    }

    #[test]
    fn a_large_split_head_leaves_no_large_buffer_behind() {
        let mut stream = b"GET / HTTP/1.1\r\nx-big: ".to_vec();
        stream.extend(std::iter::repeat_n(b'a', 32 * 1024));
        stream.extend_from_slice(b"\r\n\r\n");
        let (guard, _) = feed(&stream, &[10, 20_000]);
        assert_eq!((guard.heads, guard.state), (1, State::Head));
        assert!(guard.pending.capacity() <= KEPT_PENDING_CAPACITY);
    }
}
