//! Whole-config validation: the cross-setting rules, run at start and on every runtime change in
//! a fixed order (so a config with several problems always lists them alike), followed by every
//! row's per-value check so a config built or edited in code meets the same rules as one read
//! from flags or files. Every problem is reported, not just the first.

use std::time::Duration;

use super::Config;
use super::duration::format_go_duration;
use super::table::{SETTINGS, setting};
use super::value::{check_value, to_text};
use crate::paths::rules::check_path_lists;

/// Minimum admission secret length in bytes.
pub const MIN_ADMIT_SECRET_LEN: usize = 32;
/// Minimum portal pass length in bytes, enforced when the portal listens.
pub const MIN_PORTAL_PASS_LEN: usize = 16;

/// Runs one row's per-value check against the config's current value.
fn check_key(config: &Config, key: &str) -> Result<(), String> {
    let Some((_, def)) = setting(key) else {
        return Err(format!("internal error: unknown setting {key:?}"));
    };
    let value = (def.get)(config);
    check_value(def, value).map_err(|reason| {
        format!(
            "invalid value {:?} for {}: {reason}",
            to_text(value),
            config.name_of(key)
        )
    })
}

/// Problems found so far, each once (the per-row checks at the end repeat earlier ones).
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn note(&mut self, checked: Result<(), String>) {
        if let Err(problem) = checked
            && !self.0.contains(&problem)
        {
            self.0.push(problem);
        }
    }
}

/// Every problem of the whole config, in a fixed order, so the first one is always the same.
/// Clamps `retry_after` to at least 1 and generates the admission secret when it is unset.
pub(super) fn problems(config: &mut Config) -> Vec<String> {
    if config.retry_after < 1 {
        config.retry_after = 1;
    }
    let mut found = Problems::default();
    found.note(check_key(config, "upstream"));
    found.note(check_key(config, "cap"));
    found.note(check_grace(
        config,
        "first_poll_grace",
        config.first_poll_grace,
    ));
    found.note(check_grace(config, "ready_grace", config.ready_grace));
    for key in [
        "asset_cap",
        "asset_user_cap_h1",
        "asset_user_cap_h2",
        "asset_wait",
        "asset_user_wait",
        "admit_ttl",
        "stream_cap",
        "priority_cap",
        "priority_wait",
        "priority_lane_rank",
    ] {
        found.note(check_key(config, key));
    }
    found.note(check_tls(config));
    found.note(check_admit_secret(config));
    found.note(check_abuse(config));
    found.note(check_portal(config));
    found.note(check_path_lists(
        &[
            (config.name_of("bypass"), &config.bypass),
            (config.name_of("assets"), &config.assets),
            (config.name_of("asset_public"), &config.asset_public),
            (config.name_of("stream_paths"), &config.stream_paths),
        ],
        Some((config.name_of("ban_paths"), &config.ban_paths)),
    ));
    found.note(check_html(config));
    for def in SETTINGS {
        found.note(check_key(config, def.key));
    }
    found.note(check_workers(config));
    found.0
}

/// [`problems`], all of them in one line.
pub(super) fn validate(config: &mut Config) -> Result<(), String> {
    let found = problems(config);
    if found.is_empty() {
        Ok(())
    } else {
        Err(found.join("; "))
    }
}

/// A grace must leave a client polling at the retry interval two chances to be seen.
fn check_grace(config: &Config, key: &str, grace: Duration) -> Result<(), String> {
    check_key(config, key)?;
    let name = config.name_of(key);
    let retry_after = config.name_of("retry_after");
    let minimum = Duration::from_secs(2 * u64::from(config.retry_after));
    if !grace.is_zero() && grace < minimum {
        return Err(format!(
            "invalid value {:?} for {name}: must be 0 or at least twice {retry_after} ({})",
            format_go_duration(grace),
            format_go_duration(minimum)
        ));
    }
    Ok(())
}

/// The HTTPS settings together: one way to get certificates at a time, pairs complete, and the
/// plain-HTTP listener only beside HTTPS (it sends everything to https).
fn check_tls(config: &Config) -> Result<(), String> {
    for key in ["tls_directory", "hsts", "http_listen"] {
        check_key(config, key)?;
    }
    check_pair(config, "tls_cert", "tls_key")?;
    check_pair(config, "portal_tls_cert", "portal_tls_key")?;
    if !config.tls_cert.trim().is_empty() && !config.tls_domains.is_empty() {
        return Err(format!(
            "{} and {} cannot both be set: serve the certificate you have, or have Concert get them, not both",
            config.name_of("tls_cert"),
            config.name_of("tls_domains")
        ));
    }
    if !config.tls_directory.is_empty() && config.tls_staging {
        return Err(format!(
            "{} and {} cannot both be set: the staging service is one directory, {:?} another",
            config.name_of("tls_directory"),
            config.name_of("tls_staging"),
            config.tls_directory
        ));
    }
    if !config.http_listen.trim().is_empty() && !config.tls_requested() {
        return Err(format!(
            "{} sends every request to https, so it needs HTTPS on: set {} and {}, or {}",
            config.name_of("http_listen"),
            config.name_of("tls_cert"),
            config.name_of("tls_key"),
            config.name_of("tls_domains")
        ));
    }
    if config.tls_domains.is_empty() {
        return Ok(());
    }
    if config.tls_cache.trim().is_empty() {
        return Err(format!(
            "{} must name a directory when {} is set",
            config.name_of("tls_cache"),
            config.name_of("tls_domains")
        ));
    }
    let email = config.tls_email.trim();
    if !email.is_empty() && !email.contains('@') {
        return Err(format!(
            "invalid value {:?} for {}: must be an e-mail address",
            config.tls_email,
            config.name_of("tls_email")
        ));
    }
    Ok(())
}

/// A certificate and its key come together or not at all.
fn check_pair(config: &Config, cert_key: &str, key_key: &str) -> Result<(), String> {
    let text = |key: &str| config.value_text(key).unwrap_or_default();
    let (cert, key) = (text(cert_key), text(key_key));
    if cert.trim().is_empty() != key.trim().is_empty() {
        return Err(format!(
            "{} and {} go together: set both (the certificate and its private key) or neither",
            config.name_of(cert_key),
            config.name_of(key_key)
        ));
    }
    Ok(())
}

fn check_admit_secret(config: &mut Config) -> Result<(), String> {
    if let Some(previous) = &config.admit_secret_previous
        && previous.len() < MIN_ADMIT_SECRET_LEN
    {
        return Err(format!(
            "CONCERT_ADMIT_SECRET_PREVIOUS must be at least {MIN_ADMIT_SECRET_LEN} bytes (it has {})",
            previous.len()
        ));
    }
    match &config.admit_secret {
        Some(secret) if secret.len() < MIN_ADMIT_SECRET_LEN => Err(format!(
            "CONCERT_ADMIT_SECRET must be at least {MIN_ADMIT_SECRET_LEN} bytes (it has {})",
            secret.len()
        )),
        Some(_) => Ok(()),
        None => {
            config.admit_secret = Some(rand::random::<[u8; MIN_ADMIT_SECRET_LEN]>().to_vec());
            config.admit_secret_generated = true;
            Ok(())
        }
    }
}

fn check_abuse(config: &Config) -> Result<(), String> {
    if !config.abuse {
        if !config.ban_paths.is_empty() {
            return Err(format!(
                "{} requires {} to be on",
                config.name_of("ban_paths"),
                config.name_of("abuse")
            ));
        }
        return Ok(());
    }
    if config.abuse_strikes < 1 {
        return Err(format!(
            "invalid value \"{}\" for {}: must be at least 1",
            config.abuse_strikes,
            config.name_of("abuse_strikes")
        ));
    }
    for (key, value) in [
        ("abuse_window", config.abuse_window),
        ("abuse_cooldown", config.abuse_cooldown),
    ] {
        if value.is_zero() {
            return Err(format!(
                "invalid value \"{}\" for {}: must be more than 0s",
                format_go_duration(value),
                config.name_of(key)
            ));
        }
    }
    if config.abuse_max_cooldown < config.abuse_cooldown {
        return Err(format!(
            "invalid value \"{}\" for {}: must be at least {} ({})",
            format_go_duration(config.abuse_max_cooldown),
            config.name_of("abuse_max_cooldown"),
            config.name_of("abuse_cooldown"),
            format_go_duration(config.abuse_cooldown)
        ));
    }
    if config.abuse_max_entries < 1 {
        return Err(format!(
            "invalid value \"{}\" for {}: must be at least 1",
            config.abuse_max_entries,
            config.name_of("abuse_max_entries")
        ));
    }
    Ok(())
}

fn check_portal(config: &Config) -> Result<(), String> {
    if !config.portal_listens() {
        return Ok(());
    }
    if config.portal_allow.is_empty() {
        return Err(format!(
            "{} must list at least one address while the portal listens",
            config.name_of("portal_allow")
        ));
    }
    if config.portal_pass.len() < MIN_PORTAL_PASS_LEN {
        return Err(format!(
            "CONCERT_PORTAL_PASS must be at least {MIN_PORTAL_PASS_LEN} bytes while the portal listens (it has {})",
            config.portal_pass.len()
        ));
    }
    check_key(config, "portal_session_ttl")
}

fn check_html(config: &Config) -> Result<(), String> {
    if config.html.is_empty() {
        return Ok(());
    }
    let readable = std::fs::File::open(&config.html)
        .and_then(|file| file.metadata())
        .map_err(|error| error.to_string())
        .and_then(|meta| {
            if meta.is_file() {
                Ok(())
            } else {
                Err("not a regular file".to_string())
            }
        });
    readable.map_err(|reason| {
        format!(
            "{} {:?} cannot be read: {reason}",
            config.name_of("html"),
            config.html
        )
    })
}

/// Upper bound on runtime worker threads; far above any sensible setting, low enough that a
/// typo does not try to start millions of threads.
pub(crate) const MAX_WORKERS: usize = 1024;

fn check_workers(config: &Config) -> Result<(), String> {
    if config.workers > MAX_WORKERS {
        return Err(format!(
            "invalid value \"{}\" for -workers: must be between 0 and {MAX_WORKERS}",
            config.workers
        ));
    }
    Ok(())
}
