//! IP details end to end: a real IPtoASN file (plain and gzip) written to a temp dir and
//! watched on a short poll, and a real naddr stub on loopback. Nothing leaves the machine.

use std::collections::HashMap;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use concert::ipinfo::{IpDetails, IpInfo, Source, Status, WARM_BUDGET};
use serde_json::json;
use tokio::time::Instant;

const HEADER: &str = "range_start\trange_end\tAS_number\tcountry_code\tAS_description\n";
const ROWS: &str = "45.138.12.0\t45.138.12.255\t218785\tLT\tUAB Cherry Servers\n\
    100.64.0.0\t100.127.255.255\t0\tNone\tNot routed\n\
    198.51.0.0\t198.51.255.255\t64496\tUS\tExample Range Net\n\
    2001:1948::\t2001:1948:ffff:ffff:ffff:ffff:ffff:ffff\t11537\tUS\tInternet2\n";
/// The same data and one more range, for reloads.
const EXTRA_ROW: &str = "203.0.113.0\t203.0.113.255\t64511\tNL\tReloaded Net\n";
/// Two ranges that overlap: a file no reload may take.
const OVERLAPPING: &str = "10.0.0.0\t10.0.1.255\t1\tUS\tA\n10.0.1.0\t10.0.2.255\t2\tUS\tB\n";

/// Longest any test waits for background work; the poll in these tests is 1 s.
const PATIENCE: Duration = Duration::from_secs(8);

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn env_of(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.clone()))
        .collect();
    move |key| map.get(key).cloned()
}

/// Replaces the file whole (write beside it, then rename), as the update script does.
fn write_plain(path: &Path, text: &str) {
    let staging = path.with_extension("staging");
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(&staging, path).unwrap();
}

fn write_gzip(path: &Path, text: &str) {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(text.as_bytes()).unwrap();
    let staging = path.with_extension("staging");
    std::fs::write(&staging, encoder.finish().unwrap()).unwrap();
    std::fs::rename(&staging, path).unwrap();
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < give_up, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn file_env(path: &Path) -> impl Fn(&str) -> Option<String> + use<> {
    env_of(&[
        ("NADDR_DATA", path.display().to_string()),
        ("NADDR_DATA_POLL", "1s".to_string()),
    ])
}

async fn loaded_from(path: &Path) -> Arc<IpInfo> {
    let info = IpInfo::from_env(&file_env(path));
    wait_until("the first load", || info.source() == Source::Local).await;
    info
}

fn assert_cherry_servers(details: &IpDetails) {
    assert_eq!(details.status, Status::Found);
    assert_eq!(details.version, 4);
    assert_eq!(details.country_code.as_deref(), Some("LT"));
    assert_eq!(details.country, "Lithuania");
    assert_eq!(details.flag, "🇱🇹");
    assert_eq!(details.flag_title, "Lithuania (LT)");
    assert_eq!(details.asn, 218785);
    assert_eq!(details.description, "UAB Cherry Servers");
    assert!(details.routed);
    assert_eq!(details.range, "45.138.12.0/24");
    let ipv8 = details
        .ipv8
        .as_ref()
        .expect("IPv4 in a routed network has IPv8 forms");
    assert_eq!(ipv8.ip8, "0.3.86.161.45.138.12.24");
    assert_eq!(ipv8.ip8asn, "218785.45.138.12.24");
    assert_eq!(ipv8.range8, "0.3.86.161.45.138.12.0/56");
    assert_eq!(ipv8.range8asn, "218785.45.138.12.0/24");
    let logged = details.log_info().expect("found addresses are logged");
    assert_eq!(
        (logged.country_code.as_deref(), logged.asn),
        (Some("LT"), 218785)
    );
}

fn assert_local_data(info: &IpInfo) {
    assert_cherry_servers(&info.lookup(ip("45.138.12.24")));

    let internet2 = info.lookup(ip("2001:1948::5"));
    assert_eq!(internet2.status, Status::Found);
    assert_eq!(internet2.version, 6);
    assert_eq!(internet2.flag, "🇺🇸");
    assert_eq!(internet2.description, "Internet2");
    assert_eq!(internet2.ipv8, None, "IPv6 has no IPv8 forms");

    let unrouted = info.lookup(ip("100.64.0.1"));
    assert_eq!(unrouted.status, Status::Found);
    assert!(!unrouted.routed);
    assert_eq!(unrouted.asn, 0);
    assert_eq!(unrouted.flag, "🌐");
    assert_eq!(unrouted.flag_title, "No country assigned");
    assert_eq!(unrouted.description, "Not routed");

    let unknown = info.lookup(ip("8.8.8.8"));
    assert_eq!(unknown.status, Status::NotFound);
    assert_eq!(unknown.version, 4);
    assert_eq!(unknown.ipv8, None);
    assert_eq!(unknown.log_info(), None);

    let range_ban = info.lookup_net("198.51.0.0/16".parse().unwrap());
    assert_eq!(range_ban.status, Status::Found);
    assert_eq!(range_ban.range, "198.51.0.0/16");
    assert_eq!(range_ban.addr, ip("198.51.0.0"));

    let one_v6_client = info.lookup_net("2001:1948:0:1::/64".parse().unwrap());
    assert_eq!(one_v6_client.status, Status::Found);
    assert_eq!(one_v6_client.description, "Internet2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_file_gives_full_details_for_every_kind_of_address() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ip2asn-combined.tsv");
    write_plain(&path, &format!("{HEADER}{ROWS}"));
    let info = loaded_from(&path).await;
    assert_eq!(
        info.describe(),
        "ip2asn-combined.tsv (3 IPv4 | 1 IPv6 | 3 ASNs)"
    );
    assert_local_data(&info);
    assert_eq!(info.stats().loads, 1);
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_file_is_read_like_the_plain_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ip2asn-combined.tsv.gz");
    write_gzip(&path, &format!("{HEADER}{ROWS}").replace('\n', "\r\n"));
    let info = loaded_from(&path).await;
    assert_eq!(
        info.describe(),
        "ip2asn-combined.tsv.gz (3 IPv4 | 1 IPv6 | 3 ASNs)"
    );
    assert_local_data(&info);
    info.stop().await;
}

#[tokio::test]
async fn without_settings_it_is_off_and_an_address_shows_bare() {
    let info = IpInfo::from_env(&|_: &str| None);
    assert_eq!(
        info.describe(),
        "off: neither NADDR_DATA nor NADDR_ADDR is set"
    );
    let bare = info.lookup(ip("45.138.12.24"));
    assert_eq!(bare.status, Status::Unavailable);
    assert_eq!(
        (bare.version, &bare.ipv8),
        (4, &None),
        "only the IPv4 badge"
    );
    assert_eq!(bare.log_info(), None);
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_file_is_off_and_retrying_then_picked_up_once_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("later.tsv");
    let info = IpInfo::from_env(&file_env(&path));
    wait_until("the first attempt to fail", || {
        info.describe().contains("retrying")
    })
    .await;
    let described = info.describe();
    assert!(
        described.starts_with("off: NADDR_DATA later.tsv not loaded"),
        "{described}"
    );
    assert!(described.ends_with("retrying every 1s"), "{described}");
    assert_eq!(info.source(), Source::Off);
    assert_eq!(info.lookup(ip("45.138.12.24")).status, Status::Unavailable);

    write_plain(&path, &format!("{HEADER}{ROWS}"));
    wait_until("the file to be picked up", || {
        info.source() == Source::Local
    })
    .await;
    assert_eq!(info.describe(), "later.tsv (3 IPv4 | 1 IPv6 | 3 ASNs)");
    assert_cherry_servers(&info.lookup(ip("45.138.12.24")));
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_file_is_reloaded_and_a_bad_one_keeps_the_data_it_had() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ip2asn.tsv");
    write_plain(&path, &format!("{HEADER}{ROWS}"));
    let info = loaded_from(&path).await;
    // Cached as not found; the reload must forget that.
    assert_eq!(info.lookup(ip("203.0.113.5")).status, Status::NotFound);

    write_gzip(&path, &format!("{HEADER}{ROWS}{EXTRA_ROW}"));
    wait_until("the reload", || info.stats().loads == 2).await;
    assert_eq!(info.describe(), "ip2asn.tsv (4 IPv4 | 1 IPv6 | 4 ASNs)");
    let added = info.lookup(ip("203.0.113.5"));
    assert_eq!(added.status, Status::Found);
    assert_eq!(added.description, "Reloaded Net");

    write_plain(&path, OVERLAPPING);
    wait_until("the bad file to be refused", || {
        info.stats().refused_reloads == 1
    })
    .await;
    assert_eq!(info.describe(), "ip2asn.tsv (4 IPv4 | 1 IPv6 | 4 ASNs)");
    assert_eq!(info.lookup(ip("203.0.113.5")).description, "Reloaded Net");
    assert_cherry_servers(&info.lookup(ip("45.138.12.24")));

    write_plain(&path, &format!("{HEADER}{ROWS}"));
    wait_until("the good file after the bad one", || {
        info.stats().loads == 3
    })
    .await;
    assert_eq!(info.lookup(ip("203.0.113.5")).status, Status::NotFound);
    assert_eq!(
        info.stats().refused_reloads,
        1,
        "the bad file was refused once, not per poll"
    );
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_polling_off_the_file_is_loaded_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("once.tsv");
    write_plain(&path, &format!("{HEADER}{ROWS}"));
    let info = IpInfo::from_env(&env_of(&[
        ("NADDR_DATA", path.display().to_string()),
        ("NADDR_DATA_POLL", "off".to_string()),
    ]));
    wait_until("the first load", || info.source() == Source::Local).await;
    write_plain(&path, &format!("{HEADER}{ROWS}{EXTRA_ROW}"));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(info.stats().loads, 1);
    assert_eq!(info.lookup(ip("203.0.113.5")).status, Status::NotFound);
    info.stop().await;
}

/// A naddr service on loopback, under `/naddr` and at the root, that answers by address: two
/// known ones, a 404, a 500, answers of 64 KiB and just over, and ones that never answer.
struct NaddrStub {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    server: tokio::task::JoinHandle<()>,
}

const STUB_NOT_FOUND: &str = "192.0.2.1";
const STUB_BROKEN: &str = "192.0.2.99";
const STUB_HUGE: &str = "192.0.2.88";
const STUB_STALLED: &str = "192.0.2.77";
/// Answers of exactly the most a lookup reads (64 KiB), and one byte more.
const STUB_FULL_SIZE: &str = "192.0.2.64";
const STUB_ONE_BYTE_OVER: &str = "192.0.2.65";
/// Every address in 10.0.0.0/8 stalls like [`STUB_STALLED`].
const STALLED_NET: u32 = 0x0a00_0000;

/// A JSON answer of exactly `size` bytes, padded in its description.
fn answer_of_size(size: usize) -> Response {
    let head = r#"{"success":true,"country_code":"LT","asn":64500,"routed":true,"description":""#;
    let tail = r#""}"#;
    let body = format!("{head}{}{tail}", "x".repeat(size - head.len() - tail.len()));
    assert_eq!(body.len(), size);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

impl NaddrStub {
    async fn start() -> NaddrStub {
        let requests = Arc::new(AtomicU64::new(0));
        let router = axum::Router::new()
            .route("/naddr/ip", axum::routing::get(answer))
            .route("/ip", axum::routing::get(answer))
            .with_state(Arc::clone(&requests));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        NaddrStub {
            addr,
            requests,
            server,
        }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Given with a trailing slash, to be normalized away.
    fn env(&self) -> impl Fn(&str) -> Option<String> + use<> {
        env_of(&[("NADDR_ADDR", format!("http://{}/naddr/", self.addr))])
    }
}

impl Drop for NaddrStub {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn answer(
    State(requests): State<Arc<AtomicU64>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    requests.fetch_add(1, Ordering::SeqCst);
    if headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) != Some("application/json") {
        return (StatusCode::NOT_ACCEPTABLE, "JSON only").into_response();
    }
    let addr = query.get("addr").map(String::as_str).unwrap_or("");
    match addr {
        "45.138.12.24" => axum::Json(json!({
            "error": null, "success": true, "v": 4, "country": "Lithuania", "country_code": "LT",
            "n": "45.138.12.0/24", "asn": 218785, "description": "UAB Cherry Servers",
            "routed": true, "ip4": "45.138.12.24", "ip6": "", "ip8": "0.3.86.161.45.138.12.24",
            "ip8asn": "218785.45.138.12.24", "range4": "45.138.12.0/24", "range6": "",
            "range8": "0.3.86.161.45.138.12.0/56", "range8asn": "218785.45.138.12.0/24"
        }))
        .into_response(),
        "2001:1948::5" => axum::Json(json!({
            "error": null, "success": true, "v": 6, "country": "United States",
            "country_code": "US", "n": "2001:1948::/32", "asn": 11537, "description": "Internet2",
            "routed": true, "ip4": "", "ip6": "2001:1948::5", "ip8": "", "ip8asn": "",
            "range4": "", "range6": "2001:1948::/32", "range8": "", "range8asn": ""
        }))
        .into_response(),
        STUB_NOT_FOUND => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": "not found", "success": false})),
        )
            .into_response(),
        STUB_BROKEN => (StatusCode::INTERNAL_SERVER_ERROR, "broken").into_response(),
        STUB_HUGE => {
            axum::Json(json!({"success": true, "description": "x".repeat(100_000)})).into_response()
        }
        STUB_FULL_SIZE => answer_of_size(64 * 1024),
        STUB_ONE_BYTE_OVER => answer_of_size(64 * 1024 + 1),
        STUB_STALLED => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        other
            if other
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|v4| u32::from(v4) >> 24 == STALLED_NET >> 24) =>
        {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        _ => (StatusCode::BAD_REQUEST, "invalid").into_response(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmed_naddr_lookups_are_complete_before_the_page_renders() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    assert_eq!(info.source(), Source::Remote);
    assert_eq!(
        info.describe(),
        format!(
            "NADDR_ADDR naddr service at http://{}/naddr (0 lookups failed)",
            stub.addr
        )
    );

    let page = [ip("45.138.12.24"), ip("2001:1948::5")];
    let warmed = info.warm(&page, Instant::now() + WARM_BUDGET).await;
    assert_cherry_servers(&warmed[0]);
    assert_eq!(warmed[1].status, Status::Found);
    assert_eq!(warmed[1].flag_title, "United States (US)");
    assert_eq!(warmed[1].range, "2001:1948::/32");
    assert_eq!(warmed[1].ipv8, None);
    assert_eq!(stub.requests(), 2);

    // The next view is served from the cache.
    assert_cherry_servers(&info.lookup(ip("45.138.12.24")));
    assert_eq!(stub.requests(), 2);
    assert_eq!(info.stats().failed_lookups, 0);
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwarmed_miss_shows_pending_then_lands_for_the_next_view() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    assert_eq!(info.lookup(ip("45.138.12.24")).status, Status::Pending);
    wait_until("the background lookup", || {
        info.lookup(ip("45.138.12.24")).status == Status::Found
    })
    .await;
    assert_eq!(stub.requests(), 1, "repeated views while pending ask once");
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_is_a_miss_and_not_a_failure() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    let warmed = info
        .warm(&[ip(STUB_NOT_FOUND)], Instant::now() + WARM_BUDGET)
        .await;
    assert_eq!(warmed[0].status, Status::NotFound);
    assert_eq!(info.stats().failed_lookups, 0);
    assert!(
        info.describe().ends_with("(0 lookups failed)"),
        "{}",
        info.describe()
    );
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_lookups_are_counted_and_not_repeated_at_once() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    let warmed = info
        .warm(
            &[ip(STUB_BROKEN), ip(STUB_HUGE), ip("198.51.100.1")],
            Instant::now() + WARM_BUDGET,
        )
        .await;
    assert!(
        warmed
            .iter()
            .all(|details| details.status == Status::Unavailable),
        "{warmed:?}"
    );
    assert_eq!(info.stats().failed_lookups, 3);
    assert!(
        info.describe().ends_with("(3 lookups failed)"),
        "{}",
        info.describe()
    );
    let asked = stub.requests();
    assert_eq!(info.lookup(ip(STUB_BROKEN)).status, Status::Unavailable);
    assert_eq!(
        stub.requests(),
        asked,
        "a failure is remembered for a minute"
    );
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_never_block_on_a_stalled_service() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    let started = Instant::now();
    assert_eq!(info.lookup(ip(STUB_STALLED)).status, Status::Pending);
    // The stub holds its answer 30 s and the client gives up at 3 s: any bound well below
    // both shows the caller did not wait, with room for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(1));

    let budget = Duration::from_millis(200);
    let warmed = info
        .warm(&[ip(STUB_STALLED)], Instant::now() + budget)
        .await;
    assert_eq!(warmed[0].status, Status::Pending);
    assert!(started.elapsed() < budget + Duration::from_secs(1));

    let stopping = Instant::now();
    info.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(1),
        "stop waits for no stalled lookup"
    );
    drop(stub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_64_kib_is_not_read_and_counts_as_a_failure() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    let warmed = info
        .warm(
            &[ip(STUB_FULL_SIZE), ip(STUB_ONE_BYTE_OVER)],
            Instant::now() + WARM_BUDGET,
        )
        .await;
    assert_eq!(warmed[0].status, Status::Found, "64 KiB is read");
    assert!(warmed[0].description.len() > 65_000);
    assert_eq!(
        warmed[1].status,
        Status::Unavailable,
        "one byte more is not"
    );
    assert_eq!(info.stats().failed_lookups, 1);
    info.stop().await;
}

#[tokio::test]
async fn a_service_that_never_answers_is_given_up_on_after_three_seconds() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    // Paused, the clock jumps to the next timer whenever nothing else can run: the lookup's
    // own limit, long before the stub's 30 s.
    tokio::time::pause();
    let asked = Instant::now();
    let warmed = info
        .warm(&[ip(STUB_STALLED)], asked + Duration::from_secs(60))
        .await;
    let waited = asked.elapsed();
    assert_eq!(warmed[0].status, Status::Unavailable);
    assert_eq!(info.stats().failed_lookups, 1);
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    assert_eq!(stub.requests(), 1);
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_eight_lookups_run_and_1024_wait_beyond_that_none_is_started() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    let stalled = |n: u32| IpAddr::V4(std::net::Ipv4Addr::from(STALLED_NET + n));
    for n in 0..1024 {
        assert_eq!(info.lookup(stalled(n)).status, Status::Pending, "{n}");
    }
    // The 1,025th is not looked up at all, and not remembered as failed either.
    assert_eq!(info.lookup(stalled(1024)).status, Status::Unavailable);
    assert_eq!(info.lookup(stalled(1024)).status, Status::Unavailable);
    assert_eq!(info.stats().cached, 0);
    wait_until("eight lookups at the service", || stub.requests() == 8).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stub.requests(), 8, "no more than eight at once");
    assert_eq!(info.stats().failed_lookups, 0);
    let stopping = Instant::now();
    info.stop().await;
    assert!(stopping.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn remote_answers_expire_after_their_own_ttl() {
    let stub = NaddrStub::start().await;
    let info = IpInfo::from_env(&stub.env());
    info.warm(
        &[ip("45.138.12.24"), ip(STUB_NOT_FOUND), ip(STUB_BROKEN)],
        Instant::now() + WARM_BUDGET,
    )
    .await;
    assert_eq!(stub.requests(), 3);

    // From here the clock only moves when told, so each entry's expiry is checked exactly.
    tokio::time::pause();
    let status = |text: &str| info.lookup(ip(text)).status;
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(status(STUB_BROKEN), Status::Unavailable);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        status(STUB_BROKEN),
        Status::Pending,
        "an error is kept one minute"
    );

    tokio::time::advance(Duration::from_secs(8 * 60)).await;
    assert_eq!(status(STUB_NOT_FOUND), Status::NotFound);
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(
        status(STUB_NOT_FOUND),
        Status::Pending,
        "a 404 is kept ten minutes"
    );

    tokio::time::advance(Duration::from_secs(48 * 60)).await;
    assert_eq!(status("45.138.12.24"), Status::Found);
    tokio::time::advance(Duration::from_secs(2 * 60)).await;
    assert_eq!(
        status("45.138.12.24"),
        Status::Pending,
        "an answer is kept one hour"
    );
    info.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_answers_while_the_file_is_missing_and_the_file_wins_once_loaded() {
    let stub = NaddrStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ip2asn.tsv.gz");
    let info = IpInfo::from_env(&env_of(&[
        (
            "NADDR_ADDR",
            format!("{}:{}", stub.addr.ip(), stub.addr.port()),
        ),
        ("NADDR_DATA", path.display().to_string()),
        ("NADDR_DATA_POLL", "1s".to_string()),
    ]));
    wait_until("the first attempt to fail", || {
        info.describe().contains("retrying")
    })
    .await;
    let described = info.describe();
    assert!(
        described.starts_with(&format!(
            "NADDR_ADDR naddr service at http://{} (0 lookups failed); NADDR_DATA ip2asn.tsv.gz not loaded",
            stub.addr
        )),
        "{described}"
    );
    assert_eq!(info.source(), Source::Remote);
    let meanwhile = info
        .warm(&[ip("45.138.12.24")], Instant::now() + WARM_BUDGET)
        .await;
    assert_cherry_servers(&meanwhile[0]);
    assert_eq!(stub.requests(), 1);

    write_gzip(&path, &format!("{HEADER}{ROWS}"));
    wait_until("the file to take over", || info.source() == Source::Local).await;
    assert_eq!(info.describe(), "ip2asn.tsv.gz (3 IPv4 | 1 IPv6 | 3 ASNs)");
    let asked = stub.requests();
    assert_cherry_servers(&info.lookup(ip("45.138.12.24")));
    assert_eq!(info.lookup(ip("8.8.8.8")).status, Status::NotFound);
    assert_eq!(
        stub.requests(),
        asked,
        "the service is not asked once the file is in"
    );
    info.stop().await;
}
