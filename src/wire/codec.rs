//! Parsers for the numbers HTTP/1 frames bodies with, exactly as hyper reads them; shared by the
//! smuggling guard (client side) and the fast origin path (origin side), so both sides agree.

/// A decimal `Content-Length` value: digits only (leading zeros allowed), no sign, no spaces,
/// no overflow — what hyper takes.
pub(crate) fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |sum, &digit| {
        let value = digit.is_ascii_digit().then(|| u64::from(digit - b'0'))?;
        sum.checked_mul(10)?.checked_add(value)
    })
}

/// The size at the start of a chunk-size line (extensions after `;` are ignored); any number
/// of hex digits, leading zeros allowed, no overflow.
pub(crate) fn parse_chunk_size(line: &[u8]) -> Option<u64> {
    let digits = match line.iter().position(|&b| b == b';') {
        Some(semicolon) => &line[..semicolon],
        None => line,
    }
    .trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits
        .iter()
        .try_fold(0u64, |sum, &digit| add_hex_digit(sum, digit))
}

/// `sum` with the hex digit `digit` appended; `None` for a non-digit or on overflow.
pub(crate) fn add_hex_digit(sum: u64, digit: u8) -> Option<u64> {
    let value = match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        b'A'..=b'F' => digit - b'A' + 10,
        _ => return None,
    };
    sum.checked_mul(16)?.checked_add(u64::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_chunk_sizes_parse_as_hyper_does() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"1234"), Some(1234));
        assert_eq!(parse_decimal(b"000000000000000000000000005"), Some(5));
        assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b"1 2",
            b"0x10",
            b"18446744073709551616",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
        assert_eq!(parse_chunk_size(b"1a"), Some(26));
        assert_eq!(parse_chunk_size(b"1A;name=value"), Some(26));
        assert_eq!(parse_chunk_size(b"0"), Some(0));
        assert_eq!(parse_chunk_size(b"ff ; ext"), Some(255));
        assert_eq!(parse_chunk_size(b"00000000000000003"), Some(3));
        assert_eq!(parse_chunk_size(b"ffffffffffffffff"), Some(u64::MAX));
        for bad in [&b""[..], b";ext", b"g", b"-1", b"1 2", b"10000000000000000"] {
            assert_eq!(parse_chunk_size(bad), None, "{bad:?}");
        }
    }
}
