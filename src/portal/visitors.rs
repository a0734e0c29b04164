//! The Visitors tab: every client the request history remembers, banned ones first, with its
//! latest request; and one client's detail (its address, browsers, the bans that covered it
//! and its requests, newest first). Also the history's JSON answers for clients.

use std::net::IpAddr;
use std::sync::Arc;

use askama::Template;
use axum::body::Body;
use axum::extract::{Query, State};
use http::{Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::banlog::BanPanel;
use super::fragments::{
    AddressCell, Fragment, TableQuery, address_cells, latency_text, now_ms, status_class, wall_ms,
};
use super::respond::Refusal;
use super::{Portal, respond};
use crate::history::{ClientDetail, ClientQuery, ClientRow, EntryRow};

/// Requests shown per page of a client's detail.
const ENTRIES_PER_PAGE: usize = 25;
/// Ban windows shown in a client's detail; older ones are in the Ban log.
const BANS_IN_DETAIL: usize = 10;

const NOT_AN_ADDRESS: &str = "client must be an IP address";
const NOT_RECORDED: &str = "no requests recorded from that address";

#[derive(Debug, Default, Deserialize)]
pub(super) struct OverviewQuery {
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    flagged: Option<String>,
}

/// `GET /api/history?q=&flagged=1`: the first clients in the table's order, the latest ban
/// windows and the history's limits.
pub(super) async fn overview(
    State(portal): State<Arc<Portal>>,
    Query(query): Query<OverviewQuery>,
) -> Response<Body> {
    let flagged = matches!(query.flagged.as_deref().map(str::trim), Some("1" | "true"));
    let view = portal
        .app
        .history
        .overview(query.q.as_deref().unwrap_or(""), flagged);
    respond::json(StatusCode::OK, &view)
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ClientParams {
    #[serde(default)]
    client: Option<String>,
    #[serde(default)]
    page: Option<String>,
}

/// The client asked for, or why not (400/404).
fn client_detail(portal: &Portal, asked: Option<&str>) -> Result<ClientDetail, Refusal> {
    let ip: IpAddr = asked
        .map(str::trim)
        .and_then(|text| text.parse().ok())
        .ok_or(Refusal {
            status: StatusCode::BAD_REQUEST,
            message: NOT_AN_ADDRESS,
        })?;
    portal.app.history.client(ip).ok_or(Refusal {
        status: StatusCode::NOT_FOUND,
        message: NOT_RECORDED,
    })
}

/// `GET /api/history/client?client=`: one client's requests (newest first), browsers and bans.
pub(super) async fn client(
    State(portal): State<Arc<Portal>>,
    Query(params): Query<ClientParams>,
) -> Response<Body> {
    match client_detail(&portal, params.client.as_deref()) {
        Ok(detail) => respond::json(StatusCode::OK, &detail),
        Err(refusal) => refusal.answer(),
    }
}

struct VisitorRow {
    client: ClientRow,
    cell: Option<AddressCell>,
    tint: &'static str,
    /// Blocked or started a ban before, whether or not banned now.
    flagged: bool,
    last_seen_ms: i64,
    /// When the ban in force ends, to the second (so the row's markup stays the same from one
    /// refresh to the next); 0 when none is or it is permanent.
    until_ms: i64,
    status_class: &'static str,
}

impl VisitorRow {
    fn of(client: ClientRow, cell: Option<AddressCell>) -> VisitorRow {
        let tint = if client.banned_now && client.ban_permanent {
            "table-danger"
        } else if client.banned_now {
            "table-warning"
        } else if (200..300).contains(&client.last_status) {
            "table-success"
        } else {
            "table-info"
        };
        VisitorRow {
            cell,
            tint,
            flagged: client.blocked > 0 || client.bans_triggered > 0,
            last_seen_ms: wall_ms(client.last_seen),
            until_ms: client
                .ban_until_ms
                .map_or(0, |ms| (ms + 500).div_euclid(1000) * 1000),
            status_class: status_class(client.last_status),
            client,
        }
    }
}

#[derive(Template)]
#[template(path = "portal/rows_visitors.html")]
struct VisitorRows<'a> {
    rows: &'a [VisitorRow],
    abuse_enabled: bool,
}

/// `GET /api/frag/visitors?q=&flagged=1&page=&size=&keys=`: one page of the clients table.
pub(super) async fn fragment(
    State(portal): State<Arc<Portal>>,
    Query(query): Query<TableQuery>,
) -> Response<Body> {
    let history = &portal.app.history;
    let asked = query.asked_keys();
    let asked_ips: Vec<IpAddr> = asked
        .iter()
        .flatten()
        .filter_map(|key| key.parse().ok())
        .collect();
    let (page, places) = history.clients_placing(
        &ClientQuery {
            q: query.filter(),
            flagged: query.only_flagged(),
            page: query.page_asked(),
            size: query.size(),
        },
        &asked_ips,
    );
    let paging = query.paging(page.total);
    let addresses: Vec<&str> = page
        .clients
        .iter()
        .map(|client| client.client.as_str())
        .collect();
    let cells = address_cells(&addresses, &portal.ip_details).await;
    let rows: Vec<VisitorRow> = page
        .clients
        .into_iter()
        .zip(cells)
        .map(|(client, cell)| VisitorRow::of(client, cell))
        .collect();
    let abuse_enabled = portal.app.abuse.enabled();
    let html = match (VisitorRows {
        rows: &rows,
        abuse_enabled,
    })
    .render()
    {
        Ok(html) => html,
        Err(e) => {
            tracing::error!("portal: cannot render the visitors: {e}");
            return respond::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot render the visitors",
            );
        }
    };
    let mut summary = format!(
        "{} matching · {} addresses recorded",
        paging.shown(page.total),
        page.tracked
    );
    if page.evicted > 0 {
        summary.push_str(&format!(" · {} forgotten to make room", page.evicted));
    }
    // Unparsable keys are simply not placed (page 0), like forgotten ones.
    let r#where = asked.map(|asked| {
        let mut places_of_asked = Vec::with_capacity(asked.len());
        let mut placed = places.iter();
        for key in &asked {
            places_of_asked.push(match key.parse::<IpAddr>() {
                Ok(_) => placed.next().copied().flatten(),
                Err(_) => None,
            });
        }
        TableQuery::whereabouts_placed(&asked, &places_of_asked, paging.size)
    });
    respond::json(
        StatusCode::OK,
        &Fragment {
            html,
            now: now_ms(),
            total: page.total,
            page: paging.page,
            pages: paging.pages,
            size: paging.size,
            r#where,
            summary,
            flags: Some(json!({
                "abuse_enabled": abuse_enabled,
                "persisted": history.persisted(),
            })),
        },
    )
}

/// One request in a client's detail.
struct EntryLine {
    entry: EntryRow,
    at_ms: i64,
    status_class: &'static str,
    latency: String,
}

#[derive(Template)]
#[template(path = "portal/detail_visitor.html")]
struct VisitorDetail {
    client: ClientRow,
    cell: Option<AddressCell>,
    first_seen_ms: i64,
    last_seen_ms: i64,
    user_agents: Vec<String>,
    bans: Vec<BanPanel>,
    more_bans: usize,
    entries: Vec<EntryLine>,
    shown: String,
    page: usize,
    pages: usize,
}

/// `GET /api/frag/visitor?client=&page=`: one client's detail panel, its requests paged
/// newest first.
pub(super) async fn detail(
    State(portal): State<Arc<Portal>>,
    Query(params): Query<ClientParams>,
) -> Response<Body> {
    let detail = match client_detail(&portal, params.client.as_deref()) {
        Ok(detail) => detail,
        Err(refusal) => return refusal.answer(),
    };
    let paging = TableQuery {
        page: params.page,
        size: Some(ENTRIES_PER_PAGE.to_string()),
        ..TableQuery::default()
    }
    .paging(detail.entries.len());
    let total = detail.entries.len();
    let entries: Vec<EntryLine> = detail
        .entries
        .into_iter()
        .skip(paging.start)
        .take(paging.end - paging.start)
        .map(|entry| EntryLine {
            at_ms: wall_ms(entry.at),
            status_class: status_class(entry.status),
            latency: latency_text(entry.latency_ms),
            entry,
        })
        .collect();
    let more_bans = detail.bans.len().saturating_sub(BANS_IN_DETAIL);
    let cell = address_cells(&[detail.client.client.as_str()], &portal.ip_details)
        .await
        .pop()
        .flatten();
    let page = VisitorDetail {
        cell,
        first_seen_ms: wall_ms(detail.client.first_seen),
        last_seen_ms: wall_ms(detail.client.last_seen),
        client: detail.client,
        user_agents: detail.user_agents,
        bans: detail
            .bans
            .into_iter()
            .take(BANS_IN_DETAIL)
            .map(BanPanel::of)
            .collect(),
        more_bans,
        entries,
        shown: paging.shown(total),
        page: paging.page,
        pages: paging.pages,
    };
    let html = match page.render() {
        Ok(html) => html,
        Err(e) => {
            tracing::error!("portal: cannot render a visitor: {e}");
            return respond::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot render the visitor",
            );
        }
    };
    respond::json(
        StatusCode::OK,
        &Fragment {
            html,
            now: now_ms(),
            total,
            page: paging.page,
            pages: paging.pages,
            size: paging.size,
            r#where: None,
            summary: paging.shown(total),
            flags: None,
        },
    )
}
