//! The portal's cluster view (`GET /api/cluster`, the Monitor's Cluster card) on a real
//! redis-server with two in-process instances: each lists both with their leases and marks
//! itself, keeps the last list and says `local` while Redis is down, lists at most 64, and
//! without `-cluster` there is neither the route nor the card.

#[path = "support/redis.rs"]
mod redis_server;
mod support;

use std::time::Duration;

use redis_server::RedisServer;
use reqwest::StatusCode;
use serde_json::Value;
use support::origins;
use support::{concert_with_env, plain_client};

const PASS: &str = "a portal pass for the cluster view";
const CAP: u64 = 10;

struct Instance {
    running: concert::Running,
    portal: String,
    cookie: String,
}

/// An instance on `cluster` (or alone with `None`) with its portal, signed in.
async fn instance(upstream: &str, cluster: Option<&str>) -> Instance {
    let cap = CAP.to_string();
    let mut argv = vec![
        "-upstream",
        upstream,
        "-portal-listen",
        "127.0.0.1:0",
        "-cap",
        &cap,
    ];
    if let Some(url) = cluster {
        argv.extend_from_slice(&["-cluster", url, "-cluster-name", "portalview"]);
    }
    let running = concert_with_env(&argv, &[("CONCERT_PORTAL_PASS", PASS)]).await;
    let portal = format!(
        "http://{}",
        running.portal_addr.expect("the portal listens")
    );
    let answer = support::portal_sign_in(&plain_client(), &portal, PASS).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    let cookie = support::cookie_value(&answer, "concert_portal").expect("a session cookie");
    Instance {
        running,
        portal,
        cookie,
    }
}

impl Instance {
    fn id(&self) -> String {
        self.running
            .app
            .cluster
            .as_ref()
            .expect("-cluster is set")
            .id
            .clone()
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        plain_client()
            .get(format!("{}{path}", self.portal))
            .header("Cookie", format!("concert_portal={}", self.cookie))
            .send()
            .await
            .unwrap()
    }

    /// The cluster view; it must never be anything but a 200.
    async fn view(&self) -> Value {
        let answer = self.get("/api/cluster").await;
        assert_eq!(answer.status(), StatusCode::OK);
        answer.json().await.unwrap()
    }

    /// Polls the view (every 100 ms, ten seconds at most) until `check` holds; the last view.
    async fn view_until(&self, check: impl Fn(&Value) -> bool) -> Value {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let view = self.view().await;
            if check(&view) {
                return view;
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "the view never got there: {view:#}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn members(view: &Value) -> &Vec<Value> {
    view["members"].as_array().expect("a member list")
}

fn member<'a>(view: &'a Value, id: &str) -> &'a Value {
    members(view)
        .iter()
        .find(|member| member["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {view:#}"))
}

/// Both instances listed, read just now, sharing.
fn both_listed(view: &Value) -> bool {
    view["mode"] == "shared" && view["listing"]["state"] == "fresh" && members(view).len() == 2
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_instance_lists_both_with_their_leases_and_marks_itself() {
    let redis = RedisServer::start();
    let origin = origins::held_origin();
    let a = instance(&origin.url(), Some(&redis.url())).await;
    let b = instance(&origin.url(), Some(&redis.url())).await;

    // The view wants a session like every other part of the API.
    let anonymous = plain_client()
        .get(format!("{}/api/cluster", a.portal))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    let view = a.view_until(both_listed).await;
    // This instance's own report...
    assert_eq!(view["instance"], a.id());
    assert_eq!(view["name"], "portalview");
    assert_eq!(view["server"], redis.url());
    assert_eq!(view["cap"], CAP);
    assert_eq!(view["redis"]["up"], true);
    assert!(
        view["redis"]["latency_ms"].as_f64().unwrap() > 0.0,
        "{view}"
    );
    assert_eq!(view["members_total"], 2);
    assert!(view["line"].is_u64() && view["reserved"].is_u64(), "{view}");
    // ...and both instances as Redis holds them.
    let now = unix_ms();
    let mut held = 0;
    for (instance, this) in [(&a, true), (&b, false)] {
        let row = member(&view, &instance.id());
        assert_eq!(row["this"], this, "{row}");
        assert_eq!(row["address"], instance.running.addr.to_string(), "{row}");
        let started = row["started_ms"].as_u64().unwrap();
        assert!(started <= now && now - started < 60_000, "{row}");
        assert!(row["seen_ago_ms"].as_u64().unwrap() < 3_000, "{row}");
        let lease = row["lease"].as_u64().unwrap();
        assert!(lease >= row["in_use"].as_u64().unwrap(), "{row}");
        held += lease;
    }
    assert!(
        held <= CAP,
        "the leases add up to more than the cap: {view:#}"
    );
    assert_eq!(
        members(&view)
            .iter()
            .filter(|member| member["this"] == true)
            .count(),
        1
    );

    // Seen from the other side: the same two, the other one marked.
    let from_b = b.view_until(both_listed).await;
    assert_eq!(member(&from_b, &b.id())["this"], true);
    assert_eq!(member(&from_b, &a.id())["this"], false);

    // A page the origin holds on B is a slot in use there, in both views.
    let holder = support::hold_the_only_slot(&b.running, &origin, "/held").await;
    let busy = a
        .view_until(|view| both_listed(view) && member(view, &b.id())["in_use"] == 1)
        .await;
    assert!(member(&busy, &b.id())["lease"].as_u64().unwrap() >= 1);
    let own = b.view_until(|view| view["in_use"] == 1).await;
    assert!(own["lease"].as_u64().unwrap() >= 1, "{own}");
    origin.release(1);
    holder.await.unwrap();
    a.view_until(|view| both_listed(view) && member(view, &b.id())["in_use"] == 0)
        .await;

    // Each row carries its instance's share of the shared line, as the line script counts it
    // (set here by hand: filling a cap of ten to queue visitors is another test's work).
    let mut connection = redis.connection();
    redis::cmd("HSET")
        .arg("concert:{portalview}:joined_at")
        .arg(b.id())
        .arg(3)
        .query::<()>(&mut connection)
        .unwrap();
    let shares = a
        .view_until(|view| both_listed(view) && member(view, &b.id())["waiting"] == 3)
        .await;
    assert_eq!(member(&shares, &a.id())["waiting"], 0, "{shares}");

    // The Monitor page carries the card.
    let page = a.get("/").await.text().await.unwrap();
    assert!(page.contains(r#"id="monitor-cluster""#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_view_says_local_and_keeps_the_last_list() {
    let mut redis = RedisServer::start();
    let origin = origins::fast_origin();
    let a = instance(&origin.url(), Some(&redis.url())).await;
    let b = instance(&origin.url(), Some(&redis.url())).await;
    // Both listed, and A's own lease rounds have seen B too (its fallback share depends on it).
    a.view_until(|view| both_listed(view) && view["instances"] == 2)
        .await;

    redis.kill();
    // Never an error: the local report, and the instances as last read.
    let down = a
        .view_until(|view| view["mode"] == "local" && view["listing"]["state"] == "last_known")
        .await;
    assert_eq!(down["redis"]["up"], false);
    assert!(down["redis"]["errors_total"].as_u64().unwrap() >= 1);
    assert!(down["listing"]["error"].is_string(), "{down}");
    assert_eq!(members(&down).len(), 2, "{down:#}");
    assert_eq!(member(&down, &a.id())["this"], true);
    // Once a membership TTL has passed it serves on its whole fallback share: half the cap,
    // with two instances last seen.
    a.view_until(|view| view["mode"] == "local" && view["lease"] == CAP / 2)
        .await;
    // The ages of the last list go on growing.
    let first = member(&down, &b.id())["seen_ago_ms"].as_u64().unwrap();
    let later = a
        .view_until(|view| member(view, &b.id())["seen_ago_ms"].as_u64().unwrap() > first)
        .await;
    assert_eq!(later["listing"]["state"], "last_known");

    redis.resume();
    let back = a.view_until(both_listed).await;
    assert_eq!(back["redis"]["up"], true);
    assert_eq!(back["listing"]["error"], Value::Null);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_sixty_four_instances_are_listed_and_broken_reports_are_left_blank() {
    let redis = RedisServer::start();
    let origin = origins::fast_origin();
    let a = instance(&origin.url(), Some(&redis.url())).await;
    a.view_until(|view| members(view).len() == 1 && view["mode"] == "shared")
        .await;

    // Seventy more members whose memberships run for two minutes: one with a report that is
    // not numbers, the rest with none at all.
    let mut connection = redis.connection();
    let (seconds, _): (u64, u64) = redis::cmd("TIME").query(&mut connection).unwrap();
    let until = (seconds + 120) * 1000;
    let instances = "concert:{portalview}:instances";
    for n in 0..70 {
        let _: () = redis::cmd("ZADD")
            .arg(instances)
            .arg(until)
            .arg(format!("ghost-{n:02}"))
            .query(&mut connection)
            .unwrap();
    }
    let _: () = redis::cmd("HSET")
        .arg("concert:{portalview}:instance:ghost-00")
        .arg("lease")
        .arg("lots")
        .arg("seen")
        .arg("yesterday")
        .arg("address")
        .arg("<b>x</b>")
        .query(&mut connection)
        .unwrap();

    let view = a
        .view_until(|view| view["members_total"] == 71 && view["listing"]["state"] == "fresh")
        .await;
    assert_eq!(members(&view).len(), 64, "{view:#}");
    // The soonest to expire come first: this instance is among those listed.
    assert_eq!(member(&view, &a.id())["this"], true);
    let ghost = member(&view, "ghost-00");
    assert_eq!(ghost["lease"], Value::Null);
    assert_eq!(ghost["seen_ago_ms"], Value::Null);
    assert_eq!(
        ghost["address"], "<b>x</b>",
        "kept as text; the page never reads it as HTML"
    );
    assert_eq!(member(&view, "ghost-01")["started_ms"], Value::Null);
}

#[tokio::test]
async fn without_cluster_there_is_no_view_and_no_card() {
    let origin = origins::fast_origin();
    let alone = instance(&origin.url(), None).await;
    let answer = alone.get("/api/cluster").await;
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"], "this instance runs without -cluster");
    let page = alone.get("/").await.text().await.unwrap();
    assert!(page.contains(r#"id="tab-monitor""#));
    assert!(!page.contains("monitor-cluster"));
}
