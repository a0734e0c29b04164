//! The command line: Go-style flag forms (`-cap 5`, `-cap=5`, `--cap 5`, bare `-abuse`,
//! `-abuse=false`) rewritten into the `--name=value` form and parsed by a clap command built from
//! the settings table, which also renders the usage text.

use std::collections::HashMap;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ColorChoice, Command};

use super::ConfigError;
use super::table::{GROUPS, SETTINGS, ValueType};

/// A flag outside the settings table (not a settings-file key).
pub struct ExtraFlag {
    /// Flag name without its dash.
    pub name: &'static str,
    pub env: Option<&'static str>,
    pub is_bool: bool,
    pub value_name: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

/// Restart-only options that never appear in settings.json.
pub const EXTRA_FLAGS: &[ExtraFlag] = &[
    ExtraFlag {
        name: "data-dir",
        env: Some("CONCERT_DATA_DIR"),
        is_bool: false,
        value_name: "DIR",
        default: "/var/lib/concert/data",
        help: "Directory for settings.json, bans, the queue snapshot and history. Empty turns persistence off.",
    },
    ExtraFlag {
        name: "demo",
        env: Some("CONCERT_DEMO"),
        is_bool: true,
        value_name: "BOOL",
        default: "false",
        help: "Run a built-in demo origin.",
    },
    ExtraFlag {
        name: "log-format",
        env: Some("CONCERT_LOG_FORMAT"),
        is_bool: false,
        value_name: "FORMAT",
        default: "text",
        help: "Process log format: text or json.",
    },
    ExtraFlag {
        name: "workers",
        env: Some("CONCERT_WORKERS"),
        is_bool: false,
        value_name: "N",
        default: "0",
        help: "Runtime worker threads. 0 uses TOKIO_WORKER_THREADS when set, else one per core.",
    },
    ExtraFlag {
        name: "metrics-path",
        env: Some("CONCERT_METRICS_PATH"),
        is_bool: false,
        value_name: "PATH",
        default: "/metrics",
        help: "Path on the public listener answered with Prometheus metrics, unless a path list names it (they are always at /_room/metrics too). off leaves it to the origin.",
    },
    ExtraFlag {
        name: "version",
        env: None,
        is_bool: true,
        value_name: "BOOL",
        default: "false",
        help: "Print the version and exit.",
    },
];

const OTHER_HEADING: &str = "Process";

/// What the command line asked for.
pub(super) enum FlagParse {
    Help,
    /// Flags given explicitly, by name without dash; the last occurrence wins.
    Values(HashMap<String, String>),
}

fn is_bool_flag(name: &str) -> Option<bool> {
    SETTINGS
        .iter()
        .find(|def| def.flag_name() == name)
        .map(|def| def.ty == ValueType::Bool)
        .or_else(|| {
            EXTRA_FLAGS
                .iter()
                .find(|flag| flag.name == name)
                .map(|flag| flag.is_bool)
        })
}

/// Rewrites Go-style arguments into clap's `--name[=value]` form. A value flag without `=`
/// takes the next argument verbatim (even one starting with `-`, as Go does); a boolean flag
/// never takes the next argument. Returns the rewritten arguments and whether help was asked.
fn rewrite_args(args: &[String]) -> (Vec<String>, bool) {
    let mut rewritten = Vec::with_capacity(args.len());
    let mut help = false;
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        index += 1;
        if arg == "--" {
            rewritten.extend(args[index - 1..].iter().cloned());
            break;
        }
        let body = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .filter(|body| !body.is_empty() && !body.starts_with(['-', '=']));
        let Some(body) = body else {
            // Not a flag: clap reports it as an unexpected argument.
            rewritten.push(arg.clone());
            continue;
        };
        let (name, inline_value) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        if name == "h" || name == "help" {
            help = true;
            continue;
        }
        match (is_bool_flag(name), inline_value) {
            (Some(false), None) => match args.get(index) {
                Some(value) => {
                    rewritten.push(format!("--{name}={value}"));
                    index += 1;
                }
                None => rewritten.push(format!("--{name}")),
            },
            _ => rewritten.push(format!("--{body}")),
        }
    }
    (rewritten, help)
}

fn value_name(ty: ValueType) -> &'static str {
    match ty {
        ValueType::U32 | ValueType::U64 => "N",
        ValueType::Bytes => "SIZE",
        ValueType::F64 => "NUMBER",
        ValueType::Bool => "BOOL",
        ValueType::Dur => "DURATION",
        ValueType::Str => "TEXT",
        ValueType::Cidr => "CIDRS",
        ValueType::Paths => "PATHS",
        ValueType::Hosts => "HOSTS",
    }
}

fn flag_arg(name: &'static str, is_bool: bool, value_name: &'static str, help: String) -> Arg {
    let arg = Arg::new(name)
        .long(name)
        .value_name(value_name)
        .action(ArgAction::Set)
        .value_parser(clap::value_parser!(String))
        .help(help);
    if is_bool {
        arg.num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
    } else {
        arg.num_args(1).allow_hyphen_values(true)
    }
}

fn shown(default: &str) -> &str {
    if default.is_empty() { "\"\"" } else { default }
}

/// The clap command for every flag. Defaults live in `Config`, not in clap, so clap reports
/// only what was given on the command line.
pub fn command() -> Command {
    let mut command = Command::new("concert")
        .about("FIFO waiting-room reverse proxy")
        .color(ColorChoice::Never)
        .max_term_width(100)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .args_override_self(true)
        .after_help(
            "Flags take one or two dashes and a value after a space or '=' (-cap 5, --cap=5). \
             Booleans take '=' only (-abuse=false); a bare boolean flag means true. \
             Durations use Go syntax (300ms, 30s, 1h30m).",
        );
    for group in GROUPS {
        for def in SETTINGS.iter().filter(|def| def.group == group) {
            let restart = if def.restart {
                " Restart to change."
            } else {
                ""
            };
            let help = format!(
                "{}{restart} [default: {}] [env: {}]",
                def.help,
                shown(def.default),
                def.env
            );
            let arg = flag_arg(
                def.flag_name(),
                def.ty == ValueType::Bool,
                value_name(def.ty),
                help,
            )
            .help_heading(group);
            command = command.arg(arg);
        }
    }
    for flag in EXTRA_FLAGS {
        let env = flag
            .env
            .map(|env| format!(" [env: {env}]"))
            .unwrap_or_default();
        let help = format!("{} [default: {}]{env}", flag.help, shown(flag.default));
        command = command.arg(
            flag_arg(flag.name, flag.is_bool, flag.value_name, help).help_heading(OTHER_HEADING),
        );
    }
    command.arg(
        Arg::new("help")
            .short('h')
            .long("help")
            .action(ArgAction::Help)
            .help("Print this help and exit.")
            .help_heading(OTHER_HEADING),
    )
}

/// The usage text printed for `-h`.
pub(crate) fn usage() -> String {
    command().render_help().to_string()
}

/// Names a command-line mistake the way the operator typed it (clap only sees the rewritten
/// `--name` forms), in the words Go's flag package used for the same mistakes.
fn usage_message(error: &clap::Error, args: &[String]) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    const HINT: &str = "Run 'concert -help' to list the flags.";
    let context = |kind| match error.get(kind) {
        Some(ContextValue::String(text)) => Some(text.as_str()),
        _ => None,
    };
    let invalid_arg = context(ContextKind::InvalidArg);
    match (error.kind(), invalid_arg) {
        (ErrorKind::UnknownArgument, Some(arg)) => match arg.strip_prefix("--") {
            Some(body) => {
                let name = body.split_once('=').map_or(body, |(name, _)| name);
                let secret = if SECRET_FLAGS.contains(&name) {
                    let env = format!("CONCERT_{}", name.to_ascii_uppercase().replace('-', "_"));
                    format!(" (secrets are read only from the environment: set {env})")
                } else {
                    String::new()
                };
                format!(
                    "flag provided but not defined: {}{secret}\n{HINT}",
                    as_typed(name, args)
                )
            }
            None if FAST_LANE_COMMANDS.contains(&arg) => format!(
                "{arg:?} is a command: give it first, before any flag (concert {arg} …)\n{HINT}"
            ),
            None => format!("unexpected argument {arg:?}: Concert takes only flags\n{HINT}"),
        },
        (ErrorKind::InvalidValue, Some(arg))
            if context(ContextKind::InvalidValue).is_some_and(str::is_empty) =>
        {
            let name = arg
                .trim_start_matches('-')
                .split([' ', '='])
                .next()
                .unwrap_or_default();
            format!("flag needs an argument: {}\n{HINT}", as_typed(name, args))
        }
        _ => error.render().to_string().trim_end().to_string(),
    }
}

/// The fast lane's commands (`concert example …`, `concert reconcile …`) run only when they are
/// the first argument; named after a flag, they are told where to go rather than given a
/// flag error.
const FAST_LANE_COMMANDS: &[&str] = &["example", "reconcile"];

/// Secrets that have no flag on purpose (a flag's value shows in the process list).
const SECRET_FLAGS: &[&str] = &[
    "admin-token",
    "admit-secret",
    "admit-secret-previous",
    "portal-pass",
];

/// `name` with the dashes the operator put before it (`-name` when it cannot be found).
fn as_typed(name: &str, args: &[String]) -> String {
    args.iter()
        .take_while(|arg| *arg != "--")
        .find_map(|arg| {
            let body = arg.trim_start_matches('-');
            let dashes = arg.len() - body.len();
            let typed_name = body.split_once('=').map_or(body, |(name, _)| name);
            (matches!(dashes, 1 | 2) && typed_name == name)
                .then(|| format!("{}{name}", &arg[..dashes]))
        })
        .unwrap_or_else(|| format!("-{name}"))
}

pub(super) fn parse_flags(args: &[String]) -> Result<FlagParse, ConfigError> {
    let (rewritten, help) = rewrite_args(args);
    if help {
        return Ok(FlagParse::Help);
    }
    let command = command();
    let names: Vec<&'static str> = SETTINGS
        .iter()
        .map(|def| def.flag_name())
        .chain(EXTRA_FLAGS.iter().map(|flag| flag.name))
        .collect();
    let matches = command
        .try_get_matches_from(std::iter::once("concert".to_string()).chain(rewritten))
        .map_err(|error| ConfigError::Usage(usage_message(&error, args)))?;
    let mut values = HashMap::new();
    for name in names {
        if matches.value_source(name) == Some(ValueSource::CommandLine)
            && let Some(value) = matches.get_one::<String>(name)
        {
            values.insert(name.to_string(), value.clone());
        }
    }
    Ok(FlagParse::Values(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn values(list: &[&str]) -> HashMap<String, String> {
        match parse_flags(&args(list)) {
            Ok(FlagParse::Values(values)) => values,
            Ok(FlagParse::Help) => panic!("unexpected help"),
            Err(error) => panic!("unexpected error: {error}"),
        }
    }

    #[test]
    fn command_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn accepts_every_go_style_form() {
        for form in [
            &["-cap", "5"][..],
            &["-cap=5"],
            &["--cap", "5"],
            &["--cap=5"],
        ] {
            assert_eq!(
                values(form).get("cap").map(String::as_str),
                Some("5"),
                "{form:?}"
            );
        }
    }

    #[test]
    fn boolean_flags_take_equals_only() {
        assert_eq!(
            values(&["-abuse"]).get("abuse").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            values(&["-abuse=false"]).get("abuse").map(String::as_str),
            Some("false")
        );
        assert_eq!(
            values(&["--abuse=0"]).get("abuse").map(String::as_str),
            Some("0")
        );
        assert!(matches!(
            parse_flags(&args(&["-abuse", "false"])),
            Err(ConfigError::Usage(_))
        ));
    }

    #[test]
    fn value_flags_take_the_next_argument_verbatim() {
        assert_eq!(
            values(&["-cap", "-5"]).get("cap").map(String::as_str),
            Some("-5")
        );
        assert_eq!(
            values(&["-skip-url", "-h"])
                .get("skip-url")
                .map(String::as_str),
            Some("-h")
        );
        assert_eq!(
            values(&["-bypass", ""]).get("bypass").map(String::as_str),
            Some("")
        );
        assert_eq!(
            values(&["-bypass="]).get("bypass").map(String::as_str),
            Some("")
        );
        assert_eq!(
            values(&["-upstream=http://x/?a=b"])
                .get("upstream")
                .map(String::as_str),
            Some("http://x/?a=b")
        );
    }

    #[test]
    fn last_occurrence_wins() {
        assert_eq!(
            values(&["-cap", "5", "-cap=6"])
                .get("cap")
                .map(String::as_str),
            Some("6")
        );
    }

    #[test]
    fn unset_flags_are_absent() {
        let given = values(&["-cap", "5"]);
        assert_eq!(given.len(), 1);
        assert!(values(&[]).is_empty());
    }

    #[test]
    fn help_in_any_spelling() {
        for form in ["-h", "-help", "--help", "--h"] {
            assert!(
                matches!(
                    parse_flags(&args(&["-cap", "1", form])),
                    Ok(FlagParse::Help)
                ),
                "{form}"
            );
        }
        assert!(usage().contains("--cap <N>"));
        assert!(usage().contains("CONCERT_CAPACITY"));
    }

    #[test]
    fn usage_errors() {
        for bad in [
            &["-nope"][..],
            &["-cap"],
            &["stray"],
            &["--", "x"],
            &["---cap", "5"],
            &["-"],
        ] {
            assert!(
                matches!(parse_flags(&args(bad)), Err(ConfigError::Usage(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_flags(&args(&["--"])),
            Ok(FlagParse::Values(_))
        ));
    }
}
