//! The names of everything the instances of one site share in Redis.
//!
//! Every key starts with `concert:{<cluster-name>}:`. The braces are a Redis Cluster hash tag:
//! all of a site's keys live in one slot, so one Lua script may touch any of them.

/// Key names for one cluster name.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// `name` has passed the `-cluster-name` check (letters, digits, `.`, `_`, `-`).
    pub fn new(name: &str) -> Keys {
        Keys {
            prefix: format!("concert:{{{name}}}:"),
        }
    }

    /// The common prefix, `concert:{name}:`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key `suffix` under this cluster's prefix.
    pub fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    /// Sorted set: instance id → the Redis time (ms) its membership runs out.
    pub fn instances(&self) -> String {
        self.key("instances")
    }

    /// Hash of one instance's last report (address, started, slots in use, line share).
    pub fn instance(&self, id: &str) -> String {
        self.key(&format!("instance:{id}"))
    }

    /// Hash: instance id → page slots that instance holds from the shared pool.
    pub fn leases(&self) -> String {
        self.key("leases")
    }

    /// Pub/sub channel for changes every instance must hear about at once (bans, settings).
    pub fn events(&self) -> String {
        self.key("events")
    }

    /// Hash: client key (`203.0.113.7`, `2001:db8:1:2::/64`) → JSON ban or lift record.
    pub fn bans(&self) -> String {
        self.key("bans")
    }

    /// Sorted set: `bans` field → the Redis time (ms) its record may be forgotten.
    pub fn ban_ends(&self) -> String {
        self.key("bans:ends")
    }

    /// Hash: range (`198.51.100.0/24`) → JSON ban or lift record.
    pub fn ranges(&self) -> String {
        self.key("ranges")
    }

    /// Sorted set: `ranges` field → the Redis time (ms) its record may be forgotten.
    pub fn range_ends(&self) -> String {
        self.key("ranges:ends")
    }

    /// Hash of one client's strikes on every instance (`start`, `current`, `previous`: two
    /// buckets of a sliding window), expiring two windows after the last strike.
    pub fn strikes(&self, client: &str) -> String {
        self.key(&format!("strikes:{client}"))
    }

    /// String: the shared live settings, JSON `{version, from, values}`.
    pub fn settings(&self) -> String {
        self.key("settings")
    }

    /// Counter: the version of `settings`, raised by every write.
    pub fn settings_version(&self) -> String {
        self.key("settings:version")
    }

    /// Slots set aside for visitors called from the line who have not come in yet.
    pub fn reserved(&self) -> String {
        self.key("reserved")
    }

    /// Counter: the number each new place in the shared line gets.
    pub fn seq(&self) -> String {
        self.key("seq")
    }

    /// Sorted set: waiting ticket → its number (FIFO by number).
    pub fn line(&self) -> String {
        self.key("line")
    }

    /// Sorted set: waiting ticket → when it was last seen (its expiry runs from there).
    pub fn seen(&self) -> String {
        self.key("seen")
    }

    /// Sorted set: called ticket → the Redis time (ms) by which it must come in.
    pub fn called(&self) -> String {
        self.key("called")
    }

    /// Hash: ticket → `address|issued ms|instance`.
    pub fn tickets(&self) -> String {
        self.key("tickets")
    }

    /// Hash: client address (IPv4, or IPv6 /64) → its live tickets.
    pub fn per_address(&self) -> String {
        self.key("per_address")
    }

    /// Hash: waiting ticket → when it last polled (the one-second poll throttle).
    pub fn polled(&self) -> String {
        self.key("polled")
    }

    /// Hash of the line's running totals: `calls`, `entered`.
    pub fn line_stats(&self) -> String {
        self.key("line_stats")
    }

    /// Hash: instance id → tickets waiting in the line that joined through that instance (its
    /// share of the line, shown in the portal).
    pub fn joined_at(&self) -> String {
        self.key("joined_at")
    }

    /// Sorted set: `instance|ticket` → when that called visitor came in through that instance
    /// (kept a minute, so an instance that never heard the answer can give the slot back).
    pub fn entered(&self) -> String {
        self.key("entered")
    }

    /// Hash: instance id → page slots that instance asked for at its last lease round (how
    /// the pool sees who is short).
    pub fn wants(&self) -> String {
        self.key("wants")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_carries_the_hash_tag_of_its_site() {
        let keys = Keys::new("shop-1");
        assert_eq!(keys.prefix(), "concert:{shop-1}:");
        assert_eq!(keys.leases(), "concert:{shop-1}:leases");
        assert_eq!(keys.instance("a1"), "concert:{shop-1}:instance:a1");
        assert_ne!(Keys::new("a").instances(), Keys::new("b").instances());
    }
}
