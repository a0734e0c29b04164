//! End to end: the request history of a real Concert in front of a real origin. Clients are
//! named with `X-Forwarded-For` through the default trusted loopback proxy; bans come from ban
//! paths and the admin API; the log is written to real data directories, read back after a
//! graceful stop and after `kill -9` of the real binary.

mod support;

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use concert::history::{BanQuery, BanRow, ClientDetail, ClientQuery, LIFTED_OUTSIDE};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::origins::{self, Origin};
use support::*;

const TOKEN: &str = "history-admin-token";

async fn start(origin: &Origin, extra: &[&str]) -> concert::Running {
    let upstream = origin.url();
    let mut args = vec!["-upstream", upstream.as_str()];
    args.extend_from_slice(extra);
    concert_with_env(&args, &[("CONCERT_ADMIN_TOKEN", TOKEN)]).await
}

async fn get(concert: &concert::Running, path: &str, client: &str) -> StatusCode {
    plain_client()
        .get(url(concert, path))
        .header("x-forwarded-for", client)
        .header("user-agent", "history-test/1")
        .send()
        .await
        .unwrap()
        .status()
}

async fn admin(
    concert: &concert::Running,
    method: reqwest::Method,
    query: &str,
    body: Option<Value>,
) -> StatusCode {
    let mut request = plain_client()
        .request(method, url(concert, &format!("/_room/abuse{query}")))
        .bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.body(body.to_string());
    }
    request.send().await.unwrap().status()
}

async fn ban(concert: &concert::Running, client: &str, duration: &str) {
    let status = admin(
        concert,
        reqwest::Method::POST,
        "",
        Some(json!({"client": client, "duration": duration})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn detail(concert: &concert::Running, client: &str) -> ClientDetail {
    concert
        .app
        .history
        .client(ip(client))
        .unwrap_or_else(|| panic!("{client} recorded"))
}

fn windows(concert: &concert::Running) -> Vec<BanRow> {
    concert
        .app
        .history
        .bans(&BanQuery {
            page: 1,
            size: 100,
            ..BanQuery::default()
        })
        .bans
}

fn paths(detail: &ClientDetail) -> Vec<&str> {
    detail.entries.iter().map(|e| e.path.as_str()).collect()
}

fn data_arg(dir: &Path) -> String {
    format!("-data-dir={}", dir.display())
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

// ----- memory --------------------------------------------------------------------------------

#[tokio::test]
async fn two_clients_get_a_row_each_and_their_requests_newest_first() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &[]).await;
    assert_eq!(
        get(&concert, "/one?x=1", "203.0.113.1").await,
        StatusCode::OK
    );
    assert_eq!(get(&concert, "/two", "203.0.113.1").await, StatusCode::OK);
    assert_eq!(get(&concert, "/", "203.0.113.2").await, StatusCode::OK);

    let page = concert.app.history.clients(&ClientQuery {
        q: "203.0.113.".into(),
        page: 1,
        size: 25,
        ..ClientQuery::default()
    });
    assert_eq!(page.total, 2);
    let mut rows: Vec<&str> = page.clients.iter().map(|c| c.client.as_str()).collect();
    rows.sort_unstable();
    assert_eq!(rows, ["203.0.113.1", "203.0.113.2"]);
    let first = detail(&concert, "203.0.113.1");
    assert_eq!(paths(&first), ["/two", "/one?x=1"]);
    assert_eq!(first.client.requests, 2);
    assert_eq!(first.entries[0].status, 200);
    assert_eq!(first.entries[0].method, "GET");
    assert_eq!(first.user_agents, ["history-test/1"]);
    assert!(!concert.app.history.persisted(), "no data dir: memory only");
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_ban_path_opens_a_window_that_counts_what_the_banned_client_asks_for_until_unbanned() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &["-ban-paths", "/.env"]).await;
    let client = "203.0.113.20";
    assert_ne!(get(&concert, "/.env", client).await, StatusCode::OK);
    for path in ["/hello", "/hello", "/wp-login.php"] {
        assert_eq!(
            get(&concert, path, client).await,
            StatusCode::TOO_MANY_REQUESTS
        );
    }

    let all = windows(&concert);
    assert_eq!(all.len(), 1);
    let window = concert.app.history.ban(all[0].id).unwrap().ban;
    assert!(window.active && window.began.is_some());
    assert_eq!(window.target, client);
    assert_eq!(window.requests, 3);
    let trigger = window.trigger.as_ref().expect("a trigger");
    assert_eq!(
        (trigger.method.as_str(), trigger.path.as_str()),
        ("GET", "/.env")
    );
    let hits: Vec<(&str, u64)> = window
        .paths
        .iter()
        .map(|h| (h.name.as_str(), h.hits))
        .collect();
    assert_eq!(hits, [("/hello", 2), ("/wp-login.php", 1)]);
    assert_eq!(
        (window.clients[0].name.as_str(), window.clients[0].hits),
        (client, 3)
    );

    let banned = detail(&concert, client);
    let notes: Vec<(bool, bool)> = banned
        .entries
        .iter()
        .map(|e| (e.triggered_ban, e.blocked))
        .collect();
    assert_eq!(
        notes,
        [(false, true), (false, true), (false, true), (true, false)]
    );
    assert_eq!(
        (banned.client.blocked, banned.client.bans_triggered),
        (3, 1)
    );
    assert!(banned.client.banned_now);

    let status = admin(
        &concert,
        reqwest::Method::DELETE,
        &format!("?client={client}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        eventually(Duration::from_secs(3), || {
            concert
                .app
                .history
                .ban(window.id)
                .is_some_and(|b| !b.ban.active)
        })
        .await,
        "the maintenance task notices the lift"
    );
    let lifted = concert.app.history.ban(window.id).unwrap().ban;
    assert_eq!(lifted.end_reason, "lifted");
    assert!(lifted.ended.is_some());
    assert_eq!(get(&concert, "/after", client).await, StatusCode::OK);
    let after = detail(&concert, client);
    assert_eq!(after.entries[0].path, "/after");
    assert!(!after.entries[0].blocked && after.entries[0].ban_id.is_none());
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn successful_assets_are_not_recorded_but_refused_ones_are() {
    let origin = origins::fast_origin();
    let concert = start(
        &origin,
        &["-assets", "/static/*", "-asset-public", "/pub/*"],
    )
    .await;
    let client = "203.0.113.30";
    assert_eq!(get(&concert, "/pub/logo.png", client).await, StatusCode::OK);
    assert!(concert.app.history.client(ip(client)).is_none());
    assert_eq!(
        get(&concert, "/static/app.js", client).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(get(&concert, "/queue/status", client).await, StatusCode::OK);
    assert_eq!(
        get(&concert, "/_room/healthz", client).await,
        StatusCode::OK
    );
    let recorded = detail(&concert, client);
    assert_eq!(paths(&recorded), ["/static/app.js"]);
    assert_eq!(recorded.client.errors, 1);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_range_ban_counts_the_addresses_inside_it_and_says_who_banned() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &[]).await;
    ban(&concert, "198.51.0.0/16", "1h").await;
    for client in ["198.51.1.1", "198.51.2.2", "198.51.2.2", "203.0.113.40"] {
        get(&concert, "/inside", client).await;
    }
    let all = windows(&concert);
    assert_eq!(all.len(), 1);
    let window = concert.app.history.ban(all[0].id).unwrap().ban;
    assert!(window.range && window.active);
    assert_eq!(window.target, "198.51.0.0/16");
    assert_eq!((window.requests, window.distinct_clients), (3, 2));
    assert!(window.trigger.is_none());
    assert!(window.source.contains("admin API"), "{}", window.source);
    assert!(!detail(&concert, "203.0.113.40").entries[0].blocked);

    // The portal names itself before it bans.
    let scope = "192.0.2.0/24".parse().unwrap();
    concert
        .app
        .history
        .note_source(scope, "banned in the portal by 127.0.0.1");
    ban(&concert, "192.0.2.0/24", "permanent").await;
    let newest = &windows(&concert)[0];
    assert!(newest.permanent && newest.source.contains("portal"));
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unban_outside_the_portal_is_noticed_as_lifted_by_the_admin_api() {
    let origin = origins::fast_origin();
    let concert = start(&origin, &[]).await;
    ban(&concert, "203.0.113.50", "30m").await;
    let target = concert::abuse::BanTarget::parse("203.0.113.50").unwrap();
    assert!(concert.app.abuse.unban_target(target));
    concert.app.history.maintain();
    let window = &windows(&concert)[0];
    assert!(!window.active);
    assert_eq!(window.lifted_by, LIFTED_OUTSIDE);
    assert!(window.lifted_by.contains("admin API"));
    concert.shutdown().await.unwrap();
}

// ----- the log ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_ban_from_before_the_start_has_no_known_beginning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bans.json"),
        r#"{"version":1,"clients":[{"client":"203.0.113.60","permanent":true,"offenses":1}],"ranges":[]}"#,
    )
    .unwrap();
    let origin = origins::fast_origin();
    let concert = start(&origin, &[&data_arg(dir.path())]).await;
    let all = windows(&concert);
    assert_eq!(all.len(), 1);
    assert!(all[0].began.is_none() && all[0].permanent && all[0].active);
    assert!(all[0].source.contains("restored from bans.json"));
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_log_goes_where_the_setting_says() {
    let origin = origins::fast_origin();
    // No data dir and no path: memory only.
    let memory = start(&origin, &[]).await;
    assert!(memory.app.history.log_status().is_none());
    memory.shutdown().await.unwrap();

    // A data dir: history.jsonl in it, private.
    let dir = tempfile::tempdir().unwrap();
    let concert = start(&origin, &[&data_arg(dir.path())]).await;
    get(&concert, "/x", "203.0.113.70").await;
    let status = concert.app.history.log_status().unwrap();
    assert_eq!(status.path, dir.path().join("history.jsonl"));
    concert.shutdown().await.unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.path().join("history.jsonl"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        lines(&dir.path().join("history.jsonl"))
            .iter()
            .any(|l| l["path"] == "/x")
    );

    // `off`: memory only, even with a data dir.
    let off = tempfile::tempdir().unwrap();
    let concert = start(&origin, &[&data_arg(off.path()), "-history-log", "off"]).await;
    get(&concert, "/x", "203.0.113.70").await;
    assert!(concert.app.history.log_status().is_none());
    concert.shutdown().await.unwrap();
    assert!(!off.path().join("history.jsonl").exists());

    // An explicit path wins over the data dir, and its directory is made private.
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().join("logs/h.jsonl");
    let both = tempfile::tempdir().unwrap();
    let concert = start(
        &origin,
        &[
            &data_arg(both.path()),
            "-history-log",
            file.to_str().unwrap(),
        ],
    )
    .await;
    get(&concert, "/y", "203.0.113.70").await;
    concert.shutdown().await.unwrap();
    assert!(lines(&file).iter().any(|l| l["path"] == "/y"));
    assert!(!both.path().join("history.jsonl").exists());
    let dir_mode = std::fs::metadata(file.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
}

#[tokio::test]
async fn a_restart_restores_the_requests_the_trigger_and_the_window_once() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origins::fast_origin();
    let args = [data_arg(dir.path()), "-ban-paths".into(), "/.env".into()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let client = "203.0.113.80";
    let concert = start(&origin, &args).await;
    for path in ["/hello", "/.env", "/x", "/y?q=1"] {
        get(&concert, path, client).await;
    }
    concert.shutdown().await.unwrap();

    let concert = start(&origin, &args).await;
    let restored = detail(&concert, client);
    assert_eq!(paths(&restored), ["/y?q=1", "/x", "/.env", "/hello"]);
    let notes: Vec<(bool, bool)> = restored
        .entries
        .iter()
        .map(|e| (e.triggered_ban, e.blocked))
        .collect();
    assert_eq!(
        notes,
        [(false, true), (false, true), (true, false), (false, false)]
    );
    assert_eq!(restored.entries[3].user_agent, "history-test/1");
    let all = windows(&concert);
    assert_eq!(all.len(), 1, "no duplicate window");
    assert!(all[0].active && all[0].began.is_some());
    assert_eq!(all[0].requests, 2);
    assert_eq!(all[0].trigger.as_ref().unwrap().path, "/.env");
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_blocked_flood_is_logged_as_a_hundred_lines_and_a_sum() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origins::fast_origin();
    let client = "203.0.113.90";
    let concert = start(&origin, &[&data_arg(dir.path())]).await;
    ban(&concert, client, "permanent").await;
    for n in 0..130 {
        let path = if n % 2 == 0 { "/a" } else { "/b" };
        assert_eq!(get(&concert, path, client).await, StatusCode::FORBIDDEN);
    }
    concert.shutdown().await.unwrap();

    let logged = lines(&dir.path().join("history.jsonl"));
    let mine = |kind: &str| -> Vec<&Value> {
        logged
            .iter()
            .filter(|l| l["t"] == kind && l["ip"] == client)
            .collect()
    };
    assert_eq!(mine("req").len(), 100);
    assert!(mine("req").iter().all(|l| l["blocked"] == true));
    let summed: u64 = mine("agg")
        .iter()
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    assert_eq!(summed, 30);

    let concert = start(&origin, &[&data_arg(dir.path())]).await;
    let restored = detail(&concert, client);
    assert_eq!(
        (restored.client.requests, restored.client.blocked),
        (130, 130)
    );
    assert_eq!(windows(&concert)[0].requests, 130);
    concert.shutdown().await.unwrap();
}

// ----- the real binary, killed ------------------------------------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_concert");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_keeps_the_history_up_to_the_last_flush() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origins::fast_origin();
    let port = free_port();
    let mut child = std::process::Command::new(BIN)
        .args([
            "-listen",
            &format!("127.0.0.1:{port}"),
            "-upstream",
            &origin.url(),
            "-ban-paths",
            "/.env",
            &data_arg(dir.path()),
        ])
        .env("CONCERT_ADMIT_SECRET", "k".repeat(40))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = "203.0.113.99";
    let mut up = false;
    for _ in 0..200 {
        if plain_client()
            .get(format!("{base}/_room/healthz"))
            .send()
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the binary serves");
    for path in ["/a", "/b", "/.env", "/c"] {
        plain_client()
            .get(format!("{base}{path}"))
            .header("x-forwarded-for", client)
            .send()
            .await
            .unwrap();
    }
    // A flush (every second) and the bans' save (within a second) happen, then the crash.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let log = dir.path().join("history.jsonl");
    let written = lines(&log);
    assert!(written.iter().any(|l| l["t"] == "trig"), "{written:?}");
    // As if the crash had cut a line in half.
    let mut torn = std::fs::read(&log).unwrap();
    torn.extend_from_slice(br#"{"t":"req","at":"2026-01-01T00:00:00Z","ip":"203.0.1"#);
    std::fs::write(&log, torn).unwrap();

    let concert = start(&origin, &[&data_arg(dir.path()), "-ban-paths", "/.env"]).await;
    assert_eq!(concert.app.history.unreadable_lines(), 1, "the torn line");
    let restored = detail(&concert, client);
    assert_eq!(paths(&restored), ["/c", "/.env", "/b", "/a"]);
    assert!(restored.entries[0].blocked && restored.entries[1].triggered_ban);
    let all = windows(&concert);
    assert_eq!(all.len(), 1);
    assert!(
        all[0].active,
        "bans.json kept the ban, so the window stays open"
    );
    get(&concert, "/d", client).await;
    concert.shutdown().await.unwrap();
    // The torn line was ended before new lines were added, so they read back whole.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\"ip\":\"203.0.1\n"));
    assert!(lines(&log).iter().any(|l| l["path"] == "/d"));
}

/// Where the writer starts a new file (64 MiB).
const ROTATE_AT: u64 = 64 * 1024 * 1024;

/// A history.jsonl just under [`ROTATE_AT`] without writing 64 MiB of requests: a few request
/// lines from `client`, dated now, each padded to about 1 MB with the blanks JSON allows
/// before a value, which reading back skips. Returns the paths logged.
fn nearly_full_log(path: &Path, client: &str, room_left: u64) -> Vec<String> {
    use std::io::Write as _;
    const LINE: u64 = 1_000_000;
    let now = concert::abuse::record::WallTime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64,
    );
    let size = ROTATE_AT - room_left;
    let mut lengths = vec![LINE; (size / (LINE + 1)) as usize];
    lengths.push(size - lengths.len() as u64 * (LINE + 1) - 1);
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut paths = Vec::new();
    for (n, length) in lengths.into_iter().enumerate() {
        let logged = format!("/before-{n}");
        let line = format!(
            r#"{{"t":"req","at":"{now}","ip":"{client}","method":"GET","path":"{logged}","status":200}}"#
        );
        let blanks = usize::try_from(length).unwrap() - line.len();
        file.write_all(" ".repeat(blanks).as_bytes()).unwrap();
        writeln!(file, "{line}").unwrap();
        paths.push(logged);
    }
    file.flush().unwrap();
    drop(file);
    assert_eq!(std::fs::metadata(path).unwrap().len(), size);
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_rotated_just_before_kill_9_reads_back_from_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history.jsonl");
    let earlier = "198.51.100.1";
    // Room for one request line of this test's length, not two.
    let mut before = nearly_full_log(&log, earlier, 200);
    before.reverse();
    let origin = origins::fast_origin();
    let port = free_port();
    let started = std::time::Instant::now();
    let mut child = std::process::Command::new(BIN)
        .args([
            "-listen",
            &format!("127.0.0.1:{port}"),
            "-upstream",
            &origin.url(),
            &data_arg(dir.path()),
        ])
        .env("CONCERT_ADMIT_SECRET", "k".repeat(40))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let mut up = false;
    for _ in 0..400 {
        if plain_client()
            .get(format!("{base}/_room/healthz"))
            .send()
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the binary serves");
    let replayed_in = started.elapsed();
    let client = "203.0.113.99";
    let after: Vec<String> = (1..=5).map(|n| format!("/after-{n}")).collect();
    for path in &after {
        plain_client()
            .get(format!("{base}{path}"))
            .header("x-forwarded-for", client)
            .send()
            .await
            .unwrap();
    }
    // A flush (every second), then the crash.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    child.kill().unwrap();
    child.wait().unwrap();

    let rotated = dir.path().join("history.jsonl.1");
    let old_size = std::fs::metadata(&rotated)
        .expect("the log was rotated")
        .len();
    assert!(old_size <= ROTATE_AT, "{old_size}");
    let old_text = std::fs::read_to_string(&rotated).unwrap();
    assert!(old_text.contains("/after-1\"") && !old_text.contains("/after-2\""));
    let new_paths: Vec<String> = lines(&log)
        .iter()
        .filter_map(|line| line["path"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(new_paths, after[1..], "the new file holds the rest");

    let concert = start(&origin, &[&data_arg(dir.path())]).await;
    let mut expected = after.clone();
    expected.reverse();
    assert_eq!(paths(&detail(&concert, client)), expected);
    assert_eq!(paths(&detail(&concert, earlier)), before);
    assert_eq!(concert.app.history.unreadable_lines(), 0);
    concert.shutdown().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "replaying 64 MiB took {replayed_in:?} at the first start, {:?} in all",
        started.elapsed()
    );
}
