//! Keeping the served certificates current: the static pairs' files watched for changes, and
//! the place where certificates for `-tls-domains` are requested.

use std::sync::Arc;
use std::time::Duration;

use crate::app::App;

/// How often the certificate files are looked at: two `stat` calls per pair, so a renewed
/// certificate is served within seconds of landing on disk.
pub(super) const FILE_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Re-reads the static pairs (public listener and portal) whenever their files change.
pub(super) fn spawn_file_watch(app: &Arc<App>) -> tokio::task::JoinHandle<()> {
    let app = Arc::downgrade(app);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(FILE_CHECK_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            let Some(app) = app.upgrade() else { return };
            let checked = tokio::task::spawn_blocking(move || app.tls.reload_files(false)).await;
            if checked.is_err() {
                return;
            }
        }
    })
}

/// ACME ENGINE: the one place where certificates for `-tls-domains` are requested.
///
/// An ACME engine is started here whenever the settings ask for one (`-tls-domains` set, at
/// start or by a live change): it receives `app.tls.store()` as the sink for the certificates
/// it obtains (`CertStore::install`, once per name) and gives back its `ChallengeAnswers`,
/// set with `app.tls.set_answers`. Each new value on the channel (the domains, e-mail,
/// directory, its roots or the cache changed) restarts it; `None` stops it and clears the
/// answers.
///
/// Until an engine is joined here, the names stay pending: the public listener speaks TLS,
/// handshakes for these names fail cleanly, `/_room/healthz` says `tls: pending`, and one
/// warning says that no certificates are being requested.
pub(super) fn spawn_certificate_requests(app: &Arc<App>) -> tokio::task::JoinHandle<()> {
    let mut changes = app.tls.acme_settings();
    let tls = Arc::clone(&app.tls);
    tokio::spawn(async move {
        loop {
            let settings = changes.borrow_and_update().clone();
            match settings {
                Some(settings) => tracing::warn!(
                    domains = %settings.domains.join(","),
                    directory = %settings.directory,
                    "-tls-domains is set, but no ACME client is built in: certificates are not being requested, so TLS handshakes for these names fail until one is installed"
                ),
                None => tls.set_answers(None),
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    })
}
