//! The request pipeline, in order. Reading [`handle`] tells where any request goes:
//!
//! 1. hardening: header count (HTTP/2; hyper counts HTTP/1's), `Host`/`:authority`, request-target
//!    length, path normalisation (the origin gets the path the rules saw);
//! 2. identify: the client address (socket peer, or trusted proxies' `X-Forwarded-For`), then
//!    one ban lookup and the ban-path check; a banned request is answered here, on every path,
//!    and never logged;
//! 3. reserved routes answered locally for every method and trailing slash: `/_room/…` (ops),
//!    `/_concert/…` (waiting-page files and config), `/queue/status`;
//! 4. `-bypass` paths: straight to the proxy;
//! 5. `-assets` (valid pass, per-pass pool, global pool), `-asset-public` (global pool) and
//!    `-stream-paths` (valid pass, stream slot): outside the room, slots held to the end; then
//!    `-metrics-path` (`/metrics`) answered locally when no path list has claimed it;
//! 6. everything else is gated: priority gate (busy room only) → API-JSON interceptor + waiting
//!    room → admission pass issue/slide → the proxy with the page (or lane) slot held until the
//!    response body has been delivered → the origin's priority grant.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version, header};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::admission::assets::AssetRefusal;
use crate::admission::cookies::{read_cookie, read_cookies};
use crate::admission::pass::{ADMIT_COOKIE, PRIORITY_COOKIE, PassId, PassStatus, unix_now};
use crate::admission::priority::{GrantAction, LaneDecision, LaneRequest};
use crate::paths::matchers::RouteKind;
use crate::paths::normalize::normalize_request_path;
use crate::pipeline::identity::{is_html_client, resolve_client};
use crate::proxy::{ForwardContext, OriginPriority, SlotHold};
use crate::respond::Rejection;
use crate::room::{AdmitResult, Arrival, Decision, PollOutcome, Waiting};
use crate::wire::limits::{MAX_HEADERS, MAX_TARGET_BYTES};
use crate::{App, Generation};

pub mod identity;

/// What the request pipeline knows about the connection a request came on.
#[derive(Clone, Copy, Debug)]
pub struct ConnInfo {
    /// Socket peer, IPv4-mapped addresses unmapped.
    pub peer: Option<IpAddr>,
    /// Whether the connection is Concert's own TLS.
    pub tls: bool,
}

pub const TICKET_COOKIE: &str = "room_ticket";
pub const PROBE_COOKIE: &str = "room_probe";
pub const PASS_COOKIE: &str = "room_pass";

const JSON: HeaderValue = HeaderValue::from_static("application/json; charset=utf-8");
const HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

/// Where a request goes after the reserved prefixes and path lists are consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Ops,
    ConcertFiles,
    QueueStatus,
    Bypass,
    Asset,
    AssetPublic,
    Stream,
    /// `-metrics-path` (`/metrics` by default), when no path list claims it.
    Metrics,
    Gated,
}

/// What the pipeline learned about a request before routing it.
pub struct RequestInfo {
    pub conn: ConnInfo,
    pub client: Option<IpAddr>,
    pub html: bool,
    /// Normalised path plus the original query: what the origin receives.
    pub target: String,
    /// Length of the path part of `target`.
    pub path_len: usize,
}

impl RequestInfo {
    pub fn path(&self) -> &str {
        &self.target[..self.path_len]
    }
}

/// The pipeline. Never panics on input; every refusal is a [`Rejection`].
pub async fn handle(app: Arc<App>, conn: ConnInfo, req: Request<Incoming>) -> Response<Body> {
    let generation = app.generation();
    // Only the access log reads the clock for a request's latency.
    let started = generation.config.access_log.then(Instant::now);
    let method = req.method().clone();

    let info = match inspect(&generation, conn, &req) {
        Ok(info) => info,
        Err(rejection) => {
            app.counters
                .bad_requests_total
                .fetch_add(1, Ordering::Relaxed);
            return rejection.into_response(is_html_client(req.headers()));
        }
    };
    if let Some(ban) = app.abuse.enforce(info.client, info.path()) {
        return banned(&generation, &info, &req, ban);
    }
    let stage = classify(&generation, info.path());
    let response = match stage {
        Stage::Ops => crate::endpoints::ops::handle(&app, &generation, &info, req).await,
        Stage::ConcertFiles => concert_files(&generation, &method, info.path()),
        Stage::QueueStatus => queue_status(&app, &generation, &info, &req),
        Stage::Bypass => forward(&app, &generation, &info, req, None).await,
        Stage::Asset => private_asset(&app, &generation, &info, req).await,
        Stage::AssetPublic => public_asset(&app, &generation, &info, req).await,
        Stage::Stream => stream(&app, &generation, &info, req).await,
        Stage::Metrics => crate::endpoints::ops::metrics_endpoint(&app, &method, req.headers()),
        Stage::Gated => gated(&app, &generation, &info, req).await,
    };
    if let Some(started) = started
        && logs_access(stage, info.path())
    {
        log_access(&info, &method, response.status(), started);
    }
    response
}

/// Checks the request target and resolves the client before anything else looks at them.
fn inspect(
    generation: &Generation,
    conn: ConnInfo,
    req: &Request<Incoming>,
) -> Result<RequestInfo, Rejection> {
    // hyper refuses an HTTP/1 head with more fields itself; HTTP/2 only bounds their size.
    if req.version() == Version::HTTP_2 && req.headers().len() > MAX_HEADERS {
        return Err(Rejection::TooManyHeaders);
    }
    check_host(req)?;
    if req.headers().contains_key(header::TRANSFER_ENCODING) && !only_chunked(req.headers()) {
        return Err(Rejection::BadRequest(
            "transfer codings other than chunked are not supported".to_string(),
        ));
    }
    let uri = req.uri();
    let raw_target = uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/");
    if raw_target.len() > MAX_TARGET_BYTES {
        return Err(Rejection::UriTooLong);
    }
    let path = normalize_request_path(uri.path())
        .map_err(|e| Rejection::BadRequest(format!("path: {e}")))?;
    let mut target = String::with_capacity(raw_target.len() + 1);
    target.push_str(&path);
    let path_len = target.len();
    if let Some(query) = uri.query() {
        target.push('?');
        target.push_str(query);
    }
    let config = &generation.config;
    let client = resolve_client(conn.peer, req.headers(), |ip| {
        config.trusted_proxies.contains(ip)
    });
    Ok(RequestInfo {
        conn,
        client,
        html: is_html_client(req.headers()),
        target,
        path_len,
    })
}

/// Whether the request's transfer codings are exactly `chunked`, the one coding the proxy decodes
/// and re-applies. hyper reads `gzip, chunked` as plain chunked, so the origin would get
/// compressed bytes with nothing saying so. Refused with 400, as hyper refuses other unknown
/// codings (RFC 9112 suggests 501, but no malformed or unsupported input gets a 5xx from
/// Concert). Codings without a final `chunked` never get here: the framing guard refuses them.
fn only_chunked(headers: &http::HeaderMap) -> bool {
    let mut codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|coding| !coding.is_empty());
    matches!(
        (codings.next(), codings.next()),
        (Some(coding), None) if coding.eq_ignore_ascii_case(b"chunked")
    )
}

/// RFC 9112 §3.2: an HTTP/1.1 request names its host in exactly one `Host` field, and any
/// `Host` or authority (HTTP/2 `:authority`, absolute-form target) is a plain `host[:port]`.
/// The proxy forwards them as `Host` and `X-Forwarded-Host`, so nothing else may pass.
fn check_host(req: &Request<Incoming>) -> Result<(), Rejection> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if req.version() == Version::HTTP_11 => {
            return Err(Rejection::BadRequest("missing Host header".to_string()));
        }
        (Some(_), Some(_)) => {
            return Err(Rejection::BadRequest(
                "more than one Host header".to_string(),
            ));
        }
        (Some(host), None) if !is_host_and_port(host.as_bytes()) => {
            return Err(Rejection::BadRequest("invalid Host header".to_string()));
        }
        _ => {}
    }
    if let Some(authority) = req.uri().authority()
        && !is_host_and_port(authority.as_str().as_bytes())
    {
        return Err(Rejection::BadRequest(
            "invalid request authority".to_string(),
        ));
    }
    Ok(())
}

/// `uri-host [ ":" port ]` (RFC 3986 §3.2.2): a bracketed IPv6 address, or a name or IPv4
/// address of unreserved characters and sub-delimiters. Two characters the grammar allows are
/// refused, since no DNS name or address uses them and both change meaning downstream: `%`
/// (an origin may decode `%2F` into a slash) and `,` (it splits `X-Forwarded-Host` into two
/// hosts). An empty value is allowed, as RFC 9112 sends one for targets without an authority.
fn is_host_and_port(value: &[u8]) -> bool {
    let (host_ok, rest) = match value {
        [b'[', inner @ ..] => {
            let Some(close) = inner.iter().position(|&b| b == b']') else {
                return false;
            };
            let address = std::str::from_utf8(&inner[..close]).ok();
            (
                address.is_some_and(|a| a.parse::<Ipv6Addr>().is_ok()),
                &inner[close + 1..],
            )
        }
        _ => {
            let end = value.iter().position(|&b| b == b':').unwrap_or(value.len());
            let name = &value[..end];
            (
                name.iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+;=".contains(&b)),
                &value[end..],
            )
        }
    };
    host_ok
        && match rest {
            [] => true,
            [b':', port @ ..] => port.len() <= 5 && port.iter().all(u8::is_ascii_digit),
            _ => false,
        }
}

/// The answer to a banned client. A waiting page's status poll is told `ready` so the page
/// reloads into the block notice; anything else gets the ban (429 or 403) and loses its
/// `room_ticket`, so the client rejoins at the back once the ban ends.
fn banned(
    generation: &Generation,
    info: &RequestInfo,
    req: &Request<Incoming>,
    ban: crate::abuse::BanLength,
) -> Response<Body> {
    if info.path() == "/queue/status" {
        return json_response(
            StatusCode::OK,
            crate::abuse::answer::QUEUE_STATUS_READY.to_string(),
        );
    }
    let mut response = Rejection::Banned(ban).into_response(info.html);
    if read_cookie(req.headers(), TICKET_COOKIE).is_some() {
        response.headers_mut().append(
            header::SET_COOKIE,
            generation
                .cookies
                .set(TICKET_COOKIE, "", 0, true, info.conn.tls),
        );
    }
    response
}

/// Reserved prefixes first (they can never be claimed by a path list), then the path lists.
pub fn classify(generation: &Generation, path: &str) -> Stage {
    if under(path, "/_room") {
        return Stage::Ops;
    }
    if under(path, "/_concert") {
        return Stage::ConcertFiles;
    }
    if path == "/queue/status" || path == "/queue/status/" {
        return Stage::QueueStatus;
    }
    match generation.routes.classify(path) {
        Some(RouteKind::Bypass) => Stage::Bypass,
        Some(RouteKind::Asset) => Stage::Asset,
        Some(RouteKind::AssetPublic) => Stage::AssetPublic,
        Some(RouteKind::Stream) => Stage::Stream,
        None if is_metrics_path(generation, path) => Stage::Metrics,
        None => Stage::Gated,
    }
}

/// The metrics path and its trailing-slash form. A path list that routes either form keeps
/// both: answering metrics at the other would split one path between Concert and the origin.
fn is_metrics_path(generation: &Generation, path: &str) -> bool {
    !generation.metrics_path_routed
        && generation
            .config
            .metrics_path
            .as_deref()
            .is_some_and(|own| path.strip_suffix('/').unwrap_or(path) == own)
}

fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn logs_access(stage: Stage, path: &str) -> bool {
    !matches!(
        stage,
        Stage::QueueStatus
            | Stage::ConcertFiles
            | Stage::Asset
            | Stage::AssetPublic
            | Stage::Metrics
    ) && path != "/_room/healthz"
        && path != "/_room/healthz/"
}

fn log_access(info: &RequestInfo, method: &Method, status: StatusCode, started: Instant) {
    let client = info.client.map(|ip| ip.to_string()).unwrap_or_default();
    tracing::info!(
        target: "concert::access",
        status = status.as_u16(),
        latency_us = started.elapsed().as_micros() as u64,
        client = %client,
        method = %method,
        path = %info.target,
    );
}

/// Hands a request to the origin. `hold` keeps a slot busy until the response is delivered.
async fn forward(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<Incoming>,
    hold: Option<SlotHold>,
) -> Response<Body> {
    let peer_trusted = info
        .conn
        .peer
        .is_some_and(|peer| generation.config.trusted_proxies.contains(peer));
    let ctx = ForwardContext {
        peer: info.conn.peer,
        peer_trusted,
        via_tls: info.conn.tls,
        path_and_query: &info.target,
        drain: &app.drain,
    };
    app.counters.proxied_total.fetch_add(1, Ordering::Relaxed);
    let response = generation.proxy.forward(req, ctx, hold).await;
    crate::proxy::end_event_stream_on_drain(response, &app.drain)
}

/// Strike weight of a forged admission pass.
const FORGED_PASS_STRIKE: u32 = 5;

/// `Set-Cookie` for an admission pass value, with the pass TTL as `Max-Age`.
fn pass_cookie(generation: &Generation, info: &RequestInfo, value: &str) -> HeaderValue {
    generation.cookies.set(
        ADMIT_COOKIE,
        value,
        generation.config.admit_ttl.as_secs(),
        true,
        info.conn.tls,
    )
}

/// The pass check of asset and stream requests: verify (charging a forged pass) and, for a
/// valid pass past half its life, the re-signed cookie (same id). Passes are never issued here.
fn check_pass(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: &Request<Incoming>,
) -> (PassStatus, Option<HeaderValue>) {
    let now = unix_now();
    let status = verified_pass(app, info, req, now);
    let slid = status
        .valid()
        .and_then(|pass| app.pass.slide(pass, now, generation.config.admit_ttl))
        .map(|value| pass_cookie(generation, info, &value));
    (status, slid)
}

/// The request's admission pass, checked; a forged one charges its client.
fn verified_pass(app: &App, info: &RequestInfo, req: &Request<Incoming>, now: u64) -> PassStatus {
    let status = app
        .pass
        .verify_cookie(read_cookie(req.headers(), ADMIT_COOKIE), now);
    charge_forged_pass(app, info, &status);
    status
}

fn charge_forged_pass(app: &App, info: &RequestInfo, status: &PassStatus) {
    if status.is_forged() {
        app.strike(info.client, FORGED_PASS_STRIKE, "forged admission pass");
    }
}

fn with_cookie(mut response: Response<Body>, cookie: Option<HeaderValue>) -> Response<Body> {
    if let Some(cookie) = cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// `-assets`: a valid pass, a slot in the pass's own pool for its protocol family, then a
/// global slot; both held until the response is delivered. Never reaches the origin otherwise.
async fn private_asset(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<Incoming>,
) -> Response<Body> {
    let tier = &generation.assets;
    let (status, slid) = check_pass(app, generation, info, &req);
    let Some(pass) = status.valid() else {
        return tier.deny().into_response();
    };
    let peer_trusted = info
        .conn
        .peer
        .is_some_and(|peer| generation.config.trusted_proxies.contains(peer));
    let family = tier.family(req.version(), req.headers(), peer_trusted);
    let response = match tier.admit_private(&pass.id, family).await {
        Ok(hold) => forward(app, generation, info, req, Some(Box::new(hold))).await,
        Err(refusal) => {
            if refusal == AssetRefusal::UserPoolFull {
                app.strike(
                    info.client,
                    refusal.strike_weight(),
                    "per-pass asset pool exhausted",
                );
            }
            refusal.into_response()
        }
    };
    with_cookie(response, slid)
}

/// `-asset-public`: no pass, only the global pool.
async fn public_asset(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<Incoming>,
) -> Response<Body> {
    match generation.assets.admit_public().await {
        Ok(hold) => forward(app, generation, info, req, Some(Box::new(hold))).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// `-stream-paths`: a valid pass and a stream slot (never waited for), held for the life of the
/// streamed body or the upgraded connection.
async fn stream(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<Incoming>,
) -> Response<Body> {
    let guard = &generation.streams;
    let (status, slid) = check_pass(app, generation, info, &req);
    if status.valid().is_none() {
        return guard.deny().into_response();
    }
    let response = match guard.enter() {
        Ok(slot) => forward(app, generation, info, req, Some(Box::new(slot))).await,
        Err(refusal) => refusal.into_response(),
    };
    with_cookie(response, slid)
}

/// The catch-all: the priority gate (when the room is busy), then the waiting room decides, and
/// the proxy serves.
async fn gated(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<Incoming>,
) -> Response<Body> {
    let config = &generation.config;
    let now = unix_now();
    let [
        admit_cookie,
        priority_cookie,
        ticket_cookie,
        room_pass_cookie,
    ] = read_cookies(
        req.headers(),
        [ADMIT_COOKIE, PRIORITY_COOKIE, TICKET_COOKIE, PASS_COOKIE],
    );
    let pass = app.pass.verify_cookie(admit_cookie, now);
    let rank = app
        .priority
        .request_rank(&app.pass, priority_cookie, pass.valid(), now);
    app.priority.count_request(rank);
    if app.room.is_busy() {
        let request = LaneRequest {
            rank,
            form: config.priority_forms
                && !matches!(*req.method(), Method::GET | Method::HEAD)
                && pass.valid().is_some(),
            lane_rank: config.priority_lane_rank,
            wait: config.priority_wait,
            retry_after: config.effective_retry_after(),
        };
        match app.priority.gate(&generation.lane, request).await {
            LaneDecision::Lane(slot) => {
                return admitted(app, generation, info, req, Box::new(slot), pass).await;
            }
            LaneDecision::Refused(refusal) => return refusal.into_response(info.html),
            LaneDecision::Room => {}
        }
    }
    let arrival = Arrival {
        ticket_cookie,
        pass_cookie: room_pass_cookie,
        client: info.client,
    };
    let admission = match app.room.arrive(arrival) {
        Decision::Admit(admission) => admission,
        Decision::Wait(waiting) => {
            if rank.as_u8() > 0 {
                app.room.set_ticket_rank(&waiting.token, rank.as_u8());
            }
            return waiting_response(generation, info, &waiting);
        }
        Decision::Full => {
            let retry_after = generation.config.effective_retry_after();
            return Rejection::QueueFull { retry_after }.into_response(info.html);
        }
    };
    // Waiting for a slot ends early if the client goes away: hyper drops this future, the
    // admission is dropped with it, and the room retires the ticket.
    match app.room.admit(admission).await {
        AdmitResult::Admitted(slot) => {
            admitted(app, generation, info, req, Box::new(slot), pass).await
        }
        AdmitResult::Requeued(waiting) => waiting_response(generation, info, &waiting),
    }
}

/// The gated handler: issue or slide the admission pass (a forged one is charged), proxy with
/// `hold` kept until the response is delivered, then turn the origin's `Concert-Priority` into
/// a grant bound to the pass. `status` is the pass as checked when the request arrived: a
/// second signature check would cost as much again, and a pass valid on arrival is slid even
/// if it ran out while its holder waited for the slot.
async fn admitted(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<Incoming>,
    hold: SlotHold,
    status: PassStatus,
) -> Response<Body> {
    let now = unix_now();
    charge_forged_pass(app, info, &status);
    let issued = app
        .pass
        .issue_for_page(&status, now, generation.config.admit_ttl);
    let cookie = issued
        .cookie
        .as_deref()
        .map(|value| pass_cookie(generation, info, value));
    let mut response = forward(app, generation, info, req, Some(hold)).await;
    if let (Some(OriginPriority(value)), Some(id)) = (
        response.extensions_mut().remove::<OriginPriority>(),
        issued.id,
    ) {
        apply_grant(app, generation, info, &mut response, &value, &id, now);
    }
    with_cookie(response, cookie)
}

fn apply_grant(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    response: &mut Response<Body>,
    value: &HeaderValue,
    pass: &PassId,
    now: u64,
) {
    let cookie = match app.priority.grant_from_origin(&app.pass, value, pass, now) {
        GrantAction::Set { value, max_age } => {
            generation
                .cookies
                .set(PRIORITY_COOKIE, &value, max_age, true, info.conn.tls)
        }
        GrantAction::Clear => generation.cookies.clear(PRIORITY_COOKIE, info.conn.tls),
        GrantAction::Keep => return,
    };
    response.headers_mut().append(header::SET_COOKIE, cookie);
}

/// A queued visitor's answer: the waiting page for browsers (and for everyone with
/// `-api-json=false`), or 429 JSON for API clients. Both carry the room cookies.
fn waiting_response(
    generation: &Generation,
    info: &RequestInfo,
    waiting: &Waiting,
) -> Response<Body> {
    let config = &generation.config;
    let retry_after = config.effective_retry_after();
    let mut response = if info.html || !config.api_json {
        let page = generation.page.render(waiting.position, &config.skip_url);
        let mut response = Response::new(Body::from(page));
        response.headers_mut().insert(header::CONTENT_TYPE, HTML);
        response
    } else {
        let body = format!(
            "{{\"hint\":\"keep the room_ticket cookie and retry to hold your position\",\"queued\":true,\"retry_after_seconds\":{retry_after},\"status_url\":\"/queue/status\"}}"
        );
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        response.headers_mut().insert(header::CONTENT_TYPE, JSON);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        response
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, NO_STORE);
    append_room_cookies(generation, info, headers, &waiting.token);
    response
}

fn append_room_cookies(
    generation: &Generation,
    info: &RequestInfo,
    headers: &mut http::HeaderMap,
    token: &str,
) {
    let max_age = generation.ticket_max_age;
    let tls = info.conn.tls;
    headers.append(
        header::SET_COOKIE,
        generation
            .cookies
            .set(TICKET_COOKIE, token, max_age, true, tls),
    );
    headers.append(
        header::SET_COOKIE,
        generation
            .cookies
            .set(PROBE_COOKIE, "1", max_age, false, tls),
    );
}

/// `GET /queue/status`: the waiting page's poll. `OPTIONS` → 204; other methods → 405.
fn queue_status(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: &Request<Incoming>,
) -> Response<Body> {
    match *req.method() {
        Method::GET | Method::HEAD => {}
        Method::OPTIONS => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::NO_CONTENT;
            response.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, OPTIONS"),
            );
            return response;
        }
        _ => {
            return Rejection::MethodNotAllowed {
                allow: "GET, HEAD, OPTIONS",
            }
            .into_response(false);
        }
    }
    let ticket = read_cookie(req.headers(), TICKET_COOKIE);
    let outcome = app.room.poll(ticket);
    let (status, body, refresh) = status_body(&outcome);
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, JSON);
    headers.insert(header::CACHE_CONTROL, NO_STORE);
    if status == StatusCode::TOO_MANY_REQUESTS {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let (true, Some(token)) = (refresh, ticket) {
        append_room_cookies(generation, info, headers, token);
    }
    response
}

/// The JSON of one poll outcome (zero values omitted, as the page expects), its status, and
/// whether the room cookies must be re-sent.
pub fn status_body(outcome: &PollOutcome) -> (StatusCode, String, bool) {
    use serde_json::{Map, Value, json};
    match outcome {
        PollOutcome::CookiesRequired => (
            StatusCode::OK,
            r#"{"ready":false,"cookies_required":true}"#.to_string(),
            false,
        ),
        PollOutcome::Ready => (StatusCode::OK, r#"{"ready":true}"#.to_string(), false),
        PollOutcome::Throttled { position } => (
            StatusCode::TOO_MANY_REQUESTS,
            format!(r#"{{"ready":false,"position":{position}}}"#),
            false,
        ),
        PollOutcome::Waiting {
            position,
            utilization,
            has_pass,
            refresh_cookies,
            rate_per_pos,
            skip_cost,
            estimate,
        } => {
            let mut map = Map::new();
            map.insert("ready".into(), Value::Bool(false));
            map.insert("position".into(), json!(position));
            if *utilization != 0.0 {
                map.insert("utilization".into(), json!(utilization));
            }
            if let Some(cost) = skip_cost.filter(|c| *c != 0.0) {
                map.insert("skip_cost".into(), json!(cost));
            }
            if let Some(rate) = rate_per_pos.filter(|r| *r != 0.0) {
                map.insert("rate_per_pos".into(), json!(rate));
            }
            if *has_pass {
                map.insert("has_pass".into(), Value::Bool(true));
            }
            map.insert("wait_known".into(), Value::Bool(estimate.known));
            if estimate.known {
                map.insert("wait_min_seconds".into(), json!(estimate.min_secs));
                map.insert("wait_max_seconds".into(), json!(estimate.max_secs));
            }
            (
                StatusCode::OK,
                Value::Object(map).to_string(),
                *refresh_cookies,
            )
        }
    }
}

/// `/_concert/…`: the waiting page's own files and the skip-link config. The fast lane itself is
/// not part of this build, so its other routes answer as the original does when it is off.
fn concert_files(generation: &Generation, method: &Method, path: &str) -> Response<Body> {
    let path = path
        .strip_suffix('/')
        .filter(|p| !p.is_empty())
        .unwrap_or(path);
    if path == "/_concert/config" {
        if !matches!(*method, Method::GET | Method::HEAD) {
            return Rejection::MethodNotAllowed { allow: "GET, HEAD" }.into_response(false);
        }
        let body = serde_json::json!({
            "enabled": false,
            "legacy_skip_url": generation.config.skip_url,
        })
        .to_string();
        return json_response(StatusCode::OK, body);
    }
    if let Some((content_type, body)) = crate::room::page::concert_asset(path) {
        if !matches!(*method, Method::GET | Method::HEAD) {
            return Rejection::MethodNotAllowed { allow: "GET, HEAD" }.into_response(false);
        }
        let mut response = Response::new(Body::from(body));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::CACHE_CONTROL, NO_STORE);
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'self'; img-src 'self' data: https:"),
        );
        return response;
    }
    json_response(
        StatusCode::NOT_FOUND,
        r#"{"error":"fast_lane_disabled"}"#.to_string(),
    )
}

pub fn json_response(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, JSON);
    headers.insert(header::CACHE_CONTROL, NO_STORE);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::WaitEstimate;

    #[test]
    fn reserved_prefixes_match_whole_segments_only() {
        assert!(under("/_room", "/_room"));
        assert!(under("/_room/stats/", "/_room"));
        assert!(!under("/_roomy", "/_room"));
        assert!(!under("/x/_room", "/_room"));
    }

    #[test]
    fn host_values_must_be_a_plain_host_and_port() {
        for good in [
            "",
            "shop.test",
            "shop.test:8080",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[2001:db8::1]:443",
            "xn--bcher-kva.example",
            "a_b~c",
            "host:",
        ] {
            assert!(is_host_and_port(good.as_bytes()), "{good:?}");
        }
        for bad in [
            "shop.test/evil",
            "shop test",
            "user@shop.test",
            "shop.test?x",
            "shop.test#x",
            "shop.test:80:80",
            "shop.test:http",
            "shop.test:123456",
            "[::1",
            "[nope]",
            "[::1]x",
            "[::1]:x",
            "a,b",
            "a%2Fb",
            "a\\b",
            "shop.test\t",
            "é.test",
        ] {
            assert!(!is_host_and_port(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn status_json_omits_zero_values_and_reports_the_estimate() {
        let (status, body, refresh) = status_body(&PollOutcome::Waiting {
            position: 4,
            utilization: 0.0,
            has_pass: false,
            refresh_cookies: true,
            rate_per_pos: None,
            skip_cost: None,
            estimate: WaitEstimate {
                known: true,
                min_secs: 40,
                max_secs: 70,
            },
        });
        assert_eq!(status, StatusCode::OK);
        assert!(refresh);
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(value["ready"], false);
        assert_eq!(value["position"], 4);
        assert!(value.get("utilization").is_none());
        assert!(value.get("has_pass").is_none());
        assert_eq!(value["wait_known"], true);
        assert_eq!(value["wait_min_seconds"], 40);
        assert_eq!(value["wait_max_seconds"], 70);

        let (status, body, _) = status_body(&PollOutcome::Throttled { position: 2 });
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body, r#"{"ready":false,"position":2}"#);
        assert_eq!(status_body(&PollOutcome::Ready).1, r#"{"ready":true}"#);
    }
}
