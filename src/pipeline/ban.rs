//! Stage 3: a banned client is answered here, before any route, on every path.

use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderMap, Response, StatusCode, header};

use super::request::RequestInfo;
use crate::abuse::BanLength;
use crate::admission::cookies::{TICKET, read_cookie};
use crate::app::{App, Generation};
use crate::endpoints::queue_status;
use crate::paths::reserved::QUEUE_STATUS;
use crate::respond::Rejection;
use crate::respond::values::json_response;

/// The answer to a banned client. A waiting page's status poll is told `ready` so the page
/// reloads into the block notice; anything else gets the ban (429 or 403) and loses its
/// `room_ticket`, so the client rejoins at the back once the ban ends. With a shared line the
/// place that ticket held there is given up too, so it is never called for a client shut out.
pub(super) fn answer(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    headers: &HeaderMap,
    ban: BanLength,
) -> Response<Body> {
    if info.path() == QUEUE_STATUS {
        return json_response(StatusCode::OK, queue_status::READY.to_string());
    }
    let mut response = Rejection::Banned(ban).for_client(info.html).into_response();
    if let Some(ticket) = read_cookie(headers, TICKET) {
        // Only a ticket this site sealed: a banned client's made-up ones cost Redis nothing.
        if let Some(cluster) = &app.cluster
            && app.room.recognises(ticket)
        {
            cluster.line.settle(ticket);
        }
        response.headers_mut().append(
            header::SET_COOKIE,
            generation.cookies.set(TICKET, "", 0, true, info.conn.tls),
        );
    }
    response
}
