//! The lines of `history.jsonl`: what the request path and the ban windows hand to the writer,
//! how each becomes one JSON object, and how a line read back is understood.
//!
//! Every line has `t` (its kind) and `at` (when it was written, RFC 3339 UTC to the
//! nanosecond); other fields are left out when zero, false or empty. Lines are written by hand
//! rather than through serde: one is written for nearly every request, and the generic path
//! costs several times more.

use std::borrow::Cow;
use std::cell::Cell;
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

/// `,"name":`, a field's key as written, put together at compile time.
macro_rules! field {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}

/// `{"t":"kind","at":"`, the start of a line of that kind.
macro_rules! kind {
    ($name:literal) => {
        concat!("{\"t\":\"", $name, "\",\"at\":\"")
    };
}

pub(super) use {field, kind};

/// Builds one JSON line in a reused buffer. Keys come whole from [`field!`], each value is
/// written straight into the buffer.
pub(super) struct LineWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> LineWriter<'a> {
    /// `start` is [`kind!`]`("req")` and the like.
    #[inline]
    pub(super) fn begin(out: &'a mut Vec<u8>, start: &'static str, at: i64) -> LineWriter<'a> {
        out.reserve(512);
        out.extend_from_slice(start.as_bytes());
        push_time(out, at);
        out.push(b'"');
        LineWriter { out }
    }

    /// A string field, left out when empty.
    #[inline]
    pub(super) fn text(&mut self, field: &'static str, value: &str) -> &mut Self {
        self.bytes(field, value.as_bytes())
    }

    /// A string field given as the bytes of a `str`, left out when empty.
    #[inline]
    pub(super) fn bytes(&mut self, field: &'static str, value: &[u8]) -> &mut Self {
        if !value.is_empty() {
            self.out.extend_from_slice(field.as_bytes());
            push_json_string(self.out, value);
        }
        self
    }

    #[inline]
    pub(super) fn ip(&mut self, field: &'static str, ip: IpAddr) -> &mut Self {
        self.out.extend_from_slice(field.as_bytes());
        self.out.push(b'"');
        push_ip(self.out, ip);
        self.out.push(b'"');
        self
    }

    pub(super) fn display(
        &mut self,
        field: &'static str,
        value: impl std::fmt::Display,
    ) -> &mut Self {
        use std::io::Write as _;
        self.out.extend_from_slice(field.as_bytes());
        self.out.push(b'"');
        let _ = write!(self.out, "{value}");
        self.out.push(b'"');
        self
    }

    /// A number field, left out when zero.
    #[inline]
    pub(super) fn number(&mut self, field: &'static str, value: u64) -> &mut Self {
        if value != 0 {
            self.out.extend_from_slice(field.as_bytes());
            self.out
                .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        }
        self
    }

    /// A `true` field, left out when false.
    #[inline]
    pub(super) fn flag(&mut self, field: &'static str, value: bool) -> &mut Self {
        if value {
            self.out.extend_from_slice(field.as_bytes());
            self.out.extend_from_slice(b"true");
        }
        self
    }

    pub(super) fn time(&mut self, field: &'static str, nanos: i64) -> &mut Self {
        self.out.extend_from_slice(field.as_bytes());
        self.out.push(b'"');
        push_time(self.out, nanos);
        self.out.push(b'"');
        self
    }

    /// `"key":{"name":n,…}` from pairs already in order.
    pub(super) fn counts<'k>(
        &mut self,
        field: &'static str,
        pairs: impl Iterator<Item = (&'k str, u64)>,
    ) -> &mut Self {
        self.out.extend_from_slice(field.as_bytes());
        self.out.push(b'{');
        for (index, (name, count)) in pairs.enumerate() {
            if index > 0 {
                self.out.push(b',');
            }
            push_json_string(self.out, name.as_bytes());
            self.out.push(b':');
            self.out
                .extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
        }
        self.out.push(b'}');
        self
    }

    /// `"trigger":{…}`.
    pub(super) fn trigger(&mut self, trigger: &Trigger) -> &mut Self {
        self.out.extend_from_slice(b",\"trigger\":{\"client\":\"");
        push_ip(self.out, trigger.client);
        self.out.push(b'"');
        LineWriter {
            out: &mut *self.out,
        }
        .bytes(field!("method"), trigger.method.as_bytes())
        .text(field!("path"), &trigger.path)
        .number(field!("status"), u64::from(trigger.status))
        .time(field!("at"), trigger.at);
        self.out.push(b'}');
        self
    }

    #[inline]
    pub(super) fn end(&mut self) {
        self.out.extend_from_slice(b"}\n");
    }
}

thread_local! {
    /// The writer's last whole second as text (`2026-01-01T00:00:00`): lines come many to a
    /// second, so the date is worked out once a second.
    static SECOND: Cell<(i64, [u8; 19])> = const { Cell::new((i64::MIN, [0; 19])) };
}

/// `nanos` (unix) as RFC 3339 UTC with the fraction's trailing zeros trimmed.
fn push_time(out: &mut Vec<u8>, nanos: i64) {
    let secs = nanos.div_euclid(1_000_000_000);
    let fraction = nanos.rem_euclid(1_000_000_000) as u32;
    let (cached, mut text) = SECOND.get();
    if cached != secs {
        let mut fresh = Vec::with_capacity(32);
        crate::sys::walltime::push_rfc3339(&mut fresh, secs, 0);
        // Years outside 0000-9999 are not 19 bytes long; they are never cached.
        if fresh.len() != 20 {
            fresh.pop();
            out.extend_from_slice(&fresh);
            push_fraction(out, fraction);
            out.push(b'Z');
            return;
        }
        text.copy_from_slice(&fresh[..19]);
        SECOND.set((secs, text));
    }
    out.extend_from_slice(&text);
    push_fraction(out, fraction);
    out.push(b'Z');
}

/// `.123456789` (`fraction` is below 10⁹) with trailing zeros trimmed, nothing for zero.
fn push_fraction(out: &mut Vec<u8>, fraction: u32) {
    if fraction == 0 {
        return;
    }
    // Two digits at a time, as itoa does, rather than nine divisions by ten.
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(fraction.min(999_999_999)).as_bytes();
    let zeros = digits
        .iter()
        .rev()
        .take_while(|digit| **digit == b'0')
        .count();
    out.push(b'.');
    out.extend_from_slice(&b"00000000"[..9 - digits.len()]);
    out.extend_from_slice(&digits[..digits.len() - zeros]);
}

/// Each octet's decimal text, padded to three bytes, and its length: an IPv4 address is then
/// four small copies instead of divisions.
const OCTETS: [([u8; 3], u8); 256] = {
    let mut table = [([0u8; 3], 0u8); 256];
    let mut octet = 0;
    while octet < 256 {
        let value = octet as u8;
        table[octet] = if value >= 100 {
            (
                [
                    b'0' + value / 100,
                    b'0' + value / 10 % 10,
                    b'0' + value % 10,
                ],
                3,
            )
        } else if value >= 10 {
            ([b'0' + value / 10, b'0' + value % 10, 0], 2)
        } else {
            ([b'0' + value, 0, 0], 1)
        };
        octet += 1;
    }
    table
};

/// An address as text; IPv4 from [`OCTETS`], being nearly every line.
fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            // Each octet's three bytes are written whole and the length moves by its digits,
            // so the buffer is 15 bytes plus the slack of the last one.
            let mut text = [0u8; 18];
            let mut len = 0;
            for (index, octet) in v4.octets().into_iter().enumerate() {
                if index > 0 {
                    text[len] = b'.';
                    len += 1;
                }
                let (digits, count) = OCTETS[usize::from(octet)];
                text[len..len + 3].copy_from_slice(&digits);
                len += usize::from(count);
            }
            out.extend_from_slice(&text[..len]);
        }
        IpAddr::V6(v6) => {
            use std::io::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

/// Whether any byte of `bytes` must be escaped in a JSON string (a control byte, `"` or `\`),
/// eight bytes at a time: every line has a path and most a browser, and a byte-by-byte test
/// cost more than the rest of the line.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // The word-wide tests for "some byte is zero" and "some byte is below n" (n up to 0x80):
    // which lane they flag can be off after a borrow, but whether any is flagged is exact.
    let zero_in = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut lanes = [0u8; 8];
        lanes.copy_from_slice(chunk);
        let word = u64::from_ne_bytes(lanes);
        let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
        let quote = zero_in(word ^ (ONES * u64::from(b'"')));
        let backslash = zero_in(word ^ (ONES * u64::from(b'\\')));
        if below_space | quote | backslash != 0 {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// `bytes` (of a `str`) as a JSON string.
fn push_json_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    if !needs_escape(bytes) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
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
            LineWriter::begin(out, kind!("req"), req.at)
                .ip(field!("ip"), req.ip)
                .bytes(field!("method"), req.method.as_bytes())
                .text(field!("path"), &req.path)
                .number(field!("status"), u64::from(req.status))
                .number(field!("latency_us"), u64::from(req.latency_us))
                .text(field!("ua"), req.agent.as_deref().unwrap_or(""))
                .flag(field!("blocked"), req.blocked)
                .flag(field!("triggered"), req.triggered)
                .number(field!("rank"), u64::from(req.rank))
                .number(field!("ban"), req.ban)
                .end();
        }
        Event::Ban(state) => {
            let mut line = LineWriter::begin(out, kind!("ban"), state.at);
            line.number(field!("ban"), state.id)
                .text(field!("target"), &target_text(state.scope))
                .display(field!("scope"), state.scope)
                .flag(field!("range"), state.range);
            if let Some(began) = state.began {
                line.time(field!("begin"), began);
            }
            if state.until != FOREVER {
                line.time(field!("until"), state.until);
            }
            line.flag(field!("permanent"), state.until == FOREVER)
                .number(field!("changes"), u64::from(state.changes))
                .text(field!("source"), &state.source)
                .end();
        }
        Event::Lift { at, ban, by } => {
            LineWriter::begin(out, kind!("lift"), *at)
                .number(field!("ban"), *ban)
                .text(field!("by"), by)
                .end();
        }
        Event::Trig { at, ban, trigger } => {
            LineWriter::begin(out, kind!("trig"), *at)
                .number(field!("ban"), *ban)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn needs_escape_bytewise(bytes: &[u8]) -> bool {
        bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
    }

    proptest::proptest! {
        #[test]
        fn the_word_wide_escape_test_agrees_with_the_bytewise_one(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)
        ) {
            proptest::prop_assert_eq!(needs_escape(&bytes), needs_escape_bytewise(&bytes));
        }
    }

    #[test]
    fn every_byte_that_must_be_escaped_is_found_in_every_lane() {
        for position in 0..24 {
            for byte in 0..=255u8 {
                let mut bytes = vec![b'a'; 24];
                bytes[position] = byte;
                assert_eq!(
                    needs_escape(&bytes),
                    needs_escape_bytewise(&bytes),
                    "{byte:#x} at {position}"
                );
            }
        }
    }

    #[test]
    fn every_ipv4_address_octet_reads_as_std_writes_it() {
        for octet in 0..=255u8 {
            for ip in [
                std::net::Ipv4Addr::new(octet, 0, 9, 255),
                std::net::Ipv4Addr::new(255, octet, 100, 1),
                std::net::Ipv4Addr::new(10, 99, octet, octet),
            ] {
                let mut out = Vec::new();
                push_ip(&mut out, IpAddr::V4(ip));
                assert_eq!(String::from_utf8(out).unwrap(), ip.to_string());
            }
        }
    }
}
