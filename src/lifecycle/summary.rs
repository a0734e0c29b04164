//! What a start says about itself: the summary of what this process enforces, and warnings for
//! settings that do nothing in this version or look risky.

use crate::admission::priority;
use crate::app::Generation;
use crate::config::{self, Config};
use crate::store;
use crate::tls::Tls;

use super::VERSION;

/// Settings of parts this version does not have yet: they are parsed and checked so an
/// existing configuration loads, but they do nothing, and an operator who set one must hear so.
const UNAVAILABLE_PARTS: &[(&str, &str)] = &[("pass_duration", "VIP room passes")];

/// Shorter admin tokens only start with a warning: deployments configured without a length rule
/// may use them, and refusing to start would break those.
const MIN_ADMIN_TOKEN_LEN: usize = 16;

/// Warns for every setting of a missing part that would have done something, and for a
/// guessable admin token. Said once the start has succeeded, so a failed start stays one line.
pub(super) fn warn_unavailable_parts(config: &Config) {
    if !config.admin_token.is_empty() && config.admin_token.len() < MIN_ADMIN_TOKEN_LEN {
        tracing::warn!(
            "CONCERT_ADMIN_TOKEN is only {} bytes: anyone who guesses it can change the cap and bans; use at least {MIN_ADMIN_TOKEN_LEN} random bytes (e.g. openssl rand -hex 32)",
            config.admin_token.len()
        );
    }
    if config.portal_pass.is_empty() && !config.portal_listen.is_empty() {
        tracing::info!(
            "portal disabled: set CONCERT_PORTAL_PASS to enable it on {}",
            config.portal_listen
        );
    }
    for (key, part) in UNAVAILABLE_PARTS {
        // Turning a missing part off (an empty address or path, `false`) asks for nothing.
        let asks_for_something = config
            .value_text(key)
            .is_some_and(|text| !text.is_empty() && text != "false");
        if config.source(key) != config::Source::Default && asks_for_something {
            tracing::warn!(
                "{} is set, but {part} is not in this version: it has no effect",
                config.name_of(key)
            );
        }
    }
}

/// Path lists win over `-metrics-path`; say so, since the operator may expect metrics there.
pub(super) fn warn_if_metrics_path_is_routed(generation: &Generation) {
    let Some(path) = generation.config.metrics_path.as_deref() else {
        return;
    };
    if generation.metrics_path_routed {
        tracing::warn!(
            metrics_path = path,
            "a path list routes the metrics path, so it is not answered there; metrics stay at /_room/metrics (choose another -metrics-path to move them)"
        );
    }
}

/// The start summary: the room's numbers on one line, then a line for each part that
/// is on, so an operator reading the journal sees what this process enforces.
pub(super) fn log_summary(config: &Config, data_dir: Option<&store::DataDir>, tls: &Tls) {
    use config::duration::format_go_duration as go;
    // A cap of 0 is worked out from other settings; the summary says so next to its value.
    let derived = |cap: u32| if cap == 0 { " (derived)" } else { "" };
    tracing::info!(
        "concert {VERSION}: {} -> {} cap={} max-queue={} ticket-ttl={} first-poll-grace={} ready-grace={} asset-cap={}{} asset-user-cap-h1={} asset-user-cap-h2={}",
        config.listen,
        config.upstream_shown(),
        config.cap,
        config.max_queue,
        go(config.effective_token_ttl()),
        go(config.first_poll_grace),
        go(config.ready_grace),
        config.effective_asset_cap(),
        derived(config.asset_cap),
        config.asset_user_cap_h1,
        config.asset_user_cap_h2,
    );
    tracing::info!(
        "priority lane: cap={}{} wait={} ranks={} forms={}",
        config.effective_priority_cap(),
        derived(config.priority_cap),
        go(config.priority_wait),
        priority::lane_ranks_text(config.priority_lane_rank),
        if config.priority_forms { "on" } else { "off" },
    );
    if !config.stream_paths.is_empty() {
        tracing::info!(
            "streams: paths={} cap={}",
            config.stream_paths.as_str(),
            config.stream_cap,
        );
    }
    if config.abuse {
        tracing::info!(
            "abuse registry: strikes={} window={} cooldown={}..{} max-entries={} ban-paths={} allowed-ranges={}",
            config.abuse_strikes,
            go(config.abuse_window),
            go(config.abuse_cooldown),
            go(config.abuse_max_cooldown),
            config.abuse_max_entries,
            config.ban_paths.len(),
            config.abuse_allow.len(),
        );
    } else {
        tracing::info!("abuse registry: off");
    }
    log_https(config, tls);
    match data_dir {
        Some(dir) => tracing::info!(
            "data dir: {} (bans, the waiting line and settings survive restarts)",
            dir.path().display()
        ),
        None => tracing::info!("data dir: none, so nothing survives a restart"),
    }
    if config.upstream_has_userinfo() {
        tracing::warn!(
            "-upstream carries a user name or password, which is never sent to the origin (nor shown in /_room/stats)"
        );
    }
}

/// What the listeners serve over HTTPS, with the certificates' names and ends of validity.
fn log_https(config: &Config, tls: &Tls) {
    if let Some(pair) = tls.store().static_pair() {
        tracing::info!(
            "https on {}: certificate for {} from {}, valid until {}; hsts={}",
            config.listen,
            pair.names_shown(),
            pair.files.cert.display(),
            pair.expires(),
            hsts_shown(config),
        );
    } else if !config.tls_domains.is_empty() {
        tracing::info!(
            "https on {}: certificates for {} wanted, pending; hsts={}",
            config.listen,
            config.tls_domains.as_str(),
            hsts_shown(config),
        );
    }
    if let Some(pair) = tls.portal_pair() {
        tracing::info!(
            "portal https: certificate for {} from {}, valid until {}",
            pair.names_shown(),
            pair.files.cert.display(),
            pair.expires(),
        );
    }
}

fn hsts_shown(config: &Config) -> String {
    match config.hsts.as_secs() {
        0 => "off".to_string(),
        secs => format!("max-age={secs}"),
    }
}
