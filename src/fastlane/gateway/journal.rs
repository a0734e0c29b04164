//! The settlement journal, `<data-dir>/gateway/settlements.jsonl`: one JSON line per state
//! change of a payment the gateway tried to settle, the last line of an id winning. It is what
//! keeps a payment from being submitted twice across restarts, so it is strict:
//!
//! - one process at a time (a non-blocking exclusive lock on `settlements.lock`);
//! - every append is fsynced before the caller hears it succeeded;
//! - a torn last line, a line that is not a record, or a `settled` record followed by another
//!   state for the same id stops loading with the file's path;
//! - after any write error the journal is unhealthy and refuses every further append.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::fastlane::canonical::{legacy_settlement_id, settlement_id};
use crate::fastlane::x402::{PaymentPayload, PaymentRequirements, SettleResponse};

/// The journal's folder inside the data directory.
pub const JOURNAL_DIR: &str = "gateway";
pub const JOURNAL_FILE: &str = "settlements.jsonl";
pub const LOCK_FILE: &str = "settlements.lock";

/// Where a payment's settlement stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SettlementState {
    /// Submission started; the outcome was never recorded (a crash or a failed write).
    Pending,
    /// Final on chain; the stored response is the answer to every later settle.
    Settled,
    /// Submitted but the outcome is not known; only `concert reconcile` moves it on.
    Unknown,
}

impl SettlementState {
    pub fn as_str(self) -> &'static str {
        match self {
            SettlementState::Pending => "pending",
            SettlementState::Settled => "settled",
            SettlementState::Unknown => "unknown",
        }
    }
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettlementRecord {
    pub id: String,
    pub terms: PaymentRequirements,
    pub payload: PaymentPayload,
    pub payer: String,
    pub state: SettlementState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<SettleResponse>,
    /// RFC 3339, UTC.
    pub created: String,
    pub updated: String,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(
        "{path} is locked by a running concert (the settlement journal has one owner): stop concert first"
    )]
    Locked { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {message}; fix or move the file aside after checking its payments")]
    Corrupt { path: PathBuf, message: String },
    #[error("{path}: the settlement journal failed a write earlier and takes nothing new")]
    Unhealthy { path: PathBuf },
    #[error("{path}: payment {id} is settled; its record cannot become {to}")]
    Regress {
        path: PathBuf,
        id: String,
        to: &'static str,
    },
}

/// The opened, locked journal and the latest record of every id in it.
#[derive(Debug)]
pub struct SettlementJournal {
    path: PathBuf,
    /// Held (locked) until the journal is closed or dropped.
    lock: Mutex<Option<File>>,
    writer: Mutex<Writer>,
    healthy: AtomicBool,
}

#[derive(Debug)]
struct Writer {
    file: File,
    records: HashMap<String, SettlementRecord>,
}

impl SettlementJournal {
    /// Opens (creating when missing) `<data_dir>/gateway/settlements.jsonl`, taking its lock
    /// without waiting, and loads every record.
    pub fn open(data_dir: &Path) -> Result<SettlementJournal, JournalError> {
        let dir = data_dir.join(JOURNAL_DIR);
        let io_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, source }
        };
        if !dir.is_dir() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(io_error(&dir))?;
            // The new directory entry itself must survive a crash.
            sync_dir(data_dir).map_err(io_error(data_dir))?;
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(JournalError::Locked { path: lock_path });
            }
            Err(fs::TryLockError::Error(source)) => {
                return Err(JournalError::Io {
                    path: lock_path,
                    source,
                });
            }
        }
        let path = dir.join(JOURNAL_FILE);
        let existed = path.exists();
        let records = match fs::read(&path) {
            Ok(bytes) => {
                let records = load(&path, &bytes)?;
                let lines = bytes.iter().filter(|&&b| b == b'\n').count();
                if lines > records.len()
                    && let Err(e) = compact(&dir, &path, &records)
                {
                    // Only the file's size is at stake: every line still loads the same.
                    tracing::warn!(path = %path.display(), "settlement journal not compacted: {e}");
                }
                records
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => HashMap::new(),
            Err(source) => return Err(JournalError::Io { path, source }),
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_error(&path))?;
        if !existed {
            sync_dir(&dir).map_err(io_error(&dir))?;
        }
        Ok(SettlementJournal {
            path,
            lock: Mutex::new(Some(lock)),
            writer: Mutex::new(Writer { file, records }),
            healthy: AtomicBool::new(true),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// False once a write has failed: the file may no longer say what happened.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Takes nothing more and releases the lock, so another journal (a reloaded gateway's) can
    /// open the file; what was loaded stays readable.
    pub fn close(&self) {
        let _writer = self.writer.lock();
        self.healthy.store(false, Ordering::Release);
        self.lock.lock().take();
    }

    /// The latest record of `id`.
    pub fn get(&self, id: &str) -> Option<SettlementRecord> {
        self.writer.lock().records.get(id).cloned()
    }

    /// The record of a payment, under its id or under the id the original service wrote for
    /// it (see [`legacy_settlement_id`]).
    pub fn find(
        &self,
        terms: &PaymentRequirements,
        payment: &PaymentPayload,
    ) -> Option<SettlementRecord> {
        let writer = self.writer.lock();
        let id = settlement_id(&terms.network, &terms.scheme, &payment.payload);
        if let Some(record) = writer.records.get(&id) {
            return Some(record.clone());
        }
        let legacy = legacy_settlement_id(&terms.network, &terms.scheme, &payment.payload);
        writer.records.get(&legacy).cloned()
    }

    /// How many payments the journal knows.
    pub fn len(&self) -> usize {
        self.writer.lock().records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `record` (its `updated` set to now, `created` kept from the earlier record of
    /// the id when there is one) and fsyncs it. Refuses to move a settled payment to another
    /// state, and refuses everything once a write has failed.
    pub fn record(&self, mut record: SettlementRecord) -> Result<SettlementRecord, JournalError> {
        let mut writer = self.writer.lock();
        // Checked under the writer's lock, so nothing is appended after a close.
        if !self.is_healthy() {
            return Err(JournalError::Unhealthy {
                path: self.path.clone(),
            });
        }
        let now = now_rfc3339();
        if let Some(earlier) = writer.records.get(&record.id) {
            if earlier.state == SettlementState::Settled && record.state != SettlementState::Settled
            {
                return Err(JournalError::Regress {
                    path: self.path.clone(),
                    id: record.id,
                    to: record.state.as_str(),
                });
            }
            record.created = earlier.created.clone();
        } else if record.created.is_empty() {
            record.created = now.clone();
        }
        record.updated = now;
        let mut line = serde_json::to_vec(&record).map_err(|e| JournalError::Io {
            path: self.path.clone(),
            source: io::Error::other(e),
        })?;
        line.push(b'\n');
        let written = writer
            .file
            .write_all(&line)
            .and_then(|()| writer.file.sync_data());
        if let Err(source) = written {
            self.healthy.store(false, Ordering::Release);
            tracing::error!(
                path = %self.path.display(),
                "settlement journal write failed; the gateway takes no new payments: {source}"
            );
            return Err(JournalError::Io {
                path: self.path.clone(),
                source,
            });
        }
        writer.records.insert(record.id.clone(), record.clone());
        Ok(record)
    }
}

/// Parses the whole file: every line a record, the last one of an id winning, a settled id
/// never followed by another state.
fn load(path: &Path, bytes: &[u8]) -> Result<HashMap<String, SettlementRecord>, JournalError> {
    let corrupt = |message: String| JournalError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    let mut records: HashMap<String, SettlementRecord> = HashMap::new();
    if bytes.is_empty() {
        return Ok(records);
    }
    if bytes.last() != Some(&b'\n') {
        return Err(corrupt(
            "the last line is torn (no newline at its end: a write was cut short)".to_string(),
        ));
    }
    for (index, line) in bytes[..bytes.len() - 1].split(|&b| b == b'\n').enumerate() {
        let number = index + 1;
        let record: SettlementRecord = serde_json::from_slice(line)
            .map_err(|e| corrupt(format!("line {number} is not a settlement record: {e}")))?;
        if let Some(earlier) = records.get(&record.id)
            && earlier.state == SettlementState::Settled
            && record.state != SettlementState::Settled
        {
            return Err(corrupt(format!(
                "line {number}: payment {} regresses from settled to {}",
                record.id,
                record.state.as_str()
            )));
        }
        records.insert(record.id.clone(), record);
    }
    Ok(records)
}

/// Rewrites the journal with only the latest line of each id (a payment is written two or three
/// times), atomically: a temp file beside it, fsynced, renamed over it, the directory fsynced.
/// Nothing is ever dropped: the journal is what refuses a payment seen before.
fn compact(dir: &Path, path: &Path, records: &HashMap<String, SettlementRecord>) -> io::Result<()> {
    let mut ordered: Vec<&SettlementRecord> = records.values().collect();
    ordered.sort_by(|a, b| (&a.created, &a.id).cmp(&(&b.created, &b.id)));
    let mut text = Vec::new();
    for record in ordered {
        serde_json::to_writer(&mut text, record).map_err(io::Error::other)?;
        text.push(b'\n');
    }
    let mut temp = tempfile::Builder::new()
        .prefix(".settlements.")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    temp.write_all(&text)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|failed| failed.error)?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Now as RFC 3339 UTC text.
pub(crate) fn now_rfc3339() -> String {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let mut out = Vec::with_capacity(30);
    crate::sys::walltime::push_rfc3339(
        &mut out,
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        since.subsec_nanos(),
    );
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastlane::x402::X402_VERSION;
    use serde_json::{Value, json};
    use std::os::unix::fs::PermissionsExt;

    fn terms() -> PaymentRequirements {
        PaymentRequirements {
            scheme: "exact".into(),
            network: "xrpl:1".into(),
            amount: "1000".into(),
            asset: "XRP".into(),
            pay_to: "rHb9CJAWyB4rj91VRWn96DkukG4bwdtyTh".into(),
            max_timeout_seconds: 60,
            extra: None,
        }
    }

    fn payment(payload: Value) -> PaymentPayload {
        let Value::Object(payload) = payload else {
            panic!("payload must be an object")
        };
        PaymentPayload {
            x402_version: X402_VERSION,
            resource: None,
            accepted: terms(),
            payload,
            extensions: None,
        }
    }

    fn record(payment: &PaymentPayload, state: SettlementState) -> SettlementRecord {
        SettlementRecord {
            id: settlement_id("xrpl:1", "exact", &payment.payload),
            terms: terms(),
            payload: payment.clone(),
            payer: "rPayer".into(),
            state,
            response: None,
            created: String::new(),
            updated: String::new(),
        }
    }

    #[test]
    fn records_survive_reopening_and_the_last_line_of_an_id_wins() {
        let root = tempfile::tempdir().unwrap();
        let paid = payment(json!({"signedTxBlob": "AA"}));
        let created;
        {
            let journal = SettlementJournal::open(root.path()).unwrap();
            created = journal
                .record(record(&paid, SettlementState::Pending))
                .unwrap()
                .created;
            journal
                .record(record(&paid, SettlementState::Settled))
                .unwrap();
        }
        let journal = SettlementJournal::open(root.path()).unwrap();
        let found = journal.find(&terms(), &paid).unwrap();
        assert_eq!(found.state, SettlementState::Settled);
        assert_eq!(found.created, created);
        assert_eq!(journal.len(), 1);
        let text = fs::read_to_string(journal.path()).unwrap();
        assert_eq!(
            text.lines().count(),
            1,
            "superseded lines are compacted away: {text}"
        );
        let dir = root.path().join(JOURNAL_DIR);
        let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(JOURNAL_FILE)), 0o600);
        assert_eq!(mode(&dir.join(LOCK_FILE)), 0o600);
    }

    #[test]
    fn a_second_opener_is_refused_while_the_first_holds_the_lock() {
        let root = tempfile::tempdir().unwrap();
        let first = SettlementJournal::open(root.path()).unwrap();
        let second = SettlementJournal::open(root.path()).unwrap_err();
        assert!(matches!(second, JournalError::Locked { .. }), "{second}");
        assert!(second.to_string().contains("stop concert first"));
        drop(first);
        SettlementJournal::open(root.path()).unwrap();
    }

    #[test]
    fn a_torn_last_line_stops_loading_with_the_path() {
        let root = tempfile::tempdir().unwrap();
        let paid = payment(json!({"signedTxBlob": "AA"}));
        {
            let journal = SettlementJournal::open(root.path()).unwrap();
            journal
                .record(record(&paid, SettlementState::Pending))
                .unwrap();
        }
        let path = root.path().join(JOURNAL_DIR).join(JOURNAL_FILE);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"id":"ab","ter"#).unwrap();
        drop(file);
        let error = SettlementJournal::open(root.path()).unwrap_err();
        assert!(error.to_string().contains("torn"), "{error}");
        assert!(error.to_string().contains(&path.display().to_string()));
    }

    #[test]
    fn a_line_that_is_not_a_record_stops_loading() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(JOURNAL_DIR);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(JOURNAL_FILE), b"{\"id\":1}\n").unwrap();
        let error = SettlementJournal::open(root.path()).unwrap_err();
        assert!(error.to_string().contains("line 1"), "{error}");
    }

    #[test]
    fn a_settled_payment_never_regresses_on_disk_or_in_memory() {
        let root = tempfile::tempdir().unwrap();
        let paid = payment(json!({"signedTxBlob": "AA"}));
        let lines;
        {
            let journal = SettlementJournal::open(root.path()).unwrap();
            journal
                .record(record(&paid, SettlementState::Settled))
                .unwrap();
            let refused = journal
                .record(record(&paid, SettlementState::Unknown))
                .unwrap_err();
            assert!(matches!(refused, JournalError::Regress { .. }), "{refused}");
            assert!(journal.is_healthy());
            let settled = serde_json::to_string(&record(&paid, SettlementState::Settled)).unwrap();
            let unknown = serde_json::to_string(&record(&paid, SettlementState::Unknown)).unwrap();
            lines = format!("{settled}\n{unknown}\n");
        }
        fs::write(root.path().join(JOURNAL_DIR).join(JOURNAL_FILE), lines).unwrap();
        let error = SettlementJournal::open(root.path()).unwrap_err();
        assert!(error.to_string().contains("regresses"), "{error}");
    }

    #[test]
    fn ids_written_the_old_way_are_found() {
        let root = tempfile::tempdir().unwrap();
        let paid = payment(json!({"memo": "a<b>&c", "signedTxBlob": "AA"}));
        let mut old = record(&paid, SettlementState::Unknown);
        old.id = legacy_settlement_id("xrpl:1", "exact", &paid.payload);
        assert_ne!(old.id, settlement_id("xrpl:1", "exact", &paid.payload));
        {
            let journal = SettlementJournal::open(root.path()).unwrap();
            journal.record(old.clone()).unwrap();
        }
        let journal = SettlementJournal::open(root.path()).unwrap();
        let found = journal.find(&terms(), &paid).unwrap();
        assert_eq!(found.id, old.id);
    }

    #[test]
    fn a_failed_write_makes_the_journal_refuse_new_work() {
        let root = tempfile::tempdir().unwrap();
        let journal = SettlementJournal::open(root.path()).unwrap();
        // A read-only handle in place of the append handle makes the next write fail.
        journal.writer.lock().file = File::open(journal.path()).unwrap();
        let paid = payment(json!({"signedTxBlob": "AA"}));
        journal
            .record(record(&paid, SettlementState::Pending))
            .unwrap_err();
        assert!(!journal.is_healthy());
        let refused = journal
            .record(record(&paid, SettlementState::Pending))
            .unwrap_err();
        assert!(
            matches!(refused, JournalError::Unhealthy { .. }),
            "{refused}"
        );
        assert!(journal.find(&terms(), &paid).is_none());
    }
}
