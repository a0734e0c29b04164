//! The HTTPS state: what settings ask of it, certificates chosen by real handshakes over an
//! in-memory pipe, and the ACME seams.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use tokio::io::AsyncWriteExt;

use super::pair::tests::to_pem;
use super::*;
use crate::config::{Config, HostList};

/// A certificate for `names` and its key, self-signed, as PEM and as what rustls serves.
struct Made {
    cert_pem: String,
    key_pem: String,
    der: CertificateDer<'static>,
    certified: Arc<CertifiedKey>,
}

fn made(names: &[&str]) -> Made {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap()
            .self_signed(&key)
            .unwrap();
    let der = cert.der().clone();
    let certified = certified_key(
        vec![der.clone()],
        PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
    .unwrap();
    Made {
        cert_pem: to_pem("CERTIFICATE", &der),
        key_pem: to_pem("PRIVATE KEY", &key.serialize_der()),
        der,
        certified: Arc::new(certified),
    }
}

/// A config asking for HTTPS with the pair written to `dir`.
fn with_pair(dir: &std::path::Path, pair: &Made, stem: &str) -> Config {
    let cert = dir.join(format!("{stem}.pem"));
    let key = dir.join(format!("{stem}.key"));
    std::fs::write(&cert, &pair.cert_pem).unwrap();
    std::fs::write(&key, &pair.key_pem).unwrap();
    let mut config = Config::default();
    config.tls_cert = cert.display().to_string();
    config.tls_key = key.display().to_string();
    config
}

/// A config asking for certificates for `domains`, cached in `cache` (preparing it makes the
/// directory, so never the default under /var/lib).
fn with_domains(domains: &str, cache: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.tls_domains = HostList::parse_strict(domains).unwrap();
    config.tls_cache = cache.display().to_string();
    config
}

/// Handshakes with `server` over an in-memory pipe, trusting `trusted`, naming `name` (an IP
/// literal sends no SNI) and offering `alpn`. The certificate the server showed, and the
/// protocol agreed, or the handshake's error.
async fn handshake(
    server: Arc<ServerConfig>,
    trusted: &[&CertificateDer<'static>],
    name: &str,
    alpn: &[&[u8]],
) -> Result<(CertificateDer<'static>, Option<Vec<u8>>), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in trusted {
        roots.add((*cert).clone()).unwrap();
    }
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    client.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(async move {
        let accepted = tokio_rustls::TlsAcceptor::from(server)
            .accept(server_end)
            .await;
        if let Ok(mut tls) = accepted {
            let _ = tls.shutdown().await;
        }
    });
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let name = ServerName::try_from(name.to_string()).unwrap();
    let connected =
        tokio::time::timeout(Duration::from_secs(10), connector.connect(name, client_end))
            .await
            .map_err(|_| "handshake timed out".to_string())?
            .map_err(|e| e.to_string());
    serving.abort();
    let tls = connected?;
    let (_, session) = tls.get_ref();
    let shown = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .cloned()
        .ok_or("no certificate shown")?;
    Ok((shown, session.alpn_protocol().map(<[u8]>::to_vec)))
}

struct Answers {
    certified: Arc<CertifiedKey>,
}

impl ChallengeAnswers for Answers {
    fn http01(&self, token: &str) -> Option<String> {
        (token == "tok-1").then(|| "tok-1.thumbprint".to_string())
    }

    fn tls_alpn01(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        (name == "a.example").then(|| Arc::clone(&self.certified))
    }
}

#[tokio::test]
async fn a_static_pair_serves_every_name_and_clients_without_sni() {
    let dir = tempfile::tempdir().unwrap();
    let site = made(&["site.example", "www.site.example", "127.0.0.1"]);
    let tls = Tls::new().unwrap();
    assert_eq!(tls.status(), TlsStatus::Off);
    assert!(tls.acceptor().is_none());
    tls.apply(tls.prepare(&with_pair(dir.path(), &site, "site")).unwrap());
    assert_eq!(tls.status(), TlsStatus::On);
    let server = tls.acceptor().expect("TLS on");
    for name in ["site.example", "www.site.example", "127.0.0.1"] {
        let (shown, alpn) = handshake(server.clone(), &[&site.der], name, &[b"h2", b"http/1.1"])
            .await
            .unwrap();
        assert_eq!(shown, site.der, "{name}");
        assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "h2 preferred");
    }
    let (_, alpn) = handshake(server.clone(), &[&site.der], "site.example", &[b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));

    tls.apply(tls.prepare(&Config::default()).unwrap());
    assert_eq!(tls.status(), TlsStatus::Off);
    assert!(tls.acceptor().is_none());
    assert!(tls.store().static_pair().is_none());
}

#[tokio::test]
async fn pending_names_fail_their_handshakes_until_installed_and_sni_picks_among_them() {
    let tls = Tls::new().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path().join("acme");
    let mut acme = tls.acme_settings();
    tls.apply(
        tls.prepare(&with_domains("a.example,b.example", &cache))
            .unwrap(),
    );
    assert_eq!(tls.status(), TlsStatus::Pending);
    let wanted = acme
        .borrow_and_update()
        .clone()
        .expect("an ACME engine is asked for");
    assert_eq!(wanted.domains, ["a.example", "b.example"]);
    assert_eq!(wanted.directory_url, LETS_ENCRYPT);
    assert_eq!(wanted.cache_dir, cache);
    assert!(
        cache.is_dir(),
        "the cache is made when the settings are prepared"
    );

    let server = tls.acceptor().expect("TLS on while pending");
    let a = made(&["a.example"]);
    let b = made(&["b.example"]);
    let failed = handshake(server.clone(), &[&a.der], "a.example", &[b"h2"]).await;
    assert!(failed.is_err(), "no certificate yet: {failed:?}");

    tls.store().install("a.example", a.certified.clone());
    assert_eq!(tls.status(), TlsStatus::Pending, "b.example still has none");
    tls.store().install("b.example", b.certified.clone());
    assert_eq!(tls.status(), TlsStatus::On);
    let trusted = [&a.der, &b.der];
    for (name, want) in [("a.example", &a.der), ("b.example", &b.der)] {
        let (shown, _) = handshake(server.clone(), &trusted, name, &[b"h2"])
            .await
            .unwrap();
        assert_eq!(&shown, want, "{name}");
    }
    assert!(
        handshake(server.clone(), &trusted, "c.example", &[b"h2"])
            .await
            .is_err()
    );

    // The same settings again publish nothing new; another directory does.
    tls.apply(
        tls.prepare(&with_domains("a.example,b.example", &cache))
            .unwrap(),
    );
    assert!(!acme.has_changed().unwrap());
    let mut staging = with_domains("a.example", &cache);
    staging.tls_staging = true;
    tls.apply(tls.prepare(&staging).unwrap());
    assert!(acme.has_changed().unwrap());
    assert_eq!(
        acme.borrow_and_update().as_ref().unwrap().directory_url,
        LETS_ENCRYPT_STAGING
    );
    tls.apply(tls.prepare(&Config::default()).unwrap());
    assert!(acme.borrow_and_update().is_none());
}

#[tokio::test]
async fn an_acme_tls_alpn_validation_gets_the_challenge_certificate_never_the_sites() {
    let dir = tempfile::tempdir().unwrap();
    let site = made(&["a.example"]);
    let challenge = made(&["a.example"]);
    let tls = Tls::new().unwrap();
    tls.apply(tls.prepare(&with_pair(dir.path(), &site, "site")).unwrap());
    let server = tls.acceptor().unwrap();
    let trusted = [&site.der, &challenge.der];
    // No answers source: the validation handshake fails rather than show the site's.
    assert!(
        handshake(server.clone(), &trusted, "a.example", &[ACME_TLS_ALPN])
            .await
            .is_err()
    );

    tls.set_answers(Some(Arc::new(Answers {
        certified: challenge.certified.clone(),
    })));
    let (shown, alpn) = handshake(server.clone(), &trusted, "a.example", &[ACME_TLS_ALPN])
        .await
        .unwrap();
    assert_eq!(shown, challenge.der);
    assert_eq!(alpn.as_deref(), Some(ACME_TLS_ALPN));
    // Offered beside another protocol, acme-tls/1 is no validation: the site's certificate.
    let (shown, alpn) = handshake(
        server.clone(),
        &trusted,
        "a.example",
        &[b"h2", ACME_TLS_ALPN],
    )
    .await
    .unwrap();
    assert_eq!(shown, site.der);
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    assert!(
        handshake(server, &trusted, "b.example", &[ACME_TLS_ALPN])
            .await
            .is_err()
    );
}

#[test]
fn http01_answers_come_from_the_swappable_source() {
    let tls = Tls::new().unwrap();
    assert!(!tls.answering());
    assert_eq!(tls.http01("tok-1"), None);
    tls.set_answers(Some(Arc::new(Answers {
        certified: made(&["a.example"]).certified,
    })));
    assert!(tls.answering());
    assert_eq!(tls.http01("tok-1").as_deref(), Some("tok-1.thumbprint"));
    assert_eq!(tls.http01("other"), None);
    let get = http::Method::GET;
    let answer = http_port::challenge(&tls, &get, "/.well-known/acme-challenge/tok-1").unwrap();
    assert_eq!(answer.status(), http::StatusCode::OK);
    for path in [
        "/.well-known/acme-challenge/other",
        "/.well-known/acme-challenge/",
        "/.well-known/acme-challenge/a%2Fb",
    ] {
        let answer = http_port::challenge(&tls, &get, path).unwrap();
        assert_eq!(answer.status(), http::StatusCode::NOT_FOUND, "{path}");
    }
    assert!(http_port::challenge(&tls, &get, "/elsewhere").is_none());
    assert!(
        http_port::challenge(
            &tls,
            &http::Method::POST,
            "/.well-known/acme-challenge/tok-1"
        )
        .is_none()
    );
    tls.set_answers(None);
    assert!(!tls.answering());
    assert!(http_port::challenge(&tls, &get, "/.well-known/acme-challenge/tok-1").is_none());
}

#[test]
fn preparing_reads_the_files_and_names_the_setting_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let tls = Tls::new().unwrap();
    let site = made(&["site.example"]);
    let mut config = with_pair(dir.path(), &site, "site");
    config.tls_key = dir.path().join("missing.key").display().to_string();
    let err = tls.prepare(&config).unwrap_err();
    assert!(
        err.starts_with("-tls-key ") && err.contains("missing.key"),
        "{err}"
    );
    assert_eq!(tls.status(), TlsStatus::Off, "nothing applied");

    let mut config = with_domains("a.example", &dir.path().join("acme"));
    config.tls_directory_ca = dir.path().join("roots.pem").display().to_string();
    let err = tls.prepare(&config).unwrap_err();
    assert!(
        err.starts_with("-tls-directory-ca ") && err.contains("roots.pem"),
        "{err}"
    );
    std::fs::write(dir.path().join("roots.pem"), &site.cert_pem).unwrap();
    config.tls_directory = "https://ca.test/dir".into();
    let TlsPlan {
        mode: Mode::Acme(settings),
    } = tls.prepare(&config).unwrap()
    else {
        panic!("an ACME plan");
    };
    assert_eq!(settings.directory_url, "https://ca.test/dir");
    assert_eq!(settings.directory_roots, [site.der]);

    // A cache the engine could not use stops the start or the change, naming the setting.
    let not_a_dir = dir.path().join("a-file");
    std::fs::write(&not_a_dir, "x").unwrap();
    let mut config = with_domains("a.example", &not_a_dir);
    let err = tls.prepare(&config).unwrap_err();
    assert!(err.starts_with("-tls-cache: "), "{err}");
    config.tls_cache = not_a_dir.join("below").display().to_string();
    assert!(
        tls.prepare(&config)
            .unwrap_err()
            .starts_with("-tls-cache: ")
    );
}

#[test]
fn the_challenge_kind_follows_the_ports_the_ca_can_reach() {
    let mut config = Config::default();
    config.listen = ":443".into();
    assert_eq!(challenge_for(&config), ChallengePreference::TlsAlpn01);
    config.http_listen = ":80".into();
    assert_eq!(challenge_for(&config), ChallengePreference::TlsAlpn01);
    config.listen = ":8443".into();
    assert_eq!(challenge_for(&config), ChallengePreference::Http01);
    config.http_listen = String::new();
    assert_eq!(challenge_for(&config), ChallengePreference::TlsAlpn01);
}

/// Writes `text` to `path` with a modification time of its own: two writes within one tick of
/// the file system's clock would otherwise look alike.
fn rewrite(path: &str, text: &str, version: u64) {
    std::fs::write(path, text).unwrap();
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + version);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

#[test]
fn a_changed_pair_on_disk_is_served_and_a_bad_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let tls = Tls::new().unwrap();
    let first = made(&["site.example"]);
    let config = with_pair(dir.path(), &first, "site");
    tls.apply(tls.prepare(&config).unwrap());
    let served = || tls.store().static_pair().unwrap().certified.cert[0].clone();
    assert_eq!(served(), first.der);

    tls.reload_files(false);
    assert_eq!(served(), first.der, "unchanged files are not read again");

    let second = made(&["site.example"]);
    rewrite(&config.tls_cert, &second.cert_pem, 1);
    rewrite(&config.tls_key, &second.key_pem, 1);
    tls.reload_files(false);
    assert_eq!(served(), second.der);

    // Half a renewal: the new certificate with the old key. The pair served stays.
    let third = made(&["site.example"]);
    rewrite(&config.tls_cert, &third.cert_pem, 2);
    tls.reload_files(false);
    assert_eq!(served(), second.der);
    tls.reload_files(true);
    assert_eq!(served(), second.der);
    rewrite(&config.tls_key, &third.key_pem, 2);
    tls.reload_files(false);
    assert_eq!(served(), third.der);

    // Preparing unchanged file names keeps the pair as loaded.
    let before = tls.store().static_pair().unwrap();
    tls.apply(tls.prepare(&config).unwrap());
    assert!(Arc::ptr_eq(&before, &tls.store().static_pair().unwrap()));
}

/// One visit of `client`: a handshake, then everything the server sends read to its end (the
/// session ticket comes after the handshake). How the handshake went.
async fn visit(
    server: Arc<ServerConfig>,
    client: Arc<rustls::ClientConfig>,
) -> Option<rustls::HandshakeKind> {
    use tokio::io::AsyncReadExt;
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(async move {
        let mut tls = tokio_rustls::TlsAcceptor::from(server)
            .accept(server_end)
            .await
            .unwrap();
        tls.shutdown().await.unwrap();
    });
    let name = ServerName::try_from("site.example").unwrap();
    let mut connected = tokio_rustls::TlsConnector::from(client)
        .connect(name, client_end)
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = connected.read_to_end(&mut rest).await;
    serving.await.unwrap();
    connected.get_ref().1.handshake_kind()
}

#[tokio::test]
async fn a_returning_client_resumes_its_session_from_a_sealed_ticket_after_many_others() {
    let dir = tempfile::tempdir().unwrap();
    let site = made(&["site.example"]);
    let tls = Tls::new().unwrap();
    tls.apply(tls.prepare(&with_pair(dir.path(), &site, "site")).unwrap());
    let server = tls.acceptor().unwrap();
    let client = || {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(site.der.clone()).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        )
    };
    let returning = client();
    let first = visit(server.clone(), returning.clone()).await;
    assert_eq!(first, Some(rustls::HandshakeKind::Full));
    // More clients than a server-side session cache would hold (rustls' holds 256, rounded up
    // to what its table takes) come in between; each gets its ticket.
    for _ in 0..600 {
        visit(server.clone(), client()).await;
    }
    let second = visit(server, returning).await;
    assert_eq!(second, Some(rustls::HandshakeKind::Resumed));
}
