//! Starting, swapping and stopping the fast lane: its two files are read and checked whole,
//! the chains built in are asked for a mechanism per offer, both journals are opened (and
//! locked), and the service is handed to the request path. Any problem stops the start with
//! one line naming the file, setting or secret. The portal's Fast lane tab saves new files
//! through [`save_files`], which swaps the running lane for one built from them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

use crate::admission::cookies::{TICKET, read_cookie};
use crate::app::{App, BuildError};
use crate::config::{self, Config};
use crate::fastlane::chains::BuiltIn;
use crate::fastlane::gateway::{Gateway, SettlementJournal, build_lookups, build_mechanisms};
use crate::fastlane::live::{LaneFiles, RunningLane, restore_file, write_file_atomically};
use crate::fastlane::quote::QuoteKey;
use crate::fastlane::service::policy::Policy;
use crate::fastlane::service::{FastLane, FastLaneOptions, LinePrice};
use crate::fastlane::settings::{
    FASTLANE_FILE, FastlaneSettings, NETWORKS_FILE, NetworksSettings, Offer, fastlane_problems,
    load_files, networks_problems, parse_fastlane, parse_networks,
};
use crate::room::Room;
use crate::store::DataDir;

/// The shortest `CONCERT_POLICY_TOKEN` accepted.
const MIN_POLICY_TOKEN_LEN: usize = 32;

/// How long the stop waits for settlements under way to be journaled.
const SETTLE_DRAIN: Duration = Duration::from_secs(30);

/// The waiting room as the lane's pricing sees it: with `-rate`/`-surge` set, what skipping
/// the visitors ahead costs, counted in offer prices.
struct RoomLine(Arc<Room>);

impl LinePrice for RoomLine {
    fn skip_cost(&self, headers: &HeaderMap) -> f64 {
        self.0.skip_cost_for(read_cookie(headers, TICKET))
    }
}

/// `-fastlane-config`, else `fastlane.json` in the data directory when it exists.
fn fastlane_path(config: &Config, data_dir: Option<&DataDir>) -> Option<PathBuf> {
    if !config.fastlane_config.trim().is_empty() {
        return Some(PathBuf::from(config.fastlane_config.trim()));
    }
    let path = data_dir?.file(FASTLANE_FILE);
    path.exists().then_some(path)
}

/// Where both files are read and written: the flags' paths, else the data directory's. The
/// portal may write them only with a data directory, which any lane needs for its journals.
fn lane_files(config: &Config, data_dir: Option<&DataDir>) -> Option<LaneFiles> {
    let named = |flag: &str, name: &str| {
        let flag = flag.trim();
        if flag.is_empty() {
            data_dir.map(|dir| dir.file(name))
        } else {
            Some(PathBuf::from(flag))
        }
    };
    let fastlane = named(&config.fastlane_config, FASTLANE_FILE)?;
    let networks = named(&config.networks_config, NETWORKS_FILE).unwrap_or_else(|| {
        fastlane.parent().map_or_else(
            || PathBuf::from(NETWORKS_FILE),
            |dir| dir.join(NETWORKS_FILE),
        )
    });
    Some(LaneFiles {
        fastlane,
        networks,
        writable: data_dir.is_some(),
    })
}

fn refused(message: impl Into<String>) -> BuildError {
    BuildError::FastLane(message.into())
}

/// The admission secret sessions are signed with, after checking the secrets an enabled lane
/// needs: a stable `CONCERT_ADMIT_SECRET`, and a `CONCERT_POLICY_TOKEN` when payers are
/// screened.
fn lane_secret(config: &Config, settings: &FastlaneSettings) -> Result<Vec<u8>, String> {
    let secret = match &config.admit_secret {
        Some(secret) if !config.admit_secret_generated => secret.clone(),
        _ => {
            return Err(
                "the fast lane signs visitor sessions with CONCERT_ADMIT_SECRET: set it (at least 32 random bytes, the same across restarts)".into(),
            );
        }
    };
    let screening = !settings.policy_url.trim().is_empty();
    if screening && config.policy_token.len() < MIN_POLICY_TOKEN_LEN {
        return Err(format!(
            "CONCERT_POLICY_TOKEN must be set to at least {MIN_POLICY_TOKEN_LEN} characters to call the policy service {} (it has {})",
            settings.policy_url,
            config.policy_token.len()
        ));
    }
    Ok(secret)
}

/// Builds a lane from checked documents: a mechanism per offer, the gateway over its journal,
/// the service over its own. Both journals are opened (and locked) here, so no other lane of
/// this data directory may be open.
fn build(
    app: &Arc<App>,
    data_dir: &Path,
    files: &LaneFiles,
    settings: FastlaneSettings,
    networks: NetworksSettings,
) -> Result<RunningLane, String> {
    let generation = app.generation();
    let config = &generation.config;
    let secret = lane_secret(config, &settings)?;
    let built = BuiltIn::new();
    let mechanisms = build_mechanisms(&settings, &networks, |request| built.build(request))
        .map_err(|e| format!("{}: {e}", files.networks.display()))?;
    let lookups = build_lookups(&settings, &networks, |network, entry| {
        built.lookups(network, entry)
    })
    .map_err(|e| format!("{}: {e}", files.networks.display()))?;
    let journal = SettlementJournal::open(data_dir).map_err(|e| e.to_string())?;
    let gateway = Gateway::new(&settings, mechanisms, journal)
        .map_err(|e| format!("{}: {e}", files.fastlane.display()))?
        .with_lookups(lookups)
        .with_solana_preparer(built)
        .with_quote_key(QuoteKey::from_admit_secret(&secret));
    let lane = FastLane::new(FastLaneOptions {
        settings: settings.clone(),
        data_dir,
        admit_secret: &secret,
        facilitator: Arc::new(gateway.clone()),
        policy_token: &config.policy_token,
        entry_ttl: config.fastlane_entry_ttl,
        skip_url: &config.skip_url,
        line: Some(Arc::new(RoomLine(app.room.clone()))),
    })
    .map_err(|e| e.to_string())?;
    Ok(RunningLane {
        lane,
        gateway,
        fastlane: settings,
        networks,
    })
}

/// Builds the lane when a `fastlane.json` is configured and hands it to `app`. No file: no
/// lane, and `/_concert/*` answers as without one.
pub(super) fn start(app: &Arc<App>, data_dir: Option<&DataDir>) -> Result<(), BuildError> {
    let generation = app.generation();
    let config = &generation.config;
    let files = lane_files(config, data_dir);
    if let Some(files) = &files {
        app.fastlane.set_files(files.clone());
    }
    let Some(fastlane_file) = fastlane_path(config, data_dir) else {
        return Ok(());
    };
    let (Some(data_dir), Some(files)) = (data_dir, files) else {
        return Err(refused(format!(
            "the fast lane ({}) keeps its receipts in the data directory: set -data-dir",
            fastlane_file.display()
        )));
    };
    let (settings, networks) =
        load_files(&files.fastlane, &files.networks, &config::ProcessEnv).map_err(refused)?;
    if !settings.enabled {
        tracing::info!(file = %fastlane_file.display(), "fast lane configured but not enabled");
        return Ok(());
    }
    let running = build(app, data_dir.path(), &files, settings, networks).map_err(refused)?;
    tracing::info!(
        file = %fastlane_file.display(),
        offers = running.fastlane.offers.len(),
        test_mode = running.fastlane.test_mode,
        "fast lane enabled"
    );
    app.fastlane.install(running);
    Ok(())
}

/// Lets settlements under way finish (bounded), then closes both journals.
pub(super) async fn stop(app: &App) {
    app.fastlane.stop(SETTLE_DRAIN).await;
}

/// How long a swap waits for the running lane's settlements before giving up (nothing is
/// changed then); wallet requests are turned away meanwhile, so no new one starts.
const SWAP_DRAIN: Duration = Duration::from_secs(30);
/// How often a swap looks whether the settlements have drained.
const DRAIN_POLL: Duration = Duration::from_millis(25);

/// New contents for both files, as the portal sends them.
pub(crate) struct LaneDocuments<'a> {
    pub(crate) fastlane: &'a [u8],
    pub(crate) networks: &'a [u8],
    /// Check only: nothing is written or swapped.
    pub(crate) dry_run: bool,
}

/// An offer whose receiving address a save changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct PayToChange {
    pub(crate) label: String,
    pub(crate) network: String,
    pub(crate) from: String,
    pub(crate) to: String,
}

/// What a save did.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Saved {
    pub(crate) dry_run: bool,
    /// Whether a lane is serving now (false: the new files switch it off).
    pub(crate) running: bool,
    pub(crate) offers: usize,
    pub(crate) pay_to_changes: Vec<PayToChange>,
}

/// Why a save changed nothing, or what it left behind.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SaveError {
    #[error("the fast lane's files can be changed here only when Concert runs with -data-dir")]
    NotWritable,
    #[error("another fast lane change is being applied; try again when it has finished")]
    Busy,
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error(
        "payments were still settling after {} s; nothing was changed, try again shortly",
        SWAP_DRAIN.as_secs()
    )]
    StillSettling,
    #[error("the files could not be written, so nothing was changed: {0}")]
    NotSaved(String),
    #[error("{}", not_built(.error, *.restored))]
    NotBuilt { error: String, restored: bool },
}

fn not_built(error: &str, restored: bool) -> String {
    if restored {
        format!(
            "the new fast lane could not be started ({error}); the previous files and lane are back"
        )
    } else {
        format!(
            "the new fast lane could not be started ({error}), and neither could the previous one: the fast lane is off until this is fixed"
        )
    }
}

/// Checks both documents as the start does, without calling any chain: strict parsing, every
/// rule of both files, the secrets an enabled lane needs, and a mechanism for every offer.
fn check(
    app: &App,
    files: &LaneFiles,
    documents: &LaneDocuments<'_>,
) -> Result<(FastlaneSettings, NetworksSettings), Vec<String>> {
    let mut problems = Vec::new();
    let fastlane = parse_fastlane(&files.fastlane, documents.fastlane)
        .map_err(|e| problems.push(e))
        .ok();
    let networks = parse_networks(&files.networks, documents.networks)
        .map_err(|e| problems.push(e))
        .ok();
    let (Some(fastlane), Some(networks)) = (fastlane, networks) else {
        return Err(problems);
    };
    problems.extend(networks_problems(
        &files.networks,
        &networks,
        fastlane.test_mode,
        Some(&config::ProcessEnv),
    ));
    problems.extend(fastlane_problems(
        &files.fastlane,
        &fastlane,
        &files.networks,
        &networks,
    ));
    if problems.is_empty() && fastlane.enabled {
        let generation = app.generation();
        let config = &generation.config;
        if let Err(problem) = lane_secret(config, &fastlane) {
            problems.push(problem);
        }
        let built = BuiltIn::new();
        if let Err(problem) = build_mechanisms(&fastlane, &networks, |request| built.build(request))
        {
            problems.push(format!("{}: {problem}", files.networks.display()));
        }
        if let Err(problem) = build_lookups(&fastlane, &networks, |network, entry| {
            built.lookups(network, entry)
        }) {
            problems.push(format!("{}: {problem}", files.networks.display()));
        }
        if let Err(problem) = Policy::new(
            &fastlane.policy_url,
            &config.policy_token,
            fastlane.test_mode,
        ) {
            problems.push(format!(
                "{}: policy_url: {problem}",
                files.fastlane.display()
            ));
        }
    }
    if problems.is_empty() {
        Ok((fastlane, networks))
    } else {
        Err(problems)
    }
}

/// Offers on the same scheme, network and asset whose receiving address differs.
fn pay_to_changes(before: &FastlaneSettings, after: &FastlaneSettings) -> Vec<PayToChange> {
    let key = |offer: &Offer| {
        (
            offer.requirements.scheme.clone(),
            offer.requirements.network.clone(),
            offer.requirements.asset.clone(),
        )
    };
    after
        .offers
        .iter()
        .filter_map(|offer| {
            let old = before.offers.iter().find(|old| key(old) == key(offer))?;
            (old.requirements.pay_to != offer.requirements.pay_to).then(|| PayToChange {
                label: offer.label.clone(),
                network: offer.requirements.network.clone(),
                from: old.requirements.pay_to.clone(),
                to: offer.requirements.pay_to.clone(),
            })
        })
        .collect()
}

/// A warning per offer whose receiving address changed, naming the old and new address.
fn log_pay_to_changes(changes: &[PayToChange]) {
    for change in changes {
        tracing::warn!(
            offer = %change.label,
            network = %change.network,
            "fast lane: receiving address changed from {} to {}",
            change.from,
            change.to
        );
    }
}

/// The file's bytes, or `None` when there is none.
fn read_previous(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Waits (bounded) until no settlement runs in the current lane.
async fn settlements_drained(app: &App) -> bool {
    let deadline = tokio::time::Instant::now() + SWAP_DRAIN;
    loop {
        let settling = app
            .fastlane
            .with_running(|running| running.map_or(0, RunningLane::settling));
        if settling == 0 {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}

/// Puts both files back as they were; failures are logged, since the caller is already
/// reporting a failure.
fn restore_files(files: &LaneFiles, fastlane: Option<&[u8]>, networks: Option<&[u8]>) {
    for (path, previous) in [(&files.fastlane, fastlane), (&files.networks, networks)] {
        if let Err(error) = restore_file(path, previous) {
            tracing::error!(file = %path.display(), %error, "fast lane: the previous file could not be put back");
        }
    }
}

/// Replaces the lane's two files and the running lane with ones built from `documents`, all or
/// nothing; see [`SaveError`] for each way it stops. One save runs at a time.
///
/// The order keeps payments safe: wallet requests are turned away (503) while the flag is up,
/// the old lane's settlements drain before anything is written, the files are replaced whole,
/// the old lane closes its journals (releasing their locks) before the new one opens them, and
/// if the new one cannot be built the previous files and lane come back. Acknowledged receipts
/// are never at stake: they are in the journal files, which every lane reads whole.
pub(crate) async fn save_files(
    app: &Arc<App>,
    documents: LaneDocuments<'_>,
) -> Result<Saved, SaveError> {
    swap_files(app, documents, build).await
}

/// What builds a lane from checked documents ([`build`], but for tests of the rollback).
type LaneBuilder = fn(
    &Arc<App>,
    &Path,
    &LaneFiles,
    FastlaneSettings,
    NetworksSettings,
) -> Result<RunningLane, String>;

async fn swap_files(
    app: &Arc<App>,
    documents: LaneDocuments<'_>,
    build: LaneBuilder,
) -> Result<Saved, SaveError> {
    let files = app
        .fastlane
        .files()
        .filter(|files| files.writable)
        .ok_or(SaveError::NotWritable)?;
    let data_dir = app
        .data_dir
        .as_ref()
        .map(|dir| dir.path().to_owned())
        .ok_or(SaveError::NotWritable)?;
    let _flag = app.fastlane.begin_reload().ok_or(SaveError::Busy)?;
    let (settings, networks) = check(app, &files, &documents).map_err(SaveError::Invalid)?;
    let offers = settings.offers.len();
    let before = app
        .fastlane
        .with_running(|running| running.map(|running| running.fastlane.clone()));
    if documents.dry_run {
        let changes = before
            .as_ref()
            .map(|before| pay_to_changes(before, &settings))
            .unwrap_or_default();
        return Ok(Saved {
            dry_run: true,
            running: app.fast_lane().is_some(),
            offers,
            pay_to_changes: changes,
        });
    }
    if !settlements_drained(app).await {
        return Err(SaveError::StillSettling);
    }
    let old_fastlane = read_previous(&files.fastlane).map_err(SaveError::NotSaved)?;
    let old_networks = read_previous(&files.networks).map_err(SaveError::NotSaved)?;
    write_file_atomically(&files.fastlane, documents.fastlane)
        .map_err(|e| SaveError::NotSaved(format!("{}: {e}", files.fastlane.display())))?;
    if let Err(e) = write_file_atomically(&files.networks, documents.networks) {
        restore_files(&files, old_fastlane.as_deref(), old_networks.as_deref());
        return Err(SaveError::NotSaved(format!(
            "{}: {e}",
            files.networks.display()
        )));
    }
    // Compared with what was serving, else with what the old file said.
    let before = before.or_else(|| {
        old_fastlane
            .as_deref()
            .and_then(|bytes| parse_fastlane(&files.fastlane, bytes).ok())
    });
    let changes = before
        .as_ref()
        .map(|before| pay_to_changes(before, &settings))
        .unwrap_or_default();
    let old = app.fastlane.take_running();
    if let Some(old) = &old {
        old.close(SWAP_DRAIN).await;
    }
    if !settings.enabled {
        app.fastlane.clear();
        tracing::info!(file = %files.fastlane.display(), "fast lane switched off");
        return Ok(Saved {
            dry_run: false,
            running: false,
            offers,
            pay_to_changes: changes,
        });
    }
    let built = build(app, &data_dir, &files, settings, networks);
    match built {
        Ok(running) => {
            tracing::info!(
                file = %files.fastlane.display(),
                offers,
                test_mode = running.fastlane.test_mode,
                "fast lane reloaded"
            );
            app.fastlane.install(running);
            // Only once the new terms are what visitors pay: a rolled-back save changed nothing.
            log_pay_to_changes(&changes);
            Ok(Saved {
                dry_run: false,
                running: true,
                offers,
                pay_to_changes: changes,
            })
        }
        Err(error) => {
            tracing::error!(%error, "fast lane: the new lane could not be built; rolling back");
            restore_files(&files, old_fastlane.as_deref(), old_networks.as_deref());
            let restored = match old {
                Some(old) => match build(app, &data_dir, &files, old.fastlane, old.networks) {
                    Ok(previous) => {
                        app.fastlane.install(previous);
                        true
                    }
                    Err(again) => {
                        tracing::error!(error = %again, "fast lane: the previous lane could not be built again; the fast lane is off");
                        app.fastlane.clear();
                        false
                    }
                },
                None => {
                    app.fastlane.clear();
                    true
                }
            };
            Err(SaveError::NotBuilt { error, restored })
        }
    }
}

#[cfg(test)]
mod tests;
