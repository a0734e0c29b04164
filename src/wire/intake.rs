//! Request bodies Concert reads in full before acting on them: a page's body, taken in before
//! the request may wait for or hold a page slot (so a slow client never holds one), and an
//! admin call's. Every read has a size limit, a progress deadline (the longest pause between
//! two pieces) and an overall deadline.
//!
//! A page's body stays in memory up to [`MEMORY_LIMIT`]; beyond that it goes to a nameless
//! file in the spool directory, written in batches off the async workers, and mapped into
//! memory when it is sent to the origin, so the bytes go from the page cache to the origin's
//! socket without being copied out of the file first.

use std::collections::VecDeque;
use std::fs::File;
use std::future::Future;
use std::io::{self, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, SizeHint};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::body::RequestBody;
use crate::store::{SpoolClaim, SpoolDir};

/// Bytes of one page body kept in memory before it moves to a file (nginx's
/// `client_body_buffer_size` on 64-bit systems is 16 KiB; a little more keeps most form posts
/// off the disk).
pub(crate) const MEMORY_LIMIT: usize = 64 * 1024;

/// Bytes of a spooled body handed to the origin connection at a time: the pieces are views of
/// one mapping, so their size only sets how often the connection asks for more.
const SEND_PIECE: usize = 1024 * 1024;

/// Bytes gathered before each write to a spool file once the body is on its way there: each
/// write is a round trip to the blocking pool, and at 64 KiB those round trips (two thread
/// switches each) cost as much as the copying; 512 KiB a write took a 50 MB upload from 119 to
/// 75 ms of CPU. Held per upload in progress, so it stays well under a megabyte.
const SPOOL_BATCH: usize = 512 * 1024;

/// The limits of one body read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntakeLimits {
    /// Largest body taken; 0 for no limit.
    pub max_bytes: u64,
    /// Longest pause between two pieces of the body (and before the first).
    pub progress: Duration,
    /// When the whole body must be in; `None` for no overall limit.
    pub deadline: Option<Instant>,
}

/// Why a body could not be taken in.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IntakeError {
    #[error("the request body is larger than allowed")]
    TooLarge,
    #[error("the request body did not arrive in time")]
    TimedOut,
    #[error("the request body broke off: {0}")]
    Broken(BoxError),
    #[error("cannot buffer the request body: {0}")]
    Spool(io::Error),
    #[error("the uploads being buffered already fill -upload-disk-limit")]
    SpoolFull,
}

impl IntakeLimits {
    /// Limits for a body read starting now: at most `max_bytes` (0 = none), no pause over
    /// `progress`, all of it within `overall` (zero = no overall limit).
    pub(crate) fn starting_now(max_bytes: u64, progress: Duration, overall: Duration) -> Self {
        IntakeLimits {
            max_bytes,
            progress,
            deadline: (!overall.is_zero()).then(|| Instant::now() + overall),
        }
    }

    /// Refuses a body whose declared length is already over the limit, before reading any of
    /// it (and before an HTTP/1.1 client that sent `Expect: 100-continue` is told to go on).
    pub(crate) fn check_declared(&self, body: &impl Body) -> Result<(), IntakeError> {
        if self.max_bytes != 0 && body.size_hint().lower() > self.max_bytes {
            return Err(IntakeError::TooLarge);
        }
        Ok(())
    }
}

/// Reads a body piece by piece within its limits.
struct LimitedReader<B> {
    body: Pin<Box<B>>,
    limits: IntakeLimits,
    received: u64,
}

impl<B: RequestBody> LimitedReader<B> {
    fn new(body: B, limits: IntakeLimits) -> Result<Self, IntakeError> {
        limits.check_declared(&body)?;
        Ok(LimitedReader {
            body: Box::pin(body),
            limits,
            received: 0,
        })
    }

    /// The next piece of data, or `None` at the end. Trailers are dropped: the origin gets
    /// the body with a length, which has no room for them.
    async fn next(&mut self) -> Result<Option<Bytes>, IntakeError> {
        loop {
            let mut due = Instant::now() + self.limits.progress;
            if let Some(deadline) = self.limits.deadline {
                due = due.min(deadline);
            }
            let frame = match tokio::time::timeout_at(due, self.body.frame()).await {
                Err(_) => return Err(IntakeError::TimedOut),
                Ok(None) => return Ok(None),
                Ok(Some(Err(error))) => return Err(IntakeError::Broken(error.into())),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let length = u64::try_from(data.len()).unwrap_or(u64::MAX);
            self.received = self.received.saturating_add(length);
            if self.limits.max_bytes != 0 && self.received > self.limits.max_bytes {
                return Err(IntakeError::TooLarge);
            }
            if !data.is_empty() {
                return Ok(Some(data));
            }
        }
    }
}

/// Reads a small body (an admin call's) into memory.
pub(crate) async fn collect<B: RequestBody>(
    body: B,
    limits: IntakeLimits,
) -> Result<Bytes, IntakeError> {
    let mut reader = LimitedReader::new(body, limits)?;
    let Some(first) = reader.next().await? else {
        return Ok(Bytes::new());
    };
    let Some(second) = reader.next().await? else {
        return Ok(first);
    };
    let mut whole = BytesMut::with_capacity(first.len() + second.len());
    whole.extend_from_slice(&first);
    whole.extend_from_slice(&second);
    while let Some(more) = reader.next().await? {
        whole.extend_from_slice(&more);
    }
    Ok(whole.freeze())
}

/// Takes a page's whole body in: in memory up to [`MEMORY_LIMIT`], the rest in a nameless
/// file in `spool`, whose files together may hold at most `disk_limit` bytes (0 = no limit):
/// without that bound, slow uploaders each holding up to `-max-body` could fill the disk the
/// bans and settings are saved on.
pub(crate) async fn take_in<B: RequestBody>(
    body: B,
    limits: IntakeLimits,
    spool: &Arc<SpoolDir>,
    disk_limit: u64,
) -> Result<TakenBody, IntakeError> {
    let mut reader = LimitedReader::new(body, limits)?;
    let mut claim = SpoolClaim::new(spool);
    let mut held: Vec<Bytes> = Vec::new();
    let mut held_bytes = 0usize;
    let mut file: Option<File> = None;
    let mut written = 0u64;
    while let Some(data) = reader.next().await? {
        held_bytes += data.len();
        held.push(data);
        let flush_at = if file.is_none() {
            MEMORY_LIMIT
        } else {
            SPOOL_BATCH
        };
        if held_bytes <= flush_at {
            continue;
        }
        claim
            .grow(u64::try_from(held_bytes).unwrap_or(u64::MAX), disk_limit)
            .map_err(|_| IntakeError::SpoolFull)?;
        let batch = std::mem::take(&mut held);
        let spool = Arc::clone(spool);
        let into = file.take();
        // Writing through the page cache is quick, but it still blocks.
        let (spooled, wrote) =
            tokio::task::spawn_blocking(move || write_batch(into, &spool, batch))
                .await
                .map_err(|joined| IntakeError::Spool(io::Error::other(joined)))?
                .map_err(IntakeError::Spool)?;
        file = Some(spooled);
        written += wrote;
        held_bytes = 0;
    }
    let kind = match file {
        None => Kind::Memory(held.into()),
        Some(file) => Kind::File {
            file: Some(file),
            length: written,
            mapping: None,
            unsent: None,
            tail: held.into(),
        },
    };
    let length = written + u64::try_from(held_bytes).unwrap_or(u64::MAX);
    Ok(TakenBody {
        kind,
        remaining: length,
        _claim: claim,
    })
}

/// Appends `batch` to the spool file, creating it first if need be.
fn write_batch(file: Option<File>, spool: &SpoolDir, batch: Vec<Bytes>) -> io::Result<(File, u64)> {
    let mut file = match file {
        Some(file) => file,
        None => spool.new_file()?,
    };
    let mut wrote = 0u64;
    for data in &batch {
        file.write_all(data)?;
        wrote += u64::try_from(data.len()).unwrap_or(u64::MAX);
    }
    Ok((file, wrote))
}

/// Maps the first `length` bytes of a finished spool file into memory, with its pages faulted
/// in here (off the async workers) rather than one by one while the origin's socket is written.
fn map_spooled(file: File, length: u64) -> io::Result<Bytes> {
    let length = usize::try_from(length).map_err(io::Error::other)?;
    // SAFETY: a mapping is sound only while no one changes or shortens the file. This one has
    // no name (it was made with `O_TMPFILE`, or unlinked at once), so no other process can
    // open it but through this process's `/proc` entry, which takes the rights to write this
    // process's memory anyway; Concert wrote it in full before this point and never writes
    // it again, and the handle closes right after mapping.
    let mapping = unsafe {
        memmap2::MmapOptions::new()
            .len(length)
            .populate()
            .map(&file)?
    };
    Ok(Bytes::from_owner(mapping))
}

/// A body taken in whole, as it goes to the origin: its length is known, so it travels with
/// `Content-Length`.
pub(crate) struct TakenBody {
    kind: Kind,
    remaining: u64,
    /// The spool room its file takes, given back with the file.
    _claim: SpoolClaim,
}

enum Kind {
    Memory(VecDeque<Bytes>),
    /// `length` bytes in `file`, then `tail` (the last pieces, which never filled a batch).
    File {
        /// Until the mapping starts.
        file: Option<File>,
        length: u64,
        mapping: Option<JoinHandle<io::Result<Bytes>>>,
        /// What is left of the file's bytes to send, once mapped.
        unsent: Option<Bytes>,
        tail: VecDeque<Bytes>,
    },
}

impl TakenBody {
    /// The body's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.remaining
    }

    /// Whether the body went to a file.
    #[cfg(test)]
    pub(crate) fn is_spooled(&self) -> bool {
        matches!(self.kind, Kind::File { .. })
    }

    fn sent(&mut self, data: Bytes) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let length = u64::try_from(data.len()).unwrap_or(u64::MAX);
        self.remaining = self.remaining.saturating_sub(length);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl Body for TakenBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        let next = match &mut this.kind {
            Kind::Memory(pieces) => pieces.pop_front(),
            Kind::File {
                file,
                length,
                mapping,
                unsent,
                tail,
            } => loop {
                if let Some(rest) = unsent {
                    if rest.is_empty() {
                        break tail.pop_front();
                    }
                    break Some(rest.split_to(rest.len().min(SEND_PIECE)));
                }
                if mapping.is_none() {
                    let Some(from) = file.take() else {
                        return Poll::Ready(Some(Err(io::Error::other(
                            "the buffered body's file is gone",
                        ))));
                    };
                    let length = *length;
                    *mapping = Some(tokio::task::spawn_blocking(move || {
                        map_spooled(from, length)
                    }));
                }
                let Some(task) = mapping.as_mut() else {
                    continue;
                };
                let mapped = match Pin::new(task).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(mapped) => mapped,
                };
                *mapping = None;
                match mapped.map_err(io::Error::other).and_then(|mapped| mapped) {
                    Ok(mapped) => *unsent = Some(mapped),
                    Err(error) => return Poll::Ready(Some(Err(error))),
                }
            },
        };
        match next {
            Some(data) => this.sent(data),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    fn limits(max_bytes: u64) -> IntakeLimits {
        IntakeLimits {
            max_bytes,
            progress: Duration::from_secs(5),
            deadline: None,
        }
    }

    fn pieces(count: usize, size: usize) -> impl RequestBody {
        let frames = (0..count).map(move |i| {
            Ok::<_, io::Error>(Frame::data(Bytes::from(vec![(i % 251) as u8; size])))
        });
        StreamBody::new(futures_util::stream::iter(frames))
    }

    fn expected(count: usize, size: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|i| std::iter::repeat_n((i % 251) as u8, size))
            .collect()
    }

    #[tokio::test]
    async fn a_small_body_stays_in_memory_and_comes_back_whole() {
        let spool = Arc::new(SpoolDir::in_system_temp());
        let taken = take_in(pieces(3, 1000), limits(0), &spool, 0)
            .await
            .unwrap();
        assert!(!taken.is_spooled());
        assert_eq!(taken.len(), 3000);
        assert_eq!(taken.size_hint().exact(), Some(3000));
        let bytes = taken.collect().await.unwrap().to_bytes();
        assert_eq!(bytes, expected(3, 1000));
    }

    #[tokio::test]
    async fn a_large_body_goes_to_a_file_and_comes_back_whole() {
        let spool = Arc::new(SpoolDir::in_system_temp());
        // Not a multiple of the batch size, so a tail stays in memory.
        let taken = take_in(pieces(41, 7_001), limits(0), &spool, 0)
            .await
            .unwrap();
        assert!(taken.is_spooled());
        assert_eq!(taken.len(), 41 * 7_001);
        let bytes = taken.collect().await.unwrap().to_bytes();
        assert_eq!(bytes, expected(41, 7_001));
        assert_eq!(std::fs::read_dir(spool.path().unwrap()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn spooled_bodies_share_the_disk_limit_and_give_it_back() {
        let spool = Arc::new(SpoolDir::in_system_temp());
        // 100 pieces of 10 kB go to disk as 70 kB, then 530 kB; the rest stays in memory.
        let limit = 600_000;
        let first = take_in(pieces(100, 10_000), limits(0), &spool, limit)
            .await
            .unwrap();
        assert_eq!(spool.in_use(), limit);
        assert!(matches!(
            take_in(pieces(100, 10_000), limits(0), &spool, limit).await,
            Err(IntakeError::SpoolFull)
        ));
        // A body that fits in memory needs no room on disk.
        assert!(
            take_in(pieces(3, 1000), limits(0), &spool, limit)
                .await
                .is_ok()
        );
        drop(first);
        assert_eq!(spool.in_use(), 0);
        assert!(
            take_in(pieces(100, 10_000), limits(0), &spool, limit)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_declared_or_counted() {
        let spool = Arc::new(SpoolDir::in_system_temp());
        let declared = Full::new(Bytes::from(vec![0u8; 2_000]));
        assert!(matches!(
            take_in(declared, limits(1_999), &spool, 0).await,
            Err(IntakeError::TooLarge)
        ));
        assert!(matches!(
            take_in(pieces(4, 600), limits(2_000), &spool, 0).await,
            Err(IntakeError::TooLarge)
        ));
        assert_eq!(
            take_in(pieces(4, 500), limits(2_000), &spool, 0)
                .await
                .unwrap()
                .len(),
            2_000
        );
        assert_eq!(
            collect(pieces(2, 10), limits(20)).await.unwrap(),
            vec![0u8; 10]
                .into_iter()
                .chain([1u8; 10])
                .collect::<Vec<_>>()
        );
        assert!(matches!(
            collect(pieces(3, 10), limits(20)).await,
            Err(IntakeError::TooLarge)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_pauses_too_long_or_runs_out_of_time_is_timed_out() {
        let stalled = StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, io::Error>,
        >());
        let started = Instant::now();
        assert!(matches!(
            collect(stalled, limits(0)).await,
            Err(IntakeError::TimedOut)
        ));
        assert_eq!(started.elapsed(), Duration::from_secs(5));

        // A piece every 4 s keeps within the progress deadline, not within the overall one.
        let trickle = StreamBody::new(futures_util::stream::unfold(0, |sent| async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            Some((
                Ok::<_, io::Error>(Frame::data(Bytes::from_static(b"x"))),
                sent + 1,
            ))
        }));
        let started = Instant::now();
        let overall = IntakeLimits {
            deadline: Some(started + Duration::from_secs(30)),
            ..limits(0)
        };
        assert!(matches!(
            collect(trickle, overall).await,
            Err(IntakeError::TimedOut)
        ));
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }
}
