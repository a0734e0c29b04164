//! Concert's own HTTPS on real sockets: certificates made by a test authority, a client that
//! trusts only it. HTTP/2 and HTTP/1.1 by ALPN through to a real origin, what changes behind
//! TLS (Secure cookies, `X-Forwarded-Proto`, HSTS, stats), clients that speak plain HTTP or
//! stall, SNI, reloading certificates (file changes, SIGHUP, the real binary's start-up
//! checks), switching TLS on and off through the portal's settings on the same socket, and the
//! plain-HTTP port beside HTTPS.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::origins;
use support::tls::{Answer, HttpsConnection, Leaf, TestCa, client_config, https_get};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_concert");
const SITE: &str = "site.test";

/// A test authority and a certificate for `site.test` (and 127.0.0.1) written to a temp dir,
/// the file holding the leaf followed by the authority (a chain).
struct Site {
    ca: TestCa,
    leaf: Leaf,
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
}

impl Site {
    fn new() -> Site {
        let ca = TestCa::new();
        let leaf = ca.leaf(&[SITE, "127.0.0.1"]);
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = leaf.write(dir.path(), "site", &[&ca.pem]);
        Site {
            ca,
            leaf,
            dir,
            cert,
            key,
        }
    }

    fn cert(&self) -> &str {
        self.cert.to_str().unwrap()
    }

    fn key(&self) -> &str {
        self.key.to_str().unwrap()
    }

    /// The flags serving this site's pair.
    fn flags(&self) -> Vec<String> {
        vec![
            "-tls-cert".into(),
            self.cert().into(),
            "-tls-key".into(),
            self.key().into(),
        ]
    }

    async fn open(&self, addr: SocketAddr, alpn: &[&[u8]]) -> HttpsConnection {
        HttpsConnection::open(addr, SITE, client_config(&[&self.ca.der], alpn))
            .await
            .unwrap()
    }

    async fn get(&self, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
        https_get(addr, SITE, &[&self.ca.der], path, headers)
            .await
            .unwrap()
    }
}

/// Concert in-process with `args` (owned strings) and `adjust`.
async fn concert_on(
    args: &[String],
    env: &[(&str, &str)],
    adjust: impl FnOnce(&mut concert::config::Config),
) -> concert::Running {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    concert_adjusted(&args, env, adjust).await
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn https_reaches_the_origin_over_http2_and_http1_with_the_forwarded_proto() {
    let origin = origins::echo_origin();
    let site = Site::new();
    let mut flags = args(&["-upstream", &origin.url()]);
    flags.extend(site.flags());
    let running = concert_on(&flags, &[], |_| {}).await;

    let mut h2 = site.open(running.addr, &[b"h2", b"http/1.1"]).await;
    assert_eq!(h2.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(h2.shown, site.leaf.der, "the site's certificate");
    let answer = h2
        .send("GET", "/hello?x=1", &[("accept", "application/json")])
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    assert_eq!(answer.version, http::Version::HTTP_2);
    let seen = answer.json();
    assert_eq!(seen["path"], "/hello?x=1");
    assert_eq!(seen["headers"]["x-forwarded-proto"], json!(["https"]));
    // Several requests share the HTTP/2 connection.
    for _ in 0..3 {
        assert_eq!(h2.get("/again").await.unwrap().status, StatusCode::OK);
    }

    let mut h1 = site.open(running.addr, &[b"http/1.1"]).await;
    assert_eq!(h1.alpn.as_deref(), Some(&b"http/1.1"[..]));
    let answer = h1.get("/one").await.unwrap();
    assert_eq!(answer.version, http::Version::HTTP_11);
    assert_eq!(
        answer.json()["headers"]["x-forwarded-proto"],
        json!(["https"])
    );
    assert_eq!(
        h1.get("/two").await.unwrap().status,
        StatusCode::OK,
        "kept alive"
    );

    // A client offering no protocol at all speaks HTTP/1.1.
    let mut bare = site.open(running.addr, &[]).await;
    assert_eq!(bare.alpn, None);
    assert_eq!(bare.get("/bare").await.unwrap().status, StatusCode::OK);

    let stats = site.get(running.addr, "/_room/stats", &[]).await.json();
    assert_eq!(stats["tls"], "on");
    assert_eq!(
        site.get(running.addr, "/_room/healthz", &[]).await.text(),
        "ok"
    );
}

#[tokio::test]
async fn every_cookie_set_over_tls_is_secure_and_none_over_plain_http() {
    let origin = origins::held_origin();
    let site = Site::new();
    // Loopback is not a trusted proxy here, so a ban path can ban this test's client.
    let common = [
        "-upstream",
        &origin.url(),
        "-cap",
        "1",
        "-trusted-proxies",
        "192.0.2.1/32",
        "-ban-paths",
        "/.env",
    ];
    let mut flags = args(&common);
    flags.extend(site.flags());
    let running = concert_on(&flags, &[], |_| {}).await;

    // An admitted page gets its admission pass.
    let addr = running.addr;
    let holder = {
        let ca = site.ca.der.clone();
        tokio::spawn(async move { https_get(addr, SITE, &[&ca], "/busy", &[]).await })
    };
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    // Then a browser waits in line: ticket and probe.
    let mut browser = site.open(running.addr, &[b"h2"]).await;
    let waiting = browser
        .send("GET", "/shop", &[("accept", HTML_ACCEPT)])
        .await
        .unwrap();
    assert_eq!(waiting.status, StatusCode::OK, "the waiting page");
    let ticket = waiting.cookies("room_ticket");
    let probe = waiting.cookies("room_probe");
    assert_eq!(ticket.len(), 1, "{:?}", waiting.headers);
    assert!(ticket[0].contains("; Secure"), "{ticket:?}");
    assert!(
        probe.len() == 1 && probe[0].contains("; Secure"),
        "{probe:?}"
    );
    let token = ticket[0]
        .trim_start_matches("room_ticket=")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    origin.release(1);
    let admitted = holder.await.unwrap().unwrap();
    let pass = admitted.cookies("concert_admit");
    assert!(pass.len() == 1 && pass[0].contains("; Secure"), "{pass:?}");

    // A ban clears the ticket, Secure too.
    let cookie = format!("room_ticket={token}");
    let _ = browser.get("/.env").await.unwrap();
    let banned = browser
        .send("GET", "/shop", &[("cookie", &cookie)])
        .await
        .unwrap();
    assert!(banned.status.is_client_error(), "{}", banned.status);
    let cleared = banned.cookies("room_ticket");
    assert!(
        cleared.len() == 1 && cleared[0].contains("Max-Age=0") && cleared[0].contains("; Secure"),
        "{cleared:?}"
    );
    drop(running);

    // The same requests over plain HTTP set the same cookies without Secure.
    let origin = origins::held_origin();
    let plain = concert(&["-upstream", &origin.url(), "-cap", "1"]).await;
    let holder = hold_the_only_slot(&plain, &origin, "/busy").await;
    let waiting = cookie_client()
        .get(url(&plain, "/shop"))
        .header("accept", HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    let lines = set_cookies(&waiting, "room_ticket");
    assert!(
        lines.len() == 1 && !lines[0].contains("Secure"),
        "{lines:?}"
    );
    origin.release(1);
    holder.await.unwrap();
}

#[tokio::test]
async fn a_plain_http_client_on_the_tls_port_gets_a_400_at_once() {
    let site = Site::new();
    let origin = origins::fast_origin();
    let mut flags = args(&["-upstream", &origin.url()]);
    flags.extend(site.flags());
    let running = concert_on(&flags, &[], |_| {}).await;
    let started = Instant::now();
    let answer = raw_exchange(
        running.addr,
        b"GET /shop?item=7 HTTP/1.1\r\nHost: site.test:8443\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(
        answer.contains("this port speaks HTTPS; use https://site.test:8443/shop?item=7"),
        "{answer}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    // Not even a whole request: still an answer, not a wait.
    let answer = raw_exchange(running.addr, b"HELLO", Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("use https://"), "{answer}");
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn a_stalled_handshake_is_closed_at_the_limit() {
    let site = Site::new();
    let origin = origins::fast_origin();
    let mut flags = args(&["-upstream", &origin.url()]);
    flags.extend(site.flags());
    let limit = Duration::from_millis(600);
    let running = concert_on(&flags, &[], |config| config.tls_handshake_timeout = limit).await;

    // Silent after connecting, and silent halfway through a ClientHello.
    for sent in [&b""[..], b"\x16\x03\x01\x00\xc8\x01\x00"] {
        let mut stream = TcpStream::connect(running.addr).await.unwrap();
        stream.write_all(sent).await.unwrap();
        let started = Instant::now();
        let mut rest = Vec::new();
        // A close or a reset both end the read; only a hang fails.
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
            .await
            .expect("the server closes a stalled handshake");
        let waited = started.elapsed();
        assert!(
            waited >= limit - Duration::from_millis(100),
            "{sent:?}: {waited:?}"
        );
        assert!(
            waited < limit + Duration::from_secs(2),
            "{sent:?}: {waited:?}"
        );
    }
    // Within the limit, a handshake works as always.
    assert_eq!(
        site.get(running.addr, "/_room/healthz", &[]).await.text(),
        "ok"
    );
}

/// Challenge answers a test can set: one token, one name's certificate.
struct Answers {
    alpn: Option<Arc<rustls::sign::CertifiedKey>>,
}

impl concert::tls::ChallengeAnswers for Answers {
    fn http01(&self, token: &str) -> Option<String> {
        (token == "tok_1-A").then(|| "tok_1-A.key-authorization".to_string())
    }

    fn tls_alpn01(&self, name: &str) -> Option<Arc<rustls::sign::CertifiedKey>> {
        (name == "a.test").then(|| self.alpn.clone()).flatten()
    }
}

async fn plain_get(
    addr: SocketAddr,
    path: &str,
) -> (StatusCode, String, reqwest::header::HeaderMap) {
    let answer = plain_client()
        .get(format!("http://{addr}{path}"))
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let headers = answer.headers().clone();
    (status, answer.text().await.unwrap(), headers)
}

#[tokio::test]
async fn names_stay_pending_until_installed_then_sni_picks_each_ones_certificate() {
    let origin = origins::fast_origin();
    let ca = TestCa::new();
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path().display().to_string();
    let running = concert(&[
        "-upstream",
        &origin.url(),
        "-tls-domains",
        "a.test,b.test",
        "-http-listen",
        "127.0.0.1:0",
        "-tls-cache",
        &cache,
        // A CA that never answers: the certificates here are installed by hand.
        "-tls-directory",
        &format!("http://{}/directory", closed_port()),
    ])
    .await;
    let http = running.http_addr.expect("the plain port listens");
    let (status, health, _) = plain_get(http, "/_room/healthz").await;
    assert_eq!(
        (status, health.as_str()),
        (StatusCode::OK, "ok\ntls: pending")
    );
    let a = ca.leaf(&["a.test"]);
    let b = ca.leaf(&["b.test"]);
    let connect = |name: &'static str| {
        let config = client_config(&[&ca.der], &[b"h2", b"http/1.1"]);
        HttpsConnection::open(running.addr, name, config)
    };
    // No certificate yet: the handshake fails at once, it does not hang.
    let started = Instant::now();
    assert!(connect("a.test").await.is_err());
    assert!(started.elapsed() < Duration::from_secs(3));

    let store = running.app.tls.store();
    store.install("a.test", a.certified());
    assert_eq!(connect("a.test").await.unwrap().shown, a.der);
    assert!(connect("b.test").await.is_err(), "b.test still has none");
    assert_eq!(running.app.tls.status().as_str(), "pending");
    store.install("b.test", b.certified());
    let mut on_b = connect("b.test").await.unwrap();
    assert_eq!(on_b.shown, b.der);
    assert_eq!(connect("a.test").await.unwrap().shown, a.der);
    assert_eq!(on_b.get("/_room/stats").await.unwrap().json()["tls"], "on");
    assert_eq!(on_b.get("/_room/healthz").await.unwrap().text(), "ok");
    assert_eq!(plain_get(http, "/_room/healthz").await.1, "ok");

    // A TLS-ALPN-01 validation gets the engine's challenge certificate, never the site's.
    let challenge = ca.leaf(&["a.test"]);
    running.app.tls.set_answers(Some(Arc::new(Answers {
        alpn: Some(challenge.certified()),
    })));
    let config = client_config(&[&ca.der], &[concert::tls::ACME_TLS_ALPN]);
    let validation = HttpsConnection::open(running.addr, "a.test", config).await;
    assert_eq!(validation.unwrap().shown, challenge.der);
}

#[tokio::test]
async fn the_plain_port_redirects_with_308_and_answers_challenges() {
    let site = Site::new();
    let origin = origins::fast_origin();
    let mut flags = args(&["-upstream", &origin.url(), "-http-listen", "127.0.0.1:0"]);
    flags.extend(site.flags());
    let running = concert_on(&flags, &[], |_| {}).await;
    let http = running.http_addr.unwrap();
    let port = running.addr.port();
    for (request, location) in [
        (
            "GET /a/b?c=d&e HTTP/1.1\r\nHost: site.test\r\n\r\n".to_string(),
            format!("https://site.test:{port}/a/b?c=d&e"),
        ),
        (
            "POST /form HTTP/1.1\r\nHost: Site.Test:80\r\nContent-Length: 0\r\n\r\n".to_string(),
            format!("https://site.test:{port}/form"),
        ),
        (
            "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n".to_string(),
            format!("https://[::1]:{port}/"),
        ),
    ] {
        let answer = raw_exchange(http, request.as_bytes(), Duration::from_secs(2)).await;
        assert!(answer.starts_with("HTTP/1.1 308 "), "{answer}");
        let lower = answer.to_ascii_lowercase();
        assert!(
            lower.contains(&format!("location: {}", location.to_ascii_lowercase())),
            "{answer}"
        );
        assert!(!lower.contains("strict-transport-security"), "{answer}");
    }
    let answer = raw_exchange(http, b"GET / HTTP/1.0\r\n\r\n", Duration::from_secs(2)).await;
    assert!(
        answer.starts_with("HTTP/1.0 400 ") || answer.starts_with("HTTP/1.1 400 "),
        "{answer}"
    );
    assert_eq!(
        origin.hits(),
        0,
        "nothing reaches the origin from the plain port"
    );

    // Challenges: unknown paths redirect while no engine answers; then answered or 404.
    let (status, _, _) = plain_get(http, "/.well-known/acme-challenge/tok_1-A").await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    running
        .app
        .tls
        .set_answers(Some(Arc::new(Answers { alpn: None })));
    let (status, body, headers) = plain_get(http, "/.well-known/acme-challenge/tok_1-A").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "tok_1-A.key-authorization")
    );
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let (status, _, _) = plain_get(http, "/.well-known/acme-challenge/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_plain_main_listener_answers_challenges_only_while_an_engine_waits() {
    let origin = origins::echo_origin();
    let running = concert(&["-upstream", &origin.url()]).await;
    let path = "/.well-known/acme-challenge/tok_1-A";
    let (status, body, _) = plain_get(running.addr, path).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("acme-challenge"),
        "the origin's answer: {body}"
    );
    running
        .app
        .tls
        .set_answers(Some(Arc::new(Answers { alpn: None })));
    let (status, body, _) = plain_get(running.addr, path).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "tok_1-A.key-authorization")
    );
    running.app.tls.set_answers(None);
    assert!(
        plain_get(running.addr, path)
            .await
            .1
            .contains("acme-challenge")
    );
}

#[tokio::test]
async fn hsts_only_over_tls_and_only_when_set() {
    let site = Site::new();
    let origin = origins::fast_origin();
    let mut flags = args(&["-upstream", &origin.url(), "-hsts", "1h"]);
    flags.extend(site.flags());
    let running = concert_on(&flags, &[], |_| {}).await;
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let mut connection = site.open(running.addr, &[alpn]).await;
        for path in ["/", "/_room/healthz", "/queue/status"] {
            let answer = connection.get(path).await.unwrap();
            assert_eq!(
                answer.header("strict-transport-security"),
                Some("max-age=3600"),
                "{path} over {alpn:?}"
            );
        }
    }
    // A live change reaches the next answer on the same connection.
    let mut connection = site.open(running.addr, &[b"h2"]).await;
    let mut change = serde_json::Map::new();
    change.insert("hsts".into(), json!("0s"));
    running.app.apply_change(&change, &[]).unwrap();
    assert_eq!(
        connection
            .get("/")
            .await
            .unwrap()
            .header("strict-transport-security"),
        None
    );
    drop(running);

    let mut flags = args(&["-upstream", &origin.url()]);
    flags.extend(site.flags());
    let without = concert_on(&flags, &[], |_| {}).await;
    let answer = site.get(without.addr, "/", &[]).await;
    assert_eq!(answer.header("strict-transport-security"), None);

    let plain = concert(&["-upstream", &origin.url(), "-hsts", "1h"]).await;
    let (_, _, headers) = plain_get(plain.addr, "/").await;
    assert!(headers.get("strict-transport-security").is_none());
}

#[tokio::test]
async fn a_changed_pair_on_disk_is_served_to_new_connections_and_a_bad_one_is_not() {
    let site = Site::new();
    let origin = origins::fast_origin();
    let mut flags = args(&["-upstream", &origin.url()]);
    flags.extend(site.flags());
    let running = concert_on(&flags, &[], |_| {}).await;
    let mut old = site.open(running.addr, &[b"h2"]).await;
    assert_eq!(old.shown, site.leaf.der);

    let renewed = site.ca.leaf(&[SITE]);
    renewed.write(site.dir.path(), "site", &[]);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let fresh = site.open(running.addr, &[b"h2"]).await;
        if fresh.shown == renewed.der {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        old.get("/").await.unwrap().status,
        StatusCode::OK,
        "the old connection stays"
    );

    // A key that does not match: the renewed pair stays in service.
    let stranger = site.ca.leaf(&[SITE]);
    std::fs::write(&site.key, &stranger.key_pem).unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(site.open(running.addr, &[b"h2"]).await.shown, renewed.der);
}

/// A running `concert` binary with its log collected.
struct Binary {
    child: Child,
    log: Arc<Mutex<String>>,
    addr: SocketAddr,
}

impl Binary {
    fn start(args: &[&str]) -> Binary {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut child = Command::new(BIN)
            .args(["-listen", &addr.to_string(), "-data-dir="])
            .args(args)
            .env_remove("CONCERT_CAPACITY")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The process log and the access log (stdout) together.
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        for stream in [
            Box::new(stderr) as Box<dyn std::io::Read + Send>,
            Box::new(stdout),
        ] {
            let collected = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut log = collected.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        Binary { child, log, addr }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn still_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn hang_up(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Opens HTTPS connections to `addr` until one shows `want` (bounded).
async fn served_eventually(site: &Site, addr: SocketAddr, want: &Leaf, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(connection) =
            HttpsConnection::open(addr, SITE, client_config(&[&site.ca.der], &[b"h2"])).await
            && connection.shown == want.der
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn sighup_serves_a_new_pair_to_new_connections_while_old_ones_keep_working() {
    let site = Site::new();
    let origin = origins::fast_origin();
    let binary = Binary::start(&[
        "-upstream",
        &origin.url(),
        "-tls-cert",
        site.cert(),
        "-tls-key",
        site.key(),
    ]);
    assert!(
        served_eventually(&site, binary.addr, &site.leaf, Duration::from_secs(15)).await,
        "{}",
        binary.log()
    );
    assert!(binary.log().contains("https on "), "{}", binary.log());
    let mut old = site.open(binary.addr, &[b"h2"]).await;

    // The new pair has the same size and time as the old: only SIGHUP can tell.
    let renewed = site.ca.leaf(&[SITE]);
    let before = std::fs::metadata(&site.cert).unwrap().modified().unwrap();
    renewed.write(site.dir.path(), "site", &[]);
    set_mtime(&site.cert, before);
    set_mtime(&site.key, before);
    binary.hang_up();
    assert!(
        served_eventually(&site, binary.addr, &renewed, Duration::from_secs(5)).await,
        "{}",
        binary.log()
    );
    assert!(
        binary.log().contains("certificate reloaded"),
        "{}",
        binary.log()
    );
    let answer = old.get("/after").await.unwrap();
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "the old connection keeps working"
    );
    assert_eq!(old.shown, site.leaf.der);
    // The access log says how each request came.
    let logged = eventually(Duration::from_secs(5), || {
        binary.log().lines().any(|line| {
            line.contains("/after") && line.contains("scheme=https") && line.contains("HTTP/2.0")
        })
    })
    .await;
    assert!(logged, "{}", binary.log());

    // A bad pair keeps the one served and says why.
    std::fs::write(&site.cert, site.ca.leaf(&[SITE]).cert_pem).unwrap();
    binary.hang_up();
    let said = eventually(Duration::from_secs(5), || {
        binary.log().contains("certificate not reloaded")
    })
    .await;
    assert!(said, "{}", binary.log());
    assert!(binary.log().contains("does not match"), "{}", binary.log());
    assert!(served_eventually(&site, binary.addr, &renewed, Duration::from_secs(2)).await);
}

fn set_mtime(path: &Path, when: std::time::SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

/// Runs the binary with `args` and `env` expecting a failed start; its one line of output.
fn failed_start(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(BIN)
        .args(["-listen", "127.0.0.1:0", "-data-dir="])
        .args(args)
        .env_remove("CONCERT_CAPACITY")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn a_pair_that_cannot_be_served_stops_the_start_naming_the_setting_and_file() {
    let site = Site::new();
    let dir = site.dir.path();
    let missing = dir.join("missing.pem");
    let missing = missing.to_str().unwrap();
    let err = failed_start(&["-tls-cert", missing, "-tls-key", site.key()], &[]);
    assert!(err.contains("-tls-cert") && err.contains(missing), "{err}");

    let stranger = site.ca.leaf(&[SITE]);
    let (_, other_key) = stranger.write(dir, "stranger", &[]);
    let other_key = other_key.to_str().unwrap();
    let err = failed_start(&["-tls-cert", site.cert(), "-tls-key", other_key], &[]);
    assert!(
        err.contains("-tls-key") && err.contains(other_key) && err.contains("does not match"),
        "{err}"
    );

    let expired = site.ca.leaf_valid(&[SITE], -10 * 86_400, -86_400);
    let (old_cert, old_key) = expired.write(dir, "expired", &[]);
    let old_cert = old_cert.to_str().unwrap();
    let err = failed_start(
        &[],
        &[
            ("CONCERT_TLS_CERT", old_cert),
            ("CONCERT_TLS_KEY", old_key.to_str().unwrap()),
        ],
    );
    assert!(
        err.contains("CONCERT_TLS_CERT") && err.contains(old_cert) && err.contains("expired"),
        "{err}"
    );

    let err = failed_start(
        &[
            "-portal-listen",
            "127.0.0.1:0",
            "-portal-tls-cert",
            missing,
            "-portal-tls-key",
            site.key(),
        ],
        &[("CONCERT_PORTAL_PASS", "a portal pass long enough")],
    );
    assert!(
        err.contains("-portal-tls-cert") && err.contains(missing),
        "{err}"
    );
}

/// A loopback address nothing listens on (bound, then let go).
fn closed_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One plain HTTP/1.1 GET, answered whole (the connection is asked to close).
fn get_blocking(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// A CA that cannot be reached at start ends nothing: the names stay pending, the plain port
/// keeps answering, healthz says so, and every failed attempt is logged with its reason.
#[test]
fn an_unreachable_ca_leaves_the_names_pending_and_concert_serving() {
    let cache = tempfile::tempdir().unwrap();
    let http_port = closed_port();
    let mut binary = Binary::start(&[
        "-tls-domains",
        "a.test",
        "-http-listen",
        &http_port.to_string(),
        "-tls-cache",
        &cache.path().display().to_string(),
        "-tls-directory",
        &format!("http://{}/directory", closed_port()),
    ]);
    let tried = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        binary.log().contains("a.test") && binary.log().contains("refused")
    });
    assert!(tried, "{}", binary.log());
    let answer = get_blocking(http_port, "/_room/healthz");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nok\ntls: pending"), "{answer}");
    let log = binary.log();
    assert!(binary.still_running(), "{log}");
    let modes = std::fs::metadata(cache.path()).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&modes) & 0o777,
        0o700
    );
}

/// A signed-in portal operator, for changing settings as an operator does.
struct Operator {
    base: String,
    cookie: String,
    csrf: String,
}

const PASS: &str = "a portal pass for https changes";

async fn sign_in(portal: SocketAddr) -> Operator {
    let base = format!("http://{portal}");
    let client = plain_client();
    let signed_in = support::portal_sign_in(&client, &base, PASS).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = set_cookies(&signed_in, "concert_portal")[0]
        .trim_start_matches("concert_portal=")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = client
        .get(format!("{base}/"))
        .header("cookie", format!("concert_portal={cookie}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let marker = r#"<meta name="csrf-token" content=""#;
    let at = page.find(marker).expect("a CSRF token") + marker.len();
    Operator {
        base,
        cookie,
        csrf: page[at..at + 32].to_owned(),
    }
}

impl Operator {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = plain_client()
            .request(method, format!("{}{path}", self.base))
            .header("cookie", format!("concert_portal={}", self.cookie))
            .header("x-csrf-token", &self.csrf);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let answer = request.send().await.unwrap();
        let status = answer.status();
        (status, answer.json().await.unwrap_or(Value::Null))
    }
}

#[tokio::test]
async fn tls_turns_on_and_off_through_the_portal_on_the_same_socket() {
    let site = Site::new();
    let origin = origins::fast_origin();
    let running = concert_with_env(
        &["-upstream", &origin.url(), "-portal-listen", "127.0.0.1:0"],
        &[("CONCERT_PORTAL_PASS", PASS)],
    )
    .await;
    let operator = sign_in(running.portal_addr.unwrap()).await;
    let addr = running.addr;
    assert_eq!(plain_get(addr, "/").await.0, StatusCode::OK);
    let mut old_plain = TcpStream::connect(addr).await.unwrap();
    let (head, _) =
        keep_alive_exchange(&mut old_plain, "GET /before HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // Files that cannot be served: refused whole, nothing changes.
    let (status, body) = operator
        .send(
            reqwest::Method::POST,
            "/api/settings",
            Some(json!({"tls_cert": site.dir.path().join("nope.pem"), "tls_key": site.key()})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("tls_cert") && error.contains("nope.pem"),
        "{body}"
    );
    assert_eq!(running.app.tls.status().as_str(), "off");
    assert_eq!(plain_get(addr, "/").await.0, StatusCode::OK);

    let (status, body) = operator
        .send(
            reqwest::Method::POST,
            "/api/settings",
            Some(json!({"tls_cert": site.cert(), "tls_key": site.key()})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut tls = site.open(addr, &[b"h2"]).await;
    assert_eq!(tls.get("/_room/stats").await.unwrap().json()["tls"], "on");
    let refused = raw_exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(3),
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 400 "), "{refused}");
    let (head, _) =
        keep_alive_exchange(&mut old_plain, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "a connection from before keeps its protocol: {head}"
    );

    let (status, body) = operator
        .send(
            reqwest::Method::DELETE,
            "/api/settings?key=tls_cert&key=tls_key",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(plain_get(addr, "/").await.0, StatusCode::OK);
    assert!(
        HttpsConnection::open(addr, SITE, client_config(&[&site.ca.der], &[b"h2"]))
            .await
            .is_err()
    );
    assert_eq!(
        tls.get("/").await.unwrap().status,
        StatusCode::OK,
        "the TLS connection stays"
    );
    assert_eq!(room_stats(&running).await["tls"], "off");
}

#[tokio::test]
async fn the_portal_serves_https_with_its_own_certificate() {
    let site = Site::new();
    let running = concert_with_env(
        &[
            "-portal-listen",
            "127.0.0.1:0",
            "-portal-tls-cert",
            site.cert(),
            "-portal-tls-key",
            site.key(),
        ],
        &[("CONCERT_PORTAL_PASS", PASS)],
    )
    .await;
    let portal = running.portal_addr.unwrap();
    let mut connection = site.open(portal, &[b"http/1.1"]).await;
    let page = connection.get("/").await.unwrap();
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text().contains("<form"), "{}", page.text());
    // The public listener is unchanged: plain HTTP.
    assert_eq!(plain_get(running.addr, "/_room/healthz").await.1, "ok");
}

/// A TLS connection to write raw HTTP/1 bytes on.
async fn raw_tls(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(SITE).unwrap();
    tokio_rustls::TlsConnector::from(Arc::clone(config))
        .connect(name, tcp)
        .await
        .unwrap()
}

#[tokio::test]
async fn deadlines_the_smuggling_guard_and_the_drain_hold_over_tls() {
    let site = Site::new();
    let origin = origins::held_origin();
    let mut flags = args(&["-upstream", &origin.url()]);
    flags.extend(site.flags());
    let running = concert_on(&flags, &[], |config| {
        config.keep_alive_idle = Duration::from_millis(800);
    })
    .await;
    let config = Arc::new(client_config(&[&site.ca.der], &[b"http/1.1"]));

    // Ambiguous framing: 400, and the connection closes.
    let mut tls = raw_tls(running.addr, &config).await;
    tls.write_all(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "closed after the refusal");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");

    // An idle keep-alive connection closes at the idle limit.
    let mut tls = raw_tls(running.addr, &config).await;
    origin.release(1);
    tls.write_all(b"GET /once HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut all = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut all)).await;
    eprintln!(
        "DEBUG {:?} after {:?}: {:?}",
        read,
        started.elapsed(),
        String::from_utf8_lossy(&all)
    );
    assert!(read.is_ok(), "the idle connection was closed");
    assert!(String::from_utf8_lossy(&all).starts_with("HTTP/1.1 200"));
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );

    // The drain lets a request in flight finish.
    let addr = running.addr;
    let ca = site.ca.der.clone();
    let in_flight = tokio::spawn(async move { https_get(addr, SITE, &[&ca], "/slow", &[]).await });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    let stopping = tokio::spawn(running.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    origin.release(1);
    let answer = in_flight.await.unwrap().unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    stopping.await.unwrap().unwrap();
}
