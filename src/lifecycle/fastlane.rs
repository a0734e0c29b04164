//! Starting and stopping the fast lane: its two files are read and checked whole, the chains
//! built in are asked for a mechanism per offer, both journals are opened (and locked), and the
//! service is handed to the request path. Any problem stops the start with one line naming the
//! file, setting or secret.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

use crate::admission::cookies::{TICKET, read_cookie};
use crate::app::{App, BuildError};
use crate::config::{self, Config};
use crate::fastlane::chains::BuiltIn;
use crate::fastlane::gateway::{Gateway, SettlementJournal, build_mechanisms};
use crate::fastlane::quote::QuoteKey;
use crate::fastlane::service::{FastLane, FastLaneOptions, LinePrice};
use crate::fastlane::settings::{FASTLANE_FILE, NETWORKS_FILE, load_files};
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

/// The running lane's two halves, for the stop.
pub(super) struct Started {
    lane: Arc<FastLane>,
    gateway: Gateway,
}

impl Started {
    /// Lets settlements under way finish (bounded), then closes both journals.
    pub(super) async fn stop(self) {
        self.lane.close_after_settlements(SETTLE_DRAIN).await;
        self.gateway.close().await;
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

fn networks_path(config: &Config, data_dir: Option<&DataDir>) -> Option<PathBuf> {
    if !config.networks_config.trim().is_empty() {
        return Some(PathBuf::from(config.networks_config.trim()));
    }
    data_dir.map(|dir| dir.file(NETWORKS_FILE))
}

fn refused(message: impl Into<String>) -> BuildError {
    BuildError::FastLane(message.into())
}

/// Builds the lane when a `fastlane.json` is configured and hands it to `app`. No file: no
/// lane, and `/_concert/*` answers as without one.
pub(super) fn start(
    app: &Arc<App>,
    data_dir: Option<&DataDir>,
) -> Result<Option<Started>, BuildError> {
    let generation = app.generation();
    let config = &generation.config;
    let Some(fastlane_file) = fastlane_path(config, data_dir) else {
        return Ok(None);
    };
    let Some(data_dir) = data_dir else {
        return Err(refused(format!(
            "the fast lane ({}) keeps its receipts in the data directory: set -data-dir",
            fastlane_file.display()
        )));
    };
    let networks_file =
        networks_path(config, Some(data_dir)).unwrap_or_else(|| data_dir.file(NETWORKS_FILE));
    let (settings, networks) =
        load_files(&fastlane_file, &networks_file, &config::ProcessEnv).map_err(refused)?;
    if !settings.enabled {
        tracing::info!(file = %fastlane_file.display(), "fast lane configured but not enabled");
        return Ok(None);
    }
    let secret = match &config.admit_secret {
        Some(secret) if !config.admit_secret_generated => secret.clone(),
        _ => {
            return Err(refused(
                "the fast lane signs visitor sessions with CONCERT_ADMIT_SECRET: set it (at least 32 random bytes, the same across restarts)",
            ));
        }
    };
    let screening = !settings.policy_url.trim().is_empty();
    if screening && config.policy_token.len() < MIN_POLICY_TOKEN_LEN {
        return Err(refused(format!(
            "CONCERT_POLICY_TOKEN must be set to at least {MIN_POLICY_TOKEN_LEN} characters to call the policy service {} (it has {})",
            settings.policy_url,
            config.policy_token.len()
        )));
    }
    let built = BuiltIn::new();
    let mechanisms = build_mechanisms(&settings, &networks, |request| built.build(request))
        .map_err(|e| refused(format!("{}: {e}", networks_file.display())))?;
    let journal = SettlementJournal::open(data_dir.path()).map_err(|e| refused(e.to_string()))?;
    let gateway = Gateway::new(&settings, mechanisms, journal)
        .map_err(|e| refused(format!("{}: {e}", fastlane_file.display())))?
        .with_solana_preparer(built)
        .with_quote_key(QuoteKey::from_admit_secret(&secret));
    let lane = FastLane::new(FastLaneOptions {
        settings,
        data_dir: data_dir.path(),
        admit_secret: &secret,
        facilitator: Arc::new(gateway.clone()),
        policy_token: &config.policy_token,
        entry_ttl: config.fastlane_entry_ttl,
        skip_url: &config.skip_url,
        line: Some(Arc::new(RoomLine(app.room.clone()))),
    })
    .map_err(|e| refused(e.to_string()))?;
    tracing::info!(
        file = %fastlane_file.display(),
        offers = lane.settings().offers.len(),
        test_mode = lane.settings().test_mode,
        "fast lane enabled"
    );
    // Set once: a second start of the same app never happens.
    let _ = app.fastlane.set(lane.clone());
    Ok(Some(Started { lane, gateway }))
}
