//! The data directory across restarts: settings.json, queue.snapshot, the lock, file modes.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::COOKIE;
use support::*;

fn data_arg(dir: &tempfile::TempDir) -> String {
    format!("-data-dir={}", dir.path().display())
}

#[tokio::test]
async fn settings_file_overrides_flags_and_skips_restart_only_keys() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("settings.json"),
        r#"{"version":1,"settings":{"listen":":9999","cap":9,"mystery":1}}"#,
    )
    .unwrap();
    let origin = origins::fast_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "3", &data_arg(&dir)]).await;
    let generation = concert.app.generation();
    assert_eq!(generation.config.cap, 9, "settings.json beats the flag");
    assert_eq!(
        generation.config.listen, ":8080",
        "restart-only keys are ignored in the file"
    );
    assert_eq!(concert.app.room.stats().cap, 9);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_corrupt_settings_file_stops_start_up_naming_it() {
    for content in [
        "{",
        r#"{"settings":{"cap":"lots"}}"#,
        r#"{"settings":{"rate":-1}}"#,
        r#"{"settings":{"reaper":"soon"}}"#,
        r#"{"settings":{"reaper":"1s"}}"#,
        r#"{"settings":{"upstream":"ftp://x"}}"#,
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("settings.json"), content).unwrap();
        let err = try_concert(&[&data_arg(&dir)]).await.err().expect(content);
        assert!(err.contains("settings.json"), "{content}: {err}");
    }
}

#[tokio::test]
async fn cap_changes_are_persisted_privately_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origins::fast_origin();
    let args = ["-upstream", &origin.url(), "-cap", "2", &data_arg(&dir)];
    let env = [("CONCERT_ADMIN_TOKEN", "tok")];
    let first = concert_with_env(&args, &env).await;
    let response = plain_client()
        .post(url(&first, "/_room/cap"))
        .bearer_auth("tok")
        .body(r#"{"cap":6}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let path = dir.path().join("settings.json");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved["version"], 1);
    assert_eq!(saved["settings"]["cap"], 6);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    first.shutdown().await.unwrap();

    let second = concert_with_env(&args, &env).await;
    assert_eq!(second.app.room.stats().cap, 6);
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn two_instances_cannot_share_a_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let first = concert(&[&data_arg(&dir)]).await;
    let err = try_concert(&[&data_arg(&dir)])
        .await
        .err()
        .expect("second refused");
    assert!(err.contains("in use by another concert process"), "{err}");
    first.shutdown().await.unwrap();
    // Once the first has stopped, the directory is free again.
    let again = concert(&[&data_arg(&dir)]).await;
    again.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_line_survives_a_graceful_restart() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origins::held_origin();
    let upstream = origin.url();
    let args = ["-upstream", upstream.as_str(), "-cap", "1", &data_arg(&dir)];
    let first = concert(&args).await;
    let holder = url(&first, "/hold");
    let holding = tokio::spawn(async move {
        let _ = plain_client().get(holder).send().await;
    });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    let queued = plain_client()
        .get(url(&first, "/wait"))
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), StatusCode::TOO_MANY_REQUESTS);
    let ticket = set_cookies(&queued, "room_ticket")[0]
        .split(';')
        .next()
        .unwrap()
        .to_string();
    origin.release(1);
    holding.await.unwrap();
    first.shutdown().await.unwrap();
    assert!(dir.path().join("queue.snapshot").exists(), "saved on stop");

    let second = concert(&args).await;
    assert!(
        !dir.path().join("queue.snapshot").exists(),
        "deleted once restored"
    );
    assert_eq!(second.app.room.stats().live_queue_depth, 1);
    let status = json_of(
        plain_client()
            .get(url(&second, "/queue/status"))
            .header(COOKIE, &ticket),
    )
    .await;
    // The restored ticket is known: it is at the front (ready, as the room is empty).
    assert_eq!(status["ready"], true);
    assert_eq!(
        second.app.room.stats().live_queue_depth,
        1,
        "known, not evicted"
    );
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_garbage_snapshot_is_set_aside_and_start_up_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("queue.snapshot"), "garbage").unwrap();
    let concert = concert(&[&data_arg(&dir)]).await;
    assert!(dir.path().join("queue.snapshot.bad").exists());
    assert!(!dir.path().join("queue.snapshot").exists());
    assert_eq!(concert.app.room.stats().live_queue_depth, 0);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn bans_survive_a_restart_and_admin_bans_are_on_disk_before_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origins::fast_origin();
    let args = ["-upstream", &origin.url(), &data_arg(&dir)];
    let env = [("CONCERT_ADMIN_TOKEN", "tok")];
    let first = concert_with_env(&args, &env).await;
    let client = plain_client();
    for (target, duration) in [
        ("203.0.113.9", "permanent"),
        ("198.51.100.4", "5m"),
        ("2001:db8:1:2::7", "1h"),
        ("192.0.2.0/24", "permanent"),
        ("10.20.0.0/16", "1h"),
    ] {
        let response = client
            .post(url(&first, "/_room/abuse"))
            .bearer_auth("tok")
            .body(serde_json::json!({"client": target, "duration": duration}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{target}");
        // Acknowledged means written: the file already holds it.
        let saved = std::fs::read_to_string(dir.path().join("bans.json")).unwrap();
        let shown = if target.contains(':') {
            "2001:db8:1:2::/64"
        } else {
            target
        };
        assert!(saved.contains(shown), "{target} not in {saved}");
    }
    let mode = std::fs::metadata(dir.path().join("bans.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    first.shutdown().await.unwrap();

    let second = concert_with_env(&args, &env).await;
    let listed = json_of(client.get(url(&second, "/_room/abuse")).bearer_auth("tok")).await;
    let bans = listed["bans"].as_array().unwrap();
    assert_eq!(bans.len(), 5, "{listed}");
    assert_eq!(listed["ranges"], 2);
    let permanent = bans.iter().filter(|b| b["permanent"] == true).count();
    assert_eq!(permanent, 2);
    let timed = bans
        .iter()
        .find(|b| b["client"] == "198.51.100.4")
        .expect("timed ban restored");
    let remaining = timed["remaining_seconds"].as_u64().unwrap();
    assert!((250..=300).contains(&remaining), "{remaining}");
    // Lifting a ban is persisted too: after another restart it stays lifted.
    let lifted = client
        .delete(url(&second, "/_room/abuse?client=192.0.2.0/24"))
        .bearer_auth("tok")
        .send()
        .await
        .unwrap();
    assert_eq!(lifted.status(), StatusCode::OK);
    second.shutdown().await.unwrap();
    let third = concert_with_env(&args, &env).await;
    let listed = json_of(client.get(url(&third, "/_room/abuse")).bearer_auth("tok")).await;
    assert_eq!(listed["ranges"], 1, "{listed}");
    third.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_corrupt_bans_file_stops_start_up_and_allowlisted_addresses_are_not_restored() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bans.json"), "{").unwrap();
    let err = try_concert(&[&data_arg(&dir)])
        .await
        .err()
        .expect("refused");
    assert!(err.contains("bans.json"), "{err}");

    std::fs::write(
        dir.path().join("bans.json"),
        r#"{"version":1,"clients":[{"client":"203.0.113.9","permanent":true,"offenses":1},{"client":"198.51.100.7","permanent":true,"offenses":1}],"ranges":[]}"#,
    )
    .unwrap();
    let concert = concert(&[&data_arg(&dir), "-abuse-allow", "198.51.100.7"]).await;
    assert!(
        concert
            .app
            .abuse
            .banned("203.0.113.9".parse().unwrap())
            .is_some()
    );
    assert!(
        concert
            .app
            .abuse
            .banned("198.51.100.7".parse().unwrap())
            .is_none()
    );
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn settings_changes_reset_to_the_baseline_and_work_without_a_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let concert = concert(&["-cap", "10", &data_arg(&dir)]).await;
    concert
        .app
        .apply_change(
            serde_json::json!({"cap": 9, "abuse_strikes": 7})
                .as_object()
                .unwrap(),
            &[],
        )
        .unwrap();
    let saved = std::fs::read_to_string(dir.path().join("settings.json")).unwrap();
    assert!(saved.contains("\"abuse_strikes\": 7"), "{saved}");
    concert
        .app
        .apply_change(
            &serde_json::Map::new(),
            &["cap".to_string(), "abuse_strikes".to_string()],
        )
        .unwrap();
    let generation = concert.app.generation();
    assert_eq!(generation.config.cap, 10, "back to the flag's value");
    assert_eq!(generation.config.abuse_strikes, 20);
    assert_eq!(
        generation.config.source("cap"),
        concert::config::Source::Flag
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("settings.json")).unwrap())
            .unwrap();
    assert!(saved["settings"].as_object().unwrap().is_empty(), "{saved}");
    // A refused change writes nothing and applies nothing.
    let refused = concert.app.apply_change(
        serde_json::json!({"cap": 5, "upstream": "ftp://x"})
            .as_object()
            .unwrap(),
        &[],
    );
    assert!(refused.is_err());
    assert_eq!(concert.app.generation().config.cap, 10);
    concert.shutdown().await.unwrap();

    let memory_only = support::concert(&["-cap", "4"]).await;
    memory_only
        .app
        .apply_change(serde_json::json!({"cap": 5}).as_object().unwrap(), &[])
        .unwrap();
    assert_eq!(memory_only.app.room.stats().cap, 5);
}

// ----- the real binary: crash and reload ------------------------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_concert");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn_binary(port: u16, upstream: &str, dir: &tempfile::TempDir) -> std::process::Child {
    std::process::Command::new(BIN)
        .args([
            "-listen",
            &format!("127.0.0.1:{port}"),
            "-upstream",
            upstream,
            "-cap",
            "1",
            &data_arg(dir),
        ])
        .env("CONCERT_ADMIN_TOKEN", "tok")
        .env("CONCERT_ADMIT_SECRET", "k".repeat(40))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

async fn healthy(port: u16) -> bool {
    let client = plain_client();
    for _ in 0..200 {
        if let Ok(response) = client
            .get(format!("http://127.0.0.1:{port}/_room/healthz"))
            .send()
            .await
            && response.status() == StatusCode::OK
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn stats(port: u16) -> serde_json::Value {
    plain_client()
        .get(format!("http://127.0.0.1:{port}/_room/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_keeps_acknowledged_bans_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origins::held_origin();
    let port = free_port();
    let mut child = spawn_binary(port, &origin.url(), &dir);
    assert!(healthy(port).await);
    let base = format!("http://127.0.0.1:{port}");
    let holder = format!("{base}/hold");
    tokio::spawn(async move {
        let _ = plain_client().get(holder).send().await;
    });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    let mut tickets = Vec::new();
    for i in 0..3 {
        let response = plain_client()
            .get(format!("{base}/q/{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        tickets.push(
            set_cookies(&response, "room_ticket")[0]
                .split(';')
                .next()
                .unwrap()
                .to_string(),
        );
    }
    let banned = plain_client()
        .post(format!("{base}/_room/abuse"))
        .bearer_auth("tok")
        .body(r#"{"client":"203.0.113.50","duration":"permanent"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(banned.status(), StatusCode::OK);
    // Let one periodic snapshot happen, then crash without any chance to save.
    tokio::time::sleep(concert::QUEUE_SNAPSHOT_EVERY + Duration::from_millis(1500)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    origin.release(100);

    let mut child = spawn_binary(port, &origin.url(), &dir);
    assert!(
        healthy(port).await,
        "restarts on the same data dir after a crash"
    );
    let listed = json_of(
        plain_client()
            .get(format!("{base}/_room/abuse"))
            .bearer_auth("tok"),
    )
    .await;
    assert!(listed.to_string().contains("203.0.113.50"), "{listed}");
    assert_eq!(stats(port).await["live_queue_depth"], 3);
    // The last visitor still holds a place behind the others.
    let status = json_of(
        plain_client()
            .get(format!("{base}/queue/status"))
            .header(COOKIE, &tickets[2]),
    )
    .await;
    assert_eq!(status["ready"], false, "{status}");
    assert!(status["position"].as_u64().unwrap() >= 1);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_good_settings_file_and_keeps_running_on_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origins::fast_origin();
    let port = free_port();
    let mut child = spawn_binary(port, &origin.url(), &dir);
    assert!(healthy(port).await);
    let hup = |pid: u32| {
        std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
    };
    std::fs::write(
        dir.path().join("settings.json"),
        r#"{"version":1,"settings":{"cap":7}}"#,
    )
    .unwrap();
    assert!(hup(child.id()).success());
    let mut applied = false;
    for _ in 0..100 {
        if stats(port).await["cap"] == 7 {
            applied = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(applied, "good file applied on SIGHUP");
    std::fs::write(dir.path().join("settings.json"), "{").unwrap();
    assert!(hup(child.id()).success());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(child.try_wait().unwrap().is_none(), "still running");
    assert_eq!(stats(port).await["cap"], 7, "running settings kept");
    child.kill().unwrap();
    child.wait().unwrap();
}
