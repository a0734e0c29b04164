//! The Bans tab: the registry's bans as a paged table with IP details, and banning, changing
//! and lifting bans. Every change is answered only once `bans.json` holds it.

use std::sync::Arc;

use askama::Template;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use http::{Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::fragments::{AddressCell, Fragment, TableQuery, address_cells, now_ms, wall_ms};
use super::{Portal, peer_of, read_body, respond};
use crate::abuse::record::WallTime;
use crate::abuse::{BanError, BanLength, BanTarget, BanView};

/// One row of the bans table.
struct BanRow {
    cell: AddressCell,
    permanent: bool,
    /// Unix milliseconds the ban ends (0 for permanent ones): the registry's own end, so the
    /// row reads the same from one refresh to the next.
    until_ms: i64,
    offenses: u32,
}

#[derive(Template)]
#[template(path = "portal/rows_bans.html")]
struct BanRows<'a> {
    rows: &'a [BanRow],
    abuse_enabled: bool,
}

fn persisted(portal: &Portal) -> bool {
    portal.app.data_dir.is_some()
}

/// `GET /api/bans`: the bans in force.
pub(super) async fn list(State(portal): State<Arc<Portal>>) -> Response<Body> {
    let abuse = &portal.app.abuse;
    respond::json(
        StatusCode::OK,
        &json!({
            "enabled": abuse.enabled(),
            "tracked": abuse.tracked(),
            "ranges": abuse.range_count(),
            "persisted": persisted(&portal),
            "bans": abuse.bans(),
        }),
    )
}

/// The bans matching a filter, in the registry's order.
fn matching(portal: &Portal, filter: &str) -> Vec<BanView> {
    let mut bans = portal.app.abuse.bans();
    if !filter.is_empty() {
        bans.retain(|ban| ban.client.to_lowercase().contains(filter));
    }
    bans
}

/// Unix milliseconds a timed ban ends, read from the registry's end time; should that ever not
/// parse, from the seconds left (which moves with `now`).
fn ends_ms(ban: &BanView, now: u64) -> i64 {
    WallTime::parse(&ban.until).map_or_else(
        || {
            let left = ban.remaining_seconds.saturating_mul(1000);
            i64::try_from(now.saturating_add(left)).unwrap_or(i64::MAX)
        },
        wall_ms,
    )
}

/// `GET /api/frag/bans`: one page of the bans table, rendered.
pub(super) async fn fragment(
    State(portal): State<Arc<Portal>>,
    Query(query): Query<TableQuery>,
) -> Response<Body> {
    let abuse = &portal.app.abuse;
    let bans = matching(&portal, &query.filter());
    let total = bans.len();
    let paging = query.paging(total);
    let now = now_ms();
    let shown = bans.get(paging.start..paging.end).unwrap_or_default();
    let clients: Vec<&str> = shown.iter().map(|ban| ban.client.as_str()).collect();
    let cells = address_cells(&clients, &portal.ip_details).await;
    let rows: Vec<BanRow> = shown
        .iter()
        .zip(cells)
        .filter_map(|(ban, cell)| {
            Some(BanRow {
                cell: cell?,
                permanent: ban.permanent,
                until_ms: if ban.permanent { 0 } else { ends_ms(ban, now) },
                offenses: ban.offenses,
            })
        })
        .collect();
    let html = match (BanRows {
        rows: &rows,
        abuse_enabled: abuse.enabled(),
    })
    .render()
    {
        Ok(html) => html,
        Err(e) => {
            tracing::error!("portal: cannot render the bans: {e}");
            return respond::error(StatusCode::INTERNAL_SERVER_ERROR, "cannot render the bans");
        }
    };
    let summary = format!(
        "{} active bans · {} clients tracked · {} ranges",
        paging.shown(total),
        abuse.tracked(),
        abuse.range_count()
    );
    respond::json(
        StatusCode::OK,
        &Fragment {
            html,
            now,
            total,
            page: paging.page,
            pages: paging.pages,
            size: paging.size,
            r#where: query.whereabouts(bans.iter().map(|ban| ban.client.as_str()), paging.size),
            summary,
            flags: Some(json!({
                "enabled": abuse.enabled(),
                "persisted": persisted(&portal),
            })),
        },
    )
}

#[derive(Deserialize)]
struct BanRequest {
    #[serde(default)]
    client: String,
    #[serde(default)]
    duration: String,
    #[serde(default)]
    permanent: bool,
}

/// Answers a change once `bans.json` holds it; 500 (the change stays in force) otherwise.
fn saved_or_failed(portal: &Portal, answer: Response<Body>) -> Response<Body> {
    match portal.app.flush_bans() {
        Ok(()) => answer,
        Err(error) => {
            tracing::error!("portal: cannot save bans: {error}");
            respond::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the change is in effect but could not be saved: {error}"),
            )
        }
    }
}

/// `POST /api/bans {"client","duration","permanent"}`: bans an address (an IPv6 address's /64)
/// or a range, or replaces the ban it has (not a new offense).
pub(super) async fn ban(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let actor = peer_of(&request);
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let wanted: BanRequest = match serde_json::from_slice(&body) {
        Ok(wanted) => wanted,
        Err(_) => {
            return respond::error(StatusCode::BAD_REQUEST, "client and duration are required");
        }
    };
    if wanted.client.trim().is_empty() || (wanted.duration.trim().is_empty() && !wanted.permanent) {
        return respond::error(StatusCode::BAD_REQUEST, "client and duration are required");
    }
    if !portal.app.abuse.enabled() {
        return respond::error(StatusCode::CONFLICT, &BanError::Disabled.to_string());
    }
    let target = match BanTarget::parse(wanted.client.trim()) {
        Ok(target) => target,
        Err(e) => return respond::error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let length = match BanLength::from_request(&wanted.duration, wanted.permanent) {
        Ok(length) => length,
        Err(problem) => return respond::error(StatusCode::BAD_REQUEST, problem),
    };
    match portal.app.abuse.ban(target, length) {
        Ok(outcome) => {
            // The window is open by now (the registry's hook runs within the ban), so it takes
            // the name at once; naming it only after success keeps a refused ban from leaving
            // a name behind for a later ban of the same scope.
            portal
                .app
                .history
                .note_source(target.scope(), format!("banned in the portal by {actor}"));
            tracing::info!(
                "portal: {actor} banned {} ({})",
                outcome.client,
                if outcome.permanent {
                    "permanent".to_owned()
                } else {
                    wanted.duration.trim().to_owned()
                }
            );
            saved_or_failed(&portal, respond::json(StatusCode::OK, &outcome))
        }
        Err(e @ (BanError::BadTarget | BanError::TooBroad)) => {
            respond::error(StatusCode::BAD_REQUEST, &e.to_string())
        }
        Err(e) => respond::error(StatusCode::CONFLICT, &e.to_string()),
    }
}

#[derive(Deserialize)]
pub(super) struct UnbanQuery {
    #[serde(default)]
    client: String,
}

/// `DELETE /api/bans?client=`: lifts a ban and forgets the client's offenses.
pub(super) async fn unban(
    State(portal): State<Arc<Portal>>,
    Query(query): Query<UnbanQuery>,
    request: Request,
) -> Response<Body> {
    if !portal.app.abuse.enabled() {
        return respond::error(StatusCode::CONFLICT, &BanError::Disabled.to_string());
    }
    let target = match BanTarget::parse(query.client.trim()) {
        Ok(target) => target,
        Err(e) => return respond::error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let shown = target.to_string();
    if !portal.app.abuse.unban_target(target) {
        return respond::error(StatusCode::NOT_FOUND, "that client is not tracked");
    }
    let actor = peer_of(&request);
    portal
        .app
        .history
        .note_lift(target.scope(), &format!("the portal ({actor})"));
    tracing::info!("portal: {actor} lifted the ban on {shown}");
    saved_or_failed(
        &portal,
        respond::json(StatusCode::OK, &json!({ "unbanned": shown })),
    )
}
