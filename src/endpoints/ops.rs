//! Operator routes under `/_room/` on the main listener: health, stats, metrics and the admin
//! API ([`super::admin`]).
//!
//! The whole prefix is answered here — for every method and with or without a trailing slash — so
//! nothing under `/_room/` ever leaks to the origin.

use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::body::Body;
use axum::extract::Extension;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use http::{HeaderMap, Request, Response, StatusCode, header};
use tower::ServiceExt;

use super::admin::{Client, abuse_ban, abuse_list, abuse_unban, set_cap};
use super::figures::stats_json;
use super::metrics::{MetricsFormat, metrics_response};
use crate::app::App;
use crate::paths::reserved::{ABUSE, CAP, HEALTHZ, METRICS, STATS, without_trailing_slash};
use crate::respond::Rejection;
use crate::respond::values::{TEXT, json_response};
use crate::wire::body::RequestBody;

/// Routes one `/_room/…` request: `path` normalised, `query` with its `?` (or empty), `client`
/// as the pipeline resolved it.
pub(crate) async fn handle<B: RequestBody>(
    app: &Arc<App>,
    path: &str,
    query: &str,
    client: Option<IpAddr>,
    req: Request<B>,
) -> Response<Body> {
    let path = without_trailing_slash(path);
    // The query stays: `DELETE /_room/abuse?client=…` needs it.
    let (mut parts, body) = req.into_parts();
    parts.uri = match http::Uri::try_from(format!("{path}{query}")) {
        Ok(uri) => uri,
        Err(_) => return Rejection::ReservedNotFound.into_response(),
    };
    parts.extensions.insert(Client(client));
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
        .route(HEALTHZ, get(healthz).fallback(not_allowed("GET, HEAD")))
        .route(STATS, get(stats).fallback(not_allowed("GET, HEAD")))
        .route(METRICS, get(metrics).fallback(not_allowed("GET, HEAD")))
        .route(CAP, post(set_cap).fallback(admin_not_allowed("POST")))
        .route(
            ABUSE,
            get(abuse_list)
                .delete(abuse_unban)
                .post(abuse_ban)
                .fallback(admin_not_allowed("GET, HEAD, POST, DELETE")),
        )
        .fallback(|| async { Rejection::ReservedNotFound.into_response() })
}

/// The 405 every reserved path gives for a method it does not serve (axum's own has no body
/// and spells `Allow` differently).
fn not_allowed(
    allow: &'static str,
) -> impl Fn() -> std::future::Ready<Response<Body>> + Clone + Send + Sync + 'static {
    move || std::future::ready(Rejection::MethodNotAllowed { allow }.into_response())
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
        std::future::ready(rejection.into_response())
    }
}

/// `ok`, and a second line `tls: pending` while HTTPS is asked for but some name has no
/// certificate yet (the process serves, but visitors of those names cannot reach it).
///
/// With `-cluster`, lines on the cluster follow (mode `shared` or `local`, instances, lease,
/// slots in use, Redis), or, for a client that asks for JSON, one object with a `cluster`
/// object in it. Local mode is still healthy: the instance serves on its share of the cap.
async fn healthz(Extension(app): Extension<Arc<App>>, headers: HeaderMap) -> Response<Body> {
    let Some(cluster) = crate::cluster::health::ClusterReport::take(&app) else {
        return ([(header::CONTENT_TYPE, TEXT)], app.tls.health_text()).into_response();
    };
    if wants_json(&headers) {
        let body = serde_json::json!({
            "status": "ok",
            "tls": app.tls.status().as_str(),
            "cluster": cluster.json(),
        });
        return json_response(StatusCode::OK, body.to_string());
    }
    let text = format!("{}\n{}", app.tls.health_text(), cluster.text());
    ([(header::CONTENT_TYPE, TEXT)], text).into_response()
}

/// Whether `Accept` names JSON (a wildcard does not: probes that send none get the text).
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|range| {
            let media = range.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("application/json")
        })
}

async fn stats(Extension(app): Extension<Arc<App>>) -> Response<Body> {
    json_response(StatusCode::OK, stats_json(&app).to_string())
}

/// Prometheus exposition of the same figures, in the format the scraper asks for.
async fn metrics(Extension(app): Extension<Arc<App>>, headers: HeaderMap) -> Response<Body> {
    metrics_response(&app, MetricsFormat::negotiate(&headers))
}
