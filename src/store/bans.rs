//! `bans.json`: every ban, range ban and offense history, saved within a second of a change so a
//! restart never lifts an acknowledged ban.

use crate::abuse::{BanSnapshot, ImportReport, Registry};
use crate::room::WallTime;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::{DataDir, PersistError};

pub(crate) const BANS_FILE: &str = "bans.json";

/// `bans.json`: every client with offense history (expired bans too, so escalation survives a
/// restart) and the active range bans.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct BansFile {
    #[serde(default)]
    pub version: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub saved: String,
    #[serde(flatten)]
    pub bans: BanSnapshot,
}

/// Restores bans at start. Anything but a missing file that cannot be read exactly stops
/// start-up: silently starting without them would lift permanent bans.
pub(crate) fn load_bans(dir: &DataDir, registry: &Registry) -> Result<ImportReport, PersistError> {
    let path = dir.file(BANS_FILE);
    let Some(bytes) = dir.read(BANS_FILE)? else {
        return Ok(ImportReport::default());
    };
    let file: BansFile = serde_json::from_slice(&bytes).map_err(|e| PersistError::Corrupt {
        path: path.clone(),
        message: format!("invalid JSON: {e}"),
    })?;
    if file.version > 1 {
        return Err(PersistError::Corrupt {
            path,
            message: format!(
                "version {} is newer than this concert understands (1)",
                file.version
            ),
        });
    }
    Ok(registry.import(&file.bans))
}

/// Writes the registry's bans and offense history.
pub(crate) fn save_bans(dir: &DataDir, registry: &Registry) -> Result<(), PersistError> {
    let _ordered = dir.ordered();
    let file = BansFile {
        version: 1,
        saved: WallTime::from_system(std::time::SystemTime::now()).to_string(),
        bans: registry.export(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file).unwrap_or_default();
    bytes.push(b'\n');
    dir.write_atomic(BANS_FILE, &bytes)
}

/// Saves bans within a second of any change. A failed save is retried every second and logged
/// once until it recovers.
///
/// `stop` ends the task between saves, never during one: a save runs on the blocking pool and
/// holds the data directory (and its lock) until it is done, so aborting the task instead would
/// let the process report itself stopped while a write still holds the lock.
pub(crate) fn spawn_ban_writer(
    dir: Arc<DataDir>,
    registry: Arc<Registry>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut saved_at = registry.changes();
        let mut failing = false;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => return,
            }
            let changes = registry.changes();
            if changes == saved_at {
                continue;
            }
            let (dir, registry) = (dir.clone(), registry.clone());
            let result = tokio::task::spawn_blocking(move || save_bans(&dir, &registry)).await;
            match result {
                Ok(Ok(())) => {
                    if failing {
                        tracing::info!("bans.json saved again");
                    }
                    failing = false;
                    saved_at = changes;
                }
                Ok(Err(e)) if !failing => {
                    tracing::error!("cannot save bans: {e}; retrying every second");
                    failing = true;
                }
                Ok(Err(_)) => {}
                Err(e) => tracing::error!("ban writer task failed: {e}"),
            }
        }
    })
}
