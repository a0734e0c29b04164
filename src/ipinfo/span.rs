//! Address-range arithmetic shared by both families: the text a range is shown as, and the
//! aligned block of a range that holds one address.
//!
//! Both families are handled as `u128` with a width of 32 or 128 bits, so one piece of code
//! serves IPv4 and IPv6.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// An address as an integer, with the width of its family.
pub(super) fn as_int(addr: IpAddr) -> (u128, u32) {
    match addr {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

fn from_int(value: u128, width: u32) -> IpAddr {
    if width == 32 {
        // Values of the 32-bit family never exceed u32::MAX; saturate rather than panic.
        IpAddr::V4(Ipv4Addr::from(u32::try_from(value).unwrap_or(u32::MAX)))
    } else {
        IpAddr::V6(Ipv6Addr::from(value))
    }
}

fn net(addr: IpAddr, prefix: u8) -> Option<IpNet> {
    match addr {
        IpAddr::V4(v4) => Ipv4Net::new(v4, prefix).ok().map(IpNet::V4),
        IpAddr::V6(v6) => Ipv6Net::new(v6, prefix).ok().map(IpNet::V6),
    }
}

/// `2^bits - 1`, for any `bits` up to 128.
fn low_mask(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// The range as one CIDR when it is exactly one (`45.138.12.0/24`), else `start-end`.
pub(super) fn range_text(start: IpAddr, end: IpAddr) -> String {
    match exact_cidr(start, end) {
        Some(cidr) => cidr.to_string(),
        None => format!("{start}-{end}"),
    }
}

/// The CIDR covering exactly `start..=end`, if there is one.
pub(super) fn exact_cidr(start: IpAddr, end: IpAddr) -> Option<IpNet> {
    let (low, width) = as_int(start);
    let (high, end_width) = as_int(end);
    if width != end_width || high < low {
        return None;
    }
    let spread = high - low;
    // An exact block spans 2^k addresses (spread = 2^k - 1) and starts on a multiple of 2^k.
    let is_block = spread & spread.wrapping_add(1) == 0 && low & spread == 0;
    if !is_block {
        return None;
    }
    let prefix = u8::try_from(width - spread.count_ones()).ok()?;
    net(start, prefix)
}

/// The largest aligned block of `start..=end` that holds `addr`, as the range splits into
/// CIDRs from its start (the way prefix-based tables store it). `None` when `addr` is outside
/// the range or of another family.
pub(super) fn block_holding(addr: IpAddr, start: IpAddr, end: IpAddr) -> Option<IpNet> {
    let (target, width) = as_int(addr);
    let (mut cursor, start_width) = as_int(start);
    let (high, end_width) = as_int(end);
    if width != start_width || width != end_width || target < cursor || target > high {
        return None;
    }
    // Each step takes the widest block that starts at the cursor, is aligned there and stays
    // inside the range; a range splits into at most 2 * width such blocks.
    loop {
        let alignment = if cursor == 0 {
            width
        } else {
            cursor.trailing_zeros().min(width)
        };
        let remaining = high - cursor;
        let fits = if remaining == u128::MAX {
            128
        } else {
            127 - (remaining + 1).leading_zeros()
        };
        let bits = alignment.min(fits);
        let block_end = cursor + low_mask(bits);
        if target <= block_end {
            let prefix = u8::try_from(width - bits).ok()?;
            return net(from_int(cursor, width), prefix);
        }
        cursor = block_end + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_exact_block_is_written_as_cidr_and_anything_else_as_start_dash_end() {
        assert_eq!(
            range_text(ip("45.138.12.0"), ip("45.138.12.255")),
            "45.138.12.0/24"
        );
        assert_eq!(range_text(ip("10.0.0.7"), ip("10.0.0.7")), "10.0.0.7/32");
        assert_eq!(
            range_text(ip("10.0.0.1"), ip("10.0.0.254")),
            "10.0.0.1-10.0.0.254"
        );
        assert_eq!(
            range_text(ip("10.0.0.0"), ip("10.0.2.255")),
            "10.0.0.0-10.0.2.255"
        );
        assert_eq!(
            range_text(ip("0.0.0.0"), ip("255.255.255.255")),
            "0.0.0.0/0"
        );
        assert_eq!(
            range_text(
                ip("2001:1948::"),
                ip("2001:1948:ffff:ffff:ffff:ffff:ffff:ffff")
            ),
            "2001:1948::/32"
        );
        assert_eq!(
            range_text(ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
            "::/0"
        );
    }

    #[test]
    fn the_block_holding_an_address_is_the_aligned_piece_of_its_range() {
        let start = ip("10.0.0.0");
        let end = ip("10.0.2.255");
        assert_eq!(
            block_holding(ip("10.0.1.9"), start, end),
            Some("10.0.0.0/23".parse().unwrap())
        );
        assert_eq!(
            block_holding(ip("10.0.2.9"), start, end),
            Some("10.0.2.0/24".parse().unwrap())
        );
        assert_eq!(
            block_holding(ip("10.0.0.150"), ip("10.0.0.1"), ip("10.0.0.254")),
            Some("10.0.0.128/26".parse().unwrap())
        );
        assert_eq!(
            block_holding(ip("10.0.0.200"), ip("10.0.0.1"), ip("10.0.0.254")),
            Some("10.0.0.192/27".parse().unwrap())
        );
        assert_eq!(
            block_holding(ip("10.0.0.1"), ip("10.0.0.1"), ip("10.0.0.254")),
            Some("10.0.0.1/32".parse().unwrap())
        );
        assert_eq!(
            block_holding(ip("45.138.12.24"), ip("45.138.12.0"), ip("45.138.12.255")),
            Some("45.138.12.0/24".parse().unwrap())
        );
        assert_eq!(
            block_holding(
                ip("ffff::1"),
                ip("::"),
                ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
            ),
            Some("::/0".parse().unwrap())
        );
        assert_eq!(block_holding(ip("10.0.3.0"), start, end), None);
        assert_eq!(block_holding(ip("::1"), start, end), None);
    }
}
