//! The Monitor tab's Cluster card (`-cluster` only): this instance's own report (mode, lease,
//! Redis health) beside every instance's last lease report as Redis holds it, so an operator
//! sees from any instance how the shared cap is spread.
//!
//! The listing is one `TIME` + `ZCARD` + `ZRANGE` + `HGETALL` (the line's shares) exchange and then one pipelined `HGETALL` per
//! instance (at most [`MAX_LISTED`]), all within the link's bound. It is read at most once per
//! [`READ_EVERY`] however many portal pages poll, and when Redis does not answer the card shows
//! the last listing read, marked as such, beside the local report: never an error page.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use http::{Response, StatusCode};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Portal, respond};
use crate::app::App;
use crate::cluster::health::ClusterReport;
use crate::cluster::{Cluster, link};

/// Most instances listed: a bound on the `HGETALL`s of one read (the count says how many more
/// there are).
pub(crate) const MAX_LISTED: usize = 64;
/// Least time between two reads from Redis; polls in between get the last listing.
const READ_EVERY: Duration = Duration::from_secs(1);

/// One instance as its last lease round left it in Redis. Every field but the id comes from
/// that instance's report and may be missing (a report that expired between the two reads).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Member {
    id: String,
    address: Option<String>,
    /// Unix ms by that instance's clock.
    started_ms: Option<u64>,
    /// Page slots the pool counts as that instance's.
    lease: Option<u64>,
    in_use: Option<u64>,
    want: Option<u64>,
    granted: Option<u64>,
    /// Visitors waiting in the shared line who joined through it (its share of the line).
    waiting: u64,
    /// Time since its last lease round, by Redis's clock (so the hosts' clocks never matter).
    seen_ago_ms: Option<u64>,
    /// Whether it is the instance answering.
    this: bool,
}

/// One read of the instances.
#[derive(Debug, Clone)]
struct Listing {
    members: Vec<Member>,
    /// Instances in the membership set, listed or not.
    total: u64,
    read_at: Instant,
}

impl Listing {
    /// The listing as of `now`: the ages go on growing while Redis is not read.
    fn aged(&self, now: Instant) -> Vec<Member> {
        let since = u64::try_from(now.saturating_duration_since(self.read_at).as_millis())
            .unwrap_or(u64::MAX);
        self.members
            .iter()
            .cloned()
            .map(|mut member| {
                member.seen_ago_ms = member.seen_ago_ms.map(|ago| ago.saturating_add(since));
                member
            })
            .collect()
    }
}

#[derive(Default)]
struct ViewState {
    last: Option<Listing>,
    /// When a read last began, successful or not.
    tried: Option<Instant>,
    /// Why the last read failed; cleared by a good one.
    error: Option<String>,
}

/// What the portal remembers of the instances between polls.
#[derive(Default)]
pub(crate) struct ClusterView {
    state: Mutex<ViewState>,
}

impl ClusterView {
    /// Whether a read may start now; if so, it counts as begun (so concurrent polls share it).
    fn may_read(&self, now: Instant) -> bool {
        let mut state = self.state.lock();
        if state
            .tried
            .is_some_and(|at| now.saturating_duration_since(at) < READ_EVERY)
        {
            return false;
        }
        state.tried = Some(now);
        true
    }

    fn record(&self, outcome: Result<Listing, String>) {
        let mut state = self.state.lock();
        match outcome {
            Ok(listing) => {
                state.last = Some(listing);
                state.error = None;
            }
            Err(error) => state.error = Some(error),
        }
    }

    /// The `listing` object and the members to show, as of `now`.
    fn shown(&self, now: Instant) -> (Value, Vec<Member>, Option<u64>) {
        let state = self.state.lock();
        let Some(last) = &state.last else {
            let listing = json!({ "state": "none", "age_ms": null, "error": state.error });
            return (listing, Vec::new(), None);
        };
        let age = u64::try_from(now.saturating_duration_since(last.read_at).as_millis())
            .unwrap_or(u64::MAX);
        // A listing older than the polls' spacing, or after a failed read, is the last known;
        // one within it is as good as new.
        let fresh = state.error.is_none() && age < READ_EVERY.as_millis() as u64 * 2;
        let listing = json!({
            "state": if fresh { "fresh" } else { "last_known" },
            "age_ms": age,
            "error": state.error,
        });
        (listing, last.aged(now), Some(last.total))
    }
}

/// Reads the instances from Redis: one exchange (two round trips) under the link's bound.
async fn read(cluster: &Cluster) -> Result<Listing, link::LinkError> {
    let keys = cluster.keys.clone();
    let (time, total, ids, waiting, reports) = cluster
        .link
        .run(|mut connection| async move {
            let instances = keys.instances();
            let (time, total, ids, waiting): (Vec<u64>, u64, Vec<String>, HashMap<String, String>) =
                redis::pipe()
                    .cmd("TIME")
                    .zcard(&instances)
                    .zrange(&instances, 0, MAX_LISTED as isize - 1)
                    .hgetall(keys.joined_at())
                    .query_async(&mut connection)
                    .await?;
            let mut reports: Vec<HashMap<String, String>> = Vec::new();
            if !ids.is_empty() {
                let mut pipe = redis::pipe();
                for id in &ids {
                    pipe.hgetall(keys.instance(id));
                }
                reports = pipe.query_async(&mut connection).await?;
            }
            Ok((time, total, ids, waiting, reports))
        })
        .await?;
    let now_ms = match time.as_slice() {
        [seconds, micros] => seconds.saturating_mul(1000).saturating_add(micros / 1000),
        _ => return Err(link::LinkError::Reply("TIME")),
    };
    let mut members: Vec<Member> = ids
        .into_iter()
        .zip(
            reports
                .into_iter()
                .chain(std::iter::repeat_with(HashMap::new)),
        )
        .map(|(id, report)| {
            let mut member = member(&cluster.id, id, &report, now_ms);
            member.waiting = waiting
                .get(&member.id)
                .and_then(|count| count.parse::<u64>().ok())
                .unwrap_or(0);
            member
        })
        .collect();
    // Oldest first, so rows keep their places from one poll to the next.
    members.sort_by(|a, b| {
        (a.started_ms.is_none(), a.started_ms, &a.id).cmp(&(
            b.started_ms.is_none(),
            b.started_ms,
            &b.id,
        ))
    });
    Ok(Listing {
        members,
        total,
        read_at: Instant::now(),
    })
}

/// One instance from its report hash (Redis replies are input: anything unreadable is left
/// out, never a panic).
fn member(own_id: &str, id: String, report: &HashMap<String, String>, now_ms: u64) -> Member {
    let number = |field: &str| {
        report
            .get(field)
            .and_then(|value| value.parse::<u64>().ok())
    };
    Member {
        this: id == own_id,
        address: report.get("address").filter(|a| !a.is_empty()).cloned(),
        started_ms: number("started"),
        lease: number("lease"),
        in_use: number("in_use"),
        want: number("want"),
        granted: number("granted"),
        waiting: 0,
        seen_ago_ms: number("seen").map(|seen| now_ms.saturating_sub(seen)),
        id,
    }
}

/// The whole answer of `GET /api/cluster`, after a read if one was due.
pub(super) async fn cluster_json(app: &App, cluster: &Cluster, view: &ClusterView) -> Value {
    if view.may_read(Instant::now()) {
        let outcome = read(cluster).await.map_err(|error| error.to_string());
        view.record(outcome);
    }
    // Taken after the read, so the Redis figures count it.
    let Some(report) = ClusterReport::take(app) else {
        return Value::Null;
    };
    let (listing, members, total) = view.shown(Instant::now());
    let mut answer = report.json();
    if let Value::Object(fields) = &mut answer {
        fields.insert("name".into(), cluster.options.name.clone().into());
        fields.insert(
            "server".into(),
            link::redact_url(&cluster.options.url).into(),
        );
        fields.insert("cap".into(), app.room.settings().cap.into());
        fields.insert("members".into(), json!(members));
        fields.insert("members_total".into(), json!(total));
        fields.insert("listing".into(), listing);
    }
    answer
}

/// `GET /api/cluster`: 404 without `-cluster` (the card is not on the page then).
pub(super) async fn show(State(portal): State<Arc<Portal>>) -> Response<Body> {
    let Some(cluster) = portal.app.cluster.clone() else {
        return respond::error(StatusCode::NOT_FOUND, "this instance runs without -cluster");
    };
    let answer = cluster_json(&portal.app, &cluster, &portal.cluster).await;
    respond::json(StatusCode::OK, &answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_member_is_read_from_its_report_and_junk_is_left_out() {
        let full = report(&[
            ("in_use", "2"),
            ("lease", "5"),
            ("granted", "5"),
            ("want", "3"),
            ("started", "1700000000000"),
            ("address", "10.0.0.2:8080"),
            ("seen", "1700000009750"),
        ]);
        let member = member("a", "a".into(), &full, 1_700_000_010_000);
        assert!(member.this);
        assert_eq!(member.lease, Some(5));
        assert_eq!(member.in_use, Some(2));
        assert_eq!(member.seen_ago_ms, Some(250));
        assert_eq!(member.address.as_deref(), Some("10.0.0.2:8080"));

        let junk = report(&[("lease", "-1"), ("seen", "later"), ("address", "")]);
        let other = super::member("a", "b".into(), &junk, 5);
        assert!(!other.this);
        assert_eq!(
            (other.lease, other.seen_ago_ms, other.address),
            (None, None, None)
        );
        // A clock that runs backwards between two reads is no negative age.
        let ahead = report(&[("seen", "9000")]);
        assert_eq!(
            super::member("a", "c".into(), &ahead, 10).seen_ago_ms,
            Some(0)
        );
    }

    #[test]
    fn reads_are_spaced_and_a_failed_one_keeps_the_last_listing() {
        let view = ClusterView::default();
        let start = Instant::now();
        let (listing, members, total) = view.shown(start);
        assert_eq!(listing["state"], "none");
        assert!(members.is_empty() && total.is_none());

        assert!(view.may_read(start));
        assert!(!view.may_read(start + Duration::from_millis(500)));
        view.record(Ok(Listing {
            members: vec![member("a", "a".into(), &report(&[("seen", "100")]), 100)],
            total: 1,
            read_at: start,
        }));
        let (listing, members, _) = view.shown(start + Duration::from_millis(300));
        assert_eq!(listing["state"], "fresh");
        assert_eq!(members[0].seen_ago_ms, Some(300));

        assert!(view.may_read(start + READ_EVERY));
        view.record(Err("Redis did not answer within 500ms".into()));
        let (listing, members, total) = view.shown(start + Duration::from_secs(4));
        assert_eq!(listing["state"], "last_known");
        assert_eq!(listing["error"], "Redis did not answer within 500ms");
        assert_eq!(members[0].seen_ago_ms, Some(4000));
        assert_eq!(total, Some(1));
    }
}
