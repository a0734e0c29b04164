//! What the registry tracks: one IPv4 address, one IPv6 /64, or — for an IPv6 /48 that spreads
//! over too many /64s while the table is under pressure — the /48 as a whole.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// A tracked client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// One IPv4 address (IPv4-mapped IPv6 included).
    V4(u32),
    /// One IPv6 /64: the upper 64 bits of the address.
    V6(u64),
    /// One IPv6 /48 shared by its overflow /64s: the upper 64 bits with the low 16 cleared.
    V6Wide(u64),
}

const WIDE_MASK: u64 = !0xffff;

impl Key {
    /// The key an address is tracked under by default (never [`Key::V6Wide`]).
    pub fn of(ip: IpAddr) -> Key {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Key::V4(v4.to_bits()),
            IpAddr::V6(v6) => Key::V6((v6.to_bits() >> 64) as u64),
        }
    }

    /// The /48 this key falls into, for IPv6 /64 keys.
    pub fn wide(self) -> Option<Key> {
        match self {
            Key::V6(net) => Some(Key::V6Wide(net & WIDE_MASK)),
            _ => None,
        }
    }

    /// Parses the display form back: `203.0.113.7`, `2001:db8:1:2::/64` (any address in the /64
    /// works, as does a bare IPv6 address), or `2001:db8:1::/48` for a shared /48.
    pub fn parse(text: &str) -> Option<Key> {
        let text = text.trim();
        let Some((addr, len)) = text.split_once('/') else {
            return text.parse::<IpAddr>().ok().map(Key::of);
        };
        let ip = addr.parse::<IpAddr>().ok()?;
        let len: u8 = len.parse().ok()?;
        match (ip.to_canonical(), len) {
            (IpAddr::V4(_), 32) | (IpAddr::V6(_), 64) => Some(Key::of(ip)),
            (IpAddr::V6(_), 48) => Key::of(ip).wide(),
            _ => None,
        }
    }

    /// The addresses this key covers: /32, /64 or /48.
    pub fn network(self) -> IpNet {
        match self {
            Key::V4(bits) => IpNet::V4(Ipv4Net::from(Ipv4Addr::from_bits(bits))),
            Key::V6(net) => v6_net(net, 64),
            Key::V6Wide(net) => v6_net(net, 48),
        }
    }

    pub fn is_wide(self) -> bool {
        matches!(self, Key::V6Wide(_))
    }
}

fn v6_net(upper: u64, len: u8) -> IpNet {
    let addr = Ipv6Addr::from_bits(u128::from(upper) << 64);
    match Ipv6Net::new(addr, len) {
        Ok(net) => IpNet::V6(net),
        // Both lengths used here are valid; keep a total function anyway.
        Err(_) => IpNet::V6(Ipv6Net::from(addr)),
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::V4(bits) => Ipv4Addr::from_bits(*bits).fmt(f),
            Key::V6(_) | Key::V6Wide(_) => self.network().fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ipv6_addresses_share_their_64() {
        let a = Key::of(ip("2001:db8:1:2:aaaa::1"));
        assert_eq!(a, Key::of(ip("2001:db8:1:2:ffff::9")));
        assert_ne!(a, Key::of(ip("2001:db8:1:3::1")));
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_eq!(a.wide().unwrap().to_string(), "2001:db8:1::/48");
        assert_eq!(Key::of(ip("::ffff:203.0.113.7")).to_string(), "203.0.113.7");
        assert_eq!(Key::of(ip("::ffff:203.0.113.7")).wide(), None);
    }

    #[test]
    fn display_forms_parse_back() {
        for text in [
            "203.0.113.7",
            "2001:db8:1:2::/64",
            "2001:db8:1::/48",
            "::/64",
        ] {
            let key = Key::parse(text).unwrap();
            assert_eq!(key.to_string(), text);
        }
        assert_eq!(
            Key::parse("2001:db8:1:2::5"),
            Key::parse("2001:db8:1:2::/64")
        );
        for bad in ["", "nope", "10.0.0.0/24", "2001:db8::/56", "1.2.3.4/x"] {
            assert_eq!(Key::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn networks_cover_the_key() {
        let key = Key::of(ip("2001:db8:1:2::77"));
        assert!(key.network().contains(&ip("2001:db8:1:2:ffff::1")));
        assert!(!key.network().contains(&ip("2001:db8:1:3::1")));
        let wide = key.wide().unwrap();
        assert!(wide.network().contains(&ip("2001:db8:1:ffff::1")));
        assert!(!wide.network().contains(&ip("2001:db8:2::1")));
        assert_eq!(
            Key::of(ip("198.51.100.4")).network().to_string(),
            "198.51.100.4/32"
        );
    }
}
