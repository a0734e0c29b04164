//! Reading `history.jsonl` back at start: the rotated files oldest first (`.4` … `.1`), then
//! the file itself, line by line.
//!
//! A line longer than 1 MiB, or one that is not a line of this format, is skipped and counted;
//! so is a last line a crash cut short. Requests older than the retention are skipped (without
//! being parsed, when the whole file is older); ban lines always apply, since a permanent ban's
//! window outlives any retention.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use super::clients::{BLOCKED, Entry, MethodText, TRIGGERED, floor_boundary};
use super::event::LineIn;
use super::windows::{Lift, Trigger, Window, parse_scope};
use super::writer::rotated;
use super::{History, RETENTION, TARGET_LEN};
use crate::abuse::FOREVER;
use crate::abuse::record::WallTime;

/// Longest line read back.
pub(super) const MAX_LINE: usize = 1024 * 1024;

/// What reading the log back found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ReplayReport {
    pub files: usize,
    /// Lines applied.
    pub lines: u64,
    /// Request lines older than the retention.
    pub old: u64,
    /// Lines too long, not JSON, or missing what their kind needs.
    pub bad: u64,
}

pub(super) fn replay(history: &History, path: &Path, keep: usize) -> ReplayReport {
    let mut report = ReplayReport::default();
    let now = history.now();
    let cutoff = now.saturating_sub(crate::abuse::nanos(RETENTION));
    let files = (1..=keep)
        .rev()
        .map(|index| rotated(path, index))
        .chain(std::iter::once(path.to_path_buf()));
    for file in files {
        match replay_file(history, &file, cutoff, &mut report) {
            Ok(true) => report.files += 1,
            Ok(false) => {}
            Err(error) => tracing::error!(
                path = %file.display(),
                "cannot read the history log back: {error}; what it holds is not shown"
            ),
        }
    }
    report
}

/// Returns whether the file existed.
fn replay_file(
    history: &History,
    path: &Path,
    cutoff: i64,
    report: &mut ReplayReport,
) -> io::Result<bool> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(error),
    };
    // Nothing in a file last written before the cutoff but its ban lines still matters.
    let stale = file
        .metadata()
        .and_then(|meta| meta.modified())
        .ok()
        .map(|modified| WallTime(system_nanos(modified)))
        .is_some_and(|modified| modified.0 < cutoff);
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut line = Vec::new();
    while let Some(fits) = next_line(&mut reader, &mut line)? {
        if !fits {
            report.bad += 1;
            continue;
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        if stale && is_request_line(text) {
            report.old += 1;
            continue;
        }
        let Ok(parsed) = serde_json::from_slice::<LineIn<'_>>(text) else {
            report.bad += 1;
            continue;
        };
        match apply(history, &parsed, cutoff) {
            Applied::Yes => report.lines += 1,
            Applied::Old => report.old += 1,
            Applied::Bad => report.bad += 1,
        }
    }
    Ok(true)
}

/// Whether a line this writer wrote is a `req` or `agg` line (its kind comes first).
fn is_request_line(text: &[u8]) -> bool {
    text.starts_with(br#"{"t":"req""#) || text.starts_with(br#"{"t":"agg""#)
}

fn system_nanos(time: std::time::SystemTime) -> i64 {
    match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// The next line into `line` (without its newline): `None` at the end, `Some(false)` for a line
/// longer than [`MAX_LINE`], which is skipped without being held.
fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<Option<bool>> {
    line.clear();
    let mut any = false;
    let mut fits = true;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(any.then_some(fits));
        }
        any = true;
        let (chunk, done) = match memchr::memchr(b'\n', available) {
            Some(end) => (&available[..end], Some(end + 1)),
            None => (available, None),
        };
        if fits {
            if line.len() + chunk.len() > MAX_LINE {
                fits = false;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(fits));
        }
    }
}

enum Applied {
    Yes,
    Old,
    Bad,
}

fn time_of(text: Option<&str>) -> Option<i64> {
    WallTime::parse(text?).map(|time| time.0)
}

fn apply(history: &History, line: &LineIn<'_>, cutoff: i64) -> Applied {
    let applied = match &*line.t {
        "req" => apply_req(history, line, cutoff),
        "agg" => apply_agg(history, line, cutoff),
        "ban" => apply_ban(history, line),
        "lift" => apply_lift(history, line),
        "trig" => apply_trig(history, line),
        _ => None,
    };
    applied.unwrap_or(Applied::Bad)
}

fn ip_of(line: &LineIn<'_>) -> Option<IpAddr> {
    line.ip.as_deref()?.trim().parse::<IpAddr>().ok()
}

fn apply_req(history: &History, line: &LineIn<'_>, cutoff: i64) -> Option<Applied> {
    let at = time_of(line.at.as_deref())?;
    if at < cutoff {
        return Some(Applied::Old);
    }
    let ip = ip_of(line)?;
    let target = line.path.as_deref().unwrap_or("");
    let target = &target[..floor_boundary(target, TARGET_LEN)];
    let method = MethodText::new(line.method.as_deref().unwrap_or(""));
    if line.blocked
        && line.ban > 0
        && let Some(window) = history.windows.lock().get_mut(line.ban)
    {
        window.hit(ip, target, at, 1);
    }
    if line.triggered && line.ban > 0 {
        let mut windows = history.windows.lock();
        if let Some(window) = windows.get_mut(line.ban)
            && window.trigger.is_none()
        {
            window.trigger = Some(Trigger {
                client: ip,
                method,
                path: Arc::from(target),
                status: line.status,
                at,
            });
        }
    }
    let flags = if line.blocked { BLOCKED } else { 0 } | if line.triggered { TRIGGERED } else { 0 };
    let entry = |path| Entry {
        at,
        path,
        ban: line.ban,
        latency_us: u32::try_from(line.latency_us).unwrap_or(u32::MAX),
        status: line.status,
        method,
        agent: 0,
        flags,
        rank: line.rank,
    };
    let agent = line
        .ua
        .as_deref()
        .map(|ua| super::clients::truncate_chars(ua, super::AGENT_LEN));
    history.clients.store(ip, at, target, entry, agent, false);
    Some(Applied::Yes)
}

fn apply_agg(history: &History, line: &LineIn<'_>, cutoff: i64) -> Option<Applied> {
    let at = time_of(line.at.as_deref())?;
    let first = time_of(line.first.as_deref()).unwrap_or(at);
    if at < cutoff {
        return Some(Applied::Old);
    }
    let ip = ip_of(line)?;
    if line.count == 0 {
        return None;
    }
    if line.ban > 0
        && let Some(window) = history.windows.lock().get_mut(line.ban)
    {
        for (path, hits) in &line.paths {
            window.hit(ip, path, first, *hits);
        }
        if line.other_paths > 0 {
            window.hit_unitemised(ip, first, line.other_paths);
        }
        window.last_hit = Some(window.last_hit.map_or(at, |last| last.max(at)));
    }
    history.clients.store_summed(ip, at, line.count);
    Some(Applied::Yes)
}

fn apply_ban(history: &History, line: &LineIn<'_>) -> Option<Applied> {
    if line.ban == 0 {
        return None;
    }
    let scope = line
        .scope
        .as_deref()
        .and_then(parse_scope)
        .or_else(|| line.target.as_deref().and_then(parse_scope))?;
    let until = if line.permanent {
        FOREVER
    } else {
        time_of(line.until.as_deref())?
    };
    let began = time_of(line.begin.as_deref());
    let mut windows = history.windows.lock();
    windows.next_id = windows.next_id.max(line.ban + 1);
    let window = windows
        .by_id
        .entry(line.ban)
        .or_insert_with(|| Window::new(line.ban, scope, line.range, until));
    window.scope = scope;
    window.range = line.range;
    window.began = began;
    window.until = until;
    window.changes = line.changes;
    window.source = line.source.as_deref().unwrap_or("").to_string();
    if window.lifted.is_none() {
        windows.activate(scope, line.ban, line.range);
    }
    Some(Applied::Yes)
}

fn apply_lift(history: &History, line: &LineIn<'_>) -> Option<Applied> {
    let at = time_of(line.at.as_deref())?;
    let mut windows = history.windows.lock();
    let window = windows.get_mut(line.ban)?;
    window.lifted = Some(Lift {
        at,
        by: Arc::from(line.by.as_deref().unwrap_or("")),
    });
    let scope = window.scope;
    windows.deactivate(scope, line.ban);
    Some(Applied::Yes)
}

fn apply_trig(history: &History, line: &LineIn<'_>) -> Option<Applied> {
    let given = line.trigger.as_ref()?;
    let client = given.client.as_deref()?.trim().parse::<IpAddr>().ok()?;
    let at = time_of(given.at.as_deref())?;
    let path = given.path.as_deref().unwrap_or("");
    let path = &path[..floor_boundary(path, TARGET_LEN)];
    let trigger = Trigger {
        client,
        method: MethodText::new(given.method.as_deref().unwrap_or("")),
        path: Arc::from(path),
        status: given.status,
        at,
    };
    {
        let mut windows = history.windows.lock();
        let window = windows.get_mut(line.ban)?;
        window.trigger = Some(trigger);
    }
    history.clients.mark_trigger(client, at, path, line.ban);
    Some(Applied::Yes)
}
