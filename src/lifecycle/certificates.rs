//! Keeping the served certificates current: the static pairs' files watched for changes, and
//! the ACME engine that requests certificates for `-tls-domains`.

use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::tls::CertificateSink;
use crate::tls::acme::Acme;

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

/// Runs the ACME engine while `-tls-domains` asks for one: started at start and restarted
/// with every change of what it is asked to do (the domains, e-mail, directory, its roots or the
/// cache), stopped when HTTPS no longer needs it. It installs the certificates it obtains into
/// the public listener's store, and its challenge answers are what the listeners give the CA.
pub(super) fn spawn_certificate_requests(app: &Arc<App>) -> tokio::task::JoinHandle<()> {
    let mut changes = app.tls.acme_settings();
    let tls = Arc::clone(&app.tls);
    tokio::spawn(async move {
        let mut running: Option<Arc<Acme>> = None;
        loop {
            let settings = changes.borrow_and_update().clone();
            if let Some(engine) = running.take() {
                engine.stop();
            }
            match settings {
                Some(settings) => {
                    let domains = settings.domains.join(",");
                    let sink: Arc<dyn CertificateSink> = tls.store().clone();
                    match Acme::start(settings, sink) {
                        Ok(engine) => {
                            tls.set_answers(Some(engine.answers()));
                            tracing::info!(%domains, "requesting certificates over ACME");
                            running = Some(engine);
                        }
                        // The same checks ran when the settings were accepted; this is the
                        // cache directory gone or changed since.
                        Err(error) => {
                            tls.set_answers(None);
                            tracing::error!(%domains, "certificates cannot be requested: {error}");
                        }
                    }
                }
                None => tls.set_answers(None),
            }
            if changes.changed().await.is_err() {
                if let Some(engine) = running.take() {
                    engine.stop();
                }
                return;
            }
        }
    })
}
