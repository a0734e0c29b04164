//! HTTPS for the tests: a certificate authority made in the test (rcgen), certificates it
//! signs written as PEM files, and a client that trusts only that authority, names the server
//! it wants (SNI), offers the protocols it is told (ALPN), and speaks HTTP/1.1 or HTTP/2 as
//! agreed.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

/// A certificate authority for one test.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub der: CertificateDer<'static>,
    pub pem: String,
}

/// A certificate the test authority signed, with its key.
pub struct Leaf {
    pub der: CertificateDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
    pub key_der: PrivateKeyDer<'static>,
    /// base64 of the SHA-256 of the key's SubjectPublicKeyInfo: what Chromium's
    /// `--ignore-certificate-errors-spki-list` names a certificate by.
    pub spki_pin: String,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Concert test CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).unwrap();
        let der = cert.der().clone();
        TestCa {
            pem: pem("CERTIFICATE", &der),
            der,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (DNS names or IP literals), valid around now.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        self.leaf_valid(names, -86_400, 30 * 86_400)
    }

    /// A certificate for `names` valid from `from` to `until` seconds from now.
    pub fn leaf_valid(&self, names: &[&str], from: i64, until: i64) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let now = rcgen::date_time_ymd(1970, 1, 1)
            + std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
        params.not_before = shift(now, from);
        params.not_after = shift(now, until);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let der = cert.der().clone();
        let key_der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        let spki_pin = base64::engine::general_purpose::STANDARD
            .encode(<sha2::Sha256 as sha2::Digest>::digest(&spki));
        Leaf {
            spki_pin,
            cert_pem: pem("CERTIFICATE", &der),
            key_pem: pem("PRIVATE KEY", &key.serialize_der()),
            der,
            key_der,
        }
    }
}

fn shift<T>(at: T, secs: i64) -> T
where
    T: std::ops::Add<Duration, Output = T> + std::ops::Sub<Duration, Output = T>,
{
    let by = Duration::from_secs(secs.unsigned_abs());
    if secs < 0 { at - by } else { at + by }
}

impl Leaf {
    /// Writes the certificate (followed by `chain`) and the key into `dir` as `<stem>.pem` and
    /// `<stem>.key`; returns their paths.
    pub fn write(&self, dir: &Path, stem: &str, chain: &[&str]) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.pem"));
        let key = dir.join(format!("{stem}.key"));
        let mut text = self.cert_pem.clone();
        for extra in chain {
            text.push_str(extra);
        }
        std::fs::write(&cert, text).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }

    /// What rustls serves for this certificate (for installing it in a store).
    pub fn certified(&self) -> Arc<rustls::sign::CertifiedKey> {
        Arc::new(
            concert::tls::certified_key(vec![self.der.clone()], self.key_der.clone_key()).unwrap(),
        )
    }
}

/// PEM text of one DER item.
pub fn pem(label: &str, der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A client configuration trusting only `roots`, offering `alpn`.
pub fn client_config(roots: &[&CertificateDer<'static>], alpn: &[&[u8]]) -> rustls::ClientConfig {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add((*root).clone()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// An answer as the test reads it.
#[derive(Debug)]
pub struct Answer {
    pub status: http::StatusCode,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `Set-Cookie` lines for `name`.
    pub fn cookies(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(http::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter(|line| line.starts_with(&format!("{name}=")))
            .map(str::to_owned)
            .collect()
    }
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// One HTTPS connection, kept open for as many requests as the test sends.
pub struct HttpsConnection {
    sender: Sender,
    /// The protocol agreed by ALPN.
    pub alpn: Option<Vec<u8>>,
    /// The certificate the server showed.
    pub shown: CertificateDer<'static>,
    authority: String,
}

impl HttpsConnection {
    /// Connects to `addr`, naming `server_name` (an IP literal sends no SNI), with `config`.
    pub async fn open(
        addr: SocketAddr,
        server_name: &str,
        config: rustls::ClientConfig,
    ) -> Result<HttpsConnection, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
        let tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
            .await
            .map_err(|_| "handshake timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let (_, session) = tls.get_ref();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let shown = session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .cloned()
            .ok_or("no certificate shown")?;
        let io = TokioIo::new(tls);
        let sender = if alpn.as_deref() == Some(b"h2") {
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            Sender::H2(sender)
        } else {
            let (sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(connection.with_upgrades());
            Sender::H1(sender)
        };
        Ok(HttpsConnection {
            sender,
            alpn,
            shown,
            authority: format!("{server_name}:{}", addr.port()),
        })
    }

    /// Sends `method path` with `headers`; the answer, its body read whole.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Answer, String> {
        let mut builder = http::Request::builder().method(method);
        builder = match self.sender {
            Sender::H1(_) => builder.uri(path).header("host", &self.authority),
            Sender::H2(_) => builder.uri(format!("https://{}{path}", self.authority)),
        };
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::new(Bytes::new())).unwrap();
        let sent = async {
            let response = match &mut self.sender {
                Sender::H1(sender) => {
                    sender.ready().await.map_err(|e| e.to_string())?;
                    sender.send_request(request).await
                }
                Sender::H2(sender) => {
                    sender.ready().await.map_err(|e| e.to_string())?;
                    sender.send_request(request).await
                }
            }
            .map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok(Answer {
                status: parts.status,
                version: parts.version,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(Duration::from_secs(20), sent)
            .await
            .map_err(|_| "no answer within 20 s".to_string())?
    }

    pub async fn get(&mut self, path: &str) -> Result<Answer, String> {
        self.send("GET", path, &[]).await
    }
}

/// One GET over a new connection.
pub async fn https_get(
    addr: SocketAddr,
    server_name: &str,
    roots: &[&CertificateDer<'static>],
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Answer, String> {
    let config = client_config(roots, &[b"h2", b"http/1.1"]);
    let mut connection = HttpsConnection::open(addr, server_name, config).await?;
    connection.send("GET", path, headers).await
}
