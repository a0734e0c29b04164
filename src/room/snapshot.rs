//! `queue.snapshot` format: the line exported at shutdown and restored at start.
//!
//! Times are RFC 3339 strings (UTC on export; any offset accepted on import). A never-polled ticket
//! carries Go's zero time `0001-01-01T00:00:00Z`, the form existing snapshot files use.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use std::collections::HashSet;

use super::Room;
use super::line::Key;
use super::tokens::{
    self, Entry, HAS_PASS, PROMOTED, REFRESH_DUE, SEEN, TokenId, parse_token, token_hex,
};

pub(crate) const SNAPSHOT_VERSION: u32 = 1;
/// Longest token accepted on import.
pub(crate) const MAX_TOKEN_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    pub exported_at: WallTime,
    #[serde(default)]
    pub tickets: Vec<SnapshotTicket>,
    #[serde(default)]
    pub passes: Vec<SnapshotPass>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotTicket {
    pub token: String,
    pub created_at: WallTime,
    pub last_seen: WallTime,
    pub last_poll: WallTime,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_key: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub seen: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub promoted: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub has_pass: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotPass {
    pub token: String,
    pub expires_at: WallTime,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Why a snapshot was refused (the caller renames the file `.bad`, except for `NotPristine`).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("queue snapshot is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("queue snapshot version {0} is not supported (want 1)")]
    Version(u32),
    #[error("queue snapshot has an empty token")]
    EmptyToken,
    #[error("queue snapshot has a token longer than 256 characters")]
    TokenTooLong,
    #[error("queue snapshot has a duplicate token")]
    DuplicateToken,
    #[error("the waiting room already has visitors; a snapshot can only be restored at start")]
    NotPristine,
}

impl Snapshot {
    pub fn from_json(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    pub fn to_json(&self) -> Result<Vec<u8>, SnapshotError> {
        Ok(serde_json::to_vec(self)?)
    }
}

/// A wall-clock instant in Unix milliseconds; `ZERO` is Go's zero time (year 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WallTime(pub i64);

/// Unix milliseconds of 0001-01-01T00:00:00Z.
const ZERO_TIME_MS: i64 = -62_135_596_800_000;

impl WallTime {
    pub const ZERO: WallTime = WallTime(ZERO_TIME_MS);

    pub fn is_zero(self) -> bool {
        self.0 == ZERO_TIME_MS
    }

    pub fn from_system(time: SystemTime) -> WallTime {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => WallTime(i64::try_from(after.as_millis()).unwrap_or(i64::MAX)),
            Err(before) => {
                WallTime(-i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX))
            }
        }
    }

    pub fn to_system(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_millis(self.0.unsigned_abs())
        } else {
            UNIX_EPOCH
                .checked_sub(Duration::from_millis(self.0.unsigned_abs()))
                .unwrap_or(UNIX_EPOCH)
        }
    }

    /// Parses RFC 3339 (`2024-05-01T12:00:00.25Z`, `…+02:00`); sub-millisecond digits are dropped.
    pub fn parse(text: &str) -> Option<WallTime> {
        let (secs, nanos) = crate::sys::walltime::parse_rfc3339(text)?;
        secs.checked_mul(1_000)?
            .checked_add(i64::from(nanos / 1_000_000))
            .map(WallTime)
    }
}

impl fmt::Display for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.rem_euclid(1_000);
        crate::sys::walltime::write_rfc3339(f, self.0.div_euclid(1_000), millis as u32 * 1_000_000)
    }
}

impl Serialize for WallTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for WallTime {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<WallTime, D::Error> {
        let text = String::deserialize(deserializer)?;
        WallTime::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid RFC 3339 time {text:?}")))
    }
}

impl Room {
    /// The line in order, with times on the wall clock, for `queue.snapshot`.
    pub fn export_snapshot(&self, now_wall: SystemTime) -> Snapshot {
        let shared = &self.shared;
        let now = shared.now_ms();
        let wall_now = WallTime::from_system(now_wall);
        let to_wall = |ms: u64| WallTime(wall_now.0.saturating_sub(now.saturating_sub(ms) as i64));
        let mut entries: Vec<(TokenId, Entry)> = Vec::with_capacity(shared.tokens.len() as usize);
        for index in 0..tokens::SHARD_COUNT {
            let shard = shared.tokens.lock_shard(index);
            entries.extend(shard.iter().map(|(token, entry)| (*token, *entry)));
        }
        entries.sort_unstable_by_key(|(_, entry)| entry.key);
        let tickets = entries
            .iter()
            .map(|(token, entry)| SnapshotTicket {
                token: token_hex(token),
                created_at: to_wall(entry.created()),
                last_seen: to_wall(entry.last_seen()),
                last_poll: entry.last_poll().map_or(WallTime::ZERO, to_wall),
                client_key: entry.client.map(|ip| ip.to_string()).unwrap_or_default(),
                seen: entry.has(SEEN),
                promoted: entry.has(PROMOTED),
                has_pass: entry.has(HAS_PASS),
            })
            .collect();
        let passes = shared
            .passes
            .lock()
            .iter()
            .filter(|(_, expiry)| **expiry > now)
            .map(|(token, expiry)| SnapshotPass {
                token: token.to_string(),
                expires_at: WallTime(wall_now.0.saturating_add((*expiry - now) as i64)),
            })
            .collect();
        Snapshot {
            version: SNAPSHOT_VERSION,
            exported_at: wall_now,
            tickets,
            passes,
        }
    }

    /// Restores an exported line into a pristine room: tickets dead at export time are dropped,
    /// the rest renumbered 1…n in order with their times shifted by the downtime (cookies are
    /// re-sent on the first poll); unexpired VIP passes keep their absolute expiry.
    /// Returns how many tickets were restored.
    pub fn import_snapshot(
        &self,
        snapshot: Snapshot,
        now_wall: SystemTime,
    ) -> Result<usize, SnapshotError> {
        if snapshot.version != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version(snapshot.version));
        }
        check_tokens(snapshot.tickets.iter().map(|ticket| ticket.token.as_str()))?;
        check_tokens(snapshot.passes.iter().map(|pass| pass.token.as_str()))?;
        let shared = &self.shared;
        if !shared.core.lock().line.is_pristine() || shared.tokens.len() > 0 {
            return Err(SnapshotError::NotPristine);
        }
        let settings = shared.settings.load();
        let (ttl, grace) = (settings.ttl_ms() as i64, settings.grace_ms() as i64);
        let exported = snapshot.exported_at.0;
        let now = shared.now_ms();
        let wall_now = WallTime::from_system(now_wall).0;
        // Same age as at export: the downtime is not held against anyone.
        let shift =
            |time: WallTime| now.saturating_sub(exported.saturating_sub(time.0).max(0) as u64);
        let kept: Vec<(TokenId, &SnapshotTicket)> = snapshot
            .tickets
            .iter()
            .filter(|ticket| {
                let idle = exported.saturating_sub(ticket.last_seen.0) > ttl;
                let never_polled = grace > 0
                    && !ticket.seen
                    && exported.saturating_sub(ticket.created_at.0) > grace;
                !(idle || never_polled)
            })
            .filter_map(|ticket| match parse_token(&ticket.token) {
                Some(token) => Some((token, ticket)),
                None => {
                    tracing::warn!(
                        "queue snapshot: skipped a ticket whose token is not 32 hex digits"
                    );
                    None
                }
            })
            .collect();
        let keys: Vec<Key> = {
            let mut core = shared.core.lock();
            kept.iter().map(|_| core.line.issue()).collect()
        };
        for ((token, ticket), key) in kept.iter().zip(keys) {
            let mut entry = Entry::new(
                key,
                shift(ticket.created_at),
                ticket.client_key.parse().ok(),
            );
            entry.set_last_seen(shift(ticket.last_seen));
            if !ticket.last_poll.is_zero() {
                entry.set_last_poll(shift(ticket.last_poll));
            }
            entry.set_cookie_set_at(entry.last_seen());
            entry.set(SEEN, ticket.seen);
            entry.set(PROMOTED, ticket.promoted);
            entry.set(HAS_PASS, ticket.has_pass);
            entry.set(REFRESH_DUE, true);
            let mut shard = shared.tokens.lock_for(token);
            shard.insert(*token, entry);
            shared.tokens.note_added(token, &entry);
        }
        let mut passes = shared.passes.lock();
        for pass in &snapshot.passes {
            let left = pass.expires_at.0.saturating_sub(wall_now);
            if left > 0 {
                passes.insert(pass.token.as_str().into(), now.saturating_add(left as u64));
            }
        }
        Ok(kept.len())
    }
}

fn check_tokens<'a>(tokens: impl Iterator<Item = &'a str>) -> Result<(), SnapshotError> {
    let mut seen = HashSet::new();
    for token in tokens {
        if token.is_empty() {
            return Err(SnapshotError::EmptyToken);
        }
        if token.chars().count() > MAX_TOKEN_LEN {
            return Err(SnapshotError::TokenTooLong);
        }
        if !seen.insert(token) {
            return Err(SnapshotError::DuplicateToken);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_rfc3339() {
        let time = WallTime(1_714_564_800_250);
        assert_eq!(time.to_string(), "2024-05-01T12:00:00.25Z");
        assert_eq!(WallTime::parse("2024-05-01T12:00:00.250Z"), Some(time));
        assert_eq!(
            WallTime::parse("2024-05-01T14:00:00.250123+02:00"),
            Some(time)
        );
        assert_eq!(WallTime::parse("1970-01-01T00:00:00Z"), Some(WallTime(0)));
        assert_eq!(WallTime::ZERO.to_string(), "0001-01-01T00:00:00Z");
        assert_eq!(
            WallTime::parse("0001-01-01T00:00:00Z"),
            Some(WallTime::ZERO)
        );
        for bad in [
            "",
            "yesterday",
            "2024-13-01T00:00:00Z",
            "2024-05-01T12:00:00",
            "2024-05-01T12:00:00.Z",
        ] {
            assert_eq!(WallTime::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn system_time_round_trip() {
        let now = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(WallTime::from_system(now).to_system(), now);
    }

    #[test]
    fn json_shape_matches_the_format() {
        let snapshot = Snapshot {
            version: 1,
            exported_at: WallTime(0),
            tickets: vec![SnapshotTicket {
                token: "ab".into(),
                created_at: WallTime(0),
                last_seen: WallTime(0),
                last_poll: WallTime::ZERO,
                client_key: "203.0.113.7".into(),
                seen: true,
                promoted: false,
                has_pass: false,
            }],
            passes: vec![],
        };
        let json = String::from_utf8(snapshot.to_json().unwrap()).unwrap();
        assert_eq!(
            json,
            r#"{"version":1,"exported_at":"1970-01-01T00:00:00Z","tickets":[{"token":"ab","created_at":"1970-01-01T00:00:00Z","last_seen":"1970-01-01T00:00:00Z","last_poll":"0001-01-01T00:00:00Z","client_key":"203.0.113.7","seen":true}],"passes":[]}"#
        );
        assert_eq!(Snapshot::from_json(json.as_bytes()).unwrap(), snapshot);
        assert!(matches!(
            Snapshot::from_json(b"garbage"),
            Err(SnapshotError::Json(_))
        ));
    }
}
