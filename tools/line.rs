//! A long line against the real binary: how much memory each waiting visitor costs Concert, and
//! what `/queue/status` costs while the line is long. Used by `benches/line.sh`.
//!
//! Starts `CONCERT` with `-cap 1` in front of an origin that never answers, takes the only slot
//! with one request that hangs, then brings `VISITORS` browsers into the line (each from its own
//! address, through `X-Forwarded-For` from the trusted loopback) over keep-alive connections.
//! Every visitor then polls `/queue/status` twice, a second apart, as the waiting page does. The
//! positions must be exactly 1..=VISITORS, each visitor's the same on both polls. Memory is the
//! process's resident size (`VmRSS`) after a warm-up line of `VISITORS / 10` visitors and after
//! the measured line, so the figure is what an operator sees grow: the room's tables and the
//! allocator's slack together.
//!
//! Usage: `line CONCERT VISITORS [CONNECTIONS]` → a few summary lines. The child inherits the
//! environment, so `CONCERT_WORKERS=2` and other `CONCERT_*` variables apply to it; the flags
//! the measurement depends on are given explicitly and win.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Everything, start to end, must finish within this.
const DEADLINE: Duration = Duration::from_secs(600);

/// A visitor's state between requests: its ticket and the position its polls reported.
#[derive(Clone, Default)]
struct Visitor {
    ticket: String,
    positions: [u64; 2],
}

/// Stops the child however the run ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An origin that accepts and never answers: the request holding the only slot stays there.
async fn silent_origin() -> Result<SocketAddr, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("origin: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        // Bounded: Concert opens one connection for the slot holder and perhaps a spare.
        while held.len() < 64 {
            match listener.accept().await {
                Ok((stream, _)) => held.push(stream),
                Err(_) => break,
            }
        }
        std::future::pending::<()>().await;
    });
    Ok(addr)
}

fn free_port() -> Result<u16, String> {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(probe.local_addr().map_err(|e| e.to_string())?.port())
}

fn resident_kib(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

async fn connect(addr: SocketAddr) -> Result<http1::SendRequest<Empty<Bytes>>, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// A distinct address for visitor `index` (10.0.0.0/8 holds 16 million).
fn visitor_address(index: usize) -> Ipv4Addr {
    let [_, b, c, d] = (index as u32).to_be_bytes();
    Ipv4Addr::new(10, b, c, d)
}

/// A GET of `path` as visitor `index` would send it, arriving through the trusted loopback.
fn from_visitor(index: usize, path: &str, accept: &str) -> hyper::http::request::Builder {
    hyper::Request::get(path)
        .header(hyper::header::HOST, "line.test")
        .header(hyper::header::ACCEPT, accept)
        .header("x-forwarded-for", visitor_address(index).to_string())
}

async fn send(
    sender: &mut http1::SendRequest<Empty<Bytes>>,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<(u16, hyper::HeaderMap, Bytes), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, parts.headers, body))
}

/// The `room_ticket` value a waiting page set.
fn ticket_of(headers: &hyper::HeaderMap) -> Option<String> {
    headers
        .get_all(hyper::header::SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|cookie| cookie.strip_prefix("room_ticket="))
        .and_then(|rest| rest.split(';').next())
        .map(str::to_string)
}

/// `"position":N` from a status answer.
fn position_of(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    let rest = &text[text.find("\"position\":")? + "\"position\":".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Visitors `first..end` arrive, spread over `connections` connections; returns them in index
/// order and the latency of each arrival in microseconds.
async fn arrive(
    addr: SocketAddr,
    first: usize,
    end: usize,
    connections: usize,
) -> Result<(Vec<Visitor>, Vec<u64>), String> {
    let mut tasks = Vec::new();
    for lane in 0..connections {
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(addr).await?;
            let mut arrived = Vec::new();
            let mut latencies = Vec::new();
            for index in (first + lane..end).step_by(connections) {
                let request = from_visitor(index, "/event/tickets", "text/html")
                    .body(Empty::new())
                    .map_err(|e| e.to_string())?;
                let sent = Instant::now();
                let (status, headers, _) = send(&mut sender, request).await?;
                latencies.push(sent.elapsed().as_micros() as u64);
                let ticket = ticket_of(&headers)
                    .ok_or_else(|| format!("visitor {index}: {status} without a ticket"))?;
                arrived.push((index, ticket));
            }
            Ok::<_, String>((arrived, latencies))
        }));
    }
    let mut visitors = vec![Visitor::default(); end - first];
    let mut latencies = Vec::with_capacity(end - first);
    for task in tasks {
        let (arrived, lane_latencies) = task.await.map_err(|e| e.to_string())??;
        for (index, ticket) in arrived {
            visitors[index - first].ticket = ticket;
        }
        latencies.extend(lane_latencies);
    }
    Ok((visitors, latencies))
}

/// Every visitor polls once (`round` 0 or 1); returns the poll latencies in microseconds.
async fn poll(
    addr: SocketAddr,
    first: usize,
    visitors: &mut [Visitor],
    round: usize,
    connections: usize,
) -> Result<Vec<u64>, String> {
    let shared: Arc<Vec<Visitor>> = Arc::new(visitors.to_vec());
    let mut tasks = Vec::new();
    for lane in 0..connections {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(addr).await?;
            let mut seen = Vec::new();
            let mut latencies = Vec::new();
            for offset in (lane..shared.len()).step_by(connections) {
                let index = first + offset;
                let request = from_visitor(index, "/queue/status", "application/json")
                    .header(
                        hyper::header::COOKIE,
                        format!("room_ticket={}; room_probe=1", shared[offset].ticket),
                    )
                    .body(Empty::new())
                    .map_err(|e| e.to_string())?;
                let sent = Instant::now();
                let (status, _, body) = send(&mut sender, request).await?;
                latencies.push(sent.elapsed().as_micros() as u64);
                let position = position_of(&body)
                    .filter(|_| status == 200)
                    .ok_or_else(|| {
                        format!(
                            "visitor {index}: {status} {}",
                            String::from_utf8_lossy(&body)
                        )
                    })?;
                seen.push((offset, position));
            }
            Ok::<_, String>((seen, latencies))
        }));
    }
    let mut latencies = Vec::with_capacity(visitors.len());
    for task in tasks {
        let (seen, lane_latencies) = task.await.map_err(|e| e.to_string())??;
        for (offset, position) in seen {
            visitors[offset].positions[round] = position;
        }
        latencies.extend(lane_latencies);
    }
    Ok(latencies)
}

fn summary(what: &str, mut latencies_us: Vec<u64>, took: Duration) -> String {
    latencies_us.sort_unstable();
    let at = |fraction: f64| {
        let index = ((latencies_us.len() as f64 * fraction).ceil() as usize)
            .clamp(1, latencies_us.len().max(1))
            - 1;
        latencies_us.get(index).copied().unwrap_or(0) as f64 / 1000.0
    };
    format!(
        "{what}: {} in {:.2} s ({:.0}/s), latency p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        latencies_us.len(),
        took.as_secs_f64(),
        latencies_us.len() as f64 / took.as_secs_f64(),
        at(0.5),
        at(0.99),
        at(1.0),
    )
}

/// Positions over the whole line: each of `offset + 1 ..= offset + n` exactly once, the same in
/// both polls.
fn check_positions(visitors: &[Visitor], offset: u64) -> Result<(), String> {
    let mut seen = vec![false; visitors.len()];
    for (index, visitor) in visitors.iter().enumerate() {
        let [first, second] = visitor.positions;
        if first != second {
            return Err(format!(
                "visitor {index} moved from {first} to {second} while nobody left"
            ));
        }
        let slot = first
            .checked_sub(offset + 1)
            .and_then(|slot| usize::try_from(slot).ok())
            .filter(|slot| *slot < seen.len())
            .ok_or_else(|| format!("visitor {index} at position {first}, outside the line"))?;
        if std::mem::replace(&mut seen[slot], true) {
            return Err(format!("two visitors at position {first}"));
        }
    }
    Ok(())
}

async fn measure(binary: String, visitors: usize, connections: usize) -> Result<(), String> {
    let origin = silent_origin().await?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let child = Command::new(&binary)
        .args(["-listen", &addr.to_string()])
        .args(["-upstream", &format!("http://{origin}")])
        .args(["-cap", "1", "-max-queue", "0", "-upstream-timeout", "0"])
        .args(["-access-log=false", "-data-dir", "", "-portal-listen", ""])
        .args(["-trusted-proxies", "127.0.0.1/32"])
        // A million arrivals take longer than the 30 s a new ticket has for its first poll.
        .args(["-first-poll-grace", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{binary}: {e}"))?;
    let child = Running(child);
    let pid = child.0.id();
    let listening = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).await.is_err() {
        if Instant::now() > listening {
            return Err(format!("{binary} is not listening on {addr}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The one request the origin holds for the whole run: everyone after it waits.
    let mut holder = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    holder
        .write_all(b"GET /slot HTTP/1.1\r\nHost: line.test\r\nAccept: text/html\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A warm-up line first, so connection buffers, the runtime and the allocator's first pages
    // are in the baseline rather than charged to the visitors.
    let warm_up = (visitors / 10).max(1);
    let (mut warm, _) = arrive(addr, 0, warm_up, connections).await?;
    poll(addr, 0, &mut warm, 0, connections).await?;
    let baseline_kib = resident_kib(pid)?;

    let started = Instant::now();
    let (mut line, arrival_latencies) =
        arrive(addr, warm_up, warm_up + visitors, connections).await?;
    let arrivals_took = started.elapsed();
    let started = Instant::now();
    let first_polls = poll(addr, warm_up, &mut line, 0, connections).await?;
    let first_polls_took = started.elapsed();
    // The status endpoint throttles a ticket polled again within a second; the last visitor of
    // the first round was polled just now.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let started = Instant::now();
    let second_polls = poll(addr, warm_up, &mut line, 1, connections).await?;
    let second_polls_took = started.elapsed();
    let loaded_kib = resident_kib(pid)?;
    check_positions(&line, warm_up as u64)?;
    drop(holder);

    let grown = loaded_kib.saturating_sub(baseline_kib) * 1024;
    println!(
        "{visitors} visitors waiting behind {warm_up} (over {connections} connections): positions 1..={} all present, unique and steady",
        warm_up + visitors
    );
    println!("{}", summary("arrivals", arrival_latencies, arrivals_took));
    println!("{}", summary("first polls", first_polls, first_polls_took));
    println!(
        "{}",
        summary("second polls", second_polls, second_polls_took)
    );
    println!(
        "resident memory {baseline_kib} KiB → {loaded_kib} KiB: {:.0} bytes per waiting visitor",
        grown as f64 / visitors as f64
    );
    Ok(())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: line CONCERT VISITORS [CONNECTIONS]";
    let binary = args.first().ok_or(usage)?.clone();
    let visitors: usize = args.get(1).and_then(|a| a.parse().ok()).ok_or(usage)?;
    let connections: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(32);
    if !(1..=2_000_000).contains(&visitors) || !(1..=1024).contains(&connections) {
        return Err(usage.to_string());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        tokio::time::timeout(DEADLINE, measure(binary, visitors, connections))
            .await
            .map_err(|_| format!("not done within {} s", DEADLINE.as_secs()))?
    })
}
