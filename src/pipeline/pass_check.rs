//! The admission pass as the tiers and the gated stage check it: verified (a forged one
//! charges its client), slid past half its life, and set again on the answer.

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Response, header};

use super::request::RequestInfo;
use crate::abuse::Offense;
use crate::admission::cookies::{ADMIT, read_cookie};
use crate::admission::pass::{PassStatus, unix_now};
use crate::app::{App, Generation};

/// `Set-Cookie` for an admission pass value, with the pass TTL as `Max-Age`.
pub(super) fn pass_cookie(generation: &Generation, info: &RequestInfo, value: &str) -> HeaderValue {
    generation.cookies.set(
        ADMIT,
        value,
        generation.config.admit_ttl.as_secs(),
        true,
        info.conn.tls,
    )
}

/// The pass check of asset and stream requests: verify (charging a forged pass) and, for a
/// valid pass past half its life, the re-signed cookie (same id). Passes are never issued here.
pub(super) fn check_pass(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    headers: &HeaderMap,
) -> (PassStatus, Option<HeaderValue>) {
    let now = unix_now();
    let status = app.pass.verify_cookie(read_cookie(headers, ADMIT), now);
    charge_forged_pass(app, info, &status);
    let slid = status
        .valid()
        .and_then(|pass| app.pass.slide(pass, now, generation.config.admit_ttl))
        .map(|value| pass_cookie(generation, info, &value));
    (status, slid)
}

pub(super) fn charge_forged_pass(app: &App, info: &RequestInfo, status: &PassStatus) {
    if status.is_forged() {
        app.strike(info.client, Offense::ForgedPass);
    }
}

pub(super) fn with_cookie(
    mut response: Response<Body>,
    cookie: Option<HeaderValue>,
) -> Response<Body> {
    if let Some(cookie) = cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}
