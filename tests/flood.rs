//! A bounded flood against a slow origin: every client gets an answer, none is reset or left
//! hanging, and the origin never sees more than its cap.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::ACCEPT;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_at_once_are_all_answered_and_the_origin_stays_at_eight() {
    let origin = origins::slow_origin(Duration::from_millis(50));
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "8",
        "-max-queue",
        "0",
        "-access-log=false",
    ])
    .await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let clients = 1000;
    let mut tasks = Vec::with_capacity(clients);
    for i in 0..clients {
        let client = client.clone();
        let target = url(&concert, &format!("/flood/{i}"));
        tasks.push(tokio::spawn(async move {
            let mut request = client.get(target);
            if i % 2 == 0 {
                request = request.header(ACCEPT, HTML_ACCEPT);
            }
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response.text().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((i, status, body))
        }));
    }
    let (mut proxied, mut pages, mut api_queued) = (0, 0, 0);
    for task in tasks {
        let (i, status, body) = task.await.unwrap().expect("answered, not reset");
        match (status, i % 2 == 0) {
            (StatusCode::OK, _) if body == "ok" => proxied += 1,
            (StatusCode::OK, true) => {
                assert!(body.contains("waiting.js"), "a waiting page");
                pages += 1;
            }
            (StatusCode::TOO_MANY_REQUESTS, false) => {
                assert!(body.contains("\"queued\":true"));
                api_queued += 1;
            }
            other => panic!("unexpected answer {other:?}: {body}"),
        }
    }
    assert_eq!(proxied + pages + api_queued, clients);
    assert!(proxied >= 8, "the free slots were used: {proxied}");
    assert!(
        origin.max_concurrency() <= 8,
        "origin saw {} at once",
        origin.max_concurrency()
    );
    assert_eq!(origin.hits() as usize, proxied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_patient_visitors_all_get_in_without_the_origin_passing_its_cap() {
    let origin = origins::slow_origin(Duration::from_millis(50));
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "8",
        "-max-queue",
        "0",
        "-access-log=false",
    ])
    .await;
    let visitors = 200;
    let mut tasks = Vec::with_capacity(visitors);
    for i in 0..visitors {
        let target = url(&concert, &format!("/patient/{i}"));
        tasks.push(tokio::spawn(async move {
            let client = cookie_client();
            // Bounded: at most 60 s of retries, as the waiting page's reloads would do.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while tokio::time::Instant::now() < deadline {
                let response = client.get(&target).send().await.expect("answered");
                match response.status() {
                    StatusCode::OK => return true,
                    StatusCode::TOO_MANY_REQUESTS => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => panic!("unexpected {other}"),
                }
            }
            false
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap(), "admitted within the bound");
    }
    assert_eq!(origin.hits() as usize, visitors);
    assert!(
        origin.max_concurrency() <= 8,
        "origin saw {}",
        origin.max_concurrency()
    );
    assert_eq!(concert.app.room.stats().occupancy, 0);
    assert_eq!(concert.app.room.stats().live_queue_depth, 0);
}
