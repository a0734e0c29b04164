//! The admin portal's tables as an operator's browser asks for them every three seconds: the
//! Queue fragment with 500 visitors listed (the most it shows), the Bans fragment with 1,000
//! bans, the Visitors fragment with the request history full (4,096 clients, a quarter of them
//! banned) and the Ban log with 1,000 windows, each one whole request to a running portal on
//! loopback (session check, listing, rendering, JSON) for a page of 100 rows, the largest page
//! size offered. Every address is in the IPtoASN file the portal is given, so each row's
//! lookup, flag and badges are measured too. What five operators polling cost follows from
//! these: five requests every three seconds.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use concert::abuse::{BanLength, BanTarget};
use concert::config::{self, Loaded};
use concert::room::{AdmitResult, Arrival, Decision};
use criterion::{Criterion, criterion_group, criterion_main};

const PASS: &str = "a portal pass for the benchmark";

/// Clients in the request history: as many as it keeps.
const HISTORY_CLIENTS: u32 = 4096;
/// Requests logged per client.
const REQUESTS_EACH: u32 = 5;

struct Running {
    concert: concert::Running,
    /// Holds the history log the history was read back from.
    _history_dir: tempfile::TempDir,
    client: reqwest::Client,
    base: String,
    cookie: String,
    /// Holds the only page slot, so arrivals wait in line.
    _slot: Box<dyn std::any::Any>,
}

/// A history log of [`HISTORY_CLIENTS`] clients, each with a few requests in the last hour,
/// for the history to read back at start: the quickest way to fill it as traffic would.
fn history_log(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write as _;
    let path = dir.join("history.jsonl");
    let mut log = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    for request in 0..REQUESTS_EACH {
        for index in 0..HISTORY_CLIENTS {
            let ip = Ipv4Addr::from(HISTORY_FIRST + index);
            let at =
                now - i64::from(HISTORY_CLIENTS * (REQUESTS_EACH - request) - index) * 100_000_000;
            let at = concert::abuse::record::WallTime(at);
            writeln!(
                log,
                r#"{{"t":"req","at":"{at}","ip":"{ip}","method":"GET","path":"/products/{index}?page={request}","status":200,"latency_us":850,"ua":"Mozilla/5.0 (bench)"}}"#
            )
            .unwrap();
        }
    }
    log.flush().unwrap();
    path
}

/// The first address of the request history's clients (and of the bans).
const HISTORY_FIRST: u32 = 0xc633_6400;
/// The first address of the visitors in line.
const LINE_FIRST: u32 = 0x0a00_0000;

/// An IPtoASN combined file covering every address the benchmark shows: the history's clients
/// and the bans in /24s of networks in different countries, the line in one network.
fn ip_to_asn(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write as _;
    let path = dir.join("ip2asn-combined.tsv");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    // In address order, as the file must be.
    let first = Ipv4Addr::from(LINE_FIRST);
    let last = Ipv4Addr::from(LINE_FIRST + 0xffff);
    writeln!(file, "{first}\t{last}\t64999\tNL\tBench Line Network").unwrap();
    let countries = ["LT", "US", "DE", "FR", "NL", "SE", "JP", "BR"];
    for block in 0..HISTORY_CLIENTS.div_ceil(256) {
        let first = Ipv4Addr::from(HISTORY_FIRST + block * 256);
        let last = Ipv4Addr::from(HISTORY_FIRST + block * 256 + 255);
        let country = countries[block as usize % countries.len()];
        writeln!(
            file,
            "{first}\t{last}\t{}\t{country}\tBench Network {block}",
            64_500 + block
        )
        .unwrap();
    }
    file.flush().unwrap();
    path
}

async fn start() -> Running {
    let history_dir = tempfile::tempdir().unwrap();
    let history = history_log(history_dir.path());
    let ip_data = ip_to_asn(history_dir.path());
    let argv: Vec<String> = [
        "-upstream",
        "http://127.0.0.1:9",
        "-cap",
        "1",
        "-portal-listen",
        "127.0.0.1:0",
        "-data-dir=",
        "-max-queue",
        "0",
        "-history-log",
        history.to_str().unwrap(),
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let env = HashMap::from([
        ("CONCERT_PORTAL_PASS".to_string(), PASS.to_string()),
        ("NADDR_DATA".to_string(), ip_data.display().to_string()),
    ]);
    let Ok(Loaded::Run(config)) = config::load(&argv, &env) else {
        panic!("the benchmark's configuration is refused");
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let concert = concert::start(*config, Some(listener)).await.unwrap();
    let room = &concert.app.room;
    let client_at = |index: u32| IpAddr::V4(Ipv4Addr::from(LINE_FIRST + index));
    let Decision::Admit(admission) = room.arrive(Arrival {
        ticket_cookie: None,
        pass_cookie: None,
        client: Some(client_at(0)),
    }) else {
        panic!("the first arrival is admitted");
    };
    let AdmitResult::Admitted(slot) = room.admit(admission).await else {
        panic!("the first arrival takes the slot");
    };
    for index in 1..=500 {
        let waiting = room.arrive(Arrival {
            ticket_cookie: None,
            pass_cookie: None,
            client: Some(client_at(index)),
        });
        assert!(matches!(waiting, Decision::Wait(_)));
    }
    for index in 0..1000u32 {
        let target = BanTarget::Single(IpAddr::V4(Ipv4Addr::from(HISTORY_FIRST + index)));
        concert
            .app
            .abuse
            .ban(target, BanLength::Timed(Duration::from_secs(3600)))
            .unwrap();
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = format!("http://{}", concert.portal_addr.unwrap());
    // The sign-in form's cookie and hidden token go back with the pass.
    let page = client.get(format!("{base}/")).send().await.unwrap();
    let form_cookie = page
        .headers()
        .get("set-cookie")
        .and_then(|value| value.to_str().ok())
        .and_then(|line| line.split(';').next())
        .expect("a sign-in form cookie")
        .to_owned();
    let html = page.text().await.unwrap();
    let marker = r#"name="csrf" value=""#;
    let token = html
        .split_once(marker)
        .and_then(|(_, rest)| rest.split('"').next())
        .expect("a sign-in form token")
        .to_owned();
    let signed_in = client
        .post(format!("{base}/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Cookie", form_cookie)
        .body(format!("csrf={token}&pass={}", PASS.replace(' ', "+")))
        .send()
        .await
        .unwrap();
    let cookie = signed_in
        .headers()
        .get("set-cookie")
        .and_then(|value| value.to_str().ok())
        .and_then(|line| line.split(';').next())
        .expect("a session cookie")
        .to_owned();
    Running {
        concert,
        _history_dir: history_dir,
        client,
        base,
        cookie,
        _slot: Box::new(slot),
    }
}

fn fragments(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let running = runtime.block_on(start());
    let fetch = |path: &str| {
        runtime.block_on(async {
            let answer = running
                .client
                .get(format!("{}{path}", running.base))
                .header("Cookie", &running.cookie)
                .send()
                .await
                .unwrap();
            assert!(answer.status().is_success());
            answer.bytes().await.unwrap()
        })
    };
    // The IPtoASN file is loaded off the async workers just after the start.
    let described = |path: &str| {
        let page = fetch(path);
        let page: serde_json::Value = serde_json::from_slice(&page).unwrap();
        let html = page["html"].as_str().unwrap_or_default();
        html.matches("ip-network").count()
    };
    let loading_since = std::time::Instant::now();
    while described("/api/frag/queue?size=100") < 100 {
        assert!(
            loading_since.elapsed() < Duration::from_secs(30),
            "the IPtoASN file is not loaded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for path in [
        "/api/frag/bans?size=100",
        "/api/frag/visitors?size=100",
        "/api/frag/banlog?size=100",
    ] {
        assert_eq!(described(path), 100, "every row of {path} has its network");
    }
    let listed = fetch("/api/frag/queue?size=100");
    assert!(
        std::str::from_utf8(&listed)
            .unwrap()
            .contains("1–100 of 500 listed")
    );
    c.bench_function("portal/queue_fragment_500_listed", |b| {
        b.iter(|| fetch("/api/frag/queue?size=100"))
    });
    c.bench_function("portal/bans_fragment_1000_bans", |b| {
        b.iter(|| fetch("/api/frag/bans?size=100"))
    });
    // The bans above fall on the first 1,000 of the history's clients: they sort first. The
    // history is full: its shards fill unevenly, so a few of the 4,096 made room for others.
    let visitors: serde_json::Value =
        serde_json::from_slice(&fetch("/api/frag/visitors?size=100")).unwrap();
    let recorded = visitors["total"].as_u64().unwrap();
    assert!(recorded > 3_900, "{}", visitors["summary"]);
    assert!(visitors["html"].as_str().unwrap().contains("table-warning"));
    c.bench_function("portal/visitors_fragment_4096_clients", |b| {
        b.iter(|| fetch("/api/frag/visitors?size=100"))
    });
    c.bench_function("portal/visitors_fragment_4096_clients_filtered", |b| {
        b.iter(|| fetch("/api/frag/visitors?size=100&q=products/40"))
    });
    let log = fetch("/api/frag/banlog?size=100");
    assert!(
        std::str::from_utf8(&log)
            .unwrap()
            .contains("1–100 of 1000 bans")
    );
    c.bench_function("portal/banlog_fragment_1000_windows", |b| {
        b.iter(|| fetch("/api/frag/banlog?size=100"))
    });
    c.bench_function("portal/overview", |b| b.iter(|| fetch("/api/overview")));
    drop(running.concert);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1));
    targets = fragments
}
criterion_main!(benches);
