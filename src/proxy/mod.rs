//! The reverse proxy to the origin: the connection pools, the request and response rewriting,
//! protocol upgrades (WebSocket) tunnelled end to end, and the body guard that keeps the
//! caller's slot busy until the response has been fully delivered.
//!
//! Bodiless requests to a plain-HTTP origin (most pages and assets) are exchanged on the
//! serving task itself ([`direct`]); plain-HTTP requests with a body go through a lean HTTP/1.1
//! pool ([`pool`]); `https` origins (HTTP/2 when ALPN agrees) and protocol upgrades use the
//! general pooled client ([`client`]).
//!
//! Everything streams: the request body goes to the origin as the client sends it, response
//! frames go to the client as the origin produces them.

mod body;
mod client;
mod direct;
mod drain;
mod error;
mod headers;
mod idle;
mod pool;
mod target;
mod upgrade;
mod websocket;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use futures_util::future::Either;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_rustls::{ConfigBuilderExt as _, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect;

use self::body::HeldBody;
use self::client::{UpstreamClient, pooled_client, system_tls_config, tcp_connector, tls_builder};
use self::direct::{DirectBody, DirectError, DirectPool, RequestHead};
use self::error::UpstreamFailure;
use self::headers::RequestFacts;
use self::pool::{Http1Pool, Lease, PLAIN_HTTP_POOL};
use self::target::Target;
use crate::sys::coarse_clock;
use crate::sys::slots::SlotHold;
use crate::wire::body::RequestBody;
use crate::wire::names::CONCERT_PRIORITY;

pub(crate) use drain::{Drain, end_event_stream_on_drain};
pub(crate) use error::{FailureCounts, Fault, ProxyError};

/// Bytes reserved in a request head for the headers the proxy adds (`Host`,
/// `X-Forwarded-For`, `-Host` and `-Proto`, `X-Real-IP`); more only costs a regrowth.
const ADDED_HEADER_BYTES: usize = 192;

/// How soon an upload found below the minimum rate, while the origin rather than the client
/// was holding it up, is looked at again.
const UPLOAD_RATE_RECHECK: Duration = Duration::from_secs(1);

/// How to reach the origin.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Scheme `http` or `https`, an authority, and optionally a base path (and query) that
    /// every request path is appended to.
    pub upstream: Uri,
    /// Send the client's `Host` to the origin instead of the upstream's host:port.
    pub preserve_host: bool,
    /// Longest wait for the origin's response headers; zero means no limit.
    pub upstream_timeout: Duration,
    /// Slowest average an upload may keep up once `upstream_timeout` has passed, in bytes a
    /// second; zero means no minimum (and so does a zero `upstream_timeout`).
    pub upload_min_rate: u64,
    /// Where failed exchanges are counted; shared by every proxy of the process.
    pub failures: Arc<FailureCounts>,
}

/// What the caller knows about the request that the proxy cannot see in it.
#[derive(Debug, Clone)]
pub(crate) struct ForwardContext<'a> {
    /// The socket peer, IPv4-mapped addresses unmapped; `None` when it could not be read.
    pub peer: Option<IpAddr>,
    /// Whether the peer is one of the trusted proxies (its forwarding headers are believed).
    pub peer_trusted: bool,
    /// The client as the pipeline resolved it, for `X-Real-IP`.
    pub client: Option<IpAddr>,
    /// Whether the client reached Concert over its own TLS listener.
    pub via_tls: bool,
    /// The normalised path plus the original query: exactly what the origin must receive.
    pub path_and_query: &'a str,
    /// The server's stop, which WebSocket tunnels follow.
    pub drain: &'a Drain,
}

/// The origin's `Concert-Priority` header (its last line). The proxy removes the header from
/// every response and leaves it here, in the response's extensions, which never reach the
/// client: only the gated handler turns it into a grant.
#[derive(Debug, Clone)]
pub(crate) struct OriginPriority(pub HeaderValue);

/// What every origin response head gets before it goes to the client: the proxy's own HTTP
/// version (RFC 9110 §6.2; an HTTP/1.0 origin must not make the client's connection HTTP/1.0),
/// and the origin's `Concert-Priority` moved out of sight.
fn as_own_response(parts: &mut http::response::Parts) {
    parts.version = Version::HTTP_11;
    take_origin_priority(parts);
}

fn take_origin_priority(parts: &mut http::response::Parts) {
    let last = parts
        .headers
        .get_all(&CONCERT_PRIORITY)
        .iter()
        .next_back()
        .cloned();
    if let Some(value) = last {
        parts.headers.remove(&CONCERT_PRIORITY);
        parts.extensions.insert(OriginPriority(value));
    }
}

/// A reverse proxy to one origin. Cheap to share behind an `Arc`; clients and their
/// connection pools live as long as it does.
pub struct Proxy {
    /// For `http` origins: the connections bodiless requests are exchanged on in the caller's
    /// task.
    direct: Option<Arc<DirectPool>>,
    /// For `http` origins: the pool requests with a body go through.
    http1: Option<Arc<Http1Pool>>,
    client: UpstreamClient,
    /// For `https` origins: a client that only offers HTTP/1.1, because protocol upgrades do
    /// not exist in HTTP/2 and ALPN would otherwise pick it.
    upgrade_client: Option<UpstreamClient>,
    target: Target,
    preserve_host: bool,
    header_timeout: Option<Duration>,
    upload_min_rate: u64,
    failures: Arc<FailureCounts>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("upstream_host", &self.target.host)
            .field("preserve_host", &self.preserve_host)
            .field("header_timeout", &self.header_timeout)
            .field("upload_min_rate", &self.upload_min_rate)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Builds a proxy trusting the system's root certificates for `https` origins (Mozilla's
    /// bundled roots when the system has none).
    pub fn new(settings: ProxySettings) -> Result<Proxy, ProxyError> {
        let target = Target::new(&settings.upstream)?;
        let tls = if target.is_https {
            system_tls_config()?
        } else {
            // Never used for a plain-HTTP origin; the bundled roots are the cheapest to build.
            tls_builder()?.with_webpki_roots().with_no_client_auth()
        };
        Proxy::build(settings, target, tls)
    }

    /// Builds a proxy with a caller-supplied TLS client configuration (private CAs, tests).
    /// Its ALPN list is replaced by the proxy's own.
    pub fn with_tls_config(
        settings: ProxySettings,
        tls: rustls::ClientConfig,
    ) -> Result<Proxy, ProxyError> {
        let target = Target::new(&settings.upstream)?;
        Proxy::build(settings, target, tls)
    }

    fn build(
        settings: ProxySettings,
        target: Target,
        mut tls: rustls::ClientConfig,
    ) -> Result<Proxy, ProxyError> {
        tls.alpn_protocols.clear();
        let main = HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp_connector());
        let client = pooled_client(main);
        let upgrade_client = target.is_https.then(|| {
            let http1_only = HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http()
                .enable_http1()
                .wrap_connector(tcp_connector());
            pooled_client(http1_only)
        });
        let http1 = (!target.is_https)
            .then(|| Arc::new(Http1Pool::new(&target.connect_addr, PLAIN_HTTP_POOL)));
        let direct = (!target.is_https).then(|| {
            Arc::new(DirectPool::new(
                &target.connect_addr,
                PLAIN_HTTP_POOL,
                Arc::clone(&settings.failures),
            ))
        });
        Ok(Proxy {
            direct,
            http1,
            client,
            upgrade_client,
            target,
            preserve_host: settings.preserve_host,
            header_timeout: (!settings.upstream_timeout.is_zero())
                .then_some(settings.upstream_timeout),
            upload_min_rate: settings.upload_min_rate,
            failures: settings.failures,
        })
    }

    /// Sends the request to the origin and returns the origin's response for the client.
    ///
    /// `hold` stays alive until the response body has been delivered or the client has gone,
    /// and for an upgraded connection until the tunnel closes. A failed exchange is counted by
    /// whose fault it was, logged, and answered: 502 for the origin's, 400 or 408 for the
    /// client's.
    ///
    /// Not an `async fn`: the future of one keeps its arguments for as long as it runs, beside
    /// the future it awaits, which holds them again; every page's future would carry (and
    /// hyper move) the request twice more.
    pub(crate) fn forward<'a, B: RequestBody + 'a>(
        &'a self,
        mut req: Request<B>,
        ctx: ForwardContext<'a>,
        hold: Option<SlotHold>,
    ) -> Either<
        impl Future<Output = Response<Body>> + 'a,
        Pin<Box<impl Future<Output = Response<Body>> + 'a>>,
    > {
        let upgrade = headers::requested_upgrade(req.headers());
        let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
        let (parts, body) = req.into_parts();
        if upgrade.is_none()
            && let Some(pool) = &self.direct
            && hyper::body::Body::is_end_stream(&body)
        {
            return Either::Left(self.forward_direct(pool, parts, ctx, hold));
        }
        // Boxed: this path's future is several times the direct one's, and every request's
        // future would otherwise carry (and move) room for it. Only this path needs the body,
        // so only it pays for boxing it.
        let (body, progress) = body::ClientBody::watch(body);
        let body = (Body::new(body), progress);
        Either::Right(Box::pin(self.forward_general(
            parts,
            body,
            upgrade,
            client_upgrade,
            ctx,
            hold,
        )))
    }

    /// [`Proxy::forward`] through a pooled client: upgrades, requests with a body, `https`.
    async fn forward_general(
        &self,
        parts: http::request::Parts,
        (body, progress): (Body, Arc<body::ClientBodyProgress>),
        upgrade: Option<HeaderValue>,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
        ctx: ForwardContext<'_>,
        hold: Option<SlotHold>,
    ) -> Response<Body> {
        // Upgrades need the general client, which hands the connection over after a 101.
        let pooled = match (&self.http1, &upgrade) {
            (Some(pool), None) => Some(pool),
            _ => None,
        };
        let uri = match pooled {
            Some(_) => self.target.origin_form_for(ctx.path_and_query),
            None => self.target.uri_for(ctx.path_and_query),
        };
        let uri = match uri {
            Ok(uri) => uri,
            Err(_) => return self.failed(&parts.method, &ctx, UpstreamFailure::Unforwardable),
        };
        let requested_protocol = upgrade.clone();
        let facts = self.request_facts(&ctx, &parts.uri, upgrade);
        let mut headers = headers::rewrite_request(parts.headers, facts);
        // The shared client puts a connection back in its pool before the answer is seen here,
        // so after `HEAD` (see `headers::may_trail_a_body`) the origin is asked to close it
        // instead; the lean pool below drops its lease.
        if pooled.is_none() && requested_protocol.is_none() && parts.method == Method::HEAD {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }

        let method = parts.method;
        let mut outgoing = Request::new(body);
        *outgoing.method_mut() = method.clone();
        *outgoing.uri_mut() = uri;
        // Origins always get HTTP/1.1 semantics; the pool speaks HTTP/2 to them when ALPN says so.
        *outgoing.version_mut() = Version::HTTP_11;
        *outgoing.headers_mut() = headers;
        // For the shared client's connection, which may have to be kept out of its pool once
        // the answer is known.
        let origin_conn = pooled
            .is_none()
            .then(|| connect::capture_connection(&mut outgoing));

        let client = match (&requested_protocol, &self.upgrade_client) {
            (Some(_), Some(http1_only)) => http1_only,
            _ => &self.client,
        };
        let sent = async {
            match pooled {
                Some(pool) => pool
                    .send(outgoing)
                    .await
                    .map(|(response, sender)| (response, Some(Lease::new(pool, sender))))
                    .map_err(UpstreamFailure::from),
                None => client
                    .request(outgoing)
                    .await
                    .map(|response| (response, None))
                    .map_err(UpstreamFailure::from),
            }
        };
        let (mut response, lease) =
            match self.after_body_within_header_timeout(sent, &progress).await {
                Ok(answered) => answered,
                Err(failure) => {
                    // Whatever the exchange saw, a body the client broke is the client's doing.
                    let failure = match failure {
                        failure if progress.failed() => {
                            UpstreamFailure::RequestBodyFailed(Box::new(failure))
                        }
                        UpstreamFailure::HeaderTimeout(_) if progress.awaiting_client() => {
                            UpstreamFailure::UploadStalled
                        }
                        failure => failure,
                    };
                    return self.failed(&method, &ctx, failure);
                }
            };

        // The client library takes 100..=999, but HTTP ends at 599 (RFC 9110 §15).
        if response.status().as_u16() > 599 {
            let status = response.status().as_u16();
            return self.failed(&method, &ctx, UpstreamFailure::StatusOutOfRange(status));
        }
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            let switched_to = response.headers().get(header::UPGRADE);
            let agreed = matches!(
                (&requested_protocol, switched_to),
                (Some(asked), Some(got)) if asked.as_bytes().eq_ignore_ascii_case(got.as_bytes())
            );
            let Some(client_side) = client_upgrade.filter(|_| agreed) else {
                return self.failed(&method, &ctx, UpstreamFailure::UnaskedSwitch);
            };
            let origin_side = hyper::upgrade::on(&mut response);
            headers::strip_response(response.headers_mut(), true);
            let tunnel = upgrade::tunnel(client_side, origin_side, hold);
            if requested_protocol
                .as_ref()
                .is_some_and(|asked| asked.as_bytes().eq_ignore_ascii_case(b"websocket"))
            {
                ctx.drain.track_websocket(tunnel);
            } else {
                tokio::spawn(tunnel.plain());
            }
            let (mut parts, _) = response.into_parts();
            as_own_response(&mut parts);
            return Response::from_parts(parts, Body::empty());
        }

        let (mut parts, incoming) = response.into_parts();
        let trails = headers::may_trail_a_body(&method, parts.status, &parts.headers);
        if trails
            && parts.version != Version::HTTP_2
            && let Some(captured) = &origin_conn
            && let Some(connected) = captured.connection_metadata().as_ref()
        {
            connected.poison();
        }
        let origin_closes = headers::strip_response(&mut parts.headers, false);
        // An origin that says it closes (or speaks HTTP/1.0) does not get the connection reused,
        // nor does one whose answer may be followed by a stray body.
        let lease =
            lease.filter(|_| !origin_closes && !trails && parts.version == Version::HTTP_11);
        as_own_response(&mut parts);
        let failures = Arc::clone(&self.failures);
        Response::from_parts(
            parts,
            Body::new(HeldBody::new(incoming, hold, lease, failures)),
        )
    }

    /// What the header rewrite needs to know beyond the headers themselves.
    fn request_facts<'a>(
        &'a self,
        ctx: &ForwardContext<'_>,
        uri: &'a Uri,
        upgrade: Option<HeaderValue>,
    ) -> RequestFacts<'a> {
        RequestFacts {
            peer: ctx.peer,
            peer_trusted: ctx.peer_trusted,
            client: ctx.client,
            via_tls: ctx.via_tls,
            upstream_host: &self.target.host,
            preserve_host: self.preserve_host,
            uri_authority: uri.authority().map(|authority| authority.as_str()),
            upgrade,
        }
    }

    /// The `-upstream-timeout` wait for a request with a body: the limit counts from the
    /// body's last movement, so it bounds the wait for the response head once the body is
    /// sent (as a transport with a response-header timeout does) and a stalled upload. A slow upload is cut off
    /// only below the minimum average rate, and only while it is the client that keeps the
    /// body waiting (an origin reading slowly is not the client's fault).
    async fn after_body_within_header_timeout<T>(
        &self,
        answer: impl Future<Output = Result<T, UpstreamFailure>>,
        progress: &body::ClientBodyProgress,
    ) -> Result<T, UpstreamFailure> {
        let Some(limit) = self.header_timeout else {
            return answer.await;
        };
        tokio::pin!(answer);
        loop {
            let now = tokio::time::Instant::now();
            let stalled_at = progress.last_moved() + limit;
            let wake = match progress.too_slow_at(limit, self.upload_min_rate) {
                Some(too_slow_at) if too_slow_at <= now => {
                    if progress.awaiting_client() {
                        return Err(UpstreamFailure::UploadTooSlow);
                    }
                    stalled_at.min(now + UPLOAD_RATE_RECHECK)
                }
                Some(too_slow_at) => stalled_at.min(too_slow_at),
                None => stalled_at,
            };
            if stalled_at <= now {
                return Err(UpstreamFailure::HeaderTimeout(limit));
            }
            tokio::select! {
                answered = &mut answer => return answered,
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// [`Proxy::forward`] for a bodiless request to a plain-HTTP origin.
    async fn forward_direct(
        &self,
        pool: &Arc<DirectPool>,
        parts: http::request::Parts,
        ctx: ForwardContext<'_>,
        hold: Option<SlotHold>,
    ) -> Response<Body> {
        let facts = self.request_facts(&ctx, &parts.uri, None);
        let method = parts.method;
        // The client's headers plus room for the few the proxy adds (Host, X-Forwarded-*).
        let header_bytes = direct::header_bytes(&parts.headers) + ADDED_HEADER_BYTES;
        let Some(mut head) =
            RequestHead::start(&method, &self.target, ctx.path_and_query, header_bytes)
        else {
            return self.failed(&method, &ctx, UpstreamFailure::Unforwardable);
        };
        headers::rewrite_request_into(parts.headers, facts, &mut head);
        let head = head.finish();
        // Counted from the coarse clock: a limit of seconds does not need a precise read. Its
        // reading may be a tick ahead, so a tick is added: the limit is never cut short.
        let deadline = self
            .header_timeout
            .map(|limit| coarse_clock::tokio_instant() + limit + coarse_clock::max_error());
        let answered = match (
            pool.send(&method, &head, deadline).await,
            self.header_timeout,
        ) {
            (Err(DirectError::TimedOut), Some(limit)) => Err(UpstreamFailure::HeaderTimeout(limit)),
            (sent, _) => sent.map_err(UpstreamFailure::from),
        };
        let answer = match answered {
            Ok(answer) => answer,
            Err(failure) => return self.failed(&method, &ctx, failure),
        };
        // The direct pool's answer comes without hop-by-hop headers already.
        let (mut head, body) = DirectBody::new(answer, pool, hold);
        as_own_response(&mut head);
        Response::from_parts(head, Body::new(body))
    }

    /// Counts, logs and answers a failed exchange (see [`error::answer_failure`]).
    fn failed(
        &self,
        method: &http::Method,
        ctx: &ForwardContext<'_>,
        failure: UpstreamFailure,
    ) -> Response<Body> {
        error::answer_failure(&self.failures, method, ctx.path_and_query, &failure)
    }
}
