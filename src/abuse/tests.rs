//! Registry behaviour with an injected clock: strikes, bans and range bans, the choices that
//! close the gaps of simpler registries (sliding window, exemption at enforcement, /48 sharing,
//! protected history), export/import, and a property test of the table limits.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use parking_lot::Mutex;
use proptest::prelude::*;

use super::*;
use crate::config::{BanPathMatcher, CidrList, PathList};

const SECOND: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;
const T0: i64 = 1_767_225_600 * SECOND;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn mins(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

fn setup(edit: impl FnOnce(&mut AbuseSettings)) -> (Registry, Arc<ManualClock>) {
    let mut settings = AbuseSettings::default();
    edit(&mut settings);
    let clock = Arc::new(ManualClock::at(T0));
    (Registry::with_clock(settings, clock.clone()), clock)
}

fn timed(length: Option<BanLength>) -> Duration {
    match length {
        Some(BanLength::Timed(left)) => left,
        other => panic!("expected a timed ban, got {other:?}"),
    }
}

// ----- strikes ---------------------------------------------------------------------------

#[test]
fn third_strike_bans_for_the_base_cooldown() {
    let (registry, clock) = setup(|s| s.threshold = 3);
    let client = ip("203.0.113.7");
    assert!(!registry.strike(client, 1));
    assert!(!registry.strike(client, 1));
    assert_eq!(registry.banned(client), None);
    assert!(registry.strike(client, 1));
    assert_eq!(timed(registry.banned(client)), mins(5));
    assert_eq!(registry.stats().bans_total, 1);
    assert_eq!(registry.stats().strikes_total, 3);
    clock.advance(mins(5));
    assert_eq!(registry.banned(client), None);
}

#[test]
fn strikes_spread_over_more_than_the_window_do_not_ban() {
    let (registry, clock) = setup(|s| s.threshold = 3);
    let client = ip("203.0.113.7");
    registry.strike(client, 1);
    registry.strike(client, 1);
    clock.advance(mins(2));
    assert!(!registry.strike(client, 1));
    assert_eq!(registry.banned(client), None);
}

#[test]
fn a_burst_straddling_the_window_edge_is_seen_whole() {
    // Nine strikes just before a fixed window's edge and nine just after would all pass a
    // fixed window. The sliding level still holds almost all of the first nine after the edge.
    let (registry, clock) = setup(|s| s.threshold = 10);
    let client = ip("203.0.113.7");
    assert!(!registry.strike(client, 1));
    clock.advance(Duration::from_secs(59));
    assert!(!registry.strike(client, 8));
    clock.advance(Duration::from_secs(2));
    assert!(!registry.strike(client, 1));
    assert!(registry.strike(client, 1));
}

#[test]
fn a_banned_client_collects_no_more_strikes() {
    let (registry, _) = setup(|s| s.threshold = 1);
    let client = ip("203.0.113.7");
    assert!(registry.strike(client, 1));
    assert!(registry.strike(client, 5));
    assert_eq!(registry.stats().bans_total, 1);
    assert_eq!(registry.stats().strikes_total, 2);
}

#[test]
fn zero_weight_is_no_strike() {
    let (registry, _) = setup(|s| s.threshold = 1);
    assert!(!registry.strike(ip("203.0.113.7"), 0));
    assert_eq!(registry.stats().strikes_total, 0);
    assert_eq!(registry.tracked(), 0);
}

#[test]
fn a_lower_threshold_applies_to_existing_entries_at_once() {
    let (registry, _) = setup(|s| s.threshold = 10);
    let client = ip("203.0.113.7");
    registry.strike(client, 3);
    registry.reconfigure(AbuseSettings {
        threshold: 4,
        ..AbuseSettings::default()
    });
    assert!(registry.strike(client, 1));
}

// ----- escalation and ban_now --------------------------------------------------------------

#[test]
fn cooldowns_escalate_and_cap_at_the_maximum() {
    let (registry, clock) = setup(|s| {
        s.cooldown = mins(1);
        s.max_cooldown = mins(3);
    });
    let client = ip("203.0.113.7");
    let mut lengths = Vec::new();
    for _ in 0..4 {
        let length = timed(registry.ban_now(client));
        lengths.push(length);
        clock.advance(length + Duration::from_secs(1));
    }
    assert_eq!(lengths, [mins(1), mins(2), mins(3), mins(3)]);
}

#[test]
fn ban_now_while_banned_reports_the_time_left_without_a_new_offense() {
    let (registry, clock) = setup(|_| {});
    let client = ip("203.0.113.7");
    assert_eq!(timed(registry.ban_now(client)), mins(5));
    clock.advance(mins(1));
    assert_eq!(timed(registry.ban_now(client)), mins(4));
    assert_eq!(registry.stats().bans_total, 1);
    assert_eq!(registry.bans()[0].offenses, 1);
}

#[test]
fn exempt_clients_are_never_tracked_struck_or_banned() {
    let (registry, _) = setup(|s| {
        s.allow = CidrList::parse("198.51.100.0/24").unwrap();
        s.trusted = CidrList::parse("10.0.0.1").unwrap();
        s.threshold = 1;
    });
    for client in [ip("198.51.100.20"), ip("10.0.0.1")] {
        assert!(!registry.strike(client, 100));
        assert_eq!(registry.ban_now(client), None);
        assert_eq!(registry.banned(client), None);
        assert_eq!(
            registry.ban_for(client, BanLength::Permanent),
            Err(BanError::Exempt)
        );
    }
    assert_eq!(registry.tracked(), 0);
    assert_eq!(registry.stats().strikes_total, 0);
}

#[test]
fn unban_forgets_offense_history() {
    let (registry, _) = setup(|_| {});
    let client = ip("203.0.113.7");
    registry.ban_now(client);
    assert!(registry.unban(client));
    assert_eq!(registry.banned(client), None);
    assert_eq!(timed(registry.ban_now(client)), mins(5));
    assert!(!registry.unban(ip("192.0.2.1")));
}

#[test]
fn sweep_keeps_history_until_the_maximum_cooldown_has_passed() {
    let (registry, clock) = setup(|s| {
        s.cooldown = mins(1);
        s.max_cooldown = mins(60);
    });
    registry.ban_now(ip("203.0.113.7"));
    clock.set(T0 + 30 * MINUTE);
    assert_eq!(registry.sweep(), 0);
    clock.set(T0 + HOUR + 3 * MINUTE);
    assert_eq!(registry.sweep(), 1);
    assert_eq!(registry.tracked(), 0);

    clock.set(T0);
    registry.strike(ip("198.51.100.4"), 1);
    clock.set(T0 + 2 * MINUTE);
    assert_eq!(registry.sweep(), 1);
}

#[test]
fn sweep_keeps_strikes_still_inside_the_window() {
    let (registry, clock) = setup(|_| {});
    registry.strike(ip("198.51.100.4"), 1);
    clock.advance(Duration::from_secs(30));
    assert_eq!(registry.sweep(), 0);
    assert_eq!(registry.tracked(), 1);
}

#[test]
fn a_full_table_keeps_the_ban_and_drops_the_newcomer() {
    let (registry, _) = setup(|s| s.max_entries = 1);
    registry.ban_now(ip("203.0.113.7"));
    assert!(!registry.strike(ip("198.51.100.4"), 1));
    assert_eq!(registry.tracked(), 1);
    assert_eq!(registry.stats().dropped_total, 1);
    assert!(registry.banned(ip("203.0.113.7")).is_some());
    assert_eq!(
        registry.ban_for(ip("198.51.100.5"), BanLength::Permanent),
        Err(BanError::Full)
    );
}

#[test]
fn offense_history_is_never_evicted_by_strangers() {
    let (registry, clock) = setup(|s| {
        s.max_entries = 1;
        s.cooldown = mins(1);
    });
    let offender = ip("203.0.113.7");
    registry.ban_now(offender);
    clock.advance(mins(2));
    // The ban is over, but its history stays: a stranger's strike cannot push it out.
    assert!(!registry.strike(ip("198.51.100.4"), 1));
    assert_eq!(registry.stats().dropped_total, 1);
    assert_eq!(timed(registry.ban_now(offender)), mins(2));
}

// ----- operator bans -------------------------------------------------------------------------

#[test]
fn permanent_ban_outlives_everything_but_an_unban() {
    let (registry, clock) = setup(|_| {});
    let client = ip("203.0.113.9");
    registry
        .ban_for(client, BanLength::Timed(Duration::ZERO))
        .unwrap();
    clock.advance(Duration::from_secs(10_000 * 3600));
    assert_eq!(registry.banned(client), Some(BanLength::Permanent));
    assert_eq!(registry.sweep(), 0);
    assert_eq!(registry.ban_now(client), Some(BanLength::Permanent));
    assert_eq!(registry.stats().bans_total, 1);
    let bans = registry.bans();
    assert_eq!(bans.len(), 1);
    assert!(bans[0].permanent);
    assert_eq!(bans[0].remaining_seconds, 0);
    assert_eq!(bans[0].until, "0001-01-01T00:00:00Z");
    registry
        .ban_for(client, BanLength::Timed(Duration::from_secs(3600)))
        .unwrap();
    assert!(timed(registry.banned(client)) <= Duration::from_secs(3600));
    assert_eq!(registry.stats().bans_total, 1);
}

#[test]
fn permanent_range_ban_is_never_swept() {
    let (registry, clock) = setup(|_| {});
    registry
        .ban_range(net("198.51.0.0/16"), BanLength::Permanent)
        .unwrap();
    clock.advance(Duration::from_secs(10_000 * 3600));
    assert_eq!(
        registry.banned(ip("198.51.3.4")),
        Some(BanLength::Permanent)
    );
    assert_eq!(registry.sweep_ranges(), 0);
}

#[test]
fn range_ban_covers_its_addresses_and_lists_as_a_range() {
    let (registry, _) = setup(|_| {});
    registry
        .ban_range(
            net("10.1.0.0/16"),
            BanLength::Timed(Duration::from_secs(3600)),
        )
        .unwrap();
    for inside in ["10.1.0.1", "10.1.200.5", "10.1.255.255"] {
        assert!(registry.banned(ip(inside)).is_some(), "{inside}");
    }
    for outside in ["10.2.0.1", "10.0.255.255", "2001:db8::1"] {
        assert_eq!(registry.banned(ip(outside)), None, "{outside}");
    }
    assert_eq!(registry.stats().bans_total, 1);
    assert_eq!(registry.stats().range_bans, 1);
    let bans = registry.bans();
    assert_eq!(bans.len(), 1);
    assert_eq!(bans[0].client, "10.1.0.0/16");
    assert!(bans[0].range);
    assert!(registry.unban_target(BanTarget::parse("10.1.2.3/16").unwrap()));
    assert_eq!(registry.banned(ip("10.1.0.1")), None);
    assert_eq!(registry.stats().range_bans, 0);
}

#[test]
fn shortening_an_active_range_ban_is_no_new_offense() {
    let (registry, _) = setup(|_| {});
    let range = net("10.1.0.0/16");
    registry
        .ban_range(range, BanLength::Timed(mins(60)))
        .unwrap();
    registry
        .ban_range(range, BanLength::Timed(mins(10)))
        .unwrap();
    assert_eq!(registry.stats().bans_total, 1);
    assert!(timed(registry.banned(ip("10.1.0.1"))) <= mins(10));
}

#[test]
fn exempt_addresses_inside_a_banned_range_pass() {
    let (registry, _) = setup(|s| {
        s.allow = CidrList::parse("10.1.5.0/24").unwrap();
        s.trusted = CidrList::parse("10.1.9.9").unwrap();
    });
    let range = net("10.1.0.0/16");
    registry
        .ban_range(range, BanLength::Timed(mins(60)))
        .unwrap();
    assert_eq!(registry.banned(ip("10.1.5.9")), None);
    assert_eq!(registry.banned(ip("10.1.9.9")), None);
    assert!(registry.banned(ip("10.1.6.1")).is_some());
    assert_eq!(
        registry.exempt_within(&range),
        ["10.1.5.0/24", "10.1.9.9/32"]
    );
}

#[test]
fn an_ended_range_no_longer_bans_and_is_swept() {
    let (registry, clock) = setup(|_| {});
    registry
        .ban_range(net("10.1.0.0/16"), BanLength::Timed(mins(1)))
        .unwrap();
    clock.advance(mins(2));
    assert_eq!(registry.banned(ip("10.1.0.1")), None);
    assert_eq!(registry.sweep_ranges(), 1);
    assert_eq!(registry.range_count(), 0);
}

#[test]
fn an_individual_ban_wins_over_a_longer_range() {
    let (registry, _) = setup(|_| {});
    registry
        .ban_range(net("10.1.0.0/16"), BanLength::Permanent)
        .unwrap();
    registry
        .ban_for(ip("10.1.2.3"), BanLength::Timed(mins(10)))
        .unwrap();
    assert_eq!(timed(registry.banned(ip("10.1.2.3"))), mins(10));
}

#[test]
fn operator_bans_are_refused_while_abuse_is_off() {
    let (registry, _) = setup(|s| s.enabled = false);
    assert_eq!(
        registry.ban_for(ip("203.0.113.9"), BanLength::Permanent),
        Err(BanError::Disabled)
    );
    assert_eq!(
        registry.ban_range(net("10.1.0.0/16"), BanLength::Permanent),
        Err(BanError::Disabled)
    );
    assert!(!registry.strike(ip("203.0.113.9"), 100));
    assert_eq!(registry.stats().strikes_total, 0);
}

#[test]
fn ban_outcome_reports_the_target_and_exempt_prefixes() {
    let (registry, _) = setup(|s| s.allow = CidrList::parse("198.51.5.0/24").unwrap());
    let outcome = registry
        .ban(
            BanTarget::parse("198.51.7.9/16").unwrap(),
            BanLength::Timed(mins(60)),
        )
        .unwrap();
    assert_eq!(outcome.client, "198.51.0.0/16");
    assert!(outcome.range);
    assert!(!outcome.permanent);
    assert_eq!(
        outcome.exempt_within,
        Some(vec!["198.51.5.0/24".to_string()])
    );
    assert_eq!(outcome.until, Some(WallTime(T0 + HOUR)));
    assert!(registry.banned(ip("198.51.200.1")).is_some());
    let json = serde_json::to_value(&outcome).unwrap();
    assert_eq!(json["until"], "2026-01-01T01:00:00Z");

    let single = registry
        .ban(
            BanTarget::parse("2001:db8:1:2::5").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    assert_eq!(single.client, "2001:db8:1:2::/64");
    assert!(single.permanent);
    let json = serde_json::to_value(&single).unwrap();
    assert!(json["until"].is_null());
    assert!(json.get("exempt_within").is_none());
}

// ----- enforcement ---------------------------------------------------------------------------

#[test]
fn enforce_counts_rejections_and_bans_on_ban_paths() {
    let (registry, _) = setup(|s| {
        s.ban_paths = BanPathMatcher::new(&PathList::parse_strict("/.env,/.git/*").unwrap());
    });
    let client = Some(ip("203.0.113.9"));
    assert_eq!(registry.enforce(client, "/hello"), None);
    assert_eq!(timed(registry.enforce(client, "/.git/config")), mins(5));
    assert_eq!(registry.stats().rejected_total, 0);
    assert_eq!(registry.stats().bans_total, 1);
    assert!(registry.enforce(client, "/hello").is_some());
    assert_eq!(registry.stats().rejected_total, 1);
    assert_eq!(registry.enforce(None, "/.env"), None);
}

#[test]
fn enforce_is_off_while_abuse_is_off_but_bans_are_kept() {
    let (registry, _) = setup(|_| {});
    let client = ip("203.0.113.9");
    registry.ban_for(client, BanLength::Permanent).unwrap();
    registry.reconfigure(AbuseSettings {
        enabled: false,
        ..AbuseSettings::default()
    });
    assert_eq!(registry.enforce(Some(client), "/"), None);
    assert_eq!(registry.stats().tracked, 0);
    registry.reconfigure(AbuseSettings::default());
    assert_eq!(
        registry.enforce(Some(client), "/"),
        Some(BanLength::Permanent)
    );
}

#[test]
fn an_ipv6_ban_covers_the_whole_64_only() {
    let (registry, _) = setup(|_| {});
    registry.ban_now(ip("2001:db8:1:2::1"));
    assert!(registry.banned(ip("2001:db8:1:2:ffff::9")).is_some());
    assert_eq!(registry.banned(ip("2001:db8:1:3::1")), None);
    assert_eq!(registry.bans()[0].client, "2001:db8:1:2::/64");
}

#[test]
fn an_allow_listed_address_is_not_caught_by_its_neighbours_ban() {
    let (registry, _) = setup(|s| s.allow = CidrList::parse("2001:db8:1:2::5").unwrap());
    registry.ban_now(ip("2001:db8:1:2::1"));
    assert!(registry.banned(ip("2001:db8:1:2::7")).is_some());
    assert_eq!(registry.banned(ip("2001:db8:1:2::5")), None);
}

#[test]
fn allow_listing_a_banned_client_lifts_its_ban_at_once() {
    let (registry, _) = setup(|_| {});
    let client = ip("203.0.113.9");
    registry.ban_for(client, BanLength::Permanent).unwrap();
    registry.reconfigure(AbuseSettings {
        allow: CidrList::parse("203.0.113.0/24").unwrap(),
        ..AbuseSettings::default()
    });
    assert_eq!(registry.banned(client), None);
}

// ----- IPv6 /48 sharing ----------------------------------------------------------------------

#[test]
fn a_48_rotating_through_64s_under_pressure_shares_one_entry() {
    let limit = V6_KEYS_PER_48 as usize;
    let (registry, _) = setup(|s| s.max_entries = (limit * 4) as u32);
    // Half the table is taken by others first: that is "pressure".
    for i in 0..(limit * 2) as u32 {
        registry.strike(
            IpAddr::V4(std::net::Ipv4Addr::from_bits(0x0a00_0000 + i)),
            1,
        );
    }
    let rotating = |n: u32| ip(&format!("2001:db8:1:{n:x}::1"));
    for n in 0..limit as u32 + 40 {
        registry.strike(rotating(n), 1);
    }
    // The /48 holds its share plus one shared entry, never more.
    assert_eq!(registry.tracked(), limit * 2 + limit + 1);
    // The overflow /64s struck the shared entry 40 times: with threshold 20 it is banned, and
    // the ban covers the /48, including /64s never seen.
    assert!(registry.banned(ip("2001:db8:1:ffff::1")).is_some());
    assert_eq!(registry.banned(ip("2001:db8:2::1")), None);
    let views = registry.bans();
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].client, "2001:db8:1::/48");
    assert!(registry.unban_target(BanTarget::parse("2001:db8:1::/48").unwrap()));
    assert_eq!(registry.banned(ip("2001:db8:1:ffff::1")), None);
}

#[test]
fn without_pressure_every_64_has_its_own_entry() {
    let (registry, _) = setup(|_| {});
    for n in 0..V6_KEYS_PER_48 + 10 {
        registry.strike(ip(&format!("2001:db8:1:{n:x}::1")), 1);
    }
    assert_eq!(registry.tracked(), V6_KEYS_PER_48 as usize + 10);
    assert!(registry.bans().is_empty());
}

// ----- the waiting line ---------------------------------------------------------------------

fn fake_line(registry: &Registry, visitors: &[&str]) -> Arc<Mutex<Vec<IpAddr>>> {
    let line = Arc::new(Mutex::new(
        visitors.iter().map(|v| ip(v)).collect::<Vec<_>>(),
    ));
    let shared = line.clone();
    registry.set_line_remover(Arc::new(move |remove: &dyn Fn(IpAddr) -> bool| {
        let mut line = shared.lock();
        let before = line.len();
        line.retain(|visitor| !remove(*visitor));
        before - line.len()
    }));
    line
}

#[test]
fn a_ban_removes_the_clients_waiting_visitors_at_once() {
    let (registry, _) = setup(|s| {
        s.threshold = 1;
        s.allow = CidrList::parse("2001:db8:1:2::5").unwrap();
    });
    let line = fake_line(
        &registry,
        &[
            "203.0.113.7",
            "198.51.100.4",
            "2001:db8:1:2::9",
            "2001:db8:1:2::5",
            "203.0.113.7",
        ],
    );
    registry.strike(ip("203.0.113.7"), 1);
    assert_eq!(line.lock().len(), 3);
    registry.ban_now(ip("2001:db8:1:2::1"));
    let left: Vec<String> = line.lock().iter().map(|v| v.to_string()).collect();
    assert_eq!(left, ["198.51.100.4", "2001:db8:1:2::5"]);
}

#[test]
fn an_operator_ban_reports_how_many_visitors_it_dropped() {
    let (registry, _) = setup(|s| s.allow = CidrList::parse("127.0.0.1/32").unwrap());
    let line = fake_line(
        &registry,
        &["10.1.2.3", "10.1.9.9", "127.0.0.1", "10.2.0.1"],
    );
    let outcome = registry
        .ban(
            BanTarget::parse("10.1.0.0/16").unwrap(),
            BanLength::Timed(mins(60)),
        )
        .unwrap();
    assert_eq!(outcome.dropped, 2);
    let outcome = registry
        .ban(
            BanTarget::parse("127.0.0.0/8").unwrap(),
            BanLength::Timed(mins(60)),
        )
        .unwrap();
    assert_eq!(outcome.dropped, 0);
    assert_eq!(line.lock().len(), 2);
}

#[test]
fn concurrent_bans_all_reach_the_line() {
    let (registry, _) = setup(|s| s.threshold = 1);
    let visitors: Vec<String> = (0..64).map(|i| format!("10.0.0.{i}")).collect();
    let refs: Vec<&str> = visitors.iter().map(String::as_str).collect();
    let line = fake_line(&registry, &refs);
    let registry = Arc::new(registry);
    std::thread::scope(|scope| {
        for chunk in visitors.chunks(8) {
            let registry = registry.clone();
            scope.spawn(move || {
                for visitor in chunk {
                    registry.strike(ip(visitor), 1);
                }
            });
        }
    });
    assert!(line.lock().is_empty());
}

// ----- listing, stats, export and import ------------------------------------------------------

#[test]
fn bans_are_listed_permanent_first_then_latest_end_then_singles() {
    let (registry, _) = setup(|_| {});
    registry
        .ban_for(ip("192.0.2.1"), BanLength::Timed(mins(10)))
        .unwrap();
    registry
        .ban_range(net("192.0.2.0/24"), BanLength::Timed(mins(10)))
        .unwrap();
    registry
        .ban_for(ip("192.0.2.2"), BanLength::Timed(mins(60)))
        .unwrap();
    registry
        .ban_range(net("198.51.0.0/16"), BanLength::Permanent)
        .unwrap();
    registry
        .ban_for(ip("203.0.113.9"), BanLength::Permanent)
        .unwrap();
    let order: Vec<String> = registry.bans().into_iter().map(|b| b.client).collect();
    assert_eq!(
        order,
        [
            "203.0.113.9",
            "198.51.0.0/16",
            "192.0.2.2",
            "192.0.2.1",
            "192.0.2.0/24"
        ]
    );
    let first = serde_json::to_string(&registry.bans()[3]).unwrap();
    assert_eq!(
        first,
        r#"{"client":"192.0.2.1","until":"2026-01-01T00:10:00Z","remaining_seconds":600,"offenses":1,"range":false,"permanent":false}"#
    );
}

#[test]
fn stats_hide_table_sizes_while_off_but_keep_counters() {
    let (registry, _) = setup(|s| s.threshold = 1);
    registry.strike(ip("203.0.113.9"), 1);
    registry
        .ban_range(net("10.0.0.0/8"), BanLength::Permanent)
        .unwrap();
    let on = registry.stats();
    assert_eq!((on.tracked, on.range_bans, on.bans_total), (1, 1, 2));
    registry.reconfigure(AbuseSettings {
        enabled: false,
        ..AbuseSettings::default()
    });
    let off = registry.stats();
    assert!(!off.enabled);
    assert_eq!((off.tracked, off.range_bans, off.bans_total), (0, 0, 2));
}

#[test]
fn export_then_import_restores_bans_and_escalation() {
    let (registry, clock) = setup(|_| {});
    registry
        .ban_for(ip("203.0.113.9"), BanLength::Permanent)
        .unwrap();
    registry.ban_now(ip("203.0.113.10"));
    registry.ban_now(ip("2001:db8:1:2::5"));
    registry
        .ban_range(net("198.51.0.0/16"), BanLength::Permanent)
        .unwrap();
    registry
        .ban_range(net("192.0.2.0/24"), BanLength::Timed(mins(60)))
        .unwrap();
    registry.strike(ip("198.51.100.77"), 1);
    let snapshot = registry.export();
    assert_eq!(snapshot.clients.len(), 3);
    assert_eq!(snapshot.ranges.len(), 2);
    let text = serde_json::to_string(&snapshot).unwrap();
    let parsed: BanSnapshot = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed, snapshot);

    let (restored, restored_clock) = setup(|_| {});
    restored_clock.set(clock.now_nanos());
    let report = restored.import(&parsed);
    assert_eq!(report.clients, 3);
    assert_eq!(report.ranges, 2);
    assert_eq!(
        restored.banned(ip("203.0.113.9")),
        Some(BanLength::Permanent)
    );
    assert_eq!(timed(restored.banned(ip("203.0.113.10"))), mins(5));
    assert!(restored.banned(ip("2001:db8:1:2:ffff::")).is_some());
    assert_eq!(restored.range_count(), 2);
    assert!(restored.banned(ip("192.0.2.77")).is_some());
    // The history came along: the next ban after the first ended is the second offense.
    restored_clock.advance(mins(6));
    assert_eq!(timed(restored.ban_now(ip("203.0.113.10"))), mins(10));
}

#[test]
fn import_skips_now_exempt_long_ended_and_garbage_records() {
    let (registry, _) = setup(|s| s.allow = CidrList::parse("203.0.113.0/24").unwrap());
    let old = WallTime(T0 - 25 * HOUR);
    let snapshot = BanSnapshot {
        clients: vec![
            BanRecord {
                client: "203.0.113.9".into(),
                until: None,
                permanent: true,
                offenses: 1,
            },
            BanRecord {
                client: "198.51.100.1".into(),
                until: Some(old),
                permanent: false,
                offenses: 2,
            },
            BanRecord {
                client: "nope".into(),
                until: None,
                permanent: true,
                offenses: 1,
            },
            BanRecord {
                client: "198.51.100.2".into(),
                until: Some(WallTime(T0 - HOUR)),
                permanent: false,
                offenses: 0,
            },
        ],
        ranges: vec![BanRecord {
            client: "192.0.2.0/24".into(),
            until: Some(WallTime(T0 - 1)),
            permanent: false,
            offenses: 1,
        }],
    };
    let report = registry.import(&snapshot);
    assert_eq!(report.clients, 1);
    assert_eq!(report.skipped, 4);
    assert_eq!(registry.banned(ip("203.0.113.9")), None);
    // Kept as history with at least one offense: the next ban is the second.
    assert_eq!(timed(registry.ban_now(ip("198.51.100.2"))), mins(10));
}

#[test]
fn changes_move_on_every_saved_state_change() {
    let (registry, _) = setup(|_| {});
    let start = registry.changes();
    registry.strike(ip("203.0.113.9"), 1);
    assert_eq!(registry.changes(), start);
    registry.ban_now(ip("203.0.113.9"));
    let banned = registry.changes();
    assert!(banned > start);
    registry.unban(ip("203.0.113.9"));
    assert!(registry.changes() > banned);
    let unbanned = registry.changes();
    registry
        .ban_range(net("10.0.0.0/8"), BanLength::Permanent)
        .unwrap();
    registry.unban_target(BanTarget::parse("10.0.0.0/8").unwrap());
    assert_eq!(registry.changes(), unbanned + 2);
}

#[tokio::test(start_paused = true)]
async fn the_janitor_sweeps_on_its_period() {
    let (registry, clock) = setup(|_| {});
    let registry = Arc::new(registry);
    registry.strike(ip("203.0.113.9"), 1);
    let janitor = registry.spawn_janitor();
    assert_eq!(registry.janitor_period(), Duration::from_secs(30));
    clock.advance(mins(3));
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(registry.tracked(), 0);
    janitor.abort();
}

// ----- property: bans survive and the limit holds ------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Strike(u8, u32),
    BanNow(u8),
    BanFor(u8, Option<u16>),
    Unban(u8),
    Advance(u16),
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..16, 1u32..8).prop_map(|(a, w)| Op::Strike(a, w)),
        2 => (0u8..16).prop_map(Op::BanNow),
        1 => (0u8..16, proptest::option::of(1u16..600)).prop_map(|(a, s)| Op::BanFor(a, s)),
        1 => (0u8..16).prop_map(Op::Unban),
        2 => (1u16..400).prop_map(Op::Advance),
        1 => Just(Op::Sweep),
    ]
}

proptest! {
    #[test]
    fn no_sequence_evicts_a_ban_or_exceeds_the_limit(
        max_entries in 1u32..6,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let (registry, clock) = setup(|s| {
            s.max_entries = max_entries;
            s.threshold = 5;
            s.cooldown = mins(1);
            s.max_cooldown = mins(4);
        });
        let address = |n: u8| IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, n));
        // Bans we saw start, with their end; each must hold until it ends or is lifted.
        let mut expected: HashMap<u8, Option<i64>> = HashMap::new();
        for op in ops {
            match op {
                Op::Strike(a, weight) => { registry.strike(address(a), weight); }
                Op::BanNow(a) => { registry.ban_now(address(a)); }
                Op::BanFor(a, secs) => {
                    let length = secs.map_or(BanLength::Permanent, |s| {
                        BanLength::Timed(Duration::from_secs(u64::from(s)))
                    });
                    let _ = registry.ban_for(address(a), length);
                }
                Op::Unban(a) => {
                    registry.unban(address(a));
                    expected.remove(&a);
                }
                Op::Advance(secs) => clock.advance(Duration::from_secs(u64::from(secs))),
                Op::Sweep => { registry.sweep(); }
            }
            let now = clock.now_nanos();
            prop_assert!(registry.tracked() <= max_entries as usize);
            for (a, end) in &expected {
                if end.is_none_or(|end| end > now) {
                    prop_assert!(registry.banned(address(*a)).is_some(), "ban on {} vanished", a);
                }
            }
            for a in 0u8..16 {
                match registry.banned(address(a)) {
                    Some(BanLength::Permanent) => { expected.insert(a, None); }
                    Some(BanLength::Timed(left)) => {
                        expected.insert(a, Some(now + left.as_nanos() as i64));
                    }
                    None => {}
                }
            }
        }
    }
}

// ----- sharing with other instances ----------------------------------------------------------

type Heard<T> = Arc<Mutex<Vec<T>>>;

/// A registry whose share and strike hooks record what they hear.
fn sharing(
    edit: impl FnOnce(&mut AbuseSettings),
) -> (Registry, Heard<SharedChange>, Heard<(IpNet, u32)>) {
    let (registry, _clock) = setup(edit);
    let shared = Arc::new(Mutex::new(Vec::new()));
    let struck = Arc::new(Mutex::new(Vec::new()));
    let into = shared.clone();
    registry.set_share_hook(Arc::new(move |change: &SharedChange| {
        into.lock().push(*change)
    }));
    let into = struck.clone();
    registry.set_strike_hook(Arc::new(move |scope: IpNet, weight: u32| {
        into.lock().push((scope, weight))
    }));
    (registry, shared, struck)
}

#[test]
fn local_bans_and_lifts_are_shared_with_their_offenses() {
    let (registry, shared, _) = sharing(|_| {});
    registry
        .ban(
            BanTarget::parse("203.0.113.7").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    registry
        .ban(
            BanTarget::parse("198.51.100.0/24").unwrap(),
            BanLength::Timed(mins(60)),
        )
        .unwrap();
    assert!(registry.unban(ip("203.0.113.7")));
    assert!(registry.unban_target(BanTarget::parse("198.51.100.0/24").unwrap()));
    let heard = shared.lock().clone();
    assert_eq!(
        heard,
        vec![
            SharedChange::Banned {
                scope: net("203.0.113.7/32"),
                range: false,
                until: FOREVER,
                offenses: 1,
                cause: BanCause::Operator,
            },
            SharedChange::Banned {
                scope: net("198.51.100.0/24"),
                range: true,
                until: T0 + HOUR,
                offenses: 1,
                cause: BanCause::Operator,
            },
            SharedChange::Lifted {
                scope: net("203.0.113.7/32"),
                range: false,
            },
            SharedChange::Lifted {
                scope: net("198.51.100.0/24"),
                range: true,
            },
        ]
    );
}

#[test]
fn strikes_that_do_not_ban_are_reported_and_the_banning_one_is_not() {
    let (registry, shared, struck) = sharing(|s| s.threshold = 3);
    let client = ip("2001:db8:1:2::9");
    assert!(!registry.strike(client, 1));
    assert!(!registry.strike(client, 1));
    assert!(registry.strike(client, 1));
    assert!(registry.strike(client, 1));
    let scope = net("2001:db8:1:2::/64");
    assert_eq!(struck.lock().clone(), vec![(scope, 1), (scope, 1)]);
    assert!(matches!(
        shared.lock().as_slice(),
        [SharedChange::Banned {
            cause: BanCause::Strikes,
            offenses: 1,
            ..
        }]
    ));
}

#[test]
fn bans_from_other_instances_apply_without_being_shared_again() {
    let (registry, shared, _) = sharing(|s| s.allow = CidrList::parse("192.0.2.0/24").unwrap());
    let scope = net("203.0.113.7/32");
    assert!(registry.apply_shared_ban(scope, false, T0 + HOUR, 3, BanCause::Strikes));
    assert_eq!(timed(registry.banned(ip("203.0.113.7"))), mins(60));
    assert_eq!(registry.offenses_of(scope, false), 3);
    // The same end again changes nothing; an ended one is refused.
    assert!(!registry.apply_shared_ban(scope, false, T0 + HOUR, 3, BanCause::Strikes));
    assert!(!registry.apply_shared_ban(scope, false, T0 - 1, 3, BanCause::Strikes));
    // Exempt clients here stay unbanned; ranges apply.
    assert!(!registry.apply_shared_ban(net("192.0.2.9/32"), false, FOREVER, 1, BanCause::Operator));
    let range = net("198.51.100.0/24");
    assert!(registry.apply_shared_ban(range, true, FOREVER, 1, BanCause::Operator));
    assert_eq!(
        registry.banned(ip("198.51.100.40")),
        Some(BanLength::Permanent)
    );
    assert!(registry.apply_shared_lift(range, true));
    assert!(registry.apply_shared_lift(scope, false));
    assert!(!registry.apply_shared_lift(scope, false));
    assert_eq!(registry.banned(ip("203.0.113.7")), None);
    assert!(shared.lock().is_empty(), "{:?}", shared.lock());
    assert!(registry.changes() >= 4);
}
