//! The portal's two pages, rendered from the templates in `templates/portal/`: the sign-in
//! page and the dashboard, whose tabs fetch their contents from the API.

use std::sync::Arc;

use askama::Template;
use axum::body::Body;
use axum::extract::{Request, State};
use http::{Response, StatusCode};

use super::{Portal, respond};
use crate::admission::cookies::{PORTAL_SIGN_IN, read_cookie};
use crate::history::{Limits, MAX_WINDOWS};
use crate::lifecycle::VERSION;

#[derive(Template)]
#[template(path = "portal/signin.html")]
struct SignInPage<'a> {
    version: &'a str,
    problem: Option<&'a str>,
    /// The form's hidden token, tied to the form cookie sent with the page.
    token: &'a str,
}

#[derive(Template)]
#[template(path = "portal/dashboard.html")]
struct Dashboard<'a> {
    version: &'a str,
    csrf: &'a str,
    upstream: &'a str,
    ip_source: &'a str,
    /// Every tab with its rendered panel, in the order of their pills.
    panes: &'a [Pane],
}

/// What the tabs' panels are rendered from: one set of figures they all may use.
pub(super) struct Panels<'a> {
    lists: &'a [StatList],
    /// The request history's bounds, for the notes under the Visitors and Ban log tables.
    history_limits: Limits,
    /// Ban windows the history keeps at most.
    max_windows: usize,
    cards: &'a [MonitorCard],
    /// Whether the Monitor shows the Cluster card (`-cluster` is set).
    cluster: bool,
}

/// A tab's panel, rendered: the contents of its `<section>`.
struct Pane {
    tab: &'static Tab,
    html: String,
}

/// One tab of the dashboard: its pill, its panel and the script that fills it. The dashboard
/// makes a pill and a panel for every entry of [`TABS`]; the data comes from the tab's own
/// module under `src/portal/`.
pub(super) struct Tab {
    /// The `data-tab` name, also kept in the URL's fragment.
    pub id: &'static str,
    pub label: &'static str,
    /// An Overview figure shown as a count on the pill.
    pub badge: Option<&'static str>,
    /// Its script under `/assets/js/`, loaded after the shared ones; none for the Overview.
    pub script: Option<&'static str>,
    /// Renders its panel from its template (see [`panel!`]).
    panel: fn(&Panels<'_>) -> askama::Result<String>,
}

/// A panel renderer for [`Tab::panel`]: the template at `$path` with the fields of [`Panels`].
macro_rules! panel {
    ($path:literal) => {{
        #[derive(Template)]
        #[template(path = $path)]
        struct Panel<'a, 'b> {
            panels: &'a Panels<'b>,
        }

        // The template names the fields of `Panels` directly.
        impl<'b> std::ops::Deref for Panel<'_, 'b> {
            type Target = Panels<'b>;
            fn deref(&self) -> &Panels<'b> {
                self.panels
            }
        }

        fn render(panels: &Panels<'_>) -> askama::Result<String> {
            Panel { panels }.render()
        }
        render
    }};
}

/// The tabs in the order of their pills. A new tab is one entry here, its
/// `templates/portal/tab_<id>.html`, its script (also listed in the asset table) and its
/// routes.
pub(super) static TABS: &[Tab] = &[
    Tab {
        id: "overview",
        label: "Overview",
        badge: None,
        script: None,
        panel: panel!("portal/tab_overview.html"),
    },
    Tab {
        id: "queue",
        label: "Queue",
        badge: Some("live_queue_depth"),
        script: Some("portal-queue.js"),
        panel: panel!("portal/tab_queue.html"),
    },
    Tab {
        id: "bans",
        label: "Bans",
        badge: Some("active_bans"),
        script: Some("portal-bans.js"),
        panel: panel!("portal/tab_bans.html"),
    },
    Tab {
        id: "visitors",
        label: "Visitors",
        badge: Some("history_clients"),
        script: Some("portal-visitors.js"),
        panel: panel!("portal/tab_visitors.html"),
    },
    Tab {
        id: "banlog",
        label: "Ban log",
        badge: None,
        script: Some("portal-banlog.js"),
        panel: panel!("portal/tab_banlog.html"),
    },
    Tab {
        id: "fastlane",
        label: "Fast lane",
        badge: None,
        script: Some("portal-fastlane.js"),
        panel: panel!("portal/tab_fastlane.html"),
    },
    Tab {
        id: "monitor",
        label: "Monitor",
        badge: None,
        script: Some("portal-monitor.js"),
        panel: panel!("portal/tab_monitor.html"),
    },
    Tab {
        id: "settings",
        label: "Settings",
        badge: None,
        script: Some("portal-settings.js"),
        panel: panel!("portal/tab_settings.html"),
    },
];

/// One of the Monitor's stat cards: the key its figure and sparkline are bound by, its label,
/// and the line under the figure until the first answer replaces it.
struct MonitorCard {
    key: &'static str,
    label: &'static str,
    note: &'static str,
}

static MONITOR_CARDS: &[MonitorCard] = &[
    MonitorCard {
        key: "rps",
        label: "Requests/s",
        note: "answered, last 5 s",
    },
    MonitorCard {
        key: "latency",
        label: "Latency p50 / p95",
        note: "last 5 s",
    },
    MonitorCard {
        key: "errors",
        label: "Errors/s",
        note: "5xx answers, last 5 s",
    },
    MonitorCard {
        key: "inflight",
        label: "In flight",
        note: "peak —",
    },
    MonitorCard {
        key: "memory",
        label: "Memory",
        note: "resident",
    },
    MonitorCard {
        key: "cpu",
        label: "CPU",
        note: "100 % is one core",
    },
    MonitorCard {
        key: "threads",
        label: "Threads",
        note: "of the process",
    },
    MonitorCard {
        key: "queue",
        label: "Queue depth",
        note: "waiting in line",
    },
];

/// One of the Overview's lists: a title and the figures it shows (key, label).
struct StatList {
    title: &'static str,
    rows: &'static [(&'static str, &'static str)],
}

static OVERVIEW_LISTS: &[StatList] = &[
    StatList {
        title: "Waiting room",
        rows: &[
            ("queue_depth", "Tickets in line"),
            ("live_queue_depth", "Waiting now"),
            ("utilization", "Utilisation"),
            ("first_poll_grace", "First poll grace"),
            ("queued_total", "Queued"),
            ("admitted_total", "Admitted"),
            ("evicted_total", "Evicted"),
            ("timeouts_total", "Timed out"),
            ("promoted_total", "Moved up"),
            ("removed_total", "Removed"),
            ("kicked_active", "Removed, still told so"),
            ("address_full_total", "Refused: address holds too many"),
            ("notes_tracked", "Visitors with notes"),
            ("notes_dropped", "Notes dropped (store full)"),
            ("history_clients", "Clients in the request history"),
        ],
    },
    StatList {
        title: "Assets and streams",
        rows: &[
            ("asset_users", "Asset users"),
            ("asset_served_total", "Assets served"),
            ("asset_denied_total", "Assets denied"),
            ("asset_user_throttled_total", "Throttled per visitor"),
            ("asset_global_throttled_total", "Throttled overall"),
            ("stream_active", "Streams open"),
            ("stream_cap", "Stream cap"),
            ("stream_served_total", "Streams served"),
            ("stream_denied_total", "Streams denied"),
            ("stream_throttled_total", "Streams throttled"),
        ],
    },
    StatList {
        title: "Abuse registry",
        rows: &[
            ("abuse_enabled", "On"),
            ("abuse_tracked", "Clients tracked"),
            ("abuse_range_bans", "Range bans"),
            ("abuse_strikes_total", "Strikes"),
            ("abuse_bans_total", "Bans issued"),
            ("abuse_rejected_total", "Requests refused"),
            ("abuse_dropped_total", "Clients dropped (table full)"),
        ],
    },
    StatList {
        title: "Priority lane",
        rows: &[
            ("priority_lane_ranks", "Ranks"),
            ("priority_lane_in_flight", "In flight"),
            ("priority_lane_cap", "Cap"),
            ("priority_lane_waiting", "Waiting"),
            ("priority_lane_served_total", "Served"),
            ("priority_lane_full_total", "Full"),
            ("priority_placed_total", "Placed ahead in line"),
        ],
    },
    StatList {
        title: "Grants and forms",
        rows: &[
            ("priority_grants_total", "Grants"),
            ("priority_grants_cleared_total", "Cleared"),
            ("priority_grants_rejected_total", "Rejected"),
            ("priority_forms_total", "Form submissions"),
            ("priority_forms_refused_total", "Forms refused"),
            ("priority_forms_over_budget_total", "Forms over budget"),
        ],
    },
    StatList {
        title: "Page requests by rank",
        rows: &[
            ("priority_requests_staff", "Staff"),
            ("priority_requests_checkout", "Checkout"),
            ("priority_requests_subscriber", "Subscriber"),
            ("priority_requests_customer", "Customer"),
            ("priority_requests_prospect", "Prospect"),
            ("priority_requests_member", "Member"),
            ("priority_requests_guest", "Guest"),
        ],
    },
];

fn rendered(status: StatusCode, page: Result<String, askama::Error>) -> Response<Body> {
    match page {
        Ok(page) => respond::html(status, page),
        Err(e) => {
            tracing::error!("portal: cannot render a page: {e}");
            respond::text(StatusCode::INTERNAL_SERVER_ERROR, "cannot render the page")
        }
    }
}

/// The sign-in page, with what went wrong last time if anything did; see
/// [`Portal::sign_in_page`] for the form cookie its token belongs to.
pub(super) fn sign_in_page(
    status: StatusCode,
    problem: Option<&str>,
    token: &str,
) -> Response<Body> {
    let page = SignInPage {
        version: VERSION,
        problem,
        token,
    };
    rendered(status, page.render())
}

/// `GET /`: the dashboard with a session, the sign-in page without.
pub(super) async fn index(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let Some((_, session)) = portal.session(&request) else {
        let held = read_cookie(request.headers(), PORTAL_SIGN_IN);
        return portal.sign_in_page(held, StatusCode::OK, None);
    };
    let upstream = portal.app.generation().config.upstream_public();
    let ip_source = portal.ip_details.describe();
    let panels = Panels {
        lists: OVERVIEW_LISTS,
        history_limits: Limits::default(),
        max_windows: MAX_WINDOWS,
        cards: MONITOR_CARDS,
        cluster: portal.app.cluster.is_some(),
    };
    let panes: askama::Result<Vec<Pane>> = TABS
        .iter()
        .map(|tab| {
            Ok(Pane {
                tab,
                html: (tab.panel)(&panels)?,
            })
        })
        .collect();
    let page = panes.and_then(|panes| {
        Dashboard {
            version: VERSION,
            csrf: &session.csrf,
            upstream: &upstream,
            ip_source: &ip_source,
            panes: &panes,
        }
        .render()
    });
    rendered(StatusCode::OK, page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::portal::assets::ASSETS;

    #[test]
    fn every_tab_has_a_panel_and_its_script_is_served() {
        let panels = Panels {
            lists: OVERVIEW_LISTS,
            history_limits: Limits::default(),
            max_windows: MAX_WINDOWS,
            cards: MONITOR_CARDS,
            cluster: true,
        };
        for tab in TABS {
            let html = (tab.panel)(&panels).unwrap_or_else(|e| panic!("{}: {e}", tab.id));
            assert!(!html.trim().is_empty(), "{} has an empty panel", tab.id);
            if let Some(script) = tab.script {
                let path = format!("js/{script}");
                assert!(
                    ASSETS.iter().any(|(name, _, _)| *name == path),
                    "{} is not in the asset table",
                    path
                );
            }
        }
    }
}
