//! The Settings tab's API: every live setting with where its value comes from, changes and
//! resets applied through [`App::apply_change_guarded`] (so the table's checks, whole-config
//! validation and the settings.json write are the admin API's own), and what is fixed at start.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use http::{Response, StatusCode};
use serde::Serialize;
use serde_json::{Map, Value};

use super::{Portal, read_body, respond};
use crate::app::{App, ChangeError, Problem};
use crate::config::table::ValueType;
use crate::config::{Config, SETTINGS, SettingDef};
use crate::lifecycle::VERSION;
use crate::server::SideConn;
use crate::store::SETTINGS_FILE;

/// What a change that is not a JSON object of settings gets back.
const NOT_AN_OBJECT: &str = "send a JSON object of the settings to change";
/// What a reset without a key gets back.
const KEY_REQUIRED: &str = "key is required";

/// One row of the settings table as the tab shows it.
#[derive(Serialize)]
struct SettingView {
    key: &'static str,
    group: &'static str,
    label: &'static str,
    help: &'static str,
    /// `string`, `int`, `float`, `bool` or `duration`: which input fits.
    kind: &'static str,
    /// `path`, `cidr` or `host` for comma-separated lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    list: Option<&'static str>,
    flag: &'static str,
    env: &'static str,
    value: Value,
    /// `default`, `env`, `flag` or `file` (settings.json or a live change).
    source: &'static str,
    restart: bool,
}

#[derive(Serialize)]
struct SettingsView {
    settings: Vec<SettingView>,
    /// Whether changes are written to settings.json (there is a data directory).
    persisted: bool,
    /// That file's path, empty without a data directory.
    file: String,
    /// What only a restart changes, by label; secrets only as set or not.
    fixed: Map<String, Value>,
}

/// The input kind and list kind of a row's type. Byte counts are text: `64m` reads better
/// than its digits, and the value is shown in that form.
fn kind_of(def: &SettingDef) -> (&'static str, Option<&'static str>) {
    match def.ty {
        ValueType::U32 | ValueType::U64 => ("int", None),
        ValueType::F64 => ("float", None),
        ValueType::Bool => ("bool", None),
        ValueType::Dur => ("duration", None),
        ValueType::Bytes | ValueType::Str => ("string", None),
        ValueType::Cidr => ("string", Some("cidr")),
        ValueType::Paths => ("string", Some("path")),
        ValueType::Hosts => ("string", Some("host")),
    }
}

fn setting_view(config: &Config, def: &'static SettingDef) -> SettingView {
    let (kind, list) = kind_of(def);
    SettingView {
        key: def.key,
        group: def.group,
        label: def.label,
        help: def.help,
        kind,
        list,
        flag: def.flag,
        env: def.env,
        value: config.value_json(def.key).unwrap_or(Value::Null),
        source: config.source(def.key).as_str(),
        restart: def.restart,
    }
}

fn set_or_not(set: bool, set_text: &str, unset_text: &str) -> Value {
    Value::from(if set { set_text } else { unset_text })
}

/// Where the request history would be written: the explicit path, else `history.jsonl` in
/// the data directory; `off`, or no data directory, keeps it in memory.
fn history_log(config: &Config, app: &App) -> String {
    match (config.history_log.trim(), &app.data_dir) {
        ("off", _) | ("", None) => "off (memory only)".to_owned(),
        ("", Some(dir)) => dir.file("history.jsonl").display().to_string(),
        (path, _) => path.to_owned(),
    }
}

fn fixed(portal: &Portal, config: &Config, portal_local: Option<String>) -> Map<String, Value> {
    let app = &portal.app;
    let data_dir = match &app.data_dir {
        Some(dir) => dir.path().display().to_string(),
        None => "none: settings, bans and the line live in memory only".to_owned(),
    };
    let secret = if config.admit_secret_generated {
        "generated at start: admission passes end with a restart"
    } else {
        "set (CONCERT_ADMIT_SECRET)"
    };
    let secret = if config.admit_secret_previous.is_some() {
        format!("{secret}; previous secret set for rotation")
    } else {
        secret.to_owned()
    };
    // The configured address may name port 0 or every interface; the socket says where the
    // portal really listens.
    let portal_listener = match portal_local {
        Some(local) if local != config.portal_listen => {
            format!("{} (listening on {local})", config.portal_listen)
        }
        _ => config.portal_listen.clone(),
    };
    let mut fixed = Map::new();
    fixed.insert("Data directory".into(), data_dir.into());
    fixed.insert("Admission secret".into(), secret.into());
    fixed.insert(
        "Admin token".into(),
        set_or_not(
            !config.admin_token.is_empty(),
            "set (the /_room/ admin API is on)",
            "not set (the /_room/ admin API is off)",
        ),
    );
    fixed.insert(
        "Portal pass".into(),
        set_or_not(
            !config.portal_pass.is_empty(),
            "set (CONCERT_PORTAL_PASS)",
            "not set",
        ),
    );
    fixed.insert("IP details".into(), portal.ip_details.describe().into());
    fixed.insert("History log".into(), history_log(config, app).into());
    fixed.insert("Main listener".into(), config.listen.clone().into());
    fixed.insert("Portal listener".into(), portal_listener.into());
    fixed.insert("Version".into(), VERSION.into());
    fixed
}

fn view(portal: &Portal, portal_local: Option<String>) -> SettingsView {
    let generation = portal.app.generation();
    let config = &generation.config;
    SettingsView {
        settings: SETTINGS
            .iter()
            .map(|def| setting_view(config, def))
            .collect(),
        persisted: portal.app.data_dir.is_some(),
        file: portal
            .app
            .data_dir
            .as_ref()
            .map(|dir| dir.file(SETTINGS_FILE).display().to_string())
            .unwrap_or_default(),
        fixed: fixed(portal, config, portal_local),
    }
}

fn conn_of(request: &Request) -> Option<SideConn> {
    request.extensions().get::<SideConn>().copied()
}

/// `GET /api/settings`: every setting, whether changes are kept, and what is fixed.
pub(super) async fn show(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let local = conn_of(&request).map(|conn| conn.local.to_string());
    respond::json(StatusCode::OK, &view(&portal, local))
}

/// Refuses settings that leave the operator's own address outside `portal_allow`: their next
/// request would get 403, and only a restart with other flags would let them back in.
fn keeps_operator_in(config: &Config, peer: IpAddr) -> Result<(), Problem> {
    if config.portal_allow.contains(peer) {
        return Ok(());
    }
    Err(Problem {
        key: "portal_allow".into(),
        message: format!(
            "portal_allow must still include your address {peer}, or this change would lock you out of the portal"
        ),
    })
}

/// Applies a change or reset and answers with the new view, or with every problem.
fn apply(
    portal: &Portal,
    conn: SideConn,
    changes: &Map<String, Value>,
    resets: &[String],
) -> Response<Body> {
    let peer = conn.peer.ip();
    // Judged only when the change touches the list: an unrelated change is not refused over a
    // list another operator changed a moment ago.
    let touches_allow =
        changes.contains_key("portal_allow") || resets.iter().any(|key| key == "portal_allow");
    let outcome = portal.app.apply_change_guarded(changes, resets, |config| {
        if touches_allow {
            keeps_operator_in(config, peer)
        } else {
            Ok(())
        }
    });
    match outcome {
        Ok(_) => {
            let mut keys: Vec<&str> = changes.keys().map(String::as_str).collect();
            keys.extend(resets.iter().map(String::as_str));
            let verb = if changes.is_empty() {
                "reset"
            } else {
                "changed"
            };
            tracing::info!("portal: {peer} {verb} {}", keys.join(", "));
            respond::json(StatusCode::OK, &view(portal, Some(conn.local.to_string())))
        }
        Err(error) => change_refused(&error),
    }
}

/// A refused change: 400 with every problem (joined in `error`, and one by one under
/// `problems` for the form), or 500 when it could not be saved and so was not applied.
fn change_refused(error: &ChangeError) -> Response<Body> {
    match error {
        ChangeError::Refused(problems) => respond::json(
            StatusCode::BAD_REQUEST,
            &serde_json::json!({ "error": error.to_string(), "problems": problems }),
        ),
        ChangeError::Invalid(_) => respond::error(StatusCode::BAD_REQUEST, &error.to_string()),
        ChangeError::Persist(_) => {
            tracing::error!("portal: {error}");
            respond::error(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string())
        }
    }
}

/// `POST /api/settings` with a JSON object of settings keys and values: all applied, or none.
pub(super) async fn change(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let Some(conn) = conn_of(&request) else {
        return respond::forbidden();
    };
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let changes = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(changes)) if !changes.is_empty() => changes,
        _ => return respond::error(StatusCode::BAD_REQUEST, NOT_AN_OBJECT),
    };
    apply(&portal, conn, &changes, &[])
}

/// `DELETE /api/settings?key=a&key=b`: those settings back to their flag, environment or
/// default values, and out of settings.json.
pub(super) async fn reset(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let Some(conn) = conn_of(&request) else {
        return respond::forbidden();
    };
    let keys: Vec<String> = form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
        .filter(|(name, value)| name == "key" && !value.trim().is_empty())
        .map(|(_, value)| value.trim().to_owned())
        .collect();
    if keys.is_empty() {
        return respond::error(StatusCode::BAD_REQUEST, KEY_REQUIRED);
    }
    apply(&portal, conn, &Map::new(), &keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_a_kind_the_tab_knows() {
        let config = Config::default();
        for def in SETTINGS {
            let view = setting_view(&config, def);
            assert!(
                ["string", "int", "float", "bool", "duration"].contains(&view.kind),
                "{}",
                def.key
            );
            assert!(
                view.list
                    .is_none_or(|list| ["path", "cidr", "host"].contains(&list)),
                "{}",
                def.key
            );
            assert!(!view.value.is_null(), "{}", def.key);
            assert_eq!(view.source, "default");
        }
        let row = |key: &str| {
            let def = SETTINGS.iter().find(|def| def.key == key).unwrap();
            serde_json::to_value(setting_view(&config, def)).unwrap()
        };
        assert_eq!(row("cap")["value"], 434);
        assert_eq!(row("rate")["kind"], "float");
        assert_eq!(row("admit_ttl")["value"], "10m0s");
        assert_eq!(row("portal_allow")["list"], "cidr");
        assert_eq!(row("listen")["restart"], true);
        assert!(row("cap").get("list").is_none());
    }

    #[test]
    fn the_operator_may_not_shut_themselves_out() {
        let mut config = Config::default();
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(keeps_operator_in(&config, peer).is_ok());
        config
            .set_json("portal_allow", &serde_json::json!("10.0.0.0/8"))
            .unwrap();
        let problem = keeps_operator_in(&config, peer).unwrap_err();
        assert_eq!(problem.key, "portal_allow");
        assert!(problem.message.contains("127.0.0.1"), "{}", problem.message);
    }
}
