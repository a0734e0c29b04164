//! The Ban log tab: every ban window the request history keeps, newest first, with what
//! started it and what the banned addresses asked for while it lasted; and one window in full
//! (also shown in a client's detail). Also the history's JSON answer for one window.

use std::sync::Arc;

use askama::Template;
use axum::body::Body;
use axum::extract::{Query, State};
use http::{Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::fragments::{
    AddressCell, Fragment, TableQuery, address_cells, now_ms, status_class, wall_ms,
};
use super::respond::Refusal;
use super::{Portal, respond};
use crate::history::{BanDetail, BanQuery, BanRow};

#[derive(Debug, Default, Deserialize)]
pub(super) struct BanParams {
    #[serde(default)]
    id: Option<String>,
}

/// The window asked for, or why not (400/404).
fn ban_detail(portal: &Portal, asked: Option<&str>) -> Result<BanDetail, Refusal> {
    let asked = asked.map(str::trim).unwrap_or("");
    if asked.is_empty() {
        return Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            message: "id is required",
        });
    }
    let id: u64 = asked.parse().map_err(|_| Refusal {
        status: StatusCode::BAD_REQUEST,
        message: "id must be the number of a ban in the log",
    })?;
    portal.app.history.ban(id).ok_or(Refusal {
        status: StatusCode::NOT_FOUND,
        message: "that ban is no longer in the history",
    })
}

/// `GET /api/history/ban?id=`: one ban window in full, `{"ban": …}`.
pub(super) async fn ban(
    State(portal): State<Arc<Portal>>,
    Query(params): Query<BanParams>,
) -> Response<Body> {
    match ban_detail(&portal, params.id.as_deref()) {
        Ok(detail) => respond::json(StatusCode::OK, &detail),
        Err(refusal) => refusal.answer(),
    }
}

/// A ban window with its times in unix milliseconds, as the panel and the table show it.
pub(super) struct BanPanel {
    pub ban: BanRow,
    pub began_ms: Option<i64>,
    /// When a ban in force ends; `None` when permanent or already over.
    pub until_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub trigger_ms: i64,
    pub first_hit_ms: Option<i64>,
    pub last_hit_ms: Option<i64>,
}

impl BanPanel {
    pub(super) fn of(ban: BanRow) -> BanPanel {
        BanPanel {
            began_ms: ban.began.map(wall_ms),
            until_ms: ban.until.filter(|_| ban.ended.is_none()).map(wall_ms),
            ended_ms: ban.ended.map(wall_ms),
            trigger_ms: ban
                .trigger
                .as_ref()
                .map_or(0, |trigger| wall_ms(trigger.at)),
            first_hit_ms: ban.first_hit.map(wall_ms),
            last_hit_ms: ban.last_hit.map(wall_ms),
            ban,
        }
    }

    pub(super) fn trigger_status_class(&self) -> &'static str {
        self.ban
            .trigger
            .as_ref()
            .map_or("text-bg-secondary", |trigger| status_class(trigger.status))
    }

    /// A ban with a known start, no operator behind it and no single request found to have
    /// started it was earned by strikes adding up over several requests.
    pub(super) fn strikes_added_up(&self) -> bool {
        self.ban.trigger.is_none() && self.ban.source.is_empty() && self.ban.began.is_some()
    }
}

/// One row of the ban log.
struct BanLogRow {
    ban: BanRow,
    cell: Option<AddressCell>,
    began_ms: Option<i64>,
    until_ms: Option<i64>,
    ended_ms: Option<i64>,
}

impl BanLogRow {
    fn tint(&self) -> &'static str {
        match (self.ban.active, self.ban.permanent) {
            (true, true) => "table-danger",
            (true, false) => "table-warning",
            (false, _) => "",
        }
    }

    /// Distinct paths beyond the ones the row names.
    fn more_paths(&self) -> usize {
        self.ban.distinct_paths.saturating_sub(self.ban.paths.len())
    }
}

#[derive(Template)]
#[template(path = "portal/rows_banlog.html")]
struct BanLogRows<'a> {
    rows: &'a [BanLogRow],
}

#[derive(Template)]
#[template(path = "portal/detail_ban.html")]
struct BanDetailPanel {
    panel: BanPanel,
}

/// `GET /api/frag/banlog?q=&page=&size=&keys=`: one page of the ban log.
pub(super) async fn fragment(
    State(portal): State<Arc<Portal>>,
    Query(query): Query<TableQuery>,
) -> Response<Body> {
    let asked = query.asked_keys();
    let asked_ids: Vec<u64> = asked
        .iter()
        .flatten()
        .map(|key| key.parse().unwrap_or(0))
        .collect();
    let (page, places) = portal.app.history.bans_placing(
        &BanQuery {
            q: query.filter(),
            page: query.page_asked(),
            size: query.size(),
        },
        &asked_ids,
    );
    let paging = query.paging(page.total);
    let targets: Vec<&str> = page.bans.iter().map(|ban| ban.target.as_str()).collect();
    let cells = address_cells(&targets, &portal.ip_details).await;
    let rows: Vec<BanLogRow> = page
        .bans
        .into_iter()
        .zip(cells)
        .map(|(ban, cell)| BanLogRow {
            cell,
            began_ms: ban.began.map(wall_ms),
            until_ms: ban.until.filter(|_| ban.ended.is_none()).map(wall_ms),
            ended_ms: ban.ended.map(wall_ms),
            ban,
        })
        .collect();
    let html = match (BanLogRows { rows: &rows }).render() {
        Ok(html) => html,
        Err(e) => {
            tracing::error!("portal: cannot render the ban log: {e}");
            return respond::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot render the ban log",
            );
        }
    };
    respond::json(
        StatusCode::OK,
        &Fragment {
            html,
            now: now_ms(),
            total: page.total,
            page: paging.page,
            pages: paging.pages,
            size: paging.size,
            r#where: asked
                .map(|asked| TableQuery::whereabouts_placed(&asked, &places, paging.size)),
            summary: format!("{} bans", paging.shown(page.total)),
            flags: Some(json!({ "abuse_enabled": portal.app.abuse.enabled() })),
        },
    )
}

/// `GET /api/frag/ban?id=`: one ban window's panel.
pub(super) async fn detail(
    State(portal): State<Arc<Portal>>,
    Query(params): Query<BanParams>,
) -> Response<Body> {
    let detail = match ban_detail(&portal, params.id.as_deref()) {
        Ok(detail) => detail,
        Err(refusal) => return refusal.answer(),
    };
    let html = match (BanDetailPanel {
        panel: BanPanel::of(detail.ban),
    })
    .render()
    {
        Ok(html) => html,
        Err(e) => {
            tracing::error!("portal: cannot render a ban: {e}");
            return respond::error(StatusCode::INTERNAL_SERVER_ERROR, "cannot render the ban");
        }
    };
    respond::json(
        StatusCode::OK,
        &Fragment {
            html,
            now: now_ms(),
            total: 1,
            page: 1,
            pages: 1,
            size: 1,
            r#where: None,
            summary: String::new(),
            flags: None,
        },
    )
}
