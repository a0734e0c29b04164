//! The background task: wakes when a certificate is missing, due for renewal or due for a retry,
//! and at least every `check_every`; obtains what is needed one name at a time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::Account;
use parking_lot::Mutex;

use super::cache::CaCache;
use super::certificate::Issued;
use super::challenge::Answers;
use super::client::AcmeHttp;
use super::{AcmeSettings, Failure, NameStatus, issue};
use crate::tls::CertificateSink;

/// An attempt that has not ended by then (a CA that accepts connections and never answers in
/// full) is abandoned and counts as a failure.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(5 * 60);

pub(super) struct Engine {
    settings: AcmeSettings,
    names: Vec<NameState>,
    cache: CaCache,
    http: AcmeHttp,
    /// Logged in on first need; dropped after a failure so the next attempt starts afresh.
    account: Option<Account>,
    sink: Arc<dyn CertificateSink>,
    answers: Arc<Answers>,
    status: Arc<Mutex<BTreeMap<String, NameStatus>>>,
}

struct NameState {
    name: String,
    current: Option<Issued>,
    failures: u32,
    next_try: Option<SystemTime>,
    last_failure: Option<String>,
}

impl Engine {
    /// Loads the cache and installs every certificate in it that has not expired, before the
    /// caller returns: a restart serves at once, without the CA.
    pub(super) fn new(
        settings: AcmeSettings,
        names: Vec<String>,
        cache: CaCache,
        http: AcmeHttp,
        sink: Arc<dyn CertificateSink>,
        answers: Arc<Answers>,
        status: Arc<Mutex<BTreeMap<String, NameStatus>>>,
    ) -> Engine {
        let now = SystemTime::now();
        let names = names
            .into_iter()
            .map(|name| {
                let current = load_cached(&cache, &name, now);
                if let Some(issued) = &current {
                    sink.install(&name, Arc::clone(&issued.certified));
                    tracing::info!(
                        "acme: {name}: serving the cached certificate, valid until {}",
                        rfc3339(issued.not_after)
                    );
                }
                NameState {
                    name,
                    current,
                    failures: 0,
                    next_try: None,
                    last_failure: None,
                }
            })
            .collect();
        let engine = Engine {
            settings,
            names,
            cache,
            http,
            account: None,
            sink,
            answers,
            status,
        };
        for index in 0..engine.names.len() {
            engine.publish(index);
        }
        engine
    }

    pub(super) async fn run(mut self) {
        loop {
            let now = SystemTime::now();
            for index in 0..self.names.len() {
                let state = &self.names[index];
                if is_due(
                    state.current.as_ref().map(Issued::renew_at),
                    state.next_try,
                    now,
                ) {
                    self.attempt(index).await;
                }
            }
            let now = SystemTime::now();
            let wake = self
                .names
                .iter()
                .map(|state| due_at(state.current.as_ref().map(Issued::renew_at), state.next_try))
                .fold(now + self.settings.check_every, SystemTime::min);
            // Wall-clock sleeps are capped at `check_every`, so a clock that jumps is noticed.
            let pause = wake.duration_since(now).unwrap_or(Duration::ZERO);
            tokio::time::sleep(pause.max(Duration::from_millis(10))).await;
        }
    }

    async fn attempt(&mut self, index: usize) {
        let name = self.names[index].name.clone();
        if self.names[index].current.is_none() && self.names[index].failures == 0 {
            self.status.lock().insert(
                name.clone(),
                NameStatus::Pending {
                    reason: "requesting a certificate".to_string(),
                },
            );
        }
        let outcome = match tokio::time::timeout(ATTEMPT_LIMIT, self.obtain(&name)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!(
                "no certificate within {} minutes",
                ATTEMPT_LIMIT.as_secs() / 60
            )),
        };
        let now = SystemTime::now();
        match outcome {
            Ok((issued, pem)) => {
                if let Err(error) = self.cache.write_certificate(&name, &pem) {
                    tracing::warn!(
                        "acme: {name}: serving the new certificate, but it could not be cached in {}: {error}",
                        self.cache.dir().display()
                    );
                }
                self.sink.install(&name, Arc::clone(&issued.certified));
                tracing::info!(
                    "acme: {name}: new certificate installed, valid until {}, renewal from {}",
                    rfc3339(issued.not_after),
                    rfc3339(issued.renew_at())
                );
                let state = &mut self.names[index];
                state.current = Some(issued);
                state.failures = 0;
                state.next_try = None;
                state.last_failure = None;
            }
            Err(reason) => {
                self.account = None;
                let state = &mut self.names[index];
                state.failures = state.failures.saturating_add(1);
                let delay = self.settings.retry.delay(state.failures, rand::random());
                state.next_try = Some(now + delay);
                let serving = match &state.current {
                    Some(issued) if issued.not_after > now => format!(
                        "; still serving the current certificate (valid until {})",
                        rfc3339(issued.not_after)
                    ),
                    _ => String::new(),
                };
                tracing::warn!(
                    "acme: {name}: certificate request failed ({} in a row): {reason}; next try in {}{serving}",
                    state.failures,
                    readable(delay)
                );
                state.last_failure = Some(reason);
            }
        }
        self.publish(index);
    }

    async fn obtain(&mut self, name: &str) -> Result<(Issued, Vec<u8>), String> {
        let account = match &self.account {
            Some(account) => account.clone(),
            None => {
                let account = issue::log_in(
                    &self.http,
                    &self.cache,
                    &self.settings.directory_url,
                    &self.settings.email,
                )
                .await?;
                self.account = Some(account.clone());
                account
            }
        };
        issue::obtain(&account, name, self.settings.challenge, &self.answers).await
    }

    fn publish(&self, index: usize) {
        let state = &self.names[index];
        let failure = match (&state.last_failure, state.next_try) {
            (Some(reason), Some(next_try)) => Some(Failure {
                reason: reason.clone(),
                next_try,
                attempts: state.failures,
            }),
            _ => None,
        };
        let status = match (&state.current, failure) {
            (Some(issued), renewal) => NameStatus::Ready {
                not_after: issued.not_after,
                renewal,
            },
            (None, Some(failure)) => NameStatus::Failed(failure),
            (None, None) => NameStatus::Pending {
                reason: "no certificate yet; requesting one".to_string(),
            },
        };
        self.status.lock().insert(state.name.clone(), status);
    }
}

/// A name needs work when it has no certificate or its renewal time has come, and no retry
/// wait is running.
pub(super) fn is_due(
    renew_at: Option<SystemTime>,
    next_try: Option<SystemTime>,
    now: SystemTime,
) -> bool {
    due_at(renew_at, next_try) <= now
}

/// The earliest time at which [`is_due`] holds.
pub(super) fn due_at(renew_at: Option<SystemTime>, next_try: Option<SystemTime>) -> SystemTime {
    let wanted = renew_at.unwrap_or(SystemTime::UNIX_EPOCH);
    match next_try {
        Some(next_try) => wanted.max(next_try),
        None => wanted,
    }
}

fn load_cached(cache: &CaCache, name: &str, now: SystemTime) -> Option<Issued> {
    let pem = match cache.read_certificate(name) {
        Ok(Some(pem)) => pem,
        Ok(None) => return None,
        Err(error) => {
            tracing::warn!(
                "acme: {name}: cannot read {}: {error}; requesting a new certificate",
                cache.certificate_path(name).display()
            );
            return None;
        }
    };
    match Issued::from_pem(&pem) {
        Ok(issued) if issued.not_after > now => Some(issued),
        Ok(issued) => {
            tracing::info!(
                "acme: {name}: the cached certificate expired at {}; requesting a new one",
                rfc3339(issued.not_after)
            );
            None
        }
        Err(reason) => {
            tracing::warn!(
                "acme: {name}: {}: {reason}; requesting a new certificate",
                cache.certificate_path(name).display()
            );
            None
        }
    }
}

/// "0.4s", "45s", "16m", "6h": enough to read a retry wait at a glance.
pub(super) fn readable(wait: Duration) -> String {
    let secs = wait.as_secs();
    if secs < 10 {
        format!("{:.1}s", wait.as_secs_f64())
    } else if secs < 120 {
        format!("{secs}s")
    } else if secs < 2 * 60 * 60 {
        format!("{}m", secs / 60)
    } else {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    }
}

fn rfc3339(time: SystemTime) -> String {
    let secs = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    };
    let mut out = Vec::with_capacity(20);
    crate::sys::walltime::push_rfc3339(&mut out, secs, 0);
    String::from_utf8_lossy(&out).into_owned()
}
