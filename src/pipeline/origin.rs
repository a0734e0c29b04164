//! Handing a request to the origin: whether its peer's forwarding headers are believed, the
//! proxy, and event streams that end when the server drains.

use std::sync::atomic::Ordering;

use axum::body::Body;
use http::{Request, Response};

use super::request::RequestInfo;
use crate::app::{App, Generation};
use crate::proxy::{ForwardContext, end_event_stream_on_drain};
use crate::sys::slots::SlotHold;
use crate::wire::body::RequestBody;

/// Hands a request to the origin. `hold` keeps a slot busy until the response is delivered.
pub(super) async fn forward<B: RequestBody>(
    app: &App,
    generation: &Generation,
    info: &RequestInfo,
    req: Request<B>,
    hold: Option<SlotHold>,
) -> Response<Body> {
    let peer_trusted = info
        .conn
        .peer
        .is_some_and(|peer| generation.config.trusted_proxies.contains(peer));
    let ctx = ForwardContext {
        peer: info.conn.peer,
        peer_trusted,
        client: info.client,
        via_tls: info.conn.tls,
        path_and_query: &info.target,
        drain: &app.drain,
    };
    app.counters.proxied_total.fetch_add(1, Ordering::Relaxed);
    let response = generation.proxy.forward(req, ctx, hold).await;
    end_event_stream_on_drain(response, &app.drain)
}
