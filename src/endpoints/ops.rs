//! Operator endpoints under `/_room/` on the main listener: health, stats, live cap, metrics,
//! and the abuse registry (list, unban, ban).
//!
//! The whole prefix is answered here — for every method and with or without a trailing slash — so
//! nothing under `/_room/` ever leaks to the origin. The metrics are also answered at
//! `-metrics-path` (`/metrics`), which Prometheus scrapes by default, in Prometheus' classic text
//! format or, when the scraper asks for it, OpenMetrics.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Extension;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde_json::json;
use subtle::ConstantTimeEq;
use tower::ServiceExt;

use crate::config::duration::format_go_duration;
use crate::pipeline::{RequestInfo, json_response};
use crate::respond::Rejection;
use crate::{App, Generation};

/// The resolved client of an ops request, for strikes.
#[derive(Clone, Copy)]
struct Client(Option<IpAddr>);

/// Routes one `/_room/…` request.
pub async fn handle(
    app: &Arc<App>,
    _generation: &Generation,
    info: &RequestInfo,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = info.path();
    let path = match path.strip_suffix('/') {
        Some(trimmed) if !trimmed.is_empty() => trimmed,
        _ => path,
    };
    // The query stays: `DELETE /_room/abuse?client=…` needs it.
    let query = info.target.get(info.path_len..).unwrap_or("");
    let (mut parts, body) = req.into_parts();
    parts.uri = match http::Uri::try_from(format!("{path}{query}")) {
        Ok(uri) => uri,
        Err(_) => return Rejection::ReservedNotFound.into_response(false),
    };
    parts.extensions.insert(Client(info.client));
    parts.extensions.insert(Arc::clone(app));
    let request = Request::from_parts(parts, Body::new(body));
    let mut response = match ROUTES.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    // axum names a route's methods on any answer for a method it lacks; a route that does
    // not exist (an admin route without a token) must not.
    if response.status() == StatusCode::NOT_FOUND {
        response.headers_mut().remove(header::ALLOW);
    }
    response
}

/// Built once: building the table took about 5 µs, longer than proxying a page. The handlers
/// find the application in the request's extensions, so one table serves every `App`.
static ROUTES: LazyLock<Router> = LazyLock::new(routes);

fn routes() -> Router {
    Router::new()
        .route(
            "/_room/healthz",
            get(healthz).fallback(not_allowed("GET, HEAD")),
        )
        .route(
            "/_room/stats",
            get(stats).fallback(not_allowed("GET, HEAD")),
        )
        .route(
            "/_room/metrics",
            get(metrics).fallback(not_allowed("GET, HEAD")),
        )
        .route(
            "/_room/cap",
            post(set_cap).fallback(admin_not_allowed("POST")),
        )
        .route(
            "/_room/abuse",
            get(abuse_list)
                .delete(abuse_unban)
                .post(abuse_ban)
                .fallback(admin_not_allowed("GET, HEAD, POST, DELETE")),
        )
        .fallback(|| async { Rejection::ReservedNotFound.into_response(false) })
}

/// The 405 every reserved path gives for a method it does not serve (axum's own has no body
/// and spells `Allow` differently).
fn not_allowed(
    allow: &'static str,
) -> impl Fn() -> std::future::Ready<Response<Body>> + Clone + Send + Sync + 'static {
    move || std::future::ready(Rejection::MethodNotAllowed { allow }.into_response(false))
}

/// [`not_allowed`] for an admin route, which does not exist at all (404 for every method)
/// while no admin token is configured.
fn admin_not_allowed(
    allow: &'static str,
) -> impl Fn(Extension<Arc<App>>) -> std::future::Ready<Response<Body>> + Clone + Send + Sync + 'static
{
    move |Extension(app): Extension<Arc<App>>| {
        let rejection = if app.generation().config.admin_token.is_empty() {
            Rejection::AdminDisabled
        } else {
            Rejection::MethodNotAllowed { allow }
        };
        std::future::ready(rejection.into_response(false))
    }
}

async fn healthz() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "ok")
}

async fn stats(Extension(app): Extension<Arc<App>>) -> Response<Body> {
    json_response(StatusCode::OK, stats_json(&app).to_string())
}

/// Every key of `/_room/stats`. Asset, stream and abuse figures report their configured limits
/// and the counts of what this build served through them. Each numeric key is also a metric
/// ([`render_metrics`]); a new one needs a family there.
pub fn stats_json(app: &App) -> serde_json::Value {
    let generation = app.generation();
    let config = &generation.config;
    let room = app.room.stats();
    let abuse = app.abuse.stats();
    let assets = generation.assets.stats();
    let streams = generation.streams.stats();
    let priority = &app.priority.counters;
    let count = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let mut stats = json!({
        "upstream": config.upstream_shown(),
        "cap": room.cap,
        "occupancy": room.occupancy,
        "queue_depth": room.queue_depth,
        "live_queue_depth": room.live_queue_depth,
        "max_queue_depth": room.max_queue_depth,
        "utilization": room.utilization,
        "token_ttl": format_go_duration(config.effective_token_ttl()),
        "first_poll_grace": format_go_duration(config.first_poll_grace),
        "ready_grace": format_go_duration(config.ready_grace),
        "queued_total": room.queued_total,
        "evicted_total": room.evicted_total,
        "timeouts_total": room.timeouts_total,
        "promoted_total": room.promoted_total,
        "removed_total": room.removed_total,
        "admitted_total": room.admitted_total,
        "lapsed_total": room.lapsed_total,
        "rejoined_total": room.rejoined_total,
        "asset_cap": assets.cap,
        "asset_in_flight": assets.in_flight,
        "asset_users": assets.users,
        "asset_user_cap_h1": config.asset_user_cap_h1,
        "asset_user_cap_h2": config.asset_user_cap_h2,
        "asset_served_total": assets.served_total,
        "asset_denied_total": assets.denied_total,
        "asset_user_throttled_total": assets.user_throttled_total,
        "asset_global_throttled_total": assets.global_throttled_total,
        "stream_cap": streams.cap,
        "stream_active": streams.active,
        "stream_served_total": streams.served_total,
        "stream_denied_total": streams.denied_total,
        "stream_throttled_total": streams.throttled_total,
        "abuse_enabled": abuse.enabled,
        "abuse_tracked": abuse.tracked,
        "abuse_range_bans": abuse.range_bans,
        "abuse_strikes_total": abuse.strikes_total,
        "abuse_bans_total": abuse.bans_total,
        "abuse_rejected_total": abuse.rejected_total,
        "abuse_dropped_total": abuse.dropped_total,
    });
    // A second object: one `json!` with every key exceeds the macro recursion limit.
    let priority_keys = json!({
        "priority_lane_in_flight": generation.lane.in_use(),
        "priority_lane_cap": generation.lane.cap(),
        "priority_lane_waiting": generation.lane.waiting(),
        "priority_lane_ranks": crate::admission::priority::lane_ranks_text(config.priority_lane_rank),
        "priority_lane_served_total": count(&priority.lane_served),
        "priority_lane_full_total": count(&priority.lane_full),
        "priority_grants_total": count(&priority.grants),
        "priority_grants_cleared_total": count(&priority.grants_cleared),
        "priority_grants_rejected_total": count(&priority.grants_rejected),
        "priority_forms_total": count(&priority.forms),
        "priority_forms_refused_total": count(&priority.forms_refused),
    });
    if let (Some(all), serde_json::Value::Object(extra)) = (stats.as_object_mut(), priority_keys) {
        all.extend(extra);
    }
    stats
}

/// Prometheus exposition of the same figures, in the format the scraper asks for.
async fn metrics(Extension(app): Extension<Arc<App>>, headers: HeaderMap) -> Response<Body> {
    metrics_response(&app, MetricsFormat::negotiate(&headers))
}

/// `-metrics-path` on the public listener: the same answer as `/_room/metrics`.
pub fn metrics_endpoint(app: &App, method: &http::Method, headers: &HeaderMap) -> Response<Body> {
    if !matches!(*method, http::Method::GET | http::Method::HEAD) {
        return Rejection::MethodNotAllowed { allow: "GET, HEAD" }.into_response(false);
    }
    metrics_response(app, MetricsFormat::negotiate(headers))
}

/// The two text expositions a scrape can get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    /// Prometheus' classic text format (version 0.0.4), which every scraper and `curl` reads.
    Classic,
    /// OpenMetrics 1.0.0, for scrapers that ask for it by name (Prometheus itself does).
    OpenMetrics,
}

impl MetricsFormat {
    /// OpenMetrics when `Accept` names `application/openmetrics-text` with a weight at least as
    /// high as any `text/plain`; otherwise (no `Accept`, `*/*`, `text/plain`, anything else) the
    /// classic format. A wildcard never selects OpenMetrics: a scraper that has not heard of it
    /// may not parse it.
    pub fn negotiate(headers: &HeaderMap) -> MetricsFormat {
        let mut openmetrics = 0.0_f32;
        let mut classic = 0.0_f32;
        let ranges = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','));
        for range in ranges {
            let mut parts = range.split(';');
            let media_type = parts.next().unwrap_or_default().trim();
            let weight = accept_weight(parts);
            if media_type.eq_ignore_ascii_case("application/openmetrics-text") {
                openmetrics = openmetrics.max(weight);
            } else if media_type.eq_ignore_ascii_case("text/plain") {
                classic = classic.max(weight);
            }
        }
        if openmetrics > 0.0 && openmetrics >= classic {
            MetricsFormat::OpenMetrics
        } else {
            MetricsFormat::Classic
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            MetricsFormat::Classic => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            MetricsFormat::OpenMetrics => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
        }
    }
}

/// The `q` parameter of one `Accept` range: 1 when absent, 0 when unreadable (an unreadable
/// weight is no request for OpenMetrics).
fn accept_weight<'a>(parameters: impl Iterator<Item = &'a str>) -> f32 {
    for parameter in parameters {
        let Some((name, value)) = parameter.split_once('=') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("q") {
            return match value.trim().parse::<f32>() {
                Ok(weight) if (0.0..=1.0).contains(&weight) => weight,
                _ => 0.0,
            };
        }
    }
    1.0
}

fn metrics_response(app: &App, format: MetricsFormat) -> Response<Body> {
    match render_metrics(app, format) {
        Ok(text) => {
            let mut response = Response::new(Body::from(text));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            // The body depends on `Accept`: a cache must not hand one scraper's format to another.
            headers.insert(header::VARY, HeaderValue::from_static("accept"));
            response
        }
        Err(_) => Rejection::Internal.into_response(false),
    }
}

/// Every numeric key of `/_room/stats` (under a `concert_` name; levels and limits as gauges,
/// `…_total` keys as counters), plus what only the metrics carry: requests proxied, malformed
/// requests and open connections per worker. Text and settings (`upstream`, `token_ttl`,
/// `first_poll_grace`, `ready_grace`, `abuse_enabled`, `priority_lane_ranks`) stay in the JSON.
pub fn render_metrics(app: &App, format: MetricsFormat) -> Result<String, std::fmt::Error> {
    let registry = metrics_registry(app);
    let mut text = String::new();
    match format {
        MetricsFormat::Classic => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
        }
        MetricsFormat::OpenMetrics => {
            prometheus_client::encoding::text::encode(&mut text, &registry)?;
        }
    }
    Ok(text)
}

/// One scrape's families, filled from snapshots of the live figures.
struct Families(prometheus_client::registry::Registry);

impl Families {
    fn gauges<const N: usize>(&mut self, gauges: [(&str, &str, f64); N]) {
        use prometheus_client::metrics::gauge::Gauge;
        for (name, help, value) in gauges {
            let metric = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
            metric.set(value);
            self.0.register(name, help, metric);
        }
    }

    /// `name` without `_total`: the encoders add it to the samples (and, in the classic
    /// format, to the family).
    fn counters<const N: usize>(&mut self, counters: [(&str, &str, u64); N]) {
        use prometheus_client::metrics::counter::Counter;
        for (name, help, value) in counters {
            let metric = Counter::<u64>::default();
            metric.inc_by(value);
            self.0.register(name, help, metric);
        }
    }

    fn labelled_gauge(&mut self, name: &str, help: &str, label: &str, values: &[(String, f64)]) {
        use prometheus_client::metrics::family::Family;
        use prometheus_client::metrics::gauge::Gauge;
        let family =
            Family::<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        for (label_value, value) in values {
            family
                .get_or_create(&vec![(label.to_owned(), label_value.clone())])
                .set(*value);
        }
        self.0.register(name, help, family);
    }
}

fn metrics_registry(app: &App) -> prometheus_client::registry::Registry {
    let generation = app.generation();
    let config = &generation.config;
    let room = app.room.stats();
    let abuse = app.abuse.stats();
    let assets = generation.assets.stats();
    let streams = generation.streams.stats();
    let priority = &app.priority.counters;
    let count = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let mut families = Families(prometheus_client::registry::Registry::with_prefix(
        "concert",
    ));

    families.gauges([
        (
            "cap",
            "Concurrent page requests allowed to the origin",
            room.cap as f64,
        ),
        (
            "occupancy",
            "Page requests at the origin now",
            room.occupancy as f64,
        ),
        (
            "queue_depth",
            "Tickets ahead of the serving window, abandoned ones included",
            room.queue_depth as f64,
        ),
        (
            "live_queue_depth",
            "Live tickets, including visitors told to come in who have not come back yet",
            room.live_queue_depth as f64,
        ),
        (
            "max_queue_depth",
            "Longest the line may grow (-max-queue); 0 means no limit",
            room.max_queue_depth as f64,
        ),
        (
            "utilization",
            "Smoothed share of page slots in use",
            room.utilization,
        ),
    ]);
    families.counters([
        (
            "queued",
            "Visitors who were put in the line",
            room.queued_total,
        ),
        (
            "admitted",
            "Page requests admitted to the origin",
            room.admitted_total,
        ),
        (
            "evicted",
            "Tickets dropped for not polling",
            room.evicted_total,
        ),
        (
            "timeouts",
            "Visitors who left while waiting for a slot",
            room.timeouts_total,
        ),
        (
            "lapsed",
            "Visitors whose turn came while they were away; their place went to the next in line",
            room.lapsed_total,
        ),
        (
            "rejoined",
            "Lapsed visitors who came back and were put at the front of the line",
            room.rejoined_total,
        ),
        ("promoted", "Tickets moved forward", room.promoted_total),
        (
            "removed",
            "Tickets removed from the line",
            room.removed_total,
        ),
        (
            "proxied",
            "Requests forwarded to the origin",
            app.counters.proxied_total.load(Ordering::Relaxed),
        ),
        (
            "bad_requests",
            "Malformed requests refused before routing",
            app.counters.bad_requests_total.load(Ordering::Relaxed),
        ),
    ]);

    families.gauges([
        (
            "asset_cap",
            "Asset requests allowed at the origin at once, for all visitors together",
            assets.cap as f64,
        ),
        (
            "asset_in_flight",
            "Asset requests at the origin now",
            assets.in_flight as f64,
        ),
        (
            "asset_users",
            "Passes that hold a per-visitor asset pool",
            assets.users as f64,
        ),
    ]);
    families.labelled_gauge(
        "asset_user_cap",
        "Asset requests one visitor may have at the origin at once, by the HTTP version of the \
         visitor's connection",
        "protocol",
        &[
            ("h1".to_owned(), f64::from(config.asset_user_cap_h1)),
            ("h2".to_owned(), f64::from(config.asset_user_cap_h2)),
        ],
    );
    families.counters([
        (
            "asset_served",
            "Asset requests forwarded to the origin",
            assets.served_total,
        ),
        (
            "asset_denied",
            "Asset requests refused for want of a valid pass",
            assets.denied_total,
        ),
        (
            "asset_user_throttled",
            "Asset requests refused because the visitor's own pool stayed full",
            assets.user_throttled_total,
        ),
        (
            "asset_global_throttled",
            "Asset requests refused because the shared asset pool stayed full",
            assets.global_throttled_total,
        ),
    ]);

    families.gauges([
        (
            "stream_cap",
            "Long-lived streams allowed at once",
            streams.cap as f64,
        ),
        ("stream_active", "Streams open now", streams.active as f64),
    ]);
    families.counters([
        (
            "stream_served",
            "Streams forwarded to the origin",
            streams.served_total,
        ),
        (
            "stream_denied",
            "Stream requests refused for want of a valid pass",
            streams.denied_total,
        ),
        (
            "stream_throttled",
            "Stream requests refused because every stream slot was taken",
            streams.throttled_total,
        ),
    ]);

    families.gauges([
        (
            "abuse_tracked",
            "Clients the abuse registry tracks; 0 while abuse handling is off",
            abuse.tracked as f64,
        ),
        (
            "abuse_range_bans",
            "Address ranges banned now; 0 while abuse handling is off",
            abuse.range_bans as f64,
        ),
    ]);
    families.counters([
        (
            "abuse_strikes",
            "Strikes charged against clients",
            abuse.strikes_total,
        ),
        ("abuse_bans", "Bans started", abuse.bans_total),
        (
            "abuse_rejected",
            "Requests refused because the client is banned",
            abuse.rejected_total,
        ),
        (
            "abuse_dropped",
            "Clients left untracked because the abuse registry was full",
            abuse.dropped_total,
        ),
    ]);

    families.gauges([
        (
            "priority_lane_cap",
            "Requests the priority lane lets past a busy room at once",
            generation.lane.cap() as f64,
        ),
        (
            "priority_lane_in_flight",
            "Requests holding a priority lane slot now",
            generation.lane.in_use() as f64,
        ),
        (
            "priority_lane_waiting",
            "Requests waiting for a priority lane slot",
            generation.lane.waiting() as f64,
        ),
    ]);
    families.counters([
        (
            "priority_lane_served",
            "Requests that went past a busy room through the priority lane",
            count(&priority.lane_served),
        ),
        (
            "priority_lane_full",
            "Requests that found no priority lane slot in time",
            count(&priority.lane_full),
        ),
        (
            "priority_grants",
            "Ranks granted by the origin's Concert-Priority header",
            count(&priority.grants),
        ),
        (
            "priority_grants_cleared",
            "Ranks cleared by the origin's Concert-Priority header",
            count(&priority.grants_cleared),
        ),
        (
            "priority_grants_rejected",
            "Concert-Priority header values that could not be read",
            count(&priority.grants_rejected),
        ),
        (
            "priority_forms",
            "Form submissions that met a busy room",
            count(&priority.forms),
        ),
        (
            "priority_forms_refused",
            "Form submissions refused because the priority lane stayed full",
            count(&priority.forms_refused),
        ),
    ]);

    let connections: Vec<(String, f64)> = app
        .open_connections()
        .into_iter()
        .enumerate()
        .map(|(worker, open)| (worker.to_string(), open as f64))
        .collect();
    families.labelled_gauge(
        "connections",
        "Open client connections, per serving worker",
        "worker",
        &connections,
    );
    families.0
}

/// Bearer-token check for admin routes: no token configured → the route does not exist (404);
/// missing or wrong token → 401 and strikes. Compared in constant time.
fn authorize(app: &App, headers: &HeaderMap, client: Option<IpAddr>) -> Result<(), Rejection> {
    let generation = app.generation();
    let expected = generation.config.admin_token.as_bytes();
    if expected.is_empty() {
        return Err(Rejection::AdminDisabled);
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .unwrap_or("");
    if bool::from(presented.as_bytes().ct_eq(expected)) {
        Ok(())
    } else {
        let rejection = Rejection::Unauthorized;
        app.strike(client, rejection.strike_weight(), "wrong admin token");
        Err(rejection)
    }
}

#[derive(serde::Deserialize)]
struct CapBody {
    cap: Option<i64>,
}

async fn set_cap(
    Extension(app): Extension<Arc<App>>,
    Extension(Client(client)): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    if let Err(rejection) = authorize(&app, &headers, client) {
        return rejection.into_response(false);
    }
    let requested: CapBody = match crate::store::json_object(&body) {
        Ok(parsed) => parsed,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let cap = match requested.cap.map(u32::try_from) {
        Some(Ok(cap)) if (1..=i32::MAX as u32).contains(&cap) => cap,
        _ => {
            return error_json(
                StatusCode::BAD_REQUEST,
                "cap must be a whole number between 1 and 2147483647",
            );
        }
    };
    let mut change = serde_json::Map::new();
    change.insert("cap".into(), json!(cap));
    match app.apply_change(&change, &[]) {
        Ok(_) => {
            let room = app.room.stats();
            tracing::info!(cap, "cap changed through /_room/cap");
            json_response(
                StatusCode::OK,
                json!({"cap": room.cap, "occupancy": room.occupancy}).to_string(),
            )
        }
        Err(e) => change_error(&e),
    }
}

/// A refused change: the caller's mistake (400) or a failed save (500, nothing applied).
fn change_error(error: &crate::ChangeError) -> Response<Body> {
    let status = match error {
        crate::ChangeError::Invalid(_) => StatusCode::BAD_REQUEST,
        crate::ChangeError::Persist(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error_json(status, &error.to_string())
}

/// Admin ban changes are acknowledged only once bans.json holds them.
fn flush_bans_or_fail(app: &App) -> Option<Response<Body>> {
    let error = app.flush_bans().err()?;
    tracing::error!("cannot save bans: {error}");
    Some(error_json(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("the change is in effect but could not be saved: {error}"),
    ))
}

fn error_json(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, json!({ "error": message }).to_string())
}

/// The abuse routes' gate: the admin token first (a wrong one is struck), then whether the
/// registry is on at all.
fn abuse_gate(app: &App, headers: &HeaderMap, client: Option<IpAddr>) -> Option<Response<Body>> {
    if let Err(rejection) = authorize(app, headers, client) {
        return Some(rejection.into_response(false));
    }
    if !app.abuse.enabled() {
        return Some(error_json(
            StatusCode::NOT_FOUND,
            &crate::abuse::BanError::Disabled.to_string(),
        ));
    }
    None
}

/// `GET /_room/abuse`: active bans, range count and tracked clients.
async fn abuse_list(
    Extension(app): Extension<Arc<App>>,
    Extension(Client(client)): Extension<Client>,
    headers: HeaderMap,
) -> Response<Body> {
    if let Some(refused) = abuse_gate(&app, &headers, client) {
        return refused;
    }
    let body = json!({
        "bans": app.abuse.bans(),
        "ranges": app.abuse.range_count(),
        "tracked": app.abuse.tracked(),
    });
    json_response(StatusCode::OK, body.to_string())
}

/// `DELETE /_room/abuse?client=X`: lifts a client (address or /64) or a range, forgetting its
/// offense history.
async fn abuse_unban(
    Extension(app): Extension<Arc<App>>,
    Extension(Client(client)): Extension<Client>,
    headers: HeaderMap,
    query: Result<
        axum::extract::Query<Vec<(String, String)>>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Response<Body> {
    if let Some(refused) = abuse_gate(&app, &headers, client) {
        return refused;
    }
    // The first `client=` counts when it is repeated, as in the original (a map kept the last).
    let named = query
        .ok()
        .and_then(|axum::extract::Query(pairs)| {
            pairs
                .into_iter()
                .find_map(|(key, value)| (key == "client").then_some(value))
        })
        .unwrap_or_default();
    let target = match crate::abuse::BanTarget::parse(&named) {
        Ok(target) => target,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let shown = target.to_string();
    if !app.abuse.unban_target(target) {
        return json_response(
            StatusCode::NOT_FOUND,
            json!({"client": shown, "error": "client not tracked"}).to_string(),
        );
    }
    if let Some(failed) = flush_bans_or_fail(&app) {
        return failed;
    }
    json_response(StatusCode::OK, json!({ "unbanned": shown }).to_string())
}

#[derive(serde::Deserialize)]
struct BanBody {
    #[serde(default)]
    client: String,
    #[serde(default)]
    duration: String,
    #[serde(default)]
    permanent: bool,
}

const BAN_DURATION_ERROR: &str =
    "duration must be between 1m and 8760h, for example 30m or 24h, or the ban must be permanent";

/// `POST /_room/abuse` `{"client": "...", "duration": "1h"}`, or `"duration": "permanent"` /
/// `"permanent": true`: bans an address, a /64 or a range, and drops its waiting visitors.
async fn abuse_ban(
    Extension(app): Extension<Arc<App>>,
    Extension(Client(client)): Extension<Client>,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    use crate::abuse::{BanError, BanLength, BanTarget};
    if let Some(refused) = abuse_gate(&app, &headers, client) {
        return refused;
    }
    let request: BanBody = match crate::store::json_object(&body) {
        Ok(parsed) => parsed,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let target = match BanTarget::parse(&request.client) {
        Ok(target) => target,
        Err(e) => return error_json(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let length = if request.permanent || request.duration.trim() == "permanent" {
        BanLength::Permanent
    } else {
        match crate::config::parse_go_duration(request.duration.trim()) {
            Ok(d) if (60..=8760 * 3600).contains(&d.as_secs()) => BanLength::Timed(d),
            _ => return error_json(StatusCode::BAD_REQUEST, BAN_DURATION_ERROR),
        }
    };
    match app.abuse.ban(target, length) {
        Ok(outcome) => match serde_json::to_string(&outcome) {
            Ok(_) if let Some(failed) = flush_bans_or_fail(&app) => failed,
            Ok(text) => json_response(StatusCode::OK, text),
            Err(_) => Rejection::Internal.into_response(false),
        },
        Err(e @ (BanError::BadTarget | BanError::TooBroad)) => {
            error_json(StatusCode::BAD_REQUEST, &e.to_string())
        }
        Err(e) => error_json(StatusCode::CONFLICT, &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_for(accept: &[&str]) -> MetricsFormat {
        let mut headers = HeaderMap::new();
        for value in accept {
            headers.append(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        MetricsFormat::negotiate(&headers)
    }

    #[test]
    fn scrapers_that_do_not_name_openmetrics_get_the_classic_format() {
        for accept in [
            &[][..],
            &["*/*"],
            &["text/plain"],
            &["text/plain; version=0.0.4"],
            &["text/*, application/json"],
            &["application/openmetrics-text; q=0"],
            &["application/openmetrics-text; q=bad"],
            &["text/plain; version=0.0.4; q=0.9, application/openmetrics-text; q=0.5"],
        ] {
            assert_eq!(format_for(accept), MetricsFormat::Classic, "{accept:?}");
        }
    }

    #[test]
    fn scrapers_that_prefer_openmetrics_get_it() {
        for accept in [
            &["application/openmetrics-text"][..],
            &["Application/OpenMetrics-Text;version=1.0.0"],
            // Prometheus 2 and 3 as they send it.
            &[
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            ],
            &[
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
                 application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;\
                 escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
            ],
            // Over several header lines, and at equal weight with the classic format.
            &["text/plain;q=0.4", "application/openmetrics-text;q=0.6"],
            &["text/plain, application/openmetrics-text"],
        ] {
            assert_eq!(format_for(accept), MetricsFormat::OpenMetrics, "{accept:?}");
        }
    }

    #[test]
    fn each_format_names_its_own_content_type() {
        assert!(
            MetricsFormat::Classic
                .content_type()
                .starts_with("text/plain; version=0.0.4")
        );
        assert!(
            MetricsFormat::OpenMetrics
                .content_type()
                .starts_with("application/openmetrics-text; version=1.0.0")
        );
    }
}
