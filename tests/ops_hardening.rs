//! Operator endpoints, reserved paths, malformed traffic and the process lifecycle.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reqwest::StatusCode;
use support::origins;
use support::*;

const STATS_KEYS: &[&str] = &[
    "upstream",
    "tls",
    "cap",
    "occupancy",
    "queue_depth",
    "live_queue_depth",
    "max_queue_depth",
    "utilization",
    "token_ttl",
    "first_poll_grace",
    "ready_grace",
    "queued_total",
    "evicted_total",
    "timeouts_total",
    "promoted_total",
    "removed_total",
    "asset_cap",
    "asset_in_flight",
    "asset_users",
    "asset_user_cap_h1",
    "asset_user_cap_h2",
    "asset_served_total",
    "asset_denied_total",
    "asset_user_throttled_total",
    "asset_global_throttled_total",
    "stream_cap",
    "stream_active",
    "stream_served_total",
    "stream_denied_total",
    "stream_throttled_total",
    "abuse_enabled",
    "abuse_tracked",
    "abuse_range_bans",
    "abuse_strikes_total",
    "abuse_bans_total",
    "abuse_rejected_total",
    "abuse_dropped_total",
    "upstream_failures_client_total",
    "upstream_failures_origin_total",
    "upstream_failures_concert_total",
];

/// Every numeric key of `/_room/stats` and the sample that carries it in the metrics. A new
/// numeric key without a row here fails `every_numeric_stats_key_is_a_metric`.
const STATS_SAMPLES: &[(&str, &str)] = &[
    ("cap", "concert_cap"),
    ("occupancy", "concert_occupancy"),
    ("queue_depth", "concert_queue_depth"),
    ("live_queue_depth", "concert_live_queue_depth"),
    ("max_queue_depth", "concert_max_queue_depth"),
    ("utilization", "concert_utilization"),
    ("queued_total", "concert_queued_total"),
    ("evicted_total", "concert_evicted_total"),
    ("timeouts_total", "concert_timeouts_total"),
    ("promoted_total", "concert_promoted_total"),
    ("removed_total", "concert_removed_total"),
    ("admitted_total", "concert_admitted_total"),
    ("lapsed_total", "concert_lapsed_total"),
    ("rejoined_total", "concert_rejoined_total"),
    ("asset_cap", "concert_asset_cap"),
    ("asset_in_flight", "concert_asset_in_flight"),
    ("asset_users", "concert_asset_users"),
    (
        "asset_user_cap_h1",
        "concert_asset_user_cap{protocol=\"h1\"}",
    ),
    (
        "asset_user_cap_h2",
        "concert_asset_user_cap{protocol=\"h2\"}",
    ),
    ("asset_served_total", "concert_asset_served_total"),
    ("asset_denied_total", "concert_asset_denied_total"),
    (
        "asset_user_throttled_total",
        "concert_asset_user_throttled_total",
    ),
    (
        "asset_global_throttled_total",
        "concert_asset_global_throttled_total",
    ),
    ("stream_cap", "concert_stream_cap"),
    ("stream_active", "concert_stream_active"),
    ("stream_served_total", "concert_stream_served_total"),
    ("stream_denied_total", "concert_stream_denied_total"),
    ("stream_throttled_total", "concert_stream_throttled_total"),
    ("abuse_tracked", "concert_abuse_tracked"),
    ("abuse_range_bans", "concert_abuse_range_bans"),
    ("abuse_strikes_total", "concert_abuse_strikes_total"),
    ("abuse_bans_total", "concert_abuse_bans_total"),
    ("abuse_rejected_total", "concert_abuse_rejected_total"),
    ("abuse_dropped_total", "concert_abuse_dropped_total"),
    (
        "upstream_failures_client_total",
        "concert_upstream_failures_total{fault=\"client\"}",
    ),
    (
        "upstream_failures_origin_total",
        "concert_upstream_failures_total{fault=\"origin\"}",
    ),
    (
        "upstream_failures_concert_total",
        "concert_upstream_failures_total{fault=\"concert\"}",
    ),
    ("priority_lane_in_flight", "concert_priority_lane_in_flight"),
    ("priority_lane_cap", "concert_priority_lane_cap"),
    ("priority_lane_waiting", "concert_priority_lane_waiting"),
    (
        "priority_lane_served_total",
        "concert_priority_lane_served_total",
    ),
    (
        "priority_lane_full_total",
        "concert_priority_lane_full_total",
    ),
    ("priority_grants_total", "concert_priority_grants_total"),
    (
        "priority_grants_cleared_total",
        "concert_priority_grants_cleared_total",
    ),
    (
        "priority_grants_rejected_total",
        "concert_priority_grants_rejected_total",
    ),
    ("priority_forms_total", "concert_priority_forms_total"),
    (
        "priority_forms_refused_total",
        "concert_priority_forms_refused_total",
    ),
    (
        "priority_forms_over_budget_total",
        "concert_priority_forms_over_budget_total",
    ),
    ("address_full_total", "concert_address_full_total"),
    ("upload_buffered_bytes", "concert_upload_buffered_bytes"),
];

/// What Prometheus 3 sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Exposition {
    Classic,
    OpenMetrics,
}

/// Checks an exposition line by line and returns its samples (series with labels → value):
/// every sample belongs to the family the last `# TYPE` line declared, under exactly that name
/// in the classic format, or that name plus `_total` for an OpenMetrics counter; families are
/// declared once, after their `# HELP`; only OpenMetrics ends with `# EOF`.
fn samples_of(text: &str, format: Exposition) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    let mut declared = BTreeSet::new();
    let mut helped = None;
    let mut family: Option<(&str, &str)> = None;
    let mut lines = text.lines().peekable();
    let mut ended = false;
    while let Some(line) = lines.next() {
        if line == "# EOF" {
            assert_eq!(
                format,
                Exposition::OpenMetrics,
                "# EOF in the classic format"
            );
            assert!(lines.peek().is_none(), "lines after # EOF:\n{text}");
            ended = true;
        } else if let Some(help) = line.strip_prefix("# HELP ") {
            let (name, _) = help.split_once(' ').expect(line);
            helped = Some(name);
        } else if let Some(declaration) = line.strip_prefix("# TYPE ") {
            let (name, kind) = declaration.split_once(' ').expect(line);
            assert_eq!(helped, Some(name), "# TYPE {name} without its # HELP");
            assert!(declared.insert(name), "{name} declared twice");
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            if format == Exposition::Classic && kind == "counter" {
                assert!(name.ends_with("_total"), "classic counter {name}");
            }
            family = Some((name, kind));
        } else {
            assert!(!line.starts_with('#'), "unexpected comment: {line}");
            let (series, value) = line.rsplit_once(' ').expect(line);
            let name = series.split('{').next().unwrap();
            let (family_name, kind) = family.unwrap_or_else(|| panic!("{line} before any # TYPE"));
            let expected = match (format, kind) {
                (Exposition::OpenMetrics, "counter") => format!("{family_name}_total"),
                _ => family_name.to_owned(),
            };
            assert_eq!(name, expected, "sample outside its family: {line}");
            assert!(name.starts_with("concert_"), "{line}");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
            assert!(
                samples.insert(series.to_owned(), value).is_none(),
                "{line} twice"
            );
        }
    }
    assert_eq!(ended, format == Exposition::OpenMetrics, "# EOF:\n{text}");
    samples
}

async fn scrape(running: &concert::Running, path: &str, accept: Option<&str>) -> (String, String) {
    let mut request = plain_client().get(url(running, path));
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    assert_eq!(response.headers()["vary"], "accept", "{path}");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (content_type, response.text().await.unwrap())
}

async fn busy_concert(env: &[(&str, &str)]) -> (origins::Origin, concert::Running) {
    let origin = origins::held_origin();
    let concert = concert_with_env(&["-upstream", &origin.url(), "-cap", "1"], env).await;
    let holder = url(&concert, "/hold");
    tokio::spawn(async move {
        let _ = plain_client().get(holder).send().await;
    });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    (origin, concert)
}

#[tokio::test]
async fn healthz_and_stats_answer_while_full() {
    let (origin, concert) = busy_concert(&[]).await;
    let health = plain_client()
        .get(url(&concert, "/_room/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(health.text().await.unwrap(), "ok");
    let stats = json_of(plain_client().get(url(&concert, "/_room/stats"))).await;
    for key in STATS_KEYS {
        assert!(stats.get(key).is_some(), "stats lacks {key}");
    }
    assert_eq!(stats["cap"], 1);
    assert_eq!(stats["occupancy"], 1);
    assert_eq!(stats["token_ttl"], "5m0s");
    assert_eq!(stats["first_poll_grace"], "30s");
    assert_eq!(stats["ready_grace"], "30s");
    assert_eq!(stats["asset_cap"], 128);
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn reserved_paths_never_reach_the_origin() {
    let origin = origins::fast_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let client = plain_client();
    let stats_slash = client
        .get(url(&concert, "/_room/stats/"))
        .send()
        .await
        .unwrap();
    assert_eq!(stats_slash.status(), StatusCode::OK);
    assert!(stats_slash.text().await.unwrap().contains("\"cap\""));
    let post_stats = client
        .post(url(&concert, "/_room/stats"))
        .send()
        .await
        .unwrap();
    assert_eq!(post_stats.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(post_stats.headers()["allow"], "GET, HEAD");
    assert_eq!(post_stats.text().await.unwrap(), "method not allowed\n");
    let unknown = client
        .get(url(&concert, "/_room/secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let post_status = client
        .post(url(&concert, "/queue/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(post_status.status(), StatusCode::METHOD_NOT_ALLOWED);
    let options = client
        .request(reqwest::Method::OPTIONS, url(&concert, "/queue/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(options.status(), StatusCode::NO_CONTENT);
    let fast_lane = client
        .get(url(&concert, "/_concert/anything"))
        .send()
        .await
        .unwrap();
    assert_eq!(fast_lane.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        fast_lane.text().await.unwrap(),
        r#"{"error":"fast_lane_disabled"}"#
    );
    let config = json_of(client.get(url(&concert, "/_concert/config"))).await;
    assert_eq!(config["enabled"], false);
    let css = client
        .get(url(&concert, "/_concert/waiting.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(css.status(), StatusCode::OK);
    assert!(
        css.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    assert_eq!(origin.hits(), 0, "nothing reserved leaked upstream");
}

#[tokio::test]
async fn cap_endpoint_needs_the_admin_token() {
    let origin = origins::fast_origin();
    let without = concert(&["-upstream", &origin.url()]).await;
    let response = plain_client()
        .post(url(&without, "/_room/cap"))
        .body(r#"{"cap":3}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // Without a token the admin routes do not exist for any method, and name none.
    for (method, path) in [
        (reqwest::Method::GET, "/_room/cap"),
        (reqwest::Method::PUT, "/_room/cap/"),
        (reqwest::Method::PATCH, "/_room/abuse"),
    ] {
        let response = plain_client()
            .request(method.clone(), url(&without, path))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
        assert!(response.headers().get("allow").is_none(), "{method} {path}");
    }

    // Loopback is not trusted here, so wrong tokens from it are struck.
    let with = concert_with_env(
        &[
            "-upstream",
            &origin.url(),
            "-cap",
            "1",
            "-trusted-proxies",
            "10.9.9.9",
        ],
        &[("CONCERT_ADMIN_TOKEN", "s3cret")],
    )
    .await;
    let client = plain_client();
    let cap_url = url(&with, "/_room/cap");
    let none = client
        .post(&cap_url)
        .body(r#"{"cap":3}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    let get_cap = client.get(&cap_url).send().await.unwrap();
    assert_eq!(get_cap.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(get_cap.headers()["allow"], "POST");
    assert_eq!(get_cap.text().await.unwrap(), "method not allowed\n");
    let wrong = client
        .post(&cap_url)
        .bearer_auth("nope")
        .body(r#"{"cap":3}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let bad = client
        .post(&cap_url)
        .bearer_auth("s3cret")
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let zero = client
        .post(&cap_url)
        .bearer_auth("s3cret")
        .body(r#"{"cap":0}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(zero.status(), StatusCode::BAD_REQUEST);
    // A struct written as an array of its fields is not a cap request.
    let array = client
        .post(&cap_url)
        .bearer_auth("s3cret")
        .body("[8]")
        .send()
        .await
        .unwrap();
    assert_eq!(array.status(), StatusCode::BAD_REQUEST);
    assert_ne!(with.app.room.stats().cap, 8);
    let ok = client
        .post(&cap_url)
        .bearer_auth("s3cret")
        .body(r#"{"cap":3}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let body: serde_json::Value = ok.json().await.unwrap();
    assert_eq!(body["cap"], 3);
    assert_eq!(body["occupancy"], 0);
    assert_eq!(with.app.room.stats().cap, 3);
    assert_eq!(with.app.generation().config.cap, 3);
    // Two wrong tokens were charged (five strikes each); the counter counts strike events.
    let stats = json_of(client.get(url(&with, "/_room/stats"))).await;
    assert_eq!(stats["abuse_strikes_total"], 2);
}

#[tokio::test]
async fn metrics_are_prometheus_text() {
    let origin = origins::fast_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "7"]).await;
    let _ = plain_client()
        .get(url(&concert, "/x"))
        .send()
        .await
        .unwrap();
    let text = plain_client()
        .get(url(&concert, "/_room/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let samples = samples_of(&text, Exposition::Classic);
    assert_eq!(samples["concert_cap"], 7.0, "{text}");
    assert_eq!(samples["concert_admitted_total"], 1.0, "{text}");
}

#[tokio::test]
async fn every_numeric_stats_key_is_a_metric() {
    let origin = origins::fast_origin();
    // Distinct limits, so that a metric fed from the wrong figure shows.
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "7",
        "-max-queue",
        "50",
        "-asset-cap",
        "11",
        "-asset-user-cap-h1",
        "3",
        "-asset-user-cap-h2",
        "5",
        "-stream-cap",
        "9",
        "-priority-cap",
        "4",
    ])
    .await;
    let client = plain_client();
    let _ = client.get(url(&concert, "/x")).send().await.unwrap();
    let stats = json_of(client.get(url(&concert, "/_room/stats"))).await;
    let (_, classic) = scrape(&concert, "/_room/metrics", None).await;
    let (_, openmetrics) = scrape(&concert, "/_room/metrics", Some(PROMETHEUS_ACCEPT)).await;
    let classic = samples_of(&classic, Exposition::Classic);
    let openmetrics = samples_of(&openmetrics, Exposition::OpenMetrics);
    assert_eq!(
        classic.keys().collect::<Vec<_>>(),
        openmetrics.keys().collect::<Vec<_>>(),
        "the two formats carry different series"
    );

    let stats = stats.as_object().unwrap();
    let numeric: Vec<_> = stats
        .iter()
        .filter(|(_, value)| value.is_number())
        .collect();
    assert!(numeric.len() >= 40, "{stats:?}");
    let unmapped: Vec<_> = numeric
        .iter()
        .filter(|(key, _)| !STATS_SAMPLES.iter().any(|(mapped, _)| mapped == key))
        .map(|(key, _)| key.as_str())
        .collect();
    assert!(
        unmapped.is_empty(),
        "stats keys without a metric: {unmapped:?}"
    );
    for (key, sample) in STATS_SAMPLES {
        let expected = stats
            .get(*key)
            .and_then(|value| value.as_f64())
            .unwrap_or_else(|| panic!("{key} is no longer a numeric stats key"));
        for (format, samples) in [("classic", &classic), ("OpenMetrics", &openmetrics)] {
            let value = samples
                .get(*sample)
                .unwrap_or_else(|| panic!("{format} lacks {sample} for {key}"));
            // The smoothed utilization moves on its own between two reads.
            if *key != "utilization" {
                assert_eq!(*value, expected, "{format} {sample} against {key}");
            }
        }
    }
    assert_eq!(classic["concert_stream_cap"], 9.0);
    assert_eq!(classic["concert_asset_user_cap{protocol=\"h2\"}"], 5.0);
    assert_eq!(classic["concert_admitted_total"], 1.0);
}

#[tokio::test]
async fn the_metrics_format_follows_the_scrapers_accept_header() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "7"]).await;
    for path in ["/_room/metrics", "/metrics"] {
        // reqwest, like curl, sends `*/*`.
        for accept in [
            None,
            Some("text/plain"),
            Some("text/plain;q=0.9, application/openmetrics-text;q=0.1"),
        ] {
            let (content_type, text) = scrape(&concert, path, accept).await;
            assert_eq!(
                content_type, "text/plain; version=0.0.4; charset=utf-8",
                "{path} {accept:?}"
            );
            let samples = samples_of(&text, Exposition::Classic);
            assert_eq!(samples["concert_cap"], 7.0);
            assert!(
                text.contains("# TYPE concert_admitted_total counter\n"),
                "{text}"
            );
        }
        for accept in [PROMETHEUS_ACCEPT, "application/openmetrics-text"] {
            let (content_type, text) = scrape(&concert, path, Some(accept)).await;
            assert_eq!(
                content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8",
                "{path} {accept}"
            );
            assert!(text.ends_with("\n# EOF\n"), "{text}");
            let samples = samples_of(&text, Exposition::OpenMetrics);
            assert_eq!(samples["concert_cap"], 7.0);
            assert!(text.contains("# TYPE concert_admitted counter\n"), "{text}");
        }
        // No Accept at all.
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(concert.addr, request.as_bytes(), Duration::from_secs(3)).await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{answer}"
        );
        assert!(!answer.contains("# EOF"), "{answer}");
    }
    assert!(origin.paths().is_empty());
}

#[tokio::test]
async fn a_request_body_that_cannot_be_decoded_is_the_clients_fault() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-bypass", "/hooks/*"]).await;
    // Chunk sizes that are not hexadecimal, or chunks without their line end: the body cannot
    // be decoded, so the client gets a 400 and the connection closes; never a 502.
    let bodies: [&[u8]; 3] = [b"G\r\n", b"5\r\nhelloXX", b"zz\r\nab\r\n0\r\n\r\n"];
    for path in ["/page", "/hooks/in"] {
        for body in bodies {
            let mut request =
                format!("POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .into_bytes();
            request.extend_from_slice(body);
            let answer = raw_exchange(concert.addr, &request, Duration::from_secs(3)).await;
            assert!(
                answer.starts_with("HTTP/1.1 400 "),
                "{path} {body:?}: {answer}"
            );
            assert!(
                answer.to_ascii_lowercase().contains("connection: close"),
                "{answer}"
            );
        }
    }
    assert!(room_empties(&concert).await);
}

#[tokio::test]
async fn metrics_are_also_answered_at_the_prometheus_default_path() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "7"]).await;
    let client = plain_client();
    for path in ["/metrics", "/metrics/"] {
        let response = client.get(url(&concert, path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let text = response.text().await.unwrap();
        assert!(text.contains("concert_cap 7"), "{text}");
        // A scrape is not a visitor: it takes no page slot.
        assert!(text.contains("concert_admitted_total 0"), "{text}");
    }
    let head = client.head(url(&concert, "/metrics")).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert!(head.bytes().await.unwrap().is_empty());
    let post = client.post(url(&concert, "/metrics")).send().await.unwrap();
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(post.headers()["allow"], "GET, HEAD");
    // Only the path itself is Concert's; what lies below it is the origin's.
    let below = json_of(client.get(url(&concert, "/metrics/jobs"))).await;
    assert_eq!(below["path"], "/metrics/jobs");
    assert_eq!(origin.paths(), ["/metrics/jobs"]);
}

#[tokio::test]
async fn the_metrics_path_moves_turns_off_or_yields_to_a_path_list() {
    let origin = origins::echo_origin();
    let client = plain_client();
    let is_metrics = |text: &str| text.contains("\n# TYPE concert_cap gauge\nconcert_cap ");

    let moved = concert(&[
        "-upstream",
        &origin.url(),
        "-metrics-path",
        "/internal/prom",
    ])
    .await;
    let text = client
        .get(url(&moved, "/internal/prom"))
        .send()
        .await
        .unwrap();
    assert!(is_metrics(&text.text().await.unwrap()));
    let seen = json_of(client.get(url(&moved, "/metrics"))).await;
    assert_eq!(seen["path"], "/metrics");

    let off = concert_with_env(
        &["-upstream", &origin.url()],
        &[("CONCERT_METRICS_PATH", "off")],
    )
    .await;
    let seen = json_of(client.get(url(&off, "/metrics"))).await;
    assert_eq!(seen["path"], "/metrics");

    // An operator who already sends /metrics somewhere keeps that route.
    let listed = concert(&["-upstream", &origin.url(), "-bypass", "/metrics"]).await;
    let seen = json_of(client.get(url(&listed, "/metrics"))).await;
    assert_eq!(seen["path"], "/metrics");
    let text = client
        .get(url(&listed, "/_room/metrics"))
        .send()
        .await
        .unwrap();
    assert!(is_metrics(&text.text().await.unwrap()));
    // Neither form answers metrics while a list routes one of them.
    let seen = json_of(client.get(url(&listed, "/metrics/"))).await;
    assert_eq!(seen["path"], "/metrics/");
    let below = concert(&["-upstream", &origin.url(), "-bypass", "/metrics/*"]).await;
    let seen = json_of(client.get(url(&below, "/metrics"))).await;
    assert_eq!(seen["path"], "/metrics");
    assert_eq!(
        origin.paths(),
        ["/metrics", "/metrics", "/metrics", "/metrics/", "/metrics"]
    );
}

#[tokio::test]
async fn dot_segments_cannot_ride_a_bypass_or_asset_rule() {
    let origin = origins::echo_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-bypass",
        "/webhooks/*",
        "-cap",
        "1",
    ])
    .await;
    // Normalised before matching: the origin gets the path the rules saw.
    let seen = json_of(plain_client().get(url(&concert, "/webhooks/%2e%2e/admin"))).await;
    assert_eq!(seen["path"], "/admin");
    // A dot segment hidden behind an encoded slash is refused outright.
    let raw = raw_exchange(
        concert.addr,
        b"GET /webhooks/..%2fadmin HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(2),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 400"), "{raw}");

    // With the one slot held, paths that climb out of a bypass or asset rule are gated like
    // any page (429), while a real bypass path still goes through.
    let origin = origins::held_origin();
    let gated = support::concert(&[
        "-upstream",
        &origin.url(),
        "-bypass",
        "/webhooks/*",
        "-assets",
        "/static/*",
        "-cap",
        "1",
    ])
    .await;
    let holder_url = url(&gated, "/hold");
    let holder = tokio::spawn(async move { plain_client().get(holder_url).send().await });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    for climbing in [
        "/webhooks/%2e%2e/admin",
        "/webhooks/%2E%2E/%2e%2e/admin",
        "/webhooks/./../admin",
        "/static/%2e%2e/admin",
    ] {
        let response = plain_client()
            .get(url(&gated, climbing))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{climbing}"
        );
    }
    assert_eq!(origin.hits(), 1, "only the holder: {:?}", origin.paths());
    let bypass_url = url(&gated, "/webhooks/real");
    let bypass = tokio::spawn(async move { plain_client().get(bypass_url).send().await });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 2).await);
    origin.release(2);
    assert_eq!(bypass.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(holder.await.unwrap().unwrap().status(), StatusCode::OK);
}

/// Sends `GET target` with the given header lines on its own connection and returns the answer.
async fn raw_get(addr: std::net::SocketAddr, target: &str, headers: &str) -> String {
    let request = format!("GET {target} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n");
    raw_exchange(addr, request.as_bytes(), Duration::from_secs(2)).await
}

#[tokio::test]
async fn escaped_unreserved_characters_cannot_dodge_ban_paths_or_reserved_routes() {
    let origin = origins::echo_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-ban-paths",
        "/.env,/wp-login.php",
        "-trusted-proxies",
        "127.0.0.1",
    ])
    .await;
    // Each probe comes from its own client address, since a ban covers every later request.
    let probes = [
        "/.%65nv",
        "/wp%2dlogin.php",
        "/%77p-login.php",
        "/.env;x",
        "/.E%4eV",
    ];
    for (index, probe) in probes.iter().enumerate() {
        let answer = raw_get(
            concert.addr,
            probe,
            &format!(
                "Host: shop.test\r\nX-Forwarded-For: 203.0.113.{}\r\n",
                index + 1
            ),
        )
        .await;
        let banned = answer.starts_with("HTTP/1.1 429");
        // `/.E%4eV` decodes to `/.ENV`, which is not the ban path: only the escape is undone.
        assert_eq!(banned, *probe != "/.E%4eV", "{probe}: {answer}");
    }
    assert_eq!(origin.paths(), ["/.ENV"]);
    for reserved in ["/%5Froom/stats", "/_room/%73tats", "/_room/st%61ts/"] {
        let answer = raw_get(
            concert.addr,
            reserved,
            "Host: shop.test\r\nX-Forwarded-For: 203.0.113.50\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{reserved}: {answer}");
        assert!(answer.contains("\"occupancy\""), "{reserved}: {answer}");
    }
    // The origin receives the normalised path: unreserved escapes decoded, others kept.
    let answer = raw_get(
        concert.addr,
        "/%7Euser/a%2fb%c3%a9?q=%41",
        "Host: shop.test\r\nX-Forwarded-For: 203.0.113.60\r\n",
    )
    .await;
    assert!(
        answer.contains(r#""path":"/~user/a%2Fb%C3%A9?q=%41""#),
        "{answer}"
    );
    assert_eq!(origin.hits(), 2, "{:?}", origin.paths());
}

#[tokio::test]
async fn dot_segments_with_parameters_are_refused() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-bypass", "/public/*"]).await;
    for climbing in [
        "/public/..;/private",
        "/public/..;x/private",
        "/public/%2e%2e;/private",
        "/public/.%2E%3b/private",
        "/public/.;/x",
    ] {
        let answer = raw_get(concert.addr, climbing, "Host: shop.test\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{climbing}: {answer}");
    }
    assert_eq!(origin.hits(), 0, "{:?}", origin.paths());
    // Parameters on ordinary segments are the origin's business.
    let answer = raw_get(concert.addr, "/public/a;v=1/b", "Host: shop.test\r\n").await;
    assert!(answer.contains(r#""path":"/public/a;v=1/b""#), "{answer}");
}

#[tokio::test]
async fn requests_without_one_valid_host_never_reach_the_origin() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-bypass", "/hooks/*"]).await;
    for (case, headers) in [
        ("missing", ""),
        ("twice", "Host: shop.test\r\nHost: evil.test\r\n"),
        ("slash", "Host: shop.test/evil\r\n"),
        ("space", "Host: shop test\r\n"),
        ("userinfo", "Host: user@shop.test\r\n"),
        ("query", "Host: shop.test?x=1\r\n"),
        ("comma", "Host: shop.test,evil.test\r\n"),
        ("port", "Host: shop.test:http\r\n"),
    ] {
        for path in ["/page", "/hooks/x"] {
            let answer = raw_get(concert.addr, path, headers).await;
            assert!(
                answer.starts_with("HTTP/1.1 400"),
                "{case} {path}: {answer}"
            );
        }
    }
    let absolute = raw_get(concert.addr, "http://shop.test/hooks/x", "").await;
    assert!(absolute.starts_with("HTTP/1.1 400"), "{absolute}");
    assert_eq!(origin.hits(), 0, "{:?}", origin.paths());

    // HTTP/1.0 may leave Host out; a valid one is forwarded as it came.
    let old = raw_exchange(
        concert.addr,
        b"GET /hooks/old HTTP/1.0\r\n\r\n",
        Duration::from_secs(2),
    )
    .await;
    assert!(old.starts_with("HTTP/1.0 200"), "{old}");
    let answer = raw_get(concert.addr, "/hooks/v6", "Host: [::1]:8080\r\n").await;
    assert!(
        answer.contains(r#""x-forwarded-host":["[::1]:8080"]"#),
        "{answer}"
    );
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn http2_requests_with_too_many_headers_get_431() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut many = client.get(url(&concert, "/page"));
    for index in 0..150 {
        many = many.header(format!("x-h{index}"), "v");
    }
    let response = many.send().await.unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(
        response.status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    // Concert's own answer: an HTTP/1 origin would refuse the forwarded request with a 431 too.
    assert_eq!(
        response.text().await.unwrap(),
        "too many request header fields\n"
    );
    assert_eq!(origin.hits(), 0);
    // Ninety are fine.
    let mut some = client.get(url(&concert, "/page"));
    for index in 0..90 {
        some = some.header(format!("x-h{index}"), "v");
    }
    assert_eq!(some.send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn malformed_requests_get_4xx_not_5xx() {
    let origin = origins::fast_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let garbage = raw_exchange(
        concert.addr,
        b"\x16\x03\x01garbage\r\n\r\n",
        Duration::from_secs(2),
    )
    .await;
    assert!(
        garbage.is_empty() || garbage.starts_with("HTTP/1.1 4"),
        "{garbage}"
    );
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000));
    let long = raw_exchange(concert.addr, long_target.as_bytes(), Duration::from_secs(2)).await;
    assert!(long.starts_with("HTTP/1.1 414"), "{long}");
    let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..200 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let too_many = raw_exchange(concert.addr, many.as_bytes(), Duration::from_secs(2)).await;
    assert!(too_many.starts_with("HTTP/1.1 431"), "{too_many}");
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(70_000)
    );
    let huge = raw_exchange(concert.addr, huge.as_bytes(), Duration::from_secs(2)).await;
    assert!(huge.starts_with("HTTP/1.1 431"), "{huge}");
    let bad_xff = plain_client()
        .get(url(&concert, "/"))
        .header("x-forwarded-for", "not-an-ip, ,,, 999.1.1.1")
        .header("cookie", "room_ticket=%%%%; concert_admit=!!!")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_xff.status(), StatusCode::OK);
    assert_eq!(origin.hits(), 1);
}

/// The status lines of the answers in a raw exchange (a body may run straight into the next
/// answer's status line, so they are found by their shape rather than by line).
fn status_lines(answer: &str) -> Vec<&str> {
    answer
        .match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| {
            let line = answer[at..].split("\r\n").next()?;
            let code = line.get(9..12)?;
            code.bytes().all(|b| b.is_ascii_digit()).then_some(line)
        })
        .collect()
}

#[tokio::test]
async fn ambiguous_request_framing_is_refused_and_never_reaches_the_origin() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    // Both framing headers, in either order, each followed by a request hidden in the body.
    let attacks: [&[u8]; 2] = [
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 40\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    ];
    for attack in attacks {
        let answer = raw_exchange(concert.addr, attack, Duration::from_secs(3)).await;
        // One answer, a 400, and the connection closed after it (read_to_end returned).
        assert_eq!(
            status_lines(&answer),
            ["HTTP/1.1 400 Bad Request"],
            "{answer}"
        );
        assert!(answer.contains("Transfer-Encoding"), "{answer}");
    }
    // Lengths that disagree or do not parse are refused just the same (by the HTTP layer).
    for bad_length in [
        "Content-Length: 4\r\nContent-Length: 5",
        "Content-Length: 4, 5",
        "Content-Length: abc",
        "Content-Length: -4",
    ] {
        let attack = format!("POST /b HTTP/1.1\r\nHost: x\r\n{bad_length}\r\n\r\nbody");
        let answer = raw_exchange(concert.addr, attack.as_bytes(), Duration::from_secs(3)).await;
        assert_eq!(
            status_lines(&answer),
            ["HTTP/1.1 400 Bad Request"],
            "{bad_length}: {answer}"
        );
    }
    assert_eq!(origin.hits(), 0, "paths: {:?}", origin.paths());

    // Behind a well-formed request on the same connection, the ambiguous one is still the one
    // refused: the first is answered by the origin, the second is not forwarded.
    let pipelined = b"GET /first HTTP/1.1\r\nHost: x\r\n\r\nPOST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let answer = raw_exchange(concert.addr, pipelined, Duration::from_secs(3)).await;
    assert_eq!(
        status_lines(&answer),
        ["HTTP/1.1 200 OK", "HTTP/1.1 400 Bad Request"],
        "{answer}"
    );
    assert_eq!(origin.paths(), ["/first"]);
    assert_eq!(concert.app.room.stats().occupancy, 0);
}

#[tokio::test]
async fn a_request_hidden_behind_any_first_request_hyper_serves_is_still_refused() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let smuggled = "POST /smuggled HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let firsts = [
        // Asking for an upgrade the origin does not grant leaves the connection on HTTP/1.1.
        "GET /first HTTP/1.1\r\nHost: a\r\nUpgrade: foo\r\n\r\n",
        "GET /first HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
        // Sizes and lengths with more leading zeros than a u64 has digits.
        "POST /first HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000003\r\nabc\r\n0\r\n\r\n",
        "POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: 000000000000000000005\r\n\r\nhello",
    ];
    for first in firsts {
        let before = origin.paths().len();
        let answer = raw_exchange(
            concert.addr,
            format!("{first}{smuggled}").as_bytes(),
            Duration::from_secs(3),
        )
        .await;
        assert_eq!(
            status_lines(&answer),
            ["HTTP/1.1 200 OK", "HTTP/1.1 400 Bad Request"],
            "{first:?}: {answer}"
        );
        assert_eq!(origin.paths()[before..], ["/first"], "{first:?}");
    }
}

#[tokio::test]
async fn a_granted_upgrade_carries_bytes_that_look_like_requests() {
    let origin = origins::ws_echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-bypass", "/ws"]).await;
    // A frame sent right behind the handshake, before the 101 (an all-zero mask leaves the
    // payload as sent): hyper may read it ahead, and it must reach the origin as tunnel data.
    let payload = b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
    let mut request = b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".to_vec();
    request.extend_from_slice(&[0x81, 0x80 | payload.len() as u8, 0, 0, 0, 0]);
    request.extend_from_slice(payload);
    let mut stream = tokio::net::TcpStream::connect(concert.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, &request)
        .await
        .unwrap();
    let mut echoed_frame = vec![0x81, payload.len() as u8];
    echoed_frame.extend_from_slice(payload);
    let mut answer = Vec::new();
    let read = async {
        let mut chunk = [0u8; 1024];
        while !answer
            .windows(echoed_frame.len())
            .any(|w| w == echoed_frame)
        {
            match tokio::io::AsyncReadExt::read(&mut stream, &mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(3), read).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
    assert!(
        answer
            .windows(echoed_frame.len())
            .any(|w| w == echoed_frame),
        "{text}"
    );
    assert_eq!(origin.paths(), ["/ws"]);
}

#[tokio::test]
async fn request_bodies_that_look_like_requests_are_only_bodies() {
    // Framing text inside bodies (fixed and chunked) is data: nothing is refused, and each
    // request on the keep-alive connection reaches the origin once.
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let inner = "POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
    let requests = format!(
        "POST /fixed HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{inner}\
         POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x};ext=1\r\n{inner}\r\n0\r\nx-trailer: 1\r\n\r\n\
         GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        inner.len(),
        inner.len(),
    );
    let answer = raw_exchange(concert.addr, requests.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(
        status_lines(&answer),
        ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 200 OK"],
        "{answer}"
    );
    assert_eq!(origin.paths(), ["/fixed", "/chunked", "/last"]);
}

#[tokio::test]
async fn bodies_in_other_transfer_codings_are_refused() {
    let origin = origins::fast_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    for coding in [
        "gzip, chunked",
        "gzip,chunked",
        "chunked\r\nTransfer-Encoding: chunked",
    ] {
        let request = format!(
            "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: {coding}\r\n\r\n0\r\n\r\n"
        );
        let answer = raw_exchange(concert.addr, request.as_bytes(), Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{coding}: {answer}");
    }
    // Plain chunked, in any case, goes through.
    let answer = raw_exchange(
        concert.addr,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(origin.paths(), ["/upload"]);
}

#[tokio::test]
async fn slow_request_heads_are_cut_off() {
    let origin = origins::fast_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let started = std::time::Instant::now();
    // Half a request head, then silence: the server closes within the header timeout.
    let answer = raw_exchange(
        concert.addr,
        b"GET / HTTP/1.1\r\nHost:",
        Duration::from_secs(15),
    )
    .await;
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(14), "closed after {waited:?}");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    assert_eq!(concert.app.room.stats().occupancy, 0);
}

#[tokio::test]
async fn connections_that_never_send_a_request_are_closed() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let origin = origins::fast_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    // Nothing at all; half the HTTP/2 preface; the whole preface and empty settings but no
    // stream. None of them has a request head for the header timeout to watch.
    let openings: [&[u8]; 3] = [
        b"",
        b"PRI * HTTP/2.0\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
    ];
    let started = std::time::Instant::now();
    let waits = openings.map(|opening| async move {
        let mut stream = tokio::net::TcpStream::connect(concert.addr).await.unwrap();
        stream.write_all(opening).await.unwrap();
        let mut rest = Vec::new();
        // A reset counts as closed as much as an orderly end does.
        tokio::time::timeout(Duration::from_secs(15), stream.read_to_end(&mut rest))
            .await
            .is_ok()
    });
    let closed = futures_util::future::join_all(waits).await;
    let waited = started.elapsed();
    assert_eq!(closed, [true, true, true], "after {waited:?}");
    assert!(
        waited >= Duration::from_secs(5),
        "closed after only {waited:?}"
    );
    assert!(waited < Duration::from_secs(14), "closed after {waited:?}");
}

#[tokio::test]
async fn idle_http2_connections_are_closed_too() {
    use http_body_util::BodyExt as _;
    let origin = origins::fast_origin();
    let concert = concert_with_idle_limit(&origin, IDLE_LIMIT).await;
    let stream = tokio::net::TcpStream::connect(concert.addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    let connection = tokio::spawn(connection);
    let request = http::Request::get(format!("http://{}/page", concert.addr))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let _ = response.into_body().collect().await.unwrap();
    // Then nothing: the server closes the connection once it has been idle for the timeout,
    // as it does an idle HTTP/1 one (the client may see that as an orderly end or an error).
    let idle_since = std::time::Instant::now();
    let _ended = tokio::time::timeout(IDLE_LIMIT * 2, connection)
        .await
        .expect("closed within the idle timeout")
        .unwrap();
    let idle = idle_since.elapsed();
    // The server counts from when it finished the answer, a moment before the client had read
    // it; still well past the 10 s a request head may take.
    assert!(
        idle >= IDLE_LIMIT - Duration::from_secs(1),
        "closed after only {idle:?}"
    );
    assert_eq!(concert.app.room.stats().occupancy, 0);
}

/// An idle limit shorter than the default 120 s, but longer than the 10 s a request head may
/// take, so the tests can tell the two apart without waiting minutes.
const IDLE_LIMIT: Duration = Duration::from_secs(13);

async fn concert_with_idle_limit(origin: &origins::Origin, idle: Duration) -> concert::Running {
    concert_adjusted(&["-upstream", &origin.url()], &[], |config| {
        config.keep_alive_idle = idle;
    })
    .await
}

/// While a worker holds more connections than its crowd limit, a connection that falls idle is
/// kept only for the 10 s a request head may take, until the crowd is down to the limit; the
/// rest keep the idle limit.
#[tokio::test]
async fn a_crowded_worker_closes_idle_connections_down_to_its_limit() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let origin = origins::fast_origin();
    let concert = concert_adjusted(&["-upstream", &origin.url()], &[], |config| {
        config.workers = 1;
        config.keep_alive_idle = Duration::from_secs(60);
        config.keep_alive_crowd = 1;
    })
    .await;
    // Three connections open before any request: each falls idle with the crowd there.
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(tokio::net::TcpStream::connect(concert.addr).await.unwrap());
    }
    for stream in &mut streams {
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_until(stream, b"ok", Duration::from_secs(5)).await;
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    }
    let idle_since = std::time::Instant::now();
    let waits = streams.into_iter().map(|mut stream| async move {
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(16), stream.read_to_end(&mut rest))
            .await
            .is_ok();
        (closed, idle_since.elapsed())
    });
    let ended = futures_util::future::join_all(waits).await;
    let closed: Vec<Duration> = ended
        .iter()
        .filter(|(closed, _)| *closed)
        .map(|(_, after)| *after)
        .collect();
    assert_eq!(closed.len(), 2, "{ended:?}");
    assert!(
        closed
            .iter()
            .all(|after| (Duration::from_secs(9)..Duration::from_secs(15)).contains(after)),
        "{ended:?}"
    );
    assert_eq!(concert.app.open_connections(), [1]);
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let origin = origins::fast_origin();
    let concert = concert_with_idle_limit(&origin, IDLE_LIMIT).await;
    let mut stream = tokio::net::TcpStream::connect(concert.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !answer.ends_with(b"ok") {
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "closed before the answer");
        answer.extend_from_slice(&chunk[..read]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    // Then silence: the server keeps the idle connection past the 10 s a request head may
    // take, and closes it once the idle limit passes, without another answer.
    let idle_since = std::time::Instant::now();
    let mut rest = Vec::new();
    tokio::time::timeout(IDLE_LIMIT * 2, stream.read_to_end(&mut rest))
        .await
        .expect("closed within the idle limit")
        .unwrap();
    let idle = idle_since.elapsed();
    // The server counts from when it finished the answer, a moment before the client had read
    // it; still well past the 10 s a request head may take.
    assert!(
        idle >= IDLE_LIMIT - Duration::from_secs(1),
        "closed after only {idle:?}"
    );
    assert!(
        rest.is_empty() || rest.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    assert_eq!(concert.app.room.stats().occupancy, 0);
}

#[tokio::test]
async fn shutdown_lets_in_flight_requests_finish() {
    let origin = origins::slow_origin(Duration::from_millis(400));
    let concert = concert(&["-upstream", &origin.url()]).await;
    let target = url(&concert, "/slow");
    let request =
        tokio::spawn(async move { plain_client().get(target).send().await.map(|r| r.status()) });
    assert!(eventually(Duration::from_secs(3), || origin.in_flight() == 1).await);
    concert.shutdown().await.unwrap();
    assert_eq!(request.await.unwrap().unwrap(), StatusCode::OK);
}

#[tokio::test]
async fn shutdown_ends_event_streams_cleanly_instead_of_waiting_out_the_grace() {
    event_stream_ends_on_shutdown(plain_client()).await;
}

#[tokio::test]
async fn shutdown_ends_http2_event_streams_cleanly() {
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    event_stream_ends_on_shutdown(client).await;
}

async fn event_stream_ends_on_shutdown(client: reqwest::Client) {
    let origin = origins::sse_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let mut events = client
        .get(url(&concert, "/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    let first = events.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: hello"), "{first:?}");
    let stopping = tokio::spawn(concert.shutdown());
    // The origin would stream for a minute and the grace is 30 s: the stream must end well
    // before either, with its proper end (a cut connection is an error here).
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut rest = Vec::new();
        while let Some(chunk) = events.chunk().await? {
            rest.extend_from_slice(&chunk);
        }
        Ok::<_, reqwest::Error>(rest)
    })
    .await
    .expect("the event stream ended on shutdown")
    .expect("the event stream ended cleanly");
    assert!(
        rest.is_empty() || rest.ends_with(b"\n\n"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the stop did not wait for the stream")
        .unwrap()
        .unwrap();
    assert!(eventually(Duration::from_secs(3), || origin.in_flight() == 0).await);
}

#[tokio::test]
async fn shutdown_closes_websockets_with_going_away_on_both_sides() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let origin = origins::ws_echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-bypass", "/ws"]).await;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", concert.addr))
        .await
        .unwrap();
    socket.send(Message::text("before")).await.unwrap();
    let echoed = socket.next().await.unwrap().unwrap();
    assert_eq!(echoed, Message::text("before"));
    assert_eq!(origin.in_flight(), 1, "the origin holds the socket open");
    let stopping = tokio::spawn(concert.shutdown());
    // The browser's side hears a proper close ("going away"), not a cut connection.
    let closing = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(_)) => continue,
                other => panic!("no Close frame, got {other:?}"),
            }
        }
    })
    .await
    .expect("a Close frame on shutdown");
    assert_eq!(closing.map(|frame| frame.code), Some(CloseCode::Away));
    drop(socket);
    // The origin's side was closed too, and the stop waited for neither the grace nor the
    // client's reconnect.
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 0).await);
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the stop did not wait out the grace")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_websocket_client_that_resets_frees_its_slot_and_the_origin() {
    let origin = origins::ws_echo_origin();
    // A page path: the open socket holds the only page slot.
    let concert = concert(&["-upstream", &origin.url(), "-cap", "1"]).await;
    let mut stream = tokio::net::TcpStream::connect(concert.addr).await.unwrap();
    let handshake = b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    tokio::io::AsyncWriteExt::write_all(&mut stream, handshake)
        .await
        .unwrap();
    let mut answer = [0u8; 12];
    tokio::io::AsyncReadExt::read_exact(&mut stream, &mut answer)
        .await
        .unwrap();
    assert_eq!(&answer, b"HTTP/1.1 101");
    assert!(eventually(Duration::from_secs(3), || origin.in_flight() == 1).await);
    assert_eq!(concert.app.room.stats().occupancy, 1);
    // Gone without a goodbye: a reset, not a close.
    stream.set_zero_linger().unwrap();
    drop(stream);
    assert!(
        eventually(Duration::from_secs(5), || origin.in_flight() == 0).await,
        "the origin's side stayed open"
    );
    assert!(
        eventually(Duration::from_secs(5), || concert
            .app
            .room
            .stats()
            .occupancy
            == 0)
        .await
    );
}

#[tokio::test]
async fn a_busy_port_is_an_error_naming_listen() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let env = std::collections::HashMap::<String, String>::new();
    let args: Vec<String> = vec!["-listen".into(), addr.clone(), "-data-dir=".into()];
    let config = match concert::config::load(&args, &env).unwrap() {
        concert::config::Loaded::Run(config) => *config,
        _ => unreachable!(),
    };
    let err = concert::start(config, None)
        .await
        .err()
        .expect("port is busy");
    assert!(err.to_string().contains("listen"), "{err}");
}

#[tokio::test]
async fn http2_header_blocks_over_the_size_limit_get_431() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    // The h2 layer answers this one itself (`max_header_list_size`), before the pipeline.
    let response = client
        .get(url(&concert, "/page"))
        .header("x-big", "b".repeat(70_000))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    assert_eq!(origin.hits(), 0);
}

/// Credentials in `-upstream` are neither published by the public stats nor sent to the origin.
#[tokio::test]
async fn upstream_credentials_stay_out_of_stats_and_requests() {
    let origin = origins::echo_origin();
    let addr = origin.addr();
    let upstream = format!("http://admin:s3cret@{addr}");
    let concert = concert(&["-upstream", upstream.as_str()]).await;
    let stats = json_of(plain_client().get(url(&concert, "/_room/stats"))).await;
    assert_eq!(stats["upstream"], format!("http://{addr}"));
    let echoed = json_of(plain_client().get(url(&concert, "/page"))).await;
    let headers = echoed["headers"].as_object().unwrap();
    assert!(!headers.contains_key("authorization"), "{echoed}");
    assert!(!echoed.to_string().contains("s3cret"), "{echoed}");
}

/// An idle HTTP/2 connection is closed with GOAWAY, not just dropped: a client about to reuse
/// it learns which of its requests were not taken. Spoken frame by frame, so the test sees the
/// GOAWAY itself.
#[tokio::test]
async fn idle_http2_connections_say_goaway_before_closing() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    const GOAWAY: u8 = 0x7;
    const ACK: u8 = 0x1;
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }
    let origin = origins::fast_origin();
    let concert = concert_with_idle_limit(&origin, IDLE_LIMIT).await;
    let mut stream = tokio::net::TcpStream::connect(concert.addr).await.unwrap();
    let mut opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    opening.extend(frame(SETTINGS, 0, 0, &[]));
    // GET / with :authority "x", from HPACK's static table: :method GET, :scheme http, :path /.
    let block = [0x82, 0x86, 0x84, 0x01, 0x01, b'x'];
    opening.extend(frame(0x1, 0x4 | 0x1, 1, &block));
    stream.write_all(&opening).await.unwrap();

    let started = std::time::Instant::now();
    let (mut kinds, mut goaway_at) = (Vec::new(), None);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut chunk))
            .await
            .expect("the connection was left open");
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        while buf.len() >= 9 {
            let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            let payload = buf[9..9 + len].to_vec();
            buf.drain(..9 + len);
            kinds.push(kind);
            match kind {
                SETTINGS if flags & ACK == 0 => {
                    stream
                        .write_all(&frame(SETTINGS, ACK, 0, &[]))
                        .await
                        .unwrap();
                }
                PING if flags & ACK == 0 => {
                    stream
                        .write_all(&frame(PING, ACK, 0, &payload))
                        .await
                        .unwrap();
                }
                GOAWAY => {
                    goaway_at.get_or_insert(started.elapsed());
                    let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                    assert_eq!(code, 0, "GOAWAY with NO_ERROR");
                }
                _ => {}
            }
        }
    }
    let closed_at = started.elapsed();
    assert!(kinds.contains(&0x1), "no response headers: {kinds:?}");
    let goaway_at = goaway_at.unwrap_or_else(|| panic!("closed without GOAWAY: {kinds:?}"));
    assert!(
        goaway_at >= IDLE_LIMIT - Duration::from_secs(1),
        "GOAWAY after {goaway_at:?}"
    );
    assert!(
        closed_at < IDLE_LIMIT + Duration::from_secs(4),
        "closed after {closed_at:?}"
    );
}

/// Reads from `stream` until `wanted` has been seen or `limit` passes; returns what came.
async fn read_until(stream: &mut tokio::net::TcpStream, wanted: &[u8], limit: Duration) -> Vec<u8> {
    let mut seen = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        while !seen.windows(wanted.len()).any(|w| w == wanted) {
            match tokio::io::AsyncReadExt::read(stream, &mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(limit, read).await;
    seen
}

/// The send timeout the tests below run with.
const SEND_LIMIT: Duration = Duration::from_secs(1);

/// Concert in front of `origin` with the short send timeout (and `args`).
async fn concert_with_send_limit(origin: &origins::Origin, args: &[&str]) -> concert::Running {
    let url = origin.url();
    let mut argv = vec!["-upstream", url.as_str()];
    argv.extend_from_slice(args);
    concert_adjusted(&argv, &[], |config| {
        config.client_send_timeout = SEND_LIMIT;
    })
    .await
}

/// The one answer in flight, which its client has stopped taking, holds its page slot; within
/// the send timeout (and some slack) the slot is free and the origin request abandoned.
async fn assert_stalled_answer_given_up(concert: &concert::Running, origin: &origins::Origin) {
    assert_eq!(concert.app.room.stats().occupancy, 1);
    let freed = eventually(SEND_LIMIT + Duration::from_secs(10), || {
        concert.app.room.stats().occupancy == 0
    })
    .await;
    assert!(freed, "the slot was not given back");
    eventually(Duration::from_secs(5), || origin.in_flight() == 0).await;
    assert_eq!(origin.in_flight(), 0, "the origin request was abandoned");
}

/// A visitor whose browser stops taking the page (a stalled reader, or one holding slots on
/// purpose) is cut off once it has taken nothing for the send timeout, and its slot goes to
/// the next in line; a reader that is merely slow is not.
#[tokio::test]
async fn a_client_that_stops_reading_gives_its_slot_back_after_the_send_timeout() {
    use tokio::io::AsyncWriteExt as _;
    let origin = origins::large_origin(256 * 1024 * 1024);
    let concert = concert_with_send_limit(&origin, &["-cap", "1"]).await;
    let mut stalled = tokio::net::TcpStream::connect(concert.addr).await.unwrap();
    stalled
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let head = read_until(&mut stalled, b"\r\n\r\n", Duration::from_secs(5)).await;
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
    // The stalled reader keeps its connection open and never reads again.
    assert_stalled_answer_given_up(&concert, &origin).await;

    // A reader that keeps taking bytes, in small steps, gets its whole answer.
    let slow_origin = origins::large_origin(8 * 1024 * 1024);
    let concert = concert_with_send_limit(&slow_origin, &[]).await;
    let mut slow = tokio::net::TcpStream::connect(concert.addr).await.unwrap();
    slow.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut received = 0usize;
    let mut chunk = vec![0u8; 256 * 1024];
    let reading = async {
        loop {
            match tokio::io::AsyncReadExt::read(&mut slow, &mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(read) => received += read,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), reading)
        .await
        .expect("the slow reader finished");
    assert!(received > 8 * 1024 * 1024, "{received} bytes");
}

/// An HTTP/2 connection to Concert with a stream window of `window` bytes, which hyper's client
/// opens again only as the caller reads each body.
async fn http2_with_window(
    addr: std::net::SocketAddr,
    window: u32,
) -> hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Window updates are small writes: without this each waits for the last one's ACK.
    stream.set_nodelay(true).unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(window)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

/// Over HTTP/2 a client holds an answer back with flow control instead of leaving the socket
/// unread, and its connection keeps moving (pings, other streams): a stream whose answer it
/// lets nothing more of through for the send timeout is reset, and its slot goes to the next
/// in line, while the connection and its other streams carry on, a slowly read one included.
#[tokio::test]
async fn an_http2_stream_the_client_lets_nothing_through_is_reset_alone() {
    use http_body_util::BodyExt as _;
    const SIZE: usize = 1024 * 1024;
    let origin = origins::large_origin(SIZE);
    let concert = concert_with_send_limit(&origin, &["-cap", "2"]).await;
    let mut connection = http2_with_window(concert.addr, 16 * 1024).await;
    let get = || {
        http::Request::get(format!("http://{}/big", concert.addr))
            .body(http_body_util::Empty::new())
            .unwrap()
    };
    let stalled = connection.send_request(get()).await.unwrap();
    assert_eq!(stalled.status(), 200);
    // Kept and not read, so its window never opens again.
    let mut stalled = stalled.into_body();

    // A second stream on the same connection, read a frame every 50 ms (well within the limit
    // each time) until the stalled one has given its slot back, then to its end.
    let mut slow = connection.send_request(get()).await.unwrap().into_body();
    let (mut received, mut received_when_freed) = (0usize, None);
    let reading = async {
        while let Some(frame) = slow.frame().await {
            let frame = frame.expect("the slowly read stream was not cut");
            received += frame.data_ref().map_or(0, bytes::Bytes::len);
            if received_when_freed.is_none() {
                if concert.app.room.stats().occupancy == 1 {
                    received_when_freed = Some(received);
                } else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    };
    tokio::time::timeout(SEND_LIMIT + Duration::from_secs(30), reading)
        .await
        .expect("the slow reader finished");
    assert_eq!(received, SIZE);
    let freed_at = received_when_freed.expect("the stalled stream's slot was given back");
    assert!(
        freed_at < SIZE,
        "freed only once the other stream had ended"
    );
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 0).await);

    // The stalled stream got what fitted in its window, then was reset.
    let mut taken = 0usize;
    let ended = loop {
        match stalled.frame().await {
            Some(Ok(frame)) => taken += frame.data_ref().map_or(0, bytes::Bytes::len),
            Some(Err(error)) => break Err(error),
            None => break Ok(()),
        }
    };
    assert!(
        ended.is_err(),
        "the stalled stream ended normally after {taken} bytes"
    );
    assert!(taken <= 16 * 1024, "{taken} bytes");

    // The connection is still good for the next request.
    let again = connection.send_request(get()).await.unwrap();
    assert_eq!(again.status(), 200);
    let body = again.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.len(), SIZE);
}

// The header timeout (10 s) bounds the wait for a request head, never an answer in progress
// or a tunnel: a response streamed for longer, and a WebSocket silent for longer, both carry on.
#[tokio::test]
async fn answers_and_tunnels_outlast_the_header_timeout() {
    use tokio::io::AsyncWriteExt as _;
    let streaming = origins::streaming_origin(7, Duration::from_secs(2));
    let streamed = concert(&["-upstream", &streaming.url()]).await;
    let mut stream = tokio::net::TcpStream::connect(streamed.addr).await.unwrap();
    stream
        .write_all(b"GET /feed HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let answer = read_until(&mut stream, b"chunk 6\n", Duration::from_secs(20)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.contains("chunk 6\n"),
        "cut off after {:?}: {text}",
        started.elapsed()
    );
    assert!(
        started.elapsed() >= Duration::from_secs(11),
        "{:?}",
        started.elapsed()
    );
    // The connection is still good for the next request.
    stream
        .write_all(b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let again = read_until(&mut stream, b"chunk 0\n", Duration::from_secs(5)).await;
    assert!(String::from_utf8_lossy(&again).starts_with("HTTP/1.1 200"));

    let echo = origins::ws_echo_origin();
    let tunnelled = concert(&["-upstream", &echo.url(), "-bypass", "/ws"]).await;
    let mut stream = tokio::net::TcpStream::connect(tunnelled.addr)
        .await
        .unwrap();
    stream
        .write_all(b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        .await
        .unwrap();
    let handshake = read_until(&mut stream, b"\r\n\r\n", Duration::from_secs(5)).await;
    assert!(String::from_utf8_lossy(&handshake).starts_with("HTTP/1.1 101 "));
    tokio::time::sleep(Duration::from_secs(12)).await;
    // A masked text frame (all-zero mask) after the silence is still echoed.
    let mut frame = vec![0x81, 0x80 | 5, 0, 0, 0, 0];
    frame.extend_from_slice(b"later");
    stream.write_all(&frame).await.unwrap();
    let echoed = read_until(&mut stream, b"later", Duration::from_secs(5)).await;
    assert!(echoed.windows(5).any(|w| w == b"later"), "{echoed:?}");
}
