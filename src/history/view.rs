//! What the portal reads: the clients, one client's requests, the ban windows. Plain structs
//! serialised with the field names of the portal's JSON; times are RFC 3339 UTC strings
//! (`null` when unknown), except the `_ms` fields (unix milliseconds).
//!
//! Listing never sorts the whole table: the clients matching a filter are ranked by a small key
//! and only the requested page is put in order.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::net::IpAddr;

use serde::Serialize;

use super::clients::{Client, Entry};
use super::windows::{Tally, Window};
use super::{History, MAX_CLIENTS, PER_CLIENT, RETENTION};
use crate::abuse::BanLength;
use crate::abuse::record::WallTime;
use crate::admission::priority::Rank;

/// Clients in the overview at most.
pub const LISTED: usize = 500;
/// Ban windows in the overview at most.
pub const BANS_LISTED: usize = 200;
/// Paths and addresses shown per window in lists.
const TOP_IN_LISTS: usize = 3;

/// The history's bounds, for the note under the visitors table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub max_clients: usize,
    pub per_client: usize,
    pub retention_hours: u64,
    pub listed: usize,
    pub bans_listed: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: MAX_CLIENTS,
            per_client: PER_CLIENT,
            retention_hours: RETENTION.as_secs() / 3600,
            listed: LISTED,
            bans_listed: BANS_LISTED,
        }
    }
}

/// One client in a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientRow {
    pub client: String,
    pub first_seen: WallTime,
    pub last_seen: WallTime,
    pub requests: u64,
    pub blocked: u64,
    pub errors: u64,
    pub bans_triggered: u64,
    pub last_method: String,
    pub last_path: String,
    pub last_status: u16,
    pub banned_now: bool,
    pub ban_permanent: bool,
    pub ban_remaining_seconds: u64,
    /// When the ban in force ends; `null` when none is or it is permanent.
    pub ban_until_ms: Option<i64>,
    /// The rank of its latest request; empty for a guest.
    pub rank: String,
}

/// One recorded request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntryRow {
    pub at: WallTime,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub latency_ms: f64,
    /// Empty when none was sent.
    pub user_agent: String,
    pub blocked: bool,
    pub triggered_ban: bool,
    pub ban_id: Option<u64>,
    pub rank: String,
}

/// A ban's trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TriggerRow {
    pub client: String,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub at: WallTime,
}

/// A path or address and how often it was blocked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hits {
    pub name: String,
    pub hits: u64,
}

/// One ban window. In lists only the top paths and addresses are itemised; the `distinct_`
/// counts always tell how many are.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BanRow {
    pub id: u64,
    pub target: String,
    pub range: bool,
    pub permanent: bool,
    pub active: bool,
    /// `null` when the ban was already in force when Concert started.
    pub began: Option<WallTime>,
    /// `null` for a permanent ban.
    pub until: Option<WallTime>,
    /// `null` while in force.
    pub ended: Option<WallTime>,
    /// `lifted`, `expired`, or empty while in force.
    pub end_reason: &'static str,
    pub lifted_by: String,
    pub remaining_seconds: u64,
    pub changes: u32,
    pub source: String,
    pub trigger: Option<TriggerRow>,
    /// Requests blocked under it.
    pub requests: u64,
    pub first_hit: Option<WallTime>,
    pub last_hit: Option<WallTime>,
    pub paths: Vec<Hits>,
    pub distinct_paths: usize,
    pub other_paths: u64,
    pub clients: Vec<Hits>,
    pub distinct_clients: usize,
    pub other_clients: u64,
}

/// `{"ban": …}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BanDetail {
    pub ban: BanRow,
}

/// One client with its requests (newest first), browsers and bans (newest first).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientDetail {
    pub client: ClientRow,
    pub entries: Vec<EntryRow>,
    pub user_agents: Vec<String>,
    pub bans: Vec<BanRow>,
}

/// The overview: the first clients in order and the latest bans.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryView {
    pub clients: Vec<ClientRow>,
    /// Clients in `clients`.
    pub listed: usize,
    /// Clients matching the filter.
    pub matched: usize,
    /// Clients remembered.
    pub tracked: usize,
    /// Clients forgotten to make room since start.
    pub evicted: u64,
    pub bans: Vec<BanRow>,
    pub abuse_enabled: bool,
    pub persisted: bool,
    pub limits: Limits,
}

/// Which clients to list: `q` is a substring of the address or of a kept path (any case);
/// `flagged` keeps clients that are or were banned. Pages count from 1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientQuery {
    pub q: String,
    pub flagged: bool,
    pub page: usize,
    pub size: usize,
}

/// A page of clients.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientPage {
    pub clients: Vec<ClientRow>,
    /// Clients matching.
    pub total: usize,
    /// The page shown (clamped into range).
    pub page: usize,
    pub pages: usize,
    pub size: usize,
    pub tracked: usize,
    pub evicted: u64,
}

/// Which ban windows to list: `q` is a substring of the target, the trigger or a counted path
/// or address (any case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BanQuery {
    pub q: String,
    pub page: usize,
    pub size: usize,
}

/// A page of ban windows, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BanPage {
    pub bans: Vec<BanRow>,
    pub total: usize,
    pub page: usize,
    pub pages: usize,
    pub size: usize,
}

/// Whether `haystack` contains `needle` (already lowercase), ignoring ASCII case.
fn contains_folded(haystack: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return true;
    }
    let (hay, needle) = (haystack.as_bytes(), needle.as_bytes());
    hay.len() >= needle.len()
        && hay
            .windows(needle.len())
            .any(|window| window.eq_ignore_ascii_case(needle))
}

fn rank_name(rank: u8) -> String {
    match Rank::from_u8(rank) {
        Some(Rank::Guest) | None => String::new(),
        Some(rank) => rank.name().to_string(),
    }
}

fn ms(nanos: i64) -> i64 {
    nanos.div_euclid(1_000_000)
}

/// `(page, pages, start, end)` for `total` items, `size` a page, `page` clamped into range.
fn paging(total: usize, page: usize, size: usize) -> (usize, usize, usize, usize) {
    let size = size.max(1);
    let pages = total.div_ceil(size).max(1);
    let page = page.clamp(1, pages);
    let start = (page - 1) * size;
    (page, pages, start.min(total), (start + size).min(total))
}

/// How a client sorts: banned now (permanent first), then flagged, then the latest seen,
/// then by address.
type OrderKey = (u8, Reverse<i64>, IpAddr);

impl History {
    fn ban_of(&self, ip: IpAddr) -> Option<BanLength> {
        self.registry.banned(ip)
    }

    fn client_row(&self, client: &Client, now: i64) -> ClientRow {
        let last = client.entries.back();
        let ban = self.ban_of(client.ip);
        let (remaining, until_ms) = match ban {
            Some(BanLength::Timed(left)) => (
                crate::abuse::ceil_secs(left),
                Some(ms(now.saturating_add(crate::abuse::nanos(left)))),
            ),
            _ => (0, None),
        };
        ClientRow {
            client: client.ip.to_string(),
            first_seen: WallTime(client.first_seen),
            last_seen: WallTime(client.last_seen),
            requests: client.requests,
            blocked: client.blocked,
            errors: client.errors,
            bans_triggered: client.bans_triggered,
            last_method: last
                .map(|e| e.method.as_str().to_string())
                .unwrap_or_default(),
            last_path: last.map(|e| e.path.to_string()).unwrap_or_default(),
            last_status: last.map_or(0, |e| e.status),
            banned_now: ban.is_some(),
            ban_permanent: ban == Some(BanLength::Permanent),
            ban_remaining_seconds: remaining,
            ban_until_ms: until_ms,
            rank: rank_name(client.rank),
        }
    }

    fn entry_row(client: &Client, entry: &Entry) -> EntryRow {
        EntryRow {
            at: WallTime(entry.at),
            method: entry.method.as_str().to_string(),
            path: entry.path.to_string(),
            status: entry.status,
            latency_ms: f64::from(entry.latency_us) / 1000.0,
            user_agent: client.agent_text(entry.agent).to_string(),
            blocked: entry.blocked(),
            triggered_ban: entry.triggered(),
            ban_id: (entry.ban > 0).then_some(entry.ban),
            rank: rank_name(entry.rank),
        }
    }

    /// The sort keys of the clients matching the filter. `flagged` keeps the clients banned
    /// now or blocked or banned before.
    fn matching(&self, q: &str, flagged: bool) -> Vec<OrderKey> {
        let q = q.trim().to_lowercase();
        let mut keys = Vec::new();
        for shard in self.clients.shards() {
            let shard = shard.lock();
            for client in shard.iter() {
                if !q.is_empty()
                    && !contains_folded(&client.ip.to_string(), &q)
                    && !client
                        .entries
                        .iter()
                        .any(|entry| contains_folded(&entry.path, &q))
                {
                    continue;
                }
                let class = if client.flagged() { 2 } else { 3 };
                keys.push((class, Reverse(client.last_seen), client.ip));
            }
        }
        // Ban lookups happen outside the shard locks.
        for key in &mut keys {
            match self.ban_of(key.2) {
                Some(BanLength::Permanent) => key.0 = 0,
                Some(BanLength::Timed(_)) => key.0 = 1,
                None => {}
            }
        }
        if flagged {
            keys.retain(|key| key.0 <= 2);
        }
        keys
    }

    /// Puts the first `end` keys in order without sorting the rest.
    fn order_prefix(keys: &mut Vec<OrderKey>, end: usize) {
        if end == 0 {
            keys.clear();
            return;
        }
        if end < keys.len() {
            keys.select_nth_unstable(end - 1);
            keys.truncate(end);
        }
        keys.sort_unstable();
    }

    fn rows_for(&self, keys: &[OrderKey]) -> Vec<ClientRow> {
        let now = self.now();
        keys.iter()
            .filter_map(|(_, _, ip)| {
                let shard = self.clients.shard(*ip).lock();
                shard.get(*ip).map(|client| self.client_row(client, now))
            })
            .collect()
    }

    /// One page of clients in the portal's order.
    pub fn clients(&self, query: &ClientQuery) -> ClientPage {
        self.clients_placing(query, &[]).0
    }

    /// One page of clients, and where each of `asked` stands among all the matching clients
    /// (its index in the portal's order; `None` when it does not match or is forgotten), so a
    /// table can tell that a row moved to another page. Placing costs one pass over the
    /// matching clients with a binary search per client, not a sort of them all.
    pub fn clients_placing(
        &self,
        query: &ClientQuery,
        asked: &[IpAddr],
    ) -> (ClientPage, Vec<Option<usize>>) {
        let mut keys = self.matching(&query.q, query.flagged);
        let total = keys.len();
        let places = if asked.is_empty() {
            Vec::new()
        } else {
            places_of(&keys, asked)
        };
        let size = query.size.max(1);
        let (page, pages, start, end) = paging(total, query.page, size);
        History::order_prefix(&mut keys, end);
        let page = ClientPage {
            clients: self.rows_for(&keys[start.min(keys.len())..]),
            total,
            page,
            pages,
            size,
            tracked: self.clients.len(),
            evicted: self.clients.evicted(),
        };
        (page, places)
    }

    /// Clients remembered now.
    pub fn tracked(&self) -> usize {
        self.clients.len()
    }

    /// The overview: the first [`LISTED`] matching clients and the latest [`BANS_LISTED`]
    /// windows.
    pub fn overview(&self, q: &str, flagged: bool) -> HistoryView {
        let mut keys = self.matching(q, flagged);
        let matched = keys.len();
        History::order_prefix(&mut keys, LISTED.min(matched));
        let clients = self.rows_for(&keys);
        let now = self.now();
        let bans = {
            let windows = self.windows.lock();
            windows
                .by_id
                .values()
                .rev()
                .take(BANS_LISTED)
                .map(|window| ban_row(window, now, TOP_IN_LISTS))
                .collect()
        };
        HistoryView {
            listed: clients.len(),
            clients,
            matched,
            tracked: self.clients.len(),
            evicted: self.clients.evicted(),
            bans,
            abuse_enabled: self.registry.enabled(),
            persisted: self.persisted(),
            limits: Limits::default(),
        }
    }

    /// One client: its row, its requests newest first, its browsers and the ban windows that
    /// covered it or that it met, newest first. `None` when nothing is recorded from it.
    pub fn client(&self, ip: IpAddr) -> Option<ClientDetail> {
        let ip = ip.to_canonical();
        let now = self.now();
        let (row, entries, user_agents, ids) = {
            let shard = self.clients.shard(ip).lock();
            let client = shard.get(ip)?;
            let entries: Vec<EntryRow> = client
                .entries
                .iter()
                .rev()
                .map(|entry| History::entry_row(client, entry))
                .collect();
            let ids: Vec<u64> = client
                .entries
                .iter()
                .map(|e| e.ban)
                .filter(|id| *id > 0)
                .collect();
            let agents = client.agents.iter().map(|a| a.to_string()).collect();
            (self.client_row(client, now), entries, agents, ids)
        };
        let bans = {
            let windows = self.windows.lock();
            windows
                .by_id
                .values()
                .rev()
                .filter(|w| w.scope.contains(&ip) || ids.contains(&w.id))
                .map(|window| ban_row(window, now, usize::MAX))
                .collect()
        };
        Some(ClientDetail {
            client: row,
            entries,
            user_agents,
            bans,
        })
    }

    /// One page of ban windows, newest first.
    pub fn bans(&self, query: &BanQuery) -> BanPage {
        self.bans_placing(query, &[]).0
    }

    /// One page of ban windows, newest first, and the index of each of the `asked` windows
    /// among all the matching ones (`None` when it does not match or is forgotten).
    pub fn bans_placing(&self, query: &BanQuery, asked: &[u64]) -> (BanPage, Vec<Option<usize>>) {
        let q = query.q.trim().to_lowercase();
        let now = self.now();
        let windows = self.windows.lock();
        let matching: Vec<&Window> = windows
            .by_id
            .values()
            .rev()
            .filter(|window| q.is_empty() || window_matches(window, &q))
            .collect();
        let places = asked
            .iter()
            .map(|id| {
                // Newest first is descending id order.
                matching.binary_search_by(|window| id.cmp(&window.id)).ok()
            })
            .collect();
        let total = matching.len();
        let size = query.size.max(1);
        let (page, pages, start, end) = paging(total, query.page, size);
        let page = BanPage {
            bans: matching[start..end]
                .iter()
                .map(|window| ban_row(window, now, TOP_IN_LISTS))
                .collect(),
            total,
            page,
            pages,
            size,
        };
        (page, places)
    }

    /// One ban window in full, or `None` when it is no longer kept.
    pub fn ban(&self, id: u64) -> Option<BanDetail> {
        let now = self.now();
        let windows = self.windows.lock();
        windows.get(id).map(|window| BanDetail {
            ban: ban_row(window, now, usize::MAX),
        })
    }
}

/// The index each of `asked` would have if `keys` were sorted: the number of keys ordered
/// before it. Each key is counted once against the sorted asked keys (a difference array),
/// so this is O(n log m) for n keys and m asked.
fn places_of(keys: &[OrderKey], asked: &[IpAddr]) -> Vec<Option<usize>> {
    let wanted: HashMap<IpAddr, usize> = asked
        .iter()
        .enumerate()
        .map(|(at, ip)| (ip.to_canonical(), at))
        .collect();
    let mut found: Vec<(OrderKey, usize)> = keys
        .iter()
        .filter_map(|key| Some((*key, *wanted.get(&key.2)?)))
        .collect();
    found.sort_unstable();
    // between[i]: keys after found[i - 1], up to and including found[i].
    let mut between = vec![0usize; found.len() + 1];
    for key in keys {
        let slot = found.partition_point(|(other, _)| other < key);
        if let Some(count) = between.get_mut(slot) {
            *count += 1;
        }
    }
    let mut places = vec![None; asked.len()];
    let mut before = 0;
    for (i, (_, at)) in found.iter().enumerate() {
        // Keys up to and including found[i], less found[i] itself.
        before += between.get(i).copied().unwrap_or(0);
        if let Some(place) = places.get_mut(*at) {
            *place = Some(before.saturating_sub(1));
        }
    }
    places
}

fn window_matches(window: &Window, q: &str) -> bool {
    contains_folded(&window.target(), q)
        || window.trigger.as_ref().is_some_and(|trigger| {
            contains_folded(&trigger.client.to_string(), q)
                || contains_folded(trigger.method.as_str(), q)
                || contains_folded(&trigger.path, q)
        })
        || window
            .paths
            .counts
            .keys()
            .any(|path| contains_folded(path, q))
        || window
            .clients
            .counts
            .keys()
            .any(|ip| contains_folded(&ip.to_string(), q))
}

fn hits<K>(tally: &Tally<K>, top: usize) -> Vec<Hits>
where
    K: std::hash::Hash + Eq + Ord + ToString,
{
    tally
        .ranked()
        .into_iter()
        .take(top)
        .map(|(name, hits)| Hits {
            name: name.to_string(),
            hits,
        })
        .collect()
}

fn ban_row(window: &Window, now: i64, top: usize) -> BanRow {
    let active = window.in_force(now);
    let ended = window.ended(now);
    let end_reason = match (&window.lifted, ended) {
        (Some(_), _) => "lifted",
        (None, Some(_)) => "expired",
        (None, None) => "",
    };
    let remaining_seconds = if active && !window.permanent() {
        crate::abuse::ceil_secs(std::time::Duration::from_nanos(
            window.until.saturating_sub(now).max(0).unsigned_abs(),
        ))
    } else {
        0
    };
    BanRow {
        id: window.id,
        target: window.target(),
        range: window.range,
        permanent: window.permanent(),
        active,
        began: window.began.map(WallTime),
        until: (!window.permanent()).then_some(WallTime(window.until)),
        ended: ended.map(WallTime),
        end_reason,
        lifted_by: window
            .lifted
            .as_ref()
            .map(|lift| lift.by.to_string())
            .unwrap_or_default(),
        remaining_seconds,
        changes: window.changes,
        source: window.source.clone(),
        trigger: window.trigger.as_ref().map(|trigger| TriggerRow {
            client: trigger.client.to_string(),
            method: trigger.method.as_str().to_string(),
            path: trigger.path.to_string(),
            status: trigger.status,
            at: WallTime(trigger.at),
        }),
        requests: window.requests,
        first_hit: window.first_hit.map(WallTime),
        last_hit: window.last_hit.map(WallTime),
        paths: hits(&window.paths, top),
        distinct_paths: window.paths.counts.len(),
        other_paths: window.paths.other,
        clients: hits(&window.clients, top),
        distinct_clients: window.clients.counts.len(),
        other_clients: window.clients.other,
    }
}
