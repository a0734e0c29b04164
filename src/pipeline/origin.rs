//! Handing a request to the origin: whether its peer's forwarding headers are believed, the
//! proxy, and event streams that end when the server drains.

use std::sync::atomic::Ordering;

use axum::body::Body;
use futures_util::FutureExt as _;
use http::{Request, Response};

use super::request::RequestInfo;
use crate::app::{App, Generation};
use crate::proxy::{ForwardContext, end_event_stream_on_drain};
use crate::sys::slots::SlotHold;
use crate::wire::body::RequestBody;

/// Hands a request to the origin. `hold` keeps a slot busy until the response is delivered.
///
/// Not an `async fn`: one would keep `req` in its own future beside the proxy's future, which
/// holds it too, and every page's future would carry (and hyper move) the request twice.
pub(super) fn forward<'a, B: RequestBody + 'a>(
    app: &'a App,
    generation: &'a Generation,
    info: &'a RequestInfo,
    req: Request<B>,
    hold: Option<SlotHold>,
) -> impl Future<Output = Response<Body>> + 'a {
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
    info.proxied.store(true, Ordering::Relaxed);
    // A combinator rather than an `async` block, which would hold the proxy's future twice:
    // once as captured, once as awaited.
    generation.proxy.forward(req, ctx, hold).map(|response| {
        // The origin's own 5xx and Concert's answers for an origin that failed.
        if response.status().is_server_error() {
            app.traffic.origin_error();
        }
        end_event_stream_on_drain(response, &app.drain)
    })
}
