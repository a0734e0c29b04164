//! What the pipeline carries from stage to stage: the connection a request came on, and what
//! the first stages learned about the request.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU8};

/// What the request pipeline knows about the connection a request came on.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnInfo {
    /// Socket peer, IPv4-mapped addresses unmapped.
    pub peer: Option<IpAddr>,
    /// Whether the connection is Concert's own TLS.
    pub tls: bool,
}

/// What the pipeline learned about a request before routing it.
pub(crate) struct RequestInfo {
    pub conn: ConnInfo,
    pub client: Option<IpAddr>,
    /// The client prefers HTML (a browser): refusals come as pages.
    pub html: bool,
    /// Normalised path plus the request's query: what the origin receives.
    pub target: String,
    /// Length of the path part of `target`.
    pub path_len: usize,
    /// The priority rank the gated stage found (0 = guest), for the request history.
    pub rank: AtomicU8,
    /// Handed to the origin: its answer's time counts as the origin's latency too.
    pub proxied: AtomicBool,
}

impl RequestInfo {
    pub(crate) fn path(&self) -> &str {
        &self.target[..self.path_len]
    }

    /// The query with its `?`, or empty.
    pub(crate) fn query(&self) -> &str {
        &self.target[self.path_len..]
    }
}
