//! The one table of settings. Every tunable is a row: settings-file key, flag, env var, type,
//! per-value check, restart marker, portal group/label/help and default. Flags, env lookups,
//! usage text, `set_json` and the portal settings view are all driven from `SETTINGS`.

use std::time::Duration;

use super::Config;
use super::cidr::CidrList;
use super::hosts::HostList;
use crate::paths::rules::PathList;

/// Largest value of a 32-bit setting: settings files and the tools that read them hold these as
/// signed 32-bit integers.
pub const MAX_I32: u64 = i32::MAX as u64;
const MAX_I64: u64 = i64::MAX as u64;

const SECOND: u64 = 1;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Portal groups, in display order.
pub const GROUPS: [&str; 12] = [
    ROOM, SKIP, PRIORITY, ORIGIN, COOKIES, PATHS, ASSETS, STREAMS, ABUSE, TLS, PORTAL, CLUSTER,
];
const ROOM: &str = "Room";
const SKIP: &str = "Skip the line";
const PRIORITY: &str = "Priority";
const ORIGIN: &str = "Origin";
const COOKIES: &str = "Cookies";
const PATHS: &str = "Paths";
const ASSETS: &str = "Assets";
const STREAMS: &str = "Streams";
const ABUSE: &str = "Abuse";
const TLS: &str = "HTTPS";
const PORTAL: &str = "Portal";
const CLUSTER: &str = "Cluster";

/// Rust type of the field behind a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U32,
    U64,
    /// A byte count, written plainly or with a `k`, `m` or `g` suffix (powers of 1024).
    Bytes,
    F64,
    Bool,
    Dur,
    Str,
    Cidr,
    Paths,
    Hosts,
}

/// Per-value rule, applied to values from every layer (flag, env, file, API) and again by
/// whole-config validation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Check {
    None,
    /// Inclusive integer range.
    Int {
        min: u64,
        max: u64,
    },
    /// Finite number in an inclusive range.
    Float {
        min: f64,
        max: f64,
    },
    /// `0` when `zero_ok`, otherwise within `min..=max`.
    Duration {
        zero_ok: bool,
        min: Duration,
        max: Duration,
    },
    /// http(s) URL with a host.
    Upstream,
    /// Empty, a local path, or an http(s) URL; bounded and free of characters that break HTML.
    SkipUrl,
    /// `host:port` (host may be empty); optionally the empty string.
    ListenAddr {
        allow_empty: bool,
    },
    /// Empty or a valid HTTP header name.
    HeaderName,
    /// Goes into `Set-Cookie` attributes: no `;`, whitespace or control characters.
    CookieAttribute,
    /// Empty, an https URL, or an http URL whose host is a loopback address (a test CA on the
    /// same machine).
    AcmeDirectory,
    /// Empty, or a `redis://` or `rediss://` URL with a host.
    ClusterUrl,
    /// 1 to 64 letters, digits, `.`, `_` or `-`: it becomes part of every shared key.
    ClusterName,
}

const fn int(min: u64, max: u64) -> Check {
    Check::Int { min, max }
}

const fn seconds(min: u64, max: u64, zero_ok: bool) -> Check {
    Check::Duration {
        zero_ok,
        min: Duration::from_secs(min),
        max: Duration::from_secs(max),
    }
}

const fn at_least(min: u64) -> Check {
    Check::Duration {
        zero_ok: false,
        min: Duration::from_secs(min),
        max: Duration::MAX,
    }
}

const ANY_DURATION: Check = Check::None;

/// Borrowed view of a setting's field.
#[derive(Clone, Copy)]
pub(super) enum SlotRef<'a> {
    U32(&'a u32),
    U64(&'a u64),
    Bytes(&'a u64),
    F64(&'a f64),
    Bool(&'a bool),
    Dur(&'a Duration),
    Str(&'a String),
    Cidr(&'a CidrList),
    Paths(&'a PathList),
    Hosts(&'a HostList),
}

/// Mutable view of a setting's field.
pub(super) enum Slot<'a> {
    U32(&'a mut u32),
    U64(&'a mut u64),
    Bytes(&'a mut u64),
    F64(&'a mut f64),
    Bool(&'a mut bool),
    Dur(&'a mut Duration),
    Str(&'a mut String),
    Cidr(&'a mut CidrList),
    Paths(&'a mut PathList),
    Hosts(&'a mut HostList),
}

/// One row of the settings table.
pub struct SettingDef {
    /// settings.json key and `Config` field name.
    pub key: &'static str,
    /// Command-line flag, with its single dash (`-cap`).
    pub flag: &'static str,
    pub env: &'static str,
    pub ty: ValueType,
    pub check: Check,
    /// Flag/env only: ignored in settings.json, refused by the API.
    pub restart: bool,
    pub group: &'static str,
    pub label: &'static str,
    pub help: &'static str,
    /// The value a fresh parse yields, in the display form (`5m0s`, `434`, `/favicon.ico`).
    pub default: &'static str,
    pub(super) get: fn(&Config) -> SlotRef<'_>,
    pub(super) get_mut: fn(&mut Config) -> Slot<'_>,
}

impl SettingDef {
    /// Flag name without the dash, as clap knows it.
    pub fn flag_name(&self) -> &'static str {
        self.flag.trim_start_matches('-')
    }
}

impl std::fmt::Debug for SettingDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettingDef")
            .field("key", &self.key)
            .field("flag", &self.flag)
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

/// Row index and definition for a settings key.
pub fn setting(key: &str) -> Option<(usize, &'static SettingDef)> {
    SETTINGS.iter().enumerate().find(|(_, def)| def.key == key)
}

macro_rules! setting {
    ($key:ident: $ty:ident {
        flag: $flag:expr, env: $env:expr, group: $group:expr, restart: $restart:expr,
        check: $check:expr, default: $default:expr, label: $label:expr, help: $help:expr $(,)?
    }) => {
        SettingDef {
            key: stringify!($key),
            flag: $flag,
            env: $env,
            ty: ValueType::$ty,
            check: $check,
            restart: $restart,
            group: $group,
            label: $label,
            help: $help,
            default: $default,
            get: {
                fn get(config: &Config) -> SlotRef<'_> {
                    SlotRef::$ty(&config.$key)
                }
                get
            },
            get_mut: {
                fn get_mut(config: &mut Config) -> Slot<'_> {
                    Slot::$ty(&mut config.$key)
                }
                get_mut
            },
        }
    };
}

/// Every setting, in portal group order.
pub static SETTINGS: &[SettingDef] = &[
    // Room
    setting!(cap: U32 {
        flag: "-cap", env: "CONCERT_CAPACITY", group: ROOM, restart: false,
        check: int(1, MAX_I32), default: "434",
        label: "Capacity",
        help: "Visitors served by the origin at the same time; everyone else waits in line.",
    }),
    setting!(max_queue: U64 {
        flag: "-max-queue", env: "CONCERT_MAX_QUEUE", group: ROOM, restart: false,
        check: int(0, MAX_I64), default: "369",
        label: "Line length limit",
        help: "Most visitors allowed to wait; newcomers beyond it are turned away. 0 means no limit.",
    }),
    setting!(max_queue_per_ip: U32 {
        flag: "-max-queue-per-ip", env: "CONCERT_MAX_QUEUE_PER_IP", group: ROOM, restart: false,
        check: int(0, MAX_I32), default: "32",
        label: "Line places per address",
        help: "Most visitors one address (an IPv6 /64) may have waiting at once; more get 429 until some are served. Addresses in -abuse-allow or -trusted-proxies are not limited. 0 means no limit.",
    }),
    setting!(token_ttl: Dur {
        flag: "-token-ttl", env: "CONCERT_TOKEN_TTL", group: ROOM, restart: false,
        check: seconds(30 * SECOND, DAY, true), default: "0s",
        label: "Ticket lifetime",
        help: "How long a waiting ticket survives without a poll. 0 uses the room default of 5m.",
    }),
    setting!(first_poll_grace: Dur {
        flag: "-first-poll-grace", env: "CONCERT_FIRST_POLL_GRACE", group: ROOM, restart: false,
        check: seconds(10 * SECOND, DAY, true), default: "30s",
        label: "First poll grace",
        help: "Time a new ticket has to make its first status poll before it is dropped. 0 turns the rule off; otherwise at least twice the retry interval.",
    }),
    setting!(ready_grace: Dur {
        flag: "-ready-grace", env: "CONCERT_READY_GRACE", group: ROOM, restart: false,
        check: seconds(10 * SECOND, DAY, true), default: "30s",
        label: "Ready grace",
        help: "Time a visitor whose turn has come may stay away before their place goes to the next in line; back within the ticket lifetime, they go to the front. 0 holds the place for the whole ticket lifetime; otherwise at least twice the retry interval.",
    }),
    setting!(reaper: Dur {
        flag: "-reaper", env: "CONCERT_REAPER", group: ROOM, restart: false,
        check: seconds(5 * SECOND, DAY, true), default: "36s",
        label: "Reaper interval",
        help: "How often abandoned tickets are cleared. 0 uses the room default of 5m. It runs more often when a grace needs it: every first-poll grace, and every sixth of the ready grace (at least 5s).",
    }),
    setting!(retry_after: U32 {
        flag: "-retry-after", env: "CONCERT_RETRY_AFTER", group: ROOM, restart: false,
        check: int(0, MAX_I32), default: "5",
        label: "Retry interval (seconds)",
        help: "Retry-After sent to waiting clients and the page's poll interval. 0 becomes 1.",
    }),
    setting!(api_json: Bool {
        flag: "-api-json", env: "CONCERT_API_JSON", group: ROOM, restart: false,
        check: Check::None, default: "true",
        label: "JSON answers for API clients",
        help: "Clients that do not accept HTML get a 429 JSON answer instead of the waiting page.",
    }),
    setting!(html: Str {
        flag: "-html", env: "CONCERT_HTML_FILE", group: ROOM, restart: false,
        check: Check::None, default: "",
        label: "Waiting page file",
        help: "HTML file used as the waiting page. Empty uses the built-in page.",
    }),
    // Skip the line
    setting!(fastlane_config: Str {
        flag: "-fastlane-config", env: "CONCERT_FASTLANE_CONFIG", group: SKIP, restart: true,
        check: Check::None, default: "",
        label: "Fast lane file",
        help: "The fast lane's offers and terms (fastlane.json; `concert example fastlane` prints a start). Empty uses fastlane.json in the data directory when present; no file, no fast lane.",
    }),
    setting!(networks_config: Str {
        flag: "-networks-config", env: "CONCERT_NETWORKS_CONFIG", group: SKIP, restart: true,
        check: Check::None, default: "",
        label: "Networks file",
        help: "How the fast lane reaches each payment network (networks.json; `concert example networks` prints a start). Empty uses networks.json in the data directory.",
    }),
    setting!(fastlane_entry_ttl: Dur {
        flag: "-fastlane-entry-ttl", env: "CONCERT_FASTLANE_ENTRY_TTL", group: SKIP, restart: false,
        check: seconds(30 * SECOND, DAY, true), default: "5m0s",
        label: "Fast lane entry lifetime",
        help: "How long a fast-lane pass keeps letting its visitor in after its first use, even past the pass's own end. 0 (off) or between 30s and 24h.",
    }),
    setting!(rate: F64 {
        flag: "-rate", env: "CONCERT_RATE", group: SKIP, restart: false,
        check: Check::Float { min: 0.0, max: 1e6 }, default: "0",
        label: "Base price",
        help: "Price to skip the line, per visitor ahead. Pricing is on when this or the surge price is above 0. With a fast lane it counts in offer prices: the first in line pays the offer's amount, each visitor ahead adds this times it.",
    }),
    setting!(surge: F64 {
        flag: "-surge", env: "CONCERT_SURGE", group: SKIP, restart: false,
        check: Check::Float { min: 0.0, max: 1e6 }, default: "0",
        label: "Surge price",
        help: "Extra price per visitor ahead for each visitor waiting, added to the base price as the line grows (in offer prices with a fast lane).",
    }),
    setting!(skip_url: Str {
        flag: "-skip-url", env: "CONCERT_SKIP_URL", group: SKIP, restart: false,
        check: Check::SkipUrl, default: "",
        label: "Skip-the-line link",
        help: "Where the waiting page's skip-the-line link points: a path or an http(s) URL.",
    }),
    setting!(pass_duration: Dur {
        flag: "-pass", env: "CONCERT_PASS_DURATION", group: SKIP, restart: false,
        check: seconds(MINUTE, DAY, true), default: "0s",
        label: "Skip pass lifetime",
        help: "How long a bought skip pass lasts. 0 or between 1m and 24h. Not in this version yet (no effect).",
    }),
    // Priority
    setting!(priority_cap: U32 {
        flag: "-priority-cap", env: "CONCERT_PRIORITY_CAP", group: PRIORITY, restart: false,
        check: int(0, MAX_I32), default: "0",
        label: "Priority lane size",
        help: "Extra slots for visitors holding a priority grant. 0 means a quarter of the capacity (at least 1).",
    }),
    setting!(priority_lane_rank: U32 {
        flag: "-priority-lane-rank", env: "CONCERT_PRIORITY_LANE_RANK", group: PRIORITY, restart: false,
        check: int(1, 7), default: "3",
        label: "Lowest rank using the lane",
        help: "Grant ranks up to this one may use the priority lane. 7 means no rank does.",
    }),
    setting!(priority_wait: Dur {
        flag: "-priority-wait", env: "CONCERT_PRIORITY_WAIT", group: PRIORITY, restart: false,
        check: seconds(0, MINUTE, true), default: "5s",
        label: "Priority wait",
        help: "How long a priority request may wait for a lane slot. At most 1m.",
    }),
    setting!(priority_forms: Bool {
        flag: "-priority-forms", env: "CONCERT_PRIORITY_FORMS", group: PRIORITY, restart: false,
        check: Check::None, default: "true",
        label: "Let form posts through",
        help: "Form submissions (POST, PUT, PATCH, DELETE) from admitted visitors use the priority lane while the room is full, up to 20 a minute per admission pass; beyond that they wait in line.",
    }),
    // Origin
    setting!(listen: Str {
        flag: "-listen", env: "CONCERT_LISTEN", group: ORIGIN, restart: true,
        check: Check::ListenAddr { allow_empty: false }, default: ":8080",
        label: "Listen address",
        help: "Address the public listener binds to.",
    }),
    setting!(upstream: Str {
        flag: "-upstream", env: "CONCERT_UPSTREAM", group: ORIGIN, restart: false,
        check: Check::Upstream, default: "http://127.0.0.1:3000",
        label: "Origin URL",
        help: "The protected site, as an http or https URL.",
    }),
    setting!(upstream_timeout: Dur {
        flag: "-upstream-timeout", env: "CONCERT_UPSTREAM_TIMEOUT", group: ORIGIN, restart: false,
        check: ANY_DURATION, default: "30s",
        label: "Origin response timeout",
        help: "How long to wait for the origin's response headers after the request is sent; an upload that stalls this long gets 408, as does one averaging under 500 bytes a second once this long has passed. 0 waits forever.",
    }),
    setting!(max_body: Bytes {
        flag: "-max-body", env: "CONCERT_MAX_BODY", group: ORIGIN, restart: false,
        check: Check::None, default: "64m",
        label: "Largest request body",
        help: "Largest request body Concert takes in for a page: bigger ones get 413, a declared length at once, a chunked body as soon as it passes the limit. Bytes, or with a k, m or g suffix (powers of 1024). 0 means no limit.",
    }),
    setting!(upload_timeout: Dur {
        flag: "-upload-timeout", env: "CONCERT_UPLOAD_TIMEOUT", group: ORIGIN, restart: false,
        check: seconds(SECOND, DAY, true), default: "2m0s",
        label: "Upload time limit",
        help: "Longest time a page's request body may take to arrive in full before it gets 408; the body is taken in before the request waits for a page slot, so a slow upload never holds one. A body that sends nothing for 20s gets 408 sooner. 0 means no overall limit.",
    }),
    setting!(upload_disk_limit: Bytes {
        flag: "-upload-disk-limit", env: "CONCERT_UPLOAD_DISK_LIMIT", group: ORIGIN, restart: false,
        check: Check::None, default: "1g",
        label: "Upload buffer on disk",
        help: "Most bytes of page uploads buffered on disk at once (bodies over 64 KiB wait there for their page slot); an upload that would go past it gets 503, so slow uploaders cannot fill the disk the data dir is on. Same units as -max-body. 0 means no limit.",
    }),
    setting!(preserve_host: Bool {
        flag: "-preserve-host", env: "CONCERT_PRESERVE_HOST", group: ORIGIN, restart: false,
        check: Check::None, default: "true",
        label: "Keep the Host header",
        help: "Forward the visitor's Host header instead of the origin's host.",
    }),
    setting!(trusted_proxies: Cidr {
        flag: "-trusted-proxies", env: "CONCERT_TRUSTED_PROXIES", group: ORIGIN, restart: false,
        check: Check::None, default: "127.0.0.1/32,::1/128",
        label: "Trusted proxies",
        help: "Addresses or CIDRs whose X-Forwarded-For header is believed.",
    }),
    setting!(access_log: Bool {
        flag: "-access-log", env: "CONCERT_ACCESS_LOG", group: ORIGIN, restart: false,
        check: Check::None, default: "true",
        label: "Access log",
        help: "Write one line per request to standard output.",
    }),
    // Cookies
    setting!(secure_cookie: Bool {
        flag: "-secure-cookie", env: "CONCERT_SECURE_COOKIE", group: COOKIES, restart: false,
        check: Check::None, default: "false",
        label: "Secure cookies",
        help: "Mark cookies Secure; turn on when visitors reach the site over HTTPS.",
    }),
    setting!(cookie_path: Str {
        flag: "-cookie-path", env: "CONCERT_COOKIE_PATH", group: COOKIES, restart: false,
        check: Check::CookieAttribute, default: "/",
        label: "Cookie path",
        help: "Path attribute of the waiting-room and pass cookies.",
    }),
    setting!(cookie_domain: Str {
        flag: "-cookie-domain", env: "CONCERT_COOKIE_DOMAIN", group: COOKIES, restart: false,
        check: Check::CookieAttribute, default: "",
        label: "Cookie domain",
        help: "Domain attribute of the cookies. Empty keeps them on the exact host.",
    }),
    // Paths
    setting!(bypass: Paths {
        flag: "-bypass", env: "CONCERT_BYPASS", group: PATHS, restart: false,
        check: Check::None, default: "/favicon.ico",
        label: "Bypass paths",
        help: "Paths sent straight to the origin without waiting. A trailing /* covers everything below.",
    }),
    setting!(ban_paths: Paths {
        flag: "-ban-paths", env: "CONCERT_BAN_PATHS", group: PATHS, restart: false,
        check: Check::None, default: "",
        label: "Ban paths",
        help: "Paths only scanners ask for; a request to one bans the client at once. Needs abuse protection on.",
    }),
    setting!(unbuffered_upload_paths: Paths {
        flag: "-unbuffered-upload-paths", env: "CONCERT_UNBUFFERED_UPLOAD_PATHS", group: PATHS, restart: false,
        check: Check::None, default: "",
        label: "Unbuffered upload paths",
        help: "Page paths whose request bodies stream to the origin as they arrive instead of being taken in first. Risky: such a request holds its page slot while the client sends, kept in check only by the origin response timeout and a 500 bytes a second minimum; -max-body and -upload-timeout do not apply.",
    }),
    // Assets
    setting!(assets: Paths {
        flag: "-assets", env: "CONCERT_ASSETS", group: ASSETS, restart: false,
        check: Check::None, default: "",
        label: "Asset paths",
        help: "Paths served to admitted visitors outside the page slots, limited per visitor.",
    }),
    setting!(asset_public: Paths {
        flag: "-asset-public", env: "CONCERT_ASSET_PUBLIC", group: ASSETS, restart: false,
        check: Check::None, default: "",
        label: "Public asset paths",
        help: "Asset paths anyone may fetch without an admission pass, within the global asset limit.",
    }),
    setting!(asset_cap: U32 {
        flag: "-asset-cap", env: "CONCERT_ASSET_CAP", group: ASSETS, restart: false,
        check: int(0, MAX_I32), default: "0",
        label: "Global asset limit",
        help: "Asset requests in flight across all visitors. 0 means capacity times the HTTP/2 per-visitor limit.",
    }),
    setting!(asset_wait: Dur {
        flag: "-asset-wait", env: "CONCERT_ASSET_WAIT", group: ASSETS, restart: false,
        check: ANY_DURATION, default: "2s",
        label: "Global asset wait",
        help: "How long an asset request waits for a global slot before 503.",
    }),
    setting!(asset_user_cap_h1: U32 {
        flag: "-asset-user-cap-h1", env: "CONCERT_ASSET_USER_CAP_H1", group: ASSETS, restart: false,
        check: int(1, MAX_I32), default: "8",
        label: "Per-visitor assets (HTTP/1)",
        help: "Asset requests one visitor may have in flight over HTTP/1.",
    }),
    setting!(asset_user_cap_h2: U32 {
        flag: "-asset-user-cap-h2", env: "CONCERT_ASSET_USER_CAP_H2", group: ASSETS, restart: false,
        check: int(1, MAX_I32), default: "128",
        label: "Per-visitor assets (HTTP/2+)",
        help: "Asset requests one visitor may have in flight over HTTP/2 or HTTP/3.",
    }),
    setting!(asset_user_wait: Dur {
        flag: "-asset-user-wait", env: "CONCERT_ASSET_USER_WAIT", group: ASSETS, restart: false,
        check: ANY_DURATION, default: "2s",
        label: "Per-visitor asset wait",
        help: "How long an asset request waits for the visitor's own slot before 429.",
    }),
    setting!(admit_ttl: Dur {
        flag: "-admit-ttl", env: "CONCERT_ADMIT_TTL", group: ASSETS, restart: false,
        check: at_least(30 * SECOND), default: "10m0s",
        label: "Admission pass lifetime",
        help: "Lifetime of the pass an admitted visitor receives; it slides while in use. At least 30s.",
    }),
    setting!(client_proto_header: Str {
        flag: "-client-proto-header", env: "CONCERT_CLIENT_PROTO_HEADER", group: ASSETS, restart: false,
        check: Check::HeaderName, default: "",
        label: "Client protocol header",
        help: "Header a front proxy sets to the visitor's HTTP version, used to pick the per-visitor asset limit.",
    }),
    // Streams
    setting!(stream_paths: Paths {
        flag: "-stream-paths", env: "CONCERT_STREAM_PATHS", group: STREAMS, restart: false,
        check: Check::None, default: "",
        label: "Stream paths",
        help: "WebSocket and server-sent-event paths for admitted visitors, outside the page slots.",
    }),
    setting!(stream_cap: U32 {
        flag: "-stream-cap", env: "CONCERT_STREAM_CAP", group: STREAMS, restart: false,
        check: int(1, MAX_I32), default: "1000",
        label: "Open stream limit",
        help: "Streams open at the same time across all visitors.",
    }),
    // Abuse
    setting!(abuse: Bool {
        flag: "-abuse", env: "CONCERT_ABUSE", group: ABUSE, restart: false,
        check: Check::None, default: "true",
        label: "Abuse protection",
        help: "Count strikes and ban misbehaving clients. Off keeps existing bans but stops enforcing them.",
    }),
    setting!(abuse_strikes: U32 {
        flag: "-abuse-strikes", env: "CONCERT_ABUSE_STRIKES", group: ABUSE, restart: false,
        check: int(0, MAX_I32), default: "20",
        label: "Strikes before a ban",
        help: "Strikes within the window that ban a client. At least 1 while protection is on.",
    }),
    setting!(abuse_window: Dur {
        flag: "-abuse-window", env: "CONCERT_ABUSE_WINDOW", group: ABUSE, restart: false,
        check: ANY_DURATION, default: "1m0s",
        label: "Strike window",
        help: "Strikes older than this are forgotten.",
    }),
    setting!(abuse_cooldown: Dur {
        flag: "-abuse-cooldown", env: "CONCERT_ABUSE_COOLDOWN", group: ABUSE, restart: false,
        check: ANY_DURATION, default: "5m0s",
        label: "First ban length",
        help: "Length of a first ban; repeat offenders get longer ones.",
    }),
    setting!(abuse_max_cooldown: Dur {
        flag: "-abuse-max-cooldown", env: "CONCERT_ABUSE_MAX_COOLDOWN", group: ABUSE, restart: false,
        check: ANY_DURATION, default: "24h0m0s",
        label: "Longest ban",
        help: "Upper bound for escalating bans; not shorter than the first ban.",
    }),
    setting!(abuse_max_entries: U32 {
        flag: "-abuse-max-entries", env: "CONCERT_ABUSE_MAX_ENTRIES", group: ABUSE, restart: false,
        check: int(0, MAX_I32), default: "100000",
        label: "Tracked clients limit",
        help: "Most clients the abuse registry remembers at once.",
    }),
    setting!(abuse_allow: Cidr {
        flag: "-abuse-allow", env: "CONCERT_ABUSE_ALLOW", group: ABUSE, restart: false,
        check: Check::None, default: "",
        label: "Never ban",
        help: "Addresses or CIDRs that never collect strikes or bans.",
    }),
    // HTTPS
    setting!(tls_cert: Str {
        flag: "-tls-cert", env: "CONCERT_TLS_CERT", group: TLS, restart: false,
        check: Check::None, default: "",
        label: "Certificate file",
        help: "PEM file with the site's certificate (its chain after it) for HTTPS on -listen. Needs -tls-key; not together with -tls-domains. Read again when the file changes and on SIGHUP.",
    }),
    setting!(tls_key: Str {
        flag: "-tls-key", env: "CONCERT_TLS_KEY", group: TLS, restart: false,
        check: Check::None, default: "",
        label: "Certificate key file",
        help: "PEM file with the private key of -tls-cert.",
    }),
    setting!(tls_domains: Hosts {
        flag: "-tls-domains", env: "CONCERT_TLS_DOMAINS", group: TLS, restart: false,
        check: Check::None, default: "",
        label: "Certificate domains",
        help: "Host names to get certificates for automatically (ACME; Let's Encrypt unless -tls-directory names another authority). Setting any turns on HTTPS on -listen. Not together with -tls-cert.",
    }),
    setting!(tls_email: Str {
        flag: "-tls-email", env: "CONCERT_TLS_EMAIL", group: TLS, restart: false,
        check: Check::None, default: "",
        label: "Contact e-mail",
        help: "Address the certificate authority may write to about the certificates of -tls-domains.",
    }),
    setting!(tls_cache: Str {
        flag: "-tls-cache", env: "CONCERT_TLS_CACHE", group: TLS, restart: false,
        check: Check::None, default: "/var/lib/concert/acme",
        label: "Certificate cache",
        help: "Directory keeping the ACME account key and the certificates of -tls-domains.",
    }),
    setting!(tls_staging: Bool {
        flag: "-tls-staging", env: "CONCERT_TLS_STAGING", group: TLS, restart: false,
        check: Check::None, default: "false",
        label: "Use the staging CA",
        help: "Get untrusted test certificates from Let's Encrypt's staging service. Not together with -tls-directory.",
    }),
    setting!(tls_directory: Str {
        flag: "-tls-directory", env: "CONCERT_TLS_DIRECTORY", group: TLS, restart: false,
        check: Check::AcmeDirectory, default: "",
        label: "ACME directory",
        help: "Directory URL of the ACME certificate authority for -tls-domains: https, or http only on a loopback host. Empty uses Let's Encrypt (its staging service with -tls-staging).",
    }),
    setting!(tls_directory_ca: Str {
        flag: "-tls-directory-ca", env: "CONCERT_TLS_DIRECTORY_CA", group: TLS, restart: false,
        check: Check::None, default: "",
        label: "ACME directory roots",
        help: "PEM file of extra root certificates trusted for the ACME directory's own HTTPS (a private or test certificate authority).",
    }),
    setting!(http_listen: Str {
        flag: "-http-listen", env: "CONCERT_HTTP_LISTEN", group: TLS, restart: true,
        check: Check::ListenAddr { allow_empty: true }, default: "",
        label: "Plain HTTP address",
        help: "Address of a plain-HTTP listener (e.g. :80) that answers ACME HTTP-01 challenges and sends everything else to https with a 308 redirect, path and query kept. Needs HTTPS on. Empty turns it off.",
    }),
    setting!(hsts: Dur {
        flag: "-hsts", env: "CONCERT_HSTS", group: TLS, restart: false,
        check: Check::Duration { zero_ok: true, min: Duration::from_secs(1), max: Duration::MAX },
        default: "0s",
        label: "HSTS max-age",
        help: "Answers over HTTPS carry Strict-Transport-Security with this max-age, so browsers keep to HTTPS for that long. 0 sends none.",
    }),
    // Portal
    setting!(portal_listen: Str {
        flag: "-portal-listen", env: "CONCERT_PORTAL_LISTEN", group: PORTAL, restart: true,
        check: Check::ListenAddr { allow_empty: true }, default: "127.0.0.1:8081",
        label: "Portal address",
        help: "Address of the admin portal listener (it runs only while CONCERT_PORTAL_PASS is set). Empty turns the listener off.",
    }),
    setting!(portal_allow: Cidr {
        flag: "-portal-allow", env: "CONCERT_PORTAL_ALLOW", group: PORTAL, restart: false,
        check: Check::None, default: "127.0.0.1/32,::1/128",
        label: "Portal clients",
        help: "Addresses or CIDRs allowed to reach the portal, checked on the connecting socket (forwarded headers are ignored).",
    }),
    setting!(portal_session_ttl: Dur {
        flag: "-portal-session-ttl", env: "CONCERT_PORTAL_SESSION_TTL", group: PORTAL, restart: false,
        check: at_least(5 * MINUTE), default: "8h0m0s",
        label: "Portal session lifetime",
        help: "How long a portal sign-in lasts. At least 5m.",
    }),
    setting!(portal_secure_cookie: Bool {
        flag: "-portal-secure-cookie", env: "CONCERT_PORTAL_SECURE_COOKIE", group: PORTAL, restart: false,
        check: Check::None, default: "false",
        label: "Secure portal cookie",
        help: "Mark the portal's cookies Secure; turn on when the portal is reached over HTTPS.",
    }),
    setting!(portal_tls_cert: Str {
        flag: "-portal-tls-cert", env: "CONCERT_PORTAL_TLS_CERT", group: PORTAL, restart: true,
        check: Check::None, default: "",
        label: "Portal certificate file",
        help: "PEM certificate (chain after it) for serving the portal over HTTPS. Needs -portal-tls-key. Empty keeps the portal on plain HTTP.",
    }),
    setting!(portal_tls_key: Str {
        flag: "-portal-tls-key", env: "CONCERT_PORTAL_TLS_KEY", group: PORTAL, restart: true,
        check: Check::None, default: "",
        label: "Portal certificate key file",
        help: "PEM file with the private key of -portal-tls-cert.",
    }),
    setting!(history_log: Str {
        flag: "-history-log", env: "CONCERT_HISTORY_LOG", group: PORTAL, restart: true,
        check: Check::None, default: "",
        label: "History log",
        help: "Request history file. Empty uses history.jsonl in the data directory (memory only without one); off, none, false or 0 keep the history in memory only.",
    }),
    setting!(cluster: Str {
        flag: "-cluster", env: "CONCERT_CLUSTER", group: CLUSTER, restart: true,
        check: Check::ClusterUrl, default: "",
        label: "Shared line (Redis)",
        help: "redis://host:port/db (or rediss:// for TLS) of a Redis or Valkey server that instances running in front of the same origin share: one cap, one line, one ban list. The password comes from CONCERT_CLUSTER_PASSWORD or the URL. Empty runs this instance alone.",
    }),
    setting!(cluster_name: Str {
        flag: "-cluster-name", env: "CONCERT_CLUSTER_NAME", group: CLUSTER, restart: true,
        check: Check::ClusterName, default: "concert",
        label: "Cluster name",
        help: "Prefix of every key the instances share, so several sites can use one Redis. Instances of one site must use the same name.",
    }),
    setting!(cluster_fallback_share: F64 {
        flag: "-cluster-fallback-share", env: "CONCERT_CLUSTER_FALLBACK_SHARE", group: CLUSTER, restart: false,
        check: Check::Float { min: 0.0, max: 1.0 }, default: "0",
        label: "Share of the cap without Redis",
        help: "Fraction of -cap this instance admits on its own while Redis cannot be reached. 0 means one part in as many as the instances last seen together.",
    }),
];
