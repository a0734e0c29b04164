//! A bounded flood against a slow origin: every client gets an answer, none is reset or left
//! hanging, the origin never sees more than its cap, and the real binary stays small.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::ACCEPT;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_at_once_are_all_answered_and_the_origin_stays_at_eight() {
    let origin = origins::slow_origin(Duration::from_millis(50));
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "8",
        "-max-queue",
        "0",
        "-access-log=false",
    ])
    .await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let clients = 1000;
    let mut tasks = Vec::with_capacity(clients);
    for i in 0..clients {
        let client = client.clone();
        let target = url(&concert, &format!("/flood/{i}"));
        tasks.push(tokio::spawn(async move {
            let mut request = client.get(target);
            if i % 2 == 0 {
                request = request.header(ACCEPT, HTML_ACCEPT);
            }
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response.text().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((i, status, body))
        }));
    }
    let (mut proxied, mut pages, mut api_queued) = (0, 0, 0);
    for task in tasks {
        let (i, status, body) = task.await.unwrap().expect("answered, not reset");
        match (status, i % 2 == 0) {
            (StatusCode::OK, _) if body == "ok" => proxied += 1,
            (StatusCode::OK, true) => {
                assert!(body.contains("waiting.js"), "a waiting page");
                pages += 1;
            }
            (StatusCode::TOO_MANY_REQUESTS, false) => {
                assert!(body.contains("\"queued\":true"));
                api_queued += 1;
            }
            other => panic!("unexpected answer {other:?}: {body}"),
        }
    }
    assert_eq!(proxied + pages + api_queued, clients);
    assert!(proxied >= 8, "the free slots were used: {proxied}");
    assert!(
        origin.max_concurrency() <= 8,
        "origin saw {} at once",
        origin.max_concurrency()
    );
    assert_eq!(origin.hits() as usize, proxied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_patient_visitors_all_get_in_without_the_origin_passing_its_cap() {
    let origin = origins::slow_origin(Duration::from_millis(50));
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "8",
        "-max-queue",
        "0",
        "-access-log=false",
    ])
    .await;
    let visitors = 200;
    let mut tasks = Vec::with_capacity(visitors);
    for i in 0..visitors {
        let target = url(&concert, &format!("/patient/{i}"));
        tasks.push(tokio::spawn(async move {
            let client = cookie_client();
            // Bounded: at most 60 s of retries, as the waiting page's reloads would do.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while tokio::time::Instant::now() < deadline {
                let response = client.get(&target).send().await.expect("answered");
                match response.status() {
                    StatusCode::OK => return true,
                    StatusCode::TOO_MANY_REQUESTS => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => panic!("unexpected {other}"),
                }
            }
            false
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap(), "admitted within the bound");
    }
    assert_eq!(origin.hits() as usize, visitors);
    assert!(
        origin.max_concurrency() <= 8,
        "origin saw {}",
        origin.max_concurrency()
    );
    assert_eq!(concert.app.room.stats().occupancy, 0);
    assert_eq!(concert.app.room.stats().live_queue_depth, 0);
}

/// A figure from `/proc/<pid>/status`, in KiB (`VmRSS`, `VmHWM`).
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Stops the child on every ending of the test.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Status code of a one-request connection, or the error that ended it.
async fn one_request(addr: std::net::SocketAddr, path: &str, accept: &str) -> Result<u16, String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status line in {:?}", answer.get(..64)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_clients_at_once_leave_the_real_binary_small() {
    let origin = origins::slow_origin(Duration::from_millis(50));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_concert"))
        .args(["-listen", &addr.to_string(), "-upstream", &origin.url()])
        .args([
            "-cap",
            "8",
            "-max-queue",
            "0",
            "-access-log=false",
            "-data-dir=",
        ])
        .args(["-workers", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let child = Child(child);
    let pid = child.0.id();
    let healthy = eventually(Duration::from_secs(10), || {
        std::net::TcpStream::connect(addr).is_ok()
    })
    .await;
    assert!(healthy, "listening");
    assert_eq!(one_request(addr, "/warm-up", "*/*").await, Ok(200));
    let settled_kib = proc_status_kib(pid, "VmRSS");

    let clients = 3000;
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let accept = if i % 2 == 0 {
                "text/html"
            } else {
                "application/json"
            };
            let path = format!("/flood/{i}");
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(60), one_request(addr, &path, accept))
                    .await
                    .unwrap_or_else(|_| Err("no answer within 60 s".to_string()))
            })
        })
        .collect();
    let mut answers = std::collections::BTreeMap::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(status) => *answers.entry(status).or_insert(0) += 1,
            Err(failure) => panic!("a client was not answered: {failure}"),
        }
    }
    // Proxied (200 "ok"), the waiting page (200) or queued JSON (429): nothing else.
    assert!(
        answers.keys().all(|status| [200, 429].contains(status)),
        "{answers:?}"
    );
    assert!(
        origin.max_concurrency() <= 8,
        "origin saw {}",
        origin.max_concurrency()
    );
    let peak_kib = proc_status_kib(pid, "VmHWM");
    let after_kib = proc_status_kib(pid, "VmRSS");
    eprintln!(
        "{clients} clients: {answers:?}; RSS settled {settled_kib} KiB, peak {peak_kib} KiB, after {after_kib} KiB"
    );
    // Thousands of connections at once cost a bounded few KiB each, not a leak per request.
    assert!(
        peak_kib < settled_kib + 32 * 1024,
        "peak {peak_kib} KiB from {settled_kib} KiB"
    );
}

/// `room_ticket` from a waiting page's cookies.
fn ticket_of(response: &reqwest::Response) -> Option<String> {
    set_cookies(response, "room_ticket")
        .first()
        .and_then(|cookie| cookie.split(';').next())
        .and_then(|pair| pair.split_once('='))
        .map(|(_, value)| value.to_string())
}

/// A long line through the whole server, each visitor from its own address: every position is
/// held by exactly one visitor, each visitor's churn strike is tracked, and nobody is banned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_line_of_distinct_visitors_holds_every_position_once() {
    let origin = origins::held_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "1",
        "-max-queue",
        "0",
        "-access-log=false",
    ])
    .await;
    let holder = hold_the_only_slot(&concert, &origin, "/slot").await;

    let visitors = 3000usize;
    let lanes = 16;
    let client = plain_client();
    let address = |i: usize| format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff);
    let mut tasks = Vec::new();
    for lane in 0..lanes {
        let client = client.clone();
        let target = url(&concert, "/event");
        let status_url = url(&concert, "/queue/status");
        tasks.push(tokio::spawn(async move {
            let mut positions = Vec::new();
            for i in (lane..visitors).step_by(lanes) {
                let page = client
                    .get(&target)
                    .header(ACCEPT, HTML_ACCEPT)
                    .header("x-forwarded-for", address(i))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(page.status(), StatusCode::OK);
                let ticket = ticket_of(&page).expect("a waiting page sets a ticket");
                let status = client
                    .get(&status_url)
                    .header("cookie", format!("room_ticket={ticket}; room_probe=1"))
                    .header("x-forwarded-for", address(i))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(status.status(), StatusCode::OK);
                let body: serde_json::Value = status.json().await.unwrap();
                assert_eq!(body["ready"], false, "{body}");
                positions.push(body["position"].as_u64().expect("a position"));
            }
            positions
        }));
    }
    let mut seen = vec![false; visitors];
    for task in tasks {
        for position in task.await.unwrap() {
            let slot = usize::try_from(position - 1).unwrap();
            assert!(slot < visitors, "position {position} outside the line");
            assert!(
                !std::mem::replace(&mut seen[slot], true),
                "two at {position}"
            );
        }
    }
    assert!(seen.iter().all(|held| *held));
    let stats = concert.app.room.stats();
    assert_eq!(stats.live_queue_depth, visitors as u64);
    let abuse = concert.app.abuse.stats();
    assert_eq!(
        abuse.tracked, visitors as u64,
        "one churn strike per new visitor"
    );
    assert_eq!(abuse.bans_total, 0);
    origin.release(1);
    let _ = holder.await;
}
