//! The request path, in order. Reading [`handle`] tells where any request goes; each stage is a
//! file of this folder:
//!
//! 1. [`inspect`]: header count (HTTP/2; hyper counts HTTP/1's), `Host`/`:authority`, transfer
//!    codings, request-target length, path normalisation (the origin gets the path the rules
//!    saw);
//! 2. [`identity`]: the client address (socket peer, or trusted proxies' `X-Forwarded-For`);
//! 3. [`ban`]: one ban lookup and the ban-path check; a banned request is answered here, on
//!    every path, and left out of the access log (the request history keeps it);
//! 4. [`routes`]: reserved routes answered by Concert itself for every method and trailing slash
//!    (`/_room/…`, `/_concert/…`, `/queue/status`, see [`crate::endpoints`]); `-bypass` paths
//!    straight to the origin; `-metrics-path` when no path list claims it;
//! 5. [`tiers`]: `-assets` (valid pass, per-pass pool, global pool), `-asset-public` (global
//!    pool) and `-stream-paths` (valid pass, stream slot), outside the room, slots held to the
//!    end;
//! 6. [`gated`]: everything else: a request body taken in whole first ([`upload`], so no
//!    slot waits on it), the priority gate (busy room only), the waiting room (page,
//!    429 JSON or full), the admission pass issued or slid, then the origin with the page (or
//!    lane) slot held until the response has been delivered, and the origin's priority grant;
//! 7. [`origin`] hands requests to the proxy, [`record`] notes the answered request in the
//!    request history (banned ones too) and in the [`traffic`] figures, and [`access_log`]
//!    writes the line.
//!
//! The pipeline is one [`tower::Service`] ([`Pipeline`]), mounted as the catch-all of an axum
//! [`Router`] by [`router`]; the server calls [`handle`] itself (see there why).

mod access_log;
mod ban;
mod gated;
pub(crate) mod identity;
mod inspect;
mod origin;
mod pass_check;
mod record;
mod request;
mod routes;
mod tiers;
pub(crate) mod traffic;
mod upload;

#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::IntoResponse;
use futures_util::FutureExt as _;
use http::{Request, Response};
use tokio::time::Instant;

use crate::app::App;
use crate::endpoints;
use crate::wire::body::RequestBody;
use crate::wire::client_body::ClientBody;
use routes::Stage;

pub use request::ConnInfo;
pub(crate) use traffic::Traffic;

/// The pipeline for one request. Never panics on input; every refusal is a
/// [`crate::respond::Rejection`].
///
/// The server calls this directly rather than through the [`Router`]: there a request's body is
/// boxed, the route's service cloned and its future boxed, and the connection info travels in
/// the request's extensions. Measured with `tests/allocations.rs`, a page served through the
/// Router took 18 allocations with a pass and 20 without, against 9 and 11 called directly;
/// the stages run are the same.
pub(crate) fn handle<B: RequestBody + Unpin>(
    app: Arc<App>,
    conn: ConnInfo,
    req: Request<B>,
) -> impl Future<Output = Response<Body>> {
    // Wrapped here, outside the `async fn`: an `async fn` keeps its arguments in its future
    // for the whole request, so wrapping inside it would carry the request twice, and hyper
    // moves that future a few times per request.
    run_stages(app, conn, req.map(ClientBody::Streaming))
}

/// [`handle`] for a request whose body is already a [`ClientBody`]: the server's entry, for
/// hyper's requests and the plain HTTP/1 loop's bodiless ones alike.
pub(crate) fn handle_client_body<B: RequestBody + Unpin>(
    app: Arc<App>,
    conn: ConnInfo,
    req: Request<ClientBody<B>>,
) -> impl Future<Output = Response<Body>> {
    run_stages(app, conn, req)
}

async fn run_stages<B: RequestBody + Unpin>(
    app: Arc<App>,
    conn: ConnInfo,
    req: Request<ClientBody<B>>,
) -> Response<Body> {
    // Dropped with this future: on an answer, and as well when the client goes away first.
    let _in_flight = app.traffic.arrive();
    let generation = app.generation();
    let started = Instant::now();
    let method = req.method().clone();

    let info = match inspect::inspect(&generation, conn, &req) {
        Ok(info) => info,
        Err(rejection) => {
            app.counters
                .bad_requests_total
                .fetch_add(1, Ordering::Relaxed);
            let html = identity::is_html_client(req.headers());
            let response = rejection.for_client(html).into_response();
            app.traffic
                .answered(response.status().as_u16(), started.elapsed(), false);
            return response;
        }
    };
    let arrival = app.history.arrive(req.headers());
    if let Some(ban) = app.abuse.enforce(info.client, info.path()) {
        let response = ban::answer(&app, &generation, &info, req.headers(), ban);
        record::record(
            &app,
            &info,
            arrival,
            &method,
            response.status(),
            started,
            None,
        );
        return response;
    }
    let stage = routes::classify(&generation, info.path());
    let version = req.version();
    // A plain listener answers ACME HTTP-01 challenges while an ACME engine waits for one.
    let response = if !info.conn.tls
        && let Some(answer) = crate::tls::http_port::challenge(&app.tls, &method, info.path())
    {
        answer
    } else {
        match stage {
            Stage::Ops => {
                endpoints::ops::handle(&app, info.path(), info.query(), info.client, req).await
            }
            Stage::ConcertFiles => match app.fastlane.current() {
                // The lane is being swapped: nothing is verified or charged meanwhile.
                Some(_) if method == http::Method::POST && app.fastlane.is_reloading() => {
                    crate::fastlane::service::reloading_answer()
                }
                Some(lane) => {
                    // An unknown peer (in-process use) still gets a rate-limit bucket of its own.
                    let client = info
                        .client
                        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
                    // Boxed: the lane's future is several times the size of the page path's,
                    // and kept inline it would be moved with every page request's future.
                    Box::pin(lane.handle(req.map(axum::body::Body::new), client)).await
                }
                None => endpoints::concert_files::answer(
                    &generation.config.skip_url,
                    &method,
                    info.path(),
                ),
            },
            Stage::QueueStatus => match &app.cluster {
                Some(cluster) if cluster.line.is_live(cluster) => {
                    Box::pin(endpoints::queue_status::answer_shared(
                        &app,
                        cluster,
                        &generation.cookies,
                        generation.ticket_max_age,
                        info.conn.tls,
                        &method,
                        req.headers(),
                    ))
                    .await
                }
                _ => endpoints::queue_status::answer(
                    &app.room,
                    &generation.cookies,
                    generation.ticket_max_age,
                    info.conn.tls,
                    &method,
                    req.headers(),
                ),
            },
            Stage::Metrics => endpoints::metrics::answer(&app, &method, req.headers()),
            Stage::Bypass => origin::forward(&app, &generation, &info, req, None).await,
            Stage::Asset => tiers::private_asset(&app, &generation, &info, req).await,
            Stage::AssetPublic => tiers::public_asset(&app, &generation, &info, req).await,
            Stage::Stream => tiers::stream(&app, &generation, &info, req).await,
            Stage::Gated => gated::gated(&app, &generation, &info, req).await,
        }
    };
    record::record(
        &app,
        &info,
        arrival,
        &method,
        response.status(),
        started,
        Some(stage),
    );
    if generation.config.access_log && access_log::logs(stage, info.path()) {
        access_log::log(&info, &method, version, response.status(), started);
    }
    response
}

/// The pipeline as a `tower::Service`, for in-process use (tests with `oneshot`) and for
/// mounting beside other routes. The connection comes from the request's extensions: a
/// [`ConnInfo`], else axum's `ConnectInfo<SocketAddr>`, else an unknown peer.
#[derive(Clone)]
pub struct Pipeline {
    app: Arc<App>,
}

impl Pipeline {
    pub fn new(app: Arc<App>) -> Pipeline {
        Pipeline { app }
    }
}

impl<B: RequestBody + Unpin> tower::Service<Request<B>> for Pipeline {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let extensions = req.extensions();
        let conn = extensions.get::<ConnInfo>().copied().unwrap_or_else(|| {
            let peer = extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| identity::unmap(addr.ip()));
            ConnInfo { peer, tls: false }
        });
        let app = self.app.clone();
        Box::pin(handle(app, conn, req).map(Ok))
    }
}

/// The public listener's application: an axum `Router` whose catch-all is the pipeline.
pub fn router(app: Arc<App>) -> Router {
    Router::new().fallback_service(Pipeline::new(app))
}
