//! One FIFO line shared by several instances through a real redis-server: the Lua operations
//! keep their invariants, and two real Concert instances in front of one origin keep a
//! visitor's place wherever the visitor goes, give global positions, and let visitors in by
//! global arrival order.

#[path = "support/redis.rs"]
mod redis_server;
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use concert::cluster::line::{self, Joined, Polled, Visit};
use concert::cluster::{Cluster, ClusterOptions};
use concert::room::RoomSettings;
use redis::Commands;
use redis_server::RedisServer;
use reqwest::StatusCode;
use reqwest::header::ACCEPT;
use support::origins::{self, Origin};
use support::*;

const SECRET: &str = "a-shared-admission-secret-of-forty-chars";

fn cluster_of(server: &RedisServer, name: &str) -> Arc<Cluster> {
    Cluster::new(ClusterOptions {
        url: server.url(),
        name: name.into(),
        password: None,
        fallback_share: 0.0,
    })
    .expect("a cluster link")
}

/// sum(leases) + reserved, read straight from Redis.
fn pool_in_use(connection: &mut redis::Connection, name: &str) -> (i64, i64) {
    let leases: Vec<i64> = connection
        .hvals(format!("concert:{{{name}}}:leases"))
        .unwrap();
    let reserved: Option<i64> = connection
        .get(format!("concert:{{{name}}}:reserved"))
        .unwrap();
    (leases.iter().sum(), reserved.unwrap_or(0))
}

#[tokio::test]
async fn join_gives_fifo_places_and_keeps_the_address_and_line_bounds() {
    let server = RedisServer::start();
    let cluster = cluster_of(&server, "join");
    cluster.line.set_timing(&RoomSettings {
        max_queue: 4,
        max_per_address: 2,
        first_poll_grace: Duration::ZERO,
        ..RoomSettings::default()
    });
    let a = Some("203.0.113.5".parse().unwrap());
    let b = Some("2001:db8::1".parse().unwrap());
    let b_same_64 = Some("2001:db8::ffff".parse().unwrap());
    assert_eq!(
        line::join(&cluster, "t1", a).await.unwrap(),
        Joined::Waiting {
            position: 1,
            waiting: 1
        }
    );
    assert!(matches!(
        line::join(&cluster, "t2", a).await.unwrap(),
        Joined::Waiting { position: 2, .. }
    ));
    assert_eq!(
        line::join(&cluster, "t3", a).await.unwrap(),
        Joined::AddressFull
    );
    assert!(matches!(
        line::join(&cluster, "t3", b).await.unwrap(),
        Joined::Waiting { position: 3, .. }
    ));
    assert!(matches!(
        line::join(&cluster, "t4", b_same_64).await.unwrap(),
        Joined::Waiting { position: 4, .. }
    ));
    assert_eq!(
        line::join(&cluster, "t5", None).await.unwrap(),
        Joined::Full
    );
    assert_eq!(
        line::join(&cluster, "t1", None).await.unwrap(),
        Joined::Taken,
        "a token already in line is never queued twice"
    );
    // Polls read the place and throttle a second poll within a second.
    assert_eq!(
        line::poll(&cluster, "t3").await.unwrap(),
        Polled::Waiting {
            position: 3,
            waiting: 4
        }
    );
    assert_eq!(
        line::poll(&cluster, "t3").await.unwrap(),
        Polled::Throttled { position: 3 }
    );
    assert_eq!(
        line::poll(&cluster, "nobody").await.unwrap(),
        Polled::Unknown
    );
}

#[tokio::test]
async fn call_and_arrive_never_break_the_pool_bound() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    let name = "pool";
    let cluster = cluster_of(&server, name);
    // Only a member the pool holds a lease for takes slots: one lease round makes it one.
    concert::cluster::slots::lease_round(&cluster, 3, 0, 0, 0, 0)
        .await
        .unwrap();
    cluster.line.set_timing(&RoomSettings {
        max_queue: 0,
        first_poll_grace: Duration::ZERO,
        ..RoomSettings::default()
    });
    for token in ["t1", "t2", "t3", "t4"] {
        line::join(&cluster, token, None).await.unwrap();
    }
    // Cap 3, one slot leased to another instance: two are free, so two are called.
    let _: () = redis
        .hset(format!("concert:{{{name}}}:leases"), "other", 1)
        .unwrap();
    let calls = line::call(&cluster, 3).await.unwrap();
    assert_eq!((calls.called_now, calls.waiting, calls.called), (2, 2, 2));
    assert_eq!(pool_in_use(&mut redis, name), (1, 2));
    // Nothing more is free: a second call calls nobody.
    assert_eq!(line::call(&cluster, 3).await.unwrap().called_now, 0);
    // The head keeps global order: t1 and t2 were called, t3 is now first.
    assert_eq!(
        line::arrive(&cluster, "t3", 3).await.unwrap(),
        Visit::Waiting {
            position: 1,
            waiting: 2
        }
    );
    assert_eq!(line::poll(&cluster, "t1").await.unwrap(), Polled::Called);
    // A called visitor comes in: its reserved slot becomes this instance's lease.
    assert_eq!(
        line::arrive(&cluster, "t1", 3).await.unwrap(),
        Visit::Entered
    );
    assert_eq!(pool_in_use(&mut redis, name), (2, 1));
    let lease: i64 = redis
        .hget(format!("concert:{{{name}}}:leases"), &cluster.id)
        .unwrap();
    assert_eq!(lease, 1);
    // Entering twice is impossible: the ticket is gone.
    assert_eq!(
        line::arrive(&cluster, "t1", 3).await.unwrap(),
        Visit::Unknown
    );
    // A cap cut leaves the pool over the bound: nobody is called until it is back under.
    assert_eq!(line::call(&cluster, 2).await.unwrap().called_now, 0);
    let (leased, reserved) = pool_in_use(&mut redis, name);
    assert!(leased + reserved <= 3);
    // Reserved lost (an operator cleared it) and no free slot: the called visitor waits.
    let _: () = redis.del(format!("concert:{{{name}}}:reserved")).unwrap();
    assert_eq!(
        line::arrive(&cluster, "t2", 2).await.unwrap(),
        Visit::NoSlot
    );
    // With a slot free in the pool it comes in on that slot instead.
    assert_eq!(
        line::arrive(&cluster, "t2", 3).await.unwrap(),
        Visit::Entered
    );
    let (leased, reserved) = pool_in_use(&mut redis, name);
    assert_eq!((leased, reserved), (3, 0));
}

#[tokio::test]
async fn reap_drops_expired_tickets_and_returns_lapsed_reserved_slots() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    let name = "reap";
    let cluster = cluster_of(&server, name);
    cluster.line.set_timing(&RoomSettings {
        token_ttl: Duration::from_millis(400),
        first_poll_grace: Duration::ZERO,
        ..RoomSettings::default()
    });
    let client = Some("198.51.100.7".parse().unwrap());
    for token in ["called", "gone", "kept"] {
        line::join(&cluster, token, client).await.unwrap();
    }
    assert_eq!(line::call(&cluster, 1).await.unwrap().called_now, 1);
    assert_eq!(pool_in_use(&mut redis, name), (0, 1));
    // "kept" polls within its lifetime; "gone" never does.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(matches!(
        line::poll(&cluster, "kept").await.unwrap(),
        Polled::Waiting { position: 2, .. }
    ));
    tokio::time::sleep(Duration::from_millis(250)).await;
    // The called visitor's deadline passes (set back by hand: the real window is 15 s).
    let _: () = redis
        .zadd(format!("concert:{{{name}}}:called"), "called", 1)
        .unwrap();
    assert_eq!(line::reap(&cluster).await.unwrap(), (1, 1));
    assert_eq!(pool_in_use(&mut redis, name), (0, 0));
    assert!(matches!(
        line::poll(&cluster, "kept").await.unwrap(),
        Polled::Waiting { position: 1, .. } | Polled::Throttled { position: 1 }
    ));
    // Only the live ticket is still counted against its address.
    let held: i64 = redis
        .hget(
            format!("concert:{{{name}}}:per_address"),
            line::address_key("198.51.100.7".parse().unwrap()),
        )
        .unwrap();
    assert_eq!(held, 1);
    assert_eq!(
        line::arrive(&cluster, "called", 1).await.unwrap(),
        Visit::Unknown
    );
}

/// Two instances sharing one line, in front of `origin`, with `cap`.
async fn pair(
    server: &RedisServer,
    name: &str,
    origin: &Origin,
    cap: &str,
) -> [concert::Running; 2] {
    let mut instances = Vec::new();
    for _ in 0..2 {
        let upstream = origin.url();
        let url = server.url();
        let running = concert_with_env(
            &[
                "-upstream",
                &upstream,
                "-cap",
                cap,
                "-max-queue",
                "0",
                "-cluster",
                &url,
                "-cluster-name",
                name,
            ],
            &[("CONCERT_ADMIT_SECRET", SECRET)],
        )
        .await;
        instances.push(running);
    }
    for running in &instances {
        let cluster = running.app.cluster.clone().expect("a cluster");
        assert!(
            eventually(Duration::from_secs(5), || cluster.line.is_live(&cluster)).await,
            "the shared line never came up"
        );
    }
    let [a, b]: [concert::Running; 2] = instances.try_into().ok().expect("two instances");
    [a, b]
}

/// Takes the only page slot through `running` with a client that keeps retrying (as a
/// visitor would) until the held origin has it.
async fn occupy(
    running: &concert::Running,
    origin: &Origin,
    path: &str,
) -> tokio::task::JoinHandle<()> {
    let target = url(running, path);
    let before = origin.in_flight();
    let holder = tokio::spawn(async move {
        let client = cookie_client();
        for _ in 0..500 {
            let response = client.get(&target).send().await.unwrap();
            if response.status() != StatusCode::TOO_MANY_REQUESTS {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{target} never got in");
    });
    assert!(eventually(Duration::from_secs(10), || origin.in_flight() == before + 1).await);
    holder
}

async fn status(client: &reqwest::Client, running: &concert::Running) -> serde_json::Value {
    json_of(client.get(url(running, "/queue/status"))).await
}

/// Polls `/queue/status` through `running` a little over once a second (past the poll
/// throttle, as the waiting page does), at most `polls` times, until `done` holds for the
/// answer; returns the last answer.
async fn poll_until(
    client: &reqwest::Client,
    running: &concert::Running,
    polls: usize,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut answer = serde_json::Value::Null;
    for _ in 0..polls {
        tokio::time::sleep(Duration::from_millis(1_050)).await;
        answer = status(client, running).await;
        if done(&answer) {
            break;
        }
    }
    answer
}

/// Queues a new cookie-keeping API client at `path` through `running`.
async fn queue(running: &concert::Running, path: &str) -> reqwest::Client {
    let client = cookie_client();
    let response = client.get(url(running, path)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
    assert_eq!(set_cookies(&response, "room_ticket").len(), 1);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visitor_queued_on_a_keeps_the_place_polled_through_b_and_enters_through_b() {
    let server = RedisServer::start();
    let origin = origins::held_origin();
    let [a, b] = pair(&server, "moved", &origin, "1").await;
    let holder = occupy(&a, &origin, "/holder").await;
    let visitor = cookie_client();
    let page = visitor
        .get(url(&a, "/mine"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(set_cookies(&page, "room_ticket").len(), 1);
    // The balancer moves the visitor: B knows the ticket and its place.
    let polled = status(&visitor, &b).await;
    assert_eq!(polled["ready"], false, "{polled}");
    assert_eq!(polled["position"], 1, "{polled}");
    // A newcomer on B lines up behind it.
    let second = queue(&b, "/second").await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(status(&second, &a).await["position"], 2);
    // The waiting page shows the global place too, on the instance the visitor did not join.
    let page = second
        .get(url(&a, "/second"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let body = page.text().await.unwrap();
    assert!(body.contains(r#"id="position">002<"#), "{body}");
    origin.release(1);
    holder.await.unwrap();
    let polled = poll_until(&visitor, &b, 10, |answer| answer["ready"] == true).await;
    assert_eq!(
        polled["ready"], true,
        "the visitor was never called: {polled}"
    );
    let admitted_on_b = b.app.room.stats().admitted_total;
    let entry = tokio::spawn({
        let target = url(&b, "/mine");
        async move { visitor.get(target).send().await.unwrap() }
    });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    assert_eq!(b.app.room.stats().admitted_total, admitted_on_b + 1);
    origin.release(1);
    let response = entry.await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(origin.paths(), vec!["/holder", "/mine"]);
    // The one in line behind is next, wherever it asks.
    assert!(
        eventually(Duration::from_secs(5), || {
            b.app.cluster.as_ref().is_some_and(|c| c.line.called() == 1)
        })
        .await
    );
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visitors_queued_alternately_on_a_and_b_get_in_by_arrival_with_global_positions() {
    let server = RedisServer::start();
    let origin = origins::held_origin();
    let [a, b] = pair(&server, "fifo", &origin, "1").await;
    let instances = [&a, &b];
    let holder = occupy(&a, &origin, "/holder").await;
    let mut clients = Vec::new();
    for i in 0..6 {
        clients.push(queue(instances[i % 2], &format!("/q/{i}")).await);
    }
    // Positions are global: each asked through the other instance.
    for (i, client) in clients.iter().enumerate() {
        let polled = status(client, instances[(i + 1) % 2]).await;
        assert_eq!(polled["position"], i + 1, "visitor {i}: {polled}");
    }
    // Everyone retries through the other instance, the last to arrive first.
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate().rev() {
        let target = url(instances[(i + 1) % 2], &format!("/q/{i}"));
        tasks.push(tokio::spawn(async move {
            for _ in 0..1_500 {
                let response = client.get(&target).send().await.unwrap();
                if response.status() == StatusCode::OK {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("{target} never got in");
        }));
    }
    origin.release(1);
    holder.await.unwrap();
    for served in 1..=6 {
        assert!(
            eventually(Duration::from_secs(10), || origin.hits() == served + 1).await,
            "visitor {served} never reached the origin"
        );
        // Never more than the cap at the origin across both instances.
        assert_eq!(origin.in_flight(), 1);
        origin.release(1);
    }
    for task in tasks {
        task.await.unwrap();
    }
    let order: Vec<String> = origin.paths().into_iter().skip(1).collect();
    assert_eq!(order, vec!["/q/0", "/q/1", "/q/2", "/q/3", "/q/4", "/q/5"]);
    assert_eq!(origin.max_concurrency(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_ticket_expires_and_frees_its_place() {
    let server = RedisServer::start();
    let origin = origins::held_origin();
    let [a, b] = pair(&server, "expiry", &origin, "1").await;
    for running in [&a, &b] {
        // Shorter than any flag allows, so the test does not wait minutes.
        running.app.room.reconfigure(RoomSettings {
            token_ttl: Duration::from_secs(2),
            first_poll_grace: Duration::ZERO,
            ..running.app.room.settings()
        });
    }
    // The lease task passes the new lifetime to the scripts at its next round; at once here.
    for running in [&a, &b] {
        let cluster = running.app.cluster.clone().unwrap();
        cluster.line.set_timing(&running.app.room.settings());
    }
    let (a, b) = (&a, &b);
    let holder = occupy(a, &origin, "/holder").await;
    let _abandoned = queue(a, "/gone").await;
    let kept = queue(b, "/kept").await;
    assert_eq!(status(&kept, a).await["position"], 2);
    // Kept alive by its polls; the abandoned ticket never polls again and runs out.
    let polled = poll_until(&kept, b, 6, |answer| answer["position"] == 1).await;
    assert_eq!(
        polled["position"], 1,
        "the abandoned place was never freed: {polled}"
    );
    origin.release(2);
    holder.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_each_instance_serves_from_its_local_room_and_comes_back() {
    let mut server = RedisServer::start();
    let origin = origins::fast_origin();
    let [a, b] = pair(&server, "outage", &origin, "2").await;
    server.kill();
    for running in [&a, &b] {
        let cluster = running.app.cluster.clone().unwrap();
        assert!(
            eventually(Duration::from_secs(5), || !cluster.line.is_live(&cluster)).await,
            "the line still looks live without Redis"
        );
        let response = plain_client()
            .get(url(running, "/alone"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    server.resume();
    for running in [&a, &b] {
        let cluster = running.app.cluster.clone().unwrap();
        assert!(
            eventually(Duration::from_secs(10), || cluster.line.is_live(&cluster)).await,
            "the shared line never came back"
        );
        let response = plain_client()
            .get(url(running, "/back"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(origin.hits(), 4);
}

/// Admission latency: the time from a page slot freeing (the origin's answer) to the next
/// visitor in line being called (the shared `calls` total rising, watched in Redis every
/// millisecond), with 40 visitors queued across both instances and each retrying every 100 ms
/// through the other one, counted once all of them retry. Reports p50 and p99 of that, and of
/// the time to the next visitor reaching the origin (which adds the visitor's own retry
/// interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_in_line_is_called_soon_after_a_slot_frees() {
    let server = RedisServer::start();
    let marks: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let origin = {
        let marks = Arc::clone(&marks);
        origins::origin_with(move |_, _| {
            let marks = Arc::clone(&marks);
            async move {
                let arrived = Instant::now();
                tokio::time::sleep(Duration::from_millis(30)).await;
                let left = Instant::now();
                marks.lock().unwrap().push((arrived, left));
                origins::text("ok")
            }
        })
    };
    let visitors = 40;
    // Built first: a client costs more to build than a request costs to send.
    let fresh: Vec<reqwest::Client> = (0..visitors).map(|_| cookie_client()).collect();
    let [a, b] = pair(&server, "latency", &origin, "1").await;
    let instances = [&a, &b];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let mut redis = server.connection();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut changes: Vec<Instant> = Vec::new();
            let mut last = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let calls: Option<i64> =
                    redis.hget("concert:{latency}:line_stats", "calls").unwrap();
                let calls = calls.unwrap_or(0);
                for _ in last..calls {
                    changes.push(Instant::now());
                }
                last = last.max(calls);
                std::thread::sleep(Duration::from_millis(1));
            }
            changes
        })
    };
    let mut clients = Vec::new();
    for (i, client) in fresh.into_iter().enumerate() {
        // The first may go straight in; the rest line up.
        let _ = client
            .get(url(instances[i % 2], &format!("/v/{i}")))
            .send()
            .await
            .unwrap();
        clients.push(client);
    }
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let target = url(instances[(i + 1) % 2], &format!("/v/{i}"));
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            while Instant::now() < deadline {
                let response = client.get(&target).send().await.unwrap();
                if response.status() == StatusCode::OK {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("{target} never got in");
        }));
    }
    // Steady state: from here on every visitor in line is retrying.
    let steady = Instant::now();
    for task in tasks {
        task.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls = watcher.join().unwrap();
    assert_eq!(origin.max_concurrency(), 1);
    let mut marks = marks.lock().unwrap().clone();
    marks.sort();
    let quantiles = |mut gaps: Vec<Duration>| {
        gaps.sort();
        let at = |q: f64| gaps[((gaps.len() as f64 * q).ceil() as usize).clamp(1, gaps.len()) - 1];
        (gaps.len(), at(0.5), at(0.99), gaps[gaps.len() - 1])
    };
    // Each answer but the last frees the slot for the next call.
    let to_call: Vec<Duration> = marks[..marks.len() - 1]
        .iter()
        .filter(|(_, left)| *left >= steady)
        .filter_map(|(_, left)| calls.iter().find(|at| *at >= left).map(|at| *at - *left))
        .collect();
    let to_origin: Vec<Duration> = marks
        .windows(2)
        .filter(|pair| pair[0].1 >= steady)
        .map(|pair| pair[1].0.saturating_duration_since(pair[0].1))
        .collect();
    let (count, p50, p99, max) = quantiles(to_call);
    eprintln!(
        "slot freed -> next visitor called, {count} calls: p50 {p50:?}, p99 {p99:?}, max {max:?}"
    );
    let (count, o50, o99, omax) = quantiles(to_origin);
    eprintln!(
        "slot freed -> next visitor at the origin (100 ms retries), {count}: p50 {o50:?}, p99 {o99:?}, max {omax:?}"
    );
    assert!(
        count >= visitors / 2,
        "{count} admissions in the steady state"
    );
    // The call follows the slot's release at once (a nudge, not the next period): on a quiet
    // machine p99 is a few round trips; the bounds leave room for a busy one.
    assert!(p50 < Duration::from_millis(30), "p50 {p50:?}");
    assert!(p99 < Duration::from_millis(250), "p99 {p99:?}");
}

/// The race between the two ways a lease changes: a called visitor coming in raises its
/// instance's lease in Redis (`arrive`) while that instance's lease round is in flight. With
/// cap 1, visitors entering through the shared line on both instances, lease rounds forced
/// every few milliseconds on both and new visitors joining throughout, the origin never sees
/// more than the cap, and at the end the pool counts at least what each gate holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_through_the_line_and_lease_rounds_never_show_the_origin_more_than_the_cap() {
    let server = RedisServer::start();
    let origin = origins::slow_origin(Duration::from_millis(20));
    let cap = 1;
    let [a, b] = pair(&server, "race", &origin, &cap.to_string()).await;
    let instances = [&a, &b];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Rounds as often as the lease task allows (one per MIN_GAP), so many land while an
    // entry's answer is on its way back.
    let nudgers: Vec<_> = instances
        .iter()
        .map(|running| {
            let pool = running.app.room.share_page_slots();
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    pool.nudge();
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            })
        })
        .collect();
    let visitors = 60;
    let fresh: Vec<reqwest::Client> = (0..visitors).map(|_| cookie_client()).collect();
    let mut tasks = Vec::new();
    for (i, client) in fresh.into_iter().enumerate() {
        let first = url(instances[i % 2], &format!("/r/{i}"));
        let retry = url(instances[(i + 1) % 2], &format!("/r/{i}"));
        tasks.push(tokio::spawn(async move {
            // Arrivals spread over a second and a half, so some join while others enter.
            tokio::time::sleep(Duration::from_millis(25 * i as u64)).await;
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut target = &first;
            while Instant::now() < deadline {
                let response = client.get(target).send().await.unwrap();
                if response.status() == StatusCode::OK {
                    return;
                }
                // Retries go through either instance, as a balancer would send them.
                target = if target == &first { &retry } else { &first };
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("{first} never got in");
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for nudger in nudgers {
        nudger.await.unwrap();
    }
    assert!(origin.hits() >= visitors as u64);
    assert!(
        origin.max_concurrency() <= cap,
        "the origin saw {} at once with cap {cap}",
        origin.max_concurrency()
    );
    // Quiet again: the pool keeps the bound and never counts less than a gate holds.
    let mut redis = server.connection();
    let (leased, reserved) = pool_in_use(&mut redis, "race");
    assert!(leased + reserved <= cap, "{leased} + {reserved} > {cap}");
    for running in instances {
        let cluster = running.app.cluster.clone().unwrap();
        let (held, _) = running.app.room.page_slots();
        let lease: Option<i64> = redis.hget("concert:{race}:leases", &cluster.id).unwrap();
        assert!(
            lease.unwrap_or(0) >= held as i64,
            "the gate holds {held}, the pool counts {lease:?}"
        );
    }
}

/// The same race, stepped by hand: an entry lands in Redis after the instance read its gate
/// for a lease round and before the round's script runs. The round changes the lease by its
/// delta, so the entry stays counted.
#[tokio::test]
async fn a_lease_round_keeps_an_entry_made_while_it_was_on_its_way() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    let name = "stepped";
    let cluster = cluster_of(&server, name);
    cluster.line.set_timing(&RoomSettings {
        max_queue: 0,
        first_poll_grace: Duration::ZERO,
        ..RoomSettings::default()
    });
    // The instance holds one idle slot.
    let first = concert::cluster::slots::lease_round(&cluster, 2, 1, 0, 0, 0)
        .await
        .unwrap();
    assert_eq!((first.granted, first.lease), (1, 1));
    line::join(&cluster, "t", None).await.unwrap();
    assert_eq!(line::call(&cluster, 2).await.unwrap().called_now, 1);
    // The instance reads its gate (one slot, none in use) for its next round...
    let (held, in_use) = (1, 0);
    // ...the called visitor comes in meanwhile: the pool counts two for it...
    assert_eq!(
        line::arrive(&cluster, "t", 2).await.unwrap(),
        Visit::Entered
    );
    // ...and the round, sent with the view from before the entry, asks for what it holds.
    let round = concert::cluster::slots::lease_round(&cluster, 2, held, 0, held, in_use)
        .await
        .unwrap();
    let lease: i64 = redis
        .hget(format!("concert:{{{name}}}:leases"), &cluster.id)
        .unwrap();
    assert_eq!(lease, 2, "the entry is still counted: {round:?}");
    assert_eq!(pool_in_use(&mut redis, name), (2, 0));
    // Nothing is free for anyone else.
    line::join(&cluster, "u", None).await.unwrap();
    assert_eq!(line::call(&cluster, 2).await.unwrap().called_now, 0);
}

/// `leave` takes tickets out of the line or the called set in one run, giving a called one's
/// slot back, and each instance's share of the line counts the tickets that joined through it.
#[tokio::test]
async fn leave_gives_up_places_and_calls_and_each_instance_share_is_counted() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    let name = "leave";
    let a = cluster_of(&server, name);
    let b = cluster_of(&server, name);
    for cluster in [&a, &b] {
        cluster.line.set_timing(&RoomSettings {
            max_queue: 0,
            first_poll_grace: Duration::ZERO,
            ..RoomSettings::default()
        });
    }
    let client = Some("198.51.100.9".parse().unwrap());
    line::join(&a, "a1", client).await.unwrap();
    line::join(&a, "a2", None).await.unwrap();
    line::join(&b, "b1", None).await.unwrap();
    let shares = |redis: &mut redis::Connection| -> (Option<i64>, Option<i64>) {
        let key = format!("concert:{{{name}}}:joined_at");
        (
            redis.hget(&key, &a.id).unwrap(),
            redis.hget(&key, &b.id).unwrap(),
        )
    };
    assert_eq!(shares(&mut redis), (Some(2), Some(1)));
    // The head is called: it leaves A's share, and each call reports its own instance's.
    let calls = line::call(&a, 1).await.unwrap();
    assert_eq!((calls.called_now, calls.joined_here), (1, 1));
    assert_eq!(line::call(&b, 1).await.unwrap().joined_here, 1);
    assert_eq!(b.line.joined_here(), 1);
    assert_eq!(pool_in_use(&mut redis, name), (0, 1));
    // One called, one waiting, one never there: one run takes out the first two.
    let gone = ["a1", "b1", "nobody"].map(String::from);
    assert_eq!(line::leave(&a, &gone).await.unwrap(), (1, 1));
    assert_eq!(
        pool_in_use(&mut redis, name),
        (0, 0),
        "the call's slot is back"
    );
    assert_eq!(shares(&mut redis), (Some(1), None));
    let held: Option<i64> = redis
        .hget(
            format!("concert:{{{name}}}:per_address"),
            line::address_key("198.51.100.9".parse().unwrap()),
        )
        .unwrap();
    assert_eq!(held, None, "the address holds no ticket any more");
    assert_eq!(line::arrive(&a, "a1", 1).await.unwrap(), Visit::Unknown);
    assert!(matches!(
        line::poll(&b, "a2").await.unwrap(),
        Polled::Waiting {
            position: 1,
            waiting: 1
        }
    ));
    // Leaving twice changes nothing.
    assert_eq!(line::leave(&a, &gone).await.unwrap(), (0, 0));
    assert_eq!(line::call(&a, 1).await.unwrap().called_now, 1);
    assert_eq!(shares(&mut redis), (None, None));
}

/// Asks for `path` through `running` as the client at `address` (named by `X-Forwarded-For`
/// through the trusted loopback).
async fn visit(
    client: &reqwest::Client,
    running: &concert::Running,
    path: &str,
    address: &str,
) -> reqwest::Response {
    client
        .get(url(running, path))
        .header("x-forwarded-for", address)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_banned_visitor_gives_up_the_shared_place_at_its_next_request() {
    let server = RedisServer::start();
    let origin = origins::held_origin();
    let [a, b] = pair(&server, "banned", &origin, "1").await;
    let holder = occupy(&a, &origin, "/holder").await;
    let (abuser, patient) = ("203.0.113.40", "203.0.113.41");
    let first = cookie_client();
    let queued = visit(&first, &a, "/first", abuser).await;
    assert_eq!(queued.status(), StatusCode::TOO_MANY_REQUESTS);
    let second = cookie_client();
    let queued = visit(&second, &b, "/second", patient).await;
    assert_eq!(queued.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status(&second, &a).await["position"], 2);
    let cluster = a.app.cluster.clone().unwrap();
    assert!(
        eventually(Duration::from_secs(2), || cluster.line.joined_here() == 1).await,
        "A counts the one visitor who joined through it"
    );
    // Banned on A; the ban reaches B through Redis, and the abuser's next request, on B,
    // is refused there and takes its place out of the line.
    assert!(a.app.abuse.ban_now(abuser.parse().unwrap()).is_some());
    let b_abuse = &b.app.abuse;
    assert!(
        eventually(Duration::from_secs(2), || b_abuse
            .banned(abuser.parse().unwrap())
            .is_some())
        .await
    );
    let refused = visit(&first, &b, "/first", abuser).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let notice = refused.text().await.unwrap();
    assert!(notice.contains("blocked"), "{notice}");
    let polled = poll_until(&second, &b, 10, |answer| answer["position"] == 1).await;
    assert_eq!(
        polled["position"], 1,
        "the banned visitor's place was kept: {polled}"
    );
    assert!(
        eventually(Duration::from_secs(2), || cluster.line.joined_here() == 0).await,
        "A's share of the line dropped with the place"
    );
    // When the slot frees, the patient visitor is called, not the banned one.
    origin.release(1);
    holder.await.unwrap();
    let polled = poll_until(&second, &a, 10, |answer| answer["ready"] == true).await;
    assert_eq!(
        polled["ready"], true,
        "the next visitor was never called: {polled}"
    );
}

/// An instance whose `arrive` got no answer takes the entry back: if the script ran, the slot
/// the pool added to its lease goes back; a ticket that never entered, or entered through
/// another instance, changes nothing, and taking one back twice changes nothing either.
#[tokio::test]
async fn an_entry_whose_answer_was_lost_gives_its_slot_back() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    let name = "undo";
    let a = cluster_of(&server, name);
    let b = cluster_of(&server, name);
    for cluster in [&a, &b] {
        concert::cluster::slots::lease_round(cluster, 3, 0, 0, 0, 0)
            .await
            .unwrap();
        cluster.line.set_timing(&RoomSettings {
            max_queue: 0,
            first_poll_grace: Duration::ZERO,
            ..RoomSettings::default()
        });
    }
    for token in ["t1", "t2", "t3"] {
        line::join(&a, token, None).await.unwrap();
    }
    assert_eq!(line::call(&a, 3).await.unwrap().called_now, 3);
    assert_eq!(line::arrive(&a, "t1", 3).await.unwrap(), Visit::Entered);
    assert_eq!(line::arrive(&b, "t2", 3).await.unwrap(), Visit::Entered);
    assert_eq!(pool_in_use(&mut redis, name), (2, 1));
    let tokens = ["t1", "t2", "t3"].map(String::from);
    assert_eq!(
        line::undo(&a, &tokens).await.unwrap(),
        1,
        "only A's own entry"
    );
    let lease_of = |redis: &mut redis::Connection, id: &str| -> i64 {
        redis
            .hget(format!("concert:{{{name}}}:leases"), id)
            .unwrap()
    };
    assert_eq!(lease_of(&mut redis, &a.id), 0);
    assert_eq!(lease_of(&mut redis, &b.id), 1);
    assert_eq!(line::undo(&a, &tokens).await.unwrap(), 0, "taken back once");
    assert_eq!(pool_in_use(&mut redis, name), (1, 1));
    // The slot is free again: the pool lends it to whoever asks next.
    assert_eq!(line::arrive(&a, "t3", 3).await.unwrap(), Visit::Entered);
    assert_eq!(pool_in_use(&mut redis, name), (2, 0));
}
