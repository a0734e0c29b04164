//! Open-loop (fixed-rate) HTTP/1.1 load generator for `benches/compare.sh`.
//!
//! Requests are due at a fixed rate spread over keep-alive connections. A pacer releases them as
//! they fall due, about every 100 us: tokio's own timers tick once a millisecond, and sending
//! each millisecond's requests as one burst measures how long the server takes to drain the
//! burst rather than its latency. Latency is counted from the moment a request was due whenever
//! the generator was running behind: a stalled server is charged for the queue it causes instead
//! of silently slowing the load (no coordinated omission). When a request went out on time,
//! latency starts when it was actually sent, so the pacer's tick is not blamed on the server.
//!
//! The generator shares a core with the origin, so it reads answers straight off the socket
//! (about the work wrk does per request) rather than through an HTTP client library that would
//! take that core's time from the origin.
//!
//! Usage: `loadgen URL RATE SECONDS [CONNECTIONS]` → one summary line.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

#[path = "support/url.rs"]
mod url;
use url::{Target, parse_url};

/// How often the pacer releases the requests that have fallen due.
const TICK: Duration = Duration::from_micros(100);
/// A request sent later than this after it fell due was held up by its connection (the previous
/// answer was late) or by the generator itself: it is timed from when it was due.
const LATE: Duration = Duration::from_micros(300);

/// When each request is due: request `n` goes out on connection `n % connections`.
#[derive(Clone, Copy)]
struct Schedule {
    start: Instant,
    end: Instant,
    interval: Duration,
    connections: u64,
}

impl Schedule {
    /// `None` once the run is over.
    fn due(&self, sequence: u64) -> Option<Instant> {
        let due = self.start + self.interval.mul_f64(sequence as f64);
        (due < self.end).then_some(due)
    }
}

/// One connection's share of the released requests.
#[derive(Default)]
struct Lane {
    released: AtomicU64,
    wake: Notify,
}

/// Releases every request as it falls due, to its connection's lane, until the run is over.
/// It wakes on `tick`, which a thread of its own sounds every [`TICK`]: a thread's sleep ends
/// within tens of microseconds of when it asked, where a tokio timer fires on a millisecond tick.
/// One cross-thread wake-up per tick, and none per request, keeps the pacing cheap on a core
/// the generator shares with the origin.
async fn pace(schedule: Schedule, lanes: Arc<[Lane]>, tick: Arc<Notify>) {
    let metronome = {
        let tick = tick.clone();
        std::thread::spawn(move || {
            while Arc::strong_count(&tick) > 1 {
                std::thread::sleep(TICK);
                tick.notify_one();
            }
        })
    };
    let mut next = 0u64;
    loop {
        let now = Instant::now();
        while let Some(due) = schedule.due(next)
            && due <= now
        {
            let lane = &lanes[(next % schedule.connections) as usize];
            lane.released.fetch_add(1, Ordering::Release);
            lane.wake.notify_one();
            next += 1;
        }
        if schedule.due(next).is_none() {
            break;
        }
        tick.notified().await;
    }
    drop(tick);
    let _ = tokio::task::spawn_blocking(move || metronome.join()).await;
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    errors: u64,
}

async fn connection(
    target: Arc<Target>,
    index: u64,
    schedule: Schedule,
    lanes: Arc<[Lane]>,
) -> Tally {
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        target.path, target.authority
    );
    let mut tally = Tally::default();
    let mut open: Option<Connection> = None;
    let lane = &lanes[index as usize];
    let mut taken = 0u64;
    let mut sequence = index;
    while let Some(due) = schedule.due(sequence) {
        sequence += schedule.connections;
        loop {
            // Created before the check, so a release between the two is not missed.
            let released = lane.wake.notified();
            if lane.released.load(Ordering::Acquire) > taken {
                break;
            }
            released.await;
        }
        taken += 1;
        let now = Instant::now();
        let counted_from = if now.saturating_duration_since(due) <= LATE {
            now
        } else {
            due
        };
        if open.is_none() {
            open = Connection::open(&target.authority).await;
        }
        let Some(conn) = open.as_mut() else {
            tally.errors += 1;
            continue;
        };
        match conn.exchange(request.as_bytes()).await {
            Some(answer) => {
                if answer.success {
                    tally
                        .latencies_us
                        .push(counted_from.elapsed().as_micros() as u64);
                } else {
                    tally.errors += 1;
                }
                if answer.closes {
                    open = None;
                }
            }
            None => {
                tally.errors += 1;
                open = None;
            }
        }
    }
    tally
}

/// A keep-alive HTTP/1.1 connection, answers framed by `Content-Length` or chunked.
struct Connection {
    stream: TcpStream,
    buf: BytesMut,
}

struct Answer {
    success: bool,
    closes: bool,
}

impl Connection {
    async fn open(authority: &str) -> Option<Connection> {
        let stream = TcpStream::connect(authority).await.ok()?;
        stream.set_nodelay(true).ok()?;
        Some(Connection {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
        })
    }

    /// Sends `request` and reads its whole answer; `None` when the connection failed or the
    /// answer could not be read (then the connection is not used again).
    async fn exchange(&mut self, request: &[u8]) -> Option<Answer> {
        self.stream.write_all(request).await.ok()?;
        let (head_len, status, framing, closes) = loop {
            let mut fields = [httparse::EMPTY_HEADER; 64];
            let mut head = httparse::Response::new(&mut fields);
            match head.parse(&self.buf).ok()? {
                httparse::Status::Complete(len) => {
                    let status = head.code?;
                    let framing = Framing::of(head.headers)?;
                    let closes = head.headers.iter().any(|field| {
                        field.name.eq_ignore_ascii_case("connection")
                            && field.value.eq_ignore_ascii_case(b"close")
                    });
                    break (len, status, framing, closes);
                }
                httparse::Status::Partial => self.fill().await?,
            }
        };
        self.buf.advance(head_len);
        match framing {
            Framing::Length(length) => self.skip(length).await?,
            Framing::Chunked => loop {
                let line = self.line().await?;
                let size = std::str::from_utf8(&line).ok()?;
                let size = size.split(';').next()?.trim();
                let size = usize::from_str_radix(size, 16).ok()?;
                if size == 0 {
                    // Trailer fields, if any, up to the empty line.
                    while !self.line().await?.is_empty() {}
                    break;
                }
                self.skip(size).await?;
                if !self.line().await?.is_empty() {
                    return None;
                }
            },
        }
        Some(Answer {
            success: (200..300).contains(&status),
            closes,
        })
    }

    /// Reads more of the answer; `None` at the end of the stream or on an error.
    async fn fill(&mut self) -> Option<()> {
        self.buf.reserve(16 * 1024);
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(()),
        }
    }

    /// Drops the next `length` bytes of the answer.
    async fn skip(&mut self, mut length: usize) -> Option<()> {
        loop {
            let here = length.min(self.buf.len());
            self.buf.advance(here);
            length -= here;
            if length == 0 {
                return Some(());
            }
            self.fill().await?;
        }
    }

    /// The next CRLF-terminated line, without its CRLF.
    async fn line(&mut self) -> Option<BytesMut> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|pair| pair == b"\r\n") {
                let line = self.buf.split_to(end);
                self.buf.advance(2);
                return Some(line);
            }
            self.fill().await?;
        }
    }
}

/// How an answer's body is delimited; an answer that is neither is not supported.
enum Framing {
    Length(usize),
    Chunked,
}

impl Framing {
    fn of(fields: &[httparse::Header<'_>]) -> Option<Framing> {
        for field in fields {
            if field.name.eq_ignore_ascii_case("transfer-encoding") {
                return field
                    .value
                    .eq_ignore_ascii_case(b"chunked")
                    .then_some(Framing::Chunked);
            }
        }
        let length = fields
            .iter()
            .find(|field| field.name.eq_ignore_ascii_case("content-length"))?;
        let length = std::str::from_utf8(length.value)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some(Framing::Length(length))
    }
}

fn percentile(sorted: &[u64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index] as f64 / 1000.0
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: loadgen URL RATE SECONDS [CONNECTIONS]";
    let url = args.first().ok_or(usage)?;
    let rate: f64 = args.get(1).and_then(|a| a.parse().ok()).ok_or(usage)?;
    let seconds: f64 = args.get(2).and_then(|a| a.parse().ok()).ok_or(usage)?;
    let connections: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(64);
    if !(rate > 0.0 && seconds > 0.0 && seconds <= 600.0 && connections > 0) {
        return Err(usage.to_string());
    }
    let target = Arc::new(parse_url(url)?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (tally, elapsed) = runtime.block_on(async move {
        let start = Instant::now() + Duration::from_millis(50);
        let schedule = Schedule {
            start,
            end: start + Duration::from_secs_f64(seconds),
            interval: Duration::from_secs_f64(1.0 / rate),
            connections,
        };
        let lanes: Arc<[Lane]> = (0..connections).map(|_| Lane::default()).collect();
        let pacer = tokio::spawn(pace(schedule, lanes.clone(), Arc::new(Notify::new())));
        let tasks: Vec<_> = (0..connections)
            .map(|index| tokio::spawn(connection(target.clone(), index, schedule, lanes.clone())))
            .collect();
        let mut total = Tally::default();
        for task in tasks {
            if let Ok(part) = task.await {
                total.latencies_us.extend(part.latencies_us);
                total.errors += part.errors;
            }
        }
        let _ = pacer.await;
        (total, start.elapsed())
    });
    let mut latencies = tally.latencies_us;
    latencies.sort_unstable();
    println!(
        "rate={rate:.0} achieved={:.0} ok={} errors={} p50={:.3} p90={:.3} p99={:.3} p999={:.3} max={:.3}",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        latencies.len(),
        tally.errors,
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.90),
        percentile(&latencies, 0.99),
        percentile(&latencies, 0.999),
        percentile(&latencies, 1.0),
    );
    Ok(())
}
