//! End to end: the `concert_admit` pass on gated pages (issue, slide, never on queued answers,
//! secret rotation) and the priority feature (origin grants, the ranked lane, forms).

mod support;

use std::sync::Arc;
use std::time::Duration;

use concert::admission::pass::{PassId, PassSigner, PassStatus, unix_now};
use http::HeaderValue;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, COOKIE, RETRY_AFTER};
use support::origins::{self, Origin, full};
use support::*;
use tokio::sync::Semaphore;

/// An origin that parks `/hold…` requests until the test adds permits to the returned gate,
/// answers the rest at once with `ok`, echoes the request's Cookie header in `x-seen-cookie`,
/// and sends `Concert-Priority` for a few paths.
fn ranking_origin() -> (Origin, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let parked = Arc::clone(&gate);
    let origin = origins::origin_with(move |req, _| {
        let gate = Arc::clone(&parked);
        async move {
            let path = req.uri().path().to_string();
            if path.starts_with("/hold")
                && let Ok(permit) = gate.acquire().await
            {
                permit.forget();
            }
            let mut response = http::Response::new(full("ok"));
            let headers = response.headers_mut();
            if let Some(cookie) = req.headers().get(http::header::COOKIE) {
                headers.insert("x-seen-cookie", cookie.clone());
            }
            let grant = match path.as_str() {
                "/checkout" => Some("checkout"),
                "/logout" => Some("guest"),
                "/junk" => Some("emperor"),
                _ => None,
            };
            if let Some(grant) = grant {
                headers.insert("concert-priority", HeaderValue::from_static(grant));
            }
            response
        }
    });
    (origin, gate)
}

fn cookie_value<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    set_cookies(response, name)
        .first()
        .and_then(|line| line.split(';').next())
        .and_then(|pair| pair.split_once('='))
        .map(|(_, value)| value)
}

fn pass_id(n: u8) -> PassId {
    [n; 16]
}

fn mint(concert: &concert::Running, id: &PassId, expiry: u64) -> String {
    concert.app.pass.mint(id, expiry)
}

async fn stat(concert: &concert::Running, key: &str) -> u64 {
    let stats = room_stats(concert).await;
    stats[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {stats}"))
}

/// Holds the only page slot with a parked `/hold` request until the returned task is released.
async fn fill_room(
    concert: &concert::Running,
    origin: &Origin,
) -> tokio::task::JoinHandle<reqwest::Response> {
    let parked = plain_client().get(url(concert, "/hold"));
    let task = tokio::spawn(async move { parked.send().await.unwrap() });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    task
}

#[tokio::test]
async fn admitted_page_sets_the_pass_cookie_with_the_specified_attributes() {
    let (origin, _) = ranking_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let response = plain_client()
        .get(url(&concert, "/page"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let lines = set_cookies(&response, "concert_admit");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = lines[0];
    for attribute in ["; Path=/", "; Max-Age=600", "; HttpOnly", "; SameSite=Lax"] {
        assert!(line.contains(attribute), "{line}");
    }
    assert!(!line.contains("Secure"), "{line}");
    let value = cookie_value(&response, "concert_admit").unwrap();
    assert_eq!(value.len(), 59);
    assert!(matches!(
        concert.app.pass.verify(value, unix_now()),
        PassStatus::Valid(_)
    ));
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_fresh_pass_is_not_reissued_and_an_old_one_slides_with_the_same_id() {
    let (origin, _) = ranking_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let now = unix_now();
    let fresh = mint(&concert, &pass_id(1), now + 600);
    let response = plain_client()
        .get(url(&concert, "/page"))
        .header(COOKIE, format!("concert_admit={fresh}"))
        .send()
        .await
        .unwrap();
    assert!(set_cookies(&response, "concert_admit").is_empty());

    // Minted three quarters of the TTL ago: 150 s left of 600.
    let old = mint(&concert, &pass_id(2), now + 150);
    let response = plain_client()
        .get(url(&concert, "/page"))
        .header(COOKIE, format!("concert_admit={old}"))
        .send()
        .await
        .unwrap();
    let renewed = cookie_value(&response, "concert_admit").expect("re-issued");
    let PassStatus::Valid(pass) = concert.app.pass.verify(renewed, unix_now()) else {
        panic!("renewed pass must verify");
    };
    assert_eq!(pass.id, pass_id(2));
    assert!(pass.expiry >= now + 600);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_origin_cookie_with_a_utf8_value_does_not_hide_the_pass() {
    let (origin, _) = ranking_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let fresh = mint(&concert, &pass_id(3), unix_now() + 600);
    // Browsers send the bytes of a cookie set with a UTF-8 value as they are.
    let line = format!("lang=Español; concert_admit={fresh}; city=Zürich");
    let response = plain_client()
        .get(url(&concert, "/page"))
        .header(COOKIE, HeaderValue::from_bytes(line.as_bytes()).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        set_cookies(&response, "concert_admit").is_empty(),
        "the pass was read, so it is not reissued"
    );
    let seen = response.headers()["x-seen-cookie"].as_bytes();
    assert_eq!(
        seen,
        "lang=Español; city=Zürich".as_bytes(),
        "only the pass is taken out"
    );
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn queued_answers_never_carry_a_pass() {
    let (origin, gate) = ranking_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "1"]).await;
    let parked = fill_room(&concert, &origin).await;
    let html = plain_client()
        .get(url(&concert, "/page"))
        .header(ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(html.status(), StatusCode::OK);
    assert!(!set_cookies(&html, "room_ticket").is_empty());
    assert!(set_cookies(&html, "concert_admit").is_empty());
    let api = plain_client()
        .get(url(&concert, "/api"))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(set_cookies(&api, "concert_admit").is_empty());
    gate.add_permits(1);
    let parked = parked.await.unwrap();
    assert!(!set_cookies(&parked, "concert_admit").is_empty());
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_runtime_admit_ttl_change_applies_to_the_next_pass() {
    let (origin, _) = ranking_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    concert
        .app
        .apply_change(
            serde_json::json!({"admit_ttl": "2m"}).as_object().unwrap(),
            &[],
        )
        .unwrap();
    let response = plain_client()
        .get(url(&concert, "/page"))
        .send()
        .await
        .unwrap();
    let line = set_cookies(&response, "concert_admit")[0];
    assert!(line.contains("; Max-Age=120"), "{line}");
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_forged_pass_on_a_page_is_struck_and_replaced_but_a_stale_one_is_not_struck() {
    let (origin, _) = ranking_origin();
    // Loopback is trusted (and so exempt from strikes) by default.
    let concert = concert(&["-upstream", &origin.url(), "-trusted-proxies", "10.0.0.1"]).await;
    let response = plain_client()
        .get(url(&concert, "/page"))
        .header(COOKIE, "concert_admit=forged")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(cookie_value(&response, "concert_admit").is_some());
    assert_eq!(stat(&concert, "abuse_strikes_total").await, 1);

    let stale = PassSigner::new(&[b'z'; 32], None).mint(&pass_id(3), unix_now() + 600);
    let response = plain_client()
        .get(url(&concert, "/page"))
        .header(COOKIE, format!("concert_admit={stale}"))
        .send()
        .await
        .unwrap();
    let renewed = cookie_value(&response, "concert_admit").unwrap();
    assert_ne!(renewed, stale);
    assert_eq!(stat(&concert, "abuse_strikes_total").await, 1);
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_rotated_secret_keeps_old_passes_valid_and_moves_them_to_the_new_key() {
    let origin = origins::fast_origin();
    let old_secret = "o".repeat(32);
    let new_secret = "n".repeat(32);
    let concert = concert_with_env(
        &["-upstream", &origin.url(), "-assets", "/static/*"],
        &[
            ("CONCERT_ADMIT_SECRET", &new_secret),
            ("CONCERT_ADMIT_SECRET_PREVIOUS", &old_secret),
        ],
    )
    .await;
    let old_signer = PassSigner::new(old_secret.as_bytes(), None);
    // Past half-life, so this request slides it.
    let old_pass = old_signer.mint(&pass_id(4), unix_now() + 100);
    let response = plain_client()
        .get(url(&concert, "/static/app.css"))
        .header(COOKIE, format!("concert_admit={old_pass}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let moved = cookie_value(&response, "concert_admit").expect("slid to the new key");
    let new_only = PassSigner::new(new_secret.as_bytes(), None);
    let PassStatus::Valid(pass) = new_only.verify(moved, unix_now()) else {
        panic!("the slid pass must verify under the new secret alone");
    };
    assert_eq!(pass.id, pass_id(4));
    assert_eq!(stat(&concert, "abuse_strikes_total").await, 0);
    concert.shutdown().await.unwrap();
}

#[test]
fn a_short_previous_secret_is_refused() {
    let env: std::collections::HashMap<String, String> = [(
        "CONCERT_ADMIT_SECRET_PREVIOUS".to_string(),
        "short".to_string(),
    )]
    .into();
    let args = vec!["-data-dir=".to_string()];
    let Ok(concert::config::Loaded::Run(mut config)) = concert::config::load(&args, &env) else {
        panic!("config should load");
    };
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("CONCERT_ADMIT_SECRET_PREVIOUS"), "{error}");
}

#[tokio::test]
async fn origin_priority_becomes_a_grant_bound_to_that_pass_and_is_never_forwarded() {
    let (origin, _) = ranking_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let now = unix_now();
    let pass = mint(&concert, &pass_id(5), now + 600);
    let response = plain_client()
        .get(url(&concert, "/checkout"))
        .header(COOKIE, format!("concert_admit={pass}"))
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("concert-priority").is_none());
    let line = set_cookies(&response, "concert_priority")[0];
    assert!(
        line.contains("; Max-Age=1800") && line.contains("; HttpOnly"),
        "{line}"
    );
    let grant = cookie_value(&response, "concert_priority")
        .unwrap()
        .to_string();
    assert_eq!(
        concert.app.pass.verify_grant(&grant, &pass_id(5), now + 1),
        Some(5)
    );
    assert_eq!(
        concert.app.pass.verify_grant(&grant, &pass_id(6), now + 1),
        None
    );

    // The grant goes back with the next request but never reaches the origin.
    let response = plain_client()
        .get(url(&concert, "/logout"))
        .header(
            COOKIE,
            format!("concert_admit={pass}; concert_priority={grant}; theme=dark"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-seen-cookie"], "theme=dark");
    let cleared = set_cookies(&response, "concert_priority")[0];
    assert!(cleared.starts_with("concert_priority=;") && cleared.contains("Max-Age=0"));

    let response = plain_client()
        .get(url(&concert, "/junk"))
        .header(COOKIE, format!("concert_admit={pass}"))
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("concert-priority").is_none());
    assert!(set_cookies(&response, "concert_priority").is_empty());
    assert_eq!(stat(&concert, "priority_grants_rejected_total").await, 1);
    assert_eq!(stat(&concert, "priority_grants_total").await, 1);
    assert_eq!(stat(&concert, "priority_grants_cleared_total").await, 1);
    concert.shutdown().await.unwrap();
}

fn ranked_cookie(concert: &concert::Running, id: u8, rank: u8) -> String {
    let expiry = unix_now() + 600;
    let pass = mint(concert, &pass_id(id), expiry);
    let grant = concert.app.pass.sign_grant(&pass_id(id), rank, expiry);
    format!("concert_admit={pass}; concert_priority={grant}")
}

#[tokio::test]
async fn a_full_room_lets_customers_and_above_through_the_lane_only() {
    let (origin, gate) = ranking_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "1"]).await;
    let parked = fill_room(&concert, &origin).await;
    let client = plain_client();
    let get = |cookie: String| client.get(url(&concert, "/page")).header(COOKIE, cookie);

    let pass_only = format!(
        "concert_admit={}",
        mint(&concert, &pass_id(7), unix_now() + 600)
    );
    assert_eq!(
        get(pass_only).send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let prospect = ranked_cookie(&concert, 8, 2);
    assert_eq!(
        get(prospect).send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let customer = ranked_cookie(&concert, 9, 3);
    let response = get(customer).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "ok");
    // A staff grant presented with a different pass is worth nothing.
    let expiry = unix_now() + 600;
    let stolen = format!(
        "concert_admit={}; concert_priority={}",
        mint(&concert, &pass_id(10), expiry),
        concert.app.pass.sign_grant(&pass_id(11), 6, expiry)
    );
    assert_eq!(
        get(stolen).send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(stat(&concert, "priority_lane_served_total").await, 1);
    assert_eq!(stat(&concert, "priority_lane_in_flight").await, 0);
    gate.add_permits(1);
    parked.await.unwrap();
    concert.shutdown().await.unwrap();
}

/// Concert with one page slot and a priority lane of `lane_cap` slots that waits 50 ms.
async fn one_slot_with_lane(origin: &Origin, lane_cap: &str) -> concert::Running {
    concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "1",
        "-priority-cap",
        lane_cap,
        "-priority-wait",
        "50ms",
    ])
    .await
}

#[tokio::test]
async fn forms_use_the_lane_and_are_refused_rather_than_queued_when_it_is_full() {
    let (origin, gate) = ranking_origin();
    let concert = one_slot_with_lane(&origin, "1").await;
    let parked = fill_room(&concert, &origin).await;
    let client = plain_client();
    let with_pass = |id| {
        format!(
            "concert_admit={}",
            mint(&concert, &pass_id(id), unix_now() + 600)
        )
    };
    let response = client
        .post(url(&concert, "/form"))
        .header(COOKIE, with_pass(12))
        .body("a=1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = client
        .post(url(&concert, "/form"))
        .body("a=1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);

    // Hold the lane's only slot with a parked form, then send another.
    let lane_holder = client
        .post(url(&concert, "/hold-form"))
        .header(COOKIE, with_pass(13));
    let lane_task = tokio::spawn(async move { lane_holder.send().await.unwrap() });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 2).await);
    let response = client
        .post(url(&concert, "/form"))
        .header(COOKIE, with_pass(14))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()[RETRY_AFTER], "5");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "busy");
    assert_eq!(body["submitted"], false);
    assert_eq!(body["retry_after_seconds"], 5);
    assert_eq!(stat(&concert, "priority_forms_refused_total").await, 1);
    assert_eq!(stat(&concert, "priority_forms_total").await, 3);
    gate.add_permits(2);
    parked.await.unwrap();
    assert_eq!(lane_task.await.unwrap().status(), StatusCode::OK);
    concert.shutdown().await.unwrap();
}

/// The attack: with a pass, any method but GET/HEAD (a made-up `FOO`, OPTIONS, no body at all)
/// skipped a busy line, so one pass could use the lane for every request. Only standard methods
/// that change something count as forms, and each pass has a form budget per minute.
#[tokio::test]
async fn only_real_form_methods_skip_the_line_and_each_pass_has_a_budget() {
    let (origin, gate) = ranking_origin();
    let concert = one_slot_with_lane(&origin, "4").await;
    let parked = fill_room(&concert, &origin).await;
    let client = plain_client();
    let pass = format!(
        "concert_admit={}",
        mint(&concert, &pass_id(21), unix_now() + 600)
    );
    let send = |method: &str, pass: &str| {
        client
            .request(method.parse().unwrap(), url(&concert, "/form"))
            .header(COOKIE, pass.to_string())
            .header(ACCEPT, "application/json")
            .send()
    };
    for method in ["FOO", "OPTIONS", "TRACE"] {
        let response = send(method, &pass).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{method} must wait in line"
        );
    }
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        assert_eq!(send(method, &pass).await.unwrap().status(), StatusCode::OK);
    }
    // Four forms so far; the budget is twenty a minute for one pass.
    for _ in 4..20 {
        assert_eq!(send("POST", &pass).await.unwrap().status(), StatusCode::OK);
    }
    let over = send("POST", &pass).await.unwrap();
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        set_cookies(&over, "room_ticket").len() == 1,
        "queued like anyone"
    );
    assert_eq!(stat(&concert, "priority_forms_over_budget_total").await, 1);
    // Another pass has its own budget.
    let other = format!(
        "concert_admit={}",
        mint(&concert, &pass_id(22), unix_now() + 600)
    );
    assert_eq!(send("POST", &other).await.unwrap().status(), StatusCode::OK);
    gate.add_permits(1);
    parked.await.unwrap();
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn queued_ranked_visitors_keep_arrival_order_and_record_their_rank() {
    let (origin, gate) = ranking_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "1",
        "-priority-lane-rank",
        "7",
    ])
    .await;
    let parked = fill_room(&concert, &origin).await;
    for (id, rank) in [(20, 0), (21, 2), (22, 1)] {
        let response = plain_client()
            .get(url(&concert, "/page"))
            .header(COOKIE, ranked_cookie(&concert, id, rank))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    let ranks: Vec<u8> = concert
        .app
        .room
        .line_front(10)
        .iter()
        .map(|entry| entry.info.rank)
        .collect();
    assert_eq!(ranks, vec![0, 2, 1]);
    gate.add_permits(1);
    parked.await.unwrap();
    concert.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_forged_pass_on_a_page_weighs_five_strikes() {
    let (origin, _) = ranking_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-abuse-strikes",
        "5",
        "-trusted-proxies",
        "10.0.0.1",
    ])
    .await;
    let first = plain_client()
        .get(url(&concert, "/page"))
        .header(COOKIE, "concert_admit=forged")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let next = plain_client()
        .get(url(&concert, "/page"))
        .send()
        .await
        .unwrap();
    assert_eq!(next.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(next.text().await.unwrap().contains("temporarily blocked"));
    concert.shutdown().await.unwrap();
}
