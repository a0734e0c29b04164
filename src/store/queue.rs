//! `queue.snapshot`: the waiting line saved at stop and every few seconds while it changes,
//! restored at the next start with its times shifted by the downtime.

use crate::room::{Room, Snapshot, SnapshotError};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::{DataDir, PersistError};

pub(crate) const QUEUE_FILE: &str = "queue.snapshot";

/// Restores the line saved at the last stop (or by the periodic snapshot before a crash), then
/// deletes the file so it is never imported twice. A malformed file is set aside as `.bad` and
/// start-up goes on with an empty line; an unreadable one is left where it is.
pub(crate) fn restore_queue(dir: &DataDir, room: &Room) -> Result<usize, PersistError> {
    let path = dir.file(QUEUE_FILE);
    let bytes = match dir.read(QUEUE_FILE) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(0),
        Err(e) => {
            tracing::warn!("{e}; starting with an empty line and leaving the file in place");
            return Ok(0);
        }
    };
    let imported = Snapshot::from_json(&bytes)
        .and_then(|snapshot| room.import_snapshot(snapshot, std::time::SystemTime::now()));
    match imported {
        Ok(count) => {
            dir.remove(QUEUE_FILE)?;
            Ok(count)
        }
        Err(SnapshotError::NotPristine) => Err(PersistError::Corrupt {
            path,
            message: SnapshotError::NotPristine.to_string(),
        }),
        Err(message) => {
            let bad = dir.quarantine(QUEUE_FILE)?;
            tracing::warn!(
                file = %path.display(),
                kept_as = %bad.display(),
                "queue snapshot refused ({message}); starting with an empty line"
            );
            Ok(0)
        }
    }
}

/// Saves the line (tickets in order, with their tokens) for the next start.
pub(crate) fn save_queue(dir: &DataDir, room: &Room) -> Result<usize, PersistError> {
    let _ordered = dir.ordered();
    let snapshot = room.export_snapshot(std::time::SystemTime::now());
    let count = snapshot.tickets.len();
    let bytes = snapshot.to_json().map_err(|e| PersistError::Corrupt {
        path: dir.file(QUEUE_FILE),
        message: e.to_string(),
    })?;
    dir.write_atomic(QUEUE_FILE, &bytes)?;
    Ok(count)
}

/// Removes a saved line that is no longer true (the line emptied), ordered with the saves.
pub(crate) fn clear_queue(dir: &DataDir) -> Result<usize, PersistError> {
    let _ordered = dir.ordered();
    dir.remove(QUEUE_FILE).map(|()| 0)
}

/// Snapshots the line every `every` while it changes, so a crash (`kill -9`, power loss) loses at
/// most that much of the line. Writes run on the blocking pool; a write that takes longer than the
/// period stretches the period, which bounds the cost for very long lines.
///
/// `stop` ends the task between writes, never during one (see [`spawn_ban_writer`]).
pub(crate) fn spawn_queue_snapshots(
    dir: Arc<DataDir>,
    room: Arc<Room>,
    every: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last_seen = None;
        let mut period = every;
        loop {
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                () = stop.cancelled() => return,
            }
            let stats = room.stats();
            let fingerprint = (stats.issued, stats.now_serving, stats.live_queue_depth);
            if last_seen == Some(fingerprint) {
                continue;
            }
            let (dir, room) = (dir.clone(), room.clone());
            let started = std::time::Instant::now();
            let written = tokio::task::spawn_blocking(move || {
                // An empty line leaves no file behind: nothing to restore.
                if room.stats().live_queue_depth == 0 {
                    clear_queue(&dir)
                } else {
                    save_queue(&dir, &room)
                }
            })
            .await;
            match written {
                Ok(Ok(_)) => last_seen = Some(fingerprint),
                Ok(Err(e)) => tracing::warn!("periodic queue snapshot failed: {e}"),
                Err(e) => tracing::warn!("periodic queue snapshot task failed: {e}"),
            }
            period = every.max(started.elapsed() * 2);
        }
    })
}
