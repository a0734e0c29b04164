//! The serde form of bans: what is exported for persistence and listed to operators.
//!
//! `until` is wall-clock time written as UTC RFC 3339 with nanoseconds (trailing zeros
//! trimmed), so a saved ban means the same moment after a restart.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOS_PER_SEC: i64 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

/// A moment as unix nanoseconds; (de)serialised as RFC 3339 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WallTime(pub i64);

/// The zero time Go prints for a permanent ban's `until`.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

impl fmt::Display for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.div_euclid(NANOS_PER_SEC);
        let nanos = self.0.rem_euclid(NANOS_PER_SEC);
        let days = secs.div_euclid(SECS_PER_DAY);
        let of_day = secs.rem_euclid(SECS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            of_day / 3600,
            of_day / 60 % 60,
            of_day % 60
        )?;
        if nanos > 0 {
            let fraction = format!("{nanos:09}");
            write!(f, ".{}", fraction.trim_end_matches('0'))?;
        }
        f.write_str("Z")
    }
}

impl WallTime {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
    pub fn parse(text: &str) -> Option<WallTime> {
        let bytes = text.as_bytes();
        if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
            return None;
        }
        if !matches!(bytes[10], b'T' | b't') || bytes[16] != b':' {
            return None;
        }
        let number = |range: std::ops::Range<usize>| -> Option<i64> {
            let part = text.get(range)?;
            part.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
        let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
            return None;
        }
        if second > 60 {
            return None;
        }
        let mut rest = text.get(19..)?;
        let mut nanos = 0i64;
        if let Some(fraction) = rest.strip_prefix('.') {
            let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 || digits > 9 {
                return None;
            }
            let value: i64 = fraction.get(..digits)?.parse().ok()?;
            nanos = value * 10i64.pow(9 - digits as u32);
            rest = fraction.get(digits..)?;
        }
        let offset = match rest {
            "Z" | "z" => 0,
            _ => {
                let sign = match rest.as_bytes().first()? {
                    b'+' => 1,
                    b'-' => -1,
                    _ => return None,
                };
                let (h, m) = rest.get(1..)?.split_once(':')?;
                if h.len() != 2 || m.len() != 2 {
                    return None;
                }
                let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
                sign * (h * 3600 + m * 60)
            }
        };
        let days = days_from_civil(year, month, day);
        let secs = days * SECS_PER_DAY + hour * 3600 + minute * 60 + second - offset;
        secs.checked_mul(NANOS_PER_SEC)?
            .checked_add(nanos)
            .map(WallTime)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
