//! Operator range bans, indexed by prefix length, and the parser for ban targets.
//!
//! A lookup probes one hash map per prefix length in use (at most 24 for IPv4, 48 for IPv6),
//! never every range. The table is read-mostly: writers copy it and swap the copy in, so the
//! per-request read takes no lock, and while no range exists the read returns at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arc_swap::ArcSwap;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use parking_lot::Mutex;

use super::BanError;
#[cfg(test)]
use super::FOREVER;
use super::key::Key;

/// Most range bans the table holds.
pub(crate) const MAX_RANGE_BANS: usize = 4096;
/// Broadest IPv4 range an operator may ban.
pub(crate) const MIN_V4_PREFIX: u8 = 8;
/// Broadest IPv6 range an operator may ban.
pub(crate) const MIN_V6_PREFIX: u8 = 16;

/// What an operator asked to ban or unban.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanTarget {
    /// One client: an IPv4 address, or an address inside the IPv6 /64 to ban (kept whole so
    /// exemption can be tested on the address the operator named).
    Single(IpAddr),
    /// A wider network, host bits cleared.
    Range(IpNet),
}

impl BanTarget {
    /// Parses `203.0.113.9`, `2001:db8::1`, `10.1.2.3/16`, `2001:db8::/48`, `::ffff:10.1.0.0/112`.
    /// IPv4 /32 and IPv6 /64 or longer are single clients; wider prefixes are ranges, no wider
    /// than /8 (IPv4) or /16 (IPv6).
    pub fn parse(text: &str) -> Result<BanTarget, BanError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(BanError::BadTarget);
        }
        let net = match text.split_once('/') {
            Some(_) => text.parse::<IpNet>().map_err(|_| BanError::BadTarget)?,
            None => {
                let bare = text.split_once('%').map_or(text, |(addr, _)| addr);
                let ip = bare.parse::<IpAddr>().map_err(|_| BanError::BadTarget)?;
                IpNet::from(ip)
            }
        };
        let net = unmap_net(net).trunc();
        match net {
            IpNet::V4(v4) if v4.prefix_len() == 32 => Ok(BanTarget::Single(net.addr())),
            IpNet::V4(v4) if v4.prefix_len() < MIN_V4_PREFIX => Err(BanError::TooBroad),
            IpNet::V6(v6) if v6.prefix_len() >= 64 => Ok(BanTarget::Single(net.addr())),
            IpNet::V6(v6) if v6.prefix_len() < MIN_V6_PREFIX => Err(BanError::TooBroad),
            _ => Ok(BanTarget::Range(net)),
        }
    }

    /// The addresses a ban on this target covers.
    pub fn scope(self) -> IpNet {
        match self {
            BanTarget::Single(ip) => Key::of(ip).network(),
            BanTarget::Range(net) => net,
        }
    }

    pub fn is_range(self) -> bool {
        matches!(self, BanTarget::Range(_))
    }
}

impl std::fmt::Display for BanTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BanTarget::Single(ip) => Key::of(*ip).fmt(f),
            BanTarget::Range(net) => net.fmt(f),
        }
    }
}

/// `::ffff:a.b.c.d/n` with n ≥ 96 names IPv4 space: turn it into `a.b.c.d/(n−96)`.
fn unmap_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.addr().to_ipv4_mapped()
        && let Ok(mapped) = Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(mapped);
    }
    net
}

/// One range ban.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RangeBan {
    /// Unix nanos; [`FOREVER`] = permanent.
    pub until: i64,
    pub offenses: u32,
}

/// Ranges grouped by prefix length, longest first.
#[derive(Debug, Clone, Default)]
struct PrefixTable {
    v4: Vec<(u8, HashMap<u32, RangeBan>)>,
    v6: Vec<(u8, HashMap<u128, RangeBan>)>,
    len: usize,
}

fn mask_v4(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask_v6(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

impl PrefixTable {
    fn get(&self, net: IpNet) -> Option<RangeBan> {
        match net {
            IpNet::V4(v4) => group(&self.v4, v4.prefix_len())?
                .get(&v4.network().to_bits())
                .copied(),
            IpNet::V6(v6) => group(&self.v6, v6.prefix_len())?
                .get(&v6.network().to_bits())
                .copied(),
        }
    }

    fn insert(&mut self, net: IpNet, ban: RangeBan) {
        let added = match net {
            IpNet::V4(v4) => group_mut(&mut self.v4, v4.prefix_len())
                .insert(v4.network().to_bits(), ban)
                .is_none(),
            IpNet::V6(v6) => group_mut(&mut self.v6, v6.prefix_len())
                .insert(v6.network().to_bits(), ban)
                .is_none(),
        };
        self.len += usize::from(added);
    }

    fn remove(&mut self, net: IpNet) -> bool {
        let removed = match net {
            IpNet::V4(v4) => remove_from(&mut self.v4, v4.prefix_len(), v4.network().to_bits()),
            IpNet::V6(v6) => remove_from(&mut self.v6, v6.prefix_len(), v6.network().to_bits()),
        };
        self.len -= usize::from(removed);
        removed
    }

    /// The latest `until` among active ranges holding `ip`.
    fn lookup(&self, ip: IpAddr, now: i64) -> Option<i64> {
        let active = |ban: Option<&RangeBan>| ban.map(|b| b.until).filter(|until| *until > now);
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let bits = v4.to_bits();
                self.v4
                    .iter()
                    .filter_map(|(len, map)| active(map.get(&(bits & mask_v4(*len)))))
                    .max()
            }
            IpAddr::V6(v6) => {
                let bits = v6.to_bits();
                self.v6
                    .iter()
                    .filter_map(|(len, map)| active(map.get(&(bits & mask_v6(*len)))))
                    .max()
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = (IpNet, RangeBan)> + '_ {
        let v4 = self.v4.iter().flat_map(|(len, map)| {
            map.iter().filter_map(move |(bits, ban)| {
                let net = Ipv4Net::new(std::net::Ipv4Addr::from_bits(*bits), *len).ok()?;
                Some((IpNet::V4(net), *ban))
            })
        });
        let v6 = self.v6.iter().flat_map(|(len, map)| {
            map.iter().filter_map(move |(bits, ban)| {
                let net = Ipv6Net::new(std::net::Ipv6Addr::from_bits(*bits), *len).ok()?;
                Some((IpNet::V6(net), *ban))
            })
        });
        v4.chain(v6)
    }

    fn retain(&mut self, keep: impl Fn(&RangeBan) -> bool) -> usize {
        let before = self.len;
        for (_, map) in &mut self.v4 {
            map.retain(|_, ban| keep(ban));
        }
        for (_, map) in &mut self.v6 {
            map.retain(|_, ban| keep(ban));
        }
        self.v4.retain(|(_, map)| !map.is_empty());
        self.v6.retain(|(_, map)| !map.is_empty());
        self.len = self.v4.iter().map(|(_, m)| m.len()).sum::<usize>()
            + self.v6.iter().map(|(_, m)| m.len()).sum::<usize>();
        before - self.len
    }
}

fn group<T>(groups: &[(u8, HashMap<T, RangeBan>)], len: u8) -> Option<&HashMap<T, RangeBan>> {
    groups.iter().find(|(l, _)| *l == len).map(|(_, map)| map)
}

fn group_mut<T>(
    groups: &mut Vec<(u8, HashMap<T, RangeBan>)>,
    len: u8,
) -> &mut HashMap<T, RangeBan> {
    let index = match groups.iter().position(|(l, _)| *l == len) {
        Some(index) => index,
        None => {
            groups.push((len, HashMap::new()));
            // Longest prefixes first, so the most specific ranges are probed first.
            groups.sort_by_key(|group| std::cmp::Reverse(group.0));
            groups.iter().position(|(l, _)| *l == len).unwrap_or(0)
        }
    };
    &mut groups[index].1
}

fn remove_from<T: std::hash::Hash + Eq>(
    groups: &mut Vec<(u8, HashMap<T, RangeBan>)>,
    len: u8,
    bits: T,
) -> bool {
    let Some(index) = groups.iter().position(|(l, _)| *l == len) else {
        return false;
    };
    let removed = groups[index].1.remove(&bits).is_some();
    if groups[index].1.is_empty() {
        groups.remove(index);
    }
    removed
}

/// The shared range table: lock-free reads, serialised copy-on-write updates.
#[derive(Default)]
pub(crate) struct Ranges {
    table: ArcSwap<PrefixTable>,
    writer: Mutex<()>,
    count: AtomicUsize,
}

/// Result of [`Ranges::ban`]: whether it counted as a new offense.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RangeBanned {
    pub new_offense: bool,
}

impl Ranges {
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The latest `until` of the active ranges holding `ip`.
    pub(crate) fn lookup(&self, ip: IpAddr, now: i64) -> Option<i64> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.table.load().lookup(ip, now)
    }

    /// Bans `net` until `until`. Replacing an active range's time is not a new offense.
    pub(crate) fn ban(&self, net: IpNet, until: i64, now: i64) -> Result<RangeBanned, BanError> {
        let _writer = self.writer.lock();
        let current = self.table.load_full();
        let existing = current.get(net);
        if existing.is_none() && current.len >= MAX_RANGE_BANS {
            return Err(BanError::RangeLimit);
        }
        let active = existing.filter(|ban| ban.until > now);
        let offenses = match (existing, active) {
            (_, Some(ban)) => ban.offenses,
            (Some(ban), None) => ban.offenses.saturating_add(1),
            (None, None) => 1,
        };
        let mut next = PrefixTable::clone(&current);
        next.insert(net, RangeBan { until, offenses });
        self.count.store(next.len, Ordering::Relaxed);
        self.table.store(Arc::new(next));
        Ok(RangeBanned {
            new_offense: active.is_none(),
        })
    }

    /// Puts back a saved range as it was (import). Fails only at the range limit.
    pub(crate) fn restore(&self, net: IpNet, ban: RangeBan) -> Result<(), BanError> {
        let _writer = self.writer.lock();
        let current = self.table.load_full();
        if current.get(net).is_none() && current.len >= MAX_RANGE_BANS {
            return Err(BanError::RangeLimit);
        }
        let mut next = PrefixTable::clone(&current);
        next.insert(net, ban);
        self.count.store(next.len, Ordering::Relaxed);
        self.table.store(Arc::new(next));
        Ok(())
    }

    /// Lifts the range with exactly this prefix.
    pub(crate) fn unban(&self, net: IpNet) -> bool {
        let _writer = self.writer.lock();
        let current = self.table.load_full();
        if current.get(net).is_none() {
            return false;
        }
        let mut next = PrefixTable::clone(&current);
        let removed = next.remove(net);
        self.count.store(next.len, Ordering::Relaxed);
        self.table.store(Arc::new(next));
        removed
    }

    /// Drops ranges that have ended; permanent ones stay.
    pub(crate) fn sweep(&self, now: i64) -> usize {
        let _writer = self.writer.lock();
        let current = self.table.load_full();
        if !current.iter().any(|(_, ban)| ban.until <= now) {
            return 0;
        }
        let mut next = PrefixTable::clone(&current);
        let removed = next.retain(|ban| ban.until > now);
        self.count.store(next.len, Ordering::Relaxed);
        self.table.store(Arc::new(next));
        removed
    }

    /// Every range, active or not yet swept.
    pub(crate) fn all(&self) -> Vec<(IpNet, RangeBan)> {
        self.table.load().iter().collect()
    }

    /// One range's ban, if present.
    pub(crate) fn get(&self, net: IpNet) -> Option<RangeBan> {
        self.table.load().get(net)
    }
}

/// Whether two networks share any address.
pub(crate) fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Text of every exempt prefix overlapping `net`.
pub(crate) fn exempt_within<'a>(
    net: &IpNet,
    exempt: impl Iterator<Item = &'a IpNet>,
) -> Vec<String> {
    exempt
        .filter(|prefix| overlaps(prefix, net))
        .map(|prefix| prefix.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    const HOUR: i64 = 3_600_000_000_000;

    #[test]
    fn targets_parse_as_singles_ranges_or_errors() {
        let single = |text: &str| match BanTarget::parse(text) {
            Ok(target @ BanTarget::Single(_)) => target.to_string(),
            other => panic!("{text:?} gave {other:?}"),
        };
        let range = |text: &str| match BanTarget::parse(text) {
            Ok(BanTarget::Range(net)) => net.to_string(),
            other => panic!("{text:?} gave {other:?}"),
        };
        assert_eq!(single("203.0.113.9"), "203.0.113.9");
        assert_eq!(single("203.0.113.9/32"), "203.0.113.9");
        assert_eq!(range(" 10.1.2.3/16 "), "10.1.0.0/16");
        assert_eq!(range("10.0.0.0/8"), "10.0.0.0/8");
        assert_eq!(single("2001:db8::1"), "2001:db8::/64");
        assert_eq!(single("2001:db8:0:0:1::/80"), "2001:db8::/64");
        assert_eq!(range("2001:db8::/48"), "2001:db8::/48");
        assert_eq!(single("::ffff:10.1.2.3"), "10.1.2.3");
        assert_eq!(range("::ffff:10.1.0.0/112"), "10.1.0.0/16");
        assert_eq!(single("fe80::1%eth0"), "fe80::/64");
        for broad in ["10.0.0.0/7", "0.0.0.0/0", "2001::/15"] {
            assert_eq!(BanTarget::parse(broad), Err(BanError::TooBroad), "{broad}");
        }
        for bad in ["nope", "", "10.0.0.0/33", "  ", "1.2.3", "10.0.0.0/x"] {
            assert_eq!(BanTarget::parse(bad), Err(BanError::BadTarget), "{bad:?}");
        }
    }

    #[test]
    fn error_texts_are_exact() {
        assert_eq!(
            BanError::BadTarget.to_string(),
            "client must be an IP address or a CIDR range such as 203.0.113.0/24"
        );
        assert_eq!(
            BanError::TooBroad.to_string(),
            "range is too broad: use /8 or narrower for IPv4 and /16 or narrower for IPv6"
        );
        assert_eq!(
            BanError::RangeLimit.to_string(),
            "too many range bans (limit 4096)"
        );
    }

    #[test]
    fn a_range_covers_exactly_its_addresses() {
        let ranges = Ranges::default();
        ranges.ban(net("10.1.0.0/16"), HOUR, 0).unwrap();
        for inside in ["10.1.0.1", "10.1.200.5", "10.1.255.255", "::ffff:10.1.3.3"] {
            assert_eq!(ranges.lookup(ip(inside), 0), Some(HOUR), "{inside}");
        }
        for outside in ["10.2.0.1", "10.0.255.255", "2001:db8::1"] {
            assert_eq!(ranges.lookup(ip(outside), 0), None, "{outside}");
        }
        assert_eq!(ranges.len(), 1);
        assert!(ranges.unban(net("10.1.0.0/16")));
        assert!(!ranges.unban(net("10.1.0.0/16")));
        assert_eq!(ranges.lookup(ip("10.1.0.1"), 0), None);
        assert!(ranges.is_empty());
    }

    #[test]
    fn the_latest_end_among_nested_ranges_wins() {
        let ranges = Ranges::default();
        ranges.ban(net("10.0.0.0/8"), HOUR, 0).unwrap();
        ranges.ban(net("10.1.0.0/16"), 3 * HOUR, 0).unwrap();
        ranges.ban(net("2001:db8::/32"), FOREVER, 0).unwrap();
        assert_eq!(ranges.lookup(ip("10.1.2.3"), 0), Some(3 * HOUR));
        assert_eq!(ranges.lookup(ip("10.2.2.3"), 0), Some(HOUR));
        assert_eq!(ranges.lookup(ip("10.2.2.3"), 2 * HOUR), None);
        assert_eq!(ranges.lookup(ip("2001:db8:5::1"), 0), Some(FOREVER));
    }

    #[test]
    fn rebanning_an_active_range_is_no_new_offense() {
        let ranges = Ranges::default();
        assert!(ranges.ban(net("10.1.0.0/16"), HOUR, 0).unwrap().new_offense);
        assert!(
            !ranges
                .ban(net("10.1.0.0/16"), HOUR / 6, 1)
                .unwrap()
                .new_offense
        );
        assert_eq!(ranges.get(net("10.1.0.0/16")).unwrap().offenses, 1);
        // Once ended, banning again is a second offense.
        assert!(
            ranges
                .ban(net("10.1.0.0/16"), 2 * HOUR, HOUR)
                .unwrap()
                .new_offense
        );
        assert_eq!(ranges.get(net("10.1.0.0/16")).unwrap().offenses, 2);
    }

    #[test]
    fn sweep_drops_only_ended_ranges() {
        let ranges = Ranges::default();
        ranges.ban(net("10.1.0.0/16"), HOUR / 60, 0).unwrap();
        ranges.ban(net("198.51.0.0/16"), FOREVER, 0).unwrap();
        assert_eq!(ranges.lookup(ip("10.1.0.1"), 2 * HOUR / 60), None);
        assert_eq!(ranges.sweep(2 * HOUR / 60), 1);
        assert_eq!(ranges.len(), 1);
        assert_eq!(ranges.sweep(10_000 * HOUR), 0);
        assert_eq!(
            ranges.lookup(ip("198.51.3.4"), 10_000 * HOUR),
            Some(FOREVER)
        );
    }

    #[test]
    fn the_table_holds_at_most_4096_ranges() {
        let ranges = Ranges::default();
        for i in 0..MAX_RANGE_BANS as u32 {
            let base = std::net::Ipv4Addr::from_bits(0x0a00_0000 + (i << 8));
            ranges
                .ban(IpNet::V4(Ipv4Net::new(base, 24).unwrap()), HOUR, 0)
                .unwrap();
        }
        assert_eq!(ranges.len(), MAX_RANGE_BANS);
        assert_eq!(
            ranges.ban(net("192.0.2.0/24"), HOUR, 0),
            Err(BanError::RangeLimit)
        );
        // Re-banning an existing range is still allowed at the limit.
        assert!(ranges.ban(net("10.0.0.0/24"), 2 * HOUR, 0).is_ok());
    }

    #[test]
    fn exempt_prefixes_overlapping_a_range_are_listed() {
        let exempt = [net("198.51.5.0/24"), net("10.0.0.1/32"), net("198.0.0.0/8")];
        assert_eq!(
            exempt_within(&net("198.51.0.0/16"), exempt.iter()),
            ["198.51.5.0/24", "198.0.0.0/8"]
        );
        assert!(exempt_within(&net("192.0.2.0/24"), exempt.iter()).is_empty());
    }
}
