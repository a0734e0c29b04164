//! Two real Concert instances sharing one real redis-server: a ban, unban or range ban made on
//! one is enforced by the other within a second, strikes on both add up to a ban, a ban made
//! while Redis was away reaches the other instance when it returns, bans.json on the other
//! instance holds what it was told, a cap change travels, and garbage on the events channel is
//! skipped. Clients are named with `X-Forwarded-For` through the default trusted loopback.

#[path = "support/redis.rs"]
mod redis_server;
mod support;

use std::time::{Duration, Instant};

use redis_server::RedisServer;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::origins::{self, Origin};
use support::*;

const TOKEN: &str = "secret";
const NAME: &str = "bans";

struct Instance {
    running: concert::Running,
    dir: tempfile::TempDir,
}

impl Instance {
    async fn start(origin: &Origin, redis: &RedisServer, extra: &[&str]) -> Instance {
        Instance::start_in(tempfile::tempdir().unwrap(), origin, redis, extra).await
    }

    /// Starts with `dir` as the data directory (a restart keeps it).
    async fn start_in(
        dir: tempfile::TempDir,
        origin: &Origin,
        redis: &RedisServer,
        extra: &[&str],
    ) -> Instance {
        let upstream = origin.url();
        let cluster = redis.url();
        let data_dir = dir.path().to_str().unwrap().to_owned();
        let mut args = vec![
            "-upstream",
            upstream.as_str(),
            "-cluster",
            cluster.as_str(),
            "-cluster-name",
            NAME,
            "-data-dir",
            data_dir.as_str(),
        ];
        args.extend_from_slice(extra);
        let running = concert_with_env(&args, &[("CONCERT_ADMIN_TOKEN", TOKEN)]).await;
        let instance = Instance { running, dir };
        assert!(
            eventually(Duration::from_secs(10), || instance.connected()).await,
            "the instance never caught up with Redis"
        );
        instance
    }

    fn cluster(&self) -> &concert::cluster::Cluster {
        self.running
            .app
            .cluster
            .as_deref()
            .expect("-cluster is set")
    }

    fn connected(&self) -> bool {
        self.cluster().events.is_connected()
    }

    async fn get(&self, client: &str) -> reqwest::Response {
        plain_client()
            .get(url(&self.running, "/page"))
            .header("x-forwarded-for", client)
            .send()
            .await
            .unwrap()
    }

    async fn refuses(&self, client: &str) -> bool {
        self.get(client).await.status() == StatusCode::TOO_MANY_REQUESTS
    }

    async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> StatusCode {
        let mut request = plain_client()
            .request(method, url(&self.running, path))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.body(body.to_string());
        }
        request.send().await.unwrap().status()
    }

    async fn ban(&self, client: &str, duration: &str) {
        let body = json!({"client": client, "duration": duration});
        let status = self
            .admin(reqwest::Method::POST, "/_room/abuse", Some(body))
            .await;
        assert_eq!(status, StatusCode::OK, "ban of {client}");
    }

    async fn unban(&self, client: &str) {
        let path = format!("/_room/abuse?client={}", client.replace('/', "%2F"));
        let status = self.admin(reqwest::Method::DELETE, &path, None).await;
        assert_eq!(status, StatusCode::OK, "unban of {client}");
    }

    fn bans_file(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bans.json")).unwrap_or_default()
    }

    async fn shutdown(self) {
        self.running.shutdown().await.unwrap();
    }

    /// Stops and hands back the data directory.
    async fn stop(self) -> tempfile::TempDir {
        self.running.shutdown().await.unwrap();
        self.dir
    }
}

/// Polls `check` every 20 ms until it holds or `limit` passes; how long it took.
async fn within(limit: Duration, mut check: impl AsyncFnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    loop {
        if check().await {
            return Some(started.elapsed());
        }
        if started.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_unban_and_range_ban_on_one_instance_hold_on_the_other_within_a_second() {
    let redis = RedisServer::start();
    let origin = origins::fast_origin();
    let a = Instance::start(&origin, &redis, &[]).await;
    let b = Instance::start(&origin, &redis, &[]).await;
    assert!(!b.refuses("203.0.113.5").await);

    a.ban("203.0.113.5", "1h").await;
    let took = within(Duration::from_secs(1), async || {
        b.refuses("203.0.113.5").await
    })
    .await;
    let took = took.expect("B refuses the client A banned within 1 s");
    eprintln!("ban reached B after {took:?}");
    // B's own bans.json holds the ban it was told of.
    let saved = within(Duration::from_secs(3), async || {
        b.bans_file().contains("203.0.113.5")
    })
    .await;
    assert!(saved.is_some(), "bans.json on B: {}", b.bans_file());
    // Redis holds it for instances that were away.
    let stored: Option<String> = redis::cmd("HGET")
        .arg(format!("concert:{{{NAME}}}:bans"))
        .arg("203.0.113.5")
        .query(&mut redis.connection())
        .unwrap();
    assert!(stored.unwrap_or_default().contains("\"offenses\":1"));

    a.unban("203.0.113.5").await;
    let took = within(Duration::from_secs(1), async || {
        !b.refuses("203.0.113.5").await
    })
    .await;
    assert!(took.is_some(), "B lifts the ban A lifted within 1 s");
    assert!(!a.refuses("203.0.113.5").await);

    a.ban("198.51.100.0/24", "2h").await;
    let took = within(Duration::from_secs(1), async || {
        b.refuses("198.51.100.77").await
    })
    .await;
    assert!(
        took.is_some(),
        "B refuses a client in the range A banned within 1 s"
    );
    assert!(!b.refuses("198.51.101.1").await);
    // A range unban on B travels the other way.
    b.unban("198.51.100.0/24").await;
    let took = within(Duration::from_secs(1), async || {
        !a.refuses("198.51.100.77").await
    })
    .await;
    assert!(took.is_some(), "A lifts the range B lifted within 1 s");
    assert_eq!(b.cluster().bans.unwritten(), 0);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strikes_on_two_instances_add_up_to_a_ban_on_both() {
    let redis = RedisServer::start();
    let origin = origins::fast_origin();
    // A wrong admin token weighs 5: two on each instance stay under 20 locally, 20 together.
    let a = Instance::start(&origin, &redis, &["-abuse-strikes", "20"]).await;
    let b = Instance::start(&origin, &redis, &["-abuse-strikes", "20"]).await;
    let wrong_token = async |instance: &Instance| {
        let status = plain_client()
            .get(url(&instance.running, "/_room/abuse"))
            .bearer_auth("wrong")
            .header("x-forwarded-for", "192.0.2.44")
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    };
    wrong_token(&a).await;
    wrong_token(&a).await;
    // Let A's batch reach Redis before B's strikes follow.
    let counted = within(Duration::from_secs(2), async || {
        let total: Option<i64> = redis::cmd("HGET")
            .arg(format!("concert:{{{NAME}}}:strikes:192.0.2.44"))
            .arg("current")
            .query(&mut redis.connection())
            .unwrap();
        total == Some(10)
    })
    .await;
    assert!(counted.is_some(), "A's strikes are counted in Redis");
    assert!(!a.refuses("192.0.2.44").await && !b.refuses("192.0.2.44").await);
    wrong_token(&b).await;
    wrong_token(&b).await;
    let took = within(Duration::from_secs(2), async || {
        a.refuses("192.0.2.44").await && b.refuses("192.0.2.44").await
    })
    .await;
    assert!(took.is_some(), "strikes from A and B together ban on both");
    assert_eq!(b.running.app.abuse.bans().len(), 1);
    assert_eq!(a.running.app.abuse.bans().len(), 1);
    assert_eq!(
        a.cluster()
            .bans
            .strikes_dropped
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_made_while_redis_was_away_reaches_the_other_instance_when_it_returns() {
    let mut redis = RedisServer::start();
    let origin = origins::fast_origin();
    let a = Instance::start(&origin, &redis, &[]).await;
    let b = Instance::start(&origin, &redis, &[]).await;
    a.ban("203.0.113.70", "1h").await;
    assert!(
        within(Duration::from_secs(1), async || b
            .refuses("203.0.113.70")
            .await)
        .await
        .is_some()
    );

    redis.kill();
    assert!(
        eventually(Duration::from_secs(10), || !a.connected() && !b.connected()).await,
        "both instances notice Redis is gone"
    );
    // Acknowledged while Redis is down: on A's disk, waiting for Redis.
    a.ban("203.0.113.71", "1h").await;
    assert!(a.bans_file().contains("203.0.113.71"));
    assert!(!b.refuses("203.0.113.71").await);
    assert_eq!(a.cluster().bans.unwritten(), 1);

    redis.resume();
    let took = within(Duration::from_secs(10), async || {
        b.refuses("203.0.113.71").await
    })
    .await;
    eprintln!("ban made during the outage reached B {took:?} after Redis returned");
    assert!(took.is_some(), "B learns of the ban once Redis is back");
    // Redis came back empty; the bans both instances hold are written back to it.
    let stored = within(Duration::from_secs(5), async || {
        let stored: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("concert:{{{NAME}}}:bans"))
            .query(&mut redis.connection())
            .unwrap();
        stored.contains_key("203.0.113.70") && stored.contains_key("203.0.113.71")
    })
    .await;
    assert!(stored.is_some(), "Redis holds both bans again");
    assert!(b.refuses("203.0.113.70").await && a.refuses("203.0.113.70").await);
    assert!(
        within(Duration::from_secs(3), async || b
            .bans_file()
            .contains("203.0.113.71"))
        .await
        .is_some()
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_change_on_one_instance_reaches_the_others_and_newcomers() {
    let redis = RedisServer::start();
    let origin = origins::fast_origin();
    let a = Instance::start(&origin, &redis, &["-cap", "10"]).await;
    let b = Instance::start(&origin, &redis, &["-cap", "10"]).await;
    let status = a
        .admin(reqwest::Method::POST, "/_room/cap", Some(json!({"cap": 7})))
        .await;
    assert_eq!(status, StatusCode::OK);
    let took = within(Duration::from_secs(1), async || {
        b.running.app.generation().config.cap == 7
    })
    .await;
    eprintln!("cap change reached B after {took:?}");
    assert!(took.is_some(), "B takes A's cap within 1 s");
    assert_eq!(b.running.app.room.stats().cap, 7);
    let saved = std::fs::read_to_string(b.dir.path().join("settings.json")).unwrap();
    assert!(saved.contains("\"cap\": 7"), "{saved}");
    // B did not send it back: the version A wrote is the only one.
    let version: Option<u64> = redis::cmd("GET")
        .arg(format!("concert:{{{NAME}}}:settings:version"))
        .query(&mut redis.connection())
        .unwrap();
    assert_eq!(version, Some(2), "one write at start, one for the change");

    // An instance that starts later takes the shared settings, not its own flag.
    let c = Instance::start(&origin, &redis, &["-cap", "50"]).await;
    assert!(
        within(Duration::from_secs(2), async || {
            c.running.app.generation().config.cap == 7
        })
        .await
        .is_some()
    );
    a.shutdown().await;
    b.shutdown().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_foreign_messages_on_the_channel_are_skipped() {
    let redis = RedisServer::start();
    let origin = origins::fast_origin();
    let a = Instance::start(&origin, &redis, &[]).await;
    let b = Instance::start(&origin, &redis, &[]).await;
    let channel = format!("concert:{{{NAME}}}:events");
    let huge = "x".repeat(100_000);
    let garbage = [
        "not json",
        "{}",
        r#"{"kind":"reboot","from":"elsewhere"}"#,
        r#"{"kind":"ban","from":"elsewhere","client":"not an address","range":false,"record":{"at":1}}"#,
        r#"{"kind":"ban","from":"elsewhere","client":"203.0.113.9","range":false,"record":{"at":"soon"}}"#,
        r#"{"kind":"settings","from":"elsewhere","version":-1}"#,
        huge.as_str(),
    ];
    let mut connection = redis.connection();
    for message in garbage {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg(message)
            .query(&mut connection)
            .unwrap();
    }
    let skipped = within(Duration::from_secs(2), async || {
        b.cluster()
            .events
            .invalid_total
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 6
    })
    .await;
    assert!(skipped.is_some());
    // Both still listen and still share.
    a.ban("203.0.113.99", "1h").await;
    assert!(
        within(Duration::from_secs(1), async || b
            .refuses("203.0.113.99")
            .await)
        .await
        .is_some()
    );
    assert!(a.connected() && b.connected());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lift_made_while_an_instance_was_stopped_holds_when_it_starts_again() {
    let redis = RedisServer::start();
    let origin = origins::fast_origin();
    let a = Instance::start(&origin, &redis, &[]).await;
    let b = Instance::start(&origin, &redis, &[]).await;
    a.ban("203.0.113.80", "1h").await;
    a.ban("203.0.113.81", "1h").await;
    assert!(
        within(Duration::from_secs(3), async || {
            let saved = b.bans_file();
            saved.contains("203.0.113.80") && saved.contains("203.0.113.81")
        })
        .await
        .is_some()
    );
    let dir = b.stop().await;
    a.unban("203.0.113.80").await;
    // B comes back with both bans in its bans.json: the lifted one goes, the other stays, and
    // B does not write the lifted one back.
    let b = Instance::start_in(dir, &origin, &redis, &[]).await;
    assert!(!b.refuses("203.0.113.80").await);
    assert!(b.refuses("203.0.113.81").await);
    assert!(!a.refuses("203.0.113.80").await);
    let stored: Option<String> = redis::cmd("HGET")
        .arg(format!("concert:{{{NAME}}}:bans"))
        .arg("203.0.113.80")
        .query(&mut redis.connection())
        .unwrap();
    assert!(stored.unwrap_or_default().contains("\"lifted\":true"));
    a.shutdown().await;
    b.shutdown().await;
}

/// The shared strike count slides as each instance's own does: a burst across the edge of two
/// windows is seen whole, strikes two windows old are forgotten, and a count an older version
/// left as a plain number starts afresh. The script run is the one the instances run.
#[tokio::test]
async fn shared_strikes_slide_over_the_window_edge() {
    let redis = RedisServer::start();
    let mut connection = redis.connection();
    let script = redis::Script::new(include_str!("../src/cluster/lua/strikes.lua"));
    let key = "concert:{slide}:strikes:198.51.100.3";
    let window_ms = 1_000;
    let mut strike = |weight: i64| -> i64 {
        let totals: Vec<i64> = script
            .key(key)
            .arg(window_ms)
            .arg(3)
            .arg(weight)
            .invoke(&mut connection)
            .unwrap();
        totals[0]
    };
    assert_eq!(strike(2), 2);
    // Just past the edge: a fixed window would count 2 here and never ban.
    std::thread::sleep(Duration::from_millis(1_050));
    assert!(
        strike(2) < 0,
        "a burst across the edge reaches the threshold"
    );
    // The count started afresh with the ban.
    assert_eq!(strike(1), 1);
    std::thread::sleep(Duration::from_millis(2_100));
    assert_eq!(strike(1), 1, "strikes two windows old are forgotten");
    // A count an older version kept as a number.
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(17)
        .query(&mut redis.connection())
        .unwrap();
    assert_eq!(strike(1), 1);
}
