//! Certificates from an ACME CA (RFC 8555): obtained at start for every name that has none,
//! renewed before they expire, cached on disk so a restart serves at once.
//!
//! [`Acme::start`] loads what the cache holds, installs it through a [`CertificateSink`], and
//! leaves a background task to obtain what is missing and renew what is due. The listeners
//! answer the CA's challenges from [`Acme::answers`]: TLS-ALPN-01 (RFC 8737) on the TLS port,
//! HTTP-01 on the plain one; [`ChallengePreference`] says which to use. A CA that cannot be
//! reached is retried with backoff and never stops Concert; [`Acme::status`] tells how each name
//! stands.
//!
//! The protocol itself is the `instant-acme` crate. It is only a protocol client, so serving
//! the challenges, the cache and the renewal policy stay Concert's, it runs on the hyper and
//! rustls that Concert already has, with ring (no second crypto library), and it answers every
//! challenge kind. The other candidates: `rustls-acme` (and its `tokio-rustls-acme` fork) are
//! whole solutions that own the TLS acceptor, the cache layout and the renewal loop, on
//! futures-rustls and their own HTTP client, which would sit beside Concert's certificate store
//! rather than feed it; `async-acme` drives TLS-ALPN-01 only, on a generic HTTP client and an
//! older rcgen; `acme2` needs OpenSSL and the previous hyper generation; `acme-lib` and its fork
//! `acme-micro` are blocking, on OpenSSL, and `acme-lib` has not been released for years.

mod cache;
mod certificate;
mod challenge;
mod client;
mod engine;
mod issue;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use rustls::pki_types::{CertificateDer, DnsName};
use tokio_util::sync::CancellationToken;

use crate::tls::{CertificateSink, ChallengeAnswers};

/// Let's Encrypt's production directory, the default.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// Let's Encrypt's staging directory: untrusted certificates, generous rate limits.
pub const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";

/// What the engine needs to know; the caller builds it from Concert's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcmeSettings {
    /// One certificate is kept for each name.
    pub domains: Vec<String>,
    /// The account's contact address; empty registers without one.
    pub email: String,
    /// Created if missing (0700); holds the account key and the certificates (0600).
    pub cache_dir: PathBuf,
    pub directory_url: String,
    /// Extra roots trusted for the directory's own HTTPS (a private CA), besides the bundled
    /// web roots.
    pub directory_roots: Vec<CertificateDer<'static>>,
    pub challenge: ChallengePreference,
    pub retry: Backoff,
    /// The longest the engine sleeps between two looks at its certificates.
    pub check_every: Duration,
}

impl AcmeSettings {
    /// Let's Encrypt production, TLS-ALPN-01, the default backoff and an hourly check.
    pub fn new(domains: Vec<String>, cache_dir: PathBuf) -> AcmeSettings {
        AcmeSettings {
            domains,
            email: String::new(),
            cache_dir,
            directory_url: LETS_ENCRYPT.to_string(),
            directory_roots: Vec::new(),
            challenge: ChallengePreference::TlsAlpn01,
            retry: Backoff::default(),
            check_every: Duration::from_secs(60 * 60),
        }
    }
}

/// Which challenge to answer when the CA offers both. The caller knows its listeners:
/// TLS-ALPN-01 needs the TLS listener reachable on port 443, HTTP-01 a plain listener on 80.
/// When the CA does not offer the preferred kind, the other is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengePreference {
    TlsAlpn01,
    Http01,
}

/// Waits after failed attempts: `first`, doubling per failure up to `max`, each shortened by up
/// to a fifth at random so that many instances do not retry in step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            first: Duration::from_secs(60),
            max: Duration::from_secs(6 * 60 * 60),
        }
    }
}

impl Backoff {
    /// The wait after the `failures`-th failure in a row, `jitter` in 0..=1 taking off up to
    /// 20%.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        let full = self
            .first
            .checked_mul(1 << doublings)
            .unwrap_or(self.max)
            .min(self.max);
        full.mul_f64(1.0 - 0.2 * jitter.clamp(0.0, 1.0))
    }
}

/// Why the engine could not start. Each names the setting or path at fault, in one line.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("no domain names to obtain certificates for")]
    NoDomains,
    #[error("{0:?} is not a domain name a certificate can be obtained for")]
    InvalidName(String),
    #[error("ACME directory {url:?}: {reason}")]
    DirectoryUrl { url: String, reason: String },
    #[error("ACME directory roots {0}")]
    DirectoryRoots(String),
    #[error("certificate cache {}: {reason}", path.display())]
    Cache { path: PathBuf, reason: String },
    #[error("the ACME engine must be started inside the async runtime")]
    NoRuntime,
}

/// How each name stands, in name order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcmeStatus {
    pub names: BTreeMap<String, NameStatus>,
}

impl AcmeStatus {
    /// Every name has a certificate that has not expired.
    pub fn all_ready(&self, now: SystemTime) -> bool {
        self.names.values().all(|status| status.is_ready(now))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameStatus {
    /// A certificate is being served. `renewal` tells why renewing it failed, while it does.
    Ready {
        not_after: SystemTime,
        renewal: Option<Failure>,
    },
    /// No certificate yet; the first attempt is under way or about to be.
    Pending { reason: String },
    /// No certificate yet, and the last attempt failed; another follows at `next_try`.
    Failed(Failure),
}

impl NameStatus {
    pub fn is_ready(&self, now: SystemTime) -> bool {
        matches!(self, NameStatus::Ready { not_after, .. } if *not_after > now)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The last failure, with the CA's problem detail when it sent one.
    pub reason: String,
    pub next_try: SystemTime,
    /// Failures in a row.
    pub attempts: u32,
}

/// A running engine. Dropping it, or [`Acme::stop`], ends its background task.
pub struct Acme {
    answers: Arc<challenge::Answers>,
    status: Arc<Mutex<BTreeMap<String, NameStatus>>>,
    stop: CancellationToken,
}

impl Acme {
    /// Checks the settings, prepares the cache, installs every cached certificate that is still
    /// valid through `sink` (so a restart serves without waiting for the CA), then starts the
    /// background task on the current tokio runtime.
    pub fn start(
        settings: AcmeSettings,
        sink: Arc<dyn CertificateSink>,
    ) -> Result<Arc<Acme>, AcmeError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| AcmeError::NoRuntime)?;
        let (names, http, cache) = check(&settings)?;
        let answers = Arc::new(challenge::Answers::default());
        let status = Arc::new(Mutex::new(BTreeMap::new()));
        let engine = engine::Engine::new(
            settings,
            names,
            cache,
            http,
            sink,
            Arc::clone(&answers),
            Arc::clone(&status),
        );
        let stop = CancellationToken::new();
        let until = stop.clone();
        runtime.spawn(async move { until.run_until_cancelled(engine.run()).await });
        Ok(Arc::new(Acme {
            answers,
            status,
            stop,
        }))
    }

    /// What the listeners answer the CA with.
    pub fn answers(&self) -> Arc<dyn ChallengeAnswers> {
        Arc::clone(&self.answers) as Arc<dyn ChallengeAnswers>
    }

    pub fn status(&self) -> AcmeStatus {
        AcmeStatus {
            names: self.status.lock().clone(),
        }
    }

    /// Ends the background task, dropping any attempt under way. Certificates already installed
    /// stay where they are.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Acme {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Checks `settings` as [`Acme::start`] would, without starting anything: the names, the
/// directory URL, the roots, and the cache directory (created when missing). A settings change
/// runs this first, so one the engine would refuse is refused before anything is applied.
pub fn prepare(settings: &AcmeSettings) -> Result<(), AcmeError> {
    check(settings).map(|_| ())
}

fn check(
    settings: &AcmeSettings,
) -> Result<(Vec<String>, client::AcmeHttp, cache::CaCache), AcmeError> {
    let names = normalize_names(&settings.domains)?;
    check_directory_url(&settings.directory_url)?;
    let plain_allowed = settings.directory_url.starts_with("http://");
    let http = client::AcmeHttp::new(&settings.directory_roots, plain_allowed)
        .map_err(AcmeError::DirectoryRoots)?;
    let cache = cache::CaCache::open(&settings.cache_dir, &settings.directory_url)?;
    Ok((names, http, cache))
}

/// Lower case, without a trailing dot, each once. Wildcards are refused: they need DNS-01.
fn normalize_names(domains: &[String]) -> Result<Vec<String>, AcmeError> {
    let mut names: Vec<String> = Vec::with_capacity(domains.len());
    for given in domains {
        let name = given.trim().trim_end_matches('.').to_ascii_lowercase();
        let valid = !name.is_empty()
            && name.contains('.')
            && name.parse::<IpAddr>().is_err()
            && !name.starts_with('-')
            && DnsName::try_from(name.as_str()).is_ok();
        if !valid {
            return Err(AcmeError::InvalidName(given.clone()));
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Err(AcmeError::NoDomains);
    }
    Ok(names)
}

fn check_directory_url(url: &str) -> Result<(), AcmeError> {
    let fault = |reason: String| AcmeError::DirectoryUrl {
        url: url.to_string(),
        reason,
    };
    if url.is_empty() {
        return Err(fault("is empty".to_string()));
    }
    crate::config::check_acme_directory(url).map_err(fault)
}
