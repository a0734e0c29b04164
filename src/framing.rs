//! HTTP/1.1 message framing (RFC 9112 §6): the length and chunk-size parsers, and the guard that
//! watches how each client request on a connection is framed.
//!
//! hyper decides a request that carries both `Content-Length` and `Transfer-Encoding` by the
//! transfer coding, drops the length and closes the connection afterwards — allowed, but such a
//! request is nearly always an attempt to desynchronise some server behind Concert, and hyper
//! leaves no trace of the length for the handler to see. [`FramingGuard`] reads the same bytes
//! hyper reads, one step ahead of it, follows the framing from head to head, and records which
//! request was ambiguous so that it is refused (400) instead of forwarded.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::{MAX_HEAD_BYTES, MAX_HEADERS};

/// A decimal `Content-Length` value: digits only, no sign, no spaces, no overflow.
pub(crate) fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |sum, &digit| {
        digit
            .is_ascii_digit()
            .then(|| sum * 10 + u64::from(digit - b'0'))
    })
}

/// The size at the start of a chunk-size line (extensions after `;` are ignored).
pub(crate) fn parse_chunk_size(line: &[u8]) -> Option<u64> {
    let digits = match line.iter().position(|&b| b == b';') {
        Some(semicolon) => &line[..semicolon],
        None => line,
    }
    .trim_ascii();
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    digits.iter().try_fold(0u64, |sum, &digit| {
        let value = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            b'A'..=b'F' => digit - b'A' + 10,
            _ => return None,
        };
        Some(sum * 16 + u64::from(value))
    })
}

/// Longest chunk-size line (size and extensions) the guard follows; past it, it stops watching.
const MAX_CHUNK_LINE: usize = 4096;
/// Largest buffer for split heads a connection keeps between requests.
const KEPT_PENDING_CAPACITY: usize = 4096;

/// What one connection's guard has seen, shared with the service that answers its requests.
#[derive(Debug, Default)]
pub(crate) struct FramingWatch {
    /// 1-based index of the first request whose head carried both framing headers; 0 for none.
    ambiguous: AtomicU64,
    /// Requests handed to the service so far.
    dispatched: AtomicU64,
}

impl FramingWatch {
    /// Called once per request, in order: whether this request's framing was ambiguous.
    ///
    /// hyper dispatches an HTTP/1 connection's requests in the order their heads arrive, and
    /// only after reading a head, so the guard has always counted the head in question.
    pub(crate) fn next_is_ambiguous(&self) -> bool {
        let index = self.dispatched.fetch_add(1, Ordering::Relaxed) + 1;
        self.ambiguous.load(Ordering::Acquire) == index
    }

    fn mark_ambiguous(&self, index: u64) {
        let _ = self
            .ambiguous
            .compare_exchange(0, index, Ordering::Release, Ordering::Relaxed);
    }
}

/// Where in the byte stream of requests the guard is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before or inside a request head.
    Head,
    /// Inside a body of known length: this many bytes left.
    Fixed(u64),
    /// Inside a chunk-size line (what came so far is in `pending`).
    ChunkSize,
    /// Inside a chunk's data: this many bytes left.
    ChunkData(u64),
    /// The line end after a chunk's data.
    ChunkDataEnd,
    /// Inside the trailer section; whether the current line is still empty.
    Trailers { line_empty: bool },
    /// No longer watching: an upgrade or h2 took the connection, or the bytes are something hyper
    /// refuses itself (and then closes the connection).
    Unwatched,
}

/// Client side of a connection, read through so that request framing is watched.
pub(crate) struct FramingGuard<S> {
    inner: S,
    watch: Arc<FramingWatch>,
    state: State,
    /// Request heads seen so far.
    heads: u64,
    /// A head or chunk-size line split across reads.
    pending: Vec<u8>,
}

impl<S> FramingGuard<S> {
    pub(crate) fn new(inner: S, watch: Arc<FramingWatch>) -> FramingGuard<S> {
        FramingGuard {
            inner,
            watch,
            state: State::Head,
            heads: 0,
            pending: Vec::new(),
        }
    }

    /// Follows the framing over bytes just read from the client.
    fn observe(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            bytes = match self.state {
                State::Unwatched => return,
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
                State::ChunkSize => self.observe_chunk_size(bytes),
                State::ChunkData(left) => {
                    let (rest, left) = skip(bytes, left);
                    self.state = if left == 0 {
                        State::ChunkDataEnd
                    } else {
                        State::ChunkData(left)
                    };
                    rest
                }
                State::ChunkDataEnd => match bytes[0] {
                    b'\r' => &bytes[1..],
                    b'\n' => {
                        self.state = State::ChunkSize;
                        &bytes[1..]
                    }
                    _ => {
                        self.state = State::Unwatched;
                        return;
                    }
                },
                State::Trailers { line_empty } => {
                    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
                        let blank = bytes.iter().all(|&b| b == b'\r');
                        self.state = State::Trailers {
                            line_empty: line_empty && blank,
                        };
                        return;
                    };
                    let blank = line_empty && bytes[..end].iter().all(|&b| b == b'\r');
                    self.state = if blank {
                        State::Head
                    } else {
                        State::Trailers { line_empty: true }
                    };
                    &bytes[end + 1..]
                }
            };
        }
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
            // hyper answers 431 and closes.
            self.stop_watching();
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
                self.stop_watching();
                return HeadRead::Refused;
            }
        };
        self.heads += 1;
        let framing = Framing::of(&request);
        if framing.lengths > 0 && framing.transfer_coded {
            self.watch.mark_ambiguous(self.heads);
            // The connection ends after this request's answer.
            self.stop_watching();
            return HeadRead::Complete(length);
        }
        self.state = if framing.takes_over {
            State::Unwatched
        } else if framing.transfer_coded {
            if framing.chunked && request.version == Some(1) {
                State::ChunkSize
            } else {
                // hyper refuses any other transfer coding, and any in HTTP/1.0.
                State::Unwatched
            }
        } else {
            match framing.length {
                Some(0) => State::Head,
                Some(length) => State::Fixed(length),
                None if framing.lengths == 0 => State::Head,
                // Unparsable or disagreeing lengths: hyper answers 400 and closes.
                None => State::Unwatched,
            }
        };
        HeadRead::Complete(length)
    }

    /// Reads a chunk-size line; returns what follows it.
    fn observe_chunk_size<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
            self.pending.extend_from_slice(bytes);
            if self.pending.len() > MAX_CHUNK_LINE {
                self.stop_watching();
            }
            return &[];
        };
        let size = if self.pending.is_empty() {
            parse_chunk_size(&bytes[..end])
        } else {
            self.pending.extend_from_slice(&bytes[..end]);
            let size = parse_chunk_size(&self.pending);
            self.pending.clear();
            size
        };
        self.state = match size {
            Some(0) => State::Trailers { line_empty: true },
            Some(size) => State::ChunkData(size),
            None => State::Unwatched,
        };
        &bytes[end + 1..]
    }

    fn stop_watching(&mut self) {
        self.state = State::Unwatched;
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
    /// The request may switch the connection away from HTTP/1.1 (upgrade, CONNECT tunnel).
    takes_over: bool,
}

impl Framing {
    fn of(request: &httparse::Request<'_, '_>) -> Framing {
        let mut framing = Framing {
            lengths: 0,
            length: None,
            transfer_coded: false,
            chunked: false,
            takes_over: request.method == Some("CONNECT"),
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
            } else if name.eq_ignore_ascii_case("upgrade") {
                framing.takes_over = true;
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
        if this.state != State::Unwatched {
            let filled = buf.filled();
            if filled.len() > before {
                this.observe(&filled[before..]);
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FramingGuard<S> {
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
    use proptest::prelude::*;

    /// Text that looks like framing, to be carried inside bodies.
    const DECOY: &[u8] =
        b"\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

    /// Feeds `stream` to a fresh guard, cut at `cuts` (offsets, any order, out of range ignored).
    fn watch(stream: &[u8], cuts: &[usize]) -> (FramingGuard<()>, Arc<FramingWatch>) {
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

    fn ambiguous_index(watch: &FramingWatch) -> u64 {
        watch.ambiguous.load(Ordering::Relaxed)
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
            let (guard, watch) = watch(&stream, &cuts);
            prop_assert_eq!(guard.heads, messages.len() as u64);
            prop_assert_eq!(guard.state, State::Head);
            prop_assert!(guard.pending.is_empty());
            prop_assert_eq!(ambiguous_index(&watch), 0);
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
            let (_, watch) = watch(&stream, &cuts);
            prop_assert_eq!(ambiguous_index(&watch), at as u64 + 1);
        }
    }

    #[test]
    fn requests_are_matched_to_the_mark_in_order() {
        let watch = FramingWatch::default();
        watch.mark_ambiguous(2);
        watch.mark_ambiguous(3); // only the first counts: the connection ends after it
        let seen: Vec<bool> = (0..4).map(|_| watch.next_is_ambiguous()).collect();
        assert_eq!(seen, [false, true, false, false]);
    }

    #[test]
    fn byte_by_byte_and_bare_line_feeds_are_followed() {
        let stream = b"GET /a HTTP/1.1\nHost: x\n\nPOST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET /c HTTP/1.1\r\n\r\n";
        let cuts: Vec<usize> = (1..stream.len()).collect();
        let (guard, watch) = watch(stream, &cuts);
        assert_eq!(guard.heads, 3);
        assert_eq!(guard.state, State::Head);
        assert_eq!(ambiguous_index(&watch), 0);
    }

    #[test]
    fn what_is_not_http1_framing_is_left_alone() {
        let cases: [(&[u8], u64); 7] = [
            // The HTTP/2 preface: hyper's own affair from here on.
            (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0),
            (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 0),
            // An upgrade or a tunnel: after the head the bytes may be anything.
            (
                b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
                1,
            ),
            (b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", 1),
            // Refused by hyper, which then closes: no use following further.
            (
                b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                1,
            ),
            (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 1),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                1,
            ),
        ];
        for (stream, heads) in cases {
            let mut tail = stream.to_vec();
            tail.extend_from_slice(
                b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            );
            let (guard, watch) = watch(&tail, &[]);
            assert_eq!(
                guard.state,
                State::Unwatched,
                "{:?}",
                String::from_utf8_lossy(stream)
            );
            assert_eq!(guard.heads, heads, "{:?}", String::from_utf8_lossy(stream));
            assert_eq!(ambiguous_index(&watch), 0);
        }
    }

    #[test]
    fn oversized_heads_and_chunk_lines_stop_the_watch_without_growing() {
        let mut head = b"GET / HTTP/1.1\r\nx-big: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES));
        let cuts: Vec<usize> = (1..head.len()).step_by(1000).collect();
        let (guard, _) = watch(&head, &cuts);
        assert_eq!(guard.state, State::Unwatched);
        assert_eq!(guard.pending.capacity(), 0);

        let mut chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;".to_vec();
        chunked.extend(std::iter::repeat_n(b'e', MAX_CHUNK_LINE * 2));
        let cuts: Vec<usize> = (1..chunked.len()).step_by(100).collect();
        let (guard, _) = watch(&chunked, &cuts);
        assert_eq!(guard.state, State::Unwatched);
    }

    #[test]
    fn a_large_split_head_leaves_no_large_buffer_behind() {
        let mut stream = b"GET / HTTP/1.1\r\nx-big: ".to_vec();
        stream.extend(std::iter::repeat_n(b'a', 32 * 1024));
        stream.extend_from_slice(b"\r\n\r\n");
        let (guard, _) = watch(&stream, &[10, 20_000]);
        assert_eq!((guard.heads, guard.state), (1, State::Head));
        assert!(guard.pending.capacity() <= KEPT_PENDING_CAPACITY);
    }

    #[test]
    fn lengths_and_chunk_sizes_parse_strictly() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"1234"), Some(1234));
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b"1 2",
            b"0x10",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
        assert_eq!(parse_chunk_size(b"1a"), Some(26));
        assert_eq!(parse_chunk_size(b"1A;name=value"), Some(26));
        assert_eq!(parse_chunk_size(b"0"), Some(0));
        assert_eq!(parse_chunk_size(b"ff ; ext"), Some(255));
        for bad in [&b""[..], b";ext", b"g", b"-1", b"1 2", b"1000000000000000"] {
            assert_eq!(parse_chunk_size(bad), None, "{bad:?}");
        }
    }
}
