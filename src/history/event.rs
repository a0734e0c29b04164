//! The lines of `history.jsonl`: what the request path and the ban windows hand to the writer,
//! how each becomes one JSON object, and how a line read back is understood.
//!
//! Every line has `t` (its kind) and `at` (when it was written, RFC 3339 UTC to the
//! nanosecond); other fields are left out when zero, false or empty. Lines are written by hand
//! rather than through serde: one is written for nearly every request, and the generic path
//! costs several times more.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Deserialize;

use super::clients::MethodText;
use super::windows::{Trigger, target_text};
use crate::abuse::FOREVER;
use ipnet::IpNet;

/// One request, as its own line.
#[derive(Debug, Clone)]
pub(super) struct ReqEvent {
    pub at: i64,
    pub ip: IpAddr,
    pub method: MethodText,
    pub path: Arc<str>,
    pub status: u16,
    pub latency_us: u32,
    pub agent: Option<Arc<str>>,
    pub blocked: bool,
    pub triggered: bool,
    pub rank: u8,
    pub ban: u64,
}

/// A window's whole state; the latest line of a window wins.
#[derive(Debug, Clone)]
pub(super) struct BanState {
    pub at: i64,
    pub id: u64,
    pub scope: IpNet,
    pub range: bool,
    pub began: Option<i64>,
    pub until: i64,
    pub changes: u32,
    pub source: String,
}

/// What the writer is handed.
#[derive(Debug)]
pub(super) enum Event {
    Req(ReqEvent),
    /// A blocked request past its window's raw lines: summed per second into `agg` lines.
    Blocked {
        at: i64,
        ip: IpAddr,
        ban: u64,
        path: Arc<str>,
    },
    Ban(Box<BanState>),
    Lift {
        at: i64,
        ban: u64,
        by: Arc<str>,
    },
    Trig {
        at: i64,
        ban: u64,
        trigger: Box<Trigger>,
    },
}

/// Builds one JSON line in a reused buffer.
pub(super) struct LineWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> LineWriter<'a> {
    pub(super) fn begin(out: &'a mut Vec<u8>, kind: &str, at: i64) -> LineWriter<'a> {
        out.extend_from_slice(b"{\"t\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"at\":\"");
        push_time(out, at);
        out.push(b'"');
        LineWriter { out }
    }

    fn key(&mut self, key: &str) {
        self.out.extend_from_slice(b",\"");
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    pub(super) fn text(&mut self, key: &str, value: &str) -> &mut Self {
        if !value.is_empty() {
            self.key(key);
            push_string(self.out, value);
        }
        self
    }

    pub(super) fn display(&mut self, key: &str, value: impl std::fmt::Display) -> &mut Self {
        use std::io::Write as _;
        self.key(key);
        self.out.push(b'"');
        let _ = write!(self.out, "{value}");
        self.out.push(b'"');
        self
    }

    pub(super) fn number(&mut self, key: &str, value: u64) -> &mut Self {
        if value != 0 {
            self.key(key);
            self.out
                .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        }
        self
    }

    pub(super) fn flag(&mut self, key: &str, value: bool) -> &mut Self {
        if value {
            self.key(key);
            self.out.extend_from_slice(b"true");
        }
        self
    }

    pub(super) fn time(&mut self, key: &str, nanos: i64) -> &mut Self {
        self.key(key);
        self.out.push(b'"');
        push_time(self.out, nanos);
        self.out.push(b'"');
        self
    }

    /// `"key":{"name":n,…}` from pairs already in order.
    pub(super) fn counts<'k>(
        &mut self,
        key: &str,
        pairs: impl Iterator<Item = (&'k str, u64)>,
    ) -> &mut Self {
        self.key(key);
        self.out.push(b'{');
        for (index, (name, count)) in pairs.enumerate() {
            if index > 0 {
                self.out.push(b',');
            }
            push_string(self.out, name);
            self.out.push(b':');
            self.out
                .extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
        }
        self.out.push(b'}');
        self
    }

    /// `"trigger":{…}`.
    pub(super) fn trigger(&mut self, trigger: &Trigger) -> &mut Self {
        self.key("trigger");
        self.out.extend_from_slice(b"{\"client\":");
        push_string(self.out, &trigger.client.to_string());
        LineWriter {
            out: &mut *self.out,
        }
        .text("method", trigger.method.as_str())
        .text("path", &trigger.path)
        .number("status", u64::from(trigger.status))
        .time("at", trigger.at);
        self.out.push(b'}');
        self
    }

    pub(super) fn end(&mut self) {
        self.out.extend_from_slice(b"}\n");
    }
}

fn push_time(out: &mut Vec<u8>, nanos: i64) {
    crate::sys::walltime::push_rfc3339(
        out,
        nanos.div_euclid(1_000_000_000),
        nanos.rem_euclid(1_000_000_000) as u32,
    );
}

/// `value` as a JSON string.
pub(super) fn push_string(out: &mut Vec<u8>, value: &str) {
    out.push(b'"');
    let bytes = value.as_bytes();
    let mut start = 0;
    for (index, byte) in bytes.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..index]);
        if escaped.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.extend_from_slice(escaped);
        }
        start = index + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends the line of `event` (not for [`Event::Blocked`], which is summed first).
pub(super) fn encode(event: &Event, out: &mut Vec<u8>) {
    match event {
        Event::Req(req) => {
            LineWriter::begin(out, "req", req.at)
                .display("ip", req.ip)
                .text("method", req.method.as_str())
                .text("path", &req.path)
                .number("status", u64::from(req.status))
                .number("latency_us", u64::from(req.latency_us))
                .text("ua", req.agent.as_deref().unwrap_or(""))
                .flag("blocked", req.blocked)
                .flag("triggered", req.triggered)
                .number("rank", u64::from(req.rank))
                .number("ban", req.ban)
                .end();
        }
        Event::Ban(state) => {
            let mut line = LineWriter::begin(out, "ban", state.at);
            line.number("ban", state.id)
                .text("target", &target_text(state.scope))
                .display("scope", state.scope)
                .flag("range", state.range);
            if let Some(began) = state.began {
                line.time("begin", began);
            }
            if state.until != FOREVER {
                line.time("until", state.until);
            }
            line.flag("permanent", state.until == FOREVER)
                .number("changes", u64::from(state.changes))
                .text("source", &state.source)
                .end();
        }
        Event::Lift { at, ban, by } => {
            LineWriter::begin(out, "lift", *at)
                .number("ban", *ban)
                .text("by", by)
                .end();
        }
        Event::Trig { at, ban, trigger } => {
            LineWriter::begin(out, "trig", *at)
                .number("ban", *ban)
                .trigger(trigger)
                .end();
        }
        Event::Blocked { .. } => {}
    }
}

/// A line read back. Every field but `t` is optional; unknown fields (such as the `ess`
/// address details older writers repeated on every line) are ignored.
#[derive(Debug, Deserialize)]
pub(super) struct LineIn<'a> {
    #[serde(borrow)]
    pub t: Cow<'a, str>,
    #[serde(borrow, default)]
    pub at: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub ip: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub path: Option<Cow<'a, str>>,
    #[serde(default)]
    pub status: u16,
    #[serde(default)]
    pub latency_us: u64,
    #[serde(borrow, default)]
    pub ua: Option<Cow<'a, str>>,
    #[serde(default)]
    pub blocked: bool,
    #[serde(default)]
    pub triggered: bool,
    #[serde(default)]
    pub rank: u8,
    #[serde(default)]
    pub ban: u64,
    // agg
    #[serde(borrow, default)]
    pub first: Option<Cow<'a, str>>,
    #[serde(default)]
    pub count: u64,
    #[serde(default)]
    pub paths: HashMap<String, u64>,
    #[serde(default)]
    pub other_paths: u64,
    // ban
    #[serde(borrow, default)]
    pub target: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub scope: Option<Cow<'a, str>>,
    #[serde(default)]
    pub range: bool,
    #[serde(borrow, default)]
    pub begin: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub until: Option<Cow<'a, str>>,
    #[serde(default)]
    pub permanent: bool,
    #[serde(default)]
    pub changes: u32,
    #[serde(borrow, default)]
    pub source: Option<Cow<'a, str>>,
    // lift, trig
    #[serde(borrow, default)]
    pub by: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub trigger: Option<TriggerIn<'a>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct TriggerIn<'a> {
    #[serde(borrow, default)]
    pub client: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub path: Option<Cow<'a, str>>,
    #[serde(default)]
    pub status: u16,
    #[serde(borrow, default)]
    pub at: Option<Cow<'a, str>>,
}
