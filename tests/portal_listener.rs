//! The portal's listener as an operator meets it: its connection deadlines, its drain when the
//! process is told to stop, and what the real binary says about the portal pass at start.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_concert");
const PASS: &str = "a portal pass for the listener tests";

/// The portal's deadlines: an unfinished request head, and a pause in a body.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_PAUSE: Duration = Duration::from_secs(10);
/// Slack on either deadline for a busy machine.
const SLACK: Duration = Duration::from_secs(4);

/// Reads until the peer closes or `limit` passes; the bytes and whether it closed.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut received = Vec::new();
    let closed = tokio::time::timeout(limit, async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => received.extend_from_slice(&chunk[..read]),
            }
        }
    })
    .await
    .is_ok();
    (received, closed)
}

#[tokio::test]
async fn an_unfinished_head_is_dropped_at_the_header_timeout_and_a_stalled_body_gets_408() {
    let running = support::concert_with_env(
        &["-portal-listen", "127.0.0.1:0"],
        &[("CONCERT_PORTAL_PASS", PASS)],
    )
    .await;
    let portal = running.portal_addr.expect("the portal listens");

    // Both wait out the real deadlines (the portal's are fixed), side by side.
    let head = async {
        let mut stream = TcpStream::connect(portal).await.unwrap();
        let started = Instant::now();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: portal\r\nUser-Agent: slow")
            .await
            .unwrap();
        let (answer, closed) = read_until_closed(&mut stream, HEAD_TIMEOUT + SLACK).await;
        (started.elapsed(), answer, closed)
    };
    let body = async {
        let mut stream = TcpStream::connect(portal).await.unwrap();
        let started = Instant::now();
        stream
            .write_all(
                b"POST /login HTTP/1.1\r\nHost: portal\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\npass=a",
            )
            .await
            .unwrap();
        let (answer, closed) = read_until_closed(&mut stream, BODY_PAUSE + SLACK).await;
        (started.elapsed(), answer, closed)
    };
    let ((head_after, head_answer, head_closed), (body_after, body_answer, body_closed)) =
        tokio::join!(head, body);

    assert!(head_closed, "the unfinished head was kept open");
    assert!(
        head_after >= HEAD_TIMEOUT - Duration::from_millis(500)
            && head_after < HEAD_TIMEOUT + SLACK,
        "dropped after {head_after:?}"
    );
    let head_answer = String::from_utf8_lossy(&head_answer);
    assert!(
        head_answer.is_empty() || head_answer.starts_with("HTTP/1.1 408"),
        "{head_answer}"
    );

    let body_answer = String::from_utf8_lossy(&body_answer);
    assert!(body_answer.starts_with("HTTP/1.1 408"), "{body_answer}");
    assert!(
        body_answer.contains("the request body did not arrive in time"),
        "{body_answer}"
    );
    assert!(body_closed || !body_answer.is_empty());
    assert!(
        body_after >= BODY_PAUSE - Duration::from_millis(500) && body_after < BODY_PAUSE + SLACK,
        "answered after {body_after:?}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn healthy(port: u16) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ =
        stream.write_all(b"GET /_room/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// The binary, started with `args` and `env` (and no portal pass from the outside), its
/// standard error read line by line into a channel.
fn spawn(args: &[&str], env: &[(&str, &str)]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("CONCERT_CAPACITY")
        .env_remove("CONCERT_PORTAL_PASS")
        .env_remove("CONCERT_PORTAL_LISTEN")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, logged) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    (child, logged)
}

/// Waits (bounded) for a logged line containing `text`; every line read so far is kept in
/// `seen`.
fn wait_for_line(
    logged: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    text: &str,
    limit: Duration,
) -> bool {
    let deadline = Instant::now() + limit;
    if seen.iter().any(|line| line.contains(text)) {
        return true;
    }
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match logged.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(text);
                seen.push(line);
                if found {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

/// Waits (bounded) for the child to exit.
fn exit_status(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

#[test]
fn sigterm_lets_a_portal_request_in_flight_finish_then_exits_zero() {
    let port = free_port();
    let portal_port = free_port();
    let (mut child, logged) = spawn(
        &[
            "-listen",
            &format!("127.0.0.1:{port}"),
            "-portal-listen",
            &format!("127.0.0.1:{portal_port}"),
            "-data-dir=",
        ],
        &[("CONCERT_PORTAL_PASS", PASS)],
    );
    let mut seen = Vec::new();
    assert!(
        wait_for_line(
            &logged,
            &mut seen,
            "admin portal listening",
            Duration::from_secs(10)
        ),
        "{seen:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !healthy(port) {
        assert!(Instant::now() < deadline, "not serving: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A sign-in whose body is still on its way when the signal arrives.
    let mut in_flight = std::net::TcpStream::connect(("127.0.0.1", portal_port)).unwrap();
    in_flight
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    in_flight
        .write_all(b"POST /login HTTP/1.1\r\nHost: portal\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 14\r\nConnection: close\r\n\r\npass=")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: sending a signal to our own child process.
    unsafe { libc_kill(child.id() as i32, 15) };
    assert!(
        wait_for_line(&logged, &mut seen, "draining...", Duration::from_secs(5)),
        "{seen:?}"
    );
    // The portal takes no new connections while it drains...
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", portal_port)).is_ok() {
        assert!(Instant::now() < deadline, "the portal still accepts");
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...and waits for the request it holds (a while, within its grace), reads it to its end
    // and answers it (refused: it brought no sign-in form token).
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "exited with a request open"
    );
    in_flight.write_all(b"not-the-pass").unwrap();
    let mut answer = String::new();
    let _ = in_flight.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    let status = exit_status(&mut child, Duration::from_secs(15)).expect("stops after SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(
        wait_for_line(&logged, &mut seen, "stopped", Duration::from_secs(5)),
        "{seen:?}"
    );
}

#[test]
fn a_short_portal_pass_stops_the_binary_with_one_line_naming_it() {
    let (mut child, logged) = spawn(
        &[
            "-listen",
            &format!("127.0.0.1:{}", free_port()),
            "-portal-listen",
            "127.0.0.1:0",
            "-data-dir=",
        ],
        &[("CONCERT_PORTAL_PASS", "short")],
    );
    let status = exit_status(&mut child, Duration::from_secs(10)).expect("stops at once");
    assert_eq!(status.code(), Some(1));
    let lines: Vec<String> = logged.iter().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("CONCERT_PORTAL_PASS"), "{lines:?}");
    assert!(
        !lines[0].contains("short"),
        "the pass is not repeated: {lines:?}"
    );
}

#[test]
fn a_portal_address_without_a_pass_is_named_once_and_nothing_listens_there() {
    let port = free_port();
    let portal = format!("127.0.0.1:{}", free_port());
    let (mut child, logged) = spawn(
        &[
            "-listen",
            &format!("127.0.0.1:{port}"),
            "-portal-listen",
            &portal,
            "-data-dir=",
        ],
        &[],
    );
    let mut seen = Vec::new();
    let expected = format!("portal disabled: set CONCERT_PORTAL_PASS to enable it on {portal}");
    let said = wait_for_line(&logged, &mut seen, &expected, Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut serving = healthy(port);
    while !serving && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        serving = healthy(port);
    }
    let portal_refused = std::net::TcpStream::connect(&portal).is_err();
    let _ = child.kill();
    let _ = child.wait();
    assert!(said, "{seen:?}");
    assert!(serving, "{seen:?}");
    assert!(portal_refused, "something listens on {portal}");
    seen.extend(logged.try_iter());
    assert_eq!(
        seen.iter()
            .filter(|line| line.contains("portal disabled"))
            .count(),
        1,
        "{seen:?}"
    );
}
