//! Go-syntax durations: the parser behind every duration setting (`300ms`, `1h30m`, `1.5s`, `0`)
//! and the formatter that prints them back exactly as Go does (`5m0s`, `300ms`, `0s`), the form
//! operators' environment and settings files are written in.
//!
//! Durations are kept as `std::time::Duration`; Go's limit of `i64::MAX` nanoseconds still
//! applies to parsed input, so every value read back from a file is one Go could write.

use std::time::Duration;

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SEC: u128 = 1_000_000_000;
/// Go's `time.Duration` is a signed 64-bit nanosecond count.
const MAX_NANOS: u128 = i64::MAX as u128;
/// Magnitude of `i64::MIN`, the most negative Go duration.
const MAX_NEGATIVE_NANOS: u128 = MAX_NANOS + 1;
/// Fraction digits beyond this cannot change a nanosecond result for any unit up to hours.
const MAX_FRACTION_DIGITS: u32 = 24;

/// Nanoseconds per unit, longest names first so `ms` wins over `m`.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => NANOS_PER_MICRO,
        "ms" => NANOS_PER_MILLI,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3_600 * NANOS_PER_SEC,
        _ => return None,
    })
}

/// Parses a Go duration, sign included, into signed nanoseconds (Go's `time.ParseDuration`).
pub(crate) fn parse_signed(text: &str) -> Result<i64, String> {
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if body == "0" {
        return Ok(0);
    }
    if body.is_empty() {
        return Err("empty duration".to_string());
    }
    let limit = if negative {
        MAX_NEGATIVE_NANOS
    } else {
        MAX_NANOS
    };
    let mut total: u128 = 0;
    let mut rest = body;
    while !rest.is_empty() {
        let (whole, after_whole) = split_digits(rest);
        let (fraction, after_fraction) = match after_whole.strip_prefix('.') {
            Some(after_dot) => {
                let (digits, tail) = split_digits(after_dot);
                (Some(digits), tail)
            }
            None => (None, after_whole),
        };
        if whole.is_empty() && fraction.is_none_or(str::is_empty) {
            return Err("expected a number before the unit".to_string());
        }
        let unit_len = after_fraction
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after_fraction.len());
        if unit_len == 0 {
            return Err("missing unit (ns, us, ms, s, m or h)".to_string());
        }
        let (unit_text, tail) = after_fraction.split_at(unit_len);
        let unit = unit_nanos(unit_text).ok_or_else(|| format!("unknown unit {unit_text:?}"))?;
        let mut part = digits_value(whole, limit)
            .and_then(|value| value.checked_mul(unit))
            .filter(|value| *value <= limit)
            .ok_or_else(overflow)?;
        if let Some(digits) = fraction {
            part += fraction_nanos(digits, unit);
        }
        total = total
            .checked_add(part)
            .filter(|value| *value <= limit)
            .ok_or_else(overflow)?;
        rest = tail;
    }
    let magnitude = i128::try_from(total).map_err(|_| overflow())?;
    let signed = if negative { -magnitude } else { magnitude };
    i64::try_from(signed).map_err(|_| overflow())
}

fn overflow() -> String {
    "duration is too long".to_string()
}

/// Splits off the leading ASCII digits.
fn split_digits(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text.split_at(end)
}

/// Value of a digit run, or `None` once it exceeds `limit` (so huge inputs stay cheap).
fn digits_value(digits: &str, limit: u128) -> Option<u128> {
    let mut value: u128 = 0;
    for digit in digits.bytes() {
        value = value
            .checked_mul(10)?
            .checked_add(u128::from(digit - b'0'))?;
        if value > limit {
            return None;
        }
    }
    Some(value)
}

/// Nanoseconds contributed by the digits after the decimal point, truncated like Go.
fn fraction_nanos(digits: &str, unit: u128) -> u128 {
    let mut numerator: u128 = 0;
    let mut scale: u128 = 1;
    for digit in digits.bytes().take(MAX_FRACTION_DIGITS as usize) {
        numerator = numerator * 10 + u128::from(digit - b'0');
        scale *= 10;
    }
    numerator * unit / scale
}

/// Parses a non-negative Go duration (`300ms`, `1h30m`, `1.5s`, `0`).
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let nanos = parse_signed(text)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| "must not be negative".to_string())
}

/// Environment form: a Go duration, or a bare integer meaning nanoseconds (existing environment
/// files hold either).
pub(crate) fn parse_env_duration(text: &str) -> Result<Duration, String> {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        if text.starts_with('-') && unsigned.bytes().any(|b| b != b'0') {
            return Err("must not be negative".to_string());
        }
        return digits_value(unsigned, MAX_NANOS)
            .and_then(|nanos| u64::try_from(nanos).ok())
            .map(Duration::from_nanos)
            .ok_or_else(overflow);
    }
    parse_go_duration(text)
}

/// Formats like Go's `time.Duration.String()`: `0s`, `1.5µs`, `300ms`, `1.5s`, `2m0s`, `1h0m0s`.
pub fn format_go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < NANOS_PER_MICRO {
        return format!("{nanos}ns");
    }
    if nanos < NANOS_PER_MILLI {
        return format!("{}µs", with_fraction(nanos, NANOS_PER_MICRO, 3));
    }
    if nanos < NANOS_PER_SEC {
        return format!("{}ms", with_fraction(nanos, NANOS_PER_MILLI, 6));
    }
    let seconds_part = with_fraction(nanos % (60 * NANOS_PER_SEC), NANOS_PER_SEC, 9);
    let whole_minutes = nanos / (60 * NANOS_PER_SEC);
    let hours = whole_minutes / 60;
    let minutes = whole_minutes % 60;
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds_part}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds_part}s")
    } else {
        format!("{seconds_part}s")
    }
}

/// `value / unit` with up to `digits` decimals, trailing zeros dropped (`1500, 1000, 3` → `1.5`).
fn with_fraction(value: u128, unit: u128, digits: usize) -> String {
    let whole = value / unit;
    let remainder = value % unit;
    if remainder == 0 {
        return whole.to_string();
    }
    let fraction = format!("{remainder:0digits$}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_the_go_forms() {
        assert_eq!(parse_go_duration("300ms"), Ok(ms(300)));
        assert_eq!(parse_go_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_go_duration(".5s"), Ok(ms(500)));
        assert_eq!(parse_go_duration("1.s"), Ok(ms(1000)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("+5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_go_duration("-0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_go_duration("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_go_duration("2µs"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_go_duration("2μs"), Ok(Duration::from_micros(2)));
        assert_eq!(
            parse_go_duration("1h2m3s4ms"),
            Ok(Duration::from_millis(3_723_004))
        );
        assert_eq!(
            parse_go_duration("1.0000000015s"),
            Ok(Duration::from_nanos(1_000_000_001))
        );
    }

    #[test]
    fn rejects_malformed_durations() {
        for bad in [
            "", "5", "s", ".s", "1x", "1.5", "abc", "1s2", "--1s", "1 s", " 1s", ".",
        ] {
            assert!(
                parse_go_duration(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn negative_durations_parse_signed_but_are_refused_unsigned() {
        assert_eq!(parse_signed("-1s"), Ok(-1_000_000_000));
        assert_eq!(
            parse_go_duration("-1s"),
            Err("must not be negative".to_string())
        );
    }

    #[test]
    fn enforces_the_go_range() {
        assert_eq!(parse_signed("2562047h47m16.854775807s"), Ok(i64::MAX));
        assert!(parse_signed("2562047h47m16.854775808s").is_err());
        assert_eq!(parse_signed("-2562047h47m16.854775808s"), Ok(i64::MIN));
        assert!(parse_signed("9999999999999999999999h").is_err());
    }

    #[test]
    fn env_form_accepts_bare_nanoseconds() {
        assert_eq!(parse_env_duration("1500"), Ok(Duration::from_nanos(1500)));
        assert_eq!(parse_env_duration("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_env_duration("0"), Ok(Duration::ZERO));
        assert!(parse_env_duration("-5").is_err());
        assert!(parse_env_duration("99999999999999999999").is_err());
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_micros(1), "1µs"),
            (Duration::from_nanos(1500), "1.5µs"),
            (ms(300), "300ms"),
            (Duration::from_nanos(1_000_001), "1.000001ms"),
            (ms(1500), "1.5s"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(36), "36s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(86_400), "24h0m0s"),
            (Duration::from_millis(9_900_500), "2h45m0.5s"),
        ];
        for (duration, text) in cases {
            assert_eq!(format_go_duration(duration), text);
        }
    }

    proptest! {
        #[test]
        fn parser_never_panics(text in "\\PC*") {
            let _ = parse_signed(&text);
            let _ = parse_env_duration(&text);
        }

        #[test]
        fn parser_never_panics_on_duration_like_text(text in "[-+]?[0-9.]{0,25}(ns|us|µs|ms|s|m|h|x)?([0-9.]{0,5}(s|m|h))?") {
            let _ = parse_signed(&text);
        }

        #[test]
        fn format_then_parse_round_trips(nanos in 0u64..=i64::MAX as u64) {
            let duration = Duration::from_nanos(nanos);
            prop_assert_eq!(parse_go_duration(&format_go_duration(duration)), Ok(duration));
        }
    }
}
