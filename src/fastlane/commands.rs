//! The fast lane's commands, run instead of the server when the first argument names one:
//!
//! - `concert example fastlane|networks` prints a starting file: valid JSON on stdout (both
//!   files refuse unknown keys, so there is no room for comments in them) and what each key
//!   means on stderr;
//! - `concert reconcile [-data-dir D] [-networks-config F] <fingerprint> [hash]` settles the
//!   record of a payment whose outcome is unknown, from the chain's final state. It takes the
//!   settlement journal's lock, so it refuses to run beside a serving Concert, and it never
//!   signs or broadcasts anything;
//! - `concert client [--nft RULE [--token ID]]` buys a pass from a Concert site (see
//!   [`super::client`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use super::canonical::is_settlement_id;
use super::gateway::journal::{JOURNAL_DIR, JOURNAL_FILE};
use super::gateway::{MechanismRequest, SettlementJournal, SettlementRecord, SettlementState};
use super::mechanism::Mechanism;
use super::settings::{
    FASTLANE_EXAMPLE_NOTES, NETWORKS_EXAMPLE_NOTES, NETWORKS_FILE, example_fastlane,
    example_networks, is_mainnet, parse_networks, validate_networks,
};
use crate::config::{DEFAULT_DATA_DIR, EnvSource};

/// How long `reconcile` waits for the chain's answer.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(120);

const EXAMPLE_USAGE: &str = "usage: concert example fastlane|networks";
const RECONCILE_USAGE: &str = "usage: concert reconcile [-data-dir DIR] [-networks-config FILE] <fingerprint> [transaction-hash]\n\
Records the final chain state of a payment whose settlement is unknown. Stop concert first: the\n\
settlement journal has one owner. Nothing is signed or sent to the chain.";

/// What a command ended with: the exit status and the text for stdout and stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// 0 done, 1 failed, 2 the command line was wrong.
    pub status: u8,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub(crate) fn done(stdout: impl Into<String>, stderr: impl Into<String>) -> CommandOutput {
        CommandOutput {
            status: 0,
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    pub(crate) fn failed(message: impl Into<String>) -> CommandOutput {
        CommandOutput {
            status: 1,
            stdout: String::new(),
            stderr: format!("concert: {}\n", message.into()),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> CommandOutput {
        CommandOutput {
            status: 2,
            stdout: String::new(),
            stderr: format!("concert: {}\n", message.into()),
        }
    }

    /// Prints both texts and gives the exit code.
    pub fn finish(self) -> ExitCode {
        print!("{}", self.stdout);
        eprint!("{}", self.stderr);
        ExitCode::from(self.status)
    }
}

/// The first argument, when it names a fast-lane command.
pub fn command_name(args: &[String]) -> Option<&str> {
    match args.first().map(String::as_str) {
        Some(name @ ("example" | "reconcile" | "client")) => Some(name),
        _ => None,
    }
}

/// Runs the command `args` names (see [`command_name`]); `None` when they name none. The
/// factory builds the mechanism `reconcile` asks (see [`super::gateway::build_mechanisms`]).
pub fn run<F>(args: &[String], env: &dyn EnvSource, factory: F) -> Option<CommandOutput>
where
    F: FnOnce(&MechanismRequest<'_>) -> Result<Arc<dyn Mechanism>, String>,
{
    let rest = args.get(1..).unwrap_or_default();
    match command_name(args)? {
        "example" => Some(example(rest)),
        "client" => Some(super::client::run(rest, env)),
        _ => Some(match ReconcileArgs::parse(rest, env) {
            Ok(Some(parsed)) => {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return Some(CommandOutput::failed(format!("async runtime: {e}"))),
                };
                match runtime.block_on(reconcile(&parsed, factory, RECONCILE_TIMEOUT)) {
                    Ok(message) => CommandOutput::done(format!("{message}\n"), ""),
                    Err(message) => CommandOutput::failed(message),
                }
            }
            Ok(None) => CommandOutput::done(format!("{RECONCILE_USAGE}\n"), ""),
            Err(message) => CommandOutput::usage(format!("{message}\n{RECONCILE_USAGE}")),
        }),
    }
}

/// `concert example fastlane|networks`.
pub fn example(args: &[String]) -> CommandOutput {
    match args {
        [which] if which == "fastlane" => {
            CommandOutput::done(example_fastlane(), FASTLANE_EXAMPLE_NOTES)
        }
        [which] if which == "networks" => {
            CommandOutput::done(example_networks(), NETWORKS_EXAMPLE_NOTES)
        }
        [help] if matches!(help.as_str(), "-h" | "-help" | "--help") => {
            CommandOutput::done(format!("{EXAMPLE_USAGE}\n"), "")
        }
        _ => CommandOutput::usage(EXAMPLE_USAGE),
    }
}

/// What `concert reconcile` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileArgs {
    pub data_dir: PathBuf,
    pub networks_config: PathBuf,
    /// Lowercase hex.
    pub fingerprint: String,
    pub hint: Option<String>,
}

impl ReconcileArgs {
    /// Go-style flags (`-data-dir D`, `--data-dir=D`) then the fingerprint and an optional
    /// transaction hash; the flags fall back to `CONCERT_DATA_DIR` and
    /// `CONCERT_NETWORKS_CONFIG` as for the server. `Ok(None)`: help was asked.
    pub fn parse(args: &[String], env: &dyn EnvSource) -> Result<Option<ReconcileArgs>, String> {
        let mut data_dir = None;
        let mut networks_config = None;
        let mut positional = Vec::new();
        let mut index = 0;
        while index < args.len() {
            let arg = &args[index];
            index += 1;
            let Some(body) = arg
                .strip_prefix("--")
                .or_else(|| arg.strip_prefix('-'))
                .filter(|body| !body.is_empty())
            else {
                positional.push(arg.clone());
                continue;
            };
            let (name, inline) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (body, None),
            };
            let slot = match name {
                "h" | "help" => return Ok(None),
                "data-dir" => &mut data_dir,
                "networks-config" => &mut networks_config,
                _ => return Err(format!("flag provided but not defined: {arg}")),
            };
            let value = match inline {
                Some(value) => value,
                None => {
                    let value = args
                        .get(index)
                        .ok_or_else(|| format!("flag needs an argument: {arg}"))?;
                    index += 1;
                    value.clone()
                }
            };
            *slot = Some(value);
        }
        let data_dir = data_dir
            .or_else(|| env.var("CONCERT_DATA_DIR"))
            .unwrap_or_else(|| DEFAULT_DATA_DIR.to_string());
        if data_dir.trim().is_empty() {
            return Err("reconcile needs the data directory that holds the journal".into());
        }
        let data_dir = PathBuf::from(data_dir);
        let networks_config = networks_config
            .or_else(|| env.var("CONCERT_NETWORKS_CONFIG"))
            .filter(|path| !path.trim().is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| data_dir.join(NETWORKS_FILE));
        let (fingerprint, hint) = match positional.as_slice() {
            [fingerprint] => (fingerprint, None),
            [fingerprint, hint] => (fingerprint, Some(hint.clone())),
            _ => return Err("give the payment's fingerprint and at most one hash".into()),
        };
        let fingerprint = fingerprint.to_ascii_lowercase();
        if !is_settlement_id(&fingerprint) {
            return Err(format!(
                "{fingerprint:?} is not a payment fingerprint (64 hex characters)"
            ));
        }
        Ok(Some(ReconcileArgs {
            data_dir,
            networks_config,
            fingerprint,
            hint,
        }))
    }
}

/// Looks the payment up on its chain and records it settled when the chain says it is final.
/// Returns what was done, for the operator.
pub async fn reconcile<F>(
    args: &ReconcileArgs,
    factory: F,
    timeout: Duration,
) -> Result<String, String>
where
    F: FnOnce(&MechanismRequest<'_>) -> Result<Arc<dyn Mechanism>, String>,
{
    let journal_path = args.data_dir.join(JOURNAL_DIR).join(JOURNAL_FILE);
    // Opening would create an empty journal; a wrong -data-dir should say so instead.
    if !journal_path.exists() {
        return Err(format!(
            "{}: no settlement journal here (is -data-dir right?)",
            journal_path.display()
        ));
    }
    let journal = SettlementJournal::open(&args.data_dir).map_err(|e| e.to_string())?;
    let fingerprint = &args.fingerprint;
    let record = journal.get(fingerprint).ok_or_else(|| {
        format!(
            "{}: no payment with fingerprint {fingerprint}",
            journal.path().display()
        )
    })?;
    if record.state == SettlementState::Settled {
        let transaction = record
            .response
            .as_ref()
            .map(|response| response.transaction.as_str())
            .unwrap_or_default();
        return Ok(format!(
            "{fingerprint}: already settled (transaction {transaction}); nothing to do"
        ));
    }
    let network = record.terms.network.clone();
    let networks = read_networks(&args.networks_config, !is_mainnet(&network))?;
    let network_settings = networks.get(&network).ok_or_else(|| {
        format!(
            "{}: no entry for {network}, the payment's network",
            args.networks_config.display()
        )
    })?;
    let mechanism = factory(&MechanismRequest {
        scheme: &record.terms.scheme,
        network: &network,
        network_settings,
        offers: &[],
        test_mode: !is_mainnet(&network),
    })?;
    let looked_up = tokio::time::timeout(
        timeout,
        mechanism.reconcile(&record.payload, &record.terms, args.hint.as_deref()),
    )
    .await
    .map_err(|_| {
        format!(
            "{network} did not answer within {} s; nothing recorded",
            timeout.as_secs()
        )
    })?
    .map_err(|e| format!("{e}; nothing recorded"))?;
    let Some(mut response) = looked_up else {
        return Err(format!(
            "{fingerprint}: not final on {network} (or not found); nothing recorded. Try again later{}",
            if args.hint.is_none() {
                ", or give the transaction hash if this network needs it"
            } else {
                ""
            }
        ));
    };
    if response.payer.is_none() {
        response.payer = Some(record.payer.clone());
    }
    if !response.success
        || response.network != network
        || response.transaction.is_empty()
        || response.payer.as_deref() != Some(record.payer.as_str())
    {
        return Err(format!(
            "{fingerprint}: the chain's answer does not show this payment settled (success {}, network {:?}, transaction {:?}); nothing recorded",
            response.success, response.network, response.transaction
        ));
    }
    let transaction = response.transaction.clone();
    let settled = SettlementRecord {
        state: SettlementState::Settled,
        response: Some(response),
        ..record
    };
    journal.record(settled).map_err(|e| e.to_string())?;
    Ok(format!(
        "{fingerprint}: settled on {network} in transaction {transaction}; recorded in {}",
        journal.path().display()
    ))
}

fn read_networks(
    path: &Path,
    loopback_http: bool,
) -> Result<super::settings::NetworksSettings, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let networks = parse_networks(path, &bytes)?;
    // Reconciling signs nothing, so the fee secrets need not be present.
    validate_networks(path, &networks, loopback_http, None)?;
    Ok(networks)
}

#[cfg(test)]
mod tests;
