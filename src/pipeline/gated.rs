//! Stage 6: everything no other stage claimed. A request body is taken in first (see
//! [`super::upload`]), then the priority gate (only while the room is busy) and the waiting
//! room decide: admit, wait (the waiting page, or 429 JSON for API clients)
//! or refuse a newcomer to a full line. An admitted request gets its admission pass issued or
//! slid, goes to the origin with its page (or lane) slot held until the answer has been
//! delivered, and the origin's `Concert-Priority` becomes a grant bound to the pass.

use axum::body::Body;
use axum::response::IntoResponse;
use futures_util::FutureExt as _;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};

use super::origin::forward;
use super::pass_check::{charge_forged_pass, pass_cookie, with_cookie};
use super::request::RequestInfo;
use super::upload;
use crate::admission::cookies::{ADMIT, FASTLANE, PRIORITY, ROOM_PASS, TICKET, read_cookies};
use crate::admission::pass::{PassId, PassStatus, unix_now};
use crate::admission::priority::{GrantAction, LaneDecision, LaneRequest, Rank};
use crate::app::{App, Generation};
use crate::cluster::line::SharedDecision;
use crate::paths::reserved::QUEUE_STATUS;
use crate::proxy::OriginPriority;
use crate::respond::Rejection;
use crate::respond::values::{HTML, JSON, NO_STORE};
use crate::room::{AdmitResult, Arrival, Decision, Waiting};
use crate::sys::slots::SlotHold;
use crate::wire::body::RequestBody;
use crate::wire::client_body::ClientBody;

/// The catch-all: the body taken in, the priority gate (when the room is busy), then the
/// waiting room decides, and the proxy serves.
pub(super) async fn gated<B: RequestBody + Unpin>(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    mut req: Request<ClientBody<B>>,
) -> Response<Body> {
    // In this function, not a nested one: every level of `async fn` costs a copy of its whole
    // future when it is entered, and this path runs for every page. The intake's own future is
    // boxed, so bodiless requests do not carry room for it.
    if upload::takes_in(generation, info, &req)
        && let Err(refusal) = Box::pin(upload::take_in_body(app, generation, info, &mut req)).await
    {
        return refusal;
    }
    let config = &generation.config;
    let now = unix_now();
    let [
        admit_cookie,
        priority_cookie,
        ticket_cookie,
        room_pass_cookie,
        fast_lane_cookie,
    ] = read_cookies(
        req.headers(),
        [ADMIT, PRIORITY, TICKET, ROOM_PASS, FASTLANE],
    );
    if let Some(ticket) = ticket_cookie
        && app.room.was_removed(ticket)
    {
        return removed_from_line(generation, info);
    }
    let pass = app.pass.verify_cookie(admit_cookie, now);
    let mut rank = app
        .priority
        .request_rank(&app.pass, priority_cookie, pass.valid(), now);
    // A running fast-lane pass ranks the request at least customer.
    // Read once, and let go before any await: a swap may replace the lane meanwhile.
    let fast_lane = app.fastlane.load().as_ref().is_some_and(|lane| {
        lane.settings().enabled
            && lane
                .eligible_with_cookie(req.headers(), fast_lane_cookie, now)
                .is_some()
    });
    if fast_lane && rank < Rank::Customer {
        rank = Rank::Customer;
    }
    app.priority.count_request(rank);
    info.rank
        .store(rank.as_u8(), std::sync::atomic::Ordering::Relaxed);
    // With a live shared line, anyone waiting in it (on any instance) makes the room busy too.
    let busy = app.room.is_busy()
        || app
            .cluster
            .as_ref()
            .is_some_and(|cluster| cluster.line.waiting() > 0 && cluster.line.is_live(cluster));
    if busy {
        let request = LaneRequest {
            rank,
            form: pass
                .valid()
                .filter(|_| config.priority_forms && is_form_method(req.method()))
                .map(|valid| valid.id),
            lane_rank: config.priority_lane_rank,
            wait: config.priority_wait,
            retry_after: config.effective_retry_after(),
            fast_lane,
            writes: !matches!(*req.method(), Method::GET | Method::HEAD),
        };
        match app.priority.gate(&generation.lane, request).await {
            LaneDecision::Lane(slot) => {
                return admitted(app, generation, info, req, Box::new(slot), pass).await;
            }
            LaneDecision::Refused(refusal) => {
                return refusal.for_client(info.html).into_response();
            }
            LaneDecision::Room => {}
        }
    }
    if let Some(cluster) = &app.cluster
        && cluster.line.is_live(cluster)
    {
        // Boxed: pages served without a cluster do not carry this future.
        let decision = Box::pin(crate::cluster::line::decide(
            app,
            cluster,
            ticket_cookie,
            info.client,
        ))
        .await;
        match decision {
            SharedDecision::Admit(hold) => {
                return admitted(app, generation, info, req, hold, pass).await;
            }
            SharedDecision::Wait(waiting) => {
                return waiting_response(generation, info, &waiting);
            }
            SharedDecision::Full => {
                let retry_after = generation.config.effective_retry_after();
                return Rejection::QueueFull { retry_after }
                    .for_client(info.html)
                    .into_response();
            }
            SharedDecision::AddressFull => {
                let retry_after = generation.config.effective_retry_after();
                return Rejection::AddressLineFull { retry_after }
                    .for_client(info.html)
                    .into_response();
            }
            // Redis could not decide: the local room does.
            SharedDecision::Local => {}
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
            if app.room.notes_enabled() && ticket_cookie != Some(waiting.token.as_str()) {
                note_new_ticket(app, &req, &waiting.token);
            }
            if rank.as_u8() > 0 {
                app.room.set_ticket_rank(&waiting.token, rank.as_u8());
            }
            return waiting_response(generation, info, &waiting);
        }
        Decision::Full => {
            let retry_after = generation.config.effective_retry_after();
            return Rejection::QueueFull { retry_after }
                .for_client(info.html)
                .into_response();
        }
        Decision::AddressFull => {
            let retry_after = generation.config.effective_retry_after();
            return Rejection::AddressLineFull { retry_after }
                .for_client(info.html)
                .into_response();
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

/// Notes what a newly queued visitor asked for and with which browser, for the portal's line.
/// Out of line so the common page does not carry it.
#[cold]
fn note_new_ticket<B>(app: &App, req: &Request<B>, token: &str) {
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path(), |pq| pq.as_str());
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    app.room.note_ticket(token, path, user_agent);
}

/// A visitor an operator removed: told so, with its ticket cleared, so its next request joins
/// the line afresh at the back.
fn removed_from_line(generation: &Generation, info: &RequestInfo) -> Response<Body> {
    let mut response = Rejection::RemovedFromLine
        .for_client(info.html)
        .into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        generation.cookies.clear(TICKET, info.conn.tls),
    );
    response
}

/// Whether a request can be a form submission: one of the standard methods that change
/// something. GET and HEAD only read, and any other method (OPTIONS, TRACE, a made-up one) is no
/// form a visitor sends, so it gets no way past the line.
fn is_form_method(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// The gated handler: issue or slide the admission pass (a forged one is charged), proxy with
/// `hold` kept until the response is delivered, then turn the origin's `Concert-Priority` into
/// a grant bound to the pass. `status` is the pass as checked when the request arrived: a
/// second signature check would cost as much again, and a pass valid on arrival is slid even
/// if it ran out while its holder waited for the slot.
///
/// Not an `async fn`: its future would keep `req` beside the proxy's future, which holds it
/// again, and hyper moves every page's future a few times.
fn admitted<'a, B: RequestBody + Unpin + 'a>(
    app: &'a App,
    generation: &'a Generation,
    info: &'a RequestInfo,
    req: Request<ClientBody<B>>,
    hold: SlotHold,
    status: PassStatus,
) -> impl Future<Output = Response<Body>> + 'a {
    let now = unix_now();
    charge_forged_pass(app, info, &status);
    let issued = app
        .pass
        .issue_for_page(&status, now, generation.config.admit_ttl);
    let cookie = issued
        .cookie
        .as_deref()
        .map(|value| pass_cookie(generation, info, value));
    let id = issued.id;
    forward(app, generation, info, req, Some(hold)).map(move |mut response| {
        if let (Some(OriginPriority(value)), Some(id)) =
            (response.extensions_mut().remove::<OriginPriority>(), id)
        {
            apply_grant(app, generation, info, &mut response, &value, &id, now);
        }
        with_cookie(response, cookie)
    })
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
                .set(PRIORITY, &value, max_age, true, info.conn.tls)
        }
        GrantAction::Clear => generation.cookies.clear(PRIORITY, info.conn.tls),
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
            "{{\"hint\":\"keep the {TICKET} cookie and retry to hold your position\",\"queued\":true,\"retry_after_seconds\":{retry_after},\"status_url\":\"{QUEUE_STATUS}\"}}"
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
    generation.cookies.append_room_cookies(
        headers,
        &waiting.token,
        generation.ticket_max_age,
        info.conn.tls,
    );
    response
}
