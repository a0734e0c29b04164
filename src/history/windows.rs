//! Ban windows: one per ban, from the moment it began (or from start-up, when it was already in
//! force) until it was lifted or ran out, with what started it and what the banned addresses
//! asked for meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::clients::MethodText;
use super::{MAX_WINDOWS, WINDOW_ITEMS};
use crate::abuse::{BanCause, FOREVER};

/// The request after which a ban began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Trigger {
    pub client: IpAddr,
    pub method: MethodText,
    pub path: Arc<str>,
    pub status: u16,
    /// Arrival, unix nanos.
    pub at: i64,
}

/// How a window ended early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lift {
    pub at: i64,
    pub by: Arc<str>,
}

/// Hits per key, the first [`WINDOW_ITEMS`] keys itemised and the rest summed.
#[derive(Debug, Clone)]
pub(super) struct Tally<K> {
    pub counts: HashMap<K, u64>,
    pub other: u64,
}

impl<K> Default for Tally<K> {
    fn default() -> Self {
        Tally {
            counts: HashMap::new(),
            other: 0,
        }
    }
}

impl<K: std::hash::Hash + Eq> Tally<K> {
    fn add<Q>(&mut self, key: &Q, hits: u64)
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized + ToKey<K>,
    {
        if let Some(count) = self.counts.get_mut(key) {
            *count += hits;
        } else if self.counts.len() < WINDOW_ITEMS {
            self.counts.insert(key.to_key(), hits);
        } else {
            self.other += hits;
        }
    }

    /// The itemised keys, most hits first, then by key.
    pub(super) fn ranked(&self) -> Vec<(&K, u64)>
    where
        K: Ord,
    {
        let mut ranked: Vec<(&K, u64)> = self.counts.iter().map(|(k, n)| (k, *n)).collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        ranked
    }
}

/// Makes a tally's owned key from the borrowed one it is looked up by.
pub(super) trait ToKey<K> {
    fn to_key(&self) -> K;
}

impl ToKey<Box<str>> for str {
    fn to_key(&self) -> Box<str> {
        Box::from(self)
    }
}

impl ToKey<IpAddr> for IpAddr {
    fn to_key(&self) -> IpAddr {
        *self
    }
}

/// One ban, as the history keeps it.
#[derive(Debug, Clone)]
pub(super) struct Window {
    pub id: u64,
    pub scope: IpNet,
    pub range: bool,
    /// Unix nanos; `None` when it was already in force at start-up.
    pub began: Option<i64>,
    /// Unix nanos; [`FOREVER`] = permanent.
    pub until: i64,
    pub lifted: Option<Lift>,
    pub source: String,
    /// Times its end was changed after it began.
    pub changes: u32,
    pub trigger: Option<Trigger>,
    /// Requests blocked under it.
    pub requests: u64,
    pub first_hit: Option<i64>,
    pub last_hit: Option<i64>,
    /// Paths (without query) of the blocked requests.
    pub paths: Tally<Box<str>>,
    /// Addresses that made them.
    pub clients: Tally<IpAddr>,
}

impl Window {
    pub(super) fn new(id: u64, scope: IpNet, range: bool, until: i64) -> Window {
        Window {
            id,
            scope,
            range,
            began: None,
            until,
            lifted: None,
            source: String::new(),
            changes: 0,
            trigger: None,
            requests: 0,
            first_hit: None,
            last_hit: None,
            paths: Tally::default(),
            clients: Tally::default(),
        }
    }

    pub(super) fn permanent(&self) -> bool {
        self.until == FOREVER
    }

    pub(super) fn in_force(&self, now: i64) -> bool {
        self.lifted.is_none() && self.until > now
    }

    /// When it ended: lifted, or ran out. `None` while in force.
    pub(super) fn ended(&self, now: i64) -> Option<i64> {
        match &self.lifted {
            Some(lift) => Some(lift.at),
            None if self.until <= now => Some(self.until),
            None => None,
        }
    }

    /// What was banned: an address, an IPv6 /64 or /48, or a range.
    pub(super) fn target(&self) -> String {
        target_text(self.scope)
    }

    /// Counts `hits` blocked requests of `client` for `path` (query cut off) at `at`.
    pub(super) fn hit(&mut self, client: IpAddr, path: &str, at: i64, hits: u64) {
        let path = path.split_once('?').map_or(path, |(path, _)| path);
        self.requests += hits;
        self.first_hit = Some(self.first_hit.map_or(at, |first| first.min(at)));
        self.last_hit = Some(self.last_hit.map_or(at, |last| last.max(at)));
        self.paths.add(path, hits);
        self.clients.add(&client, hits);
    }

    /// Counts `hits` blocked requests whose paths were not itemised.
    pub(super) fn hit_unitemised(&mut self, client: IpAddr, at: i64, hits: u64) {
        self.requests += hits;
        self.first_hit = Some(self.first_hit.map_or(at, |first| first.min(at)));
        self.last_hit = Some(self.last_hit.map_or(at, |last| last.max(at)));
        self.paths.other += hits;
        self.clients.add(&client, hits);
    }
}

/// The display form of a ban's scope: a single IPv4 address bare, anything else as a network.
pub(super) fn target_text(scope: IpNet) -> String {
    match scope {
        IpNet::V4(v4) if v4.prefix_len() == 32 => v4.addr().to_string(),
        other => other.to_string(),
    }
}

/// Parses a target or scope as written in the log or by the registry.
pub(super) fn parse_scope(text: &str) -> Option<IpNet> {
    let text = text.trim();
    match text.parse::<IpNet>() {
        Ok(net) => Some(net.trunc()),
        Err(_) => text
            .parse::<IpAddr>()
            .ok()
            .map(|ip| match ip.to_canonical() {
                IpAddr::V4(v4) => IpNet::V4(Ipv4Net::from(v4)),
                IpAddr::V6(v6) => {
                    IpNet::V6(Ipv6Net::new(v6, 64).map_or(Ipv6Net::from(v6), |n| n.trunc()))
                }
            }),
    }
}

/// A ban that began without an operator: its trigger is still being looked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub scope: IpNet,
    pub window: u64,
    /// The ban sequence number it was given; requests that arrived before it may claim it.
    pub seq: u64,
    pub began: i64,
    pub cause: BanCause,
}

/// Every window kept, and which are in force.
#[derive(Debug, Default)]
pub(super) struct Windows {
    pub by_id: BTreeMap<u64, Window>,
    /// The window of each scope believed in force (it may have run out since).
    active: HashMap<IpNet, u64>,
    /// The ranges among them, for the blocked requests of addresses inside one.
    active_ranges: Vec<(IpNet, u64)>,
    pub pending: Vec<Pending>,
    /// Sources operators named for bans they are about to make.
    pub expected_sources: Vec<(IpNet, String)>,
    pub next_id: u64,
}

impl Windows {
    pub(super) fn new() -> Windows {
        Windows {
            next_id: 1,
            ..Windows::default()
        }
    }

    pub(super) fn get(&self, id: u64) -> Option<&Window> {
        self.by_id.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut Window> {
        self.by_id.get_mut(&id)
    }

    /// The id of the window believed in force for exactly `scope`.
    pub(super) fn active_id(&self, scope: IpNet) -> Option<u64> {
        self.active.get(&scope).copied()
    }

    pub(super) fn active_ids(&self) -> Vec<(IpNet, u64)> {
        self.active
            .iter()
            .map(|(scope, id)| (*scope, *id))
            .collect()
    }

    pub(super) fn activate(&mut self, scope: IpNet, id: u64, range: bool) {
        if let Some(previous) = self.active.insert(scope, id)
            && previous != id
        {
            self.active_ranges.retain(|(_, other)| *other != previous);
        }
        if range && !self.active_ranges.iter().any(|(_, other)| *other == id) {
            self.active_ranges.push((scope, id));
        }
    }

    pub(super) fn deactivate(&mut self, scope: IpNet, id: u64) {
        if self.active.get(&scope) == Some(&id) {
            self.active.remove(&scope);
        }
        self.active_ranges.retain(|(_, other)| *other != id);
    }

    /// Adds a window with the next id.
    pub(super) fn open(&mut self, scope: IpNet, range: bool, until: i64, now: i64) -> &mut Window {
        let id = self.next_id;
        self.next_id += 1;
        self.make_room(id, now);
        self.activate(scope, id, range);
        self.by_id
            .entry(id)
            .or_insert_with(|| Window::new(id, scope, range, until))
    }

    /// Keeps at most [`MAX_WINDOWS`]: ended windows go first, oldest first, then the oldest.
    /// Ended ones are usually the oldest, so the look for one stops early.
    fn make_room(&mut self, keep: u64, now: i64) {
        while self.by_id.len() >= MAX_WINDOWS {
            let ended = self
                .by_id
                .values()
                .find(|w| w.id != keep && !w.in_force(now))
                .map(|w| w.id);
            let Some(victim) = ended.or_else(|| self.by_id.keys().copied().find(|id| *id != keep))
            else {
                return;
            };
            if let Some(window) = self.by_id.remove(&victim) {
                self.deactivate(window.scope, victim);
            }
        }
    }

    /// Brings the windows down to [`MAX_WINDOWS`] (the log read back may hold more): ended
    /// windows go first, the earliest ended first; windows in force only when the ended ones
    /// are not enough, the oldest first. Returns how many went.
    pub(super) fn trim(&mut self, now: i64) -> usize {
        let excess = self.by_id.len().saturating_sub(MAX_WINDOWS);
        if excess == 0 {
            return 0;
        }
        // (in force, when it ended, id): ended before in force, then earliest, then oldest.
        let mut ranked: Vec<(bool, i64, u64)> = self
            .by_id
            .values()
            .map(|w| match w.ended(now) {
                Some(ended) => (false, ended, w.id),
                None => (true, 0, w.id),
            })
            .collect();
        ranked.select_nth_unstable(excess - 1);
        for &(_, _, id) in &ranked[..excess] {
            if let Some(window) = self.by_id.remove(&id) {
                self.deactivate(window.scope, id);
            }
        }
        let by_id = &self.by_id;
        self.pending.retain(|p| by_id.contains_key(&p.window));
        excess
    }

    /// The window in force whose ban blocked `client`: its own address's (or /64's), its
    /// shared /48's, else the narrowest range holding it.
    pub(super) fn blocking(&mut self, client: IpAddr, now: i64) -> Option<&mut Window> {
        let own = match client {
            IpAddr::V4(v4) => [Some(IpNet::V4(Ipv4Net::from(v4))), None],
            IpAddr::V6(v6) => [
                Ipv6Net::new(v6, 64).ok().map(|n| IpNet::V6(n.trunc())),
                Ipv6Net::new(v6, 48).ok().map(|n| IpNet::V6(n.trunc())),
            ],
        };
        let mut found = own
            .into_iter()
            .flatten()
            .filter_map(|scope| self.active.get(&scope).copied())
            .find(|id| self.by_id.get(id).is_some_and(|w| w.in_force(now)));
        if found.is_none() {
            found = self
                .active_ranges
                .iter()
                .filter(|(scope, id)| {
                    scope.contains(&client) && self.by_id.get(id).is_some_and(|w| w.in_force(now))
                })
                .max_by_key(|(scope, _)| scope.prefix_len())
                .map(|(_, id)| *id);
        }
        self.by_id.get_mut(&found?)
    }

    /// Forgets windows that ended before `cutoff`, and pending triggers of windows gone.
    pub(super) fn forget_ended(&mut self, cutoff: i64, now: i64) -> usize {
        let doomed: Vec<(u64, IpNet)> = self
            .by_id
            .values()
            .filter(|w| w.ended(now).is_some_and(|ended| ended < cutoff))
            .map(|w| (w.id, w.scope))
            .collect();
        for (id, scope) in &doomed {
            self.by_id.remove(id);
            self.deactivate(*scope, *id);
        }
        let by_id = &self.by_id;
        self.pending.retain(|p| by_id.contains_key(&p.window));
        doomed.len()
    }

    /// Takes the source an operator named for a ban of `scope`, if any.
    pub(super) fn take_expected_source(&mut self, scope: IpNet) -> Option<String> {
        let index = self
            .expected_sources
            .iter()
            .position(|(expected, _)| *expected == scope)?;
        Some(self.expected_sources.swap_remove(index).1)
    }
}
