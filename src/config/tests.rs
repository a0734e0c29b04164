//! Loading and validating the configuration: flags, environment, settings files, and the rules
//! that keep a bad value from starting a server.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use super::table::{Slot, SlotRef, ValueType};
use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn load_with(list: &[&str], vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    match load(&args(list), &env(vars))? {
        Loaded::Run(config) => Ok(*config),
        other => panic!("expected a config, got {other:?}"),
    }
}

/// Loads and validates, as start-up does without a settings file.
fn start(list: &[&str], vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut config = load_with(list, vars)?;
    config.validate()?;
    Ok(config)
}

fn env_name_for(flag: &str) -> String {
    match flag {
        "-cap" => "CONCERT_CAPACITY".to_string(),
        "-html" => "CONCERT_HTML_FILE".to_string(),
        "-pass" => "CONCERT_PASS_DURATION".to_string(),
        _ => format!(
            "CONCERT_{}",
            flag.trim_start_matches('-')
                .replace('-', "_")
                .to_uppercase()
        ),
    }
}

#[test]
fn clean_env_yields_every_rows_default() {
    let config = load_with(&[], &[]).unwrap();
    for def in SETTINGS {
        assert_eq!(
            config.value_text(def.key).as_deref(),
            Some(def.default),
            "default of {}",
            def.key
        );
        assert_eq!(config.source(def.key), Source::Default);
    }
    assert_eq!(config.data_dir, DEFAULT_DATA_DIR);
    assert_eq!(config.log_format, LogFormat::Text);
    assert_eq!(config.workers, 0);
    assert!(!config.demo);
    assert_eq!(config.admit_secret, None);
}

#[test]
fn documented_defaults() {
    let config = start(&[], &[]).unwrap();
    assert_eq!(config.cap, 434);
    assert_eq!(config.max_queue, 369);
    assert_eq!(config.reaper, Duration::from_secs(36));
    assert_eq!(config.first_poll_grace, Duration::from_secs(30));
    assert_eq!(config.ready_grace, Duration::from_secs(30));
    assert_eq!(config.effective_token_ttl(), Duration::from_secs(300));
    assert_eq!(config.effective_asset_cap(), 434 * 128);
    assert_eq!(config.effective_priority_cap(), 108);
    assert_eq!(config.bypass.as_str(), "/favicon.ico");
    assert_eq!(config.upstream_uri().unwrap().host(), Some("127.0.0.1"));
    assert!(config.admit_secret_generated);
    assert_eq!(config.admit_secret.as_ref().map(Vec::len), Some(32));
}

#[test]
fn every_flag_has_exactly_one_row_and_the_right_env() {
    let extras: HashSet<&str> = flags::EXTRA_FLAGS.iter().map(|f| f.name).collect();
    let command = flags::command();
    let mut seen = HashSet::new();
    for arg in command.get_arguments() {
        let name = arg.get_id().as_str();
        if name == "help" || extras.contains(name) {
            continue;
        }
        let rows = SETTINGS.iter().filter(|d| d.flag_name() == name).count();
        assert_eq!(rows, 1, "flag -{name}");
        seen.insert(name.to_string());
    }
    assert_eq!(seen.len(), SETTINGS.len());
    let keys: HashSet<&str> = SETTINGS.iter().map(|d| d.key).collect();
    let envs: HashSet<&str> = SETTINGS.iter().map(|d| d.env).collect();
    assert_eq!(keys.len(), SETTINGS.len());
    assert_eq!(envs.len(), SETTINGS.len());
    for def in SETTINGS {
        assert_eq!(def.env, env_name_for(def.flag), "env of {}", def.key);
        assert!(table::GROUPS.contains(&def.group), "group of {}", def.key);
        assert!(!def.label.is_empty() && !def.help.is_empty());
    }
}

#[test]
fn row_accessors_match_declared_types() {
    let mut config = Config::default();
    for def in SETTINGS {
        let read = match (def.get)(&config) {
            SlotRef::U32(_) => ValueType::U32,
            SlotRef::U64(_) => ValueType::U64,
            SlotRef::Bytes(_) => ValueType::Bytes,
            SlotRef::F64(_) => ValueType::F64,
            SlotRef::Bool(_) => ValueType::Bool,
            SlotRef::Dur(_) => ValueType::Dur,
            SlotRef::Str(_) => ValueType::Str,
            SlotRef::Cidr(_) => ValueType::Cidr,
            SlotRef::Paths(_) => ValueType::Paths,
            SlotRef::Hosts(_) => ValueType::Hosts,
        };
        let write = match (def.get_mut)(&mut config) {
            Slot::U32(_) => ValueType::U32,
            Slot::U64(_) => ValueType::U64,
            Slot::Bytes(_) => ValueType::Bytes,
            Slot::F64(_) => ValueType::F64,
            Slot::Bool(_) => ValueType::Bool,
            Slot::Dur(_) => ValueType::Dur,
            Slot::Str(_) => ValueType::Str,
            Slot::Cidr(_) => ValueType::Cidr,
            Slot::Paths(_) => ValueType::Paths,
            Slot::Hosts(_) => ValueType::Hosts,
        };
        assert_eq!((read, write), (def.ty, def.ty), "{}", def.key);
    }
}

#[test]
fn list_kinds_are_declared() {
    let count = |ty| SETTINGS.iter().filter(|d| d.ty == ty).count();
    assert_eq!(count(ValueType::Paths), 6);
    assert_eq!(count(ValueType::Cidr), 3);
    assert_eq!(count(ValueType::Hosts), 1);
    let restart: Vec<&str> = SETTINGS
        .iter()
        .filter(|d| d.restart)
        .map(|d| d.key)
        .collect();
    assert_eq!(
        restart,
        [
            "fastlane_config",
            "networks_config",
            "listen",
            "http_listen",
            "portal_listen",
            "portal_tls_cert",
            "portal_tls_key",
            "history_log",
            "cluster",
            "cluster_name"
        ]
    );
}

#[test]
fn env_only_configuration() {
    let secret = "k".repeat(40);
    let config = start(
        &[],
        &[
            ("CONCERT_UPSTREAM", "http://origin.internal:9000"),
            ("CONCERT_CAPACITY", "42"),
            ("CONCERT_REAPER", "45s"),
            ("CONCERT_API_JSON", "false"),
            ("CONCERT_ADMIN_TOKEN", "s3cret"),
            ("CONCERT_ASSET_USER_CAP_H2", "64"),
            ("CONCERT_ADMIT_SECRET", &secret),
            ("CONCERT_BAN_PATHS", "/.env,/.git/*"),
            ("CONCERT_ABUSE_ALLOW", "198.51.100.0/24"),
        ],
    )
    .unwrap();
    let uri = config.upstream_uri().unwrap();
    assert_eq!(
        uri.authority().map(|a| a.as_str()),
        Some("origin.internal:9000")
    );
    assert_eq!(config.cap, 42);
    assert_eq!(config.reaper, Duration::from_secs(45));
    assert!(!config.api_json);
    assert_eq!(config.admin_token, "s3cret");
    assert_eq!(config.effective_asset_cap(), 2688);
    assert!(!config.admit_secret_generated);
    assert_eq!(config.admit_secret.as_deref(), Some(secret.as_bytes()));
    assert_eq!(config.ban_paths.len(), 2);
    assert_eq!(config.abuse_allow.len(), 1);
    assert_eq!(config.source("cap"), Source::Env);
    assert_eq!(config.source("max_queue"), Source::Default);
}

#[test]
fn flag_beats_env() {
    let config = start(&["-cap", "7"], &[("CONCERT_CAPACITY", "42")]).unwrap();
    assert_eq!(config.cap, 7);
    assert_eq!(config.source("cap"), Source::Flag);
}

#[test]
fn go_style_flag_forms() {
    for form in [
        &["-cap", "5"][..],
        &["-cap=5"],
        &["--cap", "5"],
        &["--cap=5"],
    ] {
        assert_eq!(start(form, &[]).unwrap().cap, 5, "{form:?}");
    }
    assert!(!start(&["-abuse=false"], &[]).unwrap().abuse);
    assert!(
        start(&["-abuse"], &[("CONCERT_ABUSE", "false")])
            .unwrap()
            .abuse
    );
    assert!(matches!(
        load(&args(&["-abuse", "false"]), &env(&[])),
        Err(ConfigError::Usage(_))
    ));
}

#[test]
fn env_booleans_use_go_spellings() {
    for yes in ["1", "t", "T", "TRUE", "true", "True"] {
        assert!(
            start(&[], &[("CONCERT_SECURE_COOKIE", yes)])
                .unwrap()
                .secure_cookie,
            "{yes}"
        );
    }
    for no in ["0", "f", "F", "FALSE", "false", "False"] {
        assert!(
            !start(&[], &[("CONCERT_API_JSON", no)]).unwrap().api_json,
            "{no}"
        );
    }
    assert!(load_with(&[], &[("CONCERT_API_JSON", "yes")]).is_err());
}

#[test]
fn env_durations_accept_bare_nanoseconds() {
    let config = start(&[], &[("CONCERT_ASSET_WAIT", "1500000000")]).unwrap();
    assert_eq!(config.asset_wait, Duration::from_millis(1500));
    assert!(load_with(&["-asset-wait", "1500000000"], &[]).is_err());
}

#[test]
fn blank_env_values_count_as_unset() {
    let config = start(&[], &[("CONCERT_CAPACITY", "  "), ("CONCERT_BYPASS", "")]).unwrap();
    assert_eq!(config.cap, 434);
    assert_eq!(config.bypass.as_str(), "/favicon.ico");
    assert_eq!(config.source("cap"), Source::Default);
    assert_eq!(start(&["-bypass", ""], &[]).unwrap().bypass.as_str(), "");
}

#[test]
fn unparseable_env_values_are_fatal_and_name_the_variable() {
    let error = load_with(&[], &[("CONCERT_CAPACITY", "lots")]).unwrap_err();
    assert_eq!(error.exit_code(), 1);
    let message = error.to_string();
    assert!(
        message.contains("CONCERT_CAPACITY") && message.contains("\"lots\""),
        "{message}"
    );
    assert!(load_with(&[], &[("CONCERT_REAPER", "soon")]).is_err());
    assert!(load_with(&[], &[("CONCERT_TRUSTED_PROXIES", "nope")]).is_err());
}

#[test]
fn bad_flag_values_name_the_flag_value_and_range() {
    let error = load_with(&["-cap", "0"], &[]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid value \"0\" for -cap: must be a whole number between 1 and 2147483647"
    );
    assert_eq!(error.exit_code(), 1);
    assert!(!error.to_string().contains('\n'));
}

#[test]
fn flags_get_the_file_checks_too() {
    for bad in [
        &["-rate", "-1"][..],
        &["-rate", "NaN"],
        &["-surge", "2000000"],
        &["-skip-url", "javascript:alert(1)"],
        &["-skip-url", "/a b"],
        &["-upstream-timeout", "-1s"],
        &["-fastlane-entry-ttl", "10s"],
        &["-reaper", "1s"],
        &["-token-ttl", "10s"],
        &["-pass", "30s"],
        &["-priority-lane-rank", "8"],
        &["-priority-wait", "2m"],
        &["-portal-session-ttl", "1m"],
        &["-listen", "nowhere"],
        &["-client-proto-header", "bad header"],
        &["-cookie-path", "/; Secure"],
    ] {
        assert!(load_with(bad, &[]).is_err(), "{bad:?} should be rejected");
    }
    assert_eq!(
        load_with(&["-reaper", "0"], &[])
            .unwrap()
            .effective_reaper(),
        ROOM_DEFAULT_TTL
    );
}

#[test]
fn version_wins_before_validation() {
    assert!(matches!(
        load(&args(&["-version", "-upstream", "garbage"]), &env(&[])),
        Ok(Loaded::Version)
    ));
    assert!(matches!(
        load(&args(&["--version"]), &env(&[])),
        Ok(Loaded::Version)
    ));
    assert!(matches!(
        load(&args(&["-version=false"]), &env(&[])),
        Ok(Loaded::Run(_))
    ));
}

#[test]
fn unknown_flags_are_usage_errors() {
    let error = load(&args(&["-nope"]), &env(&[])).unwrap_err();
    assert!(matches!(error, ConfigError::Usage(_)));
    assert_eq!(error.exit_code(), 2);
}

#[test]
fn help_returns_usage() {
    for form in ["-h", "-help", "--help"] {
        match load(&args(&[form]), &env(&[])) {
            Ok(Loaded::Help(usage)) => assert!(usage.contains("--upstream")),
            other => panic!("{form}: {other:?}"),
        }
    }
}

#[test]
fn rejected_configurations() {
    let cases: &[&[&str]] = &[
        &["-upstream", "not a url"],
        &["-upstream", "ftp://files.example"],
        &["-upstream", "http://"],
        &["-cap", "0"],
        &["-cap", "-5"],
        &["-cap", "3000000000"],
        &["-asset-cap", "-1"],
        &["-asset-user-cap-h1", "0"],
        &["-asset-user-cap-h2", "0"],
        &["-asset-wait", "-1s"],
        &["-admit-ttl", "5s"],
        &["-bypass", "/*"],
        &["-assets", "/_room/*"],
        &["-asset-public", "/queue/status"],
        &["-ban-paths", "/_room/stats"],
        &["-ban-paths", "/*"],
        &["-bypass", "/x", "-assets", "/x"],
        &["-assets", "/x", "-ban-paths", "/x"],
        &["-bypass", "/ws", "-stream-paths", "/ws"],
        &["-stream-cap", "0"],
        &["-first-poll-grace", "5s"],
        &["-first-poll-grace", "10s", "-retry-after", "6"],
        &["-ready-grace", "5s"],
        &["-ready-grace", "10s", "-retry-after", "6"],
        &["-ready-grace", "25h"],
        &["-trusted-proxies", "nope"],
        &["-abuse-allow", "10.0.0.0/99"],
        &["-abuse-strikes", "0"],
        &["-abuse-window", "0s"],
        &["-abuse-cooldown", "0s"],
        &["-abuse-max-cooldown", "5m", "-abuse-cooldown", "10m"],
        &["-abuse-max-entries", "0"],
        &["-abuse=false", "-ban-paths", "/.env"],
        &["-bypass", "/static/*", "-assets", "/static/app.js"],
        &["-assets", "/queue/*"],
        &["-tls-domains", "localhost"],
        &["-tls-domains", "example.com", "-tls-email", "nobody"],
        &["-tls-domains", "example.com", "-tls-cache", " "],
        &["-tls-cert", "/etc/concert/site.pem"],
        &["-tls-key", "/etc/concert/site.key"],
        &["-portal-tls-cert", "/etc/concert/portal.pem"],
        &[
            "-tls-cert",
            "c.pem",
            "-tls-key",
            "k.pem",
            "-tls-domains",
            "example.com",
        ],
        &[
            "-tls-domains",
            "example.com",
            "-tls-staging",
            "-tls-directory",
            "https://ca.example/dir",
        ],
        &[
            "-tls-domains",
            "example.com",
            "-tls-directory",
            "http://ca.example/dir",
        ],
        &[
            "-tls-domains",
            "example.com",
            "-tls-directory",
            "ftp://127.0.0.1/dir",
        ],
        &["-tls-domains", "example.com", "-tls-directory", "https://"],
        &["-http-listen", ":80"],
        &["-tls-domains", "example.com", "-http-listen", "80"],
        &["-tls-domains", "example.com", "-hsts", "500ms"],
        &["-html", "/nonexistent/waiting.html"],
        &["-workers", "-1"],
        &["-log-format", "xml"],
    ];
    for case in cases {
        let result = start(case, &[]);
        assert!(
            matches!(result, Err(ConfigError::Invalid(_))),
            "{case:?} should be rejected"
        );
    }
}

#[test]
fn https_settings_that_go_together() {
    let config = start(
        &[
            "-tls-domains",
            "example.com,www.example.com",
            "-tls-directory",
            "http://127.0.0.1:14000/dir",
            "-http-listen",
            ":80",
            "-hsts",
            "720h",
        ],
        &[],
    )
    .unwrap();
    assert!(config.tls_requested());
    assert_eq!(config.hsts, Duration::from_secs(720 * 3600));
    for directory in [
        "https://acme.example/directory",
        "http://localhost:4001/dir",
        "http://[::1]:14000/dir",
    ] {
        start(
            &["-tls-domains", "example.com", "-tls-directory", directory],
            &[],
        )
        .unwrap();
    }
    let config = start(&["-tls-cert", "site.pem", "-tls-key", "site.key"], &[]).unwrap();
    assert!(config.tls_requested() && !config.portal_tls_requested());
    assert!(!start(&[], &[]).unwrap().tls_requested());

    // Each refusal names both settings, as the operator set them.
    let err = start(
        &[
            "-tls-domains",
            "example.com",
            "-tls-staging",
            "-tls-directory",
            "https://ca.example/d",
        ],
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("-tls-directory") && err.contains("-tls-staging"),
        "{err}"
    );
    let err = start(
        &["-tls-domains", "example.com", "-tls-key", "k.pem"],
        &[("CONCERT_TLS_CERT", "c.pem")],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("CONCERT_TLS_CERT") && err.contains("-tls-domains"),
        "{err}"
    );
    let err = start(&["-tls-cert", "c.pem"], &[]).unwrap_err().to_string();
    assert!(
        err.contains("-tls-cert") && err.contains("-tls-key"),
        "{err}"
    );
}

#[test]
fn abuse_numbers_are_only_checked_while_abuse_is_on() {
    let config = start(
        &["-abuse=false", "-abuse-strikes", "0", "-abuse-window", "0s"],
        &[],
    )
    .unwrap();
    assert!(!config.abuse);
}

#[test]
fn admit_secret_rules() {
    assert!(start(&[], &[("CONCERT_ADMIT_SECRET", "too-short")]).is_err());
    let config = start(&[], &[]).unwrap();
    assert!(config.admit_secret_generated);
    let first = config.admit_secret.clone();
    let mut again = config.clone();
    again.validate().unwrap();
    assert_eq!(
        again.admit_secret, first,
        "validation keeps an existing secret"
    );
    assert!(!format!("{config:?}").contains(&format!("{first:?}")));
}

#[test]
fn retry_after_zero_becomes_one() {
    let config = start(&["-retry-after", "0"], &[]).unwrap();
    assert_eq!(config.retry_after, 1);
    let mut built = Config {
        retry_after: 0,
        ..Config::default()
    };
    assert_eq!(built.effective_retry_after(), 1);
    built.validate().unwrap();
    assert_eq!(built.retry_after, 1);
}

#[test]
fn asset_cap_derivation() {
    let config = Config {
        cap: 1200,
        asset_user_cap_h2: 200,
        ..Config::default()
    };
    assert_eq!(config.effective_asset_cap(), 240_000);
    assert_eq!(
        Config {
            asset_cap: 7,
            ..config.clone()
        }
        .effective_asset_cap(),
        7
    );
    let huge = Config {
        cap: i32::MAX as u32,
        asset_user_cap_h2: 128,
        ..Config::default()
    };
    assert_eq!(huge.effective_asset_cap(), i32::MAX as u32);
}

#[test]
fn priority_cap_derivation() {
    assert_eq!(
        Config {
            cap: 2,
            ..Config::default()
        }
        .effective_priority_cap(),
        1
    );
    assert_eq!(
        Config {
            cap: 40,
            ..Config::default()
        }
        .effective_priority_cap(),
        10
    );
    assert_eq!(
        Config {
            priority_cap: 3,
            ..Config::default()
        }
        .effective_priority_cap(),
        3
    );
}

#[test]
fn programmatic_configs_meet_the_same_rules() {
    let mut zero_cap = Config {
        cap: 0,
        ..Config::default()
    };
    assert!(zero_cap.validate().is_err());
    let mut short_reaper = Config {
        reaper: Duration::from_secs(1),
        ..Config::default()
    };
    assert!(short_reaper.validate().is_err());
    let mut conflict = Config {
        bypass: PathList::parse_strict("/static/*").unwrap(),
        assets: PathList::parse_strict("/static/app.js").unwrap(),
        ..Config::default()
    };
    assert!(conflict.validate().is_err());
    let mut bad_upstream = Config {
        upstream: "ftp://x".to_string(),
        ..Config::default()
    };
    assert!(bad_upstream.validate().is_err());
}

#[test]
fn portal_rules_apply_only_when_it_listens() {
    assert!(start(&[], &[("CONCERT_PORTAL_PASS", "short")]).is_err());
    assert!(start(&["-portal-listen", ""], &[("CONCERT_PORTAL_PASS", "short")]).is_ok());
    let long = "p".repeat(16);
    assert!(
        start(&[], &[("CONCERT_PORTAL_PASS", &long)])
            .unwrap()
            .portal_listens()
    );
    assert!(start(&["-portal-allow", ""], &[("CONCERT_PORTAL_PASS", &long)]).is_err());
    assert!(start(&["-portal-allow", ""], &[]).is_ok());
}

#[test]
fn data_dir_precedence() {
    assert_eq!(load_with(&[], &[]).unwrap().data_dir, DEFAULT_DATA_DIR);
    assert_eq!(
        load_with(&[], &[("CONCERT_DATA_DIR", "/srv/c")])
            .unwrap()
            .data_dir,
        "/srv/c"
    );
    assert_eq!(
        load_with(&[], &[("CONCERT_DATA_DIR", "")])
            .unwrap()
            .data_dir,
        ""
    );
    let flagged = load_with(&["-data-dir", ""], &[("CONCERT_DATA_DIR", "/srv/c")]).unwrap();
    assert_eq!(flagged.data_dir, "");
}

#[test]
fn extra_options() {
    let config = load_with(
        &["-demo", "-log-format", "json"],
        &[("CONCERT_WORKERS", "3")],
    )
    .unwrap();
    assert!(config.demo);
    assert_eq!(config.log_format, LogFormat::Json);
    assert_eq!(config.workers, 3);
    // The demo keeps no state unless given a directory.
    assert_eq!(config.data_dir, "");
    assert_eq!(
        load_with(&["-demo", "-data-dir", "/tmp/d"], &[])
            .unwrap()
            .data_dir,
        "/tmp/d"
    );
    assert_eq!(
        load_with(&["-demo"], &[("CONCERT_DATA_DIR", "/tmp/e")])
            .unwrap()
            .data_dir,
        "/tmp/e"
    );
    assert_eq!(load_with(&[], &[]).unwrap().data_dir, DEFAULT_DATA_DIR);
    assert_eq!(
        load_with(&[], &[("TOKIO_WORKER_THREADS", "6")])
            .unwrap()
            .workers,
        6
    );
    assert_eq!(
        load_with(&[], &[("TOKIO_WORKER_THREADS", "x")])
            .unwrap()
            .workers,
        0
    );
    assert_eq!(
        load_with(&["-workers", "2"], &[("TOKIO_WORKER_THREADS", "6")])
            .unwrap()
            .workers,
        2
    );
    assert!(load_with(&[], &[("CONCERT_DEMO", "maybe")]).is_err());
}

#[test]
fn metrics_path_default_forms_and_precedence() {
    let metrics =
        |list: &[&str], vars: &[(&str, &str)]| load_with(list, vars).map(|c| c.metrics_path);
    assert_eq!(metrics(&[], &[]).unwrap().as_deref(), Some("/metrics"));
    assert_eq!(
        metrics(&["-metrics-path=/internal/prom/"], &[])
            .unwrap()
            .as_deref(),
        Some("/internal/prom")
    );
    assert_eq!(
        metrics(&[], &[("CONCERT_METRICS_PATH", "/ops/metrics")])
            .unwrap()
            .as_deref(),
        Some("/ops/metrics")
    );
    assert_eq!(
        metrics(&["-metrics-path", "/m"], &[("CONCERT_METRICS_PATH", "off")])
            .unwrap()
            .as_deref(),
        Some("/m")
    );
    assert_eq!(metrics(&["-metrics-path", "off"], &[]).unwrap(), None);
    assert_eq!(metrics(&["-metrics-path", ""], &[]).unwrap(), None);
    assert_eq!(
        metrics(&[], &[("CONCERT_METRICS_PATH", "off")]).unwrap(),
        None
    );
}

#[test]
fn metrics_path_errors_name_the_flag_and_value() {
    let refused = |list: &[&str], vars: &[(&str, &str)], name: &str, value: &str| {
        let error = load_with(list, vars).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, ConfigError::Invalid(_)), "{message}");
        assert!(message.contains(name), "{message}");
        assert!(message.contains(&format!("{value:?}")), "{message}");
    };
    for value in [
        "metrics",
        "/",
        "/a/../metrics",
        "/queue/status",
        "/_room/anything",
        "/metrics?x=1",
    ] {
        refused(&["-metrics-path", value], &[], "-metrics-path", value);
    }
    refused(
        &[],
        &[("CONCERT_METRICS_PATH", "/_concert")],
        "CONCERT_METRICS_PATH",
        "/_concert",
    );
}

#[test]
fn file_layer_precedence_and_baseline() {
    let mut config = load_with(
        &["-cap", "7", "-reaper", "40s", "-abuse-cooldown", "4m"],
        &[
            ("CONCERT_CAPACITY", "42"),
            ("CONCERT_MAX_QUEUE", "11"),
            ("CONCERT_ABUSE_COOLDOWN", "3m"),
        ],
    )
    .unwrap();
    let baseline = config.clone();
    config.set_json("cap", &json!(77)).unwrap();
    config.set_json("abuse_cooldown", &json!("7m")).unwrap();
    config.validate().unwrap();
    assert_eq!(config.cap, 77);
    assert_eq!(config.abuse_cooldown, Duration::from_secs(420));
    assert_eq!(config.reaper, Duration::from_secs(40));
    assert_eq!(config.max_queue, 11);
    assert_eq!(config.retry_after, 5);
    assert_eq!(config.source("cap"), Source::File);
    assert_eq!(config.source("reaper"), Source::Flag);
    assert_eq!(config.source("max_queue"), Source::Env);
    assert_eq!(config.source("retry_after"), Source::Default);
    assert_eq!(baseline.cap, 7);
    config.reset_from("cap", &baseline).unwrap();
    assert_eq!(config.cap, 7);
    assert_eq!(config.source("cap"), Source::Flag);
}

#[test]
fn set_json_refuses_bad_values_without_changing_anything() {
    let mut config = Config::default();
    let cases = [
        ("cap", json!("lots")),
        ("cap", json!(0)),
        ("cap", json!(9.5)),
        ("cap", json!(3_000_000_000u64)),
        ("rate", json!(-1)),
        ("reaper", json!("soon")),
        ("reaper", json!("1s")),
        ("reaper", json!(36)),
        ("token_ttl", json!("10s")),
        ("upstream", json!("ftp://x")),
        ("abuse", json!("yes")),
        ("bypass", json!("a")),
        ("bypass", json!("/a,/a")),
        ("tls_domains", json!("example.com,EXAMPLE.com")),
        ("trusted_proxies", json!("10.0.0.1 10.0.0.2")),
        ("listen", json!(":9999")),
        ("nope", json!(1)),
    ];
    for (key, value) in cases {
        assert!(config.set_json(key, &value).is_err(), "{key} = {value}");
    }
    let fresh = Config::default();
    for def in SETTINGS {
        assert_eq!(
            config.value_text(def.key),
            fresh.value_text(def.key),
            "{}",
            def.key
        );
        assert_eq!(config.source(def.key), Source::Default);
    }
}

#[test]
fn set_json_restart_only_message_names_the_env_var() {
    let error = Config::default()
        .set_json("listen", &json!(":9999"))
        .unwrap_err();
    assert!(error.contains("CONCERT_LISTEN"), "{error}");
}

#[test]
fn reset_refuses_restart_only_keys_as_set_does() {
    let baseline = Config::default();
    let mut config = baseline.clone();
    let error = config.reset_from("portal_listen", &baseline).unwrap_err();
    assert!(error.contains("CONCERT_PORTAL_LISTEN"), "{error}");
    assert!(config.reset_from("nope", &baseline).is_err());
}

#[test]
fn set_json_accepts_typed_values_and_trims_strings() {
    let mut config = Config::default();
    config.set_json("cap", &json!(9)).unwrap();
    config.set_json("abuse_strikes", &json!(7)).unwrap();
    config.set_json("ban_paths", &json!(" /.env ")).unwrap();
    config.set_json("abuse_window", &json!("2m")).unwrap();
    config.set_json("rate", &json!(0.5)).unwrap();
    config.set_json("abuse", &json!(true)).unwrap();
    config.set_json("first_poll_grace", &json!("45s")).unwrap();
    config.set_json("token_ttl", &json!("0s")).unwrap();
    config
        .set_json("upstream", &json!(" https://origin.example "))
        .unwrap();
    config.validate().unwrap();
    assert_eq!(config.value_json("cap"), Some(json!(9)));
    assert_eq!(config.value_json("abuse_window"), Some(json!("2m0s")));
    assert_eq!(config.value_json("ban_paths"), Some(json!("/.env")));
    assert_eq!(config.value_json("rate"), Some(json!(0.5)));
    assert_eq!(config.value_json("abuse"), Some(json!(true)));
    assert_eq!(config.upstream, "https://origin.example");
    assert_eq!(config.first_poll_grace, Duration::from_secs(45));
    assert_eq!(config.effective_token_ttl(), Duration::from_secs(300));
}

#[test]
fn ready_grace_comes_from_the_flag_the_environment_or_off() {
    let from_flag = start(&["-ready-grace", "1m"], &[]).unwrap();
    assert_eq!(from_flag.ready_grace, Duration::from_secs(60));
    let from_env = start(&[], &[("CONCERT_READY_GRACE", "45s")]).unwrap();
    assert_eq!(from_env.ready_grace, Duration::from_secs(45));
    let off = start(&["-ready-grace=0"], &[("CONCERT_READY_GRACE", "45s")]).unwrap();
    assert_eq!(off.ready_grace, Duration::ZERO);
    let err = start(&["-ready-grace", "5s"], &[]).unwrap_err().to_string();
    assert!(err.contains("-ready-grace") && err.contains("5s"), "{err}");
    let err = start(&["-ready-grace", "10s", "-retry-after", "6"], &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("twice -retry-after"), "{err}");
}

#[test]
fn whole_config_rules_catch_file_values() {
    let mut config = Config::default();
    config.set_json("first_poll_grace", &json!("10s")).unwrap();
    config.set_json("retry_after", &json!(6)).unwrap();
    assert!(config.validate().is_err());
    let mut config = Config::default();
    config.set_json("ready_grace", &json!("10s")).unwrap();
    config.set_json("retry_after", &json!(6)).unwrap();
    assert!(config.validate().is_err());
    let mut config = Config::default();
    config.set_json("bypass", &json!("/static/*")).unwrap();
    config.set_json("assets", &json!("/static/app.js")).unwrap();
    assert!(config.validate().is_err());
    let mut config = Config::default();
    config.set_json("abuse", &json!(false)).unwrap();
    config.set_json("ban_paths", &json!("/.env")).unwrap();
    assert!(config.validate().is_err());
}

#[test]
fn route_table_and_ban_matcher_from_config() {
    let config = start(
        &[
            "-bypass",
            "/webhooks/*,/robots.txt",
            "-assets",
            "/static/*",
            "-ban-paths",
            "/.env",
        ],
        &[],
    )
    .unwrap();
    let table = config.route_table().unwrap();
    assert_eq!(table.classify("/webhooks/stripe"), Some(RouteKind::Bypass));
    assert_eq!(table.classify("/robots.txt"), Some(RouteKind::Bypass));
    assert_eq!(table.classify("/static/a.js"), Some(RouteKind::Asset));
    assert_eq!(table.classify("/gated"), None);
    assert!(config.ban_path_matcher().matches("/.env"));
}

#[test]
fn a_relative_path_entry_from_a_flag_or_the_environment_is_an_error() {
    let error = start(&["-bypass", "robots.txt,/favicon.ico"], &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("-bypass") && error.contains("robots.txt"),
        "{error}"
    );
    let error = start(&[], &[("CONCERT_BAN_PATHS", ".env,/wp-login.php")])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("CONCERT_BAN_PATHS") && error.contains(".env"),
        "{error}"
    );
}

proptest! {
    #[test]
    fn load_never_panics(list in proptest::collection::vec("(-{0,2}[a-z-]{0,12}(=[ -~]{0,8})?|[ -~]{0,10})", 0..6)) {
        let _ = load(&list, &HashMap::new());
    }

    #[test]
    fn load_never_panics_on_real_flags(
        picks in proptest::collection::vec((0..SETTINGS.len(), "[ -~]{0,12}", any::<bool>()), 0..5)
    ) {
        let mut list = Vec::new();
        for (index, value, inline) in picks {
            let flag = SETTINGS[index].flag;
            if inline {
                list.push(format!("{flag}={value}"));
            } else {
                list.push(flag.to_string());
                list.push(value);
            }
        }
        if let Ok(Loaded::Run(mut config)) = load(&list, &HashMap::new()) {
            let _ = config.validate();
        }
    }

    #[test]
    fn env_values_never_panic(index in 0..SETTINGS.len(), value in "\\PC{0,16}") {
        let vars = HashMap::from([(SETTINGS[index].env.to_string(), value)]);
        let _ = load(&[], &vars);
    }
}

#[test]
fn upstream_credentials_are_never_shown() {
    let shown = |upstream: &str| {
        let config = start(&["-upstream", upstream], &[]).unwrap();
        (config.upstream_shown(), config.upstream_has_userinfo())
    };
    assert_eq!(
        shown("http://admin:s3cret@origin.internal:9000/app?x=1"),
        ("http://origin.internal:9000/app?x=1".to_string(), true)
    );
    assert_eq!(
        shown("https://token@[2001:db8::1]:8443"),
        ("https://[2001:db8::1]:8443".to_string(), true)
    );
    assert_eq!(
        shown("http://origin.internal:9000/path@v2"),
        ("http://origin.internal:9000/path@v2".to_string(), false)
    );
    assert_eq!(
        shown("http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080".to_string(), false)
    );
}

#[test]
fn public_upstream_is_scheme_host_and_port() {
    let public = |upstream: &str| {
        start(&["-upstream", upstream], &[])
            .unwrap()
            .upstream_public()
    };
    for (upstream, shown) in [
        (
            "http://admin:s3cret@origin.internal:9000/app?key=k#x",
            "http://origin.internal:9000",
        ),
        (
            "https://token@[2001:db8::1]:8443/",
            "https://[2001:db8::1]:8443",
        ),
        (
            "http://origin.internal/path@v2?a=@b",
            "http://origin.internal",
        ),
        ("http://127.0.0.1:8080?token=t", "http://127.0.0.1:8080"),
        ("https://origin.example", "https://origin.example"),
    ] {
        assert_eq!(public(upstream), shown, "{upstream}");
    }
}

#[test]
fn whole_config_errors_name_settings_as_they_were_given() {
    let error = |list: &[&str], vars: &[(&str, &str)]| match start(list, vars) {
        Err(error) => error.to_string(),
        Ok(_) => panic!("{list:?} {vars:?} should be refused"),
    };
    // From the environment: the variable, never a flag the operator did not type.
    let from_env = [
        (
            vec![("CONCERT_ABUSE_STRIKES", "0")],
            vec!["CONCERT_ABUSE_STRIKES"],
        ),
        (
            vec![("CONCERT_ABUSE_WINDOW", "0s")],
            vec!["CONCERT_ABUSE_WINDOW"],
        ),
        (
            vec![
                ("CONCERT_ABUSE_MAX_COOLDOWN", "1m"),
                ("CONCERT_ABUSE_COOLDOWN", "5m"),
            ],
            vec!["CONCERT_ABUSE_MAX_COOLDOWN", "CONCERT_ABUSE_COOLDOWN"],
        ),
        (
            vec![
                ("CONCERT_FIRST_POLL_GRACE", "10s"),
                ("CONCERT_RETRY_AFTER", "6"),
            ],
            vec!["CONCERT_FIRST_POLL_GRACE", "CONCERT_RETRY_AFTER"],
        ),
        (
            vec![("CONCERT_BAN_PATHS", "/.env"), ("CONCERT_ABUSE", "false")],
            vec!["CONCERT_BAN_PATHS", "CONCERT_ABUSE"],
        ),
        (
            vec![("CONCERT_BYPASS", "/x"), ("CONCERT_ASSETS", "/x")],
            vec!["CONCERT_BYPASS", "CONCERT_ASSETS"],
        ),
        (
            vec![("CONCERT_HTML_FILE", "/nonexistent/page.html")],
            vec!["CONCERT_HTML_FILE"],
        ),
    ];
    for (vars, names) in from_env {
        let message = error(&[], &vars);
        for name in names {
            assert!(message.contains(name), "{name} in {message:?}");
        }
        assert!(!message.contains(" -"), "no flag in {message:?}");
    }
    // Mixed: each setting by its own source.
    let message = error(&["-assets", "/x"], &[("CONCERT_BYPASS", "/x")]);
    assert!(
        message.contains("CONCERT_BYPASS") && message.contains("-assets"),
        "{message}"
    );
    let message = error(&["-abuse-strikes", "0"], &[]);
    assert!(message.contains("for -abuse-strikes"), "{message}");
}

#[test]
fn a_bad_env_value_stops_the_start_even_under_a_flag() {
    for (flag, vars) in [
        (&["-cap", "5"][..], [("CONCERT_CAPACITY", "lots")]),
        (&["-abuse=false"], [("CONCERT_ABUSE", "maybe")]),
        (&["-workers", "2"], [("CONCERT_WORKERS", "-1")]),
        (&["-log-format", "json"], [("CONCERT_LOG_FORMAT", "xml")]),
        (&["-demo=false"], [("CONCERT_DEMO", "sometimes")]),
    ] {
        let (name, value) = vars[0];
        match load_with(flag, &vars) {
            Err(error) => {
                let message = error.to_string();
                assert!(
                    message.contains(name) && message.contains(value),
                    "{message}"
                );
            }
            Ok(_) => panic!("{name}={value} under {flag:?} was accepted"),
        }
    }
    // A good env value under a flag: the flag wins, as before.
    let config = load_with(&["-cap", "5"], &[("CONCERT_CAPACITY", "7")]).unwrap();
    assert_eq!(config.cap, 5);
    assert_eq!(config.source("cap"), Source::Flag);
}

#[test]
fn body_sizes_take_plain_bytes_or_power_of_1024_suffixes() {
    let config = start(&["-max-body", "10m"], &[]).unwrap();
    assert_eq!(config.max_body, 10 << 20);
    for (text, bytes) in [
        ("0", 0),
        ("65536", 65_536),
        ("64k", 65_536),
        ("2G", 2 << 30),
    ] {
        let config = start(&[], &[("CONCERT_MAX_BODY", text)]).unwrap();
        assert_eq!(config.max_body, bytes, "{text}");
    }
    for bad in [
        "",
        "m",
        "10mb",
        "1.5m",
        "-1",
        "99999999999999999999",
        "20000000000g",
    ] {
        let error = start(&["-max-body", bad], &[]).unwrap_err().to_string();
        assert!(error.contains("-max-body"), "{bad}: {error}");
    }
    assert_eq!(Config::default().max_body, 64 << 20);
    let mut config = Config::default();
    config.set_json("max_body", &json!("1k")).unwrap();
    assert_eq!(config.max_body, 1024);
    config.set_json("max_body", &json!(5000)).unwrap();
    assert_eq!(config.max_body, 5000);
    assert!(config.set_json("max_body", &json!(-1)).is_err());
    assert!(config.set_json("max_body", &json!(true)).is_err());
}

#[test]
fn upload_paths_and_deadline_have_their_defaults() {
    let config = start(&[], &[]).unwrap();
    assert_eq!(config.upload_timeout, Duration::from_secs(120));
    assert!(config.unbuffered_upload_paths.is_empty());
    let config = start(
        &[
            "-unbuffered-upload-paths",
            "/upload,/media/*",
            "-upload-timeout",
            "0",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(config.unbuffered_upload_paths.as_str(), "/upload,/media/*");
    assert_eq!(config.upload_timeout, Duration::ZERO);
    assert!(start(&["-unbuffered-upload-paths", "/_room/cap"], &[]).is_err());
}
