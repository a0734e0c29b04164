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
