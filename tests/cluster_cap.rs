//! The global cap across instances (`-cluster`): real Concert processes in front of one counting
//! origin and one real redis-server. The origin never sees more than `-cap` page requests from
//! all instances together; a `kill -9`'d instance's slots come back within the membership TTL;
//! with Redis gone every instance serves on its share and rejoins when Redis is back; and the
//! lease script keeps the pool's invariant whatever the instances ask.

#[path = "support/redis.rs"]
mod redis_server;
mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_server::RedisServer;
use support::origins::{self, Origin, text};

/// How long the counting origin holds each page.
const HOLD: Duration = Duration::from_millis(150);

/// A Concert process; killed (SIGKILL) when dropped.
struct Instance {
    addr: SocketAddr,
    child: Child,
}

impl Instance {
    fn start(origin: &str, redis: &str, cap: u32, extra: &[&str]) -> Instance {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let child = Command::new(env!("CARGO_BIN_EXE_concert"))
            .args(["-listen", &addr.to_string(), "-upstream", origin])
            .args(["-cap", &cap.to_string(), "-max-queue", "0"])
            .args(["-cluster", redis, "-cluster-name", "captest"])
            .args(["-access-log=false", "-data-dir="])
            .args(extra)
            .env("CONCERT_ADMIT_SECRET", "0123456789abcdef0123456789abcdef")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("CLUSTER_TEST_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("the concert binary starts");
        Instance { addr, child }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Concurrency at the origin, in all and per instance (the first path segment names it).
#[derive(Default)]
struct Tally {
    now: Mutex<HashMap<String, i64>>,
    max: Mutex<HashMap<String, i64>>,
    served: Mutex<HashMap<String, u64>>,
    total_now: AtomicI64,
    total_max: AtomicI64,
    hits: AtomicU64,
}

impl Tally {
    fn enter(&self, who: &str) {
        let all = self.total_now.fetch_add(1, Ordering::SeqCst) + 1;
        self.total_max.fetch_max(all, Ordering::SeqCst);
        self.hits.fetch_add(1, Ordering::SeqCst);
        let mut now = self.now.lock().unwrap();
        let mine = now.entry(who.to_owned()).or_default();
        *mine += 1;
        let mine = *mine;
        drop(now);
        let mut max = self.max.lock().unwrap();
        let top = max.entry(who.to_owned()).or_default();
        *top = (*top).max(mine);
    }

    fn now_of(&self, who: &str) -> i64 {
        self.now.lock().unwrap().get(who).copied().unwrap_or(0)
    }

    fn leave(&self, who: &str) {
        self.total_now.fetch_sub(1, Ordering::SeqCst);
        *self.now.lock().unwrap().entry(who.to_owned()).or_default() -= 1;
        *self
            .served
            .lock()
            .unwrap()
            .entry(who.to_owned())
            .or_default() += 1;
    }

    fn max_of(&self, who: &str) -> i64 {
        self.max.lock().unwrap().get(who).copied().unwrap_or(0)
    }

    fn served_by(&self, who: &str) -> u64 {
        self.served.lock().unwrap().get(who).copied().unwrap_or(0)
    }

    /// Starts the per-instance maxima afresh from what is in flight now.
    fn reset_each(&self) {
        let now = self.now.lock().unwrap().clone();
        *self.max.lock().unwrap() = now;
    }
}

/// An origin that holds each page for `HOLD` and counts who sent it.
fn counting_origin() -> (Origin, Arc<Tally>) {
    let tally = Arc::new(Tally::default());
    let counted = Arc::clone(&tally);
    let origin = origins::origin_with(move |request, _| {
        let tally = Arc::clone(&counted);
        async move {
            let who = request
                .uri()
                .path()
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            tally.enter(&who);
            tokio::time::sleep(HOLD).await;
            tally.leave(&who);
            text("ok")
        }
    });
    (origin, tally)
}

/// Counts a page as at the origin until dropped (also when the client goes away first).
struct AtOrigin(Arc<Tally>, String);

impl Drop for AtOrigin {
    fn drop(&mut self) {
        self.0.leave(&self.1);
    }
}

/// An origin that holds every page until `open` is set, counting who sent it.
fn held_counting_origin() -> (Origin, Arc<Tally>, tokio::sync::watch::Sender<bool>) {
    let tally = Arc::new(Tally::default());
    let counted = Arc::clone(&tally);
    let (open, opened) = tokio::sync::watch::channel(false);
    let origin = origins::origin_with(move |request, tools| {
        let tally = Arc::clone(&counted);
        let mut opened = opened.clone();
        async move {
            let who = request.uri().path().trim_start_matches('/');
            let who = who.split('/').next().unwrap_or_default().to_owned();
            tally.enter(&who);
            let _at = AtOrigin(tally, who);
            tokio::select! {
                _ = opened.wait_for(|open| *open) => {}
                _ = tools.stopped() => {}
            }
            text("ok")
        }
    });
    (origin, tally, open)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .cookie_store(true)
        .build()
        .unwrap()
}

/// The cluster object of an instance's health report (`None` while it does not answer).
async fn cluster_health(instance: &Instance) -> Option<serde_json::Value> {
    let response = reqwest::Client::new()
        .get(instance.url("/_room/healthz"))
        .header("Accept", "application/json")
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    let body: serde_json::Value = response.json().await.ok()?;
    Some(body["cluster"].clone())
}

/// Waits (bounded) until every instance answers its health report with a cluster in `mode`.
async fn all_in_mode(instances: &[&Instance], mode: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let mut all = true;
        for instance in instances {
            let health = cluster_health(instance).await;
            if health.as_ref().map(|h| h["mode"].clone()) != Some(mode.into()) {
                all = false;
            }
        }
        if all {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Visitors sending pages through `instance` (under `/<name>/…`) until `stop` is set, each as
/// a patient browser would: queued answers are retried after a short pause.
fn flood(
    instance: &Instance,
    name: &str,
    visitors: usize,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..visitors)
        .map(|i| {
            let target = instance.url(&format!("/{name}/page/{i}"));
            let stop = Arc::clone(stop);
            tokio::spawn(async move {
                let client = client();
                let mut ok = 0;
                // Bounded: the test stops the flood, and no visitor runs longer than a minute.
                let deadline = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    match client
                        .get(&target)
                        .header("Accept", "application/json")
                        .send()
                        .await
                    {
                        Ok(response) if response.status() == 200 => ok += 1,
                        Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
                ok
            })
        })
        .collect()
}

async fn finish(tasks: Vec<tokio::task::JoinHandle<u64>>) -> u64 {
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_over_three_instances_never_shows_the_origin_more_than_the_cap() {
    let redis = RedisServer::start();
    let (origin, tally) = counting_origin();
    let instances: Vec<Instance> = (0..3)
        .map(|_| Instance::start(&origin.url(), &redis.url(), 4, &[]))
        .collect();
    let refs: Vec<&Instance> = instances.iter().collect();
    assert!(all_in_mode(&refs, "shared", Duration::from_secs(15)).await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (n, instance) in instances.iter().enumerate() {
        tasks.extend(flood(instance, &format!("i{n}"), 8, &stop));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut leases = Vec::new();
    for instance in &instances {
        leases.push(cluster_health(instance).await.unwrap_or_default());
    }
    stop.store(true, Ordering::SeqCst);
    let served = finish(tasks).await;
    let each: Vec<u64> = (0..3).map(|n| tally.served_by(&format!("i{n}"))).collect();
    eprintln!(
        "served {served} pages ({each:?} per instance), origin max {} at once; reports {leases:?}",
        tally.total_max.load(Ordering::SeqCst)
    );
    assert!(
        tally.total_max.load(Ordering::SeqCst) <= 4,
        "the origin saw {} at once",
        tally.total_max.load(Ordering::SeqCst)
    );
    assert_eq!(
        tally.total_max.load(Ordering::SeqCst),
        4,
        "together the instances used the whole cap"
    );
    assert!(
        each.iter().all(|&n| n > 0),
        "every instance served: {each:?}"
    );
    for report in &leases {
        assert_eq!(report["instances"], 3, "{report}");
    }
    // The same figures in the stats, the metrics and the plain health report.
    let http = reqwest::Client::new();
    let stats: serde_json::Value = http
        .get(instances[0].url("/_room/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["cluster"]["mode"], "shared", "{stats}");
    assert_eq!(stats["cap"], 4);
    let metrics = http
        .get(instances[0].url("/_room/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        "concert_cluster_mode{mode=\"shared\"} 1",
        "concert_cluster_mode{mode=\"local\"} 0",
        "concert_cluster_instances 3",
        "concert_cluster_lease ",
        "concert_cluster_in_use ",
        "concert_cluster_redis_latency_seconds ",
        "concert_cluster_redis_errors_total ",
    ] {
        assert!(metrics.contains(series), "{series} missing from\n{metrics}");
    }
    let health = http
        .get(instances[0].url("/_room/healthz"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        health.starts_with("ok\ncluster: shared\ninstances: 3\n"),
        "{health}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_s_slots_come_back_within_the_membership_ttl() {
    let redis = RedisServer::start();
    let (origin, tally, open) = held_counting_origin();
    let mut a = Instance::start(&origin.url(), &redis.url(), 4, &[]);
    let b = Instance::start(&origin.url(), &redis.url(), 4, &[]);
    assert!(all_in_mode(&[&a, &b], "shared", Duration::from_secs(15)).await);
    // A takes three of the pool's four slots and keeps them busy at the held origin (a fourth
    // visitor would wait in the shared line, and once called hold a slot for its whole call
    // window: not what this test measures).
    let on_a: Vec<_> = (0..3)
        .map(|i| {
            let target = a.url(&format!("/a/{i}"));
            tokio::spawn(async move { client().get(target).send().await.map(|r| r.status()) })
        })
        .collect();
    let held = support::eventually(Duration::from_secs(10), || tally.now_of("a") >= 3).await;
    assert!(held, "A holds slots: {} in flight", tally.now_of("a"));
    let held_by_a = tally.now_of("a");
    let a_report = cluster_health(&a).await.unwrap();
    a.kill();
    let killed = Instant::now();
    // B's visitors beyond its own slots wait in the shared line and retry, as browsers do,
    // until A's slots are back in the pool and the line's head is called.
    let on_b: Vec<_> = (0..4)
        .map(|i| {
            let target = b.url(&format!("/b/{i}"));
            tokio::spawn(async move {
                let client = client();
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let status = client
                        .get(&target)
                        .header("Accept", "application/json")
                        .send()
                        .await
                        .map(|r| r.status());
                    match status {
                        Ok(status) if status == 429 && Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        other => return other,
                    }
                }
            })
        })
        .collect();
    let whole = support::eventually(Duration::from_secs(8), || tally.now_of("b") == 4).await;
    let back_after = killed.elapsed();
    eprintln!(
        "A held {held_by_a} slots ({a_report}); B had the whole cap of 4 {:.2} s after kill -9",
        back_after.as_secs_f64()
    );
    assert!(whole, "B never got the whole cap: {}", tally.now_of("b"));
    // The membership TTL (3 s) plus a lease round, with room for a busy machine.
    assert!(back_after < Duration::from_secs(5), "{back_after:?}");
    open.send_replace(true);
    for task in on_b {
        assert_eq!(task.await.unwrap().unwrap(), 200);
    }
    for task in on_a {
        let _ = task.await;
    }
    let report = cluster_health(&b).await.unwrap();
    assert_eq!(report["instances"], 1, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_each_instance_serves_its_share_and_rejoins_when_it_is_back() {
    let mut redis = RedisServer::start();
    let (origin, tally) = counting_origin();
    let a = Instance::start(&origin.url(), &redis.url(), 4, &[]);
    let b = Instance::start(&origin.url(), &redis.url(), 4, &[]);
    assert!(all_in_mode(&[&a, &b], "shared", Duration::from_secs(15)).await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = flood(&a, "a", 8, &stop);
    tasks.extend(flood(&b, "b", 8, &stop));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = (tally.served_by("a"), tally.served_by("b"));

    redis.kill();
    assert!(
        all_in_mode(&[&a, &b], "local", Duration::from_secs(5)).await,
        "both say local"
    );
    // Slots taken before the switch end within one page; from then on each keeps to its share
    // (half of the cap: two instances were last seen).
    tokio::time::sleep(HOLD * 3).await;
    tally.reset_each();
    let outage = (tally.served_by("a"), tally.served_by("b"));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = (
        tally.served_by("a") - outage.0,
        tally.served_by("b") - outage.1,
    );
    let (max_a, max_b) = (tally.max_of("a"), tally.max_of("b"));
    let local_report = cluster_health(&a).await.unwrap();

    redis.resume();
    assert!(
        all_in_mode(&[&a, &b], "shared", Duration::from_secs(10)).await,
        "both rejoin"
    );
    let rejoined = (tally.served_by("a"), tally.served_by("b"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    finish(tasks).await;
    let after = (
        tally.served_by("a") - rejoined.0,
        tally.served_by("b") - rejoined.1,
    );
    eprintln!(
        "before {before:?}; alone: served {during:?}, at most {max_a}/{max_b} at once ({local_report}); after rejoining {after:?}; origin max {}",
        tally.total_max.load(Ordering::SeqCst)
    );
    assert_eq!(local_report["mode"], "local");
    assert_eq!(local_report["redis"]["up"], false);
    assert!(
        during.0 > 0 && during.1 > 0,
        "both served alone: {during:?}"
    );
    assert!(max_a <= 2 && max_b <= 2, "shares kept: {max_a}, {max_b}");
    assert!(after.0 + after.1 > 0, "served after rejoining: {after:?}");
    assert!(
        tally.total_max.load(Ordering::SeqCst) <= 4,
        "the origin saw {} at once",
        tally.total_max.load(Ordering::SeqCst)
    );
}

/// The lease script on its own: fake instances asking at random and taking idle slots back
/// out of their gates, called visitors coming in on them between rounds (the line's `arrive`
/// raising a lease by one), and after every step the pool's invariant and the one that keeps
/// the origin within the cap: the pool never counts fewer slots for an instance than its gate
/// holds.
#[test]
fn the_lease_script_keeps_the_pool_within_the_cap() {
    let redis = RedisServer::start();
    let mut connection = redis.connection();
    let script = redis::Script::new(include_str!("../src/cluster/lua/lease.lua"));
    let prefix = "concert:{lua}:";
    let key = |suffix: &str| format!("{prefix}{suffix}");
    let cap: i64 = 7;
    let ids = ["a", "b", "c", "d", "e"];
    // id -> (slots its gate holds, what it believes the pool records)
    let mut state: HashMap<&str, (i64, i64)> = ids.iter().map(|id| (*id, (0, 0))).collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |below: i64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below.max(1) as u64) as i64
    };
    let leases_of = |connection: &mut redis::Connection| -> HashMap<String, i64> {
        redis::cmd("HGETALL")
            .arg(key("leases"))
            .query(connection)
            .unwrap()
    };
    let reserved_of = |connection: &mut redis::Connection| -> i64 {
        redis::cmd("GET")
            .arg(key("reserved"))
            .query::<Option<i64>>(connection)
            .unwrap()
            .unwrap_or(0)
    };
    let mut granted_total = 0;
    let mut entered_total = 0;
    for round in 0..2_000 {
        let id = ids[next(ids.len() as i64) as usize];
        let (gate, believed) = state[id];
        if round % 50 == 0 {
            // The line sets free slots aside now and then.
            let free = cap - leases_of(&mut connection).values().sum::<i64>();
            let reserved = if free > 0 { next(free + 1) } else { 0 };
            let _: () = redis::cmd("SET")
                .arg(key("reserved"))
                .arg(reserved)
                .query(&mut connection)
                .unwrap();
        }
        if round % 3 == 0 {
            // A called visitor comes in on this instance, as `arrive` does: a reserved slot
            // becomes its lease (only while the pool holds one for it), then its gate grows.
            let leases = leases_of(&mut connection);
            if leases.contains_key(id) && reserved_of(&mut connection) > 0 {
                let _: () = redis::cmd("DECR")
                    .arg(key("reserved"))
                    .query(&mut connection)
                    .unwrap();
                let _: () = redis::cmd("HINCRBY")
                    .arg(key("leases"))
                    .arg(id)
                    .arg(1)
                    .query(&mut connection)
                    .unwrap();
                state.insert(id, (gate + 1, believed + 1));
                entered_total += 1;
                continue;
            }
        }
        let in_use = next(gate + 1);
        let want = in_use.max(next(cap + 1));
        // Idle surplus leaves the gate first; what the pool counts beyond the gate goes back.
        let gate = gate.min(want).max(in_use);
        let returned = (believed - gate).max(0);
        let reply: Vec<i64> = script
            .key(key("instances"))
            .key(key("leases"))
            .key(key("wants"))
            .key(key(&format!("instance:{id}")))
            .key(key("reserved"))
            .key(key("line"))
            .arg(id)
            .arg(cap)
            .arg(want)
            .arg(returned)
            .arg(gate)
            .arg(60_000)
            .arg(prefix)
            .arg(in_use)
            .arg(0)
            .arg("127.0.0.1:1")
            .invoke(&mut connection)
            .unwrap();
        let (granted, lease) = (reply[0], reply[1]);
        assert!(
            granted >= 0 && gate + granted <= want.max(gate),
            "round {round}: granted {granted} with {gate} held, want {want}"
        );
        assert_eq!(lease, gate + granted, "round {round}: {reply:?}");
        state.insert(id, (gate + granted, lease));
        granted_total += granted;
        let leases = leases_of(&mut connection);
        let reserved = reserved_of(&mut connection);
        let sum: i64 = leases.values().sum();
        assert!(
            sum + reserved <= cap,
            "round {round}: leases {leases:?} + reserved {reserved} > cap {cap}"
        );
        for (other, (held, _)) in &state {
            let recorded = leases.get(*other).copied().unwrap_or(0);
            assert!(
                recorded >= *held,
                "round {round}: {other} holds {held}, the pool counts {recorded}"
            );
        }
        assert!((1..=ids.len() as i64).contains(&reply[2]), "{reply:?}");
    }
    assert!(granted_total > 0 && entered_total > 0);
}

/// Reaping: a member whose time ran out loses its lease to the others at their next call.
#[test]
fn the_lease_script_returns_a_dead_member_s_slots() {
    let redis = RedisServer::start();
    let mut connection = redis.connection();
    let script = redis::Script::new(include_str!("../src/cluster/lua/lease.lua"));
    let prefix = "concert:{reap}:";
    let key = |suffix: &str| format!("{prefix}{suffix}");
    let mut call = |id: &str, want: i64, ttl_ms: i64| -> Vec<i64> {
        script
            .key(key("instances"))
            .key(key("leases"))
            .key(key("wants"))
            .key(key(&format!("instance:{id}")))
            .key(key("reserved"))
            .key(key("line"))
            .arg(id)
            .arg(4)
            .arg(want)
            .arg(0)
            .arg(0)
            .arg(ttl_ms)
            .arg(prefix)
            .arg(0)
            .arg(0)
            .arg("")
            .invoke(&mut connection)
            .unwrap()
    };
    assert_eq!(call("dead", 4, 100)[0], 4);
    assert_eq!(call("live", 4, 60_000)[0], 0, "the pool is empty");
    std::thread::sleep(Duration::from_millis(150));
    let reply = call("live", 4, 60_000);
    assert_eq!(
        (reply[0], reply[2]),
        (4, 1),
        "the dead member's slots came back"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg(key("instance:dead"))
        .query(&mut connection)
        .unwrap();
    assert_eq!(exists, 0, "its report is gone too");
}
