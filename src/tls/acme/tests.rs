use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::ChallengeType;
use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::pem::PemObject as _;
use sha2::{Digest as _, Sha256};

use super::cache::{CaCache, pem_block};
use super::certificate::{Issued, RENEW_BEFORE, renewal_time, validity};
use super::challenge::{Answer, Answers, tls_alpn01_certificate};
use super::engine::{due_at, is_due, readable};
use super::issue::pick;
use super::*;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path)
        .map(|meta| meta.permissions().mode() & 0o777)
        .unwrap_or(0)
}

/// A self-signed certificate for `name` with its key, as the cache would hold it.
fn self_signed_pem(name: &str) -> (String, String) {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2024, 3, 1);
    params.not_after = rcgen::date_time_ymd(2051, 6, 30);
    let certificate = params.self_signed(&key).unwrap();
    (
        pem_block("CERTIFICATE", certificate.der()),
        pem_block("PRIVATE KEY", &key.serialize_der()),
    )
}

#[test]
fn renewal_starts_thirty_days_before_expiry_or_at_a_third_of_a_short_life() {
    let issued = at(1_700_000_000);
    assert_eq!(renewal_time(issued, issued + 90 * DAY), issued + 60 * DAY);
    assert_eq!(renewal_time(issued, issued + 365 * DAY), issued + 335 * DAY);
    assert_eq!(renewal_time(issued, issued + 6 * DAY), issued + 4 * DAY);
    let short = Duration::from_secs(15);
    assert_eq!(
        renewal_time(issued, issued + short),
        issued + Duration::from_secs(10)
    );
    assert_eq!(RENEW_BEFORE, 30 * DAY);
    // Dates in the wrong order renew at once rather than never.
    assert!(renewal_time(issued + DAY, issued) <= issued + DAY);
}

#[test]
fn backoff_doubles_from_a_minute_to_six_hours_with_jitter_below() {
    let backoff = Backoff::default();
    assert_eq!(backoff.delay(1, 0.0), Duration::from_secs(60));
    assert_eq!(backoff.delay(2, 0.0), Duration::from_secs(120));
    assert_eq!(backoff.delay(5, 0.0), Duration::from_secs(16 * 60));
    assert_eq!(backoff.delay(9, 0.0), Duration::from_secs(256 * 60));
    assert_eq!(backoff.delay(10, 0.0), Duration::from_secs(6 * 60 * 60));
    assert_eq!(
        backoff.delay(u32::MAX, 0.0),
        Duration::from_secs(6 * 60 * 60)
    );
    assert_eq!(backoff.delay(1, 1.0), Duration::from_secs(48));
    for failures in 1..40 {
        for jitter in [0.0, 0.3, 0.99, 1.0] {
            let delay = backoff.delay(failures, jitter);
            assert!(delay <= backoff.max && delay >= backoff.first.mul_f64(0.8));
        }
    }
}

#[test]
fn a_name_is_due_without_a_certificate_or_at_renewal_unless_a_retry_waits() {
    let now = at(1_000_000);
    assert!(is_due(None, None, now));
    assert!(!is_due(Some(now + DAY), None, now));
    assert!(is_due(Some(now - DAY), None, now));
    assert!(!is_due(None, Some(now + Duration::from_secs(60)), now));
    assert!(is_due(None, Some(now - Duration::from_secs(1)), now));
    assert!(!is_due(
        Some(now - DAY),
        Some(now + Duration::from_secs(60)),
        now
    ));
    assert_eq!(due_at(Some(now + DAY), Some(now)), now + DAY);
    assert_eq!(due_at(Some(now), Some(now + DAY)), now + DAY);
}

#[test]
fn retry_waits_read_at_a_glance() {
    assert_eq!(readable(Duration::from_millis(400)), "0.4s");
    assert_eq!(readable(Duration::from_secs(48)), "48s");
    assert_eq!(readable(Duration::from_secs(16 * 60)), "16m");
    assert_eq!(readable(Duration::from_secs(6 * 60 * 60)), "6h00m");
}

#[test]
fn validity_is_read_in_both_time_forms() {
    let (certificate, _) = self_signed_pem("a.example.com");
    let der = rustls::pki_types::CertificateDer::from_pem_slice(certificate.as_bytes()).unwrap();
    let (not_before, not_after) = validity(&der).unwrap();
    // 2024-03-01 is written as UTCTime, 2051-06-30 as GeneralizedTime.
    assert_eq!(not_before, at(1_709_251_200));
    assert_eq!(not_after, at(2_571_696_000));
    assert!(validity(b"\x30\x03\x02\x01\x01").is_err());
    assert!(validity(b"").is_err());
}

#[test]
fn a_cached_file_must_hold_a_chain_and_its_own_key() {
    let (certificate, key) = self_signed_pem("a.example.com");
    let issued = Issued::from_pem(format!("{certificate}{key}").as_bytes()).unwrap();
    assert_eq!(issued.not_after, at(2_571_696_000));
    assert_eq!(issued.certified.cert.len(), 1);
    // The key may come first.
    assert!(Issued::from_pem(format!("{key}{certificate}").as_bytes()).is_ok());

    let (_, other_key) = self_signed_pem("a.example.com");
    let mismatched = Issued::from_pem(format!("{certificate}{other_key}").as_bytes());
    assert!(mismatched.err().unwrap().contains("do not go together"));
    assert!(Issued::from_pem(key.as_bytes()).is_err());
    assert!(Issued::from_pem(certificate.as_bytes()).is_err());
    assert!(Issued::from_pem(b"garbage").is_err());
}

#[test]
fn the_cache_is_created_private_and_keeps_each_ca_apart() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("acme");
    let production = CaCache::open(&root, LETS_ENCRYPT).unwrap();
    let staging = CaCache::open(&root, LETS_ENCRYPT_STAGING).unwrap();
    assert_ne!(production.dir(), staging.dir());
    let folder = production
        .dir()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        folder.starts_with("acme-v02.api.letsencrypt.org-"),
        "{folder}"
    );
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(production.dir()), 0o700);

    // A folder that exists with wider modes is made private.
    let loose = temp.path().join("loose");
    fs::create_dir(&loose).unwrap();
    fs::set_permissions(&loose, fs::Permissions::from_mode(0o755)).unwrap();
    CaCache::open(&loose, LETS_ENCRYPT).unwrap();
    assert_eq!(mode(&loose), 0o700);
}

#[test]
fn the_cache_refuses_a_file_and_a_path_it_cannot_create() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("file");
    fs::write(&file, "x").unwrap();
    let error = CaCache::open(&file, LETS_ENCRYPT).unwrap_err().to_string();
    assert!(error.contains(&file.display().to_string()), "{error}");
    assert!(error.contains("not a directory"), "{error}");

    let below_a_file = file.join("acme");
    let error = CaCache::open(&below_a_file, LETS_ENCRYPT)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&below_a_file.display().to_string()),
        "{error}"
    );
    assert!(error.contains("cannot be created"), "{error}");
}

#[test]
fn the_account_key_is_made_once_and_files_are_private() {
    let temp = tempfile::tempdir().unwrap();
    let cache = CaCache::open(temp.path(), LETS_ENCRYPT).unwrap();
    let first = cache.account_key().unwrap();
    let second = cache.account_key().unwrap();
    assert_eq!(first.secret_pkcs8_der(), second.secret_pkcs8_der());
    assert_eq!(mode(&cache.dir().join("account.key")), 0o600);
    assert!(instant_acme::Key::from_pkcs8_der(second).is_ok());

    assert!(cache.read_certificate("a.example.com").unwrap().is_none());
    cache.write_certificate("a.example.com", b"one").unwrap();
    cache.write_certificate("a.example.com", b"two").unwrap();
    assert_eq!(
        cache.read_certificate("a.example.com").unwrap().unwrap(),
        b"two"
    );
    assert_eq!(mode(&cache.certificate_path("a.example.com")), 0o600);
    // Only the account key and the certificate: no temporary files left over.
    assert_eq!(fs::read_dir(cache.dir()).unwrap().count(), 2);
}

#[test]
fn answers_are_offered_only_while_their_guard_lives() {
    let answers = Arc::new(Answers::default());
    let certified = tls_alpn01_certificate("a.example.com", "token.thumb").unwrap();
    {
        let _http = answers.offer(Answer::Http01 {
            token: "tok".to_string(),
            key_authorization: "tok.thumb".to_string(),
        });
        let _tls = answers.offer(Answer::TlsAlpn01 {
            name: "a.example.com".to_string(),
            certified,
        });
        assert_eq!(answers.http01("tok").as_deref(), Some("tok.thumb"));
        assert!(answers.http01("other").is_none());
        assert!(answers.tls_alpn01("A.Example.com").is_some());
        assert!(answers.tls_alpn01("b.example.com").is_none());
    }
    assert!(answers.http01("tok").is_none());
    assert!(answers.tls_alpn01("a.example.com").is_none());
}

/// RFC 8737 §3: the name as the only SAN and a critical id-pe-acmeIdentifier extension whose
/// value is an OCTET STRING holding SHA-256 of the key authorization.
#[test]
fn the_tls_alpn_certificate_carries_the_critical_acme_identifier() {
    let key_authorization = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.thumb";
    let certified = tls_alpn01_certificate("a.example.com", key_authorization).unwrap();
    assert_eq!(certified.cert.len(), 1);
    let extensions = extensions(&certified.cert[0]);
    let acme_oid = yasna::models::ObjectIdentifier::from_slice(&[1, 3, 6, 1, 5, 5, 7, 1, 31]);
    let (critical, value) = extensions
        .iter()
        .find(|(oid, _, _)| *oid == acme_oid)
        .map(|(_, critical, value)| (*critical, value.clone()))
        .expect("acmeIdentifier extension");
    assert!(critical);
    let digest = yasna::parse_der(&value, |reader| reader.read_bytes()).unwrap();
    assert_eq!(
        digest,
        Sha256::digest(key_authorization.as_bytes()).to_vec()
    );

    let san_oid = yasna::models::ObjectIdentifier::from_slice(&[2, 5, 29, 17]);
    let (_, _, san) = extensions
        .iter()
        .find(|(oid, _, _)| *oid == san_oid)
        .unwrap();
    let names = yasna::parse_der(san, |reader| {
        reader.collect_sequence_of(|name| {
            name.read_tagged_implicit(yasna::Tag::context(2), |dns| dns.read_ia5_string())
        })
    })
    .unwrap();
    assert_eq!(names, ["a.example.com"]);
}

/// (OID, critical, extnValue contents) of each extension of a certificate.
fn extensions(der: &[u8]) -> Vec<(yasna::models::ObjectIdentifier, bool, Vec<u8>)> {
    yasna::parse_der(der, |reader| {
        reader.read_sequence(|certificate| {
            let found = certificate.next().read_sequence(|tbs| {
                let mut found = Vec::new();
                while let Some(element) = tbs.read_optional(|element| element.read_tagged_der())? {
                    if element.tag() == yasna::Tag::context(3) {
                        found = yasna::parse_der(element.value(), |list| {
                            list.collect_sequence_of(|extension| {
                                extension.read_sequence(|fields| {
                                    let oid = fields.next().read_oid()?;
                                    let critical = fields.read_default(false, |c| c.read_bool())?;
                                    let value = fields.next().read_bytes()?;
                                    Ok((oid, critical, value))
                                })
                            })
                        })?;
                    }
                }
                Ok(found)
            })?;
            certificate.next().read_der()?;
            certificate.next().read_der()?;
            Ok(found)
        })
    })
    .unwrap()
}

#[test]
fn the_preferred_challenge_is_used_when_offered_and_the_other_otherwise() {
    let both = [
        ChallengeType::Http01,
        ChallengeType::Dns01,
        ChallengeType::TlsAlpn01,
    ];
    assert_eq!(
        pick(ChallengePreference::TlsAlpn01, &both),
        Some(ChallengeType::TlsAlpn01)
    );
    assert_eq!(
        pick(ChallengePreference::Http01, &both),
        Some(ChallengeType::Http01)
    );
    let http_only = [ChallengeType::Dns01, ChallengeType::Http01];
    assert_eq!(
        pick(ChallengePreference::TlsAlpn01, &http_only),
        Some(ChallengeType::Http01)
    );
    assert_eq!(
        pick(ChallengePreference::Http01, &[ChallengeType::Dns01]),
        None
    );
}

#[test]
fn names_are_normalized_and_bad_ones_refused() {
    let names = normalize_names(&[
        "Shop.Example.com.".to_string(),
        "shop.example.com".to_string(),
        "www.example.com".to_string(),
    ])
    .unwrap();
    assert_eq!(names, ["shop.example.com", "www.example.com"]);
    for bad in [
        "",
        "*.example.com",
        "127.0.0.1",
        "a/b.example.com",
        "localhost",
        "-a.example.com",
        "a..b.com",
        "../x.com",
    ] {
        let error = normalize_names(&[bad.to_string()]).unwrap_err();
        assert!(matches!(error, AcmeError::InvalidName(_)), "{bad}: {error}");
    }
    assert!(matches!(normalize_names(&[]), Err(AcmeError::NoDomains)));
}

#[test]
fn the_directory_must_be_an_https_url_or_plain_on_loopback() {
    assert!(check_directory_url(LETS_ENCRYPT).is_ok());
    assert!(check_directory_url("https://127.0.0.1:14000/dir").is_ok());
    assert!(check_directory_url("http://127.0.0.1:14000/dir").is_ok());
    assert!(check_directory_url("http://[::1]:14000/dir").is_ok());
    assert!(check_directory_url("http://localhost:14000/dir").is_ok());
    for bad in [
        "http://ca.example.com/dir",
        "http://10.0.0.1/dir",
        "ftp://127.0.0.1/dir",
        "ca.example.com",
        "",
        "https:///dir",
    ] {
        let error = check_directory_url(bad).unwrap_err().to_string();
        assert!(error.contains("ACME directory"), "{bad}: {error}");
    }
}

#[test]
fn starting_needs_the_runtime() {
    struct Nowhere;
    impl crate::tls::CertificateSink for Nowhere {
        fn install(&self, _: &str, _: Arc<rustls::sign::CertifiedKey>) {}
    }
    let temp = tempfile::tempdir().unwrap();
    let settings = AcmeSettings::new(vec!["a.example.com".to_string()], temp.path().join("c"));
    assert!(matches!(
        Acme::start(settings, Arc::new(Nowhere)),
        Err(AcmeError::NoRuntime)
    ));
}
