//! RFC 3339 (UTC) text for wall-clock instants, shared by every file format Concert writes
//! (`queue.snapshot`, `bans.json`, `settings.json`). No date crate: only the proleptic Gregorian
//! arithmetic these formats need.
//!
//! Output matches Go's `time.RFC3339Nano`, the form existing files hold: UTC, `Z`, and a
//! fraction only when non-zero, without trailing zeros.

use std::fmt;

const SECS_PER_DAY: i64 = 86_400;

/// Writes `secs` + `nanos` since the Unix epoch as `YYYY-MM-DDTHH:MM:SS[.fraction]Z`.
pub(crate) fn write_rfc3339(f: &mut fmt::Formatter<'_>, secs: i64, nanos: u32) -> fmt::Result {
    let days = secs.div_euclid(SECS_PER_DAY);
    let of_day = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    write!(
        f,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3_600,
        of_day / 60 % 60,
        of_day % 60
    )?;
    if nanos > 0 {
        let digits = format!("{nanos:09}");
        write!(f, ".{}", digits.trim_end_matches('0'))?;
    }
    f.write_str("Z")
}

/// Appends the same text as [`write_rfc3339`] to `out`, digit by digit: the request history
/// writes one per line, and the formatting machinery costs several times more.
pub(crate) fn push_rfc3339(out: &mut Vec<u8>, secs: i64, nanos: u32) {
    let days = secs.div_euclid(SECS_PER_DAY);
    let of_day = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    if (0..10_000).contains(&year) {
        push_digits(out, year as u64, 4);
    } else {
        out.extend_from_slice(year.to_string().as_bytes());
    }
    out.push(b'-');
    push_digits(out, month as u64, 2);
    out.push(b'-');
    push_digits(out, day as u64, 2);
    out.push(b'T');
    push_digits(out, (of_day / 3_600) as u64, 2);
    out.push(b':');
    push_digits(out, (of_day / 60 % 60) as u64, 2);
    out.push(b':');
    push_digits(out, (of_day % 60) as u64, 2);
    if nanos > 0 {
        let mut fraction = nanos.min(999_999_999);
        let mut width = 9;
        while fraction.is_multiple_of(10) {
            fraction /= 10;
            width -= 1;
        }
        out.push(b'.');
        push_digits(out, u64::from(fraction), width);
    }
    out.push(b'Z');
}

/// `value` as exactly `width` decimal digits, zero-padded (higher digits dropped).
fn push_digits(out: &mut Vec<u8>, mut value: u64, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` into seconds and nanoseconds since the
/// Unix epoch. Fractions beyond nanoseconds are refused rather than silently rounded.
pub(crate) fn parse_rfc3339(text: &str) -> Option<(i64, u32)> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
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
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        let value: u32 = fraction.get(..digits)?.parse().ok()?;
        nanos = value * 10u32.pow(9 - digits as u32);
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
            sign * (h * 3_600 + m * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * SECS_PER_DAY + hour * 3_600 + minute * 60 + second - offset;
    Some((secs, nanos))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12; // March = 0
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01 (inverse of `days_from_civil`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Shown(i64, u32);
    impl fmt::Display for Shown {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write_rfc3339(f, self.0, self.1)
        }
    }

    #[test]
    fn formats_like_go_rfc3339_nano() {
        assert_eq!(Shown(0, 0).to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(
            Shown(1_714_564_800, 250_000_000).to_string(),
            "2024-05-01T12:00:00.25Z"
        );
        assert_eq!(
            Shown(-62_135_596_800, 0).to_string(),
            "0001-01-01T00:00:00Z"
        );
        assert_eq!(
            Shown(951_782_400, 1).to_string(),
            "2000-02-29T00:00:00.000000001Z"
        );
    }

    #[test]
    fn pushed_text_equals_the_formatted_text() {
        for (secs, nanos) in [
            (0, 0),
            (1_714_564_800, 250_000_000),
            (-62_135_596_800, 0),
            (951_782_400, 1),
            (1_767_225_600, 123_456_789),
            (253_402_300_799, 999_999_999),
            (-1, 100),
        ] {
            let mut pushed = Vec::new();
            push_rfc3339(&mut pushed, secs, nanos);
            assert_eq!(
                String::from_utf8(pushed).unwrap(),
                Shown(secs, nanos).to_string()
            );
        }
    }

    #[test]
    fn parses_offsets_fractions_and_refuses_garbage() {
        assert_eq!(
            parse_rfc3339("2024-05-01T14:00:00.25+02:00"),
            Some((1_714_564_800, 250_000_000))
        );
        assert_eq!(
            parse_rfc3339("0001-01-01T00:00:00Z"),
            Some((-62_135_596_800, 0))
        );
        for bad in [
            "",
            "2024-13-01T00:00:00Z",
            "2024-05-01T00:00:00",
            "2024-05-01T00:00:00.Z",
            "2024-05-01T00:00:00.1234567890Z",
            "2024-05-01T00:00:00+2:00",
            "nope-05-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn round_trips_across_eras() {
        for secs in [
            -62_135_596_800i64,
            -1,
            0,
            86_399,
            951_782_400,
            4_102_444_800,
        ] {
            let text = Shown(secs, 123_000).to_string();
            assert_eq!(parse_rfc3339(&text), Some((secs, 123_000)), "{text}");
        }
    }
}
