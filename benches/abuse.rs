//! Abuse-registry costs on the request path: the ban check for a client that is not banned
//! while 100,000 clients are tracked and 4,096 range bans exist (every request pays it), the
//! same check for an IPv6 client, one strike, and one strike from a new address when the
//! table is full (a flood from many addresses).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use concert::abuse::{AbuseSettings, BanLength, Registry};
use criterion::{Criterion, criterion_group, criterion_main};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

const TRACKED: u32 = 100_000;
const RANGES: u32 = 4_096;

/// A registry holding `TRACKED` struck (not banned) clients, a few banned ones, and `RANGES`
/// range bans: /24s in 100.64.0.0/10 plus a handful of IPv6 /48s.
fn loaded_registry() -> Registry {
    let registry = Registry::new(AbuseSettings {
        max_entries: TRACKED + 1_000,
        threshold: u32::MAX,
        ..AbuseSettings::default()
    });
    for i in 0..TRACKED {
        registry.strike(IpAddr::V4(Ipv4Addr::from_bits(0x0a00_0000 + i)), 1);
    }
    for i in 0..100 {
        registry.ban_now(IpAddr::V4(Ipv4Addr::from_bits(0x0b00_0000 + i)));
    }
    let hour = BanLength::Timed(Duration::from_secs(3600));
    for i in 0..RANGES - 16 {
        let base = Ipv4Addr::from_bits(0x6440_0000 + (i << 8));
        let net = IpNet::V4(Ipv4Net::new(base, 24).unwrap());
        registry.ban_range(net, hour).unwrap();
    }
    for i in 0..16u128 {
        let base = Ipv6Addr::from_bits((0x2001_0db8_0000u128 + i) << 80);
        let net = IpNet::V6(Ipv6Net::new(base, 48).unwrap());
        registry.ban_range(net, hour).unwrap();
    }
    registry
}

fn ban_check(c: &mut Criterion) {
    let registry = loaded_registry();
    let tracked: IpAddr = "10.0.200.7".parse().unwrap();
    let unknown: IpAddr = "198.51.100.4".parse().unwrap();
    let ipv6: IpAddr = "2001:db9:1:2::1".parse().unwrap();
    assert!(registry.banned(tracked).is_none());
    assert!(registry.banned("100.64.3.9".parse().unwrap()).is_some());
    c.bench_function("abuse/check_tracked_not_banned", |b| {
        b.iter(|| black_box(registry.enforce(Some(black_box(tracked)), "/hello")))
    });
    c.bench_function("abuse/check_unknown_client", |b| {
        b.iter(|| black_box(registry.enforce(Some(black_box(unknown)), "/hello")))
    });
    c.bench_function("abuse/check_ipv6_client", |b| {
        b.iter(|| black_box(registry.enforce(Some(black_box(ipv6)), "/hello")))
    });
}

fn strike(c: &mut Criterion) {
    let registry = loaded_registry();
    // Rotate over tracked clients so the measured path is an ordinary strike on an entry.
    let mut next = 0u32;
    c.bench_function("abuse/strike", |b| {
        b.iter(|| {
            next = (next + 1) % TRACKED;
            let client = IpAddr::V4(Ipv4Addr::from_bits(0x0a00_0000 + next));
            black_box(registry.strike(black_box(client), 1))
        })
    });
}

fn strike_from_a_newcomer_when_full(c: &mut Criterion) {
    // Exactly full: every new address has to take an old entry's place (a flood from many
    // addresses). Each iteration is a newcomer, so the cost includes choosing whom to evict.
    let registry = Registry::new(AbuseSettings {
        max_entries: TRACKED,
        threshold: u32::MAX,
        ..AbuseSettings::default()
    });
    for i in 0..TRACKED {
        registry.strike(IpAddr::V4(Ipv4Addr::from_bits(0x0a00_0000 + i)), 1);
    }
    let mut next = 0u32;
    c.bench_function("abuse/strike_newcomer_full_table", |b| {
        b.iter(|| {
            next = next.wrapping_add(1);
            let client = IpAddr::V4(Ipv4Addr::from_bits(0x2000_0000 + next));
            black_box(registry.strike(black_box(client), 1))
        })
    });
    assert_eq!(registry.tracked(), TRACKED as usize);
}

criterion_group!(benches, ban_check, strike, strike_from_a_newcomer_when_full);
criterion_main!(benches);
