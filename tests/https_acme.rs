//! Concert alone on its ports with certificates from a real ACME CA: the binary asks Debian's
//! `pebble` (on loopback, see support/acme_lab.rs) for a certificate, answers the validation
//! itself on its own listeners, and serves HTTPS to the origin with it. Pebble's roots are
//! trusted only inside these tests.

#[path = "support/acme_lab.rs"]
mod acme_lab;
mod support;

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acme_lab::{CaOnly, PATIENCE, free_port};
use hyper::StatusCode;
use rustls::pki_types::CertificateDer;
use serde_json::json;
use support::origins;
use support::tls::{HttpsConnection, client_config};

const BIN: &str = env!("CARGO_BIN_EXE_concert");
const NAME: &str = "shop.concert.test";

/// The real binary with its log collected.
struct Concert {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Concert {
    fn start(args: &[String]) -> Concert {
        let mut child = Command::new(BIN)
            .args(["-data-dir="])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stderr.take().unwrap()),
            Box::new(child.stdout.take().unwrap()),
        ];
        for stream in streams {
            let collected = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut log = collected.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        Concert { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Concert {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn flags(
    ca: &CaOnly,
    origin: &str,
    listen: SocketAddr,
    http: Option<SocketAddr>,
    cache: &std::path::Path,
) -> Vec<String> {
    let mut flags = vec![
        "-upstream".to_string(),
        origin.to_string(),
        "-listen".to_string(),
        listen.to_string(),
        "-tls-domains".to_string(),
        NAME.to_string(),
        "-tls-directory".to_string(),
        ca.pebble.directory_url.clone(),
        "-tls-directory-ca".to_string(),
        ca.pebble.listener_root.display().to_string(),
        "-tls-cache".to_string(),
        cache.display().to_string(),
        "-tls-email".to_string(),
        "ops@concert.test".to_string(),
    ];
    if let Some(http) = http {
        flags.extend(["-http-listen".to_string(), http.to_string()]);
    }
    flags
}

/// Opens HTTPS connections to `addr` for [`NAME`], trusting `root` only, until one succeeds
/// (the certificate has arrived) and shows a certificate other than `not`; bounded.
async fn served(
    addr: SocketAddr,
    root: &CertificateDer<'static>,
    not: Option<&CertificateDer<'static>>,
    concert: &Concert,
) -> HttpsConnection {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let config = client_config(&[root], &[b"h2", b"http/1.1"]);
        let last = match HttpsConnection::open(addr, NAME, config).await {
            Ok(connection) if Some(&connection.shown) != not => return connection,
            Ok(_) => "the old certificate".to_string(),
            Err(error) => error,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "no certificate served ({last}):\n{}",
            concert.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// TLS-ALPN-01 on the TLS port (no plain port): the first certificate comes from the CA through
/// Concert's own listener, and a request over it reaches the origin by HTTP/2 with
/// `X-Forwarded-Proto: https`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_on_its_tls_port_concert_gets_a_certificate_over_tls_alpn_01_and_serves_h2() {
    let origin = origins::echo_origin();
    let listen = free_port();
    let ca = CaOnly::start(free_port().port(), listen.port(), None).await;
    let root = ca.pebble.issuing_root().await;
    let cache = ca.temp.path().join("acme");
    let concert = Concert::start(&flags(&ca, &origin.url(), listen, None, &cache));

    let mut connection = served(listen, &root, None, &concert).await;
    assert_eq!(connection.alpn.as_deref(), Some(&b"h2"[..]));
    let answer = connection
        .send("GET", "/hello?x=1", &[("accept", "application/json")])
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    assert_eq!(answer.version, http::Version::HTTP_2);
    assert_eq!(
        answer.json()["headers"]["x-forwarded-proto"],
        json!(["https"])
    );
    // Nothing listens on the CA's HTTP-01 port here, so only TLS-ALPN-01 could have passed.
    let log = concert.log();
    assert!(log.contains("requesting certificates over ACME"), "{log}");
    assert!(log.contains("validates over tls-alpn-01"), "{log}");
}

/// HTTP-01 on the plain port: healthz there says `tls: pending` until the certificate comes,
/// then `ok`; a short-lived certificate is renewed by itself; and a restart with the CA gone
/// serves the cached certificate at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_a_plain_port_concert_uses_http_01_renews_and_restarts_from_its_cache() {
    let origin = origins::echo_origin();
    let listen = free_port();
    let http = free_port();
    let mut ca = CaOnly::start(http.port(), listen.port(), Some(Duration::from_secs(20))).await;
    let root = ca.pebble.issuing_root().await;
    let cache = ca.temp.path().join("acme");
    let concert = Concert::start(&flags(&ca, &origin.url(), listen, Some(http), &cache));

    let first = served(listen, &root, None, &concert).await;
    let log = concert.log();
    assert!(log.contains("validates over http-01"), "{log}");
    let health = plain_get(http, "/_room/healthz").await;
    assert!(health.ends_with("\r\n\r\nok"), "{health}");
    let moved = plain_get(http, "/shop?item=2").await;
    assert!(moved.starts_with("HTTP/1.1 308"), "{moved}");
    assert!(
        moved.contains(&format!(
            "location: https://{NAME}:{}/shop?item=2",
            listen.port()
        )),
        "{moved}"
    );

    // Twenty seconds of validity: renewed once a third of it is left.
    let renewed = served(listen, &root, Some(&first.shown), &concert).await;
    assert_ne!(renewed.shown, first.shown);
    drop(concert);

    ca.pebble.stop();
    let restarted = Concert::start(&flags(&ca, &origin.url(), listen, Some(http), &cache));
    let mut again = served(listen, &root, None, &restarted).await;
    assert_eq!(
        again.shown, renewed.shown,
        "the cached certificate, at once"
    );
    assert_eq!(again.get("/").await.unwrap().status, StatusCode::OK);
}

/// One plain HTTP/1.1 GET with the connection closed after it; the whole answer as text.
async fn plain_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut stream = loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(stream) => break stream,
            Err(error) => {
                assert!(tokio::time::Instant::now() < deadline, "{addr}: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {NAME}:{}\r\nConnection: close\r\n\r\n",
        addr.port()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}
