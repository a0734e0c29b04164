//! The serde form of bans: what is exported for persistence and listed to operators.
//!
//! `until` is wall-clock time written as UTC RFC 3339 with nanoseconds (trailing zeros
//! trimmed), so a saved ban means the same moment after a restart.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// A moment as unix nanoseconds; (de)serialised as RFC 3339 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WallTime(pub i64);

/// The zero time Go prints for a permanent ban's `until`.
pub(crate) const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

impl fmt::Display for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.rem_euclid(NANOS_PER_SEC) as u32;
        crate::sys::walltime::write_rfc3339(f, self.0.div_euclid(NANOS_PER_SEC), nanos)
    }
}

impl WallTime {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
    pub fn parse(text: &str) -> Option<WallTime> {
        let (secs, nanos) = crate::sys::walltime::parse_rfc3339(text)?;
        secs.checked_mul(NANOS_PER_SEC)?
            .checked_add(i64::from(nanos))
            .map(WallTime)
    }
}

impl Serialize for WallTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for WallTime {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        WallTime::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid RFC 3339 time {text:?}")))
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// One saved ban or offense history: a client key (`203.0.113.9`, `2001:db8:1:2::/64`) or a
/// range (`198.51.0.0/16`). `until` is absent for permanent bans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BanRecord {
    pub client: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<WallTime>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub permanent: bool,
    #[serde(default)]
    pub offenses: u32,
}

/// Everything the registry remembers that is worth saving: every client with offense history
/// (ended bans included, so escalation survives a restart) and every active range, each list
/// sorted by client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BanSnapshot {
    #[serde(default)]
    pub clients: Vec<BanRecord>,
    #[serde(default)]
    pub ranges: Vec<BanRecord>,
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub clients: usize,
    pub ranges: usize,
    /// Unparseable, now exempt, long ended or expired records.
    pub skipped: usize,
    /// Records that did not fit (table or range limit).
    pub dropped: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_rfc3339_nano() {
        assert_eq!(WallTime(0).to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(
            WallTime(1_767_225_600 * NANOS_PER_SEC).to_string(),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            WallTime(1_767_225_600 * NANOS_PER_SEC + 120_000_000).to_string(),
            "2026-01-01T00:00:00.12Z"
        );
        assert_eq!(
            WallTime(951_782_400 * NANOS_PER_SEC + 1).to_string(),
            "2000-02-29T00:00:00.000000001Z"
        );
        assert_eq!(WallTime(-NANOS_PER_SEC).to_string(), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn parses_what_it_writes_and_offsets() {
        for nanos in [
            0,
            1,
            951_782_400 * NANOS_PER_SEC + 1,
            1_767_225_600_123_456_789,
        ] {
            let text = WallTime(nanos).to_string();
            assert_eq!(WallTime::parse(&text), Some(WallTime(nanos)), "{text}");
        }
        assert_eq!(
            WallTime::parse("2026-01-01T01:00:00+01:00"),
            WallTime::parse("2026-01-01T00:00:00Z")
        );
        for bad in [
            "",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T24:00:00Z",
            "yyyy-01-01T00:00:00Z",
            "2026-01-01T00:00:00+0100",
        ] {
            assert_eq!(WallTime::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn records_serialise_in_the_saved_shape() {
        let permanent = BanRecord {
            client: "203.0.113.9".into(),
            until: None,
            permanent: true,
            offenses: 1,
        };
        assert_eq!(
            serde_json::to_string(&permanent).unwrap(),
            r#"{"client":"203.0.113.9","permanent":true,"offenses":1}"#
        );
        let timed = BanRecord {
            client: "2001:db8:1:2::/64".into(),
            until: Some(WallTime(1_767_225_600 * NANOS_PER_SEC)),
            permanent: false,
            offenses: 3,
        };
        let text = serde_json::to_string(&timed).unwrap();
        assert_eq!(
            text,
            r#"{"client":"2001:db8:1:2::/64","until":"2026-01-01T00:00:00Z","offenses":3}"#
        );
        assert_eq!(serde_json::from_str::<BanRecord>(&text).unwrap(), timed);
        assert!(serde_json::from_str::<BanRecord>(r#"{"client":"x","until":"soon"}"#).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_time_round_trips(nanos in -9_000_000_000_000_000_000i64..=9_000_000_000_000_000_000i64) {
            let text = WallTime(nanos).to_string();
            proptest::prop_assert_eq!(WallTime::parse(&text), Some(WallTime(nanos)));
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,40}") {
            let _ = WallTime::parse(&text);
        }
    }
}
