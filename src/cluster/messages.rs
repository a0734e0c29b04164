//! What the instances tell each other on the events channel, and the ban record Redis keeps
//! for every client and range: the shapes alone, so the parts that send and store them
//! (`bans`, `settings`) and the one that listens (`events`) share them without depending on
//! each other.

use serde::{Deserialize, Serialize};

/// One client's or range's shared ban state, as stored in Redis and carried by messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Unix ms the ban ends; absent for a permanent ban and for a lift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    #[serde(default)]
    pub permanent: bool,
    #[serde(default)]
    pub offenses: u32,
    /// `strikes`, `ban_path` or `operator`.
    #[serde(default)]
    pub cause: String,
    /// The ban was lifted.
    #[serde(default)]
    pub lifted: bool,
    /// Unix ms of the change: of two records of one client, the later wins.
    pub at: i64,
    /// The instance that made the change.
    #[serde(default)]
    pub from: String,
}

/// Larger messages are not ours.
const MAX_MESSAGE: usize = 64 * 1024;

/// A message on the events channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A ban or lift of one client (`range: false`) or range, as stored in Redis.
    Ban {
        from: String,
        client: String,
        range: bool,
        record: Record,
    },
    /// The shared settings were written; their version.
    Settings { from: String, version: u64 },
}

impl Event {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The instance that sent it.
    pub fn from(&self) -> &str {
        match self {
            Event::Ban { from, .. } | Event::Settings { from, .. } => from,
        }
    }
}

/// A message that is not one of ours: not JSON, an unknown kind, or too large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable;

/// What a message asks of this instance; `None` for one it sent itself.
pub fn read(payload: &[u8], own_id: &str) -> Result<Option<Event>, Unreadable> {
    if payload.len() > MAX_MESSAGE {
        return Err(Unreadable);
    }
    let event: Event = serde_json::from_slice(payload).map_err(|_| Unreadable)?;
    Ok((event.from() != own_id).then_some(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_foreign_and_garbage_messages_are_told_apart() {
        let event = Event::Settings {
            from: "a".into(),
            version: 3,
        };
        let text = event.to_json();
        assert_eq!(text, r#"{"kind":"settings","from":"a","version":3}"#);
        assert_eq!(read(text.as_bytes(), "a"), Ok(None));
        assert_eq!(read(text.as_bytes(), "b"), Ok(Some(event)));
        for garbage in [
            &b"not json"[..],
            b"{}",
            br#"{"kind":"reboot","from":"x"}"#,
            br#"{"kind":"ban","from":"x","client":"1.2.3.4"}"#,
            b"\xff\xfe",
        ] {
            assert_eq!(read(garbage, "b"), Err(Unreadable), "{garbage:?}");
        }
        assert_eq!(read(&vec![b' '; MAX_MESSAGE + 1], "b"), Err(Unreadable));
    }
}
