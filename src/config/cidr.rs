//! Address lists (`trusted_proxies`, `abuse_allow`, `portal_allow`): comma-separated IPs and
//! CIDRs, parsed once into networks plus a lookup keyed by prefix length so a membership test
//! costs one probe per distinct prefix length, never one per entry. A prefix length with few
//! networks (the usual case: loopback, one load balancer) is probed by comparing them in turn,
//! which costs less than hashing the address.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// A parsed address list. Equality compares the networks, not the spelling.
#[derive(Clone, Default)]
pub struct CidrList {
    raw: String,
    nets: Vec<IpNet>,
    v4_by_len: Vec<(u8, NetworkSet<u32>)>,
    v6_by_len: Vec<(u8, NetworkSet<u128>)>,
}

/// The networks of one prefix length, as their masked address bits.
#[derive(Clone)]
enum NetworkSet<T> {
    Few(Vec<T>),
    Many(HashSet<T>),
}

/// Past this many networks of one length a hash probe beats comparing each in turn.
const FEW_NETWORKS: usize = 8;

impl<T: Copy + Eq + std::hash::Hash> NetworkSet<T> {
    fn contains(&self, bits: &T) -> bool {
        match self {
            NetworkSet::Few(networks) => networks.contains(bits),
            NetworkSet::Many(networks) => networks.contains(bits),
        }
    }

    fn insert(&mut self, bits: T) {
        match self {
            NetworkSet::Few(networks) if networks.contains(&bits) => {}
            NetworkSet::Few(networks) if networks.len() < FEW_NETWORKS => networks.push(bits),
            NetworkSet::Few(networks) => {
                let mut many: HashSet<T> = networks.drain(..).collect();
                many.insert(bits);
                *self = NetworkSet::Many(many);
            }
            NetworkSet::Many(networks) => {
                networks.insert(bits);
            }
        }
    }
}

impl CidrList {
    /// Parses `10.0.0.0/8, 192.0.2.1 ,::1`. Entries are trimmed and empty ones skipped; a bare
    /// address becomes /32 or /128 (an IPv4-mapped one is unmapped first); a CIDR entry has its
    /// host bits cleared but keeps its family. Duplicate networks are an error.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let mut list = CidrList {
            raw: raw.trim().to_string(),
            ..CidrList::default()
        };
        let mut seen = HashSet::new();
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let net = parse_entry(entry)?;
            if !seen.insert(net) {
                return Err(format!("duplicate entry {entry:?}"));
            }
            list.nets.push(net);
        }
        for net in &list.nets {
            match net {
                IpNet::V4(v4) => insert_by_len(
                    &mut list.v4_by_len,
                    v4.prefix_len(),
                    u32::from(v4.network()),
                ),
                IpNet::V6(v6) => insert_by_len(
                    &mut list.v6_by_len,
                    v6.prefix_len(),
                    u128::from(v6.network()),
                ),
            }
        }
        Ok(list)
    }

    /// True when `ip` (IPv4-mapped IPv6 is unmapped first) lies in any listed network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                self.v4_by_len
                    .iter()
                    .any(|(len, set)| set.contains(&(bits & mask_v4(*len))))
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                self.v6_by_len
                    .iter()
                    .any(|(len, set)| set.contains(&(bits & mask_v6(*len))))
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    pub fn len(&self) -> usize {
        self.nets.len()
    }

    /// The list as written (outer whitespace trimmed).
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }
}

fn parse_entry(entry: &str) -> Result<IpNet, String> {
    if entry.contains('/') {
        return entry
            .parse::<IpNet>()
            .map(|net| net.trunc())
            .map_err(|_| format!("{entry:?} is not an IP address or CIDR"));
    }
    let ip: IpAddr = entry
        .parse()
        .map_err(|_| format!("{entry:?} is not an IP address or CIDR"))?;
    Ok(match ip.to_canonical() {
        IpAddr::V4(v4) => IpNet::V4(Ipv4Net::from(v4)),
        IpAddr::V6(v6) => IpNet::V6(Ipv6Net::from(v6)),
    })
}

fn insert_by_len<T: Copy + Eq + std::hash::Hash>(
    groups: &mut Vec<(u8, NetworkSet<T>)>,
    len: u8,
    bits: T,
) {
    match groups.iter_mut().find(|(group_len, _)| *group_len == len) {
        Some((_, set)) => set.insert(bits),
        None => groups.push((len, NetworkSet::Few(vec![bits]))),
    }
}

fn mask_v4(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask_v6(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

impl PartialEq for CidrList {
    fn eq(&self, other: &Self) -> bool {
        self.nets == other.nets
    }
}

impl Eq for CidrList {}

impl fmt::Debug for CidrList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CidrList").field(&self.raw).finish()
    }
}

impl fmt::Display for CidrList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn parses_mixed_entries_into_prefixes() {
        let list = CidrList::parse(" 10.0.0.0/8, 192.0.2.1 , ::1, 2001:db8::/32 ").unwrap();
        let nets: Vec<String> = list.nets().iter().map(|n| n.to_string()).collect();
        assert_eq!(
            nets,
            ["10.0.0.0/8", "192.0.2.1/32", "::1/128", "2001:db8::/32"]
        );
        assert_eq!(list.as_str(), "10.0.0.0/8, 192.0.2.1 , ::1, 2001:db8::/32");
    }

    #[test]
    fn rejects_bad_entries() {
        for bad in [
            "nope",
            "10.0.0.0/33",
            "::1/129",
            "1.2.3",
            "10.0.0.1 10.0.0.2",
            "10.0.0.0/99",
            "127.0.0.1,127.0.0.1",
            "10.0.0.0/8,10.1.2.3/8",
            "192.0.2.1,::ffff:192.0.2.1",
        ] {
            assert!(CidrList::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn accepts_the_check_list_examples() {
        for ok in [
            "",
            "127.0.0.1/32",
            " 10.0.0.0/8 , ::1 ",
            "10.0.0.0/8,,192.0.2.1,",
            "2001:db8::/32,203.0.113.9",
        ] {
            assert!(CidrList::parse(ok).is_ok(), "{ok:?} should be accepted");
        }
        assert!(CidrList::parse(" , ").unwrap().is_empty());
    }

    #[test]
    fn bare_mapped_addresses_are_unmapped_but_cidrs_are_only_masked() {
        let bare = CidrList::parse("::ffff:203.0.113.7").unwrap();
        assert_eq!(bare.nets()[0].to_string(), "203.0.113.7/32");
        let cidr = CidrList::parse("::ffff:203.0.113.7/120").unwrap();
        assert_eq!(cidr.nets()[0].to_string(), "::ffff:203.0.113.0/120");
        assert!(!cidr.contains(ip("203.0.113.9")));
    }

    #[test]
    fn contains_matches_members_and_unmaps_the_probe() {
        let list = CidrList::parse("10.0.0.0/8,192.0.2.1,2001:db8::/32").unwrap();
        assert!(list.contains(ip("10.200.3.4")));
        assert!(list.contains(ip("192.0.2.1")));
        assert!(list.contains(ip("::ffff:10.1.1.1")));
        assert!(list.contains(ip("2001:db8:ffff::1")));
        assert!(!list.contains(ip("192.0.2.2")));
        assert!(!list.contains(ip("11.0.0.1")));
        assert!(!list.contains(ip("2001:db9::1")));
        assert!(!CidrList::default().contains(ip("127.0.0.1")));
    }

    #[test]
    fn zero_length_prefixes_cover_their_family() {
        let list = CidrList::parse("0.0.0.0/0").unwrap();
        assert!(list.contains(ip("203.0.113.1")));
        assert!(!list.contains(ip("2001:db8::1")));
        let v6 = CidrList::parse("::/0").unwrap();
        assert!(v6.contains(ip("2001:db8::1")));
    }

    proptest! {
        #[test]
        fn parse_never_panics(text in "\\PC*") {
            let _ = CidrList::parse(&text);
        }

        // Lists long enough that some prefix lengths pass from comparing in turn to hashing.
        #[test]
        fn contains_agrees_with_checking_every_network(
            entries in proptest::collection::vec((any::<u32>(), 28u8..=32), 0..40),
            probes in proptest::collection::vec(any::<u32>(), 0..20),
        ) {
            let mut nets: Vec<Ipv4Net> = entries
                .iter()
                .filter_map(|&(bits, len)| Ipv4Net::new(bits.into(), len).ok())
                .map(|net| net.trunc())
                .collect();
            nets.sort();
            nets.dedup();
            let text: Vec<String> = nets.iter().map(ToString::to_string).collect();
            let list = CidrList::parse(&text.join(",")).unwrap();
            let members = nets.iter().map(|net| u32::from(net.network()) | 1);
            for probe in probes.iter().copied().chain(members) {
                let address = std::net::Ipv4Addr::from(probe);
                let expected = nets.iter().any(|net| net.contains(&address));
                prop_assert_eq!(list.contains(IpAddr::V4(address)), expected, "{}", address);
            }
        }

        #[test]
        fn parse_never_panics_on_address_like_text(text in "[0-9a-f:./, ]{0,60}") {
            if let Ok(list) = CidrList::parse(&text) {
                for net in list.nets() {
                    prop_assert!(list.contains(net.network()));
                }
            }
        }
    }
}
