//! Reading and writing one setting's value: text from flags and env, JSON from settings.json and
//! the API, the per-value check, and the display/JSON forms used by views and persistence.

use std::time::Duration;

use serde_json::Value;

use super::cidr::CidrList;
use super::duration::{format_go_duration, parse_env_duration, parse_go_duration};
use super::hosts::HostList;
use super::table::{Check, SettingDef, Slot, SlotRef, ValueType};
use crate::paths::rules::PathList;

/// Where a text value came from; env durations may be bare nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TextOrigin {
    Flag,
    Env,
}

/// A decoded value, held until it passes its check so a refused value never lands in a config.
pub(super) enum Parsed {
    U32(u32),
    U64(u64),
    Bytes(u64),
    F64(f64),
    Bool(bool),
    Dur(Duration),
    Str(String),
    Cidr(CidrList),
    Paths(PathList),
    Hosts(HostList),
}

impl Parsed {
    fn as_slot_ref(&self) -> SlotRef<'_> {
        match self {
            Parsed::U32(v) => SlotRef::U32(v),
            Parsed::U64(v) => SlotRef::U64(v),
            Parsed::Bytes(v) => SlotRef::Bytes(v),
            Parsed::F64(v) => SlotRef::F64(v),
            Parsed::Bool(v) => SlotRef::Bool(v),
            Parsed::Dur(v) => SlotRef::Dur(v),
            Parsed::Str(v) => SlotRef::Str(v),
            Parsed::Cidr(v) => SlotRef::Cidr(v),
            Parsed::Paths(v) => SlotRef::Paths(v),
            Parsed::Hosts(v) => SlotRef::Hosts(v),
        }
    }
}

/// Go's `strconv.ParseBool` spellings.
pub(super) fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err("must be true or false".to_string()),
    }
}

fn int_bounds(def: &SettingDef) -> (u64, u64) {
    match def.check {
        Check::Int { min, max } => (min, max),
        _ if def.ty == ValueType::U32 => (0, u64::from(u32::MAX)),
        _ => (0, u64::MAX),
    }
}

fn int_range_text(min: u64, max: u64) -> String {
    if max >= i64::MAX as u64 {
        format!("must be a whole number, at least {min}")
    } else {
        format!("must be a whole number between {min} and {max}")
    }
}

fn int_in_range(def: &SettingDef, value: i128) -> Result<u64, String> {
    let (min, max) = int_bounds(def);
    u64::try_from(value)
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| int_range_text(min, max))
}

fn store_int(def: &SettingDef, value: u64) -> Result<Parsed, String> {
    match def.ty {
        ValueType::U32 => u32::try_from(value)
            .map(Parsed::U32)
            .map_err(|_| "does not fit in 32 bits".to_string()),
        _ => Ok(Parsed::U64(value)),
    }
}

fn finite(value: f64) -> Result<f64, String> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err("must be a finite number".to_string())
    }
}

const BYTE_SIZE_FORM: &str = "must be a number of bytes, optionally with a k, m or g suffix (powers of 1024), like 65536 or 64m";

/// A byte count: digits, optionally followed by `k`, `m` or `g` (either case), each a power of
/// 1024 as nginx reads its sizes.
pub(super) fn parse_byte_size(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((at, suffix)) if suffix.is_ascii_alphabetic() => (&text[..at], Some(suffix)),
        _ => (text, None),
    };
    let shift = match unit.map(|suffix| suffix.to_ascii_lowercase()) {
        None => 0,
        Some('k') => 10,
        Some('m') => 20,
        Some('g') => 30,
        Some(_) => return Err(BYTE_SIZE_FORM.to_string()),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BYTE_SIZE_FORM.to_string());
    }
    let count: u64 = digits.parse().map_err(|_| "is too large".to_string())?;
    count
        .checked_mul(1u64 << shift)
        .ok_or_else(|| "is too large".to_string())
}

/// The shortest exact form [`parse_byte_size`] reads back: `64m` rather than `67108864`.
pub(super) fn format_byte_size(bytes: u64) -> String {
    for (suffix, shift) in [('g', 30), ('m', 20), ('k', 10)] {
        let unit = 1u64 << shift;
        if bytes != 0 && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

const DURATION_FORM: &str = "use a duration like 300ms, 30s or 1h30m";

/// Decodes flag or env text (flags and env keep strings as given; host lists merge duplicates).
pub(super) fn parse_text(
    def: &SettingDef,
    text: &str,
    origin: TextOrigin,
) -> Result<Parsed, String> {
    let trimmed = text.trim();
    match def.ty {
        ValueType::U32 | ValueType::U64 => {
            let (min, max) = int_bounds(def);
            let value: i128 = trimmed.parse().map_err(|_| int_range_text(min, max))?;
            store_int(def, int_in_range(def, value)?)
        }
        ValueType::Bytes => parse_byte_size(trimmed).map(Parsed::Bytes),
        ValueType::F64 => trimmed
            .parse::<f64>()
            .map_err(|_| "must be a number".to_string())
            .and_then(finite)
            .map(Parsed::F64),
        ValueType::Bool => parse_go_bool(trimmed).map(Parsed::Bool),
        ValueType::Dur => {
            let parsed = match origin {
                TextOrigin::Flag => parse_go_duration(trimmed),
                TextOrigin::Env => parse_env_duration(trimmed),
            };
            parsed
                .map(Parsed::Dur)
                .map_err(|reason| duration_reason(&reason))
        }
        ValueType::Str => Ok(Parsed::Str(text.to_string())),
        ValueType::Cidr => CidrList::parse(text).map(Parsed::Cidr),
        ValueType::Paths => PathList::parse_strict(text).map(Parsed::Paths),
        ValueType::Hosts => HostList::parse_lenient(text).map(Parsed::Hosts),
    }
}

fn duration_reason(reason: &str) -> String {
    if reason.contains("negative") {
        reason.to_string()
    } else {
        format!("{reason}; {DURATION_FORM}")
    }
}

/// Decodes a settings.json / API value (strict list form, trimmed strings, no type coercion).
pub(super) fn parse_json(def: &SettingDef, value: &Value) -> Result<Parsed, String> {
    match def.ty {
        ValueType::U32 | ValueType::U64 => {
            let (min, max) = int_bounds(def);
            let whole = value
                .as_i64()
                .map(i128::from)
                .or_else(|| value.as_u64().map(i128::from));
            let whole = whole.ok_or_else(|| int_range_text(min, max))?;
            store_int(def, int_in_range(def, whole)?)
        }
        ValueType::Bytes => match value {
            Value::String(text) => parse_byte_size(text.trim()).map(Parsed::Bytes),
            Value::Number(number) => number
                .as_u64()
                .map(Parsed::Bytes)
                .ok_or_else(|| BYTE_SIZE_FORM.to_string()),
            _ => Err(BYTE_SIZE_FORM.to_string()),
        },
        ValueType::F64 => value
            .as_f64()
            .ok_or_else(|| "must be a number".to_string())
            .and_then(finite)
            .map(Parsed::F64),
        ValueType::Bool => value
            .as_bool()
            .map(Parsed::Bool)
            .ok_or_else(|| "must be a boolean (true or false)".to_string()),
        ValueType::Dur => {
            let text = value
                .as_str()
                .ok_or_else(|| format!("must be a string; {DURATION_FORM}"))?;
            parse_go_duration(text.trim())
                .map(Parsed::Dur)
                .map_err(|reason| duration_reason(&reason))
        }
        ValueType::Str | ValueType::Cidr | ValueType::Paths | ValueType::Hosts => {
            let text = value
                .as_str()
                .ok_or_else(|| "must be a string".to_string())?
                .trim();
            match def.ty {
                ValueType::Cidr => CidrList::parse(text).map(Parsed::Cidr),
                ValueType::Paths => PathList::parse_strict(text).map(Parsed::Paths),
                ValueType::Hosts => HostList::parse_strict(text).map(Parsed::Hosts),
                _ => Ok(Parsed::Str(text.to_string())),
            }
        }
    }
}

/// The per-value check of a decoded value.
pub(super) fn check_parsed(def: &SettingDef, parsed: &Parsed) -> Result<(), String> {
    check_value(def, parsed.as_slot_ref())
}

/// The per-value check of a row's value (decoded or already in a config).
pub(super) fn check_value(def: &SettingDef, value: SlotRef<'_>) -> Result<(), String> {
    match (def.check, value) {
        (Check::None, _) => Ok(()),
        (Check::Int { min, max }, SlotRef::U32(v)) => int_check(u64::from(*v), min, max),
        (Check::Int { min, max }, SlotRef::U64(v) | SlotRef::Bytes(v)) => int_check(*v, min, max),
        (Check::Float { min, max }, SlotRef::F64(v)) => {
            if v.is_finite() && (min..=max).contains(v) {
                Ok(())
            } else {
                Err(format!("must be a number between {min} and {max}"))
            }
        }
        (Check::Duration { zero_ok, min, max }, SlotRef::Dur(v)) => {
            duration_check(*v, zero_ok, min, max)
        }
        (Check::Upstream, SlotRef::Str(v)) => check_upstream(v).map(drop),
        (Check::SkipUrl, SlotRef::Str(v)) => check_skip_url(v),
        (Check::ListenAddr { allow_empty }, SlotRef::Str(v)) => check_listen(v, allow_empty),
        (Check::HeaderName, SlotRef::Str(v)) => check_header_name(v),
        (Check::CookieAttribute, SlotRef::Str(v)) => check_cookie_attribute(v),
        (Check::AcmeDirectory, SlotRef::Str(v)) => check_acme_directory(v),
        (Check::ClusterUrl, SlotRef::Str(v)) => check_cluster_url(v),
        (Check::ClusterName, SlotRef::Str(v)) => check_cluster_name(v),
        _ => Err("internal error: check does not fit the value type".to_string()),
    }
}

fn int_check(value: u64, min: u64, max: u64) -> Result<(), String> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(int_range_text(min, max))
    }
}

fn duration_check(
    value: Duration,
    zero_ok: bool,
    min: Duration,
    max: Duration,
) -> Result<(), String> {
    if (zero_ok && value.is_zero()) || (min..=max).contains(&value) {
        return Ok(());
    }
    let range = match (min.is_zero(), max == Duration::MAX) {
        (_, true) => format!("at least {}", format_go_duration(min)),
        (true, false) => format!("at most {}", format_go_duration(max)),
        (false, false) => format!(
            "between {} and {}",
            format_go_duration(min),
            format_go_duration(max)
        ),
    };
    if zero_ok && !min.is_zero() {
        Err(format!("must be 0 or {range}"))
    } else {
        Err(format!("must be {range}"))
    }
}

/// An http(s) URL with a non-empty host.
pub(super) fn check_upstream(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|_| "must be an http:// or https:// URL with a host".to_string())?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let host_ok = uri.host().is_some_and(|host| !host.is_empty());
    if scheme_ok && host_ok {
        Ok(uri)
    } else {
        Err("must be an http:// or https:// URL with a host".to_string())
    }
}

const MAX_SKIP_URL_LEN: usize = 2048;

fn check_skip_url(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    if text.len() > MAX_SKIP_URL_LEN {
        return Err(format!("must be at most {MAX_SKIP_URL_LEN} characters"));
    }
    if let Some(bad) = text
        .chars()
        .find(|c| matches!(c, ' ' | '\t' | '\r' | '\n' | '"' | '<' | '>') || c.is_control())
    {
        return Err(format!("must not contain {bad:?}"));
    }
    if text.starts_with('/') || text.starts_with("http://") || text.starts_with("https://") {
        Ok(())
    } else {
        Err("must be a path starting with / or an http:// or https:// URL".to_string())
    }
}

fn check_listen(text: &str, allow_empty: bool) -> Result<(), String> {
    if text.is_empty() && allow_empty {
        return Ok(());
    }
    let port_ok = text
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok());
    if port_ok && !text.chars().any(char::is_whitespace) {
        Ok(())
    } else {
        Err("must be host:port or :port".to_string())
    }
}

fn check_header_name(text: &str) -> Result<(), String> {
    if text.is_empty() || http::HeaderName::from_bytes(text.as_bytes()).is_ok() {
        Ok(())
    } else {
        Err("must be a valid HTTP header name".to_string())
    }
}

fn check_cookie_attribute(text: &str) -> Result<(), String> {
    match text
        .chars()
        .find(|c| *c == ';' || *c == ',' || c.is_whitespace() || c.is_control())
    {
        Some(bad) => Err(format!("must not contain {bad:?}")),
        None => Ok(()),
    }
}

/// An ACME directory URL: https, or plain http only to a loopback host, where nothing on the
/// network can read or change the exchange (a test CA beside Concert).
pub(crate) fn check_acme_directory(text: &str) -> Result<(), String> {
    const FORM: &str = "must be an https:// URL, or http:// with a loopback host";
    if text.is_empty() {
        return Ok(());
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(FORM.to_string());
    }
    let uri: http::Uri = text.parse().map_err(|_| FORM.to_string())?;
    let Some(host) = uri.host().filter(|host| !host.is_empty()) else {
        return Err(FORM.to_string());
    };
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback_host(host) => Ok(()),
        _ => Err(FORM.to_string()),
    }
}

/// Empty, or a Redis URL a client can connect to: `redis://` or `rediss://`, a host, and at
/// most a database number as its path.
pub(crate) fn check_cluster_url(text: &str) -> Result<(), String> {
    const FORM: &str = "must be redis://host:port/db or rediss://host:port/db";
    if text.is_empty() {
        return Ok(());
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(FORM.to_string());
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err(FORM.to_string());
    };
    if !matches!(scheme, "redis" | "rediss") {
        return Err(FORM.to_string());
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map(|(host, _)| host),
        None => Some(host_port.split(':').next().unwrap_or("")),
    };
    if host.is_none_or(str::is_empty) {
        return Err(FORM.to_string());
    }
    let path = path.split(['?', '#']).next().unwrap_or("");
    if !path.is_empty() && path.parse::<u16>().is_err() {
        return Err(format!("{FORM} (the database must be a number)"));
    }
    Ok(())
}

/// Letters, digits, `.`, `_` and `-`, 1 to 64 of them.
pub(crate) fn check_cluster_name(text: &str) -> Result<(), String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if (1..=64).contains(&text.len()) && text.chars().all(fits) {
        Ok(())
    } else {
        Err("must be 1 to 64 letters, digits, '.', '_' or '-'".to_string())
    }
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Writes a decoded value into its field.
pub(super) fn store(slot: Slot<'_>, parsed: Parsed) -> Result<(), String> {
    match (slot, parsed) {
        (Slot::U32(field), Parsed::U32(v)) => *field = v,
        (Slot::U64(field), Parsed::U64(v)) | (Slot::Bytes(field), Parsed::Bytes(v)) => {
            *field = v;
        }
        (Slot::F64(field), Parsed::F64(v)) => *field = v,
        (Slot::Bool(field), Parsed::Bool(v)) => *field = v,
        (Slot::Dur(field), Parsed::Dur(v)) => *field = v,
        (Slot::Str(field), Parsed::Str(v)) => *field = v,
        (Slot::Cidr(field), Parsed::Cidr(v)) => *field = v,
        (Slot::Paths(field), Parsed::Paths(v)) => *field = v,
        (Slot::Hosts(field), Parsed::Hosts(v)) => *field = v,
        _ => return Err("internal error: value does not fit the field".to_string()),
    }
    Ok(())
}

/// Copies a field from another config (used to reset a key to its baseline).
pub(super) fn copy(slot: Slot<'_>, source: SlotRef<'_>) -> Result<(), String> {
    match (slot, source) {
        (Slot::U32(field), SlotRef::U32(v)) => *field = *v,
        (Slot::U64(field), SlotRef::U64(v)) | (Slot::Bytes(field), SlotRef::Bytes(v)) => {
            *field = *v;
        }
        (Slot::F64(field), SlotRef::F64(v)) => *field = *v,
        (Slot::Bool(field), SlotRef::Bool(v)) => *field = *v,
        (Slot::Dur(field), SlotRef::Dur(v)) => *field = *v,
        (Slot::Str(field), SlotRef::Str(v)) => field.clone_from(v),
        (Slot::Cidr(field), SlotRef::Cidr(v)) => field.clone_from(v),
        (Slot::Paths(field), SlotRef::Paths(v)) => field.clone_from(v),
        (Slot::Hosts(field), SlotRef::Hosts(v)) => field.clone_from(v),
        _ => return Err("internal error: value does not fit the field".to_string()),
    }
    Ok(())
}

/// Display form: what a flag would take, durations in Go form.
pub(super) fn to_text(value: SlotRef<'_>) -> String {
    match value {
        SlotRef::U32(v) => v.to_string(),
        SlotRef::U64(v) => v.to_string(),
        SlotRef::Bytes(v) => format_byte_size(*v),
        SlotRef::F64(v) => v.to_string(),
        SlotRef::Bool(v) => v.to_string(),
        SlotRef::Dur(v) => format_go_duration(*v),
        SlotRef::Str(v) => v.clone(),
        SlotRef::Cidr(v) => v.as_str().to_string(),
        SlotRef::Paths(v) => v.as_str().to_string(),
        SlotRef::Hosts(v) => v.as_str().to_string(),
    }
}

/// JSON form for settings.json and the settings view: typed numbers and booleans, durations
/// and lists as strings.
pub(super) fn to_json(value: SlotRef<'_>) -> Value {
    match value {
        SlotRef::U32(v) => Value::from(*v),
        SlotRef::U64(v) => Value::from(*v),
        SlotRef::F64(v) => serde_json::Number::from_f64(*v).map_or(Value::Null, Value::Number),
        SlotRef::Bool(v) => Value::Bool(*v),
        other => Value::String(to_text(other)),
    }
}
