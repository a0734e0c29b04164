//! The receipt journal `<data-dir>/fastlane.jsonl`: one JSON line per change of a payment's
//! state, appended and fsynced before anyone is told about it; the last line of a fingerprint
//! is its state. Only one process may hold it (`fastlane.lock`, non-blocking exclusive lock).
//!
//! The whole file is loaded at start into an index: fingerprint → receipt, and per session the
//! unsettled payment (at most one) and the settled receipt that lasts longest, so deciding
//! eligibility is two hash lookups. A file that could hide a replay (one fingerprint under two
//! sessions, one chain transaction under two fingerprints), a torn last line, or any line that
//! does not parse stops the load. Any failed write marks the journal unhealthy: from then on
//! no payment is taken and nobody is eligible, because the file may no longer say what happened.

use std::collections::HashMap;
use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use super::clock;
use super::session::SessionId;
use crate::fastlane::x402::{PaymentRequirements, SettleResponse};

pub const JOURNAL_FILE: &str = "fastlane.jsonl";
pub const LOCK_FILE: &str = "fastlane.lock";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptState {
    Pending,
    Settled,
    Unknown,
}

impl ReceiptState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptState::Pending => "pending",
            ReceiptState::Settled => "settled",
            ReceiptState::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    Payment,
    Deposit,
    NftSale,
    NftSaleConflict,
}

impl ReceiptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptKind::Payment => "payment",
            ReceiptKind::Deposit => "deposit",
            ReceiptKind::NftSale => "nft_sale",
            ReceiptKind::NftSaleConflict => "nft_sale_conflict",
        }
    }
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// Hex session id the payment belongs to, forever.
    pub session: String,
    pub fingerprint: String,
    pub state: ReceiptState,
    pub kind: ReceiptKind,
    pub network: String,
    pub payer: String,
    pub requirements: PaymentRequirements,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub transaction: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_id: String,
    #[serde(with = "instant")]
    pub started: u64,
    #[serde(with = "instant")]
    pub settled: u64,
    #[serde(with = "instant")]
    pub expires: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<SettleResponse>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub listing: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delivered: bool,
}

impl Receipt {
    /// A sale of a listed item, which the merchant delivers by hand and marks as delivered.
    pub fn is_sale(&self) -> bool {
        matches!(
            self.kind,
            ReceiptKind::NftSale | ReceiptKind::NftSaleConflict
        ) || !self.listing.is_empty()
    }

    pub fn is_live(&self, now: u64) -> bool {
        self.state == ReceiptState::Settled && self.expires > now
    }
}

/// Instants as RFC 3339 text; the zero time is 0.
mod instant {
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(unix: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::clock::format_rfc3339(*unix))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        super::clock::parse_rfc3339(&text)
            .ok_or_else(|| serde::de::Error::custom("not an RFC 3339 time"))
    }
}

/// Why the journal could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "{path}: held by another process (is Concert already running with this data directory?)"
    )]
    Locked { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} line {line}: {reason}")]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

/// Why a line was not written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("the journal is closed or unhealthy")]
    Unavailable,
    #[error("the payment belongs to another session")]
    OtherSession,
    #[error("the session has another unresolved payment")]
    Unresolved,
    #[error("the journal holds its maximum number of payments")]
    Full,
    #[error("the transaction is already recorded for another payment")]
    TransactionReused,
    #[error("a settled payment cannot change state")]
    Regress,
    #[error("write failed: {0}")]
    Io(String),
}

/// Per session: the one unresolved payment, and the settled receipt that lasts longest.
#[derive(Debug, Default, Clone)]
struct SessionEntry {
    unsettled: Option<Arc<str>>,
    best: Option<(Arc<str>, u64)>,
}

#[derive(Debug, Default)]
struct Index {
    receipts: HashMap<Arc<str>, Receipt>,
    sessions: HashMap<SessionId, SessionEntry>,
    transactions: HashMap<String, Arc<str>>,
}

impl Index {
    /// Checks `receipt` against what is recorded (the rules a load and a write share).
    fn check(&self, receipt: &Receipt, max_records: usize) -> Result<SessionId, RecordError> {
        let session = parse_session(&receipt.session).ok_or(RecordError::OtherSession)?;
        match self.receipts.get(receipt.fingerprint.as_str()) {
            Some(known) if known.session != receipt.session => {
                return Err(RecordError::OtherSession);
            }
            Some(known)
                if known.state == ReceiptState::Settled
                    && receipt.state != ReceiptState::Settled =>
            {
                return Err(RecordError::Regress);
            }
            Some(_) => {}
            None if self.receipts.len() >= max_records => return Err(RecordError::Full),
            None => {}
        }
        if receipt.state != ReceiptState::Settled
            && let Some(entry) = self.sessions.get(&session)
            && let Some(other) = &entry.unsettled
            && **other != *receipt.fingerprint
        {
            return Err(RecordError::Unresolved);
        }
        if !receipt.transaction.is_empty()
            && let Some(owner) = self.transactions.get(&transaction_key(receipt))
            && **owner != *receipt.fingerprint
        {
            return Err(RecordError::TransactionReused);
        }
        Ok(session)
    }

    fn apply(&mut self, session: SessionId, receipt: Receipt) {
        let fingerprint: Arc<str> = self
            .receipts
            .get_key_value(receipt.fingerprint.as_str())
            .map_or_else(
                || Arc::from(receipt.fingerprint.as_str()),
                |(k, _)| k.clone(),
            );
        let entry = self.sessions.entry(session).or_default();
        if receipt.state == ReceiptState::Settled {
            if entry.unsettled.as_deref() == Some(&*fingerprint) {
                entry.unsettled = None;
            }
            let longer = entry
                .best
                .as_ref()
                .is_none_or(|(_, expires)| receipt.expires >= *expires);
            if longer {
                entry.best = Some((fingerprint.clone(), receipt.expires));
            }
        } else {
            entry.unsettled = Some(fingerprint.clone());
        }
        if !receipt.transaction.is_empty() {
            self.transactions
                .insert(transaction_key(&receipt), fingerprint.clone());
        }
        self.receipts.insert(fingerprint, receipt);
    }
}

fn transaction_key(receipt: &Receipt) -> String {
    format!("{}:{}", receipt.network, receipt.transaction)
}

fn parse_session(hex_id: &str) -> Option<SessionId> {
    let mut id = [0u8; 32];
    hex::decode_to_slice(hex_id, &mut id).ok()?;
    Some(id)
}

struct Writer {
    file: File,
    /// Held (locked) for the journal's life; closing it releases the lock.
    _lock: File,
}

/// The open journal.
pub struct Journal {
    path: PathBuf,
    writer: Mutex<Option<Writer>>,
    index: RwLock<Index>,
    healthy: AtomicBool,
    max_records: usize,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.path)
            .field("healthy", &self.is_healthy())
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Locks and loads `<dir>/fastlane.jsonl`, creating the directory (0700) and the file
    /// (0600) when missing.
    pub fn open(dir: &Path, max_records: usize) -> Result<Journal, OpenError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| OpenError::Io { path, source }
        };
        if !dir.exists() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(OpenError::Locked { path: lock_path }),
            Err(TryLockError::Error(source)) => {
                return Err(OpenError::Io {
                    path: lock_path,
                    source,
                });
            }
        }
        let path = dir.join(JOURNAL_FILE);
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(&path))?;
        if existed {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io(&path))?;
        } else {
            // The new file's directory entry must survive a crash as well as its lines.
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io(dir))?;
        }
        let mut text = Vec::new();
        file.read_to_end(&mut text).map_err(io(&path))?;
        let index = load(&path, &text, max_records)?;
        Ok(Journal {
            path,
            writer: Mutex::new(Some(Writer { file, _lock: lock })),
            index: RwLock::new(index),
            healthy: AtomicBool::new(true),
            max_records,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Open, and every write so far succeeded.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Stops taking writes and releases the lock; the index stays readable.
    pub fn close(&self) {
        self.healthy.store(false, Ordering::Release);
        self.writer.lock().take();
    }

    pub fn len(&self) -> usize {
        self.index.read().receipts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, fingerprint: &str) -> Option<Receipt> {
        self.index.read().receipts.get(fingerprint).cloned()
    }

    /// The settled receipt of `session` that lasts longest: `(fingerprint, expires)`.
    pub fn best_settled(&self, session: &SessionId) -> Option<(Arc<str>, u64)> {
        self.index.read().sessions.get(session)?.best.clone()
    }

    /// The session's unresolved payment (pending or unknown), if any.
    pub fn unsettled(&self, session: &SessionId) -> Option<Receipt> {
        let index = self.index.read();
        let fingerprint = index.sessions.get(session)?.unsettled.clone()?;
        index.receipts.get(&fingerprint).cloned()
    }

    /// The `limit` receipts that changed last (newest first), and how many there are in all,
    /// for operators. A copy of the index is not made: only the chosen ones are cloned.
    pub fn latest(&self, limit: usize) -> (Vec<Receipt>, usize) {
        self.latest_where(limit, |_| true)
    }

    /// As [`Journal::latest`], among the receipts `wanted` picks.
    pub fn latest_where(
        &self,
        limit: usize,
        wanted: impl Fn(&Receipt) -> bool,
    ) -> (Vec<Receipt>, usize) {
        let index = self.index.read();
        let last_change = |receipt: &Receipt| receipt.settled.max(receipt.started);
        let mut all: Vec<&Receipt> = index
            .receipts
            .values()
            .filter(|receipt| wanted(receipt))
            .collect();
        let total = all.len();
        let newest_first = |a: &&Receipt, b: &&Receipt| {
            last_change(b)
                .cmp(&last_change(a))
                .then_with(|| a.fingerprint.cmp(&b.fingerprint))
        };
        if all.len() > limit && limit > 0 {
            all.select_nth_unstable_by(limit - 1, newest_first);
        }
        all.truncate(limit);
        all.sort_unstable_by(newest_first);
        (all.into_iter().cloned().collect(), total)
    }

    /// Counts by state, for operators.
    pub fn counts(&self) -> [(ReceiptState, usize); 3] {
        let index = self.index.read();
        let mut counts = [
            (ReceiptState::Pending, 0),
            (ReceiptState::Settled, 0),
            (ReceiptState::Unknown, 0),
        ];
        for receipt in index.receipts.values() {
            if let Some(slot) = counts.iter_mut().find(|(state, _)| *state == receipt.state) {
                slot.1 += 1;
            }
        }
        counts
    }

    /// Appends `receipt` as the new state of its fingerprint, after the replay checks; fsynced
    /// before it returns. Blocking: call it off the async workers.
    pub fn record(&self, receipt: Receipt) -> Result<(), RecordError> {
        let mut writer = self.writer.lock();
        let Some(open) = writer.as_mut() else {
            return Err(RecordError::Unavailable);
        };
        if !self.is_healthy() {
            return Err(RecordError::Unavailable);
        }
        let session = self.index.read().check(&receipt, self.max_records)?;
        let mut line = serde_json::to_vec(&receipt).map_err(|e| RecordError::Io(e.to_string()))?;
        line.push(b'\n');
        if let Err(error) = open
            .file
            .write_all(&line)
            .and_then(|()| open.file.sync_data())
        {
            self.healthy.store(false, Ordering::Release);
            tracing::error!(path = %self.path.display(), %error, "fast lane journal write failed; payments stop");
            return Err(RecordError::Io(error.to_string()));
        }
        self.index.write().apply(session, receipt);
        Ok(())
    }

    /// Marks the journal unhealthy as a failed write would (tests and operators' fault drills).
    pub fn mark_unhealthy(&self) {
        self.healthy.store(false, Ordering::Release);
    }
}

fn load(path: &Path, text: &[u8], max_records: usize) -> Result<Index, OpenError> {
    let corrupt = |line: usize, reason: String| OpenError::Corrupt {
        path: path.to_owned(),
        line,
        reason,
    };
    let mut index = Index::default();
    if text.is_empty() {
        return Ok(index);
    }
    let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    let last = lines.len();
    for (number, line) in lines.into_iter().enumerate() {
        let number = number + 1;
        if number == last {
            if !line.is_empty() {
                return Err(corrupt(number, "torn last line (no newline)".into()));
            }
            break;
        }
        let receipt: Receipt =
            serde_json::from_slice(line).map_err(|e| corrupt(number, e.to_string()))?;
        // Loading replays history, so a later line may legitimately settle what an earlier
        // one left pending, or settle a payment twice (a re-recorded response); the cap is
        // checked on writes only.
        let session = match index.check(&receipt, usize::MAX) {
            Ok(session) => session,
            Err(RecordError::OtherSession) => {
                return Err(corrupt(
                    number,
                    format!("payment replay: {} in two sessions", receipt.fingerprint),
                ));
            }
            Err(RecordError::TransactionReused) => {
                return Err(corrupt(
                    number,
                    format!("transaction {} reused", transaction_key(&receipt)),
                ));
            }
            Err(RecordError::Regress) => {
                return Err(corrupt(number, "a settled payment regresses".into()));
            }
            // An older journal may hold two unresolved payments of one session; keep both
            // readable (the later blocks new payments just the same).
            Err(_) => parse_session(&receipt.session)
                .ok_or_else(|| corrupt(number, "bad session id".into()))?,
        };
        index.apply(session, receipt);
    }
    if index.receipts.len() > max_records {
        tracing::warn!(
            path = %path.display(),
            records = index.receipts.len(),
            max_records,
            "fast lane journal holds more payments than max_records; new payments are refused"
        );
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirements() -> PaymentRequirements {
        PaymentRequirements {
            scheme: "exact".into(),
            network: "xrpl:1".into(),
            amount: "1000000".into(),
            asset: "XRP".into(),
            pay_to: "rDest".into(),
            max_timeout_seconds: 60,
            extra: None,
        }
    }

    fn receipt(session: u8, fingerprint: &str, state: ReceiptState, tx: &str) -> Receipt {
        Receipt {
            session: hex::encode([session; 32]),
            fingerprint: fingerprint.into(),
            state,
            kind: ReceiptKind::Payment,
            network: "xrpl:1".into(),
            payer: "rPayer".into(),
            requirements: requirements(),
            transaction: tx.into(),
            policy_id: "p".into(),
            started: 1_800_000_000,
            settled: if state == ReceiptState::Settled {
                1_800_000_010
            } else {
                0
            },
            expires: if state == ReceiptState::Settled {
                1_800_000_310
            } else {
                0
            },
            response: None,
            listing: String::new(),
            delivered: false,
        }
    }

    #[test]
    fn writes_survive_reopen_and_last_line_wins() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        {
            let journal = Journal::open(&data, 100).unwrap();
            journal
                .record(receipt(1, "f1", ReceiptState::Pending, ""))
                .unwrap();
            journal
                .record(receipt(1, "f1", ReceiptState::Settled, "TX1"))
                .unwrap();
        }
        let mode = std::fs::metadata(&data).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let mode = std::fs::metadata(data.join(JOURNAL_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let journal = Journal::open(&data, 100).unwrap();
        assert_eq!(journal.get("f1").unwrap().state, ReceiptState::Settled);
        let best = journal.best_settled(&[1; 32]).unwrap();
        assert_eq!((&*best.0, best.1), ("f1", 1_800_000_310));
        assert!(journal.unsettled(&[1; 32]).is_none());
    }

    #[test]
    fn second_opener_is_refused_while_the_first_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let first = Journal::open(dir.path(), 100).unwrap();
        assert!(matches!(
            Journal::open(dir.path(), 100),
            Err(OpenError::Locked { .. })
        ));
        first.close();
        drop(first);
        Journal::open(dir.path(), 100).unwrap();
    }

    #[test]
    fn replays_and_conflicts_are_refused_on_write() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), 3).unwrap();
        journal
            .record(receipt(1, "f1", ReceiptState::Pending, ""))
            .unwrap();
        assert_eq!(
            journal.record(receipt(2, "f1", ReceiptState::Pending, "")),
            Err(RecordError::OtherSession)
        );
        assert_eq!(
            journal.record(receipt(1, "f2", ReceiptState::Pending, "")),
            Err(RecordError::Unresolved)
        );
        journal
            .record(receipt(1, "f1", ReceiptState::Settled, "TX"))
            .unwrap();
        assert_eq!(
            journal.record(receipt(1, "f1", ReceiptState::Unknown, "")),
            Err(RecordError::Regress)
        );
        assert_eq!(
            journal.record(receipt(3, "f3", ReceiptState::Settled, "TX")),
            Err(RecordError::TransactionReused)
        );
        journal
            .record(receipt(3, "f3", ReceiptState::Pending, ""))
            .unwrap();
        journal
            .record(receipt(4, "f4", ReceiptState::Pending, ""))
            .unwrap();
        assert_eq!(
            journal.record(receipt(5, "f5", ReceiptState::Pending, "")),
            Err(RecordError::Full)
        );
    }

    #[test]
    fn corrupt_files_refuse_to_open() {
        let line = |r: &Receipt| serde_json::to_string(r).unwrap() + "\n";
        let cases = [
            line(&receipt(1, "f1", ReceiptState::Settled, ""))
                + &line(&receipt(2, "f1", ReceiptState::Settled, "")),
            line(&receipt(1, "f1", ReceiptState::Settled, "TX"))
                + &line(&receipt(2, "f2", ReceiptState::Settled, "TX")),
            line(&receipt(1, "f1", ReceiptState::Settled, ""))
                .trim_end()
                .to_owned(),
            "{not json}\n".to_owned(),
            line(&receipt(1, "f1", ReceiptState::Settled, "")).replace("\"settled\"", "\"lost\""),
        ];
        for (n, text) in cases.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(JOURNAL_FILE), text).unwrap();
            let opened = Journal::open(dir.path(), 100);
            assert!(
                matches!(opened, Err(OpenError::Corrupt { .. })),
                "case {n}: {opened:?}"
            );
        }
    }

    #[test]
    fn closed_or_unhealthy_journal_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), 100).unwrap();
        journal.mark_unhealthy();
        assert_eq!(
            journal.record(receipt(1, "f1", ReceiptState::Pending, "")),
            Err(RecordError::Unavailable)
        );
        let other = tempfile::tempdir().unwrap();
        let journal = Journal::open(other.path(), 100).unwrap();
        journal.close();
        assert!(!journal.is_healthy());
        assert_eq!(
            journal.record(receipt(1, "f1", ReceiptState::Pending, "")),
            Err(RecordError::Unavailable)
        );
    }
}
