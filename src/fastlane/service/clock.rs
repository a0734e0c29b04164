//! Wall-clock instants as the fast lane writes them: RFC 3339 in UTC, whole seconds, and the
//! zero time `0001-01-01T00:00:00Z` for "never" (0 internally).

use std::time::{SystemTime, UNIX_EPOCH};

/// How "not set" is written.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Seconds since the Unix epoch now.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// `unix` as `YYYY-MM-DDTHH:MM:SSZ`; 0 is the zero time.
pub fn format_rfc3339(unix: u64) -> String {
    if unix == 0 {
        return ZERO_TIME.to_owned();
    }
    let days = i64::try_from(unix / 86_400).unwrap_or(i64::MAX / 2);
    let seconds_of_day = unix % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds_of_day / 3600,
        seconds_of_day / 60 % 60,
        seconds_of_day % 60
    )
}

/// Reads RFC 3339 (`Z` or a numeric offset, optional fraction, which is dropped). The zero time
/// and anything before 1970 read as 0.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || rb[3] != b':' {
                return None;
            }
            let sign = match rb[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let unix = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(u64::try_from(unix).unwrap_or(0))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (eras of 400 years).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let shifted_month = (month + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants() {
        assert_eq!(format_rfc3339(0), ZERO_TIME);
        assert_eq!(format_rfc3339(1), "1970-01-01T00:00:01Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(1_800_000_000), "2027-01-15T08:00:00Z");
        assert_eq!(parse_rfc3339("2027-01-15T08:00:00Z"), Some(1_800_000_000));
        assert_eq!(
            parse_rfc3339("2027-01-15T10:00:00.123+02:00"),
            Some(1_800_000_000)
        );
        assert_eq!(parse_rfc3339(ZERO_TIME), Some(0));
        for bad in [
            "",
            "2027-01-15",
            "2027-13-15T08:00:00Z",
            "2027-01-15T08:00:00",
            "x027-01-15T08:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn round_trips(unix in 1u64..253_402_300_799) {
            prop_assert_eq!(parse_rfc3339(&format_rfc3339(unix)), Some(unix));
        }

        #[test]
        fn parse_never_panics(text in ".{0,40}") {
            let _ = parse_rfc3339(&text);
        }
    }
}
