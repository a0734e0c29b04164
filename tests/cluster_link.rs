//! The link to Redis: it reaches a real redis-server (with a password from the environment's
//! setting or from the URL), bounds a dead server's cost, and comes back by itself when the
//! server returns.

#[path = "support/redis.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use concert::cluster::{ClusterOptions, Link, LinkError};
use redis_server::RedisServer;

fn options(url: String, password: Option<&str>) -> ClusterOptions {
    ClusterOptions {
        url,
        name: "test".into(),
        password: password.map(str::to_owned),
        fallback_share: 0.0,
    }
}

async fn ping(link: &Link) -> Result<String, LinkError> {
    link.run(|mut connection| async move {
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
    })
    .await
}

#[tokio::test]
async fn a_link_reaches_redis_and_reports_its_health() {
    let server = RedisServer::start();
    let link = Link::open(&options(server.url(), None)).unwrap();
    assert_eq!(ping(&link).await.unwrap(), "PONG");
    assert!(link.health().is_up());
    assert_eq!(link.health().ok_total(), 1);
    assert!(link.health().latency() > Duration::ZERO);
}

#[tokio::test]
async fn the_password_comes_from_the_setting_or_the_url() {
    let server = RedisServer::start_with_password("s3cret");
    let from_setting = Link::open(&options(server.url(), Some("s3cret"))).unwrap();
    assert_eq!(ping(&from_setting).await.unwrap(), "PONG");
    let in_url = format!("redis://:s3cret@127.0.0.1:{}/0", server.port);
    let from_url = Link::open(&options(in_url, None)).unwrap();
    assert_eq!(ping(&from_url).await.unwrap(), "PONG");
    let without = Link::open(&options(server.url(), None)).unwrap();
    assert!(ping(&without).await.is_err());
    assert!(!without.health().is_up());
}

#[tokio::test]
async fn a_dead_server_costs_a_bounded_wait_and_the_link_comes_back() {
    let mut server = RedisServer::start();
    let link = Link::open(&options(server.url(), None)).unwrap();
    assert!(ping(&link).await.is_ok());
    server.kill();
    let started = Instant::now();
    assert!(ping(&link).await.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!link.health().is_up());
    server.resume();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if ping(&link).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the link never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(link.health().is_up());
    assert!(link.health().errors_total() >= 1);
}
