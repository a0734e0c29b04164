//! Why the proxy could not be built, and why a request got no usable answer from the origin,
//! with whose fault that was. Every failure is counted by fault, logged, and answered through
//! [`Rejection`], so a 502 says "the origin" and a 400 or 408 says "the client" in the metrics
//! as well as in the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use http::Response;

use super::direct::DirectError;
use super::pool::PoolError;
use crate::respond::Rejection;

/// The proxy cannot be built from these settings.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("upstream {0:?} must be an http:// or https:// URL")]
    Scheme(String),
    #[error("upstream {0:?} has no valid host")]
    NoHost(String),
    #[error("TLS client setup failed: {0}")]
    Tls(#[from] rustls::Error),
}

/// Whose fault a failed exchange with the origin was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The client's request could not be sent on: a broken, stalled or too slow upload, or a
    /// target the origin's URI cannot hold.
    Client,
    /// The origin refused, timed out, garbled its answer or cut it short.
    Origin,
    /// Concert's own host ran out of what a connection needs (descriptors, ports, memory).
    Concert,
}

impl Fault {
    const ALL: [Fault; 3] = [Fault::Client, Fault::Origin, Fault::Concert];

    /// The name in logs and metric labels.
    pub const fn label(self) -> &'static str {
        match self {
            Fault::Client => "client",
            Fault::Origin => "origin",
            Fault::Concert => "concert",
        }
    }

    const fn index(self) -> usize {
        match self {
            Fault::Client => 0,
            Fault::Origin => 1,
            Fault::Concert => 2,
        }
    }
}

/// Failed exchanges with the origin, by fault. One set serves every proxy a process builds, so
/// the counts run on across a change of upstream.
#[derive(Debug, Default)]
pub struct FailureCounts([AtomicU64; Fault::ALL.len()]);

impl FailureCounts {
    pub(crate) fn count(&self, fault: Fault) {
        self.0[fault.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, fault: Fault) -> u64 {
        self.0[fault.index()].load(Ordering::Relaxed)
    }
}

/// Why the origin gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum UpstreamFailure {
    #[error("{}", ErrorChain(.0))]
    Client(#[from] hyper_util::client::legacy::Error),
    #[error("{}", ErrorChain(.0))]
    Pool(#[from] PoolError),
    #[error("{}", ErrorChain(.0))]
    Direct(#[from] DirectError),
    #[error("no response headers within {0:?}")]
    HeaderTimeout(Duration),
    /// The client's body broke off or could not be decoded; `0` is what the exchange saw.
    #[error("the client's request body failed: {0}")]
    RequestBodyFailed(Box<UpstreamFailure>),
    /// The client stopped sending its body for the whole `-upstream-timeout`.
    #[error("the client's request body stalled")]
    UploadStalled,
    /// The client's upload fell below the minimum rate.
    #[error("the client's request body came too slowly")]
    UploadTooSlow,
    /// The normalised path and query do not make a URI for the origin.
    #[error("the request path does not make a valid request target")]
    Unforwardable,
    #[error("the origin answered with status {0}, outside HTTP's range")]
    StatusOutOfRange(u16),
    #[error("the origin switched to a protocol the client did not ask for")]
    UnaskedSwitch,
}

impl UpstreamFailure {
    pub(super) fn fault(&self) -> Fault {
        match self {
            UpstreamFailure::RequestBodyFailed(_)
            | UpstreamFailure::UploadStalled
            | UpstreamFailure::UploadTooSlow
            | UpstreamFailure::Unforwardable => Fault::Client,
            UpstreamFailure::Client(err) if is_local_exhaustion(err) => Fault::Concert,
            UpstreamFailure::Pool(PoolError::Connect { source, .. })
            | UpstreamFailure::Direct(DirectError::Connect(PoolError::Connect {
                source, ..
            })) if is_exhaustion(source) => Fault::Concert,
            _ => Fault::Origin,
        }
    }

    fn rejection(&self) -> Rejection {
        match self {
            UpstreamFailure::RequestBodyFailed(_) => Rejection::BadRequestBody,
            UpstreamFailure::UploadStalled | UpstreamFailure::UploadTooSlow => {
                Rejection::UploadTimedOut
            }
            UpstreamFailure::Unforwardable => Rejection::Unforwardable,
            _ => Rejection::BadGateway,
        }
    }
}

/// Counts `failure` by fault, logs it (a warning when the origin or Concert's host is at
/// fault, a debug line for the client's own mistakes) and answers the client.
pub(super) fn answer_failure(
    counts: &FailureCounts,
    method: &http::Method,
    path_and_query: &str,
    failure: &UpstreamFailure,
) -> Response<Body> {
    let fault = failure.fault();
    counts.count(fault);
    let path = path_and_query.split('?').next().unwrap_or_default();
    match fault {
        Fault::Client => tracing::debug!(
            method = %method,
            path,
            error = %failure,
            fault = fault.label(),
            "proxy: the client's request could not be sent on"
        ),
        Fault::Origin | Fault::Concert => tracing::warn!(
            method = %method,
            path,
            error = %failure,
            fault = fault.label(),
            "proxy: upstream request failed"
        ),
    }
    failure.rejection().into_response()
}

/// An origin that failed after its answer began (the body cut short or garbled): the client
/// already has the head, so there is nothing to answer, only to count and log.
pub(super) fn body_failed(counts: &FailureCounts, error: &dyn std::fmt::Display) {
    counts.count(Fault::Origin);
    tracing::warn!(
        error = %error,
        fault = Fault::Origin.label(),
        "proxy: origin response body failed"
    );
}

/// Whether a connection attempt failed for want of something on Concert's own host rather
/// than at the origin.
fn is_exhaustion(error: &std::io::Error) -> bool {
    // EMFILE and ENFILE are 24 and 23 on every Unix; ENOBUFS differs, so only Linux's is named.
    const DESCRIPTORS: [i32; 2] = [24, 23];
    #[cfg(target_os = "linux")]
    const BUFFERS: Option<i32> = Some(105);
    #[cfg(not(target_os = "linux"))]
    const BUFFERS: Option<i32> = None;
    matches!(
        error.kind(),
        std::io::ErrorKind::OutOfMemory | std::io::ErrorKind::AddrNotAvailable
    ) || error
        .raw_os_error()
        .is_some_and(|code| DESCRIPTORS.contains(&code) || Some(code) == BUFFERS)
}

/// [`is_exhaustion`] for the pooled client, whose connect errors carry the `io::Error` deep in
/// their chain.
fn is_local_exhaustion(error: &hyper_util::client::legacy::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return is_exhaustion(io);
        }
        source = err.source();
    }
    false
}

/// Displays an error with its sources, since the client's own message is terse
/// ("client error (Connect)").
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(err) = source {
            write!(f, ": {err}")?;
            source = err.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn connect_error(code: i32) -> UpstreamFailure {
        UpstreamFailure::Pool(PoolError::Connect {
            addr: Arc::from("127.0.0.1:1"),
            source: std::io::Error::from_raw_os_error(code),
        })
    }

    #[test]
    fn each_failure_knows_whose_fault_it_was() {
        assert_eq!(UpstreamFailure::UploadTooSlow.fault(), Fault::Client);
        assert_eq!(UpstreamFailure::UploadStalled.fault(), Fault::Client);
        assert_eq!(UpstreamFailure::Unforwardable.fault(), Fault::Client);
        assert_eq!(
            UpstreamFailure::HeaderTimeout(Duration::from_secs(1)).fault(),
            Fault::Origin
        );
        assert_eq!(
            UpstreamFailure::StatusOutOfRange(700).fault(),
            Fault::Origin
        );
        // Refused by the origin, against out of descriptors here.
        assert_eq!(connect_error(111).fault(), Fault::Origin);
        assert_eq!(connect_error(24).fault(), Fault::Concert);
        assert_eq!(
            UpstreamFailure::Direct(DirectError::Closed).fault(),
            Fault::Origin
        );
    }

    #[tokio::test]
    async fn a_failure_is_counted_and_answered_by_its_fault() {
        let counts = FailureCounts::default();
        let method = http::Method::GET;
        let origin = answer_failure(&counts, &method, "/x?q", &connect_error(111));
        assert_eq!(origin.status(), http::StatusCode::BAD_GATEWAY);
        let client = answer_failure(&counts, &method, "/x", &UpstreamFailure::UploadTooSlow);
        assert_eq!(client.status(), http::StatusCode::REQUEST_TIMEOUT);
        let body = answer_failure(
            &counts,
            &method,
            "/x",
            &UpstreamFailure::RequestBodyFailed(Box::new(UpstreamFailure::UploadStalled)),
        );
        assert_eq!(body.status(), http::StatusCode::BAD_REQUEST);
        assert_eq!(
            [Fault::Client, Fault::Origin, Fault::Concert].map(|fault| counts.get(fault)),
            [2, 1, 0]
        );
    }
}
