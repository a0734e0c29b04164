//! Concert's own HTTPS: the rustls server configuration (ring, TLS 1.2 and 1.3, ALPN `h2` and
//! `http/1.1`), the certificates it serves ([`store`]: a static pair from PEM files, or
//! certificates obtained at run time for `-tls-domains` by the ACME engine in [`acme`]).
//!
//! [`Tls`] is the listener's state. It says whether the public listener speaks TLS now (a live
//! setting: the accept loop asks for every new connection), holds the certificate store and the
//! source of ACME challenge answers, and publishes what the ACME engine should do
//! ([`AcmeSettings`]) whenever the settings change. `lifecycle` starts the engine (see
//! `spawn_certificate_requests` there): it installs what it obtains through
//! [`CertificateSink`] (the store) and answers challenges through [`ChallengeAnswers`], set
//! with [`Tls::set_answers`].

pub mod acme;
pub mod http_port;
pub mod pair;
pub mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use rustls::ServerConfig;
use rustls::pki_types::CertificateDer;
use rustls::sign::CertifiedKey;

use crate::config::Config;
use acme::{AcmeSettings, ChallengePreference, LETS_ENCRYPT, LETS_ENCRYPT_STAGING};
use pair::{PairFiles, PairFlags, StaticPair, load_pair};
use store::{Reloaded, Resolver};

pub use store::CertStore;

/// The ALPN protocol of TLS-ALPN-01 validations (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";
/// Where HTTP-01 challenges are asked for.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// What an ACME engine answers while a validation of one of its orders is under way.
pub trait ChallengeAnswers: Send + Sync + 'static {
    /// The key authorization to answer at /.well-known/acme-challenge/<token> (HTTP-01).
    fn http01(&self, token: &str) -> Option<String>;
    /// The acme-tls/1 certificate for `name` (TLS-ALPN-01), while a validation is pending.
    fn tls_alpn01(&self, name: &str) -> Option<Arc<rustls::sign::CertifiedKey>>;
}

/// Where certificates obtained at run time go.
pub trait CertificateSink: Send + Sync + 'static {
    fn install(&self, name: &str, certified: Arc<rustls::sign::CertifiedKey>);
}

impl CertificateSink for CertStore {
    fn install(&self, name: &str, certified: Arc<CertifiedKey>) {
        CertStore::install(self, name, certified);
    }
}

/// The answers source as it is swapped in and out (a sized holder for the trait object).
pub(crate) struct AnswerSource(Arc<dyn ChallengeAnswers>);

/// Whether the public listener speaks TLS, as `/_room/stats` and `/_room/healthz` say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsStatus {
    /// Plain HTTP.
    Off,
    /// TLS, with a certificate for every name asked for.
    On,
    /// TLS is asked for, but some name has no certificate yet: handshakes for it fail.
    Pending,
}

impl TlsStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsStatus::Off => "off",
            TlsStatus::On => "on",
            TlsStatus::Pending => "pending",
        }
    }
}

/// What a settings change will do to HTTPS, prepared (files read and checked) before anything
/// is applied, so a change that cannot be served is refused whole.
#[derive(Debug)]
pub struct TlsPlan {
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    Off,
    Static(Arc<StaticPair>),
    Acme(AcmeSettings),
}

/// The HTTPS state of a running Concert.
pub struct Tls {
    store: Arc<CertStore>,
    answers: Arc<ArcSwapOption<AnswerSource>>,
    /// An answers source is set: only then does a plain listener look for HTTP-01 paths.
    answering: AtomicBool,
    /// Built once; the certificates it serves come from the store at each handshake.
    server: Arc<ServerConfig>,
    /// `server` while the public listener speaks TLS.
    serving: ArcSwapOption<ServerConfig>,
    acme: tokio::sync::watch::Sender<Option<AcmeSettings>>,
    /// The portal listener's own HTTPS, set once at start.
    portal: std::sync::OnceLock<PortalTls>,
}

/// The portal's certificate and the configuration serving it.
struct PortalTls {
    store: Arc<CertStore>,
    server: Arc<ServerConfig>,
}

impl Tls {
    /// HTTPS off, nothing expected, no answers source.
    pub fn new() -> Result<Tls, rustls::Error> {
        let store = Arc::new(CertStore::default());
        let answers = Arc::new(ArcSwapOption::empty());
        let resolver = Arc::new(Resolver {
            store: Arc::clone(&store),
            answers: Arc::clone(&answers),
        });
        let alpn = vec![b"h2".to_vec(), b"http/1.1".to_vec(), ACME_TLS_ALPN.to_vec()];
        let server = Arc::new(server_config(resolver, alpn)?);
        Ok(Tls {
            store,
            answers,
            answering: AtomicBool::new(false),
            server,
            serving: ArcSwapOption::empty(),
            acme: tokio::sync::watch::Sender::new(None),
            portal: std::sync::OnceLock::new(),
        })
    }

    /// The certificates of the public listener (an ACME engine's sink).
    pub fn store(&self) -> &Arc<CertStore> {
        &self.store
    }

    /// The configuration for a new connection on the public listener: `None` while it speaks
    /// plain HTTP.
    pub fn acceptor(&self) -> Option<Arc<ServerConfig>> {
        self.serving.load_full()
    }

    pub fn status(&self) -> TlsStatus {
        if self.serving.load().is_none() {
            TlsStatus::Off
        } else if self.store.is_pending() {
            TlsStatus::Pending
        } else {
            TlsStatus::On
        }
    }

    /// The body of `/_room/healthz`: `ok`, with a second line `tls: pending` while some name
    /// asked for has no certificate yet (the process serves, but not those names).
    pub fn health_text(&self) -> &'static str {
        match self.status() {
            TlsStatus::Pending => "ok\ntls: pending",
            TlsStatus::On | TlsStatus::Off => "ok",
        }
    }

    /// Sets (or with `None` removes) where challenge answers come from; takes effect at once.
    pub fn set_answers(&self, answers: Option<Arc<dyn ChallengeAnswers>>) {
        let source = answers.map(|answers| Arc::new(AnswerSource(answers)));
        self.answering.store(source.is_some(), Ordering::Relaxed);
        self.answers.store(source);
    }

    /// Whether an answers source is set (one relaxed load: plain listeners ask per request).
    pub fn answering(&self) -> bool {
        self.answering.load(Ordering::Relaxed)
    }

    /// The HTTP-01 key authorization for `token`, if a validation is waiting for it.
    pub fn http01(&self, token: &str) -> Option<String> {
        let answers = self.answers.load();
        answers.as_ref()?.0.http01(token)
    }

    /// The ACME settings as they change; `None` while `-tls-domains` is empty. The receiver
    /// sees the current value first.
    pub fn acme_settings(&self) -> tokio::sync::watch::Receiver<Option<AcmeSettings>> {
        self.acme.subscribe()
    }

    /// Reads and checks what `config` asks of HTTPS. Errors name the setting and the file.
    /// A static pair whose files are unchanged in name is kept as loaded (the file watch and
    /// SIGHUP re-read it), so changing another setting does not re-read it.
    pub fn prepare(&self, config: &Config) -> Result<TlsPlan, String> {
        if !config.tls_cert.trim().is_empty() {
            let files = PairFiles {
                cert: PathBuf::from(config.tls_cert.trim()),
                key: PathBuf::from(config.tls_key.trim()),
                flags: PairFlags {
                    cert: config.name_of("tls_cert"),
                    key: config.name_of("tls_key"),
                },
            };
            let pair = match self.store.static_pair() {
                Some(current)
                    if current.files.cert == files.cert && current.files.key == files.key =>
                {
                    current
                }
                _ => Arc::new(load_pair(&files, SystemTime::now()).map_err(|e| e.0)?),
            };
            return Ok(TlsPlan {
                mode: Mode::Static(pair),
            });
        }
        if config.tls_domains.is_empty() {
            return Ok(TlsPlan { mode: Mode::Off });
        }
        let directory = if !config.tls_directory.is_empty() {
            config.tls_directory.clone()
        } else if config.tls_staging {
            LETS_ENCRYPT_STAGING.to_string()
        } else {
            LETS_ENCRYPT.to_string()
        };
        let directory_roots = match config.tls_directory_ca.trim() {
            "" => Vec::new(),
            path => read_roots(path).map_err(|reason| {
                format!("{} {path}: {reason}", config.name_of("tls_directory_ca"))
            })?,
        };
        let mut settings = AcmeSettings::new(
            config.tls_domains.hosts().to_vec(),
            PathBuf::from(config.tls_cache.trim()),
        );
        settings.email = config.tls_email.trim().to_string();
        settings.directory_url = directory;
        settings.directory_roots = directory_roots;
        settings.challenge = challenge_for(config);
        // The engine's own checks, the cache directory made if missing: a setting it would
        // refuse stops the start or the change here, naming the setting.
        acme::prepare(&settings).map_err(|error| match error {
            acme::AcmeError::Cache { .. } => {
                format!("{}: {error}", config.name_of("tls_cache"))
            }
            acme::AcmeError::DirectoryUrl { .. } => {
                format!("{}: {error}", config.name_of("tls_directory"))
            }
            acme::AcmeError::DirectoryRoots(_) => {
                format!("{}: {error}", config.name_of("tls_directory_ca"))
            }
            _ => format!("{}: {error}", config.name_of("tls_domains")),
        })?;
        Ok(TlsPlan {
            mode: Mode::Acme(settings),
        })
    }

    /// Applies a prepared plan: new connections follow it at once; open ones keep what they
    /// negotiated.
    pub fn apply(&self, plan: TlsPlan) {
        let acme = match plan.mode {
            Mode::Off => {
                self.serving.store(None);
                self.store.set_static(None);
                self.store.expect(&[]);
                None
            }
            Mode::Static(pair) => {
                if !self
                    .store
                    .static_pair()
                    .is_some_and(|current| Arc::ptr_eq(&current, &pair))
                {
                    self.store.set_static(Some(pair));
                }
                self.store.expect(&[]);
                self.serving.store(Some(Arc::clone(&self.server)));
                None
            }
            Mode::Acme(settings) => {
                self.store.set_static(None);
                self.store.expect(&settings.domains);
                self.serving.store(Some(Arc::clone(&self.server)));
                Some(settings)
            }
        };
        self.acme.send_if_modified(|current| {
            if *current == acme {
                return false;
            }
            *current = acme;
            true
        });
    }

    /// Loads the portal's own pair (restart only) and serves it from then on; nothing when the
    /// portal does not listen.
    pub fn start_portal(&self, config: &Config) -> Result<(), String> {
        if !config.portal_tls_requested() || !config.portal_listens() {
            return Ok(());
        }
        let files = PairFiles {
            cert: PathBuf::from(config.portal_tls_cert.trim()),
            key: PathBuf::from(config.portal_tls_key.trim()),
            flags: PairFlags {
                cert: config.name_of("portal_tls_cert"),
                key: config.name_of("portal_tls_key"),
            },
        };
        let pair = load_pair(&files, SystemTime::now()).map_err(|e| e.0)?;
        let store = Arc::new(CertStore::default());
        store.set_static(Some(Arc::new(pair)));
        let resolver = Arc::new(Resolver {
            store: Arc::clone(&store),
            answers: Arc::new(ArcSwapOption::empty()),
        });
        let server = Arc::new(
            server_config(resolver, vec![b"http/1.1".to_vec()]).map_err(|e| e.to_string())?,
        );
        let _ = self.portal.set(PortalTls { store, server });
        Ok(())
    }

    /// The configuration of the portal listener when it has its own certificate.
    pub fn portal_acceptor(&self) -> Option<Arc<ServerConfig>> {
        self.portal.get().map(|portal| Arc::clone(&portal.server))
    }

    /// The portal's certificate pair, when it has one.
    pub fn portal_pair(&self) -> Option<Arc<StaticPair>> {
        self.portal
            .get()
            .and_then(|portal| portal.store.static_pair())
    }

    /// Re-reads the certificate files of both listeners when they changed (always when
    /// `forced`: SIGHUP), logging what happened. A pair that does not load leaves the one
    /// served before in place.
    pub fn reload_files(&self, forced: bool) {
        let now = SystemTime::now();
        let stores = std::iter::once(("public", &self.store))
            .chain(self.portal.get().map(|portal| ("portal", &portal.store)));
        for (listener, store) in stores {
            match store.reload_static(forced, now) {
                Reloaded::Unchanged => {}
                Reloaded::Replaced(pair) => tracing::info!(
                    listener,
                    names = %pair.names_shown(),
                    expires = %pair.expires(),
                    "certificate reloaded from {}",
                    pair.files.cert.display()
                ),
                Reloaded::Refused(error) => tracing::warn!(
                    listener,
                    "certificate not reloaded, the one loaded before is still served: {error}"
                ),
            }
        }
    }
}

/// Which ACME challenge to answer: TLS-ALPN-01 reaches Concert when its TLS port is 443 (the
/// CA always connects to 443); otherwise, with a plain-HTTP listener, HTTP-01 (the CA connects
/// to port 80, which that listener is for). With neither, TLS-ALPN-01, for a port forwarded from
/// 443; the engine falls back to the other kind when the CA does not offer the chosen one.
fn challenge_for(config: &Config) -> ChallengePreference {
    let listens_on_443 = config.listen.rsplit(':').next() == Some("443");
    if !listens_on_443 && !config.http_listen.trim().is_empty() {
        ChallengePreference::Http01
    } else {
        ChallengePreference::TlsAlpn01
    }
}

/// Reads a PEM file of root certificates (`-tls-directory-ca`).
pub fn read_roots(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    pair::parse_chain(&pem)
}

/// The rustls configuration every HTTPS listener of Concert uses: ring, TLS 1.3 and 1.2 (with
/// rustls' default suites, in the client's order of preference), certificates chosen by
/// `resolver`, `alpn` in order of preference, stateless session tickets.
fn server_config(
    resolver: Arc<Resolver>,
    alpn: Vec<Vec<u8>>,
) -> Result<ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = alpn;
    // Resumption for any number of clients, without a server-side cache: tickets are sealed
    // with a key rotated every six hours (the default cache holds 256 sessions behind a lock).
    // A sealed ticket may be presented again, so one per handshake is enough, and each one
    // costs a key derivation on both ends.
    config.ticketer = rustls::crypto::ring::Ticketer::new()?;
    config.send_tls13_tickets = 1;
    Ok(config)
}

/// The certificate a TLS-ALPN-01 challenge answer is made of, from DER parts: for an ACME
/// engine that builds the challenge certificate itself.
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Result<CertifiedKey, rustls::Error> {
    let signing = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(key)?;
    Ok(CertifiedKey::new(chain, signing))
}

#[cfg(test)]
mod tests;
