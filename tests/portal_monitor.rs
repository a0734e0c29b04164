//! The portal's Monitor API on real sockets: the main listener's requests counted by latency
//! and status, requests in flight while an origin holds them and after they end or their
//! client goes away, the health verdicts, and the session it needs.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::SET_COOKIE;
use serde_json::Value;
use support::origins::{self, origin_with, text};
use support::{concert_with_env, eventually, plain_client};

const PASS: &str = "a portal pass for the monitor";

struct Monitored {
    running: concert::Running,
    portal: String,
    cookie: String,
}

async fn monitored(upstream: &str, args: &[&str]) -> Monitored {
    let mut argv = vec!["-upstream", upstream, "-portal-listen", "127.0.0.1:0"];
    argv.extend_from_slice(args);
    let running = concert_with_env(&argv, &[("CONCERT_PORTAL_PASS", PASS)]).await;
    let portal = format!(
        "http://{}",
        running.portal_addr.expect("the portal listens")
    );
    let answer = support::portal_sign_in(&plain_client(), &portal, PASS).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    let cookie = answer
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|line| line.strip_prefix("concert_portal="))
        .and_then(|rest| rest.split(';').next())
        .expect("a session cookie")
        .to_owned();
    Monitored {
        running,
        portal,
        cookie,
    }
}

impl Monitored {
    async fn monitor(&self) -> Value {
        let answer = plain_client()
            .get(format!("{}/api/monitor", self.portal))
            .header("Cookie", format!("concert_portal={}", self.cookie))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        answer.json().await.unwrap()
    }

    async fn get(&self, path: &str) -> StatusCode {
        plain_client()
            .get(support::url(&self.running, path))
            .send()
            .await
            .unwrap()
            .status()
    }

    /// The in-flight count, read through the API until `wanted` holds (or five seconds pass).
    async fn in_flight_becomes(&self, wanted: impl Fn(u64) -> bool) -> u64 {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.monitor().await["traffic"]["inflight"]
                .as_u64()
                .unwrap();
            if wanted(now) || tokio::time::Instant::now() > give_up {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn health<'a>(monitor: &'a Value, name: &str) -> &'a Value {
    monitor["health"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {monitor}"))
}

fn buckets(monitor: &Value) -> Vec<u64> {
    monitor["traffic"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|count| count.as_u64().unwrap())
        .collect()
}

/// Answers by path: `/slow…` after 300 ms, `/missing…` 404, `/broken…` 500, anything else at
/// once.
fn path_origin() -> origins::Origin {
    origin_with(|req, _| async move {
        let path = req.uri().path().to_owned();
        if path.starts_with("/slow") {
            tokio::time::sleep(Duration::from_millis(300)).await;
            text("slow")
        } else if path.starts_with("/missing") {
            let mut answer = text("missing");
            *answer.status_mut() = http::StatusCode::NOT_FOUND;
            answer
        } else if path.starts_with("/broken") {
            let mut answer = text("broken");
            *answer.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
            answer
        } else {
            text("ok")
        }
    })
}

#[tokio::test]
async fn the_monitor_wants_a_session() {
    let origin = origins::fast_origin();
    let monitored = monitored(&origin.url(), &[]).await;
    let answer = plain_client()
        .get(format!("{}/api/monitor", monitored.portal))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"], "sign in required");
    let forged = plain_client()
        .get(format!("{}/api/monitor", monitored.portal))
        .header(
            "Cookie",
            "concert_portal=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn answered_requests_are_counted_by_latency_and_status_class() {
    let origin = path_origin();
    let monitored = monitored(&origin.url(), &[]).await;
    let before = monitored.monitor().await;
    assert_eq!(before["traffic"]["requests_total"], 0);
    assert_eq!(before["traffic"]["p50_ms"], Value::Null, "no answers yet");
    assert_eq!(before["interval"], 5);
    let bounds: Vec<u64> = before["traffic"]["bounds_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|bound| bound.as_u64().unwrap())
        .collect();
    assert_eq!(
        bounds,
        [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000]
    );
    assert_eq!(buckets(&before).len(), bounds.len() + 1, "and the overflow");

    for i in 0..5 {
        assert_eq!(monitored.get(&format!("/page{i}")).await, StatusCode::OK);
    }
    for i in 0..3 {
        assert_eq!(monitored.get(&format!("/slow{i}")).await, StatusCode::OK);
    }
    for i in 0..2 {
        assert_eq!(
            monitored.get(&format!("/missing{i}")).await,
            StatusCode::NOT_FOUND
        );
    }
    assert_eq!(
        monitored.get("/broken").await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    // Answered by Concert itself, never sent to the origin.
    assert_eq!(monitored.get("/_room/healthz").await, StatusCode::OK);

    let after = monitored.monitor().await;
    let traffic = &after["traffic"];
    assert_eq!(traffic["requests_total"], 12);
    let counted = buckets(&after);
    assert_eq!(counted.iter().sum::<u64>(), 12);
    // The origin took 300 ms over each slow page: those three, and only they, are past 250 ms.
    assert_eq!(counted[8..].iter().sum::<u64>(), 3, "{counted:?}");
    assert_eq!(traffic["status"]["1xx"], 0);
    assert_eq!(traffic["status"]["2xx"], 9);
    assert_eq!(traffic["status"]["3xx"], 0);
    assert_eq!(traffic["status"]["4xx"], 2);
    assert_eq!(traffic["status"]["5xx"], 1);
    assert_eq!(traffic["proxied_total"], 11);
    assert_eq!(traffic["origin_errors_total"], 1);
    // Three of twelve past 250 ms: the 99th percentile lies among them, the median well below.
    let p50 = traffic["p50_ms"].as_f64().unwrap();
    let p99 = traffic["p99_ms"].as_f64().unwrap();
    assert!(p50 < 250.0, "p50 {p50}");
    assert!((250.0..=1000.0).contains(&p99), "p99 {p99}");
    assert!(traffic["p95_ms"].as_f64().unwrap() <= p99);
    assert_eq!(traffic["inflight"], 0);
    assert!(traffic["inflight_peak"].as_u64().unwrap() >= 1);

    // One in eleven of the origin's answers was a 5xx: more than it should be.
    let origin_health = health(&after, "Origin");
    assert_eq!(origin_health["ok"], false, "{origin_health}");
    let detail = origin_health["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("1 of 11 requests failed or answered 5xx (9.1 %)"),
        "{detail}"
    );

    // The portal's own requests are not the main listener's.
    let again = monitored.monitor().await;
    assert_eq!(again["traffic"]["requests_total"], 12);
}

#[tokio::test]
async fn requests_are_in_flight_while_the_origin_holds_them_and_not_after() {
    let origin = origins::held_origin();
    let monitored = monitored(&origin.url(), &[]).await;
    assert_eq!(monitored.in_flight_becomes(|n| n == 0).await, 0);

    // One request the origin will answer, and one whose client will go away.
    let answered = {
        let url = support::url(&monitored.running, "/held");
        tokio::spawn(async move { plain_client().get(url).send().await.map(|r| r.status()) })
    };
    let mut abandoned = tokio::net::TcpStream::connect(monitored.running.addr)
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut abandoned,
        b"GET /abandoned HTTP/1.1\r\nHost: concert.test\r\n\r\n",
    )
    .await
    .unwrap();
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 2).await);
    assert_eq!(monitored.in_flight_becomes(|n| n == 2).await, 2);
    let during = monitored.monitor().await;
    assert!(during["traffic"]["inflight_peak"].as_u64().unwrap() >= 2);
    assert_eq!(
        during["traffic"]["requests_total"], 0,
        "nothing answered yet"
    );
    let sample_fields = [
        "t",
        "rps",
        "p50_ms",
        "p95_ms",
        "errors_per_s",
        "inflight",
        "threads",
        "rss_mb",
        "cpu_pct",
        "queue_depth",
        "occupancy",
    ];
    let samples = during["samples"].as_array().unwrap();
    assert!(!samples.is_empty(), "a sample is taken at start");
    for field in sample_fields {
        assert!(
            samples[0].get(field).is_some(),
            "no {field} in {}",
            samples[0]
        );
    }

    // Gone without a goodbye: its request is no longer in flight, and was never answered.
    abandoned.set_zero_linger().unwrap();
    drop(abandoned);
    assert_eq!(monitored.in_flight_becomes(|n| n == 1).await, 1);

    origin.release(1);
    assert_eq!(answered.await.unwrap().unwrap(), StatusCode::OK);
    assert_eq!(monitored.in_flight_becomes(|n| n == 0).await, 0);
    let after = monitored.monitor().await;
    assert_eq!(after["traffic"]["requests_total"], 1);
    assert!(after["traffic"]["inflight_peak"].as_u64().unwrap() >= 2);
}

#[tokio::test]
async fn the_health_entries_say_what_they_see() {
    let origin = origins::fast_origin();
    let data = tempfile::tempdir().unwrap();
    let data_dir = format!("-data-dir={}", data.path().display());
    let monitored = monitored(&origin.url(), &[&data_dir, "-cap", "2"]).await;
    assert_eq!(monitored.get("/").await, StatusCode::OK);
    let monitor = monitored.monitor().await;
    let names: Vec<&str> = monitor["health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Origin",
            "Waiting room",
            "Abuse registry",
            "History log",
            "Data directory",
            "Open files"
        ]
    );
    for entry in monitor["health"].as_array().unwrap() {
        assert_eq!(entry["ok"], true, "{entry}");
        assert!(!entry["detail"].as_str().unwrap().is_empty());
    }
    let origin_detail = health(&monitor, "Origin")["detail"].as_str().unwrap();
    assert!(
        origin_detail.starts_with("0 of 1 requests failed or answered 5xx (0.0 %) in the last "),
        "{origin_detail}"
    );
    let room = health(&monitor, "Waiting room")["detail"].as_str().unwrap();
    assert!(room.starts_with("nobody waiting · "), "{room}");
    assert!(room.ends_with(" of 2 page slots in use"), "{room}");
    let abuse = health(&monitor, "Abuse registry")["detail"]
        .as_str()
        .unwrap();
    assert!(
        abuse.starts_with("on · ") && abuse.contains("clients tracked"),
        "{abuse}"
    );
    // With a data directory the history is written to history.jsonl in it.
    let log = health(&monitor, "History log")["detail"].as_str().unwrap();
    assert!(log.contains("history.jsonl · "), "{log}");
    assert!(log.ends_with(" dropped"), "{log}");
    assert_eq!(monitor["history"]["persisted"], true);
    assert_eq!(monitor["history"]["dropped"], 0);
    let dir = health(&monitor, "Data directory")["detail"]
        .as_str()
        .unwrap();
    assert!(dir.starts_with(&data.path().display().to_string()), "{dir}");
    assert!(dir.contains("last saved"), "{dir}");
    let files = health(&monitor, "Open files")["detail"].as_str().unwrap();
    assert!(
        files.contains(" of ") && files.contains("in use"),
        "{files}"
    );

    // The process's own figures, from the kernel.
    let process = &monitor["process"];
    assert!(process["threads"].as_u64().unwrap() >= 1);
    assert!(process["open_fds"].as_u64().unwrap() >= 3);
    assert!(process["workers"].as_u64().unwrap() >= 1);
    assert_eq!(process["pid"], std::process::id());
    assert!(!process["version"].as_str().unwrap().is_empty());
    let memory = &monitor["memory"];
    assert!(memory["rss_bytes"].as_u64().unwrap() > 1024 * 1024);
    assert!(memory["virtual_bytes"].as_u64().unwrap() >= memory["rss_bytes"].as_u64().unwrap());
}

#[tokio::test]
async fn a_line_that_waits_is_reported_as_moving_or_not_by_its_detail() {
    // Cap 1 and a held origin: one visitor in, the next waits.
    let origin = origins::held_origin();
    let monitored = monitored(&origin.url(), &["-cap", "1"]).await;
    let holder = support::hold_the_only_slot(&monitored.running, &origin, "/busy").await;
    let waiting = support::cookie_client();
    let answer = waiting
        .get(support::url(&monitored.running, "/api/wait"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    let monitor = monitored.monitor().await;
    let room = health(&monitor, "Waiting room");
    // Fresh: standing still for less than a minute is no fault yet.
    assert_eq!(room["ok"], true, "{room}");
    let detail = room["detail"].as_str().unwrap();
    assert!(detail.starts_with("1 waiting · "), "{detail}");
    assert!(detail.ends_with("1 of 1 page slots in use"), "{detail}");
    assert_eq!(monitor["traffic"]["queue_depth"], 1);
    assert_eq!(monitor["traffic"]["occupancy"], 1);
    origin.release(10);
    holder.await.unwrap();
}

#[tokio::test]
async fn lines_of_the_history_log_that_could_not_be_read_back_are_told() {
    let origin = origins::fast_origin();
    let data = tempfile::tempdir().unwrap();
    let recent = concert::abuse::record::WallTime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64,
    );
    std::fs::write(
        data.path().join("history.jsonl"),
        format!(
            "{{\"t\":\"req\",\"at\":\"{recent}\",\"ip\":\"203.0.113.5\",\"method\":\"GET\",\"path\":\"/kept\",\"status\":200}}\n\
             not a line of the log\n\
             {{\"t\":\"req\",\"at\":\"{recent}\",\"ip\":\"203.0.1"
        ),
    )
    .unwrap();
    let data_dir = format!("-data-dir={}", data.path().display());
    let monitored = monitored(&origin.url(), &[&data_dir]).await;
    assert!(
        monitored
            .running
            .app
            .history
            .client("203.0.113.5".parse().unwrap())
            .is_some()
    );
    let monitor = monitored.monitor().await;
    assert_eq!(monitor["history"]["unreadable_lines"], 2);
    let told = " · 2 unreadable line(s) skipped at start";
    let status = monitor["history"]["status"].as_str().unwrap();
    assert!(status.ends_with(told), "{status}");
    let log = health(&monitor, "History log");
    assert_eq!(log["ok"], true, "{log}");
    assert!(log["detail"].as_str().unwrap().ends_with(told), "{log}");
}
