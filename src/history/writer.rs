//! The one writer of `history.jsonl`: a thread of its own behind a bounded queue, so a request
//! never waits for the disk and never wakes anything up.
//!
//! Requests hand their event over with a non-blocking send; when the queue is full the event is
//! dropped and counted. The thread wakes every 100 ms (sooner under load), turns what arrived
//! into lines in a 64 KiB buffer, writes the buffer out once a second (or when it is full),
//! fsyncs every ten seconds and when it is closed, and rotates the file before a line would take
//! it past its size limit. A failing disk is reported once and retried ten seconds later; what
//! arrives meanwhile is dropped and counted.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;

use super::WINDOW_ITEMS;
use super::event::{Event, LineWriter, encode, field, kind};

/// Events waiting for the writer at most.
pub(super) const QUEUE: usize = 16_384;
/// The write buffer.
const BUFFER: usize = 64 * 1024;
/// How often buffered lines reach the file.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often written lines are made durable.
const SYNC_EVERY: Duration = Duration::from_secs(10);
/// How long a failing file is left alone before it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How often a growing count of dropped events is reported.
const REPORT_DROPS_EVERY: Duration = Duration::from_secs(60);
/// Distinct paths summed into `agg` lines per flush (about a second), across all clients.
const SUMMED_KEYS: usize = 50_000;

/// When the file is rotated and how many old files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LogLimits {
    /// A line that would take a non-empty file past this many bytes goes to a new file.
    pub rotate_at: u64,
    /// Rotated files kept: `.1` (newest) to `.<keep>`.
    pub keep: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            rotate_at: 64 * 1024 * 1024,
            keep: 4,
        }
    }
}

/// The file with a rotation suffix (`history.jsonl.2`).
pub(super) fn rotated(path: &Path, index: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{index}"));
    PathBuf::from(name)
}

/// Counters shared by the senders and the writer.
#[derive(Debug, Default)]
struct Shared {
    written: AtomicU64,
    dropped: AtomicU64,
    closing: AtomicBool,
}

/// The log as operators see it: `<path> · <n> event(s) written · <n> dropped`, and
/// ` · <n> unreadable line(s) skipped at start` when reading it back skipped any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStatus {
    pub path: PathBuf,
    /// Lines written to the file since start.
    pub written: u64,
    /// Events lost since start: queue full or file failing.
    pub dropped: u64,
    /// Lines skipped when the log was read back at start.
    pub unreadable: u64,
}

impl std::fmt::Display for LogStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} · {} event(s) written · {} dropped",
            self.path.display(),
            self.written,
            self.dropped
        )?;
        if self.unreadable > 0 {
            write!(
                f,
                " · {} unreadable line(s) skipped at start",
                self.unreadable
            )?;
        }
        Ok(())
    }
}

/// The sending side, held by the history.
pub(super) struct Log {
    path: PathBuf,
    /// Lock-free and bounded: handing an event over is a few atomic operations, and the writer
    /// needs no wake-up per event, since it comes by every tenth of a second anyway.
    queue: Arc<ArrayQueue<Event>>,
    thread: std::thread::Thread,
    join: Mutex<Option<std::thread::JoinHandle<()>>>,
    shared: Arc<Shared>,
}

impl Log {
    /// Starts the writer thread for `path`. Opening the file happens there; a file that cannot
    /// be opened is reported and retried like any failing write.
    pub(super) fn start(path: PathBuf, limits: LogLimits) -> io::Result<Log> {
        let queue = Arc::new(ArrayQueue::new(QUEUE));
        let shared = Arc::new(Shared::default());
        let mut writer = Writer::new(path.clone(), limits, queue.clone(), shared.clone());
        let join = std::thread::Builder::new()
            .name("concert-history".into())
            .spawn(move || writer.run())?;
        Ok(Log {
            path,
            queue,
            thread: join.thread().clone(),
            join: Mutex::new(Some(join)),
            shared,
        })
    }

    /// Hands `event` over without waiting; a full queue drops it (counted) and hurries the
    /// writer along.
    pub(super) fn send(&self, event: Event) {
        if self.shared.closing.load(Ordering::Relaxed) {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        } else if self.queue.push(event).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            self.thread.unpark();
        }
    }

    pub(super) fn status(&self) -> LogStatus {
        LogStatus {
            path: self.path.clone(),
            written: self.shared.written.load(Ordering::Relaxed),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            unreadable: 0,
        }
    }

    /// Writes out everything sent so far, fsyncs and stops the writer. Blocks until done.
    pub(super) fn close(&self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.thread.unpark();
        if let Some(join) = self.join.lock().take()
            && join.join().is_err()
        {
            tracing::error!("the history writer stopped with a panic");
        }
    }
}

/// `agg` lines in the making: one client's blocked requests under one ban in one second.
#[derive(Debug, Default)]
struct Sum {
    second: i64,
    first: i64,
    last: i64,
    count: u64,
    paths: HashMap<Box<str>, u64>,
    other: u64,
}

struct Writer {
    path: PathBuf,
    limits: LogLimits,
    queue: Arc<ArrayQueue<Event>>,
    shared: Arc<Shared>,
    file: Option<File>,
    /// Bytes in the file plus those buffered for it.
    size: u64,
    buf: Vec<u8>,
    /// Lines in `buf`.
    buffered: u64,
    /// A write failed and has not succeeded since (reported once).
    failing: bool,
    /// When a closed (failed) file may be opened again.
    retry_at: Option<Instant>,
    last_flush: Instant,
    last_sync: Instant,
    unsynced: bool,
    sums: HashMap<(u64, IpAddr), Sum>,
    summed_keys: usize,
    /// Dropped events already reported, and when.
    reported_drops: (u64, Instant),
}

impl Writer {
    fn new(
        path: PathBuf,
        limits: LogLimits,
        queue: Arc<ArrayQueue<Event>>,
        shared: Arc<Shared>,
    ) -> Writer {
        let now = Instant::now();
        Writer {
            path,
            limits,
            queue,
            shared,
            file: None,
            size: 0,
            buf: Vec::with_capacity(BUFFER + 4096),
            buffered: 0,
            failing: false,
            retry_at: Some(now),
            last_flush: now,
            last_sync: now,
            unsynced: false,
            sums: HashMap::new(),
            summed_keys: 0,
            reported_drops: (0, now),
        }
    }

    fn run(&mut self) {
        // Opened at once: a path that cannot be written is reported at start, and a line a
        // crash cut short is finished before anything else happens.
        self.ready();
        loop {
            let (taken, disconnected) = self.take_queued();
            let now = Instant::now();
            let closing = disconnected || self.shared.closing.load(Ordering::SeqCst);
            if closing || now.duration_since(self.last_flush) >= FLUSH_EVERY {
                if closing {
                    // Whatever was sent before the close asked is in the queue by now.
                    self.take_queued();
                }
                self.write_sums();
                self.write_out();
                self.last_flush = now;
                self.report_drops(now, closing);
            }
            if self.unsynced && (closing || now.duration_since(self.last_sync) >= SYNC_EVERY) {
                self.sync();
            }
            if closing {
                return;
            }
            // Under load the queue fills quicker than a tenth of a second: come back sooner.
            let pause = if taken >= QUEUE / 8 {
                Duration::from_millis(10)
            } else {
                Duration::from_millis(100)
            };
            std::thread::park_timeout(pause);
        }
    }

    /// Says how many events were lost since the last report, at most once a minute.
    fn report_drops(&mut self, now: Instant, closing: bool) {
        let dropped = self.shared.dropped.load(Ordering::Relaxed);
        let (reported, when) = self.reported_drops;
        if dropped > reported && (closing || now.duration_since(when) >= REPORT_DROPS_EVERY) {
            tracing::warn!(
                path = %self.path.display(),
                dropped = dropped - reported,
                total = dropped,
                "history events dropped (queue full or file failing)"
            );
            self.reported_drops = (dropped, now);
        }
    }

    /// Takes every queued event in; returns how many, and whether the history's side is gone
    /// (so nothing more can arrive).
    fn take_queued(&mut self) -> (usize, bool) {
        let mut taken = 0;
        while let Some(event) = self.queue.pop() {
            taken += 1;
            self.take(event);
        }
        // Only the history and this writer hold the queue.
        (taken, Arc::strong_count(&self.queue) == 1)
    }

    fn take(&mut self, event: Event) {
        if let Event::Blocked { at, ip, ban, path } = event {
            self.add_to_sum(at, ip, ban, &path);
            return;
        }
        let start = self.buf.len();
        encode(&event, &mut self.buf);
        self.place_line(start);
    }

    fn add_to_sum(&mut self, at: i64, ip: IpAddr, ban: u64, path: &str) {
        let second = at.div_euclid(1_000_000_000);
        if self
            .sums
            .get(&(ban, ip))
            .is_some_and(|sum| sum.second != second)
            && let Some(done) = self.sums.remove(&(ban, ip))
        {
            self.write_sum(ban, ip, &done);
        }
        let sum = self.sums.entry((ban, ip)).or_insert_with(|| Sum {
            second,
            first: at,
            last: at,
            ..Sum::default()
        });
        sum.first = sum.first.min(at);
        sum.last = sum.last.max(at);
        sum.count += 1;
        let path = path.split_once('?').map_or(path, |(path, _)| path);
        if let Some(hits) = sum.paths.get_mut(path) {
            *hits += 1;
        } else if sum.paths.len() < WINDOW_ITEMS && self.summed_keys < SUMMED_KEYS {
            self.summed_keys += 1;
            sum.paths.insert(Box::from(path), 1);
        } else {
            sum.other += 1;
        }
    }

    fn write_sums(&mut self) {
        let sums = std::mem::take(&mut self.sums);
        for ((ban, ip), sum) in &sums {
            self.write_sum(*ban, *ip, sum);
        }
        self.summed_keys = 0;
    }

    fn write_sum(&mut self, ban: u64, ip: IpAddr, sum: &Sum) {
        let mut paths: Vec<(&str, u64)> = sum.paths.iter().map(|(p, n)| (&**p, *n)).collect();
        paths.sort_unstable();
        let start = self.buf.len();
        LineWriter::begin(&mut self.buf, kind!("agg"), sum.last)
            .number(field!("ban"), ban)
            .ip(field!("ip"), ip)
            .time(field!("first"), sum.first)
            .number(field!("count"), sum.count)
            .counts(field!("paths"), paths.into_iter())
            .number(field!("other_paths"), sum.other)
            .end();
        self.place_line(start);
    }

    /// The line just encoded at `buf[start..]`: rotate first if it would overflow the file,
    /// drop it when the file is failing, and write the buffer out once it is full.
    fn place_line(&mut self, start: usize) {
        if !self.ready() {
            self.buf.truncate(start);
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let line = (self.buf.len() - start) as u64;
        if self.size > 0 && self.size + line > self.limits.rotate_at {
            let line_bytes = self.buf.split_off(start);
            self.write_out();
            if let Err(error) = self.rotate() {
                self.fail(&error);
            }
            if !self.ready() {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.buf.extend_from_slice(&line_bytes);
        }
        self.size += line;
        self.buffered += 1;
        if self.buf.len() >= BUFFER {
            self.write_out();
        }
    }

    /// Whether there is a file to write to, opening it when it is time to try.
    fn ready(&mut self) -> bool {
        if self.file.is_some() {
            return true;
        }
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return false;
        }
        match self.open() {
            Ok(()) => {
                if self.failing {
                    tracing::info!(path = %self.path.display(), "history log writable again");
                    self.failing = false;
                }
                true
            }
            Err(error) => {
                self.fail(&error);
                false
            }
        }
    }

    fn open(&mut self) -> io::Result<()> {
        if let Some(parent) = self.path.parent()
            && !parent.as_os_str().is_empty()
            && !parent.exists()
        {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(&self.path)?;
        let metadata = file.metadata()?;
        // The mode above only applies to a new file; one made by hand or an older setup may
        // let others read who visited.
        if metadata.permissions().mode() & 0o777 != 0o600
            && let Err(error) = file.set_permissions(fs::Permissions::from_mode(0o600))
        {
            tracing::warn!(
                path = %self.path.display(),
                "cannot make the history log private (mode 0600): {error}"
            );
        }
        let mut size = metadata.len();
        // A crash can leave half a line at the end; finish it, or the next line would be
        // glued to it and lost with it.
        if size > 0 {
            let mut last = [0u8; 1];
            file.read_exact_at(&mut last, size - 1)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
                size += 1;
            }
        }
        self.file = Some(file);
        self.size = size + self.buf.len() as u64;
        self.retry_at = None;
        Ok(())
    }

    fn fail(&mut self, error: &io::Error) {
        if !self.failing {
            tracing::error!(
                path = %self.path.display(),
                "cannot write the history log: {error}; events are dropped until it works again (retried every {}s)",
                RETRY_AFTER.as_secs()
            );
            self.failing = true;
        }
        self.file = None;
        self.retry_at = Some(Instant::now() + RETRY_AFTER);
        self.shared
            .dropped
            .fetch_add(self.buffered, Ordering::Relaxed);
        self.buf.clear();
        self.buffered = 0;
    }

    fn write_out(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let Some(file) = self.file.as_mut() else {
            let error = io::Error::other("the file is not open");
            self.fail(&error);
            return;
        };
        match file.write_all(&self.buf) {
            Ok(()) => {
                self.shared
                    .written
                    .fetch_add(self.buffered, Ordering::Relaxed);
                self.unsynced = true;
                self.buf.clear();
                self.buffered = 0;
            }
            Err(error) => self.fail(&error),
        }
    }

    fn sync(&mut self) {
        if let Some(file) = &self.file
            && let Err(error) = file.sync_data()
        {
            self.fail(&error);
            return;
        }
        self.unsynced = false;
        self.last_sync = Instant::now();
    }

    /// `.<keep-1>` → `.<keep>` … `.1` → `.2`, the file → `.1`, then a new file.
    fn rotate(&mut self) -> io::Result<()> {
        if self.unsynced {
            self.sync();
        }
        self.file = None;
        if self.limits.keep == 0 {
            remove_if_present(&self.path)?;
        } else {
            for index in (1..self.limits.keep).rev() {
                rename_if_present(&rotated(&self.path, index), &rotated(&self.path, index + 1))?;
            }
            rename_if_present(&self.path, &rotated(&self.path, 1))?;
        }
        self.open()
    }
}

fn rename_if_present(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
