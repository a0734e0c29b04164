//! Keep-alive connections to a plain-HTTP origin for requests with a body, spoken to with
//! hyper's HTTP/1.1 connection API directly (its connection task can take an early answer while
//! the upload goes on).
//!
//! The general-purpose pooled client costs more per request than the exchange itself on a fast
//! origin (pool-key hashing, a connect future built per request, a task spawned per response
//! to notice the connection going idle). Here a connection is lent out for one exchange and
//! put back by whoever sees the end of its response body, so the hot path is one short lock to
//! take a connection and one to return it. Idle connections are reused newest first, which
//! keeps the busy set small and lets the oldest ones age out.

use std::sync::Arc;
use std::time::Duration;

use super::idle::IdleList;
use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Time allowed to open a TCP connection to the origin.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// TCP keep-alive probe interval on origin connections.
pub(super) const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// How long an idle pooled connection is kept.
pub(super) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections kept per origin (all workers together).
pub(super) const POOL_MAX_IDLE_PER_HOST: usize = 256;

/// The limits of the plain-HTTP pools in production.
pub(super) const PLAIN_HTTP_POOL: PoolLimits = PoolLimits {
    max_idle: POOL_MAX_IDLE_PER_HOST,
    idle_timeout: POOL_IDLE_TIMEOUT,
    connect_timeout: CONNECT_TIMEOUT,
    tcp_keepalive: TCP_KEEPALIVE,
};

/// Sends requests on one origin connection.
pub(super) type Sender = http1::SendRequest<Body>;

/// The origin could not be asked, or did not answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum PoolError {
    #[error("connecting to {addr} failed")]
    Connect {
        addr: Arc<str>,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to {addr} took longer than {limit:?}")]
    ConnectTimeout { addr: Arc<str>, limit: Duration },
    #[error("exchange with the origin failed")]
    Exchange(#[source] hyper::Error),
}

/// How the pool behaves; the proxy uses one fixed set, tests shrink it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PoolLimits {
    /// Idle connections kept; a connection returned beyond this is closed.
    pub max_idle: usize,
    /// A connection idle this long is not used again.
    pub idle_timeout: Duration,
    /// Time allowed to open the TCP connection.
    pub connect_timeout: Duration,
    /// TCP keep-alive probe interval.
    pub tcp_keepalive: Duration,
}

/// Idle HTTP/1.1 connections to one origin.
pub(super) struct Http1Pool {
    /// `host:port` to connect to.
    addr: Arc<str>,
    limits: PoolLimits,
    idle: IdleList<Sender>,
}

/// A connection lent out for one exchange. [`Lease::give_back`] returns it once the response
/// has been read to its end; dropping it instead closes the connection when the exchange ends.
pub(super) struct Lease {
    pool: Arc<Http1Pool>,
    sender: Sender,
}

impl Lease {
    pub(super) fn new(pool: &Arc<Http1Pool>, sender: Sender) -> Lease {
        Lease {
            pool: Arc::clone(pool),
            sender,
        }
    }

    pub(super) fn give_back(self) {
        self.pool.put_back(self.sender);
    }
}

impl Http1Pool {
    pub(super) fn new(addr: &str, limits: PoolLimits) -> Http1Pool {
        Http1Pool {
            addr: Arc::from(addr),
            limits,
            idle: IdleList::new(limits.max_idle, limits.idle_timeout),
        }
    }

    /// Sends `req` on an idle connection, or on a new one if none is usable, and returns the
    /// response head with the connection that carries its body.
    ///
    /// A pooled connection found dead before the request was written (the origin closed it
    /// while idle) is replaced by a new connection once; once the request may have reached the
    /// origin it is never sent again.
    pub(super) async fn send(
        &self,
        req: Request<Body>,
    ) -> Result<(Response<Incoming>, Sender), PoolError> {
        let mut req = req;
        if let Some(mut sender) = self.checkout().await {
            match sender.try_send_request(req).await {
                Ok(response) => return Ok((response, sender)),
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) => {
                        tracing::debug!(error = %failed.error(), "proxy: idle origin connection was dead, reconnecting");
                        req = unsent;
                    }
                    None => return Err(PoolError::Exchange(failed.into_error())),
                },
            }
        }
        // Boxed: connecting is rare and its future large, and every request's future would
        // otherwise carry (and move) room for it.
        let mut sender = Box::pin(self.connect()).await?;
        match sender.try_send_request(req).await {
            Ok(response) => Ok((response, sender)),
            Err(failed) => Err(PoolError::Exchange(failed.into_error())),
        }
    }

    /// The newest idle connection that can take a request now, if any.
    async fn checkout(&self) -> Option<Sender> {
        loop {
            let sender = self.idle.pop_newest()?;
            if sender.is_ready() {
                return Some(sender);
            }
            if sender.is_closed() {
                continue;
            }
            // Given back at the end of its response body, its connection task may not have
            // noticed the exchange is over yet: give it one turn rather than wait on it (a
            // request body still uploading could keep it busy for long).
            tokio::task::yield_now().await;
            if sender.is_ready() {
                return Some(sender);
            }
        }
    }

    /// Takes a connection back after its exchange; closed ones and those beyond the idle cap
    /// are dropped, which closes them.
    fn put_back(&self, sender: Sender) {
        if !sender.is_closed() {
            self.idle.push(sender);
        }
    }

    /// Idle connections currently held.
    #[cfg(test)]
    pub(super) fn idle_count(&self) -> usize {
        self.idle.len()
    }

    async fn connect(&self) -> Result<Sender, PoolError> {
        let stream = connect_tcp(&self.addr, &self.limits).await?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(PoolError::Exchange)?;
        tokio::spawn(async move {
            if let Err(err) = connection.with_upgrades().await {
                tracing::debug!(error = %err, "proxy: origin connection ended with an error");
            }
        });
        Ok(sender)
    }
}

/// Opens a TCP connection to the origin within the pool's connect timeout, tuned for small
/// request/response exchanges.
pub(super) async fn connect_tcp(
    addr: &Arc<str>,
    limits: &PoolLimits,
) -> Result<TcpStream, PoolError> {
    let limit = limits.connect_timeout;
    let stream = match tokio::time::timeout(limit, TcpStream::connect(&**addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(source)) => {
            return Err(PoolError::Connect {
                addr: Arc::clone(addr),
                source,
            });
        }
        Err(_) => {
            return Err(PoolError::ConnectTimeout {
                addr: Arc::clone(addr),
                limit,
            });
        }
    };
    // Small requests must leave at once; keep-alive probes find origins that vanished.
    let tuned = stream.set_nodelay(true).and_then(|()| {
        let keepalive = socket2::TcpKeepalive::new().with_time(limits.tcp_keepalive);
        socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive)
    });
    if let Err(err) = tuned {
        tracing::debug!(error = %err, "proxy: could not tune the origin socket");
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http::header::{self, HeaderValue};
    use http_body_util::BodyExt as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;

    const LIMITS: PoolLimits = PoolLimits {
        max_idle: 256,
        idle_timeout: Duration::from_secs(90),
        connect_timeout: Duration::from_secs(5),
        tcp_keepalive: Duration::from_secs(30),
    };

    /// What a raw test origin does on each connection once it has answered `answers` times.
    #[derive(Clone, Copy)]
    enum Then {
        /// Close at once, as an origin's keep-alive timeout would.
        Close,
        /// Read one more request, then close without answering.
        ReadAndHangUp,
    }

    /// A raw origin answering requests with `ok`, counting what it sees.
    struct CountingOrigin {
        addr: String,
        accepted: Arc<AtomicUsize>,
        requests: Arc<AtomicUsize>,
        /// Connections not yet closed by either side.
        open: Arc<AtomicUsize>,
    }

    async fn counting_origin(answers: usize, then: Then) -> CountingOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = CountingOrigin {
            addr: listener.local_addr().unwrap().to_string(),
            accepted: Arc::default(),
            requests: Arc::default(),
            open: Arc::default(),
        };
        let accepted = Arc::clone(&origin.accepted);
        let requests = Arc::clone(&origin.requests);
        let open = Arc::clone(&origin.open);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                open.fetch_add(1, Ordering::SeqCst);
                let (requests, open) = (Arc::clone(&requests), Arc::clone(&open));
                tokio::spawn(async move {
                    serve_raw(&mut stream, answers, then, &requests).await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        origin
    }

    async fn serve_raw(stream: &mut TcpStream, answers: usize, then: Then, requests: &AtomicUsize) {
        for _ in 0..answers {
            if !read_request(stream).await {
                return;
            }
            requests.fetch_add(1, Ordering::SeqCst);
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            if stream.write_all(answer).await.is_err() {
                return;
            }
        }
        if let Then::ReadAndHangUp = then
            && read_request(stream).await
        {
            requests.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Reads one bodiless request (up to its blank line); false when the peer closed.
    async fn read_request(stream: &mut TcpStream) -> bool {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            match stream.read(&mut byte).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => head.push(byte[0]),
            }
        }
        true
    }

    fn get() -> Request<Body> {
        let mut req = Request::new(Body::empty());
        *req.uri_mut() = "/".parse().unwrap();
        req.headers_mut()
            .insert(header::HOST, HeaderValue::from_static("origin"));
        req
    }

    /// One exchange through the pool, reading the body and giving the connection back.
    async fn exchange(pool: &Arc<Http1Pool>) {
        let (response, sender) = pool.send(get()).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
        Lease::new(pool, sender).give_back();
    }

    /// Polls (boundedly) until `condition` holds.
    async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
        for _ in 0..300 {
            if condition() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for: {what}");
    }

    #[tokio::test]
    async fn sequential_exchanges_share_one_connection() {
        let origin = counting_origin(usize::MAX, Then::Close).await;
        let pool = Arc::new(Http1Pool::new(&origin.addr, LIMITS));
        for _ in 0..20 {
            exchange(&pool).await;
        }
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(origin.requests.load(Ordering::SeqCst), 20);
        assert_eq!(pool.idle_count(), 1);
    }

    #[tokio::test]
    async fn connection_closed_by_the_origin_while_idle_is_replaced() {
        let origin = counting_origin(1, Then::Close).await;
        let pool = Arc::new(Http1Pool::new(&origin.addr, LIMITS));
        for round in 1..=5 {
            exchange(&pool).await;
            assert_eq!(origin.accepted.load(Ordering::SeqCst), round);
            eventually("the origin closed its side", || {
                origin.open.load(Ordering::SeqCst) == 0
            })
            .await;
        }
    }

    #[tokio::test]
    async fn request_queued_on_a_connection_that_dies_is_sent_on_a_new_one() {
        let origin = counting_origin(usize::MAX, Then::Close).await;
        let pool = Arc::new(Http1Pool::new(&origin.addr, LIMITS));
        // A connection that goes idle and ready, then dies as soon as a request is queued on
        // it, before writing anything: what an origin closing an idle connection looks like
        // when the close races the next request.
        let stream = TcpStream::connect(&origin.addr).await.unwrap();
        let (sender, mut connection) = http1::handshake::<_, Body>(TokioIo::new(stream))
            .await
            .unwrap();
        let kill = Arc::new(tokio::sync::Notify::new());
        let killed = Arc::clone(&kill);
        tokio::spawn(async move {
            tokio::select! {
                biased;
                () = killed.notified() => drop(connection),
                _ = &mut connection => {}
            }
        });
        eventually("the connection is ready", || sender.is_ready()).await;
        pool.put_back(sender);
        kill.notify_one();
        exchange(&pool).await;
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 2);
        assert_eq!(origin.requests.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn request_the_origin_may_have_seen_is_never_retried() {
        let origin = counting_origin(1, Then::ReadAndHangUp).await;
        let pool = Arc::new(Http1Pool::new(&origin.addr, LIMITS));
        exchange(&pool).await;
        let failed = pool.send(get()).await;
        assert!(matches!(failed, Err(PoolError::Exchange(_))));
        assert_eq!(origin.requests.load(Ordering::SeqCst), 2);
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn idle_cap_closes_the_surplus() {
        let origin = counting_origin(usize::MAX, Then::Close).await;
        let limits = PoolLimits {
            max_idle: 3,
            ..LIMITS
        };
        let pool = Arc::new(Http1Pool::new(&origin.addr, limits));
        // Eight exchanges at once need eight connections.
        let mut busy = Vec::new();
        for _ in 0..8 {
            busy.push(pool.send(get()).await.unwrap());
        }
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 8);
        for (response, sender) in busy {
            response.into_body().collect().await.unwrap();
            Lease::new(&pool, sender).give_back();
        }
        assert_eq!(pool.idle_count(), 3);
        eventually("the surplus connections closed", || {
            origin.open.load(Ordering::SeqCst) == 3
        })
        .await;
        for _ in 0..10 {
            exchange(&pool).await;
        }
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 8);
    }

    #[tokio::test]
    async fn expired_idle_connections_are_not_reused() {
        let origin = counting_origin(usize::MAX, Then::Close).await;
        let limits = PoolLimits {
            idle_timeout: Duration::ZERO,
            ..LIMITS
        };
        let pool = Arc::new(Http1Pool::new(&origin.addr, limits));
        for _ in 0..3 {
            exchange(&pool).await;
        }
        assert_eq!(origin.accepted.load(Ordering::SeqCst), 3);
        assert_eq!(pool.idle_count(), 1);
        eventually("the expired connections closed", || {
            origin.open.load(Ordering::SeqCst) == 1
        })
        .await;
    }

    #[tokio::test]
    async fn dropped_lease_is_not_pooled() {
        let origin = counting_origin(usize::MAX, Then::Close).await;
        let pool = Arc::new(Http1Pool::new(&origin.addr, LIMITS));
        let (response, sender) = pool.send(get()).await.unwrap();
        drop(Lease::new(&pool, sender));
        drop(response);
        assert_eq!(pool.idle_count(), 0);
        eventually("the connection closed", || {
            origin.open.load(Ordering::SeqCst) == 0
        })
        .await;
    }

    #[tokio::test]
    async fn refused_connection_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let pool = Http1Pool::new(&addr, LIMITS);
        assert!(matches!(
            pool.send(get()).await,
            Err(PoolError::Connect { .. })
        ));
    }
}
