//! The real `concert` binary: flags, exit codes, signals and the demo.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_concert");

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CONCERT_CAPACITY")
        .output()
        .unwrap()
}

#[test]
fn version_wins_over_bad_values() {
    let out = run(&["-version", "-upstream", "garbage"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("concert "), "{text}");
}

#[test]
fn unknown_flag_is_a_usage_error() {
    let usage_error = |args: &[&str]| {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Named as typed, in the words of Go's flag package.
    let err = usage_error(&["-nope"]);
    assert!(
        err.contains("flag provided but not defined: -nope"),
        "{err}"
    );
    let err = usage_error(&["--nope=3"]);
    assert!(
        err.contains("flag provided but not defined: --nope"),
        "{err}"
    );
    let err = usage_error(&["-admin-token", "x"]);
    assert!(
        err.contains("-admin-token") && err.contains("set CONCERT_ADMIN_TOKEN"),
        "{err}"
    );
    let err = usage_error(&["-data-dir=", "-cap"]);
    assert!(err.contains("flag needs an argument: -cap"), "{err}");
    let err = usage_error(&["-data-dir=", "stray"]);
    assert!(err.contains("unexpected argument \"stray\""), "{err}");
    let err = usage_error(&["reconcile", "-data-dir="]);
    assert!(err.contains("usage: concert reconcile"), "{err}");
    let err = usage_error(&["-data-dir=", "reconcile"]);
    assert!(
        err.contains("\"reconcile\" is a command: give it first"),
        "{err}"
    );
}

#[test]
fn example_prints_a_starting_file_and_reconcile_needs_the_journal_to_itself() {
    for which in ["fastlane", "networks"] {
        let out = run(&["example", which]);
        assert!(out.status.success(), "{which}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(json.is_object(), "{which}");
        assert!(
            !out.stderr.is_empty(),
            "{which}: the explanation goes to stderr"
        );
    }
    assert_eq!(run(&["example", "nope"]).status.code(), Some(2));

    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let out = run(&["reconcile", "-data-dir", dir, &"a".repeat(64)]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no settlement journal"), "{err}");
}

#[test]
fn bad_value_names_the_flag_and_value() {
    let out = run(&["-cap", "0", "-data-dir="]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-cap") && err.contains('0'), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    let out = Command::new(BIN)
        .args(["-data-dir="])
        .env("CONCERT_CAPACITY", "lots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CONCERT_CAPACITY") && err.contains("lots"),
        "{err}"
    );
}

#[test]
fn start_up_failures_print_one_line_and_no_banner() {
    // A whole-configuration error found after logging starts, and a bind failure.
    let out = run(&["-bypass", "/x", "-assets", "/x", "-data-dir="]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("/x"), "{err}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // Warnings about settings wait for a successful start, so the failure stays one line.
    let out = run(&[
        "-listen",
        &addr,
        "-data-dir=",
        "-fastlane-config",
        "/nonexistent/fastlane.json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&addr), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        !err.contains("cap="),
        "the start banner came before the failure: {err}"
    );
    assert_eq!(
        err.lines().filter(|line| line.contains(&addr)).count(),
        1,
        "{err}"
    );
}

/// Starts the binary on a free port with `args` and `env`, waits until it answers, stops it,
/// and returns what it logged.
fn start_log(args: &[&str], env: &[(&str, &str)]) -> String {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(BIN)
        .args(["-listen", &listen])
        .args(args)
        .env_remove("CONCERT_CAPACITY")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let healthy = wait_for_health(port);
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(healthy, "{err}");
    err
}

#[test]
fn settings_of_missing_parts_and_a_short_admin_token_are_warned_about() {
    let err = start_log(
        &["-data-dir=", "-pass", "5m", "-portal-listen", "127.0.0.1:0"],
        &[
            ("CONCERT_PORTAL_PASS", "0123456789abcdef0123"),
            ("CONCERT_ADMIN_TOKEN", "letmein"),
        ],
    );
    assert!(
        err.contains("-pass is set") && err.contains("admin portal listening"),
        "{err}"
    );
    assert!(err.contains("CONCERT_ADMIN_TOKEN is only 7 bytes"), "{err}");
}

#[test]
fn a_fast_lane_file_that_cannot_be_read_stops_the_start_naming_it() {
    let data = tempfile::tempdir().unwrap();
    let output = Command::new(BIN)
        .args(["-listen", "127.0.0.1:0", "-data-dir"])
        .arg(data.path())
        .args(["-fastlane-config", "/nonexistent/fastlane.json"])
        .env("CONCERT_ADMIT_SECRET", "k".repeat(40))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("/nonexistent/fastlane.json"), "{err}");
}

#[test]
fn the_start_summary_names_every_part_that_is_on() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap().to_owned();
    let err = start_log(
        &[
            "-data-dir",
            &data_dir,
            "-stream-paths",
            "/ws",
            "-ban-paths",
            "/.env,/wp-login.php",
            // Turning off a part this version lacks asks for nothing: no warning.
            "-portal-listen",
            "",
        ],
        &[],
    );
    for expected in [
        "cap=434 ",
        "asset-cap=55552 (derived) asset-user-cap-h1=8 asset-user-cap-h2=128",
        "priority lane: cap=108 (derived) wait=5s ranks=customer and above forms=on",
        "streams: paths=/ws cap=1000",
        "abuse registry: strikes=20 ",
        "ban-paths=2 ",
        &format!("data dir: {data_dir} "),
    ] {
        assert!(err.contains(expected), "{expected:?} missing: {err}");
    }
    assert!(!err.contains("-portal-listen"), "{err}");
}

#[test]
fn help_exits_zero() {
    let out = run(&["-h"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("-upstream"));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_health(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = stream
                .write_all(b"GET /_room/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let port = free_port();
    let mut child = Command::new(BIN)
        .args(["-listen", &format!("127.0.0.1:{port}"), "-data-dir="])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for_health(port), "serving healthz");
    let pid = child.id() as i32;
    // SAFETY: sending a signal to our own child process.
    unsafe { libc_kill(pid, 15) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("draining..."), "{err}");
    assert!(err.contains("stopped"), "{err}");
}

#[test]
fn demo_serves_the_demo_origin_through_the_room() {
    let port = free_port();
    let mut child = Command::new(BIN)
        .args([
            "-demo",
            "-listen",
            &format!("127.0.0.1:{port}"),
            "-data-dir=",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let healthy = wait_for_health(port);
    let stats = fetch(port, "/_room/stats");
    // The simulated crowd waits in line and is let in: admissions keep coming although the cap
    // is 2 and every page takes a second. A crowd that never polled would leave them at the
    // first couple, its tickets dropped after the first-poll grace.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut admitted = 0;
    while admitted < 8 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        admitted = stat(&fetch(port, "/_room/stats"), "admitted_total");
    }
    let later = fetch(port, "/_room/stats");
    let _ = child.kill();
    let _ = child.wait();
    assert!(healthy);
    assert!(stats.contains("\"cap\":2"), "{stats}");
    assert!(admitted >= 8, "only {admitted} admitted: {later}");
    assert_eq!(
        stat(&later, "removed_total") + stat(&later, "timeouts_total"),
        0,
        "{later}"
    );
}

/// One numeric key of a `/_room/stats` answer (head included).
fn stat(answer: &str, key: &str) -> u64 {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|stats| stats[key].as_u64())
        .unwrap_or(0)
}

fn fetch(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}
