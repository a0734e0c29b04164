//! Open-loop (fixed-rate) HTTP/1.1 load generator for `benches/compare.sh`.
//!
//! Requests are due at a fixed rate spread over keep-alive connections, and latency is counted
//! from the moment a request was due whenever the generator was running behind: a stalled server
//! is charged for the queue it causes instead of silently slowing the load (no coordinated
//! omission). When a request went out on time, latency starts when it was actually sent, so the
//! timer's millisecond granularity is not blamed on the server.
//!
//! Usage: `loadgen URL RATE SECONDS [CONNECTIONS]` → one summary line.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[path = "support/url.rs"]
mod url;
use url::{Target, parse_url};

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    errors: u64,
}

async fn connection(
    target: std::sync::Arc<Target>,
    index: u64,
    connections: u64,
    interval: Duration,
    start: Instant,
    end: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut sender = None;
    let mut sequence = index;
    loop {
        let due = start + interval * u32::try_from(sequence).unwrap_or(u32::MAX);
        if due >= end {
            break;
        }
        sequence += connections;
        let mut counted_from = due;
        if Instant::now() < due {
            tokio::time::sleep_until(due).await;
            counted_from = Instant::now();
        }
        if sender.is_none() {
            sender = connect(&target.authority).await;
        }
        let Some(open) = sender.as_mut() else {
            tally.errors += 1;
            continue;
        };
        let request = hyper::Request::get(target.path.as_str())
            .header(hyper::header::HOST, target.authority.as_str())
            .body(Empty::<Bytes>::new());
        let Ok(request) = request else {
            tally.errors += 1;
            continue;
        };
        let answered = async {
            open.ready().await.ok()?;
            let response = open.send_request(request).await.ok()?;
            let ok = response.status().is_success();
            response.into_body().collect().await.ok()?;
            Some(ok)
        }
        .await;
        match answered {
            Some(true) => tally
                .latencies_us
                .push(counted_from.elapsed().as_micros() as u64),
            Some(false) => tally.errors += 1,
            None => {
                tally.errors += 1;
                sender = None;
            }
        }
    }
    tally
}

async fn connect(authority: &str) -> Option<http1::SendRequest<Empty<Bytes>>> {
    let stream = TcpStream::connect(authority).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    Some(sender)
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
    let target = std::sync::Arc::new(parse_url(url)?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (tally, elapsed) = runtime.block_on(async move {
        let interval = Duration::from_secs_f64(1.0 / rate);
        let start = Instant::now() + Duration::from_millis(50);
        let end = start + Duration::from_secs_f64(seconds);
        let tasks: Vec<_> = (0..connections)
            .map(|index| {
                tokio::spawn(connection(
                    target.clone(),
                    index,
                    connections,
                    interval,
                    start,
                    end,
                ))
            })
            .collect();
        let mut total = Tally::default();
        for task in tasks {
            if let Ok(part) = task.await {
                total.latencies_us.extend(part.latencies_us);
                total.errors += part.errors;
            }
        }
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
