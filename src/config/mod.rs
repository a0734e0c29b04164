//! Configuration: every setting of Concert, where its value comes from (flag > `CONCERT_*` env >
//! default, with settings.json layered on top by the caller through [`Config::set_json`]), the
//! per-value and whole-config rules, and the path-list machinery the request path uses.
//!
//! Start-up flow: [`load`] (argv + env, per-value checks) → apply settings.json with
//! [`Config::set_json`] → [`Config::validate`].

pub mod cidr;
pub mod duration;
pub mod flags;
pub mod hosts;
pub mod table;
pub mod validate;
mod value;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

#[cfg(test)]
use crate::paths::matchers::RouteKind;
pub(crate) use crate::paths::matchers::{BanPathMatcher, RouteTable};
pub(crate) use crate::paths::rules::PathList;
pub(crate) use cidr::CidrList;
pub use duration::format_go_duration;
pub(crate) use duration::parse_go_duration;
pub(crate) use hosts::HostList;
pub(crate) use table::MAX_I32;
pub use table::{SETTINGS, SettingDef, setting};

use flags::FlagParse;
use value::TextOrigin;
pub(crate) use value::check_acme_directory;

/// Default data directory.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/concert/data";
/// Where Prometheus looks by default.
pub(crate) const DEFAULT_METRICS_PATH: &str = "/metrics";
/// Room default used when `token_ttl` or `reaper` is 0.
pub(crate) const ROOM_DEFAULT_TTL: Duration = Duration::from_secs(300);

/// Where a setting's current value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    File,
    Flag,
    Env,
    Default,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Flag => "flag",
            Source::Env => "env",
            Source::Default => "default",
        }
    }
}

/// Process log format (`-log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Environment lookup, injectable so tests never touch the process environment.
pub trait EnvSource {
    fn var(&self, name: &str) -> Option<String>;
}

/// The real process environment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl EnvSource for HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// A configuration problem, ready to print as one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Unknown flag or malformed command line; the message includes clap's usage hint.
    #[error("{0}")]
    Usage(String),
    /// A bad value or an inconsistent configuration.
    #[error("{0}")]
    Invalid(String),
}

impl ConfigError {
    /// Exit status: 2 for usage errors (as Go's flag package), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            ConfigError::Usage(_) => 2,
            ConfigError::Invalid(_) => 1,
        }
    }
}

/// Outcome of reading the command line.
#[derive(Debug)]
pub enum Loaded {
    Run(Box<Config>),
    /// `-version` was given; print it and exit 0 before any validation.
    Version,
    /// `-h`/`-help`/`--help`: the usage text to print, exit 0.
    Help(String),
}

/// Every setting, typed. Field names are the settings-file keys.
#[derive(Clone)]
pub struct Config {
    // Room
    pub cap: u32,
    pub max_queue: u64,
    /// Most live tickets one client address (IPv6: one /64) may hold; 0 = unlimited.
    pub max_queue_per_ip: u32,
    pub token_ttl: Duration,
    pub first_poll_grace: Duration,
    pub ready_grace: Duration,
    pub reaper: Duration,
    pub retry_after: u32,
    pub api_json: bool,
    pub html: String,
    // Skip the line
    pub fastlane_config: String,
    pub networks_config: String,
    pub fastlane_entry_ttl: Duration,
    pub rate: f64,
    pub surge: f64,
    pub skip_url: String,
    pub pass_duration: Duration,
    // Priority
    pub priority_cap: u32,
    pub priority_lane_rank: u32,
    pub priority_wait: Duration,
    pub priority_forms: bool,
    // Origin
    pub listen: String,
    pub upstream: String,
    pub upstream_timeout: Duration,
    pub max_body: u64,
    pub upload_timeout: Duration,
    /// Most bytes of page uploads buffered on disk at once; 0 = no limit.
    pub upload_disk_limit: u64,
    pub preserve_host: bool,
    pub trusted_proxies: CidrList,
    pub access_log: bool,
    // Cookies
    pub secure_cookie: bool,
    pub cookie_path: String,
    pub cookie_domain: String,
    // Paths
    pub bypass: PathList,
    pub ban_paths: PathList,
    pub unbuffered_upload_paths: PathList,
    // Assets
    pub assets: PathList,
    pub asset_public: PathList,
    pub asset_cap: u32,
    pub asset_wait: Duration,
    pub asset_user_cap_h1: u32,
    pub asset_user_cap_h2: u32,
    pub asset_user_wait: Duration,
    pub admit_ttl: Duration,
    pub client_proto_header: String,
    // Streams
    pub stream_paths: PathList,
    pub stream_cap: u32,
    // Abuse
    pub abuse: bool,
    pub abuse_strikes: u32,
    pub abuse_window: Duration,
    pub abuse_cooldown: Duration,
    pub abuse_max_cooldown: Duration,
    pub abuse_max_entries: u32,
    pub abuse_allow: CidrList,
    // HTTPS
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_domains: HostList,
    pub tls_email: String,
    pub tls_cache: String,
    pub tls_staging: bool,
    pub tls_directory: String,
    pub tls_directory_ca: String,
    pub http_listen: String,
    /// `Strict-Transport-Security` max-age on answers over TLS; zero sends none.
    pub hsts: Duration,
    // Portal
    pub portal_listen: String,
    pub portal_allow: CidrList,
    pub portal_session_ttl: Duration,
    pub portal_secure_cookie: bool,
    pub portal_tls_cert: String,
    pub portal_tls_key: String,
    pub history_log: String,
    // Cluster
    pub cluster: String,
    pub cluster_name: String,
    pub cluster_fallback_share: f64,
    // Outside the settings table (restart only, never in settings.json)
    /// `-data-dir`; empty disables persistence.
    pub data_dir: String,
    /// `CONCERT_ADMIN_TOKEN`; empty disables the admin ops routes.
    pub admin_token: String,
    /// `CONCERT_ADMIT_SECRET`; `validate` fills it with random bytes when unset.
    pub admit_secret: Option<Vec<u8>>,
    pub admit_secret_generated: bool,
    /// `CONCERT_ADMIT_SECRET_PREVIOUS`: the secret being rotated out. Passes and grants signed
    /// under it stay valid until they expire and move to the current secret when they slide.
    pub admit_secret_previous: Option<Vec<u8>>,
    /// `CONCERT_PORTAL_PASS`; empty means no portal and no history.
    pub portal_pass: String,
    /// `CONCERT_CLUSTER_PASSWORD`: the Redis password (a password in the `-cluster` URL is used
    /// when this is empty).
    pub cluster_password: String,
    /// `CONCERT_POLICY_TOKEN`: the bearer token for the fast lane's policy service.
    pub policy_token: String,
    /// Where the portal's IP details come from: `NADDR_DATA`, `NADDR_DATA_POLL` and
    /// `NADDR_ADDR`, as set in the environment (read by [`crate::ipinfo`]).
    pub ip_details_env: Vec<(String, String)>,
    /// `-demo`: run a built-in demo origin.
    pub demo: bool,
    pub log_format: LogFormat,
    /// `-workers`; 0 = one per core.
    pub workers: usize,
    /// `-metrics-path`: where the public listener also answers with metrics (`/_room/metrics`
    /// always does); `None` when turned off.
    pub metrics_path: Option<String>,
    /// How long a keep-alive client connection may wait for its next request with nothing of it
    /// read yet: 120 s, the idle timeout deployments already count on. Not a flag; tests
    /// shorten it.
    pub keep_alive_idle: Duration,
    /// How long a client may take none of the bytes Concert has for it before the connection
    /// is closed, freeing its slot: 60 s, nginx's `send_timeout`. Counted from the write that
    /// found the client not reading; any progress starts it again. Over HTTP/2, an answer the
    /// client's flow control holds back that long has its stream reset instead. Not a flag;
    /// tests shorten it.
    pub client_send_timeout: Duration,
    /// Slowest average, in bytes a second, that an upload still under way may keep once
    /// `-upstream-timeout` has passed since its request began: 500, Apache's `MinRate` for
    /// request bodies. Streamed bodies hold a page slot, and without a minimum a byte sent
    /// just inside each stall limit held it for good. Not a flag; tests lower it.
    pub upload_min_rate: u64,
    /// Longest pause in a request body Concert reads itself (a page's body taken in before
    /// its slot, an admin call's body) before the request gets 408: 20 s, the body timeout
    /// Apache's mod_reqtimeout starts from. Not a flag; tests shorten it.
    pub body_progress_timeout: Duration,
    /// Open connections per worker beyond which an HTTP/1 connection falling idle is kept only
    /// for the 10 s a request head may take: each idle connection holds about 36 KB, and a spike
    /// of visitors would otherwise keep two minutes' worth of them (1,024: the `worker_connections`
    /// of the nginx.conf RHEL ships). Not a flag; tests lower it.
    pub keep_alive_crowd: usize,
    /// How long a client on the HTTPS listener has, from its connection's opening, to send the
    /// first byte and finish the TLS handshake: the 10 s a request head may take, so a stalled
    /// handshake holds a connection no longer than a stalled head. Not a flag; tests shorten it.
    pub tls_handshake_timeout: Duration,
    /// Source of each row of `SETTINGS`, by index.
    sources: Vec<Source>,
}

impl Default for Config {
    /// The built-in defaults, before any flag or env var.
    fn default() -> Self {
        let loopback = CidrList::parse("127.0.0.1/32,::1/128").unwrap_or_default();
        Config {
            cap: 434,
            max_queue: 369,
            max_queue_per_ip: 32,
            token_ttl: Duration::ZERO,
            first_poll_grace: Duration::from_secs(30),
            ready_grace: Duration::from_secs(30),
            reaper: Duration::from_secs(36),
            retry_after: 5,
            api_json: true,
            html: String::new(),
            fastlane_config: String::new(),
            networks_config: String::new(),
            fastlane_entry_ttl: Duration::from_secs(300),
            rate: 0.0,
            surge: 0.0,
            skip_url: String::new(),
            pass_duration: Duration::ZERO,
            priority_cap: 0,
            priority_lane_rank: 3,
            priority_wait: Duration::from_secs(5),
            priority_forms: true,
            listen: ":8080".to_string(),
            upstream: "http://127.0.0.1:3000".to_string(),
            upstream_timeout: Duration::from_secs(30),
            max_body: 64 << 20,
            upload_timeout: Duration::from_secs(120),
            upload_disk_limit: 1 << 30,
            preserve_host: true,
            trusted_proxies: loopback.clone(),
            access_log: true,
            secure_cookie: false,
            cookie_path: "/".to_string(),
            cookie_domain: String::new(),
            bypass: PathList::parse_strict("/favicon.ico").unwrap_or_default(),
            ban_paths: PathList::default(),
            unbuffered_upload_paths: PathList::default(),
            assets: PathList::default(),
            asset_public: PathList::default(),
            asset_cap: 0,
            asset_wait: Duration::from_secs(2),
            asset_user_cap_h1: 8,
            asset_user_cap_h2: 128,
            asset_user_wait: Duration::from_secs(2),
            admit_ttl: Duration::from_secs(600),
            client_proto_header: String::new(),
            stream_paths: PathList::default(),
            stream_cap: 1000,
            abuse: true,
            abuse_strikes: 20,
            abuse_window: Duration::from_secs(60),
            abuse_cooldown: Duration::from_secs(300),
            abuse_max_cooldown: Duration::from_secs(86_400),
            abuse_max_entries: 100_000,
            abuse_allow: CidrList::default(),
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_domains: HostList::default(),
            tls_email: String::new(),
            tls_cache: "/var/lib/concert/acme".to_string(),
            tls_staging: false,
            tls_directory: String::new(),
            tls_directory_ca: String::new(),
            http_listen: String::new(),
            hsts: Duration::ZERO,
            portal_listen: "127.0.0.1:8081".to_string(),
            portal_allow: loopback,
            portal_session_ttl: Duration::from_secs(8 * 3600),
            portal_secure_cookie: false,
            portal_tls_cert: String::new(),
            portal_tls_key: String::new(),
            history_log: String::new(),
            cluster: String::new(),
            cluster_name: "concert".to_string(),
            cluster_fallback_share: 0.0,
            data_dir: DEFAULT_DATA_DIR.to_string(),
            admin_token: String::new(),
            admit_secret: None,
            admit_secret_generated: false,
            admit_secret_previous: None,
            portal_pass: String::new(),
            cluster_password: String::new(),
            policy_token: String::new(),
            ip_details_env: Vec::new(),
            demo: false,
            log_format: LogFormat::Text,
            workers: 0,
            metrics_path: Some(DEFAULT_METRICS_PATH.to_string()),
            keep_alive_idle: Duration::from_secs(120),
            client_send_timeout: Duration::from_secs(60),
            upload_min_rate: 500,
            body_progress_timeout: Duration::from_secs(20),
            keep_alive_crowd: 1024,
            tls_handshake_timeout: Duration::from_secs(10),
            sources: vec![Source::Default; SETTINGS.len()],
        }
    }
}

impl fmt::Debug for Config {
    /// Lists every setting; secrets are shown only as set or unset.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |set: bool| if set { "<set>" } else { "<unset>" };
        let mut out = f.debug_struct("Config");
        for def in SETTINGS {
            out.field(def.key, &value::to_text((def.get)(self)));
        }
        out.field("data_dir", &self.data_dir)
            .field("admin_token", &redacted(!self.admin_token.is_empty()))
            .field("admit_secret", &redacted(self.admit_secret.is_some()))
            .field("admit_secret_generated", &self.admit_secret_generated)
            .field(
                "admit_secret_previous",
                &redacted(self.admit_secret_previous.is_some()),
            )
            .field("policy_token", &redacted(!self.policy_token.is_empty()))
            .field("portal_pass", &redacted(!self.portal_pass.is_empty()))
            .field(
                "cluster_password",
                &redacted(!self.cluster_password.is_empty()),
            )
            .field("demo", &self.demo)
            .field("log_format", &self.log_format)
            .field("workers", &self.workers)
            .field("metrics_path", &self.metrics_path)
            .field("keep_alive_idle", &self.keep_alive_idle)
            .field("client_send_timeout", &self.client_send_timeout)
            .field("upload_min_rate", &self.upload_min_rate)
            .field("body_progress_timeout", &self.body_progress_timeout)
            .field("keep_alive_crowd", &self.keep_alive_crowd)
            .field("tls_handshake_timeout", &self.tls_handshake_timeout)
            .finish()
    }
}

impl Config {
    /// Where the value of `key` came from (`Default` for unknown keys).
    pub fn source(&self, key: &str) -> Source {
        setting(key)
            .and_then(|(index, _)| self.sources.get(index).copied())
            .unwrap_or(Source::Default)
    }

    /// How to name `key` in a message about its value: as the operator gave it (the env var,
    /// or the settings.json key), else as the flag.
    pub fn name_of(&self, key: &str) -> &'static str {
        let Some((_, def)) = setting(key) else {
            return "(unknown setting)";
        };
        match self.source(key) {
            Source::Env => def.env,
            Source::File => def.key,
            Source::Flag | Source::Default => def.flag,
        }
    }

    /// Applies one settings.json / API value: unknown and restart-only keys are refused, the
    /// JSON type must match (no coercion), then the per-value check runs. On error nothing
    /// changes. On success the key's source becomes `File`.
    pub fn set_json(&mut self, key: &str, value: &serde_json::Value) -> Result<(), String> {
        let (index, def) = setting(key).ok_or_else(|| format!("unknown setting {key:?}"))?;
        if def.restart {
            return Err(restart_only(def));
        }
        let parsed = value::parse_json(def, value)
            .and_then(|parsed| value::check_parsed(def, &parsed).map(|()| parsed))
            .map_err(|reason| format!("invalid value {value} for {key}: {reason}"))?;
        value::store((def.get_mut)(self), parsed)?;
        if let Some(source) = self.sources.get_mut(index) {
            *source = Source::File;
        }
        Ok(())
    }

    /// Restores `key` (value and source) from `baseline`, the config as it was before the
    /// settings file was applied. Restart-only keys are refused as [`Config::set_json`] refuses
    /// them: they were never changed, and a reset that seemed to work would mislead.
    pub fn reset_from(&mut self, key: &str, baseline: &Config) -> Result<(), String> {
        let (index, def) = setting(key).ok_or_else(|| format!("unknown setting {key:?}"))?;
        if def.restart {
            return Err(restart_only(def));
        }
        value::copy((def.get_mut)(self), (def.get)(baseline))?;
        if let Some(source) = self.sources.get_mut(index) {
            *source = baseline.source(key);
        }
        Ok(())
    }

    /// The value of `key` in its settings.json / view form (durations as Go strings).
    pub fn value_json(&self, key: &str) -> Option<serde_json::Value> {
        setting(key).map(|(_, def)| value::to_json((def.get)(self)))
    }

    /// The value of `key` as a flag would take it.
    pub fn value_text(&self, key: &str) -> Option<String> {
        setting(key).map(|(_, def)| value::to_text((def.get)(self)))
    }

    /// Whole-config validation, every problem in one message. Clamps `retry_after` to at least
    /// 1 and generates the admission secret when it is unset.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        validate::validate(self).map_err(ConfigError::Invalid)
    }

    /// [`Config::validate`]'s problems one by one; empty when it passes.
    pub fn problems(&mut self) -> Vec<String> {
        validate::problems(self)
    }

    /// Ticket lifetime given to the room (0 → 5m).
    pub fn effective_token_ttl(&self) -> Duration {
        non_zero_or(self.token_ttl, ROOM_DEFAULT_TTL)
    }

    /// Reaper interval given to the room (0 → 5m).
    pub fn effective_reaper(&self) -> Duration {
        non_zero_or(self.reaper, ROOM_DEFAULT_TTL)
    }

    /// Global asset limit: `asset_cap`, or cap × HTTP/2 per-visitor limit clamped to MaxI32.
    pub fn effective_asset_cap(&self) -> u32 {
        if self.asset_cap > 0 {
            return self.asset_cap;
        }
        let derived = u64::from(self.cap) * u64::from(self.asset_user_cap_h2);
        u32::try_from(derived.min(MAX_I32)).unwrap_or(i32::MAX as u32)
    }

    /// Priority lane size: `priority_cap`, or a quarter of the capacity (at least 1).
    pub fn effective_priority_cap(&self) -> u32 {
        if self.priority_cap > 0 {
            self.priority_cap
        } else {
            (self.cap / 4).max(1)
        }
    }

    /// Retry-After seconds (at least 1).
    pub fn effective_retry_after(&self) -> u32 {
        self.retry_after.max(1)
    }

    /// The origin URL, parsed. Always `Ok` after a successful `validate`.
    pub fn upstream_uri(&self) -> Result<http::Uri, String> {
        value::check_upstream(&self.upstream)
            .map_err(|reason| format!("invalid value {:?} for -upstream: {reason}", self.upstream))
    }

    /// `-upstream` as it may be shown (stats, logs): any `user:password@` is cut out. The proxy
    /// never sends those credentials to the origin, and `/_room/stats` answers anyone.
    pub fn upstream_shown(&self) -> String {
        without_userinfo(&self.upstream)
    }

    /// `-upstream` as the public stats show it: scheme, host and port only. Credentials, a base
    /// path and a query may all hold secrets (tokens ride in both), and who asks is unknown.
    pub fn upstream_public(&self) -> String {
        origin_only(&self.upstream)
    }

    /// Whether `-upstream` carries credentials, which the proxy does not use.
    pub fn upstream_has_userinfo(&self) -> bool {
        without_userinfo(&self.upstream) != self.upstream
    }

    /// Whether the public listener serves HTTPS: a certificate pair is given, or names to get
    /// certificates for.
    pub fn tls_requested(&self) -> bool {
        !self.tls_cert.trim().is_empty() || !self.tls_domains.is_empty()
    }

    /// Whether the portal listener serves HTTPS with a certificate of its own.
    pub fn portal_tls_requested(&self) -> bool {
        !self.portal_tls_cert.trim().is_empty()
    }

    /// True when the portal gets a listener: a pass and an address are both set.
    pub fn portal_listens(&self) -> bool {
        !self.portal_pass.is_empty() && !self.portal_listen.is_empty()
    }

    /// The compiled route lists (bypass, assets, public assets, streams).
    pub fn route_table(&self) -> Result<RouteTable, String> {
        RouteTable::build(
            &self.bypass,
            &self.assets,
            &self.asset_public,
            &self.stream_paths,
        )
    }

    pub fn ban_path_matcher(&self) -> BanPathMatcher {
        BanPathMatcher::new(&self.ban_paths)
    }
}

/// Why a restart-only setting cannot be changed or reset while running.
fn restart_only(def: &SettingDef) -> String {
    format!(
        "{} cannot be changed while running: set {} in concert.env and restart",
        def.key, def.env
    )
}

/// `scheme://user:password@host/...` → `scheme://host/...`; other text is returned as it is.
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// `scheme://user@host:port/path?query#f` → `scheme://host:port`; text without `://` is returned
/// as it is (a checked `-upstream` always has one).
fn origin_only(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_and_port = authority
        .rfind('@')
        .map_or(authority, |at| &authority[at + 1..]);
    format!("{scheme}://{host_and_port}")
}

fn non_zero_or(value: Duration, fallback: Duration) -> Duration {
    if value.is_zero() { fallback } else { value }
}

/// An env value, treating unset and blank alike: an environment file's `NAME=` line means unset.
fn env_value(env: &dyn EnvSource, name: &str) -> Option<String> {
    env.var(name).filter(|value| !value.trim().is_empty())
}

fn invalid(value: &str, name: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid(format!("invalid value {value:?} for {name}: {reason}"))
}

/// Reads the command line (without `argv[0]`) and the environment. Applies per-value checks to
/// every given value; whole-config rules wait for [`Config::validate`], after settings.json.
pub fn load(args: &[String], env: &dyn EnvSource) -> Result<Loaded, ConfigError> {
    let flags = match flags::parse_flags(args)? {
        FlagParse::Help => return Ok(Loaded::Help(flags::usage())),
        FlagParse::Values(values) => values,
    };
    if let Some(text) = flags.get("version") {
        let wanted =
            value::parse_go_bool(text).map_err(|reason| invalid(text, "-version", &reason))?;
        if wanted {
            return Ok(Loaded::Version);
        }
    }
    let mut config = Config::default();
    for (index, def) in SETTINGS.iter().enumerate() {
        let parse = |text: &str, origin| {
            value::parse_text(def, text, origin)
                .and_then(|parsed| value::check_parsed(def, &parsed).map(|()| parsed))
        };
        let Some((parsed, source)) = flag_then_env(&flags, env, def.flag_name(), def.env, parse)?
        else {
            continue;
        };
        value::store((def.get_mut)(&mut config), parsed).map_err(ConfigError::Invalid)?;
        config.sources[index] = source;
    }
    load_extras(&mut config, &flags, env)?;
    load_secrets(&mut config, env);
    Ok(Loaded::Run(Box::new(config)))
}

/// The flag's value parsed, else the env var's (non-blank), with where it came from. The env
/// value is checked even when the flag overrides it: a bad value anywhere stops the start,
/// rather than lying in wait for the day the flag is dropped.
fn flag_then_env<T>(
    flags: &HashMap<String, String>,
    env: &dyn EnvSource,
    flag: &str,
    env_name: &str,
    parse: impl Fn(&str, TextOrigin) -> Result<T, String>,
) -> Result<Option<(T, Source)>, ConfigError> {
    let from_flag = match flags.get(flag) {
        Some(text) => Some(
            parse(text, TextOrigin::Flag)
                .map_err(|reason| invalid(text, &format!("-{flag}"), &reason))?,
        ),
        None => None,
    };
    let from_env = match env_value(env, env_name) {
        Some(text) => Some(
            parse(&text, TextOrigin::Env).map_err(|reason| invalid(&text, env_name, &reason))?,
        ),
        None => None,
    };
    Ok(match (from_flag, from_env) {
        (Some(value), _) => Some((value, Source::Flag)),
        (None, Some(value)) => Some((value, Source::Env)),
        (None, None) => None,
    })
}

/// [`flag_then_env`] for a process option, whose source is not recorded.
fn option_value<T>(
    flags: &HashMap<String, String>,
    env: &dyn EnvSource,
    flag: &str,
    env_name: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, ConfigError> {
    let found = flag_then_env(flags, env, flag, env_name, |text, _| parse(text))?;
    Ok(found.map(|(value, _)| value))
}

fn load_extras(
    config: &mut Config,
    flags: &HashMap<String, String>,
    env: &dyn EnvSource,
) -> Result<(), ConfigError> {
    if let Some(demo) = option_value(flags, env, "demo", "CONCERT_DEMO", |text| {
        value::parse_go_bool(text.trim())
    })? {
        config.demo = demo;
    }
    // An explicitly empty CONCERT_DATA_DIR disables persistence, so it is not treated as unset.
    // The demo keeps nothing unless told where: it must not restore a line from, or write into,
    // a real deployment's default directory.
    let default_data_dir = if config.demo { "" } else { DEFAULT_DATA_DIR };
    config.data_dir = match flags.get("data-dir") {
        Some(text) => text.clone(),
        None => env
            .var("CONCERT_DATA_DIR")
            .unwrap_or_else(|| default_data_dir.to_string()),
    };
    if let Some(format) =
        option_value(
            flags,
            env,
            "log-format",
            "CONCERT_LOG_FORMAT",
            |text| match text.trim() {
                "text" => Ok(LogFormat::Text),
                "json" => Ok(LogFormat::Json),
                _ => Err("must be text or json".to_string()),
            },
        )?
    {
        config.log_format = format;
    }
    if let Some(path) =
        option_value(
            flags,
            env,
            "metrics-path",
            "CONCERT_METRICS_PATH",
            |text| match text.trim() {
                "" | "off" => Ok(None),
                path => crate::paths::rules::parse_own_path(path).map(Some),
            },
        )?
    {
        config.metrics_path = path;
    }
    let max_workers = validate::MAX_WORKERS;
    let workers = option_value(flags, env, "workers", "CONCERT_WORKERS", |text| {
        text.trim()
            .parse::<usize>()
            .ok()
            .filter(|workers| *workers <= max_workers)
            .ok_or_else(|| format!("must be a whole number between 0 and {max_workers}"))
    })?;
    config.workers = match workers {
        Some(workers) => workers,
        // Tokio's own variable is honoured when ours is absent; it is not ours to reject.
        None => env
            .var("TOKIO_WORKER_THREADS")
            .and_then(|text| text.trim().parse::<usize>().ok())
            .filter(|workers| (1..=max_workers).contains(workers))
            .unwrap_or(0),
    };
    Ok(())
}

fn load_secrets(config: &mut Config, env: &dyn EnvSource) {
    config.admin_token = env_value(env, "CONCERT_ADMIN_TOKEN").unwrap_or_default();
    config.admit_secret = env_value(env, "CONCERT_ADMIT_SECRET").map(String::into_bytes);
    config.admit_secret_generated = false;
    config.admit_secret_previous =
        env_value(env, "CONCERT_ADMIT_SECRET_PREVIOUS").map(String::into_bytes);
    config.portal_pass = env_value(env, "CONCERT_PORTAL_PASS").unwrap_or_default();
    config.cluster_password = env_value(env, "CONCERT_CLUSTER_PASSWORD").unwrap_or_default();
    config.policy_token = env_value(env, "CONCERT_POLICY_TOKEN").unwrap_or_default();
    config.ip_details_env = ["NADDR_DATA", "NADDR_DATA_POLL", "NADDR_ADDR"]
        .into_iter()
        .filter_map(|key| Some((key.to_owned(), env_value(env, key)?)))
        .collect();
}

#[cfg(test)]
mod tests;
