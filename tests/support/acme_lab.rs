//! A private ACME CA on loopback for the ACME tests: Debian's `pebble` with a listener
//! certificate made here, a DNS responder that sends every name to 127.0.0.1, and the two
//! challenge servers pebble validates against (TLS-ALPN-01 and HTTP-01), answering from
//! whatever engine is plugged into them. Nothing leaves the machine.
// Each test file that includes this uses only part of it.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use concert::tls::{CertificateSink, ChallengeAnswers};
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use parking_lot::{Mutex, RwLock};
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

/// The longest any step of these tests waits.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Which engine the challenge servers answer from; replaced when a test starts a new one.
pub type AnswerSlot = Arc<RwLock<Option<Arc<dyn ChallengeAnswers>>>>;

pub struct Lab {
    pub temp: tempfile::TempDir,
    pub answers: AnswerSlot,
    pub pebble: Pebble,
    pub tls_hits: Arc<AtomicUsize>,
    pub http_hits: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Lab {
    /// Pebble issuing certificates valid for `validity` (its default when `None`), with the
    /// DNS responder and both challenge servers running.
    pub async fn start(validity: Option<Duration>) -> Lab {
        let temp = tempfile::tempdir().unwrap();
        let answers: AnswerSlot = Arc::new(RwLock::new(None));
        let tls_hits = Arc::new(AtomicUsize::new(0));
        let http_hits = Arc::new(AtomicUsize::new(0));
        let (dns, dns_task) = dns_responder().await;
        let (tls_port, tls_task) =
            tls_alpn_server(Arc::clone(&answers), Arc::clone(&tls_hits)).await;
        let (http_port, http_task) =
            http01_server(Arc::clone(&answers), Arc::clone(&http_hits)).await;
        let pebble = Pebble::start(temp.path(), dns, http_port, tls_port, validity).await;
        Lab {
            temp,
            answers,
            pebble,
            tls_hits,
            http_hits,
            tasks: vec![dns_task, tls_task, http_task],
        }
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.temp.path().join("cache")
    }

    pub fn serve_answers_of(&self, answers: Arc<dyn ChallengeAnswers>) {
        *self.answers.write() = Some(answers);
    }
}

/// Pebble alone, for a Concert that answers the challenges itself: pebble validates against
/// `http_port` and `tls_port` on 127.0.0.1, every name resolved there by a DNS responder.
pub struct CaOnly {
    pub temp: tempfile::TempDir,
    pub pebble: Pebble,
    dns: JoinHandle<()>,
}

impl Drop for CaOnly {
    fn drop(&mut self) {
        self.dns.abort();
    }
}

impl CaOnly {
    pub async fn start(http_port: u16, tls_port: u16, validity: Option<Duration>) -> CaOnly {
        let temp = tempfile::tempdir().unwrap();
        let (dns_addr, dns) = dns_responder().await;
        let pebble = Pebble::start(temp.path(), dns_addr, http_port, tls_port, validity).await;
        CaOnly { temp, pebble, dns }
    }
}

pub struct Pebble {
    child: Option<Child>,
    pub directory_url: String,
    management: SocketAddr,
    /// Trusts pebble's own HTTPS listener (not the certificates it issues).
    pub listener_root: PathBuf,
    log: PathBuf,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Pebble {
    async fn start(
        dir: &Path,
        dns: SocketAddr,
        http_port: u16,
        tls_port: u16,
        validity: Option<Duration>,
    ) -> Pebble {
        let listener = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let listener_root = dir.join("pebble-listener.pem");
        let key_path = dir.join("pebble-listener.key");
        std::fs::write(&listener_root, pem("CERTIFICATE", listener.cert.der())).unwrap();
        std::fs::write(
            &key_path,
            pem("PRIVATE KEY", &listener.signing_key.serialize_der()),
        )
        .unwrap();

        let listen = free_port();
        let management = free_port();
        let mut config = serde_json::json!({
            "pebble": {
                "listenAddress": listen.to_string(),
                "managementListenAddress": management.to_string(),
                "certificate": listener_root,
                "privateKey": key_path,
                "httpPort": http_port,
                "tlsPort": tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
            }
        });
        if let Some(validity) = validity {
            config["pebble"]["certificateValidityPeriod"] = validity.as_secs().into();
        }
        let config_path = dir.join("pebble.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let log = dir.join("pebble.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new("pebble")
            .arg("-config")
            .arg(&config_path)
            .arg("-dnsserver")
            .arg(dns.to_string())
            // Validation must really happen, only without pebble's random pauses.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env_remove("PEBBLE_VA_ALWAYS_VALID")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("pebble is not installed (apt-get install pebble)");
        let mut pebble = Pebble {
            child: Some(child),
            directory_url: format!("https://{listen}/dir"),
            management,
            listener_root,
            log,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while tokio::net::TcpStream::connect(listen).await.is_err()
            || tokio::net::TcpStream::connect(management).await.is_err()
        {
            if let Some(child) = pebble.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("pebble exited ({status}): {}", pebble.log());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "pebble did not start listening: {}",
                pebble.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        pebble
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The root that signs what pebble issues; it is made anew each time pebble starts.
    pub async fn issuing_root(&self) -> CertificateDer<'static> {
        let body = self.management_get("/roots/0").await;
        CertificateDer::from_pem_slice(&body).unwrap()
    }

    async fn management_get(&self, path: &str) -> Vec<u8> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(&self.listener_root).unwrap())
            .unwrap();
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .build();
        let client: hyper_util::client::legacy::Client<_, http_body_util::Empty<Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        let uri = format!("https://{}{path}", self.management);
        let response = tokio::time::timeout(PATIENCE, client.get(uri.parse().unwrap()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{uri}");
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec()
    }
}

/// Records what the engine installs.
#[derive(Default)]
pub struct Installed {
    pub certificates: Mutex<Vec<(String, Arc<CertifiedKey>)>>,
}

impl CertificateSink for Installed {
    fn install(&self, name: &str, certified: Arc<CertifiedKey>) {
        self.certificates.lock().push((name.to_string(), certified));
    }
}

impl Installed {
    pub fn count(&self) -> usize {
        self.certificates.lock().len()
    }

    pub fn last(&self) -> Option<(String, Arc<CertifiedKey>)> {
        self.certificates.lock().last().cloned()
    }

    /// Waits (bounded) until `count` certificates have been installed.
    pub async fn wait_for(&self, count: usize, log: impl Fn() -> String) {
        let waited = wait_until(PATIENCE, || self.count() >= count).await;
        assert!(
            waited,
            "{} certificate(s) installed, expected {count}\n{}",
            self.count(),
            log()
        );
    }
}

/// Polls `done` every 50 ms until it holds or `limit` passes; says whether it held.
pub async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks the chain as a client would for `name`, trusting only `root`.
pub fn verify_chain(
    certified: &CertifiedKey,
    root: CertificateDer<'static>,
    name: &str,
) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root)?;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|error| rustls::Error::General(error.to_string()))?;
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|error| rustls::Error::General(error.to_string()))?;
    verifier
        .verify_server_cert(
            &certified.cert[0],
            &certified.cert[1..],
            &server_name,
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
}

pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = encoded
        .as_bytes()
        .chunks(64)
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// A port nothing listens on (bound, then released).
pub fn free_port() -> SocketAddr {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap()
}

/// Answers A 127.0.0.1 for every name and nothing for other types, so pebble reaches the
/// challenge servers here whatever name it validates.
async fn dns_responder() -> (SocketAddr, JoinHandle<()>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut query = [0u8; 512];
        loop {
            let Ok((len, from)) = socket.recv_from(&mut query).await else {
                continue;
            };
            if let Some(answer) = dns_answer(&query[..len]) {
                let _ = socket.send_to(&answer, from).await;
            }
        }
    });
    (addr, task)
}

fn dns_answer(query: &[u8]) -> Option<Vec<u8>> {
    const HEADER: usize = 12;
    if query.len() < HEADER || query[4..6] != [0, 1] {
        return None;
    }
    // The question: labels up to the empty one, then type and class.
    let mut end = HEADER;
    loop {
        let len = usize::from(*query.get(end)?);
        end += 1 + len;
        if len == 0 {
            break;
        }
    }
    let question = query.get(HEADER..end + 4)?;
    let is_a = question[question.len() - 4..question.len() - 2] == [0, 1];
    let mut answer = Vec::with_capacity(question.len() + 28);
    answer.extend_from_slice(&query[0..2]);
    // A response, authoritative, recursion desired copied, available, no error.
    answer.extend_from_slice(&[0x84 | (query[2] & 0x01), 0x80]);
    answer.extend_from_slice(&[0, 1, 0, u8::from(is_a), 0, 0, 0, 0]);
    answer.extend_from_slice(question);
    if is_a {
        answer.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
    }
    Some(answer)
}

/// Offers the `acme-tls/1` certificate of the name the client asks for, and nothing else.
struct AlpnResolver {
    answers: AnswerSlot,
    hits: Arc<AtomicUsize>,
}

impl std::fmt::Debug for AlpnResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AlpnResolver")
    }
}

impl ResolvesServerCert for AlpnResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let acme = hello
            .alpn()
            .is_some_and(|mut protocols| protocols.any(|protocol| protocol == b"acme-tls/1"));
        if !acme {
            return None;
        }
        let certified = self
            .answers
            .read()
            .as_ref()?
            .tls_alpn01(hello.server_name()?);
        if certified.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        certified
    }
}

async fn tls_alpn_server(answers: AnswerSlot, hits: Arc<AtomicUsize>) -> (u16, JoinHandle<()>) {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(AlpnResolver { answers, hits }));
    config.alpn_protocols = vec![b"acme-tls/1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let handshake =
                    tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
                if let Ok(Ok(mut tls)) = handshake.await {
                    let _ = tokio::io::AsyncWriteExt::shutdown(&mut tls).await;
                }
            });
        }
    });
    (port, task)
}

async fn http01_server(answers: AnswerSlot, hits: Arc<AtomicUsize>) -> (u16, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let answers = Arc::clone(&answers);
            let hits = Arc::clone(&hits);
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let answer = request
                        .uri()
                        .path()
                        .strip_prefix("/.well-known/acme-challenge/")
                        .and_then(|token| answers.read().as_ref()?.http01(token));
                    if answer.is_some() {
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                    let response = match answer {
                        Some(key_authorization) => {
                            Response::new(Full::new(Bytes::from(key_authorization)))
                        }
                        None => {
                            let mut response = Response::new(Full::new(Bytes::new()));
                            *response.status_mut() = StatusCode::NOT_FOUND;
                            response
                        }
                    };
                    async move { Ok::<_, Infallible>(response) }
                });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    (port, task)
}
