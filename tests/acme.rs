//! The ACME engine against a real CA: Debian's `pebble` on loopback, validating over real
//! challenge servers (see support/acme_lab.rs). Pebble's listener and issuing roots are trusted
//! only inside these tests.

#[path = "support/acme_lab.rs"]
mod acme_lab;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use acme_lab::{Installed, Lab, PATIENCE, free_port, verify_chain, wait_until};
use concert::tls::acme::{Acme, AcmeSettings, Backoff, ChallengePreference, NameStatus};
use rustls::SignatureScheme;
use rustls::pki_types::pem::PemObject as _;

fn settings(lab: &Lab, names: &[&str], challenge: ChallengePreference) -> AcmeSettings {
    let mut settings = AcmeSettings::new(
        names.iter().map(|name| name.to_string()).collect(),
        lab.cache_dir(),
    );
    settings.directory_url = lab.pebble.directory_url.clone();
    settings.directory_roots =
        concert::tls::read_roots(&lab.pebble.listener_root.to_string_lossy()).unwrap();
    settings.email = "ops@concert.test".to_string();
    settings.challenge = challenge;
    // Pebble turns down a few nonces and validations on purpose; retry soon.
    settings.retry = Backoff {
        first: Duration::from_millis(500),
        max: Duration::from_secs(2),
    };
    settings
}

/// What a failed wait shows: how each name stands, and pebble's side.
fn report(acme: &Acme, lab: &Lab) -> String {
    format!("{:?}\n{}", acme.status(), lab.pebble.log())
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The one folder the engine keeps for this CA inside the cache.
fn ca_folder(cache: &Path) -> std::path::PathBuf {
    let mut folders: Vec<_> = std::fs::read_dir(cache)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    folders.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_certificate_over_tls_alpn_01_verifies_against_the_ca_root() {
    let lab = Lab::start(None).await;
    let installed = Arc::new(Installed::default());
    let name = "alpn.concert.test";
    let acme = Acme::start(
        settings(&lab, &[name], ChallengePreference::TlsAlpn01),
        installed.clone(),
    )
    .unwrap();
    lab.serve_answers_of(acme.answers());
    installed.wait_for(1, || report(&acme, &lab)).await;

    let (installed_name, certified) = installed.last().unwrap();
    assert_eq!(installed_name, name);
    assert!(
        lab.tls_hits.load(Ordering::Relaxed) > 0,
        "validated over tls-alpn-01"
    );
    assert_eq!(lab.http_hits.load(Ordering::Relaxed), 0);
    let root = lab.pebble.issuing_root().await;
    verify_chain(&certified, root.clone(), name).unwrap();
    assert!(verify_chain(&certified, root, "other.concert.test").is_err());
    assert!(
        certified
            .key
            .choose_scheme(&[SignatureScheme::ECDSA_NISTP256_SHA256])
            .is_some(),
        "an ECDSA P-256 key"
    );
    match acme.status().names.get(name) {
        Some(NameStatus::Ready { not_after, renewal }) => {
            assert!(*not_after > SystemTime::now());
            assert!(renewal.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert!(acme.status().all_ready(SystemTime::now()));
    // The answer is withdrawn once validation is over.
    assert!(acme.answers().tls_alpn01(name).is_none());

    // Keys are private on disk.
    let cache = lab.cache_dir();
    let folder = ca_folder(&cache);
    assert_eq!(mode(&cache), 0o700);
    assert_eq!(mode(&folder), 0o700);
    assert_eq!(mode(&folder.join("account.key")), 0o600);
    assert_eq!(mode(&folder.join(format!("{name}.pem"))), 0o600);
    acme.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_certificate_over_http_01() {
    let lab = Lab::start(None).await;
    let installed = Arc::new(Installed::default());
    let names = ["web.concert.test", "www.web.concert.test"];
    let acme = Acme::start(
        settings(&lab, &names, ChallengePreference::Http01),
        installed.clone(),
    )
    .unwrap();
    lab.serve_answers_of(acme.answers());
    installed.wait_for(2, || report(&acme, &lab)).await;

    assert!(
        lab.http_hits.load(Ordering::Relaxed) >= 2,
        "validated over http-01"
    );
    assert_eq!(lab.tls_hits.load(Ordering::Relaxed), 0);
    let root = lab.pebble.issuing_root().await;
    let certificates = installed.certificates.lock().clone();
    for name in names {
        let (_, certified) = certificates
            .iter()
            .find(|(installed, _)| installed == name)
            .unwrap();
        verify_chain(certified, root.clone(), name).unwrap();
    }
    assert!(acme.status().all_ready(SystemTime::now()));
    acme.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_serves_the_cached_certificate_without_the_ca() {
    let mut lab = Lab::start(None).await;
    let name = "cached.concert.test";
    let first = Arc::new(Installed::default());
    let acme = Acme::start(
        settings(&lab, &[name], ChallengePreference::TlsAlpn01),
        first.clone(),
    )
    .unwrap();
    lab.serve_answers_of(acme.answers());
    first.wait_for(1, || report(&acme, &lab)).await;
    acme.stop();
    drop(acme);
    let (_, issued) = first.last().unwrap();

    // The CA is gone: its port is closed.
    lab.pebble.stop();
    let again = Arc::new(Installed::default());
    let acme = Acme::start(
        settings(&lab, &[name], ChallengePreference::TlsAlpn01),
        again.clone(),
    )
    .unwrap();
    // Installed before `start` returned.
    let (installed_name, certified) = again.last().expect("installed at start");
    assert_eq!(installed_name, name);
    assert_eq!(certified.cert, issued.cert);
    assert!(matches!(
        acme.status().names.get(name),
        Some(NameStatus::Ready { renewal: None, .. })
    ));
    // Nothing is due, so nothing is asked of the (absent) CA.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(again.count(), 1);
    assert!(matches!(
        acme.status().names.get(name),
        Some(NameStatus::Ready { renewal: None, .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lived_certificate_is_renewed_before_it_expires() {
    // Renewal starts when a third of the life is left: 10 s after issuance.
    let lab = Lab::start(Some(Duration::from_secs(15))).await;
    let name = "short.concert.test";
    let installed = Arc::new(Installed::default());
    let acme = Acme::start(
        settings(&lab, &[name], ChallengePreference::TlsAlpn01),
        installed.clone(),
    )
    .unwrap();
    lab.serve_answers_of(acme.answers());
    installed.wait_for(1, || report(&acme, &lab)).await;
    let (_, first) = installed.last().unwrap();
    let first_seen = tokio::time::Instant::now();
    installed.wait_for(2, || report(&acme, &lab)).await;
    let (_, second) = installed.last().unwrap();
    let renewed_after = first_seen.elapsed();

    assert_ne!(first.cert[0], second.cert[0], "a new certificate");
    assert!(
        renewed_after >= Duration::from_secs(5) && renewed_after < Duration::from_secs(15),
        "renewed {renewed_after:?} after the first, before it expired"
    );
    verify_chain(&second, lab.pebble.issuing_root().await, name).unwrap();
    // The cache holds the new one.
    let cached = std::fs::read(ca_folder(&lab.cache_dir()).join(format!("{name}.pem"))).unwrap();
    let cached_leaf = rustls::pki_types::CertificateDer::pem_slice_iter(&cached)
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(cached_leaf, second.cert[0]);
    acme.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_ca_leaves_the_name_pending_and_is_retried_with_backoff() {
    let temp = tempfile::tempdir().unwrap();
    let mut settings = AcmeSettings::new(
        vec!["down.concert.test".to_string()],
        temp.path().join("cache"),
    );
    settings.directory_url = format!("https://{}/dir", free_port());
    settings.retry = Backoff {
        first: Duration::from_millis(200),
        max: Duration::from_millis(800),
    };
    let installed = Arc::new(Installed::default());
    let acme = Acme::start(settings, installed.clone()).unwrap();
    assert!(!acme.status().all_ready(SystemTime::now()));

    let failed_three_times = wait_until(PATIENCE, || {
        matches!(
            acme.status().names.get("down.concert.test"),
            Some(NameStatus::Failed(failure)) if failure.attempts >= 3
        )
    })
    .await;
    assert!(failed_three_times, "{:?}", acme.status());
    let Some(NameStatus::Failed(failure)) = acme.status().names.get("down.concert.test").cloned()
    else {
        unreachable!()
    };
    assert!(
        failure.reason.contains("Connection refused") || failure.reason.contains("connect"),
        "{}",
        failure.reason
    );
    assert!(failure.next_try > SystemTime::now() - Duration::from_secs(1));
    assert_eq!(installed.count(), 0);

    // Stopped, it tries no more.
    acme.stop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let attempts = |acme: &Acme| match acme.status().names.get("down.concert.test") {
        Some(NameStatus::Failed(failure)) => failure.attempts,
        _ => 0,
    };
    let stopped_at = attempts(&acme);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(attempts(&acme), stopped_at);
}

#[tokio::test]
async fn a_cache_path_that_is_a_file_is_refused_by_name() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("not-a-folder");
    std::fs::write(&file, "x").unwrap();
    let settings = AcmeSettings::new(vec!["a.concert.test".to_string()], file.clone());
    let error = Acme::start(settings, Arc::new(Installed::default()))
        .err()
        .expect("refused")
        .to_string();
    assert!(error.contains(&file.display().to_string()), "{error}");
}
