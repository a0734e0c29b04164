//! What went wrong talking to the origin on the direct path.

use std::io;

use crate::proxy::pool::PoolError;
use crate::wire::limits::MAX_RESPONSE_HEAD_BYTES;

/// What went wrong talking to the origin.
#[derive(Debug, thiserror::Error)]
pub(in crate::proxy) enum DirectError {
    #[error(transparent)]
    Connect(#[from] PoolError),
    #[error("writing the request to the origin failed")]
    Write(#[source] io::Error),
    #[error("reading the response from the origin failed")]
    Read(#[source] io::Error),
    #[error("reading the response from the origin failed after it began to answer")]
    ReadInHead(#[source] io::Error),
    #[error("the origin closed the connection without answering")]
    Closed,
    #[error("the origin closed the connection in the middle of the response head")]
    ClosedInHead,
    #[error("the origin's response head is invalid: {0}")]
    Invalid(&'static str),
    #[error("the origin's response head could not be parsed")]
    Parse(#[source] httparse::Error),
    #[error("the origin's response head is larger than {MAX_RESPONSE_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("no response head before the deadline")]
    TimedOut,
}

impl DirectError {
    /// Whether the connection failed before the origin answered anything: found closed while
    /// writing, or closed or reset before a single response byte (an interim 1xx counts as an
    /// answer). Only then may an idempotent request be sent again.
    pub(super) fn before_any_answer(&self) -> bool {
        matches!(self, DirectError::Write(_) | DirectError::Closed)
            || matches!(self, DirectError::Read(err) if err.kind() == io::ErrorKind::ConnectionReset)
    }
}
