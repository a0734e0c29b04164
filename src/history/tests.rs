//! The history with an injected clock and a real registry: recording, the bounds, ban windows
//! and their triggers, lifts, the listing order, and the log written and read back.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method};
use ipnet::IpNet;

use super::*;
use crate::abuse::clock::ManualClock;
use crate::abuse::{AbuseSettings, BanCause, BanLength, BanTarget, FOREVER};
use crate::config::{BanPathMatcher, PathList};

const SECOND: i64 = 1_000_000_000;
const HOUR: i64 = 3600 * SECOND;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn real_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A registry with `/.env` as a ban path and a history, both on one manual clock, wired as the
/// app wires them.
struct Lab {
    history: Arc<History>,
    registry: Arc<Registry>,
    clock: Arc<ManualClock>,
}

impl Lab {
    fn new() -> Lab {
        Lab::at(real_now())
    }

    fn at(now: i64) -> Lab {
        Lab::with_limits(now, LogLimits::default())
    }

    fn with_limits(now: i64, limits: LogLimits) -> Lab {
        let clock = Arc::new(ManualClock::at(now));
        let settings = AbuseSettings {
            threshold: 3,
            ban_paths: BanPathMatcher::new(&PathList::parse_strict("/.env").unwrap()),
            ..AbuseSettings::default()
        };
        let registry = Arc::new(Registry::with_clock(settings, clock.clone()));
        let mut history = History::with_clock(registry.clone(), clock.clone());
        history.limits = limits;
        let history = Arc::new(history);
        let hook = Arc::downgrade(&history);
        registry.set_ban_hook(Arc::new(move |notice: &BanNotice| {
            if let Some(history) = hook.upgrade() {
                history.on_ban(notice);
            }
        }));
        Lab {
            history,
            registry,
            clock,
        }
    }

    fn advance(&self, nanos: i64) {
        self.clock.advance(Duration::from_nanos(nanos as u64));
    }

    /// A request as the pipeline makes it: noted on arrival, checked against bans, `during`
    /// run while it is under way, recorded with `status` unless the ban answered it.
    fn request_with(
        &self,
        client: &str,
        target: &str,
        status: u16,
        agent: Option<&str>,
        quiet: bool,
        during: impl FnOnce(&Lab),
    ) {
        let client = ip(client);
        let mut headers = HeaderMap::new();
        if let Some(agent) = agent {
            headers.insert(
                http::header::USER_AGENT,
                HeaderValue::from_str(agent).unwrap(),
            );
        }
        let arrival = self.history.arrive(&headers);
        let path_len = target.find('?').unwrap_or(target.len());
        let banned = self.registry.enforce(Some(client), &target[..path_len]);
        if banned.is_none() {
            during(self);
        }
        let status = match banned {
            Some(_) => 429,
            None => status,
        };
        self.history.record(
            arrival,
            Seen {
                client,
                method: &Method::GET,
                target,
                path_len,
                status,
                latency: Duration::from_millis(3),
                banned: banned.is_some(),
                quiet,
                rank: 0,
            },
        );
    }

    fn request(&self, client: &str, target: &str, status: u16) {
        self.request_with(client, target, status, Some("curl/8"), false, |_| {});
    }

    fn detail(&self, client: &str) -> ClientDetail {
        self.history.client(ip(client)).expect("recorded")
    }

    fn only_ban(&self) -> BanRow {
        let page = self.history.bans(&BanQuery {
            page: 1,
            size: 100,
            ..BanQuery::default()
        });
        assert_eq!(page.total, 1, "{page:?}");
        page.bans[0].clone()
    }

    fn full_ban(&self, id: u64) -> BanRow {
        self.history.ban(id).expect("kept").ban
    }
}

fn paths(entries: &[EntryRow]) -> Vec<&str> {
    entries.iter().map(|e| e.path.as_str()).collect()
}

// ----- recording ---------------------------------------------------------------------------

#[test]
fn log_path_follows_the_setting() {
    let dir = std::path::Path::new("/srv/concert");
    assert_eq!(log_path("", None), None);
    assert_eq!(log_path("", Some(dir)), Some(dir.join("history.jsonl")));
    for off in ["off", "none", "false", "0", "OFF", " none "] {
        assert_eq!(log_path(off, Some(dir)), None, "{off}");
    }
    assert_eq!(
        log_path("/var/log/concert/h.jsonl", Some(dir)),
        Some(PathBuf::from("/var/log/concert/h.jsonl"))
    );
    assert_eq!(
        log_path("/var/log/concert/h.jsonl", None),
        Some(PathBuf::from("/var/log/concert/h.jsonl"))
    );
}

#[test]
fn each_client_keeps_its_latest_hundred_requests_newest_first() {
    let lab = Lab::new();
    for n in 0..105 {
        lab.advance(SECOND);
        lab.request("203.0.113.5", &format!("/r{n}"), 200);
    }
    lab.request("198.51.100.7", "/other?x=1", 404);
    let detail = lab.detail("203.0.113.5");
    assert_eq!(detail.entries.len(), PER_CLIENT);
    assert_eq!(detail.entries[0].path, "/r104");
    assert_eq!(detail.entries[99].path, "/r5");
    assert_eq!(detail.client.requests, 105);
    assert_eq!(detail.client.errors, 0);
    assert_eq!(detail.entries[0].latency_ms, 3.0);
    assert_eq!(detail.entries[0].user_agent, "curl/8");
    let ring = lab
        .history
        .clients
        .shard(ip("203.0.113.5"))
        .lock()
        .get(ip("203.0.113.5"))
        .map(|client| client.entries.capacity());
    assert_eq!(ring, Some(PER_CLIENT), "the ring never grows past its size");
    let other = lab.detail("198.51.100.7");
    assert_eq!(other.client.errors, 1);
    assert_eq!(other.client.last_path, "/other?x=1");
    assert_eq!(other.client.last_status, 404);
    assert!(lab.history.client(ip("192.0.2.1")).is_none());
}

#[test]
fn methods_targets_and_browsers_are_bounded() {
    let lab = Lab::new();
    let long = format!("/{}", "é".repeat(200));
    lab.request_with(
        "203.0.113.5",
        &long,
        200,
        Some(&"x".repeat(300)),
        false,
        |_| {},
    );
    let detail = lab.detail("203.0.113.5");
    assert!(detail.entries[0].path.len() <= TARGET_LEN);
    assert!(detail.entries[0].path.starts_with("/éé"));
    assert_eq!(detail.user_agents[0].chars().count(), AGENT_LEN);
    assert_eq!(
        clients::MethodText::new("VERYLONGMETHODNAME123").as_str(),
        "VERYLONGMETHODNA"
    );

    for agent in ["a/1", "b/1", "c/1", "d/1", "e/1", "a/1"] {
        lab.request_with("198.51.100.9", "/", 200, Some(agent), false, |_| {});
    }
    lab.request_with("198.51.100.9", "/", 200, None, false, |_| {});
    let detail = lab.detail("198.51.100.9");
    assert_eq!(detail.user_agents, ["a/1", "b/1", "c/1", "d/1"]);
    let agents: Vec<&str> = detail
        .entries
        .iter()
        .map(|e| e.user_agent.as_str())
        .collect();
    assert_eq!(
        agents,
        ["", "a/1", "(another browser)", "d/1", "c/1", "b/1", "a/1"]
    );
}

#[test]
fn a_target_asked_for_again_shares_the_copy_kept_of_it() {
    let lab = Lab::new();
    for target in ["/poll", "/poll", "/other", "/poll"] {
        lab.request("203.0.113.5", target, 200);
    }
    let client = ip("203.0.113.5");
    let shard = lab.history.clients.shard(client).lock();
    let entries = &shard.get(client).unwrap().entries;
    let paths: Vec<&Arc<str>> = entries.iter().map(|entry| &entry.path).collect();
    assert_eq!(
        paths.iter().map(|p| &***p).collect::<Vec<_>>(),
        ["/poll", "/poll", "/other", "/poll"]
    );
    assert!(Arc::ptr_eq(paths[0], paths[1]), "the same target, one copy");
    assert!(
        !Arc::ptr_eq(paths[1], paths[3]),
        "only the latest one is compared"
    );
}

#[test]
fn quiet_successes_are_skipped_but_their_refusals_are_kept() {
    let lab = Lab::new();
    lab.request_with("203.0.113.5", "/static/app.js", 200, None, true, |_| {});
    assert!(lab.history.client(ip("203.0.113.5")).is_none());
    lab.request_with("203.0.113.5", "/static/app.js", 403, None, true, |_| {});
    assert_eq!(
        paths(&lab.detail("203.0.113.5").entries),
        ["/static/app.js"]
    );
}

#[test]
fn a_full_shard_forgets_the_longest_idle_unflagged_client_first() {
    let lab = Lab::new();
    let first = ip("10.0.0.1");
    let home = lab.history.clients.shard(first) as *const _;
    let same_shard: Vec<String> = (0u32..1 << 20)
        .map(|n| IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n)))
        .filter(|ip| std::ptr::eq(lab.history.clients.shard(*ip), home))
        .take(clients::PER_SHARD + 2)
        .map(|ip| ip.to_string())
        .collect();
    // The shard's first client is flagged (blocked while banned); the rest are not.
    lab.registry
        .ban_for(
            ip(&same_shard[0]),
            BanLength::Timed(Duration::from_secs(60)),
        )
        .unwrap();
    for client in &same_shard[..clients::PER_SHARD] {
        lab.advance(SECOND);
        lab.request(client, "/", 200);
    }
    assert!(lab.detail(&same_shard[0]).client.blocked == 1);
    lab.advance(SECOND);
    lab.request(&same_shard[clients::PER_SHARD], "/", 200);
    assert!(
        lab.history.client(ip(&same_shard[0])).is_some(),
        "flagged kept"
    );
    assert!(
        lab.history.client(ip(&same_shard[1])).is_none(),
        "idlest unflagged gone"
    );
    assert!(lab.history.client(ip(&same_shard[2])).is_some());
    assert_eq!(lab.history.clients.evicted(), 1);
    // Seen again, the second idlest moves to the back of the line.
    lab.request(&same_shard[2], "/", 200);
    lab.request(&same_shard[clients::PER_SHARD + 1], "/", 200);
    assert!(lab.history.client(ip(&same_shard[2])).is_some());
    assert!(lab.history.client(ip(&same_shard[3])).is_none());
}

#[test]
fn when_every_client_is_flagged_the_longest_idle_goes() {
    let lab = Lab::new();
    let first = ip("10.0.0.1");
    let home = lab.history.clients.shard(first) as *const _;
    let same_shard: Vec<IpAddr> = (0u32..1 << 20)
        .map(|n| IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n)))
        .filter(|ip| std::ptr::eq(lab.history.clients.shard(*ip), home))
        .take(clients::PER_SHARD + 1)
        .collect();
    lab.registry
        .ban(BanTarget::Range(net("10.0.0.0/8")), BanLength::Permanent)
        .unwrap();
    for client in &same_shard {
        lab.advance(SECOND);
        lab.request(&client.to_string(), "/", 200);
    }
    assert!(lab.history.client(same_shard[0]).is_none());
    assert!(lab.history.client(same_shard[1]).is_some());
}

// ----- ban windows -------------------------------------------------------------------------

#[test]
fn a_ban_path_opens_a_window_its_request_triggered_and_counts_what_follows() {
    let lab = Lab::new();
    lab.request("203.0.113.5", "/hello", 200);
    lab.advance(SECOND);
    lab.request("203.0.113.5", "/.env", 404);
    for target in ["/hello", "/hello?x=1", "/wp-login.php"] {
        lab.advance(SECOND);
        lab.request("203.0.113.5", target, 200);
    }
    let window = lab.full_ban(lab.only_ban().id);
    assert!(window.active && !window.permanent && window.began.is_some());
    assert_eq!(window.target, "203.0.113.5");
    assert_eq!(window.requests, 3);
    let trigger = window.trigger.expect("a trigger");
    assert_eq!(
        (trigger.path.as_str(), trigger.method.as_str()),
        ("/.env", "GET")
    );
    assert_eq!(trigger.client, "203.0.113.5");
    let hits: Vec<(&str, u64)> = window
        .paths
        .iter()
        .map(|h| (h.name.as_str(), h.hits))
        .collect();
    assert_eq!(hits, [("/hello", 2), ("/wp-login.php", 1)]);
    assert_eq!(
        window.clients,
        [Hits {
            name: "203.0.113.5".into(),
            hits: 3
        }]
    );
    assert!(window.source.is_empty());

    let detail = lab.detail("203.0.113.5");
    let flags: Vec<(bool, bool)> = detail
        .entries
        .iter()
        .map(|e| (e.triggered_ban, e.blocked))
        .collect();
    assert_eq!(
        flags,
        [
            (false, true),
            (false, true),
            (false, true),
            (true, false),
            (false, false)
        ]
    );
    assert!(
        detail.entries[..4]
            .iter()
            .all(|e| e.ban_id == Some(window.id))
    );
    assert_eq!(detail.client.blocked, 3);
    assert_eq!(detail.client.bans_triggered, 1);
    assert_eq!(detail.client.errors, 0);
    assert!(detail.client.banned_now);
    assert_eq!(detail.bans.len(), 1);
}

#[test]
fn strikes_during_a_request_make_it_the_trigger() {
    let lab = Lab::new();
    lab.request("203.0.113.5", "/a", 200);
    lab.request_with("203.0.113.5", "/b", 403, None, false, |lab| {
        lab.registry.strike(ip("203.0.113.5"), 5);
    });
    // Another client's request during the ban is no trigger, nor is the next blocked one.
    lab.request("198.51.100.1", "/c", 200);
    lab.request("203.0.113.5", "/d", 200);
    let window = lab.only_ban();
    let trigger = window.trigger.expect("trigger");
    assert_eq!((trigger.path.as_str(), trigger.status), ("/b", 403));
    assert_eq!(window.requests, 1);
    let detail = lab.detail("203.0.113.5");
    assert!(detail.entries[1].triggered_ban);
    assert_eq!(detail.client.errors, 0);
    assert_eq!(detail.client.bans_triggered, 1);
}

#[test]
fn a_ban_begun_outside_a_request_takes_the_newest_request_in_scope_as_trigger() {
    let lab = Lab::new();
    lab.request("2001:db8:1:2::5", "/old", 200);
    lab.advance(10 * SECOND);
    lab.request("2001:db8:1:2::5", "/first", 200);
    lab.advance(SECOND);
    lab.request("2001:db8:1:2::9", "/newest", 200);
    lab.request("2001:db8:1:3::9", "/elsewhere", 200);
    lab.advance(SECOND);
    // Strikes charged outside any request (a queue hook, say) ban the /64.
    lab.registry.strike(ip("2001:db8:1:2::5"), 5);
    lab.history.maintain();
    assert!(lab.only_ban().trigger.is_none(), "not before the grace");
    lab.advance(SECOND / 2);
    lab.history.maintain();
    let window = lab.only_ban();
    assert_eq!(window.target, "2001:db8:1:2::/64");
    let trigger = window.trigger.expect("found");
    assert_eq!(
        (trigger.client.as_str(), trigger.path.as_str()),
        ("2001:db8:1:2::9", "/newest")
    );
    let detail = lab.detail("2001:db8:1:2::9");
    assert!(detail.entries[0].triggered_ban);
    assert_eq!(detail.client.bans_triggered, 1);
}

#[test]
fn no_request_within_five_seconds_means_no_trigger() {
    let lab = Lab::new();
    lab.request("203.0.113.5", "/long-ago", 200);
    lab.advance(6 * SECOND);
    lab.registry.strike(ip("203.0.113.5"), 5);
    lab.advance(SECOND);
    lab.history.maintain();
    assert!(lab.only_ban().trigger.is_none());
    assert_eq!(lab.history.pending.load(Ordering::Relaxed), 0);
}

#[test]
fn operator_bans_name_their_source_and_count_their_changes() {
    let lab = Lab::new();
    lab.request("203.0.113.5", "/x", 200);
    let target = BanTarget::parse("203.0.113.5").unwrap();
    lab.registry
        .ban(target, BanLength::Timed(Duration::from_secs(3600)))
        .unwrap();
    let window = lab.only_ban();
    assert!(window.trigger.is_none(), "an operator ban has no trigger");
    assert_eq!(window.source, OPERATOR_SOURCE);
    lab.registry
        .ban(target, BanLength::Timed(Duration::from_secs(600)))
        .unwrap();
    lab.history
        .note_source(target.scope(), "banned in the portal by 192.0.2.1");
    let window = lab.only_ban();
    assert_eq!(window.changes, 1);
    assert_eq!(window.remaining_seconds, 600);
    assert_eq!(window.source, "banned in the portal by 192.0.2.1");

    // A source named first goes to the next ban of that scope.
    let range = BanTarget::parse("198.51.0.0/16").unwrap();
    lab.history.note_source(
        range.scope(),
        "removed from the line and banned in the portal by 192.0.2.1",
    );
    lab.registry.ban(range, BanLength::Permanent).unwrap();
    let page = lab.history.bans(&BanQuery {
        q: "198.51".into(),
        page: 1,
        size: 25,
    });
    assert_eq!(page.total, 1);
    assert!(page.bans[0].range && page.bans[0].permanent && page.bans[0].until.is_none());
    assert!(page.bans[0].source.contains("portal"));
}

#[test]
fn a_range_counts_the_addresses_inside_it() {
    let lab = Lab::new();
    lab.registry
        .ban(
            BanTarget::parse("198.51.0.0/16").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    lab.request("198.51.0.1", "/a", 200);
    lab.request("198.51.200.7", "/b", 200);
    lab.request("198.51.200.7", "/b", 200);
    lab.request("198.52.0.1", "/c", 200);
    let window = lab.full_ban(lab.only_ban().id);
    assert_eq!(window.requests, 3);
    assert_eq!(window.distinct_clients, 2);
    assert_eq!(
        window.clients[0],
        Hits {
            name: "198.51.200.7".into(),
            hits: 2
        }
    );
    assert!(window.trigger.is_none());
    assert!(!lab.detail("198.52.0.1").entries[0].blocked);
}

#[test]
fn windows_itemise_a_hundred_paths_and_addresses() {
    let lab = Lab::new();
    lab.registry
        .ban(
            BanTarget::parse("10.0.0.0/8").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    for n in 0..120u32 {
        let client = std::net::Ipv4Addr::from(0x0a00_0000 + n).to_string();
        lab.request(&client, &format!("/p{n}"), 200);
    }
    let window = lab.full_ban(lab.only_ban().id);
    assert_eq!(window.requests, 120);
    assert_eq!(
        (window.distinct_paths, window.other_paths),
        (WINDOW_ITEMS, 20)
    );
    assert_eq!(
        (window.distinct_clients, window.other_clients),
        (WINDOW_ITEMS, 20)
    );
    assert_eq!(lab.only_ban().paths.len(), 3, "lists show the top three");
}

#[test]
fn lifts_are_noticed_by_whoever_made_them() {
    let lab = Lab::new();
    let one = BanTarget::parse("203.0.113.5").unwrap();
    lab.registry.ban(one, BanLength::Permanent).unwrap();
    lab.history.maintain();
    assert!(lab.only_ban().active);
    assert!(lab.registry.unban_target(one));
    lab.history.maintain();
    let window = lab.only_ban();
    assert!(!window.active && window.ended.is_some());
    assert_eq!(window.end_reason, "lifted");
    assert!(window.lifted_by.contains("admin API"));
    // Not banned any more: recorded normally.
    lab.request("203.0.113.5", "/after", 200);
    assert!(!lab.detail("203.0.113.5").entries[0].blocked);

    let two = BanTarget::parse("203.0.113.6").unwrap();
    lab.registry.ban(two, BanLength::Permanent).unwrap();
    lab.registry.unban_target(two);
    assert!(lab.history.note_lift(two.scope(), "the portal (192.0.2.1)"));
    let lifted = lab.history.bans(&BanQuery {
        q: "113.6".into(),
        page: 1,
        size: 25,
    });
    assert_eq!(lifted.bans[0].lifted_by, "the portal (192.0.2.1)");
    assert!(!lab.history.note_lift(two.scope(), "again"));
}

#[test]
fn a_ban_that_runs_out_ends_as_expired() {
    let lab = Lab::new();
    lab.registry
        .ban(
            BanTarget::parse("203.0.113.5").unwrap(),
            BanLength::Timed(Duration::from_secs(60)),
        )
        .unwrap();
    lab.advance(61 * SECOND);
    lab.history.maintain();
    let window = lab.only_ban();
    assert!(!window.active);
    assert_eq!(window.end_reason, "expired");
    assert!(window.lifted_by.is_empty());
    // A new ban of the same client is a new window.
    lab.registry
        .ban(
            BanTarget::parse("203.0.113.5").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    let page = lab.history.bans(&BanQuery {
        page: 1,
        size: 25,
        ..BanQuery::default()
    });
    assert_eq!(page.total, 2);
    assert!(page.bans[0].active && page.bans[0].id > page.bans[1].id);
}

#[test]
fn start_up_squares_windows_with_the_bans_in_force() {
    let lab = Lab::new();
    lab.registry
        .ban(
            BanTarget::parse("203.0.113.9").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    // A fresh history, as at start-up: the registry has a ban it never saw begin.
    let history = History::with_clock(lab.registry.clone(), lab.clock.clone());
    history.start(None);
    let page = history.bans(&BanQuery {
        page: 1,
        size: 25,
        ..BanQuery::default()
    });
    let window = &page.bans[0];
    assert!(window.began.is_none() && window.permanent && window.active);
    assert_eq!(window.source, RESTORED_SOURCE);
}

#[test]
fn idle_clients_and_old_windows_are_forgotten_after_three_days() {
    let lab = Lab::new();
    lab.registry
        .ban(
            BanTarget::parse("203.0.113.5").unwrap(),
            BanLength::Timed(Duration::from_secs(60)),
        )
        .unwrap();
    lab.request("203.0.113.5", "/", 200);
    lab.advance(71 * HOUR);
    lab.request("198.51.100.1", "/", 200);
    lab.history.forget_old();
    assert!(lab.history.client(ip("203.0.113.5")).is_some());
    lab.advance(2 * HOUR);
    lab.history.forget_old();
    assert!(lab.history.client(ip("203.0.113.5")).is_none());
    assert!(lab.history.client(ip("198.51.100.1")).is_some());
    assert_eq!(
        lab.history
            .bans(&BanQuery {
                page: 1,
                size: 25,
                ..BanQuery::default()
            })
            .total,
        0
    );
}

/// An operator's ban of `client` until `until`, as the registry tells the history of it.
fn operator_ban(history: &History, client: IpAddr, until: i64) {
    history.on_ban(&BanNotice {
        scope: IpNet::from(client),
        range: false,
        until,
        fresh: true,
        cause: BanCause::Operator,
    });
}

/// The `n`th of many distinct addresses (10.0.0.0 onwards).
fn nth_address(n: u32) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n))
}

fn kept_ids(history: &History) -> Vec<u64> {
    history.windows.lock().by_id.keys().copied().collect()
}

#[test]
fn at_most_five_thousand_windows_are_kept_and_those_in_force_stay() {
    let lab = Lab::new();
    let now = lab.clock.now_nanos();
    // Twenty permanent bans first (the oldest windows), then short ones that run out.
    for n in 0..20 {
        operator_ban(&lab.history, nth_address(n), FOREVER);
    }
    for n in 20..MAX_WINDOWS as u32 {
        operator_ban(&lab.history, nth_address(n), now + SECOND);
    }
    assert_eq!(kept_ids(&lab.history).len(), MAX_WINDOWS);
    // They ran out without anyone noticing yet: still marked active, but no longer in force.
    lab.advance(2 * SECOND);
    for n in 0..30 {
        operator_ban(&lab.history, nth_address(100_000 + n), FOREVER);
    }
    let kept = kept_ids(&lab.history);
    assert_eq!(kept.len(), MAX_WINDOWS);
    assert_eq!(kept[..20], (1..=20).collect::<Vec<u64>>(), "in force: kept");
    assert_eq!(kept[20], 51, "the oldest ended ones made room");
    assert_eq!(*kept.last().unwrap(), MAX_WINDOWS as u64 + 30);
}

// ----- listing -----------------------------------------------------------------------------

#[test]
fn clients_list_banned_then_flagged_then_latest_and_pages() {
    let lab = Lab::new();
    for (n, client) in [
        "192.0.2.1",
        "192.0.2.2",
        "192.0.2.3",
        "192.0.2.4",
        "192.0.2.5",
    ]
    .iter()
    .enumerate()
    {
        lab.advance(SECOND);
        lab.request(client, &format!("/page/{n}"), 200);
    }
    // .5 and .4 share a last-seen time: tied by address.
    lab.request("192.0.2.4", "/page/again", 200);
    lab.registry
        .ban(
            BanTarget::parse("192.0.2.1").unwrap(),
            BanLength::Timed(Duration::from_secs(600)),
        )
        .unwrap();
    lab.registry
        .ban(BanTarget::parse("192.0.2.2").unwrap(), BanLength::Permanent)
        .unwrap();
    lab.registry
        .ban(
            BanTarget::parse("192.0.2.3").unwrap(),
            BanLength::Timed(Duration::from_secs(1)),
        )
        .unwrap();
    lab.request("192.0.2.3", "/blocked", 200);
    lab.advance(2 * SECOND);
    let all = lab.history.clients(&ClientQuery {
        page: 1,
        size: 25,
        ..ClientQuery::default()
    });
    let order: Vec<&str> = all.clients.iter().map(|c| c.client.as_str()).collect();
    assert_eq!(
        order,
        [
            "192.0.2.2",
            "192.0.2.1",
            "192.0.2.3",
            "192.0.2.4",
            "192.0.2.5"
        ]
    );
    assert!(all.clients[0].ban_permanent && all.clients[0].ban_until_ms.is_none());
    assert_eq!(all.clients[1].ban_remaining_seconds, 598);
    assert!(all.clients[1].ban_until_ms.is_some());
    assert!(!all.clients[2].banned_now);
    assert_eq!((all.total, all.pages, all.tracked), (5, 1, 5));

    let flagged = lab.history.clients(&ClientQuery {
        flagged: true,
        page: 1,
        size: 25,
        ..ClientQuery::default()
    });
    assert_eq!(flagged.total, 3, "banned now, or blocked before");
    let by_path = lab.history.clients(&ClientQuery {
        q: "PAGE/AGAIN".into(),
        page: 1,
        size: 25,
        ..ClientQuery::default()
    });
    assert_eq!(by_path.clients[0].client, "192.0.2.4");
    let by_address = lab.history.clients(&ClientQuery {
        q: ".2.5".into(),
        page: 1,
        size: 25,
        ..ClientQuery::default()
    });
    assert_eq!(by_address.total, 1);

    let second = lab.history.clients(&ClientQuery {
        page: 2,
        size: 2,
        ..ClientQuery::default()
    });
    let order: Vec<&str> = second.clients.iter().map(|c| c.client.as_str()).collect();
    assert_eq!(order, ["192.0.2.3", "192.0.2.4"]);
    assert_eq!((second.page, second.pages), (2, 3));
    let clamped = lab.history.clients(&ClientQuery {
        page: 9,
        size: 2,
        ..ClientQuery::default()
    });
    assert_eq!((clamped.page, clamped.clients.len()), (3, 1));

    let overview = lab.history.overview("", false);
    assert_eq!(
        (overview.listed, overview.matched, overview.tracked),
        (5, 5, 5)
    );
    assert_eq!(overview.bans.len(), 3);
    assert!(overview.abuse_enabled && !overview.persisted);
    let json = serde_json::to_value(&overview).unwrap();
    assert_eq!(json["limits"]["max_clients"], 4096);
    assert_eq!(json["limits"]["bans_listed"], 200);
    for key in [
        "client",
        "first_seen",
        "last_seen",
        "requests",
        "blocked",
        "errors",
        "bans_triggered",
        "last_method",
        "last_path",
        "last_status",
        "banned_now",
        "ban_permanent",
        "ban_remaining_seconds",
        "ban_until_ms",
        "rank",
    ] {
        assert!(json["clients"][0].get(key).is_some(), "{key}");
    }
}

#[test]
fn asked_clients_and_windows_are_placed_where_the_full_order_puts_them() {
    let lab = Lab::new();
    for n in 0..40u32 {
        lab.advance(SECOND);
        lab.request(&format!("192.0.2.{}", (n * 7) % 40 + 1), "/x", 200);
    }
    lab.registry
        .ban(
            BanTarget::parse("192.0.2.30").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    lab.registry
        .ban(BanTarget::parse("192.0.2.9").unwrap(), BanLength::Permanent)
        .unwrap();
    let everyone = lab.history.clients(&ClientQuery {
        page: 1,
        size: 100,
        ..ClientQuery::default()
    });
    let asked: Vec<IpAddr> = ["192.0.2.30", "192.0.2.1", "192.0.2.40", "198.51.100.1"]
        .iter()
        .map(|text| text.parse().unwrap())
        .collect();
    let (page, places) = lab.history.clients_placing(
        &ClientQuery {
            page: 2,
            size: 10,
            ..ClientQuery::default()
        },
        &asked,
    );
    assert_eq!(page.clients, everyone.clients[10..20]);
    let expected: Vec<Option<usize>> = asked
        .iter()
        .map(|ip| {
            everyone
                .clients
                .iter()
                .position(|row| row.client == ip.to_string())
        })
        .collect();
    assert_eq!(places, expected);
    assert_eq!(places[3], None);
    assert!(places.iter().take(3).all(Option::is_some));

    let (windows, places) = lab.history.bans_placing(
        &BanQuery {
            page: 1,
            size: 25,
            ..BanQuery::default()
        },
        &[windows_first_id(&lab), 999],
    );
    assert_eq!(windows.total, 2);
    assert_eq!(places, [Some(1), None], "the first window is the older one");
}

fn windows_first_id(lab: &Lab) -> u64 {
    lab.history
        .bans(&BanQuery {
            page: 1,
            size: 25,
            ..BanQuery::default()
        })
        .bans
        .iter()
        .map(|row| row.id)
        .min()
        .unwrap()
}

#[test]
fn ban_windows_list_newest_first_and_filter() {
    let lab = Lab::new();
    lab.request("203.0.113.5", "/.env", 200);
    lab.registry
        .ban(
            BanTarget::parse("198.51.100.0/24").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    lab.request("198.51.100.77", "/wp-admin", 200);
    let all = lab.history.bans(&BanQuery {
        page: 1,
        size: 25,
        ..BanQuery::default()
    });
    let targets: Vec<&str> = all.bans.iter().map(|b| b.target.as_str()).collect();
    assert_eq!(targets, ["198.51.100.0/24", "203.0.113.5"]);
    for (q, expect) in [
        ("WP-ADMIN", "198.51.100.0/24"),
        (".env", "203.0.113.5"),
        ("100.77", "198.51.100.0/24"),
    ] {
        let found = lab.history.bans(&BanQuery {
            q: q.into(),
            page: 1,
            size: 25,
        });
        assert_eq!(found.total, 1, "{q}");
        assert_eq!(found.bans[0].target, expect);
    }
    assert!(lab.history.ban(999).is_none());
    let json = serde_json::to_value(lab.history.ban(all.bans[1].id).unwrap()).unwrap();
    for key in [
        "id",
        "target",
        "range",
        "permanent",
        "active",
        "began",
        "until",
        "ended",
        "end_reason",
        "lifted_by",
        "remaining_seconds",
        "changes",
        "source",
        "trigger",
        "requests",
        "first_hit",
        "last_hit",
        "paths",
        "distinct_paths",
        "other_paths",
        "clients",
        "distinct_clients",
        "other_clients",
    ] {
        assert!(json["ban"].get(key).is_some(), "{key}");
    }
    for key in ["client", "method", "path", "status", "at"] {
        assert!(json["ban"]["trigger"].get(key).is_some(), "{key}");
    }
}

// ----- the log -----------------------------------------------------------------------------

fn read_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn started(lab: Lab, path: &Path) -> Lab {
    lab.history.start(Some(path.to_path_buf()));
    lab
}

/// A history on the same registry and clock as `lab`, read back from `path`.
fn restarted(lab: &Lab, path: &Path) -> Arc<History> {
    let mut history = History::with_clock(lab.registry.clone(), lab.clock.clone());
    history.limits = lab.history.limits;
    let history = Arc::new(history);
    history.start(Some(path.to_path_buf()));
    history
}

#[test]
fn lines_carry_kind_and_time_and_leave_out_what_is_zero() {
    let mut out = Vec::new();
    event::encode(
        &Event::Req(ReqEvent {
            at: 1_767_225_600 * SECOND + 5,
            ip: ip("203.0.113.5"),
            method: MethodText::new("GET"),
            path: Arc::from("/a\"b\\c\u{1}"),
            status: 200,
            latency_us: 0,
            agent: None,
            blocked: false,
            triggered: false,
            rank: 0,
            ban: 0,
        }),
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"t\":\"req\",\"at\":\"2026-01-01T00:00:00.000000005Z\",\"ip\":\"203.0.113.5\",\"method\":\"GET\",\"path\":\"/a\\\"b\\\\c\\u0001\",\"status\":200}\n"
    );
}

#[test]
fn addresses_and_times_are_written_as_their_display_forms() {
    let mut out = Vec::new();
    let times = [
        0,
        1_767_225_600 * SECOND,
        1_767_225_600 * SECOND + 120_000_000,
        1_767_225_600 * SECOND + 120_000_001,
        1_767_225_601 * SECOND + 999_999_999,
        1_767_225_601 * SECOND + 100_000_000,
        1_767_225_601 * SECOND + 1_000,
        1_767_225_601 * SECOND + 5,
        -5,
        9_000_000_000 * SECOND + 7,
    ];
    for (n, at) in times.into_iter().enumerate() {
        let client = ["0.0.0.0", "10.20.255.9", "2001:db8::1", "::ffff:1.2.3.4"][n % 4];
        out.clear();
        event::encode(
            &Event::Lift {
                at,
                ban: 1,
                by: Arc::from("x"),
            },
            &mut out,
        );
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(line["at"], crate::abuse::record::WallTime(at).to_string());
        out.clear();
        event::encode(
            &Event::Trig {
                at,
                ban: 1,
                trigger: Box::new(windows::Trigger {
                    client: ip(client),
                    method: MethodText::new("GET"),
                    path: Arc::from("/"),
                    status: 200,
                    at,
                }),
            },
            &mut out,
        );
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(line["trigger"]["client"], ip(client).to_string());
    }
}

#[test]
fn the_log_survives_a_restart_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    let lab = started(Lab::new(), &path);
    lab.request_with(
        "203.0.113.5",
        "/hello",
        200,
        Some("Firefox/1"),
        false,
        |_| {},
    );
    lab.request("203.0.113.5", "/.env", 404);
    lab.request("203.0.113.5", "/x", 200);
    lab.request("203.0.113.5", "/y?q=1", 200);
    lab.history.close();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let kinds: Vec<String> = read_lines(&path)
        .iter()
        .map(|line| line["t"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["req", "ban", "req", "trig", "req", "req"]);
    assert_eq!(lab.history.log_status().unwrap().written, 6);
    assert!(
        lab.history
            .log_status()
            .unwrap()
            .to_string()
            .ends_with("history.jsonl · 6 event(s) written · 0 dropped")
    );

    let again = restarted(&lab, &path);
    let detail = again.client(ip("203.0.113.5")).unwrap();
    assert_eq!(paths(&detail.entries), ["/y?q=1", "/x", "/.env", "/hello"]);
    let flags: Vec<(bool, bool)> = detail
        .entries
        .iter()
        .map(|e| (e.triggered_ban, e.blocked))
        .collect();
    assert_eq!(
        flags,
        [(false, true), (false, true), (true, false), (false, false)]
    );
    assert_eq!(detail.entries[3].user_agent, "Firefox/1");
    assert_eq!(
        (
            detail.client.requests,
            detail.client.blocked,
            detail.client.bans_triggered
        ),
        (4, 2, 1)
    );
    let page = again.bans(&BanQuery {
        page: 1,
        size: 25,
        ..BanQuery::default()
    });
    assert_eq!(page.total, 1, "no duplicate window");
    let window = &page.bans[0];
    assert_eq!(window.requests, 2);
    assert!(window.active && window.began.is_some());
    assert_eq!(window.trigger.as_ref().unwrap().path, "/.env");
    // New windows continue the numbering.
    let next = again.windows.lock().next_id;
    assert!(next > window.id);
    again.close();
}

#[test]
fn a_window_lost_by_the_restart_is_lifted_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    let lab = started(Lab::new(), &path);
    let target = BanTarget::parse("203.0.113.5").unwrap();
    lab.registry.ban(target, BanLength::Permanent).unwrap();
    lab.history.close();
    lab.registry.unban_target(target);
    let again = restarted(&lab, &path);
    let window = &again
        .bans(&BanQuery {
            page: 1,
            size: 25,
            ..BanQuery::default()
        })
        .bans[0];
    assert!(!window.active);
    assert_eq!(window.lifted_by, LIFTED_BY_RESTART);
    again.close();
    let last = read_lines(&path).pop().unwrap();
    assert_eq!(last["t"], "lift");
    assert_eq!(last["by"], LIFTED_BY_RESTART);
}

#[test]
fn a_blocked_flood_is_logged_as_a_hundred_lines_and_sums() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    let lab = started(Lab::new(), &path);
    lab.registry
        .ban(
            BanTarget::parse("203.0.113.5").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    for n in 0..130 {
        if n % 40 == 0 {
            lab.advance(SECOND);
        }
        lab.request("203.0.113.5", if n % 2 == 0 { "/a" } else { "/b?x" }, 200);
    }
    lab.history.close();
    let lines = read_lines(&path);
    let raw = lines.iter().filter(|l| l["t"] == "req").count();
    let sums: Vec<&serde_json::Value> = lines.iter().filter(|l| l["t"] == "agg").collect();
    assert_eq!(raw, 100);
    assert_eq!(
        sums.iter()
            .map(|l| l["count"].as_u64().unwrap())
            .sum::<u64>(),
        30
    );
    assert!(sums.len() >= 2, "one per second: {sums:?}");
    assert!(
        sums.iter()
            .all(|l| l["paths"].get("/b").is_some() || l["paths"].get("/a").is_some())
    );

    let again = restarted(&lab, &path);
    let detail = again.client(ip("203.0.113.5")).unwrap();
    assert_eq!((detail.client.requests, detail.client.blocked), (130, 130));
    assert_eq!(detail.entries.len(), 100);
    let window = &again
        .bans(&BanQuery {
            page: 1,
            size: 25,
            ..BanQuery::default()
        })
        .bans[0];
    assert_eq!(window.requests, 130);
    assert_eq!(window.paths.iter().map(|h| h.hits).sum::<u64>(), 130);
    again.close();
}

#[test]
fn the_log_rotates_and_keeps_the_newest_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    let limits = LogLimits {
        rotate_at: 400,
        keep: 2,
    };
    let lab = started(Lab::with_limits(real_now(), limits), &path);
    for n in 0..50 {
        lab.request("203.0.113.5", &format!("/n/{n}"), 200);
    }
    lab.history.close();
    assert!(path.exists());
    assert!(writer::rotated(&path, 1).exists());
    assert!(writer::rotated(&path, 2).exists());
    assert!(!writer::rotated(&path, 3).exists());
    for file in [path.clone(), writer::rotated(&path, 1)] {
        assert!(std::fs::metadata(&file).unwrap().len() <= 400);
    }

    let again = restarted(&lab, &path);
    let detail = again.client(ip("203.0.113.5")).unwrap();
    let numbers: Vec<u32> = detail
        .entries
        .iter()
        .rev()
        .map(|e| e.path.trim_start_matches("/n/").parse().unwrap())
        .collect();
    assert!(numbers.len() < 50 && !numbers.is_empty());
    assert_eq!(*numbers.last().unwrap(), 49);
    assert!(
        numbers.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "{numbers:?}"
    );
    again.close();
}

#[test]
fn reading_back_skips_bad_lines_and_old_requests_but_not_old_bans() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    let now = real_now();
    let lab = Lab::at(now);
    lab.registry
        .ban(
            BanTarget::parse("203.0.113.9").unwrap(),
            BanLength::Permanent,
        )
        .unwrap();
    let old = crate::abuse::record::WallTime(now - 100 * HOUR).to_string();
    let recent = crate::abuse::record::WallTime(now - HOUR).to_string();
    let long = format!(
        "{{\"t\":\"req\",\"at\":\"{recent}\",\"path\":\"{}\"}}",
        "x".repeat(2 << 20)
    );
    let text = [
        format!(r#"{{"t":"ban","at":"{old}","ban":7,"target":"203.0.113.9","scope":"203.0.113.9/32","begin":"{old}","permanent":true}}"#),
        format!(r#"{{"t":"req","at":"{old}","ip":"203.0.113.1","method":"GET","path":"/too-old","status":200}}"#),
        "not json".to_string(),
        long,
        r#"{"t":"req","ip":"203.0.113.1"}"#.to_string(),
        format!(r#"{{"t":"req","at":"{recent}","ip":"203.0.113.1","method":"GET","path":"/kept","status":200,"ess":{{"cc":"LT","country":"Lithuania","n":1,"asn":1,"desc":"x","range":"45.138.12.0/24","ip8":"x"}}}}"#),
        format!(r#"{{"t":"req","at":"{recent}","ip":"203.0.113.9","method":"GET","path":"/blocked","status":429,"blocked":true,"ban":7}}"#),
        format!(r#"{{"t":"req","at":"{recent}","ip":"203.0.113.1","pa"#),
    ]
    .join("\n");
    std::fs::write(&path, text).unwrap();
    let history = restarted(&lab, &path);
    let kept = history.client(ip("203.0.113.1")).unwrap();
    assert_eq!(paths(&kept.entries), ["/kept"]);
    // Not JSON, too long, without a time, and the last one torn.
    assert_eq!(history.unreadable_lines(), 4);
    let status = history.log_status().unwrap();
    assert_eq!(status.unreadable, 4);
    assert!(
        status
            .to_string()
            .ends_with(" dropped · 4 unreadable line(s) skipped at start"),
        "{status}"
    );
    let window = history.ban(7).expect("an old ban line still applies").ban;
    assert!(window.active && window.permanent && window.began.is_some());
    assert_eq!(window.requests, 1);
    assert_eq!(
        history
            .bans(&BanQuery {
                page: 1,
                size: 25,
                ..BanQuery::default()
            })
            .total,
        1
    );
    // The torn last line was finished before anything new was appended.
    lab.history.close();
    history.close();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"pa\n"), "torn line ended: {text}");
}

#[test]
fn a_log_with_more_windows_than_kept_is_read_back_to_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    let now = real_now();
    let lab = Lab::at(now);
    let wall = |at: i64| crate::abuse::record::WallTime(at).to_string();
    let total = MAX_WINDOWS as u64 + 1000;
    let mut text = String::new();
    for id in 1..=total {
        let client = nth_address(id as u32);
        let began = wall(now - 2 * HOUR);
        // The first ten are permanent and still in the registry; the rest ran out, the later
        // ones earlier, so the earliest ended are not the oldest.
        let end = if id <= 10 {
            lab.registry
                .ban(BanTarget::Single(client), BanLength::Permanent)
                .unwrap();
            r#""permanent":true"#.to_string()
        } else {
            format!(r#""until":"{}""#, wall(now - id as i64 * SECOND))
        };
        text.push_str(&format!(
            r#"{{"t":"ban","at":"{began}","ban":{id},"target":"{client}","scope":"{client}/32","begin":"{began}",{end}}}"#
        ));
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    let history = restarted(&lab, &path);
    let kept = kept_ids(&history);
    assert_eq!(kept.len(), MAX_WINDOWS);
    assert_eq!(
        kept,
        (1..=MAX_WINDOWS as u64).collect::<Vec<u64>>(),
        "the windows that ended first went; those in force stayed"
    );
    assert!(
        (1..=10).all(|id| history.ban(id).is_some_and(|detail| detail.ban.active)),
        "the bans in force keep their windows"
    );
    // The next ban makes room for itself without passing the bound.
    operator_ban(&history, nth_address(900_000), FOREVER);
    let kept = kept_ids(&history);
    assert_eq!(kept.len(), MAX_WINDOWS);
    assert_eq!(kept[..10], (1..=10).collect::<Vec<u64>>());
    assert_eq!(*kept.last().unwrap(), total + 1);
    history.close();
}

#[test]
fn a_log_file_others_could_read_is_made_private_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    std::fs::write(&path, "").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let lab = started(Lab::new(), &path);
    lab.request("203.0.113.5", "/a", 200);
    lab.history.close();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(read_lines(&path).len(), 1);
}

#[test]
fn a_full_queue_drops_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    let lab = started(Lab::new(), &path);
    let sent = 100_000u64;
    for n in 0..sent {
        lab.history.emit(Event::Lift {
            at: n as i64,
            ban: 1,
            by: Arc::from("x"),
        });
    }
    lab.history.close();
    let status = lab.history.log_status().unwrap();
    assert!(status.dropped > 0, "{status}");
    assert_eq!(status.written + status.dropped, sent);
    assert_eq!(read_lines(&path).len() as u64, status.written);
}

#[test]
fn a_log_that_cannot_be_written_counts_what_it_loses() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be.
    let path = dir.path().join("history.jsonl");
    std::fs::create_dir(&path).unwrap();
    let lab = started(Lab::new(), &path);
    lab.request("203.0.113.5", "/a", 200);
    lab.request("203.0.113.5", "/b", 200);
    lab.history.close();
    let status = lab.history.log_status().unwrap();
    assert_eq!((status.written, status.dropped), (0, 2));
    // The history itself is whole.
    assert_eq!(lab.detail("203.0.113.5").entries.len(), 2);
}

use std::os::unix::fs::PermissionsExt;
