//! The per-client half of the history: what each address asked for and how it was answered.
//!
//! Clients live in [`SHARDS`] shards of at most [`PER_SHARD`], picked by a randomly keyed hash
//! of the address (addresses are the attacker's choice). Each shard keeps its clients in two
//! recency lists, one for clients never banned and one for flagged ones (blocked while banned,
//! or the cause of a ban), so making room for a newcomer is O(1): the least recently seen
//! unflagged client goes first, and a flagged one only when every client of the shard is.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ipnet::IpNet;
use parking_lot::Mutex;

use super::{AGENT_LEN, MAX_AGENTS, MAX_CLIENTS, PER_CLIENT, RAW_BLOCKED_LINES};

/// Shards of the client table.
pub(super) const SHARDS: usize = 16;
/// Clients one shard holds at most.
pub(super) const PER_SHARD: usize = MAX_CLIENTS / SHARDS;

/// Entry flag: answered with the ban notice of a ban in force when it arrived.
pub(super) const BLOCKED: u8 = 1;
/// Entry flag: the request after which its client became banned.
pub(super) const TRIGGERED: u8 = 2;

/// The agent index of a request that sent no `User-Agent`.
pub(super) const NO_AGENT: u8 = 0;
/// The agent index of a browser beyond the first [`MAX_AGENTS`] of a client.
pub(super) const OTHER_AGENT: u8 = u8::MAX;
/// How a browser beyond the first few is shown.
pub(super) const OTHER_AGENT_TEXT: &str = "(another browser)";

/// A request method, at most 16 bytes, kept inline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct MethodText {
    len: u8,
    bytes: [u8; 16],
}

impl MethodText {
    pub(super) fn new(method: &str) -> MethodText {
        let cut = floor_boundary(method, 16);
        let mut bytes = [0u8; 16];
        bytes[..cut].copy_from_slice(&method.as_bytes()[..cut]);
        MethodText {
            len: cut as u8,
            bytes,
        }
    }

    pub(super) fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The bytes of the method's text (always a whole `str`).
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(super) fn floor_boundary(text: &str, max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// `text` cut to at most `max` characters.
pub(super) fn truncate_chars(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    match text.char_indices().nth(max) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// One recorded request.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// Arrival, unix nanos.
    pub at: i64,
    /// Path and query, at most 256 bytes.
    pub path: Arc<str>,
    /// The ban window it was blocked under or triggered; 0 = none.
    pub ban: u64,
    pub latency_us: u32,
    pub status: u16,
    pub method: MethodText,
    /// [`NO_AGENT`], 1 + the index into the client's agents, or [`OTHER_AGENT`].
    pub agent: u8,
    pub flags: u8,
    /// The request's priority rank (0 = guest).
    pub rank: u8,
}

impl Entry {
    pub(super) fn blocked(&self) -> bool {
        self.flags & BLOCKED != 0
    }

    pub(super) fn triggered(&self) -> bool {
        self.flags & TRIGGERED != 0
    }
}

/// Everything kept about one address.
#[derive(Debug)]
pub(super) struct Client {
    pub ip: IpAddr,
    pub first_seen: i64,
    pub last_seen: i64,
    pub requests: u64,
    pub blocked: u64,
    /// 4xx and 5xx answers that were not ban notices.
    pub errors: u64,
    pub bans_triggered: u64,
    /// The rank of its latest request.
    pub rank: u8,
    pub agents: Vec<Arc<str>>,
    /// The latest [`PER_CLIENT`] requests, oldest first.
    pub entries: VecDeque<Entry>,
    /// Blocked requests logged line by line under window `.0` so far; past
    /// [`RAW_BLOCKED_LINES`] the log sums them per second instead.
    pub raw_blocked: (u64, u32),
}

impl Client {
    fn new(ip: IpAddr, at: i64) -> Client {
        Client {
            ip,
            first_seen: at,
            last_seen: at,
            requests: 0,
            blocked: 0,
            errors: 0,
            bans_triggered: 0,
            rank: 0,
            agents: Vec::new(),
            entries: VecDeque::new(),
            raw_blocked: (0, 0),
        }
    }

    /// Was ever blocked by a ban or caused one.
    pub(super) fn flagged(&self) -> bool {
        self.blocked > 0 || self.bans_triggered > 0
    }

    fn seen_at(&mut self, at: i64) {
        self.first_seen = self.first_seen.min(at);
        self.last_seen = self.last_seen.max(at);
    }

    /// The text of an agent index.
    pub(super) fn agent_text(&self, agent: u8) -> &str {
        match agent {
            NO_AGENT => "",
            OTHER_AGENT => OTHER_AGENT_TEXT,
            index => self
                .agents
                .get(usize::from(index) - 1)
                .map_or("", |text| text),
        }
    }

    /// The index of `agent`, added when there is room. Returns the index and whether the text
    /// must be written out by the caller (a browser beyond the kept ones).
    fn agent_index(&mut self, agent: Option<&str>) -> u8 {
        let Some(agent) = agent.filter(|text| !text.is_empty()) else {
            return NO_AGENT;
        };
        if let Some(found) = self.agents.iter().position(|known| &**known == agent) {
            return found as u8 + 1;
        }
        if self.agents.len() < MAX_AGENTS {
            self.agents.push(Arc::from(agent));
            return self.agents.len() as u8;
        }
        OTHER_AGENT
    }
}

/// The `User-Agent` as kept: text (invalid UTF-8 replaced), at most [`AGENT_LEN`] characters.
pub(super) fn agent_of(raw: &[u8]) -> Cow<'_, str> {
    match String::from_utf8_lossy(raw) {
        Cow::Borrowed(text) => Cow::Borrowed(truncate_chars(text, AGENT_LEN)),
        Cow::Owned(text) => Cow::Owned(truncate_chars(&text, AGENT_LEN).to_owned()),
    }
}

/// What the log needs to know after a request was stored.
#[derive(Debug, Default)]
pub(super) struct Stored {
    /// The kept text of the request's browser, when it is one of the client's kept ones.
    pub agent: Option<Arc<str>>,
    /// A browser beyond the kept ones: the caller writes its own text out.
    pub other_agent: bool,
    /// A blocked request still within the raw lines of its window.
    pub raw_line: bool,
    /// The kept copy of the request's target, when asked for the log.
    pub path: Option<Arc<str>>,
}

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
        }
    }
}

#[derive(Debug)]
struct Slot {
    client: Option<Client>,
    prev: u32,
    next: u32,
    /// Which recency list the slot is on: 0 unflagged, 1 flagged.
    list: u8,
}

/// One shard: a slab of clients, an index by address and the two recency lists.
#[derive(Debug)]
pub(super) struct Shard {
    index: HashMap<u128, u32, IpHashBuilder>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    lists: [List; 2],
}

impl Shard {
    fn new(hasher: IpHashBuilder) -> Shard {
        Shard {
            index: HashMap::with_hasher(hasher),
            slots: Vec::new(),
            free: Vec::new(),
            lists: [List::default(); 2],
        }
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    fn client(&self, slot: u32) -> Option<&Client> {
        self.slots.get(slot as usize)?.client.as_ref()
    }

    fn client_mut(&mut self, slot: u32) -> Option<&mut Client> {
        self.slots.get_mut(slot as usize)?.client.as_mut()
    }

    pub(super) fn get(&self, ip: IpAddr) -> Option<&Client> {
        let slot = *self.index.get(&ip_bits(ip))?;
        self.client(slot)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Client> {
        self.slots.iter().filter_map(|slot| slot.client.as_ref())
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next, list) = {
            let s = &self.slots[slot as usize];
            (s.prev, s.next, usize::from(s.list))
        };
        match prev {
            NIL => self.lists[list].head = next,
            prev => self.slots[prev as usize].next = next,
        }
        match next {
            NIL => self.lists[list].tail = prev,
            next => self.slots[next as usize].prev = prev,
        }
    }

    fn push_back(&mut self, slot: u32, list: u8) {
        let tail = self.lists[usize::from(list)].tail;
        {
            let s = &mut self.slots[slot as usize];
            s.prev = tail;
            s.next = NIL;
            s.list = list;
        }
        match tail {
            NIL => self.lists[usize::from(list)].head = slot,
            tail => self.slots[tail as usize].next = slot,
        }
        self.lists[usize::from(list)].tail = slot;
    }

    /// Moves a client just seen to the back of its list (the list may change with its flag).
    fn touch(&mut self, slot: u32) {
        let list = self
            .client(slot)
            .map_or(0, |client| u8::from(client.flagged()));
        // A busy client is usually at the back already.
        if self.lists[usize::from(list)].tail == slot {
            return;
        }
        self.unlink(slot);
        self.push_back(slot, list);
    }

    fn remove(&mut self, slot: u32) -> Option<Client> {
        let client = self.slots.get_mut(slot as usize)?.client.take()?;
        self.unlink(slot);
        self.index.remove(&ip_bits(client.ip));
        self.free.push(slot);
        Some(client)
    }

    /// The slot of `ip`'s client, created when missing; makes room first when the shard is
    /// full. The client pushed out for it goes to `evicted`, for the caller to drop once the
    /// lock is released (a hundred entries take a while to free); a large value is not moved
    /// in and out on every request for that.
    fn slot_for(&mut self, ip: IpAddr, at: i64, evicted: &mut Option<Client>) -> u32 {
        let bits = ip_bits(ip);
        if let Some(slot) = self.index.get(&bits) {
            return *slot;
        }
        if self.index.len() >= PER_SHARD {
            let victim = match self.lists[0].head {
                NIL => self.lists[1].head,
                head => head,
            };
            if victim != NIL {
                *evicted = self.remove(victim);
            }
        }
        let client = Some(Client::new(ip, at));
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize].client = client;
                slot
            }
            None => {
                self.slots.push(Slot {
                    client,
                    prev: NIL,
                    next: NIL,
                    list: 0,
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(bits, slot);
        self.push_back(slot, 0);
        slot
    }

    /// Takes out the clients `keep` refuses.
    pub(super) fn take_unless(&mut self, mut keep: impl FnMut(&Client) -> bool) -> Vec<Client> {
        let doomed: Vec<u32> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.client.as_ref().is_some_and(|c| !keep(c)))
            .map(|(index, _)| index as u32)
            .collect();
        doomed
            .into_iter()
            .filter_map(|slot| self.remove(slot))
            .collect()
    }
}

/// The sharded client table.
pub(super) struct Clients {
    shards: Box<[Mutex<Shard>]>,
    hasher: IpHashBuilder,
    /// Clients forgotten to make room for newer ones.
    evicted: AtomicU64,
}

impl Clients {
    pub(super) fn new() -> Clients {
        let hasher = IpHashBuilder::random();
        Clients {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Shard::new(hasher.clone())))
                .collect(),
            hasher,
            evicted: AtomicU64::new(0),
        }
    }

    pub(super) fn shard(&self, ip: IpAddr) -> &Mutex<Shard> {
        // Bits the shard's own table uses least: its low bits pick a bucket and its top seven
        // tag the bucket's entries.
        let hash = self.hasher.hash_one(ip_bits(ip));
        &self.shards[(hash >> 32) as usize % SHARDS]
    }

    pub(super) fn shards(&self) -> impl Iterator<Item = &Mutex<Shard>> {
        self.shards.iter()
    }

    pub(super) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }

    /// Stores one request of `ip` for `target` (path and query), made by `entry` from the
    /// kept copy of the target. `agent` is the request's browser as kept; `for_log` asks for
    /// the kept texts back.
    pub(super) fn store(
        &self,
        ip: IpAddr,
        at: i64,
        target: &str,
        entry: impl FnOnce(Arc<str>) -> Entry,
        agent: Option<&str>,
        for_log: bool,
    ) -> Stored {
        let mut shard = self.shard(ip).lock();
        let mut evicted = None;
        let slot = shard.slot_for(ip, at, &mut evicted);
        let mut stored = Stored::default();
        if let Some(client) = shard.client_mut(slot) {
            // A client asking for the same again (polling, a flood) shares the copy it has.
            let path = match client.entries.back() {
                Some(last) if *last.path == *target => Arc::clone(&last.path),
                _ => Arc::from(target),
            };
            if for_log {
                stored.path = Some(Arc::clone(&path));
            }
            let mut entry = entry(path);
            client.seen_at(entry.at);
            client.requests += 1;
            if entry.blocked() {
                client.blocked += 1;
                if client.raw_blocked.0 != entry.ban {
                    client.raw_blocked = (entry.ban, 0);
                }
                client.raw_blocked.1 = client.raw_blocked.1.saturating_add(1);
                stored.raw_line = client.raw_blocked.1 <= RAW_BLOCKED_LINES;
            } else if entry.status >= 400 && !entry.triggered() {
                client.errors += 1;
            }
            if entry.triggered() {
                client.bans_triggered += 1;
            }
            client.rank = entry.rank;
            entry.agent = client.agent_index(agent);
            match entry.agent {
                NO_AGENT => {}
                OTHER_AGENT => stored.other_agent = true,
                index if for_log => {
                    stored.agent = client.agents.get(usize::from(index) - 1).cloned();
                }
                _ => {}
            }
            if client.entries.len() >= PER_CLIENT {
                client.entries.pop_front();
            } else if client.entries.len() == client.entries.capacity() {
                // Grown by doubling but never past the ring's size.
                let len = client.entries.len();
                let more = len.max(4).min(PER_CLIENT - len);
                client.entries.reserve_exact(more);
            }
            client.entries.push_back(entry);
        }
        shard.touch(slot);
        drop(shard);
        self.count_eviction(&evicted);
        stored
    }

    /// Counts a client pushed out; the caller drops it after the shard's lock.
    fn count_eviction(&self, evicted: &Option<Client>) {
        if evicted.is_some() {
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds `count` blocked requests summed up in the log (replay).
    pub(super) fn store_summed(&self, ip: IpAddr, at: i64, count: u64) {
        let mut shard = self.shard(ip).lock();
        let mut evicted = None;
        let slot = shard.slot_for(ip, at, &mut evicted);
        if let Some(client) = shard.client_mut(slot) {
            client.seen_at(at);
            client.requests += count;
            client.blocked += count;
        }
        shard.touch(slot);
        drop(shard);
        self.count_eviction(&evicted);
    }

    /// Marks the request of `ip` made at `at` to `path` as the trigger of window `ban`, unless
    /// it already is. Returns whether it was found.
    pub(super) fn mark_trigger(&self, ip: IpAddr, at: i64, path: &str, ban: u64) -> bool {
        let mut shard = self.shard(ip).lock();
        let Some(slot) = shard.index.get(&ip_bits(ip)).copied() else {
            return false;
        };
        let Some(client) = shard.client_mut(slot) else {
            return false;
        };
        let Some(entry) = client
            .entries
            .iter_mut()
            .rev()
            .find(|entry| entry.at == at && &*entry.path == path)
        else {
            return false;
        };
        if entry.triggered() {
            return true;
        }
        entry.flags |= TRIGGERED;
        entry.ban = ban;
        client.bans_triggered += 1;
        shard.touch(slot);
        true
    }

    /// The newest request in `scope` made between `from` and `to` (unix nanos) that was not
    /// blocked: its client and the entry.
    pub(super) fn newest_unblocked(
        &self,
        scope: IpNet,
        from: i64,
        to: i64,
    ) -> Option<(IpAddr, Entry)> {
        let pick = |client: &Client| {
            client
                .entries
                .iter()
                .rev()
                .find(|e| !e.blocked() && e.at >= from && e.at <= to)
                .map(|entry| (client.ip, entry.clone()))
        };
        let single = match scope {
            IpNet::V4(v4) => v4.prefix_len() == 32,
            IpNet::V6(v6) => v6.prefix_len() == 128,
        };
        if single {
            let ip = scope.addr();
            return self.shard(ip).lock().get(ip).and_then(pick);
        }
        let mut best: Option<(IpAddr, Entry)> = None;
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for client in shard.iter().filter(|c| scope.contains(&c.ip)) {
                if let Some(found) = pick(client)
                    && best.as_ref().is_none_or(|(_, b)| found.1.at > b.at)
                {
                    best = Some(found);
                }
            }
        }
        best
    }

    /// Forgets clients last seen before `cutoff`; returns how many.
    pub(super) fn forget_idle(&self, cutoff: i64) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let gone = shard
                    .lock()
                    .take_unless(|client| client.last_seen >= cutoff);
                gone.len()
            })
            .sum()
    }
}

/// An address as 128 bits: IPv4 as its IPv4-mapped IPv6 form.
pub(super) fn ip_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_bits(),
        IpAddr::V6(v6) => v6.to_bits(),
    }
}

/// A keyed hash for addresses, much cheaper than SipHash for a 16-byte key: two folded
/// multiplications with random keys, so an attacker choosing addresses cannot aim at a shard
/// or a bucket.
#[derive(Debug, Clone)]
pub(super) struct IpHashBuilder {
    k0: u64,
    k1: u64,
}

impl IpHashBuilder {
    fn random() -> IpHashBuilder {
        IpHashBuilder {
            k0: rand::random(),
            k1: rand::random(),
        }
    }
}

impl BuildHasher for IpHashBuilder {
    type Hasher = IpHasher;

    fn build_hasher(&self) -> IpHasher {
        IpHasher {
            k0: self.k0,
            k1: self.k1,
            state: 0,
        }
    }
}

pub(super) struct IpHasher {
    k0: u64,
    k1: u64,
    state: u64,
}

const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

fn folded(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

impl Hasher for IpHasher {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write_u128(&mut self, value: u128) {
        let low = folded(value as u64 ^ self.k0, (value >> 64) as u64 ^ self.k1);
        self.state = folded(low ^ self.state ^ self.k1, MIX ^ self.k0);
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only addresses are hashed here; any other key still gets a keyed result.
        for chunk in bytes.chunks(16) {
            let mut wide = [0u8; 16];
            wide[..chunk.len()].copy_from_slice(chunk);
            self.write_u128(u128::from_le_bytes(wide));
        }
    }
}
