//! The Queue tab: the front of the line (the first [`LISTED`] visitors) with their addresses'
//! details, and moving one to the front. Tickets never leave Concert: a visitor is named by a
//! short hash of its ticket, and only listed visitors can be acted on.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use http::{Response, StatusCode};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::fragments::{AddressCell, Fragment, TableQuery, address_cells, now_ms};
use super::{Portal, peer_of, read_body, respond};
use crate::abuse::{BanCause, BanError, BanTarget};
use crate::admission::priority::Rank;
use crate::room::{LineEntry, RoomPromoteError};

/// Visitors listed from the front of the line.
pub(crate) const LISTED: usize = 500;
/// A visitor whose page has not asked for its place for this long shows as idle.
const IDLE_AFTER_SECONDS: u64 = 15;

/// The id the portal shows for a ticket: the first 8 bytes of its SHA-256, in hex.
fn visitor_id(ticket: &str) -> String {
    let digest = Sha256::digest(ticket.as_bytes());
    hex::encode(&digest[..8])
}

/// One listed visitor, as `GET /api/queue` reports it.
#[derive(Debug, Serialize)]
struct Occupant {
    id: String,
    client: String,
    /// The browser of its first request; empty when none was sent or not noted.
    user_agent: String,
    /// The path (and query) of its first request; empty when not noted.
    path: String,
    /// Whether its first request was noted (not for visitors restored from a snapshot).
    #[serde(skip)]
    noted: bool,
    /// Unix milliseconds.
    joined: u64,
    last_seen: u64,
    idle_seconds: u64,
    position: i64,
    ready: bool,
    has_pass: bool,
    promoted: bool,
    rank: &'static str,
}

fn ms_ago(now_ms: u64, now: Instant, then: Instant) -> u64 {
    let ago = u64::try_from(now.saturating_duration_since(then).as_millis()).unwrap_or(u64::MAX);
    now_ms.saturating_sub(ago)
}

fn occupants(portal: &Portal) -> Vec<(Occupant, LineEntry)> {
    let now_ms = now_ms();
    let now = Instant::now();
    let room = &portal.app.room;
    let front = room.line_front(LISTED);
    let notes = room.notes_of(&front);
    front
        .into_iter()
        .zip(notes)
        .map(|(entry, note)| {
            let info = &entry.info;
            let noted = note.is_some();
            let (path, user_agent) = note.map_or_else(Default::default, |note| {
                (note.path.into_string(), note.user_agent.into_string())
            });
            let occupant = Occupant {
                id: visitor_id(&info.token_hex()),
                client: info.client.map(|ip| ip.to_string()).unwrap_or_default(),
                user_agent,
                path,
                noted,
                joined: ms_ago(now_ms, now, info.joined),
                last_seen: ms_ago(now_ms, now, info.last_seen),
                idle_seconds: now.saturating_duration_since(info.last_seen).as_secs(),
                position: entry.position,
                ready: entry.ready,
                has_pass: info.has_pass,
                promoted: info.promoted,
                rank: Rank::from_u8(info.rank).map_or("guest", Rank::name),
            };
            (occupant, entry)
        })
        .collect()
}

/// Whether a visitor matches the filter (already lowercase) by address, path or browser.
fn matches_filter(occupant: &Occupant, filter: &str) -> bool {
    [&occupant.client, &occupant.path, &occupant.user_agent]
        .iter()
        .any(|text| text.to_lowercase().contains(filter))
}

/// `GET /api/queue`: the listed front of the line, and how many removed visitors are still
/// remembered (to be told so when they come back).
pub(super) async fn list(State(portal): State<Arc<Portal>>) -> Response<Body> {
    let listed: Vec<Occupant> = occupants(&portal)
        .into_iter()
        .map(|(occupant, _)| occupant)
        .collect();
    respond::json(
        StatusCode::OK,
        &json!({
            "listed": listed.len(),
            "occupants": listed,
            "limit": LISTED,
            "kicked": portal.app.room.removed_remembered(),
            "live_queue_depth": portal.app.room.stats().live_queue_depth,
        }),
    )
}

struct QueueRow {
    occupant: Occupant,
    cell: Option<AddressCell>,
    idle: bool,
}

#[derive(Template)]
#[template(path = "portal/rows_queue.html")]
struct QueueRows<'a> {
    rows: &'a [QueueRow],
    abuse_enabled: bool,
}

/// `GET /api/frag/queue`: one page of the listed line, rendered.
pub(super) async fn fragment(
    State(portal): State<Arc<Portal>>,
    Query(query): Query<TableQuery>,
) -> Response<Body> {
    let filter = query.filter();
    let mut listed: Vec<Occupant> = occupants(&portal)
        .into_iter()
        .map(|(occupant, _)| occupant)
        .collect();
    if !filter.is_empty() {
        listed.retain(|occupant| matches_filter(occupant, &filter));
    }
    let total = listed.len();
    let paging = query.paging(total);
    let ids: Vec<String> = listed.iter().map(|occupant| occupant.id.clone()).collect();
    let shown: Vec<Occupant> = listed
        .into_iter()
        .skip(paging.start)
        .take(paging.end - paging.start)
        .collect();
    let clients: Vec<&str> = shown
        .iter()
        .map(|occupant| occupant.client.as_str())
        .collect();
    let cells = address_cells(&clients, &portal.ip_details).await;
    let rows: Vec<QueueRow> = shown
        .into_iter()
        .zip(cells)
        .map(|(occupant, cell)| QueueRow {
            cell,
            idle: occupant.idle_seconds > IDLE_AFTER_SECONDS,
            occupant,
        })
        .collect();
    let html = match (QueueRows {
        rows: &rows,
        abuse_enabled: portal.app.abuse.enabled(),
    })
    .render()
    {
        Ok(html) => html,
        Err(e) => {
            tracing::error!("portal: cannot render the line: {e}");
            return respond::error(StatusCode::INTERNAL_SERVER_ERROR, "cannot render the line");
        }
    };
    let live = portal.app.room.stats().live_queue_depth;
    let removed = portal.app.room.removed_remembered();
    respond::json(
        StatusCode::OK,
        &Fragment {
            html,
            now: now_ms(),
            total,
            page: paging.page,
            pages: paging.pages,
            size: paging.size,
            r#where: query.whereabouts(ids.iter().map(String::as_str), paging.size),
            summary: format!(
                "{} listed · {live} waiting · {removed} removed",
                paging.shown(total)
            ),
            flags: None,
        },
    )
}

#[derive(Deserialize)]
struct PromoteRequest {
    #[serde(default)]
    id: String,
}

/// `POST /api/queue/promote {"id"}`: moves a listed visitor to the front of the line, free.
pub(super) async fn promote(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let actor = peer_of(&request);
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let id = serde_json::from_slice::<PromoteRequest>(&body)
        .map(|wanted| wanted.id.trim().to_owned())
        .unwrap_or_default();
    if id.is_empty() {
        return respond::error(StatusCode::BAD_REQUEST, "id is required");
    }
    let Some(ticket) = occupants(&portal)
        .into_iter()
        .find(|(occupant, _)| occupant.id == id)
        .map(|(_, entry)| entry.info.token_hex())
    else {
        return respond::error(StatusCode::NOT_FOUND, "that visitor is no longer in line");
    };
    match portal.app.room.promote(&ticket, 1) {
        Ok(_) => {
            tracing::info!("portal: {actor} moved visitor {id} to the front of the line");
            respond::json(StatusCode::OK, &json!({ "promoted": id }))
        }
        Err(RoomPromoteError::NotFound) => {
            respond::error(StatusCode::NOT_FOUND, "that visitor is no longer in line")
        }
        Err(RoomPromoteError::Refused(e)) => respond::error(
            StatusCode::CONFLICT,
            &format!("room refused the promotion: {e}"),
        ),
    }
}

#[derive(Deserialize)]
struct KickRequest {
    #[serde(default)]
    id: String,
    #[serde(default)]
    ban: bool,
}

/// How long a removed visitor's ticket is remembered past its own lifetime: its page may poll
/// once more after the ticket would have expired.
const REMEMBER_PAST_TICKET: Duration = Duration::from_secs(60);

/// `POST /api/queue/kick {"id","ban"}`: removes a listed visitor from the line. Without `ban`
/// its next request is told it was removed (and may join again at the back); with `ban` its
/// address gets the next ban of its offense history, saved at once, which also clears every
/// other place that address holds.
pub(super) async fn kick(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let actor = peer_of(&request);
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let wanted = serde_json::from_slice::<KickRequest>(&body).unwrap_or(KickRequest {
        id: String::new(),
        ban: false,
    });
    let id = wanted.id.trim().to_owned();
    if id.is_empty() {
        return respond::error(StatusCode::BAD_REQUEST, "id is required");
    }
    let Some(entry) = occupants(&portal)
        .into_iter()
        .find(|(occupant, _)| occupant.id == id)
        .map(|(_, entry)| entry)
    else {
        return respond::error(StatusCode::NOT_FOUND, "that visitor is no longer in line");
    };
    let ticket = entry.info.token_hex();
    let app = &portal.app;
    if !wanted.ban {
        let remember = app.room.settings().token_ttl + REMEMBER_PAST_TICKET;
        if !app.room.remove_and_remember(&ticket, remember) {
            return respond::error(StatusCode::NOT_FOUND, "that visitor is no longer in line");
        }
        tracing::info!("portal: {actor} removed visitor {id} from the line");
        return respond::json(
            StatusCode::OK,
            &json!({ "kicked": id, "banned": false, "ban_seconds": 0 }),
        );
    }
    if !app.abuse.enabled() {
        return respond::error(StatusCode::CONFLICT, &BanError::Disabled.to_string());
    }
    let Some(client) = entry.info.client else {
        return respond::error(
            StatusCode::CONFLICT,
            "that visitor has no known address to ban",
        );
    };
    let banned_before = own_ban_scope(app, client);
    let Some(length) = app.abuse.ban_escalating(client, BanCause::Operator) else {
        return respond::error(StatusCode::CONFLICT, &BanError::Exempt.to_string());
    };
    // Only a ban this removal began is named after it; one already in force keeps its cause.
    if banned_before.is_none()
        && let Some(scope) = own_ban_scope(app, client)
    {
        app.history.note_source(
            scope,
            format!("removed from the line and banned in the portal by {actor}"),
        );
    }
    // The ban clears the address's places in line; this one goes even if it was not listed
    // under that address any more.
    app.room.remove_token(&ticket);
    tracing::info!("portal: {actor} removed visitor {id} from the line and banned {client}");
    let answer = respond::json(
        StatusCode::OK,
        &json!({
            "kicked": id,
            "banned": true,
            "ban_seconds": length.retry_after_secs().unwrap_or(0),
        }),
    );
    match app.flush_bans() {
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

/// The scope of the ban `client` itself holds (its own key, or its IPv6 /48's shared entry,
/// which the registry uses once its table is crowded), ranges aside.
fn own_ban_scope(app: &crate::app::App, client: IpAddr) -> Option<IpNet> {
    let own = BanTarget::Single(client).scope();
    let shared = match client.to_canonical() {
        IpAddr::V6(v6) => IpNet::new(IpAddr::V6(v6), 48).ok().map(|net| net.trunc()),
        IpAddr::V4(_) => None,
    };
    std::iter::once(own)
        .chain(shared)
        .find(|scope| app.abuse.ban_until_of(*scope).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_visitor_id_is_a_short_hash_of_the_ticket() {
        let id = visitor_id("00112233445566778899aabbccddeeff");
        assert_eq!(id.len(), 16);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(id, visitor_id("00112233445566778899aabbccddeefe"));
        assert!(!"00112233445566778899aabbccddeeff".contains(&id));
    }
}
