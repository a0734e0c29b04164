//! Stage 6's first step for a request with a body: the body is taken in whole (see
//! [`crate::wire::intake`]) before the request may wait for or hold a page slot, so the
//! origin's slots never wait on a client's upload. The origin then gets the body at once, with
//! its `Content-Length`. Paths in `-unbuffered-upload-paths` skip this and stream.

use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderValue, Request, Response, header};

use super::request::RequestInfo;
use crate::app::{App, Generation};
use crate::respond::Rejection;
use crate::wire::body::RequestBody;
use crate::wire::client_body::ClientBody;
use crate::wire::intake::{IntakeError, IntakeLimits, take_in};

/// Whether the request's body is taken in before the room: it has one, and its path does not
/// stream. A bodiless request costs one check.
pub(super) fn takes_in<B: RequestBody + Unpin>(
    generation: &Generation,
    info: &RequestInfo,
    req: &Request<ClientBody<B>>,
) -> bool {
    !hyper::body::Body::is_end_stream(req.body())
        && !generation.unbuffered_uploads.contains(info.path())
}

/// Takes the request's body in, in place (the request is not moved, as it is on every page's
/// path), or answers the refusal: 413 over `-max-body`, 408 past the deadlines, 400 for a body
/// that broke off.
pub(super) async fn take_in_body<B: RequestBody + Unpin>(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: &mut Request<ClientBody<B>>,
) -> Result<(), Response<Body>> {
    let config = &generation.config;
    let limits = IntakeLimits::starting_now(
        config.max_body,
        config.body_progress_timeout,
        config.upload_timeout,
    );
    let body = std::mem::replace(req.body_mut(), ClientBody::Empty);
    let taken = match take_in(body, limits, &app.spool, config.upload_disk_limit).await {
        Ok(taken) => taken,
        Err(error) => return Err(refuse(info, &error)),
    };
    let headers = req.headers_mut();
    // The origin gets the body whole: with its length, as nginx forwards a buffered body, and
    // without `Expect`, whose handshake was Concert's.
    headers.remove(header::TRANSFER_ENCODING);
    headers.remove(header::EXPECT);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(taken.len()));
    *req.body_mut() = ClientBody::Taken(Box::new(taken));
    Ok(())
}

fn refuse(info: &RequestInfo, error: &IntakeError) -> Response<Body> {
    match error {
        IntakeError::Spool(io) => tracing::error!(path = info.path(), "{error}: {io}"),
        _ => tracing::debug!(path = info.path(), "{error}"),
    }
    Rejection::from(error).for_client(info.html).into_response()
}
